//! What a run measured: operations completed inside the measurement window, errors,
//! misses (a lookup that found no row), and a latency histogram. Every connection keeps
//! a [`Stats`] of its own (no sharing on the hot path); the run merges them at the end
//! into a [`Summary`], which is what gets printed and written as JSON.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Answers received by every connection of the process so far: what the progress line
/// reads (one run at a time per process).
pub static LIVE_ANSWERS: AtomicU64 = AtomicU64::new(0);

/// Highest latency the histogram holds exactly (larger values are clamped to it): 60 s.
const MAX_LATENCY_US: u64 = 60_000_000;

/// One connection's (or, merged, one run's) counts and latencies.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Operations answered successfully inside the window.
    pub ops: u64,
    /// Operations answered with an error, or lost with a broken connection.
    pub errors: u64,
    /// Successful lookups that found no row (a key outside the table).
    pub misses: u64,
    /// Every answer received, warm-up and the drain after the window included: what
    /// CPU time read around the whole run divides by.
    pub answered: u64,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
    /// Latency of each successful operation, microseconds.
    hist: Histogram<u64>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            ops: 0,
            errors: 0,
            misses: 0,
            answered: 0,
            first_error: None,
            // 3 significant digits between 1 µs and 60 s: a few tens of kB per histogram.
            hist: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .expect("constant histogram bounds are valid"),
        }
    }

    /// A successful operation that took `latency`.
    pub fn record(&mut self, latency: Duration) {
        self.ops += 1;
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.hist.saturating_record(us.clamp(1, MAX_LATENCY_US));
    }

    /// A successful lookup that found no row (counted as an operation too).
    pub fn record_miss(&mut self, latency: Duration) {
        self.record(latency);
        self.misses += 1;
    }

    /// An answer arrived (inside the window or not).
    pub fn answer(&mut self) {
        self.answered += 1;
        LIVE_ANSWERS.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` operations that failed; `what` is kept if it is the first error.
    pub fn record_errors(&mut self, n: u64, what: impl FnOnce() -> String) {
        self.errors += n;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }

    /// Adds another connection's numbers to these.
    pub fn merge(&mut self, other: &Stats) {
        self.ops += other.ops;
        self.errors += other.errors;
        self.misses += other.misses;
        self.answered += other.answered;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        // Both histograms have the same bounds, so adding cannot fail; clamp anyway.
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                let value = v.value_iterated_to().clamp(1, MAX_LATENCY_US);
                self.hist.saturating_record_n(value, v.count_at_value());
            }
        }
    }

    /// The report of a run that measured for `elapsed`.
    pub fn summarize(&self, elapsed: Duration) -> Summary {
        let secs = elapsed.as_secs_f64();
        let q = |p: f64| {
            if self.hist.is_empty() {
                0
            } else {
                self.hist.value_at_quantile(p)
            }
        };
        Summary {
            ops: self.ops,
            errors: self.errors,
            misses: self.misses,
            answered: self.answered,
            elapsed_s: secs,
            ops_per_sec: if secs > 0.0 {
                self.ops as f64 / secs
            } else {
                0.0
            },
            latency_us: Latency {
                mean: if self.hist.is_empty() {
                    0.0
                } else {
                    self.hist.mean()
                },
                p50: q(0.50),
                p90: q(0.90),
                p99: q(0.99),
                p999: q(0.999),
                max: if self.hist.is_empty() {
                    0
                } else {
                    self.hist.max()
                },
            },
            first_error: self.first_error.clone(),
        }
    }
}

/// Latency percentiles in microseconds (histogram buckets: 3 significant digits).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// A run's results.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub ops: u64,
    pub errors: u64,
    pub misses: u64,
    /// Every answer received, warm-up and drain included.
    pub answered: u64,
    /// Length of the measurement window, seconds.
    pub elapsed_s: f64,
    pub ops_per_sec: f64,
    pub latency_us: Latency,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl Summary {
    /// One human-readable line (no trailing newline).
    pub fn line(&self) -> String {
        let l = &self.latency_us;
        let mut s = format!(
            "{:.0} ops/s ({} in {:.2} s), errors {}, misses {}, latency us: p50 {} p90 {} p99 {} p99.9 {} max {}",
            self.ops_per_sec,
            self.ops,
            self.elapsed_s,
            self.errors,
            self.misses,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max
        );
        if let Some(e) = &self.first_error {
            s.push_str(&format!("; first error: {e}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn empty_stats_summarize_to_zeros() {
        let s = Stats::new().summarize(Duration::from_secs(2));
        assert_eq!(s.ops, 0);
        assert_eq!(s.ops_per_sec, 0.0);
        assert_eq!(s.latency_us.p50, 0);
        assert_eq!(s.latency_us.max, 0);
        assert_eq!(s.latency_us.mean, 0.0);
        assert!(s.first_error.is_none());
    }

    #[test]
    fn percentiles_and_rate() {
        let mut s = Stats::new();
        for i in 1..=1000 {
            s.record(us(i));
        }
        let sum = s.summarize(Duration::from_secs(4));
        assert_eq!(sum.ops, 1000);
        assert_eq!(sum.ops_per_sec, 250.0);
        assert_eq!(sum.latency_us.p50, 500);
        assert_eq!(sum.latency_us.p90, 900);
        assert_eq!(sum.latency_us.p99, 990);
        assert_eq!(sum.latency_us.p999, 999);
        assert_eq!(sum.latency_us.max, 1000);
        assert!((sum.latency_us.mean - 500.5).abs() < 1.0);
    }

    #[test]
    fn zero_and_huge_latencies_are_clamped() {
        let mut s = Stats::new();
        s.record(Duration::ZERO);
        s.record(Duration::from_secs(3600));
        let sum = s.summarize(Duration::from_secs(1));
        assert_eq!(sum.ops, 2);
        assert_eq!(sum.latency_us.p50, 1);
        // Within the histogram's 3-digit precision of the 60 s bound.
        assert!(sum.latency_us.max >= MAX_LATENCY_US * 999 / 1000);
        assert!(sum.latency_us.max <= MAX_LATENCY_US * 1001 / 1000);
    }

    #[test]
    fn merge_adds_counts_and_histograms() {
        let mut a = Stats::new();
        let mut b = Stats::new();
        a.record(us(10));
        a.record_miss(us(20));
        b.record(us(30));
        a.answer();
        b.answer();
        b.answer();
        b.record_errors(3, || "boom".to_string());
        b.record_errors(1, || "second".to_string());
        a.merge(&b);
        let sum = a.summarize(Duration::from_secs(1));
        assert_eq!(sum.ops, 3);
        assert_eq!(sum.misses, 1);
        assert_eq!(sum.errors, 4);
        assert_eq!(sum.answered, 3);
        assert_eq!(sum.first_error.as_deref(), Some("boom"));
        assert_eq!(sum.latency_us.p50, 20);
        assert_eq!(sum.latency_us.max, 30);
    }

    #[test]
    fn merge_keeps_the_first_error_seen() {
        let mut a = Stats::new();
        a.record_errors(1, || "first".to_string());
        let mut b = Stats::new();
        b.record_errors(1, || "other".to_string());
        a.merge(&b);
        assert_eq!(a.first_error.as_deref(), Some("first"));
    }

    #[test]
    fn summary_serializes_and_prints() {
        let mut s = Stats::new();
        s.record(us(100));
        let sum = s.summarize(Duration::from_millis(500));
        let v: serde_json::Value = serde_json::to_value(&sum).expect("serializes");
        assert_eq!(v["ops"], 1);
        assert_eq!(v["ops_per_sec"], 2.0);
        assert_eq!(v["latency_us"]["p99"], 100);
        assert!(v.get("first_error").is_none());
        let line = sum.line();
        assert!(line.starts_with("2 ops/s (1 in 0.50 s)"), "{line}");
        assert!(line.contains("p50 100"), "{line}");
    }
}
