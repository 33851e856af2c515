//! The TLS record layer towards a client once its handshake is done. rustls runs the
//! handshake (tls.rs); then the connection's keys come out of it
//! (`dangerous_into_kernel_connection`) and records are sealed and opened here, with a
//! cipher context made from the bare key for each burst of records and dropped after
//! it. For TLS 1.3's key updates the traffic secrets are kept too (caught from rustls's
//! key log during the handshake, and checked against the keys rustls gives), and the
//! next ones derived here (RFC 8446 7.2): rustls's `KernelConnection` would derive them
//! from the key schedule it keeps, but keeping it costs about 800 bytes a client
//! (`storm.toml`: 2,851 bytes an idle TLS client with it, 2,058 without). An idle client
//! so holds its keys, secrets and sequence numbers where rustls's connection held its
//! whole state and a cipher context each way (key schedule and GHASH tables, about
//! 3.5 KiB in all).
//!
//! TLS 1.3 (RFC 8446 section 5) and TLS 1.2's AEAD suites (RFC 5288, RFC 7905), the
//! suites rustls offers.

use super::spare;
use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hkdf;
use bytes::{Buf, BufMut, BytesMut};
use rustls::{ConnectionTrafficSecrets, ExtractedSecrets};
use zeroize::Zeroize;

/// Record header: type, version, length.
pub const HEADER: usize = 5;
const TAG: usize = 16;
/// Most plaintext bytes in a record.
const MAX_PLAIN: usize = 16384;
/// Longest record body accepted: RFC 8446 5.2 allows 256 bytes of expansion, RFC 5246
/// 6.2.3 2,048.
const MAX_BODY_13: usize = MAX_PLAIN + 256;
const MAX_BODY_12: usize = MAX_PLAIN + 2048;
/// Records without application bytes (key updates, warnings) taken in a row.
const MAX_QUIET: u8 = 32;
/// TLS 1.2 AES-GCM's explicit nonce in each record.
const EXPLICIT: usize = 8;

const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
const KEY_UPDATE: u8 = 24;

const CLOSE_NOTIFY: u8 = 0;
const UNEXPECTED_MESSAGE: u8 = 10;
const BAD_RECORD_MAC: u8 = 20;
const RECORD_OVERFLOW: u8 = 22;
const ILLEGAL_PARAMETER: u8 = 47;
const DECODE_ERROR: u8 = 50;
const INTERNAL_ERROR: u8 = 80;
const USER_CANCELED: u8 = 90;
const NO_RENEGOTIATION: u8 = 100;

/// A connection-ending failure: the alert to send (none when the client sent one) and
/// what went wrong.
#[derive(Debug)]
pub struct Fatal {
    pub alert: Option<u8>,
    pub what: &'static str,
}

fn fatal(alert: u8, what: &'static str) -> Fatal {
    Fatal {
        alert: Some(alert),
        what,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Cipher {
    fn key_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm => 16,
            Cipher::Aes256Gcm | Cipher::Chacha20Poly1305 => 32,
        }
    }
}

/// A TLS 1.3 traffic secret: SHA-256's 32 bytes or SHA-384's 48, by the suite's hash
/// (none, 0 bytes, in TLS 1.2).
pub struct Secret {
    bytes: [u8; 48],
    len: u8,
}

impl Secret {
    const NONE: Secret = Secret {
        bytes: [0; 48],
        len: 0,
    };

    pub fn new(secret: &[u8]) -> Option<Secret> {
        let mut s = Secret {
            bytes: [0; 48],
            len: 0,
        };
        if secret.len() != 32 && secret.len() != 48 {
            return None;
        }
        s.bytes[..secret.len()].copy_from_slice(secret);
        s.len = secret.len() as u8;
        Some(s)
    }

