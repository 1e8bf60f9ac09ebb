//! Queries, verification, export and import through the [`Store`] handle.
//!
//! The query indexes are folds over the log kept in memory, caught up from
//! the log before every query (so they are never stale), persisted under
//! `.cairn/index/` on close and rebuilt from the log when missing or stale.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn_codec::{ChainHash, Lsn};
use cairn_engine::log::{Head, LogStats, Record, VerifyReport};
use cairn_query::export::{ExportStats, Format};
use cairn_query::index::{Index, OpenOutcome};
use cairn_query::source::{RecordSource, SnapshotManifests};
use cairn_query::{Filter, Query};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::store::LogHandle;
use crate::Store;

/// What `cairn checkpoints` lists ([`Store::checkpoint_listing`]).
#[derive(Debug, Clone, Default)]
pub struct CheckpointListing {
    /// The checkpoints, oldest first, as [`Store::session_checkpoints`]
    /// lists them.
    pub checkpoints: Vec<cairn_snapshot::CheckpointInfo>,
    /// The `checkpoint.create` records without a manifest, in LSN order,
    /// as [`Store::imported_checkpoints`] lists them.
    pub imported: Vec<Record>,
}

impl LogHandle {
    pub(crate) fn head(&self) -> Head {
        match self {
            LogHandle::Writer(l) => l.head(),
            LogHandle::Reader(r) => r.lock().head(),
        }
    }
    /// The sealed segments that hold records, in LSN order.
    pub(crate) fn sealed_spans(&self) -> Vec<cairn_engine::log::SegmentSpan> {
        match self {
            LogHandle::Writer(l) => l.sealed_spans(),
            LogHandle::Reader(r) => r.lock().sealed_spans(),
        }
    }

    /// Runs `f` with this log as a query record source.
    pub(crate) fn with_source<T>(&self, f: impl FnOnce(&dyn RecordSource) -> T) -> T {
        match self {
            LogHandle::Writer(l) => f(&**l),
            LogHandle::Reader(r) => f(&**r),
        }
    }
}

/// A writer's build of the index files of the segments it seals (see
/// [`Store::index_new_seals`]).
#[derive(Debug)]
pub(crate) struct SealIndexer {
    /// How many sealed segments the log had at the last look
    /// (`usize::MAX`: not looked yet).
    seen: AtomicUsize,
    /// The build running or last run.
    job: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Default for SealIndexer {
    fn default() -> SealIndexer {
        SealIndexer {
            seen: AtomicUsize::new(usize::MAX),
            job: Mutex::new(None),
        }
    }
}

/// Builds the index file of every sealed segment of the store at `root`
/// that lacks a good one, reading the log through a read-only reader of
/// its own (so the writer's log is not held). A cache: failing is no error.
fn index_sealed_segments(vfs: Arc<dyn cairn_engine::Vfs>, root: std::path::PathBuf) {
    let Ok(reader) = cairn_engine::log::LogReader::open(vfs.clone(), &root.join("log")) else {
        return;
    };
    let spans = reader.sealed_spans();
    let src = cairn_query::source::ReaderSource::new(reader);
    let dir = root
        .join("index")
        .join(cairn_query::index::cold::SEGMENTS_DIR);
    let _ = cairn_query::index::cold::ColdIndex::index_sealed(&vfs, &dir, &src, &spans);
}

/// What [`Store::verify`] found, over the log and the blobs.
#[derive(Debug)]
pub struct StoreVerifyReport {
    /// The log's report (frames, CRCs, footers, hash chain).
    pub log: VerifyReport,
    /// The blob store's report (every entry's hash, every chunk list).
    pub blobs: cairn_engine::blob::BlobVerifyReport,
    /// For a pinned head hash: the LSN where the chain reaches it, or None
    /// if it never does (history was truncated or rewritten).
    pub pinned: Option<(ChainHash, Option<Lsn>)>,
    /// Blobs that live records name (checkpoint trees and states, file
    /// contents, diffs) which are missing or damaged, with the checkpoints,
    /// records and paths that lost their contents.
    pub lost: crate::verify_refs::LostContents,
    /// The per-segment query index files: damaged ones fail the check
    /// (the next query that needs one rebuilds it from the log), stale
    /// ones are only listed.
    pub index: cairn_query::index::cold::FilesReport,
}

impl StoreVerifyReport {
    /// True when nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.log.is_ok()
            && self.blobs.is_ok()
            && self.lost.is_ok()
            && self.index.damaged.is_empty()
            && self.pinned.is_none_or(|(_, at)| at.is_some())
    }
}

