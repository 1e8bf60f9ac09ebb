//! What a rollback would change: the workspace's tree now, and the plan
//! from it to a checkpoint's tree, leaving alone what no checkpoint can
//! bring back. What a dry run lists, a rollback applies, and the
//! recording of an interrupted rollback compares.

use std::collections::{BTreeSet, HashSet};

use crate::blobs::HashOnly;
use crate::capture;
use crate::checkpoint::CheckpointInfo;
use crate::error::Result;
use crate::manifest;
use crate::restore;
use crate::workspace::Workspace;

/// The workspace's tree as it is now, hashed and stored nowhere (unchanged
/// files by their stat data), for comparing with a checkpoint's; and
/// whether the tracked paths were known. A damaged tracked-path file is
/// read as empty: only tracked paths that are ignored are missed, which a
/// comparison that changes nothing can afford.
pub(crate) fn workspace_tree<B: crate::blobs::BlobRead + Sync + ?Sized>(
    ws: &Workspace,
    blobs: &B,
) -> Result<(manifest::Manifest, bool)> {
    let tracked = ws.load_track_for_capture()?.map(|t| t.tracked);
    let known = tracked.is_some();
    let tracked = tracked.unwrap_or_default();
    let cap = capture::capture_full(ws, &HashOnly(blobs), &tracked, &BTreeSet::new())?;
    Ok((cap.manifest().unwrap_or_default(), known))
}

/// The plan of a rollback to `target`, limited to `scope`, from the two
/// trees as [`restore::load_target`] or [`restore::diff_trees`] give them
/// (`cur` now, `tgt` the target's, `same` the directories alike in both),
/// leaving as they are the files no checkpoint can bring back (not
/// captured now, or not captured by `target`): with the paths it keeps.
/// What a dry run lists, a rollback applies, and an interrupted rollback's
/// recording compares.
pub(crate) fn rollback_plan(
    ws: &Workspace,
    (cur, tgt, same): (&manifest::Manifest, &manifest::Manifest, &HashSet<String>),
    scope: &[String],
    target: &CheckpointInfo,
) -> Result<(restore::Plan, Vec<restore::Kept>)> {
    let mut plan = restore::plan_pruned(cur, tgt, scope, same)?;
    let mut kept = restore::keep_uncaptured(ws, cur, &mut plan);
    // A name that is not UTF-8 is in no tree, so in no plan: its escaped
    // text must not keep a file whose path is spelt the same.
    let skipped: Vec<(String, String)> = target
        .not_captured
        .iter()
        .filter(|n| n.why != crate::scan::reason::NON_UTF8_NAME)
        .map(|n| (n.path.clone(), n.why.clone()))
        .collect();
    kept.extend(restore::keep_not_captured_at_target(
        &mut plan,
        &skipped,
        &target.id.to_string(),
    ));
    Ok((plan, kept))
}
