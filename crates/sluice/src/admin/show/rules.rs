//! `SHOW RULES`: each query rule in file order, what it matches, what it does, and how
//! many statements it matched (on each protocol), then the table rules.

use crate::admin::table::{Cell, Table, Type};
use crate::shared::Shared;
use sluice_config::{RuleAction, RuleMatch};

pub fn table(shared: &Shared) -> Table {
    let config = shared.config.load();
    let mut t = Table::new(&[
        ("rule", Type::Int),
        ("match", Type::Text),
        ("action", Type::Text),
        ("target", Type::Text),
        ("continue", Type::Text),
        ("hits_postgres", Type::Int),
        ("hits_mysql", Type::Int),
    ]);
    let pg = shared.pg.rules.load().set.hits();
    let my = shared.my.rules.load().set.hits();
    let hits = |list: &[(usize, u64)], n: usize| {
        list.iter()
            .find(|(k, _)| *k == n)
            .map_or(Cell::Null, |(_, h)| Cell::from(*h))
    };
    for r in &config.rules {
        t.push(vec![
            r.number.into(),
            describe(&r.when).into(),
            r.action.kind().as_str().into(),
            target(&r.action).into(),
            (if r.continues { "yes" } else { "no" }).into(),
            hits(&pg, r.number),
            hits(&my, r.number),
        ]);
    }
    for rule in config.tables.values() {
        t.push(vec![
            Cell::Null,
            format!("table {}", rule.table).into(),
            "table".into(),
            format!("cluster {}", rule.cluster).into(),
            "no".into(),
            Cell::Null,
            Cell::Null,
        ]);
    }
    t
}

fn describe(m: &RuleMatch) -> String {
    let mut parts = Vec::new();
    if let Some(d) = m.digest {
        parts.push(format!("digest={d:#018x}"));
    }
    if let Some(p) = &m.pattern {
        parts.push(format!("pattern={p:?}"));
    }
    for (k, v) in [
        ("user", &m.user),
        ("database", &m.database),
        ("listener", &m.listener),
    ] {
        if let Some(v) = v {
            parts.push(format!("{k}={v}"));
        }
    }
    if let Some(c) = &m.client_address {
        parts.push(format!("client_address={}/{}", c.addr, c.prefix));
    }
    if !m.tables.is_empty() {
        parts.push(format!("tables={}", m.tables.join(",")));
    }
    if !m.kind.is_empty() {
        parts.push(format!("kind={}", m.kind.join(",")));
    }
    let all = if parts.is_empty() {
        "every statement".to_string()
    } else {
        parts.join(" ")
    };
    if m.negate {
        format!("not ({all})")
    } else {
        all
    }
}

fn target(a: &RuleAction) -> Option<String> {
    match a {
        RuleAction::Route { cluster, role } => Some(match role {
            Some(r) => format!("{cluster} {}", r.as_str()),
            None => cluster.clone(),
        }),
        RuleAction::Mirror { cluster } => Some(cluster.clone()),
        RuleAction::Block { message } => Some(message.clone()),
        RuleAction::Rewrite { replace } => Some(replace.clone()),
        RuleAction::Timeout(d) => Some(format!("{d:?}")),
        RuleAction::Log => None,
    }
}
