//! The log-facing flow: creating checkpoints (capture, blobs durable, then
//! the record), listing and finding them, rolling back, and retention.
//! Everything else in the crate is pure or file-system only.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use cairn_codec::{
    BlobHash, ChainHash, CheckpointCounts, CheckpointId, Event, EventKind, Lsn, Timestamp,
};
use cairn_engine::log::{Head, Record};

use crate::blobs::{BlobAccess, GcMode, GcSummary, HashOnly};
use crate::capture::{self, Capture, StatCache};
use crate::error::{Result, SnapshotError};
use crate::interrupted::{
    interrupted_temporaries, record_interrupted_rollback, unfinished_rollback_warning, MarkerGuard,
    UnfinishedRollback,
};
use crate::manifest;
use crate::restore;
use crate::retention::{self, BudgetOutcome, Candidate, RetentionPolicy};
use crate::workspace::{write_atomic, Workspace, CHECKPOINTS_FILE};

/// What the snapshot code needs from the log.
pub trait LogAccess {
    /// Appends one event durably; returns its LSN.
    fn append(&self, event: &Event) -> Result<Lsn>;
    /// Appends events atomically; returns the first and last LSN.
    fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>>;
    /// The last committed record.
    fn head(&self) -> Head;
    /// One committed record.
    fn read(&self, lsn: Lsn) -> Result<Record>;
    /// Calls `f` on every committed record from `from` to the head.
    fn for_each_from(&self, from: Lsn, f: &mut dyn FnMut(Record) -> Result<()>) -> Result<()>;
}

impl LogAccess for cairn_engine::log::Log {
    fn append(&self, event: &Event) -> Result<Lsn> {
        Ok(cairn_engine::log::Log::append(self, event)?)
    }
    fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>> {
        Ok(cairn_engine::log::Log::append_batch(self, events)?)
    }
    fn head(&self) -> Head {
        cairn_engine::log::Log::head(self)
    }
    fn read(&self, lsn: Lsn) -> Result<Record> {
        Ok(cairn_engine::log::Log::read(self, lsn)?)
    }
    fn for_each_from(&self, from: Lsn, f: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
        for r in self.iter_from(from) {
            f(r?)?;
        }
        Ok(())
    }
}

/// An in-memory log, for tests and in-memory embedders.
#[derive(Debug, Default)]
pub struct MemLog {
    records: Mutex<Vec<Record>>,
}

impl MemLog {
    /// An empty log.
    pub fn new() -> MemLog {
        MemLog::default()
    }
    /// Every record.
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().clone()
    }
}

impl LogAccess for MemLog {
    fn append(&self, event: &Event) -> Result<Lsn> {
        let body = event.encode_body()?;
        let mut recs = self.records.lock();
        let prev = recs.last().map_or(ChainHash::ZERO, |r| r.chain);
        let lsn = Lsn(recs.len() as u64 + 1);
        let mut h = blake3::Hasher::new();
        h.update(prev.as_bytes());
        h.update(&lsn.0.to_le_bytes());
        h.update(&body);
        recs.push(Record {
            lsn,
            chain: ChainHash(*h.finalize().as_bytes()),
            event: event.clone(),
        });
        Ok(lsn)
    }
    fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>> {
        let mut first = None;
        let mut last = None;
        for e in events {
            let l = self.append(e)?;
            first.get_or_insert(l);
            last = Some(l);
        }
        Ok(first.zip(last))
    }
    fn head(&self) -> Head {
        self.records
            .lock()
            .last()
            .map_or_else(Head::default, |r| Head {
                last_lsn: r.lsn,
                chain: r.chain,
            })
    }
    fn read(&self, lsn: Lsn) -> Result<Record> {
        let recs = self.records.lock();
        recs.get((lsn.0 as usize).wrapping_sub(1))
            .cloned()
            .ok_or_else(|| {
                SnapshotError::Engine(cairn_engine::EngineError::LsnOutOfRange {
                    lsn,
                    last: Lsn(recs.len() as u64),
                })
            })
    }
    fn for_each_from(&self, from: Lsn, f: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
        let recs = self.records.lock().clone();
        for r in recs.into_iter().skip((from.0.max(1) - 1) as usize) {
            f(r)?;
        }
        Ok(())
    }
}

/// How a checkpoint finds what changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanMode {
    /// Walk the whole workspace (skipping files whose stat data is unchanged).
    #[default]
    Full,
    /// Re-read only the paths tracked since the last checkpoint and patch
    /// the previous tree (falls back to a full scan when there is none).
    TrackedOnly,
}

/// What to checkpoint, and its metadata.
#[derive(Clone, Debug, Default)]
pub struct CheckpointRequest {
    /// Session id (empty: the default session).
    pub session: String,
    /// Run id.
    pub run: Option<String>,
    /// Phase id.
    pub phase: Option<String>,
    /// Agent name.
    pub agent: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Label, e.g. "Before turn 3".
    pub label: Option<String>,
    /// Opaque application state (the agent's memory epoch), stored as a blob.
    pub state: Option<Vec<u8>>,
    /// How to find what changed.
    pub scan: ScanMode,
}

/// A checkpoint, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// Its id (`c<lsn>`).
    pub id: CheckpointId,
    /// The LSN of its `checkpoint.create` record.
    pub lsn: Lsn,
    /// When it was taken.
    pub ts: Timestamp,
    /// Session.
    pub session: String,
    /// Run.
    pub run: Option<String>,
    /// Phase.
    pub phase: Option<String>,
    /// Agent that took it, if any.
    #[serde(default)]
    pub agent: Option<String>,
    /// Model of that agent, if any.
    #[serde(default)]
    pub model: Option<String>,
    /// Label.
    pub label: Option<String>,
    /// Manifest root.
    pub root: BlobHash,
    /// Application-state blob.
    pub state: Option<BlobHash>,
    /// What the scan saw.
    pub counts: CheckpointCounts,
    /// True once a `checkpoint.discard` evicted it.
    pub discarded: bool,
    /// The LSN of the (first) `checkpoint.discard` record that evicted it.
    #[serde(default)]
    pub discarded_at: Option<Lsn>,
    /// True if that record was written by retention (gc), false if it was
    /// recorded by the platform (`cairn record`, an import).
    #[serde(default)]
    pub discarded_by_retention: bool,
    /// Files the scan skipped as too large or unreadable, or because their
    /// name is not UTF-8, each with the reason (the first
    /// [`crate::scan::MAX_NOT_CAPTURED_NAMED`]; the counts are in
    /// `counts.skipped`): what a rollback to this checkpoint cannot bring
    /// back. From the record's `meta.not_captured`.
    #[serde(default)]
    pub not_captured: Vec<NotCaptured>,
}

/// A file a checkpoint did not capture, and why (`too_large`,
/// `unreadable`, `non_utf8_name`: see [`crate::scan::reason`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotCaptured {
    /// Workspace-relative path; for `non_utf8_name`, the path's bytes
    /// escaped ([`crate::relpath::escape_bytes`]: `dir\xff/a.txt`), which
    /// is no workspace path, and a directory that holds no file ends in
    /// `/`.
    pub path: String,
    /// The skip reason.
    pub why: String,
}

impl NotCaptured {
    /// The files a `checkpoint.create` record names as not captured (its
    /// `meta.not_captured`); none for any other record, or a list that
    /// cannot be read.
    pub fn named_by(e: &Event) -> Vec<NotCaptured> {
        e.meta
            .as_ref()
            .and_then(|m| m.0.get(NOT_CAPTURED_KEY))
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }
}

impl CheckpointInfo {
    fn from_record(lsn: Lsn, e: &Event) -> Option<CheckpointInfo> {
        if e.kind != EventKind::CheckpointCreate {
            return None;
        }
        Some(CheckpointInfo {
            id: CheckpointId(lsn),
            lsn,
            ts: e.ts,
            session: e.session.clone(),
            run: e.run.clone(),
            phase: e.phase.clone(),
            agent: e.agent.clone(),
            model: e.model.clone(),
            label: e.label.clone(),
            root: e.root?,
            state: e.state,
            counts: e.counts.clone().unwrap_or_default(),
            discarded: false,
            discarded_at: None,
            discarded_by_retention: false,
            not_captured: NotCaptured::named_by(e),
        })
    }
}

pub(crate) fn session_or_default(s: &str) -> String {
    if s.is_empty() {
        cairn_codec::event::DEFAULT_SESSION.to_string()
    } else {
        s.to_string()
    }
}

fn capture_for<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    mode: ScanMode,
) -> Result<Capture> {
    let mut cap = capture_any(ws, blobs, mode)?;
    // `changed` counts against the previous checkpoint's tree, or the tree
    // a rollback since left. A full scan counts against the last full
    // scan's, which is another one after a tracked-only checkpoint (or
    // when the stat cache was lost): count again from the trees, reading
    // only the parts that differ.
    if let Some(last) = ws.load_last() {
        if let Some(rb) = &last.rolled_back {
            if let Ok(n) = count_changed_since_rollback(blobs, &last.root, rb, &cap.root) {
                cap.counts.changed = n;
            }
        } else if cap.base != Some(last.root) {
            if let Ok(n) = count_changed(blobs, &last.root, &cap.root) {
                cap.counts.changed = n;
            }
        }
    }
    Ok(cap)
}

