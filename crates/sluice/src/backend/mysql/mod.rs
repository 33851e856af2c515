//! A MySQL/MariaDB server connection: the socket, the capabilities agreed with the
//! server, the last status flags it reported, and the few exchanges Sluice runs on it by
//! itself (login, reset). Below the pool in the flow; knows nothing of clients.

mod connect;
pub mod kv;
mod lookup;

pub use connect::{Opener, compression_for, login, open_greeting, start_compression, tls_upgrade};

use crate::backend::LoginError;
use crate::error::{Error, Kind, Result, Side};
use crate::stream::{Stream, write_all_flush};
use bytes::{Buf, Bytes, BytesMut};
use sluice_wire_mysql::{consts, packet, resp};
use std::sync::Arc;
use tokio::io::AsyncReadExt;

/// The COM_QUERY that turns on reports of every session state change.
pub const TRACK_STATE: &[u8] = b"\x03SET SESSION session_track_state_change = ON";

pub struct ServerConn {
    pub stream: Stream,
    /// Bytes read from the server not yet handled; they belong to this connection.
    pub rbuf: BytesMut,
    pub addr: Arc<str>,
    /// The server's connection (thread) id.
    pub id: u32,
    /// Capabilities agreed with the server at login.
    pub caps: u64,
    /// Status flags of the last OK/EOF.
    pub status: u16,
    /// The database the connection logged in to (restored after a reset).
    pub database: String,
    /// Session settings made on this connection (by clients or replayed), by name: the
    /// statement text, as in the session ledger.
    pub applied: crate::sets::Sets,
    /// Statements Sluice prepared here for transaction-mode clients.
    pub stmts: crate::stmt_cache::StmtCache,
    pub stamps: crate::pool::Stamps,
    pub max_message: usize,
    /// The server reports every change of session state (see `track_state`).
    pub tracks_state: bool,
    /// A client changed the user this connection is logged in as (COM_CHANGE_USER
    /// relayed in pass-through): it no longer belongs to its pool and is closed, never
    /// reset and handed to another client.
    pub foreign: bool,
    /// Its place in the server's connection budget.
    pub permit: crate::pool::budget::Permit,
    /// The pool's `query_timeout`, set on the connection (see `track_state`).
    pub statement_timeout: Option<std::time::Duration>,
}

impl ServerConn {
    pub fn in_transaction(&self) -> bool {
        self.status & consts::SERVER_STATUS_IN_TRANS != 0
    }

    /// Sends one command and reads its answer: OK (with the status flags) or the
    /// server's ERR payload. Only for commands answered by a single packet.
    pub async fn command(&mut self, payload: &[u8]) -> Result<std::result::Result<(), Bytes>> {
        let mut out = BytesMut::new();
        let mut seq = 0u8;
        packet::write_packet(&mut out, &mut seq, payload);
        write_all_flush(&mut self.stream, &out).await?;
        let (_, answer) = read_packet(&mut self.stream, &mut self.rbuf, self.max_message).await?;
        if resp::is_err(&answer) {
            return Ok(Err(answer));
        }
        match resp::OkPacket::parse(&answer, self.caps) {
            Some(ok) => {
                self.status = ok.status;
                Ok(Ok(()))
            }
            None => Err(Error::new(
                Kind::Desync,
                Side::Server,
                "unexpected answer to a command Sluice sent",
            )),
        }
    }

    /// Where the server tracks session state for Sluice (CLIENT_SESSION_TRACK agreed at
    /// login), asks it to report every change of it (user variables, temporary tables,
    /// variables set where Sluice cannot see it), so that no change goes unnoticed.
    /// Servers without the setting keep their default tracking.
    ///
    /// Also sets the pool's `query_timeout` as the server's own statement time limit
    /// (MariaDB's `max_statement_time`: a statement running longer fails with 1969;
    /// MySQL servers have no such setting and run on).
    pub async fn track_state(&mut self) -> Result<()> {
        if self.caps & consts::CLIENT_SESSION_TRACK != 0 {
            self.tracks_state = self.command(TRACK_STATE).await?.is_ok();
        }
        if let Some(t) = self.statement_timeout {
            let sql = format!("\x03SET SESSION max_statement_time = {}", t.as_secs_f64());
            if self.command(sql.as_bytes()).await?.is_err() {
                tracing::debug!(server = %self.addr, "the server has no max_statement_time: query_timeout does not apply");
            }
        }
        Ok(())
    }

    /// Brings the connection back to a clean state: COM_RESET_CONNECTION (which also
    /// rolls back), then the login database again.
    pub async fn reset(&mut self) -> Result<()> {
        if self.foreign {
            return Err(Error::new(
                Kind::Desync,
                Side::Server,
                "the connection is logged in as another user",
            ));
        }
        let failed = |what: &str, e: &[u8]| {
            let msg = resp::err_message(e).unwrap_or_default();
            Error::new(Kind::Desync, Side::Server, format!("{what} failed: {msg}"))
        };
        if let Err(e) = self.command(&[consts::COM_RESET_CONNECTION]).await? {
            return Err(failed("COM_RESET_CONNECTION", &e));
        }
        if !self.database.is_empty() {
            let mut p = vec![consts::COM_INIT_DB];
            p.extend_from_slice(self.database.as_bytes());
            if let Err(e) = self.command(&p).await? {
                return Err(failed("COM_INIT_DB", &e));
            }
        }
        self.track_state().await?;
        self.applied.clear();
        self.stmts.clear();
        Ok(())
    }

    pub fn close(self) {
        let quit = vec![1, 0, 0, 0, consts::COM_QUIT];
        crate::stream::close_after_eof(self.stream, quit, self.permit);
    }
}

