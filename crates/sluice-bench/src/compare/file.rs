//! The benchmark file: processes to start (servers, proxies), targets (addresses to
//! measure, each optionally tied to a process whose CPU and memory are read), tables
//! (a scenario at several connection counts), the connection-scale measurement, or a
//! failover (its own kind of file: every round starts the processes afresh).
//! TOML; unknown keys are errors, and every name a section refers to must exist.

use crate::scenario::sql::{Mode, Protocol};
use crate::spec::Scenario;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchFile {
    pub title: String,
    #[serde(default = "d_rounds")]
    pub rounds: u32,
    /// Measured seconds per run.
    #[serde(default = "d_duration")]
    pub duration: f64,
    /// Warm-up seconds per run.
    #[serde(default = "d_warmup")]
    pub warmup: f64,
    /// Rows of the table (keys 1..=keys).
    #[serde(default = "d_keys")]
    pub keys: u64,
    /// Load-generator runtime threads.
    #[serde(default = "d_threads")]
    pub threads: usize,
    #[serde(default)]
    pub process: Vec<ProcessSpec>,
    pub target: Vec<TargetSpec>,
    #[serde(default)]
    pub table: Vec<TableSpec>,
    #[serde(default)]
    pub scale: Option<ScaleSpec>,
    #[serde(default)]
    pub storm: Option<StormSpec>,
    #[serde(default)]
    pub failover: Option<FailoverSpec>,
}

fn d_rounds() -> u32 {
    3
}
fn d_duration() -> f64 {
    5.0
}
fn d_warmup() -> f64 {
    1.0
}
fn d_keys() -> u64 {
    100_000
}
fn d_threads() -> usize {
    1
}
fn d_db() -> String {
    "bench".to_string()
}
fn d_one() -> usize {
    1
}
fn d_ready_timeout() -> f64 {
    120.0
}
fn d_active() -> usize {
    16
}
fn d_settle() -> f64 {
    2.0
}

/// A process started before the runs and stopped (SIGTERM, then SIGKILL) after them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub name: String,
    /// Program and arguments; a relative program path is taken from the working directory.
    pub command: Vec<String>,
    /// Addresses that accept TCP connections once the process is ready.
    #[serde(default)]
    pub ready: Vec<String>,
    #[serde(default = "d_ready_timeout")]
    pub ready_timeout: f64,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The process writes its counters to its log on SIGUSR1 (Sluice): the slow waits
    /// of each run are read from there.
    #[serde(default)]
    pub counters: bool,
}

/// What a target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetProtocol {
    Pg,
    Mysql,
    /// HandlerSocket (kv-lookup).
    Hs,
}

