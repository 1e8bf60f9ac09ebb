//! Hostile bytes fed to the blob store's decoders: the CI twins of the
//! `pack_entry` and `blob_index` cargo-fuzz targets (fuzz/fuzz_targets/).
//! Inputs are random bytes and real pack and index files (written by a
//! blob store on the simulated disk) with a byte flipped, a cut or a splice.
//! Properties: no panic; an entry header that decodes never yields more
//! contents than its recorded raw length; an index that decodes re-encodes
//! to the same snapshot.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use cairn_engine::blob::chunking::decode_chunk_list;
use cairn_engine::blob::index::{IndexSnapshot, INDEX_FILE};
use cairn_engine::blob::pack::{
    decode_contents, EntryHeader, PackHeader, ENTRY_HEADER_LEN, PACK_HEADER_LEN,
};
use cairn_engine::blob::sorted::{self, SortedIndex};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::vfs::{SimVfs, Vfs};
use proptest::prelude::*;

/// The `pack_entry` fuzz target's body.
fn check_entry(data: &[u8]) {
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
}

/// The `blob_index` fuzz target's body: both index file versions.
fn check_index(data: &[u8]) {
    if let Ok(s) = IndexSnapshot::decode(data) {
        let again = IndexSnapshot::decode(&s.encode()).unwrap();
        assert_eq!(s, again);
    }
    let mapped = cairn_engine::vfs::Mapped::Bytes(Arc::from(data.to_vec()));
    if let Ok(idx) = SortedIndex::open(mapped) {
        if let Ok(entries) = idx.entries() {
            for (h, l) in &entries {
                assert_eq!(idx.get(h).unwrap(), Some(*l));
            }
            let mut e = entries.clone();
            let again = sorted::encode(idx.packs(), &mut e);
            let back =
                SortedIndex::open(cairn_engine::vfs::Mapped::Bytes(Arc::from(again))).unwrap();
            assert_eq!(back.entries().unwrap(), entries);
        }
        let _ = idx.get(&cairn_codec::BlobHash::of(data));
    }
}

/// A real pack file and index file, written by a blob store.
fn real_files() -> (Vec<u8>, Vec<u8>) {
    let disk = SimVfs::new();
    let dir = Path::new("/b");
    disk.create_dir_all(dir).unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    let opts = BlobOptions {
        chunking_threshold_bytes: 4096,
        ..BlobOptions::default()
    };
    let store = BlobStore::open(vfs, dir, opts).unwrap();
    store.put(b"small").unwrap();
    store.put(&b"compressible text\n".repeat(40)).unwrap();
    store
        .put(
            &(0..6000u32)
                .map(|i| (i * 7 % 251) as u8)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    store.sync().unwrap();
    store.persist_index().unwrap();
    let pack = disk.written_bytes(&dir.join("pack-00000001.pack")).unwrap();
    let index = disk.written_bytes(&dir.join(INDEX_FILE)).unwrap();
    (pack, index)
}

fn damage(mut buf: Vec<u8>, at: usize, mask: u8, cut: bool) -> Vec<u8> {
    if buf.is_empty() {
        return buf;
    }
    let i = at % buf.len();
    if cut {
        buf.truncate(i);
    } else {
        buf[i] ^= mask.max(1);
    }
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pack_entry_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_entry(&bytes);
    }

    #[test]
    fn pack_entries_damaged(at in any::<usize>(), mask in any::<u8>(), cut in any::<bool>()) {
        let (pack, _) = real_files();
        let bad = damage(pack, at, mask, cut);
        // Every entry start the damaged file could have.
        for start in [0, PACK_HEADER_LEN] {
            if start <= bad.len() {
                check_entry(&bad[start..]);
            }
        }
        check_entry(&bad[(at % bad.len().max(1)).min(bad.len())..]);
    }

    #[test]
    fn index_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_index(&bytes);
    }

    #[test]
    fn index_damaged(at in any::<usize>(), mask in any::<u8>(), cut in any::<bool>()) {
        let (_, index) = real_files();
        prop_assert!(sorted_index(&index).entries().is_ok());
        check_index(&damage(index.clone(), at, mask, cut));
        // The version 1 file of the same entries, damaged the same way.
        let v1 = sorted_index(&index).to_snapshot().unwrap().encode();
        prop_assert!(IndexSnapshot::decode(&v1).is_ok());
        check_index(&damage(v1, at, mask, cut));
    }
}

#[test]
fn real_files_decode() {
    let (pack, index) = real_files();
    PackHeader::decode(&pack).unwrap();
    let h = EntryHeader::decode(&pack[PACK_HEADER_LEN..]).unwrap();
    let entry = &pack[PACK_HEADER_LEN..PACK_HEADER_LEN + h.entry_len() as usize];
    h.check_crc(entry).unwrap();
    assert_eq!(
        decode_contents(&h, &entry[ENTRY_HEADER_LEN..], &|_| None).unwrap(),
        b"small"
    );
    assert!(!sorted_index(&index).entries().unwrap().is_empty());
}

fn sorted_index(b: &[u8]) -> SortedIndex {
    SortedIndex::open(cairn_engine::vfs::Mapped::Bytes(Arc::from(b.to_vec()))).unwrap()
}
