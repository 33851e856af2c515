//! `[[rules]]` (query rules, applied in file order), `[tables."schema.table"]` (table
//! rules: a table's statements go to a cluster) and `[firewall]` (the learning SQL
//! firewall). Each rule has match fields and one action; a regex that does not compile,
//! an unknown kind, a bad CIDR or an action missing what it needs is an error at its line.
//! Cross-section checks (clusters exist and speak one protocol, rules that can never
//! apply or contradict an earlier one) are in `check_rules`, run by `validate.rs`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use toml_edit::Item;

use crate::reader::{Ctx, ObjectReader, describe};

string_enum! {
    /// What a rule's `pattern` is matched against.
    MatchOn { Digest = "digest", Text = "text" }
}

string_enum! {
    /// Which servers of a cluster a `route` rule sends statements to.
    TargetRole { Primary = "primary", Replica = "replica" }
}

string_enum! {
    /// What a rule does.
    ActionKind {
        Route = "route",
        Block = "block",
        Rewrite = "rewrite",
        Mirror = "mirror",
        Timeout = "timeout",
        Log = "log",
    }
}

string_enum! {
    /// The SQL firewall's mode.
    FirewallMode {
        /// No firewall (deny rules still apply).
        Off = "off",
        /// Every new digest is added to the allowlist and logged.
        Learning = "learning",
        /// Digests not on the allowlist are logged and counted, and run.
        Detecting = "detecting",
        /// Digests not on the allowlist are refused.
        Protecting = "protecting",
    }
}

/// Statement kinds a rule's `kind` may name (sluice-sql's `Kind` names).
pub const RULE_KINDS: &[&str] = &[
    "select",
    "insert",
    "update",
    "delete",
    "ddl",
    "transaction",
    "set",
    "show",
    "call",
    "copy",
    "other",
];

/// An address range: `10.0.0.0/8`, `::1/128`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR range"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{s:?}: the prefix length must be 0 to {max}")),
            },
        };
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// What a rule matches; every field given must match (then `negate` inverts).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleMatch {
    pub digest: Option<u64>,
    pub pattern: Option<String>,
    pub match_on: Option<MatchOn>,
    pub user: Option<String>,
    pub database: Option<String>,
    pub client_address: Option<Cidr>,
    pub listener: Option<String>,
    /// Any of these tables (lower case, as the statement names them or qualified).
    pub tables: Vec<String>,
    /// Any of these kinds (see [`RULE_KINDS`]).
    pub kind: Vec<String>,
    pub negate: bool,
}

impl RuleMatch {
    /// What the pattern is matched on: the digest unless the rule says `text` (a rewrite
    /// replaces in the text, so its pattern is matched there).
    pub fn on(&self, action: &RuleAction) -> MatchOn {
        self.match_on.unwrap_or(match action {
            RuleAction::Rewrite { .. } => MatchOn::Text,
            _ => MatchOn::Digest,
        })
    }
}

/// A rule's action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleAction {
    /// To `cluster`, its primary or replicas (`None`: as the listener's route would).
    Route {
        cluster: String,
        role: Option<TargetRole>,
    },
    /// Refused with this message.
    Block { message: String },
    /// The text with `pattern`'s matches replaced (`$1` names groups).
    Rewrite { replace: String },
    /// A copy runs on `cluster`, its answer discarded.
    Mirror { cluster: String },
    /// Cancelled on the server after this long.
    Timeout(Duration),
    /// Logged.
    Log,
}

impl RuleAction {
    pub fn kind(&self) -> ActionKind {
        match self {
            RuleAction::Route { .. } => ActionKind::Route,
            RuleAction::Block { .. } => ActionKind::Block,
            RuleAction::Rewrite { .. } => ActionKind::Rewrite,
            RuleAction::Mirror { .. } => ActionKind::Mirror,
            RuleAction::Timeout(_) => ActionKind::Timeout,
            RuleAction::Log => ActionKind::Log,
        }
    }
}

