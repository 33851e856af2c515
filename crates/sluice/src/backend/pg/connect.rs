//! Opening a server connection: TCP, the TLS upgrade, the startup message and the
//! authentication exchange Sluice runs itself (SCRAM-SHA-256, md5, cleartext, trust).

use super::{ServerConn, StatementCache, read_frame};
use crate::backend::{Credentials, LoginError, Target};
use crate::error::{Error, Kind, Result, Side};
use crate::stream::{Stream, write_all_flush};
use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use sluice_config::ServerTls;
use sluice_wire_pg::{encode, msg};
use std::collections::BTreeMap;
use tokio::io::AsyncReadExt;

/// TCP connect and, when configured, the TLS upgrade.
pub async fn connect_stream(t: &Target) -> Result<Stream> {
    let addr = t.addr();
    let tcp = crate::backend::connect_tcp(t).await?;
    let Some(connector) = t.connector.as_ref().filter(|_| t.tls != ServerTls::Disable) else {
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

fn need_password(creds: &Credentials) -> std::result::Result<&[u8], LoginError> {
    creds.password.as_deref().map(str::as_bytes).ok_or_else(|| {
        LoginError::Proxy(Error::new(
            Kind::Auth,
            Side::Server,
            format!(
                "server asks for a password for user \"{}\" and none is configured",
                creds.user
            ),
        ))
    })
}

async fn authenticate(
    stream: &mut Stream,
    rbuf: &mut BytesMut,
    t: &Target,
    creds: &Credentials,
) -> std::result::Result<(), LoginError> {
    let mut scram: Option<ScramSha256> = None;
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
                let mut pw = need_password(creds)?.to_vec();
                pw.push(0);
                encode::password(&mut out, &pw);
            }
            msg::auth::MD5 => {
                let salt: [u8; 4] = data
                    .get(..4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or_else(bad)?;
                let hash = postgres_protocol::authentication::md5_hash(
                    creds.user.as_bytes(),
                    need_password(creds)?,
                    salt,
                );
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
                let s = ScramSha256::new(need_password(creds)?, ChannelBinding::unsupported());
                encode::sasl_initial(&mut out, "SCRAM-SHA-256", s.message());
                scram = Some(s);
            }
            msg::auth::SASL_CONTINUE => {
                let s = scram.as_mut().ok_or_else(bad)?;
                s.update(data)
                    .map_err(|e| Error::new(Kind::Auth, Side::Server, e.to_string()))?;
                encode::password(&mut out, s.message());
            }
            msg::auth::SASL_FINAL => {
                let s = scram.as_mut().ok_or_else(bad)?;
                s.finish(data)
                    .map_err(|e| Error::new(Kind::Auth, Side::Server, e.to_string()))?;
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
