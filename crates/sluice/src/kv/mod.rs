//! The key-value path: HandlerSocket requests run as SQL on a backend server, many
//! clients' requests grouped together. It sits below the HandlerSocket frontend
//! (`frontend/hs`) and beside the session/pool path of the SQL protocols: each
//! HandlerSocket listener has one [`Kv`], which keeps the tables it has read from the
//! server's catalog and a queue of batches. A few workers, each with its own server
//! connection, take everything queued whenever they are free (no timer: a lone request
//! waits for nothing), so while one batch runs the next one gathers. The protocol of the
//! server is a hook ([`KvBackend`]: connect, run statements, describe a table, and the
//! SQL [`sql::Dialect`]); everything else here is written once.

pub mod batch;
mod modify;
pub mod request;
pub mod rows;
pub mod sql;
pub mod table;

use crate::error::Error;
use request::Req;
pub use rows::Row;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use table::{ColKind, Table};
use tokio::sync::{mpsc, oneshot};

/// What one statement of a round gave.
#[derive(Debug)]
pub enum Outcome {
    Rows(Vec<Row>),
    Done {
        affected: u64,
        insert_id: u64,
    },
    /// The statement failed; `message` is the error as the reference would word it
    /// (an engine error number where there is one).
    Failed {
        code: u32,
        message: String,
    },
}

/// What a round may hold of rows, in bytes (a find with a huge limit must not take the
/// proxy's memory): each statement may hold `cap` bytes of rows, the whole round four
/// times that. Past either, the statement's rows are read and dropped, and it fails with
/// [`TOO_LARGE`] (its neighbours' small answers still stand).
pub struct RowBudget {
    cap: usize,
    statement: usize,
    round: usize,
}

/// The message of a statement whose rows went past their budget.
pub const TOO_LARGE: &str = "toolarge";

impl RowBudget {
    pub fn new(cap: usize) -> RowBudget {
        RowBudget {
            cap,
            statement: cap,
            round: cap.saturating_mul(4),
        }
    }

    /// A new statement's rows begin.
    pub fn next_statement(&mut self) {
        self.statement = self.cap;
    }

    /// Takes a row of `bytes`; false when it no longer fits.
    pub fn take(&mut self, bytes: usize) -> bool {
        match (
            self.statement.checked_sub(bytes),
            self.round.checked_sub(bytes),
        ) {
            (Some(s), Some(r)) => {
                (self.statement, self.round) = (s, r);
                true
            }
            _ => false,
        }
    }
}

/// One statement of a round.
pub struct Piece<'a> {
    pub sql: &'a [u8],
    /// The text of the statement's one parameter, `$1` (see [`sql::Dialect::key_in`]).
    pub param: Option<&'a [u8]>,
}

impl<'a> Piece<'a> {
    pub fn text(sql: &'a [u8]) -> Piece<'a> {
        Piece { sql, param: None }
    }
}

/// The statements of a round as one text, separated by `;` (for a round whose
/// statements have no parameter).
pub fn joined(stmts: &[Piece<'_>]) -> Vec<u8> {
    let mut text = Vec::with_capacity(stmts.iter().map(|s| s.sql.len() + 1).sum());
    for (i, s) in stmts.iter().enumerate() {
        if i > 0 {
            text.push(b';');
        }
        text.extend_from_slice(s.sql);
    }
    text
}

/// A server connection of the key-value path.
pub trait KvConn: Send + 'static {
    /// Runs `stmts` as one round (one transaction unless they begin one themselves); one
    /// outcome per statement run. The server stops at the first failing statement, so
    /// fewer outcomes may come back. Err: the connection is no longer usable.
    fn run(
        &mut self,
        stmts: &[Piece<'_>],
    ) -> impl Future<Output = Result<Vec<Outcome>, Error>> + Send;
}

/// A server protocol's part of the key-value path.
pub trait KvBackend: Send + Sync + 'static {
    type Conn: KvConn;
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, Error>> + Send;
    /// A table's columns and indexes; None when there is no such table.
    fn describe(
        &self,
        conn: &mut Self::Conn,
        db: &str,
        table: &str,
    ) -> impl Future<Output = Result<Option<Table>, Error>> + Send;
    fn dialect(&self) -> &dyn sql::Dialect;
}

/// Requests waiting for a worker.
enum Job {
    Describe {
        db: String,
        table: String,
        reply: oneshot::Sender<Result<Option<Table>, Error>>,
    },
    Batch {
        reqs: Vec<Req>,
        reply: oneshot::Sender<Vec<Vec<u8>>>,
    },
}

/// How long a table the catalog did not have is taken as missing.
const MISSING_FOR: std::time::Duration = std::time::Duration::from_secs(1);
/// Most missing tables remembered at once.
const MAX_MISSING: usize = 4096;

/// Requests at which a batch stops taking queued jobs (the rest wait for the next; a
/// job is one client read, so a batch may hold a little more). Kept well below what is
/// in flight under load, so that requests wait in the queue while the server works and
/// a connection coming back finds its next batch ready: with 1,024 on 2 connections and
/// 2,048 lookups in flight, all of them sat in the server at once and the cores idled
/// 16 % between batches (256 on 4 connections: 5 %, and 15-20 % more lookups/s).
const MAX_BATCH: usize = 256;

/// What an executor has done, for tests and statistics.
#[derive(Debug, Default)]
pub struct KvStats {
    /// Batches run on a server connection.
    pub batches: AtomicU64,
    /// Requests run in those batches.
    pub requests: AtomicU64,
    /// Requests answered from a grouped lookup (several keys in one statement).
    pub grouped: AtomicU64,
    /// Tables read from the server's catalog (found or not).
    pub catalog_reads: AtomicU64,
}

/// One HandlerSocket listener's executor.
pub struct Kv {
    pub stats: Arc<KvStats>,
    jobs: mpsc::UnboundedSender<Job>,
    tables: parking_lot::Mutex<HashMap<(String, String), Arc<Table>>>,
    /// Tables the catalog did not have, and when it said so: asked again only after
    /// [`MISSING_FOR`], so a client opening missing tables in a loop cannot keep the
    /// workers busy reading the catalog.
    missing: parking_lot::Mutex<HashMap<(String, String), std::time::Instant>>,
}

impl Kv {
    /// Starts `workers` workers on `backend`.
    pub fn start<B: KvBackend>(backend: B, workers: usize) -> Arc<Kv> {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let backend = Arc::new(backend);
        let stats = Arc::new(KvStats::default());
        for _ in 0..workers.max(1) {
            let (backend, rx, stats) = (backend.clone(), rx.clone(), stats.clone());
            // A worker that panics is started again (its batch's clients see their
            // answers' senders dropped and answer `server_gone`).
            tokio::spawn(async move {
                loop {
                    let run = tokio::spawn(work(backend.clone(), rx.clone(), stats.clone()));
                    match run.await {
                        Err(e) if e.is_panic() => {
                            tracing::error!("a key-value worker panicked; starting it again");
                        }
                        _ => return,
                    }
                }
            });
        }
        Arc::new(Kv {
            stats,
            jobs: tx,
            tables: Default::default(),
            missing: Default::default(),
        })
    }

