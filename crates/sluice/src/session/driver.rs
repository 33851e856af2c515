//! The session driver, written once for both protocols: one task per client moves bytes
//! both ways between the client and whatever server connection it holds (the IO pump),
//! gives the connection back when the release rule allows, asks the route again before
//! each transaction and leases a server connection (`session/acquire.rs`, with
//! `session/reroute.rs`), keeps the session's clock, waits for
//! answers from shared connections, and ends the session. A protocol plugs in through
//! [`Relay`]: what its client and server frames mean, where its transactions stand,
//! and how it says its last word.

pub use super::acquire::{lease, route};
use super::lost;
use super::pump::{Event, Pump};
use super::reroute::RouteMark;
use super::timeouts::{Clock, Expired, Phase};
use super::{Ledger, TxStatus};
use crate::error::{Error, Kind, Side};
use crate::pool::{Duplex, Lease, Pool, PoolConn, Pools};
use crate::shared::Shared;
use bytes::BytesMut;
use sluice_config::{Listener, PoolMode};
use std::future::Future;
use std::ops::DerefMut;
use std::sync::Arc;

/// How a session ended.
pub enum End {
    /// The client left (closed its socket, or said goodbye).
    ClientLeft,
    Shutdown,
    Failed(Error),
    /// The session ends with nothing more said to the client and its server connection
    /// discarded: the server closed it (after its own last word, if any), or an idle
    /// timeout of a protocol that ends sessions the way its server would, silently.
    ServerClosed,
}

impl From<Error> for End {
    fn from(e: Error) -> End {
        End::Failed(e)
    }
}

/// What both protocols keep alike of a client's session.
pub struct Core<C: PoolConn> {
    /// The client's place in the book (first: it lets go of the socket before `io`
    /// closes it).
    pub client: Option<super::clients::Entry>,
    pub shared: Arc<Shared>,
    pub io: Pump,
    pub mode: PoolMode,
    /// The listener the client came through.
    pub cfg: Arc<Listener>,
    /// Where its next server connection comes from (it moves with the route).
    pub pool: Arc<Pool<C>>,
    /// Boxed: a client between transactions holds none, and its session is smaller.
    pub lease: Option<Box<Lease<C>>>,
    /// Where the client's route stands.
    pub route: RouteMark,
    /// What the client changed on its server connection.
    pub ledger: Ledger,
    /// (A u32, in what would be padding: frames are under 4 GiB. See
    /// [`Core::max_message`].)
    max_message: u32,
    /// The answer to the client's request, coming from a shared connection.
    pub muxed: Option<Arc<crate::mux::Answer>>,
    /// The session's timeouts, when its pool has any (session/timeouts.rs).
    pub clock: Option<Box<Clock>>,
    /// A request kept for a retry, a lost transaction's error, where a rule sends the
    /// request, a deferred BEGIN: rare, in one box (session/odds.rs).
    pub odds: super::odds::Odds,
    /// The request about to be handled is one sent again: it is not kept again.
    retried: bool,
    /// What the request being routed is (split routes; a write otherwise).
    pub(super) class: sluice_sql::Class,
    /// `class` was found for the request being handled (by `route`), so that the
    /// protocol need not classify it again (see [`Core::routed_class`]).
    pub(super) classified: bool,
    /// The session's view of the query rules, when any apply (session/judge.rs).
    pub judging: Option<Box<super::judge::Judging>>,
}

/// What a session knows when it starts relaying.
pub struct Seat<C: PoolConn> {
    pub mode: PoolMode,
    pub cfg: Arc<Listener>,
    pub pool: Arc<Pool<C>>,
    pub lease: Option<Lease<C>>,
    pub route: RouteMark,
    pub max_message: usize,
    pub judging: Option<Box<super::judge::Judging>>,
    pub client: Option<super::clients::Entry>,
}

impl<C: PoolConn> Core<C> {
    pub fn new(
        shared: Arc<Shared>,
        seat: Seat<C>,
        client: crate::stream::Stream,
        cbuf: BytesMut,
        clock: Option<Box<Clock>>,
    ) -> Core<C> {
        Core {
            client: seat.client,
            io: Pump::new(&shared, client, cbuf, &seat.cfg.name),
            shared,
            mode: seat.mode,
            cfg: seat.cfg,
            pool: seat.pool,
            lease: seat.lease.map(Box::new),
            route: seat.route,
            ledger: Ledger::default(),
            max_message: u32::try_from(seat.max_message).unwrap_or(u32::MAX),
            muxed: None,
            clock,
            odds: Default::default(),
            retried: false,
            class: sluice_sql::Class::Write,
            classified: false,
            judging: seat.judging,
        }
    }

