//! The admin console over PostgreSQL: a client asking for the virtual database
//! `[admin] pg_database` (default `sluice`) on any PostgreSQL listener gets the console
//! instead of a server, as PgBouncer's `pgbouncer` database. Admitted: the `[admin]
//! users` (their `[users]` password, by SCRAM or md5), and on a pass-through listener a
//! server superuser (`rolsuper`, the server checks the password) connecting from a
//! loopback address. Simple queries only; each answer is an ordinary result set.

use super::{Client, auth};
use crate::admin::{Reply, Table, Type};
use crate::backend::pg::read_whole_frame;
use crate::error::{Error, Kind, Side};
use crate::frontend::ListenerCtx;
use crate::shared::Shared;
use crate::stream::write_all_flush;
use bytes::BytesMut;
use sluice_config::AuthMethod;
use sluice_wire_pg::encode::{self, Severity};
use sluice_wire_pg::msg;
use std::sync::Arc;

/// Whether the startup asks for the console.
pub fn wanted(shared: &Shared, params: &[(String, String)]) -> bool {
    let config = shared.config.load();
    let db = params.iter().find(|(k, _)| k == "database");
    let user = params.iter().find(|(k, _)| k == "user");
    let database = db.or(user).map(|(_, v)| v.as_str());
    database == Some(config.admin.pg_database.as_str())
}

fn refused(user: &str, why: &str) -> Error {
    Error::new(
        Kind::Auth,
        Side::Client,
        format!("user \"{user}\" may not open the admin console: {why}"),
    )
    .with_sqlstate("28000")
}

