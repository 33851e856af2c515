//! Stats, at the end of the flow: what each statement shape cost. Query digests are
//! kept per (digest id, user, database, listener): count, total / min / max time, a
//! histogram for p50 / p99, rows sent, rows affected, errors, first and last seen.
//! Memory is bounded (`digest_max_entries`): beyond it the least recently seen entry
//! of a shard is evicted and counted. The table is split into shards, each behind its
//! own short lock, so clients recording at once seldom meet.

pub mod counters;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

const SHARDS: usize = 16;
/// Histogram buckets: bucket `i` holds times below 2^(i/2) microseconds (a factor of
/// about 1.41 per bucket, from 1 µs to over an hour).
const BUCKETS: usize = 64;

/// What ran, and who ran it.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    pub digest: u64,
    pub text: &'a str,
    pub user: &'a str,
    pub database: &'a str,
    pub listener: &'a str,
}

impl Key<'_> {
    /// A hash of who ran it (user, database, listener): computed once per session.
    pub fn session(user: &str, database: &str, listener: &str) -> u64 {
        // Each part's hash seeds the next (one-shot hashes of short names are a few
        // dozen instructions; a streaming hasher's set-up costs more than the three).
        [user, database, listener].iter().fold(0, |h, part| {
            xxhash_rust::xxh3::xxh3_64_with_seed(part.as_bytes(), h)
        })
    }
}

/// How a statement ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub rows: u64,
    pub affected: u64,
    pub error: bool,
}

impl Outcome {
    /// What a PostgreSQL CommandComplete tag says a statement did: `SELECT 5` sent
    /// five rows; `INSERT 0 3`, `UPDATE 3`, `DELETE 3`, `MERGE 3` changed three.
    pub fn of_tag(tag: &[u8]) -> Outcome {
        // Read as bytes, from the end for the count: this runs once per statement.
        let tag = tag.strip_suffix(&[0]).unwrap_or(tag);
        let mut start = tag.len();
        while start > 0 && tag[start - 1].is_ascii_digit() {
            start -= 1;
        }
        let digits = &tag[start..];
        let mut n = 0u64;
        // A count is the last word (after a space) and fits: 19 digits always do.
        if start > 0 && tag[start - 1] == b' ' && digits.len() <= 19 {
            for &d in digits {
                n = n * 10 + u64::from(d - b'0');
            }
        }
        let mut o = Outcome::default();
        // The verb is the first word: the tag begins with it and a space.
        let verb = |w: &[u8]| tag.len() > w.len() && tag.starts_with(w) && tag[w.len()] == b' ';
        match tag.first() {
            Some(b'S') if verb(b"SELECT") => o.rows = n,
            Some(b'F') if verb(b"FETCH") => o.rows = n,
            Some(b'C') if verb(b"COPY") => o.rows = n,
            Some(b'M') if verb(b"MOVE") => o.rows = n,
            Some(b'I') if verb(b"INSERT") => o.affected = n,
            Some(b'U') if verb(b"UPDATE") => o.affected = n,
            Some(b'D') if verb(b"DELETE") => o.affected = n,
            Some(b'M') if verb(b"MERGE") => o.affected = n,
            _ => {}
        }
        o
    }
}

struct Entry {
    digest: u64,
    text: Arc<str>,
    user: Arc<str>,
    database: Arc<str>,
    listener: Arc<str>,
    count: u64,
    total: Duration,
    min: Duration,
    max: Duration,
    buckets: [u32; BUCKETS],
    rows: u64,
    affected: u64,
    errors: u64,
    first_seen: SystemTime,
    /// When it was last seen (the wall-clock time is worked out when read).
    last: Instant,
}

/// One row of the digest table, as the console and tests read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub digest: u64,
    pub text: Arc<str>,
    pub user: Arc<str>,
    pub database: Arc<str>,
    pub listener: Arc<str>,
    pub count: u64,
    pub total: Duration,
    pub min: Duration,
    pub max: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub rows: u64,
    pub affected: u64,
    pub errors: u64,
    pub first_seen: SystemTime,
    pub last_seen: SystemTime,
}

