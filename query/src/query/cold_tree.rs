//! The tree at a point, the differences between two points and a file's
//! blame, answered from the per-segment index files ([`ColdIndex`]) by a
//! process that has not loaded the query index: what `cairn tree`, `cairn
//! diff` and `cairn blame` need, with the notes they print (files written
//! by records without their contents, files a checkpoint could not
//! capture).
//!
//! The tree at a point is the last tree reset at or before it (a
//! checkpoint's manifest, or a rollback's) with the file records after it
//! folded in, found through the index files' kind postings
//! ([`TREE_KINDS`]): nothing is replayed from the start unless no
//! checkpoint comes before the point, and no other record is read. A diff
//! between two points with no reset between them reads only the file
//! records between them and, for each path they name, its entry at the
//! earlier point (through its postings, as [`ColdAt::entry_at`] does);
//! otherwise it is two trees. Blame is [`Query::blame`](crate::Query::blame)'s walk
//! ([`super::blame::blame_at`]) over the path's postings and the resets
//! up to the point.
//!
//! Each answer is the in-memory [`Query`](crate::Query)'s (the model test in
//! `query/tests/cold_index.rs` holds them to it). What the files cannot
//! answer cheaply (a time point, a checkpoint id that is no checkpoint)
//! is `None`, and an error (a manifest retention gave up, a path that is
//! no file) is left to the caller, which asks the whole query index: it
//! words the errors and knows what retention discarded.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use cairn_codec::{Event, EventKind, Lsn};
use cairn_snapshot::checkpoint::NotCaptured;

use super::at::not_captured_since_reset;
use super::blame::{blame_at, BlameIndex, BlameLine};
use super::cold_at::ColdAt;
use super::diff::{diff_filter, file_diff, file_pairs, mark_renames, FileDiff, PathPair};
use crate::error::{QueryError, Result};
use crate::index::Reset;
use crate::point::Point;
use crate::replay::{
    apply_paths, history_only, in_scope, path_change, tree_change, TreeChange, TreeMut,
};
use crate::source::{BlobSource, Record, RecordSource, Tree, TreeEntry, MAX_SORTED_READ_BATCH};

/// The kinds whose records can change the tree path by path (see
/// [`crate::replay::file_changes`]): the only records between a reset and
/// a point that the tree there depends on.
pub const TREE_KINDS: [EventKind; 8] = [
    EventKind::FileCreate,
    EventKind::FileWrite,
    EventKind::FileEdit,
    EventKind::FileDelete,
    EventKind::FileMove,
    EventKind::FilePatch,
    EventKind::Apply,
    EventKind::Undo,
];

/// The kinds of the records that reset the tree.
const RESET_KINDS: [EventKind; 2] = [EventKind::CheckpointCreate, EventKind::Rollback];

/// Records read per walk of the log when folding file records: a batch
/// bounds what is held, while one walk still covers thousands of records
/// (as [`MAX_SORTED_READ_BATCH`] bounds a scan's).
const FOLD_BATCH: usize = MAX_SORTED_READ_BATCH;

/// What `cairn diff` prints, from the index files.
#[derive(Clone, Debug, PartialEq)]
pub struct ColdDiff {
    /// [`Query::diff`](crate::Query::diff)'s answer.
    pub diffs: Vec<FileDiff>,
    /// [`Query::unrecorded_writes`](crate::Query::unrecorded_writes) between the two points (in either
    /// order), all of them: the caller keeps those its paths name.
    pub unrecorded: Vec<(String, Record)>,
    /// [`Query::not_captured_at`](crate::Query::not_captured_at) at the first point.
    pub not_captured_a: Vec<NotCaptured>,
    /// The same at the second point.
    pub not_captured_b: Vec<NotCaptured>,
}

/// What `cairn tree` prints, from the index files.
#[derive(Clone, Debug, PartialEq)]
pub struct ColdTree {
    /// The point's LSN.
    pub at: Lsn,
    /// [`Query::tree_at`](crate::Query::tree_at)'s answer.
    pub tree: Tree,
    /// [`Query::unrecorded_writes`](crate::Query::unrecorded_writes) from the start to the point.
    pub unrecorded: Vec<(String, Record)>,
    /// [`Query::not_captured_at`](crate::Query::not_captured_at) at the point.
    pub not_captured: Vec<NotCaptured>,
}

