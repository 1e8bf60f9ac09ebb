//! Blob store: round trips, dedup, durability bookkeeping, reopen and
//! index rebuild, on the real file system.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use cairn_codec::BlobHash;
use cairn_engine::blob::{BlobOptions, BlobStore, GcOptions};
use cairn_engine::{EngineError, RealVfs};

fn open(dir: &Path) -> BlobStore {
    BlobStore::open(Arc::new(RealVfs), dir, BlobOptions::default()).unwrap()
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn text(len: usize, seed: u64) -> Vec<u8> {
    let words = [
        "fn", "let", "mut", "self", "match", "impl", "value", "error", "=>", "{", "}",
    ];
    let mut x = seed.wrapping_mul(2).wrapping_add(1);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
        out.push(if x.is_multiple_of(7) { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

fn pack_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn round_trips_empty_tiny_text_incompressible_and_chunked() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let blobs = vec![
        Vec::new(),
        b"x".to_vec(),
        text(100_000, 1),
        noise(50_000, 2),
        noise(6 << 20, 3),
        text(6 << 20, 4),
    ];
    let mut hashes = Vec::new();
    for b in &blobs {
        let h = s.put(b).unwrap();
        assert_eq!(h, BlobHash::of(b));
        assert_eq!(s.get(&h).unwrap(), *b);
        assert_eq!(s.raw_len(&h), Some(b.len() as u64));
        assert!(s.contains(&h));
        hashes.push(h);
    }
    let st = s.stats();
    assert!(st.chunks >= 4, "6 MiB blobs are chunked: {st:?}");
    assert_eq!(st.blobs, blobs.len() as u64);
    s.sync().unwrap();
    drop(s);
    let s = open(tmp.path());
    for (b, h) in blobs.iter().zip(&hashes) {
        assert_eq!(s.get(h).unwrap(), *b);
        let mut out = Vec::new();
        assert_eq!(s.get_to(h, &mut out).unwrap(), b.len() as u64);
        assert_eq!(out, *b);
    }
    let mut listed = s.hashes();
    listed.sort();
    let mut expected = hashes.clone();
    expected.sort();
    assert_eq!(
        listed, expected,
        "hashes() lists top-level blobs, not chunks"
    );
    assert!(s.verify().unwrap().is_ok());
}

#[test]
fn missing_blob_is_not_found() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let h = BlobHash::of(b"never stored");
    assert!(matches!(s.get(&h), Err(EngineError::BlobNotFound { hash }) if hash == h));
    assert!(!s.contains(&h));
    assert_eq!(s.raw_len(&h), None);
}

#[test]
fn second_put_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let a = text(20_000, 9);
    let big = text(3 << 20, 10);
    s.put(&a).unwrap();
    s.put(&big).unwrap();
    s.sync().unwrap();
    let before = pack_bytes(tmp.path());
    assert!(!s.has_unsynced());
    s.put(&a).unwrap();
    s.put(&big).unwrap();
    s.put_batch(&[&a, &big]).unwrap();
    assert!(!s.has_unsynced(), "dedup hits append nothing");
    assert_eq!(pack_bytes(tmp.path()), before);
}

#[test]
fn sync_and_put_batch_make_puts_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    assert!(!s.has_unsynced());
    s.put(b"one").unwrap();
    assert!(s.has_unsynced());
    s.sync().unwrap();
    assert!(!s.has_unsynced());
    s.put(b"two").unwrap();
    let hs = s.put_batch(&[b"three", b"four", b"two"]).unwrap();
    assert_eq!(hs[2], BlobHash::of(b"two"));
    assert!(!s.has_unsynced());
}

#[test]
fn appending_to_a_large_file_stores_little() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let mut big = noise(12 << 20, 5);
    s.put(&big).unwrap();
    s.sync().unwrap();
    let before = pack_bytes(tmp.path());
    big.extend_from_slice(&noise(1 << 20, 6));
    let h = s.put(&big).unwrap();
    s.sync().unwrap();
    let added = pack_bytes(tmp.path()) - before;
    assert!(added < 3 << 20, "appending 1 MiB stored {added} new bytes");
    assert_eq!(s.get(&h).unwrap(), big);
}

#[test]
fn streaming_put_matches_put() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    for b in [
        Vec::new(),
        text(1000, 1),
        text(1 << 20, 2),
        noise(5 << 20, 3),
    ] {
        let (h, n) = s.put_reader(&mut &b[..]).unwrap();
        assert_eq!(h, BlobHash::of(&b));
        assert_eq!(n, b.len() as u64);
        assert_eq!(s.get(&h).unwrap(), b);
    }
    let file = tmp.path().join("workspace-file");
    let b = text(2 << 20, 7);
    std::fs::write(&file, &b).unwrap();
    let (h, n) = s.put_file(&file).unwrap();
    assert_eq!((h, n), (BlobHash::of(&b), b.len() as u64));
    assert!(matches!(
        s.put_file(&tmp.path().join("missing")),
        Err(EngineError::Io { .. })
    ));
}

