//! Session pooling with pass-through auth against a real PostgreSQL server, driven by
//! tokio-postgres and a raw protocol client.

use crate::common;
use common::*;
use futures_util::{SinkExt, StreamExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_transactions_and_prepared_statements() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "5s", "")).await;
    let c = app(addr(&h, "session")).await;
    let rows = c.simple_query("select 1; select 'two'").await.unwrap();
    let n_rows = rows
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(n_rows, 2);
    c.batch_execute("create table t(id int primary key, v text)")
        .await
        .unwrap();
    let ins = c.prepare("insert into t values ($1, $2)").await.unwrap();
    for i in 0..20 {
        c.execute(&ins, &[&i, &format!("v{i}")]).await.unwrap();
    }
    let n: i64 = c
        .query_one("select count(*) from t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 20);
    c.batch_execute("begin; insert into t values (100, 'x'); rollback")
        .await
        .unwrap();
    let n: i64 = c
        .query_one("select count(*) from t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 20);
    // Pipelined extended-protocol queries: tokio-postgres sends them all before reading.
    let sel = c.prepare("select v from t where id = $1").await.unwrap();
    let ids: Vec<i32> = (0..20).collect();
    let params: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 1]> =
        ids.iter().map(|i| [i as _]).collect();
    let futs: Vec<_> = params.iter().map(|p| c.query_one(&sel, p)).collect();
    let got = futures_util::future::try_join_all(futs).await.unwrap();
    for (i, row) in got.iter().enumerate() {
        assert_eq!(row.get::<_, String>(0), format!("v{i}"));
    }
    let e = c.query_one("select 1/0", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    assert_eq!(
        c.query_one("select 3", &[]).await.unwrap().get::<_, i32>(0),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_both_directions() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "5s", "")).await;
    let c = app(addr(&h, "session")).await;
    c.batch_execute("create table c(a int, b text)")
        .await
        .unwrap();
    let sink = c.copy_in("copy c from stdin").await.unwrap();
    futures_util::pin_mut!(sink);
    let mut data = String::new();
    for i in 0..50_000 {
        data.push_str(&format!("{i}\tsome text {i}\n"));
    }
    // Chunks larger than Sluice's streaming threshold pass through in pieces.
    for chunk in data.as_bytes().chunks(200 * 1024) {
        sink.send(bytes::Bytes::copy_from_slice(chunk))
            .await
            .unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), 50_000);
    let stream = c.copy_out("copy c to stdout").await.unwrap();
    futures_util::pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(String::from_utf8(out).unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_pid_cancel_and_notify() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "5s", "")).await;
    let a = addr(&h, "session");
    // Session mode: BackendKeyData carries the server's real process id.
    let mut raw = Raw::login(a, APP_USER, APP_PW, "app").await;
    let frames = raw.query("select pg_backend_pid()").await;
    let row = frames.iter().find(|f| f.0 == b'D').unwrap();
    let pid: i32 = String::from_utf8_lossy(&row.1[6..]).parse().unwrap();
    assert_eq!(pid, raw.pid);

    // Cancel goes through Sluice to the right server connection.
    let c = app(a).await;
    let token = c.cancel_token();
    let other = app(a).await;
    let sleeper = tokio::spawn(async move { c.simple_query("select pg_sleep(30)").await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let e = sleeper.await.unwrap().unwrap_err();
    assert_eq!(sqlstate(&e), "57014");
    assert_eq!(
        other
            .query_one("select 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        1
    );

    // NOTIFY: the sender pid the listener sees is the sender's pg_backend_pid().
    let (listener, mut rx) = listening_client(a).await;
    listener.batch_execute("listen chan").await.unwrap();
    let sender_pid: i32 = other
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    other.batch_execute("notify chan, 'hi'").await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, sender_pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_and_login_errors() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "5s", "")).await;
    let a = addr(&h, "session");
    // options and client_min_messages reach the server.
    let s = format!(
        "{} options='-c work_mem=7MB' application_name=probe",
        connstr(a, APP_USER, APP_PW, "app")
    );
    let (c, conn) = tokio_postgres::connect(&s, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let wm: String = c.query_one("show work_mem", &[]).await.unwrap().get(0);
    assert_eq!(wm, "7MB");
    let an: String = c
        .query_one("show application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(an, "probe");
    // Unknown database: 3D000 as from the server.
    let e = connect(a, APP_USER, APP_PW, "nosuchdb").await.unwrap_err();
    assert_eq!(sqlstate(&e), "3D000");
    // Wrong password and unknown user: 28P01.
    let e = connect(a, APP_USER, "wrong", "app").await.unwrap_err();
    assert_eq!(sqlstate(&e), "28P01");
    let e = connect(a, "nobody", "x", "app").await.unwrap_err();
    assert_eq!(sqlstate(&e), "28P01");
    // A role created on the server logs in through pass-through with no config change.
    pg.create_user("fresh", "fresh-pw").unwrap();
    let c = connect(a, "fresh", "fresh-pw", "app").await.unwrap();
    let u: String = c
        .query_one("select current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(u, "fresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_is_reset_between_clients() {
    let pg = pg();
    // Configured-user pools reuse connections: the next client must not see the
    // previous one's state.
    let text = config_text(&pg, 1, "5s", "").replace(
        "pool = \"tx\"\nauth = \"scram-sha-256\"",
        "pool = \"session\"\nauth = \"scram-sha-256\"",
    );
    let h2 = sluice(&text).await;
    let a = addr(&h2, "txauth");
    let c = app(a).await;
    c.batch_execute("set work_mem = '3MB'; create temp table tt(a int); prepare p as select 1")
        .await
        .unwrap();
    let pid1: i32 = c
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    drop(c);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let c = app(a).await;
    let pid2: i32 = c
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(pid1, pid2, "pool of one reuses the connection");
    let wm: String = c.query_one("show work_mem", &[]).await.unwrap().get(0);
    assert_eq!(wm, "4MB");
    assert!(c.batch_execute("select * from tt").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_waits_for_a_client_that_reads_late() {
    // A client that does not read its answer for a while: Sluice stops reading the
    // server once a quarter MiB waits for the client, and reads on when the client
    // does (a lost wake-up there leaves the answer stuck for good: the session
    // listener's relay; the transaction-mode one's answer comes from a shared
    // connection, whose queue is bounded the same way).
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    for listener in ["session", "txauth"] {
        let mut r = Raw::login(addr(&h, listener), APP_USER, APP_PW, "app").await;
        let mut out = bytes::BytesMut::new();
        let sql = "select repeat('x', 200) from generate_series(1, 40000)";
        postgres_protocol::message::frontend::query(sql, &mut out).unwrap();
        r.send(&out).await;
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let wait = std::time::Duration::from_secs(20);
        let f = tokio::time::timeout(wait, r.until_ready())
            .await
            .unwrap_or_else(|_| panic!("{listener}: the answer stopped coming"));
        let rows = f.iter().filter(|f| f.0 == b'D').count();
        assert_eq!(rows, 40_000, "{listener}");
        let f = r.query("select 'after'").await;
        assert_eq!(f.iter().filter(|f| f.0 == b'D').count(), 1, "{listener}");
    }
}
