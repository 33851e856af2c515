//! The typed configuration the server runs on: [`Config`] and one struct per section. Every
//! value here has been parsed and validated (durations are `Duration`, sizes are byte counts,
//! passwords are decoded [`Secret`]s, references between sections resolve), so the listener,
//! frontend, pool and backend code read fields directly and never re-check them. Defaults
//! live in the `DEFAULT_*` constants and the `Default`/`with_defaults` constructors below.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use crate::secret::Secret;

/// Declares a config enum with its TOML spellings.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every variant with its spelling in the configuration file.
            pub const ALL: &'static [(&'static str, $name)] = &[$(($text, $name::$variant)),+];

            /// The spelling in the configuration file.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL
                    .iter()
                    .find(|(text, _)| *text == s)
                    .map(|(_, v)| *v)
                    .ok_or_else(|| crate::reader::expected_one_of(s, Self::ALL))
            }
        }
    };
}

string_enum! {
    /// The wire protocol of a server, cluster or listener.
    Protocol { Postgres = "postgres", Mysql = "mysql" }
}

string_enum! {
    /// How long a client keeps its server connection.
    PoolMode {
        /// For the whole client session.
        Session = "session",
        /// Until the end of each transaction (longer if the session state ledger pins it).
        Transaction = "transaction",
    }
}

string_enum! {
    /// When a session-mode client gets the server connection it keeps.
    AssignServer {
        /// When it logs in: the process id (PostgreSQL) it is told is its server's,
        /// and a login that the server would refuse is refused.
        Login = "login",
        /// When it sends its first statement (as PgBouncer does): clients that have
        /// sent nothing hold no server connection.
        FirstStatement = "first_statement",
    }
}

string_enum! {
    /// How a listener authenticates clients.
    AuthMethod {
        /// Relay the auth exchange to the server; users are the server's.
        Passthrough = "passthrough",
        /// SCRAM-SHA-256 against `[users]`.
        ScramSha256 = "scram-sha-256",
        /// md5 against `[users]`.
        Md5 = "md5",
        /// Any user listed in `[users]`, no password.
        Trust = "trust",
        /// MySQL's `mysql_native_password` against `[users]` (mysql listeners only).
        MysqlNativePassword = "mysql_native_password",
        /// MySQL's `caching_sha2_password` against `[users]` (mysql listeners only).
        CachingSha2Password = "caching_sha2_password",
    }
}

string_enum! {
    /// TLS towards clients.
    ClientTls {
        /// Answer `N` to SSLRequest.
        Disable = "disable",
        /// Answer `S` if the client asks.
        Allow = "allow",
        /// Refuse clients that do not use TLS.
        Require = "require",
    }
}

string_enum! {
    /// TLS towards servers, with libpq's `sslmode` meanings.
    ServerTls {
        Disable = "disable",
        Prefer = "prefer",
        Require = "require",
        VerifyCa = "verify-ca",
        VerifyFull = "verify-full",
    }
}

string_enum! {
    /// The MySQL compressed protocol towards a server.
    Compression {
        /// Plain packets.
        Off = "off",
        /// CLIENT_COMPRESS (zlib), if the server offers it.
        Zlib = "zlib",
        /// CLIENT_ZSTD_COMPRESSION_ALGORITHM, if the server offers it.
        Zstd = "zstd",
    }
}

string_enum! {
    /// Whether a HandlerSocket listener takes writes.
    HsMode {
        /// Finds only; inserts and modifications answer `2 1 readonly`.
        ReadOnly = "read-only",
        /// Finds, inserts and modifications.
        ReadWrite = "read-write",
    }
}

string_enum! {
    /// Log output format.
    LogFormat { Text = "text", Json = "json" }
}

impl Protocol {
    /// The server port used when `port` is not given.
    pub fn default_port(self) -> u16 {
        match self {
            Protocol::Postgres => 5432,
            Protocol::Mysql => 3306,
        }
    }
}

impl AuthMethod {
    /// The one protocol whose listeners offer this method; `None` for the methods both
    /// protocols offer (`passthrough`, `trust`).
    pub fn protocol(self) -> Option<Protocol> {
        match self {
            AuthMethod::Passthrough | AuthMethod::Trust => None,
            AuthMethod::ScramSha256 | AuthMethod::Md5 => Some(Protocol::Postgres),
            AuthMethod::MysqlNativePassword | AuthMethod::CachingSha2Password => {
                Some(Protocol::Mysql)
            }
        }
    }

