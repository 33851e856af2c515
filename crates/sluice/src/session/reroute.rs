//! Transaction mode: a session's route asked again before each transaction. A session
//! keeps the pool it logged in with while the topology stays as it was; when the
//! topology changed and the router now picks another server (a failover, a replica
//! gone or back), the session's next server connection comes from the pool of the same
//! user, database and shaping parameters on that server.

use super::plan::{Want, in_use, pool_on, target_for};
use crate::backend::Target;
use crate::pool::{Pool, PoolConn, PoolKey, Pools};
use crate::shared::Shared;
use sluice_config::Listener;
use std::sync::Arc;

/// Where a session's route stands: the topology generation its pool was chosen at, and
/// its own round-robin ticket (so that it stays on one replica while nothing changes).
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteMark {
    pub generation: u64,
    pub ticket: usize,
}

impl RouteMark {
    /// A session's mark at login.
    pub fn at_login(shared: &Shared, listener: &Listener) -> RouteMark {
        RouteMark {
            generation: shared.topology.load().generation,
            ticket: shared.tickets.last(&listener.name),
        }
    }
}

/// The pool a session without a server connection should take its next one from, if
/// not `pool`: None when nothing changed, when no server can take the route now (the
/// lease then fails or waits as it would), or when `pool` cannot open connections by
/// itself (a pass-through pool only grows by logins: such a session stays, and learns
/// its server is gone from the error). `retarget` points the pool's opener at the new
/// server.
pub fn reroute<C: PoolConn>(
    shared: &Shared,
    listener: &Listener,
    pools: &Pools<C>,
    pool: &Arc<Pool<C>>,
    mark: &mut RouteMark,
    retarget: impl FnOnce(&C::Opener, Target) -> C::Opener,
) -> Option<Arc<Pool<C>>> {
    let topology = shared.topology.load();
    if topology.generation == mark.generation {
        return None;
    }
    mark.generation = topology.generation;
    let config = shared.config.load_full();
    let uses = |name: &str| in_use(shared, &config, name);
    let picked = crate::router::pick(
        &listener.route,
        &topology,
        &listener.cluster,
        mark.ticket,
        &uses,
    )
    .ok()?;
    let server = config.servers.get(&*picked.name)?;
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
    if target.addr() == pool.key.server {
        return None;
    }
    let opener = pool.opener()?;
    let key = PoolKey {
        server: target.addr(),
        ..pool.key.clone()
    };
    let next = pool_on(
        pools,
        key,
        pool.name.clone(),
        pool.settings.clone(),
        &target,
    );
    if next.opener().is_none() {
        next.set_opener(Arc::new(retarget(&opener, target)));
    }
    tracing::debug!(from = %pool.key.server, to = %next.key.server, "session rerouted");
    Some(next)
}
