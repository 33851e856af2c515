//! `compare` of a file with a `[failover]` section. A failover uses its cluster up, so
//! every round starts the file's processes afresh (servers, then Sluice), and stops them
//! at its end. A round:
//!
//! 1. creates the readers' table (`sluice_bench`) and the writers' table on the primary
//!    directly, and waits until both routes answer (the read-only one with the table's
//!    rows, i.e. the replicas have them);
//! 2. counts the primary's synchronous replicas (without one, acknowledged writes may
//!    be lost by the database itself) and finds the primary's server process
//!    (PostgreSQL: the parent of a backend of its own connection, the postmaster;
//!    MySQL: the pid in `@@pid_file`);
//! 3. runs the load ([`crate::scenario::failover`]); at `kill_after` the primary's
//!    server gets SIGKILL and the replica is promoted `promote_after` later (PostgreSQL
//!    `pg_promote()`; MariaDB `STOP SLAVE IO_THREAD`, what it received applied, then
//!    `STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF`) over a connection
//!    opened before;
//! 4. reads every row from the new primary directly: acknowledged rows missing there are
//!    lost, rows there twice are duplicated.
//!
//! The target printed beside the write window is the cluster's `health_interval` ×
//! `health_failures` + 1 s, read from the Sluice configuration the file names.

