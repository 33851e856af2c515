//! Running one batch of requests on one server connection. The requests keep their
//! order; consecutive equality lookups on the same unique integer index become one
//! statement (`IN (...)`), every other request its own statement(s). Statements go
//! out together as one multi-statement round; a modification needs a second round
//! (its rows are read FOR UPDATE first, then written by their row key), so it ends
//! the round it reads in. A batch that writes runs in one transaction. A statement
//! that fails answers its own request only: the statements after it that belong to
//! other requests are sent again (the server ran none of them).

use super::modify::modify_writes;
use super::request::{Action, Find, ModKind, Op, Req};
use super::rows::{Row, bound, count_answer, error_answer, hits, outcome_error, rows_answer};
use super::sql::{self, Dialect, Extras, Layout};
use super::{KvConn, KvStats, Outcome, Piece, TOO_LARGE};
use crate::error::Error;

/// Most SQL one request may make (an IN list repeats the find for every value).
const MAX_REQUEST_SQL: usize = 4 << 20;
/// Most SQL sent in one go: the rest of a round follows once it is answered (servers
/// cap a packet; MariaDB's default is 16 MiB).
const MAX_ROUND_SQL: usize = 4 << 20;

/// One statement of a round and the request it serves.
pub(super) struct Stmt {
    pub(super) sql: Vec<u8>,
    /// The text of its one parameter (a grouped lookup's keys, on PostgreSQL).
    pub(super) param: Option<Vec<u8>>,
    /// It failed on a stale prepared copy once already (see `Dialect::stale_statement`).
    pub(super) retried: bool,
    /// Position in the batch of the request; None for BEGIN/COMMIT.
    pub(super) req: Option<usize>,
}

impl Stmt {
    /// A statement without a parameter.
    pub(super) fn text(sql: Vec<u8>, req: Option<usize>) -> Stmt {
        Stmt {
            sql,
            param: None,
            retried: false,
            req,
        }
    }
}

/// What each request of the batch is waiting for.
pub(super) enum Pending {
    /// Its answer is written.
    Done,
    /// A find (or the read half of a modification): its statements' layout and outcomes.
    Find {
        layout: Layout,
        outcomes: Vec<Outcome>,
    },
    /// The write half of a modification: rows hit, statements still to answer.
    Writes {
        count: u64,
        failed: Option<String>,
    },
    /// A grouped lookup: the position of its group.
    Grouped(usize),
    Insert(Option<Outcome>),
}

