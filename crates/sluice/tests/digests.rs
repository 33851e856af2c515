//! Query digests against a known workload, on both protocols, in both pool modes
//! (transaction mode's plain statements run on shared connections): counts, rows
//! sent, rows changed and errors per (digest, user, database, listener).

use crate::common;

use common::*;
use mysql_async::prelude::*;
use sluice::stats::Row;

fn find<'a>(rows: &'a [Row], listener: &str, text: &str) -> &'a Row {
    rows.iter()
        .find(|r| &*r.listener == listener && &*r.text == text)
        .unwrap_or_else(|| {
            let all: Vec<_> = rows
                .iter()
                .map(|r| (&r.listener, &r.text, r.count))
                .collect();
            panic!("no digest {text:?} on {listener}: {all:?}")
        })
}

#[tokio::test]
async fn pg_digests_count_a_known_workload() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "2s", "")).await;
    let setup = app(addr(&h, "tx")).await;
    setup
        .batch_execute("CREATE TABLE d (a int); INSERT INTO d VALUES (1), (2), (3)")
        .await
        .unwrap();
    for listener in ["tx", "session"] {
        let c = app(addr(&h, listener)).await;
        for i in 1..=10 {
            c.batch_execute(&format!("SELECT a FROM d WHERE a = {i}"))
                .await
                .unwrap();
        }
        for i in 0..3 {
            c.batch_execute(&format!("INSERT INTO d VALUES ({})", 100 + i))
                .await
                .unwrap();
        }
        for _ in 0..2 {
            c.batch_execute("SELECT nope FROM d").await.unwrap_err();
        }
        let stmt = c.prepare("SELECT a FROM d WHERE a < $1").await.unwrap();
        for _ in 0..5 {
            c.query(&stmt, &[&3i32]).await.unwrap();
        }
    }
    let rows = h.shared.digests.as_ref().expect("digests on").rows();
    for listener in ["tx", "session"] {
        let s = find(&rows, listener, "SELECT a FROM d WHERE a = ?");
        assert_eq!((s.count, s.rows, s.errors), (10, 3, 0), "{listener}: {s:?}");
        assert_eq!((&*s.user, &*s.database), ("app", "app"));
        assert!(s.min <= s.p50 && s.p50 <= s.p99 && s.p99 <= s.max, "{s:?}");
        let i = find(&rows, listener, "INSERT INTO d VALUES (?)");
        assert_eq!((i.count, i.affected), (3, 3), "{listener}: {i:?}");
        let e = find(&rows, listener, "SELECT nope FROM d");
        assert_eq!((e.count, e.errors), (2, 2), "{listener}: {e:?}");
        let p = find(&rows, listener, "SELECT a FROM d WHERE a < ?");
        assert_eq!((p.count, p.rows), (5, 10), "{listener}: {p:?}");
    }
}

#[tokio::test]
async fn mysql_digests_count_a_known_workload() {
    let db = my::mariadb();
    let h = sluice(&my::config_text(&db, 4, "2s", "")).await;
    let mut setup = my::connect(addr(&h, "tx")).await;
    setup.query_drop("CREATE TABLE d (a int)").await.unwrap();
    setup
        .query_drop("INSERT INTO d VALUES (1), (2), (3)")
        .await
        .unwrap();
    for listener in ["tx", "session"] {
        let mut c = my::connect(addr(&h, listener)).await;
        for i in 1..=10 {
            let _: Vec<i32> = c
                .query(format!("SELECT a FROM d WHERE a = {i}"))
                .await
                .unwrap();
        }
        for i in 0..3 {
            c.query_drop(format!("INSERT INTO d VALUES ({})", 100 + i))
                .await
                .unwrap();
        }
        for _ in 0..2 {
            c.query_drop("SELECT nope FROM d").await.unwrap_err();
        }
        for _ in 0..5 {
            let _: Vec<i32> = c.exec("SELECT a FROM d WHERE a < ?", (3,)).await.unwrap();
        }
    }
    let rows = h.shared.digests.as_ref().expect("digests on").rows();
    for listener in ["tx", "session"] {
        let s = find(&rows, listener, "SELECT a FROM d WHERE a = ?");
        assert_eq!((s.count, s.rows, s.errors), (10, 3, 0), "{listener}: {s:?}");
        assert_eq!((&*s.user, &*s.database), ("app", "test"));
        let i = find(&rows, listener, "INSERT INTO d VALUES (?)");
        assert_eq!((i.count, i.affected), (3, 3), "{listener}: {i:?}");
        let e = find(&rows, listener, "SELECT nope FROM d");
        assert_eq!((e.count, e.errors), (2, 2), "{listener}: {e:?}");
        let p = find(&rows, listener, "SELECT a FROM d WHERE a < ?");
        assert_eq!((p.count, p.rows), (5, 10), "{listener}: {p:?}");
    }
}

#[tokio::test]
async fn no_digests_when_turned_off() {
    let pg = pg();
    let text =
        config_text(&pg, 4, "2s", "").replace("[general]\n", "[general]\ndigest_max_entries = 0\n");
    let h = sluice(&text).await;
    let c = app(addr(&h, "tx")).await;
    c.batch_execute("SELECT 1").await.unwrap();
    assert!(h.shared.digests.is_none());
}
