//! TLS towards clients. rustls runs the handshake over its unbuffered interface; then
//! the connection's keys come out of it and records.rs seals and opens the records,
//! so that an idle client holds its keys and not rustls's whole connection and two
//! cipher contexts. The connection's buffers (records read, records to send,
//! application bytes not yet taken) come from the thread's spares (spare.rs) while
//! bytes pass and go back when they are empty.

use super::records::{self, Fatal, Records, Secret, TrafficSecrets};
use super::spare;
use bytes::{Buf, BytesMut};
use rustls::SupportedCipherSuite;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError};
use std::cell::RefCell;
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

/// Accepts clients' TLS handshakes with one server configuration.
#[derive(Clone)]
pub struct Acceptor(Arc<rustls::ServerConfig>);

impl Acceptor {
    /// The records after the handshake are Sluice's own: the configuration lets the
    /// keys out of rustls, and its key log (replacing any the configuration had)
    /// hands over TLS 1.3's traffic secrets.
    pub fn new(mut config: rustls::ServerConfig) -> Acceptor {
        config.enable_secret_extraction = true;
        config.key_log = Arc::new(Catch);
        Acceptor(Arc::new(config))
    }

    /// Runs the server side of a TLS handshake on `tcp`.
    pub async fn accept(&self, tcp: TcpStream) -> io::Result<ServerTls> {
        let conn = UnbufferedServerConnection::new(self.0.clone()).map_err(tls_error)?;
        let mut h = Handshake {
            conn,
            traffic: (None, None),
            io: Io { tcp, bufs: None },
            eof: false,
        };
        std::future::poll_fn(|cx| h.poll(cx)).await?;
        h.finish()
    }
}

/// The socket and the connection's buffers.
struct Io {
    tcp: TcpStream,
    /// The buffers, while any of them holds bytes or room (boxed: an idle
    /// connection holds none, and its `ServerTls` stays in a smaller size class).
    bufs: Option<Box<Bufs>>,
}

/// The buffers in `slot`, their box taken from the thread's spares or made when
/// there is none.
fn bufs(slot: &mut Option<Box<Bufs>>) -> &mut Bufs {
    slot.get_or_insert_with(|| spare::take(&BOXES).map_or_else(Box::default, |k| k.0))
}

/// An empty box of buffers kept in the thread's spares.
struct Kept(Box<Bufs>);

/// A connection's buffers, each from the thread's spares while bytes pass.
#[derive(Default)]
struct Bufs {
    /// Records read and not yet processed (a partial record between reads).
    incoming: BytesMut,
    /// Records to send.
    outgoing: BytesMut,
    /// Application bytes received and not yet taken by the reader.
    plain: BytesMut,
}

impl Io {
    /// The buffers (their box taken from the thread's spares or made, when there is
    /// none).
    fn bufs(&mut self) -> &mut Bufs {
        bufs(&mut self.bufs)
    }

    /// Lets the box go (to the thread's spares) once its three buffers have gone back.
    fn settle(&mut self) {
        if let Some(b) = &self.bufs
            && b.incoming.capacity() == 0
            && b.outgoing.capacity() == 0
            && b.plain.capacity() == 0
            && let Some(b) = self.bufs.take()
        {
            spare::keep(&BOXES, Kept(b));
        }
    }

    fn has_plain(&self) -> bool {
        self.bufs.as_ref().is_some_and(|b| !b.plain.is_empty())
    }

    fn has_incoming(&self) -> bool {
        self.bufs.as_ref().is_some_and(|b| !b.incoming.is_empty())
    }

    fn queued(&self) -> usize {
        self.bufs.as_ref().map_or(0, |b| b.outgoing.len())
    }

