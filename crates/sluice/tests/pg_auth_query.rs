//! Pass-through listeners with `auth_user`: roles created on the server (never in
//! Sluice's configuration) log in with SCRAM-SHA-256 and md5, checked by Sluice against
//! what `auth_query` finds in pg_authid; wrong passwords and unknown roles get 28P01;
//! the pools of such users open connections by themselves, so a split route sends their
//! reads to a replica and writes to the primary, and transaction-mode sessions follow a
//! promotion without reconnecting.

use crate::common;

use common::{addr, connect, sluice, sqlstate};
use sluice_testkit::{PgAuth, PgOptions, PgServer};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A server whose pg_hba says md5: roles with a SCRAM verifier do SCRAM, roles with an
/// md5 hash do md5.
fn server() -> PgServer {
    PgServer::start_with(PgOptions {
        auth: PgAuth::Md5,
        ..PgOptions::default()
    })
    .expect("start PostgreSQL")
}

/// Creates `name` with `password` stored as `encryption` ("scram-sha-256" or "md5"),
/// and lets it create tables in database postgres.
fn create_role(pg: &PgServer, name: &str, password: &str, encryption: &str, extra: &str) {
    pg.psql(
        "postgres",
        &format!(
            "SET password_encryption = '{encryption}';\n\
             CREATE ROLE {name} LOGIN PASSWORD '{password}' {extra};\n\
             GRANT ALL ON SCHEMA public TO {name};\n"
        ),
    )
    .expect("create role");
}

/// The roles every test uses: one SCRAM, one md5.
const ROLES: [(&str, &str, &str); 2] = [
    ("scram_user", "scram-pw", "scram-sha-256"),
    ("md5_user", "md5-pw", "md5"),
];

/// Listeners over `cluster` with the server's superuser as auth_user: `lookup`
/// (session mode) and `lookup_tx` (transaction mode).
fn listeners(pw: &str, cluster: &str) -> String {
    format!(
        r#"
[pools.tx]
mode = "transaction"
size = 4
wait_timeout = "2s"

[pools.lookup_session]
mode = "session"
size = 4
wait_timeout = "2s"

[users.postgres]
password = "{pw}"

[listeners.lookup]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "{cluster}"
pool = "lookup_session"
auth_user = "postgres"

[listeners.lookup_tx]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "{cluster}"
pool = "tx"
auth_user = "postgres"
"#
    )
}

fn single_config(pg: &PgServer) -> String {
    format!(
        "[servers.pg]\nprotocol = \"postgres\"\nhost = \"127.0.0.1\"\nport = {}\n\
         [clusters.pg]\nservers = [\"pg\"]\n{}",
        pg.port(),
        listeners(pg.password(), "pg")
    )
}

