//! The relay loop of a PostgreSQL session: one task per client moves bytes both ways
//! between the client and whatever server connection it holds, without blocking either
//! direction on the other (a client may pipeline far more than a socket buffer holds).
//! Client messages are handled in `relay_client`, server messages in `relay_server`;
//! this file owns the IO, the lease/release decisions and the end of the session.

use super::Client;
use super::login::Session;
use super::stmts::Statements;
use crate::error::{Error, Kind, Side};
use crate::frontend::pump::{Event, Pump};
use crate::session::effects::Effects;
use crate::session::timeouts::{Clock, Expired, Phase};
use crate::session::{self, Ledger, TxStatus};
use crate::shared::Shared;
use sluice_config::PoolMode;
use sluice_sql::Effect;
use sluice_wire_pg::Scanner;
use sluice_wire_pg::encode::{self, Severity};
use sluice_wire_pg::track::Tracker;
use std::collections::VecDeque;
use std::sync::Arc;

/// Frames larger than this whose content Sluice does not need stream through in pieces.
pub(super) const STREAM_OVER: usize = 64 * 1024;

/// Something to do once the server answers a request.
pub(super) enum Action {
    /// A simple query's statements' effects, one per CommandComplete. `implicit`: the
    /// statements run in one implicit transaction, so they count only if all succeed.
    Effects { q: VecDeque<Effect>, implicit: bool },
    /// Effects of an Execute, applied when it completes.
    ExecEffects(std::sync::Arc<[Effect]>),
    /// A Parse Sluice sent (for a client or by itself): confirmed when it succeeds,
    /// forgotten when it fails.
    Parse {
        hash: u128,
        client_name: Option<bytes::Bytes>,
    },
    /// The SETs Sluice replayed on a connection: if they fail, the session state is
    /// unknown and the session ends.
    Replay,
    /// A Bind or Describe of the pool-wide statement `hash`: if the server answers
    /// that its copy is stale (0A000, prepared before a schema change), the statement's
    /// text goes by a new name from now on.
    Uses { hash: u128 },
}

/// The client's last unnamed statement, kept in one reused buffer (it changes with
/// almost every query of clients using the extended protocol).
#[derive(Default)]
pub(super) struct Unnamed {
    /// Query text, then the parameter types as in the Parse message.
    buf: Vec<u8>,
    query_len: usize,
    set: bool,
}

impl Unnamed {
    pub fn set(&mut self, query: &[u8], types: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(query);
        self.buf.extend_from_slice(types);
        self.query_len = query.len();
        self.set = true;
    }

    pub fn clear(&mut self) {
        self.set = false;
    }

    /// (query, parameter types), if there is an unnamed statement.
    pub fn get(&self) -> Option<(&[u8], &[u8])> {
        self.set.then(|| self.buf.split_at(self.query_len))
    }
}

/// How a session ended.
pub(super) enum End {
    ClientLeft,
    Terminated,
    /// The server sent the client a FATAL error and closed the connection: the client
    /// has its answer, as it would directly, and gets nothing more.
    ServerClosed,
    Shutdown,
    Failed(Error),
}

pub(super) struct Relay {
    pub shared: Arc<Shared>,
    pub s: Session,
    pub io: Pump,
    pub tracker: Tracker,
    pub cscan: Scanner,
    pub sscan: Scanner,
    /// The server frame being streamed is dropped, not forwarded.
    pub s_dropping: bool,
    pub ledger: Ledger,
    pub ledger_in_tx: bool,
    pub stmts: Statements,
    pub actions: VecDeque<(u64, Action)>,
    pub next_token: u64,
    /// Last ReadyForQuery status seen.
    pub status: u8,
    /// Nothing in flight and the last server message was ReadyForQuery.
    pub at_rest: bool,
    /// After Sluice failed a request itself: drop client messages up to Sync.
    pub skip_to_sync: bool,
    pub unnamed_effects: Effects,
    pub portal_effects: Effects,
    pub last_tag: Vec<u8>,
    /// The CopyData frame being streamed from the client is dropped (no COPY running).
    pub c_dropping: bool,
    /// The client's last unnamed statement (query, parameter types), and whether it
    /// exists on the server connection held now.
    pub unnamed: Unnamed,
    pub unnamed_here: bool,
    /// Finished tracker entries, reused between calls.
    pub done_buf: Vec<sluice_wire_pg::track::Done>,
    /// Effects of named portals (rare), by portal name.
    pub named_portal_effects: std::collections::HashMap<bytes::Bytes, std::sync::Arc<[Effect]>>,
    /// Sync batches sent so far: a statement whose Parse went out in an earlier batch
    /// is not relied on until the server confirms it.
    pub batch: u64,
    /// Set when something Sluice did on the client's behalf failed in a way that
    /// leaves the session state unknown (e.g. replaying its SETs).
    pub fatal: Option<Error>,
    /// The answer to the client's query, coming from a shared connection.
    pub muxed: Option<Arc<crate::mux::Answer>>,
    /// The client went away while its answer was on its way.
    client_gone: bool,
    /// The server sent the client a FATAL error: it is about to close the connection.
    pub server_fatal: bool,
    /// The last error the server sent says a prepared statement's copy is stale.
    pub stale_error: bool,
    /// The pool-wide statement the client's round on a shared connection runs.
    pub muxed_stmt: Option<u128>,
    /// What the client's statements signalling other clients leave to do.
    pub signals: Option<Box<super::pids::Signals>>,
    /// The session's timeouts, when its pool has any (session/timeouts.rs).
    clock: Option<Box<Clock>>,
}

