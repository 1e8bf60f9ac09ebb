//! Checkpoints, tracked writes, rollback and retention through the [`Store`] handle.

use cairn_codec::{CheckpointId, Event, Lsn};
use cairn_engine::log::{Head, Log, Record};
use cairn_query::source::ReaderSource;
use cairn_snapshot::{
    CheckpointInfo, CheckpointRequest, LogAccess, RetentionPolicy, RetentionReport, RollbackReport,
    RollbackRequest, SnapshotError, WatchStats, Workspace,
};

use crate::error::{Error, Result};
use crate::store::LogHandle;
use crate::Store;

impl Store {
    /// Tells cairn these workspace-relative paths are about to be written,
    /// so the next checkpoint captures them (even if ignored, even if they
    /// do not exist yet). A rollback whose process stopped part way is
    /// recorded first, as by [`Store::checkpoint`].
    pub fn track(&self, paths: &[&str]) -> Result<()> {
        let log = self.writer("track paths")?;
        let ws = self.workspace()?;
        cairn_snapshot::record_interrupted_rollback(&**log, &**self.blobs.get()?, ws)?;
        Ok(ws.track(paths)?)
    }

    /// Starts the file watcher (inotify on Linux, through the `notify`
    /// crate), for long-lived embedders: every later checkpoint
    /// ([`Session::before_turn`](crate::Session::before_turn),
    /// [`after_turn`](crate::Session::after_turn), [`Store::checkpoint`] and
    /// the checkpoint a rollback takes first) re-reads only the paths that
    /// changed instead of walking the workspace, in both scan modes. It
    /// falls back to a full scan whenever it cannot show it saw every change
    /// (the first checkpoint after starting, an event queue overflow, a
    /// change to an ignore file, a barrier not seen in time) and for good
    /// after a watcher error. Watched checkpoints give the same tree as a
    /// full scan. Same as [`StoreBuilder::watch`](crate::StoreBuilder::watch).
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("main.rs"), "fn main() {}")?;
    /// let store = cairn::Store::builder().workspace(dir.path()).watch(true).open()?;
    /// let s = store.session("t1");
    /// s.before_turn(1)?; // the first checkpoint scans in full
    /// std::fs::write(dir.path().join("main.rs"), "fn main() { run() }")?;
    /// let after = s.after_turn(1)?; // re-reads only main.rs
    /// assert_eq!(after.counts.changed, 1);
    /// let stats = store.watch_stats().unwrap();
    /// assert_eq!(stats.full_captures, 1);
    /// # assert_eq!(stats.watched_captures, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn watch(&self) -> Result<()> {
        self.writer("watch the workspace")?;
        Ok(self.workspace()?.watch()?)
    }

    /// Stops the file watcher: checkpoints walk the workspace again.
    pub fn unwatch(&self) -> Result<()> {
        self.workspace()?.unwatch();
        Ok(())
    }

    /// How checkpoints have used the watcher; `None` when it is not running.
    pub fn watch_stats(&self) -> Option<WatchStats> {
        // A watcher runs only in a workspace opened for writing.
        self.ws_opened()?.watch_stats()
    }

    /// Checkpoints the workspace: blobs made durable, then a
    /// `checkpoint.create` record.
    ///
    /// A rollback whose process stopped part way (killed, out of memory,
    /// power loss) left its marker in the workspace cache directory and no
    /// record: this first records it (a `rollback` record with `ok: false`
    /// and `error_kind` `rollback_incomplete`, naming its undo point), with
    /// a warning in [`Store::take_checkpoint_warnings`]. So do
    /// [`Store::rollback`], [`Store::track`] and [`Store::gc`]; see
    /// [`cairn_snapshot::interrupted`].
    pub fn checkpoint(&self, req: CheckpointRequest) -> Result<CheckpointInfo> {
        let log = self.writer("checkpoint")?;
        Ok(cairn_snapshot::create_checkpoint(
            &**log,
            &**self.blobs.get()?,
            self.workspace()?,
            req,
        )?)
    }

    /// Problems the checkpoints since the last call worked around (a
    /// damaged tracked-path file, read as empty and set aside), oldest
    /// first; empty without a workspace.
    pub fn take_checkpoint_warnings(&self) -> Vec<String> {
        self.workspace_caches()
            .map(Workspace::take_warnings)
            .unwrap_or_default()
    }

    /// A warning when a rollback has not finished (its marker is in the
    /// workspace cache directory): running now, or stopped part way and
    /// not recorded yet; it names the undo point when the log holds it.
    /// Writes nothing, so it works on a read-only handle too; `None` when
    /// there is no such rollback (or no workspace).
    pub fn unfinished_rollback_warning(&self) -> Option<String> {
        let ws = self.workspace_caches().ok()?;
        // Only the marker file is looked at when there is none.
        cairn_snapshot::rollback_marker(ws)?;
        self.with_log_access(|log| Ok(cairn_snapshot::unfinished_rollback_warning(log, ws)))
            .ok()
            .flatten()
    }

    /// Every checkpoint (of one session, if given), oldest first,
    /// discarded ones included and marked. Works on a read-only handle too,
    /// as of the last record the writer committed, and on a store with no
    /// workspace (an archive read in place): there is no list cache then,
    /// and the checkpoint records are read through [`Store::scan`].
    pub fn checkpoints(&self, session: Option<&str>) -> Result<Vec<CheckpointInfo>> {
        match self.workspace_caches() {
            Ok(ws) => {
                Ok(self.with_log_access(|log| cairn_snapshot::list_checkpoints(log, ws, session))?)
            }
            Err(Error::NoWorkspace) => Ok(self.scanned_checkpoints(session, false)?.0),
            Err(e) => Err(e),
        }
    }

    /// One checkpoint by id; an unknown id is an error that says how to
    /// list them. Works on a read-only handle too, and with no workspace
    /// (as [`Store::checkpoints`]).
    pub fn find_checkpoint(&self, id: CheckpointId) -> Result<CheckpointInfo> {
        match self.workspace_caches() {
            Ok(ws) => Ok(self.with_log_access(|log| cairn_snapshot::find_checkpoint(log, ws, id))?),
            Err(Error::NoWorkspace) => {
                let all = self.checkpoints(None)?;
                Ok(self.with_log_access(|log| cairn_snapshot::find_in_list(all, log, id))?)
            }
            Err(e) => Err(e),
        }
    }

    /// Rolls the workspace back (or forward: redo) to a checkpoint. The
    /// current state is checkpointed first, so the rollback can be undone.
    /// A dry run (which changes nothing and appends nothing) works on a
    /// read-only handle too.
    pub fn rollback(&self, req: RollbackRequest) -> Result<RollbackReport> {
        if !req.dry_run {
            self.writer("roll back")?;
        }
        let ws = self.workspace()?;
        Ok(self
            .with_log_access(|log| cairn_snapshot::rollback(log, &**self.blobs.get()?, ws, req))?)
    }

    /// The paths of a path-scoped rollback to `target` that match nothing,
    /// on disk or in the checkpoint (see
    /// [`cairn_snapshot::paths_matching_nothing`]): likely typos, worth
    /// refusing before [`Store::rollback`] takes them as "nothing to do".
    pub fn paths_matching_nothing(
        &self,
        target: CheckpointId,
        paths: &[String],
    ) -> Result<Vec<String>> {
        let ws = self.workspace()?;
        Ok(self.with_log_access(|log| {
            cairn_snapshot::paths_matching_nothing(log, &**self.blobs.get()?, ws, target, paths)
        })?)
    }

    /// Runs `f` with the log as a [`LogAccess`]: the writer, or the reader
    /// of a read-only handle (refreshed first, and refusing appends).
    fn with_log_access<T>(
        &self,
        f: impl FnOnce(&dyn LogAccess) -> cairn_snapshot::Result<T>,
    ) -> cairn_snapshot::Result<T> {
        match &self.log {
            LogHandle::Writer(l) => f(&**l),
            LogHandle::Reader(r) => {
                r.lock().refresh()?;
                f(&ReaderLog(r))
            }
        }
    }

    /// Applies a retention policy (recording each eviction as a
    /// `checkpoint.discard`), then collects blobs no longer referenced.
    /// Unreferenced blobs in a pack mostly live stay in place (readable)
    /// until their pack is rewritten, as the report counts
    /// ([`GcSummary::left`](cairn_snapshot::GcSummary::left)); under a
    /// `max_bytes` budget they go when the store would be over it on disk
    /// ([`RetentionReport::stored_over_budget`]). [`Store::gc_compact`]
    /// removes every one.
    ///
    /// The `checkpoint.discard` records are made durable before any blob is
    /// collected, whatever the durability policy: otherwise a crash under
    /// `never` or `interval` could lose the discards but not the collection,
    /// leaving listed checkpoints whose manifests are gone (found by
    /// `tests/crash_store.rs`).
    ///
    /// Blobs put through [`Store::put_blob`] that no record appended through
    /// this handle names yet are kept (another thread may be about to append
    /// the record); puts wait while gc runs.
    pub fn gc(&self, policy: &RetentionPolicy) -> Result<RetentionReport> {
        self.collect(policy, false)
    }

    /// [`Store::gc`], then rewrites every blob pack holding an unreferenced
    /// blob, however little of it is dead: afterwards no unreferenced blob
    /// can be read, so the contents of an evicted checkpoint that nothing
    /// else names (a secret captured by accident) are gone from the store.
    /// It copies every live blob of those packs, so it costs more than an
    /// ordinary gc. (Deleted pack files are not overwritten: what the file
    /// system does with freed blocks is its own.)
    pub fn gc_compact(&self, policy: &RetentionPolicy) -> Result<RetentionReport> {
        self.collect(policy, true)
    }

    /// The collection behind [`Store::gc`] and [`Store::gc_compact`].
    fn collect(&self, policy: &RetentionPolicy, compact: bool) -> Result<RetentionReport> {
        let log = self.writer("collect garbage")?;
        let _gate = self.gc_gate.write();
        let keep = self.unreferenced.lock().clone();
        Ok(cairn_snapshot::apply_retention_keeping(
            &DurableAppends(log),
            &**self.blobs.get()?,
            self.workspace()?,
            policy,
            compact,
            &keep,
        )?)
    }
}

