//! Bad input on MySQL listeners: unknown commands, wrong sequence ids, packets over the
//! cap, garbage handshakes, a client vanishing mid-LOAD DATA, a server connection killed
//! mid-query, an exhausted pool. Each gets a MySQL error (or a clean close) and no other
//! client notices.

use crate::common;

use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::*;
use std::time::Duration;

#[tokio::test]
async fn unknown_command_wrong_sequence_and_oversized_packets() {
    let db = mariadb();
    let text = config_text(&db, 4, "1s", "").replace(
        "max_message_size = \"64MiB\"",
        "max_message_size = \"1MiB\"",
    );
    let h = sluice(&text).await;
    let a = addr(&h, "session");
    let mut bystander = connect(a).await;

    // Unknown command: ERR 1047, the connection stays usable.
    let mut c = RawMy::login(a, APP_USER, APP_PW).await;
    c.send(0, &[0x60, 1, 2, 3]).await;
    let (seq, code, _) = c.read_err().await;
    assert_eq!((seq, code), (1, 1047));
    // An empty command packet too.
    c.send(0, &[]).await;
    assert_eq!(c.read_err().await.1, 1047);
    assert!(c.ping_ok().await);
    // An empty packet and a 3-byte COM_QUERY in one write, in transaction mode: the
    // byte after the empty packet's header (3) belongs to the next packet and is no
    // command.
    let mut t = RawMy::login(addr(&h, "tx"), APP_USER, APP_PW).await;
    t.send_raw(&[0, 0, 0, 0, 3, 0, 0, 0, 0x03, b'D', b'O'])
        .await;
    assert_eq!(t.read_err().await.1, 1047);
    assert_eq!(t.read_err().await.1, 1064);
    assert!(t.ping_ok().await);

    // A new command must start at sequence id 0.
    c.send(5, &[0x0e]).await;
    let (_, code, msg) = c.read_err().await;
    assert_eq!(code, 1156, "{msg}");
    assert!(
        c.read().await.is_none(),
        "connection closed after a sequence error"
    );

    // Two commands under the cap, together over it: each is its own packet.
    let mut big = connect(a).await;
    for n in [700_000, 400_000] {
        let sql = format!("SELECT LENGTH('{}')", "x".repeat(n));
        let got: Option<i64> = big.query_first(sql).await.unwrap();
        assert_eq!(got, Some(n as i64));
    }
    big.disconnect().await.unwrap();

    // Over the cap: ERR 1153 before the packet's body is even read.
    let mut c = RawMy::login(a, APP_USER, APP_PW).await;
    let len = 2 << 20;
    c.send_raw(&[
        (len & 0xff) as u8,
        (len >> 8 & 0xff) as u8,
        (len >> 16) as u8,
        0,
        3,
    ])
    .await;
    let (_, code, _) = c.read_err().await;
    assert_eq!(code, 1153);
    assert!(c.read().await.is_none());

    // A truncated packet and a vanished client harm nobody.
    let mut c = RawMy::login(a, APP_USER, APP_PW).await;
    c.send_raw(&[50, 0, 0, 0, 3, b'S', b'E']).await;
    drop(c);

    // A garbage handshake response: ERR 1043 Bad handshake.
    let mut raw = RawMy {
        s: tokio::net::TcpStream::connect(a).await.unwrap(),
        buf: Default::default(),
        scramble: Vec::new(),
        id: 0,
    };
    raw.read().await.expect("greeting");
    raw.send(1, &[1, 2, 3]).await;
    let (seq, code, msg) = raw.read_err().await;
    assert_eq!((seq, code), (2, 1043), "{msg}");

    let one: Option<i64> = bystander.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    bystander.disconnect().await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn killed_server_connection_and_vanished_load_data_client() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 4, "1s", "")).await;
    let a = addr(&h, "session");
    let mut bystander = connect(a).await;
    bystander
        .query_drop("CREATE TABLE ld (a INT, b VARCHAR(20))")
        .await
        .unwrap();

    // The server connection of a client dies mid-query: that client gets 1927 (never a
    // client library's own 2013, which MariaDB Connector/C takes for a forgery).
    let mut victim = connect(a).await;
    let vid = victim.id();
    let q = tokio::spawn(async move {
        let r = victim.query_drop("SELECT SLEEP(20)").await;
        (r, victim)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    db.sql(&format!("KILL CONNECTION {vid}")).unwrap();
    let (r, _victim) = q.await.unwrap();
    let err = r.unwrap_err();
    assert!(
        matches!(&err, mysql_async::Error::Server(e) if e.code == 1927)
            || matches!(
                &err,
                mysql_async::Error::Io(_) | mysql_async::Error::Driver(_)
            ),
        "{err:?}"
    );

    // A client leaves in the middle of sending a LOAD DATA LOCAL file.
    let mut c = RawMy::login(a, APP_USER, APP_PW).await;
    let mut q = vec![3u8];
    q.extend_from_slice(b"LOAD DATA LOCAL INFILE 'x.csv' INTO TABLE ld FIELDS TERMINATED BY ','");
    c.send(0, &q).await;
    let (seq, p) = c.read().await.unwrap();
    assert_eq!(p[0], 0xfb, "server asks for the file");
    c.send(seq + 1, b"1,one\n2,two\n").await;
    drop(c);

    tokio::time::sleep(Duration::from_millis(200)).await;
    let n: Option<i64> = bystander.query_first("SELECT 7").await.unwrap();
    assert_eq!(n, Some(7));
    bystander.disconnect().await.unwrap();
    h.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn exhausted_pool_names_the_pool() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 1, "300ms", "")).await;
    let a = addr(&h, "tx");
    let mut holder = connect(a).await;
    let mut waiter = connect(a).await;
    holder.query_drop("BEGIN").await.unwrap();
    holder.query_drop("SELECT 1").await.unwrap();
    let err = waiter.query_drop("SELECT 2").await.unwrap_err();
    match err {
        mysql_async::Error::Server(e) => {
            assert_eq!(e.code, 1040, "{e:?}");
            assert!(e.message.contains("pool \"tx/app@test\""), "{}", e.message);
        }
        e => panic!("expected a server error, got {e}"),
    }
    holder.query_drop("COMMIT").await.unwrap();
    let two: Option<i64> = waiter.query_first("SELECT 2").await.unwrap();
    assert_eq!(two, Some(2));
    h.shutdown(Duration::from_secs(5)).await;
}
