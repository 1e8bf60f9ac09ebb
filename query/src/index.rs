//! Indexes: folds over the log kept up to date on append, persisted under
//! `.cairn/index/`, rebuilt from the log when missing or stale.
//!
//! The [`Index`] holds, as sorted LSN lists: records by session, run, kind
//! and path (`path`, `to_path` and `files`), records by time, checkpoints
//! by session, the tree resets (checkpoints and rollbacks, with the manifest
//! root each one restores) and the branch graph of checkpoints and
//! rollbacks (and of the points of imported conversations: checkpoint
//! records without a manifest that name `parents`). The facade calls
//! [`Index::observe`] after each append (or [`Index::catch_up`] to the
//! head); [`Index::open`] loads the persisted file and reads only the
//! records appended since it was written.
//!
//! # File format (`.cairn/index/query.idx`)
//! `magic "CAIRNQIX"` (8 bytes), format version (u32 LE), body length (u64
//! LE), blake3 of the body (32 bytes), then the body: the index as
//! MessagePack. The body records the last LSN it covers and that record's
//! chain value: if the log no longer has that record with that chain value
//! (the log was replaced or truncated), the index is stale and rebuilt.

pub mod cold;
pub mod seg;
pub mod summary;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use cairn_codec::{BlobHash, ChainHash, CheckpointId, Event, EventKind, EventRef, Lsn, Timestamp};
use cairn_engine::atomic::{unique_tmp_name, write_atomic_via, AtomicOptions};
use cairn_engine::{OpenMode, Vfs};

use crate::error::{QueryError, Result};
use crate::source::{Record, RecordSource};

/// The index file's name inside `.cairn/index/`.
pub const INDEX_FILE: &str = "query.idx";
const MAGIC: &[u8; 8] = b"CAIRNQIX";
/// Bumped whenever the body's layout or what it holds changes; an index of
/// another version is simply rebuilt from the log. 2: checkpoint records
/// without a manifest are no longer indexed as checkpoints. 3: a reset's
/// scope is a `RollbackScope` (a rollback whose list of paths was cut
/// keeps its own scope and its kept paths). 4: a directory a rollback
/// lists with files under it no longer stands for all of it
/// (`replay::rollback_scope`). 5: a checkpoint record without a manifest
/// that names `parents` (a point of an imported conversation) is a node of
/// the branch graph, and every node says whether it has a tree.
pub const INDEX_VERSION: u32 = 5;
const HEADER_LEN: usize = 8 + 4 + 8 + 32;
/// The largest index body cairn will load. The index of 1,000,000 events is
/// tens of MB; this bounds the allocation a damaged length could cause.
pub const MAX_INDEX_BYTES: u64 = 4 << 30;

/// What the index knows about one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// The checkpoint's id (the LSN of its record).
    pub id: CheckpointId,
    /// Its session.
    pub session: String,
    /// Its run, if any.
    pub run: Option<String>,
    /// Its label, if any.
    pub label: Option<String>,
    /// When it was taken.
    pub ts: Timestamp,
    /// Its manifest root.
    pub root: Option<BlobHash>,
    /// The `checkpoint.discard` record that evicted it, if any.
    pub discarded_at: Option<Lsn>,
}

/// A record that resets the tree: a checkpoint (its manifest) or a rollback
/// (the target's manifest, optionally only for some paths).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reset {
    /// The record's LSN.
    pub lsn: Lsn,
    /// The manifest root the tree takes.
    pub root: BlobHash,
    /// The paths it sets (see
    /// [`rollback_scope`](crate::replay::rollback_scope)); every path for a
    /// checkpoint.
    pub scope: crate::replay::RollbackScope,
}

