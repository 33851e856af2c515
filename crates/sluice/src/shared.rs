//! The context every task gets (`Arc<Shared>`): the configuration snapshot, pools,
//! cancel keys, counters and the shutdown signal. No process-wide globals, so tests can
//! run several Sluice instances in one process.

use crate::pool::Pools;
use crate::session::ledger::PinCounters;
use arc_swap::ArcSwap;
use sluice_config::Config;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use tokio::sync::watch;

/// Idle server connections the reaper closes at most per run (see `reap_pools`).
pub const REAP_PER_TICK: usize = 50;

/// What one protocol's sessions share: the pools of its server connections, the
/// shared (pipelined) connections of its transaction-mode pools, and the cache of what
/// its statements do to a session.
pub struct ProtoState<C: crate::mux::MuxConn> {
    pub pools: Pools<C>,
    pub muxes: crate::mux::Muxes<C>,
    pub effects: crate::session::effects::EffectCache,
    /// Its query rules and table rules (rules/).
    pub rules: ArcSwap<crate::rules::Rules>,
}

impl<C: crate::mux::MuxConn> ProtoState<C> {
    fn new(dialect: sluice_sql::Dialect, config: &Config) -> Self {
        let protocol = match dialect {
            sluice_sql::Dialect::Postgres => sluice_config::Protocol::Postgres,
            sluice_sql::Dialect::MySql => sluice_config::Protocol::Mysql,
        };
        ProtoState {
            pools: Pools::default(),
            muxes: Default::default(),
            effects: crate::session::effects::EffectCache::new(dialect),
            rules: ArcSwap::from_pointee(crate::rules::Rules::new(config, protocol)),
        }
    }

    /// Servers connections in use on the server at `addr`, over all its pools.
    pub fn in_use(&self, addr: &str) -> usize {
        let pools = self.pools.all();
        let on = pools.iter().filter(|p| p.key.server == addr);
        on.map(|p| {
            let (total, idle) = p.counts();
            total.saturating_sub(idle)
        })
        .sum()
    }

    /// Server connections (in use, idle) on the server at `addr`, over all its pools.
    pub fn counts_on(&self, addr: &str) -> (usize, usize) {
        let pools = self.pools.all();
        let on = pools.iter().filter(|p| p.key.server == addr);
        on.fold((0, 0), |(u, i), p| {
            let (total, idle) = p.counts();
            (u + total.saturating_sub(idle), i + idle)
        })
    }

    /// Closes the idle connections to the server at `addr` (it went down).
    pub fn close_idle_on(&self, addr: &str) {
        let pools = self.pools.all();
        pools
            .iter()
            .filter(|p| p.key.server == addr)
            .for_each(|p| p.close_idle());
    }
}

/// Counters of the `mirror` rule action.
#[derive(Default)]
pub struct Mirrors {
    /// Running now.
    pub running: AtomicUsize,
    pub done: std::sync::atomic::AtomicU64,
    /// Failed or timed out (the client never knows).
    pub failed: std::sync::atomic::AtomicU64,
    /// Not run: too many running already, or no server to run them on.
    pub dropped: std::sync::atomic::AtomicU64,
}

pub struct Shared {
    pub config: ArcSwap<Config>,
    pub pg: ProtoState<crate::backend::pg::ServerConn>,
    pub my: ProtoState<crate::backend::mysql::ServerConn>,
    pub cancels: Arc<crate::session::cancel::Registry>,
    pub pins: PinCounters,
    /// Transaction mode: the virtual process id of the client that last held each
    /// server connection (by the server's pid), so notifications name their sender
    /// the way that client knows itself.
    pub holders: parking_lot::Mutex<HashMap<i32, i32>>,
    /// PostgreSQL clients' views of the server-reported parameters: most clients see
    /// the same ones, and an idle client should not hold a copy of its own.
    pub pg_views: crate::intern::Interner<std::collections::BTreeMap<String, String>>,
    /// Clients' user, database and listener names, kept once.
    pub names: crate::intern::Interner<str>,
    /// TLS towards each server that uses it, by server name.
    pub connectors: ArcSwap<HashMap<String, tokio_rustls::TlsConnector>>,
    /// Schema changes (DDL) clients made through Sluice: prepared statements are named
    /// afresh after each (see `Pool::current_statement`).
    pub schema_epoch: Arc<std::sync::atomic::AtomicU64>,
    /// What the health checker knows of each cluster's servers (see topology/).
    pub topology: crate::topology::Topologies,
    /// Each listener's round-robin counter (see `router::pick`).
    pub tickets: crate::router::Tickets,
    /// Each server's connection budget, by server name (see pool/budget.rs).
    pub budgets: ArcSwap<HashMap<String, Arc<crate::pool::budget::ServerBudget>>>,
    /// The SQL firewall's allowlist (firewall/).
    pub firewall: Arc<crate::firewall::Firewall>,
    /// Statements mirrored by rules (session/mirror.rs).
    pub mirrors: Mirrors,
    /// Query digests (stats/); None when `digest_max_entries` is 0.
    pub digests: Option<Arc<crate::stats::Digests>>,
    /// Per-listener counters (stats/counters.rs).
    pub counters: crate::stats::counters::Counters,
    /// Each HandlerSocket listener's counters, by name (for the console and metrics).
    pub kv_stats: parking_lot::RwLock<std::collections::BTreeMap<String, Arc<crate::kv::KvStats>>>,
    /// Every logged-in client (session/clients.rs).
    pub book: Arc<crate::session::clients::Book>,
    /// What the admin console asked of the process (admin/).
    pub control: Arc<crate::control::Control>,
    pub shutdown: watch::Receiver<bool>,
    pub clients: AtomicUsize,
    next_pid: AtomicI32,
}

