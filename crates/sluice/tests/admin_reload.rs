//! Reload (the console's RELOAD, SIGHUP) while clients run queries: none of them gets
//! an error. A bad file is refused with file:line and changes nothing; a listener is
//! added and removed, a password changed, a rule added, TLS certificates rotated, a
//! server added to a cluster and the old one removed (drained).

use crate::common;
use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

fn base(pg: &sluice_testkit::PgServer, tls: &str, servers: &str, extra: &str) -> String {
    format!(
        r#"
[general]
shutdown_timeout = "5s"

[servers.a]
protocol = "postgres"
host = "127.0.0.1"
port = {port}

[servers.b]
protocol = "postgres"
host = "localhost"
port = {port}

[clusters.pg]
servers = {servers}

[pools.tx]
mode = "transaction"
size = 4

[pools.session]
mode = "session"
size = 4

[users.app]
password = "{pw}"

[users.ops]
password = "ops-secret"

[admin]
users = ["ops"]
http_address = ""
mysql_address = ""

[listeners.tx]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pg"
pool = "tx"
auth = "scram-sha-256"

[listeners.session]
protocol = "postgres"
address = "127.0.0.1:0"
cluster = "pg"
pool = "session"
auth = "passthrough"
{tls}
{extra}
"#,
        port = pg.port(),
        pw = APP_PW,
    )
}

/// A client running statements until told to stop; its count of errors. It is logged
/// in when this returns (a reload that changes its password comes after).
async fn busy(
    a: std::net::SocketAddr,
    user: &'static str,
    pw: &'static str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, u64)> {
    let c = connect(a, user, pw, "app").await.unwrap();
    tokio::spawn(async move {
        let (ok, errors) = (AtomicU64::new(0), AtomicU64::new(0));
        while !stop.load(Ordering::Relaxed) {
            match c.simple_query("select 1").await {
                Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    eprintln!("busy client: {e:?}");
                    errors.fetch_add(1, Ordering::Relaxed)
                }
            };
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        (ok.into_inner(), errors.into_inner())
    })
}