    pub fn tx_mode(&self) -> bool {
        self.mode == PoolMode::Transaction
    }

    /// Whether a read may be sent once more to another server (see [`arm_retry`]): only
    /// in transaction mode, on a route that reads from replicas. (Callers skip
    /// classifying the request when not.)
    pub fn may_retry(&self) -> bool {
        self.tx_mode() && self.cfg.route.kind != sluice_config::RouteKind::ReadWrite
    }

    /// What `route` found the request being handled to be, if it classified it (once:
    /// the answer is for this request only).
    pub fn routed_class(&mut self) -> Option<sluice_sql::Class> {
        std::mem::take(&mut self.classified).then_some(self.class)
    }

    /// The largest message the client may send (`max_message_size`).
    pub fn max_message(&self) -> usize {
        self.max_message as usize
    }

    /// A new `max_message_size` (the client logged in again as another user).
    pub fn set_max_message(&mut self, max: usize) {
        self.max_message = u32::try_from(max).unwrap_or(u32::MAX);
    }

    /// The request about to be handled is one sent again (see session/lost.rs).
    pub fn set_retried(&mut self) {
        self.retried = true;
    }
}

/// Makes a protocol's relay dereference to its [`Core`] (its field `core`), as
/// [`Relay`] asks.
macro_rules! relay_core {
    ($relay:ty, $conn:ty) => {
        impl std::ops::Deref for $relay {
            type Target = $crate::session::driver::Core<$conn>;
            fn deref(&self) -> &Self::Target {
                &self.core
            }
        }

        impl std::ops::DerefMut for $relay {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.core
            }
        }
    };
}
pub(crate) use relay_core;

/// What a protocol supplies to the driver. The relay dereferences to its [`Core`].
pub trait Relay: DerefMut<Target = Core<Self::Conn>> + Send + Sized {
    type Conn: PoolConn + Duplex;

    /// The pools of this protocol (a session's route may move it to another server's).
    fn pools(shared: &Shared) -> &Pools<Self::Conn>;
    /// The same opener pointed at another server.
    fn retarget(
        op: &<Self::Conn as PoolConn>::Opener,
        target: crate::backend::Target,
    ) -> <Self::Conn as PoolConn>::Opener;
    /// Whether `op` logs in with credentials proven after those of `than`.
    fn newer_login(
        op: &<Self::Conn as PoolConn>::Opener,
        than: &<Self::Conn as PoolConn>::Opener,
    ) -> bool;
    /// The client's id in logs.
    fn id(&self) -> u32;
    /// Handles what the client sent (complete requests in `io.cbuf`).
    fn on_client(&mut self) -> impl Future<Output = Result<(), End>> + Send;
    /// Handles what the server sent (in the lease's read buffer), without waiting:
    /// `Ok(true)` when a client command that waited for it goes on now
    /// ([`Relay::resume`]).
    fn on_server(&mut self) -> Result<bool, End>;
    /// Goes on with the client's command that waited for the server's answer.
    fn resume(&mut self) -> impl Future<Output = Result<(), End>> + Send;
    /// The answer from a shared connection is complete (`done`: its first packet or
    /// the error that ended it); `muxed` is already cleared.
    fn answered(
        &mut self,
        answer: &crate::mux::Answer,
        done: Result<Vec<u8>, Error>,
    ) -> impl Future<Output = Result<(), End>> + Send;
    /// Where an answer from a shared connection goes when Sluice reads it itself.
    fn answer_sink(&mut self) -> Option<&mut BytesMut> {
        None
    }
    /// Work due whenever the session is between events.
    fn between(&mut self) {}
    /// The session waits with nothing in flight: it lets go of the memory its empty
    /// queues kept from its last requests (an idle client keeps none).
    fn rest(&mut self) {}

