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
    if buf.is_empty() && buf.capacity() > 0 {
        let b = std::mem::take(buf);
        if b.capacity() <= SPARE_BYTES {
            keep(&BUFS, b);
        }
    }
}
