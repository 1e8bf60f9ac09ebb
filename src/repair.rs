//! Repair of a damaged store: keep every intact record, set damaged files
//! aside (never delete them), rebuild what is derived.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use cairn_codec::{BlobHash, Lsn};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{salvage, LogReader};
use cairn_engine::{RealVfs, StoreDir, Vfs};

use crate::error::Result;
use crate::Store;

/// A range of LSNs repair could not keep.
#[derive(Debug, Clone, Serialize)]
pub struct DroppedLsns {
    /// First LSN lost.
    pub first: u64,
    /// Last LSN lost.
    pub last: u64,
    /// Why.
    pub reason: String,
}

/// What [`Store::repair`] did.
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    /// Intact records kept.
    pub kept_records: u64,
    /// Placeholder records standing in for lost ones (so LSNs stay dense).
    pub placeholders: u64,
    /// LSN ranges lost.
    pub dropped: Vec<DroppedLsns>,
    /// Bytes of damaged data not carried over.
    pub dropped_bytes: u64,
    /// Where damaged files were moved, if any.
    pub damaged_dir: Option<String>,
    /// The files moved there.
    pub moved: Vec<String>,
    /// Blobs that fail their check and that no workspace file could mend
    /// (the records that refer to them stay, and reading those blobs
    /// reports the damage).
    pub damaged_blobs: Vec<String>,
    /// Dictionary files (the log's, the blob store's) written again from
    /// their second copy, or copies written again from their file.
    pub restored_dictionaries: Vec<String>,
    /// Blobs damaged or missing that were written again from a workspace
    /// file with the same contents (the same blake3).
    pub mended_blobs: Vec<MendedBlob>,
    /// LSN of the head after repair.
    pub head_lsn: u64,
    /// Hash of the head after repair.
    pub head_hash: String,
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kept {} intact records; head LSN {} hash {}",
            self.kept_records, self.head_lsn, self.head_hash
        )?;
        if self.dropped.is_empty() {
            writeln!(f, "no records lost")?;
        }
        for d in &self.dropped {
            writeln!(f, "lost LSN {}..={}: {}", d.first, d.last, d.reason)?;
        }
        if self.placeholders > 0 {
            writeln!(
                f,
                "{} placeholder records keep the LSNs dense",
                self.placeholders
            )?;
        }
        if let Some(dir) = &self.damaged_dir {
            writeln!(
                f,
                "damaged files moved to {dir} ({} bytes not carried over):",
                self.dropped_bytes
            )?;
            for m in &self.moved {
                writeln!(f, "  {m}")?;
            }
        }
        for d in &self.restored_dictionaries {
            writeln!(f, "restored {d} from its second copy")?;
        }
        for m in &self.mended_blobs {
            writeln!(
                f,
                "mended {} blob {} from the workspace file {}",
                m.was, m.hash, m.from
            )?;
        }
        for b in &self.damaged_blobs {
            writeln!(f, "damaged blob: {b}")?;
        }
        Ok(())
    }
}

