//! Transaction pooling for MySQL sessions: what each command does to the client's
//! session state (through the shared ledger), how a server connection the client newly
//! holds is brought to that state (replayed SETs, USE, SET NAMES; a reset first when the
//! connection carries state the client does not have), and which state pins the client
//! (user variables, temporary tables, locks, prepared statements).

use super::{Origin, Relay};
use crate::session::effects::Effects;
use sluice_sql::Effect;
use sluice_wire_mysql::codec::Reader;
use sluice_wire_mysql::{consts, packet};
use std::sync::Arc;

impl Relay {
    /// The effects of the client's command (tx mode), known before it is sent.
    pub(super) fn command_effects(&mut self, cmd: u8, payload: &[u8]) -> Effects {
        let body = payload.get(1..).unwrap_or_default();
        match cmd {
            consts::COM_QUERY => self.core.shared.my.effects.of(body),
            consts::COM_INIT_DB => Some(Arc::new([Effect::Set {
                name: "schema".into(),
                sql: format!("USE `{}`", String::from_utf8_lossy(body).replace('`', "``")),
            }])),
            _ => None,
        }
    }

    /// Session mode: of a command's effects only a change of database (COM_INIT_DB,
    /// `USE`), which the rules' `database` field and the digests follow.
    pub(super) fn schema_effects(&mut self, cmd: u8, payload: &[u8]) -> Effects {
        let body = payload.get(1..).unwrap_or_default();
        // (Several statements in one: the effects scanner looks for a USE among them.)
        let is_use = || {
            memchr::memchr(b';', body).is_some()
                || sluice_sql::Tokens::new_in(body, sluice_sql::Dialect::MySql)
                    .next()
                    .is_some_and(|t| t.is("use"))
        };
        if !(cmd == consts::COM_INIT_DB || cmd == consts::COM_QUERY && is_use()) {
            return None;
        }
        let all = self.command_effects(cmd, payload)?;
        let schema: Vec<Effect> = all
            .iter()
            .filter(|e| matches!(e, Effect::Set { name, .. } if name == "schema"))
            .cloned()
            .collect();
        (!schema.is_empty()).then(|| schema.into())
    }

    /// Puts the client's own connection id into a statement that asks for it with
    /// CONNECTION_ID(), unless the client holds the very server connection it was told
    /// of at login (session mode, pass-through). Returns the command's new length.
    pub(super) fn own_session_id(&mut self, len: usize) -> usize {
        // An empty packet has no command (the byte after its header is the next one's).
        let cmd = if len == 0 {
            None
        } else {
            self.core.io.cbuf.get(4).copied()
        };
        if len >= packet::MAX_PAYLOAD
            || self.core.io.cbuf.get(3) != Some(&0)
            || !matches!(cmd, Some(consts::COM_QUERY | consts::COM_STMT_PREPARE))
            || self.core.mode == sluice_config::PoolMode::Session
                && self
                    .core
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.conn.id == self.s.id)
        {
            return len;
        }
        let sql = &self.core.io.cbuf[5..4 + len];
        let dialect = sluice_sql::Dialect::MySql;
        let Some(new) = sluice_sql::session_id::rewrite(sql, dialect, self.s.id) else {
            return len;
        };
        match cmd {
            Some(cmd) => self.replace_command(cmd, len, &new),
            None => len,
        }
    }

    /// Puts command `cmd` with `text` in place of the client's command (`len` bytes at
    /// the start of its buffer); returns the new length (the old one when the text
    /// would not fit one packet).
    pub(super) fn replace_command(&mut self, cmd: u8, len: usize, text: &[u8]) -> usize {
        if text.len() + 1 >= packet::MAX_PAYLOAD || self.core.io.cbuf.len() < 4 + len {
            return len;
        }
        let rest = self.core.io.cbuf.split_off(4 + len);
        self.core.io.cbuf.clear();
        let mut p = Vec::with_capacity(text.len() + 1);
        p.push(cmd);
        p.extend_from_slice(text);
        let mut seq = 0;
        packet::write_packet(&mut *self.core.io.cbuf, &mut seq, &p);
        self.core.io.cbuf.unsplit(rest);
        p.len()
    }

    /// Before a statement that reads LAST_INSERT_ID() (or @@identity), sets it on the
    /// connection to the value the client's last insert produced, wherever that ran.
    pub(super) fn restore_last_insert_id(&mut self, cmd: u8, payload: &[u8]) {
        let Some(id) = self.last_insert() else {
            return;
        };
        if cmd != consts::COM_QUERY && cmd != consts::COM_STMT_PREPARE {
            return;
        }
        if reads_last_insert_id(payload) {
            self.inject(
                format!("SELECT LAST_INSERT_ID({id})").as_bytes(),
                consts::COM_QUERY,
            );
        }
    }

    /// Queues one of Sluice's own commands; its answer goes to nobody.
    pub(super) fn inject(&mut self, body: &[u8], cmd: u8) {
        let mut p = Vec::with_capacity(body.len() + 1);
        p.push(cmd);
        p.extend_from_slice(body);
        if self.tracker.expect(cmd) {
            self.origins.push_back(Origin::Injected);
        }
        let mut seq = 0;
        packet::write_packet(&mut *self.core.io.to_server, &mut seq, &p);
    }

    /// Brings a server connection the client just got to the client's session state:
    /// queues Sluice's own commands before the client's.
    pub(super) fn replay(&mut self) {
        let Some(lease) = self.core.lease.as_mut() else {
            return;
        };
        let conn = &mut lease.conn;
        if conn.applied == self.core.ledger.sets {
            return;
        }
        let mut cmds: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut common = conn.applied.common_prefix(&self.core.ledger.sets);
        if conn
            .applied
            .from(common)
            .any(|(k, _)| !self.core.ledger.sets.contains_key(k))
        {
            // The connection carries settings the client never made: start clean.
            cmds.push((consts::COM_RESET_CONNECTION, Vec::new()));
            if !conn.database.is_empty() {
                cmds.push((consts::COM_INIT_DB, conn.database.as_bytes().to_vec()));
            }
            if conn.tracks_state {
                let track = crate::backend::mysql::TRACK_STATE;
                cmds.push((consts::COM_QUERY, track[1..].to_vec()));
            }
            conn.applied.clear();
            conn.stmts.clear();
            common = 0;
        }
        // The client's SETs past those in common, in the order it made them.
        for (_, sql) in self.core.ledger.sets.from(common) {
            cmds.push((consts::COM_QUERY, sql.as_bytes().to_vec()));
        }
        conn.applied = self.core.ledger.sets.clone();
        for (cmd, body) in cmds {
            self.inject(&body, cmd);
        }
    }

    /// A client command's answer is complete.
    pub(super) fn client_done(&mut self, cmd: u8, ok: bool, effects: Effects, head: &[u8]) {
        if !ok {
            // A failed multi-statement may have run some of its statements.
            if effects
                .as_deref()
                .is_some_and(|e| e.len() > 1 && e.iter().any(|x| *x != Effect::None))
            {
                self.core
                    .ledger
                    .apply(&Effect::Opaque, false, &self.core.shared.pins);
            }
            return;
        }
        if cmd == consts::COM_RESET_CONNECTION {
            // The server keeps the current database through a reset: so does Sluice
            // (or the connection would go back to the pool as if in its own).
            let schema = self.core.ledger.sets.get("schema").cloned();
            self.forget_session_state();
            if let Some(sql) = schema {
                if let Some(l) = self.core.lease.as_mut() {
                    l.conn.applied.insert("schema".into(), sql.clone());
                }
                let e = Effect::Set {
                    name: "schema".into(),
                    sql,
                };
                self.core.ledger.apply(&e, false, &self.core.shared.pins);
            }
            // A reset keeps the user: a client that changed it keeps its connection.
            self.pin_foreign();
        }
        if cmd == consts::COM_CHANGE_USER {
            self.user_changed();
        }
        // The server reports a change of session state no effect Sluice knows of
        // explains (a function or procedure set something): the client keeps the
        // connection.
        if self.core.mode == sluice_config::PoolMode::Transaction
            && cmd != consts::COM_RESET_CONNECTION
            && self.status & consts::SERVER_SESSION_STATE_CHANGED != 0
            && effects
                .as_deref()
                .is_none_or(|e| e.iter().all(|x| *x == Effect::None))
        {
            self.core
                .ledger
                .apply(&Effect::Opaque, false, &self.core.shared.pins);
        }
        // LAST_INSERT_ID() lives on the connection: remember it for the client.
        if head.first() == Some(&0) {
            let id = last_insert_id(head);
            self.note_insert(id);
        }
        for e in effects.iter().flat_map(|e| e.iter()) {
            // Session variables are not transactional in MySQL: they count at once.
            self.core.ledger.apply(e, false, &self.core.shared.pins);
            match e {
                Effect::Set { name, sql } => {
                    if let Some(l) = self.core.lease.as_mut() {
                        l.conn.applied.insert(name.clone(), sql.clone());
                    }
                }
                Effect::KeepForNext => self.hold_once = true,
                _ => {}
            }
        }
    }
}

