//! `SHOW SERVERS`: every cluster's servers, as the health checker sees them, with the
//! server connections Sluice holds on each.

use crate::admin::table::{Cell, Table, Type};
use crate::shared::Shared;

pub const COLUMNS: &[(&str, Type)] = &[
    ("cluster", Type::Text),
    ("server", Type::Text),
    ("address", Type::Text),
    ("protocol", Type::Text),
    ("role", Type::Text),
    ("health", Type::Text),
    ("lag_ms", Type::Float),
    ("position", Type::Text),
    ("in_use", Type::Int),
    ("idle", Type::Int),
    ("max_connections", Type::Int),
];

pub fn table(shared: &Shared) -> Table {
    let config = shared.config.load();
    let topology = shared.topology.load();
    let mut t = Table::new(COLUMNS);
    let mut clusters: Vec<_> = topology.clusters.iter().collect();
    clusters.sort_by(|a, b| a.0.cmp(b.0));
    for (cluster, view) in clusters {
        for s in &view.servers {
            let Some(server) = config.servers.get(&*s.name) else {
                continue;
            };
            let addr = format!("{}:{}", server.host, server.port);
            let (in_use, idle) = match server.protocol {
                sluice_config::Protocol::Postgres => shared.pg.counts_on(&addr),
                sluice_config::Protocol::Mysql => shared.my.counts_on(&addr),
            };
            let health = match (s.offline, s.up) {
                (true, _) => "offline",
                (false, true) => "up",
                (false, false) => "down",
            };
            let cap = shared.budgets.load().get(&*s.name).map(|b| b.cap());
            t.push(vec![
                cluster.as_str().into(),
                (&*s.name).into(),
                addr.into(),
                server.protocol.as_str().into(),
                s.role.as_str().into(),
                health.into(),
                s.lag.map(|d| d.as_secs_f64() * 1000.0).into(),
                s.position.map(position).into(),
                in_use.into(),
                idle.into(),
                match cap {
                    Some(c) if c > 0 && c < usize::MAX => Cell::from(c),
                    _ => Cell::Null,
                },
            ]);
        }
    }
    t
}

/// A replay position as PostgreSQL writes an LSN (`16/B374D848`).
fn position(p: u64) -> String {
    format!("{:X}/{:X}", p >> 32, p & 0xffff_ffff)
}
