//! Process ids in transaction mode: a client is told a process id of Sluice's, and it
//! must agree with what `pg_backend_pid()` answers it, with the sender pid of its
//! notifications, and with what other clients can cancel and terminate.

use crate::common;
use common::*;
use std::time::Duration;

/// The first column of the first row of a simple query's answer, as text.
async fn value(r: &mut Raw, sql: &str) -> String {
    let f = r.query(sql).await;
    if let Some((_, e)) = f.iter().find(|f| f.0 == b'E') {
        panic!("{sql}: {}", String::from_utf8_lossy(e));
    }
    let (_, row) = f.iter().find(|f| f.0 == b'D').expect("a row");
    let len = i32::from_be_bytes(row[2..6].try_into().unwrap()) as usize;
    String::from_utf8_lossy(&row[6..6 + len]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_pid_and_notification_senders_agree() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 2, "5s", "")).await;
    let a = addr(&h, "tx");
    let mut notifier = Raw::login(a, APP_USER, APP_PW, "app").await;
    let pid = value(&mut notifier, "select pg_backend_pid()").await;
    assert_eq!(pid, notifier.pid.to_string(), "the pid the client was told");
    // The same through the extended protocol, and as a named column.
    let c = app(a).await;
    let row = c
        .query_one("select pg_backend_pid() as me", &[])
        .await
        .unwrap();
    assert!(row.get::<_, i32>("me") >= 1_000_000);
    // A listener inside a transaction gets its notifications when it ends it.
    let (listener, mut senders) = listening_client(a).await;
    listener.batch_execute("listen ch").await.unwrap();
    listener.batch_execute("begin").await.unwrap();
    notifier.query("notify ch").await;
    // Another client runs on the connection the notifier used, before the notification
    // reaches the listener: the sender is still the notifier.
    c.simple_query("select 1").await.unwrap();
    listener.batch_execute("commit").await.unwrap();
    let sender = tokio::time::timeout(Duration::from_secs(5), senders.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sender.to_string(), pid);
}

/// `victim` sends `query` (a long statement); `control` terminates it while it runs:
/// the victim gets the server's 57P01 and its session ends.
async fn terminated_while_running(control: &mut Raw, victim: &mut Raw, query: &[u8]) {
    victim.send(query).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sql = format!("select pg_terminate_backend({})", victim.pid);
    assert_eq!(value(control, &sql).await, "t");
    let f = victim.until_ready().await;
    assert!(
        f.iter().any(|f| f.0 == b'E' && error_code(&f.1) == "57P01"),
        "{f:?}"
    );
    assert!(victim.frame().await.is_none(), "the session ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cancel_and_terminate_each_other_by_pid() {
    let pg = pg();
    pg.psql("postgres", "create role stranger login password 'x'")
        .unwrap();
    let h = sluice(&config_text(&pg, 3, "5s", "")).await;
    let a = addr(&h, "tx");
    let mut control = Raw::login(a, APP_USER, APP_PW, "app").await;
    // A statement running on a server connection: cancelled, then its session ended.
    let mut victim = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut out = bytes::BytesMut::new();
    postgres_protocol::message::frontend::query("select pg_sleep(10)", &mut out).unwrap();
    victim.send(&out).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sql = format!("select pg_cancel_backend({})", victim.pid);
    assert_eq!(value(&mut control, &sql).await, "t");
    let f = victim.until_ready().await;
    assert!(
        f.iter().any(|f| f.0 == b'E' && error_code(&f.1) == "57014"),
        "{f:?}"
    );
    terminated_while_running(&mut control, &mut victim, &out).await;
    // A client whose statement runs on a shared connection (statements are shared
    // while another client holds a connection: here one inside a transaction): the
    // shared connection's end is its session's end, with the server's reason, not a
    // lost connection.
    let mut holder = Raw::login(a, APP_USER, APP_PW, "app").await;
    holder.query("begin").await;
    let mut shared = Raw::login(a, APP_USER, APP_PW, "app").await;
    terminated_while_running(&mut control, &mut shared, &out).await;
    holder.query("commit").await;
    // A client between statements (no server connection): another user may not end
    // it, the same user may.
    let mut idle = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut stranger = Raw::login(a, "stranger", "x", "app").await;
    let sql = format!("select pg_terminate_backend({})", idle.pid);
    assert_eq!(value(&mut stranger, &sql).await, "f");
    assert_eq!(value(&mut idle, "select 1").await, "1");
    assert_eq!(value(&mut control, &sql).await, "t");
    let (tag, body) = idle.frame().await.expect("a FATAL");
    assert_eq!((tag, error_code(&body).as_str()), (b'E', "57P01"));
    assert!(idle.frame().await.is_none(), "the session ended");
    // A terminate the server refuses (another user's, without the right) leaves a
    // client holding a server connection as it was.
    let mut busy = Raw::login(a, APP_USER, APP_PW, "app").await;
    busy.query("begin").await;
    let sql = format!("select pg_terminate_backend({})", busy.pid);
    let f = stranger.query(&sql).await;
    assert!(
        f.iter().any(|f| f.0 == b'E' && error_code(&f.1) == "42501"),
        "{f:?}"
    );
    assert_eq!(value(&mut busy, "select 3").await, "3");
    busy.query("commit").await;
    assert_eq!(value(&mut busy, "select 4").await, "4");
    // The control session goes on.
    assert_eq!(value(&mut control, "select 2").await, "2");
}

/// The same with the process id as a parameter (what drivers send for
/// `pg_terminate_backend(%s)`), in text and binary format, the client's own included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_ids_as_parameters() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 3, "5s", "")).await;
    let a = addr(&h, "tx");
    // Binary int4 (tokio-postgres): cancel another client's running statement.
    let control = app(a).await;
    let mut victim = Raw::login(a, APP_USER, APP_PW, "app").await;
    let mut out = bytes::BytesMut::new();
    postgres_protocol::message::frontend::query("select pg_sleep(10)", &mut out).unwrap();
    victim.send(&out).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ok: bool = control
        .query_one("select pg_cancel_backend($1)", &[&victim.pid])
        .await
        .unwrap()
        .get(0);
    assert!(ok);
    let f = victim.until_ready().await;
    assert!(
        f.iter().any(|f| f.0 == b'E' && error_code(&f.1) == "57014"),
        "{f:?}"
    );
    // Text format: a client ends its own session by the pid it was told.
    let me = app(a).await;
    let pid: i32 = me
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let e = me
        .query(
            "select pg_terminate_backend($1::text::int)",
            &[&pid.to_string()],
        )
        .await
        .unwrap_err();
    assert!(
        e.as_db_error().is_some_and(|d| d.code().code() == "57P01") || me.is_closed(),
        "{e}"
    );
    assert!(
        me.simple_query("select 1").await.is_err(),
        "the session ended"
    );
}
