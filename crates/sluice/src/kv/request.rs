//! A request on an open index, checked the way the reference checks it after parsing
//! (docs/handlersocket-reference.md §3.3–§3.5: `stmtnum`, `op`, `klen`, `notimpl`,
//! `readonly`, `modop`, `kpnum`, `filterblob`, in that order) and owned, so that it can
//! wait in a batch queue.

use super::table::{ColKind, OpenIndex};
use sluice_wire_hs::Value;
use sluice_wire_hs::request::Exec;
use std::sync::Arc;

/// A value: `None` is NULL.
pub type Val = Option<Vec<u8>>;

/// How a find positions and walks the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Op {
    /// Whether the scan walks the index backwards.
    pub fn descending(self) -> bool {
        matches!(self, Op::Lt | Op::Le)
    }
}

/// A filter comparison; `Never` for an operator the reference does not know (the
/// condition is false for every row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    /// An operator the reference does not know: rows fail (`Never`) or pass (`Always`)
    /// as its comparison code happens to fall through.
    Never,
    Always,
}

impl Cmp {
    /// A filter operator as the reference reads it: one byte `=`, `>`, `<`, two bytes
    /// ending in `=` (`>=`, `<=`, `!=`); another one byte, or two bytes ending in `=`,
    /// never match; everything else always matches.
    pub fn parse(op: &[u8]) -> Cmp {
        match op {
            b"=" => Cmp::Eq,
            b">" => Cmp::Gt,
            b"<" => Cmp::Lt,
            b">=" => Cmp::Ge,
            b"<=" => Cmp::Le,
            b"!=" => Cmp::Ne,
            [_] | [_, b'='] => Cmp::Never,
            _ => Cmp::Always,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Filter {
    /// `W`: the scan ends at the first row failing it; `F`: such rows are skipped.
    pub stop: bool,
    pub cmp: Cmp,
    /// A table column position.
    pub column: usize,
    pub value: Val,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModKind {
    Update,
    Add,
    Sub,
    Delete,
}

#[derive(Debug, Clone)]
pub struct Modify {
    pub kind: ModKind,
    /// Answer with the rows as they were (`U?`, `D?`, ...) instead of a count.
    pub returning: bool,
    /// One value per returned column (missing ones are empty strings).
    pub values: Vec<Val>,
}

#[derive(Debug, Clone)]
pub struct Find {
    pub op: Op,
    pub keys: Vec<Val>,
    pub limit: u32,
    pub offset: u32,
    /// `@`: key part `column` (None: none) takes each value in turn.
    pub within: Option<(Option<usize>, Vec<Vec<u8>>)>,
    pub filters: Vec<Filter>,
    pub modify: Option<Modify>,
}

#[derive(Debug, Clone)]
pub enum Action {
    Find(Find),
    Insert(Vec<Val>),
}

/// A checked request, ready for a batch.
#[derive(Debug, Clone)]
pub struct Req {
    pub index: Arc<OpenIndex>,
    pub action: Action,
}

impl Req {
    pub fn writes(&self) -> bool {
        match &self.action {
            Action::Insert(_) => true,
            Action::Find(f) => f.modify.is_some(),
        }
    }
}

fn owned(v: &Value<'_>) -> Val {
    v.as_bytes().map(<[u8]>::to_vec)
}

/// Checks a parsed request against its open index (`None`: an id never opened).
/// Err: the message of a `2 1 <message>` answer.
pub fn check(
    exec: Exec<'_>,
    index: Option<&Arc<OpenIndex>>,
    writable: bool,
) -> Result<Req, &'static str> {
    let index = index.ok_or("stmtnum")?;
    let op = match exec.op {
        b"=" => Some(Op::Eq),
        b">" => Some(Op::Gt),
        b">=" => Some(Op::Ge),
        b"<" => Some(Op::Lt),
        b"<=" => Some(Op::Le),
        b"+" | b"S" => None,
        _ => return Err("op"),
    };
    if exec.n == 0 {
        return Err("klen");
    }
    let Some(op) = op else {
        if exec.op == b"S" {
            return Err("notimpl");
        }
        if !writable {
            return Err("readonly");
        }
        // The first min(n, columns) returned columns; missing tokens are empty strings.
        let k = (exec.n as usize).min(index.columns.len());
        let mut values: Vec<Val> = exec.keys.iter().take(k).map(owned).collect();
        values.resize(k, Some(Vec::new()));
        return Ok(Req {
            index: index.clone(),
            action: Action::Insert(values),
        });
    };
    let modify = match exec.modify {
        None => None,
        // An empty token is no modify operation.
        Some((b"", _)) => None,
        Some(_) if !writable => return Err("readonly"),
        Some((mop, rest)) => {
            let kind = match mop.first() {
                Some(b'U') => ModKind::Update,
                Some(b'+') => ModKind::Add,
                Some(b'-') => ModKind::Sub,
                Some(b'D') => ModKind::Delete,
                _ => return Err("modop"),
            };
            let mut rest = rest.map(sluice_wire_hs::decode);
            let values = (0..index.columns.len())
                .map(|_| rest.next().map_or(Some(Vec::new()), |v| owned(&v)))
                .collect();
            Some(Modify {
                kind,
                returning: mop.get(1) == Some(&b'?'),
                values,
            })
        }
    };
    if exec.n as usize > index.index().columns.len() {
        return Err("kpnum");
    }
    let mut filters = Vec::with_capacity(exec.filters.len());
    for f in &exec.filters {
        let column = index.fcolumns[f.column as usize];
        let value = owned(&f.value);
        if index.column(column).kind == ColKind::Blob && value.is_some() {
            return Err("filterblob");
        }
        let cmp = Cmp::parse(f.op);
        filters.push(Filter {
            stop: f.stop,
            cmp,
            column,
            value,
        });
    }
    // The line may hold fewer keys than it declared: the rest are empty strings.
    let mut keys: Vec<Val> = exec.keys.iter().map(owned).collect();
    keys.resize(exec.n as usize, Some(Vec::new()));
    // A column number past i32 means no IN list at all.
    let within = exec.within.filter(|w| w.column.is_some()).map(|w| {
        let column = w.column.map(|c| c as usize).filter(|&c| c < keys.len());
        (
            column,
            w.values.into_iter().map(|v| v.into_owned()).collect(),
        )
    });
    Ok(Req {
        index: index.clone(),
        action: Action::Find(Find {
            op,
            keys,
            limit: exec.limit,
            offset: exec.offset,
            within,
            filters,
            modify,
        }),
    })
}
