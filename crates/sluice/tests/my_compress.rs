//! The MySQL compressed protocol through Sluice: mysql_async with compression through
//! the session and transaction listeners (queries, results of several MiB, prepared
//! statements, a 20 MiB packet), the `mariadb` command-line client with --compress, a
//! raw client using zstd, clients that send what cannot be decompressed, and server
//! connections that use the compressed protocol themselves (`[servers] compression`).
//! A counting forwarder in front of Sluice shows that what reaches the client really is
//! compressed.

use crate::common;

use bytes::{Buf, BytesMut};
use common::my::*;
use common::{addr, sluice};
use mysql_async::prelude::*;
use mysql_async::{Compression, Conn};
use sluice_wire_mysql::compress::{self, Algorithm, Framer, Role};
use sluice_wire_mysql::consts::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A forwarder in front of `to` that counts the bytes sent to its clients.
struct Counted {
    addr: SocketAddr,
    down: Arc<AtomicU64>,
}

impl Counted {
    async fn start(to: SocketAddr) -> Counted {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let down = Arc::new(AtomicU64::new(0));
        let count = down.clone();
        tokio::spawn(async move {
            while let Ok((c, _)) = l.accept().await {
                let s = TcpStream::connect(to).await.unwrap();
                let (mut cr, mut cw) = c.into_split();
                let (mut sr, mut sw) = s.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    let _ = sw.shutdown().await;
                });
                let count = count.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        count.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    let _ = cw.shutdown().await;
                });
            }
        });
        Counted { addr, down }
    }

    fn take(&self) -> u64 {
        self.down.swap(0, Ordering::Relaxed)
    }
}

async fn compressed(a: SocketAddr) -> Conn {
    Conn::new(opts(a, APP_USER, APP_PW, Some("test")).compression(Compression::fast()))
        .await
        .expect("compressed connection through sluice")
}

/// What a compressed client must get right through `a`: queries, prepared statements,
/// several MiB of rows (split across compressed packets), a 20 MiB packet both ways.
async fn exercise(a: SocketAddr, table: &str) {
    let counted = Counted::start(a).await;
    let mut c = compressed(counted.addr).await;
    let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    c.query_drop(format!(
        "CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(100), b LONGBLOB)"
    ))
    .await
    .unwrap();
    let stmt = c
        .prep(format!("INSERT INTO {table} (id, v) VALUES (?, ?)"))
        .await
        .unwrap();
    for i in 0..50 {
        c.exec_drop(&stmt, (i, format!("row {i} {}", "pad".repeat(20))))
            .await
            .unwrap();
    }
    let rows: Vec<(i32, String)> = c
        .exec(
            format!("SELECT id, v FROM {table} WHERE id >= ? ORDER BY id"),
            (45,),
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0].1, format!("row 45 {}", "pad".repeat(20)));

    // 8 MiB of repeated text arrives in far fewer bytes.
    counted.take();
    let sizes: Vec<usize> = c
        .query_map(
            "SELECT REPEAT('x', 1048576) FROM seq_1_to_8",
            |v: Vec<u8>| v.len(),
        )
        .await
        .unwrap();
    assert_eq!(sizes, vec![1 << 20; 8]);
    let down = counted.take();
    assert!(
        down < 1 << 20,
        "8 MiB of rows took {down} bytes: not compressed"
    );

    // Several MiB that compress less: every row intact.
    let rows: Vec<(i64, String)> = c
        .query("SELECT seq, SHA2(seq, 512) FROM seq_1_to_40000")
        .await
        .unwrap();
    assert_eq!(rows.len(), 40_000);
    let check: Option<String> = c.query_first("SELECT SHA2(39999, 512)").await.unwrap();
    assert_eq!(rows[39_998], (39_999, check.unwrap()));

    // A 20 MiB packet one way and back.
    let big: Vec<u8> = (0..20 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    c.exec_drop(
        format!("UPDATE {table} SET b = ? WHERE id = 1"),
        (big.clone(),),
    )
    .await
    .unwrap();
    let back: Option<Vec<u8>> = c
        .query_first(format!("SELECT b FROM {table} WHERE id = 1"))
        .await
        .unwrap();
    assert!(back.unwrap() == big);
    c.close(stmt).await.unwrap();
    c.ping().await.unwrap();
    c.disconnect().await.unwrap();
}

