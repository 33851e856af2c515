//! `SHOW POOLS`: every pool of server connections (one per policy, server, database
//! and user), with its connections, waiters and counters.

use crate::admin::table::{Table, Type};
use crate::pool::{Pool, PoolConn};
use crate::shared::Shared;
use std::sync::atomic::Ordering;

pub const COLUMNS: &[(&str, Type)] = &[
    ("pool", Type::Text),
    ("protocol", Type::Text),
    ("server", Type::Text),
    ("database", Type::Text),
    ("user", Type::Text),
    ("options", Type::Text),
    ("size", Type::Int),
    ("in_use", Type::Int),
    ("idle", Type::Int),
    ("waiting", Type::Int),
    ("leases", Type::Int),
    ("waits", Type::Int),
    ("slow_waits", Type::Int),
    ("wait_ms", Type::Float),
    ("wait_timeouts", Type::Int),
    ("answered", Type::Int),
];

pub fn table(shared: &Shared) -> Table {
    let mut t = Table::new(COLUMNS);
    for p in shared.pg.pools.all() {
        row(&mut t, "postgres", &p);
    }
    for p in shared.my.pools.all() {
        row(&mut t, "mysql", &p);
    }
    t
}

/// What else separates pools of one server, database and user: startup parameters
/// that shape connections, a MySQL client's capabilities and character set, or a
/// pool of its own for `auth_query` lookups.
pub fn options(extra: &[(String, String)]) -> String {
    let parts: Vec<String> = extra.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(",")
}

fn row<C: PoolConn>(t: &mut Table, protocol: &str, p: &Pool<C>) {
    let (total, idle) = p.counts();
    let c = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    t.push(vec![
        p.key.policy.as_str().into(),
        protocol.into(),
        p.key.server.as_str().into(),
        p.key.database.as_str().into(),
        p.key.user.as_str().into(),
        options(&p.key.extra).into(),
        p.settings().size.into(),
        total.saturating_sub(idle).into(),
        idle.into(),
        p.waiting().into(),
        c(&p.leases).into(),
        c(&p.waits).into(),
        c(&p.slow_waits).into(),
        (c(&p.wait_us) as f64 / 1000.0).into(),
        c(&p.wait_timeouts).into(),
        p.answers.given().into(),
    ]);
}
