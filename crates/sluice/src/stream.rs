//! A socket that is either plain TCP or TLS, for both sides of the proxy.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub enum Stream {
    Plain(TcpStream),
    TlsServer(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    TlsClient(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }

    /// An idle connection must have nothing to say: false if the peer closed it or sent
    /// something (e.g. a server's FATAL on shutdown).
    pub fn is_quiet(&self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.tcp().try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Reads into `buf`, growing it by `chunk` when it has less than 1 KiB free. A plain
    /// socket is first waited on without a buffer, so that a connection with nothing to
    /// read holds no buffer memory (the caller may drop an empty buffer while it waits);
    /// TLS reads go through rustls, which keeps its own buffer anyway.
    pub fn poll_read_grow(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut bytes::BytesMut,
        chunk: usize,
    ) -> Poll<io::Result<usize>> {
        let grow = |buf: &mut bytes::BytesMut| {
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(chunk);
            }
        };
        match self {
            Stream::Plain(s) => loop {
                std::task::ready!(s.poll_read_ready(cx))?;
                grow(buf);
                match s.try_read_buf(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return Poll::Ready(r),
                }
            },
            _ => {
                grow(buf);
                tokio_util::io::poll_read_buf(Pin::new(self), cx, buf)
            }
        }
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::TlsServer(s) => s.get_ref().0,
            Stream::TlsClient(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Writes all of `buf` and flushes (a TLS stream may hold bytes until flushed).
/// Writes what `encode` produces, best effort (the peer may be gone).
pub async fn send_with(s: &mut Stream, encode: impl FnOnce(&mut bytes::BytesMut)) {
    let mut out = bytes::BytesMut::new();
    encode(&mut out);
    let _ = write_all_flush(s, &out).await;
}

pub async fn write_all_flush(s: &mut Stream, buf: &[u8]) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    s.write_all(buf).await?;
    if s.is_tls() {
        s.flush().await?;
    }
    Ok(())
}