#[test]
fn index_deleted_or_damaged_is_rebuilt_with_the_same_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let blobs: Vec<Vec<u8>> = (0..50)
        .map(|i| text(1000 + i * 300, i as u64))
        .chain([noise(3 << 20, 77)])
        .collect();
    {
        let s = open(tmp.path());
        let refs: Vec<&[u8]> = blobs.iter().map(|b| &b[..]).collect();
        s.put_batch(&refs).unwrap();
    }
    let index = tmp.path().join("index");
    assert!(index.exists());
    let check = |s: &BlobStore| {
        assert_eq!(s.hashes().len(), blobs.len());
        for b in &blobs {
            assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
        }
    };
    std::fs::remove_file(&index).unwrap();
    check(&open(tmp.path()));
    // Damaged.
    let mut bytes = std::fs::read(&index).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&index, &bytes).unwrap();
    check(&open(tmp.path()));
    // Stale: an index from an earlier state, then more blobs appended.
    let old = std::fs::read(&index).unwrap();
    let extra = text(5000, 999);
    {
        let s = open(tmp.path());
        s.put_batch(&[&extra]).unwrap();
    }
    std::fs::write(&index, &old).unwrap();
    let s = open(tmp.path());
    check_extra(&s, &extra);
    // Leftover temp file from a crash is removed.
    drop(s);
    std::fs::write(tmp.path().join("index.tmp"), b"partial").unwrap();
    let s = open(tmp.path());
    assert!(!tmp.path().join("index.tmp").exists());
    check_extra(&s, &extra);
}

fn check_extra(s: &BlobStore, extra: &[u8]) {
    assert_eq!(s.get(&BlobHash::of(extra)).unwrap(), extra);
}

#[test]
fn read_only_store_reads_and_refuses_puts() {
    let tmp = tempfile::tempdir().unwrap();
    let w = open(tmp.path());
    let h = w.put(b"hello").unwrap();
    w.sync().unwrap();
    let r = BlobStore::open_read_only(Arc::new(RealVfs), tmp.path()).unwrap();
    assert_eq!(r.get(&h).unwrap(), b"hello");
    assert!(matches!(r.put(b"x"), Err(EngineError::Invalid(_))));
    // A blob the writer adds later is found.
    let h2 = w.put(b"later").unwrap();
    w.sync().unwrap();
    assert_eq!(r.get(&h2).unwrap(), b"later");
}

#[test]
fn concurrent_puts_and_gets() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Arc::new(open(tmp.path()));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..200u64 {
                    // Half the blobs are shared between threads.
                    let b = text(2000, if i % 2 == 0 { i } else { 1000 * (t + 1) + i });
                    let h = s.put(&b).unwrap();
                    assert_eq!(s.get(&h).unwrap(), b);
                }
                s.sync().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.stats().blobs, 100 + 4 * 100);
    assert!(s.verify().unwrap().is_ok());
}

#[test]
fn packs_roll_at_the_size_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = BlobOptions {
        pack_size_bytes: 64 * 1024,
        ..BlobOptions::default()
    };
    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), opts.clone()).unwrap();
    let blobs: Vec<Vec<u8>> = (0..40).map(|i| noise(10_000, i + 1)).collect();
    for b in &blobs {
        s.put(b).unwrap();
    }
    s.sync().unwrap();
    assert!(s.stats().packs >= 5);
    drop(s);
    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), opts).unwrap();
    for b in &blobs {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
}

