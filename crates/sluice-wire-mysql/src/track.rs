//! Response tracker: tells where the answer to each command ends in a server
//! connection's packet stream, so a proxy can forward server packets untouched and
//! still know when the connection is at rest and in which transaction state.
//!
//! The backend records every command it writes with [`Tracker::expect`] (several may be
//! in flight: answers come back in order) and passes each logical server packet to
//! [`Tracker::on_packet`]. Only the first [`HEAD_LEN`] bytes and the length of a packet
//! are needed, so a row of any size can stream through in pieces. The tracker knows
//! the shape of every answer: OK / ERR, text and binary result sets (with or without
//! `CLIENT_DEPRECATE_EOF`, with optional metadata), chains of results joined by
//! `SERVER_MORE_RESULTS_EXISTS`, prepared-statement metadata, cursors, field lists,
//! LOAD DATA LOCAL INFILE and the authentication exchange of COM_CHANGE_USER.

use crate::codec::Reader;
use crate::consts::*;
use crate::resp::{
    EOF, ERR, EofPacket, ErrPacket, LOCAL_INFILE, OK, PrepareOk, column_count, is_rows_end,
};
use std::collections::VecDeque;

/// How many leading bytes of a packet [`Tracker::on_packet`] needs (or the whole packet
/// when it is shorter).
pub const HEAD_LEN: usize = 64;

/// What a server packet means for the command at the head of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Part of the answer; more follows.
    More,
    /// The answer is complete. `status` is the server status after it (an ERR carries
    /// none: the last known status is repeated).
    Done { cmd: u8, ok: bool, status: u16 },
    /// LOAD DATA LOCAL INFILE: the server asks the client for a file. The client sends
    /// its contents as packets ending with an empty one; then the server answers OK or
    /// ERR, which the tracker expects next.
    LocalInfile,
    /// COM_CHANGE_USER's authentication goes on (AuthSwitchRequest or AuthMoreData):
    /// relay it to the client, whose next packet continues the exchange.
    Auth,
}

/// A packet that no command in flight can explain: the connection's state is unknown
/// and it must be closed. An ERR arriving while nothing is in flight (a server closing
/// the connection) is reported this way too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "protocol desync: unexpected packet (first byte {first:?}, {len} bytes) for command {cmd:?}"
)]
pub struct Desync {
    pub cmd: Option<u8>,
    pub first: Option<u8>,
    pub len: usize,
}

/// The fixed fields of the last OK packet seen (including the 0xFE OK that ends a
/// result set under `CLIENT_DEPRECATE_EOF`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OkSummary {
    pub affected_rows: u64,
    pub last_insert_id: u64,
    pub status: u16,
    pub warnings: u16,
}

impl OkSummary {
    fn parse(head: &[u8]) -> Option<Self> {
        let mut r = Reader::new(head);
        r.skip(1)?;
        Some(OkSummary {
            affected_rows: r.lenenc()?,
            last_insert_id: r.lenenc()?,
            status: r.u16()?,
            warnings: r.u16()?,
        })
    }

    /// The server says the session state changed (the OK's session-state information,
    /// which [`crate::resp::OkPacket`] reads, lists how).
    pub fn session_state_changed(&self) -> bool {
        self.status & SERVER_SESSION_STATE_CHANGED != 0
    }
}

/// What comes after a run of definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Rows,
    /// A prepared statement's column definitions (after its parameters).
    PrepColumns(u64),
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The start of a result: OK, ERR, a column count or a LOCAL INFILE request.
    Result,
    /// Column (or parameter) definitions still to come.
    Defs(u64, Then),
    /// The EOF after definitions (without `CLIENT_DEPRECATE_EOF`).
    DefsEof(Then),
    Rows,
    /// The server's OK / ERR after the client sent a local file.
    Infile,
    Prepare,
    FieldList,
    Statistics,
    /// OK, ERR or EOF.
    Simple,
    ChangeUser,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    cmd: u8,
    state: State,
}

