//! Reload: SIGHUP and the console's `RELOAD` read the configuration file again. A file
//! with errors is refused with every error (file:line) and the running configuration
//! stays. A valid one is applied without dropping anyone:
//! - the configuration snapshot is swapped: new logins see new users and passwords,
//!   new sessions new pool policies, timeouts and firewall modes;
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
    let shared = &running.shared;
    let old = shared.config.load_full();
    let mut said = Vec::new();
    // Listeners first: a listener that cannot bind refuses the whole reload before
    // anything else changed.
    let mut added = Vec::new();
    for l in new.listeners.values() {
        match running.sql_cfg(&l.name) {
            None => added.push(l),
            Some(now) if now.address != l.address || now.protocol != l.protocol => {
                added.push(l);
            }
            Some(_) => {}
        }
    }
    for l in &added {
        // A listener on a new address binds it before its old socket stops accepting.
        match running.start_sql(l).await {
            Ok(addr) => said.push(format!("listener {} bound on {addr}", l.name)),
            Err(e) => {
                said.push(format!("{e:#}"));
                return Err(format!(
                    "{}; the rest of the configuration was not applied",
                    said.join("; ")
                ));
            }
        }
    }
    for name in running.sql_names() {
        match new.listeners.get(&name) {
            None => {
                running.stop(&name);
                said.push(format!(
                    "listener {name} stopped accepting; its clients finish"
                ));
            }
            Some(l) if running.sql_cfg(&name).as_ref() != Some(l) || l.tls_cert_file.is_some() => {
                running.renew_sql(l).map_err(|e| {
                    format!("listener {name}: {e:#}; the running configuration stays")
                })?;
                if old.listeners.get(&name) != Some(l) {
                    said.push(format!("listener {name} changed (for new clients)"));
                }
            }
            Some(_) => {}
        }
    }
    // Everything below reads the new snapshot.
    let old_topology = (old.servers.clone(), old.clusters.clone());
    shared.config.store(Arc::new(new.clone()));
    if (new.servers.clone(), new.clusters.clone()) != old_topology {
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
    if old.pools != new.pools {
        said.push("pool policies changed (for pools opened from now on)".into());
    }
    for name in running.hs_names() {
        let keep = new.handlersocket.get(&name);
        if keep != running.hs_cfg(&name).as_ref() {
            running.stop(&name);
            if keep.is_none() {
                said.push(format!("handlersocket {name} stopped accepting"));
            }
        }
    }
    for l in new.handlersocket.values() {
        if running.hs_cfg(&l.name).is_none() {
            match running.start_hs(&new, l).await {
                Ok((addr, _)) => said.push(format!("handlersocket {} bound on {addr}", l.name)),
                Err(e) => said.push(format!("handlersocket {}: {e:#}", l.name)),
            }
        }
    }
    if old.admin != new.admin {
        said.push("[admin] changed (users at once; addresses at the next start)".into());
    }
    if old.general.worker_threads != new.general.worker_threads {
        said.push("worker_threads changes at the next start".into());
    }
    if said.is_empty() {
        said.push("nothing changed".into());
    }
    tracing::info!(changes = %said.join("; "), "configuration reloaded");
    Ok(said.join("; "))
}
