//! Helpers for the MySQL integration tests: a real MariaDB server from the test kit, a
//! Sluice config in front of it, and mysql_async connection options.
#![allow(dead_code)]

use mysql_async::{Conn, OptsBuilder, SslOpts};
use sluice_testkit::MariaDbServer;
use std::net::SocketAddr;

pub const APP_USER: &str = "app";
pub const APP_PW: &str = "app-secret";

/// A test server with an `app` user (mysql_native_password) and database `test`.
pub fn mariadb() -> MariaDbServer {
    let db = MariaDbServer::start().expect("start MariaDB");
    db.create_user(APP_USER, APP_PW, "mysql_native_password")
        .expect("create user");
    db
}

/// Sluice config text: one MariaDB server, a session-mode passthrough listener
/// `session`, a transaction-mode passthrough listener `tx`; `extra` is appended.
/// A MariaDB primary with the health checker's user (`monitor` / `monitor-pw`), which
/// its replicas get by replication.
pub fn monitored_primary() -> MariaDbServer {
    let primary = mariadb();
    primary
        .create_user("monitor", "monitor-pw", "mysql_native_password")
        .expect("monitor user");
    primary
}

pub fn config_text(db: &MariaDbServer, pool_size: usize, wait: &str, extra: &str) -> String {
    format!(
        r#"
[general]
shutdown_timeout = "5s"
max_message_size = "64MiB"

[servers.my]
protocol = "mysql"
host = "127.0.0.1"
port = {port}

[clusters.my]
servers = ["my"]

[pools.session]
mode = "session"
size = {pool_size}
wait_timeout = "{wait}"

[pools.tx]
mode = "transaction"
size = {pool_size}
wait_timeout = "{wait}"

[listeners.session]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "my"
pool = "session"
auth = "passthrough"

[listeners.tx]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "my"
pool = "tx"
auth = "passthrough"
{extra}
"#,
        port = db.port(),
    )
}

/// A throwaway MariaDB with Sluice in front (pool of `pool_size`, `wait` for a
/// connection), the address of its transaction-mode listener, after running `setup`
/// statements through it.
pub async fn tx_sluice(
    pool_size: usize,
    wait: &str,
    setup: &[&str],
) -> (MariaDbServer, sluice::server::Handle, SocketAddr) {
    use mysql_async::prelude::Queryable;
    let db = mariadb();
    let h = super::sluice(&config_text(&db, pool_size, wait, "")).await;
    let a = super::addr(&h, "tx");
    if !setup.is_empty() {
        let mut c = connect(a).await;
        for sql in setup {
            c.query_drop(*sql).await.unwrap();
        }
        c.disconnect().await.unwrap();
    }
    (db, h, a)
}

/// Two listeners that check configured users themselves: `native`
/// (mysql_native_password, transaction pool) and `sha2` (caching_sha2_password, session
/// pool), with `sha2_extra` appended to the latter (TLS settings, say).
pub fn own_auth_listeners(sha2_extra: &str) -> String {
    format!(
        r#"
[listeners.native]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "my"
pool = "tx"
auth = "mysql_native_password"

[listeners.sha2]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "my"
pool = "session"
auth = "caching_sha2_password"
{sha2_extra}
"#
    )
}

pub fn opts(a: SocketAddr, user: &str, pw: &str, db: Option<&str>) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(a.ip().to_string())
        .tcp_port(a.port())
        .user(Some(user))
        .pass(Some(pw))
        .db_name(db)
        .prefer_socket(false)
}

pub async fn connect(a: SocketAddr) -> Conn {
    Conn::new(opts(a, APP_USER, APP_PW, Some("test")))
        .await
        .expect("connect through sluice")
}

pub fn tls_opts(ca: &std::path::Path) -> SslOpts {
    SslOpts::default()
        .with_root_certs(vec![ca.to_path_buf().into()])
        .with_disable_built_in_roots(true)
}

