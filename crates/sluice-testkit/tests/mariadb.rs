//! Integration tests for the throwaway MariaDB servers: the CLI helper, TCP
//! and TLS connections with mysql_async (TLS verified against the throwaway
//! CA), users with both password plugins, 16 MiB+ packets, two servers at
//! once, and kill / stop / restart.

use std::process::Command;
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder, SslOpts};
use sluice_testkit::{MariaDbOptions, MariaDbServer};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn opts(db: &MariaDbServer, user: &str, password: &str, ssl: Option<SslOpts>) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname(db.host())
        .tcp_port(db.port())
        .user(Some(user))
        .pass(Some(password))
        .db_name(Some("test"))
        .prefer_socket(false)
        .ssl_opts(ssl)
}

/// TLS trusting only the server's throwaway CA (hostname 127.0.0.1 verified).
fn kit_ca(db: &MariaDbServer) -> SslOpts {
    SslOpts::default()
        .with_root_certs(vec![db.tls_ca_pem().unwrap().to_path_buf().into()])
        .with_disable_built_in_roots(true)
}

async fn ssl_cipher(conn: &mut Conn) -> String {
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    row.unwrap().1
}

#[test]
fn start_cli_tcp_tls_users_and_big_packets() {
    // The first start may build the template; time the second.
    drop(MariaDbServer::start().unwrap());
    let t = Instant::now();
    let db = MariaDbServer::start().unwrap();
    eprintln!(
        "MariaDbServer::start() with the template in place: {:?}",
        t.elapsed()
    );

    assert_eq!(db.sql("select 1").unwrap().trim(), "1");
    assert_eq!(
        db.sql("select @@port, @@bind_address, @@log_bin, @@binlog_format, @@server_id, @@local_infile;")
            .unwrap()
            .trim(),
        format!("{}\t127.0.0.1\t1\tROW\t1\t1", db.port())
    );
    let err = db.sql("select * from no_such_table").unwrap_err();
    assert!(format!("{err:#}").contains("doesn't exist"), "{err:#}");
    assert!(db.socket_path().exists());
    assert!(db.data_dir().join("mysql").is_dir());
    assert!(db.pid().is_some());
    assert!(db.log_tail(50).contains("ready for connections"));
    db.create_database("other").unwrap();
    assert!(
        db.sql("show databases")
            .unwrap()
            .lines()
            .any(|l| l == "other")
    );

    db.create_user("app", "app-pw", "mysql_native_password")
        .unwrap();
    db.create_user("edu", "ed-pw", "ed25519").unwrap();
    db.create_user("edu2", "ed-pw2", "ed25519").unwrap();
    assert_eq!(
        db.sql("select user, plugin from mysql.user where user like 'ed%' or user = 'app' order by user")
            .unwrap(),
        "app\tmysql_native_password\nedu\ted25519\nedu2\ted25519\n"
    );

    // ed25519 over TCP with the mariadb CLI (libmariadb's client_ed25519).
    let out = Command::new("mariadb")
        .args(["--no-defaults", "--protocol=tcp", "-h", db.host()])
        .args([
            "-P",
            &db.port().to_string(),
            "-u",
            "edu",
            "-ped-pw",
            "-N",
            "-B",
        ])
        .args(["-e", "select current_user()"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "edu@%");

    rt().block_on(async {
        // Plain TCP as root.
        let mut conn = Conn::new(opts(&db, db.user(), db.password(), None))
            .await
            .unwrap();
        let one: Option<i64> = conn.query_first("SELECT 1").await.unwrap();
        assert_eq!(one, Some(1));
        assert_eq!(ssl_cipher(&mut conn).await, "");
        let who: Option<String> = conn.query_first("SELECT CURRENT_USER()").await.unwrap();
        assert_eq!(who.as_deref(), Some("root@127.0.0.1"));

        // Packets over 16 MiB both ways, and a big row in InnoDB.
        let big = "x".repeat(20 << 20);
        let len: Option<i64> = conn
            .query_first(format!("SELECT LENGTH('{big}')"))
            .await
            .unwrap();
        assert_eq!(len, Some(20 << 20));
        let back: Option<Vec<u8>> = conn
            .query_first("SELECT REPEAT('y', 17 * 1024 * 1024)")
            .await
            .unwrap();
        assert_eq!(back.map(|b| b.len()), Some(17 << 20));
        conn.query_drop("CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB")
            .await
            .unwrap();
        conn.exec_drop("INSERT INTO blobs VALUES (1, ?)", (big.as_bytes(),))
            .await
            .unwrap();
        let stored: Option<i64> = conn
            .query_first("SELECT LENGTH(b) FROM blobs WHERE id = 1")
            .await
            .unwrap();
        assert_eq!(stored, Some(20 << 20));
        conn.disconnect().await.unwrap();

        // TLS verified against the kit's CA.
        let mut conn = Conn::new(opts(&db, db.user(), db.password(), Some(kit_ca(&db))))
            .await
            .unwrap();
        assert_ne!(ssl_cipher(&mut conn).await, "");
        conn.disconnect().await.unwrap();

        // A certificate from an unknown CA is refused.
        let untrusted = SslOpts::default();
        let refused = Conn::new(opts(&db, db.user(), db.password(), Some(untrusted))).await;
        assert!(refused.is_err(), "TLS with the webpki roots only must fail");

        // The user created with mysql_native_password, over TLS.
        let mut conn = Conn::new(opts(&db, "app", "app-pw", Some(kit_ca(&db))))
            .await
            .unwrap();
        let who: Option<String> = conn.query_first("SELECT CURRENT_USER()").await.unwrap();
        assert_eq!(who.as_deref(), Some("app@%"));
        conn.disconnect().await.unwrap();

        // Wrong password.
        assert!(Conn::new(opts(&db, "app", "nope", None)).await.is_err());
    });
}

#[test]
fn two_servers_at_once_kill_stop_restart() {
    let (mut a, b) = std::thread::scope(|s| {
        let a = s.spawn(MariaDbServer::start);
        let b = s.spawn(|| {
            MariaDbServer::start_with(MariaDbOptions {
                tls: false,
                local_infile: false,
                binlog: false,
                extra_args: vec!["--max-connections=50".to_string()],
                handlersocket: false,
            })
        });
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    assert_ne!(a.port(), b.port());
    assert_ne!(a.password(), b.password());
    assert_ne!(a.data_dir(), b.data_dir());
    assert!(b.tls_ca_pem().is_none());
    assert_eq!(
        b.sql("select @@port, @@log_bin, @@local_infile, @@max_connections, @@have_ssl")
            .unwrap()
            .trim(),
        format!("{}\t0\t0\t50\tDISABLED", b.port())
    );
    rt().block_on(async {
        for db in [&a, &b] {
            let mut conn = Conn::new(opts(db, db.user(), db.password(), None))
                .await
                .unwrap();
            let port: Option<u16> = conn.query_first("SELECT @@port").await.unwrap();
            assert_eq!(port, Some(db.port()));
            conn.disconnect().await.unwrap();
        }
    });

    // Crash: committed rows survive, InnoDB recovers.
    a.sql("create table t (x int primary key) engine=innodb; insert into t values (1), (2);")
        .unwrap();
    let pid = a.pid().unwrap();
    a.kill();
    assert!(a.pid().is_none());
    assert!(a.sql("select 1").is_err());
    a.restart().unwrap();
    assert_ne!(a.pid(), Some(pid));
    assert_eq!(a.sql("select count(*) from t").unwrap().trim(), "2");

    // Clean stop and restart; same port and password, TCP still works.
    a.stop();
    assert!(a.pid().is_none());
    let t = Instant::now();
    a.restart().unwrap();
    eprintln!("restart after stop: {:?}", t.elapsed());
    assert_eq!(a.sql("select count(*) from t").unwrap().trim(), "2");
    rt().block_on(async {
        let mut conn = Conn::new(opts(&a, a.user(), a.password(), Some(kit_ca(&a))))
            .await
            .unwrap();
        assert_ne!(ssl_cipher(&mut conn).await, "");
        conn.disconnect().await.unwrap();
    });

    // Drop removes the directory and the process.
    let dir = b.data_dir().parent().unwrap().to_path_buf();
    let pid = b.pid().unwrap();
    drop(b);
    assert!(!dir.exists());
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn server_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<MariaDbServer>();
}

/// The reference HandlerSocket plugin answers on its read and write ports.
#[test]
fn handlersocket_plugin_serves_both_ports() {
    use std::io::{BufRead, BufReader, Write};
    let db = MariaDbServer::start_with(MariaDbOptions {
        handlersocket: true,
        ..MariaDbOptions::default()
    })
    .unwrap();
    db.sql("CREATE TABLE test.kv (k INT PRIMARY KEY, v VARCHAR(10)); INSERT INTO test.kv VALUES (1, 'a'), (2, NULL)")
        .unwrap();
    let (read, write) = db.handlersocket_ports().unwrap();
    let ask = |port: u16, lines: &[u8]| -> Vec<String> {
        let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        (&s).write_all(lines).unwrap();
        let n = lines.iter().filter(|&&b| b == b'\n').count();
        let mut r = BufReader::new(&s);
        (0..n)
            .map(|_| {
                let mut l = Vec::new();
                r.read_until(b'\n', &mut l).unwrap();
                String::from_utf8_lossy(&l).into_owned()
            })
            .collect()
    };
    let got = ask(
        read,
        b"P\t1\ttest\tkv\tPRIMARY\tk,v\n1\t>=\t1\t1\t10\t0\n1\t=\t1\t1\t1\t0\tU\t1\tb\nX\n",
    );
    assert_eq!(
        got,
        [
            "0\t1\n",
            "0\t2\t1\ta\t2\t\0\n",
            "2\t1\treadonly\n",
            "2\t1\tcmd\n"
        ]
    );
    let got = ask(write, b"P\t1\ttest\tkv\tPRIMARY\tk,v\n1\t+\t2\t3\tc\n");
    assert_eq!(got, ["0\t1\n", "0\t1\n"]);
    assert_eq!(
        db.sql("SELECT v FROM test.kv WHERE k = 3").unwrap().trim(),
        "c"
    );
}
