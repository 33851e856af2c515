//! Typed reads from the spanned TOML document (`toml_edit::ImDocument`). An [`ObjectReader`]
//! wraps one table (`[general]`, `[pools.default]`, ...): it reports every unknown key with
//! the list of accepted ones, and each getter converts one key to a Rust value or records an
//! error at that key's line and returns `None`, so reading goes on and every problem in the
//! file is reported. It also records the line of every key read, for the cross-section
//! checks in `validate.rs`.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use toml_edit::{Item, Key, TableLike, Value};

use crate::ValidateOptions;
use crate::errors::{Diagnostics, label};
use crate::secret::Secret;
use crate::units;
use crate::validate::Facts;

/// State shared by all readers while one file is loaded.
pub(crate) struct Ctx<'o> {
    pub(crate) diag: Diagnostics,
    pub(crate) options: &'o ValidateOptions,
    /// What the cross-section checks need to know, kept even for objects with errors.
    pub(crate) facts: Facts,
}

/// "invalid value "x"; expected one of: "a", "b"".
pub(crate) fn expected_one_of<T>(found: &str, choices: &[(&str, T)]) -> String {
    let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
    format!(
        "invalid value {found:?}; expected one of: {}",
        names.join(", ")
    )
}

/// "a string", "an integer", ...
pub(crate) fn describe(item: &Item) -> String {
    match item {
        Item::Value(value) => describe_value(value),
        Item::Table(_) => with_article("table"),
        other => with_article(other.type_name()),
    }
}

fn describe_value(value: &Value) -> String {
    match value {
        Value::InlineTable(_) => with_article("table"),
        other => with_article(other.type_name()),
    }
}

fn with_article(name: &str) -> String {
    match name.as_bytes().first() {
        Some(b'a' | b'e' | b'i' | b'o' | b'u') => format!("an {name}"),
        _ => format!("a {name}"),
    }
}

/// Span of a key as written, else of its value.
pub(crate) fn key_span(key: Option<&Key>, item: &Item) -> Option<Range<usize>> {
    key.and_then(Key::span).or_else(|| item.span())
}

/// Reads the keys of one table.
pub(crate) struct ObjectReader<'c, 'o, 't> {
    ctx: &'c mut Ctx<'o>,
    table: &'t dyn TableLike,
    section: &'static str,
    name: String,
    label: String,
    header: Option<Range<usize>>,
    /// Set when any key of this object had an error.
    pub(crate) failed: bool,
}

impl<'c, 'o, 't> ObjectReader<'c, 'o, 't> {
    /// Starts reading `[section.name]` (or `[section]` when `name` is `None`). Reports and
    /// returns `None` if the item is not a table; reports each key not in `allowed`.
    pub(crate) fn new(
        ctx: &'c mut Ctx<'o>,
        section: &'static str,
        name: Option<&str>,
        header: Option<Range<usize>>,
        item: &'t Item,
        allowed: &[&str],
    ) -> Option<Self> {
        let label = label(section, name);
        let name = name.unwrap_or_default().to_string();
        let Some(table) = item.as_table_like() else {
            ctx.diag.error(
                header.as_ref(),
                format!("{label} must be a table, found {}", describe(item)),
            );
            return None;
        };
        ctx.diag.record(section, &name, "", header.as_ref());
        let mut reader = ObjectReader {
            ctx,
            table,
            section,
            name,
            label,
            header,
            failed: false,
        };
        reader.check_keys(allowed);
        Some(reader)
    }

    fn check_keys(&mut self, allowed: &[&str]) {
        for (key, item) in self.table.iter() {
            if !allowed.contains(&key) {
                let span = key_span(self.table.key(key), item);
                let message = format!(
                    "unknown key {key:?} in {}; expected one of: {}",
                    self.label,
                    allowed.join(", ")
                );
                self.ctx.diag.error(span.as_ref(), message);
                self.failed = true;
            }
        }
    }

    /// Facts for the cross-section checks.
    pub(crate) fn facts(&mut self) -> &mut Facts {
        &mut self.ctx.facts
    }

