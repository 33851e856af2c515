//! PostgreSQL frontend: the client side of the protocol. Runs the startup phase and
//! authentication, gets the client a server connection through the router and pool,
//! then hands the session to the relay loop.

mod auth;
mod login;
mod muxed;
mod pids;
mod relay;
mod relay_client;
mod relay_server;
mod replay;
mod route;
mod startup;
mod stmts;

use crate::error::Error;
use crate::shared::Shared;
use crate::stream::{Stream, send_with, write_all_flush};
use bytes::BytesMut;
use sluice_wire_pg::encode::{self, Severity};
use tokio::net::TcpStream;

/// A client connection and the bytes read from it but not yet handled.
pub struct Client {
    pub stream: Stream,
    pub buf: BytesMut,
}

impl Client {
    /// Sends a FATAL error in the client's protocol (best effort: it may be gone).
    pub async fn fatal(&mut self, e: &Error) {
        let (code, msg) = (e.sqlstate(), &e.message);
        send_with(&mut self.stream, |out| {
            encode::error(out, Severity::Fatal, code, msg)
        })
        .await;
    }
}

pub async fn serve(a: crate::frontend::Accepted) {
    crate::frontend::admit_then_relay(a.shared.clone(), || admit(a), relay::run).await;
}

/// Startup, cancel requests and login: the logged-in client, or None when the
/// connection ended here.
async fn admit(
    a: crate::frontend::Accepted,
) -> Option<(login::Session, Client, crate::shared::ClientSlot)> {
    let (shared, ctx, slot) = (a.shared, a.ctx, a.slot);
    let stream = Stream::Plain(a.tcp);
    // A client that stalls during login (however slowly it trickles bytes) must not hold
    // its slot for ever: the whole login has client_login_timeout.
    let deadline = tokio::time::Instant::now() + shared.config.load().general.client_login_timeout;
    let negotiated = match tokio::time::timeout_at(deadline, startup::negotiate(&ctx, stream)).await
    {
        Ok(n) => n,
        Err(_) => {
            tracing::debug!("client did not finish its startup in time");
            return None;
        }
    };
    let (start, buf) = match negotiated {
        Ok(s) => s,
        Err((e, stream)) => {
            tracing::debug!(error = %e, "startup failed");
            if let Some(stream) = stream {
                Client {
                    stream,
                    buf: BytesMut::new(),
                }
                .fatal(&e)
                .await;
            }
            return None;
        }
    };
    match start {
        startup::Start::Cancel {
            stream,
            pid,
            secret,
        } => {
            cancel(&shared, pid, secret).await;
            drop(stream);
            None
        }
        startup::Start::Startup {
            stream,
            params,
            version,
        } => {
            let mut client = Client { stream, buf };
            let Some(slot) = slot else {
                let e = Error::new(
                    crate::error::Kind::PoolTimeout,
                    crate::error::Side::Client,
                    "sorry, too many clients already",
                );
                client.fatal(&e).await;
                return None;
            };
            let login = login::login(&shared, &ctx, &mut client, params, version);
            let Ok(Some(session)) = tokio::time::timeout_at(deadline, login).await else {
                return None;
            };
            Some((session, client, slot))
        }
    }
}

/// Sends a client's CancelRequest on to the server connection it is using now, and
/// returns once the server has acted on it (closed the cancel connection), so the
/// client's cancel connection, closed after this, ends when it would directly.
async fn cancel(shared: &Shared, pid: i32, secret: i32) {
    let Some(key) = shared.cancels.lookup(pid, secret) else {
        tracing::debug!(pid, "cancel request for an unknown or idle client");
        return;
    };
    let mut out = BytesMut::new();
    encode::cancel_request(&mut out, key.pid, key.secret);
    let connect = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        TcpStream::connect(&*key.addr),
    );
    match connect
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
    {
        Ok(tcp) => {
            // From here until the server has acted on the request, the connection runs
            // nothing new (see cancel.rs). In transaction mode it may have gone to
            // another client while connecting: cancel only if the client still uses it.
            let _in_flight = key.cancelling();
            if shared.cancels.lookup(pid, secret).as_ref() != Some(&key) {
                return;
            }
            let mut s = Stream::Plain(tcp);
            if let Err(e) = write_all_flush(&mut s, &out).await {
                tracing::debug!(error = %e, "sending cancel failed");
            }
            // The server closes the connection once it has signalled the backend.
            let mut b = [0u8; 1];
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tokio::io::AsyncReadExt::read(&mut s, &mut b),
            )
            .await;
        }
        Err(e) => tracing::debug!(error = %e, addr = %key.addr, "cancel: cannot reach server"),
    }
}
