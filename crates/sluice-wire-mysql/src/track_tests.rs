use super::*;
use crate::packet::MAX_PAYLOAD;
use crate::resp::{encode_eof, encode_err, encode_ok};
use crate::testdata::{self as td, hex};
use proptest::prelude::*;

const DEP: u64 = td::CAPS | CLIENT_DEPRECATE_EOF;

fn packets(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|p| hex(p)).collect()
}

/// Feeds a response to a tracker that expects `cmd`; returns the steps.
fn run(t: &mut Tracker, cmd: u8, list: &[&str]) -> Vec<Step> {
    assert!(t.expect(cmd));
    packets(list)
        .iter()
        .map(|p| t.on_payload(p).unwrap())
        .collect()
}

fn done(cmd: u8, ok: bool, status: u16) -> Step {
    Step::Done { cmd, ok, status }
}

/// Checks that all steps but the last are `More` and the last is the given `Done`.
fn assert_answer(steps: &[Step], last: Step) {
    let (end, rest) = steps.split_last().unwrap();
    assert!(rest.iter().all(|s| *s == Step::More), "{steps:?}");
    assert_eq!(*end, last);
}

/// The captured MariaDB answers, per capability mode: command, packets, success, status.
fn captured(dep: bool) -> Vec<(u8, &'static [&'static str], bool, u16)> {
    let pick = |a, b| if dep { b } else { a };
    vec![
        (COM_QUERY, pick(td::EOF_SELECT, td::DEP_SELECT), true, 2),
        (COM_QUERY, pick(td::EOF_DO, td::DEP_DO), true, 2),
        (COM_QUERY, pick(td::EOF_MULTI, td::DEP_MULTI), true, 2),
        (COM_QUERY, pick(td::EOF_ERR, td::DEP_ERR), false, 2),
        (
            COM_QUERY,
            pick(td::EOF_MULTI_ERR, td::DEP_MULTI_ERR),
            false,
            10,
        ),
        (COM_QUERY, pick(td::EOF_BEGIN, td::DEP_BEGIN), true, 3),
        (COM_QUERY, pick(td::EOF_COMMIT, td::DEP_COMMIT), true, 2),
        (
            COM_QUERY,
            pick(td::EOF_SET_AC, td::DEP_SET_AC),
            true,
            0x4000,
        ),
        (COM_QUERY, pick(td::EOF_USE, td::DEP_USE), true, 0x4000),
        (
            COM_QUERY,
            pick(td::EOF_EMPTY_SELECT, td::DEP_EMPTY_SELECT),
            true,
            2,
        ),
        (COM_QUERY, pick(td::EOF_CALL, td::DEP_CALL), true, 2),
        (
            COM_STMT_PREPARE,
            pick(td::EOF_PREPARE, td::DEP_PREPARE),
            true,
            2,
        ),
        (
            COM_STMT_EXECUTE,
            pick(td::EOF_EXECUTE, td::DEP_EXECUTE),
            true,
            2,
        ),
        (
            COM_STMT_EXECUTE,
            pick(td::EOF_EXECUTE_CURSOR, td::DEP_EXECUTE_CURSOR),
            true,
            0x42,
        ),
        (
            COM_STMT_FETCH,
            pick(td::EOF_FETCH, td::DEP_FETCH),
            true,
            0x82,
        ),
        (
            COM_STMT_RESET,
            pick(td::EOF_STMT_RESET, td::DEP_STMT_RESET),
            true,
            2,
        ),
        (
            COM_STMT_PREPARE,
            pick(td::EOF_PREPARE_DO, td::DEP_PREPARE_DO),
            true,
            2,
        ),
        (
            COM_STMT_EXECUTE,
            pick(td::EOF_EXECUTE_DO, td::DEP_EXECUTE_DO),
            true,
            2,
        ),
        (
            COM_STMT_PREPARE,
            pick(td::EOF_PREPARE_ERR, td::DEP_PREPARE_ERR),
            false,
            2,
        ),
        (
            COM_FIELD_LIST,
            pick(td::EOF_FIELD_LIST, td::DEP_FIELD_LIST),
            true,
            2,
        ),
        (
            COM_STATISTICS,
            pick(td::EOF_STATISTICS, td::DEP_STATISTICS),
            true,
            2,
        ),
        (COM_PING, pick(td::EOF_PING, td::DEP_PING), true, 2),
        (
            COM_INIT_DB,
            pick(td::EOF_INIT_DB, td::DEP_INIT_DB),
            true,
            0x4002,
        ),
        (
            COM_SET_OPTION,
            pick(td::EOF_SET_OPTION, td::DEP_SET_OPTION),
            true,
            2,
        ),
        (
            COM_RESET_CONNECTION,
            pick(td::EOF_RESET_CONN, td::DEP_RESET_CONN),
            true,
            2,
        ),
    ]
}

