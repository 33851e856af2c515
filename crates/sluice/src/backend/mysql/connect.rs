//! Logging in to a MySQL/MariaDB server by itself (pools of configured users):
//! HandshakeV10, the TLS upgrade inside the handshake, HandshakeResponse41 and the
//! auth exchange (mysql_native_password, caching_sha2_password fast and full over TLS,
//! auth switch).

use super::{ServerConn, read_packet};
use crate::backend::{Credentials, LoginError, LoginKey, Target, connect_tcp};
use crate::error::{Error, Kind, Result, Side};
use crate::stream::{Stream, write_all_flush};
use bytes::BytesMut;
use sluice_config::ServerTls;
use sluice_wire_mysql::compress::{self, Algorithm, Framer, Role};
use sluice_wire_mysql::handshake::{
    AuthSwitchRequest, HandshakeResponse41, HandshakeV10, SslRequest,
};
use sluice_wire_mysql::{auth, consts, packet, resp};
use std::sync::Arc;

/// How a pool opens MySQL connections by itself.
pub struct Opener {
    pub target: Target,
    pub creds: Credentials,
    pub database: String,
    /// Capabilities the pool's clients use (those that change what the server answers
    /// must be the same for every client of a pool).
    pub caps: u64,
    pub charset: u8,
}

/// Upgrades `stream` to TLS after an SSLRequest with `caps` (sequence id 1).
pub async fn tls_upgrade(
    t: &Target,
    stream: Stream,
    caps: u64,
    charset: u8,
    server_caps: u64,
) -> Result<Stream> {
    let addr = t.addr();
    let Some(connector) = t.connector.as_ref() else {
        if !matches!(t.tls, ServerTls::Disable | ServerTls::Prefer) {
            // Never plaintext where TLS is required, whatever happened to its set-up.
            return Err(Error::server_gone(format!(
                "server {addr}: TLS is required and could not be set up"
            )));
        }
        return Ok(stream);
    };
    if server_caps & consts::CLIENT_SSL == 0 {
        if t.tls == ServerTls::Prefer {
            return Ok(stream);
        }
        return Err(Error::server_gone(format!(
            "server {addr} does not support TLS"
        )));
    }
    let Stream::Plain(tcp) = stream else {
        return Ok(stream);
    };
    let mut req = Vec::new();
    SslRequest {
        capabilities: caps | consts::CLIENT_SSL,
        max_packet: 1 << 30,
        charset,
    }
    .encode(&mut req);
    let mut out = BytesMut::new();
    let mut seq = 1;
    packet::write_packet(&mut out, &mut seq, &req);
    let mut plain = Stream::Plain(tcp);
    write_all_flush(&mut plain, &out).await?;
    let Stream::Plain(tcp) = plain else {
        return Ok(plain);
    };
    let name = rustls::pki_types::ServerName::try_from(t.server_name.clone())
        .map_err(|e| Error::new(Kind::Io, Side::Internal, e.to_string()))?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| Error::server_gone(format!("TLS handshake with {addr} failed: {e}")))?;
    Ok(Stream::TlsClient(Box::new(tls)))
}

/// Opens a connection (with room for it in the server's budget) and reads the server's
/// first packet: its greeting, or an ERR. A server that refuses the connection for lack
/// of room (1040, before any authentication) gets the least recently used idle
/// connection of its pools closed and is asked again, for as long as there is one to
/// close. Returns the stream, what was read past the packet, the packet and the
/// connection's permit.
pub async fn open_greeting(
    t: &Target,
) -> Result<(Stream, BytesMut, bytes::Bytes, crate::pool::budget::Permit)> {
    loop {
        let permit = t.permit().await?;
        let mut stream = Stream::Plain(connect_tcp(t).await?);
        let mut rbuf = BytesMut::new();
        let (_, hello) = read_packet(&mut stream, &mut rbuf, t.max_message).await?;
        let full =
            resp::ErrPacket::parse(&hello).is_some_and(|e| e.code == consts::ER_CON_COUNT_ERROR);
        if !(full && t.budget.as_ref().is_some_and(|b| b.evict_one())) {
            return Ok((stream, rbuf, hello, permit));
        }
    }
}

