//! Edge cases of transaction pooling, each a message sequence that once broke it: the
//! unnamed statement across leases, replay of SETs, implicit transactions, hidden
//! temp tables, errors in re-prepares, statement-cache desyncs, COPY errors, large
//! messages, and the order of answers Sluice gives itself.

use crate::common;
use bytes::BytesMut;
use common::*;
use postgres_protocol::message::frontend as fe;
use sluice_wire_pg::encode;

const NO_PARAMS: &[u8] = &[0, 0, 0, 0, 0, 0];

fn parse(b: &mut BytesMut, name: &str, sql: &str) {
    fe::parse(name, sql, [], b).unwrap();
}
fn bind(b: &mut BytesMut, stmt: &str) {
    encode::bind(b, b"", stmt.as_bytes(), NO_PARAMS);
}
fn exec(b: &mut BytesMut) {
    fe::execute("", 0, b).unwrap();
}
fn sync(b: &mut BytesMut) {
    fe::sync(b);
}
fn tags(frames: &[(u8, Vec<u8>)]) -> String {
    frames.iter().map(|f| f.0 as char).collect()
}
fn first_value(frames: &[(u8, Vec<u8>)]) -> Option<String> {
    let row = frames.iter().find(|f| f.0 == b'D')?;
    let len = i32::from_be_bytes(row.1[2..6].try_into().unwrap());
    (len >= 0).then(|| String::from_utf8_lossy(&row.1[6..6 + len as usize]).into_owned())
}
async fn show(r: &mut Raw, what: &str) -> String {
    first_value(&r.query(&format!("show {what}")).await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnamed_statement_follows_its_client() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "5s", "")).await;
    let a = addr(&h, "txauth");
    let mut x = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut y = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut b = BytesMut::new();
    parse(&mut b, "", "select 'x'::text");
    fe::describe(b'S', "", &mut b).unwrap();
    sync(&mut b);
    x.send(&b).await;
    x.until_ready().await;
    let mut b = BytesMut::new();
    parse(&mut b, "", "select 'y'::text");
    fe::describe(b'S', "", &mut b).unwrap();
    sync(&mut b);
    y.send(&b).await;
    y.until_ready().await;
    let mut b = BytesMut::new();
    bind(&mut b, "");
    exec(&mut b);
    sync(&mut b);
    x.send(&b).await;
    let f = x.until_ready().await;
    assert_eq!(first_value(&f).as_deref(), Some("x"), "{}", tags(&f));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_settings_survive_comments_pseudo_names_and_failures() {
    let pg = pg();
    pg.psql("app", "create schema other authorization app")
        .unwrap();
    let h = sluice(&config_text(&pg, 1, "5s", "")).await;
    let a = addr(&h, "txauth");
    let mut x = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut y = Raw::login(a, APP_USER, APP_PW, "app").await;
    x.query("set lock_timeout = '1s' -- a comment").await;
    x.query("set schema 'other'").await;
    y.query("select 1").await;
    assert_eq!(show(&mut x, "lock_timeout").await, "1s");
    assert_eq!(show(&mut x, "search_path").await, "other");
    assert_eq!(show(&mut y, "search_path").await, "\"$user\", public");
    // An implicit transaction that fails keeps none of its SETs.
    let f = y.query("set statement_timeout = '5s'; select 1/0").await;
    assert!(f.iter().any(|f| f.0 == b'E'));
    x.query("select 1").await;
    assert_eq!(show(&mut y, "statement_timeout").await, "0");
    // State the ledger cannot replay pins the client instead.
    y.query("set session characteristics as transaction isolation level serializable")
        .await;
    assert_eq!(h.shared.pins.get(sluice::session::PinReason::Opaque), 1);
    assert_eq!(
        show(&mut y, "default_transaction_isolation").await,
        "serializable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temp_tables_made_by_select_into_pin() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let a = addr(&h, "txauth");
    let mut x = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut y = Raw::login(a, APP_USER, APP_PW, "app").await;
    x.query("select 1 as secret into temp hidden").await;
    let f = y.query("select * from hidden").await;
    assert_eq!(
        error_code(&f[0].1),
        "42P01",
        "another client must not see it"
    );
    let f = x.query("select * from hidden").await;
    assert_eq!(first_value(&f).as_deref(), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_of_reprepares_and_cache_desyncs_reach_the_client() {
    let pg = pg();
    let text = config_text(&pg, 1, "5s", "")
        .replace("statement_cache_size = 8", "statement_cache_size = 1");
    let h = sluice(&text).await;
    let a = addr(&h, "txauth");
    let mut x = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut y = Raw::login(a, APP_USER, APP_PW, "app").await;
    // x prepares s1; y's statements evict it from the one-slot cache.
    let mut b = BytesMut::new();
    parse(&mut b, "s1", "select 'one'::text");
    sync(&mut b);
    x.send(&b).await;
    x.until_ready().await;
    // A batch that fails before its eviction Close runs.
    let mut b = BytesMut::new();
    bind(&mut b, "nosuch");
    parse(&mut b, "s2", "select 'two'::text");
    sync(&mut b);
    y.send(&b).await;
    let f = y.until_ready().await;
    assert_eq!(error_code(&f[0].1), "26000");
    // s1 still works, and so does s2 once prepared.
    for (r, stmt, want) in [(&mut x, "s1", "one")] {
        let mut b = BytesMut::new();
        bind(&mut b, stmt);
        exec(&mut b);
        sync(&mut b);
        r.send(&b).await;
        let f = r.until_ready().await;
        assert_eq!(first_value(&f).as_deref(), Some(want), "{}", tags(&f));
    }
    // In a failed transaction, a re-prepare fails: the client sees the error.
    x.query("begin").await;
    x.query("select 1/0").await;
    let mut b = BytesMut::new();
    parse(&mut b, "s3", "select 'three'::text");
    bind(&mut b, "s1");
    exec(&mut b);
    sync(&mut b);
    x.send(&b).await;
    let f = x.until_ready().await;
    assert_eq!(f[0].0, b'E', "{}", tags(&f));
    assert_eq!(error_code(&f[0].1), "25P02");
    x.query("rollback").await;
    // Pipelined batches where the first fails before its re-prepare of `s1` runs.
    let mut b = BytesMut::new();
    bind(&mut b, "nosuch");
    bind(&mut b, "s1");
    exec(&mut b);
    sync(&mut b);
    bind(&mut b, "s1");
    exec(&mut b);
    sync(&mut b);
    x.send(&b).await;
    let f1 = x.until_ready().await;
    assert_eq!(f1[0].0, b'E');
    let f2 = x.until_ready().await;
    assert_eq!(first_value(&f2).as_deref(), Some("one"), "{}", tags(&f2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_errors_and_stray_copy_messages() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "2s", "")).await;
    let a = addr(&h, "txauth");
    let mut x = Raw::login(a, APP_USER, APP_PW, "app").await;
    x.query("create table c(a int)").await;
    // Bad data: the server errors out of copy mode; libpq then sends no CopyDone.
    let mut b = BytesMut::new();
    fe::query("copy c from stdin", &mut b).unwrap();
    x.send(&b).await;
    assert_eq!(x.frame().await.unwrap().0, b'G');
    x.send(&frame(b'd', b"not a number\n")).await;
    let f = x.until_ready().await;
    assert_eq!(f[0].0, b'E');
    let mut b = BytesMut::new();
    parse(&mut b, "", "select 'after'::text");
    bind(&mut b, "");
    exec(&mut b);
    sync(&mut b);
    x.send(&b).await;
    assert_eq!(
        first_value(&x.until_ready().await).as_deref(),
        Some("after")
    );
    // Large CopyData with no COPY running is ignored, as the server does.
    let big = vec![b'x'; 100_000];
    for _ in 0..5 {
        x.send(&frame(b'd', &big)).await;
    }
    assert_eq!(
        first_value(&x.query("select 'still here'").await).as_deref(),
        Some("still here")
    );
    // COPY of a missing table with the data and CopyDone pipelined: the connection
    // goes back to the pool afterwards.
    let mut b = BytesMut::new();
    fe::query("copy nosuch from stdin", &mut b).unwrap();
    b.extend_from_slice(&frame(b'd', b"1\n"));
    fe::copy_done(&mut b);
    x.send(&b).await;
    let f = x.until_ready().await;
    assert_eq!(error_code(&f[0].1), "42P01");
    let mut y = Raw::login(a, APP_USER, APP_PW, "app").await;
    assert_eq!(
        first_value(&y.query("select 'y'").await).as_deref(),
        Some("y")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_rows_stream_past_the_message_cap() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "5s", "")).await;
    let c = app(addr(&h, "txauth")).await;
    // The test config caps messages at 1 MiB; a 3 MB value streams through.
    let n: i32 = c
        .query_one("select length(repeat('x', 3000000))", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3_000_000);
    let v: String = c
        .query_one("select repeat('x', 3000000)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v.len(), 3_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_sluice_gives_itself_keep_their_order_and_status() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "500ms", "")).await;
    let a = addr(&h, "txauth");
    let mut x = Raw::login(a, APP_USER, APP_PW, "app").await;
    // DEALLOCATE answered by Sluice inside a transaction reports status T.
    let mut b = BytesMut::new();
    parse(&mut b, "s1", "select 1");
    sync(&mut b);
    x.send(&b).await;
    x.until_ready().await;
    let mut b = BytesMut::new();
    fe::query("begin", &mut b).unwrap();
    fe::query("deallocate s1", &mut b).unwrap();
    x.send(&b).await;
    let f1 = x.until_ready().await;
    let f2 = x.until_ready().await;
    assert_eq!(f1.last().unwrap().1, b"T");
    assert_eq!(f2.last().unwrap().1, b"T", "{}", tags(&f2));
    // While x holds the only connection, y's ParseComplete (answered by Sluice) comes
    // before the pool-timeout error and its ReadyForQuery.
    let mut y = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut b = BytesMut::new();
    parse(&mut b, "p", "select 1");
    bind(&mut b, "p");
    exec(&mut b);
    sync(&mut b);
    y.send(&b).await;
    let f = y.until_ready().await;
    assert_eq!(tags(&f), "1EZ");
    assert_eq!(error_code(&f[1].1), "53300");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_closed_is_not_handed_out() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let c = app(addr(&h, "txauth")).await;
    c.simple_query("select 1").await.unwrap();
    // The server ends the pooled connection a moment after it was used.
    pg.psql(
        "postgres",
        "select pg_terminate_backend(pid) from pg_stat_activity where usename = 'app'",
    )
    .unwrap();
    for _ in 0..100 {
        if app_backends(&pg) == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The next statement gets a live connection, not the dead one's FATAL.
    let rows = c.simple_query("select 2").await.unwrap();
    assert!(
        rows.iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
    );
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

/// A literal is converted when its statement is parsed, under the settings of the
/// client that prepared it: two clients with different DateStyles preparing the same
/// text on one pool connection each get their own statement, not the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_is_shared_only_under_the_same_parse_settings() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "5s", "")).await;
    let (dmy, mdy) = (app(addr(&h, "txauth")).await, app(addr(&h, "txauth")).await);
    dmy.batch_execute("set datestyle = 'ISO, DMY'")
        .await
        .unwrap();
    mdy.batch_execute("set datestyle = 'ISO, MDY'")
        .await
        .unwrap();
    let sql = "select ('01/02/2020'::date)::text";
    for _ in 0..3 {
        for (c, want) in [(&dmy, "2020-02-01"), (&mdy, "2020-01-02")] {
            let s = c.prepare(sql).await.unwrap();
            let got: String = c.query_one(&s, &[]).await.unwrap().get(0);
            assert_eq!(got, want);
        }
    }
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

/// A client that changes DateStyle after preparing gets its statement under the name
/// for its new settings: a connection that has to prepare it again (here after the
/// statement cache evicted it) parses it under the new settings, and that copy must not
/// serve the clients still on the old ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_reprepared_after_a_settings_change_serves_only_the_new_settings() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "5s", "")).await;
    let (a, b) = (app(addr(&h, "txauth")).await, app(addr(&h, "txauth")).await);
    for c in [&a, &b] {
        c.batch_execute("set datestyle = 'ISO, DMY'").await.unwrap();
    }
    let sql = "select ('01/02/2020'::date)::text";
    let s = a.prepare(sql).await.unwrap();
    let got: String = a.query_one(&s, &[]).await.unwrap().get(0);
    assert_eq!(got, "2020-02-01");
    // More statements than the connection's cache holds (8) push it out.
    for i in 0..9 {
        let other = a.prepare(&format!("select {i}")).await.unwrap();
        a.query_one(&other, &[]).await.unwrap();
    }
    a.batch_execute("set datestyle = 'ISO, MDY'").await.unwrap();
    a.query_one(&s, &[]).await.unwrap();
    let s = b.prepare(sql).await.unwrap();
    let got: String = b.query_one(&s, &[]).await.unwrap().get(0);
    assert_eq!(got, "2020-02-01", "a DMY client got the MDY client's copy");
    h.shutdown(std::time::Duration::from_secs(5)).await;
}
