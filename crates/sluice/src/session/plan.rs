//! Where a new client's session goes, for either protocol: the server the router picks
//! for the listener's route (waiting for the topology when none can take it), how to
//! reach it, and the pool its connections come from (one per server,
//! database, server user and shaping parameters, under the listener's pool policy).

use crate::backend::Target;
use crate::error::Error;
use crate::pool::{Pool, PoolConn, PoolKey, Pools, Settings};
use crate::router::NoRoute;
use crate::shared::Shared;
use sluice_config::{Config, Listener, PoolMode, User};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The outcome of planning a login.
pub struct Plan<C: PoolConn> {
    pub config: Arc<Config>,
    pub mode: PoolMode,
    pub target: Target,
    pub pool: Arc<Pool<C>>,
    /// The user Sluice logs in as on the server.
    pub server_user: String,
}

impl<C: PoolConn> Plan<C> {
    /// The `[users]` entry of the client's user, if configured.
    pub fn user_cfg<'a>(&'a self, user: &str) -> Option<&'a User> {
        self.config.users.get(user)
    }
}

/// The server a listener's client goes to now, as the router picks it from the
/// topology, and how to reach it. When no server can take the route (no primary yet,
/// during a failover, every replica lagging) it waits for the topology to change, up to
/// the pool's `wait_timeout`, then answers an error.
pub async fn target(shared: &Shared, listener: &Listener) -> Result<(Arc<Config>, Target), Error> {
    // PAUSE: a new session waits for RESUME (within the client's login timeout).
    shared
        .control
        .hold(&listener.cluster, &shared.shutdown)
        .await;
    target_now(shared, listener).await
}

/// [`target`], paused or not (the admin console's own logins).
pub async fn target_now(
    shared: &Shared,
    listener: &Listener,
) -> Result<(Arc<Config>, Target), Error> {
    let config = shared.config.load_full();
    let pool_cfg = config.pool_for(listener);
    let mut target = route_target(
        shared,
        &config,
        Want {
            route: &listener.route,
            cluster: &listener.cluster,
            by: &listener.name,
            wait: pool_cfg.wait_timeout,
            connect_timeout: pool_cfg.connect_timeout,
        },
    )
    .await?;
    target.statement_timeout = pool_cfg.query_timeout;
    Ok((config, target))
}

/// What a server is wanted for: a route on a cluster, asked for by a listener (whose
/// round-robin turns), waiting at most `wait` for a server that can take it.
pub struct Want<'a> {
    pub route: &'a sluice_config::Route,
    pub cluster: &'a str,
    pub by: &'a str,
    pub wait: Duration,
    pub connect_timeout: Duration,
}

/// The server the router picks for `want` now (waiting for the topology while none can
/// take it), and how to reach it.
pub async fn route_target(
    shared: &Shared,
    config: &Config,
    want: Want<'_>,
) -> Result<Target, Error> {
    let cluster = want.cluster;
    let started = Instant::now();
    let ticket = shared.tickets.next(want.by);
    let in_use = |name: &str| in_use(shared, config, name);
    let server = loop {
        let topology = shared.topology.load();
        let ask = crate::router::Ask {
            ticket,
            min_position: None,
            avoid: None,
        };
        match crate::router::pick(want.route, &topology, cluster, ask, &in_use) {
            Ok(s) => match config.servers.get(&*s.name) {
                Some(server) => break server,
                None => return Err(no_route(NoRoute::UnknownCluster, cluster, None)),
            },
            Err(NoRoute::UnknownCluster) => {
                return Err(no_route(NoRoute::UnknownCluster, cluster, None));
            }
            Err(why) => {
                let waited = started.elapsed();
                if waited >= want.wait {
                    return Err(no_route(why, cluster, Some(waited)));
                }
                let left = want.wait - waited;
                shared.topology.changed(left.min(RECHECK)).await;
            }
        }
    };
    Ok(target_for(shared, config, server, &want))
}

/// How to reach `server` for `want`.
pub(super) fn target_for(
    shared: &Shared,
    config: &Config,
    server: &sluice_config::Server,
    want: &Want<'_>,
) -> Target {
    let mut target = Target::for_server(
        server,
        shared.connectors.load().get(&server.name).cloned(),
        want.connect_timeout,
        config.general.max_message_size,
    );
    target.budget = shared.budgets.load().get(&server.name).cloned();
    target.budget_wait = want.wait;
    // A client's connection that cannot be opened says the server may be gone as
    // plainly as a session that lost its one.
    target.unreachable = shared.topology.waker(&target.addr());
    target
}

/// The pool of `key`, made with `name` and `settings` if there is none yet (its idle
/// connections then count in the server's budget).
pub(super) fn pool_on<C: PoolConn>(
    pools: &Pools<C>,
    key: PoolKey,
    name: String,
    settings: Settings,
    target: &Target,
) -> Arc<Pool<C>> {
    pools.get_or_create(&key, || {
        let pool = Pool::new(name, key.clone(), settings);
        if let Some(b) = &target.budget {
            let idle: Arc<dyn crate::pool::budget::IdleConns> = pool.clone();
            b.register(Arc::downgrade(&idle));
        }
        pool
    })
}