/// `[[rules]]`: one query rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// 1-based place in the file.
    pub number: usize,
    pub when: RuleMatch,
    pub action: RuleAction,
    /// Later rules apply too (otherwise the first match wins).
    pub continues: bool,
}

/// `[tables."schema.table"]`: a table's statements go to `cluster`. On PostgreSQL an
/// unqualified name means the table in `public`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRule {
    /// `schema.table` (PostgreSQL) or `database.table` (MySQL), lower case.
    pub table: String,
    pub cluster: String,
}

/// `[firewall]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firewall {
    pub mode: FirewallMode,
    /// The allowlist, written in learning mode and read in the others.
    pub allowlist_file: Option<PathBuf>,
}

impl Default for Firewall {
    fn default() -> Self {
        Firewall {
            mode: FirewallMode::Off,
            allowlist_file: None,
        }
    }
}

pub(crate) const RULE_KEYS: &[&str] = &[
    "digest",
    "pattern",
    "match_on",
    "user",
    "database",
    "client_address",
    "listener",
    "tables",
    "kind",
    "negate",
    "action",
    "continue",
    "cluster",
    "role",
    "message",
    "replace",
    "timeout",
];
pub(crate) const TABLE_KEYS: &[&str] = &["cluster"];
pub(crate) const FIREWALL_KEYS: &[&str] = &["mode", "allowlist_file"];

/// Reads `[[rules]]`.
pub(crate) fn read_rules(
    ctx: &mut Ctx<'_>,
    header: Option<Range<usize>>,
    item: &Item,
) -> Vec<Rule> {
    let Some(array) = item.as_array_of_tables() else {
        let message = format!(
            "rules must be written as [[rules]] tables, found {}",
            describe(item)
        );
        ctx.diag.error(header.as_ref(), message);
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, table) in array.iter().enumerate() {
        let number = i + 1;
        let item = Item::Table(table.clone());
        let span = table.span();
        if let Some(rule) = read_rule(ctx, number, span, &item) {
            out.push(rule);
        }
    }
    out
}

