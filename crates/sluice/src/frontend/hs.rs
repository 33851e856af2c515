//! The client side of HandlerSocket: reads request lines, answers `P` (open index) and
//! `A` (auth) itself, checks every request on an open index, and hands the checked ones
//! to the listener's key-value executor (`kv`) as one job per read, so pipelined
//! requests travel together and keep their order. Answers go back one line per request,
//! in request order. An idle client holds no read buffer.

use crate::kv::Kv;
use crate::kv::request::{Req, check};
use crate::kv::table::OpenIndex;
use crate::shared::{ClientSlot, Shared};
use crate::stream::Stream;
use bytes::{Buf, BytesMut};
use sluice_config::{HsListener, HsMode};
use sluice_wire_hs::request::{Request, Slots, parse};
use sluice_wire_hs::{error as error_line, line, line_end, unescape};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a HandlerSocket listener's clients share.
pub struct HsCtx {
    pub cfg: HsListener,
    /// TLS from the first byte, when the listener has a certificate.
    pub tls: Option<crate::stream::Acceptor>,
    pub kv: Arc<Kv>,
    pub clients: AtomicUsize,
}

/// Bytes read at a time.
const READ_SIZE: usize = 4096;
/// How long a client has for its TLS handshake.
const TLS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A client's open indexes and authorisation.
struct Conn {
    slots: Vec<Option<Arc<OpenIndex>>>,
    authed: bool,
}

impl Slots for Conn {
    fn count(&self) -> usize {
        self.slots.len()
    }
    fn filter_columns(&self, id: u32) -> usize {
        self.slots
            .get(id as usize)
            .and_then(Option::as_ref)
            .map_or(0, |o| o.fcolumns.len())
    }
}

/// An answer in the making: written, or the n-th request of the job.
enum Part {
    Ready(Vec<u8>),
    Job(usize),
}

fn short(code: u32, message: &str) -> Part {
    let mut out = Vec::new();
    error_line(&mut out, code, Some(message));
    Part::Ready(out)
}

fn ok() -> Part {
    let mut out = Vec::new();
    sluice_wire_hs::Answer::start(&mut out, 0, 1).end();
    Part::Ready(out)
}

/// Serves one client until it leaves, sends `/`, or Sluice shuts down.
pub async fn serve(shared: Arc<Shared>, ctx: Arc<HsCtx>, tcp: TcpStream, slot: Option<ClientSlot>) {
    let over = ctx.clients.fetch_add(1, Ordering::AcqRel) >= ctx.cfg.max_client_connections;
    let _count = Counted(&ctx.clients);
    if slot.is_none() || over {
        tracing::warn!(listener = %ctx.cfg.name, "too many clients; connection closed");
        return;
    }
    let mut conn = Conn {
        slots: Vec::new(),
        authed: ctx.cfg.secret.is_none(),
    };
    let mut stream = match &ctx.tls {
        None => Stream::Plain(tcp),
        Some(acceptor) => match tokio::time::timeout(TLS_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(s)) => Stream::TlsServer(Box::new(s)),
            _ => return,
        },
    };
    let mut buf = BytesMut::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        let read = tokio::select! {
            r = read_some(&mut stream, &mut buf) => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        if !matches!(read, Ok(n) if n > 0) {
            break;
        }
        let (out, consumed, close) = handle(&ctx, &mut conn, &buf).await;
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            break;
        }
        if close {
            break;
        }
        buf.advance(consumed);
        if buf.is_empty() {
            buf = BytesMut::new();
        }
    }
}

/// Reads what the socket has. A plain socket is waited on without a buffer, so an idle
/// client holds none; TLS keeps its buffer while it waits.
async fn read_some(stream: &mut Stream, buf: &mut BytesMut) -> std::io::Result<usize> {
    let reserve = |buf: &mut BytesMut| {
        if buf.capacity() - buf.len() < READ_SIZE {
            buf.reserve(READ_SIZE);
        }
    };
    match stream {
        Stream::Plain(tcp) => loop {
            tcp.readable().await?;
            reserve(buf);
            match crate::stream::read_ready(tcp, buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return r,
            }
        },
        other => {
            reserve(buf);
            other.read_buf(buf).await
        }
    }
}

struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Handles every complete line of `buf`: (answers, bytes used, close the connection).
async fn handle(ctx: &HsCtx, conn: &mut Conn, buf: &[u8]) -> (Vec<u8>, usize, bool) {
    let mut parts = Vec::new();
    let mut reqs: Vec<Req> = Vec::new();
    let mut at = 0;
    let mut close = false;
    loop {
        let end = match line_end(&buf[at..], ctx.cfg.max_line) {
            Ok(Some(end)) => end,
            Ok(None) => break,
            Err(_) => {
                parts.push(short(2, "toolong"));
                close = true;
                break;
            }
        };
        let l = line(&buf[at..], end);
        at += end + 1;
        if l.first() == Some(&b'/') {
            close = true;
            break;
        }
        match request(ctx, conn, l).await {
            Ok(req) => {
                parts.push(Part::Job(reqs.len()));
                reqs.push(req);
            }
            Err(part) => parts.push(part),
        }
    }
    let mut answers = if reqs.is_empty() {
        Vec::new()
    } else {
        ctx.kv.run(reqs).await
    };
    let mut out = Vec::new();
    for p in parts {
        match p {
            Part::Ready(a) => out.extend_from_slice(&a),
            Part::Job(i) => out.append(&mut answers[i]),
        }
    }
    (out, at, close)
}

/// One line: a request for the executor, or an answer made here.
async fn request(ctx: &HsCtx, conn: &mut Conn, l: &[u8]) -> Result<Req, Part> {
    let first = l.split(|&b| b == b'\t').next().unwrap_or_default();
    let guarded = first == b"P" || first.first().is_some_and(u8::is_ascii_digit);
    if guarded && !conn.authed {
        return Err(short(3, "unauth"));
    }
    let parsed = parse(l, conn).map_err(|m| short(2, m))?;
    match parsed {
        Request::Unknown => Err(short(2, "cmd")),
        Request::Auth { kind, key } => {
            if kind != b"1" {
                return Err(short(3, "authtype"));
            }
            let secret = ctx.cfg.secret.as_deref().unwrap_or_default().as_bytes();
            conn.authed = key_matches(secret, key);
            if conn.authed {
                Err(ok())
            } else {
                conn.authed = ctx.cfg.secret.is_none();
                Err(short(3, "unauth"))
            }
        }
        Request::Open(o) => {
            let id = o.id as usize;
            if id >= ctx.cfg.max_open_indexes {
                return Err(short(2, "stmtnum"));
            }
            let name = |t: &[u8]| {
                let t = t.split(|&b| b == 0).next().unwrap_or_default();
                String::from_utf8_lossy(t).into_owned()
            };
            if !granted(&ctx.cfg, &o, &name) {
                return Err(short(2, "denied"));
            }
            let table = match ctx.kv.table(&name(o.db), &name(o.table)).await {
                Ok(Some(t)) => t,
                Ok(None) => return Err(short(1, "open_table")),
                Err(e) => {
                    tracing::warn!(listener = %ctx.cfg.name, error = %e, "cannot read a table's catalog");
                    return Err(short(1, "open_table"));
                }
            };
            let open =
                OpenIndex::open(table, o.index, o.columns, o.fcolumns).map_err(|m| short(2, m))?;
            if conn.slots.len() <= id {
                conn.slots.resize(id + 1, None);
            }
            conn.slots[id] = Some(Arc::new(open));
            Err(ok())
        }
        Request::Exec(e) => {
            let index = conn
                .slots
                .get(e.id as usize)
                .and_then(Option::as_ref)
                .cloned();
            check(e, index.as_ref(), ctx.cfg.mode == HsMode::ReadWrite).map_err(|m| short(2, m))
        }
    }
}

/// The reference's comparison of an `A` key with the secret: the lengths of the secret
/// and of the raw (escaped) key must match, and the key, unescaped in place, must read
/// as the secret.
fn key_matches(secret: &[u8], raw: &[u8]) -> bool {
    if secret.len() != raw.len() {
        return false;
    }
    let plain = unescape(raw);
    let mut seen = plain.to_vec();
    seen.extend_from_slice(&raw[plain.len()..]);
    subtle::ConstantTimeEq::ct_eq(&seen[..], secret).into()
}

/// Whether the listener's `indexes` let a client open what `o` names (with every
/// column it asks for, filter columns included).
fn granted(
    cfg: &HsListener,
    o: &sluice_wire_hs::request::Open<'_>,
    name: &dyn Fn(&[u8]) -> String,
) -> bool {
    let Some(grants) = &cfg.indexes else {
        return true;
    };
    let (db, table, index) = (name(o.db), name(o.table), name(o.index));
    let columns: Vec<String> = [o.columns, o.fcolumns]
        .iter()
        .flat_map(|c| c.split(|&b| b == b','))
        .filter(|c| !c.is_empty())
        .map(name)
        .collect();
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    grants
        .iter()
        .any(|g| g.allows(&db, &table, &index, &columns))
}

#[cfg(test)]
mod tests {
    use super::key_matches;

    #[test]
    fn keys_compare_like_the_reference() {
        assert!(key_matches(b"s3cret", b"s3cret"));
        assert!(!key_matches(b"s3cret", b"s3cre"));
        assert!(key_matches(b"", b""));
        // "\x01\x41b" unescapes to "\x01b" in place; the buffer then reads "\x01b" + "b".
        assert!(key_matches(b"\x01bb", b"\x01\x41b"));
    }
}
