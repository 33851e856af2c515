//! `sluice-bench relay`: a bare TCP relay, the floor of what any proxy's hop costs on a
//! machine. It reads nothing of the protocol: each client's bytes go to a server
//! connection of its own and back, copied by tokio (`copy_bidirectional`) on one
//! thread, as Sluice and PgBouncer run by default. A benchmark file names it as a
//! process and target beside them: what it keeps of a direct connection's throughput
//! is what the extra hop (a read and a write each way, the wake-ups) leaves to a proxy
//! that does nothing else.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

/// Relays every connection accepted on `listen` to `to` until interrupted.
pub fn serve(listen: SocketAddr, to: SocketAddr) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the runtime")?;
    rt.block_on(async move {
        let l = TcpListener::bind(listen)
            .await
            .with_context(|| format!("listen on {listen}"))?;
        // Until Ctrl-C (SIGINT), so that a profiler around it sees the end.
        tokio::select! {
            () = accept(l, to) => {}
            r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C")?,
        }
        Ok(())
    })
}

/// Relays every connection accepted on `l` to `to`.
async fn accept(l: TcpListener, to: SocketAddr) {
    loop {
        let (client, _) = match l.accept().await {
            Ok(c) => c,
            // Out of descriptors and the like: the next accept may do.
            Err(e) => {
                eprintln!("sluice-bench relay: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            if let Err(e) = relay(client, to).await {
                eprintln!("sluice-bench relay: {e:#}");
            }
        });
    }
}

async fn relay(mut client: TcpStream, to: SocketAddr) -> Result<()> {
    let mut server = TcpStream::connect(to)
        .await
        .with_context(|| format!("connect to {to}"))?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    // A side that closes ends the relay; errors of a closing peer are not news.
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_go_to_the_server_and_back_and_a_close_ends_the_relay() {
        // A server that answers each read with the bytes read, upper-cased.
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = server.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut buf = [0u8; 64];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n].to_ascii_uppercase()).await.unwrap();
            }
        });
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        tokio::spawn(accept(l, to));
        let mut c = TcpStream::connect(at).await.unwrap();
        for word in [&b"select"[..], b"one"] {
            c.write_all(word).await.unwrap();
            let mut got = vec![0u8; word.len()];
            c.read_exact(&mut got).await.unwrap();
            assert_eq!(got, word.to_ascii_uppercase());
        }
        c.shutdown().await.unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
}
