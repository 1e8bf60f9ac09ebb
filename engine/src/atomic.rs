//! Replacing a file atomically: the one helper every crate uses to write a
//! small file whole (a dictionary, an index, a cache, a marker). The new
//! bytes go to a temporary file of this write's own in the same directory
//! ([`unique_tmp_name`]), which is fsync'd when durable, then renamed over
//! the file, then the directory is fsync'd when durable. A crash at any
//! point before the rename leaves the old file (and perhaps the
//! temporary, which ends in [`TMP_SUFFIX`] so an open can remove it);
//! after a durable write returns, the new file survives a crash.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{EngineError, Result};
use crate::vfs::{OpenMode, Vfs};

/// The suffix of a temporary file being written; one left by a crash can
/// be found by it and removed.
pub const TMP_SUFFIX: &str = ".tmp";

/// How one atomic write is made.
#[derive(Clone, Debug)]
pub struct AtomicOptions {
    /// fsync the file before the rename and the directory after it, so the
    /// new file survives a crash once the write returns. Without it the
    /// write is still atomic (old or new, never a mix) but a crash may
    /// bring back the old file: for caches rebuilt when lost.
    pub durable: bool,
    /// Permissions given to the new file before it is renamed into place;
    /// `None`: the mode the [`Vfs`] gives a new file ([`crate::RealVfs`]:
    /// 0600, private to the store's owner, as every store file is), also
    /// when it replaces a file of another mode. Applied through
    /// `std::fs`, so only on the real file system.
    pub permissions: Option<std::fs::Permissions>,
}

impl AtomicOptions {
    /// A durable write with a new file's permissions.
    pub fn durable() -> AtomicOptions {
        AtomicOptions {
            durable: true,
            permissions: None,
        }
    }

    /// A write that is atomic but not fsync'd (for caches).
    pub fn not_durable() -> AtomicOptions {
        AtomicOptions {
            durable: false,
            permissions: None,
        }
    }
}

/// A temporary name for writing `name`, of this write's own: the name,
/// this process's id and a per-process counter, ending in [`TMP_SUFFIX`].
/// Two processes (or two threads) writing the same file never write, or
/// rename away, one temporary file: with one shared name, one process's
/// rename took the other's file, whose own rename then failed with "No
/// such file".
pub fn unique_tmp_name(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{name}.{}-{n}{TMP_SUFFIX}", std::process::id())
}

/// Replaces `path` with `bytes` atomically (see the module docs), through
/// a temporary named by [`unique_tmp_name`] beside it.
pub fn write_atomic(vfs: &dyn Vfs, path: &Path, bytes: &[u8], opts: &AtomicOptions) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(unique_tmp_name(&format!(".{name}")));
    write_atomic_via(vfs, &tmp, path, bytes, opts)
}

/// [`write_atomic`] through the temporary `tmp` the caller named (in the
/// same directory as `path`). The temporary is removed if the write fails
/// before its rename.
pub fn write_atomic_via(
    vfs: &dyn Vfs,
    tmp: &Path,
    path: &Path,
    bytes: &[u8],
    opts: &AtomicOptions,
) -> Result<()> {
    let written = write_and_rename(vfs, tmp, path, bytes, opts);
    if written.is_err() {
        let _ = vfs.remove_file(tmp);
    }
    written?;
    if opts.durable {
        let dir = path.parent().unwrap_or(Path::new("."));
        vfs.sync_dir(dir)
            .map_err(|e| EngineError::io("fsync directory", dir, e))?;
    }
    Ok(())
}

fn write_and_rename(
    vfs: &dyn Vfs,
    tmp: &Path,
    path: &Path,
    bytes: &[u8],
    opts: &AtomicOptions,
) -> Result<()> {
    let f = vfs
        .open(tmp, OpenMode::CreateTruncate)
        .map_err(|e| EngineError::io("create", tmp, e))?;
    f.write_all_at(bytes, 0)
        .map_err(|e| EngineError::io("write", tmp, e))?;
    if let Some(p) = &opts.permissions {
        std::fs::set_permissions(tmp, p.clone())
            .map_err(|e| EngineError::io("set permissions of", tmp, e))?;
    }
    if opts.durable {
        // Synced before the rename: a crash never leaves the new name on
        // an empty or partial file.
        f.sync_data()
            .map_err(|e| EngineError::io("fsync", tmp, e))?;
    }
    drop(f);
    vfs.rename(tmp, path)
        .map_err(|e| EngineError::io("rename into place", path, e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::vfs::sim::{Fault, SimOp, SimVfs};
    use proptest::prelude::*;

    fn file(vfs: &SimVfs, p: &Path) -> Option<Vec<u8>> {
        vfs.durable_bytes(p)
    }

    /// A crash before the rename (the rename fails, then the power goes)
    /// leaves the old file whole.
    #[test]
    fn a_crash_before_the_rename_leaves_the_old_file() {
        let vfs = SimVfs::seeded(7);
        assert!(vfs.tracks_durability());
        let dir = Path::new("/d");
        vfs.create_dir_all(dir).unwrap();
        vfs.sync_dir(Path::new("/")).unwrap();
        let p = dir.join("f");
        write_atomic(&vfs, &p, b"old", &AtomicOptions::durable()).unwrap();
        vfs.set_fault_hook(|op| matches!(op, SimOp::Rename { .. }).then_some(Fault::WriteEio));
        assert!(write_atomic(&vfs, &p, b"new bytes", &AtomicOptions::durable()).is_err());
        vfs.clear_faults();
        vfs.crash();
        assert_eq!(file(&vfs, &p).as_deref(), Some(&b"old"[..]));
    }

    /// Two writes of one file never share a temporary name.
    #[test]
    fn each_write_has_its_own_temporary() {
        let a = unique_tmp_name("x");
        let b = unique_tmp_name("x");
        assert_ne!(a, b);
        assert!(a.ends_with(TMP_SUFFIX) && a.starts_with("x."));
    }

    proptest! {
        /// Whichever operation of a durable write fails (and however the
        /// last unsynced write tears in the crash after it), the file holds
        /// the old bytes or the new ones, never a mix; a write that
        /// returned Ok left the new ones.
        #[test]
        fn a_crash_anywhere_leaves_the_old_file_or_the_new(
            old in proptest::collection::vec(any::<u8>(), 0..64),
            new in proptest::collection::vec(any::<u8>(), 0..64),
            fail_at in 0u64..8,
            tear in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let vfs = SimVfs::seeded(seed);
            let dir = Path::new("/d");
            vfs.create_dir_all(dir).unwrap();
            vfs.sync_dir(Path::new("/")).unwrap();
            let p = dir.join("f");
            write_atomic(&vfs, &p, &old, &AtomicOptions::durable()).unwrap();
            let mut n = 0u64;
            vfs.set_fault_hook(move |_| {
                n += 1;
                (n == fail_at + 1).then_some(Fault::WriteEio)
            });
            let res = write_atomic(&vfs, &p, &new, &AtomicOptions::durable());
            vfs.clear_faults();
            if tear { vfs.crash_tearing() } else { vfs.crash() }
            let got = file(&vfs, &p).unwrap();
            if res.is_ok() {
                prop_assert_eq!(got, new);
            } else {
                prop_assert!(got == old || got == new, "a mix: {:?}", got);
            }
        }
    }
}
