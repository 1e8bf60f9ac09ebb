//! What queries read: records (the log), blobs and checkpoint manifests,
//! each behind a small trait so the same code runs over the live log, a
//! read-only reader in another process, or plain vectors in tests.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use cairn_codec::{frame, BlobHash, ChainHash, Event, EventRef, Lsn};
use cairn_engine::blob::BlobStore;
use cairn_engine::log::{Log, LogReader};
use cairn_engine::EngineError;
use parking_lot::Mutex;

use crate::error::{QueryError, Result};

/// How often [`RecordSource::wait_for`]'s default implementation polls the
/// head: short enough that a follower sees a commit within a blink, long
/// enough that an idle follower costs nothing measurable.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

pub use cairn_engine::log::{Head, Record};

/// A log to read from: the live log, a read-only reader, or a vector.
pub trait RecordSource {
    /// The last committed record.
    fn head(&self) -> Result<Head>;
    /// Records from `from` (inclusive) to the head as of the call.
    fn iter_from(&self, from: Lsn) -> Box<dyn Iterator<Item = Result<Record>> + '_>;
    /// The record at `lsn`.
    fn read(&self, lsn: Lsn) -> Result<Record>;
    /// Calls `f` with the records `lsns` names (ascending: a posting
    /// list), in that order, until `f` returns `Ok(false)` or an error
    /// (which is returned); records before a failing read are handed out
    /// first. The log's implementations read them in one walk (see
    /// `Log::read_sorted`); the default calls [`RecordSource::read`] per
    /// LSN.
    fn read_sorted(&self, lsns: &[Lsn], f: &mut dyn FnMut(Record) -> Result<bool>) -> Result<()> {
        for &l in lsns {
            if !f(self.read(l)?)? {
                break;
            }
        }
        Ok(())
    }
    /// Calls `f` with each record from `from` to the head (as of the call),
    /// in order, as a borrowed event, until `f` returns `Ok(false)` or an
    /// error (which is returned). Folds and projections use this: the log's
    /// implementations decode each body in place without copying its
    /// strings. The default goes through [`RecordSource::iter_from`].
    fn for_each_ref(
        &self,
        from: Lsn,
        f: &mut dyn FnMut(Lsn, ChainHash, &EventRef<'_>) -> Result<bool>,
    ) -> Result<()> {
        for r in self.iter_from(from) {
            let r = r?;
            if !f(r.lsn, r.chain, &EventRef::of(&r.event))? {
                break;
            }
        }
        Ok(())
    }
    /// Blocks until the head is past `after` or `timeout` passes; returns
    /// the head either way. The default polls [`RecordSource::head`].
    fn wait_for(&self, after: Lsn, timeout: Duration) -> Result<Head> {
        let start = Instant::now();
        loop {
            let head = self.head()?;
            if head.last_lsn > after || start.elapsed() >= timeout {
                return Ok(head);
            }
            std::thread::sleep(POLL_INTERVAL.min(timeout.saturating_sub(start.elapsed())));
        }
    }
}

/// A blob store to read from (and, for imports and tests, write to).
pub trait BlobSource {
    /// The bytes of blob `hash` (verified by the store).
    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>>;

    /// The size of blob `hash` without reading it, where the source knows
    /// it cheaply (`None` otherwise).
    fn len(&self, _hash: &BlobHash) -> Option<u64> {
        None
    }
}

/// One entry of a tree: a file or a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A symbolic link; the blob holds the link target.
    Symlink,
}

/// A path's entry in a tree: its blob, mode and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TreeEntry {
    /// The contents (for a symlink, its target).
    pub blob: BlobHash,
    /// Unix mode bits (`0o644`, `0o755`, ...).
    pub mode: u32,
    /// File or symlink.
    pub kind: EntryKind,
}

/// The mode a file gets when a file event creates it without saying.
pub const DEFAULT_FILE_MODE: u32 = 0o644;

impl TreeEntry {
    /// A regular file with the default mode.
    pub fn file(blob: BlobHash) -> TreeEntry {
        TreeEntry {
            blob,
            mode: DEFAULT_FILE_MODE,
            kind: EntryKind::File,
        }
    }
}

/// A workspace tree: path -> entry, sorted by path.
pub type Tree = BTreeMap<String, TreeEntry>;

/// Reads checkpoint manifests: the tree a `checkpoint.create` record's `root` names.
pub trait ManifestSource {
    /// The whole tree under manifest `root`.
    fn tree(&self, root: &BlobHash) -> Result<Tree>;
    /// One path's entry under manifest `root` (`None` if absent). The default
    /// loads the whole tree; a Merkle manifest can walk only the path.
    fn entry(&self, root: &BlobHash, path: &str) -> Result<Option<TreeEntry>> {
        Ok(self.tree(root)?.get(path).copied())
    }
}

