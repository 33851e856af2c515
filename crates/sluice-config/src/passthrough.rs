//! Credentials for pass-through listeners: `auth_user` and `auth_query` (PgBouncer's
//! names). With them Sluice looks up each client's stored secret on a server of the
//! listener's route (running `auth_query` as `auth_user`, a `[users]` entry), checks the
//! client itself and keeps what the check yields to log in to any server of the cluster.
//! Without them a pass-through listener can only relay the client's exchange to one
//! server: [`Config::warnings`] names the listeners for which that matters.

use crate::reader::ObjectReader;
use crate::schema::{AuthMethod, Config, PoolMode, Protocol};

/// PgBouncer's default: the role's password unless it has expired, for a role that may
/// log in. The user name is `$1`; the second column is the secret.
pub const DEFAULT_PG_AUTH_QUERY: &str = "SELECT rolname, CASE WHEN rolvaliduntil < now() \
     THEN NULL ELSE rolpassword END FROM pg_authid WHERE rolname = $1 AND rolcanlogin";

/// The account's plugin and stored hash (MySQL 5.7+ and MariaDB 10.4+ name both columns
/// so in `mysql.user`). An account defined for several hosts: a row with a host other than
/// `'%'` first. The user name is `?`.
pub const DEFAULT_MYSQL_AUTH_QUERY: &str = "SELECT plugin, authentication_string FROM \
     mysql.user WHERE user = ? ORDER BY host = '%', host LIMIT 1";

/// How a pass-through listener looks up its clients' secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthQuery {
    /// A `[users.NAME]` entry: Sluice logs in to the server as its `server_user` with its
    /// server password to run the query.
    pub user: String,
    /// The query, with the client's user name as its one parameter (`$1` on PostgreSQL,
    /// `?` on MySQL), bound, never spliced into the text.
    pub query: String,
}

impl AuthQuery {
    /// The default query for a listener of `protocol`.
    pub fn default_query(protocol: Protocol) -> &'static str {
        match protocol {
            Protocol::Postgres => DEFAULT_PG_AUTH_QUERY,
            Protocol::Mysql => DEFAULT_MYSQL_AUTH_QUERY,
        }
    }
}

/// Reads a listener's `auth_user` / `auth_query`.
pub(crate) fn read_auth_query(
    r: &mut ObjectReader<'_, '_, '_>,
    auth: AuthMethod,
    protocol: Option<Protocol>,
) -> Option<AuthQuery> {
    let user = r.nonempty_string("auth_user");
    let query = r.nonempty_string("auth_query");
    if r.has("auth_user") && auth != AuthMethod::Passthrough {
        r.error(
            "auth_user",
            format!(
                "applies to auth = \"passthrough\" only; a listener with auth = {:?} checks \
                 [users] itself",
                auth.as_str()
            ),
        );
    }
    if r.has("auth_query") && !r.has("auth_user") {
        r.error("auth_query", "is set without auth_user");
    }
    let placeholder = match protocol {
        Some(Protocol::Postgres) => Some("$1"),
        Some(Protocol::Mysql) => Some("?"),
        None => None,
    };
    if let (Some(q), Some(p)) = (&query, placeholder)
        && !q.contains(p)
    {
        r.error(
            "auth_query",
            format!("must take the user name as its parameter {p}"),
        );
    }
    let user = user?;
    let protocol = protocol?;
    Some(AuthQuery {
        user,
        query: query.unwrap_or_else(|| AuthQuery::default_query(protocol).to_string()),
    })
}

impl Config {
    /// What is allowed but likely not meant, one line each, for the log at start and
    /// `check-config`: transaction-mode pass-through listeners without `auth_user` over a
    /// cluster of several servers, whose sessions cannot move to another server (after a
    /// failover they keep failing until the client reconnects).
    /// Session-mode pass-through listeners without `auth_user` whose pool says
    /// `assign_server = "first_statement"` also get one: Sluice cannot log in for their
    /// users later, so they get their server connection at login.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for l in self.listeners.values() {
            let pool = self.pool_for(l);
            if l.auth == AuthMethod::Passthrough
                && l.auth_query.is_none()
                && pool.mode == PoolMode::Session
                && !pool.server_at_login()
            {
                out.push(format!(
                    "{}: pass-through users get their server connection at login, whatever \
                     pool {:?} says (assign_server = \"first_statement\"): Sluice logs in \
                     with their own credentials, once; set auth_user (or configure [users]) \
                     to let them wait for their first statement",
                    crate::errors::label("listeners", Some(&l.name)),
                    pool.name
                ));
            }
        }
        for l in self.listeners.values() {
            let servers = self.cluster_servers(&l.cluster).len();
            if l.auth != AuthMethod::Passthrough
                || l.auth_query.is_some()
                || servers < 2
                || self.pool_for(l).mode != PoolMode::Transaction
            {
                continue;
            }
            out.push(format!(
                "{}: pass-through users in transaction mode over cluster {:?} of \
                 {servers} servers: Sluice cannot log in to another server for them, so their \
                 sessions stay on the server they logged in on and cannot follow a failover \
                 without reconnecting; set auth_user (or configure [users]) to let them",
                crate::errors::label("listeners", Some(&l.name)),
                l.cluster
            ));
        }
        out
    }
}