    /// Reads what the socket has after the records in hand, with room for the
    /// record being read.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            if self.tcp.poll_read_ready(cx)?.is_pending() {
                if let Some(b) = &mut self.bufs
                    && b.incoming.is_empty()
                {
                    spare::release(&mut b.incoming);
                }
                self.settle();
                return Poll::Pending;
            }
            let incoming = &mut bufs(&mut self.bufs).incoming;
            if incoming.capacity() == 0 {
                *incoming = spare::buf();
            }
            let have = incoming.len();
            let record = match incoming.get(3..records::HEADER) {
                Some(l) => records::HEADER + usize::from(u16::from_be_bytes([l[0], l[1]])),
                None => records::HEADER,
            };
            let want = record.saturating_sub(have).max(4096);
            if incoming.capacity() - have < want {
                incoming.reserve(want);
            }
            match super::read_ready(&self.tcp, incoming) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    /// Sends the records queued; their buffer goes back to the spares once sent.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(b) = &mut self.bufs {
            while !b.outgoing.is_empty() {
                let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &b.outgoing))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                b.outgoing.advance(n);
            }
            spare::release(&mut b.outgoing);
        }
        self.settle();
        Poll::Ready(Ok(()))
    }

    /// The connection failed: what is queued (an alert) goes out if the socket takes
    /// it now, and the buffers go back.
    fn abandon(&mut self) {
        if let Some(mut b) = self.bufs.take() {
            if !b.outgoing.is_empty() {
                let _ = self.tcp.try_write(&b.outgoing);
            }
            let Bufs {
                incoming,
                outgoing,
                plain,
            } = &mut *b;
            for b in [incoming, outgoing, plain] {
                b.clear();
                spare::release(b);
            }
        }
    }
}

thread_local! {
    /// Empty boxes of buffers, for connections' next bursts (spare.rs).
    static BOXES: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
    /// The traffic secrets rustls logged during the call in progress on this thread.
    static CAUGHT: RefCell<TrafficSecrets> = const { RefCell::new((None, None)) };
}

/// rustls's key log, catching a TLS 1.3 handshake's traffic secrets (the client's and
/// the server's first) for the handshake's own record layer: rustls logs them while it
/// processes the client's first flight, in [`Handshake::step`]'s call on this thread.
#[derive(Debug)]
struct Catch;

impl rustls::KeyLog for Catch {
    fn will_log(&self, label: &str) -> bool {
        matches!(label, "CLIENT_TRAFFIC_SECRET_0" | "SERVER_TRAFFIC_SECRET_0")
    }

    fn log(&self, label: &str, _client_random: &[u8], secret: &[u8]) {
        let _ = CAUGHT.try_with(|c| {
            let mut c = c.borrow_mut();
            match label {
                "CLIENT_TRAFFIC_SECRET_0" => c.0 = Secret::new(secret),
                "SERVER_TRAFFIC_SECRET_0" => c.1 = Secret::new(secret),
                _ => {}
            }
        });
    }
}

/// The secrets rustls logged since the last call.
fn caught() -> TrafficSecrets {
    CAUGHT
        .try_with(|c| std::mem::take(&mut *c.borrow_mut()))
        .unwrap_or_default()
}

/// Where processing the handshake's records so far stopped.
#[derive(PartialEq)]
enum Next {
    /// The handshake is done.
    Done,
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

/// A handshake in progress: rustls's connection and the socket.
struct Handshake {
    conn: UnbufferedServerConnection,
    /// TLS 1.3's traffic secrets, once rustls has logged them.
    traffic: TrafficSecrets,
    io: Io,
    /// The client has closed its side (close_notify, or the end of the stream).
    eof: bool,
}

impl Handshake {
    /// Processes the records read so far: handshake messages are answered (the
    /// answers queued in `outgoing`), application data that came with the client's
    /// last flight is moved to `plain`. An error ends the handshake, rustls's alert
    /// for it sent if the socket takes it at once.
    fn process(&mut self) -> io::Result<Next> {
        loop {
            let (discard, step) = self.step();
            self.io.bufs().incoming.advance(discard);
            match step {
                Ok(None) => {}
                Ok(Some(next)) => return Ok(next),
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// One state of rustls's machine handled: the bytes of `incoming` to discard, and
    /// where processing stopped (None: go on).
    fn step(&mut self) -> (usize, io::Result<Option<Next>>) {
        let Self {
            conn,
            io,
            traffic,
            eof,
        } = self;
        let io = io.bufs();
        caught();
        let status = conn.process_tls_records(&mut io.incoming[..]);
        let (client, server) = caught();
        if client.is_some() {
            traffic.0 = client;
        }
        if server.is_some() {
            traffic.1 = server;
        }
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
                    if io.plain.capacity() == 0 {
                        io.plain = spare::buf();
                    }
                    io.plain.extend_from_slice(record.payload);
                }
                Ok(None)
            }
            ConnectionState::EncodeTlsData(mut e) => append(&mut io.outgoing, 2048, |b| {
                e.encode(b).map_err(encode_needs)
            })
            .map(|()| None),
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
            ConnectionState::WriteTraffic(_) => Ok(Some(Next::Done)),
            // Early data is never accepted (max_early_data_size is 0).
            _ => Err(io::Error::other("unexpected TLS state")),
        };
        (discard, next)
    }