impl RecordSource for Log {
    fn head(&self) -> Result<Head> {
        Ok(Log::head(self))
    }
    fn iter_from(&self, from: Lsn) -> Box<dyn Iterator<Item = Result<Record>> + '_> {
        Box::new(Log::iter_from(self, from).map(|r| r.map_err(QueryError::from)))
    }
    fn read(&self, lsn: Lsn) -> Result<Record> {
        Ok(Log::read(self, lsn)?)
    }
    fn read_sorted(&self, lsns: &[Lsn], f: &mut dyn FnMut(Record) -> Result<bool>) -> Result<()> {
        let mut failed = None;
        Log::read_sorted(self, lsns, |r| handing(f(r), &mut failed))?;
        failed.map_or(Ok(()), Err)
    }
    fn wait_for(&self, after: Lsn, timeout: Duration) -> Result<Head> {
        Ok(Log::wait_for(self, after, timeout))
    }
    fn for_each_ref(
        &self,
        from: Lsn,
        f: &mut dyn FnMut(Lsn, ChainHash, &EventRef<'_>) -> Result<bool>,
    ) -> Result<()> {
        let mut failed = None;
        Log::frames_while(self, from, |fr| {
            visit_frame(fr, &|fr| self.body(fr), f, &mut failed)
        })?;
        failed.map_or(Ok(()), Err)
    }
}

/// The record at `lsn`, read as [`RecordSource::read_sorted`] reads one:
/// from a sealed segment nothing has mapped, the window of the sparse
/// index around it by one read, where [`RecordSource::read`] maps the
/// whole segment (a fault per page touched, each mapping the pages
/// around it, and an unmap at exit). For a process that reads a handful
/// of records (`cairn show`, a newest-first scan from a new process).
/// Checked as [`RecordSource::read`] checks it.
pub fn read_one(src: &dyn RecordSource, lsn: Lsn) -> Result<Record> {
    let mut got = None;
    src.read_sorted(&[lsn], &mut |r| {
        got = Some(r);
        Ok(false)
    })?;
    match got {
        Some(r) if r.lsn == lsn => Ok(r),
        Some(r) => Err(QueryError::Invalid(format!(
            "reading LSN {lsn} gave the record at LSN {}",
            r.lsn
        ))),
        None => Err(QueryError::Invalid(format!(
            "reading LSN {lsn} gave no record"
        ))),
    }
}

/// What a read-sorted walk does with `f`'s answer: go on if it says so;
/// an error is kept in `failed` and stops the walk.
fn handing(step: Result<bool>, failed: &mut Option<QueryError>) -> bool {
    match step {
        Ok(go) => go,
        Err(e) => {
            *failed = Some(e);
            false
        }
    }
}

/// Decodes one frame as an [`EventRef`] and hands it to `f`; on an error,
/// stores it in `failed` and stops the scan.
fn visit_frame<'a>(
    fr: &frame::Frame<'a>,
    body: &dyn Fn(&frame::Frame<'a>) -> cairn_engine::Result<Cow<'a, [u8]>>,
    f: &mut dyn FnMut(Lsn, ChainHash, &EventRef<'_>) -> Result<bool>,
    failed: &mut Option<QueryError>,
) -> bool {
    let bad = |e: &dyn std::fmt::Display| {
        QueryError::Invalid(format!("the record at LSN {} does not decode: {e}", fr.lsn))
    };
    let step = match body(fr) {
        Ok(b) => EventRef::decode(&b)
            .map(|e| f(fr.lsn, fr.chain, &e))
            .map_err(|e| bad(&e)),
        Err(e) => Err(bad(&e)),
    };
    match step {
        Ok(Ok(go)) => go,
        Ok(Err(e)) | Err(e) => {
            *failed = Some(e);
            false
        }
    }
}

/// Records a [`ReaderSource`] reads under its lock before handing them out
/// (see its `read_sorted`): bounds the memory a long posting list takes,
/// while a walk still covers thousands of records (a batch restarts the
/// walk from the sparse index, which costs one seek).
pub const MAX_SORTED_READ_BATCH: usize = 4096;

/// The records of [`SortedReads`]'s first batch at most: a query that
/// wants a few records (`log --limit 5`) reads about that many, and one
/// that wants thousands doubles its batches up to
/// [`MAX_SORTED_READ_BATCH`].
pub const FIRST_SORTED_READ_BATCH: usize = 16;

/// LSNs a query comes to one at a time (from a posting list), read in
/// ascending batches through [`RecordSource::read_sorted`] rather than a
/// read each: [`SortedReads::push`] queues, [`SortedReads::flush`] reads
/// what is queued. Batches start at [`FIRST_SORTED_READ_BATCH`] (or the
/// records wanted, if fewer) and double.
pub struct SortedReads<'a> {
    src: &'a dyn RecordSource,
    pending: Vec<Lsn>,
    cap: usize,
}

