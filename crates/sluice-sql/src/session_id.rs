//! The session's id as the client knows it. A pooled client's statements run on server
//! connections that are not its own, so `CONNECTION_ID()` (MySQL) or `pg_backend_pid()`
//! (PostgreSQL) would tell the id of whichever connection ran them, not the id the
//! client got at login (the one its KILL or cancel request names, and, for PostgreSQL,
//! the sender pid its notifications carry). [`rewrite`] puts the client's id into the
//! text where the value goes back to the client: a call that is a whole item of the
//! outermost select list, which keeps its column name through an alias (`... AS
//! \`CONNECTION_ID()\``, the call as written, as MySQL names the column; `AS
//! pg_backend_pid`) unless it has one. Inside an expression (`WHERE pid =
//! pg_backend_pid()`, a catalog lookup of the connection running the statement) the
//! call is left alone.

use crate::lex::{Dialect, Token, Tokens};

/// How a dialect names the function and its column, and writes the value.
struct Spelling {
    function: &'static str,
    /// The column name of a select item that calls it; None: the call as written.
    column: Option<&'static str>,
    /// Select-list modifiers after which an item starts.
    modifiers: &'static [&'static str],
    /// Words beyond [`ENDERS`] that end a select list.
    more_enders: &'static [&'static str],
}

/// Words that end a select list in both dialects.
const ENDERS: [&str; 12] = [
    "from",
    "into",
    "union",
    "where",
    "group",
    "having",
    "order",
    "limit",
    "for",
    "window",
    "except",
    "intersect",
];

impl Spelling {
    fn ends_list(&self, t: &Token<'_>) -> bool {
        ENDERS.iter().chain(self.more_enders).any(|w| t.is(w))
    }
}

const MYSQL: Spelling = Spelling {
    function: "connection_id",
    column: None,
    modifiers: &[
        "select",
        "all",
        "distinct",
        "distinctrow",
        "high_priority",
        "straight_join",
        "sql_small_result",
        "sql_big_result",
        "sql_buffer_result",
        "sql_cache",
        "sql_no_cache",
        "sql_calc_found_rows",
    ],
    more_enders: &["lock"],
};

const POSTGRES: Spelling = Spelling {
    function: "pg_backend_pid",
    column: Some("pg_backend_pid"),
    modifiers: &["select", "all", "distinct"],
    more_enders: &["offset", "fetch"],
};

/// The text with every call of the dialect's session-id function replaced by `id`, or
/// None when it calls none (the common case, found without tokenizing).
pub fn rewrite(sql: &[u8], dialect: Dialect, id: u32) -> Option<Vec<u8>> {
    let sp = match dialect {
        Dialect::MySql => &MYSQL,
        Dialect::Postgres => &POSTGRES,
    };
    // A call has parentheses: most statements that have none are passed by one
    // memchr (a point select's text has none).
    if memchr::memchr(b'(', sql).is_none() || !contains_ignore_case(sql, sp.function.as_bytes()) {
        return None;
    }
    let toks: Vec<_> = {
        let mut t = Tokens::new_in(sql, dialect);
        std::iter::from_fn(|| t.next_spanned()).collect()
    };
    let value = match dialect {
        // The function's type: an unsigned BIGINT.
        Dialect::MySql => format!("CAST({id} AS UNSIGNED)"),
        Dialect::Postgres => id.to_string(),
    };
    let mut out = Vec::with_capacity(sql.len() + 32);
    let mut copied = 0;
    let mut depth = 0usize;
    let mut select_list = false;
    // The statement is a query: a call in a stored object's definition (CREATE VIEW,
    // PROCEDURE, EVENT...) must stay a call.
    let mut query = false;
    let mut i = 0;
    while i < toks.len() {
        let (t, ref span) = toks[i];
        if i == 0 || toks[i - 1].0 == Token::Semicolon {
            query = t.is("select") || t.is("with") || t == Token::Punct(b'(');
        }
        let call = query
            && t.is(sp.function)
            && matches!(toks.get(i + 1), Some((Token::Punct(b'('), _)))
            && matches!(toks.get(i + 2), Some((Token::Punct(b')'), _)));
        if call {
            let end = toks[i + 2].1.end;
            let item_start = i
                .checked_sub(1)
                .map(|p| toks[p].0)
                .is_some_and(|p| p == Token::Punct(b',') || sp.modifiers.iter().any(|m| p.is(m)));
            let item_end = toks.get(i + 3).is_none_or(|(n, _)| {
                matches!(n, Token::Semicolon | Token::Punct(b',')) || sp.ends_list(n)
            });
            let aliased = toks.get(i + 3).is_some_and(|(n, _)| n.is("as"));
            if !(depth == 0 && select_list && item_start && (item_end || aliased)) {
                // Inside an expression: the connection running the statement.
                i += 3;
                continue;
            }
            out.extend_from_slice(&sql[copied..span.start]);
            out.extend_from_slice(value.as_bytes());
            if item_end {
                out.extend_from_slice(b" AS ");
                match sp.column {
                    Some(c) => out.extend_from_slice(c.as_bytes()),
                    None => {
                        out.push(b'`');
                        for &b in &sql[span.start..end] {
                            if b == b'`' {
                                out.push(b'`');
                            }
                            out.push(b);
                        }
                        out.push(b'`');
                    }
                }
            }
            copied = end;
            i += 3;
            continue;
        }
        match t {
            Token::Punct(b'(') => depth += 1,
            Token::Punct(b')') => depth = depth.saturating_sub(1),
            Token::Semicolon => {
                depth = 0;
                select_list = false;
            }
            _ if depth == 0 && t.is("select") => select_list = true,
            _ if depth == 0 && sp.ends_list(&t) => select_list = false,
            _ => {}
        }
        i += 1;
    }
    if copied == 0 {
        return None;
    }
    out.extend_from_slice(&sql[copied..]);
    Some(out)
}

