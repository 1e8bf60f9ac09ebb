//! The persisted blob index (version 2, sorted and mapped): a short
//! process leaves its few entries to the pack tails instead of rewriting
//! the file; a long tail is merged into a new file at close; a version 1
//! file is migrated on open; a damaged bucket is never trusted; and a crash
//! at every operation between appending entries and renaming the new file
//! into place never loses a synced blob nor invents one.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_codec::BlobHash;
use cairn_engine::blob::delta::DELTA_FILE;
use cairn_engine::blob::index::{IndexSnapshot, INDEX_FILE, INDEX_MAGIC};
use cairn_engine::blob::options::INDEX_TAIL_MAX_ENTRIES;
use cairn_engine::blob::sorted::{SortedIndex, SORTED_INDEX_MAGIC};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::vfs::{Fault, SimVfs, Vfs};
use cairn_engine::EngineError;

fn dir() -> PathBuf {
    PathBuf::from("/ws/.cairn/blobs")
}

fn index_path() -> PathBuf {
    dir().join(INDEX_FILE)
}

fn disk() -> SimVfs {
    let d = SimVfs::seeded(3);
    d.create_dir_all(&dir()).unwrap();
    for p in ["/", "/ws", "/ws/.cairn"] {
        d.sync_dir(Path::new(p)).unwrap();
    }
    d
}

fn open(d: &SimVfs) -> BlobStore {
    BlobStore::open(Arc::new(d.clone()), &dir(), BlobOptions::default()).unwrap()
}

/// `n` small distinct blobs, numbered from `from`.
fn blobs(from: usize, n: usize) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|i| format!("fn f{i}() -> u32 {{ {i} }}\n").into_bytes())
        .collect()
}

fn put_all(s: &BlobStore, b: &[Vec<u8>]) -> Result<Vec<BlobHash>, EngineError> {
    let refs: Vec<&[u8]> = b.iter().map(|x| &x[..]).collect();
    s.put_batch(&refs)
}

fn read(d: &SimVfs, p: &Path) -> Vec<u8> {
    let f = d.open(p, cairn_engine::vfs::OpenMode::Read).unwrap();
    let mut b = vec![0u8; f.len().unwrap() as usize];
    f.read_exact_at(&mut b, 0).unwrap();
    b
}

fn write(d: &SimVfs, p: &Path, bytes: &[u8]) {
    let f = d
        .open(p, cairn_engine::vfs::OpenMode::CreateTruncate)
        .unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_data().unwrap();
}

/// A store with `n` blobs whose index file covers them all.
fn store_with(d: &SimVfs, n: usize) -> Vec<Vec<u8>> {
    let s = open(d);
    let b = blobs(0, n);
    put_all(&s, &b).unwrap();
    s.persist_index().unwrap();
    b
}

