//! Counters the admin console and `/metrics` read: per listener, statements, errors,
//! clients and a latency histogram. They are bumped where a statement's answer is
//! counted in its digest (session/judge.rs), with relaxed atomics only, so counting
//! costs a few nanoseconds per statement; `digest_max_entries = 0` turns both off.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds (the last bucket is +Inf).
pub const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A latency histogram with fixed buckets, as Prometheus keeps them.
#[derive(Default)]
pub struct Histogram {
    /// Counts per bucket (not cumulative); the last is above every bound.
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let i = BUCKETS_US.partition_point(|b| *b < us);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket bound (the last is the total), and the sum.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = [0u64; BUCKETS_US.len() + 1];
        let mut total = 0;
        for (i, c) in self.counts.iter().enumerate() {
            total += c.load(Ordering::Relaxed);
            cumulative[i] = total;
        }
        HistogramSnapshot {
            cumulative,
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HistogramSnapshot {
    pub cumulative: [u64; BUCKETS_US.len() + 1],
    pub sum_us: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.cumulative[BUCKETS_US.len()]
    }

    /// The `q` quantile (0..=1) in microseconds, interpolated inside its bucket; None
    /// with no samples.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * n as f64).max(1.0);
        let mut below = 0u64;
        let mut lower = 0u64;
        for (i, c) in self.cumulative.iter().enumerate() {
            let upper = BUCKETS_US.get(i).copied();
            if (*c as f64) >= rank {
                let upper = upper.unwrap_or(lower.saturating_mul(2).max(1));
                let inside = (*c - below).max(1) as f64;
                let at = (rank - below as f64) / inside;
                return Some(lower as f64 + at * (upper - lower) as f64);
            }
            below = *c;
            lower = upper.unwrap_or(lower);
        }
        Some(lower as f64)
    }

    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        let mut d = *self;
        for (a, b) in d.cumulative.iter_mut().zip(earlier.cumulative) {
            *a = a.saturating_sub(b);
        }
        d.sum_us = d.sum_us.saturating_sub(earlier.sum_us);
        d
    }
}

/// One listener's counters.
#[derive(Default)]
pub struct ListenerCounters {
    /// Clients that logged in.
    pub logins: AtomicU64,
    /// Statements answered, and those answered with an error.
    pub queries: AtomicU64,
    pub errors: AtomicU64,
    /// Rows sent to clients.
    pub rows: AtomicU64,
    pub latency: Histogram,
    /// Bytes read from and written to clients (every session, digests or not).
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

impl ListenerCounters {
    pub fn received(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn sent(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn record(&self, took: Duration, outcome: &super::Outcome) {
        self.queries.fetch_add(1, Ordering::Relaxed);
        if outcome.error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        if outcome.rows > 0 {
            self.rows.fetch_add(outcome.rows, Ordering::Relaxed);
        }
        self.latency.record(took);
    }
}

/// Every listener's counters, by name (kept for the process's life: a listener a
/// reload removes keeps its totals, as Prometheus counters must not go back).
#[derive(Default)]
pub struct Counters {
    by_listener: RwLock<HashMap<Arc<str>, Arc<ListenerCounters>>>,
}

impl Counters {
    pub fn listener(&self, name: &str) -> Arc<ListenerCounters> {
        if let Some(c) = self.by_listener.read().get(name) {
            return c.clone();
        }
        self.by_listener
            .write()
            .entry(Arc::from(name))
            .or_default()
            .clone()
    }

    /// Every listener's counters, by name, sorted.
    pub fn all(&self) -> Vec<(Arc<str>, Arc<ListenerCounters>)> {
        let mut v: Vec<_> = self
            .by_listener
            .read()
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// `busy_poll_us` at work, process-wide: waits on a socket that found bytes (or the
/// end) before the budget was spent, and waits that spent it and went to sleep.
pub static BUSY_POLL_HITS: AtomicU64 = AtomicU64::new(0);
pub static BUSY_POLL_MISSES: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_quantiles() {
        let h = Histogram::default();
        for us in [50, 150, 150, 900, 20_000_000] {
            h.record(Duration::from_micros(us));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 5);
        assert_eq!(s.cumulative[0], 1); // <= 100us
        assert_eq!(s.cumulative[1], 3); // <= 250us
        assert_eq!(s.cumulative[3], 4); // <= 1ms
        assert_eq!(s.sum_us, 50 + 300 + 900 + 20_000_000);
        let p50 = s.quantile_us(0.5).unwrap_or_default();
        assert!((100.0..=250.0).contains(&p50), "{p50}");
        assert!(s.quantile_us(1.0).unwrap_or_default() >= 10_000_000.0);
        assert_eq!(HistogramSnapshot::default().quantile_us(0.5), None);
        let later = h.snapshot();
        assert_eq!(later.since(&s).count(), 0);
    }
}
