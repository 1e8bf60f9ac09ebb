//! Repair of a damaged store: keep every intact record, set damaged files
//! aside (never delete them), rebuild what is derived.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::salvage;
use cairn_engine::{RealVfs, StoreDir, Vfs};

use crate::error::Result;
use crate::Store;

/// A range of LSNs repair could not keep.
#[derive(Debug, Clone, Serialize)]
pub struct DroppedLsns {
    /// First LSN lost.
    pub first: u64,
    /// Last LSN lost.
    pub last: u64,
    /// Why.
    pub reason: String,
}

/// What [`Store::repair`] did.
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    /// Intact records kept.
    pub kept_records: u64,
    /// Placeholder records standing in for lost ones (so LSNs stay dense).
    pub placeholders: u64,
    /// LSN ranges lost.
    pub dropped: Vec<DroppedLsns>,
    /// Bytes of damaged data not carried over.
    pub dropped_bytes: u64,
    /// Where damaged files were moved, if any.
    pub damaged_dir: Option<String>,
    /// The files moved there.
    pub moved: Vec<String>,
    /// Blobs that fail their check (they cannot be repaired; the records
    /// that refer to them stay, and reading those blobs reports the damage).
    pub damaged_blobs: Vec<String>,
    /// LSN of the head after repair.
    pub head_lsn: u64,
    /// Hash of the head after repair.
    pub head_hash: String,
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kept {} intact records; head LSN {} hash {}",
            self.kept_records, self.head_lsn, self.head_hash
        )?;
        if self.dropped.is_empty() {
            writeln!(f, "no records lost")?;
        }
        for d in &self.dropped {
            writeln!(f, "lost LSN {}..={}: {}", d.first, d.last, d.reason)?;
        }
        if self.placeholders > 0 {
            writeln!(
                f,
                "{} placeholder records keep the LSNs dense",
                self.placeholders
            )?;
        }
        if let Some(dir) = &self.damaged_dir {
            writeln!(
                f,
                "damaged files moved to {dir} ({} bytes not carried over):",
                self.dropped_bytes
            )?;
            for m in &self.moved {
                writeln!(f, "  {m}")?;
            }
        }
        for b in &self.damaged_blobs {
            writeln!(f, "damaged blob: {b}")?;
        }
        Ok(())
    }
}

impl Store {
    /// Repairs the store at `store_dir` (a `.cairn` directory): salvages the
    /// log keeping every intact record, rebuilds the blob index, drops the
    /// query indexes (rebuilt on next use) and reports what was lost. Takes
    /// the store's lock: no other process may have it open.
    pub fn repair(store_dir: &Path) -> Result<RepairReport> {
        let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
        let dir = StoreDir::open(vfs.clone(), store_dir)?;
        let log = salvage(vfs.clone(), &dir.log_dir())?;
        let blobs = BlobStore::open(vfs.clone(), &dir.blob_dir(), BlobOptions::default())?;
        let blob_report = blobs.verify()?;
        if let Ok(names) = vfs.list(&dir.index_dir()) {
            for n in names {
                let _ = vfs.remove_file(&dir.index_dir().join(n));
            }
            let _ = vfs.sync_dir(&dir.index_dir());
        }
        Ok(RepairReport {
            kept_records: log.kept_records,
            placeholders: log.placeholders,
            dropped: log
                .dropped
                .iter()
                .map(|d| DroppedLsns {
                    first: d.first.0,
                    last: d.last.0,
                    reason: d.reason.clone(),
                })
                .collect(),
            dropped_bytes: log.dropped_bytes,
            damaged_dir: log.damaged_dir.map(|p| p.display().to_string()),
            moved: log.moved.iter().map(|p| p.display().to_string()).collect(),
            damaged_blobs: blob_report.problems.iter().map(|p| p.to_string()).collect(),
            head_lsn: log.head.last_lsn.0,
            head_hash: log.head.chain.to_hex(),
        })
    }
}
