//! The health checker: one task per server of each cluster that has a `health_user`,
//! checking it every `health_interval` (at once when a client's connection suggests the
//! server is gone) and publishing what it finds into the topology. The only writer of
//! the topology.

use super::probe::{self, Conn};
use super::{Role, Topologies, Topology};
use crate::backend::{Credentials, Target};
use crate::shared::Shared;
use sluice_config::{Cluster, Config, Server};
use std::sync::Arc;

/// The shortest time between two checks of a server that its wakers ask for.
const MIN_GAP: std::time::Duration = std::time::Duration::from_millis(2);

/// Starts the checkers of every cluster that discovers roles.
pub fn start(shared: &Arc<Shared>) {
    let config = shared.config.load_full();
    for cluster in config.clusters.values() {
        let Some(user) = cluster.health.user.clone() else {
            if cluster.servers.len() > 1 {
                tracing::warn!(cluster = %cluster.name, "cluster has no health_user: its servers are not checked, roles are not discovered, and clients go to its first server");
            }
            continue;
        };
        let creds = Credentials::password(user, cluster.health.password.clone());
        let epoch = shared
            .topology
            .epoch
            .load(std::sync::atomic::Ordering::SeqCst);
        for server in cluster.servers.iter().filter_map(|s| config.servers.get(s)) {
            let task = Checker {
                shared: shared.clone(),
                cluster: cluster.clone(),
                server: server.clone(),
                target: target(shared, &config, server, cluster),
                creds: creds.clone(),
                epoch,
            };
            tokio::spawn(task.run());
        }
    }
}

fn target(shared: &Shared, config: &Config, server: &Server, cluster: &Cluster) -> Target {
    Target::for_server(
        server,
        shared.connectors.load().get(&server.name).cloned(),
        cluster.health.timeout,
        config.general.max_message_size,
    )
}

struct Checker {
    shared: Arc<Shared>,
    cluster: Cluster,
    server: Server,
    target: Target,
    creds: Credentials,
    /// The topology epoch it was started in: a reload that changes servers or
    /// clusters starts new checkers, and this one stops.
    epoch: u64,
}

impl Checker {
    async fn run(self) {
        let h = &self.cluster.health;
        let wake = self.shared.topology.waker(&self.target.addr());
        let mut shutdown = self.shared.shutdown.clone();
        let mut conn: Option<Conn> = None;
        let mut failures = 0u32;
        let mut delay = Delay::default();
        loop {
            if self.stale() {
                // A wake-up meant for this server may have reached this checker: the
                // one started after the reload gets it.
                if let Some(w) = &wake {
                    w.notify_one();
                }
                return;
            }
            let began = std::time::Instant::now();
            let check = probe::check(self.server.protocol, &self.target, &self.creds, &mut conn);
            let found = match tokio::time::timeout(h.timeout, check).await {
                Ok(Ok(found)) => Ok(found),
                Ok(Err(e)) => Err(e.message),
                Err(_) => {
                    conn = None;
                    Err(format!("no answer within {:?}", h.timeout))
                }
            };
            match found {
                Ok(found) => {
                    failures = 0;
                    let lag = found.lag.or_else(|| delay.observe(&found));
                    let lag = delay.cut_off(&found, began, lag);
                    self.update(|v| {
                        v.up = true;
                        v.role = found.role;
                        v.lag = lag;
                        v.position = found.position;
                        v.checked_at = Some(began);
                    });
                }
                Err(why) => {
                    failures = failures.saturating_add(1);
                    if failures == 1 {
                        tracing::debug!(cluster = %self.cluster.name, server = %self.server.name, %why, "health check failed");
                    }
                    if failures >= h.failures {
                        let went_down = self.update(|v| {
                            v.up = false;
                            v.failed_once = true;
                        });
                        if went_down {
                            tracing::warn!(cluster = %self.cluster.name, server = %self.server.name, %why, failures, "server is down");
                            self.close_idle();
                        }
                    }
                }
            }
            let notified = async {
                match &wake {
                    Some(w) => w.notified().await,
                    None => std::future::pending().await,
                }
            };
            let woken = tokio::select! {
                _ = tokio::time::sleep(h.interval) => false,
                _ = notified => true,
                _ = shutdown.changed() => false,
            };
            if woken && began.elapsed() < MIN_GAP {
                // Sessions waiting for read-your-writes wake the checker as often as
                // they read: it still looks at most every MIN_GAP.
                tokio::time::sleep(MIN_GAP - began.elapsed()).await;
            }
            if self.shared.shutting_down() {
                return;
            }
        }
    }

