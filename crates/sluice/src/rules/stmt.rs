//! What the rules need of a statement: its facts (kind, digest, tables) and which
//! rules' statement fields it meets, cached by digest id. Statements that differ only
//! in their literals share one entry: a statement costs one pass over its bytes that
//! leaves its values out (`sluice_sql::values_key`) and a lookup, or, the first time
//! its text is seen with any values, one pass of the scanner (`sluice_sql::shape`,
//! which builds its digest in a reused buffer and allocates nothing) and a lookup; the
//! full facts and the regexes on the digest text run once per digest id. Patterns on
//! the text itself run per statement, where rules have any.

use super::{Bits, RuleSet};
use parking_lot::Mutex;
use sluice_sql::{Dialect, Facts};
use std::collections::HashMap;
use std::sync::Arc;

/// A statement as the rules see it.
#[derive(Debug)]
pub struct Statement {
    pub facts: Arc<Facts>,
    /// The rules whose statement fields it meets.
    pub(super) matches: Bits,
    /// The same statement where no pattern on the text matches (made the first time
    /// one is seen: most statements meet none, and need no copy of their own then).
    unmatched_text: std::sync::OnceLock<Arc<Statement>>,
}

/// Entries kept per shard; a full shard starts again empty (an application has a few
/// hundred statement shapes).
const PER_SHARD: usize = 1024;
const SHARDS: usize = 16;

/// Statements by digest id, for one rule set.
pub struct StatementCache {
    dialect: Dialect,
    /// By a 128-bit hash of the digest text (not the 64-bit id, which a crafted
    /// statement could share with another).
    shards: [Mutex<HashMap<u128, Arc<Statement>, sluice_sql::Prehashed>>; SHARDS],
}

impl StatementCache {
    pub fn new(dialect: Dialect) -> StatementCache {
        StatementCache {
            dialect,
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }

    fn cached(&self, key: u128) -> Option<Arc<Statement>> {
        self.shards[(key as usize) % SHARDS]
            .lock()
            .get(&key)
            .cloned()
    }

    fn keep(&self, key: u128, stmt: &Arc<Statement>) {
        let mut map = self.shards[(key as usize) % SHARDS].lock();
        if map.len() >= PER_SHARD {
            map.clear();
        }
        map.insert(key, stmt.clone());
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The statement `text`, as `rules` see it when `who` runs it.
    pub fn get(&self, rules: &RuleSet, text: &[u8], who: &super::Who) -> Arc<Statement> {
        // First by the text with its values left out (a pass over the bytes, no
        // digest): a statement seen before with other values is found at once.
        let values = sluice_sql::values_key(text, self.dialect);
        let stmt = match values.and_then(|k| self.cached(k)) {
            Some(s) => s,
            None => {
                let shape = sluice_sql::shape(text, self.dialect);
                let stmt = match self.cached(shape.key) {
                    Some(s) => s,
                    None => {
                        let facts = Arc::new(sluice_sql::facts(text, self.dialect));
                        let matches = rules.statement_matches(&facts);
                        let stmt = Arc::new(Statement {
                            facts,
                            matches,
                            unmatched_text: std::sync::OnceLock::new(),
                        });
                        self.keep(shape.key, &stmt);
                        stmt
                    }
                };
                if let Some(k) = values.filter(|_| shape.plain) {
                    self.keep(k, &stmt);
                }
                stmt
            }
        };
        if !rules.on_text_patterns(who) {
            return stmt;
        }
        let with_text = |matches| {
            Arc::new(Statement {
                facts: stmt.facts.clone(),
                matches,
                unmatched_text: std::sync::OnceLock::new(),
            })
        };
        if !rules.text_matches(text) {
            return (stmt.unmatched_text)
                .get_or_init(|| with_text(rules.with_text(&stmt.matches, None)))
                .clone();
        }
        with_text(rules.with_text(&stmt.matches, Some(text)))
    }
}
