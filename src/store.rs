//! The [`Store`] handle: one object over the log, the blob store, the
//! workspace snapshots and the query layer, with the commit protocol built in.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::{BlobHash, CheckpointId, Event, EventKind, Lsn};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Durability, Head, Log, LogOptions, LogReader};
use cairn_engine::store_dir::STORE_DIR_NAME;
use cairn_engine::vfs::sim::SimVfs;
use cairn_engine::{RealVfs, StoreDir, Vfs};
use cairn_query::source::ReaderSource;
use cairn_snapshot::retention::DiscardRefused;
use cairn_snapshot::{SnapshotOptions, Workspace};
use parking_lot::{Mutex, RwLock};

use crate::binding::WorkspaceMismatch;
use crate::error::{Error, Result};
use crate::session::Session;

/// Where the log is read from: the writer (this process holds the lock) or
/// a read-only view (another process is writing).
pub(crate) enum LogHandle {
    /// This process writes.
    Writer(Arc<Log>),
    /// Another process writes; this one follows read-only.
    Reader(Box<ReaderSource>),
}

/// The store's blob store: opened with the store by a writing handle, and
/// on first use by a read-only one (issue 33: a `log` query reads no blob,
/// and opening the blob store read its directory, every pack's header and
/// the blob index, and hashed to probe the CPU, for nothing). Its
/// directory is checked for links ([`store_dir::list_sub_no_links`]) when
/// it is opened.
///
/// [`store_dir::list_sub_no_links`]: cairn_engine::store_dir::list_sub_no_links
pub(crate) struct Blobs {
    opened: std::sync::OnceLock<Arc<BlobStore>>,
    /// How to open it read-only when first needed (`None`: opened at once).
    lazy: Option<LazyBlobs>,
}

/// What a read-only handle opens its blob store with.
struct LazyBlobs {
    vfs: Arc<dyn Vfs>,
    /// The store directory.
    root: PathBuf,
    /// The store is on the real file system: refuse links in `blobs/`.
    check_links: bool,
}

impl Blobs {
    /// A blob store opened with the store.
    fn opened(blobs: BlobStore) -> Blobs {
        let opened = std::sync::OnceLock::new();
        let _ = opened.set(Arc::new(blobs));
        Blobs { opened, lazy: None }
    }

    /// The read-only blob store of the store at `root`, opened on first use.
    fn read_only(vfs: Arc<dyn Vfs>, root: &Path, check_links: bool) -> Blobs {
        Blobs {
            opened: std::sync::OnceLock::new(),
            lazy: Some(LazyBlobs {
                vfs,
                root: root.to_path_buf(),
                check_links,
            }),
        }
    }

    /// The blob store, opened now if it was not yet. An open that fails
    /// (the directory damaged, a link in it) fails each use that needs
    /// it, with the reason, and is tried again by the next.
    pub(crate) fn get(&self) -> cairn_engine::Result<&Arc<BlobStore>> {
        if let Some(b) = self.opened.get() {
            return Ok(b);
        }
        let Some(l) = &self.lazy else {
            return Err(cairn_engine::EngineError::Invalid(
                "the blob store was neither opened nor given a way to open it".into(),
            ));
        };
        if l.check_links {
            cairn_engine::store_dir::list_sub_no_links(
                &l.root,
                cairn_engine::store_dir::BLOB_DIR_NAME,
            )?;
        }
        let dir = l.root.join(cairn_engine::store_dir::BLOB_DIR_NAME);
        let b = BlobStore::open_read_only(l.vfs.clone(), &dir)?;
        // Another thread may have opened it meanwhile: its copy is kept.
        let _ = self.opened.set(Arc::new(b));
        self.opened.get().ok_or_else(|| {
            cairn_engine::EngineError::Invalid("the blob store was not kept once opened".into())
        })
    }

    /// The blob store if it has been opened (a close syncs only that).
    pub(crate) fn if_opened(&self) -> Option<&Arc<BlobStore>> {
        self.opened.get()
    }
}

impl cairn_query::source::BlobSource for Blobs {
    fn get(&self, hash: &BlobHash) -> cairn_query::Result<Vec<u8>> {
        Ok(self.get()?.get(hash)?)
    }
    fn len(&self, hash: &BlobHash) -> Option<u64> {
        self.get().ok()?.raw_len(hash)
    }
}

impl cairn_snapshot::BlobRead for Blobs {
    fn get(&self, hash: &BlobHash) -> cairn_snapshot::Result<Vec<u8>> {
        Ok(self.get()?.get(hash)?)
    }
    fn get_to(&self, hash: &BlobHash, out: &mut dyn std::io::Write) -> cairn_snapshot::Result<u64> {
        Ok(self.get()?.get_to(hash, out)?)
    }
}

/// How to open a [`Store`]. Every setting has a documented default.
#[derive(Clone)]
pub struct StoreBuilder {
    workspace: Option<PathBuf>,
    store_dir: Option<PathBuf>,
    in_memory: bool,
    read_only: bool,
    save_index_read_only: bool,
    durability: Durability,
    segment_size_bytes: u64,
    zstd_level: i32,
    snapshot: SnapshotOptions,
    watch: bool,
    vfs: Option<Arc<dyn Vfs>>,
    snapshot_cache_dir: Option<PathBuf>,
    rebind_workspace: bool,
    /// The store's binding as the caller read it (see
    /// [`StoreBuilder::binding_read`]).
    binding_read: Option<std::result::Result<Option<PathBuf>, String>>,
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("workspace", &self.workspace)
            .field("store_dir", &self.store_dir)
            .field("in_memory", &self.in_memory)
            .field("read_only", &self.read_only)
            .field("durability", &self.durability)
            .field("segment_size_bytes", &self.segment_size_bytes)
            .field("zstd_level", &self.zstd_level)
            .field("snapshot", &self.snapshot)
            .field("custom_vfs", &self.vfs.is_some())
            .field("snapshot_cache_dir", &self.snapshot_cache_dir)
            .field("rebind_workspace", &self.rebind_workspace)
            .field("binding_read", &self.binding_read)
            .finish()
    }
}

