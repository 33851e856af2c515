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
    TcpListener::bind(&l.address)
        .await
        .with_context(|| format!("listener \"{}\": cannot listen on {}", l.name, l.address))
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
    let mut shutdown = shared.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            r = socket.accept() => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(listener = %ctx.cfg.name, error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let max = shared.config.load().general.max_client_connections;
        let slot = ClientSlot::take(&shared, max);
        let (shared, ctx) = (shared.clone(), ctx.clone());
        tasks.spawn(async move {
            tracing::debug!(%peer, listener = %ctx.cfg.name, "client connected");
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
        });
    }
}
