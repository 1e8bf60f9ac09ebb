//! The store directory (`.cairn/`) and its exclusive lock.
//!
//! ```text
//! .cairn/
//!   .gitignore  `*`: git never sees the store
//!   LOCK        exclusive lock: one writing process at a time
//!   LOCK.wanted a CLI writer waits for the lock (written by the `cairn`
//!               CLI, not by this crate; see `cli/src/turns.rs`)
//!   log/        log segments (see the log module)
//!   blobs/      blob packs and their index (see the blob module)
//!   index/      query indexes (rebuildable from the log)
//!   imports/    where each import got to in its input (written by the
//!               `cairn` crate's import, not by this crate)
//!   snapshot/   scan caches (rebuildable)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::vfs::{LockGuard, Vfs};
use crate::{EngineError, Result};

/// The name of the store directory inside a workspace.
pub const STORE_DIR_NAME: &str = ".cairn";

/// A `.gitignore` in the store directory, so git never sees the store.
const GITIGNORE_FILE: &str = ".gitignore";

/// Its contents: everything in the store (itself included) is ignored.
const GITIGNORE_TEXT: &str =
    "# A cairn store: private history and file contents. Never commit it.\n*\n";

/// The name of the lock file inside the store directory.
pub const LOCK_FILE_NAME: &str = "LOCK";
/// The name of the log directory inside the store directory.
pub const LOG_DIR_NAME: &str = "log";
/// The name of the blob directory inside the store directory.
pub const BLOB_DIR_NAME: &str = "blobs";

/// True if `dir` (on the real file system) holds what every cairn store
/// holds: a log and a blob directory and a lock file. How a store is
/// recognised under any name: a workspace inside one is refused, and a
/// scan never captures one (`cairn_snapshot::scan` checks the same three
/// names from its directory listing).
pub fn looks_like_store_dir(dir: &Path) -> bool {
    dir.join(LOG_DIR_NAME).is_dir()
        && dir.join(BLOB_DIR_NAME).is_dir()
        && dir.join(LOCK_FILE_NAME).is_file()
}

/// The process id the last holder of the lock wrote into `lock_file`
/// (`pid N`), if it can be read. A holder writes it when it takes the
/// lock and leaves it when it lets go, so it names the process holding the
/// lock now, or the one that held it last: `cairn record`, having let go to
/// let a waiting writer in, reads it to see that one did get in.
pub fn lock_holder(vfs: &dyn Vfs, lock_file: &Path) -> Option<u32> {
    /// "pid " and a u32 in decimal, with a newline.
    const MAX_LOCK_TEXT_BYTES: usize = 16;
    let f = vfs.open(lock_file, crate::vfs::OpenMode::Read).ok()?;
    let mut text = [0u8; MAX_LOCK_TEXT_BYTES];
    let n = f.read_at(&mut text, 0).ok()?;
    std::str::from_utf8(&text[..n])
        .ok()?
        .trim()
        .strip_prefix("pid ")?
        .parse()
        .ok()
}

/// The permission bits a store directory may have: the owner's only.
/// Its files are the workspace's private history (every checkpointed
/// file's contents), and what is under it decides where cairn writes.
pub const STORE_DIR_MODE_ALLOWED: u32 = 0o700;

