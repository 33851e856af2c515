//! The pool's queue, with connections that are plain values: first come, first served;
//! nobody arriving later takes a connection a waiter is owed; a waiter that gives up
//! leaves nothing behind; a freed slot lets the head of the queue open a connection.

use super::*;
use crate::error::Kind;
use std::sync::atomic::AtomicUsize;

struct Fake {
    stamps: Stamps,
    id: usize,
}

impl PoolConn for Fake {
    type Opener = AtomicUsize;
    type Welcome = ();

    fn open(op: &AtomicUsize) -> impl Future<Output = Result<Self, LoginError>> + Send {
        let id = op.fetch_add(1, Ordering::Relaxed);
        async move {
            Ok(Fake {
                stamps: Stamps::now(),
                id,
            })
        }
    }
    fn stamps(&self) -> Stamps {
        self.stamps
    }
    fn stamps_mut(&mut self) -> &mut Stamps {
        &mut self.stamps
    }
    fn is_idle(&self) -> bool {
        true
    }
    fn still_open(&mut self) -> bool {
        true
    }
    async fn reset(&mut self, _q: &str) -> crate::error::Result<()> {
        Ok(())
    }
    fn close(self) {}
}

fn pool(size: usize, wait: Duration) -> Arc<Pool<Fake>> {
    let p = Pool::new(
        "t".into(),
        PoolKey {
            policy: "t".into(),
            server: "s".into(),
            database: "d".into(),
            user: "u".into(),
            extra: Vec::new(),
        },
        Settings {
            size,
            min_idle: 0,
            wait_timeout: wait,
            idle_timeout: Duration::ZERO,
            lifetime: Duration::ZERO,
            statement_cache: 0,
            reset_query: String::new(),
            shared: 0,
            session_timeouts: Default::default(),
            schema_epoch: Default::default(),
            sized_for: None,
        },
    );
    p.set_opener(Arc::new(AtomicUsize::new(0)));
    p
}

/// Lets spawned tasks run until `n` clients wait.
async fn until_waiting(p: &Pool<Fake>, n: usize) {
    for _ in 0..1000 {
        if p.waiting.load(Ordering::Relaxed) == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{} waiting, not {n}", p.waiting.load(Ordering::Relaxed));
}

/// A client queued for a connection (the id of the connection it gets).
async fn queue_one(p: &Arc<Pool<Fake>>) -> tokio::task::JoinHandle<Result<usize, LoginError>> {
    let pc = p.clone();
    let waiter = tokio::spawn(async move { pc.lease().await.map(|l| l.conn.id) });
    until_waiting(p, 1).await;
    waiter
}

#[tokio::test(flavor = "current_thread")]
async fn waiters_are_served_in_order_and_nobody_cuts_in() {
    let p = pool(1, Duration::from_secs(5));
    let held = p.lease().await.expect("first lease");
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (pc, order) = (p.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let l = pc.lease().await.expect("lease");
            order.lock().push(i);
            tokio::task::yield_now().await;
            l.put_back();
        }));
        until_waiting(&p, i + 1).await;
    }
    held.put_back();
    // The connection went to the first waiter, not to the idle list.
    assert!(p.try_lease_idle().is_none());
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*order.lock(), [0, 1, 2]);
    assert_eq!(p.counts(), (1, 1));
}

#[tokio::test(flavor = "current_thread")]
async fn a_waiter_that_gives_up_leaves_the_queue_and_its_grant() {
    let p = pool(1, Duration::from_secs(5));
    let held = p.lease().await.expect("first lease");
    let waiter = queue_one(&p).await;
    // The connection is handed over, then the waiter goes away before it runs.
    held.put_back();
    waiter.abort();
    assert!(waiter.await.is_err(), "aborted");
    assert_eq!(p.waiting.load(Ordering::Relaxed), 0);
    let again = p.try_lease_idle().expect("the grant came back to the pool");
    assert_eq!(again.conn.id, 0);
    assert_eq!(p.counts(), (1, 0));
}

#[tokio::test(flavor = "current_thread")]
async fn a_timed_out_waiter_errs_and_the_next_is_served() {
    let p = pool(1, Duration::from_millis(20));
    let held = p.lease().await.expect("first lease");
    match p.lease().await {
        Err(LoginError::Proxy(e)) => assert!(matches!(e.kind, Kind::PoolTimeout), "{e}"),
        _ => panic!("expected a pool timeout"),
    }
    held.put_back();
    let l = p.lease().await.expect("served after the timeout");
    assert_eq!(l.conn.id, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_closed_connection_lets_the_first_waiter_open_one() {
    let p = pool(1, Duration::from_secs(5));
    let held = p.lease().await.expect("first lease");
    let waiter = queue_one(&p).await;
    held.discard();
    let Ok(id) = waiter.await.expect("task") else {
        panic!("the waiter got no connection");
    };
    assert_eq!(id, 1, "a new connection");
    assert_eq!(p.counts(), (0, 0), "the waiter's lease was dropped: closed");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn waits_over_100_ms_are_counted() {
    let p = pool(1, Duration::from_secs(5));
    let held = p.lease().await.expect("first lease");
    let waiter = queue_one(&p).await;
    tokio::time::advance(Duration::from_millis(50)).await;
    held.put_back();
    waiter.await.unwrap().unwrap();
    assert_eq!(p.counters().3, 0, "a short wait");
    let held = p.lease().await.expect("lease");
    let waiter = queue_one(&p).await;
    tokio::time::advance(Duration::from_millis(150)).await;
    held.put_back();
    waiter.await.unwrap().unwrap();
    assert_eq!(p.counters().3, 1, "a wait over 100 ms");
}
