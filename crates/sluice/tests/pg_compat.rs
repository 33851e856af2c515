//! What real PostgreSQL drivers saw differently through Sluice than directly, each case
//! with a test: an error inside a pipelined batch, a backend terminated by the server,
//! junk instead of a startup packet. In session mode a client must not be able to tell
//! Sluice from the server; in transaction mode as little as pooling allows.

use crate::common;
use bytes::BytesMut;
use common::*;
use postgres_protocol::message::frontend as fe;
use std::time::Duration;

/// Bind and Execute of the named statement `s` with one text parameter.
fn bind_execute(out: &mut BytesMut, value: &str) {
    fe::bind(
        "",
        "s",
        [0i16],
        [value],
        |v, buf| {
            buf.extend_from_slice(v.as_bytes());
            Ok(postgres_protocol::IsNull::No)
        },
        [0i16],
        out,
    )
    .map_err(|_| "bind")
    .unwrap();
    fe::execute("", 0, out).unwrap();
}

/// asyncpg's executemany and psycopg 3's pipeline mode: many Bind/Execute pairs sent
/// before the Sync, one of which fails on the server while the client is still sending
/// (it has not read the error yet). The server skips everything up to the Sync and
/// answers one ReadyForQuery; Sluice must expect exactly that, however the messages
/// were split across reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_inside_a_pipelined_batch() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let direct: std::net::SocketAddr = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
    let mut want = None;
    for (name, a) in [
        ("direct", direct),
        ("session", addr(&h, "session")),
        ("tx", addr(&h, "tx")),
    ] {
        let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
        let mut out = BytesMut::new();
        fe::parse("s", "select 10 / $1::int", [], &mut out).unwrap();
        bind_execute(&mut out, "1");
        bind_execute(&mut out, "0");
        bind_execute(&mut out, "2");
        r.send(&out).await;
        // The server has failed the division by zero before the rest arrives.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut out = BytesMut::new();
        for _ in 0..50 {
            bind_execute(&mut out, "5");
        }
        r.send(&out).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut out = BytesMut::new();
        bind_execute(&mut out, "5");
        fe::sync(&mut out);
        r.send(&out).await;
        let f = r.until_ready().await;
        let got: Vec<(u8, String)> = f.iter().map(|f| (f.0, error_code(&f.1))).collect();
        let errors = got.iter().filter(|f| f.0 == b'E').count();
        assert_eq!(errors, 1, "{name}: {got:?}");
        assert!(got.contains(&(b'E', "22012".into())), "{name}: {got:?}");
        assert_eq!(got.last().map(|f| f.0), Some(b'Z'), "{name}");
        // The same answer as the server gives directly.
        match &want {
            None => want = Some(got.iter().map(|f| f.0).collect::<Vec<u8>>()),
            Some(w) => assert_eq!(&got.iter().map(|f| f.0).collect::<Vec<u8>>(), w, "{name}"),
        }
        // The session goes on.
        let f = r.query("select 42").await;
        assert!(f.iter().any(|f| f.0 == b'D'), "{name}: {f:?}");
        let mut out = BytesMut::new();
        bind_execute(&mut out, "2");
        fe::sync(&mut out);
        r.send(&out).await;
        let tags: Vec<u8> = r.until_ready().await.iter().map(|f| f.0).collect();
        assert_eq!(tags, b"2DCZ", "{name}");
    }
}

/// `pg_terminate_backend` of a client's backend: the client sees the server's FATAL and
/// then the end of the connection, as directly; no second FATAL of Sluice's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_backend_gives_one_fatal() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let admin = superuser(addr(&h, "session"), &pg, "postgres").await;
    for (listener, begin) in [("session", false), ("tx", true)] {
        let mut r = Raw::login(addr(&h, listener), APP_USER, APP_PW, "app").await;
        if begin {
            // In transaction mode the client holds its server connection only inside
            // a transaction.
            let f = r.query("begin").await;
            assert_eq!(f.last().map(|f| f.1.as_slice()), Some(&b"T"[..]));
        }
        // The server pid, as an administrator finds it.
        let f = r
            .query("select pid from pg_stat_activity where pid = pg_backend_pid()")
            .await;
        let (_, row) = f.iter().find(|f| f.0 == b'D').unwrap();
        let pid: i32 = std::str::from_utf8(&row[6..]).unwrap().parse().unwrap();
        admin
            .execute("select pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        let mut frames = Vec::new();
        while let Some(f) = r.frame().await {
            frames.push(f);
        }
        assert_eq!(frames.len(), 1, "{listener}: {frames:?}");
        assert_eq!(frames[0].0, b'E');
        assert_eq!(error_code(&frames[0].1), "57P01", "{listener}");
    }
}

