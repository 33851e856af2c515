//! The router in bulk: every route and strategy against clusters in every state.

use super::*;
use crate::topology::{ClusterView, Role, ServerView, Topology};
use std::sync::Arc;
use std::time::Duration;

fn server(name: &str, up: bool, role: Role, lag: Option<u64>) -> ServerView {
    ServerView {
        name: Arc::from(name),
        up,
        role,
        lag: lag.map(Duration::from_secs),
        position: None,
        failed_once: false,
        checked_at: None,
        offline: false,
    }
}

fn topo(discovers: bool, servers: Vec<ServerView>) -> Topology {
    let mut t = Topology::default();
    t.clusters.insert(
        "c".into(),
        ClusterView {
            servers,
            discovers,
            max_replica_lag: Some(Duration::from_secs(10)),
        },
    );
    t
}

fn route(kind: RouteKind, strategy: Strategy) -> Route {
    Route {
        kind,
        strategy,
        ..Route::default()
    }
}

fn rw() -> Route {
    route(RouteKind::ReadWrite, Strategy::FirstAvailable)
}

fn ro(strategy: Strategy) -> Route {
    route(RouteKind::ReadOnly, strategy)
}

fn none(_: &str) -> usize {
    0
}

fn ask(ticket: usize) -> Ask {
    Ask {
        ticket,
        min_position: None,
        avoid: None,
    }
}

fn pick_name(r: &Route, t: &Topology, ticket: usize) -> Result<String, NoRoute> {
    pick(r, t, "c", ask(ticket), &none).map(|s| s.name.to_string())
}

use Role::{Primary, Replica, Unknown};

#[test]
fn read_write_goes_to_the_discovered_primary_in_any_order() {
    // The primary wherever it is listed.
    for at in 0..3 {
        let mut servers: Vec<ServerView> = (0..3)
            .map(|i| server(&format!("s{i}"), true, Replica, Some(0)))
            .collect();
        servers[at].role = Primary;
        servers[at].lag = None;
        let t = topo(true, servers);
        for ticket in 0..5 {
            assert_eq!(pick_name(&rw(), &t, ticket), Ok(format!("s{at}")));
        }
    }
}

#[test]
fn read_write_without_a_primary_waits() {
    let t = topo(
        true,
        vec![
            server("a", true, Replica, Some(0)),
            server("b", false, Primary, None),
        ],
    );
    assert_eq!(pick_name(&rw(), &t, 0), Err(NoRoute::NoPrimary));
    let t = topo(
        true,
        vec![
            server("a", true, Unknown, None),
            server("b", true, Unknown, None),
        ],
    );
    assert_eq!(pick_name(&rw(), &t, 0), Err(NoRoute::Unchecked));
    let t = topo(
        true,
        vec![
            server("a", false, Primary, None),
            server("b", false, Replica, Some(0)),
        ],
    );
    assert_eq!(pick_name(&rw(), &t, 0), Err(NoRoute::AllDown));
    assert!(matches!(
        pick(&rw(), &t, "nope", ask(0), &none),
        Err(NoRoute::UnknownCluster)
    ));
}

#[test]
fn split_brain_gets_no_writes_and_no_fallback() {
    let t = topo(
        true,
        vec![
            server("a", true, Primary, None),
            server("b", true, Primary, None),
            server("c", true, Replica, Some(0)),
        ],
    );
    assert_eq!(pick_name(&rw(), &t, 0), Err(NoRoute::SplitBrain));
    // Reads still go to the replica.
    assert_eq!(pick_name(&ro(Strategy::RoundRobin), &t, 0), Ok("c".into()));
    let t = topo(
        true,
        vec![
            server("a", true, Primary, None),
            server("b", true, Primary, None),
        ],
    );
    assert_eq!(
        pick_name(&ro(Strategy::RoundRobinWithFallback), &t, 0),
        Err(NoRoute::NoReplica)
    );
    // A down claimant does not count.
    let t = topo(
        true,
        vec![
            server("a", false, Primary, None),
            server("b", true, Primary, None),
        ],
    );
    assert_eq!(pick_name(&rw(), &t, 0), Ok("b".into()));
}

