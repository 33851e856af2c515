//! SQL scenarios over either protocol: one connection type for PostgreSQL
//! (tokio-postgres) and MySQL (mysql_async), each in simple mode (statement text with
//! the key written in) or prepared mode (prepared once when the connection opens,
//! executed with the key as a parameter). A workload is one operation repeated:
//!
//! - `ping`: `SELECT 1` (the do-nothing query: what the proxy itself costs);
//! - `point-select`: `SELECT c FROM sluice_bench WHERE id = ?` with a random key (no row
//!   is a miss);
//! - `read-write`: `BEGIN`, two point selects, `UPDATE ... SET k = k + 1 WHERE id = ?`,
//!   `COMMIT`: one operation is the whole transaction;
//! - `read-mostly`: a point select, or (for one key in ten) that update on its own,
//!   outside a transaction: 90 % reads, what a read/write split is for.

use super::{Keys, Pacer, Plan, drive, open_all};
use crate::stats::Stats;
use anyhow::{Context, Result, anyhow, bail};
use clap::ValueEnum;
use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tokio::time::timeout_at;

/// The table point-select and read-write use (created by `setup`).
pub const TABLE: &str = "sluice_bench";

/// How long connecting, logging in and preparing may take.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// PostgreSQL.
    Pg,
    /// MySQL / MariaDB.
    Mysql,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Pg => "pg",
            Protocol::Mysql => "mysql",
        }
    }

    /// The login a server of this protocol has out of the box.
    pub fn default_user(self) -> &'static str {
        match self {
            Protocol::Pg => "postgres",
            Protocol::Mysql => "root",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Statement text with the key written in (PostgreSQL simple query, MySQL COM_QUERY).
    #[default]
    Simple,
    /// Server-side prepared statements, prepared once per connection.
    Prepared,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Simple => "simple",
            Mode::Prepared => "prepared",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Ping,
    PointSelect,
    ReadWrite,
    ReadMostly,
    /// Two transactions per new order, one on the order tables and one on the stock
    /// tables (scenario/orders.rs).
    NewOrder,
}

/// What a run's connections send: the workload, the mode, and the workload's statements
/// (`?` standing for the key).
#[derive(Debug, Clone)]
pub struct Sql {
    pub workload: Workload,
    pub mode: Mode,
    texts: Vec<String>,
}

impl Sql {
    /// The workload's statements over `table`: point selects return `columns` by `key`.
    pub fn new(
        workload: Workload,
        mode: Mode,
        table: &str,
        columns: &str,
        key: &str,
    ) -> Result<Sql> {
        check_identifier("table", table)?;
        check_identifier("key column", key)?;
        for c in columns.split(',') {
            check_identifier("column", c.trim())?;
        }
        let select = format!("SELECT {columns} FROM {table} WHERE {key} = ?");
        let texts = match workload {
            Workload::Ping => vec!["SELECT 1".to_string()],
            Workload::PointSelect => vec![select],
            Workload::ReadWrite | Workload::ReadMostly => {
                vec![
                    select,
                    format!("UPDATE {table} SET k = k + 1 WHERE {key} = ?"),
                ]
            }
            Workload::NewOrder => super::orders::texts(),
        };
        Ok(Sql {
            workload,
            mode,
            texts,
        })
    }

    /// The standard statements over [`TABLE`].
    pub fn standard(workload: Workload, mode: Mode) -> Result<Sql> {
        Sql::new(workload, mode, TABLE, "c", "id")
    }
}

/// Where to connect and how to log in.
#[derive(Debug, Clone)]
pub struct SqlTarget {
    pub protocol: Protocol,
    /// host:port of the server or proxy.
    pub addr: String,
    pub user: String,
    pub password: String,
    pub db: String,
    /// Log in over TLS, without checking the server's certificate (a benchmark measures
    /// the handshake, not trust).
    pub tls: bool,
    /// MySQL: read `@@max_allowed_packet` and `@@wait_timeout` as mysql_async does by
    /// default when it connects (else they are given, and connecting runs nothing).
    pub driver_reads: bool,
    /// MySQL: statements run once logged in, as drivers do (PyMySQL's `SET NAMES`, `SET
    /// AUTOCOMMIT = 0`).
    pub connect_sql: Vec<String>,
}

