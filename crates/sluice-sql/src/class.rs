//! Read or write: where a statement may run on a route that splits them. One pass over
//! the tokens, no parse. Anything not known to be a read is a write: DML, DDL, `SELECT
//! ... FOR UPDATE / FOR SHARE / LOCK IN SHARE MODE / INTO`, `LOCK`, `CALL`, functions
//! with side effects or that read state of the connection (nextval, advisory locks,
//! GET_LOCK, LAST_INSERT_ID, ...), several statements in one string. A leading comment
//! `/* sluice:primary */` or `/* sluice:replica */` overrides the verdict.

use crate::lex::{Dialect, Token, Tokens};

/// Where a statement may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Anywhere: a replica will do.
    Read,
    /// On the primary.
    Write,
    /// Starts a read-only transaction, which may run wholly on one replica.
    ReadOnlyTransaction,
}

/// Words whose statements only read.
const READS: [&str; 8] = [
    "select", "with", "values", "table", "show", "explain", "describe", "desc",
];

/// Functions that change something, take a lock, or read what a connection did.
const SIDE_EFFECTS: [&str; 35] = [
    "nextval",
    "setval",
    "currval",
    "lastval",
    "set_config",
    "pg_notify",
    "txid_current",
    "pg_current_xact_id",
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
    "pg_advisory_unlock",
    "pg_advisory_unlock_shared",
    "pg_advisory_unlock_all",
    "get_lock",
    "release_lock",
    "release_all_locks",
    "is_used_lock",
    "is_free_lock",
    "last_insert_id",
    "found_rows",
    "row_count",
    "lo_import",
    "lo_export",
    "lo_creat",
    "lo_create",
    "lo_unlink",
    "lo_from_bytea",
    "lo_put",
    "lo_open",
];

/// Words that, anywhere in a read, make it a write (a data-changing CTE, a locking
/// clause, SELECT ... INTO).
const WRITE_WORDS: [&str; 8] = [
    "insert", "update", "delete", "merge", "into", "for", "lock", "analyze",
];

/// The lengths of the words of `WRITE_WORDS`.
const WRITE_LENGTHS: std::ops::RangeInclusive<usize> = 3..=7;

/// Where `sql` may run.
pub fn classify(sql: &[u8], dialect: Dialect) -> Class {
    if surely_read(sql) {
        return Class::Read;
    }
    by_tokens(sql, dialect)
}

/// A SELECT that none of [`classify`]'s rules can call a write, seen in one pass over
/// its bytes without tokens (a point select's classification: about 1,200
/// instructions by tokens): no `(` (so no function call), no `;` (one statement), no
/// `/` (no hint), none of the write words anywhere, as a word or inside one, and no
/// sequence word after a `.`.
fn surely_read(sql: &[u8]) -> bool {
    let s = sql.trim_ascii_start();
    let Some((first, rest)) = s.split_at_checked(6) else {
        return false;
    };
    if !first.eq_ignore_ascii_case(b"select")
        || !rest
            .first()
            .is_some_and(|&b| b.is_ascii_whitespace() || b == b'*')
    {
        return false;
    }
    for (i, &b) in rest.iter().enumerate() {
        match READ_BYTES[usize::from(b)] {
            0 => continue,
            REFUSED => return false,
            _ => {}
        }
        // A letter a write word begins with: its second byte, then the whole word.
        let words: &[&[u8]] = match b | 0x20 {
            b'i' => &[b"insert", b"into"],
            b'u' => &[b"update"],
            b'd' => &[b"delete"],
            b'm' => &[b"merge"],
            b'f' => &[b"for"],
            b'l' => &[b"lock"],
            b'a' => &[b"analyze"],
            // What follows a `.` (past spaces) may be MariaDB's `seq.nextval`: a write
            // with no `(`; a comment there is left to the tokens.
            b'.' if sequence_after(&rest[i + 1..]) => return false,
            _ => continue,
        };
        let at = &rest[i..];
        if at.get(1).is_some_and(|&y| y | 0x20 == words[0][1])
            && words
                .iter()
                .any(|w| at.get(..w.len()).is_some_and(|a| a.eq_ignore_ascii_case(w)))
        {
            return false;
        }
    }
    true
}

/// Whether what follows a `.` (past spaces) may be a sequence word, or a comment
/// (left to the tokens).
#[cold]
fn sequence_after(s: &[u8]) -> bool {
    let after = s.trim_ascii_start();
    matches!(after.first(), Some(b'-' | b'#'))
        || SEQUENCE_WORDS.iter().any(|w| {
            after
                .get(..w.len())
                .is_some_and(|a| a.eq_ignore_ascii_case(w.as_bytes()))
        })
}

/// MariaDB's `seq.nextval` / `seq.currval` (Oracle mode): writes with no call.
const SEQUENCE_WORDS: [&str; 2] = ["nextval", "currval"];

