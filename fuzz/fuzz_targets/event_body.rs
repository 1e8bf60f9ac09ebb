//! Event body decoder (MessagePack): no panic, and a body that decodes
//! re-encodes to a body that decodes to the same event.
#![no_main]

use cairn_codec::Event;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = Event::decode_body(data) {
        let again = e.encode_body().expect("a decoded event encodes");
        let e2 = Event::decode_body(&again).expect("a re-encoded event decodes");
        assert_eq!(e, e2);
    }
});
