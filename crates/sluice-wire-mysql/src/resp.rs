//! Generic server responses: OK, ERR and EOF packets, the column count packet that
//! opens a result set, and classification by first byte.
//!
//! A packet's meaning depends on where it stands in a response (a binary row starts with
//! 0x00 like an OK, a text row may start with 0xFE like an EOF), so the `is_*` helpers
//! only say what a packet *can* be; [`crate::track`] decides with the context. The views
//! borrow from the payload and parse what a proxy needs: status flags, counts, the
//! session-state changes and error codes.

use crate::codec::{Reader, put_lenenc, put_lenenc_str};
use crate::consts::{
    CLIENT_DEPRECATE_EOF, CLIENT_OPTIONAL_RESULTSET_METADATA, CLIENT_SESSION_TRACK,
    SERVER_SESSION_STATE_CHANGED, sqlstate,
};
use crate::packet::MAX_PAYLOAD;
use bytes::BufMut;

/// First byte of an OK packet (and of a binary row).
pub const OK: u8 = 0x00;
/// First byte of an ERR packet.
pub const ERR: u8 = 0xFF;
/// First byte of an EOF packet, of the OK that ends rows under `CLIENT_DEPRECATE_EOF`,
/// and of an AuthSwitchRequest.
pub const EOF: u8 = 0xFE;
/// First byte of a LOAD DATA LOCAL INFILE request.
pub const LOCAL_INFILE: u8 = 0xFB;

/// An OK packet (or, inside a binary result set, a row).
pub fn is_ok(payload: &[u8]) -> bool {
    payload.first() == Some(&OK) && payload.len() >= 7
}

pub fn is_err(payload: &[u8]) -> bool {
    payload.first() == Some(&ERR)
}

/// A classic EOF packet: 0xFE and shorter than 9 bytes.
pub fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&EOF) && payload.len() < 9
}

/// The server asks for a local file (LOAD DATA LOCAL INFILE); the rest is the file
/// name.
pub fn is_local_infile(payload: &[u8]) -> bool {
    payload.first() == Some(&LOCAL_INFILE)
}

/// Whether a packet with `first` byte and logical length `len` ends a run of rows (or
/// column definitions): an EOF, or with `CLIENT_DEPRECATE_EOF` an OK packet with a 0xFE
/// header. A text row may start with 0xFE too, but only when it is at least
/// [`MAX_PAYLOAD`] bytes long.
pub fn is_rows_end(first: u8, len: usize, caps: u64) -> bool {
    first == EOF
        && if caps & CLIENT_DEPRECATE_EOF != 0 {
            len < MAX_PAYLOAD
        } else {
            len < 9
        }
}

/// An OK packet (header 0x00, or 0xFE when it ends a result set under
/// `CLIENT_DEPRECATE_EOF`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OkPacket<'a> {
    pub affected_rows: u64,
    pub last_insert_id: u64,
    pub status: u16,
    pub warnings: u16,
    /// Human-readable information (e.g. "Rows matched: 1  Changed: 1").
    pub info: &'a [u8],
    /// The raw session-state information (present with `CLIENT_SESSION_TRACK` when
    /// `SERVER_SESSION_STATE_CHANGED` is set); see [`OkPacket::session_changes`].
    pub session_state: &'a [u8],
}

impl<'a> OkPacket<'a> {
    /// Parses an OK packet. `caps` are the negotiated capabilities (they decide how
    /// `info` is encoded). Accepts a 0xFE header too: the caller knows whether the
    /// packet is an OK.
    pub fn parse(payload: &'a [u8], caps: u64) -> Option<Self> {
        let mut r = Reader::new(payload);
        if !matches!(r.u8()?, OK | EOF) {
            return None;
        }
        let mut ok = OkPacket {
            affected_rows: r.lenenc()?,
            last_insert_id: r.lenenc()?,
            status: r.u16()?,
            warnings: r.u16()?,
            ..Self::default()
        };
        if caps & CLIENT_SESSION_TRACK == 0 {
            ok.info = r.take_rest();
        } else if !r.is_empty() {
            ok.info = r.lenenc_str()?;
            if ok.status & SERVER_SESSION_STATE_CHANGED != 0 {
                ok.session_state = r.lenenc_str()?;
            }
        }
        Some(ok)
    }

