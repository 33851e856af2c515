//! The compressed protocol (CLIENT_COMPRESS with zlib, CLIENT_ZSTD_COMPRESSION_ALGORITHM
//! with zstd), without any IO.
//!
//! Compression is a layer below the packets of [`crate::packet`]: once the connection
//! phase has ended with its OK, each side sends *compressed packets*, a 7-byte header
//! (3-byte little-endian length of what follows, a compressed sequence id, the 3-byte
//! length before compression, 0 when what follows is not compressed) and a payload that
//! carries a piece of the ordinary packet stream: one packet, several, or part of one.
//! The compressed sequence id restarts at 0 with every command, like the packet sequence
//! id, but counts compressed packets. In the `sluice` crate a stream wrapper
//! (`stream::compressed`) runs this [`Framer`] on a client's or a server's socket, so the
//! relay above it sees plain packets and nothing else changes.
//!
//! Each compressed payload is a whole zlib stream or zstd frame on its own, so no state
//! lives from one packet to the next: the (de)compressor contexts are kept per thread,
//! and an idle connection holds none.

use crate::packet::{self, MAX_PAYLOAD};
use bytes::{BufMut, BytesMut};
use std::cell::RefCell;

pub const HEADER_LEN: usize = 7;
/// Payloads shorter than this go uncompressed, as servers send them.
pub const MIN_COMPRESS_LEN: usize = 50;
/// The most plain bytes Sluice puts in one compressed packet.
pub const MAX_CHUNK: usize = 64 * 1024;
/// zlib level of what Sluice compresses (the fastest: a proxy's CPU is the cost).
pub const ZLIB_LEVEL: u32 = 1;
/// zstd level Sluice asks servers for (zstd's own default).
pub const ZSTD_DEFAULT_LEVEL: u8 = 3;

/// How compressed payloads are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Zlib,
    /// With the level to compress at (the client's, from its HandshakeResponse41).
    Zstd {
        level: i32,
    },
}

impl Algorithm {
    /// The algorithm agreed capabilities select: zlib when both flags are set, as
    /// servers decide; `zstd_level` is the level byte of the client's response.
    pub fn negotiated(caps: u64, zstd_level: Option<u8>) -> Option<Algorithm> {
        use crate::consts::{CLIENT_COMPRESS, CLIENT_ZSTD_COMPRESSION_ALGORITHM};
        if caps & CLIENT_COMPRESS != 0 {
            Some(Algorithm::Zlib)
        } else if caps & CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
            let level = zstd_level.unwrap_or(ZSTD_DEFAULT_LEVEL);
            Some(Algorithm::Zstd {
                level: i32::from(level.clamp(1, 22)),
            })
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Zlib => "zlib",
            Algorithm::Zstd { .. } => "zstd",
        }
    }
}

/// The header of a compressed packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes after the header.
    pub len: usize,
    pub seq: u8,
    /// Length before compression; 0: the payload is not compressed.
    pub plain_len: usize,
}

impl Header {
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.len
    }
}

/// The header at the start of `buf`, if all 7 bytes are there.
pub fn header(buf: &[u8]) -> Option<Header> {
    let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
    let u24 = |b: &[u8]| usize::from(b[0]) | usize::from(b[1]) << 8 | usize::from(b[2]) << 16;
    Some(Header {
        len: u24(&h[..3]),
        seq: h[3],
        plain_len: u24(&h[4..]),
    })
}

fn put_header(out: &mut impl BufMut, len: usize, seq: u8, plain_len: usize) {
    out.put_uint_le(len as u64, 3);
    out.put_u8(seq);
    out.put_uint_le(plain_len as u64, 3);
}

/// Why a compressed stream cannot be read further; the connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressError {
    #[error("compressed packet of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("compressed packet sequence id {got} where {expected} was expected")]
    OutOfOrder { expected: u8, got: u8 },
    #[error("compressed packet does not decompress ({0})")]
    Corrupt(&'static str),
}

impl CompressError {
    /// The MySQL error a client gets for it (code; the SQLSTATE is 08S01 for all).
    pub fn code(&self) -> u16 {
        match self {
            CompressError::TooLarge { .. } => crate::consts::ER_NET_PACKET_TOO_LARGE,
            CompressError::OutOfOrder { .. } => crate::consts::ER_NET_PACKETS_OUT_OF_ORDER,
            CompressError::Corrupt(_) => crate::consts::ER_NET_UNCOMPRESS_ERROR,
        }
    }
}