pub async fn run(shared: Arc<Shared>, session: Session, client: Client) {
    let clock = Clock::new(crate::session::timeouts::Timeouts::of(&session.pool));
    let mut r = Relay {
        io: Pump::new(&shared, client.stream, client.buf),
        shared,
        s: session,
        tracker: Tracker::new(),
        cscan: Scanner::default(),
        sscan: Scanner::default(),
        s_dropping: false,
        ledger: Ledger::default(),
        ledger_in_tx: false,
        stmts: Statements::default(),
        actions: VecDeque::new(),
        next_token: 0,
        status: b'I',
        at_rest: true,
        skip_to_sync: false,
        unnamed_effects: None,
        portal_effects: None,
        last_tag: Vec::new(),
        c_dropping: false,
        unnamed: Unnamed::default(),
        unnamed_here: false,
        done_buf: Vec::new(),
        named_portal_effects: Default::default(),
        batch: 0,
        fatal: None,
        muxed: None,
        client_gone: false,
        server_fatal: false,
        stale_error: false,
        muxed_stmt: None,
        signals: None,
        clock,
    };
    let end = r.main_loop().await;
    // Boxed: ending a session (flushing, resetting the connection) needs a large future,
    // which would otherwise sit in every connected client's task.
    Box::pin(r.finish(end)).await;
}

impl Relay {
    pub(super) fn tx_mode(&self) -> bool {
        self.s.mode == PoolMode::Transaction
    }

