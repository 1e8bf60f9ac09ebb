//! The workspace handle: its root, cairn's cache directory for it, the
//! options, and the persisted tracked-path set.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use serde::{Deserialize, Serialize};

use cairn_codec::BlobHash;

use crate::durable::write_atomic;
use crate::error::{Result, SnapshotError};
use crate::list_cache::ListCacheFile;
use crate::relpath;
use crate::stat_cache::StatCacheFile;
use crate::watch::{WatchStats, Watcher};

/// Files larger than this are skipped by default (and counted as
/// `too_large`): 256 MiB keeps a stray disk image or model file from
/// swallowing the store, while every source file, lock file and ordinary
/// SQLite database is captured. A setting, not a hard limit.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Options of a workspace, with documented defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SnapshotOptions {
    /// Files larger than this are not captured and are counted as
    /// `too_large`. Default [`DEFAULT_MAX_FILE_BYTES`] (256 MiB).
    pub max_file_bytes: u64,
    /// Honour `.gitignore`, `.git/info/exclude` and `.cairnignore`. Default
    /// true. When false every file is captured (still never `.git`/`.cairn`).
    pub follow_gitignore: bool,
    /// Workspace-relative paths never captured nor touched, besides `.git`
    /// and `.cairn` (for example a store directory placed elsewhere in the
    /// tree). Default empty.
    pub exclude: Vec<String>,
    /// Threads hashing files during a scan; 0 means the machine's
    /// parallelism (capped at [`MAX_HASH_THREADS`]). Default 0.
    pub hash_threads: usize,
    /// fsync each file a rollback writes before renaming it into place, so
    /// a crash never leaves a restored file empty. Default true.
    pub fsync_restored_files: bool,
}

/// The most threads a scan hashes with: beyond this the disk, not the CPU,
/// is the bottleneck, and each thread holds a read buffer.
pub const MAX_HASH_THREADS: usize = 8;

/// The machine's parallelism, read once: `available_parallelism` reads
/// cgroup files on every call, which a watched checkpoint of a few files
/// would otherwise pay each time.
pub(crate) fn parallelism() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            follow_gitignore: true,
            exclude: Vec::new(),
            hash_threads: 0,
            fsync_restored_files: true,
        }
    }
}

pub(crate) const TRACKED_FILE: &str = "tracked.json";
pub(crate) const LAST_FILE: &str = "last.json";
pub(crate) const STAT_CACHE_FILE: &str = "stat-cache.bin";
pub(crate) const CLOCK_FILE: &str = "clock";
pub(crate) const CHECKPOINTS_FILE: &str = "checkpoints.bin";

/// The tracked paths, persisted in the cache directory.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct TrackState {
    /// Every path ever tracked: captured even if ignored.
    pub tracked: BTreeSet<String>,
    /// Paths tracked (or touched by a rollback) since the last checkpoint:
    /// what a tracked-only checkpoint re-reads.
    pub dirty: BTreeSet<String>,
    /// Set when the file was found damaged and started afresh: the paths
    /// tracked and dirty before are unknown, so the next checkpoint scans
    /// the whole workspace, tracked-only or not, and clears it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rescan: bool,
}

/// What the last capture produced: the base of a tracked-only checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct LastCapture {
    pub root: BlobHash,
    pub files: u64,
    /// Set when a rollback has changed the workspace since this capture
    /// (which was its undo point): the next checkpoint counts its
    /// `changed` against the tree the rollback left, not this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<RolledBack>,
}

/// The tree a rollback left, as its undo point's tree with the target's
/// entries at the paths it set: those in `scope` (every path when empty)
/// except the `kept` ones.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct RolledBack {
    pub target: BlobHash,
    pub scope: Vec<String>,
    pub kept: Vec<String>,
}

impl RolledBack {
    /// Whether the rollback set `path` to the target's entry.
    pub(crate) fn set(&self, path: &str) -> bool {
        relpath::in_scope(path, &self.scope) && !self.kept.iter().any(|k| relpath::covers(k, path))
    }
}

