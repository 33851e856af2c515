//! The query rules for MySQL commands (see session/judge.rs): COM_QUERY and
//! COM_STMT_PREPARE are judged by their text, COM_STMT_EXECUTE and
//! COM_STMT_BULK_EXECUTE by the text of the statement they run (where it goes only:
//! the statement was judged when prepared). A
//! refusal is the command's answer (an ERR), a rewrite replaces the command's text.

use super::Relay;
use super::errors::queue_error;
use crate::session::judge::{self, Judged};
use sluice_wire_mysql::{consts, packet, resp};

/// What the rules made of a command.
pub(super) enum Ruled {
    /// Go on with the command, now `len` bytes long.
    Go(usize),
    /// Answered (refused): the command is to be dropped.
    Answered,
}

impl Relay {
    /// Applies the rules to the client's command (`len` bytes at the start of its
    /// buffer, sequence id `seq`). Commands Sluice answers otherwise are left alone.
    pub(super) fn apply_rules(&mut self, len: usize, seq: u8) -> Ruled {
        self.core.odds.take_target();
        if self.core.judging.is_none() || len == 0 || seq != 0 || self.core.odds.lost_tx.is_some() {
            return Ruled::Go(len);
        }
        let Some(&cmd) = self.core.io.cbuf.get(4) else {
            return Ruled::Go(len);
        };
        let answer_seq = seq.wrapping_add(1);
        if len >= packet::MAX_PAYLOAD {
            // A statement of several packets is not scanned: where rules or the firewall
            // look at statements, it is refused rather than let through unjudged.
            let judged = matches!(cmd, consts::COM_QUERY | consts::COM_STMT_PREPARE)
                && self.core.judging.as_deref().is_some_and(|j| j.strict());
            if judged {
                let e = crate::error::Error::new(
                    crate::error::Kind::Denied,
                    crate::error::Side::Client,
                    "statements of 16 MiB or more are not accepted where query rules or the firewall apply",
                );
                queue_error(&mut self.core.io.to_client, answer_seq, &e);
                return Ruled::Answered;
            }
            return Ruled::Go(len);
        }
        // The pool held here: its database is borrowed, not copied, per statement.
        let pool = std::sync::Arc::clone(&self.core.pool);
        let used = self.used_database();
        let database: &str = used.as_deref().unwrap_or(&pool.key.database);
        let between = self.at_rest() && !self.in_transaction();
        let cbuf = std::mem::take(&mut *self.core.io.cbuf);
        let payload = cbuf.get(5..4 + len).unwrap_or_default();
        let judged = match cmd {
            consts::COM_QUERY | consts::COM_STMT_PREPARE => {
                let simple = cmd == consts::COM_QUERY;
                let j = judge::judge(
                    &mut self.core,
                    payload,
                    Some(database),
                    (false, simple, between),
                );
                if let Some(cluster) = self.core.take_mirror()
                    && cmd == consts::COM_QUERY
                    && !matches!(j, Judged::Refuse(_))
                {
                    crate::session::mirror::send(self, &cluster, payload);
                }
                j
            }
            consts::COM_STMT_EXECUTE | consts::COM_STMT_BULK_EXECUTE | consts::COM_STMT_CLOSE => {
                let id = cbuf.get(4..4 + len).and_then(super::state::stmt_id);
                let runs = cmd != consts::COM_STMT_CLOSE;
                match id.and_then(|id| self.stmts.get(&id)) {
                    Some(st) if runs => {
                        match judge::judge(
                            &mut self.core,
                            &st.sql,
                            Some(database),
                            (true, false, false),
                        ) {
                            Judged::Rewrite(_) => Judged::Run,
                            j => j,
                        }
                    }
                    Some(_) => Judged::Run,
                    // Session mode: the statement's digest is known by its id.
                    None => {
                        let name = id.unwrap_or_default().to_le_bytes();
                        if runs {
                            judge::recall(&mut self.core, &name);
                        } else {
                            judge::forget(&mut self.core, &name);
                        }
                        Judged::Run
                    }
                }
            }
            _ => {
                self.core.odds.take_target();
                Judged::Run
            }
        };
        *self.core.io.cbuf = cbuf;
        if cmd == consts::COM_STMT_PREPARE {
            // Counted when executed.
            self.core.skip_digest();
        }
        match judged {
            Judged::Run => Ruled::Go(len),
            Judged::Rewrite(text) => Ruled::Go(self.replace_command(cmd, len, &text)),
            Judged::Refuse(e) => {
                queue_error(&mut self.core.io.to_client, answer_seq, &e);
                Ruled::Answered
            }
            Judged::Begin | Judged::End(_) => {
                // A deferred BEGIN, or the end of a transaction still deferred: OK.
                if matches!(judged, Judged::Begin) {
                    self.status |= consts::SERVER_STATUS_IN_TRANS;
                } else {
                    self.status &= !consts::SERVER_STATUS_IN_TRANS;
                }
                let mut ok = Vec::new();
                resp::encode_ok(&mut ok, self.tracker.caps(), 0, 0, self.status, 0, b"");
                let mut seq = answer_seq;
                packet::write_packet(&mut *self.core.io.to_client, &mut seq, &ok);
                Ruled::Answered
            }
        }
    }

    /// Sends a deferred BEGIN on the server connection just taken, before the
    /// client's command; its answer is Sluice's.
    pub(super) fn send_deferred(&mut self) {
        if let Some(begin) = self.core.odds.take_deferred() {
            self.inject(&begin, consts::COM_QUERY);
        }
    }

    /// Before a client's next command: where rules or the firewall may answer it
    /// themselves, a command the client pipelined behind others waits until their
    /// answers are in (`rested` then goes on with it), so that its answer comes in
    /// order.
    pub(super) fn wait_for_rest(&mut self) -> bool {
        let strict = self.core.judging.as_deref().is_some_and(|j| j.strict());
        if strict && !self.all_answered() {
            self.wait_rest = true;
            self.blocked = true;
            return true;
        }
        false
    }

    /// The answers a pipelined command waited for are in: whether it may go on.
    pub(super) fn rested(&mut self) -> bool {
        if self.wait_rest && self.all_answered() {
            self.wait_rest = false;
            self.blocked = false;
            return true;
        }
        false
    }

    /// The database the session chose with its last USE (or COM_INIT_DB), if any
    /// (else it is in the one it logged in with, its pool's).
    fn used_database(&self) -> Option<String> {
        self.core.ledger.sets.get("schema").and_then(|sql| {
            let mut tokens = sluice_sql::Tokens::new_in(sql.as_bytes(), sluice_sql::Dialect::MySql);
            tokens.nth(1).and_then(|t| t.ident())
        })
    }
}
