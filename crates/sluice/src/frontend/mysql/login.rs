//! From a client's TCP connection to a ready session: the greeting, the TLS upgrade
//! inside the handshake, HandshakeResponse41, then authentication. With pass-through
//! auth Sluice first connects to the server and greets the client with the server's own
//! scramble, so the client's answer is valid for the server and the whole exchange
//! (auth switches, caching_sha2 rounds, ed25519) is relayed packet by packet.

use super::Client;
use crate::backend::mysql::{ServerConn, read_packet, tls_upgrade};
use crate::backend::{Target, connect_tcp};
use crate::error::{Error, Kind, Side};
use crate::frontend::ListenerCtx;
use crate::pool::{Lease, Pool};
use crate::shared::Shared;
use crate::stream::{Stream, write_all_flush};
use bytes::{Bytes, BytesMut};
use sluice_config::{AuthMethod, ClientTls, PoolMode};
use sluice_wire_mysql::handshake::{HandshakeResponse41, HandshakeV10, is_ssl_request};
use sluice_wire_mysql::{consts, packet, resp};
use std::sync::Arc;
use std::time::Instant;

/// Everything the relay needs about a logged-in client.
pub struct Session {
    pub mode: PoolMode,
    pub pool: Arc<Pool<ServerConn>>,
    pub lease: Option<Lease<ServerConn>>,
    pub max_message: usize,
    /// The connection id the client was told.
    pub id: u32,
}

/// Capabilities that change what a server answers: every client of a pool has the same.
const SHAPING_CAPS: u64 = consts::CLIENT_FOUND_ROWS
    | consts::CLIENT_IGNORE_SPACE
    | consts::CLIENT_MULTI_STATEMENTS
    | consts::CLIENT_LOCAL_FILES
    | consts::CLIENT_DEPRECATE_EOF
    | consts::CLIENT_SESSION_TRACK
    | consts::CLIENT_MULTI_RESULTS
    | consts::CLIENT_PS_MULTI_RESULTS;

async fn send(stream: &mut Stream, seq: u8, payload: &[u8]) -> std::io::Result<u8> {
    let mut out = BytesMut::new();
    let mut seq = seq;
    packet::write_packet(&mut out, &mut seq, payload);
    write_all_flush(stream, &out).await?;
    Ok(seq)
}

pub async fn login(
    shared: &Arc<Shared>,
    ctx: &ListenerCtx,
    mut c: Client,
) -> Option<(Session, Client)> {
    let (config, target) = match crate::session::plan::target(shared, ctx) {
        Ok(t) => t,
        Err(e) => {
            c.fatal(0, &e).await;
            return None;
        }
    };
    if ctx.cfg.auth != AuthMethod::Passthrough {
        let e = Error::new(
            Kind::Unsupported,
            Side::Internal,
            "only pass-through authentication is implemented for MySQL listeners so far",
        );
        c.fatal(0, &e).await;
        return None;
    }
    let max = config.general.max_message_size;
    // The server first: its greeting carries the scramble the client must answer.
    let (mut server, mut sbuf, hs) = match greet_server(&target).await {
        Ok(x) => x,
        Err(Greet::Server(err)) => {
            let _ = send(&mut c.stream, 0, &err).await;
            return None;
        }
        Err(Greet::Proxy(e)) => {
            c.fatal(0, &e).await;
            return None;
        }
    };
    let mode = config.pool_for(&ctx.cfg).mode;
    let id = match mode {
        PoolMode::Session => hs.connection_id,
        _ => shared.next_pid() as u32,
    };
    let mut offer = hs.capabilities & consts::SLUICE_CAPS & !consts::CLIENT_SSL;
    if ctx.tls.is_some() {
        offer |= consts::CLIENT_SSL;
    }
    let greeting = HandshakeV10 {
        capabilities: offer,
        connection_id: id,
        ..hs.clone()
    };
    let mut payload = Vec::new();
    greeting.encode(&mut payload);
    if send(&mut c.stream, 0, &payload).await.is_err() {
        return None;
    }
    let (mut cseq, mut answer) = read_client(&mut c, max).await?;
    if is_ssl_request(&answer) {
        let Some(acceptor) = ctx.tls.as_ref() else {
            let e = Error::protocol("SSL was not offered");
            c.fatal(cseq.wrapping_add(1), &e).await;
            return None;
        };
        if !c.buf.is_empty() {
            // Bytes sent before the TLS handshake could be injected by anyone on path.
            let e = Error::protocol("data received before the TLS handshake");
            c.fatal(cseq.wrapping_add(1), &e).await;
            return None;
        }
        let Client { stream, buf, caps } = c;
        let Stream::Plain(tcp) = stream else {
            return None;
        };
        let stream = match acceptor.accept(tcp).await {
            Ok(tls) => Stream::TlsServer(Box::new(tls)),
            Err(e) => {
                tracing::debug!(error = %e, "client TLS handshake failed");
                return None;
            }
        };
        c = Client { stream, buf, caps };
        (cseq, answer) = read_client(&mut c, max).await?;
    } else if ctx.cfg.tls == ClientTls::Require {
        let e = Error::new(
            Kind::Auth,
            Side::Client,
            "Connections using insecure transport are prohibited",
        );
        c.fatal(cseq.wrapping_add(1), &e).await;
        return None;
    }
    let Some(mut hello) = HandshakeResponse41::parse(&answer) else {
        let seq = cseq.wrapping_add(1);
        c.fatal_code(seq, consts::ER_HANDSHAKE_ERROR, "08S01", "Bad handshake")
            .await;
        return None;
    };
    let client_caps = hello.capabilities & offer;
    c.caps = client_caps;
    let user = String::from_utf8_lossy(&hello.username).into_owned();
    let database = hello
        .database
        .as_deref()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .unwrap_or_default();

    // Towards the server: the client's answer with the capabilities both sides have.
    let mut caps = client_caps & !consts::CLIENT_SSL;
    let mut sseq = 1u8;
    if target.tls != sluice_config::ServerTls::Disable {
        let before = server.is_tls();
        server = match tls_upgrade(&target, server, caps, hello.charset, hs.capabilities).await {
            Ok(s) => s,
            Err(e) => {
                c.fatal(cseq.wrapping_add(1), &e).await;
                return None;
            }
        };
        if server.is_tls() && !before {
            caps |= consts::CLIENT_SSL;
            sseq = 2;
        }
    }
    hello.capabilities = caps;
    let mut payload = Vec::new();
    hello.encode(&mut payload);
    let Ok(next) = send(&mut server, sseq, &payload).await else {
        c.fatal(
            cseq.wrapping_add(1),
            &Error::server_gone("lost connection to server during login"),
        )
        .await;
        return None;
    };
    sseq = next;
    let status = relay_auth(
        &mut c,
        &mut server,
        &mut sbuf,
        cseq.wrapping_add(1),
        sseq,
        max,
    )
    .await?;

    let now = Instant::now();
    let conn = ServerConn {
        stream: server,
        rbuf: sbuf,
        addr: Arc::from(target.addr()),
        id: hs.connection_id,
        caps,
        status,
        database: database.clone(),
        applied: Default::default(),
        stmts: Default::default(),
        created: now,
        last_used: now,
        max_message: max,
    };
    let extra = vec![
        (
            "caps".to_owned(),
            format!("{:x}", client_caps & SHAPING_CAPS),
        ),
        ("charset".to_owned(), hello.charset.to_string()),
    ];
    let plan = match crate::session::plan::plan(
        shared,
        ctx,
        &shared.my_pools,
        &user,
        &database,
        extra,
        "COM_RESET_CONNECTION",
    ) {
        Ok(p) => p,
        Err(e) => {
            c.fatal(2, &e).await;
            return None;
        }
    };
    plan.pool.set_welcome(&Arc::new(hs));
    let mut session = Session {
        mode: plan.mode,
        pool: plan.pool.clone(),
        lease: Some(plan.pool.adopt(conn)),
        max_message: max,
        id,
    };
    if session.mode == PoolMode::Transaction
        && let Some(l) = session.lease.take()
    {
        l.put_back();
    }
    Some((session, c))
}

