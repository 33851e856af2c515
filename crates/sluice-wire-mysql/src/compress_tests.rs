use super::*;
use proptest::prelude::*;

const ZSTD: Algorithm = Algorithm::Zstd { level: 3 };

/// The documented example: COM_QUERY `select "012345678901234567890123456789012345"`
/// compressed with zlib, sequence id 0.
const DOC_COMPRESSED: &[u8] = &[
    0x22, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x78, 0x9c, 0xd3, 0x63, 0x60, 0x60, 0x60, 0x2e, 0x4e,
    0xcd, 0x49, 0x4d, 0x2e, 0x51, 0x50, 0x32, 0x30, 0x34, 0x32, 0x36, 0x31, 0x35, 0x33, 0xb7, 0xb0,
    0xc4, 0xcd, 0x52, 0x02, 0x00, 0x0c, 0xd1, 0x0a, 0x6c,
];

fn packets(payloads: &[&[u8]], seq: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = seq;
    for p in payloads {
        packet::write_packet(&mut out, &mut seq, p);
    }
    out
}

fn decode_all(f: &mut Framer, mut buf: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    while let Some(n) = f.decode(buf, &mut out).unwrap() {
        buf = &buf[n..];
    }
    assert!(buf.is_empty(), "{} bytes left", buf.len());
    out.to_vec()
}

#[test]
fn reads_the_documented_example() {
    let mut out = BytesMut::new();
    let h = decode(Algorithm::Zlib, DOC_COMPRESSED, 1 << 20, &mut out)
        .unwrap()
        .unwrap();
    assert_eq!((h.len, h.seq, h.plain_len), (0x22, 0, 0x32));
    let mut query = b"\x03select \"".to_vec();
    query.extend(b"012345678901234567890123456789012345\"");
    assert_eq!(&out[..], &packets(&[&query], 0)[..]);
    // Cut anywhere: not yet a packet.
    for cut in 0..DOC_COMPRESSED.len() {
        assert_eq!(
            decode(Algorithm::Zlib, &DOC_COMPRESSED[..cut], 1 << 20, &mut out),
            Ok(None)
        );
    }
}

#[test]
fn small_or_incompressible_payloads_go_as_they_are() {
    for alg in [Algorithm::Zlib, ZSTD] {
        let mut out = BytesMut::new();
        encode(alg, 7, b"short", &mut out);
        assert_eq!(&out[..], b"\x05\x00\x00\x07\x00\x00\x00short");
        let noise: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut out = BytesMut::new();
        encode(alg, 1, &noise, &mut out);
        let h = header(&out).unwrap();
        if h.plain_len == 0 {
            assert_eq!(&out[HEADER_LEN..], &noise[..]);
        }
        let text = b"abcabcabc".repeat(100);
        let mut out = BytesMut::new();
        encode(alg, 2, &text, &mut out);
        let h = header(&out).unwrap();
        assert_eq!((h.seq, h.plain_len), (2, 900));
        assert!(h.len < 100, "{alg:?} compressed 900 bytes to {}", h.len);
        let mut back = BytesMut::new();
        assert_eq!(decode(alg, &out, 1 << 20, &mut back).unwrap(), Some(h));
        assert_eq!(&back[..], &text[..]);
    }
}

#[test]
fn bad_packets_are_errors() {
    let mut out = BytesMut::new();
    // Not a zlib stream.
    let bad = [5, 0, 0, 0, 60, 0, 0, 1, 2, 3, 4, 5];
    assert!(matches!(
        decode(Algorithm::Zlib, &bad, 1 << 20, &mut out),
        Err(CompressError::Corrupt(_))
    ));
    assert!(matches!(
        decode(ZSTD, &bad, 1 << 20, &mut out),
        Err(CompressError::Corrupt(_))
    ));
    assert!(out.is_empty());
    // A real stream announcing another length, more or less.
    for plain_len in [0x31, 0x33, 0xFF_FFFF] {
        let mut p = DOC_COMPRESSED.to_vec();
        p[4..7].copy_from_slice(&(plain_len as u32).to_le_bytes()[..3]);
        assert!(matches!(
            decode(Algorithm::Zlib, &p, 1 << 24, &mut out),
            Err(CompressError::Corrupt(_))
        ));
    }
    // Lengths over the cap are refused from the header alone.
    assert_eq!(
        decode(Algorithm::Zlib, &[0, 0, 1, 0, 0, 0, 0], 1000, &mut out),
        Err(CompressError::TooLarge {
            len: 65536,
            max: 1000
        })
    );
    assert_eq!(
        decode(
            Algorithm::Zlib,
            &[9, 0, 0, 0, 0xFF, 0xFF, 0xFF],
            1000,
            &mut out
        ),
        Err(CompressError::TooLarge {
            len: 0xFF_FFFF,
            max: 1000
        })
    );
}

