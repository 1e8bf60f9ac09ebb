//! Import lines in every supported format: no panic on any text.
#![no_main]

use cairn_query::import::parse_line;
use cairn_query::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    for format in [Format::Jsonl, Format::Cortexide, Format::Comma] {
        let _ = parse_line(format, line);
    }
});
