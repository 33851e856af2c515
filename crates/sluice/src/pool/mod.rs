//! Server connection pools: one per (server, database, user, startup options).
//!
//! A client leases a connection for as long as the session decides (a statement, a
//! transaction, the whole session) and gives it back clean, or drops it and the pool
//! forgets it. When every connection is leased a client waits up to the pool's wait
//! timeout and then gets an error naming the pool. Pools for pass-through users grow
//! only by clients' logins (Sluice has no password to open more); pools for configured
//! users open connections as needed. Waiting clients are served first come, first
//! served (`wait.rs`): a connection given back goes straight to the longest waiter, and
//! nobody arriving later takes it first.

pub mod answers;
pub mod budget;
#[cfg(test)]
mod tests;
mod wait;

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use wait::Grant;

/// A wait for a server connection longer than this is counted as slow.
pub const SLOW_WAIT: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    /// The `[pools.X]` policy this pool follows.
    pub policy: String,
    pub server: String,
    pub database: String,
    pub user: String,
    /// Startup parameters that shape a connection for good (options and other GUCs).
    pub extra: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub size: usize,
    pub min_idle: usize,
    pub wait_timeout: Duration,
    pub idle_timeout: Duration,
    pub lifetime: Duration,
    pub statement_cache: usize,
    pub reset_query: String,
    /// Connections shared by pipelined statements (MySQL transaction mode).
    pub shared: usize,
    /// The pool policy's session timeouts (`[pools.X]`: idle in a transaction, a
    /// statement, idle between transactions), for its clients' sessions.
    pub session_timeouts: [Option<Duration>; 3],
    /// Schema changes clients made through Sluice so far (see `current_statement`).
    pub schema_epoch: Arc<std::sync::atomic::AtomicU64>,
    /// The `[users]` entry whose `pool_size` sized the pool (a reload looks it up again).
    pub sized_for: Option<String>,
}

impl Settings {
    /// The same settings (the schema epoch is the process's, not the policy's).
    pub fn same_as(&self, o: &Settings) -> bool {
        (
            self.size,
            self.min_idle,
            self.wait_timeout,
            self.idle_timeout,
            self.lifetime,
        ) == (
            o.size,
            o.min_idle,
            o.wait_timeout,
            o.idle_timeout,
            o.lifetime,
        ) && (
            self.statement_cache,
            &self.reset_query,
            self.shared,
            self.session_timeouts,
        ) == (
            o.statement_cache,
            &o.reset_query,
            o.shared,
            o.session_timeouts,
        )
    }
}

/// A failed login: either the server's own ErrorResponse (relayed to the client as is,
/// e.g. 3D000 for an unknown database) or a failure of Sluice's.
#[derive(Debug)]
pub enum LoginError {
    Server(bytes::Bytes),
    Proxy(crate::error::Error),
}

impl From<crate::error::Error> for LoginError {
    fn from(e: crate::error::Error) -> Self {
        LoginError::Proxy(e)
    }
}

impl From<std::io::Error> for LoginError {
    fn from(e: std::io::Error) -> Self {
        LoginError::Proxy(e.into())
    }
}

/// A pooled server connection's socket and read buffer, as a session relays them.
pub trait Duplex {
    fn duplex(&mut self) -> (&mut crate::stream::Stream, &mut bytes::BytesMut);
    /// Bytes the server sent that are not handled yet.
    fn unread(&self) -> usize;
}

/// What a pool needs of a protocol's server connection. Each protocol's backend
/// implements it; everything else about pooling is shared.
pub trait PoolConn: Sized + Send + 'static {
    /// How the pool opens connections by itself (target, credentials, parameters).
    type Opener: Send + Sync + 'static;
    /// What a server says at login, kept once per pool (so a client can log in
    /// without a server connection).
    type Welcome: Clone + Send + 'static;

    fn open(op: &Self::Opener) -> impl Future<Output = Result<Self, LoginError>> + Send;
    /// When the connection was opened and last given back.
    fn stamps(&self) -> Stamps;
    fn stamps_mut(&mut self) -> &mut Stamps;
    /// Between transactions, nothing in flight.
    fn is_idle(&self) -> bool;
    /// Neither closed by the server nor holding unread bytes.
    fn still_open(&mut self) -> bool;
    /// Brings the connection back to a clean state (`reset_query` where the protocol
    /// takes one).
    fn reset(&mut self, reset_query: &str)
    -> impl Future<Output = crate::error::Result<()>> + Send;
    fn close(self);
    /// Where a query running on it can be cancelled (PostgreSQL): while a cancel is on
    /// its way there, the connection goes to nobody (see `cancel.rs`).
    fn cancel_key(&self) -> Option<&Arc<crate::cancel::ServerKey>> {
        None
    }
}

