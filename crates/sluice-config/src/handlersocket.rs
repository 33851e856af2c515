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
    "indexes",
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
    let indexes = r.string_list("indexes").map(|list| {
        list.iter()
            .enumerate()
            .filter_map(|(i, s)| match IndexGrant::parse(s) {
                Ok(g) => Some(g),
                Err(e) => {
                    r.error(&format!("indexes[{i}]"), e);
                    None
                }
            })
            .collect::<Vec<_>>()
    });
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
            indexes,
        })
    })
}

/// One entry of a HandlerSocket listener's `indexes`: `db.table.index`, optionally
/// `:col1,col2` (the columns a client may open it with; any when not given); `*` for
/// the table or the index means any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexGrant {
    pub db: String,
    pub table: String,
    pub index: String,
    pub columns: Option<Vec<String>>,
}

impl IndexGrant {
    pub fn parse(s: &str) -> Result<IndexGrant, String> {
        let (name, columns) = match s.split_once(':') {
            Some((n, c)) => (n, Some(c)),
            None => (s, None),
        };
        let parts: Vec<&str> = name.split('.').collect();
        let [db, table, index] = parts[..] else {
            return Err(format!(
                "{s:?} is not db.table.index (optionally :col1,col2; * for any table or index)"
            ));
        };
        if db.is_empty() || table.is_empty() || index.is_empty() || db == "*" {
            return Err(format!(
                "{s:?}: name the database, and the table and index or *"
            ));
        }
        let columns = match columns {
            Some(c) if c.split(',').any(|c| c.trim().is_empty()) => {
                return Err(format!("{s:?}: empty column name"));
            }
            Some(c) => Some(c.split(',').map(|c| c.trim().to_string()).collect()),
            None => None,
        };
        Ok(IndexGrant {
            db: db.to_string(),
            table: table.to_string(),
            index: index.to_string(),
            columns,
        })
    }

    /// Whether it lets a client open `index` of `db`.`table` with these columns.
    pub fn allows(&self, db: &str, table: &str, index: &str, columns: &[&str]) -> bool {
        let any = |grant: &str, name: &str| grant == "*" || grant == name;
        self.db == db
            && any(&self.table, table)
            && any(&self.index, index)
            && self
                .columns
                .as_ref()
                .is_none_or(|allowed| columns.iter().all(|c| allowed.iter().any(|a| a == c)))
    }
}
