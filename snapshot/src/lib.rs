//! # cairn-snapshot
//!
//! Checkpoints and rollback of a real workspace. A [`Workspace`] is scanned
//! (honouring `.gitignore`, `.git/info/exclude` and `.cairnignore`, with a
//! persistent stat cache so unchanged files are never re-read) into a
//! Merkle tree of directory nodes stored as blobs ([`manifest`]); a
//! checkpoint is a `checkpoint.create` record naming the tree's root. A
//! rollback first checkpoints the current state, then restores the target
//! exactly (files, modes, symlinks, deletions), atomically per file, and
//! records a `rollback` record naming both.
//!
//! ```
//! use cairn_snapshot::{create_checkpoint, rollback, CheckpointRequest, MemBlobs, MemLog,
//!     RollbackRequest, SnapshotOptions, Workspace};
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("main.rs"), "fn main() {}").unwrap();
//! let ws = Workspace::open(dir.path(), &dir.path().join(".cairn/snapshot"), SnapshotOptions::default()).unwrap();
//! let (log, blobs) = (MemLog::new(), MemBlobs::new());
//! let c1 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
//! std::fs::write(dir.path().join("main.rs"), "broken").unwrap();
//! let r = rollback(&log, &blobs, &ws, RollbackRequest::new(c1.id)).unwrap();
//! assert_eq!(r.written, vec!["main.rs".to_string()]);
//! assert_eq!(std::fs::read_to_string(dir.path().join("main.rs")).unwrap(), "fn main() {}");
//! ```
//!
//! The log and the blob store are reached through two small traits,
//! [`LogAccess`] and [`BlobAccess`], implemented by the engine's `Log` and
//! `BlobStore` and by in-memory [`MemLog`] and [`MemBlobs`].

pub mod blobs;
pub mod capture;
pub mod checkpoint;
pub mod create;
mod durable;
pub mod error;
pub mod gc;
mod in_place;
pub mod interrupted;
pub mod list;
mod list_cache;
pub mod log_access;
pub mod manifest;
pub mod relpath;
pub mod restore;
pub mod retention;
pub mod rollback;
pub mod rollback_plan;
pub mod rollback_record;
pub mod scan;
mod staging;
mod stat_cache;
pub mod watch;
#[cfg(unix)]
pub mod watch_daemon;
pub mod watch_journal;
pub mod whole_fs;
pub mod workspace;

pub use blobs::{BlobAccess, BlobRead, GcMode, GcSummary, LeftBehind, MemBlobs};
pub use checkpoint::{
    collected_note, CheckpointInfo, CheckpointRequest, NotCaptured, ScanMode, COLLECTED_KEY,
    NOT_CAPTURED_KEY,
};
pub use create::create_checkpoint;
pub use error::{Result, SnapshotError};
pub use gc::{apply_retention, apply_retention_keeping, apply_retention_with, RetentionReport};
pub use interrupted::{
    record_interrupted_rollback, rollback_marker, unfinished_rollback_warning, RollbackMarker,
    UnfinishedRollback, ROLLBACK_MARKER_FILE, ROLLBACK_META_INTERRUPTED,
};
pub use list::{find_checkpoint, find_in_list, list_checkpoints};
pub use log_access::{LogAccess, MemLog};
pub use manifest::{Entry, EntryKind, Manifest};
pub use restore::Kept;
pub use retention::{
    choose, decide, discarded_by_retention, discarded_by_words, BudgetOutcome, Choice,
    RetentionPolicy, RETENTION_TEXT_PREFIX,
};
pub use rollback::{paths_matching_nothing, rollback, RollbackReport, RollbackRequest};
pub use rollback_record::{
    MAX_ROLLBACK_FILES_LISTED, ROLLBACK_INCOMPLETE, ROLLBACK_META_FILES_TOTAL, ROLLBACK_META_KEPT,
    ROLLBACK_META_SCOPE,
};
pub use watch::WatchStats;
pub use watch_journal::ScanReport;
pub use workspace::{SnapshotOptions, Workspace};
