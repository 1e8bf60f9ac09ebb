//! A local cache of what reading an archive in place fetched: whole pieces
//! (checked against their blake3 name every time they are used) and
//! ranges of large pieces (chunks, pages, and the ranges a read plan
//! fetched, each checked against a CRC written beside it, which catches
//! damage to the cache file; whether the archive served the right bytes
//! is checked by the reader that uses them, see [`super::vfs`]).
//!
//! ```text
//! <cache dir>/pieces/<blake3 hex>              a whole piece, its bytes as they are
//! <cache dir>/pieces/<blake3 hex>.<n>          chunk n of a larger piece: bytes, then CRC32 (LE, seeded)
//! <cache dir>/pieces/<blake3 hex>.p<n>         page n of a larger piece: the same
//! <cache dir>/pieces/<blake3 hex>.r<s>-<e>     bytes s..e of a larger piece (a planned read): the same
//! <cache dir>/pieces/.tmp-<pid>-<seq>          being written; renamed into place when whole
//! ```
//!
//! Entries are named by content, so one cache serves every archive. The
//! cache holds at most its byte bound: least recently used entries are
//! removed first (a use sets the file's modification time, so the order
//! survives the process and is shared with other processes using the
//! same cache). A handful of recently used entries are also kept in
//! memory, so the many small reads a segment or pack walk makes do not
//! reread and recheck a file each time.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::ReplicateError;

/// The default bound on the cache on disk: enough for the log and the
/// packs a long history's queries touch, small beside a disk.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// The size of one ranged read of a piece larger than this, and of the
/// chunk cached from it: a blob or a few frames cost one request of at
/// most this, while a 16 MiB piece is not fetched whole for them.
pub const RANGE_CHUNK_BYTES: u64 = 256 << 10;

/// The size of one ranged read of a piece for a small read (at most
/// this much asked, nothing around it cached): a segment's header or
/// footer, or the frames of one record at its sparse-index offset, cost
/// one request of this size rather than a [`RANGE_CHUNK_BYTES`] chunk.
/// Opening a log in place reads every sealed segment's header and footer:
/// 2 x 16 KiB a segment instead of 2 x 256 KiB. Reads that go on
/// (a cursor doubles what it asks) move to chunks.
pub const RANGE_PAGE_BYTES: u64 = 16 << 10;

/// Bytes of recently used entries kept in memory as well: two whole
/// pieces of the largest size, many chunks.
pub const MEMORY_CACHE_BYTES: u64 = 32 << 20;

/// A temporary file older than this is a write that died with its
/// process: removed when a cache is opened.
const STALE_TMP: Duration = Duration::from_secs(600);

/// The folder of entries under the cache directory.
const PIECES_DIR: &str = "pieces";

/// Bytes after a chunk's data: its CRC.
const CHUNK_TRAILER_LEN: usize = 4;

/// What an entry is: a whole piece, or chunk `n` of one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Entry {
    /// A whole piece, named by its blake3.
    Whole(String),
    /// Bytes `n * RANGE_CHUNK_BYTES ..` of the piece named by the hash.
    Chunk(String, u64),
    /// Bytes `n * RANGE_PAGE_BYTES ..` of the piece named by the hash.
    Page(String, u64),
    /// Bytes `start..end` of the piece named by the hash: a range a read
    /// plan fetched (see [`super::vfs`]).
    Range(String, u64, u64),
}

impl Entry {
    fn file_name(&self) -> String {
        match self {
            Entry::Whole(h) => h.clone(),
            Entry::Chunk(h, n) => format!("{h}.{n}"),
            Entry::Page(h, n) => format!("{h}.p{n}"),
            Entry::Range(h, s, e) => format!("{h}.r{s}-{e}"),
        }
    }

    fn parse(name: &str) -> Option<Entry> {
        match name.split_once('.') {
            None if super::manifest::is_hash(name) => Some(Entry::Whole(name.to_string())),
            Some((h, n)) if super::manifest::is_hash(h) => {
                if let Some(n) = n.strip_prefix('p') {
                    Some(Entry::Page(h.to_string(), n.parse().ok()?))
                } else if let Some(r) = n.strip_prefix('r') {
                    let (s, e) = r.split_once('-')?;
                    Some(Entry::Range(
                        h.to_string(),
                        s.parse().ok()?,
                        e.parse().ok()?,
                    ))
                } else {
                    Some(Entry::Chunk(h.to_string(), n.parse().ok()?))
                }
            }
            _ => None,
        }
    }
}

/// Where the cache lives when none is named: `$XDG_CACHE_HOME/cairn`,
/// else `~/.cache/cairn`; `None` without either variable.
pub fn default_cache_dir() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(x) = nonempty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(x).join("cairn"));
    }
    nonempty("HOME").map(|h| PathBuf::from(h).join(".cache").join("cairn"))
}

/// The cache of fetched pieces (see the module docs).
pub struct PieceCache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    seq: AtomicU64,
}

impl std::fmt::Debug for PieceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceCache")
            .field("dir", &self.dir)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

