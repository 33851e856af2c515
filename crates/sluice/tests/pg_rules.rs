//! Query rules on PostgreSQL: each match field and action that runs on one server,
//! through simple and prepared statements, in both pool modes.

use crate::common;

use common::*;

const RULES: &str = r#"
[[rules]]
pattern = "^DELETE FROM \\S+$"
user = "app"
action = "block"
message = "DELETE without WHERE is not allowed here"

[[rules]]
pattern = "pg_sleep\\(\\d+\\)"
match_on = "text"
action = "rewrite"
replace = "pg_sleep(0)"
continue = true

[[rules]]
pattern = "two_statements\\('([^']*)'\\)"
match_on = "text"
action = "rewrite"
replace = "$1"

[[rules]]
kind = "ddl"
listener = "session"
action = "block"
message = "no DDL on the session port"

[[rules]]
tables = ["secrets"]
user = "app"
client_address = "127.0.0.0/8"
action = "block"
message = "secrets are not read from here"

[[rules]]
client_address = "10.0.0.0/8"
action = "block"
message = "nothing from 10/8"

[[rules]]
kind = "select"
database = "app"
action = "log"
"#;

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default()
}

async fn setup() -> (sluice_testkit::PgServer, sluice::server::Handle) {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "2s", RULES)).await;
    let c = app(addr(&h, "tx")).await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let su = superuser(addr(&h, "tx"), &pg, "app").await;
    su.batch_execute("CREATE TABLE secrets (s text); GRANT ALL ON secrets TO app")
        .await
        .unwrap();
    (pg, h)
}

#[tokio::test]
async fn block_answers_42501_and_the_connection_goes_on() {
    let (_pg, h) = setup().await;
    for listener in ["tx", "session"] {
        let c = app(addr(&h, listener)).await;
        c.batch_execute("INSERT INTO t VALUES (1)").await.unwrap();
        let e = c.batch_execute("DELETE FROM t").await.unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{listener}");
        let msg = e.as_db_error().map(|d| d.message().to_owned());
        assert_eq!(
            msg.as_deref(),
            Some("DELETE without WHERE is not allowed here")
        );
        // Prepared: refused at prepare.
        let e = c.prepare("DELETE FROM t").await.unwrap_err();
        assert_eq!(sqlstate(&e), "42501");
        // A WHERE clause makes another digest: it runs.
        c.execute("DELETE FROM t WHERE id = $1", &[&1i32])
            .await
            .unwrap();
        let n: i64 = c
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0);
        // Inside a transaction: refused, and the transaction goes on.
        c.batch_execute("BEGIN; INSERT INTO t VALUES (2)")
            .await
            .unwrap();
        assert!(c.batch_execute("DELETE FROM t").await.is_err());
        c.batch_execute("INSERT INTO t VALUES (3); COMMIT")
            .await
            .unwrap();
        let n: i64 = c
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 2, "{listener}");
        c.batch_execute("DELETE FROM t WHERE true").await.unwrap();
    }
    // Another user is not matched.
    let su = superuser(addr(&h, "tx"), &_pg, "app").await;
    su.batch_execute("DELETE FROM t").await.unwrap();
    let hits = h.shared.pg.rules.load().set.hits();
    // Three refusals on each listener.
    assert_eq!(hits[0], (1, 6), "{hits:?}");
}

