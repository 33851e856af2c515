//! Server messages in the relay: forward what belongs to the client, drop the answers
//! to what Sluice sent by itself, follow transaction status, reported parameters and
//! statement outcomes, and apply confirmed effects to the session ledger.

use super::{Action, Relay, STREAM_OVER};
use crate::error::{Error, Kind, Side};
use crate::session::lost;
use bytes::Buf;
use sluice_sql::Effect;
use sluice_wire_pg::Item;
use sluice_wire_pg::msg::{self, be};
use sluice_wire_pg::track::{Kind as TKind, Outcome};
use std::sync::Arc;

fn desync(e: impl std::fmt::Display) -> Error {
    Error::new(Kind::Desync, Side::Server, e.to_string())
}

/// Clients in transaction mode (and lazy session mode) know each other by Sluice's virtual process ids: a
/// notification's sender becomes the client that last held the sending connection.
fn rename_sender(shared: &crate::shared::Shared, frame: &mut [u8]) {
    let Some(pid) = frame
        .get(5..9)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_be_bytes)
    else {
        return;
    };
    if let Some(virtual_pid) = shared.holders.lock().get(&pid) {
        frame[5..9].copy_from_slice(&virtual_pid.to_be_bytes());
    }
}

/// An ErrorResponse that ends the server connection.
fn fatal(body: &[u8]) -> bool {
    matches!(
        msg::error_field(body, b'V').or_else(|| msg::error_field(body, b'S')),
        Some("FATAL" | "PANIC")
    )
}

/// An ErrorResponse saying a prepared statement's copy can no longer run as prepared
/// (PostgreSQL: "cached plan must not change result type").
fn stale(body: &[u8]) -> bool {
    msg::error_field(body, b'C') == Some("0A000")
}

/// Server frames Sluice reads whole; rows and copy data stream through when large.
fn whole(tag: u8) -> bool {
    tag != be::DATA_ROW && tag != be::COPY_DATA
}

impl Relay {
    pub(super) fn on_server_frames(&mut self) -> Result<(), Error> {
        let max = self.core.max_message();
        loop {
            if self.tracker.has_synthetic() {
                self.tracker.release_synthetic(&mut self.core.io.to_client);
            }
            let Some(lease) = self.core.lease.as_mut() else {
                return Ok(());
            };
            let conn = &mut lease.conn;
            let Some(item) = self
                .sscan
                .next(&conn.rbuf, max, STREAM_OVER, whole)
                .map_err(desync)?
            else {
                break;
            };
            match item {
                Item::Chunk(n) => {
                    if !self.s_dropping {
                        self.core.io.to_client.extend_from_slice(&conn.rbuf[..n]);
                    }
                    conn.rbuf.advance(n);
                }
                Item::Head(h) => {
                    let fwd = self.tracker.on_frame(h.tag).map_err(desync)?;
                    self.s_dropping = !fwd;
                    if fwd {
                        self.core.io.to_client.extend_from_slice(&conn.rbuf[..5]);
                    }
                    conn.rbuf.advance(5);
                }
                Item::Whole(h) => {
                    let head = self.tracker.head_token();
                    let mut fwd = self.tracker.on_frame(h.tag).map_err(desync)?;
                    if fwd
                        && h.tag == be::ERROR_RESPONSE
                        && msg::shutting_down(&conn.rbuf[5..h.frame_len])
                        && lost::may_outlive(self.core.mode, &self.core.pool, &self.core.ledger)
                        && !self.s.cancel.slot.ending()
                    {
                        // The server is going away (a failover, a restart) and the
                        // session outlives it (session/lost.rs): the request in flight
                        // fails with an ERROR, not a FATAL; with none in flight, the
                        // client's next request learns it.
                        match head {
                            Some(_) => msg::demote_fatal(&mut conn.rbuf[5..h.frame_len]),
                            None => fwd = false,
                        }
                    }
                    let frame = &conn.rbuf[..h.frame_len];
                    let body = &frame[5..];
                    let mut param = None;
                    match h.tag {
                        be::READY_FOR_QUERY => {
                            let st = msg::ready_status(body)
                                .ok_or_else(|| desync("bad ReadyForQuery"))?;
                            conn.status = st;
                            self.status = st;
                            self.tracker.set_status(st);
                            self.at_rest = self.tracker.is_idle();
                        }
                        be::PARAMETER_STATUS => {
                            param = msg::parameter_status(body)
                                .map(|(k, v)| (k.to_owned(), v.to_owned()));
                        }
                        be::COMMAND_COMPLETE => {
                            (self.last_count, self.last_tag) =
                                super::LastTag::of(msg::command_tag(body).unwrap_or_default());
                        }
                        _ => {}
                    }
                    if h.tag == be::ERROR_RESPONSE {
                        self.server_fatal |= fwd && fatal(body);
                        self.stale_error = stale(body);
                        if let Some(r) = self.rare.as_mut()
                            && let Some(s) = r.signals.as_mut()
                        {
                            s.failed = true;
                        }
                    }
                    if fwd {
                        let at = self.core.io.to_client.len();
                        self.core.io.to_client.extend_from_slice(frame);
                        if h.tag == be::NOTIFICATION && self.s.cancel.slot.client().is_some() {
                            rename_sender(&self.core.shared, &mut self.core.io.to_client[at..]);
                        }
                    }
                    conn.rbuf.advance(h.frame_len);
                    if let Some((k, v)) = param {
                        conn.set_reported(&k, &v);
                        if fwd {
                            Arc::make_mut(&mut self.s.client_params).insert(k, v);
                            self.s.client_fp = super::UNKNOWN_FP;
                        }
                    }
                    if self.tx_mode() {
                        self.after_frame(h.tag, head);
                    }
                }
            }
            if self.tracker.has_done() {
                self.handle_done();
            }
        }
        if self.tracker.has_synthetic() {
            self.tracker.release_synthetic(&mut self.core.io.to_client);
        }
        Ok(())
    }

