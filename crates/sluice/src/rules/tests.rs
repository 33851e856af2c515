use super::*;
use sluice_config::{ValidateOptions, parse_with};

const BASE: &str = r#"
[servers.a]
protocol = "postgres"
host = "127.0.0.1"
[servers.b]
protocol = "postgres"
host = "127.0.0.2"
[servers.m]
protocol = "mysql"
host = "127.0.0.3"
[clusters.main]
servers = ["a"]
[clusters.analytics]
servers = ["b"]
[clusters.my]
servers = ["m"]
[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "main"
"#;

fn set(rules: &str, protocol: Protocol) -> RuleSet {
    let options = ValidateOptions {
        check_files: false,
        base_dir: None,
    };
    let text = format!("{BASE}{rules}");
    let config = parse_with(&text, "t.toml", &options).unwrap_or_else(|e| panic!("{e}"));
    RuleSet::compile(&config, protocol)
}

/// The session side of the rules for a client of these names.
fn who_of(
    rules: &RuleSet,
    user: &str,
    database: &str,
    listener: &str,
    addr: Option<std::net::IpAddr>,
) -> Who {
    let a = |s: &str| Arc::<str>::from(s);
    rules.who((&a(user), &a(database)), listener, addr)
}

fn judge(rules: &RuleSet, sql: &str, who: &Who) -> Verdict {
    let dialect = match rules.protocol {
        Protocol::Postgres => sluice_sql::Dialect::Postgres,
        Protocol::Mysql => sluice_sql::Dialect::MySql,
    };
    let cache = StatementCache::new(dialect);
    let stmt = cache.get(rules, sql.as_bytes(), who);
    // (The listener's cluster is "main" in every test.)
    rules.verdict(
        &stmt,
        sql.as_bytes(),
        who,
        (&who.database.clone(), "main"),
        true,
    )
}

#[test]
fn first_match_wins_unless_continue() {
    let r = set(
        r#"
[[rules]]
pattern = "^DELETE FROM \\S+$"
user = "app"
action = "block"
message = "no"

[[rules]]
kind = "select"
action = "log"
continue = true

[[rules]]
tables = ["reports_daily"]
action = "route"
cluster = "analytics"
role = "replica"

[[rules]]
kind = "select"
action = "timeout"
timeout = "1s"
"#,
        Protocol::Postgres,
    );
    let app = who_of(&r, "app", "db", "pg", None);
    let other = who_of(&r, "bob", "db", "pg", None);
    let v = judge(&r, "DELETE FROM t", &app);
    assert_eq!(v.block, Some((1, Arc::from("no"))));
    assert!(judge(&r, "DELETE FROM t", &other).is_plain());
    assert!(judge(&r, "DELETE FROM t WHERE id = 1", &app).is_plain());
    let v = judge(&r, "select * from reports_daily where d = 1", &other);
    assert_eq!(v.log, [2]);
    assert_eq!(
        v.route,
        Some(Destination {
            cluster: "analytics".into(),
            role: Some(TargetRole::Replica)
        })
    );
    // The route stopped: rule 4 did not apply.
    assert_eq!(v.timeout, None);
    let v = judge(&r, "select 1", &other);
    assert_eq!(v.timeout, Some(Duration::from_secs(1)));
    assert_eq!(r.hits(), [(1, 1), (2, 2), (3, 1), (4, 1)]);
}

#[test]
fn session_fields_and_negate() {
    let r = set(
        r#"
[[rules]]
client_address = "10.0.0.0/8"
kind = ["select", "show"]
negate = true
action = "block"
message = "10/8 only reads"

[[rules]]
database = "reports"
action = "log"
"#,
        Protocol::Postgres,
    );
    let inside = who_of(&r, "u", "reports", "pg", "10.1.2.3".parse().ok());
    let outside = who_of(&r, "u", "reports", "pg", "192.168.0.1".parse().ok());
    assert!(judge(&r, "delete from t", &inside).block.is_some());
    let v = judge(&r, "select 1", &inside);
    assert_eq!((v.block, v.log), (None, vec![2]));
    assert_eq!(judge(&r, "delete from t", &outside).log, [2]);
    let elsewhere = who_of(&r, "u", "app", "pg", "10.1.2.3".parse().ok());
    assert!(judge(&r, "select 1", &elsewhere).is_plain());
    // A read with a write behind it is not only a read.
    for sneaky in [
        "select 1; delete from t",
        "with d as (delete from t returning *) select * from d",
        "explain analyze delete from t",
    ] {
        assert!(judge(&r, sneaky, &inside).block.is_some(), "{sneaky}");
    }
}

#[test]
fn digest_and_text_patterns_and_rewrite() {
    let r = set(
        r#"
[[rules]]
pattern = "pg_sleep\\((\\d+)\\)"
action = "rewrite"
replace = "pg_sleep(0)"
continue = true

[[rules]]
pattern = "WHERE id = \\?$"
kind = ["select", "update"]
action = "log"
"#,
        Protocol::Postgres,
    );
    let who = who_of(&r, "u", "d", "pg", None);
    let v = judge(&r, "SELECT pg_sleep(10), pg_sleep(2)", &who);
    assert_eq!(
        v.rewrite.as_deref(),
        Some(&b"SELECT pg_sleep(0), pg_sleep(0)"[..])
    );
    assert_eq!(judge(&r, "SELECT a FROM t WHERE id = 42", &who).log, [2]);
    assert!(judge(&r, "DELETE FROM t WHERE id = 42", &who).is_plain());
    let digest = sluice_sql::facts(b"select 1", sluice_sql::Dialect::Postgres).digest;
    let r = set(
        &format!("[[rules]]\ndigest = \"{digest:#x}\"\naction = \"block\"\n"),
        Protocol::Postgres,
    );
    let who = who_of(&r, "u", "d", "pg", None);
    assert!(judge(&r, "select 2", &who).block.is_some());
    assert!(judge(&r, "select 'x'", &who).block.is_some());
    assert!(judge(&r, "select 1, 2", &who).is_plain());
}

#[test]
fn table_rules_and_the_cross_cluster_error() {
    let r = set(
        r#"
[tables."public.order_line"]
cluster = "analytics"
[tables.stock]
cluster = "analytics"
[tables."public.orders"]
cluster = "main"
"#,
        Protocol::Postgres,
    );
    let who = who_of(&r, "u", "d", "pg", None);
    let to = |c: &str| {
        Some(Destination {
            cluster: c.into(),
            role: None,
        })
    };
    assert_eq!(
        judge(&r, "select * from order_line", &who).route,
        to("analytics")
    );
    assert_eq!(
        judge(&r, "update public.stock set q = 1", &who).route,
        to("analytics")
    );
    assert_eq!(
        judge(&r, "select * from order_line join stock using (i)", &who).route,
        to("analytics")
    );
    // orders is on the listener's cluster: it goes there.
    assert_eq!(judge(&r, "select * from orders", &who).route, to("main"));
    let v = judge(&r, "select * from order_line join unruled using (i)", &who);
    assert!(
        v.cross
            .is_some_and(|c| c.contains("unruled (cluster \"main\")"))
    );
    assert_eq!(
        judge(
            &r,
            "select * from order_line, pg_catalog.pg_class, pg_type",
            &who
        )
        .route,
        to("analytics")
    );
    assert_eq!(
        judge(&r, "select * from other.order_line", &who).route,
        to("main")
    );
    assert!(judge(&r, "select now()", &who).is_plain());
    let v = judge(&r, "select * from orders o join order_line l on true", &who);
    let cross = v.cross.unwrap_or_default();
    assert!(cross.contains("orders (cluster \"main\")"), "{cross}");
    assert!(
        cross.contains("order_line (cluster \"analytics\")"),
        "{cross}"
    );
    // Another protocol's clusters are not this one's business.
    assert!(set("[tables.\"d.t\"]\ncluster = \"my\"\n", Protocol::Postgres).is_empty());
    let my = set("[tables.\"dbt2.t\"]\ncluster = \"my\"\n", Protocol::Mysql);
    let who = who_of(&my, "u", "dbt2", "my", None);
    assert_eq!(judge(&my, "select * from t", &who).route, to("my"));
    let elsewhere = who_of(&my, "u", "other", "my", None);
    assert_eq!(judge(&my, "select * from t", &elsewhere).route, to("main"));
}

#[test]
fn text_patterns_run_only_for_sessions_they_may_apply_to() {
    let r = set(
        r#"
[[rules]]
user = "alice"
pattern = "pg_sleep"
match_on = "text"
action = "block"

[[rules]]
user = "alice"
pattern = "^SELECT"
match_on = "text"
negate = true
action = "log"
"#,
        Protocol::Postgres,
    );
    let alice = who_of(&r, "alice", "d", "pg", None);
    let bob = who_of(&r, "bob", "d", "pg", None);
    assert!(r.on_text_patterns(&alice) && !r.on_text_patterns(&bob));
    assert!(judge(&r, "SELECT pg_sleep(1)", &alice).block.is_some());
    assert!(judge(&r, "SELECT pg_sleep(1)", &bob).is_plain());
    assert_eq!(judge(&r, "UPDATE t SET a = 1", &alice).log, [2]);
    assert!(judge(&r, "UPDATE t SET a = 1", &bob).is_plain());
    assert!(judge(&r, "SELECT 1", &alice).is_plain());
}
