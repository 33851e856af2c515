//! Opening a server connection: TCP, the TLS upgrade, the startup message and the
//! authentication exchange Sluice runs itself (SCRAM-SHA-256, md5, cleartext, trust)
//! with a password, an md5 hash (md5 only) or a client's SCRAM key (SCRAM only).

use super::{ServerConn, StatementCache, read_frame};
use crate::backend::{Credentials, LoginError, LoginKey, Target};
use crate::error::{Error, Kind, Result, Side};
use crate::stream::{Stream, write_all_flush};
use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use sluice_config::ServerTls;
use sluice_wire_pg::scram::KeyClient;
use sluice_wire_pg::{encode, msg};
use std::collections::BTreeMap;
use tokio::io::AsyncReadExt;

/// TCP connect and, when configured, the TLS upgrade.
pub async fn connect_stream(t: &Target) -> Result<Stream> {
    let addr = t.addr();
    let tcp = crate::backend::connect_tcp(t).await?;
    let Some(connector) = t.connector.as_ref().filter(|_| t.tls != ServerTls::Disable) else {
        if !matches!(t.tls, ServerTls::Disable | ServerTls::Prefer) {
            // Never plaintext where TLS is required, whatever happened to its set-up.
            return Err(Error::server_gone(format!(
                "server {addr}: TLS is required and could not be set up"
            )));
        }
        return Ok(Stream::Plain(tcp));
    };
    let mut tcp = tcp;
    let mut req = BytesMut::new();
    encode::ssl_request(&mut req);
    let mut plain = Stream::Plain(tcp);
    write_all_flush(&mut plain, &req).await?;
    let Stream::Plain(t2) = plain else {
        unreachable!()
    };
    tcp = t2;
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await?;
    match answer[0] {
        b'S' => {
            let name = rustls::pki_types::ServerName::try_from(t.server_name.clone())
                .map_err(|e| Error::new(Kind::Io, Side::Internal, e.to_string()))?;
            let tls = connector.connect(name, tcp).await.map_err(|e| {
                Error::server_gone(format!("TLS handshake with {addr} failed: {e}"))
            })?;
            Ok(Stream::TlsClient(Box::new(tls)))
        }
        _ if t.tls == ServerTls::Prefer => Ok(Stream::Plain(tcp)),
        _ => Err(Error::server_gone(format!(
            "server {addr} does not support TLS"
        ))),
    }
}

/// Reads the end of a login (after AuthenticationOk): ParameterStatus, BackendKeyData,
/// up to ReadyForQuery. `on_param` sees each ParameterStatus frame.
pub async fn finish_startup(
    stream: Stream,
    mut rbuf: BytesMut,
    permit: crate::pool::budget::Permit,
    t: &Target,
    mut on_param: impl FnMut(&str, &str),
) -> std::result::Result<ServerConn, LoginError> {
    let mut stream = stream;
    let mut reported = BTreeMap::new();
    let (mut pid, mut secret) = (0, 0);
    loop {
        let (tag, body) = read_frame(&mut stream, &mut rbuf, t.max_message).await?;
        match tag {
            msg::be::PARAMETER_STATUS => {
                if let Some((k, v)) = msg::parameter_status(&body) {
                    on_param(k, v);
                    reported.insert(k.to_owned(), v.to_owned());
                }
            }
            msg::be::BACKEND_KEY_DATA => {
                (pid, secret) = msg::backend_key(&body).unwrap_or((0, 0));
            }
            msg::be::READY_FOR_QUERY => break,
            msg::be::ERROR_RESPONSE => return Err(LoginError::Server(body)),
            msg::be::NOTICE_RESPONSE => {}
            _ => {
                return Err(Error::new(
                    Kind::Desync,
                    Side::Server,
                    "unexpected message during login",
                )
                .into());
            }
        }
    }
    let addr: std::sync::Arc<str> = t.addr().into();
    let key = std::sync::Arc::new(crate::cancel::ServerKey::new(addr.clone(), pid, secret));
    // A connection waiting in the pool holds no read buffer.
    crate::stream::spare::release(&mut rbuf);
    let reported = super::REPORTED.intern(reported);
    let mut conn = ServerConn {
        stream,
        key,
        reported_fp: None,
        rbuf,
        addr,
        pid,
        secret,
        reported,
        prepared: StatementCache::default(),
        applied_sets: Default::default(),
        stamps: crate::pool::Stamps::now(),
        status: b'I',
        max_message: t.max_message,
        permit,
    };
    // The first login to a server reads how many connections it allows.
    if let Some(b) = t.budget.as_ref().filter(|b| b.wants_limit()) {
        b.learn_limit(conn.server_limit().await);
    }
    Ok(conn)
}

/// Opens a connection (with room for it in the server's budget) and sends the startup
/// message. A server that refuses it for lack of room ("too many clients", 53300,
/// answered before any authentication) gets the least recently used idle connection of
/// its pools closed and the login tried again, for as long as there is one to close.
/// Returns the stream, the bytes read from it (the server's first answer, unread), and
/// the connection's permit.
pub async fn open_startup(
    t: &Target,
    params: &[(String, String)],
) -> std::result::Result<(Stream, BytesMut, crate::pool::budget::Permit), LoginError> {
    let mut out = BytesMut::new();
    encode::startup(&mut out, params);
    loop {
        let permit = t.permit().await?;
        let mut stream = connect_stream(t).await?;
        write_all_flush(&mut stream, &out).await?;
        let mut rbuf = BytesMut::with_capacity(8192);
        let full = loop {
            match sluice_wire_pg::frame::complete_frame(&rbuf, t.max_message) {
                Ok(Some(h)) => {
                    let body = &rbuf[5..h.frame_len];
                    break h.tag == msg::be::ERROR_RESPONSE
                        && msg::error_field(body, b'C') == Some("53300");
                }
                Ok(None) => {}
                Err(_) => break false,
            }
            if stream.read_buf(&mut rbuf).await? == 0 {
                break false;
            }
        };
        let evicted = full && t.budget.as_ref().is_some_and(|b| b.evict_one());
        if !evicted {
            return Ok((stream, rbuf, permit));
        }
    }
}

