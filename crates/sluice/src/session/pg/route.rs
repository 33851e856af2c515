//! What a client's next request is, for its route (see session/driver.rs `route`):
//! a split route sends writes to the primary and reads to a replica.

use super::Relay;
use sluice_sql::Class;
use sluice_wire_pg::msg::{self, fe};

impl Relay {
    /// What the request `tag` / `body` is about to run: its query, or the statement a
    /// Bind names (unknown: a write).
    pub(super) fn class_of(&self, tag: u8, body: &[u8]) -> Class {
        let sql = match tag {
            fe::QUERY => msg::query_text(body),
            fe::PARSE => msg::parse(body).map(|(_, q, _)| q),
            fe::BIND => msg::bind(body).and_then(|(_, name, _)| self.stmts.query(name)),
            _ => None,
        };
        sql.map_or(Class::Write, |q| {
            sluice_sql::classify(q, sluice_sql::Dialect::Postgres)
        })
    }
}
