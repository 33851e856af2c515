//! What real PostgreSQL drivers saw differently through Sluice than directly, each case
//! with a test: an error inside a pipelined batch, a backend terminated by the server,
//! junk instead of a startup packet. In session mode a client must not be able to tell
//! Sluice from the server; in transaction mode as little as pooling allows.

mod common;
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
    let admin = connect(
        addr(&h, "session"),
        pg.superuser(),
        pg.password(),
        "postgres",
    )
    .await
    .unwrap();
    for (listener, begin) in [("session", false), ("tx", true)] {
        let mut r = Raw::login(addr(&h, listener), APP_USER, APP_PW, "app").await;
        if begin {
            // In transaction mode the client holds its server connection only inside
            // a transaction.
            let f = r.query("begin").await;
            assert_eq!(f.last().map(|f| f.1.as_slice()), Some(&b"T"[..]));
        }
        let f = r.query("select pg_backend_pid()").await;
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