/// When a connection was opened and last given back.
#[derive(Debug, Clone, Copy)]
pub struct Stamps {
    pub created: Instant,
    pub last_used: Instant,
}

impl Stamps {
    pub fn now() -> Stamps {
        let now = Instant::now();
        Stamps {
            created: now,
            last_used: now,
        }
    }
}

struct State<C> {
    idle: Vec<C>,
    total: usize,
    /// Clients waiting, longest first.
    waiters: VecDeque<tokio::sync::oneshot::Sender<Grant<C>>>,
}

pub struct Pool<C: PoolConn> {
    pub name: String,
    pub key: PoolKey,
    /// Its policy's settings; a reload may replace them (new leases follow them).
    settings: arc_swap::ArcSwap<Settings>,
    state: Mutex<State<C>>,
    opener: Mutex<Option<Arc<C::Opener>>>,
    pub leases: AtomicU64,
    pub waits: AtomicU64,
    /// Waits for a connection that took longer than [`SLOW_WAIT`]: a client starving.
    pub slow_waits: AtomicU64,
    /// Time spent waiting for a connection, in microseconds, and waits that timed out.
    pub wait_us: AtomicU64,
    pub wait_timeouts: AtomicU64,
    /// How long the waits took (leases that found a connection at once are not in it).
    pub wait_time: crate::stats::counters::Histogram,
    /// Clients waiting for a connection right now, and since when there have been any.
    waiting: std::sync::atomic::AtomicUsize,
    wait_since: Mutex<Option<Instant>>,
    /// Statements (by pool-wide hash) that a server of this pool has parsed without
    /// error: a client's Parse of one can be answered without a server connection.
    known_statements: Mutex<std::collections::HashSet<u128, sluice_sql::Prehashed>>,
    /// Pool-wide statements found stale (the server refused to run a copy prepared
    /// before a schema change: PostgreSQL's 0A000): their text now goes by another
    /// name, so that whoever prepares it again gets a fresh statement, on every
    /// connection (see [`Pool::current_statement`]).
    stale_statements: Mutex<std::collections::HashSet<u128, sluice_sql::Prehashed>>,
    any_stale: std::sync::atomic::AtomicBool,
    /// The parameters a server reports at login (ParameterStatus), as first seen.
    welcome: Mutex<Option<C::Welcome>>,
    /// Recent answers to statements that only read server settings (answers.rs).
    pub answers: answers::Answers,
}

/// Counts one connection of a pool for as long as it lives, whatever happens to the
/// task holding it: dropping it (a cancelled lease, a client gone mid-login) gives the
/// count back and wakes a waiter.
struct Slot<C: PoolConn> {
    pool: Arc<Pool<C>>,
    armed: bool,
}

impl<C: PoolConn> Drop for Slot<C> {
    fn drop(&mut self) {
        if self.armed {
            self.pool.slot_freed();
        }
    }
}

/// A leased connection (it dereferences to the connection). Dropping a lease
/// without [`Lease::put_back`] closes the connection: its state is not known to be
/// clean.
pub struct Lease<C: PoolConn> {
    pub conn: C,
    slot: Slot<C>,
}

impl<C: PoolConn> std::ops::Deref for Lease<C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.conn
    }
}

impl<C: PoolConn> std::ops::DerefMut for Lease<C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.conn
    }
}

impl<C: PoolConn> Lease<C> {
    pub fn pool(&self) -> &Arc<Pool<C>> {
        &self.slot.pool
    }

