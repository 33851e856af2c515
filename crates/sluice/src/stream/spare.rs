//! Buffers a thread keeps for its next use: a statement fills and empties a few
//! buffers (the client's bytes, the copy to the server, the server's answer), and
//! without spares each would be allocated, grown and freed again every time. A few
//! kept per thread serve all its sessions; an idle client holds none.

use bytes::BytesMut;
use std::cell::RefCell;
use std::thread::LocalKey;

/// At most this many spares of one kind a thread...
const SPARES: usize = 4;
/// ...of at most this many bytes each.
pub const SPARE_BYTES: usize = 32 * 1024;

/// A thread's spares of one kind.
pub type Spares<T> = LocalKey<RefCell<Vec<T>>>;

/// A spare from `pool`, if the thread has one.
pub fn take<T: 'static>(pool: &'static Spares<T>) -> Option<T> {
    pool.try_with(|s| s.borrow_mut().pop()).ok().flatten()
}

/// Keeps `item` in `pool` if there is room (else it is dropped).
pub fn keep<T: 'static>(pool: &'static Spares<T>, item: T) {
    let _ = pool.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARES {
            s.push(item);
        }
    });
}

thread_local! {
    static BUFS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room, a spare if the thread has one.
pub fn buf() -> BytesMut {
    take(&BUFS).unwrap_or_default()
}

/// Gives an emptied buffer's memory back, to the thread's spares if it is not too
/// large (a server connection's read buffer between answers).
pub fn release(buf: &mut BytesMut) {
    // (Read to its end, a buffer shows no room though it holds its memory: see
    // `worth_keeping`.)
    if buf.is_empty() && (buf.capacity() > 0 || buf.try_reclaim(1)) {
        let mut b = std::mem::take(buf);
        if worth_keeping(&mut b) {
            keep(&BUFS, b);
        }
    }
}

/// Whether an emptied buffer is worth keeping as a spare: it has room, and its
/// memory is at most [`SPARE_BYTES`]. (`capacity` counts only the room after what
/// was consumed: a buffer filled and read to its end shows none, though it holds all
/// of its memory (reclaiming one byte gives the room back); a buffer grown for a large
/// message and read to its end may show little room while holding all of it
/// (reclaiming more than a spare may hold tells).)
pub fn worth_keeping(b: &mut BytesMut) -> bool {
    b.is_empty()
        && b.try_reclaim(1)
        && b.capacity() <= SPARE_BYTES
        && !b.try_reclaim(SPARE_BYTES + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    #[test]
    fn a_large_buffer_read_to_its_end_is_not_kept() {
        // Grown for a large message, read to its end: little room shows, all of it is
        // held.
        let mut big = BytesMut::with_capacity(1 << 20);
        big.resize((1 << 20) - 100, 7);
        big.advance((1 << 20) - 100);
        assert!(big.capacity() <= SPARE_BYTES);
        assert!(!worth_keeping(&mut big));
        // A buffer filled to its end and read to its end shows no room, but is kept,
        // with its room back.
        let mut full = BytesMut::with_capacity(64);
        full.resize(full.capacity(), 1);
        full.advance(full.len());
        assert_eq!(full.capacity(), 0);
        assert!(worth_keeping(&mut full));
        assert!(full.capacity() >= 64);
        // A read buffer that held one answer is kept.
        let mut small = BytesMut::with_capacity(16 * 1024);
        small.extend_from_slice(b"one answer");
        small.advance(10);
        assert!(worth_keeping(&mut small));
        release(&mut small);
        assert_eq!(small.capacity(), 0, "its memory went to the spares");
        assert!(
            buf().capacity() >= 16 * 1024 - 10,
            "and comes back from them"
        );
    }
}
