//! Blame: which record (and so which session and model) wrote each line
//! of a file at a point, following moves back.

use std::collections::{HashMap, HashSet};

use similar::DiffOp;

use cairn_codec::{BlobHash, EventKind, Lsn};

use crate::error::{QueryError, Result};
use crate::lines::*;
use crate::point::Point;
use crate::replay::{path_change, PathChange};
use crate::source::{BlobSource, Record, RecordSource, Tree, TreeEntry};

use super::*;

/// How many moves blame follows back through, so a path moved back and
/// forth thousands of times cannot exhaust the stack.
pub const MAX_BLAME_MOVES: usize = 64;

/// One line of a blamed file: the record that last changed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlameLine {
    /// 1-based line number.
    pub line_no: usize,
    /// The line's text, without its line ending (`\n` or `\r\n`; lines
    /// are split at `\n` only, so a lone `\r` is part of the text).
    pub text: String,
    /// The record that wrote this line.
    pub lsn: Lsn,
    /// Its session.
    pub session: String,
    /// Its model, if any.
    pub model: Option<String>,
    /// Its kind.
    pub kind: EventKind,
    /// True if retention discarded the file's history before this record:
    /// the line was written by it or by an earlier record no longer known
    /// (the record is the first version of the file still readable).
    pub history_cut: bool,
    /// True if the line was already in the workspace when its history
    /// began: the store's first checkpoint found it, in a file no record
    /// had written before. No record wrote it, so [`model`](Self::model)
    /// is `None`; [`lsn`](Self::lsn), [`session`](Self::session) and
    /// [`kind`](Self::kind) name that first checkpoint (git's "boundary"
    /// commit).
    pub before_history: bool,
}

/// The attribution of a line that predates the log's history (see
/// [`BlameLine::before_history`]): no record has LSN 0.
const BEFORE_HISTORY: Lsn = Lsn(0);

/// What a blame walk asks of an index: the in-memory query index
/// answers it ([`Query`]), and so do the per-segment index files
/// (through [`super::cold_tree`]), with the same walk over either.
pub(crate) trait BlameIndex {
    /// The log.
    fn records(&self) -> &dyn RecordSource;
    /// The blobs.
    fn blobs(&self) -> &dyn BlobSource;
    /// The LSNs of the records naming `path` at or before `at`, in order.
    fn naming_to(&self, path: &str, at: Lsn) -> Result<Vec<Lsn>>;
    /// The LSNs of the tree resets (checkpoints, rollbacks) at or before
    /// `at`, in order.
    fn resets_to(&self, at: Lsn) -> Result<Vec<Lsn>>;
    /// The checkpoint the reset at `l` rolled back to, if it is a rollback.
    fn rollback_target(&self, l: Lsn) -> Result<Option<Lsn>>;
    /// `path`'s entry just after `at`.
    fn entry_at(&self, at: Lsn, path: &str) -> Result<Option<TreeEntry>>;
    /// The tree just after `at`.
    fn tree_at(&self, at: Lsn) -> Result<Tree>;
    /// True if `e` is a manifest retention gave up.
    fn beyond_retention(&self, e: &QueryError) -> bool;
    /// The error for `path`, which is no file at `at`.
    fn not_a_file(&self, at: Lsn, path: &str) -> QueryError;
}

impl BlameIndex for Query<'_> {
    fn records(&self) -> &dyn RecordSource {
        self.src
    }
    fn blobs(&self) -> &dyn BlobSource {
        self.blobs
    }
    fn naming_to(&self, path: &str, at: Lsn) -> Result<Vec<Lsn>> {
        let lsns = self.index.path(path);
        Ok(lsns[..lsns.partition_point(|l| *l <= at)].to_vec())
    }
    fn resets_to(&self, at: Lsn) -> Result<Vec<Lsn>> {
        let r = self.index.resets();
        Ok(r[..r.partition_point(|r| r.lsn <= at)]
            .iter()
            .map(|r| r.lsn)
            .collect())
    }
    fn rollback_target(&self, l: Lsn) -> Result<Option<Lsn>> {
        Ok(self.index.node(l).and_then(|n| {
            let target = n.parent.filter(|t| *t < l)?;
            (n.kind == EventKind::Rollback).then_some(target)
        }))
    }
    fn entry_at(&self, at: Lsn, path: &str) -> Result<Option<TreeEntry>> {
        Query::entry_at(self, at, path)
    }
    fn tree_at(&self, at: Lsn) -> Result<Tree> {
        self.tree_at_lsn(at)
    }
    fn beyond_retention(&self, e: &QueryError) -> bool {
        Query::beyond_retention(self, e)
    }
    fn not_a_file(&self, at: Lsn, path: &str) -> QueryError {
        Query::not_a_file(self, at, path)
    }
}

