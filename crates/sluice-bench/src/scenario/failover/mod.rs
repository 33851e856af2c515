//! The load of a failover round. Writers insert numbered rows, each client its own
//! sequence `(client, seq)`, through a read-write route; readers run point selects
//! through a read-only route; all on one clock. At `kill_after` the event (kill the
//! primary, promote a replica) runs beside them, and the load goes on `run_after` more.
//!
//! A writer never sends a failed row again: an error counts the row as failed and the
//! writer goes on with its next row, after a 10 ms pause (so that a route answering
//! errors at once does not spin the shared cores), and on a new connection only if its
//! own was closed. Every insert returns the port of the server that wrote the row, so
//! the first row the new primary acknowledged is known. What each writer and reader saw
//! is kept with its time; [`Numbers::of`] and [`Check::of`] turn that into the round's
//! numbers once the kill's moment and the new primary's rows are known.

use super::sql::{Mode, Protocol, Sql, SqlConn, SqlTarget, Workload, fatal};
use super::{Keys, Plan, open_all};
use anyhow::{Context, Result, bail};
use mysql_async::prelude::Queryable;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout_at};

/// The table the writers insert into (created by the round's setup).
pub const WRITES_TABLE: &str = "failover_writes";

/// The writes table: no key on purpose, so that a row written twice is there twice.
pub const WRITES_DDL: &str = "CREATE TABLE failover_writes (client integer NOT NULL, seq integer NOT NULL, \
     port integer NOT NULL)";

/// Pause after a failed statement or connection attempt.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// How long after the end of the run an answer is still awaited.
const STUCK_AFTER: Duration = Duration::from_secs(10);

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

/// One read: when it was sent, when its answer (or error) came, whether it succeeded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Read {
    pub sent: Instant,
    pub done: Instant,
    pub ok: bool,
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
    pub event: E,
}