/// Files and symlinks that differ (added, removed, other contents, mode or
/// kind) between two trees.
fn count_changed<B: crate::BlobRead + ?Sized>(
    blobs: &B,
    old: &BlobHash,
    new: &BlobHash,
) -> Result<u64> {
    if old == new {
        return Ok(0);
    }
    // Only the differing parts of the trees are read; the rest is equal.
    let (a, b, _) = restore::diff_trees(blobs, old, new)?;
    let leaf =
        |m: &crate::manifest::Manifest, p: &str| m.entries.get(p).filter(|e| e.is_leaf()).copied();
    let mut n = 0;
    let paths: BTreeSet<&String> = a.entries.keys().chain(b.entries.keys()).collect();
    for p in paths {
        if leaf(&a, p) != leaf(&b, p) {
            n += 1;
        }
    }
    Ok(n)
}

/// Files and symlinks that differ between `new` and the tree a rollback
/// left: `undo` (its undo point's tree) with `rb.target`'s entries at the
/// paths the rollback set. Only the parts of the trees that differ from
/// `undo` are read.
fn count_changed_since_rollback<B: crate::BlobRead + ?Sized>(
    blobs: &B,
    undo: &BlobHash,
    rb: &crate::workspace::RolledBack,
    new: &BlobHash,
) -> Result<u64> {
    // Within each pair's differing parts both sides are read exactly;
    // outside them a path's entry is the undo point's in both.
    let (u_n, n, _) = restore::diff_trees(blobs, undo, new)?;
    let (u_t, t, _) = restore::diff_trees(blobs, undo, &rb.target)?;
    let leaf =
        |m: &crate::manifest::Manifest, p: &str| m.entries.get(p).filter(|e| e.is_leaf()).copied();
    let paths: BTreeSet<&String> = [&u_n, &n, &u_t, &t]
        .iter()
        .flat_map(|m| m.entries.keys())
        .collect();
    let mut count = 0;
    for p in paths {
        let in_n = u_n.entries.contains_key(p) || n.entries.contains_key(p);
        let in_t = u_t.entries.contains_key(p) || t.entries.contains_key(p);
        let now = if in_n { leaf(&n, p) } else { leaf(&u_t, p) };
        let left = match (rb.set(p), in_t) {
            (true, true) => leaf(&t, p),
            (_, false) => leaf(&u_n, p),
            (false, true) => leaf(&u_t, p),
        };
        if now != left {
            count += 1;
        }
    }
    Ok(count)
}

fn capture_any<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    mode: ScanMode,
) -> Result<Capture> {
    let track = match ws.load_track_for_capture()? {
        Some(t) => t,
        None => {
            ws.warn(format!(
                "{} is damaged: the tracked paths are unknown, so this checkpoint {}scanned the whole workspace; track the paths again",
                ws.cache_path(crate::workspace::TRACKED_FILE).display(),
                if mode == ScanMode::TrackedOnly { "is not tracked-only: it " } else { "" },
            ));
            // Without the dirty set a tracked-only capture could miss a
            // change: scan everything.
            return capture::capture_full(ws, blobs, &BTreeSet::new(), &BTreeSet::new());
        }
    };
    if track.rescan {
        // `track` found the file damaged and started afresh: what was
        // tracked or dirty before is unknown.
        return capture::capture_full(ws, blobs, &track.tracked, &track.dirty);
    }
    if let Some(w) = ws.watcher() {
        // With a watcher, both scan modes use the watched change set (it
        // covers tracked writes too, and edits by shell commands).
        let last = ws.load_last();
        if let Some(d) = w.drain(last.as_ref().map(|l| l.root)) {
            if let Some(last) = last.filter(|l| l.root == d.base) {
                if blobs.contains(&last.root)? {
                    w.count(true);
                    return capture::capture_watched(
                        ws,
                        blobs,
                        &last,
                        &d.paths,
                        &track.tracked,
                        &track.dirty,
                    );
                }
            }
        }
        w.count(false);
        return capture::capture_full(ws, blobs, &track.tracked, &track.dirty);
    }
    if mode == ScanMode::TrackedOnly {
        if let Some(last) = ws.load_last() {
            if blobs.contains(&last.root)? {
                return capture::capture_tracked(ws, blobs, &last, &track.dirty);
            }
        }
    }
    capture::capture_full(ws, blobs, &track.tracked, &track.dirty)
}

fn create_inner<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
) -> Result<(CheckpointInfo, Capture)> {
    let watcher = ws.watcher();
    let res = create_record(log, blobs, ws, req);
    if let Some(w) = &watcher {
        match &res {
            Ok((_, cap)) => w.captured(cap.root),
            // The drained change set may not have made it into a checkpoint.
            Err(_) => w.invalidate(),
        }
    }
    res
}

/// [`create_inner`], running `during` on another thread while the capture
/// is made durable and recorded (a rollback plans and pre-stages its
/// writes meanwhile). `during`'s result comes back even if the checkpoint
/// fails, so it can be cleaned up.
fn create_inner_with<L, B, T, F>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
    during: F,
) -> (Result<(CheckpointInfo, Capture)>, Option<T>)
where
    L: LogAccess + ?Sized,
    B: BlobAccess + ?Sized,
    T: Send,
    F: FnOnce(&Capture) -> T + Send,
{
    let watcher = ws.watcher();
    let (res, extra) = match capture_for(ws, blobs, req.scan) {
        Err(e) => (Err(e), None),
        Ok(cap) => {
            let (committed, extra) = std::thread::scope(|s| {
                let h = s.spawn(|| during(&cap));
                let c = commit_record(log, blobs, ws, req, &cap);
                (c, h.join().ok())
            });
            match (committed, &extra) {
                (Ok(info), Some(_)) => (Ok((info, cap)), extra),
                (Ok(_), None) => (
                    Err(SnapshotError::Invalid("a planning thread panicked".into())),
                    None,
                ),
                (Err(e), _) => (Err(e), extra),
            }
        }
    };
    if let Some(w) = &watcher {
        match &res {
            Ok((_, cap)) => w.captured(cap.root),
            Err(_) => w.invalidate(),
        }
    }
    (res, extra)
}

fn create_record<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
) -> Result<(CheckpointInfo, Capture)> {
    let cap = capture_for(ws, blobs, req.scan)?;
    let info = commit_record(log, blobs, ws, req, &cap)?;
    Ok((info, cap))
}

/// Makes a capture durable and records it: blobs synced, then the
/// `checkpoint.create` record, then the caches.
fn commit_record<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
    cap: &Capture,
) -> Result<CheckpointInfo> {
    let state = req.state.as_deref().map(|s| blobs.put(s)).transpose()?;
    // The commit protocol: every blob durable before the record that names it.
    blobs.sync()?;

    let mut ev = Event::new(
        EventKind::CheckpointCreate,
        session_or_default(&req.session),
    );
    ev.run = req.run;
    ev.phase = req.phase;
    ev.agent = req.agent;
    ev.model = req.model;
    ev.label = req.label;
    ev.root = Some(cap.root);
    ev.state = state;
    ev.counts = Some(cap.counts.clone());
    if !cap.not_captured.is_empty() {
        let named: Vec<NotCaptured> = cap
            .not_captured
            .iter()
            .take(crate::scan::MAX_NOT_CAPTURED_NAMED)
            .map(|(path, why)| NotCaptured {
                path: path.clone(),
                why: why.to_string(),
            })
            .collect();
        let mut meta = serde_json::Map::new();
        meta.insert(NOT_CAPTURED_KEY.into(), serde_json::json!(named));
        ev.meta = Some(cairn_codec::event::Meta(meta));
    }
    let lsn = log.append(&ev)?;
    // Caches only after the record: they may name blobs only a durable checkpoint keeps.
    if let Some(c) = &cap.new_cache {
        c.clone().save_in_background(ws);
    }
    ws.save_last(Some(&cap.last()))?;
    // A damaged tracked-path file was read as empty by the capture; the
    // checkpoint is recorded, so set it aside for `track` to start afresh.
    if let Some(to) = ws.set_aside_damaged_track()? {
        ws.warn(format!("the damaged file was moved to {}", to.display()));
    }
    ws.clear_dirty(&cap.captured_dirty, cap.new_cache.is_some())?;
    CheckpointInfo::from_record(lsn, &ev)
        .ok_or_else(|| SnapshotError::Invalid("internal: checkpoint record without root".into()))
}

/// Takes a checkpoint: captures the workspace, makes its blobs durable,
/// then appends the `checkpoint.create` record. A rollback whose process
/// stopped part way is recorded first (see
/// [`record_interrupted_rollback`]), so the checkpoint of the tree it left
/// follows the record that explains it.
pub fn create_checkpoint<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
) -> Result<CheckpointInfo> {
    ws.check_writable("checkpoint")?;
    let _flow = ws.flow();
    record_interrupted_rollback(log, blobs, ws)?;
    Ok(create_inner(log, blobs, ws, req)?.0)
}

