//! A PostgreSQL session, once logged in: the protocol's side of the session driver
//! (session/driver.rs). Client messages are handled in `client.rs`, server messages in
//! `server.rs`; this file holds the relay's state and its hooks for the driver.

mod aborted;
pub mod cancel;
mod client;
mod hooks;
mod idle;
mod muxed;
mod pids;
pub mod replay;
mod route;
mod rules;
mod server;
mod stmts;

use self::stmts::Statements;
use crate::backend::pg::ServerConn;
use crate::error::Error;
use crate::session::cancel::Registration;
use crate::session::driver::{self, Core, End, Seat};
use crate::session::effects::Effects;
use crate::session::timeouts::Clock;
use crate::shared::Shared;
use crate::stream::Stream;
use bytes::BytesMut;
use sluice_sql::Effect;
use sluice_wire_pg::Scanner;
use sluice_wire_pg::encode::{self, Severity};
use sluice_wire_pg::track::Tracker;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;

/// Frames larger than this whose content Sluice does not need stream through in pieces.
pub(crate) const STREAM_OVER: usize = 64 * 1024;

/// A logged-in client's seat (its pool, lease and route) and the rest of its session.
pub type Admitted = (Seat<ServerConn>, Session);

/// `Session::client_fp` before the fingerprints are computed.
pub const UNKNOWN_FP: (u64, u64) = (0, 0);

/// What the PostgreSQL relay needs about a logged-in client, beyond its seat.
pub struct Session {
    pub cancel: Registration,
    /// Values of the server-reported parameters as this client has seen them (shared
    /// with the clients that see the same; copied when this one's change).
    pub client_params: Arc<BTreeMap<String, String>>,
    /// Cached fingerprints of `client_params`, all its per-client parameters and those
    /// that a Parse depends on ([`UNKNOWN_FP`] when it changed: a pair of hashes that
    /// happens to be (0, 0) is only computed again each time, where an `Option` would
    /// cost every session a word).
    pub client_fp: (u64, u64),
}

impl Relay {
    /// What few sessions hold (the box made when there is none).
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_default()
    }

    /// Lets go of the box once all it held is gone.
    fn settle_rare(&mut self) {
        if self.rare.as_ref().is_some_and(|r| {
            r.fatal.is_none()
                && r.named_portal_effects.is_none()
                && r.signals.is_none()
                && r.unnamed_effects.is_none()
                && r.portal_effects.is_none()
                && r.aborted.is_none()
                && r.signal_texts.is_empty()
        }) {
            self.rare = None;
        }
    }

    /// The effects of the unnamed statement (`unnamed`) or portal.
    fn effects(&self, unnamed: bool) -> Effects {
        let r = self.rare.as_deref()?;
        if unnamed {
            r.unnamed_effects.clone()
        } else {
            r.portal_effects.clone()
        }
    }

    /// Sets them (no box is made for none).
    fn set_effects(&mut self, unnamed: bool, e: Effects) {
        if e.is_none() && self.rare.is_none() {
            return;
        }
        let r = self.rare();
        if unnamed {
            r.unnamed_effects = e;
        } else {
            r.portal_effects = e;
        }
    }

    /// The client's transaction is in the failed state Sluice answers for.
    fn aborted(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.aborted.is_some())
    }

    fn signals(&mut self) -> Option<&mut self::pids::Signals> {
        self.rare.as_mut()?.signals.as_deref_mut()
    }
}

impl Session {
    /// Fingerprint of the per-client parameters this client has seen.
    pub fn params_fingerprint(&mut self) -> u64 {
        self.fingerprints().0
    }

    /// Fingerprint of the parameters this client's statements are parsed under.
    pub fn parse_fingerprint(&mut self) -> u64 {
        self.fingerprints().1
    }

    fn fingerprints(&mut self) -> (u64, u64) {
        if self.client_fp != UNKNOWN_FP {
            return self.client_fp;
        }
        let f = (
            crate::backend::pg::params_fingerprint(&self.client_params),
            crate::backend::pg::parse_fingerprint(&self.client_params),
        );
        self.client_fp = f;
        f
    }
}

/// Something to do once the server answers a request.
enum Action {
    /// A simple query's statements' effects, one per CommandComplete. `implicit`: the
    /// statements run in one implicit transaction, so they count only if all succeed.
    Effects { q: VecDeque<Effect>, implicit: bool },
    /// Effects of an Execute, applied when it completes.
    ExecEffects(std::sync::Arc<[Effect]>),
    /// A Parse Sluice sent (for a client or by itself): confirmed when it succeeds,
    /// forgotten when it fails.
    Parse {
        hash: u128,
        client_name: Option<bytes::Bytes>,
    },
    /// The SETs Sluice replayed on a connection: if they fail, the session state is
    /// unknown and the session ends.
    Replay,
    /// A Bind or Describe of the pool-wide statement `hash`: if the server answers
    /// that its copy is stale (0A000, prepared before a schema change), the statement's
    /// text goes by a new name from now on.
    Uses { hash: u128 },
}

