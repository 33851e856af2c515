//! The query rules for PostgreSQL requests (see session/judge.rs): a Query or Parse is
//! judged by its text, a Bind by the text of the statement it binds (where it goes
//! only: the statement was judged when it was prepared). A rewrite gives the frame to
//! send instead.

use super::Relay;
use crate::session::judge::{self, Judged};
use bytes::BytesMut;
use sluice_wire_pg::encode;
use sluice_wire_pg::msg::{self, fe};
use sluice_wire_pg::track::{Kind as TKind, Origin};

impl Relay {
    /// What the rules say of the request `tag` / `body`; a rewrite comes back as the
    /// whole frame to send.
    pub(super) fn judge_frame(&mut self, tag: u8, body: &[u8]) -> Judged {
        if self.core.judging.is_none() {
            return Judged::Run;
        }
        // Requests skipped or answered by Sluice are not judged.
        if self.skip_to_sync || self.aborted() || self.core.odds.lost_tx.is_some() {
            return Judged::Run;
        }
        // Only a simple-query BEGIN is deferred.
        let between = self.tracker.is_idle() && self.status == b'I';
        let judged = match tag {
            fe::QUERY => match msg::query_text(body) {
                Some(sql) => {
                    let j = judge::judge(&mut self.core, sql, None, (false, true, between));
                    if let Some(cluster) = self.core.take_mirror()
                        && !matches!(j, Judged::Refuse(_))
                    {
                        crate::session::mirror::send(self, &cluster, sql);
                    }
                    j
                }
                None => Judged::Run,
            },
            fe::PARSE => match msg::parse(body) {
                Some((name, sql, _)) => {
                    let j = judge::judge(&mut self.core, sql, None, (false, false, false));
                    if !self.tx_mode() {
                        judge::remember(&mut self.core, name);
                    }
                    j
                }
                None => Judged::Run,
            },
            fe::BIND => {
                let Some((_, name, _)) = msg::bind(body) else {
                    return Judged::Run;
                };
                let sql = match self.stmts.query(name) {
                    Some(q) => q,
                    None if name.is_empty() && self.unnamed.get().is_some() => {
                        self.unnamed.get().map(|(q, _)| q).unwrap_or_default()
                    }
                    None => {
                        // Session mode: the statement's digest is known by its name.
                        judge::recall(&mut self.core, name);
                        return Judged::Run;
                    }
                };
                match judge::judge(&mut self.core, sql, None, (true, false, false)) {
                    // What a rewrite makes of it was sent at Parse.
                    Judged::Rewrite(_) => Judged::Run,
                    j => j,
                }
            }
            // A fast-path function call is judged as the statement it amounts to (its
            // digest: kind "call"), so that deny rules and the firewall see it.
            fe::FUNCTION_CALL => {
                let sql = b"CALL fastpath_function_call(0)";
                match judge::judge(&mut self.core, sql, None, (false, false, false)) {
                    Judged::Rewrite(_) => Judged::Run,
                    j => j,
                }
            }
            _ => Judged::Run,
        };
        match judged {
            Judged::Rewrite(text) => {
                let mut frame = BytesMut::new();
                match tag {
                    fe::PARSE => {
                        let Some((name, _, types)) = msg::parse(body) else {
                            return Judged::Run;
                        };
                        encode::parse(&mut frame, name, &text, types);
                    }
                    _ => encode::query(&mut frame, &text),
                }
                Judged::Rewrite(frame.to_vec())
            }
            j => j,
        }
    }

    /// Answers a deferred BEGIN, or the COMMIT / ROLLBACK of a transaction still
    /// deferred (see session/judge.rs), as the server would.
    pub(super) fn answer_deferred(&mut self, judged: &Judged) {
        let (tag, status) = match judged {
            Judged::Begin => ("BEGIN", b'T'),
            Judged::End(true) => ("COMMIT", b'I'),
            _ => ("ROLLBACK", b'I'),
        };
        if let Judged::End(commit) = judged {
            self.core.ledger.end_transaction(*commit);
        }
        self.status = status;
        self.tracker.set_status(status);
        self.ledger_in_tx = status == b'T';
        let t = self.token();
        let mut b = BytesMut::new();
        encode::command_complete(&mut b, tag);
        encode::ready_for_query(&mut b, status);
        self.tracker
            .push(TKind::Query, Origin::Synthetic(b.freeze()), t);
    }

    /// Sends a deferred BEGIN on the server connection just taken, before anything of
    /// the client's; its answer is Sluice's.
    pub(super) fn send_deferred(&mut self) {
        if let Some(begin) = self.core.odds.take_deferred() {
            encode::query(&mut self.core.io.to_server, &begin);
            let t = self.token();
            self.tracker.push(TKind::Query, Origin::Injected, t);
        }
    }

    /// A rule gave the statement being sent a timeout: the session's clock cancels it.
    pub(super) fn statement_timeout(&mut self) {
        if let Some(t) = self.core.take_stmt_timeout() {
            crate::session::timeouts::Clock::for_statement(&mut self.core.clock, t);
        }
    }
}
