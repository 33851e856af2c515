//! What MySQL/MariaDB statements do to session state: the MySQL dialect of
//! [`crate::effects`]. Session variables, `SET NAMES` and `USE` are replayable; user
//! variables, temporary tables, `GET_LOCK`, `LOCK TABLES`, SQL `PREPARE` and forms the
//! ledger cannot follow pin the client.

use crate::effects::Effect;
use crate::lex::{Dialect, Token, Tokens};

/// The effect of each statement in a MySQL query string, in order. Stored-program
/// definitions (`CREATE PROCEDURE ... BEGIN ...; ... END`) are one statement.
pub fn effects_mysql(sql: &[u8]) -> Vec<Effect> {
    let toks: Vec<Token<'_>> = Tokens::new_in(sql, Dialect::MySql).collect();
    let program = toks.first().is_some_and(|t| t.is("create"))
        && toks.iter().take(8).any(|t| {
            ["procedure", "function", "trigger", "event"]
                .iter()
                .any(|k| t.is(k))
        });
    if program {
        return vec![Effect::None];
    }
    let mut out = Vec::new();
    let mut offsets = Tokens::new_in(sql, Dialect::MySql);
    let mut start = 0;
    let mut stmt: Vec<Token<'_>> = Vec::new();
    loop {
        let before = offsets.offset();
        match offsets.next() {
            Some(Token::Semicolon) => {
                if !stmt.is_empty() {
                    out.push(of(&sql[start..before], &stmt));
                }
                stmt.clear();
                start = offsets.offset();
            }
            Some(t) => stmt.push(t),
            None => {
                if !stmt.is_empty() {
                    out.push(of(&sql[start..], &stmt));
                }
                return out;
            }
        }
    }
}

