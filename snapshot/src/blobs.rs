//! What the snapshot code needs from a blob store, as a small trait, so the
//! pure parts (capture, manifests, rollback planning) can be tested against
//! an in-memory store, and a dry run can hash without storing.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;

use parking_lot::Mutex;

use cairn_codec::BlobHash;
pub use cairn_engine::blob::LeftBehind;

use crate::error::{Result, SnapshotError};

/// Reading blobs (all the query side needs to read manifests).
pub trait BlobRead {
    /// The blob's contents, verified against its hash.
    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>>;
    /// Streams the blob's contents into `out` (large files need not fit in memory).
    fn get_to(&self, hash: &BlobHash, out: &mut dyn Write) -> Result<u64> {
        let bytes = self.get(hash)?;
        out.write_all(&bytes)
            .map_err(|e| SnapshotError::io("write blob contents", "<output>", e))?;
        Ok(bytes.len() as u64)
    }
}

/// What a garbage collection did, as far as snapshot cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcSummary {
    /// Blobs removed.
    pub removed_blobs: u64,
    /// Bytes freed on disk (as reported by the store).
    pub freed_bytes: u64,
    /// Unreferenced blobs left in place because reclaiming them was not
    /// worth it (the engine's packs whose dead share is at or below
    /// [`DEFAULT_REWRITE_THRESHOLD`](cairn_engine::blob::DEFAULT_REWRITE_THRESHOLD)):
    /// still readable by hash until a compacting gc ([`GcMode::compact`])
    /// or a later one rewrites their pack.
    pub left_below_threshold: LeftBehind,
    /// Unreferenced blobs left in packs kept because a live blob in them
    /// is damaged (each named in [`GcSummary::problems`]).
    pub left_in_damaged_packs: LeftBehind,
    /// Bytes the store takes on disk after the collection.
    pub stored_bytes: u64,
    /// Packs rewritten only to fit [`GcMode::max_stored_bytes`] (their dead
    /// share alone would not have had them rewritten).
    pub packs_rewritten_for_budget: u64,
    /// What the collection could not do, each naming where (a pack kept
    /// because a live blob in it is damaged).
    pub problems: Vec<String>,
}

impl GcSummary {
    /// Every unreferenced blob left in place, whatever the reason.
    pub fn left(&self) -> LeftBehind {
        self.left_below_threshold + self.left_in_damaged_packs
    }
}

/// How hard a garbage collection works (default: reclaim only where it
/// pays, no budget).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcMode {
    /// Remove every unreferenced blob now (the engine rewrites every pack
    /// holding one), so none stays readable; otherwise the store may leave
    /// some in place where reclaiming them costs more than it frees.
    pub compact: bool,
    /// Reclaim, beyond that, what it takes for the store to fit in this
    /// many bytes on disk, if it can (a retention `max_bytes` budget).
    pub max_stored_bytes: Option<u64>,
}

/// Reading and writing blobs. `Sync` so files can be hashed on several threads.
pub trait BlobAccess: BlobRead + Sync {
    /// Stores `bytes` (not yet durable), returning its hash; an existing blob is not written again.
    fn put(&self, bytes: &[u8]) -> Result<BlobHash>;
    /// Stores the contents of `file`, already opened by the caller (never
    /// through a symlink: what the handle reads is stored, whatever `path`
    /// names by then), by streaming it; returns its hash and length.
    /// `path` names the file in errors.
    fn put_open_file(&self, file: &mut std::fs::File, path: &Path) -> Result<(BlobHash, u64)>;
    /// Stores everything `r` yields, streaming where the store can (what
    /// [`BlobAccess::put_open_file`] does with a file: a checkpoint reads
    /// a large file through a reader that stops when the file changes);
    /// `path` names it in errors. Default: read into memory, then
    /// [`BlobAccess::put`].
    fn put_stream(&self, r: &mut dyn Read, path: &Path) -> Result<(BlobHash, u64)> {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)
            .map_err(|e| SnapshotError::io("read file", path, e))?;
        Ok((self.put(&bytes)?, bytes.len() as u64))
    }
    /// True if the blob is stored.
    fn contains(&self, hash: &BlobHash) -> Result<bool>;
    /// Makes every blob put so far durable (the commit protocol: before the log record).
    fn sync(&self) -> Result<()>;
    /// Removes blobs not in `live` (and not reachable from one), as hard
    /// as `mode` says: with [`GcMode::compact`], every unreferenced blob is
    /// removed now; otherwise the store may leave some in place when
    /// reclaiming them costs more than it frees (the engine rewrites only
    /// packs that are mostly dead), and counts them in the summary.
    fn gc(&self, live: &HashSet<BlobHash>, mode: GcMode) -> Result<GcSummary>;
    /// True if the store would compress better with a dictionary trained
    /// from samples of what is about to be stored (see
    /// [`BlobAccess::train_dictionary`]). Default: false.
    fn wants_dictionary(&self) -> bool {
        false
    }
    /// Trains the store's compression dictionary from samples (a first
    /// checkpoint of a large tree does this before storing its files).
    /// Default: nothing.
    fn train_dictionary(&self, _samples: &[&[u8]]) -> Result<()> {
        Ok(())
    }
}

