//! The `sluice` command: run on the built-in default or a TOML file, or check a file.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use sluice_config::{Config, LogFormat};
use std::path::PathBuf;

/// jemalloc: the proxy allocates small buffers per request on every thread, which glibc's
/// allocator serves measurably slower. The `system-alloc` feature leaves it out, for heap
/// profilers that watch the C allocator (docs/benchmarks.md: where an idle client's bytes go).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A fast SQL proxy for PostgreSQL and MySQL/MariaDB"
)]
struct Cli {
    /// Run with this TOML configuration instead of the built-in default.
    #[arg(long, short)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a configuration file and report every error with file and line.
    CheckConfig { file: PathBuf },
    /// Print the built-in default configuration.
    PrintDefault,
    /// Print a statement's digest id and digest text, as rules (`digest = "0x..."`),
    /// the firewall's allowlist and the digest table know it.
    Digest {
        /// The statement.
        sql: String,
        /// Scan it as MySQL does (quotes, comments) rather than PostgreSQL.
        #[arg(long)]
        mysql: bool,
    },
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&config.general.log_level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.general.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { file }) => {
            return match sluice_config::load(&file) {
                Ok(config) => {
                    // Allowed but likely not meant: said, and still OK.
                    for w in config.warnings() {
                        eprintln!("{}: warning: {w}", file.display());
                    }
                    println!("{}: OK", file.display());
                    Ok(())
                }
                Err(errors) => {
                    eprintln!("{errors}");
                    std::process::exit(1);
                }
            };
        }
        Some(Command::PrintDefault) => {
            print!("{}", sluice_config::BUILTIN_DEFAULT_TOML);
            return Ok(());
        }
        Some(Command::Digest { sql, mysql }) => {
            let dialect = if mysql {
                sluice_sql::Dialect::MySql
            } else {
                sluice_sql::Dialect::Postgres
            };
            let f = sluice_sql::facts(sql.as_bytes(), dialect);
            println!("{:#018x} {}", f.digest, f.digest_text);
            return Ok(());
        }
        None => {}
    }
    let config = match &cli.config {
        Some(path) => match sluice_config::load(path) {
            Ok(c) => c,
            Err(errors) => {
                eprintln!("{errors}");
                std::process::exit(1);
            }
        },
        None => sluice_config::builtin_default(),
    };
    init_logging(&config);
    sluice::limits::apply(&config);
    // One thread: the current-thread scheduler, with no cross-thread wake-ups at all.
    let mut rt = if config.general.worker_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if config.general.worker_threads > 0 {
            b.worker_threads(config.general.worker_threads);
        }
        b
    };
    let rt = rt.enable_all().build().context("starting the runtime")?;
    rt.block_on(run(config, cli.config))
}

async fn run(config: Config, file: Option<PathBuf>) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    // Handlers first: a signal arriving as soon as the ports listen must not kill us.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut hup = signal(SignalKind::hangup())?;
    let handle = sluice::server::start(config).await?;
    if let Some(file) = file {
        handle.reload_from(file);
    }
    let control = handle.shared.clone();
    let mut immediate = false;
    loop {
        tokio::select! {
            _ = int.recv() => break,
            _ = term.recv() => break,
            // The counters, to the log.
            _ = usr1.recv() => handle.log_counters(),
            // The configuration, read again (errors are logged; the running one stays).
            _ = hup.recv() => match control.control.reload().await {
                Ok(summary) => tracing::info!(%summary, "configuration reloaded"),
                Err(e) => tracing::error!(error = %e, "configuration not reloaded; the running one stays"),
            },
            wait = control.control.shutdown_requested() => {
                immediate = !wait;
                break;
            }
        }
    }
    let timeout = match immediate {
        true => std::time::Duration::ZERO,
        false => handle.shared.config.load().general.shutdown_timeout,
    };
    tracing::info!("shutting down: no new clients; waiting for transactions in flight");
    handle.shutdown(timeout).await;
    tracing::info!("stopped");
    Ok(())
}
