//! Transaction pooling against a real PostgreSQL server: prepared statements across
//! pooled connections, the session-state ledger (SET replay, pins), pool exhaustion.

use crate::common;
use common::*;
use sluice::session::PinReason;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_share_a_small_pool_with_prepared_statements() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "10s", "")).await;
    let a = addr(&h, "txauth");
    let setup = app(a).await;
    setup
        .batch_execute("create table kv(k int primary key, v int); insert into kv select g, g * 10 from generate_series(1, 100) g")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for c in 0..24 {
        tasks.push(tokio::spawn(async move {
            let client = app(a).await;
            // More distinct statements than the per-connection cache holds (8).
            let mut stmts = Vec::new();
            for j in 0..12 {
                stmts.push(
                    client
                        .prepare(&format!("select v + {j} from kv where k = $1"))
                        .await
                        .unwrap(),
                );
            }
            for i in 0..40 {
                let k = ((c * 7 + i) % 100 + 1) as i32;
                let j = (i + c) % 12;
                if i % 5 == 0 {
                    client.batch_execute("begin").await.unwrap();
                    let v: i32 = client.query_one(&stmts[j], &[&k]).await.unwrap().get(0);
                    assert_eq!(v, k * 10 + j as i32);
                    client.batch_execute("commit").await.unwrap();
                } else {
                    let v: i32 = client.query_one(&stmts[j], &[&k]).await.unwrap().get(0);
                    assert_eq!(v, k * 10 + j as i32);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        app_backends(&pg) <= 2,
        "never more server connections than the pool size"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_is_replayed_per_client() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "10s", "")).await;
    let a = addr(&h, "txauth");
    let x = app(a).await;
    let y = app(a).await;
    x.batch_execute("set work_mem = '5MB'").await.unwrap();
    x.batch_execute("set search_path to public, pg_catalog")
        .await
        .unwrap();
    // Rolled back and LOCAL settings are not kept.
    x.batch_execute("begin; set statement_timeout = '7s'; rollback")
        .await
        .unwrap();
    x.batch_execute("begin; set local lock_timeout = '3s'; commit")
        .await
        .unwrap();
    x.batch_execute("begin; set idle_in_transaction_session_timeout = '9s'; commit")
        .await
        .unwrap();
    for _ in 0..10 {
        let wm: String = y.query_one("show work_mem", &[]).await.unwrap().get(0);
        assert_eq!(wm, "4MB");
        let wm: String = x.query_one("show work_mem", &[]).await.unwrap().get(0);
        assert_eq!(wm, "5MB");
        let sp: String = x.query_one("show search_path", &[]).await.unwrap().get(0);
        assert_eq!(sp, "public, pg_catalog");
        let st: String = x
            .query_one("show statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(st, "0");
        let lt: String = x.query_one("show lock_timeout", &[]).await.unwrap().get(0);
        assert_eq!(lt, "0");
        let it: String = x
            .query_one("show idle_in_transaction_session_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(it, "9s");
    }
    x.batch_execute("reset work_mem").await.unwrap();
    let _ = y.query_one("select 1", &[]).await.unwrap();
    let wm: String = x.query_one("show work_mem", &[]).await.unwrap().get(0);
    assert_eq!(wm, "4MB");
    // application_name is per client too.
    let s = format!(
        "{} application_name=xx",
        connstr(a, APP_USER, APP_PW, "app")
    );
    let (z, conn) = tokio_postgres::connect(&s, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let an: String = z
        .query_one("show application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(an, "xx");
    let an: String = y
        .query_one("show application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(an, "xx");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_state_keeps_the_connection() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "10s", "")).await;
    let a = addr(&h, "txauth");
    let x = app(a).await;
    let y = app(a).await;
    x.batch_execute("create temp table tmp(a int)")
        .await
        .unwrap();
    for i in 0..10 {
        y.query_one("select 1", &[]).await.unwrap();
        x.execute("insert into tmp values ($1)", &[&i])
            .await
            .unwrap();
    }
    let n: i64 = x
        .query_one("select count(*) from tmp", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 10);
    x.batch_execute("prepare q as select 42").await.unwrap();
    y.query_one("select 1", &[]).await.unwrap();
    let rows = x.simple_query("execute q").await.unwrap();
    assert!(!rows.is_empty());
    let pins = &h.shared.pins;
    assert_eq!(pins.get(PinReason::TempTable), 1);
    assert_eq!(pins.get(PinReason::SqlPrepare), 1);
    // Advisory locks and LISTEN pin too.
    y.query_one("select pg_advisory_lock(7)", &[])
        .await
        .unwrap();
    y.batch_execute("listen somewhere").await.unwrap();
    assert_eq!(pins.get(PinReason::AdvisoryLock), 1);
    assert_eq!(pins.get(PinReason::Listen), 1);
    // DISCARD ALL releases every pin.
    x.batch_execute("discard all").await.unwrap();
    assert!(x.query_one("select count(*) from tmp", &[]).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_and_deallocate_are_honoured() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "10s", "")).await;
    let a = addr(&h, "txauth");
    let x = app(a).await;
    let mut raw = Raw::login(a, APP_USER, APP_PW, "app").await;
    let s = x.prepare("select 1::int").await.unwrap();
    assert_eq!(x.query_one(&s, &[]).await.unwrap().get::<_, i32>(0), 1);
    drop(s); // tokio-postgres sends Close
    let s = x.prepare("select 1::int").await.unwrap();
    assert_eq!(x.query_one(&s, &[]).await.unwrap().get::<_, i32>(0), 1);
    // Named protocol statement, then SQL DEALLOCATE of it by name.
    use postgres_protocol::message::frontend;
    let mut out = bytes::BytesMut::new();
    frontend::parse("mine", "select 2", [], &mut out).unwrap();
    frontend::sync(&mut out);
    raw.send(&out).await;
    let f = raw.until_ready().await;
    assert_eq!(f[0].0, b'1');
    let f = raw.query("deallocate mine").await;
    assert_eq!(f[0].0, b'C');
    let mut out = bytes::BytesMut::new();
    sluice_wire_pg::encode::bind(&mut out, b"", b"mine", &[0, 0, 0, 0, 0, 0]);
    frontend::sync(&mut out);
    raw.send(&out).await;
    let f = raw.until_ready().await;
    assert_eq!(f[0].0, b'E');
    assert_eq!(error_code(&f[0].1), "26000");
    // DEALLOCATE ALL, then the client prepares again.
    x.batch_execute("deallocate all").await.unwrap();
    let s2 = x.prepare("select 3::int").await.unwrap();
    assert_eq!(x.query_one(&s2, &[]).await.unwrap().get::<_, i32>(0), 3);
    assert_eq!(
        x.query_one(&s, &[])
            .await
            .unwrap_err()
            .code()
            .map(|c| c.code()),
        Some("26000")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_pool_answers_53300_and_abandoned_transactions_roll_back() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "500ms", "")).await;
    let a = addr(&h, "txauth");
    let x = app(a).await;
    let y = app(a).await;
    x.batch_execute("create table t(a int)").await.unwrap();
    x.batch_execute("begin; insert into t values (1)")
        .await
        .unwrap();
    let e = y.query_one("select 1", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "53300");
    assert!(
        e.as_db_error().unwrap().message().contains("tx/app@app"),
        "{e}"
    );
    // The client keeps its connection and can retry.
    x.batch_execute("commit").await.unwrap();
    assert_eq!(
        y.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
    // A client vanishing mid-transaction: its work is rolled back, the pool goes on.
    x.batch_execute("begin; insert into t values (2)")
        .await
        .unwrap();
    drop(x);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let n: i64 = y
        .query_one("select count(*) from t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_transaction_mode_works() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 3, "10s", "")).await;
    let a = addr(&h, "tx");
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(app(a).await);
    }
    for round in 0..5 {
        for c in &clients {
            let v: i32 = c
                .query_one("select $1::int + 1", &[&round])
                .await
                .unwrap()
                .get(0);
            assert_eq!(v, round + 1);
        }
    }
    assert!(app_backends(&pg) <= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_name_the_sender_as_it_knows_itself() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 3, "10s", "")).await;
    let a = addr(&h, "txauth");
    let (listener, mut rx) = listening_client(a).await;
    listener.batch_execute("listen chan").await.unwrap();
    let mut notifier = Raw::login(a, APP_USER, APP_PW, "app").await;
    notifier.query("notify chan, 'hello'").await;
    let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got, notifier.pid,
        "the sender's pid as its BackendKeyData said"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_notifying_itself_sees_its_own_pid() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 3, "10s", "")).await;
    let mut c = Raw::login(addr(&h, "txauth"), APP_USER, APP_PW, "app").await;
    // LISTEN and NOTIFY in the statement that leases the connection.
    let frames = c.query("listen me; notify me, 'x'").await;
    let note = frames.iter().find(|f| f.0 == b'A').expect("a notification");
    let pid = i32::from_be_bytes(note.1[..4].try_into().unwrap());
    assert_eq!(pid, c.pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_queries_share_a_pipelined_connection() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "5s", "")).await;
    let a = addr(&h, "tx");
    let mut tasks = Vec::new();
    for t in 0..12i64 {
        tasks.push(tokio::spawn(async move {
            let c = connect(a, APP_USER, APP_PW, "app").await.unwrap();
            for i in 0..150i64 {
                let want = t * 1000 + i;
                let rows = c.simple_query(&format!("SELECT {want}")).await.unwrap();
                let got = rows.iter().find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                    _ => None,
                });
                assert_eq!(got, Some(want.to_string()));
                if i % 50 == 0 {
                    let e = c
                        .simple_query("SELECT * FROM no_such_table")
                        .await
                        .unwrap_err();
                    assert_eq!(
                        e.code(),
                        Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(h.shared.pg.muxes.statements() > 0, "nothing was pipelined");
    // Answers larger than the shared connection's read-ahead limit (1 MiB) come through
    // whole while clients take them at their own pace.
    let mut big = Vec::new();
    for _ in 0..4 {
        big.push(tokio::spawn(async move {
            let c = connect(a, APP_USER, APP_PW, "app").await.unwrap();
            for _ in 0..3 {
                let rows = c.simple_query("SELECT repeat('x', 3000000)").await.unwrap();
                let len = rows.iter().find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::len),
                    _ => None,
                });
                assert_eq!(len, Some(3_000_000));
            }
        }));
    }
    for t in big {
        t.await.unwrap();
    }
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_statements_share_a_pipelined_connection() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "5s", "")).await;
    // Sluice's own login: the pool can open connections without a client's help.
    let a = addr(&h, "txauth");
    let setup = app(a).await;
    let create = "create table named_kv(k int primary key, v text); \
                  insert into named_kv select g, 'v' || g from generate_series(1, 200) g";
    setup.batch_execute(create).await.unwrap();
    let mut clients = Vec::new();
    for t in 0..12 {
        let c = app(a).await;
        let by_key = c
            .prepare("select v from named_kv where k = $1")
            .await
            .unwrap();
        let divide = c.prepare("select 100 / $1::int").await.unwrap();
        clients.push(std::sync::Arc::new((c, by_key, divide, t)));
    }
    let run = |rounds: i32, want_error: Option<&'static str>| {
        let tasks: Vec<_> = clients
            .iter()
            .cloned()
            .map(|cl| {
                tokio::spawn(async move {
                    let (c, by_key, divide, t) = &*cl;
                    for i in 0..rounds {
                        let k = (t * 13 + i) % 200 + 1;
                        match (c.query_one(by_key, &[&k]).await, want_error) {
                            (Ok(row), None) => {
                                assert_eq!(row.get::<_, String>(0), format!("v{k}"))
                            }
                            (Err(e), Some(code)) => assert_eq!(sqlstate(&e), code),
                            (r, _) => panic!("round {i}: {r:?}, expected error {want_error:?}"),
                        }
                        if i % 25 == 0 {
                            // A failing statement answers its own client only.
                            let e = c.query_one(divide, &[&0i32]).await.unwrap_err();
                            assert_eq!(sqlstate(&e), "22012");
                            let n: i32 = c.query_one(divide, &[&4i32]).await.unwrap().get(0);
                            assert_eq!(n, 25);
                        }
                    }
                })
            })
            .collect();
        async move {
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    let before = h.shared.pg.muxes.statements();
    run(150, None).await;
    assert!(
        h.shared.pg.muxes.statements() > before,
        "no named statement was pipelined"
    );
    // The table goes: where a shared connection has to prepare the statement, the
    // prepare fails, its client gets the server's error (not a desync, not "statement
    // does not exist"), and the connection forgets the statement; with the table back,
    // every connection runs it again.
    // New server connections, which lack the statement.
    pg.psql(
        "postgres",
        "select pg_terminate_backend(pid) from pg_stat_activity where usename = 'app'",
    )
    .unwrap();
    // The pool checks a connection idle for a second or more before handing it out.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    setup.batch_execute("drop table named_kv").await.unwrap();
    run(30, Some("42P01")).await;
    setup.batch_execute(create).await.unwrap();
    run(60, None).await;
    drop(clients);
    h.shutdown(Duration::from_secs(5)).await;
}
