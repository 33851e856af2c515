//! Packet framing: finds packet boundaries in a byte buffer and writes payloads as
//! packets.
//!
//! Every MySQL packet starts with a 4-byte header: the payload length as a 3-byte
//! little-endian integer and a sequence id that counts the packets of one exchange
//! (wrapping at 255; a command starts it at 0). A payload of [`MAX_PAYLOAD`] bytes or
//! more travels as several *physical* packets: all but the last carry exactly
//! `MAX_PAYLOAD` bytes, and the last carries fewer (possibly none). Together they form one
//! *logical* packet. [`logical`] finds a whole logical packet in a buffer without copying
//! it; [`Reassembler`] follows one physical header at a time for callers that stream
//! large packets through instead of holding them whole. Both check the logical size
//! against a cap before any memory is committed to it.

use bytes::BufMut;
use std::borrow::Cow;

pub const HEADER_LEN: usize = 4;
/// The largest payload of one physical packet; a physical packet this long is continued
/// by the next one.
pub const MAX_PAYLOAD: usize = 0xFF_FFFF;

/// Why a packet stream cannot be read further. The connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("packet of at least {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("packet sequence id {got} where {expected} was expected")]
    OutOfOrder { expected: u8, got: u8 },
}

/// The payload length and sequence id of the physical packet at the start of `buf`, if
/// its header is there.
pub fn header(buf: &[u8]) -> Option<(usize, u8)> {
    match *buf {
        [a, b, c, seq, ..] => Some((
            usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16,
            seq,
        )),
        _ => None,
    }
}

/// The size (header included) of the first physical packet in `buf` if all of it is
/// there.
pub fn complete(buf: &[u8]) -> Option<usize> {
    let (len, _) = header(buf)?;
    let n = HEADER_LEN + len;
    (buf.len() >= n).then_some(n)
}

/// Writes one physical packet header. `len` must not exceed [`MAX_PAYLOAD`].
pub fn write_header(out: &mut impl BufMut, len: usize, seq: u8) {
    out.put_uint_le(len.min(MAX_PAYLOAD) as u64, 3);
    out.put_u8(seq);
}

/// Writes `payload` as one logical packet: physical packets numbered from `*seq`, which
/// is left at the id the next packet must carry. A payload that is an exact multiple of
/// [`MAX_PAYLOAD`] (including an empty one) ends with an empty packet.
pub fn write_packet(out: &mut impl BufMut, seq: &mut u8, payload: &[u8]) {
    let mut rest = payload;
    loop {
        let (chunk, tail) = rest.split_at(rest.len().min(MAX_PAYLOAD));
        write_header(out, chunk.len(), *seq);
        out.put_slice(chunk);
        *seq = seq.wrapping_add(1);
        rest = tail;
        if chunk.len() < MAX_PAYLOAD {
            return;
        }
    }
}

/// One physical packet, as seen by [`Reassembler::next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub seq: u8,
    pub payload_len: usize,
    /// The first physical packet of a logical packet.
    pub first: bool,
    /// The last physical packet of a logical packet (shorter than [`MAX_PAYLOAD`]).
    pub last: bool,
    /// Payload bytes of the logical packet up to and including this part; a lower bound
    /// of its size until `last`.
    pub logical_len: usize,
}

impl Part {
    /// Header plus payload.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }
}

/// Follows a packet stream one physical header at a time, grouping physical packets into
/// logical ones, checking their sequence ids and capping their total size.
#[derive(Debug, Clone)]
pub struct Reassembler {
    max: usize,
    /// Payload bytes of the unfinished logical packet so far.
    len: usize,
    /// While inside a logical packet: the sequence id its next part must carry.
    next_seq: Option<u8>,
}

impl Reassembler {
    /// `max`: the largest logical payload accepted.
    pub fn new(max: usize) -> Self {
        Reassembler {
            max,
            len: 0,
            next_seq: None,
        }
    }

    /// Between the parts of a logical packet.
    pub fn in_packet(&self) -> bool {
        self.next_seq.is_some()
    }

