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
pub mod signal;

pub use class::{Class, classify};
pub use effects::{Effect, effects};
pub use effects_my::effects_mysql;
pub use facts::{Facts, Kind, Shape, facts, shape};
pub use lex::{Dialect, Token, Tokens};
pub use prehashed::Prehashed;

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
    if dialect == Dialect::MySql
        && (memchr::memchr2(b'@', b'#', sql).is_some()
            || memchr::memmem::find(sql, b"CALC").is_some()
            || memchr::memmem::find(sql, b"calc").is_some())
    {
        return false;
    }
    let first = first_word(sql);
    const PLAIN: [&[u8]; 6] = [
        b"select", b"insert", b"update", b"delete", b"values", b"table",
    ];
    if !PLAIN.iter().any(|k| first.eq_ignore_ascii_case(k)) {
        return false;
    }
    // One statement only (a trailing semicolon is fine), no comments or dollar quotes
    // that could hide the end of one.
    let body = sql.trim_ascii_end();
    let body = body.strip_suffix(b";").unwrap_or(body);
    if memchr::memchr3(b';', b'$', b'-', body).is_some()
        || memchr::memmem::find(body, b"/*").is_some()
    {
        return false;
    }
    // Words that may carry an effect inside a plain statement: lock functions,
    // set_config, INTO TEMP / pg_temp (both contain "temp"). Checked case-insensitively.
    const MARKERS: [&[u8]; 3] = [b"lock", b"set_config", b"temp"];
    !(0..body.len()).any(|i| {
        let rest = &body[i..];
        MARKERS
            .iter()
            .any(|m| rest.len() >= m.len() && rest[..m.len()].eq_ignore_ascii_case(m))
    })
}

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
        for s in [
            "select pg_advisory_lock(1)",
            "SELECT 1 INTO TEMP t",
            "select set_config('a', 'b', false)",
            "select 1; set x = 1",
            "set x = 1",
            "select $$ ; $$",
            "select 1 -- ; set x = 1",
            "select /* ; */ 1",
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
}
