//! Server connections are a shared, capped resource: every pool of a server (one per
//! user, database and policy) draws from that server's budget, so that many pools each
//! keeping a few idle connections cannot use up the server's `max_connections` and
//! leave new clients refused by the server. Opening a connection takes a [`Permit`];
//! at the cap, the least recently used idle connection of any pool of the server is
//! closed to make room (PgBouncer's `max_db_connections` with its idle eviction); with
//! none idle, the opener waits for a connection to close, up to its wait timeout, and
//! then gets an error naming the server (53300 / 1040). The cap is configured
//! (`max_server_connections`) or, by default, read from the server at the first login.
//! A server that refuses a connection for lack of room (another program uses its
//! connections too) gets the same treatment: an idle connection is closed and the
//! login tried again (nothing of it reached the server).

use crate::error::{Error, Kind, Side};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// What the budget needs of a pool: its idle connections, to close the least recently
/// used one.
pub trait IdleConns: Send + Sync {
    /// When the least recently used idle connection was last given back.
    fn oldest_idle(&self) -> Option<Instant>;
    /// Closes that connection; false when there was none any more.
    fn close_oldest_idle(&self) -> bool;
}

/// The connections open to one server, across all its pools.
pub struct ServerBudget {
    pub server: String,
    /// 0: not known yet (no cap until then).
    cap: AtomicUsize,
    /// The cap comes from the configuration: the server's own limit is not read.
    configured: bool,
    learning: AtomicBool,
    open: AtomicUsize,
    pools: Mutex<Vec<Weak<dyn IdleConns>>>,
    freed: tokio::sync::Notify,
}

/// One open server connection (or one being opened); dropping it gives the room back.
pub struct Permit(Option<Arc<ServerBudget>>);

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            b.open.fetch_sub(1, Ordering::AcqRel);
            b.freed.notify_waiters();
        }
    }
}

