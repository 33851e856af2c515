//! Bad input, each case with a test: malformed and oversized messages, unknown message
//! types, protocol violations, failed logins, a server killed mid-query, a client that
//! vanishes mid-COPY. None may panic, hang or disturb other clients.

use crate::common;
use common::*;
use std::time::Duration;

/// After each case the proxy still serves a fresh client.
async fn still_serves(a: std::net::SocketAddr) {
    let c = app(a).await;
    assert_eq!(
        c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_unknown_and_oversized_messages() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    for listener in ["session", "txauth"] {
        let a = addr(&h, listener);
        // A length field below 4.
        let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
        r.send(&[b'Q', 0, 0, 0, 2]).await;
        let (tag, body) = r.frame().await.unwrap();
        assert_eq!(
            (tag, error_code(&body).as_str()),
            (b'E', "08P01"),
            "{listener}"
        );
        assert!(
            r.frame().await.is_none(),
            "connection closed after a broken frame"
        );
        // An unknown message type.
        let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
        r.send(&frame(b'z', b"junk")).await;
        let (tag, body) = r.frame().await.unwrap();
        assert_eq!((tag, error_code(&body).as_str()), (b'E', "08P01"));
        // A length over the cap (1 MiB in the test config): refused before reading it.
        let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
        r.send(&[b'Q', 0x10, 0, 0, 0]).await;
        let (tag, body) = r.frame().await.unwrap();
        assert_eq!((tag, error_code(&body).as_str()), (b'E', "08P01"));
        // A truncated message followed by silence: the client just goes away.
        let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
        r.send(&[b'Q', 0, 0, 0, 100, b's']).await;
        drop(r);
        // A malformed Parse body (no NUL terminators).
        let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
        r.send(&frame(b'P', b"abc")).await;
        r.send(&frame(b'S', b"")).await;
        let (tag, body) = r.frame().await.unwrap();
        assert_eq!(tag, b'E');
        assert_eq!(error_code(&body).as_str(), "08P01");
        still_serves(a).await;
    }
    // A startup packet whose parameters have no terminator.
    let mut r = Raw::connect(addr(&h, "session")).await;
    r.send(&[0, 0, 0, 10, 0, 3, 0, 0, b'u', b's']).await;
    let (tag, body) = r.frame().await.unwrap();
    assert_eq!((tag, error_code(&body).as_str()), (b'E', "08P01"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_violation_keeps_the_connection_usable() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    for listener in ["session", "txauth"] {
        let mut r = Raw::login(addr(&h, listener), APP_USER, APP_PW, "app").await;
        // Execute without Bind: the server's own error, then ReadyForQuery.
        let mut out = bytes::BytesMut::new();
        postgres_protocol::message::frontend::execute("", 0, &mut out).unwrap();
        postgres_protocol::message::frontend::sync(&mut out);
        r.send(&out).await;
        let f = r.until_ready().await;
        assert_eq!(f[0].0, b'E');
        assert_eq!(error_code(&f[0].1), "34000");
        assert_eq!(f.last().unwrap().0, b'Z');
        let f = r.query("select 1").await;
        assert!(f.iter().any(|f| f.0 == b'D'), "{listener}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_answer_like_the_server() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    for listener in ["session", "tx", "txauth"] {
        let a = addr(&h, listener);
        let e = connect(a, APP_USER, "wrong", "app").await.unwrap_err();
        assert_eq!(sqlstate(&e), "28P01", "{listener}");
        let e = connect(a, "nobody", "x", "app").await.unwrap_err();
        assert_eq!(sqlstate(&e), "28P01", "{listener}");
        let e = connect(a, APP_USER, APP_PW, "nosuchdb").await.unwrap_err();
        assert_eq!(sqlstate(&e), "3D000", "{listener}");
        still_serves(a).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_query() {
    let mut pg1 = pg();
    let pg2 = pg();
    let extra = format!(
        r#"
[servers.pg2]
protocol = "postgres"
host = "127.0.0.1"
port = {}

[clusters.pg2]
servers = ["pg2"]

[listeners.other]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pg2"
pool = "tx"
auth = "scram-sha-256"
"#,
        pg2.port()
    );
    let h = sluice(&config_text(&pg1, 2, "2s", &extra)).await;
    let victim = app(addr(&h, "txauth")).await;
    let session_victim = app(addr(&h, "session")).await;
    let bystander = app(addr(&h, "other")).await;
    let q1 = tokio::spawn(async move { victim.simple_query("select pg_sleep(30)").await });
    let q2 = tokio::spawn(async move { session_victim.simple_query("select pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut busy = Vec::new();
    for _ in 0..20 {
        busy.push(bystander.query_one("select 1", &[]));
    }
    pg1.kill();
    for q in [q1, q2] {
        let e = tokio::time::timeout(Duration::from_secs(10), q)
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        let code = e.code().map(|c| c.code().to_owned()).unwrap_or_default();
        assert!(
            code.starts_with("08") || code.starts_with("57P") || e.is_closed(),
            "{e:?}"
        );
    }
    for b in busy {
        b.await.unwrap();
    }
    // After the server comes back, new clients are served again.
    pg1.restart().unwrap();
    still_serves(addr(&h, "txauth")).await;
    still_serves(addr(&h, "session")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_vanishing_mid_copy() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "5s", "")).await;
    let a = addr(&h, "txauth");
    let c = app(a).await;
    c.batch_execute("create table c(a int)").await.unwrap();
    let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut out = bytes::BytesMut::new();
    postgres_protocol::message::frontend::query("copy c from stdin", &mut out).unwrap();
    r.send(&out).await;
    let (tag, _) = r.frame().await.unwrap();
    assert_eq!(tag, b'G');
    r.send(&frame(b'd', b"1\n2\n")).await;
    drop(r);
    // The pool has one connection: it must come back (or be replaced) for this client.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let n: i64 = c
        .query_one("select count(*) from c", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "the abandoned COPY did not commit");
}
