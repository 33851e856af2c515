//! The `mirror` rule action on both protocols: a copy of each matching statement runs
//! on another cluster, its answer dropped; the client's own statements are unaffected,
//! under load and when every mirrored copy fails.

use crate::common;

use mysql_async::prelude::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn config(protocol: &str, ports: (u16, u16), auth: &str) -> String {
    let base = common::two_clusters(protocol, ports);
    format!(
        r#"{base}
[listeners.main]
protocol = "{protocol}"
address = "127.0.0.1:0"
cluster = "a"
pool = "tx"
auth = "{auth}"

[[rules]]
pattern = "^INSERT INTO m "
action = "mirror"
cluster = "b"
"#
    )
}

/// Waits until `count()` reaches `want` (mirrors run in the background).
async fn until(want: &str, count: impl Fn() -> String) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        last = count();
        if last == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    last
}

#[tokio::test]
async fn pg_mirror_copies_and_never_fails_the_client() {
    let (pa, pb) = (common::pg(), common::pg());
    for pg in [&pa, &pb] {
        pg.psql("app", "CREATE TABLE m (a int); ALTER TABLE m OWNER TO app")
            .unwrap();
    }
    let h = common::sluice(&config("postgres", (pa.port(), pb.port()), "scram-sha-256")).await;
    let a = common::addr(&h, "main");
    let mut tasks = Vec::new();
    for client in 0..4 {
        tasks.push(tokio::spawn(async move {
            let c = common::app(a).await;
            for i in 0..10 {
                c.batch_execute(&format!("INSERT INTO m VALUES ({})", client * 10 + i))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let count = |pg: &sluice_testkit::PgServer| {
        pg.psql("app", "SELECT count(*) FROM m")
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(count(&pa), "40");
    assert_eq!(until("40", || count(&pb)).await, "40");
    // Selects are not mirrored.
    let c = common::app(a).await;
    c.batch_execute("SELECT * FROM m").await.unwrap();
    // Every copy fails now: the client sees nothing of it.
    pb.psql("app", "DROP TABLE m").unwrap();
    for i in 0..5 {
        c.batch_execute(&format!("INSERT INTO m VALUES ({i})"))
            .await
            .unwrap();
    }
    assert_eq!(count(&pa), "45");
    let failed = || h.shared.mirrors.failed.load(Ordering::Relaxed).to_string();
    assert_eq!(until("5", failed).await, "5");
    assert_eq!(h.shared.mirrors.done.load(Ordering::Relaxed), 40);
}

#[tokio::test]
async fn mysql_mirror_copies_and_never_fails_the_client() {
    let (ma, mb) = (common::my::mariadb(), common::my::mariadb());
    for db in [&ma, &mb] {
        db.sql("CREATE TABLE m (a int)").unwrap();
    }
    let text = config("mysql", (ma.port(), mb.port()), "mysql_native_password");
    let h = common::sluice(&text).await;
    let a = common::addr(&h, "main");
    let mut c = common::my::connect(a).await;
    for i in 0..20 {
        c.query_drop(format!("INSERT INTO m VALUES ({i})"))
            .await
            .unwrap();
    }
    let count = |db: &sluice_testkit::MariaDbServer| {
        db.sql("SELECT count(*) FROM m").unwrap().trim().to_owned()
    };
    assert_eq!(count(&ma), "20");
    assert_eq!(until("20", || count(&mb)).await, "20");
    mb.sql("DROP TABLE m").unwrap();
    c.query_drop("INSERT INTO m VALUES (99)").await.unwrap();
    assert_eq!(count(&ma), "21");
    let failed = || h.shared.mirrors.failed.load(Ordering::Relaxed).to_string();
    assert_eq!(until("1", failed).await, "1");
}
