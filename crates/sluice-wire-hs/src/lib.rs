//! The HandlerSocket line protocol (see `shared/handlersocket-protocol.md` and
//! `docs/handlersocket-reference.md`): a request or an answer is one line ending in LF,
//! its tokens separated by TAB. A token is NULL (the single byte 0x00) or a string in
//! which bytes 0x00..=0x0f travel as 0x01 followed by the byte + 0x40. No IO here: the
//! server reads lines with [`line_end`], walks their tokens with [`tokens`] and
//! [`decode`], and writes answers with [`Answer`].

use std::borrow::Cow;

pub mod request;

/// The line separator and the token separator.
pub const LF: u8 = b'\n';
pub const TAB: u8 = b'\t';
/// The escape byte: the byte after it is the original plus 0x40.
const ESC: u8 = 0x01;
/// Bytes below this are escaped.
const ESCAPE_BELOW: u8 = 0x10;
const SHIFT: u8 = 0x40;

/// A line longer than the limit, with no LF in sight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong {
    pub limit: usize,
}

/// Where the first complete line in `buf` ends: the index of its LF. None while the line
/// is incomplete; an error once `max` bytes hold no LF. (The reference has no limit;
/// Sluice's listeners do.)
pub fn line_end(buf: &[u8], max: usize) -> Result<Option<usize>, LineTooLong> {
    let window = &buf[..buf.len().min(max.saturating_add(1))];
    match memchr::memchr(LF, window) {
        Some(i) => Ok(Some(i)),
        None if buf.len() > max => Err(LineTooLong { limit: max }),
        None => Ok(None),
    }
}

/// The content of the line whose LF is at `end`: a CR before the LF goes too (CRLF works),
/// unless it is all the line holds.
pub fn line(buf: &[u8], end: usize) -> &[u8] {
    match buf[..end].split_last() {
        Some((b'\r', rest)) if !rest.is_empty() => rest,
        _ => &buf[..end],
    }
}

/// The raw (still escaped) tokens of a line, without its LF. An empty line has one
/// empty token, as a line with one empty string would.
pub fn tokens(line: &[u8]) -> Tokens<'_> {
    Tokens { rest: Some(line) }
}

/// Iterator over a line's raw tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        match memchr::memchr(TAB, rest) {
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// A decoded token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    Null,
    Str(Cow<'a, [u8]>),
}

impl Value<'_> {
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Null => None,
            Value::Str(s) => Some(s),
        }
    }
}

/// Decodes a raw token where NULL may stand (key, filter, modify and insert values):
/// the single byte 0x00 is NULL, anything else a string ([`unescape`]).
pub fn decode(raw: &[u8]) -> Value<'_> {
    if raw == [0] {
        return Value::Null;
    }
    Value::Str(unescape(raw))
}

/// A raw token's string, escapes undone (borrowed when it has none): 0x01 followed by a
/// byte of 0x40 or more stands for that byte minus 0x40; only 0x01 is special. As in the
/// reference, an escape followed by a smaller byte, or at the end, cuts the value short
/// there.
pub fn unescape(raw: &[u8]) -> Cow<'_, [u8]> {
    let Some(first) = memchr::memchr(ESC, raw) else {
        return Cow::Borrowed(raw);
    };
    let mut out = Vec::with_capacity(raw.len());
    out.extend_from_slice(&raw[..first]);
    let mut i = first;
    while i < raw.len() {
        if raw[i] != ESC {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        match raw.get(i + 1) {
            Some(&next) if next >= SHIFT => {
                out.push(next - SHIFT);
                i += 2;
            }
            _ => break,
        }
    }
    Cow::Owned(out)
}

/// Appends a token: NULL as 0x00, a string with its low bytes escaped.
pub fn encode(out: &mut Vec<u8>, v: Option<&[u8]>) {
    let Some(s) = v else {
        out.push(0);
        return;
    };
    // Without an early exit the scan is vectorised; values are short.
    if !s.iter().fold(false, |low, &b| low | (b < ESCAPE_BELOW)) {
        out.extend_from_slice(s);
        return;
    }
    out.reserve(s.len() + 8);
    for &b in s {
        if b < ESCAPE_BELOW {
            out.extend_from_slice(&[ESC, b + SHIFT]);
        } else {
            out.push(b);
        }
    }
}

/// Writes one answer line: `<code> <numcolumns> <value>...` LF.
pub struct Answer<'o> {
    out: &'o mut Vec<u8>,
}

impl<'o> Answer<'o> {
    /// Starts an answer with its code and column count.
    pub fn start(out: &'o mut Vec<u8>, code: u32, columns: usize) -> Answer<'o> {
        push_number(out, u64::from(code));
        out.push(TAB);
        push_number(out, columns as u64);
        Answer { out }
    }

    /// One more value.
    pub fn value(&mut self, v: Option<&[u8]>) -> &mut Self {
        self.out.push(TAB);
        encode(self.out, v);
        self
    }

    /// Ends the line.
    pub fn end(&mut self) {
        self.out.push(LF);
    }
}

/// An error answer: `<code> 1 <message>`, or `<code> 1` without one.
pub fn error(out: &mut Vec<u8>, code: u32, message: Option<&str>) {
    let mut a = Answer::start(out, code, 1);
    if let Some(m) = message {
        a.value(Some(m.as_bytes()));
    }
    a.end();
}

fn push_number(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

#[cfg(test)]
mod tests;
