//! Reading an archive in place: an [`ArchiveVfs`] presents the store
//! files a manifest lists as a read-only file system, so a
//! [`crate::Store`] opened read-only on it answers queries without the
//! archive being downloaded whole.
//!
//! A file is its pieces. [`VfsFile::read_at`] fetches only the pieces
//! that cover the range asked for: a piece of at most
//! [`RANGE_CHUNK_BYTES`] whole, a larger one by ranged reads of that size,
//! or of [`RANGE_PAGE_BYTES`] for a read of at most that much.
//! [`Vfs::map`] (the engine maps the blob index, and a sealed segment
//! only for work that reads it all: verify, an index rebuild) fetches
//! every piece of the file whole; [`Vfs::maps_cheaply`] says so, and the
//! engine reads a sealed segment's frames by `read_at` at the offsets of
//! its sparse index file (`log/<first LSN>.idx`, shipped with it).
//! What is fetched goes to a
//! [`PieceCache`] on the local disk, bounded in size.
//!
//! A reader that knows what it will read says so first
//! ([`VfsFile::will_read`]: the log's sorted read of a posting list
//! gives the sparse-index windows of the LSNs ahead in a segment, up to
//! [`cairn_engine::log::MAX_PLANNED_READ_BYTES`] of them). The plan is
//! split by piece: a piece of at most [`RANGE_CHUNK_BYTES`] is fetched
//! whole (as an unplanned read takes it), the windows of a larger one
//! merged where at most [`PLAN_GAP_BYTES`] apart (up to
//! [`MAX_PLANNED_RANGE_BYTES`] a range); ranges already cached are taken
//! from the cache, the rest fetched together, up to
//! [`super::MAX_RANGES_IN_FLIGHT`] at once and [`MAX_PLAN_BYTES`] in
//! all, and cached (a range with its CRC, as a chunk). The reads that
//! follow are served from what the plan fetched, kept until the next
//! plan whatever the cache's bound. The reader keeps each read inside a
//! window; a read outside every planned range is read as above. So a
//! `history` of a path with a record on every 16 KiB page fetches its
//! windows (about one 4 KiB sparse-index interval each), where page then
//! chunk reads fetched every chunk; what a plan fetches is checked as
//! any range is (below). A manifest of
//! version 2 lists the sealed segments' query index files as well: a
//! filtered query reads those (their front in one read, then only the
//! postings blocks it needs, checked as on a local store) and then only
//! the segments holding its records. The index files' key summary
//! (`index/segments/summary.qsm`, rewritten in place by queries) is not
//! shipped: in place, every index file is probed, never skipped.
//!
//! A manifest of version 3 carries the unsealed tail's state
//! (`tail_state`): it is shown as the log's `tail.state`, held in memory,
//! and the log reader takes the tail's end and sparse index from it, as
//! from a local clean close, when it matches the tail (length, last
//! frame's LSN and chain): the tail is then read by range like a sealed
//! segment, not whole at open. A state that does not match is not used
//! (the tail is read whole); one whose entries point at the wrong frames
//! gives an error naming the segment when such a frame is read, never a
//! record.
//!
//! A manifest of version 4 may carry a query index file of a prefix of
//! the tail (`tail_index`): it is shown at its path, as the store's own
//! tail index file is, and the query reader trusts it only when it
//! matches the tail (its first LSN the tail's, its last LSN inside the
//! shipped tail, its chain value the record's there); a filtered query
//! then indexes in memory only the tail's records after it, read by
//! range, instead of reading the tail whole. A file that does not match
//! is not used (the tail is indexed whole, as before).
//!
//! What checks the bytes:
//! - a whole piece is checked against its name (blake3) and length before
//!   it is used, from the archive and from the cache alike; one that does
//!   not match is an error naming the object ([`ReplicateError::Damaged`]
//!   inside the I/O error), never data;
//! - a range of a larger piece cannot be checked by the piece's hash
//!   (that needs all of it). The reader that uses it checks it: every log
//!   frame carries a CRC and the chain value that links it to the one
//!   before, and a segment's footer the last; every blob pack entry a CRC,
//!   and a blob read is checked against its blake3 name. Altered bytes
//!   there are reported as damage to that segment or pack, as on a local
//!   store. A cached range carries a CRC of its own against damage to the
//!   cache file.
//!
//! Nothing is written to the archive: every call that would write fails
//! with an error saying the archive is read-only and how to get a store
//! that can be written (`cairn restore`).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_engine::vfs::{LockGuard, Mapped, OpenMode, Vfs, VfsFile};