impl Query<'_> {
    /// For each line of `path` at a point, the record that last changed it.
    ///
    /// The versions of the file are taken at each record naming the path
    /// and at each checkpoint or rollback (which capture edits no file event
    /// reported); lines carried over unchanged (by a line diff) keep their
    /// record. Moves are followed: lines a move brought in keep the records
    /// that wrote them under the old name, whether the move was recorded or
    /// found by a checkpoint (see [`crate::renames`]). So are rollbacks:
    /// the lines a rollback (an undo or a redo) brought back keep the
    /// records that wrote them, as blame at its target gives them. Lines
    /// the store's first checkpoint found in a file no record had written
    /// were there before history began: they are marked
    /// [`before_history`](BlameLine::before_history), with no model.
    pub fn blame(&self, p: Point, path: &str) -> Result<Vec<BlameLine>> {
        blame_at(self, self.resolve(p)?, path)
    }
}

/// [`Query::blame`] of `path` just after `at`, through `v`.
pub(crate) fn blame_at(v: &dyn BlameIndex, at: Lsn, path: &str) -> Result<Vec<BlameLine>> {
    let entry = v
        .entry_at(at, path)?
        .ok_or_else(|| v.not_a_file(at, path))?;
    if is_binary(&v.blobs().get(&entry.blob)?) {
        return Err(QueryError::Invalid(format!(
            "`{path}` is binary at LSN {at}; blame needs text"
        )));
    }
    let w = Blamer {
        v,
        resets: v.resets_to(at)?,
    };
    let mut cuts = HashSet::new();
    let (text, attr) = w.blame_attr(at, path, 0, &mut cuts)?;
    let mut cache: HashMap<Lsn, Record> = HashMap::new();
    let mut out = Vec::with_capacity(attr.len());
    // The store's first capture: a line credited to before history has
    // one at or before `at`.
    let first_capture = w.resets.first().copied();
    for (i, (line, l)) in split_lines(&text).into_iter().zip(attr).enumerate() {
        let before_history = l == BEFORE_HISTORY;
        let l = match first_capture {
            Some(first) if before_history => first,
            _ => l,
        };
        let e = match cache.entry(l) {
            std::collections::hash_map::Entry::Occupied(o) => &o.into_mut().event,
            std::collections::hash_map::Entry::Vacant(v2) => &v2.insert(v.records().read(l)?).event,
        };
        out.push(BlameLine {
            line_no: i + 1,
            text: line_text(line).to_string(),
            lsn: l,
            session: e.session.clone(),
            model: e.model.clone().filter(|_| !before_history),
            kind: e.kind,
            history_cut: cuts.contains(&l),
            before_history,
        });
    }
    Ok(out)
}

