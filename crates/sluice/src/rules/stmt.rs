//! What the rules need of a statement, computed once per distinct text: its facts (one
//! pass of `sluice_sql::facts`: kind, digest, tables) and which rules' statement fields
//! it meets. Cached by a 128-bit hash of the text; the regexes on the digest text run
//! once per digest id (statements that differ only in their literals share them).

use super::{Bits, RuleSet};
use parking_lot::Mutex;
use sluice_sql::{Dialect, Facts};
use std::collections::HashMap;
use std::sync::Arc;

/// A statement as the rules see it.
#[derive(Debug)]
pub struct Statement {
    pub facts: Facts,
    /// The rules whose statement fields it meets.
    pub(super) matches: Bits,
}

/// Entries kept per shard; a full shard starts again empty (the working set of an
/// application is a few hundred statements; one-off texts must not grow it).
const PER_SHARD: usize = 2048;
const SHARDS: usize = 16;

/// Statements by text, and digest-pattern matches by digest id, for one rule set.
pub struct StatementCache {
    dialect: Dialect,
    texts: [Mutex<HashMap<u128, Arc<Statement>>>; SHARDS],
    digests: Mutex<HashMap<u64, Arc<[usize]>>>,
}

impl StatementCache {
    pub fn new(dialect: Dialect) -> StatementCache {
        StatementCache {
            dialect,
            texts: std::array::from_fn(|_| Mutex::default()),
            digests: Mutex::default(),
        }
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The statement `text`, as `rules` see it.
    pub fn get(&self, rules: &RuleSet, text: &[u8]) -> Arc<Statement> {
        let key = xxhash_rust::xxh3::xxh3_128(text);
        let shard = &self.texts[(key as usize) % SHARDS];
        if let Some(s) = shard.lock().get(&key) {
            return s.clone();
        }
        let facts = sluice_sql::facts(text, self.dialect);
        let on_digest = self.digest_matches(rules, &facts);
        let matches = rules.statement_matches(&facts, text, &on_digest);
        let stmt = Arc::new(Statement { facts, matches });
        let mut map = shard.lock();
        if map.len() >= PER_SHARD {
            map.clear();
        }
        map.insert(key, stmt.clone());
        stmt
    }

    fn digest_matches(&self, rules: &RuleSet, facts: &Facts) -> Arc<[usize]> {
        if let Some(m) = self.digests.lock().get(&facts.digest) {
            return m.clone();
        }
        let m: Arc<[usize]> = rules.digest_matches(&facts.digest_text).into();
        let mut map = self.digests.lock();
        if map.len() >= PER_SHARD * SHARDS {
            map.clear();
        }
        map.insert(facts.digest, m.clone());
        m
    }
}
