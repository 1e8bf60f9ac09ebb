//! Blob store damage: every byte of a small pack flipped, one at a time;
//! every affected get fails with an integrity error naming the pack file
//! and the entry's offset, and wrong bytes are never returned.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::BlobHash;
use cairn_engine::blob::pack::{encode_entry, EntryHeader, EntryKind, FLAG_ZSTD, PACK_HEADER_LEN};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::vfs::{SimVfs, Vfs};
use cairn_engine::EngineError;

fn dir() -> PathBuf {
    PathBuf::from("/ws/blobs")
}

fn blobs() -> Vec<Vec<u8>> {
    let mut noise = vec![0u8; 300];
    let mut x = 99u64;
    for b in &mut noise {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 32) as u8;
    }
    vec![
        Vec::new(),
        b"x".to_vec(),
        b"fn main() { println!(\"hello\"); }\n".repeat(20),
        noise,
        b"let a = 1;\nlet b = 2;\n".repeat(8),
    ]
}

/// (entry offset, entry end, hash) of every entry of a pack's bytes.
fn entries(pack: &[u8]) -> Vec<(u64, u64, BlobHash)> {
    let mut out = Vec::new();
    let mut off = PACK_HEADER_LEN;
    while off < pack.len() {
        let h = EntryHeader::decode(&pack[off..]).unwrap();
        let end = off + h.entry_len() as usize;
        out.push((off as u64, end as u64, h.hash));
        off = end;
    }
    out
}

fn setup() -> (SimVfs, Arc<dyn Vfs>, PathBuf, Vec<u8>) {
    let d = SimVfs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let s = BlobStore::open(vfs.clone(), &dir(), BlobOptions::default()).unwrap();
    let b = blobs();
    let refs: Vec<&[u8]> = b.iter().map(|x| &x[..]).collect();
    s.put_batch(&refs).unwrap();
    drop(s); // persists the index
    let pack = dir().join("pack-00000001.pack");
    let bytes = d.written_bytes(&pack).unwrap();
    (d, vfs, pack, bytes)
}

#[test]
fn every_flipped_byte_is_caught_and_located() {
    let (d, vfs, pack, orig) = setup();
    let ents = entries(&orig);
    assert_eq!(ents.len(), blobs().len());
    for (i, &byte) in orig.iter().enumerate() {
        d.corrupt(&pack, i as u64, &[!byte]).unwrap();
        let s = BlobStore::open_read_only(vfs.clone(), &dir()).unwrap();
        for b in blobs() {
            let h = BlobHash::of(&b);
            let (off, end, _) = *ents.iter().find(|e| e.2 == h).unwrap();
            let affected = (off..end).contains(&(i as u64));
            match s.get(&h) {
                Ok(got) => {
                    assert!(got == b, "flip at {i}: wrong bytes returned for {h}");
                    assert!(
                        !affected,
                        "flip at {i} inside the entry of {h} went unnoticed"
                    );
                }
                Err(EngineError::BlobIntegrity {
                    hash, path, offset, ..
                }) => {
                    assert!(affected, "flip at {i} broke unaffected blob {h}");
                    assert_eq!((hash, &path, offset), (h, &pack, off), "flip at {i}");
                }
                Err(e) => panic!("flip at {i}: unexpected error for {h}: {e}"),
            }
        }
        let report = s.verify().unwrap();
        let in_entry = ents.iter().any(|e| (e.0..e.1).contains(&(i as u64)));
        assert_eq!(!report.is_ok(), in_entry, "flip at {i}: verify {report:?}");
        d.corrupt(&pack, i as u64, &[byte]).unwrap();
    }
}

#[test]
fn flipped_bytes_with_the_index_gone_never_give_wrong_bytes() {
    let (d, vfs, pack, orig) = setup();
    for i in (0..orig.len()).step_by(3) {
        let fresh = SimVfs::new();
        let fvfs: Arc<dyn Vfs> = Arc::new(fresh.clone());
        fvfs.create_dir_all(&dir()).unwrap();
        let f = fvfs.open(&pack, cairn_engine::OpenMode::CreateNew).unwrap();
        let mut bytes = orig.clone();
        bytes[i] = !bytes[i];
        f.write_all_at(&bytes, 0).unwrap();
        drop(f);
        // Writer mode: the index is rebuilt by scanning the damaged pack.
        let s = BlobStore::open(fvfs, &dir(), BlobOptions::default()).unwrap();
        for b in blobs() {
            let h = BlobHash::of(&b);
            match s.get(&h) {
                Ok(got) => assert!(got == b, "flip at {i}: wrong bytes for {h}"),
                Err(EngineError::BlobNotFound { .. } | EngineError::BlobIntegrity { .. }) => {}
                Err(e) => panic!("flip at {i}: unexpected error {e}"),
            }
        }
        // What is lost can be put again and read back.
        for b in blobs() {
            let h = s.put(&b).unwrap();
            assert_eq!(s.get(&h).unwrap(), b, "flip at {i}: re-put");
        }
    }
    drop((d, vfs));
}

