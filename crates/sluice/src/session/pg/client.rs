//! Client messages in the relay: lease a server connection when one is needed, replay
//! the session state on it, map named statements to pool-wide ones in transaction mode,
//! record what each request may change, and queue the bytes for the server.

use super::replay;
use super::stmts::{self, Stmt};
use super::{Action, Relay, STREAM_OVER};
use crate::backend::pg::LoginError;
use crate::error::Error;
use crate::session::driver::{self, End};
use crate::session::effects::Effects;
use crate::session::judge::{self, Judged};
use bytes::{Buf, Bytes, BytesMut};
use sluice_sql::Effect;
use sluice_wire_pg::Item;
use sluice_wire_pg::encode::{self, Severity};
use sluice_wire_pg::msg::{self, fe};
use sluice_wire_pg::track::{Kind as TKind, Origin};
use std::collections::VecDeque;
use std::sync::Arc;

pub(super) fn synthetic(f: impl FnOnce(&mut BytesMut)) -> Origin {
    let mut b = BytesMut::new();
    f(&mut b);
    Origin::Synthetic(b.freeze())
}

/// Messages a client may send once logged in.
fn known_tag(tag: u8) -> bool {
    matches!(
        tag,
        fe::QUERY
            | fe::PARSE
            | fe::BIND
            | fe::DESCRIBE
            | fe::EXECUTE
            | fe::CLOSE
            | fe::SYNC
            | fe::FLUSH
            | fe::FUNCTION_CALL
            | fe::COPY_DATA
            | fe::COPY_DONE
            | fe::COPY_FAIL
    )
}

impl Relay {
    /// Handles every complete client message in the buffer.
    pub(super) async fn on_client_frames(&mut self) -> Result<Option<End>, Error> {
        // Frames are handled where they lie in the read buffer; it is set aside while
        // they are, and given back (with what was handled removed) afterwards.
        let mut buf = std::mem::take(&mut *self.core.io.cbuf);
        let r = self.client_frames(&mut buf).await;
        if self.core.io.cbuf.is_empty() {
            *self.core.io.cbuf = buf;
        }
        r
    }

    async fn client_frames(&mut self, buf: &mut BytesMut) -> Result<Option<End>, Error> {
        let max = self.core.max_message();
        if self.tracker.bare()
            && let Some(q) = crate::stream::spare::take(&super::TRACKER_SPARES)
        {
            self.tracker.reuse(q);
        }
        self.actions.unshed(&super::ACTION_SPARES);
        loop {
            let item = self
                .cscan
                .next(buf, max, STREAM_OVER, |t| t != fe::COPY_DATA)
                .map_err(|e| Error::protocol(format!("invalid message from client: {e}")))?;
            let Some(item) = item else { break };
            match item {
                Item::Chunk(n) => {
                    if !self.c_dropping {
                        self.core.io.to_server.extend_from_slice(&buf[..n]);
                    }
                    buf.advance(n);
                }
                Item::Head(_) => {
                    // Only CopyData streams. Without a COPY running on a server
                    // connection (or while skipping to Sync) it goes nowhere, as in
                    // PostgreSQL, which ignores CopyData outside copy mode.
                    self.c_dropping = self.skip_to_sync || self.core.lease.is_none();
                    if !self.c_dropping {
                        self.core.io.to_server.extend_from_slice(&buf[..5]);
                    }
                    buf.advance(5);
                }
                Item::Whole(h) => {
                    let mut ruled = None;
                    if known_tag(h.tag) {
                        match self.judge_frame(h.tag, &buf[5..h.frame_len]) {
                            Judged::Run => {}
                            Judged::Rewrite(frame) => ruled = Some(BytesMut::from(&frame[..])),
                            Judged::Refuse(e) => {
                                self.refuse(h.tag, &e);
                                buf.advance(h.frame_len);
                                continue;
                            }
                            j => {
                                self.answer_deferred(&j);
                                buf.advance(h.frame_len);
                                continue;
                            }
                        }
                        let known = self.keep_for_retry(h.tag, buf, h.frame_len);
                        if ruled.is_some() {
                            // A rewritten request is not sent again as the client wrote it.
                            self.core.odds.take_retry();
                        }
                        let body = &buf[5..h.frame_len];
                        let class = |r: &Self| known.unwrap_or_else(|| r.class_of(h.tag, body));
                        match driver::route(self, class).await {
                            Err(end) => return Ok(Some(end)),
                            Ok(Some(e)) => {
                                self.core.odds.take_retry();
                                self.refuse(h.tag, &e);
                                buf.advance(h.frame_len);
                                continue;
                            }
                            Ok(None) => {}
                        }
                    }
                    let own = ruled.as_deref().unwrap_or(&buf[..h.frame_len]);
                    let rewritten = if self.virtual_pid() && matches!(h.tag, fe::QUERY | fe::PARSE)
                    {
                        self.own_pids(h.tag, own).or(ruled)
                    } else {
                        ruled
                    };
                    let muxed = match h.tag {
                        _ if rewritten.is_some() => None,
                        fe::PARSE => self.try_mux_batch(buf),
                        fe::BIND => self.try_mux_named(buf),
                        _ => None,
                    };
                    if let Some(n) = muxed {
                        // Parse .. Sync went to a shared connection as one unit.
                        buf.advance(n);
                        self.round_left = 0;
                        break;
                    }
                    let frame = rewritten.as_deref().unwrap_or(&buf[..h.frame_len]);
                    let end = self.on_frame(h.tag, frame).await;
                    buf.advance(h.frame_len);
                    if let Some(end) = end? {
                        return Ok(Some(end));
                    }
                    if self.core.muxed.is_some() {
                        // The rest waits for the answer from the shared connection.
                        break;
                    }
                }
            }
        }
        Ok(None)
    }