impl Permit {
    /// A connection counted nowhere (a server outside any budget).
    pub fn none() -> Permit {
        Permit(None)
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

impl ServerBudget {
    /// `cap`: the configured `max_server_connections`, or None to read the server's.
    pub fn new(server: &str, cap: Option<usize>) -> Arc<ServerBudget> {
        Arc::new(ServerBudget {
            server: server.to_owned(),
            cap: AtomicUsize::new(cap.unwrap_or(0)),
            configured: cap.is_some(),
            learning: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            pools: Mutex::new(Vec::new()),
            freed: tokio::sync::Notify::new(),
        })
    }

    /// Connections open (or opening) to the server now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub fn cap(&self) -> usize {
        self.cap.load(Ordering::Acquire)
    }

    /// A reload changed the configured cap: the connections open stay counted.
    pub fn reconfigure(&self, cap: Option<usize>) {
        if let Some(n) = cap {
            self.cap.store(n, Ordering::Release);
            self.freed.notify_waiters();
        }
    }

    /// A pool of this server: its idle connections may be closed to make room.
    pub fn register(&self, pool: Weak<dyn IdleConns>) {
        let mut pools = self.pools.lock();
        pools.retain(|p| p.strong_count() > 0);
        pools.push(pool);
    }

    /// Whether the caller should read the server's limit now (once, at the first login).
    pub fn wants_limit(&self) -> bool {
        !self.configured && self.cap() == 0 && !self.learning.swap(true, Ordering::AcqRel)
    }

    /// The server's own limit, as read at a login (None: it could not be read; the
    /// next login tries again). The cap stays a tenth below it (at least one): a server
    /// counts a connection until its thread has finished, a little after it closed the
    /// socket, and its administrators need a way in.
    pub fn learn_limit(&self, limit: Option<usize>) {
        match limit.filter(|&n| n > 1) {
            Some(limit) => {
                let n = limit - (limit / 10).max(1);
                tracing::info!(server = %self.server, max_server_connections = n, "server connection cap read from the server");
                self.cap.store(n, Ordering::Release);
            }
            None => self.learning.store(false, Ordering::Release),
        }
    }

    /// Room for one more connection, making it by closing the least recently used idle
    /// connection of the server's pools if need be, else waiting up to `wait`.
    pub async fn acquire(self: &Arc<Self>, wait: Duration) -> Result<Permit, Error> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.freed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_take() {
                return Ok(Permit(Some(self.clone())));
            }
            // A connection closed to make room counts until the server has let it go:
            // wait for that (or for any other to close).
            self.evict_one();
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(self.full(wait));
            }
        }
    }

    fn try_take(&self) -> bool {
        let cap = self.cap();
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (cap == 0 || n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    /// Closes the least recently used idle connection among the server's pools.
    pub fn evict_one(&self) -> bool {
        let pools: Vec<Arc<dyn IdleConns>> =
            self.pools.lock().iter().filter_map(Weak::upgrade).collect();
        let oldest = pools
            .iter()
            .filter_map(|p| p.oldest_idle().map(|t| (t, p)))
            .min_by_key(|(t, _)| *t);
        match oldest {
            Some((_, p)) => {
                let closed = p.close_oldest_idle();
                if closed {
                    tracing::debug!(server = %self.server, "closed an idle server connection to make room");
                }
                closed
            }
            None => false,
        }
    }

    /// The error a client gets when no room came in time.
    pub fn full(&self, wait: Duration) -> Error {
        Error::new(
            Kind::PoolTimeout,
            Side::Internal,
            format!(
                "too many connections to server \"{}\" ({} open, all in use for {:?})",
                self.server,
                self.open(),
                wait
            ),
        )
    }
}

/// Takes room for a connection to the server a target names, if it has a budget.
pub async fn permit(budget: Option<&Arc<ServerBudget>>, wait: Duration) -> Result<Permit, Error> {
    match budget {
        Some(b) => b.acquire(wait).await,
        None => Ok(Permit::none()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool's idle connections: when each was given back, and its permit.
    struct Idle(Mutex<Vec<(Instant, Permit)>>);

    impl IdleConns for Idle {
        fn oldest_idle(&self) -> Option<Instant> {
            self.0.lock().iter().map(|(t, _)| *t).min()
        }
        fn close_oldest_idle(&self) -> bool {
            let mut v = self.0.lock();
            let Some(i) = v
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.0)
                .map(|(i, _)| i)
            else {
                return false;
            };
            v.remove(i);
            true
        }
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_idle_connection_makes_room() {
        let b = ServerBudget::new("s", Some(2));
        let wait = Duration::from_millis(20);
        let t0 = Instant::now();
        let newer = (t0 + Duration::from_secs(1), b.acquire(wait).await.unwrap());
        let older = (t0, b.acquire(wait).await.unwrap());
        let a: Arc<dyn IdleConns> = Arc::new(Idle(Mutex::new(vec![newer])));
        let c: Arc<dyn IdleConns> = Arc::new(Idle(Mutex::new(vec![older])));
        b.register(Arc::downgrade(&a));
        b.register(Arc::downgrade(&c));
        // At the cap: the least recently used idle connection (in `c`) is closed.
        let p = b.acquire(wait).await.unwrap();
        assert!(c.oldest_idle().is_none());
        assert!(a.oldest_idle().is_some());
        let q = b.acquire(wait).await.unwrap();
        assert!(a.oldest_idle().is_none());
        // None idle: a waiter gets the room of a connection that closes...
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.acquire(Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(p);
        let r = waiter.await.unwrap().unwrap();
        // ...or, when none does, an error naming the server.
        let e = b.acquire(wait).await.unwrap_err();
        assert!(e.message.contains("\"s\""), "{}", e.message);
        drop((q, r));
    }

    #[test]
    fn the_limit_is_read_once() {
        let b = ServerBudget::new("s", None);
        assert!(b.wants_limit());
        assert!(!b.wants_limit(), "one login reads it");
        b.learn_limit(None);
        assert!(
            b.wants_limit(),
            "it could not be read: the next login tries"
        );
        b.learn_limit(Some(30));
        assert_eq!(b.cap(), 27, "a tenth below the server's limit");
        assert!(!b.wants_limit());
        assert!(!ServerBudget::new("s", Some(5)).wants_limit());
    }
}
