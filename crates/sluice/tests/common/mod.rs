//! Shared helpers for the integration tests: a real PostgreSQL server from the test
//! kit, an in-process Sluice in front of it, tokio-postgres clients, and a raw protocol
//! client for sending exactly the bytes a test needs.
#![allow(dead_code)]

pub mod hs;
pub mod hs_lines;
pub mod http;
pub mod my;

use bytes::{Buf, BufMut, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use sluice_testkit::PgServer;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const APP_USER: &str = "app";
pub const APP_PW: &str = "app-secret";

/// A test server with an `app` user owning database `app`.
pub fn pg() -> PgServer {
    let pg = PgServer::start().expect("start PostgreSQL");
    pg.create_user(APP_USER, APP_PW).expect("create user");
    pg.create_database("app", APP_USER)
        .expect("create database");
    pg
}

/// Sluice config text: one server, a session-mode passthrough listener `session`, a
/// transaction-mode passthrough listener `tx`, and a transaction-mode listener
/// `txauth` checking `[users]` with SCRAM. `extra` is appended (more sections).
pub fn config_text(pg: &PgServer, pool_size: usize, wait: &str, extra: &str) -> String {
    format!(
        r#"
[general]
shutdown_timeout = "5s"
max_message_size = "1MiB"

[servers.pg]
protocol = "postgres"
host = "127.0.0.1"
port = {port}

[clusters.pg]
servers = ["pg"]

[pools.session]
mode = "session"
size = {pool_size}
wait_timeout = "{wait}"

[pools.tx]
mode = "transaction"
size = {pool_size}
wait_timeout = "{wait}"
statement_cache_size = 8

[users.app]
password = "{pw}"

[users.postgres]
password = "{superpw}"

[listeners.session]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pg"
pool = "session"
auth = "passthrough"

[listeners.tx]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pg"
pool = "tx"
auth = "passthrough"

[listeners.txauth]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pg"
pool = "tx"
auth = "scram-sha-256"
{extra}
"#,
        port = pg.port(),
        pw = APP_PW,
        superpw = pg.password(),
    )
}

/// The server connections user `app` has open on `pg`, read on the server itself.
pub fn app_backends(pg: &PgServer) -> usize {
    let out = pg
        .psql(
            "postgres",
            "select count(*) from pg_stat_activity where usename = 'app'",
        )
        .expect("count the server's connections");
    out.trim().parse().expect("a count")
}

pub async fn sluice(text: &str) -> sluice::server::Handle {
    if let Ok(f) = std::env::var("SLUICE_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(f)
            .with_test_writer()
            .try_init();
    }
    let config = sluice_config::parse(text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
    sluice::server::start(config).await.expect("start sluice")
}

/// Runs a client program: (success, stdout then stderr).
pub fn run_text(cmd: &mut std::process::Command) -> (bool, String) {
    let out = cmd.output().expect("run the client program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

pub fn addr(h: &sluice::server::Handle, listener: &str) -> SocketAddr {
    h.addrs[listener]
}

pub fn connstr(a: SocketAddr, user: &str, pw: &str, db: &str) -> String {
    format!(
        "host={} port={} user={user} password={pw} dbname={db} sslmode=disable",
        a.ip(),
        a.port()
    )
}

pub async fn connect(
    a: SocketAddr,
    user: &str,
    pw: &str,
    db: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) =
        tokio_postgres::connect(&connstr(a, user, pw, db), tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A client whose notifications' sender pids arrive on the returned channel.
pub async fn listening_client(
    a: SocketAddr,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<i32>,
) {
    use futures_util::StreamExt;
    let (client, mut conn) =
        tokio_postgres::connect(&connstr(a, APP_USER, APP_PW, "app"), tokio_postgres::NoTls)
            .await
            .expect("connect");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut s = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = s.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.process_id());
            }
        }
    });
    (client, rx)
}

