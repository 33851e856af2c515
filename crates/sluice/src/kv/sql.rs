//! Statements for key-value requests, written once for both SQL dialects: a backend
//! gives the [`Dialect`] (quoting, literals, NULL-safe equality, LIMIT form) and this
//! module writes the finds, the grouped lookups, inserts, updates and deletes. The
//! comparisons follow the reference's rules: NULL equals NULL and sorts before every
//! other value; ascending scans walk the index forwards, `<` and `<=` backwards.

use super::request::{Cmp, Filter, Find, Op, Val};
use super::table::{Column, DefaultKind, OpenIndex, Table};

/// What differs between the SQL of two servers.
pub trait Dialect: Send + Sync + 'static {
    /// Appends a quoted identifier.
    fn ident(&self, out: &mut Vec<u8>, name: &str);
    /// Appends a value as a literal for column `col` (None: NULL).
    fn literal(&self, out: &mut Vec<u8>, col: &Column, v: Option<&[u8]>);
    /// Appends what follows a sort column (`ASC`, `DESC NULLS LAST`, ...) so that NULLs
    /// come first in ascending order.
    fn order(&self, out: &mut Vec<u8>, descending: bool);
    /// Appends the LIMIT clause.
    fn limit(&self, out: &mut Vec<u8>, offset: u64, count: u64);
    /// A column's value as a signed 64-bit integer, for `+` and `-` (NULL where it has
    /// none).
    fn as_signed(&self, out: &mut Vec<u8>, col: &Column);
    /// The value a column holds when the reference clears its NULL flag without giving
    /// it a value: the empty string, zero, the zero date.
    fn zero(&self, out: &mut Vec<u8>, col: &Column);
    /// Whether a failed statement aborts the transaction it runs in (PostgreSQL), so
    /// that writes need a savepoint each.
    fn failure_aborts_transaction(&self) -> bool {
        false
    }
    /// Appends what makes an INSERT answer the generated value, where the server does
    /// not report it by itself (`RETURNING`).
    fn returning(&self, _out: &mut Vec<u8>, _generated: &Column) {}
    /// An INSERT that names no column: what follows the table name.
    fn no_columns(&self) -> &'static [u8] {
        b" () VALUES ()"
    }
    /// Whether the server can take `v` as a value at all (PostgreSQL text holds no NUL
    /// and only valid UTF-8); a request with another value fails by itself.
    fn accepts(&self, _v: &[u8]) -> bool {
        true
    }
    /// Whether a statement failing with `code` has rolled back the whole transaction
    /// (MySQL's deadlock), not only itself.
    fn loses_transaction(&self, _code: u32) -> bool {
        false
    }
    /// Whether a statement with a parameter failed because the connection's prepared copy
    /// of it no longer fits (its table changed) or is gone: it is run once more, the
    /// connection preparing it afresh.
    fn stale_statement(&self, _o: &super::Outcome) -> bool {
        false
    }
    /// Appends the condition of a grouped lookup on the key column that precedes it: an
    /// IN list by default. Some: the dialect passes the keys as one parameter instead
    /// (PostgreSQL's `= ANY($1)`, so that one prepared statement serves every size), and
    /// this is the parameter's text.
    fn key_in(&self, out: &mut Vec<u8>, keys: &[i128]) -> Option<Vec<u8>> {
        out.extend_from_slice(b" IN (");
        for (i, &k) in keys.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            super::push_int(out, k);
        }
        out.push(b')');
        None
    }
}

/// Appends `s` between two `quote` bytes, doubling each `quote` inside (quoted names on
/// both servers, PostgreSQL's string literals).
pub fn quote_doubled(out: &mut Vec<u8>, quote: u8, s: &[u8]) {
    out.push(quote);
    for &b in s {
        if b == quote {
            out.push(quote);
        }
        out.push(b);
    }
    out.push(quote);
}

/// Appends `db.table` (on PostgreSQL: schema and table).
pub fn table_name(d: &dyn Dialect, out: &mut Vec<u8>, t: &Table) {
    d.ident(out, &t.db);
    out.push(b'.');
    d.ident(out, &t.name);
}

fn columns(d: &dyn Dialect, out: &mut Vec<u8>, t: &Table, cols: &[usize], first: &mut bool) {
    for &c in cols {
        if !std::mem::take(first) {
            out.extend_from_slice(b", ");
        }
        d.ident(out, &t.columns[c].name);
    }
}