#[derive(Default)]
struct State {
    /// Entries on disk: size and last use (a tick; larger is newer).
    disk: HashMap<String, (u64, u64)>,
    total: u64,
    tick: u64,
    /// Recently used entries in memory, newest last.
    memory: VecDeque<(Entry, Arc<[u8]>)>,
    memory_bytes: u64,
}

impl PieceCache {
    /// Opens (creating it, owner-only) the cache under `dir`, bounded to
    /// `max_bytes` on disk; entries over the bound (a smaller bound than
    /// the last user's) are removed now, least recently used first.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<PieceCache, ReplicateError> {
        let pieces = dir.join(PIECES_DIR);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&pieces)
            .map_err(|e| ReplicateError::io("create the archive cache", &pieces, e))?;
        let mut found: Vec<(SystemTime, String, u64)> = Vec::new();
        let listing = std::fs::read_dir(&pieces)
            .map_err(|e| ReplicateError::io("list the archive cache", &pieces, e))?;
        for e in listing.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Ok(meta) = e.metadata() else { continue };
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if name.starts_with(".tmp-") {
                let stale = modified.elapsed().is_ok_and(|age| age > STALE_TMP);
                if stale {
                    let _ = std::fs::remove_file(e.path());
                }
                continue;
            }
            if Entry::parse(&name).is_some() && meta.is_file() {
                found.push((modified, name, meta.len()));
            }
        }
        found.sort();
        let mut state = State::default();
        for (_, name, len) in found {
            state.tick += 1;
            state.total += len;
            state.disk.insert(name, (len, state.tick));
        }
        let cache = PieceCache {
            dir: pieces,
            max_bytes,
            state: Mutex::new(state),
            seq: AtomicU64::new(0),
        };
        cache.evict(&mut cache.state.lock());
        Ok(cache)
    }

    /// The directory entries are kept in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bound on the bytes kept on disk.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes of entries on disk now, as this handle knows them.
    pub fn bytes_on_disk(&self) -> u64 {
        self.state.lock().total
    }

    /// The entry's bytes if it is cached and checks out: a whole piece
    /// must hash to its name, a chunk match its CRC. One that does not is
    /// removed (and fetched again by the caller).
    pub(crate) fn get(&self, entry: &Entry) -> Option<Arc<[u8]>> {
        let mut st = self.state.lock();
        if let Some(i) = st.memory.iter().position(|(e, _)| e == entry) {
            let hit = st.memory.remove(i)?;
            let bytes = hit.1.clone();
            st.memory.push_back(hit);
            return Some(bytes);
        }
        let name = entry.file_name();
        if !st.disk.contains_key(&name) {
            return None;
        }
        let path = self.dir.join(&name);
        let checked = std::fs::read(&path).ok().and_then(|b| check(entry, b));
        match checked {
            Some(bytes) => {
                st.tick += 1;
                let tick = st.tick;
                if let Some(d) = st.disk.get_mut(&name) {
                    d.1 = tick;
                }
                // Best effort: the order other processes see.
                if let Ok(f) = std::fs::File::options().write(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                let bytes: Arc<[u8]> = bytes.into();
                self.remember(&mut st, entry.clone(), bytes.clone());
                Some(bytes)
            }
            None => {
                if let Some((len, _)) = st.disk.remove(&name) {
                    st.total -= len;
                }
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Keeps `bytes` (already checked by the caller) as `entry`: in
    /// memory, and on disk if they fit the bound, written to a temporary
    /// name and renamed into place so no reader sees half an entry. A
    /// failure to write is not an error: the bytes were fetched and are
    /// used; only the next use fetches them again.
    pub(crate) fn put(&self, entry: Entry, bytes: Arc<[u8]>) {
        let mut st = self.state.lock();
        self.remember(&mut st, entry.clone(), bytes.clone());
        let stored_len = (match &entry {
            Entry::Whole(_) => bytes.len(),
            Entry::Chunk(..) | Entry::Page(..) | Entry::Range(..) => {
                bytes.len() + CHUNK_TRAILER_LEN
            }
        }) as u64;
        if stored_len > self.max_bytes {
            return;
        }
        let name = entry.file_name();
        if st.disk.contains_key(&name) {
            return;
        }
        // Room first, so the bound holds at every moment.
        st.total += stored_len;
        self.evict(&mut st);
        st.total -= stored_len;
        if self.write(&entry, &name, &bytes).is_ok() {
            st.tick += 1;
            let tick = st.tick;
            st.disk.insert(name, (stored_len, tick));
            st.total += stored_len;
        }
    }

    fn write(&self, entry: &Entry, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(".tmp-{}-{seq}", std::process::id()));
        let wrote = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(bytes)?;
            if let Entry::Chunk(..) | Entry::Page(..) | Entry::Range(..) = entry {
                f.write_all(&crc(bytes).to_le_bytes())?;
            }
            // Not synced: every entry is checked when it is used (hash or
            // CRC), so one a crash left torn is dropped and fetched again;
            // a sync per entry cost a reader that fetches thousands of
            // small ranges (a read plan's) seconds.
            std::fs::rename(&tmp, self.dir.join(name))
        })();
        if wrote.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        wrote
    }

    /// Removes least recently used entries until the bytes on disk fit
    /// the bound.
    fn evict(&self, st: &mut State) {
        while st.total > self.max_bytes {
            let Some(oldest) = st
                .disk
                .iter()
                .min_by_key(|(_, (_, tick))| *tick)
                .map(|(n, _)| n.clone())
            else {
                break;
            };
            if let Some((len, _)) = st.disk.remove(&oldest) {
                st.total -= len;
            }
            let _ = std::fs::remove_file(self.dir.join(&oldest));
        }
    }

    fn remember(&self, st: &mut State, entry: Entry, bytes: Arc<[u8]>) {
        if bytes.len() as u64 > MEMORY_CACHE_BYTES {
            return;
        }
        if let Some(i) = st.memory.iter().position(|(e, _)| *e == entry) {
            if let Some((_, old)) = st.memory.remove(i) {
                st.memory_bytes -= old.len() as u64;
            }
        }
        st.memory_bytes += bytes.len() as u64;
        st.memory.push_back((entry, bytes));
        while st.memory_bytes > MEMORY_CACHE_BYTES {
            match st.memory.pop_front() {
                Some((_, old)) => st.memory_bytes -= old.len() as u64,
                None => break,
            }
        }
    }
}

