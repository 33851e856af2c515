//! Cross-section checks: references to servers, clusters and pools, protocol consistency,
//! duplicate listener addresses, and references from objects that have errors of their own.

use super::{assert_errors, errs};

#[test]
fn cross_references() {
    let text = r#"
[servers.pg1]
protocol = "postgres"
host = "127.0.0.1"

[servers.my1]
protocol = "mysql"
host = "127.0.0.1"

[clusters.main]
servers = [
  "pg1",
  "pg9",
  "my1",
]

[clusters.my]
servers = ["my1"]

[pools.tx]
mode = "transaction"

[listeners.a]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "mian"

[listeners.b]
protocol = "postgres"
address = "127.0.0.1:6433"
cluster = "my"
pool = "tx"

[listeners.c]
protocol = "mysql"
address = "127.0.0.1:6433"
cluster = "my"
pool = "session"
"#;
    assert_errors(
        text,
        &[
            (
                Some(13),
                "[clusters.main] servers[1]: server \"pg9\" does not exist; defined servers: my1, pg1",
            ),
            (
                Some(14),
                "[clusters.main] servers[2]: server \"my1\" speaks mysql but \"pg1\" speaks postgres",
            ),
            // No `pool` key: the implicit "default" pool does not exist because [pools] is given.
            (
                Some(23),
                "[listeners.a] pool: pool \"default\" does not exist; defined pools: tx",
            ),
            (
                Some(26),
                "[listeners.a] cluster: cluster \"mian\" does not exist; defined clusters: main, my",
            ),
            (
                Some(31),
                "[listeners.b] cluster: cluster \"my\" speaks mysql but this listener speaks postgres",
            ),
            (
                Some(36),
                "[listeners.c] address: \"127.0.0.1:6433\" is already used by [listeners.b]",
            ),
            (
                Some(38),
                "[listeners.c] pool: pool \"session\" does not exist; defined pools: tx",
            ),
        ],
    );
}

#[test]
fn broken_objects_are_not_reported_twice() {
    // The server and the cluster have errors of their own; references to them are not
    // reported again as missing.
    let text = r#"
[servers.pg1]
protocol = "postgres"
host = "bad host"

[clusters.main]
servers = ["pg1"]

[clusters.other]
servers = ["pg1", 5]

[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "other"
"#;
    assert_errors(
        text,
        &[
            (Some(4), "[servers.pg1] host: invalid host \"bad host\""),
            (
                Some(10),
                "[clusters.other] servers[1]: expected a string, found an integer",
            ),
        ],
    );
}

#[test]
fn references_of_objects_with_errors_are_still_checked() {
    // The listener has an error of its own (tls without files) and an unknown key; its
    // cluster and pool references, and its address, are still checked. The mysql server has
    // a bad host but a known protocol, so the cluster mixing protocols is still reported.
    let text = r#"
[servers.pg1]
protocol = "postgres"
host = "127.0.0.1"

[servers.my1]
protocol = "mysql"
host = "bad host"

[clusters.main]
servers = ["pg1", "my1", 3]

[listeners.a]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "mian"
pool = "px"
tls = "require"
colour = "blue"

[listeners.b]
protocol = "mysql"
address = "127.0.0.1:6432"
cluster = "main"
"#;
    assert_errors(
        text,
        &[
            (Some(8), "[servers.my1] host: invalid host \"bad host\""),
            (
                Some(11),
                "[clusters.main] servers[2]: expected a string, found an integer",
            ),
            (
                Some(11),
                "[clusters.main] servers[1]: server \"my1\" speaks mysql but \"pg1\" speaks postgres",
            ),
            (
                Some(16),
                "[listeners.a] cluster: cluster \"mian\" does not exist; defined clusters: main",
            ),
            (
                Some(17),
                "[listeners.a] pool: pool \"px\" does not exist; defined pools: default",
            ),
            (
                Some(18),
                "[listeners.a] tls: tls = \"require\" requires tls_cert_file and tls_key_file",
            ),
            (Some(19), "unknown key \"colour\" in [listeners.a]"),
            (
                Some(23),
                "[listeners.b] address: \"127.0.0.1:6432\" is already used by [listeners.a]",
            ),
        ],
    );
}

#[test]
fn no_listeners() {
    let text = "[servers.pg1]\nprotocol = \"postgres\"\nhost = \"h\"\n";
    assert_errors(text, &[(None, "no listeners are defined")]);
    let shown = errs(text).to_string();
    assert_eq!(
        shown,
        "test.toml: no listeners are defined; add at least one [listeners.NAME] section"
    );
}

#[test]
fn listener_auth_matches_protocol() {
    // scram-sha-256 and md5 are PostgreSQL's, mysql_native_password and caching_sha2_password
    // MySQL's; passthrough and trust work on both.
    let text = r#"
[servers.my]
protocol = "mysql"
host = "127.0.0.1"

[servers.pg]
protocol = "postgres"
host = "127.0.0.1"

[clusters.my]
servers = ["my"]

[clusters.pg]
servers = ["pg"]

[listeners.my_md5]
protocol = "mysql"
address = "127.0.0.1:6033"
cluster = "my"
auth = "md5"

[listeners.my_scram]
protocol = "mysql"
address = "127.0.0.1:6034"
cluster = "my"
auth = "scram-sha-256"

[listeners.pg_native]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "pg"
auth = "mysql_native_password"

[listeners.pg_sha2]
protocol = "postgres"
address = "127.0.0.1:6433"
cluster = "pg"
auth = "caching_sha2_password"

[listeners.my_native]
protocol = "mysql"
address = "127.0.0.1:6035"
cluster = "my"
auth = "mysql_native_password"

[listeners.my_sha2]
protocol = "mysql"
address = "127.0.0.1:6036"
cluster = "my"
auth = "caching_sha2_password"

[listeners.my_trust]
protocol = "mysql"
address = "127.0.0.1:6037"
cluster = "my"
auth = "trust"

[listeners.my_passthrough]
protocol = "mysql"
address = "127.0.0.1:6038"
cluster = "my"
auth = "passthrough"

[listeners.pg_trust]
protocol = "postgres"
address = "127.0.0.1:6434"
cluster = "pg"
auth = "trust"
"#;
    assert_errors(
        text,
        &[
            (
                Some(20),
                "[listeners.my_md5] auth: auth \"md5\" is only available on postgres listeners",
            ),
            (
                Some(26),
                "[listeners.my_scram] auth: auth \"scram-sha-256\" is only available on postgres listeners",
            ),
            (
                Some(32),
                "[listeners.pg_native] auth: auth \"mysql_native_password\" is only available on mysql listeners",
            ),
            (
                Some(38),
                "[listeners.pg_sha2] auth: auth \"caching_sha2_password\" is only available on mysql listeners",
            ),
        ],
    );
    // The same listeners without the four mismatches are valid.
    let valid: String = text
        .split("\n\n")
        .filter(|block| {
            !["my_md5]", "my_scram]", "pg_native]", "pg_sha2]"]
                .iter()
                .any(|l| block.contains(l))
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let config = super::ok(&valid);
    let auth = |name: &str| config.listeners[name].auth;
    assert_eq!(auth("my_native"), crate::AuthMethod::MysqlNativePassword);
    assert_eq!(auth("my_sha2"), crate::AuthMethod::CachingSha2Password);
    assert_eq!(auth("my_trust"), crate::AuthMethod::Trust);
    assert_eq!(auth("my_passthrough"), crate::AuthMethod::Passthrough);
    assert_eq!(auth("pg_trust"), crate::AuthMethod::Trust);
    assert_eq!(config.listeners.len(), 5);
}
