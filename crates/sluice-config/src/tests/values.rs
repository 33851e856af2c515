//! Typed values: every key read into the right field, defaults applied, durations, sizes and
//! secrets decoded, and the convenience lookups on [`Config`].

use std::path::PathBuf;
use std::time::Duration;

use super::{BASE, ok};
use crate::*;

const SCRAM: &str = "SCRAM-SHA-256$4096:c2FsdC1mb3Itc2x1aWNl$HzJx9VC9Cz1X3PfR7DNUZ6yjVUUa01SCPdd+7dEMlXY=:ZVqu5YoDXYym81q0glyIqMHErKsJbTyV3ailQhcLDOc=";

#[test]
fn defaults() {
    let config = ok(BASE);
    assert_eq!(config.general, General::default());
    assert_eq!(config.general.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(config.general.max_message_size, 64 << 20);
    assert_eq!(config.general.log_format, LogFormat::Text);
    let server = &config.servers["pg1"];
    assert_eq!(server.port, 5432);
    assert_eq!(server.tls, ServerTls::Disable);
    assert_eq!(server.tls_server_name, "127.0.0.1");
    assert_eq!(server.tls_ca_file, None);
    // No [pools]: an implicit "default" pool with default settings.
    assert_eq!(config.pools.len(), 1);
    let pool = &config.pools["default"];
    assert_eq!(*pool, Pool::with_defaults("default"));
    assert_eq!(pool.mode, PoolMode::Session);
    assert_eq!(pool.size, 20);
    assert_eq!(pool.idle_timeout, Some(Duration::from_secs(600)));
    assert_eq!(pool.server_lifetime, Some(Duration::from_secs(3600)));
    assert_eq!(pool.statement_cache_size, 256);
    let listener = &config.listeners["pg"];
    assert_eq!(listener.pool, "default");
    assert_eq!(listener.auth, AuthMethod::Passthrough);
    assert_eq!(listener.tls, ClientTls::Disable);
    assert_eq!(config.pool_for(listener).name, "default");
    assert!(config.users.is_empty());
}

#[test]
fn every_key() {
    let text = format!(
        r#"
[general]
shutdown_timeout = 5
log_format = "json"
log_level = "info,sluice=debug"
max_message_size = "16MiB"
max_client_connections = 500
worker_threads = 4
busy_poll_us = 30

[servers.my1]
protocol = "mysql"
host = "::1"
tls = "verify-full"
tls_ca_file = "/etc/ssl/ca.pem"
tls_server_name = "db.example"

[clusters.my]
servers = ["my1"]

[users.app]
password = "{SCRAM}"
databases = ["app", "reports"]
server_user = "app_rw"
server_password = "s3cret"
pool_size = 7

[users.md5user]
password = "md5a3556571e93b0d20722ba62be61e8c2d"

[users.nopass]

[pools.tx]
mode = "transaction"
size = 10
min_idle = 2
connect_timeout = "250ms"
idle_timeout = "0s"
server_lifetime = "2h"
wait_timeout = "0s"
max_client_connections = 50
statement_cache_size = 1
reset_query = "RESET ALL"
shared_connections = 3

[pools.default]

[pools.lazy]
assign_server = "first_statement"

[listeners.tx]
protocol = "postgres"
address = "[::1]:6432"
cluster = "main"
pool = "tx"
auth = "scram-sha-256"
tls = "allow"
tls_cert_file = "certs/cert.pem"
tls_key_file = "certs/key.pem"

[listeners.my]
protocol = "mysql"
address = "localhost:6033"
cluster = "my"
pool = "tx"
auth = "trust"
{BASE}"#
    );
    let config = ok(&text);
    let g = &config.general;
    assert_eq!(g.shutdown_timeout, Duration::from_secs(5));
    assert_eq!(g.log_format, LogFormat::Json);
    assert_eq!(g.log_level, "info,sluice=debug");
    assert_eq!(g.max_message_size, 16 << 20);
    assert_eq!((g.max_client_connections, g.worker_threads), (500, 4));
    assert_eq!(g.busy_poll_us, 30);

    let my1 = &config.servers["my1"];
    assert_eq!(
        (my1.protocol, my1.port, my1.tls),
        (Protocol::Mysql, 3306, ServerTls::VerifyFull)
    );
    assert_eq!(my1.tls_ca_file, Some(PathBuf::from("/etc/ssl/ca.pem")));
    assert_eq!(my1.tls_server_name, "db.example");
    assert_eq!(my1.address(), "[::1]:3306");
    assert_eq!(config.servers["pg1"].address(), "127.0.0.1:5432");

    let app = &config.users["app"];
    let Some(Secret::Scram(v)) = &app.password else {
        panic!("{app:?}")
    };
    assert_eq!(
        (v.iterations, v.salt.as_slice()),
        (4096, &b"salt-for-sluice"[..])
    );
    assert_eq!(app.server_user(), "app_rw");
    assert_eq!(app.server_secret(), Some(&Secret::Plain("s3cret".into())));
    assert!(app.may_use_database("reports") && !app.may_use_database("postgres"));
    let md5 = &config.users["md5user"];
    assert!(matches!(md5.password, Some(Secret::Md5 { .. })));
    assert_eq!(md5.server_user(), "md5user");
    assert_eq!(md5.server_secret(), md5.password.as_ref());
    assert_eq!(md5.databases, ["*"]);
    assert!(md5.may_use_database("anything"));
    assert_eq!(config.users["nopass"].password, None);

    let tx = &config.pools["tx"];
    assert_eq!(
        (tx.mode, tx.size, tx.min_idle),
        (PoolMode::Transaction, 10, 2)
    );
    assert_eq!(tx.connect_timeout, Duration::from_millis(250));
    assert_eq!(tx.idle_timeout, None);
    assert_eq!(tx.server_lifetime, Some(Duration::from_secs(7200)));
    assert_eq!(tx.wait_timeout, Duration::ZERO);
    assert_eq!(
        (tx.max_client_connections, tx.statement_cache_size),
        (50, 1)
    );
    assert_eq!(tx.reset_query.as_deref(), Some("RESET ALL"));
    assert_eq!(tx.shared_connections, 3);
    assert_eq!(tx.size_for(Some(app)), 7);
    assert_eq!(tx.size_for(Some(md5)), 10);
    assert_eq!(tx.size_for(None), 10);
    assert_eq!(config.pools["default"], Pool::with_defaults("default"));
    assert!(config.pools["default"].server_at_login());
    assert!(!tx.server_at_login());
    let lazy = &config.pools["lazy"];
    assert_eq!(
        (lazy.mode, lazy.assign_server, lazy.server_at_login()),
        (PoolMode::Session, AssignServer::FirstStatement, false)
    );
    assert_eq!(config.pools.len(), 3);

    let l = &config.listeners["tx"];
    assert_eq!(l.address, "[::1]:6432");
    assert_eq!((l.auth, l.tls), (AuthMethod::ScramSha256, ClientTls::Allow));
    assert_eq!(l.tls_cert_file, Some(PathBuf::from("certs/cert.pem")));
    assert_eq!(config.pool_for(l).name, "tx");
    assert_eq!(
        config.cluster_for(l).map(|c| c.servers.clone()),
        Some(vec!["pg1".to_string()])
    );
    assert_eq!(config.listeners["my"].auth, AuthMethod::Trust);
    assert_eq!(config.cluster_protocol("my"), Some(Protocol::Mysql));
    assert_eq!(config.cluster_servers("my")[0].name, "my1");
    assert!(config.cluster_servers("nope").is_empty());
    assert!(config.user("app").is_some());
}

#[test]
fn durations_and_sizes_in_files() {
    for (text, want) in [
        ("\"250ms\"", 250),
        ("\"30s\"", 30_000),
        ("\"10m\"", 600_000),
        ("\"1h\"", 3_600_000),
        ("7", 7_000),
    ] {
        let config = ok(&format!("[general]\nshutdown_timeout = {text}\n{BASE}"));
        assert_eq!(
            config.general.shutdown_timeout,
            Duration::from_millis(want),
            "{text}"
        );
    }
    for (text, want) in [
        ("\"512KiB\"", 512 << 10),
        ("\"1GiB\"", 1 << 30),
        ("2048", 2048),
        ("\"4096B\"", 4096),
    ] {
        let config = ok(&format!("[general]\nmax_message_size = {text}\n{BASE}"));
        assert_eq!(config.general.max_message_size, want, "{text}");
    }
}

#[test]
fn fallback_pool_for_hand_built_config() {
    let mut config = ok(BASE);
    config.pools.clear();
    let listener = config.listeners["pg"].clone();
    assert_eq!(*config.pool_for(&listener), Pool::with_defaults("default"));
}

#[test]
fn enums_round_trip() {
    for (text, value) in AuthMethod::ALL {
        assert_eq!(text.parse::<AuthMethod>(), Ok(*value));
        assert_eq!(value.to_string(), *text);
    }
    assert_eq!(
        "mysql_native_password".parse::<AuthMethod>(),
        Ok(AuthMethod::MysqlNativePassword)
    );
    assert_eq!(
        "caching_sha2_password".parse::<AuthMethod>(),
        Ok(AuthMethod::CachingSha2Password)
    );
    for (method, only) in [
        (AuthMethod::Passthrough, None),
        (AuthMethod::Trust, None),
        (AuthMethod::ScramSha256, Some(Protocol::Postgres)),
        (AuthMethod::Md5, Some(Protocol::Postgres)),
        (AuthMethod::MysqlNativePassword, Some(Protocol::Mysql)),
        (AuthMethod::CachingSha2Password, Some(Protocol::Mysql)),
    ] {
        assert_eq!(method.protocol(), only, "{method}");
        for protocol in [Protocol::Postgres, Protocol::Mysql] {
            assert_eq!(
                method.is_available_on(protocol),
                only.is_none_or(|p| p == protocol),
                "{method} on {protocol}"
            );
        }
    }
    assert!("nope".parse::<PoolMode>().is_err());
    assert_eq!(Protocol::Mysql.default_port(), 3306);
}

#[test]
fn mysql_auth() {
    let text = format!(
        r#"{BASE}
[servers.my1]
protocol = "mysql"
host = "127.0.0.1"

[clusters.my]
servers = ["my1"]

[users.native]
password = "*2470c0c06dee42fd1618bb99005adca2ec9d1e19"
server_password = "password"

[users.sha2]
password = "sha2:73641C99F7719F57D8F4BEB11A303AFCD190243A51CED8782CA6D3DBE014D146"

[users.plain]
password = "password"

[listeners.native]
protocol = "mysql"
address = "127.0.0.1:6033"
cluster = "my"
auth = "mysql_native_password"

[listeners.sha2]
protocol = "mysql"
address = "127.0.0.1:6034"
cluster = "my"
auth = "caching_sha2_password"
"#
    );
    let config = ok(&text);
    assert_eq!(
        config.listeners["native"].auth,
        AuthMethod::MysqlNativePassword
    );
    assert_eq!(
        config.listeners["sha2"].auth,
        AuthMethod::CachingSha2Password
    );
    let native = &config.users["native"];
    let Some(Secret::MysqlNative { stored }) = &native.password else {
        panic!("{native:?}")
    };
    assert_eq!((stored[0], stored[19]), (0x24, 0x19));
    // Written back the way MySQL writes it: uppercase.
    assert_eq!(
        native
            .password
            .as_ref()
            .map(Secret::to_config_string)
            .as_deref(),
        Some("*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19")
    );
    assert_eq!(
        native.server_secret(),
        Some(&Secret::Plain("password".into()))
    );
    let sha2 = &config.users["sha2"];
    let Some(Secret::Sha2 { stored }) = &sha2.password else {
        panic!("{sha2:?}")
    };
    assert_eq!((stored[0], stored[31]), (0x73, 0x46));
    assert_eq!(
        sha2.password
            .as_ref()
            .map(Secret::to_config_string)
            .as_deref(),
        Some("sha2:73641c99f7719f57d8f4beb11a303afcd190243a51ced8782ca6d3dbe014d146")
    );
    // Without server_password the server login uses `password`, which a hash cannot do.
    assert_eq!(sha2.server_secret().map(Secret::can_log_in), Some(false));
    assert_eq!(
        config.users["plain"].password,
        Some(Secret::Plain("password".into()))
    );
}

#[test]
fn server_compression() {
    let text = format!(
        "{BASE}\n[servers.my1]\nprotocol = \"mysql\"\nhost = \"127.0.0.1\"\ncompression = \"zstd\"\n\n[servers.my2]\nprotocol = \"mysql\"\nhost = \"127.0.0.1\"\n"
    );
    let config = ok(&text);
    assert_eq!(config.servers["my1"].compression, Compression::Zstd);
    assert_eq!(config.servers["my2"].compression, Compression::Off);
    assert_eq!(config.servers["pg1"].compression, Compression::Off);
    let bad = text.replace("\"zstd\"", "\"gzip\"");
    super::assert_errors(
        &bad,
        &[(
            Some(17),
            "[servers.my1] compression: invalid value \"gzip\"; expected one of: \"off\", \"zlib\", \"zstd\"",
        )],
    );
    let pg = BASE.replace(
        "host = \"127.0.0.1\"\n",
        "host = \"127.0.0.1\"\ncompression = \"zlib\"\n",
    );
    super::assert_errors(
        &pg,
        &[(
            Some(5),
            "[servers.pg1] compression: only MySQL servers have a compressed protocol",
        )],
    );
}