    /// Gets a server connection and replays the client's session state on it.
    async fn acquire(&mut self) -> Result<(), Error> {
        let mut lease = match driver::lease(self).await {
            Ok(l) => l,
            Err(LoginError::Proxy(e)) => return Err(e),
            Err(LoginError::Server(body)) => {
                let m = msg::error_field(&body, b'M').unwrap_or("server refused the connection");
                return Err(Error::server_gone(m.to_owned()).with_sqlstate("08004"));
            }
        };
        let client_fp = self.s.params_fingerprint();
        if let Some(sql) = replay::replay_sql(
            &mut lease,
            &self.core.ledger,
            &self.s.client_params,
            client_fp,
        ) {
            encode::query(&mut self.core.io.to_server, sql.as_bytes());
            let t = self.token();
            self.tracker.push(TKind::Query, Origin::Injected, t);
            self.actions.push_back((t, Action::Replay));
            lease.applied_sets.clone_from(&self.core.ledger.sets);
        }
        self.status = lease.status;
        self.tracker.set_status(lease.status);
        self.send_deferred();
        self.unnamed_here = false;
        tracing::trace!(client = self.s.cancel.key.0, server = lease.pid, "lease");
        self.core.lease = Some(Box::new(lease));
        self.sync_cancel();
        if !self.tx_mode() && self.virtual_pid() {
            // A session-mode client keeps this connection: all it sends is the client's.
            self.name_sender();
        }
        Ok(())
    }

    /// Answers a request Sluice could not serve (no server connection): an error, and
    /// ReadyForQuery where the client expects one, in order with earlier answers.
    fn refuse(&mut self, tag: u8, e: &Error) {
        // Messages of this batch went to the server before the refused one: the
        // server needs the client's Sync to answer them (they run; the rest of the
        // batch is skipped, as after a server error).
        self.sync_owed |= self.core.lease.is_some() && self.tracker.batch_open();
        let t = self.token();
        let (code, text) = (e.sqlstate(), e.message.clone());
        let end_now = matches!(tag, fe::QUERY | fe::SYNC | fe::FUNCTION_CALL);
        // Inside a transaction (a rule refused a statement of it) the transaction goes on.
        let status = self.status;
        self.tracker.push(
            TKind::Query,
            synthetic(|b| {
                encode::error(b, Severity::Error, code, &text);
                if end_now {
                    encode::ready_for_query(b, status);
                }
            }),
            t,
        );
        self.skip_to_sync = !end_now;
        if let Some(s) = self.signals() {
            s.failed = true;
        }
    }

