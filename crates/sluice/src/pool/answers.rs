//! A pool's recent answers to statements that only read server settings (what MySQL
//! drivers ask as they connect: `SELECT @@max_allowed_packet,@@wait_timeout`, `select
//! @@version_comment limit 1`; see `sluice_sql::reads_only_settings`). A new session of
//! the pool gets the same answer from any of its server connections, so a client that
//! holds none yet (session mode with `assign_server = "first_statement"`) is answered
//! from here instead of taking one. Answers are kept a few seconds, so that a changed
//! global setting shows soon, and only a few per pool; the bytes are the protocol's
//! own, as the server sent them.

use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long an answer is given again.
pub const KEEP: Duration = Duration::from_secs(5);
/// Answers a pool keeps (drivers send one or two texts).
const MAX_ANSWERS: usize = 8;
/// The longest answer kept, in bytes.
pub const MAX_ANSWER: usize = 16 * 1024;

struct Kept {
    text: Box<[u8]>,
    /// What else shapes the answer (the client's capabilities, say).
    shape: u64,
    at: Instant,
    answer: Bytes,
}

#[derive(Default)]
pub struct Answers(Mutex<Vec<Kept>>, AtomicU64);

impl Answers {
    /// The answer to `text` for clients of `shape`, if one came in the last [`KEEP`].
    pub fn get(&self, text: &[u8], shape: u64) -> Option<Bytes> {
        let now = Instant::now();
        let kept = self.0.lock();
        let answer = kept
            .iter()
            .find(|k| k.shape == shape && *k.text == *text)
            .filter(|k| now.saturating_duration_since(k.at) < KEEP)
            .map(|k| k.answer.clone());
        if answer.is_some() {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }

    /// Statements answered from here so far.
    pub fn given(&self) -> u64 {
        self.1.load(Ordering::Relaxed)
    }

    /// Keeps the server's answer to `text` for clients of `shape`.
    pub fn put(&self, text: Box<[u8]>, shape: u64, answer: Bytes) {
        if answer.len() > MAX_ANSWER {
            return;
        }
        let now = Instant::now();
        let mut kept = self.0.lock();
        kept.retain(|k| {
            !(k.shape == shape && k.text == text) && now.saturating_duration_since(k.at) < KEEP
        });
        if kept.len() >= MAX_ANSWERS {
            kept.remove(0);
        }
        kept.push(Kept {
            text,
            shape,
            at: now,
            answer,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_kept_by_text_and_shape_and_bounded() {
        let a = Answers::default();
        a.put(b"select @@version"[..].into(), 1, Bytes::from_static(b"v1"));
        assert_eq!(a.get(b"select @@version", 1).as_deref(), Some(&b"v1"[..]));
        assert_eq!(a.get(b"select @@version", 2), None);
        assert_eq!(a.given(), 1);
        assert_eq!(a.get(b"select @@version ", 1), None);
        a.put(b"select @@version"[..].into(), 1, Bytes::from_static(b"v2"));
        assert_eq!(a.get(b"select @@version", 1).as_deref(), Some(&b"v2"[..]));
        for i in 0..20u64 {
            a.put(b"x"[..].into(), i, Bytes::from_static(b"x"));
        }
        assert_eq!(a.0.lock().len(), MAX_ANSWERS);
        a.put(b"big"[..].into(), 1, Bytes::from(vec![0; MAX_ANSWER + 1]));
        assert_eq!(a.get(b"big", 1), None);
    }
}
