//! `SHOW CONFIG`: the running configuration, one setting per row (passwords left out).

use crate::admin::table::{Table, Type};
use crate::shared::Shared;

pub fn table(shared: &Shared) -> Table {
    let c = shared.config.load();
    let mut t = Table::new(&[
        ("section", Type::Text),
        ("key", Type::Text),
        ("value", Type::Text),
    ]);
    let mut put = |section: &str, key: &str, value: String| {
        t.push(vec![section.into(), key.into(), value.into()]);
    };
    let g = &c.general;
    put(
        "general",
        "shutdown_timeout",
        format!("{:?}", g.shutdown_timeout),
    );
    put(
        "general",
        "log_format",
        format!("{:?}", g.log_format).to_lowercase(),
    );
    put("general", "log_level", g.log_level.clone());
    put(
        "general",
        "max_message_size",
        g.max_message_size.to_string(),
    );
    put(
        "general",
        "max_client_connections",
        g.max_client_connections.to_string(),
    );
    put("general", "worker_threads", g.worker_threads.to_string());
    put(
        "general",
        "client_login_timeout",
        format!("{:?}", g.client_login_timeout),
    );
    put(
        "general",
        "digest_max_entries",
        g.digest_max_entries.to_string(),
    );
    put("general", "busy_poll_us", g.busy_poll_us.to_string());
    let a = &c.admin;
    put("admin", "users", a.users.join(","));
    put(
        "admin",
        "http_address",
        a.http_address.clone().unwrap_or_default(),
    );
    put(
        "admin",
        "mysql_address",
        a.mysql_address.clone().unwrap_or_default(),
    );
    put("admin", "pg_database", a.pg_database.clone());
    for s in c.servers.values() {
        let section = format!("servers.{}", s.name);
        put(&section, "protocol", s.protocol.as_str().into());
        put(&section, "address", format!("{}:{}", s.host, s.port));
    }
    for cl in c.clusters.values() {
        put(
            &format!("clusters.{}", cl.name),
            "servers",
            cl.servers.join(","),
        );
    }
    for p in c.pools.values() {
        let section = format!("pools.{}", p.name);
        put(&section, "mode", p.mode.as_str().into());
        put(&section, "assign_server", p.assign_server.as_str().into());
        put(&section, "size", p.size.to_string());
        put(&section, "wait_timeout", format!("{:?}", p.wait_timeout));
    }
    for l in c.listeners.values() {
        let section = format!("listeners.{}", l.name);
        put(&section, "protocol", l.protocol.as_str().into());
        put(&section, "address", l.address.clone());
        put(&section, "cluster", l.cluster.clone());
        put(&section, "pool", l.pool.clone());
        put(&section, "auth", l.auth.as_str().into());
        put(&section, "route", l.route.kind.as_str().into());
    }
    for u in c.users.values() {
        put(
            &format!("users.{}", u.name),
            "databases",
            u.databases.join(","),
        );
    }
    put("rules", "count", c.rules.len().to_string());
    put("tables", "count", c.tables.len().to_string());
    put("firewall", "mode", c.firewall.mode.as_str().into());
    t
}
