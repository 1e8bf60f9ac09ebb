//! A path's entry at a point, answered from the per-segment index files
//! ([`ColdIndex`]) by a process that has not loaded the query index: what
//! `cairn show POINT:PATH` needs. It reads the path's postings newest
//! first back to the last tree reset (checkpoint or rollback) at or before
//! the point, the few records they name, and at most one manifest entry:
//! nothing is replayed from the start and nothing is loaded whole.
//!
//! The walk is [`Query::entry_at`](crate::Query::entry_at)'s, over the
//! index files instead of the in-memory lists; the model test in
//! `query/tests/cold_index.rs` holds the two to the same answers. What
//! the files cannot answer cheaply (a checkpoint id that is no checkpoint,
//! an LSN past the head, a path last written by a record without its contents) is
//! [`ColdAnswer::Ask`]: the caller asks the whole query index, which also
//! words the errors.

use cairn_codec::{BlobHash, EventKind, Lsn};

use super::at::{finish, step_back, Step};
use crate::error::Result;
use crate::index::cold::ColdIndex;
use crate::index::Reset;
use crate::point::{Point, TimePoint};
use crate::replay::{history_only, path_change, rollback_scope, RollbackScope};
use crate::source::{read_one, ManifestSource, Record, RecordSource, TreeEntry};
use std::cell::RefCell;
use std::collections::HashMap;

/// The kinds whose records can remove a path or move another onto it
/// (see [`crate::replay::file_changes`]): once a path's newest contents
/// are known, only these records between them and the last reset can
/// still change what its entry is (its mode, or that there is none).
const REMOVING_KINDS: [EventKind; 3] = [
    EventKind::FileDelete,
    EventKind::FileMove,
    EventKind::FilePatch,
];

/// What the per-segment indexes say of a path at a point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColdAnswer {
    /// The point's LSN and the path's entry there (`None`: no file).
    Entry(Lsn, Option<TreeEntry>),
    /// A question left to the whole query index (see the module docs).
    Ask,
}

/// Point queries over the per-segment index files (see the module docs).
pub struct ColdAt<'a> {
    pub(super) cold: &'a ColdIndex<'a>,
    pub(super) src: &'a dyn RecordSource,
    pub(super) manifests: &'a dyn ManifestSource,
    /// The last record read: the newest naming a path is read to see
    /// whether it wrote without contents, then again by the walk back.
    last: RefCell<Option<Record>>,
    /// [`ColdAt::last_reset`]'s answers so far, by LSN asked: the walks
    /// of many paths back from one point ask the same ones.
    resets: RefCell<HashMap<Lsn, Option<Reset>>>,
    /// A time point already resolved over the same index
    /// ([`ColdAt::knowing`]).
    known: Option<TimePoint>,
}

