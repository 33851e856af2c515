//! Session mode with `assign_server = "first_statement"`, against real servers: a client
//! logs in holding no server connection (more clients than the pool's size may wait
//! logged in), gets one at its first statement and keeps it; its startup parameters
//! reach that connection, and it knows itself by Sluice's process id, which
//! `pg_backend_pid()` and cancel requests answer to. Both protocols.

use crate::common;
use common::*;
use std::time::Duration;

const LAZY_PG: &str = r#"
[pools.lazy]
mode = "session"
assign_server = "first_statement"
size = 1
wait_timeout = "10s"

[listeners.lazy]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pg"
pool = "lazy"
auth = "scram-sha-256"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_clients_get_their_server_at_their_first_statement() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 1, "5s", LAZY_PG)).await;
    let a = addr(&h, "lazy");
    // The first login proves the user on a server connection, which goes back to the
    // pool: with a pool of one, three clients log in at once.
    let s = format!(
        "{} application_name=probe",
        connstr(a, APP_USER, APP_PW, "app")
    );
    let (first, conn) = tokio_postgres::connect(&s, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let second = app(a).await;
    let mut raw = Raw::login(a, APP_USER, APP_PW, "app").await;
    assert_eq!(app_backends(&pg), 1);

    // The first statement takes the pool's connection, with the client's startup
    // parameter on it, and the session keeps it with its state.
    first.batch_execute("set work_mem = '3MB'").await.unwrap();
    let an: String = first
        .query_one("show application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(an, "probe");
    // The second client's first statement waits for it.
    let waiting = tokio::spawn(async move {
        let pid: i32 = second
            .query_one("select pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let wm: String = second.query_one("show work_mem", &[]).await.unwrap().get(0);
        let an: String = second
            .query_one("show application_name", &[])
            .await
            .unwrap()
            .get(0);
        (pid, wm, an)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let wm: String = first.query_one("show work_mem", &[]).await.unwrap().get(0);
    assert_eq!(wm, "3MB");
    assert_eq!(app_backends(&pg), 1);
    drop(first);
    let (_, wm, an) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    // The same server connection, reset: none of the first client's state.
    assert_eq!((wm.as_str(), an.as_str()), ("4MB", ""));

    // Known by Sluice's process id: pg_backend_pid() says what BackendKeyData said,
    // and a cancel request with that key stops the client's statement.
    let frames = raw.query("select pg_backend_pid()").await;
    let row = frames.iter().find(|f| f.0 == b'D').unwrap();
    let pid: i32 = String::from_utf8_lossy(&row.1[6..]).parse().unwrap();
    assert_eq!(pid, raw.pid);
    drop(raw);
    let c = app(a).await;
    let token = c.cancel_token();
    let sleeper = tokio::spawn(async move { c.simple_query("select pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), sleeper)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(sqlstate(&e), "57014");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_clients_signal_and_notify_each_other_by_sluices_process_ids() {
    let pg = pg();
    let text = config_text(&pg, 1, "5s", LAZY_PG).replace("size = 1\nwait", "size = 4\nwait");
    let h = sluice(&text).await;
    let a = addr(&h, "lazy");
    let victim = app(a).await;
    let pid: i32 = victim
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let token = tokio::spawn(async move { victim.simple_query("select pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The process id as a parameter of a prepared statement (the relay keeps no
    // statement texts in session mode, but remembers this one).
    let other = app(a).await;
    let cancelled: bool = other
        .query_one("select pg_cancel_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(cancelled);
    let e = tokio::time::timeout(Duration::from_secs(10), token)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(sqlstate(&e), "57014");

    // A notification sent by a function (no NOTIFY in the client's text) carries
    // the sender's process id as the sender knows it.
    app(a)
        .await
        .batch_execute(
            "create function ping() returns void language sql as \
             $$ select pg_notify('chan', 'x') $$",
        )
        .await
        .unwrap();
    let (listener, mut rx) = listening_client(a).await;
    listener.batch_execute("listen chan").await.unwrap();
    let sender: i32 = other
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    other.batch_execute("select ping()").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, sender);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_client_that_waits_too_long_for_its_first_statement_is_told_and_goes_on() {
    let pg = pg();
    let text = config_text(&pg, 1, "5s", LAZY_PG)
        .replace("wait_timeout = \"10s\"", "wait_timeout = \"300ms\"");
    let h = sluice(&text).await;
    let a = addr(&h, "lazy");
    let holder = app(a).await;
    holder.batch_execute("select 1").await.unwrap();
    let late = app(a).await;
    let e = late.query_one("select 1", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "53300", "{e}");
    drop(holder);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let one: i32 = late.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_clients_get_their_server_at_their_first_statement() {
    use common::my::*;
    let db = mariadb();
    let h = sluice(&common::my::config_text(&db, 1, "5s", &lazy_my())).await;
    let a = addr(&h, "lazy");
    let backends = || app_backends_my(&db);
    // The first client's first statement takes the pool's connection; a second client
    // logs in all the same (with a server connection at login, it would wait).
    let mut first = RawMy::login(a, APP_USER, APP_PW).await;
    assert_eq!(first.query_value("set @x = 5").await, None);
    let mut second = RawMy::login(a, APP_USER, APP_PW).await;
    assert_eq!(backends(), 1);
    let waiting = tokio::spawn(async move {
        let x = second.query_value("select @x").await;
        let db = second.query_value("select database()").await;
        (x, db)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    assert_eq!(first.query_value("select @x").await.as_deref(), Some("5"));
    assert_eq!(backends(), 1);
    drop(first);
    let (x, db) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    // The same server connection, reset, in the client's database.
    assert_eq!(x, None);
    assert_eq!(db.as_deref(), Some("test"));
    assert_eq!(backends(), 1);
}

/// A session-mode MySQL listener `lazy` whose clients get their server connection at
/// their first statement, over a pool of one.
fn lazy_my() -> String {
    format!(
        r#"
[pools.lazy]
mode = "session"
assign_server = "first_statement"
size = 1
wait_timeout = "10s"

[users.app]
password = "{APP_PW}"

[listeners.lazy]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "my"
pool = "lazy"
auth = "mysql_native_password"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_drivers_log_in_and_read_their_settings_without_a_server_connection() {
    use common::my::*;
    use mysql_async::prelude::Queryable;
    let db = mariadb();
    let h = sluice(&common::my::config_text(&db, 1, "5s", &lazy_my())).await;
    let a = addr(&h, "lazy");
    // mysql_async reads @@max_allowed_packet and @@wait_timeout as it connects: the first
    // driver's read takes a server connection (its first statement), and the session
    // keeps it.
    let mut first = connect(a).await;
    assert_eq!(app_backends_my(&db), 1);
    // The next drivers' reads are answered with the answer it got: they log in holding
    // no server connection.
    let (mut second, third) = tokio::time::timeout(Duration::from_secs(5), async {
        (connect(a).await, connect(a).await)
    })
    .await
    .expect("drivers log in without a server connection");
    assert_eq!(app_backends_my(&db), 1);
    let read = "SELECT @@max_allowed_packet,@@wait_timeout";
    let theirs: Option<(u64, u64)> = second.query_first(read).await.unwrap();
    let servers: Option<(u64, u64)> = first.query_first(read).await.unwrap();
    assert!(servers.is_some());
    assert_eq!(theirs, servers);
    assert_eq!(app_backends_my(&db), 1);

    // The mariadb client's read as it starts (a client whose capabilities differ, so
    // another pool): the first asks a server, the next is answered alike without one.
    let mut raw = RawMy::login(a, APP_USER, APP_PW).await;
    let greeting = "select @@version_comment limit 1";
    let comment = raw.query_value(greeting).await;
    assert!(comment.is_some());
    assert_eq!(app_backends_my(&db), 2);
    let mut raw2 = RawMy::login(a, APP_USER, APP_PW).await;
    assert_eq!(raw2.query_value(greeting).await, comment);
    // Counted by the pools (SHOW POOLS' `answered`): two drivers' reads as they
    // connected, the second's own, the second raw client's.
    let answered: u64 = h
        .shared
        .my
        .pools
        .all()
        .iter()
        .map(|p| p.answers.given())
        .sum();
    assert_eq!(answered, 4);

    // Anything else is the session's first statement, which waits for a connection.
    let waiting = tokio::spawn(async move {
        let mut third = third;
        let _ = third.query_drop("select @@version_comment, now()").await;
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    assert_eq!(app_backends_my(&db), 2);
    waiting.abort();
}

/// Where the fixed-length fields of a column definition start: after its six names, and
/// after the extended type information where a client asked for MariaDB's.
fn after_names(def: &[u8]) -> usize {
    (0..6).fold(0, |i, _| i + 1 + usize::from(def[i]))
}

/// The column definition of `select 1 as x`.
async fn column(c: &mut common::my::RawMy) -> Vec<u8> {
    let mut q = vec![sluice_wire_mysql::consts::COM_QUERY];
    q.extend_from_slice(b"select 1 as x");
    c.send(0, &q).await;
    let (_, count) = c.read().await.expect("column count");
    assert_eq!(count, [1]);
    c.read().await.expect("column definition").1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_clients_with_and_without_extended_type_info_do_not_share_connections() {
    use common::my::*;
    use sluice_wire_mysql::consts::MARIADB_CLIENT_EXTENDED_TYPE_INFO;
    let db = mariadb();
    let h = sluice(&common::my::config_text(&db, 1, "5s", &lazy_my())).await;
    let a = addr(&h, "lazy");
    // A client that asks for MariaDB's extended type information gets it in every
    // column definition; the server connection Sluice opened for it logged in with it,
    // and goes back to the pool when the client leaves.
    let mut ext = RawMy::login_with(a, APP_USER, APP_PW, MARIADB_CLIENT_EXTENDED_TYPE_INFO).await;
    let def = column(&mut ext).await;
    assert_ne!(def[after_names(&def)], 0x0c, "{def:?}");
    drop(ext);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A client that does not ask for it gets column definitions without it: not that
    // connection.
    let mut plain = RawMy::login(a, APP_USER, APP_PW).await;
    let def = column(&mut plain).await;
    assert_eq!(def[after_names(&def)], 0x0c, "{def:?}");
}

/// A mysql_async client that runs `sets` as it connects (and, told the two settings it
/// would read, reads nothing).
async fn connect_setting(a: std::net::SocketAddr, sets: &[&str]) -> mysql_async::Conn {
    use mysql_async::prelude::Queryable;
    let o = common::my::opts(a, common::APP_USER, common::APP_PW, Some("test"))
        .max_allowed_packet(Some(16 << 20))
        .wait_timeout(Some(28800));
    let mut c = mysql_async::Conn::new(o)
        .await
        .expect("connect through sluice");
    for sql in sets {
        c.query_drop(*sql).await.expect("SET");
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_drivers_set_their_session_as_they_connect_without_a_server_connection() {
    use common::my::*;
    use mysql_async::prelude::Queryable;
    let db = mariadb();
    let h = sluice(&common::my::config_text(&db, 1, "5s", &lazy_my())).await;
    let a = addr(&h, "lazy");
    // What PyMySQL sends as it connects (mysqlclient: the last).
    let sets = ["SET NAMES latin1", "SET AUTOCOMMIT = 0"];
    // A first client's first SET takes the only server connection (its first
    // statement); the answers to both are kept, the second's as the answer after the
    // first.
    let mut first = connect_setting(a, &sets).await;
    assert_eq!(app_backends_my(&db), 1);
    // The next client's SETs are both answered as the first client's were, without a
    // server connection.
    let mut second = tokio::time::timeout(Duration::from_secs(5), connect_setting(a, &sets))
        .await
        .expect("a driver's SETs need no server connection");
    assert_eq!(app_backends_my(&db), 1);
    let answered: u64 = (h.shared.my.pools.all().iter())
        .map(|p| p.answers.given())
        .sum();
    assert_eq!(answered, 2);
    // Its first other statement waits for the connection, and finds both SETs made
    // there before it, as on the first client's.
    let read = "SELECT @@character_set_client, @@autocommit";
    let waiting = tokio::spawn(async move {
        let state: Option<(String, u8)> = second.query_first(read).await.unwrap();
        state
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let state: Option<(String, u8)> = first.query_first(read).await.unwrap();
    assert_eq!(state, Some(("latin1".into(), 0)));
    first.disconnect().await.unwrap();
    let state = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the second client gets the connection")
        .unwrap();
    assert_eq!(state, Some(("latin1".into(), 0)));

    // The answered OK says what the server's said: autocommit off. (Raw clients: a
    // pool of their own, whose first client takes its connection.)
    let mut raws = Vec::new();
    for _ in 0..2 {
        let mut raw = RawMy::login(a, APP_USER, APP_PW).await;
        let mut status = 0;
        for sql in sets {
            let mut q = vec![sluice_wire_mysql::consts::COM_QUERY];
            q.extend_from_slice(sql.as_bytes());
            raw.send(0, &q).await;
            let (_, ok) = raw.read().await.expect("OK");
            assert_eq!(ok[0], 0, "{ok:?}");
            status = u16::from_le_bytes([ok[3], ok[4]]);
        }
        assert_eq!(
            status & sluice_wire_mysql::consts::SERVER_STATUS_AUTOCOMMIT,
            0
        );
        raws.push(raw);
    }
    let answered: u64 = (h.shared.my.pools.all().iter())
        .map(|p| p.answers.given())
        .sum();
    assert_eq!(answered, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_set_answered_early_that_the_server_refuses_later_ends_the_session() {
    use common::my::*;
    use mysql_async::prelude::Queryable;
    let db = mariadb();
    let extra = lazy_my().replace("size = 1", "size = 2");
    let h = sluice(&common::my::config_text(&db, 1, "5s", &extra)).await;
    let a = addr(&h, "lazy");
    // A SET only a privileged user may make: the first client's takes a connection and
    // its answer is kept.
    let set = "SET SESSION sql_log_bin = 0";
    let _first = connect_setting(a, &[set]).await;
    // The privilege goes (for new logins); the next client's SET is answered as the
    // first's was, and refused by the server connection it takes at its next statement.
    db.sql("REVOKE ALL PRIVILEGES ON *.* FROM 'app'@'%'; GRANT SELECT ON *.* TO 'app'@'%'")
        .unwrap();
    let mut second = connect_setting(a, &[set]).await;
    let e = second.query_drop("SELECT 1").await.unwrap_err();
    assert!(
        e.to_string()
            .contains("restoring the session state on a server connection failed"),
        "{e}"
    );
    assert!(second.query_drop("SELECT 1").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_client_that_kills_its_own_connection_before_its_first_statement_is_told() {
    use common::my::*;
    use mysql_async::prelude::Queryable;
    let db = mariadb();
    let h = sluice(&common::my::config_text(&db, 1, "5s", &lazy_my())).await;
    let a = addr(&h, "lazy");
    // It holds no server connection: Sluice answers as the server would (1927), and
    // the session ends (MariaDB Connector/Python then reconnects).
    let mut c = connect_setting(a, &[]).await;
    let id = c.id();
    match c.query_drop(format!("KILL {id}")).await {
        Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1927, "{e:?}"),
        other => panic!("expected ERR 1927, got {other:?}"),
    }
    assert!(c.query_drop("SELECT 1").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_pings_and_resets_before_the_first_statement_need_no_server_connection() {
    use common::my::*;
    use mysql_async::prelude::Queryable;
    let db = mariadb();
    let h = sluice(&common::my::config_text(&db, 1, "5s", &lazy_my())).await;
    let a = addr(&h, "lazy");
    // The first client takes the only server connection (its SET's answer is kept).
    let sets = ["SET AUTOCOMMIT = 0"];
    let mut first = connect_setting(a, &sets).await;
    assert_eq!(app_backends_my(&db), 1);
    // The next one's SET is answered; a pool handing it out pings it, and resets it
    // when it comes back: answered too, without the connection the first one holds.
    let mut second = connect_setting(a, &sets).await;
    tokio::time::timeout(Duration::from_secs(5), async {
        second.ping().await.expect("ping");
        assert!(second.reset().await.expect("reset"));
        second.ping().await.expect("ping after the reset");
    })
    .await
    .expect("a ping and a reset need no server connection");
    assert_eq!(app_backends_my(&db), 1);
    // The reset forgot the SET: at its first statement, on the connection the first
    // client leaves, the session is as new (autocommit on), not as the SET left it.
    let first_state: Option<u8> = first.query_first("SELECT @@autocommit").await.unwrap();
    assert_eq!(first_state, Some(0));
    first.disconnect().await.unwrap();
    let state: Option<u8> = tokio::time::timeout(
        Duration::from_secs(5),
        second.query_first("SELECT @@autocommit"),
    )
    .await
    .expect("the second client gets the connection")
    .unwrap();
    assert_eq!(state, Some(1));
    // A raw client's ping: an OK with the session's status (autocommit on).
    let mut raw = RawMy::login(a, APP_USER, APP_PW).await;
    raw.send(0, &[sluice_wire_mysql::consts::COM_PING]).await;
    let (seq, ok) = raw.read().await.expect("OK");
    assert_eq!((seq, ok[0]), (1, 0), "{ok:?}");
    let status = u16::from_le_bytes([ok[3], ok[4]]);
    assert_ne!(
        status & sluice_wire_mysql::consts::SERVER_STATUS_AUTOCOMMIT,
        0
    );
}