impl<'a> SortedReads<'a> {
    /// Reads from `src`, about `want` records wanted (`usize::MAX` for all).
    pub fn new(src: &'a dyn RecordSource, want: usize) -> SortedReads<'a> {
        SortedReads {
            src,
            pending: Vec::new(),
            cap: FIRST_SORTED_READ_BATCH.min(want).max(1),
        }
    }

    /// Queues `lsn` (above the last queued); when a batch is full, reads
    /// it and hands each record to `f`. Returns false once `f` has.
    pub fn push(&mut self, lsn: Lsn, f: &mut dyn FnMut(Record) -> Result<bool>) -> Result<bool> {
        self.pending.push(lsn);
        if self.pending.len() >= self.cap {
            return self.flush(f);
        }
        Ok(true)
    }

    /// Reads what is queued and hands each record to `f`, in order;
    /// returns false if `f` did.
    pub fn flush(&mut self, f: &mut dyn FnMut(Record) -> Result<bool>) -> Result<bool> {
        let mut go = true;
        let pending = std::mem::take(&mut self.pending);
        self.src.read_sorted(&pending, &mut |r| {
            go = f(r)?;
            Ok(go)
        })?;
        self.pending = pending;
        self.pending.clear();
        self.cap = (self.cap * 2).min(MAX_SORTED_READ_BATCH);
        Ok(go)
    }
}

impl std::fmt::Debug for SortedReads<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SortedReads {{ queued: {} }}", self.pending.len())
    }
}

/// A read-only [`LogReader`] (another process's log) as a record source:
/// [`RecordSource::head`] refreshes it, so new commits become visible.
#[derive(Debug)]
pub struct ReaderSource(Mutex<LogReader>);

impl ReaderSource {
    /// Wraps an open reader.
    pub fn new(reader: LogReader) -> ReaderSource {
        ReaderSource(Mutex::new(reader))
    }

    /// The reader itself, locked: for what is not a query (verify, stats,
    /// the checkpoint layer's log access). Held only for the call.
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, LogReader> {
        self.0.lock()
    }
}

impl ReaderSource {
    /// `e` as a query error, after the reader has taken in the damage it
    /// names (see [`LogReader::note_damage`]).
    fn noting_damage(&self, e: cairn_engine::EngineError) -> QueryError {
        if let Some(mut g) = self.0.try_lock() {
            g.note_damage(&e);
        }
        e.into()
    }
}

