//! Configured users on MySQL listeners: Sluice checks mysql_native_password and
//! caching_sha2_password itself (plaintext or hashed secrets; caching_sha2's full
//! authentication over plain TCP with the RSA key exchange and over TLS, then its fast
//! path), and logs in to the server with the user's server credentials.

use crate::common;

use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};
use std::time::Duration;

fn config(db: &sluice_testkit::MariaDbServer, tls_extra: &str) -> String {
    let users = format!(
        r#"
[users.app]
password = "{APP_PW}"

[users.hashed]
password = "*82F6F216C3AE6603CE11A74A610A147868802CA5"
server_user = "app"
server_password = "{APP_PW}"
databases = ["test"]

[users.eduser]
password = "ed-front"
server_user = "edu"
server_password = "ed-pw"

[users.shauser]
password = "sha2:8b6bbb796eab3e025ee6a97d966cf50ddf6676205f30810f814bf1423be8346e"
server_user = "app"
server_password = "{APP_PW}"
"#
    );
    let extra = own_auth_listeners(tls_extra) + &users;
    config_text(db, 4, "2s", &extra)
}

async fn server_code(o: OptsBuilder) -> u16 {
    match Conn::new(o).await {
        Err(mysql_async::Error::Server(e)) => e.code,
        Err(e) => panic!("expected a server error, got {e}"),
        Ok(_) => panic!("login should have failed"),
    }
}

#[tokio::test]
async fn native_password_users() {
    let db = mariadb();
    let h = sluice(&config(&db, "")).await;
    let a = addr(&h, "native");
    let mut c = connect(a).await;
    let who: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(who.as_deref(), Some("app@%"));
    c.disconnect().await.unwrap();
    // A hashed secret; Sluice logs in to the server as `app`.
    let mut c = Conn::new(opts(a, "hashed", "hashed-pw", Some("test")))
        .await
        .unwrap();
    let who: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(who.as_deref(), Some("app@%"));
    c.disconnect().await.unwrap();
    assert_eq!(
        server_code(opts(a, "hashed", "wrong", Some("test"))).await,
        1045
    );
    assert_eq!(
        server_code(opts(a, "nobody", "x", Some("test"))).await,
        1045
    );
    // Not one of the user's databases; a database the server does not have.
    assert_eq!(
        server_code(opts(a, "hashed", "hashed-pw", Some("mysql"))).await,
        1044
    );
    assert_eq!(
        server_code(opts(a, APP_USER, APP_PW, Some("no_such_db"))).await,
        1049
    );
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn caching_sha2_full_then_fast() {
    let db = mariadb();
    let h = sluice(&config(&db, "")).await;
    let a = addr(&h, "sha2");
    // First login: full authentication with the RSA key exchange (no TLS).
    for _ in 0..2 {
        let mut c = Conn::new(opts(a, "shauser", "sha2-pw", Some("test")))
            .await
            .unwrap();
        let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
        assert_eq!(one, Some(1));
        c.disconnect().await.unwrap();
    }
    assert_eq!(
        server_code(opts(a, "shauser", "nope", Some("test"))).await,
        1045
    );
    // Plaintext secrets work with caching_sha2 too.
    let mut c = connect(a).await;
    c.ping().await.unwrap();
    c.disconnect().await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn caching_sha2_full_authentication_over_tls() {
    let db = mariadb();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = sluice_testkit::tls_files(dir.path()).unwrap();
    let tls = format!(
        "tls = \"require\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let h = sluice(&config(&db, &tls)).await;
    let a = addr(&h, "sha2");
    let o = opts(a, "shauser", "sha2-pw", Some("test")).ssl_opts(Some(tls_opts(&ca)));
    let mut c = Conn::new(o).await.unwrap();
    let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    c.disconnect().await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn sluice_logs_in_to_ed25519_server_users() {
    let db = mariadb();
    db.create_user("edu", "ed-pw", "ed25519").unwrap();
    let h = sluice(&config(&db, "")).await;
    let a = addr(&h, "native");
    let mut c = Conn::new(opts(a, "eduser", "ed-front", Some("test")))
        .await
        .unwrap();
    let who: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(who.as_deref(), Some("edu@%"));
    c.disconnect().await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}
