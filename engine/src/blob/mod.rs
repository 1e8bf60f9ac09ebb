//! The content-addressed blob store: file contents, large diffs, prompts
//! and replies, keyed by the blake3 of their bytes.
//!
//! ```
//! # fn main() -> cairn_engine::Result<()> {
//! use std::sync::Arc;
//! use cairn_engine::blob::{BlobOptions, BlobStore};
//! use cairn_engine::vfs::SimVfs; // `RealVfs` for files on disk
//!
//! let store = BlobStore::open(Arc::new(SimVfs::new()), "/ws/.cairn/blobs".as_ref(), BlobOptions::default())?;
//! let h = store.put(b"fn main() {}\n")?;
//! store.sync()?; // durable: now a log record may refer to `h`
//! assert_eq!(store.get(&h)?, b"fn main() {}\n");
//! assert_eq!(store.put(b"fn main() {}\n")?, h); // stored once
//! # Ok(()) }
//! ```
//!
//! Blobs are appended to pack files ([`pack`]) with an index from hash to
//! location ([`index`]) that is persisted now and then and can always be
//! rebuilt from the packs. Blobs over the chunking threshold are split by
//! content-defined chunking ([`chunking`]). Every read checks the entry's CRC
//! and the blake3 of the contents: wrong bytes are never returned.
//!
//! Durability: `put` writes but does not fsync; `sync` (or `put_batch`,
//! which ends with one) makes everything put so far durable. The commit
//! protocol is: put the blobs, `sync`, then append the log records that refer
//! to them.
//!
//! Concurrency: a `BlobStore` is shared by reference (`Arc`) between threads.
//! Hashing and compression run outside any lock; only the append itself is
//! serialized. Reads never wait for writes. Garbage collection blocks puts
//! (not gets) while it runs.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use cairn_codec::BlobHash;

use crate::dicts::{unique_tmp_name, write_durably};
use crate::vfs::{OpenMode, Vfs, VfsFile};
use crate::{EngineError, Result};

pub mod chunking;
pub mod delta;
pub mod dict;
mod gc;
pub mod index;
pub mod options;
pub mod pack;
mod recovery;
pub mod scan;
pub mod sorted;
mod stats;
mod table;
mod verify;

pub use gc::{GcReport, LeftBehind};
pub use options::{BlobOptions, GcOptions, DEFAULT_REWRITE_THRESHOLD};
pub use stats::BlobStats;
pub use verify::{BlobProblem, BlobVerifyReport};

use chunking::{cut_points, decode_chunk_list, encode_chunk_list, ChunkRef};
use index::{Loc, PackCover, INDEX_FILE};
use options::CHUNK_MAX_BYTES;
use pack::{
    decode_contents, encode_contents, encode_entry, EntryHeader, EntryKind, PackHeader, PackId,
    ENTRY_HEADER_LEN, PACK_HEADER_LEN,
};
use sorted::SortedIndex;
use table::Index;

/// The operation named in errors reading a blob's input.
const READ_INPUT: &str = "read blob input";

/// New bytes a streaming put reads into each segment before cutting it
/// (8 MiB): large enough that the unfinished chunk carried from one
/// segment into the next (under [`CHUNK_MAX_BYTES`]) is a small part of
/// what is copied and that a hand-off between the reading and hashing
/// threads is rare, small enough that the [`MAX_STREAM_SEGMENTS`] buffers
/// alive at once (36 MiB with room for the carried part) bound a put's
/// memory.
pub const STREAM_SEGMENT_BYTES: usize = 8 * 1024 * 1024;

/// Segment buffers a streaming put allocates at most (3): one being hashed,
/// one queued for the hasher, one being filled. The reader waits for one
/// back rather than allocating a fourth.
pub const MAX_STREAM_SEGMENTS: usize = 3;

/// A segment of a streaming put's input, from the reading thread to the
/// hashing one: `buf[..len]` begins with the bytes carried over from the
/// segment before (`..new_from`, already hashed as part of it) and holds
/// the final chunks `cuts`; `eof` marks the stream's last segment.
struct Segment {
    buf: Vec<u8>,
    len: usize,
    new_from: usize,
    cuts: Vec<(usize, usize)>,
    eof: bool,
}

/// `get` of a chunked blob preallocates at most this much (256 MiB); a
/// bigger blob grows its buffer as chunks arrive.
const GET_PREALLOC_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// An open pack file.
#[derive(Debug)]
struct PackFile {
    id: PackId,
    path: PathBuf,
    nonce: u64,
    file: Arc<dyn VfsFile>,
}

/// The pack being appended to.
#[derive(Debug)]
struct Active {
    pack: Arc<PackFile>,
    len: u64,
}

/// State of the appender, behind one mutex.
#[derive(Debug, Default)]
struct Writer {
    active: Option<Active>,
    next_id: u32,
    /// Packs with appends not yet fsynced.
    dirty: Vec<Arc<PackFile>>,
    /// A pack was created since the last directory fsync.
    dir_dirty: bool,
    /// Bytes appended since the persisted index was last written.
    since_snapshot: u64,
    /// Set when a write or fsync failed: every later write is refused.
    poisoned: Option<String>,
    /// Entries neither in the index file nor in the index delta: appended
    /// by this process, or found in a pack tail on open.
    unrecorded: Vec<(BlobHash, Loc)>,
    /// Where the next index delta frame is written (the end of the valid
    /// frames).
    delta_len: u64,
}

/// The blob store of one `.cairn/blobs` directory. See the module docs.
#[derive(Debug)]
pub struct BlobStore {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    opts: BlobOptions,
    read_only: bool,
    index: RwLock<Index>,
    packs: RwLock<BTreeMap<PackId, Arc<PackFile>>>,
    writer: Mutex<Writer>,
    /// Incremented by every append (under the writer lock), before its
    /// entry is published in the index.
    write_seq: AtomicU64,
    /// The `write_seq` value covered by the last completed fsync.
    synced_seq: AtomicU64,
    /// Serializes fsyncs and index snapshots.
    sync_lock: Mutex<()>,
    /// Held shared by puts, exclusively by garbage collection.
    gc_gate: RwLock<()>,
    /// Read-only stores: how far each pack has been scanned.
    scanned: Mutex<HashMap<PackId, u64>>,
    /// The store's zstd dictionaries (see [`dict`]).
    dicts: crate::dicts::Dicts,
    /// Set when the persisted index was found damaged after open and
    /// rebuilt from the packs: closing writes a new one.
    index_damaged: std::sync::atomic::AtomicBool,
}