/// A raw MySQL client for sending exactly the packets a test needs.
pub struct RawMy {
    pub s: tokio::net::TcpStream,
    pub buf: bytes::BytesMut,
    /// The scramble of the greeting it logged in with.
    pub scramble: Vec<u8>,
    /// The connection id the greeting gave.
    pub id: u32,
}

impl RawMy {
    /// Connects and logs in with mysql_native_password (the greeting's scramble).
    pub async fn login(a: SocketAddr, user: &str, pw: &str) -> RawMy {
        Self::login_with(a, user, pw, 0).await
    }

    /// [`RawMy::login`] asking for `extra` capabilities too.
    pub async fn login_with(a: SocketAddr, user: &str, pw: &str, extra: u64) -> RawMy {
        use sluice_wire_mysql::consts::*;
        use sluice_wire_mysql::handshake::{HandshakeResponse41, HandshakeV10};
        let s = tokio::net::TcpStream::connect(a).await.unwrap();
        let mut r = RawMy {
            s,
            buf: bytes::BytesMut::new(),
            scramble: Vec::new(),
            id: 0,
        };
        let (_, hello) = r.read().await.expect("greeting");
        let hs = HandshakeV10::parse(&hello).expect("handshake");
        r.scramble = hs.scramble().to_vec();
        r.id = hs.connection_id;
        let caps = CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_LONG_PASSWORD
            | CLIENT_TRANSACTIONS
            | CLIENT_MULTI_RESULTS
            | CLIENT_LOCAL_FILES
            | CLIENT_CONNECT_WITH_DB
            | extra;
        let resp = HandshakeResponse41 {
            capabilities: caps & hs.capabilities,
            max_packet: 1 << 24,
            charset: 45,
            username: user.as_bytes().to_vec(),
            auth_response: sluice_wire_mysql::auth::native_scramble(pw.as_bytes(), hs.scramble())
                .to_vec(),
            database: Some(b"test".to_vec()),
            auth_plugin: Some(b"mysql_native_password".to_vec()),
            attrs: None,
        };
        let mut p = Vec::new();
        resp.encode(&mut p);
        r.send(1, &p).await;
        let (_, ok) = r.read().await.expect("login answer");
        assert_eq!(ok.first(), Some(&0), "login failed: {ok:?}");
        r
    }

    pub async fn send(&mut self, seq: u8, payload: &[u8]) {
        use tokio::io::AsyncWriteExt;
        let mut out = bytes::BytesMut::new();
        let mut seq = seq;
        sluice_wire_mysql::packet::write_packet(&mut out, &mut seq, payload);
        self.s.write_all(&out).await.unwrap();
    }

    /// Sends text queries in one write, without waiting for answers.
    pub async fn send_queries(&mut self, sqls: &[&str]) {
        let mut out = bytes::BytesMut::new();
        for sql in sqls {
            let mut p = vec![0x03];
            p.extend_from_slice(sql.as_bytes());
            sluice_wire_mysql::packet::write_packet(&mut out, &mut 0, &p);
        }
        self.send_raw(&out).await;
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.s.write_all(bytes).await.unwrap();
    }

