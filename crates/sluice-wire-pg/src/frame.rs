//! Frame reader: finds message boundaries in a byte buffer.
//!
//! A regular message is `tag: u8, len: i32 (including itself), body`. The first message
//! of a connection (startup, SSLRequest, GSSENCRequest, CancelRequest) has no tag. Every
//! length is checked against a cap before any memory is committed to it, so a hostile
//! length can neither allocate nor stall a connection.

/// Why a frame could not be read. Any of these leaves the stream in an unknown state:
/// the connection must be closed after answering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("message length {len} exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("invalid message length {0}")]
    BadLength(i64),
}

/// The header of a tagged message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tag: u8,
    /// Length of the whole frame: tag + length field + body.
    pub frame_len: usize,
}

impl Header {
    pub fn body_len(&self) -> usize {
        self.frame_len - 5
    }
}

/// Reads the header of a tagged message at the start of `buf`, if 5 bytes are there.
pub fn header(buf: &[u8], max: usize) -> Result<Option<Header>, FrameError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as i64;
    if len < 4 {
        return Err(FrameError::BadLength(len));
    }
    let len = len as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(Some(Header {
        tag: buf[0],
        frame_len: len + 1,
    }))
}

/// Length of the complete tagged frame at the start of `buf`, or `None` if more bytes
/// are needed.
pub fn complete_frame(buf: &[u8], max: usize) -> Result<Option<Header>, FrameError> {
    match header(buf, max)? {
        Some(h) if buf.len() >= h.frame_len => Ok(Some(h)),
        _ => Ok(None),
    }
}

/// Length of the complete untagged (startup-phase) frame at the start of `buf`.
pub fn startup_frame(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as i64;
    if len < 8 {
        return Err(FrameError::BadLength(len));
    }
    let len = len as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(if buf.len() >= len { Some(len) } else { None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_headers() {
        let buf = [b'Q', 0, 0, 0, 9, b's', b'e', b'l', 0, b'X'];
        let h = complete_frame(&buf, 1024).unwrap().unwrap();
        assert_eq!(
            h,
            Header {
                tag: b'Q',
                frame_len: 10
            }
        );
        assert_eq!(complete_frame(&buf[..8], 1024).unwrap(), None);
        assert_eq!(complete_frame(&buf[..3], 1024).unwrap(), None);
    }

    #[test]
    fn rejects_bad_lengths() {
        assert_eq!(
            header(&[b'Q', 0, 0, 0, 3], 99),
            Err(FrameError::BadLength(3))
        );
        assert_eq!(
            header(&[b'Q', 0xff, 0xff, 0xff, 0xff], 99),
            Err(FrameError::BadLength(-1))
        );
        assert_eq!(
            header(&[b'Q', 0, 0, 1, 0], 99),
            Err(FrameError::TooLarge { len: 256, max: 99 })
        );
        assert_eq!(
            startup_frame(&[0, 0, 0, 7], 99),
            Err(FrameError::BadLength(7))
        );
    }

    proptest! {
        #[test]
        fn never_panics_and_respects_cap(bytes in proptest::collection::vec(any::<u8>(), 0..64), max in 5usize..1000) {
            if let Ok(Some(h)) = complete_frame(&bytes, max) {
                prop_assert!(h.frame_len <= bytes.len());
                prop_assert!(h.frame_len <= max + 1);
                prop_assert!(h.frame_len >= 5);
            }
            if let Ok(Some(n)) = startup_frame(&bytes, max) {
                prop_assert!(n <= bytes.len() && n <= max && n >= 8);
            }
        }

        #[test]
        fn splits_any_sequence(bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..10)) {
            let mut buf = Vec::new();
            for b in &bodies {
                buf.push(b'd');
                buf.extend_from_slice(&((b.len() + 4) as i32).to_be_bytes());
                buf.extend_from_slice(b);
            }
            let mut rest = &buf[..];
            let mut n = 0;
            while let Some(h) = complete_frame(rest, 1 << 20).unwrap() {
                prop_assert_eq!(h.body_len(), bodies[n].len());
                rest = &rest[h.frame_len..];
                n += 1;
            }
            prop_assert_eq!(n, bodies.len());
            prop_assert!(rest.is_empty());
        }
    }
}

/// PostgreSQL's own bound on a message (1 GiB), applied to messages that stream.
pub const STREAMED_MAX: usize = 1 << 30;

/// One step of reading a stream of tagged frames without holding large ones whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A whole frame is at the start of the buffer (`frame_len` bytes).
    Whole(Header),
    /// Only the 5 header bytes of a large frame; its body follows as chunks.
    Head(Header),
    /// `n` bytes of the body of the last `Head` frame.
    Chunk(usize),
}

