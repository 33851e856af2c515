//! The topology: what Sluice knows of each cluster's servers right now (up or down,
//! discovered role, lag, replay position). A snapshot behind an `ArcSwap`, written only
//! by the health checker (`health.rs`) and read by the router on every lease; it sits
//! beside the flow (listener -> frontend -> session -> router -> pool -> backend) and is
//! consulted by the router, never the other way round.

pub mod health;
mod probe;
pub mod reload;

use arc_swap::ArcSwap;
use sluice_config::Config;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// A server's role, as its last good check found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Not learned (no check yet, or the cluster has no `health_user`).
    Unknown,
    Primary,
    Replica,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Primary => "primary",
            Role::Replica => "replica",
        }
    }
}

/// One server as the router sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerView {
    pub name: Arc<str>,
    pub up: bool,
    pub role: Role,
    /// A replica's delay behind its primary (None: unknown, or not a replica).
    pub lag: Option<Duration>,
    /// Replay (replica) or write (primary) position: PostgreSQL's LSN as a number.
    pub position: Option<u64>,
    /// The server has been down at least once since Sluice started (`next-available`
    /// does not go back to it).
    pub failed_once: bool,
    /// When the last good check began (its `position` is at least what the server had
    /// at that moment).
    pub checked_at: Option<std::time::Instant>,
    /// Drained by the admin console (`SET SERVER name OFFLINE`): no new leases go to
    /// it; what runs there finishes.
    pub offline: bool,
}

impl ServerView {
    /// Up, and not taken offline: a route may choose it.
    pub fn usable(&self) -> bool {
        self.up && !self.offline
    }
}

/// One cluster: its servers in the order of `servers`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterView {
    pub servers: Vec<ServerView>,
    /// Roles are discovered (the cluster has a `health_user`); otherwise every server
    /// that is up may take any route, in the order of `servers`.
    pub discovers: bool,
    pub max_replica_lag: Option<Duration>,
}

impl ClusterView {
    /// The one healthy primary, unless two claim it (split brain: none).
    pub fn primary(&self) -> Option<&ServerView> {
        let mut it = self
            .servers
            .iter()
            .filter(|s| s.up && s.role == Role::Primary);
        let first = it.next()?;
        it.next().is_none().then_some(first)
    }

    /// The server is not further behind than `max_replica_lag` (or its lag is unknown).
    pub fn lag_ok(&self, s: &ServerView) -> bool {
        match (s.lag, self.max_replica_lag) {
            (Some(lag), Some(max)) => lag <= max,
            _ => true,
        }
    }

    /// More than one healthy server claims to be the primary.
    pub fn split_brain(&self) -> bool {
        self.servers
            .iter()
            .filter(|s| s.up && s.role == Role::Primary)
            .count()
            > 1
    }
}

/// The snapshot the router reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Topology {
    /// Bumped on every change (positions move it at every check).
    pub generation: u64,
    /// Bumped when something a route that is not `split` depends on changes: a server
    /// up or down, a role, a replica's lag crossing `max_replica_lag`. Sessions compare
    /// it with the one they chose their server at, so between failovers their check
    /// costs one comparison.
    pub routes: u64,
    pub clusters: HashMap<String, ClusterView, foldhash::fast::RandomState>,
}

impl Topology {
    /// The topology before any check: every server up, roles unknown.
    pub fn initial(config: &Config) -> Topology {
        let clusters = config
            .clusters
            .values()
            .map(|c| {
                let servers = c
                    .servers
                    .iter()
                    .map(|s| ServerView {
                        name: Arc::from(s.as_str()),
                        up: true,
                        role: Role::Unknown,
                        lag: None,
                        position: None,
                        failed_once: false,
                        checked_at: None,
                        offline: false,
                    })
                    .collect();
                let view = ClusterView {
                    servers,
                    discovers: c.health.user.is_some(),
                    max_replica_lag: c.health.max_replica_lag,
                };
                (c.name.clone(), view)
            })
            .collect();
        Topology {
            generation: 0,
            routes: 0,
            clusters,
        }
    }
}

/// The shared topology and the signal that it changed.
pub struct Topologies {
    current: ArcSwap<Topology>,
    changed: Notify,
    /// Wakes the checkers of a server at once (by its address, `host:port`).
    wake: parking_lot::RwLock<HashMap<String, Arc<Notify>>>,
    /// Bumped when a reload changes servers or clusters: the checkers started before
    /// stop, and new ones start for the new configuration.
    pub(crate) epoch: std::sync::atomic::AtomicU64,
    /// Held by a checker while it derives and publishes the next snapshot.
    pub(crate) writer: parking_lot::Mutex<()>,
}

impl Topologies {
    pub fn new(config: &Config) -> Topologies {
        Topologies {
            current: ArcSwap::from_pointee(Topology::initial(config)),
            changed: Notify::new(),
            wake: parking_lot::RwLock::new(
                config
                    .servers
                    .values()
                    .map(|s| (format!("{}:{}", s.host, s.port), Arc::new(Notify::new())))
                    .collect(),
            ),
            epoch: Default::default(),
            writer: parking_lot::Mutex::new(()),
        }
    }

    pub fn load(&self) -> Arc<Topology> {
        self.current.load_full()
    }

    /// The snapshot without taking a reference count (for the per-statement path).
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Topology>> {
        self.current.load()
    }

    /// Publishes a new snapshot (the health checker only).
    pub(crate) fn publish(&self, t: Topology) {
        self.current.store(Arc::new(t));
        self.changed.notify_waiters();
    }

    /// Takes a server offline (drained: no new leases) or back online, by name; the
    /// routes move so that sessions choose again. False when no cluster has it.
    pub fn set_offline(&self, server: &str, offline: bool) -> bool {
        let _writer = self.writer.lock();
        let mut next: Topology = (*self.load()).clone();
        let mut found = false;
        for c in next.clusters.values_mut() {
            for v in c.servers.iter_mut().filter(|v| &*v.name == server) {
                found = true;
                v.offline = offline;
            }
        }
        if found {
            next.generation += 1;
            next.routes += 1;
            self.publish(next);
        }
        found
    }

    /// Waits until the topology is past `generation` or `timeout` passes.
    pub async fn changed_since(&self, generation: u64, timeout: Duration) {
        let notified = self.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.current.load().generation != generation {
            return;
        }
        let _ = tokio::time::timeout(timeout, notified).await;
    }

    /// Waits until the topology changes or `timeout` passes.
    pub async fn changed(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.changed.notified()).await;
    }

    /// A client's session on the server at `addr` ended with `e`: if that says the
    /// server may be gone (refused, reset, closed, shut down, any I/O error), check it
    /// now rather than at the next interval.
    pub fn suspect(&self, addr: &str, e: &crate::error::Error) {
        use crate::error::{Kind, Side};
        // An I/O error on either socket may be the server's (a failed write to it is
        // Internal): a needless check costs one query, a missed one a whole interval.
        let gone = matches!(
            e.kind,
            Kind::ServerGone | Kind::Shutdown | Kind::Desync | Kind::Io
        ) || e.side == Side::Server;
        if gone {
            self.check_now(addr);
        }
    }

    /// Checks the server at `addr` now (it closed a client's connection by itself).
    pub fn check_now(&self, addr: &str) {
        if let Some(n) = self.wake.read().get(addr) {
            n.notify_one();
        }
    }

    pub(crate) fn waker(&self, addr: &str) -> Option<Arc<Notify>> {
        self.wake.read().get(addr).cloned()
    }
}
