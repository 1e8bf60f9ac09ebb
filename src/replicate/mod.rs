//! Replication to S3-compatible object storage, and restore from it
//! (cargo feature `replicate`).
//!
//! A [`Replicator`] ships a store's files to an [`Archive`]
//! (`s3://bucket/prefix`, `file:///dir`) as immutable objects named by the
//! blake3 of their bytes: sealed segments and their query index files,
//! the log's tail in pieces as it grows, blob packs (likewise) and their
//! index, dictionaries. After them
//! it writes a manifest (generation, head LSN and chain hash, every piece
//! of every file), never before: a manifest in the archive names only
//! objects that are there. An interrupted round leaves objects no manifest
//! names yet; the next round finds them by listing and does not send them
//! again. [`restore`] rebuilds a store from a manifest, checking every
//! piece's hash, the chain and the head.
//!
//! ```text
//! <archive>/objects/<blake3 hex>                          a piece of a file
//! <archive>/manifests/<generation>/<head LSN, 20 digits>.manifest
//! ```
//!
//! A generation is a line of history: a new one starts when the store's
//! log no longer continues what the archive holds (a store restored,
//! repaired or replaced), so one archive never mixes two histories.
//!
//! The object store is async; each [`Archive`] keeps a current-thread
//! runtime on a thread of its own and blocks on it: nothing async leaks
//! into this API.

mod archive;
pub mod aws_profile;
mod cache;
mod local;
mod manifest;
mod replicator;
mod restore;
mod vfs;

pub use archive::{
    Archive, Listed, PutHandle, CONNECT_TIMEOUT_MS, MAX_GETS_IN_FLIGHT, MAX_PUTS_IN_FLIGHT,
    MAX_RANGES_IN_FLIGHT, MAX_RETRIES, REQUEST_TIMEOUT_MS, RETRY_TIMEOUT_MS,
};
pub use cache::{
    default_cache_dir, PieceCache, DEFAULT_CACHE_BYTES, MEMORY_CACHE_BYTES, RANGE_CHUNK_BYTES,
    RANGE_PAGE_BYTES,
};
pub use manifest::{
    FileEntry, Manifest, Piece, MANIFEST_HEADER_LEN, MANIFEST_MAGIC, MANIFEST_VERSION,
    MAX_MANIFEST_BODY_BYTES, MIN_MANIFEST_VERSION, SEG_INDEX_DIR, TAIL_INDEX_PARTS_VERSION,
    TAIL_INDEX_VERSION, TAIL_STATE_INDEX_INTERVAL_BYTES, TAIL_STATE_VERSION,
};
pub use replicator::{
    Replicator, RoundReport, DEFAULT_MAX_LAG_MS, MAX_PIECE_BYTES, MAX_SHIPPED_SEG_INDEX_BYTES,
    TAIL_INDEX_EVERY_RECORDS,
};
pub use restore::{list_archives, prune, restore, ArchiveSummary, PruneReport, RestoreReport};
pub use vfs::{
    open_read_only, ArchiveVfs, InPlaceOptions, MAX_PLANNED_RANGE_BYTES, MAX_PLAN_BYTES,
    PLAN_GAP_BYTES,
};

use std::path::{Path, PathBuf};

use cairn_codec::Lsn;

/// The folder of pieces under an archive.
pub const OBJECTS_DIR: &str = "objects";
/// The folder of manifests under an archive.
pub const MANIFESTS_DIR: &str = "manifests";

/// The object holding the piece whose blake3 is `hash`.
pub fn object_name(hash: &str) -> String {
    format!("{OBJECTS_DIR}/{hash}")
}

/// The manifest of `generation` at head `lsn`.
pub fn manifest_name(generation: &str, lsn: Lsn) -> String {
    format!("{MANIFESTS_DIR}/{generation}/{:020}.manifest", lsn.0)
}

/// A fresh generation name: the time in milliseconds (13 digits, so names
/// sort by age) and 8 hex digits that tell two started in the same
/// millisecond apart.
fn new_generation_name() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut h = blake3::Hasher::new();
    h.update(&now.as_nanos().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    let tag = h.finalize().to_hex();
    format!("{:013}-{}", now.as_millis(), &tag.as_str()[..8])
}

