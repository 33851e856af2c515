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
pub mod odds;
pub mod pg;
pub mod plan;
pub mod pump;
pub mod queue;
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

    /// The size of what `f` returns (without calling it).
    fn returned<A, F>(_: fn(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every connected client's task holds its session's future, in tokio's cell of
    /// 128-byte steps: 512 bytes while the future is at most 392 (the cell is 120 more
    /// with its wrappers; architecture.md). Measured without the client's socket
    /// (tokio's `TcpStream` is 32 bytes in the release build, more with some of the
    /// features tests turn on), as the release build lays it out.
    #[test]
    fn a_session_fits_in_a_512_byte_task() {
        let socket = std::mem::size_of::<crate::stream::Stream>() - 32;
        let pg = returned(driver::run::<pg::Relay>) - socket;
        let mysql = returned(driver::run::<mysql::Relay>) - socket;
        assert!(pg <= 392 && mysql <= 392, "PostgreSQL {pg}, MySQL {mysql}");
    }

    /// Every session with rules or digests holds its view of them in a box: 96 bytes
    /// (jemalloc's class), with the listener's names read from the session's own
    /// configuration rather than kept again.
    #[test]
    fn a_sessions_view_of_the_rules_fits_in_96_bytes() {
        let size = std::mem::size_of::<judge::Judging>();
        assert!(size <= 96, "{size}");
    }

    /// Every client's line in the book (`SHOW CLIENTS`), with its `Arc`'s two counts:
    /// 128 bytes, jemalloc's class.
    #[test]
    fn a_clients_line_in_the_book_fits_in_128_bytes() {
        let size = std::mem::size_of::<clients::ClientInfo>() + 16;
        assert!(size <= 128, "{size}");
    }
}