/// The client's last unnamed statement, kept in one reused buffer (it changes with
/// almost every query of clients using the extended protocol).
/// (Boxed: 8 bytes in every session, not 32; made at the client's first unnamed Parse.)
#[derive(Default)]
struct Unnamed(Option<Box<UnnamedText>>);

#[derive(Default)]
struct UnnamedText {
    /// Query text, then the parameter types as in the Parse message.
    buf: Vec<u8>,
    query_len: u32,
    set: bool,
}

impl Unnamed {
    pub fn set(&mut self, query: &[u8], types: &[u8]) {
        let u = self.0.get_or_insert_default();
        u.buf.clear();
        u.buf.extend_from_slice(query);
        u.buf.extend_from_slice(types);
        // (A query is at most a frame, and frames are under 4 GiB.)
        u.query_len = u32::try_from(query.len()).unwrap_or(u32::MAX);
        u.set = true;
    }

    pub fn clear(&mut self) {
        if let Some(u) = self.0.as_deref_mut() {
            u.set = false;
        }
    }

    /// (query, parameter types), if there is an unnamed statement.
    pub fn get(&self) -> Option<(&[u8], &[u8])> {
        let u = self.0.as_deref()?;
        let at = (u.query_len as usize).min(u.buf.len());
        u.set.then(|| u.buf.split_at(at))
    }
}

