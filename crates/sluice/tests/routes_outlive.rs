//! A transaction-mode session outlives its server connection: when the server dies
//! (killed, or shut down as in a switchover), the client's statement in flight gets an
//! error in its protocol and the session goes on. Its next statement runs on the new
//! primary with its SETs and prepared statements there; a transaction it had open is
//! gone, and a client that was idle in it learns so from its next statement, which does
//! not run.

use crate::common;

use common::my::{APP_PW, APP_USER, opts};
use common::{addr, connect, sluice, sqlstate};
use mysql_async::prelude::Queryable;
use std::time::{Duration, Instant};

fn tx_listener(protocol: &str, auth: &str) -> String {
    format!(
        "[pools.tx]\nmode = \"transaction\"\nsize = 4\nwait_timeout = \"10s\"\n\
         [listeners.tx]\nprotocol = \"{protocol}\"\naddress = \"127.0.0.1:0\"\n\
         cluster = \"main\"\npool = \"tx\"\nauth = \"{auth}\"\n"
    )
}

/// PostgreSQL servers in one cluster checked as the superuser, with the transaction
/// listener `tx` for the configured superuser.
fn pg_tx_config(servers: &[(&str, u16)], pw: &str) -> String {
    let mut text =
        common::routes_config("postgres", servers, ("postgres", pw), "10s", "round-robin");
    text.push_str(&format!("[users.postgres]\npassword = \"{pw}\"\n"));
    text.push_str(&tx_listener("postgres", "scram-sha-256"));
    text
}

