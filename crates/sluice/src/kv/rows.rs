//! From the rows a find's statements returned to the rows the request hits, as the
//! reference walks them (docs/handlersocket-reference.md §5.2–§5.3): `W` ends the
//! scan, `F` skips a row (with an IN list: moves on to the next value), then offset,
//! then limit; and the answer lines made of them.

use super::Outcome;
use super::request::{Find, Val};
use super::sql::Layout;

/// A row as a server returned it.
pub type Row = Vec<Val>;

/// The first row past the last one a find may return, counting from its first row:
/// `limit + offset` in 32 bits, as the reference computes it (limit 0 means 1).
pub fn bound(f: &Find) -> u32 {
    f.limit.max(1).wrapping_add(f.offset)
}

fn passes(flag: &Val) -> bool {
    flag.as_deref() == Some(b"1")
}

/// The rows a find hits, from the outcomes of its statements (one per IN value, or
/// one). `Err(i)`: statement `i` failed.
pub fn hits<'o>(f: &Find, layout: &Layout, outcomes: &'o [Outcome]) -> Result<Vec<&'o Row>, usize> {
    let flags = layout.returned..layout.returned + layout.filters;
    let bound = bound(f);
    let mut seen = 0u32;
    let mut out = Vec::new();
    for (i, o) in outcomes.iter().enumerate() {
        let rows = match o {
            Outcome::Rows(rows) => rows,
            _ => return Err(i),
        };
        if f.within.is_some() {
            // One positioned read per value: its first row, if any.
            let Some(row) = rows.first() else { continue };
            let stops = f.filters.iter().zip(&row[flags.clone()]);
            if stops.clone().any(|(x, v)| x.stop && !passes(v)) {
                break;
            }
            if stops.clone().any(|(x, v)| !x.stop && !passes(v)) {
                continue;
            }
            if seen >= bound {
                break;
            }
            if seen >= f.offset {
                out.push(row);
            }
            seen += 1;
            continue;
        }
        // One scan: flags are the `W` filters only; without them the statement's
        // LIMIT already cut the rows.
        if layout.filters == 0 {
            out.extend(rows);
            continue;
        }
        for row in rows {
            if !row[flags.clone()].iter().all(passes) || seen >= bound {
                break;
            }
            if seen >= f.offset {
                out.push(row);
            }
            seen += 1;
        }
    }
    Ok(out)
}

/// `0 <columns> <values of every row>`.
pub fn rows_answer(out: &mut Vec<u8>, columns: usize, rows: &[&Row]) {
    let mut a = sluice_wire_hs::Answer::start(out, 0, columns);
    for row in rows {
        for v in &row[..columns] {
            a.value(v.as_deref());
        }
    }
    a.end();
}

/// The error answer of a failed statement.
pub fn outcome_error(out: &mut Vec<u8>, o: &Outcome) {
    match o {
        Outcome::Failed { message, .. } => error_answer(out, 1, message),
        _ => error_answer(out, 1, "unexpected"),
    }
}

/// `0 1 <n>`.
pub fn count_answer(out: &mut Vec<u8>, n: u64) {
    sluice_wire_hs::Answer::start(out, 0, 1)
        .value(Some(n.to_string().as_bytes()))
        .end();
}

/// `<code> 1 <message>`.
pub fn error_answer(out: &mut Vec<u8>, code: u32, message: &str) {
    sluice_wire_hs::error(out, code, Some(message));
}

/// The reference's `atoll_nocheck`: an optional sign, then digits up to the first
/// other byte; wraps like the 64-bit arithmetic it feeds.
pub fn atoll(s: &[u8]) -> i64 {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0i64, |n, b| {
            n.wrapping_mul(10).wrapping_add(i64::from(b - b'0'))
        });
    if neg { n.wrapping_neg() } else { n }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoll_like_the_reference() {
        assert_eq!(atoll(b"12abc"), 12);
        assert_eq!(atoll(b"-3x"), -3);
        assert_eq!(atoll(b" 5"), 0);
        assert_eq!(atoll(b""), 0);
        assert_eq!(atoll(b"+7"), 7);
    }

    #[test]
    fn bound_wraps_in_32_bits() {
        let f = |limit, offset| Find {
            op: super::super::request::Op::Eq,
            keys: vec![],
            limit,
            offset,
            within: None,
            filters: vec![],
            modify: None,
        };
        assert_eq!(bound(&f(0, 0)), 1);
        assert_eq!(bound(&f(10, 5)), 15);
        assert_eq!(bound(&f(u32::MAX, 1)), 0);
    }
}
