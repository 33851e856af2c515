//! Files on disk: the built-in default, every file in `examples/`, `load` with relative TLS
//! paths resolved against the file's directory, and file-existence checks.

use std::path::{Path, PathBuf};

use crate::*;

#[test]
fn builtin_default_parses_and_validates() {
    let config = builtin_default();
    let strict =
        parse(BUILTIN_DEFAULT_TOML, "default.toml").expect("built-in default must validate");
    assert_eq!(config, strict);
    assert_eq!(config.general, General::default());
    let server = &config.servers["pg"];
    assert_eq!(
        (server.protocol, server.host.as_str(), server.port),
        (Protocol::Postgres, "127.0.0.1", 5432)
    );
    assert_eq!(config.clusters["pg"].servers, ["pg"]);
    assert_eq!(config.pools["default"], Pool::with_defaults("default"));
    let listener = &config.listeners["pg"];
    assert_eq!(listener.protocol, Protocol::Postgres);
    assert_eq!(listener.address, "127.0.0.1:6432");
    assert_eq!(
        (listener.cluster.as_str(), listener.pool.as_str()),
        ("pg", "default")
    );
    assert_eq!(
        (listener.auth, listener.tls),
        (AuthMethod::Passthrough, ClientTls::Disable)
    );
    let my = &config.listeners["mysql"];
    assert_eq!(
        (my.protocol, my.address.as_str(), my.cluster.as_str()),
        (Protocol::Mysql, "127.0.0.1:6033", "mysql")
    );
    assert_eq!(my.auth, AuthMethod::Passthrough);
    assert_eq!(config.servers["mysql"].port, 3306);
    assert_eq!(config.listeners.len(), 2);
    let read = &config.handlersocket["hs_read"];
    assert_eq!(
        (read.address.as_str(), read.mode, read.cluster.as_str()),
        ("127.0.0.1:9998", HsMode::ReadOnly, "mysql")
    );
    assert_eq!(config.handlersocket["hs_write"].mode, HsMode::ReadWrite);
    assert_eq!(read.secret, None);
}

#[test]
fn handlersocket_listeners_are_checked() {
    let text = r#"
[servers.my]
protocol = "mysql"
host = "127.0.0.1"

[clusters.my]
servers = ["my"]

[handlersocket.kv]
address = "127.0.0.1:9998"
cluster = "nope"
mode = "write"
user = "app"
secret = "s3"
connections = 0

[handlersocket.kv2]
address = "127.0.0.1:9998"
cluster = "my"
user = "app"
password = "pw"
"#;
    let errors = parse(text, "hs.toml").expect_err("invalid").to_string();
    for needle in [
        "hs.toml:11",
        "cluster \"nope\" does not exist",
        "hs.toml:12",
        "read-only",
        "hs.toml:15",
        "connections",
        "hs.toml:18",
        "is already used by [handlersocket.kv]",
    ] {
        assert!(errors.contains(needle), "{needle:?} not in:\n{errors}");
    }
    let ok = parse(
        &text
            .replace("\"nope\"", "\"my\"")
            .replace("mode = \"write\"", "mode = \"read-write\"")
            .replace("connections = 0", "connections = 3")
            .replace(
                "address = \"127.0.0.1:9998\"\ncluster = \"my\"\nuser",
                "address = \"127.0.0.1:9997\"\ncluster = \"my\"\nuser",
            ),
        "hs.toml",
    )
    .expect("valid");
    let kv = &ok.handlersocket["kv"];
    assert_eq!(
        (kv.mode, kv.connections, kv.secret.as_deref()),
        (HsMode::ReadWrite, 3, Some("s3"))
    );
    assert_eq!(ok.handlersocket["kv2"].password.as_deref(), Some("pw"));
    assert!(ok.listeners.is_empty());
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

#[test]
fn every_example_parses_and_validates() {
    let options = ValidateOptions {
        check_files: false,
        base_dir: None,
    };
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(examples_dir()).expect("examples/ exists") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(errors) = load_with(&path, &options) {
                panic!("{} does not validate:\n{errors}", path.display());
            }
            seen.push(path.file_name().map(|n| n.to_string_lossy().into_owned()));
        }
    }
    for name in [
        "sluice.toml",
        "transaction-pooling.toml",
        "tls.toml",
        "mysql.toml",
    ] {
        assert!(
            seen.contains(&Some(name.to_string())),
            "examples/{name} missing"
        );
    }
}

