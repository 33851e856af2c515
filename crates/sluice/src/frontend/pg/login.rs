//! From a StartupMessage to a ready session: protocol version, routing, authentication
//! (pass-through, against `[users]`, or against the secret the server stores, looked up
//! with `auth_query`), the first server connection, ParameterStatus, Sluice's own
//! BackendKeyData, ReadyForQuery.

use super::{Client, auth};
use crate::backend::pg::{Credentials, LoginError, Opener};
use crate::error::{Error, Kind, Side};
use crate::frontend::ListenerCtx;
use crate::session::driver::Seat;
use crate::session::pg::{Admitted, Session, replay};
use crate::shared::Shared;
use crate::stream::write_all_flush;
use bytes::{BufMut, BytesMut};
use sluice_config::{AuthMethod, PoolMode};
use sluice_wire_pg::encode;
use std::sync::Arc;

async fn fail(c: &mut Client, e: LoginError) {
    match e {
        LoginError::Server(body) => {
            let mut out = BytesMut::new();
            encode::message(&mut out, b'E', |b| b.put_slice(&body));
            let _ = write_all_flush(&mut c.stream, &out).await;
        }
        LoginError::Proxy(e) => c.fatal(&e).await,
    }
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

pub async fn login(
    shared: &Arc<Shared>,
    ctx: &Arc<ListenerCtx>,
    c: &mut Client,
    mut params: Vec<(String, String)>,
    version: i32,
) -> Option<Admitted> {
    let mut out = BytesMut::new();
    if version >> 16 != 3 {
        let e = Error::new(
            Kind::Unsupported,
            Side::Client,
            format!(
                "unsupported frontend protocol {}.{}: server supports 3.0 to 3.0",
                version >> 16,
                version & 0xffff
            ),
        )
        .with_sqlstate("0A000");
        c.fatal(&e).await;
        return None;
    }
    // Protocol extensions (3.x minor versions, _pq_ options) are declined as a server does.
    let unknown: Vec<String> = params
        .iter()
        .filter(|(k, _)| k.starts_with("_pq_."))
        .map(|(k, _)| k.clone())
        .collect();
    if version & 0xffff != 0 || !unknown.is_empty() {
        encode::message(&mut out, b'v', |b| {
            b.put_i32(0);
            b.put_i32(unknown.len() as i32);
            for k in &unknown {
                b.put_slice(k.as_bytes());
                b.put_u8(0);
            }
        });
        params.retain(|(k, _)| !k.starts_with("_pq_."));
    }
    let Some(user) = param(&params, "user").map(str::to_owned) else {
        let e = Error::new(
            Kind::Auth,
            Side::Client,
            "no PostgreSQL user name specified in startup packet",
        )
        .with_sqlstate("28000");
        c.fatal(&e).await;
        return None;
    };
    if !params.iter().any(|(k, _)| k == "database") {
        params.push(("database".into(), user.clone()));
    }
    let database = param(&params, "database").unwrap_or_default().to_owned();
    if param(&params, "replication").is_some_and(|v| !matches!(v, "false" | "0" | "off" | "no")) {
        let e = Error::new(
            Kind::Unsupported,
            Side::Client,
            "replication connections are not supported through Sluice",
        );
        c.fatal(&e).await;
        return None;
    }

    let routed = match crate::session::plan::target(shared, &ctx.cfg).await {
        Ok(t) => t,
        Err(e) => {
            c.fatal(&e).await;
            return None;
        }
    };
    let plan = match crate::session::plan::plan(
        shared,
        &ctx.cfg,
        routed,
        &shared.pg.pools,
        (&user, &database),
        replay::shaping_params(&params),
        "DISCARD ALL",
    ) {
        Ok(p) => p,
        Err(e) => {
            c.fatal(&e).await;
            return None;
        }
    };
    let (target, pool, server_user) = (
        plan.target.clone(),
        plan.pool.clone(),
        plan.server_user.clone(),
    );
    let user_cfg = plan.user_cfg(&user);
    // Whether the client keeps the server connection it logs in with (session mode,
    // `assign_server = "login"`, or pass-through users, whom Sluice cannot log in for
    // later); otherwise it gets one at its first statement.
    let hold = plan.config.pool_for(&ctx.cfg).server_at_login()
        || (plan.mode == PoolMode::Session && !ctx.cfg.logs_in_itself());
    // Pass-through: the server checks the client, unless the listener has auth_user.
    let lease = if !ctx.cfg.logs_in_itself() {
        if !out.is_empty() {
            let _ = write_all_flush(&mut c.stream, &out).await;
            out.clear();
        }
        match auth::passthrough(c, &target, &params, &mut out).await {
            Ok(conn) => {
                pool.set_welcome(&conn.reported);
                Some(pool.adopt(conn))
            }
            Err(e) => {
                fail(c, e).await;
                return None;
            }
        }
    } else {
        let creds = match user_cfg {
            // A pass-through user of a listener with auth_user: checked against what
            // the server stores.
            None if ctx.cfg.auth == AuthMethod::Passthrough => {
                if !out.is_empty() {
                    let _ = write_all_flush(&mut c.stream, &out).await;
                    out.clear();
                }
                let names = (user.as_str(), database.as_str());
                match super::lookup::admit(shared, ctx, c, &target, names).await {
                    Ok(creds) => creds,
                    Err(e) => {
                        c.fatal(&e).await;
                        return None;
                    }
                }
            }
            _ => {
                let max = target.max_message;
                if let Err(e) = auth::check(c, ctx.cfg.auth, &user, user_cfg, max).await {
                    c.fatal(&e).await;
                    return None;
                }
                match user_cfg {
                    Some(u) => Credentials::of_user(u),
                    None => Credentials::password(server_user.clone(), None),
                }
            }
        };
        if let Some(u) = user_cfg.filter(|u| !u.may_use_database(&database)) {
            let e = Error::new(
                Kind::Auth,
                Side::Client,
                format!(
                    "user \"{}\" may not connect to database \"{database}\"",
                    u.name
                ),
            )
            .with_sqlstate("28000");
            c.fatal(&e).await;
            return None;
        }
        let server_params = replay::opener_params(&params, &server_user);
        pool.set_opener(Arc::new(Opener {
            target: target.clone(),
            params: server_params,
            creds,
        }));
        encode::auth_ok(&mut out);
        match pool.welcome() {
            // A client that gets its server connection later needs none to log in once
            // the pool knows what a server says at login.
            Some(welcome) if !hold => {
                for (k, v) in &replay::client_view(&welcome, &params) {
                    encode::parameter_status(&mut out, k, v);
                }
                None
            }
            _ => {
                let mut lease = match pool.lease().await {
                    Ok(l) => l,
                    Err(e) => {
                        fail(c, e).await;
                        return None;
                    }
                };
                pool.set_welcome(&lease.reported);
                if let Err(e) = replay::apply_startup_params(&mut lease, &params).await {
                    c.fatal(&e).await;
                    lease.discard();
                    return None;
                }
                for (k, v) in lease.reported.iter() {
                    encode::parameter_status(&mut out, k, v);
                }
                Some(lease)
            }
        }
    };
    let client_params = shared.pg_views.intern(match &lease {
        Some(l) => std::collections::BTreeMap::clone(&l.reported),
        None => replay::client_view(&pool.welcome().unwrap_or_default(), &params),
    });
    // Others may name a client known by a process id of Sluice's (no server has it)
    // in pg_cancel_backend / pg_terminate_backend.
    let (pid, virtual_pid) = match &lease {
        Some(l) if hold => (l.pid, false),
        _ => (shared.next_pid(), true),
    };
    let names = crate::session::clients::Names::of(shared, &ctx.cfg.name, &user, &database);
    let client = crate::session::clients::logged_in(
        shared,
        crate::session::clients::Arrival {
            protocol: sluice_config::Protocol::Postgres,
            names: names.clone(),
            pid: i64::from(pid),
            mode: plan.mode,
            tcp: c.stream.tcp(),
        },
    );
    let virtual_of = virtual_pid.then(|| client.info.clone());
    let cancel = shared.cancels.register(pid, virtual_of);
    encode::backend_key(&mut out, cancel.key.0, cancel.key.1);
    encode::ready_for_query(&mut out, b'I');
    if let Err(e) = write_all_flush(&mut c.stream, &out).await {
        tracing::debug!(error = %e, "client went away during login");
        if let Some(l) = lease {
            l.put_back();
        }
        return None;
    }
    // Read once from the socket, for the client book (system call per login saved).
    let peer = client.info.addr.map(|a| a.ip());
    let mut seat = Seat {
        client: Some(client),
        mode: plan.mode,
        cfg: ctx.cfg.clone(),
        pool,
        lease,
        route: crate::session::reroute::RouteMark::at_login(shared, &ctx.cfg),
        max_message: target.max_message,
        judging: crate::session::judge::Judging::at_login(
            shared,
            &shared.pg.rules,
            &names,
            &ctx.cfg,
            peer,
        ),
    };
    if !hold && let Some(mut l) = seat.lease.take() {
        l.stamps.last_used = std::time::Instant::now();
        l.put_back();
    }
    cancel.slot.set(seat.lease.as_ref().map(|l| l.key.clone()));
    let session = Session {
        cancel,
        client_params,
        client_fp: crate::session::pg::UNKNOWN_FP,
    };
    Some((seat, session))
}
