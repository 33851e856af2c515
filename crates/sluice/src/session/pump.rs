//! The IO of a relaying session, for either protocol: one task per client moves bytes
//! both ways between the client and whatever server connection it holds, without
//! blocking either direction on the other (a client may pipeline far more than a socket
//! buffer holds). The protocol's relay decides what the bytes mean; this only reads,
//! writes, applies back-pressure and notices shutdown.

use crate::error::Side;
use crate::session::timeouts::Timer;
use crate::stream::{Stream, spare};
use bytes::{Buf, BytesMut};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;

/// Stop reading a side while this much is waiting to be written to the other.
pub const HIGH_WATER: usize = 256 * 1024;
const READ_CHUNK: usize = 16 * 1024;

pub enum Event {
    ServerRead(std::io::Result<usize>),
    ClientRead(std::io::Result<usize>),
    Wrote,
    WriteFailed(Side, std::io::Error),
    Shutdown,
    /// The deadline set with [`Pump::set_deadline`] passed.
    Timeout,
}

/// Who a client is to session/spin.rs: its socket's descriptor (unique among open
/// ones).
fn client_id(tcp: &tokio::net::TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    tcp.as_raw_fd() as u32
}

/// What one pass over the sockets came to.
enum Pass {
    Event(Event),
    /// Nothing ready.
    Nothing,
    /// Room was made for a read skipped in this pass: another.
    Again,
}

/// Writes what `out.0` holds to `stream` as far as the socket takes it, then flushes a
/// TLS stream (`out.1`: it holds bytes of its own): the event that ends the wait, if
/// any: a failure, or bytes written where the relay looks at each write (`quiet`
/// false; once the queue is out it is once they are flushed too, so that the relay
/// does not let go of a connection with bytes of its still in the TLS layer).
/// `counted`: the listener's counters, for bytes to the client.
#[inline]
fn write_out(
    stream: &mut Stream,
    (buf, flush): (&mut LazyBuf, &mut bool),
    (side, quiet): (Side, bool),
    counted: Option<&crate::stats::counters::ListenerCounters>,
    cx: &mut Context<'_>,
) -> Option<Event> {
    let mut wrote = false;
    loop {
        if buf.is_empty() {
            if *flush {
                match Pin::new(&mut *stream).poll_flush(cx) {
                    Poll::Ready(Ok(())) => {
                        *flush = false;
                        wrote = true;
                    }
                    Poll::Ready(Err(e)) => return Some(Event::WriteFailed(side, e)),
                    Poll::Pending => return None,
                }
            }
            return (wrote && !quiet).then_some(Event::Wrote);
        }
        match Pin::new(&mut *stream).poll_write(cx, buf) {
            Poll::Ready(Ok(0)) => {
                return Some(Event::WriteFailed(
                    side,
                    std::io::ErrorKind::WriteZero.into(),
                ));
            }
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                if let Some(c) = counted {
                    c.sent(n);
                }
                *flush = stream.is_tls();
                wrote = true;
                if !quiet && !buf.is_empty() {
                    return Some(Event::Wrote);
                }
            }
            Poll::Ready(Err(e)) => return Some(Event::WriteFailed(side, e)),
            // (Only where writes are quiet can bytes have been written before.)
            Poll::Pending => return None,
        }
    }
}

/// Whether Sluice is stopping (`Shared::shutdown`).
pub type Stop = tokio::sync::watch::Receiver<bool>;

/// What a pump's wait watches besides the sockets: whether Sluice is stopping
/// (`Shared::shutdown`), and the client's line in the book, where the session leaves
/// its waker for the stop to wake it (no waiting future of its own per client) and
/// sees a KILL CLIENT. Passed in, not kept: the session holds both already.
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    pub stop: &'a Stop,
    pub home: Option<&'a crate::session::clients::ClientInfo>,
}