#[tokio::test]
async fn mysql_async_compressed_in_both_modes() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 4, "5s", "")).await;
    exercise(addr(&h, "session"), "s").await;
    exercise(addr(&h, "tx"), "t").await;
    // Compressed and plain clients side by side in transaction mode.
    let a = addr(&h, "tx");
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut c = if i % 2 == 0 {
                compressed(a).await
            } else {
                connect(a).await
            };
            for j in 0..50 {
                let v: Option<String> = c
                    .exec_first("SELECT CONCAT(?, '-', REPEAT('y', 200))", (j,))
                    .await
                    .unwrap();
                assert_eq!(v.unwrap(), format!("{j}-{}", "y".repeat(200)));
            }
            c.disconnect().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn mariadb_cli_with_compress() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 2, "5s", "")).await;
    let counted = Counted::start(addr(&h, "session")).await;
    let port = counted.addr.port().to_string();
    let out = tokio::process::Command::new("mariadb")
        .args(["--compress", "-h", "127.0.0.1", "-P", &port, "-u", APP_USER])
        .arg(format!("-p{APP_PW}"))
        .args(["-N", "-B", "test", "-e"])
        .arg("SELECT LENGTH(REPEAT('a', 4000000)), REPEAT('b', 3000000); SELECT 'done'")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    let first = lines.next().unwrap();
    assert_eq!(first, format!("4000000\t{}", "b".repeat(3_000_000)));
    assert_eq!(lines.next(), Some("done"));
    let down = counted.take();
    assert!(
        down < 500_000,
        "3 MB of rows took {down} bytes: not compressed"
    );
}

/// A raw client that logs in asking for compression (`zstd_level`: zstd at that
/// level, else zlib), then speaks compressed packets.
struct RawCompressed {
    s: TcpStream,
    raw: BytesMut,
    framer: Framer,
}

impl RawCompressed {
    async fn login(a: SocketAddr, zstd_level: Option<u8>) -> RawCompressed {
        use sluice_wire_mysql::handshake::{HandshakeResponse41, HandshakeV10};
        let mut s = TcpStream::connect(a).await.unwrap();
        let mut buf = BytesMut::new();
        let greeting = read_plain(&mut s, &mut buf).await.unwrap().1;
        let hs = HandshakeV10::parse(&greeting).unwrap();
        let flag = match zstd_level {
            Some(_) => CLIENT_ZSTD_COMPRESSION_ALGORITHM,
            None => CLIENT_COMPRESS,
        };
        assert_ne!(hs.capabilities & flag, 0, "Sluice does not offer {flag:#x}");
        let caps = CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | CLIENT_LONG_PASSWORD
            | CLIENT_TRANSACTIONS
            | CLIENT_CONNECT_WITH_DB
            | flag;
        let resp = HandshakeResponse41 {
            capabilities: caps,
            max_packet: 1 << 24,
            charset: 45,
            username: APP_USER.as_bytes().to_vec(),
            auth_response: sluice_wire_mysql::auth::native_scramble(
                APP_PW.as_bytes(),
                hs.scramble(),
            )
            .to_vec(),
            database: Some(b"test".to_vec()),
            auth_plugin: Some(b"mysql_native_password".to_vec()),
            attrs: None,
        };
        let mut p = Vec::new();
        resp.encode(&mut p);
        p.extend(zstd_level);
        let mut out = Vec::new();
        sluice_wire_mysql::packet::write_packet(&mut out, &mut 1, &p);
        s.write_all(&out).await.unwrap();
        // The login's OK is not compressed; compression starts after it.
        let (_, ok) = read_plain(&mut s, &mut buf).await.unwrap();
        assert_eq!(ok[0], 0, "login failed: {ok:?}");
        let alg = Algorithm::negotiated(caps, zstd_level).unwrap();
        RawCompressed {
            s,
            raw: buf,
            framer: Framer::new(alg, Role::Client, 1 << 24),
        }
    }

    async fn send(&mut self, plain: &[u8]) {
        let mut out = BytesMut::new();
        let mut at = 0;
        while at < plain.len() {
            at += self.framer.encode(&plain[at..], &mut out);
        }
        self.s.write_all(&out).await.unwrap();
    }

    /// The next compressed packet's header and plain bytes; None at the end.
    async fn read(&mut self) -> Option<(compress::Header, Vec<u8>)> {
        loop {
            if let Some(h) = compress::header(&self.raw)
                && self.raw.len() >= h.frame_len()
            {
                let mut out = BytesMut::new();
                let n = self.framer.decode(&self.raw, &mut out).unwrap().unwrap();
                self.raw.advance(n);
                return Some((h, out.to_vec()));
            }
            let n = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                self.s.read_buf(&mut self.raw),
            )
            .await
            .expect("no answer within 20 s")
            .ok()?;
            if n == 0 {
                return None;
            }
        }
    }
}

