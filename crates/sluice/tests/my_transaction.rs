//! MySQL transaction pooling: many clients on a small pool keep their own session
//! settings (replayed), user variables, temporary tables, prepared statements and
//! LAST_INSERT_ID() (pinned or kept), and their transactions.

mod common;

use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_clients_across_pooled_connections() {
    let db = mariadb();
    db.sql("CREATE DATABASE d1; CREATE DATABASE d2").unwrap();
    let h = sluice(&config_text(&db, 2, "5s", "")).await;
    let a = addr(&h, "tx");
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut c = connect(a).await;
            let tz = format!("+0{}:00", i % 10);
            c.query_drop(format!("SET time_zone = '{tz}'"))
                .await
                .unwrap();
            c.query_drop("SET NAMES latin1").await.unwrap();
            let dbname = if i % 2 == 0 { "d1" } else { "d2" };
            c.query_drop(format!("USE {dbname}")).await.unwrap();
            let mut ids = std::collections::BTreeSet::new();
            for _ in 0..30 {
                let (got_tz, cs, cur, id): (String, String, String, u32) = c
                    .query_first(
                        "SELECT @@time_zone, @@character_set_client, DATABASE(), CONNECTION_ID()",
                    )
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    (got_tz.as_str(), cs.as_str(), cur.as_str()),
                    (tz.as_str(), "latin1", dbname)
                );
                ids.insert(id);
                tokio::task::yield_now().await;
            }
            c.disconnect().await.unwrap();
            ids.len()
        }));
    }
    let mut moved = 0;
    for t in tasks {
        moved += t.await.unwrap();
    }
    // 8 clients, 2 server connections: clients did move between connections.
    assert!(moved > 8, "clients never changed server connection");
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_state_keeps_the_connection() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 2, "5s", "")).await;
    let a = addr(&h, "tx");
    let mut setup = connect(a).await;
    setup
        .query_drop("CREATE TABLE ai (id INT PRIMARY KEY AUTO_INCREMENT, who INT)")
        .await
        .unwrap();
    setup.disconnect().await.unwrap();

    // Noise on the other pooled connection.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let noise = tokio::spawn(async move {
        let mut c = connect(a).await;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            c.query_drop("INSERT INTO ai (who) VALUES (0)")
                .await
                .unwrap();
        }
        c.disconnect().await.unwrap();
    });

    let mut c = connect(a).await;
    // LAST_INSERT_ID() right after an insert, while others insert too.
    for _ in 0..20 {
        c.query_drop("INSERT INTO ai (who) VALUES (1)")
            .await
            .unwrap();
        let id: u64 = c
            .query_first("SELECT LAST_INSERT_ID()")
            .await
            .unwrap()
            .unwrap();
        let who: i32 = c
            .exec_first("SELECT who FROM ai WHERE id = ?", (id,))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(who, 1);
    }
    // A user variable pins the client.
    c.query_drop("SET @mine = 42").await.unwrap();
    for _ in 0..10 {
        let v: Option<i64> = c.query_first("SELECT @mine").await.unwrap();
        assert_eq!(v, Some(42));
    }
    // So does a temporary table.
    let mut t = connect(a).await;
    t.query_drop("CREATE TEMPORARY TABLE tmp (a INT)")
        .await
        .unwrap();
    for i in 0..5 {
        t.exec_drop("INSERT INTO tmp VALUES (?)", (i,))
            .await
            .unwrap();
    }
    let n: Option<i64> = t.query_first("SELECT COUNT(*) FROM tmp").await.unwrap();
    assert_eq!(n, Some(5));
    // And a prepared statement, until it is closed.
    let stmt = t
        .prep("SELECT COUNT(*) FROM tmp WHERE a >= ?")
        .await
        .unwrap();
    let n: Option<i64> = t.exec_first(&stmt, (2,)).await.unwrap();
    assert_eq!(n, Some(3));
    t.close(stmt).await.unwrap();
    t.disconnect().await.unwrap();
    c.disconnect().await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    noise.await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_hold_their_connection() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 2, "10s", "")).await;
    let a = addr(&h, "tx");
    let mut setup = connect(a).await;
    setup
        .query_drop("CREATE TABLE acct (id INT PRIMARY KEY, bal INT)")
        .await
        .unwrap();
    setup
        .query_drop("INSERT INTO acct VALUES (1, 1000), (2, 1000)")
        .await
        .unwrap();
    setup.disconnect().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(tokio::spawn(async move {
            let mut c = connect(a).await;
            for j in 0..20 {
                let mut tx = c.start_transaction(Default::default()).await.unwrap();
                tx.query_drop("UPDATE acct SET bal = bal - 1 WHERE id = 1")
                    .await
                    .unwrap();
                tx.query_drop("UPDATE acct SET bal = bal + 1 WHERE id = 2")
                    .await
                    .unwrap();
                if (i + j) % 5 == 0 {
                    tx.rollback().await.unwrap();
                } else {
                    tx.commit().await.unwrap();
                }
            }
            c.disconnect().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut c = connect(a).await;
    let sum: Option<i64> = c.query_first("SELECT SUM(bal) FROM acct").await.unwrap();
    assert_eq!(sum, Some(2000));
    c.disconnect().await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}