    /// True if the key is written in this table.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// Records an error about the object as a whole (at its header line).
    pub(crate) fn object_error(&mut self, message: impl AsRef<str>) {
        let message = format!("{}: {}", self.label, message.as_ref());
        self.ctx.diag.error(self.header.as_ref(), message);
        self.failed = true;
    }

    /// Records an error about one key, at the line of its value.
    pub(crate) fn error(&mut self, key: &str, message: impl AsRef<str>) {
        let message = format!("{} {key}: {}", self.label, message.as_ref());
        self.ctx
            .diag
            .error_at(self.section, &self.name, key, message);
        self.failed = true;
    }

    /// Reports a missing required key; returns `None` for convenience.
    pub(crate) fn missing<T>(&mut self, key: &str) -> Option<T> {
        self.object_error(format!("missing required key {key:?}"));
        None
    }

    /// The value of a key, recording where it was written; `None` if absent or not a value.
    fn value(&mut self, key: &str) -> Option<(&'t Value, Option<Range<usize>>)> {
        let (k, item) = self.table.get_key_value(key)?;
        let span = item.span().or_else(|| k.span());
        self.ctx
            .diag
            .record(self.section, &self.name, key, span.as_ref());
        match item {
            Item::Value(v) => Some((v, span)),
            other => {
                let found = describe(other);
                self.error(key, format!("expected a value, found {found}"));
                None
            }
        }
    }

    fn type_error<T>(&mut self, key: &str, expected: &str, value: &Value) -> Option<T> {
        let found = describe_value(value);
        self.error(key, format!("expected {expected}, found {found}"));
        None
    }

    /// A string value.
    pub(crate) fn string(&mut self, key: &str) -> Option<String> {
        let (value, _) = self.value(key)?;
        match value.as_str() {
            Some(s) => Some(s.to_string()),
            None => self.type_error(key, "a string", value),
        }
    }

    /// The key's value when it is a string, without recording anything (for keys that
    /// take a string or another type).
    pub(crate) fn peek_str(&self, key: &str) -> Option<String> {
        self.table
            .get(key)
            .and_then(|i| i.as_str())
            .map(str::to_string)
    }

    /// A boolean value.
    pub(crate) fn boolean(&mut self, key: &str) -> Option<bool> {
        let (value, _) = self.value(key)?;
        match value.as_bool() {
            Some(b) => Some(b),
            None => self.type_error(key, "true or false", value),
        }
    }

    /// A non-empty string value.
    pub(crate) fn nonempty_string(&mut self, key: &str) -> Option<String> {
        let s = self.string(key)?;
        if s.trim().is_empty() {
            self.error(key, "must not be empty");
            return None;
        }
        Some(s)
    }

    /// A required non-empty string.
    pub(crate) fn required_string(&mut self, key: &str) -> Option<String> {
        if !self.has(key) {
            return self.missing(key);
        }
        self.nonempty_string(key)
    }

    /// An integer in `min..=max`.
    pub(crate) fn integer(&mut self, key: &str, min: i64, max: i64) -> Option<i64> {
        let (value, _) = self.value(key)?;
        let Some(n) = value.as_integer() else {
            return self.type_error(key, "an integer", value);
        };
        if n < min {
            self.error(key, format!("must be at least {min}, found {n}"));
            return None;
        }
        if n > max {
            self.error(key, format!("must be at most {max}, found {n}"));
            return None;
        }
        Some(n)
    }

