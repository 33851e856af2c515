//! Feeds arbitrary bytes to the MySQL packet splitter, the connection-phase parsers, the
//! response views and the response tracker: none may panic, the splitter must account
//! for every byte, and a payload written as packets must read back whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire_mysql::consts::*;
use sluice_wire_mysql::handshake::{
    AuthMoreData, AuthSwitchRequest, HandshakeResponse41, HandshakeV10, SslRequest,
};
use sluice_wire_mysql::resp::{self, EofPacket, ErrPacket, OkPacket, PrepareOk};
use sluice_wire_mysql::track::{HEAD_LEN, Tracker};
use sluice_wire_mysql::{Reassembler, packet};

fuzz_target!(|data: &[u8]| {
    let Some((&[flags, cut], data)) = data.split_first_chunk::<2>() else {
        return;
    };
    // The capabilities that change packet shapes, chosen by the first byte.
    let caps = [
        CLIENT_DEPRECATE_EOF,
        CLIENT_SESSION_TRACK,
        MARIADB_CLIENT_CACHE_METADATA,
        CLIENT_OPTIONAL_RESULTSET_METADATA,
        MARIADB_CLIENT_PROGRESS,
        CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
    ]
    .iter()
    .enumerate()
    .filter(|(i, _)| flags & (1 << i) != 0)
    .fold(CLIENT_PROTOCOL_41, |acc, (_, c)| acc | c);

    let _ = HandshakeV10::parse(data).map(|hs| hs.encode(&mut Vec::new()));
    let _ = HandshakeResponse41::parse(data).map(|r| {
        r.encode(&mut Vec::new());
        r.attr_pairs().count()
    });
    let _ = SslRequest::parse(data);

    // Walk the stream packet by packet; every logical packet is a server answer, or a
    // client command when nothing is in flight.
    let mut tracker = Tracker::new(caps);
    let mut r = Reassembler::new(1 << 16);
    let mut at = 0usize;
    let mut logical = Vec::new();
    while let Ok(Some(part)) = r.next(data.get(at..).unwrap_or_default()) {
        let end = at + part.frame_len();
        let Some(payload) = data.get(at + packet::HEADER_LEN..end) else {
            break;
        };
        at = end;
        logical.extend_from_slice(payload);
        if !part.last {
            continue;
        }
        let p = std::mem::take(&mut logical);
        let _ = OkPacket::parse(&p, caps).map(|ok| ok.session_changes().count());
        let _ = (
            ErrPacket::parse(&p),
            EofPacket::parse(&p),
            PrepareOk::parse(&p, caps),
        );
        let _ = (AuthSwitchRequest::parse(&p), AuthMoreData::parse(&p));
        let _ = resp::column_count(&p, flags & 1 != 0);
        if tracker.is_idle() {
            tracker.expect(p.first().copied().unwrap_or(COM_QUERY));
        } else {
            let n = p.len().min(HEAD_LEN + usize::from(cut));
            if tracker
                .on_packet(p.get(..n).unwrap_or_default(), p.len())
                .is_err()
            {
                tracker.clear();
            }
        }
        // Writing the payload back as packets and reading it again gives it whole.
        let mut out = Vec::new();
        packet::write_packet(&mut out, &mut 0, &p);
        let l = packet::logical(&out, 1 << 16).ok().flatten();
        assert!(l.is_some_and(|l| l.frame_len == out.len() && *l.payload(&out) == p[..]));
    }
    assert!(at <= data.len());
});
