//! Table rules (Amoeba's tableRule) and route rules across two real servers, on both
//! protocols: the seed's setup on a small scale. The tables of a TPC-C-like schema are
//! split over two servers; transactions that each stay within one cluster run through
//! one Sluice port, and each row lands on its table's server; a statement or a
//! transaction that would need both clusters gets the cross-cluster error and nothing
//! of it commits.

use crate::common;

use mysql_async::prelude::*;

const SCHEMA: [&str; 6] = [
    "CREATE TABLE warehouse (w_id int PRIMARY KEY, w_ytd int)",
    "CREATE TABLE district (d_id int PRIMARY KEY, d_next_o_id int)",
    "CREATE TABLE orders (o_id int PRIMARY KEY, o_d_id int)",
    "CREATE TABLE item (i_id int PRIMARY KEY, i_price int)",
    "CREATE TABLE stock (s_i_id int PRIMARY KEY, s_quantity int)",
    "CREATE TABLE order_line (ol_o_id int, ol_i_id int, ol_qty int)",
];

/// Cluster `a` (the listener's) keeps warehouse, district and orders; `b` the rest.
fn config(protocol: &str, ports: (u16, u16), auth: &str, schema: &str, user: &str) -> String {
    let base = common::two_clusters(protocol, ports);
    format!(
        r#"{base}
[listeners.split]
protocol = "{protocol}"
address = "127.0.0.1:0"
cluster = "a"
pool = "tx"
auth = "{auth}"
[listeners.session]
protocol = "{protocol}"
address = "127.0.0.1:0"
cluster = "a"
pool = "session"
auth = "{auth}"
[pools.session]
mode = "session"
size = 4

[tables."{schema}.item"]
cluster = "b"
[tables."{schema}.stock"]
cluster = "b"
[tables."{schema}.order_line"]
cluster = "b"

[[rules]]
user = "{user}"
kind = "show"
action = "route"
cluster = "b"
role = "primary"
"#
    )
}

/// In one transaction `first` runs and `second`, on the other cluster, is refused
/// (0A000); the client rolls back. The refusal, for its message.
async fn pg_cross(c: &tokio_postgres::Client, first: &str, second: &str) -> tokio_postgres::Error {
    c.batch_execute(&format!("BEGIN; {first}")).await.unwrap();
    let e = c.batch_execute(second).await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "0A000");
    c.batch_execute("ROLLBACK").await.unwrap();
    e
}

/// [`pg_cross`] on MySQL (1235).
async fn my_cross(c: &mut mysql_async::Conn, first: &str, second: &str) {
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop(first).await.unwrap();
    let e = c.query_drop(second).await.unwrap_err();
    assert!(
        matches!(&e, mysql_async::Error::Server(s) if s.code == 1235),
        "{e:?}"
    );
    c.query_drop("ROLLBACK").await.unwrap();
}

