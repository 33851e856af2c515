//! A server connection's cancel key ([`ServerKey`]), and the rule that a connection
//! runs nothing new while a cancel is on its way to it. Each client gets Sluice's own
//! BackendKeyData; the registry that sends a CancelRequest carrying it on to the server
//! connection that client is using at that moment, and to nothing else, is
//! `session/cancel.rs`.
//!
//! A server acts on a cancel request some time after it was sent (it signals the backend
//! process once it has read the request), so a cancel sent while a client's statement
//! ran may land when the statement is over. Directly that is harmless when the client
//! waits for the server to close the cancel connection, as libpq does: the backend,
//! reading its next command, ignores it. Through a pool the connection may meanwhile run
//! another statement, the client's or another client's. So while a cancel is on its way
//! to a server connection, that connection runs nothing new: the pool takes it back only
//! once the server has closed the cancel connection ([`ServerKey::settled`]), the
//! client's next request waits for that too, and a shared connection writes nothing
//! more meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where a client's running query can be cancelled right now.
#[derive(Debug, Default)]
pub struct ServerKey {
    pub addr: std::sync::Arc<str>,
    pub pid: i32,
    pub secret: i32,
    /// Cancel requests on their way to this connection.
    cancels: AtomicU32,
    settled: tokio::sync::Notify,
}

impl PartialEq for ServerKey {
    fn eq(&self, other: &Self) -> bool {
        (&self.addr, self.pid, self.secret) == (&other.addr, other.pid, other.secret)
    }
}

impl Eq for ServerKey {}

impl ServerKey {
    pub fn new(addr: Arc<str>, pid: i32, secret: i32) -> ServerKey {
        ServerKey {
            addr,
            pid,
            secret,
            ..ServerKey::default()
        }
    }

    /// A cancel request is on its way to the connection: until the guard is dropped
    /// (the server has closed the cancel connection, or will not get it) the connection
    /// must run nothing new. Taken before the last check that the client still uses
    /// the connection (see [`Slot::get`]).
    pub fn cancelling(self: &Arc<Self>) -> InFlight {
        self.cancels.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Whether a cancel request is on its way to the connection.
    pub fn unsettled(&self) -> bool {
        self.cancels.load(Ordering::SeqCst) > 0
    }

    /// Waits until no cancel request is on its way to the connection.
    pub async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.unsettled() {
                return;
            }
            notified.await;
        }
    }
}

/// A cancel request on its way (see [`ServerKey::cancelling`]).
pub struct InFlight(Arc<ServerKey>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.cancels.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}
