//! The startup phase of a PostgreSQL client: SSLRequest / GSSENCRequest negotiation,
//! CancelRequest, and the StartupMessage with its parameters.

use crate::error::{Error, Result};
use crate::frontend::ListenerCtx;
use crate::stream::{Stream, write_all_flush};
use bytes::{Buf, BytesMut};
use sluice_config::ClientTls;
use sluice_wire_pg::{frame, msg};
use tokio::io::AsyncReadExt;

/// What the client asked for once the startup phase is over.
pub enum Start {
    Startup {
        stream: Stream,
        params: Vec<(String, String)>,
        version: i32,
    },
    /// The cancel connection stays open until the cancel has been carried out: a
    /// client (libpq) waits for it to close before it goes on.
    Cancel {
        stream: Stream,
        pid: i32,
        secret: i32,
    },
}

/// Startup packets are small; a cap far below the message cap keeps junk out.
const MAX_STARTUP: usize = 10_000;

/// Reads one startup packet. A length no startup packet can have means the client
/// does not speak the protocol at all (a message sent before the startup, an HTTP
/// request): like the server, Sluice then closes the connection without a word.
async fn read_startup_frame(stream: &mut Stream, buf: &mut BytesMut) -> Result<BytesMut> {
    loop {
        match frame::startup_frame(buf, MAX_STARTUP) {
            Ok(Some(n)) => return Ok(buf.split_to(n)),
            Ok(None) => {}
            Err(e) => {
                return Err(Error::protocol(format!(
                    "invalid length of startup packet: {e}"
                )));
            }
        }
        buf.reserve(1024);
        match stream.read_buf(buf).await {
            Ok(0) => {
                return Err(Error::protocol(
                    "client closed the connection during startup",
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs the startup phase. On failure the stream comes back (if there still is one) so
/// that the error can be sent to the client.
pub async fn negotiate(
    ctx: &ListenerCtx,
    mut stream: Stream,
) -> std::result::Result<(Start, BytesMut), (Error, Option<Stream>)> {
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        let f = match read_startup_frame(&mut stream, &mut buf).await {
            Ok(f) => f,
            // Nothing is answered: see read_startup_frame.
            Err(e) => return Err((e, None)),
        };
        let Some(req) = msg::startup_request(&f) else {
            return Err((
                Error::protocol("invalid startup packet layout"),
                Some(stream),
            ));
        };
        match req {
            msg::StartupRequest::Ssl => {
                let acceptor = ctx.tls.as_ref().filter(|_| !stream.is_tls());
                let (Some(acceptor), Stream::Plain(_)) = (acceptor, &stream) else {
                    if let Err(e) = write_all_flush(&mut stream, b"N").await {
                        return Err((e.into(), None));
                    }
                    continue;
                };
                // Bytes the client sent after SSLRequest, before the handshake, would be
                // read as if they came through TLS: refuse them (CVE-2021-23222).
                if buf.has_remaining() {
                    let e = Error::protocol("received unencrypted data after SSL request");
                    return Err((e, Some(stream)));
                }
                if let Err(e) = write_all_flush(&mut stream, b"S").await {
                    return Err((e.into(), None));
                }
                let Stream::Plain(tcp) = stream else {
                    return Err((Error::protocol("TLS twice"), None));
                };
                match acceptor.accept(tcp).await {
                    Ok(tls) => stream = Stream::TlsServer(Box::new(tls)),
                    Err(e) => {
                        return Err((Error::protocol(format!("TLS handshake failed: {e}")), None));
                    }
                }
            }
            msg::StartupRequest::GssEnc => {
                if let Err(e) = write_all_flush(&mut stream, b"N").await {
                    return Err((e.into(), None));
                }
            }
            msg::StartupRequest::Cancel { pid, secret } => {
                return Ok((
                    Start::Cancel {
                        stream,
                        pid,
                        secret,
                    },
                    buf,
                ));
            }
            msg::StartupRequest::Startup { version, params } => {
                if ctx.cfg.tls == ClientTls::Require && !stream.is_tls() {
                    let e = Error::new(
                        crate::error::Kind::Auth,
                        crate::error::Side::Client,
                        "SSL connection is required by this listener",
                    );
                    return Err((e, Some(stream)));
                }
                return Ok((
                    Start::Startup {
                        stream,
                        params,
                        version,
                    },
                    buf,
                ));
            }
        }
    }
}