/// The certificate a TLS listener serves, as PEM (openssl s_client, PostgreSQL's STARTTLS).
fn served_cert(port: u16) -> String {
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-starttls",
            "postgres",
            "-connect",
            &format!("127.0.0.1:{port}"),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let start = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = text.find("-----END CERTIFICATE-----").expect("its end");
    text[start..end].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_each_kind_of_change_without_an_error() {
    let pg = pg();
    let dir = tempfile::tempdir().unwrap();
    let (_ca, cert, key) = sluice_testkit::tls_files(dir.path()).unwrap();
    let tls = format!(
        "\n[listeners.secure]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:0\"\ncluster = \"pg\"\npool = \"tx\"\nauth = \"scram-sha-256\"\ntls = \"require\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let file = dir.path().join("sluice.toml");
    let write = |servers: &str, extra: &str| {
        std::fs::write(&file, base(&pg, &tls, servers, extra)).unwrap()
    };
    write("[\"a\"]", "");
    let config = sluice_config::load(&file).unwrap();
    let h = sluice::server::start(config).await.unwrap();
    h.reload_from(file.clone());
    let (tx, session, secure) = (addr(&h, "tx"), addr(&h, "session"), addr(&h, "secure"));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = [
        busy(tx, APP_USER, APP_PW, stop.clone()).await,
        busy(session, APP_USER, APP_PW, stop.clone()).await,
    ];
    let reload = || async { h.shared.control.reload().await };

    // A bad file: refused with file and line; nothing changes.
    std::fs::write(&file, "[general]\nshutdown_timeout = \"soon\"\n").unwrap();
    let e = reload().await.unwrap_err();
    assert!(
        e.contains("sluice.toml:2:") && e.contains("shutdown_timeout"),
        "{e}"
    );
    assert_eq!(
        h.shared.config.load().general.shutdown_timeout,
        std::time::Duration::from_secs(5)
    );
    // A server whose TLS cannot be set up (a CA file that is not one): refused whole,
    // never a server reached without the TLS it requires.
    let bad_ca = dir.path().join("bad-ca.pem");
    std::fs::write(&bad_ca, "not a certificate").unwrap();
    let tls_server = format!(
        "\n[servers.t]\nprotocol = \"postgres\"\nhost = \"127.0.0.1\"\nport = {}\ntls = \"verify-full\"\ntls_ca_file = \"{}\"\n\n[clusters.t]\nservers = [\"t\"]\n",
        pg.port(),
        bad_ca.display()
    );
    write("[\"a\"]", &tls_server);
    let e = reload().await.unwrap_err();
    assert!(
        e.contains("server \"t\": TLS set-up") && e.contains("nothing was changed"),
        "{e}"
    );
    assert!(!h.shared.config.load().servers.contains_key("t"));

    // A listener added; a password changed; a rule added.
    let extra = "\n[listeners.more]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:0\"\ncluster = \"pg\"\npool = \"tx\"\nauth = \"scram-sha-256\"\n\n[[rules]]\npattern = \"^select \\\\? \\\\+ \\\\?$\"\naction = \"block\"\nmessage = \"no sums\"\n";
    let text = base(&pg, &tls, "[\"a\"]", extra).replace(
        &format!("password = \"{APP_PW}\""),
        &format!("password = \"new-secret\"\nserver_password = \"{APP_PW}\""),
    );
    std::fs::write(&file, text).unwrap();
    let said = reload().await.unwrap();
    assert!(said.contains("listener more listening on"), "{said}");
    let more = h.shared.control.addr("more").expect("bound");
    let c = connect(more, APP_USER, "new-secret", "app")
        .await
        .expect("new password, new listener");
    let e = c.simple_query("select 1 + 2").await.unwrap_err();
    assert!(
        e.as_db_error()
            .is_some_and(|d| d.message().contains("no sums")),
        "{e:?}"
    );
    assert!(
        connect(tx, APP_USER, APP_PW, "app").await.is_err(),
        "old password"
    );

    // The listener removed: no new clients there; its client goes on.
    let text = base(&pg, &tls, "[\"a\"]", "").replace(
        &format!("password = \"{APP_PW}\""),
        &format!("password = \"new-secret\"\nserver_password = \"{APP_PW}\""),
    );
    std::fs::write(&file, &text).unwrap();
    let said = reload().await.unwrap();
    assert!(said.contains("listener more stopped accepting"), "{said}");
    c.simple_query("select 1")
        .await
        .expect("a removed listener's client finishes its work");
    assert!(
        tokio::net::TcpStream::connect(more).await.is_err(),
        "still accepting"
    );

    // TLS certificates rotated: the next TLS client sees the new one.
    let before = served_cert(secure.port());
    let (_ca2, cert2, key2) =
        sluice_testkit::tls_files(&dir.path().join("new")).unwrap_or_else(|_| {
            std::fs::create_dir_all(dir.path().join("new")).unwrap();
            sluice_testkit::tls_files(&dir.path().join("new")).unwrap()
        });
    std::fs::copy(&cert2, &cert).unwrap();
    std::fs::copy(&key2, &key).unwrap();
    reload().await.unwrap();
    let after = served_cert(secure.port());
    assert_ne!(before, after, "the certificate was not read again");

    // A pool policy changed: the running pool takes it.
    let resized = text.replace(
        "[pools.tx]\nmode = \"transaction\"\nsize = 4",
        "[pools.tx]\nmode = \"transaction\"\nsize = 3",
    );
    assert_ne!(resized, text);
    std::fs::write(&file, &resized).unwrap();
    let said = reload().await.unwrap();
    assert!(
        said.contains("pools took their policy's new settings"),
        "{said}"
    );
    let sizes: Vec<usize> = h
        .shared
        .pg
        .pools
        .all()
        .iter()
        .filter(|p| p.key.policy == "tx")
        .map(|p| p.settings().size)
        .collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|s| *s == 3),
        "{sizes:?}"
    );
    let text = resized;

    // Through the console: server b added before a, then a removed (drained).
    std::fs::write(
        &file,
        text.replace("servers = [\"a\"]", "servers = [\"b\", \"a\"]"),
    )
    .unwrap();
    let admin = connect(session, "ops", "ops-secret", "sluice")
        .await
        .unwrap();
    admin.simple_query("RELOAD").await.unwrap();
    std::fs::write(
        &file,
        text.replace("servers = [\"a\"]", "servers = [\"b\"]"),
    )
    .unwrap();
    admin.simple_query("RELOAD").await.unwrap();
    let servers = admin.simple_query("SHOW SERVERS").await.unwrap();
    let names: Vec<String> = servers
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get("server").map(str::to_string),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec!["b".to_string()]);
    let c = connect(tx, APP_USER, "new-secret", "app").await.unwrap();
    c.simple_query("select 1").await.unwrap();
    let pools = admin.simple_query("SHOW POOLS").await.unwrap();
    assert!(pools.iter().any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get("server").is_some_and(|s| s.starts_with("localhost:")))));

    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let (ok, errors) = c.await.unwrap();
        assert!(ok > 0);
        assert_eq!(errors, 0, "a client got an error during the reloads");
    }
}