/// Authenticates an admin and greets it; false (the client told why) when refused.
pub async fn login(
    shared: &Arc<Shared>,
    ctx: &Arc<ListenerCtx>,
    c: &mut Client,
    params: &[(String, String)],
) -> bool {
    let config = shared.config.load_full();
    let user = params
        .iter()
        .find(|(k, _)| k == "user")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let max = config.general.max_message_size;
    let mut out = BytesMut::new();
    if let Some(u) = config
        .users
        .get(&user)
        .filter(|_| config.admin.is_admin(&user))
    {
        if let Err(e) = auth::check(c, AuthMethod::Passthrough, &user, Some(u), max).await {
            c.fatal(&e).await;
            return false;
        }
        encode::auth_ok(&mut out);
    } else if ctx.cfg.logs_in_itself() {
        // The same exchange as a wrong password: who the admins are stays unsaid.
        let e = match auth::check(c, AuthMethod::Passthrough, &user, None, max).await {
            Err(e) => e,
            Ok(()) => refused(&user, "not one of [admin] users"),
        };
        c.fatal(&e).await;
        return false;
    } else {
        let loopback = c
            .stream
            .tcp()
            .peer_addr()
            .is_ok_and(|a| a.ip().to_canonical().is_loopback());
        if !loopback {
            let why = "server superusers may open it from a loopback address only";
            c.fatal(&refused(&user, why)).await;
            return false;
        }
        // The server checks the password; then it is asked whether this is a superuser.
        let target = match crate::session::plan::target_now(shared, &ctx.cfg).await {
            Ok((_, t)) => t,
            Err(e) => {
                c.fatal(&e).await;
                return false;
            }
        };
        let mut server_params: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| k != "database")
            .cloned()
            .collect();
        server_params.push(("database".into(), "postgres".into()));
        let mut ignored = BytesMut::new();
        let mut conn = match auth::passthrough(c, &target, &server_params, &mut ignored).await {
            Ok(conn) => conn,
            Err(crate::backend::pg::LoginError::Server(body)) => {
                encode::message(&mut out, msg::be::ERROR_RESPONSE, |b| {
                    b.extend_from_slice(&body)
                });
                let _ = write_all_flush(&mut c.stream, &out).await;
                return false;
            }
            Err(crate::backend::pg::LoginError::Proxy(e)) => {
                c.fatal(&e).await;
                return false;
            }
        };
        let superuser = conn
            .value("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            .await;
        conn.close();
        if !matches!(superuser, Ok(Some(ref v)) if v == "t") {
            c.fatal(&refused(
                &user,
                "not a server superuser nor one of [admin] users",
            ))
            .await;
            return false;
        }
    }
    for (k, v) in [
        ("server_version", "15.0 (Sluice admin console)"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        ("application_name", "sluice"),
    ] {
        encode::parameter_status(&mut out, k, v);
    }
    encode::backend_key(&mut out, shared.next_pid(), rand::random());
    encode::ready_for_query(&mut out, b'I');
    tracing::info!(%user, listener = %ctx.cfg.name, "admin console opened");
    write_all_flush(&mut c.stream, &out).await.is_ok()
}

/// Encodes a table as RowDescription, DataRows and CommandComplete.
fn rows(out: &mut BytesMut, t: &Table) {
    let columns: Vec<(&str, u32)> = t
        .columns
        .iter()
        .map(|(name, ty)| {
            let oid = match ty {
                Type::Int => encode::OID_INT8,
                Type::Float => encode::OID_FLOAT8,
                Type::Text => encode::OID_TEXT,
            };
            (*name, oid)
        })
        .collect();
    encode::row_description(out, &columns);
    for r in &t.rows {
        let cells: Vec<Option<String>> = r.iter().map(|c| c.text()).collect();
        encode::data_row(out, cells.iter().map(|c| c.as_deref().map(str::as_bytes)));
    }
    encode::command_complete(out, &format!("SELECT {}", t.rows.len()));
}

/// Serves console commands until the client leaves or Sluice shuts down.
pub async fn serve(shared: Arc<Shared>, mut c: Client) {
    let max = shared.config.load().general.max_message_size;
    let mut shutdown = shared.shutdown.clone();
    let mut out = BytesMut::new();
    // After an error in an extended-protocol batch, messages up to Sync are skipped.
    let mut skipping = false;
    loop {
        let read = read_whole_frame(&mut c.stream, &mut c.buf, max, Side::Client);
        let got = tokio::select! {
            r = read => Some(r),
            _ = shutdown.wait_for(|s| *s) => None,
        };
        let (tag, body) = match got {
            Some(Ok(f)) => f,
            Some(Err(_)) => return,
            None => {
                let e = Error::new(Kind::Shutdown, Side::Internal, "Sluice is shutting down")
                    .with_sqlstate("57P01");
                c.fatal(&e).await;
                return;
            }
        };
        out.clear();
        match tag {
            msg::fe::QUERY => {
                let sql = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body));
                if sql.trim().is_empty() {
                    encode::message(&mut out, msg::be::EMPTY_QUERY, |_| {});
                } else {
                    match crate::admin::execute(&shared, &sql).await {
                        Ok(Reply::Rows(t)) => rows(&mut out, &t),
                        Ok(Reply::Done(text)) => {
                            encode::notice(&mut out, &text);
                            let tag = sql.split_whitespace().next().unwrap_or("OK").to_uppercase();
                            encode::command_complete(&mut out, &tag);
                        }
                        Err(r) => {
                            encode::error(&mut out, Severity::Error, r.sqlstate(), &r.message)
                        }
                    }
                }
                encode::ready_for_query(&mut out, b'I');
            }
            msg::fe::TERMINATE => return,
            msg::fe::SYNC => {
                skipping = false;
                encode::ready_for_query(&mut out, b'I');
            }
            msg::fe::FLUSH => {}
            _ if skipping => {}
            _ => {
                skipping = true;
                let text = "the admin console speaks the simple query protocol only (psql, or a driver's simple query call)";
                encode::error(&mut out, Severity::Error, "0A000", text);
            }
        }
        if !out.is_empty() && write_all_flush(&mut c.stream, &out).await.is_err() {
            return;
        }
    }
}
