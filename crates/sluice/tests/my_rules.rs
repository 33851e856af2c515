//! Query rules on MariaDB: block (ERR 1142, the connection goes on), rewrite, kind,
//! listener and database fields, through text queries and prepared statements.

use crate::common;

use common::my::*;
use mysql_async::prelude::*;

const RULES: &str = r#"
[[rules]]
pattern = "^DELETE FROM \\S+$"
user = "app"
action = "block"
message = "DELETE without WHERE is not allowed here"

[[rules]]
pattern = "SLEEP\\(\\d+\\)"
match_on = "text"
action = "rewrite"
replace = "SLEEP(0)"

[[rules]]
kind = "ddl"
listener = "session"
action = "block"

[[rules]]
database = "other"
kind = "select"
action = "block"
message = "no reads in other"
"#;

fn code(e: &mysql_async::Error) -> (u16, String, String) {
    match e {
        mysql_async::Error::Server(s) => (s.code, s.state.clone(), s.message.clone()),
        other => panic!("not a server error: {other:?}"),
    }
}

#[tokio::test]
async fn block_rewrite_and_fields() {
    let db = mariadb();
    db.create_database("other").expect("database other");
    let h = common::sluice(&config_text(&db, 4, "2s", RULES)).await;
    let mut tx = connect(common::addr(&h, "tx")).await;
    tx.query_drop("CREATE TABLE t (id int)").await.unwrap();
    for listener in ["tx", "session"] {
        let mut c = connect(common::addr(&h, listener)).await;
        c.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
        let e = c.query_drop("DELETE FROM t").await.unwrap_err();
        let (n, state, msg) = code(&e);
        assert_eq!((n, state.as_str()), (1142, "42000"), "{listener}");
        assert_eq!(msg, "DELETE without WHERE is not allowed here");
        // Prepared: refused at prepare.
        let e = c.prep("DELETE FROM t").await.unwrap_err();
        assert_eq!(code(&e).0, 1142);
        c.exec_drop("DELETE FROM t WHERE id = ?", (1,))
            .await
            .unwrap();
        // Inside a transaction: refused, and the transaction goes on.
        c.query_drop("BEGIN").await.unwrap();
        c.query_drop("INSERT INTO t VALUES (2)").await.unwrap();
        assert!(c.query_drop("DELETE FROM t").await.is_err());
        c.query_drop("INSERT INTO t VALUES (3)").await.unwrap();
        c.query_drop("COMMIT").await.unwrap();
        let n: Option<i64> = c.query_first("SELECT count(*) FROM t").await.unwrap();
        assert_eq!(n, Some(2), "{listener}");
        c.query_drop("DELETE FROM t WHERE 1").await.unwrap();
    }
    // Rewrite: SLEEP(30) runs as SLEEP(0), as a query and prepared.
    let started = std::time::Instant::now();
    let v: Option<i64> = tx.query_first("SELECT SLEEP(30)").await.unwrap();
    assert_eq!(v, Some(0));
    let v: Option<i64> = tx.exec_first("SELECT SLEEP(30) + ?", (1,)).await.unwrap();
    assert_eq!(v, Some(1));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // DDL on the session listener only.
    let mut s = connect(common::addr(&h, "session")).await;
    let e = s.query_drop("CREATE TABLE u (a int)").await.unwrap_err();
    assert_eq!(code(&e).0, 1142);
    assert!(code(&e).2.contains("blocked by rule 3"), "{e:?}");
    tx.query_drop("CREATE TABLE u (a int)").await.unwrap();
    // The database field follows USE.
    tx.query_drop("USE other").await.unwrap();
    let e = tx.query_drop("SELECT 1").await.unwrap_err();
    assert_eq!(code(&e).2, "no reads in other");
    tx.query_drop("CREATE TABLE o (a int)").await.unwrap();
    tx.query_drop("USE test").await.unwrap();
    tx.query_drop("SELECT 1").await.unwrap();
    // In session mode too, by USE and by COM_INIT_DB.
    s.query_drop("USE other").await.unwrap();
    let e = s.query_drop("SELECT 1").await.unwrap_err();
    assert_eq!(code(&e).2, "no reads in other");
    s.query_drop("/* back */ use `test`").await.unwrap();
    s.query_drop("SELECT 1").await.unwrap();
    let mut raw = RawMy::login(common::addr(&h, "session"), APP_USER, APP_PW).await;
    raw.send(0, b"\x02other").await;
    let ok = raw.read().await.map(|(_, p)| p.as_slice().first().copied());
    assert_eq!(ok, Some(Some(0)));
    raw.send(0, b"\x03SELECT 1").await;
    assert_eq!(raw.read_err().await.2, "no reads in other");
    // The server keeps the database through COM_RESET_CONNECTION, and so do the rules,
    // in both modes (in transaction mode the connection goes back to the pool in it).
    for listener in ["session", "tx"] {
        let mut raw = RawMy::login(common::addr(&h, listener), APP_USER, APP_PW).await;
        raw.query_value("USE other").await;
        raw.send(0, b"\x1f").await;
        let ok = raw.read().await.map(|(_, p)| p.as_slice().first().copied());
        assert_eq!(ok, Some(Some(0)), "{listener}");
        raw.send(0, b"\x03SELECT 1").await;
        assert_eq!(raw.read_err().await.2, "no reads in other", "{listener}");
        raw.query_value("USE test").await;
        let db = raw.query_value("SELECT DATABASE()").await;
        assert_eq!(db.as_deref(), Some("test"), "{listener}");
    }
    // A USE among several statements is followed in session mode too.
    let mut multi = RawMy::login_with(
        common::addr(&h, "session"),
        APP_USER,
        APP_PW,
        sluice_wire_mysql::consts::CLIENT_MULTI_STATEMENTS,
    )
    .await;
    multi.send(0, b"\x03DO 1; USE other").await;
    while let Some((_, p)) = multi.read().await {
        // OK packets; the last has no SERVER_MORE_RESULTS_EXISTS.
        if p.as_slice().first() != Some(&0) || p.get(3).is_some_and(|s| s & 8 == 0) {
            break;
        }
    }
    multi.send(0, b"\x03SELECT 1").await;
    assert_eq!(multi.read_err().await.2, "no reads in other");
    let hits = h.shared.my.rules.load().set.hits();
    assert_eq!(hits[0], (1, 6), "{hits:?}");
}