    async fn on_frame(&mut self, tag: u8, frame: &[u8]) -> Result<Option<End>, Error> {
        let body = &frame[5..];
        if tag == fe::TERMINATE {
            return Ok(Some(End::ClientLeft));
        }
        if !known_tag(tag) {
            return Err(Error::protocol(format!(
                "invalid frontend message type {tag}"
            )));
        }
        if self.skip_to_sync {
            if tag == fe::SYNC && std::mem::take(&mut self.sync_owed) && self.core.lease.is_some() {
                self.skip_to_sync = false;
                let t = self.token();
                self.tracker.push(TKind::Sync, Origin::Client, t);
                self.batch += 1;
                self.core.io.to_server.extend_from_slice(frame);
                return Ok(None);
            }
            if tag == fe::SYNC {
                self.skip_to_sync = false;
                let t = self.token();
                let status = self.status;
                self.tracker.push(
                    TKind::Sync,
                    synthetic(|b| encode::ready_for_query(b, status)),
                    t,
                );
            }
            return Ok(None);
        }
        if let Some(e) = self.core.odds.take_lost_tx() {
            // The transaction this request belongs to was lost with its server.
            self.abort_transaction(Some(e));
        }
        if self.aborted() {
            self.in_aborted(tag, body);
            return Ok(None);
        }
        if self.core.lease.is_none() && self.tx_mode() && self.answer_without_server(tag, body) {
            return Ok(None);
        }
        if tag == fe::QUERY && self.try_mux(frame, body) {
            return Ok(None);
        }
        if self.core.lease.is_none() {
            if matches!(
                tag,
                fe::COPY_DATA | fe::COPY_DONE | fe::COPY_FAIL | fe::FLUSH
            ) {
                // Nothing to copy into and nothing to flush: PostgreSQL ignores these too.
                return Ok(None);
            }
            if let Err(e) = self.acquire().await {
                self.refuse(tag, &e);
                return Ok(None);
            }
        }
        if self.at_rest
            && let Some(key) = self.core.lease.as_ref().map(|l| l.key.clone())
            && key.unsettled()
        {
            // A cancel aimed at the client's last statement has not reached the server
            // yet: the next one waits for it (see cancel.rs).
            key.settled().await;
        }
        self.at_rest = false;
        let tx = self.tx_mode();
        match tag {
            fe::QUERY => self.query(frame, body),
            fe::PARSE if tx => self.parse(frame, body)?,
            fe::BIND if tx => self.bind(frame, body)?,
            fe::DESCRIBE if tx => self.describe(frame, body)?,
            fe::CLOSE if tx => self.close(frame, body)?,
            fe::EXECUTE => self.execute(frame, body),
            _ => {
                let kind = match tag {
                    fe::PARSE => Some(TKind::Parse),
                    fe::BIND => Some(TKind::Bind),
                    fe::DESCRIBE => Some(TKind::Describe),
                    fe::CLOSE => Some(TKind::Close),
                    fe::SYNC => Some(TKind::Sync),
                    fe::FUNCTION_CALL => Some(TKind::FunctionCall),
                    fe::COPY_DONE | fe::COPY_FAIL => Some(TKind::CopyEnd),
                    _ => None,
                };
                if let Some(k) = kind {
                    let t = self.token();
                    self.tracker.push(k, Origin::Client, t);
                }
                if tag == fe::SYNC {
                    self.batch += 1;
                }
                let mapped = self.session_pids(tag, body);
                let frame = mapped.as_deref().unwrap_or(frame);
                self.core.io.to_server.extend_from_slice(frame);
            }
        }
        Ok(None)
    }

    fn query(&mut self, frame: &[u8], body: &[u8]) {
        self.note_ddl(msg::query_text(body).unwrap_or_default());
        let t = self.token();
        self.batch += 1;
        // A simple query destroys the unnamed statement.
        self.unnamed.clear();
        self.unnamed_here = false;
        if self.tx_mode() {
            let sql = msg::query_text(body).unwrap_or_default();
            self.note_notifier(sql);
            let effects = self.core.shared.pg.effects.of(sql);
            let effects: &[Effect] = effects.as_deref().unwrap_or_default();
            // DEALLOCATE of a protocol-level statement: it exists under another name on
            // the server, so Sluice answers for it.
            if let [Effect::Deallocate { name }] = effects
                && self.stmts.remove(name.as_bytes()).is_some()
            {
                let origin = synthetic(|b| {
                    encode::command_complete(b, "DEALLOCATE");
                    encode::ready_for_query(b, b'I');
                });
                self.tracker.push(TKind::Query, origin, t);
                return;
            }
            if !effects.is_empty() {
                // Several statements outside a transaction block run in one implicit
                // transaction: their SETs count only if all of them succeed.
                let implicit = effects.len() > 1
                    && !self.ledger_in_tx
                    && !effects
                        .iter()
                        .any(|e| matches!(e, Effect::Begin | Effect::TxEnd));
                let q = effects.iter().cloned().collect::<VecDeque<_>>();
                self.actions.push_back((t, Action::Effects { q, implicit }));
            }
        }
        self.tracker.push(TKind::Query, Origin::Client, t);
        judge::digest_sent(&mut self.core, t);
        self.statement_timeout();
        self.core.io.to_server.extend_from_slice(frame);
    }

