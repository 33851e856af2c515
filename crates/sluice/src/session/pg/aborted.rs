//! A transaction lost with its server connection (session/lost.rs), kept as PostgreSQL
//! keeps a failed transaction block: until the client ends it, every request fails
//! (25P02, "current transaction is aborted"), and COMMIT, END, ROLLBACK or ABORT, sent
//! as a simple query or through the extended protocol, is answered "ROLLBACK" with the
//! session back outside any transaction. So a client that goes on after the error never
//! runs the rest of its transaction in autocommit on the new server. Sluice answers all
//! of it alone: no server connection is involved until the transaction is over.

use super::Relay;
use crate::error::Error;
use bytes::{Bytes, BytesMut};
use sluice_sql::Effect;
use sluice_wire_pg::encode::{self, Severity};
use sluice_wire_pg::msg::{self, fe};
use sluice_wire_pg::track::{Kind as TKind, Origin};

/// Where a client stands in its lost transaction.
#[derive(Default)]
pub(super) struct Aborted {
    /// The error that says why, not yet told to the client (a transaction idle at the
    /// loss): its first failing request gets this instead of 25P02.
    pub why: Option<Error>,
    /// The current extended-protocol batch names a statement that ends the
    /// transaction (prepared or bound)...
    exit: bool,
    /// ... and has run it: the transaction ends at the batch's Sync.
    ended: bool,
    /// The current batch failed: the rest of it up to its Sync is ignored.
    failed: bool,
}

impl Relay {
    /// Enters the failed-transaction state (`why`: the error the client has yet to
    /// see, if any).
    pub(super) fn abort_transaction(&mut self, why: Option<Error>) {
        self.rare().aborted = Some(Box::new(Aborted {
            why,
            ..Aborted::default()
        }));
        self.status = b'E';
        self.tracker.set_status(b'E');
    }

    /// Whether `sql` ends a transaction block.
    fn ends_transaction(&self, sql: &[u8]) -> bool {
        let effects = self.core.shared.pg.effects.of(sql);
        matches!(effects.as_deref(), Some([Effect::TxEnd]))
    }

    /// Answers one client message while the transaction is aborted.
    pub(super) fn in_aborted(&mut self, tag: u8, body: &[u8]) {
        let Some(mut a) = self.rare.as_mut().and_then(|r| r.aborted.take()) else {
            return;
        };
        if self.aborted_message(&mut a, tag, body) {
            self.status = b'I';
        } else {
            self.rare().aborted = Some(a);
        }
    }

    /// Returns whether the transaction is over.
    fn aborted_message(&mut self, a: &mut Aborted, tag: u8, body: &[u8]) -> bool {
        if a.failed && tag != fe::SYNC {
            return false;
        }
        match tag {
            fe::QUERY => {
                let sql = msg::query_text(body).unwrap_or_default();
                if self.ends_transaction(sql) {
                    self.answer(TKind::Query, b'I', |b| {
                        encode::command_complete(b, "ROLLBACK");
                        encode::ready_for_query(b, b'I');
                    });
                    return true;
                }
                let e = fail(a);
                self.answer(TKind::Query, b'E', |b| {
                    error(b, &e);
                    encode::ready_for_query(b, b'E');
                });
            }
            fe::PARSE => match msg::parse(body) {
                Some((name, query, types)) if self.ends_transaction(query) => {
                    a.exit = true;
                    self.remember(name, query, types);
                    self.answer(TKind::Parse, b'E', encode::parse_complete);
                }
                _ => self.fail_batch(a),
            },
            fe::BIND => {
                let stmt = msg::bind(body).map(|(_, s, _)| s).unwrap_or_default();
                let query = match stmt {
                    b"" => self.unnamed.get().map(|(q, _)| Bytes::copy_from_slice(q)),
                    name => self.stmts.query(name).map(Bytes::copy_from_slice),
                };
                if query.is_some_and(|q| self.ends_transaction(&q[..])) {
                    a.exit = true;
                    self.answer(TKind::Bind, b'E', encode::bind_complete);
                } else {
                    self.fail_batch(a);
                }
            }
            fe::DESCRIBE if a.exit => {
                let statement = msg::target(body).is_some_and(|(k, _)| k == b'S');
                self.answer(TKind::Describe, b'E', |b| {
                    if statement {
                        encode::no_parameters(b);
                    }
                    encode::no_data(b);
                });
            }
            fe::EXECUTE if a.exit => {
                a.ended = true;
                self.answer(TKind::Execute, b'E', |b| {
                    encode::command_complete(b, "ROLLBACK")
                })
            }
            fe::CLOSE => {
                if let Some((b'S', name)) = msg::target(body) {
                    self.stmts.remove(name);
                }
                self.answer(TKind::Close, b'E', encode::close_complete);
            }
            fe::SYNC => {
                let over = a.ended && !a.failed;
                a.exit = false;
                a.ended = false;
                a.failed = false;
                let status = if over { b'I' } else { b'E' };
                self.answer(TKind::Sync, status, |b| encode::ready_for_query(b, status));
                return over;
            }
            fe::FUNCTION_CALL => {
                let e = fail(a);
                self.answer(TKind::FunctionCall, b'E', |b| {
                    error(b, &e);
                    encode::ready_for_query(b, b'E');
                });
            }
            // Flush, and copy messages outside a copy: nothing to answer.
            _ if a.exit || matches!(tag, fe::FLUSH) => {}
            _ if matches!(tag, fe::COPY_DATA | fe::COPY_DONE | fe::COPY_FAIL) => {}
            _ => self.fail_batch(a),
        }
        false
    }

    /// The batch's message fails: an error, then nothing up to its Sync.
    fn fail_batch(&mut self, a: &mut Aborted) {
        let e = fail(a);
        a.failed = true;
        a.exit = false;
        a.ended = false;
        self.answer(TKind::Execute, b'E', |b| error(b, &e));
    }

    /// Keeps a statement that ends a transaction as the client named it (prepared on a
    /// server when it runs there later).
    fn remember(&mut self, name: &[u8], query: &[u8], types: &[u8]) {
        if name.is_empty() {
            self.unnamed.set(query, types);
            self.unnamed_here = false;
            return;
        }
        let fp = self.s.parse_fingerprint();
        let effects = self.core.shared.pg.effects.of(query);
        let stmt = super::client::new_stmt(query, types, effects, fp, &self.core.pool);
        self.stmts.insert(Bytes::copy_from_slice(name), stmt);
    }

    /// Sluice's own answer; nothing else is in flight, so it goes out at once, a
    /// ReadyForQuery in it with `status`.
    fn answer(&mut self, kind: TKind, status: u8, f: impl FnOnce(&mut BytesMut)) {
        let mut b = BytesMut::new();
        f(&mut b);
        let t = self.token();
        self.tracker.set_status(status);
        self.tracker.push(kind, Origin::Synthetic(b.freeze()), t);
        self.release_synthetic();
    }
}

/// The error for a request of the aborted transaction: why it was lost, the first
/// time the client hears of it, else PostgreSQL's own.
fn fail(a: &mut Aborted) -> (String, &'static str) {
    match a.why.take() {
        Some(e) => (e.message.clone(), e.sqlstate()),
        None => (
            "current transaction is aborted, commands ignored until end of transaction block"
                .to_owned(),
            "25P02",
        ),
    }
}

fn error(b: &mut BytesMut, (message, code): &(String, &'static str)) {
    encode::error(b, Severity::Error, code, message);
}