/// The persisted checkpoint list: a fold of the log up to `folded_to`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ListCache {
    version: u32,
    folded_to: Lsn,
    chain_at: ChainHash,
    list: Vec<CheckpointInfo>,
}

/// Version 2: [`CheckpointInfo::not_captured`]; version 3:
/// [`CheckpointInfo::discarded_at`] and
/// [`CheckpointInfo::discarded_by_retention`]; version 4:
/// [`CheckpointInfo::agent`] and [`CheckpointInfo::model`].
const LIST_CACHE_VERSION: u32 = 4;

/// The `meta` key of a `checkpoint.create` record naming the files it did
/// not capture (see [`CheckpointInfo::not_captured`]).
pub const NOT_CAPTURED_KEY: &str = "not_captured";

/// Records folded into the in-memory checkpoint list before the file copy
/// is rewritten: a process that starts from a file this far behind folds at
/// most this many records (microseconds each) more.
const LIST_CACHE_SAVE_RECORDS: u64 = 256;

fn save_list(ws: &Workspace, cache: &ListCache) -> Result<()> {
    if ws.is_read_only() {
        return Ok(());
    }
    let bytes = rmp_serde::to_vec(cache)
        .map_err(|e| SnapshotError::Invalid(format!("encode checkpoint list: {e}")))?;
    // A cache: rebuilt from the log when lost, so no fsync.
    write_atomic(&ws.cache_path(CHECKPOINTS_FILE), &bytes, false)
}

/// Writes the checkpoint list file if the in-memory copy has folded
/// records the file lacks (best effort: it is a cache).
pub(crate) fn save_list_if_behind(ws: &Workspace) {
    if let Some((cache, saved_to)) = ws.checkpoint_list.lock().as_ref() {
        if cache.folded_to != *saved_to {
            let _ = save_list(ws, cache);
        }
    }
}