#[test]
fn captured_answers_one_by_one() {
    for dep in [false, true] {
        let mut t = Tracker::new(if dep { DEP } else { td::CAPS });
        for (i, (cmd, list, ok, status)) in captured(dep).into_iter().enumerate() {
            // The status an ERR reports is the one before it.
            let steps = run(&mut t, cmd, list);
            assert_answer(&steps, done(cmd, ok, status));
            assert!(t.is_idle(), "case {i} dep={dep}");
            assert_eq!(t.status(), status);
        }
    }
}

#[test]
fn captured_answers_pipelined() {
    for dep in [false, true] {
        let mut t = Tracker::new(if dep { DEP } else { td::CAPS });
        let cases = captured(dep);
        for (cmd, ..) in &cases {
            assert!(t.expect(*cmd));
        }
        assert!(!t.expect(COM_STMT_CLOSE) && !t.expect(COM_QUIT));
        assert!(!t.expect(COM_STMT_SEND_LONG_DATA));
        assert_eq!(t.in_flight(), cases.len());
        let mut dones = Vec::new();
        for (cmd, list, ..) in &cases {
            assert_eq!(t.current(), Some(*cmd));
            for p in packets(list) {
                if let Step::Done { cmd, ok, .. } = t.on_payload(&p).unwrap() {
                    dones.push((cmd, ok));
                }
            }
        }
        let want: Vec<_> = cases.iter().map(|c| (c.0, c.2)).collect();
        assert_eq!(dones, want);
        assert!(t.is_idle());
    }
}

#[test]
fn transaction_and_session_state() {
    let mut t = Tracker::new(td::CAPS);
    run(&mut t, COM_QUERY, td::EOF_BEGIN);
    assert!(t.in_transaction());
    run(&mut t, COM_QUERY, td::EOF_SET_AC);
    assert!(!t.in_transaction());
    let ok = t.last_ok().unwrap();
    assert!(ok.session_state_changed());
    assert_eq!(ok.status & SERVER_STATUS_AUTOCOMMIT, 0);
    run(&mut t, COM_STMT_PREPARE, td::EOF_PREPARE);
    let p = t.last_prepare().unwrap();
    assert_eq!((p.statement_id, p.params, p.columns), (4, 1, 2));
}

#[test]
fn local_infile() {
    for (caps, ask, answer) in [
        (td::CAPS, td::EOF_INFILE, td::EOF_INFILE_DONE),
        (DEP, td::DEP_INFILE, td::DEP_INFILE_DONE),
    ] {
        let mut t = Tracker::new(caps);
        assert_eq!(run(&mut t, COM_QUERY, ask), [Step::LocalInfile]);
        assert!(t.in_local_infile());
        // The client now sends the file; the server's answer closes the command.
        let p = hex(answer[0]);
        assert_eq!(t.on_payload(&p), Ok(done(COM_QUERY, true, 2)));
        assert_eq!(t.last_ok().map(|o| o.warnings), Some(2));
        // Only OK or ERR may follow a file.
        assert!(run(&mut t, COM_QUERY, ask).len() == 1);
        assert!(t.on_payload(&hex("0131")).is_err());
    }
    // Inside a multi-statement the OK may announce more results.
    let mut t = Tracker::new(td::CAPS);
    t.expect(COM_QUERY);
    assert_eq!(t.on_payload(b"\xfbx.csv"), Ok(Step::LocalInfile));
    let mut ok = Vec::new();
    encode_ok(&mut ok, 0, 2, 0, SERVER_MORE_RESULTS_EXISTS, 0, b"");
    assert_eq!(t.on_payload(&ok), Ok(Step::More));
    for p in packets(td::EOF_SELECT) {
        t.on_payload(&p).unwrap();
    }
    assert!(t.is_idle());
}

#[test]
fn change_user_auth_exchange() {
    for (caps, switch, answer) in [
        (td::CAPS, td::EOF_CHANGE_USER, td::EOF_CHANGE_USER_DONE),
        (DEP, td::DEP_CHANGE_USER, td::DEP_CHANGE_USER_DONE),
    ] {
        let mut t = Tracker::new(caps);
        assert_eq!(run(&mut t, COM_CHANGE_USER, switch), [Step::Auth]);
        // caching_sha2_password fast auth would send AuthMoreData first.
        assert_eq!(t.on_payload(&[0x01, 0x03]), Ok(Step::Auth));
        assert_eq!(
            t.on_payload(&hex(answer[0])),
            Ok(done(COM_CHANGE_USER, true, 0x4002))
        );
        assert!(t.is_idle());
        t.expect(COM_CHANGE_USER);
        assert_eq!(
            t.on_payload(&hex(td::EOF_ERR[0])),
            Ok(done(COM_CHANGE_USER, false, 0x4002))
        );
    }
}