#[test]
fn server_role_follows_the_client() {
    let mut f = Framer::new(Algorithm::Zlib, Role::Server, 1 << 20);
    let mut client = Framer::new(Algorithm::Zlib, Role::Client, 1 << 20);
    let mut wire = BytesMut::new();
    let cmd = packets(&[b"\x03SELECT 1"], 0);
    assert_eq!(client.encode(&cmd, &mut wire), cmd.len());
    assert_eq!(decode_all(&mut f, &wire), cmd);
    assert_eq!(f.next_seq(), 1);
    // The answer continues the client's numbering, one id per compressed packet.
    let answer = packets(&[b"\x01", &[b'x'; 100_000], b"\xfe\0\0\x02\0"], 1);
    let mut wire = BytesMut::new();
    let mut at = 0;
    let mut seqs = Vec::new();
    while at < answer.len() {
        let before = wire.len();
        at += f.encode(&answer[at..], &mut wire);
        seqs.push(header(&wire[before..]).unwrap().seq);
    }
    // Whole packets per compressed packet: the long one travels alone.
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(decode_all(&mut client, &wire), answer);
    // The next command starts over; a skipped id is an error.
    let mut wire = BytesMut::new();
    client.encode(&packets(&[b"\x0e"], 0), &mut wire);
    assert_eq!(header(&wire).unwrap().seq, 0);
    decode_all(&mut f, &wire);
    let mut skip = BytesMut::new();
    encode(Algorithm::Zlib, 5, b"\x01\0\0\x01\x0e", &mut skip);
    assert_eq!(
        f.decode(&skip, &mut BytesMut::new()),
        Err(CompressError::OutOfOrder {
            expected: 1,
            got: 5
        })
    );
    let mut err = BytesMut::new();
    f.encode_error(&CompressError::Corrupt("x"), header(&skip), &mut err);
    let h = header(&err).unwrap();
    assert_eq!((h.seq, h.plain_len), (6, 0));
    let (len, seq) = packet::header(&err[HEADER_LEN..]).unwrap();
    assert_eq!((seq, err[HEADER_LEN + 4]), (1, 0xff));
    assert_eq!(HEADER_LEN + 4 + len, err.len());
}

#[test]
fn client_role_starts_each_command_afresh() {
    let mut f = Framer::new(ZSTD, Role::Client, 1 << 20);
    // Two commands in one write (pipelined): two compressed packets, both id 0.
    let two = packets(&[b"\x03SELECT 1"], 0)
        .into_iter()
        .chain(packets(&[b"\x03SELECT 2"], 0))
        .collect::<Vec<_>>();
    let mut wire = BytesMut::new();
    let n = f.encode(&two, &mut wire);
    assert_eq!(n, 13);
    assert_eq!(f.encode(&two[n..], &mut wire), 13);
    let first = header(&wire).unwrap();
    let second = header(&wire[first.frame_len()..]).unwrap();
    assert_eq!((first.seq, second.seq), (0, 0));
    // A LOAD DATA file of 300 packets wraps its ids without starting a command.
    let mut f = Framer::new(Algorithm::Zlib, Role::Client, 1 << 20);
    let mut wire = BytesMut::new();
    f.encode(
        &packets(&[b"\x03LOAD DATA LOCAL INFILE 'x' INTO TABLE t"], 0),
        &mut wire,
    );
    let mut server = Framer::new(Algorithm::Zlib, Role::Server, 1 << 20);
    decode_all(&mut server, &wire);
    let mut wire = BytesMut::new();
    server.encode(&packets(&[b"\xfbx"], 1), &mut wire);
    decode_all(&mut f, &wire);
    let chunks: Vec<Vec<u8>> = (0..300).map(|i| vec![b'a' + (i % 26) as u8; 40]).collect();
    let refs: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
    let file = packets(&refs, 2);
    let mut wire = BytesMut::new();
    let mut at = 0;
    while at < file.len() {
        at += f.encode(&file[at..], &mut wire);
    }
    let mut seqs = Vec::new();
    let mut rest = &wire[..];
    while let Some(h) = header(rest) {
        seqs.push(h.seq);
        rest = &rest[h.frame_len()..];
    }
    assert_eq!(seqs[0], 2);
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
        "{seqs:?}"
    );
    assert_eq!(decode_all(&mut server, &wire), file);
}