/// A cache file's bytes if they check out as `entry`.
fn check(entry: &Entry, mut b: Vec<u8>) -> Option<Vec<u8>> {
    match entry {
        Entry::Whole(hash) => (blake3::hash(&b).to_hex().as_str() == hash).then_some(b),
        Entry::Chunk(..) | Entry::Page(..) | Entry::Range(..) => {
            let n = b.len().checked_sub(CHUNK_TRAILER_LEN)?;
            let stored = u32::from_le_bytes(b[n..].try_into().ok()?);
            b.truncate(n);
            (crc(&b) == stored).then_some(b)
        }
    }
}

/// The seeded CRC every cairn element uses.
fn crc(b: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(cairn_codec::frame::CRC_SEED);
    h.update(b);
    h.finalize()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> (Entry, Arc<[u8]>) {
        let h = blake3::hash(bytes).to_hex().to_string();
        (Entry::Whole(h), bytes.into())
    }

    #[test]
    fn the_bound_holds_and_the_least_recently_used_go_first() {
        let d = tempfile::tempdir().unwrap();
        let c = PieceCache::open(d.path(), 250).unwrap();
        let (a, ab) = whole(&[1u8; 100]);
        let (b, bb) = whole(&[2u8; 100]);
        let (x, xb) = whole(&[3u8; 100]);
        c.put(a.clone(), ab);
        c.put(b.clone(), bb);
        // `a` used: `b` is now the oldest.
        c.state.lock().memory.clear();
        assert!(c.get(&a).is_some());
        c.put(x.clone(), xb);
        assert!(c.bytes_on_disk() <= 250);
        let on_disk = |e: &Entry| c.dir().join(e.file_name()).exists();
        assert!(on_disk(&a) && on_disk(&x) && !on_disk(&b));
        // A bound smaller than one entry keeps nothing on disk.
        let tiny = PieceCache::open(d.path(), 10).unwrap();
        assert_eq!(tiny.bytes_on_disk(), 0);
        assert!(!on_disk(&a) && !on_disk(&x));
    }

    #[test]
    fn a_damaged_cache_file_is_dropped_not_used() {
        let d = tempfile::tempdir().unwrap();
        let c = PieceCache::open(d.path(), 1 << 20).unwrap();
        let (a, ab) = whole(b"piece bytes");
        let chunk = Entry::Chunk("0".repeat(64), 3);
        let page = Entry::Page("0".repeat(64), 3);
        let range = Entry::Range("0".repeat(64), 100, 111);
        c.put(a.clone(), ab);
        c.put(chunk.clone(), Arc::from(&b"chunk bytes"[..]));
        c.put(page.clone(), Arc::from(&b"page bytes"[..]));
        c.put(range.clone(), Arc::from(&b"range bytes"[..]));
        assert_eq!(Entry::parse(&page.file_name()), Some(page.clone()));
        assert_eq!(Entry::parse(&chunk.file_name()), Some(chunk.clone()));
        assert_eq!(Entry::parse(&range.file_name()), Some(range.clone()));
        let reopened = PieceCache::open(d.path(), 1 << 20).unwrap();
        assert_eq!(
            reopened.get(&range).as_deref(),
            Some(&b"range bytes"[..]),
            "a planned range is found again by a later process"
        );
        for e in [&a, &chunk, &page, &range] {
            let p = c.dir().join(e.file_name());
            let mut b = std::fs::read(&p).unwrap();
            b[0] ^= 1;
            std::fs::write(&p, b).unwrap();
        }
        let reopened = PieceCache::open(d.path(), 1 << 20).unwrap();
        assert!(reopened.get(&a).is_none());
        assert!(reopened.get(&chunk).is_none());
        assert!(reopened.get(&page).is_none());
        assert!(reopened.get(&range).is_none());
        assert!(!c.dir().join(a.file_name()).exists());
        assert_eq!(reopened.bytes_on_disk(), 0);
    }
}
