//! `point-select`: random primary-key lookups as SQL over the MySQL protocol, one
//! prepared `SELECT <columns> FROM <table> WHERE <key> = ?` per connection (prepared
//! once when the connection opens, then executed with a random key), one statement in
//! flight per connection. A lookup that returns no row is a miss.

use super::{Keys, Plan, Window, drive, open_all};
use crate::stats::Stats;
use anyhow::{Context, Result, anyhow, bail};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Row, Statement};
use std::time::{Duration, Instant};
use tokio::time::timeout_at;

/// Where and what to select.
#[derive(Debug, Clone)]
pub struct SqlTarget {
    /// host:port of the MySQL-protocol server or proxy.
    pub addr: String,
    pub user: String,
    pub password: String,
    pub db: String,
    pub table: String,
    /// Comma-separated columns selected.
    pub columns: String,
    /// The key column compared with `?`.
    pub key_column: String,
}

/// How long connecting, logging in and preparing may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(plan: &Plan, t: &SqlTarget) -> Result<(Stats, Duration)> {
    let (host, port) = split_addr(&t.addr)?;
    for (what, v) in [("table", &t.table), ("key column", &t.key_column)] {
        if !is_identifier(v) {
            bail!("{what} {v:?} is not a plain identifier");
        }
    }
    if !t.columns.split(',').all(|c| is_identifier(c.trim())) {
        bail!("columns {:?} are not plain identifiers", t.columns);
    }
    let opts = OptsBuilder::default()
        .ip_or_hostname(host)
        .tcp_port(port)
        .user(Some(t.user.clone()))
        .pass(Some(t.password.clone()))
        .db_name(Some(t.db.clone()))
        // Stay on TCP to the given address (mysql_async would otherwise switch to the
        // server's Unix socket for a loopback address).
        .prefer_socket(false)
        .tcp_nodelay(true);
    let sql = format!(
        "SELECT {} FROM {} WHERE {} = ?",
        t.columns, t.table, t.key_column
    );
    let conns = open_all(plan, |_| {
        let opts = opts.clone();
        let sql = sql.clone();
        async move {
            tokio::time::timeout(OPEN_TIMEOUT, async move {
                let mut conn = Conn::new(opts).await.context("connect and log in")?;
                let stmt = conn.prep(sql).await.context("prepare the statement")?;
                Ok::<_, anyhow::Error>((conn, stmt))
            })
            .await
            .map_err(|_| anyhow!("connecting took longer than {OPEN_TIMEOUT:?}"))?
        }
    })
    .await?;
    drive(plan, conns, |(conn, stmt), i, window| {
        let keys = Keys::new(plan, i);
        async move {
            let mut stats = Stats::new();
            let mut conn = conn;
            if let Err(e) = selects(&mut conn, &stmt, keys, window, &mut stats).await {
                stats.record_errors(1, || format!("connection {i}: {e:#}"));
            }
            // Best effort: a clean COM_QUIT keeps the server's log quiet.
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.disconnect()).await;
            stats
        }
    })
    .await
}

/// One connection's closed loop, one statement in flight.
async fn selects(
    conn: &mut Conn,
    stmt: &Statement,
    mut keys: Keys,
    w: Window,
    stats: &mut Stats,
) -> Result<()> {
    loop {
        let t0 = Instant::now();
        if !w.open(t0) {
            return Ok(());
        }
        let key = keys.next();
        let row: Option<Row> = timeout_at(w.deadline(), conn.exec_first(stmt, (key,)))
            .await
            .map_err(|_| anyhow!("no answer within 10 s after the end of the run"))?
            .with_context(|| format!("execute with key {key}"))?;
        let now = Instant::now();
        stats.answer();
        if w.counts(now) {
            match row {
                Some(_) => stats.record(now - t0),
                None => stats.record_miss(now - t0),
            }
        }
    }
}

/// "host:port" (the port after the last colon; "[::1]:3306" works too).
pub fn split_addr(addr: &str) -> Result<(String, u16)> {
    let (host, port) = addr
        .rsplit_once(':')
        .with_context(|| format!("address {addr:?} is not host:port"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("bad port in address {addr:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!("address {addr:?} has no host");
    }
    Ok((host.to_string(), port))
}

/// Letters, digits, `_` and `$`, optionally `db.name` (no quoting needed).
fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
        })
}
