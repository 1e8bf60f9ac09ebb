//! The query crate's error type. Every variant names what failed and where.

use std::fmt;

use cairn_codec::{CodecError, Lsn};
use cairn_engine::EngineError;

/// A result with [`QueryError`].
pub type Result<T, E = QueryError> = std::result::Result<T, E>;

/// Everything that can go wrong while replaying, querying, exporting or importing.
#[derive(Debug)]
#[non_exhaustive]
pub enum QueryError {
    /// The storage engine failed (log, blobs, I/O).
    Engine(EngineError),
    /// Encoding or decoding failed.
    Codec(CodecError),
    /// Reading a checkpoint manifest failed.
    Snapshot(cairn_snapshot::SnapshotError),
    /// A point in history (`@12`, `c4`, a timestamp, `head`) that cannot be
    /// parsed or does not exist in this store.
    BadPoint {
        /// The point as given (or as resolved).
        point: String,
        /// Why it was refused.
        reason: String,
    },
    /// A path that does not exist at the given point.
    NoSuchPath {
        /// The path asked for.
        path: String,
        /// The LSN of the state that was looked at.
        at: Lsn,
    },
    /// A checkpoint id that names no `checkpoint.create` record.
    NoSuchCheckpoint {
        /// The id asked for, e.g. `c42`.
        id: String,
    },
    /// A manifest (checkpoint tree) could not be read.
    Manifest {
        /// The checkpoint or rollback record whose manifest failed.
        lsn: Lsn,
        /// What was wrong.
        detail: String,
    },
    /// A persisted index is damaged (bad checksum, wrong version); it is
    /// rebuilt from the log, so callers normally never see this.
    IndexCorrupt {
        /// The index file.
        path: String,
        /// What was wrong.
        detail: String,
    },
    /// Writing the export output failed.
    Output(std::io::Error),
    /// An argument the query layer cannot accept.
    Invalid(String),
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Engine(e) => write!(f, "{e}"),
            QueryError::Codec(e) => write!(f, "{e}"),
            QueryError::Snapshot(e) => write!(f, "{e}"),
            QueryError::BadPoint { point, reason } => {
                write!(f, "bad point in history `{point}`: {reason}")
            }
            QueryError::NoSuchPath { path, at } => {
                write!(f, "`{path}` does not exist at LSN {at}")
            }
            QueryError::NoSuchCheckpoint { id } => write!(
                f,
                "no checkpoint `{id}` in this store (list them with `cairn checkpoints`)"
            ),
            QueryError::Manifest { lsn, detail } => {
                write!(
                    f,
                    "cannot read the manifest of the record at LSN {lsn}: {detail}"
                )
            }
            QueryError::IndexCorrupt { path, detail } => {
                write!(f, "index file {path} is damaged: {detail}")
            }
            QueryError::Output(e) => write!(f, "writing the export failed: {e}"),
            QueryError::Invalid(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for QueryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QueryError::Engine(e) => Some(e),
            QueryError::Codec(e) => Some(e),
            QueryError::Snapshot(e) => Some(e),
            QueryError::Output(e) => Some(e),
            _ => None,
        }
    }
}

impl From<EngineError> for QueryError {
    fn from(e: EngineError) -> Self {
        QueryError::Engine(e)
    }
}

impl From<cairn_snapshot::SnapshotError> for QueryError {
    fn from(e: cairn_snapshot::SnapshotError) -> Self {
        QueryError::Snapshot(e)
    }
}

impl From<CodecError> for QueryError {
    fn from(e: CodecError) -> Self {
        QueryError::Codec(e)
    }
}

impl QueryError {
    /// True for damage in the log or blob store (the CLI reports it with its own exit code).
    pub fn is_corruption(&self) -> bool {
        matches!(self, QueryError::Engine(e) if e.is_corruption())
    }
}
