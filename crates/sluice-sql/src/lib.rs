//! Single-pass SQL scanning for Sluice: no full parse on the hot path.
//!
//! The session ledger needs to know what a statement does to session state (SET, BEGIN,
//! PREPARE, LISTEN, temp tables, advisory locks, WITH HOLD cursors...) without parsing SQL.
//! [`lex`] splits text into tokens honouring quotes, dollar quotes and comments;
//! [`effects`] walks the statements of a query string and reports the effect of each.

mod class;
mod effects;
mod effects_my;
mod facts;
mod lex;
mod prehashed;
mod quick;
pub mod session_id;
mod settings_read;
pub mod signal;

pub use class::{Class, classify};
pub use effects::{Effect, effects};
pub use effects_my::effects_mysql;
pub use facts::{Facts, Kind, Shape, facts, shape};
pub use lex::{Dialect, Token, Tokens};
pub use prehashed::Prehashed;
pub use quick::values_key;
pub use settings_read::{reads_only_settings, sets_one_setting};

/// Cheap pre-check: true when `sql` certainly has no session-state effect, without
/// tokenizing: a single plain DML/SELECT statement that mentions none of the words the
/// scanner looks for. Anything else (including `false` for harmless statements) goes
/// to [`effects`].
pub fn surely_plain(sql: &[u8]) -> bool {
    surely_plain_in(sql, Dialect::Postgres)
}

/// [`surely_plain`] for a dialect: MySQL also has user variables (`@`), `#` comments
/// and SQL_CALC_FOUND_ROWS to look out for.
pub fn surely_plain_in(sql: &[u8], dialect: Dialect) -> bool {
    let first = first_word(sql);
    const PLAIN: [&[u8]; 6] = [
        b"select", b"insert", b"update", b"delete", b"values", b"table",
    ];
    if !PLAIN.iter().any(|k| first.eq_ignore_ascii_case(k)) {
        return false;
    }
    // One statement only (a trailing semicolon is fine), no comments or dollar quotes
    // that could hide the end of one; and none of the words that may carry an effect
    // inside a plain statement: lock functions, set_config, INTO TEMP / pg_temp (both
    // contain "temp"), and on MySQL SQL_CALC_FOUND_ROWS. One pass, a table lookup a
    // byte; a closer look only at the letters the words begin with.
    let body = sql.trim_ascii_end();
    let body = body.strip_suffix(b";").unwrap_or(body);
    let mysql = dialect == Dialect::MySql;
    for (i, &b) in body.iter().enumerate() {
        let word = match BYTE_CLASS[usize::from(b)] {
            PLAIN_BYTE => continue,
            NEVER => return false,
            MYSQL_NEVER if mysql => return false,
            MYSQL_NEVER => continue,
            SLASH if body.get(i + 1) == Some(&b'*') => return false,
            SLASH => continue,
            CALC if !mysql => continue,
            k => MARKERS[usize::from(k - 1)],
        };
        // Four bytes at once, lowered (`| 0x20` lowers a letter and makes no other byte
        // into one; a `_` becomes DEL, which only makes the check stricter), then the
        // rest of a longer word.
        let Some(w) = body.get(i..i + word.len()) else {
            continue;
        };
        let four = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) | 0x2020_2020;
        if four(w) == four(word) && w[4..].eq_ignore_ascii_case(&word[4..]) {
            return false;
        }
    }
    true
}

/// The words [`surely_plain_in`] looks for, lower case; the last one on MySQL only.
const MARKERS: [&[u8]; 4] = [b"lock", b"set_config", b"temp", b"calc"];
/// [`BYTE_CLASS`]: a byte of no interest; 1 + the index in [`MARKERS`] of the word a
/// letter begins (in either case; [`CALC`] is the last); a byte that ends the fast path
/// (`;` `$` `-`, and `&`: PostgreSQL's `U&"..."` may spell any name in escapes), on
/// MySQL only (`@` `#`); a slash (a comment if a star follows).
const PLAIN_BYTE: u8 = 0;
const CALC: u8 = 4;
const NEVER: u8 = 5;
const MYSQL_NEVER: u8 = 6;
const SLASH: u8 = 7;
static BYTE_CLASS: [u8; 256] = {
    let mut t = [PLAIN_BYTE; 256];
    let mut k = 0;
    while k < MARKERS.len() {
        let c = MARKERS[k][0];
        t[c as usize] = k as u8 + 1;
        t[c.to_ascii_uppercase() as usize] = k as u8 + 1;
        k += 1;
    }
    t[b';' as usize] = NEVER;
    t[b'$' as usize] = NEVER;
    t[b'-' as usize] = NEVER;
    t[b'&' as usize] = NEVER;
    t[b'@' as usize] = MYSQL_NEVER;
    t[b'#' as usize] = MYSQL_NEVER;
    t[b'/' as usize] = SLASH;
    t
};

