//! Statements that only read server settings, as drivers send them while they connect
//! (MySQL): `SELECT @@max_allowed_packet,@@wait_timeout,@@socket` (mysql_async), `select
//! @@version_comment limit 1` (the mariadb and mysql clients), `SELECT
//! @@session.auto_increment_increment AS auto_increment_increment, ...` (Connector/J).
//! A new session of a pool gets the same answer to such a statement until an
//! administrator changes a global setting, so a proxy may answer it from a recent
//! answer instead of taking a server connection for it. Only settings that a new
//! session takes from the server's globals, its login (character set, user, database)
//! or the server itself count: nothing that changes with time or from session to
//! session (`@@timestamp`, `@@pseudo_thread_id`, `@@gtid_current_pos`, `@@warning_count`).

use crate::lex::{Dialect, Token, Tokens};

/// Settings whose value a new session of a pool (same user, database, character set
/// and capabilities) reads alike, lowercase.
const SETTINGS: &[&str] = &[
    "auto_increment_increment",
    "auto_increment_offset",
    "autocommit",
    "character_set_client",
    "character_set_connection",
    "character_set_database",
    "character_set_filesystem",
    "character_set_results",
    "character_set_server",
    "character_set_system",
    "collation_connection",
    "collation_database",
    "collation_server",
    "default_storage_engine",
    "div_precision_increment",
    "have_ssl",
    "hostname",
    "init_connect",
    "interactive_timeout",
    "license",
    "lower_case_file_system",
    "lower_case_table_names",
    "max_allowed_packet",
    "net_buffer_length",
    "net_read_timeout",
    "net_write_timeout",
    "performance_schema",
    "port",
    "protocol_version",
    "query_cache_size",
    "query_cache_type",
    "socket",
    "sql_auto_is_null",
    "sql_mode",
    "sql_select_limit",
    "storage_engine",
    "system_time_zone",
    "time_zone",
    "transaction_isolation",
    "transaction_read_only",
    "tx_isolation",
    "tx_read_only",
    "version",
    "version_comment",
    "version_compile_machine",
    "version_compile_os",
    "wait_timeout",
];

/// Whether `sql` (MySQL) is a `SELECT` of settings and nothing else: items
/// `@@[session.|global.|local.]name [[AS] alias]` of the settings above (an alias a
/// word or in backquotes), an optional `LIMIT 1`, an optional `;`, in ASCII without
/// quotes or backslashes. Comments anywhere; an executable comment's content counts as
/// text. The server still judges the statement (its answer is what is
/// reused), so a text it refuses is harmless here.
pub fn reads_only_settings(sql: &[u8]) -> bool {
    // Where the server could split the text otherwise than the lexer here (a backslash
    // under NO_BACKSLASH_ESCAPES, `"` under ANSI_QUOTES, the second byte of a
    // multi-byte character in a GBK or SJIS login), it is not taken.
    if sql
        .iter()
        .any(|&b| matches!(b, b'\\' | b'\'' | b'"') || b >= 0x80)
    {
        return false;
    }
    let mut t = Tokens::new_in(sql, Dialect::MySql).peekable();
    if !t.next().is_some_and(|w| w.is("select")) {
        return false;
    }
    loop {
        if !setting(&mut t) {
            return false;
        }
        // An alias, with or without AS.
        match t.peek() {
            Some(w) if w.is("as") => {
                t.next();
                if !matches!(t.next(), Some(Token::Word(_) | Token::Quoted(_))) {
                    return false;
                }
            }
            Some(w @ Token::Word(_)) if !w.is("limit") => {
                t.next();
            }
            Some(Token::Quoted(_)) => {
                t.next();
            }
            _ => {}
        }
        match t.next() {
            Some(Token::Punct(b',')) => continue,
            None => return true,
            Some(Token::Semicolon) => return t.next().is_none(),
            Some(w) if w.is("limit") => {
                if !matches!(t.next(), Some(Token::Number(b"1"))) {
                    return false;
                }
                return match t.next() {
                    None => true,
                    Some(Token::Semicolon) => t.next().is_none(),
                    Some(_) => false,
                };
            }
            Some(_) => return false,
        }
    }
}

