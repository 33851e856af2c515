//! Builders for the messages Sluice sends on its own behalf.
//!
//! Most bytes Sluice sends are relayed unchanged; these cover what it says itself: the
//! login exchange towards clients, errors in the client's protocol, responses it answers
//! for a server (e.g. a CloseComplete for a statement it keeps cached) and the messages
//! it injects towards servers (re-prepares, resets, cancels).

use bytes::{BufMut, BytesMut};

/// Appends one tagged message whose body is written by `f`.
pub fn message(buf: &mut BytesMut, tag: u8, f: impl FnOnce(&mut BytesMut)) {
    buf.put_u8(tag);
    let at = buf.len();
    buf.put_i32(0);
    f(buf);
    let len = (buf.len() - at) as i32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn put_cstr(buf: &mut BytesMut, s: &[u8]) {
    buf.put_slice(s);
    buf.put_u8(0);
}

pub fn auth_request(buf: &mut BytesMut, code: i32, data: &[u8]) {
    message(buf, b'R', |b| {
        b.put_i32(code);
        b.put_slice(data);
    });
}

pub fn auth_ok(buf: &mut BytesMut) {
    auth_request(buf, crate::msg::auth::OK, &[]);
}

/// AuthenticationSASL offering the given mechanisms.
pub fn auth_sasl(buf: &mut BytesMut, mechanisms: &[&[u8]]) {
    message(buf, b'R', |b| {
        b.put_i32(crate::msg::auth::SASL);
        for m in mechanisms {
            put_cstr(b, m);
        }
        b.put_u8(0);
    });
}

pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    message(buf, b'S', |b| {
        put_cstr(b, name.as_bytes());
        put_cstr(b, value.as_bytes());
    });
}

pub fn backend_key(buf: &mut BytesMut, pid: i32, secret: i32) {
    message(buf, b'K', |b| {
        b.put_i32(pid);
        b.put_i32(secret);
    });
}

pub fn ready_for_query(buf: &mut BytesMut, status: u8) {
    message(buf, b'Z', |b| b.put_u8(status));
}

pub fn parse_complete(buf: &mut BytesMut) {
    message(buf, b'1', |_| {});
}

pub fn bind_complete(buf: &mut BytesMut) {
    message(buf, b'2', |_| {});
}

pub fn no_data(buf: &mut BytesMut) {
    message(buf, b'n', |_| {});
}

/// ParameterDescription of a statement with no parameters.
pub fn no_parameters(buf: &mut BytesMut) {
    message(buf, b't', |b| b.put_i16(0));
}

pub fn close_complete(buf: &mut BytesMut) {
    message(buf, b'3', |_| {});
}

pub fn command_complete(buf: &mut BytesMut, tag: &str) {
    message(buf, b'C', |b| put_cstr(b, tag.as_bytes()));
}

/// Type OIDs of the columns Sluice answers itself (admin console).
pub const OID_INT8: u32 = 20;
pub const OID_TEXT: u32 = 25;
pub const OID_FLOAT8: u32 = 701;

/// RowDescription of text-format columns, each `(name, type oid)`.
pub fn row_description(buf: &mut BytesMut, columns: &[(&str, u32)]) {
    message(buf, b'T', |b| {
        b.put_i16(columns.len() as i16);
        for (name, oid) in columns {
            put_cstr(b, name.as_bytes());
            b.put_i32(0); // table oid
            b.put_i16(0); // column number
            b.put_u32(*oid);
            b.put_i16(if *oid == OID_TEXT { -1 } else { 8 });
            b.put_i32(-1); // type modifier
            b.put_i16(0); // text format
        }
    });
}

/// DataRow of text values (`None` is NULL).
pub fn data_row<'a>(buf: &mut BytesMut, values: impl ExactSizeIterator<Item = Option<&'a [u8]>>) {
    message(buf, b'D', |b| {
        b.put_i16(values.len() as i16);
        for v in values {
            match v {
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v);
                }
                None => b.put_i32(-1),
            }
        }
    });
}

/// Severity of an error or notice Sluice sends itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }
}

/// ErrorResponse with severity, SQLSTATE and message (the fields every client reads).
pub fn error(buf: &mut BytesMut, severity: Severity, sqlstate: &str, text: &str) {
    message(buf, b'E', |b| {
        for (code, value) in [
            (b'S', severity.as_str()),
            (b'V', severity.as_str()),
            (b'C', sqlstate),
            (b'M', text),
        ] {
            b.put_u8(code);
            put_cstr(b, value.as_bytes());
        }
        b.put_u8(0);
    });
}

