//! COM_CHANGE_USER. Where Sluice checks clients itself (configured users, and
//! pass-through users of a listener with `auth_user`) it logs the client in again: the
//! answer in the command is checked against the scramble of the client's login, as a
//! server does, or (another plugin, or a wrong answer) the client is asked again with an
//! auth switch and a fresh scramble; the same checks as at login follow (the
//! frontend's, through [`Readmit`]), then the session moves to the new user's pool with
//! a clean state, as a server would leave it. A refused change keeps the old user and
//! the session, as MariaDB does.
//!
//! With pass-through auth without `auth_user` only the server can check the password:
//! the command goes to
//! the client's server connection, which from then on is logged in as a user its pool
//! is not for. The client keeps it (pinned, reason `change_user`) and it is closed when
//! the client is done with it, never reset and handed to another client.

use super::errors::{queue_err, queue_error};
use super::{Cmd, Relay};
use crate::backend::LoginError;
use crate::backend::mysql::ServerConn;
use crate::pool::Pool;
use crate::session::PinReason;
use crate::session::driver::End;
use crate::session::pump::Pump;
use bytes::Buf;
use sluice_config::PoolMode;
use sluice_wire_mysql::handshake::ChangeUser;
use sluice_wire_mysql::{consts, packet, resp};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The user a COM_CHANGE_USER changes to, once admitted: its pool and how it pools.
pub struct NewUser {
    pub user: String,
    pub pool: Arc<Pool<ServerConn>>,
    pub mode: PoolMode,
    /// The client keeps a server connection from now on (session mode with
    /// `assign_server = "login"`), not from its next statement.
    pub hold: bool,
    pub max_message: usize,
    /// The sequence id Sluice's answer takes.
    pub seq: u8,
}

/// The frontend's side of a change of user: authenticates the client again (on its
/// socket, through `io`) and plans the new user's pool. `None`: refused, the answer
/// queued for the client; `Err`: the session ends.
pub trait Readmit: Send + Sync {
    fn readmit<'a>(
        &'a self,
        shared: &'a Arc<crate::shared::Shared>,
        io: &'a mut Pump,
        cu: ChangeUser,
        login: (u64, Option<[u8; 20]>),
        max_message: usize,
    ) -> Pin<Box<dyn Future<Output = Result<Option<NewUser>, End>> + Send + 'a>>;
}

impl Relay {
    /// The client's COM_CHANGE_USER on a listener with configured users.
    pub(super) async fn change_user(&mut self, len: usize) -> Result<Cmd, End> {
        let body = self
            .core
            .io
            .cbuf
            .get(5..4 + len)
            .unwrap_or_default()
            .to_vec();
        self.core.io.cbuf.advance(4 + len);
        let Some(cu) = ChangeUser::parse(&body, self.tracker.caps()) else {
            let msg = "Malformed communication packet";
            queue_err(
                &mut self.core.io.to_client,
                1,
                consts::ER_MALFORMED_PACKET,
                "08S01",
                msg,
            );
            return Ok(Cmd::Taken);
        };
        if !self.at_rest() {
            // Clients wait for their answers before changing user: the answers could not
            // be told apart any more.
            let e = crate::error::Error::protocol("COM_CHANGE_USER while commands are in flight");
            return Err(End::Failed(e));
        }
        // Everything before the command is answered; the exchange is the client's own.
        self.core.io.flush_client_now().await;
        let readmit = self.s.readmit.clone();
        let (shared, max) = (self.core.shared.clone(), self.core.max_message());
        let caps = self.tracker.caps();
        let login = (caps, self.s.scramble());
        let new = readmit.readmit(&shared, &mut self.core.io, cu, login, max);
        let Some(new) = new.await? else {
            return Ok(Cmd::Taken);
        };
        let NewUser {
            user,
            pool,
            mode,
            hold,
            max_message,
            seq,
        } = new;
        // As at login: a first server connection proves the server takes this user and
        // database, before the client leaves its old ones.
        let same_pool = Arc::ptr_eq(&pool, &self.core.pool);
        let mut lease = None;
        if !same_pool && (hold || pool.counts().0 == 0) {
            match pool.lease().await {
                Ok(l) => lease = Some(Box::new(l)),
                Err(LoginError::Server(err)) => {
                    let mut s = seq;
                    packet::write_packet(&mut *self.core.io.to_client, &mut s, &err);
                    return Ok(Cmd::Taken);
                }
                Err(LoginError::Proxy(e)) => {
                    queue_error(&mut self.core.io.to_client, seq, &e);
                    return Ok(Cmd::Taken);
                }
            }
        }
        if let Some(mut old) = self.core.lease.take() {
            if !same_pool {
                old.reset_and_put_back().await;
            } else if old.conn.reset().await.is_ok() {
                // The same pool (a change to the same user, as a session reset): the
                // connection held is reset in place, not given back and waited for.
                lease = Some(old);
            } else {
                old.discard();
            }
        }
        if !hold && let Some(l) = lease.take() {
            l.put_back();
        }
        self.core.pool = pool;
        self.core.mode = mode;
        self.core.lease = lease;
        self.core.set_max_message(max_message);
        self.rejudge(&user, &self.core.pool.key.database.clone());
        self.s.kill.set_user(&user);
        self.sync_kill();
        self.forget_session_state();
        self.status = consts::SERVER_STATUS_AUTOCOMMIT;
        let mut ok = Vec::new();
        resp::encode_ok(&mut ok, caps, 0, 0, self.status, 0, b"");
        let mut s = seq;
        packet::write_packet(&mut *self.core.io.to_client, &mut s, &ok);
        Ok(Cmd::Taken)
    }

