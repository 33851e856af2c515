//! The admin console over the MySQL protocol, on `[admin] mysql_address` (default
//! 127.0.0.1:6032, ProxySQL's convention): `mariadb -h 127.0.0.1 -P 6032 -u admin`.
//! Admitted: the `[admin] users` (their `[users]` password, checked by Sluice with
//! mysql_native_password); with no `[admin] users`, a superuser of the first MySQL
//! cluster's server (`Super_priv` in mysql.user; the server checks the
//! password) connecting from a loopback address. Text queries only; each answer is an
//! ordinary result set.

use super::Client;
use super::auth::{Exchange, access_denied};
use super::login::{greet_client, send};
use crate::admin::{Reply, Table, Type};
use crate::backend::mysql::read_packet;
use crate::error::{Error, Kind, Side};
use crate::frontend::ListenerCtx;
use crate::shared::Shared;
use crate::stream::{Stream, write_all_flush};
use bytes::BytesMut;
use sluice_config::{AuthMethod, ClientTls, Config, Listener, Protocol};
use sluice_wire_mysql::handshake::HandshakeV10;
use sluice_wire_mysql::{auth as scramble, consts, packet, resp};
use std::sync::Arc;

/// The console's listener as the configuration now says (made for each connection,
/// so a reload that adds `[admin] users` closes the superuser way in at once): its
/// name and address, and for pass-through superusers the first MySQL listener's
/// cluster.
pub fn context(config: &Config) -> Arc<ListenerCtx> {
    let address = config.admin.mysql_address.clone().unwrap_or_default();
    let mysql_cluster = config
        .listeners
        .values()
        .find(|l| l.protocol == Protocol::Mysql)
        .map(|l| (l.cluster.clone(), l.pool.clone()));
    let (cluster, pool) = mysql_cluster.unwrap_or_default();
    let auth = if config.admin.users.is_empty() {
        AuthMethod::Passthrough
    } else {
        AuthMethod::MysqlNativePassword
    };
    let cfg = Listener {
        name: "admin_mysql".into(),
        protocol: Protocol::Mysql,
        address,
        cluster,
        pool,
        route: Default::default(),
        auth,
        auth_query: None,
        tls: ClientTls::Disable,
        tls_cert_file: None,
        tls_key_file: None,
        firewall: None,
    };
    Arc::new(ListenerCtx {
        cfg: Arc::new(cfg),
        tls: None,
        clients: Default::default(),
        mysql: Default::default(),
    })
}

/// One console connection: login, then commands until the client leaves.
pub async fn serve(
    shared: Arc<Shared>,
    tcp: tokio::net::TcpStream,
    seat: Option<crate::shared::ConsoleSeat>,
) {
    let ctx = context(&shared.config.load());
    let mut c = Client {
        stream: Stream::Plain(tcp),
        buf: BytesMut::new(),
        caps: consts::CLIENT_PROTOCOL_41,
        compress: None,
    };
    let Some(_seat) = seat else {
        c.fatal_code(0, 1040, "08004", "Too many admin console connections")
            .await;
        return;
    };
    let limit = shared.config.load().general.client_login_timeout;
    let Ok(Some((c, admitted))) = tokio::time::timeout(limit, login(&shared, &ctx, c)).await else {
        return;
    };
    commands(shared, c, admitted).await;
}

fn greeting(salt: &[u8; 20], id: u32) -> HandshakeV10 {
    HandshakeV10 {
        server_version: b"5.5.5-10.11.99-Sluice-admin".to_vec(),
        connection_id: id,
        auth_plugin_data: salt.to_vec(),
        capabilities: consts::SLUICE_CAPS,
        charset: 45,
        status: consts::SERVER_STATUS_AUTOCOMMIT,
        auth_plugin_name: scramble::MYSQL_NATIVE_PASSWORD.to_vec(),
    }
}

