use super::*;
use crate::facts::scanned;
use crate::values_key;
use proptest::prelude::*;

fn quick(sql: &str, dialect: Dialect) -> Option<(String, Kind, bool)> {
    let mut out = Vec::new();
    let (kind, several) = digest(sql.as_bytes(), dialect, &mut out)?;
    Some((String::from_utf8(out).unwrap(), kind, several))
}

/// Whatever the one-pass path accepts, it digests as the token scanner does.
fn agrees(sql: &[u8], dialect: Dialect) -> Result<bool, TestCaseError> {
    let mut out = Vec::new();
    let Some((kind, several)) = digest(sql, dialect, &mut out) else {
        return Ok(false);
    };
    let (want, want_kind, want_several) = scanned(sql, dialect);
    prop_assert_eq!(
        (&out, kind, several),
        (&want, want_kind, want_several),
        "{:?} ({:?})",
        String::from_utf8_lossy(sql),
        dialect
    );
    Ok(true)
}

#[test]
fn plain_statements_take_the_one_pass_path() {
    let pg = [
        (
            "SELECT c FROM sluice_bench WHERE id = 4242",
            "SELECT c FROM sluice_bench WHERE id = ?",
        ),
        (
            "SELECT abalance FROM pgbench_accounts WHERE aid = 12",
            "SELECT abalance FROM pgbench_accounts WHERE aid = ?",
        ),
        (
            "UPDATE pgbench_accounts SET abalance = abalance + -1795 WHERE aid = 8;x",
            "",
        ),
        (
            "INSERT INTO t (a, b) VALUES (1, 'it''s')",
            "INSERT INTO t (a, b) VALUES (?, ?)",
        ),
        (
            "select x::int, y<=2 from s.t",
            "select x :: int, y <= ? from s.t",
        ),
        ("select f(1), g()", "select f(?), g()"),
        ("  ", ""),
    ];
    for (sql, want) in pg {
        match quick(sql, Dialect::Postgres) {
            Some((text, _, several)) => {
                assert_eq!(text, want, "{sql}");
                assert!(!several);
            }
            None => assert!(sql.contains(';'), "{sql} took the scanner"),
        }
        agrees(sql.as_bytes(), Dialect::Postgres).unwrap();
    }
    let my = [
        (
            "SELECT c FROM sbtest1 WHERE id=5003",
            "SELECT c FROM sbtest1 WHERE id = ?",
        ),
        (
            "SELECT c FROM `sbtest1` WHERE id=? AND k = 'a\\'b'",
            "SELECT c FROM `sbtest1` WHERE id = ? AND k = ?",
        ),
        ("select @a := \"s\", @@version", "select @a := ?, @@version"),
    ];
    for (sql, want) in my {
        assert_eq!(
            quick(sql, Dialect::MySql).map(|q| q.0).as_deref(),
            Some(want)
        );
        agrees(sql.as_bytes(), Dialect::MySql).unwrap();
    }
    assert_eq!(
        quick("SELECT 1", Dialect::MySql).map(|q| q.1),
        Some(Kind::Select)
    );
    assert_eq!(
        quick("1 select", Dialect::MySql).map(|q| q.1),
        Some(Kind::Other)
    );
    assert_eq!(quick("", Dialect::MySql).map(|q| q.1), Some(Kind::Other));
}

#[test]
fn what_needs_the_scanner_is_left_to_it() {
    for sql in [
        "select 1; select 2",
        "select a from t where x in (1, 2)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "select $1",
        "select c from t where id = $1",
        "select 'a$b'",
        "select $q$ a $q$",
        "select 1 -- c",
        "/* c */ select 1",
        "select \"Name\" from t",
        "select E'\\n'",
        "select 'open",
    ] {
        assert_eq!(quick(sql, Dialect::Postgres), None, "{sql}");
    }
    for sql in [
        "select 1 # c",
        "/*! select */ 1",
        "select `open",
        "select 'a\\",
    ] {
        assert_eq!(quick(sql, Dialect::MySql), None, "{sql}");
    }
}

/// Pieces of statements, the tricky ones included.
fn piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "select", "SELECT", "from", "t", "x_1", "in", "IN", "with", "e", "E", "é", "a$b", "1",
        "1.5", "0x1F", "1e5", "'a'", "'it''s'", "'a\\'b'", "'", "\"q\"", "\"", "`n`", "`a``b`",
        "`", "(", ")", ",", ".", "=", "<", ">", "?", "*", "-", "/", "#", "@", ":", ";", "$", "$1",
        "--", "-- ", "/*", "*/", "/*!", "\\", " ", "  ", "\n", "\t", "", "\x0b", "e'",
    ])
}

/// Pieces the one-pass path takes in any order on MySQL (no `$`, `e'`, `--`, `/*`).
fn plain_piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "select", "SELECT", "from", "where", "t", "x_1", "id", "é", "f", "1", "1.5", ".5", "1.e5",
        "0x1F", "'a'", "'it''s'", "'a\\'b'", "\"q\"", "`n`", "`a``b`", "(", ")", ",", ".", "=",
        "<", ">", "?", "*", "@", ":", "+", "!", " ", "  ", "\n", "\t", "", "\x0b", "\x0c", "()",
    ])
}