impl<'a> Watch<'a> {
    pub fn of(
        shared: &'a crate::shared::Shared,
        client: &'a Option<crate::session::clients::Entry>,
    ) -> Watch<'a> {
        Watch {
            stop: &shared.shutdown,
            home: client.as_ref().map(|c| &*c.info),
        }
    }
}

/// The client socket, the bytes in flight each way, and the shutdown signal.
pub struct Pump {
    pub client: Stream,
    /// Bytes read from the client not yet handled.
    pub cbuf: LazyBuf,
    pub to_client: LazyBuf,
    pub to_server: LazyBuf,
    pub shutting_down: bool,
    /// Read nothing more from the client for now (its statement's answer is pending).
    pause_client: bool,
    /// The client is the only one running statements lately (session/spin.rs).
    lone: bool,
    flush_client: bool,
    flush_server: bool,
    /// Nothing is in flight (set by the relay before each wait): a lone client's
    /// session then watches the client's socket, else the server's.
    pub report_drain: bool,
    /// Bytes written to the server do not end the wait (set by the relay before each
    /// wait: an answer is awaited whatever is left to write, `Relay::awaits_answer`;
    /// not looked at while the session waits for a shared connection's answer, when
    /// no server connection is written). Bytes written to the client end it only while
    /// Sluice stops (the session then ends once the client's queue is empty) and while
    /// a shared connection's answer streams in (room in the client's queue lets more
    /// of it in). The pump otherwise writes on, and looks at the reads, in the same
    /// pass: a statement costs two turns of the relay's loop fewer.
    pub quiet_writes: bool,
    /// The listener's counters: bytes from and to the client are counted here.
    counters: Arc<crate::stats::counters::ListenerCounters>,
    /// The poll of this task (`crate::stream::polls`) in which the server's read last
    /// came back `Pending` (0: none): not asked again within it.
    server_quiet: u64,
}

/// A byte buffer that costs one pointer while it holds nothing: it dereferences to a
/// `BytesMut`, made (in a box of its own) when first written to, and dropped by
/// [`LazyBuf::release`] once empty. A client waiting for its next statement (or for an
/// answer) so holds no buffer, nor a buffer's 32-byte header, of its own: what lets
/// thousands of idle clients cost little each.
#[derive(Default)]
pub struct LazyBuf(Option<Box<BytesMut>>);

/// What an absent [`LazyBuf`] reads as.
static EMPTY: std::sync::LazyLock<BytesMut> = std::sync::LazyLock::new(BytesMut::new);

thread_local! {
    // Boxed: the box is what a `LazyBuf` holds, and is reused with its buffer.
    #[allow(clippy::vec_box)]
    static SPARE: std::cell::RefCell<Vec<Box<BytesMut>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A spare buffer (stream/spare.rs), or a new one.
fn spare() -> Box<BytesMut> {
    spare::take(&SPARE).unwrap_or_default()
}

/// Keeps an emptied buffer as a spare if it is not too large (else it is freed).
fn keep_spare(mut b: Box<BytesMut>) {
    b.clear();
    if spare::worth_keeping(&mut b) {
        spare::keep(&SPARE, b);
    }
}

impl LazyBuf {
    pub fn new(buf: BytesMut) -> LazyBuf {
        let mut b = LazyBuf(Some(Box::new(buf)));
        b.release();
        b
    }

    /// (As `BytesMut::is_empty`, without reaching for the empty buffer it reads as.)
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|b| b.is_empty())
    }

    /// (As `BytesMut::len`, without reaching for the empty buffer it reads as.)
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |b| b.len())
    }

    /// Gives an empty buffer's memory back (to the thread's spares).
    pub fn release(&mut self) {
        if let Some(b) = self.0.take_if(|b| b.is_empty()) {
            keep_spare(b);
        }
    }

    /// The bytes, leaving it empty.
    pub fn take(&mut self) -> BytesMut {
        self.0.take().map_or_else(BytesMut::new, |b| *b)
    }
}

impl crate::stream::ReadInto for LazyBuf {
    fn buf(&mut self) -> &mut BytesMut {
        self
    }
}

