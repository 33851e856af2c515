//! The HandlerSocket path over PostgreSQL: a failed COMMIT, values PostgreSQL cannot
//! take, grouped lookups as prepared `= ANY($1)` statements surviving failures and
//! table changes, and answers over the cap in writing batches.

use crate::common;
use crate::common::hs_lines as lines;

use lines::{ask, ask_bytes, client};
use std::sync::atomic::Ordering;
use tokio::io::BufReader;
use tokio::net::TcpStream;

/// On PostgreSQL a deferred unique constraint fails at COMMIT: no write of the batch may
/// be answered as done, and the connection serves the next batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_answers_every_write_with_an_error() {
    let (pg, _h, mut c) = start(
        "CREATE TABLE public.d (k int PRIMARY KEY, u int UNIQUE DEFERRABLE INITIALLY DEFERRED); \
         INSERT INTO public.d VALUES (1, 10)",
        None,
    )
    .await;
    let got = ask(
        &mut c,
        &[
            "P\t1\tpublic\td\tPRIMARY\tk,u".into(),
            "1\t+\t2\t2\t20".into(),
            "1\t+\t2\t3\t10".into(),
        ],
    )
    .await;
    assert_eq!(got[0], "0\t1");
    assert!(
        got[1].starts_with("1\t1\t") && got[2].starts_with("1\t1\t"),
        "{got:?}"
    );
    let rows = pg.psql("app", "SELECT count(*) FROM public.d").unwrap();
    assert_eq!(rows.trim(), "1");
    let got = ask(
        &mut c,
        &["1\t+\t2\t2\t20".into(), "1\t>=\t1\t0\t10\t0".into()],
    )
    .await;
    assert_eq!(got, ["0\t1", "0\t2\t1\t10\t2\t20"]);
}

fn pg_config(pg: &sluice_testkit::PgServer) -> String {
    format!(
        "[servers.pg]\nprotocol = \"postgres\"\nhost = \"127.0.0.1\"\nport = {}\n\n\
         [clusters.pg]\nservers = [\"pg\"]\n\n[handlersocket.w]\naddress = \"127.0.0.1:0\"\n\
         cluster = \"pg\"\nmode = \"read-write\"\nuser = \"{}\"\npassword = \"{}\"\n\
         database = \"app\"\nconnections = 1\n",
        pg.port(),
        pg.superuser(),
        pg.password()
    )
}

/// A PostgreSQL server with the tables `sql` makes, Sluice's read-write listener over it
/// (with `max_message_size` set to `cap`, if given), and a client of that listener.
async fn start(
    sql: &str,
    cap: Option<&str>,
) -> (
    sluice_testkit::PgServer,
    sluice::server::Handle,
    BufReader<TcpStream>,
) {
    let pg = common::pg();
    pg.psql("app", sql).unwrap();
    let general = cap.map_or(String::new(), |c| {
        format!("[general]\nmax_message_size = \"{c}\"\n")
    });
    let h = common::sluice(&format!("{general}{}", pg_config(&pg))).await;
    let c = client(common::addr(&h, "w")).await;
    (pg, h, c)
}

/// Values PostgreSQL cannot take fail their own request only, in reads and in writes;
/// an insert that names no column works; a table whose only unique index allows NULL
/// cannot be modified (a NULL key would name several rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_on_postgres_fail_alone() {
    let (_pg, _h, mut c) = start(
        "CREATE TABLE public.t (k serial PRIMARY KEY, v varchar(10)); \
         INSERT INTO public.t (v) VALUES ('a'); \
         CREATE TABLE public.n (u int UNIQUE, w int); INSERT INTO public.n VALUES (NULL, 1), (NULL, 2)",
        None,
    )
    .await;
    let got = ask(
        &mut c,
        &[
            "P\t1\tpublic\tt\tPRIMARY\tk,v".into(),
            "P\t2\tpublic\tt\tPRIMARY\t".into(),
            "P\t3\tpublic\tn\tn_u_key\tu,w".into(),
            "1\t=\t1\t1".into(),
            "1\t>=\t1\t0\t10\t0\tF\t=\t1\tx\x01\x40y".into(),
            "1\t=\t1\t1".into(),
        ],
    )
    .await;
    assert_eq!(got[..3], ["0\t1", "0\t1", "0\t1"]);
    assert_eq!(got[3], "0\t2\t1\ta");
    assert_eq!(got[4], "2\t1\tfilterfld", "index 1 has no filter columns");
    let lines: [&[u8]; 6] = [
        b"1\t+\t2\t0\tb\xff",
        b"1\t+\t2\t0\tnul\x01\x40",
        b"1\t+\t2\t0\tok",
        b"2\t+\t1\tignored",
        b"1\t>=\t1\t0\t10\t0",
        b"3\t=\t1\t\0\t10\t0\tU\t\0\t5",
    ];
    let got = ask_bytes(&mut c, &lines).await;
    assert_eq!(got[0], "1\t1\t22021");
    assert_eq!(got[1], "1\t1\t22021");
    assert_eq!(got[2], "0\t1\t2");
    assert_eq!(got[3], "0\t1\t3");
    // Like the plugin: an unlisted nullable column holds its zero value, not NULL.
    assert_eq!(got[4], "0\t2\t1\ta\t2\tok\t3\t");
    assert_eq!(got[5], "2\t1\tnotimpl");
}

