//! Prepared statements in transaction mode: a client's named statements get pool-wide
//! names (a hash of query text, parameter types and the settings literals are parsed
//! under), so the same statement prepared by
//! many clients exists once per server connection, and a statement is prepared on a
//! connection the first time it runs there.

use crate::session::effects::Effects;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc as Rc;

pub struct Stmt {
    pub hash: u128,
    pub global: Bytes,
    pub query: Bytes,
    /// Parameter type count and oids, as in the Parse message.
    pub types: Bytes,
    pub effects: Effects,
    /// The fingerprint of the settings it is parsed under (part of `hash`).
    pub parsed_under: u64,
    /// Where its executions may run (a split route's question), found the first time
    /// it is asked rather than at every Bind.
    class: crate::session::reroute::KeptClass,
}

impl Stmt {
    /// Where its executions may run.
    pub fn class(&self) -> sluice_sql::Class {
        self.class.of(&self.query, sluice_sql::Dialect::Postgres)
    }
}

impl Stmt {
    /// `current` maps the statement's hash to the one it goes by now (see
    /// `Pool::current_statement`).
    pub fn new(
        query: Bytes,
        types: Bytes,
        effects: Effects,
        parsed_under: u64,
        current: impl Fn(u128) -> u128,
    ) -> Stmt {
        let hash = current(hash(&query, &types, parsed_under));
        Stmt {
            hash,
            global: global_name(hash),
            query,
            types,
            effects,
            parsed_under,
            class: Default::default(),
        }
    }
}

/// A 128-bit hash of query text, parameter types and the fingerprint of the settings
/// it is parsed under (`parsed_under`, see `backend::pg::parse_fingerprint`): two
/// different statements sharing a pool-wide name would run each other's SQL, so
/// collisions must be out of reach.
pub fn hash(query: &[u8], types: &[u8], parsed_under: u64) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(query);
    h.update(&[0]);
    h.update(types);
    h.update(&parsed_under.to_le_bytes());
    h.digest128()
}

pub fn global_name(hash: u128) -> Bytes {
    Bytes::from(format!("sluice_{hash:032x}"))
}

impl super::Relay {
    /// A schema change (CREATE, ALTER, DROP): statements prepared from now on are named
    /// afresh (see `Pool::current_statement`).
    pub(super) fn note_ddl(&self, sql: &[u8]) {
        let w = sluice_sql::first_word(sql);
        if [&b"create"[..], b"alter", b"drop"]
            .iter()
            .any(|k| w.eq_ignore_ascii_case(k))
        {
            self.core
                .shared
                .schema_epoch
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// A client's protocol-level named statements.
#[derive(Default)]
pub struct Statements {
    /// (Boxed, and None when empty: most sessions hold none, and every one holds this.)
    #[expect(
        clippy::box_collection,
        reason = "a session's inline size, not the map's"
    )]
    map: Option<Box<HashMap<Bytes, Rc<Stmt>, foldhash::fast::RandomState>>>,
}

impl Statements {
    /// The statement `name` for a client whose settings now have fingerprint
    /// `parsed_under`: the one it prepared, or, if its settings changed since, the same
    /// text under the pool-wide name for the current settings. A server connection
    /// lacking the statement prepares it under the client's current settings, and that
    /// copy must not go by a name other clients reach with the old ones.
    pub fn current(
        &mut self,
        name: &[u8],
        parsed_under: u64,
        current: impl Fn(u128) -> u128,
    ) -> Option<Rc<Stmt>> {
        let st = self.map.as_mut()?.get_mut(name)?;
        if st.parsed_under != parsed_under {
            *st = Rc::new(Stmt::new(
                st.query.clone(),
                st.types.clone(),
                st.effects.clone(),
                parsed_under,
                current,
            ));
        }
        Some(st.clone())
    }

    /// The text of the client's statement `name`.
    pub fn query(&self, name: &[u8]) -> Option<&[u8]> {
        self.map.as_ref()?.get(name).map(|s| &s.query[..])
    }

    /// Where the client's statement `name` may run.
    pub fn class(&self, name: &[u8]) -> Option<sluice_sql::Class> {
        self.map.as_ref()?.get(name).map(|s| s.class())
    }

    pub fn insert(&mut self, name: Bytes, stmt: Rc<Stmt>) {
        self.map.get_or_insert_default().insert(name, stmt);
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<Rc<Stmt>> {
        let map = self.map.as_mut()?;
        let gone = map.remove(name);
        if map.is_empty() {
            self.map = None;
        }
        gone
    }

    pub fn clear(&mut self) {
        self.map = None;
    }
}
