//! Rolling the workspace back to a checkpoint: the request and report,
//! and the flow (undo point, plan, pre-staged writes, the `rollback`
//! record) in named steps.

use std::collections::HashSet;
use std::path::PathBuf;

use cairn_codec::{BlobHash, CheckpointId, Event, Lsn};

use crate::blobs::BlobAccess;
use crate::capture::Capture;
use crate::checkpoint::{session_or_default, CheckpointInfo, CheckpointRequest, ScanMode};
use crate::create::create_inner_with;
use crate::error::{Result, SnapshotError};
use crate::interrupted::{
    interrupted_temporaries, record_interrupted_rollback, unfinished_rollback_warning, MarkerGuard,
    UnfinishedRollback,
};
use crate::list::find_checkpoint;
use crate::log_access::LogAccess;
use crate::rollback_plan::{rollback_plan, workspace_tree};
use crate::rollback_record::{
    record_incomplete, rollback_event, undo_point_label, MAX_ROLLBACK_FILES_LISTED,
    ROLLBACK_META_FILES_TOTAL, ROLLBACK_META_KEPT, ROLLBACK_META_SCOPE,
};
use crate::workspace::Workspace;
use crate::{manifest, restore};

/// What to roll back to, and the metadata of what the rollback records.
///
/// [`RollbackRequest::new`] gives a whole-workspace rollback with no
/// metadata; fill in the rest with struct update syntax:
///
/// ```
/// # use cairn_snapshot::RollbackRequest;
/// # let target = "c6".parse().unwrap();
/// let req = RollbackRequest {
///     run: Some("run-1".into()),
///     state: Some(b"memory epoch 7".to_vec()),
///     ..RollbackRequest::new(target)
/// };
/// assert!(req.paths.is_empty() && !req.dry_run);
/// ```
#[derive(Clone, Debug)]
pub struct RollbackRequest {
    /// The checkpoint to restore.
    pub target: CheckpointId,
    /// Limit the rollback to these paths (and what is under them); empty: everything.
    pub paths: Vec<String>,
    /// List what would change, change nothing (no records either).
    pub dry_run: bool,
    /// The session the pre-rollback checkpoint and the record belong to.
    pub session: String,
    /// Run id of the undo point and the `rollback` record.
    pub run: Option<String>,
    /// Phase id of the undo point and the record.
    pub phase: Option<String>,
    /// Agent name on the undo point and the record.
    pub agent: Option<String>,
    /// Model name on the undo point and the record.
    pub model: Option<String>,
    /// The application state now (the agent's memory epoch), stored as the
    /// undo point's state blob: rolling back to the undo point (undoing
    /// this rollback) hands it back in [`RollbackReport::state`]. A dry
    /// run stores nothing.
    pub state: Option<Vec<u8>>,
}

impl RollbackRequest {
    /// A rollback of the whole workspace to `target`, in the default
    /// session, with no run, phase, agent, model or state.
    pub fn new(target: CheckpointId) -> RollbackRequest {
        RollbackRequest {
            target,
            paths: Vec::new(),
            dry_run: false,
            session: String::new(),
            run: None,
            phase: None,
            agent: None,
            model: None,
            state: None,
        }
    }
}

/// What a rollback did (or, for a dry run, would do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackReport {
    /// The workspace acted on (or, for a dry run, that would be): its
    /// absolute, canonical path. A store says where its workspace is, so
    /// whoever shows a rollback's result names the directory it changed.
    pub workspace: PathBuf,
    /// The checkpoint taken just before (undo by rolling back to it); `None` for a dry run.
    pub source: Option<CheckpointId>,
    /// The checkpoint restored.
    pub target: CheckpointId,
    /// Files and symlinks written (or whose mode was restored).
    pub written: Vec<String>,
    /// Files and symlinks deleted.
    pub deleted: Vec<String>,
    /// Directories created.
    pub created_dirs: Vec<String>,
    /// Directories removed (or, for a dry run, to remove if they end up empty).
    pub removed_dirs: Vec<String>,
    /// Directories kept whose permission bits were set back.
    pub dir_modes: Vec<String>,
    /// Paths left as they are, each with the reason: the undo point could
    /// not capture what is there now, so changing it could not be undone
    /// (see [`restore::keep_uncaptured`]).
    pub kept: Vec<restore::Kept>,
    /// The target's application-state blob, for the embedder to rewind its memory.
    pub state: Option<Vec<u8>>,
    /// The hash of that blob (`cairn blob get HASH` prints it).
    pub state_hash: Option<BlobHash>,
    /// The `rollback` record; `None` for a dry run.
    pub lsn: Option<Lsn>,
    /// For a dry run, the temporary files a rollback interrupted part way
    /// left (`.cairn-restore-<pid>-<n>.tmp`, see [`crate::interrupted`]),
    /// which the rollback removes first (recording the interrupted one):
    /// not in `deleted`, which lists what the plan itself deletes. 0 for
    /// a rollback, whose warning says how many it removed.
    pub interrupted_temporaries: usize,
}