#[test]
fn next_available_never_goes_back() {
    let mut a = server("a", true, Unknown, None);
    let b = server("b", true, Unknown, None);
    let first = route(RouteKind::ReadWrite, Strategy::FirstAvailable);
    let next = route(RouteKind::ReadWrite, Strategy::NextAvailable);
    let t = topo(false, vec![a.clone(), b.clone()]);
    assert_eq!(pick_name(&first, &t, 0), Ok("a".into()));
    assert_eq!(pick_name(&next, &t, 0), Ok("a".into()));
    // a failed once and came back.
    a.failed_once = true;
    let t = topo(false, vec![a.clone(), b.clone()]);
    assert_eq!(pick_name(&first, &t, 0), Ok("a".into()));
    assert_eq!(pick_name(&next, &t, 0), Ok("b".into()));
    // With roles: a primary that failed before is not used again by next-available.
    a.role = Primary;
    let t = topo(true, vec![a, server("b", true, Replica, Some(0))]);
    assert_eq!(pick_name(&first, &t, 0), Ok("a".into()));
    assert_eq!(pick_name(&next, &t, 0), Err(NoRoute::NoPrimary));
}

#[test]
fn static_routes_take_servers_in_order() {
    let t = topo(
        false,
        vec![
            server("a", false, Unknown, None),
            server("b", true, Unknown, None),
            server("c", true, Unknown, None),
        ],
    );
    assert_eq!(pick_name(&rw(), &t, 7), Ok("b".into()));
    let seen: Vec<String> = (0..4)
        .map(|i| pick_name(&ro(Strategy::RoundRobin), &t, i).unwrap())
        .collect();
    assert_eq!(seen, ["b", "c", "b", "c"]);
}

#[test]
fn read_only_balances_over_fresh_replicas() {
    let t = topo(
        true,
        vec![
            server("p", true, Primary, None),
            server("r1", true, Replica, Some(0)),
            server("r2", true, Replica, Some(3)),
            server("lagging", true, Replica, Some(11)),
            server("down", false, Replica, Some(0)),
        ],
    );
    for s in [Strategy::RoundRobin, Strategy::RoundRobinWithFallback] {
        let seen: Vec<String> = (0..6).map(|i| pick_name(&ro(s), &t, i).unwrap()).collect();
        assert_eq!(seen, ["r1", "r2", "r1", "r2", "r1", "r2"], "{s}");
    }
    // No lag limit: the lagging replica takes reads too.
    let mut t2 = t.clone();
    t2.clusters.get_mut("c").unwrap().max_replica_lag = None;
    let seen: std::collections::BTreeSet<String> = (0..6)
        .map(|i| pick_name(&ro(Strategy::RoundRobin), &t2, i).unwrap())
        .collect();
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["lagging", "r1", "r2"]
    );
    // least-connections: the replica with fewest in use, whatever the ticket.
    let load = |s: &str| if s == "r1" { 5 } else { 1 };
    for ticket in 0..4 {
        let r = pick(&ro(Strategy::LeastConnections), &t, "c", ask(ticket), &load).unwrap();
        assert_eq!(&*r.name, "r2");
    }
}

#[test]
fn read_only_without_replicas() {
    let t = topo(
        true,
        vec![
            server("p", true, Primary, None),
            server("r", true, Replica, Some(60)),
        ],
    );
    assert_eq!(
        pick_name(&ro(Strategy::RoundRobin), &t, 0),
        Err(NoRoute::NoReplica)
    );
    assert_eq!(
        pick_name(&ro(Strategy::LeastConnections), &t, 0),
        Err(NoRoute::NoReplica)
    );
    assert_eq!(
        pick_name(&ro(Strategy::RoundRobinWithFallback), &t, 0),
        Ok("p".into())
    );
    // Unknown-role servers of a discovering cluster never take reads.
    let t = topo(
        true,
        vec![
            server("p", true, Primary, None),
            server("u", true, Unknown, None),
        ],
    );
    assert_eq!(
        pick_name(&ro(Strategy::RoundRobin), &t, 0),
        Err(NoRoute::NoReplica)
    );
}

#[test]
fn every_route_against_every_state_never_picks_a_down_server() {
    let roles = [Unknown, Primary, Replica];
    let strategies = [
        rw(),
        route(RouteKind::ReadWrite, Strategy::NextAvailable),
        ro(Strategy::RoundRobin),
        ro(Strategy::RoundRobinWithFallback),
        ro(Strategy::LeastConnections),
    ];
    let mut picks = 0;
    for discovers in [false, true] {
        for mask in 0..(6u32.pow(3)) {
            let servers: Vec<ServerView> = (0..3)
                .map(|i| {
                    let d = (mask / 6u32.pow(i)) % 6;
                    let mut s = server(
                        &format!("s{i}"),
                        d % 2 == 0,
                        roles[(d / 2) as usize],
                        Some(0),
                    );
                    s.failed_once = d == 3;
                    s
                })
                .collect();
            let t = topo(discovers, servers);
            let c = &t.clusters["c"];
            for r in &strategies {
                for ticket in 0..3 {
                    if let Ok(s) = pick(r, &t, "c", ask(ticket), &none) {
                        picks += 1;
                        assert!(s.up, "{r:?} picked a down server in {c:?}");
                        if discovers && r.kind == RouteKind::ReadWrite {
                            assert_eq!(s.role, Primary);
                            assert!(!c.split_brain());
                        }
                        if discovers && r.kind == RouteKind::ReadOnly && s.role != Replica {
                            assert_eq!(r.strategy, Strategy::RoundRobinWithFallback);
                        }
                    }
                }
            }
        }
    }
    assert!(picks > 1000);
}

