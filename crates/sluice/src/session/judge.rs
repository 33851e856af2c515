//! The rules asked about each statement a client runs, before it is routed: written
//! once for both protocols. The protocol hands over the statement's text (a simple
//! query, a statement being prepared, or the text of the prepared statement being run)
//! and acts on the answer in its own terms: a refusal becomes an error answer and the
//! session goes on, a rewrite a new frame; a route sets where the driver sends the
//! transaction the statement starts (see driver::route).

use super::driver::Core;
use crate::error::{Error, Kind, Side};
use crate::firewall::{Check, Firewall};
use crate::pool::PoolConn;
use crate::rules::{Destination, Rules, Statement, Who};
use crate::stats::{Key as DigestKey, Outcome};
use sluice_config::{FirewallMode, PoolMode};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// A session's view of the rules: the rules as they were at login and the session's
/// side of their match fields. Only sessions with rules to apply carry one.
pub struct Judging {
    rules: Arc<Rules>,
    who: Who,
    firewall: FirewallMode,
    /// Digests are kept (`Shared::digests`).
    digests: bool,
    /// The statement judged last, and the prepared statements of a session whose
    /// protocol relay does not keep their texts (session mode), by name, for digests.
    last: Option<Arc<Statement>>,
    /// (Boxed: most sessions never have one, and every session holds this.)
    prepared: Option<Box<Prepared>>,
    /// Statements to be counted in their digests (boxed, and dropped while the session
    /// rests: every session with digests holds this, and an idle one needs none).
    queue: Option<Box<Queue>>,
    /// What a rule asked for the statement judged last beyond where it goes (boxed:
    /// rare, and every session with digests holds this).
    asked: Option<Box<Asked>>,
}

/// The statement judged last, to be counted in its digest once sent and answered;
/// those sent, by the protocol's token.
#[derive(Default)]
struct Queue {
    next: Option<Pending>,
    wait: std::collections::VecDeque<(u64, Pending)>,
}

impl Judging {
    /// The hash of (user, database, listener) the session's digests are kept under
    /// (its current database is `who.database`; computed per statement, a few
    /// nanoseconds, rather than kept by every session).
    fn session(&self, listener: &str) -> u64 {
        DigestKey::session(&self.who.user, &self.who.database, listener)
    }

    /// Sets (or clears) the statement judged last.
    fn set_next(&mut self, p: Option<Pending>) {
        match (&mut self.queue, p) {
            (Some(q), p) => q.next = p,
            (None, Some(p)) => {
                let mut q = crate::stream::spare::take(&QUEUES).unwrap_or_default();
                q.next = Some(p);
                self.queue = Some(q);
            }
            (None, None) => {}
        }
    }

    /// The session's digest queue goes to the thread's spares (emptied, its room kept).
    fn drop_queue(&mut self) {
        if let Some(mut q) = self.queue.take() {
            q.next = None;
            q.wait.clear();
            if q.wait.capacity() <= QUEUE_ROOM {
                crate::stream::spare::keep(&QUEUES, q);
            }
        }
    }
}