/// Runs `reqs` on `conn` and returns one answer line per request. Err: the connection
/// failed (the caller answers every request with an error and drops it).
pub async fn run<C: KvConn>(
    conn: &mut C,
    d: &dyn Dialect,
    reqs: &[Req],
    stats: &KvStats,
) -> Result<Vec<Vec<u8>>, Error> {
    let mut answers: Vec<Vec<u8>> = vec![Vec::new(); reqs.len()];
    let mut pending: Vec<Pending> = Vec::with_capacity(reqs.len());
    let mut groups: Vec<(Vec<usize>, Option<Outcome>)> = Vec::new();
    let writes = reqs.iter().any(Req::writes);
    let mut round: Vec<Stmt> = Vec::new();
    if writes {
        round.push(Stmt::text(b"BEGIN".to_vec(), None));
    }
    let mut i = 0;
    while i < reqs.len() {
        // A run of grouped lookups.
        let mut j = i;
        while j < reqs.len() && groupable(&reqs[j]).is_some() && same_group(&reqs[i], &reqs[j]) {
            j += 1;
        }
        if j - i > 1 {
            let keys: Vec<i128> = reqs[i..j].iter().filter_map(groupable).collect();
            let mut s = Vec::new();
            let param = sql::lookup(d, &mut s, &reqs[i].index, &keys);
            round.push(Stmt {
                sql: s,
                param,
                retried: false,
                req: Some(i),
            });
            let n = (j - i) as u64;
            stats
                .grouped
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            let g = groups.len();
            groups.push(((i..j).collect(), None));
            pending.extend((i..j).map(|_| Pending::Grouped(g)));
            i = j;
            continue;
        }
        let r = &reqs[i];
        if !values_of(r).all(|v| d.accepts(v)) {
            // PostgreSQL's invalid byte sequence: the request fails by itself.
            error_answer(&mut answers[i], 1, "22021");
            pending.push(Pending::Done);
            i += 1;
            continue;
        }
        match &r.action {
            Action::Insert(values) => {
                let mut s = Vec::new();
                sql::insert(d, &mut s, &r.index, values);
                round.push(Stmt::text(s, Some(i)));
                pending.push(Pending::Insert(None));
            }
            Action::Find(f) => {
                if f.modify.is_some() && r.index.table.row_key().is_none() {
                    error_answer(&mut answers[i], 2, "notimpl");
                    pending.push(Pending::Done);
                    i += 1;
                    continue;
                }
                let (layout, stmts) = match find_statements(d, r, f) {
                    Ok(found) => found,
                    Err(m) => {
                        error_answer(&mut answers[i], 2, m);
                        pending.push(Pending::Done);
                        i += 1;
                        continue;
                    }
                };
                round.extend(stmts.into_iter().map(|sql| Stmt::text(sql, Some(i))));
                pending.push(Pending::Find {
                    layout,
                    outcomes: Vec::new(),
                });
                if f.modify.is_some() {
                    // Its writes depend on what it reads: run the round now.
                    execute(
                        conn,
                        std::mem::take(&mut round),
                        &mut pending,
                        &mut groups,
                        d,
                        writes,
                    )
                    .await?;
                    round = modify_writes(d, r, i, f, &mut pending, &mut answers);
                }
            }
        }
        i += 1;
    }
    if writes {
        round.push(Stmt::text(b"COMMIT".to_vec(), None));
    }
    execute(conn, round, &mut pending, &mut groups, d, writes).await?;
    for (members, outcome) in &groups {
        answer_group(reqs, members, outcome.as_ref(), &mut answers);
    }
    for (i, p) in pending.into_iter().enumerate() {
        let out = &mut answers[i];
        match p {
            Pending::Done | Pending::Grouped(_) => {}
            Pending::Find { layout, outcomes } => {
                let Action::Find(f) = &reqs[i].action else {
                    continue;
                };
                match hits(f, &layout, &outcomes) {
                    Ok(rows) => rows_answer(out, reqs[i].index.columns.len(), &rows),
                    Err(k) => outcome_error(out, &outcomes[k]),
                }
            }
            Pending::Writes { count, failed } => match failed {
                Some(e) => {
                    // Rows already answered by `?` are thrown away, as the reference does.
                    out.clear();
                    error_answer(out, 1, &e)
                }
                None if out.is_empty() => count_answer(out, count),
                None => {}
            },
            Pending::Insert(o) => answer_insert(out, &reqs[i], o),
        }
    }
    Ok(answers)
}

/// The key of a request that can join a grouped lookup: an equality find of one clean
/// integer on a one-column unique integer index, with nothing else.
fn groupable(r: &Req) -> Option<i128> {
    let Action::Find(f) = &r.action else {
        return None;
    };
    let ix = r.index.index();
    let col = r.index.column(*ix.columns.first()?);
    let plain = f.op == Op::Eq && f.within.is_none() && f.filters.is_empty() && f.modify.is_none();
    let key = f.keys.first()?.as_deref()?;
    if !(plain && ix.unique && ix.columns.len() == 1 && f.keys.len() == 1 && f.offset == 0) {
        return None;
    }
    super::canonical_int(col.kind, key)
}

/// Every value a request sends to the server.
fn values_of(r: &Req) -> Box<dyn Iterator<Item = &[u8]> + '_> {
    match &r.action {
        Action::Insert(values) => Box::new(values.iter().filter_map(|v| v.as_deref())),
        Action::Find(f) => {
            let keys = f.keys.iter().filter_map(|v| v.as_deref());
            let within = f
                .within
                .iter()
                .flat_map(|(_, vs)| vs.iter().map(Vec::as_slice));
            let filters = f.filters.iter().filter_map(|x| x.value.as_deref());
            let modify = f
                .modify
                .iter()
                .flat_map(|m| m.values.iter().filter_map(|v| v.as_deref()));
            Box::new(keys.chain(within).chain(filters).chain(modify))
        }
    }
}

fn same_group(a: &Req, b: &Req) -> bool {
    std::sync::Arc::ptr_eq(&a.index.table, &b.index.table)
        && a.index.index == b.index.index
        && a.index.columns == b.index.columns
}

