//! A line client for HandlerSocket tests on tokio: requests sent in one write, one
//! answer line read per request.
#![allow(dead_code)]

use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Sends `lines` in one write and reads one answer per line.
pub async fn ask(c: &mut BufReader<TcpStream>, lines: &[String]) -> Vec<String> {
    ask_bytes(c, lines).await
}

/// [`ask`] for lines that need not be UTF-8.
pub async fn ask_bytes<L: AsRef<[u8]>>(c: &mut BufReader<TcpStream>, lines: &[L]) -> Vec<String> {
    let mut text = Vec::new();
    for l in lines {
        text.extend_from_slice(l.as_ref());
        text.push(b'\n');
    }
    c.get_mut().write_all(&text).await.unwrap();
    let mut out = Vec::new();
    for _ in lines {
        let mut l = String::new();
        c.read_line(&mut l).await.unwrap();
        assert!(l.ends_with('\n'), "connection closed: {out:?}");
        out.push(l.trim_end_matches('\n').to_string());
    }
    out
}

pub async fn client(a: SocketAddr) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(a).await.unwrap())
}
