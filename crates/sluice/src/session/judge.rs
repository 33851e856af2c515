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
use crate::rules::{Destination, Rules, Who};
use sluice_config::{FirewallMode, PoolMode};
use std::net::IpAddr;
use std::sync::Arc;

/// A session's view of the rules: the rules as they were at login and the session's
/// side of their match fields. Only sessions with rules to apply carry one.
pub struct Judging {
    rules: Arc<Rules>,
    who: Who,
    firewall: FirewallMode,
    allowlist: Arc<Firewall>,
}

impl Judging {
    /// What a session logging in with these names needs (None: no rules apply and
    /// the firewall is off for it).
    pub fn at_login(
        shared: &crate::shared::Shared,
        rules: &arc_swap::ArcSwap<Rules>,
        (user, database): (&str, &str),
        listener: &sluice_config::Listener,
        addr: Option<IpAddr>,
    ) -> Option<Box<Judging>> {
        let rules = rules.load_full();
        let firewall = Firewall::mode_for(&shared.config.load(), user, listener);
        if rules.set.is_empty() && firewall == FirewallMode::Off {
            return None;
        }
        let who = rules
            .set
            .who(user, database, (&listener.name, &listener.cluster), addr);
        Some(Box::new(Judging {
            rules,
            who,
            firewall,
            allowlist: shared.firewall.clone(),
        }))
    }

    pub fn dialect(&self) -> sluice_sql::Dialect {
        self.rules.cache.dialect()
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

/// Asks the rules about the statement `sql` the client is about to run in `database`.
/// `again`: the text of a statement prepared before (its verdict was counted and
/// logged when it was prepared; only where it goes is asked again). `between`: the
/// client is between requests, outside a transaction (a BEGIN may be deferred).
pub fn judge<C: PoolConn>(
    core: &mut Core<C>,
    sql: &[u8],
    database: &str,
    (again, between): (bool, bool),
) -> Judged {
    core.target = None;
    let Some(j) = core.judging.as_deref() else {
        return Judged::Run;
    };
    let stmt = j.rules.cache.get(&j.rules.set, sql);
    let v = j.rules.set.verdict(&stmt, sql, &j.who, database, !again);
    if !again {
        for rule in &v.log {
            tracing::info!(
                rule,
                user = %j.who.user,
                listener = %j.who.listener,
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
    if !again && j.allowlist.check(j.firewall, &j.who.user, digest, text) == Check::Refused {
        return Judged::Refuse(Error::new(
            Kind::Denied,
            Side::Client,
            format!(
                "statement not on the firewall allowlist of user \"{}\" (digest {digest:#018x}: {text})",
                j.who.user
            ),
        ));
    }
    if j.rules.set.routes() && !again {
        match (transaction_word(&stmt.facts), core.deferred.is_some()) {
            (Some(Tx::Begin), false) if between && core.tx_mode() && core.lease.is_none() => {
                core.deferred = Some(sql.into());
                return Judged::Begin;
            }
            (Some(Tx::End(commit)), true) => {
                core.deferred = None;
                return Judged::End(commit);
            }
            _ => {}
        }
    }
    if v.is_plain() {
        return Judged::Run;
    }
    if let Some(cross) = v.cross {
        return Judged::Refuse(Error::new(Kind::Unsupported, Side::Client, cross));
    }
    if let Some(t) = v.route {
        if let Err(e) = may_move(core, &t) {
            return Judged::Refuse(e);
        }
        core.target = Some(t);
    }
    match v.rewrite {
        Some(text) if sluice_sql::facts(&text, j.rules.cache.dialect()).several => {
            Judged::Refuse(Error::new(
                Kind::Denied,
                Side::Client,
                "a rewrite rule made this statement into more than one; it was not sent",
            ))
        }
        Some(text) => Judged::Rewrite(text),
        None => Judged::Run,
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
