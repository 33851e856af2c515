//! `sluice-bench compare FILE`: one command for one whole table of numbers. The file's
//! processes are started (servers first, then proxies, in file order) and waited for;
//! each table's table is created through its setup target; then for every connection
//! count the table's targets run in alternation, round after round (A B C A B C ...),
//! each run with the same key sequence per round. Around every run the CPU time of the
//! target's process is read from /proc, and its memory after. The connection-scale
//! measurement comes first, on fresh processes. Everything started is stopped at the
//! end, or on an error. A failover file (`[failover]`) runs its rounds instead, each on
//! processes of its own (`failover.rs`).

mod failover;
pub mod file;
pub mod procs;
mod scale;
mod storm;

use crate::results::{Results, RunRecord, Settings, TableInfo, VERSION};
use crate::scenario::Plan;
use crate::scenario::setup::ensure_table;
use crate::scenario::sql::SqlTarget;
use crate::spec::{RunSpec, Scenario, thousands};
use anyhow::{Context, Result, bail};
use file::{BenchFile, TableSpec, TargetSpec};
use procs::{Meter, Procs};
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    /// Only these table ids ("scale" for the connection scale, "storm" for the login
    /// storm); empty: everything.
    pub only: Vec<String>,
    pub rounds: Option<u32>,
    pub duration: Option<Duration>,
    /// The command line, recorded in the results.
    pub command: String,
    /// Where the processes' output goes (default target/bench/logs).
    pub log_dir: Option<std::path::PathBuf>,
}

impl CompareOptions {
    fn wants(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == id)
    }
}

/// Runs a benchmark file.
pub fn run_file(path: &Path, opts: &CompareOptions) -> Result<Results> {
    let f = BenchFile::load(path)?;
    raise_fd_limit();
    if let Some(fo) = &f.failover {
        return failover::run(&f, fo, opts);
    }
    let mut procs = Procs::default();
    let log_dir = opts
        .log_dir
        .clone()
        .unwrap_or_else(|| "target/bench/logs".into());
    for p in &f.process {
        procs.start(p, &log_dir)?;
    }
    let res = run_started(&f, opts, &mut procs);
    procs.stop_all();
    res
}

/// The file's runs, with its processes running.
pub fn run_started(f: &BenchFile, opts: &CompareOptions, procs: &mut Procs) -> Result<Results> {
    let mut results = Results {
        version: VERSION,
        title: f.title.clone(),
        command: opts.command.clone(),
        started: now_rfc3339(),
        machine: procs::machine(),
        targets: f.target.iter().map(|t| t.name.clone()).collect(),
        tables: Vec::new(),
        runs: Vec::new(),
        scale: Vec::new(),
        storm: Vec::new(),
        failover: Vec::new(),
    };
    for t in f.table.iter().filter(|t| opts.wants(&t.id)) {
        setup_table(f, t)?;
    }
    // Connection scale first, while the proxies are fresh: after a table's thousand-client
    // runs an allocator keeps memory it could give the idle clients, which would flatter
    // the per-client figure.
    if let Some(s) = &f.scale
        && opts.wants("scale")
    {
        for name in &s.targets {
            let target = f.target(name).context("scale target")?;
            let rec = scale::measure(f, s, target, opts, procs)?;
            results.scale.push(rec);
        }
    }
    if let Some(s) = &f.storm
        && opts.wants("storm")
    {
        for name in &s.targets {
            let target = f.target(name).context("storm target")?;
            let rec = storm::measure(f, s, target, opts, procs)?;
            results.storm.push(rec);
        }
    }
    for t in f.table.iter().filter(|t| opts.wants(&t.id)) {
        run_table(f, t, opts, procs, &mut results)?;
    }
    // Targets measured nowhere are left out of the document.
    let used: Vec<String> = results
        .targets
        .iter()
        .filter(|n| {
            results.runs.iter().any(|r| &r.target == *n)
                || results.scale.iter().any(|s| &s.target == *n)
                || results.storm.iter().any(|s| &s.target == *n)
        })
        .cloned()
        .collect();
    results.targets = used;
    Ok(results)
}

