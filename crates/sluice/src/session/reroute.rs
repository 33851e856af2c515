//! Transaction mode: a session's route asked again before each transaction. A session
//! keeps the pool it logged in with while the topology stays as it was; when the
//! topology changed and the router now picks another server (a failover, a replica
//! gone or back), the session's next server connection comes from the pool of the same
//! user, database and shaping parameters on that server.
//!
//! On a `split` route the question is asked for every transaction (or statement outside
//! one) with what it is about to run: writes to the primary, reads to a replica. With
//! read-your-writes, once a session's write has committed its reads go only to replicas
//! that have replayed it: the checker's first look at the primary after the commit gives
//! a position the write is below; a replica whose replay position has reached it has the
//! write. Until then (under one health interval), and with no such replica, reads go to
//! the primary, which always has it.

use super::plan::{Want, in_use, pool_on, target_for};
use crate::backend::Target;
use crate::pool::{Pool, PoolConn, PoolKey, Pools};
use crate::router::Ask;
use crate::rules::Destination;
use crate::shared::Shared;
use crate::topology::{Role, Topology};
use sluice_config::{Listener, Route, RouteKind, TargetRole};
use sluice_sql::Class;
use std::sync::Arc;
use std::time::Instant;

/// Where a session's route stands.
#[derive(Debug, Clone, Default)]
pub struct RouteMark {
    /// The topology's route generation its pool was chosen at (`Topology::routes`),
    /// its low 32 bits (every session holds a mark; 2^32 route changes while one
    /// session waits do not happen).
    generation: u32,
    /// Its own round-robin ticket (so that it stays on one replica while nothing
    /// changes; a u32, as the generation: it only spreads sessions over replicas).
    ticket: u32,
    /// What only split routes, lost reads and rules that route keep (boxed: every
    /// session holds a mark, and most never need it).
    more: Option<Box<More>>,
}

/// The part of a [`RouteMark`] that split routes and lost reads use.
#[derive(Debug, Clone, Default)]
struct More {
    /// The cluster its pool is on, when a rule sent it off the listener's, and the role
    /// a rule asked for there.
    cluster: Option<Arc<str>>,
    role: Option<TargetRole>,
    /// Split: its last transaction went to the primary as a write.
    wrote: bool,
    /// Split: when its last write was known to have ended, and the primary's position
    /// that covers it once the checker has looked after that moment.
    written_at: Option<Instant>,
    min_position: Option<u64>,
    /// Split: the server the session's pool is on, as the router names it, with its
    /// address (a repeated pick of the same server costs no lookup).
    on: Option<(Arc<str>, String)>,
    /// A read lost its connection on the server at this address: the next pick avoids
    /// it (once).
    avoid: Option<String>,
}

impl RouteMark {
    /// A session's mark at login.
    pub fn at_login(shared: &Shared, listener: &Listener) -> RouteMark {
        RouteMark {
            generation: shared.topology.load().routes as u32,
            ticket: shared.tickets.last(&listener.name) as u32,
            more: None,
        }
    }

    /// The cluster the session's pool is on, when not the listener's.
    pub fn cluster(&self) -> Option<&str> {
        self.more.as_deref().and_then(|m| m.cluster.as_deref())
    }

    /// The role a rule asked for on that cluster.
    fn role(&self) -> Option<TargetRole> {
        self.more.as_deref().and_then(|m| m.role)
    }

    /// Whether its pool was chosen at the topology's route generation `routes`.
    fn current(&self, routes: u64) -> bool {
        self.generation == routes as u32
    }

    /// Its pool is chosen at `routes`.
    fn chosen_at(&mut self, routes: u64) {
        self.generation = routes as u32;
    }

    /// Its pool is on `cluster` (None: the listener's) with the `role` a rule asked for.
    fn placed(&mut self, cluster: Option<Arc<str>>, role: Option<TargetRole>) {
        if cluster.is_some() || role.is_some() {
            let m = self.more();
            (m.cluster, m.role) = (cluster, role);
        } else if let Some(m) = self.more.as_deref_mut() {
            (m.cluster, m.role) = (None, None);
        }
    }

    fn more(&mut self) -> &mut More {
        self.more.get_or_insert_default()
    }

    /// The server a lost read's next pick avoids, if any.
    fn avoiding(&self) -> Option<&str> {
        self.more.as_ref().and_then(|m| m.avoid.as_deref())
    }

    /// The session's read lost its connection on the server at `addr`: its next pick is
    /// made now, and avoids that server.
    pub fn avoid(&mut self, addr: &str) {
        self.more().avoid = Some(addr.to_owned());
    }