/// A node of the branch graph: a checkpoint or a rollback.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The record's LSN.
    pub lsn: Lsn,
    /// `checkpoint.create` or `rollback`.
    pub kind: EventKind,
    /// Its session.
    pub session: String,
    /// What it continues from: for a checkpoint, the last checkpoint or
    /// rollback of its session (or the newest checkpoint its `parents`
    /// name); for a rollback, its target.
    pub parent: Option<Lsn>,
    /// Nodes that continue from it, in LSN order.
    pub children: Vec<Lsn>,
    /// Checkpoint label.
    pub label: Option<String>,
    /// Time of the record.
    pub ts: Timestamp,
    /// True for a rollback, and for a checkpoint with a manifest; false for
    /// a point of an imported conversation (a checkpoint record without a
    /// manifest that names `parents`): a point the history forked at,
    /// with no tree to show or restore.
    pub tree: bool,
}

/// The query indexes (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Index {
    covered: Lsn,
    chain: ChainHash,
    by_session: HashMap<String, Vec<Lsn>>,
    by_run: HashMap<String, Vec<Lsn>>,
    by_kind: BTreeMap<EventKind, Vec<Lsn>>,
    by_path: HashMap<String, Vec<Lsn>>,
    /// (ts, lsn), sorted.
    by_time: Vec<(Timestamp, Lsn)>,
    /// `ts_high[i]` = the latest time among records `1..=i+1`: nondecreasing,
    /// so a time resolves to an LSN by binary search.
    ts_high: Vec<Timestamp>,
    checkpoints: BTreeMap<Lsn, CheckpointInfo>,
    checkpoints_by_session: HashMap<String, Vec<Lsn>>,
    /// Ok rollbacks with a known target, by session: (rollback LSN, target).
    rollbacks_by_session: HashMap<String, Vec<(Lsn, CheckpointId)>>,
    resets: Vec<Reset>,
    nodes: BTreeMap<Lsn, Node>,
    session_node: HashMap<String, Lsn>,
}

/// How [`Index::open`] obtained the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenOutcome {
    /// Loaded from disk; this many records appended since were folded in.
    Loaded {
        /// Records read from the log to catch up.
        caught_up: u64,
    },
    /// Rebuilt from the whole log, for this reason.
    Rebuilt {
        /// Why (missing, damaged, stale).
        reason: String,
    },
}

fn push_sorted(v: &mut Vec<Lsn>, lsn: Lsn) {
    if v.last().is_none_or(|l| *l < lsn) {
        v.push(lsn);
    }
}

/// Adds `lsn` to `key`'s list, allocating the key only when it is new.
fn add(m: &mut HashMap<String, Vec<Lsn>>, key: &str, lsn: Lsn) {
    match m.get_mut(key) {
        Some(v) => push_sorted(v, lsn),
        None => {
            m.insert(key.to_string(), vec![lsn]);
        }
    }
}

impl Index {
    /// An empty index (covers nothing).
    pub fn new() -> Index {
        Index::default()
    }

    /// Builds the index by folding the whole of `src`.
    pub fn build(src: &dyn RecordSource) -> Result<Index> {
        let mut ix = Index::new();
        ix.catch_up(src)?;
        ix.shrink_to_fit();
        Ok(ix)
    }

    /// Releases the spare capacity of every list (after a build: growth by
    /// doubling can leave up to half of each list unused).
    pub fn shrink_to_fit(&mut self) {
        for m in [
            &mut self.by_session,
            &mut self.by_run,
            &mut self.by_path,
            &mut self.checkpoints_by_session,
        ] {
            m.values_mut().for_each(Vec::shrink_to_fit);
        }
        self.by_kind.values_mut().for_each(Vec::shrink_to_fit);
        self.by_time.shrink_to_fit();
        self.ts_high.shrink_to_fit();
        self.resets.shrink_to_fit();
    }

    /// The last LSN folded in.
    pub fn covered(&self) -> Lsn {
        self.covered
    }

