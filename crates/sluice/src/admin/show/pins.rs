//! `SHOW PINS`: sessions pinned to their server connection, by reason, since start
//! (a pinned transaction-mode client keeps its connection as a session-mode one does).

use crate::admin::table::{Table, Type};
use crate::session::ledger::PinReason;
use crate::shared::Shared;

pub fn table(shared: &Shared) -> Table {
    let mut t = Table::new(&[("reason", Type::Text), ("pins", Type::Int)]);
    for r in PinReason::ALL {
        t.push(vec![r.as_str().into(), shared.pins.get(r).into()]);
    }
    t
}