    /// Something of the client's requests awaits an answer.
    fn in_flight(&self) -> bool;
    /// An answer from the server is awaited whatever is still to be written to it:
    /// bytes written to the server then change nothing the session's loop looks at
    /// (no connection to let go, no rest), and the pump goes on without waking it.
    /// (false: every write wakes it.)
    fn awaits_answer(&self) -> bool {
        false
    }
    /// Between two requests: nothing the client sent before awaits an answer, so the
    /// next one may start a transaction.
    fn between_requests(&self) -> bool;
    /// Nothing of the client's requests is in flight or half read, nothing pending for
    /// the server (so the session may end or move).
    fn idle(&self) -> bool;
    fn tx_status(&self) -> TxStatus;
    /// Protocol reasons to keep the connection a while longer (a frame half through,
    /// a KILL on its way, LAST_INSERT_ID() to be read). Asked last, when everything
    /// else lets the connection go: a `false` commits to letting it go (MySQL's KILL
    /// registry then sees the client hold none).
    fn holds(&self) -> bool {
        false
    }
    /// The lease changed (taken or given back): cancel or KILL registries follow it.
    fn lease_moved(&mut self);
    /// The server connection was discarded with a request in flight that goes again
    /// elsewhere: forget what was expected of it (its answers will not come).
    fn forget_server(&mut self);

    /// The server may close the connection now without that being a failure.
    fn server_may_close(&self) -> bool;
    /// The server connection was lost mid-request (`e`: how; None: it closed).
    fn lost(&self, e: Option<std::io::Error>) -> Error;
    /// The server connection was lost and the session goes on without it: queues for
    /// the client an error answer (`e`) to each of its requests in flight, as the
    /// server would have failed them, leaving the client between requests and outside
    /// any transaction. Returns false, having queued nothing, when that cannot be done
    /// cleanly (part of an answer frame already went to the client, a copy or an
    /// authentication exchange was under way): the session then ends.
    fn fail_in_flight(&mut self, _e: &Error) -> bool {
        false
    }
    /// The client closed its socket.
    fn client_closed(&self) -> End {
        End::ClientLeft
    }
    /// `query_timeout` passed.
    fn cancel_query(&mut self) {}
    /// An idle timeout passed.
    fn idle_timeout(&mut self, which: Expired) -> End;
    /// Queues the session's last word for the client (a failure or a shutdown).
    fn last_word(&mut self, end: &End);
    /// The server connection holds no half-relayed frame.
    fn clean(&self) -> bool;
    /// A connection given back at the end needs a reset.
    fn needs_reset(&self) -> bool;
    /// The session ends: answer whatever waits on it.
    fn before_finish(&mut self) {}
}

/// Runs a session to its end.
///
/// What the loop awaits while a client sits idle is its own state; every step that may
/// wait runs in a box of its own, freed when the step is done, so an idle client's task
/// holds only the wait (an allocation per step: tens of nanoseconds against kilobytes
/// per connected client). What the server sent is handled in place.
pub fn run<R: Relay>(r: R) -> impl Future<Output = ()> + Send {
    // An async block, not an async fn: the relay it captures is its state, where an
    // async fn's argument would be kept twice (as the argument and as its local). The
    // loop is written out here rather than awaited as a function of its own: that
    // function's future would keep a second reference to the relay and its own
    // state tag, in every connected client's task.
    let mut r = r;
    async move {
        let end = 'session: {
            let mut activity = true;
            if !r.io.cbuf.is_empty()
                && let Err(end) = Box::pin(r.on_client()).await
            {
                break 'session end;
            }
            loop {
                r.between();
                maybe_release(&mut r);
                note_pins(&mut r);
                if r.io.shutting_down && r.idle() && r.io.to_client.is_empty() {
                    break 'session End::Shutdown;
                }
                if r.muxed.is_some() {
                    // Boxed, as the steps are: an idle client's task holds only its wait.
                    if let Err(end) = Box::pin(await_answer(&mut r)).await {
                        break 'session end;
                    }
                    continue;
                }
                watch_the_clock(&mut r, activity);
                if r.idle() && !r.in_flight() {
                    r.rest();
                    r.odds.settle();
                    super::judge::rest(&mut r);
                }
                // Bytes written wake the loop only where they may change what it
                // does (see `Pump::quiet_writes`).
                let report_drain = !r.in_flight();
                let quiet = r.awaits_answer();
                let core: &mut Core<R::Conn> = &mut r;
                core.io.report_drain = report_drain;
                core.io.quiet_writes = quiet;
                let ev = next_event(core).await;
                activity = matches!(ev, Event::ClientRead(Ok(1..)));
                // The event is handled before anything is awaited: neither it nor what
                // came of it stays in the loop's state across a step (every idle
                // client's task holds that state), but for the lost server's error,
                // one word.
                let mut error = None;
                let go = match after(&mut r, ev, &mut error) {
                    Ok(go) => go,
                    Err(end) => break 'session end,
                };
                // Boxed: the loop itself keeps none of a step's state (the client's
                // step alone: the box is made and filled for each statement).
                let step = match go {
                    Go::On => Ok(()),
                    Go::Resume => Box::pin(r.resume()).await,
                    Go::Client => Box::pin(r.on_client()).await,
                    Go::Lost => Box::pin(lost::server_lost(&mut r, error.take())).await,
                };
                if let Err(end) = step {
                    break 'session end;
                }
            }
        };
        // Boxed: ending a session (flushing, resetting the connection) needs a large
        // future, which would otherwise sit in every connected client's task.
        Box::pin(finish(&mut r, end)).await;
    }
}