/// A manifest's name split: generation and head LSN.
fn parse_manifest_name(name: &str) -> Option<(&str, u64)> {
    let rest = name.strip_prefix("manifests/")?;
    let (generation, file) = rest.split_once('/')?;
    let lsn = file.strip_suffix(".manifest")?;
    if lsn.len() != 20 || generation.is_empty() || generation.contains('/') {
        return None;
    }
    Some((generation, lsn.parse().ok()?))
}

/// The manifests in the archive: (generation, head LSN, name), sorted.
fn manifests(archive: &Archive) -> Result<Vec<(String, u64, String)>, ReplicateError> {
    let mut out: Vec<(String, u64, String)> = archive
        .list(MANIFESTS_DIR)?
        .into_iter()
        .filter_map(|l| {
            let (g, lsn) = parse_manifest_name(&l.name)?;
            Some((g.to_string(), lsn, l.name.clone()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Reads and decodes the manifest `name`.
fn read_manifest(archive: &Archive, name: &str) -> Result<Manifest, ReplicateError> {
    let bytes = archive.get(name)?.ok_or_else(|| ReplicateError::Damaged {
        object: name.to_string(),
        detail: "listed but gone".into(),
    })?;
    Manifest::decode(name, &bytes)
}

/// The newest manifest of the newest generation (or of `generation`).
fn newest_manifest(
    archive: &Archive,
    generation: Option<&str>,
) -> Result<Option<(String, Manifest)>, ReplicateError> {
    let all = manifests(archive)?;
    let gen = match generation {
        Some(g) => g.to_string(),
        None => match all.last() {
            Some((g, _, _)) => g.clone(),
            None => return Ok(None),
        },
    };
    match all.iter().rev().find(|(g, _, _)| *g == gen) {
        Some((_, _, name)) => Ok(Some((name.clone(), read_manifest(archive, name)?))),
        None => Ok(None),
    }
}

/// Why replication or a restore failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplicateError {
    /// The archive URL cannot be used.
    Url {
        /// The URL.
        url: String,
        /// Why.
        detail: String,
    },
    /// A request to the object store failed.
    Remote {
        /// What was being done.
        op: &'static str,
        /// The object (or folder).
        object: String,
        /// The store's error.
        detail: String,
    },
    /// An object in the archive is not what it should be (truncated,
    /// altered, missing).
    Damaged {
        /// The object.
        object: String,
        /// What is wrong.
        detail: String,
    },
    /// The archive holds no manifest to restore.
    Empty {
        /// The archive URL.
        url: String,
    },
    /// A local file could not be read or written.
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A local file is not what cairn expects.
    Local {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The restored store failed its checks, or the store could not be
    /// opened.
    Store(Box<crate::Error>),
    /// The AWS configuration (a profile, its files) cannot be used.
    Config(String),
}

impl ReplicateError {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> ReplicateError {
        ReplicateError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl std::fmt::Display for ReplicateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplicateError::Url { url, detail } => write!(f, "archive URL {url}: {detail}"),
            ReplicateError::Remote { op, object, detail } => {
                write!(f, "could not {op} {object}: {detail}")
            }
            ReplicateError::Damaged { object, detail } => {
                write!(f, "archive object {object} is damaged: {detail}")
            }
            ReplicateError::Empty { url } => {
                write!(
                    f,
                    "the archive {url} holds no manifest (nothing replicated there yet)"
                )
            }
            ReplicateError::Io { op, path, source } => {
                write!(f, "could not {op} {}: {source}", path.display())
            }
            ReplicateError::Local { path, detail } => write!(f, "{}: {detail}", path.display()),
            ReplicateError::Store(e) => write!(f, "{e}"),
            ReplicateError::Config(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for ReplicateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplicateError::Io { source, .. } => Some(source),
            ReplicateError::Store(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<crate::Error> for ReplicateError {
    fn from(e: crate::Error) -> ReplicateError {
        ReplicateError::Store(Box::new(e))
    }
}
