//! HandlerSocket test helpers: the corpus notation (`tests/hs/corpus.txt`), a blocking
//! line client that runs it request by request or pipelined, and readable escaping of
//! answers for failure messages.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long one answer may take before it counts as missing.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    Read,
    Write,
}

/// One request of the corpus.
#[derive(Clone, Debug)]
pub struct Request {
    /// 1-based line in the corpus file.
    pub line_no: usize,
    pub listener: Listener,
    /// Requests with the same number share one connection.
    pub conn: usize,
    /// The request text in the corpus notation, `$DB` not yet replaced.
    pub text: String,
}

impl Request {
    /// The bytes to send (without the final LF), with `$DB` replaced by `db`.
    pub fn bytes(&self, db: &str) -> Vec<u8> {
        if self.text == "@empty" {
            return Vec::new();
        }
        decode(&self.text.replace("$DB", db))
            .unwrap_or_else(|e| panic!("corpus line {}: {e}", self.line_no))
    }
}

/// Decodes the corpus notation: `\t`, `\0`, `\r`, `\\`, `\xNN`; other bytes as they are.
pub fn decode(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b't') => out.push(b'\t'),
            Some(b'0') => out.push(0),
            Some(b'r') => out.push(b'\r'),
            Some(b'\\') => out.push(b'\\'),
            Some(b'x') => {
                let hex = s
                    .get(i + 2..i + 4)
                    .ok_or_else(|| format!("short \\x escape in {s:?}"))?;
                let v = u8::from_str_radix(hex, 16)
                    .map_err(|_| format!("bad \\x escape {hex:?} in {s:?}"))?;
                out.push(v);
                i += 2;
            }
            other => {
                return Err(format!(
                    "unknown escape \\{:?} in {s:?}",
                    other.map(|&c| c as char)
                ));
            }
        }
        i += 2;
    }
    Ok(out)
}

/// Readable form of raw bytes: the corpus notation plus `\n` for LF.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        match c {
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            0 => s.push_str("\\0"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

/// Parses the corpus file.
pub fn parse_corpus(text: &str) -> Vec<Request> {
    let mut out = Vec::new();
    let mut listener = Listener::Read;
    let mut conn = 0;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        match line {
            "" => {}
            l if l.starts_with('#') => {}
            "@read" | "@write" => {
                listener = if line == "@read" {
                    Listener::Read
                } else {
                    Listener::Write
                };
                conn += 1;
            }
            "@reconnect" => conn += 1,
            "@empty" => out.push(Request {
                line_no,
                listener,
                conn,
                text: line.to_owned(),
            }),
            l if l.starts_with('@') => panic!("corpus line {line_no}: unknown directive {l:?}"),
            l => {
                if let Err(e) = decode(l) {
                    panic!("corpus line {line_no}: {e}");
                }
                out.push(Request {
                    line_no,
                    listener,
                    conn,
                    text: l.to_owned(),
                });
            }
        }
    }
    out
}

/// Where to send requests, and which database name replaces `$DB`.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub name: &'a str,
    pub db: &'a str,
    pub read: SocketAddr,
    pub write: SocketAddr,
    /// A line every connection sends first (`A 1 <secret>`), whose answer must be `0 1`.
    pub hello: Option<&'a str>,
}

impl Target<'_> {
    fn addr(&self, l: Listener) -> SocketAddr {
        match l {
            Listener::Read => self.read,
            Listener::Write => self.write,
        }
    }

    /// A connection to listener `l`, past the hello line if there is one.
    fn open(&self, l: Listener) -> std::io::Result<BufReader<TcpStream>> {
        let mut c = connect(self.addr(l))?;
        if let Some(hello) = &self.hello {
            c.get_mut().write_all(format!("{hello}\n").as_bytes())?;
            let answer = read_answer(&mut c)
                .map_err(|a| std::io::Error::other(String::from_utf8_lossy(&a).into_owned()))?;
            assert_eq!(answer, b"0\t1\n", "the hello line is accepted");
        }
        Ok(c)
    }
}

fn connect(a: SocketAddr) -> std::io::Result<BufReader<TcpStream>> {
    let s = TcpStream::connect(a)?;
    s.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    s.set_nodelay(true)?;
    Ok(BufReader::new(s))
}

