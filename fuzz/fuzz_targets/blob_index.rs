//! Blob index file decoders (both versions): no panic; what decodes
//! re-encodes to the same entries, and every entry is found by a lookup.
#![no_main]

use std::sync::Arc;

use cairn_engine::blob::index::IndexSnapshot;
use cairn_engine::blob::sorted::{self, SortedIndex};
use cairn_engine::vfs::Mapped;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = IndexSnapshot::decode(data) {
        let again = IndexSnapshot::decode(&s.encode()).expect("re-encoded index decodes");
        assert_eq!(s, again);
    }
    if let Ok(idx) = SortedIndex::open(Mapped::Bytes(Arc::from(data.to_vec()))) {
        if let Ok(entries) = idx.entries() {
            for (h, l) in &entries {
                assert_eq!(idx.get(h).expect("a checked bucket reads"), Some(*l));
            }
            let mut e = entries.clone();
            let again = sorted::encode(idx.packs(), &mut e);
            let back = SortedIndex::open(Mapped::Bytes(Arc::from(again))).expect("re-encoded");
            assert_eq!(back.entries().expect("re-encoded entries"), entries);
        }
    }
});