#[tokio::test]
async fn timeout_is_max_statement_time() {
    let db = mariadb();
    let rules = r#"
[[rules]]
pattern = "SLEEP"
action = "timeout"
timeout = "300ms"
"#;
    let h = common::sluice(&config_text(&db, 4, "2s", rules)).await;
    for listener in ["tx", "session"] {
        let mut c = connect(common::addr(&h, listener)).await;
        let started = std::time::Instant::now();
        let e = c.query_drop("SELECT SLEEP(10) FROM (SELECT 1) t").await;
        // MariaDB interrupts it: error 1969, or SLEEP's own answer 1 when interrupted.
        if let Err(e) = e {
            assert_eq!(code(&e).0, 1969, "{listener}");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{listener}"
        );
        let v: Option<i64> = c
            .exec_first("SELECT SLEEP(?)", (10,))
            .await
            .unwrap_or(Some(1));
        assert_eq!(v, Some(1));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(8),
            "{listener}"
        );
    }
}

#[tokio::test]
async fn a_refused_pipelined_command_is_answered_in_order() {
    let db = mariadb();
    let h = common::sluice(&config_text(&db, 4, "2s", RULES)).await;
    let mut setup = connect(common::addr(&h, "tx")).await;
    setup.query_drop("CREATE TABLE t (id int)").await.unwrap();
    for listener in ["tx", "session"] {
        let mut c = RawMy::login(common::addr(&h, listener), APP_USER, APP_PW).await;
        c.query_value("USE test").await;
        let packet = |sql: &str| {
            let mut p = vec![3u8];
            p.extend_from_slice(sql.as_bytes());
            let mut out = (p.len() as u32).to_le_bytes()[..3].to_vec();
            out.push(0);
            out.extend(p);
            out
        };
        // A slow statement, then one a rule refuses, in one write.
        let mut both = packet("SELECT SLEEP(0.2)");
        both.extend(packet("DELETE FROM t"));
        c.send_raw(&both).await;
        let mut firsts = Vec::new();
        while let Some((_, p)) = c.read().await {
            let first = p.as_slice().first().copied().unwrap_or(0);
            firsts.push(first);
            if first == 0xff {
                break;
            }
        }
        // The SELECT's result set (column count 1, ...) comes first, the ERR last.
        assert_eq!(
            firsts.as_slice().first(),
            Some(&1),
            "{listener}: {firsts:?}"
        );
        assert_eq!(firsts.last(), Some(&0xff), "{listener}: {firsts:?}");
        assert!(firsts.len() > 2, "{listener}: {firsts:?}");
    }
}
