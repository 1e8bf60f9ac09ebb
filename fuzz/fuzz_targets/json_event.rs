//! JSONL import line (`json::parse_event`): no panic; a line that parses
//! exports (`JsonRecord::write_line`) to a line that parses to the same event.
#![no_main]

use cairn_codec::json::{parse_event, JsonRecord};
use cairn_codec::{ChainHash, Lsn};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(e) = parse_event(line) else {
        return;
    };
    let mut out = Vec::new();
    JsonRecord::new(Lsn(1), ChainHash::ZERO, &e).write_line(&mut out);
    let text = std::str::from_utf8(&out).expect("export is UTF-8");
    let e2 = parse_event(text.trim_end()).expect("an exported line parses");
    assert_eq!(e, e2);
});
