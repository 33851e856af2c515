//! TLS on both sides (psql with sslmode=require towards Sluice, verify-full towards the
//! server), refusal of bytes sent before the TLS handshake, and the graceful drain.

use crate::common;
use common::*;
use std::process::Command;
use std::time::Duration;

fn psql(port: u16, sslmode: &str, sql: &str) -> (bool, String) {
    run_text(
        Command::new("psql")
            .args([
                "-X",
                "-A",
                "-t",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                APP_USER,
                "-d",
                "app",
                "-c",
                sql,
            ])
            .env("PGPASSWORD", APP_PW)
            .env("PGSSLMODE", sslmode),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_both_sides() {
    let pg = pg();
    let dir = tempfile::tempdir().unwrap();
    let (_ca, cert, key) = sluice_testkit::tls_files(dir.path()).unwrap();
    let server_ca = pg.tls_ca_pem().unwrap().display().to_string();
    let extra = format!(
        r#"
[servers.pgtls]
protocol = "postgres"
host = "127.0.0.1"
port = {port}
tls = "verify-full"
tls_ca_file = "{server_ca}"

[clusters.pgtls]
servers = ["pgtls"]

[listeners.secure]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pgtls"
pool = "tx"
auth = "scram-sha-256"
tls = "require"
tls_cert_file = "{cert}"
tls_key_file = "{key}"
"#,
        port = pg.port(),
        cert = cert.display(),
        key = key.display(),
    );
    let h = sluice(&config_text(&pg, 2, "5s", &extra)).await;
    let port = addr(&h, "secure").port();
    let (ok, out) = tokio::task::spawn_blocking(move || {
        psql(
            port,
            "require",
            "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
        )
    })
    .await
    .unwrap();
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "t", "Sluice reaches the server over TLS");
    let (ok, out) = tokio::task::spawn_blocking(move || psql(port, "disable", "select 1"))
        .await
        .unwrap();
    assert!(!ok);
    assert!(out.contains("SSL connection is required"), "{out}");

    // SSLRequest followed by plaintext bytes in the same packet: refused.
    let mut raw = Raw::connect(addr(&h, "secure")).await;
    let mut bytes = vec![0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    bytes.extend_from_slice(&[0, 0, 0, 8, 0, 3, 0, 0]);
    raw.send(&bytes).await;
    let (tag, body) = raw.frame().await.unwrap();
    assert_eq!((tag, error_code(&body).as_str()), (b'E', "08P01"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_transactions_finish() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let a = addr(&h, "txauth");
    let busy = app(a).await;
    let idle = app(a).await;
    busy.batch_execute("create table t(a int); begin; insert into t values (1)")
        .await
        .unwrap();
    h.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The idle client has been told to go; new clients are not accepted.
    assert!(idle.query_one("select 1", &[]).await.is_err());
    assert!(connect(a, APP_USER, APP_PW, "app").await.is_err());
    // The transaction in flight can finish.
    busy.batch_execute("insert into t values (2)")
        .await
        .unwrap();
    busy.batch_execute("commit").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        busy.query_one("select 1", &[]).await.is_err(),
        "closed once between transactions"
    );
    tokio::time::timeout(Duration::from_secs(10), h.shutdown(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(
        pg.psql("app", "select count(*) from t").unwrap().trim(),
        "2"
    );
}
