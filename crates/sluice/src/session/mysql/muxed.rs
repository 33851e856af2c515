//! Statements of transaction-mode clients on shared server connections (see
//! [`crate::mux`]): a plain COM_QUERY, or a COM_STMT_EXECUTE of a plain prepared
//! statement, from a client that holds no server connection and changed no session
//! state. A statement not yet prepared on the shared connection chosen for it is
//! prepared there first (Sluice's own COM_STMT_PREPARE, queued like any command); the
//! execute waits in the client's buffer for that answer, then goes.

use super::state::{last_insert_id, reads_last_insert_id, stmt_id};
use super::stmts::{close_packet, execute_payload, prepare_packet};
use super::{Cmd, Relay};
use crate::mux::{Mux, Refused};
use crate::session::driver::End;
use bytes::{Buf, BytesMut};
use sluice_wire_mysql::{consts, packet};
use std::sync::Arc;

/// Commands larger than this go the ordinary way.
const MAX_SHARED: usize = 64 * 1024;

/// Whether a command went to a shared connection.
pub(super) enum Sharing {
    Queued(Cmd),
    No,
    /// It may, once there is one: the client leases a connection and offers it.
    WantConnection,
}

/// The client's statement waits for Sluice's COM_STMT_PREPARE on a shared connection.
pub(super) struct Preparing {
    mux: Arc<Mux>,
    hash: u128,
    /// The prepare's answer, as it comes.
    pub answer: BytesMut,
}

impl Relay {
    /// Queues the client's command on a shared server connection, if it may go there.
    pub(super) fn try_mux(&mut self, cmd: u8, len: usize) -> Sharing {
        match self.share(cmd, len) {
            Some(Ok(c)) => Sharing::Queued(c),
            Some(Err(Refused::WantConnection)) => Sharing::WantConnection,
            _ => Sharing::No,
        }
    }

    fn share(&mut self, cmd: u8, len: usize) -> Option<Result<Cmd, Refused>> {
        let clean = self.core.ledger.sets.is_empty()
            && !self.core.ledger.is_pinned()
            && !self.hold_once
            && self.origins.is_empty()
            && !self.core.io.shutting_down
            && self.core.lease.is_none()
            && self.core.odds.deferred.is_none()
            && len < MAX_SHARED;
        if !clean {
            return None;
        }
        let shared = self.core.shared.clone();
        let muxes = &shared.my.muxes;
        let payload = &self.core.io.cbuf[4..4 + len];
        let (queued, preparing) = match cmd {
            consts::COM_QUERY => {
                let sql = &payload[1..];
                if self.last_insert().is_some() && reads_last_insert_id(sql)
                    // (A text that is surely plain has no effects: no cache to ask.)
                    || !sluice_sql::surely_plain_in(sql, sluice_sql::Dialect::MySql)
                {
                    return None;
                }
                let frame = &self.core.io.cbuf[..4 + len];
                let queued = muxes.submit(&self.core.pool, 0, |q| {
                    q.bytes.extend_from_slice(frame);
                    consts::COM_QUERY
                });
                (queued, None)
            }
            consts::COM_STMT_EXECUTE => {
                // No cursor: the statement is done when its answer is.
                if payload.get(5) != Some(&0) {
                    return None;
                }
                let vid = stmt_id(payload)?;
                let st = self.stmts.get(&vid)?;
                if !st.plain || st.cursor || st.reads_id && self.last_insert().is_some() {
                    return None;
                }
                self.note_execute(vid, len).ok()?;
                let st = self.stmts.get(&vid)?;
                let payload = &self.core.io.cbuf[4..4 + len];
                let mut prepare = false;
                let queued = muxes.submit(&self.core.pool, 0, |q| {
                    let mut seq = 0;
                    if let Some(id) = q.stmts.get(st.hash) {
                        let out = execute_payload(st, payload, id);
                        packet::write_packet(q.bytes, &mut seq, &out);
                        return consts::COM_STMT_EXECUTE;
                    }
                    if let Some((_, old)) = q.stmts.make_room(q.stmt_cap) {
                        q.bytes.extend_from_slice(&close_packet(old));
                    }
                    prepare_packet(q.bytes, &st.sql);
                    prepare = true;
                    consts::COM_STMT_PREPARE
                });
                let preparing = match &queued {
                    Ok((mux, _)) if prepare => Some(mux.clone()),
                    _ => None,
                };
                let preparing = preparing.map(|mux| Preparing {
                    mux,
                    hash: st.hash,
                    answer: BytesMut::new(),
                });
                (queued, preparing)
            }
            _ => return None,
        };
        let (mux, answer) = match queued {
            Ok(q) => q,
            Err(r) => return Some(Err(r)),
        };
        self.s.kill.set_muxed(Some((mux, answer.clone())));
        self.core.muxed = Some(answer);
        self.blocked = true;
        if preparing.is_some() {
            // The execute waits in the client buffer for the prepare's answer.
            self.rare().preparing = preparing;
            return Some(Ok(Cmd::Blocked));
        }
        Some(Ok(Cmd::Consumed))
    }

    /// The client leased a connection for a command that could share one, and there
    /// was none: the connection becomes a shared one, and the command goes there.
    pub(super) fn offer_lease(&mut self, cmd: u8, len: usize) -> Option<Cmd> {
        let lease = self.core.lease.take()?;
        let shared = self.core.shared.clone();
        match shared.my.muxes.start(&self.core.pool, 0, *lease) {
            Ok(_) => {
                self.sync_kill();
                match self.try_mux(cmd, len) {
                    Sharing::Queued(c) => Some(c),
                    _ => None,
                }
            }
            Err(lease) => {
                self.core.lease = Some(Box::new(lease));
                None
            }
        }
    }

    /// The shared connection's answer to the client's statement (or to Sluice's prepare
    /// for it) is complete.
    pub(super) async fn mux_answered(
        &mut self,
        done: Result<Vec<u8>, crate::error::Error>,
    ) -> Result<(), End> {
        self.core.muxed = None;
        self.s.kill.set_muxed(None);
        self.blocked = false;
        self.wait_rest = false;
        let head = done.map_err(End::Failed)?;
        if let Some(p) = self.take_preparing() {
            self.mux_prepared(p);
            return self.on_client_packets().await;
        }
        let head = head.get(4..).unwrap_or_default();
        if head.first() == Some(&0) {
            let id = last_insert_id(head);
            self.note_insert(id);
        }
        self.on_client_packets().await
    }

    /// Sluice's prepare on a shared connection is answered: the statement is known
    /// there (the execute then goes, again through the shared connections), or the
    /// execute gets the server's error.
    fn mux_prepared(&mut self, p: Preparing) {
        let first = p.answer.get(4).copied();
        if first == Some(0)
            && let Some(id) = p.answer.get(5..9)
        {
            let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
            p.mux.with_stmts(|q| {
                if let Some(old) = q.stmts.insert(p.hash, id) {
                    q.bytes.extend_from_slice(&close_packet(old));
                }
            });
            return;
        }
        // The error packet (sequence id 1, as the execute's answer would have).
        if let Some((len, _)) = packet::header(&p.answer)
            && let Some(err) = p.answer.get(..4 + len)
        {
            self.core.io.to_client.extend_from_slice(err);
        }
        if let Some((len, _)) = packet::header(&self.core.io.cbuf) {
            self.core.io.cbuf.advance(4 + len);
        }
    }
}