use super::archive::Archive;
use super::cache::{
    default_cache_dir, Entry, PieceCache, DEFAULT_CACHE_BYTES, RANGE_CHUNK_BYTES, RANGE_PAGE_BYTES,
};
use super::manifest::{FileEntry, Manifest};
use super::{newest_manifest, object_name, ReplicateError};

/// The folders every store has, listed (perhaps empty) even when the
/// manifest names no file in them.
const STORE_DIRS: [&str; 2] = ["log", "blobs"];

/// Planned ranges of a piece at most this far apart are fetched as one
/// range: the bytes between cost less than a request of their own (over
/// S3 a request's round trip is worth far more bytes than this at one
/// connection's throughput), so windows of LSNs a sparse-index interval
/// or less apart are one request. Not more: the windows of a path's
/// records one on every 16 KiB page of the log (a window is about one
/// 4 KiB interval and the frame) must stay apart, or the plan fetches
/// the whole log as the unplanned reads did.
pub const PLAN_GAP_BYTES: u64 = cairn_engine::log::SPARSE_INDEX_INTERVAL_BYTES;

/// A range coalesced from planned ranges grows to at most this (ranges
/// are not split: one window larger than this is fetched whole): a dense
/// plan is still fetched as several requests in flight at once, and each
/// is far under the cache's memory bound.
pub const MAX_PLANNED_RANGE_BYTES: u64 = 1 << 20;

/// The bytes one read plan fetches ahead and holds until the next plan,
/// at most: the engine plans about
/// [`cairn_engine::log::MAX_PLANNED_READ_BYTES`] of windows at a time,
/// and coalescing adds the gaps between them (at most [`PLAN_GAP_BYTES`]
/// beside a window of one 4 KiB sparse-index interval or more: five
/// times the windows). Ranges past it are not fetched ahead; their reads
/// fetch them as unplanned reads do.
pub const MAX_PLAN_BYTES: u64 = 24 << 20;

/// How to read an archive in place: where the cache is and how large it
/// may grow.
#[derive(Clone, Debug)]
pub struct InPlaceOptions {
    cache_dir: Option<PathBuf>,
    cache_bytes: u64,
}

