//! The session: per-client state shared by both protocols. It decides how long a client
//! must hold its server connection (statement, transaction, session, or pinned) from
//! the pool mode, the transaction status and the ledger of what the client changed.

mod acquire;
pub mod cancel;
pub mod clients;
pub mod driver;
pub mod effects;
pub mod judge;
pub mod ledger;
pub mod lost;
pub mod mirror;
pub mod mysql;
pub mod pg;
pub mod plan;
pub mod pump;
pub mod reroute;
pub mod spin;
pub mod timeouts;

pub use ledger::{Ledger, PinReason};
use sluice_config::PoolMode;

/// What the session needs to know to decide whether a server connection can go back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStatus {
    Idle,
    InTransaction,
    Failed,
}

impl TxStatus {
    pub fn from_pg(status: u8) -> TxStatus {
        match status {
            b'I' => TxStatus::Idle,
            b'T' => TxStatus::InTransaction,
            _ => TxStatus::Failed,
        }
    }
}

/// Lets go of an empty queue's memory (a session at rest keeps none).
pub fn shed<T>(q: &mut std::collections::VecDeque<T>) {
    if q.is_empty() && q.capacity() > 0 {
        *q = std::collections::VecDeque::new();
    }
}

/// [`shed`], keeping a small queue's memory in the thread's `spares` for the next
/// session that needs one ([`unshed`]): a queue filled and emptied every statement
/// then allocates nothing.
pub fn shed_to<T: 'static>(
    q: &mut std::collections::VecDeque<T>,
    spares: &'static crate::stream::spare::Spares<std::collections::VecDeque<T>>,
) {
    if q.is_empty() && q.capacity() > 0 {
        let q = std::mem::take(q);
        if q.capacity() <= 64 {
            crate::stream::spare::keep(spares, q);
        }
    }
}

/// An empty queue without memory takes a spare's, if the thread has one.
pub fn unshed<T: 'static>(
    q: &mut std::collections::VecDeque<T>,
    spares: &'static crate::stream::spare::Spares<std::collections::VecDeque<T>>,
) {
    if q.capacity() == 0
        && let Some(s) = crate::stream::spare::take(spares)
    {
        *q = s;
    }
}

/// May the client's server connection be released now? Only at rest (nothing in flight),
/// outside a transaction, in transaction mode, and with no pinning state.
pub fn may_release(mode: PoolMode, at_rest: bool, tx: TxStatus, ledger: &Ledger) -> bool {
    mode == PoolMode::Transaction && at_rest && tx == TxStatus::Idle && !ledger.is_pinned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_rules() {
        let l = Ledger::default();
        assert!(may_release(PoolMode::Transaction, true, TxStatus::Idle, &l));
        assert!(!may_release(PoolMode::Session, true, TxStatus::Idle, &l));
        assert!(!may_release(
            PoolMode::Transaction,
            false,
            TxStatus::Idle,
            &l
        ));
        assert!(!may_release(
            PoolMode::Transaction,
            true,
            TxStatus::InTransaction,
            &l
        ));
        let mut p = Ledger::default();
        p.apply(&sluice_sql::Effect::Listen, false, &Default::default());
        assert!(!may_release(
            PoolMode::Transaction,
            true,
            TxStatus::Idle,
            &p
        ));
    }
}