/// On PostgreSQL a group of lookups is one prepared `= ANY($1)` statement. A statement
/// failing before it in the same round (so the server skips its Parse) or after it
/// does not make the next rounds' lookups fail: the connection prepares it again. Rows
/// go to their requests whether the key column is returned first, later or not at all,
/// and a column changing type under the prepared statements does not fail them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_grouped_lookups_survive_a_failure_in_their_round() {
    let (pg, h, mut c) = start(
        "CREATE TABLE public.g (id int PRIMARY KEY, d date, v text); \
         CREATE INDEX g_d ON public.g (d); \
         INSERT INTO public.g SELECT i, DATE '2020-01-01' + i, 'v' || i FROM generate_series(1, 9) i",
        None,
    )
    .await;
    let open = ask(
        &mut c,
        &[
            "P\t1\tpublic\tg\tPRIMARY\tid,v".into(),
            "P\t2\tpublic\tg\tg_d\tid".into(),
        ],
    )
    .await;
    assert_eq!(open, ["0\t1", "0\t1"]);
    let bad = "2\t=\t1\tnot a date".to_string();
    let lookups =
        |keys: &[u32]| -> Vec<String> { keys.iter().map(|k| format!("1\t=\t1\t{k}")).collect() };
    let rows =
        |keys: &[u32]| -> Vec<String> { keys.iter().map(|k| format!("0\t2\t{k}\tv{k}")).collect() };
    for round in 0..4 {
        // The failing find first, between two groups, last.
        let at = [0, 2, 5][round % 3];
        let mut lines = lookups(&[1, 2, 3, 4, 5]);
        lines.insert(at, bad.clone());
        let got = ask(&mut c, &lines).await;
        assert!(got[at].starts_with("1\t1\t"), "round {round}: {got:?}");
        let want = rows(&[1, 2, 3, 4, 5]);
        let mut rest = got.clone();
        rest.remove(at);
        assert_eq!(rest, want, "round {round}");
        // Alone, the lookups still work on the same connection.
        assert_eq!(
            ask(&mut c, &lookups(&[6, 7, 8, 9])).await,
            rows(&[6, 7, 8, 9])
        );
    }
    // The key column returned after another one, and not returned at all.
    let open = ask(
        &mut c,
        &[
            "P\t3\tpublic\tg\tPRIMARY\tv,id".into(),
            "P\t4\tpublic\tg\tPRIMARY\tv".into(),
        ],
    )
    .await;
    assert_eq!(open, ["0\t1", "0\t1"]);
    let lines: Vec<String> = [3, 4]
        .iter()
        .flat_map(|ix| [7, 99, 2].map(|k| format!("{ix}\t=\t1\t{k}")))
        .collect();
    let got = ask(&mut c, &lines).await;
    assert_eq!(
        got,
        [
            "0\t2\tv7\t7",
            "0\t2",
            "0\t2\tv2\t2",
            "0\t1\tv7",
            "0\t1",
            "0\t1\tv2"
        ]
    );
    // A returned column changes type under the prepared statements: the server refuses
    // them (0A000), and the lookups run again, prepared afresh.
    pg.psql(
        "app",
        "ALTER TABLE public.g ALTER COLUMN v TYPE varchar(40)",
    )
    .unwrap();
    assert_eq!(ask(&mut c, &lookups(&[1, 2, 3])).await, rows(&[1, 2, 3]));
    let got = ask(&mut c, &lines).await;
    assert_eq!(got[0], "0\t2\tv7\t7");
    let grouped = h.kv("w").unwrap().stats.grouped.load(Ordering::Relaxed);
    assert!(grouped >= 4 * 9 + 6, "only {grouped} lookups were grouped");
}

