//! A PostgreSQL server connection: the socket, what Sluice knows of its state (reported
//! parameters, statements prepared on it, SETs replayed on it) and the few exchanges
//! Sluice runs on it by itself (login, reset).

mod connect;
pub mod kv;
mod lookup;

pub use crate::backend::{Credentials, LoginError, LoginKey, Target};
pub use connect::{connect_stream, finish_startup, login, open_startup};

use crate::error::{Error, Result};
use crate::stream::{Stream, write_all_flush};
use bytes::{Buf, Bytes, BytesMut};
use sluice_wire_pg::{encode, frame, msg};
use std::collections::{BTreeMap, HashMap};
use tokio::io::AsyncReadExt;

/// Prepared statements on one connection, by pool-wide statement hash, least recently
/// used first out. A statement whose Parse is still in flight is usable only by the
/// batch (Sync) that sent it: if that batch fails, later batches must not rely on it.
#[derive(Debug, Default)]
pub struct StatementCache {
    entries: HashMap<u128, CacheEntry, sluice_sql::Prehashed>,
    clock: u64,
}

#[derive(Debug, Clone, Copy)]
struct CacheEntry {
    stamp: u64,
    /// The batch whose Parse created it, until the server confirms it.
    pending: Option<u64>,
}

impl StatementCache {
    /// Whether a Bind in `batch` can rely on the statement being prepared.
    pub fn usable(&mut self, hash: u128, batch: u64) -> bool {
        self.clock += 1;
        match self.entries.get_mut(&hash) {
            Some(e) if e.pending.is_none_or(|b| b == batch) => {
                e.stamp = self.clock;
                true
            }
            _ => false,
        }
    }

    /// Records a Parse sent in `batch`; returns the statement evicted to stay within
    /// `cap`, if any (never one of this batch).
    pub fn insert(&mut self, hash: u128, cap: usize, batch: u64) -> Option<u128> {
        self.clock += 1;
        self.entries.insert(
            hash,
            CacheEntry {
                stamp: self.clock,
                pending: Some(batch),
            },
        );
        if self.entries.len() <= cap.max(1) {
            return None;
        }
        let (&old, _) = self
            .entries
            .iter()
            .filter(|(h, e)| **h != hash && e.pending != Some(batch))
            .min_by_key(|(_, e)| e.stamp)?;
        self.entries.remove(&old);
        Some(old)
    }

    /// The server confirmed the Parse.
    pub fn confirm(&mut self, hash: u128) {
        if let Some(e) = self.entries.get_mut(&hash) {
            e.pending = None;
        }
    }

    pub fn remove(&mut self, hash: u128) {
        self.entries.remove(&hash);
    }