/// The paths `e` names as the query index files them: `path`, `to_path`
/// and `files`.
fn named_paths(e: &Event) -> impl Iterator<Item = &str> {
    e.path
        .as_deref()
        .into_iter()
        .chain(e.to_path.as_deref())
        .chain(e.files.iter().map(String::as_str))
}

/// The paths `e` writes without giving their contents (see
/// [`Query::unrecorded_write`](crate::Query::unrecorded_write)): those it names where it is an ok write
/// (a file event other than a delete, or `apply`/`undo`) that changes no
/// entry of them. `e` is the last record naming one of them, or not.
fn written_without_contents(e: &Event) -> Vec<&str> {
    let writes = e.ok
        && (e.kind.is_file_op() || matches!(e.kind, EventKind::Apply | EventKind::Undo))
        && e.kind != EventKind::FileDelete;
    if !writes {
        return Vec::new();
    }
    named_paths(e)
        .filter(|p| history_only(p).is_none() && path_change(e, p).is_none())
        .collect()
}

impl ColdAt<'_> {
    /// Calls `f` with each record of one of [`TREE_KINDS`] in `lo..=hi`,
    /// in LSN order, found by their kind postings and read in batches.
    fn each_tree_record(
        &self,
        lo: Lsn,
        hi: Lsn,
        f: &mut dyn FnMut(&Record) -> Result<()>,
    ) -> Result<()> {
        if lo > hi {
            return Ok(());
        }
        let read = |lsns: &[Lsn], f: &mut dyn FnMut(&Record) -> Result<()>| {
            self.src.read_sorted(lsns, &mut |r| {
                f(&r)?;
                Ok(true)
            })
        };
        let mut batch = Vec::new();
        self.cold.of_kinds(&TREE_KINDS, lo, hi, &mut |l| {
            batch.push(l);
            if batch.len() >= FOLD_BATCH {
                read(&batch, f)?;
                batch.clear();
            }
            Ok(true)
        })?;
        read(&batch, f)
    }

    /// The tree just after LSN `at` (as [`Query::tree_at_lsn`](crate::Query::tree_at_lsn)).
    pub fn tree_at(&self, at: Lsn) -> Result<Tree> {
        self.tree_gathering(at, None)
    }

    /// [`ColdAt::tree_at`]; with `written`, the paths the records folded
    /// in wrote without their contents are added to it.
    fn tree_gathering(&self, at: Lsn, mut written: Option<&mut BTreeSet<String>>) -> Result<Tree> {
        let (mut tree, from) = match self.last_reset(at)? {
            None => (Tree::new(), Lsn::FIRST),
            Some(r) => {
                let t = self.manifests.tree(&r.root)?;
                let t = if r.scope.is_all() {
                    t
                } else {
                    let mut before = self.tree_at(Lsn(r.lsn.0 - 1))?;
                    before.retain(|p, _| !r.scope.touches(p));
                    before.extend(t.into_iter().filter(|(p, _)| r.scope.touches(p)));
                    before
                };
                (t, r.lsn.next())
            }
        };
        self.each_tree_record(from, at, &mut |r| {
            if let TreeChange::Paths(v) = tree_change(&r.event) {
                apply_paths(&mut tree, &v);
            }
            if let Some(w) = written.as_deref_mut() {
                w.extend(
                    written_without_contents(&r.event)
                        .into_iter()
                        .map(str::to_string),
                );
            }
            Ok(())
        })?;
        Ok(tree)
    }

    /// The last reset at or before `at` that sets every path (a checkpoint,
    /// or a rollback of the whole tree).
    fn last_whole_reset(&self, at: Lsn) -> Result<Option<Reset>> {
        self.last_reset_where(at, |r| r.scope.is_all())
    }

    /// The last reset at or before `at` that `keep` accepts, walking back
    /// from reset to reset.
    fn last_reset_where(&self, at: Lsn, keep: impl Fn(&Reset) -> bool) -> Result<Option<Reset>> {
        let mut r = self.last_reset(at)?;
        while let Some(reset) = r.as_ref().filter(|r| !keep(r)) {
            r = match reset.lsn.0.checked_sub(1) {
                Some(l) => self.last_reset(Lsn(l))?,
                None => None,
            };
        }
        Ok(r)
    }

    /// What `cairn tree` prints at point `p`: the tree, the files written
    /// without their contents and those not captured; `None` for a point
    /// the files do not resolve ([`ColdAt::resolve`]). The file records
    /// after the last reset are read once for the tree and the first note
    /// when that reset sets every path.
    pub fn tree_point(&self, p: Point) -> Result<Option<ColdTree>> {
        let Some(at) = self.resolve(p)? else {
            return Ok(None);
        };
        let whole = self.last_whole_reset(at)?;
        let (tree, unrecorded) = if whole == self.last_reset(at)? {
            let mut written = BTreeSet::new();
            let tree = self.tree_gathering(at, Some(&mut written))?;
            (tree, self.unrecorded_among(Lsn(0), at, written)?)
        } else {
            (self.tree_at(at)?, self.unrecorded_writes(Lsn(0), at)?)
        };
        Ok(Some(ColdTree {
            at,
            tree,
            unrecorded,
            not_captured: self.not_captured_at(at)?,
        }))
    }

    /// The record that last wrote `path` at or before `at` without its
    /// contents, if no reset has set the path since (as
    /// [`Query::unrecorded_write`](crate::Query::unrecorded_write)).
    pub fn unrecorded_write(&self, at: Lsn, path: &str) -> Result<Option<Record>> {
        if history_only(path).is_some() {
            return Ok(None);
        }
        let Some(last) = self.cold.newest_naming(path, None, Lsn::FIRST, at)? else {
            return Ok(None);
        };
        // The last reset at or before `at` that set this path.
        let reset = self.last_reset_where(at, |r| r.scope.touches(path))?;
        if reset.is_some_and(|r| r.lsn >= last) {
            return Ok(None);
        }
        let rec = self.read(last)?;
        let unrecorded = written_without_contents(&rec.event).contains(&path);
        Ok(unrecorded.then_some(rec))
    }

    /// Every path [`ColdAt::unrecorded_write`] finds at `to` whose record
    /// comes after `from`, sorted by path (as [`Query::unrecorded_writes`](crate::Query::unrecorded_writes)).
    /// Such a record is one of [`TREE_KINDS`] after the last reset of the
    /// whole tree (one at or before it sets the path again), so only those
    /// are read.
    pub fn unrecorded_writes(&self, from: Lsn, to: Lsn) -> Result<Vec<(String, Record)>> {
        let whole = self.last_whole_reset(to)?.map_or(Lsn(0), |r| r.lsn);
        let mut written = BTreeSet::new();
        self.each_tree_record(whole.max(from).next(), to, &mut |r| {
            written.extend(
                written_without_contents(&r.event)
                    .into_iter()
                    .map(str::to_string),
            );
            Ok(())
        })?;
        self.unrecorded_among(from, to, written)
    }

    /// [`ColdAt::unrecorded_writes`] among the paths `written` (a superset).
    fn unrecorded_among(
        &self,
        from: Lsn,
        to: Lsn,
        written: BTreeSet<String>,
    ) -> Result<Vec<(String, Record)>> {
        let mut out = Vec::new();
        for path in written {
            if let Some(rec) = self.unrecorded_write(to, &path)? {
                if rec.lsn > from {
                    out.push((path, rec));
                }
            }
        }
        Ok(out)
    }

    /// The files in the workspace at `at` whose contents no record holds
    /// (as [`Query::not_captured_at_lsn`](crate::Query::not_captured_at_lsn)): the last reset's, less those a
    /// later record up to `at` wrote, deleted or moved (found by their
    /// path postings).
    pub fn not_captured_at(&self, at: Lsn) -> Result<Vec<NotCaptured>> {
        let Some(reset) = self.last_reset(at)? else {
            return Ok(Vec::new());
        };
        not_captured_since_reset(
            reset.lsn,
            &|l| self.read(l),
            &|| {
                let mut before = self.not_captured_at(Lsn(reset.lsn.0 - 1))?;
                if !before.is_empty() {
                    let tree = self.tree_at(reset.lsn)?;
                    before.retain(|n| !tree.contains_key(&n.path));
                }
                Ok(before)
            },
            &|p, after, into| {
                self.cold.naming(p, after.next(), at, &mut |l| {
                    into.insert(l);
                    Ok(true)
                })
            },
        )
    }

    /// What `cairn diff A B [-- PATH...]` prints (as [`Query::diff`](crate::Query::diff) with
    /// its notes); `None` for a point the files do not resolve, or a path
    /// filter that names nothing at either point (the whole index words
    /// that refusal).
    pub fn diff(
        &self,
        blobs: &dyn BlobSource,
        a: Point,
        b: Point,
        paths: &[String],
    ) -> Result<Option<ColdDiff>> {
        let (Some(la), Some(lb)) = (self.resolve(a)?, self.resolve(b)?) else {
            return Ok(None);
        };
        let paths: Vec<String> = paths
            .iter()
            .map(|p| diff_filter(p))
            .collect::<Result<_>>()?;
        let (lo, hi) = (la.min(lb), la.max(lb));
        let not_captured_a = self.not_captured_at(la)?;
        let not_captured_b = self.not_captured_at(lb)?;
        let mut pairs = file_pairs(&paths, &mut |p| {
            Ok((self.entry_at(la, p)?, self.entry_at(lb, p)?))
        })?;
        if pairs.is_empty() {
            let Some(changed) =
                self.changed_between(la, lb, &paths, &not_captured_a, &not_captured_b)?
            else {
                return Ok(None);
            };
            pairs = changed;
        }
        let mut diffs = Vec::new();
        for (path, old, new) in pairs {
            if old != new {
                diffs.push(file_diff(blobs, path, old, new)?);
            }
        }
        mark_renames(blobs, &mut diffs)?;
        Ok(Some(ColdDiff {
            diffs,
            unrecorded: self.unrecorded_writes(lo, hi)?,
            not_captured_a,
            not_captured_b,
        }))
    }

    /// Each path in scope of `paths` (all with none) with its entries at
    /// `la` and `lb`, sorted: those that may differ. With no reset between
    /// the two points, the paths the file records between them name (the
    /// others are as they were), else every path of the two trees. `None`
    /// when a path of `paths` names nothing at either point (as
    /// `Query::diff` refuses it).
    fn changed_between(
        &self,
        la: Lsn,
        lb: Lsn,
        paths: &[String],
        not_captured_a: &[NotCaptured],
        not_captured_b: &[NotCaptured],
    ) -> Result<Option<Vec<PathPair>>> {
        let (lo, hi) = (la.min(lb), la.max(lb));
        let reset_between = self.last_reset(hi)?.is_some_and(|r| r.lsn > lo);
        let mut full: Option<(Tree, Tree)> = None;
        let mut pairs = Vec::new();
        if reset_between {
            let (ta, tb) = (self.tree_at(la)?, self.tree_at(lb)?);
            let keys: BTreeSet<&String> = ta.keys().chain(tb.keys()).collect();
            for k in keys {
                pairs.push((k.clone(), ta.get(k).copied(), tb.get(k).copied()));
            }
            full = Some((ta, tb));
        } else {
            let mut overlay = Overlay {
                at: self,
                lo,
                base: RefCell::new(BTreeMap::new()),
                changes: BTreeMap::new(),
                failed: RefCell::new(None),
            };
            self.each_tree_record(lo.next(), hi, &mut |r| {
                if let TreeChange::Paths(v) = tree_change(&r.event) {
                    apply_paths(&mut overlay, &v);
                }
                Ok(())
            })?;
            if let Some(e) = overlay.failed.into_inner() {
                return Err(e);
            }
            for (path, new) in std::mem::take(&mut overlay.changes) {
                let old = match overlay.base.borrow().get(&path) {
                    Some(e) => *e,
                    None => self.entry_at(lo, &path)?,
                };
                let (ea, eb) = if la <= lb { (old, new) } else { (new, old) };
                pairs.push((path, ea, eb));
            }
        }
        pairs.retain(|(k, _, _)| in_scope(k, paths));
        // A path that names nothing at either point is refused, as the
        // whole index refuses it: the answer is left to it.
        for p in paths {
            let names = |k: &str| in_scope(k, std::slice::from_ref(p));
            let here = pairs
                .iter()
                .any(|(k, a, b)| (a.is_some() || b.is_some()) && names(k));
            if here
                || not_captured_a
                    .iter()
                    .chain(not_captured_b)
                    .any(|n| names(&n.path))
                || self.cold.names_under(p, Lsn::FIRST, hi)?
            {
                continue;
            }
            // An unchanged file under it is in the earlier tree.
            let earlier = match &full {
                Some((ta, tb)) => ta.keys().chain(tb.keys()).any(|k| names(k)),
                None => self.tree_at(lo)?.keys().any(|k| names(k)),
            };
            if !earlier {
                return Ok(None);
            }
        }
        Ok(Some(pairs))
    }

    /// `path`'s blame at point `p` (as [`Query::blame`](crate::Query::blame)) with the record
    /// that wrote it last without its contents, if one did (as
    /// [`Query::unrecorded_write`](crate::Query::unrecorded_write)); `None` for a point the files do not
    /// resolve.
    pub fn blame(
        &self,
        blobs: &dyn BlobSource,
        p: Point,
        path: &str,
    ) -> Result<Option<(Option<Record>, Vec<BlameLine>)>> {
        let Some(at) = self.resolve(p)? else {
            return Ok(None);
        };
        let unrecorded = self.unrecorded_write(at, path)?;
        let lines = blame_at(&ColdBlame { at: self, blobs }, at, path)?;
        Ok(Some((unrecorded, lines)))
    }

    /// The LSNs of the resets at or before `at`, in order: the checkpoint
    /// and rollback records up to it (by their kind postings) that reset
    /// the tree.
    fn resets_to(&self, at: Lsn) -> Result<Vec<Lsn>> {
        let mut lsns = Vec::new();
        self.cold.of_kinds(&RESET_KINDS, Lsn::FIRST, at, &mut |l| {
            lsns.push(l);
            Ok(true)
        })?;
        let mut out = Vec::new();
        for l in lsns {
            if self.reset_at(l)?.is_some() {
                out.push(l);
            }
        }
        Ok(out)
    }
}