/// One logged-in connection with the workload's statements prepared (prepared mode).
pub enum SqlConn {
    Pg {
        client: tokio_postgres::Client,
        stmts: Vec<tokio_postgres::Statement>,
    },
    My {
        conn: mysql_async::Conn,
        stmts: Vec<mysql_async::Statement>,
    },
}

/// Plain identifier: letters, digits and `_` (no quoting needed on either protocol).
pub fn check_identifier(what: &str, s: &str) -> Result<()> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        bail!("{what} {s:?} must be letters, digits and _ only");
    }
    Ok(())
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

/// PostgreSQL's `$1` for MySQL's `?`.
fn pg_text(sql: &str) -> String {
    sql.replace('?', "$1")
}

/// The statement with the key written in.
fn with_key(sql: &str, key: u64) -> String {
    sql.replace('?', &key.to_string())
}

impl SqlConn {
    /// Connects to `db` (logged in, nothing prepared).
    pub async fn connect(t: &SqlTarget, db: &str) -> Result<SqlConn> {
        let (host, port) = split_addr(&t.addr)?;
        let fut = async {
            match t.protocol {
                Protocol::Pg => {
                    let mut cfg = tokio_postgres::Config::new();
                    cfg.host(&host)
                        .port(port)
                        .user(&t.user)
                        .dbname(db)
                        .application_name("sluice-bench");
                    if !t.password.is_empty() {
                        cfg.password(&t.password);
                    }
                    let client = if t.tls {
                        cfg.ssl_mode(tokio_postgres::config::SslMode::Require);
                        let (client, connection) = cfg
                            .connect(super::tls::pg()?)
                            .await
                            .with_context(|| format!("connect to {} as {}", t.addr, t.user))?;
                        // Ends with the client; an error shows up on the client's calls.
                        tokio::spawn(connection);
                        client
                    } else {
                        let (client, connection) = cfg
                            .connect(tokio_postgres::NoTls)
                            .await
                            .with_context(|| format!("connect to {} as {}", t.addr, t.user))?;
                        tokio::spawn(connection);
                        client
                    };
                    Ok(SqlConn::Pg {
                        client,
                        stmts: Vec::new(),
                    })
                }
                Protocol::Mysql => {
                    let mut opts = mysql_async::OptsBuilder::default()
                        .ip_or_hostname(host.clone())
                        .tcp_port(port)
                        .user(Some(t.user.clone()))
                        .pass(Some(t.password.clone()))
                        .db_name((!db.is_empty()).then(|| db.to_string()))
                        // Stay on TCP to the given address (mysql_async would otherwise
                        // switch to the server's Unix socket for a loopback address).
                        .prefer_socket(false)
                        .tcp_nodelay(true)
                        .ssl_opts(t.tls.then(super::tls::mysql));
                    // Given, so that connecting reads no server variables: a client
                    // that runs nothing needs no server connection in a proxy's
                    // session mode that gives one at the first statement.
                    if !t.driver_reads {
                        opts = opts
                            .max_allowed_packet(Some(64 << 20))
                            .wait_timeout(Some(28_800));
                    }
                    let mut conn = mysql_async::Conn::new(opts)
                        .await
                        .with_context(|| format!("connect to {} as {}", t.addr, t.user))?;
                    for sql in &t.connect_sql {
                        use mysql_async::prelude::Queryable;
                        conn.query_drop(sql.as_str())
                            .await
                            .with_context(|| format!("{sql} on {}", t.addr))?;
                    }
                    Ok(SqlConn::My {
                        conn,
                        stmts: Vec::new(),
                    })
                }
            }
        };
        tokio::time::timeout(OPEN_TIMEOUT, fut)
            .await
            .map_err(|_| anyhow!("connecting took longer than {OPEN_TIMEOUT:?}"))?
    }

