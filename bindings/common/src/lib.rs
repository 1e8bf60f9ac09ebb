//! What cairn's Python (`bindings/python`) and Node (`bindings/node`)
//! bindings share, so that both give the same answers: the store handle
//! they hold ([`Shared`]), a session's stamp ([`SessionSpec`]), events read
//! from JSON, results as JSON values with cairn's canonical field names,
//! and the error families ([`ErrorKind`]) each language maps to its own
//! exception classes.
//!
//! Nothing here takes a language's lock: each binding converts its
//! arguments first, then calls in here with its interpreter's lock
//! released (Python's GIL) or off the event loop (Node), so threads that
//! append at once share fsyncs through cairn's group commit.
//!
//! ```
//! use cairn_bindings_common::{SessionSpec, Shared};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Shared::open(dir.path(), true, "never", false).unwrap();
//! let s = SessionSpec { id: "t1".into(), ..SessionSpec::default() };
//! let lsn = store.with(|st| s.on(st).prompt("hello")).unwrap();
//! assert_eq!(lsn.0, 1);
//! store.close().unwrap();
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn::json::{json, Map, Value};
use cairn::jsonl::EventDefaults;
use cairn::store_dir::STORE_DIR_NAME;
use cairn::{parse_time_bound, TimeBound};
use cairn::{
    CheckpointId, CheckpointInfo, Durability, Event, EventKind, Filter, Format, Lsn, Point,
    RetentionPolicy, RollbackReport, Session, Store,
};
use parking_lot::RwLock;

/// Records [`Cursor::next_page`] reads from the log per call: a lazy
/// iterator holds at most this many decoded records at a time, and a
/// page is few enough that the store is not held long by one iterator.
pub const EVENTS_PAGE: usize = 256;

/// How often [`Follower::wait`] looks for new records: short enough that a
/// follower sees a record soon after it is committed, long enough that an
/// idle follower costs nothing measurable.
pub const FOLLOW_POLL: Duration = Duration::from_millis(20);

/// The family of an error, which each binding maps to an exception class
/// (Python: `cairn.InvalidEventError`, ...; Node: `InvalidEventError`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// An event (or an import's line) was refused: nothing was appended.
    InvalidEvent,
    /// The store's data is damaged (a bad frame, checksum or blob).
    Corrupt,
    /// Another handle (in this process or another) holds the store's writer lock.
    Locked,
    /// No such store, checkpoint, path, record or file.
    NotFound,
    /// A path outside the workspace, under `.git`/`.cairn`, or through a symlink.
    OutsideWorkspace,
    /// Anything else: a bad argument, a closed store, a read-only store, an I/O error.
    Other,
}

impl ErrorKind {
    /// The class name the bindings give errors of this family.
    pub fn class_name(self) -> &'static str {
        match self {
            ErrorKind::InvalidEvent => "InvalidEventError",
            ErrorKind::Corrupt => "CorruptError",
            ErrorKind::Locked => "LockedError",
            ErrorKind::NotFound => "NotFoundError",
            ErrorKind::OutsideWorkspace => "OutsideWorkspaceError",
            ErrorKind::Other => "Error",
        }
    }
}

/// An error as the bindings raise it: its family and cairn's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindError {
    /// Which exception class it becomes.
    pub kind: ErrorKind,
    /// cairn's message, which names what and where.
    pub message: String,
}

impl BindError {
    /// An error of family `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> BindError {
        BindError {
            kind,
            message: message.into(),
        }
    }

    /// A bad argument (an unknown format, a bad point, a wrong type).
    pub fn invalid(message: impl Into<String>) -> BindError {
        BindError::new(ErrorKind::Other, message)
    }
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BindError {}

impl From<cairn::Error> for BindError {
    fn from(e: cairn::Error) -> BindError {
        BindError::new(classify(&e), e.to_string())
    }
}

impl From<cairn::QueryError> for BindError {
    fn from(e: cairn::QueryError) -> BindError {
        BindError::from(cairn::Error::from(e))
    }
}

/// A result with [`BindError`].
pub type Result<T> = std::result::Result<T, BindError>;

