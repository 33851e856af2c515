//! The numbers a report shows for one group of runs: one table, one connection count,
//! one target, all its rounds.

use crate::results::RunRecord;

/// A run counts when it had no error and completed something.
pub(super) fn run_ok(r: &RunRecord) -> bool {
    r.summary.errors == 0 && r.summary.ops > 0
}

/// The median of `values` (non-finite values dropped); the mean of the two middle ones
/// for an even count; None when nothing is left.
pub(super) fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        Some(v[mid])
    } else {
        Some((v[mid - 1] + v[mid]) / 2.0)
    }
}

/// Latency percentiles, medians over the ok runs, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

/// One group's figures.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GroupStats {
    /// Runs in the group (rounds).
    pub runs: usize,
    /// Runs without errors that completed something.
    pub ok: usize,
    /// Median throughput over the ok runs.
    pub ops_per_sec: Option<f64>,
    pub latency: Option<Percentiles>,
    /// Median over the ok runs with process figures of CPU milliseconds per 1,000
    /// answers.
    pub cpu_ms_per_1k: Option<f64>,
    /// Highest peak RSS of the target's process over the group, MiB.
    pub peak_rss_mib: Option<f64>,
    /// Waits for a server connection over 100 ms, summed over the runs that report it.
    pub slow_waits: Option<u64>,
}

impl GroupStats {
    /// The figures of `runs` (all of one group).
    pub fn of(runs: &[&RunRecord]) -> GroupStats {
        let ok: Vec<&RunRecord> = runs.iter().copied().filter(|r| run_ok(r)).collect();
        let lat = |f: fn(&RunRecord) -> u64| median(ok.iter().map(|r| f(r) as f64));
        let latency = match (
            lat(|r| r.summary.latency_us.p50),
            lat(|r| r.summary.latency_us.p90),
            lat(|r| r.summary.latency_us.p99),
            lat(|r| r.summary.latency_us.p999),
        ) {
            (Some(p50), Some(p90), Some(p99), Some(p999)) => Some(Percentiles {
                p50,
                p90,
                p99,
                p999,
            }),
            _ => None,
        };
        let cpu = ok.iter().filter_map(|r| {
            let p = r.process.as_ref()?;
            (r.summary.answered > 0).then(|| p.cpu_s * 1e6 / r.summary.answered as f64)
        });
        let peak = runs
            .iter()
            .filter_map(|r| r.process.as_ref().map(|p| p.peak_rss_kib))
            .max();
        let slow = runs
            .iter()
            .filter_map(|r| r.process.as_ref().and_then(|p| p.slow_waits));
        GroupStats {
            slow_waits: slow.clone().next().map(|_| slow.sum()),
            runs: runs.len(),
            ok: ok.len(),
            ops_per_sec: median(ok.iter().map(|r| r.summary.ops_per_sec)),
            latency,
            cpu_ms_per_1k: median(cpu),
            peak_rss_mib: peak.map(|k| k as f64 / 1024.0),
        }
    }

    /// Every run of the group had no error and completed something.
    pub fn clean(&self) -> bool {
        self.runs > 0 && self.ok == self.runs
    }
}

/// The ratio cell of `own` against `reference` (the first target's group at the same
/// table and connection count): two decimals, "— (errors)" when either group had a run
/// with errors or nothing completed, "—" when there is no reference.
pub(super) fn ratio_cell(own: &GroupStats, reference: Option<&GroupStats>) -> String {
    if !own.clean() || reference.is_some_and(|r| !r.clean()) {
        return format!("{} (errors)", super::text::NONE);
    }
    let Some(reference) = reference else {
        return super::text::NONE.to_string();
    };
    match (own.ops_per_sec, reference.ops_per_sec) {
        (Some(a), Some(b)) if b > 0.0 && (a / b).is_finite() => format!("{:.2}", a / b),
        _ => super::text::NONE.to_string(),
    }
}
