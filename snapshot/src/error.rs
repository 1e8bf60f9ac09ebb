//! The snapshot crate's error type. Every variant names what failed and where.

use std::fmt;
use std::path::PathBuf;

use cairn_codec::{BlobHash, CheckpointId, CodecError};
use cairn_engine::EngineError;

/// A result with [`SnapshotError`].
pub type Result<T, E = SnapshotError> = std::result::Result<T, E>;

/// Everything that can go wrong while scanning, checkpointing or rolling back.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// An I/O operation on a workspace or cache file failed.
    Io {
        /// What was being done ("read file", "rename into place", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The engine (log or blob store) failed.
    Engine(EngineError),
    /// An encoding error from the codec.
    Codec(CodecError),
    /// A path given by the caller (or found in a manifest) is not a valid
    /// workspace-relative path, or escapes the workspace.
    BadPath {
        /// The path as given.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// A manifest node is damaged or not a manifest node.
    BadManifest {
        /// The node's blob hash.
        node: BlobHash,
        /// What was wrong.
        detail: String,
    },
    /// No checkpoint with this id exists in the store.
    UnknownCheckpoint {
        /// The id asked for.
        id: CheckpointId,
    },
    /// The id names a `checkpoint.create` record without a manifest (one
    /// imported from another tool's audit log): it captured no files, so
    /// there is nothing to restore or branch from.
    ImportedCheckpoint {
        /// The id asked for.
        id: CheckpointId,
    },
    /// The id names a point of a conversation imported from its
    /// transcript (a `checkpoint.create` record without a manifest that
    /// names `parents`, as the Claude Code importer records one before
    /// each prompt): the transcript does not say what the files were then,
    /// so there is nothing to restore.
    ConversationPoint {
        /// The id asked for.
        id: CheckpointId,
    },
    /// The id names a `checkpoint.create` record imported without its
    /// files: the line was a copy of a checkpoint whose files gc had
    /// collected (`cairn import --collected-checkpoints record`), so the
    /// record keeps the hashes it named under `meta.collected`, but there
    /// is nothing to restore or branch from.
    CollectedCheckpoint {
        /// The id asked for.
        id: CheckpointId,
        /// The checkpoint whose record the imported line copied (of the
        /// store it was imported into), when the record says so.
        copy_of: Option<CheckpointId>,
    },
    /// The checkpoint was discarded (by retention or by a recorded
    /// `checkpoint.discard`) and its files are no longer all in the store.
    Discarded {
        /// The id asked for.
        id: CheckpointId,
        /// The LSN of the `checkpoint.discard` record.
        at: cairn_codec::Lsn,
        /// True if retention (gc) discarded it, false if a recorded event did.
        by_retention: bool,
    },
    /// The checkpoint was discarded (by retention or by a recorded
    /// `checkpoint.discard`); its files are all still in the store, but its
    /// application-state blob is not, so it cannot be rolled back to (its
    /// files can still be read).
    DiscardedStateGone {
        /// The id asked for.
        id: CheckpointId,
        /// The LSN of the `checkpoint.discard` record.
        at: cairn_codec::Lsn,
        /// True if retention (gc) discarded it, false if a recorded event did.
        by_retention: bool,
        /// The application-state blob the checkpoint names.
        state: BlobHash,
    },
    /// The rollback stopped part way; the pre-rollback checkpoint can undo it.
    RollbackIncomplete {
        /// The checkpoint taken just before the rollback (undo with it).
        source_checkpoint: CheckpointId,
        /// The error that stopped it.
        cause: Box<SnapshotError>,
    },
    /// The workspace was opened read-only ([`crate::Workspace::open_read_only`])
    /// and this would change it or its caches.
    ReadOnly {
        /// What was asked for ("checkpoint", "change the tracked paths", ...).
        what: &'static str,
    },
    /// A caller error that fits no other variant.
    Invalid(String),
}

impl SnapshotError {
    /// Wraps an I/O error with the operation and path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> SnapshotError {
        SnapshotError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A refused path.
    pub fn bad_path(path: impl Into<String>, reason: impl Into<String>) -> SnapshotError {
        SnapshotError::BadPath {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io { op, path, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
            SnapshotError::Engine(e) => write!(f, "{e}"),
            SnapshotError::Codec(e) => write!(f, "{e}"),
            SnapshotError::BadPath { path, reason } => {
                write!(f, "refusing path `{path}`: {reason}")
            }
            SnapshotError::BadManifest { node, detail } => {
                write!(f, "manifest node {node} is damaged: {detail}")
            }
            SnapshotError::UnknownCheckpoint { id } => write!(
                f,
                "no checkpoint {id} in this store; list the checkpoints with `cairn checkpoints`"
            ),
            SnapshotError::ImportedCheckpoint { id } => write!(
                f,
                "{id} is a checkpoint record without a manifest (imported from another tool's audit log): it captured no files, so it cannot be restored or branched from; `cairn log --until {id}` lists the records up to it"
            ),
            SnapshotError::ConversationPoint { id } => write!(
                f,
                "{id} is a point of a conversation imported from its transcript (a checkpoint record without a manifest): the transcript does not say what the files were then, so there is nothing to restore; `cairn show @{}:PATH` gives a file by the records up to it, and `cairn log --until {id}` lists them",
                id.0
            ),
            SnapshotError::CollectedCheckpoint { id, copy_of } => write!(
                f,
                "{id} is a checkpoint record imported without its files, which gc had collected \
                 before the import{}: it holds no tree, so it cannot be restored or branched from \
                 (`meta.collected` names the tree it had); `cairn log --until {id}` lists the \
                 records up to it",
                copy_of.map_or(String::new(), |c| format!(" (it copies the record of checkpoint {c}, discarded)"))
            ),
            SnapshotError::Discarded {
                id,
                at,
                by_retention,
            } => discarded(f, *id, *at, *by_retention, None),
            SnapshotError::DiscardedStateGone {
                id,
                at,
                by_retention,
                state,
            } => discarded(f, *id, *at, *by_retention, Some(state)),
            SnapshotError::RollbackIncomplete {
                source_checkpoint,
                cause,
            } => write!(
                f,
                "rollback stopped part way ({cause}); the workspace is partly rolled back: \
                 undo with `cairn rollback {source_checkpoint}`"
            ),
            SnapshotError::ReadOnly { what } => write!(
                f,
                "cannot {what}: the workspace was opened read-only (to list checkpoints or plan a rollback)"
            ),
            SnapshotError::Invalid(s) => f.write_str(s),
        }
    }
}

/// The refusal of checkpoint `id`, discarded at `at`: its files are gone,
/// or (`state` given) only its application state is.
fn discarded(
    f: &mut fmt::Formatter<'_>,
    id: CheckpointId,
    at: cairn_codec::Lsn,
    by_retention: bool,
    state: Option<&BlobHash>,
) -> fmt::Result {
    let by = crate::retention::discarded_by_words(by_retention);
    write!(f, "checkpoint {id} was discarded at LSN {at} ({by})")?;
    match state {
        None => write!(
            f,
            " and its files are no longer all in the store, so it can no longer be restored; \
             list the remaining ones with `cairn checkpoints`"
        ),
        Some(state) => write!(
            f,
            "; its files are all still in the store, but its application state (blob {state}) \
             is not, so it can no longer be rolled back to (`cairn tree {id}` and \
             `cairn show {id}:PATH` still read its files)"
        ),
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io { source, .. } => Some(source),
            SnapshotError::Engine(e) => Some(e),
            SnapshotError::Codec(e) => Some(e),
            SnapshotError::RollbackIncomplete { cause, .. } => Some(cause.as_ref()),
            _ => None,
        }
    }
}

impl From<EngineError> for SnapshotError {
    fn from(e: EngineError) -> Self {
        SnapshotError::Engine(e)
    }
}

impl From<CodecError> for SnapshotError {
    fn from(e: CodecError) -> Self {
        SnapshotError::Codec(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_codec::Lsn;

    /// The two refusals of a discarded checkpoint share their opening and
    /// differ in what is gone: the files, or only the application state.
    #[test]
    fn a_discarded_checkpoint_says_by_whom_and_what_is_gone() {
        let e = SnapshotError::Discarded {
            id: CheckpointId(Lsn(7)),
            at: Lsn(9),
            by_retention: true,
        };
        assert_eq!(
            e.to_string(),
            "checkpoint c7 was discarded at LSN 9 (by retention) and its files are no longer \
             all in the store, so it can no longer be restored; list the remaining ones with \
             `cairn checkpoints`"
        );
        let state = BlobHash([0xab; 32]);
        let e = SnapshotError::DiscardedStateGone {
            id: CheckpointId(Lsn(7)),
            at: Lsn(9),
            by_retention: false,
            state,
        };
        assert_eq!(
            e.to_string(),
            format!(
                "checkpoint c7 was discarded at LSN 9 (by a recorded checkpoint.discard event); \
                 its files are all still in the store, but its application state (blob {state}) \
                 is not, so it can no longer be rolled back to (`cairn tree c7` and \
                 `cairn show c7:PATH` still read its files)"
            )
        );
    }
}
