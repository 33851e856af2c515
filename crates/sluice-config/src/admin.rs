//! `[admin]`: who may open the admin console and where the operator-facing endpoints
//! listen (the MySQL-protocol console, HTTP for metrics, health and the dashboard, and
//! the virtual database of the PostgreSQL console on every PostgreSQL listener).

use std::ops::Range;

use toml_edit::Item;

use crate::reader::{Ctx, ObjectReader};

pub(crate) const ADMIN_KEYS: &[&str] = &["users", "http_address", "mysql_address", "pg_database"];

/// Where `/metrics`, `/health`, `/ready` and the dashboard listen by default.
pub const DEFAULT_ADMIN_HTTP_ADDRESS: &str = "127.0.0.1:9930";
/// Where the MySQL-protocol console listens by default (ProxySQL's convention).
pub const DEFAULT_ADMIN_MYSQL_ADDRESS: &str = "127.0.0.1:6032";
/// The console's virtual database on every PostgreSQL listener (PgBouncer's `pgbouncer`).
pub const DEFAULT_ADMIN_PG_DATABASE: &str = "sluice";

/// `[admin]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// Names of `[users.X]` allowed into the console (with their passwords). Besides
    /// them, a client the server itself authenticates as a superuser on a pass-through
    /// listener may open it from a loopback address.
    pub users: Vec<String>,
    /// `/metrics`, `/health`, `/ready` and the dashboard; `None` = off.
    pub http_address: Option<String>,
    /// The MySQL-protocol console; `None` = off.
    pub mysql_address: Option<String>,
    /// The virtual database that opens the console on every PostgreSQL listener.
    pub pg_database: String,
}

impl Default for Admin {
    fn default() -> Self {
        Admin {
            users: Vec::new(),
            http_address: Some(DEFAULT_ADMIN_HTTP_ADDRESS.to_string()),
            mysql_address: Some(DEFAULT_ADMIN_MYSQL_ADDRESS.to_string()),
            pg_database: DEFAULT_ADMIN_PG_DATABASE.to_string(),
        }
    }
}

impl Admin {
    /// Whether `user` is one of the configured console users.
    pub fn is_admin(&self, user: &str) -> bool {
        self.users.iter().any(|u| u == user)
    }
}

pub(crate) fn read_admin(ctx: &mut Ctx<'_>, header: Option<Range<usize>>, item: &Item) -> Admin {
    let defaults = Admin::default();
    let Some(mut r) = ObjectReader::new(ctx, "admin", None, header, item, ADMIN_KEYS) else {
        return defaults;
    };
    let users = r.string_list("users").unwrap_or_default();
    for (i, user) in users.iter().enumerate() {
        r.facts()
            .admin_users
            .push((format!("users[{i}]"), user.clone()));
    }
    let address = |r: &mut ObjectReader<'_, '_, '_>, key: &str, default: &Option<String>| {
        if !r.has(key) {
            return default.clone();
        }
        match r.string(key) {
            Some(a) if a.is_empty() => None,
            Some(a) => match crate::address::check_listen_address(&a) {
                Ok(()) => {
                    r.facts().admin_addresses.push((key.to_string(), a.clone()));
                    Some(a)
                }
                Err(e) => {
                    r.error(key, e);
                    None
                }
            },
            None => None,
        }
    };
    let http_address = address(&mut r, "http_address", &defaults.http_address);
    let mysql_address = address(&mut r, "mysql_address", &defaults.mysql_address);
    let pg_database = if r.has("pg_database") {
        r.nonempty_string("pg_database").unwrap_or_default()
    } else {
        defaults.pg_database.clone()
    };
    r.finish(|| {
        Some(Admin {
            users,
            http_address,
            mysql_address,
            pg_database,
        })
    })
    .unwrap_or(defaults)
}

/// Names the admin endpoints go by (in the console, metrics and logs).
pub const ADMIN_LISTENER_NAMES: [&str; 2] = ["admin_http", "admin_mysql"];

/// `[admin]` against the rest of the file: its users exist; its addresses are not a
/// listener's. Also: listener names are unique across `[listeners]` and
/// `[handlersocket]` and are not the admin endpoints' (the console, metrics and
/// reload know listeners by name).
pub(crate) fn check(ctx: &mut Ctx<'_>, facts: &crate::validate::Facts) {
    for l in &facts.listeners {
        let label = crate::errors::label(l.section, Some(&l.name));
        if ADMIN_LISTENER_NAMES.contains(&l.name.as_str()) {
            let message = format!(
                "{label}: the name {:?} is the admin endpoint's; choose another",
                l.name
            );
            ctx.diag.error_at(l.section, &l.name, "", message);
        } else if l.section == "handlersocket" && facts.is_defined("listeners", &l.name) {
            let message = format!(
                "{label}: [listeners.{}] has this name already; listener names are unique",
                l.name
            );
            ctx.diag.error_at(l.section, &l.name, "", message);
        }
    }
    for (key, user) in &facts.admin_users {
        if !facts.is_defined("users", user) {
            let message = facts.missing("users", "user", user);
            ctx.diag
                .error_at("admin", "", key, format!("[admin] {key}: {message}"));
        }
    }
    for (key, address) in &facts.admin_addresses {
        let same = |a: &str| {
            let ours = address.parse::<std::net::SocketAddr>();
            match (ours, a.parse::<std::net::SocketAddr>()) {
                (Ok(x), _) if x.port() == 0 => false,
                (Ok(x), Ok(y)) => x == y,
                _ => a.eq_ignore_ascii_case(address),
            }
        };
        let clash = facts
            .listeners
            .iter()
            .find(|l| l.address.as_deref().is_some_and(same));
        if let Some(l) = clash {
            let message = format!(
                "[admin] {key}: {address:?} is already used by {}",
                crate::errors::label(l.section, Some(&l.name))
            );
            ctx.diag.error_at("admin", "", key, message);
        }
    }
}