/// Follows the answers of one server connection. See the module documentation.
#[derive(Debug, Clone)]
pub struct Tracker {
    caps: u64,
    /// The commands in flight: boxed, and the box let go at rest (every client's
    /// session holds a tracker, and one at rest needs no queue).
    // (A box round the deque: one word here, where the deque is four.)
    #[allow(clippy::box_collection)]
    queue: Option<Box<VecDeque<Pending>>>,
    status: u16,
    /// The last OK packet's fields, when `has_ok` (not an `Option`: the flag fits
    /// where the tracker has room, the `Option`'s tag would not).
    last_ok: OkSummary,
    has_ok: bool,
    last_prepare: Option<PrepareOk>,
    /// Rows of result sets since [`Tracker::take_rows`] was last called.
    rows: u64,
}

/// A tracker's emptied queue, for another tracker to reuse (see [`Tracker::release`]).
#[derive(Debug, Default)]
#[allow(clippy::box_collection)]
pub struct Queue(Box<VecDeque<Pending>>);

impl Tracker {
    /// Lets go of the memory of its empty queue (a session at rest keeps none), and
    /// returns it when it is small, for the caller to give to the next tracker that
    /// needs room ([`Tracker::reuse`]): a client at rest between statements then
    /// allocates nothing for its next one.
    pub fn release(&mut self) -> Option<Queue> {
        if !self.is_idle() {
            return None;
        }
        let q = self.queue.take()?;
        (q.capacity() <= 64).then_some(Queue(q))
    }

    /// Whether it holds no memory for its queue (one released may [`Tracker::reuse`]).
    pub fn bare(&self) -> bool {
        self.queue.is_none()
    }

    /// Takes the memory of a queue another tracker released, where it has none.
    pub fn reuse(&mut self, mut q: Queue) {
        if self.queue.is_none() {
            q.0.clear();
            self.queue = Some(q.0);
        }
    }

    /// `caps`: the capabilities negotiated on the connection (client's ∩ server's).
    pub fn new(caps: u64) -> Self {
        Tracker {
            caps,
            queue: None,
            status: 0,
            last_ok: OkSummary::default(),
            has_ok: false,
            last_prepare: None,
            rows: 0,
        }
    }

    /// The capabilities it was made with.
    pub fn caps(&self) -> u64 {
        self.caps
    }

    /// Rows the server sent in result sets since this was last called.
    pub fn take_rows(&mut self) -> u64 {
        std::mem::take(&mut self.rows)
    }

    /// Sets the known server status, e.g. from the OK that ended the login.
    pub fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    /// Records a command just written to the server. Returns whether the server will
    /// answer it: COM_QUIT, COM_STMT_CLOSE and COM_STMT_SEND_LONG_DATA get no answer
    /// and are not queued. Replication commands (COM_BINLOG_DUMP..) are not supported:
    /// their event streams end in a desync.
    pub fn expect(&mut self, cmd: u8) -> bool {
        let state = match cmd {
            COM_QUIT | COM_STMT_CLOSE | COM_STMT_SEND_LONG_DATA => return false,
            COM_QUERY | COM_STMT_EXECUTE | COM_PROCESS_INFO | COM_STMT_BULK_EXECUTE => {
                State::Result
            }
            COM_STMT_FETCH => State::Rows,
            COM_STMT_PREPARE => State::Prepare,
            COM_FIELD_LIST => State::FieldList,
            COM_STATISTICS => State::Statistics,
            COM_CHANGE_USER => State::ChangeUser,
            _ => State::Simple,
        };
        self.queue
            .get_or_insert_default()
            .push_back(Pending { cmd, state });
        true
    }

