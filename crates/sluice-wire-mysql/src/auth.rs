//! Password scrambles of `mysql_native_password` and `caching_sha2_password`, for
//! logging in to servers and for checking clients against stored hashes.
//!
//! The salt is the server's 20-byte scramble without the NUL the handshake ends it with.
//! Both methods let a server check a client without the password: it keeps a double
//! hash (`SHA1(SHA1(pw))`, or `SHA256(SHA256(pw))` in caching_sha2_password's fast-auth
//! cache), recovers the single hash from the client's response and compares its hash
//! with the stored one in constant time. An account without a password expects an empty
//! response and has no stored hash; these functions do not cover that case.

use sha1::Sha1;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const MYSQL_NATIVE_PASSWORD: &[u8] = b"mysql_native_password";
pub const CACHING_SHA2_PASSWORD: &[u8] = b"caching_sha2_password";
pub const MYSQL_CLEAR_PASSWORD: &[u8] = b"mysql_clear_password";

/// caching_sha2_password's AuthMoreData bytes: the client should send its public-key
/// request / the fast check passed (an OK follows) / the server needs the password
/// itself (over TLS in clear, or RSA-encrypted).
pub const SHA2_REQUEST_PUBLIC_KEY: u8 = 2;
pub const SHA2_FAST_AUTH_OK: u8 = 3;
pub const SHA2_PERFORM_FULL_AUTH: u8 = 4;

fn sha1(parts: &[&[u8]]) -> [u8; 20] {
    let mut h = Sha1::new();
    parts.iter().for_each(|p| h.update(p));
    h.finalize().into()
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    parts.iter().for_each(|p| h.update(p));
    h.finalize().into()
}

fn xor<const N: usize>(mut a: [u8; N], b: &[u8; N]) -> [u8; N] {
    a.iter_mut().zip(b).for_each(|(x, y)| *x ^= y);
    a
}

/// Strips the trailing NUL a handshake or AuthSwitchRequest puts after the scramble.
pub fn salt(data: &[u8]) -> &[u8] {
    data.strip_suffix(&[0]).unwrap_or(data)
}

/// mysql_native_password's client response: `SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw)))`.
pub fn native_scramble(password: &[u8], salt: &[u8]) -> [u8; 20] {
    native_scramble_with_key(&sha1(&[password]), salt)
}

/// The same response from `SHA1(pw)` alone (the login key [`native_recover`] gives
/// back): what a proxy that checked a client against the stored hash logs in with.
pub fn native_scramble_with_key(key: &[u8; 20], salt: &[u8]) -> [u8; 20] {
    let h2 = sha1(&[key]);
    xor(*key, &sha1(&[salt, &h2]))
}

/// The stored form of a mysql_native_password account: `SHA1(SHA1(pw))`.
pub fn native_stored(password: &[u8]) -> [u8; 20] {
    sha1(&[&sha1(&[password])])
}

/// Checks a client's mysql_native_password response against the stored hash.
pub fn native_verify(stored: &[u8; 20], salt: &[u8], response: &[u8]) -> bool {
    native_recover(stored, salt, response).is_some()
}

/// Checks a client's mysql_native_password response against the stored hash and, when
/// it is right, gives back `SHA1(pw)` (`response XOR SHA1(salt + stored)`, whose hash is
/// the stored one): enough to log in to any server that stores the same hash, as
/// ProxySQL does, without ever knowing the password.
pub fn native_recover(stored: &[u8; 20], salt: &[u8], response: &[u8]) -> Option<[u8; 20]> {
    let response = <[u8; 20]>::try_from(response).ok()?;
    let h1 = xor(response, &sha1(&[salt, stored]));
    bool::from(sha1(&[&h1]).ct_eq(stored)).then_some(h1)
}

/// Parses the text form MySQL and MariaDB show in `mysql.user`: `*` and 40 hex digits.
pub fn parse_native_hex(s: &str) -> Option<[u8; 20]> {
    let hex = s.strip_prefix('*')?.as_bytes();
    if hex.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let digit = |c: u8| char::from(c).to_digit(16);
        *o = (digit(*pair.first()?)? * 16 + digit(*pair.get(1)?)?) as u8;
    }
    Some(out)
}

