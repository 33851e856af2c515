//! A session whose server connection is lost, written once for both protocols.
//!
//! Nothing is sent twice that may have run, with one exception: a lone read outside a
//! transaction of which no answer byte reached the client goes once to another server
//! of the route ([`send_again`], kept by `driver::arm_retry`). Otherwise, a session
//! that can live on without that connection does (transaction mode, a pool that opens
//! its own connections, no pinned state): the requests it had in flight get an error
//! in the client's protocol (the protocol's `fail_in_flight`), as if the server had
//! refused them, and its next request is routed again (to the new primary after a
//! failover), with its session state replayed there as after any lease. A transaction
//! the client had open is gone: if no request of it was in flight, the client's next
//! request gets the error instead of running (`lost_tx`, session/odds.rs), so that a
//! client never carries on a transaction of which the first half was lost. Any other
//! session ends with the protocol's error.

use super::driver::{Core, End, Relay};
use super::{Ledger, TxStatus};
use crate::error::{Error, Kind};
use crate::pool::{Pool, PoolConn};
use sluice_config::PoolMode;

impl<C: PoolConn> Core<C> {
    /// Whether the session can go on when its server connection is lost.
    pub fn may_outlive_server(&self) -> bool {
        may_outlive(self.mode, &self.pool, &self.ledger)
    }
}

/// Whether a session can go on when its server connection is lost: in transaction
/// mode, with a pool that logs in by itself (so that it can reach another server), and
/// no state that only that connection held.
pub fn may_outlive<C: PoolConn>(mode: PoolMode, pool: &Pool<C>, ledger: &Ledger) -> bool {
    mode == PoolMode::Transaction && pool.can_open() && !ledger.is_pinned()
}

/// A failure of a server connection that says its server may be gone.
pub fn gone_server(e: &Error) -> bool {
    matches!(e.kind, Kind::ServerGone | Kind::Io)
}

/// A shared connection was lost (`e`) before any byte of the session's answer reached
/// the client, and the session outlives it: the protocol answers the request with `e`
/// and the session goes on (a read that may go again was sent again before this).
pub fn outlives_shared_loss<C: PoolConn>(
    core: &Core<C>,
    answer: &crate::mux::Answer,
    e: &Error,
) -> bool {
    gone_server(e) && !answer.delivered() && core.may_outlive_server()
}

/// The server connection was lost (`e`: how; None: it closed). A read that may go
/// again goes once to another server of the route; a session that may outlive its
/// server connection fails what it had in flight and goes on; anything else ends with
/// the protocol's error.
pub async fn server_lost<R: Relay>(r: &mut R, e: Option<std::io::Error>) -> Result<(), End> {
    if r.odds.retry.is_some() && r.lease.is_some() {
        return send_again(r).await;
    }
    let e = r.lost(e);
    if !r.may_outlive_server() || r.lease.is_none() {
        return Err(End::Failed(e));
    }
    let in_tx = r.tx_status() != TxStatus::Idle;
    let e = if in_tx {
        Error::server_gone(format!("{e}: the transaction was rolled back"))
    } else {
        e
    };
    let before = r.io.to_client.len();
    if !r.fail_in_flight(&e) {
        // Part of an answer is half through to the client, or an exchange the
        // protocol cannot break off cleanly (a COPY, an authentication) was under way.
        return Err(End::Failed(e));
    }
    // Whether the client was told anything (a request of its was in flight).
    let told = r.io.to_client.len() != before;
    let server = r.pool.key.server.clone();
    tracing::info!(client = r.id(), %server, error = %e, in_tx, told,
        "server connection lost: what was in flight failed, the session goes on");
    r.shared.topology.suspect(&server, &e);
    drop_server(r);
    r.ledger.end_transaction(false);
    if in_tx && !told {
        r.odds.make().lost_tx = Some(e);
    }
    if r.io.cbuf.is_empty() {
        return Ok(());
    }
    // A request waiting for Sluice's own step on that connection goes on.
    r.on_client().await
}

/// Lets go of the session's server connection after a loss: discarded, and all that
/// was expected of it forgotten.
fn drop_server<R: Relay>(r: &mut R) {
    if let Some(l) = r.lease.take() {
        l.discard();
    }
    r.lease_moved();
    r.forget_server();
    r.io.to_server.clear();
}

/// Sends the request kept by `driver::arm_retry` once more, as if the client had just
/// sent it: the connection it ran on is discarded and the route asked again, avoiding
/// that server (whose checker looks at once).
pub async fn send_again<R: Relay>(r: &mut R) -> Result<(), End> {
    let Some(request) = r.odds.take_retry() else {
        return Ok(());
    };
    let server = r.pool.key.server.clone();
    tracing::info!(client = r.id(), %server, "a read lost its server: sent once more elsewhere");
    r.shared.topology.check_now(&server);
    drop_server(r);
    r.route.avoid(&server);
    r.set_retried();
    let rest = r.io.cbuf.split();
    r.io.cbuf.extend_from_slice(&request);
    r.io.cbuf.unsplit(rest);
    r.on_client().await
}
