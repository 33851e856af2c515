//! The `mirror` rule action: a copy of a client's statement runs on another cluster's
//! primary, on a connection of the pool of the client's user there, and its answer is
//! dropped. It never delays or fails the client's statement: it runs in a task of its
//! own, at most [`IN_FLIGHT`] at a time across the process (more are dropped and
//! counted), each bounded in time. Only statements outside a transaction, and only
//! those that change nothing of the session (no SET, USE, lock, temporary table), are
//! mirrored.

use super::driver::Relay;
use crate::backend::Lookup;
use crate::router::Ask;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Mirrored statements running at once, at most.
pub const IN_FLIGHT: usize = 64;
/// How long a mirrored statement may take (waiting for a connection included).
const TIME: Duration = Duration::from_secs(30);

/// Runs a copy of `sql` on `cluster`'s primary, answer dropped.
pub fn send<R: Relay>(r: &R, cluster: &str, sql: &[u8])
where
    R::Conn: Lookup,
{
    let shared = r.shared.clone();
    let counters = &shared.mirrors;
    // A statement that changes the session (SET, USE, locks, temporary tables) is not
    // mirrored: the pooled connection it ran on would keep the change.
    let changes = match r.judging.as_deref().map(|j| j.dialect()) {
        Some(sluice_sql::Dialect::MySql) => sluice_sql::effects_mysql(sql),
        _ => sluice_sql::effects(sql),
    };
    if changes.iter().any(|e| *e != sluice_sql::Effect::None) {
        counters.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if counters.running.fetch_add(1, Ordering::AcqRel) >= IN_FLIGHT {
        counters.running.fetch_sub(1, Ordering::AcqRel);
        counters.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let pool = (|| {
        let topology = shared.topology.snapshot();
        let config = shared.config.load();
        let route = sluice_config::Route::default();
        let picked =
            crate::router::pick(&route, &topology, cluster, Ask::default(), &|_| 0).ok()?;
        let server = config.servers.get(&*picked.name)?;
        let pools = (R::pools(&shared), &r.pool);
        super::reroute::pool_on_server(
            &shared,
            &r.cfg,
            pools,
            server,
            (R::retarget, R::newer_login),
        )
    })();
    let (Some(pool), Ok(sql)) = (pool, String::from_utf8(sql.to_vec())) else {
        counters.running.fetch_sub(1, Ordering::AcqRel);
        counters.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    };
    tokio::spawn(async move {
        let run = async {
            let lease = pool.lease().await.ok()?;
            crate::backend::lookup(lease, &sql, &[]).await.ok()
        };
        let done = tokio::time::timeout(TIME, run).await;
        let counters = &shared.mirrors;
        match done {
            Ok(Some(_)) => counters.done.fetch_add(1, Ordering::Relaxed),
            _ => counters.failed.fetch_add(1, Ordering::Relaxed),
        };
        counters.running.fetch_sub(1, Ordering::AcqRel);
    });
}