impl Default for InPlaceOptions {
    fn default() -> Self {
        InPlaceOptions {
            cache_dir: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

impl InPlaceOptions {
    /// The cache directory. Default: `$XDG_CACHE_HOME/cairn`, else
    /// `~/.cache/cairn` (see [`default_cache_dir`]).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The bound on the cache's bytes on disk. Default
    /// [`DEFAULT_CACHE_BYTES`]. A bound smaller than a piece still answers
    /// right: the piece is fetched, used, and not kept.
    pub fn cache_bytes(mut self, n: u64) -> Self {
        self.cache_bytes = n;
        self
    }
}

/// One file of the store as the manifest lists it.
#[derive(Debug)]
struct ArchivedFile {
    entry: FileEntry,
    /// Where each piece starts in the file.
    starts: Vec<u64>,
    /// The file's bytes, when the manifest carries them itself (the log's
    /// `tail.state`, from its `tail_state`): nothing is fetched for it,
    /// and `entry` lists no pieces.
    inline: Option<Arc<[u8]>>,
}

impl ArchivedFile {
    /// A file the manifest lists as the pieces of `entry`.
    fn in_pieces(entry: &FileEntry) -> ArchivedFile {
        let mut at = 0;
        let starts = entry
            .pieces
            .iter()
            .map(|p| {
                let s = at;
                at += p.len;
                s
            })
            .collect();
        ArchivedFile {
            entry: entry.clone(),
            starts,
            inline: None,
        }
    }
}

struct Inner {
    archive: Archive,
    cache: PieceCache,
    root: PathBuf,
    manifest: String,
    /// The workspace the manifest names: paths in queries are read as
    /// relative to it, as on the original store.
    workspace: Option<PathBuf>,
    files: BTreeMap<PathBuf, Arc<ArchivedFile>>,
    /// The chunks (piece hash, chunk number) a page was fetched from by
    /// this reader: a second small read in such a chunk fetches the whole
    /// chunk, so reading many small things in a row (a pack's entries,
    /// a segment's frames) costs a request per chunk, not per page.
    paged: parking_lot::Mutex<std::collections::HashSet<(String, u64)>>,
    /// What the last read plan ([`VfsFile::will_read`]) fetched: piece
    /// hash, then where each range starts in the piece and its bytes. A
    /// read inside one is served from it whatever the cache's bound; the
    /// next plan replaces it.
    plan: parking_lot::Mutex<Planned>,
}

/// Whether `bytes`, fetched as the whole piece `p`, are it: its length
/// and the blake3 its name is; else what is wrong.
fn check_piece(p: &super::Piece, bytes: &[u8]) -> Result<(), String> {
    if bytes.len() as u64 != p.len {
        return Err(format!(
            "{} bytes, the manifest says {}",
            bytes.len(),
            p.len
        ));
    }
    let got = blake3::hash(bytes).to_hex();
    if got.as_str() != p.hash {
        return Err(format!("its contents hash to {got}, not to its name"));
    }
    Ok(())
}

/// Ranges fetched by a read plan: piece hash, then start in the piece and
/// bytes.
type Planned = std::collections::HashMap<String, BTreeMap<u64, Arc<[u8]>>>;

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveVfs")
            .field("archive", &self.archive.url())
            .field("manifest", &self.manifest)
            .field("files", &self.files.len())
            .finish()
    }
}

/// The store files of one manifest of an archive, as a read-only
/// [`Vfs`] rooted at [`ArchiveVfs::root`] (see the module docs).
///
/// ```no_run
/// # fn main() -> Result<(), cairn::replicate::ReplicateError> {
/// use cairn::replicate::{Archive, ArchiveVfs, InPlaceOptions};
/// let vfs = ArchiveVfs::open(Archive::open("s3://backups/agents/laptop")?, &InPlaceOptions::default())?;
/// let store = vfs.open_store()?;
/// println!("head LSN {}", store.head().last_lsn.0);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ArchiveVfs {
    inner: Arc<Inner>,
}

impl ArchiveVfs {
    /// The newest manifest of `archive` (of its newest generation) as a
    /// file system, with its cache opened as `options` say.
    pub fn open(archive: Archive, options: &InPlaceOptions) -> Result<ArchiveVfs, ReplicateError> {
        let Some((name, manifest)) = newest_manifest(&archive, None)? else {
            return Err(ReplicateError::Empty {
                url: archive.url().to_string(),
            });
        };
        let dir = match &options.cache_dir {
            Some(d) => d.clone(),
            None => default_cache_dir().ok_or_else(|| {
                ReplicateError::Config(
                    "no cache directory for reading an archive in place: set XDG_CACHE_HOME or HOME (or CAIRN_CACHE_DIR for the CLI)".into(),
                )
            })?,
        };
        let cache = PieceCache::open(&dir, options.cache_bytes)?;
        Ok(ArchiveVfs::from_manifest(archive, cache, name, &manifest))
    }

    fn from_manifest(archive: Archive, cache: PieceCache, name: String, m: &Manifest) -> Self {
        let root = PathBuf::from(archive.url().trim_end_matches('/'));
        let files = m
            .files
            .iter()
            .map(|f| (root.join(&f.path), Arc::new(ArchivedFile::in_pieces(f))))
            .collect::<BTreeMap<_, _>>();
        // The tail's state, shown as the file a clean close leaves: the
        // log reader trusts it only when it describes the tail exactly.
        let mut files = files;
        if let Some(bytes) = m.tail_state_bytes() {
            let path = format!("log/{}", cairn_engine::log::TAIL_STATE_FILE);
            let file = ArchivedFile {
                entry: FileEntry {
                    path: path.clone(),
                    len: bytes.len() as u64,
                    pieces: Vec::new(),
                },
                starts: Vec::new(),
                inline: Some(bytes.into()),
            };
            files.insert(root.join(path), Arc::new(file));
        }
        // The tail's query index file, shown where the store keeps its
        // own; a store file of that name (none: the tail is unsealed)
        // would win.
        if let Some(t) = &m.tail_index {
            files
                .entry(root.join(&t.path))
                .or_insert(Arc::new(ArchivedFile::in_pieces(t)));
        }
        ArchiveVfs {
            inner: Arc::new(Inner {
                archive,
                cache,
                root,
                manifest: name,
                workspace: m.workspace.as_ref().map(PathBuf::from),
                files,
                paged: Default::default(),
                plan: Default::default(),
            }),
        }
    }

