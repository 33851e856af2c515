//! SCRAM-SHA-256 as a server (RFC 5802 / 7677), for checking clients against a stored
//! verifier.
//!
//! Sluice plays the server side of the exchange towards its clients: it sends the salt and
//! iteration count of the user's verifier, checks the client's proof against StoredKey in
//! constant time, and proves itself with ServerKey. A successful check also yields the
//! client's ClientKey, which is enough to log in to a server that holds the same
//! verifier without ever knowing the password.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// The stored form of a SCRAM-SHA-256 secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(..)")
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any size"),
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

impl Verifier {
    /// Derives a verifier from a plaintext password.
    pub fn from_password(password: &[u8], salt: &[u8], iterations: u32) -> Verifier {
        let mut salted = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut salted);
        let client_key = hmac(&salted, b"Client Key");
        Verifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: Sha256::digest(client_key).into(),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// Parses PostgreSQL's format: `SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(s: &str) -> Option<Verifier> {
        let rest = s.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iter, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        Some(Verifier {
            iterations: iter.parse().ok().filter(|i| *i > 0)?,
            salt: B64.decode(salt).ok()?,
            stored_key: B64.decode(stored).ok()?.try_into().ok()?,
            server_key: B64.decode(server).ok()?.try_into().ok()?,
        })
    }
}

/// Why an exchange failed. All of them are reported to the client as a failed login.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message")]
    Malformed,
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("SCRAM nonce mismatch")]
    Nonce,
    #[error("password authentication failed")]
    BadProof,
}

/// Server side of one exchange, after the client-first message.
pub struct ServerExchange {
    verifier: Verifier,
    client_first_bare: String,
    server_first: String,
    gs2_header: String,
    nonce: String,
}

impl ServerExchange {
    /// Takes the client-first message and a fresh server nonce (printable, no commas);
    /// returns the exchange and the server-first message to send.
    pub fn start(
        verifier: &Verifier,
        client_first: &[u8],
        server_nonce: &str,
    ) -> Result<(ServerExchange, String), ScramError> {
        let msg = std::str::from_utf8(client_first).map_err(|_| ScramError::Malformed)?;
        let mut parts = msg.splitn(3, ',');
        let flag = parts.next().ok_or(ScramError::Malformed)?;
        let authzid = parts.next().ok_or(ScramError::Malformed)?;
        let bare = parts.next().ok_or(ScramError::Malformed)?;
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed),
        }
        if !authzid.is_empty() {
            return Err(ScramError::Malformed);
        }
        let client_nonce = bare
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .filter(|n| !n.is_empty())
            .ok_or(ScramError::Malformed)?;
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&verifier.salt),
            verifier.iterations
        );
        let ex = ServerExchange {
            verifier: verifier.clone(),
            client_first_bare: bare.to_owned(),
            server_first: server_first.clone(),
            gs2_header: format!("{flag},{authzid},"),
            nonce,
        };
        Ok((ex, server_first))
    }

    /// Checks the client-final message. On success returns the server-final message and
    /// the client's ClientKey.
    pub fn finish(self, client_final: &[u8]) -> Result<(String, [u8; 32]), ScramError> {
        let msg = std::str::from_utf8(client_final).map_err(|_| ScramError::Malformed)?;
        let (without_proof, proof) = msg.rsplit_once(",p=").ok_or(ScramError::Malformed)?;
        let mut cbind = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(v) = attr.strip_prefix("c=") {
                cbind = Some(v);
            } else if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            }
        }
        let cbind = B64
            .decode(cbind.ok_or(ScramError::Malformed)?)
            .map_err(|_| ScramError::Malformed)?;
        if cbind != self.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBinding);
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err(ScramError::Nonce);
        }
        let proof: [u8; 32] = B64
            .decode(proof)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or(ScramError::Malformed)?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = hmac(&self.verifier.stored_key, auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for i in 0..32 {
            client_key[i] = proof[i] ^ signature[i];
        }
        let stored: [u8; 32] = Sha256::digest(client_key).into();
        if !bool::from(stored.ct_eq(&self.verifier.stored_key)) {
            return Err(ScramError::BadProof);
        }
        let server_sig = hmac(&self.verifier.server_key, auth_message.as_bytes());
        Ok((format!("v={}", B64.encode(server_sig)), client_key))
    }
}

/// The client side of an exchange for someone who holds a user's ClientKey (what a
/// client's proof yields to a server that checked it, see [`ServerExchange::finish`])
/// and the verifier's ServerKey instead of the password: the proof is `ClientKey XOR
/// HMAC(SHA256(ClientKey), AuthMessage)`, and the server's final message is checked with
/// the ServerKey, so a server without the verifier cannot pass for one. Works against
/// every server that stores the same verifier (a primary and its replicas).
pub struct KeyClient {
    client_key: [u8; 32],
    server_key: [u8; 32],
    client_first_bare: String,
    nonce: String,
    /// Set once the server's first message has been answered.
    auth_message: Option<String>,
}

impl KeyClient {
    /// Starts an exchange: the client and its client-first message.
    pub fn new(client_key: [u8; 32], server_key: [u8; 32]) -> (KeyClient, String) {
        let nonce = new_nonce();
        // PostgreSQL takes the user from the startup message, not from SCRAM.
        let client_first_bare = format!("n=,r={nonce}");
        let first = format!("n,,{client_first_bare}");
        let client = KeyClient {
            client_key,
            server_key,
            client_first_bare,
            nonce,
            auth_message: None,
        };
        (client, first)
    }