fn fold(cache: &mut ListCache, r: &Record) {
    match r.event.kind {
        EventKind::CheckpointCreate => {
            if let Some(i) = CheckpointInfo::from_record(r.lsn, &r.event) {
                cache.list.push(i);
            }
        }
        EventKind::CheckpointDiscard => {
            if let Some(id) = r.event.checkpoint {
                if let Ok(i) = cache.list.binary_search_by_key(&id, |c| c.id) {
                    let c = &mut cache.list[i];
                    if !c.discarded {
                        c.discarded = true;
                        c.discarded_at = Some(r.lsn);
                        c.discarded_by_retention = retention::discarded_by_retention(&r.event);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Every checkpoint (of `session`, if given), oldest first, discarded ones
/// included and marked. Fast: the list is kept in the cache directory and
/// only the records appended since are folded in (rebuilt from the log if
/// the cache is missing or belongs to another log).
pub fn list_checkpoints<L: LogAccess + ?Sized>(
    log: &L,
    ws: &Workspace,
    session: Option<&str>,
) -> Result<Vec<CheckpointInfo>> {
    let mut slot = ws.checkpoint_list.lock();
    let (mut cache, mut saved_to) = match slot.take() {
        Some(c) => c,
        None => {
            let file = std::fs::read(ws.cache_path(CHECKPOINTS_FILE))
                .ok()
                .and_then(|b| rmp_serde::from_slice::<ListCache>(&b).ok())
                .filter(|c| c.version == LIST_CACHE_VERSION)
                .unwrap_or_default();
            let saved_to = file.folded_to;
            (file, saved_to)
        }
    };
    let head = log.head();
    let stale = cache.folded_to > head.last_lsn
        || (cache.folded_to.0 > 0
            && log.read(cache.folded_to).map(|r| r.chain).ok() != Some(cache.chain_at));
    if stale {
        cache = ListCache::default();
    }
    if cache.folded_to < head.last_lsn {
        let mut last = (cache.folded_to, cache.chain_at);
        log.for_each_from(cache.folded_to.next(), &mut |r| {
            if r.lsn <= head.last_lsn {
                fold(&mut cache, &r);
                last = (r.lsn, r.chain);
            }
            Ok(())
        })?;
        cache.version = LIST_CACHE_VERSION;
        cache.folded_to = last.0;
        cache.chain_at = last.1;
        // The file saves the next process a fold of the whole log; a few
        // records more to fold cost it less than writing the file costs
        // every rollback, so a long-lived process writes it now and then
        // (and when the workspace is dropped).
        if stale || cache.folded_to.0 >= saved_to.0 + LIST_CACHE_SAVE_RECORDS {
            save_list(ws, &cache)?;
            saved_to = cache.folded_to;
        }
    }
    let session = session.map(session_or_default);
    let list = cache
        .list
        .iter()
        .filter(|c| session.as_ref().is_none_or(|s| &c.session == s))
        .cloned()
        .collect();
    *slot = Some((cache, saved_to));
    Ok(list)
}

/// The checkpoint `id`; an unknown id is an error that says how to list
/// them, and the id of a checkpoint record without a manifest (imported)
/// one that says it holds no files.
pub fn find_checkpoint<L: LogAccess + ?Sized>(
    log: &L,
    ws: &Workspace,
    id: CheckpointId,
) -> Result<CheckpointInfo> {
    if let Some(c) = list_checkpoints(log, ws, None)?
        .into_iter()
        .find(|c| c.id == id)
    {
        return Ok(c);
    }
    let record = (id.0 <= log.head().last_lsn)
        .then(|| log.read(id.0).ok())
        .flatten()
        .filter(|r| is_imported_checkpoint(&r.event));
    Err(match record {
        Some(r) => match collected_note(&r.event) {
            Some(note) => SnapshotError::CollectedCheckpoint {
                id,
                copy_of: note
                    .get("checkpoint")
                    .and_then(|c| c.as_str())
                    .and_then(|c| c.parse().ok()),
            },
            None => SnapshotError::ImportedCheckpoint { id },
        },
        None => SnapshotError::UnknownCheckpoint { id },
    })
}

/// True if `e` is a `checkpoint.create` record without a manifest: one
/// imported from another tool's audit log, which captured no files, or
/// one imported without the files gc had collected (see [`COLLECTED_KEY`]).
pub fn is_imported_checkpoint(e: &Event) -> bool {
    e.kind == EventKind::CheckpointCreate && e.root.is_none()
}

/// The `meta` key of a `checkpoint.create` record imported without its
/// files, which gc had collected (`cairn import --collected-checkpoints
/// record`): an object holding the blob hashes the line named (`root`,
/// `state`, ...), the checkpoint whose record the line copied
/// (`checkpoint`, an id of the store it was imported into) and where that
/// one was discarded (`discarded_at`, an LSN). The record has no `root`,
/// so it is no checkpoint: a rollback to it is refused
/// ([`SnapshotError::CollectedCheckpoint`]).
pub const COLLECTED_KEY: &str = "collected";

/// The [`COLLECTED_KEY`] object of an imported checkpoint record, if it
/// has one.
pub fn collected_note(e: &Event) -> Option<&serde_json::Map<String, serde_json::Value>> {
    if !is_imported_checkpoint(e) {
        return None;
    }
    e.meta.as_ref()?.0.get(COLLECTED_KEY)?.as_object()
}

/// What to roll back to, and the metadata of what the rollback records.
///
/// [`RollbackRequest::new`] gives a whole-workspace rollback with no
/// metadata; fill in the rest with struct update syntax:
///
/// ```
/// # use cairn_snapshot::RollbackRequest;
/// # let target = "c6".parse().unwrap();
/// let req = RollbackRequest {
///     run: Some("run-1".into()),
///     state: Some(b"memory epoch 7".to_vec()),
///     ..RollbackRequest::new(target)
/// };
/// assert!(req.paths.is_empty() && !req.dry_run);
/// ```
#[derive(Clone, Debug)]
pub struct RollbackRequest {
    /// The checkpoint to restore.
    pub target: CheckpointId,
    /// Limit the rollback to these paths (and what is under them); empty: everything.
    pub paths: Vec<String>,
    /// List what would change, change nothing (no records either).
    pub dry_run: bool,
    /// The session the pre-rollback checkpoint and the record belong to.
    pub session: String,
    /// Run id of the undo point and the `rollback` record.
    pub run: Option<String>,
    /// Phase id of the undo point and the record.
    pub phase: Option<String>,
    /// Agent name on the undo point and the record.
    pub agent: Option<String>,
    /// Model name on the undo point and the record.
    pub model: Option<String>,
    /// The application state now (the agent's memory epoch), stored as the
    /// undo point's state blob: rolling back to the undo point (undoing
    /// this rollback) hands it back in [`RollbackReport::state`]. A dry
    /// run stores nothing.
    pub state: Option<Vec<u8>>,
}

impl RollbackRequest {
    /// A rollback of the whole workspace to `target`, in the default
    /// session, with no run, phase, agent, model or state.
    pub fn new(target: CheckpointId) -> RollbackRequest {
        RollbackRequest {
            target,
            paths: Vec::new(),
            dry_run: false,
            session: String::new(),
            run: None,
            phase: None,
            agent: None,
            model: None,
            state: None,
        }
    }
}

/// What a rollback did (or, for a dry run, would do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackReport {
    /// The workspace acted on (or, for a dry run, that would be): its
    /// absolute, canonical path. A store says where its workspace is, so
    /// whoever shows a rollback's result names the directory it changed.
    pub workspace: PathBuf,
    /// The checkpoint taken just before (undo by rolling back to it); `None` for a dry run.
    pub source: Option<CheckpointId>,
    /// The checkpoint restored.
    pub target: CheckpointId,
    /// Files and symlinks written (or whose mode was restored).
    pub written: Vec<String>,
    /// Files and symlinks deleted.
    pub deleted: Vec<String>,
    /// Directories created.
    pub created_dirs: Vec<String>,
    /// Directories removed (or, for a dry run, to remove if they end up empty).
    pub removed_dirs: Vec<String>,
    /// Directories kept whose permission bits were set back.
    pub dir_modes: Vec<String>,
    /// Paths left as they are, each with the reason: the undo point could
    /// not capture what is there now, so changing it could not be undone
    /// (see [`restore::keep_uncaptured`]).
    pub kept: Vec<restore::Kept>,
    /// The target's application-state blob, for the embedder to rewind its memory.
    pub state: Option<Vec<u8>>,
    /// The hash of that blob (`cairn blob get HASH` prints it).
    pub state_hash: Option<BlobHash>,
    /// The `rollback` record; `None` for a dry run.
    pub lsn: Option<Lsn>,
    /// For a dry run, the temporary files a rollback interrupted part way
    /// left (`.cairn-restore-<pid>-<n>.tmp`, see [`crate::interrupted`]),
    /// which the rollback removes first (recording the interrupted one):
    /// not in `deleted`, which lists what the plan itself deletes. 0 for
    /// a rollback, whose warning says how many it removed.
    pub interrupted_temporaries: usize,
}

/// Meta key of a `rollback` record whose `files` list was cut at
/// [`MAX_ROLLBACK_FILES_LISTED`]: how many paths it touched.
pub const ROLLBACK_META_FILES_TOTAL: &str = "files_total";

/// Meta key of a `rollback` record whose `files` list was cut: the paths
/// the rollback was limited to (empty: the whole tree).
pub const ROLLBACK_META_SCOPE: &str = "scope";

/// Meta key of a `rollback` record listing the paths it left as they were
/// (`[{"path", "why"}]`; see [`restore::keep_uncaptured`]).
pub const ROLLBACK_META_KEPT: &str = "kept";

/// The `error_kind` of a `rollback` record whose rollback stopped part way
/// (the workspace is partly rolled back; its `source` undoes it).
pub const ROLLBACK_INCOMPLETE: &str = "rollback_incomplete";

/// The most paths a `rollback` record lists in `files`: keeps one record
/// far below the event body limit even for a whole-tree rollback.
pub const MAX_ROLLBACK_FILES_LISTED: usize = 10_000;

/// The paths of `paths` (as a path-scoped rollback takes them) that match
/// nothing, neither on disk nor in checkpoint `target`'s tree: most likely
/// typos, which a rollback would take as "nothing to change" (the CLI
/// refuses them, as git refuses a pathspec that matches no file). A path
/// that cannot be taken at all is an error, as in [`rollback`].
pub fn paths_matching_nothing<L: LogAccess + ?Sized, B: crate::BlobRead + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    target: CheckpointId,
    paths: &[String],
) -> Result<Vec<String>> {
    let target = find_checkpoint(log, ws, target)?;
    let mut out = Vec::new();
    for p in paths {
        let n = ws.normalize(p)?;
        if !n.is_empty()
            && std::fs::symlink_metadata(ws.root().join(&n)).is_err()
            && crate::manifest::lookup(blobs, &target.root, &n)?.is_none()
        {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// What a checkpoint needs to be restored that the store may no longer hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restorable {
    /// Its manifest, every file it names and its application state are stored.
    Whole,
    /// Its manifest or a file it names is gone.
    FilesGone,
    /// Its files are all stored, but not its application-state blob.
    StateGone(BlobHash),
}

/// Whether every blob `c` needs to be restored is still in the store: its
/// manifest, every file it names, and its application state. A discarded
/// checkpoint is restorable exactly then: gc keeps the tree a later
/// rollback restored (the state from that rollback on is that tree), and
/// its application state with it, whole, so `tree`, `show` and `rollback`
/// all work on it until gc collects it.
fn restorable<B: BlobAccess + ?Sized>(blobs: &B, c: &CheckpointInfo) -> Result<Restorable> {
    if !blobs.contains(&c.root)? {
        return Ok(Restorable::FilesGone);
    }
    let Ok(m) = manifest::list(blobs, &c.root) else {
        return Ok(Restorable::FilesGone);
    };
    for (_, e) in m.files() {
        if !blobs.contains(&e.hash)? {
            return Ok(Restorable::FilesGone);
        }
    }
    match c.state {
        Some(s) if !blobs.contains(&s)? => Ok(Restorable::StateGone(s)),
        _ => Ok(Restorable::Whole),
    }
}

/// Rolls the workspace back to a checkpoint (see the crate docs for the
/// rules). A discarded checkpoint can be the target while its whole tree
/// and its application state are still in the store (see `restorable`).
pub fn rollback<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    mut req: RollbackRequest,
) -> Result<RollbackReport> {
    let _flow = ws.flow();
    let target = find_checkpoint(log, ws, req.target)?;
    if target.discarded {
        let at = target.discarded_at.unwrap_or(target.lsn);
        match restorable(blobs, &target)? {
            Restorable::Whole => {}
            Restorable::FilesGone => {
                return Err(SnapshotError::Discarded {
                    id: target.id,
                    at,
                    by_retention: target.discarded_by_retention,
                })
            }
            Restorable::StateGone(state) => {
                return Err(SnapshotError::DiscardedStateGone {
                    id: target.id,
                    at,
                    by_retention: target.discarded_by_retention,
                    state,
                })
            }
        }
    }
    let mut scope = Vec::with_capacity(req.paths.len());
    for p in &req.paths {
        scope.push(ws.normalize(p)?);
    }
    let state = target.state.map(|h| blobs.get(&h)).transpose()?;
    if req.dry_run {
        // A dry run writes nothing, so it only says a rollback is unfinished.
        if let Some(w) = unfinished_rollback_warning(log, ws) {
            ws.warn(w);
        }
        let (cur, tracked_known) = workspace_tree(ws, blobs)?;
        if !tracked_known {
            ws.warn(format!(
                "{} is damaged: the tracked paths are unknown, so this dry run leaves out any that .gitignore ignores; the next checkpoint or `track` sets the file aside",
                ws.cache_path(crate::workspace::TRACKED_FILE).display()
            ));
        }
        let (tgt, same) = restore::load_target(blobs, &target.root, &cur)?;
        let (mut plan, kept) = rollback_plan(ws, (&cur, &tgt, &same), &scope, &target)?;
        // What the real run checks before changing anything.
        restore::precheck(ws, &plan)?;
        // The workspace's tree holds them; the rollback removes them
        // before its undo point is taken, so its plan never sees them.
        let temporaries = interrupted_temporaries(log, blobs, ws);
        if !temporaries.is_empty() {
            let gone: HashSet<&str> = temporaries.iter().map(String::as_str).collect();
            plan.delete.retain(|p| !gone.contains(p.as_str()));
        }
        return Ok(RollbackReport {
            workspace: ws.root().to_path_buf(),
            source: None,
            target: target.id,
            written: plan.write.iter().map(|w| w.path.clone()).collect(),
            deleted: plan.delete.clone(),
            created_dirs: plan.create_dirs.iter().map(|d| d.0.clone()).collect(),
            removed_dirs: plan.remove_dirs.clone(),
            dir_modes: plan.dir_modes.iter().map(|d| d.0.clone()).collect(),
            kept,
            state,
            state_hash: target.state,
            lsn: None,
            interrupted_temporaries: temporaries.len(),
        });
    }
    ws.check_writable("roll back")?;
    record_interrupted_rollback(log, blobs, ws)?;
    // This rollback's marker: written durably while the undo point is made
    // durable (when the plan changes anything), so it is there before
    // anything the user sees changes; removed when `marker` is dropped,
    // after the `rollback` record (see `crate::interrupted`).
    let head = log.head();
    let unfinished = UnfinishedRollback {
        target: target.id,
        session: session_or_default(&req.session),
        run: req.run.clone(),
        phase: req.phase.clone(),
        agent: req.agent.clone(),
        model: req.model.clone(),
        scope: scope.clone(),
        started: cairn_codec::Timestamp::now(),
        pid: std::process::id(),
        head_before: head.last_lsn,
        head_chain: head.chain,
    };
    let mut marker = MarkerGuard::new(ws);
    // While the undo point is made durable, the plan is computed from its
    // tree (only the parts of the two trees that differ are read), every
    // path the plan may touch is marked dirty (durably: a tracked-only
    // checkpoint after a crash must re-read them; marking more than ends up
    // touched, if applying fails half-way, only costs a few re-reads), and
    // the first files are written to temporaries, so the fsyncs overlap.
    // Nothing the user sees changes before the undo point is durable.
    let (made, planned) = create_inner_with(
        log,
        blobs,
        ws,
        CheckpointRequest {
            session: req.session.clone(),
            run: req.run.clone(),
            phase: req.phase.clone(),
            agent: req.agent.clone(),
            model: req.model.clone(),
            label: Some(undo_point_label(target.id)),
            state: req.state.take(),
            scan: ScanMode::Full,
        },
        |cap: &Capture| -> Result<(
            restore::Plan,
            restore::Prestaged,
            Vec<String>,
            Vec<restore::Kept>,
        )> {
            let (cur, tgt, same) = restore::diff_trees(blobs, &cap.root, &target.root)?;
            let (plan, kept) = rollback_plan(ws, (&cur, &tgt, &same), &scope, &target)?;
            // Before anything changes (the dry run checks the same).
            restore::precheck(ws, &plan)?;
            let planned: Vec<String> = plan
                .write
                .iter()
                .map(|w| w.path.clone())
                .chain(plan.delete.iter().cloned())
                .chain(plan.create_dirs.iter().map(|d| d.0.clone()))
                .chain(plan.remove_dirs.iter().cloned())
                .chain(plan.dir_modes.iter().map(|d| d.0.clone()))
                .collect();
            let (pre, marked) = std::thread::scope(|s| {
                let marking = s.spawn(|| ws.mark_dirty_pinned(&planned));
                let noting = s.spawn(|| {
                    if plan.is_empty() {
                        Ok(())
                    } else {
                        marker.write(&unfinished)
                    }
                });
                let pre = restore::prestage(ws, blobs, &plan);
                let joined = |h: std::thread::ScopedJoinHandle<'_, Result<()>>| {
                    h.join()
                        .unwrap_or_else(|_| Err(SnapshotError::Invalid("a thread panicked".into())))
                };
                let marked = joined(marking).and(joined(noting));
                (pre, marked)
            });
            let failed = match (pre, marked) {
                (Ok(pre), Ok(())) => return Ok((plan, pre, planned, kept)),
                (Ok(pre), Err(e)) => {
                    pre.discard();
                    e
                }
                (Err(e), _) => e,
            };
            ws.unpin_dirty(&planned);
            Err(failed)
        },
    );
    let (pre, undo_cap) = match made {
        Ok(x) => x,
        Err(e) => {
            if let Some(Ok((_, staged, pinned, _))) = planned {
                staged.discard();
                ws.unpin_dirty(&pinned);
            }
            return Err(e);
        }
    };
    let (plan, staged, pinned, kept) =
        planned.ok_or_else(|| SnapshotError::Invalid("internal: no plan".into()))??;
    // The pre-rollback checkpoint is done: later ones may clear the marks.
    ws.unpin_dirty(&pinned);
    let incomplete = |e| SnapshotError::RollbackIncomplete {
        source_checkpoint: pre.id,
        cause: Box::new(e),
    };
    let mut ev = rollback_event(&req.session, pre.id, target.id, &scope);
    ev.run = req.run;
    ev.phase = req.phase;
    ev.agent = req.agent;
    ev.model = req.model;
    let mut meta = serde_json::Map::new();
    if !kept.is_empty() {
        let listed = &kept[..kept.len().min(MAX_ROLLBACK_FILES_LISTED)];
        meta.insert(ROLLBACK_META_KEPT.into(), serde_json::json!(listed));
    }
    let (done, dirs) = match restore::apply_prestaged(ws, blobs, &plan, staged) {
        Ok(x) => x,
        Err(e) => {
            if record_incomplete(log, ev, meta, format!("stopped part way: {e}")).is_err() {
                // The next flow records it.
                marker.keep();
            }
            return Err(incomplete(e));
        }
    };
    #[cfg(test)]
    if STOP_ROLLBACK_UNDER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_deref()
        == Some(ws.root())
    {
        panic!("injected stop: the process dies before the rollback record");
    }
    // Each path once, in order: a file replaced by a directory (or the
    // other way round) is both deleted and written.
    let touched: Vec<String> = done
        .written
        .iter()
        .chain(&done.deleted)
        .chain(&done.created_dirs)
        .chain(&done.removed_dirs)
        .chain(&done.dir_modes)
        .cloned()
        .collect::<std::collections::BTreeSet<String>>()
        .into_iter()
        .collect();
    ev.files = touched
        .iter()
        .take(MAX_ROLLBACK_FILES_LISTED)
        .cloned()
        .collect();
    if touched.len() > MAX_ROLLBACK_FILES_LISTED {
        // Replay then takes the rollback's scope, except the paths it kept
        // (`cairn_query::replay::rollback_scope`), as the paths it set.
        meta.insert(
            ROLLBACK_META_FILES_TOTAL.into(),
            serde_json::json!(touched.len()),
        );
        meta.insert(ROLLBACK_META_SCOPE.into(), serde_json::json!(scope));
    }
    // The changed directories are synced before the record is appended, so
    // a record that says ok is never followed by a sync that failed (on
    // ext4 a directory's fsync takes a fraction of a millisecond, small
    // beside the undo point's).
    if let Err(e) = dirs.sync() {
        let why = format!("applied, but not made durable: {e}");
        if record_incomplete(log, ev, meta, why).is_err() {
            marker.keep();
        }
        return Err(incomplete(e));
    }
    if !meta.is_empty() {
        ev.meta = Some(cairn_codec::event::Meta(meta));
    }
    // Without its record, the marker stays for the next flow to record it.
    let lsn = log.append(&ev).inspect_err(|_| marker.keep())?;
    // The next checkpoint counts what changed since the tree this rollback
    // left. A cache: if it cannot be saved, that count is against the
    // undo point's tree instead.
    let mut last = undo_cap.last();
    last.rolled_back = Some(crate::workspace::RolledBack {
        target: target.root,
        scope,
        kept: kept.iter().map(|k| k.path.clone()).collect(),
    });
    let _ = ws.save_last(Some(&last));
    Ok(RollbackReport {
        workspace: ws.root().to_path_buf(),
        source: Some(pre.id),
        target: target.id,
        written: done.written,
        deleted: done.deleted,
        created_dirs: done.created_dirs,
        removed_dirs: done.removed_dirs,
        dir_modes: done.dir_modes,
        kept,
        state,
        state_hash: target.state,
        lsn: Some(lsn),
        interrupted_temporaries: 0,
    })
}

/// The workspace's tree as it is now, hashed and stored nowhere (unchanged
/// files by their stat data), for comparing with a checkpoint's; and
/// whether the tracked paths were known. A damaged tracked-path file is
/// read as empty: only tracked paths that are ignored are missed, which a
/// comparison that changes nothing can afford.
pub(crate) fn workspace_tree<B: crate::BlobRead + Sync + ?Sized>(
    ws: &Workspace,
    blobs: &B,
) -> Result<(manifest::Manifest, bool)> {
    let tracked = ws.load_track_for_capture()?.map(|t| t.tracked);
    let known = tracked.is_some();
    let tracked = tracked.unwrap_or_default();
    let cap = capture::capture_full(ws, &HashOnly(blobs), &tracked, &BTreeSet::new())?;
    Ok((cap.manifest().unwrap_or_default(), known))
}

/// The plan of a rollback to `target`, limited to `scope`, from the two
/// trees as [`restore::load_target`] or [`restore::diff_trees`] give them
/// (`cur` now, `tgt` the target's, `same` the directories alike in both),
/// leaving as they are the files no checkpoint can bring back (not
/// captured now, or not captured by `target`): with the paths it keeps.
/// What a dry run lists, a rollback applies, and an interrupted rollback's
/// recording compares.
pub(crate) fn rollback_plan(
    ws: &Workspace,
    (cur, tgt, same): (&manifest::Manifest, &manifest::Manifest, &HashSet<String>),
    scope: &[String],
    target: &CheckpointInfo,
) -> Result<(restore::Plan, Vec<restore::Kept>)> {
    let mut plan = restore::plan_pruned(cur, tgt, scope, same)?;
    let mut kept = restore::keep_uncaptured(ws, cur, &mut plan);
    // A name that is not UTF-8 is in no tree, so in no plan: its escaped
    // text must not keep a file whose path is spelt the same.
    let skipped: Vec<(String, String)> = target
        .not_captured
        .iter()
        .filter(|n| n.why != crate::scan::reason::NON_UTF8_NAME)
        .map(|n| (n.path.clone(), n.why.clone()))
        .collect();
    kept.extend(restore::keep_not_captured_at_target(
        &mut plan,
        &skipped,
        &target.id.to_string(),
    ));
    Ok((plan, kept))
}

/// The `rollback` record of a rollback from the undo point `source` to
/// `target`, limited to `scope` (empty: the whole workspace): both as
/// causal parents, the paths in its text. Its outcome (`ok`, `meta`) is
/// the caller's to add.
pub(crate) fn rollback_event(
    session: &str,
    source: CheckpointId,
    target: CheckpointId,
    scope: &[String],
) -> Event {
    let mut ev = Event::new(EventKind::Rollback, session_or_default(session));
    ev.source = Some(source);
    ev.target = Some(target);
    ev.parents = vec![source.0, target.0];
    ev.label = Some(format!("Rollback to {target}"));
    if !scope.is_empty() {
        ev.text = Some(format!("paths: {}", scope.join(", ")));
    }
    ev
}

/// Appends `ev` as a rollback that did not complete (`ok` false,
/// [`ROLLBACK_INCOMPLETE`], `why` after the paths it was limited to):
/// for a rollback that failed in process (whose error names the undo point
/// whether or not this record could be appended), and for one whose
/// process stopped part way (see [`record_interrupted_rollback`]).
pub(crate) fn record_incomplete<L: LogAccess + ?Sized>(
    log: &L,
    mut ev: Event,
    meta: serde_json::Map<String, serde_json::Value>,
    why: String,
) -> Result<Lsn> {
    ev.ok = false;
    ev.error_kind = Some(ROLLBACK_INCOMPLETE.into());
    ev.text = Some(match ev.text.take() {
        Some(t) => format!("{t}; {why}"),
        None => why,
    });
    if !meta.is_empty() {
        ev.meta = Some(cairn_codec::event::Meta(meta));
    }
    log.append(&ev)
}

/// Test hook: a rollback in the workspace at this root stops (panics, as
/// if the process died) once its files are written, before its record.
#[cfg(test)]
pub(crate) static STOP_ROLLBACK_UNDER: std::sync::Mutex<Option<std::path::PathBuf>> =
    std::sync::Mutex::new(None);

/// The label of a rollback's undo point, by which a rollback whose process
/// stopped part way finds it (see `crate::interrupted`).
pub(crate) fn undo_point_label(target: CheckpointId) -> String {
    format!("Before rollback to {target}")
}

/// What retention did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Checkpoints evicted now (each recorded by a `checkpoint.discard`).
    pub discarded: Vec<CheckpointId>,
    /// Checkpoints still retained.
    pub retained: usize,
    /// Blobs kept live.
    pub live_blobs: usize,
    /// What the blob collection removed.
    pub gc: GcSummary,
    /// Retained checkpoints (or rollback targets) whose tree could not be
    /// read whole, each with why. A tree whose root (or a node) is no
    /// manifest node at all names no other blob, so blobs are still
    /// collected; for any other failure what the tree names is unknown,
    /// and no blob is collected this time (see [`RetentionReport::collected`]).
    pub damaged: Vec<(CheckpointId, String)>,
    /// False when blob collection was skipped, because a tree it must keep
    /// could not be read (listed in [`RetentionReport::damaged`]).
    pub collected: bool,
    /// How the size budget stands after the evictions (with `max_bytes`
    /// only): see [`BudgetOutcome::met`].
    pub budget: Option<BudgetOutcome>,
    /// Checkpoints discarded before this run (by a recorded
    /// `checkpoint.discard`, or by a gc that stopped before collecting)
    /// whose tree this run collected.
    pub collected_discarded: Vec<CollectedDiscard>,
}

impl RetentionReport {
    /// With a `max_bytes` policy, how many bytes the blob store still takes
    /// on disk over the budget once collected (after rewriting what it
    /// could: what is left is referenced, or in packs kept as damaged).
    /// `None` without a budget, within it, or when nothing was collected.
    pub fn stored_over_budget(&self) -> Option<u64> {
        let max = self.budget.as_ref()?.max_bytes;
        (self.collected && self.gc.stored_bytes > max).then(|| self.gc.stored_bytes - max)
    }
}

/// A checkpoint discarded earlier whose contents a gc collected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectedDiscard {
    /// The checkpoint.
    pub id: CheckpointId,
    /// The LSN of the `checkpoint.discard` record.
    pub discarded_at: Lsn,
    /// True if retention wrote that record, false if it was recorded.
    pub by_retention: bool,
}

/// Applies a retention policy: chooses the checkpoints to evict (see
/// [`retention::choose`]), appends one `checkpoint.discard` per eviction,
/// then collects every blob not reachable from a retained checkpoint, from
/// the target of a rollback after the oldest retained one (the tree from
/// that rollback on, the head's included), or named by a record (`before`,
/// `after`, `diff`, `state`), and the application state of every rollback
/// target whose whole tree is kept.
/// Without a policy nothing is evicted; unreferenced blobs are still
/// collected. The store may leave some of them in place where reclaiming
/// them costs more than it frees (counted in [`GcSummary::left`]), except
/// under a `max_bytes` budget its bytes on disk would not fit otherwise
/// (see [`RetentionReport::stored_over_budget`]); [`apply_retention_with`]
/// with `compact` removes every one.
pub fn apply_retention<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    policy: &RetentionPolicy,
) -> Result<RetentionReport> {
    apply_retention_with(log, blobs, ws, policy, false)
}

/// [`apply_retention`], choosing how hard the blob collection works: with
/// `compact`, every unreferenced blob is removed now (every pack holding
/// one is rewritten), so the contents of a discarded checkpoint that
/// nothing else names can no longer be read; otherwise the store reclaims
/// only where it pays, or where a `max_bytes` budget needs it.
pub fn apply_retention_with<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    policy: &RetentionPolicy,
    compact: bool,
) -> Result<RetentionReport> {
    apply_retention_keeping(log, blobs, ws, policy, compact, &HashSet::new())
}

