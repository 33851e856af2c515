//! The connection phase: the server's HandshakeV10, the client's SSLRequest and
//! HandshakeResponse41, and the packets of an authentication exchange (AuthSwitchRequest,
//! AuthMoreData).
//!
//! Sluice plays both sides: towards clients it sends its own HandshakeV10 and reads
//! their responses; towards servers it reads theirs and answers. Both directions go
//! through these parsers and encoders, which read and write payloads only (framing is
//! [`crate::packet`]'s job). MariaDB's extended capabilities ride in bytes the MySQL
//! format reserves, as [`crate::consts`] explains; pre-4.1 clients are not supported.

use crate::codec::{Reader, put_lenenc_str, put_nul_str};
use crate::consts::{
    CLIENT_CONNECT_ATTRS, CLIENT_CONNECT_WITH_DB, CLIENT_MYSQL, CLIENT_PLUGIN_AUTH,
    CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    CLIENT_SSL, CLIENT_ZSTD_COMPRESSION_ALGORITHM,
};
use bytes::BufMut;

/// The server's first packet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HandshakeV10 {
    /// E.g. `8.0.36` or, for MariaDB before 11, `5.5.5-10.11.6-MariaDB`.
    pub server_version: Vec<u8>,
    pub connection_id: u32,
    /// The scramble (normally 20 bytes) without the NUL the packet ends it with.
    pub auth_plugin_data: Vec<u8>,
    /// Lower 32 bits from the two 16-bit halves; upper 32 bits from MariaDB's extended
    /// capabilities when the `CLIENT_MYSQL` bit is cleared.
    pub capabilities: u64,
    pub charset: u8,
    pub status: u16,
    /// Empty when the server lacks `CLIENT_PLUGIN_AUTH`.
    pub auth_plugin_name: Vec<u8>,
}

impl HandshakeV10 {
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let mut r = Reader::new(payload);
        if r.u8()? != 10 {
            return None;
        }
        let mut hs = HandshakeV10 {
            server_version: r.nul_str()?.to_vec(),
            connection_id: r.u32()?,
            auth_plugin_data: r.take(8)?.to_vec(),
            ..Self::default()
        };
        r.skip(1)?;
        hs.capabilities = u64::from(r.u16()?);
        if r.is_empty() {
            return Some(hs);
        }
        hs.charset = r.u8()?;
        hs.status = r.u16()?;
        hs.capabilities |= u64::from(r.u16()?) << 16;
        let data_len = usize::from(r.u8()?);
        r.skip(6)?;
        let ext = r.u32()?;
        if hs.capabilities & CLIENT_MYSQL == 0 {
            hs.capabilities |= u64::from(ext) << 32;
        }
        if hs.capabilities & CLIENT_SECURE_CONNECTION != 0 {
            let len = data_len.saturating_sub(8).max(13);
            // Tolerate a short second part at the very end of the packet.
            let part2 = r.take(len).unwrap_or_else(|| r.take_rest());
            hs.auth_plugin_data.extend_from_slice(part2);
            if hs.auth_plugin_data.last() == Some(&0) {
                hs.auth_plugin_data.pop();
            }
        }
        if hs.capabilities & CLIENT_PLUGIN_AUTH != 0 {
            hs.auth_plugin_name = r.nul_str_or_rest().to_vec();
        }
        Some(hs)
    }

    /// The salt for the password scrambles (the scramble, which never includes the NUL).
    pub fn scramble(&self) -> &[u8] {
        &self.auth_plugin_data
    }

    /// Writes the payload. `auth_plugin_data` should be at least 20 bytes long (shorter
    /// scrambles are padded with NULs).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let caps = self.capabilities;
        out.put_u8(10);
        put_nul_str(out, &self.server_version);
        out.put_u32_le(self.connection_id);
        let (part1, part2) = self
            .auth_plugin_data
            .split_at(self.auth_plugin_data.len().min(8));
        out.put_slice(part1);
        out.put_bytes(0, 8 - part1.len());
        out.put_u8(0);
        out.put_u16_le(caps as u16);
        out.put_u8(self.charset);
        out.put_u16_le(self.status);
        out.put_u16_le((caps >> 16) as u16);
        let data_len = (part1.len() + part2.len() + 1).min(255);
        out.put_u8(if caps & CLIENT_PLUGIN_AUTH != 0 {
            data_len as u8
        } else {
            0
        });
        out.put_bytes(0, 6);
        out.put_u32_le(if caps & CLIENT_MYSQL == 0 {
            (caps >> 32) as u32
        } else {
            0
        });
        if caps & CLIENT_SECURE_CONNECTION != 0 {
            out.put_slice(part2);
            out.put_bytes(0, 13usize.saturating_sub(part2.len()).max(1));
        }
        if caps & CLIENT_PLUGIN_AUTH != 0 {
            put_nul_str(out, &self.auth_plugin_name);
        }
    }
}

