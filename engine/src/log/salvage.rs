//! Salvage: repair a damaged log, keeping every intact record.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::Lsn;

use super::Head;
use crate::vfs::Vfs;
use crate::{EngineError, Result};

/// A range of LSNs that salvage could not keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedRange {
    /// First LSN lost.
    pub first: Lsn,
    /// Last LSN lost.
    pub last: Lsn,
    /// Why.
    pub reason: String,
}

/// What [`salvage`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SalvageReport {
    /// Intact records kept.
    pub kept_records: u64,
    /// LSN ranges lost.
    pub dropped: Vec<DroppedRange>,
    /// Damaged bytes not kept.
    pub dropped_bytes: u64,
    /// Where the replaced files were moved (`None` if nothing was damaged).
    pub damaged_dir: Option<PathBuf>,
    /// Files moved there.
    pub moved: Vec<PathBuf>,
    /// The head after salvage.
    pub head: Head,
}

/// Repairs the log in `dir`. The caller holds the store lock.
pub fn salvage(_vfs: Arc<dyn Vfs>, _dir: &Path) -> Result<SalvageReport> {
    Err(EngineError::Invalid(
        "salvage is not implemented yet".into(),
    ))
}
