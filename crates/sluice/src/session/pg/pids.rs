//! Process ids as a pooled PostgreSQL client knows them. A client in transaction mode
//! (or in session mode with `assign_server = "first_statement"`, logged in before it
//! had a server connection) is told a process id of Sluice's (its BackendKeyData), and
//! its notifications carry
//! it as their sender; so `pg_backend_pid()` as a select item answers it too (see
//! `sluice_sql::session_id`), and `pg_cancel_backend(pid)` / `pg_terminate_backend(pid)`
//! naming such an id reach the server connection that client uses now, which it keeps
//! until the statement has run (or, where it uses none, are answered for it: a cancel
//! has nothing to stop, a terminate ends that client's session).

use super::Relay;
use crate::{cancel::InFlight, session::cancel::Slot};
use bytes::{Bytes, BytesMut};
use sluice_wire_pg::encode;
use sluice_wire_pg::msg::{self, fe};
use std::sync::Arc;

/// What a statement that signals other clients leaves to do once it has run.
#[derive(Default)]
pub(super) struct Signals {
    /// Server connections that run nothing new until then (see cancel.rs).
    held: Vec<InFlight>,
    /// Clients holding no server connection that a terminate ends, if it succeeds.
    terminate: Vec<Arc<Slot>>,
    /// Clients marked as being terminated through the server connection they hold:
    /// unmarked if the statement fails.
    marked: Vec<Arc<Slot>>,
    /// An error came back meanwhile.
    pub failed: bool,
}

impl Relay {
    /// The Query or Parse `frame` with the client's own process id and the process ids
    /// of other clients put where the server needs them; None when nothing changes.
    pub(super) fn own_pids(&mut self, tag: u8, frame: &[u8]) -> Option<BytesMut> {
        let body = frame.get(5..)?;
        let (name, sql, types) = match tag {
            fe::QUERY => (None, msg::query_text(body)?, &[][..]),
            fe::PARSE => {
                let (name, sql, types) = msg::parse(body)?;
                (Some(name), sql, types)
            }
            _ => return None,
        };
        let own = self
            .virtual_pid()
            .then(|| {
                let id = self.s.cancel.key.0 as u32;
                sluice_sql::session_id::rewrite(sql, sluice_sql::Dialect::Postgres, id)
            })
            .flatten();
        let sql = own.as_deref().unwrap_or(sql);
        let signalled = self.signal_others(sql);
        if own.is_none() && signalled.is_none() {
            return None;
        }
        let sql = signalled.as_deref().unwrap_or(sql);
        let mut out = BytesMut::with_capacity(sql.len() + types.len() + 16);
        match name {
            None => encode::query(&mut out, sql),
            Some(name) => encode::parse(&mut out, name, sql, types),
        }
        Some(out)
    }

    /// Maps pg_cancel_backend / pg_terminate_backend of clients known by Sluice's
    /// process ids (transaction mode) in `sql`; None when there are none.
    fn signal_others(&mut self, sql: &[u8]) -> Option<Vec<u8>> {
        let calls = sluice_sql::signal::calls(sql);
        let mut out = sql.to_vec();
        let mut changed = false;
        // From the end, so that the earlier spans stay where they are.
        for call in calls.iter().rev() {
            let Some(target) = self.core.shared.cancels.by_pid(call.pid) else {
                continue;
            };
            if let Some(key) = target.get() {
                // The target keeps that connection until this statement has run; it
                // may have let go of it in between.
                let held = key.cancelling();
                if target.get().as_ref() != Some(&key) {
                    continue;
                }
                let signals = self.rare().signals.get_or_insert_default();
                signals.held.push(held);
                if call.terminate {
                    target.mark_terminated();
                    signals.marked.push(target);
                }
                out.splice(call.pid_at.clone(), key.pid.to_string().into_bytes());
                changed = true;
                continue;
            }
            if !self.may_signal(&target) {
                // The server answers for an id it does not know (a warning, false).
                continue;
            }
            let mut value = b"true".to_vec();
            if call.bare_item {
                let name = if call.terminate {
                    " AS pg_terminate_backend"
                } else {
                    " AS pg_cancel_backend"
                };
                value.extend_from_slice(name.as_bytes());
            }
            out.splice(call.call_at.clone(), value);
            if call.terminate {
                self.rare()
                    .signals
                    .get_or_insert_default()
                    .terminate
                    .push(target);
            }
            changed = true;
        }
        changed.then_some(out)
    }

