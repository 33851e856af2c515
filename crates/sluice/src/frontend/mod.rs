//! The client side of each protocol: startup, TLS, authentication, reading whole
//! requests and relaying answers. Everything below (session, router, pool) is shared.

pub mod hs;
pub mod mysql;
pub mod pg;
pub mod pump;

/// A client connection just accepted, handed to its protocol's frontend.
pub struct Accepted {
    pub shared: std::sync::Arc<crate::shared::Shared>,
    pub ctx: std::sync::Arc<ListenerCtx>,
    pub tcp: tokio::net::TcpStream,
    /// The client's place under the process-wide cap; `None` when the cap is reached
    /// (the frontend refuses the client in its protocol).
    pub slot: Option<crate::shared::ClientSlot>,
}

/// What a frontend needs to know about the listener a client came in on.
pub struct ListenerCtx {
    pub cfg: sluice_config::Listener,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub clients: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}