impl TargetProtocol {
    pub fn sql(self) -> Option<Protocol> {
        match self {
            TargetProtocol::Pg => Some(Protocol::Pg),
            TargetProtocol::Mysql => Some(Protocol::Mysql),
            TargetProtocol::Hs => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    pub name: String,
    pub protocol: TargetProtocol,
    pub addr: String,
    /// SQL login (default postgres / root).
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// Environment variable holding the password (keeps it out of the file).
    #[serde(default)]
    pub password_env: Option<String>,
    #[serde(default = "d_db")]
    pub db: String,
    /// The [[process]] whose CPU time and memory this target's runs are charged.
    #[serde(default)]
    pub process: Option<String>,
    /// The command name (as in /proc/PID/comm) of the process to measure within that
    /// process's tree (a wrapper script's child); default: the started process itself.
    #[serde(default)]
    pub measure: Option<String>,
    /// Log in over TLS (the load generator does not check the certificate: it measures
    /// what the handshake costs the target).
    #[serde(default)]
    pub tls: bool,
    /// In a [scale] crowd, its idle clients run nothing after they log in (by default
    /// each runs one `SELECT 1`). For a session-mode pooler, whose client keeps a
    /// server connection once it ran a statement.
    #[serde(default)]
    pub idle_silent: bool,
    /// MySQL: connect as a driver does by default, reading `@@max_allowed_packet` and
    /// `@@wait_timeout` with a statement once logged in (by default the load generator
    /// gives both, so that connecting runs nothing).
    #[serde(default)]
    pub driver_reads: bool,
    /// MySQL: statements each client runs once logged in, as drivers do (PyMySQL: `["SET
    /// NAMES utf8mb4", "SET AUTOCOMMIT = 0"]`).
    #[serde(default)]
    pub connect_sql: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    pub id: String,
    pub title: String,
    pub scenario: Scenario,
    #[serde(default)]
    pub mode: Mode,
    pub connections: Vec<usize>,
    /// Targets measured, in this order (default: every target of a fitting protocol).
    #[serde(default)]
    pub targets: Option<Vec<String>>,
    #[serde(default = "d_one")]
    pub depth: usize,
    #[serde(default)]
    pub rate: Option<f64>,
    #[serde(default)]
    pub keys: Option<u64>,
    #[serde(default)]
    pub rounds: Option<u32>,
    #[serde(default)]
    pub duration: Option<f64>,
    #[serde(default)]
    pub warmup: Option<f64>,
    /// The SQL targets the table is created through (default: the first SQL target of
    /// the table; required for kv-lookup, whose HandlerSocket targets read tables that
    /// SQL created).
    #[serde(default)]
    pub setup: Vec<String>,
    #[serde(default)]
    pub notes: String,
}

/// Idle clients held open while a small active set runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleSpec {
    /// Targets measured (each must name a process: its memory is what is measured).
    pub targets: Vec<String>,
    pub idle: usize,
    #[serde(default = "d_active")]
    pub active: usize,
    #[serde(default = "d_scale_scenario")]
    pub scenario: Scenario,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub duration: Option<f64>,
    /// Seconds waited after the idle clients connected before memory is read.
    #[serde(default = "d_settle")]
    pub settle: f64,
}

/// A login storm: `clients` clients of each target connect at the same moment; what is
/// measured is the time until the last of them is logged in, and how many could not log
/// in within `timeout` seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StormSpec {
    /// Targets measured (each must name a process: its CPU time is read around the storm).
    pub targets: Vec<String>,
    pub clients: usize,
    /// Seconds a client may take to log in before it counts as timed out.
    #[serde(default = "d_storm_timeout")]
    pub timeout: f64,
    /// Storms per target (default: the file's rounds).
    #[serde(default)]
    pub rounds: Option<u32>,
}

fn d_storm_timeout() -> f64 {
    30.0
}

/// A failover under load: writers insert numbered rows through a read-write route and
/// readers run point selects through a read-only route; after `kill_after` seconds the
/// primary's server process is killed (SIGKILL) and a replica promoted; the load runs
/// `run_after` seconds more. Each round starts the file's processes afresh.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverSpec {
    /// The SQL target the writers insert through (Sluice's read-write listener).
    pub writes: String,
    /// The SQL target the readers read through (Sluice's read-only listener).
    pub reads: String,
    /// The primary, directly: the tables are created there, its server is killed.
    pub primary: String,
    /// The replica promoted, directly: what is found there afterwards is checked.
    pub promote: String,
    #[serde(default = "d_writers")]
    pub writers: usize,
    #[serde(default = "d_readers")]
    pub readers: usize,
    /// Seconds of load before the kill.
    #[serde(default = "d_kill_after")]
    pub kill_after: f64,
    /// Seconds of load after the kill.
    #[serde(default = "d_run_after")]
    pub run_after: f64,
    /// Seconds between the kill and the promotion (an HA manager's detection time;
    /// default 0: at once).
    #[serde(default)]
    pub promote_after: f64,
    /// The Sluice configuration file the proxy runs with, and the cluster in it: the
    /// target is its health_interval × health_failures + 1 s.
    pub sluice_config: String,
    pub cluster: String,
    #[serde(default)]
    pub notes: String,
}

fn d_writers() -> usize {
    8
}
fn d_readers() -> usize {
    4
}
fn d_kill_after() -> f64 {
    3.0
}
fn d_run_after() -> f64 {
    5.0
}

fn d_scale_scenario() -> Scenario {
    Scenario::Ping
}

