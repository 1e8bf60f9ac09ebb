//! The staging directory where a rollback writes the files it is about to
//! rename into place, the names of its temporaries, and the removal of
//! what a dead process left there. A leaf: it knows no workspace, so
//! opening one can clean it.

use std::path::Path;

/// The directory, in the workspace's cache directory inside the store
/// (`.cairn/snapshot/restore-staging/`), where a rollback writes the
/// files it is about to rename into place, as `<pid>-<n>.tmp`: never in
/// the workspace, where a user or a tool would take a temporary left by a
/// killed rollback for work. A rename needs both names on one file
/// system: a target directory on another (a store kept elsewhere with
/// `--store`, a mount inside the workspace) gets its temporaries beside
/// the files instead, as `.cairn-restore-<pid>-<n>.tmp`, which the next
/// writing flow removes (`crate::interrupted`). Whatever a process that
/// is gone left here is removed at the next open of the workspace,
/// read-only too ([`clean_staging`]).
pub const STAGING_DIR: &str = "restore-staging";

/// The name of a rollback's `n`th temporary in the staging directory.
pub(crate) fn staged_name(pid: u32, n: usize) -> String {
    format!("{pid}-{n}.tmp")
}

/// The process id a staged temporary's name carries (`<pid>-<n>.tmp`).
fn staged_pid(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_suffix(".tmp")?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(rest))
        .then(|| pid.parse().ok())
        .flatten()
}

/// Whether process `pid` exists (a signal 0 reaches it, or it belongs to
/// another user); a number reused by a new process counts as alive, which
/// only delays the removal.
#[cfg(unix)]
fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn pid_alive(_pid: u32) -> bool {
    true
}

/// Removes the temporaries that rollbacks whose processes are gone left in
/// the staging directory under `cache_dir` (see [`STAGING_DIR`]); returns
/// how many. Best effort: a store this user may only read keeps them, and
/// a directory that is not a real one (a symlink) is not looked into.
pub fn clean_staging(cache_dir: &Path) -> usize {
    let dir = cache_dir.join(STAGING_DIR);
    if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return 0;
    }
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(staged_pid) else {
            continue;
        };
        if !pid_alive(pid) && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}
