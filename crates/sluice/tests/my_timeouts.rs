//! Timeouts on the MySQL side: a login that never finishes, a client idle inside a
//! transaction, a statement that runs too long, a client idle between transactions.

use crate::common;
use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::Queryable;
use std::time::Duration;

fn config(db: &sluice_testkit::MariaDbServer, general: &str, pools: &str) -> String {
    config_text(db, 4, "5s", "")
        .replace("[general]\n", &format!("[general]\n{general}\n"))
        .replace("[pools.session]\n", &format!("[pools.session]\n{pools}\n"))
        .replace("[pools.tx]\n", &format!("[pools.tx]\n{pools}\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_end_what_they_should() {
    let db = mariadb();
    let pools = "idle_transaction_timeout = \"600ms\"\nquery_timeout = \"300ms\"";
    let h = sluice(&config(&db, "client_login_timeout = \"1s\"", pools)).await;
    let mut setup = connect(addr(&h, "session")).await;
    setup
        .query_drop("CREATE TABLE t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
        .await
        .unwrap();
    setup
        .query_drop("INSERT INTO t VALUES (1, 0)")
        .await
        .unwrap();
    for listener in ["session", "tx"] {
        let a = addr(&h, listener);
        // A statement running too long is stopped by the server (MariaDB's
        // max_statement_time, 1969); the session goes on.
        let mut c = connect(a).await;
        let r: Result<Option<i64>, _> = c.query_first("SELECT SLEEP(10)").await;
        assert!(
            matches!(&r, Err(mysql_async::Error::Server(e)) if e.code == 1969),
            "{listener}: {r:?}"
        );
        let n: Option<i64> = c.query_first("SELECT 5").await.unwrap();
        assert_eq!(n, Some(5));
        // Idle inside a transaction: the session ends and the transaction is rolled back.
        c.query_drop("BEGIN").await.unwrap();
        c.query_drop("UPDATE t SET v = v + 1 WHERE id = 1")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            c.query_drop("SELECT 1").await.is_err(),
            "{listener}: closed"
        );
        let mut other = connect(a).await;
        other
            .query_drop("SET innodb_lock_wait_timeout = 2")
            .await
            .unwrap();
        other.query_drop("BEGIN").await.unwrap();
        let v: Option<i64> = other
            .query_first("SELECT v FROM t WHERE id = 1 FOR UPDATE")
            .await
            .unwrap();
        assert_eq!(v, Some(0), "{listener}");
        other.query_drop("COMMIT").await.unwrap();
        // Idle outside a transaction: left alone (no client_idle_timeout here).
        tokio::time::sleep(Duration::from_millis(800)).await;
        let n: Option<i64> = other.query_first("SELECT 6").await.unwrap();
        assert_eq!(n, Some(6));
    }
    // A client that connects and never logs in is closed.
    let mut silent = tokio::net::TcpStream::connect(addr(&h, "session"))
        .await
        .unwrap();
    let read = async {
        use tokio::io::AsyncReadExt;
        let mut b = [0u8; 256];
        loop {
            match silent.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .is_ok(),
        "a client that never logs in is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_are_disconnected() {
    let db = mariadb();
    let h = sluice(&config(&db, "", "client_idle_timeout = \"500ms\"")).await;
    for listener in ["session", "tx"] {
        let mut c = connect(addr(&h, listener)).await;
        for _ in 0..3 {
            c.query_drop("SELECT 1").await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            c.query_drop("SELECT 1").await.is_err(),
            "{listener}: closed"
        );
    }
}