/// The statement id of a COM_STMT_* packet.
pub(super) fn stmt_id(payload: &[u8]) -> Option<u32> {
    let b = payload.get(1..5)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(super) fn last_insert_id(ok: &[u8]) -> u64 {
    let mut r = Reader::new(ok);
    r.skip(1)
        .and_then(|_| r.lenenc())
        .and_then(|_| r.lenenc())
        .unwrap_or(0)
}

/// Whether a statement may read LAST_INSERT_ID() (or @@identity).
pub(super) fn reads_last_insert_id(sql: &[u8]) -> bool {
    ["last_insert_id", "LAST_INSERT_ID", "identity", "IDENTITY"]
        .iter()
        .any(|w| memchr::memmem::find(sql, w.as_bytes()).is_some())
}

/// Commands that name a prepared statement by id.
pub(super) fn is_stmt_command(cmd: u8) -> bool {
    matches!(
        cmd,
        consts::COM_STMT_EXECUTE
            | consts::COM_STMT_BULK_EXECUTE
            | consts::COM_STMT_SEND_LONG_DATA
            | consts::COM_STMT_CLOSE
            | consts::COM_STMT_RESET
            | consts::COM_STMT_FETCH
    )
}

pub(super) fn known_command(cmd: u8) -> bool {
    matches!(
        cmd,
        consts::COM_INIT_DB
            | consts::COM_QUERY
            | consts::COM_FIELD_LIST
            | consts::COM_STATISTICS
            | consts::COM_PROCESS_KILL
            | consts::COM_PING
            | consts::COM_CHANGE_USER
            | consts::COM_STMT_PREPARE
            | consts::COM_STMT_EXECUTE
            | consts::COM_STMT_SEND_LONG_DATA
            | consts::COM_STMT_CLOSE
            | consts::COM_STMT_RESET
            | consts::COM_SET_OPTION
            | consts::COM_STMT_FETCH
            | consts::COM_RESET_CONNECTION
            | consts::COM_CREATE_DB
            | consts::COM_DROP_DB
            | consts::COM_REFRESH
            | consts::COM_DEBUG
            | consts::COM_PROCESS_INFO
            | consts::COM_STMT_BULK_EXECUTE
    )
}
