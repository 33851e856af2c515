//! The session-state ledger: what a client changed on its server connection.
//!
//! Entries are either replayable (session-level SETs, re-applied on the next server
//! connection the client gets) or pinning (state that lives on one server connection:
//! SQL-level prepared statements, temp tables, advisory locks, LISTEN, WITH HOLD cursors,
//! set_config). A pinned client keeps its server connection until the state is cleared.
//! Effects are applied only once the server confirms the statement, and SETs made inside
//! a transaction only when it commits.

use crate::sets::{Sets, identity_default};
use sluice_sql::Effect;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PinReason {
    SqlPrepare,
    TempTable,
    AdvisoryLock,
    Listen,
    HoldCursor,
    Opaque,
    UserVariable,
    TableLock,
    /// MySQL protocol-level prepared statements (COM_STMT_PREPARE).
    Prepared,
    /// The server connection is logged in as the user a MySQL client changed to with
    /// COM_CHANGE_USER (pass-through: only the server could check the password).
    ChangeUser,
    /// SET ROLE / SET SESSION AUTHORIZATION: who the session runs as (see sets.rs).
    Role,
}

impl PinReason {
    pub const ALL: [PinReason; 11] = [
        PinReason::SqlPrepare,
        PinReason::TempTable,
        PinReason::AdvisoryLock,
        PinReason::Listen,
        PinReason::HoldCursor,
        PinReason::Opaque,
        PinReason::UserVariable,
        PinReason::TableLock,
        PinReason::Prepared,
        PinReason::ChangeUser,
        PinReason::Role,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PinReason::SqlPrepare => "sql_prepare",
            PinReason::TempTable => "temp_table",
            PinReason::AdvisoryLock => "advisory_lock",
            PinReason::Listen => "listen",
            PinReason::HoldCursor => "hold_cursor",
            PinReason::Opaque => "opaque_state",
            PinReason::UserVariable => "user_variable",
            PinReason::TableLock => "table_lock",
            PinReason::Prepared => "prepared_statement",
            PinReason::ChangeUser => "change_user",
            PinReason::Role => "role",
        }
    }
}

/// Process-wide counts of pins taken, by reason (for the admin console and metrics).
#[derive(Debug, Default)]
pub struct PinCounters([AtomicU64; 11]);

impl PinCounters {
    pub fn bump(&self, r: PinReason) {
        self.0[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, r: PinReason) -> u64 {
        self.0[r as usize].load(Ordering::Relaxed)
    }
}

/// What a session changed on its server connections. Most sessions change nothing, and
/// every connected client holds a ledger: an empty one is a null pointer, and reads go
/// through [`Entries`] (an empty set of them when there is none).
#[derive(Debug, Default, Clone)]
pub struct Ledger(Option<Box<Entries>>);

#[derive(Debug, Default, Clone)]
pub struct Entries {
    /// Session-level SETs to replay, by parameter: the statement text, in the order
    /// the client last set each.
    pub sets: Sets,
    pins: Pins,
    /// What fewer sessions have (most that have entries have only SETs: the ones a
    /// driver sends as it connects), in a box of its own.
    more: Option<Box<More>>,
}

#[derive(Debug, Default, Clone)]
struct More {
    /// SET / RESET inside the open transaction: applied at COMMIT, dropped at ROLLBACK.
    staged: Vec<(String, Option<String>)>,
    sql_prepared: BTreeSet<String>,
    hold_cursors: BTreeSet<String>,
}

/// Pin reasons, as bits (`1 << reason as u16`).
#[derive(Debug, Default, Clone, Copy)]
struct Pins(u16);

impl Pins {
    /// Adds `r`: whether it was not there.
    fn insert(&mut self, r: PinReason) -> bool {
        let bit = 1 << (r as u16);
        let new = self.0 & bit == 0;
        self.0 |= bit;
        new
    }

    fn remove(&mut self, r: &PinReason) {
        self.0 &= !(1 << (*r as u16));
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    fn iter(self) -> impl Iterator<Item = PinReason> {
        PinReason::ALL
            .into_iter()
            .filter(move |r| self.0 & 1 << (*r as u16) != 0)
    }
}

static NOTHING: Entries = Entries {
    sets: Sets::EMPTY,
    pins: Pins(0),
    more: None,
};

impl std::ops::Deref for Ledger {
    type Target = Entries;
    fn deref(&self) -> &Entries {
        self.0.as_deref().unwrap_or(&NOTHING)
    }
}

impl Ledger {
    fn entries(&mut self) -> &mut Entries {
        self.0.get_or_insert_default()
    }