fn integrity(hash: BlobHash, path: &Path, offset: u64, detail: impl Into<String>) -> EngineError {
    EngineError::BlobIntegrity {
        hash,
        path: path.to_path_buf(),
        offset,
        detail: detail.into(),
    }
}

impl BlobStore {
    /// Opens (creating if needed) the blob store in `dir` (`.cairn/blobs`)
    /// for writing: removes temporary files left by a crash, truncates a
    /// torn pack tail, loads the persisted index and recovers the entries
    /// appended after it, or rebuilds the index from the packs when it is
    /// missing, stale or damaged.
    ///
    /// One process may open a store for writing at a time (the caller holds
    /// the store lock, see [`StoreDir`](crate::StoreDir)).
    pub fn open(vfs: Arc<dyn Vfs>, dir: &Path, opts: BlobOptions) -> Result<BlobStore> {
        recovery::open(vfs, dir, opts.normalized(), false)
    }

    /// Opens the blob store for reading only, for readers in other
    /// processes: nothing is written, removed or truncated; puts fail with
    /// [`EngineError::Invalid`]. Blobs appended later by the writer are
    /// found by scanning the pack tails again when a lookup misses.
    pub fn open_read_only(vfs: Arc<dyn Vfs>, dir: &Path) -> Result<BlobStore> {
        recovery::open(vfs, dir, BlobOptions::default().normalized(), true)
    }

    /// The directory this store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(EngineError::Invalid(format!(
                "the blob store in {} is open read-only; it cannot store blobs",
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// Stores `bytes` and returns their hash. A blob already present is not
    /// written again. Written, but not durable until [`sync`](Self::sync).
    pub fn put(&self, bytes: &[u8]) -> Result<BlobHash> {
        self.check_writable()?;
        let _gate = self.gc_gate.read();
        self.put_inner(bytes)
    }

    /// Stores every item and makes them all durable with one fsync before
    /// returning (one per pack appended to: one unless the batch fills a
    /// pack), also when every item was already present but not yet durable.
    pub fn put_batch(&self, items: &[&[u8]]) -> Result<Vec<BlobHash>> {
        self.check_writable()?;
        let hashes = {
            let _gate = self.gc_gate.read();
            items
                .iter()
                .map(|b| self.put_inner(b))
                .collect::<Result<Vec<_>>>()?
        };
        self.sync()?;
        Ok(hashes)
    }

    /// Stores everything `r` yields, streaming: a blob over the chunking
    /// threshold is cut into chunks as it is read, so memory holds a few
    /// chunks at most, never the whole blob. Returns the hash and length.
    /// Not durable until [`sync`](Self::sync).
    pub fn put_reader(&self, r: &mut dyn Read) -> Result<(BlobHash, u64)> {
        self.check_writable()?;
        let _gate = self.gc_gate.read();
        // Read up to the threshold (plus one byte): small blobs are stored whole.
        let limit = self.opts.chunking_threshold_bytes;
        let mut head = Vec::new();
        r.take(limit + 1)
            .read_to_end(&mut head)
            .map_err(|e| EngineError::io(READ_INPUT, &self.dir, e))?;
        if head.len() as u64 <= limit {
            let h = self.put_inner(&head)?;
            return Ok((h, head.len() as u64));
        }
        self.put_chunked(head, r)
    }

    /// The rest of [`put_reader`](Self::put_reader) for a blob over the
    /// chunking threshold, `head` its first bytes. Two threads share the
    /// work, so the second core is used: this one reads the input in
    /// segments of [`STREAM_SEGMENT_BYTES`] and finds each segment's cut
    /// points in place ([`chunking::Cutter`], the cut points FastCDC
    /// gives the whole stream); a helper thread hashes the whole blob and
    /// each chunk and stores the chunks (compressing only those not already
    /// stored). The bytes are copied once, from the reader into a segment
    /// (the unfinished chunk at a segment's end once more, into the next).
    /// At most [`MAX_STREAM_SEGMENTS`] segment buffers exist at once, handed
    /// back for reuse.
    fn put_chunked(&self, head: Vec<u8>, r: &mut dyn Read) -> Result<(BlobHash, u64)> {
        let cap = STREAM_SEGMENT_BYTES + CHUNK_MAX_BYTES as usize;
        let (to_hasher, segments) = std::sync::mpsc::sync_channel::<Segment>(1);
        let (give_back, spares) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::scope(|scope| {
            let hasher = scope.spawn(move || self.hash_and_store(segments, give_back));
            let read = self.read_segments(head, r, cap, &to_hasher, &spares);
            drop(to_hasher);
            let stored = match hasher.join() {
                Ok(x) => x,
                Err(p) => std::panic::resume_unwind(p),
            };
            // A read error first: the hasher then only saw the stream stop.
            read?;
            stored
        })
    }