#[test]
fn client_role_numbers_answers_as_without_compression() {
    let mut f = Framer::new(Algorithm::Zlib, Role::Client, 1 << 20);
    let mut wire = BytesMut::new();
    f.encode(&packets(&[b"\x03SELECT 1; SELECT 2"], 0), &mut wire);
    // The server renumbers after a flush: the second result's packets carry the
    // compressed id (2) instead of going on from 5.
    let mut wire = BytesMut::new();
    encode(
        Algorithm::Zlib,
        1,
        &packets(&[b"\x01", b"col", b"\xfe", b"row"], 1),
        &mut wire,
    );
    encode(
        Algorithm::Zlib,
        2,
        &packets(&[b"\x01", b"col", b"\xfe", b"row", b"\xfe"], 2),
        &mut wire,
    );
    let plain = decode_all(&mut f, &wire);
    let mut seqs = Vec::new();
    let mut rest = &plain[..];
    while let Some((len, seq)) = packet::header(rest) {
        seqs.push(seq);
        rest = &rest[4 + len..];
    }
    assert_eq!(seqs, (1..=9).collect::<Vec<u8>>());
    // Pipelined commands: each answer starts at 1 again.
    let mut wire = BytesMut::new();
    f.encode(&packets(&[b"\x0e"], 0), &mut wire);
    f.encode(&packets(&[b"\x0e"], 0), &mut wire);
    let mut wire = BytesMut::new();
    encode(
        Algorithm::Zlib,
        1,
        &packets(&[b"\0\0\0\x02\0\0\0"], 1),
        &mut wire,
    );
    encode(
        Algorithm::Zlib,
        1,
        &packets(&[b"\0\0\0\x02\0\0\0"], 1),
        &mut wire,
    );
    let plain = decode_all(&mut f, &wire);
    assert_eq!(plain[3], 1);
    assert_eq!(plain[4 + 7 + 3], 1);
}

#[test]
fn compressed_packets_hold_whole_packets() {
    // Packets of assorted sizes, written as the relay queues them: every compressed
    // packet starts at a packet header, and only a packet longer than a compressed
    // packet can carry is split.
    let sizes = [10usize, 70_000, 5, 30_000, 30_000, 30_000, 0xFF_FFFF, 3, 1];
    let payloads: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'p'; n]).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
    let plain = packets(&refs, 1);
    let mut f = Framer::new(Algorithm::Zlib, Role::Server, 1 << 24);
    let (mut at, mut starts, mut wire) = (0, Vec::new(), BytesMut::new());
    while at < plain.len() {
        starts.push(at);
        at += f.encode(&plain[at..], &mut wire);
    }
    let mut boundaries = vec![0];
    let mut p = 0;
    while let Some((len, _)) = packet::header(&plain[p..]) {
        p += 4 + len;
        boundaries.push(p);
    }
    let split: Vec<usize> = starts
        .iter()
        .copied()
        .filter(|s| !boundaries.contains(s))
        .collect();
    // The only start inside a packet is where the 16 MiB one was cut.
    assert_eq!(split.len(), 1, "{starts:?}");
    assert_eq!(starts.len(), 7, "{starts:?}");
    let mut r = Framer::new(Algorithm::Zlib, Role::Client, 1 << 24);
    r.plain_next = 1;
    assert!(decode_all(&mut r, &wire) == plain);
}

#[test]
fn negotiation() {
    use crate::consts::*;
    assert_eq!(Algorithm::negotiated(0, None), None);
    assert_eq!(
        Algorithm::negotiated(CLIENT_COMPRESS, None),
        Some(Algorithm::Zlib)
    );
    assert_eq!(
        Algorithm::negotiated(CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION_ALGORITHM, Some(9)),
        Some(Algorithm::Zlib)
    );
    assert_eq!(
        Algorithm::negotiated(CLIENT_ZSTD_COMPRESSION_ALGORITHM, Some(9)),
        Some(Algorithm::Zstd { level: 9 })
    );
    assert_eq!(
        Algorithm::negotiated(CLIENT_ZSTD_COMPRESSION_ALGORITHM, Some(0)),
        Some(Algorithm::Zstd { level: 1 })
    );
}

proptest! {
    #[test]
    fn streams_round_trip(
        payloads in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..3000), 1..12),
        zstd in any::<bool>(),
        cuts in proptest::collection::vec(1usize..5000, 1..8),
    ) {
        let alg = if zstd { ZSTD } else { Algorithm::Zlib };
        let refs: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
        let plain = packets(&refs, 1);
        let mut server = Framer::new(alg, Role::Server, 1 << 20);
        // Written in pieces of any size, read back whole, ids as written.
        let mut wire = BytesMut::new();
        let mut at = 0;
        let mut k = 0;
        while at < plain.len() {
            let end = (at + cuts[k % cuts.len()]).min(plain.len());
            let n = server.encode(&plain[at..end], &mut wire);
            prop_assert!(n > 0);
            at += n;
            k += 1;
        }
        let mut client = Framer::new(alg, Role::Client, 1 << 20);
        client.plain_next = 1;
        prop_assert_eq!(decode_all(&mut client, &wire), plain);
    }

    #[test]
    fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..200), max in 0usize..300, zstd in any::<bool>()) {
        let alg = if zstd { ZSTD } else { Algorithm::Zlib };
        for role in [Role::Server, Role::Client] {
            let mut f = Framer::new(alg, role, max);
            let mut out = BytesMut::new();
            let mut rest = &buf[..];
            while let Ok(Some(n)) = f.decode(rest, &mut out) {
                prop_assert!(n >= HEADER_LEN && n <= rest.len());
                rest = &rest[n..];
            }
            let mut w = BytesMut::new();
            let mut at = 0;
            while at < buf.len() {
                at += f.encode(&buf[at..], &mut w);
            }
        }
    }
}