impl<'a> ColdAt<'a> {
    /// Point queries over `cold`, the log `src` it indexes and its manifests.
    pub fn new(
        cold: &'a ColdIndex<'a>,
        src: &'a dyn RecordSource,
        manifests: &'a dyn ManifestSource,
    ) -> ColdAt<'a> {
        ColdAt {
            cold,
            src,
            manifests,
            last: RefCell::new(None),
            resets: RefCell::new(HashMap::new()),
            known: None,
        }
    }

    /// The same, with the time point `tp` already resolved over `cold`
    /// (by [`ColdIndex::time_point`], at the same head): resolving
    /// [`Point::Time`] of its time takes it rather than reading the
    /// segment where the time falls again.
    pub fn knowing(mut self, tp: TimePoint) -> ColdAt<'a> {
        self.known = Some(tp);
        self
    }

    /// The record at `lsn`, read by [`read_one`] (no segment mapped for
    /// the few records a point query reads), the last one kept.
    pub(super) fn read(&self, lsn: Lsn) -> Result<Record> {
        if let Some(r) = self.last.borrow().as_ref().filter(|r| r.lsn == lsn) {
            return Ok(r.clone());
        }
        let r = read_one(self.src, lsn)?;
        *self.last.borrow_mut() = Some(r.clone());
        Ok(r)
    }

    /// `path`'s entry at point `p`, or [`ColdAnswer::Ask`]. An error is
    /// one reading the log or a manifest: the caller may ask the whole
    /// query index, which words it.
    pub fn entry(&self, p: Point, path: &str) -> Result<ColdAnswer> {
        let Some(at) = self.resolve(p)? else {
            return Ok(ColdAnswer::Ask);
        };
        if self.written_without_contents(at, path)? {
            return Ok(ColdAnswer::Ask);
        }
        Ok(ColdAnswer::Entry(at, self.entry_at(at, path)?))
    }

    /// The LSN of a point that names one directly (the head, an LSN up to
    /// it, a checkpoint with a tree) or a time (see
    /// [`ColdIndex::time_point`]); `None` for any other.
    pub fn resolve(&self, p: Point) -> Result<Option<Lsn>> {
        let head = self.cold.covered();
        Ok(match p {
            Point::Head => Some(head),
            Point::Lsn(l) if l <= head => Some(l),
            Point::Checkpoint(c) if self.checkpoint_root(c.0)?.is_some() => Some(c.0),
            Point::Time(t) => match self.known.filter(|k| k.time == t) {
                Some(k) => Some(k.lsn),
                None => Some(self.cold.time_point(t)?.lsn),
            },
            _ => None,
        })
    }

    /// The manifest root of the checkpoint recorded at `lsn`, if the
    /// record there is one of this store (ok, with a tree), as the query
    /// index counts checkpoints.
    pub(super) fn checkpoint_root(&self, lsn: Lsn) -> Result<Option<BlobHash>> {
        if lsn.0 == 0 || lsn > self.cold.covered() {
            return Ok(None);
        }
        let e = self.read(lsn)?.event;
        Ok(e.root
            .filter(|_| e.kind == EventKind::CheckpointCreate && e.ok))
    }

    /// The tree reset the record at `lsn` makes, if it makes one (as the
    /// query index folds them: a checkpoint with a tree, or an ok rollback
    /// to an earlier one).
    pub(super) fn reset_at(&self, lsn: Lsn) -> Result<Option<Reset>> {
        let e = self.read(lsn)?.event;
        if !e.ok {
            return Ok(None);
        }
        Ok(match e.kind {
            EventKind::CheckpointCreate => e.root.map(|root| Reset {
                lsn,
                root,
                scope: RollbackScope::all(),
            }),
            EventKind::Rollback => match e.target.filter(|t| t.0 < lsn) {
                Some(t) => self.checkpoint_root(t.0)?.map(|root| Reset {
                    lsn,
                    root,
                    scope: rollback_scope(&e),
                }),
                None => None,
            },
            _ => None,
        })
    }

    /// The last tree reset at or before `at`.
    pub fn last_reset(&self, at: Lsn) -> Result<Option<Reset>> {
        if let Some(r) = self.resets.borrow().get(&at) {
            return Ok(r.clone());
        }
        let r = self.find_last_reset(at)?;
        self.resets.borrow_mut().insert(at, r.clone());
        Ok(r)
    }

    /// [`ColdAt::last_reset`], looked up.
    fn find_last_reset(&self, at: Lsn) -> Result<Option<Reset>> {
        let mut hi = at;
        while hi.0 > 0 {
            let c = self
                .cold
                .newest_of_kind(EventKind::CheckpointCreate, Lsn::FIRST, hi)?;
            let r = self
                .cold
                .newest_of_kind(EventKind::Rollback, Lsn::FIRST, hi)?;
            let Some(l) = c.max(r) else {
                return Ok(None);
            };
            if let Some(reset) = self.reset_at(l)? {
                return Ok(Some(reset));
            }
            hi = Lsn(l.0 - 1);
        }
        Ok(None)
    }

    /// True if the last record naming `path` at or before `at` wrote it
    /// without its contents: the case
    /// [`Query::unrecorded_write`](crate::Query::unrecorded_write) may
    /// report, left to it. Any other last record (one that gives the
    /// contents, or no write) means there is no such write.
    fn written_without_contents(&self, at: Lsn, path: &str) -> Result<bool> {
        if history_only(path).is_some() {
            return Ok(false);
        }
        let Some(last) = self.cold.newest_naming(path, None, Lsn::FIRST, at)? else {
            return Ok(false);
        };
        let e = self.read(last)?.event;
        let writes = e.ok
            && (e.kind.is_file_op() || matches!(e.kind, EventKind::Apply | EventKind::Undo))
            && e.kind != EventKind::FileDelete;
        Ok(writes && path_change(&e, path).is_none())
    }

    /// The newest record in `lo..=hi` naming `path` that can change its
    /// entry still: any, while its contents are not known; once they are,
    /// only one of [`REMOVING_KINDS`].
    fn newest_change(
        &self,
        path: &str,
        contents_known: bool,
        lo: Lsn,
        hi: Lsn,
    ) -> Result<Option<Lsn>> {
        if !contents_known {
            return self.cold.newest_naming(path, None, lo, hi);
        }
        let mut newest = None;
        for k in REMOVING_KINDS {
            newest = newest.max(self.cold.newest_naming(path, Some(k), lo, hi)?);
        }
        Ok(newest)
    }

    /// `path`'s entry just after LSN `at`: the last change to the path
    /// since the last tree reset, else the reset's manifest (as
    /// [`Query::entry_at`](crate::Query::entry_at)).
    pub fn entry_at(&self, at: Lsn, path: &str) -> Result<Option<TreeEntry>> {
        let mut path = path.to_string();
        let mut at = at;
        // Contents set by a later write, while the mode is still looked for.
        let mut blob: Option<BlobHash> = None;
        'outer: loop {
            let reset = self.last_reset(at)?;
            let lo = reset.as_ref().map_or(Lsn(0), |r| r.lsn);
            let mut hi = at;
            while lo < hi {
                let Some(l) = self.newest_change(&path, blob.is_some(), lo.next(), hi)? else {
                    break;
                };
                let r = self.read(l)?;
                match step_back(&r.event, &path, &mut blob) {
                    Step::On => {}
                    Step::Removed => return Ok(finish(blob, None)),
                    Step::MovedFrom(from) => {
                        path = from;
                        at = Lsn(l.0 - 1);
                        continue 'outer;
                    }
                }
                hi = Lsn(l.0 - 1);
            }
            let base = match reset {
                None => None,
                Some(r) if r.scope.touches(&path) => self.manifests.entry(&r.root, &path)?,
                Some(r) => {
                    at = Lsn(r.lsn.0 - 1);
                    continue 'outer;
                }
            };
            return Ok(finish(blob, base));
        }
    }
}