#[test]
fn split_reads_fall_back_to_the_primary_and_wait_for_writes() {
    let split = route(RouteKind::Split, Strategy::RoundRobin);
    let mut r1 = server("r1", true, Replica, Some(0));
    r1.position = Some(100);
    let mut r2 = server("r2", true, Replica, Some(0));
    r2.position = Some(200);
    let mut p = server("p", true, Primary, None);
    p.position = Some(250);
    let t = topo(true, vec![p.clone(), r1.clone(), r2.clone()]);
    let seen: Vec<String> = (0..2).map(|i| pick_name(&split, &t, i).unwrap()).collect();
    assert_eq!(seen, ["r1", "r2"]);
    // Read-your-writes: only a replica at or past the position serves.
    let after = |min: u64, ticket| {
        let a = Ask {
            ticket,
            min_position: Some(min),
            avoid: None,
        };
        pick(&split, &t, "c", a, &none).map(|s| s.name.to_string())
    };
    assert_eq!(after(150, 0), Ok("r2".into()));
    assert_eq!(after(150, 1), Ok("r2".into()));
    assert_eq!(
        after(240, 0),
        Ok("p".into()),
        "no replica has it: the primary"
    );
    // No replica at all: the primary.
    let t = topo(true, vec![p, server("r", true, Replica, Some(60))]);
    assert_eq!(pick_name(&split, &t, 0), Ok("p".into()));
}

#[test]
fn a_retried_read_avoids_the_replica_it_lost() {
    let t = topo(
        true,
        vec![
            server("p", true, Primary, None),
            server("r1", true, Replica, Some(0)),
            server("r2", true, Replica, Some(0)),
        ],
    );
    let avoiding = |route: &Route, avoid: usize, ticket| {
        let a = Ask {
            ticket,
            min_position: None,
            avoid: Some(avoid),
        };
        pick(route, &t, "c", a, &none).map(|s| s.name.to_string())
    };
    let ro = route(RouteKind::ReadOnly, Strategy::RoundRobin);
    for ticket in 0..4 {
        assert_eq!(avoiding(&ro, 1, ticket), Ok("r2".into()));
        assert_eq!(avoiding(&ro, 2, ticket), Ok("r1".into()));
    }
    let lc = route(RouteKind::ReadOnly, Strategy::LeastConnections);
    assert_eq!(avoiding(&lc, 1, 0), Ok("r2".into()));
    // The only replica avoided: read-only has none, split and fallback the primary.
    let t = topo(
        true,
        vec![
            server("p", true, Primary, None),
            server("r1", true, Replica, Some(0)),
        ],
    );
    let a = Ask {
        ticket: 0,
        min_position: None,
        avoid: Some(1),
    };
    assert_eq!(
        pick(&ro, &t, "c", a, &none).map(|s| s.name.to_string()),
        Err(NoRoute::NoReplica)
    );
    let split = route(RouteKind::Split, Strategy::RoundRobin);
    assert_eq!(
        pick(&split, &t, "c", a, &none).map(|s| s.name.to_string()),
        Ok("p".into())
    );
}

#[test]
fn servers_taken_offline_get_no_new_leases() {
    let mut servers = vec![
        server("p", true, Primary, None),
        server("r1", true, Replica, Some(0)),
        server("r2", true, Replica, Some(0)),
    ];
    servers[1].offline = true;
    let t = topo(true, servers.clone());
    let reads: Vec<_> = (0..4)
        .map(|i| pick_name(&ro(Strategy::RoundRobin), &t, i))
        .collect();
    assert!(reads.iter().all(|r| r.as_deref() == Ok("r2")), "{reads:?}");
    servers[0].offline = true;
    let t = topo(true, servers.clone());
    assert_eq!(pick_name(&rw(), &t, 0), Err(NoRoute::NoPrimary));
    servers[2].offline = true;
    let t = topo(true, servers);
    assert_eq!(
        pick_name(&ro(Strategy::RoundRobinWithFallback), &t, 0),
        Err(NoRoute::AllDown)
    );
}