/// [`surely_read`]'s look at each byte: 0 for most; [`REFUSED`] for `(` `;` `/`; 1
/// for the letters (either case) a write word begins with, and `.`.
const REFUSED: u8 = 2;
static READ_BYTES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut k = 0;
    while k < WRITE_WORDS.len() {
        let c = WRITE_WORDS[k].as_bytes()[0];
        t[c as usize] = 1;
        t[c.to_ascii_uppercase() as usize] = 1;
        k += 1;
    }
    t[b'.' as usize] = 1;
    t[b'(' as usize] = REFUSED;
    t[b';' as usize] = REFUSED;
    t[b'/' as usize] = REFUSED;
    t
};

/// [`classify`] token by token.
fn by_tokens(sql: &[u8], dialect: Dialect) -> Class {
    if let Some(hint) = hint(sql) {
        return hint;
    }
    let mut tokens = Tokens::new_in(sql, dialect).peekable();
    let Some(first) = tokens.next() else {
        return Class::Write;
    };
    if first.is("begin") || first.is("start") {
        return transaction(tokens);
    }
    if !READS.iter().any(|w| first.is(w)) {
        return Class::Write;
    }
    let mut ended = false;
    // The two tokens before `t`, for PostgreSQL's `U&"..."`.
    let mut before: [Option<Token<'_>>; 2] = [None, None];
    while let Some(t) = tokens.next() {
        if ended {
            // A second statement: not looked into.
            return Class::Write;
        }
        let prev = before[1];
        let escaped = prev == Some(Token::Punct(b'&')) && before[0].is_some_and(|b| b.is("u"));
        before = [prev, Some(t)];
        match t {
            Token::Semicolon => ended = true,
            // (Lengths first: most words of a read are none of these.)
            Token::Word(w)
                if WRITE_LENGTHS.contains(&w.len()) && WRITE_WORDS.iter().any(|k| t.is(k)) =>
            {
                return Class::Write;
            }
            // MariaDB's `seq.nextval` (Oracle mode), no call needed.
            Token::Word(_)
                if prev == Some(Token::Punct(b'.')) && SEQUENCE_WORDS.iter().any(|w| t.is(w)) =>
            {
                return Class::Write;
            }
            // A name spelled with escapes (`U&"..."`, perhaps with `UESCAPE`) may be
            // any function's: not looked into.
            Token::Quoted(_) if escaped && dialect == Dialect::Postgres => return Class::Write,
            // A call of a side-effect function, its name a word or quoted (`"nextval"(`,
            // MySQL's backticks, and its `"..."` under ANSI_QUOTES; any case, the safe
            // side).
            _ if tokens.peek() == Some(&Token::Punct(b'('))
                && function_name(t).is_some_and(|n| {
                    SIDE_EFFECTS
                        .iter()
                        .any(|w| n.eq_ignore_ascii_case(w.as_bytes()))
                }) =>
            {
                return Class::Write;
            }
            _ => {}
        }
    }
    Class::Read
}

/// The name a token gives a function it calls: a word, a quoted name, or (MySQL's
/// ANSI_QUOTES) a `"..."` string.
fn function_name(t: Token<'_>) -> Option<&[u8]> {
    match t {
        Token::Word(name) | Token::Quoted(name) => Some(name),
        Token::Str(s) => s.strip_prefix(b"\"").and_then(|s| s.strip_suffix(b"\"")),
        _ => None,
    }
}

/// BEGIN / START TRANSACTION: read-only if it says so.
fn transaction<'a>(tokens: impl Iterator<Item = Token<'a>>) -> Class {
    let mut prev_read = false;
    for t in tokens {
        if t == Token::Semicolon {
            break;
        }
        if prev_read && t.is("only") {
            return Class::ReadOnlyTransaction;
        }
        prev_read = t.is("read");
    }
    Class::Write
}

