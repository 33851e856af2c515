//! Login storm: `clients` clients connect to a target at the same moment (no gate: every
//! connect is started before the first answer is read), and each logs in. Measured: the
//! time until the last one is logged in, how many could not log in (refused, failed, or
//! not done within the timeout), each client's own login time, and the proxy's CPU time
//! over the storm. The clients then disconnect, and the next round waits for the proxy to
//! have let them go.

use super::file::{BenchFile, StormSpec, TargetSpec};
use super::procs::cpu_seconds;
use super::{CompareOptions, measured_pid, runtime, sql_target};
use crate::results::{StormRecord, StormRound};
use crate::scenario::sql::{SqlConn, SqlTarget};
use anyhow::{Context, Result};
use std::time::{Duration, Instant};

pub fn measure(
    f: &BenchFile,
    s: &StormSpec,
    target: &TargetSpec,
    opts: &CompareOptions,
    procs: &mut super::procs::Procs,
) -> Result<StormRecord> {
    let pid = measured_pid(target, procs)?.context("a storm target needs a process")?;
    let login = sql_target(target)?;
    let rounds = opts.rounds.or(s.rounds).unwrap_or(f.rounds).max(1);
    let timeout = Duration::from_secs_f64(s.timeout.clamp(0.1, 3_600.0));
    let mut record = StormRecord {
        target: target.name.clone(),
        protocol: login.protocol.name().to_string(),
        tls: login.tls,
        clients: s.clients,
        rounds: Vec::new(),
    };
    for round in 1..=rounds {
        let rt = runtime()?;
        let cpu_before = cpu_seconds(pid)?;
        let (mut r, conns) = rt.block_on(storm(&login, s.clients, timeout));
        r.cpu_seconds = cpu_seconds(pid)? - cpu_before;
        eprintln!(
            "sluice-bench: storm {} round {round}: {} clients logged in in {:.2} s ({} failed; login p50 {:.1} ms, p99 {:.1} ms; proxy CPU {:.2} s){}",
            target.name,
            s.clients - r.failed,
            r.seconds,
            r.failed,
            r.login_p50_ms,
            r.login_p99_ms,
            r.cpu_seconds,
            if r.first_error.is_empty() {
                String::new()
            } else {
                format!("; first error: {}", r.first_error)
            }
        );
        rt.block_on(async {
            let mut closing = tokio::task::JoinSet::new();
            for c in conns {
                closing.spawn(c.close());
            }
            while closing.join_next().await.is_some() {}
        });
        drop(rt);
        record.rounds.push(r);
        // The proxy closes its side of thousands of sockets: let it before the next storm.
        std::thread::sleep(Duration::from_secs(2));
    }
    Ok(record)
}

/// One storm: every client's connect starts at once.
async fn storm(t: &SqlTarget, n: usize, timeout: Duration) -> (StormRound, Vec<SqlConn>) {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let t = t.clone();
        set.spawn(async move {
            let began = Instant::now();
            let conn = match tokio::time::timeout(timeout, SqlConn::connect(&t, &t.db)).await {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(format!("{e:#}")),
                Err(_) => Err(format!("not logged in after {timeout:?}")),
            };
            (conn, began.elapsed())
        });
    }
    let mut conns = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    let (mut failed, mut first_error) = (0, String::new());
    while let Some(joined) = set.join_next().await {
        let error = match joined {
            Ok((Ok(c), took)) => {
                conns.push(c);
                times.push(took);
                continue;
            }
            Ok((Err(e), _)) => e,
            Err(e) => e.to_string(),
        };
        failed += 1;
        if first_error.is_empty() {
            first_error = error;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    times.sort();
    let ms = |q: f64| {
        let i = ((times.len() as f64 * q).ceil() as usize).saturating_sub(1);
        times.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let round = StormRound {
        seconds,
        failed,
        first_error,
        login_p50_ms: ms(0.5),
        login_p99_ms: ms(0.99),
        cpu_seconds: 0.0,
    };
    (round, conns)
}
