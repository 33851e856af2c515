//! Transaction mode's shared server connections, PostgreSQL side: a plain query, or a
//! round of the unnamed statement and portal (Parse, Bind, Describe, Execute, Sync), of
//! a client that holds no server connection and changed no session state goes to a
//! shared connection, pipelined with other clients' (see `crate::mux`).

use super::Relay;
use crate::mux::{Answer, Mux, Refused};
use sluice_wire_pg::encode;
use sluice_wire_pg::msg::{self, fe};
use std::sync::Arc;

impl Relay {
    /// Whether the client could share a connection now: transaction mode, no server
    /// connection held, nothing in flight, no session state changed.
    pub(super) fn may_share(&self) -> bool {
        self.tx_mode()
            && self.core.lease.is_none()
            && self.tracker.is_idle()
            && self.at_rest
            && self.status == b'I'
            && self.core.odds.deferred.is_none()
            && !self.ledger_in_tx
            && self.core.ledger.sets.is_empty()
            && !self.core.ledger.is_pinned()
            && !self.core.io.shutting_down
            && !self.skip_to_sync
    }

    /// Whether `sql` may run on a shared connection: the scanner finds no effect on
    /// session state in it, it sends no notification (whose sender a listener must see
    /// as this client: see relay_server::rename_sender), and it signals no other
    /// client (see pids.rs).
    pub(super) fn plain(&self, sql: &[u8]) -> bool {
        // Statements that return rows or change rows, nothing else (no COPY, no
        // utility commands).
        const FIRST: [&[u8]; 7] = [
            b"select", b"insert", b"update", b"delete", b"values", b"table", b"with",
        ];
        let first = sluice_sql::first_word(sql);
        FIRST.iter().any(|k| first.eq_ignore_ascii_case(k))
            && self.core.shared.pg.effects.of(sql).is_none()
            && !sql.windows(6).any(|w| w.eq_ignore_ascii_case(b"notify"))
            && !sluice_sql::signal::mentioned(sql)
    }

    /// In transaction mode, queues a plain query of a client that holds no server
    /// connection and changed no session state on a shared connection.
    pub(super) fn try_mux(&mut self, frame: &[u8], body: &[u8]) -> bool {
        if !self.may_share() || frame.len() >= 64 * 1024 {
            return false;
        }
        let sql = msg::query_text(body).unwrap_or_default();
        if !self.plain(sql) || !self.share(frame, fe::QUERY) {
            return false;
        }
        // A simple query ends the unnamed statement.
        self.unnamed.clear();
        true
    }

    /// The same for an extended-protocol round of the unnamed statement and portal
    /// (Parse, Bind, optional Describe, Execute, Sync) complete in `buf`: returns its
    /// length when it went to a shared connection.
    pub(super) fn try_mux_batch(&mut self, buf: &[u8]) -> Option<usize> {
        if !self.may_share() {
            return None;
        }
        let (round, at) = round(buf, self.core.max_message())?;
        let frames = round.frames();
        let mut query: Option<(&[u8], &[u8])> = None;
        for &(tag, body) in frames {
            let unnamed = match tag {
                fe::PARSE => msg::parse(body).map(|(name, q, types)| {
                    query = Some((q, types));
                    name.is_empty()
                }),
                fe::BIND => msg::bind(body).map(|(p, st, _)| p.is_empty() && st.is_empty()),
                _ => Some(true),
            };
            if unnamed != Some(true) {
                return None;
            }
        }
        if frames.first().map(|f| f.0) != Some(fe::PARSE) {
            return None;
        }
        let (q, types) = query?;
        if !self.plain(q) {
            return None;
        }
        let (q, types) = (q.to_vec(), types.to_vec());
        if !self.share(&buf[..at], fe::PARSE) {
            return None;
        }
        // The unnamed statement now lives on the shared connection only.
        self.unnamed.set(&q, &types);
        self.unnamed_here = false;
        self.set_effects(true, None);
        Some(at)
    }