/// Which family `e` belongs to.
pub fn classify(e: &cairn::Error) -> ErrorKind {
    use cairn::EngineError;
    use cairn::QueryError;
    use cairn::SnapshotError;
    fn engine(e: &EngineError) -> ErrorKind {
        match e {
            EngineError::Locked { .. } => ErrorKind::Locked,
            EngineError::BlobNotFound { .. } | EngineError::LsnOutOfRange { .. } => {
                ErrorKind::NotFound
            }
            e if e.is_corruption() => ErrorKind::Corrupt,
            _ => ErrorKind::Other,
        }
    }
    fn snapshot(e: &SnapshotError) -> ErrorKind {
        match e {
            SnapshotError::Engine(e) => engine(e),
            SnapshotError::BadPath { .. } => ErrorKind::OutsideWorkspace,
            SnapshotError::UnknownCheckpoint { .. } => ErrorKind::NotFound,
            SnapshotError::BadManifest { .. } => ErrorKind::Corrupt,
            _ => ErrorKind::Other,
        }
    }
    let io_not_found = e.io_kind() == Some(std::io::ErrorKind::NotFound);
    let kind = match e {
        cairn::Error::InvalidEvent(_) | cairn::Error::Rejected(_) => ErrorKind::InvalidEvent,
        cairn::Error::NoStore(_) | cairn::Error::WorkspaceGone { .. } => ErrorKind::NotFound,
        cairn::Error::Engine(e) => engine(e),
        cairn::Error::Snapshot(e) => snapshot(e),
        cairn::Error::Query(q) => match q {
            QueryError::Engine(e) => engine(e),
            QueryError::Snapshot(e) => snapshot(e),
            QueryError::NoSuchPath { .. } | QueryError::NoSuchCheckpoint { .. } => {
                ErrorKind::NotFound
            }
            QueryError::Manifest { .. } | QueryError::IndexCorrupt { .. } => ErrorKind::Corrupt,
            _ => ErrorKind::Other,
        },
        cairn::Error::Codec(_) => ErrorKind::InvalidEvent,
        _ => ErrorKind::Other,
    };
    if kind == ErrorKind::Other && e.is_corruption() {
        ErrorKind::Corrupt
    } else if kind == ErrorKind::Other && io_not_found {
        ErrorKind::NotFound
    } else {
        kind
    }
}

/// The store a binding's `Store` object holds, shared by its sessions,
/// iterators and threads. Calls take a shared lock, so they run at once
/// (appends share fsyncs); [`Shared::close`] takes it exclusively, waits
/// for calls in flight, and closes the store: later calls fail with
/// "the store is closed".
pub struct Shared {
    store: RwLock<Option<Store>>,
    workspace: PathBuf,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("workspace", &self.workspace)
            .finish()
    }
}

impl Shared {
    /// Opens the store of workspace `path` (at `<path>/.cairn`), with
    /// `durability` (`always`, `never`, `interval` or `interval:<ms>`).
    /// Without `create`, a workspace that has no store yet is an error
    /// ([`ErrorKind::NotFound`]) rather than a new empty store; with
    /// `read_only`, the handle takes no lock and refuses writes.
    pub fn open(path: &Path, create: bool, durability: &str, read_only: bool) -> Result<Shared> {
        let durability: Durability = durability
            .parse()
            .map_err(|e: cairn::EngineError| BindError::invalid(e.to_string()))?;
        let store_dir = path.join(STORE_DIR_NAME);
        if !create && !store_dir.join("log").is_dir() {
            return Err(BindError::new(
                ErrorKind::NotFound,
                format!(
                    "no cairn store at {} (open it with create=True, or Store.init the workspace first)",
                    store_dir.display()
                ),
            ));
        }
        let mut b = Store::builder().workspace(path).durability(durability);
        if read_only {
            b = b.read_only();
        }
        let store = b.open()?;
        Ok(Shared {
            store: RwLock::new(Some(store)),
            workspace: path.to_path_buf(),
        })
    }

    /// The workspace directory this handle was opened with.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Runs `f` on the open store; "the store is closed" after [`Shared::close`].
    pub fn with<T>(&self, f: impl FnOnce(&Store) -> cairn::Result<T>) -> Result<T> {
        self.try_with(|s| f(s).map_err(BindError::from))
    }

