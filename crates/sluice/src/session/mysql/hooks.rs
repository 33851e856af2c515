//! The MySQL relay's hooks for the session driver (session/driver.rs).

use super::Relay;
use super::errors::queue_error;
use crate::backend::mysql::{Opener, ServerConn};
use crate::error::{Error, Kind, Side};
use crate::session::TxStatus;
use crate::session::driver::{self, End};
use crate::session::timeouts::Expired;
use crate::shared::Shared;

impl driver::Relay for Relay {
    type Conn = ServerConn;

    fn pools(shared: &Shared) -> &crate::pool::Pools<ServerConn> {
        &shared.my.pools
    }

    fn retarget(op: &Opener, target: crate::backend::Target) -> Opener {
        Opener {
            target,
            creds: op.creds.clone(),
            database: op.database.clone(),
            caps: op.caps,
            charset: op.charset,
        }
    }

    fn newer_login(op: &Opener, than: &Opener) -> bool {
        op.creds.newer_than(&than.creds)
    }

    fn id(&self) -> u32 {
        self.s.id
    }

    async fn on_client(&mut self) -> Result<(), End> {
        self.on_client_packets().await
    }

    fn on_server(&mut self) -> Result<bool, End> {
        self.on_server_packets()?;
        // Sluice's own prepare is answered, or the answers a pipelined command waited
        // for: the command waiting goes on.
        Ok(std::mem::take(&mut self.resume) || self.rested())
    }

    async fn resume(&mut self) -> Result<(), End> {
        self.on_client_packets().await
    }

    async fn answered(
        &mut self,
        answer: &crate::mux::Answer,
        done: Result<Vec<u8>, Error>,
    ) -> Result<(), End> {
        let done = match done {
            Err(e) if crate::session::lost::outlives_shared_loss(self, answer, &e) => {
                // Sluice's own prepare was lost: the command waiting for it is handled
                // again; the client's command itself gets the error.
                if self.take_preparing().is_none() {
                    let seq = self.c_seq.wrapping_add(1);
                    queue_error(&mut self.core.io.to_client, seq, &e);
                }
                Ok(Vec::new())
            }
            done => done,
        };
        let mut outcome = answer.outcome();
        outcome.error |= done.is_err();
        crate::session::judge::digest_done(&mut self.core, crate::session::judge::SHARED, outcome);
        self.mux_answered(done).await
    }

    fn answer_sink(&mut self) -> Option<&mut bytes::BytesMut> {
        self.rare
            .as_mut()
            .and_then(|r| r.preparing.as_mut())
            .map(|p| &mut p.answer)
    }

    fn in_flight(&self) -> bool {
        !self.at_rest()
    }

    fn awaits_answer(&self) -> bool {
        // (Not `in_flight`, which a command that gets no answer keeps true until it is
        // written.)
        !self.all_answered()
    }

    fn rest(&mut self) {
        if let Some(q) = self.tracker.release() {
            crate::stream::spare::keep(&super::TRACKER_SPARES, q);
        }
        self.origins.shed_to(&super::ORIGIN_SPARES);
        self.kills.shed();
        self.settle_rare();
    }

    fn between_requests(&self) -> bool {
        self.at_rest()
    }

    fn idle(&self) -> bool {
        Relay::idle(self)
    }

    fn tx_status(&self) -> TxStatus {
        if self.in_transaction() {
            TxStatus::InTransaction
        } else {
            TxStatus::Idle
        }
    }

    fn holds(&self) -> bool {
        self.hold_once || !self.s.kill.may_release()
    }

    fn lease_moved(&mut self) {
        self.sync_kill();
    }

    fn forget_server(&mut self) {
        self.tracker = sluice_wire_mysql::track::Tracker::new(self.tracker.caps());
        self.origins.clear();
        self.s_first = true;
        self.s_forward = true;
        self.s_cont = false;
        self.status = sluice_wire_mysql::consts::SERVER_STATUS_AUTOCOMMIT;
        self.s.kill.set_muxed(None);
        self.blocked = false;
        self.wait_rest = false;
        self.take_preparing();
        if let Some(r) = self.rare.as_mut() {
            r.capture = None;
        }
    }

    fn server_may_close(&self) -> bool {
        // At rest, a server closing the connection is the end of the session (after its
        // last word, if any); but a transaction the session outlives must be failed.
        self.at_rest()
            && !(self.core.may_outlive_server() && self.in_transaction() && !self.s.kill.killed())
    }

    fn lost(&self, e: Option<std::io::Error>) -> Error {
        match e {
            None => Error::server_gone("Lost connection to server during query"),
            Some(e) => Error::server_gone(format!("Lost connection to server during query: {e}")),
        }
    }

    fn fail_in_flight(&mut self, e: &Error) -> bool {
        let half_answered = !self.s_first && self.s_forward;
        if self.s.kill.killed()
            || self.incoming != super::Incoming::Command
            || self.c_cont
            || self.s_cont
            || half_answered
        {
            return false;
        }
        let theirs = |o: &super::Origin| {
            !matches!(
                o,
                super::Origin::Injected | super::Origin::InjectedPrepare { .. }
            )
        };
        let waiting = self.origins.iter().filter(|o| theirs(o)).count();
        for o in std::mem::take(&mut self.origins) {
            if !theirs(&o) {
                continue;
            }
            if matches!(o, super::Origin::Kill)
                && let Some(k) = self.kills.pop_front()
            {
                k.answered(false);
            }
            // Each command's packets start at sequence id 0; a lone one's last packet
            // (of a large command or a LOCAL INFILE's file) is the client's last.
            let seq = if waiting == 1 {
                self.c_seq.wrapping_add(1)
            } else {
                1
            };
            queue_error(&mut self.core.io.to_client, seq, e);
        }
        true
    }

    fn idle_timeout(&mut self, _which: Expired) -> End {
        tracing::info!(client = self.s.id, "closing an idle client session");
        End::ServerClosed
    }

    fn last_word(&mut self, end: &End) {
        match end {
            End::Failed(e) if e.side != Side::Client => {
                let seq = self.c_seq.wrapping_add(1);
                queue_error(&mut self.core.io.to_client, seq, e);
            }
            End::Shutdown => {
                let e = Error::new(
                    Kind::Shutdown,
                    Side::Internal,
                    "Server shutdown in progress",
                );
                queue_error(&mut self.core.io.to_client, 0, &e);
            }
            _ => {}
        }
    }

    fn clean(&self) -> bool {
        true
    }

    fn needs_reset(&self) -> bool {
        true
    }

    fn before_finish(&mut self) {
        for k in self.kills.drain() {
            k.answered(false);
        }
    }
}
