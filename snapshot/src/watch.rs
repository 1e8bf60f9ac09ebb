//! The optional file watcher: for long-lived embedders, it collects the
//! paths that changed since the last checkpoint (through the `notify`
//! crate: inotify on Linux), so a checkpoint re-reads only those paths
//! instead of walking the whole workspace.
//!
//! Correctness comes first. A watched checkpoint is taken only when the
//! watcher can show that it saw every change since the last checkpoint:
//!
//! - a **barrier** before each use: the watcher creates a uniquely named
//!   file in the cache directory and waits until its own event comes back.
//!   The kernel queues events in order, so once the barrier's event is seen,
//!   every earlier change has been seen too. If it does not come back within
//!   [`BARRIER_TIMEOUT`], the checkpoint falls back to a full scan;
//! - a queue **overflow** (inotify's `IN_Q_OVERFLOW`, notify's `Rescan`
//!   flag), more than [`MAX_WATCHED_PATHS`] pending paths, or a path that is
//!   not UTF-8 makes the next checkpoint a full scan;
//! - a watcher **error** (for example the inotify watch limit reached while
//!   adding a new directory) disables the watcher for good: every later
//!   checkpoint is a full scan;
//! - a change to an ignore file (`.gitignore`, `.cairnignore`,
//!   `.git/info/exclude`) or to a `.git` entry itself (a nested repository
//!   appearing or going) changes which paths the scan includes anywhere
//!   below: full scan;
//! - the first checkpoint after the watcher starts is a full scan (what
//!   changed before it started is unknown), and so is any checkpoint whose
//!   base is not the tree the watcher last saw captured.
//!
//! Events under `.git/` (other than the above) and under the store
//! directory are not workspace content and are dropped. Every other path is
//! re-read through the same rules as the walk (`scan::scan_subtree`), so an
//! event for an ignored path changes nothing, exactly as a scan would.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher as _};
use parking_lot::{Condvar, Mutex};

use cairn_codec::BlobHash;

use crate::error::{Result, SnapshotError};
use crate::relpath::CAIRNIGNORE;
use crate::relpath::GIT_DIR_NAME;

/// How long a checkpoint waits for the watcher to report its barrier file
/// before giving up on the watched change set and scanning in full. Events
/// normally come back in well under a millisecond; a generous bound keeps a
/// loaded machine from losing the fast path, and a full scan is always correct.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(2);

/// The most changed paths kept between checkpoints. Past this (a build or
/// `git checkout` rewrote a large part of the tree) a full scan is cheaper
/// than re-reading path by path, and memory stays bounded.
pub const MAX_WATCHED_PATHS: usize = 100_000;

/// The name prefix of barrier files in the cache directory.
const BARRIER_PREFIX: &str = "watch-barrier-";

/// What the event handler has collected.
#[derive(Debug, Default)]
struct State {
    /// Workspace-relative paths changed since the last drain.
    paths: BTreeSet<String>,
    /// The change set is incomplete: the next checkpoint must scan in full.
    overflow: bool,
    /// A watcher error: the watcher is no longer trusted at all.
    broken: Option<String>,
    /// The highest barrier number seen.
    barrier_seen: u64,
    /// A directory appeared since the last drain (notify adds watches for it
    /// after delivering the event, so a second barrier is needed).
    dir_added: bool,
    /// The tree the last capture produced while this watcher ran: the base
    /// the next change set applies to.
    base: Option<BlobHash>,
    /// Times the watched change set was used, and times a full scan was
    /// needed (for reports and tests).
    watched_captures: u64,
    full_captures: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    seen: Condvar,
}

/// A running watcher over one workspace (see the module docs).
pub struct Watcher {
    shared: Arc<Shared>,
    cache_dir: PathBuf,
    next_barrier: AtomicU64,
    _inner: notify::RecommendedWatcher,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

/// What a checkpoint may use: the changed paths since `base`, or nothing
/// (scan in full).
#[derive(Debug)]
pub(crate) struct Drained {
    pub base: BlobHash,
    pub paths: BTreeSet<String>,
}

/// Counters of how checkpoints used the watcher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Checkpoints taken from the watched change set (no walk).
    pub watched_captures: u64,
    /// Checkpoints that had to scan in full while the watcher ran (the first
    /// one, and each after an overflow, error or timeout).
    pub full_captures: u64,
    /// True once a watcher error disabled it (every checkpoint scans in full).
    pub broken: bool,
}

fn is_ignore_file(name: &str) -> bool {
    name == ".gitignore" || name == CAIRNIGNORE
}