/// On PostgreSQL a writing batch runs each request under a savepoint; an answer over
/// the cap (rows Sluice drops while the server goes on) is not a failure the batch
/// rolls back to its savepoint for: the writes around it stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_cap_in_a_writing_batch_on_postgres() {
    let (pg, _h, mut c) = start(
        "CREATE TABLE public.t (k int PRIMARY KEY, v varchar(200)); \
         INSERT INTO public.t SELECT i, repeat('x', 100) FROM generate_series(1, 100) i",
        Some("2KiB"),
    )
    .await;
    let got = ask(
        &mut c,
        &[
            "P\t1\tpublic\tt\tPRIMARY\tk,v".into(),
            "1\t+\t2\t101\ta".into(),
            "1\t>=\t1\t1\t1000\t0".into(),
            "1\t>=\t1\t1\t2\t0".into(),
            "1\t+\t2\t102\tb".into(),
        ],
    )
    .await;
    assert!(got[1].starts_with("0\t1"), "{got:?}");
    assert_eq!(got[2], "1\t1\ttoolarge");
    assert!(got[3].starts_with("0\t2\t1\txxx"), "{got:?}");
    assert!(got[4].starts_with("0\t1"), "{got:?}");
    let n = pg
        .psql("app", "SELECT count(*) FROM public.t WHERE k > 100")
        .unwrap();
    assert_eq!(n.trim(), "2");
}

/// Grouped lookups inside a writing batch on PostgreSQL (one extended-protocol round
/// with BEGIN, savepoints and COMMIT), around a write that fails, on a smallint key
/// that the reference clips to the column's range; keys that all miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_grouped_lookups_in_a_writing_batch() {
    let (pg, _h, mut c) = start(
        "CREATE TABLE public.s (id smallint PRIMARY KEY, v text); \
         INSERT INTO public.s VALUES (1, 'a'), (2, 'b'), (3, 'c'), (32767, 'max')",
        None,
    )
    .await;
    let got = ask(
        &mut c,
        &[
            "P\t1\tpublic\ts\tPRIMARY\tid,v".into(),
            "1\t=\t1\t1".into(),
            "1\t=\t1\t2".into(),
            "1\t+\t2\t3\tdup".into(),
            "1\t=\t1\t40000".into(),
            "1\t=\t1\t3".into(),
            "1\t+\t2\t4\td".into(),
            "1\t=\t1\t100".into(),
            "1\t=\t1\t200".into(),
        ],
    )
    .await;
    assert_eq!(
        got,
        [
            "0\t1",
            "0\t2\t1\ta",
            "0\t2\t2\tb",
            "1\t1\t121",
            "0\t2\t32767\tmax",
            "0\t2\t3\tc",
            "0\t1",
            "0\t2",
            "0\t2"
        ]
    );
    let rows = pg
        .psql("app", "SELECT string_agg(v, ',' ORDER BY id) FROM public.s")
        .unwrap();
    assert_eq!(rows.trim(), "a,b,c,d,max");
}

/// An insert whose generated id comes back as a row (`RETURNING`) after earlier finds
/// of the same round used up the round's answer budget: the row is inserted and the
/// batch commits, so the insert answers success (its id unknown, 0), never an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_past_the_round_budget_is_answered_as_done() {
    // Rows of exactly 1 KiB as data rows (2 + 4 + 1,018 bytes): two fill a statement's
    // 2 KiB, four finds the round's 8 KiB, so the insert's returned id does not fit.
    let (pg, _h, mut c) = start(
        "CREATE TABLE public.t (k serial PRIMARY KEY, v varchar(2000)); \
         INSERT INTO public.t (v) SELECT repeat('x', 1018) FROM generate_series(1, 10)",
        Some("2KiB"),
    )
    .await;
    let mut lines: Vec<String> = vec!["P\t1\tpublic\tt\tPRIMARY\tv".into()];
    lines.extend((0..4).map(|_| "1\t>=\t1\t1\t1000\t0".to_string()));
    lines.push("1\t+\t1\tnew".into());
    let got = ask(&mut c, &lines).await;
    assert!(got[1..5].iter().all(|a| a == "1\t1\ttoolarge"), "{got:?}");
    assert!(got[5].starts_with("0\t1"), "{got:?}");
    let n = pg
        .psql("app", "SELECT count(*) FROM public.t WHERE v = 'new'")
        .unwrap();
    assert_eq!(n.trim(), "1");
}
