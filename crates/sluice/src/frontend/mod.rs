//! The client side of each protocol: startup, TLS, authentication, reading whole
//! requests and relaying answers. Everything below (session, router, pool) is shared.

pub mod mysql;
pub mod pg;
pub mod pump;

/// What a frontend needs to know about the listener a client came in on.
pub struct ListenerCtx {
    pub cfg: sluice_config::Listener,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub clients: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}
