//! Whole-file tests: complete configuration texts parsed through the public API, checking
//! the typed result or the exact `FILE:LINE: message` errors.

mod errors;
mod files;
mod passthrough;
mod references;
mod routes;
mod rules;
mod values;

use crate::{Config, ConfigErrors, ValidateOptions, parse_with};

/// A minimal valid configuration to append sections to.
pub(crate) const BASE: &str = r#"
[servers.pg1]
protocol = "postgres"
host = "127.0.0.1"

[clusters.main]
servers = ["pg1"]

[listeners.pg]
protocol = "postgres"
address = "127.0.0.1:6432"
cluster = "main"
"#;

fn no_files() -> ValidateOptions {
    ValidateOptions {
        check_files: false,
        base_dir: None,
    }
}

pub(crate) fn ok(text: &str) -> Config {
    match parse_with(text, "test.toml", &no_files()) {
        Ok(config) => config,
        Err(errors) => panic!("unexpected errors:\n{errors}"),
    }
}

pub(crate) fn errs(text: &str) -> ConfigErrors {
    match parse_with(text, "test.toml", &no_files()) {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(errors) => errors,
    }
}

/// Asserts that the errors are exactly these `(line, substring)` pairs, in order.
#[track_caller]
pub(crate) fn assert_errors(text: &str, expected: &[(Option<usize>, &str)]) {
    let errors = errs(text);
    let shown = errors.to_string();
    assert_eq!(errors.len(), expected.len(), "got:\n{shown}");
    for (error, (line, needle)) in errors.iter().zip(expected) {
        assert_eq!(
            error.line, *line,
            "wrong line for {needle:?}; got:\n{shown}"
        );
        assert!(
            error.message.contains(needle),
            "{needle:?} not in {:?}; got:\n{shown}",
            error.message
        );
        assert_eq!(error.file, "test.toml");
    }
}
