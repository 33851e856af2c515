//! sluice-bench: Sluice's load generator and side-by-side benchmark runner.
//!
//! - `run`: one scenario against one address (a server directly, Sluice, or a peer);
//!   prints one line and, with `--json FILE`, the same numbers as JSON;
//! - `setup`: creates the database and the `sluice_bench` table the scenarios read;
//! - `compare FILE`: a benchmark file's targets in alternation over several rounds,
//!   starting and stopping the processes it names, with their CPU time and memory; or,
//!   for a file with `[failover]`, its failover rounds (kill the primary under load);
//! - `report RESULTS...`: results documents as markdown tables and SVG charts;
//! - `relay`: a bare TCP relay, the floor of a proxy's hop (`relay.rs`).

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use sluice_bench::compare::{self, CompareOptions};
use sluice_bench::report::{self, ReportOptions};
use sluice_bench::results::Results;
use sluice_bench::scenario::Plan;
use sluice_bench::scenario::setup::ensure_table;
use sluice_bench::scenario::sql::{Mode, Protocol, SqlTarget};
use sluice_bench::spec::{RunSpec, Scenario};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "sluice-bench",
    version,
    about = "Load generator and side-by-side benchmark runner for Sluice and its peers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One scenario against one address.
    Run(RunArgs),
    /// Create the database and the sluice_bench table (on the server itself).
    Setup(SetupArgs),
    /// Run a benchmark file: targets in alternation, processes started and measured.
    Compare(CompareArgs),
    /// Render results documents as markdown (and SVG charts).
    Report(ReportArgs),
    /// A bare TCP relay (no protocol read): the floor of a proxy's hop.
    Relay(RelayArgs),
}

#[derive(Debug, Args)]
struct RelayArgs {
    /// host:port to accept clients on.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// host:port of the server each client's bytes go to.
    #[arg(long)]
    to: std::net::SocketAddr,
}

#[derive(Debug, Args)]
struct Login {
    /// Protocol of the target (kv-lookup speaks HandlerSocket whatever this says).
    #[arg(long, value_enum, default_value = "pg")]
    protocol: Protocol,
    /// host:port of the target.
    #[arg(long)]
    addr: String,
    /// SQL user (default: postgres for pg, root for mysql).
    #[arg(long)]
    user: Option<String>,
    /// SQL password; without it, SLUICE_BENCH_PASSWORD from the environment (keeps it
    /// off the command line), else empty.
    #[arg(long)]
    password: Option<String>,
    /// Database (PostgreSQL) or schema (MySQL, HandlerSocket) of the table.
    #[arg(long, default_value = "bench")]
    db: String,
}

impl Login {
    fn user(&self) -> String {
        self.user
            .clone()
            .unwrap_or_else(|| self.protocol.default_user().to_string())
    }