    /// Reads the header at the start of `buf`, which must be where the previous part
    /// (if any) ended. The caller then consumes [`Part::frame_len`] bytes, in as many
    /// reads as it likes, before calling again.
    pub fn next(&mut self, buf: &[u8]) -> Result<Option<Part>, PacketError> {
        let Some((payload_len, seq)) = header(buf) else {
            return Ok(None);
        };
        if let Some(expected) = self.next_seq
            && expected != seq
        {
            return Err(PacketError::OutOfOrder { expected, got: seq });
        }
        let logical_len = self.len.saturating_add(payload_len);
        if logical_len > self.max {
            return Err(PacketError::TooLarge {
                len: logical_len,
                max: self.max,
            });
        }
        let part = Part {
            seq,
            payload_len,
            first: self.next_seq.is_none(),
            last: payload_len < MAX_PAYLOAD,
            logical_len,
        };
        if part.last {
            self.len = 0;
            self.next_seq = None;
        } else {
            self.len = logical_len;
            self.next_seq = Some(seq.wrapping_add(1));
        }
        Ok(Some(part))
    }
}

/// A whole logical packet found at the start of a buffer by [`logical`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logical {
    /// Bytes of the buffer it spans, headers included.
    pub frame_len: usize,
    pub payload_len: usize,
    /// Number of physical packets.
    pub parts: usize,
    pub first_seq: u8,
    pub last_seq: u8,
}

/// The logical packet at the start of `buf` if all of it is there. Errors as soon as
/// the headers present show that it exceeds `max` or that its sequence ids skip.
pub fn logical(buf: &[u8], max: usize) -> Result<Option<Logical>, PacketError> {
    let mut r = Reassembler::new(max);
    let mut at = 0;
    let mut parts = 0;
    let mut first_seq = 0;
    loop {
        let Some(part) = r.next(buf.get(at..).unwrap_or_default())? else {
            return Ok(None);
        };
        if part.first {
            first_seq = part.seq;
        }
        at += part.frame_len();
        parts += 1;
        if at > buf.len() {
            return Ok(None);
        }
        if part.last {
            return Ok(Some(Logical {
                frame_len: at,
                payload_len: part.logical_len,
                parts,
                first_seq,
                last_seq: part.seq,
            }));
        }
    }
}

impl Logical {
    /// The payload pieces of the packet in `buf` (the buffer it was found in).
    pub fn payloads<'a>(&self, buf: &'a [u8]) -> Payloads<'a> {
        Payloads {
            rest: buf.get(..self.frame_len).unwrap_or_default(),
        }
    }

    /// The payload of the first physical packet: all of it unless `parts > 1`.
    pub fn head<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.payloads(buf).next().unwrap_or_default()
    }

    /// The whole payload: borrowed from `buf` when it is one physical packet, copied
    /// together otherwise.
    pub fn payload<'a>(&self, buf: &'a [u8]) -> Cow<'a, [u8]> {
        if self.parts == 1 {
            Cow::Borrowed(self.head(buf))
        } else {
            let mut v = Vec::with_capacity(self.payload_len);
            self.payloads(buf).for_each(|p| v.extend_from_slice(p));
            Cow::Owned(v)
        }
    }
}