    /// Gives the connection back without any reset: only when the session knows it clean.
    /// A connection with a cancel request on its way goes back once the server has
    /// acted on it (the request was aimed at the statement that ran here last).
    pub fn put_back(self) {
        let Lease { conn, mut slot } = self;
        slot.armed = false;
        match conn.cancel_key().filter(|k| k.unsettled()).cloned() {
            None => slot.pool.give_back(conn),
            Some(key) => {
                tokio::spawn(async move {
                    key.settled().await;
                    slot.pool.give_back(conn);
                });
            }
        }
    }

    /// Resets the connection with the pool's reset query and gives it back; closes it if
    /// the reset fails or takes too long.
    pub async fn reset_and_put_back(mut self) {
        let q = self.slot.pool.settings().reset_query.clone();
        let limit = std::time::Duration::from_secs(10);
        match tokio::time::timeout(limit, self.conn.reset(&q)).await {
            Ok(Ok(())) => self.put_back(),
            Ok(Err(e)) => {
                tracing::debug!(pool = %self.slot.pool.name, error = %e, "reset failed; closing server connection");
                self.discard();
            }
            Err(_) => self.discard(),
        }
    }

    /// Closes the connection for good.
    pub fn discard(self) {
        let Lease { conn, slot } = self;
        conn.close();
        drop(slot);
    }
}

impl<C: PoolConn> Pool<C> {
    pub fn new(name: String, key: PoolKey, settings: Settings) -> Arc<Pool<C>> {
        Arc::new(Pool {
            name,
            key,
            settings: arc_swap::ArcSwap::from_pointee(settings),
            state: Mutex::new(State {
                idle: Vec::new(),
                total: 0,
                waiters: VecDeque::new(),
            }),
            opener: Mutex::new(None),
            leases: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            slow_waits: AtomicU64::new(0),
            wait_us: AtomicU64::new(0),
            wait_timeouts: AtomicU64::new(0),
            wait_time: Default::default(),
            waiting: Default::default(),
            wait_since: Mutex::new(None),
            known_statements: Mutex::new(Default::default()),
            stale_statements: Mutex::new(Default::default()),
            any_stale: Default::default(),
            welcome: Mutex::new(None),
            answers: Default::default(),
        })
    }

    pub fn set_opener(&self, opener: Arc<C::Opener>) {
        *self.opener.lock() = Some(opener);
    }

    /// How the pool opens connections by itself (None: it only adopts logins').
    pub fn opener(&self) -> Option<Arc<C::Opener>> {
        self.opener.lock().clone()
    }

    /// Remembers what a server reports at login, the first time.
    pub fn set_welcome(&self, reported: &C::Welcome) {
        let mut w = self.welcome.lock();
        if w.is_none() {
            *w = Some(reported.clone());
        }
    }

    pub fn welcome(&self) -> Option<C::Welcome> {
        self.welcome.lock().clone()
    }

    pub fn statement_parsed(&self, hash: u128) {
        let mut known = self.known_statements.lock();
        if known.len() < 100_000 {
            known.insert(hash);
        }
    }

    pub fn knows_statement(&self, hash: u128) -> bool {
        self.known_statements.lock().contains(&hash)
    }

    /// The statement `hash` can no longer run anywhere (its copies were prepared
    /// before a schema change): its text goes by a new name from now on.
    pub fn statement_stale(&self, hash: u128) {
        self.known_statements.lock().remove(&hash);
        let mut stale = self.stale_statements.lock();
        if stale.len() >= 100_000 {
            // Forgetting makes clients meet the stale copies again, once each: they
            // fail as they would directly, and are found stale again.
            stale.clear();
        }
        stale.insert(hash);
        self.any_stale.store(true, Ordering::Release);
    }

