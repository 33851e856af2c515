//! The digest of a plain statement in one pass over its bytes: what [`crate::shape`]
//! runs on every statement. It writes the same digest text as the token scanner of
//! `facts.rs` (words as written, values folded to `?`, spaces normalised) without
//! making tokens, and gives up (None) at anything that needs the scanner's rules:
//! comments, `;`, `$`, PostgreSQL's `"names"` and `E'...'` strings, an IN list (folded
//! to one `?`), a statement that opens with WITH. The caller then runs the scanner;
//! `quick_tests.rs` checks both agree on every text this accepts.

use crate::facts::Kind;
use crate::lex::{Dialect, SPACE, Token, WORD, class, quoted_end, run};

/// What the previous token was, for the spacing rules (the scanner's `last`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    Nothing,
    /// A word, a quoted name or a value.
    Word,
    Punct(u8),
}

/// Writes `sql`'s digest text to `out` (empty) and returns its kind and whether it
/// holds several statements, or None (`out` then holds part of it) where the scanner
/// must run.
pub(crate) fn digest(sql: &[u8], dialect: Dialect, out: &mut Vec<u8>) -> Option<(Kind, bool)> {
    // A `$` (PostgreSQL's parameters, dollar quotes) is left to the scanner: looked for
    // first, since a prepared statement's `$1` comes near its end, after all the rest
    // would have been folded here for nothing.
    if memchr::memchr(b'$', sql).is_some() {
        return None;
    }
    let my = dialect == Dialect::MySql;
    let mut i = 0;
    let mut last = Last::Nothing;
    let mut last_end = usize::MAX;
    let mut kind = None;
    loop {
        i += run(&sql[i..], SPACE);
        let Some(&c) = sql.get(i) else {
            break;
        };
        let start = i;
        // The token: where it ends, and whether it is a value or a punctuation mark.
        let mut value = false;
        let mut punct = None;
        if class(c) & WORD != 0 && !c.is_ascii_digit() {
            if c | 0x20 == b'e' && sql.get(i + 1) == Some(&b'\'') {
                return None;
            }
            i += 1 + run(&sql[i + 1..], WORD);
            let word = &sql[start..i];
            if word.eq_ignore_ascii_case(b"in") {
                return None;
            }
            if kind.is_none() {
                if word.eq_ignore_ascii_case(b"with") {
                    return None;
                }
                kind = Some(Kind::of_first_word(&Token::Word(word)).unwrap_or(Kind::Other));
            }
        } else if c.is_ascii_digit() {
            kind.get_or_insert(Kind::Other);
            i += 1;
            while i < sql.len() && (sql[i].is_ascii_alphanumeric() || sql[i] == b'.') {
                i += 1;
            }
            value = true;
        } else {
            match (c, sql.get(i + 1)) {
                (b';', _) | (b'-', Some(b'-')) | (b'/', Some(b'*')) => return None,
                (b'#', _) if my => return None,
                (b'"', _) if !my => return None,
                (b'\'', _) | (b'"', _) => {
                    i = quoted_end(sql, i, c, my)?;
                    value = true;
                }
                (b'`', _) if my => {
                    i = quoted_end(sql, i, c, false)?;
                }
                (b'?', _) => {
                    i += 1;
                    value = true;
                }
                _ => {
                    i += 1;
                    punct = Some(c);
                }
            }
            kind.get_or_insert(Kind::Other);
        }
        let adjacent = start == last_end;
        last_end = i;
        let space = match (last, punct) {
            (Last::Nothing, _) => false,
            (_, Some(b',' | b')' | b'.')) => false,
            (Last::Punct(b'(' | b'.' | b'@'), _) => false,
            (Last::Punct(p), Some(_)) if adjacent && !matches!(p, b',' | b')') => false,
            (Last::Word, Some(b'(')) if adjacent => false,
            _ => true,
        };
        if space {
            out.push(b' ');
        }
        if value {
            out.push(b'?');
        } else {
            out.extend_from_slice(&sql[start..i]);
        }
        last = match punct {
            Some(p) => Last::Punct(p),
            None => Last::Word,
        };
    }
    Some((kind.unwrap_or(Kind::Other), false))
}

#[cfg(test)]
#[path = "quick_tests.rs"]
mod tests;
