//! The history of a path: every record that touched it, optionally the
//! checkpoints that captured its shell edits, and where a move brought it
//! from.

use cairn_codec::{BlobHash, EventKind, Lsn};

use crate::error::Result;
use crate::replay::{in_scope, path_change, PathChange};
use crate::source::{Record, Tree};

use super::*;

impl Query<'_> {
    /// Every record naming `path` (as `path`, `to_path` or in `files`), in
    /// LSN order: writes, deletes, and moves to and from it. A directory's
    /// history is that of every path under it (as [`Filter::path`] reads it).
    pub fn history(&self, path: &str) -> Result<Vec<Record>> {
        self.read_all(&self.index.paths_under(path))
    }

    /// The records `lsns` (ascending) names, read in one walk of the log
    /// ([`RecordSource::read_sorted`](crate::source::RecordSource::read_sorted)).
    pub(crate) fn read_all(&self, lsns: &[Lsn]) -> Result<Vec<Record>> {
        let mut out = Vec::with_capacity(lsns.len());
        self.src.read_sorted(lsns, &mut |r| {
            out.push(r);
            Ok(true)
        })?;
        Ok(out)
    }

    /// [`Query::history`] of a file followed back through its moves (as
    /// `git log --follow`): the records of `path` and, before the move
    /// that brought it there (what [`path_change`] calls a move in, as
    /// blame does: a `file.move`, or a `file.patch` with `to_path`), those
    /// of where it came from, and so on back (at most [`MAX_BLAME_MOVES`]
    /// moves, as blame follows). A move no record names, which a checkpoint
    /// or rollback found (the path new there, its contents gone from
    /// another path: see [`crate::renames`]), is followed too, and that
    /// checkpoint is listed. The records blame credits are the ones listed.
    pub fn history_following(&self, path: &str) -> Result<Vec<Record>> {
        self.follow(path, false)
    }

    /// [`Query::history_following`] with, on each path it follows, the
    /// checkpoints and rollbacks that changed the file without a record
    /// naming it (as [`Query::history_with_resets`] finds them): every
    /// change blame can credit, across moves.
    pub fn history_following_with_resets(&self, path: &str) -> Result<Vec<Record>> {
        self.follow(path, true)
    }

    /// The records of [`Query::history_following`], with the resets that
    /// changed each followed path when `resets` is set.
    fn follow(&self, path: &str, resets: bool) -> Result<Vec<Record>> {
        if resets && !self.certainly_a_file(path) {
            // A directory: its recorded moves followed, and the resets
            // that changed anything under it (under its name now; a move
            // a checkpoint found is one of a file).
            let mut recs = self.follow(path, false)?;
            recs.extend(self.history_with_resets(path)?);
            recs.sort_unstable_by_key(|r| r.lsn);
            recs.dedup_by_key(|r| r.lsn);
            return Ok(recs);
        }
        let mut lsns: Vec<Lsn> = Vec::new();
        let mut cur = path.to_string();
        let mut before = Lsn(u64::MAX);
        for _ in 0..=MAX_BLAME_MOVES {
            let here: Vec<Lsn> = self
                .index
                .paths_under(&cur)
                .into_iter()
                .filter(|l| *l < before)
                .collect();
            let mut came_from = self.recorded_move_in(&here, &cur)?;
            // Or a move a checkpoint found, if it came later.
            let after_recorded = came_from.as_ref().map_or(Lsn(0), |(_, at)| *at);
            let changed_at = self.resets_changing(&cur)?;
            if resets {
                lsns.extend(changed_at.iter().filter(|r| **r < before));
            }
            for r in changed_at.into_iter().rev() {
                if r >= before {
                    continue;
                }
                if r <= after_recorded {
                    break;
                }
                let absent_before = matches!(self.entry_at(Lsn(r.0 - 1), &cur), Ok(None));
                if absent_before {
                    if let Some(from) = self.renamed_at_reset(r, &cur)? {
                        // The checkpoint that found the move is listed too.
                        lsns.push(r);
                        came_from = Some((from, r));
                    }
                    // The path's latest life began here: nothing earlier
                    // brought it.
                    break;
                }
            }
            lsns.extend(here);
            match came_from {
                Some((from, at)) => {
                    cur = from;
                    before = at;
                }
                None => break,
            }
        }
        lsns.sort_unstable();
        lsns.dedup();
        self.read_all(&lsns)
    }

    /// The latest move among the records `here` of `cur` that brought it
    /// there: the path it came from, and the move's LSN.
    fn recorded_move_in(&self, here: &[Lsn], cur: &str) -> Result<Option<(String, Lsn)>> {
        // Only records of these kinds can move a file: the others are read
        // once, at the end.
        let moving = |l: &&Lsn| {
            [EventKind::FileMove, EventKind::FilePatch]
                .iter()
                .any(|k| self.index.kind(*k).binary_search(l).is_ok())
        };
        for l in here.iter().rev().filter(moving) {
            let r = self.src.read(*l)?;
            if let Some(PathChange::MoveIn { from, .. }) = path_change(&r.event, cur) {
                return Ok(Some((from.to_string(), *l)));
            }
        }
        Ok(None)
    }

    /// [`Query::history`] and the checkpoints and rollbacks at which the
    /// file `path` changed without a record naming it: a checkpoint that
    /// captured a shell command's edit, a rollback that restored the file.
    /// `blame` credits these with the lines they brought. It costs a
    /// manifest lookup per checkpoint and rollback, where `history` reads
    /// only the path's own records.
    pub fn history_with_resets(&self, path: &str) -> Result<Vec<Record>> {
        let mut lsns = self.index.paths_under(path);
        // Only a path that is certainly a file takes the file's quick way:
        // a file at the head, or one records name that is no directory at
        // the head, and in either case with no record naming a path under
        // it. A record may name a directory itself (a rollback lists the
        // directories it created), so being named proves nothing. Anything
        // else is read as a directory, whose way also covers a file of that
        // name (a path that was both, at different times).
        if self.certainly_a_file(path) {
            lsns.extend(self.resets_changing(path)?);
        } else {
            lsns.extend(self.resets_changing_under(path)?);
        }
        lsns.sort_unstable();
        lsns.dedup();
        self.read_all(&lsns)
    }

    /// True if `path` is certainly a file: one at the head, or one records
    /// name that is no directory at the head, and in either case with no
    /// record naming a path under it (see [`Query::history_with_resets`]).
    fn certainly_a_file(&self, path: &str) -> bool {
        let head = self.index.covered();
        !self.index.names_below(path)
            && (self.entry_at(head, path).is_ok_and(|e| e.is_some())
                || (!self.index.path(path).is_empty() && !self.is_dir_at(head, path)))
    }

    /// The checkpoints and rollbacks at which the file `path` changed (see
    /// [`Query::history_with_resets`]). One manifest lookup per reset, and
    /// a walk back only where the path's own records lie between two; a
    /// reset whose manifest retention discarded is passed over.
    fn resets_changing(&self, path: &str) -> Result<Vec<Lsn>> {
        let events = self.index.path(path);
        // The file's contents at `at` (`None` past retention's horizon).
        let blob_at = |at: Lsn| match self.entry_at(at, path) {
            Ok(e) => Ok(Some(e.map(|e| e.blob))),
            Err(e) if self.beyond_retention(&e) => Ok(None),
            Err(e) => Err(e),
        };
        let mut out = Vec::new();
        // The file's contents just after the previous reset, if known.
        let mut after_prev: Option<Option<BlobHash>> = None;
        let mut prev_lsn = Lsn(0);
        for r in self.index.resets() {
            let events_between =
                events.partition_point(|l| *l < r.lsn) > events.partition_point(|l| *l <= prev_lsn);
            prev_lsn = r.lsn;
            let before = match after_prev {
                Some(b) if !events_between => Some(b),
                _ => blob_at(Lsn(r.lsn.0 - 1))?,
            };
            let after = blob_at(r.lsn)?;
            if let (Some(b), Some(a)) = (before, after) {
                if a != b {
                    out.push(r.lsn);
                }
            }
            after_prev = after;
        }
        Ok(out)
    }

    /// The checkpoints and rollbacks at which anything at or under `dir`
    /// changed: the part of the tree under it compared just before and at
    /// each (two trees per checkpoint and rollback, so slower than a
    /// file's). A reset whose manifest retention discarded is passed over.
    fn resets_changing_under(&self, dir: &str) -> Result<Vec<Lsn>> {
        let scope = [dir.to_string()];
        let under = |at: Lsn| -> Result<Option<Tree>> {
            match self.tree_at_lsn(at) {
                Ok(mut t) => {
                    t.retain(|p, _| in_scope(p, &scope));
                    Ok(Some(t))
                }
                Err(e) if self.beyond_retention(&e) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let mut out = Vec::new();
        for r in self.index.resets() {
            if let (Some(b), Some(a)) = (under(Lsn(r.lsn.0 - 1))?, under(r.lsn)?) {
                if a != b {
                    out.push(r.lsn);
                }
            }
        }
        Ok(out)
    }
}