    fn get(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// HKDF-Expand-Label with an empty context (RFC 8446 7.1) into `out`.
    fn expand_label(&self, label: &[u8], out: &mut [u8]) -> Result<(), Fatal> {
        struct Len(usize);
        impl hkdf::KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        let algorithm = if self.len == 48 {
            hkdf::HKDF_SHA384
        } else {
            hkdf::HKDF_SHA256
        };
        let length = (out.len() as u16).to_be_bytes();
        let label_len = [(b"tls13 ".len() + label.len()) as u8];
        let info: [&[u8]; 5] = [&length, &label_len, b"tls13 ", label, &[0]];
        hkdf::Prk::new_less_safe(algorithm, self.get())
            .expand(&info, Len(out.len()))
            .and_then(|okm| okm.fill(out))
            .map_err(|_| fatal(INTERNAL_ERROR, "TLS key derivation failed"))
    }

    /// The traffic key and IV for `cipher`.
    fn keys(&self, cipher: Cipher) -> Result<([u8; 32], [u8; 12]), Fatal> {
        let (mut key, mut iv) = ([0; 32], [0; 12]);
        self.expand_label(b"key", &mut key[..cipher.key_len()])?;
        self.expand_label(b"iv", &mut iv)?;
        Ok((key, iv))
    }

    /// The next traffic secret, after a key update.
    fn next(&self) -> Result<Secret, Fatal> {
        let mut next = Secret {
            bytes: [0; 48],
            len: self.len,
        };
        self.expand_label(b"traffic upd", &mut next.bytes[..usize::from(self.len)])?;
        Ok(next)
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

/// One direction's key, IV and sequence number, and for TLS 1.3 its traffic secret.
/// (All bytes, aligned to 1: 102 bytes, and the connection 256 with them; see tls.rs.)
struct Way {
    cipher: Cipher,
    key: [u8; 32],
    iv: [u8; 12],
    /// The next record's sequence number (a u64's bytes, in the machine's order).
    seq: [u8; 8],
    secret: Secret,
}

impl Way {
    /// The direction from rustls's keys, and for TLS 1.3 the traffic secret they
    /// came from (checked: it must give the same keys).
    fn new(
        (seq, secrets): (u64, ConnectionTrafficSecrets),
        secret: Option<Secret>,
    ) -> Result<Way, Fatal> {
        let (cipher, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (Cipher::Chacha20Poly1305, key, iv)
            }
            _ => return Err(fatal(INTERNAL_ERROR, "TLS cipher not supported")),
        };
        let mut way = Way {
            cipher,
            key: [0; 32],
            iv: [0; 12],
            seq: seq.to_ne_bytes(),
            secret: Secret::NONE,
        };
        let (key, iv) = (key.as_ref(), iv.as_ref());
        let (Some(k), Some(i)) = (way.key.get_mut(..key.len()), way.iv.get_mut(..iv.len())) else {
            return Err(fatal(INTERNAL_ERROR, "TLS key of an unexpected size"));
        };
        k.copy_from_slice(key);
        i.copy_from_slice(iv);
        if let Some(secret) = secret {
            let (key, iv) = secret.keys(cipher)?;
            if (key, iv) != (way.key, way.iv) {
                return Err(fatal(INTERNAL_ERROR, "TLS traffic secret does not match"));
            }
            way.secret = secret;
        }
        Ok(way)
    }

    /// The next traffic secret and keys (a TLS 1.3 key update), counting from 0.
    fn update(&mut self) -> Result<(), Fatal> {
        if self.secret.len == 0 {
            return Err(fatal(INTERNAL_ERROR, "no TLS traffic secret"));
        }
        let next = self.secret.next()?;
        (self.key, self.iv) = next.keys(self.cipher)?;
        self.secret = next;
        self.seq = [0; 8];
        Ok(())
    }

    /// The cipher context for a burst of records.
    fn context(&self) -> Result<LessSafeKey, Fatal> {
        let algorithm = match self.cipher {
            Cipher::Aes128Gcm => &aead::AES_128_GCM,
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::Chacha20Poly1305 => &aead::CHACHA20_POLY1305,
        };
        UnboundKey::new(algorithm, &self.key[..self.cipher.key_len()])
            .map(LessSafeKey::new)
            .map_err(|_| fatal(INTERNAL_ERROR, "TLS key rejected"))
    }

    /// The next record's sequence number, and the nonce for it (the IV with the
    /// sequence number in its last 8 bytes).
    fn next(&mut self) -> Result<(u64, [u8; 12]), Fatal> {
        let seq = self.seq();
        self.seq = seq
            .checked_add(1)
            .ok_or_else(|| fatal(INTERNAL_ERROR, "TLS sequence number exhausted"))?
            .to_ne_bytes();
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        Ok((seq, nonce))
    }

    /// The next record's sequence number.
    fn seq(&self) -> u64 {
        u64::from_ne_bytes(self.seq)
    }
}

impl Drop for Way {
    fn drop(&mut self) {
        self.key.zeroize();
        self.iv.zeroize();
    }
}

/// A client connection's record layer after the handshake.
pub struct Records {
    tls13: bool,
    /// TLS 1.2 AES-GCM: records carry an explicit nonce.
    explicit: bool,
    /// Records sealed under one key before a key update (TLS 1.3) or the end (TLS
    /// 1.2): the suite's confidentiality limit, less a margin, as a u32's bytes
    /// (u32::MAX: none but the sequence number's; see [`Records::limit`]).
    limit: [u8; 4],
    tx: Way,
    rx: Way,
    /// The client asked for a key update: ours goes before our next data.
    answer: bool,
    /// Records without application bytes since the last with some.
    quiet: u8,
}

/// A TLS 1.3 connection's traffic secrets: the client's and the server's.
pub type TrafficSecrets = (Option<Secret>, Option<Secret>);

impl Records {
    /// The record layer from rustls's keys, its suite's confidentiality limit, and for
    /// TLS 1.3 the traffic secrets (which it must have).
    pub fn new(
        keys: ExtractedSecrets,
        limit: u64,
        tls13: Option<TrafficSecrets>,
    ) -> Result<Records, Fatal> {
        let (rx, tx) = match tls13 {
            None => (None, None),
            Some((Some(client), Some(server))) => (Some(client), Some(server)),
            Some(_) => return Err(fatal(INTERNAL_ERROR, "no TLS traffic secrets")),
        };
        let tls13 = tx.is_some();
        let tx = Way::new(keys.tx, tx)?;
        let rx = Way::new(keys.rx, rx)?;
        Ok(Records {
            tls13,
            explicit: !tls13 && tx.cipher != Cipher::Chacha20Poly1305,
            limit: match limit {
                u64::MAX => u32::MAX,
                limit => u32::try_from(limit - limit / 16).unwrap_or(u32::MAX - 1),
            }
            .to_ne_bytes(),
            tx,
            rx,
            answer: false,
            quiet: 0,
        })
    }

    /// The key's limit `n` records from now.
    #[cfg(test)]
    pub fn limit_after(&mut self, n: u64) {
        let limit = u32::try_from(self.tx.seq() + n).unwrap_or(u32::MAX - 1);
        self.limit = limit.to_ne_bytes();
    }

    /// Records sealed under one key before a key update or the end. (AES-GCM's
    /// limits are about 2^24 records; ChaCha20-Poly1305's is none, u64::MAX in
    /// rustls. A limit past a u32 would be capped to one.)
    fn limit(&self) -> u64 {
        match u32::from_ne_bytes(self.limit) {
            u32::MAX => u64::MAX,
            limit => u64::from(limit),
        }
    }

    /// Records sealed under the current key.
    #[cfg(test)]
    pub fn sealed(&self) -> u64 {
        self.tx.seq()
    }

    /// Opens the whole records at the front of `incoming`: application bytes go to
    /// the end of `plain`. Answers true when the client's close_notify came (nothing
    /// after it is read).
    pub fn open(&mut self, incoming: &mut BytesMut, plain: &mut BytesMut) -> Result<bool, Fatal> {
        let max_body = if self.tls13 { MAX_BODY_13 } else { MAX_BODY_12 };
        let mut context = None;
        while let Some(&[typ, major, minor, l0, l1]) = incoming.get(..HEADER) {
            let len = usize::from(u16::from_be_bytes([l0, l1]));
            if len > max_body {
                return Err(fatal(RECORD_OVERFLOW, "TLS record too long"));
            }
            if major != 3 {
                return Err(fatal(DECODE_ERROR, "TLS record of an unknown version"));
            }
            let expected = match typ {
                APPLICATION_DATA => true,
                ALERT | HANDSHAKE => !self.tls13,
                _ => false,
            };
            if !expected {
                return Err(fatal(UNEXPECTED_MESSAGE, "unexpected TLS record type"));
            }
            let Some(body) = incoming.get(HEADER..HEADER + len) else {
                return Ok(false);
            };
            let explicit = if self.explicit { EXPLICIT } else { 0 };
            if len < explicit + TAG {
                return Err(fatal(BAD_RECORD_MAC, "TLS record too short"));
            }
            let ctx = match &context {
                Some(ctx) => ctx,
                None => context.insert(self.rx.context()?),
            };
            let (seq, mut nonce) = self.rx.next()?;
            if self.explicit {
                nonce[4..].copy_from_slice(&body[..EXPLICIT]);
            }
            let header = [typ, major, minor, l0, l1];
            let aad12;
            let aad: &[u8] = if self.tls13 {
                &header
            } else {
                aad12 = tls12_aad(seq, typ, [major, minor], len - explicit - TAG);
                &aad12
            };
            if plain.capacity() == 0 {
                *plain = spare::buf();
            }
            let start = plain.len();
            plain.extend_from_slice(&body[explicit..]);
            incoming.advance(HEADER + len);
            let opened = ctx.open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut plain[start..],
            );
            let Ok(opened) = opened else {
                return Err(fatal(BAD_RECORD_MAC, "TLS record failed to decrypt"));
            };
            let mut end = start + opened.len();
            let mut typ = typ;
            if self.tls13 {
                // The content type is the last byte not zero (RFC 8446 5.4).
                while end > start && plain[end - 1] == 0 {
                    end -= 1;
                }
                if end == start {
                    return Err(fatal(UNEXPECTED_MESSAGE, "TLS record without a type"));
                }
                end -= 1;
                typ = plain[end];
            }
            if end - start > MAX_PLAIN {
                return Err(fatal(RECORD_OVERFLOW, "TLS record too long"));
            }
            if typ == APPLICATION_DATA {
                if end > start {
                    self.quiet = 0;
                }
                plain.truncate(end);
                continue;
            }
            self.quiet += 1;
            if self.quiet > MAX_QUIET {
                return Err(fatal(UNEXPECTED_MESSAGE, "TLS messages without data"));
            }
            if typ == HANDSHAKE && !self.tls13 {
                return Err(fatal(
                    NO_RENEGOTIATION,
                    "TLS renegotiation is not supported",
                ));
            }
            // An alert or a key update: a few bytes, taken out of `plain`.
            let mut message = [0u8; 8];
            let n = end - start;
            if n > message.len() {
                return Err(fatal(UNEXPECTED_MESSAGE, "unexpected TLS message"));
            }
            message[..n].copy_from_slice(&plain[start..end]);
            plain.truncate(start);
            let message = &message[..n];
            match typ {
                ALERT => {
                    if self.alert_closes(message)? {
                        incoming.clear();
                        return Ok(true);
                    }
                }
                HANDSHAKE => {
                    self.key_update(message)?;
                    // Records after it are under the client's next key.
                    context = None;
                }
                _ => return Err(fatal(UNEXPECTED_MESSAGE, "unexpected TLS message")),
            }
        }
        Ok(false)
    }

    /// An alert from the client: true for close_notify, false for one that changes
    /// nothing (user_canceled; in TLS 1.2 a warning), an error for the others (RFC
    /// 8446 6, RFC 5246 7.2).
    fn alert_closes(&self, message: &[u8]) -> Result<bool, Fatal> {
        let &[level, description] = message else {
            return Err(fatal(DECODE_ERROR, "malformed TLS alert"));
        };
        // TLS 1.3 judges an alert by its description alone.
        let warning = match level {
            _ if self.tls13 => description == CLOSE_NOTIFY || description == USER_CANCELED,
            1 => true,
            2 => false,
            _ => return Err(fatal(ILLEGAL_PARAMETER, "TLS alert of an unknown level")),
        };
        match description {
            CLOSE_NOTIFY if warning => Ok(true),
            _ if warning => Ok(false),
            _ => Err(Fatal {
                alert: None,
                what: "the client sent a TLS alert",
            }),
        }
    }

    /// A handshake message after a TLS 1.3 handshake: a KeyUpdate is the only one a
    /// client may send. The read key moves on at once; ours before our next data, if
    /// the client asks.
    fn key_update(&mut self, message: &[u8]) -> Result<(), Fatal> {
        let requested = match message {
            [KEY_UPDATE, 0, 0, 1, r @ (0 | 1)] => *r == 1,
            [KEY_UPDATE, 0, 0, 1, _] => {
                return Err(fatal(ILLEGAL_PARAMETER, "bad TLS KeyUpdate"));
            }
            [KEY_UPDATE, ..] => return Err(fatal(DECODE_ERROR, "malformed TLS KeyUpdate")),
            _ => {
                return Err(fatal(
                    UNEXPECTED_MESSAGE,
                    "unexpected TLS handshake message",
                ));
            }
        };
        self.rx.update()?;
        self.answer |= requested;
        Ok(())
    }

    /// Sends a KeyUpdate (not asking for one back) and moves to the next write key.
    fn update_tx(&mut self, out: &mut BytesMut) -> Result<(), Fatal> {
        let ctx = self.tx.context()?;
        self.seal_one(&ctx, HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 0], out)?;
        self.tx.update()
    }