fn read_rule(
    ctx: &mut Ctx<'_>,
    number: usize,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<Rule> {
    let name = number.to_string();
    let mut r = ObjectReader::new(ctx, "rules", Some(&name), header, item, RULE_KEYS)?;
    let digest = r.has("digest").then(|| read_digest(&mut r)).flatten();
    let pattern = r.string("pattern");
    if let Some(p) = &pattern
        && let Err(e) = regex::Regex::new(p)
    {
        let e = e.to_string().lines().last().unwrap_or_default().to_owned();
        r.error("pattern", format!("not a valid regex: {e}"));
    }
    let match_on = r.choice("match_on", MatchOn::ALL);
    let user = r.string("user");
    let database = r.string("database");
    let client_address = r.string("client_address").and_then(|s| {
        Cidr::parse(&s)
            .map_err(|e| r.error("client_address", e))
            .ok()
    });
    let listener = r.string("listener");
    let tables = list_or_one(&mut r, "tables")
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.to_lowercase())
        .collect();
    let kind = list_or_one(&mut r, "kind").unwrap_or_default();
    for k in &kind {
        if !RULE_KINDS.contains(&k.as_str()) {
            let names: Vec<String> = RULE_KINDS.iter().map(|k| format!("{k:?}")).collect();
            r.error(
                "kind",
                format!("unknown kind {k:?}; expected one of: {}", names.join(", ")),
            );
        }
    }
    let negate = r.boolean("negate").unwrap_or(false);
    let continues = r.boolean("continue").unwrap_or(false);
    let action = match r.has("action") {
        false => r.missing("action"),
        true => r.choice("action", ActionKind::ALL),
    };
    let cluster = r.string("cluster");
    let role = r.choice("role", TargetRole::ALL);
    let message = r.string("message");
    let replace = r.string("replace");
    let timeout = r.duration("timeout");
    let action = action.and_then(|kind| {
        let needs = |r: &mut ObjectReader, key: &str| {
            r.object_error(format!("action {:?} needs {key}", kind.as_str()));
        };
        let owned: &[&str] = match kind {
            ActionKind::Route => &["cluster", "role"],
            ActionKind::Block => &["message"],
            ActionKind::Rewrite => &["replace"],
            ActionKind::Mirror => &["cluster"],
            ActionKind::Timeout => &["timeout"],
            ActionKind::Log => &[],
        };
        for key in ["cluster", "role", "message", "replace", "timeout"] {
            if r.has(key) && !owned.contains(&key) {
                r.error(key, format!("does not go with action {:?}", kind.as_str()));
            }
        }
        match kind {
            ActionKind::Route | ActionKind::Mirror if cluster.is_none() => {
                needs(&mut r, "cluster");
                None
            }
            ActionKind::Route => Some(RuleAction::Route {
                cluster: cluster.clone()?,
                role,
            }),
            ActionKind::Mirror => Some(RuleAction::Mirror {
                cluster: cluster.clone()?,
            }),
            ActionKind::Block => Some(RuleAction::Block {
                message: message
                    .clone()
                    .unwrap_or_else(|| format!("statement blocked by rule {number}")),
            }),
            ActionKind::Rewrite => match (&replace, &pattern) {
                (Some(replace), Some(_)) if replace.contains(';') => {
                    r.error(
                        "replace",
                        "a rewrite must leave one statement: the replacement holds a ';'",
                    );
                    None
                }
                (Some(replace), Some(_)) => Some(RuleAction::Rewrite {
                    replace: replace.clone(),
                }),
                (None, _) => {
                    needs(&mut r, "replace");
                    None
                }
                (_, None) => {
                    needs(&mut r, "pattern (the regex whose matches it replaces)");
                    None
                }
            },
            ActionKind::Timeout => match timeout {
                Some(t) if !t.is_zero() => Some(RuleAction::Timeout(t)),
                Some(_) => {
                    r.error("timeout", "must be more than 0");
                    None
                }
                None => {
                    needs(&mut r, "timeout");
                    None
                }
            },
            ActionKind::Log => Some(RuleAction::Log),
        }
    });
    if matches!(action, Some(RuleAction::Rewrite { .. })) && match_on == Some(MatchOn::Digest) {
        r.error(
            "match_on",
            "a rewrite replaces in the statement's text, so its pattern must match on \"text\"",
        );
    }
    if let Some(RuleAction::Route { cluster, .. } | RuleAction::Mirror { cluster }) = &action {
        r.facts()
            .rule_clusters
            .push((name.clone(), cluster.clone()));
    }
    r.finish(|| {
        Some(Rule {
            number,
            when: RuleMatch {
                digest,
                pattern,
                match_on,
                user,
                database,
                client_address,
                listener,
                tables,
                kind,
                negate,
            },
            action: action?,
            continues,
        })
    })
}

/// A digest id: an integer, or a hex string (`"0x..."`, as Sluice shows them).
fn read_digest(r: &mut ObjectReader) -> Option<u64> {
    if let Some(text) = r.peek_str("digest") {
        let hex = text.trim_start_matches("0x").trim_start_matches("0X");
        return match u64::from_str_radix(hex, 16) {
            Ok(n) => Some(n),
            Err(_) => {
                r.error("digest", format!("{text:?} is not a hex digest id"));
                None
            }
        };
    }
    r.integer("digest", 0, i64::MAX).map(|n| n as u64)
}

/// A list of strings, or one string.
fn list_or_one(r: &mut ObjectReader, key: &str) -> Option<Vec<String>> {
    match r.peek_str(key) {
        Some(one) => r.string(key).map(|_| vec![one]),
        None => r.string_list(key),
    }
}