    /// [`Shared::with`] for a closure that returns a [`BindError`].
    pub fn try_with<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let guard = self.store.read();
        match guard.as_ref() {
            Some(s) => f(s),
            None => Err(BindError::invalid(format!(
                "the store of {} is closed",
                self.workspace.display()
            ))),
        }
    }

    /// True once [`Shared::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.store.read().is_none()
    }

    /// Closes the store cleanly (syncs, releases the lock); closing twice is no error.
    pub fn close(&self) -> Result<()> {
        let store = self.store.write().take();
        match store {
            Some(s) => Ok(s.close()?),
            None => Ok(()),
        }
    }
}

/// Creates the store of `workspace` (and the directory, if needed), as
/// `cairn init` does, and closes it; returns the store directory.
pub fn init(workspace: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(workspace)
        .map_err(|e| BindError::from(cairn::Error::io("create directory", workspace, e)))?;
    let workspace = std::fs::canonicalize(workspace)
        .map_err(|e| BindError::from(cairn::Error::io("resolve", workspace, e)))?;
    let store = Store::open(&workspace)?;
    let root = store.root().to_path_buf();
    store.close()?;
    Ok(root)
}

/// What a binding's `Session` object holds: the session id and the stamps
/// its events and checkpoints carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionSpec {
    /// The session id (empty: `default`).
    pub id: String,
    /// Run id.
    pub run: Option<String>,
    /// Phase id.
    pub phase: Option<String>,
    /// Agent name.
    pub agent: Option<String>,
    /// Model name.
    pub model: Option<String>,
}

impl SessionSpec {
    /// The library's session handle on `store` with these stamps.
    pub fn on<'s>(&self, store: &'s Store) -> Session<'s> {
        let mut s = store.session(self.id.clone());
        if let Some(r) = &self.run {
            s = s.with_run(r.clone());
        }
        if let Some(p) = &self.phase {
            s = s.with_phase(p.clone());
        }
        if let Some(a) = &self.agent {
            s = s.with_agent(a.clone());
        }
        if let Some(m) = &self.model {
            s = s.with_model(m.clone());
        }
        s
    }

    /// The stamps this handle gives events that leave them out.
    pub fn defaults(&self) -> EventDefaults<'_> {
        EventDefaults {
            session: (!self.id.is_empty()).then_some(self.id.as_str()),
            run: self.run.as_deref(),
            phase: self.phase.as_deref(),
            agent: self.agent.as_deref(),
            model: self.model.as_deref(),
        }
    }

    /// An event from a JSON object with cairn's canonical field names (as
    /// `cairn record` reads a line): `kind` is required; `session`, `run`,
    /// `phase`, `agent` and `model` default to this handle's. A bad field
    /// is an [`ErrorKind::InvalidEvent`] naming it.
    pub fn event_from_json(&self, value: Value) -> Result<Event> {
        if !value.is_object() {
            return Err(BindError::new(
                ErrorKind::InvalidEvent,
                "an event is a dict/object with a `kind` field",
            ));
        }
        self.event_from_line(&value.to_string())
    }

    /// An event from one line of JSON text, read once (no intermediate
    /// JSON value): what [`SessionSpec::event_from_json`] does, for a
    /// binding that has the text already.
    pub fn event_from_line(&self, line: &str) -> Result<Event> {
        cairn::jsonl::parse_event_with(line, &self.defaults())
            .map_err(|e| BindError::new(ErrorKind::InvalidEvent, format!("bad event: {e}")))
    }
}

/// A record as cairn's canonical JSON (what `cairn log --json` and a JSONL
/// export print): `lsn`, `ts`, `session`, `kind`, ..., `hash`.
pub fn record_json(lsn: Lsn, chain: cairn::ChainHash, e: &Event) -> Value {
    let rec = cairn::jsonl::JsonRecord::new(lsn, chain, e);
    serde_json::to_value(&rec).unwrap_or(Value::Null)
}

fn opt_str(s: &Option<String>) -> Value {
    s.as_ref().map_or(Value::Null, |s| Value::String(s.clone()))
}

