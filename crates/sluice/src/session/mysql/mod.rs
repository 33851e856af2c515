//! A MySQL session, once logged in: the protocol's side of the session driver
//! (session/driver.rs). Client packets go to the server and server packets
//! to the client unchanged (sequence ids restart at every command on both legs, so they
//! match); Sluice reads only the first bytes of each packet: the command of each request,
//! and, through the response tracker, where each answer ends and the status flags it
//! leaves (in a transaction or not). That tells when a server connection may go back to
//! the pool. Split packets (16 MiB and more) and LOAD DATA LOCAL file contents stream
//! through as whole physical packets.

pub mod change_user;
pub mod errors;
mod hooks;
pub mod kill;
mod muxed;
mod rare;
mod route;
mod rules;
mod settings;
mod state;
mod stmts;

use self::errors::{queue_err, queue_error};
use self::state::{is_stmt_command, known_command};
use crate::backend::mysql::ServerConn;
use crate::error::{Error, Kind, Side};
use crate::session::driver::{self, Core, End, Seat};
use crate::session::effects::Effects;
use crate::shared::Shared;
use crate::stream::Stream;
use bytes::Buf;
use bytes::BytesMut;
use sluice_config::PoolMode;
use sluice_wire_mysql::track::{Step, Tracker};
use sluice_wire_mysql::{consts, packet};
use std::sync::Arc;

thread_local! {
    /// Trackers' queues that sessions at rest let go of, for the next statement of any
    /// session on the thread (stream/spare.rs).
    static TRACKER_SPARES: std::cell::RefCell<Vec<sluice_wire_mysql::track::Queue>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// The same for the queues of what each request in flight is.
    static ORIGIN_SPARES: std::cell::RefCell<Vec<crate::session::queue::Kept<Origin>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Bytes of a server packet's start the tracker looks at.
const HEAD: usize = sluice_wire_mysql::track::HEAD_LEN;

/// A logged-in client's seat (its pool, lease and route) and the rest of its session.
pub type Admitted = (Seat<ServerConn>, Session);

/// What the MySQL relay needs about a logged-in client, beyond its seat.
pub struct Session {
    /// The connection id the client was told.
    pub id: u32,
    /// The client's entry for KILL.
    pub kill: kill::Registration,
    /// How COM_CHANGE_USER logs the client in again (the listener's frontend).
    pub readmit: Arc<dyn change_user::Readmit>,
    /// The scramble Sluice greeted the client with (listeners where Sluice checks
    /// clients itself): a COM_CHANGE_USER's answer is made for it. [`NO_SCRAMBLE`]
    /// where there is none (a scramble's bytes are printable: never all zero; an
    /// `Option` would cost every session a word).
    pub scramble: [u8; 20],
}

pub const NO_SCRAMBLE: [u8; 20] = [0; 20];

impl Session {
    /// The scramble Sluice greeted the client with, if it did.
    pub fn scramble(&self) -> Option<[u8; 20]> {
        (self.scramble != NO_SCRAMBLE).then_some(self.scramble)
    }
}

/// What the client's next packets are.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Incoming {
    /// A new command (sequence id 0).
    Command,
    /// The file of a LOAD DATA LOCAL, up to an empty packet.
    File,
    /// One packet of an authentication exchange (COM_CHANGE_USER).
    Auth,
}

/// Whose command a response in flight answers.
enum Origin {
    /// The client's: forwarded; `effects` apply when it succeeds.
    Client { cmd: u8, effects: Effects },
    /// The client's COM_STMT_PREPARE (transaction mode): its answer gets the client's
    /// own statement id.
    ClientPrepare { hash: u128, sql: bytes::Bytes },
    /// Sluice's own (replaying session state): answered to nobody.
    Injected,
    /// Sluice's own COM_STMT_PREPARE for the client command waiting in its buffer.
    InjectedPrepare { hash: u128 },
    /// A client's KILL, rewritten to a server connection another client holds.
    Kill,
}

/// What became of a client command.
enum Cmd {
    /// It goes to the server as the client sent it.
    Forward,
    /// Sluice answered it, or sent its own version: drop the client's packet.
    Consumed,
    /// It waits (in the client buffer) for an answer to something Sluice sent first.
    Blocked,
    /// Sluice answered it and took it off the client buffer itself.
    Taken,
}

