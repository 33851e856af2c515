//! The HandlerSocket path under load and failure: many connections pipelining lookups
//! and writes at once (answers checked one by one, the table checked afterwards, and
//! lookups grouped into shared statements), a server that dies under a client, secrets,
//! limits and TLS, on MariaDB (the PostgreSQL cases are in hs_kv_pg.rs).

use crate::common;
use crate::common::hs_lines as lines;

use lines::{ask, client};
use sluice_testkit::MariaDbServer;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn config(db: &MariaDbServer, connections: usize) -> String {
    let hs = |name: &str, mode: &str| {
        format!(
            "[handlersocket.{name}]\naddress = \"127.0.0.1:0\"\ncluster = \"my\"\nmode = \"{mode}\"\n\
             user = \"{}\"\npassword = \"{}\"\nconnections = {connections}\n",
            db.user(),
            db.password()
        )
    };
    format!(
        "[servers.my]\nprotocol = \"mysql\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
         [clusters.my]\nservers = [\"my\"]\n\n{}\n{}",
        db.port(),
        hs("hs_read", "read-only"),
        hs("hs_write", "read-write")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_pipelining_lookups_and_writes() {
    let db = common::my::mariadb();
    let mut setup = String::from(
        "CREATE TABLE test.users (id INT PRIMARY KEY, name VARCHAR(20), hits INT NOT NULL DEFAULT 0);\
         CREATE TABLE test.log (id INT AUTO_INCREMENT PRIMARY KEY, who INT, what VARCHAR(20));\
         INSERT INTO test.users (id, name) VALUES ",
    );
    let rows: Vec<String> = (1..=500).map(|i| format!("({i}, 'user{i}')")).collect();
    setup.push_str(&rows.join(","));
    db.sql(&setup).unwrap();
    let h = common::sluice(&config(&db, 2)).await;
    let (read, write) = (common::addr(&h, "hs_read"), common::addr(&h, "hs_write"));

    let mut tasks = Vec::new();
    for c in 0..16u32 {
        tasks.push(tokio::spawn(async move {
            let mut r = client(read).await;
            let mut w = client(write).await;
            let open = ask(&mut r, &["P\t1\ttest\tusers\tPRIMARY\tid,name,hits".into()]).await;
            assert_eq!(open, ["0\t1"]);
            let open = ask(
                &mut w,
                &[
                    "P\t1\ttest\tusers\tPRIMARY\thits".into(),
                    "P\t2\ttest\tlog\tPRIMARY\twho,what".into(),
                ],
            )
            .await;
            assert_eq!(open, ["0\t1", "0\t1"]);
            for round in 0..10u32 {
                // 40 pipelined lookups, some of missing keys.
                let keys: Vec<u32> = (0..40)
                    .map(|k| (c * 131 + round * 17 + k * 7) % 600 + 1)
                    .collect();
                let lines: Vec<String> = keys.iter().map(|k| format!("1\t=\t1\t{k}")).collect();
                let got = ask(&mut r, &lines).await;
                for (k, a) in keys.iter().zip(&got) {
                    if *k <= 500 {
                        let want = format!("0\t3\t{k}\tuser{k}\t");
                        assert!(a.starts_with(&want), "key {k}: {a:?}");
                    } else {
                        assert_eq!(a, "0\t3", "key {k}");
                    }
                }
                // Writes: an increment of one counter and an insert, pipelined.
                let id = (c * 10 + round) % 500 + 1;
                let got = ask(
                    &mut w,
                    &[
                        format!("1\t=\t1\t{id}\t1\t0\t+\t1"),
                        format!("2\t+\t2\t{c}\tround{round}"),
                    ],
                )
                .await;
                assert_eq!(got[0], "0\t1\t1");
                assert!(got[1].starts_with("0\t1\t"), "{got:?}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let sum = db
        .sql("SELECT SUM(hits), COUNT(*) FROM test.users")
        .unwrap();
    assert_eq!(sum.trim(), "160\t500");
    let log = db
        .sql("SELECT COUNT(*), COUNT(DISTINCT id) FROM test.log")
        .unwrap();
    assert_eq!(log.trim(), "160\t160");
    let stats = &h.kv("hs_read").unwrap().stats;
    let (grouped, requests) = (
        stats.grouped.load(Ordering::Relaxed),
        stats.requests.load(Ordering::Relaxed),
    );
    assert_eq!(requests, 16 * 10 * 40);
    assert!(
        grouped >= requests / 2,
        "only {grouped} of {requests} lookups were grouped"
    );
    // The console shows the same counters.
    let Ok(sluice::admin::Reply::Rows(t)) = sluice::admin::execute(&h.shared, "SHOW STATS").await
    else {
        panic!("SHOW STATS answers a table");
    };
    let row = t
        .rows
        .iter()
        .find(|r| {
            r[0].text().as_deref() == Some("handlersocket")
                && r[1].text().as_deref() == Some("hs_read")
        })
        .expect("a handlersocket row");
    assert_eq!(row[3].text(), Some(requests.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_gives_error_lines_and_the_connection_stays() {
    let mut db = common::my::mariadb();
    db.sql(
        "CREATE TABLE test.t (k INT PRIMARY KEY, v VARCHAR(5)); INSERT INTO test.t VALUES (1, 'a')",
    )
    .unwrap();
    let h = common::sluice(&config(&db, 1)).await;
    let mut c = client(common::addr(&h, "hs_write")).await;
    let lines = [
        "P\t1\ttest\tt\tPRIMARY\tk,v".to_string(),
        "1\t=\t1\t1".to_string(),
    ];
    assert_eq!(ask(&mut c, &lines).await, ["0\t1", "0\t2\t1\ta"]);
    db.kill();
    let got = ask(
        &mut c,
        &["1\t=\t1\t1".into(), "1\t+\t2\t2\tb".into(), "X".into()],
    )
    .await;
    assert_eq!(got, ["1\t1\tserver_gone", "1\t1\tserver_gone", "2\t1\tcmd"]);
    db.restart().unwrap();
    // The next batch opens a new server connection; the open index is still there.
    assert_eq!(ask(&mut c, &["1\t=\t1\t1".into()]).await, ["0\t2\t1\ta"]);
    assert_eq!(ask(&mut c, &["1\t+\t2\t2\tb".into()]).await, ["0\t1"]);
    assert_eq!(
        db.sql("SELECT v FROM test.t WHERE k = 2").unwrap().trim(),
        "b"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_and_limits() {
    let db = common::my::mariadb();
    db.sql(
        "CREATE TABLE test.t (k INT PRIMARY KEY, v VARCHAR(5)); INSERT INTO test.t VALUES (1, 'a')",
    )
    .unwrap();
    let extra = "secret = \"s3cret\"\nmax_line_length = 100\nmax_open_indexes = 4\nmax_client_connections = 2\n";
    let text = config(&db, 1).replace("connections = 1\n", &format!("connections = 1\n{extra}"));
    let h = common::sluice(&text).await;
    let a = common::addr(&h, "hs_read");
    let mut c = client(a).await;
    // Before auth: P and exec refused, unknown commands still `cmd`; a wrong type, a
    // wrong key; then the right one.
    let got = ask(
        &mut c,
        &[
            "P\t1\ttest\tt\tPRIMARY\tk,v".into(),
            "1\t=\t1\t1".into(),
            "Z".into(),
            "A\t2\ts3cret".into(),
            "A\t1\twrong".into(),
            "P\t1\ttest\tt\tPRIMARY\tk,v".into(),
            "A\t1\ts3cret".into(),
            "P\t1\ttest\tt\tPRIMARY\tk,v".into(),
            "1\t=\t1\t1".into(),
            "P\t4\ttest\tt\tPRIMARY\tk,v".into(),
        ],
    )
    .await;
    assert_eq!(
        got,
        [
            "3\t1\tunauth",
            "3\t1\tunauth",
            "2\t1\tcmd",
            "3\t1\tauthtype",
            "3\t1\tunauth",
            "3\t1\tunauth",
            "0\t1",
            "0\t1",
            "0\t2\t1\ta",
            "2\t1\tstmtnum",
        ]
    );
    // A failed A takes the authorisation back.
    let got = ask(&mut c, &["A\t1\tnope".into(), "1\t=\t1\t1".into()]).await;
    assert_eq!(got, ["3\t1\tunauth", "3\t1\tunauth"]);
    // A third client is over the listener's cap: closed at once.
    let mut second = client(a).await;
    // Served (and counted) before the third arrives.
    assert_eq!(ask(&mut second, &["Z".into()]).await, ["2\t1\tcmd"]);
    let mut third = client(a).await;
    let mut l = String::new();
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), third.read_line(&mut l))
        .await
        .expect("closed, not hung")
        .unwrap();
    assert_eq!(n, 0);
    // A line over the cap is answered and the connection closed.
    let long = format!("A\t1\t{}", "x".repeat(200));
    c.get_mut()
        .write_all(format!("{long}\n").as_bytes())
        .await
        .unwrap();
    let mut l = String::new();
    c.read_line(&mut l).await.unwrap();
    assert_eq!(l, "2\t1\ttoolong\n");
    let mut l = String::new();
    assert_eq!(c.read_line(&mut l).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener() {
    let db = common::my::mariadb();
    db.sql(
        "CREATE TABLE test.t (k INT PRIMARY KEY, v VARCHAR(5)); INSERT INTO test.t VALUES (1, 'a')",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = sluice_testkit::tls_files(dir.path()).unwrap();
    let extra = format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let text = config(&db, 1).replace("connections = 1\n", &format!("connections = 1\n{extra}"));
    let h = common::sluice(&text).await;
    let a = common::addr(&h, "hs_read");
    let cfg = common::tls_client_config(&ca);
    let tcp = TcpStream::connect(a).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .unwrap();
    let mut c = BufReader::new(tls);
    c.get_mut()
        .write_all(b"P\t1\ttest\tt\tPRIMARY\tk,v\n1\t=\t1\t1\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let mut l = String::new();
        c.read_line(&mut l).await.unwrap();
        got.push(l);
    }
    assert_eq!(got, ["0\t1\n", "0\t2\t1\ta\n"]);
    // Plain text on a TLS listener gets a TLS alert, no answer, and the connection is
    // closed.
    let mut plain = TcpStream::connect(a).await.unwrap();
    plain
        .write_all(b"P\t1\ttest\tt\tPRIMARY\tk,v\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut got);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(15), read)
        .await
        .expect("closed, not hung");
    assert!(!got.starts_with(b"0\t"), "{got:?}");
}

/// An IN list that would make more SQL than a request may is refused by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exploding_in_list_is_refused() {
    let db = common::my::mariadb();
    db.sql(
        "CREATE TABLE test.t (k INT PRIMARY KEY, v VARCHAR(5)); INSERT INTO test.t VALUES (1, 'a')",
    )
    .unwrap();
    let h = common::sluice(&config(&db, 1)).await;
    let mut c = client(common::addr(&h, "hs_read")).await;
    let values = vec!["1"; 30_000].join("\t");
    let filters = vec!["F\t=\t0\t1"; 40].join("\t");
    let big = format!("1\t=\t1\t1\t10\t0\t@\t0\t30000\t{values}\t{filters}");
    let got = ask(
        &mut c,
        &[
            "P\t1\ttest\tt\tPRIMARY\tk,v\tk".into(),
            big,
            "1\t=\t1\t1".into(),
        ],
    )
    .await;
    assert_eq!(got, ["0\t1", "2\t1\ttoolong", "0\t2\t1\ta"]);
    // A missing table is asked of the catalog once, not at every P.
    let missing = "P\t2\ttest\tnope\tPRIMARY\tk".to_string();
    let got = ask(&mut c, &[missing.clone(), missing.clone(), missing]).await;
    assert_eq!(got, ["1\t1\topen_table"; 3]);
    let reads = h
        .kv("hs_read")
        .unwrap()
        .stats
        .catalog_reads
        .load(Ordering::Relaxed);
    assert_eq!(reads, 2, "test.t once, test.nope once");
}

/// An answer larger than `max_message_size` fails by itself; small answers in the same
/// batch stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_cap_fails_alone() {
    let db = common::my::mariadb();
    let rows: Vec<String> = (1..=100)
        .map(|i| format!("({i}, REPEAT('x', 100))"))
        .collect();
    db.sql(&format!(
        "CREATE TABLE test.t (k INT PRIMARY KEY, v VARCHAR(200)); INSERT INTO test.t VALUES {}",
        rows.join(",")
    ))
    .unwrap();
    let text = format!("[general]\nmax_message_size = \"2KiB\"\n{}", config(&db, 1));
    let h = common::sluice(&text).await;
    let mut c = client(common::addr(&h, "hs_read")).await;
    let got = ask(
        &mut c,
        &[
            "P\t1\ttest\tt\tPRIMARY\tk,v".into(),
            "1\t>=\t1\t1\t1000\t0".into(),
            "1\t>=\t1\t1\t3\t0".into(),
        ],
    )
    .await;
    assert_eq!(got[1], "1\t1\ttoolarge");
    assert!(got[2].starts_with("0\t2\t1\txxx"), "{got:?}");
    assert_eq!(
        ask(&mut c, &["1\t=\t1\t100".into()]).await[0].len(),
        4 + 4 + 100
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_grants_limit_what_clients_open() {
    let db = common::my::mariadb();
    db.sql(
        "CREATE TABLE test.users (id INT PRIMARY KEY, name VARCHAR(20), secret VARCHAR(20), KEY by_name (name));\
         CREATE TABLE test.other (id INT PRIMARY KEY);\
         INSERT INTO test.users VALUES (1, 'ann', 'x')",
    )
    .unwrap();
    let text = config(&db, 1).replace(
        "mode = \"read-only\"\n",
        "mode = \"read-only\"\nindexes = [\"test.users.PRIMARY:id,name\", \"test.users.by_name\"]\n",
    );
    let h = common::sluice(&text).await;
    let mut r = client(common::addr(&h, "hs_read")).await;
    let answers = ask(
        &mut r,
        &[
            "P\t1\ttest\tusers\tPRIMARY\tid,name".into(),
            "P\t2\ttest\tusers\tPRIMARY\tid,secret".into(),
            "P\t3\ttest\tother\tPRIMARY\tid".into(),
            "P\t4\ttest\tusers\tby_name\tid,name,secret".into(),
            "P\t5\ttest\tusers\tPRIMARY\tid\tsecret".into(),
            "1\t=\t1\t1".into(),
        ],
    )
    .await;
    assert_eq!(
        answers,
        [
            "0\t1",
            "2\t1\tdenied",
            "2\t1\tdenied",
            "0\t1",
            "2\t1\tdenied",
            "0\t2\t1\tann"
        ]
    );
    // The write listener has no list: anything goes.
    let mut w = client(common::addr(&h, "hs_write")).await;
    let open = ask(&mut w, &["P\t1\ttest\tother\tPRIMARY\tid".into()]).await;
    assert_eq!(open, ["0\t1"]);
}
