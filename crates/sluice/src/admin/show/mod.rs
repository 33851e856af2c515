//! `SHOW ...`: one file per table. Each builds its table from what the flow keeps;
//! the same tables feed `/api/stats` (the dashboard) and `/metrics`.

mod clients;
mod config;
mod digests;
mod firewall;
mod listeners;
mod pins;
mod pools;
mod rules;
mod servers;
mod stats;
mod version;

use super::command::Show;
use super::table::{Table, Type};
use crate::shared::Shared;

pub fn table(shared: &Shared, what: Show) -> Table {
    match what {
        Show::Servers => servers::table(shared),
        Show::Pools => pools::table(shared),
        Show::Clients => clients::table(shared),
        Show::Listeners => listeners::table(shared),
        Show::Stats => stats::table(shared),
        Show::Pins => pins::table(shared),
        Show::Digests => digests::table(shared),
        Show::Rules => rules::table(shared),
        Show::Firewall => firewall::table(shared),
        Show::Config => config::table(shared),
        Show::Version => version::table(),
    }
}

/// `SELECT @@name`, as MySQL clients send on connecting: one row.
pub fn variable(name: &str) -> Table {
    let value = match name {
        "version_comment" => "Sluice admin console".to_string(),
        "version" => super::PRODUCT.to_string(),
        _ => String::new(),
    };
    let column: &'static str = match name {
        "version_comment" => "@@version_comment",
        "version" => "@@version",
        _ => "@@variable",
    };
    let mut t = Table::new(&[(column, Type::Text)]);
    t.push(vec![value.into()]);
    t
}

/// Seconds since the Unix epoch.
pub fn unix(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