/// The paths of `paths` (as a path-scoped rollback takes them) that match
/// nothing, neither on disk nor in checkpoint `target`'s tree: most likely
/// typos, which a rollback would take as "nothing to change" (the CLI
/// refuses them, as git refuses a pathspec that matches no file). A path
/// that cannot be taken at all is an error, as in [`rollback`].
pub fn paths_matching_nothing<L: LogAccess + ?Sized, B: crate::blobs::BlobRead + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    target: CheckpointId,
    paths: &[String],
) -> Result<Vec<String>> {
    let target = find_checkpoint(log, ws, target)?;
    let mut out = Vec::new();
    for p in paths {
        let n = ws.normalize(p)?;
        if !n.is_empty()
            && std::fs::symlink_metadata(ws.root().join(&n)).is_err()
            && crate::manifest::lookup(blobs, &target.root, &n)?.is_none()
        {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// What a checkpoint needs to be restored that the store may no longer hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restorable {
    /// Its manifest, every file it names and its application state are stored.
    Whole,
    /// Its manifest or a file it names is gone.
    FilesGone,
    /// Its files are all stored, but not its application-state blob.
    StateGone(BlobHash),
}

/// Whether every blob `c` needs to be restored is still in the store: its
/// manifest, every file it names, and its application state. A discarded
/// checkpoint is restorable exactly then: gc keeps the tree a later
/// rollback restored (the state from that rollback on is that tree), and
/// its application state with it, whole, so `tree`, `show` and `rollback`
/// all work on it until gc collects it.
fn restorable<B: BlobAccess + ?Sized>(blobs: &B, c: &CheckpointInfo) -> Result<Restorable> {
    if !blobs.contains(&c.root)? {
        return Ok(Restorable::FilesGone);
    }
    let Ok(m) = manifest::list(blobs, &c.root) else {
        return Ok(Restorable::FilesGone);
    };
    for (_, e) in m.files() {
        if !blobs.contains(&e.hash)? {
            return Ok(Restorable::FilesGone);
        }
    }
    match c.state {
        Some(s) if !blobs.contains(&s)? => Ok(Restorable::StateGone(s)),
        _ => Ok(Restorable::Whole),
    }
}

/// Rolls the workspace back to a checkpoint (see the crate docs for the
/// rules). A discarded checkpoint can be the target while its whole tree
/// and its application state are still in the store (see `restorable`).
///
/// The steps: find the target and refuse one that cannot be restored;
/// for a dry run, plan and report only (`dry_run`); otherwise record an
/// interrupted rollback first, take the undo point while the plan is
/// made and its first writes pre-staged (`take_undo_point`), apply the
/// plan and append the `rollback` record (`apply_and_record`), and
/// remember the tree it left for the next checkpoint's count.
pub fn rollback<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    mut req: RollbackRequest,
) -> Result<RollbackReport> {
    let _flow = ws.flow();
    let target = find_checkpoint(log, ws, req.target)?;
    check_restorable(blobs, &target)?;
    let scope = req
        .paths
        .iter()
        .map(|p| ws.normalize(p))
        .collect::<Result<Vec<String>>>()?;
    let state = target.state.map(|h| blobs.get(&h)).transpose()?;
    if req.dry_run {
        return dry_run(log, blobs, ws, &target, &scope, state);
    }
    ws.check_writable("roll back")?;
    record_interrupted_rollback(log, blobs, ws)?;
    // This rollback's marker: written durably while the undo point is made
    // durable (when the plan changes anything), so it is there before
    // anything the user sees changes; removed when `marker` is dropped,
    // after the `rollback` record (see `crate::interrupted`).
    let unfinished = unfinished_rollback(log, &req, &target, &scope);
    let mut marker = MarkerGuard::new(ws);
    let undo_req = undo_point_request(&mut req, target.id);
    let ready = take_undo_point(
        log,
        blobs,
        ws,
        undo_req,
        (&target, &scope),
        (&marker, &unfinished),
    )?;
    let ev = request_event(req, ready.undo.id, target.id, &scope);
    let Ready {
        undo,
        undo_cap,
        plan,
        staged,
        kept,
    } = ready;
    let (lsn, done) = apply_and_record(
        log,
        blobs,
        ws,
        ev,
        (undo.id, &scope, &kept),
        (plan, staged),
        &mut marker,
    )?;
    remember_rolled_back(ws, &undo_cap, &target, scope, &kept);
    Ok(RollbackReport {
        workspace: ws.root().to_path_buf(),
        source: Some(undo.id),
        target: target.id,
        written: done.written,
        deleted: done.deleted,
        created_dirs: done.created_dirs,
        removed_dirs: done.removed_dirs,
        dir_modes: done.dir_modes,
        kept,
        state,
        state_hash: target.state,
        lsn: Some(lsn),
        interrupted_temporaries: 0,
    })
}

/// The `rollback` record of `req` from the undo point `undo` to `target`,
/// naming the run, phase, agent and model the request gives.
fn request_event(
    req: RollbackRequest,
    undo: CheckpointId,
    target: CheckpointId,
    scope: &[String],
) -> Event {
    let mut ev = rollback_event(&req.session, undo, target, scope);
    ev.run = req.run;
    ev.phase = req.phase;
    ev.agent = req.agent;
    ev.model = req.model;
    ev
}

/// Refuses a discarded target whose tree or application state the store
/// no longer holds whole (see [`restorable`]).
fn check_restorable<B: BlobAccess + ?Sized>(blobs: &B, target: &CheckpointInfo) -> Result<()> {
    if !target.discarded {
        return Ok(());
    }
    let at = target.discarded_at.unwrap_or(target.lsn);
    match restorable(blobs, target)? {
        Restorable::Whole => Ok(()),
        Restorable::FilesGone => Err(SnapshotError::Discarded {
            id: target.id,
            at,
            by_retention: target.discarded_by_retention,
        }),
        Restorable::StateGone(state) => Err(SnapshotError::DiscardedStateGone {
            id: target.id,
            at,
            by_retention: target.discarded_by_retention,
            state,
        }),
    }
}

/// A dry run: the plan from the workspace as it is now to `target`,
/// checked as the real run checks it, and nothing written (no records
/// either).
fn dry_run<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    target: &CheckpointInfo,
    scope: &[String],
    state: Option<Vec<u8>>,
) -> Result<RollbackReport> {
    // A dry run writes nothing, so it only says a rollback is unfinished.
    if let Some(w) = unfinished_rollback_warning(log, ws) {
        ws.warn(w);
    }
    let (cur, tracked_known) = workspace_tree(ws, blobs)?;
    if !tracked_known {
        ws.warn(format!(
            "{} is damaged: the tracked paths are unknown, so this dry run leaves out any that .gitignore ignores; the next checkpoint or `track` sets the file aside",
            ws.cache_path(crate::workspace::TRACKED_FILE).display()
        ));
    }
    let (tgt, same) = restore::load_target(blobs, &target.root, &cur)?;
    let (mut plan, kept) = rollback_plan(ws, (&cur, &tgt, &same), scope, target)?;
    // What the real run checks before changing anything.
    restore::precheck(ws, &plan)?;
    // The workspace's tree holds them; the rollback removes them
    // before its undo point is taken, so its plan never sees them.
    let temporaries = interrupted_temporaries(log, blobs, ws);
    if !temporaries.is_empty() {
        let gone: HashSet<&str> = temporaries.iter().map(String::as_str).collect();
        plan.delete.retain(|p| !gone.contains(p.as_str()));
    }
    Ok(RollbackReport {
        workspace: ws.root().to_path_buf(),
        source: None,
        target: target.id,
        written: plan.write.iter().map(|w| w.path.clone()).collect(),
        deleted: plan.delete.clone(),
        created_dirs: plan.create_dirs.iter().map(|d| d.0.clone()).collect(),
        removed_dirs: plan.remove_dirs.clone(),
        dir_modes: plan.dir_modes.iter().map(|d| d.0.clone()).collect(),
        kept,
        state,
        state_hash: target.state,
        lsn: None,
        interrupted_temporaries: temporaries.len(),
    })
}