/// A workspace: the directory tree cairn checkpoints and rolls back.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    cache_dir: PathBuf,
    opts: SnapshotOptions,
    /// Normalised `opts.exclude`, plus cairn's own directories (`own`).
    excluded: Vec<String>,
    /// The cache directory relative to the root, if it lies inside it.
    /// Directories inside the workspace that are cairn's own (the cache
    /// directory, the store directory): excluded, and not counted as
    /// skipped.
    own: Vec<String>,
    /// The file watcher, once [`Workspace::watch`] started it.
    watcher: Mutex<Option<Arc<Watcher>>>,
    /// The stat cache file, with the copy this process last saved or
    /// loaded and a save running in the background.
    stat_cache: StatCacheFile,
    /// The checkpoint list file, with the list as this process last
    /// folded it (see `list::list_checkpoints`).
    checkpoint_list: ListCacheFile,
    /// Held while the tracked-path file is read, changed and written back
    /// (see [`Workspace::update_track`]), so concurrent updates (a rollback
    /// marks paths dirty while its pre-rollback checkpoint clears others) do
    /// not lose each other's. It holds the paths a rollback in progress
    /// marked dirty: a checkpoint that captured them earlier must not clear
    /// those marks (see [`Workspace::mark_dirty_pinned`]).
    track_lock: Mutex<BTreeSet<String>>,
    /// Problems a checkpoint worked around (a damaged tracked-path file),
    /// for the caller to show (see [`Workspace::take_warnings`]).
    warnings: Mutex<Vec<String>>,
    /// Held through each checkpoint, rollback and retention run (see
    /// [`Workspace::flow`]).
    flow: Mutex<()>,
    /// Opened with [`Workspace::open_read_only`]: the caches are read,
    /// never written, and anything that would change the workspace or
    /// the tracked paths is refused.
    read_only: bool,
}

impl Drop for Workspace {
    fn drop(&mut self) {
        self.stat_cache.finish_save();
        self.checkpoint_list.save_if_behind();
    }
}

impl Workspace {
    /// Opens the workspace at `root` (which must be a directory), keeping
    /// cairn's caches for it in `cache_dir` (normally `.cairn/snapshot`),
    /// created if needed.
    pub fn open(root: &Path, cache_dir: &Path, opts: SnapshotOptions) -> Result<Workspace> {
        std::fs::create_dir_all(cache_dir)
            .map_err(|e| SnapshotError::io("create snapshot cache directory", cache_dir, e))?;
        Self::open_with(root, cache_dir, opts, false)
    }

    /// Opens the workspace at `root` to look, not to change: for listing
    /// checkpoints and planning a rollback (`--dry-run`) beside a process
    /// that holds the store's lock, or on a store this user may only read.
    /// The caches in `cache_dir` are read when present and never written
    /// (a scan keeps what it learns in memory), the cache directory is not
    /// created, and [`Workspace::track`] (like every flow that would write
    /// the workspace) is refused with [`SnapshotError::ReadOnly`].
    pub fn open_read_only(
        root: &Path,
        cache_dir: &Path,
        opts: SnapshotOptions,
    ) -> Result<Workspace> {
        Self::open_with(root, cache_dir, opts, true)
    }

    fn open_with(
        root: &Path,
        cache_dir: &Path,
        opts: SnapshotOptions,
        read_only: bool,
    ) -> Result<Workspace> {
        let root = root
            .canonicalize()
            .map_err(|e| SnapshotError::io("open workspace root", root, e))?;
        if !root.is_dir() {
            return Err(SnapshotError::Invalid(format!(
                "the workspace root {} is not a directory",
                root.display()
            )));
        }
        let cache_dir = match cache_dir.canonicalize() {
            Ok(c) => c,
            // Read-only, a store that never checkpointed has no cache
            // directory: every cache is then empty.
            Err(e) if read_only && e.kind() == std::io::ErrorKind::NotFound => {
                std::path::absolute(cache_dir)
                    .map_err(|e| SnapshotError::io("open snapshot cache directory", cache_dir, e))?
            }
            Err(e) => {
                return Err(SnapshotError::io(
                    "open snapshot cache directory",
                    cache_dir,
                    e,
                ))
            }
        };
        let mut excluded = Vec::new();
        for x in &opts.exclude {
            excluded.push(relpath::normalize(&root, x)?);
        }
        let mut ws = Workspace {
            root,
            cache_dir: cache_dir.clone(),
            opts,
            excluded,
            own: Vec::new(),
            watcher: Mutex::new(None),
            stat_cache: StatCacheFile::new(cache_dir.join(STAT_CACHE_FILE), read_only),
            checkpoint_list: ListCacheFile::new(cache_dir.join(CHECKPOINTS_FILE), read_only),
            track_lock: Mutex::new(BTreeSet::new()),
            warnings: Mutex::new(Vec::new()),
            flow: Mutex::new(()),
            read_only,
        };
        ws.own_dir(&cache_dir);
        // What a killed rollback staged is removed at any open.
        crate::staging::clean_staging(&ws.cache_dir);
        Ok(ws)
    }