/// Whether `hay` contains `needle` (lowercase ASCII with an underscore) in any case.
/// It runs on every pooled statement: it looks only around underscores, which plain
/// statements have few of.
pub(crate) fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    let Some(u) = memchr::memchr(b'_', needle) else {
        return hay
            .windows(needle.len().max(1))
            .any(|w| w.eq_ignore_ascii_case(needle));
    };
    memchr::memchr_iter(b'_', hay).any(|at| {
        at.checked_sub(u)
            .and_then(|start| hay.get(start..start + needle.len()))
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn my(sql: &str) -> Option<String> {
        rewrite(sql.as_bytes(), Dialect::MySql, 42).map(|v| String::from_utf8(v).unwrap())
    }

    fn pg(sql: &str) -> Option<String> {
        rewrite(sql.as_bytes(), Dialect::Postgres, 7).map(|v| String::from_utf8(v).unwrap())
    }

    const ID: &str = "CAST(42 AS UNSIGNED)";

    #[test]
    fn whole_select_items_keep_their_column_name() {
        let named = format!("{ID} AS `CONNECTION_ID()`");
        assert_eq!(
            my("SELECT CONNECTION_ID()"),
            Some(format!("SELECT {named}"))
        );
        assert_eq!(
            my("select a, connection_id(), b from t;"),
            Some(format!("select a, {ID} AS `connection_id()`, b from t;"))
        );
        assert_eq!(
            my("SELECT DISTINCT CONNECTION_ID( ) FROM t UNION SELECT 1"),
            Some(format!(
                "SELECT DISTINCT {ID} AS `CONNECTION_ID( )` FROM t UNION SELECT 1"
            ))
        );
        assert_eq!(
            pg("select pg_backend_pid()"),
            Some("select 7 AS pg_backend_pid".into())
        );
        assert_eq!(
            pg("SELECT 1; SELECT pg_backend_pid(), 2"),
            Some("SELECT 1; SELECT 7 AS pg_backend_pid, 2".into())
        );
    }

    #[test]
    fn an_aliased_item_keeps_its_alias() {
        assert_eq!(
            my("SELECT CONNECTION_ID() AS me, 1"),
            Some(format!("SELECT {ID} AS me, 1"))
        );
        assert_eq!(
            pg("select pg_backend_pid() as me"),
            Some("select 7 as me".into())
        );
    }

    #[test]
    fn inside_expressions_the_running_connection() {
        for sql in [
            "SELECT CONNECTION_ID() + 1",
            "SELECT CONNECTION_ID() me",
            "SELECT f(1, CONNECTION_ID(), 2)",
            "SELECT (SELECT CONNECTION_ID())",
            "SELECT * FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
            "DELETE FROM t WHERE a = CONNECTION_ID()",
            "INSERT INTO t VALUES (1, connection_id())",
            "SELECT a FROM t ORDER BY a, CONNECTION_ID()",
            "KILL CONNECTION_ID()",
        ] {
            assert_eq!(my(sql), None, "{sql}");
        }
        assert_eq!(
            pg("select * from pg_stat_activity where pid = pg_backend_pid()"),
            None
        );
        // Both in one statement: only the item.
        assert_eq!(
            pg("select pg_backend_pid() from pg_stat_activity where pid = pg_backend_pid()"),
            Some(
                "select 7 AS pg_backend_pid from pg_stat_activity where pid = pg_backend_pid()"
                    .into()
            )
        );
    }

    #[test]
    fn strings_comments_and_other_names_stay() {
        for sql in [
            "SELECT 1",
            "SELECT 'CONNECTION_ID()'",
            "SELECT `CONNECTION_ID()` FROM t",
            "SELECT 1 /* CONNECTION_ID() */",
            "SELECT 1 -- CONNECTION_ID()",
            "SELECT my_connection_id()",
            "SELECT connection_id FROM t",
            "SELECT connection_idx()",
        ] {
            assert_eq!(my(sql), None, "{sql}");
        }
        assert_eq!(pg("select 'pg_backend_pid()'"), None);
        assert_eq!(pg("select $$ pg_backend_pid() $$"), None);
        // The other dialect's function is not ours to replace.
        assert_eq!(pg("SELECT CONNECTION_ID()"), None);
    }

    #[test]
    fn the_prefilter_finds_the_name_anywhere() {
        let n = b"connection_id";
        assert!(contains_ignore_case(b"CONNECTION_ID()", n));
        assert!(contains_ignore_case(b"select a_b, x.Connection_Id", n));
        assert!(!contains_ignore_case(b"select connection, _id", n));
        assert!(!contains_ignore_case(b"_id", n));
        assert!(contains_ignore_case(
            b"select pg_backend_pid()",
            b"pg_backend_pid"
        ));
    }

    #[test]
    fn stored_definitions_keep_the_call() {
        for sql in [
            "CREATE VIEW v AS SELECT CONNECTION_ID()",
            "CREATE PROCEDURE p() SELECT CONNECTION_ID()",
            "INSERT INTO t SELECT CONNECTION_ID()",
        ] {
            assert_eq!(my(sql), None, "{sql}");
        }
        assert_eq!(
            my("CREATE VIEW v AS SELECT 1; SELECT CONNECTION_ID()"),
            Some(format!(
                "CREATE VIEW v AS SELECT 1; SELECT {ID} AS `CONNECTION_ID()`"
            ))
        );
        assert_eq!(
            pg("with x as (select 1) select pg_backend_pid() from x"),
            Some("with x as (select 1) select 7 AS pg_backend_pid from x".into())
        );
    }
}