    /// Folds in the records of `src` after [`Index::covered`]; returns how many.
    ///
    /// Damage that a reader found at the end of the log (intact records
    /// after a frame that is not, in the segment being written) ends the
    /// fold there: the records before it are folded, so queries about them
    /// still work, and reading past them reports the damage. Damage before
    /// the head is an error.
    pub fn catch_up(&mut self, src: &dyn RecordSource) -> Result<u64> {
        let mut n = 0;
        let r = src.for_each_ref(self.covered.next(), &mut |lsn, chain, e| {
            self.observe_ref(lsn, chain, e)?;
            n += 1;
            Ok(true)
        });
        match r {
            Err(QueryError::Engine(e))
                if e.is_corruption() && src.head().is_ok_and(|h| h.last_lsn == self.covered) =>
            {
                Ok(n)
            }
            r => r.map(|()| n),
        }
    }

    /// Folds in one record, which must be the next one (`covered + 1`).
    pub fn observe(&mut self, r: &Record) -> Result<()> {
        self.observe_ref(r.lsn, r.chain, &EventRef::of(&r.event))
    }

    /// Folds in one record given as a borrowed event (see [`Index::observe`]).
    pub fn observe_ref(&mut self, lsn: Lsn, chain: ChainHash, e: &EventRef<'_>) -> Result<()> {
        if lsn != self.covered.next() {
            return Err(QueryError::Invalid(format!(
                "index covers up to LSN {}, cannot fold in LSN {} (records must come in order)",
                self.covered, lsn
            )));
        }
        // The rare records that shape the checkpoint graph are folded from
        // the owned event (which also checks their `meta`), made before
        // anything changes so that an error leaves the index as it was.
        let structural = match e.kind {
            EventKind::CheckpointDiscard | EventKind::CheckpointCreate | EventKind::Rollback => {
                Some(e.to_event().map_err(|err| {
                    QueryError::Invalid(format!("the record at LSN {lsn} does not decode: {err}"))
                })?)
            }
            _ => None,
        };
        self.covered = lsn;
        self.chain = chain;
        add(&mut self.by_session, e.session, lsn);
        if let Some(run) = e.run {
            add(&mut self.by_run, run, lsn);
        }
        push_sorted(self.by_kind.entry(e.kind).or_default(), lsn);
        if let Some(p) = e.path {
            add(&mut self.by_path, p, lsn);
        }
        if let Some(p) = e.to_path {
            add(&mut self.by_path, p, lsn);
        }
        for p in &e.files {
            add(&mut self.by_path, p, lsn);
        }
        let key = (e.ts, lsn);
        if self.by_time.last().is_none_or(|l| *l < key) {
            self.by_time.push(key);
        } else {
            let at = self.by_time.partition_point(|x| *x < key);
            self.by_time.insert(at, key);
        }
        let high = self.ts_high.last().map_or(e.ts, |h| (*h).max(e.ts));
        self.ts_high.push(high);
        if let Some(owned) = structural {
            self.observe_structure(lsn, &owned);
        }
        Ok(())
    }

    fn observe_structure(&mut self, lsn: Lsn, e: &Event) {
        match e.kind {
            EventKind::CheckpointDiscard => {
                if let Some(c) = e.checkpoint.and_then(|c| self.checkpoints.get_mut(&c.0)) {
                    c.discarded_at.get_or_insert(lsn);
                }
                return;
            }
            EventKind::CheckpointCreate if e.ok && e.root.is_some() => {}
            // A checkpoint record without a manifest is no checkpoint of
            // this store: no tree to show or restore. One naming what it
            // continues from (`parents`: a point of a conversation an
            // importer recorded, as the Claude Code importer records one
            // before each prompt) is a point of the branch graph, so a
            // rewound conversation shows as a fork; one naming nothing
            // (imported from another tool's audit log) is no branch point.
            EventKind::CheckpointCreate if e.ok && !e.parents.is_empty() => {
                self.observe_point(lsn, e);
                return;
            }
            EventKind::Rollback if e.ok => {}
            _ => return,
        }
        let Some(parent) = self.branch_parent(e) else {
            return;
        };
        if e.kind == EventKind::CheckpointCreate {
            self.observe_checkpoint(lsn, e);
        } else if let Some(target) = e.target {
            self.observe_rollback(lsn, e, target);
        }
        self.add_node(lsn, e, parent, true);
        self.session_node.insert(e.session.clone(), lsn);
    }

