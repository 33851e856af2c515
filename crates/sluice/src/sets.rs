//! The session-level SETs of a client (or applied on a server connection), by
//! parameter, in the order each was last set. Replaying them in that order gives the
//! state the client built: some settings depend on others (PostgreSQL's SET ROLE is
//! checked against the session user that SET SESSION AUTHORIZATION chose).

/// Parameters whose setting changes who the session runs as: a client that set them
/// keeps its server connection (they are checked against privileges when set, and a
/// statement run as the wrong user after a failed replay would be a security hole).
pub(crate) const IDENTITY: [&str; 2] = ["role", "session_authorization"];

/// SETs by parameter, in the order each was last set.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sets(Vec<(String, String)>);

impl Sets {
    pub const EMPTY: Sets = Sets(Vec::new());

    pub fn get(&self, name: &str) -> Option<&String> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name`: it moves to the end (it was set last).
    pub fn insert(&mut self, name: String, sql: String) {
        self.remove(&name);
        // (Most sessions set one or two: no room kept for more.)
        self.0.reserve_exact(1);
        self.0.push((name, sql));
    }

    pub fn remove(&mut self, name: &str) {
        self.0.retain(|(k, _)| k != name);
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// How many leading SETs `self` and `other` have in common: past them, replaying
    /// `other`'s in order brings a connection carrying `self` to `other`'s state (once
    /// what only `self` has past them is reset).
    pub fn common_prefix(&self, other: &Sets) -> usize {
        self.0
            .iter()
            .zip(&other.0)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// The SETs from position `at` on.
    pub fn from(&self, at: usize) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().skip(at).map(|(k, v)| (k, v))
    }

    /// Whether a setting of who the session runs as is among them.
    pub fn identity(&self) -> bool {
        IDENTITY.iter().any(|n| self.contains_key(n))
    }
}

/// Whether `name` is a setting of who the session runs as, and `sql` sets it back to
/// its default (SET ROLE NONE, SET SESSION AUTHORIZATION DEFAULT): then it is a RESET.
pub fn identity_default(name: &str, sql: &str) -> bool {
    if !IDENTITY.contains(&name) {
        return false;
    }
    let last = sql
        .trim_end_matches(|c: char| c == ';' || c.is_whitespace())
        .rsplit(|c: char| c.is_whitespace())
        .next()
        .unwrap_or_default();
    last.eq_ignore_ascii_case("none") || last.eq_ignore_ascii_case("default")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(list: &[(&str, &str)]) -> Sets {
        let mut s = Sets::default();
        for (k, v) in list {
            s.insert(k.to_string(), v.to_string());
        }
        s
    }

    #[test]
    fn order_is_the_order_of_last_setting() {
        let mut s = sets(&[("session_authorization", "a"), ("role", "r"), ("x", "1")]);
        s.insert("session_authorization".into(), "b".into());
        assert_eq!(
            s.keys().collect::<Vec<_>>(),
            ["role", "x", "session_authorization"]
        );
        assert!(s.identity());
        let t = sets(&[("role", "r"), ("x", "2")]);
        assert_eq!(s.common_prefix(&t), 1);
        assert_ne!(
            s,
            sets(&[("x", "1"), ("role", "r"), ("session_authorization", "b")])
        );
    }

    #[test]
    fn identity_defaults() {
        assert!(identity_default("role", "SET ROLE NONE"));
        assert!(identity_default("role", "set role none ;"));
        assert!(identity_default(
            "session_authorization",
            "SET SESSION AUTHORIZATION DEFAULT"
        ));
        assert!(!identity_default("role", "SET ROLE app"));
        assert!(!identity_default(
            "search_path",
            "SET search_path = default"
        ));
    }
}
