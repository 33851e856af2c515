//! Reads of server settings that drivers send as they connect (`SELECT
//! @@max_allowed_packet,@@wait_timeout,@@socket` from mysql_async, `select
//! @@version_comment limit 1` from the mariadb client: `sluice_sql::reads_only_settings`),
//! answered without a server connection where the session has none yet (session mode
//! with `assign_server = "first_statement"`): the answer is the one a server of the
//! pool gave another new session of it in the last seconds (pool/answers.rs). The first
//! such read takes a server connection as any first statement does, and its answer is
//! kept for the next clients.

use super::Relay;
use super::rare::Rare;
use crate::session::judge;
use sluice_config::PoolMode;
use sluice_wire_mysql::{consts, resp};

/// A server's answer to a read of settings, being kept as it is relayed.
pub(super) struct Capture {
    text: Box<[u8]>,
    answer: Vec<u8>,
    /// Where the last packet kept starts in `answer`.
    last: usize,
}

/// The longest text taken for a read of settings (drivers' are well under it).
const MAX_TEXT: usize = 2048;

impl Relay {
    /// The client's COM_QUERY (`len` bytes at the start of its buffer), sent while the
    /// session holds no server connection: `Some(true)` if it was answered here,
    /// `Some(false)` if it reads settings with no recent answer (the server's answer is
    /// to be kept: [`Relay::keep_answer`]), None otherwise.
    pub(super) fn answer_settings_read(&mut self, len: usize) -> Option<bool> {
        let caps = self.tracker.caps();
        if self.core.mode != PoolMode::Session
            || self.in_transaction()
            || !self.origins.is_empty()
            || caps & consts::CLIENT_QUERY_ATTRIBUTES != 0
            || len > MAX_TEXT
        {
            return None;
        }
        let text = self.core.io.cbuf.get(5..4 + len)?;
        if !sluice_sql::reads_only_settings(text) {
            return None;
        }
        let Some(answer) = self.core.pool.answers.get(text, caps) else {
            return Some(false);
        };
        self.core.io.to_client.extend_from_slice(&answer);
        judge::digest_sent(&mut self.core, 0);
        let outcome = crate::stats::Outcome {
            rows: 1,
            affected: 0,
            error: false,
        };
        judge::digest_done(&mut self.core, 0, outcome);
        Some(true)
    }

    /// The client's read of settings (`len` bytes at the start of its buffer) goes to
    /// the server now, as the only command in flight: its answer is kept as it is
    /// relayed.
    pub(super) fn keep_answer(&mut self, len: usize) {
        if let Some(text) = self.core.io.cbuf.get(5..4 + len) {
            let text: Box<[u8]> = text.into();
            self.rare().capture = Some(Capture {
                text,
                answer: Vec::new(),
                last: 0,
            });
        }
    }

    /// The answer to the client's command `cmd` is complete (`ok`: not an error): the
    /// answer being kept, if any, is the pool's for other new sessions, unless it left
    /// warnings (a session answered from it would have none to show).
    pub(super) fn captured(&mut self, cmd: u8, ok: bool) {
        let Some(c) = self.rare.as_mut().and_then(|r| r.capture.take()) else {
            return;
        };
        let caps = self.tracker.caps();
        let end = c.answer.get(c.last + 4..).unwrap_or_default();
        let warnings = match resp::EofPacket::parse(end) {
            Some(eof) => Some(eof.warnings),
            None => resp::OkPacket::parse(end, caps).map(|ok| ok.warnings),
        };
        if ok && cmd == consts::COM_QUERY && warnings == Some(0) {
            (self.core.pool.answers).put(c.text, caps, bytes::Bytes::from(c.answer));
        }
    }
}

impl Rare {
    /// A server packet was relayed to the client: kept with the answer being kept, if
    /// any (an answer too long to keep is let go).
    pub(super) fn capture_packet(&mut self, packet: &[u8]) {
        if let Some(c) = self.capture.as_mut() {
            if c.answer.len() + packet.len() > crate::pool::answers::MAX_ANSWER {
                self.capture = None;
            } else {
                c.last = c.answer.len();
                c.answer.extend_from_slice(packet);
            }
        }
    }
}