    /// The session gave its server connection back: a write it ran there is over.
    pub fn released(&mut self) {
        if let Some(m) = self.more.as_deref_mut()
            && std::mem::take(&mut m.wrote)
        {
            m.written_at = Some(Instant::now());
            m.min_position = None;
        }
    }

    /// Split: what the next transaction, which starts with a statement of `class`,
    /// asks of the router: its route, and the position a replica must have.
    fn ask(
        &mut self,
        route: &Route,
        class: Class,
        topology: &Topology,
        cluster: &str,
    ) -> (Route, Ask) {
        // The session holds no connection: a write not yet counted as over (it ran on a
        // shared connection) is over now.
        self.released();
        let ask = Ask {
            ticket: self.ticket as usize,
            min_position: None,
            avoid: None,
        };
        let m = self.more();
        if class == Class::Write {
            m.wrote = true;
            return (Route::default(), ask);
        }
        if !route.read_your_writes {
            return (route.clone(), ask);
        }
        if let Some(at) = m.written_at
            && m.min_position.is_none()
        {
            let primary = topology.clusters.get(cluster).and_then(|c| c.primary());
            match primary {
                Some(p) if p.checked_at.is_some_and(|c| c > at) && p.position.is_some() => {
                    m.min_position = p.position;
                }
                // Not known yet which replicas have the write: the primary has it.
                _ => return (Route::default(), ask),
            }
        }
        let ask = Ask {
            min_position: m.min_position,
            ..ask
        };
        (route.clone(), ask)
    }
}

impl RouteMark {
    /// A split read that goes to the primary: would a replica serve it once it has
    /// replayed the session's last write (within `read_your_writes_timeout`)?
    fn catch_up(
        &self,
        listener: &Listener,
        topology: &Topology,
        uses: &dyn Fn(&str) -> usize,
    ) -> Option<CatchUp> {
        let route = &listener.route;
        if !route.read_your_writes
            || route.read_your_writes_timeout.is_zero()
            || self.more.as_ref().is_none_or(|m| m.written_at.is_none())
        {
            return None;
        }
        let ask = Ask {
            ticket: self.ticket as usize,
            min_position: None,
            avoid: None,
        };
        let free = crate::router::pick(route, topology, &listener.cluster, ask, uses).ok()?;
        let min_position = self.more.as_ref().and_then(|m| m.min_position);
        (free.role == Role::Replica).then_some(match min_position {
            None => CatchUp::Primary,
            Some(_) => CatchUp::Replicas,
        })
    }
}

/// Asks the checkers of the servers a read waiting for read-your-writes depends on to
/// look now (the waiting session then sees the topology change).
pub fn wake(shared: &Shared, cluster: &str, which: CatchUp) {
    let topology = shared.topology.snapshot();
    let Some(c) = topology.clusters.get(cluster) else {
        return;
    };
    let config = shared.config.load();
    let wanted = |s: &&crate::topology::ServerView| match which {
        CatchUp::Primary => s.role == Role::Primary,
        CatchUp::Replicas => s.role == Role::Replica,
    };
    for s in c.servers.iter().filter(|s| s.up).filter(wanted) {
        if let Some(server) = config.servers.get(&*s.name) {
            shared
                .topology
                .check_now(&format!("{}:{}", server.host, server.port));
        }
    }
}

/// A split route's read that a replica would serve once it has replayed the session's
/// last write: which servers' checkers to ask now rather than at their next interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// The primary's position after the write is not known yet.
    Primary,
    /// No replica is known to have replayed up to it yet.
    Replicas,
}

/// What asking the route again gave: the pool a session without a server connection
/// should take its next one from, if not its own, and whether the read it is about to
/// run would rather wait for a replica (read-your-writes).
pub struct Rerouted<C: PoolConn> {
    pub pool: Option<Arc<Pool<C>>>,
    pub catch_up: Option<CatchUp>,
    /// A rule sends the request to another cluster, and the session cannot go there:
    /// why (the request is refused with it rather than run where it should not).
    pub stuck: Option<String>,
}