/// Whether `sql` (MySQL) sets one session setting to a constant and does nothing else,
/// as drivers do as they connect: `SET [SESSION | LOCAL] name = value`, `SET
/// @@[session. | local.]name = value`, `SET NAMES value [COLLATE value]`, `SET
/// CHARACTER SET value`, `SET CHARSET value`, with an optional `;`. A value is a word
/// (`ON`, `NULL`, `DEFAULT`, `utf8mb4`), a number (with an optional `-`) or a string in
/// single quotes; never an expression, a variable or a function (whose value would
/// depend on the moment or the session it runs in). ASCII without backslashes or double
/// quotes, as for [`reads_only_settings`]. Such a statement leaves a new session of a
/// pool in the same state whenever it runs: a proxy may answer it with the answer
/// another new session got, and run it on the session's server connection later.
pub fn sets_one_setting(sql: &[u8]) -> bool {
    // (Nor a NUL: a proxy may join such texts with it.)
    if sql
        .iter()
        .any(|&b| matches!(b, b'\\' | b'"' | 0) || b >= 0x80)
    {
        return false;
    }
    let mut t = Tokens::new_in(sql, Dialect::MySql).peekable();
    if !t.next().is_some_and(|w| w.is("set")) {
        return false;
    }
    let names = match t.peek() {
        Some(w) if w.is("names") || w.is("charset") => {
            t.next();
            true
        }
        Some(w) if w.is("character") => {
            t.next();
            if !t.next().is_some_and(|w| w.is("set")) {
                return false;
            }
            true
        }
        _ => false,
    };
    if names {
        if !value(&mut t) {
            return false;
        }
        if t.peek().is_some_and(|w| w.is("collate")) {
            t.next();
            if !value(&mut t) {
                return false;
            }
        }
    } else {
        if t.peek().is_some_and(|w| w.is("session") || w.is("local")) {
            t.next();
        } else if t.peek() == Some(&Token::Punct(b'@')) {
            t.next();
            if t.next() != Some(Token::Punct(b'@')) {
                return false;
            }
            let scoped = t.peek().is_some_and(|w| w.is("session") || w.is("local"));
            if scoped {
                t.next();
                if t.next() != Some(Token::Punct(b'.')) {
                    return false;
                }
            }
        }
        let Some(Token::Word(name)) = t.next() else {
            return false;
        };
        if [
            &b"global"[..],
            b"transaction",
            b"names",
            b"password",
            b"role",
            b"statement",
        ]
        .iter()
        .any(|k| name.eq_ignore_ascii_case(k))
            || t.next() != Some(Token::Punct(b'='))
            || !value(&mut t)
        {
            return false;
        }
    }
    match t.next() {
        None => true,
        Some(Token::Semicolon) => t.next().is_none(),
        Some(_) => false,
    }
}

/// Words that MySQL reads as functions without parentheses: their value depends on the
/// moment or the session.
const NOT_CONSTANT: &[&str] = &[
    "current_date",
    "current_role",
    "current_time",
    "current_timestamp",
    "current_user",
    "localtime",
    "localtimestamp",
    "utc_date",
    "utc_time",
    "utc_timestamp",
];

/// A constant value, consumed: a word, a number (with an optional `-`) or a string.
fn value<'a>(t: &mut std::iter::Peekable<Tokens<'a>>) -> bool {
    match t.next() {
        Some(Token::Word(w))
            if NOT_CONSTANT
                .iter()
                .any(|k| w.eq_ignore_ascii_case(k.as_bytes())) =>
        {
            false
        }
        Some(Token::Word(_) | Token::Number(_) | Token::Str(_)) => {
            // A word followed by `(` or `.` is a function or a qualified name.
            !matches!(t.peek(), Some(Token::Punct(b'(' | b'.')))
        }
        Some(Token::Punct(b'-')) => matches!(t.next(), Some(Token::Number(_))),
        _ => false,
    }
}