    /// The session-state entries: (type, data) where data is the entry's own payload
    /// (for `SESSION_TRACK_SYSTEM_VARIABLES`, two length-encoded strings: name, value;
    /// for `SESSION_TRACK_SCHEMA`, one: the new default database).
    pub fn session_changes(&self) -> SessionChanges<'a> {
        SessionChanges {
            r: Reader::new(self.session_state),
        }
    }
}

/// Iterator over the entries of an OK packet's session-state information. Stops at the
/// first malformed entry.
#[derive(Debug, Clone)]
pub struct SessionChanges<'a> {
    r: Reader<'a>,
}

impl<'a> Iterator for SessionChanges<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let kind = self.r.u8()?;
        match self.r.lenenc_str() {
            Some(data) => Some((kind, data)),
            None => {
                self.r.take_rest();
                None
            }
        }
    }
}

/// An ERR packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrPacket<'a> {
    pub code: u16,
    /// The SQLSTATE, when the packet carries one (`#` marker, protocol 4.1).
    pub sqlstate: Option<&'a [u8]>,
    pub message: &'a [u8],
}

/// The message of an ERR packet (its payload), if it is one.
pub fn err_message(payload: &[u8]) -> Option<String> {
    ErrPacket::parse(payload).map(|e| String::from_utf8_lossy(e.message).into_owned())
}

impl<'a> ErrPacket<'a> {
    pub fn parse(payload: &'a [u8]) -> Option<Self> {
        let mut r = Reader::new(payload);
        if r.u8()? != 0xFF {
            return None;
        }
        let code = r.u16()?;
        let sqlstate = if r.peek() == Some(b'#') {
            r.skip(1)?;
            Some(r.take(5)?)
        } else {
            None
        };
        Some(ErrPacket {
            code,
            sqlstate,
            message: r.take_rest(),
        })
    }
}

/// A classic EOF packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EofPacket {
    pub warnings: u16,
    pub status: u16,
}

impl EofPacket {
    /// Parses a 0xFE packet shorter than 9 bytes. The pre-4.1 form (the single byte)
    /// reads as zero warnings and status.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        if !is_eof(payload) {
            return None;
        }
        let mut r = Reader::new(payload.get(1..)?);
        Some(EofPacket {
            warnings: r.u16().unwrap_or(0),
            status: r.u16().unwrap_or(0),
        })
    }
}

/// The column count of a result set's first packet, and whether column definitions
/// follow (always, unless `metadata_flag` says a "metadata follows" byte is present —
/// `MARIADB_CLIENT_CACHE_METADATA` / `CLIENT_OPTIONAL_RESULTSET_METADATA` — and it is 0).
pub fn column_count(payload: &[u8], metadata_flag: bool) -> Option<(u64, bool)> {
    let mut r = Reader::new(payload);
    let n = r.lenenc()?;
    let follows = !metadata_flag || r.u8()? != 0;
    (n > 0).then_some((n, follows))
}

/// The first packet of a successful COM_STMT_PREPARE answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrepareOk {
    pub statement_id: u32,
    pub columns: u16,
    pub params: u16,
    pub warnings: u16,
    /// Whether parameter and column definitions follow: always, unless the connection
    /// negotiated `CLIENT_OPTIONAL_RESULTSET_METADATA` and the server says no.
    pub metadata_follows: bool,
}

impl PrepareOk {
    pub fn parse(payload: &[u8], caps: u64) -> Option<Self> {
        let mut r = Reader::new(payload);
        if r.u8()? != 0x00 {
            return None;
        }
        let (statement_id, columns, params) = (r.u32()?, r.u16()?, r.u16()?);
        r.skip(1)?;
        let warnings = r.u16().unwrap_or(0);
        let metadata_follows =
            caps & CLIENT_OPTIONAL_RESULTSET_METADATA == 0 || r.u8().is_none_or(|b| b != 0);
        Some(PrepareOk {
            statement_id,
            columns,
            params,
            warnings,
            metadata_follows,
        })
    }
}

/// Writes an ERR packet payload.
pub fn encode_err(out: &mut impl BufMut, code: u16, sqlstate: &[u8; 5], message: &[u8]) {
    debug_assert!(
        !crate::consts::is_client_code(code),
        "client-side code {code}"
    );
    out.put_u8(ERR);
    out.put_u16_le(code);
    out.put_u8(b'#');
    out.put_slice(sqlstate);
    out.put_slice(message);
}

