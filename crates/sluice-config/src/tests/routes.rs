//! The routing keys: cluster health settings and listener routes, their defaults, and
//! their errors with file:line.

use std::time::Duration;

use super::{BASE, assert_errors, ok};
use crate::*;

const THREE: &str = r#"
[servers.a]
protocol = "postgres"
host = "127.0.0.1"
port = 5433

[servers.b]
protocol = "postgres"
host = "127.0.0.1"
port = 5434

[clusters.ha]
servers = ["b", "a"]
health_interval = "250ms"
health_timeout = "2s"
health_failures = 3
max_replica_lag = "0s"
health_user = "monitor"
health_password = "pw"

[listeners.ro]
protocol = "postgres"
address = "127.0.0.1:7001"
cluster = "ha"
route = "read-only"
strategy = "least-connections"

[listeners.rw]
protocol = "postgres"
address = "127.0.0.1:7002"
cluster = "ha"
strategy = "next-available"

"#;

#[test]
fn defaults_and_every_key() {
    let base = ok(BASE);
    assert_eq!(base.clusters["main"].health, Health::default());
    let h = &base.clusters["main"].health;
    assert_eq!(h.interval, Duration::from_millis(500));
    assert_eq!(h.timeout, Duration::from_secs(1));
    assert_eq!(h.failures, 2);
    assert_eq!(h.max_replica_lag, Some(Duration::from_secs(10)));
    assert_eq!(base.listeners["pg"].route, Route::default());
    assert_eq!(base.listeners["pg"].route.kind, RouteKind::ReadWrite);
    assert_eq!(
        base.listeners["pg"].route.strategy,
        Strategy::FirstAvailable
    );

    let c = ok(&format!("{BASE}{THREE}"));
    let h = &c.clusters["ha"].health;
    assert_eq!(h.interval, Duration::from_millis(250));
    assert_eq!(h.timeout, Duration::from_secs(2));
    assert_eq!(h.failures, 3);
    assert_eq!(h.max_replica_lag, None);
    assert_eq!(h.user.as_deref(), Some("monitor"));
    assert_eq!(h.password.as_deref(), Some("pw"));
    let ro = &c.listeners["ro"].route;
    assert_eq!(
        (ro.kind, ro.strategy, ro.read_your_writes),
        (RouteKind::ReadOnly, Strategy::LeastConnections, false)
    );
    let rw = &c.listeners["rw"].route;
    assert_eq!(
        (rw.kind, rw.strategy),
        (RouteKind::ReadWrite, Strategy::NextAvailable)
    );
}

#[test]
fn bad_route_keys() {
    let text = r#"
[servers.a]
protocol = "postgres"
host = "127.0.0.1"

[clusters.main]
servers = ["a"]
health_interval = "0s"
health_failures = 0
health_password = "x"

[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "main"
route = "read-mostly"

[listeners.ro]
protocol = "postgres"
address = "127.0.0.1:6433"
cluster = "main"
route = "read-only"
strategy = "first-available"

[listeners.rw]
protocol = "postgres"
address = "127.0.0.1:6434"
cluster = "main"
read_your_writes = true
read_your_writes_timeout = "1s"

[listeners.split]
protocol = "postgres"
address = "127.0.0.1:6435"
cluster = "main"
route = "split"
read_your_writes = "yes"
"#;
    assert_errors(
        text,
        &[
            (
                Some(8),
                "[clusters.main] health_interval: must be more than 0s",
            ),
            (Some(9), "[clusters.main] health_failures"),
            (Some(10), "health_password: is set without health_user"),
            (
                Some(16),
                "route: invalid value \"read-mostly\"; expected one of",
            ),
            (
                Some(23),
                "strategy: \"first-available\" does not apply to route \"read-only\"",
            ),
            (
                Some(29),
                "read_your_writes: applies to route \"split\" only",
            ),
            (
                Some(30),
                "read_your_writes_timeout: applies to route \"split\" only",
            ),
            (
                Some(36),
                "route \"split\" logs in to more than one server, which Sluice cannot do \
                 for pass-through users as such: set auth_user",
            ),
            (
                Some(36),
                "needs a transaction-mode pool; pool \"default\" is not one",
            ),
            (Some(37), "read_your_writes: expected true or false"),
        ],
    );
}
