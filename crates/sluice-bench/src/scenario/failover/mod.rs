//! The load of a failover round. Writers insert numbered rows, each client its own
//! sequence `(client, seq)`, through a read-write route; readers run point selects
//! through a read-only route; all on one clock. At `kill_after` the event (kill the
//! primary, promote a replica) runs beside them, and the load goes on `run_after` more.
//!
//! A writer never sends a failed row again: an error counts the row as failed and the
//! writer goes on with its next row, after a 10 ms pause (so that a route answering
//! errors at once does not spin the shared cores), and on a new connection only if its
//! own was closed. Every insert returns the port of the server that wrote the row, so
//! the first row the new primary acknowledged is known, and every read the port of the
//! server that answered it, so reads the promoted server still answered on the
//! read-only route are known. What each writer and reader saw is kept with its time;
//! [`Numbers::of`] and [`Check::of`] turn that into the round's numbers once the kill's
//! moment and the new primary's rows are known.

mod numbers;

pub use numbers::{Check, Moments, Numbers, ReadNumbers};

use super::sql::{Protocol, SqlConn, SqlTarget, TABLE, fatal};
use super::{Keys, Plan, open_all};
use anyhow::{Context, Result, bail};
use mysql_async::prelude::Queryable;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout_at};

/// The table the writers insert into (created by the round's setup).
pub const WRITES_TABLE: &str = "failover_writes";

/// The writes table: no key on purpose, so that a row written twice is there twice.
pub const WRITES_DDL: &str = "CREATE TABLE failover_writes \
    (client integer NOT NULL, seq integer NOT NULL, port integer NOT NULL)";

/// Pause after a failed statement or connection attempt.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// How long after the end of the run an answer is still awaited.
const STUCK_AFTER: Duration = Duration::from_secs(10);

/// The pause between one new client of the read-only route and the next, and how long
/// one may take to log in and read (longer than a pool's usual wait_timeout, so that
/// the route's own error is what shows).
const PROBE_EVERY: Duration = Duration::from_millis(100);
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Distinct error messages kept per writer or reader (the rest are counted as "other").
const MAX_DISTINCT_ERRORS: usize = 20;

/// What a round's load does.
#[derive(Debug, Clone)]
pub struct Load {
    pub writes: SqlTarget,
    pub reads: SqlTarget,
    pub writers: usize,
    pub readers: usize,
    /// Readers draw keys of `sluice_bench` from 1..=keys.
    pub keys: u64,
    pub kill_after: Duration,
    pub run_after: Duration,
}

/// A write acknowledged to its client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ack {
    pub seq: i32,
    /// When the answer arrived.
    pub at: Instant,
    /// The port of the server that wrote the row.
    pub port: i64,
}

/// Error messages and how often each came.
pub type ErrorCounts = BTreeMap<String, u64>;

fn count_error(errors: &mut ErrorCounts, e: &anyhow::Error) {
    let text = format!("{e:#}");
    if errors.contains_key(&text) || errors.len() < MAX_DISTINCT_ERRORS {
        *errors.entry(text).or_default() += 1;
    } else {
        *errors.entry("other errors".to_string()).or_default() += 1;
    }
}

/// What one writer did.
#[derive(Debug, Clone, Default)]
pub struct WriterLog {
    pub client: i32,
    pub acked: Vec<Ack>,
    /// Rows sent but not acknowledged (an error, or no answer): never sent again.
    pub failed: Vec<i32>,
    pub errors: ErrorCounts,
    pub reconnects: u64,
}

/// One read: when it was sent, when its answer (or error) came, and the port of the
/// server that answered (None: it failed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Read {
    pub sent: Instant,
    pub done: Instant,
    pub port: Option<i64>,
}

/// What one reader did.
#[derive(Debug, Clone, Default)]
pub struct ReaderLog {
    pub reads: Vec<Read>,
    pub errors: ErrorCounts,
    pub reconnects: u64,
}

/// The whole load's logs and what the event returned.
pub struct Ran<E> {
    pub writers: Vec<WriterLog>,
    pub readers: Vec<ReaderLog>,
    /// The new clients of the read-only route ([`prober`]).
    pub probes: ReaderLog,
    pub event: E,
}

/// The server's own port, in SQL.
fn port_expr(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Pg => "inet_server_port()",
        Protocol::Mysql => "@@port",
    }
}

/// The insert of row (client, seq), returning the port of the server that wrote it.
pub fn insert_sql(protocol: Protocol, client: i32, seq: i32) -> String {
    let port = port_expr(protocol);
    format!(
        "INSERT INTO {WRITES_TABLE} (client, seq, port) VALUES ({client}, {seq}, {port}) \
         RETURNING port"
    )
}

/// The point select of key `key`, returning the port of the server that read it.
pub fn read_sql(protocol: Protocol, key: u64) -> String {
    format!(
        "SELECT {} FROM {TABLE} WHERE id = {key}",
        port_expr(protocol)
    )
}

