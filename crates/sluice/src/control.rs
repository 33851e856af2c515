//! What the admin console (admin/) asks of the running process and the flow obeys: clusters
//! paused (new transactions and logins wait; those running finish), a shutdown
//! requested, a reload (a hook the server installs), and the addresses bound.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Notify, watch};

/// Re-reads the configuration and applies it: a summary, or why it was refused.
pub type ReloadFn =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync>;

/// Admin console connections at once.
pub const MAX_CONSOLES: usize = 16;

/// An admin console connection's place (see [`Control::console_slot`]).
pub struct ConsoleSlot(Arc<Control>);

impl Drop for ConsoleSlot {
    fn drop(&mut self) {
        self.0.consoles.fetch_sub(1, Ordering::AcqRel);
    }
}

pub struct Control {
    /// Paused clusters (`PAUSE name`), and whether `PAUSE` with no name paused every
    /// cluster.
    paused: Mutex<(HashSet<String>, bool)>,
    /// Anything paused (the per-transaction check is one load); written under the
    /// lock above.
    any: AtomicBool,
    /// Admin console connections open now (see [`Control::console_slot`]).
    consoles: std::sync::atomic::AtomicUsize,
    resumed: Notify,
    /// `SHUTDOWN` (false) or `SHUTDOWN WAIT` (true), once asked.
    shutdown: watch::Sender<Option<bool>>,
    reload: Mutex<Option<ReloadFn>>,
    /// The address each listener and admin endpoint is bound to, by name.
    addrs: RwLock<BTreeMap<String, SocketAddr>>,
    /// The drain is over: HTTP, which answers `/ready` 503 while draining, stops.
    pub stopped: tokio_util::sync::CancellationToken,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            paused: Default::default(),
            any: AtomicBool::new(false),
            consoles: Default::default(),
            resumed: Notify::new(),
            shutdown: watch::channel(None).0,
            reload: Mutex::new(None),
            addrs: Default::default(),
            stopped: Default::default(),
        }
    }
}

impl Control {
    pub fn is_paused(&self, cluster: &str) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let p = self.paused.lock();
        p.1 || p.0.contains(cluster)
    }

    /// Every paused cluster ("*" for all).
    pub fn paused(&self) -> Vec<String> {
        let p = self.paused.lock();
        let mut v: Vec<String> = p.0.iter().cloned().collect();
        if p.1 {
            v.push("*".into());
        }
        v.sort();
        v
    }

    pub fn pause(&self, cluster: Option<&str>) {
        let mut p = self.paused.lock();
        match cluster {
            None => p.1 = true,
            Some(c) => {
                p.0.insert(c.to_owned());
            }
        }
        self.any.store(true, Ordering::SeqCst);
    }

    /// Resumes one cluster, or with `None` everything paused.
    pub fn resume(&self, cluster: Option<&str>) {
        let mut p = self.paused.lock();
        match cluster {
            None => *p = Default::default(),
            Some(c) => {
                p.0.remove(c);
            }
        }
        self.any.store(p.1 || !p.0.is_empty(), Ordering::SeqCst);
        drop(p);
        self.resumed.notify_waiters();
    }

    /// A place for an admin console connection beyond the client cap, at most
    /// [`MAX_CONSOLES`] at once (see `shared::ConsoleSeat`).
    pub fn console_slot(self: &Arc<Self>) -> Option<ConsoleSlot> {
        let n = self.consoles.fetch_add(1, Ordering::AcqRel);
        if n >= MAX_CONSOLES {
            self.consoles.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(ConsoleSlot(self.clone()))
    }

    /// Waits while `cluster` is paused (or until shutdown begins).
    pub async fn hold(&self, cluster: &str, shutdown: &watch::Receiver<bool>) {
        let mut shutdown = shutdown.clone();
        while self.is_paused(cluster) && !*shutdown.borrow() {
            let resumed = self.resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !self.is_paused(cluster) {
                return;
            }
            tokio::select! {
                _ = resumed => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    pub fn request_shutdown(&self, wait: bool) {
        self.shutdown.send_replace(Some(wait));
    }

    /// Waits for `SHUTDOWN`: whether it asked to wait for transactions.
    pub async fn shutdown_requested(&self) -> bool {
        let mut rx = self.shutdown.subscribe();
        loop {
            let asked = *rx.borrow_and_update();
            if let Some(wait) = asked {
                return wait;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    pub fn set_reload(&self, f: ReloadFn) {
        *self.reload.lock() = Some(f);
    }

    /// Reloads the configuration (`RELOAD`, SIGHUP).
    pub async fn reload(&self) -> Result<String, String> {
        let f = self.reload.lock().clone();
        match f {
            Some(f) => f().await,
            None => {
                Err("this instance was started without a configuration file to read again".into())
            }
        }
    }

    pub fn set_addr(&self, name: &str, addr: SocketAddr) {
        self.addrs.write().insert(name.to_owned(), addr);
    }

    pub fn remove_addr(&self, name: &str) {
        self.addrs.write().remove(name);
    }

    pub fn addr(&self, name: &str) -> Option<SocketAddr> {
        self.addrs.read().get(name).copied()
    }
}
