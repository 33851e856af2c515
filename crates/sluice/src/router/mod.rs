//! The router: a pure function from a listener's route and the topology to the server a
//! client's next server connection comes from. No sockets, no awaits; asked every time
//! a session needs a server (session mode: at login; transaction mode: for each
//! transaction). Read-write failover and read-only balancing live here; the health
//! checker (topology/health.rs) keeps the facts it reads.

use crate::topology::{ClusterView, Role, ServerView, Topology};
use sluice_config::{Route, RouteKind, Strategy};
use std::collections::HashMap;

/// Why no server can take a route right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoute {
    /// The listener's cluster is not in the topology.
    UnknownCluster,
    /// Roles are not known yet (no check has answered).
    Unchecked,
    /// No healthy primary (or, with `next-available`, only one that failed before).
    NoPrimary,
    /// More than one server claims to be the primary.
    SplitBrain,
    /// No healthy replica within the lag limit.
    NoReplica,
    /// Every server is down.
    AllDown,
}

impl NoRoute {
    pub fn describe(self, cluster: &str) -> String {
        match self {
            NoRoute::UnknownCluster => format!("cluster \"{cluster}\" has no servers"),
            NoRoute::Unchecked => {
                format!("the servers of cluster \"{cluster}\" have not answered a health check yet")
            }
            NoRoute::NoPrimary => format!("cluster \"{cluster}\" has no healthy primary"),
            NoRoute::SplitBrain => format!(
                "more than one server of cluster \"{cluster}\" claims to be the primary; no writes until one steps down"
            ),
            NoRoute::NoReplica => {
                format!("cluster \"{cluster}\" has no healthy replica within max_replica_lag")
            }
            NoRoute::AllDown => format!("every server of cluster \"{cluster}\" is down"),
        }
    }
}

/// Each listener's round-robin counter.
#[derive(Default)]
pub struct Tickets(parking_lot::Mutex<HashMap<String, usize>>);

impl Tickets {
    /// The next ticket of `listener`.
    pub fn next(&self, listener: &str) -> usize {
        let mut m = self.0.lock();
        let t = m.entry(listener.to_owned()).or_default();
        *t = t.wrapping_add(1);
        *t
    }

    /// The last ticket `listener` handed out (a login's, for its session to keep).
    pub fn last(&self, listener: &str) -> usize {
        self.0.lock().get(listener).copied().unwrap_or_default()
    }
}

/// What a session asks of the router besides its route.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ask {
    /// Turns round-robin.
    pub ticket: usize,
    /// Read-your-writes: only replicas that have replayed up to this position (a
    /// position of the primary taken after the client's last write) may serve.
    pub min_position: Option<u64>,
    /// A replica (by its place in the cluster's `servers`) not to read from: a read
    /// that lost its connection there goes once to another.
    pub avoid: Option<usize>,
}

/// The server of `cluster` that a new server connection for `route` should go to.
/// `in_use` tells the connections in use per server (least-connections). A `split`
/// route here means its reads (the caller asks a read-write route for its writes): they
/// fall back to the primary when no replica can serve.
pub fn pick<'t>(
    route: &Route,
    topology: &'t Topology,
    cluster: &str,
    ask: Ask,
    in_use: &dyn Fn(&str) -> usize,
) -> Result<&'t ServerView, NoRoute> {
    let c = topology
        .clusters
        .get(cluster)
        .ok_or(NoRoute::UnknownCluster)?;
    if !c.servers.iter().any(|s| s.usable()) {
        return Err(NoRoute::AllDown);
    }
    if c.discovers && c.servers.iter().all(|s| s.role == Role::Unknown) {
        return Err(NoRoute::Unchecked);
    }
    match route.kind {
        RouteKind::ReadWrite => writer(route.strategy, c),
        RouteKind::ReadOnly => reader(route.strategy, c, ask, in_use),
        RouteKind::Split => match reader(route.strategy, c, ask, in_use) {
            Err(NoRoute::NoReplica) => writer(Strategy::FirstAvailable, c),
            r => r,
        },
    }
}

fn writer(strategy: Strategy, c: &ClusterView) -> Result<&ServerView, NoRoute> {
    let sticky = strategy == Strategy::NextAvailable;
    if !c.discovers {
        // Roles unknown: the first server that is up, in the configured order.
        return c
            .servers
            .iter()
            .find(|s| s.usable() && !(sticky && s.failed_once))
            .ok_or(NoRoute::AllDown);
    }
    if c.split_brain() {
        return Err(NoRoute::SplitBrain);
    }
    match c.primary() {
        Some(p) if !(p.offline || sticky && p.failed_once) => Ok(p),
        _ => Err(NoRoute::NoPrimary),
    }
}

fn reader<'t>(
    strategy: Strategy,
    c: &'t ClusterView,
    ask: Ask,
    in_use: &dyn Fn(&str) -> usize,
) -> Result<&'t ServerView, NoRoute> {
    let ticket = ask.ticket;
    let avoided = ask.avoid.and_then(|i| c.servers.get(i));
    let fresh = |s: &&ServerView| {
        if avoided.is_some_and(|a| std::ptr::eq(*s, a)) {
            return false;
        }
        let lag_ok = c.lag_ok(s);
        let has_writes = match (ask.min_position, s.position) {
            (Some(min), Some(at)) => at >= min,
            (Some(_), None) => false,
            (None, _) => true,
        };
        lag_ok && has_writes
    };
    // No allocation: a split route asks this for every statement.
    let eligible = || {
        c.servers
            .iter()
            .filter(|s| s.usable())
            .filter(|s| !c.discovers || s.role == Role::Replica)
            .filter(fresh)
    };
    let n = eligible().count();
    if n == 0 {
        return match strategy {
            Strategy::RoundRobinWithFallback if !c.split_brain() => {
                c.primary().filter(|p| !p.offline).ok_or(NoRoute::NoReplica)
            }
            _ => Err(NoRoute::NoReplica),
        };
    }
    let chosen = match strategy {
        Strategy::LeastConnections => eligible()
            .cycle()
            .skip(ticket % n)
            .take(n)
            .min_by_key(|s| in_use(&s.name)),
        _ => eligible().nth(ticket % n),
    };
    chosen.ok_or(NoRoute::NoReplica)
}

#[cfg(test)]
mod tests;