/// A read-only handle's log as a [`LogAccess`]: reads what the writer has
/// committed; appends are refused (no flow that reaches them runs on a
/// read-only workspace).
struct ReaderLog<'a>(&'a ReaderSource);

impl LogAccess for ReaderLog<'_> {
    fn append(&self, _: &Event) -> cairn_snapshot::Result<Lsn> {
        Err(SnapshotError::ReadOnly { what: "append" })
    }
    fn append_batch(&self, _: &[Event]) -> cairn_snapshot::Result<Option<(Lsn, Lsn)>> {
        Err(SnapshotError::ReadOnly { what: "append" })
    }
    fn head(&self) -> Head {
        self.0.lock().head()
    }
    fn read(&self, lsn: Lsn) -> cairn_snapshot::Result<Record> {
        Ok(self.0.lock().read(lsn)?)
    }
    fn for_each_from(
        &self,
        from: Lsn,
        f: &mut dyn FnMut(Record) -> cairn_snapshot::Result<()>,
    ) -> cairn_snapshot::Result<()> {
        let iter = self.0.lock().iter_from(from);
        for r in iter {
            f(r?)?;
        }
        Ok(())
    }
}

/// The log with every append made durable before it returns, whatever the
/// store's policy: for flows that destroy data (blob collection) on the
/// strength of a record.
struct DurableAppends<'a>(&'a Log);

impl LogAccess for DurableAppends<'_> {
    fn append(&self, event: &Event) -> cairn_snapshot::Result<Lsn> {
        let lsn = self.0.append(event)?;
        self.0.sync()?;
        Ok(lsn)
    }
    fn append_batch(&self, events: &[Event]) -> cairn_snapshot::Result<Option<(Lsn, Lsn)>> {
        let r = self.0.append_batch(events)?;
        self.0.sync()?;
        Ok(r)
    }
    fn head(&self) -> Head {
        self.0.head()
    }
    fn read(&self, lsn: Lsn) -> cairn_snapshot::Result<Record> {
        LogAccess::read(self.0, lsn)
    }
    fn for_each_from(
        &self,
        from: Lsn,
        f: &mut dyn FnMut(Record) -> cairn_snapshot::Result<()>,
    ) -> cairn_snapshot::Result<()> {
        LogAccess::for_each_from(self.0, from, f)
    }
}
