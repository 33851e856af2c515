//! Feeds arbitrary bytes to the compressed protocol's layer (zlib and zstd, as a server
//! reading a client and as a client reading a server): none may panic, every packet
//! read must span bytes that are there and inflate to no more than its header says,
//! and what the layer writes must read back as it was written.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_wire_mysql::compress::{Algorithm, Framer, HEADER_LEN, Role, header};

fuzz_target!(|data: &[u8]| {
    let Some((&[flags, cap], data)) = data.split_first_chunk::<2>() else {
        return;
    };
    let alg = if flags & 1 == 0 {
        Algorithm::Zlib
    } else {
        Algorithm::Zstd {
            level: i32::from(flags >> 5) + 1,
        }
    };
    let role = if flags & 2 == 0 { Role::Server } else { Role::Client };
    let max = usize::from(cap) << 8;

    // Read: each packet's plain bytes are exactly what its header announced.
    let mut f = Framer::new(alg, role, max);
    let mut out = BytesMut::new();
    let mut rest = data;
    loop {
        let before = out.len();
        match f.decode(rest, &mut out) {
            Ok(Some(n)) => {
                let h = header(rest).expect("a packet has a header");
                assert_eq!(n, HEADER_LEN + h.len);
                assert!(n <= rest.len() && h.len.max(h.plain_len) <= max);
                let got = out.len() - before;
                assert_eq!(got, if h.plain_len == 0 { h.len } else { h.plain_len });
                rest = &rest[n..];
            }
            Ok(None) => break,
            Err(e) => {
                assert_eq!(out.len(), before, "{e}");
                let mut err = BytesMut::new();
                f.encode_error(&e, header(rest), &mut err);
                break;
            }
        }
    }

    // Write the input as plain bytes, read it back with the other role.
    let mut w = Framer::new(alg, Role::Server, 1 << 24);
    let mut wire = BytesMut::new();
    let mut at = 0;
    while at < data.len() {
        let n = w.encode(&data[at..], &mut wire);
        assert!(n > 0);
        at += n;
    }
    let mut r = Framer::new(alg, Role::Server, 1 << 24);
    let mut back = BytesMut::new();
    let mut rest = &wire[..];
    // The reader checks ids: the writer started at 0 like a client's command.
    while let Ok(Some(n)) = r.decode(rest, &mut back) {
        rest = &rest[n..];
    }
    assert!(rest.is_empty());
    assert_eq!(&back[..], data);
});
