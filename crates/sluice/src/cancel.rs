//! Cancel keys: each client gets Sluice's own BackendKeyData, and a CancelRequest
//! carrying it is sent on to the server connection that client is using at that moment,
//! and to nothing else.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Where a client's running query can be cancelled right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerKey {
    pub addr: std::sync::Arc<str>,
    pub pid: i32,
    pub secret: i32,
}

/// A client's statement on a shared connection: cancellable only while it is the one
/// running there.
pub type Gate = (Arc<crate::mux::Mux>, Arc<crate::mux::Answer>);

#[derive(Default)]
pub struct Slot(Mutex<Option<(Arc<ServerKey>, Option<Gate>)>>);

impl Slot {
    pub fn set(&self, key: Option<Arc<ServerKey>>) {
        *self.0.lock() = key.map(|k| (k, None));
    }

    /// Points the key at a shared connection while the client's statement runs there.
    pub fn set_gated(&self, key: Arc<ServerKey>, gate: Gate) {
        *self.0.lock() = Some((key, Some(gate)));
    }

    pub fn get(&self) -> Option<Arc<ServerKey>> {
        let g = self.0.lock();
        let (key, gate) = g.as_ref()?;
        match gate {
            Some((mux, answer)) if !mux.running(answer) => None,
            _ => Some(key.clone()),
        }
    }
}

#[derive(Default)]
pub struct Registry {
    map: Mutex<HashMap<(i32, i32), Arc<Slot>>>,
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
    /// real one in session mode, or a Sluice number); the secret is random and unique.
    pub fn register(self: &Arc<Self>, pid: i32) -> Registration {
        let slot = Arc::new(Slot::default());
        let mut map = self.map.lock();
        let key = loop {
            let k = (pid, rand::random::<i32>());
            if !map.contains_key(&k) {
                break k;
            }
        };
        map.insert(key, slot.clone());
        Registration {
            registry: self.clone(),
            key,
            slot,
        }
    }

    pub fn lookup(&self, pid: i32, secret: i32) -> Option<Arc<ServerKey>> {
        self.map.lock().get(&(pid, secret)).and_then(|s| s.get())
    }
}
