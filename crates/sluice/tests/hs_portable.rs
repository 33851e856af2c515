//! Portable HandlerSocket conformance: the corpus `tests/hs/portable.txt` runs against the
//! reference plugin (MariaDB's `handlersocket.so`, database `hsref`, tables from
//! `tests/hs/portable.sql`) and against Sluice's HandlerSocket listeners in front of
//! PostgreSQL (schema `hssluice` of database `app`, tables from `tests/hs/portable_pg.sql`).
//! Every answer must be byte-identical, and afterwards both servers must hold the same
//! rows. A second test sends the read-listener part pipelined (so that Sluice batches
//! requests, grouping consecutive primary-key lookups into one statement). The corpus keeps to requests whose answers cannot depend on which server runs
//! them (see its header).
//!
//! `HS_PORTABLE_TRANSCRIPT=1` prints every request with both answers (and the final
//! tables of both servers), to check or extend the corpus:
//!
//! ```text
//! HS_PORTABLE_TRANSCRIPT=1 cargo nextest run -p sluice -E "test(/^hs_portable::/)" -j 1 --no-capture
//! ```

use crate::common;
use crate::common::hs;

use hs::{Listener, Request, escape, mismatches, parse_corpus, run_pipelined, run_sequential};
use sluice_testkit::{MariaDbServer, PgServer};

const SCHEMA_MY: &str = include_str!("hs/portable.sql");
const SCHEMA_PG: &str = include_str!("hs/portable_pg.sql");
const CORPUS: &str = include_str!("hs/portable.txt");
/// Every table with its primary key.
const TABLES: &[(&str, &str)] = &[("t", "id"), ("t2", "k")];
const REF_DB: &str = "hsref";
const SLUICE_DB: &str = "hssluice";
/// The PostgreSQL database holding schema `hssluice`.
const PG_DATABASE: &str = "app";