    /// Sends Parse for a pool-wide statement, preceded by a Close of the same name: if
    /// Sluice's idea of the connection's statements is ever stale, the Close makes the
    /// Parse succeed anyway (closing a name that does not exist is not an error).
    fn send_parse(&mut self, stmt: &Stmt, origin: Origin, client_name: Option<Bytes>) {
        let Some(lease) = self.core.lease.as_mut() else {
            return;
        };
        let cap = lease.pool().settings().statement_cache;
        let evicted = lease.prepared.insert(stmt.hash, cap, self.batch);
        encode::target(&mut self.core.io.to_server, fe::CLOSE, b'S', &stmt.global);
        let t = self.token();
        self.tracker.push(TKind::Close, Origin::Injected, t);
        encode::parse(
            &mut self.core.io.to_server,
            &stmt.global,
            &stmt.query,
            &stmt.types,
        );
        let t = self.token();
        self.tracker.push(TKind::Parse, origin, t);
        self.actions.push_back((
            t,
            Action::Parse {
                hash: stmt.hash,
                client_name,
            },
        ));
        if let Some(old) = evicted {
            encode::target(
                &mut self.core.io.to_server,
                fe::CLOSE,
                b'S',
                &stmts::global_name(old),
            );
            let t = self.token();
            self.tracker.push(TKind::Close, Origin::Injected, t);
        }
    }

    /// Makes sure the statement exists on the current server connection, injecting a
    /// Parse (whose answer the client never sees) if not.
    fn ensure_prepared(&mut self, stmt: &Stmt) {
        let batch = self.batch;
        let Some(lease) = self.core.lease.as_mut() else {
            return;
        };
        if !lease.prepared.usable(stmt.hash, batch) {
            self.send_parse(stmt, Origin::Injected, None);
        }
    }

    /// The unnamed statement lives on one server connection: if the client binds it
    /// on another, prepare it there first.
    fn ensure_unnamed(&mut self) {
        if self.unnamed_here {
            return;
        }
        let Some((query, types)) = self.unnamed.get() else {
            return;
        };
        encode::parse(&mut self.core.io.to_server, b"", query, types);
        {
            let t = self.token();
            self.tracker.push(TKind::Parse, Origin::Injected, t);
            self.unnamed_here = true;
        }
    }

    fn parse(&mut self, frame: &[u8], body: &[u8]) -> Result<(), Error> {
        let (name, query, types) =
            msg::parse(body).ok_or_else(|| Error::protocol("malformed Parse message"))?;
        self.note_notifier(query);
        self.note_ddl(query);
        if name.is_empty() {
            let effects = self.core.shared.pg.effects.of(query);
            self.set_effects(true, effects);
            self.unnamed.set(query, types);
            self.unnamed_here = true;
            let t = self.token();
            self.tracker.push(TKind::Parse, Origin::Client, t);
            self.core.io.to_server.extend_from_slice(frame);
            return Ok(());
        }
        let fp = self.s.parse_fingerprint();
        let stmt = new_stmt(
            query,
            types,
            self.core.shared.pg.effects.of(query),
            fp,
            &self.core.pool,
        );
        let name = Bytes::copy_from_slice(name);
        self.stmts.insert(name.clone(), stmt.clone());
        let batch = self.batch;
        let Some(lease) = self.core.lease.as_mut() else {
            return Ok(());
        };
        if lease.prepared.usable(stmt.hash, batch) {
            let t = self.token();
            self.tracker
                .push(TKind::Parse, synthetic(encode::parse_complete), t);
            return Ok(());
        }
        self.send_parse(&stmt, Origin::Client, Some(name));
        Ok(())
    }