pub struct Relay {
    /// Declared (so dropped) before `core`, which holds the client's socket: the
    /// session leaves KILL's registry before the socket is closed (KILL shuts the
    /// socket through the client's book line, in `core`, which forgets it first).
    s: Session,
    /// What both protocols keep alike (see session/driver.rs).
    core: Core<ServerConn>,
    tracker: Tracker,
    /// What few sessions hold now and then, in one box.
    rare: Option<Box<rare::Rare>>,
    /// Clients whose connection a KILL of ours is aimed at, oldest first.
    kills: crate::session::queue::Queue<self::kill::KillWait>,
    /// One entry per command awaiting its answer, in order.
    origins: crate::session::queue::Queue<Origin>,
    /// The client's prepared statements (transaction mode).
    stmts: self::stmts::ClientStmts,
    /// A command waits for Sluice's own COM_STMT_PREPARE: read no more client packets.
    blocked: bool,
    /// A pipelined command waits for the answers before it (rules may answer it
    /// themselves, and their answer must come in order): see rules.rs.
    wait_rest: bool,
    /// The wait is over: handle the client's buffered packets again.
    resume: bool,
    /// The next server packet starts an answer.
    s_first: bool,
    /// Keep the server connection for the client's next statement (it may read
    /// LAST_INSERT_ID() or FOUND_ROWS()).
    hold_once: bool,
    /// The server packet being relayed belongs to the client (not to Sluice's own).
    s_forward: bool,
    incoming: Incoming,
    /// The next physical packet from the client / server continues a split one.
    c_cont: bool,
    s_cont: bool,
    /// Bytes of the client's current logical packet so far (for the size cap).
    c_logical: u32,
    /// Sequence id of the client's last packet (Sluice's own answers follow it).
    c_seq: u8,
    /// Status flags of the last complete answer.
    status: u16,
}

driver::relay_core!(Relay, ServerConn);

pub fn run(
    shared: Arc<Shared>,
    (seat, session): Admitted,
    stream: Stream,
    buf: BytesMut,
    caps: u64,
) -> impl Future<Output = ()> + Send + use<> {
    // The server enforces query_timeout itself (max_statement_time: see
    // backend/mysql track_state); the clock keeps the idle timeouts.
    let timeouts = crate::session::timeouts::Timeouts {
        query: None,
        ..crate::session::timeouts::Timeouts::of(&seat.pool)
    };
    let clock = crate::session::timeouts::Clock::new(timeouts);
    let r = Relay {
        core: Core::new(shared, seat, stream, buf, clock),
        origins: Default::default(),
        kills: Default::default(),
        rare: None,
        stmts: Default::default(),
        blocked: false,
        wait_rest: false,
        resume: false,
        s_first: true,
        hold_once: false,
        s_forward: true,
        tracker: Tracker::new(caps),
        incoming: Incoming::Command,
        c_cont: false,
        s_cont: false,
        c_logical: 0,
        c_seq: 0,
        status: consts::SERVER_STATUS_AUTOCOMMIT,
        s: session,
    };
    // Not itself async: the relay's state is the driver's alone, not copied into a
    // future of this function's as well.
    driver::run(r)
}

impl Relay {
    /// No request of this client is being served and no packet is half through.
    fn idle(&self) -> bool {
        self.between_commands() && self.core.io.to_server.is_empty()
    }

    /// No answer expected or half read, no command half sent.
    fn between_commands(&self) -> bool {
        self.core.muxed.is_none()
            && self.tracker.is_idle()
            && self.incoming == Incoming::Command
            && !self.c_cont
            && !self.s_cont
    }

    /// Idle, and the server sent nothing unasked.
    fn at_rest(&self) -> bool {
        self.all_answered() && self.core.io.to_server.is_empty()
    }

    /// Every answer the session waits for is in, and the server sent nothing unasked
    /// (packets that get no answer, a statement cache's COM_STMT_CLOSE, may still be on
    /// their way out: what a command waiting for the answers before it asks).
    fn all_answered(&self) -> bool {
        self.between_commands()
            && self.origins.is_empty()
            && self.core.lease.as_ref().is_none_or(|l| l.rbuf.is_empty())
    }

    fn in_transaction(&self) -> bool {
        self.status & consts::SERVER_STATUS_IN_TRANS != 0
            || self.status & consts::SERVER_STATUS_AUTOCOMMIT == 0
    }

    /// Tells KILL which server connection the client holds now.
    fn sync_kill(&self) {
        self.s
            .kill
            .set_server(self.core.lease.as_ref().map(|l| l.conn.id));
    }

