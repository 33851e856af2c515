//! Client authentication: SCRAM-SHA-256, md5 and trust against `[users]`; against the
//! secret the server stores for a pass-through user (a listener with `auth_user`,
//! looked up in `lookup.rs`), keeping what the client's proof yields to log in to
//! servers; or pass-through, where Sluice relays the exchange between the client and a
//! fresh server connection and the server decides.

use super::Client;
use crate::backend::pg::{
    LoginError, LoginKey, ServerConn, Target, finish_startup, open_startup, read_whole_frame,
};
use crate::error::{Error, Kind, Side};
use crate::stream::write_all_flush;
use bytes::BytesMut;
use sluice_config::{AuthMethod, Secret, User};
use sluice_wire_pg::scram::{ServerExchange, Verifier};
use sluice_wire_pg::{encode, msg};

fn auth_failed(user: &str) -> Error {
    Error::new(
        Kind::Auth,
        Side::Client,
        format!("password authentication failed for user \"{user}\""),
    )
}

async fn read_password(c: &mut Client, max: usize) -> Result<bytes::Bytes, Error> {
    let (tag, body) = read_whole_frame(&mut c.stream, &mut c.buf, max, Side::Client).await?;
    if tag != msg::fe::PASSWORD {
        return Err(Error::protocol(format!(
            "expected password response, got message type {}",
            char::from(tag)
        )));
    }
    Ok(body)
}

fn verifier_of(secret: Option<&Secret>) -> Option<Verifier> {
    match secret? {
        Secret::Plain(pw) => {
            let salt: [u8; 16] = rand::random();
            Some(Verifier::from_password(pw.as_bytes(), &salt, 4096))
        }
        Secret::Scram(v) => Some(Verifier {
            iterations: v.iterations,
            salt: v.salt.clone(),
            stored_key: v.stored_key,
            server_key: v.server_key,
        }),
        Secret::Md5 { .. } | Secret::MysqlNative { .. } | Secret::Sha2 { .. } => None,
    }
}

/// A SCRAM-SHA-256 exchange against `secret`; on success, the client's ClientKey.
async fn scram(
    c: &mut Client,
    user: &str,
    secret: Option<&Secret>,
    max: usize,
) -> Result<[u8; 32], Error> {
    // An unknown user goes through the whole exchange against a random verifier, so a
    // client cannot tell unknown users from wrong passwords.
    let real = verifier_of(secret);
    let known = real.is_some();
    let verifier =
        real.unwrap_or_else(|| Verifier::from_password(&rand::random::<[u8; 16]>(), b"salt", 4096));
    let mut out = BytesMut::new();
    encode::auth_sasl(&mut out, &[b"SCRAM-SHA-256"]);
    write_all_flush(&mut c.stream, &out).await?;
    let body = read_password(c, max).await?;
    let (mech, first) =
        msg::sasl_initial(&body).ok_or_else(|| Error::protocol("malformed SASLInitialResponse"))?;
    if mech != "SCRAM-SHA-256" {
        return Err(Error::protocol(format!(
            "client selected an invalid SASL authentication mechanism: {mech}"
        )));
    }
    let (ex, server_first) =
        ServerExchange::start(&verifier, first, &sluice_wire_pg::scram::new_nonce())
            .map_err(|_| auth_failed(user))?;
    out.clear();
    encode::auth_request(&mut out, msg::auth::SASL_CONTINUE, server_first.as_bytes());
    write_all_flush(&mut c.stream, &out).await?;
    let body = read_password(c, max).await?;
    let (server_final, client_key) = ex.finish(&body).map_err(|_| auth_failed(user))?;
    if !known {
        return Err(auth_failed(user));
    }
    out.clear();
    encode::auth_request(&mut out, msg::auth::SASL_FINAL, server_final.as_bytes());
    write_all_flush(&mut c.stream, &out).await?;
    Ok(client_key)
}

