//! The client side of each protocol: startup, TLS, authentication, reading whole
//! requests and relaying answers. Everything below (session, router, pool) is shared.

pub mod hs;
pub mod mysql;
pub mod pg;

/// A client connection just accepted, handed to its protocol's frontend.
pub struct Accepted {
    pub shared: std::sync::Arc<crate::shared::Shared>,
    pub ctx: std::sync::Arc<ListenerCtx>,
    pub tcp: tokio::net::TcpStream,
    /// The client's place under the process-wide cap; `None` when the cap is reached
    /// (the frontend refuses the client in its protocol).
    pub slot: Option<crate::shared::ClientSlot>,
    /// Where the client's relay task goes once it is logged in.
    pub tasks: tokio_util::task::TaskTracker,
}

/// A client's life in two phases: admission (startup, TLS, login: large, short-lived
/// state, in a box freed once done) and the relay, a task of its own spawned into
/// `tasks` once the client is logged in. The relay's state then sits in its task's own
/// allocation (tokio's task cell), with nothing else around it: one allocation for the
/// whole idle session, not a cell plus a box. (The phases come as functions: a future
/// passed in by value would sit in this one's state.)
pub async fn admit_then_relay<S, C, A, R>(
    shared: std::sync::Arc<crate::shared::Shared>,
    tasks: tokio_util::task::TaskTracker,
    admit: impl FnOnce() -> A,
    relay: impl FnOnce(std::sync::Arc<crate::shared::Shared>, S, C) -> R,
) where
    A: Future<Output = Option<(S, C, crate::shared::ClientSlot)>>,
    R: Future<Output = ()> + Send + 'static,
{
    let Some((session, client, slot)) = Box::pin(admit()).await else {
        return;
    };
    // The client's place under the cap goes with the relay, and is given back when it ends.
    let relay = relay(shared, session, client);
    // Its polls numbered: the relay skips asking again within one poll for a server
    // read that came back `Pending` (`crate::stream::polls`).
    let relay = futures_util::FutureExt::map(relay, move |()| drop(slot));
    // (The task's cell is 512 bytes: the relay's future, at most 392 bytes, and
    // tokio's 120 around it, in 128-byte steps; see session/mod.rs's test.)
    tasks.spawn(crate::stream::polls::Numbered::new(relay));
}

/// What a frontend needs to know about the listener a client came in on.
pub struct ListenerCtx {
    pub cfg: std::sync::Arc<sluice_config::Listener>,
    pub tls: Option<crate::stream::Acceptor>,
    pub clients: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// What the MySQL frontend's clients share, the same for every MySQL listener.
    pub mysql: std::sync::Arc<mysql::SharedState>,
}
