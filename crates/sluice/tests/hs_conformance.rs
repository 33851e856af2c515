//! HandlerSocket conformance: the corpus `tests/hs/corpus.txt` runs against the reference
//! plugin (MariaDB's `handlersocket.so`, database `hsref`) and against Sluice's
//! HandlerSocket listeners (database `hssluice`, same MariaDB), and every answer must be
//! byte-identical; afterwards both databases must hold the same rows. A second test sends
//! the read-listener part of the corpus pipelined, one write per connection.
//!
//! `HS_CONFORMANCE_REFERENCE_ONLY=1` runs the corpus against the plugin only and prints
//! each request with its answer (and the final tables), to check or extend the corpus
//! before Sluice serves it:
//!
//! ```text
//! HS_CONFORMANCE_REFERENCE_ONLY=1 cargo nextest run -p sluice -E "test(/^hs_conformance::/)" \
//!     -j 1 --no-capture
//! ```

use crate::common::hs;

use hs::decode;
use hs::{Listener, Request, escape, mismatches, parse_corpus, run_pipelined, run_sequential};
use sluice_testkit::MariaDbServer;

const SCHEMA: &str = include_str!("hs/schema.sql");
const CORPUS: &str = include_str!("hs/corpus.txt");
/// Every table of the schema with its primary key.
const TABLES: &[(&str, &str)] = &[("t1", "id"), ("t2", "k"), ("t3", "id")];
const REF_DB: &str = "hsref";
const SLUICE_DB: &str = "hssluice";