/// The session's next event (see [`super::pump::Pump::poll_io`]). (A plain function
/// whose future holds the session alone, one word: every idle client's task holds
/// it. The server connection and what the pump watches are found at each poll.)
fn next_event<C: PoolConn + crate::pool::Duplex>(
    core: &mut Core<C>,
) -> impl Future<Output = Event> + Send + '_ {
    std::future::poll_fn(move |cx| {
        let Core {
            io,
            lease,
            shared,
            client,
            clock,
            ..
        } = &mut *core;
        let server = lease
            .as_mut()
            .map(|l| crate::pool::Duplex::duplex(&mut l.conn));
        let timer = clock.as_deref_mut().map(|c| &mut c.timer);
        io.poll_io(
            server,
            super::pump::Watch::of(shared, client),
            timer,
            false,
            cx,
        )
    })
}

/// What [`run`]'s loop does after an event.
#[derive(Clone, Copy)]
enum Go {
    /// Waits for the next.
    On,
    /// The client's command that waited for the server goes on ([`Relay::resume`]).
    Resume,
    /// The client's bytes are read ([`Relay::on_client`]).
    Client,
    /// The server connection is lost (the error, if any, in `error`).
    Lost,
}

/// Handles `ev` as far as it goes without waiting: where the loop goes on, or how
/// the session ends.
fn after<R: Relay>(r: &mut R, ev: Event, error: &mut Option<std::io::Error>) -> Result<Go, End> {
    match ev {
        Event::ServerRead(Ok(0) | Err(_)) if r.server_may_close() => Err(End::ServerClosed),
        Event::ClientRead(Ok(0)) | Event::ClientRead(Err(_)) => Err(r.client_closed()),
        Event::Wrote => Ok(Go::On),
        Event::WriteFailed(Side::Client, _) => Err(End::ClientLeft),
        Event::Shutdown => {
            r.io.shutting_down = true;
            Ok(Go::On)
        }
        Event::Timeout => timed_out(r).map(|()| Go::On),
        // What the server sent is handled at once: no step of its own (nor the box
        // and the copy of one) unless a client command goes on after it.
        Event::ServerRead(Ok(n @ 1..)) => match server_read(r, n)? {
            true => Ok(Go::Resume),
            false => Ok(Go::On),
        },
        Event::ClientRead(_) => Ok(Go::Client),
        Event::ServerRead(Ok(_)) => Ok(Go::Lost),
        Event::ServerRead(Err(e)) | Event::WriteFailed(_, e) => {
            *error = Some(e);
            Ok(Go::Lost)
        }
    }
}

/// What the server sent (`n` bytes), handed on: `Ok(true)` when the client's command
/// that waited for it goes on ([`Relay::resume`]).
fn server_read<R: Relay>(r: &mut R, n: usize) -> Result<bool, End> {
    // The answer goes on to the client about as long as it came: one allocation for it
    // rather than growing the (released) buffer packet by packet.
    r.io.to_client.reserve(n);
    let before = r.io.to_client.len();
    let step = r.on_server();
    if r.io.to_client.len() != before {
        // Part of the answer is on its way to the client: too late to retry.
        r.odds.take_retry();
    }
    step
}

/// Waits for (part of) the answer to the client's request from a shared connection,
/// and hands it on when complete.
async fn await_answer<R: Relay>(r: &mut R) -> Result<(), End> {
    let Some(answer) = r.muxed.clone() else {
        return Ok(());
    };
    let mut gone = false;
    let done = {
        let sink = r.answer_sink().map(std::mem::take);
        let core: &mut Core<R::Conn> = r;
        let stop = super::pump::Watch::of(&core.shared, &core.client);
        let timer = core.clock.as_deref_mut().map(|c| &mut c.timer);
        match sink {
            Some(mut s) => {
                let d = core
                    .io
                    .next_answer(&answer, Some(&mut s), &mut gone, stop, timer)
                    .await;
                if let Some(back) = r.answer_sink() {
                    *back = s;
                }
                d
            }
            None => {
                core.io
                    .next_answer(&answer, None, &mut gone, stop, timer)
                    .await
            }
        }
    };
    if gone {
        return Err(End::ClientLeft);
    }
    let Some(done) = done else {
        return Ok(());
    };
    r.muxed = None;
    match done {
        // The shared connection was lost before any answer byte: a read goes once to
        // another server.
        Err(e) if lost::gone_server(&e) && !answer.delivered() && r.odds.retry.is_some() => {
            lost::send_again(r).await
        }
        done => r.answered(&answer, done).await,
    }
}

