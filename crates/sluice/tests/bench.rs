//! sluice-bench against real servers and Sluice: every scenario runs briefly directly
//! and through Sluice (PostgreSQL and MySQL, simple and prepared, closed and open loop,
//! HandlerSocket lookups), and a benchmark file runs end to end (the sluice binary
//! started as a process and measured, rounds alternating, connection scale) with its
//! results rendered. What is checked is that the numbers are complete and consistent;
//! no test asserts a speed.

use crate::common;

use sluice_bench::compare::{self, CompareOptions};
use sluice_bench::results::Results;
use sluice_bench::scenario::setup::ensure_table;
use sluice_bench::scenario::sql::{Mode, Protocol, SqlTarget};
use sluice_bench::spec::{RunSpec, Scenario};
use sluice_bench::stats::Summary;
use std::time::Duration;

const KEYS: u64 = 500;

/// Sluice on a runtime of its own (sluice-bench runs blocking, with runtimes of its own).
struct Running {
    rt: tokio::runtime::Runtime,
    handle: Option<sluice::server::Handle>,
}

impl Running {
    fn start(text: &str) -> Running {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let handle = rt.block_on(common::sluice(text));
        Running {
            rt,
            handle: Some(handle),
        }
    }

    fn addr(&self, listener: &str) -> String {
        let h = self.handle.as_ref().expect("running");
        common::addr(h, listener).to_string()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown(Duration::from_secs(2)));
        }
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A numbers check every run must pass: something measured, no errors, no misses
/// (every key exists), counts and percentiles consistent.
fn check(what: &str, s: &Summary) {
    assert_eq!(s.errors, 0, "{what}: {:?}", s.first_error);
    assert!(s.ops > 0, "{what}: nothing measured");
    assert_eq!(s.misses, 0, "{what}: lookups without their row");
    assert!(
        s.answered >= s.ops,
        "{what}: {} answered < {} ops",
        s.answered,
        s.ops
    );
    let l = &s.latency_us;
    assert!(
        l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max && l.p50 > 0,
        "{what}: percentiles out of order: {l:?}"
    );
    let rate = s.ops as f64 / s.elapsed_s;
    assert!(
        (s.ops_per_sec - rate).abs() < 1e-6 * rate.max(1.0),
        "{what}"
    );
    // The JSON form carries the same numbers.
    let v = serde_json::to_value(s).expect("serialize");
    assert_eq!(v["ops"], s.ops, "{what}");
    assert!(v["latency_us"]["p999"].is_u64(), "{what}");
}

fn spec(scenario: Scenario, protocol: Protocol, mode: Mode, t: &SqlTarget, addr: &str) -> RunSpec {
    let mut s = RunSpec::new(scenario, protocol, addr);
    s.mode = mode;
    s.user = t.user.clone();
    s.password = t.password.clone();
    s.db = t.db.clone();
    s.plan.connections = 3;
    s.plan.warmup = Duration::from_millis(200);
    s.plan.duration = Duration::from_millis(500);
    s.plan.keys = KEYS;
    s
}

/// Every SQL scenario and mode against each address.
fn sql_scenarios(protocol: Protocol, t: &SqlTarget, addrs: &[(&str, String)]) {
    for (name, addr) in addrs {
        for (scenario, mode, rate) in [
            (Scenario::Ping, Mode::Simple, None),
            (Scenario::Ping, Mode::Prepared, None),
            (Scenario::PointSelect, Mode::Simple, None),
            (Scenario::PointSelect, Mode::Prepared, None),
            (Scenario::ReadWrite, Mode::Simple, None),
            (Scenario::ReadWrite, Mode::Prepared, None),
            (Scenario::PointSelect, Mode::Prepared, Some(300.0)),
        ] {
            let mut s = spec(scenario, protocol, mode, t, addr);
            s.plan.rate = rate;
            let what = format!("{name} {} {} rate {rate:?}", scenario.name(), mode.name());
            let summary = s.execute().unwrap_or_else(|e| panic!("{what}: {e:#}"));
            check(&what, &summary);
            if let Some(r) = rate {
                // Open loop: about rate × duration requests, never many more.
                let most = r * s.plan.duration.as_secs_f64() * 1.5 + 3.0;
                assert!((summary.ops as f64) < most, "{what}: {} ops", summary.ops);
            }
        }
    }
}

