//! Response tracker: pairs each message sent to a server with the responses it causes.
//!
//! The extended protocol lets a client pipeline many messages before a Sync; a server
//! answers them in order, and after an error skips everything up to the next Sync. When
//! Sluice pools connections it must also send messages the client never wrote (a Parse
//! re-preparing a statement on a connection that lacks it, a SET replaying the client's
//! session state) and answer some messages itself (a CloseComplete for a statement it
//! keeps cached). The tracker keeps one entry per message in flight, in order, and tells
//! the caller for each server frame whether it belongs to the client (forward) or to
//! Sluice (drop); answers Sluice gives itself are released exactly when the server would
//! have given them. It also tells when a connection is at rest: no message in flight.

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// The kind of request an entry stands for; it decides which frame completes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Parse,
    Bind,
    Describe,
    Execute,
    Close,
    Sync,
    /// A simple Query: complete at ReadyForQuery.
    Query,
    FunctionCall,
    /// The client's CopyDone or CopyFail: no answer of its own, but it ends copy-in mode.
    CopyEnd,
}

/// Who the responses of an entry are for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Sent on behalf of the client: responses are forwarded.
    Client,
    /// Sent by Sluice: responses are dropped.
    Injected,
    /// Not sent at all: Sluice answers with these bytes when its turn comes.
    Synthetic(Bytes),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    /// Never executed: an earlier message of the same Sync batch failed.
    Skipped,
}

/// A finished entry: the caller's token, its kind and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub token: u64,
    pub kind: Kind,
    pub outcome: Outcome,
}

#[derive(Debug)]
struct Entry {
    kind: Kind,
    origin: Origin,
    token: u64,
    /// An ErrorResponse arrived for this (simple Query / FunctionCall) request.
    errored: bool,
}

/// A frame arrived that no request in flight can explain: the connection's state is
/// unknown and it must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("protocol desync: unexpected message '{}' from server", char::from(*.0))]
pub struct Desync(pub u8);

#[derive(Debug, Default)]
pub struct Tracker {
    /// The requests in flight and those finished: boxed, and the box let go at rest
    /// (every client's session holds a tracker, and one at rest needs neither).
    q: Option<Box<Lists>>,
    /// The server is in copy-in mode and the client has not ended it yet: Syncs the
    /// client sends now are ignored by the server.
    copy_in: bool,
    /// Transaction status of the last ReadyForQuery, for answers Sluice gives itself.
    status: u8,
    /// An extended-protocol request failed and no Sync was in flight yet: the server
    /// ignores everything up to the next Sync, however much more the client sends.
    skipping: bool,
    /// The client has been sent an error for its current Sync batch.
    batch_errored: bool,
    /// The client has sent extended-protocol messages since its last Sync.
    batch_open: bool,
}

/// A tracker's queues.
#[derive(Debug, Default)]
struct Lists {
    queue: VecDeque<Entry>,
    done: Vec<Done>,
}

/// A tracker's emptied queues, box and all, for another tracker to reuse (see
/// [`Tracker::release`]).
#[derive(Debug)]
pub struct Queues(Box<Lists>);

/// What a tracker without its box reads.
static NO_LISTS: Lists = Lists {
    queue: VecDeque::new(),
    done: Vec::new(),
};

/// A tracker's queues, their box made when it has none.
fn qm(q: &mut Option<Box<Lists>>) -> &mut Lists {
    q.get_or_insert_with(Box::default)
}

/// A tracker's queues, to read (a tracker without its box reads empty ones, and
/// gets none made).
fn qr(q: &Option<Box<Lists>>) -> &Lists {
    q.as_deref().unwrap_or(&NO_LISTS)
}

/// Queues longer than this are not worth keeping for reuse.
const KEPT_ROOM: usize = 64;

