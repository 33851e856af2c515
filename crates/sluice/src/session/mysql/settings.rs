//! Statements drivers send as they connect, answered without a server connection where
//! the session has none yet (session mode with `assign_server = "first_statement"`):
//! reads of server settings (`SELECT @@max_allowed_packet,@@wait_timeout,@@socket` from
//! mysql_async, `select @@version_comment limit 1` from the mariadb client:
//! `sluice_sql::reads_only_settings`) and SETs of one setting to a constant (`SET
//! autocommit=0` from mysqlclient and PyMySQL, `SET NAMES` and `SET
//! character_set_results = NULL` from Connector/J: `sluice_sql::sets_one_setting`). The
//! answer is the one a server of the pool gave another new session in the same state
//! (the same SETs answered before it) in the last seconds (pool/answers.rs). A SET so
//! answered goes into the session's ledger and runs on the server connection the
//! session takes at its first other statement, before it (state.rs `replay`; a server
//! that refuses it then ends the session). A statement with no recent answer takes a
//! server connection as any first statement does, and its answer is kept for the next
//! clients.

use super::Relay;
use super::rare::Rare;
use crate::session::judge;
use sluice_config::PoolMode;
use sluice_wire_mysql::{consts, resp};

/// A server's answer to a statement of a new session, being kept as it is relayed.
pub(super) struct Capture {
    /// The session's SETs so far and the statement's text (see [`Relay::answer_key`]).
    key: Box<[u8]>,
    answer: Vec<u8>,
    /// Where the last packet kept starts in `answer`.
    last: usize,
}

/// The longest text taken for a read of settings (drivers' are well under it).
const MAX_TEXT: usize = 2048;

impl Relay {
    /// The client's COM_QUERY (`len` bytes at the start of its buffer), sent while the
    /// session holds no server connection: `Some(true)` if it was answered here,
    /// `Some(false)` if it is such a statement with no recent answer (the server's answer
    /// is to be kept: [`Relay::keep_answer`]), None otherwise.
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
        let set = if sluice_sql::reads_only_settings(text) {
            None
        } else if sluice_sql::sets_one_setting(text) {
            // (The ledger's own reading of it: what replays it.)
            let effects = self.core.shared.my.effects.of(text)?;
            match &*effects {
                [sluice_sql::Effect::Set { .. }] => Some(effects),
                _ => return None,
            }
        } else {
            return None;
        };
        let key = self.answer_key(text);
        let Some(answer) = self.core.pool.answers.get(&key, caps) else {
            return Some(false);
        };
        let rows = u64::from(set.is_none());
        if let Some(effects) = set {
            // The answer's status flags are the session's now (a SET of autocommit
            // changes them).
            if let Some(ok) = last_packet(&answer).and_then(|p| resp::OkPacket::parse(p, caps)) {
                self.status = ok.status;
            }
            for e in effects.iter() {
                (self.core.ledger).apply(e, false, &self.core.shared.pins);
            }
        }
        self.core.io.to_client.extend_from_slice(&answer);
        judge::digest_sent(&mut self.core, 0);
        let outcome = crate::stats::Outcome {
            rows,
            affected: 0,
            error: false,
        };
        judge::digest_done(&mut self.core, 0, outcome);
        Some(true)
    }

    /// What a new session's answer to `text` is kept under: the SETs answered before it
    /// (the ledger's, in the order they will run) and the text.
    fn answer_key(&self, text: &[u8]) -> Box<[u8]> {
        let sets = &self.core.ledger.sets;
        if sets.is_empty() {
            return text.into();
        }
        let mut key = Vec::new();
        for (_, sql) in sets.iter() {
            key.extend_from_slice(sql.as_bytes());
            key.push(0);
        }
        key.extend_from_slice(text);
        key.into()
    }

    /// The client's statement (`len` bytes at the start of its buffer) goes to the
    /// server now, after only the SETs answered before it: its answer is kept as it is
    /// relayed.
    pub(super) fn keep_answer(&mut self, len: usize) {
        if let Some(text) = self.core.io.cbuf.get(5..4 + len) {
            let key = self.answer_key(text);
            self.rare().capture = Some(Capture {
                key,
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
            (self.core.pool.answers).put(c.key, caps, bytes::Bytes::from(c.answer));
        }
    }
}

/// The last packet of an answer (its payload).
fn last_packet(answer: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    let mut last = None;
    while let Some((len, _)) = sluice_wire_mysql::packet::header(answer.get(at..)?) {
        last = answer.get(at + 4..at + 4 + len);
        at += 4 + len;
        if at >= answer.len() {
            break;
        }
    }
    last
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
