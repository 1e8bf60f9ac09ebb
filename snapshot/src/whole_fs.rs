//! Making a large restore durable with one `syncfs` instead of an fsync
//! per file.
//!
//! A rollback writes each file to a temporary, makes it durable, then
//! renames it into place, so a crash never leaves a file renamed but
//! empty. For a few hundred files that is an fsync per file, run in
//! parallel so the file system commits them together. For tens of
//! thousands it is not: creating a file costs tens of microseconds, an
//! fsync round costs milliseconds, and a 50,000-file rollback spent most
//! of its 14 s waiting on them. `syncfs(2)` writes back
//! everything dirty on the file system and flushes the disk's cache in one
//! call, so the temporaries of a whole plan are made durable at once
//! before any is renamed (see `restore::apply_prestaged`).
//!
//! It is used only where it is as safe as the fsyncs it replaces:
//! - on Linux 5.8 or later, where `syncfs` reports a write-back error that
//!   happened since the descriptor it is given was opened (earlier kernels
//!   return success whatever happened);
//! - when every directory the files are written into is on the workspace
//!   root's file system (a mount inside the workspace would not be
//!   synced);
//! - for plans of at least [`SYNCFS_MIN_FILES`] files.
//!
//! The price: `syncfs` also writes back what other programs left dirty on
//! the same file system, so a large rollback can wait on an unrelated
//! large write. Below [`SYNCFS_MIN_FILES`] files the fsyncs are cheap
//! enough, and that cost is never paid.

use std::path::Path;

use crate::error::{Result, SnapshotError};

/// Plans that write at least this many files are made durable with one
/// `syncfs`. Measured on a 2-core VM (ext4) by
/// `benches/scripts/restore_durability.py`: per-file fsyncs in batches of
/// 64 restore about 2,400 files/s, one `syncfs` about 9,000 (see
/// docs/BENCHMARKS.md, "A rollback of 50,000 files"); below about a thousand files the fsyncs take well
/// under half a second, and the coupling to other programs' writes is not
/// worth it.
pub const SYNCFS_MIN_FILES: usize = 1024;

/// An open handle on the workspace's file system through which a restore
/// makes everything it wrote durable at once.
pub struct WholeFs {
    #[cfg(target_os = "linux")]
    root: std::fs::File,
}

impl WholeFs {
    /// A handle on the file system of the workspace `root`, if a restore
    /// writing `files` files into the directories `dirs` (relative to
    /// `root`, each existing; repeats are looked at once) may use it (see
    /// the module docs); `None` means: fsync each file. `dirs` is walked
    /// only for a plan that large. Opened before the files are written, so
    /// a write-back error on any of them is reported by [`WholeFs::sync`].
    pub fn for_restore<'a>(
        root: &Path,
        files: usize,
        dirs: impl IntoIterator<Item = &'a str>,
    ) -> Option<WholeFs> {
        if files < SYNCFS_MIN_FILES {
            return None;
        }
        Self::open(root, dirs)
    }

    #[cfg(target_os = "linux")]
    fn open<'a>(root: &Path, dirs: impl IntoIterator<Item = &'a str>) -> Option<WholeFs> {
        use std::os::unix::fs::MetadataExt;
        if !kernel_reports_syncfs_errors() {
            return None;
        }
        let f = std::fs::File::open(root).ok()?;
        let dev = f.metadata().ok()?.dev();
        let mut seen = std::collections::HashSet::new();
        for d in dirs {
            if seen.insert(d)
                && std::fs::symlink_metadata(root.join(d)).map_or(true, |m| m.dev() != dev)
            {
                return None;
            }
        }
        Some(WholeFs { root: f })
    }

    #[cfg(not(target_os = "linux"))]
    fn open<'a>(_root: &Path, _dirs: impl IntoIterator<Item = &'a str>) -> Option<WholeFs> {
        None
    }

    /// Writes back everything dirty on the file system and flushes the
    /// disk's cache; an error if any write-back failed since the handle
    /// was opened.
    pub fn sync(&self) -> Result<()> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: syncfs on a descriptor this handle owns and keeps open.
            if unsafe { libc::syncfs(self.root.as_raw_fd()) } != 0 {
                return Err(SnapshotError::io(
                    "syncfs",
                    "<the workspace's file system>",
                    std::io::Error::last_os_error(),
                ));
            }
        }
        Ok(())
    }
}

/// Whether this kernel's `syncfs` reports write-back errors (Linux 5.8 and
/// later); `false` when the version cannot be read.
#[cfg(target_os = "linux")]
fn kernel_reports_syncfs_errors() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| release_at_least(&r, (5, 8)))
        .unwrap_or(false)
}

/// Whether a kernel release string (`6.18.44-fc`, `5.8.0`) is at least
/// `want` (major, minor); `None` when it does not start with a version.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn release_at_least(release: &str, want: (u32, u32)) -> Option<bool> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some((major, minor) >= want)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kernel_releases_are_compared_by_major_and_minor() {
        assert_eq!(release_at_least("6.18.44-fc-v782\n", (5, 8)), Some(true));
        assert_eq!(release_at_least("5.8.0", (5, 8)), Some(true));
        assert_eq!(release_at_least("5.7.19-generic", (5, 8)), Some(false));
        assert_eq!(release_at_least("4.19.0", (5, 8)), Some(false));
        assert_eq!(release_at_least("5.10", (5, 8)), Some(true));
        assert_eq!(release_at_least("", (5, 8)), None);
        assert_eq!(release_at_least("linux", (5, 8)), None);
    }

    #[test]
    fn small_restores_fsync_each_file() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(WholeFs::for_restore(tmp.path(), SYNCFS_MIN_FILES - 1, [""]).is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_restore_on_one_file_system_syncs_it_whole() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        let fs = WholeFs::for_restore(tmp.path(), SYNCFS_MIN_FILES, ["", "sub", "sub"]);
        if kernel_reports_syncfs_errors() {
            fs.unwrap().sync().unwrap();
        } else {
            assert!(fs.is_none());
        }
        // A directory on another file system (/proc, reached by a path
        // that climbs out), or one that is not there: fsync each file.
        let proc_dir = format!(
            "{}/proc/self",
            "../".repeat(tmp.path().components().count())
        );
        for other in [proc_dir.as_str(), "gone"] {
            assert!(WholeFs::for_restore(tmp.path(), SYNCFS_MIN_FILES, [other]).is_none());
        }
    }
}
