//! A restart without a refused connection: a second Sluice with the same configuration
//! listens on the same ports (SO_REUSEPORT) and takes the new clients, then the first
//! gets SIGTERM, stops listening and drains. A client connecting continuously through
//! it all is answered every time.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

fn start(config: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--config")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice")
}

/// One client: connects, asks for TLS (SSLRequest) and reads Sluice's answer ('N':
/// the listener has none). Any failure on the way is a client turned away.
fn answered(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let ssl_request = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut answer = [0u8; 1];
    s.write_all(&ssl_request).is_ok() && s.read_exact(&mut answer).is_ok() && answer[0] == b'N'
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let since = Instant::now();
    while !f() {
        assert!(since.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_rolling_restart_refuses_no_connection() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    let text = format!(
        r#"
[general]
shutdown_timeout = "2s"

[servers.pg]
protocol = "postgres"
host = "127.0.0.1"
port = 1

[clusters.pg]
servers = ["pg"]

[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:{port}"
cluster = "pg"
auth = "passthrough"

[admin]
http_address = ""
mysql_address = ""
"#
    );
    std::fs::write(&config, text).unwrap();
    let mut old = start(&config);
    wait_until("the first Sluice listens", || answered(port));

    let stop = Arc::new(AtomicBool::new(false));
    let (tries, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, tries, failures) = (stop.clone(), tries.clone(), failures.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    tries.fetch_add(1, Ordering::Relaxed);
                    if !answered(port) {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut new = start(&config);
    // The new one listens once connections reach it: the old one is told to stop.
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        new.try_wait().unwrap().is_none(),
        "the second Sluice did not start"
    );
    // SAFETY: signalling a child process this test started.
    unsafe { libc::kill(old.id() as i32, libc::SIGTERM) };
    let exited = old.wait().unwrap();
    assert!(exited.success(), "{exited}");
    let before = tries.load(Ordering::Relaxed);
    wait_until("clients keep being answered", || {
        tries.load(Ordering::Relaxed) > before + 200
    });
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let _ = new.kill();
    let _ = new.wait();
    let (tries, failures) = (
        tries.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
    );
    assert!(tries > 500, "{tries} connections");
    assert_eq!(
        failures, 0,
        "{failures} of {tries} connections were turned away"
    );
}

#[test]
fn sighup_reads_the_file_again() {
    let (port, added) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    let listener = |name: &str, port: u16| {
        format!(
            "\n[listeners.{name}]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:{port}\"\ncluster = \"pg\"\nauth = \"passthrough\"\n"
        )
    };
    let base = "[servers.pg]\nprotocol = \"postgres\"\nhost = \"127.0.0.1\"\nport = 1\n\n[clusters.pg]\nservers = [\"pg\"]\n\n[admin]\nhttp_address = \"\"\nmysql_address = \"\"\n";
    std::fs::write(&config, format!("{base}{}", listener("pg", port))).unwrap();
    let mut sluice = start(&config);
    wait_until("Sluice listens", || answered(port));
    assert!(!answered(added));
    // A bad file: nothing changes, Sluice goes on.
    std::fs::write(&config, "[general]\nshutdown_timeout = \"soon\"\n").unwrap();
    // SAFETY: signalling a child process this test started.
    unsafe { libc::kill(sluice.id() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(answered(port) && sluice.try_wait().unwrap().is_none());
    // A listener added.
    let text = format!("{base}{}{}", listener("pg", port), listener("more", added));
    std::fs::write(&config, text).unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(sluice.id() as i32, libc::SIGHUP) };
    wait_until("the added listener listens", || answered(added));
    assert!(answered(port));
    // SAFETY: as above.
    unsafe { libc::kill(sluice.id() as i32, libc::SIGTERM) };
    assert!(sluice.wait().unwrap().success());
}
