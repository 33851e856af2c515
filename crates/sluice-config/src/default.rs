//! The built-in default configuration: what `sluice` runs when started without a
//! configuration file. It is kept as TOML text ([`BUILTIN_DEFAULT_TOML`]) so that the docs and
//! the CLI can show exactly what runs, and [`builtin_default`] parses it with the same code
//! as any other file.

use crate::schema::Config;
use crate::{ValidateOptions, parse_with};

/// The built-in default configuration as TOML.
pub const BUILTIN_DEFAULT_TOML: &str = r#"# Sluice built-in default configuration.

[servers.pg]
protocol = "postgres"
host = "127.0.0.1"
port = 5432

[clusters.pg]
servers = ["pg"]

[pools.default]
mode = "session"

[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "pg"
pool = "default"
auth = "passthrough"
tls = "disable"

[servers.mysql]
protocol = "mysql"
host = "127.0.0.1"
port = 3306

[clusters.mysql]
servers = ["mysql"]

[listeners.mysql]
protocol = "mysql"
address = "127.0.0.1:6033"
cluster = "mysql"
pool = "default"
auth = "passthrough"
tls = "disable"

# HandlerSocket in front of the same MySQL/MariaDB server, on the plugin's usual ports.
# Requests run as the server's root, so clients must first send `A 1 <secret>`: the
# secret is generated on the first start into this file, readable only by the user
# running Sluice.
[handlersocket.hs_read]
address = "127.0.0.1:9998"
cluster = "mysql"
mode = "read-only"
user = "root"
secret_file = "~/.local/state/sluice/handlersocket.secret"

[handlersocket.hs_write]
address = "127.0.0.1:9999"
cluster = "mysql"
mode = "read-write"
user = "root"
secret_file = "~/.local/state/sluice/handlersocket.secret"
"#;

/// File name used in errors about the built-in default.
pub const BUILTIN_DEFAULT_NAME: &str = "<built-in default>";

/// The configuration `sluice` runs with no arguments: a PostgreSQL listener on
/// 127.0.0.1:6432 relaying to a server on 127.0.0.1:5432 and a MySQL listener on
/// 127.0.0.1:6033 relaying to a server on 127.0.0.1:3306, both with passthrough auth, and
/// HandlerSocket listeners on 127.0.0.1:9998 (read-only) and :9999 (read-write) running
/// their requests on that MySQL server as `root`, for clients that know the secret in
/// `~/.local/state/sluice/handlersocket.secret` (generated on the first start).
pub fn builtin_default() -> Config {
    let options = ValidateOptions {
        check_files: false,
        base_dir: None,
    };
    match parse_with(BUILTIN_DEFAULT_TOML, BUILTIN_DEFAULT_NAME, &options) {
        Ok(config) => config,
        // The text is a constant covered by unit tests; failing here is a bug in this crate.
        Err(errors) => panic!("the built-in default configuration is invalid:\n{errors}"),
    }
}