    /// Seals `data` as application-data records at the end of `out` (after the
    /// answer to the client's key update, if one is due).
    pub fn seal(&mut self, data: &[u8], out: &mut BytesMut) -> Result<(), Fatal> {
        if data.is_empty() {
            return Ok(());
        }
        if self.answer {
            self.answer = false;
            self.update_tx(out)?;
        }
        self.seal_typed(APPLICATION_DATA, data, out)
    }

    /// Seals a close_notify alert.
    pub fn close_notify(&mut self, out: &mut BytesMut) -> Result<(), Fatal> {
        self.seal_typed(ALERT, &[1, CLOSE_NOTIFY], out)
    }

    /// Seals the alert for `f`, if it has one (past the key's limit too: it is the
    /// last record).
    pub fn alert(&mut self, f: &Fatal, out: &mut BytesMut) {
        if let Some(alert) = f.alert {
            let level = match alert {
                CLOSE_NOTIFY | NO_RENEGOTIATION => 1,
                _ => 2,
            };
            if let Ok(ctx) = self.tx.context() {
                let _ = self.seal_one(&ctx, ALERT, &[level, alert], out);
            }
        }
    }

    fn seal_typed(&mut self, typ: u8, data: &[u8], out: &mut BytesMut) -> Result<(), Fatal> {
        let records = data.len().div_ceil(MAX_PLAIN) as u64;
        if self.tx.seq().saturating_add(records) >= self.limit() {
            if !self.tls13 {
                return Err(fatal(CLOSE_NOTIFY, "TLS 1.2 connection at its key's limit"));
            }
            self.update_tx(out)?;
        }
        let ctx = self.tx.context()?;
        if out.capacity() == 0 {
            *out = spare::buf();
        }
        out.reserve(data.len() + records as usize * (HEADER + EXPLICIT + 1 + TAG));
        for chunk in data.chunks(MAX_PLAIN) {
            self.seal_one(&ctx, typ, chunk, out)?;
        }
        Ok(())
    }