#[test]
fn gc_removes_dead_blobs_and_keeps_live_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let live: Vec<Vec<u8>> = (0..20)
        .map(|i| text(3000, i))
        .chain([noise(3 << 20, 1)])
        .collect();
    let dead: Vec<Vec<u8>> = (100..160)
        .map(|i| text(3000, i))
        .chain([noise(3 << 20, 2)])
        .collect();
    for b in live.iter().chain(&dead) {
        s.put(b).unwrap();
    }
    let roots: HashSet<BlobHash> = live.iter().map(|b| BlobHash::of(b)).collect();
    let before = pack_bytes(tmp.path());
    let report = s.gc(&roots, GcOptions::default()).unwrap();
    assert_eq!(report.packs_rewritten, 1, "{report:?}");
    assert!(pack_bytes(tmp.path()) < before / 2, "{report:?}");
    for b in &live {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
    for b in &dead {
        assert!(!s.contains(&BlobHash::of(b)));
    }
    drop(s);
    let s = open(tmp.path());
    for b in &live {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
    for b in &dead {
        assert!(!s.contains(&BlobHash::of(b)));
    }
    assert!(s.verify().unwrap().is_ok());
    // Dead blobs put again are stored again.
    let h = s.put(&dead[0]).unwrap();
    assert_eq!(s.get(&h).unwrap(), dead[0]);
}

/// One pack mostly live with one dead blob (below the rewrite threshold):
/// the live blob, 100 KB of noise, and the dead one, 20 KB of noise.
fn a_pack_a_little_dead(dir: &Path) -> (BlobStore, Vec<u8>, Vec<u8>) {
    let s = open(dir);
    let live = noise(100_000, 11);
    let dead = noise(20_000, 12);
    s.put(&live).unwrap();
    s.put(&dead).unwrap();
    s.sync().unwrap();
    (s, live, dead)
}

/// T13-N3: an ordinary gc leaves a dead blob whose pack is below the
/// rewrite threshold readable, and says so (how many, how many bytes); a
/// compacting gc rewrites that pack, so the blob cannot be read any more,
/// before or after a reopen, and the live one can.
#[test]
fn gc_counts_what_it_leaves_below_the_threshold_and_compact_removes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, live, dead) = a_pack_a_little_dead(tmp.path());
    let roots: HashSet<BlobHash> = [BlobHash::of(&live)].into_iter().collect();
    let r = s.gc(&roots, GcOptions::default()).unwrap();
    assert_eq!((r.packs_rewritten, r.blobs_removed), (0, 0), "{r:?}");
    assert_eq!(r.left_below_threshold.blobs, 1, "{r:?}");
    assert!(r.left_below_threshold.dead_bytes >= 20_000, "{r:?}");
    assert_eq!(r.left_in_kept_packs, Default::default(), "{r:?}");
    assert_eq!(s.get(&BlobHash::of(&dead)).unwrap(), dead, "still readable");

    let before = pack_bytes(tmp.path());
    let r = s.gc(&roots, GcOptions::compact()).unwrap();
    assert_eq!((r.packs_rewritten, r.blobs_removed), (1, 1), "{r:?}");
    assert_eq!(r.left(), Default::default(), "{r:?}");
    assert!(pack_bytes(tmp.path()) <= before - 20_000, "{r:?}");
    assert!(matches!(
        s.get(&BlobHash::of(&dead)),
        Err(EngineError::BlobNotFound { .. })
    ));
    assert_eq!(s.get(&BlobHash::of(&live)).unwrap(), live);
    drop(s);
    let s = open(tmp.path());
    assert!(!s.contains(&BlobHash::of(&dead)), "gone after a reopen too");
    assert_eq!(s.get(&BlobHash::of(&live)).unwrap(), live);
    assert!(s.verify().unwrap().is_ok());
    // No pack file holds the dead blob's bytes any more (it is noise, so
    // stored raw: a window of it would show in a pack).
    for e in std::fs::read_dir(tmp.path()).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        assert!(!bytes.windows(64).any(|w| w == &dead[1000..1064]));
    }
}

/// T13-N3: with a budget for the bytes on disk, gc rewrites a pack below
/// the threshold when that is what it takes to fit, and not otherwise.
#[test]
fn gc_rewrites_packs_below_the_threshold_to_meet_a_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, live, dead) = a_pack_a_little_dead(tmp.path());
    let roots: HashSet<BlobHash> = [BlobHash::of(&live)].into_iter().collect();
    let stored = s.stats().stored_bytes;
    let within = GcOptions {
        max_stored_bytes: Some(stored),
        ..GcOptions::default()
    };
    let r = s.gc(&roots, within).unwrap();
    assert_eq!(r.packs_rewritten, 0, "{r:?}");
    assert!(s.contains(&BlobHash::of(&dead)));
    let over = GcOptions {
        max_stored_bytes: Some(stored - 1),
        ..GcOptions::default()
    };
    let r = s.gc(&roots, over).unwrap();
    assert_eq!(
        (
            r.packs_rewritten,
            r.packs_rewritten_for_budget,
            r.blobs_removed
        ),
        (1, 1, 1),
        "{r:?}"
    );
    assert!(r.bytes_after < stored - 20_000, "{r:?}");
    assert!(!s.contains(&BlobHash::of(&dead)));
    assert_eq!(s.get(&BlobHash::of(&live)).unwrap(), live);
}

