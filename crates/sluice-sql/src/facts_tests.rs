use super::*;
use proptest::prelude::*;

fn pg(s: &str) -> Facts {
    facts(s.as_bytes(), Dialect::Postgres)
}

fn my(s: &str) -> Facts {
    facts(s.as_bytes(), Dialect::MySql)
}

#[test]
fn digest_text_folds_values() {
    let cases = [
        (
            "SELECT abalance FROM pgbench_accounts WHERE aid = 12;",
            "SELECT abalance FROM pgbench_accounts WHERE aid = ?",
        ),
        (
            "select  a,b from t where x in (1, 2,3) and y = 'a''b' -- c\n",
            "select a, b from t where x in (?) and y = ?",
        ),
        (
            "SELECT * FROM t WHERE id = $1",
            "SELECT * FROM t WHERE id = ?",
        ),
        (
            "select x::int, y<=2 from s.t",
            "select x :: int, y <= ? from s.t",
        ),
        (
            "/* hi */ INSERT INTO t (a, b) VALUES (1, 'x')",
            "INSERT INTO t (a, b) VALUES (?, ?)",
        ),
        ("DELETE FROM t", "DELETE FROM t"),
        ("select f(1), g()", "select f(?), g()"),
        ("select 1; select 2", "select ?; select ?"),
        (
            "select x from t where y in (select z from u)",
            "select x from t where y in (select z from u)",
        ),
    ];
    for (sql, want) in cases {
        assert_eq!(pg(sql).digest_text, want, "{sql}");
    }
    assert_eq!(
        my("SELECT c FROM `sbtest1` WHERE id=? AND k IN (?,?,?) # x").digest_text,
        "SELECT c FROM `sbtest1` WHERE id = ? AND k IN (?)"
    );
    assert_eq!(
        my("select @a := \"s\", @@version").digest_text,
        "select @a := ?, @@version"
    );
}

#[test]
fn kinds() {
    let cases = [
        ("select 1", Kind::Select),
        ("WITH x AS (SELECT 1) SELECT * FROM x", Kind::Select),
        (
            "with x as (select 1) insert into t select * from x",
            Kind::Insert,
        ),
        ("update t set a = 1", Kind::Update),
        ("delete from t", Kind::Delete),
        ("insert into t values (1)", Kind::Insert),
        ("create table t (a int)", Kind::Ddl),
        ("TRUNCATE t", Kind::Ddl),
        ("begin", Kind::Transaction),
        ("commit", Kind::Transaction),
        ("set x = 1", Kind::Set),
        ("show tables", Kind::Show),
        ("call p()", Kind::Call),
        ("copy t from stdin", Kind::Copy),
        ("vacuum", Kind::Other),
        ("", Kind::Other),
    ];
    for (sql, want) in cases {
        assert_eq!(pg(sql).kind, want, "{sql}");
    }
    assert_eq!(my("REPLACE INTO t VALUES (1)").kind, Kind::Insert);
    for (name, k) in Kind::ALL {
        assert_eq!(Kind::from_name(name), Some(*k));
        assert_eq!(k.name(), *name);
    }
}

#[test]
fn tables_named() {
    let cases: &[(&str, &[&str])] = &[
        ("select * from t", &["t"]),
        (
            "select * from public.Orders o where o.id = 1",
            &["public.orders"],
        ),
        ("select * from a, b x, c as y where 1", &["a", "b", "c"]),
        (
            "select * from a join s.b on a.id = b.id left join c using (id)",
            &["a", "s.b", "c"],
        ),
        ("update t set a = (select max(x) from u)", &["t", "u"]),
        ("insert into t (a) select a from u", &["t", "u"]),
        ("delete from t where id in (select id from u)", &["t", "u"]),
        ("delete from only t using u where t.a = u.a", &["t", "u"]),
        ("create table if not exists x.y (a int)", &["x.y"]),
        ("drop table a, b", &["a", "b"]),
        ("truncate table t", &["t"]),
        ("truncate t", &["t"]),
        ("select * from \"Mixed\".\"Case\"", &["Mixed.Case"]),
        (
            "with w as (select * from t) select * from w join u on true",
            &["t", "u"],
        ),
        ("select * from (select 1) s", &[]),
        ("select 1", &[]),
        ("select * from t where a = 1 for update", &["t"]),
        ("select * from t t1, t t2", &["t"]),
        (
            "select * from jobs where done = false for update skip locked",
            &["jobs"],
        ),
        ("select * from jobs for update of jobs nowait", &["jobs"]),
        ("copy orders from stdin", &["orders"]),
        ("copy orders to stdout", &["orders"]),
        (
            "insert into item select g, g from generate_series(1, 10) g",
            &["item"],
        ),
        ("select * from json_table(x) j join t on true", &["t"]),
    ];
    for (sql, want) in cases {
        assert_eq!(pg(sql).tables, *want, "{sql}");
    }
    assert_eq!(
        my("SELECT * FROM `db`.`order_line` ol JOIN stock s ON s.id = ol.i").tables,
        ["db.order_line", "stock"]
    );
    assert_eq!(
        my("UPDATE dbt2.district SET d_next_o_id = 5").tables,
        ["dbt2.district"]
    );
    assert_eq!(
        my("INSERT INTO t (a) VALUES (1) ON DUPLICATE KEY UPDATE qty = qty + 1").tables,
        ["t"]
    );
    assert_eq!(my("INSERT LOW_PRIORITY t VALUES (1)").tables, ["t"]);
    assert_eq!(my("REPLACE t VALUES (1)").tables, ["t"]);
}

