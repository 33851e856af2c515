//! Before a client request: the session's route asked again in transaction mode (and a
//! PAUSE waited out), then a server connection from the pool it names, with another
//! route tried when that server cannot be reached. Part of the session driver
//! (`driver.rs`), which re-exports [`route`] and [`lease`].

use super::TxStatus;
use super::driver::{Core, End, Relay};
use super::lost;
use crate::error::{Error, Kind, Side};
use crate::pool::{Lease, LoginError};
use std::sync::Arc;

/// Before a client request that may start a transaction: in transaction mode, a session
/// holding no server connection may move to another server's pool (`class`: what it is
/// about to run, asked only where the route splits reads from writes; a read that a
/// replica would serve once it has replayed the session's last write waits for that up
/// to `read_your_writes_timeout`, then goes to the primary), as does a session-mode
/// session before its first statement; in session mode, a session whose server is no
/// longer its route's (a primary demoted in place) ends.
/// A request that a rule sends to a cluster the session cannot reach now is refused
/// with the error returned (`Ok(Some)`); nothing was sent anywhere.
pub async fn route<R: Relay>(
    r: &mut R,
    class: impl FnOnce(&R) -> sluice_sql::Class,
) -> Result<Option<Error>, End> {
    // A BEGIN Sluice answered itself holds nothing on a server (its answer may still
    // wait in the client's queue).
    let between = (r.between_requests() || r.odds.deferred.is_some()) && r.muxed.is_none();
    r.classified = false;
    // (In session mode a session holds none only before its first statement, with
    // `assign_server = "first_statement"`: it goes where its route says now.)
    if r.lease.is_none() && between {
        if !r.tx_mode() {
            // A rule's destination moves transactions; the session's one connection
            // comes from its route (as it would have at login).
            r.odds.take_target();
        }
        let cluster = r
            .odds
            .target
            .as_ref()
            .map_or(r.cfg.cluster.as_str(), |t| &t.cluster);
        if r.shared.control.is_paused(cluster) {
            paused(r).await?;
        }
        let class = if r.cfg.route.kind == sluice_config::RouteKind::Split {
            match (&r.odds.deferred, r.judging.as_deref()) {
                // The transaction's BEGIN says where it may run.
                (Some(begin), Some(j)) => sluice_sql::classify(begin, j.dialect()),
                _ => {
                    // (What the request itself is: the protocol may reuse it.)
                    r.classified = true;
                    class(r)
                }
            }
        } else {
            sluice_sql::Class::Write
        };
        r.class = class;
        let mut deadline = None;
        loop {
            let seen = r.shared.topology.snapshot().generation;
            let catch_up = match reroute_now(r) {
                Ok(None) => break,
                Ok(Some(c)) => c,
                Err(stuck) => {
                    let e = Error::new(Kind::ServerGone, Side::Server, stuck);
                    return Ok(Some(e.with_sqlstate("08001")));
                }
            };
            let now = tokio::time::Instant::now();
            let until = *deadline.get_or_insert(now + r.cfg.route.read_your_writes_timeout);
            if now >= until {
                break;
            }
            super::reroute::wake(&r.shared, &r.cfg.cluster, catch_up);
            r.shared.topology.changed_since(seen, until - now).await;
        }
    }
    if !r.tx_mode() && between && r.tx_status() == TxStatus::Idle {
        let core: &mut Core<R::Conn> = r;
        let server = &core.pool.key.server;
        if !super::reroute::still_routed(&core.shared, &core.cfg, &mut core.route, server) {
            return Err(End::Failed(super::reroute::demoted(&core.cfg, server)));
        }
    }
    Ok(None)
}

