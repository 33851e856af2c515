//! MariaDB's bulk execution (COM_STMT_BULK_EXECUTE: one command carrying many rows of
//! parameters for a prepared statement, what MariaDB Connector/C, /J and /Python send
//! for `executemany`) through Sluice as directly, in both pool modes.

use crate::common;
use common::my::*;
use common::{addr, sluice};
use sluice_testkit::MariaDbServer;
use sluice_wire_mysql::consts;

/// Prepares `sql` and reads the answer through its parameter definitions: the
/// statement id and its number of parameters.
async fn prepare(c: &mut RawMy, sql: &str) -> (u32, u16) {
    c.send(0, &prepare_packet(sql)).await;
    let (_, ok) = c.read().await.expect("prepare answer");
    assert_eq!(ok[0], 0, "prepare: {}", String::from_utf8_lossy(&ok));
    let id = u32::from_le_bytes([ok[1], ok[2], ok[3], ok[4]]);
    let columns = u16::from_le_bytes([ok[5], ok[6]]);
    let params = u16::from_le_bytes([ok[7], ok[8]]);
    // Parameter and column definitions, each run ended by an EOF.
    for n in [params, columns] {
        if n > 0 {
            for _ in 0..=n {
                c.read().await.expect("definition");
            }
        }
    }
    (id, params)
}

/// A COM_STMT_BULK_EXECUTE of `(INT, VARCHAR)` rows; types sent when `types`.
fn bulk(id: u32, rows: &[(i32, &str)], types: bool) -> Vec<u8> {
    let mut p = vec![consts::COM_STMT_BULK_EXECUTE];
    p.extend_from_slice(&id.to_le_bytes());
    let flags = if types {
        consts::STMT_BULK_FLAG_SEND_TYPES_TO_SERVER
    } else {
        0
    };
    p.extend_from_slice(&flags.to_le_bytes());
    if types {
        // MYSQL_TYPE_LONG, MYSQL_TYPE_VAR_STRING, both signed.
        p.extend_from_slice(&[0x03, 0, 0xfd, 0]);
    }
    for (n, s) in rows {
        // Each value: its indicator (0: a value follows), then the value.
        p.push(0);
        p.extend_from_slice(&n.to_le_bytes());
        p.push(0);
        p.push(u8::try_from(s.len()).unwrap());
        p.extend_from_slice(s.as_bytes());
    }
    p
}

/// Affected rows of an OK packet (a one-byte length-encoded count here).
fn affected(ok: &[u8]) -> u8 {
    assert_eq!(ok[0], 0, "OK expected: {}", String::from_utf8_lossy(ok));
    ok[1]
}

