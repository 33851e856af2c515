//! Query rules and table rules: between the session and the router in the flow. Pure, as
//! the router is: [`RuleSet::verdict`] takes what one pass over a statement found
//! ([`Statement`], cached by text in [`StatementCache`]) and who runs it ([`Who`]), and
//! says what to do with it ([`Verdict`]): block it, send it to another cluster or role,
//! rewrite it, mirror it, give it a timeout, log it. No sockets, no awaits; the session
//! (session/judge.rs) asks before it routes a request and acts on the answer in the
//! client's protocol.
//!
//! Cheap by construction: the rules are compiled once into bit masks and two regex sets
//! (patterns on the digest, patterns on the text); a statement's matches are computed
//! when its text is first seen (regexes on the digest once per digest id), a session's
//! when it logs in; the verdict is then a few word operations per 64 rules.

mod stmt;

pub use stmt::{Statement, StatementCache};

use sluice_config::{Config, MatchOn, Protocol, Rule, RuleAction, TargetRole};
use sluice_sql::Kind;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One protocol's rules with the cache of what its statements match.
pub struct Rules {
    pub set: RuleSet,
    pub cache: StatementCache,
}

impl Rules {
    pub fn new(config: &Config, protocol: Protocol) -> Rules {
        let dialect = match protocol {
            Protocol::Postgres => sluice_sql::Dialect::Postgres,
            Protocol::Mysql => sluice_sql::Dialect::MySql,
        };
        Rules {
            set: RuleSet::compile(config, protocol),
            cache: StatementCache::new(dialect),
        }
    }
}

/// A set of rules as bits, one per rule in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
/// (A boxed slice: 16 bytes in every session's `Who`, not a `Vec`'s 24.)
pub struct Bits(Box<[u64]>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)].into_boxed_slice())
    }

    fn set(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    fn clear(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }
}

/// Who runs a statement: the session's side of the match fields.
#[derive(Debug, Clone)]
/// (The listener and its cluster are the session's own `cfg`: every session with rules
/// or digests holds a `Who`, in a box of 96 bytes with them out.)
pub struct Who {
    pub user: Arc<str>,
    pub database: Arc<str>,
    /// The rules whose user, listener and client_address match (database is compared
    /// per statement: MySQL's USE changes it).
    mask: Bits,
}

/// Where a statement goes when a rule or a table rule says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub cluster: Arc<str>,
    /// `None`: as the listener's route would (split: by what the statement does).
    pub role: Option<TargetRole>,
}

/// What to do with a statement. The default is nothing: run it as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Refused: the rule's number and message.
    pub block: Option<(usize, Arc<str>)>,
    /// Sent elsewhere.
    pub route: Option<Destination>,
    /// Names tables of more than one cluster: refused with this message.
    pub cross: Option<String>,
    /// Run as this text instead.
    pub rewrite: Option<Vec<u8>>,
    /// A copy runs on this cluster.
    pub mirror: Option<Arc<str>>,
    pub timeout: Option<Duration>,
    /// Rules that asked for the statement to be logged.
    pub log: Vec<usize>,
}

impl Verdict {
    pub fn is_plain(&self) -> bool {
        *self == Verdict::default()
    }
}

struct Compiled {
    rule: Rule,
    kinds: Vec<Kind>,
    /// Index in the digest or text regex set.
    pattern: Option<(MatchOn, usize)>,
    /// For rewrites.
    regex: Option<regex::bytes::Regex>,
    hits: AtomicU64,
}

/// One protocol's rules and table rules, compiled.
pub struct RuleSet {
    rules: Vec<Compiled>,
    on_digest: regex::RegexSet,
    on_text: regex::bytes::RegexSet,
    negated: Bits,
    /// The rules with a pattern on the statement's text.
    on_text_rules: Bits,
    /// Rules with a `database` field.
    by_database: Vec<(usize, String)>,
    /// Table rules: `schema.table` -> cluster.
    tables: HashMap<String, Arc<str>>,
    /// Every cluster's name, kept once: a session's own (where tables without a table
    /// rule live) is looked up here when a statement names tables.
    clusters: HashMap<String, Arc<str>>,
    /// PostgreSQL: unqualified names are in `public`; MySQL: in the session's database.
    protocol: Protocol,
    /// Whether any rule or table rule may send a statement to another cluster (asked
    /// for every statement: worked out once here).
    routes: bool,
}