/// The tree at one point as the file records after it change it: the
/// paths changed, over their entries at that point, each looked up (by
/// its postings) the first time a change needs it.
struct Overlay<'c, 'a> {
    at: &'c ColdAt<'a>,
    /// The point the changes are made after.
    lo: Lsn,
    /// The entries at `lo` looked up so far.
    base: RefCell<BTreeMap<String, Option<TreeEntry>>>,
    /// The entries changed since `lo`.
    changes: BTreeMap<String, Option<TreeEntry>>,
    /// The first lookup that failed ([`TreeMut::entry`] cannot fail).
    failed: RefCell<Option<QueryError>>,
}

impl TreeMut for Overlay<'_, '_> {
    fn entry(&self, path: &str) -> Option<TreeEntry> {
        if let Some(e) = self.changes.get(path) {
            return *e;
        }
        if let Some(e) = self.base.borrow().get(path) {
            return *e;
        }
        let e = match self.at.entry_at(self.lo, path) {
            Ok(e) => e,
            Err(err) => {
                self.failed.borrow_mut().get_or_insert(err);
                None
            }
        };
        self.base.borrow_mut().insert(path.to_string(), e);
        e
    }
    fn set(&mut self, path: &str, e: TreeEntry) {
        self.changes.insert(path.to_string(), Some(e));
    }
    fn unset(&mut self, path: &str) {
        self.changes.insert(path.to_string(), None);
    }
}