/// Refuses to write the store directory `root` (on the real file system)
/// unless the user running cairn owns it and nobody else has permission
/// bits on it, as git refuses a repository another user owns: a store
/// another user can write could be made to rewrite this user's files, and
/// one others may read gives away every checkpointed file. The super-user
/// is held to the same rule (it acts on a store of its own; for another
/// user's, run cairn as that user). `Ok` for a directory that does not
/// exist yet (it is created owner-only). The refusal is an
/// [`EngineError::Io`] naming the owner or mode found and the fix; one
/// about the owner has the kind `PermissionDenied`.
pub fn check_owner_and_mode(root: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let op = "refuse to write the store";
    let meta = match std::fs::metadata(root) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(EngineError::io("read the owner of the store", root, e)),
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let user = unsafe { libc::geteuid() };
    if meta.uid() != user {
        let text = format!(
            "Permission denied by cairn: it is owned by uid {}, not by this user (uid {user}); \
             cairn writes and rolls back only its own user's stores (a store another user \
             controls could make it rewrite this user's files). Run cairn as uid {} \
             (e.g. `sudo -u '#{}' cairn ...`), or, to take the store over, \
             `chown -R {user} {}`",
            meta.uid(),
            meta.uid(),
            meta.uid(),
            root.display()
        );
        return Err(EngineError::io(
            op,
            root,
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, text),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & !STORE_DIR_MODE_ALLOWED != 0 {
        let text = format!(
            "its mode is {mode:04o}, and a store is for its owner alone (mode 0700): others \
             could read every checkpointed file through it; run `chmod 700 {}`",
            root.display()
        );
        return Err(EngineError::io(op, root, std::io::Error::other(text)));
    }
    Ok(())
}

/// Refuses the store directory `root` (on the real file system) if any of
/// its entries, or of its subdirectories' (`log/`, `blobs/`, `snapshot/`,
/// ...), is a symbolic link. cairn writes the store's own files by name
/// (the lock file, log segments, packs, caches): through a link planted in
/// a store that came with a clone or an archive (`.cairn/LOCK ->
/// ~/.bashrc`, `.cairn/snapshot -> ~/.ssh`) it would truncate or write
/// files anywhere. The store directory itself may be a link (it is
/// resolved once, as a whole). The refusal names the link, where it
/// points, and the fix.
pub fn check_no_links(root: &Path) -> Result<()> {
    for (path, t) in list_typed(root)? {
        if t.is_symlink() {
            return Err(link_refused(&path));
        }
        if t.is_dir() {
            if let Some((inner, _)) = list_typed(&path)?.into_iter().find(|(_, t)| t.is_symlink()) {
                return Err(link_refused(&inner));
            }
        }
    }
    Ok(())
}

/// The entries of the store directory `root`'s subdirectory `sub` (`log`,
/// `blobs`, `index`, `snapshot`), refusing, as [`check_no_links`] does for
/// the whole store, the subdirectory if it is a symbolic link and any of
/// its entries that is one. For a command that only reads: it checks the
/// directories it reads or writes through, when it first does, not all
/// of the store's (a `log` query reads `log/` and `index/`, never
/// `blobs/`), and the listing serves the reader too (the log directory is
/// listed once). A subdirectory that does not exist has no entries.
pub fn list_sub_no_links(root: &Path, sub: &str) -> Result<Vec<String>> {
    let dir = root.join(sub);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.file_type().is_symlink() => return Err(link_refused(&dir)),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(EngineError::io("read the type of", &dir, e)),
    }
    let mut names = Vec::new();
    for (path, t) in list_typed(&dir)? {
        if t.is_symlink() {
            return Err(link_refused(&path));
        }
        if let Some(name) = path.file_name() {
            names.push(name.to_string_lossy().into_owned());
        }
    }
    Ok(names)
}

/// The refusal of the link at `path` in a store: where it points, and
/// the fix.
fn link_refused(path: &Path) -> EngineError {
    let to = std::fs::read_link(path)
        .map(|t| t.display().to_string())
        .unwrap_or_else(|_| "?".into());
    let text = format!(
        "it is a symbolic link (to {to}), and cairn writes the store's own files only \
         inside the store: a link could make it write anywhere. If you trust this store, \
         replace the link with what it points to; otherwise remove it (`rm {}`)",
        path.display()
    );
    EngineError::io(
        "refuse a link in the store",
        path,
        std::io::Error::other(text),
    )
}

/// The entries of `dir` with their types (read with the listing, no
/// `stat` each); none if it does not exist.
fn list_typed(dir: &Path) -> Result<Vec<(PathBuf, std::fs::FileType)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(EngineError::io("list the store directory", dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|e| EngineError::io("list the store directory", dir, e))?;
        let t = e
            .file_type()
            .map_err(|err| EngineError::io("read the type of", e.path(), err))?;
        out.push((e.path(), t));
    }
    Ok(out)
}

/// The process that holds the lock on `lock_file` now, as far as can be
/// told, for the "locked" error. The `pid N` in the file is only what its
/// last taker wrote: a holder that took the lock but has not written yet
/// leaves the previous one's id there, and a process that has since
/// exited is no holder. So, on Linux, the kernel's table of locks
/// (`/proc/locks`) is asked which process holds an flock on the file's
/// inode; elsewhere (or when the table says nothing), the id in the file
/// is given only if that process is alive. `None`: the holder cannot be
/// known.
pub fn current_lock_holder(vfs: &dyn Vfs, lock_file: &Path) -> Option<u32> {
    if let Some(pid) = kernel_lock_holder(lock_file) {
        return Some(pid);
    }
    lock_holder(vfs, lock_file).filter(|pid| process_is_alive(*pid))
}

