//! TLS towards clients over rustls's unbuffered interface. rustls's buffered connection
//! keeps a record buffer of at least 4 KiB for as long as the connection lives, and a
//! heap chunk per record on each side; here the connection's buffers (records read,
//! records to send, application bytes not yet taken) come from the thread's spares
//! (spare.rs) while bytes pass and go back when they are empty, so an idle TLS client
//! holds rustls's session state (keys, sequence numbers) and nothing else.

use super::spare;
use bytes::{Buf, BytesMut};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, WriteTraffic,
};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Most plaintext bytes encrypted by one write (four full records).
const WRITE_CHUNK: usize = 64 * 1024;
/// Encrypted bytes held unsent before a write waits for the socket.
const HIGH_WATER: usize = 64 * 1024;
/// TLS record header: type, version, length.
const HEADER: usize = 5;

/// Accepts clients' TLS handshakes with one server configuration.
#[derive(Clone)]
pub struct Acceptor(Arc<rustls::ServerConfig>);

impl Acceptor {
    pub fn new(config: Arc<rustls::ServerConfig>) -> Acceptor {
        Acceptor(config)
    }

    /// Runs the server side of a TLS handshake on `tcp`.
    pub async fn accept(&self, tcp: TcpStream) -> io::Result<ServerTls> {
        let conn = UnbufferedServerConnection::new(self.0.clone()).map_err(tls_error)?;
        let mut s = ServerTls {
            io: tcp,
            conn,
            incoming: BytesMut::new(),
            outgoing: BytesMut::new(),
            plain: BytesMut::new(),
            eof: false,
            closing: false,
            failed: None,
        };
        std::future::poll_fn(|cx| s.poll_handshake(cx)).await?;
        Ok(s)
    }
}

/// A client's TLS connection.
pub struct ServerTls {
    io: TcpStream,
    conn: UnbufferedServerConnection,
    /// Records read and not yet processed (a partial record between reads).
    incoming: BytesMut,
    /// Records to send.
    outgoing: BytesMut,
    /// Application bytes received and not yet taken by the reader.
    plain: BytesMut,
    /// The client has closed its side (close_notify, or the end of the stream).
    eof: bool,
    /// Our close_notify is queued.
    closing: bool,
    /// The connection failed (a bad record, a handshake that could not agree).
    failed: Option<io::ErrorKind>,
}

/// Writes a record for [`WriteTraffic`] into the buffer given: `Err(Some(n))` when it
/// needs `n` bytes.
type Writer<'a> = &'a mut dyn FnMut(
    &mut WriteTraffic<'_, ServerConnectionData>,
    &mut [u8],
) -> Result<usize, Option<usize>>;

/// Where processing the records read so far stopped.
#[derive(PartialEq)]
enum Next {
    /// Application data may be sent.
    Write,
    /// The handshake needs more from the client.
    Blocked,
    /// Both sides have closed.
    Closed,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Appends what `f` writes into a buffer of `size` bytes to `out`; `f` answers
/// `Err(Some(n))` when it needs `n` bytes, `Err(None)` when it cannot write.
fn append(
    out: &mut BytesMut,
    mut size: usize,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, Option<usize>>,
) -> io::Result<()> {
    if out.capacity() == 0 {
        *out = spare::buf();
    }
    loop {
        let start = out.len();
        out.resize(start + size, 0);
        match f(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(Some(need)) if need > size => {
                out.truncate(start);
                size = need;
            }
            Err(_) => {
                out.truncate(start);
                return Err(io::Error::other("TLS record could not be written"));
            }
        }
    }
}

fn encode_needs(e: EncodeError) -> Option<usize> {
    match e {
        EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(required_size)
        }
        _ => None,
    }
}

fn encrypt_needs(e: EncryptError) -> Option<usize> {
    match e {
        EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(required_size)
        }
        _ => None,
    }
}

impl ServerTls {
    pub fn tcp(&self) -> &TcpStream {
        &self.io
    }

