//! What a client's next command is, for its route (see session/acquire.rs `route`): a
//! split route sends writes to the primary and reads to a replica.

use super::Relay;
use sluice_sql::Class;
use sluice_wire_mysql::consts;

impl Relay {
    /// What command `cmd` (its payload `len` bytes in the client buffer) is about to
    /// run (unknown: a write).
    pub(super) fn class_of(&self, cmd: u8, len: usize) -> Class {
        let payload = self.core.io.cbuf.get(4..4 + len).unwrap_or_default();
        let classify = |sql: &[u8]| sluice_sql::classify(sql, sluice_sql::Dialect::MySql);
        match cmd {
            consts::COM_QUERY => classify(payload.get(1..).unwrap_or_default()),
            // A prepare changes nothing: any server can describe the statement.
            consts::COM_STMT_PREPARE => Class::Read,
            // An execute runs where its text says (the client's statement, by its id).
            consts::COM_STMT_EXECUTE | consts::COM_STMT_BULK_EXECUTE => {
                super::state::stmt_id(payload)
                    .and_then(|id| self.stmts.get(&id))
                    .map_or(Class::Write, |st| st.class())
            }
            _ => Class::Write,
        }
    }
}
