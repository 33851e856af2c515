//! Pipelining several clients' autocommit statements on one server connection
//! (transaction mode), for either protocol. A server reads a connection's next command
//! as soon as it has answered the previous one, and answers come back in order; so plain
//! statements of clients that hold no server connection and changed no session state are
//! queued on a shared connection, written together, and each answer is handed to its
//! client as it arrives. One task per shared connection writes the queue and splits the
//! answers with the protocol's [`Splitter`]. Fewer server connections do the work, with
//! fewer wake-ups on both sides; a client's statement waits behind the statements queued
//! before it, but nothing queues behind a statement that has run for more than a few
//! milliseconds.

use crate::error::Error;
use crate::pool::{Lease, Pool, PoolConn};
use crate::stream::Stream;
use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::io::AsyncWrite;

/// A statement queues behind a shared connection only while the one running there has
/// run for less than this.
const BUSY: std::time::Duration = std::time::Duration::from_millis(5);
/// Stop reading a shared connection while its current answer has this much unread.
const HIGH_WATER: usize = 1 << 20;

/// One client statement's answer, filled by the connection's task.
#[derive(Default)]
pub struct Answer {
    st: Mutex<AnswerState>,
}

#[derive(Default)]
struct AnswerState {
    buf: BytesMut,
    /// Set when the answer is complete: Ok(first bytes of its last packet) or the
    /// connection's failure.
    done: Option<Result<Vec<u8>, Error>>,
    waker: Option<Waker>,
    /// The connection's task, waiting for the client to take what is there.
    producer: Option<Waker>,
    /// The client is gone: what arrives is dropped.
    abandoned: bool,
}