/// The pieces in order, each followed by a space where `glue` says so.
fn joined(pieces: &[&str], glue: &[bool]) -> String {
    let mut sql = String::new();
    for (p, space) in pieces.iter().zip(glue) {
        sql.push_str(p);
        if *space {
            sql.push(' ');
        }
    }
    sql
}

proptest! {
    #[test]
    fn plain_texts_take_the_one_pass_path_and_agree(pieces in prop::collection::vec(plain_piece(), 0..24), glue in prop::collection::vec(prop::bool::ANY, 24)) {
        let sql = joined(&pieces, &glue);
        // (MySQL takes `"q"` as a string; PostgreSQL's quoted names go to the scanner.)
        prop_assert!(agrees(sql.as_bytes(), Dialect::MySql)?, "{:?} not taken", sql);
        agrees(sql.as_bytes(), Dialect::Postgres)?;
    }

    #[test]
    fn the_one_pass_path_agrees_with_the_scanner(pieces in prop::collection::vec(piece(), 0..24), glue in prop::collection::vec(prop::bool::ANY, 24)) {
        let sql = joined(&pieces, &glue);
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            agrees(sql.as_bytes(), dialect)?;
        }
    }

    #[test]
    fn any_bytes_agree(s in proptest::collection::vec(any::<u8>(), 0..60)) {
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            agrees(&s, dialect)?;
        }
    }
}

/// Values of every kind the one-pass path folds, and look-alikes.
fn value() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "1", "42", "1.5", ".5", "1.e5", "0x1F", "1e5", "7a", "'a'", "'it''s'", "'a\\'b'", "''",
        "\"q\"", "'1 -- x'", "'$'", "'/*'", "'in'", "?",
    ])
}

/// Two texts with the same [`values_key`], the first with a plain shape, have the
/// same shape.
fn same_key_same_shape(a: &str, b: &str, dialect: Dialect) -> Result<(), TestCaseError> {
    let (ka, kb) = (
        values_key(a.as_bytes(), dialect),
        values_key(b.as_bytes(), dialect),
    );
    let sa = crate::shape(a.as_bytes(), dialect);
    if ka.is_some() && ka == kb && sa.plain {
        prop_assert_eq!(
            sa,
            crate::shape(b.as_bytes(), dialect),
            "{:?} / {:?} ({:?})",
            a,
            b,
            dialect
        );
    }
    Ok(())
}

#[test]
fn statements_that_differ_in_values_share_a_key() {
    let pg = Dialect::Postgres;
    let key = |s: &str| values_key(s.as_bytes(), pg);
    let base = key("SELECT c FROM sluice_bench WHERE id = 4242");
    assert!(base.is_some());
    assert_eq!(base, key("SELECT c FROM sluice_bench WHERE id = 7"));
    assert_eq!(base, key("SELECT c FROM sluice_bench WHERE id = 'x'"));
    assert_eq!(base, key("SELECT c FROM sluice_bench WHERE id = ?"));
    assert_ne!(base, key("SELECT c FROM sluice_bench WHERE id =  7"));
    assert_ne!(key("SELECT * FROM t1"), key("SELECT * FROM t2"));
    assert_ne!(
        base,
        Some(crate::shape(b"SELECT c FROM sluice_bench WHERE id = 7", pg).key)
    );
    for sql in [
        "select $1",
        "select 'a$b'",
        "select E'x'",
        "select \"N\" from t",
        "select 'open",
    ] {
        assert_eq!(key(sql), None, "{sql}");
    }
    let my = |s: &str| values_key(s.as_bytes(), Dialect::MySql);
    assert_eq!(my("select \"a\""), my("select 'b'"));
    assert_ne!(my("select `a 1`"), my("select `a 2`"));
    assert_eq!(my("select `open"), None);
    for (a, b) in [
        (
            "SELECT c FROM t WHERE id = 4242",
            "SELECT c FROM t WHERE id = 'x'",
        ),
        ("select e?", "select e'x'"),
        ("select 'x'", "select '$'"),
        ("select 1", "select 1e5"),
    ] {
        for dialect in [pg, Dialect::MySql] {
            same_key_same_shape(a, b, dialect).unwrap();
            same_key_same_shape(b, a, dialect).unwrap();
        }
    }
}

proptest! {
    #[test]
    fn texts_with_the_same_values_key_have_the_same_shape(
        pieces in prop::collection::vec(prop_oneof![piece(), value()], 0..20),
        swaps in prop::collection::vec(value(), 20),
        glue in prop::collection::vec(prop::bool::ANY, 20),
    ) {
        let a = joined(&pieces, &glue);
        // The same pieces with every value swapped for another.
        let values: Vec<&str> = pieces
            .iter()
            .zip(&swaps)
            .map(|(p, v)| if value_piece(p) { *v } else { *p })
            .collect();
        let b = joined(&values, &glue);
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            same_key_same_shape(&a, &b, dialect)?;
            same_key_same_shape(&b, &a, dialect)?;
        }
    }
}

fn value_piece(p: &str) -> bool {
    p.starts_with(|c: char| c.is_ascii_digit() || c == '\'' || c == '"' || c == '?')
}