impl Tracker {
    /// Lets go of the memory of its empty queues (a session at rest keeps none), and
    /// returns it when it is small, for the caller to give to the next tracker that
    /// needs room ([`Tracker::reuse`]): a client at rest between statements then
    /// allocates nothing for its next one.
    pub fn release(&mut self) -> Option<Queues> {
        let q = self.q.as_mut()?;
        if !q.queue.is_empty() || !q.done.is_empty() {
            // One still holds entries: the other's memory goes all the same.
            if q.queue.is_empty() {
                q.queue = VecDeque::new();
            }
            if q.done.is_empty() {
                q.done = Vec::new();
            }
            return None;
        }
        let q = self.q.take()?;
        (q.queue.capacity() <= KEPT_ROOM && q.done.capacity() <= KEPT_ROOM).then_some(Queues(q))
    }

    /// Whether it holds no memory for its queues (one released may [`Tracker::reuse`]).
    pub fn bare(&self) -> bool {
        self.q.is_none()
    }

    /// Takes the queues another tracker released, where it has none.
    pub fn reuse(&mut self, Queues(mut q): Queues) {
        if self.q.is_none() {
            q.queue.clear();
            q.done.clear();
            self.q = Some(q);
        }
    }

    /// Its queues, to read.
    fn qs(&self) -> &Lists {
        qr(&self.q)
    }

    pub fn new() -> Self {
        Tracker {
            status: b'I',
            ..Self::default()
        }
    }

    /// Records the status of a ReadyForQuery the server sent.
    pub fn set_status(&mut self, status: u8) {
        self.status = status;
    }

    /// Records a message just written to the server.
    pub fn push(&mut self, kind: Kind, origin: Origin, token: u64) {
        if !matches!(origin, Origin::Injected) && kind != Kind::CopyEnd {
            self.batch_open = !matches!(kind, Kind::Sync | Kind::Query | Kind::FunctionCall);
        }
        if self.skipping && kind != Kind::Sync {
            // The server ignores it (a simple Query too), and so does its answer.
            if kind != Kind::CopyEnd {
                qm(&mut self.q).done.push(Done {
                    token,
                    kind,
                    outcome: Outcome::Skipped,
                });
            }
            return;
        }
        self.skipping = false;
        match kind {
            Kind::CopyEnd if self.copy_in => self.copy_in = false,
            // Outside copy mode the server ignores CopyDone / CopyFail.
            Kind::CopyEnd if qr(&self.q).queue.is_empty() => {}
            Kind::Sync if self.copy_in => {}
            _ => qm(&mut self.q).queue.push_back(Entry {
                kind,
                origin,
                token,
                errored: false,
            }),
        }
    }

    /// The server entered copy-in mode for the head request: it ignores the Syncs the
    /// client sent after that request up to the end of the copy.
    fn enter_copy_in(&mut self) {
        let mut i = 1;
        while i < qr(&self.q).queue.len() {
            match qr(&self.q).queue[i].kind {
                Kind::Sync => {
                    qm(&mut self.q).queue.remove(i);
                }
                Kind::CopyEnd => {
                    qm(&mut self.q).queue.remove(i);
                    return;
                }
                _ => i += 1,
            }
        }
        self.copy_in = true;
    }

    /// CopyDone / CopyFail markers get no answer: drop them when they reach the head.
    fn drop_markers(&mut self) {
        while qr(&self.q)
            .queue
            .front()
            .is_some_and(|e| e.kind == Kind::CopyEnd)
        {
            qm(&mut self.q).queue.pop_front();
        }
    }

    /// No request in flight, and the server waits for nothing (not for a Sync that
    /// ends an error's skipping).
    pub fn is_idle(&self) -> bool {
        !self.skipping && self.qs().queue.iter().all(|e| e.kind == Kind::CopyEnd)
    }

    /// The token of the request the next server frame belongs to.
    pub fn head_token(&self) -> Option<u64> {
        self.qs().queue.front().map(|e| e.token)
    }

    pub fn in_flight(&self) -> usize {
        self.qs().queue.len()
    }

    /// Appends the answers Sluice gives itself that are now due (those at the head of the
    /// queue) to `out`.
    /// Whether [`Tracker::release_synthetic`] has anything to do (checked per server
    /// frame, before the answer's buffer is touched).
    pub fn has_synthetic(&self) -> bool {
        self.qs()
            .queue
            .front()
            .is_some_and(|e| e.kind == Kind::CopyEnd || matches!(e.origin, Origin::Synthetic(_)))
    }