    /// A pass-through COM_CHANGE_USER goes to the server connection: whatever the
    /// answer, the connection may be logged in as another user from now on.
    /// A pass-through COM_CHANGE_USER in transaction mode: the client made its answer
    /// for the scramble of the connection it logged in on, which is not the one it holds
    /// now, so the server would refuse it (1045). The command goes without an answer and
    /// naming a plugin no account uses: the server then asks the client (through Sluice)
    /// to authenticate again with this connection's own scramble. Returns the
    /// command's new length.
    pub(super) fn change_user_anew(&mut self, len: usize) -> usize {
        if self.core.mode != PoolMode::Transaction
            || self.core.cfg.logs_in_itself()
            || len >= packet::MAX_PAYLOAD
            || self.core.io.cbuf.get(4) != Some(&consts::COM_CHANGE_USER)
        {
            return len;
        }
        let Some(mut cu) = self
            .core
            .io
            .cbuf
            .get(5..4 + len)
            .and_then(|b| ChangeUser::parse(b, self.tracker.caps()))
        else {
            return len;
        };
        if self.tracker.caps() & consts::CLIENT_PLUGIN_AUTH == 0 || cu.charset.is_none() {
            // No way to name another plugin: the server checks the answer as it is.
            return len;
        }
        // What follows the plugin name (connection attributes) goes along as it is.
        let body = self.core.io.cbuf.get(5..4 + len).unwrap_or_default();
        let mut head = Vec::new();
        cu.encode(self.tracker.caps(), &mut head);
        let Some(attrs) = body.strip_prefix(&head[..]).map(<[u8]>::to_vec) else {
            return len;
        };
        cu.auth_response.clear();
        cu.auth_plugin = Some(b"sluice_reauthenticate".to_vec());
        let mut p = vec![consts::COM_CHANGE_USER];
        cu.encode(self.tracker.caps(), &mut p);
        p.extend_from_slice(&attrs);
        let rest = self.core.io.cbuf.split_off(4 + len);
        self.core.io.cbuf.clear();
        let mut seq = 0;
        packet::write_packet(&mut *self.core.io.cbuf, &mut seq, &p);
        self.core.io.cbuf.unsplit(rest);
        p.len()
    }

    pub(super) fn relay_change_user(&mut self, len: usize) {
        if let Some(l) = self.core.lease.as_mut() {
            l.conn.foreign = true;
        }
        let body = self.core.io.cbuf.get(5..4 + len).unwrap_or_default();
        self.rare().changing_to = ChangeUser::parse(body, self.tracker.caps()).map(|cu| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (text(&cu.username), text(&cu.database))
        });
    }

    /// The session's user (or database) is another now: the rules and the firewall
    /// look at it as at a login of that user.
    pub(super) fn rejudge(&mut self, user: &str, database: &str) {
        let shared = self.core.shared.clone();
        // (Where the client connected from, as the book keeps it.)
        let addr = (self.core.client.as_ref()).and_then(|c| c.info.addr.map(|a| a.ip()));
        let names =
            crate::session::clients::Names::of(&shared, &self.core.cfg.name, user, database);
        self.core.judging = crate::session::judge::Judging::at_login(
            &shared,
            &shared.my.rules,
            &names,
            &self.core.cfg,
            addr,
        );
        self.core.odds.take_deferred();
        self.core.odds.take_target();
        self.core.forget_digests();
    }

    /// The server took a relayed COM_CHANGE_USER: it reset the session, and the
    /// connection is the client's alone.
    pub(super) fn user_changed(&mut self) {
        self.forget_session_state();
        self.pin_foreign();
        if let Some((user, database)) = self.rare.as_mut().and_then(|r| r.changing_to.take()) {
            self.rejudge(&user, &database);
        }
    }

    /// A client holding a connection logged in as the user it changed to keeps it.
    pub(super) fn pin_foreign(&mut self) {
        let foreign = self.core.lease.as_ref().is_some_and(|l| l.conn.foreign);
        if foreign && self.core.mode == PoolMode::Transaction {
            let pins = &self.core.shared.pins;
            self.core.ledger.set_pin(PinReason::ChangeUser, true, pins);
        }
    }

    /// The server forgot the client's session (COM_RESET_CONNECTION, COM_CHANGE_USER):
    /// so does Sluice.
    pub(super) fn forget_session_state(&mut self) {
        self.core.ledger = Default::default();
        self.stmts = Default::default();
        if let Some(r) = self.rare.as_mut() {
            r.last_insert = None;
        }
        self.hold_once = false;
        if let Some(l) = self.core.lease.as_mut() {
            l.conn.applied.clear();
            l.conn.stmts.clear();
        }
    }
}
