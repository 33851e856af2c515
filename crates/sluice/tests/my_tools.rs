//! The mariadb command-line client through Sluice: a SQL script (multi-statements,
//! errors, warnings, LOAD DATA LOCAL INFILE, prepared SQL statements) whose output must
//! match the same script run directly against the server.

use crate::common;
use common::my::*;
use common::{addr, sluice};
use std::process::Command;

const SCRIPT: &str = r#"
CREATE TABLE people (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(40), note TEXT);
INSERT INTO people (name, note) VALUES ('ada', 'first'), ('grace', NULL), ('linus', 'tab	inside');
SELECT * FROM people ORDER BY id;
SELECT COUNT(*) AS n, MAX(id) FROM people; SELECT 'two results' AS x;
SELECT * FROM no_such_table;
SELECT CAST('abc' AS INT);
SHOW WARNINGS;
LOAD DATA LOCAL INFILE '@CSV@' INTO TABLE people FIELDS TERMINATED BY ',' (name, note);
SELECT name, note FROM people WHERE id > 3 ORDER BY id;
PREPARE s FROM 'SELECT name FROM people WHERE id = ?';
SET @i = 2;
EXECUTE s USING @i;
DEALLOCATE PREPARE s;
BEGIN;
UPDATE people SET note = 'changed' WHERE id = 1;
ROLLBACK;
SELECT note FROM people WHERE id = 1;
SELECT REPEAT('x', 100000) INTO @big;
SELECT LENGTH(@big);
DROP TABLE people;
"#;

fn run(port: u16, db: &str, script: &std::path::Path) -> String {
    let out = Command::new("mariadb")
        .args([
            "--no-defaults",
            "-h",
            "127.0.0.1",
            "-P",
            &port.to_string(),
            "-u",
            APP_USER,
            &format!("-p{APP_PW}"),
            "--local-infile=1",
            "--force",
            "--table",
            "--skip-ssl",
            db,
        ])
        .stdin(std::fs::File::open(script).unwrap())
        .output()
        .expect("run mariadb");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str("--- stderr ---\n");
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_cli_script_matches_direct() {
    let db = mariadb();
    db.create_database("direct").unwrap();
    db.create_database("proxied").unwrap();
    db.sql("GRANT ALL ON *.* TO 'app'@'%'").unwrap();
    let h = sluice(&config_text(&db, 4, "2s", "")).await;
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("people.csv");
    std::fs::write(&csv, "bob,from csv\ncarol,\"quoted\"\n").unwrap();
    let script = dir.path().join("script.sql");
    std::fs::write(&script, SCRIPT.replace("@CSV@", &csv.display().to_string())).unwrap();
    let port = db.port();
    let script2 = script.clone();
    let direct = tokio::task::spawn_blocking(move || run(port, "direct", &script2))
        .await
        .unwrap();
    let sport = addr(&h, "session").port();
    let proxied = tokio::task::spawn_blocking(move || run(sport, "proxied", &script))
        .await
        .unwrap();
    assert!(direct.contains("from csv"), "{direct}");
    assert!(direct.contains("no_such_table"), "{direct}");
    assert_eq!(
        proxied.replace("proxied.", "direct."),
        direct,
        "through Sluice:\n{proxied}\ndirect:\n{direct}"
    );
    h.shutdown(std::time::Duration::from_secs(5)).await;
}