/// Regression: a blob over the chunking threshold with no cut point is a
/// single chunk whose hash equals the blob's; it used to be stored as a
/// chunk list naming itself, and every get failed.
#[test]
fn regression_single_chunk_blob_is_stored_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let zeros = vec![0u8; 3 << 20];
    assert_eq!(cairn_engine::blob::chunking::cut_points(&zeros).count(), 1);
    let h = s.put(&zeros).unwrap();
    assert_eq!(s.get(&h).unwrap(), zeros);
    let ones = vec![1u8; 3 << 20];
    let (h1, _) = s.put_reader(&mut &ones[..]).unwrap();
    assert_eq!(s.get(&h1).unwrap(), ones);
    drop(s);
    std::fs::remove_file(tmp.path().join("index")).unwrap();
    let s = open(tmp.path());
    assert_eq!(s.get(&h).unwrap(), zeros);
    assert_eq!(s.get(&h1).unwrap(), ones);
    assert!(s.verify().unwrap().is_ok());
}

/// A deterministic byte stream of `left` bytes, generated as it is read.
struct Generated {
    left: u64,
    x: u64,
}

impl std::io::Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        for b in &mut buf[..n] {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            *b = (self.x >> 32) as u8;
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Hashes what is written to it, keeping nothing.
struct HashingWriter(blake3::Hasher, u64);

impl std::io::Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        self.1 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn streaming_put_and_get_of_a_large_file_never_hold_it_whole() {
    // 2 GiB with CAIRN_SOAK=1 (the size); 24 MiB otherwise.
    let len: u64 = if std::env::var("CAIRN_SOAK").is_ok() {
        2 << 30
    } else {
        24 << 20
    };
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let mut w = HashingWriter(blake3::Hasher::new(), 0);
    std::io::copy(&mut Generated { left: len, x: 5 }, &mut w).unwrap();
    let expected = BlobHash(*w.0.finalize().as_bytes());
    let (h, n) = s.put_reader(&mut Generated { left: len, x: 5 }).unwrap();
    assert_eq!((h, n), (expected, len));
    s.sync().unwrap();
    let mut w = HashingWriter(blake3::Hasher::new(), 0);
    assert_eq!(s.get_to(&h, &mut w).unwrap(), len);
    assert_eq!(BlobHash(*w.0.finalize().as_bytes()), expected);
    assert_eq!(w.1, len);
    assert_eq!(s.raw_len(&h), Some(len));
}

#[test]
fn gets_keep_working_while_gc_moves_blobs() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Arc::new(open(tmp.path()));
    let live: Vec<Vec<u8>> = (0..30)
        .map(|i| text(4000, 7000 + i))
        .chain([noise(2 << 20, 9)])
        .collect();
    for b in &live {
        s.put(b).unwrap();
    }
    let roots: HashSet<BlobHash> = live.iter().map(|b| BlobHash::of(b)).collect();
    let live = Arc::new(live);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (s, live, stop) = (s.clone(), live.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 50 {
                    let b = &live[(n as usize * 7 + t) % live.len()];
                    assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
                    n += 1;
                }
            })
        })
        .collect();
    for round in 0..6u64 {
        // Garbage to collect, then a gc that moves every live blob.
        for i in 0..40 {
            s.put(&text(4000, round * 1000 + i)).unwrap();
        }
        let r = s.gc(&roots, GcOptions::compact()).unwrap();
        assert!(r.packs_rewritten >= 1, "{r:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(s.verify().unwrap().is_ok());
}

/// A dead chunk list must go with its dead chunks: gc rewriting the packs of
/// the chunks but not the (mostly live) pack of the list would leave a blob
/// that cannot be read and a `verify` that reports damage in a healthy
/// store (found by the crash workload, seed 1459).
#[test]
fn gc_never_leaves_a_dead_chunk_list_without_its_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = BlobOptions {
        pack_size_bytes: 64 * 1024,
        chunking_threshold_bytes: 16 * 1024,
        ..BlobOptions::default()
    };
    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), opts).unwrap();
    // `first`'s chunks (about 1 MiB each) fill the first packs. `second`
    // shares all but its last chunk, so its chunk list lands alone in a
    // later pack, which the live blobs put next fill up.
    let first = noise(3 << 20, 7);
    s.put(&first).unwrap();
    s.sync().unwrap();
    let mut second = first.clone();
    second.extend_from_slice(b"a small change at the end");
    s.put(&second).unwrap();
    let live: Vec<Vec<u8>> = (0..2).map(|i| noise(14_000, 100 + i)).collect();
    for b in &live {
        s.put(b).unwrap();
    }
    s.sync().unwrap();
    let roots: HashSet<BlobHash> = live.iter().map(|b| BlobHash::of(b)).collect();
    let report = s.gc(&roots, GcOptions::default()).unwrap();
    assert!(report.packs_rewritten > 0, "{report:?}");
    let v = s.verify().unwrap();
    assert!(v.is_ok(), "{v:?}");
    for b in &live {
        assert_eq!(s.get(&BlobHash::of(b)).unwrap(), *b);
    }
    drop(s);
    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), BlobOptions::default()).unwrap();
    let v = s.verify().unwrap();
    assert!(v.is_ok(), "after reopen: {v:?}");
}