/// The process `/proc/locks` names as holding an flock on `lock_file`'s
/// inode. Linux only; `None` elsewhere, for a file not on the real file
/// system, or when no line matches. The kernel hands the table out a page
/// per read, and a lock taken or let go between two reads can shift a line
/// out of view, so a table without a match is read again, a few times.
fn kernel_lock_holder(lock_file: &Path) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        /// `/proc/locks` lists every lock on the machine; a few thousand
        /// lines is a busy machine. Read no more than this of it.
        const MAX_PROC_LOCKS_BYTES: u64 = 4 << 20;
        /// Reads of the table before giving up: a miss only happens while
        /// other locks change, and the answer is only for an error message.
        const PROC_LOCKS_READS: usize = 3;
        let meta = std::fs::metadata(lock_file).ok()?;
        let dev = meta.dev();
        let place = (libc::major(dev), libc::minor(dev), meta.ino());
        (0..PROC_LOCKS_READS).find_map(|_| {
            let mut table = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(
                    std::fs::File::open("/proc/locks").ok()?,
                    MAX_PROC_LOCKS_BYTES,
                ),
                &mut table,
            )
            .ok()?;
            flock_holder_in(&table, place)
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = lock_file;
        None
    }
}

/// The process a `/proc/locks` table names as holding an flock on the
/// inode at `(major, minor, inode)`: a line
/// `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF` (major and minor in
/// hex). Lines of waiters (marked `->`) and other kinds of lock are
/// skipped. When no line has the device too (a file system such as btrfs
/// reports one device to `stat` and another to the table), a line with
/// the inode alone is taken if it is the only one.
fn flock_holder_in(table: &str, (major, minor, inode): (u32, u32, u64)) -> Option<u32> {
    let mut same_inode = Vec::new();
    for line in table.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") {
            continue;
        }
        let Some(place) = fields.get(5) else {
            continue;
        };
        let place: Vec<&str> = place.split(':').collect();
        let [maj, min, i] = place.as_slice() else {
            continue;
        };
        if i.parse::<u64>().ok() != Some(inode) {
            continue;
        }
        // A pid of -1 (an open file description lock) names nobody.
        let Some(pid) = fields.get(4).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if u32::from_str_radix(maj, 16).ok() == Some(major)
            && u32::from_str_radix(min, 16).ok() == Some(minor)
        {
            return Some(pid);
        }
        same_inode.push(pid);
    }
    match same_inode.as_slice() {
        [only] => Some(*only),
        _ => None,
    }
}

/// Whether a process with this id exists (one of another user's counts).
fn process_is_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: signal 0 sends nothing; it only checks that the process
        // exists and may be signalled.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// An open store directory, holding the exclusive lock for its lifetime.
#[derive(Debug)]
pub struct StoreDir {
    root: PathBuf,
    vfs: Arc<dyn Vfs>,
    _lock: LockGuard,
}