impl Default for StoreBuilder {
    fn default() -> Self {
        let log = LogOptions::default();
        StoreBuilder {
            workspace: None,
            store_dir: None,
            in_memory: false,
            read_only: false,
            save_index_read_only: false,
            durability: log.durability,
            segment_size_bytes: log.segment_size_bytes,
            zstd_level: BlobOptions::default().zstd_level,
            snapshot: SnapshotOptions::default(),
            watch: false,
            vfs: None,
            snapshot_cache_dir: None,
            rebind_workspace: false,
            binding_read: None,
        }
    }
}

impl StoreBuilder {
    /// The workspace whose files are checkpointed. The store defaults to
    /// `<workspace>/.cairn`.
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// The store directory itself (default `<workspace>/.cairn`). Without a
    /// workspace, the workspace defaults to the directory that holds it.
    pub fn store_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.store_dir = Some(dir.into());
        self
    }

    /// Keep everything in memory (nothing touches the disk but reading the
    /// workspace for checkpoints). For read-only workspaces (with
    /// [`workspace`](Self::workspace): `Store::builder().in_memory().workspace(dir).open()`
    /// checkpoints `dir` into memory) and tests.
    pub fn in_memory(mut self) -> Self {
        self.in_memory = true;
        self
    }

    /// Open without taking the lock, for reading while another process writes.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// With [`read_only`](Self::read_only): [`Store::close`] saves the query
    /// index, best-effort (an unwritable store directory is not an error),
    /// so that the next open need not rebuild what this one indexed. The
    /// index is a cache, written under a unique temporary name and renamed
    /// into place, so this is safe beside the writing process. Without it
    /// a read-only store writes nothing.
    pub fn save_index_read_only(mut self, on: bool) -> Self {
        self.save_index_read_only = on;
        self
    }

    /// Durability of appends. Default: [`Durability::Always`] (durable before
    /// `append` returns; concurrent appenders share one fsync).
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }

    /// Size at which a log segment is sealed and a new one started. Default 64 MiB.
    pub fn segment_size_bytes(mut self, n: u64) -> Self {
        self.segment_size_bytes = n;
        self
    }

    /// zstd level for blobs. Default 3.
    pub fn zstd_level(mut self, level: i32) -> Self {
        self.zstd_level = level;
        self
    }

    /// Scan limits and rules for checkpoints. Default: [`SnapshotOptions::default`].
    pub fn snapshot_options(mut self, opts: SnapshotOptions) -> Self {
        self.snapshot = opts;
        self
    }

    /// The file system the store directory lives on. Default: the real one
    /// ([`RealVfs`]). Handing in a simulated disk
    /// ([`SimVfs::seeded`](cairn_engine::vfs::SimVfs::seeded)) lets a test
    /// crash the store and inject faults; `store_dir` is then a path on that
    /// disk. The workspace itself is always read and written through the
    /// real file system, and so are the snapshot caches: with a custom file
    /// system they go to [`snapshot_cache_dir`](Self::snapshot_cache_dir),
    /// or to a private temporary directory if none is set.
    pub fn vfs(mut self, vfs: Arc<dyn Vfs>) -> Self {
        self.vfs = Some(vfs);
        self
    }

    /// Where the snapshot caches (stat cache, tracked paths, checkpoint
    /// list) are kept, on the real file system. Default:
    /// `<store>/snapshot`, or a private temporary directory for an
    /// in-memory store or one on a custom [`vfs`](Self::vfs). The caches are
    /// rebuilt from the log when lost, except the tracked paths.
    pub fn snapshot_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.snapshot_cache_dir = Some(dir.into());
        self
    }

    /// Start the file watcher when the store opens (see [`Store::watch`]).
    /// Default false: a checkpoint walks the workspace (skipping unchanged
    /// files by their stat data). For long-lived embedders.
    pub fn watch(mut self, on: bool) -> Self {
        self.watch = on;
        self
    }

    /// The store directory this builder would open.
    pub fn resolved_store_dir(&self) -> Option<PathBuf> {
        match (&self.store_dir, &self.workspace) {
            (Some(s), _) => Some(s.clone()),
            (None, Some(w)) => Some(w.join(STORE_DIR_NAME)),
            (None, None) => None,
        }
    }

    /// Binds the store to the workspace given with
    /// [`StoreBuilder::workspace`] even if it was bound to another (see
    /// [`crate::binding`]): for a workspace that really moved away from a
    /// store kept outside it. Default false: such an open leaves the store
    /// usable for queries and refuses checkpoints, rollbacks and tracking
    /// with [`Error::WorkspaceMismatch`].
    pub fn rebind_workspace(mut self, on: bool) -> Self {
        self.rebind_workspace = on;
        self
    }

    /// The store's workspace binding as the caller read it moments before
    /// with [`crate::binding::bound_workspace`] (its result, an error as
    /// its message): a read-only open then takes it instead of reading
    /// and resolving the binding file again (the command line reads it to
    /// find the workspace, and each read command paid for it twice). A
    /// writable open reads it again: it may write it. Default: not given.
    pub fn binding_read(mut self, read: std::result::Result<Option<PathBuf>, String>) -> Self {
        self.binding_read = Some(read);
        self
    }

    /// Opens the store, creating it if needed.
    pub fn open(self) -> Result<Store> {
        if self.in_memory {
            return self.open_in_memory();
        }
        let root = self.resolved_store_dir().ok_or_else(|| {
            Error::Other("StoreBuilder needs a workspace or a store directory".into())
        })?;
        let custom_vfs = self.vfs.is_some();
        // A read-only open creates nothing, and checks its workspace
        // when it first uses it (`read_only_workspace`).
        if let (Some(w), false, false) = (&self.workspace, custom_vfs, self.read_only) {
            check_workspace_given(w, &root)?;
        }
        let workspace_dir = self.workspace_dir(&root, custom_vfs);
        let vfs: Arc<dyn Vfs> = self.vfs.clone().unwrap_or_else(|| Arc::new(RealVfs));
        if self.read_only {
            // Links are refused in the directories it reads or writes
            // through, as it first does (see `open_read_only`).
            return self.open_read_only(root, workspace_dir, vfs);
        }
        if !custom_vfs {
            cairn_engine::store_dir::check_no_links(&root)?;
        }
        self.open_writable(root, workspace_dir, vfs)
    }

    /// The workspace the store works on: the one given; without one, the
    /// one the store is bound to; else the directory that holds the store.
    fn workspace_dir(&self, root: &Path, custom_vfs: bool) -> Option<PathBuf> {
        // A binding that cannot be trusted leaves the holder: the binding
        // check refuses the writing open with the reason, and a read-only
        // one keeps its queries and says why it has no workspace.
        let bound = match (&self.workspace, custom_vfs) {
            (None, false) => crate::binding::bound_workspace(root).ok().flatten(),
            _ => None,
        };
        self.workspace
            .clone()
            .or(bound)
            .or_else(|| root.parent().map(Path::to_path_buf))
    }

    /// Opens the store at `root` for queries only: its log through a
    /// reader, its blobs read-only, its workspace's caches read, never
    /// written.
    fn open_read_only(
        self,
        root: PathBuf,
        workspace_dir: Option<PathBuf>,
        vfs: Arc<dyn Vfs>,
    ) -> Result<Store> {
        if !vfs.exists(&root.join("log")) {
            return Err(Error::NoStore(format!(
                "no cairn store at {}: run `cairn init`",
                root.display()
            )));
        }
        let custom_vfs = self.vfs.is_some();
        let log_dir = root.join(cairn_engine::store_dir::LOG_DIR_NAME);
        let reader = if custom_vfs {
            LogReader::open(vfs.clone(), &log_dir)?
        } else {
            // One listing refuses links in the log directory and opens
            // the log; the index directory (read, and written as a
            // cache) is checked too. `blobs/` is checked when the blob
            // store is first opened, `snapshot/` by the workspace's open.
            let names = cairn_engine::store_dir::list_sub_no_links(
                &root,
                cairn_engine::store_dir::LOG_DIR_NAME,
            )?;
            cairn_engine::store_dir::list_sub_no_links(&root, "index")?;
            LogReader::open_listed(vfs.clone(), &log_dir, names)?
        };
        let blobs = Blobs::read_only(vfs.clone(), &root, !custom_vfs);
        // The workspace is opened when first used (listing checkpoints,
        // planning a rollback): a query of records never does.
        let ws_lazy = match (&workspace_dir, custom_vfs) {
            (Some(w), false) => Some(LazyWorkspace {
                builder: Box::new(self.clone()),
                root: root.clone(),
                workspace: w.clone(),
            }),
            _ => None,
        };
        let save_index_read_only = self.save_index_read_only;
        Ok(Store {
            root,
            workspace_dir,
            vfs,
            _dir: None,
            log: LogHandle::Reader(Box::new(ReaderSource::new(reader))),
            blobs,
            ws: std::sync::OnceLock::new(),
            ws_lazy,
            index: Mutex::new(None),
            cold_time: Mutex::new(None),
            index_saved: std::sync::atomic::AtomicU64::new(0),
            unreferenced: Mutex::new(HashSet::new()),
            gc_gate: RwLock::new(()),
            _tmp: None,
            save_index_read_only,
            seal_indexer: Default::default(),
        })
    }

    /// The workspace `w` of a read-only open of the store at `root`, to
    /// list checkpoints and plan rollbacks. A workspace that cannot be
    /// opened (gone, its binding damaged) leaves the queries working;
    /// listing checkpoints and planning rollbacks then fail with the
    /// reason.
    fn read_only_workspace(&self, root: &Path, w: &Path) -> WorkspaceState {
        let mut ws = WorkspaceState::default();
        // Its checkpoints would capture the store (a dry run plans what
        // the real run would do): refused as a writable open refuses it.
        if let Err(e) = refuse_workspace_in_store(w, root) {
            ws.unavailable = Some(e.to_string());
            return ws;
        }
        let cache = self
            .snapshot_cache_dir
            .clone()
            .unwrap_or_else(|| root.join("snapshot"));
        let checked = match &self.binding_read {
            Some(read) => crate::binding::check_bound(
                root,
                w,
                read.clone().map_err(Error::Other),
                false,
                false,
            ),
            None => crate::binding::check(root, w, false, false),
        };
        match checked {
            Ok(m) => ws.mismatch = m.map(Box::new),
            Err(e) => ws.unavailable = Some(e.to_string()),
        }
        // The caches are read through `snapshot/`: a link there (or in
        // it) leaves no workspace, as a writable open refuses the store.
        if ws.unavailable.is_none() && self.snapshot_cache_dir.is_none() {
            if let Err(e) = cairn_engine::store_dir::list_sub_no_links(root, "snapshot") {
                ws.unavailable = Some(e.to_string());
            }
        }
        // A binding that cannot be read or trusted leaves no
        // workspace: a dry run refuses what the real run refuses.
        if ws.unavailable.is_none() {
            match Workspace::open_read_only(w, &cache, self.snapshot.clone()) {
                Ok(opened) => ws.workspace = Some(opened.with_store_dir(root)),
                Err(e) => ws.unavailable = Some(e.to_string()),
            }
        }
        ws
    }

    /// Opens the store at `root` for writing, creating it if needed, and
    /// binds it to its workspace (or notes that it is bound to another).
    fn open_writable(
        self,
        root: PathBuf,
        workspace_dir: Option<PathBuf>,
        vfs: Arc<dyn Vfs>,
    ) -> Result<Store> {
        let custom_vfs = self.vfs.is_some();
        if !custom_vfs {
            // Who owns the store and who else may use it, before anything
            // in it is trusted to say where to write.
            cairn_engine::store_dir::check_owner_and_mode(&root)?;
        }
        // A store created now through a link (`.cairn` made a link to
        // another disk, then `cairn init`) is bound with that link; one
        // that existed is used through a link only if its binding records
        // the link (see `binding`).
        let created_through_link = !custom_vfs
            && !root.join(cairn_engine::store_dir::LOG_DIR_NAME).is_dir()
            && crate::binding::store_link(&root).is_some();
        let dir = StoreDir::open(vfs.clone(), &root)?;
        let mismatch = match &workspace_dir {
            Some(w) if !custom_vfs => crate::binding::check(
                &root,
                w,
                true,
                self.rebind_workspace || created_through_link,
            )?
            .map(Box::new),
            _ => None,
        };
        // The snapshot crate keeps its caches through std::fs: on a custom
        // file system `<store>/snapshot` is not a real directory.
        let tmp = if custom_vfs && self.snapshot_cache_dir.is_none() && workspace_dir.is_some() {
            Some(private_cache_dir()?)
        } else {
            None
        };
        let mut store = self.finish(vfs, dir, workspace_dir, tmp)?;
        if let Some(ws) = store.ws.get_mut() {
            ws.mismatch = mismatch;
        }
        Ok(store)
    }

    fn open_in_memory(self) -> Result<Store> {
        let vfs: Arc<dyn Vfs> = Arc::new(SimVfs::new());
        let root = PathBuf::from("/memory").join(STORE_DIR_NAME);
        let dir = StoreDir::open(vfs.clone(), &root)?;
        // The scan cache of an in-memory store lives in a private temp dir.
        let tmp = match (&self.workspace, &self.snapshot_cache_dir) {
            (Some(_), None) => Some(private_cache_dir()?),
            _ => None,
        };
        let ws = self.workspace.clone();
        self.finish(vfs, dir, ws, tmp)
    }

    fn finish(
        self,
        vfs: Arc<dyn Vfs>,
        dir: StoreDir,
        workspace_dir: Option<PathBuf>,
        tmp: Option<tempfile::TempDir>,
    ) -> Result<Store> {
        let log = Log::open(
            vfs.clone(),
            &dir.log_dir(),
            LogOptions {
                segment_size_bytes: self.segment_size_bytes,
                durability: self.durability,
                ..LogOptions::default()
            },
        )?;
        let blobs = BlobStore::open(
            vfs.clone(),
            &dir.blob_dir(),
            BlobOptions {
                zstd_level: self.zstd_level,
                ..BlobOptions::default()
            },
        )?;
        let workspace = match &workspace_dir {
            Some(w) if self.in_memory && tmp.is_none() && self.snapshot_cache_dir.is_none() => {
                let _ = w;
                None
            }
            Some(w) => {
                let cache = match (&self.snapshot_cache_dir, &tmp) {
                    (Some(c), _) => c.clone(),
                    (None, Some(t)) => t.path().to_path_buf(),
                    (None, None) => dir.snapshot_dir(),
                };
                let ws =
                    Workspace::open(w, &cache, self.snapshot.clone())?.with_store_dir(dir.root());
                if self.watch {
                    ws.watch()?;
                }
                Some(ws)
            }
            None => None,
        };
        Ok(Store {
            root: dir.root().to_path_buf(),
            workspace_dir,
            vfs,
            _dir: Some(dir),
            log: LogHandle::Writer(Arc::new(log)),
            blobs: Blobs::opened(blobs),
            ws: std::sync::OnceLock::from(WorkspaceState {
                workspace,
                mismatch: None,
                unavailable: None,
            }),
            ws_lazy: None,
            index: Mutex::new(None),
            cold_time: Mutex::new(None),
            index_saved: std::sync::atomic::AtomicU64::new(0),
            unreferenced: Mutex::new(HashSet::new()),
            gc_gate: RwLock::new(()),
            _tmp: tmp,
            save_index_read_only: false,
            seal_indexer: Default::default(),
        })
    }
}