    /// One physical packet: (seq, payload); None when the connection closed.
    pub async fn read(&mut self) -> Option<(u8, Vec<u8>)> {
        use bytes::Buf;
        use tokio::io::AsyncReadExt;
        loop {
            if let Some((len, seq)) = sluice_wire_mysql::packet::header(&self.buf)
                && self.buf.len() >= 4 + len
            {
                let p = self.buf[4..4 + len].to_vec();
                self.buf.advance(4 + len);
                return Some((seq, p));
            }
            let n = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                self.s.read_buf(&mut self.buf),
            )
            .await
            .expect("no answer within 20 s")
            .ok()?;
            if n == 0 {
                return None;
            }
        }
    }

    /// Reads an ERR packet: (seq, code, message).
    pub async fn read_err(&mut self) -> (u8, u16, String) {
        let (seq, p) = self.read().await.expect("an ERR packet");
        assert_eq!(p.first(), Some(&0xff), "expected ERR, got {p:?}");
        let code = u16::from_le_bytes([p[1], p[2]]);
        let msg = String::from_utf8_lossy(&p[9..]).into_owned();
        (seq, code, msg)
    }

    /// Runs a text query: the first column of its first row (None for NULL, no rows
    /// or an OK).
    pub async fn query_value(&mut self, sql: &str) -> Option<String> {
        let mut p = vec![0x03];
        p.extend_from_slice(sql.as_bytes());
        self.send(0, &p).await;
        let (_, first) = self.read().await.expect("answer");
        assert_ne!(first[0], 0xff, "{sql}: {}", String::from_utf8_lossy(&first));
        if first[0] == 0 {
            return None;
        }
        let eof = |p: &[u8]| p[0] == 0xfe && p.len() < 9;
        while !eof(&self.read().await.expect("column").1) {}
        let mut value = None;
        let mut first_row = true;
        loop {
            let (_, row) = self.read().await.expect("row");
            if eof(&row) {
                return value;
            }
            if std::mem::take(&mut first_row) && row[0] != 0xfb {
                // A short length-encoded string.
                let n = usize::from(row[0]);
                value = Some(String::from_utf8_lossy(&row[1..1 + n]).into_owned());
            }
        }
    }

    /// COM_CHANGE_USER with mysql_native_password (answering one auth switch, as
    /// Sluice asks with a fresh scramble): the final answer's payload (OK or ERR).
    pub async fn change_user(&mut self, user: &str, pw: &str, db: &str) -> Vec<u8> {
        use sluice_wire_mysql::consts::*;
        use sluice_wire_mysql::handshake::{AuthSwitchRequest, ChangeUser};
        let cu = ChangeUser {
            username: user.as_bytes().to_vec(),
            auth_response: vec![0; 20],
            database: db.as_bytes().to_vec(),
            charset: Some(45),
            auth_plugin: Some(b"mysql_native_password".to_vec()),
        };
        let mut p = vec![COM_CHANGE_USER];
        cu.encode(CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH, &mut p);
        self.send(0, &p).await;
        let (seq, answer) = self.read().await.expect("change user answer");
        if answer.first() != Some(&0xfe) {
            return answer;
        }
        let switch = AuthSwitchRequest::parse(&answer).expect("auth switch");
        let salt = sluice_wire_mysql::auth::salt(switch.data);
        let reply = sluice_wire_mysql::auth::native_scramble(pw.as_bytes(), salt);
        self.send(seq.wrapping_add(1), &reply).await;
        self.read().await.expect("change user result").1
    }

    /// COM_CHANGE_USER as Connector/C sends it: mysql_native_password's answer made for
    /// the scramble of the login, and the same answer again to an auth switch. Returns
    /// the final answer.
    pub async fn change_user_as_connector_c(&mut self, user: &str, pw: &str, db: &str) -> Vec<u8> {
        use sluice_wire_mysql::consts::*;
        use sluice_wire_mysql::handshake::ChangeUser;
        let answer = sluice_wire_mysql::auth::native_scramble(pw.as_bytes(), &self.scramble);
        let cu = ChangeUser {
            username: user.as_bytes().to_vec(),
            auth_response: answer.to_vec(),
            database: db.as_bytes().to_vec(),
            charset: Some(45),
            auth_plugin: Some(b"mysql_native_password".to_vec()),
        };
        let mut p = vec![COM_CHANGE_USER];
        cu.encode(CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH, &mut p);
        self.send(0, &p).await;
        let (seq, reply) = self.read().await.expect("change user answer");
        if reply.first() != Some(&0xfe) {
            return reply;
        }
        self.send(seq.wrapping_add(1), &answer).await;
        self.read().await.expect("change user result").1
    }

    /// COM_PING answered with OK.
    pub async fn ping_ok(&mut self) -> bool {
        self.send(0, &[0x0e]).await;
        matches!(self.read().await, Some((1, p)) if p.first() == Some(&0))
    }
}

