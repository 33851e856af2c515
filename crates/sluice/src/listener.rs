//! Listeners: bind the configured addresses, accept clients, enforce connection limits,
//! and hand each client to the frontend of the listener's protocol.

use crate::frontend::{self, ListenerCtx};
use crate::shared::{ClientSlot, Shared};
use anyhow::{Context, Result};
use sluice_config::{ClientTls, Listener, Protocol};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Binds a listener's address without listening yet (fails with the address in the
/// message), with SO_REUSEPORT: a new Sluice started with the same configuration
/// listens beside this one while it drains (a restart that refuses no client). A
/// bound socket that does not listen takes no connection, so a reload can bind
/// everything it needs before any of it takes clients.
pub async fn bind(l: &Listener) -> Result<tokio::net::TcpSocket> {
    bind_socket(&l.name, &l.address, true).await
}

/// Connections the kernel queues for a listener before Sluice accepts them. A crowd of
/// clients connecting at once (a thousand workers starting) must not find the queue full:
/// their SYNs would be dropped and retried after 1, 2, 4 ... seconds. (The kernel caps it
/// at net.core.somaxconn.)
const BACKLOG: u32 = 4096;

/// Binds `address` for the listener called `name` and listens (see [`bind_socket`]).
pub async fn bind_address(name: &str, address: &str, reuse_port: bool) -> Result<TcpListener> {
    let socket = bind_socket(name, address, reuse_port).await?;
    listen(name, socket, reuse_port)
}

/// Binds `address` for the listener called `name` (fails with both in the message): the
/// first of its resolved addresses that binds, with SO_REUSEADDR as std does, and
/// SO_REUSEPORT when asked.
pub async fn bind_socket(
    name: &str,
    address: &str,
    reuse_port: bool,
) -> Result<tokio::net::TcpSocket> {
    let ctx = || format!("listener \"{name}\": cannot listen on {address}");
    let mut last = None;
    for addr in tokio::net::lookup_host(address).await.with_context(ctx)? {
        if reuse_port && addr.port() != 0 && someone_listens(addr).await {
            tracing::warn!(listener = %name, %addr, "another process listens on this address (the Sluice this one replaces?): both listen now, and new clients come here");
        }
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        };
        let bound = socket.and_then(|s| {
            s.set_reuseaddr(true)?;
            if reuse_port {
                s.set_reuseport(true)?;
            }
            s.bind(addr)?;
            Ok(s)
        });
        match bound {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => anyhow::Error::new(e).context(ctx()),
        None => anyhow::anyhow!("{}: the address resolves to nothing", ctx()),
    })
}

/// Starts listening on a bound socket; from now on it takes connections.
pub fn listen(name: &str, socket: tokio::net::TcpSocket, reuse_port: bool) -> Result<TcpListener> {
    let l = socket
        .listen(BACKLOG)
        .with_context(|| format!("listener \"{name}\": cannot listen"))?;
    if reuse_port {
        newest_takes_new_clients(&l);
    }
    Ok(l)
}

/// Whether a connection to `addr` is accepted (SO_REUSEPORT would let a second Sluice
/// started by mistake share the port silently: it is said in the log).
async fn someone_listens(addr: std::net::SocketAddr) -> bool {
    let probe = tokio::net::TcpStream::connect(addr);
    matches!(
        tokio::time::timeout(std::time::Duration::from_millis(200), probe).await,
        Ok(Ok(_))
    )
}

/// A restart that refuses no client: the listening sockets of one address form a
/// SO_REUSEPORT group, in the order they started listening (a process that leaves
/// hands its place to the last). This program sends every new connection to the
/// second socket of the group: while a new Sluice runs beside the one it replaces, the
/// new one gets them all, so the old one's queue is empty when it stops listening
/// (closing a listening socket resets the connections still queued on it). With one
/// socket the index is out of range and the kernel picks as usual (that one).
#[cfg(target_os = "linux")]
fn newest_takes_new_clients(l: &TcpListener) {
    use std::os::fd::AsRawFd;
    // BPF_RET | BPF_K: return 1.
    let mut program = [libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 1,
    }];
    let fprog = libc::sock_fprog {
        len: 1,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: the descriptor is the listener's open socket, and `fprog` points at a
    // program that lives through the call (the kernel copies it).
    let r = unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "SO_ATTACH_REUSEPORT_CBPF refused: restarts share new clients between the two processes");
    }
}

#[cfg(not(target_os = "linux"))]
fn newest_takes_new_clients(_: &TcpListener) {}

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

/// A listener's context, replaced by a reload (TLS files read again, settings changed)
/// while the socket stays: each client takes the one current when it arrives.
pub type SwappableCtx = Arc<arc_swap::ArcSwap<ListenerCtx>>;

/// Accepts until shutdown or until `stop` (a reload removed the listener); client
/// tasks go into `tasks`.
pub async fn serve(
    shared: Arc<Shared>,
    socket: TcpListener,
    ctx: SwappableCtx,
    tasks: TaskTracker,
    stop: CancellationToken,
) {
    let name = ctx.load().cfg.name.clone();
    let relays = tasks.clone();
    accept(
        shared,
        socket,
        (&name, stop),
        tasks,
        move |shared, tcp, slot| {
            let ctx = ctx.load_full();
            let protocol = ctx.cfg.protocol;
            let a = frontend::Accepted {
                shared,
                ctx,
                tcp,
                slot,
                tasks: relays.clone(),
            };
            // The protocol's future is the task itself: no async block around it that
            // would keep the accepted client a second time for the client's whole life.
            match protocol {
                Protocol::Postgres => Either::Left(frontend::pg::serve(a)),
                Protocol::Mysql => Either::Right(frontend::mysql::serve(a)),
            }
        },
    )
    .await
}

/// Accepts clients of a HandlerSocket listener until shutdown.
pub async fn serve_hs(
    shared: Arc<Shared>,
    socket: TcpListener,
    ctx: Arc<frontend::hs::HsCtx>,
    tasks: TaskTracker,
    stop: CancellationToken,
) {
    let name = ctx.cfg.name.clone();
    accept(
        shared,
        socket,
        (&name, stop),
        tasks,
        move |shared, tcp, slot| frontend::hs::serve(shared, ctx.clone(), tcp, slot),
    )
    .await
}

/// Accepts clients of the MySQL-protocol admin console until shutdown (not under the
/// client cap: an operator must get in when clients have taken every slot).
pub async fn serve_admin_mysql(shared: Arc<Shared>, socket: TcpListener, tasks: TaskTracker) {
    let stop = CancellationToken::new();
    let name = ("admin_mysql", stop);
    accept(shared, socket, name, tasks, move |shared, tcp, slot| {
        let seat = crate::shared::ConsoleSeat::take(&shared, slot);
        frontend::mysql::admin::serve(shared, tcp, seat)
    })
    .await
}

/// The accept loop of every listener: Nagle off, the process-wide client cap, one task
/// per client made by `client`.
async fn accept<F, Fut>(
    shared: Arc<Shared>,
    socket: TcpListener,
    (name, stop): (&str, CancellationToken),
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
            _ = stop.cancelled() => {
                tracing::info!(listener = %name, "listener removed: no new clients; its clients finish");
                break;
            }
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