/// `@@[scope.]name` of a listed setting, consumed.
fn setting<'a>(t: &mut std::iter::Peekable<Tokens<'a>>) -> bool {
    if t.next() != Some(Token::Punct(b'@')) || t.next() != Some(Token::Punct(b'@')) {
        return false;
    }
    let Some(Token::Word(mut name)) = t.next() else {
        return false;
    };
    let scoped = [&b"session"[..], b"global", b"local"]
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s));
    if scoped && t.peek() == Some(&Token::Punct(b'.')) {
        t.next();
        let Some(Token::Word(n)) = t.next() else {
            return false;
        };
        name = n;
    }
    SETTINGS
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::reads_only_settings as reads;

    #[test]
    fn what_drivers_read_as_they_connect() {
        assert!(reads(b"select @@version_comment limit 1"));
        assert!(reads(
            b"SELECT @@max_allowed_packet,@@wait_timeout,@@socket"
        ));
        assert!(reads(b"SELECT @@max_allowed_packet,@@wait_timeout"));
        assert!(reads(
            b"/* mysql-connector-j-8.4.0 */SELECT @@session.auto_increment_increment AS \
              auto_increment_increment, @@character_set_client AS character_set_client, \
              @@character_set_connection AS character_set_connection, @@license AS license, \
              @@sql_mode AS sql_mode, @@system_time_zone AS system_time_zone, \
              @@time_zone AS time_zone, @@transaction_isolation AS transaction_isolation, \
              @@wait_timeout AS wait_timeout"
        ));
        assert!(reads(b"SELECT @@GLOBAL.version `v`, @@tx_isolation AS i;"));
        assert!(reads(b"select @@version_comment limit 1;"));
    }

    #[test]
    fn what_drivers_set_as_they_connect() {
        use super::sets_one_setting as sets;
        for sql in [
            &b"SET autocommit=0"[..],
            b"SET AUTOCOMMIT = 1",
            b"set names utf8mb4",
            b"SET NAMES 'utf8mb4' COLLATE 'utf8mb4_general_ci'",
            b"SET character_set_results = NULL",
            b"SET SESSION sql_mode='STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'",
            b"SET @@session.wait_timeout = 28800;",
            b"SET @@sql_select_limit=DEFAULT",
            b"SET LOCAL auto_increment_increment = -1",
            b"SET CHARACTER SET utf8",
            b"/* driver */ SET time_zone = '+00:00'",
        ] {
            assert!(sets(sql), "{}", String::from_utf8_lossy(sql));
        }
        for sql in [
            &b"SET GLOBAL max_connections = 10"[..],
            b"SET @@global.sql_mode = ''",
            b"SET @x = 1",
            b"SET autocommit = 0, sql_mode = ''",
            b"SET timestamp = UNIX_TIMESTAMP()",
            b"SET sql_mode = CONCAT(@@sql_mode, ',ANSI')",
            b"SET time_zone = @@global.time_zone",
            b"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            b"SET autocommit = 0; SELECT 1",
            b"SET sql_mode = 'a\\' , x = 1 #'",
            b"SET sql_mode = \"ANSI\"",
            b"SET PASSWORD = 'x'",
            b"SET ROLE r",
            b"SET STATEMENT max_statement_time = 1 FOR SELECT 1",
            b"SET autocommit",
            b"SET sql_select_limit = CURRENT_TIMESTAMP",
            b"SET @@session.time_zone = utc_time",
            b"SET autocommit = 0 /*!, sql_mode = '' */",
            b"SET autocommit = 0 # x\n, sql_mode = ''",
            b"SET sql_mode = 'a\0b'",
            b"SET",
            b"SELECT 1",
        ] {
            assert!(!sets(sql), "{}", String::from_utf8_lossy(sql));
        }
    }

    #[test]
    fn anything_else_is_not_a_read_of_settings() {
        for sql in [
            &b"select @@timestamp"[..],
            b"select @@pseudo_thread_id",
            b"select @@gtid_current_pos",
            b"select @@warning_count",
            b"select @@version, now()",
            b"select @@version from dual",
            b"select @@version limit 2",
            b"select @@version; select 1",
            b"select @@version /*!, connection_id() */",
            b"select @x",
            b"select @@session.timestamp",
            b"set @@session.wait_timeout = 5",
            b"select 1",
            b"select",
            b"select @@version into @v",
            b"select @@version as",
            b"select @@version limit 1 for update",
            b"select @@version 'x\\' , connection_id(), get_lock('l',0) #'",
            b"select @@version \"x\"",
            b"select @@version `\xe9`",
            b"",
        ] {
            assert!(!reads(sql), "{}", String::from_utf8_lossy(sql));
        }
    }
}