thread_local! {
    static DEFLATE: RefCell<Option<flate2::Compress>> = const { RefCell::new(None) };
    static INFLATE: RefCell<Option<flate2::Decompress>> = const { RefCell::new(None) };
    static ZSTD_C: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Compresses `src` into `dst` (exactly `dst.len()` bytes available): the compressed
/// size, or None when it does not fit (it would not be smaller: send `src` as it is).
fn compress_into(alg: Algorithm, src: &[u8], dst: &mut [u8]) -> Option<usize> {
    match alg {
        Algorithm::Zlib => DEFLATE.with_borrow_mut(|c| {
            let c = c.get_or_insert_with(|| {
                flate2::Compress::new(flate2::Compression::new(ZLIB_LEVEL), true)
            });
            c.reset();
            let status = c.compress(src, dst, flate2::FlushCompress::Finish).ok()?;
            (status == flate2::Status::StreamEnd).then(|| c.total_out() as usize)
        }),
        Algorithm::Zstd { level } => ZSTD_C.with_borrow_mut(|c| {
            if c.as_ref().is_none_or(|(l, _)| *l != level) {
                *c = Some((level, zstd::bulk::Compressor::new(level).ok()?));
            }
            let (_, c) = c.as_mut()?;
            c.compress_to_buffer(src, dst).ok()
        }),
    }
}

/// Decompresses `src` into all of `dst`; anything else (too little, too much, not a
/// zlib stream / zstd frame) is corrupt.
fn decompress_into(alg: Algorithm, src: &[u8], dst: &mut [u8]) -> Result<(), CompressError> {
    match alg {
        Algorithm::Zlib => INFLATE.with_borrow_mut(|d| {
            let d = d.get_or_insert_with(|| flate2::Decompress::new(true));
            d.reset(true);
            match d.decompress(src, dst, flate2::FlushDecompress::Finish) {
                Ok(flate2::Status::StreamEnd) if d.total_out() as usize == dst.len() => Ok(()),
                Ok(flate2::Status::StreamEnd) => Err(CompressError::Corrupt("short")),
                Ok(_) => Err(CompressError::Corrupt("longer than announced or truncated")),
                Err(_) => Err(CompressError::Corrupt("not a zlib stream")),
            }
        }),
        Algorithm::Zstd { .. } => ZSTD_D.with_borrow_mut(|d| {
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            let d = d
                .as_mut()
                .ok_or(CompressError::Corrupt("no zstd context"))?;
            match d.decompress_to_buffer(src, dst) {
                Ok(n) if n == dst.len() => Ok(()),
                Ok(_) => Err(CompressError::Corrupt("short")),
                Err(_) => Err(CompressError::Corrupt(
                    "not a zstd frame of the announced size",
                )),
            }
        }),
    }
}

/// Writes `plain` (at most [`MAX_PAYLOAD`] bytes) as one compressed packet: compressed
/// when it is [`MIN_COMPRESS_LEN`] bytes or more and gets smaller, else as it is.
pub fn encode(alg: Algorithm, seq: u8, plain: &[u8], out: &mut BytesMut) {
    debug_assert!(plain.len() <= MAX_PAYLOAD);
    let at = out.len();
    if plain.len() >= MIN_COMPRESS_LEN {
        out.resize(at + HEADER_LEN + plain.len(), 0);
        if let Some(n) = compress_into(alg, plain, &mut out[at + HEADER_LEN..])
            && n < plain.len()
        {
            out.truncate(at + HEADER_LEN + n);
            let mut h = &mut out[at..at + HEADER_LEN];
            put_header(&mut h, n, seq, plain.len());
            return;
        }
        out.truncate(at);
    }
    put_header(out, plain.len(), seq, 0);
    out.put_slice(plain);
}

/// Decodes the compressed packet at the start of `buf` if all of it is there,
/// appending its plain bytes to `out`: its header. `max` caps both of its lengths.
pub fn decode(
    alg: Algorithm,
    buf: &[u8],
    max: usize,
    out: &mut BytesMut,
) -> Result<Option<Header>, CompressError> {
    let Some(h) = header(buf) else {
        return Ok(None);
    };
    if h.len.max(h.plain_len) > max {
        return Err(CompressError::TooLarge {
            len: h.len.max(h.plain_len),
            max,
        });
    }
    let Some(payload) = buf.get(HEADER_LEN..h.frame_len()) else {
        return Ok(None);
    };
    if h.plain_len == 0 {
        out.extend_from_slice(payload);
    } else {
        let at = out.len();
        out.resize(at + h.plain_len, 0);
        if let Err(e) = decompress_into(alg, payload, &mut out[at..]) {
            out.truncate(at);
            return Err(e);
        }
    }
    Ok(Some(h))
}

/// Which end of the connection Sluice plays on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Towards a client: Sluice answers its commands.
    Server,
    /// Towards a server: Sluice sends the commands.
    Client,
}

