//! Parsing a request line the way the reference plugin does (docs/handlersocket-reference.md
//! §2–§3.3): purely positional, missing tokens read as empty strings, numbers skip every
//! non-digit byte. Errors found while parsing are the reference's code-2 messages, in its
//! order; what needs the open index or the table (op, klen, kpnum, readonly, ...) is for
//! the executor.

use crate::{Tokens, Value, decode, tokens, unescape};
use std::borrow::Cow;

/// A parsed request line.
#[derive(Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// An empty or unknown first token: `2 1 cmd`.
    Unknown,
    /// `P <id> <db> <table> <index> <columns> [<fcolumns>]`: raw tokens, not unescaped.
    Open(Open<'a>),
    /// `A <type> <key>`.
    Auth { kind: &'a [u8], key: &'a [u8] },
    /// A request on an open index (find, find_modify, insert).
    Exec(Exec<'a>),
}

#[derive(Debug, PartialEq, Eq)]
pub struct Open<'a> {
    pub id: u32,
    pub db: &'a [u8],
    pub table: &'a [u8],
    pub index: &'a [u8],
    pub columns: &'a [u8],
    pub fcolumns: &'a [u8],
}

#[derive(Debug, PartialEq, Eq)]
pub struct Exec<'a> {
    pub id: u32,
    /// The operation token as sent (`=`, `>=`, `+`, ... or anything: checked later).
    pub op: &'a [u8],
    /// How many key values the request declared, and those the line holds (at most that
    /// many; the rest are empty strings).
    pub n: u32,
    pub keys: Vec<Value<'a>>,
    pub limit: u32,
    pub offset: u32,
    pub within: Option<In<'a>>,
    pub filters: Vec<Filter<'a>>,
    /// The modify operation token, if any, and the tokens after it (as many of them are
    /// values as the index has columns).
    pub modify: Option<(&'a [u8], Tokens<'a>)>,
}

/// `@ <icol> <m> <v1> ... <vm>`: key part `icol` takes each value in turn.
#[derive(Debug, PartialEq, Eq)]
pub struct In<'a> {
    /// None when the column number does not fit a signed 32-bit int (the reference then
    /// replaces nothing).
    pub column: Option<u32>,
    pub values: Vec<Cow<'a, [u8]>>,
}

/// `<F|W> <fop> <fcol> <fval>`.
#[derive(Debug, PartialEq, Eq)]
pub struct Filter<'a> {
    /// `F` skips rows failing the condition, `W` ends the scan at the first.
    pub stop: bool,
    pub op: &'a [u8],
    pub column: u32,
    pub value: Value<'a>,
}

/// Reads a number as the reference does: every byte that is not a decimal digit is
/// skipped, and the value wraps at 2^32.
pub fn number(raw: &[u8]) -> u32 {
    raw.iter()
        .filter(|b| b.is_ascii_digit())
        .fold(0u32, |n, b| {
            n.wrapping_mul(10).wrapping_add(u32::from(b - b'0'))
        })
}

/// What the executor must tell the parser about the connection's open indexes.
pub trait Slots {
    /// How many index ids the connection has room for (one more than the highest opened).
    fn count(&self) -> usize;
    /// How many filter columns index `id` has (0 for an id never opened).
    fn filter_columns(&self, id: u32) -> usize;
}

/// Parses one request line (without its line end). Err: the message of a `2 1 <message>`
/// answer found while parsing.
pub fn parse<'a>(line: &'a [u8], slots: &impl Slots) -> Result<Request<'a>, &'static str> {
    let mut t = tokens(line);
    let first = t.next().unwrap_or_default();
    match first {
        b"" => Ok(Request::Unknown),
        b"P" => {
            let id = number(t.next().unwrap_or_default());
            let mut next = || t.next().unwrap_or_default();
            Ok(Request::Open(Open {
                id,
                db: next(),
                table: next(),
                index: next(),
                columns: next(),
                fcolumns: next(),
            }))
        }
        b"A" => Ok(Request::Auth {
            kind: t.next().unwrap_or_default(),
            key: t.next().unwrap_or_default(),
        }),
        [b'0'..=b'9', ..] => parse_exec(number(first), t, slots).map(Request::Exec),
        _ => Ok(Request::Unknown),
    }
}

