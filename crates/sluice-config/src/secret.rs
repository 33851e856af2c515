//! Passwords as written in `[users]`: plaintext, an md5 hash in PostgreSQL's `pg_authid`
//! format (`"md5"` + 32 lowercase hex digits of md5(password || username)), or a SCRAM-SHA-256
//! verifier in PostgreSQL's format
//! (`SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>`). They are
//! decoded once at load, so the server's auth code works with bytes and a malformed verifier
//! is a configuration error with its line rather than a failed login later. `Debug` never
//! prints plaintext or key material.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// A user's password in one of the forms PostgreSQL stores.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// The password itself.
    Plain(String),
    /// md5(password || username), PostgreSQL's md5 format without the `md5` prefix.
    Md5 {
        /// The 16-byte digest.
        hash: [u8; 16],
    },
    /// A SCRAM-SHA-256 verifier.
    Scram(ScramVerifier),
}

/// A decoded SCRAM-SHA-256 verifier (RFC 5802 / RFC 7677, as stored by PostgreSQL).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    /// PBKDF2 iteration count.
    pub iterations: u32,
    /// The salt, decoded.
    pub salt: Vec<u8>,
    /// SHA-256(ClientKey).
    pub stored_key: [u8; 32],
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: [u8; 32],
}

const SCRAM_PREFIX: &str = "SCRAM-SHA-256$";

impl Secret {
    /// Interprets a password string the way PostgreSQL does, but strictly: a string that
    /// starts like an md5 hash or a SCRAM verifier and is malformed is an error instead of
    /// silently becoming a plaintext password.
    pub fn parse(text: &str) -> Result<Secret, String> {
        if let Some(rest) = text.strip_prefix(SCRAM_PREFIX) {
            return ScramVerifier::parse_body(rest).map(Secret::Scram);
        }
        if let Some(hex) = text.strip_prefix("md5")
            && hex.len() == 32
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
        {
            if hex.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(format!(
                    "password {:?} looks like an md5 hash but has uppercase hex digits; \
                     PostgreSQL's md5 format is \"md5\" followed by 32 lowercase hex digits",
                    redact(text)
                ));
            }
            let mut hash = [0u8; 16];
            for (i, byte) in hash.iter_mut().enumerate() {
                let pair = hex.get(2 * i..2 * i + 2).unwrap_or("00");
                *byte = u8::from_str_radix(pair, 16).map_err(|e| e.to_string())?;
            }
            return Ok(Secret::Md5 { hash });
        }
        if text.is_empty() {
            return Err("password must not be empty".to_string());
        }
        Ok(Secret::Plain(text.to_string()))
    }

    /// The string PostgreSQL would store (`md5…`, `SCRAM-SHA-256$…`, or the plaintext).
    pub fn to_pg_string(&self) -> String {
        match self {
            Secret::Plain(p) => p.clone(),
            Secret::Md5 { hash } => format!("md5{}", hex(hash)),
            Secret::Scram(v) => v.to_pg_string(),
        }
    }

    /// True for the forms that can log in to a server on their own (plaintext; md5 against a
    /// server using md5 auth). A SCRAM verifier cannot: it does not contain the password.
    pub fn can_log_in(&self) -> bool {
        !matches!(self, Secret::Scram(_))
    }

    /// A short name of the form, for messages: "plaintext", "md5", "SCRAM-SHA-256".
    pub fn kind(&self) -> &'static str {
        match self {
            Secret::Plain(_) => "plaintext",
            Secret::Md5 { .. } => "md5",
            Secret::Scram(_) => "SCRAM-SHA-256",
        }
    }
}

impl ScramVerifier {
    /// Parses `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(text: &str) -> Result<ScramVerifier, String> {
        match text.strip_prefix(SCRAM_PREFIX) {
            Some(rest) => Self::parse_body(rest),
            None => Err(format!("a SCRAM verifier must start with {SCRAM_PREFIX:?}")),
        }
    }

    fn parse_body(rest: &str) -> Result<ScramVerifier, String> {
        let bad = |why: &str| {
            format!(
                "invalid SCRAM-SHA-256 verifier: {why}; expected \
                 \"SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>\""
            )
        };
        let (params, keys) = rest
            .split_once('$')
            .ok_or_else(|| bad("missing '$' before the keys"))?;
        let (iterations, salt) = params
            .split_once(':')
            .ok_or_else(|| bad("missing ':' between iteration count and salt"))?;
        let (stored_key, server_key) = keys
            .split_once(':')
            .ok_or_else(|| bad("missing ':' between StoredKey and ServerKey"))?;
        let iterations: u32 = iterations.parse().map_err(|_| {
            bad(&format!(
                "iteration count {iterations:?} is not a positive integer"
            ))
        })?;
        if iterations == 0 {
            return Err(bad("iteration count must be at least 1"));
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|e| bad(&format!("salt is not valid base64 ({e})")))?;
        if salt.is_empty() {
            return Err(bad("salt is empty"));
        }
        let key = |name: &str, text: &str| -> Result<[u8; 32], String> {
            let bytes = BASE64
                .decode(text)
                .map_err(|e| bad(&format!("{name} is not valid base64 ({e})")))?;
            <[u8; 32]>::try_from(bytes.as_slice())
                .map_err(|_| bad(&format!("{name} is {} bytes, expected 32", bytes.len())))
        };
        Ok(ScramVerifier {
            iterations,
            salt,
            stored_key: key("StoredKey", stored_key)?,
            server_key: key("ServerKey", server_key)?,
        })
    }

    /// The verifier in PostgreSQL's text format.
    pub fn to_pg_string(&self) -> String {
        format!(
            "{SCRAM_PREFIX}{}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Plain(_) => f.write_str("Plain(<redacted>)"),
            Secret::Md5 { .. } => f.write_str("Md5(<redacted>)"),
            Secret::Scram(v) => fmt::Debug::fmt(v, f),
        }
    }
}

