//! COM_CHANGE_USER: with configured users Sluice logs the client in again itself and
//! moves it to the new user's pool; with pass-through auth the server checks it, and
//! the connection, logged in as another user, never goes back to the old user's pool.

use crate::common;

use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::*;
use mysql_async::{ChangeUserOpts, Conn};
use std::time::Duration;

fn as_user(user: &str, pw: &str) -> ChangeUserOpts {
    ChangeUserOpts::default()
        .with_user(Some(user.into()))
        .with_pass(Some(pw.into()))
}

async fn current_user(c: &mut Conn) -> String {
    let who: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
    who.unwrap_or_default()
}

#[tokio::test]
async fn passthrough_change_user_keeps_the_connection_from_the_old_pool() {
    let db = mariadb();
    db.create_user("second", "second-pw", "mysql_native_password")
        .unwrap();
    // One pooled connection: without care, the changed one would be the next client's.
    let h = sluice(&config_text(&db, 1, "2s", "")).await;
    let a = addr(&h, "tx");
    let mut m = connect(a).await;
    m.change_user(as_user("second", "second-pw")).await.unwrap();
    assert_eq!(current_user(&mut m).await, "second@%");
    // A reset keeps the user, so the client keeps its connection.
    m.reset().await.unwrap();
    for _ in 0..3 {
        assert_eq!(current_user(&mut m).await, "second@%");
    }
    m.disconnect().await.unwrap();
    for _ in 0..3 {
        let mut c = connect(a).await;
        for _ in 0..3 {
            assert_eq!(current_user(&mut c).await, "app@%");
        }
        c.disconnect().await.unwrap();
    }
    h.shutdown(Duration::from_secs(5)).await;
}

fn users_config(db: &sluice_testkit::MariaDbServer, pool_size: usize) -> String {
    let users = format!(
        r#"
[users.app]
password = "{APP_PW}"

[users.second]
password = "front-2"
server_user = "second"
server_password = "second-pw"

[users.limited]
password = "limited-pw"
server_user = "app"
server_password = "{APP_PW}"
databases = ["test"]
"#
    );
    let extra = own_auth_listeners("") + &users;
    config_text(db, pool_size, "2s", &extra)
}

#[tokio::test]
async fn configured_users_are_logged_in_again_by_sluice() {
    let db = mariadb();
    db.create_user("second", "second-pw", "mysql_native_password")
        .unwrap();
    let h = sluice(&users_config(&db, 2)).await;
    for listener in ["native", "sha2"] {
        let a = addr(&h, listener);
        let mut c = Conn::new(opts(a, APP_USER, APP_PW, Some("test")))
            .await
            .unwrap();
        c.query_drop("SET SESSION wait_timeout = 1234")
            .await
            .unwrap();
        c.change_user(as_user("second", "front-2")).await.unwrap();
        assert_eq!(current_user(&mut c).await, "second@%", "{listener}");
        // The session starts clean, as on a server.
        let wt: Option<u64> = c.query_first("SELECT @@wait_timeout").await.unwrap();
        assert_ne!(wt, Some(1234), "{listener}");
        c.change_user(as_user(APP_USER, APP_PW)).await.unwrap();
        assert_eq!(current_user(&mut c).await, "app@%", "{listener}");
        c.disconnect().await.unwrap();
    }
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn refused_change_user_keeps_the_old_user() {
    let db = mariadb();
    db.create_user("second", "second-pw", "mysql_native_password")
        .unwrap();
    let h = sluice(&users_config(&db, 2)).await;
    let a = addr(&h, "native");
    let mut c = RawMy::login(a, APP_USER, APP_PW).await;
    // Wrong password: 1045, and the session goes on as the old user.
    let err = c.change_user("second", "wrong", "test").await;
    assert_eq!(err[0], 0xff, "{err:?}");
    assert_eq!(u16::from_le_bytes([err[1], err[2]]), 1045);
    assert!(String::from_utf8_lossy(&err).contains("28000"));
    let who = c.query_value("SELECT CURRENT_USER()").await;
    assert_eq!(who.as_deref(), Some("app@%"));
    // A database the user may not use: 1044.
    let err = c.change_user("limited", "limited-pw", "mysql").await;
    assert_eq!(u16::from_le_bytes([err[1], err[2]]), 1044, "{err:?}");
    // A malformed command: 1835, and the session still answers.
    c.send(0, &[0x11, b'x']).await;
    let (_, code, _) = c.read_err().await;
    assert_eq!(code, 1835);
    assert!(c.ping_ok().await);
    let ok = c.change_user("limited", "limited-pw", "test").await;
    assert_eq!(ok[0], 0, "{ok:?}");
    let db_now = c.query_value("SELECT DATABASE()").await;
    assert_eq!(db_now.as_deref(), Some("test"));
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_change_to_the_same_user_resets_the_connection_in_place() {
    let db = mariadb();
    // Session mode with a pool of one: the connection held is the only one.
    let h = sluice(&users_config(&db, 1)).await;
    let a = addr(&h, "sha2");
    let mut c = Conn::new(opts(a, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap();
    c.query_drop("SET @x = 5").await.unwrap();
    // Leasing a second connection would time out (and refuse the change).
    c.change_user(as_user(APP_USER, APP_PW)).await.unwrap();
    let x: Option<Option<i64>> = c.query_first("SELECT @x").await.unwrap();
    assert_eq!(x, Some(None), "the session was reset");
    c.disconnect().await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}