    /// The store directory as this file system names it: the archive's URL.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The manifest whose files this presents.
    pub fn manifest(&self) -> &str {
        &self.inner.manifest
    }

    /// The archive read (its counters say how much was fetched).
    pub fn archive(&self) -> &Archive {
        &self.inner.archive
    }

    /// The cache of fetched pieces.
    pub fn cache(&self) -> &PieceCache {
        &self.inner.cache
    }

    /// Opens the archived store read-only on this file system: queries,
    /// exports and verify work; anything that writes fails.
    pub fn open_store(&self) -> Result<crate::Store, ReplicateError> {
        let mut b = crate::Store::builder()
            .store_dir(self.root())
            .vfs(Arc::new(self.clone()))
            .read_only();
        if let Some(w) = &self.inner.workspace {
            b = b.workspace(w);
        }
        Ok(b.open()?)
    }
}

/// Opens the store archived at `url` read-only, in place (see
/// [`ArchiveVfs`]).
pub fn open_read_only(url: &str, options: &InPlaceOptions) -> Result<crate::Store, ReplicateError> {
    if let Some(dir) = url.strip_prefix("file://") {
        // Opening a file:// archive creates its folder: a reader must not.
        if !Path::new(dir).is_dir() {
            return Err(ReplicateError::Empty {
                url: url.to_string(),
            });
        }
    }
    ArchiveVfs::open(Archive::open(url)?, options)?.open_store()
}

/// The error every writing call gets.
fn read_only(inner: &Inner, what: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::ReadOnlyFilesystem,
        format!(
            "cannot {what} {}: an archive is read-only; restore it first: cairn restore {} DIR",
            path.display(),
            inner.archive.url()
        ),
    )
}