    /// The handshake failed with `e`: the alert rustls queued for it goes out if the
    /// socket takes it now.
    fn fail(&mut self, e: io::Error) -> io::Error {
        if self.conn.wants_write() {
            let Self { conn, io, .. } = self;
            let io = io.bufs();
            let status = conn.process_tls_records(&mut io.incoming[..]);
            if let Ok(ConnectionState::EncodeTlsData(mut alert)) = status.state {
                let _ = append(&mut io.outgoing, 64, |b| {
                    alert.encode(b).map_err(encode_needs)
                });
            }
        }
        self.io.abandon();
        e
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let next = self.process()?;
            ready!(self.io.poll_send(cx))?;
            if next == Next::Done && !self.conn.is_handshaking() {
                return Poll::Ready(Ok(()));
            }
            if next == Next::Closed || self.eof {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            if ready!(self.io.poll_fill(cx))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// The connection after its handshake: the keys come out of rustls (which is
    /// dropped), and records that came after the client's last flight are opened.
    fn finish(self) -> io::Result<ServerTls> {
        let Handshake {
            conn,
            io,
            traffic,
            eof,
        } = self;
        let (keys, kernel) = conn.dangerous_into_kernel_connection().map_err(tls_error)?;
        let (limit, tls13) = match kernel.negotiated_cipher_suite() {
            SupportedCipherSuite::Tls13(s) => (s.common.confidentiality_limit, true),
            SupportedCipherSuite::Tls12(s) => (s.common.confidentiality_limit, false),
        };
        drop(kernel);
        let records = Records::new(keys, limit, tls13.then_some(traffic))
            .map_err(|f| io::Error::other(f.what))?;
        let mut s = ServerTls {
            io,
            records,
            eof,
            closing: false,
            failed: None,
        };
        if s.eof {
            // Nothing after the client's close_notify is read.
            s.io.bufs().incoming.clear();
        } else {
            s.open()?;
        }
        s.release_read();
        Ok(s)
    }
}

/// A client's TLS connection (256 bytes: `records.rs`'s fields are unaligned bytes
/// so that they pack with the rest into jemalloc's 256-byte class).
pub struct ServerTls {
    io: Io,
    records: Records,
    /// The client has closed its side (close_notify, or the end of the stream).
    eof: bool,
    /// Our close_notify is queued.
    closing: bool,
    /// The connection failed (a bad record, the stream cut inside a record).
    failed: Option<io::ErrorKind>,
}

impl ServerTls {
    pub fn tcp(&self) -> &TcpStream {
        &self.io.tcp
    }

    /// Bytes of buffer the connection holds (outside the keys).
    #[cfg(test)]
    fn held(&self) -> usize {
        let b = self.io.bufs.as_ref();
        b.map_or(0, |b| {
            b.incoming.capacity() + b.outgoing.capacity() + b.plain.capacity() + 1
        })
    }

    /// After reading: buffers left empty go back to the spares (a record with no
    /// application bytes leaves `plain` empty too), and the box with them.
    fn release_read(&mut self) {
        if let Some(b) = &mut self.io.bufs {
            if b.incoming.is_empty() {
                spare::release(&mut b.incoming);
            }
            if b.plain.is_empty() {
                spare::release(&mut b.plain);
            }
        }
        self.io.settle();
    }

    /// Opens the whole records read so far; a bad one ends the connection, its alert
    /// sent if the socket takes it at once, and every later call answers the same
    /// error.
    fn open(&mut self) -> io::Result<()> {
        let io = self.io.bufs();
        match self.records.open(&mut io.incoming, &mut io.plain) {
            Ok(closed) => {
                if closed {
                    self.eof = true;
                }
                Ok(())
            }
            Err(f) => Err(self.fail(io::ErrorKind::InvalidData, Some(&f))),
        }
    }

    fn fail(&mut self, kind: io::ErrorKind, f: Option<&Fatal>) -> io::Error {
        self.failed = Some(kind);
        if let Some(f) = f {
            self.records.alert(f, &mut self.io.bufs().outgoing);
        }
        self.io.abandon();
        match f {
            Some(f) => io::Error::new(kind, f.what),
            None => kind.into(),
        }
    }

    /// Waits until application bytes are in `plain` (Ok(true)) or the client has
    /// closed (Ok(false)).
    fn poll_plain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        loop {
            if self.io.has_plain() {
                return Poll::Ready(Ok(true));
            }
            if let Some(kind) = self.failed {
                return Poll::Ready(Err(kind.into()));
            }
            if self.eof {
                return Poll::Ready(Ok(false));
            }
            // What is queued goes out as the socket takes it.
            if let Poll::Ready(Err(e)) = self.io.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
            if ready!(self.io.poll_fill(cx))? == 0 {
                if self.io.has_incoming() {
                    // The stream ended inside a record.
                    let e = self.fail(io::ErrorKind::UnexpectedEof, None);
                    return Poll::Ready(Err(e));
                }
                self.eof = true;
            } else {
                self.open()?;
            }
            if self.eof
                && let Some(b) = &mut self.io.bufs
            {
                // Nothing after the client's close_notify is read.
                b.incoming.clear();
            }
            self.release_read();
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
        let plain = &mut self.io.bufs().plain;
        let n = plain.len();
        if buf.is_empty() {
            std::mem::swap(buf, plain);
            plain.clear();
        } else {
            if buf.capacity() - buf.len() < n.max(1024) {
                buf.reserve(n.max(chunk));
            }
            buf.extend_from_slice(plain);
            plain.clear();
        }
        spare::release(plain);
        self.io.settle();
        Poll::Ready(Ok(n))
    }

    pub fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if ready!(self.poll_plain(cx))? {
            let plain = &mut self.io.bufs().plain;
            let n = buf.remaining().min(plain.len());
            buf.put_slice(&plain[..n]);
            plain.advance(n);
            if plain.is_empty() {
                spare::release(plain);
                self.io.settle();
            }
        }
        Poll::Ready(Ok(()))
    }

    pub fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if self.io.queued() >= HIGH_WATER {
            ready!(self.io.poll_send(cx))?;
        }
        if self.closing {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let data = &data[..data.len().min(WRITE_CHUNK)];
        if let Err(f) = self.records.seal(data, &mut self.io.bufs().outgoing) {
            return Poll::Ready(Err(self.fail(io::ErrorKind::InvalidData, Some(&f))));
        }
        if let Poll::Ready(Err(e)) = self.io.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(data.len()))
    }

    /// A failed connection has lost what it held unsent: a flush says so.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        self.io.poll_send(cx)
    }

    pub fn poll_shutdown(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.closing && self.failed.is_none() {
            self.closing = true;
            // Best effort: a client that has gone gets no close_notify.
            let _ = self.records.close_notify(&mut self.io.bufs().outgoing);
        }
        ready!(self.io.poll_send(cx))?;
        ready!(Pin::new(&mut self.io.tcp).poll_shutdown(cx))?;
        Poll::Ready(match self.failed {
            Some(kind) => Err(kind.into()),
            None => Ok(()),
        })
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
