//! PostgreSQL frontend: the client side of the protocol. Runs the startup phase and
//! authentication, gets the client a server connection through the router and pool,
//! then hands the session to the relay loop.

mod admin;
mod auth;
mod login;
mod lookup;
mod startup;

use crate::error::Error;
use crate::stream::{Stream, send_with};
use bytes::BytesMut;
use sluice_wire_pg::encode::{self, Severity};

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

/// Not itself async (as `session::pg::run`): the accepted client is kept once, by the
/// admission phase, not also by a future of this function's.
pub fn serve(a: crate::frontend::Accepted) -> impl Future<Output = ()> + Send + use<> {
    crate::frontend::admit_then_relay(
        a.shared.clone(),
        a.tasks.clone(),
        move || admit(a),
        |shared, s, c: Client| crate::session::pg::run(shared, s, c.stream, c.buf),
    )
}

/// Startup, cancel requests and login: the logged-in client, or None when the
/// connection ended here.
async fn admit(
    a: crate::frontend::Accepted,
) -> Option<(
    crate::session::pg::Admitted,
    Client,
    crate::shared::ClientSlot,
)> {
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
            crate::session::pg::cancel::cancel(&shared, pid, secret).await;
            drop(stream);
            None
        }
        startup::Start::Startup {
            stream,
            params,
            version,
        } => {
            let mut client = Client { stream, buf };
            if admin::wanted(&shared, &params) {
                // The console: not under the client cap (an operator must get in when
                // clients have taken every slot), and not a session.
                let Some(_seat) = crate::shared::ConsoleSeat::take(&shared, slot) else {
                    let e = Error::new(
                        crate::error::Kind::PoolTimeout,
                        crate::error::Side::Client,
                        "too many admin console connections",
                    );
                    client.fatal(&e).await;
                    return None;
                };
                let login = admin::login(&shared, &ctx, &mut client, &params);
                if let Ok(true) = tokio::time::timeout_at(deadline, login).await {
                    admin::serve(shared, client).await;
                }
                return None;
            }
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
