//! What statements do to session state, read from their first few tokens.
//!
//! The ledger in the `sluice` crate keeps replayable state (SET) and pinning state
//! (temp tables, SQL PREPARE, advisory locks, LISTEN, WITH HOLD cursors) per client.
//! This module reports, for each statement of a query string, the one effect that
//! matters; everything else is [`Effect::None`].

use crate::lex::{Token, Tokens};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    None,
    /// BEGIN / START TRANSACTION.
    Begin,
    /// COMMIT / END / ROLLBACK / ABORT (not ROLLBACK TO SAVEPOINT).
    TxEnd,
    /// A session-level SET: the parameter (lowercased) and the statement text to replay.
    Set {
        name: String,
        sql: String,
    },
    /// SET LOCAL / SET TRANSACTION / SET CONSTRAINTS: lasts until the transaction ends.
    SetLocal,
    Reset {
        name: String,
    },
    ResetAll,
    /// SQL-level PREPARE of a named statement.
    Prepare {
        name: String,
    },
    Deallocate {
        name: String,
    },
    DeallocateAll,
    /// DISCARD ALL (clears every kind of session state).
    DiscardAll,
    /// DISCARD TEMP / TEMPORARY.
    DiscardTemp,
    Listen,
    UnlistenAll,
    /// CREATE TEMP TABLE / VIEW / SEQUENCE.
    CreateTemp,
    /// DECLARE ... WITH HOLD cursor.
    DeclareHold {
        name: String,
    },
    CloseCursor {
        name: String,
    },
    CloseAllCursors,
    /// A session-level advisory lock was taken (pg_advisory_lock and friends).
    AdvisoryLock,
    AdvisoryUnlockAll,
    /// State the ledger cannot follow: set_config(), SET SESSION CHARACTERISTICS,
    /// SET SEED, DO blocks that touch session state. Pins the client.
    Opaque,
    /// MySQL: a user variable was assigned (`SET @v`, `@v :=`, `INTO @v`).
    UserVariable,
    /// MySQL: LOCK TABLES.
    LockTables,
    /// MySQL: UNLOCK TABLES.
    UnlockTables,
    /// MySQL: the next statement may read what this one leaves on the connection
    /// (SQL_CALC_FOUND_ROWS for FOUND_ROWS()): keep the connection for one more statement.
    KeepForNext,
}