/// Walks a byte stream frame by frame. Frames larger than `stream_over` whose tag the
/// caller does not need whole are passed on in pieces, so memory stays bounded by the
/// read buffer whatever the message size (up to the cap).
#[derive(Debug, Default, Clone)]
pub struct Scanner {
    /// (A u32: a frame's length is an Int32, and two scanners sit in every session.)
    skip: u32,
}

impl Scanner {
    /// Bytes of the current streamed frame's body still to come.
    pub fn in_frame(&self) -> bool {
        self.skip > 0
    }

    pub fn next(
        &mut self,
        buf: &[u8],
        max: usize,
        stream_over: usize,
        whole: impl Fn(u8) -> bool,
    ) -> Result<Option<Item>, FrameError> {
        if self.skip > 0 {
            let n = (self.skip as usize).min(buf.len());
            if n == 0 {
                return Ok(None);
            }
            // (n <= skip, a u32.)
            self.skip -= n as u32;
            return Ok(Some(Item::Chunk(n)));
        }
        // Messages that stream through (rows, copy data) are bounded only by the
        // protocol's own limit; everything Sluice holds whole by the configured cap.
        let Some(h) = header(buf, STREAMED_MAX)? else {
            return Ok(None);
        };
        if whole(h.tag) && h.frame_len - 1 > max {
            return Err(FrameError::TooLarge {
                len: h.frame_len - 1,
                max,
            });
        }
        if buf.len() >= h.frame_len {
            return Ok(Some(Item::Whole(h)));
        }
        if h.frame_len > stream_over && !whole(h.tag) {
            // (Under STREAMED_MAX, itself an Int32.)
            self.skip = u32::try_from(h.body_len()).unwrap_or(u32::MAX);
            return Ok(Some(Item::Head(h)));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod scanner_tests {
    use super::*;

    #[test]
    fn streams_large_frames() {
        let mut buf = vec![b'd', 0, 0, 0, 104];
        buf.extend_from_slice(&[7; 50]);
        let mut s = Scanner::default();
        let item = s.next(&buf, 1000, 64, |_| false).unwrap();
        assert_eq!(
            item,
            Some(Item::Head(Header {
                tag: b'd',
                frame_len: 105
            }))
        );
        assert!(s.in_frame());
        assert_eq!(
            s.next(&buf[5..], 1000, 64, |_| false).unwrap(),
            Some(Item::Chunk(50))
        );
        assert_eq!(s.next(&[], 1000, 64, |_| false).unwrap(), None);
        assert_eq!(
            s.next(&[1; 60], 1000, 64, |_| false).unwrap(),
            Some(Item::Chunk(50))
        );
        assert!(!s.in_frame());
        // Frames the caller needs whole wait for all their bytes.
        let mut s = Scanner::default();
        assert_eq!(s.next(&buf, 1000, 64, |t| t == b'd').unwrap(), None);
        // The cap binds messages held whole, not streamed ones.
        let big = [b'd', 0, 1, 0, 0];
        let mut s = Scanner::default();
        assert!(matches!(
            s.next(&big, 1000, 64, |_| false),
            Ok(Some(Item::Head(_)))
        ));
        assert!(Scanner::default().next(&big, 1000, 64, |_| true).is_err());
    }
}