fn run_table(
    f: &BenchFile,
    t: &TableSpec,
    opts: &CompareOptions,
    procs: &mut Procs,
    results: &mut Results,
) -> Result<()> {
    let targets = f.table_targets(t);
    let keys = t.keys.unwrap_or(f.keys);
    let rounds = opts.rounds.or(t.rounds).unwrap_or(f.rounds).max(1);
    let duration = match opts.duration {
        Some(d) => d,
        None => Duration::from_secs_f64(t.duration.unwrap_or(f.duration).clamp(0.1, 86_400.0)),
    };
    let warmup = Duration::from_secs_f64(t.warmup.unwrap_or(f.warmup).clamp(0.0, 86_400.0));
    let first = targets.first().context("a table without targets")?;
    results.tables.push(TableInfo {
        id: t.id.clone(),
        title: t.title.clone(),
        notes: t.notes.clone(),
        settings: Settings {
            scenario: t.scenario.name().to_string(),
            protocol: if t.scenario == Scenario::KvLookup {
                "hs".to_string()
            } else {
                sql_target(first)?.protocol.name().to_string()
            },
            mode: if t.scenario == Scenario::KvLookup {
                "-".to_string()
            } else {
                t.mode.name().to_string()
            },
            depth: t.depth,
            rate: t.rate,
            keys,
            duration_s: duration.as_secs_f64(),
            warmup_s: warmup.as_secs_f64(),
        },
        connections: t.connections.clone(),
        rounds,
    });
    for &conns in &t.connections {
        for round in 1..=rounds {
            for target in &targets {
                let mut spec = spec_for(f, t, target)?;
                spec.plan = Plan {
                    connections: conns,
                    warmup,
                    duration,
                    keys,
                    seed: u64::from(round) * 1_000_003,
                    rate: t.rate,
                };
                let rec = measured_run(&spec, t, target, procs, round)?;
                eprintln!(
                    "sluice-bench: {} {} c={conns} round {round}/{rounds}: {} ops/s{}",
                    t.id,
                    target.name,
                    thousands(rec.summary.ops_per_sec),
                    if rec.summary.errors > 0 {
                        format!(
                            ", {} errors: {}",
                            rec.summary.errors,
                            rec.summary.first_error.as_deref().unwrap_or("")
                        )
                    } else {
                        String::new()
                    }
                );
                results.runs.push(rec);
                // Let the connections of this run close before the next target starts.
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
    Ok(())
}

/// Creates a table's table (and database) through its setup targets: the ones it names,
/// else its first SQL target.
fn setup_table(f: &BenchFile, t: &TableSpec) -> Result<()> {
    let keys = t.keys.unwrap_or(f.keys);
    let setup: Vec<&TargetSpec> = if t.setup.is_empty() {
        f.table_targets(t)
            .into_iter()
            .find(|x| x.protocol.sql().is_some())
            .into_iter()
            .collect()
    } else {
        t.setup.iter().filter_map(|s| f.target(s)).collect()
    };
    for s in setup {
        let st = sql_target(s)?;
        let (filled, what) = if t.scenario == Scenario::NewOrder {
            let f = runtime()?.block_on(crate::scenario::orders::ensure_tables(&st, keys));
            (f, "the bench_* order tables")
        } else {
            (runtime()?.block_on(ensure_table(&st, keys)), "sluice_bench")
        };
        let filled =
            filled.with_context(|| format!("table {}: set up through {}", t.id, s.name))?;
        if filled {
            eprintln!(
                "sluice-bench: filled {}.{what} ({keys} items) through {}",
                st.db, s.name
            );
        }
    }
    Ok(())
}

/// One run of `spec` with the target's process measured around it.
fn measured_run(
    spec: &RunSpec,
    t: &TableSpec,
    target: &TargetSpec,
    procs: &mut Procs,
    round: u32,
) -> Result<RunRecord> {
    let pid = measured_pid(target, procs)?;
    let counters_log = target
        .process
        .as_ref()
        .and_then(|p| procs.get(p))
        .filter(|s| s.counters)
        .map(|s| s.log.clone());
    let meter = pid
        .map(|pid| Meter::begin(pid, counters_log.as_deref()))
        .transpose()?;
    let summary = match spec.execute() {
        Ok(s) => s,
        // A run that could not even start (connections refused) is a failed run, kept
        // in the results as such: it must not stop the comparison or hide the others.
        Err(e) => {
            let mut s = crate::stats::Stats::new();
            s.record_errors(1, || format!("{e:#}"));
            s.summarize(spec.plan.duration)
        }
    };
    let process = meter.map(|m| m.end()).transpose()?;
    if let Some(p) = &target.process
        && !procs.alive(p)
    {
        let log = procs
            .get(p)
            .map(|s| s.log.display().to_string())
            .unwrap_or_default();
        bail!(
            "process {p:?} (target {}) died during a run; its output: {log}",
            target.name
        );
    }
    Ok(RunRecord {
        table: t.id.clone(),
        target: target.name.clone(),
        connections: spec.plan.connections,
        round,
        summary,
        process,
    })
}

/// The pid whose CPU and memory a target is charged, if it names a process.
pub fn measured_pid(target: &TargetSpec, procs: &Procs) -> Result<Option<u32>> {
    let Some(name) = &target.process else {
        return Ok(None);
    };
    let root = procs
        .get(name)
        .with_context(|| format!("process {name:?} is not running"))?
        .pid();
    match &target.measure {
        None => Ok(Some(root)),
        Some(comm) => procs::find_in_tree(root, comm).map(Some).with_context(|| {
            format!("no process named {comm:?} under {name:?} (pid {root}) to measure")
        }),
    }
}

/// The run spec of a table's scenario against a target (connections set by the caller).
fn spec_for(f: &BenchFile, t: &TableSpec, target: &TargetSpec) -> Result<RunSpec> {
    let protocol = match target.protocol.sql() {
        Some(p) => p,
        // kv-lookup: the protocol is HandlerSocket; the SQL one is unused.
        None => crate::scenario::sql::Protocol::Mysql,
    };
    let mut spec = RunSpec::new(t.scenario, protocol, &target.addr);
    spec.mode = t.mode;
    spec.depth = t.depth;
    spec.tls = target.tls;
    if t.scenario == Scenario::KvLookup && target.protocol.sql().is_some() {
        // The SQL baseline of a lookup: a prepared point select of the same columns.
        spec.scenario = Scenario::PointSelect;
        spec.mode = crate::scenario::sql::Mode::Prepared;
        spec.columns = Some("id,k,c,pad".to_string());
        spec.depth = 1;
    }
    spec.threads = f.threads;
    spec.db = target.db.clone();
    spec.progress = true;
    if target.protocol.sql().is_some() {
        let st = sql_target(target)?;
        spec.user = st.user;
        spec.password = st.password;
    }
    Ok(spec)
}

/// The SQL login of a target.
pub fn sql_target(t: &TargetSpec) -> Result<SqlTarget> {
    let Some(protocol) = t.protocol.sql() else {
        bail!("target {:?} is not a SQL target", t.name);
    };
    let password = match (&t.password, &t.password_env) {
        (Some(p), _) => p.clone(),
        (None, Some(var)) => std::env::var(var).with_context(|| {
            format!("target {:?}: environment variable {var} is not set", t.name)
        })?,
        (None, None) => String::new(),
    };
    Ok(SqlTarget {
        protocol,
        addr: t.addr.clone(),
        user: t
            .user
            .clone()
            .unwrap_or_else(|| protocol.default_user().to_string()),
        password,
        db: t.db.clone(),
        tls: t.tls,
        driver_reads: t.driver_reads,
        connect_sql: t.connect_sql.clone(),
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the runtime")
}

/// Thousands of connections need as many descriptors: the soft limit goes up to the
/// hard one (processes started afterwards inherit it).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Now, UTC, as "YYYY-MM-DDTHH:MM:SSZ".
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_shape() {
        let s = super::now_rfc3339();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'), "{s}");
    }
}