    /// The reading half of [`put_chunked`](Self::put_chunked): fills
    /// segments from `head` and `r`, cuts them, and sends them on, the last
    /// one marked. Stops early, without error, if the hasher stopped (its
    /// error is the one reported).
    fn read_segments(
        &self,
        head: Vec<u8>,
        r: &mut dyn Read,
        cap: usize,
        to_hasher: &std::sync::mpsc::SyncSender<Segment>,
        spares: &std::sync::mpsc::Receiver<Vec<u8>>,
    ) -> Result<()> {
        let mut buf = vec![0u8; cap];
        let mut made = 1;
        let mut cutter = chunking::Cutter::new();
        buf[..head.len()].copy_from_slice(&head);
        let mut len = head.len();
        let mut new_from = 0;
        loop {
            let mut eof = false;
            while len < cap {
                match r.read(&mut buf[len..]) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => len += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(EngineError::io(READ_INPUT, &self.dir, e)),
                }
            }
            let mut cuts = Vec::new();
            let done = cutter.cut(&buf[..len], eof, &mut cuts);
            let mut next = match spares.try_recv() {
                Ok(b) => b,
                Err(_) if made < MAX_STREAM_SEGMENTS => {
                    made += 1;
                    vec![0u8; cap]
                }
                // The hasher holds the rest: wait for one back (none
                // comes back once it stopped, and its error is reported).
                Err(_) => match spares.recv() {
                    Ok(b) => b,
                    Err(_) => return Ok(()),
                },
            };
            let carried = len - done;
            next[..carried].copy_from_slice(&buf[done..len]);
            let seg = Segment {
                buf,
                len,
                new_from,
                cuts,
                eof,
            };
            if to_hasher.send(seg).is_err() || eof {
                return Ok(());
            }
            buf = next;
            len = carried;
            new_from = carried;
        }
    }

    /// The hashing half of [`put_chunked`](Self::put_chunked): hashes the
    /// whole stream and each chunk, stores the chunks and, at the marked
    /// last segment, the chunk list (or, for a blob that turned out to be
    /// one chunk, the blob whole). A stream that stops unmarked (the reader
    /// failed) stores no list.
    fn hash_and_store(
        &self,
        segments: std::sync::mpsc::Receiver<Segment>,
        give_back: std::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<(BlobHash, u64)> {
        let mut whole = blake3::Hasher::new();
        let mut refs = Vec::new();
        let mut total: u64 = 0;
        // The first chunk is held back until a second one exists: a blob
        // that is one chunk is stored whole (its chunk would share its hash).
        let mut first: Option<Vec<u8>> = None;
        for seg in segments {
            let bytes = &seg.buf[..seg.len];
            whole.update(&bytes[seg.new_from..]);
            for &(off, len) in &seg.cuts {
                let chunk = &bytes[off..off + len];
                total += len as u64;
                if refs.is_empty() && first.is_none() {
                    first = Some(chunk.to_vec());
                    continue;
                }
                if let Some(f) = first.take() {
                    refs.push(self.store_chunk(&f)?);
                }
                refs.push(self.store_chunk(chunk)?);
            }
            if seg.eof {
                let hash = BlobHash(*whole.finalize().as_bytes());
                match first {
                    Some(f) => self.store_contents(EntryKind::Blob, hash, &f)?,
                    None => self.store_list(hash, total, &refs)?,
                }
                return Ok((hash, total));
            }
            // The reader may have finished and gone: nothing to give back to.
            let _ = give_back.send(seg.buf);
        }
        Err(EngineError::io(
            READ_INPUT,
            &self.dir,
            std::io::Error::other("the input stopped before its end"),
        ))
    }

    fn store_chunk(&self, data: &[u8]) -> Result<ChunkRef> {
        let hash = BlobHash::of(data);
        self.store_contents(EntryKind::Chunk, hash, data)?;
        Ok(ChunkRef {
            hash,
            len: data.len() as u64,
        })
    }

    /// [`put_reader`](Self::put_reader) over a workspace file. Workspace
    /// files are outside the store, so this reads through `std::fs`, not the
    /// store's [`Vfs`].
    pub fn put_file(&self, path: &Path) -> Result<(BlobHash, u64)> {
        let mut f = std::fs::File::open(path).map_err(|e| EngineError::io("open file", path, e))?;
        self.put_open_file(&mut f, path)
    }

    /// [`put_file`](Self::put_file) of a file the caller has opened (a
    /// checkpoint opens each file without following a symlink, and stores
    /// what that handle reads, whatever the path names by then); `path`
    /// names it in errors.
    pub fn put_open_file(&self, f: &mut std::fs::File, path: &Path) -> Result<(BlobHash, u64)> {
        let mut r = std::io::BufReader::with_capacity(1 << 20, f);
        self.put_reader(&mut r).map_err(|e| match e {
            EngineError::Io { op, source, .. } if op == READ_INPUT => EngineError::Io {
                op,
                path: path.to_path_buf(),
                source,
            },
            e => e,
        })
    }

    fn put_inner(&self, bytes: &[u8]) -> Result<BlobHash> {
        let hash = BlobHash::of(bytes);
        if self.present_as(EntryKind::Blob, &hash) && self.stored_intact(&hash)? {
            return Ok(hash);
        }
        let cuts: Vec<(usize, usize)> = if bytes.len() as u64 > self.opts.chunking_threshold_bytes {
            cut_points(bytes).collect()
        } else {
            Vec::new()
        };
        if cuts.len() > 1 {
            let refs = cuts
                .iter()
                .map(|&(off, len)| self.store_chunk(&bytes[off..off + len]))
                .collect::<Result<Vec<_>>>()?;
            self.store_list(hash, bytes.len() as u64, &refs)?;
        } else {
            // Small, or one chunk (no cut point): stored whole.
            self.store_contents(EntryKind::Blob, hash, bytes)?;
        }
        Ok(hash)
    }

    /// True if `hash` is stored in a way that serves a put of `kind`: any
    /// entry serves a chunk; a top-level blob needs a top-level entry (so it
    /// is listed by [`hashes`](Self::hashes) even after an index rebuild).
    fn present_as(&self, kind: EntryKind, hash: &BlobHash) -> bool {
        self.find(hash)
            .is_some_and(|l| kind == EntryKind::Chunk || l.kind.is_top_level())
    }

    /// Whether the entries that hold `hash` (a chunked blob's list and
    /// every chunk) are intact: header, CRC and name, read back without
    /// decompressing. A put of contents already stored checks this before
    /// it dedups: bytes in hand (a workspace file) then replace a copy
    /// damaged by bit rot, instead of a new checkpoint naming a blob that
    /// cannot be read back.
    fn stored_intact(&self, hash: &BlobHash) -> Result<bool> {
        let Some(loc) = self.find(hash) else {
            return Ok(false);
        };
        if loc.kind != EntryKind::ChunkList {
            return self.entry_intact(hash, &loc);
        }
        let refs = match self.read_list(hash, &loc) {
            Ok((_, refs)) => refs,
            Err(EngineError::BlobIntegrity { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        for r in refs {
            let chunk = self.find(&r.hash);
            match chunk {
                Some(cl) if self.entry_intact(&r.hash, &cl)? => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Whether the entry of `hash` at `loc` reads back intact (header, CRC,
    /// name); damage is `false`, an I/O failure an error.
    fn entry_intact(&self, hash: &BlobHash, loc: &Loc) -> Result<bool> {
        match self.read_entry(hash, loc) {
            Ok(_) => Ok(true),
            Err(EngineError::BlobIntegrity { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn store_contents(&self, kind: EntryKind, hash: BlobHash, raw: &[u8]) -> Result<()> {
        // A damaged copy is replaced (see `stored_intact`).
        let replace = self.present_as(kind, &hash);
        if replace && self.stored_intact(&hash)? {
            return Ok(());
        }
        self.dicts.poll();
        let dict = self.dicts.current();
        if dict.is_none() {
            self.dicts
                .offer(raw, self.opts.dictionary_sample_bytes, &self.vfs, &self.dir);
        }
        let entry = encode_contents(kind, self.opts.zstd_level, &hash, raw, dict.map(|d| &**d));
        self.append(hash, entry, replace)
    }

    fn store_list(&self, hash: BlobHash, total: u64, refs: &[ChunkRef]) -> Result<()> {
        // The chunks were stored (or found intact) just before: a list that
        // is present then needs only its own entry intact.
        let replace = self.present_as(EntryKind::ChunkList, &hash);
        if replace {
            let loc = self.find(&hash);
            if let Some(l) = loc {
                if self.entry_intact(&hash, &l)? {
                    return Ok(());
                }
            }
        }
        let payload = encode_chunk_list(refs);
        if payload.len() as u64 > options::MAX_ENTRY_RAW_BYTES {
            return Err(EngineError::TooLarge {
                what: format!(
                    "a blob of {total} bytes needs {} chunks; a chunk list holds at most {}",
                    refs.len(),
                    options::MAX_ENTRY_RAW_BYTES / chunking::CHUNK_REF_LEN as u64
                ),
            });
        }
        let mut entry = Vec::new();
        encode_entry(&mut entry, EntryKind::ChunkList, 0, total, &hash, &payload);
        self.append(hash, entry, replace)
    }

    /// Creates a new pack and makes it the active one.
    fn roll(&self, w: &mut Writer) -> Result<()> {
        let id = PackId(w.next_id);
        let next_id = w
            .next_id
            .checked_add(1)
            .ok_or_else(|| EngineError::TooLarge {
                what: format!("pack ids in {} are exhausted", self.dir.display()),
            })?;
        let path = self.dir.join(id.file_name());
        let nonce = recovery::new_nonce(&path);
        let file = self
            .vfs
            .open(&path, OpenMode::CreateNew)
            .map_err(|e| EngineError::io("create pack", &path, e))?;
        let header = PackHeader { id, nonce }.encode();
        if let Err(e) = file.write_all_at(&header, 0) {
            w.poisoned = Some(format!("writing the header of {}: {e}", path.display()));
            return Err(EngineError::io("write pack header", &path, e));
        }
        w.next_id = next_id;
        let pack = Arc::new(PackFile {
            id,
            path,
            nonce,
            file,
        });
        self.packs.write().insert(id, pack.clone());
        w.dir_dirty = true;
        w.dirty.push(pack.clone());
        w.active = Some(Active {
            pack,
            len: PACK_HEADER_LEN as u64,
        });
        Ok(())
    }

    /// Appends one encoded entry to the active pack and indexes it. Unless
    /// `replace`, an entry whose hash another thread stored meanwhile is
    /// dropped (dedup of in-flight puts).
    fn append(&self, hash: BlobHash, entry: Vec<u8>, replace: bool) -> Result<()> {
        let header = EntryHeader::decode(&entry)?;
        let mut w = self.writer.lock();
        if let Some(cause) = &w.poisoned {
            return Err(EngineError::Poisoned {
                cause: cause.clone(),
            });
        }
        if !replace && self.present_as(header.kind, &hash) {
            return Ok(());
        }
        let need = entry.len() as u64;
        let full = w.active.as_ref().is_some_and(|a| {
            a.len > PACK_HEADER_LEN as u64 && a.len + need > self.opts.pack_size_bytes
        });
        if full {
            // The sealed pack stays in `dirty` until the next sync.
            w.active = None;
        }
        if w.active.is_none() {
            self.roll(&mut w)?;
        }
        let (pack, offset) = match &w.active {
            Some(a) => (a.pack.clone(), a.len),
            None => return Err(EngineError::Invalid("no active pack after roll".into())),
        };
        if let Err(e) = pack.file.write_all_at(&entry, offset) {
            w.poisoned = Some(format!("appending to {}: {e}", pack.path.display()));
            return Err(EngineError::io("append to pack", &pack.path, e));
        }
        if let Some(a) = w.active.as_mut() {
            a.len += need;
        }
        if !w.dirty.iter().any(|p| p.id == pack.id) {
            w.dirty.push(pack.clone());
        }
        w.since_snapshot += need;
        let loc = Loc {
            pack: pack.id,
            offset,
            stored_len: header.stored_len,
            raw_len: header.raw_len,
            kind: header.kind,
            flags: header.flags,
        };
        // Count the write before publishing the entry: a thread that finds
        // it in the index (a dedup hit) and then calls `sync` must see a
        // `write_seq` that covers it, or it would skip the fsync.
        self.write_seq.fetch_add(1, Ordering::AcqRel);
        self.index.write().insert(hash, loc);
        w.unrecorded.push((hash, loc));
        Ok(())
    }

    /// Makes everything put so far durable: fsyncs every pack appended to
    /// since the last sync (and the directory if a pack was created). Costs
    /// one atomic load when nothing is unsynced. Concurrent callers share
    /// one fsync. After a failed fsync the store refuses all writes.
    pub fn sync(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let target = self.write_seq.load(Ordering::Acquire);
        if self.synced_seq.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        let _s = self.sync_lock.lock();
        if self.synced_seq.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        let (files, dir_dirty, seq, snapshot_due) = {
            let mut w = self.writer.lock();
            if let Some(cause) = &w.poisoned {
                return Err(EngineError::Poisoned {
                    cause: cause.clone(),
                });
            }
            let dir_dirty = std::mem::take(&mut w.dir_dirty);
            (
                std::mem::take(&mut w.dirty),
                dir_dirty,
                self.write_seq.load(Ordering::Acquire),
                w.since_snapshot >= options::INDEX_SNAPSHOT_EVERY_BYTES,
            )
        };
        if let Err((cause, e)) = self.fsync_files(&files, dir_dirty) {
            self.writer.lock().poisoned = Some(cause);
            return Err(e);
        }
        self.synced_seq.fetch_max(seq, Ordering::AcqRel);
        if snapshot_due {
            self.persist_index_locked()?;
        }
        Ok(())
    }

    /// Fsyncs `files` (and the directory); on failure returns the cause to
    /// poison the writer with, and the error.
    fn fsync_files(
        &self,
        files: &[Arc<PackFile>],
        dir_dirty: bool,
    ) -> std::result::Result<(), (String, EngineError)> {
        for p in files {
            if let Err(e) = p.file.sync_data() {
                return Err((
                    format!("fsync of {}: {e}", p.path.display()),
                    EngineError::io("fsync pack", &p.path, e),
                ));
            }
        }
        if dir_dirty {
            if let Err(e) = self.vfs.sync_dir(&self.dir) {
                return Err((
                    format!("fsync of directory {}: {e}", self.dir.display()),
                    EngineError::io("fsync directory", &self.dir, e),
                ));
            }
        }
        Ok(())
    }

    /// True if something was put since the last completed [`sync`](Self::sync).
    pub fn has_unsynced(&self) -> bool {
        self.write_seq.load(Ordering::Acquire) > self.synced_seq.load(Ordering::Acquire)
    }

    /// Writes a new index snapshot covering every pack as it is now (after
    /// fsyncing them), atomically: temp file, fsync, rename, directory fsync.
    pub fn persist_index(&self) -> Result<()> {
        self.check_writable()?;
        let _s = self.sync_lock.lock();
        self.persist_index_locked()
    }

    /// [`persist_index`](Self::persist_index) with `sync_lock` held.
    fn persist_index_locked(&self) -> Result<()> {
        let (covers, entries) = {
            // Holding the writer lock throughout: nothing is appended
            // meanwhile, so the lengths recorded are exactly what was fsynced.
            let mut w = self.writer.lock();
            if let Some(cause) = &w.poisoned {
                return Err(EngineError::Poisoned {
                    cause: cause.clone(),
                });
            }
            let files = std::mem::take(&mut w.dirty);
            let dir_dirty = std::mem::take(&mut w.dir_dirty);
            if let Err((cause, e)) = self.fsync_files(&files, dir_dirty) {
                w.poisoned = Some(cause);
                return Err(e);
            }
            let seq = self.write_seq.load(Ordering::Acquire);
            self.synced_seq.fetch_max(seq, Ordering::AcqRel);
            w.since_snapshot = 0;
            // Every entry goes into the new file.
            w.unrecorded.clear();
            // Read under the writer lock (the lock order is writer, then
            // index; a rebuild of a damaged base takes only the index
            // lock): every entry appended before the lengths recorded is
            // in the file, and later ones are past them and stay in memory.
            let entries = self.index_entries()?;
            self.snapshot(&w, entries)?
        };
        self.write_index_file(&covers, entries)
    }

    /// The pack table of a new index and the entries it holds: `all`
    /// filtered to the packs that still exist.
    #[allow(clippy::type_complexity)]
    fn snapshot(
        &self,
        w: &Writer,
        all: Vec<(BlobHash, Loc)>,
    ) -> Result<(Vec<PackCover>, Vec<(BlobHash, Loc)>)> {
        let covers = self.covers(w)?;
        // Only entries inside the covered part of a listed pack: a row
        // outside it would make the file damaged (the old format's
        // snapshot dropped entries of packs gone the same way).
        let entries = all
            .into_iter()
            .filter(|(_, l)| covered_by(&covers, l))
            .collect();
        Ok((covers, entries))
    }

    /// Every pack and its length now (the caller has fsynced them).
    fn covers(&self, w: &Writer) -> Result<Vec<PackCover>> {
        let packs = self.packs.read();
        let mut covers = Vec::with_capacity(packs.len());
        for p in packs.values() {
            let covered_len = match &w.active {
                Some(a) if a.pack.id == p.id => a.len,
                _ => p
                    .file
                    .len()
                    .map_err(|e| EngineError::io("size pack", &p.path, e))?,
            };
            covers.push(PackCover {
                id: p.id,
                nonce: p.nonce,
                covered_len,
            });
        }
        Ok(covers)
    }

    /// Writes the index file and switches lookups to it, keeping in memory
    /// only the entries it does not cover.
    fn write_index_file(
        &self,
        covers: &[PackCover],
        mut entries: Vec<(BlobHash, Loc)>,
    ) -> Result<()> {
        let tmp = unique_tmp_name(INDEX_FILE);
        let bytes = sorted::encode(covers, &mut entries);
        drop(entries);
        let wrote = write_durably(&*self.vfs, &self.dir, &tmp, INDEX_FILE, &bytes);
        if wrote.is_err() {
            let _ = self.vfs.remove_file(&self.dir.join(&tmp));
            return wrote;
        }
        drop(bytes);
        // The file was just written whole; if mapping it back fails the
        // entries simply stay in memory.
        let path = self.dir.join(INDEX_FILE);
        if let Ok(base) = self
            .vfs
            .map(&path)
            .map_err(|_| ())
            .and_then(|m| SortedIndex::open(m).map_err(|_| ()))
        {
            self.index.write().rebase(base, |l| !covered_by(covers, l));
        }
        // The delta extended the old file: emptied (its frames name the
        // old file's id, so a crash before this only leaves frames the
        // next open skips). Best effort for the same reason.
        let mut w = self.writer.lock();
        let delta = self.dir.join(delta::DELTA_FILE);
        if w.delta_len > 0 || self.vfs.exists(&delta) {
            if let Ok(f) = self.vfs.open(&delta, OpenMode::ReadWrite) {
                let _ = f.set_len(0);
            }
        }
        w.delta_len = 0;
        Ok(())
    }

    /// Appends one index delta frame naming the entries not yet in the
    /// index file nor the delta, after fsyncing the packs they are in (a
    /// frame names only synced bytes). Not fsynced itself: see [`delta`].
    fn append_delta(&self) -> Result<()> {
        self.sync()?;
        let _s = self.sync_lock.lock();
        let mut w = self.writer.lock();
        if w.unrecorded.is_empty() || w.poisoned.is_some() {
            return Ok(());
        }
        let Some(base_id) = self.index.read().base().map(SortedIndex::id) else {
            return Ok(());
        };
        let covers = self.covers(&w)?;
        let entries: Vec<(BlobHash, Loc)> = w
            .unrecorded
            .iter()
            .filter(|(_, l)| covered_by(&covers, l))
            .copied()
            .collect();
        let frame = delta::Frame {
            base_id,
            packs: covers,
            entries,
        }
        .encode();
        let path = self.dir.join(delta::DELTA_FILE);
        let mode = if self.vfs.exists(&path) {
            OpenMode::ReadWrite
        } else {
            OpenMode::CreateNew
        };
        let f = self
            .vfs
            .open(&path, mode)
            .map_err(|e| EngineError::io("open index delta", &path, e))?;
        f.write_all_at(&frame, w.delta_len)
            .map_err(|e| EngineError::io("append to index delta", &path, e))?;
        w.delta_len += frame.len() as u64;
        w.unrecorded.clear();
        Ok(())
    }

    /// True if closing should write a new index file: the store has none
    /// it can use (new, rebuilt, damaged), or the entries outside it have
    /// reached [`options::INDEX_TAIL_MAX_ENTRIES`].
    fn index_rewrite_due(&self, since_snapshot: u64) -> bool {
        if self.index_damaged.load(Ordering::Acquire) {
            return true;
        }
        let index = self.index.read();
        if !index.has_base() {
            return since_snapshot > 0 || index.added_len() > 0;
        }
        index.added_len() >= options::INDEX_TAIL_MAX_ENTRIES
    }

    /// The contents of a blob or chunk entry, decompressed (with the
    /// store's dictionary if it needs one) and checked against the name in
    /// its header; the error says what was wrong.
    fn decode_verified(
        &self,
        hdr: &EntryHeader,
        payload: &[u8],
    ) -> std::result::Result<Vec<u8>, String> {
        let data = decode_contents(hdr, payload, &|id| self.dict(id)).map_err(|e| e.to_string())?;
        if BlobHash::of(&data) != hdr.hash {
            return Err("the contents do not hash to the entry's name".into());
        }
        Ok(data)
    }

    fn lookup(&self, h: &BlobHash) -> Option<Loc> {
        if let Some(l) = self.find(h) {
            return Some(l);
        }
        if self.read_only && recovery::refresh(self).is_ok() {
            return self.find(h);
        }
        None
    }

    /// Where `h` is, by the index as it stands. A damaged bucket of the
    /// persisted index is never trusted: the index is rebuilt from the
    /// packs and the lookup asked again.
    fn find(&self, h: &BlobHash) -> Option<Loc> {
        if let Ok(l) = self.index.read().get(h) {
            return l;
        }
        if recovery::rebuild_after_damage(self).is_err() {
            return None;
        }
        self.index.read().get(h).ok().flatten()
    }

    /// Runs `f` on the whole index in memory (loading the persisted file
    /// into memory first, and rebuilding it from the packs if it turns out
    /// damaged), for garbage collection, which changes and drops entries.
    pub(crate) fn with_index_map<R>(
        &self,
        f: impl FnOnce(&mut HashMap<BlobHash, Loc>) -> R,
    ) -> Result<R> {
        if self.index.write().materialize().is_err() {
            recovery::rebuild_after_damage(self)?;
        }
        let mut index = self.index.write();
        Ok(f(index.materialize()?))
    }

    /// Every index entry (hash, location), rebuilding the index from the
    /// packs first if the persisted one turns out damaged.
    pub(crate) fn index_entries(&self) -> Result<Vec<(BlobHash, Loc)>> {
        if let Ok(all) = self.index.read().all() {
            return Ok(all);
        }
        recovery::rebuild_after_damage(self)?;
        Ok(self.index.read().all()?)
    }

    fn pack_file(&self, id: PackId) -> Option<Arc<PackFile>> {
        self.packs.read().get(&id).cloned()
    }

    /// Reads the entry at `loc` and checks its header, CRC and name.
    /// Returns the pack and the whole entry (header + payload).
    fn read_entry(&self, h: &BlobHash, loc: &Loc) -> Result<(Arc<PackFile>, EntryHeader, Vec<u8>)> {
        let pack = self.pack_file(loc.pack).ok_or_else(|| {
            integrity(
                *h,
                &self.dir.join(loc.pack.file_name()),
                loc.offset,
                "the pack file is missing",
            )
        })?;
        let mut entry = vec![0u8; loc.entry_len() as usize];
        if let Err(e) = pack.file.read_exact_at(&mut entry, loc.offset) {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                return Err(integrity(
                    *h,
                    &pack.path,
                    loc.offset,
                    "the entry runs past the end of the pack",
                ));
            }
            return Err(EngineError::io("read pack", &pack.path, e));
        }
        let header = EntryHeader::decode(&entry)
            .map_err(|e| integrity(*h, &pack.path, loc.offset, e.to_string()))?;
        header
            .check_crc(&entry)
            .map_err(|e| integrity(*h, &pack.path, loc.offset, e.to_string()))?;
        if header.hash != *h
            || header.kind != loc.kind
            || header.stored_len != loc.stored_len
            || header.raw_len != loc.raw_len
        {
            return Err(integrity(
                *h,
                &pack.path,
                loc.offset,
                format!(
                    "the entry there is {:?} {} of {} bytes, not the indexed one",
                    header.kind, header.hash, header.raw_len
                ),
            ));
        }
        Ok((pack, header, entry))
    }

    /// The verified contents of a whole-blob or chunk entry.
    fn read_contents(&self, h: &BlobHash, loc: &Loc) -> Result<Vec<u8>> {
        // `read_entry` checked that the entry's header names `h`.
        let (pack, header, entry) = self.read_entry(h, loc)?;
        self.decode_verified(&header, &entry[ENTRY_HEADER_LEN..])
            .map_err(|detail| integrity(*h, &pack.path, loc.offset, detail))
    }

    /// The checked chunk list of a chunk-list entry.
    fn read_list(&self, h: &BlobHash, loc: &Loc) -> Result<(Arc<PackFile>, Vec<ChunkRef>)> {
        let (pack, header, entry) = self.read_entry(h, loc)?;
        let refs = decode_chunk_list(&entry[ENTRY_HEADER_LEN..], header.raw_len)
            .map_err(|e| integrity(*h, &pack.path, loc.offset, e.to_string()))?;
        Ok((pack, refs))
    }

    /// Reads one blob, or one chunk of a chunked blob, by location;
    /// retried once with a fresh lookup if garbage collection moved it.
    fn get_piece(&self, h: &BlobHash) -> Result<Vec<u8>> {
        let loc = self
            .lookup(h)
            .ok_or(EngineError::BlobNotFound { hash: *h })?;
        match self.read_contents(h, &loc) {
            Err(e) if self.pack_file(loc.pack).is_none() => match self.lookup(h) {
                Some(l2) if l2 != loc => self.read_contents(h, &l2),
                _ => Err(e),
            },
            r => r,
        }
    }

    /// The blob's bytes, verified against `h`. [`EngineError::BlobNotFound`]
    /// if it is not stored; [`EngineError::BlobIntegrity`] (naming the pack
    /// file and offset) if its entry is damaged.
    pub fn get(&self, h: &BlobHash) -> Result<Vec<u8>> {
        let loc = self
            .lookup(h)
            .ok_or(EngineError::BlobNotFound { hash: *h })?;
        if loc.kind != EntryKind::ChunkList {
            return self.get_piece(h);
        }
        // The recorded size is only a capacity hint, capped so a damaged
        // size cannot drive a huge allocation up front.
        let mut out = Vec::with_capacity(loc.raw_len.min(GET_PREALLOC_MAX_BYTES) as usize);
        self.get_to(h, &mut out)?;
        Ok(out)
    }

    /// Writes the blob's bytes to `w`, chunk by chunk, each chunk verified
    /// before it is written; the whole is verified at the end too. Returns
    /// the number of bytes written. On an integrity error part of a chunked
    /// blob may already have been written (every written chunk was correct).
    pub fn get_to(&self, h: &BlobHash, w: &mut dyn std::io::Write) -> Result<u64> {
        let loc = self
            .lookup(h)
            .ok_or(EngineError::BlobNotFound { hash: *h })?;
        if loc.kind != EntryKind::ChunkList {
            let data = self.get_piece(h)?;
            w.write_all(&data)
                .map_err(|e| EngineError::io("write blob output", PathBuf::from("<output>"), e))?;
            return Ok(data.len() as u64);
        }
        let (pack, refs) = match self.read_list(h, &loc) {
            Err(_) if self.pack_file(loc.pack).is_none() => {
                let l2 = self
                    .lookup(h)
                    .ok_or(EngineError::BlobNotFound { hash: *h })?;
                self.read_list(h, &l2)?
            }
            r => r?,
        };
        let mut whole = blake3::Hasher::new();
        let mut total = 0u64;
        for (i, r) in refs.iter().enumerate() {
            let data = self.get_piece(&r.hash).map_err(|e| match e {
                EngineError::BlobNotFound { .. } => integrity(
                    *h,
                    &pack.path,
                    loc.offset,
                    format!("chunk {i} ({}) of the chunk list is missing", r.hash),
                ),
                e => e,
            })?;
            if data.len() as u64 != r.len {
                return Err(integrity(
                    *h,
                    &pack.path,
                    loc.offset,
                    format!(
                        "chunk {i} has {} bytes, the list says {}",
                        data.len(),
                        r.len
                    ),
                ));
            }
            whole.update(&data);
            w.write_all(&data)
                .map_err(|e| EngineError::io("write blob output", PathBuf::from("<output>"), e))?;
            total += r.len;
        }
        if BlobHash(*whole.finalize().as_bytes()) != *h {
            return Err(integrity(
                *h,
                &pack.path,
                loc.offset,
                "the chunks together do not hash to the blob's name",
            ));
        }
        Ok(total)
    }

    /// True if the blob (or chunk) `h` is stored.
    pub fn contains(&self, h: &BlobHash) -> bool {
        self.lookup(h).is_some()
    }

    /// The uncompressed size of blob `h`, if stored.
    pub fn raw_len(&self, h: &BlobHash) -> Option<u64> {
        self.lookup(h).map(|l| l.raw_len)
    }

    /// Every top-level blob (whole blobs and chunked blobs, not their
    /// chunks), in no particular order.
    ///
    /// Reading a damaged persisted index rebuilds it from the packs; if
    /// that fails too (an I/O error), the list is empty.
    pub fn hashes(&self) -> Vec<BlobHash> {
        self.index_entries()
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, l)| l.kind.is_top_level())
            .map(|(h, _)| h)
            .collect()
    }
}

impl BlobStore {
    /// Dictionary `id`: loaded, or read from its file now (a read-only store
    /// meets the writer's dictionary only once entries need it).
    pub(crate) fn dict(&self, id: u32) -> Option<Arc<dict::Dict>> {
        self.dicts.get_or_load(id, &*self.vfs, &self.dir)
    }

    /// True if the store has no zstd dictionary and is not training one:
    /// a caller about to store many small blobs may then hand it samples
    /// with [`train_dictionary`](Self::train_dictionary) first, so all of
    /// them are compressed with it.
    pub fn wants_dictionary(&self) -> bool {
        !self.read_only && self.opts.dictionary_sample_bytes > 0 && self.dicts.wanted()
    }

    /// Trains the store's zstd dictionary from `samples` now (blobs between
    /// 256 bytes and 128 KiB are used; at least 64 are needed), writes it
    /// durably and compresses every later small blob with it. Does nothing
    /// if the store has a dictionary already. Returns whether the store has
    /// one now (false: too few samples, and sampling goes on); an error if
    /// zstd cannot train on them or the file cannot be written (the store
    /// then goes on without one). Training takes about a tenth of a second
    /// per MiB of samples.
    pub fn train_dictionary(&self, samples: &[&[u8]]) -> Result<bool> {
        self.check_writable()?;
        self.dicts.train_now(samples, &*self.vfs, &self.dir)
    }

    /// Waits for a dictionary being trained in the background, if any, and
    /// starts compressing with it. Returns the id of the dictionary new
    /// blobs are compressed with, if there is one.
    pub fn wait_for_dictionary(&self) -> Option<u32> {
        self.dicts.finish();
        self.dicts.current().map(|d| d.id)
    }
}

impl Drop for BlobStore {
    /// Best effort: a store closed cleanly leaves an index whose uncovered
    /// pack tails are short (see [`options::INDEX_TAIL_MAX_ENTRIES`]), so
    /// the next open scans little, and a short process does not rewrite the
    /// whole index for the few blobs it stored. A dictionary being trained
    /// is waited for, so no thread writes into the directory after close.
    fn drop(&mut self) {
        self.dicts.finish();
        if self.read_only {
            return;
        }
        let (merge, record) = {
            let w = self.writer.lock();
            let ok = w.poisoned.is_none();
            (
                ok && self.index_rewrite_due(w.since_snapshot),
                ok && !w.unrecorded.is_empty(),
            )
        };
        if merge {
            let _ = self.persist_index();
        } else if record {
            let _ = self.append_delta();
        }
    }
}

/// True if `l` lies inside the covered part of a pack in `covers`.
fn covered_by(covers: &[PackCover], l: &Loc) -> bool {
    covers
        .iter()
        .any(|c| c.id == l.pack && l.offset.saturating_add(l.entry_len()) <= c.covered_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<BlobStore>();
    }

    /// The fixed input of the chunking vectors: xorshift bytes, a run of
    /// zeros (cut at the maximum chunk size), more xorshift bytes and an
    /// odd-sized tail.
    fn vector_input() -> Vec<u8> {
        let mut out = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut noise = |out: &mut Vec<u8>, n: usize| {
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                out.push((x >> 24) as u8);
            }
        };
        noise(&mut out, 7 << 20);
        out.resize(out.len() + (9 << 20) + 3, 0);
        noise(&mut out, (6 << 20) + 12_345);
        out
    }

    /// The chunking of a stream is the one stores already hold: a change
    /// to the chunker (its parameters, the streaming put's segments) that
    /// moved a cut point would make every big file stored again instead of
    /// deduplicating against existing stores. The vectors were taken from
    /// the put that streamed through `fastcdc`'s `StreamCDC`.
    #[test]
    fn the_chunking_of_a_stream_matches_fixed_vectors() {
        #![allow(clippy::unwrap_used)]
        let data = vector_input();
        let want_lens: [u64; 14] = [
            1_040_333, 1_434_399, 1_052_008, 555_624, 1_046_575, 1_635_984, 4_194_304, 4_194_304,
            3_201_413, 1_935_256, 708_712, 1_453_205, 277_760, 351_143,
        ];
        let want_hash = "e859bd280d4a9de7a32cf00d31ac3c0626d404c486b4cf8661731647b06fda65";
        let want_list = "c2ec94f53c9f1e4c574c17591c603a4e6d643089eb03f42af3bc043da40a237b";
        let whole: Vec<u64> = cut_points(&data).map(|(_, l)| l as u64).collect();
        assert_eq!(whole, want_lens);
        let tmp = tempfile::tempdir().unwrap();
        let s = BlobStore::open(
            Arc::new(crate::vfs::RealVfs),
            tmp.path(),
            BlobOptions::default(),
        )
        .unwrap();
        // Read in odd-sized pieces, as a file being read may come.
        struct Dribble<'a>(&'a [u8]);
        impl Read for Dribble<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(777_777);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let (h, n) = s.put_reader(&mut Dribble(&data)).unwrap();
        assert_eq!((h.to_string().as_str(), n), (want_hash, data.len() as u64));
        let loc = s.find(&h).unwrap();
        let (_, refs) = s.read_list(&h, &loc).unwrap();
        let lens: Vec<u64> = refs.iter().map(|r| r.len).collect();
        assert_eq!(lens, want_lens);
        assert_eq!(
            BlobHash::of(&encode_chunk_list(&refs)).to_string(),
            want_list
        );
        // Each chunk is stored under the hash of its bytes.
        let mut off = 0;
        for r in &refs {
            let end = off + r.len as usize;
            assert_eq!(s.get(&r.hash).unwrap(), &data[off..end]);
            off = end;
        }
        assert_eq!(s.get(&h).unwrap(), data);
    }
}