/// The statement's first word (letters only, leading whitespace skipped).
pub fn first_word(sql: &[u8]) -> &[u8] {
    let start = sql
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(sql.len());
    let end = sql[start..]
        .iter()
        .position(|b| !b.is_ascii_alphabetic())
        .map_or(sql.len(), |n| start + n);
    &sql[start..end]
}

/// Texts made of up to `most` of `pieces` (for property tests that hold a fast path
/// to the slow one).
#[cfg(test)]
fn texts_of(
    pieces: &'static [&'static str],
    most: usize,
) -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    proptest::collection::vec(proptest::sample::select(pieces), 0..most).prop_map(|v| v.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surely_plain_only_when_it_is() {
        assert!(surely_plain(
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 12;"
        ));
        assert!(surely_plain(b"  update t set a = 1 where b = 'x'"));
        assert!(surely_plain(b"INSERT INTO h (a) VALUES (1)"));
        assert!(surely_plain(b"select a / b, c*d from t where e = '/'"));
        // "calc" is a MySQL marker only.
        assert!(surely_plain(b"select calc from t"));
        for s in [
            "select pg_advisory_lock(1)",
            "SELECT 1 INTO TEMP t",
            "select set_config('a', 'b', false)",
            "select U&\"pg_advisory_\\006Cock\"(1)",
            "select 1; set x = 1",
            "set x = 1",
            "select $$ ; $$",
            "select 1 -- ; set x = 1",
            "select /* ; */ 1",
            "select 1 into Temporary t",
            "SELECT SET_CONFIG('a', 'b', false)",
            "create table t(a int)",
        ] {
            assert!(!surely_plain(s.as_bytes()), "{s}");
        }
        assert!(surely_plain_in(
            b"SELECT c FROM sbtest1 WHERE id=5",
            Dialect::MySql
        ));
        for s in [
            "select @x := 1",
            "select 1 # x",
            "select sql_calc_found_rows 1",
            "SELECT SQL_Calc_Found_Rows 1",
            "select 1 /* x */",
            "select get_LOCK('a', 1)",
        ] {
            assert!(!surely_plain_in(s.as_bytes(), Dialect::MySql), "{s}");
        }
        // Whatever surely_plain accepts, the scanner finds nothing in.
        for s in ["select 1", "insert into t values (1)", "delete from t"] {
            if surely_plain(s.as_bytes()) {
                assert!(effects(s.as_bytes()).iter().all(|e| *e == Effect::None));
            }
        }
    }

    /// Pieces of statements, the effect-bearing words among them in mixed case.
    const PIECES: &[&str] = &[
        "select",
        "SELECT",
        " from t ",
        "pg_advisory_",
        "LoCk",
        "Set_Config",
        "TEMP",
        "into",
        "Calc",
        "sql_calc_found_rows",
        "U&\"x\"",
        "\"pg_advisory_lock\"",
        "\"set_config\"",
        "@v",
        "#",
        "/",
        "*",
        "-",
        ";",
        "$",
        "'",
        "(",
        ")",
        "1",
        " ",
        "set ",
        "x = ",
        "GET_LOCK",
        "lock",
    ];

    proptest::proptest! {
        /// Whatever the fast path calls plain, the scanner finds no effect in, on
        /// either dialect.
        #[test]
        fn surely_plain_agrees_with_the_scanner(body in crate::texts_of(PIECES, 12)) {
            for first in ["select ", "UPDATE t set ", "insert into t "] {
                let sql = format!("{first}{body}");
                if surely_plain_in(sql.as_bytes(), Dialect::Postgres) {
                    let e = effects(sql.as_bytes());
                    proptest::prop_assert!(e.iter().all(|e| *e == Effect::None), "{sql}: {e:?}");
                }
                if surely_plain_in(sql.as_bytes(), Dialect::MySql) {
                    let e = effects_mysql(sql.as_bytes());
                    proptest::prop_assert!(e.iter().all(|e| *e == Effect::None), "{sql}: {e:?}");
                }
            }
        }
    }
}