    /// Accounts for one logical server packet: `head` holds its first [`HEAD_LEN`]
    /// bytes (or all of it when shorter) and `len` its payload length. For a packet
    /// spanning several physical packets, any `len >= MAX_PAYLOAD` will do.
    pub fn on_packet(&mut self, head: &[u8], len: usize) -> Result<Step, Desync> {
        let len = len.max(head.len());
        let Some(cur) = self.queue.as_ref().and_then(|q| q.front()).copied() else {
            return Err(self.desync(None, head, len));
        };
        let Some(&first) = head.first() else {
            return Err(self.desync(Some(cur.cmd), head, len));
        };
        let step = match (cur.state, first) {
            (State::Rows | State::FieldList, _) if is_rows_end(first, len, self.caps) => {
                let status = self.end_status(head);
                let more = cur.state == State::Rows && status & SERVER_MORE_RESULTS_EXISTS != 0;
                self.next_result(more)
            }
            (_, ERR) => {
                if self.is_progress(head) {
                    Step::More
                } else {
                    self.finish(false)
                }
            }
            (State::Rows, _) => {
                self.rows += 1;
                Step::More
            }
            (State::FieldList, _) => Step::More,
            (State::Result | State::Infile | State::Simple | State::ChangeUser, OK) => {
                let status = self
                    .ok(head)
                    .ok_or_else(|| self.desync(Some(cur.cmd), head, len))?;
                let more = matches!(cur.state, State::Result | State::Infile)
                    && status & SERVER_MORE_RESULTS_EXISTS != 0;
                self.next_result(more)
            }
            (State::Result, LOCAL_INFILE) if cur.cmd == COM_QUERY => {
                self.set_state(State::Infile);
                Step::LocalInfile
            }
            (State::Result, _) => {
                let flag = self.caps
                    & (MARIADB_CLIENT_CACHE_METADATA | CLIENT_OPTIONAL_RESULTSET_METADATA)
                    != 0;
                let (n, follows) = column_count(head, flag)
                    .ok_or_else(|| self.desync(Some(cur.cmd), head, len))?;
                self.advance(if follows {
                    Some(State::Defs(n, Then::Rows))
                } else {
                    self.after_defs(Then::Rows)
                })
            }
            (State::Defs(left, then), _) => self.advance(if left > 1 {
                Some(State::Defs(left - 1, then))
            } else {
                self.after_defs(then)
            }),
            (State::DefsEof(then), EOF) if len < 9 => {
                let status = self.end_status(head);
                if then == Then::Rows && status & SERVER_STATUS_CURSOR_EXISTS != 0 {
                    // A cursor was opened: the rows come with COM_STMT_FETCH.
                    self.finish(true)
                } else {
                    self.advance(self.then(then))
                }
            }
            (State::Prepare, OK) => {
                let p = PrepareOk::parse(head, self.caps)
                    .ok_or_else(|| self.desync(Some(cur.cmd), head, len))?;
                self.last_prepare = Some(p);
                let (params, columns) = (u64::from(p.params), u64::from(p.columns));
                if !p.metadata_follows {
                    self.finish(true)
                } else if params > 0 {
                    self.advance(Some(State::Defs(params, Then::PrepColumns(columns))))
                } else {
                    self.advance(self.then(Then::PrepColumns(columns)))
                }
            }
            (State::Simple, EOF) if is_rows_end(first, len, self.caps) => {
                self.end_status(head);
                self.finish(true)
            }
            (State::Statistics, _) => self.finish(true),
            // AuthSwitchRequest or AuthMoreData.
            (State::ChangeUser, EOF | 0x01) => Step::Auth,
            _ => return Err(self.desync(Some(cur.cmd), head, len)),
        };
        Ok(step)
    }

    /// [`Tracker::on_packet`] for a packet held whole.
    pub fn on_payload(&mut self, payload: &[u8]) -> Result<Step, Desync> {
        self.on_packet(payload, payload.len())
    }

    fn desync(&self, cmd: Option<u8>, head: &[u8], len: usize) -> Desync {
        Desync {
            cmd,
            first: head.first().copied(),
            len,
        }
    }

