//! The allowlist file: TOML (or JSON when its name ends in `.json`), one entry per user
//! and digest with its text, when it was first seen and how often it ran:
//!
//! ```toml
//! [[allow]]
//! user = "app"
//! digest = "0x1b2c3d4e5f607182"
//! text = "SELECT c FROM t WHERE id = ?"
//! first_seen = "2026-11-26T04:00:00Z"
//! count = 12
//! ```
//!
//! Written to a temporary file beside it and renamed over it, so a reader never sees
//! half a list.

use super::Entry;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Serialize, Deserialize, Default)]
struct ListFile {
    #[serde(default)]
    allow: Vec<Item>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Item {
    user: String,
    digest: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    first_seen: Option<String>,
    #[serde(default)]
    count: u64,
}

pub enum ReadError {
    Missing,
    Bad(String),
}

fn json(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

pub fn read(path: &Path) -> Result<Vec<Entry>, ReadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing),
        Err(e) => return Err(ReadError::Bad(e.to_string())),
    };
    let list: ListFile = if json(path) {
        serde_json::from_str(&text).map_err(|e| ReadError::Bad(e.to_string()))?
    } else {
        toml::from_str(&text).map_err(|e| ReadError::Bad(e.to_string()))?
    };
    list.allow
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let hex = item.digest.trim_start_matches("0x");
            let digest = u64::from_str_radix(hex, 16).map_err(|_| {
                ReadError::Bad(format!(
                    "entry {}: digest {:?} is not a hex digest id",
                    i + 1,
                    item.digest
                ))
            })?;
            let first_seen = match &item.first_seen {
                Some(t) => parse_time(t).ok_or_else(|| {
                    ReadError::Bad(format!(
                        "entry {}: first_seen {t:?} is not a UTC time such as 2026-11-26T04:00:00Z",
                        i + 1
                    ))
                })?,
                None => 0,
            };
            Ok(Entry {
                user: item.user,
                digest,
                text: item.text,
                first_seen,
                count: AtomicU64::new(item.count),
            })
        })
        .collect()
}

pub fn write(path: &Path, list: &[Arc<Entry>]) -> std::io::Result<()> {
    let file = ListFile {
        allow: list
            .iter()
            .map(|e| Item {
                user: e.user.clone(),
                digest: format!("{:#018x}", e.digest),
                text: e.text.clone(),
                first_seen: Some(format_time(e.first_seen)),
                count: e.count.load(Ordering::Relaxed),
            })
            .collect(),
    };
    let text = if json(path) {
        serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?
    } else {
        toml::to_string(&file).map_err(std::io::Error::other)?
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// `2026-11-26T04:00:00Z` from Unix seconds.
pub fn format_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Unix seconds from `YYYY-MM-DDTHH:MM:SSZ`.
pub fn parse_time(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(y, m, d);
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

// Howard Hinnant's civil calendar algorithms.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