/// What a handle knows of its workspace: the workspace opened (read-only
/// for a read-only handle), or why it is unavailable, and whether the
/// store is bound to another.
#[derive(Default)]
pub(crate) struct WorkspaceState {
    pub(crate) workspace: Option<Workspace>,
    /// Set when the store was opened with a workspace it is not bound to:
    /// every flow that reads or writes the workspace is refused.
    mismatch: Option<Box<WorkspaceMismatch>>,
    /// Why a read-only handle has no workspace, when it was given one.
    unavailable: Option<String>,
}

/// How a read-only handle opens its workspace when first used
/// (`StoreBuilder::read_only_workspace`).
struct LazyWorkspace {
    builder: Box<StoreBuilder>,
    /// The store directory.
    root: PathBuf,
    workspace: PathBuf,
}

/// Refuses a workspace `w` given for the store `root` that is not a
/// directory (a typo in the path would otherwise make a new, empty store)
/// or that lies inside the store. A store that exists reports a
/// workspace gone from where it is bound, with the way to rebind it: see
/// `binding`.
fn check_workspace_given(w: &Path, root: &Path) -> Result<()> {
    if !w.is_dir() && !root.join(cairn_engine::store_dir::LOG_DIR_NAME).is_dir() {
        return Err(Error::Other(format!(
            "the workspace {} is not a directory{}: create it first (its store goes in {})",
            w.display(),
            if w.exists() {
                ""
            } else {
                " (it does not exist)"
            },
            root.display()
        )));
    }
    refuse_workspace_in_store(w, root)
}

