//! Requests answered without a server connection between transactions (transaction
//! mode): a Parse of a statement the pool knows, a Close of a statement, a lone Sync.

use super::Relay;
use super::client::{new_stmt, synthetic};
use super::stmts;
use bytes::Bytes;
use sluice_wire_pg::encode;
use sluice_wire_pg::msg::{self, fe};
use sluice_wire_pg::track::Kind as TKind;

impl Relay {
    /// Between transactions, some requests need no server: a Parse of a statement the
    /// pool already knows to be valid (prepared on a server when first bound), a Close
    /// of a statement, and a Sync with nothing in flight. Answering them here saves a
    /// round trip and a lease, and keeps clients that prepare with blocking calls from
    /// waiting on a pool held by their own neighbours.
    pub(super) fn answer_without_server(&mut self, tag: u8, body: &[u8]) -> bool {
        match tag {
            fe::PARSE => {
                let Some((name, query, types)) = msg::parse(body) else {
                    return false;
                };
                let fp = self.s.parse_fingerprint();
                let pool = &self.core.pool;
                let hash = pool.current_statement(stmts::hash(query, types, fp));
                if name.is_empty() || !pool.knows_statement(hash) {
                    return false;
                }
                let stmt = new_stmt(
                    query,
                    types,
                    self.core.shared.pg.effects.of(query),
                    fp,
                    pool,
                );
                self.stmts.insert(Bytes::copy_from_slice(name), stmt);
                let t = self.token();
                self.tracker
                    .push(TKind::Parse, synthetic(encode::parse_complete), t);
                true
            }
            fe::CLOSE => match msg::target(body) {
                Some((b'S', name)) if !name.is_empty() => {
                    self.stmts.remove(name);
                    let t = self.token();
                    self.tracker
                        .push(TKind::Close, synthetic(encode::close_complete), t);
                    true
                }
                _ => false,
            },
            fe::SYNC => {
                let t = self.token();
                self.tracker.push(
                    TKind::Sync,
                    synthetic(|b| encode::ready_for_query(b, b'I')),
                    t,
                );
                true
            }
            _ => false,
        }
    }
}
