//! Tests of the response tracker (track.rs).

use super::*;

fn run(t: &mut Tracker, tags: &[u8]) -> (Vec<bool>, Vec<u8>) {
    let mut fwd = Vec::new();
    let mut out = BytesMut::new();
    for &tag in tags {
        t.release_synthetic(&mut out);
        fwd.push(t.on_frame(tag).unwrap());
    }
    t.release_synthetic(&mut out);
    (fwd, out.to_vec())
}

#[test]
fn injected_parse_is_hidden() {
    let mut t = Tracker::new();
    t.push(Kind::Parse, Origin::Injected, 1);
    t.push(Kind::Bind, Origin::Client, 2);
    t.push(Kind::Execute, Origin::Client, 3);
    t.push(Kind::Sync, Origin::Client, 4);
    let (fwd, _) = run(&mut t, b"12DDCZ");
    assert_eq!(fwd, [false, true, true, true, true, true]);
    assert!(t.is_idle());
    assert_eq!(t.take_done().count(), 4);
}

#[test]
fn synthetic_answers_come_in_order() {
    let mut t = Tracker::new();
    t.push(Kind::Bind, Origin::Client, 1);
    t.push(Kind::Close, Origin::Synthetic(Bytes::from_static(b"3")), 2);
    t.push(Kind::Sync, Origin::Client, 3);
    let mut out = BytesMut::new();
    t.release_synthetic(&mut out);
    assert!(out.is_empty());
    assert!(t.on_frame(b'2').unwrap());
    t.release_synthetic(&mut out);
    assert_eq!(&out[..], b"3");
    assert!(t.on_frame(b'Z').unwrap());
    assert!(t.is_idle());
}

#[test]
fn error_skips_to_sync() {
    let mut t = Tracker::new();
    t.push(Kind::Parse, Origin::Client, 1);
    t.push(Kind::Bind, Origin::Client, 2);
    t.push(Kind::Close, Origin::Synthetic(Bytes::from_static(b"3")), 3);
    t.push(Kind::Execute, Origin::Client, 4);
    t.push(Kind::Sync, Origin::Client, 5);
    t.push(Kind::Query, Origin::Client, 6);
    let (fwd, out) = run(&mut t, b"EZTDCZ");
    assert_eq!(fwd, [true; 6]);
    assert!(out.is_empty(), "a skipped synthetic answer is never sent");
    let done: Vec<_> = t.take_done().map(|d| (d.token, d.outcome)).collect();
    assert_eq!(
        done,
        [
            (1, Outcome::Failed),
            (2, Outcome::Skipped),
            (3, Outcome::Skipped),
            (4, Outcome::Skipped),
            (5, Outcome::Ok),
            (6, Outcome::Ok)
        ]
    );
}

#[test]
fn error_before_the_sync_was_sent_skips_what_follows() {
    // The client pipelines rows; one Execute fails before the rest (and the Sync)
    // reached Sluice. The server skips everything up to the Sync and answers one
    // ReadyForQuery.
    let mut t = Tracker::new();
    t.push(Kind::Parse, Origin::Client, 1);
    t.push(Kind::Bind, Origin::Client, 2);
    t.push(Kind::Execute, Origin::Client, 3);
    let (fwd, _) = run(&mut t, b"12E");
    assert_eq!(fwd, [true; 3]);
    assert!(!t.is_idle(), "the server still waits for a Sync");
    for token in 4..40 {
        let kind = [Kind::Bind, Kind::Execute, Kind::Query][token as usize % 3];
        t.push(kind, Origin::Client, token);
        assert!(!t.is_idle());
    }
    t.push(Kind::Close, Origin::Synthetic(Bytes::from_static(b"3")), 40);
    t.push(Kind::Sync, Origin::Client, 41);
    let (fwd, out) = run(&mut t, b"Z");
    assert_eq!(fwd, [true]);
    assert!(out.is_empty(), "a skipped synthetic answer is never sent");
    assert!(t.is_idle());
    let done: Vec<_> = t.take_done().map(|d| (d.token, d.outcome)).collect();
    assert_eq!(done.len(), 41);
    assert_eq!(done[2], (3, Outcome::Failed));
    assert!(done[3..40].iter().all(|d| d.1 == Outcome::Skipped));
    assert_eq!(done[40], (41, Outcome::Ok));
    // The next batch is tracked normally.
    t.push(Kind::Bind, Origin::Client, 42);
    t.push(Kind::Sync, Origin::Client, 43);
    let (fwd, _) = run(&mut t, b"2Z");
    assert_eq!(fwd, [true; 2]);
    assert!(t.is_idle());
}