impl RuleSet {
    /// The rules of `config` that concern listeners of `protocol`: those naming no
    /// cluster, or a cluster of that protocol.
    pub fn compile(config: &Config, protocol: Protocol) -> RuleSet {
        let ours = |cluster: &str| config.cluster_protocol(cluster) == Some(protocol);
        let mut digest_patterns = Vec::new();
        let mut text_patterns = Vec::new();
        let mut rules = Vec::new();
        for rule in &config.rules {
            match &rule.action {
                RuleAction::Route { cluster, .. } | RuleAction::Mirror { cluster }
                    if !ours(cluster) =>
                {
                    continue;
                }
                _ => {}
            }
            let on = rule.when.on(&rule.action);
            let pattern = rule.when.pattern.as_ref().map(|p| {
                let list = match on {
                    MatchOn::Digest => &mut digest_patterns,
                    MatchOn::Text => &mut text_patterns,
                };
                list.push(p.clone());
                (on, list.len() - 1)
            });
            let regex = match &rule.action {
                RuleAction::Rewrite { .. } => rule
                    .when
                    .pattern
                    .as_deref()
                    .and_then(|p| regex::bytes::Regex::new(p).ok()),
                _ => None,
            };
            rules.push(Compiled {
                kinds: rule
                    .when
                    .kind
                    .iter()
                    .filter_map(|k| Kind::from_name(k))
                    .collect(),
                rule: rule.clone(),
                pattern,
                regex,
                hits: AtomicU64::new(0),
            });
        }
        // The configuration checked every pattern.
        let set =
            |p: &[String]| regex::RegexSet::new(p).unwrap_or_else(|_| regex::RegexSet::empty());
        let text_set = |p: &[String]| {
            regex::bytes::RegexSet::new(p).unwrap_or_else(|_| regex::bytes::RegexSet::empty())
        };
        let mut negated = Bits::new(rules.len());
        let mut on_text_rules = Bits::new(rules.len());
        let mut by_database = Vec::new();
        for (i, c) in rules.iter().enumerate() {
            if c.rule.when.negate {
                negated.set(i);
            }
            if matches!(c.pattern, Some((MatchOn::Text, _))) {
                on_text_rules.set(i);
            }
            if let Some(db) = &c.rule.when.database {
                by_database.push((i, db.clone()));
            }
        }
        let tables: HashMap<String, Arc<str>> = config
            .tables
            .values()
            .filter(|t| ours(&t.cluster))
            .map(|t| {
                let name = match (protocol, t.table.contains('.')) {
                    (Protocol::Postgres, false) => format!("public.{}", t.table),
                    _ => t.table.clone(),
                };
                (name, Arc::from(t.cluster.as_str()))
            })
            .collect();
        let clusters = (config.clusters.keys())
            .map(|c| (c.clone(), Arc::from(c.as_str())))
            .collect();
        let routes = !tables.is_empty()
            || rules
                .iter()
                .any(|c| matches!(c.rule.action, RuleAction::Route { .. }));
        RuleSet {
            routes,
            on_digest: set(&digest_patterns),
            on_text: text_set(&text_patterns),
            rules,
            negated,
            on_text_rules,
            by_database,
            tables,
            clusters,
            protocol,
        }
    }

