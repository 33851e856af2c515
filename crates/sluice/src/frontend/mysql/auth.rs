//! Authentication by Sluice itself on MySQL listeners: Sluice greets the client with its
//! own scramble and checks the answer against the configured secret of a `[users]`
//! entry, or (a listener with `auth_user`) against the mysql_native_password hash the
//! server stores for a pass-through user, keeping the key the reply yields:
//! mysql_native_password, or caching_sha2_password (the fast path once a user has
//! logged in since start; before that the full authentication: the password in clear
//! over TLS, or RSA-encrypted with Sluice's public key over plain TCP). The client's
//! server connections come from the pool, which logs in with the user's server
//! credentials.

use super::Client;
use super::login::{Arrival, FirstConn, finish, greet_client, read_client, send};
use super::lookup::Stored;
use crate::backend::mysql::Opener;
use crate::backend::{Credentials, LoginError, LoginKey, Target};
use crate::error::Error;
use crate::frontend::ListenerCtx;
use crate::shared::Shared;
use crate::stream::Stream;
use bytes::BytesMut;
use sluice_config::{AuthMethod, Config, Secret, User};
use sluice_wire_mysql::auth as scramble;
use sluice_wire_mysql::handshake::{AuthSwitchRequest, HandshakeV10};
use sluice_wire_mysql::{consts, resp};
use std::sync::Arc;

pub(super) async fn login(
    shared: &Arc<Shared>,
    ctx: &Arc<ListenerCtx>,
    mut c: Client,
    config: Arc<Config>,
    target: Target,
) -> Option<(crate::session::mysql::Admitted, Client)> {
    let max = config.general.max_message_size;
    let hs = match server_greeting(&ctx.mysql, &target).await {
        Ok(h) => h,
        Err(e) => {
            c.fatal(0, &e).await;
            return None;
        }
    };
    let salt: [u8; 20] = std::array::from_fn(|_| rand::random_range(b'!'..=b'~'));
    let plugin: &[u8] = match ctx.cfg.auth {
        AuthMethod::CachingSha2Password => scramble::CACHING_SHA2_PASSWORD,
        _ => scramble::MYSQL_NATIVE_PASSWORD,
    };
    let id = shared.next_pid() as u32;
    let greeting = HandshakeV10 {
        connection_id: id,
        auth_plugin_data: salt.to_vec(),
        auth_plugin_name: plugin.to_vec(),
        ..(*hs).clone()
    };
    let (mut c, cseq, hello, offer) = greet_client(c, ctx, greeting, max).await?;
    let client_caps = hello.capabilities & offer;
    c.caps = client_caps;
    let (user, database) = super::login::names(&hello);
    let user_cfg = config.users.get(&user);
    // A pass-through user of a listener with auth_user: checked against what the
    // server stores for it.
    let stored = match user_cfg {
        None if ctx.cfg.auth == AuthMethod::Passthrough => {
            let seq = cseq.wrapping_add(1);
            match super::lookup::stored(shared, ctx, &target, &user).await {
                Ok(Stored::Other(plugin)) => {
                    let msg = unsupported(&user, &plugin);
                    tracing::warn!(listener = %ctx.cfg.name, %user, %plugin, "refused: auth_query found an account Sluice cannot check");
                    c.fatal_code(seq, consts::ER_ACCESS_DENIED_ERROR, "28000", &msg)
                        .await;
                    return None;
                }
                Ok(s) => Some(s),
                Err(e) => {
                    c.fatal(seq, &e).await;
                    return None;
                }
            }
        }
        _ => None,
    };
    let mut ex = Exchange {
        stream: &mut c.stream,
        buf: &mut c.buf,
        seq: cseq.wrapping_add(1),
        salt: &salt,
        max,
    };
    let used_password = !hello.auth_response.is_empty();
    // An answer made for another plugin is no answer: the client is asked again.
    let first = hello
        .auth_plugin
        .as_deref()
        .is_none_or(|p| p == plugin)
        .then_some(&hello.auth_response[..]);
    let verdict = ex
        .admit(ctx, stored.as_ref(), user_cfg, &user, plugin, first)
        .await;
    let seq = ex.seq;
    let Some(Some(creds)) = verdict else {
        if verdict.is_some() {
            let msg = access_denied(&user, used_password);
            c.fatal_code(seq, consts::ER_ACCESS_DENIED_ERROR, "28000", &msg)
                .await;
        }
        return None;
    };
    if let Some(msg) = database_denied(user_cfg, &database) {
        c.fatal_code(seq, consts::ER_DBACCESS_DENIED_ERROR, "42000", &msg)
            .await;
        return None;
    }
    let routed = (config.clone(), target.clone());
    let opener = opener(creds, &database, target, client_caps, hello.charset);
    let arrival = Arrival {
        user,
        database,
        client_caps,
        charset: hello.charset,
        id,
        welcome: (*hs).clone(),
        lease: FirstConn::Pool(opener),
        scramble: Some(salt),
        routed,
    };
    // Whether the client keeps a server connection from login (session mode with
    // `assign_server = "login"`) or gets one at its first statement.
    let hold = config.pool_for(&ctx.cfg).server_at_login();
    let (mut c, (mut seat, session)) = finish(shared, ctx, c, arrival).await?;
    // A first server connection proves the server accepts this user and database; once
    // the pool has one, logins that do not keep one need none.
    if hold || seat.pool.counts().0 == 0 {
        match seat.pool.lease().await {
            Ok(l) => seat.lease = Some(l),
            Err(LoginError::Server(err)) => {
                let _ = send(&mut c.stream, seq, &err).await;
                return None;
            }
            Err(LoginError::Proxy(e)) => {
                c.fatal(seq, &e).await;
                return None;
            }
        }
        if !hold && let Some(l) = seat.lease.take() {
            l.put_back();
        }
        session
            .kill
            .set_server(seat.lease.as_ref().map(|l| l.conn.id));
    }
    let mut ok = Vec::new();
    resp::encode_ok(
        &mut ok,
        client_caps,
        0,
        0,
        consts::SERVER_STATUS_AUTOCOMMIT,
        0,
        b"",
    );
    send(&mut c.stream, seq, &ok).await.ok()?;
    Some(((seat, session), c.start_compression()))
}

