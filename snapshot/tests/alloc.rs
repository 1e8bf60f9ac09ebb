//! Allocation churn of a full scan (issue 30, "Big files and many
//! files"): the heap allocations a checkpoint makes per file of a tree of
//! many empty files, counted by a counting global allocator. A count, not
//! a time: the same on a loaded machine. This file holds one test so that
//! no other test's allocations are counted with it.
#![allow(clippy::unwrap_used)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use cairn_snapshot::*;
use common::*;

/// The system allocator, counting every allocation (and reallocation).
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Directories of the test tree.
const DIRS: usize = 8;
/// Empty files in each directory.
const PER_DIR: usize = 500;

/// The most heap allocations a first checkpoint of empty files may make
/// per file (5.1 measured). What a file needs: the name
/// `std::fs::DirEntry` holds, the copy `DirEntry::file_name` returns
/// (taken once a file: 6.1 when the walk took it twice), its path (kept
/// from the walk to the stat cache), its name in its directory's
/// manifest node, its share of the lists that grow. Before the scan
/// stopped copying each path once more, building a set of every path
/// reached when nothing is tracked, and making a string per file to mark
/// its directory changed, it made 8.3.
const MAX_ALLOCS_PER_FILE_FIRST: f64 = 6.0;

/// The most heap allocations a one-file checkpoint (a full scan, from a
/// fresh handle, as the command line makes) may make per file of the tree
/// (3.3 measured). What a file needs: its name from the directory listing
/// and its path, kept as the new stat cache's, and its share of the lists
/// that grow. Before the loaded stat cache was read where it lies in its
/// mapped file it made one `String` more a path: 4.3.
const MAX_ALLOCS_PER_FILE_ONE_CHANGED: f64 = 3.8;

#[test]
fn a_full_scan_of_many_empty_files_allocates_little_per_file() {
    let f = fx();
    let old = SystemTime::now() - Duration::from_secs(3600);
    for d in 0..DIRS {
        let dir = f.p(&format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for i in 0..PER_DIR {
            let p = dir.join(format!("f{i:04}"));
            let file = std::fs::File::create(&p).unwrap();
            // Not racy: captured from its stat, without being read.
            file.set_modified(old).unwrap();
        }
    }
    let files = (DIRS * PER_DIR) as f64;

    let before = ALLOCS.load(Ordering::Relaxed);
    let first = f.checkpoint("first");
    let first_allocs = (ALLOCS.load(Ordering::Relaxed) - before) as f64;
    assert_eq!(first.counts.files, (DIRS * PER_DIR) as u64);
    assert_eq!(first.counts.changed, (DIRS * PER_DIR) as u64);
    let per_file = first_allocs / files;
    eprintln!("first checkpoint: {first_allocs} allocations, {per_file:.2} a file");
    assert!(
        per_file <= MAX_ALLOCS_PER_FILE_FIRST,
        "{per_file:.2} allocations a file (at most {MAX_ALLOCS_PER_FILE_FIRST})"
    );

    // The scan after it, from another handle (as the command line is: the
    // stat cache loaded from its file), still sees every file, and a
    // change, and allocates little a file: the cache is read where it
    // lies in the mapped file, no `String` made for a path it reuses.
    let Fx {
        _dir,
        root,
        ws,
        log,
        blobs,
    } = f;
    drop(ws); // waits for the first checkpoint's stat cache save
    std::fs::write(root.join("d3/f0007"), "x").unwrap();
    let ws = Workspace::open(
        &root,
        &root.join(".cairn/snapshot"),
        SnapshotOptions::default(),
    )
    .unwrap();
    let before = ALLOCS.load(Ordering::Relaxed);
    let second = create_checkpoint(
        &log,
        &blobs,
        &ws,
        CheckpointRequest {
            label: Some("second".into()),
            ..Default::default()
        },
    )
    .unwrap();
    drop(ws); // and for this one's (a delta: counted too)
    let second_allocs = (ALLOCS.load(Ordering::Relaxed) - before) as f64;
    assert_eq!(second.counts.files, (DIRS * PER_DIR) as u64);
    assert_eq!(second.counts.changed, 1);
    let per_file = second_allocs / files;
    eprintln!(
        "one-file checkpoint, fresh handle: {second_allocs} allocations, {per_file:.2} a file"
    );
    assert!(
        per_file <= MAX_ALLOCS_PER_FILE_ONE_CHANGED,
        "{per_file:.2} allocations a file (at most {MAX_ALLOCS_PER_FILE_ONE_CHANGED})"
    );
}