    fn is_progress(&self, head: &[u8]) -> bool {
        self.caps & MARIADB_CLIENT_PROGRESS != 0
            && ErrPacket::parse(head).is_some_and(|e| e.code == PROGRESS_REPORT_CODE)
    }

    /// Records an OK packet's fields; returns its status.
    fn ok(&mut self, head: &[u8]) -> Option<u16> {
        let ok = OkSummary::parse(head)?;
        self.last_ok = ok;
        self.has_ok = true;
        self.status = ok.status;
        Some(ok.status)
    }

    /// The status of a packet ending rows or definitions: an OK under
    /// `CLIENT_DEPRECATE_EOF`, else (or if it does not read as one) an EOF.
    fn end_status(&mut self, head: &[u8]) -> u16 {
        if self.caps & CLIENT_DEPRECATE_EOF != 0
            && let Some(status) = self.ok(head)
        {
            return status;
        }
        if let Some(eof) = EofPacket::parse(head) {
            self.status = eof.status;
        }
        self.status
    }

    /// What follows the last definition: an EOF unless `CLIENT_DEPRECATE_EOF`.
    fn after_defs(&self, then: Then) -> Option<State> {
        if self.caps & CLIENT_DEPRECATE_EOF == 0 {
            Some(State::DefsEof(then))
        } else {
            self.then(then)
        }
    }

    /// The state after definitions and their EOF; `None` when the answer is complete.
    fn then(&self, then: Then) -> Option<State> {
        match then {
            Then::Rows => Some(State::Rows),
            Then::PrepColumns(0) | Then::Done => None,
            Then::PrepColumns(n) => Some(State::Defs(n, Then::Done)),
        }
    }

    /// Moves to `next`, or completes the answer.
    fn advance(&mut self, next: Option<State>) -> Step {
        match next {
            Some(state) => {
                self.set_state(state);
                Step::More
            }
            None => self.finish(true),
        }
    }

    fn next_result(&mut self, more: bool) -> Step {
        if more {
            self.set_state(State::Result);
            Step::More
        } else {
            self.finish(true)
        }
    }

    fn set_state(&mut self, state: State) {
        if let Some(p) = self.queue.as_mut().and_then(|q| q.front_mut()) {
            p.state = state;
        }
    }

    fn finish(&mut self, ok: bool) -> Step {
        let cmd = (self.queue.as_mut().and_then(|q| q.pop_front())).map_or(0, |p| p.cmd);
        Step::Done {
            cmd,
            ok,
            status: self.status,
        }
    }

    /// No command in flight.
    pub fn is_idle(&self) -> bool {
        self.queue.as_ref().is_none_or(|q| q.is_empty())
    }

    pub fn in_flight(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.len())
    }

    /// The command whose answer the next server packet belongs to.
    pub fn current(&self) -> Option<u8> {
        self.queue.as_ref()?.front().map(|p| p.cmd)
    }

    /// The server waits for the client's LOAD DATA LOCAL file.
    pub fn in_local_infile(&self) -> bool {
        (self.queue.as_ref().and_then(|q| q.front())).is_some_and(|p| p.state == State::Infile)
    }

    /// The server status of the last OK or EOF.
    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn in_transaction(&self) -> bool {
        self.status & SERVER_STATUS_IN_TRANS != 0
    }

    pub fn last_ok(&self) -> Option<OkSummary> {
        self.has_ok.then_some(self.last_ok)
    }

    /// The first packet of the last successful COM_STMT_PREPARE answer.
    pub fn last_prepare(&self) -> Option<PrepareOk> {
        self.last_prepare
    }

    /// Forgets the commands in flight (the connection is being closed).
    pub fn clear(&mut self) {
        if let Some(q) = &mut self.queue {
            q.clear();
        }
    }
}

#[cfg(test)]
#[path = "track_tests.rs"]
mod tests;