    pub(super) fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    async fn main_loop(&mut self) -> End {
        let mut activity = true;
        if !self.io.cbuf.is_empty() {
            match self.on_client().await {
                Ok(Some(end)) => return end,
                Ok(None) => self.release_synthetic(),
                Err(e) => return End::Failed(e),
            }
        }
        loop {
            if self.signals.is_some() && self.at_rest {
                self.settle_signals();
            }
            self.maybe_release();
            if self.io.shutting_down && self.idle() && self.io.to_client.is_empty() {
                return End::Shutdown;
            }
            if let Some(answer) = self.muxed.clone() {
                let done = self
                    .io
                    .next_answer(&answer, None, &mut self.client_gone)
                    .await;
                if self.client_gone {
                    return End::ClientLeft;
                }
                let Some(done) = done else { continue };
                self.muxed = None;
                if let Some(hash) = self.muxed_stmt.take()
                    && answer.stale()
                {
                    self.s.pool.statement_stale(hash);
                }
                self.s.sync_cancel();
                if let Err(e) = done {
                    return End::Failed(e);
                }
                match self.on_client().await {
                    Ok(Some(end)) => return end,
                    Ok(None) => self.release_synthetic(),
                    Err(e) => return End::Failed(e),
                }
                continue;
            }
            self.watch_the_clock(activity);
            let server = self
                .s
                .lease
                .as_mut()
                .map(|l| (&mut l.conn.stream, &mut l.conn.rbuf));
            let ev = self.io.next(server).await;
            activity = matches!(ev, Event::ClientRead(Ok(1..)));
            let step = match ev {
                Event::ServerRead(Ok(0) | Err(_)) if self.server_fatal => {
                    return End::ServerClosed;
                }
                Event::ServerRead(Ok(0)) => Err(Error::server_gone(
                    "server closed the connection unexpectedly",
                )),
                Event::ServerRead(Ok(_)) => self.on_server(),
                Event::ServerRead(Err(e)) => Err(Error::server_gone(format!(
                    "lost connection to server: {e}"
                ))),
                Event::ClientRead(Ok(0)) | Event::ClientRead(Err(_))
                    if self.s.cancel.slot.terminated() =>
                {
                    // Another client's pg_terminate_backend (see pids.rs).
                    return End::Failed(Error::new(
                        Kind::Shutdown,
                        Side::Server,
                        "terminating connection due to administrator command",
                    ));
                }
                Event::ClientRead(Ok(0)) | Event::ClientRead(Err(_)) => return End::ClientLeft,
                Event::ClientRead(Ok(_)) => match self.on_client().await {
                    Ok(Some(end)) => return end,
                    Ok(None) => {
                        self.release_synthetic();
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
                Event::Wrote => Ok(()),
                Event::WriteFailed(Side::Client, _) => return End::ClientLeft,
                Event::WriteFailed(_, e) => Err(Error::server_gone(format!(
                    "lost connection to server: {e}"
                ))),
                Event::Shutdown => {
                    self.io.shutting_down = true;
                    Ok(())
                }
                Event::Timeout => self.timed_out(),
            };
            if let Err(e) = step {
                return End::Failed(e);
            }
            if let Some(e) = self.fatal.take() {
                return End::Failed(e);
            }
        }
    }

    /// Tells the session's clock what the client is doing; the pump wakes the relay at
    /// the next deadline.
    fn watch_the_clock(&mut self, activity: bool) {
        let phase = Phase::of(
            !self.at_rest || self.muxed.is_some(),
            self.status != b'I' && self.s.lease.is_some(),
        );
        if let Some(c) = self.clock.as_mut() {
            let deadline = c.observe(phase, activity);
            self.io.set_deadline(deadline);
        }
    }

    /// A timeout passed: the running statement is cancelled, or the session ends.
    fn timed_out(&mut self) -> Result<(), Error> {
        let Some(c) = self.clock.as_mut() else {
            return Ok(());
        };
        let (code, message) = match c.expired() {
            Expired::Query => {
                // As the client's own CancelRequest would (see mod.rs).
                let (pid, secret) = self.s.cancel.key;
                let shared = self.shared.clone();
                tokio::spawn(async move { super::cancel(&shared, pid, secret).await });
                return Ok(());
            }
            Expired::IdleInTransaction => (
                "25P03",
                "terminating connection due to idle-in-transaction timeout",
            ),
            Expired::ClientIdle => (
                "57P05",
                "terminating connection due to idle-session timeout",
            ),
        };
        Err(Error::new(Kind::Protocol, Side::Client, message).with_sqlstate(code))
    }

    /// Sends the answers Sluice gives itself that are due now.
    fn release_synthetic(&mut self) {
        self.tracker.release_synthetic(&mut self.io.to_client);
        if self.tracker.has_done() {
            self.handle_done();
        }
    }

    /// No request of this client is being served.
    fn idle(&self) -> bool {
        self.muxed.is_none()
            && (self.s.lease.is_none()
                || (self.at_rest && self.status == b'I' && self.io.to_server.is_empty()))
    }

    /// In transaction mode, gives the server connection back as soon as the client is
    /// between transactions and holds no pinning state.
    fn maybe_release(&mut self) {
        let Some(lease) = self.s.lease.as_ref() else {
            return;
        };
        let tx = TxStatus::from_pg(self.status);
        if self.io.to_server.is_empty()
            && lease.conn.rbuf.is_empty()
            && !self.cscan.in_frame()
            && session::may_release(self.s.mode, self.at_rest, tx, &self.ledger)
            && let Some(l) = self.s.lease.take()
        {
            tracing::trace!(client = self.s.cancel.key.0, server = l.conn.pid, "release");
            // The client's cancel key lets go of the connection before the pool takes it
            // (which waits for a cancel already on its way).
            self.s.sync_cancel();
            l.put_back();
            self.s.route.released();
        }
    }

    /// Queues an error for the client in its protocol.
    pub(super) fn client_error(&mut self, severity: Severity, e: &Error) {
        encode::error(&mut self.io.to_client, severity, e.sqlstate(), &e.message);
    }

    async fn finish(&mut self, end: End) {
        match &end {
            End::Failed(e) => {
                tracing::info!(error = %e, "closing client session");
                self.shared.topology.suspect(&self.s.pool.key.server, e);
                self.client_error(Severity::Fatal, e);
            }
            End::Shutdown => {
                let e = Error::new(
                    Kind::Shutdown,
                    Side::Internal,
                    "terminating connection due to administrator command",
                );
                self.client_error(Severity::Fatal, &e);
            }
            // The server closed the connection by itself: it may be going away.
            End::ServerClosed => self.shared.topology.check_now(&self.s.pool.key.server),
            End::ClientLeft | End::Terminated => {}
        }
        if !matches!(end, End::ClientLeft) {
            self.io.flush_client_now().await;
        }
        let Some(lease) = self.s.lease.take() else {
            return;
        };
        self.s.sync_cancel();
        let clean = self.at_rest
            && self.io.to_server.is_empty()
            && !self.sscan.in_frame()
            && lease.conn.rbuf.is_empty();
        match end {
            End::Failed(Error {
                kind: Kind::ServerGone | Kind::Desync,
                ..
            })
            | End::ServerClosed => lease.discard(),
            _ if clean => {
                let needs_reset = self.s.mode == PoolMode::Session
                    || self.status != b'I'
                    || self.ledger.is_pinned();
                if self.s.mode == PoolMode::Session && !self.s.pool.can_open() {
                    // A pass-through session pool never hands out idle connections
                    // (every login authenticates on a fresh one): close it.
                    lease.discard();
                } else if needs_reset {
                    lease.reset_and_put_back().await;
                } else {
                    lease.put_back();
                }
            }
            // Mid-request: the connection's state is unknown.
            _ => lease.discard(),
        }
    }
}
