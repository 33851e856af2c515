//! Lazy views over message bodies: each reads only the fields it is asked for.
//!
//! Every function takes the body of one frame (after tag and length) and returns `None`
//! when the body is malformed, so a bad message becomes a protocol error at the caller,
//! never a panic.

/// Tags of messages a client sends.
pub mod fe {
    pub const QUERY: u8 = b'Q';
    pub const PARSE: u8 = b'P';
    pub const BIND: u8 = b'B';
    pub const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub const CLOSE: u8 = b'C';
    pub const SYNC: u8 = b'S';
    pub const FLUSH: u8 = b'H';
    pub const FUNCTION_CALL: u8 = b'F';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub const TERMINATE: u8 = b'X';
    /// PasswordMessage, SASLInitialResponse and SASLResponse share this tag.
    pub const PASSWORD: u8 = b'p';
}

/// Tags of messages a server sends.
pub mod be {
    pub const AUTHENTICATION: u8 = b'R';
    pub const PARAMETER_STATUS: u8 = b'S';
    pub const BACKEND_KEY_DATA: u8 = b'K';
    pub const READY_FOR_QUERY: u8 = b'Z';
    pub const ERROR_RESPONSE: u8 = b'E';
    pub const NOTICE_RESPONSE: u8 = b'N';
    pub const NOTIFICATION: u8 = b'A';
    pub const PARSE_COMPLETE: u8 = b'1';
    pub const BIND_COMPLETE: u8 = b'2';
    pub const CLOSE_COMPLETE: u8 = b'3';
    pub const COMMAND_COMPLETE: u8 = b'C';
    pub const EMPTY_QUERY: u8 = b'I';
    pub const PORTAL_SUSPENDED: u8 = b's';
    pub const NO_DATA: u8 = b'n';
    pub const ROW_DESCRIPTION: u8 = b'T';
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    pub const DATA_ROW: u8 = b'D';
    pub const COPY_IN: u8 = b'G';
    pub const COPY_OUT: u8 = b'H';
    pub const COPY_BOTH: u8 = b'W';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
    pub const NEGOTIATE_VERSION: u8 = b'v';
}

/// Protocol version 3.0 and the special request codes of the startup phase.
pub const PROTOCOL_3_0: i32 = 196_608;
pub const SSL_REQUEST: i32 = 80_877_103;
pub const GSSENC_REQUEST: i32 = 80_877_104;
pub const CANCEL_REQUEST: i32 = 80_877_102;

/// Reads a NUL-terminated string at the start of `buf`: (string bytes, rest after NUL).
pub fn cstr(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = memchr::memchr(0, buf)?;
    Some((&buf[..end], &buf[end + 1..]))
}

fn cstr_utf8(buf: &[u8]) -> Option<(&str, &[u8])> {
    let (s, rest) = cstr(buf)?;
    Some((std::str::from_utf8(s).ok()?, rest))
}

fn be_i32(buf: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(buf.get(..4)?.try_into().ok()?))
}

fn be_i16(buf: &[u8]) -> Option<i16> {
    Some(i16::from_be_bytes(buf.get(..2)?.try_into().ok()?))
}

/// What the first, untagged message of a connection asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupRequest {
    Ssl,
    GssEnc,
    Cancel {
        pid: i32,
        secret: i32,
    },
    /// A StartupMessage: protocol version and its parameters in order.
    Startup {
        version: i32,
        params: Vec<(String, String)>,
    },
}

/// Parses an untagged startup-phase frame (including its length field).
pub fn startup_request(frame: &[u8]) -> Option<StartupRequest> {
    let code = be_i32(frame.get(4..)?)?;
    match code {
        SSL_REQUEST if frame.len() == 8 => Some(StartupRequest::Ssl),
        GSSENC_REQUEST if frame.len() == 8 => Some(StartupRequest::GssEnc),
        CANCEL_REQUEST if frame.len() == 16 => Some(StartupRequest::Cancel {
            pid: be_i32(&frame[8..])?,
            secret: be_i32(&frame[12..])?,
        }),
        // A protocol version the server does not speak is refused before its
        // parameters are looked at.
        _ if code >> 16 != 3 => Some(StartupRequest::Startup {
            version: code,
            params: Vec::new(),
        }),
        _ => {
            let mut rest = &frame[8..];
            let mut params = Vec::new();
            loop {
                let (name, r) = cstr_utf8(rest)?;
                if name.is_empty() {
                    if !r.is_empty() {
                        return None;
                    }
                    break;
                }
                let (value, r) = cstr_utf8(r)?;
                params.push((name.to_owned(), value.to_owned()));
                rest = r;
            }
            Some(StartupRequest::Startup {
                version: code,
                params,
            })
        }
    }
}