/// The message of error 1045, as a server words it.
pub(super) fn access_denied(user: &str, used_password: bool) -> String {
    let yes = if used_password { "YES" } else { "NO" };
    format!("Access denied for user '{user}'@'sluice' (using password: {yes})")
}

/// The message of error 1044 when the user may not use the database.
pub(super) fn database_denied(user_cfg: Option<&User>, database: &str) -> Option<String> {
    let u = user_cfg.filter(|u| !u.may_use_database(database))?;
    Some(format!(
        "Access denied for user '{}'@'sluice' to database '{database}'",
        u.name
    ))
}

/// The message of error 1045 for an account Sluice cannot check through `auth_query`.
pub(super) fn unsupported(user: &str, plugin: &str) -> String {
    format!(
        "Access denied for user '{user}'@'sluice': the account uses {plugin}, which Sluice \
         cannot check for a pass-through user (only mysql_native_password accounts)"
    )
}

/// How the pool logs in to the server for a configured user.
pub(super) fn creds_of(user_cfg: Option<&User>, user: &str) -> Credentials {
    match user_cfg {
        Some(u) => Credentials::of_user(u),
        None => Credentials::password(user, None),
    }
}

/// How the pool logs in to the server for a client's user and database.
pub(super) fn opener(
    creds: Credentials,
    database: &str,
    target: Target,
    client_caps: u64,
    charset: u8,
) -> Arc<Opener> {
    Arc::new(Opener {
        target,
        creds,
        database: database.to_owned(),
        caps: client_caps & !consts::CLIENT_SSL,
        charset,
    })
}

/// What the server says at login (version, capabilities, charset), for greeting
/// clients: remembered per server, else read from a short-lived connection.
pub(super) async fn server_greeting(
    front: &super::SharedState,
    t: &Target,
) -> Result<Arc<HandshakeV10>, Error> {
    let addr = t.addr();
    if let Some(h) = front.greetings.lock().get(&addr) {
        return Ok(h.clone());
    }
    // A short-lived connection: it counts in the server's budget while it lives.
    let (_stream, _buf, p, _permit) = crate::backend::mysql::open_greeting(t).await?;
    let hs = HandshakeV10::parse(&p).ok_or_else(|| {
        let why = resp::err_message(&p).unwrap_or_else(|| "malformed handshake".into());
        Error::server_gone(format!("server {addr} refused a connection: {why}"))
    })?;
    let hs = Arc::new(hs);
    front.greetings.lock().insert(addr, hs.clone());
    Ok(hs)
}

/// One client's authentication exchange.
pub(super) struct Exchange<'a> {
    pub stream: &'a mut Stream,
    pub buf: &'a mut BytesMut,
    /// Sequence id of Sluice's next packet.
    pub seq: u8,
    pub salt: &'a [u8; 20],
    pub max: usize,
}