    fn bind(&mut self, frame: &[u8], body: &[u8]) -> Result<(), Error> {
        let (portal, name, rest) =
            msg::bind(body).ok_or_else(|| Error::protocol("malformed Bind message"))?;
        let stmt = if name.is_empty() {
            None
        } else {
            let fp = self.s.parse_fingerprint();
            let pool = &self.core.pool;
            self.stmts.current(name, fp, |h| pool.current_statement(h))
        };
        let effects = match &stmt {
            Some(s) => s.effects.clone(),
            None if name.is_empty() => self.effects(true),
            None => None,
        };
        if portal.is_empty() {
            self.set_effects(false, effects);
        } else if let Some(effects) = effects {
            self.rare()
                .named_portal_effects
                .get_or_insert_default()
                .insert(Bytes::copy_from_slice(portal), effects);
        }
        let uses = stmt.as_ref().map(|s| s.hash);
        // Process ids of other clients passed as parameters (see pids.rs).
        let query = match &stmt {
            Some(s) => Some(&s.query[..]),
            None if name.is_empty() => self.unnamed.get().map(|(q, _)| q),
            None => None,
        };
        let mapped = match query.filter(|q| sluice_sql::signal::mentioned(q)) {
            Some(q) => {
                let q = Bytes::copy_from_slice(q);
                self.signal_params(&q, rest)
            }
            None => None,
        };
        let rest = mapped.as_deref().unwrap_or(rest);
        match stmt {
            Some(s) => {
                self.ensure_prepared(&s);
                encode::bind(&mut self.core.io.to_server, portal, &s.global, rest);
            }
            None => {
                if name.is_empty() {
                    self.ensure_unnamed();
                }
                if mapped.is_some() {
                    encode::bind(&mut self.core.io.to_server, portal, name, rest);
                } else {
                    // Unknown names are the server's to refuse, with the client's name.
                    self.core.io.to_server.extend_from_slice(frame);
                }
            }
        }
        let t = self.token();
        self.tracker.push(TKind::Bind, Origin::Client, t);
        if let Some(hash) = uses {
            self.actions.push_back((t, Action::Uses { hash }));
        }
        Ok(())
    }

    fn execute(&mut self, frame: &[u8], body: &[u8]) {
        let t = self.token();
        self.tracker.push(TKind::Execute, Origin::Client, t);
        judge::digest_sent(&mut self.core, t);
        self.statement_timeout();
        if self.tx_mode() {
            let portal = msg::query_text(body).unwrap_or_default();
            let effects = if portal.is_empty() {
                self.effects(false)
            } else {
                let named = self
                    .rare
                    .as_ref()
                    .and_then(|r| r.named_portal_effects.as_ref());
                named.and_then(|m| m.get(portal)).cloned()
            };
            if let Some(effects) = effects {
                self.actions.push_back((t, Action::ExecEffects(effects)));
            }
        }
        self.core.io.to_server.extend_from_slice(frame);
    }

    fn describe(&mut self, frame: &[u8], body: &[u8]) -> Result<(), Error> {
        let (kind, name) =
            msg::target(body).ok_or_else(|| Error::protocol("malformed Describe message"))?;
        let fp = self.s.parse_fingerprint();
        let pool = &self.core.pool;
        let mut uses = None;
        match (
            kind,
            self.stmts.current(name, fp, |h| pool.current_statement(h)),
        ) {
            (b'S', Some(s)) if !name.is_empty() => {
                self.ensure_prepared(&s);
                encode::target(&mut self.core.io.to_server, fe::DESCRIBE, b'S', &s.global);
                uses = Some(s.hash);
            }
            _ => {
                if kind == b'S' && name.is_empty() {
                    self.ensure_unnamed();
                }
                self.core.io.to_server.extend_from_slice(frame);
            }
        }
        let t = self.token();
        self.tracker.push(TKind::Describe, Origin::Client, t);
        if let Some(hash) = uses {
            self.actions.push_back((t, Action::Uses { hash }));
        }
        Ok(())
    }

    fn close(&mut self, frame: &[u8], body: &[u8]) -> Result<(), Error> {
        let (kind, name) =
            msg::target(body).ok_or_else(|| Error::protocol("malformed Close message"))?;
        let t = self.token();
        if kind == b'S' && !name.is_empty() {
            // The statement stays cached on the server for other clients; this client
            // just forgets its name.
            self.stmts.remove(name);
            self.tracker
                .push(TKind::Close, synthetic(encode::close_complete), t);
            return Ok(());
        }
        if kind == b'P'
            && !name.is_empty()
            && let Some(r) = self.rare.as_mut()
            && let Some(m) = r.named_portal_effects.as_mut()
        {
            m.remove(name);
            if m.is_empty() {
                r.named_portal_effects = None;
                self.settle_rare();
            }
        }
        self.tracker.push(TKind::Close, Origin::Client, t);
        self.core.io.to_server.extend_from_slice(frame);
        Ok(())
    }
}

pub(super) fn new_stmt(
    query: &[u8],
    types: &[u8],
    effects: Effects,
    parsed_under: u64,
    pool: &crate::pool::Pool<crate::backend::pg::ServerConn>,
) -> Arc<Stmt> {
    Arc::new(Stmt::new(
        Bytes::copy_from_slice(query),
        Bytes::copy_from_slice(types),
        effects,
        parsed_under,
        |h| pool.current_statement(h),
    ))
}
