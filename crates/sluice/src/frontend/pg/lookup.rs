//! Pass-through users of a listener with `auth_user` (PgBouncer's `auth_user` /
//! `auth_query`): Sluice runs the listener's `auth_query` as the auth user on the server
//! the client's login was routed to, with the client's user name bound as its parameter,
//! and checks the client against the secret it returns (auth.rs `check_stored`). The
//! client's proof leaves Sluice what it needs to log in to every server of the cluster
//! as that user, so its pool opens connections by itself and its sessions can move.

use super::{Client, auth};
use crate::backend::pg::{Credentials, LoginError, Opener, Target};
use crate::error::Error;
use crate::frontend::ListenerCtx;
use crate::shared::Shared;
use sluice_config::Secret;
use std::sync::Arc;

/// Looks up and checks `user` on a listener with `auth_user`: what Sluice logs in to
/// servers with for this user.
pub(super) async fn admit(
    shared: &Shared,
    ctx: &ListenerCtx,
    c: &mut Client,
    target: &Target,
    (user, database): (&str, &str),
) -> Result<Credentials, Error> {
    let stored = match stored_secret(shared, ctx, target, user, database).await {
        Ok(s) => s,
        Err(why) => {
            tracing::warn!(listener = %ctx.cfg.name, %user, server = %target.addr(), %why, "auth_query failed");
            let msg = format!("Sluice could not look up the password of user \"{user}\": {why}");
            return Err(Error::server_gone(msg).with_sqlstate("08001"));
        }
    };
    let key = auth::check_stored(c, user, stored, target.max_message).await?;
    Ok(Credentials::proven(user, key))
}

/// The secret the server stores for `user` (None: no such role, or NULL), as
/// `auth_query` returns it in its second column, run as the auth user on a pooled
/// connection to `database`.
async fn stored_secret(
    shared: &Shared,
    ctx: &ListenerCtx,
    target: &Target,
    user: &str,
    database: &str,
) -> Result<Option<Secret>, String> {
    let config = shared.config.load();
    let Some(q) = ctx.cfg.auth_query.as_ref() else {
        return Ok(None);
    };
    let pools = &shared.pg.pools;
    let Some((pool, auth_user)) = crate::session::plan::lookup_pool(
        shared,
        &ctx.cfg,
        &config,
        target,
        pools,
        database,
        "DISCARD ALL",
    ) else {
        return Err(format!("auth_user {:?} is not in [users]", q.user));
    };
    if !pool.can_open() {
        let creds = Credentials::of_user(auth_user);
        let params = vec![
            ("user".to_owned(), creds.user.clone()),
            ("database".to_owned(), database.to_owned()),
        ];
        pool.set_opener(Arc::new(Opener {
            target: target.clone(),
            params,
            creds,
        }));
    }
    let lease = pool.lease().await.map_err(|e| match e {
        LoginError::Server(body) => {
            let m = sluice_wire_pg::msg::error_field(&body, b'M').unwrap_or("refused");
            format!("the server refused auth_user {:?}: {m}", q.user)
        }
        LoginError::Proxy(e) => e.to_string(),
    })?;
    let Some(columns) = crate::backend::lookup(lease, &q.query, &[user]).await? else {
        return Ok(None);
    };
    let Some(text) = columns.into_iter().nth(1) else {
        return Err("auth_query must return two columns: name, password".into());
    };
    let Some(text) = text else {
        return Ok(None);
    };
    match Secret::parse(&text) {
        Ok(s @ (Secret::Scram(_) | Secret::Md5 { .. } | Secret::Plain(_))) => Ok(Some(s)),
        Ok(other) => {
            let kind = other.kind();
            tracing::warn!(listener = %ctx.cfg.name, %user, kind, "the server stores a secret of a form Sluice cannot check: the login fails");
            Ok(None)
        }
        Err(_) => {
            tracing::warn!(listener = %ctx.cfg.name, %user, "the server stores a malformed secret: the login fails");
            Ok(None)
        }
    }
}
