//! One reader per section of the file: `[general]`, `[servers.X]`, `[clusters.X]`,
//! `[users.X]`, `[pools.X]`, `[listeners.X]`. Each turns one table of the spanned document
//! into its typed struct from `schema.rs`, applying defaults and the checks that involve only
//! that object (ranges, `min_idle <= size`, TLS files present and readable, ...). An object
//! with any error is left out of the [`Config`] (loading fails anyway), but what it refers to
//! is still recorded as `Facts` so the cross-section checks in `validate.rs` cover it too.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use toml_edit::{Item, Table};

use crate::address::check_host;
use crate::reader::{Ctx, ObjectReader, describe, key_span};
use crate::schema::*;
use crate::secret::Secret;
use crate::units::format_size;
use crate::validate::ListenerFacts;

pub(crate) const SECTIONS: &[&str] = &[
    "general",
    "servers",
    "clusters",
    "users",
    "pools",
    "listeners",
    "handlersocket",
    "rules",
    "tables",
    "firewall",
    "admin",
];
pub(crate) const GENERAL_KEYS: &[&str] = &[
    "shutdown_timeout",
    "log_format",
    "log_level",
    "max_message_size",
    "max_client_connections",
    "worker_threads",
    "client_login_timeout",
    "digest_max_entries",
    "busy_poll_us",
];
pub(crate) const SERVER_KEYS: &[&str] = &[
    "protocol",
    "host",
    "port",
    "tls",
    "tls_ca_file",
    "tls_server_name",
    "max_server_connections",
    "compression",
];
pub(crate) const CLUSTER_KEYS: &[&str] = &[
    "servers",
    "health_interval",
    "health_timeout",
    "health_failures",
    "max_replica_lag",
    "health_user",
    "health_password",
];
pub(crate) const USER_KEYS: &[&str] = &[
    "password",
    "databases",
    "server_user",
    "server_password",
    "pool_size",
    "firewall",
];
pub(crate) const POOL_KEYS: &[&str] = &[
    "mode",
    "assign_server",
    "size",
    "min_idle",
    "connect_timeout",
    "idle_timeout",
    "server_lifetime",
    "wait_timeout",
    "max_client_connections",
    "statement_cache_size",
    "reset_query",
    "shared_connections",
    "idle_transaction_timeout",
    "query_timeout",
    "client_idle_timeout",
];
pub(crate) const LISTENER_KEYS: &[&str] = &[
    "protocol",
    "address",
    "cluster",
    "pool",
    "auth",
    "tls",
    "tls_cert_file",
    "tls_key_file",
    "route",
    "strategy",
    "read_your_writes",
    "read_your_writes_timeout",
    "auth_user",
    "auth_query",
    "firewall",
];

/// Upper bound for connection counts and cache sizes.
const MAX_COUNT: usize = u32::MAX as usize;
/// Upper bound for `worker_threads`.
const MAX_WORKER_THREADS: usize = 1024;