    /// What the checkpoint or rollback `e` continues from in the branch
    /// graph: for a checkpoint, the newest node its `parents` name, else
    /// the last node of its session; for a rollback, its target. `None`
    /// when `e` is no branch point (a rollback without a known target).
    fn branch_parent(&self, e: &Event) -> Option<Option<Lsn>> {
        if e.kind == EventKind::CheckpointCreate {
            let explicit = e
                .parents
                .iter()
                .filter(|p| self.nodes.contains_key(p))
                .max()
                .copied();
            Some(explicit.or_else(|| self.session_node.get(&e.session).copied()))
        } else {
            e.target
                .filter(|t| self.checkpoints.contains_key(&t.0))
                .map(|t| Some(t.0))
        }
    }

    /// Folds in checkpoint `e` (with a tree) at `lsn`: its info, its
    /// session's list, and the tree reset it is.
    fn observe_checkpoint(&mut self, lsn: Lsn, e: &Event) {
        self.checkpoints.insert(
            lsn,
            CheckpointInfo {
                id: CheckpointId(lsn),
                session: e.session.clone(),
                run: e.run.clone(),
                label: e.label.clone(),
                ts: e.ts,
                root: e.root,
                discarded_at: None,
            },
        );
        push_sorted(
            self.checkpoints_by_session
                .entry(e.session.clone())
                .or_default(),
            lsn,
        );
        if let Some(root) = e.root {
            self.resets.push(Reset {
                lsn,
                root,
                scope: crate::replay::RollbackScope::all(),
            });
        }
    }

    /// Folds in rollback `e` to `target` at `lsn`: its session's list, and
    /// the tree reset it is (the target's tree, for the paths it sets).
    fn observe_rollback(&mut self, lsn: Lsn, e: &Event, target: CheckpointId) {
        self.rollbacks_by_session
            .entry(e.session.clone())
            .or_default()
            .push((lsn, target));
        if let Some(root) = self.checkpoints.get(&target.0).and_then(|c| c.root) {
            self.resets.push(Reset {
                lsn,
                root,
                scope: crate::replay::rollback_scope(e),
            });
        }
    }

    /// Adds the node of record `lsn` (event `e`) under `parent`; `tree`:
    /// whether it has a tree to restore.
    fn add_node(&mut self, lsn: Lsn, e: &Event, parent: Option<Lsn>, tree: bool) {
        if let Some(p) = parent.and_then(|p| self.nodes.get_mut(&p)) {
            p.children.push(lsn);
        }
        self.nodes.insert(
            lsn,
            Node {
                lsn,
                kind: e.kind,
                session: e.session.clone(),
                parent,
                children: Vec::new(),
                label: e.label.clone(),
                ts: e.ts,
                tree,
            },
        );
    }

    /// Folds in a point of an imported conversation: a checkpoint record
    /// without a manifest that names `parents`, the records it continues
    /// from. Its parent is the newest node of its session at or before the
    /// newest of them: the point the conversation was at when that record
    /// was written (so two prompts that continue from the same message
    /// are two children of one node). It is not the session's last node
    /// for the checkpoints that follow: they continue from the workspace's
    /// scans, which this point has no part in.
    fn observe_point(&mut self, lsn: Lsn, e: &Event) {
        let from = e.parents.iter().copied().filter(|p| *p < lsn).max();
        let parent = from.and_then(|from| {
            self.nodes
                .range(..=from)
                .rev()
                .find(|(_, n)| n.session == e.session)
                .map(|(l, _)| *l)
        });
        self.add_node(lsn, e, parent, false);
    }

    /// LSNs of a session's records.
    pub fn session(&self, s: &str) -> &[Lsn] {
        self.by_session.get(s).map_or(&[], Vec::as_slice)
    }

