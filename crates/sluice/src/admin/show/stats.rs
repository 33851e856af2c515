//! `SHOW STATS`: per listener, statements, errors, rows and latency (kept with
//! digests); per pool, leases (transactions, in transaction mode), waits and wait time.

use crate::admin::table::{Cell, Table, Type};
use crate::shared::Shared;
use std::sync::atomic::{AtomicU64, Ordering};

pub const COLUMNS: &[(&str, Type)] = &[
    ("scope", Type::Text),
    ("name", Type::Text),
    ("logins", Type::Int),
    ("queries", Type::Int),
    ("errors", Type::Int),
    ("rows", Type::Int),
    ("bytes_in", Type::Int),
    ("bytes_out", Type::Int),
    ("avg_us", Type::Float),
    ("p50_us", Type::Float),
    ("p99_us", Type::Float),
    ("transactions", Type::Int),
    ("waits", Type::Int),
    ("wait_ms", Type::Float),
    ("wait_timeouts", Type::Int),
];

pub fn table(shared: &Shared) -> Table {
    let mut t = Table::new(COLUMNS);
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    for (name, l) in shared.counters.all() {
        let h = l.latency.snapshot();
        let n = h.count();
        let avg = (n > 0).then(|| h.sum_us as f64 / n as f64);
        t.push(vec![
            "listener".into(),
            (&*name).into(),
            c(&l.logins).into(),
            c(&l.queries).into(),
            c(&l.errors).into(),
            c(&l.rows).into(),
            c(&l.bytes_in).into(),
            c(&l.bytes_out).into(),
            avg.into(),
            h.quantile_us(0.5).into(),
            h.quantile_us(0.99).into(),
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
        ]);
    }
    let pg = shared.pg.pools.all().into_iter().map(|p| {
        let (name, leases, waits) = (p.name.clone(), c(&p.leases), c(&p.waits));
        (name, leases, waits, c(&p.wait_us), c(&p.wait_timeouts))
    });
    let my = shared.my.pools.all().into_iter().map(|p| {
        let (name, leases, waits) = (p.name.clone(), c(&p.leases), c(&p.waits));
        (name, leases, waits, c(&p.wait_us), c(&p.wait_timeouts))
    });
    for (name, leases, waits, wait_us, timeouts) in pg.chain(my) {
        t.push(vec![
            "pool".into(),
            name.into(),
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            leases.into(),
            waits.into(),
            (wait_us as f64 / 1000.0).into(),
            timeouts.into(),
        ]);
    }
    for (name, kv) in shared.kv_stats.read().iter() {
        // HandlerSocket: requests as queries, the batches they ran in as transactions.
        let mut row = vec![Cell::Null; COLUMNS.len()];
        row[0] = "handlersocket".into();
        row[1] = name.as_str().into();
        row[3] = c(&kv.requests).into();
        row[COLUMNS.len() - 4] = c(&kv.batches).into();
        t.push(row);
    }
    t
}
