//! Record frame decoder: `frame::decode`, then everything a reader does
//! with a frame that validated (decompress, chain check, body decode).
//! Properties: no panic; a frame that decodes re-encodes to the same bytes.
#![no_main]

use cairn_codec::{frame, ChainHash, Event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = frame::decode(data) else {
        return;
    };
    assert!(f.len() <= data.len());
    let _ = f.chain_follows(ChainHash::ZERO);
    if let Ok(body) = f.body() {
        assert!(body.len() <= cairn_codec::event::MAX_EVENT_BODY_BYTES);
        let _ = Event::decode_body(&body);
        // Re-encoding the decoded body with the same LSN and flags must
        // give back a frame that decodes to the same body.
        let mut again = Vec::new();
        let flags = f.flags & frame::FLAG_BATCH_CONT;
        if frame::encode(&mut again, f.lsn, f.kind, flags, &body, ChainHash::ZERO).is_ok() {
            let g = frame::decode(&again).expect("re-encoded frame decodes");
            assert_eq!(&*g.body().expect("re-encoded body"), &*body);
            assert_eq!(g.lsn, f.lsn);
        }
    }
});