async fn md5(c: &mut Client, user: &str, secret: Option<&Secret>, max: usize) -> Result<(), Error> {
    let stored = match secret {
        Some(Secret::Plain(pw)) => {
            Some(sluice_wire_pg::md5::stored(pw.as_bytes(), user.as_bytes()))
        }
        Some(Secret::Md5 { hash }) => Some(format!("md5{}", hex(hash))),
        // Like PostgreSQL: a SCRAM secret cannot answer md5, so SCRAM is used instead.
        Some(Secret::Scram(_)) => return scram(c, user, secret, max).await.map(|_| ()),
        // MySQL hashes cannot answer PostgreSQL's exchanges.
        Some(Secret::MysqlNative { .. } | Secret::Sha2 { .. }) | None => None,
    };
    let salt: [u8; 4] = rand::random();
    let mut out = BytesMut::new();
    encode::auth_request(&mut out, msg::auth::MD5, &salt);
    write_all_flush(&mut c.stream, &out).await?;
    let body = read_password(c, max).await?;
    let response = body.strip_suffix(b"\0").unwrap_or(&body);
    match stored {
        Some(s) if sluice_wire_pg::md5::verify(&s, salt, response) => Ok(()),
        _ => Err(auth_failed(user)),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a client against `[users]` with the listener's method.
pub async fn check(
    c: &mut Client,
    method: AuthMethod,
    user: &str,
    cfg: Option<&User>,
    max: usize,
) -> Result<(), Error> {
    match method {
        AuthMethod::Trust if cfg.is_some() => Ok(()),
        AuthMethod::Trust => Err(Error::new(
            Kind::Auth,
            Side::Client,
            format!("role \"{user}\" does not exist"),
        )
        .with_sqlstate("28000")),
        AuthMethod::Md5 => md5(c, user, cfg.and_then(|u| u.password.as_ref()), max).await,
        // A configured user on a pass-through listener with auth_user: by the form of
        // its password, as PostgreSQL's md5 method does.
        AuthMethod::Passthrough
            if matches!(
                cfg.and_then(|u| u.password.as_ref()),
                Some(Secret::Md5 { .. })
            ) =>
        {
            md5(c, user, cfg.and_then(|u| u.password.as_ref()), max).await
        }
        AuthMethod::ScramSha256 | AuthMethod::Passthrough => {
            scram(c, user, cfg.and_then(|u| u.password.as_ref()), max)
                .await
                .map(|_| ())
        }
        // Validation keeps MySQL methods off PostgreSQL listeners.
        AuthMethod::MysqlNativePassword | AuthMethod::CachingSha2Password => Err(Error::new(
            Kind::Unsupported,
            Side::Internal,
            "this authentication method is for MySQL listeners",
        )),
    }
}

/// Checks a pass-through client against the secret the server stores for it (looked up
/// with `auth_query`): SCRAM-SHA-256 for a verifier (or a plaintext password), md5 for
/// an md5 hash; none (no such role, an expired or NULL password, a form Sluice cannot
/// check) fails like a wrong password, after the same exchange. On success: what Sluice
/// logs in to servers with for this user.
pub async fn check_stored(
    c: &mut Client,
    user: &str,
    stored: Option<Secret>,
    max: usize,
) -> Result<LoginKey, Error> {
    match stored {
        Some(Secret::Md5 { hash }) => {
            md5(c, user, Some(&Secret::Md5 { hash }), max).await?;
            Ok(LoginKey::PgMd5(format!("md5{}", hex(&hash))))
        }
        Some(Secret::Scram(v)) => {
            let server_key = v.server_key;
            let client_key = scram(c, user, Some(&Secret::Scram(v)), max).await?;
            Ok(LoginKey::Scram {
                client_key,
                server_key,
            })
        }
        Some(Secret::Plain(pw)) => {
            scram(c, user, Some(&Secret::Plain(pw.clone())), max).await?;
            Ok(LoginKey::Password(pw))
        }
        Some(Secret::MysqlNative { .. } | Secret::Sha2 { .. }) | None => {
            scram(c, user, None, max).await.map(|_| LoginKey::None)
        }
    }
}

/// Pass-through: opens a server connection with the client's startup parameters and
/// relays the authentication exchange until the server accepts or refuses. On success
/// the client has been sent AuthenticationOk and the server's ParameterStatus messages
/// are appended to `to_client`.
pub async fn passthrough(
    c: &mut Client,
    target: &Target,
    params: &[(String, String)],
    to_client: &mut BytesMut,
) -> Result<ServerConn, LoginError> {
    let max = target.max_message;
    let (mut server, mut sbuf, permit) = open_startup(target, params).await?;
    let mut out = BytesMut::new();
    loop {
        let (tag, body) = read_whole_frame(&mut server, &mut sbuf, max, Side::Server).await?;
        out.clear();
        match tag {
            msg::be::ERROR_RESPONSE => return Err(LoginError::Server(body)),
            msg::be::NEGOTIATE_VERSION => continue,
            msg::be::AUTHENTICATION => {}
            _ => {
                return Err(Error::new(
                    Kind::Desync,
                    Side::Server,
                    "unexpected message during authentication",
                )
                .into());
            }
        }
        let (code, data) = msg::authentication(&body)
            .ok_or_else(|| Error::new(Kind::Desync, Side::Server, "bad authentication"))?;
        if code == msg::auth::SASL {
            // Channel binding would bind the client to Sluice's TLS, not the server's:
            // offer only the plain mechanism.
            let mechs: Vec<&[u8]> = msg::sasl_mechanisms(data)
                .into_iter()
                .filter(|m| !m.ends_with(b"-PLUS"))
                .collect();
            encode::auth_sasl(&mut out, &mechs);
        } else {
            encode::message(&mut out, msg::be::AUTHENTICATION, |b| {
                b.extend_from_slice(&body)
            });
        }
        write_all_flush(&mut c.stream, &out).await?;
        match code {
            msg::auth::OK => break,
            msg::auth::SASL_FINAL => continue,
            msg::auth::CLEARTEXT | msg::auth::MD5 | msg::auth::SASL | msg::auth::SASL_CONTINUE => {
                let resp = read_password(c, max).await?;
                out.clear();
                encode::password(&mut out, &resp);
                write_all_flush(&mut server, &out).await?;
            }
            other => {
                return Err(Error::new(
                    Kind::Unsupported,
                    Side::Server,
                    format!("unsupported authentication request {other}"),
                )
                .into());
            }
        }
    }
    finish_startup(server, sbuf, permit, target, |k, v| {
        encode::parameter_status(to_client, k, v)
    })
    .await
}
