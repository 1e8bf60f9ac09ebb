//! Time-travel queries over a record source, its blobs and manifests, and
//! the indexes: state at a point, file contents, diffs, history, blame,
//! filtered listings and branches. All read-only.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use similar::udiff::UnifiedHunkHeader;
use similar::{ChangeTag, DiffOp, TextDiff};

use cairn_codec::{BlobHash, CheckpointId, EventKind, Lsn, Timestamp};
use cairn_snapshot::checkpoint::NotCaptured;

use crate::error::{QueryError, Result};
use crate::export::{ExportStats, Exporter, Format};
use crate::filter::Filter;
use crate::index::Index;
use crate::point::Point;
use crate::renames::{self, Rename};
use crate::replay::{
    apply_paths, in_scope, path_change, tree_change, PathChange, SessionState, TreeChange,
};
use crate::source::{BlobSource, EntryKind, ManifestSource, Record, RecordSource, Tree, TreeEntry};

/// A file is treated as binary when a NUL byte appears in its first this
/// many bytes (git's heuristic) or when it is not UTF-8.
pub const BINARY_SNIFF_BYTES: usize = 8000;

/// The largest file `diff` reads to compare line by line: past this, on
/// either side, the file is reported as changed without being read (two
/// versions of a large model or dataset would otherwise be held in memory
/// whole, for a line diff nobody reads).
pub const MAX_LINE_DIFF_BYTES: u64 = 16 << 20;

/// The longest a line diff (of `diff` or `blame`) searches for the
/// smallest edit: past it the diff is finished by approximation, still a
/// correct diff, only not minimal. Two wholly different files of a few
/// megabytes otherwise take minutes (the search is O(N·D)).
pub const LINE_DIFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The lines of `text` as `diff` compares them and `blame` numbers them,
/// each with its ending: split after each `\n` only, as git splits them.
/// A `\r\n` line is one line whose text ends in `\r`, and a lone `\r`
/// stays inside its line (the `similar` crate's own line split also ends
/// a line there, which shifted blame's line numbers and broke a unified
/// diff's lines apart). A last line without `\n` is a line too.
pub fn split_lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The line diff of `old` and `new` (lines as [`split_lines`] gives them),
/// bounded by [`LINE_DIFF_TIMEOUT`].
pub fn line_diff<'a>(old: &'a [&'a str], new: &'a [&'a str]) -> TextDiff<'a, 'a, 'a, str> {
    TextDiff::configure()
        .timeout(LINE_DIFF_TIMEOUT)
        .diff_slices(old, new)
}

/// How many moves blame follows back through, so a path moved back and
/// forth thousands of times cannot exhaust the stack.
pub const MAX_BLAME_MOVES: usize = 64;

/// Lines of context around each hunk of a unified diff (the usual 3).
pub const DIFF_CONTEXT_LINES: usize = 3;

/// How a path differs between two points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiffStatus {
    /// Only at the second point.
    Added,
    /// Only at the first point.
    Removed,
    /// At both, with different contents, mode or kind.
    Modified,
}

/// One path's difference between two points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDiff {
    /// The path.
    pub path: String,
    /// Added, removed or modified.
    pub status: DiffStatus,
    /// The unified diff, for text files whose contents differ.
    pub unified: Option<String>,
    /// True if either side is binary (reported, not dumped).
    pub binary: bool,
    /// True if either side is larger than [`MAX_LINE_DIFF_BYTES`]: reported
    /// as changed, neither read nor compared line by line.
    pub too_large: bool,
    /// The entry at the first point: its blob, mode and kind (`None`
    /// where the path is not in that point's tree).
    pub old: Option<TreeEntry>,
    /// The entry at the second point: its blob, mode and kind.
    pub new: Option<TreeEntry>,
    /// On an added path: the removed path of this diff that held the same
    /// contents, so the file was moved here (see [`crate::renames`]).
    pub renamed_from: Option<String>,
    /// On a removed path: the added path of this diff that holds its
    /// contents now.
    pub renamed_to: Option<String>,
    /// On both ends of a rename: how alike the two files are, in percent
    /// (100: the same contents; see [`crate::renames`]).
    pub similarity: Option<u8>,
    /// On the added end of a rename with edits (similarity under 100, text
    /// on both sides): the unified diff from the old path's contents to
    /// the new path's, headed `a/OLD` and `b/NEW` as git's.
    pub rename_unified: Option<String>,
}

/// A path filter of [`Query::diff`], checked: workspace-relative as
/// records name paths (a trailing `/` for a directory is allowed).
fn diff_filter(p: &str) -> Result<String> {
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() || !trimmed.split('/').all(cairn_snapshot::relpath::valid_name) {
        return Err(QueryError::Invalid(format!(
            "diff path `{}` is not a workspace-relative path (like `src/main.rs` or `src/`): no empty, `.` or `..` parts, not absolute",
            p.escape_debug()
        )));
    }
    Ok(trimmed.to_string())
}