/// Reads one answer line (with its LF); a failure becomes a `<...>` marker.
fn read_answer(r: &mut BufReader<TcpStream>) -> Result<Vec<u8>, Vec<u8>> {
    let mut line = Vec::new();
    match r.read_until(b'\n', &mut line) {
        Ok(_) if line.ends_with(b"\n") => Ok(line),
        Ok(_) => {
            line.extend_from_slice(b"<connection closed>");
            Err(line)
        }
        Err(e) => {
            line.extend_from_slice(format!("<read error: {e}>").as_bytes());
            Err(line)
        }
    }
}

/// Runs the requests one at a time (write one line, read one answer), a connection per
/// `conn` number. A connection that fails is replaced for the next request.
pub fn run_sequential(reqs: &[Request], t: Target) -> Vec<Vec<u8>> {
    let mut answers = Vec::with_capacity(reqs.len());
    let mut cur: Option<(usize, BufReader<TcpStream>)> = None;
    for req in reqs {
        if cur.as_ref().map(|c| c.0) != Some(req.conn) {
            cur = None;
        }
        if cur.is_none() {
            match t.open(req.listener) {
                Ok(c) => cur = Some((req.conn, c)),
                Err(e) => {
                    answers.push(format!("<connect error: {e}>").into_bytes());
                    continue;
                }
            }
        }
        let Some((_, conn)) = cur.as_mut() else {
            unreachable!()
        };
        let mut line = req.bytes(t.db);
        line.push(b'\n');
        if let Err(e) = conn.get_mut().write_all(&line) {
            answers.push(format!("<write error: {e}>").into_bytes());
            cur = None;
            continue;
        }
        match read_answer(conn) {
            Ok(a) => answers.push(a),
            Err(a) => {
                answers.push(a);
                cur = None;
            }
        }
    }
    answers
}

/// Runs each connection's requests pipelined: all its lines in one write (from a second
/// thread), then all answers read. The answers are in request order.
pub fn run_pipelined(reqs: &[Request], t: Target) -> Vec<Vec<u8>> {
    let mut answers = Vec::with_capacity(reqs.len());
    let mut start = 0;
    while start < reqs.len() {
        let conn = reqs[start].conn;
        let end = start + reqs[start..].iter().take_while(|r| r.conn == conn).count();
        let group = &reqs[start..end];
        start = end;
        let mut all = Vec::new();
        for r in group {
            all.extend_from_slice(&r.bytes(t.db));
            all.push(b'\n');
        }
        let mut c = match t.open(group[0].listener) {
            Ok(c) => c,
            Err(e) => {
                for _ in group {
                    answers.push(format!("<connect error: {e}>").into_bytes());
                }
                continue;
            }
        };
        let mut w = c.get_ref().try_clone().unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                let _ = w.write_all(&all);
            });
            let mut dead = false;
            for _ in group {
                if dead {
                    answers.push(b"<no answer: connection failed earlier>".to_vec());
                    continue;
                }
                match read_answer(&mut c) {
                    Ok(a) => answers.push(a),
                    Err(a) => {
                        answers.push(a);
                        dead = true;
                        let _ = c.get_ref().shutdown(std::net::Shutdown::Both);
                    }
                }
            }
        });
        // Nothing may follow the last answer: extra bytes are appended to it.
        let mut rest = c.buffer().to_vec();
        let _ = c
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(50)));
        let _ = c.get_mut().read_to_end(&mut rest);
        if !rest.is_empty()
            && let Some(last) = answers.last_mut()
        {
            last.extend_from_slice(format!("<extra bytes: {}>", escape(&rest)).as_bytes());
        }
    }
    answers
}

/// Compares two answer lists request by request; returns one readable report per
/// mismatch.
pub fn mismatches(
    reqs: &[Request],
    want_name: &str,
    want: &[Vec<u8>],
    got_name: &str,
    got: &[Vec<u8>],
) -> Vec<String> {
    let mut out = Vec::new();
    for (i, req) in reqs.iter().enumerate() {
        let (w, g) = (want.get(i), got.get(i));
        if w != g {
            let show = |a: Option<&Vec<u8>>| a.map_or("<missing>".to_owned(), |a| escape(a));
            out.push(format!(
                "corpus line {} ({:?}): {}\n  {want_name:>8}: {}\n  {got_name:>8}: {}",
                req.line_no,
                req.listener,
                req.text,
                show(w),
                show(g)
            ));
        }
    }
    if want.len() != got.len() {
        out.push(format!(
            "{want_name} gave {} answers, {got_name} gave {} (for {} requests)",
            want.len(),
            got.len(),
            reqs.len()
        ));
    }
    out
}