/// Formats a stored hash as `*` and 40 upper-case hex digits.
pub fn format_native_hex(stored: &[u8; 20]) -> String {
    use std::fmt::Write;
    stored.iter().fold(String::from("*"), |mut s, b| {
        let _ = write!(s, "{b:02X}");
        s
    })
}

/// caching_sha2_password's client response (fast path):
/// `SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) + salt)`.
pub fn sha2_scramble(password: &[u8], salt: &[u8]) -> [u8; 32] {
    let h1 = sha256(&[password]);
    let h2 = sha256(&[&h1]);
    xor(h1, &sha256(&[&h2, salt]))
}

/// The fast-auth cache entry of a caching_sha2_password account: `SHA256(SHA256(pw))`.
pub fn sha2_stored(password: &[u8]) -> [u8; 32] {
    sha256(&[&sha256(&[password])])
}

/// Checks a client's caching_sha2_password fast-path response: recovers `SHA256(pw)` as
/// `response XOR SHA256(stored + salt)` and compares its hash with `stored`.
pub fn sha2_verify(stored: &[u8; 32], salt: &[u8], response: &[u8]) -> bool {
    let Ok(response) = <[u8; 32]>::try_from(response) else {
        return false;
    };
    let h1 = xor(response, &sha256(&[stored, salt]));
    bool::from(sha256(&[&h1]).ct_eq(stored))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::hex;

    #[test]
    fn native_matches_real_server_and_published_vectors() {
        // The scramble the `mariadb` client sent for "password" against a MariaDB 10.11
        // server, which accepted it (see testdata).
        let salt = hex("39312b216045743c6a247234484e2f3f2e673e40");
        let client = hex("e58c082c50156f53bec087fd3c6bcaead4b683fc");
        assert_eq!(native_scramble(b"password", &salt)[..], client[..]);
        // The same server's mysql.user entry for that account.
        let stored = parse_native_hex("*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19").unwrap();
        assert_eq!(native_stored(b"password"), stored);
        assert!(native_verify(&stored, &salt, &client));
        assert!(!native_verify(&stored, &salt[1..], &client));
        assert!(!native_verify(&stored, &salt, &client[1..]));
        assert!(!native_verify(&native_stored(b"Password"), &salt, &client));
        // Boost.MySQL's vector (snooped with Wireshark): password "root".
        let salt = hex("79643d121d7174475f483e3e0b620a033d273a4c");
        assert_eq!(
            native_scramble(b"root", &salt)[..],
            hex("f1b2fb1c8de75db8eba8126ad10fe9b11050d428")[..]
        );
        // kingshard's vector (snooped from a JDBC client): password "kingshard".
        assert_eq!(
            native_scramble(b"kingshard", b"@jx=d_3z42;sS$YrS)p|")[..],
            hex("fbc71db5ac3d7b51048d1a1d88c1677f34bcca11")[..]
        );
    }

    #[test]
    fn native_key_recovered_from_a_reply_logs_in_elsewhere() {
        let stored = native_stored(b"secret");
        let (salt, other_salt) = (b"abcdefghijklmnopqrst", b"ABCDEFGHIJKLMNOPQRST");
        let reply = native_scramble(b"secret", salt);
        let key = native_recover(&stored, salt, &reply).unwrap();
        assert_eq!(key[..], Sha1::digest(b"secret")[..]);
        // Another server's scramble answered with the key alone, as with the password.
        assert_eq!(
            native_scramble_with_key(&key, other_salt),
            native_scramble(b"secret", other_salt)
        );
        assert_eq!(native_recover(&stored, other_salt, &reply), None);
        let wrong = native_scramble(b"Secret", salt);
        assert_eq!(native_recover(&stored, salt, &wrong), None);
        assert_eq!(native_recover(&stored, salt, &reply[1..]), None);
    }

    #[test]
    fn native_formula_by_hand() {
        // An independent computation of the formula with the sha1 crate directly.
        let (pw, salt) = (b"secret", b"abcdefghijklmnopqrst");
        let h1 = Sha1::digest(pw);
        let h2 = Sha1::digest(h1);
        let mut h3 = Sha1::new();
        h3.update(salt);
        h3.update(h2);
        let h3 = h3.finalize();
        let want: Vec<u8> = h1.iter().zip(h3.iter()).map(|(a, b)| a ^ b).collect();
        assert_eq!(native_scramble(pw, salt)[..], want[..]);
        assert_eq!(native_stored(pw)[..], h2[..]);
    }

    #[test]
    fn hex_form() {
        let stored = native_stored(b"password");
        let text = format_native_hex(&stored);
        assert_eq!(text, "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19");
        assert_eq!(parse_native_hex(&text.to_lowercase()), Some(stored));
        assert_eq!(parse_native_hex(&text[1..]), None);
        assert_eq!(
            parse_native_hex("*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E1"),
            None
        );
        assert_eq!(
            parse_native_hex("*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E1G"),
            None
        );
        assert_eq!(
            parse_native_hex("*é470C0C06DEE42FD1618BB99005ADCA2EC9D1E1"),
            None
        );
    }

    #[test]
    fn sha2_published_vectors() {
        // go-sql-driver/mysql's vectors.
        let salt = [
            10, 47, 74, 111, 75, 73, 34, 48, 88, 76, 114, 74, 37, 13, 3, 80, 82, 2, 23, 21,
        ];
        for (pw, want) in [
            (
                "secret",
                "f490e76f66d9d86665ce54d98c78d0acfe2fb0b08b423da807144873d30b312c",
            ),
            (
                "secret2",
                "abc3934a012cf342e876071c8ee202de51785b430258a7a0138bc79c4d800bc6",
            ),
        ] {
            let got = sha2_scramble(pw.as_bytes(), &salt);
            assert_eq!(got[..], hex(want)[..]);
            assert!(sha2_verify(&sha2_stored(pw.as_bytes()), &salt, &got));
        }
        // Boost.MySQL's vector (snooped from the MySQL Python connector): "hola".
        let salt = hex("3e3b0455047016 3a4c15350315767322460818 01");
        assert_eq!(
            sha2_scramble(b"hola", &salt)[..],
            hex("a1c1e1e91bb6544ba7374b9c566d693e06ca070298acd10618c690389d88e120")[..]
        );
    }

    #[test]
    fn sha2_verify_rejects() {
        let salt = b"01234567890123456789";
        let stored = sha2_stored(b"pw");
        let good = sha2_scramble(b"pw", salt);
        assert!(sha2_verify(&stored, salt, &good));
        assert!(!sha2_verify(&stored, b"01234567890123456788", &good));
        assert!(!sha2_verify(&sha2_stored(b"pW"), salt, &good));
        assert!(!sha2_verify(&stored, salt, &good[..31]));
        assert_eq!(super::salt(b"abc\0"), b"abc");
    }
}