/// Follows the packet framing of a plain byte stream given in pieces.
#[derive(Debug, Clone, Copy, Default)]
struct Scan {
    /// Payload bytes of the current packet still to come.
    left: usize,
    /// Header bytes of the next packet seen so far, and their values.
    have: usize,
    len: [u8; 3],
}

impl Scan {
    /// Walks `buf` (the bytes that follow what was walked before) from `i` to the next
    /// packet's sequence id byte: its index in `buf`, and where its header starts in
    /// `buf` (None: in bytes walked before). None when `buf` ends first.
    fn next(&mut self, buf: &[u8], mut i: usize) -> Option<(usize, Option<usize>)> {
        let mut start = None;
        while i < buf.len() {
            if self.left > 0 {
                let k = self.left.min(buf.len() - i);
                self.left -= k;
                i += k;
                continue;
            }
            if self.have < 3 {
                if self.have == 0 {
                    start = Some(i);
                }
                self.len[self.have] = buf[i];
                self.have += 1;
                i += 1;
                continue;
            }
            self.have = 0;
            self.left = usize::from(self.len[0])
                | usize::from(self.len[1]) << 8
                | usize::from(self.len[2]) << 16;
            return Some((i, start));
        }
        None
    }

    /// At a packet boundary.
    fn at_boundary(&self) -> bool {
        self.left == 0 && self.have == 0
    }
}

/// The compressed layer of one connection: sequence ids both ways and, towards a
/// server, the packet sequence ids the client above expects.
///
/// Towards a client (server role) the compressed sequence id follows the client's: an
/// answer continues from the id of the last packet read, and a packet read must carry
/// 0 (a new command) or the next id. Towards a server (client role) every command starts
/// a compressed packet of its own with id 0; and since a server in compressed mode may
/// renumber its packets after the compressed ones, the packets read get ids that
/// continue from those written, as without compression, so the relay can pass them to
/// a client that does not compress.
#[derive(Debug, Clone)]
pub struct Framer {
    pub alg: Algorithm,
    role: Role,
    max: usize,
    /// Compressed sequence id of the next packet written.
    seq: u8,
    wscan: Scan,
    rscan: Scan,
    /// Client role: the packet sequence id of the last packet written.
    last_written: Option<u8>,
    /// Client role: something was read since the last write.
    read_since_write: bool,
    /// Client role: the id the next packet read gets.
    plain_next: u8,
}

