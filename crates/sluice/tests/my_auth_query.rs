//! MySQL/MariaDB pass-through listeners with `auth_user`: accounts created on the server
//! (never in Sluice's configuration) log in, checked by Sluice against the
//! mysql_native_password hash `auth_query` finds in mysql.user; wrong passwords and
//! unknown users get 1045, accounts of other plugins a 1045 naming the plugin; the
//! pools of such users open connections by themselves with the key the client's reply
//! yields, so a split route sends their reads to a replica and writes to the primary,
//! and transaction-mode sessions follow a promotion without reconnecting.

use crate::common;

use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::Queryable;
use sluice_testkit::MariaDbServer;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const USER: &str = "native_user";
const PW: &str = "native-pw";

/// The auth user and the lookup listeners over `cluster`: `lookup` (session mode) and
/// `lookup_tx` (transaction mode).
fn listeners(cluster: &str) -> String {
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

[users.lookup]
password = "lookup-pw"

[listeners.lookup]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "{cluster}"
pool = "lookup_session"
auth_user = "lookup"

[listeners.lookup_tx]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "{cluster}"
pool = "tx"
auth_user = "lookup"
"#
    )
}

/// The auth user, and a mysql_native_password account that may use database test
/// only (no privilege lets it write on a read_only replica).
fn accounts(db: &MariaDbServer) {
    db.create_user("lookup", "lookup-pw", "mysql_native_password")
        .expect("auth user");
    db.sql(&format!(
        "CREATE USER '{USER}'@'%' IDENTIFIED BY '{PW}';
         GRANT ALL ON test.* TO '{USER}'@'%';
"
    ))
    .expect("account");
}

async fn conn(
    a: SocketAddr,
    user: &str,
    pw: &str,
) -> Result<mysql_async::Conn, mysql_async::Error> {
    mysql_async::Conn::new(opts(a, user, pw, Some("test"))).await
}

