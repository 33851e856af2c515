//! Timeouts that protect the server from bad clients: a login that never finishes, a
//! client idle inside a transaction, a statement that runs too long, a client idle
//! between transactions.

use crate::common;
use common::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The test config with timeouts added to both pools and the general section.
fn config(pg: &sluice_testkit::PgServer, general: &str, pools: &str) -> String {
    config_text(pg, 4, "5s", "")
        .replace("[general]\n", &format!("[general]\n{general}\n"))
        .replace("[pools.session]\n", &format!("[pools.session]\n{pools}\n"))
        .replace("[pools.tx]\n", &format!("[pools.tx]\n{pools}\n"))
}

/// Reads until the peer closes (or 10 s pass): true when it closed.
async fn closed(s: &mut tokio::net::TcpStream) -> bool {
    let mut b = [0u8; 64];
    let read = async {
        loop {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .is_ok()
}

/// Clients that never finish their login are closed after client_login_timeout, one
/// sending a byte now and then included, and a thousand of them silent at once do not
/// keep anybody else from logging in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_that_never_finish_are_closed() {
    let pg = pg();
    let h = sluice(&config(&pg, "client_login_timeout = \"1s\"", "")).await;
    let a = addr(&h, "session");
    let mut silent = Vec::new();
    for _ in 0..1000 {
        silent.push(tokio::net::TcpStream::connect(a).await.unwrap());
    }
    // Meanwhile another client logs in and works.
    let c = app(a).await;
    assert_eq!(
        c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
    // A client trickling its startup packet a byte at a time.
    let mut slow = tokio::net::TcpStream::connect(a).await.unwrap();
    let trickle = async {
        for b in [0u8, 0, 0, 40, 0, 3, 0, 0] {
            if slow.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    trickle.await;
    assert!(closed(&mut slow).await, "the slow client was closed");
    for s in silent.iter_mut().take(50) {
        assert!(closed(s).await, "a silent client was closed");
    }
    // The logged-in client is not affected.
    assert_eq!(
        c.query_one("select 2", &[]).await.unwrap().get::<_, i32>(0),
        2
    );
}

/// A client idle inside a transaction is disconnected with 25P03 and its transaction
/// rolled back (its row lock is gone); in both pool modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_is_ended_and_rolled_back() {
    let pg = pg();
    let h = sluice(&config(&pg, "", "idle_transaction_timeout = \"500ms\"")).await;
    let setup = app(addr(&h, "session")).await;
    setup
        .batch_execute("create table t (id int primary key, v int); insert into t values (1, 0)")
        .await
        .unwrap();
    for listener in ["session", "tx"] {
        let mut r = Raw::login(addr(&h, listener), APP_USER, APP_PW, "app").await;
        let f = r.query("begin; update t set v = v + 1 where id = 1").await;
        assert!(!f.iter().any(|f| f.0 == b'E'), "{listener}: {f:?}");
        // Idle past the timeout: the FATAL comes unasked, then the end.
        let (tag, body) = r.frame().await.expect("a FATAL");
        assert_eq!(
            (tag, error_code(&body).as_str()),
            (b'E', "25P03"),
            "{listener}"
        );
        assert!(r.frame().await.is_none(), "{listener}: closed");
        // Rolled back, and the row is free to lock.
        let other = app(addr(&h, listener)).await;
        other
            .batch_execute(
                "set lock_timeout = '2s'; begin; select * from t where id = 1 for update",
            )
            .await
            .unwrap();
        let v: i32 = other
            .query_one("select v from t where id = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(v, 0, "{listener}");
        other.batch_execute("commit").await.unwrap();
    }
    // A client idle outside a transaction is left alone.
    let c = app(addr(&h, "tx")).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
}

/// A statement running longer than query_timeout is cancelled on the server (57014) and
/// the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_statements_are_cancelled() {
    let pg = pg();
    let h = sluice(&config(&pg, "", "query_timeout = \"300ms\"")).await;
    for listener in ["session", "tx"] {
        let c = app(addr(&h, listener)).await;
        let e = c.simple_query("select pg_sleep(10)").await.unwrap_err();
        assert_eq!(sqlstate(&e), "57014", "{listener}: {e}");
        let e = c.query("select pg_sleep(10)", &[]).await.unwrap_err();
        assert_eq!(sqlstate(&e), "57014", "{listener}: {e}");
        // Short statements run, however many.
        for _ in 0..5 {
            c.simple_query("select pg_sleep(0.1)").await.unwrap();
        }
    }
}

/// A client idle between transactions longer than client_idle_timeout is disconnected
/// with 57P05.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_are_disconnected() {
    let pg = pg();
    let h = sluice(&config(&pg, "", "client_idle_timeout = \"500ms\"")).await;
    for listener in ["session", "tx"] {
        let mut r = Raw::login(addr(&h, listener), APP_USER, APP_PW, "app").await;
        for _ in 0..3 {
            // Active clients stay.
            r.query("select 1").await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (tag, body) = r.frame().await.expect("a FATAL");
        assert_eq!(
            (tag, error_code(&body).as_str()),
            (b'E', "57P05"),
            "{listener}"
        );
        assert!(r.frame().await.is_none(), "{listener}: closed");
    }
}