/// Query: the SQL text (without its NUL).
pub fn query_text(body: &[u8]) -> Option<&[u8]> {
    cstr(body).map(|(s, _)| s)
}

/// Parse: (statement name, query text, the rest: parameter type count and oids).
pub fn parse(body: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (name, rest) = cstr(body)?;
    let (query, rest) = cstr(rest)?;
    Some((name, query, rest))
}

/// Bind: (portal name, statement name, the rest).
pub fn bind(body: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (portal, rest) = cstr(body)?;
    let (stmt, rest) = cstr(rest)?;
    Some((portal, stmt, rest))
}

/// One parameter of a Bind: its format code (0 text, 1 binary) and value (None: NULL).
pub type BindParam<'a> = (i16, Option<&'a [u8]>);

/// The parameters of a Bind (the part after the portal and statement names), and the
/// result format codes that follow them, as written.
pub fn bind_params(rest: &[u8]) -> Option<(Vec<BindParam<'_>>, &[u8])> {
    let n = be_i16(rest)? as usize;
    let codes: Vec<i16> = (0..n)
        .map(|i| be_i16(rest.get(2 + 2 * i..)?))
        .collect::<Option<_>>()?;
    let mut at = 2 + 2 * n;
    let count = be_i16(rest.get(at..)?)? as usize;
    at += 2;
    let mut params = Vec::with_capacity(count);
    for i in 0..count {
        let code = match codes.len() {
            0 => 0,
            1 => codes[0],
            _ => *codes.get(i)?,
        };
        let len = be_i32(rest.get(at..)?)?;
        at += 4;
        let value = if len < 0 {
            None
        } else {
            let v = rest.get(at..at + len as usize)?;
            at += len as usize;
            Some(v)
        };
        params.push((code, value));
    }
    Some((params, rest.get(at..)?))
}

/// Describe and Close: (kind b'S' statement or b'P' portal, name).
pub fn target(body: &[u8]) -> Option<(u8, &[u8])> {
    let kind = *body.first()?;
    if kind != b'S' && kind != b'P' {
        return None;
    }
    let (name, rest) = cstr(&body[1..])?;
    rest.is_empty().then_some((kind, name))
}

/// ReadyForQuery: the transaction status byte (b'I', b'T' or b'E').
pub fn ready_status(body: &[u8]) -> Option<u8> {
    match body {
        [s @ (b'I' | b'T' | b'E')] => Some(*s),
        _ => None,
    }
}

/// ParameterStatus: (name, value).
pub fn parameter_status(body: &[u8]) -> Option<(&str, &str)> {
    let (name, rest) = cstr_utf8(body)?;
    let (value, _) = cstr_utf8(rest)?;
    Some((name, value))
}

/// BackendKeyData: (process id, secret key).
pub fn backend_key(body: &[u8]) -> Option<(i32, i32)> {
    Some((be_i32(body)?, be_i32(body.get(4..)?)?))
}

/// Authentication: (request code, the rest).
pub fn authentication(body: &[u8]) -> Option<(i32, &[u8])> {
    Some((be_i32(body)?, &body[4..]))
}

/// CommandComplete: the command tag, e.g. `SELECT 1`, `COMMIT`.
pub fn command_tag(body: &[u8]) -> Option<&[u8]> {
    query_text(body)
}

/// One field of an ErrorResponse / NoticeResponse, e.g. b'C' (SQLSTATE) or b'M'.
pub fn error_field(body: &[u8], code: u8) -> Option<&str> {
    let mut rest = body;
    while let Some((&c, r)) = rest.split_first() {
        if c == 0 {
            return None;
        }
        let (value, r) = cstr_utf8(r)?;
        if c == code {
            return Some(value);
        }
        rest = r;
    }
    None
}

/// An ErrorResponse body of severity FATAL saying that the server is shutting down or
/// restarting (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now).
pub fn shutting_down(body: &[u8]) -> bool {
    matches!(
        error_field(body, b'V').or_else(|| error_field(body, b'S')),
        Some("FATAL" | "PANIC")
    ) && matches!(error_field(body, b'C'), Some("57P01" | "57P02" | "57P03"))
}