/// The server's superuser, logged in to database `db` through `a`.
pub async fn superuser(a: SocketAddr, pg: &PgServer, db: &str) -> tokio_postgres::Client {
    connect(a, pg.superuser(), pg.password(), db)
        .await
        .expect("connect as the superuser")
}

pub async fn app(a: SocketAddr) -> tokio_postgres::Client {
    connect(a, APP_USER, APP_PW, "app")
        .await
        .expect("connect as app")
}

pub fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_owned())
        .unwrap_or_else(|| format!("no sqlstate: {e}"))
}

/// A client speaking the protocol by hand.
pub struct Raw {
    pub s: TcpStream,
    buf: BytesMut,
    pub pid: i32,
    pub secret: i32,
    pub params: Vec<(String, String)>,
}

impl Raw {
    pub async fn connect(a: SocketAddr) -> Raw {
        let s = TcpStream::connect(a).await.expect("tcp connect");
        Raw {
            s,
            buf: BytesMut::new(),
            pid: 0,
            secret: 0,
            params: Vec::new(),
        }
    }

    /// Connects and logs in (SCRAM, md5 or trust), reading up to ReadyForQuery.
    pub async fn login(a: SocketAddr, user: &str, pw: &str, db: &str) -> Raw {
        let mut r = Raw::connect(a).await;
        let mut out = BytesMut::new();
        postgres_protocol::message::frontend::startup_message(
            [("user", user), ("database", db)],
            &mut out,
        )
        .unwrap();
        r.send(&out).await;
        let mut scram: Option<ScramSha256> = None;
        loop {
            let (tag, body) = r.frame().await.expect("login frame");
            match tag {
                b'R' => {
                    let code = i32::from_be_bytes(body[..4].try_into().unwrap());
                    let data = &body[4..];
                    let mut out = BytesMut::new();
                    match code {
                        0 => continue,
                        5 => {
                            let h = postgres_protocol::authentication::md5_hash(
                                user.as_bytes(),
                                pw.as_bytes(),
                                data[..4].try_into().unwrap(),
                            );
                            postgres_protocol::message::frontend::password_message(
                                h.as_bytes(),
                                &mut out,
                            )
                            .unwrap();
                        }
                        10 => {
                            let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                            postgres_protocol::message::frontend::sasl_initial_response(
                                "SCRAM-SHA-256",
                                s.message(),
                                &mut out,
                            )
                            .unwrap();
                            scram = Some(s);
                        }
                        11 => {
                            let s = scram.as_mut().unwrap();
                            s.update(data).unwrap();
                            postgres_protocol::message::frontend::sasl_response(
                                s.message(),
                                &mut out,
                            )
                            .unwrap();
                        }
                        12 => {
                            scram.as_mut().unwrap().finish(data).unwrap();
                            continue;
                        }
                        c => panic!("unexpected auth code {c}"),
                    }
                    r.send(&out).await;
                }
                b'K' => {
                    r.pid = i32::from_be_bytes(body[..4].try_into().unwrap());
                    r.secret = i32::from_be_bytes(body[4..8].try_into().unwrap());
                }
                b'S' => {
                    let mut parts = body.split(|b| *b == 0);
                    let k = String::from_utf8_lossy(parts.next().unwrap()).into_owned();
                    let v = String::from_utf8_lossy(parts.next().unwrap()).into_owned();
                    r.params.push((k, v));
                }
                b'Z' => return r,
                b'E' => panic!("login failed: {}", String::from_utf8_lossy(&body)),
                _ => {}
            }
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("send");
    }

    /// Reads one frame; None when the connection closed.
    pub async fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 5 {
                let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() > len {
                    let tag = self.buf[0];
                    self.buf.advance(5);
                    let body = self.buf.split_to(len - 4).to_vec();
                    return Some((tag, body));
                }
            }
            let r = tokio::time::timeout(
                std::time::Duration::from_secs(30),
                self.s.read_buf(&mut self.buf),
            )
            .await
            .expect("timed out waiting for a frame");
            match r {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Reads frames up to and including ReadyForQuery (or the end of the connection).
    pub async fn until_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(f) = self.frame().await {
            let done = f.0 == b'Z';
            v.push(f);
            if done {
                break;
            }
        }
        v
    }

    pub async fn query(&mut self, sql: &str) -> Vec<(u8, Vec<u8>)> {
        let mut out = BytesMut::new();
        postgres_protocol::message::frontend::query(sql, &mut out).unwrap();
        self.send(&out).await;
        self.until_ready().await
    }
}

/// The SQLSTATE of an ErrorResponse body.
pub fn error_code(body: &[u8]) -> String {
    sluice_wire_pg::msg::error_field(body, b'C')
        .unwrap_or("")
        .to_owned()
}

/// A tagged frame with a raw body.
pub fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_u8(tag);
    b.put_i32(body.len() as i32 + 4);
    b.put_slice(body);
    b.to_vec()
}