impl fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramVerifier")
            .field("iterations", &self.iterations)
            .field("salt", &"<redacted>")
            .field("stored_key", &"<redacted>")
            .field("server_key", &"<redacted>")
            .finish()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Shows only the start of a secret-looking string in an error message.
fn redact(text: &str) -> String {
    let head: String = text.chars().take(6).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verifier for password "pencil" (salt "salt-for-sluice", 4096 iterations), computed
    /// independently with Python's hashlib.pbkdf2_hmac / hmac, as PostgreSQL does.
    pub(crate) const PENCIL: &str = "SCRAM-SHA-256$4096:c2FsdC1mb3Itc2x1aWNl$\
        HzJx9VC9Cz1X3PfR7DNUZ6yjVUUa01SCPdd+7dEMlXY=:\
        ZVqu5YoDXYym81q0glyIqMHErKsJbTyV3ailQhcLDOc=";

    #[test]
    fn scram() {
        let Secret::Scram(v) = Secret::parse(PENCIL).unwrap() else {
            panic!("not scram")
        };
        assert_eq!(v.iterations, 4096);
        assert_eq!(v.salt, b"salt-for-sluice");
        assert_eq!(v.to_pg_string(), PENCIL);
        assert_eq!(ScramVerifier::parse(PENCIL).unwrap(), v);
        assert!(!format!("{v:?}").contains("c2Fs"));
    }

    #[test]
    fn scram_errors() {
        let key = BASE64.encode([7u8; 32]);
        let short = BASE64.encode([7u8; 31]);
        let cases = [
            ("SCRAM-SHA-256$4096:c2FsdA==", "missing '$'"),
            (
                "SCRAM-SHA-256$4096c2FsdA==$k:k",
                "missing ':' between iteration",
            ),
            (
                &format!("SCRAM-SHA-256$4096:c2FsdA==${key}"),
                "missing ':' between StoredKey",
            ),
            (
                &format!("SCRAM-SHA-256$x:c2FsdA==${key}:{key}"),
                "iteration count \"x\"",
            ),
            (
                &format!("SCRAM-SHA-256$0:c2FsdA==${key}:{key}"),
                "at least 1",
            ),
            (
                &format!("SCRAM-SHA-256$4096:!!${key}:{key}"),
                "salt is not valid base64",
            ),
            (&format!("SCRAM-SHA-256$4096:${key}:{key}"), "salt is empty"),
            (
                &format!("SCRAM-SHA-256$4096:c2FsdA==${short}:{key}"),
                "StoredKey is 31 bytes",
            ),
            (
                &format!("SCRAM-SHA-256$4096:c2FsdA==${key}:%%"),
                "ServerKey is not valid base64",
            ),
        ];
        for (text, want) in cases {
            let err = Secret::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert!(ScramVerifier::parse("md5abc").is_err());
    }

    #[test]
    fn md5_and_plain() {
        let md5 = "md5a3556571e93b0d20722ba62be61e8c2d";
        let s = Secret::parse(md5).unwrap();
        assert!(matches!(s, Secret::Md5 { hash } if hash[0] == 0xa3 && hash[15] == 0x2d));
        assert_eq!(s.to_pg_string(), md5);
        assert!(s.can_log_in());
        assert!(Secret::parse("md5A3556571E93B0D20722BA62BE61E8C2D").is_err());
        // Not 32 hex digits: an ordinary password that happens to start with "md5".
        assert_eq!(
            Secret::parse("md5sum").unwrap(),
            Secret::Plain("md5sum".into())
        );
        assert_eq!(
            Secret::parse("secret").unwrap(),
            Secret::Plain("secret".into())
        );
        assert!(Secret::parse("").is_err());
        assert_eq!(
            format!("{:?}", Secret::Plain("secret".into())),
            "Plain(<redacted>)"
        );
        assert!(!Secret::parse(PENCIL).unwrap().can_log_in());
    }
}