fn parse_exec<'a>(
    id: u32,
    mut t: Tokens<'a>,
    slots: &impl Slots,
) -> Result<Exec<'a>, &'static str> {
    if id as usize >= slots.count() {
        return Err("stmtnum");
    }
    let op = t.next().unwrap_or_default();
    let n = number(t.next().unwrap_or_default());
    // At most what the line holds: a huge n costs nothing.
    let keys: Vec<Value<'a>> = t.by_ref().take(n as usize).map(decode).collect();
    let limit = number(t.next().unwrap_or_default());
    let offset = number(t.next().unwrap_or_default());
    let mut exec = Exec {
        id,
        op,
        n,
        keys,
        limit,
        offset,
        within: None,
        filters: Vec::new(),
        modify: None,
    };
    let mut peek = t.clone();
    if peek.next().is_some_and(|x| x.first() == Some(&b'@')) {
        t.next();
        let column = number(t.next().unwrap_or_default());
        let m = number(t.next().unwrap_or_default());
        if m == 0 {
            return Err("invalueslen");
        }
        let values = t.by_ref().take(m as usize).map(unescape).collect();
        exec.within = Some(In {
            column: i32::try_from(column).ok().map(|c| c as u32),
            values,
        });
    }
    loop {
        let mut peek = t.clone();
        let Some(kind) = peek
            .next()
            .filter(|k| matches!(k.first(), Some(b'F' | b'W')))
        else {
            break;
        };
        t = peek;
        let op = t.next().unwrap_or_default();
        let column = number(t.next().unwrap_or_default());
        let value = decode(t.next().unwrap_or_default());
        if kind.len() != 1 {
            return Err("filtertype");
        }
        if column as usize >= slots.filter_columns(id) {
            return Err("filterfld");
        }
        exec.filters.push(Filter {
            stop: kind == b"W",
            op,
            column,
            value,
        });
    }
    if let Some(mop) = t.next() {
        exec.modify = Some((mop, t));
    }
    Ok(exec)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two;
    impl Slots for Two {
        fn count(&self) -> usize {
            2
        }
        fn filter_columns(&self, id: u32) -> usize {
            if id == 1 { 2 } else { 0 }
        }
    }

    fn exec(line: &[u8]) -> Exec<'_> {
        match parse(line, &Two) {
            Ok(Request::Exec(e)) => e,
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn dispatch_by_first_token() {
        assert_eq!(parse(b"", &Two), Ok(Request::Unknown));
        assert_eq!(parse(b"\t1", &Two), Ok(Request::Unknown));
        assert_eq!(parse(b"PP\t1", &Two), Ok(Request::Unknown));
        assert_eq!(parse(b"p", &Two), Ok(Request::Unknown));
        assert_eq!(
            parse(b"A\t1\tsecret\textra", &Two),
            Ok(Request::Auth {
                kind: b"1",
                key: b"secret"
            })
        );
        match parse(b"P\t1\tdb\tt\tPRIMARY\tk,v", &Two) {
            Ok(Request::Open(o)) => {
                assert_eq!(
                    (o.id, o.db, o.index, o.columns),
                    (1, &b"db"[..], &b"PRIMARY"[..], &b"k,v"[..])
                );
                assert_eq!(o.fcolumns, b"");
            }
            r => panic!("{r:?}"),
        }
        // `0abc` is index 0; an id past every slot fails at once.
        assert_eq!(exec(b"0abc\t=\t1\t5").id, 0);
        assert_eq!(parse(b"7\t=\t1\t5", &Two), Err("stmtnum"));
    }

    #[test]
    fn numbers_skip_non_digits() {
        assert_eq!(number(b"1x2"), 12);
        assert_eq!(number(b"-5"), 5);
        assert_eq!(number(b""), 0);
        assert_eq!(number(b"4294967297"), 1);
    }

    #[test]
    fn find_with_limit_in_and_filters() {
        let e = exec(b"1\t>=\t2\ta\t\0\t10\t3\t@\t0\t2\tx\t\x01\x43\tF\t<\t1\t\0\tW\t=\t0\tz");
        assert_eq!(e.op, b">=");
        assert_eq!(e.keys, [Value::Str(Cow::Borrowed(b"a")), Value::Null]);
        assert_eq!((e.limit, e.offset), (10, 3));
        let within = e.within.unwrap();
        assert_eq!(within.column, Some(0));
        assert_eq!(
            within.values,
            [Cow::Borrowed(&b"x"[..]), Cow::Owned(b"\x03".to_vec())]
        );
        assert_eq!(e.filters.len(), 2);
        assert!(!e.filters[0].stop && e.filters[1].stop);
        assert_eq!(e.filters[0].value, Value::Null);
        assert!(e.modify.is_none());
    }

    #[test]
    fn limit_and_offset_are_positional() {
        // `D` is read as the limit: a plain find.
        let e = exec(b"1\t=\t1\t5\tD");
        assert_eq!((e.limit, e.offset), (0, 0));
        assert!(e.modify.is_none());
        let e = exec(b"1\t=\t1\t5\t1\t0\tU?\tv\t\0");
        let (mop, mut rest) = e.modify.unwrap();
        assert_eq!(mop, b"U?");
        assert_eq!(rest.next(), Some(&b"v"[..]));
        assert_eq!(rest.next().map(decode), Some(Value::Null));
        // A huge key count takes what the line holds.
        assert_eq!(exec(b"1\t=\t4000000000\t5").keys.len(), 1);
    }

    #[test]
    fn parse_errors_in_the_reference_order() {
        assert_eq!(
            parse(b"1\t=\t1\t5\t1\t0\t@\t0\t0", &Two),
            Err("invalueslen")
        );
        assert_eq!(
            parse(b"1\t=\t1\t5\t1\t0\tFx\t=\t0\t1", &Two),
            Err("filtertype")
        );
        assert_eq!(
            parse(b"1\t=\t1\t5\t1\t0\tF\t=\t2\t1", &Two),
            Err("filterfld")
        );
        // An id below the highest opened but never opened has no filter columns.
        assert_eq!(
            parse(b"0\t=\t1\t5\t1\t0\tF\t=\t0\t1", &Two),
            Err("filterfld")
        );
        // `@foo` counts as IN.
        assert!(exec(b"1\t=\t1\t5\t1\t0\t@foo\t0\t1\tv").within.is_some());
        // A column number past i32 means no replacement.
        let e = exec(b"1\t=\t1\t5\t1\t0\t@\t3000000000\t1\tv");
        assert_eq!(e.within.unwrap().column, None);
    }
}
