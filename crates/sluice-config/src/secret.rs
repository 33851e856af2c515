//! Passwords as written in `[users]`: plaintext, one of the hashed forms PostgreSQL stores, or
//! one of the hashed forms MySQL/MariaDB use. PostgreSQL's (as in `pg_authid.rolpassword`): an
//! md5 hash (`"md5"` + 32 lowercase hex digits of md5(password || username)) or a SCRAM-SHA-256
//! verifier (`SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>`).
//! MySQL's: a `mysql_native_password` hash as in `mysql.user.authentication_string` (`"*"` + 40
//! hex digits of SHA1(SHA1(password))) or the SHA256(SHA256(password)) that
//! `caching_sha2_password`'s fast path checks against (`"sha2:"` + 64 hex digits). They are
//! decoded once at load, so the server's auth code works with bytes and a malformed hash or
//! verifier is a configuration error with its line rather than a failed login later. `Debug`
//! never prints plaintext or key material.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// A user's password: plaintext or one of the hashed forms PostgreSQL or MySQL store.
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
    /// SHA1(SHA1(password)), what MySQL/MariaDB store for `mysql_native_password`; written
    /// `"*"` followed by 40 hex digits, as in `mysql.user.authentication_string`.
    MysqlNative {
        /// The 20-byte double SHA-1 digest.
        stored: [u8; 20],
    },
    /// SHA256(SHA256(password)), what `caching_sha2_password`'s fast path checks a client's
    /// scramble against; written `"sha2:"` followed by 64 hex digits.
    Sha2 {
        /// The 32-byte double SHA-256 digest.
        stored: [u8; 32],
    },
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
const MYSQL_NATIVE_PREFIX: &str = "*";
const SHA2_PREFIX: &str = "sha2:";

