//! Prepared statements in transaction mode. A client's statement ids are Sluice's own
//! (virtual); each server connection keeps the statements it has prepared, by a hash of
//! their text, under the server's ids. A COM_STMT_EXECUTE (and BULK_EXECUTE,
//! SEND_LONG_DATA, RESET, FETCH) goes to whatever connection the client holds (a bulk
//! execute always to one), or, for a plain statement of a
//! client that holds none, to a shared connection: the statement is prepared there first
//! if needed (the command waits for that answer), the id is rewritten, and when the
//! client relies on parameter types it sent before (to whichever connection), its own
//! types are spliced in: a connection's idea of a statement's types may be another
//! client's.

use super::errors::queue_err;
use super::{Cmd, Origin, Relay};
use crate::session::PinReason;
use crate::session::driver::End;
use bytes::Bytes;
use sluice_wire_mysql::{consts, packet};
use std::collections::HashMap;

/// One of the client's prepared statements.
pub(super) struct ClientStmt {
    pub hash: u128,
    pub sql: Bytes,
    pub params: u16,
    /// The parameter types the client last sent (COM_STMT_EXECUTE with "new params
    /// bound"), for connections that have not seen them.
    pub types: Option<Vec<u8>>,
    /// An execute opened a cursor on the connection held now.
    pub cursor: bool,
    /// Its executes may run on a shared connection: one statement with no effect on the
    /// session; `reads_id`: it reads LAST_INSERT_ID().
    pub plain: bool,
    pub reads_id: bool,
    /// Where its executes may run (a split route's question), found the first time
    /// it is asked rather than at every execute.
    pub class: crate::session::reroute::KeptClass,
}

impl ClientStmt {
    /// Where its executes may run.
    pub fn class(&self) -> sluice_sql::Class {
        self.class.of(&self.sql, sluice_sql::Dialect::MySql)
    }
}

#[derive(Default)]
pub(super) struct ClientStmts {
    next: u32,
    /// What MariaDB's statement id 0xFFFFFFFF names: the statement the client prepared
    /// last (transaction mode: its id here), if that prepare succeeded and it is not
    /// closed; 0: none (also while a prepare is on its way, and after one Sluice
    /// answered itself); [`LAST_PREPARED`]: the server's to tell (session mode).
    last: u32,
    /// (Boxed, and None when empty: most sessions hold none, and every one holds this.)
    #[expect(
        clippy::box_collection,
        reason = "a session's inline size, not the map's"
    )]
    map: Option<Box<HashMap<u32, ClientStmt, sluice_sql::Prehashed>>>,
}

impl ClientStmts {
    pub fn add(&mut self, s: ClientStmt) -> u32 {
        // (Never 0, nor 0xFFFFFFFF: MariaDB's "the statement prepared last".)
        self.next = if self.next >= LAST_PREPARED - 1 {
            1
        } else {
            self.next + 1
        };
        self.map.get_or_insert_default().insert(self.next, s);
        self.last = self.next;
        self.next
    }

    /// The client's last prepare failed: id 0xFFFFFFFF names nothing.
    pub fn prepare_failed(&mut self) {
        self.last = 0;
    }

    /// The client's prepare went to its server connection as it is (session mode): the
    /// server knows what id 0xFFFFFFFF names.
    pub fn prepare_sent(&mut self) {
        self.last = LAST_PREPARED;
    }

    pub fn get(&self, vid: &u32) -> Option<&ClientStmt> {
        self.map.as_ref()?.get(vid)
    }

    pub fn get_mut(&mut self, vid: &u32) -> Option<&mut ClientStmt> {
        self.map.as_mut()?.get_mut(vid)
    }

    pub fn remove(&mut self, vid: &u32) -> Option<ClientStmt> {
        if *vid == self.last {
            self.last = 0;
        }
        let map = self.map.as_mut()?;
        let gone = map.remove(vid);
        if map.is_empty() {
            self.map = None;
        }
        gone
    }

    /// Whether one of them has a cursor open.
    pub fn any_cursor(&self) -> bool {
        self.map
            .as_ref()
            .is_some_and(|m| m.values().any(|s| s.cursor))
    }
}

pub(super) fn hash(sql: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(sql)
}

/// The statement id of MariaDB's direct execution: "the statement prepared last".
const LAST_PREPARED: u32 = u32::MAX;

/// What becomes of a client command, as direct execution sees it.
pub(super) enum Direct {
    Go,
    /// It waits for the answers before it.
    Wait,
    /// Sluice answered it.
    Answered,
}

