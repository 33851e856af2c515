//! Reload: SIGHUP and the console's `RELOAD` read the configuration file again. A file
//! with errors is refused with every error (file:line) and the running configuration
//! stays. A valid one is applied without dropping anyone:
//! - the configuration snapshot is swapped: new logins see new users and passwords,
//!   new sessions new timeouts and firewall modes;
//! - running pools take their policy's new settings (size, waits) for new leases;
//! - query rules and table rules: new sessions judge by the new ones;
//! - listeners: added ones bind, removed ones stop accepting (their clients finish),
//!   changed ones get their new settings for later clients, TLS certificates and keys
//!   read again (rotation without a restart); a changed address binds the new one and
//!   lets the old one go;
//! - HandlerSocket listeners: added, removed, or restarted when changed;
//! - servers and clusters: see `topology::reload`.

use crate::running::Running;
use sluice_config::Config;
use std::path::Path;
use std::sync::Arc;

/// Reads `file` and applies it; a summary of what changed, or why nothing did.
pub async fn reload(running: &Running, file: &Path) -> Result<String, String> {
    let new = sluice_config::load(file).map_err(|e| e.to_string())?;
    apply(running, new).await
}

pub async fn apply(running: &Running, new: Config) -> Result<String, String> {
    // One reload at a time (SIGHUP and consoles may ask together).
    let _one = running.reloading.lock().await;
    let shared = &running.shared;
    let old = shared.config.load_full();
    let mut said = Vec::new();
    // First everything that can fail, with nothing changed yet: contexts built (TLS
    // files read), sockets bound (SO_REUSEPORT: also where the listener a new one
    // replaces still listens). A failure drops what was prepared.
    let refuse = |what: String| format!("{what}; nothing was changed");
    let mut start = Vec::new();
    let mut renew = Vec::new();
    for l in new.listeners.values() {
        match running.sql_cfg(&l.name) {
            Some(now) if now.address == l.address && now.protocol == l.protocol => {
                if now != *l || l.tls_cert_file.is_some() {
                    let ctx = running.context(l).map_err(|e| refuse(format!("{e:#}")))?;
                    renew.push((l, ctx, now != *l));
                }
            }
            _ => start.push(
                running
                    .prepare_sql(l)
                    .await
                    .map_err(|e| refuse(format!("{e:#}")))?,
            ),
        }
    }
    for l in new.handlersocket.values() {
        if running.hs_cfg(&l.name).as_ref() != Some(l) {
            let p = running.prepare_hs(&new, l).await;
            start.push(p.map_err(|e| refuse(format!("{e:#}")))?);
        }
    }
    let connectors = crate::topology::reload::connectors(&new).map_err(refuse)?;
    // Then the new snapshot, and the listeners switched over to it.
    shared.config.store(Arc::new(new.clone()));
    shared.connectors.store(Arc::new(connectors));
    for p in start {
        let name = match &p {
            crate::running::Prepared::Sql(l, ..) => format!("listener {}", l.name),
            crate::running::Prepared::Hs(l, ..) => format!("handlersocket {}", l.name),
        };
        match running.start(p) {
            Ok(addr) => said.push(format!("{name} listening on {addr}")),
            Err(e) => said.push(format!("{name}: {e:#}")),
        }
    }
    for (l, ctx, changed) in renew {
        running.renew_sql(l, ctx);
        if changed {
            said.push(format!("listener {} changed (for new clients)", l.name));
        }
    }
    for name in running.sql_names() {
        if !new.listeners.contains_key(&name) {
            running.stop_sql(&name);
            said.push(format!(
                "listener {name} stopped accepting; its clients finish"
            ));
        }
    }
    for name in running.hs_names() {
        if !new.handlersocket.contains_key(&name) {
            running.stop_hs(&name);
            said.push(format!(
                "handlersocket {name} stopped accepting; its clients finish"
            ));
        }
    }
    if (&new.servers, &new.clusters) != (&old.servers, &old.clusters) {
        said.push(crate::topology::reload::apply(shared, &old, &new));
    }
    if old.rules != new.rules || old.tables != new.tables {
        use sluice_config::Protocol;
        shared
            .pg
            .rules
            .store(Arc::new(crate::rules::Rules::new(&new, Protocol::Postgres)));
        shared
            .my
            .rules
            .store(Arc::new(crate::rules::Rules::new(&new, Protocol::Mysql)));
        said.push(format!(
            "{} rules and {} table rules (for new sessions)",
            new.rules.len(),
            new.tables.len()
        ));
    }
    if old.users != new.users {
        said.push("users and passwords changed (for new logins)".into());
    }
    if old.pools != new.pools || old.users != new.users {
        use crate::session::plan::refresh_settings;
        let n = refresh_settings(shared, &shared.pg.pools, &new, "DISCARD ALL")
            + refresh_settings(shared, &shared.my.pools, &new, "COM_RESET_CONNECTION");
        if n > 0 {
            said.push(format!(
                "{n} pools took their policy's new settings (for new leases)"
            ));
        }
    }
    if old.admin.users != new.admin.users || old.admin.pg_database != new.admin.pg_database {
        said.push("[admin] users and pg_database changed (for new console logins)".into());
    }
    if (&old.admin.http_address, &old.admin.mysql_address)
        != (&new.admin.http_address, &new.admin.mysql_address)
    {
        said.push("[admin] addresses change at the next start".into());
    }
    if old.general.worker_threads != new.general.worker_threads
        || old.general.digest_max_entries != new.general.digest_max_entries
    {
        said.push("worker_threads and digest_max_entries change at the next start".into());
    }
    if old.general.busy_poll_us != new.general.busy_poll_us {
        crate::session::spin::set(new.general.busy_poll_us);
        said.push(format!("busy_poll_us is {}", new.general.busy_poll_us));
    }
    if said.is_empty() {
        said.push("nothing changed".into());
    }
    tracing::info!(changes = %said.join("; "), "configuration reloaded");
    Ok(said.join("; "))
}