/// Reads the fixed 32-byte start shared by SSLRequest and HandshakeResponse41:
/// capabilities (with MariaDB's extended ones from bytes 28..32), max packet, charset.
fn fixed_part(r: &mut Reader<'_>) -> Option<(u64, u32, u8)> {
    let mut caps = u64::from(r.u32()?);
    let max_packet = r.u32()?;
    let charset = r.u8()?;
    r.skip(19)?;
    let ext = r.u32()?;
    if caps & CLIENT_MYSQL == 0 {
        caps |= u64::from(ext) << 32;
    }
    Some((caps, max_packet, charset))
}

fn put_fixed_part(out: &mut impl BufMut, caps: u64, max_packet: u32, charset: u8) {
    out.put_u32_le(caps as u32);
    out.put_u32_le(max_packet);
    out.put_u8(charset);
    out.put_bytes(0, 19);
    out.put_u32_le(if caps & CLIENT_MYSQL == 0 {
        (caps >> 32) as u32
    } else {
        0
    });
}

/// Whether a client's first packet is an SSLRequest: exactly the 32-byte fixed part,
/// with `CLIENT_SSL` set. The client starts TLS next and sends its HandshakeResponse41
/// inside it.
pub fn is_ssl_request(payload: &[u8]) -> bool {
    payload.len() == 32
        && Reader::new(payload)
            .u32()
            .is_some_and(|c| u64::from(c) & CLIENT_SSL != 0)
}

/// The SSLRequest: the first 32 bytes of a HandshakeResponse41.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SslRequest {
    pub capabilities: u64,
    pub max_packet: u32,
    pub charset: u8,
}

impl SslRequest {
    pub fn parse(payload: &[u8]) -> Option<Self> {
        if !is_ssl_request(payload) {
            return None;
        }
        let (capabilities, max_packet, charset) = fixed_part(&mut Reader::new(payload))?;
        Some(SslRequest {
            capabilities,
            max_packet,
            charset,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_fixed_part(
            out,
            self.capabilities | CLIENT_SSL,
            self.max_packet,
            self.charset,
        );
    }
}

/// The client's answer to the handshake (protocol 4.1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HandshakeResponse41 {
    pub capabilities: u64,
    pub max_packet: u32,
    pub charset: u8,
    pub username: Vec<u8>,
    /// The password scramble, as the auth plugin computed it.
    pub auth_response: Vec<u8>,
    /// With `CLIENT_CONNECT_WITH_DB`.
    pub database: Option<Vec<u8>>,
    /// With `CLIENT_PLUGIN_AUTH`.
    pub auth_plugin: Option<Vec<u8>>,
    /// With `CLIENT_CONNECT_ATTRS`: the raw key/value pairs (each a length-encoded
    /// string), without their total length.
    pub attrs: Option<Vec<u8>>,
}

impl HandshakeResponse41 {
    /// Parses the response. Trailing optional fields the client's capabilities announce
    /// but the packet omits read as `None`, as servers accept.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        Self::parse_with_rest(payload).map(|(r, _)| r)
    }

    /// The zstd level byte that ends the response of a client asking for
    /// CLIENT_ZSTD_COMPRESSION_ALGORITHM (after the connection attributes).
    pub fn zstd_level(payload: &[u8]) -> Option<u8> {
        let (r, rest) = Self::parse_with_rest(payload)?;
        (r.capabilities & CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0)
            .then(|| rest.first().copied())
            .flatten()
    }

    fn parse_with_rest(payload: &[u8]) -> Option<(Self, &[u8])> {
        let mut r = Reader::new(payload);
        let (caps, max_packet, charset) = fixed_part(&mut r)?;
        if caps & CLIENT_PROTOCOL_41 == 0 {
            return None;
        }
        let username = r.nul_str()?.to_vec();
        let auth_response = if caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            r.lenenc_str()?
        } else if caps & CLIENT_SECURE_CONNECTION != 0 {
            let n = r.u8()?;
            r.take(usize::from(n))?
        } else {
            r.nul_str()?
        }
        .to_vec();
        let field = |flag: u64, r: &mut Reader<'_>| {
            (caps & flag != 0 && !r.is_empty()).then(|| r.nul_str_or_rest().to_vec())
        };
        let database = field(CLIENT_CONNECT_WITH_DB, &mut r);
        let auth_plugin = field(CLIENT_PLUGIN_AUTH, &mut r);
        let attrs = if caps & CLIENT_CONNECT_ATTRS != 0 && !r.is_empty() {
            Some(r.lenenc_str()?.to_vec())
        } else {
            None
        };
        let response = HandshakeResponse41 {
            capabilities: caps,
            max_packet,
            charset,
            username,
            auth_response,
            database,
            auth_plugin,
            attrs,
        };
        Some((response, r.rest()))
    }

    /// Writes the payload. Optional fields are written when their capability is set
    /// (an absent value as empty). With CLIENT_ZSTD_COMPRESSION_ALGORITHM the caller
    /// appends the level byte.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let caps = self.capabilities;
        put_fixed_part(out, caps, self.max_packet, self.charset);
        put_nul_str(out, &self.username);
        if caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            put_lenenc_str(out, &self.auth_response);
        } else if caps & CLIENT_SECURE_CONNECTION != 0 {
            let n = self.auth_response.len().min(255);
            out.put_u8(n as u8);
            out.put_slice(self.auth_response.get(..n).unwrap_or_default());
        } else {
            put_nul_str(out, &self.auth_response);
        }
        let none = Vec::new();
        if caps & CLIENT_CONNECT_WITH_DB != 0 {
            put_nul_str(out, self.database.as_ref().unwrap_or(&none));
        }
        if caps & CLIENT_PLUGIN_AUTH != 0 {
            put_nul_str(out, self.auth_plugin.as_ref().unwrap_or(&none));
        }
        if caps & CLIENT_CONNECT_ATTRS != 0 {
            put_lenenc_str(out, self.attrs.as_ref().unwrap_or(&none));
        }
    }

    /// The connection attributes as (key, value) pairs.
    pub fn attr_pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut r = Reader::new(self.attrs.as_deref().unwrap_or_default());
        std::iter::from_fn(move || Some((r.lenenc_str()?, r.lenenc_str()?)))
    }
}

