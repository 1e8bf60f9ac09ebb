//! Checkpoint manifest (tree) node decoder: no panic; what decodes
//! re-encodes to the same node.
#![no_main]

use cairn_codec::BlobHash;
use cairn_snapshot::manifest::Node;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let hash = BlobHash::of(data);
    if let Ok(n) = Node::decode(hash, data) {
        let bytes = n.encode();
        let again = Node::decode(BlobHash::of(&bytes), &bytes).expect("re-encoded node decodes");
        assert_eq!(n, again);
    }
});
