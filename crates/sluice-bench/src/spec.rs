//! One run, fully described ([`RunSpec`]), and how it is executed: its own runtime, the
//! scenario's connections opened, warm-up, measurement, and a live progress line on a
//! terminal. `sluice-bench run` executes one spec; `compare` executes many.

use crate::scenario::kv::KvTarget;
use crate::scenario::sql::{Mode, Protocol, Sql, SqlTarget, Workload};
use crate::scenario::{Plan, kv, sql};
use crate::stats::{LIVE_ANSWERS, Summary};
use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// `SELECT 1`: the do-nothing query.
    Ping,
    /// Random primary-key selects.
    PointSelect,
    /// A transaction: two point selects and an update.
    ReadWrite,
    /// 90 % point selects, 10 % single updates, no transactions.
    ReadMostly,
    /// TPC-C-like order entry: per new order, a transaction on the order tables and one
    /// on the stock tables.
    NewOrder,
    /// HandlerSocket primary-key lookups (`--depth` in flight per connection).
    KvLookup,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Ping => "ping",
            Scenario::PointSelect => "point-select",
            Scenario::ReadWrite => "read-write",
            Scenario::ReadMostly => "read-mostly",
            Scenario::NewOrder => "new-order",
            Scenario::KvLookup => "kv-lookup",
        }
    }

    fn workload(self) -> Option<Workload> {
        match self {
            Scenario::Ping => Some(Workload::Ping),
            Scenario::PointSelect => Some(Workload::PointSelect),
            Scenario::ReadWrite => Some(Workload::ReadWrite),
            Scenario::ReadMostly => Some(Workload::ReadMostly),
            Scenario::NewOrder => Some(Workload::NewOrder),
            Scenario::KvLookup => None,
        }
    }
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub scenario: Scenario,
    /// The SQL protocol (ignored by kv-lookup, which speaks HandlerSocket).
    pub protocol: Protocol,
    pub mode: Mode,
    pub addr: String,
    pub user: String,
    pub password: String,
    pub db: String,
    /// Log in over TLS (see `SqlTarget::tls`).
    pub tls: bool,
    pub table: String,
    /// Columns returned: None takes the scenario's default (`c`; kv-lookup `id,k,c,pad`).
    pub columns: Option<String>,
    pub key_column: String,
    /// HandlerSocket index (kv-lookup).
    pub index: String,
    /// Requests in flight per connection (kv-lookup); 1 for SQL.
    pub depth: usize,
    pub plan: Plan,
    /// Runtime threads of the load generator (1: a current-thread runtime).
    pub threads: usize,
    /// Show a live progress line on stderr when it is a terminal.
    pub progress: bool,
}

impl RunSpec {
    /// A spec with the defaults of `sluice-bench run`.
    pub fn new(scenario: Scenario, protocol: Protocol, addr: &str) -> RunSpec {
        RunSpec {
            scenario,
            protocol,
            mode: Mode::Simple,
            addr: addr.to_string(),
            user: protocol.default_user().to_string(),
            password: String::new(),
            db: "bench".to_string(),
            tls: false,
            table: sql::TABLE.to_string(),
            columns: None,
            key_column: "id".to_string(),
            index: "PRIMARY".to_string(),
            depth: 1,
            plan: Plan {
                connections: 16,
                warmup: Duration::from_secs(1),
                duration: Duration::from_secs(10),
                keys: 100_000,
                seed: 1,
                rate: None,
            },
            threads: 1,
            progress: false,
        }
    }

