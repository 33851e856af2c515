//! Sluice configuration: the TOML schema, its validation, and the built-in default. This
//! crate sits before the whole flow (listener -> frontend -> session -> router -> pool ->
//! backend): the server calls [`load`] once at start (and again on reload), and every later
//! stage reads the typed, already-validated [`Config`]. Loading reports every problem in the
//! file at once, each with its file and line (`FILE:LINE: message`), which is what
//! `sluice check-config` prints.
//!
//! Reading goes: TOML text -> spanned document (`toml_edit`) -> one typed reader per section
//! (`sections.rs`, using `reader.rs`) -> cross-section checks (`validate.rs`).

#[macro_use]
mod schema;
mod address;
mod admin;
mod default;
mod errors;
mod handlersocket;
mod passthrough;
mod reader;
mod routes;
mod rules;
mod secret;
mod sections;
mod validate;

pub mod units;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use admin::{
    ADMIN_LISTENER_NAMES, Admin, DEFAULT_ADMIN_HTTP_ADDRESS, DEFAULT_ADMIN_MYSQL_ADDRESS,
    DEFAULT_ADMIN_PG_DATABASE,
};
pub use default::{BUILTIN_DEFAULT_NAME, BUILTIN_DEFAULT_TOML, builtin_default};
pub use errors::{ConfigError, ConfigErrors};
pub use handlersocket::IndexGrant;
pub use passthrough::{AuthQuery, DEFAULT_MYSQL_AUTH_QUERY, DEFAULT_PG_AUTH_QUERY};
pub use routes::*;
pub use rules::*;
pub use schema::*;
pub use secret::{ScramVerifier, Secret};

use errors::Diagnostics;
use reader::Ctx;

/// How much checking [`parse_with`] / [`load_with`] does beyond the file's own content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidateOptions {
    /// Check that TLS certificate, key and CA files exist and are readable (default: true).
    pub check_files: bool,
    /// Directory that relative file paths in the configuration are resolved against; `None`
    /// keeps them as written (relative to the working directory). [`load`] sets it to the
    /// configuration file's directory.
    pub base_dir: Option<PathBuf>,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            check_files: true,
            base_dir: None,
        }
    }
}

/// Reads, parses and validates a configuration file. Relative paths in it are resolved
/// against the file's directory.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_with(path, &ValidateOptions::default())
}

/// [`load`] with options; when `options.base_dir` is `None` the file's directory is used.
pub fn load_with(path: &Path, options: &ValidateOptions) -> Result<Config, ConfigErrors> {
    let file_name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: file_name.clone(),
            line: None,
            message: format!("cannot read the configuration file: {e}"),
        }])
    })?;
    let mut options = options.clone();
    if options.base_dir.is_none() {
        options.base_dir = path.parent().map(Path::to_path_buf);
    }
    parse_with(&text, &file_name, &options)
}

/// Parses and validates configuration text; `file_name` is used in error messages. TLS files
/// must exist (relative to the working directory); see [`parse_with`] to change that.
pub fn parse(text: &str, file_name: &str) -> Result<Config, ConfigErrors> {
    parse_with(text, file_name, &ValidateOptions::default())
}

/// Parses and validates configuration text with options.
pub fn parse_with(
    text: &str,
    file_name: &str,
    options: &ValidateOptions,
) -> Result<Config, ConfigErrors> {
    let mut diag = Diagnostics::new(file_name, text);
    let document = match toml_edit::ImDocument::parse(text) {
        Ok(document) => document,
        Err(e) => {
            let message = e.message().trim().lines().collect::<Vec<_>>().join("; ");
            diag.error(e.span().as_ref(), format!("TOML syntax error: {message}"));
            return diag.into_result(None);
        }
    };
    let mut ctx = Ctx {
        diag,
        options,
        facts: Default::default(),
    };
    let config = sections::read_config(&mut ctx, document.as_table());
    validate::validate(&mut ctx);
    ctx.diag.into_result(Some(config))
}