impl Secret {
    /// Interprets a password string the way PostgreSQL and MySQL do, but strictly: a string
    /// that starts like a hash or a SCRAM verifier and is malformed is an error instead of
    /// silently becoming a plaintext password. The near misses are: `SCRAM-SHA-256$…` that is
    /// not a valid verifier, `md5` + 32 hex digits with uppercase ones, `*` + 40 characters
    /// that are not all hex digits, and `sha2:` not followed by exactly 64 hex digits.
    pub fn parse(text: &str) -> Result<Secret, String> {
        if let Some(rest) = text.strip_prefix(SCRAM_PREFIX) {
            return ScramVerifier::parse_body(rest).map(Secret::Scram);
        }
        if let Some(digits) = text.strip_prefix(SHA2_PREFIX) {
            return match decode_hex(digits) {
                Ok(stored) => Ok(Secret::Sha2 { stored }),
                Err(why) => Err(format!(
                    "password {:?} starts with {SHA2_PREFIX:?} but {why}; a caching_sha2 hash \
                     is \"sha2:\" followed by 64 hex digits of SHA256(SHA256(password))",
                    redact(text)
                )),
            };
        }
        if let Some(digits) = text.strip_prefix(MYSQL_NATIVE_PREFIX)
            && digits.chars().count() == 40
        {
            return match decode_hex(digits) {
                Ok(stored) => Ok(Secret::MysqlNative { stored }),
                Err(why) => Err(format!(
                    "password {:?} looks like a mysql_native_password hash but {why}; that \
                     format is \"*\" followed by 40 hex digits of SHA1(SHA1(password)), as in \
                     mysql.user.authentication_string",
                    redact(text)
                )),
            };
        }
        if let Some(digits) = text.strip_prefix("md5")
            && let Ok(hash) = decode_hex(digits)
        {
            if digits.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(format!(
                    "password {:?} looks like an md5 hash but has uppercase hex digits; \
                     PostgreSQL's md5 format is \"md5\" followed by 32 lowercase hex digits",
                    redact(text)
                ));
            }
            return Ok(Secret::Md5 { hash });
        }
        if text.is_empty() {
            return Err("password must not be empty".to_string());
        }
        Ok(Secret::Plain(text.to_string()))
    }

    /// The string as written in the configuration, in its canonical spelling: the plaintext,
    /// `md5…` (lowercase), `SCRAM-SHA-256$…`, `*…` (uppercase, as MySQL writes it) or
    /// `sha2:…` (lowercase). Parsing it gives back the same secret.
    pub fn to_config_string(&self) -> String {
        match self {
            Secret::Plain(p) => p.clone(),
            Secret::Md5 { hash } => format!("md5{}", hex(hash)),
            Secret::Scram(v) => v.to_pg_string(),
            Secret::MysqlNative { stored } => {
                format!("{MYSQL_NATIVE_PREFIX}{}", hex(stored).to_ascii_uppercase())
            }
            Secret::Sha2 { stored } => format!("{SHA2_PREFIX}{}", hex(stored)),
        }
    }

    /// The string PostgreSQL would store (`md5…`, `SCRAM-SHA-256$…`, or the plaintext). The
    /// MySQL forms, which PostgreSQL has no equivalent of, give their configuration spelling;
    /// this is the same as [`Secret::to_config_string`].
    pub fn to_pg_string(&self) -> String {
        self.to_config_string()
    }

    /// True for the forms that can log in to a server on their own (plaintext; md5 against a
    /// server using md5 auth). A SCRAM verifier and the MySQL hashes cannot: they do not
    /// contain the password, nor what a client sends to prove it knows it.
    pub fn can_log_in(&self) -> bool {
        matches!(self, Secret::Plain(_) | Secret::Md5 { .. })
    }

    /// A short name of the form, for messages: "plaintext", "md5", "SCRAM-SHA-256",
    /// "mysql_native_password hash", "caching_sha2 hash".
    pub fn kind(&self) -> &'static str {
        match self {
            Secret::Plain(_) => "plaintext",
            Secret::Md5 { .. } => "md5",
            Secret::Scram(_) => "SCRAM-SHA-256",
            Secret::MysqlNative { .. } => "mysql_native_password hash",
            Secret::Sha2 { .. } => "caching_sha2 hash",
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
            Secret::MysqlNative { .. } => f.write_str("MysqlNative(<redacted>)"),
            Secret::Sha2 { .. } => f.write_str("Sha2(<redacted>)"),
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

/// Decodes exactly `2 * N` hex digits of either case; the error says what is wrong.
fn decode_hex<const N: usize>(digits: &str) -> Result<[u8; N], String> {
    // The offending character is not shown: it may be part of a plaintext password.
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("it contains characters that are not hex digits".to_string());
    }
    if digits.len() != 2 * N {
        return Err(format!(
            "it has {} hex digits instead of {}",
            digits.len(),
            2 * N
        ));
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
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

    /// mysql_native_password hash of "password", as MySQL/MariaDB store it.
    pub(crate) const NATIVE_PASSWORD: &str = "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19";
    /// SHA256(SHA256("password")).
    pub(crate) const SHA2_PASSWORD: &str =
        "sha2:73641c99f7719f57d8f4beb11a303afcd190243a51ced8782ca6d3dbe014d146";

    #[test]
    fn mysql_native() {
        use sha1::{Digest, Sha1};
        let want: [u8; 20] = Sha1::digest(Sha1::digest(b"password")).into();
        let s = Secret::parse(NATIVE_PASSWORD).unwrap();
        assert_eq!(s, Secret::MysqlNative { stored: want });
        assert_eq!(s.to_config_string(), NATIVE_PASSWORD);
        assert_eq!(s.to_pg_string(), NATIVE_PASSWORD);
        assert_eq!(s.kind(), "mysql_native_password hash");
        assert!(!s.can_log_in());
        assert_eq!(format!("{s:?}"), "MysqlNative(<redacted>)");
        // Lowercase hex is accepted and written back the way MySQL writes it.
        let lower = Secret::parse(&NATIVE_PASSWORD.to_ascii_lowercase()).unwrap();
        assert_eq!(lower, s);
        assert_eq!(lower.to_config_string(), NATIVE_PASSWORD);
        // "*" and 40 characters that are not all hex digits: a near miss, not a password.
        for text in [
            "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E1G",
            "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E1 ",
            "*password-password-password-password-pass",
        ] {
            let err = Secret::parse(text).unwrap_err();
            assert!(
                err.contains("looks like a mysql_native_password hash but it contains characters that are not hex digits"),
                "{text}: {err}"
            );
            assert!(!err.contains(&text[6..]), "{err}");
        }
        // Any other length is an ordinary password.
        for text in [
            "*",
            "*secret",
            &NATIVE_PASSWORD[..40],
            &format!("{NATIVE_PASSWORD}0"),
        ] {
            assert_eq!(Secret::parse(text).unwrap(), Secret::Plain(text.into()));
        }
    }

    #[test]
    fn sha2() {
        use sha2::{Digest, Sha256};
        let want: [u8; 32] = Sha256::digest(Sha256::digest(b"password")).into();
        let s = Secret::parse(SHA2_PASSWORD).unwrap();
        assert_eq!(s, Secret::Sha2 { stored: want });
        assert_eq!(s.to_config_string(), SHA2_PASSWORD);
        assert_eq!(s.kind(), "caching_sha2 hash");
        assert!(!s.can_log_in());
        assert_eq!(format!("{s:?}"), "Sha2(<redacted>)");
        let upper = format!("sha2:{}", SHA2_PASSWORD[5..].to_ascii_uppercase());
        assert_eq!(Secret::parse(&upper).unwrap(), s);
        assert_eq!(
            Secret::parse(&upper).unwrap().to_config_string(),
            SHA2_PASSWORD
        );
        let cases = [
            ("sha2:", "it has 0 hex digits instead of 64"),
            (&SHA2_PASSWORD[..68], "it has 63 hex digits instead of 64"),
            (
                &format!("{SHA2_PASSWORD}00"),
                "it has 66 hex digits instead of 64",
            ),
            (
                &format!("{}x", &SHA2_PASSWORD[..68]),
                "it contains characters that are not hex digits",
            ),
            (
                "sha2:secret",
                "it contains characters that are not hex digits",
            ),
        ];
        for (text, want) in cases {
            let err = Secret::parse(text).unwrap_err();
            assert!(
                err.starts_with("password \"sha2:")
                    && err.contains(&format!(
                        "starts with \"sha2:\" but {want}; a caching_sha2 hash is"
                    )),
                "{text}: {err}"
            );
        }
        // Only the exact prefix counts.
        assert_eq!(
            Secret::parse("sha256:abc").unwrap(),
            Secret::Plain("sha256:abc".into())
        );
    }

    #[test]
    fn config_strings_round_trip() {
        for text in [
            "secret",
            "md5a3556571e93b0d20722ba62be61e8c2d",
            PENCIL,
            NATIVE_PASSWORD,
            SHA2_PASSWORD,
        ] {
            let s = Secret::parse(text).unwrap();
            assert_eq!(s.to_config_string(), text);
            assert_eq!(Secret::parse(&s.to_config_string()).unwrap(), s);
        }
    }
}