/// A client that sends something other than a startup packet first (here a Terminate)
/// is closed without a word, as the server does; a protocol version the server does not
/// speak gets the server's FATAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_first_packets_answer_like_the_server() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let direct: std::net::SocketAddr = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
    for a in [direct, addr(&h, "session")] {
        let mut r = Raw::connect(a).await;
        r.send(&[b'X', 0, 0, 0, 4]).await;
        assert!(r.frame().await.is_none(), "{a}: closed without a word");
        let mut r = Raw::connect(a).await;
        r.send(b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(r.frame().await.is_none(), "{a}: closed without a word");
        // A length below the smallest startup packet.
        let mut r = Raw::connect(a).await;
        r.send(&[0, 0, 0, 4]).await;
        assert!(r.frame().await.is_none(), "{a}: closed without a word");
        let mut r = Raw::connect(a).await;
        r.send(&[0, 0, 0, 9, 1, 2, 3, 4, 5]).await;
        let (tag, body) = r.frame().await.unwrap();
        assert_eq!((tag, error_code(&body).as_str()), (b'E', "0A000"), "{a}");
    }
    let c = app(addr(&h, "session")).await;
    assert_eq!(
        c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
}

/// Sends a CancelRequest and waits for the other side to close the connection, as
/// libpq does (so the server has acted on it when this returns).
async fn cancel_and_wait(a: std::net::SocketAddr, pid: i32, secret: i32) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
    let mut out = BytesMut::new();
    fe::cancel_request(pid, secret, &mut out);
    s.write_all(&out).await.unwrap();
    let mut b = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await;
    assert!(closed.is_ok(), "the cancel connection was closed");
}

/// Cancels sent at random moments against short statements, while other clients run
/// statements on the same few server connections: only a statement a cancel was aimed
/// at ever fails with 57014. A cancel that arrives after its statement finished must
/// not reach the client's next statement, nor another client's statement that the
/// pool gave the connection to meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_cancel_cancels_nothing_else() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    for listener in ["tx", "session"] {
        let a = addr(&h, listener);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut bystanders = Vec::new();
        for _ in 0..4 {
            let c = app(a).await;
            let stop = stop.clone();
            bystanders.push(tokio::spawn(async move {
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let sql = if n.is_multiple_of(2) {
                        "select pg_sleep(0.001)"
                    } else {
                        "select 1"
                    };
                    if let Err(e) = c.simple_query(sql).await {
                        panic!("a statement nobody cancelled failed: {e}");
                    }
                    n += 1;
                }
                n
            }));
        }
        let mut cancellers = Vec::new();
        for seed in 0..3u64 {
            cancellers.push(tokio::spawn(async move {
                use rand::{RngExt, SeedableRng};
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let mut r = Raw::login(a, APP_USER, APP_PW, "app").await;
                let mut cancelled = 0;
                for i in 0..150 {
                    let sleep = rng.random_range(1..4);
                    let delay = Duration::from_micros(rng.random_range(0..5000));
                    let (pid, secret) = (r.pid, r.secret);
                    let cancel = tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        cancel_and_wait(a, pid, secret).await;
                    });
                    let f = r.query(&format!("select pg_sleep(0.00{sleep})")).await;
                    if f.iter().any(|f| f.0 == b'E' && error_code(&f.1) == "57014") {
                        cancelled += 1;
                    }
                    cancel.await.unwrap();
                    // The cancel was aimed at the statement before this one.
                    let f = r.query(&format!("select {i}")).await;
                    let errors: Vec<String> = f
                        .iter()
                        .filter(|f| f.0 == b'E')
                        .map(|f| String::from_utf8_lossy(&f.1).into_owned())
                        .collect();
                    assert!(
                        errors.is_empty(),
                        "{listener}: statement {i} failed: {errors:?}"
                    );
                }
                cancelled
            }));
        }
        let mut cancelled = 0;
        for c in cancellers {
            cancelled += c.await.unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for b in bystanders {
            assert!(b.await.unwrap() > 0, "{listener}");
        }
        // In transaction mode a cancel reaches a statement on a shared connection only
        // while nothing is queued behind it, which this load makes rare.
        assert!(
            cancelled > 0 || listener == "tx",
            "{listener}: some cancels reached their statement"
        );
    }
}

/// A statement prepared before a table's column changed type fails with 0A000 ("cached
/// plan must not change result type"), as directly; a driver that then prepares it
/// again (asyncpg's statement cache) gets a fresh statement with the new types, and so
/// does every client that prepares it after that, however the pool shares statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_prepared_again_after_ddl_are_fresh() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    for (i, listener) in ["session", "tx"].into_iter().enumerate() {
        let a = addr(&h, listener);
        let c = app(a).await;
        let other = app(a).await;
        let t = format!("ddl{i}");
        c.batch_execute(&format!(
            "create table {t} (a int); insert into {t} values (1)"
        ))
        .await
        .unwrap();
        let sql = format!("select a from {t}");
        let old = c.prepare(&sql).await.unwrap();
        assert_eq!(old.columns()[0].type_(), &tokio_postgres::types::Type::INT4);
        let _ = other.query(&sql, &[]).await.unwrap();
        c.batch_execute(&format!("alter table {t} alter column a type text"))
            .await
            .unwrap();
        let e = c.query(&old, &[]).await.unwrap_err();
        assert_eq!(sqlstate(&e), "0A000", "{listener}: {e}");
        // Prepared again: the new result type, and it runs.
        let new = c.prepare(&sql).await.unwrap();
        assert_eq!(
            new.columns()[0].type_(),
            &tokio_postgres::types::Type::TEXT,
            "{listener}"
        );
        let rows = c.query(&new, &[]).await.unwrap();
        assert_eq!(rows[0].get::<_, String>(0), "1", "{listener}");
        // Another client preparing it now gets the new statement too.
        let theirs = other.prepare(&sql).await.unwrap();
        assert_eq!(
            theirs.columns()[0].type_(),
            &tokio_postgres::types::Type::TEXT,
            "{listener}"
        );
        for _ in 0..4 {
            let rows = other.query(&theirs, &[]).await.unwrap();
            assert_eq!(rows[0].get::<_, String>(0), "1", "{listener}");
        }
    }
}

