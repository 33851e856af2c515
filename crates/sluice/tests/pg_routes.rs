//! Routes over a real primary with streaming replicas: roles discovered from a
//! shuffled server list, reads spread over the replicas and kept off a lagging one, a
//! promotion followed, no writes while no primary (or two) is known.

use crate::common;
use crate::common::hs_lines as lines;

use common::{addr, connect, sluice, sqlstate};
use sluice_testkit::PgServer;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A config with the given servers (name, port) in one cluster checked as the
/// superuser, a read-write listener `rw` and a read-only listener `ro`.
fn config(servers: &[(&str, u16)], pw: &str, lag: &str, strategy: &str) -> String {
    common::routes_config("postgres", servers, ("postgres", pw), lag, strategy)
}

/// The port of the server a new client of `a` lands on, and whether it is a replica.
async fn lands_on(a: SocketAddr, pw: &str) -> Result<(i32, bool), tokio_postgres::Error> {
    let c = connect(a, "postgres", pw, "postgres").await?;
    let row = c
        .query_one("select inet_server_port(), pg_is_in_recovery()", &[])
        .await?;
    Ok((row.get(0), row.get(1)))
}

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default()
}

/// Retries `lands_on` until `want` holds (the checker needs an interval or two).
async fn eventually(a: SocketAddr, pw: &str, want: impl Fn(i32, bool) -> bool) -> (i32, bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok((port, replica)) = lands_on(a, pw).await
            && want(port, replica)
        {
            return (port, replica);
        }
        assert!(
            Instant::now() < deadline,
            "no client of {a} landed where wanted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_discovered_reads_spread_and_lagging_replica_skipped() {
    let primary = PgServer::start().expect("primary");
    let r1 = primary.start_replica().expect("replica 1");
    let r2 = primary.start_replica().expect("replica 2");
    let pw = primary.password().to_owned();
    let (p, p1, p2) = (primary.port(), r1.port(), r2.port());
    // Replicas listed first: roles come from the servers, not the order.
    let text = config(
        &[("r2", p2), ("primary", p), ("r1", p1)],
        &pw,
        "1s",
        "round-robin",
    );
    let h = sluice(&text).await;
    let (rw, ro) = (addr(&h, "rw"), addr(&h, "ro"));

    let (port, replica) = eventually(rw, &pw, |_, _| true).await;
    assert_eq!(
        (port, replica),
        (i32::from(p), false),
        "read-write goes to the primary"
    );
    for _ in 0..3 {
        assert_eq!(lands_on(rw, &pw).await.unwrap().0, i32::from(p));
    }
    let mut seen = BTreeSet::new();
    for _ in 0..6 {
        let (port, replica) = lands_on(ro, &pw).await.unwrap();
        assert!(replica, "read-only never lands on the primary");
        seen.insert(port);
    }
    let both: BTreeSet<i32> = [i32::from(p1), i32::from(p2)].into();
    assert_eq!(seen, both, "reads spread over both replicas");

    // r1 stops replaying while the primary writes: once it is more than 1s behind it
    // gets no reads.
    r1.pause_replay(true).unwrap();
    let writer = connect(rw, "postgres", &pw, "postgres").await.unwrap();
    writer
        .batch_execute("create table t (n int)")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut only_r2 = 0;
    while only_r2 < 6 {
        writer
            .batch_execute("insert into t values (1)")
            .await
            .unwrap();
        let (port, _) = lands_on(ro, &pw).await.unwrap();
        only_r2 = if port == i32::from(p2) {
            only_r2 + 1
        } else {
            0
        };
        assert!(
            Instant::now() < deadline,
            "the lagging replica kept getting reads"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    r1.pause_replay(false).unwrap();
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_followed_and_no_writes_without_a_primary() {
    let mut primary = PgServer::start().expect("primary");
    let replica = primary.start_replica().expect("replica");
    let pw = primary.password().to_owned();
    let text = config(
        &[("a", primary.port()), ("b", replica.port())],
        &pw,
        "10s",
        "round-robin-with-fallback",
    );
    let h = sluice(&text).await;
    let (rw, ro) = (addr(&h, "rw"), addr(&h, "ro"));
    eventually(rw, &pw, |port, _| port == i32::from(primary.port())).await;
    let old = connect(rw, "postgres", &pw, "postgres").await.unwrap();
    old.batch_execute("create table kept (n int); insert into kept values (1)")
        .await
        .unwrap();
    replica.wait_caught_up(&primary).unwrap();

    primary.kill();
    // The session whose server died gets an error in its protocol.
    let e = old.simple_query("select 1").await.unwrap_err();
    assert!(
        e.is_closed() || sqlstate(&e).starts_with("08") || sqlstate(&e).starts_with("57P"),
        "{e}"
    );

    // No primary: a new read-write client waits (wait_timeout 1.5s), then is refused.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let e = lands_on(rw, &pw).await.unwrap_err();
    assert_eq!(sqlstate(&e), "08001", "{e:?}");
    assert!(message(&e).contains("no healthy primary"), "{e:?}");
    assert!(started.elapsed() >= Duration::from_millis(1400));
    // Reads go on from the replica meanwhile.
    assert!(lands_on(ro, &pw).await.unwrap().1);

    replica.promote().unwrap();
    let (port, in_recovery) = eventually(rw, &pw, |_, _| true).await;
    assert_eq!((port, in_recovery), (i32::from(replica.port()), false));
    let c = connect(rw, "postgres", &pw, "postgres").await.unwrap();
    let n: i64 = c
        .query_one("select count(*) from kept", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1, "the write acknowledged before the failover is there");
    c.batch_execute("insert into kept values (2)")
        .await
        .unwrap();
    // round-robin-with-fallback: no replica left, so reads go to the new primary.
    assert_eq!(
        lands_on(ro, &pw).await.unwrap(),
        (i32::from(replica.port()), false)
    );
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_primaries_get_no_writes() {
    let a = PgServer::start().expect("a");
    let b = PgServer::start().expect("b");
    // Both test servers share the superuser password.
    let pw = a.password().to_owned();
    let text = config(
        &[("a", a.port()), ("b", b.port())],
        &pw,
        "10s",
        "round-robin",
    );
    let h = sluice(&text).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let e = lands_on(addr(&h, "rw"), &pw).await.unwrap_err();
    assert_eq!(sqlstate(&e), "08001", "{e:?}");
    assert!(message(&e).contains("claims to be the primary"), "{e:?}");
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_losing_its_server_wakes_the_checker() {
    checker_woken(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_wakes_the_checker() {
    checker_woken(false).await;
}

/// The checker (every 30 s) learns that the primary is gone from what a client meets:
/// a session losing its server connection (`session`), or a login whose connection
/// the server refuses.
async fn checker_woken(session: bool) {
    let mut primary = PgServer::start().expect("primary");
    let pw = primary.password().to_owned();
    // Checks every 30 s: only the wake-up can notice the kill within the test.
    let text = config(&[("a", primary.port())], &pw, "10s", "round-robin")
        .replace("health_interval = \"100ms\"", "health_interval = \"30s\"")
        .replace("health_failures = 2", "health_failures = 1");
    let h = sluice(&text).await;
    let rw = addr(&h, "rw");
    eventually(rw, &pw, |_, _| true).await;
    let c = match session {
        true => Some(connect(rw, "postgres", &pw, "postgres").await.unwrap()),
        false => None,
    };
    primary.kill();
    // The client's next statement meets the dead server connection (however Sluice
    // learns it: a read of EOF, a failed write).
    if let Some(c) = c {
        assert!(c.simple_query("select 1").await.is_err());
    }
    // Known down well before the next interval (30 s): the client waits for a primary
    // (wait_timeout), it is not sent to a dead server. (The woken check may take a
    // moment on a loaded machine: until then a login meets the dead server, 08006,
    // and wakes the checker again; 15 s is still half the interval.)
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let e = loop {
        let e = lands_on(rw, &pw).await.unwrap_err();
        if sqlstate(&e) == "08001" || std::time::Instant::now() > deadline {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(sqlstate(&e), "08001", "{e:?}");
    assert!(message(&e).contains("every server"), "{e:?}");
    drop(h);
}

/// HandlerSocket on the topology: the read-write listener's connections go to the
/// primary wherever it is listed and follow a promotion; the read-only one reads from
/// the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlersocket_follows_the_primary() {
    let mut primary = PgServer::start().expect("primary");
    primary
        .psql(
            "postgres",
            "CREATE TABLE public.kv (k int PRIMARY KEY, v text)",
        )
        .unwrap();
    let replica = primary.start_replica().expect("replica");
    let pw = primary.password().to_owned();
    let mut text = config(
        &[("r", replica.port()), ("p", primary.port())],
        &pw,
        "10s",
        "round-robin",
    );
    for (name, mode) in [("hw", "read-write"), ("hr", "read-only")] {
        text.push_str(&format!(
            "[handlersocket.{name}]\naddress = \"127.0.0.1:0\"\ncluster = \"main\"\n\
             mode = \"{mode}\"\nuser = \"postgres\"\npassword = \"{pw}\"\n\
             database = \"postgres\"\nconnections = 1\n"
        ));
    }
    let h = sluice(&text).await;
    eventually(addr(&h, "rw"), &pw, |_, _| true).await;
    let mut w = lines::client(addr(&h, "hw")).await;
    let open = "P\t1\tpublic\tkv\tPRIMARY\tk,v".to_owned();
    let got = lines::ask(&mut w, &[open.clone(), "1\t+\t2\t1\tone".into()]).await;
    assert_eq!(got, ["0\t1", "0\t1"], "the insert went to the primary");
    replica.wait_caught_up(&primary).unwrap();
    let mut r = lines::client(addr(&h, "hr")).await;
    let got = lines::ask(&mut r, &[open.clone(), "1\t=\t1\t1".into()]).await;
    assert_eq!(got, ["0\t1", "0\t2\t1\tone"]);
    // Read from the replica: an insert on the primary it has not replayed is not seen.
    replica.pause_replay(true).unwrap();
    primary
        .psql("postgres", "INSERT INTO public.kv VALUES (2, 'two')")
        .unwrap();
    let got = lines::ask(&mut r, &["1\t=\t1\t2".to_owned()]).await;
    assert_eq!(got, ["0\t2"], "the read-only listener reads the replica");
    replica.pause_replay(false).unwrap();
    replica.wait_caught_up(&primary).unwrap();

    primary.kill();
    replica.promote().unwrap();
    // The executor's connection to the dead primary fails; later ones go to the new one.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut w = lines::client(addr(&h, "hw")).await;
    lines::ask(&mut w, &[open]).await;
    loop {
        let got = lines::ask(&mut w, &["1\t+\t2\t3\tthree".to_owned()]).await;
        if got == ["0\t1"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no insert after the promotion: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = replica
        .psql("postgres", "SELECT count(*) FROM public.kv")
        .unwrap();
    assert_eq!(n.trim(), "3");
    drop(h);
}

async fn count(c: &tokio_postgres::Client) -> i32 {
    let row = c
        .query_one("select count(*)::int from t", &[])
        .await
        .unwrap();
    row.get(0)
}

async fn port(c: &tokio_postgres::Client) -> Result<i32, tokio_postgres::Error> {
    let row = c.query_one("select inet_server_port()", &[]).await?;
    Ok(row.get(0))
}

/// Transaction mode with configured users: a session that stays connected through a
/// failover has its next transaction routed to the new primary, no reconnect needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_sessions_follow_a_promotion() {
    let mut primary = PgServer::start().expect("primary");
    let replica = primary.start_replica().expect("replica");
    let pw = primary.password().to_owned();
    let mut text = config(
        &[("a", primary.port()), ("b", replica.port())],
        &pw,
        "10s",
        "round-robin",
    );
    text.push_str(&format!(
        "[pools.tx]\nmode = \"transaction\"\nsize = 4\nwait_timeout = \"10s\"\n\
         [users.postgres]\npassword = \"{pw}\"\n\
         [listeners.tx]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:0\"\ncluster = \"main\"\n\
         pool = \"tx\"\nauth = \"scram-sha-256\"\n"
    ));
    let h = sluice(&text).await;
    eventually(addr(&h, "rw"), &pw, |_, _| true).await;
    let c = connect(addr(&h, "tx"), "postgres", &pw, "postgres")
        .await
        .unwrap();
    assert_eq!(port(&c).await.unwrap(), i32::from(primary.port()));
    primary.kill();
    // The session's next statement, sent while no primary is known, waits for one
    // (up to the pool's wait_timeout) and runs on the replica once it is promoted.
    let promoted = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        replica.promote().map(|()| replica)
    });
    let on = port(&c)
        .await
        .expect("the statement waited for the new primary");
    let replica = promoted.join().unwrap().unwrap();
    assert_eq!(on, i32::from(replica.port()));
    c.batch_execute("create table after_failover (n int)")
        .await
        .unwrap();
    drop(h);
}

/// A split listener over a primary and a replica, transaction mode, configured user.
fn split_config(primary: &PgServer, replica: &PgServer, pw: &str) -> String {
    let mut text = config(
        &[("p", primary.port()), ("r", replica.port())],
        pw,
        "10s",
        "round-robin",
    );
    text.push_str(&format!(
        "[pools.tx]\nmode = \"transaction\"\nsize = 4\nwait_timeout = \"2s\"\n\
         [users.postgres]\npassword = \"{pw}\"\n"
    ));
    for (name, ryw) in [("split", true), ("stale", false)] {
        text.push_str(&format!(
            "[listeners.{name}]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:0\"\n\
             cluster = \"main\"\npool = \"tx\"\nauth = \"scram-sha-256\"\nroute = \"split\"\n\
             read_your_writes = {ryw}\nread_your_writes_timeout = \"300ms\"\n"
        ));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_sends_reads_to_the_replica_and_writes_to_the_primary() {
    let primary = PgServer::start().expect("primary");
    let replica = primary.start_replica().expect("replica");
    let pw = primary.password().to_owned();
    let (p, r) = (i32::from(primary.port()), i32::from(replica.port()));
    let h = sluice(&split_config(&primary, &replica, &pw)).await;
    eventually(addr(&h, "rw"), &pw, |_, _| true).await;
    let c = connect(addr(&h, "split"), "postgres", &pw, "postgres")
        .await
        .unwrap();
    assert_eq!(port(&c).await.unwrap(), r, "a read goes to the replica");
    c.batch_execute("create table t (n int)").await.unwrap();
    c.batch_execute("insert into t values (1)").await.unwrap();
    let on = |row: tokio_postgres::Row| row.get::<_, i32>(0);
    let sql = "select inet_server_port() from t for update";
    assert_eq!(on(c.query_one(sql, &[]).await.unwrap()), p);
    let sql = "/* sluice:primary */ select inet_server_port()";
    assert_eq!(on(c.query_one(sql, &[]).await.unwrap()), p);
    let row = c
        .query_one(
            "select inet_server_port(), nextval('s')::int from (select 1) x",
            &[],
        )
        .await;
    assert!(
        row.is_err(),
        "no sequence s: the statement ran (on the primary) and failed"
    );
    // Statements of the extended protocol are routed too: a prepared insert after a
    // read goes to the primary (the replica would refuse it), a prepared read to the
    // replica.
    let insert = c.prepare("insert into t values ($1)").await.unwrap();
    c.simple_query("select 1").await.unwrap();
    assert_eq!(port(&c).await.unwrap(), r);
    c.execute(&insert, &[&2i32]).await.unwrap();
    let n: i64 = c
        .query_one("select count(*) from t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2, "the session reads its prepared write");
    // One round of the unnamed statement (Parse, Bind, Execute, Sync): the same.
    c.simple_query("select 1").await.unwrap();
    let typed = tokio_postgres::types::Type::INT4;
    c.query_typed("insert into t values ($1)", &[(&3i32, typed)])
        .await
        .unwrap();
    let row = c
        .query_typed("select inet_server_port()", &[])
        .await
        .unwrap();
    assert_eq!(
        row[0].get::<_, i32>(0),
        r,
        "an unnamed read round on the replica"
    );
    // A whole transaction on the primary.
    let tx = "begin; select 1; commit";
    c.batch_execute(tx).await.unwrap();
    // A read-only transaction on the replica, once it has the session's writes.
    replica.wait_caught_up(&primary).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.batch_execute("begin read only").await.unwrap();
    assert_eq!(port(&c).await.unwrap(), r);
    c.batch_execute("commit").await.unwrap();
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_reads_your_writes_and_without_it_reads_stale() {
    let primary = PgServer::start().expect("primary");
    let replica = primary.start_replica().expect("replica");
    let pw = primary.password().to_owned();
    let h = sluice(&split_config(&primary, &replica, &pw)).await;
    eventually(addr(&h, "rw"), &pw, |_, _| true).await;
    primary.psql("postgres", "create table t (n int)").unwrap();
    replica.wait_caught_up(&primary).unwrap();
    replica.pause_replay(true).unwrap();
    // With read-your-writes: every read after a write sees it, though the replica
    // replays nothing (each waits read_your_writes_timeout, then reads the primary).
    let c = connect(addr(&h, "split"), "postgres", &pw, "postgres")
        .await
        .unwrap();
    for n in 1..=3 {
        c.batch_execute("insert into t values (1)").await.unwrap();
        assert_eq!(count(&c).await, n);
    }
    // Without it, the same session reads the paused replica: a stale read.
    let s = connect(addr(&h, "stale"), "postgres", &pw, "postgres")
        .await
        .unwrap();
    s.batch_execute("insert into t values (1)").await.unwrap();
    assert_eq!(
        count(&s).await,
        0,
        "the stale route read the paused replica"
    );
    replica.pause_replay(false).unwrap();
    // Replaying again: a read right after a write waits the few milliseconds the
    // replica needs and is served there (not by the primary), with the write.
    let sql = "select count(*)::int, inet_server_port() from t";
    for n in 5..=7 {
        c.batch_execute("insert into t values (1)").await.unwrap();
        let row = c.query_one(sql, &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), n, "the read saw the session's write");
        assert_eq!(
            row.get::<_, i32>(1),
            i32::from(replica.port()),
            "the read waited for the replica instead of going to the primary"
        );
    }
    drop(h);
}

/// The dead primary during a write load: clients insert numbered rows through the
/// read-write route and count what was acknowledged; after kill -9 and a promotion every
/// acknowledged row is on the new primary (synchronous replication keeps them) and no
/// row is there twice (nothing was sent again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_write_is_lost_or_repeated_across_a_failover() {
    let mut primary = PgServer::start_with(sluice_testkit::PgOptions {
        extra_conf: vec!["synchronous_standby_names = '*'".into()],
        ..Default::default()
    })
    .expect("primary");
    let replica = primary.start_replica().expect("replica");
    let pw = primary.password().to_owned();
    primary
        .psql("postgres", "create table w (client int, seq int)")
        .unwrap();
    let text = config(
        &[("a", primary.port()), ("b", replica.port())],
        &pw,
        "10s",
        "round-robin",
    );
    let h = sluice(&text).await;
    let rw = addr(&h, "rw");
    eventually(rw, &pw, |_, _| true).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for client in 0..4i32 {
        let (stop, pw) = (stop.clone(), pw.clone());
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut conn = None;
            let mut seq = 0i32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if conn.is_none() {
                    conn = connect(rw, "postgres", &pw, "postgres").await.ok();
                    if conn.is_none() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                }
                seq += 1;
                let sql = "insert into w values ($1, $2)";
                let c = conn.as_ref().expect("connected above");
                match c.execute(sql, &[&client, &seq]).await {
                    Ok(_) => acked.push(seq),
                    // Unknown whether it committed: never sent again.
                    Err(_) => conn = None,
                }
            }
            (client, acked)
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    primary.kill();
    replica.promote().unwrap();
    // The new primary has no standby of its own: it commits alone (the base backup copied
    // synchronous_standby_names; an HA manager turns it off the same way).
    replica
        .psql(
            "postgres",
            "alter system set synchronous_standby_names = ''; select pg_reload_conf()",
        )
        .unwrap();
    // Writes resume on the new primary.
    let new_primary = i32::from(replica.port());
    eventually(rw, &pw, |port, in_recovery| {
        port == new_primary && !in_recovery
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let c = connect(rw, "postgres", &pw, "postgres").await.unwrap();
    let mut total = 0;
    for w in writers {
        let (client, acked) = w.await.unwrap();
        total += acked.len();
        let rows = c
            .query("select seq from w where client = $1", &[&client])
            .await
            .unwrap();
        let there: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        common::no_write_lost_or_repeated(client, &acked, &there);
    }
    assert!(total > 20, "the load ran ({total} acknowledged writes)");
    drop(h);
}
