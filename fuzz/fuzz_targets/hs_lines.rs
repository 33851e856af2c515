//! Feeds arbitrary bytes to the HandlerSocket line reader, token splitter, value
//! decoder and request parser: none may panic, every byte belongs to a line or to the
//! unfinished rest, and every decoded value encodes and decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire_hs::request::{Slots, parse};
use sluice_wire_hs::{Value, decode, encode, line, line_end, tokens};

/// Three index ids, the second with two filter columns.
struct Three;
impl Slots for Three {
    fn count(&self) -> usize {
        3
    }
    fn filter_columns(&self, id: u32) -> usize {
        if id == 1 { 2 } else { 0 }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&max, data)) = data.split_first() else {
        return;
    };
    let max = usize::from(max) * 4;
    let mut rest = data;
    loop {
        match line_end(rest, max) {
            Ok(Some(end)) => {
                assert!(end <= max && rest[end] == b'\n');
                let content = line(rest, end);
                assert!(content.len() == end || content.len() + 1 == end);
                let line = &rest[..end];
                let mut joined = Vec::new();
                for (i, raw) in tokens(line).enumerate() {
                    if i > 0 {
                        joined.push(b'\t');
                    }
                    joined.extend_from_slice(raw);
                    let v = decode(raw);
                    let mut again = Vec::new();
                    encode(&mut again, v.as_bytes());
                    match (&v, decode(&again)) {
                        (Value::Null, Value::Null) => {}
                        (Value::Str(a), Value::Str(b)) => assert_eq!(a, &b),
                        (a, b) => panic!("{a:?} came back as {b:?}"),
                    }
                }
                assert_eq!(joined, line);
                let _ = parse(content, &Three);
                rest = &rest[end + 1..];
            }
            Ok(None) => {
                assert!(rest.len() <= max && !rest.contains(&b'\n'));
                break;
            }
            Err(e) => {
                assert!(rest.len() > max && !rest[..=max].contains(&b'\n'));
                assert_eq!(e.limit, max);
                break;
            }
        }
    }
});
