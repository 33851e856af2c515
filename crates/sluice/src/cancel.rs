//! Cancel keys: each client gets Sluice's own BackendKeyData, and a CancelRequest
//! carrying it is sent on to the server connection that client is using at that moment,
//! and to nothing else.
//!
//! A server acts on a cancel request some time after it was sent (it signals the backend
//! process once it has read the request), so a cancel sent while a client's statement
//! ran may land when the statement is over. Directly that is harmless when the client
//! waits for the server to close the cancel connection, as libpq does: the backend,
//! reading its next command, ignores it. Through a pool the connection may meanwhile run
//! another statement, the client's or another client's. So while a cancel is on its way
//! to a server connection, that connection runs nothing new: the pool takes it back only
//! once the server has closed the cancel connection ([`ServerKey::settled`]), the
//! client's next request waits for that too, and a shared connection writes nothing
//! more meanwhile.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where a client's running query can be cancelled right now.
#[derive(Debug, Default)]
pub struct ServerKey {
    pub addr: std::sync::Arc<str>,
    pub pid: i32,
    pub secret: i32,
    /// Cancel requests on their way to this connection.
    cancels: AtomicU32,
    settled: tokio::sync::Notify,
}

impl PartialEq for ServerKey {
    fn eq(&self, other: &Self) -> bool {
        (&self.addr, self.pid, self.secret) == (&other.addr, other.pid, other.secret)
    }
}

impl Eq for ServerKey {}

impl ServerKey {
    pub fn new(addr: Arc<str>, pid: i32, secret: i32) -> ServerKey {
        ServerKey {
            addr,
            pid,
            secret,
            ..ServerKey::default()
        }
    }

    /// A cancel request is on its way to the connection: until the guard is dropped
    /// (the server has closed the cancel connection, or will not get it) the connection
    /// must run nothing new. Taken before the last check that the client still uses
    /// the connection (see [`Slot::get`]).
    pub fn cancelling(self: &Arc<Self>) -> InFlight {
        self.cancels.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// Whether a cancel request is on its way to the connection.
    pub fn unsettled(&self) -> bool {
        self.cancels.load(Ordering::SeqCst) > 0
    }

    /// Waits until no cancel request is on its way to the connection.
    pub async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.unsettled() {
                return;
            }
            notified.await;
        }
    }
}

/// A cancel request on its way (see [`ServerKey::cancelling`]).
pub struct InFlight(Arc<ServerKey>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.cancels.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

/// A client's statement on a shared connection: cancellable only while it is the one
/// running there.
pub type Gate = (Arc<crate::mux::Mux>, Arc<crate::mux::Answer>);

#[derive(Default)]
pub struct Slot {
    key: Mutex<Option<(Arc<ServerKey>, Option<Gate>)>>,
    /// A client known by a process id of Sluice's (transaction mode): others may name
    /// it in pg_cancel_backend / pg_terminate_backend.
    client: Option<Signalled>,
}

/// What others need of a client they signal by its process id.
pub struct Signalled {
    /// The user it logged in as.
    pub user: String,
    socket: crate::stream::SocketHandle,
    terminated: std::sync::atomic::AtomicBool,
}

impl Slot {
    pub fn set(&self, key: Option<Arc<ServerKey>>) {
        *self.key.lock() = key.map(|k| (k, None));
    }

    /// Points the key at a shared connection while the client's statement runs there.
    pub fn set_gated(&self, key: Arc<ServerKey>, gate: Gate) {
        *self.key.lock() = Some((key, Some(gate)));
    }

    pub fn get(&self) -> Option<Arc<ServerKey>> {
        let g = self.key.lock();
        let (key, gate) = g.as_ref()?;
        match gate {
            Some((mux, answer)) if !mux.running(answer) => None,
            _ => Some(key.clone()),
        }
    }

    pub fn client(&self) -> Option<&Signalled> {
        self.client.as_ref()
    }

    /// pg_terminate_backend of a client that holds no server connection: its session
    /// ends (it sees its socket go for reading, and says why: see [`Slot::terminated`]).
    pub fn terminate(&self) {
        if let Some(c) = &self.client {
            c.terminated.store(true, Ordering::SeqCst);
            c.socket.shutdown(false);
        }
    }

    /// Whether another client terminated this one.
    pub fn terminated(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.terminated.load(Ordering::SeqCst))
    }
}

#[derive(Default)]
pub struct Registry {
    map: Mutex<HashMap<(i32, i32), Arc<Slot>>>,
    /// Clients known by a process id of Sluice's, by that id.
    by_pid: Mutex<HashMap<i32, Arc<Slot>>>,
}

/// Removes the client's key from the registry when the client goes.
pub struct Registration {
    registry: Arc<Registry>,
    pub key: (i32, i32),
    pub slot: Arc<Slot>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(c) = &self.slot.client {
            c.socket.clear();
            self.registry.by_pid.lock().remove(&self.key.0);
        }
        self.registry.map.lock().remove(&self.key);
    }
}

impl Registry {
    /// Registers a client. `pid` is the process id the client will see (the server's
    /// real one in session mode, or a Sluice number, with `virtual_of` the client's
    /// user and socket); the secret is random and unique.
    pub fn register(
        self: &Arc<Self>,
        pid: i32,
        virtual_of: Option<(String, &tokio::net::TcpStream)>,
    ) -> Registration {
        let client = virtual_of.map(|(user, tcp)| Signalled {
            user,
            socket: crate::stream::SocketHandle::new(tcp),
            terminated: Default::default(),
        });
        let virtual_pid = client.is_some();
        let slot = Arc::new(Slot {
            key: Mutex::new(None),
            client,
        });
        let mut map = self.map.lock();
        let key = loop {
            let k = (pid, rand::random::<i32>());
            if !map.contains_key(&k) {
                break k;
            }
        };
        map.insert(key, slot.clone());
        drop(map);
        if virtual_pid {
            self.by_pid.lock().insert(pid, slot.clone());
        }
        Registration {
            registry: self.clone(),
            key,
            slot,
        }
    }

    pub fn lookup(&self, pid: i32, secret: i32) -> Option<Arc<ServerKey>> {
        self.map.lock().get(&(pid, secret)).and_then(|s| s.get())
    }

    /// The client known by Sluice's process id `pid`, if there is one.
    pub fn by_pid(&self, pid: i32) -> Option<Arc<Slot>> {
        self.by_pid.lock().get(&pid).cloned()
    }
}