impl BenchFile {
    pub fn load(path: &Path) -> Result<BenchFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let f: BenchFile = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        f.validate()
            .with_context(|| format!("{}", path.display()))?;
        Ok(f)
    }

    pub fn target(&self, name: &str) -> Option<&TargetSpec> {
        self.target.iter().find(|t| t.name == name)
    }

    /// The targets a table measures, in order.
    pub fn table_targets<'a>(&'a self, t: &'a TableSpec) -> Vec<&'a TargetSpec> {
        match &t.targets {
            Some(names) => names.iter().filter_map(|n| self.target(n)).collect(),
            None => self
                .target
                .iter()
                .filter(|x| fits(t.scenario, x.protocol))
                .collect(),
        }
    }

    fn validate(&self) -> Result<()> {
        if self.rounds == 0 || self.threads == 0 {
            bail!("rounds and threads must be at least 1");
        }
        for (what, v) in [("duration", self.duration), ("warmup", self.warmup)] {
            if !(0.0..=86_400.0).contains(&v) {
                bail!("{what} must be between 0 and 86400 seconds");
            }
        }
        unique("process", self.process.iter().map(|p| p.name.as_str()))?;
        unique("target", self.target.iter().map(|t| t.name.as_str()))?;
        unique("table id", self.table.iter().map(|t| t.id.as_str()))?;
        for p in &self.process {
            if p.command.is_empty() {
                bail!("process {:?} has an empty command", p.name);
            }
        }
        for t in &self.target {
            if let Some(p) = &t.process
                && !self.process.iter().any(|x| &x.name == p)
            {
                bail!(
                    "target {:?} names process {p:?}, which is not defined",
                    t.name
                );
            }
        }
        for t in &self.table {
            if t.connections.is_empty() || t.connections.contains(&0) {
                bail!(
                    "table {:?}: connections must be a non-empty list of counts ≥ 1",
                    t.id
                );
            }
            for name in t.targets.iter().flatten() {
                let Some(x) = self.target(name) else {
                    bail!(
                        "table {:?} names target {name:?}, which is not defined",
                        t.id
                    );
                };
                // A kv-lookup table may name SQL targets: they run the same lookups as
                // prepared point selects, the baseline HandlerSocket is measured against.
                if !fits(t.scenario, x.protocol) && t.scenario != Scenario::KvLookup {
                    bail!(
                        "table {:?}: target {name:?} does not speak {}",
                        t.id,
                        t.scenario.name()
                    );
                }
            }
            if self.table_targets(t).is_empty() {
                bail!("table {:?} has no target", t.id);
            }
            for s in &t.setup {
                match self.target(s) {
                    Some(x) if x.protocol.sql().is_some() => {}
                    _ => bail!("table {:?}: setup target {s:?} is not a SQL target", t.id),
                }
            }
            if t.setup.is_empty() && t.scenario == Scenario::KvLookup {
                bail!("table {:?}: kv-lookup needs `setup`, SQL targets", t.id)
            }
        }
        if let Some(fo) = &self.failover {
            self.validate_failover(fo)?;
        }
        if let Some(s) = &self.scale {
            if s.idle == 0 || s.active == 0 {
                bail!("scale: idle and active must be at least 1");
            }
            self.process_targets("scale", &s.targets)?;
        }
        if let Some(s) = &self.storm {
            if s.clients == 0 {
                bail!("storm: clients must be at least 1");
            }
            self.process_targets("storm", &s.targets)?;
        }
        Ok(())
    }
}

impl BenchFile {
    /// The targets a [scale] or [storm] (`what`) names: defined SQL targets with a
    /// process to measure.
    fn process_targets(&self, what: &str, names: &[String]) -> Result<()> {
        for name in names {
            let Some(x) = self.target(name) else {
                bail!("{what} names target {name:?}, which is not defined");
            };
            if x.process.is_none() || x.protocol.sql().is_none() {
                bail!("{what} target {name:?} must be a SQL target with a `process`");
            }
        }
        Ok(())
    }

    fn validate_failover(&self, fo: &FailoverSpec) -> Result<()> {
        if !self.table.is_empty() || self.scale.is_some() || self.storm.is_some() {
            bail!(
                "a file with [failover] has no [[table]], [scale] or [storm]: a failover uses its cluster up"
            );
        }
        let mut protocol = None;
        for (what, name) in [
            ("writes", &fo.writes),
            ("reads", &fo.reads),
            ("primary", &fo.primary),
            ("promote", &fo.promote),
        ] {
            let Some(t) = self.target(name) else {
                bail!("failover: {what} names target {name:?}, which is not defined");
            };
            let Some(p) = t.protocol.sql() else {
                bail!("failover: {what} target {name:?} is not a SQL target");
            };
            if protocol.is_some_and(|q| q != p) {
                bail!("failover: the targets speak different protocols");
            }
            protocol = Some(p);
        }
        if fo.primary == fo.promote {
            bail!("failover: primary and promote name the same target");
        }
        if fo.writers == 0 {
            bail!("failover: writers must be at least 1");
        }
        for (what, v) in [("kill_after", fo.kill_after), ("run_after", fo.run_after)] {
            if !(0.1..=3_600.0).contains(&v) {
                bail!("failover: {what} must be between 0.1 and 3600 seconds");
            }
        }
        if !(0.0..fo.run_after).contains(&fo.promote_after) {
            bail!("failover: promote_after must be at least 0 and less than run_after");
        }
        Ok(())
    }
}

