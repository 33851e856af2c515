//! Real command-line clients through Sluice: a psql script whose output must match the
//! same script run directly, and pgbench in transaction mode with more clients than
//! pooled server connections.

use crate::common;
use common::*;
use std::net::SocketAddr;
use std::process::Command;

fn bin(name: &str) -> String {
    for dir in [
        "/usr/lib/postgresql/15/bin",
        "/usr/lib/postgresql/16/bin",
        "/usr/lib/postgresql/17/bin",
    ] {
        let p = format!("{dir}/{name}");
        if std::path::Path::new(&p).exists() {
            return p;
        }
    }
    name.to_owned()
}

fn run_psql(port: u16, db: &str, script: &str) -> String {
    let out = Command::new(bin("psql"))
        .args([
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            APP_USER,
            "-d",
            db,
            "-f",
            script,
        ])
        .env("PGPASSWORD", APP_PW)
        .env("PGSSLMODE", "disable")
        .output()
        .expect("run psql");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str("--- stderr ---\n");
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

fn mask_pid(s: &str) -> String {
    s.lines()
        .map(|l| match l.find("server process with PID ") {
            Some(i) => format!("{}PID n.", &l[..i]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn fresh_db(pg: &sluice_testkit::PgServer, name: &str) {
    pg.create_database(name, APP_USER).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_script_output_matches_direct() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "10s", "")).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sql/script.sql");
    fresh_db(&pg, "direct");
    let direct = tokio::task::spawn_blocking({
        let port = pg.port();
        move || run_psql(port, "direct", script)
    })
    .await
    .unwrap();
    assert!(direct.contains("hello from plpgsql 42"), "{direct}");
    assert!(direct.contains("division by zero"));
    for (i, listener) in ["session", "tx", "txauth"].iter().enumerate() {
        let db = format!("via{i}");
        fresh_db(&pg, &db);
        let port = addr(&h, listener).port();
        let got = tokio::task::spawn_blocking(move || run_psql(port, &db, script))
            .await
            .unwrap();
        // psql names the database in a few messages, and the NOTIFY sender pid differs;
        // nothing else may.
        assert_eq!(
            mask_pid(&got.replace(&format!("via{i}"), "direct")),
            mask_pid(&direct),
            "listener {listener}"
        );
    }
}

fn pgbench(a: SocketAddr, args: &[&str]) -> String {
    let out = Command::new(bin("pgbench"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &a.port().to_string(),
            "-U",
            APP_USER,
        ])
        .args(args)
        .arg("app")
        .env("PGPASSWORD", APP_PW)
        .env("PGSSLMODE", "disable")
        .output()
        .expect("run pgbench");
    let s = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pgbench {args:?} failed:\n{s}");
    s
}

fn processed(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|l| l.split('/').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no processed count in:\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_in_transaction_mode() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 3, "30s", "")).await;
    let direct: SocketAddr = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
    tokio::task::spawn_blocking(move || pgbench(direct, &["-i", "-q", "-s", "1"]))
        .await
        .unwrap();
    for listener in ["txauth", "tx"] {
        let a = addr(&h, listener);
        for mode in ["simple", "extended", "prepared"] {
            for script in [&["-S"][..], &[][..]] {
                let before: i64 = pg
                    .psql("app", "select count(*) from pgbench_history")
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                // One thread per client: pgbench prepares statements with a blocking call
                // that would stall the other clients of its thread, some of which hold
                // pooled connections in open transactions.
                let mut args = vec!["-n", "-c", "10", "-j", "10", "-t", "30", "-M", mode];
                args.extend_from_slice(script);
                let out = tokio::task::spawn_blocking(move || pgbench(a, &args))
                    .await
                    .unwrap();
                assert_eq!(processed(&out), 300, "{listener} {mode} {script:?}:\n{out}");
                assert!(!out.contains("number of failed transactions: 1"), "{out}");
                let after: i64 = pg
                    .psql("app", "select count(*) from pgbench_history")
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                let expected = if script.is_empty() { 300 } else { 0 };
                assert_eq!(
                    after - before,
                    expected,
                    "every TPC-B transaction wrote its history row"
                );
            }
        }
    }
    let conns = app_backends(&pg);
    assert!(conns <= 6, "two pools of at most 3: {conns}");
}