impl Answer {
    /// Moves what has arrived into `out`; Ready(Some(..)) once the answer is complete.
    pub fn poll_take(
        &self,
        cx: &mut Context<'_>,
        out: &mut BytesMut,
    ) -> Poll<Option<Result<Vec<u8>, Error>>> {
        let mut st = self.st.lock();
        let had = !st.buf.is_empty();
        if had {
            out.extend_from_slice(&st.buf);
            st.buf.clear();
            if let Some(w) = st.producer.take() {
                w.wake();
            }
        }
        if let Some(d) = st.done.take() {
            return Poll::Ready(Some(d));
        }
        if had {
            return Poll::Ready(None);
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The client left: drop what arrives from now on.
    pub fn abandon(&self) {
        let mut st = self.st.lock();
        st.abandoned = true;
        st.buf = BytesMut::new();
        if let Some(w) = st.producer.take() {
            w.wake();
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut st = self.st.lock();
        if st.abandoned {
            return;
        }
        st.buf.extend_from_slice(bytes);
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    fn finish(&self, r: Result<Vec<u8>, Error>) {
        let mut st = self.st.lock();
        st.done = Some(r);
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    /// Whether the client has this much not yet taken; if so, `producer` is woken when
    /// it takes it.
    fn full(&self, producer: &Waker) -> bool {
        let mut st = self.st.lock();
        if st.abandoned || st.buf.len() < HIGH_WATER {
            return false;
        }
        st.producer = Some(producer.clone());
        true
    }
}

/// A shared server connection, as clients see it.
pub struct Mux {
    st: Mutex<MuxState>,
}

#[derive(Default)]
struct MuxState {
    /// Commands not yet written, and their commands' first bytes.
    queue: BytesMut,
    cmds: Vec<u8>,
    /// Answers still to come, in order.
    pending: VecDeque<Arc<Answer>>,
    waker: Option<Waker>,
    dead: bool,
    thread: u32,
    cancel_key: Option<Arc<crate::cancel::ServerKey>>,
    /// When the statement running now started (as far as Sluice can tell).
    running_since: Option<std::time::Instant>,
}

impl Mux {
    fn load(&self) -> usize {
        self.st.lock().pending.len()
    }

    /// The statement running there has taken long: queue nothing more behind it.
    fn stuck(&self) -> bool {
        let st = self.st.lock();
        st.running_since
            .is_some_and(|t| !st.pending.is_empty() && t.elapsed() > BUSY)
    }

    /// Whether `answer` is the statement the server is running now, with nothing queued
    /// behind it (so a cancel or KILL sent now cannot reach another client's statement).
    pub fn running(&self, answer: &Answer) -> bool {
        let st = self.st.lock();
        st.pending.len() == 1
            && st.queue.is_empty()
            && st
                .pending
                .front()
                .is_some_and(|a| std::ptr::eq(&**a, answer))
    }

    /// The server thread of the shared connection.
    pub fn thread(&self) -> u32 {
        self.st.lock().thread
    }

    /// Where a query running on the shared connection can be cancelled.
    pub fn cancel_key(&self) -> Option<Arc<crate::cancel::ServerKey>> {
        self.st.lock().cancel_key.clone()
    }

    /// Queues a client's command; None when the connection is gone.
    fn submit(&self, frame: &[u8], first: u8) -> Option<Arc<Answer>> {
        let mut st = self.st.lock();
        if st.dead {
            return None;
        }
        let answer = Arc::new(Answer::default());
        st.queue.extend_from_slice(frame);
        st.cmds.push(first);
        st.pending.push_back(answer.clone());
        if let Some(w) = st.waker.take() {
            w.wake();
        }
        Some(answer)
    }
}

/// What the shared connections need of a protocol's server connection.
pub trait MuxConn: PoolConn {
    type Splitter: Splitter;
    fn splitter(&self) -> Self::Splitter;
    /// The socket and the bytes read from it not yet handled.
    fn io(&mut self) -> (&mut Stream, &mut BytesMut);
    /// The server's id of the connection (for KILL).
    fn thread(&self) -> u32;
    /// Where a query running on it can be cancelled (PostgreSQL).
    fn cancel_key(&self) -> Option<Arc<crate::cancel::ServerKey>> {
        None
    }
    /// Whether the connection is in the state a client with session fingerprint `fp`
    /// expects (nothing set on it, not in a transaction).
    fn fits(&mut self, fp: u64) -> bool;
}

/// Splits a server's answers, one per command written.
pub trait Splitter: Send + 'static {
    /// A command was written; `first` is its first payload byte.
    fn expect(&mut self, first: u8);
    /// The next complete unit (packet, message) at the start of `buf`: its length, and
    /// whether it ends the current answer: Some(clean) where `clean` says the connection
    /// is still outside any transaction.
    fn unit(&mut self, buf: &[u8]) -> Result<Option<(usize, Option<bool>)>, Error>;
}

/// Shared connections by pool (its address) and client session fingerprint.
type MuxMap = HashMap<(usize, u64), Vec<Arc<Mux>>>;

/// The shared connections of each pool (and client session fingerprint).
pub struct Muxes<C: MuxConn> {
    map: Mutex<MuxMap>,
    /// Statements run on shared connections so far.
    statements: std::sync::atomic::AtomicU64,
    _conn: std::marker::PhantomData<fn() -> C>,
}

impl<C: MuxConn> Default for Muxes<C> {
    fn default() -> Self {
        Muxes {
            map: Mutex::default(),
            statements: Default::default(),
            _conn: std::marker::PhantomData,
        }
    }
}

impl<C: MuxConn> Muxes<C> {
    pub fn statements(&self) -> u64 {
        self.statements.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues `frame` (one whole command; `first` its first payload byte) on one of the
    /// pool's shared connections for clients with session fingerprint `fp`, opening one
    /// if there are fewer than the cap and all are busy. None: do it the ordinary way.
    pub fn submit(
        &self,
        pool: &Arc<Pool<C>>,
        fp: u64,
        frame: &[u8],
        first: u8,
    ) -> Option<(Arc<Mux>, Arc<Answer>)> {
        let r = self.place(pool, fp, frame, first);
        if r.is_some() {
            self.statements
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    fn place(
        &self,
        pool: &Arc<Pool<C>>,
        fp: u64,
        frame: &[u8],
        first: u8,
    ) -> Option<(Arc<Mux>, Arc<Answer>)> {
        if pool.settings.shared == 0 || pool.has_waiters() {
            // Others wait for a connection of their own: queue up with them.
            return None;
        }
        let key = (Arc::as_ptr(pool) as usize, fp);
        let (best, count) = {
            let mut map = self.map.lock();
            let list = map.entry(key).or_default();
            list.retain(|m| !m.st.lock().dead);
            let best = list
                .iter()
                .filter(|m| !m.stuck())
                .min_by_key(|m| m.load())
                .cloned();
            (best, list.len())
        };
        // Sharing pays under concurrency only: a lone client goes the direct way.
        if best.as_ref().is_none_or(|m| m.load() == 0) {
            let (total, idle) = pool.counts();
            if total.saturating_sub(idle).saturating_sub(count) == 0 {
                return None;
            }
        }
        // At most half the pool is shared, so clients that need a connection of their
        // own (transactions, pinned state) can have one.
        let cap = pool.settings.shared.min(pool.settings.size / 2);
        if cap == 0 {
            return None;
        }
        match &best {
            Some(m) if m.load() == 0 || count >= cap => {
                return m.submit(frame, first).map(|a| (m.clone(), a));
            }
            // Every shared connection is busy with a long statement.
            None if count >= cap => return None,
            _ => {}
        }
        // Another shared connection, if the pool has one to spare right now.
        let mut lease = pool.try_lease_idle()?;
        if !lease.conn.fits(fp) {
            lease.put_back();
            return best.and_then(|m| m.submit(frame, first).map(|a| (m, a)));
        }
        let mux = Arc::new(Mux {
            st: Mutex::new(MuxState {
                thread: lease.conn.thread(),
                cancel_key: lease.conn.cancel_key(),
                ..MuxState::default()
            }),
        });
        self.map.lock().entry(key).or_default().push(mux.clone());
        tokio::spawn(run(mux.clone(), lease));
        mux.submit(frame, first).map(|a| (mux, a))
    }
}

/// Bytes of an answer's last unit handed back with it (after its header).
const HEAD_LEN: usize = 68;

/// A shared connection unused this long goes back to its pool.
const IDLE: std::time::Duration = std::time::Duration::from_millis(500);

/// The task of one shared connection.
async fn run<C: MuxConn>(mux: Arc<Mux>, mut lease: Lease<C>) {
    let mut splitter = lease.conn.splitter();
    let mut out = BytesMut::new();
    let mut inflight: VecDeque<Arc<Answer>> = VecDeque::new();
    let mut idle = Box::pin(tokio::time::sleep(IDLE));
    let mut flush = false;
    let failure = std::future::poll_fn(|cx| {
        loop {
            let mut progressed = false;
            {
                let mut st = mux.st.lock();
                if !st.queue.is_empty() {
                    out.extend_from_slice(&st.queue);
                    st.queue.clear();
                    for c in st.cmds.drain(..) {
                        splitter.expect(c);
                    }
                    let n = inflight.len();
                    if n == 0 {
                        st.running_since = Some(std::time::Instant::now());
                    }
                    inflight.extend(st.pending.iter().skip(n).cloned());
                    idle.as_mut().reset(tokio::time::Instant::now() + IDLE);
                }
                if inflight.is_empty() && out.is_empty() && !flush {
                    if idle.as_mut().poll(cx).is_ready() || lease.pool().has_waiters() {
                        // Nothing for a while: the connection goes back to the pool.
                        st.dead = true;
                        return Poll::Ready(None);
                    }
                    st.waker = Some(cx.waker().clone());
                }
            }
            let (stream, rbuf) = lease.conn.io();
            if !out.is_empty() {
                match Pin::new(&mut *stream).poll_write(cx, &out) {
                    Poll::Ready(Ok(n)) => {
                        out.advance(n);
                        progressed = true;
                        // TLS may keep records back until flushed.
                        flush = stream.is_tls();
                    }
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Some(Error::server_gone(e.to_string())));
                    }
                    Poll::Pending => {}
                }
            } else if flush {
                match Pin::new(&mut *stream).poll_flush(cx) {
                    Poll::Ready(Ok(())) => flush = false,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Some(Error::server_gone(e.to_string())));
                    }
                    Poll::Pending => {}
                }
            }
            let full = inflight.front().is_some_and(|a| a.full(cx.waker()));
            if !inflight.is_empty() && !full {
                if rbuf.capacity() - rbuf.len() < 1024 {
                    rbuf.reserve(16 * 1024);
                }
                match tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, rbuf) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Some(Error::server_gone(
                            "Lost connection to server during query",
                        )));
                    }
                    Poll::Ready(Ok(_)) => progressed = true,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Some(Error::server_gone(e.to_string())));
                    }
                    Poll::Pending => {}
                }
            }
            if let Err(e) = split(rbuf, &mut splitter, &mut inflight, &mux) {
                return Poll::Ready(Some(e));
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    })
    .await;
    let Some(failure) = failure else {
        // Idle: back to the pool, unless the server said something nobody asked for.
        if lease.conn.io().1.is_empty() {
            lease.put_back();
        } else {
            lease.discard();
        }
        return;
    };
    tracing::info!(server = lease.conn.thread(), error = %failure, "shared server connection lost");
    let mut st = mux.st.lock();
    st.dead = true;
    for a in st.pending.drain(..) {
        a.finish(Err(failure.clone()));
    }
    drop(st);
    lease.discard();
}

