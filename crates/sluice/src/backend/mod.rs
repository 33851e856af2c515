//! The server side of each protocol: log in to a server, forward frames, reset a
//! connection before another client gets it. Below the pool in the flow; knows nothing
//! of clients.

pub mod mysql;
pub mod pg;

use crate::error::{Error, Result};
use sluice_config::ServerTls;
use std::time::Duration;
use tokio::net::TcpStream;

/// Where and how to reach one server.
#[derive(Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub tls: ServerTls,
    pub connector: Option<tokio_rustls::TlsConnector>,
    pub server_name: String,
    pub connect_timeout: Duration,
    pub max_message: usize,
    /// MySQL: the compressed protocol asked of the server (`[servers] compression`).
    pub compression: sluice_config::Compression,
    /// The server's connection budget (see pool/budget.rs), and how long an opener
    /// waits for room in it.
    pub budget: Option<std::sync::Arc<crate::pool::budget::ServerBudget>>,
    pub budget_wait: Duration,
    /// The pool's `query_timeout`, where the server enforces it itself (MySQL).
    pub statement_timeout: Option<Duration>,
}

impl Target {
    /// How to reach `server` (with its TLS connector, if it uses TLS).
    pub fn for_server(
        server: &sluice_config::Server,
        connector: Option<tokio_rustls::TlsConnector>,
        connect_timeout: Duration,
        max_message: usize,
    ) -> Target {
        Target {
            host: server.host.clone(),
            port: server.port,
            tls: server.tls,
            connector,
            server_name: server.tls_server_name.clone(),
            connect_timeout,
            max_message,
            compression: server.compression,
            budget: None,
            budget_wait: connect_timeout,
            statement_timeout: None,
        }
    }

    /// Takes room for one more connection to the server (see pool/budget.rs).
    pub async fn permit(&self) -> Result<crate::pool::budget::Permit> {
        crate::pool::budget::permit(self.budget.as_ref(), self.budget_wait).await
    }

    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Where the next connection of a long-lived user of servers (the key-value executor)
/// goes: asked at every connect, so it follows the topology.
pub type Targets = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Target>> + Send>>
        + Send
        + Sync,
>;

/// Credentials Sluice uses to log in by itself.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: Option<String>,
}

/// A failed login (defined with the pool, which hands it on to whoever waits).
pub use crate::pool::LoginError;

/// TCP connect with the target's timeout; Nagle off.
pub async fn connect_tcp(t: &Target) -> Result<TcpStream> {
    let addr = t.addr();
    let tcp = tokio::time::timeout(t.connect_timeout, TcpStream::connect(&addr))
        .await
        .map_err(|_| Error::server_gone(format!("connecting to {addr} timed out")))?
        .map_err(|e| Error::server_gone(format!("could not connect to server {addr}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}