/// The statements of a find: one scan, or one positioned read per IN value; none when
/// the limit leaves no row.
fn find_statements(
    d: &dyn Dialect,
    r: &Req,
    f: &Find,
) -> Result<(Layout, Vec<Vec<u8>>), &'static str> {
    let mut extras = Extras {
        flag_filters: f.within.is_some(),
        for_update: f.modify.is_some(),
        signed: matches!(&f.modify, Some(m) if matches!(m.kind, ModKind::Add | ModKind::Sub)),
        ..Extras::default()
    };
    let keys: Vec<Option<&[u8]>> = f.keys.iter().map(|k| k.as_deref()).collect();
    let mut layout = Layout {
        returned: r.index.columns.len(),
        filters: 0,
        key: 0,
        signed: 0,
    };
    let bound = u64::from(bound(f));
    let offset = u64::from(f.offset);
    if bound <= offset {
        return Ok((layout, Vec::new()));
    }
    let mut stmts = Vec::new();
    let mut size = 0;
    match &f.within {
        Some((column, values)) => {
            for v in values {
                let mut keys = keys.clone();
                if let Some(c) = column {
                    keys[*c] = Some(v);
                }
                let mut s = Vec::new();
                extras.count = 1;
                layout = sql::find(d, &mut s, &r.index, f, &keys, extras);
                size += s.len();
                if size > MAX_REQUEST_SQL {
                    return Err("toolong");
                }
                stmts.push(s);
            }
        }
        None => {
            let w = f.filters.iter().any(|x| x.stop);
            (extras.offset, extras.count) = if w {
                (0, bound)
            } else {
                (offset, bound - offset)
            };
            let mut s = Vec::new();
            layout = sql::find(d, &mut s, &r.index, f, &keys, extras);
            stmts.push(s);
        }
    }
    Ok((layout, stmts))
}

/// Runs one round, sending again what an error stopped; outcomes go to their requests.
/// With `guard` (a writing batch on a server where a failed statement aborts the whole
/// transaction), each request's statement runs under a savepoint, rolled back to when
/// it fails, so its neighbours' writes stay. Err also when BEGIN, COMMIT or a
/// savepoint fails: no write of the batch stands then.
async fn execute<C: KvConn>(
    conn: &mut C,
    mut stmts: Vec<Stmt>,
    pending: &mut [Pending],
    groups: &mut [(Vec<usize>, Option<Outcome>)],
    d: &dyn Dialect,
    in_tx: bool,
) -> Result<(), Error> {
    let guard = in_tx && d.failure_aborts_transaction();
    let mut rollback = false;
    while !stmts.is_empty() || rollback {
        let mut pieces = Vec::new();
        let mut size = 0;
        // Which statement each one sent is (None: savepoint bookkeeping).
        let mut sent: Vec<Option<usize>> = Vec::new();
        if std::mem::take(&mut rollback) {
            pieces.push(Piece::text(b"ROLLBACK TO SAVEPOINT kv"));
            sent.push(None);
        }
        for (k, st) in stmts.iter().enumerate() {
            if size >= MAX_ROUND_SQL {
                break;
            }
            let guarded = guard && st.req.is_some();
            if guarded {
                pieces.push(Piece::text(b"SAVEPOINT kv"));
                sent.push(None);
            }
            size += st.sql.len() + st.param.as_ref().map_or(0, Vec::len);
            pieces.push(Piece {
                sql: &st.sql,
                param: st.param.as_deref(),
            });
            sent.push(Some(k));
            if guarded {
                pieces.push(Piece::text(b"RELEASE SAVEPOINT kv"));
                sent.push(None);
            }
        }
        let outcomes = conn.run(&pieces).await?;
        drop(pieces);
        let mut done = 0;
        let mut failed_req = None;
        let mut stuck = None;
        let mut again = false;
        for (which, o) in sent.iter().zip(outcomes) {
            // A statement whose rows Sluice dropped ran: the server went on.
            let failed = matches!(&o, Outcome::Failed { message, .. } if message != TOO_LARGE);
            let Some(k) = *which else {
                // BEGIN, COMMIT or a savepoint failed: nothing more can run.
                if let Outcome::Failed { message, .. } = o {
                    stuck.get_or_insert(message);
                }
                continue;
            };
            done = k + 1;
            match (stmts[k].req, &o) {
                (None, Outcome::Failed { message, .. }) => {
                    stuck.get_or_insert(message.clone());
                }
                (Some(_), Outcome::Failed { code, message })
                    if in_tx && d.loses_transaction(*code) =>
                {
                    stuck.get_or_insert(message.clone());
                }
                _ => {}
            }
            if let Some(r) = stmts[k].req {
                let st = &mut stmts[k];
                if failed && st.param.is_some() && !st.retried && d.stale_statement(&o) {
                    // A read on a stale prepared copy: it ran nothing; run it again.
                    st.retried = true;
                    (done, again, rollback) = (k, true, guard);
                    continue;
                }
                if failed {
                    failed_req = Some(r);
                    rollback = guard;
                }
                deliver(r, o, pending, groups);
            }
        }
        if let Some(e) = stuck {
            // The transaction is lost: the caller answers every request with an error
            // and drops the connection (which rolls back whatever it still holds).
            return Err(Error::server_gone(format!(
                "a key-value transaction statement failed ({e}); the batch is not run"
            )));
        }
        // The server stops at the first error: send the rest again, less the failed
        // request's own statements.
        stmts = stmts.split_off(done.min(stmts.len()));
        match failed_req {
            Some(r) => stmts.retain(|s| s.req != Some(r)),
            None if done == 0 && !again && !stmts.is_empty() => break,
            None => {}
        }
    }
    Ok(())
}