use super::file::{BenchFile, FailoverSpec};
use super::procs::{self, Procs};
use super::{CompareOptions, now_rfc3339, runtime, sql_target};
use crate::results::{FailoverReads, FailoverRecord, FailoverSettings, Results, VERSION};
use crate::scenario::failover::{
    self as load, Check, Load, Moments, Numbers, ReadNumbers, WRITES_DDL, WRITES_TABLE,
    one_integer, one_value,
};
use crate::scenario::setup::ensure_table;
use crate::scenario::sql::{Protocol, SqlConn, SqlTarget, TABLE, split_addr};
use crate::spec::thousands;
use anyhow::{Context, Result, anyhow, bail};
use mysql_async::prelude::Queryable;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the routes may take to answer after the processes are up.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Answers in a row from both routes before the load starts (the read-only route takes
/// the replicas in turn: every replica answers).
const READY_ANSWERS: usize = 10;

/// Runs every round of a failover file.
pub fn run(f: &BenchFile, fo: &FailoverSpec, opts: &CompareOptions) -> Result<Results> {
    let settings = settings(f, fo)?;
    let started = now_rfc3339();
    let rounds = opts.rounds.unwrap_or(f.rounds).max(1);
    let log_root = opts
        .log_dir
        .clone()
        .unwrap_or_else(|| "target/bench/logs".into());
    let mut records = Vec::new();
    for round in 1..=rounds {
        let log_dir = log_root.join(format!("failover-round-{round}"));
        let mut procs = Procs::default();
        let mut rec = || -> Result<FailoverRecord> {
            for p in &f.process {
                procs.start(p, &log_dir)?;
            }
            one_round(f, fo, &settings, round)
        };
        let rec = rec();
        procs.stop_all();
        let rec = rec.with_context(|| {
            format!(
                "failover round {round}; the processes' output is in {}",
                log_dir.display()
            )
        })?;
        eprintln!(
            "sluice-bench: failover round {round}/{rounds}: write window {} (target < {} ms), \
             read window {} ms (new clients {} ms); {} writes acknowledged, {} failed ({} \
             committed all the same), {} lost, {} duplicated; output in {}",
            rec.write_window_ms
                .map_or_else(|| "none".to_string(), |w| format!("{} ms", thousands(w))),
            thousands(settings.target_ms as f64),
            thousands(rec.reads.window_ms),
            thousands(rec.new_clients.window_ms),
            thousands(rec.writes_acked as f64),
            thousands(rec.writes_failed as f64),
            rec.writes_failed_present,
            rec.lost,
            rec.duplicated,
            log_dir.display()
        );
        records.push(rec);
    }
    Ok(Results {
        version: VERSION,
        title: f.title.clone(),
        command: opts.command.clone(),
        started,
        machine: procs::machine(),
        targets: vec![fo.writes.clone(), fo.reads.clone()],
        tables: Vec::new(),
        runs: Vec::new(),
        scale: Vec::new(),
        storm: Vec::new(),
        failover: records,
    })
}

/// The round's settings, with the target from the Sluice configuration's cluster.
fn settings(f: &BenchFile, fo: &FailoverSpec) -> Result<FailoverSettings> {
    let path = Path::new(&fo.sluice_config);
    let cfg = sluice_config::load(path).map_err(|e| anyhow!("{e}"))?;
    let cluster = cfg.clusters.get(&fo.cluster).with_context(|| {
        format!(
            "failover: {} has no cluster {:?}",
            path.display(),
            fo.cluster
        )
    })?;
    let h = &cluster.health;
    if h.user.is_none() {
        bail!(
            "failover: cluster {:?} has no health_user: Sluice would not discover roles or \
             follow a promotion",
            fo.cluster
        );
    }
    let protocol = f
        .target(&fo.writes)
        .and_then(|t| t.protocol.sql())
        .context("failover: writes is not a SQL target")?;
    let interval_ms = u64::try_from(h.interval.as_millis()).unwrap_or(u64::MAX);
    let (kill, promote) = match protocol {
        Protocol::Pg => ("SIGKILL to the postmaster", "pg_promote()"),
        Protocol::Mysql => (
            "SIGKILL to mariadbd",
            "STOP SLAVE IO_THREAD, the relay log applied, STOP SLAVE; RESET SLAVE ALL; \
             SET GLOBAL read_only = OFF",
        ),
    };
    Ok(FailoverSettings {
        protocol: protocol.name().to_string(),
        writes: fo.writes.clone(),
        reads: fo.reads.clone(),
        writers: fo.writers,
        readers: fo.readers,
        kill_after_s: fo.kill_after,
        promote_after_s: fo.promote_after,
        run_after_s: fo.run_after,
        kill: kill.to_string(),
        promote: promote.to_string(),
        health_interval_ms: interval_ms,
        health_failures: h.failures,
        target_ms: interval_ms
            .saturating_mul(u64::from(h.failures))
            .saturating_add(1000),
        promoted_port: split_addr(&target(f, &fo.promote)?.addr)?.1,
        notes: fo.notes.clone(),
    })
}

fn target(f: &BenchFile, name: &str) -> Result<SqlTarget> {
    sql_target(
        f.target(name)
            .with_context(|| format!("no target {name:?}"))?,
    )
}

fn one_round(
    f: &BenchFile,
    fo: &FailoverSpec,
    settings: &FailoverSettings,
    round: u32,
) -> Result<FailoverRecord> {
    let primary = target(f, &fo.primary)?;
    let promoted = target(f, &fo.promote)?;
    let writes = target(f, &fo.writes)?;
    let reads = target(f, &fo.reads)?;
    let new_port = i64::from(split_addr(&promoted.addr)?.1);
    let load = Load {
        writes: writes.clone(),
        reads: reads.clone(),
        writers: fo.writers,
        readers: fo.readers,
        keys: f.keys,
        kill_after: Duration::from_secs_f64(fo.kill_after),
        run_after: Duration::from_secs_f64(fo.run_after),
    };
    runtime()?.block_on(async {
        ensure_table(&primary, f.keys)
            .await
            .context("create the readers' table on the primary")?;
        let mut c = SqlConn::connect(&primary, &primary.db).await?;
        c.simple(&format!("DROP TABLE IF EXISTS {WRITES_TABLE}"))
            .await
            .context("drop the writers' table")?;
        c.simple(WRITES_DDL)
            .await
            .context("create the writers' table")?;
        c.close().await;
        wait_ready(&writes, &reads, f.keys).await?;
        let sync_replicas = synchronous_replicas(&primary).await?;
        let pid = server_pid(&primary).await?;
        let promoter = SqlConn::connect(&promoted, &promoted.db)
            .await
            .context("connect to the replica to promote")?;
        let protocol = promoted.protocol;
        let promote_after = Duration::from_secs_f64(fo.promote_after);
        let ran = load::run(&load, async move {
            let kill = Instant::now();
            procs::kill_hard(pid)?;
            eprintln!(
                "sluice-bench: killed the primary's server (pid {pid}) at {} UTC",
                clock_utc()
            );
            tokio::time::sleep(promote_after).await;
            let began = Instant::now();
            promote(promoter, protocol).await?;
            let promoted = Instant::now();
            let promote_ms = (promoted - began).as_secs_f64() * 1000.0;
            eprintln!(
                "sluice-bench: promoted the replica at {} UTC ({promote_ms:.0} ms)",
                clock_utc()
            );
            Ok((kill, promoted, promote_ms))
        })
        .await?;
        let (kill, promoted_at, promote_ms) = ran.event;
        let rows = rows_on(&promoted)
            .await
            .context("read the rows on the new primary")?;
        let moments = Moments {
            kill,
            promoted: promoted_at,
            new_port,
        };
        let n = Numbers::of(&ran.writers, moments);
        let check = Check::of(&ran.writers, &rows);
        Ok(FailoverRecord {
            round,
            settings: settings.clone(),
            write_window_ms: n.write_window_ms,
            promote_ms,
            promoted_ms: promoted_at.saturating_duration_since(kill).as_secs_f64() * 1000.0,
            sync_replicas,
            writes_acked: n.writes_acked,
            writes_acked_after_kill: n.writes_acked_after_kill,
            writes_failed: n.writes_failed,
            writes_failed_present: check.failed_present,
            lost: check.lost,
            duplicated: check.duplicated,
            writer_reconnects: n.reconnects,
            write_errors: n.write_errors,
            reads: reads_record(ReadNumbers::of(&ran.readers, moments)),
            new_clients: reads_record(ReadNumbers::of(std::slice::from_ref(&ran.probes), moments)),
        })
    })
}

fn reads_record(r: ReadNumbers) -> FailoverReads {
    FailoverReads {
        ok: r.ok,
        failed: r.failed,
        window_ms: r.window_ms,
        max_ms: r.max_ms,
        after_promotion: r.after_promotion,
        last_new_primary_ms: r.last_new_primary_ms,
        reconnects: r.reconnects,
        errors: r.errors,
    }
}

/// Waits until both routes answer [`READY_ANSWERS`] times in a row: the read-write one
/// reads the writers' table, the read-only one finds the last row of the readers'.
async fn wait_ready(writes: &SqlTarget, reads: &SqlTarget, keys: u64) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let (mut w, mut r) = (None, None);
    let mut good = 0;
    while good < READY_ANSWERS {
        match probe(&mut w, &mut r, writes, reads, keys).await {
            Ok(()) => good += 1,
            Err(e) => {
                good = 0;
                w = None;
                r = None;
                if Instant::now() > deadline {
                    return Err(e.context(format!(
                        "the routes did not answer within {READY_TIMEOUT:?}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    for c in [w, r].into_iter().flatten() {
        c.close().await;
    }
    Ok(())
}

async fn probe(
    w: &mut Option<SqlConn>,
    r: &mut Option<SqlConn>,
    writes: &SqlTarget,
    reads: &SqlTarget,
    keys: u64,
) -> Result<()> {
    if w.is_none() {
        *w = Some(SqlConn::connect(writes, &writes.db).await?);
    }
    if r.is_none() {
        *r = Some(SqlConn::connect(reads, &reads.db).await?);
    }
    let (Some(wc), Some(rc)) = (w.as_mut(), r.as_mut()) else {
        bail!("not connected");
    };
    one_integer(wc, &format!("SELECT count(*) FROM {WRITES_TABLE}"))
        .await
        .context("the read-write route")?;
    let n = one_integer(
        rc,
        &format!("SELECT count(*) FROM {TABLE} WHERE id = {keys}"),
    )
    .await
    .context("the read-only route")?;
    if n != 1 {
        bail!("the read-only route does not have the table's rows yet");
    }
    Ok(())
}

/// The pid of the primary's server process (on this machine).
async fn server_pid(t: &SqlTarget) -> Result<u32> {
    let mut c = SqlConn::connect(t, &t.db)
        .await
        .context("connect to the primary")?;
    let pid = match t.protocol {
        // A backend's parent is the postmaster (pg_ctl detached it from the script).
        Protocol::Pg => {
            let backend = one_integer(&mut c, "SELECT pg_backend_pid()").await?;
            let backend = u32::try_from(backend).context("backend pid")?;
            procs::comm_and_parent(backend)
                .with_context(|| {
                    format!("no process {backend} here: the primary must run on this machine")
                })?
                .1
        }
        Protocol::Mysql => {
            let file = one_value(&mut c, "SELECT @@pid_file").await?;
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read the server's pid file {file}"))?;
            text.trim()
                .parse()
                .with_context(|| format!("the pid file {file} holds {text:?}"))?
        }
    };
    c.close().await;
    let (comm, _) = procs::comm_and_parent(pid).with_context(|| format!("no process {pid}"))?;
    if !matches!(
        comm.as_str(),
        "postgres" | "postmaster" | "mariadbd" | "mysqld"
    ) {
        bail!("process {pid} is {comm:?}, not a database server");
    }
    Ok(pid)
}

/// Promotes the replica on its connection.
async fn promote(mut c: SqlConn, protocol: Protocol) -> Result<()> {
    match protocol {
        Protocol::Pg => {
            let done = one_value(&mut c, "SELECT pg_promote(true, 60)")
                .await
                .context("pg_promote")?;
            if done != "t" {
                bail!("pg_promote answered {done:?}");
            }
        }
        Protocol::Mysql => {
            // What the replica received must be applied before it forgets its primary:
            // semi-synchronous replication acknowledged those commits.
            c.simple("STOP SLAVE IO_THREAD")
                .await
                .context("STOP SLAVE IO_THREAD")?;
            let received = slave_status(&mut c, "Gtid_IO_Pos").await?;
            if !received
                .bytes()
                .all(|b| b.is_ascii_digit() || b"-,".contains(&b))
            {
                bail!("unexpected Gtid_IO_Pos {received:?}");
            }
            let wait = format!("SELECT MASTER_GTID_WAIT('{received}', 30)");
            if one_integer(&mut c, &wait).await? != 0 {
                bail!("the replica did not apply what it received ({received}) within 30 s");
            }
            for sql in [
                "STOP SLAVE",
                "RESET SLAVE ALL",
                "SET GLOBAL read_only = OFF",
            ] {
                c.simple(sql).await.with_context(|| sql.to_string())?;
            }
        }
    }
    c.close().await;
    Ok(())
}

/// A column of a MySQL replica's `SHOW SLAVE STATUS`.
async fn slave_status(c: &mut SqlConn, column: &str) -> Result<String> {
    let SqlConn::My { conn, .. } = c else {
        bail!("not a MySQL connection");
    };
    let row: mysql_async::Row = conn
        .query_first("SHOW SLAVE STATUS")
        .await?
        .context("SHOW SLAVE STATUS: not a replica")?;
    let v: Option<String> = row
        .get_opt(column)
        .with_context(|| format!("SHOW SLAVE STATUS has no column {column}"))?
        .with_context(|| format!("SHOW SLAVE STATUS: {column} is not text"))?;
    v.with_context(|| format!("SHOW SLAVE STATUS: {column} is NULL"))
}

/// Replicas the primary waits for before it acknowledges a commit (PostgreSQL: standbys
/// in sync state; MariaDB: semi-synchronous replicas while semi-sync is on).
async fn synchronous_replicas(t: &SqlTarget) -> Result<u64> {
    let mut c = SqlConn::connect(t, &t.db).await?;
    let sql = match t.protocol {
        Protocol::Pg => "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
        Protocol::Mysql => {
            "SELECT IF(s.VARIABLE_VALUE = 'ON', n.VARIABLE_VALUE, 0) \
             FROM information_schema.GLOBAL_STATUS s, information_schema.GLOBAL_STATUS n \
             WHERE s.VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS' \
             AND n.VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'"
        }
    };
    let n = one_integer(&mut c, sql)
        .await
        .context("count the synchronous replicas")?;
    c.close().await;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// How often each (client, seq) is on the server.
async fn rows_on(t: &SqlTarget) -> Result<HashMap<(i32, i32), i64>> {
    let mut c = SqlConn::connect(t, &t.db).await?;
    let sql = format!("SELECT client, seq, count(*) FROM {WRITES_TABLE} GROUP BY client, seq");
    let mut rows = HashMap::new();
    match &mut c {
        SqlConn::Pg { client, .. } => {
            for r in client.query(&sql, &[]).await? {
                rows.insert((r.try_get(0)?, r.try_get(1)?), r.try_get(2)?);
            }
        }
        SqlConn::My { conn, .. } => {
            let got: Vec<(i32, i32, i64)> = conn.query(sql).await?;
            for (client, seq, n) in got {
                rows.insert((client, seq), n);
            }
        }
    }
    c.close().await;
    Ok(rows)
}

/// The time of day, UTC, to the millisecond (to find the moment in the logs).
fn clock_utc() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = now.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s % 3600 / 60,
        s % 60,
        now.subsec_millis()
    )
}
