//! `/metrics`: everything the console shows, in Prometheus' text format, written by
//! the `prometheus-client` crate from a collector that reads the flow's own counters at
//! scrape time (nothing is counted twice, and nothing is counted for metrics alone).

use crate::shared::Shared;
use crate::stats::counters::{BUCKETS_US, HistogramSnapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

type Labels = Vec<(&'static str, String)>;

/// The whole scrape, as text.
pub fn render(shared: &Arc<Shared>) -> String {
    let mut registry = Registry::with_prefix("sluice");
    registry.register_collector(Box::new(Scrape(shared.clone())));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

struct Scrape(Arc<Shared>);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

enum Value {
    Int(u64),
    Float(f64),
}

/// A label value as the text format wants it: backslash, double quote and newline
/// escaped (a user or database name may hold any of them).
fn escape(labels: Labels) -> Labels {
    labels
        .into_iter()
        .map(|(k, v)| {
            let v = if v.contains(['\\', '"', '\n']) {
                v.replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n")
            } else {
                v
            };
            (k, v)
        })
        .collect()
}

/// One metric family: its rows of (labels, value).
fn family(
    e: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    rows: Vec<(Labels, Value)>,
) -> Result<(), Error> {
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in rows {
        if labels.is_empty() {
            write(&mut m, &kind, v)?;
        } else {
            let labels = escape(labels);
            let mut f = m.encode_family(&labels)?;
            write(&mut f, &kind, v)?;
        }
    }
    Ok(())
}

fn write(f: &mut MetricEncoder, kind: &MetricType, v: Value) -> Result<(), Error> {
    match (kind, v) {
        (MetricType::Counter, Value::Int(n)) => f.encode_counter::<NoLabelSet, _, u64>(&n, None),
        (MetricType::Counter, Value::Float(x)) => f.encode_counter::<NoLabelSet, _, f64>(&x, None),
        (_, Value::Int(n)) => f.encode_gauge(&(n.min(i64::MAX as u64) as i64)),
        (_, Value::Float(x)) => f.encode_gauge(&x),
    }
}

fn histogram(
    e: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    rows: Vec<(Labels, HistogramSnapshot)>,
) -> Result<(), Error> {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in rows {
        let mut buckets: Vec<(f64, u64)> = BUCKETS_US
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    *b as f64 / 1e6,
                    h.cumulative[i] - if i == 0 { 0 } else { h.cumulative[i - 1] },
                )
            })
            .collect();
        let last = h.cumulative[BUCKETS_US.len()] - h.cumulative[BUCKETS_US.len() - 1];
        buckets.push((f64::MAX, last));
        let labels = escape(labels);
        let f = m.encode_family(&labels)?;
        let mut f = f;
        f.encode_histogram::<NoLabelSet>(h.sum_us as f64 / 1e6, h.count(), &buckets, None)?;
    }
    Ok(())
}

fn n(a: &AtomicU64) -> Value {
    Value::Int(a.load(Ordering::Relaxed))
}

