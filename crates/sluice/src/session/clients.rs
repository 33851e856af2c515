//! The book of logged-in clients, for the admin console (`SHOW CLIENTS`, `KILL CLIENT`)
//! and metrics: who each client is, where it came from, since when. A session holds its
//! [`Entry`]; dropping it (the session ends) takes the client out of the book.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// One client, as the console shows it.
pub struct ClientInfo {
    /// The console's id for the client (`KILL CLIENT id`).
    pub id: u64,
    pub protocol: sluice_config::Protocol,
    /// Its listener, user and the database it logged in to (one copy for all the
    /// clients with the same three: the line stays in jemalloc's 128-byte class).
    names: Arc<Names>,
    pub addr: Option<SocketAddr>,
    /// When it logged in, in seconds since the Unix epoch (a u32, good until 2106, not
    /// a `SystemTime`: the book's entry stays in a smaller size class).
    since: u32,
    /// The id the client itself knows: PostgreSQL's process id, MySQL's connection id.
    pub pid: i64,
    /// The pool mode it runs in.
    pub mode: sluice_config::PoolMode,
    /// Why its session is pinned to its server connection now (bits of
    /// `PinReason`), as its session last said.
    pub pins: std::sync::atomic::AtomicU16,
    /// KILL CLIENT ended it (its session reads nothing more from it).
    killed: std::sync::atomic::AtomicBool,
    socket: crate::stream::SocketHandle,
    /// The session's task, woken when Sluice starts to stop ([`Book::wake_all`]).
    stop_waker: Mutex<Option<std::task::Waker>>,
}

impl ClientInfo {
    pub fn listener(&self) -> &str {
        &self.names.listener
    }

    pub fn user(&self) -> &str {
        &self.names.user
    }

    /// The database it logged in to.
    pub fn database(&self) -> &str {
        &self.names.database
    }

    /// When it logged in, in seconds since the Unix epoch.
    pub fn since(&self) -> i64 {
        i64::from(self.since)
    }

    /// Leaves the session's waker for [`Book::wake_all`] (nothing changes when it is
    /// the one left last).
    pub fn wake_on_stop(&self, w: &std::task::Waker) {
        let mut slot = self.stop_waker.lock();
        if !slot.as_ref().is_some_and(|old| old.will_wake(w)) {
            *slot = Some(w.clone());
        }
    }

    /// Shuts its socket for reading: its session sees the client gone (the socket
    /// handle knows when the session has closed it, and then does nothing).
    pub fn shut_reading(&self) {
        self.socket.shutdown(false);
    }

    /// Shuts its socket both ways (MySQL's KILL of a client that holds no server
    /// connection).
    pub fn close(&self) {
        self.socket.shutdown(true);
    }

    /// KILL CLIENT ended it.
    pub fn killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// The reasons its session is pinned now.
    pub fn pinned(&self) -> impl Iterator<Item = crate::session::ledger::PinReason> {
        let mask = self.pins.load(Ordering::Relaxed);
        crate::session::ledger::PinReason::ALL
            .into_iter()
            .filter(move |r| mask & (1 << (*r as u16)) != 0)
    }
}

#[derive(Default)]
pub struct Book {
    map: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next: AtomicU64,
    /// Clients' names, each set of three kept once.
    names: crate::intern::Interner<Names>,
}

/// A client's listener, user and database names, as `Shared::names` keeps them (one
/// copy for all the clients of one user).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Names {
    pub listener: Arc<str>,
    pub user: Arc<str>,
    pub database: Arc<str>,
}

impl Names {
    pub fn of(shared: &crate::shared::Shared, listener: &str, user: &str, database: &str) -> Names {
        Names {
            listener: shared.names.name(listener),
            user: shared.names.name(user),
            database: shared.names.name(database),
        }
    }
}

/// What a client logging in tells the book.
pub struct Arrival<'a> {
    pub protocol: sluice_config::Protocol,
    pub names: Names,
    pub pid: i64,
    pub mode: sluice_config::PoolMode,
    pub tcp: &'a tokio::net::TcpStream,
}

impl Book {
    pub fn register(self: &Arc<Self>, a: Arrival<'_>) -> Entry {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let info = Arc::new(ClientInfo {
            id,
            protocol: a.protocol,
            names: self.names.intern(a.names),
            addr: a.tcp.peer_addr().ok(),
            since: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX)),
            pid: a.pid,
            mode: a.mode,
            pins: Default::default(),
            killed: Default::default(),
            socket: crate::stream::SocketHandle::new(a.tcp),
            stop_waker: Mutex::new(None),
        });
        self.map.lock().insert(id, info.clone());
        Entry {
            book: self.clone(),
            info,
        }
    }

    /// Every client, by id.
    pub fn all(&self) -> Vec<Arc<ClientInfo>> {
        self.map.lock().values().cloned().collect()
    }

    /// Wakes every client's session: Sluice is stopping (they read the flag).
    pub fn wake_all(&self) {
        let wakers: Vec<_> = (self.map.lock().values())
            .filter_map(|c| c.stop_waker.lock().take())
            .collect();
        wakers.into_iter().for_each(std::task::Waker::wake);
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends the client's connection: its session sees the client gone (a transaction
    /// it had open is rolled back, its server connection goes back or is closed).
    /// False when no such client is logged in.
    pub fn kill(&self, id: u64) -> bool {
        let Some(c) = self.map.lock().get(&id).cloned() else {
            return false;
        };
        c.killed.store(true, Ordering::SeqCst);
        c.socket.shutdown(false);
        true
    }
}

/// A client logged in: counted on its listener and put in the book.
pub fn logged_in(shared: &crate::shared::Shared, a: Arrival<'_>) -> Entry {
    let counters = shared.counters.listener(&a.names.listener);
    counters.logins.fetch_add(1, Ordering::Relaxed);
    shared.book.register(a)
}

/// A client's place in the book, for as long as its session lives.
pub struct Entry {
    book: Arc<Book>,
    pub info: Arc<ClientInfo>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.info.socket.clear();
        self.book.map.lock().remove(&self.info.id);
    }
}
