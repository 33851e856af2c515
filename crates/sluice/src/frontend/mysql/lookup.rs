//! Pass-through users of a MySQL listener with `auth_user`: Sluice runs the listener's
//! `auth_query` (a prepared statement, the client's user name bound as its parameter) as
//! the auth user on the server the client's login was routed to, and reads the
//! account's plugin and stored hash. A `mysql_native_password` account is checked by
//! Sluice itself against the hash (auth.rs), and the client's reply yields SHA1 of the
//! password, with which Sluice logs in to every server of the cluster as that user
//! (ProxySQL's way). Accounts of other plugins cannot be served this way.

use crate::backend::mysql::Opener;
use crate::backend::{Credentials, LoginError, Target};
use crate::error::Error;
use crate::frontend::ListenerCtx;
use crate::shared::Shared;
use sluice_wire_mysql::{auth, consts, resp};
use std::sync::Arc;

/// What Sluice asks of the server for its lookup connections.
const LOOKUP_CAPS: u64 = consts::CLIENT_LONG_PASSWORD
    | consts::CLIENT_PROTOCOL_41
    | consts::CLIENT_TRANSACTIONS
    | consts::CLIENT_SECURE_CONNECTION
    | consts::CLIENT_PLUGIN_AUTH;

/// What the server stores for a user, as `auth_query` returns it.
pub(super) enum Stored {
    /// No such account: refused like a wrong password, after the same exchange.
    Unknown,
    /// A mysql_native_password account: SHA1(SHA1(password)), or `None` for an
    /// account without a password.
    Native(Option<[u8; 20]>),
    /// An account whose plugin Sluice cannot check (ed25519, caching_sha2_password,
    /// unix_socket, ...), or whose hash is malformed: named in the refusal.
    Other(String),
}

/// Looks up what the server stores for `user` on `target` as the listener's auth user.
pub(super) async fn stored(
    shared: &Shared,
    ctx: &ListenerCtx,
    target: &Target,
    user: &str,
) -> Result<Stored, Error> {
    lookup(shared, ctx, target, user).await.map_err(|why| {
        tracing::warn!(listener = %ctx.cfg.name, %user, server = %target.addr(), %why, "auth_query failed");
        let msg = format!("Sluice could not look up the account of user '{user}': {why}");
        Error::server_gone(msg).with_sqlstate("08001")
    })
}

async fn lookup(
    shared: &Shared,
    ctx: &ListenerCtx,
    target: &Target,
    user: &str,
) -> Result<Stored, String> {
    let config = shared.config.load();
    let Some(q) = ctx.cfg.auth_query.as_ref() else {
        return Ok(Stored::Unknown);
    };
    let pools = &shared.my.pools;
    let plan = crate::session::plan::lookup_pool(
        shared,
        &ctx.cfg,
        &config,
        target,
        pools,
        "",
        "COM_RESET_CONNECTION",
    );
    let Some((pool, auth_user)) = plan else {
        return Err(format!("auth_user {:?} is not in [users]", q.user));
    };
    if !pool.can_open() {
        pool.set_opener(Arc::new(Opener {
            target: target.clone(),
            creds: Credentials::of_user(auth_user),
            database: String::new(),
            caps: LOOKUP_CAPS,
            charset: consts::UTF8MB4_GENERAL_CI,
        }));
    }
    let lease = pool.lease().await.map_err(|e| match e {
        LoginError::Server(p) => {
            let m = resp::err_message(&p).unwrap_or_default();
            format!("the server refused auth_user {:?}: {m}", q.user)
        }
        LoginError::Proxy(e) => e.to_string(),
    })?;
    let Some(columns) = crate::backend::lookup(lease, &q.query, &[user]).await? else {
        return Ok(Stored::Unknown);
    };
    let [plugin, hash] = &columns[..] else {
        return Err("auth_query must return two columns: plugin, authentication_string".into());
    };
    let plugin = plugin.as_deref().unwrap_or_default();
    let hash = hash.as_deref().unwrap_or_default();
    let native = String::from_utf8_lossy(auth::MYSQL_NATIVE_PASSWORD);
    // MySQL before 5.7 and MariaDB before 10.4 could leave the plugin empty.
    if plugin != native && !(plugin.is_empty() && (hash.is_empty() || hash.starts_with('*'))) {
        let plugin = if plugin.is_empty() { "?" } else { plugin };
        return Ok(Stored::Other(plugin.to_owned()));
    }
    if hash.is_empty() {
        return Ok(Stored::Native(None));
    }
    match auth::parse_native_hex(hash) {
        Some(stored) => Ok(Stored::Native(Some(stored))),
        None => Ok(Stored::Other(
            "a malformed mysql_native_password hash".into(),
        )),
    }
}