    /// The confirmed statements, for a shared connection (which keeps them by hash
    /// alone: every statement is confirmed there before a client relies on it, or
    /// forgotten when its prepare fails).
    pub fn take_confirmed(&mut self) -> crate::stmt_cache::StmtCache {
        let mut confirmed: Vec<(u64, u128)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.pending.is_none())
            .map(|(&h, e)| (e.stamp, h))
            .collect();
        // Least recently used first, so the order of use carries over.
        confirmed.sort_unstable();
        let mut out = crate::stmt_cache::StmtCache::default();
        for (_, h) in confirmed {
            out.insert(h, 0);
        }
        self.entries.clear();
        out
    }

    /// The statements a shared connection left prepared.
    pub fn set_confirmed(&mut self, stmts: &crate::stmt_cache::StmtCache) {
        self.entries.clear();
        for h in stmts.hashes() {
            self.clock += 1;
            let stamp = self.clock;
            self.entries.insert(
                h,
                CacheEntry {
                    stamp,
                    pending: None,
                },
            );
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Reported parameters a client may set at startup and Sluice sets per client.
pub const PER_CLIENT_PARAMS: [&str; 6] = [
    "application_name",
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "standard_conforming_strings",
];

/// A fingerprint of the per-client parameters in `params`: equal fingerprints mean
/// nothing to set when a client gets a connection.
pub fn params_fingerprint(params: &BTreeMap<String, String>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for name in PER_CLIENT_PARAMS {
        if let Some(v) = params.get(name) {
            h.update(v.as_bytes());
        }
        h.update(&[0]);
    }
    h.digest()
}

/// A fingerprint of the parameters in `params` that change what a statement means once
/// parsed (literals are converted at Parse: dates under DateStyle, timestamps under
/// TimeZone, strings under standard_conforming_strings and client_encoding): a
/// statement prepared for one client serves another only if both have the same.
pub fn parse_fingerprint(params: &BTreeMap<String, String>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for name in PER_CLIENT_PARAMS
        .iter()
        .filter(|n| **n != "application_name")
    {
        if let Some(v) = params.get(*name) {
            h.update(v.as_bytes());
        }
        h.update(&[0]);
    }
    h.digest()
}

/// Server connections' reported parameters, each set kept once.
pub static REPORTED: std::sync::LazyLock<crate::intern::Interner<BTreeMap<String, String>>> =
    std::sync::LazyLock::new(Default::default);

pub struct ServerConn {
    pub stream: Stream,
    /// Where this connection's queries are cancelled.
    pub key: std::sync::Arc<crate::cancel::ServerKey>,
    /// Fingerprint of `reported`'s per-client parameters, computed when needed.
    reported_fp: Option<u64>,
    /// Bytes read from the server not yet handled; they belong to this connection.
    pub rbuf: BytesMut,
    pub addr: std::sync::Arc<str>,
    pub pid: i32,
    pub secret: i32,
    /// Current values of the parameters the server reports (ParameterStatus): one
    /// copy for all the connections that report the same ([`REPORTED`]; about 2 KiB
    /// each, where session mode gives every client a connection), copied on a change.
    pub reported: std::sync::Arc<BTreeMap<String, String>>,
    /// Pool-wide prepared statements that exist on this connection.
    pub prepared: StatementCache,
    /// SET statements replayed on (or run by a client on) this connection, by parameter.
    pub applied_sets: crate::sets::Sets,
    pub stamps: crate::pool::Stamps,
    /// Last ReadyForQuery status.
    pub status: u8,
    pub max_message: usize,
    /// Its place in the server's connection budget.
    pub permit: crate::pool::budget::Permit,
}

impl ServerConn {
    pub fn set_reported(&mut self, name: &str, value: &str) {
        if self.reported.get(name).is_some_and(|v| v == value) {
            return;
        }
        std::sync::Arc::make_mut(&mut self.reported).insert(name.to_owned(), value.to_owned());
        self.reported_fp = None;
    }

    pub fn reported_fingerprint(&mut self) -> u64 {
        if let Some(f) = self.reported_fp {
            return f;
        }
        let f = params_fingerprint(&self.reported);
        self.reported_fp = Some(f);
        f
    }

    /// Reads one whole frame (tag, body) from the server.
    pub async fn read_frame(&mut self) -> Result<(u8, Bytes)> {
        read_frame(&mut self.stream, &mut self.rbuf, self.max_message).await
    }

    /// Runs simple queries Sluice needs for itself (resets) and reads to the last
    /// ReadyForQuery. Returns the first error's message, if any.
    pub async fn run(&mut self, queries: &[&str]) -> Result<Option<String>> {
        Ok(self.exchange(queries).await?.0)
    }

    /// Runs one query of Sluice's own and returns the first column of its first row
    /// (None on an error, no row or NULL).
    pub async fn value(&mut self, query: &str) -> Result<Option<String>> {
        let (error, value) = self.exchange(&[query]).await?;
        Ok(value.filter(|_| error.is_none()))
    }

    /// Runs queries: the first error's message and the first row's first column.
    async fn exchange(&mut self, queries: &[&str]) -> Result<(Option<String>, Option<String>)> {
        let mut out = BytesMut::new();
        for q in queries {
            encode::query(&mut out, q.as_bytes());
        }
        write_all_flush(&mut self.stream, &out).await?;
        let (mut first_error, mut first_value) = (None, None);
        let mut remaining = queries.len();
        while remaining > 0 {
            let (tag, body) = self.read_frame().await?;
            match tag {
                msg::be::READY_FOR_QUERY => {
                    self.status = msg::ready_status(&body).unwrap_or(b'E');
                    remaining -= 1;
                }
                msg::be::PARAMETER_STATUS => {
                    if let Some((k, v)) = msg::parameter_status(&body) {
                        let (k, v) = (k.to_owned(), v.to_owned());
                        self.set_reported(&k, &v);
                    }
                }
                msg::be::ERROR_RESPONSE if first_error.is_none() => {
                    first_error = Some(msg::error_field(&body, b'M').unwrap_or("error").to_owned());
                }
                msg::be::DATA_ROW if first_value.is_none() => {
                    first_value = first_column(&body);
                }
                _ => {}
            }
        }
        Ok((first_error, first_value))
    }

    /// How many connections the server lets non-superusers open (its
    /// `max_connections` less the reserved ones), for the server's budget.
    pub async fn server_limit(&mut self) -> Option<usize> {
        const Q: &str = "select current_setting('max_connections')::int \
            - current_setting('superuser_reserved_connections')::int \
            - coalesce(current_setting('reserved_connections', true)::int, 0)";
        self.value(Q).await.ok().flatten()?.parse().ok()
    }

    /// Brings the connection back to a clean state with `reset_query`.
    pub async fn reset(&mut self, reset_query: &str) -> Result<()> {
        let mut queries = Vec::with_capacity(2);
        if self.status != b'I' {
            queries.push("ROLLBACK");
        }
        queries.push(reset_query);
        // The statement cache is cleared below: make sure the server's is too.
        if !reset_query.trim().eq_ignore_ascii_case("DISCARD ALL") {
            queries.push("DEALLOCATE ALL");
        }
        if let Some(e) = self.run(&queries).await? {
            return Err(Error::new(
                crate::error::Kind::Desync,
                crate::error::Side::Server,
                e,
            ));
        }
        self.prepared.clear();
        self.applied_sets.clear();
        Ok(())
    }

    pub fn close(self) {
        let mut out = BytesMut::new();
        encode::terminate(&mut out);
        crate::stream::close_after_eof(self.stream, out.to_vec(), self.permit);
    }
}

/// How a pool of configured users opens PostgreSQL connections by itself.
pub struct Opener {
    pub target: Target,
    pub params: Vec<(String, String)>,
    pub creds: Credentials,
}

impl crate::pool::Duplex for ServerConn {
    fn duplex(&mut self) -> (&mut Stream, &mut BytesMut) {
        (&mut self.stream, &mut self.rbuf)
    }
    fn unread(&self) -> usize {
        self.rbuf.len()
    }
}

impl crate::pool::PoolConn for ServerConn {
    fn cancel_key(&self) -> Option<&std::sync::Arc<crate::cancel::ServerKey>> {
        Some(&self.key)
    }

    type Opener = Opener;
    type Welcome = BTreeMap<String, String>;

    async fn open(op: &Opener) -> std::result::Result<Self, LoginError> {
        login(&op.target, &op.params, &op.creds).await
    }
    fn stamps(&self) -> crate::pool::Stamps {
        self.stamps
    }
    fn stamps_mut(&mut self) -> &mut crate::pool::Stamps {
        &mut self.stamps
    }
    fn is_idle(&self) -> bool {
        self.status == b'I'
    }
    fn still_open(&mut self) -> bool {
        self.stream.is_quiet()
    }
    async fn reset(&mut self, reset_query: &str) -> Result<()> {
        ServerConn::reset(self, reset_query).await
    }
    fn close(self) {
        ServerConn::close(self)
    }
}

/// Splits a PostgreSQL server's answers to simple queries: each ends with ReadyForQuery.
#[derive(Default)]
pub struct Splitter {
    /// The answer so far reported a changed parameter (ParameterStatus).
    param_changed: bool,
    /// What the answer so far says the statement did.
    outcome: crate::stats::Outcome,
}

impl crate::mux::Splitter for Splitter {
    fn expect(&mut self, _first: u8) {}

    fn outcome(&mut self) -> crate::stats::Outcome {
        std::mem::take(&mut self.outcome)
    }

    fn added_reply(&self, unit: &[u8]) -> Option<bool> {
        match unit.first() {
            // CloseComplete, ParseComplete.
            Some(b'3' | b'1') => Some(true),
            // NoticeResponse, ParameterStatus, NotificationResponse.
            Some(b'N' | b'S' | b'A') => None,
            _ => Some(false),
        }
    }

    fn farewell(&self, unit: &[u8]) -> Option<Error> {
        let body = unit.get(5..).unwrap_or_default();
        if unit.first() != Some(&b'E') || !msg::shutting_down(body) {
            return None;
        }
        let code = match msg::error_field(body, b'C') {
            Some("57P02") => "57P02",
            Some("57P03") => "57P03",
            _ => "57P01",
        };
        let message = msg::error_field(body, b'M').unwrap_or("the server closed the connection");
        Some(Error::server_gone(message).with_sqlstate(code))
    }

    fn stale(&self, unit: &[u8]) -> bool {
        // "cached plan must not change result type"
        unit.first() == Some(&b'E')
            && sluice_wire_pg::msg::error_field(unit.get(5..).unwrap_or_default(), b'C')
                == Some("0A000")
    }

    fn unit(&mut self, buf: &[u8]) -> Result<Option<(usize, Option<crate::mux::Ended>)>> {
        let Some(len) = buf.get(1..5) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if len < 4 {
            return Err(Error::new(
                crate::error::Kind::Desync,
                crate::error::Side::Server,
                "malformed message on a shared connection",
            ));
        }
        if buf.len() < 1 + len {
            return Ok(None);
        }
        // COPY on a shared connection would wait for data no client sends.
        if matches!(buf[0], b'G' | b'W' | b'H') {
            return Err(Error::new(
                crate::error::Kind::Desync,
                crate::error::Side::Server,
                "COPY on a shared connection",
            ));
        }
        use crate::mux::Ended;
        match buf[0] {
            msg::be::PARAMETER_STATUS => self.param_changed = true,
            msg::be::DATA_ROW => self.outcome.rows += 1,
            msg::be::ERROR_RESPONSE => self.outcome.error = true,
            msg::be::COMMAND_COMPLETE => {
                let tag = msg::command_tag(&buf[5..1 + len]).unwrap_or_default();
                let o = crate::stats::Outcome::of_tag(tag);
                self.outcome.affected += o.affected;
            }
            _ => {}
        }
        if buf[0] != msg::be::READY_FOR_QUERY {
            return Ok(Some((1 + len, None)));
        }
        let end = if buf.get(5) != Some(&b'I') {
            Ended::InTransaction
        } else if std::mem::take(&mut self.param_changed) {
            Ended::StateChanged
        } else {
            Ended::Clean
        };
        Ok(Some((1 + len, Some(end))))
    }
}

impl crate::mux::MuxConn for ServerConn {
    type Splitter = Splitter;

    fn splitter(&self) -> Splitter {
        Splitter::default()
    }

    fn io(&mut self) -> (&mut Stream, &mut BytesMut) {
        (&mut self.stream, &mut self.rbuf)
    }

    fn thread(&self) -> u32 {
        self.pid as u32
    }

    fn fits(&mut self, fp: u64) -> bool {
        self.status == b'I' && self.applied_sets.is_empty() && self.reported_fingerprint() == fp
    }

    fn take_stmts(&mut self) -> crate::stmt_cache::StmtCache {
        self.prepared.take_confirmed()
    }

    fn put_stmts(&mut self, stmts: crate::stmt_cache::StmtCache) {
        self.prepared.set_confirmed(&stmts);
    }
}

/// Reads one whole tagged frame from a server, buffering in `buf`.
pub async fn read_frame(
    stream: &mut Stream,
    buf: &mut BytesMut,
    max: usize,
) -> Result<(u8, Bytes)> {
    read_whole_frame(stream, buf, max, crate::error::Side::Server).await
}

/// The first column of a DataRow, as text (None for NULL or a malformed row).
fn first_column(row: &[u8]) -> Option<String> {
    let n = i16::from_be_bytes(row.get(..2)?.try_into().ok()?);
    let len = i32::from_be_bytes(row.get(2..6)?.try_into().ok()?);
    if n < 1 || len < 0 {
        return None;
    }
    let v = row.get(6..6 + len as usize)?;
    Some(String::from_utf8_lossy(v).into_owned())
}

/// Reads one whole tagged frame from either side, buffering in `buf`.
pub async fn read_whole_frame(
    stream: &mut Stream,
    buf: &mut BytesMut,
    max: usize,
    side: crate::error::Side,
) -> Result<(u8, Bytes)> {
    let (kind, gone) = match side {
        crate::error::Side::Server => (crate::error::Kind::Desync, "server closed the connection"),
        _ => (crate::error::Kind::Protocol, "client closed the connection"),
    };
    loop {
        match frame::complete_frame(buf, max) {
            Ok(Some(h)) => {
                let mut f = buf.split_to(h.frame_len);
                f.advance(5);
                return Ok((h.tag, f.freeze()));
            }
            Ok(None) => {}
            Err(e) => return Err(Error::new(kind, side, e.to_string())),
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(8192);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(Error::new(crate::error::Kind::ServerGone, side, gone));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StatementCache;

    #[test]
    fn pending_statements_belong_to_their_batch() {
        let mut c = StatementCache::default();
        assert_eq!(c.insert(1, 2, 7), None);
        assert!(c.usable(1, 7));
        assert!(
            !c.usable(1, 8),
            "a later batch does not rely on an unconfirmed Parse"
        );
        c.confirm(1);
        assert!(c.usable(1, 8));
        assert_eq!(c.insert(2, 2, 8), None);
        // Full: the least recently used statement not of this batch goes.
        assert_eq!(c.insert(3, 2, 8), Some(1));
        assert_eq!(c.len(), 2);
    }
}