#[tokio::test]
async fn rewrite_changes_the_text_and_refuses_two_statements() {
    let (_pg, h) = setup().await;
    let c = app(addr(&h, "tx")).await;
    let started = std::time::Instant::now();
    c.batch_execute("SELECT pg_sleep(30)").await.unwrap();
    let rows = c.query("SELECT pg_sleep(30)::text", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // The rule's replacement makes two statements of it: refused, never sent.
    let e = c
        .batch_execute("SELECT two_statements('1; SELECT 2')")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    assert!(message(&e).contains("more than one"), "{e:?}");
    let one: i32 = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

#[tokio::test]
async fn listener_kind_negate_and_address_fields() {
    let (_pg, h) = setup().await;
    let session = app(addr(&h, "session")).await;
    let e = session
        .batch_execute("CREATE TABLE u (a int)")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    let tx = app(addr(&h, "tx")).await;
    tx.batch_execute("CREATE TABLE u (a int)").await.unwrap();
    // The client is on 127.0.0.1: secrets are refused to app, not to the superuser;
    // nothing is refused for being from 10/8.
    let e = tx.query("SELECT * FROM secrets", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    assert!(message(&e).contains("not read from here"), "{e:?}");
    let su = superuser(addr(&h, "tx"), &_pg, "app").await;
    su.batch_execute("INSERT INTO secrets VALUES ('x')")
        .await
        .unwrap();
    tx.batch_execute("SELECT 1").await.unwrap();
    // The log rule (database "app") matched the selects that ran.
    let hits = h.shared.pg.rules.load().set.hits();
    assert_eq!(hits[5].1, 0, "{hits:?}");
    assert!(hits[6].1 >= 1, "{hits:?}");
}

#[tokio::test]
async fn negate_turns_the_statement_fields_round() {
    let pg = pg();
    let rules = r#"
[[rules]]
user = "app"
kind = ["select", "insert"]
negate = true
action = "block"
message = "app only reads and inserts"
"#;
    let h = sluice(&config_text(&pg, 4, "2s", rules)).await;
    let su = superuser(addr(&h, "tx"), &pg, "app").await;
    su.batch_execute("CREATE TABLE n (a int); GRANT ALL ON n TO app")
        .await
        .unwrap();
    let c = app(addr(&h, "tx")).await;
    c.batch_execute("INSERT INTO n VALUES (1)").await.unwrap();
    c.query("SELECT * FROM n", &[]).await.unwrap();
    for sql in ["UPDATE n SET a = 2", "DELETE FROM n"] {
        let e = c.batch_execute(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), "42501", "{sql}");
    }
    su.batch_execute("UPDATE n SET a = 2").await.unwrap();
}

#[tokio::test]
async fn a_digest_rule_matches_whatever_the_literals() {
    let pg = pg();
    let digest = sluice_sql::facts(b"SELECT 1 + 1", sluice_sql::Dialect::Postgres).digest;
    let rules = format!(
        "[[rules]]\ndigest = \"{digest:#x}\"\naction = \"block\"\nmessage = \"this shape is blocked\"\n"
    );
    let h = sluice(&config_text(&pg, 4, "2s", &rules)).await;
    let c = app(addr(&h, "tx")).await;
    for sql in ["SELECT 1 + 1", "SELECT 5 +   7", "SELECT $1 + 2"] {
        let e = if sql.contains('$') {
            c.query(sql, &[&1i32]).await.unwrap_err()
        } else {
            c.batch_execute(sql).await.unwrap_err()
        };
        assert_eq!(sqlstate(&e), "42501", "{sql}");
    }
    c.batch_execute("SELECT 1 - 1").await.unwrap();
}

#[tokio::test]
async fn timeout_cancels_the_statement_on_the_server() {
    let pg = pg();
    let rules = r#"
[[rules]]
pattern = "pg_sleep"
action = "timeout"
timeout = "300ms"
"#;
    let h = sluice(&config_text(&pg, 4, "2s", rules)).await;
    for listener in ["tx", "session"] {
        let c = app(addr(&h, listener)).await;
        let started = std::time::Instant::now();
        let e = c.batch_execute("SELECT pg_sleep(10)").await.unwrap_err();
        assert_eq!(sqlstate(&e), "57014", "{listener}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let e = c.query("SELECT pg_sleep($1)", &[&10f64]).await.unwrap_err();
        assert_eq!(sqlstate(&e), "57014", "{listener}");
        // Other statements have no timeout.
        c.batch_execute("SELECT 1").await.unwrap();
    }
}

/// Parse (unnamed), Bind, Execute of `sql`.
fn round(sql: &str) -> Vec<u8> {
    let mut parse = b"\0".to_vec();
    parse.extend_from_slice(sql.as_bytes());
    parse.extend_from_slice(b"\0\0\0");
    let mut out = frame(b'P', &parse);
    out.extend(frame(b'B', b"\0\0\0\0\0\0\0\0"));
    out.extend(frame(b'E', b"\0\0\0\0\0"));
    out
}

#[tokio::test]
async fn a_refusal_inside_a_batch_answers_what_ran_and_ends_the_batch() {
    let (_pg, h) = setup().await;
    for listener in ["tx", "session"] {
        let mut c = Raw::login(addr(&h, listener), APP_USER, APP_PW, "app").await;
        // One Sync batch: an insert that runs, a refused DELETE, and what follows it.
        let mut batch = round("INSERT INTO t VALUES (7)");
        batch.extend(round("DELETE FROM t"));
        batch.extend(round("INSERT INTO t VALUES (8)"));
        batch.extend(frame(b'S', b""));
        c.send(&batch).await;
        let tags: Vec<u8> = c.until_ready().await.iter().map(|(t, _)| *t).collect();
        assert_eq!(tags, b"12CEZ", "{listener}");
        let rows = c.query("SELECT count(*) FROM t WHERE id = 7").await;
        assert!(
            rows.iter().any(|(t, b)| *t == b'D' && b.ends_with(b"1")),
            "{listener}: {rows:?}"
        );
        let rows = c.query("SELECT count(*) FROM t WHERE id = 8").await;
        assert!(
            rows.iter().any(|(t, b)| *t == b'D' && b.ends_with(b"0")),
            "{listener}: {rows:?}"
        );
        c.query("DELETE FROM t WHERE true").await;
    }
}