const C: MetricType = MetricType::Counter;
const G: MetricType = MetricType::Gauge;

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), Error> {
        let s = &*self.0;
        let config = s.config.load();
        listeners(&mut e, s, &config)?;
        pools(&mut e, s)?;
        pool_waits(&mut e, s)?;
        handlersocket(&mut e, s)?;
        servers(&mut e, s, &config)?;
        let clients = s.book.len() as u64;
        family(
            &mut e,
            ("clients", "Clients logged in", G),
            vec![(vec![], Value::Int(clients))],
        )?;
        let pins = crate::session::ledger::PinReason::ALL
            .iter()
            .map(|r| {
                (
                    vec![("reason", r.as_str().to_string())],
                    Value::Int(s.pins.get(*r)),
                )
            })
            .collect();
        let clients = s.book.all();
        let pinned = crate::session::ledger::PinReason::ALL
            .iter()
            .map(|r| {
                let n = clients
                    .iter()
                    .filter(|c| c.pinned().any(|p| p == *r))
                    .count();
                (
                    vec![("reason", r.as_str().to_string())],
                    Value::Int(n as u64),
                )
            })
            .collect();
        family(
            &mut e,
            (
                "pinned_clients",
                "Clients whose session is pinned to its server connection now, by reason",
                G,
            ),
            pinned,
        )?;
        family(
            &mut e,
            (
                "pins",
                "Sessions pinned to their server connection, by reason",
                C,
            ),
            pins,
        )?;
        use crate::stats::counters::{BUSY_POLL_HITS, BUSY_POLL_MISSES};
        family(
            &mut e,
            (
                "busy_poll_waits",
                "Sockets a lone client's session watched (busy_poll_us), by outcome: hit (bytes came) or miss (it slept)",
                C,
            ),
            vec![
                (vec![("outcome", "hit".to_string())], n(&BUSY_POLL_HITS)),
                (vec![("outcome", "miss".to_string())], n(&BUSY_POLL_MISSES)),
            ],
        )?;
        if let Some(d) = &s.digests {
            let len = Value::Int(d.len() as u64);
            family(
                &mut e,
                ("digests", "Query digest entries kept", G),
                vec![(vec![], len)],
            )?;
            let ev = n(&d.evicted);
            family(
                &mut e,
                (
                    "digests_evicted",
                    "Digest entries evicted to stay within digest_max_entries",
                    C,
                ),
                vec![(vec![], ev)],
            )?;
        }
        let mut hits = Vec::new();
        for (protocol, set) in [
            ("postgres", s.pg.rules.load()),
            ("mysql", s.my.rules.load()),
        ] {
            for (rule, h) in set.set.hits() {
                let labels = vec![
                    ("rule", rule.to_string()),
                    ("protocol", protocol.to_string()),
                ];
                hits.push((labels, Value::Int(h)));
            }
        }
        family(
            &mut e,
            ("rule_hits", "Statements each query rule matched", C),
            hits,
        )?;
        let fw = &s.firewall;
        let firewall = vec![
            (vec![("outcome", "detected".to_string())], n(&fw.detected)),
            (vec![("outcome", "refused".to_string())], n(&fw.refused)),
            (vec![("outcome", "learned".to_string())], n(&fw.learned)),
        ];
        family(
            &mut e,
            (
                "firewall_statements",
                "Statements the firewall did not find on the allowlist (detected, refused) or added to it (learned)",
                C,
            ),
            firewall,
        )?;
        let m = &s.mirrors;
        let mirrors = vec![
            (vec![("outcome", "done".to_string())], n(&m.done)),
            (vec![("outcome", "failed".to_string())], n(&m.failed)),
            (vec![("outcome", "dropped".to_string())], n(&m.dropped)),
        ];
        family(
            &mut e,
            (
                "mirrored_statements",
                "Statements mirrored by rules, by outcome",
                C,
            ),
            mirrors,
        )?;
        let paused = config
            .clusters
            .keys()
            .map(|c| {
                (
                    vec![("cluster", c.clone())],
                    Value::Int(u64::from(s.control.is_paused(c))),
                )
            })
            .collect();
        family(
            &mut e,
            (
                "cluster_paused",
                "1 while PAUSE holds the cluster's new transactions",
                G,
            ),
            paused,
        )?;
        let t = s.topology.load();
        family(
            &mut e,
            (
                "topology_changes",
                "Changes of server state, role or lag that move routes",
                C,
            ),
            vec![(vec![], Value::Int(t.routes))],
        )?;
        Ok(())
    }
}

