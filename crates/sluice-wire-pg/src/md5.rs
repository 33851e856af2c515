//! PostgreSQL's md5 password method: `"md5" + md5(md5(password || user) || salt)`.

use md5::{Digest, Md5};
use subtle::ConstantTimeEq;

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The stored form: `md5` + hex(md5(password || user)).
pub fn stored(password: &[u8], user: &[u8]) -> String {
    let mut h = Md5::new();
    h.update(password);
    h.update(user);
    format!("md5{}", hex(&h.finalize()))
}

/// What the client must answer for `stored` (as produced by [`stored`]) and `salt`.
pub fn expected_response(stored: &str, salt: [u8; 4]) -> String {
    let inner = stored.strip_prefix("md5").unwrap_or(stored);
    let mut h = Md5::new();
    h.update(inner.as_bytes());
    h.update(salt);
    format!("md5{}", hex(&h.finalize()))
}

/// Checks a client's PasswordMessage (without its NUL) in constant time.
pub fn verify(stored: &str, salt: [u8; 4], response: &[u8]) -> bool {
    let expected = expected_response(stored, salt);
    expected.len() == response.len() && bool::from(expected.as_bytes().ct_eq(response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_libpq() {
        let salt = [1, 2, 3, 4];
        let client = postgres_protocol::authentication::md5_hash(b"alice", b"pw", salt);
        let s = stored(b"pw", b"alice");
        assert!(verify(&s, salt, client.as_bytes()));
        assert!(!verify(&s, [0, 2, 3, 4], client.as_bytes()));
        assert_eq!(s, postgres_protocol::password::md5(b"pw", "alice"));
    }
}
