//! One client statement's answer on a shared connection: the connection's task fills
//! it, the client's task takes it, each waking the other.

use super::HIGH_WATER;
use crate::error::Error;
use bytes::BytesMut;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::task::{Context, Poll, Waker};

/// One client statement's answer, filled by the connection's task.
#[derive(Default)]
pub struct Answer {
    st: Mutex<AnswerState>,
    /// Replies to added commands still to drop (read for every unit: no lock).
    hide: AtomicU8,
    prepares: Option<(u128, u64)>,
    /// The server said the prepared statement it ran is stale ([`super::Splitter::stale`]).
    stale: AtomicBool,
}

/// Commands Sluice queued before a client's (closing and preparing a statement the
/// connection lacks): their replies lead the answer and are not the client's.
#[derive(Debug, Default, Clone, Copy)]
pub struct Added {
    /// Leading replies to drop while they are success replies.
    pub replies: u8,
    /// The statement prepared by the last of them, and the number of the Close queued
    /// before that prepare ([`crate::stmt_cache::StmtCache::closing`]): the connection
    /// counts on it once its prepare succeeded (if no later Close is queued), and
    /// forgets it if the prepare fails.
    pub prepares: Option<(u128, u64)>,
}

#[derive(Default)]
struct AnswerState {
    buf: BytesMut,
    /// Set when the answer is complete: Ok(first bytes of its last packet) or the
    /// connection's failure.
    done: Option<Result<Vec<u8>, Error>>,
    waker: Option<Waker>,
    /// The connection's task, waiting for the client to take what is there.
    producer: Option<Waker>,
    /// The client is gone: what arrives is dropped.
    abandoned: bool,
    /// Some of the answer has been taken for the client.
    delivered: bool,
    /// What the statement did, as the splitter counted it (stats/).
    outcome: crate::stats::Outcome,
}

impl Answer {
    pub fn new(added: Added) -> Answer {
        Answer {
            st: Mutex::default(),
            hide: AtomicU8::new(added.replies),
            prepares: added.prepares,
            stale: AtomicBool::new(false),
        }
    }

    /// Whether the server said the prepared statement this answer ran can no longer run
    /// as prepared (it must be prepared afresh).
    pub fn stale(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }

    pub(super) fn set_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// Whether replies to added commands may still lead the answer.
    pub(super) fn hiding(&self) -> bool {
        self.hide.load(Ordering::Relaxed) > 0
    }

    /// The next unit is a success reply to an added command (`ok`: dropped) or not
    /// (the hiding ends). Returns the statement prepared by the added commands (the
    /// last of them) once that is settled: true when it is prepared now, false when
    /// it is not (the prepare failed; the Close before it may have closed it).
    pub(super) fn hidden(&self, ok: bool) -> Option<((u128, u64), bool)> {
        if ok {
            let last = self.hide.fetch_sub(1, Ordering::Relaxed) == 1;
            return self.prepares.filter(|_| last).map(|p| (p, true));
        }
        self.hide.store(0, Ordering::Relaxed);
        self.prepares.map(|p| (p, false))
    }

    /// Moves what has arrived into `out`; Ready(Some(..)) once the answer is complete.
    pub fn poll_take(
        &self,
        cx: &mut Context<'_>,
        out: &mut BytesMut,
    ) -> Poll<Option<Result<Vec<u8>, Error>>> {
        let mut st = self.st.lock();
        let had = !st.buf.is_empty();
        if had {
            st.delivered = true;
            out.extend_from_slice(&st.buf);
            st.buf.clear();
            if let Some(w) = st.producer.take() {
                w.wake();
            }
        }
        if let Some(d) = st.done.take() {
            return Poll::Ready(Some(d));
        }
        if had {
            return Poll::Ready(None);
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Whether any of the answer has been taken for the client.
    pub fn delivered(&self) -> bool {
        self.st.lock().delivered
    }

    /// The client left: drop what arrives from now on.
    pub fn abandon(&self) {
        let mut st = self.st.lock();
        st.abandoned = true;
        st.buf = BytesMut::new();
        if let Some(w) = st.producer.take() {
            w.wake();
        }
    }

    pub(super) fn push(&self, bytes: &[u8]) {
        let mut st = self.st.lock();
        if st.abandoned {
            return;
        }
        st.buf.extend_from_slice(bytes);
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    /// What the statement did (rows, changes, an error), once answered.
    pub fn outcome(&self) -> crate::stats::Outcome {
        self.st.lock().outcome
    }

    pub(super) fn finish_with(&self, r: Result<Vec<u8>, Error>, outcome: crate::stats::Outcome) {
        self.st.lock().outcome = outcome;
        self.finish(r);
    }

    pub(super) fn finish(&self, r: Result<Vec<u8>, Error>) {
        let mut st = self.st.lock();
        st.done = Some(r);
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    /// Whether the client has this much not yet taken; if so, `producer` is woken when
    /// it takes it.
    pub(super) fn full(&self, producer: &Waker) -> bool {
        let mut st = self.st.lock();
        if st.abandoned || st.buf.len() < HIGH_WATER {
            return false;
        }
        st.producer = Some(producer.clone());
        true
    }
}