    /// Runs checkpoints, rollbacks and retention on this workspace one at a
    /// time, whichever threads call them: each reads and rewrites the
    /// workspace's caches (the last capture, the stat cache, the checkpoint
    /// list), and a checkpoint's base must be the tree the one before it
    /// captured. (Other processes are kept out by the store lock.)
    pub(crate) fn flow(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.flow.lock()
    }

    /// Starts the file watcher (see [`crate::watch`]): from the checkpoint
    /// after next on, checkpoints re-read only the paths that changed
    /// instead of walking the whole tree, falling back to a full scan
    /// whenever the watcher cannot show it saw every change. The first
    /// checkpoint after this call still scans in full. Calling it again
    /// while a watcher runs does nothing.
    pub fn watch(&self) -> Result<()> {
        self.check_writable("watch the workspace")?;
        let mut w = self.watcher.lock();
        if w.is_none() {
            *w = Some(Arc::new(Watcher::start(&self.root, &self.cache_dir)?));
        }
        Ok(())
    }

    /// The checkpoint list file (see [`crate::list_cache`]).
    pub(crate) fn checkpoint_list(&self) -> &ListCacheFile {
        &self.checkpoint_list
    }

    /// The stat cache file (see [`crate::stat_cache`]).
    pub(crate) fn stat_cache(&self) -> &StatCacheFile {
        &self.stat_cache
    }

    /// Waits until the stat cache a checkpoint saves in the background is
    /// written. Never needed for correctness (the next checkpoint, and
    /// dropping the workspace, wait for it); useful to keep that work out
    /// of a measurement that follows.
    pub fn wait_for_caches(&self) {
        self.stat_cache.finish_save();
    }

    /// Stops the file watcher (checkpoints scan in full again).
    pub fn unwatch(&self) {
        self.watcher.lock().take();
    }

    /// The running watcher, if any.
    pub fn watcher(&self) -> Option<Arc<Watcher>> {
        self.watcher.lock().clone()
    }

    /// How checkpoints used the watcher; `None` if no watcher runs.
    pub fn watch_stats(&self) -> Option<WatchStats> {
        self.watcher.lock().as_ref().map(|w| w.stats())
    }

    /// True if opened with [`Workspace::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Refuses `what` on a read-only workspace.
    pub(crate) fn check_writable(&self, what: &'static str) -> Result<()> {
        if self.read_only {
            return Err(SnapshotError::ReadOnly { what });
        }
        Ok(())
    }

    /// The workspace root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The cache directory.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// The options.
    pub fn options(&self) -> &SnapshotOptions {
        &self.opts
    }

    /// Normalises a caller-given path (relative or absolute inside the
    /// workspace) to a workspace-relative one, refusing escapes.
    pub fn normalize(&self, path: &str) -> Result<String> {
        let p = relpath::normalize(&self.root, path)?;
        if self.is_excluded(&p) {
            return Err(SnapshotError::bad_path(
                path,
                "the path is excluded from checkpoints",
            ));
        }
        Ok(p)
    }

    /// True if paths are excluded besides `.git` and `.cairn` (a walk then
    /// checks every path; otherwise only names it cannot skip checking).
    pub(crate) fn has_excludes(&self) -> bool {
        !self.excluded.is_empty()
    }

    /// True if `rel` is an excluded path or under one (`.git`/`.cairn` included).
    pub(crate) fn is_excluded(&self, rel: &str) -> bool {
        relpath::protected_reason(rel).is_some()
            || (!rel.is_empty()
                && relpath::in_scope(rel, &self.excluded)
                && !self.excluded.is_empty())
    }

