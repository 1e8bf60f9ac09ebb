//! Differences between two points: per-path status, unified diffs and
//! renames (exact, or files moved and edited in one step).

use std::collections::HashMap;

use similar::udiff::UnifiedHunkHeader;
use similar::ChangeTag;

use cairn_codec::Lsn;

use crate::error::{QueryError, Result};
use crate::lines::*;
use crate::point::Point;
use crate::renames::{self, Rename};
use crate::replay::in_scope;
use crate::source::{BlobSource, TreeEntry};

use super::*;

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
pub(crate) fn diff_filter(p: &str) -> Result<String> {
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

impl Query<'_> {
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
        let mut pairs = file_pairs(paths, &mut |p| {
            Ok((self.entry_at(la, p)?, self.entry_at(lb, p)?))
        })?;
        let whole = pairs.is_empty();
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
            self.check_paths_name_something(la, lb, paths, &keys)?;
        }
        let mut out = Vec::new();
        for (path, old, new) in pairs {
            if old == new {
                continue;
            }
            out.push(file_diff(self.blobs, path, old, new)?);
        }
        mark_renames(self.blobs, &mut out)?;
        Ok(out)
    }

    /// Refuses a path of a diff that names nothing at `la` or `lb` (no
    /// file there or under it among `keys`, none the checkpoints there
    /// could not capture, no record up to the later point naming it).
    fn check_paths_name_something(
        &self,
        la: Lsn,
        lb: Lsn,
        paths: &[String],
        keys: &[&String],
    ) -> Result<()> {
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
        Ok(())
    }

    /// The path that `path` was renamed from at the reset (checkpoint or
    /// rollback) at `at` (see [`super::blame::renamed_at_reset`]).
    pub(super) fn renamed_at_reset(&self, at: Lsn, path: &str) -> Result<Option<String>> {
        super::blame::renamed_at_reset(self, at, path)
    }
}

/// The diff of `path` from `old` to `new` (which differ): its status,
/// and its unified diff unless a side is binary or too large.
pub(crate) fn file_diff(
    blobs: &dyn BlobSource,
    path: String,
    old: Option<TreeEntry>,
    new: Option<TreeEntry>,
) -> Result<FileDiff> {
    let status = match (&old, &new) {
        (None, _) => DiffStatus::Added,
        (_, None) => DiffStatus::Removed,
        _ => DiffStatus::Modified,
    };
    let (mut unified, mut binary) = (None, false);
    let too_large = [old, new]
        .iter()
        .flatten()
        .any(|e| blobs.len(&e.blob).is_some_and(|n| n > MAX_LINE_DIFF_BYTES));
    if old.map(|e| e.blob) != new.map(|e| e.blob) && !too_large {
        let ob = old
            .map(|e| blobs.get(&e.blob))
            .transpose()?
            .unwrap_or_default();
        let nb = new
            .map(|e| blobs.get(&e.blob))
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
    Ok(FileDiff {
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
    })
}

/// Pairs the removed and added paths of a diff that hold the same or
/// similar contents (see [`crate::renames`]) and marks both ends; a
/// similar pair's added end gets the diff from the old path's contents.
pub(crate) fn mark_renames(blobs: &dyn BlobSource, diffs: &mut [FileDiff]) -> Result<()> {
    let ends = |status: DiffStatus| {
        diffs
            .iter()
            .filter(move |d| d.status == status)
            .filter_map(|d| Some((d.path.as_str(), d.old.or(d.new)?)))
    };
    let found = renames::pair(ends(DiffStatus::Removed), ends(DiffStatus::Added), blobs);
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
            let (ob, nb) = (blobs.get(&old.blob)?, blobs.get(&new.blob)?);
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

/// A path and its entries at a diff's two points.
pub(crate) type PathPair = (String, Option<TreeEntry>, Option<TreeEntry>);

/// A path's entries at a diff's two points.
pub(crate) type EntryPair = (Option<TreeEntry>, Option<TreeEntry>);

/// Each of a diff's `paths` with its entries at the two points (`entries`
/// gives them), when every one names a file at one point at least; empty
/// when there are none or one names no file at either point: then the
/// paths are prefixes, and the whole trees are compared under them.
pub(crate) fn file_pairs(
    paths: &[String],
    entries: &mut dyn FnMut(&str) -> Result<EntryPair>,
) -> Result<Vec<PathPair>> {
    let mut pairs = Vec::with_capacity(paths.len());
    for p in paths {
        let (ea, eb) = entries(p)?;
        if ea.is_none() && eb.is_none() {
            // Not a file at either point: a directory prefix.
            return Ok(Vec::new());
        }
        pairs.push((p.clone(), ea, eb));
    }
    Ok(pairs)
}
