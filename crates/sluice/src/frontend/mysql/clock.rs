//! The session's timeouts on the MySQL side (see session/timeouts.rs): what phase the
//! client is in, and what a passed deadline does. An idle timeout ends the session as
//! the server's own wait_timeout would: the connection closed, nothing said.

use super::relay::{End, Relay};
use crate::session::timeouts::{Expired, Phase};

impl Relay {
    /// Tells the session's clock what the client is doing; the pump wakes the relay at
    /// the next deadline.
    pub(super) fn watch_the_clock(&mut self, activity: bool) {
        if self.clock.is_none() {
            return;
        }
        let phase = Phase::of(
            !self.at_rest() || self.muxed.is_some(),
            self.in_transaction() && self.s.lease.is_some(),
        );
        if let Some(c) = self.clock.as_mut() {
            let deadline = c.observe(phase, activity);
            self.io.set_deadline(deadline);
        }
    }

    /// A timeout passed: the running statement is killed, or the session ends.
    pub(super) fn timed_out(&mut self) -> Result<(), End> {
        let Some(c) = self.clock.as_mut() else {
            return Ok(());
        };
        match c.expired() {
            // The server enforces query_timeout (see relay::run).
            Expired::Query => Ok(()),
            Expired::IdleInTransaction | Expired::ClientIdle => {
                tracing::info!(client = self.s.id, "closing an idle client session");
                Err(End::Closed)
            }
        }
    }
}