    /// A table, from the cache or the server's catalog. Ok(None): no such table.
    pub async fn table(&self, db: &str, table: &str) -> Result<Option<Arc<Table>>, Error> {
        let key = (db.to_string(), table.to_string());
        if let Some(t) = self.tables.lock().get(&key) {
            return Ok(Some(t.clone()));
        }
        {
            let mut missing = self.missing.lock();
            match missing.get(&key) {
                Some(at) if at.elapsed() < MISSING_FOR => return Ok(None),
                Some(_) => {
                    missing.remove(&key);
                }
                None => {}
            }
        }
        self.stats.catalog_reads.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        let job = Job::Describe {
            db: key.0.clone(),
            table: key.1.clone(),
            reply,
        };
        self.jobs.send(job).map_err(|_| gone())?;
        let Some(t) = rx.await.map_err(|_| gone())?? else {
            let mut missing = self.missing.lock();
            if missing.len() >= MAX_MISSING {
                missing.retain(|_, at| at.elapsed() < MISSING_FOR);
            }
            if missing.len() < MAX_MISSING {
                missing.insert(key, std::time::Instant::now());
            }
            return Ok(None);
        };
        // Clients that opened the table at the same moment share one entry, so that
        // their lookups group (batches compare tables by identity).
        let t = self
            .tables
            .lock()
            .entry(key)
            .or_insert_with(|| Arc::new(t))
            .clone();
        Ok(Some(t))
    }

    /// Runs requests (in order, possibly with other clients' requests): one answer
    /// line each.
    pub async fn run(&self, reqs: Vec<Req>) -> Vec<Vec<u8>> {
        let n = reqs.len();
        let (reply, rx) = oneshot::channel();
        if self.jobs.send(Job::Batch { reqs, reply }).is_ok()
            && let Ok(answers) = rx.await
        {
            return answers;
        }
        failed_answers(n, "server_gone")
    }
}

fn gone() -> Error {
    Error::server_gone("the key-value executor has stopped")
}

fn failed_answers(n: usize, message: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            let mut a = Vec::new();
            rows::error_answer(&mut a, 1, message);
            a
        })
        .collect()
}