/// Keeps `request` (all the client sent for it) to be sent once more to another server
/// if its connection is lost before any answer byte: only in transaction mode, on a
/// route that reads from replicas, for a read (`class`: one statement that changes
/// nothing, by `sluice_sql::classify`). The protocol calls it only for a lone request
/// outside a transaction, with nothing else in flight.
pub fn arm_retry<C: PoolConn>(core: &mut Core<C>, class: sluice_sql::Class, request: &[u8]) {
    core.odds.take_retry();
    if std::mem::take(&mut core.retried) {
        return;
    }
    if core.may_retry() && class == sluice_sql::Class::Read {
        core.odds.make().retry = Some(request.into());
    }
}

/// In transaction mode, gives the server connection back as soon as the client is
/// between transactions and holds no pinning state.
/// Tells the client book why the session is pinned now (a compare when nothing
/// changed).
fn note_pins<R: Relay>(r: &mut R) {
    if let Some(c) = &r.client {
        let mask = r.ledger.pin_mask();
        if c.info.pins.load(std::sync::atomic::Ordering::Relaxed) != mask {
            c.info
                .pins
                .store(mask, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

fn maybe_release<R: Relay>(r: &mut R) {
    let Some(lease) = r.lease.as_ref() else {
        return;
    };
    if r.io.to_server.is_empty()
        && r.io.server_flushed()
        && lease.conn.unread() == 0
        && super::may_release(r.mode, !r.in_flight(), r.tx_status(), &r.ledger)
        && !r.holds()
        && let Some(l) = r.lease.take()
    {
        // The client's cancel key lets go of the connection before the pool takes it
        // (which waits for a cancel already on its way).
        r.lease_moved();
        l.put_back();
        r.route.released();
    }
}

/// Tells the session's clock what the client is doing; the pump wakes the relay at the
/// next deadline.
fn watch_the_clock<R: Relay>(r: &mut R, activity: bool) {
    if r.clock.is_none() {
        return;
    }
    let phase = Phase::of(
        r.in_flight() || r.muxed.is_some(),
        r.tx_status() != TxStatus::Idle && r.lease.is_some(),
    );
    let core: &mut Core<R::Conn> = r;
    if let Some(c) = core.clock.as_mut() {
        let deadline = c.observe(phase, activity);
        c.timer.set_deadline(deadline);
    }
}

/// A timeout passed: the running statement is cancelled, or the session ends.
fn timed_out<R: Relay>(r: &mut R) -> Result<(), End> {
    let Some(c) = r.clock.as_mut() else {
        return Ok(());
    };
    match c.expired() {
        Expired::Query => {
            r.cancel_query();
            Ok(())
        }
        which => Err(r.idle_timeout(which)),
    }
}

async fn finish<R: Relay>(r: &mut R, end: End) {
    r.before_finish();
    match &end {
        End::Failed(e) => {
            tracing::info!(client = r.id(), error = %e, "closing client session");
            r.shared.topology.suspect(&r.pool.key.server, e);
            r.last_word(&end);
        }
        End::Shutdown => r.last_word(&end),
        // The server closed the connection by itself: it may be going away.
        End::ServerClosed => r.shared.topology.check_now(&r.pool.key.server),
        End::ClientLeft => {}
    }
    if !matches!(end, End::ClientLeft) {
        r.io.flush_client_now().await;
    }
    let Some(lease) = r.lease.take() else {
        return;
    };
    r.lease_moved();
    let clean = r.idle() && !r.in_flight() && r.clean() && lease.conn.unread() == 0;
    match end {
        End::Failed(Error {
            kind: Kind::ServerGone | Kind::Desync,
            ..
        })
        | End::ServerClosed => lease.discard(),
        // A pass-through pool cannot open connections: in session mode it never hands
        // one out again (every login authenticates on a fresh one).
        _ if clean && r.mode == PoolMode::Session && !r.pool.can_open() => lease.discard(),
        _ if clean && r.needs_reset() => lease.reset_and_put_back().await,
        _ if clean => lease.put_back(),
        // Mid-request: the connection's state is unknown.
        _ => lease.discard(),
    }
}
