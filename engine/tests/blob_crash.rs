//! Blob store crash safety on the simulated disk: a crash at every
//! operation of a batch put and of a garbage collection loses no blob that
//! was durable before, and never makes a get return wrong bytes.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_codec::BlobHash;
use cairn_engine::blob::{BlobOptions, BlobStore, GcOptions};
use cairn_engine::vfs::{Fault, SimVfs, Vfs};
use cairn_engine::EngineError;

mod support;

fn dir() -> PathBuf {
    PathBuf::from("/ws/.cairn/blobs")
}

fn opts() -> BlobOptions {
    BlobOptions {
        // Small packs, so the scenarios roll packs too.
        pack_size_bytes: 64 * 1024,
        ..BlobOptions::default()
    }
}

fn disk(seed: u64) -> SimVfs {
    let d = SimVfs::seeded(seed);
    d.create_dir_all(&dir()).unwrap();
    for p in ["/", "/ws", "/ws/.cairn"] {
        d.sync_dir(Path::new(p)).unwrap();
    }
    d
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    support::xorshift(seed)
        .take(len)
        .map(|x| (x >> 24) as u8)
        .collect()
}

fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = seed;
    while out.len() < len {
        out.extend_from_slice(format!("let value_{i} = compute({i}, {});\n", i % 17).as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Blobs made durable before the crash window.
fn durable_set() -> Vec<Vec<u8>> {
    // The chunked blob first: its chunk list then shares a pack with the
    // small blobs, so gc has a chunk list to copy.
    let mut v = vec![noise(1_600_000, 2)];
    v.extend((0..12).map(|i| text(3000 + i * 100, i as u64 * 1000)));
    v.push(noise(40_000, 1));
    v
}

/// Blobs put in the crash window.
fn window_set() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..8)
        .map(|i| text(2000 + i * 100, 50_000 + i as u64))
        .collect();
    v.push(noise(30_000, 3));
    v.push(noise(1_300_000, 4)); // chunked
    v
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

/// Checks a store after a crash: every blob in `must` is there with its
/// bytes; every blob in `may` is there with its bytes or not at all.
fn check(s: &BlobStore, must: &[Vec<u8>], may: &[Vec<u8>], ctx: &str) {
    for b in must {
        let h = BlobHash::of(b);
        match s.get(&h) {
            Ok(got) => assert!(got == *b, "{ctx}: wrong bytes for durable blob {h}"),
            Err(e) => panic!("{ctx}: durable blob {h} lost: {e}"),
        }
    }
    for b in may {
        let h = BlobHash::of(b);
        match s.get(&h) {
            Ok(got) => assert!(got == *b, "{ctx}: wrong bytes for {h}"),
            Err(EngineError::BlobNotFound { .. }) => {}
            Err(e) => panic!("{ctx}: blob {h} neither absent nor intact: {e}"),
        }
    }
    let report = s.verify().unwrap();
    let hashes: HashSet<BlobHash> = must.iter().map(|b| BlobHash::of(b)).collect();
    for p in &report.problems {
        assert!(
            !p.hash.is_some_and(|h| hashes.contains(&h)),
            "{ctx}: verify flags durable blob: {p}"
        );
    }
}

/// Runs `window` against a store holding the durable set, with the
/// process stopped at operation `n` and a (tearing) crash; then reopens.
/// Returns whether the window completed, and the reopened store.
fn run(
    seed: u64,
    n: Option<u64>,
    window: &dyn Fn(&BlobStore) -> Result<(), EngineError>,
) -> (bool, BlobStore, SimVfs, u64) {
    let d = disk(seed);
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let s = BlobStore::open(vfs.clone(), &dir(), opts()).unwrap();
    let durable = durable_set();
    let refs: Vec<&[u8]> = durable.iter().map(|b| &b[..]).collect();
    s.put_batch(&refs).unwrap();
    let counter = n.map(|n| stop_after(&d, n));
    let ok = window(&s).is_ok();
    let used = counter.map(|c| c.load(Ordering::SeqCst)).unwrap_or(0);
    // The store's drop (best-effort index write) runs while the faults are
    // still in force: a crashed process writes nothing more.
    drop(s);
    d.crash_tearing();
    d.clear_faults();
    let s = BlobStore::open(vfs, &dir(), opts()).unwrap();
    (ok, s, d, used)
}

/// How many operations a window takes when nothing fails.
fn ops_of(window: &dyn Fn(&BlobStore) -> Result<(), EngineError>) -> u64 {
    let (_, _, _, used) = run(1, Some(u64::MAX), window);
    used
}

/// Crashes `window` (which puts the window set, and returns whether it
/// completed) at each of its operations in turn, then checks the reopened
/// store: durable blobs intact; the window's intact if it returned, intact
/// or absent otherwise (`on_ok` checks more when it returned); and the
/// store takes the window's blobs again.
fn crash_at_every_operation(
    window: &dyn Fn(&BlobStore) -> Result<(), EngineError>,
    seed: u64,
    on_ok: &dyn Fn(&BlobStore, &str),
) {
    let total = ops_of(window);
    assert!(total > 10, "the window does real work: {total} ops");
    for n in 0..=total {
        let (ok, s, _, _) = run(n + seed, Some(n), window);
        let ctx = format!("stopped at op {n} of {total}");
        if ok {
            // The window returned: its blobs are durable.
            let mut all = durable_set();
            all.extend(window_set());
            check(&s, &all, &[], &ctx);
            on_ok(&s, &ctx);
        } else {
            check(&s, &durable_set(), &window_set(), &ctx);
        }
        // The store works after recovery: the window's blobs can be put.
        let w = window_set();
        let refs: Vec<&[u8]> = w.iter().map(|b| &b[..]).collect();
        s.put_batch(&refs).unwrap();
        check(&s, &w, &[], &ctx);
    }
}

#[test]
fn crash_at_every_operation_of_a_batch_put() {
    let window = |s: &BlobStore| -> Result<(), EngineError> {
        let w = window_set();
        let refs: Vec<&[u8]> = w.iter().map(|b| &b[..]).collect();
        s.put_batch(&refs).map(|_| ())
    };
    crash_at_every_operation(&window, 7, &|_, _| {});
}

/// Training the store's dictionary (writing its file durably) and the first
/// puts compressed with it, crashed at every operation: durable blobs stay
/// intact, the window's blobs are intact or absent, and a blob written
/// with the dictionary is never left without it.
#[test]
fn crash_at_every_operation_of_a_dictionary_training() {
    let samples: Vec<Vec<u8>> = (0..80)
        .map(|i| text(1500 + i * 7, 90_000 + i as u64 * 40))
        .collect();
    let window = |s: &BlobStore| -> Result<(), EngineError> {
        let refs: Vec<&[u8]> = samples.iter().map(|b| &b[..]).collect();
        if !s.train_dictionary(&refs)? {
            return Err(EngineError::Invalid("no dictionary".into()));
        }
        let w = window_set();
        let refs: Vec<&[u8]> = w.iter().map(|b| &b[..]).collect();
        s.put_batch(&refs).map(|_| ())
    };
    let (ok, s, _, _) = run(1, None, &window);
    assert!(ok, "without a crash the window trains and stores");
    assert!(s.stats().dictionary.is_some());
    drop(s);
    crash_at_every_operation(&window, 11, &|s, ctx| {
        assert!(
            s.stats().dictionary.is_some(),
            "{ctx}: the dictionary survived"
        );
    });
}

/// Crashes a gc over the durable set, with `live` kept and `dead` not, at
/// each of its operations in turn: the live blobs are always intact, the
/// dead ones intact or gone, and a later gc on the recovered store keeps
/// every live blob.
fn crash_at_every_operation_of_a_gc_with(
    live: Vec<Vec<u8>>,
    dead: Vec<Vec<u8>>,
    opts: GcOptions,
    seed: u64,
) {
    let roots: HashSet<BlobHash> = live.iter().map(|b| BlobHash::of(b)).collect();
    let gc_opts = opts.clone();
    let window = move |s: &BlobStore| -> Result<(), EngineError> {
        let r = s.gc(&roots, gc_opts.clone())?;
        assert!(r.entries_copied > 0 && r.packs_rewritten > 0, "{r:?}");
        Ok(())
    };
    let total = ops_of(&window);
    assert!(total > 10, "the window does real work: {total} ops");
    for n in 0..=total {
        let (ok, s, _, _) = run(n + seed, Some(n), &window);
        let ctx = format!("gc stopped at op {n} of {total} (completed: {ok})");
        check(&s, &live, &dead, &ctx);
        // A later gc on the recovered store still keeps every live blob.
        let roots: HashSet<BlobHash> = live.iter().map(|b| BlobHash::of(b)).collect();
        s.gc(&roots, opts.clone()).unwrap();
        check(&s, &live, &dead, &ctx);
    }
}

#[test]
fn crash_at_every_operation_of_a_gc() {
    // Half the durable set is live; the other half and a set of dead blobs
    // are garbage.
    let durable = durable_set();
    let live: Vec<Vec<u8>> = durable.iter().step_by(3).cloned().collect();
    let dead: Vec<Vec<u8>> = (0..durable.len())
        .filter(|i| i % 3 != 0)
        .map(|i| durable[i].clone())
        .collect();
    crash_at_every_operation_of_a_gc_with(live, dead, GcOptions::default(), 1000);
}

/// T13-N3: a compacting gc takes the same rewrite path, so it is as safe:
/// one small dead blob (far below the rewrite threshold, which an ordinary
/// gc leaves alone) and the pack holding it rewritten, crashed at every
/// operation.
#[test]
fn crash_at_every_operation_of_a_compacting_gc() {
    let mut live = durable_set();
    let dead = vec![live.remove(3)];
    let (_, s, _, _) = run(5, None, &|_| Ok(()));
    let roots: HashSet<BlobHash> = live.iter().map(|b| BlobHash::of(b)).collect();
    let r = s.gc(&roots, GcOptions::default()).unwrap();
    assert_eq!(r.packs_rewritten, 0, "an ordinary gc leaves it: {r:?}");
    assert_eq!(r.left_below_threshold.blobs, 1, "{r:?}");
    drop(s);
    crash_at_every_operation_of_a_gc_with(live, dead, GcOptions::compact(), 3000);
}

#[test]
fn unsynced_puts_may_be_lost_but_never_corrupt() {
    let d = disk(42);
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let s = BlobStore::open(vfs.clone(), &dir(), opts()).unwrap();
    let durable = durable_set();
    for b in &durable {
        s.put(b).unwrap();
    }
    s.sync().unwrap();
    let w = window_set();
    for b in &w {
        s.put(b).unwrap();
    }
    assert!(s.has_unsynced());
    // A crash without the store getting to run its drop.
    std::mem::forget(s);
    d.crash_tearing();
    let s = BlobStore::open(vfs, &dir(), opts()).unwrap();
    check(&s, &durable, &w, "crash with unsynced puts");
}

#[test]
fn failed_fsync_poisons_the_store() {
    let d = disk(5);
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let s = BlobStore::open(vfs, &dir(), opts()).unwrap();
    s.put(b"before").unwrap();
    d.fail_after(0, Fault::SyncEio);
    assert!(s.sync().is_err());
    assert!(matches!(s.put(b"after"), Err(EngineError::Poisoned { .. })));
    assert!(matches!(s.sync(), Err(EngineError::Poisoned { .. })));
    // Reads still work.
    assert_eq!(s.get(&BlobHash::of(b"before")).unwrap(), b"before");
}