    /// Changes this server's view and publishes the topology if anything changed;
    /// returns whether the server went from up to down.
    fn update(&self, change: impl FnOnce(&mut super::ServerView)) -> bool {
        let topo = &self.shared.topology;
        let _writer = topo.writer.lock();
        if self.stale() {
            return false;
        }
        let mut next: Topology = (*topo.load()).clone();
        let Some(cluster) = next.clusters.get_mut(&self.cluster.name) else {
            return false;
        };
        let Some(view) = cluster
            .servers
            .iter_mut()
            .find(|v| *v.name == *self.server.name)
        else {
            return false;
        };
        let before = view.clone();
        change(view);
        if *view == before {
            return false;
        }
        let went_down = before.up && !view.up;
        let demoted = before.role == Role::Primary && view.role == Role::Replica;
        let view = view.clone();
        let routes_moved = view.up != before.up
            || view.role != before.role
            || view.failed_once != before.failed_once
            || cluster.lag_ok(&view) != cluster.lag_ok(&before);
        if view.role != before.role || view.up != before.up {
            tracing::info!(
                cluster = %self.cluster.name,
                server = %self.server.name,
                role = view.role.as_str(),
                up = view.up,
                "server state changed"
            );
        }
        let was_split = topo
            .load()
            .clusters
            .get(&self.cluster.name)
            .is_some_and(|c| c.split_brain());
        if cluster.split_brain() && !was_split {
            let claim: Vec<&str> = cluster
                .servers
                .iter()
                .filter(|s| s.up && s.role == Role::Primary)
                .map(|s| &*s.name)
                .collect();
            tracing::error!(cluster = %self.cluster.name, servers = ?claim, "more than one server claims to be the primary: no writes until one steps down");
        }
        next.generation += 1;
        if routes_moved {
            next.routes += 1;
        }
        topo.publish(next);
        if demoted {
            // A primary demoted in place: its idle connections were opened for writes.
            self.close_idle();
        }
        went_down
    }

    fn stale(&self) -> bool {
        self.shared
            .topology
            .epoch
            .load(std::sync::atomic::Ordering::SeqCst)
            != self.epoch
    }

    /// A server that went down: its idle connections are of no use.
    fn close_idle(&self) {
        let addr = self.target.addr();
        self.shared.pg.close_idle_on(&addr);
        self.shared.my.close_idle_on(&addr);
    }
}

/// A replica's delay measured by Sluice's own clock: how long ago the replica had
/// received what it has replayed by now. Each check notes (when, received); the delay is
/// the age of the oldest note whose received position is still ahead of the replay
/// position (none: caught up). Needs no clock on the server and no recent transaction
/// (PostgreSQL's replay timestamp is empty until one is replayed).
#[derive(Default)]
struct Delay {
    notes: std::collections::VecDeque<(std::time::Instant, u64)>,
    /// The first check that found the replica receiving nothing from a primary.
    cut_off_since: Option<std::time::Instant>,
}

impl Delay {
    /// A replica receiving nothing from a primary (its primary gone in a failover, and
    /// nothing has pointed it at the new one) falls behind as the clock goes: its lag
    /// is at least the time since it stopped streaming. Reads go on through a failover
    /// up to `max_replica_lag`, and then leave a replica that may never see the new
    /// primary's writes.
    fn cut_off(
        &mut self,
        f: &probe::Found,
        now: std::time::Instant,
        lag: Option<std::time::Duration>,
    ) -> Option<std::time::Duration> {
        if f.streaming {
            self.cut_off_since = None;
            return lag;
        }
        let since = *self.cut_off_since.get_or_insert(now);
        Some(lag.unwrap_or_default().max(now - since))
    }

    fn observe(&mut self, f: &probe::Found) -> Option<std::time::Duration> {
        let (Some(replayed), Some(received)) = (f.position, f.received) else {
            self.notes.clear();
            return None;
        };
        let now = std::time::Instant::now();
        while self.notes.front().is_some_and(|&(_, r)| r <= replayed) {
            self.notes.pop_front();
        }
        let lag = self
            .notes
            .front()
            .map_or(std::time::Duration::ZERO, |&(t, _)| now - t);
        if received > replayed && self.notes.back().is_none_or(|&(_, r)| r < received) {
            self.notes.push_back((now, received));
        }
        // A replica stuck for long keeps its oldest note; the rest only shorten it.
        if self.notes.len() > 1024 {
            self.notes.remove(1);
        }
        Some(lag)
    }
}

/// Whether routes should wait for the topology (a cluster that discovers roles has not
/// been checked yet).
pub fn unchecked(t: &Topologies, cluster: &str) -> bool {
    t.load()
        .clusters
        .get(cluster)
        .is_some_and(|c| c.discovers && c.servers.iter().all(|s| s.role == Role::Unknown && s.up))
}
