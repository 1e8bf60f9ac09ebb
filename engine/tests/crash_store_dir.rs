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
