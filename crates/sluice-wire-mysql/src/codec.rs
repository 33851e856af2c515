//! Field codecs of the MySQL protocol: fixed-length little-endian integers,
//! length-encoded integers and strings, NUL-terminated strings.
//!
//! Every packet view in this crate reads its payload through [`Reader`], a cursor over a
//! byte slice whose methods return `None` instead of reading past the end, so a short or
//! hostile packet can only make a parse fail. The `put_*` writers append the same
//! encodings to any [`BufMut`] (a `Vec<u8>` or a `BytesMut`).

use bytes::BufMut;

/// A cursor over a packet payload. Each read consumes what it returns; a failed read
/// (too few bytes, a malformed prefix) returns `None` and leaves the cursor unspecified.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next byte, without consuming it.
    pub fn peek(&self) -> Option<u8> {
        self.buf.first().copied()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.buf.split_at_checked(n)?;
        self.buf = tail;
        Some(head)
    }

    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    /// Everything left (`string<EOF>`).
    pub fn take_rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// A fixed-length little-endian unsigned integer of `n <= 8` bytes.
    pub fn uint(&mut self, n: usize) -> Option<u64> {
        if n > 8 {
            return None;
        }
        let bytes = self.take(n)?;
        Some(
            bytes
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
        )
    }

    pub fn u8(&mut self) -> Option<u8> {
        let (&b, tail) = self.buf.split_first()?;
        self.buf = tail;
        Some(b)
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.take(2)?.try_into().ok().map(u16::from_le_bytes)
    }

    pub fn u24(&mut self) -> Option<u32> {
        self.uint(3).map(|v| v as u32)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }

    /// A length-encoded integer. The prefixes 0xFB (NULL in a row) and 0xFF (undefined)
    /// are not integers and return `None`.
    pub fn lenenc(&mut self) -> Option<u64> {
        match self.u8()? {
            b @ 0..=0xFA => Some(u64::from(b)),
            0xFC => self.uint(2),
            0xFD => self.uint(3),
            0xFE => self.uint(8),
            _ => None,
        }
    }

    /// A length-encoded string.
    pub fn lenenc_str(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.lenenc()?).ok()?;
        self.take(n)
    }

    /// A NUL-terminated string, without its NUL (which is consumed).
    pub fn nul_str(&mut self) -> Option<&'a [u8]> {
        let at = memchr::memchr(0, self.buf)?;
        let s = self.take(at)?;
        self.skip(1)?;
        Some(s)
    }

    /// A NUL-terminated string, or everything left when no NUL follows (some servers
    /// omit the NUL after the last field of a packet).
    pub fn nul_str_or_rest(&mut self) -> &'a [u8] {
        match self.nul_str() {
            Some(s) => s,
            None => self.take_rest(),
        }
    }
}

/// The encoded size of `v` as a length-encoded integer.
pub fn lenenc_len(v: u64) -> usize {
    match v {
        0..=0xFA => 1,
        0xFB..=0xFFFF => 3,
        0x1_0000..=0xFF_FFFF => 4,
        _ => 9,
    }
}

pub fn put_lenenc(out: &mut impl BufMut, v: u64) {
    match lenenc_len(v) {
        1 => out.put_u8(v as u8),
        3 => {
            out.put_u8(0xFC);
            out.put_u16_le(v as u16);
        }
        4 => {
            out.put_u8(0xFD);
            out.put_uint_le(v, 3);
        }
        _ => {
            out.put_u8(0xFE);
            out.put_u64_le(v);
        }
    }
}

pub fn put_lenenc_str(out: &mut impl BufMut, s: &[u8]) {
    put_lenenc(out, s.len() as u64);
    out.put_slice(s);
}

/// Writes `s` and a NUL. `s` must not contain a NUL itself.
pub fn put_nul_str(out: &mut impl BufMut, s: &[u8]) {
    out.put_slice(s);
    out.put_u8(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lenenc_boundaries() {
        for (v, enc) in [
            (0u64, &[0x00][..]),
            (0xFA, &[0xFA]),
            (0xFB, &[0xFC, 0xFB, 0x00]),
            (0xFFFF, &[0xFC, 0xFF, 0xFF]),
            (0x1_0000, &[0xFD, 0x00, 0x00, 0x01]),
            (0xFF_FFFF, &[0xFD, 0xFF, 0xFF, 0xFF]),
            (0x100_0000, &[0xFE, 0, 0, 0, 1, 0, 0, 0, 0]),
        ] {
            let mut out = Vec::new();
            put_lenenc(&mut out, v);
            assert_eq!(out, enc, "{v:#x}");
            assert_eq!(lenenc_len(v), enc.len());
            assert_eq!(Reader::new(enc).lenenc(), Some(v));
        }
        assert_eq!(Reader::new(&[0xFB]).lenenc(), None);
        assert_eq!(Reader::new(&[0xFF]).lenenc(), None);
        assert_eq!(Reader::new(&[0xFC, 1]).lenenc(), None);
        assert_eq!(Reader::new(&[0xFE, 1, 2, 3]).lenenc(), None);
    }

    #[test]
    fn strings_and_ints() {
        let buf = b"\x03abcuser\0\x01\x02\x03\x04\x05\x06\x07\x08rest";
        let mut r = Reader::new(buf);
        assert_eq!(r.lenenc_str(), Some(&b"abc"[..]));
        assert_eq!(r.nul_str(), Some(&b"user"[..]));
        assert_eq!(r.u24(), Some(0x030201));
        assert_eq!(r.u8(), Some(4));
        assert_eq!(r.u32(), Some(0x08070605));
        assert_eq!(r.peek(), Some(b'r'));
        assert_eq!(r.nul_str(), None);
        assert_eq!(r.nul_str_or_rest(), b"rest");
        assert!(r.is_empty());
        assert_eq!(r.u16(), None);
        assert_eq!(Reader::new(&[0x05, b'a']).lenenc_str(), None);
        assert_eq!(Reader::new(&[1; 9]).uint(9), None);
    }

    proptest! {
        #[test]
        fn lenenc_round_trips(v in any::<u64>(), s in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut out = Vec::new();
            put_lenenc(&mut out, v);
            put_lenenc_str(&mut out, &s);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.lenenc(), Some(v));
            prop_assert_eq!(r.lenenc_str(), Some(&s[..]));
            prop_assert!(r.is_empty());
        }

        #[test]
        fn reads_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..32), n in 0usize..40) {
            let mut r = Reader::new(&buf);
            let _ = (r.lenenc_str(), r.nul_str(), r.uint(n % 10), r.take(n), r.u64());
        }
    }
}