/// 0xFE + plugin name + plugin data: the server asks the client to authenticate with
/// another plugin. The bare `[0xFE]` of old servers (switch to mysql_old_password) reads
/// as an empty plugin name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSwitchRequest<'a> {
    pub plugin: &'a [u8],
    /// For mysql_native_password and caching_sha2_password: the 20-byte scramble and a
    /// NUL.
    pub data: &'a [u8],
}

impl<'a> AuthSwitchRequest<'a> {
    pub fn parse(payload: &'a [u8]) -> Option<Self> {
        let mut r = Reader::new(payload);
        if r.u8()? != 0xFE {
            return None;
        }
        Some(AuthSwitchRequest {
            plugin: r.nul_str_or_rest(),
            data: r.take_rest(),
        })
    }

    /// The data without its trailing NUL: the salt for the scrambles.
    pub fn scramble(&self) -> &'a [u8] {
        self.data.strip_suffix(&[0]).unwrap_or(self.data)
    }

    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_u8(0xFE);
        put_nul_str(out, self.plugin);
        out.put_slice(self.data);
    }
}

/// 0x01 + data: more data for the current auth plugin (e.g. caching_sha2_password's
/// fast-auth result, or a public key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthMoreData<'a> {
    pub data: &'a [u8],
}

impl<'a> AuthMoreData<'a> {
    pub fn parse(payload: &'a [u8]) -> Option<Self> {
        match payload.split_first() {
            Some((0x01, data)) => Some(AuthMoreData { data }),
            _ => None,
        }
    }

    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_u8(0x01);
        out.put_slice(self.data);
    }
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;

/// A client's COM_CHANGE_USER (after the command byte): the new user, its answer to
/// the scramble of the connection's login, the database, and, when the client sends
/// them, the character set and the plugin the answer was made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeUser {
    pub username: Vec<u8>,
    pub auth_response: Vec<u8>,
    pub database: Vec<u8>,
    pub charset: Option<u16>,
    pub auth_plugin: Option<Vec<u8>>,
}

impl ChangeUser {
    /// Parses the body with the capabilities agreed at login.
    pub fn parse(body: &[u8], caps: u64) -> Option<Self> {
        let mut r = Reader::new(body);
        let username = r.nul_str()?.to_vec();
        let auth_response = if caps & CLIENT_SECURE_CONNECTION != 0 {
            let n = r.u8()?;
            r.take(usize::from(n))?
        } else {
            r.nul_str()?
        }
        .to_vec();
        let database = r.nul_str_or_rest().to_vec();
        let charset = if r.is_empty() { None } else { Some(r.u16()?) };
        let auth_plugin =
            (caps & CLIENT_PLUGIN_AUTH != 0 && !r.is_empty()).then(|| r.nul_str_or_rest().to_vec());
        Some(ChangeUser {
            username,
            auth_response,
            database,
            charset,
            auth_plugin,
        })
    }

    /// Writes the body (without the command byte) as a client with `caps` would.
    pub fn encode(&self, caps: u64, out: &mut Vec<u8>) {
        put_nul_str(out, &self.username);
        if caps & CLIENT_SECURE_CONNECTION != 0 {
            out.push(self.auth_response.len().min(255) as u8);
            out.extend_from_slice(&self.auth_response[..self.auth_response.len().min(255)]);
        } else {
            put_nul_str(out, &self.auth_response);
        }
        put_nul_str(out, &self.database);
        if let Some(cs) = self.charset {
            out.extend_from_slice(&cs.to_le_bytes());
            if let Some(p) = self
                .auth_plugin
                .as_deref()
                .filter(|_| caps & CLIENT_PLUGIN_AUTH != 0)
            {
                put_nul_str(out, p);
            }
        }
    }
}