/// The request of the undo point of `req`, a rollback to `target`: a full
/// scan with the rollback's metadata, labelled so that the recording of
/// an interrupted rollback finds it, holding the application state now.
fn undo_point_request(req: &mut RollbackRequest, target: CheckpointId) -> CheckpointRequest {
    CheckpointRequest {
        session: req.session.clone(),
        run: req.run.clone(),
        phase: req.phase.clone(),
        agent: req.agent.clone(),
        model: req.model.clone(),
        label: Some(undo_point_label(target)),
        state: req.state.take(),
        scan: ScanMode::Full,
    }
}

/// What this rollback's marker says: enough for the next flow to record
/// it if the process stops part way.
fn unfinished_rollback<L: LogAccess + ?Sized>(
    log: &L,
    req: &RollbackRequest,
    target: &CheckpointInfo,
    scope: &[String],
) -> UnfinishedRollback {
    let head = log.head();
    UnfinishedRollback {
        target: target.id,
        session: session_or_default(&req.session),
        run: req.run.clone(),
        phase: req.phase.clone(),
        agent: req.agent.clone(),
        model: req.model.clone(),
        scope: scope.to_vec(),
        started: cairn_codec::Timestamp::now(),
        pid: std::process::id(),
        head_before: head.last_lsn,
        head_chain: head.chain,
    }
}

