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
    /// Woken when a connection cannot be opened (refused, timed out): the server's
    /// health checker, which looks at once rather than at its next interval. (None
    /// for the checker's own connections.)
    pub unreachable: Option<std::sync::Arc<tokio::sync::Notify>>,
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
            unreachable: None,
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
    pub key: LoginKey,
    /// When a client's login proved them (pass-through users of a listener with
    /// `auth_user`): after a password change the newest win. `None`: configured.
    pub proven: Option<std::time::Instant>,
}

impl Credentials {
    /// A user with a plaintext password, or none.
    pub fn password(user: impl Into<String>, password: Option<String>) -> Credentials {
        Credentials {
            user: user.into(),
            key: password.map_or(LoginKey::None, LoginKey::Password),
            proven: None,
        }
    }

    /// What a client's login just proved for `user`.
    pub fn proven(user: impl Into<String>, key: LoginKey) -> Credentials {
        Credentials {
            user: user.into(),
            key,
            proven: Some(std::time::Instant::now()),
        }
    }

    /// Whether these were proven after `other` (a pool keeps the newest).
    pub fn newer_than(&self, other: &Credentials) -> bool {
        self.proven > other.proven
    }

    /// A configured user's server login: its `server_user` with its server password
    /// (plaintext, or an md5 hash for PostgreSQL servers; validation refuses the forms
    /// that cannot log in).
    pub fn of_user(u: &sluice_config::User) -> Credentials {
        use sluice_config::Secret;
        let key = match u.server_secret() {
            Some(Secret::Plain(p)) => LoginKey::Password(p.clone()),
            Some(s @ Secret::Md5 { .. }) => LoginKey::PgMd5(s.to_config_string()),
            _ => LoginKey::None,
        };
        Credentials {
            user: u.server_user().to_owned(),
            key,
            proven: None,
        }
    }
}

/// What Sluice proves a user's identity to a server with: the password, or what a
/// stored secret and a client's proof of the password leave Sluice (pass-through users
/// of a listener with `auth_user`, and md5 `server_password`s). `Debug` shows the form
/// only.
#[derive(Clone, Default)]
pub enum LoginKey {
    /// Nothing: the server must not ask (trust).
    #[default]
    None,
    Password(String),
    /// PostgreSQL's stored md5 hash (`md5` + hex of md5(password ‖ user)), which answers
    /// md5 challenges.
    PgMd5(String),
    /// PostgreSQL SCRAM-SHA-256: the ClientKey a client's proof yielded and the
    /// verifier's ServerKey (to check the server's proof in turn).
    Scram {
        client_key: [u8; 32],
        server_key: [u8; 32],
    },
    /// MySQL mysql_native_password: SHA1(password), recovered from a client's reply.
    NativeSha1([u8; 20]),
}

impl LoginKey {
    /// The form, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            LoginKey::None => "no password",
            LoginKey::Password(_) => "a password",
            LoginKey::PgMd5(_) => "an md5 hash",
            LoginKey::Scram { .. } => "a SCRAM-SHA-256 key",
            LoginKey::NativeSha1(_) => "a mysql_native_password key",
        }
    }
}

impl std::fmt::Debug for LoginKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoginKey({})", self.kind())
    }
}

/// The first row of the answer to a query of Sluice's own (each column as text, `None`
/// for NULL), `Ok(None)` when there is none, or the server's error message.
pub type Row = std::result::Result<Option<Vec<Option<String>>>, String>;

/// A server connection that runs a lookup (auth_query) with its parameters bound.
pub trait Lookup {
    fn query_row(&mut self, sql: &str, params: &[&str])
    -> impl Future<Output = Result<Row>> + Send;
}

/// Runs a lookup (auth_query) on a leased connection, given back when it answered and
/// discarded when it failed (its state is unknown then): the first row's columns, None
/// when there is none, or what went wrong.
pub async fn lookup<C: crate::pool::PoolConn + Lookup>(
    mut lease: crate::pool::Lease<C>,
    sql: &str,
    params: &[&str],
) -> std::result::Result<Option<Vec<Option<String>>>, String> {
    match lease.query_row(sql, params).await {
        Ok(row) => {
            lease.put_back();
            row.map_err(|e| format!("auth_query failed: {e}"))
        }
        Err(e) => {
            lease.discard();
            Err(e.to_string())
        }
    }
}

/// A failed login (defined with the pool, which hands it on to whoever waits).
pub use crate::pool::LoginError;

/// TCP connect with the target's timeout; Nagle off.
pub async fn connect_tcp(t: &Target) -> Result<TcpStream> {
    let addr = t.addr();
    let tcp = match tokio::time::timeout(t.connect_timeout, TcpStream::connect(&addr)).await {
        Ok(Ok(tcp)) => tcp,
        failed => {
            if let Some(checker) = &t.unreachable {
                checker.notify_one();
            }
            return Err(Error::server_gone(match failed {
                Ok(Err(e)) => format!("could not connect to server {addr}: {e}"),
                _ => format!("connecting to {addr} timed out"),
            }));
        }
    };
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}