#[test]
fn mysql_example() {
    let options = ValidateOptions {
        check_files: false,
        base_dir: None,
    };
    let config = load_with(&examples_dir().join("mysql.toml"), &options).expect("valid");
    let app = &config.listeners["app"];
    assert_eq!(
        (app.protocol, app.address.as_str(), app.auth),
        (
            Protocol::Mysql,
            "127.0.0.1:6033",
            AuthMethod::MysqlNativePassword
        )
    );
    assert_eq!(config.pool_for(app).mode, PoolMode::Transaction);
    assert_eq!(config.listeners["admin"].auth, AuthMethod::Passthrough);
    let shop = &config.users["shop"];
    assert!(matches!(shop.password, Some(Secret::MysqlNative { .. })));
    assert_eq!(
        shop.server_secret(),
        Some(&Secret::Plain("shop-secret".into()))
    );
    // The comment's claim: the hash is that of "shop-secret".
    use sha1::{Digest, Sha1};
    let stored: [u8; 20] = Sha1::digest(Sha1::digest(b"shop-secret")).into();
    assert_eq!(shop.password, Some(Secret::MysqlNative { stored }));
}

#[test]
fn reference_example_matches_defaults() {
    // examples/sluice.toml writes every default out explicitly, and its extra objects are
    // all at their defaults too; check it reads back as the defaults.
    let options = ValidateOptions {
        check_files: false,
        base_dir: None,
    };
    let config = load_with(&examples_dir().join("sluice.toml"), &options).expect("valid");
    assert_eq!(config.general, General::default());
    assert_eq!(config.admin, crate::Admin::default());
    assert_eq!(config.pools["default"], Pool::with_defaults("default"));
}

#[test]
fn load_resolves_relative_tls_paths_and_checks_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "{}tls = \"require\"\ntls_cert_file = \"cert.pem\"\ntls_key_file = \"key.pem\"\n",
        super::BASE
    );
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, &text).expect("write");

    let errors = load(&file).expect_err("files are missing");
    let shown = errors.to_string();
    assert_eq!(errors.len(), 2, "{shown}");
    assert!(
        shown.contains(":14: [listeners.pg] tls_cert_file: cannot read"),
        "{shown}"
    );
    assert!(
        shown.contains(":15: [listeners.pg] tls_key_file: cannot read"),
        "{shown}"
    );
    assert!(shown.contains("No such file"), "{shown}");
    assert!(errors.iter().all(|e| e.file == file.display().to_string()));

    std::fs::write(dir.path().join("cert.pem"), "cert").expect("write");
    std::fs::create_dir(dir.path().join("key.pem")).expect("mkdir");
    let errors = load(&file).expect_err("key is a directory");
    assert_eq!(errors.len(), 1, "{errors}");
    assert!(
        errors
            .to_string()
            .contains(":15: [listeners.pg] tls_key_file: cannot read"),
        "{errors}"
    );
    assert!(
        errors.to_string().contains("not a regular file"),
        "{errors}"
    );

    std::fs::remove_dir(dir.path().join("key.pem")).expect("rmdir");
    std::fs::write(dir.path().join("key.pem"), "key").expect("write");
    let config = load(&file).expect("valid now");
    let listener = &config.listeners["pg"];
    assert_eq!(
        listener.tls_cert_file.as_deref(),
        Some(dir.path().join("cert.pem").as_path())
    );

    // parse() keeps relative paths relative to the working directory.
    let errors = parse(&text, "inline.toml").expect_err("no cert.pem in the working directory");
    assert!(errors.to_string().contains("inline.toml:14:"), "{errors}");
}

#[test]
fn server_ca_file_is_checked() {
    let text = format!(
        "{}\n[servers.pg2]\nprotocol = \"postgres\"\nhost = \"h\"\ntls = \"verify-ca\"\ntls_ca_file = \"/nonexistent/ca.pem\"\n",
        super::BASE
    );
    let errors = parse(&text, "t.toml").expect_err("missing CA");
    assert_eq!(errors.to_string().lines().count(), 1, "{errors}");
    assert!(
        errors.to_string().starts_with(
            "t.toml:18: [servers.pg2] tls_ca_file: cannot read \"/nonexistent/ca.pem\""
        ),
        "{errors}"
    );
}

