//! Every kind of error, reported with the right line, and many errors reported together.

use super::{BASE, assert_errors, errs};
use crate::{AssignServer, Secret};

#[test]
fn syntax_error_has_its_line() {
    let text = "[general]\nlog_level = \"info\"\nshutdown_timeout = \n";
    assert_errors(text, &[(Some(3), "TOML syntax error")]);
    assert_errors("[a]\nb = 1\n[a]\n", &[(Some(3), "duplicate key")]);
    let shown = errs("x = [").to_string();
    assert!(
        shown.starts_with("test.toml:1: TOML syntax error: "),
        "{shown}"
    );
}

#[test]
fn unknown_keys_each_with_line() {
    let text = format!(
        "{BASE}\n[pools.default]\npool_sise = 3\nmode = \"session\"\nmaxx = 1\n\n[general]\nlog = 1\n[bogus]\nx = 1\n"
    );
    assert_errors(
        &text,
        &[
            (
                Some(15),
                r#"unknown key "pool_sise" in [pools.default]; expected one of: mode, assign_server, size, min_idle,"#,
            ),
            (Some(17), r#"unknown key "maxx" in [pools.default]"#),
            (
                Some(20),
                r#"unknown key "log" in [general]; expected one of: shutdown_timeout, log_format"#,
            ),
            (
                Some(21),
                "unknown section [bogus]; expected one of: general, servers, clusters, users, pools, listeners",
            ),
        ],
    );
    assert_errors(
        &format!("stray = 1\n{BASE}"),
        &[(Some(1), r#"unknown key "stray" at the top level"#)],
    );
    let text =
        format!("{BASE}\n[servers.pg2]\nprotocol = \"postgres\"\nhost = \"h\"\nhots = \"x\"\n");
    assert_errors(
        &text,
        &[(Some(17), r#"unknown key "hots" in [servers.pg2]"#)],
    );
}

#[test]
fn wrong_types() {
    let text = r#"
[general]
shutdown_timeout = true
log_level = 3
max_message_size = 1.5
worker_threads = "4"

[servers.pg1]
protocol = "postgres"
host = "127.0.0.1"
port = "5432"

[clusters.main]
servers = "pg1"

[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = ["main"]

[users]
app = "secret"

[pools.default.size]
x = 1
"#;
    assert_errors(
        text,
        &[
            (
                Some(3),
                "[general] shutdown_timeout: expected a duration string such as \"30s\", found a boolean",
            ),
            (
                Some(4),
                "[general] log_level: expected a string, found an integer",
            ),
            (
                Some(5),
                "[general] max_message_size: expected a size such as \"64MiB\", found a float",
            ),
            (
                Some(6),
                "[general] worker_threads: expected an integer, found a string",
            ),
            (
                Some(11),
                "[servers.pg1] port: expected an integer, found a string",
            ),
            (
                Some(14),
                "[clusters.main] servers: expected an array of strings, found a string",
            ),
            (
                Some(19),
                "[listeners.pg] cluster: expected a string, found an array",
            ),
            (Some(22), "[users.app] must be a table, found a string"),
            (
                Some(24),
                "[pools.default] size: expected a value, found a table",
            ),
        ],
    );
}

#[test]
fn bad_values_each_reported() {
    let text = r#"
[general]
shutdown_timeout = "30 s"
log_format = "xml"
max_message_size = "64MB"
max_client_connections = 0

[servers.pg1]
protocol = "postgresql"
host = "127.0.0.1:5432"
port = 70000
tls = "verify"

[clusters.main]
servers = []

[pools.default]
mode = "statement"
size = 0
connect_timeout = "0s"
idle_timeout = "-1s"
statement_cache_size = 0
reset_query = ""

[listeners.pg]
protocol = "postgres"
address = "127.0.0.1"
cluster = "main"
auth = "password"
tls = "on"
"#;
    assert_errors(
        text,
        &[
            (
                Some(3),
                "[general] shutdown_timeout: invalid duration \"30 s\"; expected an integer followed by ms, s, m or h",
            ),
            (
                Some(4),
                "[general] log_format: invalid value \"xml\"; expected one of: \"text\", \"json\"",
            ),
            (
                Some(5),
                "[general] max_message_size: invalid size \"64MB\"; expected an integer followed by B, KiB, MiB or GiB",
            ),
            (
                Some(6),
                "[general] max_client_connections: must be at least 1, found 0",
            ),
            (
                Some(9),
                "[servers.pg1] protocol: invalid value \"postgresql\"; expected one of: \"postgres\", \"mysql\"",
            ),
            (
                Some(10),
                "[servers.pg1] host: invalid host \"127.0.0.1:5432\"",
            ),
            (
                Some(11),
                "[servers.pg1] port: must be at most 65535, found 70000",
            ),
            (
                Some(12),
                "[servers.pg1] tls: invalid value \"verify\"; expected one of: \"disable\", \"prefer\", \"require\", \"verify-ca\", \"verify-full\"",
            ),
            (
                Some(15),
                "[clusters.main] servers: must list at least one server",
            ),
            (
                Some(18),
                "[pools.default] mode: invalid value \"statement\"",
            ),
            (
                Some(19),
                "[pools.default] size: must be at least 1, found 0",
            ),
            (
                Some(20),
                "[pools.default] connect_timeout: must be greater than zero",
            ),
            (
                Some(21),
                "[pools.default] idle_timeout: invalid duration \"-1s\"",
            ),
            (
                Some(22),
                "[pools.default] statement_cache_size: must be at least 1, found 0",
            ),
            (Some(23), "[pools.default] reset_query: must not be empty"),
            (
                Some(27),
                "[listeners.pg] address: invalid address \"127.0.0.1\": missing port",
            ),
            (
                Some(29),
                "[listeners.pg] auth: invalid value \"password\"; expected one of: \"passthrough\", \"scram-sha-256\", \"md5\", \"trust\", \"mysql_native_password\", \"caching_sha2_password\"",
            ),
            (
                Some(30),
                "[listeners.pg] tls: invalid value \"on\"; expected one of: \"disable\", \"allow\", \"require\"",
            ),
        ],
    );
}

#[test]
fn missing_required_keys_point_at_the_header() {
    let text = r#"
[servers.pg1]
port = 5432

[clusters.main]

[listeners.pg]
cluster = "main"
"#;
    assert_errors(
        text,
        &[
            (Some(2), "[servers.pg1]: missing required key \"protocol\""),
            (Some(2), "[servers.pg1]: missing required key \"host\""),
            (Some(5), "[clusters.main]: missing required key \"servers\""),
            (Some(7), "[listeners.pg]: missing required key \"protocol\""),
            (Some(7), "[listeners.pg]: missing required key \"address\""),
        ],
    );
}

#[test]
fn message_size_bounds() {
    for (value, ok) in [
        ("\"1KiB\"", true),
        ("\"1GiB\"", true),
        ("1023", false),
        ("\"2GiB\"", false),
        ("1024", true),
    ] {
        let text = format!("[general]\nmax_message_size = {value}\n{BASE}");
        let result = super::parse_with(&text, "test.toml", &super::no_files());
        assert_eq!(result.is_ok(), ok, "{value}");
        if !ok {
            assert_errors(&text, &[(Some(2), "must be between 1KiB and 1GiB")]);
        }
    }
}

#[test]
fn busy_poll_bounds() {
    let ok = format!("[general]\nbusy_poll_us = 50\n{BASE}");
    let config = super::parse_with(&ok, "test.toml", &super::no_files());
    assert_eq!(config.map(|c| c.general.busy_poll_us).ok(), Some(50));
    let text = format!("[general]\nbusy_poll_us = 20000\n{BASE}");
    assert_errors(&text, &[(Some(2), "must be at most 10000, found 20000")]);
    let text = format!("[general]\nbusy_poll_us = \"50us\"\n{BASE}");
    assert_errors(&text, &[(Some(2), "expected an integer")]);
}

#[test]
fn pool_consistency() {
    let text = format!("{BASE}\n[pools.default]\nsize = 5\nmin_idle = 6\n");
    assert_errors(
        &text,
        &[(
            Some(16),
            "[pools.default] min_idle: must not exceed size (5), found 6",
        )],
    );
    // Against the default size (20).
    let text = format!("{BASE}\n[pools.default]\nmin_idle = 21\n");
    assert_errors(&text, &[(Some(15), "must not exceed size (20), found 21")]);
    // A server connection at login is session mode's alone.
    let text =
        format!("{BASE}\n[pools.default]\nmode = \"transaction\"\nassign_server = \"login\"\n");
    assert_errors(
        &text,
        &[(
            Some(16),
            "[pools.default] assign_server: a transaction-mode pool gives a server connection per transaction",
        )],
    );
    let text = format!("{BASE}\n[pools.default]\nassign_server = \"later\"\n");
    assert_errors(
        &text,
        &[(
            Some(15),
            "[pools.default] assign_server: invalid value \"later\"; expected one of: \"login\", \"first_statement\"",
        )],
    );
    let text = format!(
        "{BASE}\n[pools.default]\nmode = \"transaction\"\nassign_server = \"first_statement\"\n"
    );
    assert_eq!(
        super::ok(&text).pools["default"].assign_server,
        AssignServer::FirstStatement
    );
}

#[test]
fn tls_settings() {
    let text = format!(
        "{BASE}tls = \"require\"\n\n[servers.pg2]\nprotocol = \"postgres\"\nhost = \"h\"\ntls = \"verify-full\"\n"
    );
    assert_errors(
        &text,
        &[
            (
                Some(13),
                "[listeners.pg] tls: tls = \"require\" requires tls_cert_file and tls_key_file",
            ),
            (
                Some(18),
                "[servers.pg2] tls: tls = \"verify-full\" requires tls_ca_file",
            ),
        ],
    );
}

#[test]
fn user_errors() {
    let text = format!(
        r#"{BASE}
[users.a]
password = "SCRAM-SHA-256$4096:c2FsdA==$AAAA:BBBB"
databases = ["app", ""]

[users.b]
password = "md5a3556571e93b0d20722ba62be61e8c2d"
server_user = "other"
pool_size = 0

[users.c]
password = "x"
server_password = "SCRAM-SHA-256$4096:c2FsdC1mb3Itc2x1aWNl$HzJx9VC9Cz1X3PfR7DNUZ6yjVUUa01SCPdd+7dEMlXY=:ZVqu5YoDXYym81q0glyIqMHErKsJbTyV3ailQhcLDOc="
databases = []
"#
    );
    assert_errors(
        &text,
        &[
            (
                Some(15),
                "[users.a] password: invalid SCRAM-SHA-256 verifier: StoredKey is 3 bytes, expected 32",
            ),
            (
                Some(16),
                "[users.a] databases[1]: must not be an empty string",
            ),
            (
                Some(20),
                "[users.b] server_user: password is an md5 hash salted with the user name \"b\"",
            ),
            (Some(21), "[users.b] pool_size: must be at least 1, found 0"),
            (
                Some(25),
                "[users.c] server_password: a SCRAM-SHA-256 verifier cannot log in to a server",
            ),
            (Some(26), "[users.c] databases: must not be empty"),
        ],
    );
}

#[test]
fn mysql_user_errors() {
    // Near misses of the MySQL hash forms, and MySQL hashes as server_password (they cannot
    // log in to a server).
    let text = format!(
        r#"{BASE}
[users.a]
password = "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E1Z"

[users.b]
password = "sha2:73641c99f7719f57d8f4beb11a303afcd190243a51ced8782ca6d3dbe014d1"

[users.c]
password = "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"
server_password = "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"

[users.d]
password = "x"
server_password = "sha2:73641c99f7719f57d8f4beb11a303afcd190243a51ced8782ca6d3dbe014d146"

[users.e]
password = "sha2:"
"#
    );
    let expected = [
        "test.toml:15: [users.a] password: password \"*2470C…\" looks like a mysql_native_password \
         hash but it contains characters that are not hex digits; that format is \"*\" followed \
         by 40 hex digits of SHA1(SHA1(password)), as in mysql.user.authentication_string",
        "test.toml:18: [users.b] password: password \"sha2:7…\" starts with \"sha2:\" but it has \
         62 hex digits instead of 64; a caching_sha2 hash is \"sha2:\" followed by 64 hex digits \
         of SHA256(SHA256(password))",
        "test.toml:22: [users.c] server_password: a mysql_native_password hash cannot log in to a \
         server; give the plaintext password",
        "test.toml:26: [users.d] server_password: a caching_sha2 hash cannot log in to a server; \
         give the plaintext password",
        "test.toml:29: [users.e] password: password \"sha2:…\" starts with \"sha2:\" but it has 0 \
         hex digits instead of 64; a caching_sha2 hash is \"sha2:\" followed by 64 hex digits of \
         SHA256(SHA256(password))",
    ];
    assert_eq!(errs(&text).to_string(), expected.join("\n"));

    // Fixed, they load; a plaintext server_password goes with a MySQL hash password.
    let fixed = text
        .replace("D1E1Z", "D1E19")
        .replace("e014d1\"", "e014d146\"")
        .replace(
            "server_password = \"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19\"",
            "server_password = \"password\"",
        )
        .replace(
            "server_password = \"sha2:73641c99f7719f57d8f4beb11a303afcd190243a51ced8782ca6d3dbe014d146\"",
            "server_password = \"password\"",
        )
        .replace("password = \"sha2:\"", "password = \"sha2\"");
    let config = super::ok(&fixed);
    let user = &config.users["c"];
    assert_eq!(
        user.password.as_ref().map(Secret::kind),
        Some("mysql_native_password hash")
    );
    assert_eq!(
        user.server_secret(),
        Some(&Secret::Plain("password".into()))
    );
    assert_eq!(
        config.users["b"].password.as_ref().map(Secret::kind),
        Some("caching_sha2 hash")
    );
    assert_eq!(
        config.users["e"].password,
        Some(Secret::Plain("sha2".into()))
    );
}

#[test]
fn errors_are_sorted_and_all_reported() {
    // One error in every section, written out of order.
    let text = r#"
[listeners.pg]
protocol = "postgres"
address = "nowhere"
cluster = "main"

[general]
worker_threads = -1

[servers.pg1]
protocol = "postgres"
host = "127.0.0.1"
tls_server_nam = "x"

[clusters.main]
servers = ["pg1"]

[pools.default]
wait_timeout = "forever"

[users.app]
databases = "app"
"#;
    let errors = errs(text);
    let lines: Vec<Option<usize>> = errors.iter().map(|e| e.line).collect();
    assert_eq!(
        lines,
        [Some(4), Some(8), Some(13), Some(19), Some(22)],
        "{errors}"
    );
}

#[test]
fn inline_and_dotted_tables() {
    let text = r#"
servers.pg1 = { protocol = "postgres", host = "127.0.0.1", prot = 1 }
clusters.main.servers = ["pg1"]

[listeners]
pg = { protocol = "postgres", address = "127.0.0.1:6432", cluster = "main" }
bad = 7
"#;
    assert_errors(
        text,
        &[
            (Some(2), "unknown key \"prot\" in [servers.pg1]"),
            (Some(7), "[listeners.bad] must be a table, found an integer"),
        ],
    );
    let fixed = text.replace(", prot = 1", "").replace("bad = 7\n", "");
    let config = super::ok(&fixed);
    assert_eq!(config.listeners["pg"].cluster, "main");
}
