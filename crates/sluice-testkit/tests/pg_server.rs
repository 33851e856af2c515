//! Integration tests for the throwaway PostgreSQL servers: two servers started
//! in parallel, psql against each, users and databases, every auth method,
//! TLS with the throwaway CA, and kill / stop / restart.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use sluice_testkit::{PgAuth, PgOptions, PgServer, free_port};

/// Connects with the psql binary as `user` over TCP with `sslmode`.
fn psql_as(
    server: &PgServer,
    user: &str,
    password: &str,
    db: &str,
    sslmode: &str,
    sql: &str,
) -> std::process::Output {
    let mut cmd = Command::new("psql");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    if let Some(ca) = server.tls_ca_pem() {
        cmd.env("PGSSLROOTCERT", ca);
    }
    cmd.args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", server.host(), "-p", &server.port().to_string()])
        .args(["-U", user, "-d", db, "-c", sql])
        .env("PGPASSWORD", password)
        .env("PGSSLMODE", sslmode)
        .output()
        .unwrap()
}

fn ok_stdout(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn free_ports_are_distinct() {
    let ports: HashSet<u16> = (0..50).map(|_| free_port()).collect();
    assert_eq!(ports.len(), 50);
}

#[test]
fn two_servers_in_parallel_kill_and_restart() {
    let t = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(PgServer::start);
        let b = s.spawn(PgServer::start);
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    eprintln!("two servers started in {:?}", t.elapsed());
    assert_ne!(a.port(), b.port());
    assert_ne!(a.data_dir(), b.data_dir());

    for server in [&a, &b] {
        assert_eq!(server.psql("postgres", "select 1").unwrap().trim(), "1");
        assert_eq!(
            server
                .psql("test", "select current_database()")
                .unwrap()
                .trim(),
            "test"
        );
        let port = server.psql("postgres", "show port").unwrap();
        assert_eq!(port.trim(), server.port().to_string());
    }

    let mut a = a;
    a.create_user("alice", "alice's pw").unwrap();
    a.create_database("alicedb", "alice").unwrap();
    let out = psql_as(
        &a,
        "alice",
        "alice's pw",
        "alicedb",
        "require",
        "select current_user, ssl from pg_stat_ssl where pid = pg_backend_pid()",
    );
    assert_eq!(ok_stdout(out), "alice|t");
    let stored = a
        .psql(
            "postgres",
            "select left(rolpassword, 14) from pg_authid where rolname = 'alice'",
        )
        .unwrap();
    assert_eq!(stored.trim(), "SCRAM-SHA-256$");
    // Wrong password is refused.
    let out = psql_as(&a, "alice", "nope", "alicedb", "require", "select 1");
    assert!(!out.status.success());

    // Crash A; B is unaffected; A comes back with its data.
    a.psql("test", "create table t (x int); insert into t values (42);")
        .unwrap();
    let old_pid = a.pid().unwrap();
    a.kill();
    assert_eq!(a.pid(), None);
    assert!(a.psql("postgres", "select 1").is_err());
    assert_eq!(b.psql("postgres", "select 2").unwrap().trim(), "2");
    let t = Instant::now();
    a.restart().unwrap();
    eprintln!("restart after kill took {:?}", t.elapsed());
    assert_ne!(a.pid(), Some(old_pid));
    assert_eq!(a.psql("test", "select x from t").unwrap().trim(), "42");
    let out = psql_as(
        &a,
        "alice",
        "alice's pw",
        "alicedb",
        "verify-full",
        "select 1",
    );
    assert_eq!(ok_stdout(out), "1");

    // Clean stop and restart, too.
    a.stop();
    assert_eq!(a.pid(), None);
    a.restart().unwrap();
    assert_eq!(
        a.psql("test", "select count(*) from t").unwrap().trim(),
        "1"
    );

    let dir = a.data_dir().parent().unwrap().to_path_buf();
    drop(a);
    assert!(!dir.exists(), "temp dir {} not removed", dir.display());
}

fn check_auth(auth: PgAuth, tls: bool, expected_prefix: &str) {
    let server = PgServer::start_with(PgOptions {
        tls,
        auth,
        extra_conf: vec!["work_mem = '7MB'".to_string()],
    })
    .unwrap();
    assert_eq!(server.tls_ca_pem().is_some(), tls);
    assert_eq!(
        server.psql("postgres", "show ssl").unwrap().trim(),
        if tls { "on" } else { "off" }
    );
    server.create_user("bob", "bob-pw").unwrap();
    let stored = server
        .psql("postgres", "select rolpassword from pg_authid where rolname in ('bob', 'postgres') order by rolname")
        .unwrap();
    for line in stored.lines() {
        assert!(line.starts_with(expected_prefix), "{auth:?}: stored {line}");
    }
    let sslmode = if tls { "verify-full" } else { "disable" };
    let out = psql_as(
        &server,
        "bob",
        "bob-pw",
        "test",
        sslmode,
        "select current_user",
    );
    assert_eq!(ok_stdout(out), "bob");
    let out = psql_as(&server, "bob", "wrong", "test", sslmode, "select 1");
    assert_eq!(out.status.success(), auth == PgAuth::Trust, "{auth:?}");
    let hba = std::fs::read_to_string(server.data_dir().join("pg_hba.conf")).unwrap();
    assert!(hba.contains(match auth {
        PgAuth::Scram => "scram-sha-256",
        PgAuth::Md5 => "md5",
        PgAuth::Password => "password",
        PgAuth::Trust => "127.0.0.1/32 trust",
    }));
    assert_eq!(
        server.psql("postgres", "show work_mem").unwrap().trim(),
        "7MB"
    );
}

#[test]
fn md5_without_tls() {
    check_auth(PgAuth::Md5, false, "md5");
}

#[test]
fn cleartext_password() {
    check_auth(PgAuth::Password, true, "SCRAM-SHA-256$");
}

#[test]
fn trust() {
    check_auth(PgAuth::Trust, false, "SCRAM-SHA-256$");
}

#[test]
fn psql_errors_are_reported() {
    let server = PgServer::start_with(PgOptions {
        tls: false,
        ..PgOptions::default()
    })
    .unwrap();
    let err = server
        .psql(
            "postgres",
            "select 1; select * from no_such_table; select 3;",
        )
        .unwrap_err();
    assert!(format!("{err:#}").contains("no_such_table"), "{err:#}");
    let rows = server
        .psql(
            "postgres",
            "select 'a', 1 union all select 'b', 2 order by 1",
        )
        .unwrap();
    assert_eq!(rows, "a|1\nb|2\n");
    assert!(Path::new(server.log_path()).exists());
}

#[test]
fn server_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PgServer>();
}