/// Appends a filter condition with the reference's NULL rules.
pub fn condition(d: &dyn Dialect, out: &mut Vec<u8>, col: &Column, cmp: Cmp, v: Option<&[u8]>) {
    let mut c = Vec::new();
    d.ident(&mut c, &col.name);
    let lit = |out: &mut Vec<u8>| d.literal(out, col, v);
    let put =
        |out: &mut Vec<u8>, parts: &[&[u8]]| parts.iter().for_each(|p| out.extend_from_slice(p));
    match (cmp, v.is_some()) {
        (Cmp::Never, _) | (Cmp::Lt, false) => out.extend_from_slice(b"FALSE"),
        (Cmp::Always, _) | (Cmp::Ge, false) => out.extend_from_slice(b"TRUE"),
        (Cmp::Gt, false) => put(out, &[&c, b" IS NOT NULL"]),
        (Cmp::Le, false) => put(out, &[&c, b" IS NULL"]),
        (Cmp::Eq, false) => put(out, &[&c, b" IS NULL"]),
        (Cmp::Ne, false) => put(out, &[&c, b" IS NOT NULL"]),
        // A value is never NULL here, so `=` is the NULL-safe equality (and uses indexes
        // on every server).
        (Cmp::Eq, true) => {
            put(out, &[b"(", &c, b" = "]);
            lit(out);
            out.push(b')');
        }
        (Cmp::Ne, true) => {
            put(out, &[b"(", &c, b" <> "]);
            lit(out);
            put(out, &[b" OR ", &c, b" IS NULL)"]);
        }
        (Cmp::Gt | Cmp::Ge, true) => {
            let op: &[u8] = if cmp == Cmp::Gt { b" > " } else { b" >= " };
            put(out, &[b"(", &c, op]);
            lit(out);
            out.push(b')');
        }
        (Cmp::Lt | Cmp::Le, true) => {
            let op: &[u8] = if cmp == Cmp::Lt { b" < " } else { b" <= " };
            put(out, &[b"(", &c, op]);
            lit(out);
            put(out, &[b" OR ", &c, b" IS NULL)"]);
        }
    }
}

/// Appends the key condition of a find: the first `keys.len()` index columns compared
/// with the keys as one prefix (lexicographically).
fn key_condition(
    d: &dyn Dialect,
    out: &mut Vec<u8>,
    ix: &OpenIndex,
    op: Op,
    keys: &[Option<&[u8]>],
) {
    let cols = &ix.index().columns[..keys.len()];
    let col = |i: usize| &ix.table.columns[cols[i]];
    // NULL stored into a NOT NULL key part is its zero value, as in the reference.
    let keys: Vec<Option<&[u8]>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| k.or(if col(i).nullable { None } else { Some(b"") }))
        .collect();
    let eqs = |out: &mut Vec<u8>, upto: usize| {
        for (i, key) in keys.iter().enumerate().take(upto) {
            condition(d, out, col(i), Cmp::Eq, *key);
            out.extend_from_slice(b" AND ");
        }
    };
    if op == Op::Eq {
        eqs(out, keys.len());
        out.extend_from_slice(b"TRUE");
        return;
    }
    let (strict, last) = match op {
        Op::Gt => (Cmp::Gt, Cmp::Gt),
        Op::Ge => (Cmp::Gt, Cmp::Ge),
        Op::Lt => (Cmp::Lt, Cmp::Lt),
        _ => (Cmp::Lt, Cmp::Le),
    };
    out.push(b'(');
    for (j, &key) in keys.iter().enumerate() {
        if j > 0 {
            out.extend_from_slice(b" OR ");
        }
        out.push(b'(');
        eqs(out, j);
        let cmp = if j + 1 == keys.len() { last } else { strict };
        condition(d, out, col(j), cmp, key);
        out.push(b')');
    }
    out.push(b')');
}

/// How the columns of a find's rows are laid out: the returned columns, then one flag
/// per filter (1 when the row passes), then the row key, then each returned column as
/// a signed integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub returned: usize,
    pub filters: usize,
    pub key: usize,
    pub signed: usize,
}

impl Layout {
    /// How many columns each row has.
    pub fn width(&self) -> usize {
        self.returned + self.filters + self.key + self.signed
    }
}

