//! A client's CancelRequest (or Sluice's own, when `query_timeout` passes) sent on to
//! the server connection the client uses now.

use crate::shared::Shared;
use crate::stream::{Stream, write_all_flush};
use bytes::BytesMut;
use sluice_wire_pg::encode;
use tokio::net::TcpStream;

/// Sends a client's CancelRequest on to the server connection it is using now, and
/// returns once the server has acted on it (closed the cancel connection), so the
/// client's cancel connection, closed after this, ends when it would directly.
pub async fn cancel(shared: &Shared, pid: i32, secret: i32) {
    let Some(key) = shared.cancels.lookup(pid, secret) else {
        tracing::debug!(pid, "cancel request for an unknown or idle client");
        return;
    };
    let mut out = BytesMut::new();
    encode::cancel_request(&mut out, key.pid, key.secret);
    let connect = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        TcpStream::connect(&*key.addr),
    );
    match connect
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
    {
        Ok(tcp) => {
            // From here until the server has acted on the request, the connection runs
            // nothing new (see cancel.rs). In transaction mode it may have gone to
            // another client while connecting: cancel only if the client still uses it.
            let _in_flight = key.cancelling();
            if shared.cancels.lookup(pid, secret).as_ref() != Some(&key) {
                return;
            }
            let mut s = Stream::Plain(tcp);
            if let Err(e) = write_all_flush(&mut s, &out).await {
                tracing::debug!(error = %e, "sending cancel failed");
            }
            // The server closes the connection once it has signalled the backend.
            let mut b = [0u8; 1];
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tokio::io::AsyncReadExt::read(&mut s, &mut b),
            )
            .await;
        }
        Err(e) => tracing::debug!(error = %e, addr = %key.addr, "cancel: cannot reach server"),
    }
}