/// The same with many clients at once in transaction mode, whose statements go to
/// shared connections too: each meets the stale copy once, as directly, and each one's
/// statement prepared again runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_statements_on_shared_connections() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let a = addr(&h, "tx");
    let setup = app(a).await;
    setup
        .batch_execute("create table ddl (a int); insert into ddl values (1)")
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..8 {
        let c = app(a).await;
        let old = c.prepare("select a from ddl").await.unwrap();
        c.query(&old, &[]).await.unwrap();
        clients.push((c, old));
    }
    setup
        .batch_execute("alter table ddl alter column a type text")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for (c, old) in clients {
        tasks.push(tokio::spawn(async move {
            // Until a client prepares again it may meet stale copies, as directly.
            let mut tries = 0;
            while let Err(e) = c.query(&old, &[]).await {
                assert_eq!(sqlstate(&e), "0A000", "{e}");
                tries += 1;
                if tries == 2 {
                    break;
                }
            }
            let new = c.prepare("select a from ddl").await.unwrap();
            for _ in 0..20 {
                let rows = c.query(&new, &[]).await.unwrap();
                assert_eq!(rows[0].get::<_, String>(0), "1");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// SET SESSION AUTHORIZATION then SET ROLE in transaction mode: the client keeps its
/// server connection while it runs as another user (a replay elsewhere could fail, or
/// run a statement as the wrong user), with both settings as it made them, until it
/// resets them; its other SETs follow it in the order it made them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_the_session_runs_as_stays_with_it() {
    let pg = pg();
    pg.psql(
        "postgres",
        "create role approle; grant approle to app; create role other login password 'x'",
    )
    .unwrap();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let a = addr(&h, "tx");
    let su = connect(a, pg.superuser(), pg.password(), "app")
        .await
        .unwrap();
    let hog = connect(a, pg.superuser(), pg.password(), "app")
        .await
        .unwrap();
    su.batch_execute("set session authorization app; set role approle; set search_path = public")
        .await
        .unwrap();
    let who = "select session_user::text, current_user::text, current_setting('search_path')";
    for i in 0..10 {
        // Another client holds a connection in a transaction meanwhile.
        hog.batch_execute(if i % 2 == 0 { "begin" } else { "commit" })
            .await
            .unwrap();
        let r = su.query_one(who, &[]).await.unwrap();
        assert_eq!(
            (r.get::<_, String>(0), r.get::<_, String>(1)),
            ("app".to_owned(), "approle".to_owned()),
            "statement {i}"
        );
        assert_eq!(r.get::<_, String>(2), "public");
    }
    hog.batch_execute("rollback").await.unwrap();
    su.batch_execute("reset role; reset session authorization")
        .await
        .unwrap();
    for _ in 0..4 {
        hog.batch_execute("begin").await.unwrap();
        let r = su.query_one(who, &[]).await.unwrap();
        assert_eq!(r.get::<_, String>(0), pg.superuser());
        assert_eq!(r.get::<_, String>(1), pg.superuser());
        assert_eq!(r.get::<_, String>(2), "public", "replayed elsewhere");
        hog.batch_execute("commit").await.unwrap();
    }
}

/// A table dropped and created again with another column type, through Sluice: a
/// statement prepared afterwards has the new parameter types (nothing fails to tell
/// that the copy prepared before is stale), as directly (asyncpg's codec tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_prepared_after_a_schema_change_see_it() {
    use tokio_postgres::types::Type;
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let a = addr(&h, "tx");
    let c = app(a).await;
    let other = app(a).await;
    c.batch_execute("create table sc (v date)").await.unwrap();
    let sql = "insert into sc values ($1)";
    assert_eq!(c.prepare(sql).await.unwrap().params(), [Type::DATE]);
    assert_eq!(other.prepare(sql).await.unwrap().params(), [Type::DATE]);
    c.batch_execute("drop table sc").await.unwrap();
    c.batch_execute("create table sc (v int4)").await.unwrap();
    assert_eq!(c.prepare(sql).await.unwrap().params(), [Type::INT4]);
    let s = other.prepare(sql).await.unwrap();
    assert_eq!(s.params(), [Type::INT4]);
    other.execute(&s, &[&7i32]).await.unwrap();
}
