//! The SQL firewall on both protocols: a list learned in one run (learning mode),
//! written to its file, read by the next run, which protects (unknown statements
//! refused, the connection goes on) or detects (they run); a deny rule applies in
//! every mode; a user's mode beats the listener's and `[firewall]`'s.

use crate::common;

use common::*;
use mysql_async::prelude::*;

fn firewall(mode: &str, file: &std::path::Path, more: &str) -> String {
    format!(
        "[firewall]\nmode = \"{mode}\"\nallowlist_file = {:?}\n{more}",
        file.display().to_string()
    )
}

const DENY: &str = r#"
[[rules]]
pattern = "^DROP"
action = "block"
message = "no DROP"
"#;

#[tokio::test]
async fn pg_learn_then_protect_and_detect() {
    let pg = pg();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("allowlist.toml");
    let h = sluice(&config_text(
        &pg,
        4,
        "2s",
        &firewall("learning", &list, DENY),
    ))
    .await;
    let c = app(addr(&h, "tx")).await;
    c.batch_execute("CREATE TABLE f (a int)").await.unwrap();
    c.execute("INSERT INTO f VALUES ($1)", &[&1i32])
        .await
        .unwrap();
    c.query("SELECT a FROM f WHERE a = 1", &[]).await.unwrap();
    // Deny rules apply while learning too, and are not learned.
    assert_eq!(
        sqlstate(&c.batch_execute("DROP TABLE f").await.unwrap_err()),
        "42501"
    );
    drop(c);
    h.shutdown(std::time::Duration::from_secs(5)).await;
    let text = std::fs::read_to_string(&list).unwrap();
    assert!(text.contains("SELECT a FROM f WHERE a = ?"), "{text}");
    assert!(!text.contains("DROP"), "{text}");

    let h = sluice(&config_text(
        &pg,
        4,
        "2s",
        &firewall("protecting", &list, ""),
    ))
    .await;
    let c = app(addr(&h, "tx")).await;
    // Learned shapes run, whatever their literals.
    c.query("SELECT a FROM f WHERE a = 42", &[]).await.unwrap();
    c.execute("INSERT INTO f VALUES ($1)", &[&2i32])
        .await
        .unwrap();
    let e = c.query("SELECT a + 1 FROM f", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    let m = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(
        m.contains("not on the firewall allowlist of user \"app\""),
        "{m}"
    );
    let e = c.batch_execute("DELETE FROM f").await.unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    // The connection goes on.
    c.query("SELECT a FROM f WHERE a = 7", &[]).await.unwrap();
    assert!(
        h.shared
            .firewall
            .refused
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    h.shutdown(std::time::Duration::from_secs(5)).await;

    // Detecting: unknown statements run, and are counted.
    let h = sluice(&config_text(
        &pg,
        4,
        "2s",
        &firewall("detecting", &list, ""),
    ))
    .await;
    let c = app(addr(&h, "tx")).await;
    c.batch_execute("DELETE FROM f").await.unwrap();
    assert_eq!(
        h.shared
            .firewall
            .detected
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    h.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn mysql_learn_then_protect_per_user() {
    let db = my::mariadb();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("allowlist.json");
    let learn = firewall("learning", &list, "");
    let h = sluice(&my::config_text(&db, 4, "2s", &learn)).await;
    let mut c = my::connect(addr(&h, "tx")).await;
    c.query_drop("CREATE TABLE f (a int)").await.unwrap();
    c.exec_drop("INSERT INTO f VALUES (?)", (1,)).await.unwrap();
    let _: Vec<i32> = c.query("SELECT a FROM f WHERE a = 1").await.unwrap();
    drop(c);
    h.shutdown(std::time::Duration::from_secs(5)).await;
    let text = std::fs::read_to_string(&list).unwrap();
    assert!(text.contains("\"allow\""), "{text}");

    // [firewall] stays off; the listener protects.
    let protect = format!(
        "{}\n[listeners.guarded]\nprotocol = \"mysql\"\naddress = \"127.0.0.1:0\"\ncluster = \"my\"\npool = \"tx\"\nauth = \"passthrough\"\nfirewall = \"protecting\"\n",
        firewall("off", &list, "")
    );
    let h = sluice(&my::config_text(&db, 4, "2s", &protect)).await;
    let mut c = my::connect(addr(&h, "guarded")).await;
    let _: Vec<i32> = c.query("SELECT a FROM f WHERE a = 5").await.unwrap();
    c.exec_drop("INSERT INTO f VALUES (?)", (2,)).await.unwrap();
    let e = c.query_drop("DELETE FROM f").await.unwrap_err();
    assert!(
        matches!(&e, mysql_async::Error::Server(s) if s.code == 1142),
        "{e:?}"
    );
    let e = c.prep("SELECT a, a FROM f").await.unwrap_err();
    assert!(
        matches!(&e, mysql_async::Error::Server(s) if s.code == 1142),
        "{e:?}"
    );
    let _: Vec<i32> = c.query("SELECT a FROM f WHERE a = 6").await.unwrap();
    // The other listener is not guarded.
    let mut other = my::connect(addr(&h, "tx")).await;
    other.query_drop("DELETE FROM f").await.unwrap();
}

#[tokio::test]
async fn mysql_change_user_takes_the_new_users_mode() {
    let db = my::mariadb();
    db.create_user("guarded", "guarded-pw", "mysql_native_password")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("allowlist.toml");
    std::fs::write(&list, "").unwrap();
    let extra = format!(
        "{}[users.guarded]\nfirewall = \"protecting\"\n",
        firewall("off", &list, "")
    );
    let h = sluice(&my::config_text(&db, 2, "2s", &extra)).await;
    for listener in ["tx", "session"] {
        let mut c = my::connect(addr(&h, listener)).await;
        c.query_drop("SELECT 1").await.unwrap();
        let opts = mysql_async::ChangeUserOpts::default()
            .with_user(Some("guarded".into()))
            .with_pass(Some("guarded-pw".into()));
        c.change_user(opts).await.unwrap();
        let e = c.query_drop("SELECT 2").await.unwrap_err();
        assert!(
            matches!(&e, mysql_async::Error::Server(s) if s.code == 1142),
            "{listener}: {e:?}"
        );
    }
}
