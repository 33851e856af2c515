//! Scenarios: what each connection sends. A scenario opens its connections first (set-up
//! is never measured), then [`drive`] starts them all at once on a common clock: they
//! run through the warm-up, count what completes inside the measurement window, and stop
//! sending at its end. Closed loop: a connection sends its next request only when an
//! answer came back (keeping `depth` requests in flight where the protocol pipelines).
//! Open loop (`rate`): requests are due at fixed times, spread evenly over the
//! connections, and a request's latency counts from when it was due, so that time spent
//! waiting behind a slow answer is not hidden (no coordinated omission).

pub mod failover;
pub mod kv;
pub mod orders;
pub mod setup;
pub mod sql;
pub mod tls;

use crate::stats::Stats;
use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// What every scenario is told.
#[derive(Debug, Clone)]
pub struct Plan {
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Keys are drawn uniformly from 1..=keys.
    pub keys: u64,
    /// Seed of connection i's key sequence is seed + i.
    pub seed: u64,
    /// Open loop: requests per second over all connections. None: closed loop.
    pub rate: Option<f64>,
}

/// The common clock of a run.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// When the connections started (warm-up included).
    pub start: Instant,
    /// Answers that arrive from here on are counted...
    pub from: Instant,
    /// ...until here, where connections stop sending.
    pub until: Instant,
}

impl Window {
    /// Whether an answer arriving at `now` is counted.
    pub fn counts(&self, now: Instant) -> bool {
        now >= self.from && now < self.until
    }

    /// Whether a connection may send another request at `now`.
    pub fn open(&self, now: Instant) -> bool {
        now < self.until
    }

    /// The latest a connection waits for an answer: a server that stops answering
    /// ends the connection (an error) instead of hanging the run.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.until + STUCK_AFTER)
    }
}

/// How long after the window an answer may still be awaited.
const STUCK_AFTER: Duration = Duration::from_secs(10);

/// When a connection sends its next request.
pub struct Pacer {
    /// Open loop: the time between one connection's requests.
    interval: Option<Duration>,
    next: Instant,
}

impl Pacer {
    /// Connection `conn`'s schedule: closed loop, or every `connections / rate` seconds,
    /// the connections' schedules spread evenly over one interval.
    pub fn new(plan: &Plan, conn: usize, w: &Window) -> Pacer {
        let interval = plan
            .rate
            .filter(|r| *r > 0.0)
            .map(|r| Duration::from_secs_f64(plan.connections as f64 / r));
        let phase = interval.map_or(Duration::ZERO, |iv| {
            iv.mul_f64(conn as f64 / plan.connections.max(1) as f64)
        });
        Pacer {
            interval,
            next: w.start + phase,
        }
    }

    /// Waits until the next request is due and returns when it was due (what its
    /// latency counts from); closed loop: now.
    pub async fn due(&mut self) -> Instant {
        let Some(iv) = self.interval else {
            return Instant::now();
        };
        let at = self.next;
        self.next += iv;
        if at > Instant::now() {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        }
        at
    }
}

/// A connection's uniform key source.
pub struct Keys {
    rng: SmallRng,
    max: u64,
}

impl Keys {
    pub fn new(plan: &Plan, conn: usize) -> Keys {
        Keys {
            rng: SmallRng::seed_from_u64(plan.seed.wrapping_add(conn as u64)),
            max: plan.keys.max(1),
        }
    }

    pub fn draw(&mut self) -> u64 {
        rand::RngExt::random_range(&mut self.rng, 1..=self.max)
    }
}

/// Connections logging in at the same time while a run opens its connections.
pub const OPENING_AT_ONCE: usize = 100;

/// Opens `plan.connections` connections with `open(i)`, [`OPENING_AT_ONCE`] at a time;
/// the first failure fails the run.
pub async fn open_all<C, F, Fut>(plan: &Plan, open: F) -> Result<Vec<C>>
where
    C: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<C>> + Send + 'static,
{
    // A hundred logins at a time: a thousand at once would overflow the listen queue of
    // servers and proxies with the usual backlog of 128, and measure SYN retries.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(OPENING_AT_ONCE));
    let mut set = JoinSet::new();
    for i in 0..plan.connections {
        let fut = open(i);
        let gate = gate.clone();
        set.spawn(async move {
            let _permit = gate.acquire_owned().await;
            (i, fut.await)
        });
    }
    let mut conns: Vec<Option<C>> = (0..plan.connections).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, res) = joined.context("a connecting task panicked")?;
        let conn = res.with_context(|| format!("connection {i}"))?;
        conns[i] = Some(conn);
    }
    conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| c.with_context(|| format!("connection {i} was not opened")))
        .collect()
}

/// Runs `conn_loop(conn, i, window)` for every opened connection on a common clock
/// starting now, and merges what they measured. A connection loop returns its stats;
/// errors it meets while running are counted in them (the run goes on with the other
/// connections), a panic fails the run.
pub async fn drive<C, F, Fut>(plan: &Plan, conns: Vec<C>, conn_loop: F) -> Result<(Stats, Duration)>
where
    C: Send + 'static,
    F: Fn(C, usize, Window) -> Fut,
    Fut: Future<Output = Stats> + Send + 'static,
{
    if conns.is_empty() {
        bail!("no connections to drive");
    }
    let start = Instant::now();
    let window = Window {
        start,
        from: start + plan.warmup,
        until: start + plan.warmup + plan.duration,
    };
    let mut set = JoinSet::new();
    for (i, c) in conns.into_iter().enumerate() {
        set.spawn(conn_loop(c, i, window));
    }
    let mut total = Stats::new();
    while let Some(joined) = set.join_next().await {
        total.merge(&joined.context("a connection task panicked")?);
    }
    // The window as it was measured: every loop stops at `until` (answers later than
    // that are not counted).
    Ok((total, window.until - window.from))
}
