//! Timeouts that protect the server from bad clients, for either protocol: a client
//! idle inside a transaction (`idle_transaction_timeout`: it holds a server connection
//! and its locks), a statement that runs too long (`query_timeout`: cancelled on the
//! server), a client idle between transactions (`client_idle_timeout`). The relay tells
//! the clock what phase the client is in after every event; the clock says when the
//! next deadline falls (the IO pump waits for it alongside the sockets) and what it was.

use std::pin::Pin;
use std::task::Context;
use std::time::Duration;
use tokio::time::Instant;

/// What the client is doing, as far as timeouts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Between transactions, nothing in flight.
    Idle,
    /// Inside a transaction, nothing in flight.
    IdleInTransaction,
    /// A request is on its way to the server or being answered.
    Busy,
}

impl Phase {
    /// `busy`: a request is in flight; `in_transaction`: the client holds a server
    /// connection inside a transaction.
    pub fn of(busy: bool, in_transaction: bool) -> Phase {
        match (busy, in_transaction) {
            (true, _) => Phase::Busy,
            (false, true) => Phase::IdleInTransaction,
            (false, false) => Phase::Idle,
        }
    }
}

/// A deadline that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    IdleInTransaction,
    /// The running statement is to be cancelled (once per request).
    Query,
    ClientIdle,
}

/// The configured timeouts (from the client's pool policy).
#[derive(Debug, Clone, Copy, Default)]
pub struct Timeouts {
    pub idle_transaction: Option<Duration>,
    pub query: Option<Duration>,
    pub client_idle: Option<Duration>,
}

impl Timeouts {
    /// The timeouts of a pool's policy (`Settings::session_timeouts`).
    pub fn of<C: crate::pool::PoolConn>(pool: &crate::pool::Pool<C>) -> Timeouts {
        let [idle_transaction, query, client_idle] = pool.settings().session_timeouts;
        Timeouts {
            idle_transaction,
            query,
            client_idle,
        }
    }

    pub fn any(&self) -> bool {
        self.idle_transaction.is_some() || self.query.is_some() || self.client_idle.is_some()
    }
}

/// One client's timeouts: the phase it is in and since when.
#[derive(Debug)]
pub struct Clock {
    t: Timeouts,
    phase: Phase,
    since: Instant,
    /// The request of this Busy phase has been cancelled already.
    cancelled: bool,
    /// A rule's `timeout` for the statement now running (shorter than `query` wins).
    statement: Option<Duration>,
    /// What the session's wait watches for the next deadline (session/pump.rs).
    pub timer: Timer,
}

/// The session's timer (only sessions with a clock have one). `armed`: its deadline is
/// the one set with [`Timer::set_deadline`] and has not passed yet.
#[derive(Debug, Default)]
pub struct Timer {
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
}

impl Timer {
    /// Makes the session's wait end with a timeout once `deadline` has passed.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        let set = self
            .sleep
            .as_ref()
            .filter(|_| self.armed)
            .map(|t| t.deadline());
        if deadline == set {
            return;
        }
        self.armed = deadline.is_some();
        if let Some(d) = deadline {
            match &mut self.sleep {
                Some(t) => t.as_mut().reset(d),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(d))),
            }
        }
    }

    /// Whether the deadline set has passed (once; else `cx` is woken when it does).
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.armed
            && let Some(t) = self.sleep.as_mut()
            && t.as_mut().poll(cx).is_ready()
        {
            self.armed = false;
            return true;
        }
        false
    }
}

impl Clock {
    /// None when no timeout is configured: the relay then keeps no clock at all.
    pub fn new(t: Timeouts) -> Option<Box<Clock>> {
        t.any().then(|| {
            Box::new(Clock {
                t,
                phase: Phase::Idle,
                since: Instant::now(),
                cancelled: false,
                statement: None,
                timer: Timer::default(),
            })
        })
    }

    /// The statement about to run is cancelled after `t` (a rule's timeout): the
    /// session's clock, made now if it has none.
    pub fn for_statement(clock: &mut Option<Box<Clock>>, t: Duration) {
        let c = clock.get_or_insert_with(|| {
            Box::new(Clock {
                t: Timeouts::default(),
                phase: Phase::Idle,
                since: Instant::now(),
                cancelled: false,
                statement: None,
                timer: Timer::default(),
            })
        });
        c.statement = Some(t);
    }

    /// The client is in `phase` now (`activity`: it just sent something, which restarts
    /// an idle period); returns the next deadline, if any.
    pub fn observe(&mut self, phase: Phase, activity: bool) -> Option<Instant> {
        if phase != self.phase || activity && phase != Phase::Busy {
            if self.phase == Phase::Busy {
                // The statement that ran has ended.
                self.statement = None;
            }
            self.phase = phase;
            self.since = Instant::now();
            self.cancelled = false;
        }
        let after = match phase {
            Phase::Idle => self.t.client_idle,
            Phase::IdleInTransaction => self.t.idle_transaction,
            Phase::Busy if self.cancelled => None,
            Phase::Busy => match (self.t.query, self.statement) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }?;
        Some(self.since + after)
    }

    /// The deadline of the current phase passed: what it was.
    pub fn expired(&mut self) -> Expired {
        match self.phase {
            Phase::Idle => Expired::ClientIdle,
            Phase::IdleInTransaction => Expired::IdleInTransaction,
            Phase::Busy => {
                self.cancelled = true;
                Expired::Query
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_phase_has_its_deadline() {
        let s = Duration::from_secs;
        let mut c = Clock::new(Timeouts {
            idle_transaction: Some(s(5)),
            query: Some(s(2)),
            client_idle: None,
        })
        .unwrap();
        let t0 = Instant::now();
        assert_eq!(c.observe(Phase::Idle, false), None);
        assert_eq!(c.observe(Phase::Busy, true), Some(t0 + s(2)));
        tokio::time::advance(s(1)).await;
        // Still the same request.
        assert_eq!(c.observe(Phase::Busy, true), Some(t0 + s(2)));
        tokio::time::advance(s(1)).await;
        assert_eq!(c.expired(), Expired::Query);
        assert_eq!(c.observe(Phase::Busy, false), None, "cancelled once");
        assert_eq!(
            c.observe(Phase::IdleInTransaction, false),
            Some(t0 + s(2) + s(5))
        );
        tokio::time::advance(s(3)).await;
        // The client sent something that needed no server (answered by Sluice).
        assert_eq!(
            c.observe(Phase::IdleInTransaction, true),
            Some(t0 + s(5) + s(5))
        );
        assert!(Clock::new(Timeouts::default()).is_none());
    }
}