impl Inner {
    fn file(&self, path: &Path) -> io::Result<&Arc<ArchivedFile>> {
        self.files.get(path).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is not in the archive's manifest {}",
                    path.display(),
                    self.manifest
                ),
            )
        })
    }

    fn is_dir(&self, path: &Path) -> bool {
        // A folder holds a file at any depth (`index/` holds
        // `index/segments/...`); the log's and the blob store's folders
        // are there even empty (a store of records alone has no blobs).
        path == self.root
            || STORE_DIRS.iter().any(|d| path == self.root.join(d))
            || self.files.keys().any(|f| f != path && f.starts_with(path))
    }

    /// The whole piece `i` of `f`, checked against its name.
    fn whole_piece(&self, f: &ArchivedFile, i: usize) -> io::Result<Arc<[u8]>> {
        let p = &f.entry.pieces[i];
        let entry = Entry::Whole(p.hash.clone());
        if let Some(b) = self.cache.get(&entry) {
            return Ok(b);
        }
        let obj = object_name(&p.hash);
        let what = || {
            format!(
                "piece {} of {} of {}",
                i + 1,
                f.entry.pieces.len(),
                f.entry.path
            )
        };
        let bytes = self
            .archive
            .get(&obj)
            .map_err(to_io)?
            .ok_or_else(|| damaged(&obj, format!("missing ({})", what())))?;
        if let Err(why) = check_piece(p, &bytes) {
            return Err(damaged(&obj, format!("{why} ({})", what())));
        }
        let bytes: Arc<[u8]> = bytes.into();
        self.cache.put(entry, bytes.clone());
        Ok(bytes)
    }

    /// Bytes of piece `i` of `f` that hold offset `at` of the piece, and
    /// where they start in it: the whole piece when it is cached or small,
    /// else the chunk around `at` when it is cached, or `want` (the bytes
    /// asked for) is more than [`RANGE_PAGE_BYTES`], or a page of that
    /// chunk was fetched before; else the page around `at`.
    fn bytes_at(
        &self,
        f: &ArchivedFile,
        i: usize,
        at: u64,
        want: usize,
    ) -> io::Result<(Arc<[u8]>, u64)> {
        let p = &f.entry.pieces[i];
        if p.len <= RANGE_CHUNK_BYTES {
            return Ok((self.whole_piece(f, i)?, 0));
        }
        if let Some(b) = self.cache.get(&Entry::Whole(p.hash.clone())) {
            return Ok((b, 0));
        }
        let n = at / RANGE_CHUNK_BYTES;
        let chunk = Entry::Chunk(p.hash.clone(), n);
        if let Some(b) = self.cache.get(&chunk) {
            return Ok((b, n * RANGE_CHUNK_BYTES));
        }
        let first_page_of_chunk =
            want as u64 <= RANGE_PAGE_BYTES && self.paged.lock().insert((p.hash.clone(), n));
        let (entry, start, size) = if first_page_of_chunk {
            let n = at / RANGE_PAGE_BYTES;
            let page = Entry::Page(p.hash.clone(), n);
            if let Some(b) = self.cache.get(&page) {
                return Ok((b, n * RANGE_PAGE_BYTES));
            }
            (page, n * RANGE_PAGE_BYTES, RANGE_PAGE_BYTES)
        } else {
            (chunk, n * RANGE_CHUNK_BYTES, RANGE_CHUNK_BYTES)
        };
        let end = (start + size).min(p.len);
        let obj = object_name(&p.hash);
        let bytes = self
            .archive
            .get_range(&obj, start..end)
            .map_err(to_io)?
            .ok_or_else(|| {
                damaged(
                    &obj,
                    format!(
                        "missing (piece {} of {} of {})",
                        i + 1,
                        f.entry.pieces.len(),
                        f.entry.path
                    ),
                )
            })?;
        let bytes: Arc<[u8]> = bytes.into();
        self.cache.put(entry, bytes.clone());
        Ok((bytes, start))
    }

    /// The bytes the last plan fetched that hold offset `at` of the
    /// piece `hash`, and where they start in it.
    fn planned(&self, hash: &str, at: u64) -> Option<(Arc<[u8]>, u64)> {
        let plan = self.plan.lock();
        let (start, bytes) = plan.get(hash)?.range(..=at).next_back()?;
        (at < start + bytes.len() as u64).then(|| (bytes.clone(), *start))
    }

    /// A read plan for `f` (see [`VfsFile::will_read`]): the ranges
    /// `ranges` of the file, split by piece; a piece of at most
    /// [`RANGE_CHUNK_BYTES`] whole (as an unplanned read takes it),
    /// ranges of a larger one merged where at most [`PLAN_GAP_BYTES`]
    /// apart (up to [`MAX_PLANNED_RANGE_BYTES`]), up to
    /// [`MAX_PLAN_BYTES`] in all. What the cache holds is taken from it;
    /// the rest is fetched, [`super::archive::MAX_RANGES_IN_FLIGHT`] ranges
    /// at a time, and cached. A whole piece is checked against its name;
    /// one that does not match, or a range that could not be fetched, is
    /// left out (the read of it fetches it again and reports what is
    /// wrong). A range's bytes are checked by the reader, as any range's
    /// are (the module docs).
    fn plan_reads(&self, f: &ArchivedFile, ranges: &[(u64, u64)]) -> bool {
        if f.inline.is_some() {
            return false;
        }
        let pieces = &f.entry.pieces;
        // (piece, start, end) in the piece.
        let mut wanted: Vec<(usize, u64, u64)> = Vec::new();
        for &(s, e) in ranges {
            let e = e.min(f.entry.len);
            if s >= e {
                continue;
            }
            let mut i = f.starts.partition_point(|x| *x <= s) - 1;
            let mut at = s;
            while at < e && i < pieces.len() {
                let (from, to) = (f.starts[i], f.starts[i] + pieces[i].len);
                let upto = e.min(to);
                if pieces[i].len <= RANGE_CHUNK_BYTES {
                    wanted.push((i, 0, pieces[i].len));
                } else {
                    wanted.push((i, at - from, upto - from));
                }
                at = upto;
                i += 1;
            }
        }
        wanted.sort_unstable();
        let mut merged: Vec<(usize, u64, u64)> = Vec::with_capacity(wanted.len());
        for (i, s, e) in wanted {
            match merged.last_mut() {
                Some(m)
                    if m.0 == i
                        && s <= m.2 + PLAN_GAP_BYTES
                        && (e.max(m.2) - m.1 <= MAX_PLANNED_RANGE_BYTES || e <= m.2) =>
                {
                    m.2 = m.2.max(e)
                }
                _ => merged.push((i, s, e)),
            }
        }
        let mut plan = Planned::new();
        let mut fetch: Vec<(String, std::ops::Range<u64>)> = Vec::new();
        let mut fetching: Vec<(usize, u64, u64)> = Vec::new();
        let mut total = 0u64;
        for (i, s, e) in merged {
            let p = &pieces[i];
            let whole = Entry::Whole(p.hash.clone());
            let entry = match p.len <= RANGE_CHUNK_BYTES {
                true => whole.clone(),
                false => Entry::Range(p.hash.clone(), s, e),
            };
            let cached = match self.cache.get(&whole) {
                Some(b) => Some((b, 0)),
                None => self.cache.get(&entry).map(|b| (b, s)),
            };
            if let Some((b, at)) = cached {
                plan.entry(p.hash.clone()).or_default().insert(at, b);
                continue;
            }
            if total + (e - s) > MAX_PLAN_BYTES {
                continue;
            }
            total += e - s;
            fetch.push((object_name(&p.hash), s..e));
            fetching.push((i, s, e));
        }
        self.archive.get_ranges(&fetch, |k, got| {
            let (i, s, e) = fetching[k];
            let p = &pieces[i];
            let Ok(Some(bytes)) = got else { return };
            if p.len <= RANGE_CHUNK_BYTES {
                // The whole piece: it must be what its name says.
                if check_piece(p, &bytes).is_err() {
                    return;
                }
                let bytes: Arc<[u8]> = bytes.into();
                self.cache.put(Entry::Whole(p.hash.clone()), bytes.clone());
                plan.entry(p.hash.clone()).or_default().insert(0, bytes);
            } else {
                let bytes: Arc<[u8]> = bytes.into();
                self.cache
                    .put(Entry::Range(p.hash.clone(), s, e), bytes.clone());
                plan.entry(p.hash.clone()).or_default().insert(s, bytes);
            }
        });
        *self.plan.lock() = plan;
        true
    }

    fn read_at(&self, f: &ArchivedFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= f.entry.len || buf.is_empty() {
            return Ok(0);
        }
        if let Some(b) = &f.inline {
            let from = offset as usize;
            let n = buf.len().min(b.len() - from);
            buf[..n].copy_from_slice(&b[from..from + n]);
            return Ok(n);
        }
        // The last piece starting at or before `offset`.
        let i = f.starts.partition_point(|s| *s <= offset) - 1;
        let in_piece = offset - f.starts[i];
        let planned = self.planned(&f.entry.pieces[i].hash, in_piece);
        let (bytes, start) = match planned {
            Some(b) => b,
            None => self.bytes_at(f, i, in_piece, buf.len())?,
        };
        let from = (in_piece - start) as usize;
        let n = buf.len().min(bytes.len() - from);
        buf[..n].copy_from_slice(&bytes[from..from + n]);
        Ok(n)
    }
}