/// [`apply_retention_with`], also keeping `keep`: blobs put for records not
/// appended yet (the caller makes sure no blob is put meanwhile).
pub fn apply_retention_keeping<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    policy: &RetentionPolicy,
    compact: bool,
    keep: &HashSet<BlobHash>,
) -> Result<RetentionReport> {
    ws.check_writable("apply a retention policy")?;
    let _flow = ws.flow();
    record_interrupted_rollback(log, blobs, ws)?;
    let listed = list_checkpoints(log, ws, None)?;
    let all: Vec<CheckpointInfo> = listed.iter().filter(|c| !c.discarded).cloned().collect();
    let mut evict: Vec<CheckpointId> = Vec::new();
    let mut budget = None;
    if !policy.is_empty() {
        let mut cands = Vec::with_capacity(all.len());
        for c in &all {
            let mut bl = Vec::new();
            if policy.max_bytes.is_some() {
                // A tree that cannot be listed counts as holding nothing:
                // the sizes only choose what to evict, never what to
                // collect (it is reported below if it is kept).
                if let Ok(m) = manifest::list(blobs, &c.root) {
                    bl = m.files().map(|(_, e)| (e.hash, e.size)).collect();
                }
            }
            cands.push(Candidate {
                id: c.id,
                session: c.session.clone(),
                blobs: bl,
            });
        }
        let pinned = if policy.max_bytes.is_some() {
            pinned_blobs(log, blobs, &listed, keep)?
        } else {
            HashSet::new()
        };
        let choice = retention::decide(&cands, &pinned, policy);
        evict = choice.evict;
        budget = choice.budget;
        let events: Vec<Event> = evict
            .iter()
            .filter_map(|id| all.iter().find(|c| c.id == *id))
            .map(|c| {
                let mut e = Event::new(EventKind::CheckpointDiscard, c.session.clone());
                e.checkpoint = Some(c.id);
                e.parents = vec![c.lsn];
                e.text = Some(policy.describe());
                e
            })
            .collect();
        log.append_batch(&events)?;
    }
    let evicted: HashSet<CheckpointId> = evict.iter().copied().collect();
    let retained: Vec<&CheckpointInfo> = all.iter().filter(|c| !evicted.contains(&c.id)).collect();
    let mut live: HashSet<BlobHash> = keep.clone();
    let mut seen = HashSet::new();
    // One damaged tree must not stop retention for good (the newest
    // checkpoint of a session is always retained): it is reported, and
    // when what it names cannot be known, nothing is collected.
    let mut damaged: Vec<(CheckpointId, String)> = Vec::new();
    let mut collect = true;
    let mut keep_tree = |id: CheckpointId, root: &BlobHash, live: &mut HashSet<BlobHash>| {
        let mut not_nodes = Vec::new();
        match manifest::reachable_past_non_nodes(blobs, root, live, &mut seen, &mut not_nodes) {
            Ok(()) => {
                for n in not_nodes {
                    damaged.push((id, format!("blob {n} in its tree is not a manifest node")));
                }
            }
            Err(e) => {
                collect = false;
                damaged.push((id, e.to_string()));
            }
        }
    };
    for c in &retained {
        keep_tree(c.id, &c.root, &mut live);
    }
    let every = list_checkpoints(log, ws, None)?;
    let dead: HashSet<Lsn> = every
        .iter()
        .filter(|c| c.discarded)
        .map(|c| c.lsn)
        .collect();
    // The tree after a rollback is its target's manifest: the states from
    // the rollback on (the head's among them) need it even when the target
    // is evicted. Rollbacks before the oldest retained checkpoint serve only
    // states retention gives up (every later state starts from a retained
    // checkpoint or a later rollback).
    let root_of: HashMap<CheckpointId, BlobHash> = every.iter().map(|c| (c.id, c.root)).collect();
    let oldest_retained = retained.iter().map(|c| c.lsn).min();
    let mut restored: Vec<(CheckpointId, BlobHash)> = Vec::new();
    let mut targets: HashSet<CheckpointId> = HashSet::new();
    log.for_each_from(Lsn::FIRST, &mut |r| {
        if !(r.event.kind == EventKind::CheckpointCreate && dead.contains(&r.lsn)) {
            live.extend(blobs_named(&r.event));
        }
        if r.event.kind == EventKind::Rollback && r.event.ok {
            targets.extend(r.event.target);
            if oldest_retained.is_none_or(|o| r.lsn > o) {
                restored.extend(
                    r.event
                        .target
                        .and_then(|t| root_of.get(&t).map(|root| (t, *root))),
                );
            }
        }
        Ok(())
    })?;
    for (id, root) in &restored {
        // A manifest an older gc already collected has nothing left to keep.
        if blobs.contains(root)? {
            keep_tree(*id, root, &mut live);
        }
    }
    // A rollback target whose whole tree stays (kept by the rule above, or
    // the tree of a checkpoint retained) can still be rolled back to, and
    // that hands back its application state: the state stays with the tree
    // (its `checkpoint.create` no longer keeps it once discarded). `live`
    // holds whole trees only: a root is in it with everything below it.
    for c in every.iter().filter(|c| targets.contains(&c.id)) {
        if let Some(state) = c.state {
            if live.contains(&c.root) && blobs.contains(&state)? {
                live.insert(state);
            }
        }
    }
    damaged.sort();
    damaged.dedup();
    if !collect {
        // Nothing collected, so no cache can name a collected blob.
        return Ok(RetentionReport {
            discarded: evict,
            retained: retained.len(),
            live_blobs: live.len(),
            gc: GcSummary::default(),
            damaged,
            collected: false,
            budget,
            collected_discarded: Vec::new(),
        });
    }
    // Checkpoints discarded before this gc (by a recorded event, or by a gc
    // that stopped before collecting) whose tree is still here: if this gc
    // collects it, the report names them.
    let mut earlier: Vec<&CheckpointInfo> = Vec::new();
    for c in every
        .iter()
        .filter(|c| c.discarded && !evicted.contains(&c.id))
    {
        if !live.contains(&c.root) && blobs.contains(&c.root)? {
            earlier.push(c);
        }
    }
    let gc = blobs.gc(
        &live,
        GcMode {
            compact,
            max_stored_bytes: policy.max_bytes,
        },
    )?;
    let mut collected_discarded = Vec::new();
    for c in earlier {
        if !blobs.contains(&c.root)? {
            collected_discarded.push(CollectedDiscard {
                id: c.id,
                discarded_at: c.discarded_at.unwrap_or(c.lsn),
                by_retention: c.discarded_by_retention,
            });
        }
    }
    // Caches must never name a collected blob; durable, so a crash cannot bring one back.
    let mut cache = (*StatCache::load(ws)).clone();
    cache.retain_live(&live);
    if let Err(e) = std::sync::Arc::new(cache).save(ws, true) {
        // On a full disk (the case gc must get a store out of) the cache
        // cannot be written again: removed instead, which needs no space,
        // the next checkpoint reads every file rather than trust it.
        let p = ws.cache_path(crate::workspace::STAT_CACHE_FILE);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(re) if re.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return Err(e),
        }
        *ws.stat_cache_slot().lock() = None;
    }
    if ws.load_last().is_some_and(|l| !live.contains(&l.root)) {
        ws.save_last(None)?;
    }
    Ok(RetentionReport {
        discarded: evict,
        retained: retained.len(),
        live_blobs: live.len(),
        gc,
        damaged,
        collected: true,
        budget,
        collected_discarded,
    })
}