    /// The pool-wide hash a statement first hashed as `hash` goes by now: itself,
    /// unless it was found stale; then the next in a chain every client follows alike.
    ///
    /// After a schema change made through Sluice (DDL), every text goes by a new name:
    /// a statement prepared since is analysed afresh (its parameter types may differ
    /// now, with no error to tell), while the copies prepared before stay where they are
    /// for the clients holding them, as directly.
    pub fn current_statement(&self, mut hash: u128) -> u128 {
        let epoch = self.settings().schema_epoch.load(Ordering::Acquire);
        if epoch > 0 {
            let mut b = [0u8; 24];
            b[..16].copy_from_slice(&hash.to_le_bytes());
            b[16..].copy_from_slice(&epoch.to_le_bytes());
            hash = xxhash_rust::xxh3::xxh3_128(&b);
        }
        if !self.any_stale.load(Ordering::Acquire) {
            return hash;
        }
        let stale = self.stale_statements.lock();
        while stale.contains(&hash) {
            hash = xxhash_rust::xxh3::xxh3_128(&hash.to_le_bytes());
        }
        hash
    }

    /// (name, leases, waits, slow waits) so far.
    pub fn counters(&self) -> (String, u64, u64, u64) {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let slow = c(&self.slow_waits);
        (self.name.clone(), c(&self.leases), c(&self.waits), slow)
    }

    /// The pool's settings now.
    pub fn settings(&self) -> arc_swap::Guard<Arc<Settings>> {
        self.settings.load()
    }

    /// New settings (a reload changed the pool's policy): later leases follow them; a
    /// smaller size closes connections as they come back, a larger one lets waiters
    /// open connections at once.
    pub fn set_settings(&self, settings: Settings) {
        self.settings.store(Arc::new(settings));
        let can_open = self.can_open();
        let mut st = self.state.lock();
        while can_open && st.total < self.settings().size && !st.waiters.is_empty() {
            st.total += 1;
            if wait::hand_over(&mut st, wait::Grant::Slot).is_some() {
                st.total -= 1;
                break;
            }
        }
    }

    /// Clients waiting for a connection right now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether the pool can open connections by itself (not a pass-through pool).
    pub fn can_open(&self) -> bool {
        self.opener.lock().is_some()
    }

