//! `kv-lookup`: random primary-key lookups over the HandlerSocket protocol (the
//! reference plugin or a Sluice `[handlersocket.NAME]` listener). Each connection opens
//! index 1 (`P\t1\t<db>\t<table>\t<index>\t<columns>`), writes `depth` lookups
//! (`1\t=\t1\t<key>`), and from then on sends one more lookup for each answer it reads,
//! so that `depth` requests stay in flight; the answers one read brings are followed by
//! one write of as many new lookups. Every answer must start with `0\t`; an answer with
//! no row (`0\t<n>`) is a miss.

use super::{Keys, Plan, Window, drive, open_all};
use crate::stats::Stats;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::VecDeque;
use std::io::Write as _;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout_at;

/// Where and what to look up.
#[derive(Debug, Clone)]
pub struct KvTarget {
    /// host:port of the HandlerSocket listener.
    pub addr: String,
    pub db: String,
    pub table: String,
    /// Index name; PRIMARY for the primary key.
    pub index: String,
    /// Comma-separated columns the answers carry.
    pub columns: String,
    /// Requests kept in flight per connection (1: one at a time).
    pub depth: usize,
}

/// How long opening a connection (connect and the P request) may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads go into a buffer of this size (grown for longer lines).
const READ_BUF: usize = 64 * 1024;

pub async fn run(plan: &Plan, t: &KvTarget) -> Result<(Stats, Duration)> {
    if t.depth == 0 {
        bail!("--depth must be at least 1");
    }
    let open_line = open_index_line(t)?;
    let conns = open_all(plan, |_| {
        let addr = t.addr.clone();
        let line = open_line.clone();
        async move {
            tokio::time::timeout(OPEN_TIMEOUT, open(addr, line))
                .await
                .map_err(|_| anyhow!("opening the index took longer than {OPEN_TIMEOUT:?}"))?
        }
    })
    .await?;
    let depth = t.depth;
    drive(plan, conns, |conn, i, window| {
        let keys = Keys::new(plan, i);
        async move {
            let mut stats = Stats::new();
            let mut conn = conn;
            if let Err(e) = lookups(&mut conn, keys, depth, window, &mut stats).await {
                stats.record_errors(1, || format!("connection {i}: {e:#}"));
            }
            stats
        }
    })
    .await
}

/// The P request; the names must not need HandlerSocket escaping.
fn open_index_line(t: &KvTarget) -> Result<Vec<u8>> {
    for (what, v) in [
        ("database", &t.db),
        ("table", &t.table),
        ("index", &t.index),
        ("columns", &t.columns),
    ] {
        if v.is_empty() || v.bytes().any(|b| b < 0x10) {
            bail!("{what} {v:?} is empty or has a tab, newline or control byte");
        }
    }
    Ok(format!("P\t1\t{}\t{}\t{}\t{}\n", t.db, t.table, t.index, t.columns).into_bytes())
}

/// Connects and opens index 1.
async fn open(addr: String, line: Vec<u8>) -> Result<TcpStream> {
    let mut s = TcpStream::connect(&addr)
        .await
        .with_context(|| format!("connect to {addr}"))?;
    s.set_nodelay(true).context("TCP_NODELAY")?;
    s.write_all(&line)
        .await
        .context("send the open-index request")?;
    let mut buf = Vec::with_capacity(256);
    loop {
        if let Some(nl) = memchr::memchr(b'\n', &buf) {
            let answer = &buf[..nl];
            if answer != b"0\t1" {
                bail!(
                    "opening the index answered {:?}",
                    String::from_utf8_lossy(answer)
                );
            }
            if nl + 1 != buf.len() {
                bail!("unexpected bytes after the open-index answer");
            }
            return Ok(s);
        }
        if buf.len() > 64 * 1024 {
            bail!("open-index answer without a line end");
        }
        let n = s
            .read_buf(&mut buf)
            .await
            .context("read the open-index answer")?;
        if n == 0 {
            bail!("the server closed the connection after the open-index request");
        }
    }
}

/// Appends a lookup of `key` on index 1.
fn push_lookup(out: &mut Vec<u8>, key: u64) {
    // Writing into a Vec cannot fail.
    let _ = writeln!(out, "1\t=\t1\t{key}");
}

/// One connection's closed loop with `depth` lookups in flight. Returns when the window
/// has closed and every request sent has been answered; Err when the connection broke,
/// an answer came without a request, or the server went silent past the deadline.
async fn lookups(
    s: &mut TcpStream,
    mut keys: Keys,
    depth: usize,
    w: Window,
    stats: &mut Stats,
) -> Result<()> {
    let mut out: Vec<u8> = Vec::with_capacity(depth * 24);
    let mut sent: VecDeque<Instant> = VecDeque::with_capacity(depth);
    let now = Instant::now();
    for _ in 0..depth {
        push_lookup(&mut out, keys.draw());
        sent.push_back(now);
    }
    s.write_all(&out).await.context("send lookups")?;
    let mut buf = vec![0u8; READ_BUF];
    let (mut pos, mut filled) = (0usize, 0usize);
    while !sent.is_empty() {
        if filled == buf.len() {
            if pos > 0 {
                buf.copy_within(pos..filled, 0);
                filled -= pos;
                pos = 0;
            } else {
                // One answer longer than the buffer.
                buf.resize(buf.len() * 2, 0);
            }
        }
        let n = timeout_at(w.deadline(), s.read(&mut buf[filled..]))
            .await
            .map_err(|_| anyhow!("no answer within 10 s after the end of the run"))?
            .context("read answers")?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        filled += n;
        let now = Instant::now();
        let (counts, open) = (w.counts(now), w.open(now));
        out.clear();
        while let Some(nl) = memchr::memchr(b'\n', &buf[pos..filled]) {
            let line = &buf[pos..pos + nl];
            pos += nl + 1;
            let t0 = sent
                .pop_front()
                .ok_or_else(|| anyhow!("an answer came without a request"))?;
            stats.answer();
            if let Some(rest) = line.strip_prefix(b"0\t") {
                if counts {
                    // `0\t<numcolumns>` alone: no row for that key.
                    if memchr::memchr(b'\t', rest).is_none() {
                        stats.record_miss(now - t0);
                    } else {
                        stats.record(now - t0);
                    }
                }
            } else {
                stats.record_errors(1, || {
                    format!("error answer {:?}", String::from_utf8_lossy(line))
                });
            }
            if open {
                push_lookup(&mut out, keys.draw());
                sent.push_back(now);
            }
        }
        if pos == filled {
            pos = 0;
            filled = 0;
        }
        if !out.is_empty() {
            s.write_all(&out).await.context("send lookups")?;
        }
    }
    Ok(())
}