#[test]
fn every_kind_that_runs() {
    let kinds = |s: &str| pg(s).kinds;
    assert_eq!(
        kinds("SELECT 1; DROP TABLE users"),
        [Kind::Select, Kind::Ddl]
    );
    assert_eq!(
        kinds("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d"),
        [Kind::Select, Kind::Delete]
    );
    assert_eq!(
        kinds("EXPLAIN ANALYZE DELETE FROM t"),
        [Kind::Show, Kind::Delete]
    );
    assert_eq!(
        kinds("PREPARE p AS DELETE FROM t"),
        [Kind::Other, Kind::Delete]
    );
    assert_eq!(
        kinds("SELECT a AS b FROM t WHERE x IN (SELECT 1)"),
        [Kind::Select]
    );
    assert_eq!(kinds("delete from t"), [Kind::Delete]);
}

#[test]
fn several_statements() {
    assert!(pg("select 1; select 2").several);
    assert!(!pg("select 1;").several);
    assert!(!pg("select ';'").several);
}

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..1_000_000).prop_map(|n| n.to_string()),
        "[a-z ;']{0,12}".prop_map(|s| format!("'{}'", s.replace('\'', "''"))),
        (0u32..1000, 0u32..100).prop_map(|(a, b)| format!("{a}.{b}")),
    ]
}

proptest! {
    #[test]
    fn same_digest_whatever_the_literals(a in literal(), b in literal(), c in prop::collection::vec(literal(), 1..20), d in prop::collection::vec(literal(), 1..20), ws in "[ \t\n]{1,3}") {
        let one = format!("SELECT x FROM t WHERE a = {a} AND b IN ({})", c.join(", "));
        let two = format!("SELECT{ws}x  FROM t /* c */ WHERE a = {b} AND b IN ({})", d.join(","));
        let (f1, f2) = (pg(&one), pg(&two));
        prop_assert_eq!(&f1.digest_text, &f2.digest_text);
        prop_assert_eq!(f1.digest, f2.digest);
        let (m1, m2) = (my(&one), my(&two));
        prop_assert_eq!(m1.digest, m2.digest);
    }

    #[test]
    fn different_shapes_different_ids(col in "[a-z]{1,8}", other in "[a-z]{1,8}", lit in literal()) {
        prop_assume!(col != other);
        let one = pg(&format!("SELECT {col} FROM t WHERE k = {lit}"));
        let two = pg(&format!("SELECT {other} FROM t WHERE k = {lit}"));
        prop_assert_ne!(one.digest, two.digest);
        let three = pg(&format!("SELECT {col} FROM t WHERE k > {lit}"));
        prop_assert_ne!(one.digest, three.digest);
    }

    #[test]
    fn never_panics_and_shape_agrees(s in "\\PC{0,80}") {
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            let f = facts(s.as_bytes(), dialect);
            let shape = super::shape(s.as_bytes(), dialect);
            prop_assert_eq!((shape.kind, shape.several), (f.kind, f.several));
            // The key hashes the digest's bytes; the text equals them unless they are not
            // UTF-8 (an unterminated quoted name can end inside a character).
            if !f.digest_text.contains('\u{FFFD}') {
                prop_assert_eq!(shape.key, xxhash_rust::xxh3::xxh3_128_with_seed(f.digest_text.as_bytes(), crate::quick::key_seed()));
            }
        }
    }

    #[test]
    fn shape_of_any_bytes(s in proptest::collection::vec(any::<u8>(), 0..80)) {
        // Not UTF-8: the key hashes the bytes, the text has U+FFFD; same kind.
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            let f = facts(&s, dialect);
            let shape = super::shape(&s, dialect);
            prop_assert_eq!((shape.kind, shape.several), (f.kind, f.several));
            if !f.digest_text.contains('\u{FFFD}') {
                prop_assert_eq!(shape.key, xxhash_rust::xxh3::xxh3_128_with_seed(f.digest_text.as_bytes(), crate::quick::key_seed()));
            }
        }
    }
}
