use super::*;
use proptest::prelude::*;

#[test]
fn lines_end_at_lf_within_the_limit() {
    assert_eq!(line_end(b"P\t1\tdb", 100), Ok(None));
    assert_eq!(line_end(b"P\t1\n1\t=", 100), Ok(Some(3)));
    assert_eq!(line_end(b"0123456789", 9), Err(LineTooLong { limit: 9 }));
    // Exactly at the limit, the LF may be the byte after it.
    assert_eq!(line_end(b"012345678\n", 9), Ok(Some(9)));
    assert_eq!(line_end(b"012345678", 9), Ok(None));
}

#[test]
fn crlf_ends_a_line_too() {
    let buf = b"1\t=\r\n\r\n";
    assert_eq!(line(buf, 4), b"1\t=");
    // A line of just CR keeps it.
    assert_eq!(line(&buf[5..], 1), b"\r");
    assert_eq!(line(b"x\n", 1), b"x");
}

#[test]
fn tokens_split_at_tabs_keeping_empty_ones() {
    let t: Vec<&[u8]> = tokens(b"1\t=\t1\t\tx\t").collect();
    assert_eq!(t, [&b"1"[..], b"=", b"1", b"", b"x", b""]);
    assert_eq!(tokens(b"").collect::<Vec<_>>(), [&b""[..]]);
}

#[test]
fn values_decode_and_encode() {
    assert_eq!(decode(b"\0"), Value::Null);
    assert_eq!(decode(b""), Value::Str(Cow::Borrowed(b"")));
    assert_eq!(decode(b"a\x01\x43b").as_bytes(), Some(&b"a\x03b"[..]));
    // Any byte from 0x40 up may follow the escape; a smaller one, or none, cuts the
    // value short, as the reference does.
    assert_eq!(&*unescape(b"\x01\x7a"), b":");
    assert_eq!(&*unescape(b"ab\x01"), b"ab");
    assert_eq!(&*unescape(b"ab\x01\x20cd"), b"ab");
    // Only the raw single 0x00 is NULL; an escaped one is a string.
    assert_eq!(decode(b"\x01\x40").as_bytes(), Some(&b"\0"[..]));
    let mut out = Vec::new();
    encode(&mut out, Some(b"a\x03\x00b\x10"));
    assert_eq!(out, b"a\x01\x43\x01\x40b\x10");
    out.clear();
    encode(&mut out, None);
    assert_eq!(out, b"\0");
}

#[test]
fn answers_are_lines() {
    let mut out = Vec::new();
    Answer::start(&mut out, 0, 2)
        .value(Some(b"1"))
        .value(None)
        .value(Some(b""))
        .value(Some(b"\t"))
        .end();
    // A TAB inside a value is escaped like every byte below 0x10.
    assert_eq!(out, b"0\t2\t1\t\0\t\t\x01\x49\n");
    out.clear();
    error(&mut out, 2, Some("op"));
    error(&mut out, 3, None);
    assert_eq!(out, b"2\t1\top\n3\t1\n");
}

proptest! {
    #[test]
    fn encoding_round_trips(s in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut out = Vec::new();
        encode(&mut out, Some(&s));
        // No separator survives inside an encoded value.
        prop_assert!(!out.contains(&TAB) && !out.contains(&LF));
        let raw: Vec<&[u8]> = tokens(&out).collect();
        prop_assert_eq!(raw.len(), 1);
        let v = decode(raw[0]);
        prop_assert_eq!(v.as_bytes(), Some(&s[..]));
    }
}
