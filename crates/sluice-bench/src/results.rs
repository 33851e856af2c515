//! The results document: what `sluice-bench compare` writes as JSON and what
//! `sluice-bench report` reads back. One document holds the runs of one benchmark file
//! (several tables, each a scenario measured against several targets at several
//! connection counts over several rounds) and, if the file asked for it, the
//! connection-scale measurements. Field names are the JSON names; the document carries
//! its format version so that an old file is refused instead of misread.

use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The format version written in every document.
pub const VERSION: u32 = 1;

/// One invocation of `sluice-bench compare`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Results {
    pub version: u32,
    /// The benchmark file's title ("PostgreSQL: ping and point selects").
    pub title: String,
    /// The command that produced the document, as typed (for the report).
    pub command: String,
    /// When the run started, UTC, RFC 3339 ("2026-11-24T06:10:00Z").
    pub started: String,
    pub machine: Machine,
    /// Target names in the benchmark file's order; the first is what ratios are to.
    pub targets: Vec<String>,
    /// Table descriptions in the benchmark file's order.
    pub tables: Vec<TableInfo>,
    /// Every measured run, in the order they ran.
    pub runs: Vec<RunRecord>,
    /// Connection-scale measurements (empty when the file asked for none).
    #[serde(default)]
    pub scale: Vec<ScaleRecord>,
    /// Login storms (empty when the file asked for none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storm: Vec<StormRecord>,
    /// Failover rounds (empty unless the file is a failover file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover: Vec<FailoverRecord>,
}

/// The machine the run was made on (read from /proc and uname).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_kib: u64,
    pub kernel: String,
}

/// One table of the report: a scenario with fixed settings, measured per target and
/// connection count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TableInfo {
    /// Short identifier, unique in the document ("pg-point-select-prepared"); chart file
    /// names are made from it.
    pub id: String,
    /// Heading ("PostgreSQL point selects, prepared").
    pub title: String,
    /// Free text from the benchmark file, printed under the table.
    #[serde(default)]
    pub notes: String,
    pub settings: Settings,
    /// Connection counts in the order measured.
    pub connections: Vec<usize>,
    /// Rounds per target and connection count.
    pub rounds: u32,
}

/// What one run did, apart from the connection count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// "ping", "point-select", "read-write" or "kv-lookup".
    pub scenario: String,
    /// "pg", "mysql" or "hs".
    pub protocol: String,
    /// "simple" or "prepared" ("-" for kv-lookup).
    pub mode: String,
    /// Requests in flight per connection (kv-lookup), else 1.
    pub depth: usize,
    /// Open loop: requests per second over all connections; None: closed loop.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Rows in the table keys are drawn from.
    pub keys: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
}

/// One measured run of one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    /// `TableInfo::id` of the table the run belongs to.
    pub table: String,
    pub target: String,
    pub connections: usize,
    /// 1-based round number.
    pub round: u32,
    pub summary: Summary,
    /// The target's process over the run, if the benchmark file names one (a proxy);
    /// None for a server measured directly.
    #[serde(default)]
    pub process: Option<ProcUsage>,
}

/// A process's resource use over one run, read from /proc/PID.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct ProcUsage {
    /// User plus system CPU seconds spent during the run (warm-up and drain included:
    /// divide by `Summary::answered`).
    pub cpu_s: f64,
    /// Resident set size at the end of the run, KiB.
    pub rss_kib: u64,
    /// Peak resident set size of the process so far (VmHWM), KiB.
    pub peak_rss_kib: u64,
    /// Waits for a server connection over 100 ms during the run (Sluice's
    /// `slow_waits` counter), for processes that report their counters.
    #[serde(default)]
    pub slow_waits: Option<u64>,
}

/// Connection scale: a proxy's memory for idle clients, and the active set's
/// throughput without and with the idle crowd.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScaleRecord {
    pub target: String,
    /// "pg" or "mysql".
    pub protocol: String,
    /// Idle client connections opened (logged in, then silent).
    pub idle: usize,
    /// Connections running the active scenario.
    pub active: usize,
    /// The active scenario ("ping", ...), and its mode.
    pub scenario: String,
    pub mode: String,
    /// The proxy's resident set before the idle clients connected, and with them all
    /// connected, KiB.
    pub rss_before_kib: u64,
    pub rss_idle_kib: u64,
    /// (rss_idle - rss_before) / idle, bytes.
    pub bytes_per_idle: f64,
    /// The active set alone, and with the idle crowd connected.
    pub without_idle: Summary,
    pub with_idle: Summary,
}

/// A login storm through one target: every round, `clients` clients connect at once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StormRecord {
    pub target: String,
    /// "pg" or "mysql".
    pub protocol: String,
    /// Whether the clients logged in over TLS.
    #[serde(default)]
    pub tls: bool,
    pub clients: usize,
    pub rounds: Vec<StormRound>,
}