impl RecordSource for ReaderSource {
    fn head(&self) -> Result<Head> {
        Ok(self.0.lock().refresh()?)
    }
    fn iter_from(&self, from: Lsn) -> Box<dyn Iterator<Item = Result<Record>> + '_> {
        Box::new(
            self.0
                .lock()
                .iter_from(from)
                .map(|r| r.map_err(|e| self.noting_damage(e))),
        )
    }
    fn read(&self, lsn: Lsn) -> Result<Record> {
        let mut g = self.0.lock();
        let r = match g.read(lsn) {
            Err(cairn_engine::EngineError::LsnOutOfRange { .. }) => {
                g.refresh()?;
                g.read(lsn)
            }
            r => r,
        };
        r.map_err(|e| {
            g.note_damage(&e);
            e.into()
        })
    }
    /// Reads under the lock into a list, then hands the records out with
    /// the lock released (so `f` may read this source again); a read
    /// that fails ends the list, and its error follows the records
    /// before it.
    fn read_sorted(&self, lsns: &[Lsn], f: &mut dyn FnMut(Record) -> Result<bool>) -> Result<()> {
        let mut recs = Vec::with_capacity(lsns.len().min(MAX_SORTED_READ_BATCH));
        let mut failed: Option<QueryError> = None;
        for batch in lsns.chunks(MAX_SORTED_READ_BATCH) {
            {
                let mut g = self.0.lock();
                let last = batch.iter().max().copied().unwrap_or(Lsn(0));
                if last > g.head().last_lsn {
                    g.refresh()?;
                }
                if let Err(e) = g.read_sorted(batch, |r| {
                    recs.push(r);
                    true
                }) {
                    g.note_damage(&e);
                    failed = Some(e.into());
                }
            }
            for r in recs.drain(..) {
                if !f(r)? {
                    return Ok(());
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }
    fn for_each_ref(
        &self,
        from: Lsn,
        f: &mut dyn FnMut(Lsn, ChainHash, &EventRef<'_>) -> Result<bool>,
    ) -> Result<()> {
        let mut failed = None;
        let mut reader = self.0.lock();
        let walked = reader.frames_while(from, |fr| {
            visit_frame(fr, &|fr| reader.body(fr), f, &mut failed)
        });
        if let Err(e) = walked {
            reader.note_damage(&e);
            return Err(e.into());
        }
        failed.map_or(Ok(()), Err)
    }
}

impl BlobSource for BlobStore {
    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>> {
        Ok(BlobStore::get(self, hash)?)
    }

    fn len(&self, hash: &BlobHash) -> Option<u64> {
        self.raw_len(hash)
    }
}

impl BlobSource for cairn_snapshot::MemBlobs {
    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>> {
        Ok(cairn_snapshot::BlobRead::get(self, hash)?)
    }

    fn len(&self, hash: &BlobHash) -> Option<u64> {
        self.raw_len(hash)
    }
}

/// Checkpoint manifests as the snapshot crate stores them: Merkle trees of
/// directory nodes in the blob store. Only files and symlinks are tree
/// entries; a path lookup walks only the nodes on its way.
pub struct SnapshotManifests<'a, B: cairn_snapshot::BlobRead + ?Sized>(pub &'a B);

fn from_manifest(e: &cairn_snapshot::Entry) -> Option<TreeEntry> {
    let kind = match e.kind {
        cairn_snapshot::EntryKind::File => EntryKind::File,
        cairn_snapshot::EntryKind::Symlink => EntryKind::Symlink,
        cairn_snapshot::EntryKind::Dir => return None,
    };
    Some(TreeEntry {
        blob: e.hash,
        mode: e.mode,
        kind,
    })
}

impl<B: cairn_snapshot::BlobRead + ?Sized> ManifestSource for SnapshotManifests<'_, B> {
    fn tree(&self, root: &BlobHash) -> Result<Tree> {
        let m = cairn_snapshot::manifest::list(self.0, root)?;
        Ok(m.entries
            .iter()
            .filter_map(|(p, e)| from_manifest(e).map(|t| (p.clone(), t)))
            .collect())
    }

    fn entry(&self, root: &BlobHash, path: &str) -> Result<Option<TreeEntry>> {
        if path.is_empty() {
            return Ok(None);
        }
        Ok(cairn_snapshot::manifest::lookup(self.0, root, path)?
            .as_ref()
            .and_then(from_manifest))
    }
}

/// An in-memory log: a vector of records behind a lock, so a test (or an
/// embedder without a store) can append while others read and follow.
#[derive(Debug, Default)]
pub struct MemLog {
    records: RwLock<Vec<Record>>,
}

impl MemLog {
    /// An empty log.
    pub fn new() -> MemLog {
        MemLog::default()
    }

    /// Appends `event`, assigning the next LSN and chain value; returns the LSN.
    pub fn append(&self, event: Event) -> Result<Lsn> {
        let body = event.encode_body()?;
        let mut recs = self.records.write();
        let prev = recs.last().map(|r| r.chain).unwrap_or(ChainHash::ZERO);
        let lsn = Lsn(recs.len() as u64 + 1);
        let chain = frame::ChainForm::CURRENT.next(prev, lsn, 0, 0, &body);
        recs.push(Record { lsn, chain, event });
        Ok(lsn)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.read().len()
    }

    /// True when no record was appended.
    pub fn is_empty(&self) -> bool {
        self.records.read().is_empty()
    }
}

impl RecordSource for MemLog {
    fn head(&self) -> Result<Head> {
        let recs = self.records.read();
        Ok(recs.last().map_or_else(Head::default, |r| Head {
            last_lsn: r.lsn,
            chain: r.chain,
        }))
    }

    fn iter_from(&self, from: Lsn) -> Box<dyn Iterator<Item = Result<Record>> + '_> {
        let end = self.records.read().len() as u64;
        let start = from.0.max(1);
        Box::new((start..=end).map(move |n| self.read(Lsn(n))))
    }

    fn read(&self, lsn: Lsn) -> Result<Record> {
        let recs = self.records.read();
        let last = Lsn(recs.len() as u64);
        match lsn.0.checked_sub(1).and_then(|i| recs.get(i as usize)) {
            Some(r) => Ok(r.clone()),
            None => Err(QueryError::Engine(EngineError::LsnOutOfRange { lsn, last })),
        }
    }
}

