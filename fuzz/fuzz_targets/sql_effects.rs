//! The SQL scanner must accept any bytes (unterminated quotes, comments, dollar
//! quotes, invalid UTF-8) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sluice_sql::effects(data);
});
