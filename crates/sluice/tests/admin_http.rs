//! Metrics, health and the dashboard's API over HTTP (`[admin] http_address`): the
//! scrape parsed by a Prometheus text parser, its numbers against a known workload.

use crate::common;
use common::http::get;
use common::*;

/// The admin's HTTP on a free port, and a cluster `watched` (the same server) whose
/// roles the health checker discovers.
fn extra(port: u16) -> String {
    format!(
        r#"
[admin]
http_address = "127.0.0.1:0"
mysql_address = ""

[servers.pg2]
protocol = "postgres"
host = "127.0.0.1"
port = {port}

[clusters.watched]
servers = ["pg2"]
health_user = "{APP_USER}"
health_password = "{APP_PW}"
health_interval = "100ms"
health_failures = 1
"#
    )
}

fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => 0.0,
        })
}

fn scrape(http: std::net::SocketAddr) -> prometheus_parse::Scrape {
    let (status, body) = get(http, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    let lines = body.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("a Prometheus text parser reads it")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_the_dashboard_api() {
    let pg = pg();
    let h = sluice(&config_text(&pg, 4, "2s", &extra(pg.port()))).await;
    let http = h.addrs["admin_http"];
    // Healthy once the checker has found the watched cluster's primary.
    let mut health = get(http, "/health");
    for _ in 0..100 {
        if health.0 == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        health = get(http, "/health");
    }
    assert_eq!(health, (200, "ok\n".to_string()));
    let before = scrape(http);
    assert_eq!(
        sample(
            &before,
            "sluice_listener_queries_total",
            &[("listener", "tx")]
        ),
        Some(0.0)
    );
    let app = connect(addr(&h, "tx"), APP_USER, APP_PW, "app")
        .await
        .unwrap();
    for _ in 0..5 {
        app.simple_query("select 1").await.unwrap();
    }
    assert!(app.simple_query("select 1/0").await.is_err());
    let tx = [("listener", "tx"), ("route", "read-write")];
    // The last answer may reach the client a moment before it is counted.
    let mut s = scrape(http);
    for _ in 0..50 {
        if sample(&s, "sluice_listener_queries_total", &tx) == Some(6.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        s = scrape(http);
    }
    assert_eq!(sample(&s, "sluice_listener_queries_total", &tx), Some(6.0));
    assert_eq!(
        sample(&s, "sluice_listener_query_errors_total", &tx),
        Some(1.0)
    );
    assert_eq!(sample(&s, "sluice_listener_logins_total", &tx), Some(1.0));
    assert_eq!(sample(&s, "sluice_listener_clients", &tx), Some(1.0));
    assert!(sample(&s, "sluice_listener_received_bytes_total", &tx).is_some_and(|b| b > 60.0));
    assert!(sample(&s, "sluice_listener_sent_bytes_total", &tx).is_some_and(|b| b > 60.0));
    assert_eq!(sample(&s, "sluice_clients", &[]), Some(1.0));
    assert_eq!(
        sample(&s, "sluice_listener_query_duration_seconds", &tx),
        Some(6.0),
        "histogram count"
    );
    let server = [("cluster", "pg"), ("server", "pg")];
    assert_eq!(sample(&s, "sluice_server_up", &server), Some(1.0));
    assert_eq!(sample(&s, "sluice_server_offline", &server), Some(0.0));
    assert_eq!(
        sample(&s, "sluice_cluster_writable", &[("cluster", "pg")]),
        Some(1.0)
    );
    let pool = [("pool", "tx"), ("user", "app"), ("database", "app")];
    assert!(sample(&s, "sluice_pool_leases_total", &pool).is_some_and(|n| n >= 6.0));
    assert_eq!(sample(&s, "sluice_pool_size", &pool), Some(4.0));
    assert_eq!(
        sample(&s, "sluice_pool_wait_duration_seconds", &pool),
        Some(0.0),
        "no waits"
    );
    assert_eq!(
        sample(&s, "sluice_pins_total", &[("reason", "temp_table")]),
        Some(0.0)
    );
    assert!(sample(&s, "sluice_digests", &[]).is_some_and(|n| n >= 2.0));
    // Every family has its HELP line.
    let (_, body) = get(http, "/metrics");
    for family in s.docs.keys() {
        assert!(body.contains(&format!("# HELP {family} ")), "{family}");
    }

    assert_eq!(get(http, "/ready").0, 200);
    let (status, page) = get(http, "/");
    assert_eq!(status, 200);
    assert!(
        page.contains("<title>Sluice</title>")
            && !page.contains("http://")
            && !page.contains("https://"),
        "no CDN"
    );
    let (status, api) = get(http, "/api/stats");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&api).unwrap();
    assert_eq!(v["clients"], 1);
    assert!(v["digests"].as_array().is_some_and(|d| !d.is_empty()));
    assert!(v["histograms"]["tx"]["cumulative"].is_array());
    assert_eq!(get(http, "/nothing").0, 404);

    // A cluster whose every server is drained cannot serve; one without its primary
    // cannot write.
    h.shared.topology.set_offline("pg", true);
    assert_eq!(
        get(http, "/health"),
        (503, "cluster pg has no server up\n".to_string())
    );
    h.shared.topology.set_offline("pg", false);
    assert_eq!(get(http, "/health"), (200, "ok\n".to_string()));
    drop(pg);
    let mut health = get(http, "/health");
    for _ in 0..100 {
        if health.0 == 503 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        health = get(http, "/health");
    }
    assert_eq!(
        health,
        (503, "cluster watched has no server up\n".to_string())
    );
    let s = scrape(http);
    assert_eq!(
        sample(&s, "sluice_cluster_writable", &[("cluster", "watched")]),
        Some(0.0)
    );
    h.begin_shutdown();
    let (status, body) = get(http, "/ready");
    assert_eq!((status, body.as_str()), (503, "draining\n"));
}
