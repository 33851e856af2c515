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