    /// LSNs of a run's records.
    pub fn run(&self, run: &str) -> &[Lsn] {
        self.by_run.get(run).map_or(&[], Vec::as_slice)
    }

    /// LSNs of the records of a kind.
    pub fn kind(&self, k: EventKind) -> &[Lsn] {
        self.by_kind.get(&k).map_or(&[], Vec::as_slice)
    }

    /// Every path a record names, with the LSNs of the records naming it
    /// (sorted), in no particular order.
    pub fn paths(&self) -> impl Iterator<Item = (&str, &[Lsn])> {
        self.by_path.iter().map(|(p, l)| (p.as_str(), l.as_slice()))
    }

    /// LSNs of the records naming a path (`path`, `to_path` or `files`).
    pub fn path(&self, p: &str) -> &[Lsn] {
        self.by_path.get(p).map_or(&[], Vec::as_slice)
    }

    /// LSNs of the records naming a path `p` covers (`p` itself or a path
    /// under it: [`path_covers`](crate::filter::path_covers)), sorted by LSN.
    /// Looks at every distinct path once.
    pub fn paths_under(&self, p: &str) -> Vec<Lsn> {
        let mut lists = self
            .by_path
            .iter()
            .filter(|(have, _)| crate::filter::path_covers(p, have))
            .map(|(_, l)| l.as_slice());
        let Some(first) = lists.next() else {
            return Vec::new();
        };
        let mut out = first.to_vec();
        let mut merged = false;
        for l in lists {
            out.extend_from_slice(l);
            merged = true;
        }
        if merged {
            out.sort_unstable();
            out.dedup();
        }
        out
    }

    /// True if a record names a path strictly under `dir` (`dir/...`): then
    /// `dir` is, or was, a directory, whatever a record naming `dir` itself
    /// (a rollback listing a directory it created) suggests. Looks at every
    /// distinct path once.
    pub fn names_below(&self, dir: &str) -> bool {
        let dir = dir.trim_end_matches('/');
        self.by_path
            .keys()
            .any(|have| have != dir && crate::filter::path_covers(dir, have))
    }

    /// The session ids, unsorted.
    pub fn sessions(&self) -> impl Iterator<Item = &str> {
        self.by_session.keys().map(String::as_str)
    }

    /// LSNs of the records whose time is in `since..=until`, sorted by LSN.
    pub fn time_range(&self, since: Option<Timestamp>, until: Option<Timestamp>) -> Vec<Lsn> {
        let lo = since.map_or(0, |t| self.by_time.partition_point(|x| x.0 < t));
        let hi = until.map_or(self.by_time.len(), |t| {
            self.by_time.partition_point(|x| x.0 <= t)
        });
        let mut v: Vec<Lsn> = self.by_time[lo..hi.max(lo)].iter().map(|x| x.1).collect();
        v.sort_unstable();
        v
    }

    /// The last LSN such that no record up to it is later than `t`
    /// (0 if the first record already is).
    pub fn lsn_at_time(&self, t: Timestamp) -> Lsn {
        Lsn(self.ts_high.partition_point(|h| *h <= t) as u64)
    }

    /// A time resolved as [`crate::point::Point::Time`] says: the point
    /// ([`Index::lsn_at_time`]) and how many records after it are stamped
    /// at or before `t` (the records up to the point all are, so they are
    /// the count of every such record less the point's LSN).
    pub fn time_point(&self, t: Timestamp) -> crate::point::TimePoint {
        let lsn = self.lsn_at_time(t);
        let at_or_before = self.by_time.partition_point(|x| x.0 <= t) as u64;
        crate::point::TimePoint {
            time: t,
            lsn,
            left_out: at_or_before.saturating_sub(lsn.0),
        }
    }

    /// A checkpoint by id.
    pub fn checkpoint(&self, id: CheckpointId) -> Option<&CheckpointInfo> {
        self.checkpoints.get(&id.0)
    }

