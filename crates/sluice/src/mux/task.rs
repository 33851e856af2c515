//! The task of one shared connection: writes what clients queued, in batches, and hands
//! each answer, unit by unit, to the client it belongs to.

use super::{Answer, BUSY, Ended, IN_FLIGHT_LOW, Mux, MuxConn, Splitter};
use crate::error::Error;
use crate::pool::Lease;
use bytes::{Buf, BytesMut};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::io::AsyncWrite;

/// Bytes of an answer's last unit handed back with it (after its header).
const HEAD_LEN: usize = 68;

/// A shared connection unused this long goes back to its pool; sooner (after `BUSY`)
/// when clients wait for a connection of their own.
const IDLE: std::time::Duration = std::time::Duration::from_millis(500);

/// The task of one shared connection.
pub(super) async fn run<C: MuxConn>(mux: Arc<Mux>, mut lease: Lease<C>) {
    // However the task ends (even by a bug's panic), no client waits for an answer that
    // will not come.
    let _guard = TaskGone(mux.clone());
    let mut splitter = lease.conn.splitter();
    let mut out = BytesMut::new();
    let mut inflight: VecDeque<Arc<Answer>> = VecDeque::new();
    let mut idle_since: Option<std::time::Instant> = None;
    let mut timer = Box::pin(tokio::time::sleep(BUSY));
    let mut flush = false;
    // The server's farewell, once it said why it is closing the connection.
    let mut farewell: Option<Error> = None;
    let failure = std::future::poll_fn(|cx| {
        loop {
            let mut progressed = false;
            {
                let mut st = mux.st.lock();
                // While a cancel is on its way to the connection nothing new is written:
                // it would run when the cancel lands (see cancel.rs).
                let held =
                    !st.queue.is_empty() && st.cancel_key.as_ref().is_some_and(|k| k.unsettled());
                if !st.queue.is_empty() && inflight.len() <= IN_FLIGHT_LOW && !held {
                    out.extend_from_slice(&st.queue);
                    st.queue.clear();
                    for c in st.cmds.drain(..) {
                        splitter.expect(c);
                    }
                    let n = inflight.len();
                    if n == 0 {
                        st.running_since = Some(std::time::Instant::now());
                    }
                    inflight.extend(st.pending.iter().skip(n).cloned());
                }
                if held && inflight.is_empty() && out.is_empty() {
                    // Look again in a while.
                    while timer.as_mut().poll(cx).is_ready() {
                        timer.as_mut().reset(tokio::time::Instant::now() + BUSY);
                    }
                } else if inflight.is_empty() && out.is_empty() && !flush {
                    if st.retired {
                        return Poll::Ready(None);
                    }
                    let since = *idle_since.get_or_insert_with(std::time::Instant::now);
                    let idle = since.elapsed();
                    let pool = lease.pool();
                    if idle >= IDLE || pool.starved(BUSY) || idle >= BUSY && pool.has_waiters() {
                        // Nothing for a while: the connection goes back to the pool.
                        st.dead = true;
                        return Poll::Ready(None);
                    }
                    // Look again in a while.
                    while timer.as_mut().poll(cx).is_ready() {
                        timer.as_mut().reset(tokio::time::Instant::now() + BUSY);
                    }
                    st.waker = Some(cx.waker().clone());
                } else {
                    idle_since = None;
                }
            }
            let (stream, rbuf) = lease.conn.io();
            if !out.is_empty() {
                match Pin::new(&mut *stream).poll_write(cx, &out) {
                    Poll::Ready(Ok(n)) => {
                        out.advance(n);
                        progressed = true;
                        // TLS may keep records back until flushed.
                        flush = stream.is_tls();
                    }
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Some(Error::server_gone(e.to_string())));
                    }
                    Poll::Pending => {}
                }
            } else if flush {
                match Pin::new(&mut *stream).poll_flush(cx) {
                    Poll::Ready(Ok(())) => flush = false,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Some(Error::server_gone(e.to_string())));
                    }
                    Poll::Pending => {}
                }
            }
            let full = inflight.front().is_some_and(|a| a.full(cx.waker()));
            if !inflight.is_empty() && !full {
                if rbuf.capacity() - rbuf.len() < 1024 {
                    rbuf.reserve(16 * 1024);
                }
                match tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, rbuf) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Some(farewell.take().unwrap_or_else(|| {
                            Error::server_gone("Lost connection to server during query")
                        })));
                    }
                    Poll::Ready(Ok(_)) => progressed = true,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Some(
                            farewell
                                .take()
                                .unwrap_or_else(|| Error::server_gone(e.to_string())),
                        ));
                    }
                    Poll::Pending => {}
                }
            }
            if let Err(e) = split(rbuf, &mut splitter, &mut inflight, &mux, &mut farewell) {
                return Poll::Ready(Some(e));
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    })
    .await;
    if failure.is_none() && mux.st.lock().retired {
        tracing::info!(
            server = lease.conn.thread(),
            "closing a shared server connection: a statement changed its session state"
        );
        lease.discard();
        return;
    }
    let Some(failure) = failure else {
        // Idle: back to the pool (with the statements prepared on it), unless the server
        // said something nobody asked for.
        let stmts = std::mem::take(&mut mux.st.lock().stmts);
        lease.conn.put_stmts(stmts);
        // The pool trusts a connection used a moment ago, so a server that closed
        // this one while it sat idle here must be noticed now.
        if lease.conn.io().1.is_empty() && lease.conn.still_open() {
            lease.put_back();
        } else {
            lease.discard();
        }
        return;
    };
    tracing::info!(server = lease.conn.thread(), error = %failure, "shared server connection lost");
    let mut st = mux.st.lock();
    st.dead = true;
    for a in st.pending.drain(..) {
        a.finish(Err(failure.clone()));
    }
    drop(st);
    lease.discard();
}