#[test]
fn unreadable_config_file() {
    let errors = load(Path::new("/nonexistent/sluice.toml")).expect_err("no such file");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors.0[0].line, None);
    assert!(
        errors
            .to_string()
            .starts_with("/nonexistent/sluice.toml: cannot read the configuration file:"),
        "{errors}"
    );
}

/// The fenced blocks of docs/configuration.md with the given info string, in order.
fn doc_blocks(info: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let text = std::fs::read_to_string(path).expect("docs/configuration.md exists");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line == format!("```{info}") => current = Some(String::new()),
            None => {}
            Some(_) if line == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

#[test]
fn docs_examples_are_accurate() {
    let options = ValidateOptions {
        check_files: false,
        base_dir: None,
    };
    let mut tomls = doc_blocks("toml");
    let outputs = doc_blocks("text");
    assert_eq!(
        (tomls.len(), outputs.len()),
        (5, 1),
        "docs blocks changed; update this test"
    );
    // 0 and 1: a rules example and a table rule, valid beside clusters they name.
    let clusters = "[servers.x]\nprotocol = \"postgres\"\nhost = \"h\"\n[clusters.analytics]\nservers = [\"x\"]\n[clusters.b]\nservers = [\"x\"]\n";
    for fragment in tomls.drain(..2) {
        let text = format!("{}{clusters}{fragment}", super::BASE);
        if let Err(e) = parse_with(&text, "rules.toml", &options) {
            panic!("docs example does not validate:\n{e}\n{fragment}");
        }
    }
    // 1: the error example and its exact output.
    let errors = parse_with(&tomls[0], "sluice.toml", &options).expect_err("invalid");
    assert_eq!(format!("{errors}\n"), outputs[0]);
    // 2: the built-in default.
    assert_eq!(
        parse_with(&tomls[1], "d.toml", &options),
        Ok(builtin_default())
    );
    assert!(BUILTIN_DEFAULT_TOML.contains(tomls[1].as_str()));
    // 3: the full example validates, with both protocols.
    let full = match parse_with(&tomls[2], "full.toml", &options) {
        Ok(config) => config,
        Err(errors) => panic!("full example in docs does not validate:\n{errors}"),
    };
    let protocols: Vec<Protocol> = full.listeners.values().map(|l| l.protocol).collect();
    assert!(protocols.contains(&Protocol::Postgres) && protocols.contains(&Protocol::Mysql));
    // The hashes given as examples in the text are what they claim to be.
    use sha1::{Digest, Sha1};
    use sha2::Sha256;
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
    )
    .expect("docs/configuration.md exists");
    let native: [u8; 20] = Sha1::digest(Sha1::digest(b"password")).into();
    let sha2: [u8; 32] = Sha256::digest(Sha256::digest(b"password")).into();
    for secret in [
        Secret::MysqlNative { stored: native },
        Secret::Sha2 { stored: sha2 },
    ] {
        let shown = format!(
            "`\"{}\"` for password `password`",
            secret.to_config_string()
        );
        assert!(text.contains(&shown), "docs lack {shown}");
    }
    let shop: [u8; 20] = Sha1::digest(Sha1::digest(b"shop-secret")).into();
    assert_eq!(
        full.users["shop"].password,
        Some(Secret::MysqlNative { stored: shop })
    );
}

#[test]
fn every_key_is_documented_and_in_the_reference_example() {
    use crate::sections::*;
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
    )
    .expect("docs/configuration.md exists");
    let example =
        std::fs::read_to_string(examples_dir().join("sluice.toml")).expect("example exists");
    for section in SECTIONS {
        assert!(
            docs.contains(&format!("## `[{section}"))
                || docs.contains(&format!("## `[[{section}]]`")),
            "docs lack section {section}"
        );
    }
    for keys in [
        GENERAL_KEYS,
        SERVER_KEYS,
        CLUSTER_KEYS,
        USER_KEYS,
        POOL_KEYS,
        LISTENER_KEYS,
        crate::handlersocket::HANDLERSOCKET_KEYS,
        crate::rules::RULE_KEYS,
        crate::rules::TABLE_KEYS,
        crate::rules::FIREWALL_KEYS,
        crate::admin::ADMIN_KEYS,
    ] {
        for key in keys {
            assert!(
                docs.contains(&format!("| `{key}` |")),
                "docs lack key {key}"
            );
            let shown = example.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.starts_with(&format!("{key} = "))
            });
            assert!(shown, "examples/sluice.toml lacks key {key}");
        }
    }
}