/// The path `path` was renamed from at the reset (checkpoint or rollback)
/// at `at`: `path` is new there and another path holding its contents is
/// gone (see [`crate::renames`]). `None` also when the tree before `at` is
/// past retention's horizon. Reads both whole trees, so it is asked only
/// where a path appears at a reset.
pub(crate) fn renamed_at_reset(v: &dyn BlameIndex, at: Lsn, path: &str) -> Result<Option<String>> {
    if at.0 <= 1 {
        return Ok(None);
    }
    let before = match v.tree_at(Lsn(at.0 - 1)) {
        Ok(t) => t,
        Err(e) if v.beyond_retention(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    if before.contains_key(path) {
        return Ok(None);
    }
    let after = v.tree_at(at)?;
    if !after.contains_key(path) {
        return Ok(None);
    }
    Ok(crate::renames::between(&before, &after, v.blobs())
        .into_iter()
        .find(|r| r.to == path)
        .map(|r| r.from))
}

/// One blame: the index it asks and the resets up to its point.
struct Blamer<'v> {
    v: &'v dyn BlameIndex,
    /// The LSNs of the resets at or before the point blamed, in order.
    resets: Vec<Lsn>,
}

impl Blamer<'_> {
    /// True if a tree reset is at `l`.
    fn reset_here(&self, l: Lsn) -> bool {
        self.resets.binary_search(&l).is_ok()
    }

    /// The text of `path` at `at` and, per line, the LSN that wrote it.
    /// `cuts` gathers the points where a file's known history starts after
    /// retention discarded what came before: the lines credited to one of
    /// them were written there or earlier.
    fn blame_attr(
        &self,
        at: Lsn,
        path: &str,
        depth: usize,
        cuts: &mut HashSet<Lsn>,
    ) -> Result<(String, Vec<Lsn>)> {
        let events = self.v.naming_to(path, at)?;
        let points = self.blame_points(at, &events);
        let (rollback_to, mut at_target) = self.rollback_targets(&points)?;
        let mut w = BlameWalk::default();
        let mut prev: Option<Lsn> = None;
        // The path's own records among the points, read in one walk.
        let mut own_recs = read_all(self.v.records(), &events)?.into_iter();
        for l in points {
            // What the walk holds now is the file at the previous point:
            // kept there for a later rollback to that point.
            if let Some(kept) = prev.and_then(|p| at_target.get_mut(&p)) {
                *kept = (w.text.clone(), w.attr.clone());
            }
            prev = Some(l);
            // The record at `l`, if it is one of the path's own.
            let rec = if events.binary_search(&l).is_ok() {
                own_recs.next()
            } else {
                None
            };
            let reset_here = self.reset_here(l);
            let change = rec.as_ref().filter(|_| !reset_here);
            let blob = match self.version_at(l, path, change)? {
                Version::Blob(b) => b,
                Version::Cut => {
                    w.cut();
                    continue;
                }
            };
            if blob == w.blob {
                continue;
            }
            let was_absent = w.blob.is_none();
            w.blob = blob;
            // The first version readable after the cut: its lines were
            // written here or before (unless a record created the file
            // here, which says nothing came before).
            let created = change.is_some_and(|r| r.event.kind == EventKind::FileCreate);
            if blob.is_some() && std::mem::take(&mut w.after_cut) && !created {
                cuts.insert(l);
            }
            let new_text = self.blame_text(blob)?;
            let restored = reset_here
                .then(|| rollback_to.get(&l).and_then(|t| at_target.get(t)))
                .flatten();
            if let Some((t, a)) = restored.filter(|_| blob.is_some()) {
                // A rollback: the lines it brought back are compared with the
                // file as it was at its target, with their writers of then.
                w.text = t.clone();
                w.attr = a.clone();
            } else if depth < MAX_BLAME_MOVES {
                let found_here = reset_here && was_absent && blob.is_some();
                if let Some(from) = self.moved_from(rec.as_ref(), path, l, found_here)? {
                    (w.text, w.attr) = self.blame_attr(Lsn(l.0 - 1), &from, depth + 1, cuts)?;
                }
            }
            // The store's first capture of the workspace finding a file no
            // record wrote before: its lines predate the history.
            let first_capture = reset_here
                && was_absent
                && restored.is_none()
                && w.attr.is_empty()
                && self.is_first_capture_of(l, &events);
            w.take(new_text, if first_capture { BEFORE_HISTORY } else { l });
        }
        Ok((w.text, w.attr))
    }

    /// True when `l` is the store's first capture of the workspace and no
    /// record among the path's `events` came before it.
    fn is_first_capture_of(&self, l: Lsn, events: &[Lsn]) -> bool {
        events.first().is_none_or(|e| *e >= l) && self.resets.first() == Some(&l)
    }

    /// The points blame takes versions of a path at, up to `at`: each
    /// record naming the path (`events`), and each checkpoint or rollback
    /// (which capture edits no file event reported); sorted.
    fn blame_points(&self, at: Lsn, events: &[Lsn]) -> Vec<Lsn> {
        let mut points: Vec<Lsn> = events.to_vec();
        points.extend(self.resets.iter().copied().filter(|l| *l <= at));
        points.sort_unstable();
        points.dedup();
        points
    }

    /// The rollbacks among `points`, each with its target, and a place for
    /// the file's text and attribution at each target. A rollback brings
    /// back the file as it was at its target, so its lines keep the
    /// records that wrote them then: the text and attribution at each
    /// rollback's target (a checkpoint, so one of the points) are kept for
    /// it as the walk passes.
    fn rollback_targets(&self, points: &[Lsn]) -> Result<(HashMap<Lsn, Lsn>, AtTarget)> {
        let mut rollback_to: HashMap<Lsn, Lsn> = HashMap::new();
        for l in points.iter().copied().filter(|l| self.reset_here(*l)) {
            if let Some(t) = self.v.rollback_target(l)? {
                rollback_to.insert(l, t);
            }
        }
        let at_target = rollback_to
            .values()
            .map(|t| (*t, (String::new(), Vec::new())))
            .collect();
        Ok((rollback_to, at_target))
    }

    /// The contents of `path` at `l`. A record that sets the path's
    /// contents (`change`, not at a reset) says what they are: only its
    /// mode would need the walk back through the path's history that
    /// `entry_at` makes (once per version, that walk made blame quadratic:
    /// 2,000 versions read 2 million records). At a reset, the manifest
    /// decides.
    fn version_at(&self, l: Lsn, path: &str, change: Option<&Record>) -> Result<Version> {
        let set_here = match change.and_then(|r| path_change(&r.event, path)) {
            Some(PathChange::Set(b) | PathChange::MoveIn { after: Some(b), .. }) => Some(Some(b)),
            Some(PathChange::Remove) => Some(None),
            _ => None,
        };
        let found = match set_here {
            Some(b) => Ok(b.map(TreeEntry::file)),
            None => self.v.entry_at(l, path),
        };
        match found {
            Ok(e) => Ok(Version::Blob(e.map(|e| e.blob))),
            Err(e) if self.v.beyond_retention(&e) => Ok(Version::Cut),
            Err(e) => Err(e),
        }
    }

    /// The text blame compares: the blob's contents, or nothing for a
    /// binary file or none.
    fn blame_text(&self, blob: Option<BlobHash>) -> Result<String> {
        Ok(match blob {
            None => String::new(),
            Some(b) => {
                let bytes = self.v.blobs().get(&b)?;
                if is_binary(&bytes) {
                    String::new()
                } else {
                    String::from_utf8_lossy(&bytes).into_owned()
                }
            }
        })
    }

    /// The path `path` was moved from at `l`, bringing the source's lines
    /// with their history: a move recorded (`rec`), or one a checkpoint
    /// found where the file appeared (`found_here`: the same contents gone
    /// from another path as this one appeared, a shell `mv`).
    fn moved_from(
        &self,
        rec: Option<&Record>,
        path: &str,
        l: Lsn,
        found_here: bool,
    ) -> Result<Option<String>> {
        match rec.and_then(|r| path_change(&r.event, path)) {
            Some(PathChange::MoveIn { from, .. }) => Ok(Some(from.to_string())),
            _ if found_here => renamed_at_reset(self.v, l, path),
            _ => Ok(None),
        }
    }
}