/// PAUSE holds the cluster the transaction is about to run on: it waits for RESUME
/// (or shutdown). A client that leaves meanwhile ends its session: its socket is
/// watched for the peer closing it, or KILL CLIENT shutting it down (both raise
/// read-closed, whatever bytes are still unread).
async fn paused<R: Relay>(r: &mut R) -> Result<(), End> {
    use tokio::io::Interest;
    let cluster: String = r
        .odds
        .target
        .as_ref()
        .map_or(r.cfg.cluster.as_str(), |t| &t.cluster)
        .to_owned();
    let (shared, shutdown) = (r.shared.clone(), r.shared.shutdown.clone());
    let hold = shared.control.hold(&cluster, &shutdown);
    tokio::pin!(hold);
    loop {
        let tcp = r.io.client.tcp();
        tokio::select! {
            _ = &mut hold => return Ok(()),
            ready = tcp.ready(Interest::READABLE) => match ready {
                Ok(ready) if !ready.is_read_closed() => {
                    // Data (a request that waits its turn): wait for the next change.
                    let _ = tcp.try_io(Interest::READABLE, || {
                        Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                    });
                }
                _ => return Err(End::ClientLeft),
            },
        }
    }
}

/// Asks the session's route again (session/reroute.rs) and moves it to the pool it
/// names; returns whether its read would rather wait for a replica, or why it cannot
/// go where a rule sends it.
fn reroute_now<R: Relay>(r: &mut R) -> Result<Option<super::reroute::CatchUp>, String> {
    let core: &mut Core<R::Conn> = r;
    let pools = (R::pools(&core.shared), &core.pool);
    let next = super::reroute::reroute(
        &core.shared,
        &core.cfg,
        pools,
        &mut core.route,
        (core.class, core.odds.target.as_ref()),
        (R::retarget, R::newer_login),
    );
    if let Some(stuck) = next.stuck {
        return Err(stuck);
    }
    if let Some(p) = next.pool {
        core.pool = p;
    }
    Ok(next.catch_up)
}

/// Takes a server connection from the session's pool. When its server cannot be
/// reached (nothing of the request was sent anywhere), a session that can open
/// connections elsewhere asks its route again: a route that reads from
/// replicas at once, avoiding that server; any route as the topology changes (the
/// server marked down, a replica promoted), up to the pool's `wait_timeout`, so that a
/// client waits out a failover instead of failing until the checker has caught up.
pub async fn lease<R: Relay>(r: &mut R) -> Result<Lease<R::Conn>, LoginError> {
    let pool = r.pool.clone();
    let first = pool.lease().await;
    let unreachable = matches!(&first, Err(LoginError::Proxy(e)) if lost::gone_server(e));
    // (A session-mode session asks for one only at its first statement, with no state
    // on any server yet: it may wait as well.)
    if !unreachable || pool.opener().is_none() {
        return first;
    }
    let server = pool.key.server.clone();
    r.shared.topology.check_now(&server);
    if r.cfg.route.kind != sluice_config::RouteKind::ReadWrite {
        r.route.avoid(&server);
    }
    let deadline = tokio::time::Instant::now() + pool.settings().wait_timeout;
    let mut routes = r.shared.topology.snapshot().routes;
    let mut last = first;
    loop {
        let seen = r.shared.topology.snapshot();
        let (seen, now_routes) = (seen.generation, seen.routes);
        let _ = reroute_now(r);
        if !Arc::ptr_eq(&r.pool, &pool) {
            tracing::info!(client = r.id(), %server, to = %r.pool.key.server, "server unreachable: the request goes to another");
            return r.pool.clone().lease().await;
        }
        if now_routes != routes {
            // Servers came or went (this one back after a restart, say): try it again.
            // One attempt, within the time left (a refused connect is quick).
            routes = now_routes;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Ok(again) = tokio::time::timeout(left, pool.lease()).await else {
                return last;
            };
            if !matches!(&again, Err(LoginError::Proxy(e)) if lost::gone_server(e)) {
                return again;
            }
            last = again;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return last;
        }
        r.shared.topology.changed_since(seen, deadline - now).await;
    }
}