/// The route asked again (see [`Rerouted`]). The pool is None when nothing changed,
/// when no server can take the route now (the lease then fails or waits as it would),
/// or when `pool` cannot open connections by itself (a pass-through pool without
/// `auth_user` only grows by logins: such a session stays, and learns its server is
/// gone from the error).
/// `class`: what the session is about to run (split routes only). `retarget` points the
/// pool's opener at the new server; `newer` tells whether the session's opener holds
/// credentials proven after the other pool's (a password changed since: the newest
/// login's win).
pub fn reroute<C: PoolConn>(
    shared: &Shared,
    listener: &Listener,
    (pools, pool): (&Pools<C>, &Arc<Pool<C>>),
    mark: &mut RouteMark,
    (class, target): (Class, Option<&Destination>),
    openers: (
        impl FnOnce(&C::Opener, Target) -> C::Opener,
        impl FnOnce(&C::Opener, &C::Opener) -> bool,
    ),
) -> Rerouted<C> {
    let topology = shared.topology.snapshot();
    let cluster: &str = target.map_or(&listener.cluster, |t| &t.cluster);
    let role = target.and_then(|t| t.role);
    let other_cluster = mark.cluster().unwrap_or(&listener.cluster) != cluster;
    let moves = other_cluster || mark.role() != role;
    if other_cluster {
        // Read-your-writes positions are one cluster's: the next read looks afresh.
        if let Some(m) = mark.more.as_deref_mut() {
            m.min_position = None;
        }
    }
    let split = listener.route.kind == RouteKind::Split;
    let none = Rerouted {
        pool: None,
        catch_up: None,
        stuck: None,
    };
    if mark.current(topology.routes) && !split && mark.avoiding().is_none() && !moves {
        return none;
    }
    mark.chosen_at(topology.routes);
    let config = shared.config.load();
    let avoid = mark.more.as_mut().and_then(|m| m.avoid.take());
    let avoid = avoid.and_then(|addr| {
        let c = topology.clusters.get(cluster)?;
        c.servers.iter().position(|v| {
            config
                .servers
                .get(&*v.name)
                .is_some_and(|s| format!("{}:{}", s.host, s.port) == addr)
        })
    });
    let plain = Ask {
        ticket: mark.ticket as usize,
        min_position: None,
        avoid: None,
    };
    let (route, mut ask) = match target.and_then(|t| t.role) {
        Some(TargetRole::Primary) => (Route::default(), plain),
        Some(TargetRole::Replica) => (
            Route {
                kind: RouteKind::ReadOnly,
                strategy: sluice_config::Strategy::RoundRobin,
                ..Route::default()
            },
            plain,
        ),
        None if split => mark.ask(&listener.route, class, &topology, cluster),
        None => (listener.route.clone(), plain),
    };
    ask.avoid = avoid;
    let uses = |name: &str| in_use(shared, &config, name);
    let picked = match crate::router::pick(&route, &topology, cluster, ask, &uses) {
        Ok(p) => p,
        // A server taken offline takes no new transactions, even with none to go to.
        Err(_) if !moves && offline(&topology, &config, cluster, &pool.key.server) => {
            return Rerouted {
                stuck: Some(format!(
                    "server {} of cluster \"{cluster}\" is offline (SET SERVER ... OFFLINE) and no other can take this transaction",
                    pool.key.server
                )),
                ..none
            };
        }
        // The lease fails or waits as it would on the session's own cluster.
        Err(_) if !moves => return none,
        Err(why) => {
            return Rerouted {
                stuck: Some(why.describe(cluster)),
                ..none
            };
        }
    };
    let catch_up =
        (split && target.is_none() && class != Class::Write && picked.role == Role::Primary)
            .then(|| mark.catch_up(listener, &topology, &uses))
            .flatten();
    let pool = pool_of(shared, listener, (pools, pool), mark, picked, openers);
    if moves && pool.is_none() && pool_server(mark) != Some(picked.name.as_ref()) {
        // A pass-through pool without auth_user cannot log in elsewhere.
        return Rerouted {
            stuck: Some(format!(
                "Sluice cannot log in to cluster \"{cluster}\" for this user (a pass-through listener needs auth_user for rules that route to other clusters)"
            )),
            ..none
        };
    }
    mark.placed(
        (cluster != listener.cluster).then(|| Arc::from(cluster)),
        role,
    );
    Rerouted {
        pool,
        catch_up,
        stuck: None,
    }
}

/// Whether the server at `addr` is one of `cluster`'s and taken offline.
fn offline(
    topology: &crate::topology::Topology,
    config: &sluice_config::Config,
    cluster: &str,
    addr: &str,
) -> bool {
    topology.clusters.get(cluster).is_some_and(|c| {
        c.servers.iter().any(|v| {
            v.offline
                && config
                    .servers
                    .get(&*v.name)
                    .is_some_and(|s| format!("{}:{}", s.host, s.port) == addr)
        })
    })
}

/// The server the session's pool is on, as the router names it.
fn pool_server(mark: &RouteMark) -> Option<&str> {
    let on = mark.more.as_ref().and_then(|m| m.on.as_ref());
    on.map(|(name, _)| name.as_ref())
}