impl Exchange<'_> {
    async fn send(&mut self, payload: &[u8]) -> Option<()> {
        self.seq = send(self.stream, self.seq, payload).await.ok()?;
        Some(())
    }

    async fn read(&mut self) -> Option<Vec<u8>> {
        let (s, p) = read_client(self.stream, self.buf, self.max).await?;
        self.seq = s.wrapping_add(1);
        Some(p.to_vec())
    }

    /// Some(true): authenticated; Some(false): refused; None: the client left. `first`
    /// is the client's answer to the salt with `plugin`; without one the client is
    /// asked (an auth switch request).
    pub(super) async fn check(
        &mut self,
        front: &super::SharedState,
        method: AuthMethod,
        user_cfg: Option<&User>,
        user: &str,
        plugin: &[u8],
        first: Option<&[u8]>,
    ) -> Option<bool> {
        if method == AuthMethod::Trust {
            return Some(user_cfg.is_some());
        }
        // The answer is asked for before the user is looked up: an unknown user is
        // refused at the same step as a wrong password.
        let answer = self.answer(plugin, first).await?;
        let Some(u) = user_cfg else {
            return Some(false);
        };
        let secret = u.password.as_ref();
        if method == AuthMethod::CachingSha2Password {
            return self.sha2(front, user, secret, &answer).await;
        }
        Some(match secret {
            Some(Secret::Plain(p)) if p.is_empty() => answer.is_empty(),
            Some(Secret::Plain(p)) => {
                scramble::native_verify(&scramble::native_stored(p.as_bytes()), self.salt, &answer)
            }
            Some(Secret::MysqlNative { stored }) => {
                scramble::native_verify(stored, self.salt, &answer)
            }
            _ => false,
        })
    }

    /// Checks a client: a pass-through user against what the server stores
    /// (`stored`), else against `[users]` with the listener's method. Some(Some(how
    /// Sluice logs in for it)) when accepted, Some(None) when refused, None when the
    /// client left. `first` as for [`Exchange::check`].
    pub(super) async fn admit(
        &mut self,
        ctx: &ListenerCtx,
        stored: Option<&Stored>,
        user_cfg: Option<&User>,
        user: &str,
        plugin: &[u8],
        first: Option<&[u8]>,
    ) -> Option<Option<Credentials>> {
        match stored {
            Some(stored) => {
                let key = self.native_key(stored, first).await?;
                Some(key.map(|key| Credentials::proven(user, key)))
            }
            None => {
                let method = ctx.cfg.auth;
                let ok = self
                    .check(&ctx.mysql, method, user_cfg, user, plugin, first)
                    .await?;
                Some(ok.then(|| creds_of(user_cfg, user)))
            }
        }
    }

    /// A pass-through user against what the server stores (mysql_native_password):
    /// Some(Some(key)) when the client's reply is right (the key it yields), Some(None)
    /// when refused, None when the client left. `first` as for [`Exchange::check`]; an
    /// unknown user gets the same exchange as a wrong password.
    pub(super) async fn native_key(
        &mut self,
        stored: &Stored,
        first: Option<&[u8]>,
    ) -> Option<Option<LoginKey>> {
        let answer = self.answer(scramble::MYSQL_NATIVE_PASSWORD, first).await?;
        Some(match stored {
            Stored::Native(None) => answer.is_empty().then_some(LoginKey::None),
            Stored::Native(Some(hash)) => {
                scramble::native_recover(hash, self.salt, &answer).map(LoginKey::NativeSha1)
            }
            Stored::Unknown | Stored::Other(_) => None,
        })
    }

    /// The client's answer to the salt with `plugin`: `first`, or asked for with an
    /// auth switch request.
    async fn answer(&mut self, plugin: &[u8], first: Option<&[u8]>) -> Option<Vec<u8>> {
        if let Some(a) = first {
            return Some(a.to_vec());
        }
        let mut data = self.salt.to_vec();
        data.push(0);
        let mut p = Vec::new();
        AuthSwitchRequest {
            plugin,
            data: &data,
        }
        .encode(&mut p);
        self.send(&p).await?;
        self.read().await
    }

    async fn sha2(
        &mut self,
        front: &super::SharedState,
        user: &str,
        secret: Option<&Secret>,
        answer: &[u8],
    ) -> Option<bool> {
        let stored = match secret {
            Some(Secret::Plain(p)) if p.is_empty() => return Some(answer.is_empty()),
            Some(Secret::Plain(p)) => scramble::sha2_stored(p.as_bytes()),
            Some(Secret::Sha2 { stored }) => *stored,
            _ => return Some(false),
        };
        let cached = front.sha2_cache.lock().contains(user);
        if cached && scramble::sha2_verify(&stored, self.salt, answer) {
            self.send(&[1, scramble::SHA2_FAST_AUTH_OK]).await?;
            return Some(true);
        }
        // Full authentication: the password itself, in clear only over TLS.
        self.send(&[1, scramble::SHA2_PERFORM_FULL_AUTH]).await?;
        let mut reply = self.read().await?;
        if !self.stream.is_tls() {
            let key = front.rsa.get_or_init(super::rsa::RsaKey::generate);
            let Some(key) = key.as_ref() else {
                return Some(false);
            };
            // A client that has the key (from an earlier exchange) sends the password
            // sealed at once.
            let sealed = if reply == [scramble::SHA2_REQUEST_PUBLIC_KEY] {
                let mut more = vec![1];
                more.extend_from_slice(&key.pem);
                self.send(&more).await?;
                self.read().await?
            } else {
                reply
            };
            let Some(mut clear) = key.decrypt(&sealed) else {
                return Some(false);
            };
            for (i, b) in clear.iter_mut().enumerate() {
                *b ^= self.salt[i % self.salt.len()];
            }
            reply = clear;
        }
        let password = reply.strip_suffix(&[0]).unwrap_or(&reply);
        let hash = scramble::sha2_stored(password);
        let ok = bool::from(subtle::ConstantTimeEq::ct_eq(&hash[..], &stored[..]));
        if ok {
            front.sha2_cache.lock().insert(user.to_owned());
        }
        Some(ok)
    }
}