async fn read_plain(s: &mut TcpStream, buf: &mut BytesMut) -> Option<(u8, Vec<u8>)> {
    loop {
        if let Some((len, seq)) = sluice_wire_mysql::packet::header(buf)
            && buf.len() >= 4 + len
        {
            let p = buf[4..4 + len].to_vec();
            buf.advance(4 + len);
            return Some((seq, p));
        }
        if s.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}

fn query(sql: &str) -> Vec<u8> {
    let mut p = vec![COM_QUERY];
    p.extend_from_slice(sql.as_bytes());
    let mut out = Vec::new();
    sluice_wire_mysql::packet::write_packet(&mut out, &mut 0, &p);
    out
}

#[tokio::test]
async fn zstd_clients_and_clients_that_send_garbage() {
    let db = mariadb();
    let h = sluice(&config_text(&db, 2, "5s", "")).await;
    let a = addr(&h, "tx");

    // zstd at the level the client asked for: the answer comes zstd-compressed (the
    // client's zstd framer would not read zlib).
    let mut z = RawCompressed::login(a, Some(7)).await;
    z.send(&query("SELECT REPEAT('z', 100000)")).await;
    let mut plain = Vec::new();
    let mut compressed_packets = 0;
    while plain.len() < 100_000 {
        let (h, p) = z.read().await.expect("answer");
        compressed_packets += usize::from(h.plain_len > 0);
        plain.extend(p);
    }
    assert!(compressed_packets > 0);
    assert!(plain.windows(1000).any(|w| w.iter().all(|&b| b == b'z')));

    for (what, garbage, code) in [
        // A payload that is not a zlib stream.
        (
            "not zlib",
            vec![10, 0, 0, 0, 100, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
            1157,
        ),
        // A stream that inflates to more than its header says.
        (
            "too long",
            {
                let mut out = BytesMut::new();
                compress::encode(
                    Algorithm::Zlib,
                    0,
                    &query(&"SELECT 1 ".repeat(20)),
                    &mut out,
                );
                out[4] = 60;
                out.to_vec()
            },
            1157,
        ),
        // A compressed sequence id out of order.
        (
            "out of order",
            {
                let mut out = BytesMut::new();
                compress::encode(Algorithm::Zlib, 9, &query("SELECT 1"), &mut out);
                out.to_vec()
            },
            1156,
        ),
    ] {
        let mut c = RawCompressed::login(a, None).await;
        c.send(&[1, 0, 0, 0, COM_PING]).await;
        let (_, ok) = c.read().await.expect("ping answered");
        assert_eq!(ok[4], 0, "{what}: {ok:?}");
        c.s.write_all(&garbage).await.unwrap();
        let (_, err) = c.read().await.unwrap_or_else(|| panic!("{what}: no error"));
        assert_eq!(err[4], 0xff, "{what}: {err:?}");
        assert_eq!(u16::from_le_bytes([err[5], err[6]]), code, "{what}");
        assert!(
            c.read().await.is_none(),
            "{what}: the connection stays open"
        );
    }
    // A client that leaves halfway through a compressed packet: no hang, no harm.
    let mut c = RawCompressed::login(a, None).await;
    c.s.write_all(&[200, 0, 0, 0, 0, 1, 0, 1, 2]).await.unwrap();
    drop(c);
    let mut other = connect(a).await;
    let v: Option<i64> = other.query_first("SELECT 41 + 1").await.unwrap();
    assert_eq!(v, Some(42));
}

#[tokio::test]
async fn server_connections_compressed() {
    let db = mariadb();
    let text = config_text(&db, 4, "5s", &own_auth_listeners("")).replace(
        &format!("port = {}\n", db.port()),
        &format!("port = {}\ncompression = \"zlib\"\n", db.port()),
    ) + &format!("\n[users.{APP_USER}]\npassword = \"{APP_PW}\"\n");
    let h = sluice(&text).await;
    for listener in ["session", "tx", "native"] {
        let a = addr(&h, listener);
        // A plain client: the server says its own connection is compressed, and the
        // packets Sluice relays keep the ids a plain client checks.
        let mut c = connect(a).await;
        c.query_drop("BEGIN").await.unwrap();
        let on: Option<(String, String)> = c
            .query_first("SHOW SESSION STATUS LIKE 'Compression'")
            .await
            .unwrap();
        assert_eq!(on.unwrap().1, "ON", "{listener}");
        c.query_drop("COMMIT").await.unwrap();
        let mut r = c
            .query_iter("SELECT 1; SELECT REPEAT('q', 300000) UNION ALL SELECT 'r'; DO 1; SELECT 3")
            .await
            .unwrap();
        let a1: Vec<i64> = r.collect().await.unwrap();
        let a2: Vec<String> = r.collect().await.unwrap();
        let _: Vec<mysql_async::Row> = r.collect().await.unwrap();
        let a4: Vec<i64> = r.collect().await.unwrap();
        drop(r);
        assert_eq!(
            (a1, a2.len(), a2[0].len(), a4),
            (vec![1], 2, 300_000, vec![3])
        );
        let ids: Vec<i64> = c
            .exec("SELECT seq FROM seq_1_to_5000 WHERE seq > ?", (10,))
            .await
            .unwrap();
        assert_eq!(ids.len(), 4990);
        c.disconnect().await.unwrap();
        // Both legs compressed, each its own.
        exercise(a, &format!("both_{listener}")).await;
    }
}

#[tokio::test]
async fn compressed_inside_tls() {
    let db = mariadb();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = sluice_testkit::tls_files(dir.path()).expect("tls files");
    let extra = format!(
        "\n[listeners.tls]\nprotocol = \"mysql\"\naddress = \"127.0.0.1:0\"\ncluster = \"my\"\npool = \"tx\"\nauth = \"passthrough\"\ntls = \"require\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let h = sluice(&config_text(&db, 4, "5s", &extra)).await;
    let counted = Counted::start(addr(&h, "tls")).await;
    let o = opts(counted.addr, APP_USER, APP_PW, Some("test"))
        .ssl_opts(Some(tls_opts(&ca)))
        .compression(Compression::fast());
    let mut c = Conn::new(o).await.unwrap();
    counted.take();
    let sizes: Vec<usize> = c
        .query_map(
            "SELECT REPEAT('t', 1048576) FROM seq_1_to_4",
            |v: Vec<u8>| v.len(),
        )
        .await
        .unwrap();
    assert_eq!(sizes, vec![1 << 20; 4]);
    let down = counted.take();
    assert!(
        down < 512 << 10,
        "4 MiB of rows took {down} bytes through TLS"
    );
    let v: Option<i64> = c.exec_first("SELECT ? * 2", (21,)).await.unwrap();
    assert_eq!(v, Some(42));
    c.disconnect().await.unwrap();
}

#[tokio::test]
async fn key_value_connections_compressed() {
    use tokio::io::AsyncBufReadExt;
    let db = mariadb();
    db.sql("CREATE TABLE test.big (id INT PRIMARY KEY, v MEDIUMTEXT); INSERT INTO test.big VALUES (1, REPEAT('k', 60000))")
        .unwrap();
    // Sluice reaches the server through a forwarder that counts what the server sends.
    let counted = Counted::start(SocketAddr::from(([127, 0, 0, 1], db.port()))).await;
    let text = format!(
        "[servers.my]\nprotocol = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\ncompression = \"zlib\"\n\n\
         [clusters.my]\nservers = [\"my\"]\n\n[handlersocket.hs]\naddress = \"127.0.0.1:0\"\n\
         cluster = \"my\"\nmode = \"read-only\"\nuser = \"{}\"\npassword = \"{}\"\nconnections = 1\n",
        counted.addr.port(),
        db.user(),
        db.password()
    );
    let h = sluice(&text).await;
    let s = TcpStream::connect(addr(&h, "hs")).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut r = tokio::io::BufReader::new(r);
    w.write_all(b"P\t1\ttest\tbig\tPRIMARY\tid,v\n")
        .await
        .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    assert_eq!(line, "0\t1\n");
    counted.take();
    for _ in 0..3 {
        w.write_all(b"1\t=\t1\t1\n").await.unwrap();
        line.clear();
        r.read_line(&mut line).await.unwrap();
        assert_eq!(line, format!("0\t2\t1\t{}\n", "k".repeat(60_000)));
    }
    let down = counted.take();
    assert!(
        down < 30_000,
        "three 60 kB rows took {down} bytes from the server"
    );
}
