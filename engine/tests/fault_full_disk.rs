//! A store on a full disk can always be brought back: `gc` frees space
//! before it needs any (on the simulated disk, whose capacity is the sum
//! of its files' lengths).
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use cairn_engine::blob::{BlobOptions, BlobStore, GcOptions};
use cairn_engine::vfs::{OpenMode, SimVfs, Vfs};

const DIR: &str = "/s/blobs";

fn disk() -> SimVfs {
    let d = SimVfs::seeded(27);
    d.create_dir_all(Path::new(DIR)).unwrap();
    for p in ["/", "/s"] {
        d.sync_dir(Path::new(p)).unwrap();
    }
    d
}

fn open(d: &SimVfs, pack_size_bytes: u64) -> BlobStore {
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let opts = BlobOptions {
        pack_size_bytes,
        ..BlobOptions::default()
    };
    BlobStore::open(vfs, Path::new(DIR), opts).unwrap()
}

/// Bytes the disk holds now: the sum of the store's file lengths.
fn used(d: &SimVfs) -> u64 {
    d.list(Path::new(DIR))
        .unwrap()
        .iter()
        .map(|n| {
            let p = Path::new(DIR).join(n);
            d.open(&p, OpenMode::Read).unwrap().len().unwrap()
        })
        .sum()
}

/// Puts one live blob, then `dead` blobs that no record names (what a
/// checkpoint that failed part way leaves), fills the disk, and runs gc:
/// it must succeed, keep the live blob, and leave the store able to take
/// a put again.
fn gc_on_a_full_disk(pack_size_bytes: u64, dead: u64) {
    let d = disk();
    let store = open(&d, pack_size_bytes);
    let live_bytes = noise(0, 30_000);
    let live = store.put(&live_bytes).unwrap();
    for i in 1..=dead {
        store.put(&noise(i, 30_000)).unwrap();
    }
    store.sync().unwrap();
    store.persist_index().unwrap();
    let before = used(&d);
    d.set_capacity_bytes(Some(before));
    // Full: nothing more goes in.
    assert!(store.put(&noise(99, 30_000)).is_err());
    drop(store);

    let store = open(&d, pack_size_bytes);
    let report = store
        .gc(&HashSet::from([live]), GcOptions::default())
        .unwrap();
    assert_eq!(store.get(&live).unwrap(), live_bytes);
    assert!(
        used(&d) + 20_000 * dead < before,
        "gc freed the dead blobs: {} of {before} bytes left; {report:?}",
        used(&d)
    );
    // The space is usable again, and a reopen finds the live blob.
    let again = store.put(&noise(100, 10_000)).unwrap();
    store.sync().unwrap();
    drop(store);
    let store = open(&d, pack_size_bytes);
    assert_eq!(store.get(&live).unwrap(), live_bytes);
    assert!(store.contains(&again));
    assert!(store.verify().unwrap().problems.is_empty());
}

/// Regression (issue 27): dead blobs after the live one in the same pack
/// (a checkpoint that failed half-way on a full disk). Rewriting the pack
/// needed space to copy the live blob; gc now cuts the dead tail first.
#[test]
fn gc_on_a_full_disk_cuts_a_packs_dead_tail() {
    gc_on_a_full_disk(64 << 20, 3);
}

/// Regression (issue 27): packs holding only dead blobs are deleted before
/// gc writes anything (its new index, a copy).
#[test]
fn gc_on_a_full_disk_deletes_dead_packs_first() {
    // The smallest packs: each blob rolls to a pack of its own.
    gc_on_a_full_disk(0, 3);
}

/// Contents that do not compress (so each blob takes its size on disk).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    support::xorshift(seed).take(len).map(|x| x as u8).collect()
}