impl Relay {
    /// MariaDB's direct execution: a statement command naming id 0xFFFFFFFF means the
    /// statement the client prepared last (Connector/C sends a COM_STMT_PREPARE and an
    /// execute of that id in one go, to servers with bulk operations). In transaction
    /// mode the ids are Sluice's: such a command (`len` payload bytes at the start of
    /// the client buffer) waits for the answers before it, then names the client's id
    /// for that statement. Where the last prepare never reached a server (Sluice
    /// answered it: a rule, a lost transaction) or failed, the command gets the
    /// server's "unknown handler" error from Sluice, in its turn, in both modes.
    pub(super) fn direct_execution(&mut self, len: usize) -> Direct {
        let payload = &self.core.io.cbuf[4..4 + len];
        let Some(&cmd) = payload.first() else {
            return Direct::Go;
        };
        if cmd == consts::COM_STMT_PREPARE {
            self.stmts.last = 0;
            return Direct::Go;
        }
        let named = super::state::is_stmt_command(cmd)
            && super::state::stmt_id(payload) == Some(LAST_PREPARED);
        if !named || self.stmts.last == LAST_PREPARED {
            return Direct::Go;
        }
        if !self.all_answered() {
            self.wait_rest = true;
            self.blocked = true;
            return Direct::Wait;
        }
        let last = self.stmts.last;
        if last == 0 {
            self.unknown_stmt(cmd, LAST_PREPARED);
            return Direct::Answered;
        }
        if let Some(id) = self.core.io.cbuf.get_mut(5..9) {
            id.copy_from_slice(&last.to_le_bytes());
        }
        Direct::Go
    }

    /// The server's answer to a command naming a statement it does not have (none for
    /// the commands that get no answer).
    fn unknown_stmt(&mut self, cmd: u8, vid: u32) {
        let what = match cmd {
            consts::COM_STMT_CLOSE | consts::COM_STMT_SEND_LONG_DATA => return,
            consts::COM_STMT_RESET => "mysqld_stmt_reset",
            consts::COM_STMT_FETCH => "mysqld_stmt_fetch",
            consts::COM_STMT_BULK_EXECUTE => "mysqld_stmt_bulk_execute",
            _ => "mysqld_stmt_execute",
        };
        let msg = format!("Unknown prepared statement handler ({vid}) given to {what}");
        queue_err(
            &mut self.core.io.to_client,
            1,
            consts::ER_UNKNOWN_STMT_HANDLER,
            "HY000",
            &msg,
        );
    }

    /// A statement command from a client in transaction mode, once it holds a server
    /// connection.
    pub(super) fn stmt_command(&mut self, cmd: u8, len: usize) -> Result<Cmd, End> {
        let payload = &self.core.io.cbuf[4..4 + len];
        let Some(vid) = super::state::stmt_id(payload) else {
            return Ok(Cmd::Forward);
        };
        if cmd == consts::COM_STMT_SEND_LONG_DATA {
            // The data waits on this connection for the execute.
            self.hold_once = true;
        }
        if cmd == consts::COM_STMT_CLOSE {
            if self.stmts.remove(&vid).is_some_and(|s| s.cursor) {
                self.update_cursor_pin();
            }
            return Ok(Cmd::Consumed);
        }
        let Some(st) = self.stmts.get(&vid) else {
            self.unknown_stmt(cmd, vid);
            return Ok(Cmd::Consumed);
        };
        let (h, sql) = (st.hash, st.sql.clone());
        let Some(lease) = self.core.lease.as_mut() else {
            return Ok(Cmd::Forward);
        };
        let Some(sid) = lease.conn.stmts.get(h) else {
            // Prepare it here first; this command waits for the answer.
            let cap = lease.pool().settings().statement_cache;
            if let Some((_, old)) = lease.conn.stmts.make_room(cap) {
                self.core.io.to_server.extend_from_slice(&close_packet(old));
            }
            if self.tracker.expect(consts::COM_STMT_PREPARE) {
                self.origins.push_back(Origin::InjectedPrepare { hash: h });
            }
            prepare_packet(&mut self.core.io.to_server, &sql);
            return Ok(Cmd::Blocked);
        };
        let out = if cmd == consts::COM_STMT_EXECUTE {
            self.note_execute(vid, len)?;
            let Some(st) = self.stmts.get(&vid) else {
                return Ok(Cmd::Consumed);
            };
            execute_payload(st, &self.core.io.cbuf[4..4 + len], sid)
        } else if cmd == consts::COM_STMT_BULK_EXECUTE {
            let payload = &self.core.io.cbuf[4..4 + len];
            let Some(st) = self.stmts.get_mut(&vid) else {
                return Ok(Cmd::Consumed);
            };
            let out = bulk_payload(st, payload, sid);
            if len >= packet::MAX_PAYLOAD && out.len() != len {
                return Err(End::Failed(crate::error::Error::new(
                    crate::error::Kind::Unsupported,
                    crate::error::Side::Client,
                    "a 16 MiB+ COM_STMT_BULK_EXECUTE without parameter types cannot move to another server connection",
                )));
            }
            out
        } else {
            let mut out = self.core.io.cbuf[4..4 + len].to_vec();
            out[1..5].copy_from_slice(&sid.to_le_bytes());
            out
        };
        if cmd == consts::COM_STMT_RESET
            && let Some(st) = self.stmts.get_mut(&vid)
            && st.cursor
        {
            st.cursor = false;
            self.update_cursor_pin();
        }
        if self.tracker.expect(cmd) {
            self.origins
                .push_back(Origin::Client { cmd, effects: None });
            crate::session::judge::digest_sent(&mut self.core, 0);
        }
        if len == packet::MAX_PAYLOAD && out.len() == len {
            // The first part of a split packet: the rest follows from the client as is.
            let l = len.to_le_bytes();
            self.core
                .io
                .to_server
                .extend_from_slice(&[l[0], l[1], l[2], 0]);
            self.core.io.to_server.extend_from_slice(&out);
            self.c_cont = true;
            self.c_logical = u32::try_from(len).unwrap_or(u32::MAX);
            self.c_seq = 0;
        } else {
            let mut seq = 0;
            packet::write_packet(&mut *self.core.io.to_server, &mut seq, &out);
        }
        Ok(Cmd::Consumed)
    }