/// Runs a statement that returns one value, as text.
pub async fn one_value(conn: &mut SqlConn, sql: &str) -> Result<String> {
    match conn {
        SqlConn::Pg { client, .. } => {
            for m in client.simple_query(sql).await? {
                if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                    return Ok(r.get(0).context("the statement returned NULL")?.to_string());
                }
            }
            bail!("the statement returned no row")
        }
        SqlConn::My { conn, .. } => {
            // Text protocol: every value comes as text.
            let v: Option<Option<String>> = conn.query_first(sql).await?;
            v.context("the statement returned no row")?
                .context("the statement returned NULL")
        }
    }
}

/// Runs a statement that returns one integer (the insert's port, a count).
pub async fn one_integer(conn: &mut SqlConn, sql: &str) -> Result<i64> {
    let v = one_value(conn, sql).await?;
    v.trim()
        .parse()
        .with_context(|| format!("the statement returned {v:?}, not an integer"))
}

/// Runs the load: opens every connection, starts the clock, polls `event` at
/// `kill_after`, stops sending at `kill_after + run_after` and waits for the answers.
pub async fn run<E, F>(load: &Load, event: F) -> Result<Ran<E>>
where
    F: Future<Output = Result<E>> + Send + 'static,
    E: Send + 'static,
{
    let plan = |n: usize| Plan {
        connections: n,
        warmup: Duration::ZERO,
        duration: load.kill_after + load.run_after,
        keys: load.keys,
        seed: 11,
        rate: None,
    };
    let w = load.writes.clone();
    let writer_conns = open_all(&plan(load.writers), move |_| {
        let w = w.clone();
        async move { SqlConn::connect(&w, &w.db).await }
    })
    .await
    .context("open the writers' connections")?;
    let reader_conns = if load.readers == 0 {
        Vec::new()
    } else {
        let r = load.reads.clone();
        open_all(&plan(load.readers), move |_| {
            let r = r.clone();
            async move { SqlConn::connect(&r, &r.db).await }
        })
        .await
        .context("open the readers' connections")?
    };
    let start = Instant::now();
    let kill_at = start + load.kill_after;
    let until = kill_at + load.run_after;
    let event = tokio::spawn(async move {
        tokio::time::sleep_until(tokio::time::Instant::from_std(kill_at)).await;
        event.await
    });
    let mut writers = JoinSet::new();
    for (i, c) in writer_conns.into_iter().enumerate() {
        let client = i32::try_from(i + 1).context("too many writers")?;
        writers.spawn(writer(load.writes.clone(), client, c, until));
    }
    let mut readers = JoinSet::new();
    let reads_plan = plan(load.readers + 1);
    for (i, c) in reader_conns.into_iter().enumerate() {
        let keys = Keys::new(&reads_plan, i);
        readers.spawn(reader(load.reads.clone(), keys, c, until));
    }
    let probes = tokio::spawn(prober(
        load.reads.clone(),
        Keys::new(&reads_plan, load.readers),
        until,
    ));
    let event = event.await.context("the failover event panicked")?;
    let mut w_logs = Vec::new();
    while let Some(j) = writers.join_next().await {
        w_logs.push(j.context("a writer panicked")?);
    }
    w_logs.sort_by_key(|l| l.client);
    let mut r_logs = Vec::new();
    while let Some(j) = readers.join_next().await {
        r_logs.push(j.context("a reader panicked")?);
    }
    let probes = probes.await.context("the prober panicked")?;
    Ok(Ran {
        writers: w_logs,
        readers: r_logs,
        probes,
        event: event?,
    })
}

/// Whether a connection is gone after `e`: closed, or a lost-connection error (MySQL
/// 1927, 2013 or 2006, which a proxy sends for a statement whose server died while it
/// keeps the session) after which it does not answer a ping.
async fn gone(c: &mut SqlConn, e: &anyhow::Error) -> bool {
    if !fatal(c, e) {
        return false;
    }
    c.is_closed() || c.ping().await.is_err()
}

/// A new connection for a writer or reader whose own was closed (None: not before the
/// end of the run, or refused: the error is counted and the caller pauses).
async fn reconnect(t: &SqlTarget, until: Instant, errors: &mut ErrorCounts) -> Option<SqlConn> {
    let open = SqlConn::connect(t, &t.db);
    match timeout_at(tokio::time::Instant::from_std(until), open).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            count_error(errors, &e.context("reconnect"));
            sleep(ERROR_PAUSE).await;
            None
        }
        Err(_) => None,
    }
}

