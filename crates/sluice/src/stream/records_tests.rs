//! The record layer against a peer made of the same parts with the roles swapped, for
//! what a real client does not send: padding, floods of key updates, alerts,
//! renegotiation, records cut anywhere. (tls_tests.rs runs it against rustls's
//! client, which checks that the keys and their updates are TLS's own.)

use super::*;
use rustls::crypto::cipher::{AeadKey, Iv};

fn secret(b: u8) -> Secret {
    Secret::new(&[b; 48]).unwrap()
}

fn keys13(s: &Secret) -> ConnectionTrafficSecrets {
    let (key, iv) = s.keys(Cipher::Aes256Gcm).unwrap();
    ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from(key),
        iv: Iv::new(iv),
    }
}

/// A TLS 1.3 end writing under secret `tx`'s keys and reading under `rx`'s.
fn end13(tx: u8, rx: u8) -> Records {
    let keys = ExtractedSecrets {
        tx: (0, keys13(&secret(tx))),
        rx: (0, keys13(&secret(rx))),
    };
    Records::new(keys, 1 << 24, Some((Some(secret(rx)), Some(secret(tx))))).unwrap()
}

/// A TLS 1.3 connection's two ends: the server's, and the client's (its reads are
/// the server's writes).
fn pair13() -> (Records, Records) {
    (end13(2, 1), end13(1, 2))
}

fn pair12() -> (Records, Records) {
    let keys = |b: u8| ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from([b; 32]),
        iv: Iv::new([b; 12]),
    };
    let server = ExtractedSecrets {
        tx: (0, keys(2)),
        rx: (0, keys(1)),
    };
    let client = ExtractedSecrets {
        tx: (0, keys(1)),
        rx: (0, keys(2)),
    };
    (
        Records::new(server, 1 << 24, None).unwrap(),
        Records::new(client, 1 << 24, None).unwrap(),
    )
}

/// A record from `from` of `typ` (the inner type under TLS 1.3) with `padding` zeros.
fn record(from: &mut Records, typ: u8, content: &[u8], padding: usize) -> BytesMut {
    let mut inner = content.to_vec();
    if from.tls13 {
        inner.push(typ);
        inner.extend(std::iter::repeat_n(0, padding));
    }
    let ctx = from.tx.context().unwrap();
    let (seq, nonce) = from.tx.next().unwrap();
    let explicit = if from.explicit { EXPLICIT } else { 0 };
    let len = explicit + inner.len() + TAG;
    let outer = if from.tls13 { APPLICATION_DATA } else { typ };
    let header = [outer, 3, 3, (len >> 8) as u8, len as u8];
    let aad = tls12_aad(seq, typ, [3, 3], inner.len());
    let tag = ctx
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(if from.tls13 { &header[..] } else { &aad[..] }),
            &mut inner,
        )
        .unwrap();
    let mut out = BytesMut::from(&header[..]);
    if from.explicit {
        out.extend_from_slice(&nonce[4..]);
    }
    out.extend_from_slice(&inner);
    out.extend_from_slice(tag.as_ref());
    out
}

/// What `to` opens of `bytes`, fed in pieces of `piece` bytes.
fn open_in_pieces(to: &mut Records, bytes: &[u8], piece: usize) -> Result<(Vec<u8>, bool), Fatal> {
    let (mut incoming, mut plain) = (BytesMut::new(), BytesMut::new());
    for p in bytes.chunks(piece) {
        incoming.extend_from_slice(p);
        if to.open(&mut incoming, &mut plain)? {
            return Ok((plain.to_vec(), true));
        }
    }
    assert!(incoming.is_empty(), "a record left half read");
    Ok((plain.to_vec(), false))
}

fn alert_of(r: Result<(Vec<u8>, bool), Fatal>) -> Option<u8> {
    r.expect_err("an error").alert
}

#[test]
fn records_cut_anywhere_open_whole_both_ways_and_versions() {
    for (mut server, mut client) in [pair13(), pair12()] {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let mut out = BytesMut::new();
        client.seal(&data, &mut out).unwrap();
        assert_eq!(
            out.len(),
            data.len() + 3 * (HEADER + TAG) + if server.tls13 { 3 } else { 24 }
        );
        for piece in [1, 7, 5000, out.len()] {
            let (mut s, mut c) = if server.tls13 { pair13() } else { pair12() };
            let mut out = BytesMut::new();
            c.seal(&data, &mut out).unwrap();
            assert_eq!(
                open_in_pieces(&mut s, &out, piece).unwrap(),
                (data.clone(), false)
            );
        }
        let mut back = BytesMut::new();
        server.seal(b"answer", &mut back).unwrap();
        assert_eq!(open_in_pieces(&mut client, &back, 3).unwrap().0, b"answer");
        // A byte changed anywhere fails the record.
        let mut out = BytesMut::new();
        client.seal(b"statement", &mut out).unwrap();
        out[HEADER + 3] ^= 1;
        assert_eq!(
            alert_of(open_in_pieces(&mut server, &out, 100)),
            Some(BAD_RECORD_MAC)
        );
    }
}