async fn one_int(c: &tokio_postgres::Client, sql: &str) -> Result<i32, tokio_postgres::Error> {
    Ok(c.query_one(sql, &[]).await?.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_roles_log_in_with_scram_and_md5() {
    let pg = server();
    for (name, pw, enc) in ROLES {
        create_role(&pg, name, pw, enc, "");
    }
    create_role(
        &pg,
        "expired",
        "old-pw",
        "scram-sha-256",
        "VALID UNTIL '2000-01-01'",
    );
    pg.psql("postgres", "CREATE ROLE nologin PASSWORD 'nl-pw' NOLOGIN;")
        .unwrap();
    let stored = pg
        .psql(
            "postgres",
            "SELECT rolname || ' ' || left(rolpassword, 3) FROM pg_authid \
             WHERE rolname IN ('scram_user', 'md5_user') ORDER BY 1",
        )
        .unwrap();
    assert_eq!(
        stored.trim(),
        "md5_user md5\nscram_user SCR",
        "both forms stored"
    );
    let h = sluice(&single_config(&pg)).await;
    for listener in ["lookup", "lookup_tx"] {
        let a = addr(&h, listener);
        for (name, pw, _) in ROLES {
            let c = connect(a, name, pw, "postgres")
                .await
                .unwrap_or_else(|e| panic!("{name} through {listener}: {e}"));
            let row = c.query_one("select current_user::text", &[]).await.unwrap();
            assert_eq!(row.get::<_, String>(0), name);
            let e = connect(a, name, "wrong", "postgres").await.unwrap_err();
            assert_eq!(sqlstate(&e), "28P01", "{name}: {e}");
        }
        // No such role, an expired password, a role that may not log in: all refused
        // like a wrong password.
        for (name, pw) in [("ghost", "x"), ("expired", "old-pw"), ("nologin", "nl-pw")] {
            let e = connect(a, name, pw, "postgres").await.unwrap_err();
            assert_eq!(sqlstate(&e), "28P01", "{name}: {e}");
            let msg = e.as_db_error().map(|d| d.message().to_owned());
            assert_eq!(
                msg.as_deref(),
                Some(format!("password authentication failed for user \"{name}\"").as_str())
            );
        }
        // The auth user itself is a configured user: checked from the configuration.
        let c = connect(a, "postgres", pg.password(), "postgres")
            .await
            .unwrap();
        assert_eq!(one_int(&c, "select 1").await.unwrap(), 1);
    }
    // Sluice logged in itself: a session-mode connection goes back to the pool and the
    // next client of the same role gets it (a pass-through login would open a new one
    // and close it at the end).
    let a = addr(&h, "lookup");
    for (name, pw, _) in ROLES {
        let c = connect(a, name, pw, "postgres").await.unwrap();
        let first = one_int(&c, "select pg_backend_pid()").await.unwrap();
        drop(c);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let c = connect(a, name, pw, "postgres").await.unwrap();
        let second = one_int(&c, "select pg_backend_pid()").await.unwrap();
        assert_eq!(first, second, "{name}: the pooled connection was reused");
    }
    // Transaction mode: two sessions of one role in transactions at once; the pool
    // opened the second connection itself.
    let a = addr(&h, "lookup_tx");
    let (name, pw, _) = ROLES[1];
    let c1 = connect(a, name, pw, "postgres").await.unwrap();
    let c2 = connect(a, name, pw, "postgres").await.unwrap();
    c1.batch_execute("begin").await.unwrap();
    c2.batch_execute("begin").await.unwrap();
    let p1 = one_int(&c1, "select pg_backend_pid()").await.unwrap();
    let p2 = one_int(&c2, "select pg_backend_pid()").await.unwrap();
    assert_ne!(p1, p2);
    drop(h);
}

/// `round-robin` routes over a primary and its replica, with the listeners above and a
/// `split` listener for pass-through users.
fn routes_config(primary: &PgServer, replica: &PgServer) -> String {
    let pw = primary.password();
    let mut text = common::routes_config(
        "postgres",
        &[("p", primary.port()), ("r", replica.port())],
        ("postgres", pw),
        "10s",
        "round-robin",
    );
    text.push_str(&listeners(pw, "main"));
    text.push_str(
        "[listeners.split]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:0\"\n\
         cluster = \"main\"\npool = \"tx\"\nroute = \"split\"\nauth_user = \"postgres\"\n",
    );
    text
}

/// Waits until the health checker has found the primary (a read-write login works).
async fn primary_found(a: SocketAddr, pw: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while connect(a, "postgres", pw, "postgres").await.is_err() {
        assert!(Instant::now() < deadline, "no primary found");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_reads_on_the_replica_and_sessions_follow_a_promotion() {
    let mut primary = server();
    for (name, pw, enc) in ROLES {
        create_role(&primary, name, pw, enc, "");
    }
    let replica = primary.start_replica().expect("replica");
    replica.wait_caught_up(&primary).unwrap();
    let h = sluice(&routes_config(&primary, &replica)).await;
    primary_found(addr(&h, "rw"), primary.password()).await;

    // Split: a read on the replica (it is in recovery), writes on the primary (the
    // replica would refuse them).
    for (name, pw, _) in ROLES {
        let c = connect(addr(&h, "split"), name, pw, "postgres")
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let row = c
            .query_one("select pg_is_in_recovery()", &[])
            .await
            .unwrap();
        assert!(row.get::<_, bool>(0), "{name}: a read goes to the replica");
        let sql = format!("create table t_{name} (n int); insert into t_{name} values (1)");
        c.batch_execute(&sql).await.unwrap();
        let row = c
            .query_one("/* sluice:primary */ select pg_is_in_recovery()", &[])
            .await
            .unwrap();
        assert!(!row.get::<_, bool>(0), "{name}: the primary");
        let sql = format!("select count(*)::int from t_{name}");
        assert_eq!(one_int(&c, &sql).await.unwrap(), 1, "reads its own write");
    }

    // Transaction mode on the read-write route: sessions that stay connected through a
    // failover reach the new primary.
    let mut sessions = Vec::new();
    for (name, pw, _) in ROLES {
        let c = connect(addr(&h, "lookup_tx"), name, pw, "postgres")
            .await
            .unwrap();
        let port = one_int(&c, "select inet_server_port()").await.unwrap();
        assert_eq!(port, i32::from(primary.port()));
        sessions.push((name, c));
    }
    replica.wait_caught_up(&primary).unwrap();
    primary.kill();
    replica.promote().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    for (name, c) in &sessions {
        loop {
            match one_int(c, "select inet_server_port()").await {
                Ok(p) if p == i32::from(replica.port()) => break,
                // Before the checker saw the promotion: an error, the session goes on.
                Ok(_) | Err(_) => {}
            }
            assert!(
                Instant::now() < deadline,
                "{name}: the session never reached the new primary"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sql = format!("insert into t_{name} values (2)");
        c.batch_execute(&sql).await.unwrap();
    }
    drop(h);
}
