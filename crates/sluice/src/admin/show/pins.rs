//! `SHOW PINS`: sessions pinned to their server connection now, by reason (a pinned
//! transaction-mode client keeps its connection as a session-mode one does), and the
//! pins taken since start.

use crate::admin::table::{Table, Type};
use crate::session::ledger::PinReason;
use crate::shared::Shared;

pub fn table(shared: &Shared) -> Table {
    let mut t = Table::new(&[
        ("reason", Type::Text),
        ("clients", Type::Int),
        ("pins_total", Type::Int),
    ]);
    let mut now = [0u64; PinReason::ALL.len()];
    for c in shared.book.all() {
        for r in c.pinned() {
            now[r as usize] += 1;
        }
    }
    for r in PinReason::ALL {
        t.push(vec![
            r.as_str().into(),
            now[r as usize].into(),
            shared.pins.get(r).into(),
        ]);
    }
    t
}