fn listeners(
    e: &mut DescriptorEncoder,
    s: &Shared,
    config: &sluice_config::Config,
) -> Result<(), Error> {
    let route = |name: &str| {
        config
            .listeners
            .get(name)
            .map_or("none".to_string(), |l| l.route.kind.as_str().to_string())
    };
    let all = s.counters.all();
    let labels = |name: &str| vec![("listener", name.to_string()), ("route", route(name))];
    let rows = |f: &dyn Fn(&crate::stats::counters::ListenerCounters) -> Value| {
        all.iter()
            .map(|(name, c)| (labels(name), f(c)))
            .collect::<Vec<_>>()
    };
    family(
        e,
        ("listener_logins", "Clients that logged in", C),
        rows(&|c| n(&c.logins)),
    )?;
    family(
        e,
        ("listener_queries", "Statements answered", C),
        rows(&|c| n(&c.queries)),
    )?;
    family(
        e,
        (
            "listener_query_errors",
            "Statements answered with an error",
            C,
        ),
        rows(&|c| n(&c.errors)),
    )?;
    family(
        e,
        ("listener_rows", "Rows sent to clients", C),
        rows(&|c| n(&c.rows)),
    )?;
    let bytes_in = rows(&|c| n(&c.bytes_in));
    family(
        e,
        ("listener_received_bytes", "Bytes read from clients", C),
        bytes_in,
    )?;
    let bytes_out = rows(&|c| n(&c.bytes_out));
    family(
        e,
        ("listener_sent_bytes", "Bytes written to clients", C),
        bytes_out,
    )?;
    let clients = s.book.all();
    let per = config
        .listeners
        .keys()
        .map(|l| {
            let k = clients
                .iter()
                .filter(|c| c.listener() == l.as_str())
                .count();
            (labels(l), Value::Int(k as u64))
        })
        .collect();
    family(
        e,
        ("listener_clients", "Clients logged in, by listener", G),
        per,
    )?;
    let hist = all
        .iter()
        .map(|(name, c)| (labels(name), c.latency.snapshot()))
        .collect();
    histogram(
        e,
        (
            "listener_query_duration_seconds",
            "Time from a statement's sending to its answer",
        ),
        hist,
    )
}

/// Each HandlerSocket listener's counters.
fn handlersocket(e: &mut DescriptorEncoder, s: &Shared) -> Result<(), Error> {
    let all = s.kv_stats.read().clone();
    let rows = |f: &dyn Fn(&crate::kv::KvStats) -> Value| {
        all.iter()
            .map(|(name, kv)| (vec![("listener", name.clone())], f(kv)))
            .collect::<Vec<_>>()
    };
    type Read<'a> = &'a dyn Fn(&crate::kv::KvStats) -> Value;
    let families: [(&str, &str, Read); 4] = [
        (
            "handlersocket_requests",
            "Requests run",
            &|k| n(&k.requests),
        ),
        (
            "handlersocket_batches",
            "Batches the requests ran in (one statement or transaction each)",
            &|k| n(&k.batches),
        ),
        (
            "handlersocket_grouped_requests",
            "Requests answered from a lookup grouping several keys",
            &|k| n(&k.grouped),
        ),
        (
            "handlersocket_catalog_reads",
            "Tables read from the server's catalog",
            &|k| n(&k.catalog_reads),
        ),
    ];
    for (name, help, f) in families {
        family(e, (name, help, C), rows(f))?;
    }
    Ok(())
}

/// Each pool's wait histogram, labelled as its other series.
fn pool_waits(e: &mut DescriptorEncoder, s: &Shared) -> Result<(), Error> {
    let labels = |protocol: &str, k: &crate::pool::PoolKey| -> Labels {
        vec![
            ("pool", k.policy.clone()),
            ("protocol", protocol.to_string()),
            ("server", k.server.clone()),
            ("database", k.database.clone()),
            ("user", k.user.clone()),
            ("options", super::show::pool_options(&k.extra)),
        ]
    };
    let pg =
        s.pg.pools
            .all()
            .into_iter()
            .map(|p| (labels("postgres", &p.key), p.wait_time.snapshot()));
    let my =
        s.my.pools
            .all()
            .into_iter()
            .map(|p| (labels("mysql", &p.key), p.wait_time.snapshot()));
    histogram(
        e,
        (
            "pool_wait_duration_seconds",
            "How long clients waited for a server connection (leases that had to wait)",
        ),
        pg.chain(my).collect(),
    )
}

