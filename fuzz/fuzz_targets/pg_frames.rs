//! Feeds arbitrary bytes to the PostgreSQL frame reader, the message views and the
//! response tracker, in arbitrary read sizes: none may panic, and the scanner must
//! account for every byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire_pg::track::{Kind, Origin, Tracker};
use sluice_wire_pg::{Item, Scanner, frame, msg};

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else { return };
    let _ = msg::startup_request(data);
    let _ = frame::startup_frame(data, 10_000);
    // Deliver the stream in two reads at an arbitrary point.
    let cut = (split as usize * data.len()) / 256;
    let mut buf = Vec::new();
    let mut scanner = Scanner::default();
    let mut tracker = Tracker::new();
    let mut consumed = 0usize;
    for part in [&data[..cut], &data[cut..]] {
        buf.extend_from_slice(part);
        loop {
            let item = match scanner.next(&buf, 4096, 64, |t| t != b'D' && t != b'd') {
                Ok(Some(i)) => i,
                Ok(None) | Err(_) => break,
            };
            let n = match item {
                Item::Chunk(n) => n,
                Item::Head(_) => 5,
                Item::Whole(h) => {
                    let body = &buf[5..h.frame_len];
                    let _ = msg::parse(body);
                    let _ = msg::bind(body);
                    let _ = msg::target(body);
                    let _ = msg::parameter_status(body);
                    let _ = msg::error_field(body, b'C');
                    let _ = msg::sasl_initial(body);
                    let _ = msg::sasl_mechanisms(body);
                    let _ = msg::ready_status(body);
                    let _ = msg::backend_key(body);
                    let _ = msg::authentication(body);
                    // Pretend each client message is followed by its server answer.
                    tracker.push(Kind::Query, Origin::Client, 0);
                    let _ = tracker.on_frame(h.tag);
                    h.frame_len
                }
            };
            assert!(n <= buf.len());
            buf.drain(..n);
            consumed += n;
        }
    }
    assert!(consumed + buf.len() == data.len());
});