    /// Answers the server-first message: the client-final message.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<String, ScramError> {
        let server_first = std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed)?;
        let nonce = server_first
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed)?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let stored_key: [u8; 32] = Sha256::digest(self.client_key).into();
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let mut proof = self.client_key;
        proof.iter_mut().zip(signature).for_each(|(p, s)| *p ^= s);
        self.auth_message = Some(auth_message);
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server-final message (`v=` ServerSignature) in constant time.
    pub fn verify_server(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let auth_message = self.auth_message.as_ref().ok_or(ScramError::Malformed)?;
        let text = std::str::from_utf8(server_final).map_err(|_| ScramError::Malformed)?;
        let sent = text
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .and_then(|v| B64.decode(v).ok())
            .ok_or(ScramError::Malformed)?;
        let want = hmac(&self.server_key, auth_message.as_bytes());
        if sent.len() != want.len() || !bool::from(want.ct_eq(&sent[..])) {
            return Err(ScramError::BadProof);
        }
        Ok(())
    }
}

/// A random nonce for the server-first message.
pub fn new_nonce() -> String {
    let bytes: [u8; 18] = rand::random();
    B64.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};

    fn exchange(verifier: &Verifier, password: &[u8]) -> Result<(), ScramError> {
        let mut client = ScramSha256::new(password, ChannelBinding::unsupported());
        let (ex, server_first) = ServerExchange::start(verifier, client.message(), &new_nonce())?;
        client
            .update(server_first.as_bytes())
            .map_err(|_| ScramError::Malformed)?;
        let (server_final, _) = ex.finish(client.message())?;
        client
            .finish(server_final.as_bytes())
            .map_err(|_| ScramError::Malformed)
    }

    #[test]
    fn real_client_logs_in() {
        let v = Verifier::from_password(b"secret", b"salty-salt", 4096);
        assert_eq!(exchange(&v, b"secret"), Ok(()));
        assert_eq!(exchange(&v, b"wrong"), Err(ScramError::BadProof));
    }

    /// A client's key, as a server that checked its proof learns it.
    fn client_key_of(verifier: &Verifier, password: &[u8]) -> [u8; 32] {
        let mut client = ScramSha256::new(password, ChannelBinding::unsupported());
        let (ex, server_first) =
            ServerExchange::start(verifier, client.message(), &new_nonce()).unwrap();
        client.update(server_first.as_bytes()).unwrap();
        ex.finish(client.message()).unwrap().1
    }

    /// Logs in with `key` against a server holding `verifier`.
    fn key_login(
        verifier: &Verifier,
        key: [u8; 32],
        server_key: [u8; 32],
    ) -> Result<(), ScramError> {
        let (mut client, first) = KeyClient::new(key, server_key);
        let (ex, server_first) = ServerExchange::start(verifier, first.as_bytes(), &new_nonce())?;
        let last = client.client_final(server_first.as_bytes())?;
        let (server_final, again) = ex.finish(last.as_bytes())?;
        assert_eq!(again, key, "the server learns the same key again");
        client.verify_server(server_final.as_bytes())
    }

    #[test]
    fn a_client_key_logs_in_without_the_password() {
        let v = Verifier::from_password(b"secret", b"salty-salt", 4096);
        let key = client_key_of(&v, b"secret");
        assert_eq!(key_login(&v, key, v.server_key), Ok(()));
        // A wrong key is refused by the server.
        let mut wrong = key;
        wrong[0] ^= 1;
        assert_eq!(
            key_login(&v, wrong, v.server_key),
            Err(ScramError::BadProof)
        );
        // A server that does not hold the verifier cannot prove itself.
        let mut impostor = v.server_key;
        impostor[31] ^= 1;
        assert_eq!(key_login(&v, key, impostor), Err(ScramError::BadProof));
        // The same password under another salt is another key.
        let other = Verifier::from_password(b"secret", b"other-salt", 4096);
        assert_eq!(
            key_login(&other, key, other.server_key),
            Err(ScramError::BadProof)
        );
    }

    #[test]
    fn key_client_checks_the_server_nonce() {
        let (mut client, _) = KeyClient::new([1; 32], [2; 32]);
        assert_eq!(
            client.client_final(b"r=someone-else,s=c2FsdA==,i=4096"),
            Err(ScramError::Nonce)
        );
        assert_eq!(
            client.client_final(b"s=c2FsdA=="),
            Err(ScramError::Malformed)
        );
        assert_eq!(client.verify_server(b"v=AAAA"), Err(ScramError::Malformed));
    }

    #[test]
    fn parses_postgres_verifiers() {
        let s = postgres_protocol::password::scram_sha_256(b"pw");
        let v = Verifier::parse(&s).unwrap();
        assert_eq!(v.iterations, 4096);
        assert_eq!(exchange(&v, b"pw"), Ok(()));
        assert!(Verifier::parse("SCRAM-SHA-256$0:AA==$AA==:AA==").is_none());
        assert!(Verifier::parse("md5abc").is_none());
    }

    #[test]
    fn rejects_garbage() {
        let v = Verifier::from_password(b"x", b"s", 1);
        assert!(ServerExchange::start(&v, b"\xff", "n").is_err());
        assert!(ServerExchange::start(&v, b"n,,n=,r=", "n").is_err());
        assert!(ServerExchange::start(&v, b"p=tls-server-end-point,,n=,r=a", "n").is_err());
        let (ex, _) = ServerExchange::start(&v, b"n,,n=,r=abc", "def").unwrap();
        assert_eq!(
            ex.finish(b"c=biws,r=abcdef,p=AAAA").err(),
            Some(ScramError::Malformed)
        );
    }
}