/// Refuses a workspace that is the store directory or lies inside it: its
/// checkpoints would capture the store's own files, and a rollback would
/// overwrite the log and delete the blob packs.
fn refuse_workspace_in_store(workspace: &Path, store: &Path) -> Result<()> {
    let resolve = |p: &Path| p.canonicalize().or_else(|_| std::path::absolute(p));
    let (Ok(w), Ok(s)) = (resolve(workspace), resolve(store)) else {
        return Ok(()); // the open that follows names what cannot be read
    };
    if w.starts_with(&s) {
        return Err(Error::Other(format!(
            "the workspace {} is the store directory {} or lies inside it: its checkpoints \
             would capture the store itself; give the directory whose files the store keeps \
             (the store is usually `<workspace>/.cairn`)",
            workspace.display(),
            store.display()
        )));
    }
    // Inside another store (`cairn init` run in `.cairn` to look at it):
    // a checkpoint would capture that store's log and packs, and a rollback
    // overwrite them with old copies.
    if let Some(other) = w
        .ancestors()
        .find(|a| cairn_engine::store_dir::looks_like_store_dir(a))
    {
        return Err(Error::Other(format!(
            "the workspace {} is the cairn store {} or lies inside it: its checkpoints would \
             capture that store's own files and a rollback would overwrite them; use the \
             workspace that store belongs to{}",
            workspace.display(),
            other.display(),
            other
                .parent()
                .map(|p| format!(" ({})", p.display()))
                .unwrap_or_default()
        )));
    }
    Ok(())
}