    /// Announces that the embedder is about to write `paths` (workspace
    /// relative, or absolute inside the workspace). Persisted in the cache
    /// directory, so `cairn track` in one process is seen by `cairn
    /// checkpoint` in the next. A tracked path is captured by every later
    /// checkpoint even if it is ignored, including the fact that it does not
    /// exist yet; a tracked directory is captured whole.
    pub fn track(&self, paths: &[&str]) -> Result<()> {
        let mut norm = Vec::with_capacity(paths.len());
        for p in paths {
            let n = self.normalize(p)?;
            if n.is_empty() {
                return Err(SnapshotError::bad_path(
                    *p,
                    "track files or directories inside the workspace, not the workspace itself",
                ));
            }
            // A checkpoint never follows a symlink, so a path under one
            // would be skipped (`under_symlink`) every time: say so now.
            if let Some(a) = self.symlinked_dir(&n) {
                return Err(SnapshotError::bad_path(
                    *p,
                    format!("`{a}` is a symlink, which checkpoints never follow (it may lead out of the workspace): track the path it leads to instead"),
                ));
            }
            norm.push(n);
        }
        self.update_track(true, |st, _| {
            for n in norm {
                st.tracked.insert(n.clone());
                st.dirty.insert(n);
            }
        })
    }

    /// The first directory of the workspace-relative path `rel` (from its
    /// parent up) that is a symlink on disk now, if any: cairn never goes
    /// through one, so `rel` cannot be captured, tracked or written there.
    pub fn symlinked_dir<'a>(&self, rel: &'a str) -> Option<&'a str> {
        let mut a = crate::relpath::parent(rel);
        while !a.is_empty() {
            if std::fs::symlink_metadata(self.root.join(a)).is_ok_and(|m| m.is_symlink()) {
                return Some(a);
            }
            a = crate::relpath::parent(a);
        }
        None
    }

    /// Every path tracked so far.
    pub fn tracked(&self) -> Result<Vec<String>> {
        Ok(self.load_track()?.tracked.into_iter().collect())
    }

    /// Tells the workspace where its store lives: a store directory inside
    /// the workspace is never captured or restored, whatever its name (one
    /// named `.cairn` never is anyway).
    pub fn with_store_dir(mut self, store: &Path) -> Workspace {
        let store = store.canonicalize().unwrap_or_else(|_| store.to_path_buf());
        self.own_dir(&store);
        self
    }

    /// Marks `dir` (canonical), if it lies inside the workspace, as one of
    /// cairn's own: excluded (unless `.git`/`.cairn` protect it already)
    /// and not counted as skipped.
    fn own_dir(&mut self, dir: &Path) {
        let Some(rel) = dir.strip_prefix(&self.root).ok().and_then(Path::to_str) else {
            return;
        };
        if rel.is_empty() {
            return;
        }
        if relpath::protected_reason(rel).is_none() {
            self.excluded.push(rel.to_string());
        }
        self.own.push(rel.to_string());
    }

    /// True if `rel` is one of cairn's own directories (the cache or the
    /// store directory) itself.
    pub(crate) fn is_own_path(&self, rel: &str) -> bool {
        self.own.iter().any(|o| o == rel)
    }

    pub(crate) fn cache_path(&self, name: &str) -> PathBuf {
        self.cache_dir.join(name)
    }

    pub(crate) fn load_track(&self) -> Result<TrackState> {
        let p = self.cache_path(TRACKED_FILE);
        match std::fs::read(&p) {
            Ok(b) => {
                let st: TrackState = serde_json::from_slice(&b).map_err(|e| {
                    SnapshotError::Invalid(format!("{} is damaged ({e})", p.display()))
                })?;
                // Read from the store, so checked: a path out of the
                // workspace (`../x`, `/etc/x`) would be captured from
                // there, and written into a manifest no reader accepts.
                if let Some(bad) = st
                    .tracked
                    .iter()
                    .chain(&st.dirty)
                    .find(|q| q.is_empty() || !q.split('/').all(crate::relpath::valid_name))
                {
                    return Err(SnapshotError::Invalid(format!(
                        "{} is damaged (`{}` is not a workspace-relative path)",
                        p.display(),
                        bad.escape_debug()
                    )));
                }
                Ok(st)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TrackState::default()),
            Err(e) => Err(SnapshotError::io("read tracked paths", p, e)),
        }
    }

    /// [`Workspace::load_track`] for a capture: a damaged tracked-path file
    /// is read as empty (a full scan re-reads every changed file anyway;
    /// the tracked set only adds paths to re-read) and `Ok(None)` says so.
    pub(crate) fn load_track_for_capture(&self) -> Result<Option<TrackState>> {
        match self.load_track() {
            Ok(t) => Ok(Some(t)),
            Err(SnapshotError::Invalid(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Moves a damaged tracked-path file aside (to `tracked.json.damaged`,
    /// replacing an older one) so later checkpoints and `track` work again;
    /// returns where it went, or `None` if the file is not damaged.
    pub(crate) fn set_aside_damaged_track(&self) -> Result<Option<PathBuf>> {
        let _pinned = self.track_lock.lock();
        if !matches!(self.load_track(), Err(SnapshotError::Invalid(_))) {
            return Ok(None);
        }
        self.set_aside(TRACKED_FILE).map(Some)
    }

    /// Moves the damaged cache file `name` to `name.damaged` (replacing an
    /// older one): out of the way of what comes next, kept for a look.
    /// Returns where it went.
    pub(crate) fn set_aside(&self, name: &str) -> Result<PathBuf> {
        let from = self.cache_path(name);
        let to = self.cache_path(&format!("{name}.damaged"));
        std::fs::rename(&from, &to).map_err(|e| SnapshotError::io("set aside", &from, e))?;
        Ok(to)
    }

    /// Records a problem a checkpoint worked around, for
    /// [`Workspace::take_warnings`].
    pub(crate) fn warn(&self, text: String) {
        self.warnings.lock().push(text);
    }

    /// The problems the checkpoints since the last call worked around (a
    /// damaged tracked-path file read as empty, and where it was set
    /// aside), oldest first; a CLI prints them after the checkpoint.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock())
    }

    /// Reads the tracked-path file, lets `change` edit it (with the pinned
    /// paths at hand) and writes it back if it changed, all under
    /// `track_lock`. `durable`: fsync it (a tracked path or a dirty mark
    /// forgotten after a crash would let a change escape the next
    /// checkpoint); a lost clear only costs a few re-reads.
    fn update_track(
        &self,
        durable: bool,
        change: impl FnOnce(&mut TrackState, &BTreeSet<String>),
    ) -> Result<()> {
        self.check_writable("change the tracked paths")?;
        let pinned = self.track_lock.lock();
        let mut st = match self.load_track() {
            Ok(st) => st,
            Err(SnapshotError::Invalid(why)) => {
                // Damaged: set it aside and start afresh, with the next
                // checkpoint a full scan (what it said is unknown).
                let to = self.set_aside(TRACKED_FILE)?;
                self.warn(format!(
                    "{why}: it was moved to {}; the paths tracked before are unknown, so the next checkpoint scans the whole workspace",
                    to.display()
                ));
                TrackState {
                    rescan: true,
                    ..TrackState::default()
                }
            }
            Err(e) => return Err(e),
        };
        let before = st.clone();
        change(&mut st, &pinned);
        if st == before {
            return Ok(());
        }
        let bytes = serde_json::to_vec(&st).map_err(|e| SnapshotError::Invalid(e.to_string()))?;
        write_atomic(&self.cache_path(TRACKED_FILE), &bytes, durable)
    }

    /// Marks paths dirty (for the next tracked-only checkpoint) without
    /// adding them to `tracked`, and keeps the marks until
    /// [`Workspace::unpin_dirty`]: a checkpoint running at the same time
    /// (the pre-rollback checkpoint, which captured these paths in their
    /// old state) does not clear them.
    pub(crate) fn mark_dirty_pinned(&self, paths: &[String]) -> Result<()> {
        self.track_lock.lock().extend(paths.iter().cloned());
        self.update_track(true, |st, _| st.dirty.extend(paths.iter().cloned()))
    }

    /// Lets later checkpoints clear the marks of [`Workspace::mark_dirty_pinned`].
    pub(crate) fn unpin_dirty(&self, paths: &[String]) {
        let mut pinned = self.track_lock.lock();
        for p in paths {
            pinned.remove(p);
        }
    }

    /// Clears the given paths from the dirty set (after a checkpoint
    /// captured them), except those a rollback in progress pinned.
    /// A `full` scan also ends the rescan a damaged file asked for.
    pub(crate) fn clear_dirty(&self, captured: &BTreeSet<String>, full: bool) -> Result<()> {
        self.update_track(false, |st, pinned| {
            st.dirty
                .retain(|p| !captured.contains(p) || pinned.contains(p));
            if full {
                st.rescan = false;
            }
        })
    }

    /// What the last capture produced; `None` if unknown (no file, or a
    /// damaged or half-written one: see [`crate::in_place`]).
    pub(crate) fn load_last(&self) -> Option<LastCapture> {
        let b = std::fs::read(self.cache_path(LAST_FILE)).ok()?;
        if !crate::in_place::is_record(&b) {
            // Written whole by an older version.
            return serde_json::from_slice(&b).ok();
        }
        serde_json::from_slice(crate::in_place::decode(&b)?).ok()
    }

    pub(crate) fn save_last(&self, last: Option<&LastCapture>) -> Result<()> {
        self.check_writable("checkpoint")?;
        let p = self.cache_path(LAST_FILE);
        match last {
            Some(l) => {
                let bytes =
                    serde_json::to_vec(l).map_err(|e| SnapshotError::Invalid(e.to_string()))?;
                // In place, not by rename: see `in_place` for why, and why
                // a torn write is safe (it reads as unknown).
                crate::in_place::write(&p, &bytes)
            }
            None => match std::fs::remove_file(&p) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(SnapshotError::io("remove", p, e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_rollback_sets_the_paths_in_its_scope_except_the_kept_ones() {
        let rb = |scope: &[&str], kept: &[&str]| RolledBack {
            target: BlobHash([0; 32]),
            scope: scope.iter().map(|s| s.to_string()).collect(),
            kept: kept.iter().map(|s| s.to_string()).collect(),
        };
        let whole = rb(&[], &["locked", "x/y.txt"]);
        assert!(whole.set("a.txt") && whole.set("x/z.txt") && whole.set("lockedout"));
        assert!(!whole.set("locked") && !whole.set("locked/f") && !whole.set("x/y.txt"));
        let scoped = rb(&["src", "README.md"], &["src/gen"]);
        assert!(scoped.set("src/main.rs") && scoped.set("src") && scoped.set("README.md"));
        assert!(!scoped.set("srcs/a") && !scoped.set("README.md.bak") && !scoped.set("docs/x"));
        assert!(!scoped.set("src/gen/a.rs") && scoped.set("src/generate.rs"));
    }

    #[test]
    fn pinned_dirty_marks_survive_a_concurrent_clear() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(
            dir.path(),
            &dir.path().join(".cairn/snapshot"),
            SnapshotOptions::default(),
        )
        .unwrap();
        let a = vec!["a.txt".to_string()];
        let captured: BTreeSet<String> = a.iter().cloned().collect();
        // A rollback marks a.txt while its pre-rollback checkpoint, which
        // captured a.txt dirty from before, clears its captured marks.
        ws.mark_dirty_pinned(&a).unwrap();
        ws.clear_dirty(&captured, false).unwrap();
        assert!(ws.load_track().unwrap().dirty.contains("a.txt"));
        // Once the rollback unpins, a later checkpoint clears it.
        ws.unpin_dirty(&a);
        ws.clear_dirty(&captured, false).unwrap();
        assert!(!ws.load_track().unwrap().dirty.contains("a.txt"));
    }

    #[test]
    fn a_read_only_workspace_creates_and_writes_no_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join(".cairn/snapshot");
        let ws = Workspace::open_read_only(dir.path(), &cache, SnapshotOptions::default()).unwrap();
        assert!(ws.is_read_only());
        assert!(!cache.exists(), "the cache directory was created");
        assert!(ws.tracked().unwrap().is_empty());
        let e = ws.track(&["a.txt"]).unwrap_err();
        assert!(matches!(e, SnapshotError::ReadOnly { .. }), "{e}");
        assert!(e.to_string().contains("read-only"), "{e}");
        assert!(ws.save_last(None).is_err());
        drop(ws);
        assert!(!cache.exists(), "dropping it wrote a cache");
    }
}