/// A rustls client configuration that trusts the test CA in `ca` (PEM).
pub fn tls_client_config(ca: &std::path::Path) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in rustls_pemfile::certs(&mut &pem[..]) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    std::sync::Arc::new(cfg)
}

/// Sluice config text for the routing tests: `servers` (name, port) speaking `protocol`
/// in cluster `main`, checked every 100 ms as `health` (user, password), replicas further
/// behind than `lag` kept from reads; a session pool (wait 1.5 s), a read-write listener
/// `rw` and a read-only listener `ro` with `strategy`.
pub fn routes_config(
    protocol: &str,
    servers: &[(&str, u16)],
    health: (&str, &str),
    lag: &str,
    strategy: &str,
) -> String {
    let mut t = String::from("[general]\nshutdown_timeout = \"2s\"\n");
    for (name, port) in servers {
        t.push_str(&format!(
            "[servers.{name}]\nprotocol = \"{protocol}\"\nhost = \"127.0.0.1\"\nport = {port}\n"
        ));
    }
    let names: Vec<String> = servers.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    let (user, pw) = health;
    t.push_str(&format!(
        r#"
[clusters.main]
servers = [{}]
health_interval = "100ms"
health_timeout = "1s"
health_failures = 2
max_replica_lag = "{lag}"
health_user = "{user}"
health_password = "{pw}"

[pools.session]
mode = "session"
size = 10
wait_timeout = "1500ms"

[listeners.rw]
protocol = "{protocol}"
address = "127.0.0.1:0"
cluster = "main"
pool = "session"

[listeners.ro]
protocol = "{protocol}"
address = "127.0.0.1:0"
cluster = "main"
pool = "session"
route = "read-only"
strategy = "{strategy}"
"#,
        names.join(", ")
    ));
    t
}

/// After a failover under a write load: every row a client was told committed (`acked`)
/// is among the rows found (`there`), and none is there twice.
pub fn no_write_lost_or_repeated(client: i32, acked: &[i32], there: &[i32]) {
    let set: std::collections::BTreeSet<i32> = there.iter().copied().collect();
    assert_eq!(
        set.len(),
        there.len(),
        "client {client}: a row is there twice"
    );
    let lost: Vec<&i32> = acked.iter().filter(|s| !set.contains(s)).collect();
    assert!(
        lost.is_empty(),
        "client {client}: acknowledged rows lost: {lost:?}"
    );
}

/// Sluice config text for two servers of `protocol` on `ports`, each its own cluster
/// (`a`, `b`), a transaction-mode pool `tx` and the configured user `app` (so that
/// Sluice logs in to either cluster by itself); the caller adds listeners and rules.
pub fn two_clusters(protocol: &str, (a, b): (u16, u16)) -> String {
    format!(
        r#"
[servers.a]
protocol = "{protocol}"
host = "127.0.0.1"
port = {a}
[servers.b]
protocol = "{protocol}"
host = "127.0.0.1"
port = {b}
[clusters.a]
servers = ["a"]
[clusters.b]
servers = ["b"]
[pools.tx]
mode = "transaction"
size = 4
wait_timeout = "3s"
[users.app]
password = "{APP_PW}"
"#
    )
}
