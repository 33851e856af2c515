//! `[handlersocket.NAME]`: a HandlerSocket listener (the key-value path). It serves the
//! line protocol of `shared/handlersocket-protocol.md` on `address` and runs the requests
//! on the first server of `cluster` (MySQL/MariaDB or PostgreSQL), logging in as `user`.

use std::ops::Range;

use toml_edit::Item;

use crate::reader::{Ctx, ObjectReader};
use crate::schema::*;
use crate::secret::Secret;
use crate::validate::ListenerFacts;

pub(crate) const HANDLERSOCKET_KEYS: &[&str] = &[
    "address",
    "cluster",
    "mode",
    "user",
    "password",
    "database",
    "secret",
    "secret_file",
    "connections",
    "max_line_length",
    "max_open_indexes",
    "max_client_connections",
    "tls_cert_file",
    "tls_key_file",
];

/// Upper bound of `max_open_indexes` (index ids are below it).
const MAX_OPEN_INDEXES: usize = 1 << 20;

pub(crate) fn read_handlersocket(
    ctx: &mut Ctx<'_>,
    name: &str,
    header: Option<Range<usize>>,
    item: &Item,
) -> Option<HsListener> {
    let section = "handlersocket";
    let mut r = ObjectReader::new(ctx, section, Some(name), header, item, HANDLERSOCKET_KEYS)?;
    let address = r.listen_address("address");
    let cluster = r.required_string("cluster");
    let mode = r.choice("mode", HsMode::ALL).unwrap_or(HsMode::ReadOnly);
    let user = r.required_string("user");
    let password = match r.secret("password") {
        Some(Secret::Plain(p)) => Some(p),
        Some(other) => {
            let kind = other.kind();
            r.error(
                "password",
                format!("a {kind} cannot log in to a server; give the plaintext password"),
            );
            None
        }
        None => None,
    };
    let database = r.string("database").unwrap_or_default();
    let secret = r.string("secret").filter(|s| !s.is_empty());
    let secret_file = r.path("secret_file");
    if secret.is_some() && secret_file.is_some() {
        r.error("secret_file", "give secret or secret_file, not both");
    }
    if secret
        .as_deref()
        .is_some_and(|s| s.bytes().any(|b| b < 0x10 || b == b'\t'))
    {
        r.error("secret", "must not contain TAB, LF or other control bytes");
    }
    let connections = r
        .count("connections", 1, 1024)
        .unwrap_or(DEFAULT_HS_CONNECTIONS);
    let max_line = r
        .size("max_line_length")
        .map(|s| s as usize)
        .unwrap_or(DEFAULT_HS_MAX_LINE);
    if max_line < 64 {
        r.error("max_line_length", "must be at least 64 bytes");
    }
    let max_open_indexes = r
        .count("max_open_indexes", 1, MAX_OPEN_INDEXES)
        .unwrap_or(DEFAULT_HS_MAX_OPEN_INDEXES);
    let max_client_connections = r
        .count("max_client_connections", 1, u32::MAX as usize)
        .unwrap_or(DEFAULT_MAX_CLIENT_CONNECTIONS);
    let tls_cert_file = r.path("tls_cert_file");
    let tls_key_file = r.path("tls_key_file");
    match (&tls_cert_file, &tls_key_file) {
        (Some(c), Some(k)) => {
            r.check_readable("tls_cert_file", c);
            r.check_readable("tls_key_file", k);
        }
        (Some(_), None) if !r.has("tls_key_file") => {
            r.error("tls_cert_file", "TLS needs tls_key_file too")
        }
        (None, Some(_)) if !r.has("tls_cert_file") => {
            r.error("tls_key_file", "TLS needs tls_cert_file too")
        }
        _ => {}
    }
    r.facts().listeners.push(ListenerFacts {
        section,
        name: name.to_string(),
        protocol: None,
        address: address.clone(),
        cluster: cluster.clone(),
        pool: None,
        split: false,
        auth_user: None,
    });
    r.finish(|| {
        Some(HsListener {
            name: name.to_string(),
            address: address?,
            cluster: cluster?,
            mode,
            user: user?,
            password,
            database,
            secret,
            secret_file,
            connections,
            max_line,
            max_open_indexes,
            max_client_connections,
            tls_cert_file,
            tls_key_file,
        })
    })
}
