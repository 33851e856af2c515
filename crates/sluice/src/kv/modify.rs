//! The write half of a modification (find_modify): from the rows its read half found
//! `FOR UPDATE`, the `U`, `+`, `-` and `D` statements by row key, and the `?` answer of
//! the rows as they were. Part of a batch (`batch.rs`).

use super::batch::{Pending, Stmt};
use super::request::{Find, ModKind, Modify, Req, Val};
use super::rows::{Row, atoll, hits, outcome_error, rows_answer};
use super::sql::{self, Dialect};
use std::collections::HashMap;

/// After the read half of modification `i` ran: the rows it hits, answered now when
/// `?` asks for them, and the statements that write them. The reference changes each
/// row as it reads it, so an IN list that hits a row twice sees it changed the second
/// time (and a deleted row not at all): repeated rows go through `seen`.
pub(super) fn modify_writes(
    d: &dyn Dialect,
    r: &Req,
    i: usize,
    f: &Find,
    pending: &mut [Pending],
    answers: &mut [Vec<u8>],
) -> Vec<Stmt> {
    let Some(m) = &f.modify else {
        return Vec::new();
    };
    let Pending::Find { layout, outcomes } = &pending[i] else {
        return Vec::new();
    };
    let rows = match hits(f, layout, outcomes) {
        Ok(rows) => rows,
        Err(k) => {
            outcome_error(&mut answers[i], &outcomes[k]);
            pending[i] = Pending::Done;
            return Vec::new();
        }
    };
    let t = &r.index.table;
    let cols = &r.index.columns;
    let key_at = layout.returned + layout.filters;
    let signed_at = key_at + layout.key;
    // The current state of each row hit so far (None: deleted).
    let mut seen: HashMap<&[Val], Option<Row>> = HashMap::new();
    let mut printed: Vec<Row> = Vec::new();
    let mut stmts = Vec::new();
    let mut count = 0;
    for &row in &rows {
        let key = &row[key_at..signed_at];
        let mut current = match seen.get(key) {
            Some(None) => continue,
            Some(Some(now)) => now.clone(),
            None => row.clone(),
        };
        if m.returning {
            printed.push(current.clone());
        }
        let mut s = Vec::new();
        match m.kind {
            ModKind::Delete => {
                sql::delete(d, &mut s, t, key);
                seen.insert(key, None);
                count += 1;
            }
            ModKind::Update => {
                // NULL for a NOT NULL column leaves it as it is.
                let sets: Vec<(usize, Val)> = cols
                    .iter()
                    .copied()
                    .zip(m.values.iter().cloned())
                    .filter(|(c, v)| v.is_some() || t.columns[*c].nullable)
                    .collect();
                for (k, &c) in cols.iter().enumerate() {
                    if let Some((_, v)) = sets.iter().find(|(sc, _)| *sc == c) {
                        current[k] = v.clone();
                    }
                }
                sql::update(d, &mut s, t, &sets, key);
                seen.insert(key, Some(current));
                count += 1;
            }
            ModKind::Add | ModKind::Sub => {
                let Some(sets) = arithmetic(m, &current, signed_at, cols) else {
                    seen.insert(key, Some(current));
                    continue;
                };
                for (c, v) in &sets {
                    if let Some(k) = cols.iter().position(|x| x == c) {
                        current[k] = v.clone();
                        current[signed_at + k] = v.clone();
                    }
                }
                sql::update(d, &mut s, t, &sets, key);
                seen.insert(key, Some(current));
                count += 1;
            }
        }
        if !s.is_empty() {
            stmts.push(Stmt::text(s, Some(i)));
        }
    }
    if m.returning {
        let refs: Vec<&Row> = printed.iter().collect();
        rows_answer(&mut answers[i], cols.len(), &refs);
    }
    pending[i] = Pending::Writes {
        count,
        failed: None,
    };
    stmts
}

/// The new values of `+` / `-` for one row; None when `-` would cross zero in sign
/// (the row is left alone and not counted).
fn arithmetic(
    m: &Modify,
    row: &Row,
    signed_at: usize,
    cols: &[usize],
) -> Option<Vec<(usize, Val)>> {
    let mut sets = Vec::new();
    for (k, (&c, operand)) in cols.iter().zip(&m.values).enumerate() {
        let (Some(_), Some(operand)) = (&row[k], operand) else {
            continue;
        };
        let Some(old) = row[signed_at + k]
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
        else {
            continue;
        };
        let n = atoll(operand);
        let new = if m.kind == ModKind::Add {
            old.wrapping_add(n)
        } else {
            old.wrapping_sub(n)
        };
        if m.kind == ModKind::Sub && ((old < 0 && new > 0) || (old > 0 && new < 0)) {
            return None;
        }
        sets.push((c, Some(new.to_string().into_bytes())));
    }
    Some(sets)
}
