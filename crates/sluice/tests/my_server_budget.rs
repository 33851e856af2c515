//! Server connections are a shared, capped resource, on MySQL too: many users' pools
//! keeping idle connections must not use up the server's `max_connections`.

use crate::common;
use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::Queryable;
use sluice_testkit::{MariaDbOptions, MariaDbServer};

/// 60 distinct users log in in turn through a transaction-mode listener (each leaves a
/// pool with an idle connection) against a server that takes 20 connections: none is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_users_share_the_servers_connections() {
    let db = MariaDbServer::start_with(MariaDbOptions {
        extra_args: vec!["--max-connections=20".into()],
        ..MariaDbOptions::default()
    })
    .expect("start MariaDB");
    let mut sql = String::new();
    for i in 0..60 {
        sql.push_str(&format!(
            "CREATE USER 'u{i}'@'%' IDENTIFIED BY 'pw{i}'; GRANT SELECT ON test.* TO 'u{i}'@'%';"
        ));
    }
    db.sql(&sql).unwrap();
    let h = sluice(&config_text(&db, 4, "5s", "")).await;
    let a = addr(&h, "tx");
    for i in 0..60 {
        let (user, pw) = (format!("u{i}"), format!("pw{i}"));
        let mut c = mysql_async::Conn::new(opts(a, &user, &pw, Some("test")))
            .await
            .unwrap_or_else(|e| panic!("login {i} refused: {e:?}"));
        let n: Option<i64> = c.query_first("SELECT 1").await.unwrap();
        assert_eq!(n, Some(1));
        c.disconnect().await.unwrap();
    }
    let open = db
        .sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Daemon';")
        .unwrap();
    let open: usize = open.trim().parse().unwrap();
    // 20 less a tenth, and the count query's own connection.
    assert!(open <= 19, "{open} server connections");
}