fn code(e: &mysql_async::Error) -> u16 {
    match e {
        mysql_async::Error::Server(s) => s.code,
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_accounts_log_in_with_mysql_native_password() {
    let db = mariadb();
    accounts(&db);
    db.create_user("edu", "ed-pw", "ed25519").unwrap();
    let text = format!(
        "[servers.my]\nprotocol = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\
         [clusters.my]\nservers = [\"my\"]\n{}",
        db.port(),
        listeners("my")
    );
    let h = sluice(&text).await;
    for listener in ["lookup", "lookup_tx"] {
        let a = addr(&h, listener);
        let mut c = conn(a, USER, PW)
            .await
            .unwrap_or_else(|e| panic!("{listener}: {e}"));
        let me: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
        assert_eq!(me.as_deref(), Some("native_user@%"));
        c.disconnect().await.unwrap();
        for (user, pw) in [(USER, "wrong"), ("ghost", "x")] {
            let e = conn(a, user, pw).await.unwrap_err();
            assert_eq!(code(&e), 1045, "{user}: {e}");
            assert!(e.to_string().contains("Access denied"), "{e}");
        }
        // An account of another plugin: refused, saying why.
        let e = conn(a, "edu", "ed-pw").await.unwrap_err();
        assert_eq!(code(&e), 1045, "{e}");
        assert!(e.to_string().contains("ed25519"), "{e}");
        // The auth user itself is a configured user.
        let mut c = conn(a, "lookup", "lookup-pw").await.unwrap();
        c.query_drop("SELECT 1").await.unwrap();
        c.disconnect().await.unwrap();
    }
    // Sluice logged in itself: a session-mode connection goes back to the pool and the
    // next client of the account gets it (a pass-through login opens a new one each
    // time).
    let a = addr(&h, "lookup");
    let mut threads = Vec::new();
    for _ in 0..2 {
        let mut c = conn(a, USER, PW).await.unwrap();
        let id: Option<u64> = c.query_first("SELECT @@pseudo_thread_id").await.unwrap();
        threads.push(id);
        c.disconnect().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(threads[0], threads[1], "the pooled connection was reused");
    drop(h);
}

/// COM_CHANGE_USER between accounts of the server, checked by Sluice: the answer made
/// for the login's scramble is checked as a server checks it (Connector/C answers an
/// auth switch with that same answer), the session moves to the new account's pool in
/// transaction mode, and a refused change keeps the old account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_user_between_server_accounts_in_transaction_mode() {
    let db = mariadb();
    accounts(&db);
    db.create_user("other", "other-pw", "mysql_native_password")
        .unwrap();
    let text = format!(
        "[servers.my]\nprotocol = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\
         [clusters.my]\nservers = [\"my\"]\n{}",
        db.port(),
        listeners("my")
    );
    let h = sluice(&text).await;
    let a = addr(&h, "lookup_tx");
    let mut c = RawMy::login(a, USER, PW).await;
    let wrong = c.change_user_as_connector_c("other", "wrong", "test").await;
    assert_eq!(wrong[0], 0xff, "{wrong:?}");
    assert_eq!(u16::from_le_bytes([wrong[1], wrong[2]]), 1045);
    assert_eq!(
        c.query_value("SELECT CURRENT_USER()").await.as_deref(),
        Some("native_user@%"),
        "a refused change keeps the old account"
    );
    let ok = c
        .change_user_as_connector_c("other", "other-pw", "test")
        .await;
    assert_eq!(ok[0], 0, "{ok:?}");
    for _ in 0..3 {
        assert_eq!(
            c.query_value("SELECT CURRENT_USER()").await.as_deref(),
            Some("other@%")
        );
    }
    let e = c.change_user_as_connector_c("ghost", "x", "test").await;
    assert_eq!(u16::from_le_bytes([e[1], e[2]]), 1045, "{e:?}");
    // mysql_async, and back.
    let mut m = conn(a, USER, PW).await.unwrap();
    let to_other = mysql_async::ChangeUserOpts::default()
        .with_user(Some("other".into()))
        .with_pass(Some("other-pw".into()));
    m.change_user(to_other).await.unwrap();
    let me: Option<String> = m.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(me.as_deref(), Some("other@%"));
    let back = mysql_async::ChangeUserOpts::default()
        .with_user(Some(USER.into()))
        .with_pass(Some(PW.into()));
    m.change_user(back).await.unwrap();
    let me: Option<String> = m.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(me.as_deref(), Some("native_user@%"));
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_reads_on_the_replica_and_sessions_follow_a_promotion() {
    let mut primary = common::my::monitored_primary();
    accounts(&primary);
    let replica = primary.start_replica().expect("replica");
    let (p, r) = (primary.port(), replica.port());
    let mut text = common::routes_config(
        "mysql",
        &[("p", p), ("r", r)],
        ("monitor", "monitor-pw"),
        "5s",
        "round-robin",
    );
    text.push_str(&listeners("main"));
    text.push_str(
        "[listeners.split]\nprotocol = \"mysql\"\naddress = \"127.0.0.1:0\"\n\
         cluster = \"main\"\npool = \"tx\"\nroute = \"split\"\nauth_user = \"lookup\"\n",
    );
    let h = sluice(&text).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(mut c) = conn(addr(&h, "rw"), APP_USER, APP_PW).await {
            let port: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
            if port == Some(p) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no primary found");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Split: a read on the replica (read_only), writes on the primary (the replica
    // would refuse them: the account has no SUPER).
    let mut c = conn(addr(&h, "split"), USER, PW).await.unwrap();
    let ro: Option<u8> = c.query_first("SELECT @@read_only").await.unwrap();
    assert_eq!(ro, Some(1), "a read goes to the replica");
    let at: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(r));
    c.query_drop("CREATE TABLE s (n INT)").await.unwrap();
    c.query_drop("INSERT INTO s VALUES (1)").await.unwrap();
    let at: Option<u16> = c
        .query_first("/* sluice:primary */ SELECT @@port")
        .await
        .unwrap();
    assert_eq!(at, Some(p), "the primary");
    let n: Option<i64> = c.query_first("SELECT COUNT(*) FROM s").await.unwrap();
    assert_eq!(n, Some(1), "reads its own write");
    c.disconnect().await.unwrap();
    let there = primary.sql("SELECT COUNT(*) FROM test.s;").unwrap();
    assert_eq!(there.trim(), "1", "the write ran on the primary");

    // Transaction mode on the read-write route: a session that stays connected through
    // a failover reaches the new primary.
    let mut c = conn(addr(&h, "lookup_tx"), USER, PW).await.unwrap();
    let at: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
    assert_eq!(at, Some(p));
    replica.wait_caught_up(&primary).unwrap();
    primary.kill();
    replica.promote().unwrap();
    until_on(&mut c, r, 20).await;
    c.query_drop("INSERT INTO s VALUES (2)").await.unwrap();
    drop(h);
}