/// A private temporary directory for the snapshot caches of a store whose
/// directory is not on the real file system.
fn private_cache_dir() -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("cairn-memory-")
        .tempdir()
        .map_err(|e| Error::Other(format!("create a temporary directory: {e}")))
}

/// An open cairn store: the embedded engine behind one handle.
///
/// ```
/// let store = cairn::Store::in_memory().unwrap();
/// let session = store.session("thread-42");
/// let lsn = session.prompt("add a --verbose flag").unwrap();
/// assert_eq!(store.head().last_lsn, lsn);
/// ```
pub struct Store {
    root: PathBuf,
    workspace_dir: Option<PathBuf>,
    vfs: Arc<dyn Vfs>,
    pub(crate) log: LogHandle,
    pub(crate) blobs: Blobs,
    /// The workspace: opened with a writing handle; by a read-only one
    /// when first used (see [`Store::workspace_state`]).
    ws: std::sync::OnceLock<WorkspaceState>,
    /// How a read-only handle opens its workspace (`None`: it has none,
    /// or it was opened with the store).
    ws_lazy: Option<LazyWorkspace>,
    pub(crate) index: Mutex<Option<cairn_query::index::Index>>,
    /// How far the index file on disk covers the log, as this handle
    /// loaded or last saved it (0: not known): a close saves only past it.
    pub(crate) index_saved: std::sync::atomic::AtomicU64,
    /// Blobs put through [`Store::put_blob`] (or an import) that no record
    /// appended through this handle names yet: gc keeps them, so a thread
    /// between its put and its append never loses the blob to a gc running
    /// on another thread. Bounded by the blobs put and never referenced.
    pub(crate) unreferenced: Mutex<HashSet<BlobHash>>,
    /// Held shared by each put and exclusively by gc: no blob is put while
    /// gc decides what is live.
    pub(crate) gc_gate: RwLock<()>,
    _tmp: Option<tempfile::TempDir>,
    /// See [`StoreBuilder::save_index_read_only`].
    pub(crate) save_index_read_only: bool,
    /// The last time point resolved from the index files
    /// ([`Store::cold_time_point`]) and the head it was resolved at: a
    /// command that notes a time point, then looks it up (`cairn show
    /// TIME:PATH`), reads the segment where the time falls once.
    pub(crate) cold_time: Mutex<Option<(Lsn, cairn_query::point::TimePoint)>>,
    /// The index files of segments this writer seals, built off its
    /// append path (see [`Store::index_new_seals`]).
    pub(crate) seal_indexer: crate::queries::SealIndexer,
    /// The store directory and its lock. Declared last, so dropped last:
    /// fields are dropped in declaration order, and the log's tail state,
    /// the blob index and any dictionary being trained are written when
    /// their owners drop. Dropped before them, the lock let another
    /// writer in while they were still being written.
    _dir: Option<StoreDir>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("root", &self.root)
            .field("workspace", &self.workspace_dir)
            .finish()
    }
}

impl Store {
    /// A builder with documented defaults.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    /// Opens (creating if needed) the store of `workspace` at `<workspace>/.cairn`.
    /// The workspace directory must exist (a typo is an error, not a new
    /// empty store).
    ///
    /// The handle holds the store's exclusive writer lock until it is closed
    /// or dropped: another writing handle, in this process or another, gets
    /// [`cairn_engine::EngineError::Locked`] naming the holder's process id.
    /// Readers ([`StoreBuilder::read_only`], the CLI's read commands) need
    /// no lock. Unlike `cairn record`, a handle does not let go of the lock
    /// for a CLI writer that waits for it (and announces so with
    /// `.cairn/LOCK.wanted`).
    pub fn open(workspace: impl Into<PathBuf>) -> Result<Store> {
        Store::builder().workspace(workspace).open()
    }