/// An in-memory blob store, for tests and for in-memory embedders.
#[derive(Default, Debug)]
pub struct MemBlobs {
    map: Mutex<HashMap<BlobHash, Vec<u8>>>,
    puts: Mutex<u64>,
    put_calls: Mutex<u64>,
}

impl MemBlobs {
    /// An empty store.
    pub fn new() -> MemBlobs {
        MemBlobs::default()
    }
    /// Number of distinct blobs held.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }
    /// True if no blob is held.
    pub fn is_empty(&self) -> bool {
        self.map.lock().is_empty()
    }
    /// Number of blobs actually written (puts of an existing blob are not counted).
    pub fn writes(&self) -> u64 {
        *self.puts.lock()
    }
    /// Number of `put`/`put_file` calls (existing blobs included): how many
    /// contents were hashed.
    pub fn put_calls(&self) -> u64 {
        *self.put_calls.lock()
    }
    /// The size of blob `hash`, if held.
    pub fn raw_len(&self, hash: &BlobHash) -> Option<u64> {
        self.map.lock().get(hash).map(|b| b.len() as u64)
    }
    /// Every stored hash.
    pub fn hashes(&self) -> HashSet<BlobHash> {
        self.map.lock().keys().copied().collect()
    }
}

impl BlobRead for MemBlobs {
    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>> {
        self.map
            .lock()
            .get(hash)
            .cloned()
            .ok_or(SnapshotError::Engine(
                cairn_engine::EngineError::BlobNotFound { hash: *hash },
            ))
    }
}

impl BlobAccess for MemBlobs {
    fn put(&self, bytes: &[u8]) -> Result<BlobHash> {
        let h = BlobHash::of(bytes);
        *self.put_calls.lock() += 1;
        let mut map = self.map.lock();
        if let std::collections::hash_map::Entry::Vacant(v) = map.entry(h) {
            v.insert(bytes.to_vec());
            *self.puts.lock() += 1;
        }
        Ok(h)
    }
    fn put_open_file(&self, file: &mut std::fs::File, path: &Path) -> Result<(BlobHash, u64)> {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| SnapshotError::io("read file", path, e))?;
        let h = self.put(&bytes)?;
        Ok((h, bytes.len() as u64))
    }
    fn contains(&self, hash: &BlobHash) -> Result<bool> {
        Ok(self.map.lock().contains_key(hash))
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn gc(&self, live: &HashSet<BlobHash>, _mode: GcMode) -> Result<GcSummary> {
        let mut map = self.map.lock();
        let before = map.len();
        let mut freed = 0u64;
        map.retain(|h, v| {
            let keep = live.contains(h);
            if !keep {
                freed += v.len() as u64;
            }
            keep
        });
        Ok(GcSummary {
            removed_blobs: (before - map.len()) as u64,
            freed_bytes: freed,
            stored_bytes: map.values().map(|v| v.len() as u64).sum(),
            ..GcSummary::default()
        })
    }
}