fn transcript() -> bool {
    std::env::var("HS_PORTABLE_TRANSCRIPT").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn mariadb() -> MariaDbServer {
    hs::plugin_server(SCHEMA_MY, &[REF_DB])
}

/// PostgreSQL with schema `hssluice` in database `app`.
fn postgres() -> PgServer {
    let pg = common::pg();
    pg.psql(PG_DATABASE, &SCHEMA_PG.replace("$DB", SLUICE_DB))
        .unwrap_or_else(|e| panic!("PostgreSQL schema: {e:#}"));
    pg
}

fn config_text(pg: &PgServer) -> String {
    let extra = format!("database = \"{PG_DATABASE}\"");
    hs::listeners_config("postgres", pg.port(), pg.superuser(), pg.password(), &extra)
}

fn readable(line: &str) -> String {
    line.split('\t')
        .map(|f| match f {
            "NULL" => "NULL".to_owned(),
            hex => {
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                format!("'{}'", escape(&bytes))
            }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Every row of `hsref.table` on MariaDB, ordered by `pk`.
fn dump_my(db: &MariaDbServer, table: &str, pk: &str) -> Vec<String> {
    let cols = db
        .sql(&format!(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = \
             '{REF_DB}' AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION"
        ))
        .unwrap();
    let fields: Vec<String> = cols
        .lines()
        .map(|c| format!("COALESCE(HEX(CONCAT(`{c}`)), 'NULL')"))
        .collect();
    assert!(!fields.is_empty(), "no columns in {REF_DB}.{table}");
    let out = db
        .sql(&format!(
            "SELECT {} FROM `{REF_DB}`.`{table}` ORDER BY `{pk}`",
            fields.join(", ")
        ))
        .unwrap();
    out.lines().map(readable).collect()
}

/// Every row of `hssluice.table` on PostgreSQL, ordered by `pk`.
fn dump_pg(pg: &PgServer, table: &str, pk: &str) -> Vec<String> {
    let cols = pg
        .psql(
            PG_DATABASE,
            &format!(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = \
                 '{SLUICE_DB}' AND table_name = '{table}' ORDER BY ordinal_position;"
            ),
        )
        .unwrap();
    let fields: Vec<String> = cols
        .lines()
        .map(|c| {
            format!("COALESCE(upper(encode(convert_to(\"{c}\"::text, 'UTF8'), 'hex')), 'NULL')")
        })
        .collect();
    assert!(!fields.is_empty(), "no columns in {SLUICE_DB}.{table}");
    let out = pg
        .psql(
            PG_DATABASE,
            &format!(
                "SELECT concat_ws(E'\\t', {}) FROM \"{SLUICE_DB}\".\"{table}\" ORDER BY \"{pk}\";",
                fields.join(", ")
            ),
        )
        .unwrap();
    out.lines().map(readable).collect()
}

/// Differences between the two servers' tables, one readable report per table.
fn table_mismatches(my: &MariaDbServer, pg: &PgServer) -> Vec<String> {
    TABLES
        .iter()
        .filter_map(|&(table, pk)| {
            let (a, b) = (dump_my(my, table, pk), dump_pg(pg, table, pk));
            hs::table_diff(table, (REF_DB, &a), (SLUICE_DB, &b))
        })
        .collect()
}

fn print_transcript(reqs: &[Request], want: &[Vec<u8>], got: &[Vec<u8>]) {
    for (i, r) in reqs.iter().enumerate() {
        let show = |a: Option<&Vec<u8>>| a.map_or("<missing>".to_owned(), |a| escape(a));
        let (w, g) = (want.get(i), got.get(i));
        println!(
            "{:>4} {:?} {}\n       plugin -> {}{}",
            r.line_no,
            r.listener,
            escape(&r.bytes(REF_DB)),
            show(w),
            if w == g {
                String::new()
            } else {
                format!("\n       sluice -> {}   <<< DIFFERS", show(g))
            }
        );
    }
}

#[test]
fn portable_corpus_notation() {
    let reqs = parse_corpus(CORPUS);
    assert!(reqs.len() >= 200, "only {} requests", reqs.len());
    for r in &reqs {
        if r.text.starts_with(r"P\t") {
            assert!(r.text.contains("$DB"), "line {}: P without $DB", r.line_no);
        }
        // PostgreSQL text cannot hold NUL: a 0x00 byte may only be a whole NULL token
        // (or go into an integer column, which the corpus does not check here).
        let bytes = r.bytes("db");
        for tok in bytes.split(|&b| b == b'\t') {
            assert!(
                tok == b"\0" || !tok.windows(2).any(|w| w == [1, 0x40]),
                "line {}: an escaped NUL byte is not portable: {}",
                r.line_no,
                r.text
            );
        }
    }
}

#[test]
fn portable_corpus_answers_match_between_mariadb_and_postgres() {
    let reqs = parse_corpus(CORPUS);
    let my = mariadb();
    let want = run_sequential(&reqs, hs::plugin(&my, REF_DB));
    hs::assert_all_answered(&reqs, &want, "the plugin");
    let pg = postgres();
    let sluice = hs::Sluice::start(&config_text(&pg));
    let t = sluice.target(SLUICE_DB);
    let got = run_sequential(&reqs, t);
    drop(sluice);
    if transcript() {
        print_transcript(&reqs, &want, &got);
        for &(table, pk) in TABLES {
            println!("--- {REF_DB}.{table}");
            for row in dump_my(&my, table, pk) {
                println!("{row}");
            }
            println!("--- {SLUICE_DB}.{table}");
            for row in dump_pg(&pg, table, pk) {
                println!("{row}");
            }
        }
    }
    let mut problems = mismatches(&reqs, "plugin", &want, t.name, &got);
    problems.extend(table_mismatches(&my, &pg));
    if !problems.is_empty() {
        panic!(
            "{} mismatch(es) between the plugin on MariaDB and Sluice on PostgreSQL:\n\n{}",
            problems.len(),
            problems.join("\n\n")
        );
    }
}

#[test]
fn pipelined_read_listener_answers_match_between_mariadb_and_postgres() {
    let reqs: Vec<Request> = parse_corpus(CORPUS)
        .into_iter()
        .filter(|r| r.listener == Listener::Read)
        .collect();
    let my = mariadb();
    let want = run_pipelined(&reqs, hs::plugin(&my, REF_DB));
    hs::assert_all_answered(&reqs, &want, "the plugin");
    let pg = postgres();
    let sluice = hs::Sluice::start(&config_text(&pg));
    let t = sluice.target(SLUICE_DB);
    let got = run_pipelined(&reqs, t);
    drop(sluice);
    let problems = mismatches(&reqs, "plugin", &want, t.name, &got);
    if !problems.is_empty() {
        panic!(
            "{} mismatch(es) between the plugin on MariaDB and Sluice on PostgreSQL \
             (pipelined):\n\n{}",
            problems.len(),
            problems.join("\n\n")
        );
    }
}