    /// The parameters of a Bind of `query` where they are process ids of Sluice's
    /// clients passed to pg_cancel_backend / pg_terminate_backend (`$n`): mapped to the
    /// server connection each such client uses now, which it keeps until the statement
    /// has run. `rest`: the Bind after its names; None when nothing changes. (A client
    /// using no server connection is left to the server, which knows no such id.)
    pub(super) fn signal_params(&mut self, query: &[u8], rest: &[u8]) -> Option<BytesMut> {
        let calls = sluice_sql::signal::param_calls(query);
        if calls.is_empty() {
            return None;
        }
        let (params, results) = msg::bind_params(rest)?;
        let mut values: Vec<(i16, Option<Vec<u8>>)> = params
            .iter()
            .map(|(c, v)| (*c, v.map(<[u8]>::to_vec)))
            .collect();
        let mut changed = false;
        for (terminate, n) in calls {
            let Some((code, Some(v))) = values.get_mut(n - 1) else {
                continue;
            };
            // Digits: the text format (or a text parameter in binary, the same bytes);
            // else a binary int4 or int8.
            let digits = !v.is_empty() && v.iter().all(u8::is_ascii_digit);
            let pid = match (digits, v.len()) {
                (true, _) => std::str::from_utf8(v).ok().and_then(|t| t.parse().ok()),
                (false, 4) if *code == 1 => v[..].try_into().ok().map(i32::from_be_bytes),
                (false, 8) if *code == 1 => v[..]
                    .try_into()
                    .ok()
                    .map(i64::from_be_bytes)
                    .and_then(|p| i32::try_from(p).ok()),
                _ => None,
            };
            let Some(target) = pid.and_then(|p| self.core.shared.cancels.by_pid(p)) else {
                continue;
            };
            let Some(key) = target.get() else {
                continue;
            };
            let held = key.cancelling();
            if target.get().as_ref() != Some(&key) {
                continue;
            }
            let signals = self.rare().signals.get_or_insert_default();
            signals.held.push(held);
            if terminate {
                target.mark_terminated();
                signals.marked.push(target);
            }
            *v = match (digits, v.len()) {
                (true, _) => key.pid.to_string().into_bytes(),
                (false, 4) => key.pid.to_be_bytes().to_vec(),
                _ => i64::from(key.pid).to_be_bytes().to_vec(),
            };
            changed = true;
        }
        if !changed {
            return None;
        }
        let refs: Vec<(i16, Option<&[u8]>)> =
            values.iter().map(|(c, v)| (*c, v.as_deref())).collect();
        let mut out = BytesMut::new();
        encode::bind_rest(&mut out, &refs, results);
        Some(out)
    }

    /// Whether this client may signal `target`, which holds no server connection for
    /// the server to decide: a superuser, or the same user (as the server allows; role
    /// memberships such as pg_signal_backend are the server's to know, and a client
    /// relying on them gets the server's answer for an id it does not know).
    fn may_signal(&self, target: &Slot) -> bool {
        let superuser = self.s.client_params.get("is_superuser").map(String::as_str) == Some("on");
        let mine = self.s.cancel.slot.client().map(|c| c.info.user());
        superuser || target.client().map(|c| c.info.user()) == mine && mine.is_some()
    }

    /// The client's request has been answered: the connections its signals aimed at go
    /// back to their clients, and the terminates it asked for take effect.
    pub(super) fn settle_signals(&mut self) {
        let Some(signals) = self.rare.as_mut().and_then(|r| r.signals.take()) else {
            return;
        };
        self.settle_rare();
        if signals.failed {
            for target in &signals.marked {
                target.unmark();
            }
        } else {
            for target in &signals.terminate {
                target.terminate();
            }
        }
    }

    /// Session mode (where the relay passes Parse and Bind on as they are), a client
    /// known by Sluice's process id: notes what its Parse means for process ids, and
    /// gives its Bind with other clients' process ids mapped (None: unchanged).
    pub(super) fn session_pids(&mut self, tag: u8, body: &[u8]) -> Option<BytesMut> {
        match tag {
            fe::PARSE if self.virtual_pid() => {
                // (Its notifications are named at acquire: the connection is its own.)
                let (name, sql, _) = msg::parse(body)?;
                self.note_signal_text(name, sql);
                None
            }
            fe::BIND if self.rare.is_some() => self.session_bind(body),
            _ => None,
        }
    }

    /// Session mode, a client known by Sluice's process id: remembers the text of a
    /// statement prepared as `name` that signals other clients by a parameter, for its
    /// Binds (the relay keeps no statement texts in session mode).
    fn note_signal_text(&mut self, name: &[u8], sql: &[u8]) {
        let mentioned = sluice_sql::signal::mentioned(sql);
        if !mentioned && self.rare.as_ref().is_none_or(|r| r.signal_texts.is_empty()) {
            return;
        }
        let texts = &mut self.rare().signal_texts;
        texts.retain(|(n, _)| n[..] != *name);
        if mentioned {
            if texts.len() >= 64 {
                texts.remove(0);
            }
            texts.push((Bytes::copy_from_slice(name), Bytes::copy_from_slice(sql)));
        }
    }

    /// Session mode: the Bind message (`body`) with the process ids of other clients
    /// among its parameters put where the server needs them, when its statement is one
    /// [`Self::note_signal_text`] remembered; None when nothing changes.
    fn session_bind(&mut self, body: &[u8]) -> Option<BytesMut> {
        let texts = &self.rare.as_ref()?.signal_texts;
        if texts.is_empty() {
            return None;
        }
        let (portal, name, rest) = msg::bind(body)?;
        let query = texts.iter().find(|(n, _)| n[..] == *name)?.1.clone();
        let mapped = self.signal_params(&query, rest)?;
        let mut out = BytesMut::new();
        encode::bind(&mut out, portal, name, &mapped);
        Some(out)
    }

    /// A client known by Sluice's process id: notifications carry the sender pid of the client that last
    /// held the connection while sending one (see relay_server::rename_sender).
    pub(super) fn note_notifier(&self, sql: &[u8]) {
        if sql.windows(6).any(|w| w.eq_ignore_ascii_case(b"notify")) {
            self.name_sender();
        }
    }

    /// Notifications the client's server connection sends (a NOTIFY of its own, or
    /// one a trigger or function runs) carry the client's process id.
    pub(super) fn name_sender(&self) {
        let Some(lease) = self.core.lease.as_ref() else {
            return;
        };
        let mut holders = self.core.shared.holders.lock();
        if holders.len() > 65_536 {
            holders.clear();
        }
        holders.insert(lease.pid, self.s.cancel.key.0);
    }
}