/// Reads every section of the document.
pub(crate) fn read_config(ctx: &mut Ctx<'_>, root: &Table) -> Config {
    let mut config = Config {
        general: General::default(),
        servers: BTreeMap::new(),
        clusters: BTreeMap::new(),
        users: BTreeMap::new(),
        pools: BTreeMap::new(),
        listeners: BTreeMap::new(),
        handlersocket: BTreeMap::new(),
        rules: Vec::new(),
        tables: BTreeMap::new(),
        firewall: Default::default(),
        admin: Default::default(),
    };
    for (key, item) in root.iter() {
        let header = key_span(root.key(key), item);
        match key {
            "general" => config.general = read_general(ctx, header, item),
            "servers" => config.servers = read_named(ctx, "servers", header, item, read_server),
            "clusters" => config.clusters = read_named(ctx, "clusters", header, item, read_cluster),
            "users" => config.users = read_named(ctx, "users", header, item, read_user),
            "pools" => config.pools = read_named(ctx, "pools", header, item, read_pool),
            "listeners" => {
                config.listeners = read_named(ctx, "listeners", header, item, read_listener)
            }
            "handlersocket" => {
                config.handlersocket = read_named(
                    ctx,
                    "handlersocket",
                    header,
                    item,
                    crate::handlersocket::read_handlersocket,
                )
            }
            "rules" => {
                config.rules = crate::rules::read_rules(ctx, header, item);
                for (number, message) in crate::rules::contradictions(&config.rules) {
                    let label = crate::errors::label("rules", Some(&number.to_string()));
                    ctx.diag.error_at(
                        "rules",
                        &number.to_string(),
                        "",
                        format!("{label}: {message}"),
                    );
                }
            }
            "tables" => {
                config.tables = read_named(ctx, "tables", header, item, crate::rules::read_table)
            }
            "firewall" => config.firewall = crate::rules::read_firewall(ctx, header, item),
            "admin" => config.admin = crate::admin::read_admin(ctx, header, item),
            other => {
                let what = if item.is_table_like() {
                    format!("unknown section [{other}]")
                } else {
                    format!("unknown key {other:?} at the top level")
                };
                let message = format!("{what}; expected one of: {}", SECTIONS.join(", "));
                ctx.diag.error(header.as_ref(), message);
            }
        }
    }
    if config.firewall.allowlist_file.is_none() {
        // A user's or listener's own mode needs the list as much as [firewall]'s.
        let off = crate::rules::FirewallMode::Off;
        let users = config
            .users
            .values()
            .map(|u| ("users", &u.name, u.firewall));
        let listeners = config
            .listeners
            .values()
            .map(|l| ("listeners", &l.name, l.firewall));
        for (section, name, mode) in users.chain(listeners) {
            if let Some(mode) = mode.filter(|m| *m != off) {
                let label = crate::errors::label(section, Some(name));
                let message = format!(
                    "{label} firewall: mode {:?} needs [firewall] allowlist_file",
                    mode.as_str()
                );
                ctx.diag.error_at(section, name, "firewall", message);
            }
        }
    }
    if !ctx.facts.any_defined("pools") {
        let pool = Pool::with_defaults(DEFAULT_POOL_NAME);
        config.pools.insert(DEFAULT_POOL_NAME.to_string(), pool);
        ctx.facts.define("pools", DEFAULT_POOL_NAME);
    }
    config
}

type ReadFn<T> = fn(&mut Ctx<'_>, &str, Option<Range<usize>>, &Item) -> Option<T>;

/// Reads `[section.NAME]` tables; objects with errors are left out.
fn read_named<T>(
    ctx: &mut Ctx<'_>,
    section: &'static str,
    header: Option<Range<usize>>,
    item: &Item,
    read: ReadFn<T>,
) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    let Some(table) = item.as_table_like() else {
        let message = format!("[{section}] must be a table, found {}", describe(item));
        ctx.diag.error(header.as_ref(), message);
        return out;
    };
    for (name, entry) in table.iter() {
        let span = key_span(table.key(name), entry);
        ctx.facts.define(section, name);
        if name.trim().is_empty() {
            let message = format!("[{section}]: object names must not be empty");
            ctx.diag.error(span.as_ref(), message);
        } else if let Some(value) = read(ctx, name, span, entry) {
            out.insert(name.to_string(), value);
        }
    }
    out
}

fn read_general(ctx: &mut Ctx<'_>, header: Option<Range<usize>>, item: &Item) -> General {
    let defaults = General::default();
    let Some(mut r) = ObjectReader::new(ctx, "general", None, header, item, GENERAL_KEYS) else {
        return defaults;
    };
    let shutdown_timeout = r.duration("shutdown_timeout");
    let log_format = r.choice("log_format", LogFormat::ALL);
    let log_level = r.nonempty_string("log_level");
    let max_message_size = r.size("max_message_size").and_then(|size| {
        let min = MIN_MAX_MESSAGE_SIZE as u64;
        let max = MAX_MAX_MESSAGE_SIZE as u64;
        if (min..=max).contains(&size) {
            usize::try_from(size).ok()
        } else {
            let (lo, hi, found) = (format_size(min), format_size(max), format_size(size));
            r.error(
                "max_message_size",
                format!("must be between {lo} and {hi}, found {found}"),
            );
            None
        }
    });
    let max_client_connections = r.count("max_client_connections", 1, MAX_COUNT);
    let worker_threads = r.count("worker_threads", 0, MAX_WORKER_THREADS);
    let client_login_timeout = r.duration("client_login_timeout");
    let digest_max_entries = r.count("digest_max_entries", 0, 10_000_000);
    let busy_poll_us = r.count("busy_poll_us", 0, 10_000);
    if client_login_timeout.is_some_and(|t| t.is_zero()) {
        r.error("client_login_timeout", "must be greater than zero");
    }
    r.finish(|| {
        Some(General {
            shutdown_timeout: shutdown_timeout.unwrap_or(defaults.shutdown_timeout),
            log_format: log_format.unwrap_or(defaults.log_format),
            log_level: log_level.unwrap_or(defaults.log_level.clone()),
            max_message_size: max_message_size.unwrap_or(defaults.max_message_size),
            max_client_connections: max_client_connections
                .unwrap_or(defaults.max_client_connections),
            worker_threads: worker_threads.unwrap_or(defaults.worker_threads),
            client_login_timeout: client_login_timeout.unwrap_or(defaults.client_login_timeout),
            digest_max_entries: digest_max_entries.unwrap_or(defaults.digest_max_entries),
            busy_poll_us: busy_poll_us.map_or(defaults.busy_poll_us, |us| us as u64),
        })
    })
    .unwrap_or(defaults)
}