    /// Every checkpoint, or one session's, in LSN order.
    pub fn checkpoints(&self, session: Option<&str>) -> Vec<&CheckpointInfo> {
        match session {
            None => self.checkpoints.values().collect(),
            Some(s) => self
                .checkpoints_by_session
                .get(s)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter_map(|l| self.checkpoints.get(l))
                .collect(),
        }
    }

    /// A session's checkpoint LSNs, sorted.
    pub fn session_checkpoints(&self, s: &str) -> &[Lsn] {
        self.checkpoints_by_session
            .get(s)
            .map_or(&[], Vec::as_slice)
    }

    /// A session's ok rollbacks with their targets, in LSN order.
    pub fn session_rollbacks(&self, s: &str) -> &[(Lsn, CheckpointId)] {
        self.rollbacks_by_session.get(s).map_or(&[], Vec::as_slice)
    }

    /// Every tree reset (checkpoints and rollbacks), in LSN order.
    pub fn resets(&self) -> &[Reset] {
        &self.resets
    }

    /// The last tree reset at or before `at`.
    pub fn last_reset(&self, at: Lsn) -> Option<&Reset> {
        let i = self.resets.partition_point(|r| r.lsn <= at);
        i.checked_sub(1).map(|i| &self.resets[i])
    }

    /// A node of the branch graph.
    pub fn node(&self, lsn: Lsn) -> Option<&Node> {
        self.nodes.get(&lsn)
    }

    /// Every node of the branch graph, in LSN order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// Approximate heap bytes held (for the memory budget of the indexes).
    pub fn heap_bytes(&self) -> usize {
        fn lists(m: &HashMap<String, Vec<Lsn>>) -> usize {
            m.iter()
                .map(|(k, v)| k.capacity() + v.capacity() * 8 + 64)
                .sum()
        }
        lists(&self.by_session)
            + lists(&self.by_run)
            + lists(&self.by_path)
            + lists(&self.checkpoints_by_session)
            + self
                .by_kind
                .values()
                .map(|v| v.capacity() * 8 + 64)
                .sum::<usize>()
            + self.by_time.capacity() * 16
            + self.ts_high.capacity() * 8
            + self.checkpoints.len() * (std::mem::size_of::<CheckpointInfo>() + 64)
            + self.resets.len() * (std::mem::size_of::<Reset>() + 16)
            + self.nodes.len() * (std::mem::size_of::<Node>() + 64)
            + self
                .rollbacks_by_session
                .values()
                .map(|v| v.capacity() * 16 + 64)
                .sum::<usize>()
    }

    /// Encodes the index file (header + body).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let body = rmp_serde::to_vec(self)
            .map_err(|e| QueryError::Invalid(format!("cannot encode the index: {e}")))?;
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(BlobHash::of(&body).as_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Decodes an index file; `what` names it in errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<Index> {
        let bad = |detail: String| QueryError::IndexCorrupt {
            path: what.to_string(),
            detail,
        };
        if bytes.len() < HEADER_LEN {
            return Err(bad(format!(
                "{} bytes, shorter than its header",
                bytes.len()
            )));
        }
        if &bytes[..8] != MAGIC {
            return Err(bad("bad magic".into()));
        }
        let mut v = [0u8; 4];
        v.copy_from_slice(&bytes[8..12]);
        let version = u32::from_le_bytes(v);
        if version != INDEX_VERSION {
            return Err(bad(format!("version {version}, expected {INDEX_VERSION}")));
        }
        let mut l = [0u8; 8];
        l.copy_from_slice(&bytes[12..20]);
        let len = u64::from_le_bytes(l);
        if len > MAX_INDEX_BYTES || len != (bytes.len() - HEADER_LEN) as u64 {
            return Err(bad(format!(
                "body length {len} does not match the file ({} bytes after the header)",
                bytes.len() - HEADER_LEN
            )));
        }
        let body = &bytes[HEADER_LEN..];
        if BlobHash::of(body).as_bytes()[..] != bytes[20..52] {
            return Err(bad("checksum mismatch".into()));
        }
        rmp_serde::from_slice(body).map_err(|e| bad(format!("cannot decode: {e}")))
    }

    /// Writes the index to `dir/query.idx` atomically (temp file, fsync,
    /// rename, directory fsync).
    pub fn save(&self, vfs: &Arc<dyn Vfs>, dir: &Path) -> Result<()> {
        let io = |op: &'static str, p: &Path, e| {
            QueryError::Engine(cairn_engine::EngineError::io(op, p, e))
        };
        vfs.create_dir_all(dir)
            .map_err(|e| io("create index dir", dir, e))?;
        let bytes = self.encode()?;
        // A temporary of this save's own: a read-only process may save
        // beside the writer (see `StoreBuilder::save_index_read_only`), and
        // two saves must not write one temporary file.
        let tmp = dir.join(unique_tmp_name(INDEX_FILE));
        write_atomic_via(
            &**vfs,
            &tmp,
            &dir.join(INDEX_FILE),
            &bytes,
            &AtomicOptions::durable(),
        )
        .map_err(QueryError::Engine)
    }

