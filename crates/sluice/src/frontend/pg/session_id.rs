//! `pg_backend_pid()` in transaction mode: the client's statements run on server
//! connections that are not its own, so the call is replaced by the process id the
//! client was told at login (the one its cancel requests name), as for MySQL's
//! CONNECTION_ID() (see `sluice_sql::session_id`).

use super::relay::Relay;
use bytes::BytesMut;
use sluice_sql::Dialect;
use sluice_wire_pg::encode;
use sluice_wire_pg::msg::{self, fe};

impl Relay {
    /// The frame with the client's own process id in its query text, if it asks for it.
    pub(super) fn own_pid(&self, tag: u8, frame: &[u8]) -> Option<BytesMut> {
        if !self.tx_mode() || !matches!(tag, fe::QUERY | fe::PARSE) {
            return None;
        }
        let pid = u32::try_from(self.s.cancel.key.0).ok()?;
        let body = frame.get(5..)?;
        let mut out = BytesMut::new();
        if tag == fe::QUERY {
            let sql = msg::query_text(body)?;
            let new = sluice_sql::session_id::rewrite(sql, Dialect::Postgres, pid)?;
            encode::query(&mut out, &new);
        } else {
            let (name, sql, types) = msg::parse(body)?;
            let new = sluice_sql::session_id::rewrite(sql, Dialect::Postgres, pid)?;
            encode::parse(&mut out, name, &new, types);
        }
        Some(out)
    }
}
