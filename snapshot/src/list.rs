//! Listing and finding checkpoints (through the workspace's checkpoint
//! list cache, see `list_cache.rs`).

use cairn_codec::CheckpointId;

use crate::checkpoint::{collected_note, is_imported_checkpoint, CheckpointInfo};
use crate::error::{Result, SnapshotError};
use crate::log_access::LogAccess;
use crate::workspace::Workspace;

/// Every checkpoint (of `session`, if given), oldest first, discarded ones
/// included and marked. Fast: the list is kept in the cache directory and
/// only the records appended since are folded in (rebuilt from the log if
/// the cache is missing or belongs to another log).
pub fn list_checkpoints<L: LogAccess + ?Sized>(
    log: &L,
    ws: &Workspace,
    session: Option<&str>,
) -> Result<Vec<CheckpointInfo>> {
    ws.checkpoint_list().list(log, session)
}

/// The checkpoint `id`; an unknown id is an error that says how to list
/// them, and the id of a checkpoint record without a manifest (imported)
/// one that says it holds no files.
pub fn find_checkpoint<L: LogAccess + ?Sized>(
    log: &L,
    ws: &Workspace,
    id: CheckpointId,
) -> Result<CheckpointInfo> {
    find_in_list(list_checkpoints(log, ws, None)?, log, id)
}

/// The checkpoint `id` in `all` (every checkpoint, as [`list_checkpoints`]
/// gives them), with [`find_checkpoint`]'s errors: for a store with no
/// workspace, whose list comes from the log's records, not a list cache.
pub fn find_in_list<L: LogAccess + ?Sized>(
    all: Vec<CheckpointInfo>,
    log: &L,
    id: CheckpointId,
) -> Result<CheckpointInfo> {
    if let Some(c) = all.into_iter().find(|c| c.id == id) {
        return Ok(c);
    }
    let record = (id.0 <= log.head().last_lsn)
        .then(|| log.read(id.0).ok())
        .flatten()
        .filter(|r| is_imported_checkpoint(&r.event));
    Err(match record {
        Some(r) => match collected_note(&r.event) {
            Some(note) => SnapshotError::CollectedCheckpoint {
                id,
                copy_of: note
                    .get("checkpoint")
                    .and_then(|c| c.as_str())
                    .and_then(|c| c.parse().ok()),
            },
            None if !r.event.parents.is_empty() => SnapshotError::ConversationPoint { id },
            None => SnapshotError::ImportedCheckpoint { id },
        },
        None => SnapshotError::UnknownCheckpoint { id },
    })
}
