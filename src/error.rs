//! The facade's error type: one enum over the crates' errors, so an
//! embedder matches on one type.

use std::fmt;
use std::path::PathBuf;

/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong through the [`Store`](crate::Store) handle.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// From the log or blob store.
    Engine(cairn_engine::EngineError),
    /// From checkpoints, tracking or rollback.
    Snapshot(cairn_snapshot::SnapshotError),
    /// From replay, queries, export or import.
    Query(cairn_query::QueryError),
    /// From the codec (bad ids, timestamps, events).
    Codec(cairn_codec::CodecError),
    /// The store was opened read-only ([`crate::StoreBuilder::read_only`]) and a write was asked for.
    ReadOnly(String),
    /// No store was found where one was looked for.
    NoStore(String),
    /// This store has no workspace (an in-memory store without one), so it cannot checkpoint.
    NoWorkspace,
    /// The store was opened with a workspace it is not bound to (see
    /// [`crate::binding`]): checkpoints, rollbacks and tracking are refused.
    WorkspaceMismatch(Box<crate::binding::WorkspaceMismatch>),
    /// The store was opened with the workspace it is bound to, and that
    /// directory does not exist (it moved, or was removed).
    WorkspaceGone {
        /// The store directory.
        store: std::path::PathBuf,
        /// The workspace it is bound to.
        bound: std::path::PathBuf,
    },
    /// An input line was refused (an import): the message names the file,
    /// the line and why, and what was recorded before it.
    Rejected(crate::import::Refusal),
    /// An event was refused before it was appended ([`Store::append`](crate::Store::append),
    /// [`Session::record`](crate::Session::record)): a field the log does
    /// not take (an empty session, a time out of range, a file event
    /// without a workspace-relative path), a blob it names that is not
    /// stored, or a checkpoint or record it names that this store does
    /// not have. The message names the field and why. Nothing was
    /// appended.
    InvalidEvent(String),
    /// A file could not be read or written: `op` says what was being done
    /// and `path` names the file; `source` keeps the system's error, so its
    /// [`kind`](std::io::Error::kind) tells "not found" from "permission
    /// denied".
    Io {
        /// What was being done: "open", "read", "delete", ...
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// Anything else, with a message that says what and where.
    Other(String),
}

impl Error {
    /// An [`Error::Io`]: `op` on `path` failed with `source`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The kind of the system error behind this one, if it is an I/O
    /// error ([`Error::Io`], or an I/O error of the log, blob store or
    /// workspace): `NotFound`, `PermissionDenied`, ...
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                return Some(io.kind());
            }
            cause = c.source();
        }
        None
    }

    /// True when the error reports damaged data (the CLI exits with its own code).
    pub fn is_corruption(&self) -> bool {
        match self {
            Error::Engine(e) => e.is_corruption(),
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Engine(e) => write!(f, "{e}"),
            Error::Snapshot(e) => write!(f, "{e}"),
            Error::Query(e) => write!(f, "{e}"),
            Error::Codec(e) => write!(f, "{e}"),
            Error::ReadOnly(what) => write!(
                f,
                "cannot {what}: this handle opened the store read-only (StoreBuilder::read_only), without its lock; open it for writing to {what}"
            ),
            Error::NoStore(s) => f.write_str(s),
            Error::NoWorkspace => {
                f.write_str("this store has no workspace to checkpoint, write files in or roll back; open it with `StoreBuilder::workspace` (in memory: `Store::builder().in_memory().workspace(dir).open()`)")
            }
            Error::WorkspaceMismatch(m) => write!(f, "{m}"),
            Error::WorkspaceGone { store, bound } => write!(
                f,
                "the store {} belongs to the workspace {}, which does not exist: if it moved, \
                 bind the store to its new place by opening it with \
                 `StoreBuilder::workspace(NEWDIR)` and `StoreBuilder::rebind_workspace(true)`",
                store.display(),
                bound.display()
            ),
            Error::Rejected(r) => write!(f, "{r}"),
            Error::InvalidEvent(s) | Error::Other(s) => f.write_str(s),
            Error::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Engine(e) => Some(e),
            Error::Snapshot(e) => Some(e),
            Error::Query(e) => Some(e),
            Error::Codec(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<cairn_engine::EngineError> for Error {
    fn from(e: cairn_engine::EngineError) -> Self {
        Error::Engine(e)
    }
}
impl From<cairn_snapshot::SnapshotError> for Error {
    fn from(e: cairn_snapshot::SnapshotError) -> Self {
        Error::Snapshot(e)
    }
}
impl From<cairn_query::QueryError> for Error {
    fn from(e: cairn_query::QueryError) -> Self {
        Error::Query(e)
    }
}
impl From<cairn_codec::CodecError> for Error {
    fn from(e: cairn_codec::CodecError) -> Self {
        Error::Codec(e)
    }
}
