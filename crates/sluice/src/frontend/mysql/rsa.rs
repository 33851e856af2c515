//! Sluice's RSA key for caching_sha2_password's full authentication over plain TCP: the
//! client asks for the public key and sends its password encrypted with it (OAEP,
//! SHA-1). Generated once, when first needed.

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeySize, OAEP_SHA1_MGF1SHA1, OaepPrivateDecryptingKey, PrivateDecryptingKey};
use base64::Engine;

pub struct RsaKey {
    key: OaepPrivateDecryptingKey,
    /// The public key as PEM (SubjectPublicKeyInfo), as clients expect it.
    pub pem: Vec<u8>,
}

impl RsaKey {
    pub fn generate() -> Option<RsaKey> {
        let private = PrivateDecryptingKey::generate(KeySize::Rsa2048).ok()?;
        let der = private.public_key().as_der().ok()?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).ok()?);
            pem.push('\n');
        }
        pem.push_str("-----END PUBLIC KEY-----\n");
        let key = OaepPrivateDecryptingKey::new(private).ok()?;
        Some(RsaKey {
            key,
            pem: pem.into_bytes(),
        })
    }

    pub fn decrypt(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0u8; self.key.min_output_size()];
        let clear = self
            .key
            .decrypt(&OAEP_SHA1_MGF1SHA1, sealed, &mut out, None)
            .ok()?;
        Some(clear.to_vec())
    }
}
