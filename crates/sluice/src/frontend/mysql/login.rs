//! From a client's TCP connection to a ready session: the greeting, the TLS upgrade
//! inside the handshake, HandshakeResponse41, then authentication. With pass-through
//! auth Sluice first connects to the server and greets the client with the server's own
//! scramble, so the client's answer is valid for the server and the whole exchange
//! (auth switches, caching_sha2 rounds, ed25519) is relayed packet by packet.

use super::Client;
use crate::backend::mysql::{ServerConn, read_packet};
use crate::error::{Error, Kind, Side};
use crate::frontend::ListenerCtx;
use crate::session::driver::Seat;
use crate::session::mysql::{Admitted, Session};
use crate::shared::Shared;
use crate::stream::{Stream, write_all_flush};
use bytes::{Bytes, BytesMut};
use sluice_config::{ClientTls, PoolMode};
use sluice_wire_mysql::compress::{Algorithm, Framer, Role};
use sluice_wire_mysql::handshake::{HandshakeResponse41, HandshakeV10, is_ssl_request};
use sluice_wire_mysql::{consts, packet};
use std::sync::Arc;

/// Capabilities that change what a server answers: every client of a pool has the same
/// (a server connection logs in with the capabilities of the client whose login opened
/// it). `CLIENT_INTERACTIVE` sets a session's `wait_timeout` (from
/// `interactive_timeout`); MariaDB's extended type information adds a field to every
/// column definition.
const SHAPING_CAPS: u64 = consts::CLIENT_FOUND_ROWS
    | consts::CLIENT_INTERACTIVE
    | consts::MARIADB_CLIENT_EXTENDED_TYPE_INFO
    | consts::CLIENT_IGNORE_SPACE
    | consts::CLIENT_MULTI_STATEMENTS
    | consts::CLIENT_LOCAL_FILES
    | consts::CLIENT_DEPRECATE_EOF
    | consts::CLIENT_SESSION_TRACK
    | consts::CLIENT_MULTI_RESULTS
    | consts::CLIENT_PS_MULTI_RESULTS;

pub(super) async fn send(stream: &mut Stream, seq: u8, payload: &[u8]) -> std::io::Result<u8> {
    let mut out = BytesMut::new();
    let mut seq = seq;
    packet::write_packet(&mut out, &mut seq, payload);
    write_all_flush(stream, &out).await?;
    Ok(seq)
}

pub async fn login(
    shared: &Arc<Shared>,
    ctx: &Arc<ListenerCtx>,
    mut c: Client,
) -> Option<(Admitted, Client)> {
    let (config, target) = match crate::session::plan::target(shared, &ctx.cfg).await {
        Ok(t) => t,
        Err(e) => {
            c.fatal(0, &e).await;
            return None;
        }
    };
    if ctx.cfg.logs_in_itself() {
        return super::auth::login(shared, ctx, c, config, target).await;
    }
    let max = config.general.max_message_size;
    let (c, conn, user, database, client_caps, charset, hs, id) =
        super::passthrough::authenticate(shared, ctx, c, &config, &target, max).await?;
    let (c, session) = finish(
        shared,
        ctx,
        c,
        Arrival {
            user,
            database,
            client_caps,
            charset,
            id,
            welcome: hs,
            lease: FirstConn::Adopt(Box::new(conn)),
            scramble: None,
            routed: (config.clone(), target.clone()),
        },
    )
    .await?;
    Some((session, c))
}

/// How a logged-in client's first server connection comes.
pub(super) enum FirstConn {
    /// The connection its pass-through login opened.
    Adopt(Box<ServerConn>),
    /// From the pool (Sluice logs in itself), unless transaction mode needs none yet.
    Pool(Arc<crate::backend::mysql::Opener>),
}

/// What a login established, to be turned into a session.
pub(super) struct Arrival {
    pub user: String,
    pub database: String,
    pub client_caps: u64,
    pub charset: u8,
    pub id: u32,
    pub welcome: HandshakeV10,
    pub lease: FirstConn,
    /// The scramble Sluice greeted the client with, where it checked the client itself.
    pub scramble: Option<[u8; 20]>,
    /// The server the router picked for this login, and the configuration it read.
    pub routed: (Arc<sluice_config::Config>, crate::backend::Target),
}

/// The pool plan for a client's user and database: clients whose capabilities or
/// character set shape answers differently get separate pools.
pub(super) fn plan(
    shared: &Shared,
    ctx: &ListenerCtx,
    routed: (Arc<sluice_config::Config>, crate::backend::Target),
    user: &str,
    database: &str,
    caps: u64,
    charset: u8,
) -> Result<crate::session::plan::Plan<ServerConn>, Error> {
    let extra = vec![
        ("caps".to_owned(), format!("{:x}", caps & SHAPING_CAPS)),
        ("charset".to_owned(), charset.to_string()),
    ];
    crate::session::plan::plan(
        shared,
        &ctx.cfg,
        routed,
        &shared.my.pools,
        (user, database),
        extra,
        "COM_RESET_CONNECTION",
    )
}

