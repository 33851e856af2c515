//! The routing keys of `[clusters.X]` (health checks, lag limit) and of `[listeners.X]`
//! (`route`, `strategy`, read-your-writes): their types, defaults and readers. Read by
//! the section readers in `sections.rs`; the server's topology and router consume them.

use std::fmt;
use std::time::Duration;

use crate::reader::ObjectReader;

pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_millis(500);
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
pub const DEFAULT_HEALTH_FAILURES: u32 = 2;
pub const DEFAULT_MAX_REPLICA_LAG: Duration = Duration::from_secs(10);
pub const DEFAULT_READ_YOUR_WRITES_TIMEOUT: Duration = Duration::ZERO;

/// How a cluster's servers are watched (`[clusters.X]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub interval: Duration,
    pub timeout: Duration,
    /// Failed checks in a row before a server counts as down.
    pub failures: u32,
    /// Replicas further behind get no reads; `None` = no limit.
    pub max_replica_lag: Option<Duration>,
    /// The login the checker uses to learn roles, lag and positions; without it a check
    /// only tells whether the server accepts connections (roles stay unknown and routes
    /// follow the order of `servers`, as MySQL Router's static routing does).
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            interval: DEFAULT_HEALTH_INTERVAL,
            timeout: DEFAULT_HEALTH_TIMEOUT,
            failures: DEFAULT_HEALTH_FAILURES,
            max_replica_lag: Some(DEFAULT_MAX_REPLICA_LAG),
            user: None,
            password: None,
        }
    }
}

/// What a listener's clients are routed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// The current primary.
    ReadWrite,
    /// The replicas.
    ReadOnly,
    /// Writes to the primary, reads to the replicas, statement by statement.
    Split,
}

impl RouteKind {
    pub const ALL: &'static [(&'static str, RouteKind)] = &[
        ("read-write", RouteKind::ReadWrite),
        ("read-only", RouteKind::ReadOnly),
        ("split", RouteKind::Split),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::ReadWrite => "read-write",
            RouteKind::ReadOnly => "read-only",
            RouteKind::Split => "split",
        }
    }
}

impl fmt::Display for RouteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a route picks among its eligible servers (MySQL Router's `routing_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The first eligible server in the order of `servers`.
    FirstAvailable,
    /// As first-available, but a server that failed is not gone back to.
    NextAvailable,
    /// Each new connection to the next eligible server.
    RoundRobin,
    /// Round-robin over the replicas; the primary when none is eligible.
    RoundRobinWithFallback,
    /// The eligible server with the fewest connections in use.
    LeastConnections,
}

impl Strategy {
    pub const ALL: &'static [(&'static str, Strategy)] = &[
        ("first-available", Strategy::FirstAvailable),
        ("next-available", Strategy::NextAvailable),
        ("round-robin", Strategy::RoundRobin),
        (
            "round-robin-with-fallback",
            Strategy::RoundRobinWithFallback,
        ),
        ("least-connections", Strategy::LeastConnections),
    ];

    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("?", |(n, _)| n)
    }

    /// Whether a route of `kind` can use this strategy (for `split`: for its reads).
    pub fn fits(self, kind: RouteKind) -> bool {
        match kind {
            RouteKind::ReadWrite => {
                matches!(self, Strategy::FirstAvailable | Strategy::NextAvailable)
            }
            RouteKind::ReadOnly | RouteKind::Split => {
                !matches!(self, Strategy::FirstAvailable | Strategy::NextAvailable)
            }
        }
    }

    /// The strategy a route of `kind` uses when none is configured.
    pub fn default_for(kind: RouteKind) -> Strategy {
        match kind {
            RouteKind::ReadWrite => Strategy::FirstAvailable,
            RouteKind::ReadOnly | RouteKind::Split => Strategy::RoundRobin,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A listener's route (`[listeners.X]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub kind: RouteKind,
    pub strategy: Strategy,
    /// Split only: a client's reads go to a replica that has replayed its last write.
    pub read_your_writes: bool,
    pub read_your_writes_timeout: Duration,
}

impl Default for Route {
    fn default() -> Self {
        Route {
            kind: RouteKind::ReadWrite,
            strategy: Strategy::FirstAvailable,
            read_your_writes: false,
            read_your_writes_timeout: DEFAULT_READ_YOUR_WRITES_TIMEOUT,
        }
    }
}

/// Reads a cluster's health keys.
pub(crate) fn read_health(r: &mut ObjectReader<'_, '_, '_>) -> Health {
    let d = Health::default();
    let interval = r.duration("health_interval");
    if interval.is_some_and(|i| i.is_zero()) {
        r.error("health_interval", "must be more than 0s");
    }
    let timeout = r.duration("health_timeout");
    if timeout.is_some_and(|i| i.is_zero()) {
        r.error("health_timeout", "must be more than 0s");
    }
    let failures = r.count("health_failures", 1, 1000);
    let lag = r.optional_duration("max_replica_lag");
    let user = r.nonempty_string("health_user");
    let password = r.string("health_password");
    if password.is_some() && !r.has("health_user") {
        r.error("health_password", "is set without health_user");
    }
    Health {
        interval: interval.filter(|i| !i.is_zero()).unwrap_or(d.interval),
        timeout: timeout.filter(|i| !i.is_zero()).unwrap_or(d.timeout),
        failures: failures.map_or(d.failures, |f| f as u32),
        max_replica_lag: lag.unwrap_or(d.max_replica_lag),
        user,
        password,
    }
}

/// Reads a listener's route keys.
pub(crate) fn read_route(r: &mut ObjectReader<'_, '_, '_>) -> Route {
    let kind = r
        .choice("route", RouteKind::ALL)
        .unwrap_or(RouteKind::ReadWrite);
    let strategy = match r.choice("strategy", Strategy::ALL) {
        Some(s) if !s.fits(kind) => {
            let fit: Vec<&str> = Strategy::ALL
                .iter()
                .filter(|(_, s)| s.fits(kind))
                .map(|(n, _)| *n)
                .collect();
            r.error(
                "strategy",
                format!(
                    "{:?} does not apply to route {:?}; use one of: {}",
                    s.as_str(),
                    kind.as_str(),
                    fit.join(", ")
                ),
            );
            Strategy::default_for(kind)
        }
        Some(s) => s,
        None => Strategy::default_for(kind),
    };
    let ryw = r.boolean("read_your_writes");
    if ryw.is_some() && kind != RouteKind::Split {
        r.error(
            "read_your_writes",
            format!("applies to route \"split\" only, not {:?}", kind.as_str()),
        );
    }
    let ryw_timeout = r.duration("read_your_writes_timeout");
    if r.has("read_your_writes_timeout") && kind != RouteKind::Split {
        r.error(
            "read_your_writes_timeout",
            "applies to route \"split\" only",
        );
    }
    Route {
        kind,
        strategy,
        read_your_writes: kind == RouteKind::Split && ryw.unwrap_or(true),
        read_your_writes_timeout: ryw_timeout.unwrap_or(DEFAULT_READ_YOUR_WRITES_TIMEOUT),
    }
}
