//! The registry of clients' cancel keys (PostgreSQL): each client's BackendKeyData of
//! Sluice's own, the server connection it is using right now (a [`Slot`]), and the
//! clients Sluice gave a process id of its own. A CancelRequest goes to the connection
//! in the client's slot and to nothing else; see `cancel.rs` for why a connection runs
//! nothing new while a cancel is on its way.

use crate::cancel::ServerKey;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
    /// Its line in the client book: the user it logged in as, and its socket.
    pub info: Arc<crate::session::clients::ClientInfo>,
    terminated: std::sync::atomic::AtomicBool,
    /// A pg_terminate_backend is on its way to the server connection it holds: if
    /// that connection ends now, so does its session (see [`Slot::mark_terminated`]).
    marked: std::sync::atomic::AtomicBool,
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
            c.info.shut_reading();
        }
    }

    /// pg_terminate_backend of a client through the server connection it holds, on its
    /// way: when that connection ends, so does its session (it does not outlive it).
    /// Only a mark, set before the server has run the call (the connection's end may
    /// come before the caller's answer): the session goes on meanwhile, and the mark
    /// goes if the call fails ([`Slot::unmark`]).
    pub fn mark_terminated(&self) {
        if let Some(c) = &self.client {
            c.marked.store(true, Ordering::SeqCst);
        }
    }

    /// The statement that marked it failed: no terminate came of it.
    pub fn unmark(&self) {
        if let Some(c) = &self.client {
            c.marked.store(false, Ordering::SeqCst);
        }
    }

    /// Whether another client terminated this one (its socket is shut for reading).
    pub fn terminated(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.terminated.load(Ordering::SeqCst))
    }

    /// Whether its server connection's end, if it comes, ends its session: it was
    /// terminated, or a terminate is on its way there.
    pub fn ending(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.terminated.load(Ordering::SeqCst) || c.marked.load(Ordering::SeqCst))
    }
}

/// Clients by (process id, secret). Ordered, so that one map also finds a client by
/// its process id alone (a range), for pg_cancel_backend / pg_terminate_backend: a
/// second index by process id cost every client 28 bytes.
#[derive(Default)]
pub struct Registry {
    map: Mutex<BTreeMap<(i32, i32), Arc<Slot>>>,
}

/// Removes the client's key from the registry when the client goes.
pub struct Registration {
    registry: Arc<Registry>,
    pub key: (i32, i32),
    pub slot: Arc<Slot>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.map.lock().remove(&self.key);
    }
}

impl Registry {
    /// Registers a client. `pid` is the process id the client will see (the server's
    /// real one in session mode, or a Sluice number, with `virtual_of` the client's
    /// line in the book); the secret is random and unique.
    pub fn register(
        self: &Arc<Self>,
        pid: i32,
        virtual_of: Option<Arc<crate::session::clients::ClientInfo>>,
    ) -> Registration {
        let client = virtual_of.map(|info| Signalled {
            info,
            terminated: Default::default(),
            marked: Default::default(),
        });
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
        let map = self.map.lock();
        let mut with_pid = map.range((pid, i32::MIN)..=(pid, i32::MAX));
        with_pid.find_map(|(_, s)| s.client.is_some().then(|| s.clone()))
    }
}
