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

mod answer;
mod task;

pub use answer::{Added, Answer};

use crate::error::Error;
use crate::pool::{Lease, Pool, PoolConn};
use crate::stmt_cache::StmtCache;
use crate::stream::Stream;
use bytes::BytesMut;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::task::Waker;

/// A statement queues behind a shared connection only while the one running there has
/// run for less than this.
const BUSY: std::time::Duration = std::time::Duration::from_millis(5);
/// Stop reading a shared connection while its current answer has this much unread.
const HIGH_WATER: usize = 1 << 20;
/// Commands queued while more than this many are in flight wait, and go in one write
/// when the server is down to its last one: the server always has work, and Sluice
/// writes (and the server reads) once per batch rather than once per statement.
const IN_FLIGHT_LOW: usize = 1;

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
    /// A statement changed the connection's session state: it is closed when idle.
    retired: bool,
    /// The statements prepared on the connection (while it is shared, they live here).
    stmts: StmtCache,
    stmt_cap: usize,
}

/// Where a client queues its command on the shared connection chosen for it.
pub struct Queue<'a> {
    /// The bytes to write: the client's command, and any answerless ones it needs first.
    pub bytes: &'a mut BytesMut,
    /// The statements prepared on that connection.
    pub stmts: &'a mut StmtCache,
    /// How many statements the connection may keep prepared.
    pub stmt_cap: usize,
    /// Commands Sluice put before the client's, whose replies the client must not see.
    pub added: &'a mut Added,
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

    /// Queues a client's command: `build` appends it and returns its first byte (the
    /// one command whose answer the client awaits). None when the connection is gone.
    fn submit<F: FnOnce(Queue<'_>) -> u8>(&self, build: F) -> Option<Arc<Answer>> {
        let mut st = self.st.lock();
        if st.dead {
            return None;
        }
        let st = &mut *st;
        let mut added = Added::default();
        let first = build(Queue {
            bytes: &mut st.queue,
            stmts: &mut st.stmts,
            stmt_cap: st.stmt_cap,
            added: &mut added,
        });
        let answer = Arc::new(Answer::new(added));
        st.cmds.push(first);
        st.pending.push_back(answer.clone());
        if let Some(w) = st.waker.take() {
            w.wake();
        }
        Some(answer)
    }

    /// The connection's prepared statements, and a queue for answerless commands (such
    /// as closing a statement); None when the connection is gone.
    pub fn with_stmts<R>(&self, f: impl FnOnce(Queue<'_>) -> R) -> Option<R> {
        let mut st = self.st.lock();
        if st.dead {
            return None;
        }
        let st = &mut *st;
        let before = st.queue.len();
        let r = f(Queue {
            bytes: &mut st.queue,
            stmts: &mut st.stmts,
            stmt_cap: st.stmt_cap,
            added: &mut Added::default(),
        });
        if st.queue.len() != before
            && let Some(w) = st.waker.take()
        {
            w.wake();
        }
        Some(r)
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
    /// Whether the connection is in the state a client with session fingerprint `fp`
    /// expects (nothing set on it, not in a transaction).
    fn fits(&mut self, fp: u64) -> bool;
    /// The statements prepared on it, handed to the shared connection (where clients'
    /// prepared statements may run on a shared connection).
    fn take_stmts(&mut self) -> StmtCache {
        StmtCache::default()
    }
    /// The statements prepared on it, back from the shared connection.
    fn put_stmts(&mut self, _stmts: StmtCache) {}
}

/// Splits a server's answers, one per command written.
pub trait Splitter: Send + 'static {
    /// A command was written; `first` is its first payload byte.
    fn expect(&mut self, first: u8);
    /// The next complete unit (packet, message) at the start of `buf`: its length, and
    /// whether it ends the current answer: Some(how) where `how` says in what state it
    /// leaves the connection.
    fn unit(&mut self, buf: &[u8]) -> Result<Option<(usize, Option<Ended>)>, Error>;
    /// While replies to commands Sluice added before a client's lead its answer (see
    /// [`Added`]): Some(true) for a complete unit that is such a success reply (dropped),
    /// Some(false) for one that ends them (an error), None for one that may come at any
    /// time (a notice; it reaches the client).
    fn added_reply(&self, _unit: &[u8]) -> Option<bool> {
        Some(false)
    }
    /// Whether a complete unit is the server's farewell before it closes the connection
    /// (it shuts down, or another client's pg_terminate_backend ended it): not passed
    /// on; the connection's loss is, to each client whose answer it cuts short, as this
    /// error (the server's reason: see session/lost.rs).
    fn farewell(&self, _unit: &[u8]) -> Option<Error> {
        None
    }
    /// Whether a complete unit says the prepared statement the answer ran can no longer
    /// run as prepared (it must be prepared afresh): see [`Answer::stale`].
    fn stale(&self, _unit: &[u8]) -> bool {
        false
    }
    /// What the answer that just ended says the statement did (rows sent, rows
    /// changed, an error), for its digest; the count starts again for the next answer.
    fn outcome(&mut self) -> crate::stats::Outcome {
        crate::stats::Outcome::default()
    }
}