    fn password(&self) -> String {
        self.password
            .clone()
            .or_else(|| std::env::var("SLUICE_BENCH_PASSWORD").ok())
            .unwrap_or_default()
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    /// What each connection does.
    #[arg(long, value_enum)]
    scenario: Scenario,
    #[command(flatten)]
    login: Login,
    /// simple: statement text with the key in it; prepared: server-side prepared.
    #[arg(long, value_enum, default_value = "simple")]
    mode: Mode,
    /// Table read.
    #[arg(long, default_value = "sluice_bench")]
    table: String,
    /// Columns returned (comma-separated; default c, kv-lookup id,k,c,pad).
    #[arg(long)]
    columns: Option<String>,
    /// The primary-key column.
    #[arg(long, default_value = "id")]
    key_column: String,
    /// Index opened for kv-lookup.
    #[arg(long, default_value = "PRIMARY")]
    index: String,
    /// Concurrent connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Requests in flight per connection (kv-lookup only).
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Open loop: requests per second over all connections (default: closed loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds run before measuring (not counted).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Keys are drawn uniformly from 1..=KEYS.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Seed of the key sequences (connection i uses SEED + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runtime threads of the load generator (1: one current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Create and fill the table first (on this address) when it is not there.
    #[arg(long)]
    setup: bool,
    /// Log in over TLS (as a compare file's `tls = true`).
    #[arg(long)]
    tls: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SetupArgs {
    #[command(flatten)]
    login: Login,
    /// Rows (keys 1..=KEYS).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
}

#[derive(Debug, Args)]
struct CompareArgs {
    /// The benchmark file (TOML; see benches/).
    file: PathBuf,
    /// Where to write the results document (default target/bench/<file stem>.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only these tables (ids), the connection scale only if named "scale", the login
    /// storm only if named "storm".
    #[arg(long)]
    only: Vec<String>,
    /// Override the file's rounds.
    #[arg(long)]
    rounds: Option<u32>,
    /// Override the file's seconds per run.
    #[arg(long)]
    duration: Option<f64>,
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// Results documents written by `compare`.
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// Write the markdown here (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the SVG charts into this directory (default: next to --out, in bench/).
    #[arg(long)]
    svg_dir: Option<PathBuf>,
    /// How the markdown links the charts (default: the svg dir relative to --out).
    #[arg(long)]
    svg_link: Option<String>,
    /// Markdown to place after the report's header (a hand-written summary).
    #[arg(long)]
    preface: Option<PathBuf>,
}

fn secs(what: &str, v: f64) -> Result<Duration> {
    if !(0.0..=86_400.0).contains(&v) {
        anyhow::bail!("--{what} must be between 0 and 86400 seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.command {
        Command::Run(a) => run(a),
        Command::Setup(a) => setup(a),
        Command::Compare(a) => compare_cmd(a),
        Command::Report(a) => report_cmd(a),
        Command::Relay(a) => sluice_bench::relay::serve(a.listen, a.to).map(|()| ExitCode::SUCCESS),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(a: RunArgs) -> Result<ExitCode> {
    let mut spec = RunSpec::new(a.scenario, a.login.protocol, &a.login.addr);
    spec.mode = a.mode;
    spec.user = a.login.user();
    spec.password = a.login.password();
    spec.db = a.login.db.clone();
    spec.table = a.table;
    spec.columns = a.columns;
    spec.key_column = a.key_column;
    spec.index = a.index;
    spec.depth = a.depth;
    spec.threads = a.threads;
    spec.tls = a.tls;
    spec.progress = true;
    spec.plan = Plan {
        connections: a.connections,
        warmup: secs("warmup", a.warmup)?,
        duration: secs("duration", a.duration)?,
        keys: a.keys.max(1),
        seed: a.seed,
        rate: a.rate,
    };
    if a.setup {
        block_on(ensure_table(&spec.sql_target(), spec.plan.keys))??;
    }
    let summary = spec.execute()?;
    println!(
        "{} addr={} connections={} depth={}: {}",
        spec.scenario.name(),
        spec.addr,
        spec.plan.connections,
        spec.depth,
        summary.line()
    );
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "scenario": spec.scenario,
            "protocol": spec.protocol_name(),
            "mode": spec.mode_name(),
            "addr": spec.addr,
            "connections": spec.plan.connections,
            "depth": spec.depth,
            "rate": spec.plan.rate,
            "keys": spec.plan.keys,
            "warmup_s": spec.plan.warmup.as_secs_f64(),
            "threads": spec.threads,
            "summary": summary,
        });
        let mut text = serde_json::to_string_pretty(&doc).context("encode JSON")?;
        text.push('\n');
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    }
    // Errors (or nothing measured) make the run fail, after its numbers are out.
    Ok(if summary.errors > 0 || summary.ops == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn block_on<F: std::future::Future>(f: F) -> Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the runtime")?;
    Ok(rt.block_on(f))
}

fn setup(a: SetupArgs) -> Result<ExitCode> {
    let t = SqlTarget {
        protocol: a.login.protocol,
        addr: a.login.addr.clone(),
        user: a.login.user(),
        password: a.login.password(),
        db: a.login.db.clone(),
        tls: false,
        driver_reads: false,
        connect_sql: Vec::new(),
    };
    let filled = block_on(ensure_table(&t, a.keys))??;
    println!(
        "{}.sluice_bench on {}: {} rows{}",
        t.db,
        t.addr,
        a.keys,
        if filled {
            " (filled)"
        } else {
            " (already there)"
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn compare_cmd(a: CompareArgs) -> Result<ExitCode> {
    let opts = CompareOptions {
        only: a.only,
        rounds: a.rounds,
        duration: a.duration.map(|d| secs("duration", d)).transpose()?,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        log_dir: None,
    };
    let out = a.json.unwrap_or_else(|| {
        let stem = a
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "results".to_string());
        PathBuf::from("target/bench").join(format!("{stem}.json"))
    });
    let results = compare::run_file(&a.file, &opts)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut text = serde_json::to_string_pretty(&results).context("encode JSON")?;
    text.push('\n');
    std::fs::write(&out, text).with_context(|| format!("write {}", out.display()))?;
    eprintln!("sluice-bench: results in {}", out.display());
    let rendered = report::render(
        std::slice::from_ref(&results),
        &ReportOptions {
            svg_link_prefix: String::new(),
            command: opts.command.clone(),
            preface: String::new(),
        },
    )?;
    println!("{}", rendered.markdown);
    // A failover round that lost or repeated an acknowledged write, or never wrote on the
    // new primary, fails the command too (after its numbers are out).
    let failed = results
        .runs
        .iter()
        .any(|r| r.summary.errors > 0 || r.summary.ops == 0)
        || results
            .failover
            .iter()
            .any(|r| !r.consistent() || r.write_window_ms.is_none());
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn report_cmd(a: ReportArgs) -> Result<ExitCode> {
    let mut docs = Vec::new();
    for p in &a.results {
        let text = std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
        docs.push(Results::from_json(&text).with_context(|| format!("read {}", p.display()))?);
    }
    let svg_dir = a.svg_dir.clone().or_else(|| {
        a.out.as_ref().map(|o| {
            o.parent()
                .unwrap_or(std::path::Path::new("."))
                .join("bench")
        })
    });
    let link = a
        .svg_link
        .clone()
        .unwrap_or_else(|| match (&a.out, &svg_dir) {
            (Some(o), Some(d)) => {
                let base = o.parent().unwrap_or(std::path::Path::new(""));
                let rel = d.strip_prefix(base).unwrap_or(d);
                format!("{}/", rel.display())
            }
            _ => String::new(),
        });
    let args: Vec<String> = std::env::args().collect();
    let preface = match &a.preface {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?,
        None => String::new(),
    };
    let rendered = report::render(
        &docs,
        &ReportOptions {
            svg_link_prefix: link,
            command: format!(
                "sluice-bench {}",
                args.get(1..).unwrap_or_default().join(" ")
            ),
            preface,
        },
    )?;
    match &a.out {
        Some(o) => std::fs::write(o, &rendered.markdown)
            .with_context(|| format!("write {}", o.display()))?,
        None => print!("{}", rendered.markdown),
    }
    if let Some(d) = &svg_dir {
        std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
        for (name, svg) in &rendered.charts {
            let p = d.join(name);
            std::fs::write(&p, svg).with_context(|| format!("write {}", p.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