async fn pg_port(c: &tokio_postgres::Client) -> i32 {
    let row = c.query_one("select inet_server_port()", &[]).await;
    row.expect("the session goes on").get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sessions_outlive_a_killed_primary() {
    let mut primary = common::pg();
    let replica = primary.start_replica().expect("replica");
    let pw = primary.password().to_owned();
    let servers = [("p", primary.port()), ("r", replica.port())];
    let text = pg_tx_config(&servers, &pw);
    let h = sluice(&text).await;
    let tx = addr(&h, "tx");
    let a = connect(tx, "postgres", &pw, "postgres").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while a.batch_execute("create table t (n int)").await.is_err() {
        assert!(Instant::now() < deadline, "no primary found");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.batch_execute("set application_name = 'survivor'")
        .await
        .unwrap();
    let st = a.prepare("select inet_server_port()").await.unwrap();
    replica.wait_caught_up(&primary).unwrap();
    // b is idle in a transaction that has written a row; a has a statement running.
    let b = connect(tx, "postgres", &pw, "postgres").await.unwrap();
    b.batch_execute("begin; insert into t values (1)")
        .await
        .unwrap();
    let a = std::sync::Arc::new(a);
    let a2 = a.clone();
    let slow = tokio::spawn(async move { a2.batch_execute("select pg_sleep(5)").await });
    let c = connect(tx, "postgres", &pw, "postgres").await.unwrap();
    c.batch_execute("begin; insert into t values (10)")
        .await
        .unwrap();
    let c = std::sync::Arc::new(c);
    let c2 = c.clone();
    let c_slow = tokio::spawn(async move { c2.batch_execute("select pg_sleep(5)").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    primary.kill();
    let promoted = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        replica.promote().map(|()| replica)
    });
    let e = slow
        .await
        .unwrap()
        .expect_err("the statement in flight fails");
    assert_eq!(sqlstate(&e), "08006", "{e:?}");
    assert!(!a.is_closed(), "the session goes on");
    let replica = promoted.join().unwrap().unwrap();
    // Its next statements run on the new primary, SETs and prepared statements there.
    assert_eq!(pg_port(&a).await, i32::from(replica.port()));
    let name = a.query_one("show application_name", &[]).await.unwrap();
    assert_eq!(name.get::<_, String>(0), "survivor");
    let row = a.query_one(&st, &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), i32::from(replica.port()));
    // b's transaction is gone: its next statement fails and does not run, and so do
    // the rest until b ends the transaction (as in a failed transaction block);
    // COMMIT is answered ROLLBACK.
    let e = b.batch_execute("insert into t values (2)").await;
    let e = e.expect_err("a statement of the lost transaction fails");
    assert_eq!(sqlstate(&e), "08006", "{e:?}");
    let msg = e.as_db_error().map(|d| d.message().to_owned());
    assert!(msg.unwrap_or_default().contains("rolled back"), "{e:?}");
    // Preparing COMMIT does not end it; running it does.
    let commit = b.prepare("commit").await.expect("COMMIT may be prepared");
    let e = b.execute("insert into t values (22)", &[]).await;
    assert_eq!(sqlstate(&e.expect_err("still aborted")), "25P02");
    b.execute(&commit, &[]).await.expect("COMMIT ends it");
    b.batch_execute("insert into t values (3)").await.unwrap();
    // c had a statement in flight in its transaction: the same.
    let e = c_slow
        .await
        .unwrap()
        .expect_err("c's statement in flight fails");
    assert_eq!(sqlstate(&e), "08006", "{e:?}");
    let e = c.batch_execute("insert into t values (33)").await;
    assert_eq!(sqlstate(&e.expect_err("still aborted")), "25P02");
    c.batch_execute("rollback").await.unwrap();
    let rows = b.query("select n from t", &[]).await.unwrap();
    let ns: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ns, [3], "nothing of the lost transactions ran");
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sessions_outlive_a_server_shutdown_and_restart() {
    let mut server = common::pg();
    let pw = server.password().to_owned();
    let text = pg_tx_config(&[("p", server.port())], &pw);
    let h = sluice(&text).await;
    let c = connect(addr(&h, "tx"), "postgres", &pw, "postgres")
        .await
        .unwrap();
    c.batch_execute("set application_name = 'survivor'")
        .await
        .unwrap();
    let c = std::sync::Arc::new(c);
    let c2 = c.clone();
    let slow = tokio::spawn(async move { c2.batch_execute("select pg_sleep(5)").await });
    // A session with nothing of its own on its connection: its statement goes to a
    // shared server connection.
    let d = connect(addr(&h, "tx"), "postgres", &pw, "postgres")
        .await
        .unwrap();
    let d = std::sync::Arc::new(d);
    let d2 = d.clone();
    let shared = tokio::spawn(async move { d2.batch_execute("select pg_sleep(5)").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A fast shutdown tells every backend's client FATAL 57P01: the client gets it as
    // an ERROR and keeps its session.
    server.stop();
    let e = slow
        .await
        .unwrap()
        .expect_err("the statement in flight fails");
    assert_eq!(sqlstate(&e), "57P01", "{e:?}");
    let restarted = std::thread::spawn(move || server.restart().map(|()| server));
    let name = c.query_one("show application_name", &[]).await;
    let name = name.expect("the next statement waits for the server to be back");
    assert_eq!(name.get::<_, String>(0), "survivor");
    assert!(!c.is_closed());
    let e = shared
        .await
        .unwrap()
        .expect_err("the shared statement fails");
    assert!(["08006", "57P01"].contains(&sqlstate(&e).as_str()), "{e:?}");
    let one = d.query_one("select 1", &[]).await;
    assert_eq!(one.expect("its session goes on").get::<_, i32>(0), 1);
    let _server = restarted.join().unwrap().unwrap();
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_sessions_outlive_a_killed_primary() {
    let mut primary = common::my::monitored_primary();
    let replica = primary.start_replica().expect("replica");
    let (p, r) = (primary.port(), replica.port());
    let mut text = common::routes_config(
        "mysql",
        &[("p", p), ("r", r)],
        ("monitor", "monitor-pw"),
        "10s",
        "round-robin",
    );
    text.push_str(&format!("[users.{APP_USER}]\npassword = \"{APP_PW}\"\n"));
    text.push_str(&tx_listener("mysql", "mysql_native_password"));
    let h = sluice(&text).await;
    let tx = addr(&h, "tx");
    let mut a = mysql_async::Conn::new(opts(tx, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while a
        .query_drop("CREATE TABLE t (n INT) ENGINE=InnoDB")
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "no primary found");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.query_drop("SET time_zone = '+03:00'").await.unwrap();
    let st = a.prep("SELECT @@port").await.unwrap();
    replica.wait_caught_up(&primary).unwrap();
    let mut b = mysql_async::Conn::new(opts(tx, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
    let slow = tokio::spawn(async move {
        let r = a.query_drop("SELECT SLEEP(5)").await;
        (a, r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    primary.kill();
    replica.promote().unwrap();
    let (mut a, e) = slow.await.unwrap();
    match e {
        Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1927, "{e:?}"),
        other => panic!("the statement in flight fails with 1927, got {other:?}"),
    }
    let at: Option<u16> = a.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(r), "the next statement runs on the new primary");
    let tz: Option<String> = a.query_first("SELECT @@session.time_zone").await.unwrap();
    assert_eq!(tz.as_deref(), Some("+03:00"));
    let at: Option<u16> = a.exec_first(&st, ()).await.unwrap();
    assert_eq!(at, Some(r));
    match b.query_drop("INSERT INTO t VALUES (2)").await {
        Err(mysql_async::Error::Server(e)) => {
            assert_eq!(e.code, 1927, "{e:?}");
            assert!(e.message.contains("rolled back"), "{e:?}");
        }
        other => panic!("a statement of the lost transaction fails, got {other:?}"),
    }
    b.query_drop("INSERT INTO t VALUES (3)").await.unwrap();
    let ns: Vec<i32> = b.query("SELECT n FROM t").await.unwrap();
    assert_eq!(ns, [3], "nothing of the lost transaction ran");
    drop(h);
}

/// After a failover, a replica that nothing points at the new primary receives nothing
/// more: it keeps its reads up to `max_replica_lag`, then loses them (here to the new
/// primary, the route falling back to it) instead of serving stale rows for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_replica_cut_off_from_its_primary_loses_its_reads() {
    let mut primary = common::pg();
    let r1 = primary.start_replica().expect("replica 1");
    let r2 = primary.start_replica().expect("replica 2");
    let pw = primary.password().to_owned();
    let servers = [("p", primary.port()), ("r1", r1.port()), ("r2", r2.port())];
    let text = common::routes_config(
        "postgres",
        &servers,
        ("postgres", &pw),
        "1s",
        "round-robin-with-fallback",
    );
    let h = sluice(&text).await;
    let ro = addr(&h, "ro");
    let lands = || async {
        let c = connect(ro, "postgres", &pw, "postgres").await.ok()?;
        let row = c.query_one("select inet_server_port()", &[]).await.ok()?;
        Some(row.get::<_, i32>(0))
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while lands().await != Some(i32::from(r2.port())) {
        assert!(Instant::now() < deadline, "r2 never got reads");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    primary.kill();
    r1.promote().unwrap();
    // r2 still follows the dead primary. Within 1 s plus a few checks, only the new
    // primary reads (the route's fallback).
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut on_r1 = 0;
    while on_r1 < 6 {
        on_r1 = match lands().await {
            Some(p) if p == i32::from(r1.port()) => on_r1 + 1,
            _ => 0,
        };
        assert!(
            Instant::now() < deadline,
            "the cut-off replica kept its reads"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(h);
}

/// A session killed on purpose does not outlive its server connection: KILL CONNECTION
/// of a MySQL client in a transaction, through the connection it holds, ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_kill_connection_still_ends_a_session_in_a_transaction() {
    let (_db, h, a) = common::my::tx_sluice(4, "5s", &["CREATE TABLE k (n INT)"]).await;
    let mut victim = common::my::connect(a).await;
    victim.query_drop("BEGIN").await.unwrap();
    victim.query_drop("INSERT INTO k VALUES (1)").await.unwrap();
    let mut killer = common::my::connect(a).await;
    killer
        .query_drop(format!("KILL CONNECTION {}", victim.id()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first = victim.query_drop("INSERT INTO k VALUES (2)").await;
    assert!(first.is_err(), "the killed session's statement fails");
    // Not just that statement: the session is over (one that outlived its server
    // connection would answer this).
    assert!(
        victim.query_drop("SELECT 1").await.is_err(),
        "the killed session is gone"
    );
    let n: Option<i64> = killer.query_first("SELECT COUNT(*) FROM k").await.unwrap();
    assert_eq!(n, Some(0));
    drop(h);
}

/// The same on MariaDB: a replica whose I/O thread lost its primary (and has applied
/// what it received) keeps its reads for `max_replica_lag`, then loses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_replica_cut_off_from_its_primary_keeps_its_reads_a_while() {
    let mut primary = common::my::monitored_primary();
    let r1 = primary.start_replica().expect("replica 1");
    let r2 = primary.start_replica().expect("replica 2");
    let (p1, p2) = (r1.port(), r2.port());
    let servers = [("p", primary.port()), ("r1", p1), ("r2", p2)];
    let text = common::routes_config(
        "mysql",
        &servers,
        ("monitor", "monitor-pw"),
        "3s",
        "round-robin-with-fallback",
    );
    let h = sluice(&text).await;
    let ro = addr(&h, "ro");
    let lands = || async {
        let mut c = mysql_async::Conn::new(opts(ro, APP_USER, APP_PW, Some("test")))
            .await
            .ok()?;
        let port: Option<u16> = c.query_first("SELECT @@port").await.ok()?;
        let _ = c.disconnect().await;
        port
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while lands().await != Some(p2) {
        assert!(Instant::now() < deadline, "r2 never got reads");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    primary.kill();
    let killed = Instant::now();
    r1.promote().unwrap();
    // Several checks later, r2 (cut off) still reads, within max_replica_lag.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut on_r2 = false;
    while killed.elapsed() < Duration::from_millis(2500) && !on_r2 {
        on_r2 = lands().await == Some(p2);
    }
    assert!(
        on_r2,
        "the cut-off replica kept its reads within max_replica_lag"
    );
    // Then only the new primary reads (the route's fallback).
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut on_r1 = 0;
    while on_r1 < 6 {
        on_r1 = if lands().await == Some(p1) {
            on_r1 + 1
        } else {
            0
        };
        assert!(
            Instant::now() < deadline,
            "the cut-off replica kept its reads"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(h);
}
