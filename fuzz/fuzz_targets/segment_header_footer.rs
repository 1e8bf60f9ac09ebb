//! Segment header and footer decoders: no panic; what decodes re-encodes
//! to the same bytes.
#![no_main]

use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = SegmentHeader::decode(data) {
        assert_eq!(&h.encode()[..], &data[..SEGMENT_HEADER_LEN]);
    }
    if let Ok(Some(f)) = SegmentFooter::decode_tail(data) {
        assert_eq!(&f.encode()[..], &data[data.len() - SEGMENT_FOOTER_LEN..]);
        assert_eq!(
            f.frames_len as usize + SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN,
            data.len()
        );
    }
});
