//! Blob index file decoder: no panic; what decodes re-encodes to the same
//! snapshot.
#![no_main]

use cairn_engine::blob::index::IndexSnapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = IndexSnapshot::decode(data) {
        let again = IndexSnapshot::decode(&s.encode()).expect("re-encoded index decodes");
        assert_eq!(s, again);
    }
});