/// A leading `/* sluice:primary */` or `/* sluice:replica */`.
fn hint(sql: &[u8]) -> Option<Class> {
    let s = sql.trim_ascii_start();
    let body = s.strip_prefix(b"/*")?;
    let end = memchr::memmem::find(body, b"*/")?;
    let words = body[..end].trim_ascii();
    match words {
        b"sluice:primary" => Some(Class::Write),
        b"sluice:replica" => Some(Class::Read),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(s: &str) -> Class {
        classify(s.as_bytes(), Dialect::Postgres)
    }

    fn my(s: &str) -> Class {
        classify(s.as_bytes(), Dialect::MySql)
    }

    #[test]
    fn write_words_are_as_long_as_the_filter_says() {
        assert!(WRITE_WORDS.iter().all(|w| WRITE_LENGTHS.contains(&w.len())));
    }

    #[test]
    fn the_byte_pass_knows_every_sequence_word() {
        for w in SEQUENCE_WORDS {
            let sql = format!("select s.{}", w.to_uppercase());
            assert!(!surely_read(sql.as_bytes()), "{sql}");
        }
    }

    #[test]
    fn the_byte_pass_knows_every_write_word() {
        // Every write word is found whatever its neighbours.
        assert!(surely_read(b"SELECT c FROM sluice_bench WHERE id = 12345"));
        assert!(surely_read(b"  select * from t"));
        for w in WRITE_WORDS {
            for w in [w.to_string(), w.to_uppercase()] {
                let sql = format!("select a {w} b");
                assert!(!surely_read(sql.as_bytes()), "{sql}");
            }
        }
        for sql in [
            "select nextval('s')",
            "select 1; delete from t",
            "/* sluice:primary */ select 1",
            "select/* sluice:primary */1",
            "selectx from t",
            "select_1 from t",
            "with x as (select 1) select * from x",
        ] {
            assert!(!surely_read(sql.as_bytes()), "{sql}");
        }
    }

    /// Pieces of statements: write words, side-effect functions, comments, quotes.
    const PIECES: &[&str] = &[
        " a ", "FROM t", "fOr", " update ", "Lock", "into", "nextval", "nextval(", "(", ")", ";",
        "'", "\"", "`", "-- ", "\n", "/*", "*/", "#", "$$", "\\", "get_lock", "x", "*", ".",
        "nextval", "CurrVal",
    ];

    proptest::proptest! {
        /// Whatever the byte pass calls a read, the tokens do too, on either dialect.
        #[test]
        fn the_byte_pass_agrees_with_the_tokens(body in crate::texts_of(PIECES, 10)) {
            for first in ["select ", "SELECT*", " select\t"] {
                let sql = format!("{first}{body}");
                if surely_read(sql.as_bytes()) {
                    for d in [Dialect::Postgres, Dialect::MySql] {
                        proptest::prop_assert_eq!(by_tokens(sql.as_bytes(), d), Class::Read, "{}", sql);
                    }
                }
            }
        }
    }

    #[test]
    fn reads() {
        for s in [
            "select 1",
            "SELECT * FROM t WHERE id = $1",
            "  select a from t join u using (id);",
            "with x as (select 1) select * from x",
            "values (1), (2)",
            "table t",
            "show search_path",
            "explain select 1",
            "select 'insert into t values (1)', \"update\" from t",
            "select count(*) from orders -- for update",
            "/* sluice:replica */ insert into t values (1)",
            "select pg_sleep(0)",
            "select a & \"b\", count(*) from t",
            "select 'get_lock'('a')",
        ] {
            assert_eq!(pg(s), Class::Read, "{s}");
        }
        for s in [
            "SELECT * FROM `t`",
            "SHOW TABLES",
            "DESCRIBE t",
            "select `lock` from t",
        ] {
            assert_eq!(my(s), Class::Read, "{s}");
        }
    }

    #[test]
    fn writes() {
        for s in [
            "insert into t values (1)",
            "update t set a = 1",
            "delete from t",
            "create table t (a int)",
            "drop table t",
            "select * from t for update",
            "select * from t for no key update",
            "select * from t for share",
            "select * into t2 from t",
            "with d as (delete from t returning *) select * from d",
            "select nextval('s')",
            "select \"nextval\"('s')",
            "select pg_catalog.\"pg_advisory_lock\"(1)",
            "select U&\"\\006eextval\"('s')",
            "select u&\"d!0061ta\" UESCAPE '!' ('s')",
            "select currval('s')",
            "select pg_advisory_lock(1)",
            "select set_config('a.b', 'c', false)",
            "explain analyze select 1",
            "lock table t",
            "call p()",
            "copy t from stdin",
            "set search_path = x",
            "select 1; select 2",
            "begin",
            "begin isolation level serializable",
            "start transaction",
            "/* sluice:primary */ select 1",
            "",
            "vacuum",
        ] {
            assert_eq!(pg(s), Class::Write, "{s}");
        }
        for s in [
            "SELECT GET_LOCK('a', 1)",
            "SELECT RELEASE_LOCK('a')",
            "SELECT LAST_INSERT_ID()",
            "SELECT LAST_INSERT_ID(5)",
            "SELECT * FROM t LOCK IN SHARE MODE",
            "SELECT a INTO @x FROM t",
            "SELECT * FROM t INTO OUTFILE '/tmp/x'",
            "REPLACE INTO t VALUES (1)",
            "SELECT FOUND_ROWS()",
            "SELECT `get_lock`('a', 1)",
            "SELECT \"get_lock\"('a', 1)",
            "SELECT s.nextval",
            "SELECT test.s.CURRVAL FROM dual",
            "SELECT test.`LAST_INSERT_ID`()",
        ] {
            assert_eq!(my(s), Class::Write, "{s}");
        }
    }

    #[test]
    fn read_only_transactions() {
        for s in [
            "begin read only",
            "BEGIN TRANSACTION READ ONLY",
            "start transaction read only",
            "START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        ] {
            assert_eq!(pg(s), Class::ReadOnlyTransaction, "{s}");
        }
        assert_eq!(
            my("START TRANSACTION READ ONLY"),
            Class::ReadOnlyTransaction
        );
        assert_eq!(pg("begin read write"), Class::Write);
        assert_eq!(pg("begin isolation level read committed"), Class::Write);
    }
}
