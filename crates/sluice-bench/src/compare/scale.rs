//! Connection scale: a small active set runs alone; then `idle` more clients log in and
//! stay silent, and the proxy's resident memory is read before and after they came; then
//! the active set runs again beside them. Memory per idle client = the growth divided by
//! their number. The idle clients live on a runtime of their own that nobody drives
//! while they wait: they cost the proxy, not this process, anything.

use super::file::{BenchFile, ScaleSpec, TargetSpec};
use super::procs::memory_kib;
use super::{CompareOptions, measured_pid, runtime, spec_for, sql_target};
use crate::results::ScaleRecord;
use crate::scenario::Plan;
use crate::scenario::setup::ensure_database;
use crate::scenario::sql::{SqlConn, SqlTarget};
use crate::spec::{RunSpec, thousands};
use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Logins in progress at once while the idle crowd connects.
const CONNECTING_AT_ONCE: usize = 64;

pub fn measure(
    f: &BenchFile,
    s: &ScaleSpec,
    target: &TargetSpec,
    opts: &CompareOptions,
    procs: &mut super::procs::Procs,
) -> Result<ScaleRecord> {
    let pid = measured_pid(target, procs)?.context("a scale target needs a process")?;
    // The database the clients log in to, created on the server itself (a target of the
    // same protocol that is not a proxy).
    if let Some(direct) = f
        .target
        .iter()
        .find(|x| x.protocol == target.protocol && x.process.is_none())
    {
        runtime()?
            .block_on(ensure_database(&sql_target(direct)?))
            .with_context(|| format!("scale: create the database through {}", direct.name))?;
    }
    let table = super::file::TableSpec {
        id: "scale".to_string(),
        title: String::new(),
        scenario: s.scenario,
        mode: s.mode,
        connections: vec![s.active],
        targets: None,
        depth: 1,
        rate: None,
        keys: None,
        rounds: None,
        duration: None,
        warmup: None,
        setup: Vec::new(),
        notes: String::new(),
    };
    let mut spec: RunSpec = spec_for(f, &table, target)?;
    spec.plan = Plan {
        connections: s.active,
        warmup: Duration::from_secs_f64(f.warmup.clamp(0.0, 86_400.0)),
        duration: opts.duration.unwrap_or_else(|| {
            Duration::from_secs_f64(s.duration.unwrap_or(f.duration).clamp(0.1, 86_400.0))
        }),
        keys: f.keys,
        seed: 7,
        rate: None,
    };
    let without_idle = spec.execute().context("scale: the active set alone")?;
    std::thread::sleep(Duration::from_millis(500));
    let (rss_before, _) = memory_kib(pid)?;
    let login = sql_target(target)?;
    let idle_rt = runtime()?;
    eprintln!(
        "sluice-bench: scale {}: opening {} idle clients",
        target.name, s.idle
    );
    let crowd = idle_rt.block_on(open_crowd(&login, s.idle, !target.idle_silent))?;
    std::thread::sleep(Duration::from_secs_f64(s.settle.clamp(0.0, 600.0)));
    let (rss_idle, _) = memory_kib(pid)?;
    let with_idle = spec
        .execute()
        .context("scale: the active set beside the idle clients")?;
    let bytes_per_idle = (rss_idle as f64 - rss_before as f64) * 1024.0 / s.idle as f64;
    eprintln!(
        "sluice-bench: scale {}: {} idle clients, {:.0} bytes each; active {} ops/s alone, {} with them",
        target.name,
        s.idle,
        bytes_per_idle,
        thousands(without_idle.ops_per_sec),
        thousands(with_idle.ops_per_sec)
    );
    idle_rt.block_on(async {
        for c in crowd {
            c.close().await;
        }
    });
    drop(idle_rt);
    Ok(ScaleRecord {
        target: target.name.clone(),
        protocol: login.protocol.name().to_string(),
        idle: s.idle,
        active: s.active,
        scenario: s.scenario.name().to_string(),
        mode: s.mode.name().to_string(),
        rss_before_kib: rss_before,
        rss_idle_kib: rss_idle,
        bytes_per_idle,
        without_idle,
        with_idle,
    })
}

/// Opens `n` logged-in connections, a few dozen logins at a time; with `work`, each
/// runs one `SELECT 1` (an idle client is one that has worked and waits: what its
/// statement left behind counts too).
async fn open_crowd(t: &SqlTarget, n: usize, work: bool) -> Result<Vec<SqlConn>> {
    let gate = Arc::new(Semaphore::new(CONNECTING_AT_ONCE));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (t, gate) = (t.clone(), gate.clone());
        set.spawn(async move {
            let _permit = gate.acquire_owned().await;
            let mut c = SqlConn::connect(&t, &t.db).await?;
            if work {
                c.simple("SELECT 1").await?;
            }
            anyhow::Ok(c)
        });
    }
    let mut conns = Vec::with_capacity(n);
    let mut failed = 0usize;
    let mut first = None;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(c)) => conns.push(c),
            Ok(Err(e)) => {
                failed += 1;
                first.get_or_insert_with(|| format!("{e:#}"));
            }
            Err(e) => {
                failed += 1;
                first.get_or_insert_with(|| format!("{e}"));
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {n} idle clients could not log in (or run their SELECT 1); first error: {}",
            first.unwrap_or_default()
        );
    }
    Ok(conns)
}
