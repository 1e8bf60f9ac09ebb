//! Query index file decoder: no panic on any bytes.
#![no_main]

use cairn_query::index::Index;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Index::decode(data, "fuzz");
});