/// Counts and sizes of a store.
#[derive(Debug, Clone)]
pub struct StoreStats {
    /// The log.
    pub log: LogStats,
    /// The blob store.
    pub blobs: cairn_engine::blob::BlobStats,
    /// The head.
    pub head: Head,
}

impl Store {
    pub(crate) fn index(&self) -> &Mutex<Option<Index>> {
        &self.index
    }

    /// Runs `f` with a [`Query`] whose indexes cover the log up to its head.
    pub fn query<T>(&self, f: impl FnOnce(&Query<'_>) -> cairn_query::Result<T>) -> Result<T> {
        self.log.with_source(|src| {
            let manifests = SnapshotManifests(&self.blobs);
            let mut guard = self.index().lock();
            let index = match guard.as_mut() {
                Some(ix) => {
                    ix.catch_up(src)?;
                    ix
                }
                None => {
                    let (ix, how) = Index::open(self.vfs(), &self.root().join("index"), src)?;
                    if how == (OpenOutcome::Loaded { caught_up: 0 }) {
                        // The file holds all of it: nothing to save at close.
                        self.index_saved.store(ix.covered().0, Ordering::Relaxed);
                    }
                    guard.insert(ix)
                }
            };
            let q = Query::new(src, &self.blobs, &manifests, index);
            Ok(f(&q)?)
        })
    }

    /// Calls `each` with every record `filter` selects, in its order, up
    /// to its limit; `each` returns false to stop.
    ///
    /// A process that has not loaded the query index yet (a command line,
    /// a hook) answers a filter with a session, run, kind, agent, model or
    /// path from the per-segment index files
    /// ([`cairn_query::index::cold`]): it reads their headers and the
    /// postings it needs, then only the records it hands out, so the time
    /// to answer does not grow with the history. Otherwise (the index is
    /// loaded, or no indexed condition is set) it is [`Query::scan`].
    pub fn scan(
        &self,
        filter: &Filter,
        each: &mut dyn FnMut(Record) -> cairn_query::Result<bool>,
    ) -> Result<()> {
        if cairn_query::index::cold::ColdIndex::answers(filter)
            && self.with_cold(|cold, _| cold.scan(filter, each))? == Some(true)
        {
            return Ok(());
        }
        if cairn_query::query::unindexed(filter) {
            // No index narrows it: read the log, without loading (or, with
            // none saved, building from the whole log) the query index.
            return self.log.with_source(|src| {
                let head = src.head()?.last_lsn;
                Ok(cairn_query::query::scan_log(src, filter, head, each)?)
            });
        }
        self.query(|q| q.scan(filter, each))
    }

    /// After an append: when `log` has sealed a segment since the last
    /// look, starts a thread that builds the index files of the sealed
    /// segments lacking one ([`cairn_query::index::cold::ColdIndex::index_sealed`]),
    /// so a query from a new process never builds them. The append waits
    /// for nothing: what it pays is this look (the count of sealed
    /// segments). One build at a time; a seal during one is taken by the
    /// next append after it. The first look only counts: segments sealed
    /// before this handle opened are built by the first query needing them.
    pub(crate) fn index_new_seals(&self, log: &cairn_engine::log::Log) {
        let ix = &self.seal_indexer;
        let n = log.sealed_count();
        let seen = ix.seen.load(Ordering::Relaxed);
        if seen == usize::MAX {
            ix.seen.store(n, Ordering::Relaxed);
            return;
        }
        if n <= seen {
            return;
        }
        let mut job = ix.job.lock();
        if job.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        ix.seen.store(n, Ordering::Relaxed);
        let (vfs, root) = (self.vfs().clone(), self.root().to_path_buf());
        *job = std::thread::Builder::new()
            .name("cairn-segment-index".into())
            .spawn(move || index_sealed_segments(vfs, root))
            .ok();
    }

    /// Waits for the build [`Store::index_new_seals`] started, if any, and
    /// builds the files of segments sealed since it started (what a close
    /// runs: every segment this writer sealed then has its file, and the
    /// process never exits midway through one).
    pub(crate) fn finish_seal_index(&self) {
        if let Some(h) = self.seal_indexer.job.lock().take() {
            let _ = h.join();
        }
        let LogHandle::Writer(log) = &self.log else {
            return;
        };
        let seen = self.seal_indexer.seen.load(Ordering::Relaxed);
        if seen != usize::MAX && log.sealed_count() > seen {
            index_sealed_segments(self.vfs().clone(), self.root().to_path_buf());
        }
    }

    /// Runs `f` with the per-segment index files of the log up to its head
    /// ([`cairn_query::index::cold::ColdIndex`]) and the log, when this
    /// process has not loaded the query index; `None` when it has (the
    /// loaded index answers without them).
    fn with_cold<T>(
        &self,
        f: impl FnOnce(
            &cairn_query::index::cold::ColdIndex<'_>,
            &dyn RecordSource,
        ) -> cairn_query::Result<T>,
    ) -> Result<Option<T>> {
        if self.index().lock().is_some() {
            return Ok(None);
        }
        let spans = self.log.sealed_spans();
        let write = !self.is_read_only() || self.save_index_read_only;
        let dir = self
            .root()
            .join("index")
            .join(cairn_query::index::cold::SEGMENTS_DIR);
        Ok(Some(self.log.with_source(|src| {
            let cold =
                cairn_query::index::cold::ColdIndex::new(self.vfs(), &dir, src, &spans, write)?;
            f(&cold, src)
        })?))
    }

    /// `f`'s answer through the per-segment index files read as
    /// [`cairn_query::query::ColdAt`] (with the snapshot's manifests), for
    /// a process that has not loaded the query index; `None` when it has,
    /// when `f` leaves the question to the whole index, or on any error:
    /// [`Store::query`] then answers, and words the error.
    fn cold_at<T>(
        &self,
        f: impl FnOnce(&cairn_query::query::ColdAt<'_>) -> cairn_query::Result<Option<T>>,
    ) -> Option<T> {
        let manifests = SnapshotManifests(&self.blobs);
        let known = *self.cold_time.lock();
        self.with_cold(|cold, src| {
            let at = cairn_query::query::ColdAt::new(cold, src, &manifests);
            let at = match known {
                Some((head, tp)) if head == cold.covered() => at.knowing(tp),
                _ => at,
            };
            f(&at)
        })
        .ok()
        .flatten()
        .flatten()
    }

    /// `path`'s entry at point `p` read from the per-segment index files
    /// by a process that has not loaded the query index (`cairn show`):
    /// the path's last change at or before the point and the reset before
    /// it, not a replay from the start ([`cairn_query::query::ColdAt`]).
    /// `None` when there is no file there, when the files leave the
    /// question to the whole index, when the index is loaded, or when a
    /// read fails: [`Store::query`] then answers, and words any error.
    pub fn cold_entry_at(
        &self,
        p: cairn_query::Point,
        path: &str,
    ) -> Option<cairn_query::TreeEntry> {
        match self.cold_at(|c| c.entry(p, path).map(Some)) {
            Some(cairn_query::query::ColdAnswer::Entry(_, entry)) => entry,
            _ => None,
        }
    }

    /// What the time point `p` resolves to (the point, and the records
    /// after it stamped at or before its time), from the per-segment index
    /// files by a process that has not loaded the query index: only the
    /// segments where the log's running time crosses the time are read
    /// ([`cairn_query::index::cold::ColdIndex::time_point`]). `None` for
    /// any other point, when the index is loaded, or on any error:
    /// [`Store::query`] then answers, and words the error.
    pub fn cold_time_point(&self, p: cairn_query::Point) -> Option<cairn_query::point::TimePoint> {
        let cairn_query::Point::Time(t) = p else {
            return None;
        };
        let tp = self
            .with_cold(|cold, _| Ok((cold.covered(), cold.time_point(t)?)))
            .ok()
            .flatten()?;
        *self.cold_time.lock() = Some(tp);
        Some(tp.1)
    }

    /// What `cairn tree` prints at `p`, from the per-segment index files
    /// by a process that has not loaded the query index: the last reset at
    /// or before the point and the file records after it, never a replay
    /// of the whole log ([`cairn_query::query::ColdAt::tree_point`]).
    /// `None` when the index is loaded, when the files leave the question
    /// to the whole index, or on any error: [`Store::query`] then answers,
    /// and words the error.
    pub fn cold_tree(&self, p: cairn_query::Point) -> Option<cairn_query::query::ColdTree> {
        self.cold_at(|c| c.tree_point(p))
    }

    /// What `cairn diff A B [-- PATH...]` prints, from the per-segment
    /// index files ([`cairn_query::query::ColdAt::diff`]), as
    /// [`Store::cold_tree`]: `None` leaves it to [`Store::query`].
    pub fn cold_diff(
        &self,
        a: cairn_query::Point,
        b: cairn_query::Point,
        paths: &[String],
    ) -> Option<cairn_query::query::ColdDiff> {
        self.cold_at(|c| c.diff(&self.blobs, a, b, paths))
    }

    /// What `cairn blame POINT PATH` prints (the lines, and the record that
    /// last wrote the file without its contents), from the per-segment
    /// index files ([`cairn_query::query::ColdAt::blame`]), as
    /// [`Store::cold_tree`]: `None` leaves it to [`Store::query`].
    pub fn cold_blame(
        &self,
        p: cairn_query::Point,
        path: &str,
    ) -> Option<(Option<Record>, Vec<cairn_query::BlameLine>)> {
        self.cold_at(|c| c.blame(&self.blobs, p, path))
    }

    /// One session's checkpoints (every one with `None`), oldest first, as
    /// [`Store::checkpoints`] lists them. A process that has not loaded
    /// the query index reads a session's through [`Store::scan`]: the
    /// postings of its `checkpoint.create` records and of the
    /// `checkpoint.discard` records after the first, then only those
    /// records, instead of folding the log into the checkpoint list.
    pub fn session_checkpoints(
        &self,
        session: Option<&str>,
    ) -> Result<Vec<cairn_snapshot::CheckpointInfo>> {
        match session {
            None => self.checkpoints(None),
            Some(s) => Ok(self.scanned_checkpoints(Some(s), false)?.0),
        }
    }

    /// What `cairn checkpoints` lists: [`Store::session_checkpoints`] and
    /// [`Store::imported_checkpoints`] of `session`, together. For one
    /// session, in a process that has not loaded the query index, both
    /// come from one pass over the postings of the session's
    /// `checkpoint.create` records (each segment index file opened once,
    /// each such record read once), not one pass each; so do every
    /// session's on a store with no workspace (an archive read in place),
    /// which has no checkpoint list cache to read.
    pub fn checkpoint_listing(&self, session: Option<&str>) -> Result<CheckpointListing> {
        let (checkpoints, imported) = match session {
            // The empty session names the default one for the list, and
            // itself for the imported records, as the two calls take it.
            Some(s) if !s.is_empty() => self.scanned_checkpoints(Some(s), true)?,
            // Asked here only: a session's listing must not open the
            // workspace (its binding and caches) to answer.
            None if matches!(self.workspace_caches(), Err(Error::NoWorkspace)) => {
                self.scanned_checkpoints(None, true)?
            }
            _ => (
                self.session_checkpoints(session)?,
                self.imported_checkpoints(session)?,
            ),
        };
        Ok(CheckpointListing {
            checkpoints,
            imported,
        })
    }

    /// The checkpoints of session `s` (of every session with `None`) and,
    /// with `with_imported`, its checkpoint records without a manifest
    /// (else none), from one scan of its `checkpoint.create` records
    /// (through the list cache instead when the query index is loaded and
    /// there is a workspace to hold the cache).
    pub(crate) fn scanned_checkpoints(
        &self,
        s: Option<&str>,
        with_imported: bool,
    ) -> Result<(Vec<cairn_snapshot::CheckpointInfo>, Vec<Record>)> {
        if self.index().lock().is_some() && self.workspace_caches().is_ok() {
            let imported = if with_imported {
                self.imported_checkpoints(s)?
            } else {
                Vec::new()
            };
            return Ok((self.checkpoints(s)?, imported));
        }
        let s = s.map(|s| {
            if s.is_empty() {
                cairn_codec::event::DEFAULT_SESSION
            } else {
                s
            }
        });
        let mut list: Vec<cairn_snapshot::CheckpointInfo> = Vec::new();
        let mut imported = Vec::new();
        let creates = Filter {
            session: s.map(str::to_string),
            kind: Some(cairn_codec::EventKind::CheckpointCreate),
            ..Filter::all()
        };
        self.scan(&creates, &mut |r| {
            list.extend(cairn_snapshot::CheckpointInfo::from_record(r.lsn, &r.event));
            if with_imported && cairn_snapshot::checkpoint::is_imported_checkpoint(&r.event) {
                imported.push(r);
            }
            Ok(true)
        })?;
        let Some(first) = list.first().map(|c| c.lsn) else {
            return Ok((list, imported));
        };
        // A discard evicts a checkpoint before it (the first one counts),
        // whichever session recorded it, as the checkpoint list folds them.
        let discards = Filter {
            kind: Some(cairn_codec::EventKind::CheckpointDiscard),
            since_lsn: Some(first.next()),
            ..Filter::all()
        };
        self.scan(&discards, &mut |r| {
            let Some(id) = r.event.checkpoint else {
                return Ok(true);
            };
            if let Ok(i) = list.binary_search_by_key(&id, |c| c.id) {
                let c = &mut list[i];
                if !c.discarded && c.lsn < r.lsn {
                    c.discarded = true;
                    c.discarded_at = Some(r.lsn);
                    c.discarded_by_retention =
                        cairn_snapshot::retention::discarded_by_retention(&r.event);
                }
            }
            Ok(true)
        })?;
        Ok((list, imported))
    }

    /// The `checkpoint.create` records without a manifest (imported from
    /// another tool's audit log) of `session`, or of every session, in LSN
    /// order (as [`cairn_query::Query::imported_checkpoints`]), through
    /// [`Store::scan`]: a new process reads the postings of the kind (and
    /// session), not the whole query index.
    pub fn imported_checkpoints(&self, session: Option<&str>) -> Result<Vec<Record>> {
        let filter = Filter {
            kind: Some(cairn_codec::EventKind::CheckpointCreate),
            session: session.map(str::to_string),
            ..Filter::all()
        };
        let mut out = Vec::new();
        self.scan(&filter, &mut |r| {
            if cairn_snapshot::checkpoint::is_imported_checkpoint(&r.event) {
                out.push(r);
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// The record at `lsn` (its event and chain hash), read back from the
    /// log and checked as every read is: what `cairn log --json` prints.
    pub fn record(&self, lsn: Lsn) -> Result<Record> {
        Ok(self.log.with_source(|src| src.read(lsn))?)
    }

    /// Saves the query indexes so the next open does not rebuild them.
    pub(crate) fn save_index(&self) -> Result<()> {
        let guard = self.index().lock();
        let Some(ix) = guard.as_ref() else {
            return Ok(());
        };
        // Saved (or loaded) as it is already: a read command that folded
        // nothing new rewrites (and fsyncs) nothing.
        let covered = ix.covered().0;
        if covered == self.index_saved.load(Ordering::Relaxed) {
            return Ok(());
        }
        let saved = if !self.is_read_only() {
            ix.save(self.vfs(), &self.root().join("index"))?;
            true
        } else if self.save_index_read_only {
            // A cache: a store this process may not write is no error.
            ix.save(self.vfs(), &self.root().join("index")).is_ok()
        } else {
            false
        };
        if saved {
            self.index_saved.store(covered, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Checks every frame, CRC, footer and the hash chain of the log,
    /// every blob's hash and chunk list, and that every blob a live record
    /// names is there and intact (naming the checkpoints and paths that
    /// lost contents). With `pinned`, also checks that the
    /// chain reaches that head hash (detects truncation of history).
    pub fn verify(&self, pinned: Option<ChainHash>) -> Result<StoreVerifyReport> {
        let log = match &self.log {
            LogHandle::Writer(l) => l.verify()?,
            LogHandle::Reader(r) => r.lock().verify()?,
        };
        let blobs = self.blobs.get()?.verify()?;
        let lost = crate::verify_refs::check(&self.log, self.blobs.get()?, &blobs)?;
        let index = cairn_query::index::cold::ColdIndex::verify_files(
            self.vfs(),
            &self
                .root()
                .join("index")
                .join(cairn_query::index::cold::SEGMENTS_DIR),
            &self.log.sealed_spans(),
            &|lsn| {
                self.log
                    .with_source(|src| src.read(lsn).ok().map(|r| r.chain))
            },
        )?;
        let pinned = match pinned {
            None => None,
            Some(h) => {
                // Chain values are in the frame headers: no body is decoded.
                let mut at = None;
                let mut find = |f: &cairn_codec::frame::Frame<'_>| {
                    if at.is_none() && f.chain == h {
                        at = Some(f.lsn);
                    }
                };
                match &self.log {
                    LogHandle::Writer(l) => l.for_each_frame(Lsn::FIRST, &mut find)?,
                    LogHandle::Reader(r) => r.lock().for_each_frame(Lsn::FIRST, &mut find)?,
                };
                Some((h, at))
            }
        };
        Ok(StoreVerifyReport {
            log,
            blobs,
            pinned,
            lost,
            index,
        })
    }

    /// On a read-only handle, if the log ends before what its side files
    /// record it reaching (its newest segment files were deleted), the
    /// loss in words: reading goes on over what is left, but the lost
    /// LSNs are named. `None` otherwise (a writable open refuses such a log).
    pub fn log_loss_warning(&self) -> Option<String> {
        match &self.log {
            LogHandle::Writer(_) => None,
            LogHandle::Reader(r) => r.lock().recorded_loss().ok().flatten(),
        }
    }

    /// Counts and sizes. A read-only handle whose blob store cannot be
    /// opened (it opens it here, on first use) counts no blobs:
    /// [`Store::try_stats`] says why instead.
    pub fn stats(&self) -> StoreStats {
        let blobs = self.blobs.get().map(|b| b.stats()).unwrap_or_default();
        self.stats_with(blobs)
    }

    /// [`Store::stats`], failing with the reason when the blob store
    /// cannot be opened.
    pub fn try_stats(&self) -> Result<StoreStats> {
        let blobs = self.blobs.get()?.stats();
        Ok(self.stats_with(blobs))
    }

    fn stats_with(&self, blobs: cairn_engine::blob::BlobStats) -> StoreStats {
        let log = match &self.log {
            LogHandle::Writer(l) => l.stats(),
            LogHandle::Reader(r) => r.lock().stats(),
        };
        StoreStats {
            log,
            blobs,
            head: self.head(),
        }
    }

    /// Exports the records `filter` selects in `format` to `out`.
    pub fn export(
        &self,
        filter: &Filter,
        format: Format,
        out: &mut dyn Write,
    ) -> Result<ExportStats> {
        if !filter.needs_index() {
            // One pass over the log: loading (or rebuilding) the query
            // index first would cost more than the export on a cold start.
            return self
                .log
                .with_source(|src| {
                    let head = src.head()?.last_lsn;
                    cairn_query::export::export_scan(src, &self.blobs, filter, format, head, out)
                })
                .map_err(Into::into);
        }
        self.query(|q| q.export(filter, format, out))
    }

    /// Like `tail -f`: exports records from `from` on as they are committed
    /// (by this process or, for a read-only handle, by the writer) until
    /// `stop()` returns true.
    pub fn follow(
        &self,
        filter: &Filter,
        format: Format,
        from: Lsn,
        out: &mut dyn Write,
        stop: &dyn Fn() -> bool,
    ) -> Result<ExportStats> {
        self.log
            .with_source(|src| {
                cairn_query::export::follow(src, &self.blobs, filter, format, from, out, stop)
            })
            .map_err(Into::into)
    }
}
