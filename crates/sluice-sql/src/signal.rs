//! PostgreSQL's `pg_cancel_backend(pid)` and `pg_terminate_backend(pid [, timeout])`
//! called with a literal process id. A pooled client knows other clients by the
//! process ids Sluice gave them (their BackendKeyData, and what `pg_backend_pid()`
//! answers them), which no server knows: [`calls`] finds such calls so that the pid can
//! be mapped to the server connection its client uses (or the call answered for it).

use crate::lex::{Dialect, Token, Tokens};
use std::ops::Range;

/// One call with a literal pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// pg_terminate_backend (else pg_cancel_backend).
    pub terminate: bool,
    pub pid: i32,
    /// Where the pid is written.
    pub pid_at: Range<usize>,
    /// Where the whole call is written.
    pub call_at: Range<usize>,
    /// The call is a whole item of a select list without an alias: a value put in its
    /// place needs one to keep the column's name.
    pub bare_item: bool,
}

const FUNCTIONS: [(&str, bool); 2] = [("pg_terminate_backend", true), ("pg_cancel_backend", false)];

/// Whether `sql` mentions either function at all (without tokenizing).
pub fn mentioned(sql: &[u8]) -> bool {
    FUNCTIONS
        .iter()
        .any(|(f, _)| crate::session_id::contains_ignore_case(sql, f.as_bytes()))
}

type Spanned<'a> = (Token<'a>, Range<usize>);

/// The tokens of `sql` and, for each call of either function, (terminate, the index
/// of its name, the token after its opening parenthesis); nothing when neither is
/// mentioned (the common case, found without tokenizing).
fn call_sites(sql: &[u8]) -> (Vec<Spanned<'_>>, Vec<(bool, usize)>) {
    if !mentioned(sql) {
        return (Vec::new(), Vec::new());
    }
    let toks: Vec<_> = {
        let mut t = Tokens::new_in(sql, Dialect::Postgres);
        std::iter::from_fn(|| t.next_spanned()).collect()
    };
    let sites = toks
        .iter()
        .enumerate()
        .filter_map(|(i, (t, _))| {
            let &(_, terminate) = FUNCTIONS.iter().find(|(f, _)| t.is(f))?;
            matches!(toks.get(i + 1), Some((Token::Punct(b'('), _))).then_some((terminate, i))
        })
        .collect();
    (toks, sites)
}

/// The calls with a literal pid in `sql`.
pub fn calls(sql: &[u8]) -> Vec<Call> {
    let (toks, sites) = call_sites(sql);
    let mut out = Vec::new();
    for (terminate, i) in sites {
        let span = &toks[i].1;
        let Some((Token::Number(n), pid_at)) = toks.get(i + 2) else {
            continue;
        };
        let Some(pid) = std::str::from_utf8(n).ok().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // The closing parenthesis (after a timeout argument, for terminate).
        let Some(close) = toks[i + 3..]
            .iter()
            .position(|(t, _)| *t == Token::Punct(b')') || *t == Token::Semicolon)
            .map(|p| i + 3 + p)
            .filter(|&c| toks[c].0 == Token::Punct(b')'))
        else {
            continue;
        };
        let before = i.checked_sub(1).map(|p| &toks[p].0);
        let after = toks.get(close + 1).map(|t| &t.0);
        let bare_item = before.is_some_and(|b| b.is("select") || *b == Token::Punct(b','))
            && after
                .is_none_or(|a| matches!(a, Token::Semicolon | Token::Punct(b',')) || a.is("from"));
        out.push(Call {
            terminate,
            pid,
            pid_at: pid_at.clone(),
            call_at: span.start..toks[close].1.end,
            bare_item,
        });
    }
    out
}

/// The calls whose pid is a parameter (`pg_terminate_backend($1)`): (terminate, the
/// parameter's number, from 1), for the Bind that gives the value.
pub fn param_calls(sql: &[u8]) -> Vec<(bool, usize)> {
    let (toks, sites) = call_sites(sql);
    let mut out = Vec::new();
    for (terminate, i) in sites {
        let Some((Token::Punct(b'$'), at)) = toks.get(i + 2) else {
            continue;
        };
        let n = std::str::from_utf8(&sql[at.start + 1..at.end])
            .ok()
            .and_then(|d| d.parse().ok())
            .filter(|&n: &usize| n > 0);
        if let Some(n) = n {
            out.push((terminate, n));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_pids_are_found() {
        assert_eq!(param_calls(b"select pg_terminate_backend($1)"), [(true, 1)]);
        assert_eq!(
            param_calls(b"SELECT $1, pg_cancel_backend( $2 ), pg_terminate_backend($3, 100)"),
            [(false, 2), (true, 3)]
        );
        assert_eq!(param_calls(b"select pg_terminate_backend(7)"), []);
        assert_eq!(param_calls(b"select 1"), []);
    }

    #[test]
    fn literal_pids_are_found() {
        let sql = b"select pg_terminate_backend(1234)";
        let c = calls(sql);
        assert_eq!(c.len(), 1);
        assert!(c[0].terminate && c[0].bare_item);
        assert_eq!(c[0].pid, 1234);
        assert_eq!(&sql[c[0].pid_at.clone()], b"1234");
        assert_eq!(&sql[c[0].call_at.clone()], b"pg_terminate_backend(1234)");
        let sql = b"SELECT 1, PG_CANCEL_BACKEND( 77 ) AS x";
        let c = calls(sql);
        assert!(!c[0].terminate && !c[0].bare_item);
        assert_eq!(c[0].pid, 77);
        let c = calls(b"select pg_terminate_backend(9, 500) from t");
        assert_eq!(c[0].pid, 9);
        assert!(c[0].bare_item);
    }

    #[test]
    fn anything_else_is_left_alone() {
        for sql in [
            "select 1",
            "select pg_terminate_backend(pg_backend_pid())",
            "select pg_cancel_backend(pid) from pg_stat_activity",
            "select pg_terminate_backend($1)",
            "select 'pg_terminate_backend(1)'",
            "select my_pg_cancel_backend(1)",
        ] {
            assert_eq!(calls(sql.as_bytes()), [], "{sql}");
        }
    }
}