    pub fn release_synthetic(&mut self, out: &mut BytesMut) {
        self.drop_markers();
        while let Some(Entry {
            origin: Origin::Synthetic(bytes),
            ..
        }) = qr(&self.q).queue.front()
        {
            out.extend_from_slice(bytes);
            // A ReadyForQuery Sluice answers itself carries the status as of now.
            let n = out.len();
            if n >= 6 && out[n - 6..n - 1] == [b'Z', 0, 0, 0, 5] {
                out[n - 1] = self.status;
            }
            if let Some(e) = qm(&mut self.q).queue.pop_front() {
                qm(&mut self.q).done.push(Done {
                    token: e.token,
                    kind: e.kind,
                    outcome: Outcome::Ok,
                });
            }
        }
    }

    /// Accounts for one server frame. Returns whether the frame goes to the client.
    /// Call [`Tracker::release_synthetic`] before and after each call.
    pub fn on_frame(&mut self, tag: u8) -> Result<bool, Desync> {
        self.drop_markers();
        let Some(head) = qr(&self.q).queue.front() else {
            // Asynchronous messages may arrive at any time, and so may a FATAL error
            // (e.g. the server shutting down).
            return match tag {
                b'N' | b'A' | b'S' | b'E' => Ok(true),
                _ => Err(Desync(tag)),
            };
        };
        // An error in something Sluice sent on the client's behalf in the middle of its
        // batch (a re-Parse) is the client's error: the server now skips the rest of the
        // batch, and the client must learn why.
        let injected_batch_error = tag == b'E'
            && matches!(head.origin, Origin::Injected)
            && !matches!(head.kind, Kind::Query | Kind::FunctionCall | Kind::Sync);
        let forward = matches!(head.origin, Origin::Client) || tag == b'A' || injected_batch_error;
        let kind = head.kind;
        if tag == b'E' || tag == b'Z' {
            // An error ends copy mode, and so does the end of the request.
            self.copy_in = false;
        }
        if tag == b'E'
            && let Some(h) = qm(&mut self.q).queue.front_mut()
        {
            h.errored = true;
        }
        match (kind, tag) {
            (_, b'N' | b'A' | b'S') => {}
            (Kind::Query | Kind::Execute, b'G') => self.enter_copy_in(),
            (Kind::Query | Kind::FunctionCall, b'Z') => {
                self.batch_errored = false;
                let failed = qr(&self.q).queue.front().is_some_and(|e| e.errored);
                self.complete(if failed { Outcome::Failed } else { Outcome::Ok })
            }
            (Kind::Query | Kind::FunctionCall, _) => {}
            (Kind::Sync, b'Z') => {
                self.batch_errored = false;
                self.complete(Outcome::Ok)
            }
            (Kind::Sync, b'E') => self.batch_errored = true,
            (Kind::Sync, _) => return Err(Desync(tag)),
            (_, b'E') => {
                self.batch_errored = forward;
                self.complete(Outcome::Failed);
                while let Some(e) = qr(&self.q).queue.front() {
                    if e.kind == Kind::Sync {
                        break;
                    }
                    self.complete(Outcome::Skipped);
                }
                // The client has not sent its Sync yet: what it sends until then is
                // skipped by the server too.
                self.skipping = qr(&self.q).queue.is_empty();
            }
            (Kind::Parse, b'1')
            | (Kind::Bind, b'2')
            | (Kind::Close, b'3')
            | (Kind::Describe, b'T' | b'n')
            | (Kind::Execute, b'C' | b'I' | b's') => self.complete(Outcome::Ok),
            (Kind::Describe, b't') => {}
            (Kind::Execute, b'D' | b'H' | b'W' | b'd' | b'c') => {}
            _ => return Err(Desync(tag)),
        }
        Ok(forward)
    }

    fn complete(&mut self, outcome: Outcome) {
        if let Some(e) = qm(&mut self.q).queue.pop_front() {
            qm(&mut self.q).done.push(Done {
                token: e.token,
                kind: e.kind,
                outcome,
            });
        }
    }