/// The unified diff of two files' bytes (read as UTF-8, lossily) under
/// the headers `a` and `b`, with [`DIFF_CONTEXT_LINES`] of context, as
/// `git diff` writes it: lines split at `\n` only ([`split_lines`]), each
/// written with its own ending (a `\r` in or at the end of a line is kept
/// as it is), and a last line without `\n` followed by `\ No newline at
/// end of file`. Empty when no line differs.
fn unified_diff(old: &[u8], new: &[u8], a: &str, b: &str) -> String {
    let (os, ns) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
    let (ol, nl) = (split_lines(&os), split_lines(&ns));
    let diff = line_diff(&ol, &nl);
    let mut out = String::new();
    for hunk in diff.grouped_ops(DIFF_CONTEXT_LINES) {
        if hunk.is_empty() {
            continue;
        }
        if out.is_empty() {
            out.push_str(&format!("--- {a}\n+++ {b}\n"));
        }
        out.push_str(&format!("{}\n", UnifiedHunkHeader::new(&hunk)));
        for change in hunk.iter().flat_map(|op| diff.iter_changes(op)) {
            push_diff_line(&mut out, change.tag(), change.value());
        }
    }
    out
}

/// Appends one line of a hunk: its sign, then the line with its ending;
/// a last line without `\n` gets one, and git's note that it had none.
fn push_diff_line(out: &mut String, tag: ChangeTag, line: &str) {
    out.push_str(&tag.to_string());
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

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

/// A line of [`split_lines`] without its ending: the `\n` or `\r\n` that
/// ends it, not a lone `\r` (which is text) nor a second `\r`.
pub fn line_text(line: &str) -> &str {
    line.strip_suffix('\n')
        .map_or(line, |l| l.strip_suffix('\r').unwrap_or(l))
}

/// The attribution of a line that predates the log's history (see
/// [`BlameLine::before_history`]): no record has LSN 0.
const BEFORE_HISTORY: Lsn = Lsn(0);

/// A node of the branch graph (a checkpoint or a rollback) as listed by
/// [`Query::branches`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// The record's LSN (for a checkpoint, its id is `c<lsn>`).
    pub lsn: Lsn,
    /// `checkpoint.create` or `rollback`.
    pub kind: EventKind,
    /// Its session.
    pub session: String,
    /// What it continues from.
    pub parent: Option<Lsn>,
    /// The checkpoint's label.
    pub label: Option<String>,
    /// When.
    pub ts: Timestamp,
    /// How many nodes continue from it.
    pub children: usize,
}

/// True if `bytes` look binary (see [`BINARY_SNIFF_BYTES`]).
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) || std::str::from_utf8(bytes).is_err()
}

/// Queries over a log, its blobs and manifests, answered from `index`
/// (which must cover the log up to the point asked: `head` is the last LSN
/// the index covers).
pub struct Query<'a> {
    src: &'a dyn RecordSource,
    blobs: &'a dyn BlobSource,
    manifests: &'a dyn ManifestSource,
    index: &'a Index,
}