/// A checkpoint: `id` (`c<lsn>`), `lsn`, `ts`, `session`, `run`, `phase`,
/// `agent`, `model`, `label`, `root`, `state` (the blob's hash), `counts`
/// (`files`, `changed`, `skipped`), `discarded`.
pub fn checkpoint_json(c: &CheckpointInfo) -> Value {
    json!({
        "id": c.id.to_string(),
        "lsn": c.lsn.0,
        "ts": c.ts.to_iso(),
        "session": c.session,
        "run": opt_str(&c.run),
        "phase": opt_str(&c.phase),
        "agent": opt_str(&c.agent),
        "model": opt_str(&c.model),
        "label": opt_str(&c.label),
        "root": c.root.to_hex(),
        "state": c.state.map(|h| h.to_hex()),
        "counts": {
            "files": c.counts.files,
            "changed": c.counts.changed,
            "skipped": c.counts.skipped,
        },
        "discarded": c.discarded,
    })
}

/// A rollback's report: `workspace`, `target`, `source` (the undo point;
/// null for a dry run), `lsn` (the `rollback` record; null for a dry run),
/// `written`, `deleted`, `created_dirs`, `removed_dirs`, `kept`
/// (`{path, why}`), `state_hash`. The application state itself is
/// [`RollbackReport::state`], which each binding hands back as bytes.
pub fn rollback_json(r: &RollbackReport) -> Value {
    json!({
        "workspace": r.workspace.display().to_string(),
        "target": r.target.to_string(),
        "source": r.source.map(|c| c.to_string()),
        "lsn": r.lsn.map(|l| l.0),
        "written": r.written,
        "deleted": r.deleted,
        "created_dirs": r.created_dirs,
        "removed_dirs": r.removed_dirs,
        "kept": r.kept.iter().map(|k| json!({"path": k.path, "why": k.why})).collect::<Vec<_>>(),
        "state_hash": r.state_hash.map(|h| h.to_hex()),
    })
}

/// Reads a checkpoint id (`c42`), naming the argument when it is not one.
pub fn checkpoint_id(text: &str) -> Result<CheckpointId> {
    text.parse()
        .map_err(|e: cairn::CodecError| BindError::invalid(e.to_string()))
}

/// Reads a point in history: `head`, `@12` (an LSN), `c42` (a checkpoint)
/// or an ISO-8601 time.
pub fn point(text: &str) -> Result<Point> {
    text.parse()
        .map_err(|e: cairn::QueryError| BindError::invalid(e.to_string()))
}

/// Reads an export/import format: `jsonl`, `cortexide` or `comma`.
pub fn format(text: &str) -> Result<Format> {
    text.parse()
        .map_err(|e: cairn::QueryError| BindError::invalid(e.to_string()))
}

/// Reads an event kind (`prompt`, `file.write`, ...).
pub fn kind(text: &str) -> Result<EventKind> {
    EventKind::ALL
        .into_iter()
        .find(|k| k.name() == text)
        .ok_or_else(|| {
            let known: Vec<&str> = EventKind::ALL.iter().map(|k| k.name()).collect();
            BindError::invalid(format!(
                "unknown event kind `{text}` (known: {})",
                known.join(", ")
            ))
        })
}

/// A time bound as the bindings take it: an ISO-8601 text (`2023-11-14`,
/// `2023-11-14T22:13:20Z`) or epoch milliseconds, read as `cairn log
/// --since`/`--until` reads them.
pub fn time_bound(text: &str, since: bool) -> Result<cairn::Timestamp> {
    let bound = if since {
        TimeBound::Since
    } else {
        TimeBound::Until
    };
    Ok(parse_time_bound(text, bound)?)
}

/// A lazy walk over the records a filter selects, a page at a time: what
/// `store.events(...)` iterates.
#[derive(Clone, Debug)]
pub struct Cursor {
    filter: Filter,
    next: Lsn,
    left: Option<usize>,
    done: bool,
}

impl Cursor {
    /// A walk over what `filter` selects, oldest first (its `limit` is the
    /// whole walk's; its LSN bounds are kept).
    pub fn new(mut filter: Filter) -> Cursor {
        let left = filter.limit.take();
        filter.newest_first = false;
        Cursor {
            next: filter.since_lsn.unwrap_or(Lsn(1)).max(Lsn(1)),
            filter,
            left,
            done: false,
        }
    }