/// A full login by Sluice itself with `params` (user, database, ...).
pub async fn login(
    t: &Target,
    params: &[(String, String)],
    creds: &Credentials,
) -> std::result::Result<ServerConn, LoginError> {
    let fut = async {
        let (mut stream, mut rbuf, permit) = open_startup(t, params).await?;
        authenticate(&mut stream, &mut rbuf, t, creds).await?;
        finish_startup(stream, rbuf, permit, t, |_, _| {}).await
    };
    match tokio::time::timeout(t.connect_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(Error::server_gone(format!("login to {} timed out", t.addr())).into()),
    }
}

/// The error for a server that asks for what `creds` cannot give.
fn cannot(creds: &Credentials, asked: &str) -> LoginError {
    let why = match creds.key {
        LoginKey::None => "none is configured".to_owned(),
        ref k => format!("Sluice holds {} for this user", k.kind()),
    };
    LoginError::Proxy(Error::new(
        Kind::Auth,
        Side::Server,
        format!(
            "server asks for {asked} for user \"{}\" and {why}",
            creds.user
        ),
    ))
}

/// A SCRAM-SHA-256 exchange in progress: with the password, or with a client's key.
enum Scram {
    Password(ScramSha256),
    Key(KeyClient),
}

async fn authenticate(
    stream: &mut Stream,
    rbuf: &mut BytesMut,
    t: &Target,
    creds: &Credentials,
) -> std::result::Result<(), LoginError> {
    let mut scram: Option<Scram> = None;
    let failed = |e: String| LoginError::Proxy(Error::new(Kind::Auth, Side::Server, e));
    loop {
        let (tag, body) = read_frame(stream, rbuf, t.max_message).await?;
        if tag == msg::be::ERROR_RESPONSE {
            return Err(LoginError::Server(body));
        }
        let bad = || {
            LoginError::Proxy(Error::new(
                Kind::Desync,
                Side::Server,
                "bad authentication message",
            ))
        };
        if tag != msg::be::AUTHENTICATION {
            return Err(bad());
        }
        let (code, data) = msg::authentication(&body).ok_or_else(bad)?;
        let mut out = BytesMut::new();
        match code {
            msg::auth::OK => return Ok(()),
            msg::auth::CLEARTEXT => {
                let LoginKey::Password(pw) = &creds.key else {
                    return Err(cannot(creds, "the password in clear"));
                };
                let mut pw = pw.as_bytes().to_vec();
                pw.push(0);
                encode::password(&mut out, &pw);
            }
            msg::auth::MD5 => {
                let salt: [u8; 4] = data
                    .get(..4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or_else(bad)?;
                let hash = match &creds.key {
                    LoginKey::Password(pw) => postgres_protocol::authentication::md5_hash(
                        creds.user.as_bytes(),
                        pw.as_bytes(),
                        salt,
                    ),
                    LoginKey::PgMd5(stored) => sluice_wire_pg::md5::expected_response(stored, salt),
                    _ => return Err(cannot(creds, "md5")),
                };
                let mut pw = hash.into_bytes();
                pw.push(0);
                encode::password(&mut out, &pw);
            }
            msg::auth::SASL => {
                let mechs = msg::sasl_mechanisms(data);
                if !mechs.iter().any(|m| *m == b"SCRAM-SHA-256") {
                    return Err(Error::new(
                        Kind::Unsupported,
                        Side::Server,
                        "server offers no SASL mechanism Sluice supports",
                    )
                    .into());
                }
                let (s, first) = match &creds.key {
                    LoginKey::Password(pw) => {
                        let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                        let first = s.message().to_vec();
                        (Scram::Password(s), first)
                    }
                    LoginKey::Scram {
                        client_key,
                        server_key,
                    } => {
                        let (s, first) = KeyClient::new(*client_key, *server_key);
                        (Scram::Key(s), first.into_bytes())
                    }
                    _ => return Err(cannot(creds, "SCRAM-SHA-256")),
                };
                encode::sasl_initial(&mut out, "SCRAM-SHA-256", &first);
                scram = Some(s);
            }
            msg::auth::SASL_CONTINUE => match scram.as_mut().ok_or_else(bad)? {
                Scram::Password(s) => {
                    s.update(data).map_err(|e| failed(e.to_string()))?;
                    encode::password(&mut out, s.message());
                }
                Scram::Key(s) => {
                    let last = s.client_final(data).map_err(|e| failed(e.to_string()))?;
                    encode::password(&mut out, last.as_bytes());
                }
            },
            msg::auth::SASL_FINAL => {
                match scram.as_mut().ok_or_else(bad)? {
                    Scram::Password(s) => s.finish(data).map_err(|e| failed(e.to_string()))?,
                    Scram::Key(s) => s.verify_server(data).map_err(|_| {
                        failed(format!(
                            "server {} could not prove it holds the SCRAM verifier of user \"{}\"",
                            t.addr(),
                            creds.user
                        ))
                    })?,
                }
                continue;
            }
            other => {
                return Err(Error::new(
                    Kind::Unsupported,
                    Side::Server,
                    format!("unsupported authentication request {other} from server"),
                )
                .into());
            }
        }
        write_all_flush(stream, &out).await?;
    }
}