fn deliver(
    r: usize,
    o: Outcome,
    pending: &mut [Pending],
    groups: &mut [(Vec<usize>, Option<Outcome>)],
) {
    match &mut pending[r] {
        Pending::Find { outcomes, layout } => {
            // Rows narrower than the statement asked for are not to be trusted.
            let narrow = |rows: &[Row]| rows.iter().any(|row| row.len() < layout.width());
            outcomes.push(match o {
                Outcome::Rows(rows) if narrow(&rows) => Outcome::Failed {
                    code: 0,
                    message: "unexpected".into(),
                },
                o => o,
            })
        }
        Pending::Insert(slot) => *slot = Some(o),
        Pending::Grouped(g) => groups[*g].1 = Some(o),
        Pending::Writes { failed, .. } => {
            if let Outcome::Failed { message, .. } = o {
                failed.get_or_insert(message);
            }
        }
        Pending::Done => {}
    }
}

fn answer_insert(out: &mut Vec<u8>, r: &Req, o: Option<Outcome>) {
    // The generated value: reported by the server, or returned as a row.
    let o = match o {
        Some(Outcome::Rows(rows)) => {
            let id = rows
                .first()
                .and_then(|r| r.first())
                .and_then(|v| v.as_deref());
            let id = id
                .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
                .unwrap_or(0);
            Some(Outcome::Done {
                affected: 1,
                insert_id: id,
            })
        }
        // Its returned row was dropped (the round's answers were over the cap), but the
        // row is inserted and the batch commits: say so, with the id unknown (0).
        Some(Outcome::Failed { message, .. }) if message == TOO_LARGE => Some(Outcome::Done {
            affected: 1,
            insert_id: 0,
        }),
        o => o,
    };
    match o {
        Some(Outcome::Done { insert_id, .. }) => {
            let t = &r.index.table;
            let Some(g) = t.generated() else {
                sluice_wire_hs::Answer::start(out, 0, 1).end();
                return;
            };
            // An explicit non-zero value for the generated column generates nothing.
            let Action::Insert(values) = &r.action else {
                return;
            };
            let explicit = r.index.columns.iter().zip(values).any(|(&c, v)| {
                c == g
                    && v.as_deref().is_some_and(|v| {
                        super::canonical_int(t.columns[c].kind, v).is_some_and(|n| n != 0)
                    })
            });
            count_answer(out, if explicit { 0 } else { insert_id });
        }
        Some(o) => outcome_error(out, &o),
        None => error_answer(out, 1, "unexpected"),
    }
}

fn answer_group(
    reqs: &[Req],
    members: &[usize],
    outcome: Option<&Outcome>,
    answers: &mut [Vec<u8>],
) {
    let rows: &[Row] = match outcome {
        Some(Outcome::Rows(rows)) => rows,
        Some(o) => {
            members
                .iter()
                .for_each(|&m| outcome_error(&mut answers[m], o));
            return;
        }
        None => {
            members
                .iter()
                .for_each(|&m| error_answer(&mut answers[m], 1, "unexpected"));
            return;
        }
    };
    let Some(&first) = members.first() else {
        return;
    };
    let n = reqs[first].index.columns.len();
    // The returned columns, and the key among them or before them.
    let (key_at, cols) = match sql::lookup_key_at(&reqs[first].index) {
        Some(k) => (k, 0..n),
        None => (0, 1..n + 1),
    };
    // Rows by key, sorted (the server returns them in index order already, mostly).
    let mut by_key: Vec<(i128, &Row)> = rows
        .iter()
        .filter_map(|row| Some((super::parse_int(row.get(key_at)?.as_deref()?)?, row)))
        .collect();
    by_key.sort_by_key(|(k, _)| *k);
    for &m in members {
        let r = &reqs[m];
        let found = groupable(r).and_then(|k| by_key.binary_search_by_key(&k, |(k, _)| *k).ok());
        let values = found.and_then(|at| by_key[at].1.get(cols.clone()));
        let out = &mut answers[m];
        let size: usize = values.map_or(0, |vs| {
            vs.iter().map(|v| v.as_ref().map_or(1, Vec::len) + 1).sum()
        });
        out.reserve(size + 16);
        let mut a = sluice_wire_hs::Answer::start(out, 0, r.index.columns.len());
        for v in values.into_iter().flatten() {
            a.value(v.as_deref());
        }
        a.end();
    }
}
