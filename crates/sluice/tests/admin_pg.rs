//! The admin console over PostgreSQL: psql and tokio-postgres against the virtual
//! database `sluice` of a listener, every command, and who may get in.

use crate::common;
use common::*;
use std::process::Command;
use std::time::Duration;

const OPS_PW: &str = "ops-secret";

fn admin_extra(rules: &str) -> String {
    format!(
        r#"
[users.ops]
password = "{OPS_PW}"

[admin]
users = ["ops"]
http_address = ""
mysql_address = ""

{rules}
"#
    )
}

/// psql in unaligned mode: (success, stdout + stderr).
fn psql(port: u16, user: &str, pw: &str, db: &str, sql: &str) -> (bool, String) {
    run_text(
        Command::new("psql")
            .args([
                "-X",
                "-A",
                "-F",
                "|",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .args(["-U", user, "-d", db, "-c", sql])
            .env("PGPASSWORD", pw)
            .env("PGCONNECT_TIMEOUT", "10"),
    )
}

/// An error's message as the server gave it.
fn msg(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or(e.to_string(), |d| d.message().to_string())
}

fn console(port: u16, sql: &str) -> String {
    let (ok, out) = psql(port, "ops", OPS_PW, "sluice", sql);
    assert!(ok, "{sql}: {out}");
    out
}

/// The rows of a console answer in tokio-postgres' simple protocol, by column name.
async fn rows(
    c: &tokio_postgres::Client,
    sql: &str,
) -> Vec<std::collections::HashMap<String, String>> {
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    msgs.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.name().to_string(), r.get(i).unwrap_or("").to_string()))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_over_psql_and_a_driver() {
    let pg = pg();
    let rule = "[[rules]]\npattern = \"^select \\\\?$\"\naction = \"log\"\n";
    let h = sluice(&config_text(&pg, 4, "2s", &admin_extra(rule))).await;
    let (tx, session) = (addr(&h, "tx"), addr(&h, "session"));
    // A client that ran statements, and stays.
    let app = connect(tx, APP_USER, APP_PW, "app").await.unwrap();
    for _ in 0..3 {
        app.simple_query("select 1").await.unwrap();
    }
    app.simple_query("select pg_sleep(0.01)").await.unwrap();

    // Each command, its header exactly, and what it must show.
    let port = session.port();
    let version = console(port, "SHOW VERSION");
    assert!(version.starts_with("version\nSluice "), "{version}");
    let servers = console(port, "show servers;");
    assert!(
        servers.starts_with("cluster|server|address|protocol|role|health|lag_ms|position|in_use|idle|max_connections\n"),
        "{servers}"
    );
    assert!(
        servers.contains(&format!(
            "pg|pg|127.0.0.1:{}|postgres|unknown|up|",
            pg.port()
        )),
        "{servers}"
    );
    let pools = console(port, "SHOW POOLS");
    assert!(pools.starts_with("pool|protocol|server|database|user|options|size|in_use|idle|waiting|leases|waits|slow_waits|wait_ms|wait_timeouts|answered\n"), "{pools}");
    assert!(
        pools.contains(&format!("tx|postgres|127.0.0.1:{}|app|app||4|", pg.port())),
        "{pools}"
    );
    let clients = console(port, "SHOW CLIENTS");
    assert!(
        clients.starts_with(
            "id|protocol|listener|user|database|address|mode|pid|connected_at|connected_s|pinned\n"
        ),
        "{clients}"
    );
    assert!(
        clients.contains("|postgres|tx|app|app|127.0.0.1:"),
        "{clients}"
    );
    let listeners = console(port, "SHOW LISTENERS");
    assert!(
        listeners.contains(&format!(
            "tx|postgres|127.0.0.1:{}|pg|tx|transaction|read-write|passthrough|",
            tx.port()
        )),
        "{listeners}"
    );
    let stats = console(port, "SHOW STATS");
    assert!(stats.starts_with("scope|name|logins|queries|errors|rows|bytes_in|bytes_out|avg_us|p50_us|p99_us|transactions|waits|wait_ms|wait_timeouts\n"), "{stats}");
    assert!(stats.contains("listener|tx|1|4|0|4|"), "{stats}");
    let pins = console(port, "SHOW PINS");
    assert!(pins.starts_with("reason|clients|pins_total\n"), "{pins}");
    assert!(pins.contains("temp_table|0|0"), "{pins}");
    let rules = console(port, "SHOW RULES");
    assert!(
        rules.contains("1|pattern=\"^select \\\\?$\"|log||no|3|"),
        "{rules}"
    );
    let firewall = console(port, "SHOW FIREWALL");
    assert!(firewall.contains("global||off|0|0|0|0"), "{firewall}");
    let config = console(port, "SHOW CONFIG");
    assert!(config.contains("admin|users|ops"), "{config}");
    assert!(config.contains("pools.tx|mode|transaction"), "{config}");
    // Digests, sortable.
    let top = console(port, "SHOW DIGESTS ORDER BY total_time DESC LIMIT 1");
    assert!(
        top.contains("select pg_sleep(?)") && top.ends_with("(1 row)\n"),
        "{top}"
    );
    let by_count = console(
        port,
        "SHOW DIGESTS ORDER BY count DESC, digest_text LIMIT 1",
    );
    assert!(by_count.contains("|select ?|app|app|tx|3|"), "{by_count}");

    // The same through a driver, as a BI tool would read it.
    let admin = connect(session, "ops", OPS_PW, "sluice").await.unwrap();
    let clients = rows(&admin, "SHOW CLIENTS").await;
    let me = clients
        .iter()
        .find(|r| r["listener"] == "tx")
        .expect("the app client is listed");
    let id = me["id"].clone();
    assert_eq!(me["user"], "app");

    // Errors name the command list; the console goes on.
    for bad in [
        "SHOW NOTHING",
        "DROP TABLE x",
        "KILL CLIENT abc",
        "SHOW POOLS ORDER BY nope",
    ] {
        let e = admin.simple_query(bad).await.expect_err(bad);
        let db = e.as_db_error().expect("a server error");
        assert_eq!(db.code().code(), "42601", "{bad}");
        if bad != "SHOW POOLS ORDER BY nope" {
            assert!(
                db.message().contains("commands: SHOW SERVERS"),
                "{bad}: {}",
                db.message()
            );
        }
    }
    let e = admin
        .simple_query("SET SERVER nope OFFLINE")
        .await
        .unwrap_err();
    assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("55000"));
    let e = admin.prepare("SHOW POOLS").await.unwrap_err();
    assert!(msg(&e).contains("simple query protocol"), "{e}");
    assert_eq!(rows(&admin, "SHOW VERSION").await.len(), 1);

    // RESET DIGESTS.
    rows(&admin, "RESET DIGESTS").await;
    assert!(rows(&admin, "SHOW DIGESTS").await.is_empty());

    // A pinned session shows, by reason.
    app.simple_query("CREATE TEMP TABLE scratch (x int)")
        .await
        .unwrap();
    let pinned = rows(&admin, "SHOW PINS").await;
    let temp = pinned.iter().find(|r| r["reason"] == "temp_table").unwrap();
    assert_eq!(
        (temp["clients"].as_str(), temp["pins_total"].as_str()),
        ("1", "1")
    );
    let clients = rows(&admin, "SHOW CLIENTS").await;
    assert!(
        clients
            .iter()
            .any(|r| r["id"] == id && r["pinned"] == "temp_table")
    );

    // KILL CLIENT ends that client's connection, and only that.
    rows(&admin, &format!("KILL CLIENT {id}")).await;
    let gone = tokio::time::timeout(Duration::from_secs(5), app.simple_query("select 1")).await;
    assert!(
        matches!(gone, Ok(Err(_))),
        "the killed client goes on: {gone:?}"
    );
    let e = admin
        .simple_query(&format!("KILL CLIENT {id}"))
        .await
        .unwrap_err();
    assert!(msg(&e).contains("no client"), "{e}");

    // RELOAD without a configuration file to read.
    let e = admin.simple_query("RELOAD").await.unwrap_err();
    assert!(msg(&e).contains("without a configuration file"), "{e}");

    // SHUTDOWN WAIT reaches whoever runs the process.
    let asked = h.shared.clone();
    let waiter = tokio::spawn(async move { asked.control.shutdown_requested().await });
    rows(&admin, "SHUTDOWN WAIT").await;
    assert!(
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_server_offline() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "1s", &admin_extra(""))).await;
    let (tx, session) = (addr(&h, "tx"), addr(&h, "session"));
    let admin = connect(session, "ops", OPS_PW, "sluice").await.unwrap();
    let app = connect(tx, APP_USER, APP_PW, "app").await.unwrap();
    app.simple_query("select 1").await.unwrap();
    // A second client, logged in before the pause (logins wait while paused).
    let held = connect(tx, APP_USER, APP_PW, "app").await.unwrap();
    held.simple_query("select 1").await.unwrap();

    // PAUSE: a transaction in progress finishes; new ones wait for RESUME.
    app.simple_query("BEGIN").await.unwrap();
    rows(&admin, "PAUSE pg").await;
    let listed = rows(&admin, "SHOW LISTENERS").await;
    assert!(
        listed
            .iter()
            .any(|r| r["listener"] == "tx" && r["paused"] == "yes")
    );
    app.simple_query("select 2").await.unwrap();
    app.simple_query("COMMIT").await.unwrap();
    let app = std::sync::Arc::new(app);
    let next = tokio::spawn({
        let app = app.clone();
        async move { app.simple_query("select 3").await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!next.is_finished(), "a new transaction ran while paused");
    // A client held by PAUSE that is killed goes at once, before RESUME.
    let held_id = rows(&admin, "SHOW CLIENTS")
        .await
        .into_iter()
        .filter(|r| r["listener"] == "tx")
        .filter_map(|r| r["id"].parse::<u64>().ok())
        .max()
        .unwrap();
    let held_query = tokio::spawn(async move { held.simple_query("select 7").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held_query.is_finished());
    rows(&admin, &format!("KILL CLIENT {held_id}")).await;
    let killed = tokio::time::timeout(Duration::from_secs(5), held_query).await;
    assert!(matches!(killed, Ok(Ok(Err(_)))), "{killed:?}");
    assert!(!next.is_finished(), "still paused");
    rows(&admin, "RESUME").await;
    let ran = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .unwrap()
        .unwrap();
    ran.unwrap_or_else(|e| panic!("after RESUME: {e:?}"));
    let e = admin.simple_query("PAUSE nope").await.unwrap_err();
    assert!(msg(&e).contains("no cluster \"nope\""), "{e}");

    // SET SERVER OFFLINE: no new leases (the pool's wait ends in an error), in-flight
    // work finishes; ONLINE again, and it serves.
    app.simple_query("BEGIN").await.unwrap();
    rows(&admin, "SET SERVER pg OFFLINE").await;
    let servers = rows(&admin, "SHOW SERVERS").await;
    assert_eq!(servers[0]["health"], "offline");
    app.simple_query("select 4").await.unwrap();
    app.simple_query("COMMIT").await.unwrap();
    let refused = app.simple_query("select 5").await.unwrap_err();
    assert!(refused.as_db_error().is_some(), "{refused}");
    rows(&admin, "SET SERVER pg ONLINE").await;
    app.simple_query("select 6").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_admins_get_in() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "2s", &admin_extra(""))).await;
    let (session, txauth) = (addr(&h, "session"), addr(&h, "txauth"));
    // A configured user that is not an admin.
    // (Refused as a wrong password would be: who the admins are stays unsaid.)
    let (ok, out) = psql(txauth.port(), APP_USER, APP_PW, "sluice", "SHOW POOLS");
    assert!(
        !ok && out.contains("password authentication failed"),
        "{out}"
    );
    // An admin with a wrong password, and with none.
    let (ok, out) = psql(txauth.port(), "ops", "wrong", "sluice", "SHOW POOLS");
    assert!(
        !ok && out.contains("password authentication failed"),
        "{out}"
    );
    let (ok, out) = psql(txauth.port(), "ops", "", "sluice", "SHOW POOLS");
    assert!(!ok, "{out}");
    // Pass-through listener: the server's superuser may, an ordinary role may not.
    let (ok, out) = psql(
        session.port(),
        pg.superuser(),
        pg.password(),
        "sluice",
        "SHOW VERSION",
    );
    assert!(ok && out.contains("Sluice"), "{out}");
    let (ok, out) = psql(session.port(), APP_USER, APP_PW, "sluice", "SHOW VERSION");
    assert!(!ok && out.contains("not a server superuser"), "{out}");
    let (ok, out) = psql(
        session.port(),
        pg.superuser(),
        "wrong",
        "sluice",
        "SHOW VERSION",
    );
    assert!(
        !ok && out.contains("password authentication failed"),
        "{out}"
    );
    // The admin through the pass-through listener, by its configured password.
    let (ok, out) = psql(session.port(), "ops", OPS_PW, "sluice", "SHOW VERSION");
    assert!(ok, "{out}");
    // Nothing reached the console for the refused ones: no pool was made for them.
    let pools = console(session.port(), "SHOW POOLS");
    assert!(!pools.contains("sluice"), "{pools}");
}
