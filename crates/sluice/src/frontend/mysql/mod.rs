//! MySQL/MariaDB frontend: the client side of the protocol. Sends the greeting, runs the
//! TLS upgrade and authentication, gets the client a server connection through the
//! router and pool, then hands the session to the relay loop.

pub mod admin;
mod auth;
mod login;
mod lookup;
mod passthrough;
mod readmit;
mod rsa;

use crate::error::{Error, Kind};
use crate::session::mysql::errors::{queue_err, queue_error, queue_error_before_greeting};
use crate::stream::{Stream, send_with};
use bytes::BytesMut;
use sluice_wire_mysql::consts;
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
    pub clients: Arc<crate::session::mysql::kill::Clients>,
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
        if seq == 0 {
            // Instead of the greeting: nothing agreed yet, no SQLSTATE.
            send_with(&mut self.stream, |out| queue_error_before_greeting(out, e)).await;
            return;
        }
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

/// Not itself async (as `session::mysql::run`): the accepted client is kept once, by the
/// admission phase, not also by a future of this function's.
pub fn serve(a: crate::frontend::Accepted) -> impl Future<Output = ()> + Send + use<> {
    crate::frontend::admit_then_relay(
        a.shared.clone(),
        a.tasks.clone(),
        move || admit(a),
        |shared, s, c: Client| crate::session::mysql::run(shared, s, c.stream, c.buf, c.caps),
    )
}

/// Greeting and login: the logged-in client, or None when the connection ended here.
async fn admit(
    a: crate::frontend::Accepted,
) -> Option<(
    crate::session::mysql::Admitted,
    Client,
    crate::shared::ClientSlot,
)> {
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
