//! The dashboard in a real browser: Debian's Chromium, headless, driven through
//! ChromeDriver's WebDriver API. The page loads from Sluice alone (no CDN) with no
//! console errors, its numbers move while a load runs, a server's state change shows,
//! and a screenshot is kept (target/dashboard.png; docs/dashboard.png is one).

use crate::common;
use common::http::request;
use common::*;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

struct Driver {
    child: std::process::Child,
    addr: SocketAddr,
    session: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = request(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn call(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string());
    let (status, text) = request(addr, method, path, body.as_deref());
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: {text}"));
    assert_eq!(status, 200, "{method} {path}: {v}");
    v["value"].clone()
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let child = std::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; scripts/install-deps.sh installs it)");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..100 {
            if std::net::TcpStream::connect(addr).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1100"]
            },
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let (status, text) = request(addr, "POST", "/session", Some(&caps.to_string()));
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: {text}"));
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        Driver {
            child,
            addr,
            session,
        }
    }

    fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        call(
            self.addr,
            method,
            &format!("/session/{}/{what}", self.session),
            body,
        )
    }

    fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    fn text(&self, id: &str) -> String {
        let v = self.js(&format!(
            "return document.getElementById('{id}').textContent"
        ));
        v.as_str().unwrap_or_default().to_string()
    }

    /// Waits (up to 20 s) until `check` holds on the element's text.
    fn until(&self, id: &str, check: impl Fn(&str) -> bool) -> String {
        let mut t = self.text(id);
        for _ in 0..200 {
            if check(&t) {
                return t;
            }
            std::thread::sleep(Duration::from_millis(100));
            t = self.text(id);
        }
        panic!("#{id} stayed {t:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_load_live() {
    let pg = pg();
    let extra = "\n[admin]\nhttp_address = \"127.0.0.1:0\"\nmysql_address = \"\"\n";
    let h = sluice(&config_text(&pg, 4, "2s", extra)).await;
    let http = h.addrs["admin_http"];
    let tx = addr(&h, "tx");
    // A steady load while the page watches.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn({
        let stop = stop.clone();
        async move {
            let c = connect(tx, APP_USER, APP_PW, "app").await.unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.simple_query("select 1").await.unwrap();
                c.simple_query("select pg_sleep(0.002)").await.unwrap();
            }
        }
    });
    let shared = h.shared.clone();
    let shot = tokio::task::spawn_blocking(move || {
        let d = Driver::start();
        d.cmd(
            "POST",
            "url",
            Some(json!({"url": format!("http://{http}/")})),
        );
        d.until("updates", |t| t.parse::<u32>().unwrap_or(0) >= 3);
        let qps = d.until("qps", |t| t.parse::<f64>().unwrap_or(0.0) > 0.0);
        let p99 = d.until("p99", |t| t.parse::<f64>().is_ok());
        let clients = d.text("clients");
        assert_eq!(clients, "1", "qps {qps}, p99 {p99}");
        let digests = d.js("return document.querySelectorAll('#digests tbody tr').length");
        assert!(digests.as_u64().unwrap_or(0) >= 2, "top digests: {digests}");
        // The numbers move: later polls see more statements.
        let first = d.js("return last.queries").as_f64().unwrap_or(0.0);
        d.until("updates", |t| t.parse::<u32>().unwrap_or(0) >= 5);
        let later = d.js("return last.queries").as_f64().unwrap_or(0.0);
        assert!(later > first, "{first} -> {later}");
        // A server's state change shows as it happens.
        shared.topology.set_offline("pg", true);
        d.until("servers", |t| t.contains("offline"));
        d.until("events", |t| t.contains("up →") || t.contains("offline"));
        let shot = d.cmd("GET", "screenshot", None);
        // No console errors.
        let logs = d.cmd("POST", "se/log", Some(json!({"type": "browser"})));
        let severe: Vec<&Value> = logs
            .as_array()
            .map(|a| a.iter().filter(|e| e["level"] == "SEVERE").collect())
            .unwrap_or_default();
        assert!(severe.is_empty(), "console errors: {severe:?}");
        shot.as_str().unwrap_or_default().to_string()
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = load.await;
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot)
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let target =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/dashboard.png");
    std::fs::write(target, png).unwrap();
}