/// Whether a scenario runs against a target of this protocol.
pub fn fits(s: Scenario, p: TargetProtocol) -> bool {
    (s == Scenario::KvLookup) == (p == TargetProtocol::Hs)
}

fn unique<'a>(what: &str, names: impl Iterator<Item = &'a str>) -> Result<()> {
    let mut seen = HashSet::new();
    for n in names {
        if n.is_empty() {
            bail!("a {what} name is empty");
        }
        if !seen.insert(n) {
            bail!("{what} {n:?} is defined twice");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_benchmark_files_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
            let path = entry.map(|e| e.path()).unwrap_or_default();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".toml") && !name.starts_with("sluice-") {
                if let Err(e) = BenchFile::load(&path) {
                    panic!("{name}: {e:#}");
                }
                loaded += 1;
            }
        }
        assert!(loaded >= 5, "{loaded} benchmark files");
    }

    const FAILOVER: &str = r#"
        title = "f"
        [[target]]
        name = "p"
        protocol = "pg"
        addr = "127.0.0.1:1"
        [[target]]
        name = "r"
        protocol = "pg"
        addr = "127.0.0.1:2"
        [[target]]
        name = "rw"
        protocol = "pg"
        addr = "127.0.0.1:3"
        [failover]
        writes = "rw"
        reads = "r"
        primary = "p"
        promote = "r"
        sluice_config = "s.toml"
        cluster = "main"
    "#;

    fn check(text: &str) -> Result<BenchFile> {
        let f: BenchFile = toml::from_str(text)?;
        f.validate()?;
        Ok(f)
    }

    #[test]
    fn storm_sections_are_checked() {
        let base = r#"
            title = "s"
            [[process]]
            name = "sluice"
            command = ["sluice"]
            [[target]]
            name = "direct"
            protocol = "pg"
            addr = "127.0.0.1:1"
            [[target]]
            name = "proxy"
            protocol = "pg"
            addr = "127.0.0.1:2"
            process = "sluice"
            tls = true
            [storm]
            targets = ["proxy"]
            clients = 10
        "#;
        let f = check(base).unwrap_or_else(|e| panic!("{e:#}"));
        let s = f.storm.unwrap_or_else(|| panic!("no [storm]"));
        assert_eq!((s.clients, s.timeout, s.rounds), (10, 30.0, None));
        for (from, to, why) in [
            ("clients = 10", "clients = 0", "at least 1"),
            (
                "targets = [\"proxy\"]",
                "targets = [\"nope\"]",
                "not defined",
            ),
            (
                "targets = [\"proxy\"]",
                "targets = [\"direct\"]",
                "with a `process`",
            ),
        ] {
            let e = check(&base.replace(from, to))
                .map(|_| ())
                .err()
                .map(|e| format!("{e:#}"));
            assert!(e.as_deref().is_some_and(|e| e.contains(why)), "{to}: {e:?}");
        }
    }

    #[test]
    fn failover_sections_are_checked() {
        let f = check(FAILOVER).unwrap_or_else(|e| panic!("{e:#}"));
        let fo = f.failover.unwrap_or_else(|| panic!("no [failover]"));
        assert_eq!((fo.writers, fo.readers), (8, 4));
        assert_eq!((fo.kill_after, fo.run_after), (3.0, 5.0));
        for (from, to, why) in [
            ("promote = \"r\"", "promote = \"p\"", "the same target"),
            ("promote = \"r\"", "promote = \"x\"", "not defined"),
            (
                "cluster = \"main\"",
                "cluster = \"main\"\nwriters = 0",
                "writers",
            ),
            (
                "cluster = \"main\"",
                "cluster = \"main\"\nkill_after = 0",
                "kill_after",
            ),
            (
                "cluster = \"main\"",
                "cluster = \"main\"\npromote_after = 5",
                "promote_after",
            ),
            (
                "title = \"f\"",
                "title = \"f\"\n[scale]\ntargets = []\nidle = 1",
                "no [[table]]",
            ),
            (
                "title = \"f\"",
                "title = \"f\"\n[storm]\ntargets = []\nclients = 1",
                "[storm]",
            ),
        ] {
            let text = FAILOVER.replace(from, to);
            let e = check(&text).map(|_| ()).err().map(|e| format!("{e:#}"));
            assert!(e.as_deref().is_some_and(|e| e.contains(why)), "{to}: {e:?}");
        }
    }
}
