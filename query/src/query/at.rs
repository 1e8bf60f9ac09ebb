//! The workspace at a point: a path's entry, the whole tree, a file's
//! bytes, and what a checkpoint could not capture, read from checkpoint
//! manifests and the file records after them.

use cairn_codec::{BlobHash, CheckpointId, EventKind, Lsn};
use cairn_snapshot::checkpoint::NotCaptured;

use crate::error::{QueryError, Result};
use crate::point::Point;
use crate::replay::{apply_paths, history_only, path_change, tree_change, PathChange, TreeChange};
use crate::source::{EntryKind, Record, Tree, TreeEntry};

use super::*;

impl Query<'_> {
    fn manifest_entry(&self, root: &BlobHash, path: &str, lsn: Lsn) -> Result<Option<TreeEntry>> {
        self.manifests
            .entry(root, path)
            .map_err(|e| self.manifest_error(lsn, e.to_string()))
    }

    fn manifest_tree(&self, root: &BlobHash, lsn: Lsn) -> Result<Tree> {
        self.manifests
            .tree(root)
            .map_err(|e| self.manifest_error(lsn, e.to_string()))
    }

    /// Why the manifest read at the record `lsn` may be gone: retention
    /// discarded that checkpoint, or the one that rollback restored. Gives
    /// the checkpoint and the LSN of its `checkpoint.discard`.
    fn retention_loss(&self, lsn: Lsn) -> Option<(CheckpointId, Lsn)> {
        let discarded = |id: CheckpointId| {
            let at = self.index.checkpoint(id)?.discarded_at?;
            Some((id, at))
        };
        discarded(CheckpointId(lsn)).or_else(|| {
            let r = self.src.read(lsn).ok()?;
            let t = r
                .event
                .target
                .filter(|_| r.event.kind == EventKind::Rollback)?;
            discarded(t)
        })
    }

    /// True if `e` is a manifest retention gave up (see `retention_loss`).
    pub(super) fn beyond_retention(&self, e: &QueryError) -> bool {
        matches!(e, QueryError::Manifest { lsn, .. } if self.retention_loss(*lsn).is_some())
    }

    /// The manifest of the record at `lsn` could not be read: says why
    /// when retention discarded the checkpoint it is (or restored) and gc
    /// removed its manifest.
    fn manifest_error(&self, lsn: Lsn, detail: String) -> QueryError {
        let detail = match self.retention_loss(lsn) {
            Some((c, at)) if c.0 == lsn => format!(
                "checkpoint {c} was discarded at LSN {at} ({}) and gc removed its manifest, so the state there and until the next checkpoint is no longer kept ({detail})",
                self.discarded_by(at)
            ),
            Some((c, at)) => format!(
                "it restored checkpoint {c}, which was discarded at LSN {at} ({}) and gc removed, so the state there and until the next checkpoint is no longer kept ({detail})",
                self.discarded_by(at)
            ),
            None => detail,
        };
        QueryError::Manifest { lsn, detail }
    }

    /// Who wrote the `checkpoint.discard` record at `at`: retention (gc)
    /// starts its text with "retention: "; anything else was recorded.
    fn discarded_by(&self, at: Lsn) -> &'static str {
        cairn_snapshot::discarded_by_words(
            self.src
                .read(at)
                .is_ok_and(|r| cairn_snapshot::discarded_by_retention(&r.event)),
        )
    }

    /// `path`'s entry just after LSN `at`, from the indexes: the last change
    /// to the path since the last tree reset, else the reset's manifest.
    pub fn entry_at(&self, at: Lsn, path: &str) -> Result<Option<TreeEntry>> {
        let mut path = path.to_string();
        let mut at = at;
        // Contents set by a later write, while the mode is still being looked for.
        let mut blob: Option<BlobHash> = None;
        'outer: loop {
            let reset = self.index.last_reset(at);
            let lo = reset.map_or(Lsn(0), |r| r.lsn);
            let lsns = self.index.path(&path);
            let end = lsns.partition_point(|l| *l <= at);
            let start = lsns.partition_point(|l| *l <= lo);
            for &l in lsns[start..end].iter().rev() {
                let r = self.src.read(l)?;
                match step_back(&r.event, &path, &mut blob) {
                    Step::On => {}
                    Step::Removed => return Ok(finish(blob, None)),
                    Step::MovedFrom(from) => {
                        path = from;
                        at = Lsn(l.0 - 1);
                        continue 'outer;
                    }
                }
            }
            let base = match reset {
                None => None,
                Some(r) if r.scope.touches(&path) => {
                    match self.manifest_entry(&r.root, &path, r.lsn) {
                        Ok(e) => e,
                        // Written since: only the mode was looked for there.
                        Err(e) if blob.is_some() && self.beyond_retention(&e) => None,
                        Err(e) => return Err(e),
                    }
                }
                Some(r) => {
                    at = Lsn(r.lsn.0 - 1);
                    continue 'outer;
                }
            };
            return Ok(finish(blob, base));
        }
    }

    /// The tree at LSN `at`: the last reset's manifest, then the file
    /// events after it folded in.
    pub fn tree_at_lsn(&self, at: Lsn) -> Result<Tree> {
        let (mut tree, from) = match self.index.last_reset(at) {
            None => (Tree::new(), Lsn::FIRST),
            Some(r) => {
                let t = self.manifest_tree(&r.root, r.lsn)?;
                let t = if r.scope.is_all() {
                    t
                } else {
                    let mut before = self.tree_at_lsn(Lsn(r.lsn.0 - 1))?;
                    before.retain(|p, _| !r.scope.touches(p));
                    before.extend(t.into_iter().filter(|(p, _)| r.scope.touches(p)));
                    before
                };
                (t, r.lsn.next())
            }
        };
        if from <= at {
            for r in self.src.iter_from(from) {
                let r = r?;
                if r.lsn > at {
                    break;
                }
                if let TreeChange::Paths(v) = tree_change(&r.event) {
                    apply_paths(&mut tree, &v);
                }
            }
        }
        Ok(tree)
    }

    /// The files that were in the workspace at `at` but whose contents no
    /// record holds (so they are absent from [`Query::tree_at_lsn`]): those
    /// the last checkpoint at or before `at` could not capture (too large
    /// or unreadable then: its `meta.not_captured`), carried through a
    /// rollback for the paths it left as they were (its `meta.kept`, those
    /// outside its paths, and those neither tree held), less those a later
    /// record up to `at` wrote, deleted or moved. The same answer for a
    /// checkpoint's id, its LSN, `head` or a time, as the tree is. A
    /// checkpoint names at most `MAX_NOT_CAPTURED_NAMED` of them.
    pub fn not_captured_at_lsn(&self, at: Lsn) -> Result<Vec<NotCaptured>> {
        let Some(reset) = self.index.last_reset(at) else {
            return Ok(Vec::new());
        };
        not_captured_since_reset(
            reset.lsn,
            &|l| self.src.read(l),
            &|| {
                let mut before = self.not_captured_at_lsn(Lsn(reset.lsn.0 - 1))?;
                if !before.is_empty() {
                    let tree = self.tree_at_lsn(reset.lsn)?;
                    before.retain(|n| !tree.contains_key(&n.path));
                }
                Ok(before)
            },
            // By the path index: no other record is read.
            &|p, after, into| {
                into.extend(
                    self.index
                        .path(p)
                        .iter()
                        .copied()
                        .filter(|l| *l > after && *l <= at),
                );
                Ok(())
            },
        )
    }

    /// [`Query::not_captured_at_lsn`] at a point.
    pub fn not_captured_at(&self, p: Point) -> Result<Vec<NotCaptured>> {
        self.not_captured_at_lsn(self.resolve(p)?)
    }

    /// The tree (every path with its blob, mode and kind) at a point.
    pub fn tree_at(&self, p: Point) -> Result<Tree> {
        self.tree_at_lsn(self.resolve(p)?)
    }

    /// A file's bytes at a point (for a symlink: its target).
    pub fn file_at(&self, p: Point, path: &str) -> Result<Vec<u8>> {
        let at = self.resolve(p)?;
        match self.entry_at(at, path)? {
            Some(e) => self.blobs.get(&e.blob),
            None => Err(self.not_a_file(at, path)),
        }
    }

    /// The error for `path`, which is no file at `at`: it is a directory
    /// (some file lies under it), or it does not exist.
    pub fn not_a_file(&self, at: Lsn, path: &str) -> QueryError {
        if let Some(why) = history_only(path) {
            QueryError::Invalid(format!("`{path}` {why}"))
        } else if self.is_dir_at(at, path) {
            QueryError::Invalid(format!(
                "`{path}` is a directory at LSN {at}, not a file: `cairn tree` lists its files"
            ))
        } else {
            QueryError::NoSuchPath {
                path: path.to_string(),
                at,
            }
        }
    }

    /// The record that last wrote `path` at or before `at`, if it did so
    /// without carrying the contents (a `file.write` with no `after`, as
    /// a platform records after `cairn track`) and no checkpoint or
    /// rollback has captured the path since: what [`entry_at`](Self::entry_at)
    /// gives for it is then the contents from before that record (or
    /// nothing, for a file it created), until a checkpoint captures them.
    pub fn unrecorded_write(&self, at: Lsn, path: &str) -> Result<Option<Record>> {
        if history_only(path).is_some() {
            return Ok(None);
        }
        let lsns = self.index.path(path);
        let Some(&last) = lsns[..lsns.partition_point(|l| *l <= at)].last() else {
            return Ok(None);
        };
        // The last reset at or before `at` that set this path.
        let mut reset = self.index.last_reset(at);
        while let Some(r) = reset.filter(|r| !r.scope.touches(path)) {
            reset = r
                .lsn
                .0
                .checked_sub(1)
                .and_then(|l| self.index.last_reset(Lsn(l)));
        }
        if reset.is_some_and(|r| r.lsn >= last) {
            return Ok(None);
        }
        let rec = self.src.read(last)?;
        let e = &rec.event;
        let writes = e.ok
            && (e.kind.is_file_op() || matches!(e.kind, EventKind::Apply | EventKind::Undo))
            && e.kind != EventKind::FileDelete;
        Ok((writes && path_change(e, path).is_none()).then_some(rec))
    }

    /// Every path [`unrecorded_write`](Self::unrecorded_write) finds at
    /// `to` whose record comes after `from`: the files written between
    /// the two points whose new contents no record holds yet. Sorted by
    /// path.
    pub fn unrecorded_writes(&self, from: Lsn, to: Lsn) -> Result<Vec<(String, Record)>> {
        let mut out = Vec::new();
        for (path, lsns) in self.index.paths() {
            // Only paths some record names in (from, to].
            let i = lsns.partition_point(|l| *l <= from);
            if lsns.get(i).is_none_or(|l| *l > to) {
                continue;
            }
            if let Some(rec) = self.unrecorded_write(to, path)? {
                if rec.lsn > from {
                    out.push((path.to_string(), rec));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// True if some file lies under `path` at `at` (so it is a directory
    /// there). Reads the whole tree at `at`; false if it cannot be read.
    pub(super) fn is_dir_at(&self, at: Lsn, path: &str) -> bool {
        let dir = format!("{}/", path.trim_end_matches('/'));
        dir != "/"
            && self.tree_at_lsn(at).is_ok_and(|t| {
                t.range(dir.clone()..)
                    .next()
                    .is_some_and(|(p, _)| p.starts_with(&dir))
            })
    }
}

/// What a record met walking a path's history back from a point does to
/// the search for its entry (see [`step_back`]).
pub(super) enum Step {
    /// Go on to the path's next older record.
    On,
    /// The path was removed here: nothing older matters.
    Removed,
    /// The path came from this one: go on with its history before here.
    MovedFrom(String),
}

/// Applies the record `e` to the search for `path`'s entry, newest record
/// first: the first contents set win (`blob`); a move continues with its
/// source. Shared by the in-memory and the index-file walks.
pub(super) fn step_back(e: &cairn_codec::Event, path: &str, blob: &mut Option<BlobHash>) -> Step {
    match path_change(e, path) {
        None => Step::On,
        Some(PathChange::Set(b)) => {
            blob.get_or_insert(b);
            Step::On
        }
        Some(PathChange::Remove) => Step::Removed,
        Some(PathChange::MoveIn { from, after }) => {
            if blob.is_none() {
                *blob = after;
            }
            Step::MovedFrom(from.to_string())
        }
    }
}

/// The entry of contents `blob` (if a write set them) over `base`'s mode.
pub(super) fn finish(blob: Option<BlobHash>, base: Option<TreeEntry>) -> Option<TreeEntry> {
    match (blob, base) {
        (Some(b), Some(e)) => Some(TreeEntry {
            blob: b,
            mode: e.mode,
            kind: EntryKind::File,
        }),
        (Some(b), None) => Some(TreeEntry::file(b)),
        (None, base) => base,
    }
}

/// Adds to a set the LSNs after an LSN, up to a point, of the records
/// naming a path (see [`not_captured_since_reset`]).
pub(crate) type Naming<'a> =
    dyn Fn(&str, Lsn, &mut std::collections::BTreeSet<Lsn>) -> Result<()> + 'a;

/// The files not captured at a point, from the last reset (checkpoint or
/// rollback) at or before it, at `reset`: the reset's own list, less
/// those a later record up to the point wrote, deleted or moved; a move
/// of one without new contents leaves its new path not captured too. The
/// in-memory index and the index files answer it alike through:
/// - `read`: a record;
/// - `before_rollback`: the list just before the reset when it is a
///   rollback, less the paths its tree holds (a path it set takes its
///   target's captured entry; a file not captured before it that its tree
///   lacks was left as it was: kept, outside its paths, or in neither tree,
///   so in no plan);
/// - `naming`: adds to a set the LSNs after an LSN, up to the point, of
///   the records naming a path.
pub(crate) fn not_captured_since_reset(
    reset: Lsn,
    read: &dyn Fn(Lsn) -> Result<Record>,
    before_rollback: &dyn Fn() -> Result<Vec<NotCaptured>>,
    naming: &Naming<'_>,
) -> Result<Vec<NotCaptured>> {
    let rec = read(reset)?;
    let mut list: Vec<NotCaptured> = if rec.event.kind == EventKind::CheckpointCreate {
        NotCaptured::named_by(&rec.event)
    } else if reset.0 <= 1 {
        Vec::new()
    } else {
        before_rollback()?
    };
    // The records after the reset that name one of the paths, in order; a
    // path a move marks brings its own.
    let mut later = std::collections::BTreeSet::new();
    for n in &list {
        naming(&n.path, reset, &mut later)?;
    }
    while let Some(l) = later.pop_first() {
        let r = read(l)?;
        let TreeChange::Paths(changes) = tree_change(&r.event) else {
            continue;
        };
        for (path, c) in &changes {
            // A move from a file not captured leaves its new path not
            // captured too, unless the record gives the new contents.
            let moved = match c {
                PathChange::MoveIn { from, after: None } => {
                    list.iter().find(|n| n.path == *from).map(|n| n.why.clone())
                }
                _ => None,
            };
            list.retain(|n| n.path != *path);
            if let Some(why) = moved {
                naming(path, l, &mut later)?;
                list.push(NotCaptured {
                    path: path.to_string(),
                    why,
                });
            }
        }
    }
    list.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(list)
}