    /// Notes what a COM_STMT_EXECUTE (`len` payload bytes at the start of the client
    /// buffer) tells: the parameter types it carries, a cursor it opens.
    pub(super) fn note_execute(&mut self, vid: u32, len: usize) -> Result<(), End> {
        let payload = &self.core.io.cbuf[4..4 + len];
        let Some(st) = self.stmts.get_mut(&vid) else {
            return Ok(());
        };
        let flags = payload.get(5).copied().unwrap_or(0);
        if flags & consts::CURSOR_TYPE_READ_ONLY != 0 && !st.cursor {
            st.cursor = true;
            self.core
                .ledger
                .set_pin(PinReason::HoldCursor, true, &self.core.shared.pins);
        }
        if st.params == 0 {
            return Ok(());
        }
        let bound_at = 10 + usize::from(st.params).div_ceil(8);
        match payload.get(bound_at) {
            Some(1) => {
                let types_len = 2 * usize::from(st.params);
                if let Some(t) = payload.get(bound_at + 1..bound_at + 1 + types_len) {
                    st.types = Some(t.to_vec());
                }
            }
            Some(0) if st.types.is_some() && len >= packet::MAX_PAYLOAD => {
                return Err(End::Failed(crate::error::Error::new(
                    crate::error::Kind::Unsupported,
                    crate::error::Side::Client,
                    "a 16 MiB+ COM_STMT_EXECUTE without parameter types cannot move to another server connection",
                )));
            }
            _ => {}
        }
        Ok(())
    }

    fn update_cursor_pin(&mut self) {
        let open = self.stmts.any_cursor();
        self.core
            .ledger
            .set_pin(PinReason::HoldCursor, open, &self.core.shared.pins);
    }

    /// The first packet of the answer to a client's COM_STMT_PREPARE, already queued for
    /// the client at `at`: gives the client its own statement id.
    pub(super) fn client_prepared(&mut self, hash: u128, sql: Bytes, at: usize) {
        let Some(p) = self.tracker.last_prepare() else {
            return;
        };
        if let Some(l) = self.core.lease.as_mut() {
            let cap = l.pool().settings().statement_cache;
            if let Some((_, old)) = l.conn.stmts.make_room(cap) {
                self.core.io.to_server.extend_from_slice(&close_packet(old));
            }
            if let Some(old) = l.conn.stmts.insert(hash, p.statement_id) {
                self.core.io.to_server.extend_from_slice(&close_packet(old));
            }
        }
        let plain = sluice_sql::surely_plain_in(&sql, sluice_sql::Dialect::MySql)
            && self.core.shared.my.effects.of(&sql).is_none();
        let vid = self.stmts.add(ClientStmt {
            hash,
            reads_id: super::state::reads_last_insert_id(&sql),
            sql,
            params: p.params,
            types: None,
            cursor: false,
            plain,
            class: Default::default(),
        });
        // Header (4 bytes), then 0x00, then the statement id.
        if let Some(id) = self.core.io.to_client.get_mut(at + 5..at + 9) {
            id.copy_from_slice(&vid.to_le_bytes());
        }
    }

    /// Sluice's own COM_STMT_PREPARE succeeded: the waiting command can go.
    pub(super) fn injected_prepared(&mut self, hash: u128) {
        if let (Some(p), Some(l)) = (self.tracker.last_prepare(), self.core.lease.as_mut())
            && let Some(old) = l.conn.stmts.insert(hash, p.statement_id)
        {
            self.core.io.to_server.extend_from_slice(&close_packet(old));
        }
    }
}

