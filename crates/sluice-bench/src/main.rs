//! sluice-bench: Sluice's load generator. One invocation is one run of one scenario
//! against one address (a server directly, Sluice, or a peer): it opens the
//! connections, runs a warm-up, measures for `--duration` seconds, and prints one line
//! (and, with `--json FILE`, the same numbers as JSON). Comparing targets, alternating
//! rounds and taking medians is the calling script's job (scripts/bench-hs.sh).
//!
//! Scenarios:
//! - `kv-lookup`: HandlerSocket primary-key lookups, `--depth` in flight per connection;
//! - `point-select`: MySQL-protocol prepared `SELECT ... WHERE key = ?`, one in flight.

mod scenario;
mod stats;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use scenario::Plan;
use scenario::kv::KvTarget;
use scenario::point_select::SqlTarget;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Scenario {
    /// HandlerSocket lookups (`P` once, then `1\t=\t1\t<key>` lines).
    KvLookup,
    /// SQL prepared point selects over the MySQL protocol.
    PointSelect,
}

#[derive(Debug, Parser)]
#[command(
    name = "sluice-bench",
    version,
    about = "Load generator for Sluice and its peers"
)]
struct Args {
    /// What each connection does.
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// host:port of the target (a HandlerSocket listener for kv-lookup, a MySQL-protocol
    /// server or proxy for point-select).
    #[arg(long)]
    addr: String,
    /// SQL user (point-select).
    #[arg(long, default_value = "root")]
    user: String,
    /// SQL password (point-select); without it, SLUICE_BENCH_PASSWORD from the
    /// environment (keeps it off the command line), else empty.
    #[arg(long)]
    password: Option<String>,
    /// Database (schema) of the table.
    #[arg(long, default_value = "bench")]
    db: String,
    /// Table looked up.
    #[arg(long, default_value = "user")]
    table: String,
    /// Columns each lookup returns (comma-separated).
    #[arg(long, default_value = "user_id,user_name,user_email,created")]
    columns: String,
    /// The primary-key column (point-select's WHERE).
    #[arg(long, default_value = "user_id")]
    key_column: String,
    /// Index opened for kv-lookup.
    #[arg(long, default_value = "PRIMARY")]
    index: String,
    /// Concurrent connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Requests in flight per connection (kv-lookup only; point-select is always 1).
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds run before measuring (not counted).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Keys are drawn uniformly from 1..=KEYS.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Seed of the key sequences (connection i uses SEED + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runtime threads of the load generator (1: one current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The JSON document of one run: its settings and its results.
#[derive(Debug, Serialize)]
struct Report<'a> {
    scenario: Scenario,
    addr: &'a str,
    connections: usize,
    depth: usize,
    keys: u64,
    warmup_s: f64,
    threads: usize,
    #[serde(flatten)]
    results: stats::Summary,
}

fn secs(what: &str, v: f64) -> Result<Duration> {
    if !(0.0..=86_400.0).contains(&v) {
        bail!("--{what} must be between 0 and 86400 seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode> {
    let args = Args::parse();
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if args.depth == 0 {
        bail!("--depth must be at least 1");
    }
    if args.scenario == Scenario::PointSelect && args.depth != 1 {
        bail!("point-select keeps one statement in flight per connection; --depth must be 1");
    }
    let plan = Plan {
        connections: args.connections,
        warmup: secs("warmup", args.warmup)?,
        duration: secs("duration", args.duration)?,
        keys: args.keys.max(1),
        seed: args.seed,
    };
    if plan.duration.is_zero() {
        bail!("--duration must be more than 0");
    }
    let rt = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .context("start the runtime")?;
    let (stats, window) = rt.block_on(async {
        match args.scenario {
            Scenario::KvLookup => {
                let t = KvTarget {
                    addr: args.addr.clone(),
                    db: args.db.clone(),
                    table: args.table.clone(),
                    index: args.index.clone(),
                    columns: args.columns.clone(),
                    depth: args.depth,
                };
                scenario::kv::run(&plan, &t).await
            }
            Scenario::PointSelect => {
                let t = SqlTarget {
                    addr: args.addr.clone(),
                    user: args.user.clone(),
                    password: args
                        .password
                        .clone()
                        .or_else(|| std::env::var("SLUICE_BENCH_PASSWORD").ok())
                        .unwrap_or_default(),
                    db: args.db.clone(),
                    table: args.table.clone(),
                    columns: args.columns.clone(),
                    key_column: args.key_column.clone(),
                };
                scenario::point_select::run(&plan, &t).await
            }
        }
    })?;
    // Connections still draining must not hold the process up.
    rt.shutdown_timeout(Duration::from_secs(1));
    let summary = stats.summarize(window);
    let name = args
        .scenario
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    println!(
        "{name} addr={} connections={} depth={}: {}",
        args.addr,
        args.connections,
        args.depth,
        summary.line()
    );
    let failed = summary.errors > 0 || summary.ops == 0;
    if let Some(path) = &args.json {
        let report = Report {
            scenario: args.scenario,
            addr: &args.addr,
            connections: args.connections,
            depth: args.depth,
            keys: plan.keys,
            warmup_s: plan.warmup.as_secs_f64(),
            threads: args.threads,
            results: summary,
        };
        let mut text = serde_json::to_string_pretty(&report).context("encode JSON")?;
        text.push('\n');
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    }
    // Errors (or nothing measured) make the run fail, after its numbers are out.
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
