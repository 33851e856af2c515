//! What each statement text does to session state, computed once per distinct text.
//!
//! Scanning SQL is cheap but not free, and applications send the same few statements
//! over and over: the result is cached by a 128-bit hash of the text.

use parking_lot::Mutex;
use sluice_sql::Effect;
use std::collections::HashMap;
use std::sync::Arc;

/// The effects of a statement text, or `None` when it touches no session state (the
/// common case: plain queries and DML).
pub type Effects = Option<Arc<[Effect]>>;

const CAPACITY: usize = 16_384;

#[derive(Default)]
pub struct EffectCache {
    map: Mutex<HashMap<u128, Effects, sluice_sql::Prehashed>>,
    dialect: sluice_sql::Dialect,
}

impl EffectCache {
    pub fn new(dialect: sluice_sql::Dialect) -> Self {
        EffectCache {
            map: Mutex::default(),
            dialect,
        }
    }

    pub fn of(&self, sql: &[u8]) -> Effects {
        // Most statements are plain queries, often each with its own literals: decide
        // those without hashing, scanning or caching.
        if sluice_sql::surely_plain_in(sql, self.dialect) {
            return None;
        }
        let key = xxhash_rust::xxh3::xxh3_128(sql);
        if let Some(e) = self.map.lock().get(&key) {
            return e.clone();
        }
        let all = match self.dialect {
            sluice_sql::Dialect::Postgres => sluice_sql::effects(sql),
            sluice_sql::Dialect::MySql => sluice_sql::effects_mysql(sql),
        };
        let effects: Effects = if all.iter().all(|e| *e == Effect::None) {
            None
        } else {
            Some(all.into())
        };
        let mut map = self.map.lock();
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(key, effects.clone());
        effects
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_and_filters() {
        let c = EffectCache::default();
        assert!(c.of(b"select 1").is_none());
        let e = c.of(b"set a = 1; select 2").unwrap();
        assert_eq!(e.len(), 2);
        assert!(Arc::ptr_eq(&e, &c.of(b"set a = 1; select 2").unwrap()));
    }
}