    /// Handles every complete physical packet the client sent.
    async fn on_client_packets(&mut self) -> Result<(), End> {
        if self.tracker.bare()
            && let Some(q) = crate::stream::spare::take(&TRACKER_SPARES)
        {
            self.tracker.reuse(q);
        }
        self.origins.unshed(&ORIGIN_SPARES);
        while let Some((mut len, seq)) = packet::header(&self.core.io.cbuf) {
            if self.blocked {
                return Ok(());
            }
            // (A packet that does not continue one starts a new logical packet.)
            let so_far = if self.c_cont { self.c_logical } else { 0 };
            if so_far as usize + len > self.core.max_message() {
                let e = Error::new(
                    Kind::Protocol,
                    Side::Client,
                    "Got a packet bigger than 'max_allowed_packet' bytes",
                );
                queue_err(
                    &mut self.core.io.to_client,
                    seq.wrapping_add(1),
                    consts::ER_NET_PACKET_TOO_LARGE,
                    "08S01",
                    &e.message,
                );
                return Err(End::Failed(e));
            }
            if self.core.io.cbuf.len() < 4 + len {
                return Ok(());
            }
            if !self.c_cont {
                self.c_logical = 0;
                if self.incoming == Incoming::Command {
                    if self.wait_for_rest() {
                        return Ok(());
                    }
                    match self.direct_execution(len) {
                        self::stmts::Direct::Go => {}
                        self::stmts::Direct::Wait => return Ok(()),
                        self::stmts::Direct::Answered => {
                            self.core.io.cbuf.advance(4 + len);
                            continue;
                        }
                    }
                }
                if self.incoming == Incoming::Command {
                    len = match self.apply_rules(len, seq) {
                        self::rules::Ruled::Go(len) => len,
                        self::rules::Ruled::Answered => {
                            self.core.io.cbuf.advance(4 + len);
                            continue;
                        }
                    };
                    len = self.own_session_id(len);
                    len = self.change_user_anew(len);
                    match self.command(len, seq).await? {
                        Cmd::Forward => {}
                        Cmd::Consumed => {
                            self.core.io.cbuf.advance(4 + len);
                            continue;
                        }
                        Cmd::Blocked => {
                            self.blocked = true;
                            return Ok(());
                        }
                        Cmd::Taken => continue,
                    }
                } else if self.incoming == Incoming::Auth
                    || self.incoming == Incoming::File && len == 0
                {
                    // The last packet of the file (empty) or the one auth answer.
                    self.incoming = Incoming::Command;
                }
            }
            self.c_seq = seq;
            self.c_cont = len == packet::MAX_PAYLOAD;
            // (Under the bound just checked, a u32 like it.)
            self.c_logical = self
                .c_logical
                .saturating_add(u32::try_from(len).unwrap_or(u32::MAX));
            if self.core.lease.is_none() {
                // File or auth data with no server to go to: the session is broken.
                return Err(End::Failed(Error::protocol("packet out of order")));
            }
            self.core
                .io
                .to_server
                .extend_from_slice(&self.core.io.cbuf[..4 + len]);
            self.core.io.cbuf.advance(4 + len);
        }
        Ok(())
    }