    /// Bytes of buffer the connection holds (outside rustls's own state).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.incoming.capacity() + self.outgoing.capacity() + self.plain.capacity()
    }

    /// Processes the records read so far: handshake messages are answered (the
    /// answers queued in `outgoing`), application data is moved to `plain`. An error
    /// ends the connection: rustls's alert for it is sent if the socket takes it at
    /// once, and every later call answers the same error.
    fn process(&mut self) -> io::Result<Next> {
        self.process_with(None)
    }

    /// [`ServerTls::process`], and once application data may be sent, `write` (a
    /// writer and the length of what it writes) writes its record into `outgoing`.
    fn process_with(&mut self, mut write: Option<(Writer<'_>, usize)>) -> io::Result<Next> {
        if let Some(kind) = self.failed {
            return Err(kind.into());
        }
        loop {
            let (discard, step) = self.step(&mut write);
            self.incoming.advance(discard);
            match step {
                Ok(None) => {}
                Ok(Some(next)) => return Ok(next),
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// One state of rustls's machine handled: the bytes of `incoming` to discard, and
    /// where processing stopped (None: go on).
    fn step(
        &mut self,
        write: &mut Option<(Writer<'_>, usize)>,
    ) -> (usize, io::Result<Option<Next>>) {
        let Self {
            conn,
            incoming,
            outgoing,
            plain,
            eof,
            ..
        } = self;
        let status = conn.process_tls_records(&mut incoming[..]);
        let discard = status.discard;
        let state = match status.state {
            Ok(state) => state,
            Err(e) => return (discard, Err(tls_error(e))),
        };
        let next = match state {
            ConnectionState::ReadTraffic(mut r) => {
                while let Some(record) = r.next_record() {
                    let record = match record {
                        Ok(record) => record,
                        Err(e) => return (discard, Err(tls_error(e))),
                    };
                    if plain.capacity() == 0 {
                        *plain = spare::buf();
                    }
                    plain.extend_from_slice(record.payload);
                }
                Ok(None)
            }
            ConnectionState::EncodeTlsData(mut e) => {
                append(outgoing, 2048, |b| e.encode(b).map_err(encode_needs)).map(|()| None)
            }
            // rustls only needs to know the records are on their way: `outgoing` is
            // sent first in, first out, before anything encrypted after them.
            ConnectionState::TransmitTlsData(t) => {
                t.done();
                Ok(None)
            }
            ConnectionState::PeerClosed => {
                *eof = true;
                Ok(None)
            }
            ConnectionState::Closed => Ok(Some(Next::Closed)),
            ConnectionState::BlockedHandshake => Ok(Some(Next::Blocked)),
            ConnectionState::WriteTraffic(mut w) => match write.take() {
                Some((f, len)) => {
                    // A record's header, tag and content type, per 16 KiB.
                    let size = len + (len / 16384 + 1) * 64;
                    append(outgoing, size, |b| f(&mut w, b)).map(|()| Some(Next::Write))
                }
                None => Ok(Some(Next::Write)),
            },
            // Early data is never accepted (max_early_data_size is 0).
            _ => Err(io::Error::other("unexpected TLS state")),
        };
        (discard, next)
    }

    /// The connection failed with `e`: the alert rustls queued for it goes out if the
    /// socket takes it now, and the buffers go back.
    fn fail(&mut self, e: io::Error) -> io::Error {
        self.failed = Some(e.kind());
        if self.conn.wants_write() {
            let Self {
                conn,
                incoming,
                outgoing,
                ..
            } = self;
            let status = conn.process_tls_records(&mut incoming[..]);
            if let Ok(ConnectionState::EncodeTlsData(mut alert)) = status.state {
                let _ = append(outgoing, 64, |b| alert.encode(b).map_err(encode_needs));
            }
        }
        if !self.outgoing.is_empty() {
            let _ = self.io.try_write(&self.outgoing);
        }
        for b in [&mut self.incoming, &mut self.outgoing, &mut self.plain] {
            b.clear();
            spare::release(b);
        }
        e
    }

    /// Reads what the socket has after the records in hand, with room for the
    /// record being read.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            if self.io.poll_read_ready(cx)?.is_pending() {
                if self.incoming.is_empty() {
                    spare::release(&mut self.incoming);
                }
                return Poll::Pending;
            }
            if self.incoming.capacity() == 0 {
                self.incoming = spare::buf();
            }
            let have = self.incoming.len();
            let record = match self.incoming.get(3..HEADER) {
                Some(l) => HEADER + usize::from(u16::from_be_bytes([l[0], l[1]])),
                None => HEADER,
            };
            let want = record.saturating_sub(have).max(4096);
            if self.incoming.capacity() - have < want {
                self.incoming.reserve(want);
            }
            match super::read_ready(&self.io, &mut self.incoming) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    /// Sends the records queued; their buffer goes back to the spares once sent.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.outgoing.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.outgoing))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.outgoing.advance(n);
        }
        spare::release(&mut self.outgoing);
        Poll::Ready(Ok(()))
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let next = self.process()?;
            ready!(self.poll_send(cx))?;
            if next == Next::Write && !self.conn.is_handshaking() {
                if self.incoming.is_empty() {
                    spare::release(&mut self.incoming);
                }
                return Poll::Ready(Ok(()));
            }
            if next == Next::Closed || self.eof {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            if ready!(self.poll_fill(cx))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// Waits until application bytes are in `plain` (Ok(true)) or the client has
    /// closed (Ok(false)).
    fn poll_plain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        loop {
            if !self.plain.is_empty() {
                return Poll::Ready(Ok(true));
            }
            if let Some(kind) = self.failed {
                return Poll::Ready(Err(kind.into()));
            }
            if self.eof {
                return Poll::Ready(Ok(false));
            }
            // Answers to the client's handshake messages (a key update) go out as the
            // socket takes them.
            if let Poll::Ready(Err(e)) = self.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
            if ready!(self.poll_fill(cx))? == 0 {
                if !self.incoming.is_empty() {
                    // The stream ended inside a record.
                    return Poll::Ready(Err(self.fail(io::ErrorKind::UnexpectedEof.into())));
                }
                self.eof = true;
            } else if self.process()? == Next::Closed {
                self.eof = true;
            }
            if self.eof {
                // Nothing after the client's close_notify is read.
                self.incoming.clear();
            }
            if self.incoming.is_empty() {
                spare::release(&mut self.incoming);
            }
        }
    }

    /// Reads application bytes into `buf` (made only once there are some), growing it
    /// by `chunk` when it has less than 1 KiB free; a whole delivery into an empty
    /// buffer moves the bytes' buffer over instead of copying them.
    pub fn poll_read_grow<B: super::ReadInto + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut B,
        chunk: usize,
    ) -> Poll<io::Result<usize>> {
        if !ready!(self.poll_plain(cx))? {
            return Poll::Ready(Ok(0));
        }
        let buf = buf.buf();
        let n = self.plain.len();
        if buf.is_empty() {
            std::mem::swap(buf, &mut self.plain);
            self.plain.clear();
        } else {
            if buf.capacity() - buf.len() < n.max(1024) {
                buf.reserve(n.max(chunk));
            }
            buf.extend_from_slice(&self.plain);
            self.plain.clear();
        }
        spare::release(&mut self.plain);
        Poll::Ready(Ok(n))
    }

    pub fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if ready!(self.poll_plain(cx))? {
            let n = buf.remaining().min(self.plain.len());
            buf.put_slice(&self.plain[..n]);
            self.plain.advance(n);
            if self.plain.is_empty() {
                spare::release(&mut self.plain);
            }
        }
        Poll::Ready(Ok(()))
    }

    pub fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.outgoing.len() >= HIGH_WATER {
            ready!(self.poll_send(cx))?;
        }
        if self.closing {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let data = &data[..data.len().min(WRITE_CHUNK)];
        self.encrypt(
            &mut |w, b| w.encrypt(data, b).map_err(encrypt_needs),
            data.len(),
        )?;
        if let Poll::Ready(Err(e)) = self.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(data.len()))
    }

    /// Writes an application-data record (or an alert) with `f` into `outgoing`.
    fn encrypt(&mut self, f: Writer<'_>, len: usize) -> io::Result<()> {
        match self.process_with(Some((f, len)))? {
            Next::Write => Ok(()),
            Next::Blocked => Err(io::Error::other("TLS handshake not finished")),
            Next::Closed => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// A failed connection has lost what it held unsent: a flush says so.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        self.poll_send(cx)
    }

    pub fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.closing {
            self.closing = true;
            // Best effort: a client that has gone gets no close_notify.
            let _ = self.encrypt(
                &mut |w, b| w.queue_close_notify(b).map_err(encrypt_needs),
                0,
            );
        }
        ready!(self.poll_send(cx))?;
        ready!(Pin::new(&mut self.io).poll_shutdown(cx))?;
        Poll::Ready(match self.failed {
            Some(kind) => Err(kind.into()),
            None => Ok(()),
        })
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