    /// Lets go of the entries once they are all empty again.
    fn shrink(&mut self) {
        if let Some(e) = self.0.as_deref_mut()
            && e.more.as_deref().is_some_and(More::is_empty)
        {
            e.more = None;
        }
        if self.0.as_deref().is_some_and(Entries::is_empty) {
            self.0 = None;
        }
    }

    /// Sets or clears a pin the protocol tracks itself (e.g. open prepared statements).
    pub fn set_pin(&mut self, r: PinReason, on: bool, counters: &PinCounters) {
        if on {
            self.entries().pin(r, counters);
        } else if let Some(e) = self.0.as_deref_mut() {
            e.pins.remove(&r);
            self.shrink();
        }
    }

    /// The transaction ended: keep its SETs if it committed.
    pub fn end_transaction(&mut self, committed: bool) {
        if let Some(e) = self.0.as_deref_mut() {
            e.end_transaction(committed);
            self.shrink();
        }
    }

    /// Applies a statement the server has confirmed. `in_tx`: it ran inside an explicit
    /// transaction block.
    pub fn apply(&mut self, effect: &Effect, in_tx: bool, counters: &PinCounters) {
        match effect {
            Effect::None
            | Effect::Begin
            | Effect::TxEnd
            | Effect::SetLocal
            | Effect::KeepForNext => {}
            Effect::DiscardAll => self.0 = None,
            _ => {
                self.entries().apply(effect, in_tx, counters);
                self.shrink();
            }
        }
    }
}

impl Entries {
    fn is_empty(&self) -> bool {
        // Every field named: one added later must be said here, or the ledger would
        // drop it with the rest.
        let Entries { sets, pins, more } = self;
        sets.is_empty() && pins.is_empty() && more.as_deref().is_none_or(More::is_empty)
    }

    /// The rarer entries, made now if there are none.
    fn more(&mut self) -> &mut More {
        self.more.get_or_insert_default()
    }

    pub fn is_pinned(&self) -> bool {
        !self.pins.is_empty() || self.sets.identity()
    }

    /// The pin reasons as bits (`1 << reason as u16`), as the client book keeps them.
    pub fn pin_mask(&self) -> u16 {
        self.pin_reasons().fold(0, |m, r| m | 1 << (r as u16))
    }

    pub fn pin_reasons(&self) -> impl Iterator<Item = PinReason> + '_ {
        let role = self.sets.identity().then_some(PinReason::Role);
        self.pins.iter().chain(role)
    }

    fn pin(&mut self, r: PinReason, counters: &PinCounters) {
        if self.pins.insert(r) {
            counters.bump(r);
        }
    }

    fn set(&mut self, name: String, sql: Option<String>, in_tx: bool) {
        if in_tx {
            self.more().staged.push((name, sql));
            return;
        }
        match sql {
            Some(s) if !identity_default(&name, &s) => self.sets.insert(name, s),
            _ => self.sets.remove(&name),
        }
    }

    fn end_transaction(&mut self, committed: bool) {
        let Some(more) = self.more.as_deref_mut() else {
            return;
        };
        let staged = std::mem::take(&mut more.staged);
        if committed {
            for (name, sql) in staged {
                self.set(name, sql, false);
            }
        }
    }