/// MariaDB with the reference plugin on free ports, with `schema` (`$DB` in it replaced)
/// loaded into each database of `dbs`.
pub fn plugin_server(schema: &str, dbs: &[&str]) -> sluice_testkit::MariaDbServer {
    let db = sluice_testkit::MariaDbServer::start_with(sluice_testkit::MariaDbOptions {
        handlersocket: true,
        ..sluice_testkit::MariaDbOptions::default()
    })
    .expect("start MariaDB with HandlerSocket");
    for name in dbs {
        db.create_database(name).unwrap();
        db.sql(&schema.replace("$DB", name))
            .unwrap_or_else(|e| panic!("schema for {name}: {e:#}"));
    }
    db
}

/// The plugin's listeners, serving database `db_name`.
pub fn plugin(db: &sluice_testkit::MariaDbServer, db_name: &'static str) -> Target<'static> {
    let (read, write) = db.handlersocket_ports().expect("plugin ports");
    Target {
        hello: None,
        name: "plugin",
        db: db_name,
        read: SocketAddr::from(([127, 0, 0, 1], read)),
        write: SocketAddr::from(([127, 0, 0, 1], write)),
    }
}

/// Sluice with listeners `hs_read` and `hs_write`, on its own runtime (the tests use
/// blocking sockets).
pub struct Sluice {
    rt: tokio::runtime::Runtime,
    handle: Option<sluice::server::Handle>,
}

impl Sluice {
    pub fn start(config_text: &str) -> Sluice {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.block_on(super::sluice(config_text));
        Sluice {
            rt,
            handle: Some(handle),
        }
    }

    /// Its listeners, serving database `db`.
    pub fn target(&self, db: &'static str) -> Target<'static> {
        let h = self.handle.as_ref().unwrap();
        Target {
            hello: None,
            name: "sluice",
            db,
            read: super::addr(h, "hs_read"),
            write: super::addr(h, "hs_write"),
        }
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown(Duration::from_secs(2)));
        }
    }
}

/// Answers that are not answers (connection trouble) mean the corpus is broken.
pub fn assert_all_answered(reqs: &[Request], answers: &[Vec<u8>], who: &str) {
    for (r, a) in reqs.iter().zip(answers) {
        assert!(
            a.ends_with(b"\n") && a.iter().filter(|&&b| b == b'\n').count() == 1,
            "{who} did not answer corpus line {} ({}): {}",
            r.line_no,
            r.text,
            escape(a)
        );
    }
}

/// A readable report of how two dumps of `table` (one line per row, in key order)
/// differ, or None when they are equal.
pub fn table_diff(
    table: &str,
    (an, a): (&str, &[String]),
    (bn, b): (&str, &[String]),
) -> Option<String> {
    if a == b {
        return None;
    }
    let mut msg = format!("table {table} differs after the corpus:");
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i), b.get(i));
        if x != y {
            msg.push_str(&format!(
                "\n  {an:>8}: {}\n  {bn:>8}: {}",
                x.map_or("<no row>", String::as_str),
                y.map_or("<no row>", String::as_str)
            ));
        }
    }
    Some(msg)
}

/// Sluice config text: server `srv` (`protocol`, `port`) alone in its cluster, and the
/// listeners `hs_read` and `hs_write` on it logging in as `user`/`pw` (plus `extra` lines).
pub fn listeners_config(protocol: &str, port: u16, user: &str, pw: &str, extra: &str) -> String {
    let listener = |name: &str, mode: &str| {
        format!(
            "[handlersocket.{name}]\naddress = \"127.0.0.1:0\"\ncluster = \"srv\"\n\
             mode = \"{mode}\"\nuser = \"{user}\"\npassword = \"{pw}\"\n{extra}\n"
        )
    };
    format!(
        "[servers.srv]\nprotocol = \"{protocol}\"\nhost = \"127.0.0.1\"\nport = {port}\n\n\
         [clusters.srv]\nservers = [\"srv\"]\n\n{}{}",
        listener("hs_read", "read-only"),
        listener("hs_write", "read-write")
    )
}
