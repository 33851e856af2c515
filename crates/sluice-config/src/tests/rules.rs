//! `[[rules]]`, `[tables]` and `[firewall]`.

use super::{BASE, assert_errors, ok};
use crate::{Cidr, FirewallMode, MatchOn, RuleAction, TargetRole};

const TWO: &str = r#"
[servers.pg2]
protocol = "postgres"
host = "127.0.0.2"

[clusters.analytics]
servers = ["pg2"]
"#;

#[test]
fn rules_tables_and_firewall_read() {
    let text = format!(
        r#"{BASE}{TWO}
[[rules]]
pattern = "^DELETE FROM \\S+$"
user = "app"
action = "block"
message = "DELETE without WHERE is not allowed here"

[[rules]]
tables = ["reports_daily"]
kind = "select"
client_address = "10.0.0.0/8"
action = "route"
cluster = "analytics"
role = "replica"
continue = true

[[rules]]
digest = "0x00000000000000ff"
pattern = "sleep"
action = "rewrite"
replace = "select 1"

[[rules]]
listener = "pg"
action = "timeout"
timeout = "2s"

[tables."public.order_line"]
cluster = "analytics"

[tables.Stock]
cluster = "main"

[firewall]
mode = "protecting"
allowlist_file = "allow.toml"

[users.app]
password = "x"
firewall = "learning"
"#
    );
    let c = ok(&text);
    assert_eq!(c.rules.len(), 4);
    assert_eq!(c.rules[0].number, 1);
    assert_eq!(
        c.rules[0].action,
        RuleAction::Block {
            message: "DELETE without WHERE is not allowed here".into()
        }
    );
    assert_eq!(c.rules[0].when.user.as_deref(), Some("app"));
    assert_eq!(c.rules[1].when.tables, ["reports_daily"]);
    assert_eq!(c.rules[1].when.kind, ["select"]);
    assert!(c.rules[1].continues);
    assert_eq!(
        c.rules[1].action,
        RuleAction::Route {
            cluster: "analytics".into(),
            role: Some(TargetRole::Replica)
        }
    );
    assert_eq!(c.rules[2].when.digest, Some(0xff));
    assert_eq!(c.rules[2].when.on(&c.rules[2].action), MatchOn::Text);
    assert_eq!(c.rules[0].when.on(&c.rules[0].action), MatchOn::Digest);
    assert_eq!(
        c.rules[3].action,
        RuleAction::Timeout(std::time::Duration::from_secs(2))
    );
    assert_eq!(c.tables["public.order_line"].cluster, "analytics");
    assert_eq!(c.tables["Stock"].table, "stock");
    assert_eq!(c.firewall.mode, FirewallMode::Protecting);
    assert_eq!(c.users["app"].firewall, Some(FirewallMode::Learning));
    assert_eq!(c.general.digest_max_entries, 10_000);
}

#[test]
fn bad_rules_name_their_line() {
    let text = format!(
        r#"{BASE}
[[rules]]
pattern = "(unclosed"
action = "block"

[[rules]]
action = "route"
cluster = "nowhere"

[[rules]]
kind = "selekt"
action = "log"
colour = "blue"

[[rules]]
action = "rewrite"
replace = "x"

[[rules]]
client_address = "10.0.0.0/40"
action = "explode"

[[rules]]
pattern = "x"
action = "rewrite"
replace = "1; DROP TABLE t"

[tables.orders]
cluster = "main"

[tables."public.x"]
cluster = "gone"
"#
    );
    assert_errors(
        &text,
        &[
            (Some(15), "not a valid regex"),
            (
                Some(20),
                "[[rules]] #2 cluster: cluster \"nowhere\" does not exist",
            ),
            (Some(23), "unknown kind \"selekt\""),
            (Some(25), "unknown key \"colour\""),
            (Some(27), "needs pattern"),
            (Some(32), "prefix length"),
            (Some(33), "invalid value \"explode\""),
            (Some(38), "a rewrite must leave one statement"),
            (Some(44), "cluster \"gone\" does not exist"),
        ],
    );
}

#[test]
fn rules_that_cannot_both_be_meant() {
    let text = format!(
        r#"{BASE}{TWO}
[[rules]]
user = "a"
action = "log"

[[rules]]
user = "a"
action = "block"

[[rules]]
user = "b"
action = "route"
cluster = "main"
continue = true

[[rules]]
user = "b"
action = "route"
cluster = "analytics"

[firewall]
mode = "learning"

[users.x]
firewall = "detecting"
"#
    );
    assert_errors(
        &text,
        &[
            (Some(25), "can never apply: rule 1 above"),
            (Some(35), "contradicts rule 3"),
            (Some(41), "needs allowlist_file"),
            (
                Some(44),
                "[users.x] firewall: mode \"detecting\" needs [firewall] allowlist_file",
            ),
        ],
    );
}