impl std::ops::Deref for LazyBuf {
    type Target = BytesMut;
    fn deref(&self) -> &BytesMut {
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl std::ops::DerefMut for LazyBuf {
    fn deref_mut(&mut self) -> &mut BytesMut {
        self.0.get_or_insert_with(spare)
    }
}

impl Pump {
    /// Nothing written to the server waits in a TLS layer to be flushed.
    pub fn server_flushed(&self) -> bool {
        !self.flush_server
    }

    /// The listener's counters.
    pub fn counters(&self) -> &crate::stats::counters::ListenerCounters {
        &self.counters
    }

    pub fn new(
        shared: &Arc<crate::shared::Shared>,
        client: Stream,
        cbuf: BytesMut,
        listener: &str,
    ) -> Pump {
        Pump {
            client,
            cbuf: LazyBuf::new(cbuf),
            to_client: LazyBuf::default(),
            to_server: LazyBuf::default(),
            shutting_down: false,
            pause_client: false,
            lone: false,
            flush_client: false,
            flush_server: false,
            report_drain: true,
            quiet_writes: false,
            counters: shared.counters.listener(listener),
            server_quiet: 0,
        }
    }

    /// Waits for the next thing to handle. `server`: the held server connection's
    /// socket and read buffer, if any. `muxed`: the caller waits for an answer
    /// from a shared connection (no watching of sockets then).
    pub fn poll_io(
        &mut self,
        mut server: Option<(&mut Stream, &mut BytesMut)>,
        watch: Watch<'_>,
        timer: Option<&mut Timer>,
        muxed: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Event> {
        let s = server.as_mut().map(|(s, b)| (&mut **s, &mut **b));
        if let Some(ev) = self.poll_once(s, watch, muxed, cx) {
            return Poll::Ready(ev);
        }
        let rest = self.poll_rest(watch, timer, cx);
        // (Not while an answer comes from a shared connection (`muxed`): its
        // task may need this thread.)
        if rest.is_pending()
            && self.lone
            && !muxed
            && let Some(budget) = super::spin::budget()
        {
            return self.spin(server, watch, budget).map_or(rest, Poll::Ready);
        }
        rest
    }

    /// Nothing is ready and the client is alone: watches the socket the session waits
    /// on for `budget` (the server's while a request is in flight, else the client's).
    fn spin(
        &mut self,
        server: Option<(&mut Stream, &mut BytesMut)>,
        watch: Watch<'_>,
        budget: std::time::Duration,
    ) -> Option<Event> {
        match server {
            // (Within the same bounds as the reads polled: the client's queue below
            // its high-water mark, the server's empty.)
            Some((Stream::Plain(s), rbuf))
                if !self.report_drain
                    && self.to_server.is_empty()
                    && self.to_client.len() < HIGH_WATER =>
            {
                let got = super::spin::wait(s, budget, rbuf)?;
                // (Read past tokio: more may wait behind what was read.)
                self.server_quiet = 0;
                Some(Event::ServerRead(got))
            }
            _ if self.report_drain
                && self.to_client.is_empty()
                && self.to_server.len() < HIGH_WATER
                && !self.pause_client
                && !self.shutting_down =>
            {
                let Stream::Plain(c) = &self.client else {
                    return None;
                };
                let r = super::spin::wait(c, budget, &mut self.cbuf)?;
                if watch.home.is_some_and(|h| h.killed()) {
                    self.cbuf.clear();
                    return Some(Event::ClientRead(Ok(0)));
                }
                if let Ok(n) = r {
                    self.counters.received(n);
                    if n > 0 {
                        self.lone = super::spin::alone(client_id(c));
                    }
                }
                Some(Event::ClientRead(r))
            }
            _ => None,
        }
    }

    /// Passes over the sockets: what was read or failed (an event), bytes written
    /// (to look again), or nothing ready to write or read.
    fn poll_once(
        &mut self,
        mut server: Option<(&mut Stream, &mut BytesMut)>,
        watch: Watch<'_>,
        muxed: bool,
        cx: &mut Context<'_>,
    ) -> Option<Event> {
        loop {
            let s = server.as_mut().map(|(s, b)| (&mut **s, &mut **b));
            match self.pass(s, watch, muxed, cx) {
                Pass::Event(ev) => return Some(ev),
                Pass::Nothing => return None,
                Pass::Again => {}
            }
        }
    }

    /// One pass over the sockets.
    fn pass(
        &mut self,
        server: Option<(&mut Stream, &mut BytesMut)>,
        watch: Watch<'_>,
        muxed: bool,
        cx: &mut Context<'_>,
    ) -> Pass {
        // Bytes written end the wait unless they cannot change what the relay's loop
        // does (`quiet_writes`): it looks at what the write changed (a connection to
        // let go, a session to end; going on waiting while a request was in flight
        // kept MySQL transaction-mode connections over the compressed protocol from
        // being let go, where the request in flight was a command that gets no answer).
        let quiet = self.quiet_writes && !self.shutting_down;
        // The server's read skipped for a full client queue: looked at again once a
        // write to the client makes room.
        let mut full = false;
        if let Some((stream, rbuf)) = server {
            full = self.to_client.len() >= HIGH_WATER;
            if !full && !self.server_quiet(stream) {
                if let Poll::Ready(r) = stream.poll_read_grow(cx, rbuf, READ_CHUNK) {
                    return Pass::Event(Event::ServerRead(r));
                }
                // (Only a plain socket: TLS and compression keep bytes of their own.)
                if matches!(stream, Stream::Plain(_)) {
                    self.server_quiet = crate::stream::polls::current();
                }
                spare::release(rbuf);
            }
            let out = (&mut self.to_server, &mut self.flush_server);
            if let Some(ev) = write_out(stream, out, (Side::Server, quiet), None, cx) {
                return Pass::Event(ev);
            }
        }
        // Bytes written to the client change nothing the relay's loop looks at but
        // while Sluice stops (the session ends once they are out), and room in the
        // client's queue lets more of an answer from a shared connection in (`muxed`).
        let out = (&mut self.to_client, &mut self.flush_client);
        let quiet = !self.shutting_down && !muxed;
        let counters = Some(&*self.counters);
        if let Some(ev) = write_out(&mut self.client, out, (Side::Client, quiet), counters, cx) {
            return Pass::Event(ev);
        }
        if full && self.to_client.len() < HIGH_WATER {
            return Pass::Again;
        }
        // While draining, the client may still finish its transaction: keep reading
        // until it is between transactions (the relay then ends the session).
        if self.to_server.len() < HIGH_WATER && !self.pause_client {
            let Poll::Ready(r) = self.client.poll_read_grow(cx, &mut self.cbuf, READ_CHUNK) else {
                return Pass::Nothing;
            };
            if watch.home.is_some_and(|h| h.killed()) {
                // KILL CLIENT: what the client sent after it is not run (its socket,
                // shut for reading, may still have handed it over).
                self.cbuf.clear();
                return Pass::Event(Event::ClientRead(Ok(0)));
            }
            if let Ok(n) = r {
                self.counters.received(n);
                if n > 0 && super::spin::budget().is_some() {
                    self.lone = super::spin::alone(client_id(self.client.tcp()));
                }
            }
            return Pass::Event(Event::ClientRead(r));
        }
        Pass::Nothing
    }

    /// Whether the server's read came back `Pending` earlier in this poll of the task:
    /// the bytes that come now wake the task, and its next poll reads them.
    fn server_quiet(&self, stream: &Stream) -> bool {
        self.server_quiet != 0
            && self.server_quiet == crate::stream::polls::current()
            && matches!(stream, Stream::Plain(_))
    }

    /// Nothing to read or write: a KILL, a stop or the timer, else the wait.
    fn poll_rest(
        &mut self,
        watch: Watch<'_>,
        timer: Option<&mut Timer>,
        cx: &mut Context<'_>,
    ) -> Poll<Event> {
        if !self.shutting_down && Self::stopping(watch, cx) {
            return Poll::Ready(Event::Shutdown);
        }
        if timer.is_some_and(|t| t.poll_expired(cx)) {
            return Poll::Ready(Event::Timeout);
        }
        self.cbuf.release();
        self.to_client.release();
        self.to_server.release();
        Poll::Pending
    }

    /// Whether Sluice is stopping; if not, the stop wakes this task (the waker is left
    /// first, then the flag read: a stop between the two still finds the waker).
    fn stopping(watch: Watch<'_>, cx: &mut Context<'_>) -> bool {
        if let Some(home) = watch.home {
            home.wake_on_stop(cx.waker());
        }
        *watch.stop.borrow()
    }

    /// While the client's statement runs on a shared connection: moves its answer to the
    /// client (or to `sink`, for an answer Sluice reads itself) as it comes, and serves
    /// the client socket. Returns when the answer is
    /// complete (Some) or something else happened (None; `gone` is set when the client
    /// left, `shutting_down` when Sluice is stopping).
    pub async fn next_answer(
        &mut self,
        answer: &crate::mux::Answer,
        mut sink: Option<&mut BytesMut>,
        gone: &mut bool,
        watch: Watch<'_>,
        mut timer: Option<&mut Timer>,
    ) -> Option<Result<Vec<u8>, crate::error::Error>> {
        // What the client sends meanwhile waits in its buffer, up to a bound.
        self.pause_client = self.cbuf.len() >= HIGH_WATER;
        let got = std::future::poll_fn(|cx| {
            let target = match sink.as_deref_mut() {
                Some(s) => Some(s),
                None if self.to_client.len() < HIGH_WATER => Some(&mut *self.to_client),
                None => None,
            };
            if let Some(target) = target
                && let Poll::Ready(d) = answer.poll_take(cx, target)
            {
                return Poll::Ready(Ok(d));
            }
            // Every write ends this wait: room in the client's queue lets more of
            // the answer in.
            self.poll_io(None, watch, timer.as_deref_mut(), true, cx)
                .map(Err)
        })
        .await;
        self.pause_client = false;
        match got {
            Ok(done) => done,
            Err(Event::ClientRead(Ok(0)) | Event::ClientRead(Err(_)) | Event::WriteFailed(..)) => {
                // The client left; its answer is dropped as it comes.
                answer.abandon();
                *gone = true;
                None
            }
            Err(Event::Shutdown) => {
                self.shutting_down = true;
                None
            }
            Err(_) => None,
        }
    }

    /// Writes what is queued for the client (within a few seconds), e.g. a last error.
    pub async fn flush_client_now(&mut self) {
        if self.to_client.is_empty() {
            return;
        }
        let out = self.to_client.take();
        self.counters.sent(out.len());
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            crate::stream::write_all_flush(&mut self.client, &out),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_buffer_is_kept_for_the_next_and_none_is_held_at_rest() {
        let mut a = LazyBuf::default();
        assert!(a.0.is_none() && a.is_empty());
        a.extend_from_slice(b"SELECT 1");
        let at = a.as_ptr();
        a.clear();
        a.release();
        assert!(a.0.is_none(), "an empty buffer is not held");
        let mut b = LazyBuf::default();
        b.extend_from_slice(b"x");
        assert_eq!(b.as_ptr(), at, "the spare was taken");
        b.release();
        assert!(b.0.is_some(), "a buffer holding bytes is kept");
        // A large buffer is not kept as a spare.
        let mut big = LazyBuf::default();
        big.reserve(spare::SPARE_BYTES * 2);
        big.release();
        assert!(SPARE.with(|s| {
            s.borrow()
                .iter()
                .all(|b| b.capacity() <= spare::SPARE_BYTES)
        }));
    }
}