/// The state an answer leaves a shared connection in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// As before: no transaction, no session state.
    Clean,
    /// In a transaction (the statement opened one): the connection cannot be shared.
    InTransaction,
    /// The server reports a change of session state (a function set a variable, say):
    /// the connection takes no more statements and is closed once it has answered the
    /// ones it has, so that no other client sees the change.
    StateChanged,
}

/// Shared connections by pool (its address) and client session fingerprint.
type MuxMap = HashMap<(usize, u64), Vec<Arc<Mux>>, sluice_sql::Prehashed>;

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

    /// Queues a command on one of the pool's shared connections for clients with
    /// session fingerprint `fp`, opening one if there are fewer than the cap and all are
    /// busy: `build` appends the command to the chosen connection's queue and returns its
    /// first byte.
    pub fn submit<F: FnOnce(Queue<'_>) -> u8>(
        &self,
        pool: &Arc<Pool<C>>,
        fp: u64,
        build: F,
    ) -> Result<(Arc<Mux>, Arc<Answer>), Refused> {
        let r = self.place(pool, fp, build);
        if r.is_ok() {
            self.statements
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    fn place<F: FnOnce(Queue<'_>) -> u8>(
        &self,
        pool: &Arc<Pool<C>>,
        fp: u64,
        build: F,
    ) -> Result<(Arc<Mux>, Arc<Answer>), Refused> {
        // At most half the pool is shared, so clients that need a connection of their
        // own (transactions, pinned state) can have one.
        let cap = pool.settings().shared.min(pool.settings().size / 2);
        if cap == 0 || pool.starved(BUSY) {
            // Clients have waited a while for a connection of their own: the shared
            // ones drain and go back to the pool.
            return Err(Refused::No);
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
            if total.saturating_sub(idle).saturating_sub(count) == 0 && !pool.has_waiters() {
                return Err(Refused::No);
            }
        }
        let submit = |m: Arc<Mux>, build: F| match m.submit(build) {
            Some(a) => Ok((m, a)),
            None => Err(Refused::No),
        };
        match best {
            Some(m) if m.load() == 0 || count >= cap => return submit(m, build),
            // Every shared connection is busy with a long statement.
            None if count >= cap => return Err(Refused::No),
            _ => {}
        }
        // Another shared connection, if the pool has one to spare right now.
        match pool.try_lease_idle() {
            Some(lease) => match self.start(pool, fp, lease) {
                Ok(m) => submit(m, build),
                Err(lease) => {
                    lease.put_back();
                    best.map_or(Err(Refused::No), |m| submit(m, build))
                }
            },
            None => best.map_or(Err(Refused::WantConnection), |m| submit(m, build)),
        }
    }

    /// Makes `lease` a shared connection of the pool for clients with fingerprint `fp`,
    /// if there is room for one more and it fits them; otherwise hands it back.
    pub fn start(
        &self,
        pool: &Arc<Pool<C>>,
        fp: u64,
        mut lease: Lease<C>,
    ) -> Result<Arc<Mux>, Lease<C>> {
        let cap = pool.settings().shared.min(pool.settings().size / 2);
        let key = (Arc::as_ptr(pool) as usize, fp);
        let mut map = self.map.lock();
        let list = map.entry(key).or_default();
        list.retain(|m| !m.st.lock().dead);
        if list.len() >= cap || !lease.conn.fits(fp) {
            return Err(lease);
        }
        let mux = Arc::new(Mux {
            st: Mutex::new(MuxState {
                thread: lease.conn.thread(),
                cancel_key: lease.conn.cancel_key().cloned(),
                stmts: lease.conn.take_stmts(),
                stmt_cap: pool.settings().statement_cache,
                ..MuxState::default()
            }),
        });
        list.push(mux.clone());
        tokio::spawn(task::run(mux.clone(), lease));
        Ok(mux)
    }
}

/// Why a command was not queued on a shared connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It goes the ordinary way.
    No,
    /// There is no shared connection and no idle one to make one of: the client may
    /// lease one the ordinary way and offer it ([`Muxes::start`]).
    WantConnection,
}