/// Fails whatever is still pending on a shared connection whose task is gone.
struct TaskGone(Arc<Mux>);

impl Drop for TaskGone {
    fn drop(&mut self) {
        let mut st = self.0.st.lock();
        st.dead = true;
        for a in st.pending.drain(..) {
            a.finish(Err(Error::server_gone(
                "the shared server connection's task ended",
            )));
        }
    }
}

/// Hands each complete unit to the answer it belongs to.
fn split<S: Splitter>(
    rbuf: &mut BytesMut,
    splitter: &mut S,
    inflight: &mut VecDeque<Arc<Answer>>,
    mux: &Mux,
    farewell: &mut Option<Error>,
) -> Result<(), Error> {
    let mut start = 0;
    let mut pos = 0;
    while let Some((len, end)) = splitter.unit(&rbuf[pos..])? {
        let unit_end = pos + len;
        if let Some(e) = splitter.farewell(&rbuf[pos..unit_end]) {
            *farewell = Some(e);
            if pos > start
                && let Some(a) = inflight.front()
            {
                a.push(&rbuf[start..pos]);
            }
            start = unit_end;
            pos = unit_end;
            continue;
        }
        if splitter.stale(&rbuf[pos..unit_end])
            && let Some(a) = inflight.front()
        {
            a.set_stale();
        }
        if let Some(a) = inflight.front()
            && a.hiding()
            && let Some(ok) = splitter.added_reply(&rbuf[pos..unit_end])
        {
            if let Some(((h, close), prepared)) = a.hidden(ok) {
                // Clients' later commands may count on the statement, or must prepare
                // it again.
                let mut st = mux.st.lock();
                if prepared {
                    st.stmts.confirm(h, close);
                } else {
                    st.stmts.remove(h);
                }
            }
            if ok {
                // Not the client's: send what came before it, skip it.
                if pos > start {
                    a.push(&rbuf[start..pos]);
                }
                start = unit_end;
                pos = unit_end;
                continue;
            }
        }
        if let Some(ended) = end {
            if let Some(a) = inflight.front() {
                a.push(&rbuf[start..unit_end]);
            }
            start = unit_end;
            let head = rbuf[pos..unit_end.min(pos + HEAD_LEN)].to_vec();
            if ended == Ended::StateChanged {
                let mut st = mux.st.lock();
                st.dead = true;
                st.retired = true;
            }
            if ended == Ended::InTransaction {
                // The answer is sent, but the client must not believe it is in a
                // transaction on a connection that is about to close.
                return Err(Error::new(
                    crate::error::Kind::Desync,
                    crate::error::Side::Server,
                    "a shared connection was left in a transaction",
                ));
            }
            let outcome = splitter.outcome();
            if let Some(a) = inflight.pop_front() {
                let mut st = mux.st.lock();
                st.pending.pop_front();
                st.running_since = Some(std::time::Instant::now());
                drop(st);
                a.finish_with(Ok(head), outcome);
            }
        }
        pos = unit_end;
    }
    if pos > start
        && let Some(a) = inflight.front()
    {
        a.push(&rbuf[start..pos]);
    }
    rbuf.advance(pos);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split;
    use crate::mux::{Added, Answer, Mux};
    use bytes::BytesMut;
    use std::collections::VecDeque;
    use std::sync::Arc;

    /// What the client of `answer` receives, and whether the answer is complete.
    fn taken(answer: &Answer) -> (Vec<u8>, bool) {
        let mut out = BytesMut::new();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let done = matches!(
            answer.poll_take(&mut cx, &mut out),
            std::task::Poll::Ready(Some(Ok(_)))
        );
        (out.to_vec(), done)
    }

    /// An answer queued on `mux` behind `replies` added commands, the last of them a
    /// prepare of statement 7 when `prepares`.
    fn queue(mux: &Mux, replies: u8, prepares: bool) -> Arc<Answer> {
        let mut st = mux.st.lock();
        let prepares = prepares.then(|| (7, st.stmts.closing(7)));
        let answer = Arc::new(Answer::new(Added { replies, prepares }));
        st.pending.push_back(answer.clone());
        answer
    }

    /// Splits what the server sent for the queued answers.
    fn feed(mux: &Mux, answers: &[&Arc<Answer>], units: &[&[u8]]) {
        let mut inflight: VecDeque<_> = answers.iter().map(|&a| a.clone()).collect();
        let mut rbuf = BytesMut::from(&units.concat()[..]);
        let mut splitter = crate::backend::pg::Splitter::default();
        split(&mut rbuf, &mut splitter, &mut inflight, mux, &mut None).unwrap();
    }

    fn counted_on(mux: &Mux) -> bool {
        mux.st.lock().stmts.get(7).is_some()
    }

    fn mux() -> Mux {
        Mux {
            st: Default::default(),
        }
    }

    const CLOSE_OK: &[u8] = b"3\0\0\0\x04";
    const PARSE_OK: &[u8] = b"1\0\0\0\x04";
    const BIND_OK: &[u8] = b"2\0\0\0\x04";
    const ROW: &[u8] = b"D\0\0\0\x0b\0\x01\0\0\0\x011";
    const DONE: &[u8] = b"C\0\0\0\x0dSELECT 1\0";
    const READY: &[u8] = b"Z\0\0\0\x05I";
    const ERROR: &[u8] = b"E\0\0\0\x0cC42P01\0\0";
    const NOTICE: &[u8] = b"N\0\0\0\x0cC01000\0\0";

    #[test]
    fn replies_to_added_commands_are_hidden() {
        let m = mux();
        let a = queue(&m, 3, true);
        feed(
            &m,
            &[&a],
            &[
                CLOSE_OK, NOTICE, CLOSE_OK, PARSE_OK, BIND_OK, ROW, DONE, READY,
            ],
        );
        // A notice in between reaches the client; the hiding goes on past it.
        assert_eq!(
            taken(&a),
            ([NOTICE, BIND_OK, ROW, DONE, READY].concat(), true)
        );
        assert!(counted_on(&m), "a statement prepared is counted on");
        // Nothing added: the answer is whole, even one that starts like an added reply.
        let m = mux();
        let a = queue(&m, 0, false);
        let units = [PARSE_OK, BIND_OK, DONE, READY];
        feed(&m, &[&a], &units);
        assert_eq!(taken(&a), (units.concat(), true));
        assert!(!counted_on(&m));
    }

    #[test]
    fn a_failed_prepare_is_forgotten_and_its_error_reaches_the_client() {
        let m = mux();
        // Another client's prepare had succeeded; this one's Close closes it.
        m.st.lock().stmts.insert(7, 0);
        let a = queue(&m, 2, true);
        feed(&m, &[&a], &[CLOSE_OK, ERROR, READY]);
        assert_eq!(taken(&a), ([ERROR, READY].concat(), true));
        assert!(
            !counted_on(&m),
            "the connection must not count on a statement it lacks"
        );
    }

    #[test]
    fn only_the_last_of_two_prepares_in_flight_is_counted_on() {
        // Two clients prepare the statement at once: after the first one's Parse, the
        // second one's Close is still to run on the server.
        let m = mux();
        let first = queue(&m, 2, true);
        let second = queue(&m, 2, true);
        let answer = [CLOSE_OK, PARSE_OK, BIND_OK, DONE, READY];
        feed(&m, &[&first, &second], &answer);
        assert!(!counted_on(&m));
        feed(&m, &[&second], &answer);
        assert!(counted_on(&m));
        assert_eq!(taken(&first), ([BIND_OK, DONE, READY].concat(), true));
        assert_eq!(taken(&second), ([BIND_OK, DONE, READY].concat(), true));
    }

    #[test]
    fn a_stale_statement_marks_its_answer() {
        const STALE: &[u8] = b"E\0\0\0\x0cC0A000\0\0";
        let m = mux();
        let a = queue(&m, 0, false);
        let b = queue(&m, 0, false);
        feed(&m, &[&a, &b], &[STALE, READY, ERROR, READY]);
        assert!(a.stale(), "0A000: the statement must be prepared afresh");
        assert!(!b.stale(), "another error says nothing of the statement");
    }
}