/// A throwaway MariaDB with `table` (`(n INT PRIMARY KEY, s VARCHAR(20))` in
/// `test`) and Sluice in front (`pool` server connections a pool): the server, Sluice,
/// and the three ways in (directly, session mode, transaction mode).
async fn three_ways(
    table: &str,
    pool: usize,
) -> (
    MariaDbServer,
    sluice::server::Handle,
    [std::net::SocketAddr; 3],
) {
    let db = mariadb();
    db.sql(&format!(
        "CREATE TABLE test.{table} (n INT PRIMARY KEY, s VARCHAR(20))"
    ))
    .unwrap();
    let h = sluice(&config_text(&db, pool, "5s", "")).await;
    let direct = format!("127.0.0.1:{}", db.port()).parse().unwrap();
    let ways = [direct, addr(&h, "session"), addr(&h, "tx")];
    (db, h, ways)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_inserts_as_directly_in_both_modes() {
    // One server connection a pool: in transaction mode both clients use it.
    let (_db, _h, ways) = three_ways("bulk_t", 1).await;
    let bulk_cap = consts::MARIADB_CLIENT_STMT_BULK_OPERATIONS;
    for (i, a) in ways.into_iter().enumerate() {
        let base = i32::try_from(i).unwrap() * 100;
        let mut c = RawMy::login_with(a, APP_USER, APP_PW, bulk_cap).await;
        let (id, params) = prepare(&mut c, "INSERT INTO bulk_t VALUES (?, ?)").await;
        assert_eq!(params, 2);
        let rows = [(base + 1, "one"), (base + 2, "two"), (base + 3, "three")];
        c.send(0, &bulk(id, &rows, true)).await;
        let (_, ok) = c.read().await.expect("bulk answer");
        assert_eq!(affected(&ok), 3, "{a}");
        // Again without types: the server uses those sent before. In transaction mode
        // the connection may have run the statement for another client since, with
        // other types (both strings here): Sluice sends the client's own.
        if i == 2 {
            let mut other = RawMy::login_with(a, APP_USER, APP_PW, bulk_cap).await;
            let (oid, _) = prepare(&mut other, "INSERT INTO bulk_t VALUES (?, ?)").await;
            let mut p = vec![consts::COM_STMT_BULK_EXECUTE];
            p.extend_from_slice(&oid.to_le_bytes());
            p.extend_from_slice(&consts::STMT_BULK_FLAG_SEND_TYPES_TO_SERVER.to_le_bytes());
            p.extend_from_slice(&[0xfd, 0, 0xfd, 0]);
            let n = (base + 99).to_string();
            for v in [n.as_str(), "other"] {
                p.extend_from_slice(&[0, u8::try_from(v.len()).unwrap()]);
                p.extend_from_slice(v.as_bytes());
            }
            other.send(0, &p).await;
            let (_, ok) = other.read().await.expect("bulk answer");
            assert_eq!(affected(&ok), 1, "the other client's bulk");
        }
        let rows = [(base + 4, "four"), (base + 5, "five")];
        c.send(0, &bulk(id, &rows, false)).await;
        let (_, ok) = c.read().await.expect("bulk answer");
        assert_eq!(affected(&ok), 2, "{a}");
        // A duplicate key fails the command as directly, and the session goes on.
        c.send(0, &bulk(id, &[(base + 1, "again")], true)).await;
        let (_, err) = c.read().await.expect("bulk answer");
        assert_eq!(err[0], 0xff, "{a}: a duplicate is refused");
        assert_eq!(u16::from_le_bytes([err[1], err[2]]), 1062, "{a}");
        let sql = format!(
            "SELECT GROUP_CONCAT(s ORDER BY n) FROM bulk_t WHERE n > {base} AND n < {}",
            base + 50
        );
        assert_eq!(
            c.query_value(&sql).await.as_deref(),
            Some("one,two,three,four,five"),
            "{a}"
        );
    }
}

/// A COM_STMT_PREPARE's payload.
fn prepare_packet(sql: &str) -> Vec<u8> {
    let mut p = vec![consts::COM_STMT_PREPARE];
    p.extend_from_slice(sql.as_bytes());
    p
}

/// Commands (their payloads) as packets, to be sent in one write.
fn one_write(payloads: &[&[u8]]) -> bytes::BytesMut {
    let mut out = bytes::BytesMut::new();
    for p in payloads {
        sluice_wire_mysql::packet::write_packet(&mut out, &mut 0, p);
    }
    out
}

/// A COM_STMT_EXECUTE of statement `id` with `(INT, VARCHAR)` parameters.
fn execute(id: u32, n: i32, s: &str) -> Vec<u8> {
    let mut p = vec![consts::COM_STMT_EXECUTE];
    p.extend_from_slice(&id.to_le_bytes());
    // No cursor, one iteration, no NULLs, types bound.
    p.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, 0x03, 0, 0xfd, 0]);
    p.extend_from_slice(&n.to_le_bytes());
    p.push(u8::try_from(s.len()).unwrap());
    p.extend_from_slice(s.as_bytes());
    p
}