/// Iterator over the payloads of consecutive physical packets.
#[derive(Debug, Clone)]
pub struct Payloads<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Payloads<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (len, _) = header(self.rest)?;
        let payload = self.rest.get(HEADER_LEN..HEADER_LEN + len)?;
        self.rest = self.rest.get(HEADER_LEN + len..).unwrap_or_default();
        Some(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_headers() {
        let buf = [3, 0, 0, 7, 1, 2, 3, 9];
        assert_eq!(header(&buf), Some((3, 7)));
        assert_eq!(complete(&buf), Some(7));
        assert_eq!(complete(&buf[..6]), None);
        assert_eq!(header(&buf[..3]), None);
        assert_eq!(header(&[0xFF, 0xFF, 0xFF, 0]), Some((MAX_PAYLOAD, 0)));
    }

    #[test]
    fn splits_large_payloads() {
        let mut out = Vec::new();
        let mut seq = 255;
        write_packet(&mut out, &mut seq, &[]);
        assert_eq!(out, [0, 0, 0, 255]);
        assert_eq!(seq, 0);

        for (size, parts) in [(MAX_PAYLOAD - 1, 1), (MAX_PAYLOAD, 2), (MAX_PAYLOAD + 5, 2)] {
            let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
            let mut out = Vec::new();
            let mut seq = 254;
            write_packet(&mut out, &mut seq, &payload);
            assert_eq!(out.len(), size + HEADER_LEN * parts);
            assert_eq!(seq, (254 + parts as u16) as u8);
            let l = logical(&out, 1 << 30).unwrap().unwrap();
            assert_eq!(
                l,
                Logical {
                    frame_len: out.len(),
                    payload_len: size,
                    parts,
                    first_seq: 254,
                    last_seq: (253 + parts as u16) as u8,
                }
            );
            assert!(*l.payload(&out) == payload[..]);
            assert_eq!(l.head(&out).len(), size.min(MAX_PAYLOAD));
            // Incomplete anywhere: not yet a logical packet.
            for cut in [3, 4, MAX_PAYLOAD, out.len() - 1] {
                assert_eq!(logical(&out[..cut.min(out.len() - 1)], 1 << 30), Ok(None));
            }
            // The cap binds the whole logical packet, as soon as the headers show it.
            assert!(matches!(
                logical(&out, size - 1),
                Err(PacketError::TooLarge { .. })
            ));
            assert_eq!(
                logical(&out[..4], MAX_PAYLOAD - 1).is_err(),
                size >= MAX_PAYLOAD
            );
        }
    }

    #[test]
    fn reassembler_checks_sequence_and_cap() {
        let mut r = Reassembler::new(1 << 30);
        let full = [0xFF, 0xFF, 0xFF, 3];
        let p = r.next(&full).unwrap().unwrap();
        assert!(p.first && !p.last && r.in_packet());
        assert_eq!(p.frame_len(), HEADER_LEN + MAX_PAYLOAD);
        assert_eq!(
            r.next(&[1, 0, 0, 9]),
            Err(PacketError::OutOfOrder {
                expected: 4,
                got: 9
            })
        );
        let p = r.next(&[1, 0, 0, 4]).unwrap().unwrap();
        assert!(!p.first && p.last && !r.in_packet());
        assert_eq!(p.logical_len, MAX_PAYLOAD + 1);
        assert_eq!(r.next(&[1, 0]), Ok(None));
        let mut r = Reassembler::new(10);
        assert_eq!(
            r.next(&[11, 0, 0, 0]),
            Err(PacketError::TooLarge { len: 11, max: 10 })
        );
        assert!(r.next(&[10, 0, 0, 0]).unwrap().is_some());
    }

    proptest! {
        #[test]
        fn finds_every_packet(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 1..8), cut in 0usize..500) {
            let mut buf = Vec::new();
            let mut seq = 0;
            for p in &payloads {
                write_packet(&mut buf, &mut seq, p);
            }
            let mut rest = &buf[..];
            for p in &payloads {
                let l = logical(rest, 100).unwrap().unwrap();
                prop_assert_eq!(l.payload(rest), &p[..]);
                prop_assert_eq!(complete(rest), Some(l.frame_len));
                rest = &rest[l.frame_len..];
            }
            prop_assert!(rest.is_empty());
            // A truncated buffer yields the first packet or nothing, never garbage.
            let cut = cut.min(buf.len());
            if let Some(l) = logical(&buf[..cut], 100).unwrap() {
                prop_assert_eq!(l.payload(&buf), &payloads[0][..]);
            } else {
                prop_assert!(cut < HEADER_LEN + payloads[0].len());
            }
        }

        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..64), max in 0usize..100) {
            if let Ok(Some(l)) = logical(&buf, max) {
                prop_assert!(l.frame_len <= buf.len() && l.payload_len <= max);
                let _ = l.payload(&buf);
            }
        }
    }
}
