//! Transaction mode's shared server connections, PostgreSQL side: a plain query, or a
//! round of the unnamed statement and portal (Parse, Bind, Describe, Execute, Sync), of
//! a client that holds no server connection and changed no session state goes to a
//! shared connection, pipelined with other clients' (see `crate::mux`).

use super::relay::Relay;
use sluice_wire_pg::msg::{self, fe};

impl Relay {
    /// Whether the client could share a connection now: transaction mode, no server
    /// connection held, nothing in flight, no session state changed.
    pub(super) fn may_share(&self) -> bool {
        self.tx_mode()
            && self.s.lease.is_none()
            && self.tracker.is_idle()
            && self.at_rest
            && self.status == b'I'
            && !self.ledger_in_tx
            && self.ledger.sets.is_empty()
            && !self.ledger.is_pinned()
            && !self.io.shutting_down
            && !self.skip_to_sync
    }

    /// Whether `sql` may run on a shared connection: the scanner finds no effect on
    /// session state in it, and it sends no notification (whose sender a listener
    /// must see as this client: see relay_server::rename_sender).
    pub(super) fn plain(&self, sql: &[u8]) -> bool {
        // Statements that return rows or change rows, nothing else (no COPY, no
        // utility commands).
        const FIRST: [&[u8]; 7] = [
            b"select", b"insert", b"update", b"delete", b"values", b"table", b"with",
        ];
        let first = sluice_sql::first_word(sql);
        FIRST.iter().any(|k| first.eq_ignore_ascii_case(k))
            && self.shared.effects.of(sql).is_none()
            && !sql.windows(6).any(|w| w.eq_ignore_ascii_case(b"notify"))
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
        let max = self.s.max_message;
        let mut at = 0;
        let mut query: Option<(&[u8], &[u8])> = None;
        let mut tags = [0u8; 5];
        let mut n = 0;
        while n < tags.len() {
            let h = sluice_wire_pg::frame::complete_frame(buf.get(at..)?, max).ok()??;
            let body = buf.get(at + 5..at + h.frame_len)?;
            let unnamed = match h.tag {
                fe::PARSE => msg::parse(body).map(|(name, q, types)| {
                    query = Some((q, types));
                    name.is_empty()
                }),
                fe::BIND => msg::bind(body).map(|(p, st, _)| p.is_empty() && st.is_empty()),
                fe::DESCRIBE => msg::target(body).map(|(_, name)| name.is_empty()),
                fe::EXECUTE => msg::cstr(body).map(|(p, _)| p.is_empty()),
                fe::SYNC => Some(true),
                _ => None,
            };
            if unnamed != Some(true) {
                return None;
            }
            tags[n] = h.tag;
            n += 1;
            at += h.frame_len;
            if h.tag == fe::SYNC {
                break;
            }
        }
        let shape = &tags[..n];
        let round = [fe::PARSE, fe::BIND, fe::DESCRIBE, fe::EXECUTE, fe::SYNC];
        let short = [fe::PARSE, fe::BIND, fe::EXECUTE, fe::SYNC];
        if shape != round && shape != short {
            return None;
        }
        let (q, types) = query?;
        if at >= 64 * 1024 || !self.plain(q) {
            return None;
        }
        let (q, types) = (q.to_vec(), types.to_vec());
        if !self.share(&buf[..at], fe::PARSE) {
            return None;
        }
        // The unnamed statement now lives on the shared connection only.
        self.unnamed.set(&q, &types);
        self.unnamed_here = false;
        self.unnamed_effects = None;
        Some(at)
    }

    /// Sends `frames` to a shared connection; the client waits for the answer.
    pub(super) fn share(&mut self, frames: &[u8], first: u8) -> bool {
        let fp = self.s.params_fingerprint();
        let queued = self.shared.pg_muxes.submit(&self.s.pool, fp, |q| {
            q.bytes.extend_from_slice(frames);
            first
        });
        let Ok((mux, answer)) = queued else {
            return false;
        };
        if let Some(key) = mux.cancel_key() {
            self.s.cancel.slot.set_gated(key, (mux, answer.clone()));
        }
        self.muxed = Some(answer);
        true
    }
}
