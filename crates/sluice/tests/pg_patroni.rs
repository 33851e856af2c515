//! Sluice behind a real HA manager: Patroni (with etcd) runs three PostgreSQL nodes;
//! Sluice's read-write route finds the leader among them, follows a `patronictl
//! switchover` and the election after a SIGKILL of the leader, with no change to its
//! configuration.

use crate::common;

use common::{addr, connect, sluice};
use sluice_testkit::PatroniCluster;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Waits until a new client of `a` lands on a primary whose port satisfies `want`.
async fn primary_on(a: SocketAddr, want: impl Fn(u16) -> bool, within: Duration) -> u16 {
    match landed(a, want, within).await {
        Some(port) => port,
        None => panic!("no primary as wanted through {a} within {within:?}"),
    }
}

/// [`primary_on`] without the panic: None when no client landed as wanted in time.
async fn landed(a: SocketAddr, want: impl Fn(u16) -> bool, within: Duration) -> Option<u16> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(c) = connect(a, "postgres", "", "postgres").await
            && let Ok(row) = c
                .query_one("select inet_server_port(), pg_is_in_recovery()", &[])
                .await
        {
            let (port, replica): (i32, bool) = (row.get(0), row.get(1));
            let port = u16::try_from(port).unwrap_or_default();
            if !replica && want(port) {
                return Some(port);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_switchover_and_a_killed_leader() {
    let cluster = tokio::task::spawn_blocking(PatroniCluster::start)
        .await
        .expect("join")
        .expect("start etcd and three Patroni nodes");
    let ports = cluster.ports();
    let servers = [("n0", ports[0]), ("n1", ports[1]), ("n2", ports[2])];
    let text = common::routes_config("postgres", &servers, ("postgres", ""), "10s", "round-robin");
    let h = sluice(&text).await;
    let rw = addr(&h, "rw");
    let leader = cluster.leader().expect("a leader");
    primary_on(rw, |p| p == ports[leader], Duration::from_secs(30)).await;

    // A planned switchover: Sluice follows within an interval or two.
    let candidate = (leader + 1) % 3;
    let c = std::sync::Arc::new(cluster);
    let c2 = c.clone();
    // Patroni refuses a switchover to a replica it does not find ready yet, right after
    // the cluster came up (the leader stays): asked again then. Sluice must follow
    // whichever switchover happens.
    let mut followed = None;
    for _ in 0..3 {
        let c3 = c2.clone();
        let _ = tokio::task::spawn_blocking(move || c3.switchover(candidate)).await;
        followed = landed(rw, |p| p == ports[candidate], Duration::from_secs(25)).await;
        if followed.is_some() || c2.is_leader(candidate) == Some(true) {
            break;
        }
    }
    drop(c2);
    if followed.is_none() {
        primary_on(rw, |p| p == ports[candidate], Duration::from_secs(20)).await;
    }

    // The leader crashes: Patroni elects another once its key expires (ttl 20 s).
    let mut cluster = std::sync::Arc::try_unwrap(c).expect("one owner");
    cluster.kill(candidate);
    let new = primary_on(rw, |p| p != ports[candidate], Duration::from_secs(90)).await;
    assert!(ports.contains(&new));
    let c = connect(rw, "postgres", "", "postgres").await.unwrap();
    c.batch_execute("create table after_patroni (n int)")
        .await
        .unwrap();
    drop(h);
}
