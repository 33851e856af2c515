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
    shutdown: watch::Sender<bool>,
    clients: TaskTracker,
    accept: TaskTracker,
    running: Arc<crate::running::Running>,
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
    crate::session::spin::set(config.general.busy_poll_us);
    let shared = shared.with_firewall(firewall);
    crate::topology::health::start(&shared);
    let clients = TaskTracker::new();
    let accept = TaskTracker::new();
    let running = Arc::new(crate::running::Running::new(
        shared.clone(),
        accept.clone(),
        clients.clone(),
    ));
    let mut addrs = HashMap::new();
    for l in config.listeners.values() {
        addrs.insert(l.name.clone(), running.start_sql(l).await?);
    }
    for l in config.handlersocket.values() {
        addrs.insert(l.name.clone(), running.start_hs(&config, l).await?);
    }
    start_admin(&shared, &config, &accept, &clients, &mut addrs).await?;
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
        shutdown: tx,
        clients,
        accept,
        running,
    })
}

/// The admin endpoints: HTTP (metrics, health, dashboard) and the MySQL console, with
/// SO_REUSEPORT as the listeners (in a restart the new process answers `/ready` at
/// once). An address a process holds without SO_REUSEPORT is bound as soon as it is
/// free.
async fn start_admin(
    shared: &Arc<Shared>,
    config: &Config,
    accept: &TaskTracker,
    clients: &TaskTracker,
    addrs: &mut HashMap<String, SocketAddr>,
) -> Result<()> {
    let endpoints = [
        ("admin_http", config.admin.http_address.clone()),
        ("admin_mysql", config.admin.mysql_address.clone()),
    ];
    for (name, address) in endpoints {
        let Some(address) = address else { continue };
        let tasks = clients.clone();
        let for_serving = shared.clone();
        let serve = move |socket: tokio::net::TcpListener| async move {
            match name {
                "admin_mysql" => listener::serve_admin_mysql(for_serving, socket, tasks).await,
                _ => crate::admin::http::serve(for_serving, socket).await,
            }
        };
        match listener::bind_address(name, &address, true).await {
            Ok(socket) => {
                let at = socket.local_addr()?;
                addrs.insert(name.to_string(), at);
                tracing::info!(listener = name, address = %at, "listening");
                match name {
                    // HTTP outlives the accept loops: it answers /ready during the drain.
                    "admin_http" => drop(tokio::spawn(serve(socket))),
                    _ => drop(accept.spawn(serve(socket))),
                }
            }
            Err(e) if in_use(&e) => {
                tracing::warn!(listener = name, %address, "address in use (by the Sluice this one replaces?): bound as soon as it is free");
                let (shared, address) = (shared.clone(), address.clone());
                // Not tracked: once bound it serves as the others do (HTTP through the
                // drain), and until then it gives up at shutdown.
                tokio::spawn(async move {
                    let mut shutdown = shared.shutdown.clone();
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                            _ = shutdown.wait_for(|s| *s) => return,
                        }
                        if let Ok(socket) = listener::bind_address(name, &address, true).await {
                            if let Ok(at) = socket.local_addr() {
                                shared.control.set_addr(name, at);
                                tracing::info!(listener = name, address = %at, "listening");
                            }
                            serve(socket).await;
                            return;
                        }
                    }
                });
                continue;
            }
            Err(e) => return Err(e),
        }
        if let Some(at) = addrs.get(name) {
            shared.control.set_addr(name, *at);
        }
    }
    Ok(())
}

fn in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    })
}

impl Handle {
    /// The key-value executor of a HandlerSocket listener (tests read its counters).
    pub fn kv(&self, name: &str) -> Option<Arc<crate::kv::Kv>> {
        self.running.kv(name)
    }

    /// Makes `RELOAD` and SIGHUP read `file` again and apply it (see reload.rs).
    pub fn reload_from(&self, file: std::path::PathBuf) {
        let running = self.running.clone();
        let file = Arc::new(file);
        self.shared.control.set_reload(Arc::new(move || {
            let (running, file) = (running.clone(), file.clone());
            Box::pin(async move { crate::reload::reload(&running, &file).await })
        }));
    }

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
        // Sessions wait for the flag through their line in the client book.
        self.shared.book.wake_all();
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
        self.shared.control.stopped.cancel();
    }
}

/// A handle dropped without [`Handle::shutdown`] (as tests do) still tells its sessions
/// to end between transactions.
impl Drop for Handle {
    fn drop(&mut self) {
        self.begin_shutdown();
    }
}