impl Store {
    /// Repairs the store at `store_dir` (a `.cairn` directory): restores a
    /// lost or damaged zstd dictionary from its second copy, salvages the
    /// log keeping every intact record, rebuilds the blob index, writes
    /// again every damaged or missing blob a record names whose contents a
    /// workspace file still has, drops the query indexes (rebuilt on next
    /// use) and reports what was lost. Takes the store's lock: no other
    /// process may have it open.
    pub fn repair(store_dir: &Path) -> Result<RepairReport> {
        let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
        let dir = StoreDir::open(vfs.clone(), store_dir)?;
        // First, so salvage keeps the records that need them.
        let mut restored_dictionaries = Vec::new();
        for d in [dir.log_dir(), dir.blob_dir()] {
            for p in cairn_engine::dicts::mend(&*vfs, &d)? {
                restored_dictionaries.push(p.display().to_string());
            }
        }
        let log = salvage(vfs.clone(), &dir.log_dir())?;
        let blobs = BlobStore::open(vfs.clone(), &dir.blob_dir(), BlobOptions::default())?;
        let mut blob_report = blobs.verify()?;
        // Blobs a workspace file can give back: damaged ones, and ones a
        // record names that are gone.
        let named = named_blobs(&vfs, &dir.log_dir(), &blobs);
        let mut wanted: HashMap<BlobHash, (&'static str, Option<u64>)> = HashMap::new();
        for h in blob_report.problems.iter().filter_map(|p| p.hash) {
            wanted.insert(h, ("damaged", named.get(&h).copied().flatten()));
        }
        for (h, size) in &named {
            if !blobs.contains(h) {
                wanted.insert(*h, ("missing", *size));
            }
        }
        let mended_blobs = match workspace_of(store_dir) {
            Some(ws) if !wanted.is_empty() => mend_from_workspace(&blobs, &ws, store_dir, &wanted),
            _ => Vec::new(),
        };
        if !mended_blobs.is_empty() {
            blobs.sync()?;
            blob_report = blobs.verify()?;
        }
        if let Ok(names) = vfs.list(&dir.index_dir()) {
            for n in names {
                let _ = vfs.remove_file(&dir.index_dir().join(n));
            }
            let _ = vfs.sync_dir(&dir.index_dir());
        }
        Ok(RepairReport {
            kept_records: log.kept_records,
            placeholders: log.placeholders,
            dropped: log
                .dropped
                .iter()
                .map(|d| DroppedLsns {
                    first: d.first.0,
                    last: d.last.0,
                    reason: d.reason.clone(),
                })
                .collect(),
            dropped_bytes: log.dropped_bytes,
            damaged_dir: log.damaged_dir.map(|p| p.display().to_string()),
            moved: log.moved.iter().map(|p| p.display().to_string()).collect(),
            damaged_blobs: blob_report.problems.iter().map(|p| p.to_string()).collect(),
            restored_dictionaries,
            mended_blobs,
            head_lsn: log.head.last_lsn.0,
            head_hash: log.head.chain.to_hex(),
        })
    }
}

/// A blob repair wrote again from a workspace file with the same contents.
#[derive(Debug, Clone, Serialize)]
pub struct MendedBlob {
    /// The blob's hash (hex).
    pub hash: String,
    /// Was it damaged (`damaged`) or gone (`missing`).
    pub was: &'static str,
    /// The workspace file its contents came from.
    pub from: String,
}

/// Workspace files larger than this are not read to mend a blob whose
/// size is unknown (one a record names by hash only): reading every large
/// file of a workspace to look for one blob would make repair slow for
/// little chance. A file whose size a checkpoint's tree gives is read
/// whatever its size.
pub const MEND_UNSIZED_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The workspace of the store at `store_dir`: the one it is bound to, or
/// the directory holding it when it is named `.cairn`. Repair only reads
/// it, and only to write into the store contents whose hash a record
/// names, so a workspace it cannot find only means nothing is mended.
fn workspace_of(store_dir: &Path) -> Option<std::path::PathBuf> {
    if let Ok(Some(w)) = crate::binding::bound_workspace(store_dir) {
        return Some(w);
    }
    (store_dir.file_name()? == ".cairn")
        .then(|| store_dir.parent().map(Path::to_path_buf))
        .flatten()
}

/// Every blob the log's records name, directly or through a checkpoint's
/// tree (files and symlinks), with its size when a tree gives it. Trees
/// whose nodes cannot be read are skipped (their nodes are themselves
/// named, and are no workspace file).
fn named_blobs(
    vfs: &Arc<dyn Vfs>,
    log_dir: &Path,
    blobs: &BlobStore,
) -> HashMap<BlobHash, Option<u64>> {
    let mut named: HashMap<BlobHash, Option<u64>> = HashMap::new();
    let Ok(reader) = LogReader::open(vfs.clone(), log_dir) else {
        return named;
    };
    let mut roots = HashSet::new();
    for rec in reader.iter_from(Lsn(1)) {
        let Ok(rec) = rec else { continue };
        let e = &rec.event;
        for h in [e.before, e.after, e.diff, e.state].into_iter().flatten() {
            named.entry(h).or_insert(None);
        }
        // A tree's nodes are no workspace file: only what they name is.
        if let Some(r) = e.root {
            roots.insert(r);
        }
    }
    for root in roots {
        let Ok(m) = cairn_snapshot::capture::read_manifest(blobs, &root) else {
            continue;
        };
        for e in m.entries.values() {
            if e.kind != cairn_snapshot::EntryKind::Dir {
                named.insert(e.hash, Some(e.size));
            }
        }
    }
    named
}

/// Writes again every blob of `wanted` (hash -> damaged or missing, and
/// its size if known) whose contents a regular file under `root` still
/// has (the same blake3), never following a symlink and never looking
/// into `.git`, `.cairn` or the store. Returns what it mended.
fn mend_from_workspace(
    blobs: &BlobStore,
    root: &Path,
    store_dir: &Path,
    wanted: &HashMap<BlobHash, (&'static str, Option<u64>)>,
) -> Vec<MendedBlob> {
    let mut mended = Vec::new();
    let mut left: HashMap<BlobHash, (&'static str, Option<u64>)> = wanted.clone();
    let sizes: HashSet<u64> = left.values().filter_map(|(_, s)| *s).collect();
    let any_unsized = left.values().any(|(_, s)| s.is_none());
    let store = store_dir.canonicalize().ok();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if left.is_empty() {
            break;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in rd.flatten() {
            let path = entry.path();
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                let name = entry.file_name();
                let own = store.as_deref().is_some_and(|s| path == s);
                if name != ".git" && name != ".cairn" && !own {
                    stack.push(path);
                }
                continue;
            }
            if !ft.is_file() {
                continue;
            }
            let Ok(len) = entry.metadata().map(|m| m.len()) else {
                continue;
            };
            let worth_reading =
                sizes.contains(&len) || (any_unsized && len <= MEND_UNSIZED_MAX_FILE_BYTES);
            if !worth_reading {
                continue;
            }
            let Some(hash) = hash_file(&path) else {
                continue;
            };
            let Some((was, _)) = left.get(&hash).copied() else {
                continue;
            };
            // A put replaces a damaged copy and stores a missing one; the
            // file must still hold what was hashed.
            if matches!(blobs.put_file(&path), Ok((h, _)) if h == hash) {
                left.remove(&hash);
                mended.push(MendedBlob {
                    hash: hash.to_hex(),
                    was,
                    from: path.display().to_string(),
                });
            }
        }
    }
    mended
}

/// The blake3 of a file's contents, read in pieces; `None` if it cannot
/// be read.
fn hash_file(path: &Path) -> Option<BlobHash> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut f, &mut h).ok()?;
    Some(BlobHash(*h.finalize().as_bytes()))
}