    /// Whether a listener speaking `protocol` can use this method.
    pub fn is_available_on(self, protocol: Protocol) -> bool {
        self.protocol().is_none_or(|p| p == protocol)
    }
}

impl ServerTls {
    /// True when the server certificate must be checked against `tls_ca_file`.
    pub fn verifies(self) -> bool {
        matches!(self, ServerTls::VerifyCa | ServerTls::VerifyFull)
    }
}

pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_CLIENT_LOGIN_TIMEOUT: Duration = Duration::from_secs(15);
pub const DEFAULT_LOG_LEVEL: &str = "info";
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 << 20;
pub const MIN_MAX_MESSAGE_SIZE: usize = 1 << 10;
pub const MAX_MAX_MESSAGE_SIZE: usize = 1 << 30;
pub const DEFAULT_MAX_CLIENT_CONNECTIONS: usize = 10_000;
pub const DEFAULT_POOL_NAME: &str = "default";
pub const DEFAULT_POOL_SIZE: usize = 20;
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_SERVER_LIFETIME: Duration = Duration::from_secs(3600);
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_POOL_MAX_CLIENT_CONNECTIONS: usize = 1000;
pub const DEFAULT_STATEMENT_CACHE_SIZE: usize = 256;
pub const DEFAULT_DIGEST_MAX_ENTRIES: usize = 10_000;
pub const DEFAULT_HS_CONNECTIONS: usize = 4;
pub const DEFAULT_HS_MAX_LINE: usize = 1 << 20;
pub const DEFAULT_HS_MAX_OPEN_INDEXES: usize = 1024;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub general: General,
    pub servers: BTreeMap<String, Server>,
    pub clusters: BTreeMap<String, Cluster>,
    pub users: BTreeMap<String, User>,
    pub pools: BTreeMap<String, Pool>,
    pub listeners: BTreeMap<String, Listener>,
    /// `[handlersocket.NAME]`: HandlerSocket listeners.
    pub handlersocket: BTreeMap<String, HsListener>,
    /// `[[rules]]`: query rules, in file order.
    pub rules: Vec<crate::rules::Rule>,
    /// `[tables."schema.table"]`: table rules.
    pub tables: crate::rules::TableRules,
    pub firewall: crate::rules::Firewall,
    /// `[admin]`: the console, metrics and dashboard.
    pub admin: crate::admin::Admin,
}

/// `[general]`: process-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct General {
    /// Graceful drain on SIGTERM/SIGINT: how long to wait for transactions in flight.
    pub shutdown_timeout: Duration,
    pub log_format: LogFormat,
    /// A tracing filter string, e.g. `info,sluice=debug`.
    pub log_level: String,
    /// Cap on one protocol message, client or server, in bytes.
    pub max_message_size: usize,
    /// Process-wide cap on client connections.
    pub max_client_connections: usize,
    /// Threads serving clients: 1 = a single current-thread runtime; 0 = one per core.
    pub worker_threads: usize,
    /// A client that has not finished logging in this long after connecting is closed.
    pub client_login_timeout: Duration,
    /// Query digests kept at most (the least recent are evicted); 0 = no digests.
    pub digest_max_entries: usize,
    /// While one client alone runs statements, its session watches the socket it waits
    /// on for this many microseconds before sleeping (lower latency for a lone client,
    /// for a core kept busy meanwhile); 0 = never.
    pub busy_poll_us: u64,
}

impl Default for General {
    fn default() -> Self {
        General {
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            log_format: LogFormat::Text,
            log_level: DEFAULT_LOG_LEVEL.to_string(),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_client_connections: DEFAULT_MAX_CLIENT_CONNECTIONS,
            worker_threads: 1,
            client_login_timeout: DEFAULT_CLIENT_LOGIN_TIMEOUT,
            digest_max_entries: DEFAULT_DIGEST_MAX_ENTRIES,
            busy_poll_us: 0,
        }
    }
}