/// The records at `lsns` (ascending), read in one walk.
fn read_all(src: &dyn RecordSource, lsns: &[Lsn]) -> Result<Vec<Record>> {
    let mut out = Vec::with_capacity(lsns.len());
    src.read_sorted(lsns, &mut |r| {
        out.push(r);
        Ok(true)
    })?;
    Ok(out)
}

/// The text and attribution of a file at each rollback target, by target.
type AtTarget = HashMap<Lsn, (String, Vec<Lsn>)>;

/// A blame walk over one path's versions: the file as it stands at the
/// last point taken, with the LSN that wrote each line.
#[derive(Default)]
struct BlameWalk {
    blob: Option<BlobHash>,
    text: String,
    attr: Vec<Lsn>,
    /// After retention cut the history, until the next version.
    after_cut: bool,
}

impl BlameWalk {
    /// History before this point is gone: the next version readable is
    /// where the file's known history starts.
    fn cut(&mut self) {
        self.blob = None;
        self.text.clear();
        self.attr.clear();
        self.after_cut = true;
    }

    /// Takes the next version, `new_text`: the lines carried over keep
    /// their writers, the others are credited to `credit`.
    fn take(&mut self, new_text: String, credit: Lsn) {
        self.attr = carry_attribution(&self.text, &self.attr, &new_text, credit);
        self.text = new_text;
    }
}

/// What a blame walk finds of a file at one of its points.
enum Version {
    /// Its contents (none: the file is not there).
    Blob(Option<BlobHash>),
    /// Retention discarded the history before this point.
    Cut,
}

/// The attribution of `new_text`'s lines: those a line diff carries over
/// unchanged from `text` keep their record in `attr`, the others are
/// credited to `credit`.
fn carry_attribution(text: &str, attr: &[Lsn], new_text: &str, credit: Lsn) -> Vec<Lsn> {
    let (old_lines, new_lines) = (split_lines(text), split_lines(new_text));
    let diff = line_diff(&old_lines, &new_lines);
    let mut new_attr = vec![credit; new_lines.len()];
    for op in diff.ops() {
        if let DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = *op
        {
            new_attr[new_index..new_index + len].copy_from_slice(&attr[old_index..old_index + len]);
        }
    }
    new_attr
}