#[test]
fn simple_query_errors_wait_for_ready() {
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Injected, 1);
    t.push(Kind::Query, Origin::Client, 2);
    let (fwd, _) = run(&mut t, b"CSEZTDCZ");
    assert_eq!(fwd, [false, false, false, false, true, true, true, true]);
}

#[test]
fn desync_is_detected() {
    let mut t = Tracker::new();
    assert_eq!(t.on_frame(b'Z'), Err(Desync(b'Z')));
    t.push(Kind::Bind, Origin::Client, 1);
    assert_eq!(t.on_frame(b'1'), Err(Desync(b'1')));
    assert!(t.on_frame(b'N').unwrap());
}

#[test]
fn syncs_during_copy_in_are_ignored() {
    // Bind, Execute, Sync sent together; the server enters copy-in and ignores the
    // Sync; then CopyData.., CopyDone, Sync.
    let mut t = Tracker::new();
    t.push(Kind::Bind, Origin::Client, 1);
    t.push(Kind::Execute, Origin::Client, 2);
    t.push(Kind::Sync, Origin::Client, 3);
    assert!(t.on_frame(b'2').unwrap());
    assert!(t.on_frame(b'G').unwrap());
    t.push(Kind::Sync, Origin::Client, 4);
    t.push(Kind::CopyEnd, Origin::Client, 5);
    t.push(Kind::Sync, Origin::Client, 6);
    assert!(t.on_frame(b'C').unwrap());
    assert!(t.on_frame(b'Z').unwrap());
    assert!(t.is_idle());
    // The client already sent everything before the server answered.
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Client, 1);
    t.push(Kind::Sync, Origin::Client, 2);
    t.push(Kind::CopyEnd, Origin::Client, 3);
    t.push(Kind::Sync, Origin::Client, 4);
    let (fwd, _) = run(&mut t, b"GCZZ");
    assert_eq!(fwd, [true; 4]);
    assert!(t.is_idle());
    // A stray CopyDone outside copy mode gets no answer.
    let mut t = Tracker::new();
    t.push(Kind::CopyEnd, Origin::Client, 1);
    t.push(Kind::Query, Origin::Client, 2);
    assert!(t.on_frame(b'Z').unwrap());
    assert!(t.is_idle());
}

#[test]
fn injected_parse_error_reaches_the_client() {
    let mut t = Tracker::new();
    t.push(Kind::Parse, Origin::Injected, 1);
    t.push(Kind::Bind, Origin::Client, 2);
    t.push(Kind::Sync, Origin::Client, 3);
    let (fwd, _) = run(&mut t, b"EZ");
    assert_eq!(fwd, [true, true]);
    // An error in an injected simple query is Sluice's to handle.
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Injected, 1);
    let (fwd, _) = run(&mut t, b"EZ");
    assert_eq!(fwd, [false, false]);
    assert_eq!(
        t.take_done().next().map(|d| d.outcome),
        Some(Outcome::Failed)
    );
}

#[test]
fn copy_error_ends_copy_mode_and_markers_do_not_block() {
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Client, 1);
    let (fwd, _) = run(&mut t, b"GEZ");
    assert_eq!(fwd, [true; 3]);
    assert!(t.is_idle());
    // The next batch's Sync is not mistaken for one sent in copy mode.
    t.push(Kind::Bind, Origin::Client, 2);
    t.push(Kind::Sync, Origin::Client, 3);
    let (fwd, _) = run(&mut t, b"2Z");
    assert_eq!(fwd, [true; 2]);
    assert!(t.is_idle());
    // A late CopyDone does not hold the connection.
    t.push(Kind::CopyEnd, Origin::Client, 4);
    assert!(t.is_idle());
}

#[test]
fn synthetic_ready_carries_current_status() {
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Client, 1);
    t.push(
        Kind::Query,
        Origin::Synthetic(Bytes::from_static(b"Z\0\0\0\x05I")),
        2,
    );
    assert!(t.on_frame(b'Z').unwrap());
    t.set_status(b'T');
    let mut out = BytesMut::new();
    t.release_synthetic(&mut out);
    assert_eq!(&out[..], b"Z\0\0\0\x05T");
}