/// `[servers.NAME]`: one backend database server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The NAME in `[servers.NAME]`.
    pub name: String,
    pub protocol: Protocol,
    pub host: String,
    pub port: u16,
    pub tls: ServerTls,
    /// CA bundle for `verify-ca` / `verify-full`; relative paths are resolved against the
    /// configuration file's directory by [`crate::load`].
    pub tls_ca_file: Option<PathBuf>,
    /// Name to send in SNI and to verify; `host` when not given.
    pub tls_server_name: String,
    /// Server connections Sluice keeps open to this server at most, across all pools;
    /// `None`: the server's own limit, read at the first login.
    pub max_server_connections: Option<usize>,
    /// MySQL servers: the compressed protocol on Sluice's connections to this server.
    pub compression: Compression,
}

impl Server {
    /// `host:port`, with brackets around an IPv6 literal, ready for `TcpStream::connect`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// `[clusters.NAME]`: a set of servers of one protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub name: String,
    /// Names of `[servers.X]`, in the order given.
    pub servers: Vec<String>,
    /// How the servers are watched: health, roles, lag.
    pub health: crate::routes::Health,
}

/// `[users.NAME]`: a user checked by listeners whose `auth` is not `passthrough`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// `None`: the user can only log in through `trust` listeners.
    pub password: Option<Secret>,
    /// Databases this user may use; `"*"` = any.
    pub databases: Vec<String>,
    /// The user Sluice logs in as on the server; `None` = same name.
    pub server_user: Option<String>,
    /// Password for the server login; `None` = `password`.
    pub server_password: Option<Secret>,
    /// Per-user override of the pool's `size`.
    pub pool_size: Option<usize>,
    /// Per-user override of `[firewall] mode`.
    pub firewall: Option<crate::rules::FirewallMode>,
}

impl User {
    /// The user name used on the server.
    pub fn server_user(&self) -> &str {
        self.server_user.as_deref().unwrap_or(&self.name)
    }

    /// The secret used to log in to the server (`server_password`, else `password`).
    pub fn server_secret(&self) -> Option<&Secret> {
        self.server_password.as_ref().or(self.password.as_ref())
    }

    /// Whether this user may connect to `database`.
    pub fn may_use_database(&self, database: &str) -> bool {
        self.databases.iter().any(|d| d == "*" || d == database)
    }
}

/// `[pools.NAME]`: pooling policy used by listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub mode: PoolMode,
    /// Session mode: when a client gets its server connection (transaction mode: at
    /// each transaction's first statement, whatever this says).
    pub assign_server: AssignServer,
    /// Max server connections per (user, database).
    pub size: usize,
    /// Idle server connections kept open per (user, database).
    pub min_idle: usize,
    pub connect_timeout: Duration,
    /// Close server connections idle longer than this; `None` = never.
    pub idle_timeout: Option<Duration>,
    /// Close server connections older than this when they return; `None` = never.
    pub server_lifetime: Option<Duration>,
    /// How long a client waits for a server connection when the pool is exhausted.
    pub wait_timeout: Duration,
    /// Client connections per listener using this pool.
    pub max_client_connections: usize,
    /// Prepared statements kept per server connection (transaction mode).
    pub statement_cache_size: usize,
    /// Reset command sent before a connection is reused; `None` = the protocol's default.
    pub reset_query: Option<String>,
    /// Transaction mode: server connections on which plain autocommit statements of
    /// several clients are pipelined (0 = none).
    pub shared_connections: usize,
    /// A client idle this long inside a transaction is disconnected (its transaction
    /// rolled back); `None` = never.
    pub idle_transaction_timeout: Option<Duration>,
    /// A statement running this long is cancelled on the server; `None` = never.
    pub query_timeout: Option<Duration>,
    /// A client idle this long between transactions is disconnected; `None` = never.
    pub client_idle_timeout: Option<Duration>,
}

impl Pool {
    /// Whether a client gets its server connection when it logs in (session mode with
    /// `assign_server = "login"`, the default), not at its first statement.
    pub fn server_at_login(&self) -> bool {
        self.mode == PoolMode::Session && self.assign_server == AssignServer::Login
    }