    /// Entries finished since the last call.
    pub fn take_done(&mut self) -> impl Iterator<Item = Done> + '_ {
        self.q.iter_mut().flat_map(|q| q.done.drain(..))
    }

    /// The finished entries, all at once (their memory comes back with
    /// [`Tracker::give_back_done`], so that handling them allocates nothing).
    pub fn swap_done(&mut self) -> Vec<Done> {
        self.q
            .as_mut()
            .map(|q| std::mem::take(&mut q.done))
            .unwrap_or_default()
    }

    /// The list [`Tracker::swap_done`] gave, handled: its memory is reused.
    pub fn give_back_done(&mut self, mut list: Vec<Done>) {
        list.clear();
        if let Some(q) = &mut self.q
            && q.done.is_empty()
        {
            q.done = list;
        }
    }

    pub fn has_done(&self) -> bool {
        !self.qs().done.is_empty()
    }

    /// Forgets everything (the connection is being closed).
    pub fn clear(&mut self) {
        if let Some(q) = &mut self.q {
            q.queue.clear();
            q.done.clear();
        }
        self.copy_in = false;
        self.skipping = false;
    }

    /// The connection was lost: answers every request in flight as the server would
    /// have if it had failed them. The client gets `error` (a whole ErrorResponse) in
    /// place of the first answer of each simple Query, FunctionCall or Sync batch not
    /// yet failed, and a ReadyForQuery for each Query, FunctionCall and Sync, with
    /// `status` (the client's transaction, if any, is gone: 'I', or 'E' while Sluice
    /// keeps it as a failed one); answers Sluice gives itself are
    /// given where they come before the error; Sluice's own requests get nothing.
    /// Returns whether the client's last batch has failed and still lacks its Sync
    /// (what it sends up to that Sync must be dropped, and the Sync answered), or None,
    /// having written nothing, when the server was copying in from the client.
    pub fn fail_all(&mut self, out: &mut BytesMut, error: &[u8], status: u8) -> Option<bool> {
        if self.copy_in {
            return None;
        }
        self.status = status;
        let mut errored = self.batch_errored || self.skipping;
        let queue = self.q.as_mut().map(|q| std::mem::take(&mut q.queue));
        for e in queue.unwrap_or_default() {
            let outcome = match (e.origin, e.kind) {
                (Origin::Injected, _) | (_, Kind::CopyEnd) => continue,
                (Origin::Synthetic(bytes), kind) => {
                    if !errored || matches!(kind, Kind::Sync) {
                        out.extend_from_slice(&bytes);
                        errored |= bytes.first() == Some(&b'E');
                    }
                    let n = out.len();
                    if n >= 6 && out[n - 6..n - 1] == [b'Z', 0, 0, 0, 5] {
                        out[n - 1] = status;
                        errored = false;
                    }
                    Outcome::Ok
                }
                (Origin::Client, kind) => {
                    let outcome = if e.errored {
                        Outcome::Failed
                    } else if errored {
                        Outcome::Skipped
                    } else {
                        out.extend_from_slice(error);
                        Outcome::Failed
                    };
                    errored = true;
                    if matches!(kind, Kind::Query | Kind::FunctionCall | Kind::Sync) {
                        out.extend_from_slice(&[b'Z', 0, 0, 0, 5, status]);
                        errored = false;
                    }
                    outcome
                }
            };
            qm(&mut self.q).done.push(Done {
                token: e.token,
                kind: e.kind,
                outcome,
            });
        }
        if self.batch_open && !errored {
            // Its last batch was answered so far, but has no Sync yet: the Sync must
            // not tell it that the batch succeeded.
            out.extend_from_slice(error);
            errored = true;
        }
        self.skipping = false;
        self.batch_errored = false;
        self.batch_open = false;
        Some(errored)
    }

    /// Whether the client has sent extended-protocol messages since its last Sync
    /// (those of a batch still open).
    pub fn batch_open(&self) -> bool {
        self.batch_open
    }

    /// Whether the head request is one Sluice sent by itself.
    pub fn head_injected(&self) -> bool {
        self.qs()
            .queue
            .front()
            .is_some_and(|e| matches!(e.origin, Origin::Injected))
    }
}

#[cfg(test)]
#[path = "track_tests.rs"]
mod tests;