/// Writes an ERR packet payload as a server sends it instead of its greeting, before
/// any capability is agreed: no SQLSTATE (clients would show the marker as part of
/// the message).
pub fn encode_err_before_greeting(out: &mut impl BufMut, code: u16, message: &[u8]) {
    debug_assert!(
        !crate::consts::is_client_code(code),
        "client-side code {code}"
    );
    out.put_u8(ERR);
    out.put_u16_le(code);
    out.put_slice(message);
}

/// Writes an ERR packet payload with the SQLSTATE [`sqlstate`] gives for `code`.
pub fn encode_err_code(out: &mut impl BufMut, code: u16, message: &[u8]) {
    encode_err(out, code, sqlstate(code), message);
}

/// Writes an OK packet payload (header 0x00). With `CLIENT_SESSION_TRACK` in `caps` the
/// info is length-encoded, as such clients expect; an empty info is left out. No
/// session-state information is written, so `SERVER_SESSION_STATE_CHANGED` is cleared
/// from `status`.
pub fn encode_ok(
    out: &mut impl BufMut,
    caps: u64,
    affected_rows: u64,
    last_insert_id: u64,
    status: u16,
    warnings: u16,
    info: &[u8],
) {
    out.put_u8(OK);
    put_lenenc(out, affected_rows);
    put_lenenc(out, last_insert_id);
    out.put_u16_le(status & !SERVER_SESSION_STATE_CHANGED);
    out.put_u16_le(warnings);
    if !info.is_empty() {
        if caps & CLIENT_SESSION_TRACK != 0 {
            put_lenenc_str(out, info);
        } else {
            out.put_slice(info);
        }
    }
}

/// Writes the packet that ends column definitions or rows: a classic EOF, or with
/// `CLIENT_DEPRECATE_EOF` an OK packet with a 0xFE header.
pub fn encode_eof(out: &mut impl BufMut, caps: u64, warnings: u16, status: u16) {
    if caps & CLIENT_DEPRECATE_EOF != 0 {
        // OK header 0xFE, no affected rows, no insert id.
        out.put_slice(&[EOF, 0, 0]);
        out.put_u16_le(status & !SERVER_SESSION_STATE_CHANGED);
        out.put_u16_le(warnings);
    } else {
        out.put_u8(EOF);
        out.put_u16_le(warnings);
        out.put_u16_le(status);
    }
}

/// Column types of the result sets Sluice answers itself (admin console).
pub const TYPE_LONGLONG: u8 = 0x08;
pub const TYPE_DOUBLE: u8 = 0x05;
pub const TYPE_VAR_STRING: u8 = 0xfd;

/// Writes a ColumnDefinition41 payload of a column with no table (`def` catalog), in
/// utf8mb4 for strings and binary for numbers. `caps`: with MariaDB's extended type
/// info agreed, an (empty) extended type info follows the names.
pub fn encode_column_def(out: &mut impl BufMut, caps: u64, name: &[u8], column_type: u8) {
    put_lenenc_str(out, b"def");
    for part in [&b""[..], b"", b""] {
        put_lenenc_str(out, part); // schema, table, original table
    }
    put_lenenc_str(out, name);
    put_lenenc_str(out, name); // original name
    if caps & crate::consts::MARIADB_CLIENT_EXTENDED_TYPE_INFO != 0 {
        put_lenenc_str(out, b"");
    }
    out.put_u8(0x0c); // length of the fixed fields
    let (charset, length, flags, decimals): (u16, u32, u16, u8) = match column_type {
        TYPE_VAR_STRING => (45, 1024, 0, 0x27),
        TYPE_DOUBLE => (63, 22, 0x80, 0x1f),
        _ => (63, 21, 0x80 | 0x20, 0),
    };
    out.put_u16_le(charset);
    out.put_u32_le(length);
    out.put_u8(column_type);
    out.put_u16_le(flags);
    out.put_u8(decimals);
    out.put_u16_le(0); // filler
}

/// Writes a text-protocol row payload (`None` is NULL).
pub fn encode_text_row<'a>(out: &mut impl BufMut, values: impl Iterator<Item = Option<&'a [u8]>>) {
    for v in values {
        match v {
            Some(v) => put_lenenc_str(out, v),
            None => out.put_u8(0xfb),
        }
    }
}

#[cfg(test)]
#[path = "resp_tests.rs"]
mod tests;
