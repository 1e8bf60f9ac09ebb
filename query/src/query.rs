//! Time-travel queries over a record source, its blobs and manifests, and
//! the indexes: state at a point, file contents, diffs, history, blame,
//! filtered listings and branches. All read-only.
//!
//! [`Query`] itself (this file) resolves points, lists and exports records
//! and walks branches; each other question has a file of its own: the
//! state at a point (`at.rs`; from the per-segment index files,
//! `cold_at.rs`), diffs (`diff.rs`), a path's history
//! (`history.rs`) and blame (`blame.rs`); line utilities are in
//! [`crate::lines`].

use std::io::Write;

use cairn_codec::{CheckpointId, EventKind, Lsn, Timestamp};

use crate::error::{QueryError, Result};
use crate::export::{ExportStats, Exporter, Format};
use crate::filter::Filter;
use crate::index::Index;
use crate::point::Point;
use crate::replay::SessionState;
use crate::source::{BlobSource, ManifestSource, Record, RecordSource};

mod at;
mod blame;
mod cold_at;
mod cold_tree;
mod diff;
mod history;

pub use crate::lines::{
    is_binary, line_diff, line_text, split_lines, BINARY_SNIFF_BYTES, LINE_DIFF_TIMEOUT,
    MAX_LINE_DIFF_BYTES,
};
pub use blame::{BlameLine, MAX_BLAME_MOVES};
pub use cold_at::{ColdAnswer, ColdAt};
pub use cold_tree::{ColdDiff, ColdTree, TREE_KINDS};
pub use diff::{DiffStatus, FileDiff, DIFF_CONTEXT_LINES};

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
    /// False for a point of an imported conversation (see
    /// [`Node::tree`](crate::index::Node::tree)): no tree to show or
    /// restore.
    pub tree: bool,
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
        let point = record.as_ref().is_some_and(|r| !r.event.parents.is_empty());
        match note.map(|n| n.get("checkpoint").and_then(|c| c.as_str())) {
            None if point => "a point of a conversation imported from its transcript, which does not say what the files were then".to_string(),
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
                    "the record at LSN {} is a checkpoint record without a manifest ({}): it holds no tree; use @{} for the tree by the records up to it",
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
        let Some(lsns) = self.candidates(f) else {
            return scan_log(self.src, f, self.index.covered(), each);
        };
        let limit = f.limit.unwrap_or(usize::MAX);
        let head = self.index.covered();
        if f.lsn_bounds(head).is_none() {
            return Ok(());
        }
        let mut visit = limited(f, limit, each);
        let lsns = lsns.into_iter().filter(|l| *l <= head);
        if f.newest_first {
            for l in lsns.rev() {
                if !visit(self.src.read(l)?)? {
                    break;
                }
            }
        } else {
            // Ascending: read in batches, one walk each.
            let mut reads = crate::source::SortedReads::new(self.src, limit);
            let mut go = true;
            for l in lsns {
                if !reads.push(l, &mut visit)? {
                    go = false;
                    break;
                }
            }
            if go {
                reads.flush(&mut visit)?;
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
        if self.candidates(f).is_none() && !f.newest_first {
            // A scan of the whole log, decoded in place.
            return crate::export::export_scan(
                self.src,
                self.blobs,
                f,
                format,
                self.index.covered(),
                out,
            );
        }
        let mut ex = Exporter::new(self.blobs, format, out);
        self.scan(f, &mut |r| {
            ex.write(&r)?;
            Ok(true)
        })?;
        ex.finish()
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
            tree: n.tree,
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
                        tree: true,
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

/// True if no index narrows `f`'s records (no session, run, kind, path or
/// time bound): [`Query::scan`] then reads the log between `f`'s LSN
/// bounds, and [`scan_log`] answers without an index loaded.
pub fn unindexed(f: &Filter) -> bool {
    f.session.is_none()
        && f.run.is_none()
        && f.kind.is_none()
        && f.path.is_none()
        && f.since.is_none()
        && f.until.is_none()
}

/// Calls `each` with the records `f` selects among those from its first
/// LSN bound to `head` (or its last bound), read straight from the log
/// (from the newest down when `f.newest_first`), up to its limit: what
/// [`Query::scan`] does where no index applies ([`unindexed`]). A newest
/// first `log --limit 5` reads five records, not the log.
pub fn scan_log(
    src: &dyn RecordSource,
    f: &Filter,
    head: Lsn,
    each: &mut dyn FnMut(Record) -> Result<bool>,
) -> Result<()> {
    let Some((first, last)) = f.lsn_bounds(head) else {
        return Ok(());
    };
    let mut visit = limited(f, f.limit.unwrap_or(usize::MAX), each);
    if f.newest_first {
        for l in (first.0..=last.0).rev() {
            if !visit(src.read(Lsn(l))?)? {
                break;
            }
        }
    } else {
        for r in src.iter_from(first) {
            let r = r?;
            if r.lsn > last || !visit(r)? {
                break;
            }
        }
    }
    Ok(())
}

/// `each` over the records `f` matches, stopping after `limit` of them.
fn limited<'e>(
    f: &'e Filter,
    limit: usize,
    each: &'e mut dyn FnMut(Record) -> Result<bool>,
) -> impl FnMut(Record) -> Result<bool> + 'e {
    let mut n = 0;
    move |r: Record| -> Result<bool> {
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
    }
}