    /// "protocol" as reported: `hs` for kv-lookup.
    pub fn protocol_name(&self) -> &'static str {
        if self.scenario == Scenario::KvLookup {
            "hs"
        } else {
            self.protocol.name()
        }
    }

    /// "mode" as reported: `-` for kv-lookup.
    pub fn mode_name(&self) -> &'static str {
        if self.scenario == Scenario::KvLookup {
            "-"
        } else {
            self.mode.name()
        }
    }

    fn check(&self) -> Result<()> {
        let p = &self.plan;
        if p.connections == 0 {
            bail!("connections must be at least 1");
        }
        if self.threads == 0 {
            bail!("threads must be at least 1");
        }
        if self.depth == 0 {
            bail!("depth must be at least 1");
        }
        if p.duration.is_zero() {
            bail!("duration must be more than 0");
        }
        if self.scenario != Scenario::KvLookup && self.depth != 1 {
            bail!("SQL scenarios keep one statement in flight per connection; depth must be 1");
        }
        if let Some(r) = p.rate {
            if !(r.is_finite() && r > 0.0) {
                bail!("rate must be a positive number of requests per second");
            }
            if self.scenario == Scenario::KvLookup {
                bail!("open loop (rate) is for the SQL scenarios; kv-lookup is closed loop");
            }
        }
        Ok(())
    }

    /// Executes the run on a runtime of its own and summarizes what it measured.
    pub fn execute(&self) -> Result<Summary> {
        self.check()?;
        let rt = if self.threads == 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(self.threads)
                .enable_all()
                .build()
        }
        .context("start the runtime")?;
        let res = rt.block_on(async {
            let ticker = self
                .progress
                .then(|| tokio::spawn(progress(self.plan.clone())));
            let res = self.scenario_run().await;
            if let Some(t) = ticker {
                t.abort();
                clear_progress();
            }
            res
        });
        // Connections still draining must not hold the process up.
        rt.shutdown_timeout(Duration::from_secs(1));
        let (stats, window) = res?;
        Ok(stats.summarize(window))
    }

    async fn scenario_run(&self) -> Result<(crate::stats::Stats, Duration)> {
        match self.scenario.workload() {
            None => {
                let t = KvTarget {
                    addr: self.addr.clone(),
                    db: self.db.clone(),
                    table: self.table.clone(),
                    index: self.index.clone(),
                    columns: self
                        .columns
                        .clone()
                        .unwrap_or_else(|| "id,k,c,pad".to_string()),
                    depth: self.depth,
                };
                kv::run(&self.plan, &t).await
            }
            Some(w) => {
                let q = Sql::new(
                    w,
                    self.mode,
                    &self.table,
                    self.columns.as_deref().unwrap_or("c"),
                    &self.key_column,
                )?;
                sql::run(&self.plan, &self.sql_target(), &q).await
            }
        }
    }

    /// The SQL login of this spec.
    pub fn sql_target(&self) -> SqlTarget {
        SqlTarget {
            protocol: self.protocol,
            addr: self.addr.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            db: self.db.clone(),
            tls: self.tls,
            driver_reads: false,
            connect_sql: Vec::new(),
        }
    }
}

/// Prints a progress bar with the live throughput on stderr once a second, when stderr
/// is a terminal: `[######..............] 3/10 s  12,345 ops/s` (warm-up first).
async fn progress(plan: Plan) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let start = Instant::now();
    let mut last = (start, LIVE_ANSWERS.load(Ordering::Relaxed));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = Instant::now();
        let n = LIVE_ANSWERS.load(Ordering::Relaxed);
        let rate = (n - last.1) as f64 / (now - last.0).as_secs_f64().max(1e-9);
        last = (now, n);
        let t = now - start;
        let phase = if t < plan.warmup {
            format!(
                "warm-up {:.0}/{:.0} s",
                t.as_secs_f64(),
                plan.warmup.as_secs_f64()
            )
        } else {
            let done = (t - plan.warmup).as_secs_f64();
            let total = plan.duration.as_secs_f64().max(1e-9);
            format!("{} {done:.0}/{total:.0} s", bar(done / total, 20))
        };
        let mut err = std::io::stderr();
        let _ = write!(err, "\r\x1b[2K{phase}  {} ops/s", thousands(rate));
        let _ = err.flush();
    }
}

/// `[#####...............]` for a fraction done.
fn bar(done: f64, width: usize) -> String {
    let filled = ((done.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

fn clear_progress() {
    if std::io::stderr().is_terminal() {
        let mut err = std::io::stderr();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

/// 12345.6 → "12,346".
pub fn thousands(v: f64) -> String {
    let n = if v.is_finite() {
        v.round().max(0.0) as u64
    } else {
        0
    };
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(f64::NAN), "0");
    }

    #[test]
    fn progress_bar() {
        assert_eq!(bar(0.0, 4), "[....]");
        assert_eq!(bar(0.5, 4), "[##..]");
        assert_eq!(bar(2.0, 4), "[####]");
        assert_eq!(bar(f64::NAN, 4).len(), 6);
    }

    #[test]
    fn specs_are_checked() {
        let mut s = RunSpec::new(Scenario::Ping, Protocol::Pg, "127.0.0.1:1");
        s.depth = 2;
        assert!(s.check().is_err());
        s.depth = 1;
        s.plan.rate = Some(0.0);
        assert!(s.check().is_err());
        s.plan.rate = Some(100.0);
        assert!(s.check().is_ok());
        s.scenario = Scenario::KvLookup;
        assert!(s.check().is_err());
        s.plan.rate = None;
        s.plan.connections = 0;
        assert!(s.check().is_err());
    }
}