/// Finds the client's pool and makes the session.
pub(super) async fn finish(
    shared: &Arc<Shared>,
    ctx: &Arc<ListenerCtx>,
    mut c: Client,
    a: Arrival,
) -> Option<(Client, Admitted)> {
    let plan = match plan(
        shared,
        ctx,
        a.routed,
        &a.user,
        &a.database,
        a.client_caps,
        a.charset,
    ) {
        Ok(p) => p,
        Err(e) => {
            c.fatal(2, &e).await;
            return None;
        }
    };
    plan.pool.set_welcome(&Arc::new(a.welcome));
    let lease = match a.lease {
        FirstConn::Adopt(conn) => Some(plan.pool.adopt(*conn)),
        FirstConn::Pool(opener) => {
            plan.pool.set_opener(opener);
            None
        }
    };
    let max = plan.target.max_message;
    let names = crate::session::clients::Names::of(shared, &ctx.cfg.name, &a.user, &a.database);
    let client = crate::session::clients::logged_in(
        shared,
        crate::session::clients::Arrival {
            protocol: sluice_config::Protocol::Mysql,
            names: names.clone(),
            pid: i64::from(a.id),
            mode: plan.mode,
            tcp: c.stream.tcp(),
        },
    );
    // (KILL finds the client's user and socket in its book line.)
    let kill = ctx.mysql.clients.register(client.info.clone());
    // Read once from the socket, for the client book (system call per login saved).
    let peer = client.info.addr.map(|a| a.ip());
    let mut seat = Seat {
        client: Some(client),
        mode: plan.mode,
        cfg: ctx.cfg.clone(),
        pool: plan.pool.clone(),
        lease,
        route: crate::session::reroute::RouteMark::at_login(shared, &ctx.cfg),
        max_message: max,
        judging: crate::session::judge::Judging::at_login(
            shared,
            &shared.my.rules,
            &names,
            &ctx.cfg,
            peer,
        ),
    };
    if seat.mode == PoolMode::Transaction
        && let Some(l) = seat.lease.take()
    {
        l.put_back();
    }
    kill.set_server(seat.lease.as_ref().map(|l| l.conn.id));
    let session = Session {
        id: a.id,
        kill,
        readmit: ctx.clone(),
        scramble: a.scramble.unwrap_or(crate::session::mysql::NO_SCRAMBLE),
    };
    Some((c, (seat, session)))
}

/// The user and database a HandshakeResponse41 names.
pub(super) fn names(hello: &HandshakeResponse41) -> (String, String) {
    let user = String::from_utf8_lossy(&hello.username).into_owned();
    let database = hello
        .database
        .as_deref()
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .unwrap_or_default();
    (user, database)
}

/// Greets the client (capabilities: the server's that Sluice relays, TLS if the listener
/// has it), runs the TLS upgrade if asked, and reads its HandshakeResponse41: (the client,
/// the response's sequence id, the response, the capabilities offered).
pub(super) async fn greet_client(
    mut c: Client,
    ctx: &ListenerCtx,
    greeting: HandshakeV10,
    max: usize,
) -> Option<(Client, u8, HandshakeResponse41, u64)> {
    let hs = &greeting;
    // Compression is Sluice's own on the client's leg, whatever the server offers.
    let mut offer =
        hs.capabilities & consts::SLUICE_CAPS & !consts::CLIENT_SSL | consts::COMPRESSION_CAPS;
    if ctx.tls.is_some() {
        offer |= consts::CLIENT_SSL;
    }
    let greeting = HandshakeV10 {
        capabilities: offer,
        ..greeting
    };
    let mut payload = Vec::new();
    greeting.encode(&mut payload);
    if send(&mut c.stream, 0, &payload).await.is_err() {
        return None;
    }
    let (mut cseq, mut answer) = read_first(&mut c, max).await?;
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
        let Client {
            stream,
            buf,
            caps,
            compress,
        } = c;
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
        c = Client {
            stream,
            buf,
            caps,
            compress,
        };
        (cseq, answer) = read_client(&mut c.stream, &mut c.buf, max).await?;
    } else if ctx.cfg.tls == ClientTls::Require {
        let e = Error::new(
            Kind::Auth,
            Side::Client,
            "Connections using insecure transport are prohibited",
        );
        c.fatal(cseq.wrapping_add(1), &e).await;
        return None;
    }
    let Some(hello) = HandshakeResponse41::parse(&answer) else {
        let seq = cseq.wrapping_add(1);
        c.fatal_code(seq, consts::ER_HANDSHAKE_ERROR, "08S01", "Bad handshake")
            .await;
        return None;
    };
    let level = HandshakeResponse41::zstd_level(&answer);
    c.compress = Algorithm::negotiated(hello.capabilities & offer, level).map(|alg| {
        let cap = max.clamp(64 * 1024, packet::MAX_PAYLOAD);
        Framer::new(alg, Role::Server, cap)
    });
    Some((c, cseq, hello, offer))
}

/// Reads the client's first packet and not a byte more: after an SSLRequest the client
/// starts its TLS handshake at once, and its ClientHello must be left in the socket for
/// the TLS acceptor (read into Sluice's buffer, it would look like data sent before the
/// handshake, and the client would get a plaintext error in the middle of its TLS).
async fn read_first(c: &mut Client, max: usize) -> Option<(u8, Bytes)> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 4];
    c.stream.read_exact(&mut head).await.ok()?;
    let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
    if len > max.min(1 << 20) {
        let e = Error::protocol("login packet too large");
        c.fatal(head[3].wrapping_add(1), &e).await;
        return None;
    }
    let mut payload = vec![0u8; len];
    c.stream.read_exact(&mut payload).await.ok()?;
    Some((head[3], Bytes::from(payload)))
}

/// Reads one packet of the client's during login: (sequence id, payload).
pub(super) async fn read_client(
    stream: &mut Stream,
    buf: &mut BytesMut,
    max: usize,
) -> Option<(u8, Bytes)> {
    match read_packet(stream, buf, max.min(1 << 20)).await {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::debug!(error = %e, "client left during login");
            None
        }
    }
}