/// Logs the client in: Some((client, admitted)); a pass-through client that turns out
/// not to be a superuser is logged in but not admitted (its first command is refused).
async fn login(shared: &Arc<Shared>, ctx: &Arc<ListenerCtx>, c: Client) -> Option<(Client, bool)> {
    let config = shared.config.load_full();
    let max = config.general.max_message_size;
    if ctx.cfg.auth == AuthMethod::Passthrough {
        let mut c = c;
        let loopback = c
            .stream
            .tcp()
            .peer_addr()
            .is_ok_and(|a| a.ip().to_canonical().is_loopback());
        if !loopback || ctx.cfg.cluster.is_empty() {
            let why = if loopback {
                "no [admin] users are configured and no MySQL cluster can check a superuser"
            } else {
                "server superusers may open the console from a loopback address only"
            };
            c.fatal_code(0, consts::ER_ACCESS_DENIED_ERROR, "28000", why)
                .await;
            return None;
        }
        let (config, target) = match crate::session::plan::target_now(shared, &ctx.cfg).await {
            Ok(t) => t,
            Err(e) => {
                c.fatal(0, &e).await;
                return None;
            }
        };
        let (c, mut conn, user, ..) =
            super::passthrough::authenticate(shared, ctx, c, &config, &target, max).await?;
        // The server's own answer: Super_priv of the account the client is logged in
        // as (ALL PRIVILEGES ON *.* includes it); a user who may not read mysql.user
        // is refused by the error. Grant texts are not parsed: a quoted name can hold
        // anything.
        let rows = conn
            .status_rows(
                b"SELECT Super_priv FROM mysql.user WHERE CONCAT(User, '@', Host) = CURRENT_USER()",
            )
            .await
            .unwrap_or_default();
        let superuser = rows
            .first()
            .and_then(|r| r.first())
            .is_some_and(|v| v.as_deref() == Some(&b"Y"[..]));
        drop(conn);
        if superuser {
            tracing::info!(%user, "admin console opened (MySQL)");
        }
        return Some((c, superuser));
    }
    let salt: [u8; 20] = std::array::from_fn(|_| rand::random_range(b'!'..=b'~'));
    let id = shared.next_pid() as u32;
    let (mut c, cseq, hello, offer) = greet_client(c, ctx, greeting(&salt, id), max).await?;
    c.caps = hello.capabilities & offer;
    let (user, _) = super::login::names(&hello);
    let user_cfg = config
        .users
        .get(&user)
        .filter(|_| config.admin.is_admin(&user));
    let plugin = scramble::MYSQL_NATIVE_PASSWORD;
    let first = hello
        .auth_plugin
        .as_deref()
        .is_none_or(|p| p == plugin)
        .then_some(&hello.auth_response[..]);
    let mut ex = Exchange {
        stream: &mut c.stream,
        buf: &mut c.buf,
        seq: cseq.wrapping_add(1),
        salt: &salt,
        max,
    };
    let verdict = ex.admit(ctx, None, user_cfg, &user, plugin, first).await;
    let seq = ex.seq;
    match verdict {
        Some(Some(_)) if user_cfg.is_some() => {}
        Some(_) => {
            let msg = access_denied(&user, !hello.auth_response.is_empty());
            c.fatal_code(seq, consts::ER_ACCESS_DENIED_ERROR, "28000", &msg)
                .await;
            return None;
        }
        None => return None,
    }
    let mut ok = Vec::new();
    resp::encode_ok(
        &mut ok,
        c.caps,
        0,
        0,
        consts::SERVER_STATUS_AUTOCOMMIT,
        0,
        b"",
    );
    send(&mut c.stream, seq, &ok).await.ok()?;
    tracing::info!(%user, "admin console opened (MySQL)");
    Some((c.start_compression(), true))
}

