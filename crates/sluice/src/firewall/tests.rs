use super::*;
use sluice_config::{ValidateOptions, parse_with};

fn config(extra: &str) -> Config {
    let text = format!(
        r#"
[servers.a]
protocol = "postgres"
host = "127.0.0.1"
[clusters.main]
servers = ["a"]
[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "main"
firewall = "detecting"
[users.app]
password = "x"
firewall = "protecting"
{extra}
"#
    );
    let options = ValidateOptions {
        check_files: false,
        base_dir: None,
    };
    parse_with(&text, "t.toml", &options).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn times_round_trip() {
    for secs in [0, 951_782_400, 1_795_000_000, 4_102_444_800] {
        assert_eq!(file::parse_time(&file::format_time(secs)), Some(secs));
    }
    assert_eq!(
        file::format_time(1_795_000_000 - 1_795_000_000 % 86_400),
        "2026-11-18T00:00:00Z"
    );
    assert_eq!(file::parse_time("2026-13-01T00:00:00Z"), None);
    assert_eq!(file::parse_time("yesterday"), None);
}

#[test]
fn learns_writes_reads_and_protects() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["allow.toml", "allow.json"] {
        let path = dir.path().join(name);
        let extra = format!(
            "[firewall]\nmode = \"learning\"\nallowlist_file = {:?}\n",
            path.display().to_string()
        );
        let c = config(&extra);
        let listener = &c.listeners["pg"];
        assert_eq!(
            Firewall::mode_for(&c, "app", listener),
            FirewallMode::Protecting
        );
        assert_eq!(
            Firewall::mode_for(&c, "bob", listener),
            FirewallMode::Detecting
        );
        // The user's protecting mode reads the list, which does not exist yet.
        assert!(Firewall::load(&c).is_err());
        let mut learning = c.clone();
        learning.users.clear();
        learning
            .listeners
            .values_mut()
            .for_each(|l| l.firewall = None);
        let fw = Firewall::load(&learning).unwrap();
        assert_eq!(
            fw.check(FirewallMode::Learning, "app", 7, "SELECT ?"),
            Check::Allowed
        );
        assert_eq!(
            fw.check(FirewallMode::Learning, "app", 7, "SELECT ?"),
            Check::Allowed
        );
        fw.flush(true);
        let fw = Firewall::load(&c).unwrap();
        assert_eq!(fw.entries(), [("app".into(), 7, "SELECT ?".into(), 2)]);
        assert_eq!(
            fw.check(FirewallMode::Protecting, "app", 7, "SELECT ?"),
            Check::Allowed
        );
        assert_eq!(
            fw.check(FirewallMode::Protecting, "app", 8, "SELECT ?, ?"),
            Check::Refused
        );
        assert_eq!(
            fw.check(FirewallMode::Protecting, "bob", 7, "SELECT ?"),
            Check::Refused
        );
        assert_eq!(
            fw.check(FirewallMode::Detecting, "bob", 7, "SELECT ?"),
            Check::Unknown
        );
        assert_eq!(
            fw.check(FirewallMode::Off, "bob", 7, "SELECT ?"),
            Check::Allowed
        );
        assert_eq!(fw.refused.load(Ordering::Relaxed), 2);
        assert_eq!(fw.detected.load(Ordering::Relaxed), 1);
    }
    std::fs::write(
        dir.path().join("bad.toml"),
        "[[allow]]\nuser = \"a\"\ndigest = \"zz\"\n",
    )
    .unwrap();
    let extra = format!(
        "[firewall]\nmode = \"detecting\"\nallowlist_file = {:?}\n",
        dir.path().join("bad.toml").display().to_string()
    );
    let e = Firewall::load(&config(&extra)).err().unwrap_or_default();
    assert!(
        e.contains("bad.toml") && e.contains("not a hex digest"),
        "{e}"
    );
}