pub struct Digests {
    per_shard: usize,
    shards: [Mutex<HashMap<u128, Entry, sluice_sql::Prehashed>>; SHARDS],
    /// Entries evicted to keep within the bound.
    pub evicted: AtomicU64,
}

impl Digests {
    /// A table of at most `max` entries (about: each shard holds a sixteenth).
    pub fn new(max: usize) -> Digests {
        Digests {
            per_shard: max.div_ceil(SHARDS).max(1),
            shards: std::array::from_fn(|_| Mutex::default()),
            evicted: AtomicU64::new(0),
        }
    }

    /// Counts a statement of `key` that started at `at` and ended `now`; `session` is
    /// [`Key::session`] of its user, database and listener.
    pub fn record(
        &self,
        key: &Key<'_>,
        session: u64,
        (took, now): (Duration, Instant),
        outcome: Outcome,
    ) {
        let id = (u128::from(key.digest) << 64) | u128::from(session);
        // (By both halves: one user's statements of different shapes spread.)
        let mut shard = self.shards[((key.digest ^ session) as usize) % SHARDS].lock();
        if !shard.contains_key(&id) && shard.len() >= self.per_shard {
            let oldest = shard.iter().min_by_key(|(_, e)| e.last).map(|(k, _)| *k);
            if let Some(k) = oldest {
                shard.remove(&k);
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let e = shard.entry(id).or_insert_with(|| Entry {
            digest: key.digest,
            text: key.text.into(),
            user: key.user.into(),
            database: key.database.into(),
            listener: key.listener.into(),
            count: 0,
            total: Duration::ZERO,
            min: Duration::MAX,
            max: Duration::ZERO,
            buckets: [0; BUCKETS],
            rows: 0,
            affected: 0,
            errors: 0,
            first_seen: SystemTime::now(),
            last: now,
        });
        e.count += 1;
        e.total += took;
        e.min = e.min.min(took);
        e.max = e.max.max(took);
        let b = &mut e.buckets[bucket(took)];
        *b = b.saturating_add(1);
        e.rows += outcome.rows;
        e.affected += outcome.affected;
        e.errors += u64::from(outcome.error);
        e.last = now;
    }

    /// Every entry.
    /// Entries kept now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn rows(&self) -> Vec<Row> {
        let (wall, mono) = (SystemTime::now(), Instant::now());
        let mut out = Vec::new();
        for shard in &self.shards {
            for e in shard.lock().values() {
                out.push(Row {
                    digest: e.digest,
                    text: e.text.clone(),
                    user: e.user.clone(),
                    database: e.database.clone(),
                    listener: e.listener.clone(),
                    count: e.count,
                    total: e.total,
                    min: e.min,
                    max: e.max,
                    p50: quantile(&e.buckets, e.count, 0.5).min(e.max),
                    p99: quantile(&e.buckets, e.count, 0.99).min(e.max),
                    rows: e.rows,
                    affected: e.affected,
                    errors: e.errors,
                    first_seen: e.first_seen,
                    last_seen: wall - mono.saturating_duration_since(e.last),
                });
            }
        }
        out
    }

    /// Forgets every entry.
    pub fn reset(&self) {
        self.shards.iter().for_each(|s| s.lock().clear());
    }
}

/// floor(2 log2 µs) + 1, in integers: bucket `2k + 1` holds [2^k, 2^k √2) µs and
/// `2k + 2` [2^k √2, 2^(k+1)).
fn bucket(d: Duration) -> usize {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    let k = 63 - us.leading_zeros() as usize;
    // us >= 2^k √2  <=>  us² >= 2^(2k+1)
    let upper = u128::from(us) * u128::from(us) >= 1u128 << (2 * k + 1);
    (2 * k + 1 + usize::from(upper)).min(BUCKETS - 1)
}

/// The upper bound of the bucket holding the `q` quantile.
fn quantile(buckets: &[u32; BUCKETS], count: u64, q: f64) -> Duration {
    let want = ((count as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0u64;
    for (i, n) in buckets.iter().enumerate() {
        seen += u64::from(*n);
        if seen >= want {
            return Duration::from_micros(2f64.powf(i as f64 / 2.0).ceil() as u64);
        }
    }
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tags_say_rows_sent_and_changed() {
        let o = |tag: &[u8]| {
            let o = Outcome::of_tag(tag);
            (o.rows, o.affected)
        };
        assert_eq!(o(b"SELECT 5"), (5, 0));
        assert_eq!(o(b"INSERT 0 3"), (0, 3));
        assert_eq!(o(b"UPDATE 12\0"), (0, 12));
        assert_eq!(o(b"DELETE 18446744073709551615"), (0, 0));
        assert_eq!(o(b"MERGE 7"), (0, 7));
        assert_eq!(o(b"CREATE TABLE"), (0, 0));
        assert_eq!(o(b"SELECT x"), (0, 0));
        assert_eq!(o(b""), (0, 0));
        assert_eq!(o(b"SELECT"), (0, 0));
        assert_eq!(o(b"SELECTED 5"), (0, 0));
        assert_eq!(o(b"FETCH 2\0"), (2, 0));
        assert_eq!(o(b"COPY 9"), (9, 0));
        assert_eq!(o(b"MOVE 4"), (4, 0));
        assert_eq!(o(b"UPDATE 99999999999999999999"), (0, 0));
        assert_eq!(o(b"5"), (0, 0));
        assert_eq!(o(b" 5"), (0, 0));
    }

    fn took(d: Duration) -> (Duration, Instant) {
        (d, Instant::now())
    }

    #[test]
    fn buckets_are_half_powers_of_two() {
        // The integer form agrees with floor(2 log2 µs) + 1.
        for us in (1..5000u64).chain([1 << 20, (1 << 20) + 1, 1_482_910, u64::MAX / 3]) {
            let want = (((us as f64).log2() * 2.0).floor() as usize + 1).min(BUCKETS - 1);
            assert_eq!(bucket(Duration::from_micros(us)), want, "{us} µs");
        }
        assert_eq!(bucket(Duration::ZERO), 1);
        assert_eq!(bucket(Duration::MAX), BUCKETS - 1);
    }

    fn key(digest: u64, user: &str) -> Key<'_> {
        Key {
            digest,
            text: "SELECT ?",
            user,
            database: "d",
            listener: "l",
        }
    }

    #[test]
    fn counts_times_and_quantiles() {
        let d = Digests::new(100);
        for ms in 1..=100 {
            let outcome = Outcome {
                rows: 1,
                affected: 0,
                error: ms == 100,
            };
            d.record(&key(1, "a"), 1, took(Duration::from_millis(ms)), outcome);
        }
        d.record(
            &key(1, "b"),
            2,
            took(Duration::from_millis(5)),
            Outcome::default(),
        );
        let rows = d.rows();
        assert_eq!(rows.len(), 2);
        let a = rows.iter().find(|r| &*r.user == "a").unwrap();
        assert_eq!((a.count, a.rows, a.errors), (100, 100, 1));
        assert_eq!(a.total, Duration::from_millis(5050));
        assert_eq!(
            (a.min, a.max),
            (Duration::from_millis(1), Duration::from_millis(100))
        );
        // Within a bucket (a factor of 1.42) of the true values.
        assert!(
            a.p50 >= Duration::from_millis(50) && a.p50 < Duration::from_millis(72),
            "{:?}",
            a.p50
        );
        assert!(
            a.p99 >= Duration::from_millis(99) && a.p99 <= Duration::from_millis(100),
            "{:?}",
            a.p99
        );
    }

    #[test]
    fn bounded_with_least_recent_evicted() {
        let d = Digests::new(32);
        for i in 0..1000u64 {
            d.record(
                &key(i, "u"),
                3,
                took(Duration::from_micros(10)),
                Outcome::default(),
            );
        }
        let n = d.rows().len();
        assert!(n <= 32, "{n}");
        assert_eq!(d.evicted.load(Ordering::Relaxed), 1000 - n as u64);
        // The most recent are kept.
        assert!(d.rows().iter().any(|r| r.digest == 999));
        d.reset();
        assert!(d.rows().is_empty());
    }
}