/// The insert of row (client, seq), returning the port of the server that wrote it.
pub fn insert_sql(protocol: Protocol, client: i32, seq: i32) -> String {
    let port = match protocol {
        Protocol::Pg => "inet_server_port()",
        Protocol::Mysql => "@@port",
    };
    format!(
        "INSERT INTO {WRITES_TABLE} (client, seq, port) VALUES ({client}, {seq}, {port}) \
         RETURNING port"
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
    let q = Sql::standard(Workload::PointSelect, Mode::Simple)?;
    let reader_conns = if load.readers == 0 {
        Vec::new()
    } else {
        let (r, q) = (load.reads.clone(), q.clone());
        open_all(&plan(load.readers), move |_| {
            let (r, q) = (r.clone(), q.clone());
            async move { SqlConn::open(&r, &q).await }
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
    let reads_plan = plan(load.readers.max(1));
    for (i, c) in reader_conns.into_iter().enumerate() {
        let keys = Keys::new(&reads_plan, i);
        readers.spawn(reader(load.reads.clone(), q.clone(), keys, c, until));
    }
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
    Ok(Ran {
        writers: w_logs,
        readers: r_logs,
        event: event?,
    })
}

/// A new connection for a writer or reader whose own was closed (None: not before the
/// end of the run, or refused: the error is counted and the caller pauses).
async fn reconnect(
    t: &SqlTarget,
    q: Option<&Sql>,
    until: Instant,
    errors: &mut ErrorCounts,
) -> Option<SqlConn> {
    let open = async {
        match q {
            Some(q) => SqlConn::open(t, q).await,
            None => SqlConn::connect(t, &t.db).await,
        }
    };
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
            conn = reconnect(&t, None, until, &mut log.errors).await;
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
                if fatal(c, &e) {
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

async fn reader(t: SqlTarget, q: Sql, mut keys: Keys, conn: SqlConn, until: Instant) -> ReaderLog {
    let mut log = ReaderLog::default();
    let deadline = tokio::time::Instant::from_std(until + STUCK_AFTER);
    let mut conn = Some(conn);
    while Instant::now() < until {
        let Some(c) = conn.as_mut() else {
            conn = reconnect(&t, Some(&q), until, &mut log.errors).await;
            log.reconnects += u64::from(conn.is_some());
            continue;
        };
        let sent = Instant::now();
        let res = timeout_at(deadline, c.op(&q, &mut keys)).await;
        let done = Instant::now();
        match res {
            Ok(Ok(_)) => log.reads.push(Read {
                sent,
                done,
                ok: true,
            }),
            Ok(Err(e)) => {
                log.reads.push(Read {
                    sent,
                    done,
                    ok: false,
                });
                count_error(&mut log.errors, &e);
                if fatal(c, &e) {
                    conn = None;
                }
                sleep(ERROR_PAUSE).await;
            }
            Err(_) => {
                log.reads.push(Read {
                    sent,
                    done,
                    ok: false,
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The round's numbers from the logs (times in milliseconds from the kill).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Numbers {
    pub write_window_ms: Option<f64>,
    pub read_window_ms: f64,
    pub writes_acked: u64,
    pub writes_acked_after_kill: u64,
    pub writes_failed: u64,
    pub reads_ok: u64,
    pub reads_failed: u64,
    pub read_max_ms: f64,
    pub reconnects: u64,
    pub write_errors: ErrorCounts,
    pub read_errors: ErrorCounts,
}

impl Numbers {
    /// `new_port`: the promoted server's port.
    pub fn of(
        writers: &[WriterLog],
        readers: &[ReaderLog],
        kill: Instant,
        new_port: i64,
    ) -> Numbers {
        let mut n = Numbers::default();
        let mut first_new: Option<Instant> = None;
        for w in writers {
            n.writes_acked += w.acked.len() as u64;
            n.writes_failed += w.failed.len() as u64;
            n.reconnects += w.reconnects;
            for a in &w.acked {
                if a.at >= kill {
                    n.writes_acked_after_kill += 1;
                    if a.port == new_port && first_new.is_none_or(|f| a.at < f) {
                        first_new = Some(a.at);
                    }
                }
            }
            merge_errors(&mut n.write_errors, &w.errors);
        }
        n.write_window_ms = first_new.map(|f| ms(f - kill));
        let mut failed_span: Option<(Instant, Instant)> = None;
        let mut longest = Duration::ZERO;
        for r in readers {
            n.reconnects += r.reconnects;
            merge_errors(&mut n.read_errors, &r.errors);
            for x in &r.reads {
                if x.ok {
                    n.reads_ok += 1;
                    if x.done >= kill {
                        longest = longest.max(x.done - x.sent);
                    }
                } else {
                    n.reads_failed += 1;
                    failed_span = Some(match failed_span {
                        None => (x.sent, x.done),
                        Some((a, b)) => (a.min(x.sent), b.max(x.done)),
                    });
                }
            }
        }
        n.read_window_ms = failed_span.map_or(0.0, |(a, b)| ms(b - a));
        n.read_max_ms = ms(longest);
        n
    }
}

fn merge_errors(into: &mut ErrorCounts, from: &ErrorCounts) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// What the new primary holds against what the writers were told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Check {
    /// Acknowledged rows that are not there.
    pub lost: u64,
    /// Rows there more than once.
    pub duplicated: u64,
    /// Failed rows that are there (committed, the acknowledgement lost).
    pub failed_present: u64,
}

impl Check {
    /// `rows`: how often each (client, seq) is on the new primary.
    pub fn of(writers: &[WriterLog], rows: &HashMap<(i32, i32), i64>) -> Check {
        let mut c = Check {
            duplicated: rows.values().filter(|&&n| n > 1).count() as u64,
            ..Check::default()
        };
        for w in writers {
            c.lost += w
                .acked
                .iter()
                .filter(|a| !rows.contains_key(&(w.client, a.seq)))
                .count() as u64;
            c.failed_present += w
                .failed
                .iter()
                .filter(|s| rows.contains_key(&(w.client, **s)))
                .count() as u64;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn inserts_return_the_server_port() {
        assert_eq!(
            insert_sql(Protocol::Pg, 3, 17),
            "INSERT INTO failover_writes (client, seq, port) VALUES (3, 17, inet_server_port()) RETURNING port"
        );
        assert!(insert_sql(Protocol::Mysql, 1, 2).contains("(1, 2, @@port) RETURNING port"));
    }

    #[test]
    fn windows_count_from_the_kill() {
        let t = Instant::now();
        let kill = at(t, 1000);
        let ack = |seq, ms, port| Ack {
            seq,
            at: at(t, ms),
            port,
        };
        let w = WriterLog {
            client: 1,
            // The old primary answered once after the kill; the new one from 2,300 ms.
            acked: vec![
                ack(1, 500, 5000),
                ack(2, 1010, 5000),
                ack(4, 2400, 5001),
                ack(5, 2300, 5001),
            ],
            failed: vec![3],
            errors: ErrorCounts::from([("gone".to_string(), 1)]),
            reconnects: 1,
        };
        let read = |s, d, ok| Read {
            sent: at(t, s),
            done: at(t, d),
            ok,
        };
        let r = ReaderLog {
            reads: vec![
                read(0, 1, true),
                read(1100, 1150, false),
                read(1160, 1400, true),
                read(1500, 1520, false),
            ],
            errors: ErrorCounts::from([("gone".to_string(), 2)]),
            reconnects: 0,
        };
        let n = Numbers::of(&[w], &[r], kill, 5001);
        assert_eq!(n.write_window_ms, Some(1300.0));
        assert_eq!(n.writes_acked, 4);
        assert_eq!(n.writes_acked_after_kill, 3);
        assert_eq!(n.writes_failed, 1);
        assert_eq!(n.read_window_ms, 420.0);
        assert_eq!((n.reads_ok, n.reads_failed), (2, 2));
        assert_eq!(n.read_max_ms, 240.0);
        assert_eq!(n.reconnects, 1);
        assert_eq!(n.write_errors.get("gone"), Some(&1));
        assert_eq!(n.read_errors.get("gone"), Some(&2));
        // Nothing from the new primary: no window; no failed read: 0.
        let quiet = Numbers::of(&[], &[ReaderLog::default()], kill, 5001);
        assert_eq!(quiet.write_window_ms, None);
        assert_eq!(quiet.read_window_ms, 0.0);
    }

    #[test]
    fn lost_duplicated_and_failed_present() {
        let t = Instant::now();
        let ack = |seq| Ack {
            seq,
            at: t,
            port: 1,
        };
        let w1 = WriterLog {
            client: 1,
            acked: vec![ack(1), ack(2), ack(4)],
            failed: vec![3, 5],
            ..WriterLog::default()
        };
        let w2 = WriterLog {
            client: 2,
            acked: vec![ack(1)],
            ..WriterLog::default()
        };
        let rows = HashMap::from([((1, 1), 1), ((1, 2), 2), ((1, 3), 1), ((2, 1), 1)]);
        let c = Check::of(&[w1, w2], &rows);
        assert_eq!(
            c,
            Check {
                lost: 1,
                duplicated: 1,
                failed_present: 1
            }
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
