//! MySQL/MariaDB frontend: the client side of the protocol. Sends the greeting, runs the
//! TLS upgrade and authentication, gets the client a server connection through the
//! router and pool, then hands the session to the relay loop.

mod auth;
mod change_user;
mod clock;
mod kill;
mod login;
mod muxed;
mod passthrough;
mod relay;
mod route;
mod rsa;
mod state;
mod stmts;

use crate::error::{Error, Kind};
use crate::stream::{Stream, send_with};
use bytes::BytesMut;
use sluice_wire_mysql::{consts, packet, resp};
use std::sync::Arc;

/// What MySQL clients of one Sluice instance share: the servers' greetings (for
/// greeting clients of configured users), the users who completed caching_sha2's full
/// authentication (their next logins take the fast path), and the RSA key.
#[derive(Default)]
pub struct SharedState {
    pub greetings: parking_lot::Mutex<
        std::collections::HashMap<String, Arc<sluice_wire_mysql::handshake::HandshakeV10>>,
    >,
    pub sha2_cache: parking_lot::Mutex<std::collections::HashSet<String>>,
    pub rsa: std::sync::OnceLock<Option<rsa::RsaKey>>,
    /// Every client by the connection id Sluice gave it, for KILL.
    pub clients: Arc<kill::Clients>,
}

/// A client connection and the bytes read from it but not yet handled.
pub struct Client {
    pub stream: Stream,
    pub buf: BytesMut,
    /// Capabilities agreed with the client (0 before its HandshakeResponse).
    pub caps: u64,
    /// The compressed protocol the client asked for, started once it is logged in.
    pub compress: Option<sluice_wire_mysql::compress::Framer>,
}

/// The MySQL error code and SQLSTATE a client sees for one of Sluice's errors.
pub fn error_code(e: &Error) -> (u16, &'static str) {
    if e.sqlstate == Some("08001") {
        // No server can take the client's route (no primary, none healthy): what a
        // client gets when it cannot reach a server.
        return (consts::CR_CONN_HOST_ERROR, "HY000");
    }
    match e.kind {
        Kind::Auth => (consts::ER_ACCESS_DENIED_ERROR, "28000"),
        Kind::PoolTimeout => (consts::ER_CON_COUNT_ERROR, "08004"),
        Kind::Protocol => (consts::ER_UNKNOWN_COM_ERROR, "08S01"),
        Kind::Unsupported => (1235, "42000"),
        Kind::Shutdown => (1053, "08S01"),
        Kind::ServerGone | Kind::Desync | Kind::Io => (consts::CR_SERVER_LOST, "HY000"),
    }
}

/// Queues an ERR packet for `e` with sequence id `seq`.
pub fn queue_error(out: &mut BytesMut, seq: u8, e: &Error) {
    let (code, state) = error_code(e);
    queue_err(out, seq, code, state, &e.message);
}

pub fn queue_err(out: &mut BytesMut, seq: u8, code: u16, state: &str, msg: &str) {
    let mut payload = Vec::new();
    let state: &[u8; 5] = state.as_bytes().try_into().unwrap_or(b"HY000");
    resp::encode_err(&mut payload, code, state, msg.as_bytes());
    let mut seq = seq;
    packet::write_packet(out, &mut seq, &payload);
}

impl Client {
    /// After the OK that ends its login: switches to the compressed protocol if the
    /// client asked for it. What it sent since is compressed already.
    pub fn start_compression(self) -> Client {
        let Some(framer) = self.compress else {
            return self;
        };
        tracing::debug!(
            algorithm = framer.alg.name(),
            "client uses the compressed protocol"
        );
        Client {
            stream: crate::stream::compress(self.stream, framer, self.buf),
            buf: BytesMut::new(),
            caps: self.caps,
            compress: None,
        }
    }

    /// Sends an error and gives up on the client (best effort: it may be gone).
    pub async fn fatal(&mut self, seq: u8, e: &Error) {
        send_with(&mut self.stream, |out| queue_error(out, seq, e)).await;
    }

    /// Sends an ERR with an explicit code and gives up on the client.
    pub async fn fatal_code(&mut self, seq: u8, code: u16, state: &str, msg: &str) {
        send_with(&mut self.stream, |out| {
            queue_err(out, seq, code, state, msg)
        })
        .await;
    }
}

pub async fn serve(a: crate::frontend::Accepted) {
    crate::frontend::admit_then_relay(a.shared.clone(), || admit(a), relay::run).await;
}

/// Greeting and login: the logged-in client, or None when the connection ended here.
async fn admit(
    a: crate::frontend::Accepted,
) -> Option<(login::Session, Client, crate::shared::ClientSlot)> {
    let mut client = Client {
        stream: Stream::Plain(a.tcp),
        buf: BytesMut::new(),
        caps: consts::CLIENT_PROTOCOL_41,
        compress: None,
    };
    let (shared, ctx) = (a.shared, a.ctx);
    let Some(slot) = a.slot else {
        let e = Error::new(
            Kind::PoolTimeout,
            crate::error::Side::Client,
            "Too many connections",
        );
        client.fatal(0, &e).await;
        return None;
    };
    // A client that stalls during login must not hold its slot for ever.
    let limit = shared.config.load().general.client_login_timeout;
    let login = login::login(&shared, &ctx, client);
    let Ok(Some((session, client))) = tokio::time::timeout(limit, login).await else {
        tracing::debug!("client did not finish its login in time");
        return None;
    };
    Some((session, client, slot))
}