fn append_raw(d: &SimVfs, pack: &Path, entry: &[u8]) {
    let len = d.written_bytes(pack).unwrap().len() as u64;
    d.corrupt(pack, len, entry).unwrap();
}

#[test]
fn a_frame_decompressing_past_its_recorded_length_is_refused() {
    let (d, vfs, pack, _) = setup();
    let raw = vec![b'a'; 1 << 20];
    let h = BlobHash::of(&raw);
    let z = zstd::bulk::compress(&raw, 3).unwrap();
    let mut e = Vec::new();
    // Claims 100 bytes; the frame says (and holds) 1 MiB.
    encode_entry(&mut e, EntryKind::Blob, FLAG_ZSTD, 100, &h, &z);
    append_raw(&d, &pack, &e);
    vfs.remove_file(&dir().join("index")).unwrap();
    let s = BlobStore::open_read_only(vfs.clone(), &dir()).unwrap();
    match s.get(&h) {
        Err(EngineError::BlobIntegrity { detail, offset, .. }) => {
            assert!(detail.contains("exceeds the maximum"), "{detail}");
            assert!(offset > 0);
        }
        other => panic!("expected an integrity error, got {other:?}"),
    }
    assert!(!s.verify().unwrap().is_ok());
}

#[test]
fn an_entry_whose_bytes_do_not_match_its_name_is_refused() {
    let (d, vfs, pack, _) = setup();
    // A well-formed entry (valid CRC) whose contents are not what its name says.
    let claimed = BlobHash::of(b"the real contents");
    let mut e = Vec::new();
    encode_entry(&mut e, EntryKind::Blob, 0, 5, &claimed, b"fake!");
    append_raw(&d, &pack, &e);
    vfs.remove_file(&dir().join("index")).unwrap();
    let s = BlobStore::open_read_only(vfs, &dir()).unwrap();
    assert!(matches!(
        s.get(&claimed),
        Err(EngineError::BlobIntegrity { hash, .. }) if hash == claimed
    ));
    let report = s.verify().unwrap();
    assert!(report.problems.iter().any(|p| p.hash == Some(claimed)));
}

#[test]
fn a_torn_tail_is_truncated_on_open() {
    let (d, vfs, pack, orig) = setup();
    let extra = b"a blob whose write was cut short".repeat(10);
    let mut e = Vec::new();
    encode_entry(
        &mut e,
        EntryKind::Blob,
        0,
        extra.len() as u64,
        &BlobHash::of(&extra),
        &extra,
    );
    append_raw(&d, &pack, &e[..e.len() / 2]);
    let s = BlobStore::open(vfs, &dir(), BlobOptions::default()).unwrap();
    assert_eq!(d.written_bytes(&pack).unwrap().len(), orig.len());
    assert!(!s.contains(&BlobHash::of(&extra)));
    let h = s.put(&extra).unwrap();
    assert_eq!(s.get(&h).unwrap(), extra);
    assert!(s.verify().unwrap().is_ok());
}

#[test]
fn a_pack_cut_short_at_creation_is_removed_and_a_bad_header_rewritten() {
    let (d, vfs, pack, _) = setup();
    let stub = dir().join("pack-00000002.pack");
    let f = vfs.open(&stub, cairn_engine::OpenMode::CreateNew).unwrap();
    f.write_all_at(b"CAIRNPK", 0).unwrap();
    drop(f);
    // Damage the first pack's header too.
    d.corrupt(&pack, 3, b"X").unwrap();
    let s = BlobStore::open(vfs.clone(), &dir(), BlobOptions::default()).unwrap();
    assert!(
        !vfs.exists(&stub),
        "a pack shorter than its header is removed"
    );
    for b in blobs() {
        assert_eq!(s.get(&BlobHash::of(&b)).unwrap(), b);
    }
    assert!(s.verify().unwrap().is_ok());
    let h = s.put(b"after repair").unwrap();
    drop(s);
    // The repaired store opens from its index, with everything in it.
    let s = BlobStore::open_read_only(vfs, &dir()).unwrap();
    assert_eq!(s.get(&h).unwrap(), b"after repair");
    assert_eq!(s.hashes().len(), blobs().len() + 1);
}

