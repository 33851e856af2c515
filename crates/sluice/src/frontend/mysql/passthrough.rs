//! Pass-through authentication: Sluice first connects to the server and greets the
//! client with the server's own scramble, so the client's answer is valid for the server
//! and the whole exchange (auth switches, caching_sha2 rounds, ed25519) is relayed packet
//! by packet. Roles created on the server log in without any Sluice configuration, and
//! the server's own errors reach the client as they are.

use super::Client;
use super::login::{greet_client, send};
use crate::backend::Target;
use crate::backend::mysql::{
    ServerConn, compression_for, open_greeting, read_packet, start_compression, tls_upgrade,
};
use crate::error::{Error, Kind, Side};
use crate::frontend::ListenerCtx;
use crate::pool::budget::Permit;
use crate::shared::Shared;
use crate::stream::Stream;
use bytes::{Bytes, BytesMut};
use sluice_config::{Config, PoolMode};
use sluice_wire_mysql::handshake::HandshakeV10;
use sluice_wire_mysql::{consts, resp};
use std::sync::Arc;

/// What a pass-through login established: (client, its server connection, user,
/// database, client capabilities, charset, the server's greeting, the client's id).
type Authenticated = (
    Client,
    ServerConn,
    String,
    String,
    u64,
    u8,
    HandshakeV10,
    u32,
);

pub(super) async fn authenticate(
    shared: &Arc<Shared>,
    ctx: &ListenerCtx,
    c: Client,
    config: &Config,
    target: &Target,
    max: usize,
) -> Option<Authenticated> {
    let mut c = c;
    // The server first: its greeting carries the scramble the client must answer.
    let (mut server, mut sbuf, hs, permit) = match greet_server(target).await {
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
    let greeting = HandshakeV10 {
        connection_id: id,
        ..hs.clone()
    };
    let (mut c, cseq, mut hello, offer) = greet_client(c, ctx, greeting, max).await?;
    let client_caps = hello.capabilities & offer;
    c.caps = client_caps;
    let (user, database) = super::login::names(&hello);

    // Towards the server: the client's answer with the capabilities both sides have;
    // compression is each leg's own.
    // (Bulk execution too, whatever the client has: in transaction mode the connection
    // serves the pool's other clients after this one.)
    let bulk = hs.capabilities & consts::MARIADB_CLIENT_STMT_BULK_OPERATIONS;
    let mut caps = client_caps & !consts::CLIENT_SSL & !consts::COMPRESSION_CAPS | bulk;
    let compression = compression_for(target, hs.capabilities);
    caps |= compression.map_or(0, |(flag, _)| flag);
    let mut sseq = 1u8;
    if target.tls != sluice_config::ServerTls::Disable {
        let before = server.is_tls();
        server = match tls_upgrade(target, server, caps, hello.charset, hs.capabilities).await {
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
    if caps & consts::CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
        payload.push(sluice_wire_mysql::compress::ZSTD_DEFAULT_LEVEL);
    }
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
    let c = c.start_compression();
    let (server, sbuf) = start_compression(server, sbuf, compression, max);

    let mut conn = ServerConn {
        stream: server,
        rbuf: sbuf,
        addr: Arc::from(target.addr()),
        id: hs.connection_id,
        caps,
        status,
        database: database.clone(),
        applied: Default::default(),
        stmts: Default::default(),
        stamps: crate::pool::Stamps::now(),
        max_message: max,
        tracks_state: false,
        foreign: false,
        permit,
        statement_timeout: target.statement_timeout,
    };
    // The first login to a server reads how many connections it allows.
    if let Some(b) = target.budget.as_ref().filter(|b| b.wants_limit()) {
        b.learn_limit(conn.server_limit().await);
    }
    // A failure here shows on the connection's first use.
    let _ = conn.track_state().await;
    let hello_charset = hello.charset;
    Some((c, conn, user, database, client_caps, hello_charset, hs, id))
}

enum Greet {
    /// The server refused us with an ERR packet (relayed as is).
    Server(Bytes),
    Proxy(Error),
}

async fn greet_server(t: &Target) -> Result<(Stream, BytesMut, HandshakeV10, Permit), Greet> {
    let (stream, buf, p, permit) = open_greeting(t).await.map_err(Greet::Proxy)?;
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
    Ok((stream, buf, hs, permit))
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