fn of(sql: &[u8], toks: &[Token<'_>]) -> Effect {
    let kw = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    let ident = |i: usize| toks.get(i).and_then(|t| t.ident()).unwrap_or_default();
    if kw(0, "begin") || (kw(0, "start") && kw(1, "transaction")) {
        return Effect::Begin;
    }
    if kw(0, "commit") || (kw(0, "rollback") && !toks.iter().any(|t| t.is("to"))) {
        return Effect::TxEnd;
    }
    if kw(0, "xa") || kw(0, "handler") {
        return Effect::Opaque;
    }
    if kw(0, "set") {
        return set_effect(sql, toks);
    }
    if kw(0, "use") && toks.len() == 2 {
        return Effect::Set {
            name: "schema".into(),
            sql: String::from_utf8_lossy(sql).trim().to_owned(),
        };
    }
    if kw(0, "prepare") {
        return Effect::Prepare { name: ident(1) };
    }
    if (kw(0, "deallocate") || kw(0, "drop")) && kw(1, "prepare") {
        return Effect::Deallocate { name: ident(2) };
    }
    if kw(0, "create") && (kw(1, "temporary") || kw(2, "temporary")) {
        return Effect::CreateTemp;
    }
    if kw(0, "lock") && (kw(1, "tables") || kw(1, "table")) {
        return Effect::LockTables;
    }
    if kw(0, "unlock") && (kw(1, "tables") || kw(1, "table")) {
        return Effect::UnlockTables;
    }
    expression_effect(toks)
}

/// Effects hidden in expressions: user variable assignments, lock functions,
/// SQL_CALC_FOUND_ROWS.
fn expression_effect(toks: &[Token<'_>]) -> Effect {
    let mut effect = Effect::None;
    for (i, t) in toks.iter().enumerate() {
        let next = toks.get(i + 1);
        let after = toks.get(i + 2);
        match t {
            // `@v :=` or `INTO @v` (not `@@system`).
            Token::Punct(b'@') => {
                let prev_at = i > 0 && toks[i - 1] == Token::Punct(b'@');
                let assigned = matches!(after, Some(Token::Punct(b':')))
                    || (i > 0 && toks[i - 1].is("into"))
                    || (i > 1 && toks[i - 1] == Token::Punct(b',') && into_list(&toks[..i]));
                if !prev_at && next != Some(&Token::Punct(b'@')) && assigned {
                    return Effect::UserVariable;
                }
            }
            Token::Word(w) if next == Some(&Token::Punct(b'(')) => {
                let name = w.to_ascii_lowercase();
                match name.as_slice() {
                    b"get_lock" => return Effect::AdvisoryLock,
                    b"release_all_locks" => effect = Effect::AdvisoryUnlockAll,
                    _ => {}
                }
            }
            t if t.is("sql_calc_found_rows") => effect = Effect::KeepForNext,
            _ => {}
        }
    }
    effect
}

/// Inside `... INTO @a, @b`: the nearest keyword before is INTO.
fn into_list(toks: &[Token<'_>]) -> bool {
    toks.iter()
        .rev()
        .find(|t| matches!(t, Token::Word(_)))
        .is_some_and(|t| t.is("into"))
}

/// `SET ...`: one session variable (replayable), NAMES / CHARACTER SET (replayable),
/// user variables (pin), GLOBAL (no session effect), TRANSACTION for the next
/// transaction only, ROLE, several assignments at once (pin).
fn set_effect(sql: &[u8], toks: &[Token<'_>]) -> Effect {
    let kw = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    let text = || String::from_utf8_lossy(sql).trim().to_owned();
    if kw(1, "global") || kw(1, "password") || kw(1, "statement") || kw(1, "default") {
        // SET STATEMENT ... FOR runs one statement with the settings; SET DEFAULT ROLE
        // and SET PASSWORD change accounts, not the session.
        return Effect::None;
    }
    if kw(1, "names") || (kw(1, "character") && kw(2, "set")) || kw(1, "charset") {
        return Effect::Set {
            name: "names".into(),
            sql: text(),
        };
    }
    // Several assignments in one SET: more than the ledger keeps per entry.
    let depth_zero_commas = {
        let mut depth = 0i32;
        toks.iter()
            .filter(|t| {
                match t {
                    Token::Punct(b'(') => depth += 1,
                    Token::Punct(b')') => depth -= 1,
                    _ => {}
                }
                depth == 0 && **t == Token::Punct(b',')
            })
            .count()
    };
    let has_user_var = toks.windows(2).enumerate().any(|(i, w)| {
        w[0] == Token::Punct(b'@')
            && w[1] != Token::Punct(b'@')
            && (i == 0 || toks[i - 1] != Token::Punct(b'@'))
    });
    if has_user_var {
        return Effect::UserVariable;
    }
    if depth_zero_commas > 0 || kw(1, "transaction") || kw(1, "role") {
        return Effect::Opaque;
    }
    // SET [SESSION | LOCAL | @@session. | @@local. | @@] name = value
    let mut i = 1;
    if kw(i, "session") || kw(i, "local") {
        i += 1;
    }
    if toks.get(i) == Some(&Token::Punct(b'@')) && toks.get(i + 1) == Some(&Token::Punct(b'@')) {
        i += 2;
        if toks.get(i + 1) == Some(&Token::Punct(b'.')) {
            if toks.get(i).is_some_and(|t| t.is("global")) {
                return Effect::None;
            }
            i += 2;
        }
    }
    let name = toks.get(i).and_then(|t| t.ident()).unwrap_or_default();
    if name.is_empty() {
        return Effect::Opaque;
    }
    Effect::Set { name, sql: text() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Effect {
        let e = effects_mysql(sql.as_bytes());
        assert_eq!(e.len(), 1, "{sql}: {e:?}");
        e.into_iter().next().unwrap_or(Effect::None)
    }

    fn set_name(sql: &str) -> String {
        match one(sql) {
            Effect::Set { name, .. } => name,
            e => panic!("{sql}: {e:?}"),
        }
    }

    #[test]
    fn session_variables_and_names() {
        assert_eq!(set_name("SET time_zone = '+02:00'"), "time_zone");
        assert_eq!(set_name("set session sql_mode='ANSI'"), "sql_mode");
        assert_eq!(set_name("SET @@session.wait_timeout = 100"), "wait_timeout");
        assert_eq!(set_name("SET @@autocommit=0"), "autocommit");
        assert_eq!(set_name("SET LOCAL max_join_size = 10"), "max_join_size");
        assert_eq!(set_name("SET NAMES utf8mb4 COLLATE utf8mb4_bin"), "names");
        assert_eq!(set_name("SET CHARACTER SET latin1"), "names");
        assert_eq!(set_name("/*!40101 SET NAMES utf8 */"), "names");
        assert_eq!(set_name("USE `my db`"), "schema");
        assert_eq!(one("SET GLOBAL max_connections = 10"), Effect::None);
        assert_eq!(one("SET @@global.max_connections = 10"), Effect::None);
        assert_eq!(
            one("SET STATEMENT max_statement_time=1 FOR SELECT 1"),
            Effect::None
        );
        assert_eq!(one("SET a = 1, b = 2"), Effect::Opaque);
        assert_eq!(
            one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Effect::Opaque
        );
        assert_eq!(
            set_name("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            "transaction"
        );
    }

    #[test]
    fn pins() {
        assert_eq!(one("SET @x = 1"), Effect::UserVariable);
        assert_eq!(one("SET a = 1, @x = 2"), Effect::UserVariable);
        assert_eq!(one("SELECT @x := 5"), Effect::UserVariable);
        assert_eq!(one("SELECT 1 INTO @x"), Effect::UserVariable);
        assert_eq!(one("SELECT 1, 2 INTO @x, @y"), Effect::UserVariable);
        assert_eq!(one("SELECT @x, @@version"), Effect::None);
        assert_eq!(one("CREATE TEMPORARY TABLE t (a INT)"), Effect::CreateTemp);
        assert_eq!(one("SELECT GET_LOCK('a', 1)"), Effect::AdvisoryLock);
        assert_eq!(one("SELECT RELEASE_ALL_LOCKS()"), Effect::AdvisoryUnlockAll);
        assert_eq!(one("LOCK TABLES t READ"), Effect::LockTables);
        assert_eq!(one("UNLOCK TABLES"), Effect::UnlockTables);
        assert_eq!(
            one("PREPARE s FROM 'SELECT 1'"),
            Effect::Prepare { name: "s".into() }
        );
        assert_eq!(
            one("DEALLOCATE PREPARE s"),
            Effect::Deallocate { name: "s".into() }
        );
        assert_eq!(
            one("SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1"),
            Effect::KeepForNext
        );
        assert_eq!(one("SELECT 'SET @x = 1; GET_LOCK('"), Effect::None);
        assert_eq!(one("START TRANSACTION"), Effect::Begin);
        assert_eq!(one("ROLLBACK TO SAVEPOINT a"), Effect::None);
    }

    #[test]
    fn statements_and_programs() {
        assert_eq!(
            effects_mysql(b"SET a = 1; SELECT 2; # x; SET @y = 1").len(),
            2
        );
        assert_eq!(
            effects_mysql(b"CREATE PROCEDURE p() BEGIN SET @x = 1; SELECT 1; END"),
            vec![Effect::None]
        );
    }
}