impl StoreDir {
    /// Opens (creating if needed, owner-only) the store directory `root`
    /// and takes its lock. A second process gets [`EngineError::Locked`];
    /// a directory that cannot be created gets [`EngineError::ReadOnly`].
    pub fn open(vfs: Arc<dyn Vfs>, root: &Path) -> Result<StoreDir> {
        let mut created = false;
        for sub in ["", LOG_DIR_NAME, BLOB_DIR_NAME, "index", "snapshot"] {
            let dir = root.join(sub);
            if vfs.exists(&dir) {
                continue;
            }
            created = true;
            vfs.create_dir_all(&dir).map_err(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
                    EngineError::ReadOnly {
                        path: dir.clone(),
                        source: e,
                    }
                }
                _ => EngineError::io("create directory", &dir, e),
            })?;
        }
        // The directory fsyncs below are needed only the first time: they
        // make the creation of `.cairn` and its subdirectories durable
        // (without them a power loss right after the first acknowledged
        // append could lose the whole log directory of a new store). The
        // `.gitignore` is created only after they succeeded, so its
        // presence proves an earlier open made the directories durable;
        // a crash between the creation and the fsyncs leaves no
        // `.gitignore`, and the next open fsyncs again. Every later open
        // (each hook process) skips two directory fsyncs that would protect
        // nothing.
        let gitignore = root.join(GITIGNORE_FILE);
        if created || !vfs.exists(&gitignore) {
            vfs.sync_dir(root)
                .map_err(|e| EngineError::io("sync directory", root, e))?;
            if let Some(parent) = root.parent() {
                // Make the creation of `.cairn` itself durable; a parent we
                // cannot open for syncing (e.g. "") is not an error.
                let _ = vfs.sync_dir(if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                });
            }
        }
        // A store in a git repository stays out of it: `git add -A` would
        // otherwise commit every checkpointed file (tracked `.env`s too).
        // Written once, never replaced (the user may have edited it).
        // (`CreateNew` fails when it exists.)
        if let Ok(f) = vfs.open(&gitignore, crate::vfs::OpenMode::CreateNew) {
            let _ = f.write_all_at(GITIGNORE_TEXT.as_bytes(), 0);
        }
        let lock_file = root.join(LOCK_FILE_NAME);
        let lock = vfs.lock_exclusive(&lock_file).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => EngineError::Locked {
                holder: current_lock_holder(vfs.as_ref(), &lock_file),
                lock_file: lock_file.clone(),
            },
            _ => EngineError::io("lock", &lock_file, e),
        })?;
        Ok(StoreDir {
            root: root.to_path_buf(),
            vfs,
            _lock: lock,
        })
    }

    /// The `.cairn` directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The log directory.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join(LOG_DIR_NAME)
    }
    /// The blob directory.
    pub fn blob_dir(&self) -> PathBuf {
        self.root.join(BLOB_DIR_NAME)
    }
    /// The index directory.
    pub fn index_dir(&self) -> PathBuf {
        self.root.join("index")
    }
    /// The snapshot cache directory.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.root.join("snapshot")
    }
    /// The file system the store lives on.
    pub fn vfs(&self) -> &Arc<dyn Vfs> {
        &self.vfs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RealVfs;

    #[test]
    fn second_open_is_locked_and_names_the_lock_file() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        let first = StoreDir::open(Arc::new(RealVfs), &root).unwrap();
        let err = StoreDir::open(Arc::new(RealVfs), &root).unwrap_err();
        assert!(matches!(err, EngineError::Locked { .. }));
        assert!(err.to_string().contains("LOCK"), "{err}");
        drop(first);
        StoreDir::open(Arc::new(RealVfs), &root).unwrap();
    }

    /// The "locked" error named the process id left in the lock file by
    /// its last taker, long gone: it names the process that holds the
    /// lock now, or says plainly that it cannot be known.
    #[test]
    fn locked_error_names_the_real_holder_not_a_stale_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        let _held = StoreDir::open(Arc::new(RealVfs), &root).unwrap();
        // A stale id: no process has it (pid_max is at most 2^22).
        std::fs::write(root.join(LOCK_FILE_NAME), "pid 4194305\n").unwrap();
        let err = StoreDir::open(Arc::new(RealVfs), &root).unwrap_err();
        let EngineError::Locked { holder, .. } = &err else {
            panic!("{err}");
        };
        // The holder is this process (the first handle), found in the
        // kernel's table on Linux; elsewhere it cannot be known.
        let expected = cfg!(target_os = "linux").then(std::process::id);
        assert!(*holder == expected || holder.is_none(), "{err}");
        assert!(!err.to_string().contains("4194305"), "{err}");
        // A file not on the real disk, with a dead id: not known.
        let sim = crate::vfs::SimVfs::new();
        sim.create_dir_all(Path::new("/s")).unwrap();
        let f = sim
            .open(Path::new("/s/LOCK"), crate::vfs::OpenMode::CreateNew)
            .unwrap();
        f.write_all_at(b"pid 4194305\n", 0).unwrap();
        assert_eq!(current_lock_holder(&sim, Path::new("/s/LOCK")), None);
        let locked = EngineError::Locked {
            lock_file: "/s/LOCK".into(),
            holder: None,
        };
        assert!(locked.to_string().contains("cannot be known"), "{locked}");
    }

    /// The kernel's lock table is read by device and inode; waiters,
    /// other kinds of lock and unnamed holders are skipped; the inode
    /// alone is enough only when one line has it.
    #[test]
    fn the_kernel_lock_table_names_the_flock_holder_of_the_inode() {
        let table = "1: POSIX  ADVISORY  WRITE 11 fe:00:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 22 fe:01:77 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 33 fe:00:77 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 44 fe:00:77 0 EOF\n\
                     4: OFDLCK ADVISORY  WRITE -1 fe:00:88 0 EOF\n\
                     5: FLOCK  ADVISORY  WRITE 55 fe:00:99 0 EOF\n\
                     junk\n";
        assert_eq!(flock_holder_in(table, (0xfe, 0, 77)), Some(44));
        assert_eq!(flock_holder_in(table, (0xfe, 1, 77)), Some(22));
        // Another device: two lines have inode 77, so neither is named.
        assert_eq!(flock_holder_in(table, (0xfe, 2, 77)), None);
        // Another device, one line with inode 99: that one.
        assert_eq!(flock_holder_in(table, (0x08, 1, 99)), Some(55));
        assert_eq!(flock_holder_in(table, (0xfe, 0, 88)), None);
        assert_eq!(flock_holder_in("", (0xfe, 0, 77)), None);
    }

    /// The lock file is written over in place (no truncation to zero per
    /// open); a longer line left by an earlier holder is cut to the new
    /// one, never left as a tail that changes the pid read back.
    #[test]
    fn the_lock_file_names_this_process_after_a_longer_line() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        drop(StoreDir::open(Arc::new(RealVfs), &root).unwrap());
        std::fs::write(root.join(LOCK_FILE_NAME), "pid 4194305999999\n").unwrap();
        let _held = StoreDir::open(Arc::new(RealVfs), &root).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join(LOCK_FILE_NAME)).unwrap(),
            format!("pid {}\n", std::process::id())
        );
    }

    #[test]
    fn store_dir_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        let _d = StoreDir::open(Arc::new(RealVfs), &root).unwrap();
        let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_store_open_to_others_is_refused_with_the_chmod_that_mends_it() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        check_owner_and_mode(&root).unwrap();
        drop(StoreDir::open(Arc::new(RealVfs), &root).unwrap());
        check_owner_and_mode(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_owner_and_mode(&root).unwrap_err().to_string();
        assert!(
            e.contains("0755") && e.contains(&format!("chmod 700 {}", root.display())),
            "{e}"
        );
    }

    /// Regression (issue 27, found by the audit): `.cairn/LOCK ->
    /// ../.bashrc` made the lock truncate the file it points to, and a
    /// linked `.cairn/snapshot` put the caches outside the store.
    #[test]
    fn a_link_in_the_store_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        drop(StoreDir::open(Arc::new(RealVfs), &root).unwrap());
        check_no_links(&root).unwrap();
        std::fs::write(tmp.path().join("precious"), "keep\n").unwrap();
        for (link, to) in [
            ("LOCK", "../precious"),
            ("log/00000000000000000009.seg", "../../precious"),
        ] {
            let at = root.join(link);
            let _ = std::fs::remove_file(&at);
            std::os::unix::fs::symlink(to, &at).unwrap();
            let e = check_no_links(&root).unwrap_err().to_string();
            assert!(
                e.contains("symbolic link") && e.contains(&format!("rm {}", at.display())),
                "{e}"
            );
            std::fs::remove_file(&at).unwrap();
        }
        check_no_links(&root).unwrap();
    }

    /// A read-only command checks the subdirectories it uses, one by one
    /// (issue 33): a link in one of them, or the subdirectory itself a
    /// link, is refused as the whole store's check refuses it; a link in
    /// another subdirectory is no concern of that listing.
    #[test]
    fn a_subdirectory_listing_refuses_a_link_in_it_or_as_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        drop(StoreDir::open(Arc::new(RealVfs), &root).unwrap());
        std::fs::write(root.join("log/a.seg"), "x").unwrap();
        assert_eq!(list_sub_no_links(&root, "log").unwrap(), vec!["a.seg"]);
        assert!(list_sub_no_links(&root, "absent").unwrap().is_empty());
        std::os::unix::fs::symlink("../../precious", root.join("blobs/pack-1.pack")).unwrap();
        assert_eq!(list_sub_no_links(&root, "log").unwrap(), vec!["a.seg"]);
        let e = list_sub_no_links(&root, "blobs").unwrap_err().to_string();
        assert!(
            e.contains("symbolic link") && e.contains("pack-1.pack"),
            "{e}"
        );
        assert!(check_no_links(&root).is_err());
        std::fs::remove_dir_all(root.join("index")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("index")).unwrap();
        let e = list_sub_no_links(&root, "index").unwrap_err().to_string();
        assert!(e.contains("symbolic link") && e.contains("index"), "{e}");
    }

    #[test]
    fn git_never_sees_the_store_and_an_edited_gitignore_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join(".cairn");
        drop(StoreDir::open(Arc::new(RealVfs), &root).unwrap());
        let text = std::fs::read_to_string(root.join(".gitignore")).unwrap();
        assert!(text.lines().any(|l| l == "*"), "{text}");
        std::fs::write(root.join(".gitignore"), "mine\n").unwrap();
        drop(StoreDir::open(Arc::new(RealVfs), &root).unwrap());
        let text = std::fs::read_to_string(root.join(".gitignore")).unwrap();
        assert_eq!(text, "mine\n");
    }

    #[test]
    fn read_only_parent_is_a_clear_error() {
        let err =
            StoreDir::open(Arc::new(RealVfs), Path::new("/proc/cairn-test/.cairn")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/proc/cairn-test"), "{msg}");
    }
}
