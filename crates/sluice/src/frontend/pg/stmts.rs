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

/// A client's protocol-level named statements.
#[derive(Default)]
pub struct Statements {
    map: HashMap<Bytes, Rc<Stmt>>,
}

impl Statements {
    pub fn get(&self, name: &[u8]) -> Option<Rc<Stmt>> {
        self.map.get(name).cloned()
    }

    pub fn insert(&mut self, name: Bytes, stmt: Rc<Stmt>) {
        self.map.insert(name, stmt);
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<Rc<Stmt>> {
        self.map.remove(name)
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}
