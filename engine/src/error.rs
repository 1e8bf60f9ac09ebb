//! The engine's error type. Every variant names what failed and where.

use std::fmt;
use std::path::PathBuf;

use cairn_codec::{BlobHash, CodecError, Lsn};

/// A result with [`EngineError`].
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug)]
#[non_exhaustive]
pub enum EngineError {
    /// An I/O operation failed on `path`.
    Io {
        /// What was being done ("open segment", "fsync pack", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Another process (or another handle in this one) holds the store's lock.
    Locked {
        /// The lock file.
        lock_file: PathBuf,
        /// The process that holds the lock, as far as can be told (see
        /// [`crate::store_dir::current_lock_holder`]); `None`: not known.
        holder: Option<u32>,
    },
    /// The store directory cannot be created or written (read-only workspace).
    ReadOnly {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A previous fsync or write failed; the writer refuses all further writes
    /// because it can no longer tell what is durable. Reopen the store.
    Poisoned {
        /// What failed originally.
        cause: String,
    },
    /// Damage in a log segment: a bad record followed by good data, a bad
    /// header or footer. Nothing after it is returned as good.
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the damaged element in that file.
        offset: u64,
        /// The LSN expected at that offset, if known.
        lsn: Option<Lsn>,
        /// What was wrong.
        detail: String,
    },
    /// A blob's stored bytes do not hash to its name, or its entry is damaged.
    BlobIntegrity {
        /// The blob asked for.
        hash: BlobHash,
        /// The pack file.
        path: PathBuf,
        /// Byte offset of the entry in that pack.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
    /// The blob is not in the store.
    BlobNotFound {
        /// The blob asked for.
        hash: BlobHash,
    },
    /// A record or blob exceeds a named limit.
    TooLarge {
        /// What was too large.
        what: String,
    },
    /// An LSN that the log does not hold.
    LsnOutOfRange {
        /// The LSN asked for.
        lsn: Lsn,
        /// The last LSN in the log.
        last: Lsn,
    },
    /// An encoding error from the codec.
    Codec(CodecError),
    /// A caller error: an argument the engine cannot accept.
    Invalid(String),
}

impl EngineError {
    /// Wraps an I/O error with the operation and path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> EngineError {
        EngineError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// True for damage (corrupt log, blob integrity), which the CLI reports
    /// with its own exit code.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            EngineError::Corrupt { .. } | EngineError::BlobIntegrity { .. }
        )
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            EngineError::Locked { lock_file, holder } => match holder {
                Some(pid) if *pid == std::process::id() => write!(
                    f,
                    "the store is locked by another handle in this process (lock file {}): one handle may write at a time; share it, or close it first",
                    lock_file.display()
                ),
                Some(pid) => write!(
                    f,
                    "the store is locked by another process, pid {pid} (lock file {}); only one process may write at a time",
                    lock_file.display()
                ),
                None => write!(
                    f,
                    "the store is locked by another process; which one cannot be known (lock file {}); only one process may write at a time",
                    lock_file.display()
                ),
            },
            EngineError::ReadOnly { path, source } => write!(
                f,
                "cannot create the store at {} ({source}); the workspace may be read-only: \
                 use an in-memory store, which can still be queried and exported \
                 (`cairn --in-memory COMMAND` on the command line; in the library \
                 `Store::builder().in_memory().workspace(WORKSPACE).open()`, which checkpoints \
                 the workspace into memory), or put the store in a writable directory elsewhere \
                 (`cairn --store DIR`, `CAIRN_STORE`, `StoreBuilder::store_dir`)",
                path.display()
            ),
            EngineError::Poisoned { cause } => write!(
                f,
                "the store refuses writes after an earlier failure ({cause}); nothing after it was acknowledged. Reopen the store"
            ),
            EngineError::Corrupt { path, offset, lsn, detail } => {
                write!(f, "corruption in {} at byte offset {offset}", path.display())?;
                if let Some(lsn) = lsn {
                    write!(f, " (LSN {lsn})")?;
                }
                write!(f, ": {detail}")
            }
            EngineError::BlobIntegrity { hash, path, offset, detail } => write!(
                f,
                "blob {hash} failed its integrity check in {} at byte offset {offset}: {detail}",
                path.display()
            ),
            EngineError::BlobNotFound { hash } => write!(f, "blob {hash} is not in the store"),
            EngineError::TooLarge { what } => write!(f, "too large: {what}"),
            EngineError::LsnOutOfRange { lsn, last } => {
                write!(f, "LSN {lsn} is not in the log (the log holds 1..={last})")
            }
            EngineError::Codec(e) => write!(f, "{e}"),
            EngineError::Invalid(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Io { source, .. } | EngineError::ReadOnly { source, .. } => Some(source),
            EngineError::Codec(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CodecError> for EngineError {
    fn from(e: CodecError) -> Self {
        EngineError::Codec(e)
    }
}
