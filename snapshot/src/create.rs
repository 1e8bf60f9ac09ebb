//! How a checkpoint is created: capture the workspace (the scan mode,
//! the watcher, the tracked paths decide how), make its blobs durable,
//! then append the `checkpoint.create` record and update the caches.

use std::collections::BTreeSet;

use cairn_codec::{BlobHash, Event, EventKind};

use crate::blobs::BlobAccess;
use crate::capture::{self, Capture};
use crate::checkpoint::{
    session_or_default, CheckpointInfo, CheckpointRequest, NotCaptured, ScanMode, NOT_CAPTURED_KEY,
};
use crate::error::{Result, SnapshotError};
use crate::interrupted::record_interrupted_rollback;
use crate::log_access::LogAccess;
use crate::restore;
use crate::watch_journal::{self, Consumed, JournalPoint, ScanReport};
use crate::workspace::{LastCapture, Workspace};

fn capture_for<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    mode: ScanMode,
) -> Result<Capture> {
    let mut cap = capture_any(ws, blobs, mode)?;
    // `changed` counts against the previous checkpoint's tree, or the tree
    // a rollback since left. A full scan counts against the last full
    // scan's, which is another one after a tracked-only checkpoint (or
    // when the stat cache was lost): count again from the trees, reading
    // only the parts that differ.
    if let Some(last) = ws.load_last() {
        if let Some(rb) = &last.rolled_back {
            if let Ok(n) = count_changed_since_rollback(blobs, &last.root, rb, &cap.root) {
                cap.counts.changed = n;
            }
        } else if cap.base != Some(last.root) {
            if let Ok(n) = count_changed(blobs, &last.root, &cap.root) {
                cap.counts.changed = n;
            }
        }
    }
    Ok(cap)
}

/// Files and symlinks that differ (added, removed, other contents, mode or
/// kind) between two trees.
fn count_changed<B: crate::blobs::BlobRead + ?Sized>(
    blobs: &B,
    old: &BlobHash,
    new: &BlobHash,
) -> Result<u64> {
    if old == new {
        return Ok(0);
    }
    // Only the differing parts of the trees are read; the rest is equal.
    let (a, b, _) = restore::diff_trees(blobs, old, new)?;
    let leaf =
        |m: &crate::manifest::Manifest, p: &str| m.entries.get(p).filter(|e| e.is_leaf()).copied();
    let mut n = 0;
    let paths: BTreeSet<&String> = a.entries.keys().chain(b.entries.keys()).collect();
    for p in paths {
        if leaf(&a, p) != leaf(&b, p) {
            n += 1;
        }
    }
    Ok(n)
}

/// Files and symlinks that differ between `new` and the tree a rollback
/// left: `undo` (its undo point's tree) with `rb.target`'s entries at the
/// paths the rollback set. Only the parts of the trees that differ from
/// `undo` are read.
fn count_changed_since_rollback<B: crate::blobs::BlobRead + ?Sized>(
    blobs: &B,
    undo: &BlobHash,
    rb: &crate::workspace::RolledBack,
    new: &BlobHash,
) -> Result<u64> {
    // Within each pair's differing parts both sides are read exactly;
    // outside them a path's entry is the undo point's in both.
    let (u_n, n, _) = restore::diff_trees(blobs, undo, new)?;
    let (u_t, t, _) = restore::diff_trees(blobs, undo, &rb.target)?;
    let leaf =
        |m: &crate::manifest::Manifest, p: &str| m.entries.get(p).filter(|e| e.is_leaf()).copied();
    let paths: BTreeSet<&String> = [&u_n, &n, &u_t, &t]
        .iter()
        .flat_map(|m| m.entries.keys())
        .collect();
    let mut count = 0;
    for p in paths {
        let in_n = u_n.entries.contains_key(p) || n.entries.contains_key(p);
        let in_t = u_t.entries.contains_key(p) || t.entries.contains_key(p);
        let now = if in_n { leaf(&n, p) } else { leaf(&u_t, p) };
        let left = match (rb.set(p), in_t) {
            (true, true) => leaf(&t, p),
            (_, false) => leaf(&u_n, p),
            (false, true) => leaf(&u_t, p),
        };
        if now != left {
            count += 1;
        }
    }
    Ok(count)
}

