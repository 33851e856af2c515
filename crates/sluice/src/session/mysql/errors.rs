//! Sluice's own errors as a MySQL client sees them: an ERR packet with an error code
//! and SQLSTATE.

use crate::error::{Error, Kind};
use bytes::BytesMut;
use sluice_wire_mysql::{consts, packet, resp};

/// The MySQL error code and SQLSTATE a client sees for one of Sluice's errors. Never
/// a client library's own code (2013 "Lost connection", 2003 "Can't connect"), which
/// MariaDB Connector/C rejects from a server ([`consts::is_client_code`]).
pub fn error_code(e: &Error) -> (u16, &'static str) {
    if e.sqlstate == Some("08001") {
        // No server can take the client's route (no primary, none healthy): the
        // statement never ran.
        return (consts::ER_NO_SERVER, "HY000");
    }
    match e.kind {
        Kind::Auth => (consts::ER_ACCESS_DENIED_ERROR, "28000"),
        Kind::PoolTimeout => (consts::ER_CON_COUNT_ERROR, "08004"),
        Kind::Protocol => (consts::ER_UNKNOWN_COM_ERROR, "08S01"),
        Kind::Unsupported => (1235, "42000"),
        // ER_TABLEACCESS_DENIED_ERROR's code and state, Sluice's own message.
        Kind::Denied => (1142, "42000"),
        Kind::Shutdown => (1053, "08S01"),
        // The server connection under the statement is gone: its outcome is unknown.
        Kind::ServerGone | Kind::Desync | Kind::Io => (consts::ER_CONNECTION_KILLED, "HY000"),
    }
}

/// Queues an ERR packet for `e` with sequence id `seq`.
pub fn queue_error(out: &mut BytesMut, seq: u8, e: &Error) {
    let (code, state) = error_code(e);
    queue_err(out, seq, code, state, &e.message);
}

pub fn queue_err(out: &mut BytesMut, seq: u8, code: u16, state: &str, msg: &str) {
    let mut payload = Vec::new();
    let state: &[u8; 5] = state.as_bytes().try_into().unwrap_or(b"HY000");
    resp::encode_err(&mut payload, code, state, msg.as_bytes());
    let mut seq = seq;
    packet::write_packet(out, &mut seq, &payload);
}

/// Queues the ERR packet a client gets instead of the greeting (sequence id 0).
pub fn queue_error_before_greeting(out: &mut BytesMut, e: &Error) {
    let (code, _) = error_code(e);
    let mut payload = Vec::new();
    resp::encode_err_before_greeting(&mut payload, code, e.message.as_bytes());
    let mut seq = 0;
    packet::write_packet(out, &mut seq, &payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Side;

    #[test]
    fn no_error_carries_a_client_library_code() {
        let kinds = [
            Kind::Auth,
            Kind::PoolTimeout,
            Kind::Protocol,
            Kind::Unsupported,
            Kind::Denied,
            Kind::Shutdown,
            Kind::ServerGone,
            Kind::Desync,
            Kind::Io,
        ];
        for kind in kinds {
            let e = Error::new(kind, Side::Server, "x");
            let unreachable = e.clone().with_sqlstate("08001");
            for e in [e, unreachable] {
                let (code, _) = error_code(&e);
                assert!(!consts::is_client_code(code), "{kind:?}: {code}");
            }
        }
    }
}