/// A rollback ready to change the workspace: its undo point is durable,
/// its plan made and checked, its first writes pre-staged.
struct Ready {
    /// The undo point.
    undo: CheckpointInfo,
    /// The undo point's capture (the base of the tree the rollback leaves).
    undo_cap: Capture,
    /// What to change.
    plan: restore::Plan,
    /// The writes already staged in temporaries.
    staged: restore::Prestaged,
    /// The paths left as they are, with why.
    kept: Vec<restore::Kept>,
}

/// What planning returns while the undo point is recorded: the plan, its
/// staged writes, the paths marked dirty (pinned until the undo point is
/// done) and the paths kept.
type Planned = (
    restore::Plan,
    restore::Prestaged,
    Vec<String>,
    Vec<restore::Kept>,
);

/// Takes the undo point (`undo_req`), and meanwhile plans the rollback
/// from its tree ([`plan_and_prestage`]), so the fsyncs overlap. Nothing
/// the user sees changes before the undo point is durable. On failure,
/// whatever was staged is discarded and the dirty marks unpinned.
fn take_undo_point<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    undo_req: CheckpointRequest,
    (target, scope): (&CheckpointInfo, &[String]),
    note: (&MarkerGuard<'_>, &UnfinishedRollback),
) -> Result<Ready> {
    let (made, planned) = create_inner_with(log, blobs, ws, undo_req, |cap: &Capture| {
        plan_and_prestage(ws, blobs, cap, (target, scope), note)
    });
    let (undo, undo_cap) = match made {
        Ok(x) => x,
        Err(e) => {
            if let Some(Ok((_, staged, pinned, _))) = planned {
                staged.discard();
                ws.unpin_dirty(&pinned);
            }
            return Err(e);
        }
    };
    let (plan, staged, pinned, kept) =
        planned.ok_or_else(|| SnapshotError::Invalid("internal: no plan".into()))??;
    // The pre-rollback checkpoint is done: later ones may clear the marks.
    ws.unpin_dirty(&pinned);
    Ok(Ready {
        undo,
        undo_cap,
        plan,
        staged,
        kept,
    })
}

/// Runs while the undo point is made durable: the plan from its tree (only
/// the parts of the two trees that differ are read), checked; every path
/// the plan may touch marked dirty (durably: a tracked-only checkpoint
/// after a crash must re-read them; marking more than ends up touched, if
/// applying fails half-way, only costs a few re-reads), and pinned; the
/// marker written (when the plan changes anything); and the first files
/// written to temporaries.
fn plan_and_prestage<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    cap: &Capture,
    (target, scope): (&CheckpointInfo, &[String]),
    (marker, unfinished): (&MarkerGuard<'_>, &UnfinishedRollback),
) -> Result<Planned> {
    let (cur, tgt, same) = restore::diff_trees(blobs, &cap.root, &target.root)?;
    let (plan, kept) = rollback_plan(ws, (&cur, &tgt, &same), scope, target)?;
    // Before anything changes (the dry run checks the same).
    restore::precheck(ws, &plan)?;
    let planned: Vec<String> = plan
        .write
        .iter()
        .map(|w| w.path.clone())
        .chain(plan.delete.iter().cloned())
        .chain(plan.create_dirs.iter().map(|d| d.0.clone()))
        .chain(plan.remove_dirs.iter().cloned())
        .chain(plan.dir_modes.iter().map(|d| d.0.clone()))
        .collect();
    let (pre, marked) = std::thread::scope(|s| {
        let marking = s.spawn(|| ws.mark_dirty_pinned(&planned));
        let noting = s.spawn(|| {
            if plan.is_empty() {
                Ok(())
            } else {
                marker.write(unfinished)
            }
        });
        let pre = restore::prestage(ws, blobs, &plan);
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<()>>| {
            h.join()
                .unwrap_or_else(|_| Err(SnapshotError::Invalid("a thread panicked".into())))
        };
        let marked = joined(marking).and(joined(noting));
        (pre, marked)
    });
    let failed = match (pre, marked) {
        (Ok(pre), Ok(())) => return Ok((plan, pre, planned, kept)),
        (Ok(pre), Err(e)) => {
            pre.discard();
            e
        }
        (Err(e), _) => e,
    };
    ws.unpin_dirty(&planned);
    Err(failed)
}

