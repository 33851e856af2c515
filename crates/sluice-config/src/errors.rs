//! Configuration errors and the collector that gathers them. Loading never stops at the first
//! problem: every reader and validator pushes a [`ConfigError`] carrying the file name and the
//! 1-based line of the offending key or value, and the caller gets all of them at once as
//! [`ConfigErrors`], printed one per line as `FILE:LINE: message` (or `FILE: message` when no
//! line applies), which is what `sluice check-config` shows.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

/// One problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file name as given to [`crate::load`] or [`crate::parse`].
    pub file: String,
    /// 1-based line number, when the problem can be tied to a place in the file.
    pub line: Option<usize>,
    /// What is wrong, naming the section and key.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in a configuration file, in line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The individual errors.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    /// How many errors there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none (never the case for an `Err` returned by this crate).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Maps byte offsets in the source text to 1-based line numbers.
#[derive(Debug)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    pub(crate) fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset).max(1)
    }
}

/// Where a key of an object was written: (section, object name, key). The object itself is
/// recorded with an empty key, array elements as `key[i]`.
type OriginKey = (String, String, String);

/// Collects errors and remembers the line of every key read, so that validation running on
/// the typed [`crate::Config`] can still point at the right line.
#[derive(Debug)]
pub(crate) struct Diagnostics {
    file: String,
    lines: LineIndex,
    errors: Vec<ConfigError>,
    origins: HashMap<OriginKey, usize>,
}

impl Diagnostics {
    pub(crate) fn new(file: &str, text: &str) -> Self {
        Diagnostics {
            file: file.to_string(),
            lines: LineIndex::new(text),
            errors: Vec::new(),
            origins: HashMap::new(),
        }
    }

    /// The line of a span's first byte.
    pub(crate) fn line_of(&self, span: Option<&Range<usize>>) -> Option<usize> {
        span.map(|s| self.lines.line(s.start))
    }

    /// Records an error at a span (or without a line).
    pub(crate) fn error(&mut self, span: Option<&Range<usize>>, message: impl Into<String>) {
        let line = self.line_of(span);
        self.error_at_line(line, message);
    }

    /// Records an error at a known line.
    pub(crate) fn error_at_line(&mut self, line: Option<usize>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line,
            message: message.into(),
        });
    }

    /// Remembers where `section.name.key` was written.
    pub(crate) fn record(
        &mut self,
        section: &str,
        name: &str,
        key: &str,
        span: Option<&Range<usize>>,
    ) {
        if let Some(line) = self.line_of(span) {
            self.origins.insert(
                (section.to_string(), name.to_string(), key.to_string()),
                line,
            );
        }
    }

    /// The line of `section.name.key`, falling back to the object's own line.
    pub(crate) fn origin(&self, section: &str, name: &str, key: &str) -> Option<usize> {
        let lookup = |k: &str| {
            self.origins
                .get(&(section.to_string(), name.to_string(), k.to_string()))
                .copied()
        };
        lookup(key).or_else(|| lookup(""))
    }

    /// Records an error at the line where `section.name.key` was written.
    pub(crate) fn error_at(
        &mut self,
        section: &str,
        name: &str,
        key: &str,
        message: impl Into<String>,
    ) {
        let line = self.origin(section, name, key);
        self.error_at_line(line, message);
    }

    /// `Ok(value)` when no error was recorded, else every error sorted by line (errors
    /// without a line first).
    pub(crate) fn into_result<T>(mut self, value: Option<T>) -> Result<T, ConfigErrors> {
        match value {
            Some(value) if self.errors.is_empty() => Ok(value),
            _ => {
                if self.errors.is_empty() {
                    self.error_at_line(None, "internal error: configuration could not be read");
                }
                self.errors.sort_by_key(|e| e.line.unwrap_or(0));
                Err(ConfigErrors(self.errors))
            }
        }
    }
}

/// `[section.name]` as a user would write the header, quoting names that need it.
pub(crate) fn label(section: &str, name: Option<&str>) -> String {
    match name {
        None => format!("[{section}]"),
        Some(n) if section == "rules" => format!("[[rules]] #{n}"),
        Some(name) if is_bare_key(name) => format!("[{section}.{name}]"),
        Some(name) => format!("[{section}.{name:?}]"),
    }
}

fn is_bare_key(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index() {
        let idx = LineIndex::new("a\nbc\n\nd");
        assert_eq!(idx.line(0), 1);
        assert_eq!(idx.line(1), 1);
        assert_eq!(idx.line(2), 2);
        assert_eq!(idx.line(5), 3);
        assert_eq!(idx.line(6), 4);
    }

    #[test]
    fn display() {
        let errors = ConfigErrors(vec![
            ConfigError {
                file: "a.toml".into(),
                line: Some(3),
                message: "bad".into(),
            },
            ConfigError {
                file: "a.toml".into(),
                line: None,
                message: "worse".into(),
            },
        ]);
        assert_eq!(errors.to_string(), "a.toml:3: bad\na.toml: worse");
    }

    #[test]
    fn labels() {
        assert_eq!(label("general", None), "[general]");
        assert_eq!(label("pools", Some("default")), "[pools.default]");
        assert_eq!(label("pools", Some("a.b")), "[pools.\"a.b\"]");
    }
}
