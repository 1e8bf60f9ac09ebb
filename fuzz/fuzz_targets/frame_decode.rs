//! Record frame decoder: `frame::decode`, then everything a reader does
//! with a frame that validated (decompress, with the log's dictionary when
//! the frame needs one; chain check; body decode).
//! Properties: no panic; a frame that decodes re-encodes (with the same
//! dictionary) to a frame with the same body.
#![no_main]

use cairn_codec::frame::ChainForm;
use cairn_codec::{frame, ChainHash, Event};
use cairn_fuzz::frame_dict;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = frame::decode(data) else {
        return;
    };
    assert!(f.len() <= data.len());
    let _ = f.chain_follows(ChainHash::ZERO, ChainForm::CURRENT);
    let d = frame_dict();
    let lookup = |id: u32| (id == d.id).then(|| d.clone());
    if let Ok(body) = f.body_with(&lookup) {
        assert!(body.len() <= cairn_codec::event::MAX_EVENT_BODY_BYTES);
        let _ = Event::decode_body(&body);
        // Re-encoding the decoded body with the same LSN, flags and
        // dictionary must give back a frame that decodes to the same body.
        let mut again = Vec::new();
        let flags = f.flags & frame::FLAG_BATCH_CONT;
        let with = (f.flags & frame::FLAG_DICT != 0).then_some(&**d);
        if frame::encode_with(
            &mut again,
            f.lsn,
            f.kind,
            flags,
            &body,
            ChainHash::ZERO,
            with,
        )
        .is_ok()
        {
            let g = frame::decode(&again).expect("re-encoded frame decodes");
            assert_eq!(&*g.body_with(&lookup).expect("re-encoded body"), &*body);
            assert_eq!(g.lsn, f.lsn);
        }
    }
});