    /// True when there is nothing to apply: statements need not be looked at for rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.tables.is_empty()
    }

    /// Whether any rule or table rule may send a statement to another cluster (then a
    /// transaction's BEGIN waits for its first statement: see session/judge.rs).
    pub fn routes(&self) -> bool {
        self.routes
    }

    /// The session side of the match, computed once per session (`listener`: its
    /// name).
    pub fn who(
        &self,
        (user, database): (&Arc<str>, &Arc<str>),
        listener: &str,
        addr: Option<IpAddr>,
    ) -> Who {
        let mut mask = Bits::new(self.rules.len());
        for (i, c) in self.rules.iter().enumerate() {
            let w = &c.rule.when;
            let ok = w.user.as_deref().is_none_or(|u| u == &**user)
                && w.listener.as_deref().is_none_or(|l| l == listener)
                && w.client_address
                    .is_none_or(|cidr| addr.is_some_and(|a| cidr.contains(a)));
            if ok {
                mask.set(i);
            }
        }
        Who {
            user: user.clone(),
            database: database.clone(),
            mask,
        }
    }

    /// The rules whose statement fields `stmt` meets (turned round where the rule is
    /// negated) and whose session fields `who` meets, in order: a word of 64 rules at
    /// a time, so that rules a workload never meets cost next to nothing.
    fn candidates<'a>(
        &'a self,
        stmt: &'a Statement,
        who: &'a Who,
    ) -> impl Iterator<Item = usize> + 'a {
        let word = |b: &Bits, w: usize| b.0.get(w).copied().unwrap_or(0);
        (0..self.negated.0.len()).flat_map(move |w| {
            let mut bits = (word(&stmt.matches, w) ^ word(&self.negated, w)) & word(&who.mask, w);
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(w * 64 + b)
            })
        })
    }

    /// What to do with `stmt` (its text `text`), run by `who` in `database` (the
    /// session's current one) through a listener on cluster `home`; `count`: add to
    /// the matching rules' hit counts.
    pub fn verdict(
        &self,
        stmt: &Statement,
        text: &[u8],
        who: &Who,
        (database, home): (&str, &str),
        count: bool,
    ) -> Verdict {
        let mut v = Verdict::default();
        for i in self.candidates(stmt, who) {
            let Some(c) = self.rules.get(i) else {
                break;
            };
            let db_ok = || {
                self.by_database
                    .iter()
                    .find(|(r, _)| *r == i)
                    .is_none_or(|(_, d)| d == database)
            };
            if !db_ok() {
                continue;
            }
            if count {
                c.hits.fetch_add(1, Ordering::Relaxed);
            }
            match &c.rule.action {
                RuleAction::Block { message } => {
                    v.block = Some((c.rule.number, Arc::from(message.as_str())));
                }
                RuleAction::Route { cluster, role } => {
                    v.route.get_or_insert(Destination {
                        cluster: Arc::from(cluster.as_str()),
                        role: *role,
                    });
                }
                RuleAction::Rewrite { replace } => {
                    if let Some(re) = &c.regex {
                        let text = v.rewrite.as_deref().unwrap_or(text);
                        v.rewrite = Some(re.replace_all(text, replace.as_bytes()).into_owned());
                    }
                }
                RuleAction::Mirror { cluster } => {
                    v.mirror.get_or_insert_with(|| Arc::from(cluster.as_str()));
                }
                RuleAction::Timeout(t) => {
                    v.timeout.get_or_insert(*t);
                }
                RuleAction::Log => v.log.push(c.rule.number),
            }
            if !c.rule.continues || v.block.is_some() {
                break;
            }
        }
        if v.route.is_none() && v.block.is_none() {
            self.table_route(stmt, (database, home), &mut v);
        }
        v
    }

    /// Table rules: the cluster the statement's tables live on, or the cross-cluster
    /// error when they live on more than one. A table without a rule lives on the
    /// listener's cluster (`home`), the server's own catalogs anywhere.
    fn table_route(&self, stmt: &Statement, (database, home): (&str, &str), v: &mut Verdict) {
        if self.tables.is_empty() {
            return;
        }
        let home = match self.clusters.get(home) {
            Some(c) => c.clone(),
            None => Arc::from(home),
        };
        let home = &home;
        let mut found: Vec<(&str, &Arc<str>)> = Vec::new();
        for t in &stmt.facts.tables {
            if catalog(t) {
                continue;
            }
            let qualified;
            let name = if t.contains('.') {
                t.as_str()
            } else {
                let schema = match self.protocol {
                    Protocol::Postgres => "public",
                    Protocol::Mysql => database,
                };
                qualified = format!("{schema}.{t}");
                qualified.as_str()
            };
            found.push((t, self.tables.get(name).unwrap_or(home)));
        }
        let Some((_, first)) = found.first() else {
            return;
        };
        if found.iter().all(|(_, c)| c == first) {
            // The listener's own cluster too: a session whose transaction runs on
            // another cluster must not run this there (see session/judge.rs may_move).
            v.route = Some(Destination {
                cluster: (*first).clone(),
                role: None,
            });
            return;
        }
        let list: Vec<String> = found
            .iter()
            .map(|(t, c)| format!("{t} (cluster \"{c}\")"))
            .collect();
        v.cross = Some(format!(
            "the statement names tables of more than one cluster: {}; a statement or transaction runs on one cluster",
            list.join(", ")
        ));
    }

    /// Each rule's number and how many statements it matched.
    pub fn hits(&self) -> Vec<(usize, u64)> {
        self.rules
            .iter()
            .map(|c| (c.rule.number, c.hits.load(Ordering::Relaxed)))
            .collect()
    }

    /// Which rules' statement fields (digest, pattern on the digest, tables, kind)
    /// `facts` meets; patterns on the text count as met (see [`RuleSet::with_text`]).
    fn statement_matches(&self, facts: &sluice_sql::Facts) -> Bits {
        let mut bits = Bits::new(self.rules.len());
        let on_digest: Vec<usize> = if self.on_digest.is_empty() {
            Vec::new()
        } else {
            self.on_digest
                .matches(&facts.digest_text)
                .into_iter()
                .collect()
        };
        for (i, c) in self.rules.iter().enumerate() {
            let w = &c.rule.when;
            let pattern_ok = match c.pattern {
                Some((MatchOn::Digest, k)) => on_digest.contains(&k),
                _ => true,
            };
            // Every statement kind the text holds counts: any of them for a rule, all of
            // them for a negated one (`SELECT 1; DROP TABLE t` is not only a select).
            let kinds_ok = c.kinds.is_empty()
                || if w.negate {
                    facts.kinds.iter().all(|k| c.kinds.contains(k))
                } else {
                    facts.kinds.iter().any(|k| c.kinds.contains(k))
                };
            let ok = pattern_ok
                && w.digest.is_none_or(|d| d == facts.digest)
                && kinds_ok
                && (w.tables.is_empty()
                    || w.tables
                        .iter()
                        .any(|want| facts.tables.iter().any(|t| same_table(want, t))));
            if ok {
                bits.set(i);
            }
        }
        bits
    }

    /// Whether a rule with a pattern on the text may apply to `who`'s statements (the
    /// patterns run on every statement of such a session, and of no other).
    fn on_text_patterns(&self, who: &Who) -> bool {
        !self.on_text.is_empty()
            && (self.on_text_rules.0.iter())
                .zip(who.mask.0.iter())
                .any(|(t, m)| t & m != 0)
    }

    /// Whether any pattern on the text matches `text`.
    fn text_matches(&self, text: &[u8]) -> bool {
        self.on_text.is_match(text)
    }

    /// `base` (a statement's matches) with the patterns on the text matched on `text`
    /// (None: a text none of them matches).
    fn with_text(&self, base: &Bits, text: Option<&[u8]>) -> Bits {
        let hits: Vec<usize> =
            text.map_or_else(Vec::new, |t| self.on_text.matches(t).into_iter().collect());
        let mut bits = base.clone();
        for (i, c) in self.rules.iter().enumerate() {
            if let Some((MatchOn::Text, k)) = c.pattern
                && !hits.contains(&k)
            {
                bits.clear(i);
            }
        }
        bits
    }
}

/// A table of the server's own catalogs (on every server alike).
fn catalog(t: &str) -> bool {
    const SCHEMAS: [&str; 5] = [
        "pg_catalog.",
        "information_schema.",
        "mysql.",
        "performance_schema.",
        "sys.",
    ];
    SCHEMAS.iter().any(|s| t.starts_with(s))
        || (!t.contains('.') && (t.starts_with("pg_") || t == "dual"))
}

/// A rule's table and a statement's name the same table: equal, or equal after the one
/// qualified is stripped of its schema.
fn same_table(rule: &str, named: &str) -> bool {
    let bare = |s: &str| s.rsplit('.').next().unwrap_or(s).to_owned();
    rule == named
        || (!rule.contains('.') && bare(named) == rule)
        || (!named.contains('.') && bare(rule) == named)
}

#[cfg(test)]
mod tests;