/// The blobs a record names besides a checkpoint's tree (`before`,
/// `after`, `diff`, `state`): gc keeps them while the record is kept.
fn blobs_named(e: &Event) -> impl Iterator<Item = BlobHash> {
    [e.before, e.after, e.diff, e.state].into_iter().flatten()
}

/// The blobs gc keeps whatever retention evicts, as far as the choice of
/// evictions needs them: those records name (`before`, `after`, `diff`,
/// and `state` outside checkpoint records), `keep`, and the trees of
/// rollbacks after the oldest checkpoint not discarded, with their
/// application state (the tree from such a rollback on is its target's,
/// so gc keeps it). Evicting a checkpoint
/// frees none of them.
fn pinned_blobs<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    listed: &[CheckpointInfo],
    keep: &HashSet<BlobHash>,
) -> Result<HashSet<BlobHash>> {
    let mut pinned = keep.clone();
    let oldest = listed.iter().filter(|c| !c.discarded).map(|c| c.lsn).min();
    let mut targets: HashSet<CheckpointId> = HashSet::new();
    log.for_each_from(Lsn::FIRST, &mut |r| {
        if r.event.kind != EventKind::CheckpointCreate {
            pinned.extend(blobs_named(&r.event));
        }
        if r.event.kind == EventKind::Rollback && r.event.ok && oldest.is_none_or(|o| r.lsn > o) {
            targets.extend(r.event.target);
        }
        Ok(())
    })?;
    if targets.is_empty() {
        return Ok(pinned);
    }
    for c in listed.iter().filter(|c| targets.contains(&c.id)) {
        if let Ok(m) = manifest::list(blobs, &c.root) {
            pinned.extend(m.files().map(|(_, e)| e.hash));
            pinned.extend(c.state);
        }
    }
    Ok(pinned)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::workspace::FAIL_DIR_SYNC_UNDER;
    use crate::SnapshotOptions;
    use cairn_engine::blob::{BlobOptions, BlobStore};
    use cairn_engine::log::{Log, LogOptions};
    use cairn_engine::{RealVfs, Vfs};
    use std::sync::Arc;

    /// A directory fsync that fails once the rollback's files are in place
    /// (a failing disk) is recorded as an incomplete rollback, never as
    /// one that succeeded, and the error names the undo point.
    #[test]
    fn a_directory_sync_that_fails_is_never_recorded_as_ok() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let store = root.join(".cairn");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(store.join("blobs")).unwrap();
        let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
        let log = Log::open(vfs.clone(), &store.join("log"), LogOptions::default()).unwrap();
        let blobs = BlobStore::open(vfs, &store.join("blobs"), BlobOptions::default()).unwrap();
        let ws =
            Workspace::open(&root, &store.join("snapshot"), SnapshotOptions::default()).unwrap();
        std::fs::write(root.join("sub/a.txt"), "one").unwrap();
        let c1 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        std::fs::write(root.join("sub/a.txt"), "two").unwrap();
        std::fs::write(root.join("sub/new.txt"), "new").unwrap();
        let sub = ws.root().join("sub");
        *FAIL_DIR_SYNC_UNDER.lock().unwrap() = Some(sub.clone());
        let got = rollback(&log, &blobs, &ws, RollbackRequest::new(c1.id));
        *FAIL_DIR_SYNC_UNDER.lock().unwrap() = None;
        let err = got.unwrap_err();
        let SnapshotError::RollbackIncomplete {
            source_checkpoint, ..
        } = &err
        else {
            panic!("not an incomplete rollback: {err}");
        };
        assert!(err.to_string().contains("injected I/O error"), "{err}");
        let head = LogAccess::head(&log);
        let rec = LogAccess::read(&log, head.last_lsn).unwrap().event;
        assert_eq!(rec.kind, EventKind::Rollback);
        assert!(!rec.ok, "the record says the rollback failed");
        assert_eq!(rec.error_kind.as_deref(), Some(ROLLBACK_INCOMPLETE));
        assert_eq!(rec.source, Some(*source_checkpoint));
        assert_eq!(rec.target, Some(c1.id));
        assert!(rec.text.unwrap().contains("not made durable"));
        assert_eq!(rec.files, vec!["sub/a.txt", "sub/new.txt"]);
        // No other rollback record: the failed sync was not preceded by
        // one that said ok.
        let mut rollbacks = 0;
        LogAccess::for_each_from(&log, Lsn(1), &mut |r| {
            rollbacks += usize::from(r.event.kind == EventKind::Rollback);
            Ok(())
        })
        .unwrap();
        assert_eq!(rollbacks, 1);
    }

    /// Every file under `root` but `.cairn`, with its contents.
    fn files(root: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
        let mut out = std::collections::BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                if rel == ".cairn" {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    /// A rollback whose process dies once its files are written, before
    /// its record (a panic here), leaves its marker; the next checkpoint
    /// records it as a rollback that stopped part way, naming the undo
    /// point, before its own record, and removes the marker; the undo point
    /// brings back the tree from before.
    #[test]
    fn a_rollback_stopped_before_its_record_is_recorded_by_the_next_checkpoint() {
        use crate::interrupted::{rollback_marker, ROLLBACK_META_INTERRUPTED};
        let (_dir, ws, log, blobs, c1, before, undo) = stop_a_rollback();
        let req = RollbackRequest::new;
        let next = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        assert_eq!(next.lsn, Lsn(undo.0 + 2), "one record between");
        let rec = LogAccess::read(&log, Lsn(undo.0 + 1)).unwrap().event;
        assert_eq!(rec.kind, EventKind::Rollback);
        assert!(!rec.ok);
        assert_eq!(rec.error_kind.as_deref(), Some(ROLLBACK_INCOMPLETE));
        assert_eq!(rec.source, Some(CheckpointId(undo)));
        assert_eq!(rec.target, Some(c1.id));
        assert_eq!(rec.parents, vec![undo, c1.lsn]);
        let text = rec.text.unwrap();
        assert!(text.contains("the process stopped part way"), "{text}");
        // It had written every file: the record says so.
        assert!(
            text.contains("it had restored every file: the workspace is as at c1"),
            "{text}"
        );
        let meta = rec.meta.unwrap();
        assert_eq!(
            meta.0[ROLLBACK_META_INTERRUPTED]["pid"],
            serde_json::json!(std::process::id())
        );
        assert_eq!(
            meta.0[ROLLBACK_META_INTERRUPTED]["workspace"],
            serde_json::json!("restored")
        );
        assert!(rollback_marker(&ws).is_none(), "the marker is still there");
        let warned = ws.take_warnings().join("\n");
        assert!(warned.contains("was interrupted"), "{warned}");
        assert!(
            warned.contains(&format!("`cairn rollback c{undo}` undoes it")),
            "{warned}"
        );
        // Recorded once: the next checkpoint adds only itself.
        let again = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        assert_eq!(again.lsn, next.lsn.next());
        // The undo point restores the tree from before the rollback.
        rollback(&log, &blobs, &ws, req(CheckpointId(undo))).unwrap();
        assert_eq!(files(ws.root()), before);
        assert!(
            rollback_marker(&ws).is_none(),
            "a finished rollback left its marker"
        );
    }

    /// Trial 14 T6: a dry run after a rollback interrupted part way
    /// leaves the temporaries it left (`.cairn-restore-<pid>-<n>.tmp`) out
    /// of its plan, and counts them instead: the rollback removes them
    /// first, and its plan is the dry run's. A file that only looks like
    /// one (another process's, a directory) is the user's, as before.
    #[test]
    fn a_dry_run_counts_an_interrupted_rollback_s_temporaries_not_as_deletions() {
        let (_dir, ws, log, blobs, c1, _before, _undo) = stop_a_rollback();
        let pid = std::process::id();
        let root = ws.root().to_path_buf();
        // Where that rollback wrote files: the root and `sub`.
        for t in [
            format!(".cairn-restore-{pid}-0.tmp"),
            format!(".cairn-restore-{pid}-17.tmp"),
            format!("sub/.cairn-restore-{pid}-3.tmp"),
        ] {
            std::fs::write(root.join(t), "staged").unwrap();
        }
        let other = format!(".cairn-restore-{}-1.tmp", pid + 1);
        std::fs::write(root.join(&other), "not that rollback's").unwrap();
        std::fs::create_dir(root.join(format!("sub/.cairn-restore-{pid}-9.tmp"))).unwrap();
        std::fs::write(root.join("new.txt"), "created since").unwrap();
        let dry_run = || {
            let req = RollbackRequest {
                dry_run: true,
                ..RollbackRequest::new(c1.id)
            };
            rollback(&log, &blobs, &ws, req).unwrap()
        };
        let dry = dry_run();
        assert_eq!(dry.interrupted_temporaries, 3, "{dry:?}");
        assert_eq!(dry.deleted, [other.clone(), "new.txt".to_string()]);
        assert_eq!(
            dry.removed_dirs,
            [format!("sub/.cairn-restore-{pid}-9.tmp")]
        );
        // The dry run changed nothing, and says the rollback is unfinished.
        assert!(root.join(format!(".cairn-restore-{pid}-0.tmp")).exists());
        assert!(crate::interrupted::rollback_marker(&ws).is_some());
        // The rollback removes them first: its plan is the dry run's.
        let done = rollback(&log, &blobs, &ws, RollbackRequest::new(c1.id)).unwrap();
        assert_eq!(done.interrupted_temporaries, 0);
        assert_eq!(done.deleted, dry.deleted);
        assert_eq!(done.removed_dirs, dry.removed_dirs);
        assert!(!root.join(format!(".cairn-restore-{pid}-0.tmp")).exists());
        assert!(!root
            .join(format!("sub/.cairn-restore-{pid}-3.tmp"))
            .exists());
        let warned = ws.take_warnings().join("\n");
        assert!(
            warned.contains("removed the 3 temporary files it left"),
            "{warned}"
        );
        // With nothing interrupted, a dry run counts none.
        assert_eq!(dry_run().interrupted_temporaries, 0);
    }

    /// Trial 13 N6: the record written for a rollback whose process
    /// stopped part way carries the run, phase, agent and model the
    /// rollback had (from its marker), as its undo point does.
    #[test]
    fn an_interrupted_rollback_s_record_carries_its_run_phase_agent_and_model() {
        let (_dir, ws, log, blobs, _c1, _before, undo) = stop_a_rollback();
        create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        let stamp = |lsn| {
            let e = LogAccess::read(&log, lsn).unwrap().event;
            (e.kind, e.run, e.phase, e.agent, e.model)
        };
        let want = |kind| {
            (
                kind,
                Some("run-1".to_string()),
                Some("edit".to_string()),
                Some("coder".to_string()),
                Some("model-x".to_string()),
            )
        };
        assert_eq!(stamp(undo), want(EventKind::CheckpointCreate));
        assert_eq!(stamp(Lsn(undo.0 + 1)), want(EventKind::Rollback));
    }

    /// What the record of an interrupted rollback says of the workspace is
    /// what the workspace holds: here, as if the rollback had stopped
    /// before changing any file (its changes undone by hand), and part way
    /// (one of its files undone).
    #[test]
    fn an_interrupted_rollback_s_record_says_how_far_it_got() {
        use crate::interrupted::ROLLBACK_META_INTERRUPTED;
        for (undo_by_hand, word, says) in [
            (
                &["a.txt", "sub/b.txt", "c.txt"][..],
                "unchanged",
                "it stopped before it changed any file: the workspace is as at c",
            ),
            (&["a.txt"][..], "mixed", "the workspace holds a mix of c"),
        ] {
            let (_dir, ws, log, blobs, _c1, before, undo) = stop_a_rollback();
            for p in undo_by_hand {
                let path = ws.root().join(p);
                match before.get(*p) {
                    Some(bytes) => std::fs::write(&path, bytes).unwrap(),
                    None => std::fs::remove_file(&path).unwrap(),
                }
            }
            create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
            let rec = LogAccess::read(&log, Lsn(undo.0 + 1)).unwrap().event;
            assert_eq!(rec.kind, EventKind::Rollback);
            let text = rec.text.unwrap();
            assert!(text.contains(says), "{word}: {text}");
            assert_eq!(
                rec.meta.unwrap().0[ROLLBACK_META_INTERRUPTED]["workspace"],
                serde_json::json!(word)
            );
            let warned = ws.take_warnings().join("\n");
            assert!(warned.contains(says), "{word}: {warned}");
        }
    }

    /// A workspace whose rollback to `c1` was stopped (a panic, as if the
    /// process died) once its files were written, before its record:
    /// the temporary directory, workspace, log, blobs, `c1`, the files
    /// before the rollback, and the undo point's LSN.
    #[allow(clippy::type_complexity)]
    fn stop_a_rollback() -> (
        tempfile::TempDir,
        Workspace,
        MemLog,
        crate::MemBlobs,
        CheckpointInfo,
        std::collections::BTreeMap<String, Vec<u8>>,
        Lsn,
    ) {
        use crate::interrupted::{rollback_marker, RollbackMarker};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        let ws = Workspace::open(
            &root,
            &root.join(".cairn/snapshot"),
            SnapshotOptions::default(),
        )
        .unwrap();
        let (log, blobs) = (MemLog::new(), crate::MemBlobs::new());
        std::fs::write(root.join("a.txt"), "one").unwrap();
        std::fs::write(root.join("sub/b.txt"), "one").unwrap();
        let c1 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        std::fs::write(root.join("a.txt"), "two").unwrap();
        std::fs::remove_file(root.join("sub/b.txt")).unwrap();
        std::fs::write(root.join("c.txt"), "new").unwrap();
        let before = files(ws.root());
        let req = |target| RollbackRequest {
            run: Some("run-1".into()),
            phase: Some("edit".into()),
            agent: Some("coder".into()),
            model: Some("model-x".into()),
            ..RollbackRequest::new(target)
        };

        // The hook is one for the process: tests that stop a rollback
        // take turns.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        *STOP_ROLLBACK_UNDER.lock().unwrap() = Some(ws.root().to_path_buf());
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rollback(&log, &blobs, &ws, req(c1.id))
        }));
        *STOP_ROLLBACK_UNDER.lock().unwrap() = None;
        drop(turn);
        assert!(got.is_err(), "the rollback was not stopped");
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "one");
        let Some(RollbackMarker::Unfinished(m)) = rollback_marker(&ws) else {
            panic!("no marker: {:?}", rollback_marker(&ws));
        };
        assert_eq!((m.target, m.pid), (c1.id, std::process::id()));
        // The log ends with the undo point: nothing else says what happened.
        let undo = LogAccess::read(&log, LogAccess::head(&log).last_lsn).unwrap();
        assert_eq!(undo.event.kind, EventKind::CheckpointCreate);
        assert_eq!(undo.event.label.as_deref(), Some("Before rollback to c1"));
        (dir, ws, log, blobs, c1, before, undo.lsn)
    }
}