    /// The next page of at most [`EVENTS_PAGE`] records as canonical JSON;
    /// empty once the walk is over.
    pub fn next_page(&mut self, store: &Store) -> Result<Vec<Value>> {
        if self.done || self.left == Some(0) {
            return Ok(Vec::new());
        }
        let page = self.left.map_or(EVENTS_PAGE, |l| l.min(EVENTS_PAGE));
        let f = Filter {
            since_lsn: Some(self.next),
            limit: Some(page),
            ..self.filter.clone()
        };
        let records = store.query(|q| q.list(&f))?;
        if records.len() < page {
            self.done = true;
        }
        if let Some(last) = records.last() {
            self.next = Lsn(last.lsn.0 + 1);
        }
        if let Some(l) = self.left.as_mut() {
            *l -= records.len();
        }
        Ok(records
            .iter()
            .map(|r| record_json(r.lsn, r.chain, &r.event))
            .collect())
    }
}

/// What `store.follow(...)` iterates: the records committed from an LSN on,
/// waiting for new ones.
#[derive(Clone, Copy, Debug)]
pub struct Follower {
    next: Lsn,
}

impl Follower {
    /// Follows from `from` (None: only records committed after now).
    pub fn new(store: &Store, from: Option<u64>) -> Result<Follower> {
        let next = match from {
            Some(l) => Lsn(l.max(1)),
            None => Lsn(store.refresh()?.last_lsn.0 + 1),
        };
        Ok(Follower { next })
    }

    /// The next record, waiting up to `timeout` for it to be committed
    /// (None: not yet; ask again).
    pub fn wait(&mut self, shared: &Shared, timeout: Duration) -> Result<Option<Value>> {
        let start = Instant::now();
        loop {
            let got = shared.with(|s| {
                if s.refresh()?.last_lsn >= self.next {
                    let r = s.record(self.next)?;
                    Ok(Some(record_json(r.lsn, r.chain, &r.event)))
                } else {
                    Ok(None)
                }
            })?;
            if let Some(v) = got {
                self.next = Lsn(self.next.0 + 1);
                return Ok(Some(v));
            }
            let spent = start.elapsed();
            if spent >= timeout {
                return Ok(None);
            }
            std::thread::sleep(FOLLOW_POLL.min(timeout - spent));
        }
    }
}

/// The tree at a point: `{path: {blob, mode, kind}}` (`kind`: `file` or `symlink`).
pub fn tree_json(store: &Store, at: Point) -> Result<Value> {
    let tree = store.query(|q| q.tree_at(at))?;
    let mut out = Map::new();
    for (path, e) in tree {
        let kind = match e.kind {
            cairn::EntryKind::File => "file",
            cairn::EntryKind::Symlink => "symlink",
        };
        out.insert(
            path,
            json!({"blob": e.blob.to_hex(), "mode": e.mode, "kind": kind}),
        );
    }
    Ok(Value::Object(out))
}

/// The differences between two points: a list of `{path, status
/// (added|removed|modified), unified, binary, too_large, renamed_from,
/// renamed_to}`.
pub fn diff_json(store: &Store, a: Point, b: Point, paths: &[String]) -> Result<Value> {
    let diffs = store.query(|q| q.diff(a, b, paths))?;
    Ok(Value::Array(
        diffs
            .iter()
            .map(|d| {
                let status = match d.status {
                    cairn::DiffStatus::Added => "added",
                    cairn::DiffStatus::Removed => "removed",
                    cairn::DiffStatus::Modified => "modified",
                };
                json!({
                    "path": d.path,
                    "status": status,
                    "unified": d.unified,
                    "binary": d.binary,
                    "too_large": d.too_large,
                    "renamed_from": d.renamed_from,
                    "renamed_to": d.renamed_to,
                })
            })
            .collect(),
    ))
}

/// The records that changed `path`, oldest first, as canonical JSON.
pub fn history_json(store: &Store, path: &str) -> Result<Value> {
    let recs = store.query(|q| q.history(path))?;
    Ok(Value::Array(
        recs.iter()
            .map(|r| record_json(r.lsn, r.chain, &r.event))
            .collect(),
    ))
}