    /// Reads `dir/query.idx`; `Ok(None)` when there is none.
    pub fn load(vfs: &Arc<dyn Vfs>, dir: &Path) -> Result<Option<Index>> {
        let p = dir.join(INDEX_FILE);
        if !vfs.exists(&p) {
            return Ok(None);
        }
        let io = |op: &'static str, e| QueryError::Engine(cairn_engine::EngineError::io(op, &p, e));
        let f = vfs
            .open(&p, OpenMode::Read)
            .map_err(|e| io("open index", e))?;
        let len = f.len().map_err(|e| io("stat index", e))?;
        if len > MAX_INDEX_BYTES + HEADER_LEN as u64 {
            return Err(QueryError::IndexCorrupt {
                path: p.display().to_string(),
                detail: format!("{len} bytes, more than the {MAX_INDEX_BYTES} allowed"),
            });
        }
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, 0)
            .map_err(|e| io("read index", e))?;
        Index::decode(&buf, &p.display().to_string()).map(Some)
    }

    /// Opens the index for `src`: loads `dir/query.idx` and folds in only
    /// the records appended since; rebuilds from the whole log when the file
    /// is missing, damaged, or stale (it covers records the log does not
    /// have, or a different history). Does not save; call [`Index::save`].
    pub fn open(
        vfs: &Arc<dyn Vfs>,
        dir: &Path,
        src: &dyn RecordSource,
    ) -> Result<(Index, OpenOutcome)> {
        let reason = match Index::load(vfs, dir) {
            Ok(None) => "no index file".to_string(),
            Err(e @ QueryError::IndexCorrupt { .. }) => e.to_string(),
            Err(e) => return Err(e),
            Ok(Some(mut ix)) => {
                let head = src.head()?;
                if ix.covered > head.last_lsn {
                    format!(
                        "index covers LSN {} but the log ends at {}",
                        ix.covered, head.last_lsn
                    )
                } else if ix.covered.0 > 0 && src.read(ix.covered)?.chain != ix.chain {
                    format!(
                        "the log's record {} differs from the one indexed",
                        ix.covered
                    )
                } else {
                    let caught_up = ix.catch_up(src)?;
                    return Ok((ix, OpenOutcome::Loaded { caught_up }));
                }
            }
        };
        Ok((Index::build(src)?, OpenOutcome::Rebuilt { reason }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::source::MemLog;

    fn ev(kind: EventKind, s: &str, ts: i64) -> Event {
        let mut e = Event::new(kind, s);
        e.ts = Timestamp(ts);
        e
    }

    #[test]
    fn lists_and_time() {
        let log = MemLog::new();
        log.append(ev(EventKind::Prompt, "a", 10).with_path("x"))
            .unwrap();
        log.append(ev(EventKind::Reply, "b", 30)).unwrap();
        log.append(ev(EventKind::Prompt, "a", 20)).unwrap(); // clock went back
        let ix = Index::build(&log).unwrap();
        assert_eq!(ix.session("a"), &[Lsn(1), Lsn(3)]);
        assert_eq!(ix.kind(EventKind::Prompt), &[Lsn(1), Lsn(3)]);
        assert_eq!(ix.path("x"), &[Lsn(1)]);
        assert!(ix.path("y").is_empty());
        assert_eq!(
            ix.time_range(Some(Timestamp(15)), None),
            vec![Lsn(2), Lsn(3)]
        );
        assert_eq!(
            ix.time_range(None, Some(Timestamp(20))),
            vec![Lsn(1), Lsn(3)]
        );
        assert_eq!(ix.lsn_at_time(Timestamp(5)), Lsn(0));
        assert_eq!(ix.lsn_at_time(Timestamp(25)), Lsn(1));
        assert_eq!(ix.lsn_at_time(Timestamp(30)), Lsn(3));
        // Time points where the clock went back: at 25 the point is @1
        // (record 2 is stamped 30), and record 3, stamped 20, is left out.
        assert_eq!(ix.time_point(Timestamp(25)).left_out, 1);
        assert_eq!(ix.time_point(Timestamp(20)).left_out, 1);
        assert_eq!(ix.time_point(Timestamp(30)).left_out, 0);
        assert_eq!(ix.time_point(Timestamp(5)).left_out, 0);
        let r = log.read(Lsn(1)).unwrap();
        let mut ix2 = ix.clone();
        assert!(ix2.observe(&r).is_err(), "out of order is refused");
    }

    /// Points of an imported conversation (checkpoint records without a
    /// manifest naming `parents`) form the branch graph: two prompts that
    /// continue from one reply are two children of the point before it,
    /// and a tree-less record naming nothing is no node.
    #[test]
    fn a_rewound_conversation_forks_at_its_points() {
        let log = MemLog::new();
        let point = |from: u64| {
            let mut e = ev(EventKind::CheckpointCreate, "s", 0);
            e.parents = vec![Lsn(from)];
            e
        };
        log.append(ev(EventKind::Custom, "s", 0)).unwrap(); // 1
        log.append(point(1)).unwrap(); // 2: before prompt 1, a root
        log.append(ev(EventKind::Reply, "s", 0)).unwrap(); // 3
        log.append(point(3)).unwrap(); // 4: before prompt 2
        log.append(ev(EventKind::Reply, "s", 0)).unwrap(); // 5
        log.append(point(3)).unwrap(); // 6: prompt 2 again, rewound
        log.append(ev(EventKind::CheckpointCreate, "s", 0)).unwrap(); // 7
        let ix = Index::build(&log).unwrap();
        let root = ix.node(Lsn(2)).unwrap();
        assert_eq!((root.parent, root.tree), (None, false));
        assert_eq!(root.children, vec![Lsn(4), Lsn(6)]);
        assert_eq!(ix.node(Lsn(6)).unwrap().parent, Some(Lsn(2)));
        assert!(ix.node(Lsn(7)).is_none(), "names no parents: no node");
        assert!(ix.checkpoint(CheckpointId(Lsn(2))).is_none(), "no tree");
    }

    #[test]
    fn encode_decode_and_damage() {
        let log = MemLog::new();
        log.append(ev(EventKind::Prompt, "a", 10).with_path("x"))
            .unwrap();
        let ix = Index::build(&log).unwrap();
        let bytes = ix.encode().unwrap();
        assert_eq!(Index::decode(&bytes, "f").unwrap(), ix);
        for i in [0, 9, 13, 30, bytes.len() - 1] {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let e = Index::decode(&b, "f").unwrap_err().to_string();
            assert!(e.contains("index file f is damaged"), "{i}: {e}");
        }
        assert!(Index::decode(&bytes[..bytes.len() - 1], "f").is_err());
        assert!(Index::decode(&bytes[..10], "f").is_err());
    }
}