/// Blame's questions ([`BlameIndex`]) answered from the index files. A
/// manifest it cannot read is an error here, never a history cut: the
/// whole index, which knows what retention discarded, answers then.
struct ColdBlame<'c, 'a> {
    at: &'c ColdAt<'a>,
    blobs: &'c dyn BlobSource,
}

impl BlameIndex for ColdBlame<'_, '_> {
    fn records(&self) -> &dyn RecordSource {
        self.at.src
    }
    fn blobs(&self) -> &dyn BlobSource {
        self.blobs
    }
    fn naming_to(&self, path: &str, at: Lsn) -> Result<Vec<Lsn>> {
        let mut out = Vec::new();
        self.at.cold.naming(path, Lsn::FIRST, at, &mut |l| {
            out.push(l);
            Ok(true)
        })?;
        Ok(out)
    }
    fn resets_to(&self, at: Lsn) -> Result<Vec<Lsn>> {
        self.at.resets_to(at)
    }
    fn rollback_target(&self, l: Lsn) -> Result<Option<Lsn>> {
        let e = self.at.read(l)?.event;
        if e.kind != EventKind::Rollback || !e.ok {
            return Ok(None);
        }
        match e.target.filter(|t| t.0 < l) {
            Some(t) if self.at.checkpoint_root(t.0)?.is_some() => Ok(Some(t.0)),
            _ => Ok(None),
        }
    }
    fn entry_at(&self, at: Lsn, path: &str) -> Result<Option<TreeEntry>> {
        self.at.entry_at(at, path)
    }
    fn tree_at(&self, at: Lsn) -> Result<Tree> {
        self.at.tree_at(at)
    }
    fn beyond_retention(&self, _e: &QueryError) -> bool {
        false
    }
    fn not_a_file(&self, at: Lsn, path: &str) -> QueryError {
        QueryError::NoSuchPath {
            path: path.to_string(),
            at,
        }
    }
}