/// Each line of `path` at a point with the record that last changed it:
/// `{line_no, text, lsn, session, model, kind}`.
pub fn blame_json(store: &Store, at: Point, path: &str) -> Result<Value> {
    let lines = store.query(|q| q.blame(at, path))?;
    Ok(Value::Array(
        lines
            .iter()
            .map(|l| {
                json!({
                    "line_no": l.line_no,
                    "text": l.text,
                    "lsn": l.lsn.0,
                    "session": l.session,
                    "model": l.model,
                    "kind": l.kind.name(),
                })
            })
            .collect(),
    ))
}

/// The branch graph's nodes from checkpoint `of` (None: all of them):
/// `{lsn, kind, session, parent, label, ts, children}`.
pub fn branches_json(store: &Store, of: Option<CheckpointId>) -> Result<Value> {
    let nodes = store.query(|q| q.branches(of))?;
    Ok(Value::Array(
        nodes
            .iter()
            .map(|b| {
                json!({
                    "lsn": b.lsn.0,
                    "kind": b.kind.name(),
                    "session": b.session,
                    "parent": b.parent.map(|p| p.0),
                    "label": b.label,
                    "ts": b.ts.to_iso(),
                    "children": b.children,
                })
            })
            .collect(),
    ))
}

/// The store's checkpoints (of one session, or all), oldest first.
pub fn checkpoints_json(store: &Store, session: Option<&str>) -> Result<Value> {
    let list = store.checkpoints(session)?;
    Ok(Value::Array(list.iter().map(checkpoint_json).collect()))
}

/// What `verify` found: `ok`, `records`, `segments`, `blobs`, `head`
/// (`{lsn, hash}`) and `problems` (each a sentence naming where).
pub fn verify_json(store: &Store) -> Result<Value> {
    let r = store.verify(None)?;
    let mut problems: Vec<String> = r.log.problems.iter().map(|p| p.to_string()).collect();
    problems.extend(r.blobs.problems.iter().map(|p| p.to_string()));
    problems.extend(r.lost.lost.iter().map(|p| p.to_string()));
    Ok(json!({
        "ok": r.is_ok(),
        "records": r.log.records,
        "segments": r.log.segments,
        "blobs": r.blobs.blobs,
        "head": {"lsn": r.log.head.last_lsn.0, "hash": r.log.head.chain.to_hex()},
        "problems": problems,
    }))
}

/// Counts and sizes: `head` (`{lsn, hash}`), `log` (`records`, `segments`,
/// `bytes`, `durability`) and `blobs` (`blobs`, `raw_bytes`,
/// `stored_bytes`, `dedup_ratio`).
pub fn stats_json(store: &Store) -> Value {
    let s = store.stats();
    json!({
        "head": {"lsn": s.head.last_lsn.0, "hash": s.head.chain.to_hex()},
        "log": {
            "records": s.log.records,
            "segments": s.log.segments,
            "bytes": s.log.bytes,
            "durability": s.log.durability.to_string(),
        },
        "blobs": {
            "blobs": s.blobs.blobs,
            "raw_bytes": s.blobs.raw_bytes,
            "stored_bytes": s.blobs.stored_bytes,
            "dedup_ratio": s.blobs.dedup_ratio,
        },
    })
}

/// Retention and blob collection: keep at most `keep_per_session`
/// checkpoints per session and/or file contents under `max_bytes`; returns
/// `discarded` (checkpoint ids), `retained`, `removed_blobs`, `freed_bytes`
/// and `collected`.
pub fn gc_json(
    store: &Store,
    keep_per_session: Option<usize>,
    max_bytes: Option<u64>,
) -> Result<Value> {
    let r = store.gc(&RetentionPolicy {
        keep_per_session,
        max_bytes,
    })?;
    Ok(json!({
        "discarded": r.discarded.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        "retained": r.retained,
        "live_blobs": r.live_blobs,
        "removed_blobs": r.gc.removed_blobs,
        "freed_bytes": r.gc.freed_bytes,
        "collected": r.collected,
    }))
}

/// Exports what `filter` selects in `format` to the file at `path`
/// (created or replaced, synced); returns `{written, records, bytes}`.
pub fn export_to_path(
    store: &Store,
    filter: &Filter,
    format: Format,
    path: &Path,
) -> Result<Value> {
    let file = std::fs::File::create(path)
        .map_err(|e| BindError::from(cairn::Error::io("create", path, e)))?;
    let mut out = std::io::BufWriter::new(file);
    let stats = store.export(filter, format, &mut out)?;
    let file = out
        .into_inner()
        .map_err(|e| BindError::from(cairn::Error::io("write", path, e.into_error())))?;
    file.sync_all()
        .map_err(|e| BindError::from(cairn::Error::io("sync", path, e)))?;
    Ok(export_stats_json(&stats))
}