#[test]
fn tls13_padding_is_taken_off_and_a_record_of_zeros_refused() {
    let (mut server, mut client) = pair13();
    let r = record(&mut client, APPLICATION_DATA, b"padded", 300);
    assert_eq!(open_in_pieces(&mut server, &r, 64).unwrap().0, b"padded");
    let r = record(&mut client, 0, b"", 20);
    assert_eq!(
        alert_of(open_in_pieces(&mut server, &r, 64)),
        Some(UNEXPECTED_MESSAGE)
    );
    // Longer than TLS 1.3 allows, refused from its header.
    let (mut server, _) = pair13();
    let header = [APPLICATION_DATA, 3, 3, 0x41, 0x01];
    assert_eq!(
        alert_of(open_in_pieces(&mut server, &header, 5)),
        Some(RECORD_OVERFLOW)
    );
    // Not application data on the outside, or another version.
    for header in [
        [HANDSHAKE, 3, 3, 0, 20],
        [20, 3, 3, 0, 1],
        [APPLICATION_DATA, 2, 0, 0, 20],
    ] {
        let (mut server, _) = pair13();
        assert!(open_in_pieces(&mut server, &header, 5).is_err());
    }
}

#[test]
fn a_key_update_moves_both_ways_once_however_many_asks() {
    let (mut server, mut client) = pair13();
    let mut wire = BytesMut::new();
    for _ in 0..3 {
        // Asked three times: each moves the client's key, one answer comes back.
        wire.extend_from_slice(&record(
            &mut client,
            HANDSHAKE,
            &[KEY_UPDATE, 0, 0, 1, 1],
            0,
        ));
        client.tx.update().unwrap();
    }
    client.seal(b"after", &mut wire).unwrap();
    assert_eq!(open_in_pieces(&mut server, &wire, 9).unwrap().0, b"after");
    let mut back = BytesMut::new();
    server.seal(b"one", &mut back).unwrap();
    server.seal(b"two", &mut back).unwrap();
    // The answer, then two records under the next key.
    assert_eq!(server.sealed(), 2);
    assert_eq!(open_in_pieces(&mut client, &back, 1).unwrap().0, b"onetwo");
    // Nothing but key updates, without end: refused.
    let (mut server, mut client) = pair13();
    let mut wire = BytesMut::new();
    for _ in 0..=MAX_QUIET {
        wire.extend_from_slice(&record(
            &mut client,
            HANDSHAKE,
            &[KEY_UPDATE, 0, 0, 1, 0],
            0,
        ));
        client.tx.update().unwrap();
    }
    assert_eq!(
        alert_of(open_in_pieces(&mut server, &wire, 4096)),
        Some(UNEXPECTED_MESSAGE)
    );
    // Other handshake messages, a bad KeyUpdate.
    for (message, alert) in [
        (&[4u8, 0, 0, 1, 0][..], UNEXPECTED_MESSAGE),
        (&[KEY_UPDATE, 0, 0, 1, 2], ILLEGAL_PARAMETER),
        (&[KEY_UPDATE, 0, 0, 2, 0, 0], DECODE_ERROR),
        (&[1; 40], UNEXPECTED_MESSAGE),
    ] {
        let (mut server, mut client) = pair13();
        let r = record(&mut client, HANDSHAKE, message, 0);
        assert_eq!(alert_of(open_in_pieces(&mut server, &r, 100)), Some(alert));
    }
}

#[test]
fn alerts_close_pass_or_fail_as_each_version_says() {
    // (version 1.3?, alert, closes: Some(true), passes: Some(false), fails: None)
    for (tls13, alert, outcome) in [
        (true, [1, CLOSE_NOTIFY], Some(true)),
        (true, [2, CLOSE_NOTIFY], Some(true)),
        (true, [1, USER_CANCELED], Some(false)),
        (true, [1, 42], None),
        (false, [1, CLOSE_NOTIFY], Some(true)),
        (false, [1, USER_CANCELED], Some(false)),
        (false, [1, 42], Some(false)),
        (false, [2, USER_CANCELED], None),
        (false, [2, 40], None),
    ] {
        let (mut server, mut client) = if tls13 { pair13() } else { pair12() };
        let mut wire = record(&mut client, ALERT, &alert, 0);
        client.seal(b"more", &mut wire).unwrap();
        match (open_in_pieces(&mut server, &wire, 1000), outcome) {
            // Nothing after a close_notify is read.
            (Ok((plain, true)), Some(true)) => assert!(plain.is_empty()),
            (Ok((plain, false)), Some(false)) => assert_eq!(plain, b"more"),
            (Err(f), None) => assert_eq!(f.alert, None, "the client's own alert is not answered"),
            (r, _) => panic!(
                "{alert:?} under TLS 1.{}: {:?}",
                if tls13 { 3 } else { 2 },
                r.map(|p| p.1)
            ),
        }
    }
    let (mut server, mut client) = pair12();
    let r = record(&mut client, ALERT, &[7, 0], 0);
    assert_eq!(
        alert_of(open_in_pieces(&mut server, &r, 100)),
        Some(ILLEGAL_PARAMETER)
    );
    let r = record(&mut client, ALERT, &[1], 0);
    assert!(open_in_pieces(&mut server, &r, 100).is_err());
}

#[test]
fn tls12_renegotiation_is_refused_and_a_wrong_secret_caught() {
    let (mut server, mut client) = pair12();
    let hello = [1u8; 200];
    let r = record(&mut client, HANDSHAKE, &hello, 0);
    assert_eq!(
        alert_of(open_in_pieces(&mut server, &r, 100)),
        Some(NO_RENEGOTIATION)
    );
    // The secrets caught from rustls's log must give rustls's keys.
    let wrong = Records::new(
        ExtractedSecrets {
            tx: (0, keys13(&secret(2))),
            rx: (0, keys13(&secret(1))),
        },
        1 << 24,
        Some((Some(secret(1)), Some(secret(3)))),
    );
    assert_eq!(wrong.err().map(|f| f.alert), Some(Some(INTERNAL_ERROR)));
}