    /// An integer count in `min..=max` (max capped at what `usize` holds).
    pub(crate) fn count(&mut self, key: &str, min: usize, max: usize) -> Option<usize> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let min = i64::try_from(min).unwrap_or(i64::MAX);
        self.integer(key, min, max)
            .and_then(|n| usize::try_from(n).ok())
    }

    /// A duration: `"250ms"`, `"30s"`, `"10m"`, `"1h"`, or integer seconds.
    pub(crate) fn duration(&mut self, key: &str) -> Option<Duration> {
        let (value, _) = self.value(key)?;
        let parsed = match value {
            Value::String(s) => units::parse_duration(s.value()),
            Value::Integer(n) => units::duration_from_seconds(*n.value()),
            other => return self.type_error(key, "a duration string such as \"30s\"", other),
        };
        parsed.map_err(|e| self.error(key, e)).ok()
    }

    /// A duration where zero means "never" (`None`).
    pub(crate) fn optional_duration(&mut self, key: &str) -> Option<Option<Duration>> {
        self.duration(key).map(|d| (!d.is_zero()).then_some(d))
    }

    /// A size: `"512B"`, `"64KiB"`, `"16MiB"`, `"1GiB"`, or integer bytes.
    pub(crate) fn size(&mut self, key: &str) -> Option<u64> {
        let (value, _) = self.value(key)?;
        let parsed = match value {
            Value::String(s) => units::parse_size(s.value()),
            Value::Integer(n) => units::size_from_bytes(*n.value()),
            other => return self.type_error(key, "a size such as \"64MiB\"", other),
        };
        parsed.map_err(|e| self.error(key, e)).ok()
    }

    /// One of an enum's spellings.
    pub(crate) fn choice<T: Copy>(&mut self, key: &str, choices: &[(&str, T)]) -> Option<T> {
        let s = self.string(key)?;
        match choices.iter().find(|(name, _)| *name == s) {
            Some((_, v)) => Some(*v),
            None => {
                self.error(key, expected_one_of(&s, choices));
                None
            }
        }
    }

    /// An array of strings, each element `Some` if it is a non-empty string (errors are
    /// recorded for the others); `None` if absent or not an array. Records each element's
    /// line as `key[i]`.
    pub(crate) fn string_items(&mut self, key: &str) -> Option<Vec<Option<String>>> {
        let (value, _) = self.value(key)?;
        let Some(array) = value.as_array() else {
            return self.type_error(key, "an array of strings", value);
        };
        let mut out = Vec::with_capacity(array.len());
        for (i, element) in array.iter().enumerate() {
            let element_key = format!("{key}[{i}]");
            let span = element.span();
            self.ctx
                .diag
                .record(self.section, &self.name, &element_key, span.as_ref());
            out.push(match element.as_str() {
                Some(s) if !s.trim().is_empty() => Some(s.to_string()),
                Some(_) => {
                    self.error(&element_key, "must not be an empty string");
                    None
                }
                None => self.type_error(&element_key, "a string", element),
            });
        }
        Some(out)
    }

    /// An array of non-empty strings; `None` if absent or if any element had an error.
    pub(crate) fn string_list(&mut self, key: &str) -> Option<Vec<String>> {
        self.string_items(key)?.into_iter().collect()
    }

    /// A required listen address (`host:port`), checked.
    pub(crate) fn listen_address(&mut self, key: &str) -> Option<String> {
        let a = self.required_string(key)?;
        match crate::address::check_listen_address(&a) {
            Ok(()) => Some(a),
            Err(e) => {
                self.error(key, e);
                None
            }
        }
    }

    /// A password in any of the forms [`Secret::parse`] accepts.
    pub(crate) fn secret(&mut self, key: &str) -> Option<Secret> {
        let s = self.string(key)?;
        Secret::parse(&s).map_err(|e| self.error(key, e)).ok()
    }

    /// A file path, resolved against [`ValidateOptions::base_dir`] when relative.
    pub(crate) fn path(&mut self, key: &str) -> Option<PathBuf> {
        let s = self.nonempty_string(key)?;
        let path = PathBuf::from(s);
        Some(match &self.ctx.options.base_dir {
            // `~/...`: the home directory of the user running Sluice (expanded by the
            // code that opens the file).
            _ if path.starts_with("~") => path,
            Some(base) if path.is_relative() => base.join(path),
            _ => path,
        })
    }

    /// When file checks are on, reports a path that is not a readable regular file.
    pub(crate) fn check_readable(&mut self, key: &str, path: &std::path::Path) {
        if !self.ctx.options.check_files {
            return;
        }
        let problem = match std::fs::File::open(path).and_then(|f| f.metadata()) {
            Ok(meta) if meta.is_file() => return,
            Ok(_) => "not a regular file".to_string(),
            Err(e) => e.to_string(),
        };
        self.error(
            key,
            format!("cannot read {:?}: {problem}", path.display().to_string()),
        );
    }

    /// Finishes the object: `Some(value)` if no key had an error.
    pub(crate) fn finish<T>(self, build: impl FnOnce() -> Option<T>) -> Option<T> {
        if self.failed { None } else { build() }
    }
}