#[test]
fn handlersocket_index_grants() {
    let text = format!(
        r#"{BASE}
[handlersocket.kv]
address = "127.0.0.1:9998"
cluster = "main"
user = "kv"
indexes = ["test.t.PRIMARY:id,v", "test.logs.*", "shop.*.*"]
"#
    );
    let c = ok(&text);
    let grants = c.handlersocket["kv"].indexes.clone().unwrap_or_default();
    assert_eq!(grants.len(), 3);
    assert!(grants[0].allows("test", "t", "PRIMARY", &["id", "v"]));
    assert!(grants[0].allows("test", "t", "PRIMARY", &["v"]));
    assert!(!grants[0].allows("test", "t", "PRIMARY", &["id", "secret"]));
    assert!(!grants[0].allows("test", "t", "k", &["id"]));
    assert!(grants[1].allows("test", "logs", "anything", &["x"]));
    assert!(grants[2].allows("shop", "orders", "PRIMARY", &["x"]));
    assert!(!grants[2].allows("test", "orders", "PRIMARY", &["x"]));
    let bad = format!(
        r#"{BASE}
[handlersocket.kv]
address = "127.0.0.1:9998"
cluster = "main"
user = "kv"
indexes = ["test.t",
    "test.t.i:a,,b"]
"#
    );
    super::assert_errors(
        &bad,
        &[
            (Some(18), "is not db.table.index"),
            (Some(19), "empty column name"),
        ],
    );
}

#[test]
fn cidr() {
    let c = Cidr::parse("10.1.0.0/16").unwrap();
    assert!(c.contains("10.1.2.3".parse().unwrap()));
    assert!(!c.contains("10.2.0.1".parse().unwrap()));
    assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
    let one = Cidr::parse("::1").unwrap();
    assert!(one.contains("::1".parse().unwrap()));
    assert!(!one.contains("127.0.0.1".parse().unwrap()));
    assert!(
        Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap())
    );
    assert!(Cidr::parse("1.2.3.4/33").is_err());
    assert!(Cidr::parse("x").is_err());
}

#[test]
fn admin_defaults_and_checks() {
    let base = super::BASE;
    let ok = super::ok(base);
    assert_eq!(ok.admin, crate::Admin::default());
    assert_eq!(ok.admin.http_address.as_deref(), Some("127.0.0.1:9930"));
    let text = format!(
        "{base}\n[users.ops]\npassword = \"pw\"\n\n[admin]\nusers = [\"ops\"]\nhttp_address = \"\"\nmysql_address = \"127.0.0.1:0\"\npg_database = \"console\"\n"
    );
    let c = super::ok(&text);
    assert_eq!(c.admin.users, vec!["ops".to_string()]);
    assert_eq!(c.admin.http_address, None);
    assert_eq!(c.admin.mysql_address.as_deref(), Some("127.0.0.1:0"));
    assert_eq!(c.admin.pg_database, "console");
    assert!(c.admin.is_admin("ops") && !c.admin.is_admin("app"));
    let bad = format!(
        "{base}\n[admin]\nusers = [\"nobody\"]\nmysql_address = \"nohost\"\nhttp_address = \"127.0.0.1:6432\"\npg_database = \"\"\ncolour = 1\n"
    );
    let errors = crate::parse_with(&bad, "x.toml", &super::no_files())
        .expect_err("invalid")
        .to_string();
    for want in [
        "[admin] users[0]: user \"nobody\" does not exist",
        "mysql_address",
        "pg_database",
        "unknown key \"colour\" in [admin]",
        "[admin] http_address: \"127.0.0.1:6432\" is already used by [listeners.pg]",
    ] {
        assert!(errors.contains(want), "{want} not in {errors}");
    }
}

#[test]
fn listener_names_are_unique_and_not_the_admin_endpoints() {
    let base = super::BASE;
    let text = format!(
        "{base}\n[listeners.admin_http]\nprotocol = \"postgres\"\naddress = \"127.0.0.1:7000\"\ncluster = \"main\"\n\n[handlersocket.pg]\naddress = \"127.0.0.1:7001\"\ncluster = \"main\"\nuser = \"u\"\n"
    );
    let errors = crate::parse_with(&text, "x.toml", &super::no_files())
        .expect_err("invalid")
        .to_string();
    assert!(
        errors.contains("the name \"admin_http\" is the admin endpoint's"),
        "{errors}"
    );
    assert!(
        errors.contains("[listeners.pg] has this name already"),
        "{errors}"
    );
}