async fn writer(t: SqlTarget, client: i32, conn: SqlConn, until: Instant) -> WriterLog {
    let mut log = WriterLog {
        client,
        ..WriterLog::default()
    };
    let deadline = tokio::time::Instant::from_std(until + STUCK_AFTER);
    let mut conn = Some(conn);
    let mut seq = 0i32;
    while Instant::now() < until {
        let Some(c) = conn.as_mut() else {
            conn = reconnect(&t, until, &mut log.errors).await;
            log.reconnects += u64::from(conn.is_some());
            continue;
        };
        seq += 1;
        let sql = insert_sql(t.protocol, client, seq);
        match timeout_at(deadline, one_integer(c, &sql)).await {
            Ok(Ok(port)) => log.acked.push(Ack {
                seq,
                at: Instant::now(),
                port,
            }),
            Ok(Err(e)) => {
                log.failed.push(seq);
                count_error(&mut log.errors, &e);
                if gone(c, &e).await {
                    conn = None;
                }
                sleep(ERROR_PAUSE).await;
            }
            Err(_) => {
                log.failed.push(seq);
                count_error(
                    &mut log.errors,
                    &anyhow::anyhow!("no answer within 10 s after the end of the run"),
                );
                return log;
            }
        }
    }
    if let Some(c) = conn {
        c.close().await;
    }
    log
}

async fn reader(t: SqlTarget, mut keys: Keys, conn: SqlConn, until: Instant) -> ReaderLog {
    let mut log = ReaderLog::default();
    let deadline = tokio::time::Instant::from_std(until + STUCK_AFTER);
    let mut conn = Some(conn);
    while Instant::now() < until {
        let Some(c) = conn.as_mut() else {
            conn = reconnect(&t, until, &mut log.errors).await;
            log.reconnects += u64::from(conn.is_some());
            continue;
        };
        let sql = read_sql(t.protocol, keys.draw());
        let sent = Instant::now();
        let res = timeout_at(deadline, one_integer(c, &sql)).await;
        let done = Instant::now();
        match res {
            Ok(Ok(port)) => log.reads.push(Read {
                sent,
                done,
                port: Some(port),
            }),
            Ok(Err(e)) => {
                log.reads.push(Read {
                    sent,
                    done,
                    port: None,
                });
                count_error(&mut log.errors, &e);
                if gone(c, &e).await {
                    conn = None;
                }
                sleep(ERROR_PAUSE).await;
            }
            Err(_) => {
                log.reads.push(Read {
                    sent,
                    done,
                    port: None,
                });
                count_error(
                    &mut log.errors,
                    &anyhow::anyhow!("no answer within 10 s after the end of the run"),
                );
                return log;
            }
        }
    }
    if let Some(c) = conn {
        c.close().await;
    }
    log
}

/// New clients of the read-only route, one after the other, 100 ms apart: each logs in,
/// reads one row and leaves. Sessions that stay connected keep the server they had
/// while the route has nowhere else to send them; a new client shows where the route
/// itself stands.
async fn prober(t: SqlTarget, mut keys: Keys, until: Instant) -> ReaderLog {
    let mut log = ReaderLog::default();
    while Instant::now() < until {
        let sql = read_sql(t.protocol, keys.draw());
        let sent = Instant::now();
        let res = tokio::time::timeout(PROBE_TIMEOUT, async {
            let mut c = SqlConn::connect(&t, &t.db).await?;
            let port = one_integer(&mut c, &sql).await;
            c.close().await;
            port
        })
        .await;
        let done = Instant::now();
        let port = match res {
            Ok(Ok(port)) => Some(port),
            Ok(Err(e)) => {
                count_error(&mut log.errors, &e);
                None
            }
            Err(_) => {
                count_error(
                    &mut log.errors,
                    &anyhow::anyhow!("no login and read within {PROBE_TIMEOUT:?}"),
                );
                None
            }
        };
        log.reads.push(Read { sent, done, port });
        sleep(PROBE_EVERY).await;
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_return_the_server_port() {
        assert_eq!(
            insert_sql(Protocol::Pg, 3, 17),
            "INSERT INTO failover_writes (client, seq, port) VALUES (3, 17, inet_server_port()) RETURNING port"
        );
        assert!(insert_sql(Protocol::Mysql, 1, 2).contains("(1, 2, @@port) RETURNING port"));
        assert_eq!(
            read_sql(Protocol::Mysql, 42),
            "SELECT @@port FROM sluice_bench WHERE id = 42"
        );
    }

    #[test]
    fn distinct_errors_are_capped() {
        let mut e = ErrorCounts::new();
        for i in 0..(MAX_DISTINCT_ERRORS + 5) {
            count_error(&mut e, &anyhow::anyhow!("error {i}"));
        }
        count_error(&mut e, &anyhow::anyhow!("error 0"));
        assert_eq!(e.len(), MAX_DISTINCT_ERRORS + 1);
        assert_eq!(e.get("other errors"), Some(&5));
        assert_eq!(e.get("error 0"), Some(&2));
    }
}
