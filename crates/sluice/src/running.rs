//! The listeners running now, by name: the SQL and HandlerSocket listeners started at
//! start and by a reload. Each has its socket's accept loop with a stop signal (a
//! reload that removes the listener stops accepting; its clients finish on their own)
//! and, for SQL listeners, a context a reload can replace while the socket stays.

use crate::frontend::ListenerCtx;
use crate::listener::{self, SwappableCtx};
use crate::shared::Shared;
use anyhow::{Context, Result};
use parking_lot::Mutex;
use sluice_config::{Config, HsListener, Listener};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

struct Sql {
    cfg: Listener,
    ctx: SwappableCtx,
    stop: CancellationToken,
}

struct Hs {
    cfg: HsListener,
    kv: Arc<crate::kv::Kv>,
    stop: CancellationToken,
}

pub struct Running {
    pub shared: Arc<Shared>,
    accept: TaskTracker,
    clients: TaskTracker,
    mysql: Arc<crate::frontend::mysql::SharedState>,
    sql: Mutex<HashMap<String, Sql>>,
    hs: Mutex<HashMap<String, Hs>>,
    /// Held for the whole of a reload: one at a time.
    pub reloading: tokio::sync::Mutex<()>,
}

/// A listener made ready (context built, TLS files read, socket bound but not
/// listening, so it takes no connection yet): a reload prepares every change before it
/// applies any.
pub enum Prepared {
    Sql(Listener, ListenerCtx, tokio::net::TcpSocket),
    Hs(
        HsListener,
        Arc<crate::frontend::hs::HsCtx>,
        tokio::net::TcpSocket,
    ),
}

impl Running {
    pub fn new(shared: Arc<Shared>, accept: TaskTracker, clients: TaskTracker) -> Running {
        Running {
            shared,
            accept,
            clients,
            mysql: Default::default(),
            sql: Default::default(),
            hs: Default::default(),
            reloading: Default::default(),
        }
    }

    /// Builds a SQL listener's context and binds its address (SO_REUSEPORT: also
    /// where the listener it replaces still listens).
    pub async fn prepare_sql(&self, l: &Listener) -> Result<Prepared> {
        let ctx = listener::context(l, &self.mysql)?;
        let socket = listener::bind(l).await?;
        Ok(Prepared::Sql(l.clone(), ctx, socket))
    }

    /// Starts listening and accepting on a prepared listener; one of the same name
    /// stops accepting (its clients finish). Returns the address bound.
    pub fn start(&self, p: Prepared) -> Result<SocketAddr> {
        let stop = CancellationToken::new();
        match p {
            Prepared::Sql(l, ctx, socket) => {
                let socket = listener::listen(&l.name, socket, true)?;
                let addr = socket.local_addr()?;
                // Counted from the start, so metrics show every listener.
                self.shared.counters.listener(&l.name);
                self.shared.control.set_addr(&l.name, addr);
                tracing::info!(listener = %l.name, address = %addr, protocol = %l.protocol, "listening");
                let ctx: SwappableCtx = Arc::new(arc_swap::ArcSwap::from_pointee(ctx));
                self.accept.spawn(listener::serve(
                    self.shared.clone(),
                    socket,
                    ctx.clone(),
                    self.clients.clone(),
                    stop.clone(),
                ));
                let running = Sql {
                    cfg: l.clone(),
                    ctx,
                    stop,
                };
                if let Some(old) = self.sql.lock().insert(l.name.clone(), running) {
                    old.stop.cancel();
                }
                Ok(addr)
            }
            Prepared::Hs(l, ctx, socket) => {
                let socket = listener::listen(&l.name, socket, true)?;
                let addr = socket.local_addr()?;
                self.shared.control.set_addr(&l.name, addr);
                let stats = ctx.kv.stats.clone();
                self.shared.kv_stats.write().insert(l.name.clone(), stats);
                tracing::info!(listener = %l.name, address = %addr, protocol = "handlersocket", "listening");
                let kv = ctx.kv.clone();
                self.accept.spawn(listener::serve_hs(
                    self.shared.clone(),
                    socket,
                    ctx,
                    self.clients.clone(),
                    stop.clone(),
                ));
                let running = Hs {
                    cfg: l.clone(),
                    kv,
                    stop,
                };
                if let Some(old) = self.hs.lock().insert(l.name.clone(), running) {
                    old.stop.cancel();
                }
                Ok(addr)
            }
        }
    }

    /// Binds a SQL listener and starts accepting (at start).
    pub async fn start_sql(&self, l: &Listener) -> Result<SocketAddr> {
        let p = self.prepare_sql(l).await?;
        self.start(p)
    }

    /// The listener's settings as it runs now.
    pub fn sql_cfg(&self, name: &str) -> Option<Listener> {
        self.sql.lock().get(name).map(|s| s.cfg.clone())
    }

    pub fn sql_names(&self) -> Vec<String> {
        self.sql.lock().keys().cloned().collect()
    }

    pub fn hs_cfg(&self, name: &str) -> Option<HsListener> {
        self.hs.lock().get(name).map(|s| s.cfg.clone())
    }

    pub fn hs_names(&self) -> Vec<String> {
        self.hs.lock().keys().cloned().collect()
    }

    /// A HandlerSocket listener's key-value executor.
    pub fn kv(&self, name: &str) -> Option<Arc<crate::kv::Kv>> {
        self.hs.lock().get(name).map(|h| h.kv.clone())
    }

    /// A listener's new context, built (TLS files read) but not yet in use.
    pub fn context(&self, l: &Listener) -> Result<ListenerCtx> {
        listener::context(l, &self.mysql)
    }

    /// New settings for a listener whose address stays: later clients get them;
    /// those connected keep theirs.
    pub fn renew_sql(&self, l: &Listener, ctx: ListenerCtx) {
        if let Some(s) = self.sql.lock().get_mut(&l.name) {
            s.ctx.store(Arc::new(ctx));
            s.cfg = l.clone();
        }
    }

    /// Stops accepting on a SQL listener; its clients finish.
    pub fn stop_sql(&self, name: &str) {
        let Some(s) = self.sql.lock().remove(name) else {
            return;
        };
        s.stop.cancel();
        // A HandlerSocket listener a reload gave the name to keeps its address.
        if !self.hs.lock().contains_key(name) {
            self.shared.control.remove_addr(name);
        }
    }

    /// Stops accepting on a HandlerSocket listener; its clients finish.
    pub fn stop_hs(&self, name: &str) {
        let Some(h) = self.hs.lock().remove(name) else {
            return;
        };
        h.stop.cancel();
        self.shared.kv_stats.write().remove(name);
        if !self.sql.lock().contains_key(name) {
            self.shared.control.remove_addr(name);
        }
    }

    /// Prepares a HandlerSocket listener: its key-value executor, TLS, secret, socket.
    pub async fn prepare_hs(&self, config: &Config, l: &HsListener) -> Result<Prepared> {
        let shared = &self.shared;
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
        let socket = listener::bind_socket(&l.name, &l.address, true).await?;
        let kv = kv_for(shared, config, l)?;
        let ctx = Arc::new(crate::frontend::hs::HsCtx {
            tls,
            kv,
            cfg,
            clients: Default::default(),
        });
        Ok(Prepared::Hs(l.clone(), ctx, socket))
    }

    /// Binds a HandlerSocket listener and starts accepting (at start).
    pub async fn start_hs(&self, config: &Config, l: &HsListener) -> Result<SocketAddr> {
        let p = self.prepare_hs(config, l).await?;
        self.start(p)
    }
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
