//! A reload that changes servers or clusters: the topology is rebuilt for the new
//! configuration, keeping what the checker knew of every server that stayed where it
//! was; the checkers restart; a removed server is drained (no new leases; sessions on
//! it finish, transaction-mode ones move at their next transaction, its idle
//! connections close); an added one gets its connection budget and TLS set-up.

use super::{Topology, health};
use crate::shared::Shared;
use sluice_config::{Config, ServerTls};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn addr(s: &sluice_config::Server) -> String {
    format!("{}:{}", s.host, s.port)
}

/// TLS towards every server of the new file that uses it, its CA file read again (a
/// rotated CA is picked up). Any failure refuses the reload: a server that requires
/// TLS must never be reached without it.
pub fn connectors(new: &Config) -> Result<HashMap<String, tokio_rustls::TlsConnector>, String> {
    let mut out = HashMap::new();
    for s in new.servers.values().filter(|s| s.tls != ServerTls::Disable) {
        let ca = s.tls_ca_file.as_deref().filter(|_| s.tls.verifies());
        let c = crate::tls::connector(ca)
            .map_err(|e| format!("server \"{}\": TLS set-up: {e:#}", s.name))?;
        out.insert(s.name.clone(), c);
    }
    Ok(out)
}

/// Applies the new servers and clusters (the configuration snapshot and the TLS
/// connectors are the new ones already); what changed, in a line.
pub fn apply(shared: &Arc<Shared>, old: &Config, new: &Config) -> String {
    let mut said = Vec::new();
    // Connection budgets: a server that stays where it was keeps its budget (the
    // connections open stay counted) with the new cap.
    let mut budgets = HashMap::new();
    let old_budgets = shared.budgets.load();
    for s in new.servers.values() {
        let stays = old.servers.get(&s.name).is_some_and(|o| addr(o) == addr(s));
        let budget = match old_budgets.get(&s.name).filter(|_| stays) {
            Some(b) => {
                b.reconfigure(s.max_server_connections);
                b.clone()
            }
            None => crate::pool::budget::ServerBudget::new(&s.name, s.max_server_connections),
        };
        budgets.insert(s.name.clone(), budget);
    }
    shared.budgets.store(Arc::new(budgets));
    let topo = &shared.topology;
    {
        let mut wake = topo.wake.write();
        for s in new.servers.values() {
            wake.entry(addr(s)).or_default();
        }
    }
    {
        let _writer = topo.writer.lock();
        let before = topo.load();
        let mut next = Topology::initial(new);
        for (name, cluster) in next.clusters.iter_mut() {
            for v in cluster.servers.iter_mut() {
                let moved =
                    old.servers.get(&*v.name).map(addr) != new.servers.get(&*v.name).map(addr);
                let known = before
                    .clusters
                    .get(name)
                    .and_then(|c| c.servers.iter().find(|o| o.name == v.name));
                if let Some(known) = known.filter(|_| !moved) {
                    *v = known.clone();
                }
            }
        }
        next.generation = before.generation + 1;
        next.routes = before.routes + 1;
        topo.epoch.fetch_add(1, Ordering::SeqCst);
        topo.publish(next);
    }
    for s in old.servers.values() {
        if new.servers.get(&s.name).is_none_or(|n| addr(n) != addr(s)) {
            shared.pg.close_idle_on(&addr(s));
            shared.my.close_idle_on(&addr(s));
            said.push(format!("server {} removed: draining", s.name));
        }
    }
    for s in new.servers.values() {
        if !old.servers.contains_key(&s.name) {
            said.push(format!("server {} added", s.name));
        }
    }
    for c in new.clusters.keys() {
        if old.clusters.get(c) != new.clusters.get(c) {
            said.push(format!("cluster {c} changed"));
        }
    }
    health::start(shared);
    said.join("; ")
}