    /// A new command from the client.
    async fn command(&mut self, len: usize, seq: u8) -> Result<Cmd, End> {
        // An empty packet has no command (the byte after its header is the next one's).
        let cmd = if len == 0 {
            None
        } else {
            self.core.io.cbuf.get(4).copied()
        };
        let answer_seq = seq.wrapping_add(1);
        // A lone query outside a transaction may go again elsewhere if its server
        // connection is lost before it is answered (see driver::arm_retry).
        let alone = cmd == Some(consts::COM_QUERY)
            && len < packet::MAX_PAYLOAD
            && self.at_rest()
            && !self.in_transaction();
        self.core.odds.take_retry();
        // Sluice's own answers (errors) follow this packet.
        self.c_seq = seq;
        if seq != 0 {
            queue_err(
                &mut self.core.io.to_client,
                answer_seq,
                consts::ER_NET_PACKETS_OUT_OF_ORDER,
                "08S01",
                "Got packets out of order",
            );
            return Err(End::Failed(Error::protocol("Got packets out of order")));
        }
        if cmd == Some(consts::COM_QUIT) {
            return Err(End::ClientLeft);
        }
        let Some(cmd) = cmd.filter(|c| known_command(*c)) else {
            // An empty packet or an unknown command: the session goes on.
            queue_err(
                &mut self.core.io.to_client,
                answer_seq,
                consts::ER_UNKNOWN_COM_ERROR,
                "08S01",
                "Unknown command",
            );
            return Ok(Cmd::Consumed);
        };
        if self.core.odds.lost_tx.is_some() {
            match cmd {
                // Outside any transaction, or answered by no one: they go on.
                consts::COM_PING | consts::COM_STMT_CLOSE | consts::COM_STMT_SEND_LONG_DATA => {}
                consts::COM_RESET_CONNECTION | consts::COM_CHANGE_USER => {
                    drop(self.core.odds.take_lost_tx())
                }
                _ => {
                    // The transaction this command belongs to was lost with its server.
                    if let Some(e) = self.core.odds.take_lost_tx() {
                        queue_error(&mut self.core.io.to_client, answer_seq, &e);
                    }
                    return Ok(Cmd::Consumed);
                }
            }
        }
        if let Some(e) = crate::session::driver::route(self, |r| r.class_of(cmd, len)).await? {
            // A rule sends it to a cluster the session cannot reach now.
            queue_error(&mut self.core.io.to_client, answer_seq, &e);
            return Ok(Cmd::Consumed);
        }
        // A read of settings or a SET a driver sends as it connects (settings.rs).
        // (After routing: the pool is the one the session goes to now.)
        let keep = match self.early(cmd, len) {
            self::settings::Early::Answered => return Ok(Cmd::Consumed),
            self::settings::Early::Keep(set) => Some(set),
            self::settings::Early::No => None,
        };
        let kill = match self.kill_target(cmd, len) {
            self::kill::Kill::NotOurs => None,
            self::kill::Kill::Answered => return Ok(Cmd::Consumed),
            self::kill::Kill::Own => {
                let e = Error::new(Kind::Protocol, Side::Client, "killed its own connection");
                return Err(End::Failed(e));
            }
            self::kill::Kill::Server(sql) => Some(sql),
        };
        if cmd == consts::COM_CHANGE_USER && self.core.cfg.logs_in_itself() {
            return Box::pin(self.change_user(len)).await;
        }
        let tx = self.core.mode == PoolMode::Transaction;
        let mut offer = false;
        if tx {
            match self.try_mux(cmd, len) {
                self::muxed::Sharing::Queued(c) => {
                    crate::session::judge::digest_sent(
                        &mut self.core,
                        crate::session::judge::SHARED,
                    );
                    if alone {
                        self.arm_retry(len);
                    }
                    return Ok(c);
                }
                self::muxed::Sharing::WantConnection => offer = kill.is_none(),
                self::muxed::Sharing::No => {}
            }
        }
        // (Session mode keeps no ledger, but rules and digests name the database.)
        let effects = if tx || self.core.judging.is_some() {
            if tx {
                self.hold_once = false;
            }
            let cbuf = std::mem::take(&mut *self.core.io.cbuf);
            let payload = &cbuf[4..4 + len];
            let e = if tx {
                self.command_effects(cmd, payload)
            } else {
                self.schema_effects(cmd, payload)
            };
            *self.core.io.cbuf = cbuf;
            e
        } else {
            None
        };
        if tx && cmd == consts::COM_STMT_CLOSE {
            return self.stmt_command(cmd, len);
        }
        if self.core.lease.is_none() {
            let leased = driver::lease(self).await;
            if leased.is_err()
                && kill.is_some()
                && let Some(k) = self.kills.pop_back()
            {
                // The KILL will not run.
                k.answered(false);
            }
            match leased {
                Ok(l) => {
                    tracing::trace!(client = self.s.id, server = l.conn.id, "lease");
                    self.core.lease = Some(Box::new(l));
                    if !tx {
                        // SETs answered before it (settings.rs) run first (before
                        // KILL can find the connection), unless it forgets them.
                        if matches!(cmd, consts::COM_RESET_CONNECTION | consts::COM_CHANGE_USER) {
                            self.core.ledger = Default::default();
                        }
                        self.run_answered_sets().await?;
                    }
                    self.sync_kill();
                }
                Err(crate::backend::LoginError::Proxy(e)) => {
                    // Nothing reached a server. The session goes on (in transaction
                    // mode its state is Sluice's; in session mode this is its first
                    // statement), and its next one is routed again: a server it cannot
                    // reach is "no server" (9001), not a lost connection.
                    let unreachable = matches!(e.kind, Kind::ServerGone | Kind::Io);
                    let e = if unreachable {
                        e.with_sqlstate("08001")
                    } else {
                        e
                    };
                    queue_error(&mut self.core.io.to_client, answer_seq, &e);
                    if e.kind == Kind::PoolTimeout || unreachable {
                        return Ok(Cmd::Consumed);
                    }
                    return Err(End::Failed(e));
                }
                Err(crate::backend::LoginError::Server(err)) => {
                    let mut s = answer_seq;
                    packet::write_packet(&mut *self.core.io.to_client, &mut s, &err);
                    return Ok(Cmd::Consumed);
                }
            }
            if offer && let Some(c) = self.offer_lease(cmd, len) {
                return Ok(c);
            }
            if self.core.lease.is_none() {
                // The connection went to the shared ones, and the command could not
                // follow it: take another.
                return Box::pin(self.command(len, seq)).await;
            }
        }
        if let Some(sql) = kill {
            if tx {
                self.replay();
            }
            let mut p = vec![consts::COM_QUERY];
            p.extend_from_slice(sql.as_bytes());
            if self.tracker.expect(consts::COM_QUERY) {
                self.origins.push_back(Origin::Kill);
            }
            let mut seq = 0;
            packet::write_packet(&mut *self.core.io.to_server, &mut seq, &p);
            return Ok(Cmd::Consumed);
        }
        if tx {
            self.replay();
            self.send_deferred();
            if is_stmt_command(cmd) {
                return self.stmt_command(cmd, len);
            }
            let cbuf = std::mem::take(&mut *self.core.io.cbuf);
            self.restore_last_insert_id(cmd, &cbuf[4..4 + len]);
            *self.core.io.cbuf = cbuf;
            if cmd == consts::COM_STMT_PREPARE {
                let sql = self::stmts::prepare_text(&self.core.io.cbuf, len);
                let hash = self::stmts::hash(&sql);
                if self.tracker.expect(cmd) {
                    self.origins.push_back(Origin::ClientPrepare { hash, sql });
                }
                return Ok(Cmd::Forward);
            }
        }
        if cmd == consts::COM_CHANGE_USER {
            self.relay_change_user(len);
        }
        if cmd == consts::COM_STMT_PREPARE {
            self.stmts.prepare_sent();
        }
        if self.tracker.expect(cmd) {
            if let Some(set) = keep
                && self.origins.is_empty()
            {
                self.keep_answer(len, set);
            }
            self.origins.push_back(Origin::Client { cmd, effects });
            crate::session::judge::digest_sent(&mut self.core, 0);
        }
        if alone && self.core.lease.is_some() {
            self.arm_retry(len);
        }
        Ok(Cmd::Forward)
    }