thread_local! {
    /// Digest queues a thread keeps for its sessions' next statements: a session's
    /// queue lives only while it has statements in flight.
    #[allow(clippy::vec_box)]
    static QUEUES: std::cell::RefCell<Vec<Box<Queue>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A spare queue keeps room for at most this many statements in flight.
const QUEUE_ROOM: usize = 64;

/// A rule's timeout for the statement judged last (PostgreSQL: the clock cancels it;
/// MariaDB gets it as max_statement_time in the statement's text), and the cluster a
/// rule mirrors it to.
#[derive(Default)]
struct Asked {
    stmt_timeout: Option<std::time::Duration>,
    mirror_to: Option<Arc<str>>,
}

/// A session's prepared statements by name, for digests (session mode).
type Prepared = std::collections::HashMap<Box<[u8]>, Arc<Statement>, foldhash::fast::RandomState>;

/// Prepared statements remembered per session at most (beyond it, forgotten all).
const PREPARED_MAX: usize = 1024;

/// A statement on its way to a server, to be counted in its digest when answered.
pub struct Pending {
    stmt: Arc<Statement>,
    database: Arc<str>,
    /// `stats::Key::session` of the session's user, database and listener.
    session: u64,
    at: Instant,
}

/// The token of a statement sent to a shared connection (nothing else of the client's
/// is in flight then).
pub const SHARED: u64 = u64::MAX;

impl Judging {
    /// What a session logging in with these names needs (None: no rules apply and
    /// the firewall is off for it).
    pub fn at_login(
        shared: &crate::shared::Shared,
        rules: &arc_swap::ArcSwap<Rules>,
        names: &crate::session::clients::Names,
        listener: &sluice_config::Listener,
        addr: Option<IpAddr>,
    ) -> Option<Box<Judging>> {
        let rules = rules.load_full();
        let firewall = Firewall::mode_for(&shared.config.load(), &names.user, listener);
        let digests = shared.digests.clone();
        if rules.set.is_empty() && firewall == FirewallMode::Off && digests.is_none() {
            return None;
        }
        let who = rules
            .set
            .who((&names.user, &names.database), &names.listener, addr);
        Some(Box::new(Judging {
            rules,
            who,
            firewall,
            digests: digests.is_some(),
            last: None,
            prepared: Default::default(),
            queue: None,
            asked: None,
        }))
    }

    pub fn dialect(&self) -> sluice_sql::Dialect {
        self.rules.cache.dialect()
    }

    /// Whether rules or the firewall look at this session's statements (not digests
    /// alone): a statement that cannot be read is then refused, not let through.
    pub fn strict(&self) -> bool {
        !self.rules.set.is_empty() || self.firewall != FirewallMode::Off
    }
}

/// What the session does with a statement.
#[derive(Debug)]
pub enum Judged {
    /// Run it as it is (to `Core::target` when a rule or table rule routes it).
    Run,
    /// Run this text instead.
    Rewrite(Vec<u8>),
    /// Answer this error instead; nothing reaches a server.
    Refuse(Error),
    /// A BEGIN, answered by Sluice and kept (`Core::deferred`): the transaction's
    /// cluster is its first statement's, and the BEGIN goes there before it.
    Begin,
    /// The end of a transaction still deferred (nothing of it ran): answered by Sluice,
    /// COMMIT (`true`) or ROLLBACK.
    End(bool),
}

/// Asks the rules about the statement `sql` the client is about to run in `database`
/// (None: the database the session is in as far as Sluice knows, which on PostgreSQL
/// never changes).
/// `again`: the text of a statement prepared before (its verdict was counted and
/// logged when it was prepared; only where it goes is asked again). `simple`: a simple
/// query (PostgreSQL Query, MySQL COM_QUERY), the only kind of BEGIN and COMMIT Sluice
/// answers itself; `between`: the client is between requests, outside a transaction (a
/// BEGIN may be deferred).
pub fn judge<C: PoolConn>(
    core: &mut Core<C>,
    sql: &[u8],
    database: Option<&str>,
    (again, simple, between): (bool, bool, bool),
) -> Judged {
    core.odds.take_target();
    if let Some(j) = core.judging.as_deref_mut() {
        j.set_next(None);
        j.asked = None;
    }
    if let Some(database) = database
        && let Some(j) = core.judging.as_deref_mut()
        && *j.who.database != *database
    {
        j.who.database = database.into();
    }
    let Some(j) = core.judging.as_deref() else {
        return Judged::Run;
    };
    let stmt = j.rules.cache.get(&j.rules.set, sql, &j.who);
    let pending = j.digests.then(|| Pending {
        stmt: stmt.clone(),
        database: j.who.database.clone(),
        session: j.session(&core.cfg.name),
        at: Instant::now(),
    });
    if pending.is_some()
        && let Some(j) = core.judging.as_deref_mut()
    {
        j.last = Some(stmt.clone());
    }
    let Some(j) = core.judging.as_deref() else {
        return Judged::Run;
    };
    let v = j.rules.set.verdict(
        &stmt,
        sql,
        &j.who,
        (&j.who.database, &core.cfg.cluster),
        !again,
    );
    if !again {
        for rule in &v.log {
            tracing::info!(
                rule,
                user = %j.who.user,
                listener = %core.cfg.name,
                digest = %format_args!("{:#018x}", stmt.facts.digest),
                text = %stmt.facts.digest_text,
                "statement matched a log rule"
            );
        }
    }
    if let Some((rule, message)) = v.block {
        tracing::debug!(rule, user = %j.who.user, "statement blocked");
        return Judged::Refuse(Error::new(Kind::Denied, Side::Client, message.to_string()));
    }
    let (digest, text) = (stmt.facts.digest, &stmt.facts.digest_text);
    // (The user's hash in the allowlist: computed here, not kept by every session.)
    let user_hash = match j.firewall {
        FirewallMode::Off => 0,
        _ => crate::firewall::user_hash(&j.who.user),
    };
    let who = (user_hash, &*j.who.user);
    if !again
        && core
            .shared
            .firewall
            .check_hashed(j.firewall, who, digest, text)
            == Check::Refused
    {
        return Judged::Refuse(Error::new(
            Kind::Denied,
            Side::Client,
            format!(
                "statement not on the firewall allowlist of user \"{}\" (digest {digest:#018x}: {text})",
                j.who.user
            ),
        ));
    }
    let routes = j.rules.set.routes();
    if let Some(j) = core.judging.as_deref_mut() {
        j.set_next(pending);
    }
    if routes && simple && !again {
        match (transaction_word(&stmt.facts), core.odds.deferred.is_some()) {
            (Some(Tx::Begin), false) if between && core.tx_mode() && core.lease.is_none() => {
                core.odds.make().deferred = Some(sql.to_vec());
                return Judged::Begin;
            }
            (Some(Tx::End(commit)), true) => {
                core.odds.take_deferred();
                return Judged::End(commit);
            }
            _ => {}
        }
    }
    if v.is_plain() {
        return Judged::Run;
    }
    let Some(j) = core.judging.as_deref() else {
        return Judged::Run;
    };
    if let Some(cross) = v.cross {
        return Judged::Refuse(Error::new(Kind::Unsupported, Side::Client, cross));
    }
    if let Some(t) = v.route {
        if let Err(e) = may_move(core, &t) {
            return Judged::Refuse(e);
        }
        core.odds.make().target = Some(t);
    }
    let mirror = if between && !again { v.mirror } else { None };
    let mut stmt_timeout = None;
    let dialect = j.rules.cache.dialect();
    let mut rewrite = v.rewrite;
    if let Some(t) = v.timeout {
        match dialect {
            sluice_sql::Dialect::Postgres => stmt_timeout = Some(t),
            // MariaDB cancels it itself.
            sluice_sql::Dialect::MySql => {
                let text = rewrite.as_deref().unwrap_or(sql);
                let mut with = format!("SET STATEMENT max_statement_time={} FOR ", t.as_secs_f64())
                    .into_bytes();
                with.extend_from_slice(text);
                rewrite = Some(with);
            }
        }
    }
    let judged = match rewrite {
        Some(text) if sluice_sql::facts(&text, dialect).several => Judged::Refuse(Error::new(
            Kind::Denied,
            Side::Client,
            "a rewrite rule made this statement into more than one; it was not sent",
        )),
        Some(text) => Judged::Rewrite(text),
        None => Judged::Run,
    };
    if let Some(j) = core.judging.as_deref_mut() {
        j.asked = (mirror.is_some() || stmt_timeout.is_some()).then(|| {
            Box::new(Asked {
                stmt_timeout,
                mirror_to: mirror,
            })
        });
    }
    judged
}

impl<C: PoolConn> Core<C> {
    /// Statements sent await their answers to be counted in their digests.
    pub fn digests_waiting(&self) -> bool {
        (self.judging.as_ref())
            .is_some_and(|j| j.queue.as_ref().is_some_and(|q| !q.wait.is_empty()))
    }

    /// The statement judged last is not counted in a digest now (a prepare: counted
    /// when executed).
    pub fn skip_digest(&mut self) {
        if let Some(j) = self.judging.as_deref_mut() {
            j.set_next(None);
        }
    }

    /// Nothing sent before is counted in a digest any more (the session was reset).
    pub fn forget_digests(&mut self) {
        if let Some(j) = self.judging.as_deref_mut() {
            j.drop_queue();
        }
    }

    /// The cluster a rule mirrors the statement judged last to.
    pub fn take_mirror(&mut self) -> Option<Arc<str>> {
        self.judging
            .as_deref_mut()?
            .asked
            .as_mut()?
            .mirror_to
            .take()
    }

    /// A rule's timeout for the statement judged last.
    pub fn take_stmt_timeout(&mut self) -> Option<std::time::Duration> {
        self.judging
            .as_deref_mut()?
            .asked
            .as_mut()?
            .stmt_timeout
            .take()
    }
}

enum Tx {
    Begin,
    End(bool),
}

/// A lone BEGIN / START TRANSACTION, or a COMMIT / END / ROLLBACK / ABORT of the whole
/// transaction (not ROLLBACK TO a savepoint).
fn transaction_word(facts: &sluice_sql::Facts) -> Option<Tx> {
    if facts.kind != sluice_sql::Kind::Transaction || facts.several {
        return None;
    }
    let mut words = facts.digest_text.split([' ', ';']);
    let first = words.next()?.to_ascii_lowercase();
    let second = words.next().map(str::to_ascii_lowercase);
    match first.as_str() {
        "begin" | "start" => Some(Tx::Begin),
        "commit" | "end" => Some(Tx::End(true)),
        "rollback" | "abort" if second.as_deref() != Some("to") => Some(Tx::End(false)),
        _ => None,
    }
}

/// Whether the session can run a statement on `t`'s cluster: it can move there unless
/// it holds a server connection on another cluster (inside a transaction, pinned, or
/// in session mode).
fn may_move<C: PoolConn>(core: &Core<C>, t: &Destination) -> Result<(), Error> {
    let on = core.route.cluster().unwrap_or(&core.cfg.cluster);
    if *t.cluster == *on {
        return Ok(());
    }
    let why = match core.mode {
        PoolMode::Session => "a session-mode session stays on one cluster",
        _ if core.lease.is_some() => {
            "a transaction (or a session holding its server connection) runs on one cluster; a cross-cluster transaction is not supported"
        }
        _ => return Ok(()),
    };
    Err(Error::new(
        Kind::Unsupported,
        Side::Client,
        format!(
            "this statement goes to cluster \"{}\" but the session runs on cluster \"{on}\": {why}",
            t.cluster
        ),
    ))
}

/// The session waits with nothing in flight: its digest queue keeps no memory.
pub fn rest<C: PoolConn>(core: &mut Core<C>) {
    if let Some(j) = core.judging.as_deref_mut()
        && j.queue
            .as_ref()
            .is_some_and(|q| q.next.is_none() && q.wait.is_empty())
    {
        j.drop_queue();
    }
}

/// The statement judged last goes to a server now; its answer ends the protocol's
/// entry `token` (tokens grow; [`SHARED`] for a shared connection).
pub fn digest_sent<C: PoolConn>(core: &mut Core<C>, token: u64) {
    if let Some(q) = core
        .judging
        .as_deref_mut()
        .and_then(|j| j.queue.as_deref_mut())
        && let Some(p) = q.next.take()
    {
        q.wait.push_back((token, p));
    }
}

/// The protocol's entry `token` was answered: the statement sent with it is counted in
/// its digest (those sent before it whose answers never came are dropped).
pub fn digest_done<C: PoolConn>(core: &mut Core<C>, token: u64, outcome: Outcome) {
    let Some(j) = core.judging.as_deref_mut() else {
        return;
    };
    let Some(q) = j.queue.as_deref_mut() else {
        return;
    };
    while let Some((t, _)) = q.wait.front() {
        if *t > token {
            break;
        }
        let Some((t, p)) = q.wait.pop_front() else {
            break;
        };
        if t != token {
            continue;
        }
        if let Some(d) = &core.shared.digests {
            let key = DigestKey {
                digest: p.stmt.facts.digest,
                text: &p.stmt.facts.digest_text,
                user: &j.who.user,
                database: &p.database,
                listener: &core.cfg.name,
            };
            let now = Instant::now();
            let took = now.saturating_duration_since(p.at);
            core.io.counters().record(took, &outcome);
            d.record(&key, p.session, (took, now), outcome);
        }
    }
}

/// The statement judged last was prepared under `name` (session mode, where the relay
/// keeps no texts): its executions are counted in its digest (see [`recall`]).
pub fn remember<C: PoolConn>(core: &mut Core<C>, name: &[u8]) {
    let Some(j) = core.judging.as_deref_mut() else {
        return;
    };
    let Some(stmt) = j.last.clone() else {
        return;
    };
    if !j.digests {
        return;
    }
    let prepared = j.prepared.get_or_insert_default();
    if prepared.len() >= PREPARED_MAX {
        prepared.clear();
    }
    prepared.insert(name.into(), stmt);
}

/// The statement prepared under `name` runs now: it is the one to count.
pub fn recall<C: PoolConn>(core: &mut Core<C>, name: &[u8]) {
    let Some(j) = core.judging.as_deref_mut() else {
        return;
    };
    let known = j.prepared.as_ref().and_then(|p| p.get(name));
    let next = known.map(|stmt| Pending {
        stmt: stmt.clone(),
        database: j.who.database.clone(),
        session: j.session(&core.cfg.name),
        at: Instant::now(),
    });
    j.set_next(next);
}

/// The statement prepared under `name` was closed.
pub fn forget<C: PoolConn>(core: &mut Core<C>, name: &[u8]) {
    if let Some(p) = core
        .judging
        .as_deref_mut()
        .and_then(|j| j.prepared.as_mut())
    {
        p.remove(name);
    }
}