fn damaged(object: &str, detail: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        ReplicateError::Damaged {
            object: object.to_string(),
            detail,
        },
    )
}

fn to_io(e: ReplicateError) -> io::Error {
    let kind = match e {
        ReplicateError::Damaged { .. } => io::ErrorKind::InvalidData,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// An open file of an [`ArchiveVfs`].
#[derive(Debug)]
struct ArchiveFile {
    inner: Arc<Inner>,
    file: Arc<ArchivedFile>,
    path: PathBuf,
}

impl VfsFile for ArchiveFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(&self.file, buf, offset)
    }

    /// Fetches the ranges together and serves the reads inside them from
    /// what it fetched (see [`Inner::plan_reads`]); `true` unless the
    /// file is held in memory (nothing to fetch).
    fn will_read(&self, ranges: &[(u64, u64)]) -> bool {
        self.inner.plan_reads(&self.file, ranges)
    }

    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(read_only(&self.inner, "write", &self.path))
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.entry.len)
    }

    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(read_only(&self.inner, "truncate", &self.path))
    }

    fn sync_data(&self) -> io::Result<()> {
        Err(read_only(&self.inner, "sync", &self.path))
    }
}

impl Vfs for ArchiveVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        if mode != OpenMode::Read {
            return Err(read_only(&self.inner, "open for writing", path));
        }
        let file = self.inner.file(path)?.clone();
        Ok(Arc::new(ArchiveFile {
            inner: self.inner.clone(),
            file,
            path: path.to_path_buf(),
        }))
    }

    fn map(&self, path: &Path) -> io::Result<Mapped> {
        let f = self.inner.file(path)?;
        if let Some(b) = &f.inline {
            return Ok(Mapped::Bytes(b.clone()));
        }
        // Sized by the bytes fetched (each piece checked against its
        // name and length), never by the manifest's word alone: a
        // manifest is input from outside.
        let pieces = (0..f.entry.pieces.len())
            .map(|i| self.inner.whole_piece(f, i))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Mapped::Bytes(pieces.concat().into()))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        if !self.inner.is_dir(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not a folder of the archived store", dir.display()),
            ));
        }
        let mut names: Vec<String> = self
            .inner
            .files
            .keys()
            .filter_map(|p| {
                let rel = p.strip_prefix(dir).ok()?;
                let first = rel.components().next()?;
                Some(first.as_os_str().to_string_lossy().to_string())
            })
            .collect();
        names.dedup();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        Err(read_only(&self.inner, "create", dir))
    }

    fn rename(&self, from: &Path, _: &Path) -> io::Result<()> {
        Err(read_only(&self.inner, "rename", from))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(read_only(&self.inner, "remove", path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        Err(read_only(&self.inner, "sync", dir))
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.files.contains_key(path) || self.inner.is_dir(path)
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<LockGuard> {
        Err(read_only(&self.inner, "lock", path))
    }

    /// A map fetches every piece of the file: a reader reads a sealed
    /// segment's frames by range instead.
    fn maps_cheaply(&self) -> bool {
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::replicate::manifest::Piece;

    /// A piece of `len` bytes (larger than a chunk) in a file:// archive,
    /// presented as the file `blobs/pack-1.pack`: the file system (its
    /// cache bounded to one byte: nothing kept on disk), the path, and
    /// the bytes.
    fn one_large_piece(dir: &Path, len: usize) -> (ArchiveVfs, PathBuf, Vec<u8>) {
        one_large_piece_cached(dir, len, 1)
    }

    /// [`one_large_piece`] with its cache in `dir/cache` bounded to
    /// `cache_bytes`.
    fn one_large_piece_cached(
        dir: &Path,
        len: usize,
        cache_bytes: u64,
    ) -> (ArchiveVfs, PathBuf, Vec<u8>) {
        let bytes: Vec<u8> = (0..len as u64)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let hash = blake3::hash(&bytes).to_hex().to_string();
        let archive = Archive::open(&format!("file://{}", dir.join("a").display())).unwrap();
        archive.put(&object_name(&hash), bytes.clone()).unwrap();
        let m = Manifest {
            version: super::super::manifest::MANIFEST_VERSION,
            generation: "g".into(),
            head_lsn: 0,
            head_chain: "0".repeat(64),
            created_ms: 0,
            store: "s".into(),
            workspace: None,
            sessions: None,
            files: vec![FileEntry {
                path: "blobs/pack-1.pack".into(),
                len: len as u64,
                pieces: vec![Piece {
                    hash,
                    len: len as u64,
                }],
            }],
            tail_state: None,
            tail_index: None,
        };
        let cache = PieceCache::open(&dir.join("cache"), cache_bytes).unwrap();
        let vfs = ArchiveVfs::from_manifest(archive, cache, "m".into(), &m);
        let path = vfs.root().join("blobs/pack-1.pack");
        (vfs, path, bytes)
    }

    /// A small read of a large piece fetches a page; a second small read
    /// in the same chunk fetches the chunk, so reading many small things
    /// in a row costs a request per chunk, not per page; a large read
    /// fetches a chunk. What is read is the file's bytes.
    #[test]
    fn small_reads_fetch_a_page_then_the_chunk() {
        let d = tempfile::tempdir().unwrap();
        let len = 4 * RANGE_CHUNK_BYTES as usize;
        let (vfs, path, bytes) = one_large_piece(d.path(), len);
        let f = vfs.open(&path, OpenMode::Read).unwrap();
        let (gets, read) = (vfs.archive().gets(), vfs.archive().bytes_read());
        let mut b = vec![0u8; 64];
        f.read_exact_at(&mut b, 100).unwrap();
        assert_eq!(b, bytes[100..164]);
        assert_eq!(vfs.archive().gets() - gets, 1);
        assert_eq!(vfs.archive().bytes_read() - read, RANGE_PAGE_BYTES);
        // Small reads one after the other through the rest of the chunk
        // and into the next: one more request for each chunk.
        let mut off = 164u64;
        while off < RANGE_CHUNK_BYTES + 10_000 {
            let mut b = vec![0u8; 4000];
            f.read_exact_at(&mut b, off).unwrap();
            assert_eq!(b, bytes[off as usize..off as usize + 4000]);
            off += 4000;
        }
        assert_eq!(vfs.archive().gets() - gets, 4, "page, chunk, page, chunk");
        // A large read: chunks.
        let mut b = vec![0u8; 100_000];
        let at = 3 * RANGE_CHUNK_BYTES;
        f.read_exact_at(&mut b, at).unwrap();
        assert_eq!(b, bytes[at as usize..at as usize + 100_000]);
        assert_eq!(vfs.archive().gets() - gets, 5);
    }

    /// A read plan is fetched once, its ranges together (all in flight at
    /// once) and merged where close; the reads inside it then fetch
    /// nothing more, the bytes between two merged ranges included; a read
    /// outside it is fetched as before. A later reader with the same
    /// cache finds the planned ranges there and fetches nothing.
    #[test]
    fn a_read_plan_is_fetched_at_once_and_serves_the_reads_after_it() {
        let d = tempfile::tempdir().unwrap();
        let len = 4 * RANGE_CHUNK_BYTES as usize;
        let (vfs, path, bytes) = one_large_piece_cached(d.path(), len, 1 << 30);
        let f = vfs.open(&path, OpenMode::Read).unwrap();
        let near = 5_000 + PLAN_GAP_BYTES;
        let plan = [
            (100, 5_000),
            // Close enough to the first to be fetched with it.
            (near, near + 4_000),
            (300_000, 310_000),
            (600_000, 700_000),
            (900_000, 900_100),
        ];
        assert!(f.will_read(&plan));
        let a = vfs.archive();
        assert_eq!(a.gets(), 4, "the first two ranges are fetched as one");
        // All handed to the archive at once: how many overlap depends on
        // how fast each returns (a local file's may before the next starts).
        assert_eq!(a.largest_ranges_batch(), 4, "all fetched together");
        let merged = (near + 4_000 - 100) + 10_000 + 100_000 + 100;
        assert_eq!(a.bytes_read(), merged);
        // Reads inside the plan, of every size and the gap between the
        // first two ranges: nothing more is fetched.
        for (s, e) in [
            (100, 5_000),
            (4_000, near + 10),
            (near, near + 4_000),
            (300_000, 300_052),
            (305_000, 310_000),
            (600_000, 700_000),
            (650_001, 650_002),
            (900_000, 900_100),
        ] {
            let mut b = vec![0u8; (e - s) as usize];
            f.read_exact_at(&mut b, s).unwrap();
            assert_eq!(b, bytes[s as usize..e as usize], "{s}..{e}");
        }
        assert_eq!(a.gets(), 4, "the reads inside the plan fetched nothing");
        // A read outside the plan: fetched (a page) as without one.
        let mut b = vec![0u8; 64];
        f.read_exact_at(&mut b, 400_000).unwrap();
        assert_eq!(b, bytes[400_000..400_064]);
        assert_eq!(a.gets(), 5);
        assert_eq!(a.bytes_read(), merged + RANGE_PAGE_BYTES);

        // Another reader on the same cache: the plan is found there.
        let (again, path, _) = one_large_piece_cached(d.path(), len, 1 << 30);
        let f = again.open(&path, OpenMode::Read).unwrap();
        assert!(f.will_read(&plan));
        let mut b = vec![0u8; 10_000];
        f.read_exact_at(&mut b, 300_000).unwrap();
        assert_eq!(b, bytes[300_000..310_000]);
        assert_eq!(again.archive().gets(), 0, "the plan came from the cache");
    }
}
