//! The `sluice` command: --version, check-config reporting every error with file and
//! line, and a clean stop on SIGTERM.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

#[test]
fn version_and_help() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("sluice "));
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("check-config"));
}

#[test]
fn check_config_reports_every_error_with_its_line() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    write!(
        f,
        "[general]\nlog_format = \"xml\"\n\n[listeners.a]\nprotocol = \"postgres\"\naddress = \"nohost\"\ncluster = \"missing\"\npool_sise = 3\n"
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let name = f.path().display().to_string();
    for line in [2, 6, 7, 8] {
        assert!(
            err.contains(&format!("{name}:{line}: ")),
            "line {line} missing in:\n{err}"
        );
    }
    assert!(err.contains("pool_sise"));
    let good = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/transaction-pooling.toml"
    );
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Running with a bad file fails at startup with the same report.
    let out = Command::new(BIN)
        .arg("--config")
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn check_config_warns_of_pass_through_sessions_that_cannot_follow_a_failover() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let mut text = String::new();
    for (name, port) in [("a", 5433), ("b", 5434)] {
        text.push_str(&format!(
            "[servers.{name}]\nprotocol = \"postgres\"\nhost = \"127.0.0.1\"\nport = {port}\n"
        ));
    }
    text.push_str(
        "[clusters.ha]\nservers = [\"a\", \"b\"]\n[pools.tx]\nmode = \"transaction\"\n\
         [users.lookup]\npassword = \"pw\"\n",
    );
    for (name, port, extra) in [
        ("plain", 7001, ""),
        ("looked_up", 7002, "auth_user = \"lookup\"\n"),
    ] {
        text.push_str(&format!(
            "[listeners.{name}]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:{port}\"\n\
             cluster = \"ha\"\npool = \"tx\"\n{extra}"
        ));
    }
    write!(f, "{text}").unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(f.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "a warning is no error");
    let err = String::from_utf8_lossy(&out.stderr);
    let name = f.path().display().to_string();
    assert!(
        err.contains(&format!(
            "{name}: warning: [listeners.plain]: pass-through users"
        )),
        "{err}"
    );
    assert!(!err.contains("looked_up"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn stops_cleanly_on_sigterm() {
    let port = sluice_testkit::free_port();
    let mut f = tempfile::NamedTempFile::new().unwrap();
    write!(
        f,
        "[general]\nshutdown_timeout = \"2s\"\nlog_format = \"json\"\n[servers.pg]\nprotocol = \"postgres\"\nhost = \"127.0.0.1\"\nport = 1\n[clusters.pg]\nservers = [\"pg\"]\n[listeners.pg]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:{port}\"\ncluster = \"pg\"\n"
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(f.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sluice did not start listening"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success());
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sluice did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut logs = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut logs).unwrap();
    assert!(
        logs.lines()
            .any(|l| l.starts_with('{') && l.contains("listening")),
        "JSON logs: {logs}"
    );
}

#[test]
fn digest_prints_the_id_and_text_rules_use() {
    let out = Command::new(BIN)
        .args(["digest", "SELECT c FROM t WHERE id = 42 AND k IN (1, 2, 3)"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let f = sluice_sql::facts(
        b"SELECT c FROM t WHERE id = 7 AND k IN (9)",
        sluice_sql::Dialect::Postgres,
    );
    assert_eq!(text.trim(), format!("{:#018x} {}", f.digest, f.digest_text));
    assert!(
        text.contains("SELECT c FROM t WHERE id = ? AND k IN (?)"),
        "{text}"
    );
    let out = Command::new(BIN)
        .args(["digest", "--mysql", "SELECT `a` FROM t # x"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("SELECT `a` FROM t"));
}

#[test]
fn says_when_the_descriptor_limit_is_too_low() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    write!(
        f,
        "[general]\nmax_client_connections = 100000\nshutdown_timeout = \"1s\"\n\n[servers.pg]\nprotocol = \"postgres\"\nhost = \"127.0.0.1\"\nport = 1\n\n[clusters.pg]\nservers = [\"pg\"]\n\n[listeners.pg]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:0\"\ncluster = \"pg\"\n\n[admin]\nhttp_address = \"\"\nmysql_address = \"\"\n"
    )
    .unwrap();
    // A hard limit of 4096: 100,000 session-mode clients cannot fit.
    let child = Command::new("prlimit")
        .args(["--nofile=1024:4096", BIN, "--config"])
        .arg(f.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling a child process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("descriptor limit (RLIMIT_NOFILE) is below") && err.contains("limit=4096"),
        "{err}"
    );
}
