//! The SQL firewall: after the rules in the flow (session/judge.rs asks both), it keeps
//! per user the statement shapes (digest ids) that may run. In `learning` mode every
//! new digest joins the user's allowlist (logged once); in `detecting` mode a digest not
//! on the list is logged (once per user and digest) and counted, and runs; in
//! `protecting` mode it is refused. The allowlist lives in a file (file.rs) written while
//! learning and read at start, so a list learned in staging can be shipped.

mod file;

use parking_lot::{Mutex, RwLock};
use sluice_config::{Config, FirewallMode};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often at most the allowlist file is written while learning.
const WRITE_EVERY: Duration = Duration::from_secs(2);

/// One allowed statement shape of one user.
#[derive(Debug)]
pub struct Entry {
    pub user: String,
    pub digest: u64,
    pub text: String,
    /// Unix seconds.
    pub first_seen: u64,
    pub count: AtomicU64,
}

/// What the firewall says of a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Allowed,
    /// Not on the list, and it runs (detecting).
    Unknown,
    /// Not on the list: refused (protecting).
    Refused,
}

pub struct Firewall {
    file: Option<PathBuf>,
    entries: RwLock<HashMap<u128, Arc<Entry>, sluice_sql::Prehashed>>,
    dirty: AtomicBool,
    last_write: Mutex<Option<Instant>>,
    /// Unknown digests already logged, by user and digest.
    warned: Mutex<HashSet<u128>>,
    /// Statements not on the list that ran (detecting) or were refused (protecting).
    pub detected: AtomicU64,
    pub refused: AtomicU64,
    pub learned: AtomicU64,
}

/// A user's key in the list: the user's hash ([`user_hash`]) and the digest.
pub fn key(user: &str, digest: u64) -> u128 {
    (u128::from(user_hash(user)) << 64) | u128::from(digest)
}

/// The hash of a user name the list is keyed by (a session computes it once).
pub fn user_hash(user: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user.as_bytes())
}

impl Firewall {
    /// A firewall with no list and no file (every mode off).
    pub fn none() -> Firewall {
        Firewall {
            file: None,
            entries: RwLock::default(),
            dirty: AtomicBool::new(false),
            last_write: Mutex::new(None),
            warned: Mutex::default(),
            detected: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            learned: AtomicU64::new(0),
        }
    }

    /// The firewall of `config`, with the allowlist file read if it exists. A mode
    /// that reads the list with no file to read is an error naming the file.
    pub fn load(config: &Config) -> Result<Firewall, String> {
        let fw = Firewall {
            file: config.firewall.allowlist_file.clone(),
            ..Firewall::none()
        };
        let Some(path) = &fw.file else {
            return Ok(fw);
        };
        let reads = any_mode(config, |m| {
            matches!(m, FirewallMode::Detecting | FirewallMode::Protecting)
        });
        match file::read(path) {
            Ok(list) => {
                let mut map = fw.entries.write();
                for e in list {
                    map.insert(key(&e.user, e.digest), Arc::new(e));
                }
            }
            Err(file::ReadError::Missing) if !reads => {}
            Err(file::ReadError::Missing) => {
                return Err(format!(
                    "the firewall allowlist {} does not exist; learn one first (mode = \"learning\")",
                    path.display()
                ));
            }
            Err(file::ReadError::Bad(e)) => {
                return Err(format!("the firewall allowlist {}: {e}", path.display()));
            }
        }
        Ok(fw)
    }

    /// The mode for a client: its user's, else its listener's, else `[firewall]`'s.
    pub fn mode_for(
        config: &Config,
        user: &str,
        listener: &sluice_config::Listener,
    ) -> FirewallMode {
        config
            .users
            .get(user)
            .and_then(|u| u.firewall)
            .or(listener.firewall)
            .unwrap_or(config.firewall.mode)
    }

    /// Checks a statement of `user` (its digest and digest text) in `mode`.
    pub fn check(&self, mode: FirewallMode, user: &str, digest: u64, text: &str) -> Check {
        self.check_hashed(mode, (user_hash(user), user), digest, text)
    }

    /// [`Firewall::check`] with the user's [`user_hash`] computed already.
    pub fn check_hashed(
        &self,
        mode: FirewallMode,
        (hash, user): (u64, &str),
        digest: u64,
        text: &str,
    ) -> Check {
        if mode == FirewallMode::Off {
            return Check::Allowed;
        }
        let k = (u128::from(hash) << 64) | u128::from(digest);
        if let Some(e) = self.entries.read().get(&k) {
            e.count.fetch_add(1, Ordering::Relaxed);
            return Check::Allowed;
        }
        match mode {
            FirewallMode::Learning => {
                let mut map = self.entries.write();
                map.entry(k).or_insert_with(|| {
                    tracing::info!(user, digest = %format_args!("{digest:#018x}"), text, "firewall learned a statement");
                    self.learned.fetch_add(1, Ordering::Relaxed);
                    Arc::new(Entry {
                        user: user.to_owned(),
                        digest,
                        text: text.to_owned(),
                        first_seen: now(),
                        count: AtomicU64::new(1),
                    })
                });
                self.dirty.store(true, Ordering::Relaxed);
                Check::Allowed
            }
            FirewallMode::Detecting | FirewallMode::Protecting => {
                let refused = mode == FirewallMode::Protecting;
                let counter = if refused {
                    &self.refused
                } else {
                    &self.detected
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let mut warned = self.warned.lock();
                if warned.len() >= 100_000 {
                    // Bounded: past it, unknown statements may be logged again.
                    warned.clear();
                }
                if warned.insert(k) {
                    tracing::warn!(user, digest = %format_args!("{digest:#018x}"), text, refused, "statement not on the firewall allowlist");
                }
                if refused {
                    Check::Refused
                } else {
                    Check::Unknown
                }
            }
            FirewallMode::Off => Check::Allowed,
        }
    }

    /// Writes the allowlist when something was learned since it was last written (at
    /// most every two seconds unless `now`).
    pub fn flush(&self, now: bool) {
        let Some(path) = &self.file else {
            return;
        };
        if !self.dirty.load(Ordering::Relaxed) {
            return;
        }
        let mut last = self.last_write.lock();
        if !now && last.is_some_and(|t| t.elapsed() < WRITE_EVERY) {
            return;
        }
        self.dirty.store(false, Ordering::Relaxed);
        *last = Some(Instant::now());
        let mut list: Vec<Arc<Entry>> = self.entries.read().values().cloned().collect();
        list.sort_by(|a, b| {
            (&a.user, a.first_seen, a.digest).cmp(&(&b.user, b.first_seen, b.digest))
        });
        if let Err(e) = file::write(path, &list) {
            tracing::warn!(file = %path.display(), error = %e, "cannot write the firewall allowlist");
            self.dirty.store(true, Ordering::Relaxed);
        }
    }

    /// The list as it stands: (user, digest, text, count).
    pub fn entries(&self) -> Vec<(String, u64, String, u64)> {
        self.entries
            .read()
            .values()
            .map(|e| {
                (
                    e.user.clone(),
                    e.digest,
                    e.text.clone(),
                    e.count.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

/// Whether any user, listener or `[firewall]` has a mode that `f` accepts.
fn any_mode(config: &Config, f: impl Fn(FirewallMode) -> bool) -> bool {
    f(config.firewall.mode)
        || config.users.values().filter_map(|u| u.firewall).any(&f)
        || config.listeners.values().filter_map(|l| l.firewall).any(&f)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