/// Bit rot in a stored blob is healed by the next put of the same
/// contents (a checkpoint of the intact workspace file): the put does not
/// dedup against the damaged entry but writes a fresh copy that the index
/// then names, so the blob reads back. Without this,
/// every later checkpoint of those contents named a blob that cannot be
/// read.
#[test]
fn a_put_of_contents_whose_stored_copy_is_damaged_heals_it() {
    let d = SimVfs::new();
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let opts = BlobOptions {
        chunking_threshold_bytes: 64 * 1024,
        ..BlobOptions::default()
    };
    // A whole blob, and a chunked one (cut into content-defined chunks).
    let small = b"fn main() { println!(\"hello\"); }\n".repeat(40);
    let mut big = Vec::new();
    let mut x = 7u64;
    while big.len() < 600 * 1024 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        big.extend_from_slice(format!("line {x:x}\n").as_bytes());
    }
    for (round, contents) in [&small, &big].into_iter().enumerate() {
        let s = BlobStore::open(vfs.clone(), &dir(), opts.clone()).unwrap();
        let h = s.put(contents).unwrap();
        s.sync().unwrap();
        drop(s);
        // Flip a byte near the end of the pack's last written entry's
        // payload (not its header, which holds its length and name).
        let pack = dir().join("pack-00000001.pack");
        let bytes = d.written_bytes(&pack).unwrap();
        let at = bytes.len() as u64 - 10;
        d.corrupt(&pack, at, &[!bytes[at as usize]]).unwrap();
        let s = BlobStore::open(vfs.clone(), &dir(), opts.clone()).unwrap();
        assert!(
            matches!(s.get(&h), Err(EngineError::BlobIntegrity { .. })),
            "the damage is seen"
        );
        assert_eq!(s.put(contents).unwrap(), h);
        s.sync().unwrap();
        assert_eq!(&s.get(&h).unwrap(), contents, "healed");
        drop(s);
        let s = BlobStore::open(vfs.clone(), &dir(), opts.clone()).unwrap();
        assert_eq!(&s.get(&h).unwrap(), contents, "healed for good");
        // The damaged bytes left in the pack are no problem any more: each
        // holds one entry whose blob the index finds intact elsewhere. Verify
        // lists them apart (the disk did rot; gc drops them with their pack).
        let report = s.verify().unwrap();
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.superseded.len(), round + 1, "{report:?}");
        assert!(
            report
                .superseded
                .iter()
                .all(|p| p.hash.is_some() && p.offset < at),
            "{report:?}"
        );
        // A put of intact contents still stores nothing new.
        let before = d.written_bytes(&pack).unwrap().len();
        s.put(contents).unwrap();
        s.sync().unwrap();
        assert_eq!(d.written_bytes(&pack).unwrap().len(), before);
    }
}

#[test]
fn damage_over_two_entries_stays_a_problem_when_one_of_them_is_healed() {
    let (d, vfs, pack, orig) = setup();
    let ents = entries(&orig);
    let b = blobs();
    // Entry 2's payload and entry 3's magic: one damaged span over both,
    // from entry 2 to entry 4 (the scan finds no valid entry between).
    let (off2, end2, h2) = ents[2];
    let (off3, _, h3) = ents[3];
    // The payload's last byte (the header holds the blob's name).
    let mid = end2 - 1;
    d.corrupt(&pack, mid, &[!orig[mid as usize]]).unwrap();
    d.corrupt(&pack, off3, &[!orig[off3 as usize]]).unwrap();
    let s = BlobStore::open(vfs.clone(), &dir(), BlobOptions::default()).unwrap();
    // Heal entry 2 only: its blob is intact elsewhere, entry 3's is not.
    assert_eq!(s.put(&b[2]).unwrap(), h2);
    s.sync().unwrap();
    assert_eq!(s.get(&h2).unwrap(), b[2]);
    assert!(s.get(&h3).is_err());
    let report = s.verify().unwrap();
    assert!(!report.is_ok(), "{report:?}");
    assert!(report.superseded.is_empty(), "{report:?}");
    // Heal entry 3 as well: still one span over two entries, which verify
    // cannot vouch for entry by entry, so it stays named.
    assert_eq!(s.put(&b[3]).unwrap(), h3);
    s.sync().unwrap();
    let report = s.verify().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.offset == off2 && p.hash.is_none()),
        "{report:?}"
    );
}

#[test]
fn a_healed_entry_with_a_damaged_payload_or_name_is_superseded_not_a_problem() {
    let (off2, end2, _) = entries(&setup().3)[2];
    // The payload's last byte; a byte of the name in the header (bytes
    // 24..56), which the contents, still intact, show to be a copy.
    for at in [end2 - 1, off2 + 30] {
        let (d, vfs, pack, orig) = setup();
        let b = blobs();
        let h2 = BlobHash::of(&b[2]);
        d.corrupt(&pack, at, &[!orig[at as usize]]).unwrap();
        let s = BlobStore::open(vfs.clone(), &dir(), BlobOptions::default()).unwrap();
        let report = s.verify().unwrap();
        assert!(
            !report.is_ok() && report.superseded.is_empty(),
            "{report:?}"
        );
        assert_eq!(s.put(&b[2]).unwrap(), h2);
        s.sync().unwrap();
        drop(s);
        let s = BlobStore::open_read_only(vfs, &dir()).unwrap();
        let report = s.verify().unwrap();
        assert!(report.is_ok(), "flip at {at}: {report:?}");
        assert_eq!(report.superseded.len(), 1, "{report:?}");
        assert_eq!(
            (report.superseded[0].hash, report.superseded[0].offset),
            (Some(h2), off2)
        );
    }
}
