//! HTTP for operators (`[admin] http_address`): `/metrics` (Prometheus), `/health`,
//! `/ready`, `/api/stats` (the console's tables as JSON, for the dashboard) and the
//! dashboard itself at `/`, whose page and script are compiled into the binary.

use super::command::Show;
use super::table::{Cell, Table};
use crate::shared::Shared;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use std::sync::Arc;
use tokio::net::TcpListener;

const DASHBOARD: &str = include_str!("dashboard.html");

/// Serves HTTP on `socket` until the drain after shutdown is over (load balancers
/// read `/ready` as 503 meanwhile).
pub async fn serve(shared: Arc<Shared>, socket: TcpListener) {
    let stopped = shared.control.stopped.clone();
    loop {
        let accepted = tokio::select! {
            r = socket.accept() => r,
            _ = stopped.cancelled() => break,
        };
        let Ok((tcp, _)) = accepted else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(tcp);
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&shared, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
            // A scrape is short: a connection idle this long is closed.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(60), conn).await;
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    r
}

fn answer<B>(shared: &Arc<Shared>, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            super::metrics::render(shared),
        ),
        "/health" => {
            let problems = health(shared);
            if problems.is_empty() {
                reply(StatusCode::OK, "text/plain", "ok\n")
            } else {
                let body = format!("{}\n", problems.join("\n"));
                reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", body)
            }
        }
        "/ready" => {
            if shared.shutting_down() {
                reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "draining\n")
            } else if let Some(l) = unbound(shared) {
                let body = format!("listener {l} is not listening\n");
                reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", body)
            } else {
                reply(StatusCode::OK, "text/plain", "ready\n")
            }
        }
        "/api/stats" => reply(
            StatusCode::OK,
            "application/json",
            stats_json(shared).to_string(),
        ),
        "/" | "/index.html" => reply(StatusCode::OK, "text/html; charset=utf-8", DASHBOARD),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// A configured listener that is not bound.
fn unbound(shared: &Shared) -> Option<String> {
    let config = shared.config.load();
    let sql = config.listeners.keys();
    let hs = config.handlersocket.keys();
    sql.chain(hs)
        .find(|l| shared.control.addr(l).is_none())
        .cloned()
}

/// Why the process is not healthy: a listener not up, a cluster with no primary.
pub fn health(shared: &Shared) -> Vec<String> {
    let mut problems = Vec::new();
    if shared.shutting_down() {
        problems.push("shutting down".to_string());
    }
    if let Some(l) = unbound(shared) {
        problems.push(format!("listener {l} is not listening"));
    }
    let t = shared.topology.load();
    let mut clusters: Vec<_> = t.clusters.iter().collect();
    clusters.sort_by(|a, b| a.0.cmp(b.0));
    for (name, c) in clusters {
        if !c.servers.iter().any(|s| s.usable()) {
            problems.push(format!("cluster {name} has no server up"));
        } else if c.discovers && c.primary().is_none_or(|p| p.offline) {
            problems.push(format!("cluster {name} has no primary"));
        }
    }
    problems
}

/// A table as a list of JSON objects.
pub fn table_json(t: &Table) -> serde_json::Value {
    let rows = t.rows.iter().map(|r| {
        let o: serde_json::Map<String, serde_json::Value> = t
            .columns
            .iter()
            .zip(r)
            .map(|((name, _), cell)| {
                let v = match cell {
                    Cell::Int(i) => serde_json::Value::from(*i),
                    Cell::Float(f) => serde_json::Value::from(*f),
                    Cell::Text(s) => serde_json::Value::from(s.as_str()),
                    Cell::Null => serde_json::Value::Null,
                };
                (name.to_string(), v)
            })
            .collect();
        serde_json::Value::Object(o)
    });
    serde_json::Value::Array(rows.collect())
}

/// What the dashboard polls: the console's tables, the top digests and each
/// listener's latency buckets (cumulative, so the page can take percentiles of any
/// interval between two polls).
pub fn stats_json(shared: &Shared) -> serde_json::Value {
    let table = |what| super::show::table(shared, what);
    let top = table(Show::Digests)
        .shape(&[("total_time".into(), true)], Some(10))
        .unwrap_or_else(|_| table(Show::Version));
    let histograms: serde_json::Map<String, serde_json::Value> = shared
        .counters
        .all()
        .into_iter()
        .map(|(name, c)| {
            let h = c.latency.snapshot();
            let v = serde_json::json!({
                "bounds_us": crate::stats::counters::BUCKETS_US,
                "cumulative": h.cumulative,
                "sum_us": h.sum_us,
            });
            (name.to_string(), v)
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    serde_json::json!({
        "time_ms": now,
        "version": super::PRODUCT,
        "health": health(shared),
        "clients": shared.book.len(),
        "paused": shared.control.paused(),
        "servers": table_json(&table(Show::Servers)),
        "pools": table_json(&table(Show::Pools)),
        "listeners": table_json(&table(Show::Listeners)),
        "stats": table_json(&table(Show::Stats)),
        "pins": table_json(&table(Show::Pins)),
        "digests": table_json(&top),
        "histograms": histograms,
    })
}