    /// Session-state bookkeeping for one whole server frame (transaction mode).
    fn after_frame(&mut self, tag: u8, head: Option<u64>) {
        match tag {
            be::COMMAND_COMPLETE => {
                let Some((t, Action::Effects { q, implicit })) = self.actions.front_mut() else {
                    return;
                };
                if Some(*t) != head {
                    return;
                }
                let implicit = *implicit;
                if let Some(e) = q.pop_front() {
                    self.apply_effect(&e, implicit);
                }
            }
            be::ERROR_RESPONSE => {
                if let Some((t, Action::Effects { q, .. })) = self.actions.front_mut()
                    && Some(*t) == head
                {
                    q.clear();
                }
            }
            be::READY_FOR_QUERY => {
                let in_tx = self.status != b'I';
                if self.ledger_in_tx && !in_tx {
                    self.core.ledger.end_transaction(false);
                }
                self.ledger_in_tx = in_tx;
            }
            _ => {}
        }
    }

    /// Applies a confirmed effect to the ledger and to what Sluice knows of the server
    /// connection. `implicit`: part of an implicit multi-statement transaction (staged
    /// until it commits).
    fn apply_effect(&mut self, e: &Effect, implicit: bool) {
        match e {
            Effect::Begin => self.ledger_in_tx = true,
            Effect::TxEnd => {
                self.core
                    .ledger
                    .end_transaction(self.last_tag == super::LastTag::Commit);
                self.ledger_in_tx = false;
            }
            e => self
                .core
                .ledger
                .apply(e, self.ledger_in_tx || implicit, &self.core.shared.pins),
        }
        let Some(lease) = self.core.lease.as_mut() else {
            return;
        };
        match e {
            Effect::DeallocateAll => {
                lease.prepared.clear();
                self.stmts.clear();
            }
            Effect::DiscardAll => {
                lease.prepared.clear();
                self.stmts.clear();
                lease.applied_sets.clear();
            }
            _ => {}
        }
        self.sync_applied_sets();
    }

    /// While a client holds a connection, the SETs on it are the client's.
    fn sync_applied_sets(&mut self) {
        if let Some(lease) = self.core.lease.as_mut()
            && lease.applied_sets != self.core.ledger.sets
        {
            lease.applied_sets.clone_from(&self.core.ledger.sets);
        }
    }

    pub(super) fn handle_done(&mut self) {
        let mut done = self.tracker.swap_done();
        for d in done.drain(..) {
            if self.core.digests_waiting() {
                let outcome = match d.outcome {
                    Outcome::Ok => self.last_tag.outcome(self.last_count),
                    _ => crate::stats::Outcome {
                        error: true,
                        ..Default::default()
                    },
                };
                crate::session::judge::digest_done(&mut self.core, d.token, outcome);
            }
            // A ReadyForQuery Sluice answered itself ends a request like the server's.
            if matches!(d.kind, TKind::Query | TKind::Sync) && self.tracker.is_idle() {
                self.at_rest = true;
            }
            while let Some((t, _)) = self.actions.front() {
                if *t > d.token {
                    break;
                }
                let Some((t, action)) = self.actions.pop_front() else {
                    break;
                };
                if t != d.token {
                    continue;
                }
                self.finish_action(action, d.kind, d.outcome);
            }
        }
        self.tracker.give_back_done(done);
    }

    fn finish_action(&mut self, action: Action, kind: TKind, outcome: Outcome) {
        let ok = outcome == Outcome::Ok;
        match action {
            Action::Parse { hash, client_name } => {
                if ok {
                    if let Some(l) = self.core.lease.as_mut() {
                        l.prepared.confirm(hash);
                    }
                    self.core.pool.statement_parsed(hash);
                    return;
                }
                if let Some(l) = self.core.lease.as_mut() {
                    l.prepared.remove(hash);
                }
                if let Some(name) = client_name {
                    self.stmts.remove(&name);
                }
            }
            Action::ExecEffects(effects) if ok && kind == TKind::Execute => {
                for e in effects.iter() {
                    self.apply_effect(e, false);
                }
            }
            Action::Effects { implicit: true, .. } if !self.ledger_in_tx => {
                self.core.ledger.end_transaction(ok);
                self.sync_applied_sets();
            }
            Action::Uses { hash } if !ok && self.stale_error => {
                self.core.pool.statement_stale(hash);
                if let Some(l) = self.core.lease.as_mut() {
                    l.prepared.remove(hash);
                }
            }
            Action::Replay if !ok => {
                self.rare().fatal = Some(Box::new(Error::new(
                    Kind::Desync,
                    Side::Server,
                    "could not restore this session's settings on a server connection",
                )));
            }
            _ => {}
        }
    }
}
