use super::*;
use crate::consts::*;
use crate::testdata::hex;

const TRACK: u64 = CLIENT_PROTOCOL_41 | CLIENT_SESSION_TRACK;

#[test]
fn ok_with_session_state_from_mariadb() {
    // After `SET autocommit=0` (MariaDB 10.11, CLIENT_SESSION_TRACK).
    let p = hex("000000004000000011000f0a6175746f636f6d6d6974034f4646");
    let ok = OkPacket::parse(&p, TRACK).unwrap();
    assert_eq!(ok.status, SERVER_SESSION_STATE_CHANGED);
    assert_eq!(ok.info, b"");
    let changes: Vec<_> = ok.session_changes().collect();
    assert_eq!(
        changes,
        [(
            SESSION_TRACK_SYSTEM_VARIABLES,
            &b"\x0aautocommit\x03OFF"[..]
        )]
    );
    // After `USE t`.
    let p = hex("00000000400000000401020174");
    let ok = OkPacket::parse(&p, TRACK).unwrap();
    assert_eq!(
        ok.session_changes().collect::<Vec<_>>(),
        [(SESSION_TRACK_SCHEMA, &b"\x01t"[..])]
    );
    // LOAD DATA of 2 rows that were already there.
    let p = hex(
        "000000020002002f5265636f7264733a2032202044656c657465643a20302020536b6970706564\
         3a203220205761726e696e67733a2032",
    );
    let ok = OkPacket::parse(&p, TRACK).unwrap();
    assert_eq!(
        (ok.affected_rows, ok.status, ok.warnings),
        (0, SERVER_STATUS_AUTOCOMMIT, 2)
    );
    assert_eq!(ok.info, b"Records: 2  Deleted: 0  Skipped: 2  Warnings: 2");
    // Without session tracking the info runs to the end.
    let p = hex("0001050200000068656c6c6f");
    let ok = OkPacket::parse(&p, 0).unwrap();
    assert_eq!((ok.affected_rows, ok.last_insert_id), (1, 5));
    assert_eq!(ok.info, b"hello");
    assert_eq!(OkPacket::parse(&[0, 0, 0, 2], 0), None);
}

#[test]
fn ok_round_trips() {
    for caps in [0, TRACK] {
        let mut out = Vec::new();
        encode_ok(&mut out, caps, 300, 1 << 40, 3, 1, b"info");
        let ok = OkPacket::parse(&out, caps).unwrap();
        assert_eq!(
            (
                ok.affected_rows,
                ok.last_insert_id,
                ok.status,
                ok.warnings,
                ok.info
            ),
            (300, 1 << 40, 3, 1, &b"info"[..])
        );
        assert!(is_ok(&out));
    }
}

#[test]
fn err_packets() {
    let p = hex(crate::testdata::EOF_ERR[0]);
    let e = ErrPacket::parse(&p).unwrap();
    assert_eq!(e.code, 1146);
    assert_eq!(e.sqlstate, Some(&b"42S02"[..]));
    assert_eq!(e.message, b"Table 't.nosuch' doesn't exist");
    let mut out = Vec::new();
    encode_err_code(&mut out, ER_ACCESS_DENIED_ERROR, b"denied");
    let e = ErrPacket::parse(&out).unwrap();
    assert_eq!(
        (e.code, e.sqlstate, e.message),
        (1045, Some(&b"28000"[..]), &b"denied"[..])
    );
    // Pre-4.1 form without SQLSTATE.
    let e = ErrPacket::parse(b"\xff\x15\x04oops").unwrap();
    assert_eq!((e.code, e.sqlstate, e.message), (1045, None, &b"oops"[..]));
    assert_eq!(ErrPacket::parse(b"\xff\x15"), None);
    assert!(is_err(&out) && !is_ok(&out));
}

#[test]
fn eof_and_end_of_rows() {
    let eof = hex("fe00000a00");
    assert_eq!(
        EofPacket::parse(&eof),
        Some(EofPacket {
            warnings: 0,
            status: SERVER_STATUS_AUTOCOMMIT | SERVER_MORE_RESULTS_EXISTS
        })
    );
    assert_eq!(
        EofPacket::parse(&[0xFE]),
        Some(EofPacket {
            warnings: 0,
            status: 0
        })
    );
    // Under CLIENT_DEPRECATE_EOF a short 0xFE packet is an OK, whose fields an EOF
    // parse would misread.
    let p = hex("fe000002000000");
    let ok = OkPacket::parse(&p, CLIENT_DEPRECATE_EOF).unwrap();
    assert_eq!(ok.status, SERVER_STATUS_AUTOCOMMIT);
    assert!(is_rows_end(0xFE, 5, 0));
    assert!(!is_rows_end(0xFE, 9, 0));
    assert!(is_rows_end(0xFE, 9, CLIENT_DEPRECATE_EOF));
    assert!(!is_rows_end(0xFE, MAX_PAYLOAD, CLIENT_DEPRECATE_EOF));
    for caps in [0, CLIENT_DEPRECATE_EOF] {
        let mut out = Vec::new();
        encode_eof(&mut out, caps, 1, 0x22);
        assert!(is_rows_end(out[0], out.len(), caps));
        let status = if caps == 0 {
            EofPacket::parse(&out).unwrap().status
        } else {
            OkPacket::parse(&out, caps).unwrap().status
        };
        assert_eq!(status, 0x22);
    }
    assert!(is_local_infile(b"\xfbx.csv"));
}

#[test]
fn prepare_ok() {
    // MariaDB's answer to `SELECT ?, 1 AS c`.
    let p = hex("000100000002000100000000");
    let ok = PrepareOk::parse(&p, 0).unwrap();
    assert_eq!((ok.statement_id, ok.columns, ok.params), (1, 2, 1));
    assert!(ok.metadata_follows);
    let mut p = p;
    p.push(0);
    assert!(
        !PrepareOk::parse(&p, CLIENT_OPTIONAL_RESULTSET_METADATA)
            .unwrap()
            .metadata_follows
    );
    assert!(PrepareOk::parse(&p, 0).unwrap().metadata_follows);
    assert_eq!(PrepareOk::parse(&p[..8], 0), None);
}

#[test]
fn column_counts() {
    assert_eq!(column_count(&[2], false), Some((2, true)));
    assert_eq!(column_count(&[2, 0], true), Some((2, false)));
    assert_eq!(column_count(&[0xFC, 0, 1, 1], true), Some((256, true)));
    assert_eq!(column_count(&[2], true), None);
    assert_eq!(column_count(&[0], false), None);
    assert_eq!(column_count(&[0xFB], false), None);
}
