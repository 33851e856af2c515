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

pub use pools::options as pool_options;

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

/// `SELECT @@name, ...`, as MySQL clients and drivers send on connecting: one row, a
/// column per variable (unknown ones NULL).
pub fn variables(shared: &Shared, names: &[String]) -> Table {
    use super::table::Cell;
    let columns: Vec<(&'static str, Type)> = names
        .iter()
        .map(|n| match n.as_str() {
            "version_comment" => ("@@version_comment", Type::Text),
            "version" => ("@@version", Type::Text),
            "max_allowed_packet" => ("@@max_allowed_packet", Type::Int),
            "wait_timeout" => ("@@wait_timeout", Type::Int),
            "interactive_timeout" => ("@@interactive_timeout", Type::Int),
            "autocommit" => ("@@autocommit", Type::Int),
            _ => ("@@variable", Type::Text),
        })
        .collect();
    let max = shared.config.load().general.max_message_size;
    let row = names
        .iter()
        .map(|n| match n.as_str() {
            "version_comment" => Cell::from("Sluice admin console"),
            "version" => Cell::from(super::PRODUCT),
            "max_allowed_packet" => Cell::from(max),
            "wait_timeout" | "interactive_timeout" => Cell::Int(28_800),
            "autocommit" => Cell::Int(1),
            _ => Cell::Null,
        })
        .collect();
    let mut t = Table::new(&columns);
    t.push(row);
    t
}

/// Seconds since the Unix epoch.
pub fn unix(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
