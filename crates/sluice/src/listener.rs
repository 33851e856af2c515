//! Listeners: bind the configured addresses, accept clients, enforce connection limits,
//! and hand each client to the frontend of the listener's protocol.

use crate::frontend::{self, ListenerCtx};
use crate::shared::{ClientSlot, Shared};
use anyhow::{Context, Result};
use sluice_config::{ClientTls, Listener, Protocol};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

/// Binds a listener (fails with the address in the message).
pub async fn bind(l: &Listener) -> Result<TcpListener> {
    bind_address(&l.name, &l.address).await
}

/// Connections the kernel queues for a listener before Sluice accepts them. A crowd of
/// clients connecting at once (a thousand workers starting) must not find the queue full:
/// their SYNs would be dropped and retried after 1, 2, 4 ... seconds. (The kernel caps it
/// at net.core.somaxconn.)
const BACKLOG: u32 = 4096;

/// Binds `address` for the listener called `name` (fails with both in the message): the
/// first of its resolved addresses that binds, with SO_REUSEADDR as std does.
pub async fn bind_address(name: &str, address: &str) -> Result<TcpListener> {
    let ctx = || format!("listener \"{name}\": cannot listen on {address}");
    let mut last = None;
    for addr in tokio::net::lookup_host(address).await.with_context(ctx)? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        };
        let bound = socket.and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(addr)?;
            s.listen(BACKLOG)
        });
        match bound {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => anyhow::Error::new(e).context(ctx()),
        None => anyhow::anyhow!("{}: the address resolves to nothing", ctx()),
    })
}

pub fn context(
    l: &Listener,
    mysql: &std::sync::Arc<crate::frontend::mysql::SharedState>,
) -> Result<ListenerCtx> {
    let tls = match (l.tls, &l.tls_cert_file, &l.tls_key_file) {
        (ClientTls::Disable, _, _) => None,
        (_, Some(c), Some(k)) => Some(crate::tls::acceptor(c, k)?),
        _ => anyhow::bail!(
            "listener \"{}\": TLS needs tls_cert_file and tls_key_file",
            l.name
        ),
    };
    Ok(ListenerCtx {
        cfg: std::sync::Arc::new(l.clone()),
        tls,
        clients: Default::default(),
        mysql: mysql.clone(),
    })
}

/// Accepts until shutdown; client tasks go into `tasks`.
pub async fn serve(
    shared: Arc<Shared>,
    socket: TcpListener,
    ctx: Arc<ListenerCtx>,
    tasks: TaskTracker,
) {
    let name = ctx.cfg.name.clone();
    accept(shared, socket, &name, tasks, move |shared, tcp, slot| {
        let ctx = ctx.clone();
        async move {
            let protocol = ctx.cfg.protocol;
            let a = frontend::Accepted {
                shared,
                ctx,
                tcp,
                slot,
            };
            match protocol {
                Protocol::Postgres => frontend::pg::serve(a).await,
                Protocol::Mysql => frontend::mysql::serve(a).await,
            }
        }
    })
    .await
}

/// Accepts clients of a HandlerSocket listener until shutdown.
pub async fn serve_hs(
    shared: Arc<Shared>,
    socket: TcpListener,
    ctx: Arc<frontend::hs::HsCtx>,
    tasks: TaskTracker,
) {
    let name = ctx.cfg.name.clone();
    accept(shared, socket, &name, tasks, move |shared, tcp, slot| {
        frontend::hs::serve(shared, ctx.clone(), tcp, slot)
    })
    .await
}

/// The accept loop of every listener: Nagle off, the process-wide client cap, one task
/// per client made by `client`.
async fn accept<F, Fut>(
    shared: Arc<Shared>,
    socket: TcpListener,
    name: &str,
    tasks: TaskTracker,
    client: F,
) where
    F: Fn(Arc<Shared>, tokio::net::TcpStream, Option<ClientSlot>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut shutdown = shared.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            r = socket.accept() => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(listener = %name, error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let max = shared.config.load().general.max_client_connections;
        let slot = ClientSlot::take(&shared, max);
        tracing::debug!(%peer, listener = %name, "client connected");
        tasks.spawn(client(shared.clone(), tcp, slot));
    }
}
