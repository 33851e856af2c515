//! Busy polling for a lone client (`busy_poll_us`): while only one client is running
//! statements, its session watches the socket it waits on for a few microseconds
//! before going to sleep, so that the answer (or the client's next statement) is
//! picked up without the proxy being woken by the kernel: on a machine whose cores are
//! shared by the client, the server and the proxy, each such wake-up costs about as
//! much as the server's work on a point select. With other clients active, nobody
//! spins: the core belongs to them.

use crate::stats::counters::{BUSY_POLL_HITS, BUSY_POLL_MISSES};
use crate::stream::ReadInto;
use std::io::Read;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// The client that sent a statement last and when (`id << 32 | time in 64 µs units`).
static LAST: AtomicU64 = AtomicU64::new(0);

/// The time of the last statement of another client than the one that sent the
/// statements since (set when the client changes; 64 µs units).
static OTHER: AtomicU32 = AtomicU32::new(0);

/// A client is alone when no other one sent a statement within this.
const ALONE_NS: u64 = 2_000_000;

/// Time since start in 64 µs units (wraps; only differences are used), from 2^16
/// (4 s) on: the records' initial zeros are long ago.
fn ticks() -> u32 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    ((start.elapsed().as_nanos() >> 16) as u32).wrapping_add(1 << 16)
}

/// Notes a statement from client `id`; whether it is the only client that sent one
/// lately (it may spin while waiting for its answer and its next statement): no
/// statement of another client came in the last 2 ms.
pub fn alone(id: u32) -> bool {
    let now = ticks();
    let last = LAST.swap((u64::from(id) << 32) | u64::from(now), Ordering::Relaxed);
    let at = if (last >> 32) as u32 != id {
        // Another client sent the statement before this one.
        OTHER.store(last as u32, Ordering::Relaxed);
        last as u32
    } else {
        OTHER.load(Ordering::Relaxed)
    };
    u64::from(now.wrapping_sub(at)) << 16 > ALONE_NS
}

/// `busy_poll_us`, process-wide (set at start and by a reload).
static BUDGET_US: AtomicU64 = AtomicU64::new(0);

/// Sets `busy_poll_us`.
pub fn set(us: u64) {
    BUDGET_US.store(us, Ordering::Relaxed);
}

/// How long to spin (None: never).
pub fn budget() -> Option<Duration> {
    match BUDGET_US.load(Ordering::Relaxed) {
        0 => None,
        us => Some(Duration::from_micros(us)),
    }
}

/// Watches `tcp` for up to `budget`: what a read found (bytes appended to `buf`, or
/// 0 at its end), or None when nothing came. `buf` is asked for only when bytes
/// came (a session's buffer is made on first use).
pub fn wait<B: ReadInto + ?Sized>(
    tcp: &TcpStream,
    budget: Duration,
    buf: &mut B,
) -> Option<std::io::Result<usize>> {
    let sock = socket2::SockRef::from(tcp);
    let mut chunk = [0u8; 4096];
    let until = Instant::now() + budget;
    loop {
        match (&*sock).read(&mut chunk) {
            Ok(n) => {
                if n > 0 {
                    buf.buf().extend_from_slice(&chunk[..n]);
                }
                BUSY_POLL_HITS.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(n));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Some(Err(e)),
        }
        if Instant::now() >= until {
            BUSY_POLL_MISSES.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn a_client_is_alone_until_another_sends() {
        // Ids no other test uses (the record is process-wide); whatever came before
        // is older than 2 ms after this.
        std::thread::sleep(Duration::from_millis(3));
        assert!(alone(9_001));
        assert!(alone(9_001), "the same client again");
        assert!(!alone(9_002), "another client sent one just now");
        assert!(!alone(9_001), "and the first one is no longer alone");
        assert!(
            !alone(9_001),
            "nor at its next statement: the other sent one just now"
        );
        std::thread::sleep(Duration::from_millis(3));
        assert!(
            alone(9_001),
            "the other one has been quiet for longer than 2 ms"
        );
        assert!(!alone(9_002), "but the first one sent one just now");
    }

    #[tokio::test]
    async fn waits_for_bytes_the_end_or_the_budget() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut near = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (far, _) = l.accept().await.unwrap();
        let mut buf = bytes::BytesMut::new();
        // Nothing comes: None once the budget is spent.
        assert!(wait(&far, Duration::from_micros(200), &mut buf).is_none());
        // More than one read's worth: the first read's bytes, the rest left queued.
        near.write_all(&[7u8; 5000]).await.unwrap();
        let got = wait(&far, Duration::from_secs(2), &mut buf);
        assert!(matches!(got, Some(Ok(n)) if n > 0 && n <= 4096), "{got:?}");
        let first = buf.len();
        let got = wait(&far, Duration::from_secs(2), &mut buf);
        assert!(matches!(got, Some(Ok(n)) if first + n == 5000), "{got:?}");
        assert!(buf.iter().all(|&b| b == 7));
        // The peer closes: a read of 0.
        drop(near);
        assert!(matches!(
            wait(&far, Duration::from_secs(2), &mut buf),
            Some(Ok(0))
        ));
    }
}
