//! The stat cache: what the last full scan saw (each path's manifest
//! entry and the stat data it was read with), so the next scan re-reads
//! only files whose stat data changed. Its binary format, its encoder and
//! decoder, and the file that holds it, with an in-memory copy and a
//! background save. Below the workspace: it knows only its file's path.

use std::collections::{BTreeMap, HashSet};
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use cairn_codec::BlobHash;

use crate::durable::write_atomic;
use crate::error::{Result, SnapshotError};
use crate::manifest::{DirHashes, Entry, EntryKind};

/// The stat data that decides whether a file must be re-read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// Length in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// Device number.
    pub dev: u64,
    /// The full `st_mode` (type and permission bits).
    pub mode: u32,
}

impl Stat {
    /// The stat data of `m`.
    #[cfg(unix)]
    pub fn of(m: &Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        Stat {
            size: m.len(),
            mtime_ns: m
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.mtime_nsec()),
            ctime_ns: m
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.ctime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
            mode: m.mode(),
        }
    }

    /// The stat data of `m` (portable fallback: no ctime/inode).
    #[cfg(not(unix))]
    pub fn of(m: &Metadata) -> Stat {
        let mtime_ns = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i64);
        Stat {
            size: m.len(),
            mtime_ns,
            ctime_ns: 0,
            ino: 0,
            dev: 0,
            mode: if m.permissions().readonly() {
                0o444
            } else {
                0o644
            },
        }
    }

    /// The permission bits cairn stores and restores for a file or
    /// symlink (no setuid, setgid or sticky bit: a restored file never
    /// gains privileges).
    pub fn perm(&self) -> u32 {
        self.mode & 0o777
    }

    /// The mode bits cairn stores and restores for a directory: the
    /// permissions, and the setgid and sticky bits a shared directory
    /// relies on (new files take its group; only owners delete theirs).
    pub fn dir_perm(&self) -> u32 {
        self.mode & 0o3777
    }
}

/// The first bytes of a stat cache file (format 2: cairn's own layout,
/// written and read without a serialisation framework; a file of another
/// format is ignored and costs one full re-read).
const STAT_CACHE_MAGIC: &[u8; 4] = b"CSC2";

/// One cached path: its manifest entry and (for files and symlinks) the stat
/// data it was read with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cached {
    pub entry: Entry,
    pub stat: Option<Stat>,
}

/// The persistent stat cache: what the last full scan saw, so the next one
/// re-reads only files whose stat data changed (or that were "racy").
///
/// File layout (little-endian): magic `CSC2` | clock_ns i64 | root flag u8
/// [+ 32-byte hash] | entry count u32 | per entry: path length u32, path,
/// kind u8, mode u32, size u64, hash 32, stat flag u8 [+ size u64, mtime
/// i64, ctime i64, ino u64, dev u64, st_mode u32] | directory count u32 |
/// per directory: path length u32, path, node hash 32, size u64 | the first
/// 16 bytes of the blake3 hash of everything before.
#[derive(Clone, Debug, Default)]
pub(crate) struct StatCache {
    /// The file system's clock when the scan that wrote this cache started.
    /// A file whose mtime is not older than this may have been modified in
    /// the same clock tick after it was read: it is "racy" and re-read.
    pub clock_ns: i64,
    pub root: Option<BlobHash>,
    pub entries: BTreeMap<String, Cached>,
    pub dirs: Vec<(String, BlobHash, u64)>,
}

/// Bytes of the checksum that ends a stat cache file.
const STAT_CACHE_SUM_BYTES: usize = 16;

struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len())?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn hash(&mut self) -> Option<BlobHash> {
        Some(BlobHash(self.take(32)?.try_into().ok()?))
    }
    fn text(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

fn kind_code(k: EntryKind) -> u8 {
    match k {
        EntryKind::File => 1,
        EntryKind::Symlink => 2,
        EntryKind::Dir => 3,
    }
}

impl StatCache {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.entries.len() * 120 + self.dirs.len() * 80);
        out.extend_from_slice(STAT_CACHE_MAGIC);
        out.extend_from_slice(&self.clock_ns.to_le_bytes());
        match &self.root {
            Some(h) => {
                out.push(1);
                out.extend_from_slice(h.as_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (p, c) in &self.entries {
            out.extend_from_slice(&(p.len() as u32).to_le_bytes());
            out.extend_from_slice(p.as_bytes());
            out.push(kind_code(c.entry.kind));
            out.extend_from_slice(&c.entry.mode.to_le_bytes());
            out.extend_from_slice(&c.entry.size.to_le_bytes());
            out.extend_from_slice(c.entry.hash.as_bytes());
            match &c.stat {
                Some(st) => {
                    out.push(1);
                    out.extend_from_slice(&st.size.to_le_bytes());
                    out.extend_from_slice(&st.mtime_ns.to_le_bytes());
                    out.extend_from_slice(&st.ctime_ns.to_le_bytes());
                    out.extend_from_slice(&st.ino.to_le_bytes());
                    out.extend_from_slice(&st.dev.to_le_bytes());
                    out.extend_from_slice(&st.mode.to_le_bytes());
                }
                None => out.push(0),
            }
        }
        out.extend_from_slice(&(self.dirs.len() as u32).to_le_bytes());
        for (d, h, size) in &self.dirs {
            out.extend_from_slice(&(d.len() as u32).to_le_bytes());
            out.extend_from_slice(d.as_bytes());
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(&size.to_le_bytes());
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(&sum.as_bytes()[..STAT_CACHE_SUM_BYTES]);
        out
    }

    pub(crate) fn decode(b: &[u8]) -> Option<StatCache> {
        let body_len = b.len().checked_sub(STAT_CACHE_SUM_BYTES)?;
        let (body, sum) = b.split_at(body_len);
        if blake3::hash(body).as_bytes()[..STAT_CACHE_SUM_BYTES] != *sum {
            return None;
        }
        let mut r = Cur { b: body, pos: 0 };
        if r.take(4)? != STAT_CACHE_MAGIC {
            return None;
        }
        let clock_ns = r.i64()?;
        let root = match r.u8()? {
            0 => None,
            1 => Some(r.hash()?),
            _ => return None,
        };
        let n = r.u32()?;
        let mut entries = BTreeMap::new();
        for _ in 0..n {
            let p = r.text()?;
            let kind = match r.u8()? {
                1 => EntryKind::File,
                2 => EntryKind::Symlink,
                3 => EntryKind::Dir,
                _ => return None,
            };
            let entry = Entry {
                kind,
                mode: r.u32()?,
                size: r.u64()?,
                hash: r.hash()?,
            };
            let stat = match r.u8()? {
                0 => None,
                1 => Some(Stat {
                    size: r.u64()?,
                    mtime_ns: r.i64()?,
                    ctime_ns: r.i64()?,
                    ino: r.u64()?,
                    dev: r.u64()?,
                    mode: r.u32()?,
                }),
                _ => return None,
            };
            entries.insert(p, Cached { entry, stat });
        }
        let n = r.u32()?;
        let mut dirs = Vec::new();
        for _ in 0..n {
            dirs.push((r.text()?, r.hash()?, r.u64()?));
        }
        (r.pos == body.len()).then_some(StatCache {
            clock_ns,
            root,
            entries,
            dirs,
        })
    }

    /// The directory nodes the last scan stored, by path, for the next
    /// scan to re-use where a directory is unchanged.
    pub fn dir_hashes(&self) -> DirHashes {
        self.dirs
            .iter()
            .map(|(d, h, s)| (d.clone(), (*h, *s)))
            .collect()
    }

    /// Drops everything that refers to a blob not in `live` (after a gc).
    pub fn retain_live(&mut self, live: &HashSet<BlobHash>) {
        self.entries
            .retain(|_, c| c.entry.kind == EntryKind::Dir || live.contains(&c.entry.hash));
        self.dirs.retain(|(_, h, _)| live.contains(h));
        if self.root.is_some_and(|r| !live.contains(&r)) {
            self.root = None;
        }
    }
}

/// What identifies one version of a cache file: if any of these differ,
/// someone else wrote it and the in-memory copy is not used.
pub(crate) type FileId = (u64, u64, u64, i64, i64);

fn file_id(p: &Path) -> Option<FileId> {
    let m = std::fs::metadata(p).ok()?;
    let st = Stat::of(&m);
    Some((st.dev, st.ino, st.size, st.mtime_ns, st.ctime_ns))
}

/// The stat cache file of one workspace, with the copy this process last
/// saved or loaded (and the identity of the file it matches, so a
/// long-lived embedder does not re-read it for every checkpoint) and a
/// save running in the background.
#[derive(Debug)]
pub(crate) struct StatCacheFile {
    path: PathBuf,
    read_only: bool,
    /// The in-memory copy and the identity of the file it matches.
    memo: Mutex<Option<(FileId, Arc<StatCache>)>>,
    /// A save running on another thread (which returns the identity of the
    /// file it wrote), with the cache it writes.
    pending: Mutex<Option<PendingSave>>,
}

/// A background save: the thread and the cache it writes.
type PendingSave = (std::thread::JoinHandle<Option<FileId>>, Arc<StatCache>);

impl StatCacheFile {
    /// The cache file at `path`; `read_only`: never written.
    pub(crate) fn new(path: PathBuf, read_only: bool) -> StatCacheFile {
        StatCacheFile {
            path,
            read_only,
            memo: Mutex::new(None),
            pending: Mutex::new(None),
        }
    }

    /// Where the file is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The cache: the copy this process last saved or loaded if the file is
    /// still the one it saw, else read from the file (a missing, damaged or
    /// old-format file gives an empty cache: one full re-read, never a
    /// wrong checkpoint).
    pub(crate) fn load(&self) -> Arc<StatCache> {
        self.finish_save();
        let id = file_id(&self.path);
        if let (Some(id), Some((mid, c))) = (id, self.memo.lock().as_ref()) {
            if id == *mid {
                return c.clone();
            }
        }
        let Ok(b) = std::fs::read(&self.path) else {
            return Arc::default();
        };
        let c = Arc::new(StatCache::decode(&b).unwrap_or_default());
        if let Some(id) = id {
            *self.memo.lock() = Some((id, c.clone()));
        }
        c
    }

    /// Writes `cache` (atomically; with `durable`, fsync'd) and keeps it
    /// in memory for the next load.
    pub(crate) fn save(&self, cache: Arc<StatCache>, durable: bool) -> Result<()> {
        if self.read_only {
            return Err(SnapshotError::ReadOnly {
                what: "save the stat cache",
            });
        }
        self.finish_save();
        *self.memo.lock() = None;
        write_atomic(&self.path, &cache.encode(), durable)?;
        if let Some(id) = file_id(&self.path) {
            *self.memo.lock() = Some((id, cache));
        }
        Ok(())
    }

    /// Saves `cache` (not durably) on a background thread, so a
    /// checkpoint returns without waiting for it: the next load or save
    /// waits for it first, and so does dropping the workspace. A save that
    /// fails or is lost in a crash leaves the previous file, which is still
    /// correct (its stat data names the contents it was read with), only
    /// older: the next scan re-reads more.
    pub(crate) fn save_in_background(&self, cache: Arc<StatCache>) {
        if self.read_only {
            return;
        }
        self.finish_save();
        let path = self.path.clone();
        let writing = cache.clone();
        let handle = std::thread::spawn(move || {
            write_atomic(&path, &writing.encode(), false).ok()?;
            file_id(&path)
        });
        *self.pending.lock() = Some((handle, cache));
    }

    /// Waits for a background save, then remembers the cache it wrote as
    /// the in-memory copy of that file.
    pub(crate) fn finish_save(&self) {
        let Some((handle, cache)) = self.pending.lock().take() else {
            return;
        };
        *self.memo.lock() = handle.join().ok().flatten().map(|id| (id, cache));
    }

    /// Forgets the in-memory copy (after the file was removed).
    pub(crate) fn forget(&self) {
        *self.memo.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn dir(mode: u32) -> Entry {
        Entry {
            kind: EntryKind::Dir,
            mode,
            size: 0,
            hash: BlobHash::ZERO,
        }
    }

    /// A cache with a directory, a file with its stat data, and a
    /// directory node.
    fn sample() -> StatCache {
        let mut c = StatCache {
            clock_ns: 1_700_000_000_123_456_789,
            root: Some(BlobHash::of(b"root")),
            ..StatCache::default()
        };
        c.entries.insert(
            "src".into(),
            Cached {
                entry: dir(0o755),
                stat: None,
            },
        );
        c.entries.insert(
            "src/a.rs".into(),
            Cached {
                entry: Entry {
                    kind: EntryKind::File,
                    mode: 0o644,
                    size: 3,
                    hash: BlobHash::of(b"abc"),
                },
                stat: Some(Stat {
                    size: 3,
                    mtime_ns: -5,
                    ctime_ns: 7,
                    ino: 42,
                    dev: 9,
                    mode: 0o100644,
                }),
            },
        );
        c.dirs.push(("src".into(), BlobHash::of(b"node"), 3));
        c
    }

    fn same(a: &StatCache, b: &StatCache) -> bool {
        a.entries == b.entries && (a.clock_ns, a.root, &a.dirs) == (b.clock_ns, b.root, &b.dirs)
    }

    #[test]
    fn stat_cache_round_trip_and_damage() {
        let c = sample();
        let b = c.encode();
        let d = StatCache::decode(&b).unwrap();
        assert_eq!(d.encode(), b);
        assert!(same(&d, &c));
        for cut in 0..b.len() {
            assert!(StatCache::decode(&b[..cut]).is_none(), "cut {cut}");
        }
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x10;
            assert!(StatCache::decode(&bad).is_none(), "flip {i}");
        }
    }

    /// The file round trip: a saved cache loads back equal (from the file,
    /// not the in-memory copy), a damaged file loads as an empty cache,
    /// and a read-only file refuses to save.
    #[test]
    fn a_saved_cache_loads_back_and_a_damaged_file_loads_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat-cache.bin");
        let file = StatCacheFile::new(path.clone(), false);
        file.save(Arc::new(sample()), true).unwrap();
        let fresh = StatCacheFile::new(path.clone(), false);
        assert!(same(&fresh.load(), &sample()));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let damaged = StatCacheFile::new(path.clone(), false);
        assert!(same(&damaged.load(), &StatCache::default()));
        let ro = StatCacheFile::new(path, true);
        let e = ro.save(Arc::new(sample()), false).unwrap_err();
        assert!(matches!(e, SnapshotError::ReadOnly { .. }), "{e}");
    }

    fn arb_stat() -> impl Strategy<Value = Stat> {
        (
            any::<u64>(),
            any::<i64>(),
            any::<i64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        )
            .prop_map(|(size, mtime_ns, ctime_ns, ino, dev, mode)| Stat {
                size,
                mtime_ns,
                ctime_ns,
                ino,
                dev,
                mode,
            })
    }

    fn arb_cached() -> impl Strategy<Value = Cached> {
        (
            0u8..3,
            any::<u32>(),
            any::<u64>(),
            any::<[u8; 32]>(),
            proptest::option::of(arb_stat()),
        )
            .prop_map(|(k, mode, size, h, stat)| Cached {
                entry: Entry {
                    kind: [EntryKind::File, EntryKind::Symlink, EntryKind::Dir][k as usize],
                    mode,
                    size,
                    hash: BlobHash(h),
                },
                stat,
            })
    }

    fn arb_cache() -> impl Strategy<Value = StatCache> {
        (
            any::<i64>(),
            proptest::option::of(any::<[u8; 32]>()),
            proptest::collection::btree_map("[a-z/é]{0,12}", arb_cached(), 0..8),
            proptest::collection::vec(("[a-z/]{0,12}", any::<[u8; 32]>(), any::<u64>()), 0..5),
        )
            .prop_map(|(clock_ns, root, entries, dirs)| StatCache {
                clock_ns,
                root: root.map(BlobHash),
                entries,
                dirs: dirs
                    .into_iter()
                    .map(|(d, h, s)| (d, BlobHash(h), s))
                    .collect(),
            })
    }

    proptest! {
        /// Any cache round trips byte for byte.
        #[test]
        fn any_cache_round_trips(c in arb_cache()) {
            let b = c.encode();
            let d = StatCache::decode(&b).expect("a valid cache is refused");
            prop_assert!(same(&d, &c));
            prop_assert_eq!(d.encode(), b);
        }

        /// Random bytes, and a valid cache with one byte changed or cut
        /// short, never panic the decoder; a changed or cut cache is
        /// refused (the checksum covers every byte).
        #[test]
        fn a_damaged_cache_is_refused(
            c in arb_cache(),
            noise in proptest::collection::vec(any::<u8>(), 0..256),
            at in any::<usize>(),
            flip in 1u8..=255,
        ) {
            let _ = StatCache::decode(&noise);
            let b = c.encode();
            let i = at % b.len();
            let mut bad = b.clone();
            bad[i] ^= flip;
            prop_assert!(StatCache::decode(&bad).is_none(), "flip at {}", i);
            prop_assert!(StatCache::decode(&b[..i]).is_none(), "cut at {}", i);
        }
    }
}
