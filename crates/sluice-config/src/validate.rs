//! Checks that span sections: clusters name existing servers of one protocol, listeners name
//! an existing cluster of their own protocol and an existing pool, no two listeners share an
//! address, and at least one listener exists. They run on [`Facts`], what the section readers
//! learned about every object, recorded even for objects that had errors of their own, so a
//! listener with a bad `tls` still has its `cluster` checked. Each error points at the line
//! of the offending value, looked up in the positions the readers recorded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

use crate::errors::label;
use crate::reader::Ctx;
use crate::schema::Protocol;

/// What the cross-section checks need, filled in by the section readers.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// Every object name written in each section, whether or not it had errors.
    defined: HashMap<&'static str, BTreeSet<String>>,
    /// Protocol of each server whose `protocol` was valid.
    pub(crate) server_protocols: BTreeMap<String, Protocol>,
    /// Each cluster's server names that were valid strings, with their key (`servers[i]`).
    pub(crate) cluster_members: BTreeMap<String, Vec<(String, String)>>,
    /// One entry per listener.
    pub(crate) listeners: Vec<ListenerFacts>,
    /// The mode of each pool written in the file.
    pub(crate) pool_modes: BTreeMap<String, crate::schema::PoolMode>,
    /// The form of each user's server password (`Secret::kind`), if it has one.
    pub(crate) user_logins: BTreeMap<String, Option<&'static str>>,
    /// The cluster each route or mirror rule names, by rule number.
    pub(crate) rule_clusters: Vec<(String, String)>,
    /// The cluster each table rule names, by table.
    pub(crate) table_clusters: Vec<(String, String)>,
    /// `[admin] users`, with their keys (`users[i]`).
    pub(crate) admin_users: Vec<(String, String)>,
    /// `[admin]` addresses written in the file, by key.
    pub(crate) admin_addresses: Vec<(String, String)>,
}

/// A listener's fields that refer to other objects; `None` where the value had an error.
#[derive(Debug)]
pub(crate) struct ListenerFacts {
    /// `listeners` or `handlersocket`.
    pub(crate) section: &'static str,
    pub(crate) name: String,
    pub(crate) protocol: Option<Protocol>,
    pub(crate) address: Option<String>,
    pub(crate) cluster: Option<String>,
    pub(crate) pool: Option<String>,
    /// The listener's route is `split` (it needs a transaction-mode pool).
    pub(crate) split: bool,
    /// The `[users]` entry a pass-through listener looks secrets up as.
    pub(crate) auth_user: Option<String>,
}

impl Facts {
    /// Records that `[section.name]` is written in the file.
    pub(crate) fn define(&mut self, section: &'static str, name: &str) {
        self.defined
            .entry(section)
            .or_default()
            .insert(name.to_string());
    }

    /// True if any object is written in the section.
    pub(crate) fn any_defined(&self, section: &str) -> bool {
        self.defined
            .get(section)
            .is_some_and(|names| !names.is_empty())
    }

    pub(crate) fn is_defined(&self, section: &str, name: &str) -> bool {
        self.defined
            .get(section)
            .is_some_and(|names| names.contains(name))
    }

    /// `cluster "x" does not exist; defined clusters: a, b`.
    pub(crate) fn missing(&self, section: &str, kind: &str, name: &str) -> String {
        match self.defined.get(section).filter(|names| !names.is_empty()) {
            None => format!("{kind} {name:?} does not exist; no {section} are defined"),
            Some(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                format!(
                    "{kind} {name:?} does not exist; defined {section}: {}",
                    names.join(", ")
                )
            }
        }
    }

    /// The protocol shared by all of a cluster's servers, if every one is known and they agree.
    pub(crate) fn cluster_protocol(&self, cluster: &str) -> Option<Protocol> {
        let members = self.cluster_members.get(cluster)?;
        let mut protocols = members
            .iter()
            .map(|(_, s)| self.server_protocols.get(s).copied());
        let first = protocols.next()??;
        protocols.all(|p| p == Some(first)).then_some(first)
    }
}

/// Runs every cross-section check, recording errors in `ctx`.
pub(crate) fn validate(ctx: &mut Ctx<'_>) {
    let facts = std::mem::take(&mut ctx.facts);
    check_clusters(&facts, ctx);
    check_listeners(&facts, ctx);
    check_duplicate_addresses(&facts, ctx);
    crate::rules::check(ctx, &facts);
    crate::admin::check(ctx, &facts);
    if !facts.any_defined("listeners") && !facts.any_defined("handlersocket") {
        let message = "no listeners are defined; add at least one [listeners.NAME] section";
        ctx.diag.error_at_line(None, message);
    }
    ctx.facts = facts;
}