fn pools(e: &mut DescriptorEncoder, s: &Shared) -> Result<(), Error> {
    let t = super::show::table(s, super::command::Show::Pools);
    let idx = |c: &str| t.columns.iter().position(|(n, _)| *n == c).unwrap_or(0);
    let labels = |r: &[super::Cell]| -> Labels {
        ["pool", "protocol", "server", "database", "user", "options"]
            .iter()
            .map(|k| (*k, r[idx(k)].text().unwrap_or_default()))
            .collect()
    };
    let get = |r: &[super::Cell], c: &str| match &r[idx(c)] {
        super::Cell::Int(i) => Value::Int(*i as u64),
        super::Cell::Float(f) => Value::Float(*f),
        _ => Value::Int(0),
    };
    let rows = |c: &str| {
        t.rows
            .iter()
            .map(|r| (labels(r), get(r, c)))
            .collect::<Vec<_>>()
    };
    let mut conns = Vec::new();
    for r in &t.rows {
        for state in ["in_use", "idle"] {
            let mut l = labels(r);
            l.push(("state", state.to_string()));
            conns.push((l, get(r, state)));
        }
    }
    family(
        e,
        (
            "pool_connections",
            "Server connections of the pool, in use or idle",
            G,
        ),
        conns,
    )?;
    family(e, ("pool_size", "The pool's size", G), rows("size"))?;
    family(
        e,
        (
            "pool_waiting_clients",
            "Clients waiting for a connection now",
            G,
        ),
        rows("waiting"),
    )?;
    family(
        e,
        (
            "pool_leases",
            "Connections leased (transactions, in transaction mode)",
            C,
        ),
        rows("leases"),
    )?;
    family(
        e,
        ("pool_waits", "Leases that had to wait", C),
        rows("waits"),
    )?;
    family(
        e,
        ("pool_slow_waits", "Waits longer than 100 ms", C),
        rows("slow_waits"),
    )?;
    family(
        e,
        (
            "pool_answered",
            "Reads of server settings answered without a server connection",
            C,
        ),
        rows("answered"),
    )?;
    let secs = t
        .rows
        .iter()
        .map(|r| {
            let ms = match get(r, "wait_ms") {
                Value::Float(f) => f,
                Value::Int(i) => i as f64,
            };
            (labels(r), Value::Float(ms / 1000.0))
        })
        .collect();
    family(
        e,
        (
            "pool_wait_seconds",
            "Time clients spent waiting for a connection",
            C,
        ),
        secs,
    )?;
    family(
        e,
        (
            "pool_wait_timeouts",
            "Waits that ended in the pool's wait_timeout",
            C,
        ),
        rows("wait_timeouts"),
    )
}

fn servers(
    e: &mut DescriptorEncoder,
    s: &Shared,
    config: &sluice_config::Config,
) -> Result<(), Error> {
    let t = s.topology.load();
    let (mut up, mut primary, mut lag, mut offline, mut has_primary) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut clusters: Vec<_> = t.clusters.iter().collect();
    clusters.sort_by(|a, b| a.0.cmp(b.0));
    for (cluster, view) in clusters {
        let ok = if view.discovers {
            view.primary().is_some_and(|p| !p.offline)
        } else {
            view.servers.iter().any(|v| v.up && !v.offline)
        };
        has_primary.push((
            vec![("cluster", cluster.clone())],
            Value::Int(u64::from(ok)),
        ));
        for v in &view.servers {
            let labels: Labels = vec![
                ("cluster", cluster.clone()),
                ("server", v.name.to_string()),
                ("role", v.role.as_str().to_string()),
            ];
            up.push((labels.clone(), Value::Int(u64::from(v.up))));
            primary.push((
                labels.clone(),
                Value::Int(u64::from(v.role == crate::topology::Role::Primary)),
            ));
            offline.push((labels.clone(), Value::Int(u64::from(v.offline))));
            if let Some(l) = v.lag {
                lag.push((labels, Value::Float(l.as_secs_f64())));
            }
        }
    }
    let _ = config;
    family(
        e,
        (
            "server_up",
            "1 when the server's last health check succeeded",
            G,
        ),
        up,
    )?;
    family(
        e,
        (
            "server_primary",
            "1 when the server is its cluster's primary",
            G,
        ),
        primary,
    )?;
    family(
        e,
        (
            "server_offline",
            "1 while SET SERVER ... OFFLINE drains the server",
            G,
        ),
        offline,
    )?;
    family(
        e,
        (
            "server_lag_seconds",
            "A replica's delay behind its primary",
            G,
        ),
        lag,
    )?;
    family(
        e,
        (
            "cluster_writable",
            "1 when the cluster has one primary to write to (or, without roles, a server up)",
            G,
        ),
        has_primary,
    )
}