fn capture_any<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    mode: ScanMode,
) -> Result<Capture> {
    let track = match ws.load_track_for_capture()? {
        Some(t) => t,
        None => {
            ws.warn(format!(
                "{} is damaged: the tracked paths are unknown, so this checkpoint {}scanned the whole workspace; track the paths again",
                ws.cache_path(crate::workspace::TRACKED_FILE).display(),
                if mode == ScanMode::TrackedOnly { "is not tracked-only: it " } else { "" },
            ));
            // Without the dirty set a tracked-only capture could miss a
            // change: scan everything.
            // A full scan (its report says so), with the warning above as the reason.
            return capture::capture_full(ws, blobs, &BTreeSet::new(), &BTreeSet::new());
        }
    };
    if track.rescan {
        // `track` found the file damaged and started afresh: what was
        // tracked or dirty before is unknown.
        return capture::capture_full(ws, blobs, &track.tracked, &track.dirty);
    }
    if let Some(w) = ws.watcher() {
        return capture_with_watcher(ws, blobs, &w, &track);
    }
    let reason = match capture_with_daemon(ws, blobs, mode, &track)? {
        Ok(cap) => return Ok(cap),
        Err(why) => why,
    };
    if mode == ScanMode::TrackedOnly {
        if let Some(last) = ws.load_last() {
            if blobs.contains(&last.root)? {
                return capture::capture_tracked(ws, blobs, &last, &track.dirty);
            }
        }
    }
    let mut cap = capture::capture_full(ws, blobs, &track.tracked, &track.dirty)?;
    cap.scan = ScanReport::full(reason);
    Ok(cap)
}

/// A capture with this process's watcher: both scan modes use the watched
/// change set (it covers tracked writes too, and edits by shell
/// commands); a full scan when the watcher cannot show it saw every
/// change.
fn capture_with_watcher<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    w: &crate::watch::Watcher,
    track: &crate::workspace::TrackState,
) -> Result<Capture> {
    let last = ws.load_last();
    if let Some(d) = w.drain(last.as_ref().map(|l| l.root)) {
        if let Some(last) = last.filter(|l| l.root == d.base) {
            if blobs.contains(&last.root)? {
                w.count(true);
                return capture::capture_watched(
                    ws,
                    blobs,
                    &last,
                    &d.paths,
                    &track.tracked,
                    &track.dirty,
                );
            }
        }
    }
    w.count(false);
    let mut cap = capture::capture_full(ws, blobs, &track.tracked, &track.dirty)?;
    cap.scan = ScanReport::full("this process's watcher could not show it saw every change");
    Ok(cap)
}

/// A capture with a `cairn watch` daemon, if one runs: flushed first, so
/// the capture (journal or full) reads every path after the flush point.
/// Why not, when no daemon journal can serve and `mode` is tracked-only
/// (or no daemon answers): the caller then chooses the capture.
fn capture_with_daemon<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    mode: ScanMode,
    track: &crate::workspace::TrackState,
) -> Result<std::result::Result<Capture, String>> {
    let flushed = if ws.is_read_only() {
        Err(watch_journal::NO_WATCHER.to_string())
    } else {
        watch_journal::flush(ws.cache_dir(), ws.root())
    };
    let to = match flushed {
        Ok(to) => to,
        Err(why) => return Ok(Err(why)),
    };
    let mut cap = match journal_span(ws, blobs, &to)? {
        Ok((last, span)) => {
            let mut cap = capture::capture_watched(
                ws,
                blobs,
                &last,
                &span.paths,
                &track.tracked,
                &track.dirty,
            )?;
            cap.scan = ScanReport::kind(watch_journal::SCAN_JOURNAL);
            cap
        }
        Err(why) if mode != ScanMode::TrackedOnly => {
            let mut cap = capture::capture_full(ws, blobs, &track.tracked, &track.dirty)?;
            cap.scan = ScanReport::full(why);
            cap
        }
        Err(why) => return Ok(Err(why)),
    };
    cap.journal_point = Some(to);
    Ok(Ok(cap))
}

/// The tree to patch and the journalled paths since it, when the journal
/// can prove it saw every change since that tree was captured (see
/// [`crate::watch_journal`]); else why not.
fn journal_span<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    to: &JournalPoint,
) -> Result<std::result::Result<(LastCapture, watch_journal::Span), String>> {
    let Some(from) = watch_journal::load_consumed(ws.cache_dir()) else {
        return Ok(Err("the first checkpoint since the watcher started".into()));
    };
    if from.point.epoch != to.epoch {
        return Ok(Err(
            "the watcher restarted (or started its journal afresh) since the last checkpoint that used it".into(),
        ));
    }
    let Some(last) = ws.load_last() else {
        return Ok(Err("no earlier capture to start from".into()));
    };
    if last.root != from.root {
        return Ok(Err(
            "the last capture did not start from the journal (a tracked-only checkpoint, or one without the watcher)".into(),
        ));
    }
    if !blobs.contains(&last.root)? {
        return Ok(Err("the last captured tree is not in the store".into()));
    }
    let journal = ws.cache_dir().join(watch_journal::JOURNAL_FILE);
    Ok(watch_journal::read_span(&journal, &from.point, to).map(|span| (last, span)))
}

fn create_inner<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
) -> Result<(CheckpointInfo, Capture)> {
    let watcher = ws.watcher();
    let res = create_record(log, blobs, ws, req);
    if let Some(w) = &watcher {
        match &res {
            Ok((_, cap)) => w.captured(cap.root),
            // The drained change set may not have made it into a checkpoint.
            Err(_) => w.invalidate(),
        }
    }
    res
}