impl<'a> Query<'a> {
    /// Queries over these sources.
    pub fn new(
        src: &'a dyn RecordSource,
        blobs: &'a dyn BlobSource,
        manifests: &'a dyn ManifestSource,
        index: &'a Index,
    ) -> Query<'a> {
        Query {
            src,
            blobs,
            manifests,
            index,
        }
    }

    /// The index in use.
    pub fn index(&self) -> &Index {
        self.index
    }

    /// The LSN a point stands for.
    pub fn resolve(&self, p: Point) -> Result<Lsn> {
        let head = self.index.covered();
        match p {
            Point::Head => Ok(head),
            Point::Lsn(l) if l <= head => Ok(l),
            Point::Lsn(l) => Err(QueryError::BadPoint {
                point: p.to_string(),
                reason: format!("LSN {l} is past the head of the log (LSN {head})"),
            }),
            Point::Checkpoint(c) => match self.index.checkpoint(c) {
                Some(_) => Ok(c.0),
                None => Err(self.no_checkpoint(c)),
            },
            Point::Time(t) => Ok(self.index.lsn_at_time(t)),
        }
    }

    /// What a time point resolves to, with the records it leaves out where
    /// the log's times go backwards (see [`Point::Time`]); `None` for any
    /// other point.
    pub fn time_point(&self, p: Point) -> Option<crate::point::TimePoint> {
        match p {
            Point::Time(t) => Some(self.index.time_point(t)),
            _ => None,
        }
    }

    /// True if `c` names a `checkpoint.create` record without a manifest
    /// (imported from another tool's audit log): a record, but no tree.
    pub fn is_imported_checkpoint(&self, c: CheckpointId) -> bool {
        c.0 <= self.index.covered()
            && self
                .src
                .read(c.0)
                .is_ok_and(|r| cairn_snapshot::checkpoint::is_imported_checkpoint(&r.event))
    }

    /// The `checkpoint.create` records without a manifest (imported from
    /// another tool's audit log) of `session`, or of every session, in LSN
    /// order: records of the log, but no checkpoints of this store.
    pub fn imported_checkpoints(&self, session: Option<&str>) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        for &l in self.index.kind(EventKind::CheckpointCreate) {
            if self.index.checkpoint(CheckpointId(l)).is_some() {
                continue;
            }
            let r = self.src.read(l)?;
            if session.is_none_or(|s| r.event.session == s)
                && cairn_snapshot::checkpoint::is_imported_checkpoint(&r.event)
            {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Where the checkpoint record without a manifest at `c` came from, in
    /// words: another tool's audit log, or (its `meta.collected` says so)
    /// a copy of a checkpoint whose files gc had collected.
    fn imported_checkpoint_origin(&self, c: CheckpointId) -> String {
        let record = self.src.read(c.0).ok();
        let note = record
            .as_ref()
            .and_then(|r| cairn_snapshot::checkpoint::collected_note(&r.event));
        match note.map(|n| n.get("checkpoint").and_then(|c| c.as_str())) {
            None => "imported from another tool's audit log".to_string(),
            Some(Some(of)) => {
                format!("imported as a copy of checkpoint {of}, whose files gc had collected")
            }
            Some(None) => "imported without its files, which gc had collected".to_string(),
        }
    }

    /// The error for a checkpoint id this store has no checkpoint for:
    /// what an imported checkpoint record is, or that there is none.
    fn no_checkpoint(&self, c: CheckpointId) -> QueryError {
        if self.is_imported_checkpoint(c) {
            QueryError::BadPoint {
                point: c.to_string(),
                reason: format!(
                    "the record at LSN {} is a checkpoint record without a manifest ({}): it holds no tree, and nothing branches from it; use @{} for the tree by the records up to it",
                    c.0,
                    self.imported_checkpoint_origin(c),
                    c.0
                ),
            }
        } else {
            QueryError::NoSuchCheckpoint { id: c.to_string() }
        }
    }

    fn candidates(&self, f: &Filter) -> Option<Vec<Lsn>> {
        let under = f.path.as_deref().map(|p| self.index.paths_under(p));
        // The shortest list of the indexed conditions that are set.
        let best = [
            f.session.as_deref().map(|s| self.index.session(s)),
            f.run.as_deref().map(|r| self.index.run(r)),
            f.kind.map(|k| self.index.kind(k)),
            under.as_deref(),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|l| l.len());
        match best {
            Some(b) => Some(b.to_vec()),
            None if f.since.is_some() || f.until.is_some() => {
                Some(self.index.time_range(f.since, f.until))
            }
            None => None,
        }
    }

    /// Calls `each` with every record `f` selects, in the filter's order,
    /// up to its limit, reading only the records an index points at when
    /// one applies. `each` returns false to stop early.
    pub fn scan(&self, f: &Filter, each: &mut dyn FnMut(Record) -> Result<bool>) -> Result<()> {
        let limit = f.limit.unwrap_or(usize::MAX);
        let head = self.index.covered();
        // The LSN bounds, where no index list applies: where to start and end.
        let Some((first, last)) = f.lsn_bounds(head) else {
            return Ok(());
        };
        let mut n = 0;
        let mut visit = |r: Record| -> Result<bool> {
            if n >= limit {
                return Ok(false);
            }
            if f.matches(&r) {
                n += 1;
                if !each(r)? {
                    return Ok(false);
                }
            }
            Ok(n < limit)
        };
        match self.candidates(f) {
            Some(lsns) => {
                let lsns = lsns.into_iter().filter(|l| *l <= head);
                let lsns: Box<dyn Iterator<Item = Lsn>> = if f.newest_first {
                    Box::new(lsns.rev())
                } else {
                    Box::new(lsns)
                };
                for l in lsns {
                    if !visit(self.src.read(l)?)? {
                        break;
                    }
                }
            }
            None if f.newest_first => {
                for l in (first.0..=last.0).rev() {
                    if !visit(self.src.read(Lsn(l))?)? {
                        break;
                    }
                }
            }
            None => {
                for r in self.src.iter_from(first) {
                    let r = r?;
                    if r.lsn > last || !visit(r)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// The records `f` selects.
    pub fn list(&self, f: &Filter) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        self.scan(f, &mut |r| {
            out.push(r);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Exports the records `f` selects (see [`crate::export`]), using the indexes.
    pub fn export(&self, f: &Filter, format: Format, out: &mut dyn Write) -> Result<ExportStats> {
        let mut ex = Exporter::new(self.blobs, format, out);
        if self.candidates(f).is_none() && !f.newest_first {
            // A scan of the whole log: each body is decoded in place and
            // projected without building an owned event.
            let head = self.index.covered();
            let limit = f.limit.unwrap_or(usize::MAX);
            let mut n = 0;
            if limit > 0 {
                let Some((first, last)) = f.lsn_bounds(head) else {
                    return ex.finish();
                };
                self.src.for_each_ref(first, &mut |lsn, chain, e| {
                    if lsn > last {
                        return Ok(false);
                    }
                    if f.lsn_in_range(lsn) && f.matches_ref(e) {
                        ex.write_ref(lsn, chain, e)?;
                        n += 1;
                    }
                    Ok(n < limit)
                })?;
            }
            return ex.finish();
        }
        self.scan(f, &mut |r| {
            ex.write(&r)?;
            Ok(true)
        })?;
        ex.finish()
    }

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
    fn beyond_retention(&self, e: &QueryError) -> bool {
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
        let finish = |blob: Option<BlobHash>, base: Option<TreeEntry>| match (blob, base) {
            (Some(b), Some(e)) => Some(TreeEntry {
                blob: b,
                mode: e.mode,
                kind: EntryKind::File,
            }),
            (Some(b), None) => Some(TreeEntry::file(b)),
            (None, base) => base,
        };
        'outer: loop {
            let reset = self.index.last_reset(at);
            let lo = reset.map_or(Lsn(0), |r| r.lsn);
            let lsns = self.index.path(&path);
            let end = lsns.partition_point(|l| *l <= at);
            let start = lsns.partition_point(|l| *l <= lo);
            for &l in lsns[start..end].iter().rev() {
                let r = self.src.read(l)?;
                match path_change(&r.event, &path) {
                    None => {}
                    Some(PathChange::Set(b)) => {
                        blob.get_or_insert(b);
                    }
                    Some(PathChange::Remove) => return Ok(finish(blob, None)),
                    Some(PathChange::MoveIn { from, after }) => {
                        if blob.is_none() {
                            blob = after;
                        }
                        path = from.to_string();
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
        let rec = self.src.read(reset.lsn)?;
        let mut list: Vec<NotCaptured> = if rec.event.kind == EventKind::CheckpointCreate {
            NotCaptured::named_by(&rec.event)
        } else if reset.lsn.0 <= 1 {
            Vec::new()
        } else {
            // A rollback: a path it set takes its target's captured entry;
            // a file not captured before it that its tree lacks was left
            // as it was (kept, outside its paths, or in neither tree, so
            // in no plan).
            let mut before = self.not_captured_at_lsn(Lsn(reset.lsn.0 - 1))?;
            if !before.is_empty() {
                let tree = self.tree_at_lsn(reset.lsn)?;
                before.retain(|n| !tree.contains_key(&n.path));
            }
            before
        };
        // The records after the reset, up to `at`, that name one of the
        // paths (by the path index: no other record is read), in order; a
        // path a move marks brings its own.
        let naming = |p: &str, after: Lsn| {
            self.index
                .path(p)
                .iter()
                .copied()
                .filter(move |l| *l > after && *l <= at)
        };
        let mut later: std::collections::BTreeSet<Lsn> = list
            .iter()
            .flat_map(|n| naming(&n.path, reset.lsn))
            .collect();
        while let Some(l) = later.pop_first() {
            let r = self.src.read(l)?;
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
                    later.extend(naming(path, l));
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
        if self.is_dir_at(at, path) {
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
    fn is_dir_at(&self, at: Lsn, path: &str) -> bool {
        let dir = format!("{}/", path.trim_end_matches('/'));
        dir != "/"
            && self.tree_at_lsn(at).is_ok_and(|t| {
                t.range(dir.clone()..)
                    .next()
                    .is_some_and(|(p, _)| p.starts_with(&dir))
            })
    }

    /// The differences between points `a` and `b`: the whole tree, or only
    /// `paths` (each a file or a directory prefix, workspace-relative as
    /// records name them: `src/a.rs`, `src/`).
    ///
    /// A path that is not workspace-relative (empty, absolute, or with a
    /// `.` or `..` component) is refused, and so is one that names nothing
    /// at either point (no file there or under it, none the checkpoints
    /// there could not capture, no record up to the later point naming
    /// it), as a rollback limited to it is: an empty answer would read as
    /// "no differences".
    pub fn diff(&self, a: Point, b: Point, paths: &[String]) -> Result<Vec<FileDiff>> {
        let (la, lb) = (self.resolve(a)?, self.resolve(b)?);
        let paths: Vec<String> = paths
            .iter()
            .map(|p| diff_filter(p))
            .collect::<Result<_>>()?;
        let paths = paths.as_slice();
        let mut pairs: Vec<(String, Option<TreeEntry>, Option<TreeEntry>)> = Vec::new();
        let mut whole = paths.is_empty();
        for p in paths {
            let (ea, eb) = (self.entry_at(la, p)?, self.entry_at(lb, p)?);
            if ea.is_none() && eb.is_none() {
                // Not a file at either point: treat as a directory prefix.
                whole = true;
                pairs.clear();
                break;
            }
            pairs.push((p.clone(), ea, eb));
        }
        if whole {
            let (ta, tb) = (self.tree_at_lsn(la)?, self.tree_at_lsn(lb)?);
            let mut keys: Vec<&String> = ta.keys().chain(tb.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in &keys {
                if in_scope(k, paths) {
                    pairs.push(((*k).clone(), ta.get(*k).copied(), tb.get(*k).copied()));
                }
            }
            let mut uncaptured = self.not_captured_at_lsn(la)?;
            uncaptured.extend(self.not_captured_at_lsn(lb)?);
            for p in paths {
                let names = |k: &str| crate::replay::in_scope(k, std::slice::from_ref(p));
                // Named by a record up to the later point (one without
                // contents, say), it is no typo: the answer is empty.
                let recorded = self
                    .index
                    .paths_under(p)
                    .first()
                    .is_some_and(|l| *l <= la.max(lb));
                if !keys.iter().any(|k| names(k))
                    && !uncaptured.iter().any(|n| names(&n.path))
                    && !recorded
                {
                    return Err(QueryError::Invalid(format!(
                        "`{p}` names no file at LSN {la} or at LSN {lb} (nor a directory holding one)"
                    )));
                }
            }
        }
        let mut out = Vec::new();
        for (path, old, new) in pairs {
            if old == new {
                continue;
            }
            let status = match (&old, &new) {
                (None, _) => DiffStatus::Added,
                (_, None) => DiffStatus::Removed,
                _ => DiffStatus::Modified,
            };
            let (mut unified, mut binary) = (None, false);
            let too_large = [old, new].iter().flatten().any(|e| {
                self.blobs
                    .len(&e.blob)
                    .is_some_and(|n| n > MAX_LINE_DIFF_BYTES)
            });
            if old.map(|e| e.blob) != new.map(|e| e.blob) && !too_large {
                let ob = old
                    .map(|e| self.blobs.get(&e.blob))
                    .transpose()?
                    .unwrap_or_default();
                let nb = new
                    .map(|e| self.blobs.get(&e.blob))
                    .transpose()?
                    .unwrap_or_default();
                binary = is_binary(&ob) || is_binary(&nb);
                if !binary {
                    let header = |side: Option<TreeEntry>, prefix: &str| match side {
                        Some(_) => format!("{prefix}/{path}"),
                        None => "/dev/null".into(),
                    };
                    unified = Some(unified_diff(&ob, &nb, &header(old, "a"), &header(new, "b")));
                }
            }
            out.push(FileDiff {
                path,
                status,
                unified,
                binary,
                too_large,
                old,
                new,
                renamed_from: None,
                renamed_to: None,
                similarity: None,
                rename_unified: None,
            });
        }
        self.mark_renames(&mut out)?;
        Ok(out)
    }

    /// Pairs the removed and added paths of a diff that hold the same or
    /// similar contents (see [`crate::renames`]) and marks both ends; a
    /// similar pair's added end gets the diff from the old path's contents.
    fn mark_renames(&self, diffs: &mut [FileDiff]) -> Result<()> {
        let ends = |status: DiffStatus| {
            diffs
                .iter()
                .filter(move |d| d.status == status)
                .filter_map(|d| Some((d.path.as_str(), d.old.or(d.new)?)))
        };
        let found = renames::pair(
            ends(DiffStatus::Removed),
            ends(DiffStatus::Added),
            self.blobs,
        );
        // Each end by its path, so that a directory of thousands of files
        // moved is marked in one pass, not one pass per file.
        let at: HashMap<(&str, DiffStatus), usize> = diffs
            .iter()
            .enumerate()
            .map(|(i, d)| ((d.path.as_str(), d.status), i))
            .collect();
        let marks: Vec<(usize, usize, Rename)> = found
            .into_iter()
            .filter_map(|r| {
                let from = *at.get(&(r.from.as_str(), DiffStatus::Removed))?;
                let to = *at.get(&(r.to.as_str(), DiffStatus::Added))?;
                Some((from, to, r))
            })
            .collect();
        for (from, to, r) in marks {
            if r.similarity < 100 {
                let (Some(old), Some(new)) = (diffs[from].old, diffs[to].new) else {
                    continue;
                };
                let (ob, nb) = (self.blobs.get(&old.blob)?, self.blobs.get(&new.blob)?);
                if !is_binary(&ob) && !is_binary(&nb) {
                    diffs[to].rename_unified = Some(unified_diff(
                        &ob,
                        &nb,
                        &format!("a/{}", r.from),
                        &format!("b/{}", r.to),
                    ));
                }
            }
            for end in [from, to] {
                diffs[end].similarity = Some(r.similarity);
            }
            diffs[from].renamed_to = Some(r.to);
            diffs[to].renamed_from = Some(r.from);
        }
        Ok(())
    }

    /// The path that `path` was renamed from at the reset (checkpoint or
    /// rollback) at `at`: `path` is new there and another path holding its
    /// contents is gone (see [`crate::renames`]). `None` also when the tree
    /// before `at` is past retention's horizon. Reads both whole trees, so
    /// it is asked only where a path appears at a reset.
    fn renamed_at_reset(&self, at: Lsn, path: &str) -> Result<Option<String>> {
        if at.0 <= 1 {
            return Ok(None);
        }
        let before = match self.tree_at_lsn(Lsn(at.0 - 1)) {
            Ok(t) => t,
            Err(e) if self.beyond_retention(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if before.contains_key(path) {
            return Ok(None);
        }
        let after = self.tree_at_lsn(at)?;
        if !after.contains_key(path) {
            return Ok(None);
        }
        Ok(renames::between(&before, &after, self.blobs)
            .into_iter()
            .find(|r| r.to == path)
            .map(|r| r.from))
    }

    /// Every record naming `path` (as `path`, `to_path` or in `files`), in
    /// LSN order: writes, deletes, and moves to and from it. A directory's
    /// history is that of every path under it (as [`Filter::path`] reads it).
    pub fn history(&self, path: &str) -> Result<Vec<Record>> {
        self.index
            .paths_under(path)
            .iter()
            .map(|l| self.src.read(*l))
            .collect()
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
        // Only records of these kinds can move a file: the others are read
        // once, at the end.
        let moving = |l: &Lsn| {
            [EventKind::FileMove, EventKind::FilePatch]
                .iter()
                .any(|k| self.index.kind(*k).binary_search(l).is_ok())
        };
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
            // The latest move that brought `cur` here, among its records.
            let mut came_from = None;
            for l in here.iter().rev().filter(|l| moving(l)) {
                let r = self.src.read(*l)?;
                if let Some(PathChange::MoveIn { from, .. }) = path_change(&r.event, &cur) {
                    came_from = Some((from.to_string(), *l));
                    break;
                }
            }
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
        lsns.iter().map(|l| self.src.read(*l)).collect()
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
        lsns.iter().map(|l| self.src.read(*l)).collect()
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
        let at = self.resolve(p)?;
        let entry = self
            .entry_at(at, path)?
            .ok_or_else(|| self.not_a_file(at, path))?;
        if is_binary(&self.blobs.get(&entry.blob)?) {
            return Err(QueryError::Invalid(format!(
                "`{path}` is binary at LSN {at}; blame needs text"
            )));
        }
        let mut cuts = HashSet::new();
        let (text, attr) = self.blame_attr(at, path, 0, &mut cuts)?;
        let mut cache: HashMap<Lsn, Record> = HashMap::new();
        let mut out = Vec::with_capacity(attr.len());
        let first_capture = self.index.resets().first().map(|r| r.lsn);
        for (i, (line, l)) in split_lines(&text).into_iter().zip(attr).enumerate() {
            let before_history = l == BEFORE_HISTORY;
            let l = match first_capture {
                Some(first) if before_history => first,
                _ => l,
            };
            let e = match cache.entry(l) {
                std::collections::hash_map::Entry::Occupied(o) => &o.into_mut().event,
                std::collections::hash_map::Entry::Vacant(v) => &v.insert(self.src.read(l)?).event,
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
        let mut points: Vec<Lsn> = self
            .index
            .path(path)
            .iter()
            .copied()
            .filter(|l| *l <= at)
            .collect();
        let mut r = self.index.last_reset(at);
        while let Some(reset) = r {
            points.push(reset.lsn);
            r = self.index.last_reset(Lsn(reset.lsn.0 - 1));
        }
        points.sort_unstable();
        points.dedup();
        // A rollback brings back the file as it was at its target, so its
        // lines keep the records that wrote them then: the text and
        // attribution at each rollback's target (a checkpoint, so one of
        // the points) are kept for it as the loop passes.
        let rollback_to: HashMap<Lsn, Lsn> = points
            .iter()
            .filter_map(|l| {
                let n = self.index.node(*l)?;
                let target = n.parent.filter(|t| *t < *l)?;
                (n.kind == EventKind::Rollback).then_some((*l, target))
            })
            .collect();
        let mut at_target: HashMap<Lsn, (String, Vec<Lsn>)> = rollback_to
            .values()
            .map(|t| (*t, (String::new(), Vec::new())))
            .collect();

        let mut cur_blob: Option<BlobHash> = None;
        let mut text = String::new();
        let mut attr: Vec<Lsn> = Vec::new();
        // After retention cut the history, until the next version.
        let mut after_cut = false;
        let mut prev: Option<Lsn> = None;
        let events = self.index.path(path);
        for l in points {
            // What the walk holds now is the file at the previous point:
            // kept there for a later rollback to that point.
            if let Some(kept) = prev.and_then(|p| at_target.get_mut(&p)) {
                *kept = (text.clone(), attr.clone());
            }
            prev = Some(l);
            // The record at `l`, if it is one of the path's own.
            let rec = match events.binary_search(&l) {
                Ok(_) => Some(self.src.read(l)?),
                Err(_) => None,
            };
            let reset_here = self.index.last_reset(l).is_some_and(|r| r.lsn == l);
            // A record that sets the path's contents says what they are:
            // only its mode would need the walk back through the path's
            // history that `entry_at` makes (once per version, that walk
            // made blame quadratic: 2,000 versions read 2 million records).
            // At a reset, the manifest decides.
            let change = rec.as_ref().filter(|_| !reset_here);
            let set_here = match change.and_then(|r| path_change(&r.event, path)) {
                Some(PathChange::Set(b) | PathChange::MoveIn { after: Some(b), .. }) => {
                    Some(Some(b))
                }
                Some(PathChange::Remove) => Some(None),
                _ => None,
            };
            let found = match set_here {
                Some(b) => Ok(b.map(TreeEntry::file)),
                None => self.entry_at(l, path),
            };
            let blob = match found {
                Ok(e) => e.map(|e| e.blob),
                Err(e) if self.beyond_retention(&e) => {
                    // History before this point is gone: the next version
                    // readable is where the file's known history starts.
                    cur_blob = None;
                    text.clear();
                    attr.clear();
                    after_cut = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if blob == cur_blob {
                continue;
            }
            let was_absent = cur_blob.is_none();
            cur_blob = blob;
            if blob.is_some() && std::mem::take(&mut after_cut) {
                // The first version readable after the cut: its lines were
                // written here or before (unless a record created the file
                // here, which says nothing came before).
                let created = change.is_some_and(|r| r.event.kind == EventKind::FileCreate);
                if !created {
                    cuts.insert(l);
                }
            }
            let new_text = match blob {
                None => String::new(),
                Some(b) => {
                    let bytes = self.blobs.get(&b)?;
                    if is_binary(&bytes) {
                        String::new()
                    } else {
                        String::from_utf8_lossy(&bytes).into_owned()
                    }
                }
            };
            let restored = reset_here
                .then(|| rollback_to.get(&l).and_then(|t| at_target.get(t)))
                .flatten();
            if let Some((t, a)) = restored.filter(|_| blob.is_some()) {
                // A rollback: the lines it brought back are compared with the
                // file as it was at its target, with their writers of then.
                text = t.clone();
                attr = a.clone();
            } else if depth < MAX_BLAME_MOVES {
                // A move brings the source's lines, with their history: a move
                // recorded, or one a checkpoint found (the same contents gone
                // from another path as this one appeared: a shell `mv`).
                let from = match rec.as_ref().and_then(|r| path_change(&r.event, path)) {
                    Some(PathChange::MoveIn { from, .. }) => Some(from.to_string()),
                    _ if reset_here && was_absent && blob.is_some() => {
                        self.renamed_at_reset(l, path)?
                    }
                    _ => None,
                };
                if let Some(from) = from {
                    let (t, a) = self.blame_attr(Lsn(l.0 - 1), &from, depth + 1, cuts)?;
                    text = t;
                    attr = a;
                }
            }
            // The store's first capture of the workspace finding a file no
            // record wrote before: its lines predate the history.
            let first_capture = reset_here
                && was_absent
                && restored.is_none()
                && attr.is_empty()
                && events.first().is_none_or(|e| *e >= l)
                && self.index.resets().first().is_some_and(|r| r.lsn == l);
            let credit = if first_capture { BEFORE_HISTORY } else { l };
            let (old_lines, new_lines) = (split_lines(&text), split_lines(&new_text));
            let diff = line_diff(&old_lines, &new_lines);
            let mut new_attr = vec![credit; new_lines.len()];
            for op in diff.ops() {
                if let DiffOp::Equal {
                    old_index,
                    new_index,
                    len,
                } = *op
                {
                    new_attr[new_index..new_index + len]
                        .copy_from_slice(&attr[old_index..old_index + len]);
                }
            }
            attr = new_attr;
            text = new_text;
        }
        Ok((text, attr))
    }

    /// The branch graph: with `of`, the nodes that continue from that
    /// checkpoint (or rollback) — what was tried from it; without, every
    /// checkpoint and rollback with its parent, in LSN order.
    pub fn branches(&self, of: Option<CheckpointId>) -> Result<Vec<Branch>> {
        let to_branch = |n: &crate::index::Node| Branch {
            lsn: n.lsn,
            kind: n.kind,
            session: n.session.clone(),
            parent: n.parent,
            label: n.label.clone(),
            ts: n.ts,
            children: n.children.len(),
        };
        match of {
            None => Ok(self.index.nodes().map(to_branch).collect()),
            Some(id) => {
                let n = self
                    .index
                    .node(id.0)
                    .ok_or_else(|| self.no_checkpoint(id))?;
                Ok(n.children
                    .iter()
                    .filter_map(|c| self.index.node(*c))
                    .map(to_branch)
                    .collect())
            }
        }
    }

    /// The rollbacks the branch graph leaves out because their target was
    /// lost to damage: `repair` put a placeholder where the checkpoint's
    /// record was (see `cairn_engine::log::is_placeholder`). Each with the
    /// id it names; `parent` is `None`, as the checkpoint is gone.
    pub fn rollbacks_to_lost_checkpoints(&self) -> Result<Vec<(Branch, CheckpointId)>> {
        let mut out = Vec::new();
        for &lsn in self.index.kind(EventKind::Rollback) {
            if self.index.node(lsn).is_some() {
                continue;
            }
            let r = self.src.read(lsn)?;
            let Some(target) = r.event.target.filter(|_| r.event.ok) else {
                continue;
            };
            let lost = target.0 .0 > 0
                && target.0 < lsn
                && cairn_engine::log::is_placeholder(&self.src.read(target.0)?.event);
            if lost {
                out.push((
                    Branch {
                        lsn,
                        kind: EventKind::Rollback,
                        session: r.event.session.clone(),
                        parent: None,
                        label: r.event.label.clone(),
                        ts: r.event.ts,
                        children: 0,
                    },
                    target,
                ));
            }
        }
        Ok(out)
    }

    /// Each session's state at a point (sessions with no record by then are
    /// left out), sorted by session id.
    pub fn session_state(&self, p: Point) -> Result<Vec<SessionState>> {
        let at = self.resolve(p)?;
        let mut names: Vec<&str> = self.index.sessions().collect();
        names.sort_unstable();
        let mut out = Vec::new();
        for s in names {
            let lsns = self.index.session(s);
            let n = lsns.partition_point(|l| *l <= at);
            if n == 0 {
                continue;
            }
            let last = self.src.read(lsns[n - 1])?;
            let cps = self.index.session_checkpoints(s);
            let last_checkpoint = cps[..cps.partition_point(|l| *l <= at)]
                .last()
                .map(|l| CheckpointId(*l));
            let rbs = self.index.session_rollbacks(s);
            let last_rollback = rbs[..rbs.partition_point(|r| r.0 <= at)].last();
            let base = match (last_checkpoint, last_rollback) {
                (Some(c), Some((rl, t))) => Some(if *rl > c.0 { *t } else { c }),
                (c, None) => c,
                (None, Some((_, t))) => Some(*t),
            };
            let mut open_run = last.event.run.clone();
            if open_run.is_none() {
                for l in lsns[..n - 1].iter().rev() {
                    let r = self.src.read(*l)?;
                    if r.event.run.is_some() {
                        open_run = r.event.run;
                        break;
                    }
                }
            }
            out.push(SessionState {
                session: s.to_string(),
                records: n as u64,
                last_lsn: last.lsn,
                last_ts: last.event.ts,
                last_checkpoint,
                base,
                open_run,
            });
        }
        Ok(out)
    }

    /// The checkpoints, all or one session's, in LSN order.
    pub fn checkpoints(&self, session: Option<&str>) -> Vec<crate::index::CheckpointInfo> {
        self.index
            .checkpoints(session)
            .into_iter()
            .cloned()
            .collect()
    }
}
