//! The facade's error type: one enum over the crates' errors, so an
//! embedder matches on one type.

use std::fmt;

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
    /// An input line was refused (an import): the message names the file,
    /// the line and why, and what was recorded before it.
    Rejected(String),
    /// Anything else, with a message that says what and where.
    Other(String),
}

impl Error {
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
                f.write_str("this store has no workspace to checkpoint; open it with `StoreBuilder::workspace`")
            }
            Error::WorkspaceMismatch(m) => write!(f, "{m}"),
            Error::Rejected(s) | Error::Other(s) => f.write_str(s),
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