/// Which extra columns a find selects, and which of its rows it reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras {
    /// Rows `offset .. offset + count` of the scan.
    pub offset: u64,
    pub count: u64,
    /// Filters are selected as flags rather than applied in WHERE (IN lists, where a row
    /// failing an `F` filter moves on to the next value, and `W` filters).
    pub flag_filters: bool,
    /// The row key and FOR UPDATE (modifications).
    pub for_update: bool,
    /// The returned columns as signed integers (`+`, `-`).
    pub signed: bool,
}

/// Writes one find statement: `keys` (NULL where None) positioned with `op`, `F`
/// filters in WHERE unless they are flags, ordered along the index.
pub fn find(
    d: &dyn Dialect,
    out: &mut Vec<u8>,
    ix: &OpenIndex,
    f: &Find,
    keys: &[Option<&[u8]>],
    extras: Extras,
) -> Layout {
    let t = &ix.table;
    let key_cols: &[usize] = if extras.for_update {
        t.row_key().unwrap_or_default()
    } else {
        &[]
    };
    out.extend_from_slice(b"SELECT ");
    let mut first = true;
    columns(d, out, t, &ix.columns, &mut first);
    let flagged: Vec<&Filter> = f
        .filters
        .iter()
        .filter(|x| x.stop || extras.flag_filters)
        .collect();
    for x in &flagged {
        if !std::mem::take(&mut first) {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(b"CASE WHEN ");
        condition(d, out, &t.columns[x.column], x.cmp, x.value.as_deref());
        out.extend_from_slice(b" THEN 1 ELSE 0 END");
    }
    columns(d, out, t, key_cols, &mut first);
    if extras.signed {
        for &c in &ix.columns {
            if !std::mem::take(&mut first) {
                out.extend_from_slice(b", ");
            }
            d.as_signed(out, &t.columns[c]);
        }
    }
    if first {
        out.extend_from_slice(b"1");
    }
    out.extend_from_slice(b" FROM ");
    table_name(d, out, t);
    out.extend_from_slice(b" WHERE ");
    key_condition(d, out, ix, f.op, keys);
    for x in f.filters.iter().filter(|x| !x.stop && !extras.flag_filters) {
        out.extend_from_slice(b" AND ");
        condition(d, out, &t.columns[x.column], x.cmp, x.value.as_deref());
    }
    out.extend_from_slice(b" ORDER BY ");
    let desc = f.op.descending();
    let index = &ix.index().columns;
    let tail = t.row_key().unwrap_or_default();
    let mut first = true;
    for &c in index
        .iter()
        .chain(tail.iter().filter(|c| !index.contains(c)))
    {
        if !std::mem::take(&mut first) {
            out.extend_from_slice(b", ");
        }
        // Qualified: the select list may name a column twice.
        table_name(d, out, t);
        out.push(b'.');
        d.ident(out, &t.columns[c].name);
        d.order(out, desc);
    }
    d.limit(out, extras.offset, extras.count);
    if extras.for_update {
        out.extend_from_slice(b" FOR UPDATE");
    }
    Layout {
        returned: ix.columns.len(),
        filters: flagged.len(),
        key: key_cols.len(),
        signed: if extras.signed { ix.columns.len() } else { 0 },
    }
}

/// Where a grouped lookup's rows hold the key: among the returned columns when it is
/// one of them, else in a first column of its own.
pub fn lookup_key_at(ix: &OpenIndex) -> Option<usize> {
    let key = ix.index().columns[0];
    ix.columns.iter().position(|&c| c == key)
}

/// Writes one grouped lookup: the rows of every key in `keys` on a one-column unique
/// integer index: the returned columns, preceded by the key column unless it is one of
/// them ([`lookup_key_at`]). Some: the text of the statement's one parameter (see
/// [`Dialect::key_in`]).
pub fn lookup(
    d: &dyn Dialect,
    out: &mut Vec<u8>,
    ix: &OpenIndex,
    keys: &[i128],
) -> Option<Vec<u8>> {
    let t = &ix.table;
    let kc = &t.columns[ix.index().columns[0]];
    out.extend_from_slice(b"SELECT ");
    let mut first = lookup_key_at(ix).is_some();
    if !first {
        d.ident(out, &kc.name);
    }
    for &c in &ix.columns {
        if !std::mem::take(&mut first) {
            out.extend_from_slice(b", ");
        }
        d.ident(out, &t.columns[c].name);
    }
    out.extend_from_slice(b" FROM ");
    table_name(d, out, t);
    out.extend_from_slice(b" WHERE ");
    d.ident(out, &kc.name);
    d.key_in(out, keys)
}

/// Writes an INSERT of `values` into the first returned columns of `ix`, the way the
/// reference fills a row: it starts from the defaults and clears every NULL flag, so a
/// column not given (or given NULL while NOT NULL) that has no constant default holds
/// the zero value; a generated column not given is generated.
pub fn insert(d: &dyn Dialect, out: &mut Vec<u8>, ix: &OpenIndex, values: &[Val]) {
    let t = &ix.table;
    // A generated column given 0, nothing or NULL is generated.
    let generates = |c: usize, v: &Val| {
        let col = &t.columns[c];
        col.generated
            && v.as_deref()
                .is_none_or(|v| super::lenient_int(col.kind, v) == 0)
    };
    let (given, values): (Vec<usize>, Vec<Val>) = ix.columns[..values.len()]
        .iter()
        .zip(values)
        .filter(|(c, v)| !generates(**c, v))
        .map(|(c, v)| (*c, v.clone()))
        .unzip();
    let given = &given[..];
    let zeroed: Vec<usize> = (0..t.columns.len())
        .filter(|c| !given.contains(c))
        .filter(|&c| !t.columns[c].generated && t.columns[c].default != DefaultKind::Literal)
        .collect();
    out.extend_from_slice(b"INSERT INTO ");
    table_name(d, out, t);
    if given.is_empty() && zeroed.is_empty() {
        out.extend_from_slice(d.no_columns());
        if let Some(g) = t.generated() {
            d.returning(out, &t.columns[g]);
        }
        return;
    }
    out.extend_from_slice(b" (");
    let mut first = true;
    columns(d, out, t, given, &mut first);
    columns(d, out, t, &zeroed, &mut first);
    out.extend_from_slice(b") VALUES (");
    let mut first = true;
    for (v, &c) in values
        .iter()
        .zip(given)
        .chain(zeroed.iter().map(|c| (&None, c)))
    {
        if !std::mem::take(&mut first) {
            out.extend_from_slice(b", ");
        }
        let col = &t.columns[c];
        match v {
            Some(v) => d.literal(out, col, Some(v)),
            None if col.nullable && given.contains(&c) => out.extend_from_slice(b"NULL"),
            None if col.default == DefaultKind::Literal => out.extend_from_slice(b"DEFAULT"),
            None => d.zero(out, col),
        }
    }
    out.push(b')');
    if let Some(g) = t.generated() {
        d.returning(out, &t.columns[g]);
    }
}

/// Appends ` WHERE` and the row key's columns equal to `key`.
fn where_key(d: &dyn Dialect, out: &mut Vec<u8>, t: &Table, key: &[Val]) {
    out.extend_from_slice(b" WHERE ");
    let cols = t.row_key().unwrap_or_default();
    for (i, (&c, v)) in cols.iter().zip(key).enumerate() {
        if i > 0 {
            out.extend_from_slice(b" AND ");
        }
        condition(d, out, &t.columns[c], Cmp::Eq, v.as_deref());
    }
}

/// Writes an UPDATE of one row (found by its row key) setting `sets` (column, value);
/// nothing when `sets` is empty.
pub fn update(d: &dyn Dialect, out: &mut Vec<u8>, t: &Table, sets: &[(usize, Val)], key: &[Val]) {
    if sets.is_empty() {
        return;
    }
    out.extend_from_slice(b"UPDATE ");
    table_name(d, out, t);
    out.extend_from_slice(b" SET ");
    for (i, (c, v)) in sets.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        let col = &t.columns[*c];
        d.ident(out, &col.name);
        out.extend_from_slice(b" = ");
        match v.as_deref() {
            // An empty value (also a missing one) is the zero of a non-text column.
            Some(b"") if col.kind == super::table::ColKind::Other => d.zero(out, col),
            v => d.literal(out, col, v),
        }
    }
    where_key(d, out, t, key);
}

/// Writes a DELETE of one row found by its row key.
pub fn delete(d: &dyn Dialect, out: &mut Vec<u8>, t: &Table, key: &[Val]) {
    out.extend_from_slice(b"DELETE FROM ");
    table_name(d, out, t);
    where_key(d, out, t, key);
}