#[test]
fn rows_starting_with_fe() {
    for caps in [td::CAPS, DEP] {
        let mut t = Tracker::new(caps);
        t.expect(COM_QUERY);
        for p in packets(td::EOF_SELECT)
            .iter()
            .take(if caps == DEP { 3 } else { 4 })
        {
            assert_eq!(t.on_payload(p), Ok(Step::More));
        }
        // A text row whose first value is 16 MiB or more: prefix 0xFE, 8-byte length.
        let head = [0xFE, 0, 0, 0, 1, 0, 0, 0, 0, b'x'];
        assert_eq!(t.on_packet(&head, MAX_PAYLOAD + 9), Ok(Step::More));
        assert_eq!(t.on_packet(&head, 1 << 30), Ok(Step::More));
        let mut end = Vec::new();
        encode_eof(&mut end, caps, 0, SERVER_STATUS_AUTOCOMMIT);
        assert_eq!(t.on_payload(&end), Ok(done(COM_QUERY, true, 2)));
    }
    // Without CLIENT_DEPRECATE_EOF only a packet shorter than 9 bytes is an EOF.
    let mut t = Tracker::new(td::CAPS);
    t.expect(COM_STMT_FETCH);
    assert_eq!(t.on_payload(&[0xFE; 9]), Ok(Step::More));
    assert_eq!(
        t.on_payload(&hex("fe00000200")),
        Ok(done(COM_STMT_FETCH, true, 2))
    );
}

#[test]
fn progress_reports_and_errors_mid_rows() {
    let mut err = Vec::new();
    encode_err(
        &mut err,
        PROGRESS_REPORT_CODE,
        b"HY000",
        b"\x01\x01\x02\x00\x00\x00stage",
    );
    let mut t = Tracker::new(td::CAPS | MARIADB_CLIENT_PROGRESS);
    t.expect(COM_QUERY);
    assert_eq!(t.on_payload(&err), Ok(Step::More));
    assert_eq!(
        t.on_payload(&hex(td::EOF_DO[0])),
        Ok(done(COM_QUERY, true, 2))
    );
    // Without the capability such a packet is an error like any other.
    let mut t = Tracker::new(td::CAPS);
    t.expect(COM_QUERY);
    assert_eq!(t.on_payload(&err), Ok(done(COM_QUERY, false, 0)));
    // A query killed while rows stream: the ERR ends the answer.
    let mut t = Tracker::new(DEP);
    t.expect(COM_QUERY);
    for p in packets(td::DEP_SELECT).iter().take(4) {
        assert_eq!(t.on_payload(p), Ok(Step::More));
    }
    let mut err = Vec::new();
    encode_err(&mut err, 1317, b"70100", b"Query execution was interrupted");
    assert_eq!(t.on_payload(&err), Ok(done(COM_QUERY, false, 0)));
}

#[test]
fn optional_metadata() {
    for caps in [
        td::CAPS | MARIADB_CLIENT_CACHE_METADATA,
        DEP | CLIENT_OPTIONAL_RESULTSET_METADATA,
    ] {
        let dep = caps & CLIENT_DEPRECATE_EOF != 0;
        let mut t = Tracker::new(caps);
        // Metadata skipped: straight to the (EOF and) rows.
        t.expect(COM_STMT_EXECUTE);
        assert_eq!(t.on_payload(&[2, 0]), Ok(Step::More));
        if !dep {
            assert_eq!(t.on_payload(&hex("fe00000200")), Ok(Step::More));
        }
        assert_eq!(t.on_payload(&[0, 0, 1, 2]), Ok(Step::More));
        let mut end = Vec::new();
        encode_eof(&mut end, caps, 0, 2);
        assert_eq!(t.on_payload(&end), Ok(done(COM_STMT_EXECUTE, true, 2)));
        // Metadata sent.
        t.expect(COM_QUERY);
        assert_eq!(t.on_payload(&[1, 1]), Ok(Step::More));
        let def = hex(td::EOF_SELECT[1]);
        assert_eq!(t.on_payload(&def), Ok(Step::More));
        if !dep {
            assert_eq!(t.on_payload(&hex("fe00000200")), Ok(Step::More));
        }
        assert_eq!(t.on_payload(&end), Ok(done(COM_QUERY, true, 2)));
    }
    // MySQL 8: a prepared statement without metadata.
    let mut t = Tracker::new(td::CAPS | CLIENT_OPTIONAL_RESULTSET_METADATA);
    t.expect(COM_STMT_PREPARE);
    let p = hex("00010000000200010000000000");
    assert_eq!(t.on_payload(&p), Ok(done(COM_STMT_PREPARE, true, 0)));
}