/// A blob sink that only hashes: what a dry run uses to see the current
/// state without writing anything. Reads go to the wrapped store.
pub struct HashOnly<'a, B: BlobRead + Sync + ?Sized>(pub &'a B);

impl<B: BlobRead + Sync + ?Sized> BlobRead for HashOnly<'_, B> {
    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>> {
        self.0.get(hash)
    }
}

impl<B: BlobRead + Sync + ?Sized> BlobAccess for HashOnly<'_, B> {
    fn put(&self, bytes: &[u8]) -> Result<BlobHash> {
        Ok(BlobHash::of(bytes))
    }
    fn put_open_file(&self, f: &mut std::fs::File, path: &Path) -> Result<(BlobHash, u64)> {
        self.put_stream(f, path)
    }
    fn put_stream(&self, f: &mut dyn Read, path: &Path) -> Result<(BlobHash, u64)> {
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut len = 0u64;
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| SnapshotError::io("read file", path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
        }
        Ok((BlobHash(*hasher.finalize().as_bytes()), len))
    }
    fn contains(&self, _hash: &BlobHash) -> Result<bool> {
        Ok(true)
    }
    fn sync(&self) -> Result<()> {
        Ok(())
    }
    fn gc(&self, _live: &HashSet<BlobHash>, _mode: GcMode) -> Result<GcSummary> {
        Err(SnapshotError::Invalid(
            "a hash-only (dry run) blob sink cannot collect garbage".into(),
        ))
    }
}

impl BlobRead for cairn_engine::blob::BlobStore {
    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>> {
        Ok(cairn_engine::blob::BlobStore::get(self, hash)?)
    }
    fn get_to(&self, hash: &BlobHash, out: &mut dyn Write) -> Result<u64> {
        Ok(cairn_engine::blob::BlobStore::get_to(self, hash, out)?)
    }
}

impl BlobAccess for cairn_engine::blob::BlobStore {
    fn put(&self, bytes: &[u8]) -> Result<BlobHash> {
        Ok(cairn_engine::blob::BlobStore::put(self, bytes)?)
    }
    fn put_open_file(&self, file: &mut std::fs::File, path: &Path) -> Result<(BlobHash, u64)> {
        Ok(cairn_engine::blob::BlobStore::put_open_file(
            self, file, path,
        )?)
    }
    fn put_stream(&self, r: &mut dyn Read, _path: &Path) -> Result<(BlobHash, u64)> {
        Ok(cairn_engine::blob::BlobStore::put_reader(self, r)?)
    }
    fn contains(&self, hash: &BlobHash) -> Result<bool> {
        Ok(cairn_engine::blob::BlobStore::contains(self, hash))
    }
    fn sync(&self) -> Result<()> {
        Ok(cairn_engine::blob::BlobStore::sync(self)?)
    }
    fn gc(&self, live: &HashSet<BlobHash>, mode: GcMode) -> Result<GcSummary> {
        let mut opts = if mode.compact {
            cairn_engine::blob::GcOptions::compact()
        } else {
            cairn_engine::blob::GcOptions::default()
        };
        opts.max_stored_bytes = mode.max_stored_bytes;
        let r = cairn_engine::blob::BlobStore::gc(self, live, opts)?;
        Ok(GcSummary {
            // Not `entries_dropped`: a pack a killed gc left behind also
            // holds stale copies of live blobs, which are not removed blobs.
            removed_blobs: r.blobs_removed,
            freed_bytes: r.bytes_before.saturating_sub(r.bytes_after),
            left_below_threshold: r.left_below_threshold,
            left_in_damaged_packs: r.left_in_kept_packs,
            stored_bytes: r.bytes_after,
            packs_rewritten_for_budget: r.packs_rewritten_for_budget,
            problems: r.problems,
        })
    }
    fn wants_dictionary(&self) -> bool {
        cairn_engine::blob::BlobStore::wants_dictionary(self)
    }
    fn train_dictionary(&self, samples: &[&[u8]]) -> Result<()> {
        cairn_engine::blob::BlobStore::train_dictionary(self, samples)?;
        Ok(())
    }
}
