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

/// Binds `address` for the listener called `name` (fails with both in the message).
pub async fn bind_address(name: &str, address: &str) -> Result<TcpListener> {
    TcpListener::bind(address)
        .await
        .with_context(|| format!("listener \"{name}\": cannot listen on {address}"))
}

pub fn context(l: &Listener) -> Result<ListenerCtx> {
    let tls = match (l.tls, &l.tls_cert_file, &l.tls_key_file) {
        (ClientTls::Disable, _, _) => None,
        (_, Some(c), Some(k)) => Some(crate::tls::acceptor(c, k)?),
        _ => anyhow::bail!(
            "listener \"{}\": TLS needs tls_cert_file and tls_key_file",
            l.name
        ),
    };
    Ok(ListenerCtx {
        cfg: l.clone(),
        tls,
        clients: Default::default(),
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