/// How often a client waiting for a route looks at the topology again, in case it
/// missed a change.
const RECHECK: Duration = Duration::from_millis(100);

fn no_route(why: NoRoute, cluster: &str, waited: Option<Duration>) -> Error {
    let mut msg = why.describe(cluster);
    if let Some(w) = waited {
        msg.push_str(&format!(" (waited {} ms)", w.as_millis()));
    }
    Error::server_gone(msg).with_sqlstate("08001")
}

/// Server connections in use on the server named `name`, over all its pools.
pub(super) fn in_use(shared: &Shared, config: &Config, name: &str) -> usize {
    let Some(s) = config.servers.get(name) else {
        return 0;
    };
    let addr = format!("{}:{}", s.host, s.port);
    shared.pg.in_use(&addr) + shared.my.in_use(&addr)
}

/// Plans the session of `user` on `database` on the server `target` picked. `extra`:
/// startup parameters that shape a server connection for good (they separate pools);
/// `default_reset`: the protocol's reset command when the pool configures none.
pub fn plan<C: PoolConn>(
    shared: &Shared,
    listener: &Listener,
    (config, target): (Arc<Config>, Target),
    pools: &Pools<C>,
    (user, database): (&str, &str),
    extra: Vec<(String, String)>,
    default_reset: &str,
) -> Result<Plan<C>, Error> {
    let pool_cfg = config.pool_for(listener).clone();
    let user_cfg = config.users.get(user);
    // Configured users log in as their server user; pass-through users as themselves
    // (on a listener with auth_user, users listed in [users] are configured users).
    let server_user = match user_cfg {
        Some(u) if listener.logs_in_itself() => u.server_user().to_owned(),
        _ => user.to_owned(),
    };
    let key = PoolKey {
        policy: pool_cfg.name.clone(),
        server: target.addr(),
        database: database.to_owned(),
        user: server_user.clone(),
        extra,
    };
    let settings = settings(shared, &pool_cfg, user_cfg, default_reset);
    let pool_name = format!("{}/{}@{}", pool_cfg.name, server_user, database);
    let pool = pool_on(pools, key, pool_name, settings, &target);
    Ok(Plan {
        mode: pool_cfg.mode,
        config,
        target,
        pool,
        server_user,
    })
}

/// The pool a listener with `auth_user` looks its clients' secrets up from on the
/// server `target` (connections of the auth user to `database`, apart from every
/// client's pool), with how to log in as the auth user: its `[users]` entry.
pub fn lookup_pool<'c, C: PoolConn>(
    shared: &Shared,
    listener: &Listener,
    config: &'c Config,
    target: &Target,
    pools: &Pools<C>,
    database: &str,
    default_reset: &str,
) -> Option<(Arc<Pool<C>>, &'c User)> {
    let auth_user = config.users.get(&listener.auth_query.as_ref()?.user)?;
    let pool_cfg = config.pool_for(listener);
    let key = PoolKey {
        policy: pool_cfg.name.clone(),
        server: target.addr(),
        database: database.to_owned(),
        user: auth_user.server_user().to_owned(),
        extra: vec![("sluice".into(), "auth_query".into())],
    };
    let name = format!("{}/{}@{} (auth_query)", pool_cfg.name, key.user, database);
    let settings = settings(shared, pool_cfg, Some(auth_user), default_reset);
    Some((pool_on(pools, key, name, settings, target), auth_user))
}

/// After a reload that changed pool policies or users: each running pool takes the
/// settings its policy now gives (its user's `pool_size` for a configured server
/// user). Returns how many pools changed.
pub fn refresh_settings<C: PoolConn>(
    shared: &Shared,
    pools: &Pools<C>,
    config: &Config,
    default_reset: &str,
) -> usize {
    let mut changed = 0;
    for p in pools.all() {
        let Some(pool_cfg) = config.pools.get(&p.key.policy) else {
            continue;
        };
        let sized_for = p.settings().sized_for.clone();
        let user_cfg = sized_for.and_then(|u| config.users.get(&u));
        let next = settings(shared, pool_cfg, user_cfg, default_reset);
        if !next.same_as(&p.settings()) {
            p.set_settings(next);
            changed += 1;
        }
    }
    changed
}

/// A pool's settings under the policy `pool_cfg` for `user_cfg`.
fn settings(
    shared: &Shared,
    pool_cfg: &sluice_config::Pool,
    user_cfg: Option<&User>,
    default_reset: &str,
) -> Settings {
    Settings {
        size: pool_cfg.size_for(user_cfg),
        min_idle: pool_cfg.min_idle,
        wait_timeout: pool_cfg.wait_timeout,
        idle_timeout: pool_cfg.idle_timeout.unwrap_or_default(),
        lifetime: pool_cfg.server_lifetime.unwrap_or_default(),
        statement_cache: pool_cfg.statement_cache_size,
        shared: pool_cfg.shared_connections,
        session_timeouts: [
            pool_cfg.idle_transaction_timeout,
            pool_cfg.query_timeout,
            pool_cfg.client_idle_timeout,
        ],
        schema_epoch: shared.schema_epoch.clone(),
        sized_for: user_cfg.map(|u| u.name.clone()),
        reset_query: pool_cfg
            .reset_query
            .clone()
            .unwrap_or_else(|| default_reset.into()),
    }
}