#[test]
fn pg_scenarios_direct_and_through_sluice() {
    let pg = common::pg();
    let sluice = Running::start(&common::config_text(&pg, 4, "10s", ""));
    let direct = SqlTarget {
        protocol: Protocol::Pg,
        addr: format!("127.0.0.1:{}", pg.port()),
        user: "postgres".into(),
        password: pg.password().into(),
        db: "bench".into(),
        tls: false,
        driver_reads: false,
        connect_sql: Vec::new(),
    };
    assert!(
        block_on(ensure_table(&direct, KEYS)).expect("setup"),
        "first setup fills"
    );
    assert!(
        !block_on(ensure_table(&direct, KEYS)).expect("setup"),
        "second leaves it"
    );
    let addrs = [
        ("direct", direct.addr.clone()),
        ("sluice-session", sluice.addr("session")),
        ("sluice-tx", sluice.addr("tx")),
    ];
    sql_scenarios(Protocol::Pg, &direct, &addrs);
}

#[test]
fn mysql_scenarios_and_kv_lookups() {
    let db = common::my::mariadb();
    let hs = format!(
        r#"
[handlersocket.hs]
address = "127.0.0.1:0"
cluster = "my"
mode = "read-only"
user = "{}"
password = "{}"
"#,
        db.user(),
        db.password()
    );
    let sluice = Running::start(&common::my::config_text(&db, 4, "10s", &hs));
    let direct = SqlTarget {
        protocol: Protocol::Mysql,
        addr: format!("127.0.0.1:{}", db.port()),
        user: db.user().into(),
        password: db.password().into(),
        db: "bench".into(),
        tls: false,
        driver_reads: false,
        connect_sql: Vec::new(),
    };
    assert!(block_on(ensure_table(&direct, KEYS)).expect("setup"));
    let addrs = [
        ("direct", direct.addr.clone()),
        ("sluice-session", sluice.addr("session")),
        ("sluice-tx", sluice.addr("tx")),
    ];
    sql_scenarios(Protocol::Mysql, &direct, &addrs);
    for depth in [1, 8] {
        let mut s = spec(
            Scenario::KvLookup,
            Protocol::Mysql,
            Mode::Simple,
            &direct,
            &sluice.addr("hs"),
        );
        s.depth = depth;
        let summary = s.execute().expect("kv-lookup");
        check(&format!("kv-lookup depth {depth}"), &summary);
    }
}