/// MariaDB's direct execution (what Connector/C does for a statement when the server
/// has bulk operations): a COM_STMT_PREPARE and, in the same write, an execute of
/// statement id 0xFFFFFFFF, "the one just prepared". Through the transaction pool,
/// whose statement ids are Sluice's own, it runs as directly; after a failed prepare
/// the execute fails as directly too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_execution_runs_as_directly_in_both_modes() {
    let (_db, _h, ways) = three_ways("direct_t", 2).await;
    let bulk_cap = consts::MARIADB_CLIENT_STMT_BULK_OPERATIONS;
    for (i, a) in ways.into_iter().enumerate() {
        let n = i32::try_from(i).unwrap();
        let mut c = RawMy::login_with(a, APP_USER, APP_PW, bulk_cap).await;
        let prep = prepare_packet("INSERT INTO direct_t VALUES (?, ?)");
        c.send_raw(&one_write(&[&prep, &execute(u32::MAX, n, "x")]))
            .await;
        let (_, ok) = c.read().await.expect("prepare answer");
        assert_eq!(ok[0], 0, "{a}: {}", String::from_utf8_lossy(&ok));
        let first = u32::from_le_bytes([ok[1], ok[2], ok[3], ok[4]]);
        for _ in 0..3 {
            c.read().await.expect("parameter definitions and their EOF");
        }
        let (_, ok) = c.read().await.expect("execute answer");
        assert_eq!(affected(&ok), 1, "{a}");
        // The same text again, its first statement closed (as Connector/C's
        // executemany does): in transaction mode the connection's cache closes its own
        // older copy, a packet no answer follows, as the new one comes.
        let mut close = vec![consts::COM_STMT_CLOSE];
        close.extend_from_slice(&first.to_le_bytes());
        let again = execute(u32::MAX, n + 10, "z");
        c.send_raw(&one_write(&[&close, &prep, &again])).await;
        for _ in 0..4 {
            c.read()
                .await
                .expect("prepare answer and parameter definitions");
        }
        let (_, ok) = c.read().await.expect("execute answer");
        assert_eq!(affected(&ok), 1, "{a}");
        // A prepare that fails: the execute behind it names nothing.
        let prep = prepare_packet("INSERT INTO no_such_table VALUES (?, ?)");
        c.send_raw(&one_write(&[&prep, &execute(u32::MAX, n, "y")]))
            .await;
        for code in [1146, 1243] {
            let (_, err) = c.read().await.expect("an answer");
            assert_eq!(err[0], 0xff, "{a}: {}", String::from_utf8_lossy(&err));
            assert_eq!(u16::from_le_bytes([err[1], err[2]]), code, "{a}");
        }
        let sql = format!("SELECT s FROM direct_t WHERE n = {n}");
        assert_eq!(c.query_value(&sql).await.as_deref(), Some("x"), "{a}");
    }
}

/// A prepare that Sluice refuses itself (a rule blocks it) never reaches a server, which
/// would run its own last prepared statement for the execute of 0xFFFFFFFF behind it:
/// that execute gets the server's "unknown handler" error from Sluice, in both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_execution_after_a_refused_prepare_runs_nothing() {
    let db = mariadb();
    db.sql("CREATE TABLE test.refused_t (n INT PRIMARY KEY, s VARCHAR(20))")
        .unwrap();
    let rule = "[[rules]]\npattern = \"^DELETE \"\naction = \"block\"\nmessage = \"no deletes\"\n";
    let h = sluice(&config_text(&db, 2, "5s", rule)).await;
    let bulk_cap = consts::MARIADB_CLIENT_STMT_BULK_OPERATIONS;
    for (i, listener) in ["session", "tx"].into_iter().enumerate() {
        let n = i32::try_from(i).unwrap();
        let mut c = RawMy::login_with(addr(&h, listener), APP_USER, APP_PW, bulk_cap).await;
        // A statement the server has prepared, then one the rule refuses.
        let (_, params) = prepare(&mut c, "INSERT INTO refused_t VALUES (?, ?)").await;
        assert_eq!(params, 2);
        let refused = prepare_packet("DELETE FROM refused_t WHERE n = ? OR s = ?");
        c.send_raw(&one_write(&[&refused, &execute(u32::MAX, n, "x")]))
            .await;
        let (_, err) = c.read().await.expect("the rule's answer");
        assert_eq!(err[0], 0xff, "{listener}");
        let (_, err) = c.read().await.expect("the execute's answer");
        assert_eq!(
            err[0],
            0xff,
            "{listener}: {}",
            String::from_utf8_lossy(&err)
        );
        assert_eq!(u16::from_le_bytes([err[1], err[2]]), 1243, "{listener}");
        let sql = format!("SELECT COUNT(*) FROM refused_t WHERE n = {n}");
        assert_eq!(
            c.query_value(&sql).await.as_deref(),
            Some("0"),
            "{listener}"
        );
    }
}

/// A pass-through login's server connection serves the transaction pool's other
/// clients afterwards: opened for a client without bulk operations, it still takes a
/// bulk execute of one that has them (the server refuses it, 1295, on a connection that
/// did not ask for them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_connection_takes_bulk_executes_of_later_clients() {
    let (_db, _h, ways) = three_ways("later_t", 1).await;
    let tx = ways[2];
    let mut first = RawMy::login(tx, APP_USER, APP_PW).await;
    assert_eq!(first.query_value("SELECT 7").await.as_deref(), Some("7"));
    let bulk_cap = consts::MARIADB_CLIENT_STMT_BULK_OPERATIONS;
    let mut c = RawMy::login_with(tx, APP_USER, APP_PW, bulk_cap).await;
    let (id, _) = prepare(&mut c, "INSERT INTO later_t VALUES (?, ?)").await;
    c.send(0, &bulk(id, &[(1, "a"), (2, "b")], true)).await;
    let (_, ok) = c.read().await.expect("bulk answer");
    assert_eq!(affected(&ok), 2);
}