/// Hands each complete unit to the answer it belongs to.
fn split<S: Splitter>(
    rbuf: &mut BytesMut,
    splitter: &mut S,
    inflight: &mut VecDeque<Arc<Answer>>,
    mux: &Mux,
) -> Result<(), Error> {
    let mut start = 0;
    let mut pos = 0;
    while let Some((len, end)) = splitter.unit(&rbuf[pos..])? {
        let unit_end = pos + len;
        if let Some(clean) = end {
            if let Some(a) = inflight.front() {
                a.push(&rbuf[start..unit_end]);
            }
            start = unit_end;
            let head = rbuf[pos..unit_end.min(pos + HEAD_LEN)].to_vec();
            if !clean {
                // The answer is sent, but the client must not believe it is in a
                // transaction on a connection that is about to close.
                return Err(Error::new(
                    crate::error::Kind::Desync,
                    crate::error::Side::Server,
                    "a shared connection was left in a transaction",
                ));
            }
            if let Some(a) = inflight.pop_front() {
                let mut st = mux.st.lock();
                st.pending.pop_front();
                st.running_since = Some(std::time::Instant::now());
                drop(st);
                a.finish(Ok(head));
            }
        }
        pos = unit_end;
    }
    if pos > start
        && let Some(a) = inflight.front()
    {
        a.push(&rbuf[start..pos]);
    }
    rbuf.advance(pos);
    Ok(())
}
