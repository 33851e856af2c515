//! The admin console over the MySQL protocol: the mariadb client and mysql_async
//! against `[admin] mysql_address`, the commands, and who may get in.

use crate::common;
use common::my::*;
use common::run_text;
use mysql_async::prelude::Queryable;
use std::process::Command;

const OPS_PW: &str = "ops-secret";

fn admin_users() -> String {
    format!(
        "\n[users.ops]\npassword = \"{OPS_PW}\"\n\n[admin]\nusers = [\"ops\"]\nhttp_address = \"\"\nmysql_address = \"127.0.0.1:0\"\n"
    )
}

/// The mariadb client in table mode: (success, stdout + stderr).
fn cli(port: u16, user: &str, pw: &str, sql: &str) -> (bool, String) {
    run_text(
        Command::new("mariadb")
            .args(["--no-defaults", "--skip-ssl", "--table", "-h", "127.0.0.1"])
            .args([
                "-P",
                &port.to_string(),
                "-u",
                user,
                &format!("-p{pw}"),
                "-e",
                sql,
            ]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_over_the_mariadb_client_and_a_driver() {
    let db = mariadb();
    let h = common::sluice(&config_text(&db, 4, "2s", &admin_users())).await;
    let console = h.addrs["admin_mysql"].port();
    // A client that ran statements, and stays.
    let mut app = connect(common::addr(&h, "tx")).await;
    for _ in 0..3 {
        app.query_drop("SELECT 1").await.unwrap();
    }
    let run = |sql: &str| {
        let (ok, out) = cli(console, "ops", OPS_PW, sql);
        assert!(ok, "{sql}: {out}");
        out
    };
    let version = run("SHOW VERSION");
    assert!(
        version.contains("| version") && version.contains("| Sluice "),
        "{version}"
    );
    let servers = run("SHOW SERVERS");
    assert!(
        servers.contains("| cluster | server | address"),
        "{servers}"
    );
    assert!(
        servers.contains(&format!(
            "| my      | my     | 127.0.0.1:{} | mysql    |",
            db.port()
        )),
        "{servers}"
    );
    let pools = run("SHOW POOLS");
    let tx_pool = pools
        .lines()
        .find(|l| l.starts_with("| tx "))
        .unwrap_or_else(|| panic!("{pools}"));
    for want in [
        &format!("| 127.0.0.1:{} |", db.port()),
        "| test ",
        "| app ",
        "caps=",
        "|    4 |",
    ] {
        assert!(tx_pool.contains(want), "{want} in {tx_pool}");
    }
    let stats = run("SHOW STATS");
    assert!(stats.contains("| listener | tx "), "{stats}");
    let digests = run("SHOW DIGESTS ORDER BY total_time DESC LIMIT 5");
    assert!(digests.contains("| SELECT ?"), "{digests}");
    for cmd in [
        "SHOW CLIENTS",
        "SHOW LISTENERS",
        "SHOW PINS",
        "SHOW RULES",
        "SHOW FIREWALL",
        "SHOW CONFIG",
    ] {
        run(cmd);
    }
    let (ok, out) = cli(console, "ops", OPS_PW, "SHOW NOTHING");
    assert!(
        !ok && out.contains("ERROR 1064") && out.contains("commands: SHOW SERVERS"),
        "{out}"
    );

    // A driver reads the same tables; its connection's own queries are answered.
    let opts = opts(h.addrs["admin_mysql"], "ops", OPS_PW, None);
    let mut admin = mysql_async::Conn::new(opts).await.expect("console login");
    let clients: Vec<mysql_async::Row> = admin.query("SHOW CLIENTS").await.unwrap();
    let mine = clients
        .iter()
        .find(|r| r.get::<String, _>("listener").as_deref() == Some("tx"))
        .expect("the app client is listed");
    assert_eq!(mine.get::<String, _>("user").as_deref(), Some("app"));
    let id: i64 = mine.get("id").unwrap();
    let pid: i64 = mine.get("pid").unwrap();
    let own: Option<i64> = app.query_first("SELECT CONNECTION_ID()").await.unwrap();
    assert_eq!(own, Some(pid), "the pid column is the id the client knows");
    admin.query_drop(format!("KILL CLIENT {id}")).await.unwrap();
    assert!(
        app.query_drop("SELECT 1").await.is_err(),
        "the killed client goes on"
    );
    admin.query_drop("RESET DIGESTS").await.unwrap();
    let left: Vec<mysql_async::Row> = admin.query("SHOW DIGESTS").await.unwrap();
    assert!(left.is_empty());
    let e = admin
        .query_drop("SET SERVER nope OFFLINE")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("1105"), "{e}");
    // PAUSE and RESUME, as the listeners table shows them.
    let paused = |rows: Vec<mysql_async::Row>| {
        rows.iter()
            .find(|r| r.get::<String, _>("listener").as_deref() == Some("tx"))
            .and_then(|r| r.get::<String, _>("paused"))
    };
    admin.query_drop("PAUSE my").await.unwrap();
    let rows: Vec<mysql_async::Row> = admin.query("SHOW LISTENERS").await.unwrap();
    assert_eq!(paused(rows).as_deref(), Some("yes"));
    admin.query_drop("RESUME my").await.unwrap();
    let rows: Vec<mysql_async::Row> = admin.query("SHOW LISTENERS").await.unwrap();
    assert_eq!(paused(rows).as_deref(), Some("no"));
    admin.ping().await.unwrap();
    // SHUTDOWN (at once) reaches whoever runs the process.
    admin.query_drop("SHUTDOWN").await.unwrap();
    assert!(!h.shared.control.shutdown_requested().await);
    admin.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_admins_get_in() {
    let db = mariadb();
    let h = common::sluice(&config_text(&db, 4, "2s", &admin_users())).await;
    let console = h.addrs["admin_mysql"].port();
    let (ok, out) = cli(console, "ops", "wrong", "SHOW VERSION");
    assert!(!ok && out.contains("ERROR 1045"), "{out}");
    let (ok, out) = cli(console, APP_USER, APP_PW, "SHOW VERSION");
    assert!(!ok && out.contains("ERROR 1045"), "{out}");
    let (ok, out) = cli(console, "nobody", "", "SHOW VERSION");
    assert!(!ok && out.contains("ERROR 1045"), "{out}");

    // With no [admin] users: the server's superusers, from a loopback address.
    let extra = "\n[admin]\nhttp_address = \"\"\nmysql_address = \"127.0.0.1:0\"\n";
    let h = common::sluice(&config_text(&db, 4, "2s", extra)).await;
    let console = h.addrs["admin_mysql"].port();
    let (ok, out) = cli(console, db.user(), db.password(), "SHOW VERSION");
    assert!(ok && out.contains("Sluice"), "{out}");
    db.sql("CREATE USER 'limited'@'%' IDENTIFIED BY 'limited-pw'; GRANT SELECT ON test.* TO 'limited'@'%';")
        .unwrap();
    let (ok, out) = cli(console, "limited", "limited-pw", "SHOW VERSION");
    assert!(!ok && out.contains("ERROR 1227"), "{out}");
    let (ok, out) = cli(console, db.user(), "wrong", "SHOW VERSION");
    assert!(!ok && out.contains("ERROR 1045"), "{out}");
}
