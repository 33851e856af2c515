//! COM_CHANGE_USER where Sluice checks clients itself (configured users; pass-through
//! users of a listener with `auth_user`, looked up again), the admission part: the
//! client is authenticated again (the command's answer against the login's scramble,
//! else an auth switch with a fresh scramble; the same checks as at login) and the new
//! user's pool is planned. The session does the rest (session/mysql/change_user.rs).

use super::auth::{Exchange, access_denied, database_denied, opener, server_greeting, unsupported};
use super::lookup::Stored;
use crate::frontend::ListenerCtx;
use crate::session::driver::End;
use crate::session::mysql::change_user::{NewUser, Readmit};
use crate::session::mysql::errors::{queue_err, queue_error};
use crate::session::pump::Pump;
use crate::shared::Shared;
use sluice_config::AuthMethod;
use sluice_wire_mysql::auth as scramble;
use sluice_wire_mysql::consts;
use sluice_wire_mysql::handshake::ChangeUser;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

impl Readmit for ListenerCtx {
    fn readmit<'a>(
        &'a self,
        shared: &'a Arc<Shared>,
        io: &'a mut Pump,
        cu: ChangeUser,
        login: (u64, Option<[u8; 20]>),
        max_message: usize,
    ) -> Pin<Box<dyn Future<Output = Result<Option<NewUser>, End>> + Send + 'a>> {
        Box::pin(readmit(self, shared, io, cu, login, max_message))
    }
}

async fn readmit(
    ctx: &ListenerCtx,
    shared: &Arc<Shared>,
    io: &mut Pump,
    cu: ChangeUser,
    (caps, login_salt): (u64, Option<[u8; 20]>),
    max_message: usize,
) -> Result<Option<NewUser>, End> {
    let (config, target) = match crate::session::plan::target(shared, &ctx.cfg).await {
        Ok(t) => t,
        Err(e) => {
            queue_error(&mut io.to_client, 1, &e);
            return Ok(None);
        }
    };
    let user = String::from_utf8_lossy(&cu.username).into_owned();
    let database = String::from_utf8_lossy(&cu.database).into_owned();
    let user_cfg = config.users.get(&user);
    // A pass-through user of a listener with auth_user: what the server stores for it.
    let stored = match user_cfg {
        None if ctx.cfg.auth == AuthMethod::Passthrough => {
            match super::lookup::stored(shared, ctx, &target, &user).await {
                Ok(Stored::Other(plugin)) => {
                    tracing::warn!(listener = %ctx.cfg.name, %user, %plugin, "change of user refused: auth_query found an account Sluice cannot check");
                    let msg = unsupported(&user, &plugin);
                    let code = consts::ER_ACCESS_DENIED_ERROR;
                    queue_err(&mut io.to_client, 1, code, "28000", &msg);
                    return Ok(None);
                }
                Ok(s) => Some(s),
                Err(e) => {
                    queue_error(&mut io.to_client, 1, &e);
                    return Ok(None);
                }
            }
        }
        _ => None,
    };
    let stored = stored.as_ref();
    let plugin: &[u8] = match ctx.cfg.auth {
        AuthMethod::CachingSha2Password => scramble::CACHING_SHA2_PASSWORD,
        _ => scramble::MYSQL_NATIVE_PASSWORD,
    };
    // The answer in the command was made for the login's scramble, and a server checks
    // it so (some clients, Connector/C among them, answer an auth switch with that same
    // answer again). mysql_native_password decides without asking anything more.
    let mut accepted = None;
    if let Some(salt) = login_salt.as_ref()
        && plugin == scramble::MYSQL_NATIVE_PASSWORD
        && cu.auth_plugin.as_deref().is_none_or(|p| p == plugin)
    {
        let mut ex = Exchange {
            stream: &mut io.client,
            buf: &mut io.cbuf,
            seq: 1,
            salt,
            max: max_message,
        };
        let first = Some(&cu.auth_response[..]);
        let checked = ex.admit(ctx, stored, user_cfg, &user, plugin, first).await;
        accepted = checked.flatten().map(|creds| (creds, 1));
    }
    // Otherwise (another plugin, a wrong answer): an auth switch with a fresh scramble.
    let (creds, seq) = match accepted {
        Some(a) => a,
        None => {
            let salt: [u8; 20] = std::array::from_fn(|_| rand::random_range(b'!'..=b'~'));
            let mut ex = Exchange {
                stream: &mut io.client,
                buf: &mut io.cbuf,
                seq: 1,
                salt: &salt,
                max: max_message,
            };
            let checked = ex.admit(ctx, stored, user_cfg, &user, plugin, None).await;
            let seq = ex.seq;
            match checked {
                None => return Err(End::ClientLeft),
                Some(None) => {
                    let msg = access_denied(&user, !cu.auth_response.is_empty());
                    let code = consts::ER_ACCESS_DENIED_ERROR;
                    queue_err(&mut io.to_client, seq, code, "28000", &msg);
                    return Ok(None);
                }
                Some(Some(creds)) => (creds, seq),
            }
        }
    };
    if let Some(msg) = database_denied(user_cfg, &database) {
        let code = consts::ER_DBACCESS_DENIED_ERROR;
        queue_err(&mut io.to_client, seq, code, "42000", &msg);
        return Ok(None);
    }
    let charset = cu
        .charset
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(consts::UTF8MB4_GENERAL_CI);
    let plan = match super::login::plan(
        shared,
        ctx,
        (config.clone(), target.clone()),
        &user,
        &database,
        caps,
        charset,
    ) {
        Ok(p) => p,
        Err(e) => {
            queue_error(&mut io.to_client, seq, &e);
            return Ok(None);
        }
    };
    if let Ok(hs) = server_greeting(&ctx.mysql, &target).await {
        plan.pool.set_welcome(&hs);
    }
    let max_message = plan.target.max_message;
    plan.pool
        .set_opener(opener(creds, &database, target, caps, charset));
    Ok(Some(NewUser {
        user,
        hold: plan.config.pool_for(&ctx.cfg).server_at_login(),
        pool: plan.pool,
        mode: plan.mode,
        max_message,
        seq,
    }))
}