/// Applies the plan, syncs the directories it changed, then appends `ev`
/// (the `rollback` record of the undo point `undo`, limited to `scope`,
/// keeping `kept`) with the paths it touched. A failure on the way is
/// recorded as an incomplete rollback whose error names the undo point;
/// if even that record cannot be appended, the marker stays for the next
/// flow to record it.
fn apply_and_record<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    mut ev: Event,
    (undo, scope, kept): (CheckpointId, &[String], &[restore::Kept]),
    (plan, staged): (restore::Plan, restore::Prestaged),
    marker: &mut MarkerGuard<'_>,
) -> Result<(Lsn, restore::Applied)> {
    let incomplete = |e| SnapshotError::RollbackIncomplete {
        source_checkpoint: undo,
        cause: Box::new(e),
    };
    let mut meta = serde_json::Map::new();
    if !kept.is_empty() {
        let listed = &kept[..kept.len().min(MAX_ROLLBACK_FILES_LISTED)];
        meta.insert(ROLLBACK_META_KEPT.into(), serde_json::json!(listed));
    }
    let (done, dirs) = match restore::apply_prestaged(ws, blobs, &plan, staged) {
        Ok(x) => x,
        Err(e) => {
            if record_incomplete(log, ev, meta, format!("stopped part way: {e}")).is_err() {
                // The next flow records it.
                marker.keep();
            }
            return Err(incomplete(e));
        }
    };
    #[cfg(test)]
    if STOP_ROLLBACK_UNDER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_deref()
        == Some(ws.root())
    {
        panic!("injected stop: the process dies before the rollback record");
    }
    list_touched(&mut ev, &mut meta, &done, scope);
    // The changed directories are synced before the record is appended, so
    // a record that says ok is never followed by a sync that failed (on
    // ext4 a directory's fsync takes a fraction of a millisecond, small
    // beside the undo point's).
    if let Err(e) = dirs.sync() {
        let why = format!("applied, but not made durable: {e}");
        if record_incomplete(log, ev, meta, why).is_err() {
            marker.keep();
        }
        return Err(incomplete(e));
    }
    if !meta.is_empty() {
        ev.meta = Some(cairn_codec::event::Meta(meta));
    }
    // Without its record, the marker stays for the next flow to record it.
    let lsn = log.append(&ev).inspect_err(|_| marker.keep())?;
    Ok((lsn, done))
}

/// Sets the record's `files` to the paths the rollback touched, each once
/// and in order (a file replaced by a directory, or the other way round,
/// is both deleted and written), cut at [`MAX_ROLLBACK_FILES_LISTED`];
/// a cut list adds the total and the scope to `meta`.
fn list_touched(
    ev: &mut Event,
    meta: &mut serde_json::Map<String, serde_json::Value>,
    done: &restore::Applied,
    scope: &[String],
) {
    let touched: Vec<String> = done
        .written
        .iter()
        .chain(&done.deleted)
        .chain(&done.created_dirs)
        .chain(&done.removed_dirs)
        .chain(&done.dir_modes)
        .cloned()
        .collect::<std::collections::BTreeSet<String>>()
        .into_iter()
        .collect();
    ev.files = touched
        .iter()
        .take(MAX_ROLLBACK_FILES_LISTED)
        .cloned()
        .collect();
    if touched.len() > MAX_ROLLBACK_FILES_LISTED {
        // Replay then takes the rollback's scope, except the paths it kept
        // (`cairn_query::replay::rollback_scope`), as the paths it set.
        meta.insert(
            ROLLBACK_META_FILES_TOTAL.into(),
            serde_json::json!(touched.len()),
        );
        meta.insert(ROLLBACK_META_SCOPE.into(), serde_json::json!(scope));
    }
}

/// Remembers the tree the rollback left (its undo point's tree with the
/// target's entries at the paths it set), so the next checkpoint counts
/// what changed since. A cache: if it cannot be saved, that count is
/// against the undo point's tree instead.
fn remember_rolled_back(
    ws: &Workspace,
    undo_cap: &Capture,
    target: &CheckpointInfo,
    scope: Vec<String>,
    kept: &[restore::Kept],
) {
    let mut last = undo_cap.last();
    last.rolled_back = Some(crate::workspace::RolledBack {
        target: target.root,
        scope,
        kept: kept.iter().map(|k| k.path.clone()).collect(),
    });
    let _ = ws.save_last(Some(&last));
}