/// The pool of the same key as `pool` on the server `picked`, if not `pool` itself.
fn pool_of<C: PoolConn>(
    shared: &Shared,
    listener: &Listener,
    (pools, pool): (&Pools<C>, &Arc<Pool<C>>),
    mark: &mut RouteMark,
    picked: &crate::topology::ServerView,
    (retarget, newer): (
        impl FnOnce(&C::Opener, Target) -> C::Opener,
        impl FnOnce(&C::Opener, &C::Opener) -> bool,
    ),
) -> Option<Arc<Pool<C>>> {
    if mark
        .more
        .as_ref()
        .and_then(|m| m.on.as_ref())
        .is_some_and(|(name, addr)| *name == picked.name && *addr == pool.key.server)
    {
        return None;
    }
    let config = shared.config.load();
    let server = config.servers.get(&*picked.name)?;
    let addr = format!("{}:{}", server.host, server.port);
    if addr == pool.key.server {
        mark.more().on = Some((picked.name.clone(), addr));
        return None;
    }
    let next = pool_on_server(shared, listener, (pools, pool), server, (retarget, newer))?;
    tracing::debug!(from = %pool.key.server, to = %next.key.server, "session rerouted");
    mark.more().on = Some((picked.name.clone(), next.key.server.clone()));
    Some(next)
}

/// The pool of the same key (user, database, shaping parameters) as `pool` on
/// `server`, made if needed, its opener pointed there (None: `pool` cannot open
/// connections by itself).
pub fn pool_on_server<C: PoolConn>(
    shared: &Shared,
    listener: &Listener,
    (pools, pool): (&Pools<C>, &Arc<Pool<C>>),
    server: &sluice_config::Server,
    (retarget, newer): (
        impl FnOnce(&C::Opener, Target) -> C::Opener,
        impl FnOnce(&C::Opener, &C::Opener) -> bool,
    ),
) -> Option<Arc<Pool<C>>> {
    let config = shared.config.load();
    let pool_cfg = config.pool_for(listener);
    let want = Want {
        route: &listener.route,
        cluster: &listener.cluster,
        by: &listener.name,
        wait: pool_cfg.wait_timeout,
        connect_timeout: pool_cfg.connect_timeout,
    };
    let mut target = target_for(shared, &config, server, &want);
    target.statement_timeout = pool_cfg.query_timeout;
    let opener = pool.opener()?;
    let key = PoolKey {
        server: target.addr(),
        ..pool.key.clone()
    };
    let next = pool_on(
        pools,
        key,
        pool.name.clone(),
        (**pool.settings()).clone(),
        &target,
    );
    if next.opener().is_none_or(|o| newer(&opener, &o)) {
        next.set_opener(Arc::new(retarget(&opener, target)));
    }
    Some(next)
}

/// Session mode, between transactions, when the topology moved: whether the server the
/// session holds is still where its read-write route goes. A primary demoted in place
/// (MariaDB `read_only` turned on, a replica promoted beside it) or claimed by two
/// servers at once is not: the session ends, and the client's next connection reaches
/// the new primary. Other routes keep their server while it is up.
pub fn still_routed(
    shared: &Shared,
    listener: &Listener,
    mark: &mut RouteMark,
    addr: &str,
) -> bool {
    let topology = shared.topology.snapshot();
    if mark.current(topology.routes) || listener.route.kind != RouteKind::ReadWrite {
        return true;
    }
    mark.chosen_at(topology.routes);
    let Some(cluster) = topology
        .clusters
        .get(&listener.cluster)
        .filter(|c| c.discovers)
    else {
        return true;
    };
    let config = shared.config.load();
    let at = |name: &str| {
        config
            .servers
            .get(name)
            .is_some_and(|s| format!("{}:{}", s.host, s.port) == addr)
    };
    let Some(view) = cluster.servers.iter().find(|v| at(&v.name)) else {
        return true;
    };
    // Down or unknown: the connection itself will tell.
    !(view.up && view.role == Role::Replica || cluster.split_brain())
}

/// The error that ends a session whose server is no longer its route's (see
/// [`still_routed`]).
pub fn demoted(listener: &Listener, addr: &str) -> crate::error::Error {
    crate::error::Error::new(
        crate::error::Kind::Shutdown,
        crate::error::Side::Server,
        format!(
            "the server at {addr} is no longer the primary of cluster \"{}\"; reconnect to reach the new one",
            listener.cluster
        ),
    )
}

/// A prepared statement's class for a split route, found the first time a route asks
/// (not at every execute), kept with the statement by either protocol's relay.
#[derive(Debug, Default)]
pub struct KeptClass(std::sync::OnceLock<sluice_sql::Class>);

impl KeptClass {
    /// The class of `sql`, the statement's text.
    pub fn of(&self, sql: &[u8], dialect: sluice_sql::Dialect) -> sluice_sql::Class {
        *self.0.get_or_init(|| sluice_sql::classify(sql, dialect))
    }
}