impl Framer {
    /// `max`: the largest compressed packet accepted (both lengths).
    pub fn new(alg: Algorithm, role: Role, max: usize) -> Framer {
        Framer {
            alg,
            role,
            max: max.min(MAX_PAYLOAD),
            seq: 0,
            wscan: Scan::default(),
            rscan: Scan::default(),
            last_written: None,
            read_since_write: false,
            plain_next: 0,
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The compressed sequence id Sluice's next packet carries.
    pub fn next_seq(&self) -> u8 {
        self.seq
    }

    /// Client role: a packet with sequence id `seq` written after one with `prev`
    /// starts a new command (a file of LOAD DATA LOCAL wraps from 255 to 0 without one).
    fn starts_command(seq: u8, prev: Option<u8>, read_between: bool) -> bool {
        seq == 0 && (prev != Some(255) || read_between)
    }

    /// Writes one compressed packet holding a prefix of `plain` to `out`: the number of
    /// plain bytes it took (at least one, unless `plain` is empty).
    pub fn encode(&mut self, plain: &[u8], out: &mut BytesMut) -> usize {
        if plain.is_empty() {
            return 0;
        }
        let (end, new_command) = self.chunk(plain);
        if self.role == Role::Client {
            let mut last = self.last_written;
            let mut i = 0;
            while let Some((at, _)) = self.wscan.next(&plain[..end], i) {
                last = Some(plain[at]);
                i = at + 1;
            }
            if last != self.last_written || new_command {
                self.read_since_write = false;
            }
            self.last_written = last;
            if let Some(s) = last {
                self.plain_next = s.wrapping_add(1);
            }
        } else {
            let mut i = 0;
            while let Some((at, _)) = self.wscan.next(&plain[..end], i) {
                i = at + 1;
            }
        }
        let seq = if new_command { 0 } else { self.seq };
        encode(self.alg, seq, &plain[..end], out);
        self.seq = seq.wrapping_add(1);
        end
    }

    /// How much of `plain` the next compressed packet takes, and whether it starts a
    /// command (client role). Whole packets up to [`MAX_CHUNK`] bytes (some clients
    /// cannot read a packet header split across compressed packets), or one packet
    /// alone, split only where it is longer than a compressed packet can carry or not
    /// all there yet. Towards a server a command starts a compressed packet of its own.
    fn chunk(&self, plain: &[u8]) -> (usize, bool) {
        let most = plain.len().min(MAX_PAYLOAD);
        if !self.wscan.at_boundary() {
            // The rest of a packet split before.
            let rest = if self.wscan.have > 0 {
                most
            } else {
                self.wscan.left
            };
            return (rest.min(most), false);
        }
        let client = self.role == Role::Client;
        let (mut prev, mut read) = (self.last_written, self.read_since_write);
        let mut new_command = false;
        let mut p = 0;
        while let Some((len, seq)) = packet::header(&plain[p..]) {
            let starts = client && Self::starts_command(seq, prev, read);
            if starts && p > 0 {
                break;
            }
            new_command |= starts;
            let e = p + packet::HEADER_LEN + len;
            if p > 0 && (e > MAX_CHUNK || e > plain.len()) {
                break;
            }
            if e > most {
                // One packet, longer than one compressed packet or not all there.
                return (most, new_command);
            }
            (p, prev, read) = (e, Some(seq), false);
            if p >= MAX_CHUNK {
                break;
            }
        }
        // A header cut short at the start: take what there is.
        (if p == 0 { most } else { p }, new_command)
    }

    /// Decodes the compressed packet at the start of `buf` if all of it is there,
    /// appending its plain bytes to `out`: the bytes of `buf` it spanned.
    pub fn decode(
        &mut self,
        buf: &[u8],
        out: &mut BytesMut,
    ) -> Result<Option<usize>, CompressError> {
        if self.role == Role::Server
            && let Some(h) = header(buf)
            && h.seq != 0
            && h.seq != self.seq
        {
            return Err(CompressError::OutOfOrder {
                expected: self.seq,
                got: h.seq,
            });
        }
        let at = out.len();
        let Some(h) = decode(self.alg, buf, self.max, out)? else {
            return Ok(None);
        };
        self.seq = h.seq.wrapping_add(1);
        if self.role == Role::Client {
            self.read_since_write = true;
            let fresh = self.rscan.at_boundary() && h.seq == 1;
            let mut next = self.plain_next;
            let plain = &mut out[at..];
            let mut i = 0;
            while let Some((at, start)) = self.rscan.next(plain, i) {
                if fresh && start == Some(0) && plain[at] == 1 {
                    // The first packet of an answer to a new command.
                    next = 1;
                }
                plain[at] = next;
                next = next.wrapping_add(1);
                i = at + 1;
            }
            self.plain_next = next;
        }
        Ok(Some(h.frame_len()))
    }

    /// Server role: an ERR packet for a client whose compressed packet could not be
    /// read (`bad`: its header, if it had one), as one uncompressed compressed packet.
    pub fn encode_error(&mut self, e: &CompressError, bad: Option<Header>, out: &mut BytesMut) {
        let mut payload = Vec::new();
        crate::resp::encode_err_code(&mut payload, e.code(), e.to_string().as_bytes());
        let mut plain = BytesMut::new();
        let mut pseq = 1;
        packet::write_packet(&mut plain, &mut pseq, &payload);
        let seq = bad.map_or(self.seq, |h| h.seq.wrapping_add(1));
        put_header(out, plain.len(), seq, 0);
        out.put_slice(&plain);
        self.seq = seq.wrapping_add(1);
    }
}

#[cfg(test)]
#[path = "compress_tests.rs"]
mod tests;
