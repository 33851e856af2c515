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
//! session takes at its first other statement, before it (a server that refuses it
//! then ends the session). A statement with no recent answer takes a
//! server connection as any first statement does, and its answer is kept for the next
//! clients.

use super::Relay;
use super::rare::Rare;
use crate::error::{Error, Kind, Side};
use crate::session::driver::End;
use crate::session::effects::Effects;
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
    /// The statement's effects, where it is a SET (they go into the ledger once the
    /// server took it).
    set: Effects,
}

/// What becomes of a client's statement here.
pub(super) enum Early {
    /// Answered from the pool's kept answers: the server is not asked.
    Answered,
    /// For the server; its answer is to be kept ([`Relay::keep_answer`]).
    Keep(Effects),
    /// For the server, as any statement.
    No,
}

/// The longest text taken for a read of settings (drivers' are well under it).
const MAX_TEXT: usize = 2048;

impl Relay {
    /// The client's command `cmd` (`len` bytes at the start of its buffer) in session
    /// mode: a statement of a new session (a read of settings, a SET of one setting,
    /// only such statements before it) is answered from the pool's recent answer while
    /// the session holds no server connection, and otherwise has its answer kept if the
    /// session took its connection for such statements and ran nothing else on it yet.
    pub(super) fn early(&mut self, cmd: u8, len: usize) -> Early {
        if self.core.mode != PoolMode::Session {
            return Early::No;
        }
        let fresh = self.rare.as_ref().is_some_and(|r| r.fresh);
        if self.core.lease.is_some() && !fresh {
            return Early::No;
        }
        if self.core.lease.is_none() && self.answered_alone(cmd, len) {
            return Early::Answered;
        }
        let Some(set) = self.of_new_session(cmd, len) else {
            if fresh {
                // The connection has run something else now.
                self.rare().fresh = false;
            }
            return Early::No;
        };
        if self.core.lease.is_some() {
            return Early::Keep(set);
        }
        let caps = self.tracker.caps();
        let Some(text) = self.core.io.cbuf.get(5..4 + len) else {
            return Early::No;
        };
        let key = self.answer_key(text);
        let Some(answer) = self.core.pool.answers.get(&key, caps) else {
            return Early::Keep(set);
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
        Early::Answered
    }

    /// A COM_PING or COM_RESET_CONNECTION of a session holding no server connection is
    /// answered here, as MySQL Router and ProxySQL answer a ping: the server has nothing
    /// of the session to check or forget (pools such as Connector/Python's ping and reset
    /// each connection they hand out or get back, which would otherwise take a server
    /// connection each). A reset forgets the SETs answered so far (the session is as
    /// new: autocommit on, nothing in its ledger).
    fn answered_alone(&mut self, cmd: u8, len: usize) -> bool {
        if len != 1 || !matches!(cmd, consts::COM_PING | consts::COM_RESET_CONNECTION) {
            return false;
        }
        if cmd == consts::COM_RESET_CONNECTION {
            self.forget_session_state();
            self.status = consts::SERVER_STATUS_AUTOCOMMIT;
        }
        let mut ok = Vec::with_capacity(16);
        let caps = self.tracker.caps();
        resp::encode_ok(&mut ok, caps, 0, 0, self.status, 0, b"");
        let mut seq = 1;
        sluice_wire_mysql::packet::write_packet(&mut *self.core.io.to_client, &mut seq, &ok);
        true
    }

    /// Whether the client's command is a statement a new session's answer may be kept
    /// for: `Some(None)` a read of settings, `Some(Some(effects))` a SET of one setting,
    /// None anything else (or not now: inside a transaction, behind another command).
    fn of_new_session(&self, cmd: u8, len: usize) -> Option<Effects> {
        if cmd != consts::COM_QUERY
            || self.status & consts::SERVER_STATUS_IN_TRANS != 0
            || !self.origins.is_empty()
            || self.tracker.caps() & consts::CLIENT_QUERY_ATTRIBUTES != 0
            || len > MAX_TEXT
        {
            return None;
        }
        let text = self.core.io.cbuf.get(5..4 + len)?;
        if sluice_sql::reads_only_settings(text) {
            return Some(None);
        }
        if !sluice_sql::sets_one_setting(text) {
            return None;
        }
        // (The ledger's own reading of it: what replays it.)
        let effects = self.core.shared.my.effects.of(text)?;
        match &*effects {
            [sluice_sql::Effect::Set { .. }] => Some(Some(effects)),
            _ => None,
        }
    }

    /// What a new session's answer to `text` is kept under: the SETs answered or run
    /// before it (the ledger's, in the order they run) and the text.
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

    /// The client's statement (`len` bytes at the start of its buffer; `set`: its
    /// effects, where it is a SET) goes to the server now, after only the session's
    /// SETs: its answer is kept as it is relayed, and the session's next such statement
    /// may be kept too.
    pub(super) fn keep_answer(&mut self, len: usize, set: Effects) {
        if let Some(text) = self.core.io.cbuf.get(5..4 + len) {
            let key = self.answer_key(text);
            let rare = self.rare();
            rare.fresh = true;
            rare.capture = Some(Capture {
                key,
                answer: Vec::new(),
                last: 0,
                set,
            });
        }
    }

    /// The session just took its server connection (session mode): the SETs answered
    /// before (the ledger's, in order) run on it now, each answered before the next and
    /// all before the client's statement goes, so that a SET the server refuses, as it
    /// did not for the session whose answer the client got, ends the session with
    /// nothing of the client's run.
    pub(super) async fn run_answered_sets(&mut self) -> Result<(), End> {
        let core = &mut self.core;
        let Some(lease) = core.lease.as_mut() else {
            return Ok(());
        };
        for (name, sql) in core.ledger.sets.iter() {
            let mut p = Vec::with_capacity(sql.len() + 1);
            p.push(consts::COM_QUERY);
            p.extend_from_slice(sql.as_bytes());
            match lease.conn.command(&p).await {
                Ok(Ok(())) => lease.conn.applied.insert(name.clone(), sql.clone()),
                Ok(Err(err)) => {
                    let why = resp::err_message(&err).unwrap_or_default();
                    return Err(End::Failed(Error::new(
                        Kind::Desync,
                        Side::Server,
                        format!("restoring the session state on a server connection failed: {why}"),
                    )));
                }
                Err(e) => return Err(End::Failed(e)),
            }
        }
        Ok(())
    }

    /// The answer to the client's command `cmd` is complete (`ok`: not an error): the
    /// answer being kept, if any, is the pool's for other new sessions, unless it left
    /// warnings (a session answered from it would have none to show). A SET so kept
    /// goes into the ledger (the key of the next statement's answer); anything else
    /// ends the keeping.
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
        if !(ok && cmd == consts::COM_QUERY && warnings == Some(0)) {
            self.rare().fresh = false;
            return;
        }
        (self.core.pool.answers).put(c.key, caps, bytes::Bytes::from(c.answer));
        for e in c.set.iter().flat_map(|e| e.iter()) {
            (self.core.ledger).apply(e, false, &self.core.shared.pins);
            if let (Some(l), sluice_sql::Effect::Set { name, sql }) = (self.core.lease.as_mut(), e)
            {
                l.conn.applied.insert(name.clone(), sql.clone());
            }
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
                // (And what follows is not a new session's: its SET, if it is one,
                // stays out of the ledger.)
                self.capture = None;
                self.fresh = false;
            } else {
                c.last = c.answer.len();
                c.answer.extend_from_slice(packet);
            }
        }
    }
}
