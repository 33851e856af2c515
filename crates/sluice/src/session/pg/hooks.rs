//! The PostgreSQL relay's hooks for the session driver (session/driver.rs).

use super::Relay;
use crate::backend::pg::{Opener, ServerConn};
use crate::error::{Error, Kind, Side};
use crate::session::TxStatus;
use crate::session::driver::{self, End};
use crate::session::timeouts::Expired;
use crate::shared::Shared;
use sluice_config::PoolMode;
use sluice_wire_pg::encode::Severity;

impl driver::Relay for Relay {
    type Conn = ServerConn;

    fn pools(shared: &Shared) -> &crate::pool::Pools<ServerConn> {
        &shared.pg.pools
    }

    fn retarget(op: &Opener, target: crate::backend::Target) -> Opener {
        Opener {
            target,
            params: op.params.clone(),
            creds: op.creds.clone(),
        }
    }

    fn newer_login(op: &Opener, than: &Opener) -> bool {
        op.creds.newer_than(&than.creds)
    }

    fn id(&self) -> u32 {
        self.s.cancel.key.0 as u32
    }

    async fn on_client(&mut self) -> Result<(), End> {
        if self.s.cancel.slot.terminated() {
            // pg_terminate_backend shut the socket for reading, which may still have
            // handed over what the client sent after: it is not run.
            self.core.io.cbuf.clear();
            return Err(self.client_closed());
        }
        self.client_step().await
    }

    fn on_server(&mut self) -> Result<bool, End> {
        self.on_server_frames().map_err(End::Failed)?;
        self.fatal_check().map(|()| false)
    }

    async fn resume(&mut self) -> Result<(), End> {
        Ok(())
    }

    async fn answered(
        &mut self,
        answer: &crate::mux::Answer,
        done: Result<Vec<u8>, Error>,
    ) -> Result<(), End> {
        if let Some(hash) = self.muxed_stmt.take()
            && answer.stale()
        {
            self.core.pool.statement_stale(u128::from_le_bytes(hash));
        }
        self.sync_cancel();
        let mut outcome = answer.outcome();
        outcome.error |= done.is_err();
        crate::session::judge::digest_done(&mut self.core, crate::session::judge::SHARED, outcome);
        match done {
            Err(e) if crate::session::lost::outlives_shared_loss(self, answer, &e) => {
                // A shared round always ends with ReadyForQuery.
                self.client_error(Severity::Error, &e);
                sluice_wire_pg::encode::ready_for_query(&mut self.core.io.to_client, b'I');
            }
            done => {
                done.map_err(End::Failed)?;
            }
        }
        self.client_step().await
    }

    fn rest(&mut self) {
        if let Some(q) = self.tracker.release() {
            crate::stream::spare::keep(&super::TRACKER_SPARES, q);
        }
        self.actions.shed_to(&super::ACTION_SPARES);
        self.settle_rare();
    }

    fn between(&mut self) {
        if self.at_rest && self.rare.as_ref().is_some_and(|r| r.signals.is_some()) {
            self.settle_signals();
        }
    }

    fn in_flight(&self) -> bool {
        !self.at_rest
    }

    fn awaits_answer(&self) -> bool {
        // (ReadyForQuery sets it, whatever is still to be written.)
        !self.at_rest
    }

    fn between_requests(&self) -> bool {
        self.tracker.is_idle()
    }

    fn idle(&self) -> bool {
        self.core.muxed.is_none()
            && (self.core.lease.is_none()
                || (self.at_rest && self.status == b'I' && self.core.io.to_server.is_empty()))
    }

    fn tx_status(&self) -> TxStatus {
        TxStatus::from_pg(self.status)
    }

    fn holds(&self) -> bool {
        self.cscan.in_frame()
    }

    fn lease_moved(&mut self) {
        self.sync_cancel();
    }

    fn forget_server(&mut self) {
        self.tracker = sluice_wire_pg::track::Tracker::new();
        self.actions.clear();
        self.sscan = sluice_wire_pg::Scanner::default();
        self.s_dropping = false;
        self.status = b'I';
        if self.aborted() {
            self.status = b'E';
            self.tracker.set_status(b'E');
        }
        self.at_rest = true;
        self.unnamed_here = false;
        self.stale_error = false;
        self.muxed_stmt = None;
        self.round_left = 0;
    }

    fn server_may_close(&self) -> bool {
        self.server_fatal
    }

    fn lost(&self, e: Option<std::io::Error>) -> Error {
        match e {
            None => Error::server_gone("server closed the connection unexpectedly"),
            Some(e) => Error::server_gone(format!("lost connection to server: {e}")),
        }
    }

    fn fail_in_flight(&mut self, e: &Error) -> bool {
        let terminated = self.s.cancel.slot.ending();
        if terminated || self.sscan.in_frame() && !self.s_dropping || self.cscan.in_frame() {
            return false;
        }
        let mut err = bytes::BytesMut::new();
        sluice_wire_pg::encode::error(&mut err, Severity::Error, e.sqlstate(), &e.message);
        // A transaction the client had open is kept as a failed one (aborted.rs).
        let in_tx = self.status != b'I';
        let status = if in_tx { b'E' } else { b'I' };
        let out = &mut self.core.io.to_client;
        let Some(skip) = self.tracker.fail_all(out, &err, status) else {
            return false;
        };
        self.handle_done();
        self.skip_to_sync |= skip;
        self.ledger_in_tx = false;
        self.status = b'I';
        if in_tx {
            self.abort_transaction(None);
        }
        true
    }

    fn client_closed(&self) -> End {
        if self.s.cancel.slot.terminated() {
            // Another client's pg_terminate_backend (see pids.rs).
            return End::Failed(Error::new(
                Kind::Shutdown,
                Side::Server,
                "terminating connection due to administrator command",
            ));
        }
        End::ClientLeft
    }

    fn cancel_query(&mut self) {
        // As the client's own CancelRequest would (see mod.rs).
        let (pid, secret) = self.s.cancel.key;
        let shared = self.core.shared.clone();
        tokio::spawn(async move { super::cancel::cancel(&shared, pid, secret).await });
    }

    fn idle_timeout(&mut self, which: Expired) -> End {
        let (code, message) = match which {
            Expired::IdleInTransaction => (
                "25P03",
                "terminating connection due to idle-in-transaction timeout",
            ),
            _ => (
                "57P05",
                "terminating connection due to idle-session timeout",
            ),
        };
        End::Failed(Error::new(Kind::Protocol, Side::Client, message).with_sqlstate(code))
    }

    fn last_word(&mut self, end: &End) {
        match end {
            End::Failed(e) => self.client_error(Severity::Fatal, e),
            End::Shutdown => {
                let e = Error::new(
                    Kind::Shutdown,
                    Side::Internal,
                    "terminating connection due to administrator command",
                );
                self.client_error(Severity::Fatal, &e);
            }
            _ => {}
        }
    }

    fn clean(&self) -> bool {
        self.core.io.to_server.is_empty() && !self.sscan.in_frame()
    }

    fn needs_reset(&self) -> bool {
        self.core.mode == PoolMode::Session || self.status != b'I' || self.core.ledger.is_pinned()
    }
}