/// A table as a text result set.
fn rows(out: &mut BytesMut, caps: u64, mut seq: u8, t: &Table) {
    let mut p = Vec::new();
    sluice_wire_mysql::codec::put_lenenc(&mut p, t.columns.len() as u64);
    let flag = consts::MARIADB_CLIENT_CACHE_METADATA | consts::CLIENT_OPTIONAL_RESULTSET_METADATA;
    if caps & flag != 0 {
        p.push(1); // metadata follows
    }
    packet::write_packet(out, &mut seq, &p);
    for (name, ty) in &t.columns {
        p.clear();
        let column_type = match ty {
            Type::Int => resp::TYPE_LONGLONG,
            Type::Float => resp::TYPE_DOUBLE,
            Type::Text => resp::TYPE_VAR_STRING,
        };
        resp::encode_column_def(&mut p, caps, name.as_bytes(), column_type);
        packet::write_packet(out, &mut seq, &p);
    }
    if caps & consts::CLIENT_DEPRECATE_EOF == 0 {
        p.clear();
        resp::encode_eof(&mut p, caps, 0, consts::SERVER_STATUS_AUTOCOMMIT);
        packet::write_packet(out, &mut seq, &p);
    }
    for r in &t.rows {
        p.clear();
        let cells: Vec<Option<String>> = r.iter().map(|c| c.text()).collect();
        resp::encode_text_row(
            &mut p,
            cells.iter().map(|c| c.as_deref().map(str::as_bytes)),
        );
        packet::write_packet(out, &mut seq, &p);
    }
    p.clear();
    resp::encode_eof(&mut p, caps, 0, consts::SERVER_STATUS_AUTOCOMMIT);
    packet::write_packet(out, &mut seq, &p);
}

fn err(out: &mut BytesMut, mut seq: u8, code: u16, state: &[u8; 5], msg: &str) {
    let mut p = Vec::new();
    resp::encode_err(&mut p, code, state, msg.as_bytes());
    packet::write_packet(out, &mut seq, &p);
}

fn ok(out: &mut BytesMut, caps: u64, mut seq: u8, info: &str) {
    let mut p = Vec::new();
    resp::encode_ok(
        &mut p,
        caps,
        0,
        0,
        consts::SERVER_STATUS_AUTOCOMMIT,
        0,
        info.as_bytes(),
    );
    packet::write_packet(out, &mut seq, &p);
}

async fn commands(shared: Arc<Shared>, mut c: Client, admitted: bool) {
    let max = shared.config.load().general.max_message_size;
    let mut shutdown = shared.shutdown.clone();
    let mut out = BytesMut::new();
    loop {
        let read = read_packet(&mut c.stream, &mut c.buf, max);
        let got = tokio::select! {
            r = read => Some(r),
            _ = shutdown.wait_for(|s| *s) => None,
        };
        let Some(Ok((seq, payload))) = got else {
            if got.is_none() {
                let e = Error::new(Kind::Shutdown, Side::Internal, "Sluice is shutting down");
                c.fatal(1, &e).await;
            }
            return;
        };
        let seq = seq.wrapping_add(1);
        out.clear();
        let (command, rest) = payload.split_first().map_or((0, &[][..]), |(c, r)| (*c, r));
        match command {
            _ if !admitted => {
                let msg = "Access denied; you need (at least one of) the SUPER privilege(s), or to be one of [admin] users, for the admin console";
                err(&mut out, seq, 1227, b"42000", msg);
                let _ = write_all_flush(&mut c.stream, &out).await;
                return;
            }
            consts::COM_QUIT => return,
            consts::COM_PING | consts::COM_INIT_DB => ok(&mut out, c.caps, seq, ""),
            consts::COM_QUERY => {
                let sql = String::from_utf8_lossy(rest);
                match crate::admin::execute(&shared, &sql).await {
                    Ok(Reply::Rows(t)) => rows(&mut out, c.caps, seq, &t),
                    Ok(Reply::Done(text)) => ok(&mut out, c.caps, seq, &text),
                    Err(r) => {
                        let state: &[u8; 5] = if r.syntax { b"42000" } else { b"HY000" };
                        err(&mut out, seq, r.mysql_code(), state, &r.message);
                    }
                }
            }
            _ => err(
                &mut out,
                seq,
                1047,
                b"08S01",
                "Unknown command: the admin console takes text queries only",
            ),
        }
        if write_all_flush(&mut c.stream, &out).await.is_err() {
            return;
        }
    }
}
