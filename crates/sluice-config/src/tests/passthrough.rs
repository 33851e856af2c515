//! `auth_user` / `auth_query` on pass-through listeners: defaults per protocol, the
//! errors with file:line, what it allows (`split`), and the warnings for pass-through
//! listeners that cannot follow a failover.

use super::{assert_errors, ok};
use crate::*;

/// Two servers of each protocol, a user for lookups, and a transaction-mode pool.
const TWO: &str = r#"
[servers.a]
protocol = "postgres"
host = "127.0.0.1"

[servers.b]
protocol = "postgres"
host = "127.0.0.2"

[servers.m1]
protocol = "mysql"
host = "127.0.0.1"

[servers.m2]
protocol = "mysql"
host = "127.0.0.2"

[clusters.pg]
servers = ["a", "b"]

[clusters.my]
servers = ["m1", "m2"]

[pools.default]

[pools.tx]
mode = "transaction"

[pools.session]
mode = "session"

[users.lookup]
password = "lookup-pw"
"#;

#[test]
fn defaults_per_protocol_and_split_allowed() {
    let text = format!(
        r#"{TWO}
[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "pg"
pool = "tx"
route = "split"
auth_user = "lookup"

[listeners.my]
protocol = "mysql"
address = "127.0.0.1:6033"
cluster = "my"
pool = "tx"
route = "split"
auth_user = "lookup"

[listeners.custom]
protocol = "postgres"
address = "127.0.0.1:6434"
cluster = "pg"
pool = "session"
auth_user = "lookup"
auth_query = "SELECT usename, passwd FROM pgbouncer.get_auth($1)"
"#
    );
    let c = ok(&text);
    let pg = c.listeners["pg"].auth_query.as_ref().unwrap();
    assert_eq!(
        (pg.user.as_str(), pg.query.as_str()),
        ("lookup", DEFAULT_PG_AUTH_QUERY)
    );
    assert!(DEFAULT_PG_AUTH_QUERY.contains("pg_authid") && DEFAULT_PG_AUTH_QUERY.contains("$1"));
    let my = c.listeners["my"].auth_query.as_ref().unwrap();
    assert_eq!(my.query, DEFAULT_MYSQL_AUTH_QUERY);
    assert!(DEFAULT_MYSQL_AUTH_QUERY.contains("mysql.user"));
    assert_eq!(
        c.listeners["custom"].auth_query.as_ref().unwrap().query,
        "SELECT usename, passwd FROM pgbouncer.get_auth($1)"
    );
    assert!(c.listeners.values().all(Listener::logs_in_itself));
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn errors_name_the_line() {
    let text = format!(
        r#"{TWO}
[users.hashed]
password = "md56a422f785c9e20873908ce25d1736ae2"

[users.verifier]
password = "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19"

[listeners.own]
protocol = "postgres"
address = "127.0.0.1:7001"
cluster = "pg"
auth = "scram-sha-256"
auth_user = "lookup"

[listeners.orphan]
protocol = "postgres"
address = "127.0.0.1:7002"
cluster = "pg"
auth_query = "SELECT 1, 2 WHERE $1 = ''"

[listeners.noparam]
protocol = "mysql"
address = "127.0.0.1:7003"
cluster = "my"
auth_user = "lookup"
auth_query = "SELECT plugin, authentication_string FROM mysql.user"

[listeners.nobody]
protocol = "postgres"
address = "127.0.0.1:7004"
cluster = "pg"
auth_user = "ghost"

[listeners.md5my]
protocol = "mysql"
address = "127.0.0.1:7005"
cluster = "my"
auth_user = "hashed"

[listeners.hashonly]
protocol = "mysql"
address = "127.0.0.1:7006"
cluster = "my"
auth_user = "verifier"

[listeners.split]
protocol = "postgres"
address = "127.0.0.1:7007"
cluster = "pg"
pool = "tx"
route = "split"
"#
    );
    // The line numbers below count from the first line after TWO.
    let at = |n: usize| Some(TWO.lines().count() + 1 + n);
    assert_errors(
        &text,
        &[
            (at(12), "auth_user: applies to auth = \"passthrough\" only"),
            (at(18), "auth_query: is set without auth_user"),
            (
                at(25),
                "auth_query: must take the user name as its parameter ?",
            ),
            (
                at(31),
                "auth_user: user \"ghost\" does not exist; defined users: hashed, lookup, verifier",
            ),
            (at(37), "md5 server password, which logs in to PostgreSQL"),
            (
                at(43),
                "is a mysql_native_password hash, with which Sluice cannot log in",
            ),
            (at(50), "route \"split\" logs in to more than one server"),
        ],
    );
}

#[test]
fn warnings_for_transaction_mode_pass_through_over_several_servers() {
    let text = format!(
        r#"{TWO}
[servers.solo]
protocol = "postgres"
host = "127.0.0.3"

[clusters.solo]
servers = ["solo"]

[listeners.tx]
protocol = "postgres"
address = "127.0.0.1:7001"
cluster = "pg"
pool = "tx"

[listeners.session]
protocol = "postgres"
address = "127.0.0.1:7002"
cluster = "pg"
pool = "session"

[listeners.one]
protocol = "postgres"
address = "127.0.0.1:7003"
cluster = "solo"
pool = "tx"

[listeners.looked_up]
protocol = "mysql"
address = "127.0.0.1:7004"
cluster = "my"
pool = "tx"
auth_user = "lookup"
"#
    );
    let c = ok(&text);
    let warnings = c.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("[listeners.tx]: pass-through users in transaction mode"),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("set auth_user"), "{warnings:?}");
    assert!(!c.listeners["tx"].logs_in_itself());
}

#[test]
fn pass_through_users_get_their_server_at_login() {
    let text = format!(
        r#"{TWO}
[pools.lazy]
assign_server = "first_statement"

[listeners.lazy]
protocol = "postgres"
address = "127.0.0.1:7001"
cluster = "solo"
pool = "lazy"

[listeners.looked_up]
protocol = "postgres"
address = "127.0.0.1:7002"
cluster = "solo"
pool = "lazy"
auth_user = "lookup"

[servers.solo]
protocol = "postgres"
host = "127.0.0.3"

[clusters.solo]
servers = ["solo"]
"#
    );
    let warnings = ok(&text).warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "[listeners.lazy]: pass-through users get their server connection at login"
        ),
        "{warnings:?}"
    );
}