/// Classifies one workspace-relative path of an event.
pub(crate) enum PathClass {
    /// Not workspace content (inside `.git/` or the store): dropped.
    Drop,
    /// Changes which paths a scan includes: next checkpoint scans in full.
    Full,
    /// Re-read at the next checkpoint.
    Keep,
}
/// Whether an event of `kind` may change a file: opens and reads do not;
/// a close after writing does (mmap writes raise no modify event).
pub(crate) fn changes_files(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether an event of `kind` may have added a directory (made, or moved
/// in), whose watch must be in place before a flush is answered.
pub(crate) fn may_add_dir(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(CreateKind::Folder | CreateKind::Any)
            | EventKind::Modify(ModifyKind::Name(_))
    )
}

/// The number of the barrier file `p` is, when it is `prefix`N in
/// `cache_dir`.
pub(crate) fn barrier_number(p: &Path, cache_dir: &Path, prefix: &str) -> Option<u64> {
    p.strip_prefix(cache_dir)
        .ok()?
        .to_str()?
        .strip_prefix(prefix)?
        .parse()
        .ok()
}

pub(crate) fn classify(rel: &str) -> PathClass {
    if rel.is_empty() {
        return PathClass::Drop; // the root itself: not an entry
    }
    let comps: Vec<&str> = rel.split('/').collect();
    if crate::relpath::under_store_dir(rel) {
        // The store, or inside a nested workspace's: never captured. A
        // path named `.cairn` below the root may be a file (content) or a
        // nested store (which the scan skips): re-read it.
        return PathClass::Drop;
    }
    if let Some(i) = comps.iter().position(|c| *c == GIT_DIR_NAME) {
        // `.git` itself appearing or going changes which directories are
        // repository roots; `info/exclude` is an ignore file.
        let inner = &comps[i + 1..];
        return if inner.is_empty() || inner == ["info"] || inner == ["info", "exclude"] {
            PathClass::Full
        } else {
            PathClass::Drop
        };
    }
    if comps.last().is_some_and(|n| is_ignore_file(n)) {
        return PathClass::Full;
    }
    PathClass::Keep
}

/// Starts a file watcher that sends its events to `handler`: on `root`,
/// recursively, and on `cache_dir` (where barrier files are made) if it
/// lies outside the root. The in-process watcher and the daemon share it.
pub(crate) fn watch_workspace(
    handler: impl notify::EventHandler,
    root: &Path,
    cache_dir: &Path,
) -> Result<notify::RecommendedWatcher> {
    let werr = |e: notify::Error| SnapshotError::Invalid(format!("file watcher: {e}"));
    let mut inner = notify::recommended_watcher(handler).map_err(werr)?;
    inner.watch(root, RecursiveMode::Recursive).map_err(werr)?;
    if !cache_dir.starts_with(root) {
        inner
            .watch(cache_dir, RecursiveMode::NonRecursive)
            .map_err(werr)?;
    }
    Ok(inner)
}

impl Watcher {
    /// Starts watching `root` (recursively) and, if it lies outside the
    /// root, the cache directory (where barrier files are made).
    pub(crate) fn start(root: &Path, cache_dir: &Path) -> Result<Watcher> {
        let shared = Arc::new(Shared::default());
        let handler = Handler {
            shared: shared.clone(),
            root: root.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
        };
        let inner = watch_workspace(handler, root, cache_dir)?;
        Ok(Watcher {
            shared,
            cache_dir: cache_dir.to_path_buf(),
            next_barrier: AtomicU64::new(1),
            _inner: inner,
        })
    }

    /// Makes a barrier file and waits until its event is seen; false on
    /// timeout or I/O error.
    fn barrier(&self) -> bool {
        let n = self.next_barrier.fetch_add(1, Ordering::Relaxed);
        let p = self.cache_dir.join(format!("{BARRIER_PREFIX}{n}"));
        if std::fs::File::create(&p).is_err() {
            return false;
        }
        let deadline = Instant::now() + BARRIER_TIMEOUT;
        let mut st = self.shared.state.lock();
        let ok = loop {
            if st.barrier_seen >= n {
                break true;
            }
            if self.shared.seen.wait_until(&mut st, deadline).timed_out() {
                break st.barrier_seen >= n;
            }
        };
        drop(st);
        let _ = std::fs::remove_file(&p);
        ok
    }

    /// Takes the change set for a checkpoint: `Some` if it is complete
    /// since the last capture (which must have produced `last_root`), `None`
    /// if the checkpoint must scan in full. Either way the set is emptied:
    /// changes from now on belong to the next checkpoint.
    pub(crate) fn drain(&self, last_root: Option<BlobHash>) -> Option<Drained> {
        let mut ok = self.barrier();
        if ok && std::mem::take(&mut self.shared.state.lock().dir_added) {
            // notify adds watches for a new directory after handing over the
            // batch that announced it: a second barrier comes after that.
            ok = self.barrier();
        }
        let mut st = self.shared.state.lock();
        let paths = std::mem::take(&mut st.paths);
        let overflow = std::mem::take(&mut st.overflow);
        let base = st.base.take();
        let usable = ok && !overflow && st.broken.is_none() && base.is_some() && base == last_root;
        Some(Drained {
            base: base.filter(|_| usable)?,
            paths,
        })
    }

    /// Counts a capture that used the change set (`watched`) or scanned in full.
    pub(crate) fn count(&self, watched: bool) {
        let mut st = self.shared.state.lock();
        if watched {
            st.watched_captures += 1;
        } else {
            st.full_captures += 1;
        }
    }

    /// Records the tree a capture produced (after its record is durable):
    /// the base of the next change set.
    pub(crate) fn captured(&self, root: BlobHash) {
        self.shared.state.lock().base = Some(root);
    }

    /// Forgets the base (a capture failed after draining): the next
    /// checkpoint scans in full.
    pub(crate) fn invalidate(&self) {
        self.shared.state.lock().base = None;
    }

    /// How checkpoints have used the watcher so far.
    pub fn stats(&self) -> WatchStats {
        let st = self.shared.state.lock();
        WatchStats {
            watched_captures: st.watched_captures,
            full_captures: st.full_captures,
            broken: st.broken.is_some(),
        }
    }

    /// Blocks the watcher's event delivery while `f` runs (the kernel keeps
    /// queueing, and overflows if `f` makes enough changes). For tests of
    /// the overflow fallback; not useful otherwise.
    #[doc(hidden)]
    pub fn hold_events<T>(&self, f: impl FnOnce() -> T) -> T {
        let _held = self.shared.state.lock();
        f()
    }

    /// Feeds an event through the handler as if the backend had sent it
    /// (tests of overflow and error handling on any platform).
    #[doc(hidden)]
    pub fn inject(&self, event: notify::Result<notify::Event>, root: &Path) {
        let mut h = Handler {
            shared: self.shared.clone(),
            root: root.to_path_buf(),
            cache_dir: self.cache_dir.clone(),
        };
        notify::EventHandler::handle_event(&mut h, event);
    }
}

struct Handler {
    shared: Arc<Shared>,
    root: PathBuf,
    cache_dir: PathBuf,
}

impl notify::EventHandler for Handler {
    fn handle_event(&mut self, event: notify::Result<notify::Event>) {
        let mut st = self.shared.state.lock();
        match event {
            Err(e) => {
                st.broken = Some(e.to_string());
            }
            Ok(ev) => {
                if ev.need_rescan() {
                    st.overflow = true;
                }
                let relevant = changes_files(&ev.kind);
                if may_add_dir(&ev.kind) {
                    st.dir_added = true;
                }
                for p in &ev.paths {
                    if let Some(n) = barrier_number(p, &self.cache_dir, BARRIER_PREFIX) {
                        st.barrier_seen = st.barrier_seen.max(n);
                        continue;
                    }
                    if !relevant {
                        continue;
                    }
                    let Ok(rel) = p.strip_prefix(&self.root) else {
                        continue;
                    };
                    let Some(rel) = rel.to_str() else {
                        st.overflow = true; // not representable: let the scan count it
                        continue;
                    };
                    match classify(rel) {
                        PathClass::Drop => {}
                        PathClass::Full => st.overflow = true,
                        PathClass::Keep => {
                            if st.paths.len() >= MAX_WATCHED_PATHS {
                                st.overflow = true;
                                st.paths.clear();
                            } else if !st.overflow {
                                st.paths.insert(rel.to_string());
                            }
                        }
                    }
                }
            }
        }
        drop(st);
        self.shared.seen.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_paths() {
        assert!(matches!(classify("src/a.rs"), PathClass::Keep));
        assert!(matches!(classify(".cairn/log/x"), PathClass::Drop));
        assert!(matches!(classify(".cairn"), PathClass::Drop));
        assert!(matches!(classify("sub/.cairn/LOCK"), PathClass::Drop));
        // A file named `.cairn` below the root is content (a nested store
        // directory there is skipped by the scan).
        assert!(matches!(classify("sub/.cairn"), PathClass::Keep));
        assert!(matches!(classify(".git/index"), PathClass::Drop));
        assert!(matches!(classify("sub/.git/HEAD"), PathClass::Drop));
        assert!(matches!(classify(".git/info/exclude"), PathClass::Full));
        assert!(matches!(classify("sub/.git"), PathClass::Full));
        assert!(matches!(classify("a/.gitignore"), PathClass::Full));
        assert!(matches!(classify(".cairnignore"), PathClass::Full));
        assert!(matches!(classify(""), PathClass::Drop));
    }
}
