//! A read outside a transaction whose replica dies before it answers goes once to
//! another server of the route (transaction mode), and so does any request whose
//! server cannot be reached (nothing was sent); a read inside a transaction, or a
//! write, that may have reached a server is never sent again: its client gets an
//! error.

use crate::common;

use common::my::{APP_PW, APP_USER, opts};
use common::{addr, connect, sluice};
use mysql_async::prelude::Queryable;
use std::time::Duration;

/// A transaction-mode listener `name` with `route`, for a configured user.
fn tx_listener(protocol: &str, name: &str, route: &str, auth: &str) -> String {
    format!(
        "[listeners.{name}]\nprotocol = \"{protocol}\"\naddress = \"127.0.0.1:0\"\n\
         cluster = \"main\"\npool = \"tx\"\nauth = \"{auth}\"\nroute = \"{route}\"\n"
    )
}

const TX_POOL: &str = "[pools.tx]\nmode = \"transaction\"\nsize = 4\nwait_timeout = \"2s\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_read_whose_replica_dies_goes_to_another_once() {
    let primary = common::pg();
    let pw = primary.password().to_owned();
    let mut r1 = primary.start_replica().expect("replica 1");
    let mut r2 = primary.start_replica().expect("replica 2");
    let (p1, p2) = (r1.port(), r2.port());
    let servers = [("p", primary.port()), ("r1", p1), ("r2", p2)];
    let mut text = common::routes_config(
        "postgres",
        &servers,
        ("postgres", &pw),
        "10s",
        "round-robin",
    );
    text.push_str(TX_POOL);
    text.push_str(&format!("[users.postgres]\npassword = \"{pw}\"\n"));
    text.push_str(&tx_listener(
        "postgres",
        "reads",
        "read-only",
        "scram-sha-256",
    ));
    let h = sluice(&text).await;
    let reads = addr(&h, "reads");
    let c = loop {
        let c = connect(reads, "postgres", &pw, "postgres").await.unwrap();
        if c.query_one("select 1", &[]).await.is_ok() {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let port = |row: &tokio_postgres::Row| u16::try_from(row.get::<_, i32>(0)).unwrap();
    let here = "select inet_server_port()";
    let on = port(&c.query_one(here, &[]).await.unwrap());
    let (victim, other) = if on == p1 {
        (&mut r1, p2)
    } else {
        (&mut r2, p1)
    };
    // Its replica dies between two reads, before the checker can tell: the next read
    // cannot reach it (nothing was sent) and goes to the other replica at once.
    victim.kill();
    let row = c.query_one(here, &[]).await;
    let row = row.expect("the read was answered by the other replica");
    assert_eq!(port(&row), other);
    // Inside a transaction a lost read is not sent again: the client is told.
    let slow = "select inet_server_port(), pg_sleep(1)::text";
    let c2 = connect(reads, "postgres", &pw, "postgres").await.unwrap();
    drop(c);
    c2.batch_execute("begin").await.unwrap();
    assert_eq!(
        port(
            &c2.query_one("select inet_server_port()", &[])
                .await
                .unwrap()
        ),
        other
    );
    let st = c2.prepare(slow).await.unwrap();
    let read = tokio::spawn(async move { c2.query_one(&st, &[]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    if other == p1 {
        r1.kill();
    } else {
        r2.kill();
    }
    assert!(
        read.await.unwrap().is_err(),
        "a read in a transaction is not retried"
    );
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_split_read_whose_replica_dies_goes_to_the_primary_once() {
    let primary = common::my::monitored_primary();
    let mut replica = primary.start_replica().expect("replica");
    let (p, r) = (primary.port(), replica.port());
    let servers = [("p", p), ("r", r)];
    let mut text = common::routes_config(
        "mysql",
        &servers,
        ("monitor", "monitor-pw"),
        "10s",
        "round-robin",
    );
    text.push_str(TX_POOL);
    text.push_str(&format!("[users.{APP_USER}]\npassword = \"{APP_PW}\"\n"));
    text.push_str(&tx_listener(
        "mysql",
        "split",
        "split",
        "mysql_native_password",
    ));
    let h = sluice(&text).await;
    let split = addr(&h, "split");
    let mut c = mysql_async::Conn::new(opts(split, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    let mut at: Option<u16> = None;
    for _ in 0..100 {
        at = c.query_first("SELECT @@port").await.unwrap();
        if at == Some(r) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(at, Some(r), "reads go to the replica");
    let read = tokio::spawn(async move {
        let row: Result<Option<(u16, i64)>, _> = c.query_first("SELECT @@port, SLEEP(1)").await;
        (c, row)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    replica.kill();
    let (c, row) = read.await.unwrap();
    let row = row.expect("the read was answered by the primary");
    assert_eq!(row, Some((p, 0)));
    // A write is never sent again: one that loses its server fails.
    let mut w = mysql_async::Conn::new(opts(split, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    w.query_drop("CREATE TABLE IF NOT EXISTS t (n INT)")
        .await
        .unwrap();
    let write = tokio::spawn(async move { w.query_drop("INSERT INTO t SELECT SLEEP(1)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut primary = primary;
    primary.kill();
    assert!(write.await.unwrap().is_err(), "a write is not retried");
    let _ = c.disconnect().await;
    drop(h);
}