/// A worker: waits for jobs, takes everything queued, runs it on its connection.
async fn work<B: KvBackend>(
    backend: Arc<B>,
    queue: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
    stats: Arc<KvStats>,
) {
    let mut conn: Option<B::Conn> = None;
    loop {
        let mut jobs = Vec::new();
        {
            let mut rx = queue.lock().await;
            let Some(first) = rx.recv().await else { return };
            let size = |j: &Job| match j {
                Job::Batch { reqs, .. } => reqs.len(),
                Job::Describe { .. } => 0,
            };
            let mut n = size(&first);
            jobs.push(first);
            while n < MAX_BATCH {
                match rx.try_recv() {
                    Ok(j) => {
                        n += size(&j);
                        jobs.push(j);
                    }
                    Err(_) => break,
                }
            }
        }
        let mut batch: Vec<Req> = Vec::new();
        let mut replies = Vec::new();
        for job in jobs {
            match job {
                Job::Describe { db, table, reply } => {
                    let r = match connection(&*backend, &mut conn).await {
                        Ok(c) => backend.describe(c, &db, &table).await,
                        Err(e) => Err(e),
                    };
                    if r.is_err() {
                        conn = None;
                    }
                    let _ = reply.send(r);
                }
                Job::Batch { reqs, reply } => {
                    replies.push((reqs.len(), reply));
                    batch.extend(reqs);
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        let answers = match connection(&*backend, &mut conn).await {
            Ok(c) => {
                stats.batches.fetch_add(1, Ordering::Relaxed);
                stats
                    .requests
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                batch::run(c, backend.dialect(), &batch, &stats).await
            }
            Err(e) => Err(e),
        };
        let mut answers = answers.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "key-value batch failed");
            conn = None;
            failed_answers(batch.len(), "server_gone")
        });
        for (n, reply) in replies.into_iter().rev() {
            let mine = answers.split_off(answers.len() - n);
            let _ = reply.send(mine);
        }
    }
}

async fn connection<'c, B: KvBackend>(
    backend: &B,
    conn: &'c mut Option<B::Conn>,
) -> Result<&'c mut B::Conn, Error> {
    if conn.is_none() {
        *conn = Some(backend.connect().await?);
    }
    conn.as_mut().ok_or_else(gone)
}

/// A clean integer (optional sign, digits) clipped to an integer column's range; None
/// for anything else.
pub fn canonical_int(kind: ColKind, v: &[u8]) -> Option<i128> {
    let ColKind::Int { min, max } = kind else {
        return None;
    };
    let (neg, digits) = match v.first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits_value(digits);
    Some(if neg { -n } else { n }.clamp(min, max))
}

/// The value of decimal digits, saturating well past the 64-bit range.
fn digits_value(digits: &[u8]) -> i128 {
    digits
        .iter()
        .fold(0i128, |n, d| (n * 10 + i128::from(d - b'0')).min(1 << 70))
}

/// A number as a number column stores a string: its leading integer, rounded by the
/// first decimal (`4.6` is 5, `12abc` is 12, `abc` is 0), clipped to the column's range
/// (0 for a column that is not an integer).
pub fn lenient_int(kind: ColKind, v: &[u8]) -> i128 {
    let ColKind::Int { min, max } = kind else {
        return 0;
    };
    let s = v.trim_ascii_start();
    let (neg, rest) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut n = digits_value(&rest[..len]);
    if rest.get(len) == Some(&b'.') && rest.get(len + 1).is_some_and(|d| (b'5'..=b'9').contains(d))
    {
        n += 1;
    }
    if neg { -n } else { n }.clamp(min, max)
}

/// Appends an integer in decimal.
pub fn push_int(out: &mut Vec<u8>, n: i128) {
    let mut buf = [0u8; 40];
    let mut i = buf.len();
    let neg = n < 0;
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    out.extend_from_slice(&buf[i..]);
}

/// An integer's decimal text as a server sends it, read back; None for anything else.
pub fn parse_int(v: &[u8]) -> Option<i128> {
    let (neg, digits) = match v.first() {
        Some(b'-') => (true, &v[1..]),
        _ => (false, v),
    };
    (!digits.is_empty() && digits.len() < 40 && digits.iter().all(u8::is_ascii_digit))
        .then(|| digits_value(digits))
        .map(|n| if neg { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ints_are_clipped() {
        let tiny = ColKind::Int {
            min: -128,
            max: 127,
        };
        assert_eq!(canonical_int(tiny, b"300"), Some(127));
        assert_eq!(canonical_int(tiny, b"-0005"), Some(-5));
        assert_eq!(canonical_int(tiny, b"+7"), Some(7));
        assert_eq!(canonical_int(tiny, b"7a"), None);
        assert_eq!(canonical_int(tiny, b""), None);
        assert_eq!(canonical_int(ColKind::Text, b"1"), None);
        assert_eq!(lenient_int(tiny, b"4.6"), 5);
        assert_eq!(lenient_int(tiny, b" 12abc"), 12);
        assert_eq!(lenient_int(tiny, b"abc"), 0);
        assert_eq!(lenient_int(tiny, b"-4.5"), -5);
        let mut out = Vec::new();
        push_int(&mut out, -170141183460469231731687303715884105728);
        push_int(&mut out, 0);
        assert_eq!(out, b"-1701411834604692317316873037158841057280");
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"1.5"), None);
        let big = ColKind::Int {
            min: 0,
            max: u64::MAX.into(),
        };
        assert_eq!(
            canonical_int(big, b"99999999999999999999999"),
            Some(u64::MAX.into())
        );
    }
}
