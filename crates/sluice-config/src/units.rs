//! Durations and byte sizes as written in the configuration file. Both are strict: a duration
//! is a bare integer (seconds) or a string of digits followed by exactly one of `ms`, `s`, `m`,
//! `h`; a size is a bare integer (bytes) or a string of digits followed by exactly one of `B`,
//! `KiB`, `MiB`, `GiB`. Anything else (fractions, spaces, `KB`, `1h30m`) is an error, so a typo
//! never silently means something else.

use std::time::Duration;

const DURATION_UNITS: &[(&str, u64)] = &[("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000)];
const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
];

/// Parses `"250ms"`, `"30s"`, `"10m"`, `"1h"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = split_number(text).ok_or_else(|| duration_hint(text))?;
    let factor = DURATION_UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, factor)| *factor)
        .ok_or_else(|| duration_hint(text))?;
    number
        .checked_mul(factor)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration {text:?} is too large"))
}

/// A bare integer duration: seconds.
pub fn duration_from_seconds(seconds: i64) -> Result<Duration, String> {
    u64::try_from(seconds)
        .map(Duration::from_secs)
        .map_err(|_| format!("duration must not be negative, found {seconds}"))
}

/// Parses `"512B"`, `"64KiB"`, `"16MiB"`, `"1GiB"` into bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (number, unit) = split_number(text).ok_or_else(|| size_hint(text))?;
    let factor = SIZE_UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, factor)| *factor)
        .ok_or_else(|| size_hint(text))?;
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// A bare integer size: bytes.
pub fn size_from_bytes(bytes: i64) -> Result<u64, String> {
    u64::try_from(bytes).map_err(|_| format!("size must not be negative, found {bytes}"))
}

/// Formats a duration the way the file would write it (`"30s"`, `"250ms"`, `"10m"`, `"1h"`).
pub fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    for (unit, factor) in DURATION_UNITS.iter().rev() {
        let factor = u128::from(*factor);
        if ms != 0 && ms.is_multiple_of(factor) {
            return format!("{}{unit}", ms / factor);
        }
    }
    if ms == 0 {
        "0s".to_string()
    } else {
        format!("{ms}ms")
    }
}

/// Formats a byte count the way the file would write it (`"64MiB"`, `"1000B"`).
pub fn format_size(bytes: u64) -> String {
    for (unit, factor) in SIZE_UNITS.iter().rev() {
        if bytes != 0 && bytes.is_multiple_of(*factor) {
            return format!("{}{unit}", bytes / factor);
        }
    }
    format!("{bytes}B")
}

/// Splits leading ASCII digits from the rest; `None` if there are no digits or they overflow.
fn split_number(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (number, unit) = text.split_at(digits);
    Some((number.parse().ok()?, unit))
}

fn duration_hint(text: &str) -> String {
    format!(
        "invalid duration {text:?}; expected an integer followed by ms, s, m or h \
         (e.g. \"250ms\", \"30s\", \"10m\", \"1h\"), or a bare integer number of seconds"
    )
}

fn size_hint(text: &str) -> String {
    format!(
        "invalid size {text:?}; expected an integer followed by B, KiB, MiB or GiB \
         (e.g. \"512B\", \"64KiB\", \"16MiB\", \"1GiB\"), or a bare integer number of bytes"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(duration_from_seconds(5), Ok(Duration::from_secs(5)));
        assert!(duration_from_seconds(-1).is_err());
        for bad in [
            "",
            "s",
            "30",
            "1.5s",
            " 30s",
            "30 s",
            "30S",
            "1h30m",
            "-1s",
            "30sec",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_duration("18446744073709551615h").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(size_from_bytes(1024), Ok(1024));
        assert!(size_from_bytes(-5).is_err());
        for bad in [
            "",
            "64",
            "64KB",
            "64kib",
            "64 MiB",
            "1.5GiB",
            "MiB",
            "64M",
            "99999999999GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(format_size(1000), "1000B");
        assert_eq!(format_size(0), "0B");
    }
}
