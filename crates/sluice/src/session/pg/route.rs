//! What a client's next request is, for its route (see session/acquire.rs `route`):
//! a split route sends writes to the primary and reads to a replica; and which request
//! may go once more to another server if its own is lost (driver::arm_retry).

use super::Relay;
use crate::session::driver;
use sluice_sql::Class;
use sluice_wire_pg::msg::{self, fe};

impl Relay {
    /// What the request `tag` / `body` is about to run: its query, or the statement a
    /// Bind names (unknown: a write).
    pub(super) fn class_of(&self, tag: u8, body: &[u8]) -> Class {
        let sql = match tag {
            fe::QUERY => msg::query_text(body),
            fe::PARSE => msg::parse(body).map(|(_, q, _)| q),
            // (A prepared statement keeps its class: classified once, not per Bind.)
            fe::BIND => {
                return msg::bind(body)
                    .and_then(|(_, name, _)| self.stmts.class(name))
                    .unwrap_or(Class::Write);
            }
            _ => None,
        };
        sql.map_or(Class::Write, |q| {
            sluice_sql::classify(q, sluice_sql::Dialect::Postgres)
        })
    }

    /// Before a client frame: a lone request outside a transaction (a simple query, or
    /// a round of the extended protocol complete in `buf`) is kept, while nothing of
    /// its answer has come, to go once to another server if its own is lost (see
    /// driver::arm_retry); any other frame lets go of the one kept. Returns what the
    /// request is when it had to find out (the route need not ask again).
    pub(super) fn keep_for_retry(
        &mut self,
        tag: u8,
        buf: &[u8],
        frame_len: usize,
    ) -> Option<Class> {
        if self.round_left > 0 {
            // A later frame of the round kept.
            let frame = u32::try_from(frame_len).unwrap_or(u32::MAX);
            self.round_left = self.round_left.saturating_sub(frame);
            return None;
        }
        self.core.odds.take_retry();
        let alone = self.core.may_retry()
            && self.tracker.is_idle()
            && self.status == b'I'
            && !self.skip_to_sync
            && self.core.muxed.is_none();
        let len = match tag {
            _ if !alone => return None,
            fe::QUERY => frame_len,
            fe::PARSE | fe::BIND => super::muxed::round(buf, self.core.max_message())?.1,
            _ => return None,
        };
        let (body, request) = (buf.get(5..frame_len)?, buf.get(..len)?);
        let class = self.class_of(tag, body);
        driver::arm_retry(&mut self.core, class, request);
        if self.core.odds.retry.is_some() {
            match u32::try_from(len - frame_len) {
                Ok(left) => self.round_left = left,
                // (Beyond any frame size Sluice takes: kept for no retry.)
                Err(_) => drop(self.core.odds.take_retry()),
            }
        }
        Some(class)
    }
}
