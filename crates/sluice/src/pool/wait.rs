//! Waiting for a connection, first come, first served. A client that finds no idle
//! connection and no room to open one joins the pool's queue; a connection given back
//! goes to the head of the queue (not to whoever happens to ask next), and a slot freed
//! by a closed connection lets the head open a new one. Without this, clients arriving
//! later take the connections that waiters were woken for, and under a crowd of clients
//! a few wait for seconds while the rest are served in milliseconds.

use super::LoginError;
use super::{Lease, Pool, PoolConn, Slot, State};
use crate::error::{Error, Kind, Side};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::oneshot;

/// What a waiting client is given.
pub(super) enum Grant<C> {
    /// A connection, clean and ready.
    Conn(C),
    /// Room for one more connection (already counted in the pool's total): open it.
    Slot,
}

/// Gives `g` to the longest waiter still waiting; returns it when there is none.
pub(super) fn hand_over<C>(st: &mut State<C>, mut g: Grant<C>) -> Option<Grant<C>> {
    while let Some(w) = st.waiters.pop_front() {
        match w.send(g) {
            Ok(()) => return None,
            // That client stopped waiting (timed out or left): the next one.
            Err(back) => g = back,
        }
    }
    Some(g)
}

/// A place in the queue. Dropped before it got anything (timeout, client gone), it
/// leaves the queue; if a grant reached it meanwhile, the grant goes back to the pool.
struct Waiter<C: PoolConn> {
    pool: Arc<Pool<C>>,
    rx: oneshot::Receiver<Grant<C>>,
}

impl<C: PoolConn> Drop for Waiter<C> {
    fn drop(&mut self) {
        self.rx.close();
        if let Ok(g) = self.rx.try_recv() {
            match g {
                Grant::Conn(c) => self.pool.give_back(c),
                Grant::Slot => self.pool.slot_freed(),
            }
        }
        if self.pool.waiting.fetch_sub(1, Ordering::Relaxed) == 1 {
            *self.pool.wait_since.lock() = None;
        }
    }
}

impl<C: PoolConn> Pool<C> {
    /// One connection fewer: the longest waiter may open one in its place.
    pub(super) fn slot_freed(&self) {
        let can_open = self.can_open();
        let mut st = self.state.lock();
        st.total -= 1;
        if can_open && st.total < self.settings().size && !st.waiters.is_empty() {
            st.total += 1;
            if hand_over(&mut st, Grant::Slot).is_some() {
                st.total -= 1;
            }
        }
    }

    /// Opens a connection in a slot already counted.
    async fn open_counted(self: &Arc<Self>) -> Result<Lease<C>, LoginError> {
        // The slot gives the count back if the login fails or this future is dropped
        // mid-login.
        let slot = Slot {
            pool: self.clone(),
            armed: true,
        };
        let Some(op) = self.opener.lock().clone() else {
            return Err(LoginError::Proxy(Error::new(
                Kind::PoolTimeout,
                Side::Internal,
                format!("pool \"{}\" cannot open connections", self.name),
            )));
        };
        let conn = C::open(&op).await?;
        self.leases.fetch_add(1, Ordering::Relaxed);
        crate::stream::polls::bump();
        Ok(Lease { conn, slot })
    }

    /// Takes an idle connection, opens one if there is room, or queues up to the wait
    /// timeout.
    pub(super) async fn lease_slow(self: &Arc<Self>) -> Result<Lease<C>, LoginError> {
        let deadline = tokio::time::Instant::now() + self.settings().wait_timeout;
        let can_open = self.can_open();
        let (got, expired, queued) = {
            let mut st = self.state.lock();
            let (got, expired) = self.take_idle_unless_waited(&mut st);
            if got.is_some() {
                (got, expired, None)
            } else if can_open && st.total < self.settings().size {
                st.total += 1;
                (None, expired, None)
            } else {
                let (tx, rx) = oneshot::channel();
                st.waiters.push_back(tx);
                (None, expired, Some(rx))
            }
        };
        expired.into_iter().for_each(C::close);
        if let Some(conn) = got {
            return Ok(self.leased(conn));
        }
        let Some(rx) = queued else {
            return self.open_counted().await;
        };
        self.waits.fetch_add(1, Ordering::Relaxed);
        if self.waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            self.wait_since.lock().get_or_insert_with(Instant::now);
        }
        let mut w = Waiter {
            pool: self.clone(),
            rx,
        };
        let waited = tokio::time::Instant::now();
        let got = tokio::time::timeout_at(deadline, &mut w.rx).await;
        drop(w);
        let took = waited.elapsed();
        let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
        self.wait_us.fetch_add(us, Ordering::Relaxed);
        self.wait_time.record(took);
        if took > super::SLOW_WAIT {
            self.slow_waits.fetch_add(1, Ordering::Relaxed);
        }
        if got.is_err() {
            self.wait_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        match got {
            Ok(Ok(Grant::Conn(c))) => Ok(self.leased(c)),
            Ok(Ok(Grant::Slot)) => self.open_counted().await,
            // The pool went away (cannot happen while `self` is alive) or the wait timed
            // out: either way, no connection.
            Ok(Err(_)) | Err(_) => Err(LoginError::Proxy(Error::new(
                Kind::PoolTimeout,
                Side::Internal,
                format!(
                    "no server connection available in pool \"{}\" within {:?} (all {} in use)",
                    self.name,
                    self.settings().wait_timeout,
                    self.settings().size
                ),
            ))),
        }
    }
}