    /// A store held entirely in memory, with the same API, and no
    /// workspace: for tests, and for records only (its contents can be
    /// recorded, queried and exported; checkpoints, file writes and
    /// rollbacks fail with [`Error::NoWorkspace`]). For a read-only
    /// workspace, `Store::builder().in_memory().workspace(dir).open()`
    /// checkpoints `dir` into memory without writing into it.
    pub fn in_memory() -> Result<Store> {
        Store::builder().in_memory().open()
    }

    /// The store directory (`.cairn`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace directory, if this store has one.
    pub fn workspace_dir(&self) -> Option<&Path> {
        self.workspace_dir.as_deref()
    }

    /// Set when the store was opened with a workspace it is not bound to
    /// (see [`crate::binding`]); checkpoints, rollbacks and tracking are
    /// then refused.
    pub fn workspace_mismatch(&self) -> Option<&WorkspaceMismatch> {
        self.workspace_state().mismatch.as_deref()
    }

    /// The file system the store lives on.
    pub fn vfs(&self) -> &Arc<dyn Vfs> {
        &self.vfs
    }

    /// True if this handle cannot write (opened read-only).
    pub fn is_read_only(&self) -> bool {
        matches!(self.log, LogHandle::Reader(_))
    }

    pub(crate) fn writer(&self, what: &str) -> Result<&Arc<Log>> {
        match &self.log {
            LogHandle::Writer(l) => Ok(l),
            LogHandle::Reader(_) => Err(Error::ReadOnly(what.to_string())),
        }
    }

    /// The workspace for flows that only read the store's own caches of it
    /// (listing checkpoints): open even with a workspace the store is not
    /// bound to.
    pub(crate) fn workspace_caches(&self) -> Result<&Workspace> {
        let ws = self.workspace_state();
        if let (None, Some(why)) = (&ws.workspace, &ws.unavailable) {
            return Err(Error::Other(why.clone()));
        }
        ws.workspace.as_ref().ok_or(Error::NoWorkspace)
    }

    /// The workspace as far as it is known, opened now by a read-only
    /// handle that had not used it yet: its binding checked, its caches
    /// opened read-only (their directory checked for links), or why not.
    pub(crate) fn workspace_state(&self) -> &WorkspaceState {
        self.ws.get_or_init(|| match &self.ws_lazy {
            Some(l) => l.builder.read_only_workspace(&l.root, &l.workspace),
            None => WorkspaceState::default(),
        })
    }

    /// The workspace if it has been opened (never by this call).
    pub(crate) fn ws_opened(&self) -> Option<&Workspace> {
        self.ws.get()?.workspace.as_ref()
    }

    pub(crate) fn workspace(&self) -> Result<&Workspace> {
        if let Some(m) = &self.workspace_state().mismatch {
            return Err(Error::WorkspaceMismatch(m.clone()));
        }
        self.workspace_caches()
    }

    /// The blob store. A read-only handle opens it here when first
    /// asked (its queries that read no blob never do): an error says why
    /// it cannot be opened (a link in `blobs/`, a damaged index).
    pub fn blobs(&self) -> Result<&BlobStore> {
        Ok(self.blobs.get()?)
    }

