//! Which poll of a client's relay task is running: a number, unique in the process,
//! for every poll of a task wrapped in [`Numbered`] (0 outside one).
//!
//! Within one poll of a task, a socket whose read came back `Pending` cannot become
//! readable to it: tokio cleared its readiness and left this task's waker, so the
//! bytes that come meanwhile wake the task and the next poll (a new number) reads
//! them. (A `Pending` because the task used up its budget of operations leaves no
//! waker on the socket, but tokio wakes the task itself at once: a next poll comes
//! all the same.) A relay that remembers the number at which its server's read went
//! `Pending` can skip reading it again until the number changes: a point select
//! polled the server socket four times a statement, three of them to be told
//! `Pending` again.
//!
//! A connection that changes hands ([`bump`], when a lease is handed over) gets a new
//! number too: its readiness was never asked for by this task.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

thread_local! {
    /// The running poll's number (0: no numbered task is being polled).
    static NOW: Cell<u64> = const { Cell::new(0) };
    /// The last number given out on this thread (0: none yet).
    static LAST: Cell<u64> = const { Cell::new(0) };
}

/// Threads take numbers from ranges of their own (2^40 polls each: at a million polls
/// a second, twelve days; a thread that uses its range up takes another).
const RANGE: u64 = 1 << 40;

/// The next number of this thread.
fn next() -> u64 {
    static RANGES: AtomicU64 = AtomicU64::new(1);
    LAST.with(|last| {
        let mut n = last.get().wrapping_add(1);
        if n % RANGE == 0 || n == 1 {
            n = RANGES.fetch_add(1, Ordering::Relaxed).wrapping_mul(RANGE) + 1;
        }
        last.set(n);
        n
    })
}

/// The running poll's number; 0 outside a numbered task (nothing may be skipped then).
#[inline]
pub fn current() -> u64 {
    NOW.with(Cell::get)
}

/// A connection changed hands within the running poll: what was learnt about sockets
/// before no longer holds.
pub fn bump() {
    if current() != 0 {
        NOW.with(|now| now.set(next()));
    }
}

pin_project_lite::pin_project! {
    /// A task whose polls are numbered.
    pub struct Numbered<F> {
        #[pin]
        inner: F,
    }
}

impl<F> Numbered<F> {
    pub fn new(inner: F) -> Numbered<F> {
        Numbered { inner }
    }
}

impl<F: Future> Future for Numbered<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // The number before is put back however the poll ends (a panic unwinds too).
        let _back = Back(NOW.with(|now| now.replace(next())));
        self.project().inner.poll(cx)
    }
}

/// Puts the number of the poll around back when dropped.
struct Back(u64);

impl Drop for Back {
    fn drop(&mut self) {
        NOW.with(|now| now.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_differ_between_polls_and_threads_and_are_zero_outside() {
        assert_eq!(current(), 0);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for _ in 0..3 {
            let seen = seen.clone();
            threads.push(std::thread::spawn(move || {
                let waker = std::task::Waker::noop();
                let mut cx = Context::from_waker(waker);
                for _ in 0..100 {
                    let mut f = std::pin::pin!(Numbered::new(std::future::poll_fn(|_| {
                        let a = current();
                        bump();
                        Poll::Ready((a, current()))
                    })));
                    if let Poll::Ready((a, b)) = f.as_mut().poll(&mut cx) {
                        assert!(a != 0 && b != 0 && a != b);
                        seen.lock().map(|mut s| s.extend([a, b])).ok();
                    }
                    assert_eq!(current(), 0);
                }
                bump();
                assert_eq!(current(), 0, "no number outside a numbered task");
            }));
        }
        for t in threads {
            assert!(t.join().is_ok());
        }
        let mut all = seen.lock().map(|s| s.clone()).unwrap_or_default();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!((n, all.len()), (600, 600));
    }

    #[test]
    fn a_poll_that_panics_leaves_no_number_behind() {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut f = std::pin::pin!(Numbered::new(std::future::poll_fn(|_| -> Poll<()> {
                panic!("the relay failed")
            })));
            let _ = f.as_mut().poll(&mut cx);
        }));
        assert!(caught.is_err());
        assert_eq!(current(), 0);
    }
}