#[test]
fn prepare_with_columns_only() {
    for caps in [td::CAPS, DEP] {
        let mut t = Tracker::new(caps);
        t.expect(COM_STMT_PREPARE);
        let def = hex(td::EOF_SELECT[1]);
        let mut steps = vec![t.on_payload(&hex("000700000002000000000000")).unwrap()];
        steps.push(t.on_payload(&def).unwrap());
        steps.push(t.on_payload(&def).unwrap());
        if caps == td::CAPS {
            steps.push(t.on_payload(&hex("fe00000200")).unwrap());
        }
        // Without EOFs nothing in the answer carries a status.
        let status = if caps == td::CAPS { 2 } else { 0 };
        assert_answer(&steps, done(COM_STMT_PREPARE, true, status));
        assert_eq!(t.last_prepare().map(|p| p.statement_id), Some(7));
    }
}

#[test]
fn desyncs() {
    let mut t = Tracker::new(td::CAPS);
    let err = t.on_payload(&hex(td::EOF_DO[0])).unwrap_err();
    assert_eq!((err.cmd, err.first), (None, Some(0)));
    t.expect(COM_PING);
    assert!(t.on_payload(&[]).is_err());
    assert!(t.on_payload(&[1]).is_err());
    t.clear();
    t.expect(COM_STMT_EXECUTE);
    assert!(
        t.on_payload(b"\xfbfile").is_err(),
        "LOCAL INFILE only answers COM_QUERY"
    );
    t.clear();
    t.expect(COM_QUERY);
    assert!(t.on_payload(&[0]).is_err(), "a zero column count");
    t.clear();
    t.expect(COM_STMT_PREPARE);
    assert!(t.on_payload(&[0, 1, 0]).is_err());
    t.clear();
    t.expect(COM_QUERY);
    t.on_payload(&[1]).unwrap();
    t.on_payload(&hex(td::EOF_SELECT[1])).unwrap();
    assert!(
        t.on_payload(&[1, b'x']).is_err(),
        "a row where the EOF belongs"
    );
}

/// A text result set with rows of the given sizes and a final OK with a long info.
fn synthetic(caps: u64, rows: &[usize], info_len: usize) -> Vec<Vec<u8>> {
    let mut out = vec![vec![1], hex(td::EOF_SELECT[1])];
    let mut eof = Vec::new();
    encode_eof(
        &mut eof,
        caps,
        0,
        SERVER_STATUS_AUTOCOMMIT | SERVER_MORE_RESULTS_EXISTS,
    );
    if caps & CLIENT_DEPRECATE_EOF == 0 {
        out.push(eof.clone());
    }
    for &n in rows {
        let mut row = vec![0xFC, n as u8, (n >> 8) as u8];
        row.resize(n + 3, b'r');
        out.push(row);
    }
    out.push(eof);
    let mut ok = Vec::new();
    encode_ok(&mut ok, caps, 300, 70_000, 3, 1, &vec![b'i'; info_len]);
    out.push(ok);
    out
}

proptest! {
    #[test]
    fn truncated_heads_give_the_same_steps(
        dep in any::<bool>(),
        picks in proptest::collection::vec(0usize..25, 1..12),
        rows in proptest::collection::vec(0usize..400, 0..6),
        info_len in 0usize..300,
        cuts in proptest::collection::vec(0usize..200, 64),
    ) {
        let caps = if dep { DEP } else { td::CAPS };
        let cases = captured(dep);
        let mut answers: Vec<(u8, Vec<Vec<u8>>)> =
            picks.iter().filter_map(|&i| cases.get(i)).map(|c| (c.0, packets(c.1))).collect();
        answers.push((COM_QUERY, synthetic(caps, &rows, info_len)));
        let mut whole = Tracker::new(caps);
        let mut cut = Tracker::new(caps);
        let mut k = 0;
        for (cmd, list) in &answers {
            whole.expect(*cmd);
            cut.expect(*cmd);
            for p in list {
                k += 1;
                let n = (HEAD_LEN + cuts[k % cuts.len()]).min(p.len());
                let a = whole.on_payload(p);
                let b = cut.on_packet(&p[..n], p.len());
                prop_assert_eq!(a, b);
                prop_assert!(a.is_ok());
            }
            prop_assert_eq!(whole.status(), cut.status());
            prop_assert_eq!(whole.last_ok(), cut.last_ok());
        }
        prop_assert!(whole.is_idle() && cut.is_idle());
        prop_assert_eq!(whole.last_ok().map(|o| (o.affected_rows, o.last_insert_id)), Some((300, 70_000)));
    }

    #[test]
    fn arbitrary_packets_never_panic(
        caps in any::<u64>(),
        cmds in proptest::collection::vec(any::<u8>(), 0..6),
        pkts in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..20), 0usize..(1 << 25)), 0..30),
    ) {
        let mut t = Tracker::new(caps);
        for c in cmds {
            t.expect(c);
        }
        for (head, len) in pkts {
            let _ = t.on_packet(&head, len);
        }
    }
}