fn check_clusters(facts: &Facts, ctx: &mut Ctx<'_>) {
    for (name, members) in &facts.cluster_members {
        let section = label("clusters", Some(name));
        // The first server with a known protocol fixes the cluster's protocol.
        let mut first: Option<(&str, Protocol)> = None;
        for (key, server) in members {
            if !facts.is_defined("servers", server) {
                let message = facts.missing("servers", "server", server);
                ctx.diag
                    .error_at("clusters", name, key, format!("{section} {key}: {message}"));
                continue;
            }
            let Some(protocol) = facts.server_protocols.get(server).copied() else {
                continue;
            };
            match first {
                None => first = Some((server, protocol)),
                Some((first_name, first_protocol)) if first_protocol != protocol => {
                    let message = format!(
                        "{section} {key}: server {server:?} speaks {protocol} but {first_name:?} \
                         speaks {first_protocol}; all servers of a cluster must use one protocol"
                    );
                    ctx.diag.error_at("clusters", name, key, message);
                }
                Some(_) => {}
            }
        }
    }
}

fn check_listeners(facts: &Facts, ctx: &mut Ctx<'_>) {
    for listener in &facts.listeners {
        let name = listener.name.as_str();
        let kind = listener.section;
        let section = label(kind, Some(name));
        if let Some(cluster) = &listener.cluster {
            if !facts.is_defined("clusters", cluster) {
                let message = facts.missing("clusters", "cluster", cluster);
                ctx.diag.error_at(
                    kind,
                    name,
                    "cluster",
                    format!("{section} cluster: {message}"),
                );
            } else if let (Some(mine), Some(theirs)) =
                (listener.protocol, facts.cluster_protocol(cluster))
                && mine != theirs
            {
                let message = format!(
                    "{section} cluster: cluster {cluster:?} speaks {theirs} but this listener \
                     speaks {mine}"
                );
                ctx.diag.error_at(kind, name, "cluster", message);
            }
        }
        if let Some(user) = &listener.auth_user
            && let Some(why) = auth_user_problem(facts, listener.protocol, user)
        {
            ctx.diag.error_at(
                kind,
                name,
                "auth_user",
                format!("{section} auth_user: {why}"),
            );
        }
        if let Some(pool) = &listener.pool
            && !facts.is_defined("pools", pool)
        {
            let message = facts.missing("pools", "pool", pool);
            ctx.diag
                .error_at(kind, name, "pool", format!("{section} pool: {message}"));
        } else if let Some(pool) = &listener.pool
            && listener.split
            && facts
                .pool_modes
                .get(pool)
                .copied()
                .unwrap_or(crate::schema::PoolMode::Session)
                != crate::schema::PoolMode::Transaction
        {
            let message = format!(
                "{section} route: route \"split\" sends statements of one session to \
                 different servers, which needs a transaction-mode pool; pool {pool:?} is not one"
            );
            ctx.diag.error_at(kind, name, "route", message);
        }
    }
}

/// Why `user` cannot be a listener's `auth_user`: it does not exist, or Sluice cannot
/// log in to a server of `protocol` with its server password.
fn auth_user_problem(facts: &Facts, protocol: Option<Protocol>, user: &str) -> Option<String> {
    if !facts.is_defined("users", user) {
        return Some(facts.missing("users", "user", user));
    }
    match (facts.user_logins.get(user).copied().flatten(), protocol) {
        (None | Some("plaintext"), _) | (Some("md5"), Some(Protocol::Postgres)) => None,
        (Some("md5"), _) => Some(format!(
            "user {user:?} has an md5 server password, which logs in to PostgreSQL servers \
             only; give the plaintext password as its server_password"
        )),
        (Some(kind), _) => Some(format!(
            "the server password of user {user:?} is a {kind}, with which Sluice cannot log \
             in to a server; give the plaintext password as its server_password"
        )),
    }
}

fn check_duplicate_addresses(facts: &Facts, ctx: &mut Ctx<'_>) {
    let mut seen: BTreeMap<String, &ListenerFacts> = BTreeMap::new();
    for listener in &facts.listeners {
        let Some(address) = &listener.address else {
            continue;
        };
        let normalized = match address.parse::<SocketAddr>() {
            Ok(addr) if addr.port() == 0 => continue,
            Ok(addr) => addr.to_string(),
            Err(_) => address.to_ascii_lowercase(),
        };
        match seen.get(&normalized) {
            Some(first) => {
                let message = format!(
                    "{} address: {address:?} is already used by {}",
                    label(listener.section, Some(&listener.name)),
                    label(first.section, Some(&first.name))
                );
                ctx.diag
                    .error_at(listener.section, &listener.name, "address", message);
            }
            None => {
                seen.insert(normalized, listener);
            }
        }
    }
}