    /// The client's query (`len` bytes at the start of its buffer) may go again
    /// elsewhere if its server is lost before it is answered (see driver::arm_retry).
    fn arm_retry(&mut self, len: usize) {
        let class = match self.core.routed_class() {
            Some(class) => class,
            None if self.core.may_retry() => self.class_of(consts::COM_QUERY, len),
            None => sluice_sql::Class::Write,
        };
        let cbuf = std::mem::take(&mut *self.core.io.cbuf);
        if let Some(packet) = cbuf.get(..4 + len) {
            driver::arm_retry(&mut self.core, class, packet);
        }
        *self.core.io.cbuf = cbuf;
    }

    /// Handles every complete physical packet the server sent.
    fn on_server_packets(&mut self) -> Result<(), End> {
        loop {
            let Some(lease) = self.core.lease.as_mut() else {
                return Ok(());
            };
            let rbuf = &mut lease.conn.rbuf;
            let Some((len, _)) = packet::header(rbuf) else {
                return Ok(());
            };
            if rbuf.len() < 4 + len {
                return Ok(());
            }
            if !self.s_cont && self.origins.is_empty() && self.tracker.is_idle() {
                // Nothing was asked: the server's last word before it closes the
                // connection (MySQL's wait_timeout error, say) goes to the client as
                // it is, and the session ends with it.
                self.core.io.to_client.extend_from_slice(&rbuf[..4 + len]);
                rbuf.advance(4 + len);
                return Err(End::ServerClosed);
            }
            let mut head = [0u8; HEAD];
            let hl = len.min(HEAD);
            head[..hl].copy_from_slice(&rbuf[4..4 + hl]);
            let head = &head[..hl];
            let mut done = None;
            if !self.s_cont {
                self.s_forward = !matches!(
                    self.origins.front(),
                    Some(Origin::Injected | Origin::InjectedPrepare { .. })
                );
                match self.tracker.on_packet(head, len) {
                    Ok(Step::Done { ok, status, .. }) => {
                        // An ERR carries no status: only OK and EOF tell.
                        if ok {
                            self.status = status;
                            lease.conn.status = status;
                        }
                        done = Some(ok);
                    }
                    Ok(Step::LocalInfile) => self.incoming = Incoming::File,
                    // caching_sha2's "fast auth succeeded" needs no answer.
                    Ok(Step::Auth) if head != [1, 3] => self.incoming = Incoming::Auth,
                    Ok(_) => {}
                    Err(_) => {
                        return Err(End::Failed(Error::new(
                            Kind::Desync,
                            Side::Server,
                            "the server sent a packet Sluice cannot place",
                        )));
                    }
                }
            }
            self.s_cont = len == packet::MAX_PAYLOAD;
            let at = self.core.io.to_client.len();
            let mut refused = None;
            let first = std::mem::replace(&mut self.s_first, done.is_some());
            if self.s_forward {
                self.core.io.to_client.extend_from_slice(&rbuf[..4 + len]);
                if let Some(r) = self.rare.as_deref_mut() {
                    r.capture_packet(&rbuf[..4 + len]);
                }
            } else if done == Some(false) && matches!(self.origins.front(), Some(Origin::Injected))
            {
                // Why Sluice's own command failed (the session ends with it, below).
                refused = sluice_wire_mysql::resp::err_message(&rbuf[4..4 + len]);
            } else if done == Some(false)
                && matches!(self.origins.front(), Some(Origin::InjectedPrepare { .. }))
            {
                // The statement cannot be prepared here (any more): the waiting command
                // gets the server's error instead.
                let mut err = rbuf[..4 + len].to_vec();
                err[3] = 1;
                self.core.io.to_client.extend_from_slice(&err);
                if let Some((clen, _)) = packet::header(&self.core.io.cbuf) {
                    self.core.io.cbuf.advance(4 + clen);
                }
            }
            rbuf.advance(4 + len);
            if first
                && head.first() == Some(&0)
                && let Some(Origin::ClientPrepare { hash, sql }) = self.origins.front()
            {
                let (hash, sql) = (*hash, sql.clone());
                self.client_prepared(hash, sql, at);
            }
            let Some(ok) = done else { continue };
            // Rows of this answer (any origin's: Sluice's own are not the client's).
            let rows_sent = self.tracker.take_rows();
            match self.origins.pop_front() {
                Some(Origin::InjectedPrepare { hash }) => {
                    if ok {
                        self.injected_prepared(hash);
                    }
                    self.blocked = false;
                    self.resume = true;
                }
                Some(Origin::Injected) if !ok => {
                    let why = refused.unwrap_or_default();
                    return Err(End::Failed(Error::new(
                        Kind::Desync,
                        Side::Server,
                        format!("restoring the session state on a server connection failed: {why}"),
                    )));
                }
                Some(Origin::Client { cmd, effects }) => {
                    if cmd == consts::COM_STMT_PREPARE
                        && ok
                        && let Some(p) = self.tracker.last_prepare()
                    {
                        // Session mode: executions of it count in its digest.
                        let id = p.statement_id.to_le_bytes();
                        crate::session::judge::remember(&mut self.core, &id);
                    }
                    if self.core.digests_waiting() {
                        let outcome = crate::stats::Outcome {
                            rows: rows_sent,
                            affected: self.tracker.last_ok().map_or(0, |o| o.affected_rows),
                            error: !ok,
                        };
                        crate::session::judge::digest_done(&mut self.core, 0, outcome);
                    }
                    if self.rare.is_some() {
                        self.captured(cmd, ok);
                    }
                    let head = head.to_vec();
                    self.client_done(cmd, ok, effects, &head);
                }
                Some(Origin::ClientPrepare { .. }) if !ok => self.stmts.prepare_failed(),
                Some(Origin::Kill) => {
                    let killed = self.kills.pop_front().and_then(|k| k.answered(ok));
                    if killed.is_some_and(|t| Arc::ptr_eq(&t, &self.s.kill.entry)) {
                        // The client killed its own connection: the server closes it
                        // after this answer (1927), and the session ends with it now,
                        // as the server's own would (a statement sent on meanwhile
                        // would only reach a dying connection).
                        return Err(End::ServerClosed);
                    }
                }
                _ => {}
            }
        }
    }
}