/// Exports what `filter` selects in `format` into memory.
pub fn export_to_vec(store: &Store, filter: &Filter, format: Format) -> Result<(Vec<u8>, Value)> {
    let mut out = Vec::new();
    let stats = store.export(filter, format, &mut out)?;
    Ok((out, export_stats_json(&stats)))
}

fn export_stats_json(s: &cairn::ExportStats) -> Value {
    json!({"written": s.written, "records": s.records, "bytes": s.bytes})
}

/// Imports the file at `path` in `format` (refused if it was imported
/// before); returns `{first, last}` (the LSNs recorded; null when none).
pub fn import_path(store: &Store, path: &Path, format: Format) -> Result<Value> {
    let file = std::fs::File::open(path)
        .map_err(|e| BindError::from(cairn::Error::io("open", path, e)))?;
    let mut reader = std::io::BufReader::new(file);
    let name = path.display().to_string();
    let range = store.import(format, &mut reader, &name)?;
    Ok(json!({
        "first": range.map(|(a, _)| a.0),
        "last": range.map(|(_, b)| b.0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> Shared {
        Shared::open(dir, true, "never", false).expect("open")
    }

    #[test]
    fn open_without_create_refuses_a_workspace_without_a_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = Shared::open(dir.path(), false, "always", false).expect_err("no store");
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(e.message.contains(".cairn"), "{}", e.message);
    }

    #[test]
    fn a_second_writer_is_locked_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _a = open(dir.path());
        let e = Shared::open(dir.path(), true, "always", false).expect_err("locked");
        assert_eq!(e.kind, ErrorKind::Locked, "{}", e.message);
    }

    #[test]
    fn events_take_the_sessions_stamps_and_refuse_bad_fields() {
        let spec = SessionSpec {
            id: "t1".into(),
            agent: Some("coder".into()),
            ..SessionSpec::default()
        };
        let e = spec
            .event_from_json(json!({"kind": "prompt", "text": "hi"}))
            .expect("event");
        assert_eq!(
            (e.session.as_str(), e.agent.as_deref()),
            ("t1", Some("coder"))
        );
        let bad = spec
            .event_from_json(json!({"kind": "no.such.kind"}))
            .expect_err("bad kind");
        assert_eq!(bad.kind, ErrorKind::InvalidEvent);
        let missing = spec
            .event_from_json(json!({"text": "x"}))
            .expect_err("no kind");
        assert!(missing.message.contains("kind"), "{}", missing.message);
    }

    #[test]
    fn the_cursor_pages_through_every_record_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sh = open(dir.path());
        let spec = SessionSpec::default();
        let n = EVENTS_PAGE * 2 + 3;
        sh.with(|s| {
            for i in 0..n {
                spec.on(s).prompt(&format!("p{i}"))?;
            }
            Ok(())
        })
        .expect("append");
        let mut c = Cursor::new(Filter::all());
        let mut lsns = Vec::new();
        loop {
            let page = sh.try_with(|s| c.next_page(s)).expect("page");
            if page.is_empty() {
                break;
            }
            lsns.extend(page.iter().map(|v| v["lsn"].as_u64().expect("lsn")));
        }
        assert_eq!(lsns, (1..=n as u64).collect::<Vec<_>>());
        let mut limited = Cursor::new(Filter {
            limit: Some(5),
            ..Filter::all()
        });
        let page = sh.try_with(|s| limited.next_page(s)).expect("page");
        assert_eq!(page.len(), 5);
        assert!(sh
            .try_with(|s| limited.next_page(s))
            .expect("end")
            .is_empty());
    }

    #[test]
    fn a_closed_store_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sh = open(dir.path());
        sh.close().expect("close");
        sh.close().expect("twice");
        let e = sh.with(|s| Ok(s.head())).expect_err("closed");
        assert!(e.message.contains("closed"), "{}", e.message);
    }
}
