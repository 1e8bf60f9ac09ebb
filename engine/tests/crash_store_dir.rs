//! The store directory's own creation must be durable: a record
//! acknowledged in a brand-new store survives a power loss right after.
//!
//! Run it alone with
//! `cargo test -p cairn-engine --test crash_store_dir`.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use cairn_codec::{Event, EventKind, Lsn};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::vfs::{SimVfs, Vfs};
use cairn_engine::StoreDir;

#[test]
fn first_acknowledged_record_of_a_new_store_survives_a_crash() {
    let disk = SimVfs::seeded(3);
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    vfs.create_dir_all(Path::new("/w")).unwrap();
    vfs.sync_dir(Path::new("/")).unwrap();
    let store = StoreDir::open(vfs.clone(), Path::new("/w/.cairn")).unwrap();
    let opts = LogOptions {
        segment_size_bytes: 1 << 20,
        durability: Durability::Always,
        ..LogOptions::default()
    };
    let blobs = BlobStore::open(vfs.clone(), &store.blob_dir(), BlobOptions::default()).unwrap();
    let h = blobs.put(b"contents").unwrap();
    blobs.sync().unwrap();
    let log = Log::open(vfs.clone(), &store.log_dir(), opts).unwrap();
    let mut e = Event::new(EventKind::FileWrite, "s");
    e.after = Some(h);
    assert_eq!(log.append(&e).unwrap(), Lsn(1));
    // Power loss: the process and everything not durable are gone.
    disk.set_fault_hook(|_| Some(cairn_engine::vfs::Fault::WriteEio));
    drop((log, blobs, store));
    disk.crash();
    disk.clear_faults();
    let store = StoreDir::open(vfs.clone(), Path::new("/w/.cairn")).unwrap();
    let log = Log::open(vfs.clone(), &store.log_dir(), opts).unwrap();
    assert_eq!(
        log.head().last_lsn,
        Lsn(1),
        "the acknowledged record survived"
    );
    let blobs = BlobStore::open(vfs, &store.blob_dir(), BlobOptions::default()).unwrap();
    assert_eq!(blobs.get(&h).unwrap(), b"contents");
}

/// Opening an existing store makes no directory fsync: its directories
/// were made durable by the open that created them (each hook process
/// paid two before).
#[test]
fn reopening_a_store_makes_no_directory_fsync() {
    let disk = SimVfs::seeded(5);
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    vfs.create_dir_all(Path::new("/w")).unwrap();
    vfs.sync_dir(Path::new("/")).unwrap();
    let before = disk.stats().dir_syncs;
    drop(StoreDir::open(vfs.clone(), Path::new("/w/.cairn")).unwrap());
    assert!(disk.stats().dir_syncs > before, "creation fsyncs nothing");
    let before = disk.stats().dir_syncs;
    drop(StoreDir::open(vfs, Path::new("/w/.cairn")).unwrap());
    assert_eq!(disk.stats().dir_syncs, before);
}

/// An open that created the directories but failed before fsyncing them
/// (the process died there) leaves no `.gitignore`: the next open, which
/// finds the directories already there, still fsyncs them, so its first
/// acknowledged record survives a power loss.
#[test]
fn an_open_cut_short_before_its_directory_fsync_is_completed_by_the_next() {
    let disk = SimVfs::seeded(7);
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    vfs.create_dir_all(Path::new("/w")).unwrap();
    vfs.sync_dir(Path::new("/")).unwrap();
    vfs.sync_dir(Path::new("/w")).unwrap();
    disk.set_fault_hook(|op| match op {
        cairn_engine::vfs::sim::SimOp::SyncDir { .. } => Some(cairn_engine::vfs::Fault::SyncEio),
        _ => None,
    });
    assert!(StoreDir::open(vfs.clone(), Path::new("/w/.cairn")).is_err());
    disk.clear_faults();
    let store = StoreDir::open(vfs.clone(), Path::new("/w/.cairn")).unwrap();
    let opts = LogOptions {
        segment_size_bytes: 1 << 20,
        durability: Durability::Always,
        ..LogOptions::default()
    };
    let log = Log::open(vfs.clone(), &store.log_dir(), opts).unwrap();
    assert_eq!(
        log.append(&Event::new(EventKind::Custom, "s")).unwrap(),
        Lsn(1)
    );
    disk.set_fault_hook(|_| Some(cairn_engine::vfs::Fault::WriteEio));
    drop((log, store));
    disk.crash();
    disk.clear_faults();
    let store = StoreDir::open(vfs.clone(), Path::new("/w/.cairn")).unwrap();
    let log = Log::open(vfs, &store.log_dir(), opts).unwrap();
    assert_eq!(
        log.head().last_lsn,
        Lsn(1),
        "the acknowledged record survived"
    );
}