thread_local! {
    /// Trackers' queues that sessions at rest let go of, for the next statement of any
    /// session on the thread (stream/spare.rs).
    static TRACKER_SPARES: std::cell::RefCell<Vec<sluice_wire_pg::track::Queues>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// The same for sessions' queues of actions.
    static ACTION_SPARES: std::cell::RefCell<Vec<crate::session::queue::Kept<(u64, Action)>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// What the last CommandComplete tag's count is.
#[derive(Clone, Copy, PartialEq)]
enum LastTag {
    /// Rows sent (SELECT, FETCH, COPY, MOVE; 0 for the tags without a count).
    Rows,
    /// Rows changed (INSERT, UPDATE, DELETE, MERGE).
    Changed,
    /// COMMIT (a transaction's end that kept its changes).
    Commit,
}

impl LastTag {
    fn of(tag: &[u8]) -> (u64, LastTag) {
        if tag.starts_with(b"COMMIT") {
            return (0, LastTag::Commit);
        }
        let o = crate::stats::Outcome::of_tag(tag);
        if o.affected > 0 {
            (o.affected, LastTag::Changed)
        } else {
            (o.rows, LastTag::Rows)
        }
    }

    /// What the statement did, for its digest.
    fn outcome(self, count: u64) -> crate::stats::Outcome {
        crate::stats::Outcome {
            rows: if self == LastTag::Rows { count } else { 0 },
            affected: if self == LastTag::Changed { count } else { 0 },
            error: false,
        }
    }
}

/// Effects of named portals, by portal name.
type PortalEffects =
    std::collections::HashMap<bytes::Bytes, std::sync::Arc<[Effect]>, foldhash::fast::RandomState>;

pub struct Relay {
    /// What both protocols keep alike (see session/driver.rs).
    core: Core<ServerConn>,
    s: Session,
    tracker: Tracker,
    cscan: Scanner,
    sscan: Scanner,
    /// The server frame being streamed is dropped, not forwarded.
    s_dropping: bool,
    ledger_in_tx: bool,
    stmts: Statements,
    actions: crate::session::queue::Queue<(u64, Action)>,
    next_token: u64,
    /// Last ReadyForQuery status seen.
    status: u8,
    /// Nothing in flight and the last server message was ReadyForQuery.
    at_rest: bool,
    /// After Sluice failed a request itself: drop client messages up to Sync.
    skip_to_sync: bool,
    /// A refused message of an extended-protocol batch whose earlier messages reached
    /// the server: the client's Sync goes to the server (see client.rs refuse).
    sync_owed: bool,
    /// The last CommandComplete tag's count, and what it counts ([`LastTag`]): kept
    /// as numbers, where the tag would be a buffer in every session.
    last_count: u64,
    last_tag: LastTag,
    /// The CopyData frame being streamed from the client is dropped (no COPY running).
    c_dropping: bool,
    /// The client's last unnamed statement (query, parameter types), and whether it
    /// exists on the server connection held now.
    unnamed: Unnamed,
    unnamed_here: bool,
    /// Sync batches sent so far: a statement whose Parse went out in an earlier batch
    /// is not relied on until the server confirms it.
    batch: u64,
    /// The server sent the client a FATAL error: it is about to close the connection.
    server_fatal: bool,
    /// The last error the server sent says a prepared statement's copy is stale.
    stale_error: bool,
    /// The pool-wide statement the client's round on a shared connection runs.
    /// (As bytes: a u128 would align the whole relay to 16 bytes.)
    muxed_stmt: Option<[u8; 16]>,
    /// Bytes of the extended-protocol round kept for a retry still to be handled
    /// (see client.rs `keep_for_retry`).
    round_left: u32,
    /// What few sessions ever hold, in one box (among them, the effects of the
    /// unnamed statement and portal: most statements have none).
    rare: Option<Box<Rare>>,
}

/// What few sessions ever hold (every session holds the word for it).
#[derive(Default)]
struct Rare {
    /// Set when something Sluice did on the client's behalf failed in a way that
    /// leaves the session state unknown (e.g. replaying its SETs).
    fatal: Option<Box<Error>>,
    /// Effects of named portals, by portal name.
    named_portal_effects: Option<Box<PortalEffects>>,
    /// What the client's statements signalling other clients leave to do.
    signals: Option<Box<self::pids::Signals>>,
    /// The session state the unnamed statement and the unnamed portal change.
    unnamed_effects: Effects,
    portal_effects: Effects,
    /// The client's transaction was lost with its server connection: Sluice answers
    /// for it as for a failed transaction until the client ends it (aborted.rs).
    aborted: Option<Box<self::aborted::Aborted>>,
    /// Session mode, a client known by Sluice's process id: the texts of its prepared
    /// statements that signal other clients by a parameter, by name (see pids.rs).
    signal_texts: Vec<(bytes::Bytes, bytes::Bytes)>,
}

driver::relay_core!(Relay, ServerConn);

pub fn run(
    shared: Arc<Shared>,
    (seat, session): Admitted,
    stream: Stream,
    buf: BytesMut,
) -> impl Future<Output = ()> + Send + use<> {
    let clock = Clock::new(crate::session::timeouts::Timeouts::of(&seat.pool));
    let r = Relay {
        core: Core::new(shared, seat, stream, buf, clock),
        s: session,
        tracker: Tracker::new(),
        cscan: Scanner::default(),
        sscan: Scanner::default(),
        s_dropping: false,
        ledger_in_tx: false,
        stmts: Statements::default(),
        actions: Default::default(),
        next_token: 0,
        status: b'I',
        at_rest: true,
        skip_to_sync: false,
        sync_owed: false,
        last_count: 0,
        last_tag: LastTag::Rows,
        c_dropping: false,
        unnamed: Unnamed::default(),
        unnamed_here: false,
        batch: 0,
        server_fatal: false,
        stale_error: false,
        muxed_stmt: None,
        round_left: 0,
        rare: None,
    };
    // Not itself async: the relay's state is the driver's alone, not copied into a
    // future of this function's as well.
    driver::run(r)
}

impl Relay {
    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// Whether the client knows itself by a process id of Sluice's (transaction mode,
    /// or a server connection given at its first statement), not its server's.
    fn virtual_pid(&self) -> bool {
        self.s.cancel.slot.client().is_some()
    }

    /// Points the client's cancel key at the connection it holds (or at nothing).
    fn sync_cancel(&self) {
        self.s
            .cancel
            .slot
            .set(self.core.lease.as_ref().map(|l| l.key.clone()));
    }

    /// Sends the answers Sluice gives itself that are due now.
    fn release_synthetic(&mut self) {
        if self.tracker.has_synthetic() {
            self.tracker.release_synthetic(&mut self.core.io.to_client);
        }
        if self.tracker.has_done() {
            self.handle_done();
        }
    }

    /// Queues an error for the client in its protocol.
    fn client_error(&mut self, severity: Severity, e: &Error) {
        encode::error(
            &mut self.core.io.to_client,
            severity,
            e.sqlstate(),
            &e.message,
        );
    }

    /// After handling what one side sent: what Sluice did on the client's behalf may
    /// have left the session state unknown.
    fn fatal_check(&mut self) -> Result<(), End> {
        match self.rare.as_mut().and_then(|r| r.fatal.take()) {
            Some(e) => {
                self.settle_rare();
                Err(End::Failed(*e))
            }
            None => Ok(()),
        }
    }

    async fn client_step(&mut self) -> Result<(), End> {
        match self.on_client_frames().await {
            Ok(Some(end)) => return Err(end),
            Ok(None) => self.release_synthetic(),
            Err(e) => return Err(End::Failed(e)),
        }
        self.fatal_check()
    }
}