#[tokio::test]
async fn pg_tables_split_over_two_servers() {
    let (pa, pb) = (common::pg(), common::pg());
    let text = config(
        "postgres",
        (pa.port(), pb.port()),
        "scram-sha-256",
        "public",
        "app",
    );
    let h = common::sluice(&text).await;
    let a = common::addr(&h, "split");
    let c = common::app(a).await;
    for ddl in SCHEMA {
        c.batch_execute(ddl).await.unwrap();
    }
    let tables = |pg: &sluice_testkit::PgServer| {
        pg.psql("app", "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'")
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(tables(&pa), "district,orders,warehouse");
    assert_eq!(tables(&pb), "item,order_line,stock");
    c.batch_execute("INSERT INTO district VALUES (1, 1); INSERT INTO item SELECT g, g FROM generate_series(1, 10) g; INSERT INTO stock SELECT g, 100 FROM generate_series(1, 10) g")
        .await
        .unwrap_err();
    // That was one simple query naming tables of both clusters: refused as a whole.
    c.batch_execute("INSERT INTO district VALUES (1, 1)")
        .await
        .unwrap();
    c.batch_execute("INSERT INTO item SELECT g, g FROM generate_series(1, 10) g")
        .await
        .unwrap();
    c.batch_execute("INSERT INTO stock SELECT g, 100 FROM generate_series(1, 10) g")
        .await
        .unwrap();
    // New orders from four clients, each in two transactions: one per cluster.
    let mut tasks = Vec::new();
    for client in 0..4 {
        tasks.push(tokio::spawn(async move {
            let mut c = common::app(a).await;
            for k in 0..10 {
                let o = client * 100 + k;
                c.batch_execute(&format!(
                    "BEGIN; UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_id = 1; INSERT INTO orders VALUES ({o}, 1); COMMIT"
                ))
                .await
                .unwrap();
                let tx = c.transaction().await.unwrap();
                let i = o % 10 + 1;
                tx.execute("UPDATE stock SET s_quantity = s_quantity - 1 WHERE s_i_id = $1", &[&i])
                    .await
                    .unwrap();
                tx.execute("INSERT INTO order_line VALUES ($1, $2, 1)", &[&o, &i])
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let count =
        |pg: &sluice_testkit::PgServer, sql: &str| pg.psql("app", sql).unwrap().trim().to_owned();
    assert_eq!(count(&pa, "SELECT count(*) FROM orders"), "40");
    assert_eq!(count(&pa, "SELECT d_next_o_id FROM district"), "41");
    assert_eq!(count(&pb, "SELECT count(*) FROM order_line"), "40");
    assert_eq!(count(&pb, "SELECT sum(s_quantity) FROM stock"), "960");
    // A statement naming both clusters' tables.
    let e = c
        .query(
            "SELECT * FROM orders o JOIN order_line l ON l.ol_o_id = o.o_id",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&e), "0A000");
    let m = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(
        m.contains("orders (cluster \"a\")") && m.contains("order_line (cluster \"b\")"),
        "{m}"
    );
    // A transaction that would need both: its second cluster's statement is refused, and
    // the client rolls back; nothing of it commits.
    let e = pg_cross(
        &c,
        "INSERT INTO orders VALUES (999, 1)",
        "INSERT INTO order_line VALUES (999, 1, 1)",
    )
    .await;
    let m = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(
        m.contains("cross-cluster transaction is not supported"),
        "{m}"
    );
    assert_eq!(
        count(&pa, "SELECT count(*) FROM orders WHERE o_id = 999"),
        "0"
    );
    // The other way round: a transaction on b, then a table of the listener's cluster.
    pg_cross(
        &c,
        "INSERT INTO order_line VALUES (998, 1, 1)",
        "INSERT INTO orders VALUES (998, 1)",
    )
    .await;
    assert_eq!(
        count(&pb, "SELECT count(*) FROM order_line WHERE ol_o_id = 998"),
        "0"
    );
    // The route rule: SHOW goes to b's primary; other statements naming no table to a.
    let port: String = c.query_one("SHOW port", &[]).await.unwrap().get(0);
    assert_eq!(port, pb.port().to_string());
    let port: String = c
        .query_one("SELECT current_setting('port')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(port, pa.port().to_string());
    // Session mode stays on its cluster: b's tables are refused there.
    let s = common::app(common::addr(&h, "session")).await;
    s.query("SELECT count(*) FROM orders", &[]).await.unwrap();
    let e = s
        .query("SELECT count(*) FROM stock", &[])
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&e), "0A000");
}

#[tokio::test]
async fn mysql_tables_split_over_two_servers() {
    let (ma, mb) = (common::my::mariadb(), common::my::mariadb());
    let text = config(
        "mysql",
        (ma.port(), mb.port()),
        "mysql_native_password",
        "test",
        "app",
    );
    let h = common::sluice(&text).await;
    let a = common::addr(&h, "split");
    let mut c = common::my::connect(a).await;
    for ddl in SCHEMA {
        c.query_drop(ddl).await.unwrap();
    }
    let tables = |db: &sluice_testkit::MariaDbServer| {
        db.sql("SELECT group_concat(table_name ORDER BY table_name) FROM information_schema.tables WHERE table_schema = 'test'")
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(tables(&ma), "district,orders,warehouse");
    assert_eq!(tables(&mb), "item,order_line,stock");
    c.query_drop("INSERT INTO district VALUES (1, 1)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO stock VALUES (1, 100), (2, 100)")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for client in 0..4 {
        tasks.push(tokio::spawn(async move {
            let mut c = common::my::connect(a).await;
            for k in 0..10 {
                let o = client * 100 + k;
                c.query_drop("BEGIN").await.unwrap();
                c.query_drop("UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_id = 1")
                    .await
                    .unwrap();
                c.exec_drop("INSERT INTO orders VALUES (?, 1)", (o,))
                    .await
                    .unwrap();
                c.query_drop("COMMIT").await.unwrap();
                let i = o % 2 + 1;
                c.query_drop("START TRANSACTION").await.unwrap();
                c.exec_drop(
                    "UPDATE stock SET s_quantity = s_quantity - 1 WHERE s_i_id = ?",
                    (i,),
                )
                .await
                .unwrap();
                c.exec_drop("INSERT INTO order_line VALUES (?, ?, 1)", (o, i))
                    .await
                    .unwrap();
                c.query_drop("COMMIT").await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let one =
        |db: &sluice_testkit::MariaDbServer, sql: &str| db.sql(sql).unwrap().trim().to_owned();
    assert_eq!(one(&ma, "SELECT count(*) FROM orders"), "40");
    assert_eq!(one(&ma, "SELECT d_next_o_id FROM district"), "41");
    assert_eq!(one(&mb, "SELECT count(*) FROM order_line"), "40");
    assert_eq!(one(&mb, "SELECT sum(s_quantity) FROM stock"), "160");
    // Qualified names and the cross-cluster statement.
    let n: Option<i64> = c
        .query_first("SELECT count(*) FROM test.order_line")
        .await
        .unwrap();
    assert_eq!(n, Some(40));
    let e = c
        .query_drop("SELECT * FROM orders o JOIN test.order_line l ON l.ol_o_id = o.o_id")
        .await
        .unwrap_err();
    let mysql_async::Error::Server(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(s.code, 1235, "{e:?}");
    assert!(s.message.contains("order_line (cluster \"b\")"), "{e:?}");
    my_cross(
        &mut c,
        "INSERT INTO orders VALUES (999, 1)",
        "INSERT INTO order_line VALUES (999, 1, 1)",
    )
    .await;
    assert_eq!(
        one(&ma, "SELECT count(*) FROM orders WHERE o_id = 999"),
        "0"
    );
    my_cross(
        &mut c,
        "INSERT INTO order_line VALUES (998, 1, 1)",
        "INSERT INTO orders VALUES (998, 1)",
    )
    .await;
    assert_eq!(
        one(&mb, "SELECT count(*) FROM order_line WHERE ol_o_id = 998"),
        "0"
    );
    // The route rule: SHOW goes to b.
    let port: Option<(String, String)> = c.query_first("SHOW VARIABLES LIKE 'port'").await.unwrap();
    assert_eq!(port.map(|p| p.1), Some(mb.port().to_string()));
}