/// [`create_inner`], running `during` on another thread while the capture
/// is made durable and recorded (a rollback plans and pre-stages its
/// writes meanwhile). `during`'s result comes back even if the checkpoint
/// fails, so it can be cleaned up.
pub(crate) fn create_inner_with<L, B, T, F>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
    during: F,
) -> (Result<(CheckpointInfo, Capture)>, Option<T>)
where
    L: LogAccess + ?Sized,
    B: BlobAccess + ?Sized,
    T: Send,
    F: FnOnce(&Capture) -> T + Send,
{
    let watcher = ws.watcher();
    let (res, extra) = match capture_for(ws, blobs, req.scan) {
        Err(e) => (Err(e), None),
        Ok(cap) => {
            let (committed, extra) = std::thread::scope(|s| {
                let h = s.spawn(|| during(&cap));
                let c = commit_record(log, blobs, ws, req, &cap);
                (c, h.join().ok())
            });
            match (committed, &extra) {
                (Ok(info), Some(_)) => (Ok((info, cap)), extra),
                (Ok(_), None) => (
                    Err(SnapshotError::Invalid("a planning thread panicked".into())),
                    None,
                ),
                (Err(e), _) => (Err(e), extra),
            }
        }
    };
    if let Some(w) = &watcher {
        match &res {
            Ok((_, cap)) => w.captured(cap.root),
            Err(_) => w.invalidate(),
        }
    }
    (res, extra)
}

fn create_record<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
) -> Result<(CheckpointInfo, Capture)> {
    let cap = capture_for(ws, blobs, req.scan)?;
    let info = commit_record(log, blobs, ws, req, &cap)?;
    Ok((info, cap))
}

/// Makes a capture durable and records it: blobs synced, then the
/// `checkpoint.create` record, then the caches.
fn commit_record<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
    cap: &Capture,
) -> Result<CheckpointInfo> {
    let state = req.state.as_deref().map(|s| blobs.put(s)).transpose()?;
    // The commit protocol: every blob durable before the record that names it.
    blobs.sync()?;

    let mut ev = Event::new(
        EventKind::CheckpointCreate,
        session_or_default(&req.session),
    );
    ev.run = req.run;
    ev.phase = req.phase;
    ev.agent = req.agent;
    ev.model = req.model;
    ev.label = req.label;
    ev.root = Some(cap.root);
    ev.state = state;
    ev.counts = Some(cap.counts.clone());
    if !cap.not_captured.is_empty() {
        let named: Vec<NotCaptured> = cap
            .not_captured
            .iter()
            .take(crate::scan::MAX_NOT_CAPTURED_NAMED)
            .map(|(path, why)| NotCaptured {
                path: path.clone(),
                why: why.to_string(),
            })
            .collect();
        let mut meta = serde_json::Map::new();
        meta.insert(NOT_CAPTURED_KEY.into(), serde_json::json!(named));
        ev.meta = Some(cairn_codec::event::Meta(meta));
    }
    let lsn = log.append(&ev)?;
    // Caches only after the record: they may name blobs only a durable checkpoint keeps.
    if let Some(c) = &cap.new_cache {
        ws.stat_cache()
            .save_in_background(c.clone(), cap.cache_changed.clone());
    }
    ws.save_last(Some(&cap.last()))?;
    if let Some(point) = cap.journal_point {
        // Best effort: a point not saved leaves the previous one, whose
        // tree no longer matches, so the next checkpoint scans in full.
        let c = Consumed {
            point,
            root: cap.root,
        };
        if let Err(e) = watch_journal::save_consumed(ws.cache_dir(), &c) {
            ws.warn(format!("the watcher's journal point was not saved: {e}"));
        }
    }
    // A damaged tracked-path file was read as empty by the capture; the
    // checkpoint is recorded, so set it aside for `track` to start afresh.
    if let Some(to) = ws.set_aside_damaged_track()? {
        ws.warn(format!("the damaged file was moved to {}", to.display()));
    }
    ws.clear_dirty(&cap.captured_dirty, cap.new_cache.is_some())?;
    let mut info = CheckpointInfo::from_record(lsn, &ev)
        .ok_or_else(|| SnapshotError::Invalid("internal: checkpoint record without root".into()))?;
    info.scan = Some(cap.scan.clone());
    Ok(info)
}

/// Takes a checkpoint: captures the workspace, makes its blobs durable,
/// then appends the `checkpoint.create` record. A rollback whose process
/// stopped part way is recorded first (see
/// [`record_interrupted_rollback`]), so the checkpoint of the tree it left
/// follows the record that explains it.
pub fn create_checkpoint<L: LogAccess + ?Sized, B: BlobAccess + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    req: CheckpointRequest,
) -> Result<CheckpointInfo> {
    ws.check_writable("checkpoint")?;
    let _flow = ws.flow();
    record_interrupted_rollback(log, blobs, ws)?;
    Ok(create_inner(log, blobs, ws, req)?.0)
}