#[test]
fn describe_statement_and_copy() {
    let mut t = Tracker::new();
    t.push(Kind::Describe, Origin::Client, 1);
    t.push(Kind::Execute, Origin::Client, 2);
    t.push(Kind::Sync, Origin::Client, 3);
    let (fwd, _) = run(&mut t, b"tTHddcCZ");
    assert!(fwd.iter().all(|f| *f));
    assert!(t.is_idle());
}

const ERR: &[u8] = b"E\0\0\0\x04";
const RFQ: &[u8] = b"Z\0\0\0\x05I";

#[test]
fn lost_connection_fails_each_request_once() {
    // A simple query half answered, then a batch the server has not started.
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Client, 1);
    t.push(Kind::Parse, Origin::Injected, 2);
    t.push(Kind::Bind, Origin::Client, 3);
    t.push(Kind::Execute, Origin::Client, 4);
    t.push(Kind::Sync, Origin::Client, 5);
    t.push(Kind::Parse, Origin::Client, 6);
    run(&mut t, b"TD");
    t.set_status(b'T');
    let mut out = BytesMut::new();
    assert_eq!(t.fail_all(&mut out, ERR, b'I'), Some(true));
    assert_eq!(&out[..], [ERR, RFQ, ERR, RFQ, ERR].concat());
    let done: Vec<_> = t.take_done().map(|d| (d.token, d.outcome)).collect();
    use Outcome::*;
    assert_eq!(
        done,
        [
            (1, Failed),
            (3, Failed),
            (4, Skipped),
            (5, Skipped),
            (6, Failed)
        ]
    );
    assert!(t.is_idle());
}

#[test]
fn lost_connection_after_an_error_only_ends_the_batch() {
    let mut t = Tracker::new();
    t.push(Kind::Bind, Origin::Client, 1);
    t.push(Kind::Execute, Origin::Client, 2);
    t.push(Kind::Sync, Origin::Client, 3);
    t.push(Kind::Query, Origin::Client, 4);
    run(&mut t, b"2E");
    let mut out = BytesMut::new();
    assert_eq!(t.fail_all(&mut out, ERR, b'I'), Some(false));
    assert_eq!(&out[..], [RFQ, ERR, RFQ].concat());
    // The server was skipping to a Sync the client has yet to send.
    let mut t = Tracker::new();
    t.push(Kind::Execute, Origin::Client, 1);
    run(&mut t, b"E");
    let mut out = BytesMut::new();
    assert_eq!(t.fail_all(&mut out, ERR, b'I'), Some(true));
    assert!(out.is_empty());
    // A batch answered so far, its Sync not sent yet: it fails all the same.
    let mut t = Tracker::new();
    t.push(Kind::Bind, Origin::Client, 1);
    t.push(Kind::Execute, Origin::Client, 2);
    run(&mut t, b"2C");
    let mut out = BytesMut::new();
    assert_eq!(t.fail_all(&mut out, ERR, b'I'), Some(true));
    assert_eq!(&out[..], ERR);
}

#[test]
fn lost_connection_keeps_synthetic_answers_due_before_the_error() {
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Client, 1);
    let pc = Bytes::from_static(b"1\0\0\0\x04");
    t.push(Kind::Parse, Origin::Synthetic(pc.clone()), 2);
    t.push(Kind::Bind, Origin::Client, 3);
    t.push(Kind::Parse, Origin::Synthetic(pc), 4);
    t.push(Kind::Sync, Origin::Synthetic(Bytes::from_static(RFQ)), 5);
    let mut out = BytesMut::new();
    assert_eq!(t.fail_all(&mut out, ERR, b'I'), Some(false));
    let pc: &[u8] = b"1\0\0\0\x04";
    assert_eq!(&out[..], [ERR, RFQ, pc, ERR, RFQ].concat());
    // Copying in cannot be broken off: nothing is written.
    let mut t = Tracker::new();
    t.push(Kind::Query, Origin::Client, 1);
    run(&mut t, b"G");
    let mut out = BytesMut::new();
    assert_eq!(t.fail_all(&mut out, ERR, b'I'), None);
    assert!(out.is_empty());
}