enum Greet {
    /// The server refused us with an ERR packet (relayed as is).
    Server(Bytes),
    Proxy(Error),
}

async fn greet_server(t: &Target) -> Result<(Stream, BytesMut, HandshakeV10), Greet> {
    let tcp = connect_tcp(t).await.map_err(Greet::Proxy)?;
    let mut stream = Stream::Plain(tcp);
    let mut buf = BytesMut::new();
    let (_, p) = read_packet(&mut stream, &mut buf, t.max_message)
        .await
        .map_err(Greet::Proxy)?;
    if resp::is_err(&p) {
        return Err(Greet::Server(p));
    }
    let hs = HandshakeV10::parse(&p).ok_or_else(|| {
        Greet::Proxy(Error::new(
            Kind::Desync,
            Side::Server,
            "malformed handshake from server",
        ))
    })?;
    Ok((stream, buf, hs))
}

/// Reads one packet of the client's during login: (sequence id, payload).
async fn read_client(c: &mut Client, max: usize) -> Option<(u8, Bytes)> {
    match read_packet(&mut c.stream, &mut c.buf, max.min(1 << 20)).await {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::debug!(error = %e, "client left during login");
            None
        }
    }
}

/// Relays the authentication exchange both ways until the server says OK (returns its
/// status flags) or ERR (relayed; the login ends).
async fn relay_auth(
    c: &mut Client,
    server: &mut Stream,
    sbuf: &mut BytesMut,
    mut cseq: u8,
    mut sseq: u8,
    max: usize,
) -> Option<u16> {
    loop {
        tokio::select! {
            r = read_packet(server, sbuf, max) => {
                let (s, p) = match r {
                    Ok(x) => x,
                    Err(e) => {
                        c.fatal(cseq, &e).await;
                        return None;
                    }
                };
                sseq = s.wrapping_add(1);
                cseq = send(&mut c.stream, cseq, &p).await.ok()?;
                match p.first() {
                    Some(&resp::OK) => {
                        return Some(resp::OkPacket::parse(&p, c.caps).map_or(0, |ok| ok.status));
                    }
                    Some(&resp::ERR) => return None,
                    _ => {}
                }
            }
            r = read_packet(&mut c.stream, &mut c.buf, max.min(1 << 20)) => {
                let (s, p) = r.ok()?;
                cseq = s.wrapping_add(1);
                sseq = match send(server, sseq, &p).await {
                    Ok(n) => n,
                    Err(_) => {
                        c.fatal(cseq, &Error::server_gone("lost connection to server during login")).await;
                        return None;
                    }
                };
            }
        }
    }
}