/// Opens and authenticates a connection; also returns the server's greeting.
pub async fn login(op: &Opener) -> std::result::Result<(ServerConn, HandshakeV10), LoginError> {
    let t = &op.target;
    let (mut stream, mut rbuf, hello, permit) = open_greeting(t).await?;
    if resp::is_err(&hello) {
        return Err(LoginError::Server(hello));
    }
    let hs = HandshakeV10::parse(&hello).ok_or_else(|| {
        Error::new(
            Kind::Desync,
            Side::Server,
            "malformed handshake from server",
        )
    })?;
    // (Bulk execution changes no answer, and a client of the pool that has it may send
    // it on this connection, whoever opened it.)
    let bulk = hs.capabilities & consts::MARIADB_CLIENT_STMT_BULK_OPERATIONS;
    let mut caps = op.caps & hs.capabilities & consts::SLUICE_CAPS
        | bulk
        | consts::CLIENT_PROTOCOL_41
        | consts::CLIENT_SECURE_CONNECTION
        | consts::CLIENT_PLUGIN_AUTH;
    if op.database.is_empty() {
        caps &= !consts::CLIENT_CONNECT_WITH_DB;
    } else {
        caps |= consts::CLIENT_CONNECT_WITH_DB;
    }
    let compression = compression_for(t, hs.capabilities);
    caps |= compression.map_or(0, |(flag, _)| flag);
    let mut seq = 1u8;
    if t.tls != ServerTls::Disable {
        let before = stream.is_tls();
        stream = tls_upgrade(t, stream, caps, op.charset, hs.capabilities).await?;
        if stream.is_tls() && !before {
            caps |= consts::CLIENT_SSL;
            seq = 2;
        }
    }
    let key = &op.creds.key;
    let salt = hs.scramble();
    // With a recovered key only mysql_native_password can answer: ask for it at once (a
    // server whose default plugin differs switches to the account's).
    let plugin = match key {
        LoginKey::NativeSha1(_) => auth::MYSQL_NATIVE_PASSWORD.to_vec(),
        _ => hs.auth_plugin_name.clone(),
    };
    let response = HandshakeResponse41 {
        capabilities: caps,
        max_packet: 1 << 30,
        charset: op.charset,
        username: op.creds.user.as_bytes().to_vec(),
        auth_response: scramble_for(t, &op.creds, &plugin, salt)?,
        database: (!op.database.is_empty()).then(|| op.database.as_bytes().to_vec()),
        auth_plugin: Some(plugin.clone()),
        attrs: None,
    };
    let mut payload = Vec::new();
    response.encode(&mut payload);
    if caps & consts::CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
        payload.push(compress::ZSTD_DEFAULT_LEVEL);
    }
    let mut out = BytesMut::new();
    packet::write_packet(&mut out, &mut seq, &payload);
    write_all_flush(&mut stream, &out).await?;
    let mut plugin = plugin;
    loop {
        let (s, p) = read_packet(&mut stream, &mut rbuf, t.max_message).await?;
        seq = s.wrapping_add(1);
        let reply: Vec<u8> = match p.first() {
            Some(&resp::OK) => break,
            Some(&resp::ERR) => return Err(LoginError::Server(p)),
            Some(0xfe) => {
                let sw = AuthSwitchRequest::parse(&p).ok_or_else(|| {
                    Error::new(Kind::Desync, Side::Server, "malformed auth switch")
                })?;
                let (name, data) = (sw.plugin, sw.data);
                plugin = name.to_vec();
                // A 20-byte scramble comes with a NUL; client_ed25519's 32-byte nonce
                // does not.
                let salt = match data {
                    [s @ .., 0] if s.len() == 20 => s,
                    _ => data,
                };
                scramble_for(t, &op.creds, &plugin, salt)?
            }
            // caching_sha2_password: 3 = fast auth succeeded (OK follows), 4 = full
            // authentication: the password itself, only over TLS.
            Some(0x01) if p.get(1) == Some(&3) => continue,
            Some(0x01) if p.get(1) == Some(&4) && stream.is_tls() => {
                let LoginKey::Password(password) = key else {
                    return Err(cannot(t, &op.creds, &plugin));
                };
                let mut v = password.as_bytes().to_vec();
                v.push(0);
                v
            }
            _ => {
                return Err(LoginError::Proxy(Error::new(
                    Kind::Auth,
                    Side::Server,
                    format!(
                        "server {} asks for an authentication Sluice cannot do here ({}); use TLS towards the server or mysql_native_password",
                        t.addr(),
                        String::from_utf8_lossy(&plugin)
                    ),
                )));
            }
        };
        let mut out = BytesMut::new();
        packet::write_packet(&mut out, &mut seq, &reply);
        write_all_flush(&mut stream, &out).await?;
    }
    let (stream, rbuf) = start_compression(stream, rbuf, compression, t.max_message);
    let mut conn = ServerConn {
        stream,
        rbuf,
        addr: Arc::from(t.addr()),
        id: hs.connection_id,
        caps,
        status: hs.status,
        database: op.database.clone(),
        applied: Default::default(),
        stmts: Default::default(),
        stamps: crate::pool::Stamps::now(),
        max_message: t.max_message,
        tracks_state: false,
        foreign: false,
        permit,
        statement_timeout: t.statement_timeout,
    };
    if let Some(b) = t.budget.as_ref().filter(|b| b.wants_limit()) {
        b.learn_limit(conn.server_limit().await);
    }
    conn.track_state().await?;
    Ok((conn, hs))
}