    pub fn counts(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.total, st.idle.len())
    }

    fn usable(&self, c: &C, now: Instant) -> bool {
        let s = self.settings();
        !(s.lifetime > Duration::ZERO && now.duration_since(c.stamps().created) > s.lifetime
            || s.idle_timeout > Duration::ZERO
                && now.duration_since(c.stamps().last_used) > s.idle_timeout)
    }

    fn give_back(self: &Arc<Self>, mut conn: C) {
        let now = Instant::now();
        conn.stamps_mut().last_used = now;
        let close = {
            let mut st = self.state.lock();
            if st.total > self.settings().size || !self.usable(&conn, now) || !conn.is_idle() {
                Some(conn)
            } else {
                // The longest waiter gets it; with nobody waiting it goes idle.
                if let Some(Grant::Conn(c)) = wait::hand_over(&mut st, Grant::Conn(conn)) {
                    st.idle.push(c);
                }
                None
            }
        };
        if let Some(c) = close {
            c.close();
            self.slot_freed();
        }
    }

    fn leased(self: &Arc<Self>, conn: C) -> Lease<C> {
        self.leases.fetch_add(1, Ordering::Relaxed);
        // What the task that takes it learnt about other sockets in this poll does not
        // hold for this one.
        crate::stream::polls::bump();
        Lease {
            conn,
            slot: Slot {
                pool: self.clone(),
                armed: true,
            },
        }
    }

    /// Takes a connection a client's login opened (pass-through auth) into the pool,
    /// leased to that client.
    pub fn adopt(self: &Arc<Self>, conn: C) -> Lease<C> {
        self.state.lock().total += 1;
        self.leased(conn)
    }

    /// Whether clients are waiting for a connection right now.
    pub fn has_waiters(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Whether clients have been waiting for a connection, without a break, for this
    /// long.
    pub fn starved(&self, after: Duration) -> bool {
        self.has_waiters() && self.wait_since.lock().is_some_and(|t| t.elapsed() >= after)
    }

    /// Leases an idle connection if there is one and nobody is waiting for it, without
    /// waiting or opening one.
    pub fn try_lease_idle(self: &Arc<Self>) -> Option<Lease<C>> {
        let (got, expired) = self.take_idle_unless_waited(&mut self.state.lock());
        expired.into_iter().for_each(C::close);
        got.map(|c| self.leased(c))
    }

    /// Leases a connection, waiting up to the wait timeout.
    pub async fn lease(self: &Arc<Self>) -> Result<Lease<C>, LoginError> {
        // Fast path: an idle connection is there and nobody waits for it (no waiter
        // set-up, no timer).
        let (got, expired) = self.take_idle_unless_waited(&mut self.state.lock());
        expired.into_iter().for_each(C::close);
        if let Some(conn) = got {
            return Ok(self.leased(conn));
        }
        // Boxed: waiting and opening need a large future, which would otherwise sit in
        // every client's task for as long as it is connected.
        Box::pin(self.lease_slow()).await
    }

    /// Like `take_idle`, but only when no client is waiting (they come first).
    fn take_idle_unless_waited(&self, st: &mut State<C>) -> (Option<C>, Vec<C>) {
        if st.waiters.is_empty() {
            self.take_idle(st)
        } else {
            (None, Vec::new())
        }
    }

    /// Pops a usable idle connection; also returns the dead or expired ones it found
    /// (to be closed outside the lock).
    fn take_idle(&self, st: &mut State<C>) -> (Option<C>, Vec<C>) {
        let mut expired = Vec::new();
        if st.idle.is_empty() {
            return (None, expired);
        }
        let now = Instant::now();
        while let Some(mut c) = st.idle.pop() {
            // Checked every time: the server may have closed it a moment ago (a
            // terminated backend's FATAL must not reach the next client). The check
            // costs no system call unless the reactor has seen the socket readable,
            // since reads clear readiness when they drain it (`stream::read_ready`).
            if self.usable(&c, now) && c.still_open() {
                return (Some(c), expired);
            }
            st.total -= 1;
            expired.push(c);
        }
        (None, expired)
    }

    /// Closes idle connections past their idle timeout or lifetime, at most `*left` of
    /// them (counted down).
    pub fn reap(&self, left: &mut usize) {
        let now = Instant::now();
        let mut closed = Vec::new();
        {
            let mut st = self.state.lock();
            let mut i = 0;
            while i < st.idle.len() && *left > 0 {
                if self.usable(&st.idle[i], now) {
                    i += 1;
                } else {
                    closed.push(st.idle.swap_remove(i));
                    st.total -= 1;
                    *left -= 1;
                }
            }
        }
        closed.into_iter().for_each(C::close);
    }

    /// Closes every idle connection (shutdown).
    pub fn close_idle(&self) {
        let idle: Vec<_> = {
            let mut st = self.state.lock();
            st.total -= st.idle.len();
            st.idle.drain(..).collect()
        };
        idle.into_iter().for_each(C::close);
    }
}

impl<C: PoolConn> budget::IdleConns for Pool<C> {
    fn oldest_idle(&self) -> Option<Instant> {
        let st = self.state.lock();
        st.idle.iter().map(|c| c.stamps().last_used).min()
    }

    fn close_oldest_idle(&self) -> bool {
        let c = {
            let mut st = self.state.lock();
            let oldest = st
                .idle
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.stamps().last_used)
                .map(|(i, _)| i);
            let Some(i) = oldest else {
                return false;
            };
            st.total -= 1;
            st.idle.swap_remove(i)
        };
        c.close();
        true
    }
}

/// All pools of the process.
pub struct Pools<C: PoolConn> {
    map: Mutex<HashMap<PoolKey, Arc<Pool<C>>>>,
}

impl<C: PoolConn> Default for Pools<C> {
    fn default() -> Self {
        Pools {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<C: PoolConn> Pools<C> {
    pub fn get_or_create(
        &self,
        key: &PoolKey,
        make: impl FnOnce() -> Arc<Pool<C>>,
    ) -> Arc<Pool<C>> {
        let mut map = self.map.lock();
        if let Some(p) = map.get(key) {
            return p.clone();
        }
        let p = make();
        map.insert(key.clone(), p.clone());
        p
    }

    pub fn all(&self) -> Vec<Arc<Pool<C>>> {
        self.map.lock().values().cloned().collect()
    }
}