    /// Connects and, in prepared mode, prepares the workload's statements.
    pub async fn open(t: &SqlTarget, q: &Sql) -> Result<SqlConn> {
        let mut c = SqlConn::connect(t, &t.db).await?;
        if q.mode == Mode::Prepared {
            for sql in &q.texts {
                match &mut c {
                    SqlConn::Pg { client, stmts } => stmts.push(
                        client
                            .prepare(&pg_text(sql))
                            .await
                            .with_context(|| format!("prepare {sql}"))?,
                    ),
                    SqlConn::My { conn, stmts } => stmts.push(
                        conn.prep(sql.as_str())
                            .await
                            .with_context(|| format!("prepare {sql}"))?,
                    ),
                }
            }
        }
        Ok(c)
    }

    /// Runs statement `i` of the workload with `key`; true when it returned a row (or
    /// changed one).
    async fn statement(&mut self, q: &Sql, i: usize, key: u64) -> Result<bool> {
        let sql = q.texts[i].as_str();
        let takes_key = sql.contains('?');
        match self {
            SqlConn::Pg { client, stmts } => {
                if let Some(stmt) = stmts.get(i) {
                    let k = i32::try_from(key).context("key above i32 for PostgreSQL")?;
                    let rows = if takes_key {
                        client.execute(stmt, &[&k]).await
                    } else {
                        client.execute(stmt, &[]).await
                    }?;
                    Ok(rows > 0)
                } else {
                    let text = with_key(sql, key);
                    let msgs = client.simple_query(&text).await?;
                    Ok(msgs.iter().any(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(_) => true,
                        tokio_postgres::SimpleQueryMessage::CommandComplete(n) => *n > 0,
                        _ => false,
                    }))
                }
            }
            SqlConn::My { conn, stmts } => {
                if let Some(stmt) = stmts.get(i).cloned() {
                    if sql.starts_with("SELECT") {
                        let row: Option<mysql_async::Row> = if takes_key {
                            conn.exec_first(stmt, (key,)).await?
                        } else {
                            conn.exec_first(stmt, ()).await?
                        };
                        Ok(row.is_some())
                    } else {
                        conn.exec_drop(stmt, (key,)).await?;
                        Ok(conn.affected_rows() > 0)
                    }
                } else {
                    let text = with_key(sql, key);
                    if sql.starts_with("SELECT") {
                        let row: Option<mysql_async::Row> = conn.query_first(text).await?;
                        Ok(row.is_some())
                    } else {
                        conn.query_drop(text).await?;
                        Ok(conn.affected_rows() > 0)
                    }
                }
            }
        }
    }

    /// A round trip that runs nothing (MySQL COM_PING, PostgreSQL an empty query).
    pub async fn ping(&mut self) -> Result<()> {
        match self {
            SqlConn::Pg { client, .. } => client.batch_execute("").await?,
            SqlConn::My { conn, .. } => conn.ping().await?,
        }
        Ok(())
    }

    /// A statement without results (BEGIN, COMMIT, ROLLBACK, DDL).
    pub async fn simple(&mut self, sql: &str) -> Result<()> {
        match self {
            SqlConn::Pg { client, .. } => client.batch_execute(sql).await?,
            SqlConn::My { conn, .. } => conn.query_drop(sql).await?,
        }
        Ok(())
    }

    /// One operation of the workload; Ok(true) when it found its rows.
    pub async fn op(&mut self, q: &Sql, keys: &mut Keys) -> Result<bool> {
        match q.workload {
            Workload::Ping => self.statement(q, 0, 0).await,
            Workload::PointSelect => self.statement(q, 0, keys.draw()).await,
            Workload::ReadMostly => {
                let key = keys.draw();
                self.statement(q, usize::from(key.is_multiple_of(10)), key)
                    .await
            }
            Workload::ReadWrite => {
                let (a, b, c) = (keys.draw(), keys.draw(), keys.draw());
                self.transaction(q, &[(0, a), (0, b), (1, c)]).await
            }
            Workload::NewOrder => {
                let district = keys.draw() % super::orders::DISTRICTS + 1;
                let item = keys.draw();
                let order = self.transaction(q, &[(0, district), (1, district)]).await?;
                let stock = self.transaction(q, &[(2, item), (3, item)]).await?;
                Ok(order && stock)
            }
        }
    }

    /// BEGIN, the statements (index, key), COMMIT; ROLLBACK after an error.
    async fn transaction(&mut self, q: &Sql, steps: &[(usize, u64)]) -> Result<bool> {
        self.simple("BEGIN").await?;
        let res = async {
            let mut all = true;
            for &(i, key) in steps {
                all &= self.statement(q, i, key).await?;
            }
            self.simple("COMMIT").await?;
            Ok::<_, anyhow::Error>(all)
        }
        .await;
        if res.is_err() && !self.is_closed() {
            // Best effort: the error is what gets reported.
            let _ = self.simple("ROLLBACK").await;
        }
        res
    }

    /// Whether the connection is gone (an error then ends the connection's loop).
    pub fn is_closed(&self) -> bool {
        match self {
            SqlConn::Pg { client, .. } => client.is_closed(),
            // mysql_async has no cheap check; its I/O errors are fatal, see `fatal`.
            SqlConn::My { .. } => false,
        }
    }

    /// Closes the connection politely (best effort, bounded).
    pub async fn close(self) {
        match self {
            SqlConn::Pg { client, .. } => drop(client),
            SqlConn::My { conn, .. } => {
                let _ = tokio::time::timeout(Duration::from_secs(2), conn.disconnect()).await;
            }
        }
    }
}