/// The compressed protocol to ask a server with capabilities `server_caps` for: the
/// capability flag and the algorithm, if `[servers] compression` wants one the server
/// offers (zlib or zstd; without it, plain packets, and a warning).
pub fn compression_for(t: &Target, server_caps: u64) -> Option<(u64, Algorithm)> {
    use sluice_config::Compression;
    let (flag, alg) = match t.compression {
        Compression::Off => return None,
        Compression::Zlib => (consts::CLIENT_COMPRESS, Algorithm::Zlib),
        Compression::Zstd => (
            consts::CLIENT_ZSTD_COMPRESSION_ALGORITHM,
            Algorithm::Zstd {
                level: i32::from(compress::ZSTD_DEFAULT_LEVEL),
            },
        ),
    };
    if server_caps & flag == 0 {
        tracing::warn!(
            server = %t.addr(),
            compression = %t.compression,
            "the server does not offer this compression: its connections are not compressed"
        );
        return None;
    }
    Some((flag, alg))
}

/// After the login's OK: the connection's stream and read buffer, compressed if
/// `compression` was agreed.
pub fn start_compression(
    stream: Stream,
    rbuf: BytesMut,
    compression: Option<(u64, Algorithm)>,
    max: usize,
) -> (Stream, BytesMut) {
    match compression {
        Some((_, alg)) => {
            let framer = Framer::new(alg, Role::Client, max.clamp(64 * 1024, packet::MAX_PAYLOAD));
            (
                crate::stream::compress(stream, framer, rbuf),
                BytesMut::new(),
            )
        }
        None => (stream, rbuf),
    }
}

/// The answer to `plugin`'s challenge `salt` with what `creds` hold.
fn scramble_for(
    t: &Target,
    creds: &Credentials,
    plugin: &[u8],
    salt: &[u8],
) -> std::result::Result<Vec<u8>, LoginError> {
    let password = match &creds.key {
        LoginKey::None => return Ok(Vec::new()),
        LoginKey::Password(p) if p.is_empty() => return Ok(Vec::new()),
        LoginKey::Password(p) => p.as_bytes(),
        LoginKey::NativeSha1(key) if plugin == auth::MYSQL_NATIVE_PASSWORD => {
            return Ok(auth::native_scramble_with_key(key, salt).to_vec());
        }
        LoginKey::NativeSha1(_) | LoginKey::PgMd5(_) | LoginKey::Scram { .. } => {
            return Err(cannot(t, creds, plugin));
        }
    };
    Ok(match plugin {
        b"caching_sha2_password" => auth::sha2_scramble(password, salt).to_vec(),
        b"client_ed25519" => auth::ed25519_sign(password, salt).to_vec(),
        _ => auth::native_scramble(password, salt).to_vec(),
    })
}

/// The error for a server that asks for an authentication `creds` cannot answer.
fn cannot(t: &Target, creds: &Credentials, plugin: &[u8]) -> LoginError {
    LoginError::Proxy(Error::new(
        Kind::Auth,
        Side::Server,
        format!(
            "server {} asks user \"{}\" for {}, which Sluice cannot answer with {}",
            t.addr(),
            creds.user,
            String::from_utf8_lossy(plugin),
            creds.key.kind()
        ),
    ))
}