/// The text of a COM_STMT_PREPARE whose packet (`len` payload bytes) starts `cbuf`.
pub(super) fn prepare_text(cbuf: &[u8], len: usize) -> Bytes {
    Bytes::copy_from_slice(cbuf.get(5..4 + len).unwrap_or_default())
}

/// A COM_STMT_EXECUTE for the server: the client's `payload` with the server's statement
/// id, and the client's own parameter types where it sends none.
pub(super) fn execute_payload(st: &ClientStmt, payload: &[u8], id: u32) -> Vec<u8> {
    let mut out = payload.to_vec();
    if let Some(i) = out.get_mut(1..5) {
        i.copy_from_slice(&id.to_le_bytes());
    }
    if st.params == 0 {
        return out;
    }
    let bound_at = 10 + usize::from(st.params).div_ceil(8);
    if let (Some(0), Some(types)) = (out.get(bound_at), &st.types) {
        out[bound_at] = 1;
        out.splice(bound_at + 1..bound_at + 1, types.iter().copied());
    }
    out
}

/// A COM_STMT_BULK_EXECUTE for the server: the client's `payload` with the server's
/// statement id. Types it sends are noted for later commands; where it sends none (the
/// server is to use those of the statement's last execution, on whichever connection),
/// the client's own are spliced in.
pub(super) fn bulk_payload(st: &mut ClientStmt, payload: &[u8], id: u32) -> Vec<u8> {
    let mut out = payload.to_vec();
    if let Some(i) = out.get_mut(1..5) {
        i.copy_from_slice(&id.to_le_bytes());
    }
    let Some(f) = payload.get(5..7) else {
        return out;
    };
    let flags = u16::from_le_bytes([f[0], f[1]]);
    let types_len = 2 * usize::from(st.params);
    if flags & consts::STMT_BULK_FLAG_SEND_TYPES_TO_SERVER != 0 {
        if let Some(t) = payload.get(7..7 + types_len) {
            st.types = Some(t.to_vec());
        }
    } else if let Some(types) = &st.types {
        let with = (flags | consts::STMT_BULK_FLAG_SEND_TYPES_TO_SERVER).to_le_bytes();
        out[5..7].copy_from_slice(&with);
        out.splice(7..7, types.iter().copied());
    }
    out
}

/// A COM_STMT_CLOSE packet (no answer comes).
pub(super) fn close_packet(id: u32) -> [u8; 9] {
    let mut p = [5, 0, 0, 0, consts::COM_STMT_CLOSE, 0, 0, 0, 0];
    p[5..].copy_from_slice(&id.to_le_bytes());
    p
}

/// Appends a COM_STMT_PREPARE packet for `sql`.
pub(super) fn prepare_packet(out: &mut bytes::BytesMut, sql: &[u8]) {
    let mut p = Vec::with_capacity(sql.len() + 1);
    p.push(consts::COM_STMT_PREPARE);
    p.extend_from_slice(sql);
    let mut seq = 0;
    packet::write_packet(out, &mut seq, &p);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(types: Option<Vec<u8>>) -> ClientStmt {
        ClientStmt {
            hash: 1,
            sql: Bytes::from_static(b"INSERT INTO t VALUES (?, ?)"),
            params: 2,
            types,
            cursor: false,
            plain: false,
            reads_id: false,
            class: Default::default(),
        }
    }

    #[test]
    fn bulk_types_are_noted_and_spliced_in() {
        // Client id 7, types sent (flag 128), one row.
        let sent = [
            0xfa, 7, 0, 0, 0, 128, 0, 3, 0, 0xfd, 0, 0, 1, 0, 0, 0, 0, 1, b'a',
        ];
        let mut st = stmt(None);
        let out = bulk_payload(&mut st, &sent, 42);
        assert_eq!(out[1..5], 42u32.to_le_bytes());
        assert_eq!(out[5..], sent[5..]);
        assert_eq!(st.types.as_deref(), Some(&[3, 0, 0xfd, 0][..]));
        // Without types: the noted ones go in, with the flag.
        let bare = [0xfa, 7, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, b'b'];
        let out = bulk_payload(&mut st, &bare, 43);
        assert_eq!(out[1..5], 43u32.to_le_bytes());
        assert_eq!(out[5..7], [128, 0]);
        assert_eq!(out[7..11], [3, 0, 0xfd, 0]);
        assert_eq!(out[11..], bare[7..]);
        // None known: sent as it is.
        let out = bulk_payload(&mut stmt(None), &bare, 44);
        assert_eq!(out[5..], bare[5..]);
    }
}