#[test]
fn a_short_process_leaves_the_index_file_alone_and_the_next_open_finds_its_blobs() {
    let d = disk();
    let base = store_with(&d, 100);
    let before = read(&d, &index_path());
    assert_eq!(&before[..8], &SORTED_INDEX_MAGIC);
    // A hook-sized process: two blobs, synced, closed.
    let extra = blobs(1000, 2);
    {
        let s = open(&d);
        put_all(&s, &extra).unwrap();
    }
    assert_eq!(read(&d, &index_path()), before, "the index was rewritten");
    let s = open(&d);
    for b in base.iter().chain(&extra) {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
    assert_eq!(s.hashes().len(), 102);
    assert!(s.verify().unwrap().problems.is_empty());
}

/// The delta is a hint never fsynced: torn, flipped or gone, the next
/// open finds the same blobs by scanning the pack tails.
#[test]
fn a_damaged_or_missing_index_delta_falls_back_to_the_pack_tails() {
    let d = disk();
    let base = store_with(&d, 20);
    let extra = blobs(1000, 5);
    {
        let s = open(&d);
        put_all(&s, &extra).unwrap();
    }
    let delta = dir().join(DELTA_FILE);
    let len = read(&d, &delta).len() as u64;
    assert!(len > 0, "the short process wrote no delta frame");
    for at in [0, len / 2, len - 1] {
        d.corrupt(&delta, at, &[0xFF]).unwrap();
        let s = open(&d);
        for b in base.iter().chain(&extra) {
            assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b, "flip at {at}");
        }
    }
    d.remove_file(&delta).unwrap();
    let s = open(&d);
    for b in base.iter().chain(&extra) {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
}

#[test]
fn a_tail_past_the_threshold_is_merged_into_a_new_index_at_close() {
    let d = disk();
    let base = store_with(&d, 10);
    let before = read(&d, &index_path());
    let extra = blobs(1000, INDEX_TAIL_MAX_ENTRIES + 1);
    {
        let s = open(&d);
        put_all(&s, &extra).unwrap();
    }
    let after = read(&d, &index_path());
    assert_ne!(after, before, "a long tail was left unmerged");
    let idx = SortedIndex::open(d.map(&index_path()).unwrap()).unwrap();
    assert_eq!(idx.len(), base.len() + extra.len());
    let s = open(&d);
    for b in base.iter().chain(&extra) {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
}

/// A store whose index file the version 1 writer wrote (its encoder is
/// kept for reading old stores): a writer opens it, migrates it to the
/// current format, and finds every blob; a reader opens it as it is.
#[test]
fn a_version_1_index_is_read_and_migrated_on_open() {
    let d = disk();
    let base = store_with(&d, 300);
    let v2 = SortedIndex::open(d.map(&index_path()).unwrap()).unwrap();
    let v1 = v2.to_snapshot().unwrap().encode();
    drop(v2);
    assert_eq!(&v1[..8], &INDEX_MAGIC);
    write(&d, &index_path(), &v1);
    {
        let r = BlobStore::open_read_only(Arc::new(d.clone()), &dir()).unwrap();
        for b in &base {
            assert_eq!(r.get(&BlobHash::of(b)).unwrap(), *b);
        }
    }
    assert_eq!(read(&d, &index_path()), v1, "a reader changed the file");
    let s = open(&d);
    let now = read(&d, &index_path());
    assert_eq!(&now[..8], &SORTED_INDEX_MAGIC, "not migrated");
    for b in &base {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
    let migrated = SortedIndex::open(d.map(&index_path()).unwrap()).unwrap();
    let mut want = IndexSnapshot::decode(&v1).unwrap().entries;
    want.sort_by_key(|a| a.0 .0);
    assert_eq!(migrated.entries().unwrap(), want);
}

/// A bucket damaged after open is found by the lookup that reads it: the
/// store rebuilds its index from the packs (the blob is still found),
/// verify names the file, and the close writes a good one.
#[test]
fn a_damaged_bucket_is_rebuilt_from_the_packs_and_reported() {
    let d = disk();
    let base = store_with(&d, 400);
    let len = read(&d, &index_path()).len() as u64;
    // A byte in the middle of the entry rows (past the head).
    d.corrupt(&index_path(), len - 64 * 150 + 40, &[0xAA])
        .unwrap();
    {
        let s = open(&d);
        for b in &base {
            assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
        }
    }
    // The close rewrote it: a fresh open and verify find nothing wrong.
    let s = open(&d);
    assert!(s.verify().unwrap().problems.is_empty());
    drop(s);
    d.corrupt(&index_path(), len - 64 * 150 + 40, &[0x55])
        .unwrap();
    let s = BlobStore::open_read_only(Arc::new(d.clone()), &dir()).unwrap();
    let report = s.verify().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.path == index_path() && p.detail.contains("index file is damaged")),
        "verify did not name the damaged index: {:?}",
        report.problems
    );
    for b in &base {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
}

/// Makes every operation from the `n`-th on fail, so the "process" stops
/// making progress there; returns the operation counter.
fn stop_after(d: &SimVfs, n: u64) -> Arc<AtomicU64> {
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    d.set_fault_hook(move |_| {
        if c.fetch_add(1, Ordering::SeqCst) >= n {
            Some(Fault::WriteEio)
        } else {
            None
        }
    });
    count
}

/// Two processes: the first stores a few blobs (left in the pack tail),
/// the second enough to make its close merge the tail into a new index
/// file (temporary file, fsync, rename, directory fsync). Returns which
/// batches were synced.
fn two_processes(d: &SimVfs, small: &[Vec<u8>], large: &[Vec<u8>]) -> (bool, bool) {
    let first = match BlobStore::open(Arc::new(d.clone()), &dir(), BlobOptions::default()) {
        Ok(s) => put_all(&s, small).is_ok(),
        Err(_) => return (false, false),
    };
    let second = match BlobStore::open(Arc::new(d.clone()), &dir(), BlobOptions::default()) {
        Ok(s) => first && put_all(&s, large).is_ok(),
        Err(_) => false,
    };
    (first, second)
}

/// A crash at every operation from the first process's puts to the
/// rename of the merged index (and its directory fsync): after recovery
/// every blob synced before the crash is there with its bytes, every
/// other blob of the window is intact or absent, and nothing else is
/// listed.
#[test]
fn a_crash_between_tail_appends_and_the_index_rename_never_loses_or_invents_an_entry() {
    let small = blobs(5000, 3);
    let large = blobs(6000, INDEX_TAIL_MAX_ENTRIES + 8);
    let total = {
        let d = disk();
        store_with(&d, 50);
        let c = stop_after(&d, u64::MAX);
        assert_eq!(two_processes(&d, &small, &large), (true, true));
        c.load(Ordering::SeqCst)
    };
    assert!(total > 20, "the window does real work: {total} ops");
    // Every operation near the merge, and a sample before it (the puts of
    // the large batch are many alike writes).
    let ops: Vec<u64> = (0..total)
        .filter(|n| *n < 40 || *n + 40 > total || n % 37 == 0)
        .chain([total])
        .collect();
    for n in ops {
        let d = disk();
        let base = store_with(&d, 50);
        stop_after(&d, n);
        let (first, second) = two_processes(&d, &small, &large);
        d.crash_tearing();
        d.clear_faults();
        let ctx = format!("stopped at op {n} of {total}");
        let s = open(&d);
        let mut must: Vec<&Vec<u8>> = base.iter().collect();
        let mut may: Vec<&Vec<u8>> = Vec::new();
        for (synced, set) in [(first, &small), (second, &large)] {
            if synced {
                must.extend(set.iter());
            } else {
                may.extend(set.iter());
            }
        }
        for b in &must {
            let h = BlobHash::of(b);
            match s.get(&h) {
                Ok(got) => assert!(got == **b, "{ctx}: wrong bytes for {h}"),
                Err(e) => panic!("{ctx}: synced blob {h} lost: {e}"),
            }
        }
        for b in &may {
            let h = BlobHash::of(b);
            match s.get(&h) {
                Ok(got) => assert!(got == **b, "{ctx}: wrong bytes for {h}"),
                Err(EngineError::BlobNotFound { .. }) => {}
                Err(e) => panic!("{ctx}: blob {h} neither absent nor intact: {e}"),
            }
        }
        let known: HashSet<BlobHash> = must.iter().chain(&may).map(|b| BlobHash::of(b)).collect();
        for h in s.hashes() {
            assert!(known.contains(&h), "{ctx}: invented blob {h}");
        }
        assert!(!s.contains(&BlobHash::of(b"never stored")), "{ctx}");
        let synced: HashSet<BlobHash> = must.iter().map(|b| BlobHash::of(b)).collect();
        for p in &s.verify().unwrap().problems {
            assert!(
                !p.hash.is_some_and(|h| synced.contains(&h)),
                "{ctx}: verify flags synced blob: {p}"
            );
        }
    }
}