impl Effect {
    fn of(sql: &[u8], toks: &[Token<'_>]) -> Effect {
        let kw = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
        let ident = |i: usize| toks.get(i).and_then(|t| t.ident()).unwrap_or_default();
        if toks.is_empty() {
            return Effect::None;
        }
        if kw(0, "begin") || (kw(0, "start") && kw(1, "transaction")) {
            return Effect::Begin;
        }
        if kw(0, "commit") || kw(0, "end") || kw(0, "abort") {
            return Effect::TxEnd;
        }
        if kw(0, "rollback") {
            let to = toks.iter().skip(1).take(2).any(|t| t.is("to"));
            let prepared = kw(1, "prepared");
            return if to || prepared {
                Effect::None
            } else {
                Effect::TxEnd
            };
        }
        if kw(0, "set") {
            return set_effect(sql, toks);
        }
        if kw(0, "reset") {
            return if kw(1, "all") {
                Effect::ResetAll
            } else {
                Effect::Reset {
                    name: param_name(&toks[1..]),
                }
            };
        }
        if kw(0, "prepare") && !kw(1, "transaction") {
            return Effect::Prepare { name: ident(1) };
        }
        if kw(0, "deallocate") {
            let i = if kw(1, "prepare") { 2 } else { 1 };
            return if kw(i, "all") {
                Effect::DeallocateAll
            } else {
                Effect::Deallocate { name: ident(i) }
            };
        }
        if kw(0, "discard") {
            return match () {
                _ if kw(1, "all") => Effect::DiscardAll,
                _ if kw(1, "temp") || kw(1, "temporary") => Effect::DiscardTemp,
                _ => Effect::None,
            };
        }
        if kw(0, "listen") {
            return Effect::Listen;
        }
        if kw(0, "do") {
            return do_effect(toks);
        }
        if kw(0, "unlisten") {
            return if matches!(toks.get(1), Some(Token::Punct(b'*'))) {
                Effect::UnlistenAll
            } else {
                Effect::None
            };
        }
        if kw(0, "create") {
            let mut i = 1;
            if kw(i, "or") && kw(i + 1, "replace") {
                i += 2;
            }
            if kw(i, "global") || kw(i, "local") {
                i += 1;
            }
            if kw(i, "temp") || kw(i, "temporary") {
                return Effect::CreateTemp;
            }
        }
        if kw(0, "declare") {
            let hold = toks.windows(2).any(|w| w[0].is("with") && w[1].is("hold"));
            return if hold {
                Effect::DeclareHold { name: ident(1) }
            } else {
                Effect::None
            };
        }
        if kw(0, "close") {
            return if kw(1, "all") {
                Effect::CloseAllCursors
            } else {
                Effect::CloseCursor { name: ident(1) }
            };
        }
        function_effect(toks)
    }
}

/// The parameter named by the tokens after SET [SESSION] / RESET.
fn param_name(toks: &[Token<'_>]) -> String {
    let kw = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    if kw(0, "time") && kw(1, "zone") {
        return "timezone".into();
    }
    if kw(0, "session") && kw(1, "authorization") {
        return "session_authorization".into();
    }
    if kw(0, "names") {
        return "client_encoding".into();
    }
    // Dotted names (custom.param) are one parameter.
    let mut name = String::new();
    for (i, t) in toks.iter().enumerate() {
        match (i % 2, t) {
            (0, t) => match t.ident() {
                Some(s) => name.push_str(&s),
                None => break,
            },
            (_, Token::Punct(b'.')) => name.push('.'),
            _ => break,
        }
    }
    name
}

fn set_effect(sql: &[u8], toks: &[Token<'_>]) -> Effect {
    let kw = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    if kw(1, "local") || kw(1, "transaction") || kw(1, "constraints") {
        return Effect::SetLocal;
    }
    let rest = if kw(1, "session") && !kw(2, "authorization") {
        &toks[2..]
    } else {
        &toks[1..]
    };
    let first = |k: &str| rest.first().is_some_and(|t| t.is(k));
    // Forms with no single parameter to RESET: the ledger cannot replay them.
    if first("characteristics") || first("seed") {
        return Effect::Opaque;
    }
    let name = if first("schema") {
        "search_path".to_owned()
    } else if first("xml") {
        "xmloption".to_owned()
    } else {
        param_name(rest)
    };
    if name.is_empty() {
        return Effect::Opaque;
    }
    Effect::Set {
        name,
        sql: String::from_utf8_lossy(sql).trim().to_owned(),
    }
}

/// Code the scanner cannot see into (DO blocks): pin if it may touch session state.
fn do_effect(toks: &[Token<'_>]) -> Effect {
    const MARKERS: [&str; 7] = [
        "set_config",
        "advisory_lock",
        "set ",
        "temp",
        "prepare",
        "listen",
        "declare",
    ];
    for t in toks {
        if let Token::Str(body) = t {
            let body = String::from_utf8_lossy(body).to_ascii_lowercase();
            if MARKERS.iter().any(|m| body.contains(m)) {
                return Effect::Opaque;
            }
        }
    }
    Effect::None
}

fn function_effect(toks: &[Token<'_>]) -> Effect {
    // SELECT ... INTO TEMP t, and anything naming the pg_temp schema, create temp tables.
    let temp_into = toks.windows(2).any(|w| {
        (w[0].is("into") && (w[1].is("temp") || w[1].is("temporary")))
            || (w[0].is("pg_temp") && w[1] == Token::Punct(b'.'))
    });
    if temp_into {
        return Effect::CreateTemp;
    }
    let mut effect = Effect::None;
    for (i, w) in toks.windows(2).enumerate() {
        if !matches!(w[1], Token::Punct(b'(')) {
            continue;
        }
        let name = match w[0] {
            Token::Word(name) => name.to_ascii_lowercase(),
            // A U&"..." name may spell any function in escapes: not followed.
            Token::Quoted(_)
                if i >= 2 && toks[i - 1] == Token::Punct(b'&') && toks[i - 2].is("u") =>
            {
                return Effect::Opaque;
            }
            // A quoted name is the function of exactly that (lower-case) name.
            Token::Quoted(name) => name.to_vec(),
            _ => continue,
        };
        match name.as_slice() {
            b"pg_advisory_lock"
            | b"pg_advisory_lock_shared"
            | b"pg_try_advisory_lock"
            | b"pg_try_advisory_lock_shared" => return Effect::AdvisoryLock,
            b"pg_advisory_unlock_all" => effect = Effect::AdvisoryUnlockAll,
            b"set_config" => effect = Effect::Opaque,
            _ => {}
        }
    }
    effect
}

/// The effect of each statement in a query string, in order (PostgreSQL).
pub fn effects(sql: &[u8]) -> Vec<Effect> {
    let mut out = Vec::new();
    let mut toks = Tokens::new(sql);
    let mut buf: Vec<Token<'_>> = Vec::new();
    let mut start = 0;
    // Inside a SQL-standard function body (BEGIN ATOMIC ... END), semicolons do not
    // end the statement.
    let mut atomic = 0usize;
    loop {
        let before = toks.offset();
        match toks.next() {
            Some(t @ Token::Word(_)) if buf.first().is_some_and(|f| f.is("create")) => {
                let opens_body = t.is("atomic") && buf.last().is_some_and(|l| l.is("begin"));
                if opens_body || (atomic > 0 && t.is("case")) {
                    atomic += 1;
                } else if atomic > 0 && t.is("end") {
                    atomic -= 1;
                }
                buf.push(t);
            }
            Some(t @ Token::Semicolon) if atomic > 0 => buf.push(t),
            Some(Token::Semicolon) => {
                if !buf.is_empty() {
                    out.push(Effect::of(&sql[start..before], &buf));
                }
                buf.clear();
                start = toks.offset();
            }
            Some(t) => buf.push(t),
            None => {
                if !buf.is_empty() {
                    out.push(Effect::of(&sql[start..], &buf));
                }
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Effect {
        let mut e = effects(sql.as_bytes());
        assert_eq!(e.len(), 1, "{sql}");
        e.remove(0)
    }

    #[test]
    fn transactions() {
        assert_eq!(one("BEGIN"), Effect::Begin);
        assert_eq!(
            one(" start transaction isolation level serializable"),
            Effect::Begin
        );
        assert_eq!(one("commit"), Effect::TxEnd);
        assert_eq!(one("ROLLBACK"), Effect::TxEnd);
        assert_eq!(one("rollback to savepoint a"), Effect::None);
        assert_eq!(one("rollback prepared 'x'"), Effect::None);
    }

    #[test]
    fn sets() {
        assert_eq!(
            one("SET search_path TO a, b"),
            Effect::Set {
                name: "search_path".into(),
                sql: "SET search_path TO a, b".into()
            }
        );
        assert_eq!(
            one("set session \"Work_Mem\" = '1MB'"),
            Effect::Set {
                name: "Work_Mem".into(),
                sql: "set session \"Work_Mem\" = '1MB'".into()
            }
        );
        assert!(
            matches!(one("SET TIME ZONE 'UTC'"), Effect::Set { name, .. } if name == "timezone")
        );
        assert!(
            matches!(one("set my.custom = 1"), Effect::Set { name, .. } if name == "my.custom")
        );
        assert_eq!(one("SET LOCAL work_mem = 1"), Effect::SetLocal);
        assert_eq!(one("set transaction read only"), Effect::SetLocal);
        assert_eq!(
            one("RESET work_mem"),
            Effect::Reset {
                name: "work_mem".into()
            }
        );
        assert_eq!(one("reset all"), Effect::ResetAll);
    }

    #[test]
    fn pinning_statements() {
        assert_eq!(
            one("PREPARE q(int) AS select $1"),
            Effect::Prepare { name: "q".into() }
        );
        assert_eq!(
            one("deallocate prepare q"),
            Effect::Deallocate { name: "q".into() }
        );
        assert_eq!(one("DEALLOCATE ALL"), Effect::DeallocateAll);
        assert_eq!(one("create temp table t(a int)"), Effect::CreateTemp);
        assert_eq!(
            one("CREATE GLOBAL TEMPORARY TABLE t(a int)"),
            Effect::CreateTemp
        );
        assert_eq!(one("create table t(a int)"), Effect::None);
        assert_eq!(one("listen foo"), Effect::Listen);
        assert_eq!(one("unlisten *"), Effect::UnlistenAll);
        assert_eq!(
            one("declare c cursor with hold for select 1"),
            Effect::DeclareHold { name: "c".into() }
        );
        assert_eq!(one("declare c cursor for select 1"), Effect::None);
        assert_eq!(one("select pg_advisory_lock(1)"), Effect::AdvisoryLock);
        assert_eq!(one("select pg_advisory_xact_lock(1)"), Effect::None);
        // Quoted names: exactly the function's name, or not it at all.
        assert_eq!(one(r#"select "pg_advisory_lock"(1)"#), Effect::AdvisoryLock);
        assert_eq!(
            one(r#"select public."set_config"('a', 'b', false)"#),
            Effect::Opaque
        );
        assert_eq!(one(r#"select "PG_ADVISORY_LOCK"(1)"#), Effect::None);
        // A name in Unicode escapes is not followed: the session is pinned.
        assert_eq!(one(r#"select U&"pg_advisory_\006Cock"(1)"#), Effect::Opaque);
        assert_eq!(one(r#"select u&"x"(1)"#), Effect::Opaque);
        assert_eq!(
            one("SELECT pg_advisory_unlock_all()"),
            Effect::AdvisoryUnlockAll
        );
        assert_eq!(one("select set_config('a.b', '1', false)"), Effect::Opaque);
        assert_eq!(one("discard all"), Effect::DiscardAll);
    }

    #[test]
    fn hidden_state_changes() {
        assert_eq!(one("select 1 as a into temp t"), Effect::CreateTemp);
        assert_eq!(one("create table pg_temp.t(a int)"), Effect::CreateTemp);
        assert_eq!(
            one("do $$ begin perform set_config('a.b', '1', false); end $$"),
            Effect::Opaque
        );
        assert_eq!(one("do $$ begin raise notice 'x'; end $$"), Effect::None);
        assert_eq!(
            one("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"),
            Effect::Opaque
        );
        assert_eq!(one("set seed to 0.5"), Effect::Opaque);
        assert!(
            matches!(one("set schema 'app'"), Effect::Set { name, .. } if name == "search_path")
        );
        assert!(
            matches!(one("set xml option document"), Effect::Set { name, .. } if name == "xmloption")
        );
        let e = effects(
            b"create function f() returns int language sql begin atomic select 1; select case when true then 2 end; end; set a = 1",
        );
        assert_eq!(e.len(), 2);
        assert!(matches!(&e[1], Effect::Set { name, .. } if name == "a"));
    }

    #[test]
    fn multi_statements() {
        let e = effects(b"begin; set x = ';'; select 1; commit;");
        assert_eq!(e.len(), 4);
        assert_eq!(e[0], Effect::Begin);
        assert!(matches!(&e[1], Effect::Set { sql, .. } if sql == "set x = ';'"));
        assert_eq!(e[3], Effect::TxEnd);
        assert!(effects(b" ; -- nothing\n").is_empty());
    }
}
