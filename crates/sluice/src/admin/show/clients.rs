//! `SHOW CLIENTS`: every logged-in client (the id is what `KILL CLIENT` takes).

use crate::admin::table::{Table, Type};
use crate::shared::Shared;

/// Why the client's session holds its server connection for good, if it does.
fn pinned(c: &crate::session::clients::ClientInfo) -> String {
    let reasons: Vec<&str> = c.pinned().map(|r| r.as_str()).collect();
    reasons.join(",")
}

pub fn table(shared: &Shared) -> Table {
    let mut t = Table::new(&[
        ("id", Type::Int),
        ("protocol", Type::Text),
        ("listener", Type::Text),
        ("user", Type::Text),
        ("database", Type::Text),
        ("address", Type::Text),
        ("mode", Type::Text),
        ("pid", Type::Int),
        ("connected_at", Type::Int),
        ("connected_s", Type::Int),
        ("pinned", Type::Text),
    ]);
    let now = super::unix(std::time::SystemTime::now());
    for c in shared.book.all() {
        let age = now.saturating_sub(c.since()).max(0);
        t.push(vec![
            c.id.into(),
            c.protocol.as_str().into(),
            c.listener().into(),
            c.user().into(),
            c.database().into(),
            c.addr.map(|a| a.to_string()).into(),
            c.mode.as_str().into(),
            c.pid.into(),
            c.since().into(),
            age.into(),
            pinned(&c).into(),
        ]);
    }
    t
}