/// Turns an ErrorResponse body of severity FATAL into the same error of severity ERROR
/// (the severity fields change in place: both words have five letters).
pub fn demote_fatal(body: &mut [u8]) {
    let mut at = 0;
    while at < body.len() && body[at] != 0 {
        let code = body[at];
        let start = at + 1;
        let Some(len) = body[start..].iter().position(|&b| b == 0) else {
            return;
        };
        let value = &mut body[start..start + len];
        if matches!(code, b'S' | b'V') && value == b"FATAL" {
            value.copy_from_slice(b"ERROR");
        }
        at = start + len + 1;
    }
}

/// Authentication request codes.
pub mod auth {
    pub const OK: i32 = 0;
    pub const CLEARTEXT: i32 = 3;
    pub const MD5: i32 = 5;
    pub const SASL: i32 = 10;
    pub const SASL_CONTINUE: i32 = 11;
    pub const SASL_FINAL: i32 = 12;
}

/// The mechanisms listed in an AuthenticationSASL body (after the code).
pub fn sasl_mechanisms(rest: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = rest;
    while let Some((m, r)) = cstr(rest) {
        if m.is_empty() {
            break;
        }
        out.push(m);
        rest = r;
    }
    out
}

/// SASLInitialResponse: (mechanism, client data).
pub fn sasl_initial(body: &[u8]) -> Option<(&str, &[u8])> {
    let (mech, rest) = cstr_utf8(body)?;
    let len = be_i32(rest)?;
    let data = &rest[4..];
    if len < 0 {
        return Some((mech, &[]));
    }
    (data.len() == len as usize).then_some((mech, data))
}

#[cfg(test)]
mod bind_tests {
    use super::*;

    #[test]
    fn bind_parameters_are_read() {
        // One text format for all; two values, the second NULL; one result format.
        let rest = [
            0, 1, 0, 0, 0, 2, 0, 0, 0, 2, b'4', b'2', 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 1,
        ];
        let (params, results) = bind_params(&rest).unwrap();
        assert_eq!(params, [(0, Some(&b"42"[..])), (0, None)]);
        assert_eq!(results, [0, 1, 0, 1]);
        assert!(bind_params(&rest[..9]).is_none(), "a truncated value");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use postgres_protocol::message::frontend;

    fn body(buf: &BytesMut) -> &[u8] {
        &buf[5..]
    }

    #[test]
    fn startup_and_specials() {
        let mut b = BytesMut::new();
        frontend::startup_message([("user", "u"), ("database", "d")], &mut b).unwrap();
        assert_eq!(
            startup_request(&b),
            Some(StartupRequest::Startup {
                version: PROTOCOL_3_0,
                params: vec![("user".into(), "u".into()), ("database".into(), "d".into())]
            })
        );
        let mut b = BytesMut::new();
        frontend::ssl_request(&mut b);
        assert_eq!(startup_request(&b), Some(StartupRequest::Ssl));
        let mut b = BytesMut::new();
        frontend::cancel_request(7, -3, &mut b);
        assert_eq!(
            startup_request(&b),
            Some(StartupRequest::Cancel { pid: 7, secret: -3 })
        );
        assert_eq!(startup_request(&[0, 0, 0, 9, 0, 3, 0, 0, b'x']), None);
    }

    #[test]
    fn extended_messages() {
        let mut b = BytesMut::new();
        frontend::parse("s1", "select $1", [23], &mut b).unwrap();
        let (n, q, rest) = parse(body(&b)).unwrap();
        assert_eq!((n, q), (&b"s1"[..], &b"select $1"[..]));
        assert_eq!(rest, &[0, 1, 0, 0, 0, 23]);
        let mut b = BytesMut::new();
        frontend::describe(b'S', "s1", &mut b).unwrap();
        assert_eq!(target(body(&b)), Some((b'S', &b"s1"[..])));
        assert_eq!(target(b"X\0"), None);
        assert_eq!(ready_status(b"T"), Some(b'T'));
        assert_eq!(ready_status(b"Q"), None);
    }

    #[test]
    fn error_fields() {
        let body = b"SERROR\0C28P01\0Mbad password\0\0";
        assert_eq!(error_field(body, b'C'), Some("28P01"));
        assert_eq!(error_field(body, b'M'), Some("bad password"));
        assert_eq!(error_field(body, b'D'), None);
        assert_eq!(error_field(b"Cxx", b'C'), None);
    }
}
