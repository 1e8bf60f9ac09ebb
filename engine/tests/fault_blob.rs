//! Injected I/O faults in the blob store, on the simulated disk.
//!
//! Puts follow the commit protocol (put, then `sync`; a blob is
//! acknowledged when a `sync` after its put returns). For each fault (EIO on
//! a write, EIO on an fsync, ENOSPC) swept over every point a short workload
//! reaches: the failing call returns an error naming the fault, no new blob
//! is accepted afterwards, nothing panics, and a reopen, with or without a
//! crash, finds every acknowledged blob byte-exact, never returns bytes that
//! do not hash to their name, verifies clean and accepts puts again. The
//! same for a garbage collection struck by a fault: every live blob survives.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use cairn_codec::BlobHash;
use cairn_engine::blob::{BlobOptions, BlobStore, GcOptions};
use cairn_engine::vfs::{Fault, SimVfs, Vfs};

/// Put-and-sync rounds per run.
const ROUNDS: usize = 12;
/// Fault points swept per fault kind.
const FAULT_POINTS: u64 = 36;

const DIR: &str = "/s/blobs";

fn opts() -> BlobOptions {
    BlobOptions {
        pack_size_bytes: 0, // the minimum: packs roll during the workload
        chunking_threshold_bytes: 16 * 1024,
        ..BlobOptions::default()
    }
}

fn disk(seed: u64) -> SimVfs {
    support::sim_disk_with_dir(seed, DIR)
}

fn open(d: &SimVfs) -> cairn_engine::Result<BlobStore> {
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    BlobStore::open(vfs, Path::new(DIR), opts())
}

/// Distinct contents per (run, index): some small, some large enough to
/// roll packs and to be chunked.
fn contents(run: u64, i: usize) -> Vec<u8> {
    let len = match i % 4 {
        0 => 40_000,
        1 => 10,
        _ => 1_500,
    };
    let mut x = run.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x % 20) as u8
        })
        .collect()
}

fn names_fault(fault: Fault, text: &str) -> bool {
    match fault {
        Fault::Enospc => text.contains("No space left on device"),
        Fault::WriteEio | Fault::SyncEio => text.contains("Input/output error"),
    }
}

/// Runs put/sync rounds with the fault armed; returns the acknowledged blobs
/// and whether the fault struck.
fn run(d: &SimVfs, fault: Fault, k: u64, run_id: u64) -> (HashMap<BlobHash, Vec<u8>>, bool) {
    let store = open(d).unwrap();
    d.fail_from(k, fault);
    let mut acked = HashMap::new();
    let mut failed: Option<String> = None;
    let mut n = 0;
    for round in 0..ROUNDS {
        let mut pending = Vec::new();
        for _ in 0..1 + round % 3 {
            let c = contents(run_id, n);
            n += 1;
            match store.put(&c) {
                Ok(h) => {
                    assert!(
                        failed.is_none(),
                        "{fault:?}@{k}: a new blob was accepted after a failure ({failed:?})"
                    );
                    assert_eq!(h, BlobHash::of(&c));
                    pending.push((h, c));
                }
                Err(e) => {
                    if failed.is_none() {
                        assert!(
                            names_fault(fault, &e.to_string()),
                            "{fault:?}@{k}: unclear error: {e}"
                        );
                        failed = Some(e.to_string());
                    }
                }
            }
        }
        match store.sync() {
            Ok(()) => acked.extend(pending),
            Err(e) => {
                if failed.is_none() {
                    assert!(
                        names_fault(fault, &e.to_string()),
                        "{fault:?}@{k}: unclear error: {e}"
                    );
                    failed = Some(e.to_string());
                }
            }
        }
    }
    d.clear_faults();
    drop(store);
    (acked, failed.is_some())
}

fn check_recovery(d: &SimVfs, acked: &HashMap<BlobHash, Vec<u8>>, crash: bool, what: &str) {
    if crash {
        d.crash_tearing();
    }
    let store = open(d).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    for (h, c) in acked {
        let got = store
            .get(h)
            .unwrap_or_else(|e| panic!("{what}: acknowledged blob {h} lost: {e}"));
        assert_eq!(&got, c, "{what}: blob {h} bytes");
    }
    for h in store.hashes() {
        if let Ok(got) = store.get(&h) {
            assert_eq!(
                BlobHash::of(&got),
                h,
                "{what}: wrong bytes returned for {h}"
            );
        }
    }
    let report = store.verify().unwrap();
    assert!(
        report.problems.is_empty(),
        "{what}: verify: {:?}",
        report.problems
    );
    let h = store.put(b"after recovery").unwrap();
    store.sync().unwrap();
    assert_eq!(store.get(&h).unwrap(), b"after recovery");
}

fn sweep(fault: Fault) -> (u64, usize) {
    let mut struck = 0;
    let mut acked_total = 0;
    for k in 0..FAULT_POINTS {
        for crash in [false, true] {
            let id = k * 2 + crash as u64;
            let d = disk(id);
            let (acked, hit) = run(&d, fault, k, id);
            struck += hit as u64;
            acked_total += acked.len();
            check_recovery(
                &d,
                &acked,
                crash,
                &format!("{fault:?} at point {k}, crash {crash}"),
            );
        }
    }
    assert!(
        struck >= FAULT_POINTS / 2,
        "{fault:?}: the fault struck in many runs ({struck})"
    );
    (struck, acked_total)
}

#[test]
fn fsync_error_refuses_later_puts_and_keeps_acknowledged_blobs() {
    let (s, a) = sweep(Fault::SyncEio);
    eprintln!("fault_blob SyncEio: {s} faulted runs, {a} blobs acknowledged, 0 lost");
}

#[test]
fn write_error_refuses_later_puts_and_keeps_acknowledged_blobs() {
    let (s, a) = sweep(Fault::WriteEio);
    eprintln!("fault_blob WriteEio: {s} faulted runs, {a} blobs acknowledged, 0 lost");
}

#[test]
fn full_disk_is_a_clear_error_for_puts() {
    let (s, a) = sweep(Fault::Enospc);
    eprintln!("fault_blob Enospc: {s} faulted runs, {a} blobs acknowledged, 0 lost");
}

#[test]
fn gc_struck_by_a_fault_keeps_every_live_blob() {
    let mut struck = 0;
    for fault in [Fault::WriteEio, Fault::SyncEio, Fault::Enospc] {
        for k in 0..FAULT_POINTS {
            for crash in [false, true] {
                let what = format!("gc with {fault:?} at point {k}, crash {crash}");
                let d = disk(k);
                let store = open(&d).unwrap();
                // Insertion order (not a HashMap's) keeps the run deterministic.
                let mut all = Vec::new();
                for i in 0..10 {
                    let c = contents(k + 1000, i);
                    all.push((store.put(&c).unwrap(), c));
                }
                store.sync().unwrap();
                let live: HashSet<BlobHash> = all.iter().step_by(3).map(|(h, _)| *h).collect();
                d.fail_from(k, fault);
                if store.gc(&live, GcOptions::compact()).is_err() {
                    struck += 1;
                }
                d.clear_faults();
                drop(store);
                let live_blobs: HashMap<BlobHash, Vec<u8>> =
                    all.into_iter().filter(|(h, _)| live.contains(h)).collect();
                check_recovery(&d, &live_blobs, crash, &what);
            }
        }
    }
    assert!(struck > 0, "gc met at least one fault");
    eprintln!("fault_blob gc: {struck} faulted gc runs, every live blob kept");
}