/// The store trains its zstd dictionary from the first small blobs, then
/// compresses later ones with it: smaller packs, the same bytes back after
/// a reopen, a clean verify, a gc that keeps them readable; and without the
/// dictionary file, an error that names it rather than wrong bytes.
#[test]
fn dictionary_is_trained_used_and_needed() {
    let first: Vec<Vec<u8>> = (0..120).map(|i| text(3000, i + 1)).collect();
    let later: Vec<Vec<u8>> = (0..120).map(|i| text(3000, i + 1000)).collect();
    let opts = BlobOptions {
        dictionary_sample_bytes: 128 * 1024,
        ..BlobOptions::default()
    };
    let stored_later = |dictionary_sample_bytes: u64| {
        let tmp = tempfile::tempdir().unwrap();
        let s = BlobStore::open(
            Arc::new(RealVfs),
            tmp.path(),
            BlobOptions {
                dictionary_sample_bytes,
                ..BlobOptions::default()
            },
        )
        .unwrap();
        for b in &first {
            s.put(b).unwrap();
        }
        s.wait_for_dictionary();
        let before = s.stats().stored_bytes;
        for b in &later {
            s.put(b).unwrap();
        }
        s.stats().stored_bytes - before
    };
    let (with, without) = (stored_later(128 * 1024), stored_later(0));
    assert!(
        with < without,
        "with a dictionary {with} bytes, without {without}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), opts.clone()).unwrap();
    for b in &first {
        s.put(b).unwrap();
    }
    let id = s.wait_for_dictionary().expect("a dictionary was trained");
    let name = format!("dict-{id:08x}.zstd");
    assert_eq!(s.stats().dictionary.as_deref(), Some(name.as_str()));
    let hashes: Vec<BlobHash> = later.iter().map(|b| s.put(b).unwrap()).collect();
    s.sync().unwrap();
    drop(s);

    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), opts.clone()).unwrap();
    for (h, b) in hashes.iter().zip(&later) {
        assert_eq!(&s.get(h).unwrap(), b);
    }
    assert!(s.verify().unwrap().problems.is_empty());
    // A read-only reader finds the dictionary too.
    let ro = BlobStore::open_read_only(Arc::new(RealVfs), tmp.path()).unwrap();
    assert_eq!(&ro.get(&hashes[0]).unwrap(), &later[0]);
    drop(ro);
    // gc copies entries byte for byte: they still need, and find, it.
    let live: HashSet<BlobHash> = hashes[..60].iter().copied().collect();
    s.gc(&live, GcOptions::compact()).unwrap();
    for (h, b) in hashes[..60].iter().zip(&later) {
        assert_eq!(&s.get(h).unwrap(), b);
    }
    drop(s);

    // The file lost, its second copy stands in (a read-only reader reads
    // it; a writable open writes the file again from it).
    let dict_file = tmp.path().join(&name);
    let good = std::fs::read(&dict_file).unwrap();
    std::fs::remove_file(&dict_file).unwrap();
    let ro = BlobStore::open_read_only(Arc::new(RealVfs), tmp.path()).unwrap();
    assert_eq!(&ro.get(&hashes[0]).unwrap(), &later[0]);
    drop(ro);
    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), opts.clone()).unwrap();
    assert_eq!(&s.get(&hashes[0]).unwrap(), &later[0]);
    drop(s);
    assert_eq!(std::fs::read(&dict_file).unwrap(), good);

    // Both lost: what needs it is refused, naming the file.
    std::fs::remove_file(tmp.path().join(cairn_engine::dicts::copy_name(id))).unwrap();
    std::fs::remove_file(&dict_file).unwrap();
    let s = BlobStore::open(Arc::new(RealVfs), tmp.path(), opts).unwrap();
    let err = s.get(&hashes[0]).unwrap_err();
    assert!(matches!(err, EngineError::BlobIntegrity { .. }), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    assert!(!s.verify().unwrap().problems.is_empty());
}
