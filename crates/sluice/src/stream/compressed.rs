//! The MySQL compressed protocol on a socket: a [`Stream`] variant that the MySQL
//! frontend (towards a client that asked for CLIENT_COMPRESS or zstd) and backend
//! (towards a server configured with `compression`) switch to once the login has ended
//! with its OK. Above it, the relay, the pump and the pool see plain packets as on any
//! other socket; the framing and sequence ids are `sluice_wire_mysql::compress`'s.
//!
//! Reads decompress straight into the caller's buffer. A write compresses one chunk of
//! the caller's bytes into a compressed packet and writes all of it before it reports
//! those bytes written; if the socket is full it says `Pending` and, when called again
//! with the same bytes (as every writer here does), finishes the packet first. So no
//! flush is ever needed beyond the inner stream's own (TLS), and nothing is left behind
//! in this layer when a write has returned.

use super::Stream;
use bytes::{Buf, BytesMut};
use sluice_wire_mysql::compress::{CompressError, Framer, Role, header};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::AsyncWrite;

pub struct Compressed {
    pub(super) inner: Stream,
    framer: Framer,
    /// Compressed bytes read and not yet decoded.
    raw: BytesMut,
    /// Plain bytes decoded for a reader through `AsyncRead`.
    plain: BytesMut,
    /// A compressed packet being written, and the plain bytes it stands for.
    out: BytesMut,
    out_plain: usize,
    /// The peer sent what cannot be read: the error it was told about.
    failed: Option<CompressError>,
}

impl Compressed {
    /// `raw`: bytes already read from `inner` after the login (the first compressed
    /// packets, if the peer was quick).
    pub fn new(inner: Stream, framer: Framer, raw: BytesMut) -> Compressed {
        Compressed {
            inner,
            framer,
            raw,
            plain: BytesMut::new(),
            out: BytesMut::new(),
            out_plain: 0,
            failed: None,
        }
    }

    fn broken(e: &CompressError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e.clone())
    }

    /// Decodes every whole compressed packet in `raw` into `dst`: the plain bytes
    /// added.
    fn decode(&mut self, dst: &mut BytesMut) -> Result<usize, CompressError> {
        let before = dst.len();
        while let Some(n) = self.framer.decode(&self.raw, dst)? {
            self.raw.advance(n);
        }
        Ok(dst.len() - before)
    }

    /// Reads and decodes until at least one plain byte is in `dst` (0: end of stream).
    /// A client whose packets cannot be read gets an ERR (best effort) and the read
    /// fails.
    pub(super) fn poll_read_grow(
        &mut self,
        cx: &mut Context<'_>,
        dst: &mut BytesMut,
        chunk: usize,
    ) -> Poll<io::Result<usize>> {
        if !self.plain.is_empty() {
            let n = self.plain.len();
            dst.extend_from_slice(&self.plain);
            self.plain = BytesMut::new();
            return Poll::Ready(Ok(n));
        }
        loop {
            if let Some(e) = &self.failed {
                let e = Self::broken(e);
                // The ERR goes out first (or the socket fails trying).
                let _ = ready!(self.poll_drain(cx));
                return Poll::Ready(Err(e));
            }
            match self.decode(dst) {
                Ok(0) => {}
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) => {
                    self.fail(e);
                    continue;
                }
            }
            match self.inner.poll_read_grow(cx, &mut self.raw, chunk) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(0)),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // Nothing to read: an idle connection holds no buffer.
                    if self.raw.is_empty() {
                        self.raw = BytesMut::new();
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// The peer's packets cannot be read: a client is told why.
    fn fail(&mut self, e: CompressError) {
        tracing::debug!(error = %e, "unreadable compressed packet");
        if self.framer.role() == Role::Server {
            let bad = header(&self.raw);
            self.framer.encode_error(&e, bad, &mut self.out);
        }
        self.raw = BytesMut::new();
        self.failed = Some(e);
    }

    /// Writes all of `out`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out)) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.out.advance(n),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.out = BytesMut::new();
        Poll::Ready(Ok(()))
    }

    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.plain.is_empty() {
            let mut plain = std::mem::take(&mut self.plain);
            let r = self.poll_read_grow(cx, &mut plain, 16 * 1024);
            self.plain = plain;
            ready!(r)?;
        }
        let n = self.plain.len().min(buf.remaining());
        buf.put_slice(&self.plain[..n]);
        self.plain.advance(n);
        Poll::Ready(Ok(()))
    }

    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = &self.failed {
            let e = Self::broken(e);
            let _ = ready!(self.poll_drain(cx));
            return Poll::Ready(Err(e));
        }
        if self.out_plain > 0 {
            // The packet for these bytes went out in part: finish it.
            ready!(self.poll_drain(cx))?;
            let n = std::mem::take(&mut self.out_plain);
            if buf.len() < n {
                return Poll::Ready(Err(io::Error::other(
                    "bytes of a compressed packet in progress were taken back",
                )));
            }
            return Poll::Ready(Ok(n));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let n = self.framer.encode(buf, &mut self.out);
        self.out_plain = n;
        ready!(self.poll_drain(cx))?;
        self.out_plain = 0;
        Poll::Ready(Ok(n))
    }

    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    pub(super) fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Switches `stream` to the compressed protocol; `raw`: what was read from it past the
/// login's last packet.
pub fn compress(stream: Stream, framer: Framer, raw: BytesMut) -> Stream {
    Stream::Compressed(Box::new(Compressed::new(stream, framer, raw)))
}
