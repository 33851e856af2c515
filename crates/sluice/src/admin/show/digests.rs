//! `SHOW DIGESTS`: query digests per (digest, user, database, listener), times in
//! microseconds (`SHOW DIGESTS ORDER BY total_time DESC LIMIT 20`).

use crate::admin::table::{Table, Type};
use crate::shared::Shared;

pub const COLUMNS: &[(&str, Type)] = &[
    ("digest", Type::Text),
    ("digest_text", Type::Text),
    ("user", Type::Text),
    ("database", Type::Text),
    ("listener", Type::Text),
    ("count", Type::Int),
    ("total_time", Type::Int),
    ("avg_time", Type::Int),
    ("min_time", Type::Int),
    ("max_time", Type::Int),
    ("p50_time", Type::Int),
    ("p99_time", Type::Int),
    ("rows_sent", Type::Int),
    ("rows_affected", Type::Int),
    ("errors", Type::Int),
    ("first_seen", Type::Int),
    ("last_seen", Type::Int),
];

pub fn table(shared: &Shared) -> Table {
    let mut t = Table::new(COLUMNS);
    let Some(d) = &shared.digests else {
        return t;
    };
    let us = |d: std::time::Duration| d.as_micros().min(i64::MAX as u128) as i64;
    for r in d.rows() {
        let avg = us(r.total) / (r.count.max(1) as i64);
        t.push(vec![
            format!("{:#018x}", r.digest).into(),
            (&*r.text).into(),
            (&*r.user).into(),
            (&*r.database).into(),
            (&*r.listener).into(),
            r.count.into(),
            us(r.total).into(),
            avg.into(),
            us(r.min).into(),
            us(r.max).into(),
            us(r.p50).into(),
            us(r.p99).into(),
            r.rows.into(),
            r.affected.into(),
            r.errors.into(),
            super::unix(r.first_seen).into(),
            super::unix(r.last_seen).into(),
        ]);
    }
    t
}
