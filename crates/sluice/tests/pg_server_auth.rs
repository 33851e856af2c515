//! Sluice logging in to servers with each method a server may ask for (SCRAM-SHA-256 is
//! covered everywhere else: md5, cleartext and trust here), and cancel in transaction
//! mode reaching the connection the client holds.

use crate::common;
use common::*;
use sluice_testkit::{PgAuth, PgOptions, PgServer};
use std::time::Duration;

fn server(auth: PgAuth) -> PgServer {
    let pg = PgServer::start_with(PgOptions {
        auth,
        ..PgOptions::default()
    })
    .unwrap();
    pg.create_user(APP_USER, APP_PW).unwrap();
    pg.create_database("app", APP_USER).unwrap();
    pg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_in_with_md5_cleartext_and_trust() {
    for auth in [PgAuth::Md5, PgAuth::Password, PgAuth::Trust] {
        let pg = server(auth);
        let h = sluice(&config_text(&pg, 2, "5s", "")).await;
        // Configured users: Sluice answers the server's request itself.
        let c = app(addr(&h, "txauth")).await;
        assert_eq!(
            c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
            1
        );
        // Pass-through: the client answers it.
        let c = app(addr(&h, "session")).await;
        assert_eq!(
            c.query_one("select 2", &[]).await.unwrap().get::<_, i32>(0),
            2
        );
        if !matches!(auth, PgAuth::Trust) {
            let e = connect(addr(&h, "session"), APP_USER, "wrong", "app")
                .await
                .unwrap_err();
            assert_eq!(sqlstate(&e), "28P01");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_in_transaction_mode() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let a = addr(&h, "txauth");
    let c = app(a).await;
    let other = app(a).await;
    let token = c.cancel_token();
    // Nothing running: a cancel is harmless. (The server's postmaster signals the idle
    // backend after answering: give the signal time to land before the next query, or
    // PostgreSQL itself may apply it to that query, through Sluice or not.)
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
    let sleeper = tokio::spawn(async move { c.simple_query("select pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another client's statement on the other connection is not touched.
    let busy = tokio::spawn(async move { other.simple_query("select pg_sleep(1)").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let e = sleeper.await.unwrap().unwrap_err();
    assert_eq!(sqlstate(&e), "57014");
    busy.await.unwrap().unwrap();
}

/// A configured user whose `server_password` is an md5 hash (as in pg_authid) logs in to
/// a server that asks for md5, without Sluice knowing the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_server_password_logs_in() {
    let pg = server(PgAuth::Md5);
    let hash = postgres_protocol::password::md5(APP_PW.as_bytes(), APP_USER);
    let extra = format!(
        "[users.hashed]\npassword = \"client-pw\"\nserver_user = \"{APP_USER}\"\n\
         server_password = \"{hash}\"\n\
         [listeners.hashed]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:0\"\n\
         cluster = \"pg\"\npool = \"session\"\nauth = \"scram-sha-256\"\n"
    );
    let h = sluice(&config_text(&pg, 2, "5s", &extra)).await;
    let c = connect(addr(&h, "hashed"), "hashed", "client-pw", "app")
        .await
        .unwrap();
    let row = c.query_one("select current_user::text", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), APP_USER);
}