    fn seal_one(
        &mut self,
        ctx: &LessSafeKey,
        typ: u8,
        chunk: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), Fatal> {
        let (seq, nonce) = self.tx.next()?;
        let explicit = if self.explicit { EXPLICIT } else { 0 };
        let len = explicit + chunk.len() + usize::from(self.tls13) + TAG;
        let header = [
            if self.tls13 { APPLICATION_DATA } else { typ },
            3,
            3,
            (len >> 8) as u8,
            len as u8,
        ];
        out.put_slice(&header);
        if self.explicit {
            out.put_slice(&nonce[4..]);
        }
        let start = out.len();
        out.put_slice(chunk);
        if self.tls13 {
            out.put_u8(typ);
        }
        let aad12;
        let aad: &[u8] = if self.tls13 {
            &header
        } else {
            aad12 = tls12_aad(seq, typ, [3, 3], chunk.len());
            &aad12
        };
        let tag = ctx
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut out[start..],
            )
            .map_err(|_| fatal(INTERNAL_ERROR, "TLS record failed to encrypt"))?;
        out.put_slice(tag.as_ref());
        Ok(())
    }
}

/// TLS 1.2's additional data: sequence number, type, version, plaintext length.
fn tls12_aad(seq: u64, typ: u8, version: [u8; 2], len: usize) -> [u8; 13] {
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = typ;
    aad[9..11].copy_from_slice(&version);
    aad[11..].copy_from_slice(&(len as u16).to_be_bytes());
    aad
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