    fn apply(&mut self, effect: &Effect, in_tx: bool, counters: &PinCounters) {
        match effect {
            Effect::Set { name, sql } => {
                if !identity_default(name, sql) && !self.sets.identity() {
                    // Counted when it pins (if the transaction commits, or now).
                    if crate::sets::IDENTITY.contains(&name.as_str()) {
                        counters.bump(PinReason::Role);
                    }
                }
                self.set(name.clone(), Some(sql.clone()), in_tx)
            }
            Effect::Reset { name } => self.set(name.clone(), None, in_tx),
            Effect::ResetAll => {
                if in_tx {
                    let names: Vec<_> = self.sets.keys().cloned().collect();
                    self.more()
                        .staged
                        .extend(names.into_iter().map(|n| (n, None)));
                } else {
                    self.sets.clear();
                }
            }
            Effect::Prepare { name } => {
                self.more().sql_prepared.insert(name.clone());
                self.pin(PinReason::SqlPrepare, counters);
            }
            Effect::Deallocate { name } => {
                let prepared = self.more.as_deref_mut().map(|m| &mut m.sql_prepared);
                if prepared.is_none_or(|p| {
                    p.remove(name);
                    p.is_empty()
                }) {
                    self.pins.remove(&PinReason::SqlPrepare);
                }
            }
            Effect::DeallocateAll => {
                if let Some(m) = self.more.as_deref_mut() {
                    m.sql_prepared.clear();
                }
                self.pins.remove(&PinReason::SqlPrepare);
            }
            Effect::DiscardAll => *self = Entries::default(),
            Effect::DiscardTemp => {
                self.pins.remove(&PinReason::TempTable);
            }
            Effect::Listen => self.pin(PinReason::Listen, counters),
            Effect::UnlistenAll => {
                self.pins.remove(&PinReason::Listen);
            }
            Effect::CreateTemp => self.pin(PinReason::TempTable, counters),
            Effect::DeclareHold { name } => {
                self.more().hold_cursors.insert(name.clone());
                self.pin(PinReason::HoldCursor, counters);
            }
            Effect::CloseCursor { name } => {
                let cursors = self.more.as_deref_mut().map(|m| &mut m.hold_cursors);
                if cursors.is_none_or(|c| {
                    c.remove(name);
                    c.is_empty()
                }) {
                    self.pins.remove(&PinReason::HoldCursor);
                }
            }
            Effect::CloseAllCursors => {
                if let Some(m) = self.more.as_deref_mut() {
                    m.hold_cursors.clear();
                }
                self.pins.remove(&PinReason::HoldCursor);
            }
            Effect::AdvisoryLock => self.pin(PinReason::AdvisoryLock, counters),
            Effect::AdvisoryUnlockAll => {
                self.pins.remove(&PinReason::AdvisoryLock);
            }
            Effect::Opaque => self.pin(PinReason::Opaque, counters),
            Effect::UserVariable => self.pin(PinReason::UserVariable, counters),
            Effect::LockTables => self.pin(PinReason::TableLock, counters),
            Effect::UnlockTables => {
                self.pins.remove(&PinReason::TableLock);
            }
            Effect::None
            | Effect::Begin
            | Effect::TxEnd
            | Effect::SetLocal
            | Effect::KeepForNext => {}
        }
    }
}

impl More {
    fn is_empty(&self) -> bool {
        // Every field named, as in `Entries::is_empty`.
        let More {
            staged,
            sql_prepared,
            hold_cursors,
        } = self;
        staged.is_empty() && sql_prepared.is_empty() && hold_cursors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str) -> Effect {
        Effect::Set {
            name: name.into(),
            sql: format!("SET {name} = 1"),
        }
    }

    #[test]
    fn sets_follow_transactions() {
        let c = PinCounters::default();
        let mut l = Ledger::default();
        l.apply(&set("a"), false, &c);
        l.apply(&set("b"), true, &c);
        l.end_transaction(false);
        assert_eq!(l.sets.keys().collect::<Vec<_>>(), ["a"]);
        l.apply(&set("b"), true, &c);
        l.apply(&Effect::Reset { name: "a".into() }, true, &c);
        l.end_transaction(true);
        assert_eq!(l.sets.keys().collect::<Vec<_>>(), ["b"]);
        l.apply(&Effect::ResetAll, false, &c);
        assert!(l.sets.is_empty());
    }

    #[test]
    fn pins_and_releases() {
        let c = PinCounters::default();
        let mut l = Ledger::default();
        l.apply(&Effect::Prepare { name: "p".into() }, false, &c);
        l.apply(&Effect::DeclareHold { name: "k".into() }, false, &c);
        assert!(l.is_pinned());
        l.apply(&Effect::Deallocate { name: "p".into() }, false, &c);
        assert!(l.is_pinned());
        l.apply(&Effect::CloseCursor { name: "k".into() }, false, &c);
        assert!(!l.is_pinned());
        l.apply(&Effect::CreateTemp, false, &c);
        l.apply(&Effect::Listen, false, &c);
        l.apply(&Effect::DiscardAll, false, &c);
        assert!(!l.is_pinned());
        assert_eq!(c.get(PinReason::SqlPrepare), 1);
        assert_eq!(c.get(PinReason::Listen), 1);
    }
}
