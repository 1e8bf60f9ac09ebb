//! Blob pack decoders: pack header, entry header, entry CRC, contents
//! (bounded decompression) and chunk lists. No panic, no allocation past
//! the recorded raw length.
#![no_main]

use cairn_engine::blob::chunking::decode_chunk_list;
use cairn_engine::blob::pack::{decode_contents, EntryHeader, PackHeader, ENTRY_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = PackHeader::decode(data);
    let Ok(h) = EntryHeader::decode(data) else {
        return;
    };
    let end = (h.entry_len() as usize).min(data.len());
    let entry = &data[..end];
    let _ = h.check_crc(entry);
    let payload = &entry[ENTRY_HEADER_LEN.min(entry.len())..];
    if let Ok(raw) = decode_contents(&h, payload, &|_| None) {
        assert!(raw.len() as u64 <= h.raw_len.max(payload.len() as u64));
        let _ = decode_chunk_list(&raw, h.raw_len);
    }
    let _ = decode_chunk_list(payload, h.raw_len);
});
