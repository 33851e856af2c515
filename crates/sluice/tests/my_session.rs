//! MySQL through Sluice in session mode with pass-through auth: text and binary
//! protocol, multi-statements with several result sets, 16 MiB+ packets both ways, TLS
//! towards the client, and the server's own errors for a wrong password or database.

use crate::common;

use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::*;
use mysql_async::{Conn, Row};

#[tokio::test]
async fn text_binary_multi_results_and_big_packets() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 4, "2s", "")).await;
    let a = addr(&h, "session");
    let mut c = connect(a).await;

    let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    // The connection id the client sees is the server's.
    let id: Option<u32> = c.query_first("SELECT CONNECTION_ID()").await.unwrap();
    assert_eq!(id, Some(c.id()));

    c.query_drop("CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(50), b LONGBLOB)")
        .await
        .unwrap();
    // Binary protocol: prepared statements with parameters.
    let stmt = c.prep("INSERT INTO t (v) VALUES (?)").await.unwrap();
    for i in 0..20 {
        c.exec_drop(&stmt, (format!("row {i}"),)).await.unwrap();
    }
    assert_eq!(c.last_insert_id(), Some(20));
    let rows: Vec<(i32, String)> = c
        .exec("SELECT id, v FROM t WHERE id > ? ORDER BY id", (15,))
        .await
        .unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0], (16, "row 15".to_string()));
    c.close(stmt).await.unwrap();

    // Several result sets from one COM_QUERY, with an OK in between.
    let mut result = c
        .query_iter("SELECT 1 AS a; UPDATE t SET v = 'x' WHERE id = 1; SELECT 2 AS b, 3 AS c")
        .await
        .unwrap();
    let first: Vec<Row> = result.collect().await.unwrap();
    assert_eq!(first.len(), 1);
    let _: Vec<Row> = result.collect().await.unwrap();
    let third: Vec<(i64, i64)> = result.collect().await.unwrap();
    assert_eq!(third, vec![(2, 3)]);
    drop(result);

    // An error in the middle of a multi-statement ends the answer; the session goes on.
    let err = c
        .query_drop("SELECT 1; SELECT * FROM no_such_table; SELECT 3")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no_such_table"), "{err}");
    let two: Option<i64> = c.query_first("SELECT 2").await.unwrap();
    assert_eq!(two, Some(2));

    // 20 MiB one way and back: split packets in both directions.
    let big: Vec<u8> = (0..20 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    c.exec_drop("UPDATE t SET b = ? WHERE id = 2", (big.clone(),))
        .await
        .unwrap();
    let back: Option<Vec<u8>> = c.query_first("SELECT b FROM t WHERE id = 2").await.unwrap();
    assert_eq!(back.as_deref().map(<[u8]>::len), Some(big.len()));
    assert!(back.unwrap() == big);
    let len: Option<i64> = c
        .exec_first("SELECT LENGTH(b) FROM t WHERE id = ?", (2,))
        .await
        .unwrap();
    assert_eq!(len, Some(big.len() as i64));

    c.ping().await.unwrap();
    c.reset().await.unwrap();
    c.query_drop("USE mysql").await.unwrap();
    let cur: Option<String> = c.query_first("SELECT DATABASE()").await.unwrap();
    assert_eq!(cur.as_deref(), Some("mysql"));
    c.disconnect().await.unwrap();
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn server_errors_reach_the_client() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 4, "2s", "")).await;
    let a = addr(&h, "session");
    let err = Conn::new(opts(a, APP_USER, "wrong", Some("test")))
        .await
        .unwrap_err();
    match err {
        mysql_async::Error::Server(e) => {
            assert_eq!((e.code, e.state.as_str()), (1045, "28000"), "{e:?}");
        }
        e => panic!("expected a server error, got {e}"),
    }
    let err = Conn::new(opts(a, "root", db.password(), Some("no_such_db")))
        .await
        .unwrap_err();
    match err {
        mysql_async::Error::Server(e) => assert_eq!(e.code, 1049, "{e:?}"),
        e => panic!("expected a server error, got {e}"),
    }
    // A user created on the server logs in without Sluice knowing it.
    db.create_user("late", "late-pw", "mysql_native_password")
        .unwrap();
    let mut c = Conn::new(opts(a, "late", "late-pw", None)).await.unwrap();
    let u: Option<String> = c.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(u.as_deref(), Some("late@%"));
    c.disconnect().await.unwrap();
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn tls_towards_the_client() {
    let db = mariadb();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = sluice_testkit::tls_files(dir.path()).expect("tls files");
    let extra = format!(
        r#"
[listeners.tls]
protocol = "mysql"
address = "127.0.0.1:0"
cluster = "my"
pool = "session"
auth = "passthrough"
tls = "require"
tls_cert_file = "{}"
tls_key_file = "{}"
"#,
        cert.display(),
        key.display()
    );
    let h = sluice(&config_text(&db, 4, "2s", &extra)).await;
    let a = addr(&h, "tls");
    let mut c = Conn::new(opts(a, APP_USER, APP_PW, Some("test")).ssl_opts(Some(tls_opts(&ca))))
        .await
        .unwrap();
    let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    c.disconnect().await.unwrap();
    // Without TLS the listener refuses.
    let err = Conn::new(opts(a, APP_USER, APP_PW, Some("test")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("insecure"), "{err}");
    // The SSLRequest and the ClientHello in one segment: the ClientHello must be left
    // for the TLS handshake, not read as data sent before it.
    for _ in 0..5 {
        let answer = login_tls_in_one_write(a, &ca, APP_USER, APP_PW).await;
        assert_eq!(answer.as_slice().first(), Some(&0), "{answer:?}");
    }
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn statistics_field_list_set_option_and_change_user() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 4, "2s", "")).await;
    let a = addr(&h, "session");
    let mut setup = connect(a).await;
    setup
        .query_drop("CREATE TABLE fl (a INT, b VARCHAR(3))")
        .await
        .unwrap();
    setup.disconnect().await.unwrap();
    let mut c = RawMy::login(a, APP_USER, APP_PW).await;
    // COM_STATISTICS: one string packet, not an OK.
    c.send(0, &[0x09]).await;
    let (_, p) = c.read().await.unwrap();
    assert!(String::from_utf8_lossy(&p).contains("Uptime"), "{p:?}");
    // COM_FIELD_LIST: column definitions, then EOF.
    c.send(0, b"\x04fl\0").await;
    let mut n = 0;
    loop {
        let (_, p) = c.read().await.unwrap();
        if p[0] == 0xfe && p.len() < 9 {
            break;
        }
        n += 1;
    }
    assert_eq!(n, 2);
    // COM_SET_OPTION (multi-statements off): EOF.
    c.send(0, &[0x1b, 1, 0]).await;
    let (_, p) = c.read().await.unwrap();
    assert!(p[0] == 0xfe || p[0] == 0, "{p:?}");
    assert!(c.ping_ok().await);
    // COM_CHANGE_USER through pass-through: mysql_async's change_user.
    let mut m = connect(a).await;
    db.create_user("second", "second-pw", "mysql_native_password")
        .unwrap();
    m.change_user(
        mysql_async::ChangeUserOpts::default()
            .with_user(Some("second".into()))
            .with_pass(Some("second-pw".into())),
    )
    .await
    .unwrap();
    let who: Option<String> = m.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(who.as_deref(), Some("second@%"));
    m.disconnect().await.unwrap();
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn connection_id_is_the_one_the_client_was_told() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 2, "2s", "")).await;
    for listener in ["tx", "session"] {
        let a = addr(&h, listener);
        let mut c = connect(a).await;
        let mut other = connect(a).await;
        let mine = u64::from(c.id());
        for round in 0..4 {
            // Another client in a transaction now and then: `c` runs on either
            // pooled connection.
            let step = if round % 2 == 0 { "BEGIN" } else { "COMMIT" };
            other.query_drop(step).await.unwrap();
            let id: Option<u64> = c.query_first("SELECT CONNECTION_ID()").await.unwrap();
            assert_eq!(id, Some(mine), "{listener}");
            let id: Option<u64> = c.exec_first("SELECT CONNECTION_ID()", ()).await.unwrap();
            assert_eq!(id, Some(mine), "{listener} prepared");
        }
        // The column keeps its name, as written.
        let r = c
            .query_iter("select connection_id(), 1 AS one")
            .await
            .unwrap();
        let names: Vec<String> = r
            .columns_ref()
            .iter()
            .map(|c| c.name_str().into_owned())
            .collect();
        assert_eq!(names, ["connection_id()", "one"], "{listener}");
        drop(r);
        // Inside an expression it is the connection running the statement: looking
        // oneself up in the process list works.
        let n: Option<u64> = c
            .query_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
            )
            .await
            .unwrap();
        assert_eq!(n, Some(1), "{listener}");
        other.disconnect().await.unwrap();
        c.disconnect().await.unwrap();
    }
    h.shutdown(std::time::Duration::from_secs(5)).await;
}
