//! Server connections are a shared, capped resource: pools of many users and databases
//! keeping idle connections must not use up the server's `max_connections`.

use crate::common;
use common::*;
use sluice_testkit::{PgOptions, PgServer};
use std::time::Duration;

fn small_server() -> PgServer {
    let pg = PgServer::start_with(PgOptions {
        extra_conf: vec!["max_connections = 30".into()],
        ..PgOptions::default()
    })
    .expect("start PostgreSQL");
    pg.create_user(APP_USER, APP_PW).unwrap();
    pg.create_database("app", APP_USER).unwrap();
    pg
}

/// 200 distinct users and databases log in in turn through a transaction-mode
/// listener (each leaves a pool with an idle connection) against a server that takes
/// 30 connections: none is refused, and Sluice never holds more than the server allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_users_and_databases_share_the_servers_connections() {
    let pg = small_server();
    let mut sql = String::new();
    for i in 0..190 {
        sql.push_str(&format!("create role u{i} login password 'pw{i}';"));
    }
    pg.psql("postgres", &sql).unwrap();
    for i in 0..10 {
        pg.create_database(&format!("db{i}"), APP_USER).unwrap();
    }
    let h = sluice(&config_text(&pg, 4, "5s", "")).await;
    let a = addr(&h, "tx");
    let admin = superuser(addr(&h, "session"), &pg, "postgres").await;
    for i in 0..200 {
        let (user, pw, db) = if i < 190 {
            (format!("u{i}"), format!("pw{i}"), "app".to_owned())
        } else {
            (
                APP_USER.to_owned(),
                APP_PW.to_owned(),
                format!("db{}", i - 190),
            )
        };
        let c = connect(a, &user, &pw, &db)
            .await
            .unwrap_or_else(|e| panic!("login {i} ({user} on {db}) refused: {e:?}"));
        let n: i32 = c.query_one("select 1", &[]).await.unwrap().get(0);
        assert_eq!(n, 1);
    }
    let open: i64 = admin
        .query_one(
            "select count(*) from pg_stat_activity where backend_type = 'client backend'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // 30 less the 3 reserved for superusers, less a tenth; the admin's own included.
    assert!(open <= 25, "{open} server connections");
}

/// At a configured cap with every connection in use, a client waits up to the pool's
/// wait timeout and then gets 53300 naming the server; once one is free it goes on.
/// (Configured users: with pass-through auth a login itself needs a server connection.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_clients_wait_then_hear_which_server() {
    let pg = pg();
    let text = config_text(&pg, 4, "1s", "").replace(
        "[servers.pg]\n",
        "[servers.pg]\nmax_server_connections = 2\n",
    );
    let h = sluice(&text).await;
    let a = addr(&h, "txauth");
    let c = app(a).await;
    let holders = [app(a).await, app(a).await];
    for h in &holders {
        h.batch_execute("begin; select 1").await.unwrap();
    }
    let started = std::time::Instant::now();
    let e = c.simple_query("select 2").await.unwrap_err();
    assert_eq!(sqlstate(&e), "53300", "{e}");
    let msg = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(msg.contains("server \"pg\""), "{msg}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    holders[0].batch_execute("commit").await.unwrap();
    let rows = c.simple_query("select 3").await.unwrap();
    assert!(!rows.is_empty());
}