fn reference_only() -> bool {
    std::env::var("HS_CONFORMANCE_REFERENCE_ONLY").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn mariadb() -> MariaDbServer {
    hs::plugin_server(SCHEMA, &[REF_DB, SLUICE_DB])
}

fn config_text(db: &MariaDbServer) -> String {
    hs::listeners_config("mysql", db.port(), db.user(), db.password(), "")
}

fn dump(db: &MariaDbServer, name: &str, table: &str, pk: &str) -> Vec<String> {
    let cols = db
        .sql(&format!(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{name}' \
             AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION"
        ))
        .unwrap();
    let fields: Vec<String> = cols
        .lines()
        .map(|c| format!("HEX(CONCAT(`{c}`))"))
        .collect();
    assert!(!fields.is_empty(), "no columns in {name}.{table}");
    let out = db
        .sql(&format!(
            "SELECT {} FROM `{name}`.`{table}` ORDER BY `{pk}`",
            fields.join(", ")
        ))
        .unwrap();
    out.lines()
        .map(|row| {
            row.split('\t')
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
        })
        .collect()
}

/// Differences between the two databases' tables, one readable report per table.
fn table_mismatches(db: &MariaDbServer) -> Vec<String> {
    TABLES
        .iter()
        .filter_map(|&(table, pk)| {
            let (a, b) = (dump(db, REF_DB, table, pk), dump(db, SLUICE_DB, table, pk));
            hs::table_diff(table, (REF_DB, &a), (SLUICE_DB, &b))
        })
        .collect()
}

fn print_transcript(reqs: &[Request], answers: &[Vec<u8>], db: &str) {
    for (r, a) in reqs.iter().zip(answers) {
        println!(
            "{:>4} {:?} {}\n       -> {}",
            r.line_no,
            r.listener,
            escape(&r.bytes(db)),
            escape(a)
        );
    }
}

fn fail_on(problems: Vec<String>) {
    if !problems.is_empty() {
        panic!(
            "{} mismatch(es) between the plugin and Sluice:\n\n{}",
            problems.len(),
            problems.join("\n\n")
        );
    }
}

#[test]
fn corpus_notation() {
    assert_eq!(
        decode(r"a\tb\0\r\\\x01\x7a$DB").unwrap(),
        b"a\tb\0\r\\\x01\x7a$DB"
    );
    assert!(decode(r"\q").is_err());
    assert!(decode(r"\x4").is_err());
    assert_eq!(escape(b"a\tb\0\n\x01\xff\\"), r"a\tb\0\n\x01\xff\\");
    let reqs = parse_corpus(CORPUS);
    assert!(reqs.len() >= 300, "only {} requests", reqs.len());
    for r in &reqs {
        if r.text.starts_with("P\t") || r.text.starts_with(r"P\t") {
            assert!(r.text.contains("$DB"), "line {}: P without $DB", r.line_no);
        }
    }
    assert!(reqs.iter().any(|r| r.listener == Listener::Write));
}

#[test]
fn corpus_answers_match_the_plugin() {
    let reqs = parse_corpus(CORPUS);
    let db = mariadb();
    let want = run_sequential(&reqs, hs::plugin(&db, REF_DB));
    hs::assert_all_answered(&reqs, &want, "the plugin");
    if reference_only() {
        print_transcript(&reqs, &want, REF_DB);
        for &(table, pk) in TABLES {
            println!("--- {REF_DB}.{table}");
            for row in dump(&db, REF_DB, table, pk) {
                println!("{row}");
            }
        }
        return;
    }
    let sluice = hs::Sluice::start(&config_text(&db));
    let t = sluice.target(SLUICE_DB);
    let got = run_sequential(&reqs, t);
    drop(sluice);
    let mut problems = mismatches(&reqs, "plugin", &want, t.name, &got);
    problems.extend(table_mismatches(&db));
    fail_on(problems);
}

#[test]
fn pipelined_read_listener_answers_match_the_plugin() {
    let reqs: Vec<Request> = parse_corpus(CORPUS)
        .into_iter()
        .filter(|r| r.listener == Listener::Read)
        .collect();
    let db = mariadb();
    let want = run_pipelined(&reqs, hs::plugin(&db, REF_DB));
    hs::assert_all_answered(&reqs, &want, "the plugin");
    if reference_only() {
        // The read part must not depend on pipelining: one at a time gives the same.
        let one_by_one = run_sequential(&reqs, hs::plugin(&db, REF_DB));
        fail_on(mismatches(
            &reqs,
            "pipeline",
            &want,
            "one-by-1",
            &one_by_one,
        ));
        println!("{} pipelined read requests agree", reqs.len());
        return;
    }
    let sluice = hs::Sluice::start(&config_text(&db));
    let t = sluice.target(SLUICE_DB);
    let got = run_pipelined(&reqs, t);
    drop(sluice);
    fail_on(mismatches(&reqs, "plugin", &want, t.name, &got));
}

/// Behind a secret (the built-in default's `secret_file`, generated on the first
/// start): without `A 1 <secret>` reads and writes are refused as the plugin refuses
/// them; with it, the corpus (less its own `A` requests, which test listeners without a
/// secret) answers byte for byte as the plugin does.
#[test]
fn corpus_answers_match_behind_a_secret() {
    let reqs: Vec<Request> = parse_corpus(CORPUS)
        .into_iter()
        .filter(|r| !r.text.starts_with('A'))
        .collect();
    let db = mariadb();
    let want = run_sequential(&reqs, hs::plugin(&db, REF_DB));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state/hs.secret");
    let extra = format!("secret_file = \"{}\"", file.display());
    let sluice = hs::Sluice::start(&hs::listeners_config(
        "mysql",
        db.port(),
        db.user(),
        db.password(),
        &extra,
    ));
    let secret = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    let t = sluice.target(SLUICE_DB);
    // Refused without the secret, as the plugin refuses.
    let open = format!("P\t1\t{SLUICE_DB}\tt1\tPRIMARY\tid,name");
    for (listener, line) in [
        (t.read, open.clone()),
        (t.write, open.clone()),
        (t.write, "1\t+\t2\t900\tx".to_owned()),
    ] {
        use std::io::{BufRead, Write};
        let mut s = std::net::TcpStream::connect(listener).unwrap();
        s.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut answer = String::new();
        std::io::BufReader::new(s).read_line(&mut answer).unwrap();
        assert_eq!(answer, "3\t1\tunauth\n", "{line}");
    }
    let hello = format!("A\t1\t{secret}");
    let t = hs::Target {
        hello: Some(&hello),
        ..t
    };
    let got = run_sequential(&reqs, t);
    drop(sluice);
    let mut problems = mismatches(&reqs, "plugin", &want, t.name, &got);
    problems.extend(table_mismatches(&db));
    fail_on(problems);
}
