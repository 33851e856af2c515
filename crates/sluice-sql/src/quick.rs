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

/// A 128-bit key for `sql` with its numbers and quoted strings left out, cheaper than
/// its [`shape`](crate::shape) (no tokens, no digest text): statements that differ only in their
/// values have the same one. Where both have a `plain` shape it is the same shape, so
/// a cache of plain shapes by this key needs no digest on a hit. None for texts the
/// one-pass digest might not take. (Hashed apart from shapes' keys: the two may share
/// a map.)
pub fn values_key(sql: &[u8], dialect: Dialect) -> Option<u128> {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|b| {
        let mut out = b.borrow_mut();
        out.clear();
        let ok = crate::quick::values_masked(sql, dialect, &mut out);
        let key = ok.then(|| xxhash_rust::xxh3::xxh3_128_with_seed(&out, key_seed() ^ VALUES));
        if out.capacity() > 64 * 1024 {
            *out = Vec::new();
        }
        key
    })
}

/// What sets [`values_key`]'s hashes apart from shapes' keys.
const VALUES: u64 = 0x7661_6c75_6573;

/// The seed of the cache keys' hashes ([`values_key`], [`crate::Shape::key`]), drawn
/// once per process: xxh3 is not made to resist texts crafted to share another's key,
/// and with a seed no one knows such a text cannot be made ahead of time.
pub(crate) fn key_seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    })
}

/// Writes `sql` to `out` (empty) with each value the one-pass path folds (a number, a
/// quoted string) replaced by `?`, the rest as written; false (`out` then holds part of
/// it) for any text the one-pass path might not take. Two texts written alike here get
/// the same digest from [`digest`], whose output depends only on the bytes kept and on
/// which tokens touch (a replaced value stays one token where it was): a cache keyed by
/// this text skips the digest for statements that differ only in their values. The
/// caller caches only texts [`digest`] took; the checks here make sure that every text
/// written alike is one it takes too (a `$` anywhere, and an `e'...'` string, it refuses
/// for reasons a replaced value could hide).
/// The bytes [`values_masked`] looks at: digits and quotes.
const STOPS: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_digit() || b == b'\'' || b == b'"' || b == b'`';
        c += 1;
    }
    t
};

pub(crate) fn values_masked(sql: &[u8], dialect: Dialect, out: &mut Vec<u8>) -> bool {
    if memchr::memchr(b'$', sql).is_some() {
        return false;
    }
    let my = dialect == Dialect::MySql;
    let mut i = 0;
    let mut kept = 0;
    loop {
        // To the next digit or quote: most bytes are neither.
        i += sql[i..]
            .iter()
            .position(|&c| STOPS[usize::from(c)])
            .unwrap_or(sql.len() - i);
        let Some(&c) = sql.get(i) else {
            break;
        };
        let end = match c {
            // A digit that does not continue a word starts a number.
            b'0'..=b'9' if i == 0 || class(sql[i - 1]) & WORD == 0 => {
                let mut j = i + 1;
                while j < sql.len() && (sql[j].is_ascii_alphanumeric() || sql[j] == b'.') {
                    j += 1;
                }
                j
            }
            b'\'' | b'"' if c == b'\'' || my => {
                if i > 0 && sql[i - 1] | 0x20 == b'e' {
                    return false;
                }
                match quoted_end(sql, i, c, my) {
                    Some(j) => j,
                    None => return false,
                }
            }
            b'`' if my => match quoted_end(sql, i, c, false) {
                // A quoted name is kept as written.
                Some(j) => {
                    i = j;
                    continue;
                }
                None => return false,
            },
            b'"' => return false,
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&sql[kept..i]);
        out.push(b'?');
        i = end;
        kept = end;
    }
    out.extend_from_slice(&sql[kept..]);
    true
}

#[cfg(test)]
#[path = "quick_tests.rs"]
mod tests;