    /// The same for a round that runs one of the client's named statements through
    /// the unnamed portal (Bind, optional Describe, Execute, Sync): the statement goes
    /// under its pool-wide name, prepared first on a shared connection that lacks it
    /// (Sluice's Close and Parse, whose replies the client does not see).
    pub(super) fn try_mux_named(&mut self, buf: &[u8]) -> Option<usize> {
        if !self.may_share() {
            return None;
        }
        let (round, at) = round(buf, self.core.max_message())?;
        let frames = round.frames();
        let (tag, body) = *frames.first()?;
        let (portal, name, rest) = msg::bind(body).filter(|_| tag == fe::BIND)?;
        if !portal.is_empty() || name.is_empty() {
            return None;
        }
        // Describe of the portal only: the unnamed statement is not the client's here.
        let statement = |&(t, b): &(u8, &[u8])| t == fe::DESCRIBE && b.first() == Some(&b'S');
        let parsed_under = self.s.parse_fingerprint();
        let pool = &self.core.pool;
        let st = self
            .stmts
            .current(name, parsed_under, |h| pool.current_statement(h))?;
        if frames.iter().any(statement) || !self.plain(&st.query) {
            return None;
        }
        let tail = &buf[5 + body.len()..at];
        let fp = self.s.params_fingerprint();
        let queued = self.core.shared.pg.muxes.submit(&self.core.pool, fp, |q| {
            if q.stmts.get(st.hash).is_none() {
                if let Some((old, _)) = q.stmts.make_room(q.stmt_cap) {
                    q.stmts.closing(old);
                    let old = super::stmts::global_name(old);
                    encode::target(q.bytes, fe::CLOSE, b'S', &old);
                    q.added.replies += 1;
                }
                // Closing first makes the Parse succeed even where the statement
                // exists unknown to Sluice.
                let close = q.stmts.closing(st.hash);
                encode::target(q.bytes, fe::CLOSE, b'S', &st.global);
                encode::parse(q.bytes, &st.global, &st.query, &st.types);
                // Counted on once the server has answered the Parse, if no Close of it
                // was queued since (until then other clients prepare it too: a Bind
                // queued behind a Parse that fails would find no statement).
                q.added.replies += 2;
                q.added.prepares = Some((st.hash, close));
            }
            encode::bind(q.bytes, b"", &st.global, rest);
            q.bytes.extend_from_slice(tail);
            fe::BIND
        });
        self.queued(queued)?;
        self.muxed_stmt = Some(st.hash.to_le_bytes());
        Some(at)
    }

    /// Sends `frames` to a shared connection; the client waits for the answer.
    pub(super) fn share(&mut self, frames: &[u8], first: u8) -> bool {
        let fp = self.s.params_fingerprint();
        let queued = self.core.shared.pg.muxes.submit(&self.core.pool, fp, |q| {
            q.bytes.extend_from_slice(frames);
            first
        });
        self.queued(queued).is_some()
    }

    /// The client waits for the answer of what it queued, if it could queue it.
    fn queued(&mut self, queued: Result<(Arc<Mux>, Arc<Answer>), Refused>) -> Option<()> {
        let (mux, answer) = queued.ok()?;
        if let Some(key) = mux.cancel_key() {
            self.s.cancel.slot.set_gated(key, (mux, answer.clone()));
        }
        self.core.muxed = Some(answer);
        crate::session::judge::digest_sent(&mut self.core, crate::session::judge::SHARED);
        self.statement_timeout();
        Some(())
    }
}

/// A message of a round: its tag and body.
type Frame<'a> = (u8, &'a [u8]);

/// A round of the extended protocol complete at the start of `buf`, up to Sync: its
/// messages (tag, body) and length; None when it is incomplete, too long for a shared
/// connection, or not of the shape (Parse,) Bind, (Describe,) Execute, Sync with the
/// unnamed portal (and statement, where Describe names one). (On the stack: this runs
/// for every prepared statement.)
pub(super) fn round(buf: &[u8], max: usize) -> Option<(Round<'_>, usize)> {
    let mut at = 0;
    let mut r = Round {
        frames: [(0, &[]); 5],
        n: 0,
    };
    while r.n < 5 {
        let h = sluice_wire_pg::frame::complete_frame(buf.get(at..)?, max).ok()??;
        let body = buf.get(at + 5..at + h.frame_len)?;
        let unnamed_portal = match h.tag {
            fe::PARSE | fe::BIND | fe::SYNC => Some(true),
            fe::DESCRIBE => msg::target(body).map(|(_, name)| name.is_empty()),
            fe::EXECUTE => msg::cstr(body).map(|(p, _)| p.is_empty()),
            _ => None,
        };
        if unnamed_portal != Some(true) {
            return None;
        }
        r.frames[r.n] = (h.tag, body);
        r.n += 1;
        at += h.frame_len;
        if h.tag == fe::SYNC {
            break;
        }
    }
    let mut tags = [0u8; 5];
    for (t, f) in tags.iter_mut().zip(r.frames()) {
        *t = f.0;
    }
    let shapes: [&[u8]; 4] = [
        &[fe::PARSE, fe::BIND, fe::DESCRIBE, fe::EXECUTE, fe::SYNC],
        &[fe::PARSE, fe::BIND, fe::EXECUTE, fe::SYNC],
        &[fe::BIND, fe::DESCRIBE, fe::EXECUTE, fe::SYNC],
        &[fe::BIND, fe::EXECUTE, fe::SYNC],
    ];
    (at < 64 * 1024 && shapes.contains(&&tags[..r.n])).then_some((r, at))
}

/// The messages of a [`round`].
pub(super) struct Round<'a> {
    frames: [Frame<'a>; 5],
    n: usize,
}

impl<'a> Round<'a> {
    pub(super) fn frames(&self) -> &[Frame<'a>] {
        &self.frames[..self.n]
    }
}
