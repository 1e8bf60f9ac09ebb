//! Writing cache and marker files so that a crash leaves the old file or
//! the new one, never a mix, and syncing a directory after a rename or a
//! delete in it. A leaf: it knows no workspace.

use std::path::Path;

use crate::error::{Result, SnapshotError};

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, then a rename; with `durable`, the file and the directory are
/// fsync'd too.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    // Unique per call: two threads may write the same file at once (a
    // checkpoint's background stat-cache save and a gc's, say).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(|e| SnapshotError::io("create", &tmp, e))?;
    f.write_all(bytes)
        .map_err(|e| SnapshotError::io("write", &tmp, e))?;
    if durable {
        f.sync_all()
            .map_err(|e| SnapshotError::io("fsync", &tmp, e))?;
    }
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| SnapshotError::io("rename into place", path, e))?;
    if durable {
        sync_dir(dir)?;
    }
    Ok(())
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