/// A socket whose first write carries `prefix` in front of the caller's bytes, in the
/// same write (so in one TCP segment on loopback).
struct Prefixed {
    inner: tokio::net::TcpStream,
    prefix: Option<Vec<u8>>,
}

impl tokio::io::AsyncRead for Prefixed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Prefixed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let Some(prefix) = self.prefix.take() else {
            return std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        };
        let mut both = prefix.clone();
        both.extend_from_slice(buf);
        match std::pin::Pin::new(&mut self.inner).poll_write(cx, &both) {
            Poll::Ready(Ok(n)) => {
                assert!(n >= prefix.len(), "the prefix went out in part");
                Poll::Ready(Ok(n - prefix.len()))
            }
            Poll::Pending => {
                self.prefix = Some(prefix);
                Poll::Pending
            }
            other => other,
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Logs in over TLS sending the SSLRequest and the TLS ClientHello in one write, as
/// mysql_async may: the first packet after the login answer (OK or ERR).
pub async fn login_tls_in_one_write(
    a: SocketAddr,
    ca: &std::path::Path,
    user: &str,
    pw: &str,
) -> Vec<u8> {
    use sluice_wire_mysql::consts::*;
    use sluice_wire_mysql::handshake::{HandshakeResponse41, HandshakeV10, SslRequest};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn packet(s: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
        let mut head = [0u8; 4];
        s.read_exact(&mut head).await.unwrap();
        let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
        let mut p = vec![0; len];
        s.read_exact(&mut p).await.unwrap();
        p
    }
    let mut tcp = tokio::net::TcpStream::connect(a).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let hs = HandshakeV10::parse(&packet(&mut tcp).await).expect("greeting");
    let caps = (CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH
        | CLIENT_LONG_PASSWORD
        | CLIENT_TRANSACTIONS
        | CLIENT_SSL)
        & hs.capabilities;
    let mut body = Vec::new();
    SslRequest {
        capabilities: caps,
        max_packet: 1 << 24,
        charset: 45,
    }
    .encode(&mut body);
    let mut ssl = bytes::BytesMut::new();
    let mut seq = 1;
    sluice_wire_mysql::packet::write_packet(&mut ssl, &mut seq, &body);
    let cfg = super::tls_client_config(ca);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let sock = Prefixed {
        inner: tcp,
        prefix: Some(ssl.to_vec()),
    };
    let mut tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, sock)
        .await
        .expect("TLS handshake");
    let resp = HandshakeResponse41 {
        capabilities: caps,
        max_packet: 1 << 24,
        charset: 45,
        username: user.as_bytes().to_vec(),
        auth_response: sluice_wire_mysql::auth::native_scramble(pw.as_bytes(), hs.scramble())
            .to_vec(),
        database: None,
        auth_plugin: Some(b"mysql_native_password".to_vec()),
        attrs: None,
    };
    let mut p = Vec::new();
    resp.encode(&mut p);
    let mut out = bytes::BytesMut::new();
    let mut seq = 2;
    sluice_wire_mysql::packet::write_packet(&mut out, &mut seq, &p);
    tls.write_all(&out).await.unwrap();
    tls.flush().await.unwrap();
    packet(&mut tls).await
}

/// Waits (up to `secs`) until the session `c` answers from the server on `port`: a
/// transaction-mode session following a promotion without reconnecting. Until the
/// checker has seen it, a statement may get "no server" (9001): the session goes on.
pub async fn until_on(c: &mut mysql_async::Conn, port: u16, secs: u64) {
    use mysql_async::prelude::Queryable;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        match c.query_first::<u16, _>("SELECT @@port").await {
            Ok(Some(p)) if p == port => return,
            Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 9001, "{e:?}"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the session never reached the new primary"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The server connections of the test's application user (`app`) a MariaDB server has.
pub fn app_backends_my(db: &MariaDbServer) -> usize {
    let out = db
        .sql("select count(*) from information_schema.processlist where user = 'app' and command <> 'Killed'")
        .expect("count the server's connections");
    out.trim().parse().expect("a count")
}