#[test]
fn a_benchmark_file_runs_end_to_end() {
    let pg = common::pg();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = sluice_testkit::free_port();
    let tls_port = sluice_testkit::free_port();
    let (_ca, cert, key) = sluice_testkit::tls_files(dir.path()).expect("certificates");
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[servers.pg]
protocol = "postgres"
host = "127.0.0.1"
port = {}

[clusters.pg]
servers = ["pg"]

[users.postgres]
password = "{pw}"

[pools.tx]
mode = "transaction"
size = 2

[listeners.tx]
protocol = "postgres"
address = "127.0.0.1:{port}"
cluster = "pg"
pool = "tx"
auth = "scram-sha-256"

[listeners.tls]
protocol = "postgres"
address = "127.0.0.1:{tls_port}"
cluster = "pg"
pool = "tx"
auth = "scram-sha-256"
tls = "require"
tls_cert_file = "{cert}"
tls_key_file = "{key}"
"#,
            pg.port(),
            pw = pg.password(),
            cert = cert.display(),
            key = key.display(),
        ),
    )
    .expect("write config");
    let bench = dir.path().join("bench.toml");
    std::fs::write(
        &bench,
        format!(
            r#"
title = "end to end"
rounds = 2
duration = 0.4
warmup = 0.1
keys = {KEYS}

[[process]]
name = "sluice"
command = ["{bin}", "--config", "{config}"]
ready = ["127.0.0.1:{port}", "127.0.0.1:{tls_port}"]

[[target]]
name = "direct"
protocol = "pg"
addr = "127.0.0.1:{pgport}"
password_env = "SLUICE_TEST_PG_PASSWORD"

[[target]]
name = "sluice-tx"
protocol = "pg"
addr = "127.0.0.1:{port}"
password_env = "SLUICE_TEST_PG_PASSWORD"
process = "sluice"

[[target]]
name = "sluice-tls"
protocol = "pg"
addr = "127.0.0.1:{tls_port}"
password_env = "SLUICE_TEST_PG_PASSWORD"
process = "sluice"
tls = true

[[table]]
id = "ping"
title = "ping"
scenario = "ping"
connections = [1, 3]
notes = "a note"

[[table]]
id = "rw"
title = "read-write"
scenario = "read-write"
mode = "prepared"
connections = [2]
rounds = 1

[scale]
targets = ["sluice-tx"]
idle = 40
active = 2
duration = 0.3
settle = 0.2

[storm]
targets = ["sluice-tx", "sluice-tls"]
clients = 30
rounds = 2
"#,
            bin = env!("CARGO_BIN_EXE_sluice"),
            config = config.display(),
            pgport = pg.port(),
        ),
    )
    .expect("write bench file");
    // SAFETY: this test is the only thread of its process touching the environment
    // (nextest runs each test in a process of its own).
    unsafe { std::env::set_var("SLUICE_TEST_PG_PASSWORD", pg.password()) };
    let opts = CompareOptions {
        command: "sluice-bench compare bench.toml".into(),
        log_dir: Some(dir.path().join("logs")),
        ..Default::default()
    };
    let results = compare::run_file(&bench, &opts).expect("compare");
    assert_eq!(results.targets, ["direct", "sluice-tx", "sluice-tls"]);
    assert_eq!(results.tables.len(), 2);
    // ping: 2 connection counts x 2 rounds x 3 targets; rw: 1 x 1 x 3.
    assert_eq!(results.runs.len(), 15);
    for r in &results.runs {
        check(
            &format!("{} {} c{} r{}", r.table, r.target, r.connections, r.round),
            &r.summary,
        );
        match (r.target.as_str(), &r.process) {
            ("direct", None) => {}
            ("sluice-tx" | "sluice-tls", Some(p)) => {
                assert!(
                    p.cpu_s >= 0.0 && p.rss_kib > 0 && p.peak_rss_kib >= p.rss_kib,
                    "{p:?}"
                )
            }
            other => panic!("unexpected process reading {other:?}"),
        }
    }
    // Alternation: within a round, direct runs before sluice-tx.
    let order: Vec<&str> = results
        .runs
        .iter()
        .take(6)
        .map(|r| r.target.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "direct",
            "sluice-tx",
            "sluice-tls",
            "direct",
            "sluice-tx",
            "sluice-tls"
        ]
    );
    assert_eq!(results.scale.len(), 1);
    let sc = &results.scale[0];
    assert_eq!((sc.idle, sc.active), (40, 2));
    assert!(sc.rss_before_kib > 0 && sc.bytes_per_idle.is_finite());
    check("scale alone", &sc.without_idle);
    check("scale with idle", &sc.with_idle);
    // Login storms, plain and over TLS: every client logged in, every round.
    let storms: Vec<(&str, bool)> = results
        .storm
        .iter()
        .map(|s| (s.target.as_str(), s.tls))
        .collect();
    assert_eq!(storms, [("sluice-tx", false), ("sluice-tls", true)]);
    for s in &results.storm {
        assert_eq!(s.rounds.len(), 2, "{s:?}");
        for r in &s.rounds {
            assert!(
                r.failed == 0 && r.seconds > 0.0 && r.login_p99_ms > 0.0,
                "{s:?}"
            );
        }
    }
    // The document survives JSON and renders.
    let text = serde_json::to_string(&results).expect("json");
    let back = Results::from_json(&text).expect("read back");
    // (Floats may differ in their last digit after a JSON round trip.)
    assert_eq!(
        (&back.tables, &back.targets),
        (&results.tables, &results.targets)
    );
    let ops = |r: &Results| {
        r.runs
            .iter()
            .map(|x| (x.summary.ops, x.summary.answered))
            .collect::<Vec<_>>()
    };
    assert_eq!(ops(&back), ops(&results));
    let r = sluice_bench::report::render(&[back], &Default::default()).expect("render");
    assert!(r.markdown.contains("ratio to direct"), "{}", r.markdown);
    assert!(r.markdown.contains("a note"));
    assert!(r.markdown.contains("Connection scale"));
    assert!(
        r.markdown.contains("| sluice-tls (PostgreSQL, TLS) | 30 |"),
        "{}",
        r.markdown
    );
    assert_eq!(r.charts.len(), 4);
    // Everything the file started is stopped.
    let log = std::fs::read_to_string(dir.path().join("logs/sluice.log")).unwrap_or_default();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "sluice still listening; its log:\n{log}"
    );
}