impl Shared {
    pub fn new(
        config: Config,
        connectors: HashMap<String, tokio_rustls::TlsConnector>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Shared> {
        let budgets = config
            .servers
            .values()
            .map(|s| {
                let cap = s.max_server_connections;
                (
                    s.name.clone(),
                    crate::pool::budget::ServerBudget::new(&s.name, cap),
                )
            })
            .collect();
        Arc::new(Shared {
            budgets: ArcSwap::from_pointee(budgets),
            topology: crate::topology::Topologies::new(&config),
            tickets: Default::default(),
            schema_epoch: Default::default(),
            mirrors: Mirrors::default(),
            digests: match config.general.digest_max_entries {
                0 => None,
                n => Some(Arc::new(crate::stats::Digests::new(n))),
            },
            counters: Default::default(),
            book: Default::default(),
            kv_stats: Default::default(),
            control: Default::default(),
            pg: ProtoState::new(sluice_sql::Dialect::Postgres, &config),
            my: ProtoState::new(sluice_sql::Dialect::MySql, &config),
            config: ArcSwap::from_pointee(config),
            cancels: Arc::new(crate::session::cancel::Registry::default()),
            pins: PinCounters::default(),
            holders: Default::default(),
            pg_views: Default::default(),
            names: Default::default(),
            connectors: ArcSwap::from_pointee(connectors),
            firewall: Arc::new(crate::firewall::Firewall::none()),
            shutdown,
            clients: AtomicUsize::new(0),
            next_pid: AtomicI32::new(rand::random::<u16>() as i32 + 1_000_000),
        })
    }

    /// The same context with the firewall loaded from the configuration (at start,
    /// before anyone else holds it).
    pub fn with_firewall(self: Arc<Self>, firewall: crate::firewall::Firewall) -> Arc<Shared> {
        match Arc::try_unwrap(self) {
            Ok(mut s) => {
                s.firewall = Arc::new(firewall);
                Arc::new(s)
            }
            Err(shared) => shared,
        }
    }

    /// A process id for a client that is not tied to one server connection.
    pub fn next_pid(&self) -> i32 {
        let p = self.next_pid.fetch_add(1, Ordering::Relaxed);
        if p <= 0 {
            self.next_pid.store(1_000_000, Ordering::Relaxed);
        }
        p.max(1)
    }

    /// Closes idle connections past their idle timeout or lifetime, in every pool, at
    /// most [`REAP_PER_TICK`] at a time (the reaper runs every second): a server whose
    /// backends exit by the thousand at once stalls its other sessions for a second (a
    /// backend leaving takes the server's process-array lock), which is what a session
    /// pool's thousand connections expiring together did to every other client.
    pub fn reap_pools(&self) {
        let mut left = REAP_PER_TICK;
        self.pg.pools.all().iter().for_each(|p| p.reap(&mut left));
        self.my.pools.all().iter().for_each(|p| p.reap(&mut left));
    }

    /// Closes every idle server connection (shutdown).
    pub fn close_idle_pools(&self) {
        self.pg.pools.all().iter().for_each(|p| p.close_idle());
        self.my.pools.all().iter().for_each(|p| p.close_idle());
    }

    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// An admin console connection's place: a client slot like any client's, or when the
/// clients have taken every one, one of the console's own few (an operator must get
/// in then): the console is never unbounded, logged in or not.
pub struct ConsoleSeat(
    #[allow(dead_code)] Option<ClientSlot>,
    #[allow(dead_code)] Option<crate::control::ConsoleSlot>,
);

impl ConsoleSeat {
    pub fn take(shared: &Shared, slot: Option<ClientSlot>) -> Option<ConsoleSeat> {
        match slot {
            Some(s) => Some(ConsoleSeat(Some(s), None)),
            None => shared
                .control
                .console_slot()
                .map(|c| ConsoleSeat(None, Some(c))),
        }
    }
}

/// Counts a client connection for as long as it lives.
pub struct ClientSlot(Arc<Shared>);

impl ClientSlot {
    /// Takes a slot unless the process-wide cap is reached.
    pub fn take(shared: &Arc<Shared>, max: usize) -> Option<ClientSlot> {
        let n = shared.clients.fetch_add(1, Ordering::AcqRel);
        if n >= max {
            shared.clients.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(ClientSlot(shared.clone()))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::AcqRel);
    }
}