/// Whether an error from `op` means the connection cannot go on. A PostgreSQL FATAL and
/// MySQL's 2013 / 2006 (lost connection, server gone, as some proxies say it) or 1927
/// (connection killed, as MariaDB and Sluice say it) count even before the client has
/// seen the socket close (it is closing).
pub fn fatal(conn: &SqlConn, e: &anyhow::Error) -> bool {
    if conn.is_closed() {
        return true;
    }
    e.chain().any(|c| {
        c.downcast_ref::<mysql_async::Error>()
            .is_some_and(|m| match m {
                mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => true,
                mysql_async::Error::Server(s) => matches!(s.code, 1927 | 2006 | 2013),
                _ => false,
            })
            || c.downcast_ref::<tokio_postgres::Error>()
                .and_then(|p| p.as_db_error())
                .is_some_and(|d| matches!(d.severity(), "FATAL" | "PANIC"))
    })
}

/// A closed- or open-loop run of `q` over `plan.connections` connections.
pub async fn run(plan: &Plan, t: &SqlTarget, q: &Sql) -> Result<(Stats, Duration)> {
    let q = Arc::new(q.clone());
    let conns = open_all(plan, |_| {
        let (t, q) = (t.clone(), q.clone());
        async move { SqlConn::open(&t, &q).await }
    })
    .await?;
    drive(plan, conns, |conn, i, window| {
        let mut keys = Keys::new(plan, i);
        let mut pacer = Pacer::new(plan, i, &window);
        let q = q.clone();
        async move {
            let mut stats = Stats::new();
            let mut conn = conn;
            loop {
                let t0 = pacer.due().await;
                if !window.open(t0) {
                    break;
                }
                let res = timeout_at(window.deadline(), conn.op(&q, &mut keys)).await;
                let now = Instant::now();
                let Ok(res) = res else {
                    stats.record_errors(1, || {
                        format!("connection {i}: no answer within 10 s after the end of the run")
                    });
                    break;
                };
                stats.answer();
                match res {
                    Ok(found) if window.counts(now) => {
                        if found {
                            stats.record(now - t0);
                        } else {
                            stats.record_miss(now - t0);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        stats.record_errors(1, || format!("connection {i}: {e:#}"));
                        if fatal(&conn, &e) {
                            break;
                        }
                    }
                }
            }
            conn.close().await;
            stats
        }
    })
    .await
}
