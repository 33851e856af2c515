//! `busy_poll_us`: a lone client's session watches its sockets before sleeping. The
//! answers must be the same as without it, for a lone client and for several at once,
//! on both protocols, in session and transaction mode, with answers larger than one
//! watched read, and a client that leaves is noticed while its session watches.

use crate::common;
use common::*;
use mysql_async::prelude::*;

/// A window wide enough that a loaded machine (CI runs other suites beside this one)
/// still answers within it most of the time: at 500 µs one run found only 103.
fn spinning(text: String) -> String {
    text.replacen("[general]\n", "[general]\nbusy_poll_us = 5000\n", 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_are_unchanged() {
    let pg = pg();
    let h = sluice(&spinning(config_text(&pg, 4, "5s", ""))).await;
    for listener in ["session", "tx"] {
        let c = app(addr(&h, listener)).await;
        // A lone client, one statement after another (each answer and each next
        // statement picked up by the watching session).
        for i in 0..200i32 {
            let v: i32 = c
                .query_one("select $1::int + 1", &[&i])
                .await
                .unwrap()
                .get(0);
            assert_eq!(v, i + 1);
        }
        // An answer larger than one watched read (4 KiB).
        let big: String = c
            .query_one("select repeat('x', 100000)", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(big.len(), 100_000);
        let e = c.simple_query("select 1/0").await.unwrap_err();
        assert_eq!(sqlstate(&e), "22012");
        // Several clients at once.
        let mut tasks = Vec::new();
        for k in 0..4i32 {
            let a = addr(&h, listener);
            tasks.push(tokio::spawn(async move {
                let c = app(a).await;
                for i in 0..100i32 {
                    let v: i32 = c
                        .query_one("select $1::int * $2::int", &[&i, &k])
                        .await
                        .unwrap()
                        .get(0);
                    assert_eq!(v, i * k);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // The lone client again, after the others left.
        let v: i32 = c.query_one("select 41 + 1", &[]).await.unwrap().get(0);
        assert_eq!(v, 42);
    }
    watched();
}

/// The sessions did watch their sockets, and found what they waited for there (a
/// lone client makes some 800 round trips a test; a few dozen found show the path is
/// taken without asking the machine to be quiet).
fn watched() {
    use std::sync::atomic::Ordering::Relaxed;
    let hits = sluice::stats::counters::BUSY_POLL_HITS.load(Relaxed);
    assert!(
        hits >= 50,
        "only {hits} answers or statements found by watching"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_answers_are_unchanged_and_a_leaving_client_is_noticed() {
    let db = my::mariadb();
    let h = sluice(&spinning(my::config_text(&db, 4, "2s", ""))).await;
    for listener in ["session", "tx"] {
        let mut c = my::connect(addr(&h, listener)).await;
        for i in 0..200i64 {
            let v: Option<i64> = c.exec_first("SELECT ? + 1", (i,)).await.unwrap();
            assert_eq!(v, Some(i + 1));
            let t: Option<i64> = c.query_first(format!("SELECT {i} * 2")).await.unwrap();
            assert_eq!(t, Some(i * 2));
        }
        let big: Option<String> = c.query_first("SELECT REPEAT('y', 100000)").await.unwrap();
        assert_eq!(big.map(|s| s.len()), Some(100_000));
        assert!(c.query_drop("SELECT * FROM no_such_table").await.is_err());
        let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
        assert_eq!(one, Some(1));
    }
    watched();
    // A client that leaves while its session watches its socket: its server connection
    // (session mode) is let go, so the next client finds the server's threads as
    // before (the session ended).
    let before = server_threads(&h).await;
    for _ in 0..5 {
        let mut c = my::connect(addr(&h, "session")).await;
        let _: Option<i64> = c.query_first("SELECT 1").await.unwrap();
        drop(c);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let now = server_threads(&h).await;
        if now <= before {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sessions of departed clients still hold {now} server threads (before: {before})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The server's connected threads, asked through the session listener.
async fn server_threads(h: &sluice::server::Handle) -> i64 {
    let mut c = my::connect(addr(h, "session")).await;
    let n: Option<i64> = c
        .query_first("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'THREADS_CONNECTED'")
        .await
        .unwrap();
    n.unwrap_or_default()
}
