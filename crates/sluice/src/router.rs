//! The router: a pure function from a listener and the topology to the server a
//! client's requests go to. No sockets, no awaits; read-write failover, read-only
//! balancing and read/write split grow here.

use sluice_config::{Config, Listener, Server};

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<'a> {
    pub server: &'a Server,
}

/// Read-write route: the first server of the listener's cluster.
pub fn route<'a>(listener: &Listener, topology: &'a Config) -> Option<Route<'a>> {
    route_cluster(&listener.cluster, topology)
}

/// Read-write route to a cluster: its first server.
pub fn route_cluster<'a>(cluster: &str, topology: &'a Config) -> Option<Route<'a>> {
    let cluster = topology.clusters.get(cluster)?;
    let server = cluster
        .servers
        .iter()
        .find_map(|s| topology.servers.get(s))?;
    Some(Route { server })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_to_first_server_of_cluster() {
        let cfg = sluice_config::builtin_default();
        let l = &cfg.listeners["pg"];
        let r = route(l, &cfg).unwrap();
        assert_eq!(r.server.port, 5432);
        let mut bad = l.clone();
        bad.cluster = "nope".into();
        assert!(route(&bad, &cfg).is_none());
    }
}