/// Reads `[tables."schema.table"]`.
pub(crate) fn read_table(
    ctx: &mut Ctx<'_>,
    name: &str,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<TableRule> {
    let mut r = ObjectReader::new(ctx, "tables", Some(name), header, item, TABLE_KEYS)?;
    let cluster = r.required_string("cluster");
    if let Some(c) = &cluster {
        r.facts().table_clusters.push((name.to_string(), c.clone()));
    }
    r.finish(|| {
        Some(TableRule {
            table: name.to_lowercase(),
            cluster: cluster?,
        })
    })
}

/// Reads `[firewall]`.
pub(crate) fn read_firewall(
    ctx: &mut Ctx<'_>,
    header: Option<Range<usize>>,
    item: &Item,
) -> Firewall {
    let Some(mut r) = ObjectReader::new(ctx, "firewall", None, header, item, FIREWALL_KEYS) else {
        return Firewall::default();
    };
    let mode = r
        .choice("mode", FirewallMode::ALL)
        .unwrap_or(FirewallMode::Off);
    let allowlist_file = r.path("allowlist_file");
    if mode != FirewallMode::Off && allowlist_file.is_none() && !r.has("allowlist_file") {
        r.error(
            "mode",
            format!(
                "mode {:?} needs allowlist_file (the list it learns into or reads)",
                mode.as_str()
            ),
        );
    }
    r.finish(|| {
        Some(Firewall {
            mode,
            allowlist_file,
        })
    })
    .unwrap_or_default()
}

/// Rules and table rules against the rest of the file: their clusters exist; a table
/// rule's name is qualified as its cluster's protocol wants.
pub(crate) fn check(ctx: &mut Ctx<'_>, facts: &crate::validate::Facts) {
    for (rule, cluster) in &facts.rule_clusters {
        if !facts.is_defined("clusters", cluster) {
            let message = facts.missing("clusters", "cluster", cluster);
            let label = crate::errors::label("rules", Some(rule));
            ctx.diag.error_at(
                "rules",
                rule,
                "cluster",
                format!("{label} cluster: {message}"),
            );
        }
    }
    for (table, cluster) in &facts.table_clusters {
        let label = crate::errors::label("tables", Some(table));
        if !facts.is_defined("clusters", cluster) {
            let message = facts.missing("clusters", "cluster", cluster);
            ctx.diag.error_at(
                "tables",
                table,
                "cluster",
                format!("{label} cluster: {message}"),
            );
        } else if !table.contains('.')
            && facts.cluster_protocol(cluster) == Some(crate::schema::Protocol::Mysql)
        {
            // PostgreSQL: an unqualified name is in the schema `public`.
            let message = format!("{label}: name the table as database.table");
            ctx.diag.error_at("tables", table, "", message);
        }
    }
}

/// Pairs of rules that cannot both be meant: a rule whose match fields equal an earlier
/// rule's that stops (it can never apply), or one that contradicts an earlier one with
/// `continue` (two routes to different places, a block and a route).
pub(crate) fn contradictions(rules: &[Rule]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, later) in rules.iter().enumerate() {
        for earlier in &rules[..i] {
            if earlier.when != later.when {
                continue;
            }
            let (a, b) = (&earlier.action, &later.action);
            if !earlier.continues {
                out.push((
                    later.number,
                    format!(
                        "can never apply: rule {} above matches the same statements and stops (add continue = true to it)",
                        earlier.number
                    ),
                ));
                break;
            }
            let clash = match (a, b) {
                (RuleAction::Route { .. }, RuleAction::Route { .. }) => a != b,
                (
                    RuleAction::Block { .. },
                    RuleAction::Route { .. }
                    | RuleAction::Rewrite { .. }
                    | RuleAction::Mirror { .. },
                )
                | (
                    RuleAction::Route { .. }
                    | RuleAction::Rewrite { .. }
                    | RuleAction::Mirror { .. },
                    RuleAction::Block { .. },
                ) => true,
                _ => false,
            };
            if clash {
                out.push((
                    later.number,
                    format!(
                        "contradicts rule {}, which matches the same statements: {} and {}",
                        earlier.number,
                        a.kind(),
                        b.kind()
                    ),
                ));
                break;
            }
        }
    }
    out
}

/// The table rules by table name.
pub type TableRules = BTreeMap<String, TableRule>;