/// One storm.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StormRound {
    /// From the first connect to the last client logged in (or given up), seconds.
    pub seconds: f64,
    /// Clients that could not log in (refused, failed or timed out).
    pub failed: usize,
    /// The first failure's message.
    #[serde(default)]
    pub first_error: String,
    /// Each client's time from its connect to its login, median and 99th percentile, ms.
    pub login_p50_ms: f64,
    pub login_p99_ms: f64,
    /// The proxy's CPU time over the storm, seconds.
    pub cpu_seconds: f64,
}

impl StormRecord {
    /// The median round by its time (the rounds' middle one; the later of two).
    pub fn median(&self) -> Option<&StormRound> {
        let mut by_time: Vec<&StormRound> = self.rounds.iter().collect();
        by_time.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        by_time.get(by_time.len() / 2).copied()
    }
}

/// How a failover round was run (the same for every round of a file).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FailoverSettings {
    /// "pg" or "mysql".
    pub protocol: String,
    /// The targets the writers and the readers used.
    pub writes: String,
    pub reads: String,
    pub writers: usize,
    pub readers: usize,
    /// Seconds of load before the kill, and after it.
    pub kill_after_s: f64,
    pub run_after_s: f64,
    /// Seconds between the kill and the promotion.
    #[serde(default)]
    pub promote_after_s: f64,
    /// How the primary was killed and the replica promoted ("SIGKILL to the
    /// postmaster", "pg_promote()").
    pub kill: String,
    pub promote: String,
    /// The cluster's health checks: every `health_interval_ms`, down after
    /// `health_failures` failures in a row.
    pub health_interval_ms: u64,
    pub health_failures: u32,
    /// The write window's target: health_interval × health_failures + 1 s.
    pub target_ms: u64,
    /// The port of the replica promoted (reads are told apart by the port that
    /// answered them).
    pub promoted_port: u16,
    /// Free text from the benchmark file, printed under the tables.
    #[serde(default)]
    pub notes: String,
}

/// One failover round. Times are milliseconds from the kill.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FailoverRecord {
    pub round: u32,
    pub settings: FailoverSettings,
    /// From the kill to the first write acknowledged by the new primary; None: none was
    /// within the run.
    pub write_window_ms: Option<f64>,
    /// How long the promotion took (the promoting statement's answer), and when it had
    /// finished: the write window less this is Sluice's own share.
    pub promote_ms: f64,
    pub promoted_ms: f64,
    /// Replicas the primary waited for before acknowledging a commit, counted before the
    /// load started (0: the database itself may lose acknowledged writes).
    pub sync_replicas: u64,
    /// Writes acknowledged to the clients, in all, and after the kill.
    pub writes_acked: u64,
    pub writes_acked_after_kill: u64,
    /// Writes answered with an error or not at all (never sent again).
    pub writes_failed: u64,
    /// Failed writes whose row is on the new primary all the same (committed, but the
    /// acknowledgement was lost with the server).
    pub writes_failed_present: u64,
    /// Acknowledged writes whose row is not on the new primary: must be 0.
    pub lost: u64,
    /// Rows on the new primary more than once: must be 0.
    pub duplicated: u64,
    /// Times a writer had to open a new connection (its own was closed).
    pub writer_reconnects: u64,
    /// The writers' error messages, and how often each came.
    #[serde(default)]
    pub write_errors: BTreeMap<String, u64>,
    /// The readers, connected all along.
    pub reads: FailoverReads,
    /// New clients of the read-only route, one after the other, 100 ms apart (log in,
    /// one read, leave).
    pub new_clients: FailoverReads,
}

/// What the reads of a failover round's read-only route saw. Times are milliseconds
/// from the kill.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct FailoverReads {
    pub ok: u64,
    pub failed: u64,
    /// From the start of the first failed read to the end of the last; 0: none failed.
    pub window_ms: f64,
    /// The longest successful read that ended after the kill.
    pub max_ms: f64,
    /// Reads sent after the promotion had finished, by the port of the server that
    /// answered them (the promoted one is a primary by then).
    #[serde(default)]
    pub after_promotion: BTreeMap<i64, u64>,
    /// When the last read the promoted server answered after its promotion ended.
    #[serde(default)]
    pub last_new_primary_ms: Option<f64>,
    /// Times a reader had to open a new connection (its own was closed).
    #[serde(default)]
    pub reconnects: u64,
    #[serde(default)]
    pub errors: BTreeMap<String, u64>,
}

impl FailoverRecord {
    /// Whether the round kept every acknowledged write exactly once.
    pub fn consistent(&self) -> bool {
        self.lost == 0 && self.duplicated == 0
    }

    /// Whether the write window met its target.
    pub fn met(&self) -> bool {
        self.write_window_ms
            .is_some_and(|w| w < self.settings.target_ms as f64)
    }
}

impl Results {
    /// Reads a results document, refusing other format versions.
    pub fn from_json(text: &str) -> anyhow::Result<Results> {
        let v: serde_json::Value = serde_json::from_str(text)?;
        let version = v.get("version").and_then(|x| x.as_u64());
        if version != Some(u64::from(VERSION)) {
            anyhow::bail!(
                "results format version {version:?} is not the one this sluice-bench reads ({VERSION})"
            );
        }
        Ok(serde_json::from_value(v)?)
    }
}
