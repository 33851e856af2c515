//! Starting and stopping a Sluice instance: TLS set-up, binding listeners, the pool
//! reaper, and the graceful drain on shutdown. Used by `main` and by tests, which run
//! several instances in one process.

use crate::listener;
use crate::shared::Shared;
use anyhow::{Context, Result};
use sluice_config::{Config, ServerTls};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

pub struct Handle {
    pub shared: Arc<Shared>,
    /// Bound address of each listener, by name.
    pub addrs: HashMap<String, SocketAddr>,
    /// The key-value executor of each HandlerSocket listener, by name.
    pub kv: HashMap<String, Arc<crate::kv::Kv>>,
    shutdown: watch::Sender<bool>,
    clients: TaskTracker,
    accept: TaskTracker,
}

/// Binds every listener and starts serving.
pub async fn start(config: Config) -> Result<Handle> {
    let mut connectors = HashMap::new();
    for s in config.servers.values() {
        if s.tls != ServerTls::Disable {
            let ca = if s.tls.verifies() {
                s.tls_ca_file.as_deref()
            } else {
                None
            };
            let c = crate::tls::connector(ca)
                .with_context(|| format!("server \"{}\": TLS set-up", s.name))?;
            connectors.insert(s.name.clone(), c);
        }
    }
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    let firewall = crate::firewall::Firewall::load(&config).map_err(anyhow::Error::msg)?;
    let (tx, rx) = watch::channel(false);
    let shared = Shared::new(config.clone(), connectors, rx);
    let shared = shared.with_firewall(firewall);
    crate::topology::health::start(&shared);
    let clients = TaskTracker::new();
    let accept = TaskTracker::new();
    let mut addrs = HashMap::new();
    let mysql = Arc::new(crate::frontend::mysql::SharedState::default());
    for l in config.listeners.values() {
        let ctx = Arc::new(listener::context(l, &mysql)?);
        let socket = listener::bind(l).await?;
        addrs.insert(l.name.clone(), socket.local_addr()?);
        tracing::info!(listener = %l.name, address = %socket.local_addr()?, protocol = %l.protocol, "listening");
        accept.spawn(listener::serve(
            shared.clone(),
            socket,
            ctx,
            clients.clone(),
        ));
    }
    let mut kvs = HashMap::new();
    for l in config.handlersocket.values() {
        let kv = kv_for(&shared, &config, l)?;
        kvs.insert(l.name.clone(), kv.clone());
        let tls = match (&l.tls_cert_file, &l.tls_key_file) {
            (Some(c), Some(k)) => Some(
                crate::tls::acceptor(c, k)
                    .with_context(|| format!("handlersocket \"{}\": TLS set-up", l.name))?,
            ),
            _ => None,
        };
        let mut cfg = l.clone();
        if let Some(path) = &l.secret_file {
            let secret = crate::hs_secret::load_or_create(path)
                .with_context(|| format!("handlersocket \"{}\": secret_file", l.name))?;
            cfg.secret = Some(secret);
        }
        let ctx = Arc::new(crate::frontend::hs::HsCtx {
            tls,
            kv,
            cfg,
            clients: Default::default(),
        });
        let socket = listener::bind_address(&l.name, &l.address).await?;
        addrs.insert(l.name.clone(), socket.local_addr()?);
        tracing::info!(listener = %l.name, address = %socket.local_addr()?, protocol = "handlersocket", "listening");
        accept.spawn(listener::serve_hs(
            shared.clone(),
            socket,
            ctx,
            clients.clone(),
        ));
    }
    let reaper = shared.clone();
    accept.spawn(async move {
        let mut rx = reaper.shutdown.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = rx.wait_for(|s| *s) => break,
            }
            reaper.reap_pools();
            reaper.firewall.flush(false);
        }
        reaper.firewall.flush(true);
    });
    Ok(Handle {
        shared,
        addrs,
        kv: kvs,
        shutdown: tx,
        clients,
        accept,
    })
}

/// The key-value executor of a HandlerSocket listener. Each of its connections goes
/// where the router says at that moment: a read-write listener to the primary, a
/// read-only one to the replicas within the lag limit (the primary when there is none).
fn kv_for(
    shared: &Arc<Shared>,
    config: &Config,
    l: &sluice_config::HsListener,
) -> Result<Arc<crate::kv::Kv>> {
    use crate::backend::{Credentials, Targets, mysql};
    use sluice_config::{HsMode, Route, RouteKind, Strategy};
    let cluster = config
        .clusters
        .get(&l.cluster)
        .with_context(|| format!("handlersocket \"{}\": no cluster \"{}\"", l.name, l.cluster))?;
    let protocol = cluster
        .servers
        .iter()
        .find_map(|s| config.servers.get(s))
        .with_context(|| format!("handlersocket \"{}\": cluster has no server", l.name))?
        .protocol;
    let route = match l.mode {
        HsMode::ReadWrite => Route::default(),
        HsMode::ReadOnly => Route {
            kind: RouteKind::ReadOnly,
            strategy: Strategy::RoundRobinWithFallback,
            ..Route::default()
        },
    };
    let (shared2, cluster, name) = (shared.clone(), l.cluster.clone(), l.name.clone());
    let targets: Targets = Arc::new(move || {
        let (shared, route, cluster, name) = (
            shared2.clone(),
            route.clone(),
            cluster.clone(),
            name.clone(),
        );
        Box::pin(async move {
            let config = shared.config.load_full();
            let want = crate::session::plan::Want {
                route: &route,
                cluster: &cluster,
                by: &name,
                wait: sluice_config::DEFAULT_CONNECT_TIMEOUT,
                connect_timeout: sluice_config::DEFAULT_CONNECT_TIMEOUT,
            };
            crate::session::plan::route_target(&shared, &config, want).await
        })
    });
    let creds = Credentials::password(l.user.clone(), l.password.clone());
    match protocol {
        sluice_config::Protocol::Mysql => Ok(crate::kv::Kv::start(
            mysql::kv::MyKv {
                creds,
                database: l.database.clone(),
                targets,
            },
            l.connections,
        )),
        sluice_config::Protocol::Postgres => Ok(crate::kv::Kv::start(
            crate::backend::pg::kv::PgKv {
                targets,
                creds,
                database: l.database.clone(),
            },
            l.connections,
        )),
    }
}

impl Handle {
    /// Writes each pool's counters to the log (on SIGUSR1), and their totals on one
    /// line a benchmark can read (`slow_waits_total`: waits for a server connection
    /// over 100 ms, clients starving).
    pub fn log_counters(&self) {
        let pg = self.shared.pg.pools.all().into_iter().map(|p| p.counters());
        let my = self.shared.my.pools.all().into_iter().map(|p| p.counters());
        let mut slow = 0;
        for (pool, leases, waits, slow_waits) in pg.chain(my) {
            slow += slow_waits;
            tracing::warn!(%pool, leases, waits, slow_waits, "pool counters");
        }
        tracing::warn!("counters: slow_waits_total={slow}");
    }

    /// Stops accepting; sessions end as soon as they are between transactions.
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Drains for up to `timeout`, then closes whatever is left.
    pub async fn shutdown(self, timeout: Duration) {
        self.begin_shutdown();
        self.accept.close();
        self.accept.wait().await;
        self.clients.close();
        if tokio::time::timeout(timeout, self.clients.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                ?timeout,
                "shutdown timeout reached; closing remaining sessions"
            );
        }
        self.shared.close_idle_pools();
    }
}