/// MariaDB's client_ed25519: the server sends a 32-byte nonce; the answer is an Ed25519
/// signature of it with the key whose expanded form is SHA-512(password) (the password
/// takes the place of the usual 32-byte seed).
pub fn ed25519_sign(password: &[u8], nonce: &[u8]) -> [u8; 64] {
    use ed25519_dalek::hazmat::{ExpandedSecretKey, raw_sign};
    use sha2_10::{Digest, Sha512};
    let h: [u8; 64] = Sha512::digest(password).into();
    let key = ExpandedSecretKey::from_bytes(&h);
    let public = ed25519_dalek::VerifyingKey::from(&key);
    raw_sign::<Sha512>(&key, nonce, &public).to_bytes()
}

#[cfg(test)]
mod ed25519_tests {
    use super::*;

    #[test]
    fn signature_verifies_with_the_password_key() {
        use ed25519_dalek::hazmat::ExpandedSecretKey;
        use sha2_10::{Digest, Sha512};
        let nonce = [7u8; 32];
        let sig = ed25519_sign(b"secret", &nonce);
        let h: [u8; 64] = Sha512::digest(b"secret").into();
        let public = ed25519_dalek::VerifyingKey::from(&ExpandedSecretKey::from_bytes(&h));
        let sig = ed25519_dalek::Signature::from_bytes(&sig);
        assert!(public.verify_strict(&nonce, &sig).is_ok());
        assert!(public.verify_strict(&[8u8; 32], &sig).is_err());
    }
}