/// NoticeResponse (severity NOTICE) with a message.
pub fn notice(buf: &mut BytesMut, text: &str) {
    message(buf, b'N', |b| {
        for (code, value) in [
            (b'S', "NOTICE"),
            (b'V', "NOTICE"),
            (b'C', "00000"),
            (b'M', text),
        ] {
            b.put_u8(code);
            put_cstr(b, value.as_bytes());
        }
        b.put_u8(0);
    });
}

/// Parse with the given statement name, copying query and parameter types verbatim.
pub fn parse(buf: &mut BytesMut, name: &[u8], query: &[u8], param_types: &[u8]) {
    message(buf, b'P', |b| {
        put_cstr(b, name);
        put_cstr(b, query);
        b.put_slice(param_types);
    });
}

/// Bind with a different statement name; everything after it is copied verbatim.
pub fn bind(buf: &mut BytesMut, portal: &[u8], stmt: &[u8], rest: &[u8]) {
    message(buf, b'B', |b| {
        put_cstr(b, portal);
        put_cstr(b, stmt);
        b.put_slice(rest);
    });
}

/// The part of a Bind after the names: parameters (each with its own format code)
/// and the result format codes as they were.
pub fn bind_rest(buf: &mut BytesMut, params: &[(i16, Option<&[u8]>)], results: &[u8]) {
    buf.put_i16(params.len() as i16);
    for (code, _) in params {
        buf.put_i16(*code);
    }
    buf.put_i16(params.len() as i16);
    for (_, v) in params {
        match v {
            Some(v) => {
                buf.put_i32(v.len() as i32);
                buf.put_slice(v);
            }
            None => buf.put_i32(-1),
        }
    }
    buf.put_slice(results);
}

/// Describe or Close (`tag` b'D' or b'C') of a statement or portal.
pub fn target(buf: &mut BytesMut, tag: u8, kind: u8, name: &[u8]) {
    message(buf, tag, |b| {
        b.put_u8(kind);
        put_cstr(b, name);
    });
}

/// Execute of a portal; `max_rows` 0 runs it to completion.
pub fn execute(buf: &mut BytesMut, portal: &[u8], max_rows: i32) {
    message(buf, b'E', |b| {
        put_cstr(b, portal);
        b.put_i32(max_rows);
    });
}

pub fn query(buf: &mut BytesMut, sql: &[u8]) {
    message(buf, b'Q', |b| put_cstr(b, sql));
}

pub fn sync(buf: &mut BytesMut) {
    message(buf, b'S', |_| {});
}

pub fn terminate(buf: &mut BytesMut) {
    message(buf, b'X', |_| {});
}

/// An untagged startup-phase message: StartupMessage with its parameters.
pub fn startup(buf: &mut BytesMut, params: &[(String, String)]) {
    let at = buf.len();
    buf.put_i32(0);
    buf.put_i32(crate::msg::PROTOCOL_3_0);
    for (k, v) in params {
        put_cstr(buf, k.as_bytes());
        put_cstr(buf, v.as_bytes());
    }
    buf.put_u8(0);
    let len = (buf.len() - at) as i32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub fn cancel_request(buf: &mut BytesMut, pid: i32, secret: i32) {
    buf.put_i32(16);
    buf.put_i32(crate::msg::CANCEL_REQUEST);
    buf.put_i32(pid);
    buf.put_i32(secret);
}

pub fn ssl_request(buf: &mut BytesMut) {
    buf.put_i32(8);
    buf.put_i32(crate::msg::SSL_REQUEST);
}

/// PasswordMessage / SASLResponse: tag b'p' with raw data.
pub fn password(buf: &mut BytesMut, data: &[u8]) {
    message(buf, b'p', |b| b.put_slice(data));
}

pub fn sasl_initial(buf: &mut BytesMut, mechanism: &str, data: &[u8]) {
    message(buf, b'p', |b| {
        put_cstr(b, mechanism.as_bytes());
        b.put_i32(data.len() as i32);
        b.put_slice(data);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{frame, msg};

    #[test]
    fn round_trips() {
        let mut b = BytesMut::new();
        error(&mut b, Severity::Error, "53300", "pool exhausted");
        let h = frame::complete_frame(&b, 1 << 20).unwrap().unwrap();
        assert_eq!(h.frame_len, b.len());
        assert_eq!(msg::error_field(&b[5..], b'C'), Some("53300"));
        let mut b = BytesMut::new();
        bind(&mut b, b"", b"sluice_1", b"\0\0\0\0\0\0");
        assert_eq!(msg::bind(&b[5..]).unwrap().1, b"sluice_1");
        let mut b = BytesMut::new();
        startup(&mut b, &[("user".into(), "u".into())]);
        assert!(matches!(
            msg::startup_request(&b),
            Some(msg::StartupRequest::Startup { .. })
        ));
    }
}
