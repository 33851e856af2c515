//! What real MySQL/MariaDB drivers saw differently through Sluice than directly, each
//! case with a test: KILL of another user's thread by a user allowed to, KILL of its
//! own connection, and the server closing an idle session (wait_timeout).

use crate::common;
use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::Queryable;
use std::time::Duration;

fn code(r: Result<(), mysql_async::Error>) -> Option<u16> {
    match r {
        Err(mysql_async::Error::Server(e)) => Some(e.code),
        Ok(()) => None,
        Err(e) => panic!("not a server error: {e:?}"),
    }
}

/// `KILL <id>` by a user with the privilege to kill other users' threads (root) is
/// the server's to allow, wherever the target is: running a statement, idle on its own
/// server connection (session mode), or holding none (transaction mode). A user without
/// it still gets 1095, as from the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_across_users_is_the_servers_decision() {
    let db = mariadb();
    // Without SUPER or CONNECTION ADMIN (the test kit's users have all privileges).
    db.sql(
        "CREATE USER 'other'@'%' IDENTIFIED BY 'other-pw'; GRANT SELECT ON test.* TO 'other'@'%';",
    )
    .unwrap();
    let h = sluice(&config_text(&db, 4, "5s", "")).await;
    for listener in ["session", "tx"] {
        let a = addr(&h, listener);
        let mut root = mysql_async::Conn::new(opts(a, db.user(), db.password(), None))
            .await
            .unwrap();
        let mut stranger = mysql_async::Conn::new(opts(a, "other", "other-pw", None))
            .await
            .unwrap();
        // A running statement.
        let mut victim = connect(a).await;
        let vid = victim.id();
        let q = tokio::spawn(async move {
            let r: Result<Option<i64>, _> = victim.query_first("SELECT SLEEP(20)").await;
            (r, victim)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            code(stranger.query_drop(format!("KILL QUERY {vid}")).await),
            Some(1095),
            "{listener}"
        );
        assert_eq!(
            code(root.query_drop(format!("KILL QUERY {vid}")).await),
            None,
            "{listener}"
        );
        let (r, mut victim) = tokio::time::timeout(Duration::from_secs(10), q)
            .await
            .expect("the statement was killed")
            .unwrap();
        assert!(matches!(r, Ok(Some(1))) || r.is_err(), "{listener}: {r:?}");
        // Between statements.
        let one: Option<i64> = victim.query_first("SELECT 1").await.unwrap();
        assert_eq!(one, Some(1));
        assert_eq!(
            code(stranger.query_drop(format!("KILL {vid}")).await),
            Some(1095),
            "{listener}"
        );
        assert!(
            victim.ping().await.is_ok(),
            "{listener}: the refused KILL did nothing"
        );
        assert_eq!(
            code(root.query_drop(format!("KILL {vid}")).await),
            None,
            "{listener}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            victim.query_drop("SELECT 1").await.is_err(),
            "{listener}: killed"
        );
        // The killers' sessions go on.
        let n: Option<i64> = root.query_first("SELECT 2").await.unwrap();
        assert_eq!(n, Some(2));
        let n: Option<i64> = stranger.query_first("SELECT 3").await.unwrap();
        assert_eq!(n, Some(3));
    }
}

/// A client kills its own connection with its next statement already sent (or sent
/// before it sees the socket close): as directly, the KILL's answer is ERR 1927, then
/// the connection ends with nothing more in it. A session holding a server connection
/// (session mode; transaction mode with autocommit off) used to pass the next statement
/// to the dying connection and answer it with 2013, which MariaDB Connector/C (3.3.9 and
/// later) reports as "Received malformed packet" (Connector/Python's test_conpy278).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_its_own_connection_ends_it_as_directly() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 4, "5s", "")).await;
    let direct: std::net::SocketAddr = format!("127.0.0.1:{}", db.port()).parse().unwrap();
    let off = Some("SET AUTOCOMMIT = 0");
    for (a, setup) in [
        (direct, off),
        (addr(&h, "session"), None),
        (addr(&h, "tx"), off),
        (addr(&h, "tx"), None),
    ] {
        let mut c = RawMy::login(a, APP_USER, APP_PW).await;
        if let Some(sql) = setup {
            assert_eq!(c.query_value(sql).await, None);
        }
        let kill = format!("KILL {}", c.id);
        c.send_queries(&[&kill, "SET @a := 1"]).await;
        let (seq, code, msg) = c.read_err().await;
        assert_eq!((seq, code), (1, 1927), "{a} {setup:?}: {msg}");
        assert_eq!(c.read().await, None, "{a} {setup:?}: nothing after it");
    }
    let mut c = connect(addr(&h, "tx")).await;
    let n: Option<i64> = c.query_first("SELECT 5").await.unwrap();
    assert_eq!(n, Some(5));
}

/// The server closes a session idle past its wait_timeout: the client finds the
/// connection gone, with nothing in it (directly: "MySQL server has gone away"), not a
/// packet out of sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_idle_disconnect_looks_like_the_server() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 4, "5s", "")).await;
    let direct: std::net::SocketAddr = format!("127.0.0.1:{}", db.port()).parse().unwrap();
    for a in [direct, addr(&h, "session")] {
        let mut c = RawMy::login(a, APP_USER, APP_PW).await;
        assert_eq!(c.query_value("SET SESSION wait_timeout = 1").await, None);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(
            c.read().await,
            None,
            "{a}: the connection ends without a packet"
        );
    }
    let mut c = connect(addr(&h, "session")).await;
    let n: Option<i64> = c.query_first("SELECT 4").await.unwrap();
    assert_eq!(n, Some(4));
}

/// COM_CHANGE_USER through a pass-through transaction-mode listener: the client's answer
/// was made for the scramble of the connection it logged in on, not the one it holds
/// now; Sluice makes the server ask it again for the right one, and the change works as
/// directly. (MariaDB Connector/Python's own test_change_user is what fails without it:
/// the driver suites check that; this client gets asked again by MariaDB anyway.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_user_in_transaction_mode() {
    let db = mariadb();
    db.create_user("other", "other-pw", "mysql_native_password")
        .unwrap();
    let h = sluice(&config_text(&db, 4, "5s", "")).await;
    let a = addr(&h, "tx");
    let mut c = RawMy::login(a, APP_USER, APP_PW).await;
    let mut hog = connect(a).await;
    // Inside a transaction, so that it keeps a connection for the change.
    assert_eq!(c.query_value("BEGIN").await, None);
    hog.query_drop("BEGIN").await.unwrap();
    let answer = c.change_user("other", "other-pw", "").await;
    assert_eq!(
        answer.first(),
        Some(&0),
        "OK: {}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(
        c.query_value("SELECT CURRENT_USER()").await.as_deref(),
        Some("other@%")
    );
    hog.query_drop("COMMIT").await.unwrap();
}
