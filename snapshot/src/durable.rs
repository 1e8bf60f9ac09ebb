//! Writing cache and marker files so that a crash leaves the old file or
//! the new one, never a mix (through the engine's one atomic-write
//! helper), and syncing a directory after a rename or a delete in it. A
//! leaf: it knows no workspace.

use std::path::Path;

use cairn_engine::atomic::AtomicOptions;
use cairn_engine::RealVfs;

use crate::error::{Result, SnapshotError};

/// Writes `bytes` to `path` atomically with the engine's helper
/// ([`cairn_engine::atomic::write_atomic`]: a temporary of this write's
/// own, since two threads may write one file at once, a checkpoint's
/// background stat-cache save and a gc's say; then a rename); with
/// `durable`, the file and the directory are fsync'd too.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> Result<()> {
    let opts = if durable {
        AtomicOptions::durable()
    } else {
        AtomicOptions::not_durable()
    };
    cairn_engine::atomic::write_atomic(&RealVfs, path, bytes, &opts).map_err(SnapshotError::Engine)
}

/// Test hook: an fsync of a directory under this path fails, as on a
/// failing disk.
#[cfg(test)]
pub(crate) static FAIL_DIR_SYNC_UNDER: std::sync::Mutex<Option<std::path::PathBuf>> =
    std::sync::Mutex::new(None);

/// fsyncs a directory (after a rename or delete in it).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(test)]
    if FAIL_DIR_SYNC_UNDER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_deref()
        .is_some_and(|p| dir.starts_with(p))
    {
        let e = std::io::Error::other("injected I/O error");
        return Err(SnapshotError::io("fsync directory", dir, e));
    }
    let d = match std::fs::File::open(dir) {
        Ok(d) => d,
        // A directory this user may not read (mode 300, restored so by a
        // rollback) cannot be opened to fsync: its entries reach the disk
        // with the file system's own write-back.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(()),
        Err(e) => return Err(SnapshotError::io("open directory", dir, e)),
    };
    d.sync_all()
        .map_err(|e| SnapshotError::io("fsync directory", dir, e))
}