/// Test hook: a rollback in the workspace at this root stops (panics, as
/// if the process died) once its files are written, before its record.
#[cfg(test)]
pub(crate) static STOP_ROLLBACK_UNDER: std::sync::Mutex<Option<std::path::PathBuf>> =
    std::sync::Mutex::new(None);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::create::create_checkpoint;
    use crate::durable::FAIL_DIR_SYNC_UNDER;
    use crate::log_access::MemLog;
    use crate::rollback_record::ROLLBACK_INCOMPLETE;
    use crate::SnapshotOptions;
    use cairn_codec::EventKind;
    use cairn_engine::blob::{BlobOptions, BlobStore};
    use cairn_engine::log::{Log, LogOptions};
    use cairn_engine::{RealVfs, Vfs};
    use std::sync::Arc;

    /// A directory fsync that fails once the rollback's files are in place
    /// (a failing disk) is recorded as an incomplete rollback, never as
    /// one that succeeded, and the error names the undo point.
    #[test]
    fn a_directory_sync_that_fails_is_never_recorded_as_ok() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let store = root.join(".cairn");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(store.join("blobs")).unwrap();
        let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
        let log = Log::open(vfs.clone(), &store.join("log"), LogOptions::default()).unwrap();
        let blobs = BlobStore::open(vfs, &store.join("blobs"), BlobOptions::default()).unwrap();
        let ws =
            Workspace::open(&root, &store.join("snapshot"), SnapshotOptions::default()).unwrap();
        std::fs::write(root.join("sub/a.txt"), "one").unwrap();
        let c1 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        std::fs::write(root.join("sub/a.txt"), "two").unwrap();
        std::fs::write(root.join("sub/new.txt"), "new").unwrap();
        let sub = ws.root().join("sub");
        *FAIL_DIR_SYNC_UNDER.lock().unwrap() = Some(sub.clone());
        let got = rollback(&log, &blobs, &ws, RollbackRequest::new(c1.id));
        *FAIL_DIR_SYNC_UNDER.lock().unwrap() = None;
        let err = got.unwrap_err();
        let SnapshotError::RollbackIncomplete {
            source_checkpoint, ..
        } = &err
        else {
            panic!("not an incomplete rollback: {err}");
        };
        assert!(err.to_string().contains("injected I/O error"), "{err}");
        let head = LogAccess::head(&log);
        let rec = LogAccess::read(&log, head.last_lsn).unwrap().event;
        assert_eq!(rec.kind, EventKind::Rollback);
        assert!(!rec.ok, "the record says the rollback failed");
        assert_eq!(rec.error_kind.as_deref(), Some(ROLLBACK_INCOMPLETE));
        assert_eq!(rec.source, Some(*source_checkpoint));
        assert_eq!(rec.target, Some(c1.id));
        assert!(rec.text.unwrap().contains("not made durable"));
        assert_eq!(rec.files, vec!["sub/a.txt", "sub/new.txt"]);
        // No other rollback record: the failed sync was not preceded by
        // one that said ok.
        let mut rollbacks = 0;
        LogAccess::for_each_from(&log, Lsn(1), &mut |r| {
            rollbacks += usize::from(r.event.kind == EventKind::Rollback);
            Ok(())
        })
        .unwrap();
        assert_eq!(rollbacks, 1);
    }

    /// Every file under `root` but `.cairn`, with its contents.
    fn files(root: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
        let mut out = std::collections::BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                if rel == ".cairn" {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    /// A rollback whose process dies once its files are written, before
    /// its record (a panic here), leaves its marker; the next checkpoint
    /// records it as a rollback that stopped part way, naming the undo
    /// point, before its own record, and removes the marker; the undo point
    /// brings back the tree from before.
    #[test]
    fn a_rollback_stopped_before_its_record_is_recorded_by_the_next_checkpoint() {
        use crate::interrupted::{rollback_marker, ROLLBACK_META_INTERRUPTED};
        let (_dir, ws, log, blobs, c1, before, undo) = stop_a_rollback();
        let req = RollbackRequest::new;
        let next = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        assert_eq!(next.lsn, Lsn(undo.0 + 2), "one record between");
        let rec = LogAccess::read(&log, Lsn(undo.0 + 1)).unwrap().event;
        assert_eq!(rec.kind, EventKind::Rollback);
        assert!(!rec.ok);
        assert_eq!(rec.error_kind.as_deref(), Some(ROLLBACK_INCOMPLETE));
        assert_eq!(rec.source, Some(CheckpointId(undo)));
        assert_eq!(rec.target, Some(c1.id));
        assert_eq!(rec.parents, vec![undo, c1.lsn]);
        let text = rec.text.unwrap();
        assert!(text.contains("the process stopped part way"), "{text}");
        // It had written every file: the record says so.
        assert!(
            text.contains("it had restored every file: the workspace is as at c1"),
            "{text}"
        );
        let meta = rec.meta.unwrap();
        assert_eq!(
            meta.0[ROLLBACK_META_INTERRUPTED]["pid"],
            serde_json::json!(std::process::id())
        );
        assert_eq!(
            meta.0[ROLLBACK_META_INTERRUPTED]["workspace"],
            serde_json::json!("restored")
        );
        assert!(rollback_marker(&ws).is_none(), "the marker is still there");
        let warned = ws.take_warnings().join("\n");
        assert!(warned.contains("was interrupted"), "{warned}");
        assert!(
            warned.contains(&format!("`cairn rollback c{undo}` undoes it")),
            "{warned}"
        );
        // Recorded once: the next checkpoint adds only itself.
        let again = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        assert_eq!(again.lsn, next.lsn.next());
        // The undo point restores the tree from before the rollback.
        rollback(&log, &blobs, &ws, req(CheckpointId(undo))).unwrap();
        assert_eq!(files(ws.root()), before);
        assert!(
            rollback_marker(&ws).is_none(),
            "a finished rollback left its marker"
        );
    }

    /// Trial 14 T6: a dry run after a rollback interrupted part way
    /// leaves the temporaries it left (`.cairn-restore-<pid>-<n>.tmp`) out
    /// of its plan, and counts them instead: the rollback removes them
    /// first, and its plan is the dry run's. A file that only looks like
    /// one (another process's, a directory) is the user's, as before.
    #[test]
    fn a_dry_run_counts_an_interrupted_rollback_s_temporaries_not_as_deletions() {
        let (_dir, ws, log, blobs, c1, _before, _undo) = stop_a_rollback();
        let pid = std::process::id();
        let root = ws.root().to_path_buf();
        // Where that rollback wrote files: the root and `sub`.
        for t in [
            format!(".cairn-restore-{pid}-0.tmp"),
            format!(".cairn-restore-{pid}-17.tmp"),
            format!("sub/.cairn-restore-{pid}-3.tmp"),
        ] {
            std::fs::write(root.join(t), "staged").unwrap();
        }
        let other = format!(".cairn-restore-{}-1.tmp", pid + 1);
        std::fs::write(root.join(&other), "not that rollback's").unwrap();
        std::fs::create_dir(root.join(format!("sub/.cairn-restore-{pid}-9.tmp"))).unwrap();
        std::fs::write(root.join("new.txt"), "created since").unwrap();
        let dry_run = || {
            let req = RollbackRequest {
                dry_run: true,
                ..RollbackRequest::new(c1.id)
            };
            rollback(&log, &blobs, &ws, req).unwrap()
        };
        let dry = dry_run();
        assert_eq!(dry.interrupted_temporaries, 3, "{dry:?}");
        assert_eq!(dry.deleted, [other.clone(), "new.txt".to_string()]);
        assert_eq!(
            dry.removed_dirs,
            [format!("sub/.cairn-restore-{pid}-9.tmp")]
        );
        // The dry run changed nothing, and says the rollback is unfinished.
        assert!(root.join(format!(".cairn-restore-{pid}-0.tmp")).exists());
        assert!(crate::interrupted::rollback_marker(&ws).is_some());
        // The rollback removes them first: its plan is the dry run's.
        let done = rollback(&log, &blobs, &ws, RollbackRequest::new(c1.id)).unwrap();
        assert_eq!(done.interrupted_temporaries, 0);
        assert_eq!(done.deleted, dry.deleted);
        assert_eq!(done.removed_dirs, dry.removed_dirs);
        assert!(!root.join(format!(".cairn-restore-{pid}-0.tmp")).exists());
        assert!(!root
            .join(format!("sub/.cairn-restore-{pid}-3.tmp"))
            .exists());
        let warned = ws.take_warnings().join("\n");
        assert!(
            warned.contains("removed the 3 temporary files it left"),
            "{warned}"
        );
        // With nothing interrupted, a dry run counts none.
        assert_eq!(dry_run().interrupted_temporaries, 0);
    }

    /// Trial 13 N6: the record written for a rollback whose process
    /// stopped part way carries the run, phase, agent and model the
    /// rollback had (from its marker), as its undo point does.
    #[test]
    fn an_interrupted_rollback_s_record_carries_its_run_phase_agent_and_model() {
        let (_dir, ws, log, blobs, _c1, _before, undo) = stop_a_rollback();
        create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        let stamp = |lsn| {
            let e = LogAccess::read(&log, lsn).unwrap().event;
            (e.kind, e.run, e.phase, e.agent, e.model)
        };
        let want = |kind| {
            (
                kind,
                Some("run-1".to_string()),
                Some("edit".to_string()),
                Some("coder".to_string()),
                Some("model-x".to_string()),
            )
        };
        assert_eq!(stamp(undo), want(EventKind::CheckpointCreate));
        assert_eq!(stamp(Lsn(undo.0 + 1)), want(EventKind::Rollback));
    }

    /// What the record of an interrupted rollback says of the workspace is
    /// what the workspace holds: here, as if the rollback had stopped
    /// before changing any file (its changes undone by hand), and part way
    /// (one of its files undone).
    #[test]
    fn an_interrupted_rollback_s_record_says_how_far_it_got() {
        use crate::interrupted::ROLLBACK_META_INTERRUPTED;
        for (undo_by_hand, word, says) in [
            (
                &["a.txt", "sub/b.txt", "c.txt"][..],
                "unchanged",
                "it stopped before it changed any file: the workspace is as at c",
            ),
            (&["a.txt"][..], "mixed", "the workspace holds a mix of c"),
        ] {
            let (_dir, ws, log, blobs, _c1, before, undo) = stop_a_rollback();
            for p in undo_by_hand {
                let path = ws.root().join(p);
                match before.get(*p) {
                    Some(bytes) => std::fs::write(&path, bytes).unwrap(),
                    None => std::fs::remove_file(&path).unwrap(),
                }
            }
            create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
            let rec = LogAccess::read(&log, Lsn(undo.0 + 1)).unwrap().event;
            assert_eq!(rec.kind, EventKind::Rollback);
            let text = rec.text.unwrap();
            assert!(text.contains(says), "{word}: {text}");
            assert_eq!(
                rec.meta.unwrap().0[ROLLBACK_META_INTERRUPTED]["workspace"],
                serde_json::json!(word)
            );
            let warned = ws.take_warnings().join("\n");
            assert!(warned.contains(says), "{word}: {warned}");
        }
    }

    /// A workspace whose rollback to `c1` was stopped (a panic, as if the
    /// process died) once its files were written, before its record:
    /// the temporary directory, workspace, log, blobs, `c1`, the files
    /// before the rollback, and the undo point's LSN.
    #[allow(clippy::type_complexity)]
    fn stop_a_rollback() -> (
        tempfile::TempDir,
        Workspace,
        MemLog,
        crate::MemBlobs,
        CheckpointInfo,
        std::collections::BTreeMap<String, Vec<u8>>,
        Lsn,
    ) {
        use crate::interrupted::{rollback_marker, RollbackMarker};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        let ws = Workspace::open(
            &root,
            &root.join(".cairn/snapshot"),
            SnapshotOptions::default(),
        )
        .unwrap();
        let (log, blobs) = (MemLog::new(), crate::MemBlobs::new());
        std::fs::write(root.join("a.txt"), "one").unwrap();
        std::fs::write(root.join("sub/b.txt"), "one").unwrap();
        let c1 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
        std::fs::write(root.join("a.txt"), "two").unwrap();
        std::fs::remove_file(root.join("sub/b.txt")).unwrap();
        std::fs::write(root.join("c.txt"), "new").unwrap();
        let before = files(ws.root());
        let req = |target| RollbackRequest {
            run: Some("run-1".into()),
            phase: Some("edit".into()),
            agent: Some("coder".into()),
            model: Some("model-x".into()),
            ..RollbackRequest::new(target)
        };

        // The hook is one for the process: tests that stop a rollback
        // take turns.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        *STOP_ROLLBACK_UNDER.lock().unwrap() = Some(ws.root().to_path_buf());
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rollback(&log, &blobs, &ws, req(c1.id))
        }));
        *STOP_ROLLBACK_UNDER.lock().unwrap() = None;
        drop(turn);
        assert!(got.is_err(), "the rollback was not stopped");
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "one");
        let Some(RollbackMarker::Unfinished(m)) = rollback_marker(&ws) else {
            panic!("no marker: {:?}", rollback_marker(&ws));
        };
        assert_eq!((m.target, m.pid), (c1.id, std::process::id()));
        // The log ends with the undo point: nothing else says what happened.
        let undo = LogAccess::read(&log, LogAccess::head(&log).last_lsn).unwrap();
        assert_eq!(undo.event.kind, EventKind::CheckpointCreate);
        assert_eq!(undo.event.label.as_deref(), Some("Before rollback to c1"));
        (dir, ws, log, blobs, c1, before, undo.lsn)
    }
}