    /// A handle for one session (thread, conversation). An empty `id` is
    /// the default session, [`DEFAULT_SESSION`](cairn_codec::event::DEFAULT_SESSION)
    /// (`default`), for everything the handle records, as it is for
    /// checkpoints: see [`Session::id`].
    pub fn session(&self, id: impl Into<String>) -> Session<'_> {
        Session::new(self, id.into())
    }

    /// Stores bytes in the blob store; durable no later than the next
    /// append (the commit protocol) or [`Store::sync`].
    pub fn put_blob(&self, bytes: &[u8]) -> Result<BlobHash> {
        self.writer("store a blob")?;
        self.put_unreferenced(bytes)
    }

    /// Puts a blob that a record is about to name: gc keeps it until one
    /// appended through this handle does (see `unreferenced`).
    pub(crate) fn put_unreferenced(&self, bytes: &[u8]) -> Result<BlobHash> {
        let _gate = self.gc_gate.read();
        let h = self.blobs.get()?.put(bytes)?;
        self.unreferenced.lock().insert(h);
        Ok(h)
    }

    /// The blobs of appended `events` are named by records now: gc finds
    /// them through the log.
    fn now_referenced(&self, events: &[Event]) {
        let mut u = self.unreferenced.lock();
        if u.is_empty() {
            return;
        }
        for e in events {
            for h in [e.before, e.after, e.diff, e.root, e.state]
                .into_iter()
                .flatten()
            {
                u.remove(&h);
            }
        }
    }

    /// A blob's bytes, verified against its hash.
    pub fn blob(&self, hash: &BlobHash) -> Result<Vec<u8>> {
        Ok(self.blobs.get()?.get(hash)?)
    }

    /// Checks an event before it is appended: its session is not empty and
    /// its time in range, its paths are workspace-relative (and a file event
    /// has one), and every blob it refers to is stored. Whatever it
    /// refuses is an [`Error::InvalidEvent`].
    pub(crate) fn check_event(&self, event: &Event) -> Result<()> {
        let invalid = |e: cairn_codec::CodecError| Error::InvalidEvent(e.to_string());
        event.check().map_err(invalid)?;
        match self.missing_blob(event) {
            Some(h) => Err(Error::InvalidEvent(format!(
                "the {} event refers to blob {h}, which is not in the store: put the blob first (`cairn blob put`, or Store::put_blob)",
                event.kind
            ))),
            None => match self.bad_root(event) {
                Some(why) => Err(Error::InvalidEvent(why)),
                None => Ok(()),
            },
        }
    }

    /// Why `event`'s `root` (a checkpoint's tree) is not one, or `None`
    /// when it is, or names no blob, or a blob the store lacks (which
    /// [`Store::missing_blob`] reports). Only the root node is decoded
    /// (one blob read, whatever the tree's size): a root that is any other
    /// blob (a file's contents) would make every later read of that
    /// checkpoint, and gc, fail on it.
    pub(crate) fn bad_root(&self, event: &Event) -> Option<String> {
        let root = event.root?;
        // A writer's blob store is open; a read-only one appends nothing.
        let blobs = self.blobs.get().ok()?;
        if !blobs.contains(&root) {
            return None;
        }
        let e = cairn_snapshot::manifest::read_node(&**blobs, &root).err()?;
        Some(format!(
            "field `root`: blob {root} is not a checkpoint tree (a manifest node as cairn writes them) but something else: {e}"
        ))
    }

    /// Checks the records `event` names: each checkpoint id (`checkpoint`,
    /// `source`, `target`) must be a `checkpoint.create` record (or the
    /// placeholder `repair` put where one was lost), and each
    /// causal parent an existing record, in the log or among `before` (the
    /// events of the same batch ahead of it). A hand-written `rollback` to
    /// `c999`, or a `checkpoint.discard` of a prompt, would otherwise be
    /// recorded, and rollbacks would then say a live checkpoint was
    /// discarded.
    ///
    /// `import`: the event is an imported line. A `checkpoint.discard`
    /// that is a copy of the record that discarded its checkpoint (the
    /// same event: the store's own export imported back, into it or a copy
    /// of it) is then taken as it is: it says again what is true, and
    /// changes nothing (the first discard says where the checkpoint was
    /// discarded).
    pub(crate) fn check_refs(
        &self,
        event: &Event,
        before: &[Event],
        import: bool,
    ) -> std::result::Result<(), String> {
        let names_none = event.checkpoint.is_none()
            && event.source.is_none()
            && event.target.is_none()
            && event.parents.is_empty();
        if names_none {
            // Most events: nothing to look up on the append path.
            return Ok(());
        }
        let head = self.head().last_lsn;
        // The kind of the record at `lsn`, and whether it is a placeholder
        // salvage put where a record was lost.
        let kind_at = |lsn: Lsn| -> Option<(EventKind, bool)> {
            if lsn.0 == 0 {
                return None;
            }
            let e = self.event_at(lsn, head, before)?;
            Some((e.kind, cairn_engine::log::is_placeholder(&e)))
        };
        for (field, id) in [
            ("checkpoint", event.checkpoint),
            ("source", event.source),
            ("target", event.target),
        ] {
            let Some(id) = id else { continue };
            match kind_at(id.0) {
                Some((EventKind::CheckpointCreate, _)) => {}
                // A checkpoint lost to damage: `repair` put a placeholder
                // in its place, and the records that named it still do (a
                // store's export imports back after a repair).
                Some((_, true)) => {}
                Some((k, false)) => {
                    return Err(format!(
                        "field `{field}` names {id}, which is a {k} record, not a checkpoint"
                    ))
                }
                None => {
                    return Err(format!(
                        "field `{field}` names {id}, which is not a record of this store (its last is LSN {head})"
                    ))
                }
            }
        }
        for p in &event.parents {
            if kind_at(*p).is_none() {
                return Err(format!(
                    "field `parents` names LSN {p}, which is not an earlier record of this store"
                ));
            }
        }
        if event.kind == EventKind::CheckpointDiscard {
            if let Some(id) = event.checkpoint {
                self.check_discard(event, id, head, before, import)?;
            }
        }
        Ok(())
    }

    /// Checks a recorded `checkpoint.discard` of checkpoint `id` (the events
    /// of `before` follow LSN `head`). A platform may record its own
    /// discards (they are part of its audit trail), and gc then collects the
    /// contents of the discarded checkpoint. So a discard is refused when
    /// it would lose more than the platform can mean: of a checkpoint
    /// already discarded (the second record would say nothing true), and of
    /// the newest checkpoint of its session not yet discarded, which cairn
    /// always keeps restorable (as retention does: `gc --help`).
    /// Checkpoints without a tree (imported from another tool) have nothing
    /// to lose and are not checked. With `import`, a discard that is a
    /// copy of the one that discarded the checkpoint is taken (see
    /// [`Store::check_refs`]).
    fn check_discard(
        &self,
        event: &Event,
        id: CheckpointId,
        head: Lsn,
        before: &[Event],
        import: bool,
    ) -> std::result::Result<(), String> {
        let batch_lsn = |i: usize| Lsn(head.0 + 1 + i as u64);
        // This checkpoint's session and every checkpoint of it (id, discarded at).
        let (session, mut of_session) = if id.0 <= head {
            let found = self
                .query(|q| {
                    let ix = q.index();
                    Ok(ix.checkpoint(id).map(|c| {
                        let all: Vec<(CheckpointId, Option<Lsn>)> = ix
                            .checkpoints(Some(&c.session))
                            .into_iter()
                            .map(|o| (o.id, o.discarded_at))
                            .collect();
                        (c.session.clone(), all)
                    }))
                })
                .map_err(|e| format!("field `checkpoint` names {id}: {e}"))?;
            match found {
                Some(f) => f,
                None => return Ok(()),
            }
        } else {
            let i = usize::try_from(id.0 .0 - head.0 - 1).unwrap_or(usize::MAX);
            match before.get(i) {
                Some(e) if e.ok && e.root.is_some() => (e.session.clone(), Vec::new()),
                _ => return Ok(()),
            }
        };
        for (i, e) in before.iter().enumerate() {
            let lsn = batch_lsn(i);
            if e.kind == EventKind::CheckpointCreate
                && e.ok
                && e.root.is_some()
                && e.session == session
            {
                of_session.push((CheckpointId(lsn), None));
            }
        }
        for (i, e) in before.iter().enumerate() {
            if e.kind == EventKind::CheckpointDiscard {
                if let Some(c) = e.checkpoint {
                    if let Some(entry) = of_session.iter_mut().find(|(o, _)| *o == c) {
                        entry.1.get_or_insert(batch_lsn(i));
                    }
                }
            }
        }
        match cairn_snapshot::retention::may_discard(id, &of_session) {
            Ok(()) => Ok(()),
            Err(DiscardRefused::AlreadyDiscarded(at)) => {
                if import && self.event_at(at, head, before).as_deref() == Some(event) {
                    return Ok(());
                }
                Err(format!(
                    "field `checkpoint` names {id}, which was already discarded at LSN {at}"
                ))
            }
            Err(DiscardRefused::NewestOfSession) => Err(format!(
                "field `checkpoint` names {id}, the newest checkpoint of session `{session}` that is not discarded: cairn keeps it restorable, so that the session can always be rolled back to its last state (gc would delete its contents); take a newer checkpoint of that session first, or record the event without `checkpoint`"
            )),
        }
    }

    /// The event at `lsn`: a record of the log up to `head`, or one of
    /// `before`, the events of a batch that follow it.
    fn event_at<'a>(
        &self,
        lsn: Lsn,
        head: Lsn,
        before: &'a [Event],
    ) -> Option<std::borrow::Cow<'a, Event>> {
        if lsn <= head {
            return self
                .record(lsn)
                .ok()
                .map(|r| std::borrow::Cow::Owned(r.event));
        }
        let i = usize::try_from(lsn.0 - head.0 - 1).ok()?;
        before.get(i).map(std::borrow::Cow::Borrowed)
    }

    /// The first blob `event` refers to that the store does not hold.
    pub(crate) fn missing_blob(&self, event: &Event) -> Option<BlobHash> {
        [
            event.before,
            event.after,
            event.diff,
            event.root,
            event.state,
        ]
        .into_iter()
        .flatten()
        .find(|h| !self.blobs.get().is_ok_and(|b| b.contains(h)))
    }

    /// Appends one event. The commit protocol is built in: every blob the
    /// event refers to must be in the store, and pending blobs are made
    /// durable before the record is written. An event the log does not
    /// take (an empty session, a file event without a workspace-relative
    /// path, a blob not stored, a checkpoint or record that does not
    /// exist) is refused with [`Error::InvalidEvent`], naming the field.
    pub fn append(&self, event: &Event) -> Result<Lsn> {
        let log = self.writer("append")?;
        // No gc between the check that its blobs are stored and the append.
        let _gate = self.gc_gate.read();
        self.check_event(event)?;
        self.check_refs(event, &[], false)
            .map_err(Error::InvalidEvent)?;
        let blobs = self.blobs.get()?;
        if blobs.has_unsynced() {
            blobs.sync()?;
        }
        let lsn = log.append(event)?;
        self.now_referenced(std::slice::from_ref(event));
        self.index_new_seals(log);
        Ok(lsn)
    }

    /// Appends events atomically: after a crash, all of them or none.
    /// Returns the first and last LSN (None for an empty batch). An event
    /// [`append`](Self::append) would refuse fails the whole batch with
    /// [`Error::InvalidEvent`], and nothing is appended.
    pub fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>> {
        self.append_batch_checked(events, false)
    }

    /// [`Store::append_batch`]; `import`: the events are imported lines,
    /// checked as such (see [`Store::check_refs`]).
    pub(crate) fn append_batch_checked(
        &self,
        events: &[Event],
        import: bool,
    ) -> Result<Option<(Lsn, Lsn)>> {
        let log = self.writer("append")?;
        let _gate = self.gc_gate.read();
        for (i, e) in events.iter().enumerate() {
            self.check_event(e)?;
            self.check_refs(e, &events[..i], import).map_err(|why| {
                Error::InvalidEvent(format!("event {} of the batch: {why}", i + 1))
            })?;
        }
        let blobs = self.blobs.get()?;
        if blobs.has_unsynced() {
            blobs.sync()?;
        }
        let range = log.append_batch(events)?;
        self.now_referenced(events);
        self.index_new_seals(log);
        Ok(range)
    }

    /// Makes everything written so far durable (blobs, then the log).
    pub fn sync(&self) -> Result<()> {
        let log = self.writer("sync")?;
        self.blobs.get()?.sync()?;
        Ok(log.sync()?)
    }

    /// The last committed record's LSN and chain hash (the head hash).
    pub fn head(&self) -> Head {
        self.log.head()
    }

    /// For a read-only handle, picks up records appended by the writer since.
    pub fn refresh(&self) -> Result<Head> {
        match &self.log {
            LogHandle::Writer(l) => Ok(l.head()),
            LogHandle::Reader(r) => Ok(r.lock().refresh()?),
        }
    }

    /// Closes the store cleanly (syncs; makes the next open cheap).
    pub fn close(self) -> Result<()> {
        self.finish_seal_index();
        self.save_index()?;
        if let (false, Some(blobs)) = (self.is_read_only(), self.blobs.if_opened()) {
            blobs.sync()?;
        }
        if let LogHandle::Writer(log) = self.log {
            if let Ok(log) = Arc::try_unwrap(log) {
                log.close()?;
            }
        }
        Ok(())
    }
}
