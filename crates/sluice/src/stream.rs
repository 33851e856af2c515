//! A socket that is either plain TCP or TLS, for both sides of the proxy, and, for
//! MySQL connections that agreed on it, the compressed protocol over either
//! ([`compressed`]).

mod compressed;
pub mod polls;
mod records;
pub mod spare;
mod tls;
pub use compressed::compress;
pub use tls::{Acceptor, ServerTls};

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub enum Stream {
    Plain(TcpStream),
    TlsServer(Box<ServerTls>),
    TlsClient(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// MySQL's compressed protocol over a plain or TLS stream.
    Compressed(Box<compressed::Compressed>),
}

impl Stream {
    pub fn is_tls(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Compressed(c) => c.inner.is_tls(),
            _ => true,
        }
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
    /// a client's TLS connection makes it only once it has application bytes.
    pub fn poll_read_grow<B: ReadInto + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut B,
        chunk: usize,
    ) -> Poll<io::Result<usize>> {
        let grow = |buf: &mut bytes::BytesMut| {
            if buf.capacity() == 0 {
                *buf = spare::buf();
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(chunk);
            }
        };
        match self {
            Stream::Plain(s) => loop {
                std::task::ready!(s.poll_read_ready(cx))?;
                let buf = buf.buf();
                grow(buf);
                match read_ready(s, buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return Poll::Ready(r),
                }
            },
            Stream::Compressed(c) => c.poll_read_grow(cx, buf.buf(), chunk),
            Stream::TlsServer(s) => s.poll_read_grow(cx, buf, chunk),
            Stream::TlsClient(_) => {
                let buf = buf.buf();
                grow(buf);
                tokio_util::io::poll_read_buf(Pin::new(self), cx, buf)
            }
        }
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::TlsServer(s) => s.tcp(),
            Stream::TlsClient(s) => s.get_ref().0,
            Stream::Compressed(c) => c.inner.tcp(),
        }
    }
}

/// Says goodbye on a server connection (`bye`: the protocol's Terminate / COM_QUIT) and
/// closes it; `keep` (the connection's place in the server's budget) is let go once the
/// server has closed its end, or after two seconds, so that a connection counted as
/// closed no longer counts against the server's own limit either (a server frees its
/// slot as its backend exits, a little after the goodbye).
pub fn close_after_eof<K: Send + 'static>(mut stream: Stream, bye: Vec<u8>, keep: K) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let wait = async {
            stream.write_all(&bye).await?;
            stream.flush().await?;
            let mut b = [0u8; 512];
            while stream.read(&mut b).await? > 0 {}
            Ok::<_, io::Error>(())
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), wait).await;
        drop(keep);
    });
}

/// A client's socket as another task may end it (KILL, pg_terminate_backend): its
/// descriptor, not a duplicate (ten thousand clients must not hold twenty thousand
/// descriptors). The session clears it before its socket is closed (the relay holds
/// the session ahead of its IO), and it is only used under its lock, so a descriptor
/// number reused by another socket is never touched.
#[derive(Debug)]
pub struct SocketHandle(parking_lot::Mutex<Option<std::os::fd::RawFd>>);

impl SocketHandle {
    pub fn new(tcp: &TcpStream) -> SocketHandle {
        use std::os::fd::AsRawFd;
        SocketHandle(parking_lot::Mutex::new(Some(tcp.as_raw_fd())))
    }

    /// The socket is about to close: forget it.
    pub fn clear(&self) {
        *self.0.lock() = None;
    }

    /// Shuts the socket down for reading (the session sees its client gone, and may
    /// still write its last word), or both ways.
    pub fn shutdown(&self, both: bool) {
        let fd = self.0.lock();
        if let Some(fd) = *fd {
            let how = if both { libc::SHUT_RDWR } else { libc::SHUT_RD };
            // SAFETY: the descriptor is the client's open socket: the session clears it
            // (under this lock) before the socket is closed.
            unsafe {
                libc::shutdown(fd, how);
            }
        }
    }
}

/// A buffer [`Stream::poll_read_grow`] reads into, asked for only once there is
/// something to read (a session's buffer may be made on first use).
pub trait ReadInto {
    fn buf(&mut self) -> &mut bytes::BytesMut;
}

impl ReadInto for bytes::BytesMut {
    fn buf(&mut self) -> &mut bytes::BytesMut {
        self
    }
}

/// Reads what a socket that polled readable has into `buf`'s spare room. A read that
/// leaves room unfilled has drained the socket, so its readiness is cleared as well
/// (as tokio's own `poll_read` does): the next wait goes straight to the reactor
/// instead of first trying a read that can only say `WouldBlock`, which would cost a
/// system call per message.
pub fn read_ready(s: &TcpStream, buf: &mut bytes::BytesMut) -> io::Result<usize> {
    let room = buf.capacity() - buf.len();
    let mut got = None;
    let r = s.try_io(tokio::io::Interest::READABLE, || {
        let n = s.try_read_buf(buf)?;
        got = Some(n);
        if n > 0 && n < room {
            // Not an error: tells tokio to clear the readiness it saw.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    });
    match (r, got) {
        (_, Some(n)) => Ok(n),
        (r, None) => r,
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
            Stream::TlsServer(s) => s.poll_read(cx, buf),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Compressed(c) => c.poll_read(cx, buf),
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
            Stream::TlsServer(s) => s.poll_write(cx, buf),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Compressed(c) => c.poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::TlsServer(s) => s.poll_flush(cx),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Compressed(c) => c.poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::TlsServer(s) => s.poll_shutdown(cx),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Compressed(c) => c.poll_shutdown(cx),
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