/// An in-memory blob store keyed by blake3, for tests and imports.
#[derive(Debug, Default)]
pub struct MemBlobs {
    blobs: RwLock<HashMap<BlobHash, Vec<u8>>>,
}

impl MemBlobs {
    /// An empty store.
    pub fn new() -> MemBlobs {
        MemBlobs::default()
    }

    /// Stores `bytes`; returns their hash.
    pub fn put(&self, bytes: &[u8]) -> BlobHash {
        let h = BlobHash::of(bytes);
        self.blobs
            .write()
            .entry(h)
            .or_insert_with(|| bytes.to_vec());
        h
    }
}

impl BlobSource for MemBlobs {
    fn len(&self, hash: &BlobHash) -> Option<u64> {
        self.blobs.read().get(hash).map(|b| b.len() as u64)
    }

    fn get(&self, hash: &BlobHash) -> Result<Vec<u8>> {
        self.blobs
            .read()
            .get(hash)
            .cloned()
            .ok_or(QueryError::Engine(EngineError::BlobNotFound {
                hash: *hash,
            }))
    }
}

/// In-memory manifests: root hash -> tree, for tests and for embedders that
/// build trees themselves.
#[derive(Debug, Default)]
pub struct MemManifests {
    trees: RwLock<HashMap<BlobHash, Tree>>,
}

impl MemManifests {
    /// No manifests.
    pub fn new() -> MemManifests {
        MemManifests::default()
    }

    /// Stores `tree`; returns a root hash naming it (blake3 of its listing).
    pub fn put(&self, tree: Tree) -> BlobHash {
        let mut listing = Vec::new();
        for (p, e) in &tree {
            listing.extend_from_slice(p.as_bytes());
            listing.push(0);
            listing.extend_from_slice(&e.blob.0);
            listing.extend_from_slice(&e.mode.to_le_bytes());
            listing.push(matches!(e.kind, EntryKind::Symlink) as u8);
        }
        let h = BlobHash::of(&listing);
        self.trees.write().insert(h, tree);
        h
    }
}

impl ManifestSource for MemManifests {
    fn tree(&self, root: &BlobHash) -> Result<Tree> {
        self.trees
            .read()
            .get(root)
            .cloned()
            .ok_or(QueryError::Engine(EngineError::BlobNotFound {
                hash: *root,
            }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use cairn_codec::EventKind;

    #[test]
    fn mem_log_reads_and_ranges() {
        let log = MemLog::new();
        assert_eq!(log.head().unwrap(), Head::default());
        for i in 0..3 {
            let lsn = log
                .append(Event::new(EventKind::Prompt, "s").with_text(format!("{i}")))
                .unwrap();
            assert_eq!(lsn, Lsn(i + 1));
        }
        assert_eq!(log.head().unwrap().last_lsn, Lsn(3));
        let lsns: Vec<_> = log.iter_from(Lsn(2)).map(|r| r.unwrap().lsn).collect();
        assert_eq!(lsns, vec![Lsn(2), Lsn(3)]);
        assert!(log.read(Lsn(0)).is_err());
        let e = log.read(Lsn(4)).unwrap_err().to_string();
        assert!(e.contains("LSN 4"), "{e}");
        // Chain values differ record to record.
        assert_ne!(
            log.read(Lsn(1)).unwrap().chain,
            log.read(Lsn(2)).unwrap().chain
        );
    }

    #[test]
    fn wait_for_times_out_with_the_head() {
        let log = MemLog::new();
        log.append(Event::new(EventKind::Prompt, "s")).unwrap();
        let h = log.wait_for(Lsn(1), Duration::from_millis(1)).unwrap();
        assert_eq!(h.last_lsn, Lsn(1));
        let h = log.wait_for(Lsn(0), Duration::from_secs(5)).unwrap();
        assert_eq!(h.last_lsn, Lsn(1));
    }

    #[test]
    fn mem_blobs_and_manifests() {
        let b = MemBlobs::new();
        let h = b.put(b"hi");
        assert_eq!(b.get(&h).unwrap(), b"hi");
        assert!(b.get(&BlobHash::ZERO).is_err());
        let m = MemManifests::new();
        let mut t = Tree::new();
        t.insert("a".into(), TreeEntry::file(h));
        let root = m.put(t.clone());
        assert_eq!(m.tree(&root).unwrap(), t);
        assert_eq!(m.entry(&root, "a").unwrap(), Some(TreeEntry::file(h)));
        assert_eq!(m.entry(&root, "b").unwrap(), None);
    }
}