fn read_server(
    ctx: &mut Ctx<'_>,
    name: &str,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<Server> {
    let mut r = ObjectReader::new(ctx, "servers", Some(name), header, item, SERVER_KEYS)?;
    let protocol = match r.has("protocol") {
        true => r.choice("protocol", Protocol::ALL),
        false => r.missing("protocol"),
    };
    if let Some(protocol) = protocol {
        r.facts()
            .server_protocols
            .insert(name.to_string(), protocol);
    }
    let host = r
        .required_string("host")
        .and_then(|host| match check_host(&host) {
            Ok(()) => Some(host),
            Err(e) => {
                r.error("host", e);
                None
            }
        });
    let port = r
        .integer("port", 1, i64::from(u16::MAX))
        .and_then(|p| u16::try_from(p).ok());
    let tls = r
        .choice("tls", ServerTls::ALL)
        .unwrap_or(ServerTls::Disable);
    let tls_ca_file = r.path("tls_ca_file");
    if let Some(path) = &tls_ca_file {
        r.check_readable("tls_ca_file", path);
    }
    let tls_server_name = r.nonempty_string("tls_server_name");
    let max_server_connections = r.count("max_server_connections", 1, MAX_COUNT);
    let compression = r
        .choice("compression", Compression::ALL)
        .unwrap_or(Compression::Off);
    if compression != Compression::Off && protocol == Some(Protocol::Postgres) {
        r.error(
            "compression",
            "only MySQL servers have a compressed protocol",
        );
    }
    if tls.verifies() && !r.has("tls_ca_file") {
        r.error(
            "tls",
            format!("tls = {:?} requires tls_ca_file", tls.as_str()),
        );
    }
    r.finish(|| {
        let protocol = protocol?;
        let host = host?;
        Some(Server {
            name: name.to_string(),
            protocol,
            port: port.unwrap_or(protocol.default_port()),
            tls,
            tls_ca_file,
            tls_server_name: tls_server_name.unwrap_or_else(|| host.clone()),
            max_server_connections,
            compression,
            host,
        })
    })
}

fn read_cluster(
    ctx: &mut Ctx<'_>,
    name: &str,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<Cluster> {
    let mut r = ObjectReader::new(ctx, "clusters", Some(name), header, item, CLUSTER_KEYS)?;
    let items = match r.has("servers") {
        true => r.string_items("servers"),
        false => r.missing("servers"),
    };
    if let Some(items) = &items {
        if items.is_empty() {
            r.error("servers", "must list at least one server");
        }
        let mut seen = HashSet::new();
        let mut members = Vec::new();
        for (i, server) in items.iter().enumerate() {
            let Some(server) = server else { continue };
            members.push((format!("servers[{i}]"), server.clone()));
            if !seen.insert(server) {
                r.error(
                    &format!("servers[{i}]"),
                    format!("server {server:?} is listed twice"),
                );
            }
        }
        r.facts().cluster_members.insert(name.to_string(), members);
    }
    let servers: Option<Vec<String>> = items.and_then(|items| items.into_iter().collect());
    let health = crate::routes::read_health(&mut r);
    r.finish(|| {
        Some(Cluster {
            name: name.to_string(),
            servers: servers?,
            health,
        })
    })
}

fn read_user(
    ctx: &mut Ctx<'_>,
    name: &str,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<User> {
    let mut r = ObjectReader::new(ctx, "users", Some(name), header, item, USER_KEYS)?;
    let password = r.secret("password");
    let databases = r.string_list("databases");
    if databases.as_ref().is_some_and(Vec::is_empty) {
        r.error(
            "databases",
            "must not be empty; use [\"*\"] to allow any database",
        );
    }
    let server_user = r.nonempty_string("server_user");
    let server_password = r.secret("server_password");
    // Hashes that do not contain the password cannot answer a server's challenge.
    match &server_password {
        Some(secret @ Secret::Scram(_)) => {
            let kind = secret.kind();
            r.error(
                "server_password",
                format!("a {kind} verifier cannot log in to a server; give the plaintext password or an md5 hash"),
            );
        }
        Some(secret @ (Secret::MysqlNative { .. } | Secret::Sha2 { .. })) => {
            let kind = secret.kind();
            r.error(
                "server_password",
                format!("a {kind} cannot log in to a server; give the plaintext password"),
            );
        }
        Some(Secret::Plain(_) | Secret::Md5 { .. }) | None => {}
    }
    let pool_size = r.count("pool_size", 1, MAX_COUNT);
    let firewall = r.choice("firewall", crate::rules::FirewallMode::ALL);
    let login = server_password
        .as_ref()
        .or(password.as_ref())
        .map(Secret::kind);
    r.facts().user_logins.insert(name.to_string(), login);
    let renamed = server_user.as_deref().filter(|s| *s != name);
    if let (Some(Secret::Md5 { .. }), None, Some(other)) = (&password, &server_password, renamed) {
        r.error(
            "server_user",
            format!(
                "password is an md5 hash salted with the user name {name:?}, so it cannot log in \
                 to the server as {other:?}; set server_password"
            ),
        );
    }
    r.finish(|| {
        Some(User {
            name: name.to_string(),
            password,
            databases: databases.unwrap_or_else(|| vec!["*".to_string()]),
            server_user,
            server_password,
            pool_size,
            firewall,
        })
    })
}

fn read_pool(
    ctx: &mut Ctx<'_>,
    name: &str,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<Pool> {
    let mut r = ObjectReader::new(ctx, "pools", Some(name), header, item, POOL_KEYS)?;
    let d = Pool::with_defaults(name);
    let mode = r.choice("mode", PoolMode::ALL);
    r.facts()
        .pool_modes
        .insert(name.to_string(), mode.unwrap_or(d.mode));
    let assign_server = r.choice("assign_server", AssignServer::ALL);
    if mode == Some(PoolMode::Transaction) && assign_server == Some(AssignServer::Login) {
        r.error(
            "assign_server",
            "a transaction-mode pool gives a server connection per transaction, not at \
             login; remove assign_server or use mode = \"session\"",
        );
    }
    let size = r.count("size", 1, MAX_COUNT);
    let min_idle = r.count("min_idle", 0, MAX_COUNT);
    if let Some(min_idle) = min_idle {
        let size_known = size.or((!r.has("size")).then_some(d.size));
        if let Some(size) = size_known.filter(|size| min_idle > *size) {
            r.error(
                "min_idle",
                format!("must not exceed size ({size}), found {min_idle}"),
            );
        }
    }
    let connect_timeout = r.duration("connect_timeout");
    if connect_timeout.is_some_and(|t| t.is_zero()) {
        r.error("connect_timeout", "must be greater than zero");
    }
    let idle_timeout = r.optional_duration("idle_timeout");
    let server_lifetime = r.optional_duration("server_lifetime");
    let wait_timeout = r.duration("wait_timeout");
    let max_client_connections = r.count("max_client_connections", 1, MAX_COUNT);
    let statement_cache_size = r.count("statement_cache_size", 1, MAX_COUNT);
    let reset_query = r.nonempty_string("reset_query");
    let shared_connections = r.count("shared_connections", 0, 64);
    let idle_transaction_timeout = r.optional_duration("idle_transaction_timeout");
    let query_timeout = r.optional_duration("query_timeout");
    let client_idle_timeout = r.optional_duration("client_idle_timeout");
    r.finish(|| {
        Some(Pool {
            name: name.to_string(),
            mode: mode.unwrap_or(d.mode),
            assign_server: assign_server.unwrap_or(d.assign_server),
            size: size.unwrap_or(d.size),
            min_idle: min_idle.unwrap_or(d.min_idle),
            connect_timeout: connect_timeout.unwrap_or(d.connect_timeout),
            idle_timeout: idle_timeout.unwrap_or(d.idle_timeout),
            server_lifetime: server_lifetime.unwrap_or(d.server_lifetime),
            wait_timeout: wait_timeout.unwrap_or(d.wait_timeout),
            max_client_connections: max_client_connections.unwrap_or(d.max_client_connections),
            statement_cache_size: statement_cache_size.unwrap_or(d.statement_cache_size),
            reset_query,
            shared_connections: shared_connections.unwrap_or(d.shared_connections),
            idle_transaction_timeout: idle_transaction_timeout.flatten(),
            query_timeout: query_timeout.flatten(),
            client_idle_timeout: client_idle_timeout.flatten(),
        })
    })
}

fn read_listener(
    ctx: &mut Ctx<'_>,
    name: &str,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<Listener> {
    let mut r = ObjectReader::new(ctx, "listeners", Some(name), header, item, LISTENER_KEYS)?;
    let protocol = match r.has("protocol") {
        true => r.choice("protocol", Protocol::ALL),
        false => r.missing("protocol"),
    };
    let address = r.listen_address("address");
    let cluster = r.required_string("cluster");
    let pool = r.nonempty_string("pool");
    let auth = r
        .choice("auth", AuthMethod::ALL)
        .unwrap_or(AuthMethod::Passthrough);
    if let (Some(protocol), Some(only)) = (protocol, auth.protocol())
        && protocol != only
    {
        r.error(
            "auth",
            format!(
                "auth {:?} is only available on {only} listeners",
                auth.as_str()
            ),
        );
    }
    let tls = r
        .choice("tls", ClientTls::ALL)
        .unwrap_or(ClientTls::Disable);
    let tls_cert_file = r.path("tls_cert_file");
    let tls_key_file = r.path("tls_key_file");
    let route = crate::routes::read_route(&mut r);
    let firewall = r.choice("firewall", crate::rules::FirewallMode::ALL);
    let auth_query = crate::passthrough::read_auth_query(&mut r, auth, protocol);
    if route.kind == crate::routes::RouteKind::Split
        && auth == AuthMethod::Passthrough
        && !r.has("auth_user")
    {
        r.error(
            "route",
            "route \"split\" logs in to more than one server, which Sluice cannot do for \
             pass-through users as such: set auth_user (Sluice then looks each user's secret up \
             on the server with auth_query and logs in with what the client's proof yields), or \
             an auth that checks [users]",
        );
    }
    let pool = match r.has("pool") {
        true => pool,
        false => Some(DEFAULT_POOL_NAME.to_string()),
    };
    r.facts().listeners.push(ListenerFacts {
        section: "listeners",
        name: name.to_string(),
        protocol,
        address: address.clone(),
        cluster: cluster.clone(),
        pool: pool.clone(),
        split: route.kind == crate::routes::RouteKind::Split,
        auth_user: auth_query.as_ref().map(|q| q.user.clone()),
    });
    if tls != ClientTls::Disable {
        let mut absent = Vec::new();
        for (key, path) in [
            ("tls_cert_file", &tls_cert_file),
            ("tls_key_file", &tls_key_file),
        ] {
            match path {
                Some(path) => r.check_readable(key, path),
                None if !r.has(key) => absent.push(key),
                None => {}
            }
        }
        if !absent.is_empty() {
            let needs = absent.join(" and ");
            r.error("tls", format!("tls = {:?} requires {needs}", tls.as_str()));
        }
    }
    r.finish(|| {
        Some(Listener {
            name: name.to_string(),
            protocol: protocol?,
            address: address?,
            cluster: cluster?,
            pool: pool?,
            route,
            auth,
            auth_query,
            tls,
            tls_cert_file,
            tls_key_file,
            firewall,
        })
    })
}