impl crate::pool::Duplex for ServerConn {
    fn duplex(&mut self) -> (&mut Stream, &mut BytesMut) {
        (&mut self.stream, &mut self.rbuf)
    }
    fn unread(&self) -> usize {
        self.rbuf.len()
    }
}

impl crate::pool::PoolConn for ServerConn {
    type Opener = Opener;
    /// The server's greeting, as first seen (version, capabilities, charset).
    type Welcome = Arc<sluice_wire_mysql::handshake::HandshakeV10>;

    async fn open(op: &Opener) -> std::result::Result<Self, LoginError> {
        login(op).await.map(|(c, _)| c)
    }
    fn stamps(&self) -> crate::pool::Stamps {
        self.stamps
    }
    fn stamps_mut(&mut self) -> &mut crate::pool::Stamps {
        &mut self.stamps
    }
    fn is_idle(&self) -> bool {
        !self.in_transaction() && !self.foreign
    }
    fn still_open(&mut self) -> bool {
        self.stream.is_quiet()
    }
    async fn reset(&mut self, _reset_query: &str) -> Result<()> {
        ServerConn::reset(self).await
    }
    fn close(self) {
        ServerConn::close(self)
    }
}

/// Reads one whole logical packet (split packets joined) from `stream`, buffering in
/// `buf`: (sequence id of its last part, payload). For logins and Sluice's own
/// commands, not the relay.
pub async fn read_packet(
    stream: &mut Stream,
    buf: &mut BytesMut,
    max: usize,
) -> Result<(u8, Bytes)> {
    let mut payload = BytesMut::new();
    loop {
        let (len, seq) = loop {
            if let Some((len, seq)) = packet::header(buf)
                && buf.len() >= 4 + len
            {
                break (len, seq);
            }
            if buf.len() >= 4 && payload.len() + packet::header(buf).map_or(0, |h| h.0) > max {
                return Err(too_large(max));
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(8192);
            }
            if stream.read_buf(buf).await? == 0 {
                return Err(Error::server_gone("connection closed"));
            }
        };
        buf.advance(4);
        if payload.len() + len > max {
            return Err(too_large(max));
        }
        if payload.is_empty() && len < packet::MAX_PAYLOAD {
            // The common case, a packet in one part: no copy.
            return Ok((seq, buf.split_to(len).freeze()));
        }
        payload.extend_from_slice(&buf[..len]);
        buf.advance(len);
        if len < packet::MAX_PAYLOAD {
            return Ok((seq, payload.freeze()));
        }
    }
}

fn too_large(max: usize) -> Error {
    Error::new(
        Kind::Protocol,
        Side::Server,
        format!("packet larger than the {max}-byte cap"),
    )
}

/// Splits a MySQL server's answers with the response tracker.
pub struct Splitter {
    tracker: sluice_wire_mysql::track::Tracker,
    /// The answer that just ended failed.
    failed: bool,
    /// The next physical packet continues a split one.
    cont: bool,
}

impl crate::mux::Splitter for Splitter {
    fn expect(&mut self, first: u8) {
        self.tracker.expect(first);
    }

    fn outcome(&mut self) -> crate::stats::Outcome {
        crate::stats::Outcome {
            rows: self.tracker.take_rows(),
            affected: if self.failed {
                0
            } else {
                self.tracker.last_ok().map_or(0, |o| o.affected_rows)
            },
            error: std::mem::take(&mut self.failed),
        }
    }

    fn unit(&mut self, buf: &[u8]) -> Result<Option<(usize, Option<crate::mux::Ended>)>> {
        use crate::mux::Ended;
        use sluice_wire_mysql::track::{HEAD_LEN, Step};
        let Some((len, _)) = packet::header(buf) else {
            return Ok(None);
        };
        if buf.len() < 4 + len {
            return Ok(None);
        }
        let cont = std::mem::replace(&mut self.cont, len == packet::MAX_PAYLOAD);
        if cont {
            return Ok(Some((4 + len, None)));
        }
        let head = &buf[4..4 + len.min(HEAD_LEN)];
        match self.tracker.on_packet(head, len) {
            Ok(Step::Done { ok, status, .. }) => {
                self.failed = !ok;
                // An ERR carries no status: only OK and EOF tell.
                let end = if !ok {
                    Ended::Clean
                } else if status & consts::SERVER_STATUS_IN_TRANS != 0
                    || status & consts::SERVER_STATUS_AUTOCOMMIT == 0
                {
                    Ended::InTransaction
                } else if status & consts::SERVER_SESSION_STATE_CHANGED != 0 {
                    Ended::StateChanged
                } else {
                    Ended::Clean
                };
                Ok(Some((4 + len, Some(end))))
            }
            Ok(Step::More) => Ok(Some((4 + len, None))),
            Ok(_) | Err(_) => Err(Error::new(
                Kind::Desync,
                Side::Server,
                "unexpected answer on a shared connection",
            )),
        }
    }
}

impl crate::mux::MuxConn for ServerConn {
    type Splitter = Splitter;

    fn splitter(&self) -> Splitter {
        let mut tracker = sluice_wire_mysql::track::Tracker::new(self.caps);
        tracker.set_status(self.status);
        Splitter {
            tracker,
            failed: false,
            cont: false,
        }
    }

    fn io(&mut self) -> (&mut Stream, &mut BytesMut) {
        (&mut self.stream, &mut self.rbuf)
    }

    fn thread(&self) -> u32 {
        self.id
    }

    fn take_stmts(&mut self) -> crate::stmt_cache::StmtCache {
        std::mem::take(&mut self.stmts)
    }

    fn put_stmts(&mut self, stmts: crate::stmt_cache::StmtCache) {
        self.stmts = stmts;
    }

    fn fits(&mut self, _fp: u64) -> bool {
        self.applied.is_empty() && !self.in_transaction()
    }
}
