//! Routes over a real MariaDB primary with a GTID replica: roles discovered from a
//! shuffled server list (@@read_only), reads on the replica and off it once its SQL
//! thread stops, a promotion followed, no writes while no primary is known.

use crate::common;

use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::Queryable;
use sluice_testkit::MariaDbServer;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn config(servers: &[(&str, u16)], strategy: &str) -> String {
    common::routes_config("mysql", servers, ("monitor", "monitor-pw"), "5s", strategy)
}

/// The port of the server a new client of `a` lands on, and whether it is read-only.
async fn lands_on(a: SocketAddr) -> Result<(u16, bool), mysql_async::Error> {
    let mut c = mysql_async::Conn::new(opts(a, APP_USER, APP_PW, Some("test"))).await?;
    let row: Option<(u16, u8)> = c.query_first("SELECT @@port, @@read_only").await?;
    let _ = c.disconnect().await;
    let (port, ro) = row.unwrap_or_default();
    Ok((port, ro == 1))
}

async fn eventually(a: SocketAddr, want: impl Fn(u16, bool) -> bool) -> (u16, bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok((port, ro)) = lands_on(a).await
            && want(port, ro)
        {
            return (port, ro);
        }
        assert!(
            Instant::now() < deadline,
            "no client of {a} landed where wanted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A primary with the test's users (replicated) and a replica of it.
fn servers() -> (MariaDbServer, MariaDbServer) {
    let primary = common::my::monitored_primary();
    let replica = primary.start_replica().expect("replica");
    (primary, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_discovered_and_reads_kept_off_a_stopped_replica() {
    let (primary, replica) = servers();
    let (p, r) = (primary.port(), replica.port());
    let h = sluice(&config(&[("r", r), ("p", p)], "round-robin-with-fallback")).await;
    let (rw, ro) = (addr(&h, "rw"), addr(&h, "ro"));
    assert_eq!(eventually(rw, |_, _| true).await, (p, false));
    assert_eq!(eventually(ro, |port, _| port == r).await, (r, true));
    for _ in 0..3 {
        assert_eq!(lands_on(ro).await.unwrap(), (r, true));
    }
    // The SQL thread stops: Seconds_Behind_Master is NULL, the replica gets no reads,
    // and round-robin-with-fallback sends them to the primary.
    replica.pause_replay(true).unwrap();
    assert_eq!(eventually(ro, |port, _| port == p).await, (p, false));
    replica.pause_replay(false).unwrap();
    assert_eq!(eventually(ro, |port, _| port == r).await, (r, true));
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_followed_and_no_writes_without_a_primary() {
    let (mut primary, replica) = servers();
    let (p, r) = (primary.port(), replica.port());
    let h = sluice(&config(&[("p", p), ("r", r)], "round-robin")).await;
    let rw = addr(&h, "rw");
    eventually(rw, |port, _| port == p).await;
    let mut c = mysql_async::Conn::new(opts(rw, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    c.query_drop("CREATE TABLE kept (n INT); INSERT INTO kept VALUES (1)")
        .await
        .unwrap();
    replica.wait_caught_up(&primary).unwrap();

    primary.kill();
    assert!(
        c.query_drop("SELECT 1").await.is_err(),
        "the session on the dead server fails"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let e = lands_on(rw).await.unwrap_err();
    assert!(e.to_string().contains("no healthy primary"), "{e}");
    assert!(
        !e.to_string().contains("#HY000"),
        "no SQLSTATE marker before the greeting: {e}"
    );
    match &e {
        mysql_async::Error::Server(s) => assert_eq!(s.code, 9001, "{e}"),
        other => panic!("expected the server error 9001, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(1400));

    replica.promote().unwrap();
    assert_eq!(eventually(rw, |_, _| true).await, (r, false));
    let mut c = mysql_async::Conn::new(opts(rw, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let n: Option<i64> = c.query_first("SELECT COUNT(*) FROM kept").await.unwrap();
    assert_eq!(n, Some(1));
    drop(h);
}

/// Transaction mode with configured users: a connected client's next transaction
/// after a failover goes to the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_sessions_follow_a_promotion() {
    let (mut primary, replica) = servers();
    let (p, r) = (primary.port(), replica.port());
    let mut text = config(&[("p", p), ("r", r)], "round-robin");
    text.push_str(&format!(
        "[pools.tx]\nmode = \"transaction\"\nsize = 4\nwait_timeout = \"1s\"\n\
         [users.{APP_USER}]\npassword = \"{APP_PW}\"\n\
         [listeners.tx]\nprotocol = \"mysql\"\naddress = \"127.0.0.1:0\"\ncluster = \"main\"\n\
         pool = \"tx\"\nauth = \"mysql_native_password\"\n"
    ));
    let h = sluice(&text).await;
    eventually(addr(&h, "rw"), |port, _| port == p).await;
    let mut c = mysql_async::Conn::new(opts(addr(&h, "tx"), APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let at: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(p));
    primary.kill();
    replica.promote().unwrap();
    until_on(&mut c, r, 15).await;
    c.query_drop("CREATE TABLE after_failover (n INT)")
        .await
        .unwrap();
    drop(h);
}

/// Split on MySQL: reads on the replica, writes on the primary, and after a write the
/// session's reads where the write is: the primary until the replica's applied GTID
/// has passed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_sends_reads_to_the_replica_and_writes_to_the_primary() {
    let (primary, replica) = servers();
    let (p, r) = (primary.port(), replica.port());
    let mut text = config(&[("p", p), ("r", r)], "round-robin");
    text.push_str(&format!(
        "[pools.tx]\nmode = \"transaction\"\nsize = 4\nwait_timeout = \"2s\"\n\
         [users.{APP_USER}]\npassword = \"{APP_PW}\"\n\
         [listeners.split]\nprotocol = \"mysql\"\naddress = \"127.0.0.1:0\"\ncluster = \"main\"\n\
         pool = \"tx\"\nauth = \"mysql_native_password\"\nroute = \"split\"\n\
         read_your_writes_timeout = \"1s\"\n"
    ));
    let h = sluice(&text).await;
    eventually(addr(&h, "rw"), |port, _| port == p).await;
    let mut c = mysql_async::Conn::new(opts(addr(&h, "split"), APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let at: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(r), "a read goes to the replica");
    let at: Option<u16> = c.exec_first("SELECT @@port", ()).await.unwrap();
    assert_eq!(at, Some(r), "a prepared read goes to the replica");
    let at: Option<u16> = c
        .query_first("/* sluice:primary */ SELECT @@port")
        .await
        .unwrap();
    assert_eq!(at, Some(p), "a hint overrides");
    c.query_drop("CREATE TABLE s (n INT)").await.unwrap();
    c.query_drop("INSERT INTO s VALUES (1)").await.unwrap();
    // A prepared write runs on the primary (the replica is read-only: it would fail).
    c.exec_drop("INSERT INTO s VALUES (?)", (10,))
        .await
        .unwrap();
    c.query_drop("DELETE FROM s WHERE n = 10").await.unwrap();
    let n: Option<i64> = c.query_first("SELECT COUNT(*) FROM s").await.unwrap();
    assert_eq!(n, Some(1), "the session reads its own write");
    let at: Option<u16> = c
        .query_first("SELECT @@port FROM s FOR UPDATE")
        .await
        .unwrap();
    assert_eq!(at, Some(p));
    // With the replica applying nothing, the session's read after its write goes to
    // the primary; once the replica has applied it, to the replica again.
    replica.pause_replay(true).unwrap();
    c.query_drop("INSERT INTO s VALUES (2)").await.unwrap();
    let at: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(p), "the replica has not applied the write");
    replica.pause_replay(false).unwrap();
    replica.wait_caught_up(&primary).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let at: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
        if at == Some(r) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reads never went back to the replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n: Option<i64> = c.query_first("SELECT COUNT(*) FROM s").await.unwrap();
    assert_eq!(n, Some(2));
    // Applying again: a read right after a write waits the moment the replica needs
    // and is served there (not by the primary), with the write.
    for n in 3..=5 {
        c.query_drop("INSERT INTO s VALUES (3)").await.unwrap();
        let row: Option<(i64, u16)> = c
            .query_first("SELECT COUNT(*), @@port FROM s")
            .await
            .unwrap();
        assert_eq!(row, Some((n, r)), "the read waited for the replica");
    }
    drop(h);
}

/// A primary demoted in place (read_only on, the replica promoted beside it): a
/// session-mode client of the read-write route is told at its next statement and its
/// next connection reaches the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_on_a_demoted_primary_is_ended() {
    let (primary, replica) = servers();
    let (p, r) = (primary.port(), replica.port());
    let mut text = config(&[("p", p), ("r", r)], "round-robin");
    text.push_str(&format!(
        "[pools.tx]\nmode = \"transaction\"\nsize = 4\n\
         [users.{APP_USER}]\npassword = \"{APP_PW}\"\n\
         [listeners.tx]\nprotocol = \"mysql\"\naddress = \"127.0.0.1:0\"\ncluster = \"main\"\n\
         pool = \"tx\"\nauth = \"mysql_native_password\"\n"
    ));
    let h = sluice(&text).await;
    let rw = addr(&h, "rw");
    eventually(rw, |port, _| port == p).await;
    // A transaction-mode client leaves an idle pooled connection on the primary.
    let mut t = mysql_async::Conn::new(opts(addr(&h, "tx"), APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let at: Option<u16> = t.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(p));
    let pooled = "SELECT COUNT(*) FROM information_schema.processlist WHERE user = 'app' AND command = 'Sleep'";
    let mut c = mysql_async::Conn::new(opts(rw, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let at: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(p));
    primary.sql("SET GLOBAL read_only = ON;").unwrap();
    replica.promote().unwrap();
    // The checker sees both changes within a few intervals.
    tokio::time::sleep(Duration::from_millis(600)).await;
    match c.query_first::<u16, _>("SELECT @@port").await {
        Err(mysql_async::Error::Server(e)) => {
            assert_eq!(e.code, 1053, "{e:?}");
            assert!(e.message.contains("no longer the primary"), "{e:?}");
        }
        other => panic!("the session went on on the demoted primary: {other:?}"),
    }
    assert_eq!(eventually(rw, |port, _| port == r).await, (r, false));
    // The idle connections opened for writes on the demoted primary are closed.
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(5);
    while primary.sql(pooled).unwrap().trim() != "0" {
        assert!(
            Instant::now() < deadline,
            "idle connections stayed on the demoted primary"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(t);
    drop(h);
}

/// The dead primary during a write load, with semi-synchronous replication: clients
/// insert numbered rows through the read-write route and count what was acknowledged;
/// after kill -9 and a lossless promotion every acknowledged row is on the new primary
/// and none is there twice (a write that failed was never sent again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_write_is_lost_or_repeated_across_a_failover() {
    let (mut primary, replica) = servers();
    let (p, r) = (primary.port(), replica.port());
    primary.sql("CREATE TABLE w (client INT, seq INT)").unwrap();
    replica.wait_caught_up(&primary).unwrap();
    primary.semi_sync(&replica).unwrap();
    let h = sluice(&config(&[("a", p), ("b", r)], "round-robin")).await;
    let rw = addr(&h, "rw");
    eventually(rw, |port, _| port == p).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for client in 0..4 {
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut conn: Option<mysql_async::Conn> = None;
            let mut seq = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(c) = conn.as_mut() else {
                    let o = opts(rw, APP_USER, APP_PW, Some("test"));
                    conn = mysql_async::Conn::new(o).await.ok();
                    if conn.is_none() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    continue;
                };
                seq += 1;
                let sql = format!("INSERT INTO w VALUES ({client}, {seq})");
                match c.query_drop(sql).await {
                    Ok(()) => acked.push(seq),
                    // Unknown whether it committed: never sent again.
                    Err(_) => conn = None,
                }
            }
            (client, acked)
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    primary.kill();
    replica.promote().unwrap();
    eventually(rw, |port, ro| port == r && !ro).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut c = mysql_async::Conn::new(opts(rw, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let mut total = 0;
    for w in writers {
        let (client, acked) = w.await.unwrap();
        total += acked.len();
        let there: Vec<i32> = c
            .query(format!("SELECT seq FROM w WHERE client = {client}"))
            .await
            .unwrap();
        common::no_write_lost_or_repeated(client, &acked, &there);
    }
    assert!(total > 20, "the load ran ({total} acknowledged writes)");
    drop(h);
}