    /// A pool with every setting at its default.
    pub fn with_defaults(name: &str) -> Pool {
        Pool {
            name: name.to_string(),
            mode: PoolMode::Session,
            assign_server: AssignServer::Login,
            size: DEFAULT_POOL_SIZE,
            min_idle: 0,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            server_lifetime: Some(DEFAULT_SERVER_LIFETIME),
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            max_client_connections: DEFAULT_POOL_MAX_CLIENT_CONNECTIONS,
            statement_cache_size: DEFAULT_STATEMENT_CACHE_SIZE,
            reset_query: None,
            shared_connections: 1,
            idle_transaction_timeout: None,
            query_timeout: None,
            client_idle_timeout: None,
        }
    }

    /// The pool size for a user: the user's `pool_size` if set, else `size`.
    pub fn size_for(&self, user: Option<&User>) -> usize {
        user.and_then(|u| u.pool_size).unwrap_or(self.size)
    }
}

/// `[listeners.NAME]`: a port clients connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub protocol: Protocol,
    /// `host:port` exactly as given (IPv4, `[IPv6]` or a host name).
    pub address: String,
    /// A `[clusters.X]` of the same protocol.
    pub cluster: String,
    /// A `[pools.X]`.
    pub pool: String,
    /// Which of the cluster's servers clients go to.
    pub route: crate::routes::Route,
    pub auth: AuthMethod,
    /// Pass-through listeners: how Sluice looks up a client's stored secret on the
    /// server (`auth_user`, `auth_query`) to check it itself and log in to any server.
    pub auth_query: Option<crate::passthrough::AuthQuery>,
    pub tls: ClientTls,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// Per-listener override of `[firewall] mode` (a user's own comes first).
    pub firewall: Option<crate::rules::FirewallMode>,
}

impl Listener {
    /// Whether Sluice can log in to servers for this listener's clients by itself: users
    /// it checks from `[users]`, or pass-through users whose secrets it looks up.
    pub fn logs_in_itself(&self) -> bool {
        self.auth != AuthMethod::Passthrough || self.auth_query.is_some()
    }
}

/// `[handlersocket.NAME]`: a HandlerSocket listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HsListener {
    pub name: String,
    pub address: String,
    /// The cluster whose first server runs the requests (either protocol).
    pub cluster: String,
    pub mode: HsMode,
    /// The server login Sluice uses for this listener's requests.
    pub user: String,
    pub password: Option<String>,
    /// The database to log in to (requests name their database anyway).
    pub database: String,
    /// When set, clients must send `A 1 <secret>` before anything else.
    pub secret: Option<String>,
    /// A file holding the secret, created with a random one (readable only by the user
    /// running Sluice) when missing; `~/` at its start is that user's home directory.
    pub secret_file: Option<PathBuf>,
    /// Server connections that run batches of requests.
    pub connections: usize,
    /// Longest request line, in bytes.
    pub max_line: usize,
    /// Index ids a client may open are below this.
    pub max_open_indexes: usize,
    pub max_client_connections: usize,
    /// With both: TLS from the first byte (clients must use TLS).
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// What clients may open (`None`: any index of any table the login can read).
    pub indexes: Option<Vec<crate::handlersocket::IndexGrant>>,
}

static FALLBACK_POOL: LazyLock<Pool> = LazyLock::new(|| Pool::with_defaults(DEFAULT_POOL_NAME));

impl Config {
    /// The pool a listener uses. Validation guarantees it exists; for a hand-built config
    /// that names a missing pool, a pool with default settings is returned.
    pub fn pool_for(&self, listener: &Listener) -> &Pool {
        self.pools.get(&listener.pool).unwrap_or(&FALLBACK_POOL)
    }

    /// The cluster a listener routes to.
    pub fn cluster_for(&self, listener: &Listener) -> Option<&Cluster> {
        self.clusters.get(&listener.cluster)
    }

    /// The servers of a cluster, in the cluster's order (empty if there is no such cluster).
    pub fn cluster_servers(&self, cluster: &str) -> Vec<&Server> {
        self.clusters
            .get(cluster)
            .map(|c| {
                c.servers
                    .iter()
                    .filter_map(|s| self.servers.get(s))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The protocol of a cluster (that of its first server).
    pub fn cluster_protocol(&self, cluster: &str) -> Option<Protocol> {
        self.cluster_servers(cluster).first().map(|s| s.protocol)
    }

    /// A configured user.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }
}
