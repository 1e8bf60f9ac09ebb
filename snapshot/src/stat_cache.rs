//! The stat cache: what the last full scan saw (each path's manifest
//! entry and the stat data it was read with), so the next scan re-reads
//! only files whose stat data changed. Its binary format, its encoder and
//! decoder, and the file that holds it, with an in-memory copy and a
//! background save. Below the workspace: it knows only its file's path.

use std::collections::HashSet;
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use cairn_codec::BlobHash;

use cairn_engine::vfs::{Mapped, RealVfs, Vfs};

use crate::durable::write_atomic;
use crate::error::{Result, SnapshotError};
use crate::manifest::{DirHashes, Entry, EntryKind};

mod delta;
use delta::Delta;

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

impl Cached {
    /// An entry with no stat data, which a scan never trusts (the file it
    /// names is read again): what stands for an entry not known yet.
    pub(crate) const UNTRUSTED: Cached = Cached {
        entry: Entry {
            kind: EntryKind::File,
            mode: 0,
            size: 0,
            hash: BlobHash::ZERO,
        },
        stat: None,
    };
}

/// Every cached path with its entry, in path order, each path once: one
/// sorted run. A full scan reads it front to back beside its own sorted
/// paths and builds the next one the same way, so the 100,000s of paths
/// of a large tree are never inserted into a search tree one by one (a
/// `BTreeMap` built from them sorted them again and allocated its nodes:
/// a tenth of a one-file checkpoint's CPU at 100,000 files). A lookup is a
/// binary search.
///
/// A run a scan builds owns its paths; a run loaded from the stat cache
/// file is read where it lies in the mapped file (see [`MappedRun`]): no
/// `String` is made for a path, nor any entry decoded, until it is asked
/// for, and a path whose entry is reused as it is never gets one.
#[derive(Clone, Default)]
pub(crate) struct Entries(Run);

/// The two forms of a run.
#[derive(Clone)]
enum Run {
    /// Paths and entries in memory.
    Owned(Vec<(String, Cached)>),
    /// Paths and entries read from a mapped stat cache file.
    Mapped(MappedRun),
}

impl Default for Run {
    fn default() -> Run {
        Run::Owned(Vec::new())
    }
}

/// A run read in place from a stat cache file's bytes: one [`Slot`] a
/// path, in path order, each the offset of the path's record in the file
/// (checked whole when loaded: [`StatCache::decode_mapped`]), or an entry
/// held in memory (one a loaded delta or a caller changed).
#[derive(Clone)]
struct MappedRun {
    bytes: Arc<Mapped>,
    slots: Vec<Slot>,
    own: Vec<(String, Cached)>,
}

/// One path of a [`MappedRun`]: below [`OWN_BIT`] the offset of its
/// record (its path's length) in the file; with the bit set the index of
/// its entry in `own`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot(u64);

/// The bit of a [`Slot`] that says its entry is held in memory (no file
/// is 2^63 bytes long).
const OWN_BIT: u64 = 1 << 63;

/// What a record of a checked file decodes to were it ever not to (it
/// cannot: the mapped bytes are checked whole when loaded and a stat
/// cache file is only ever replaced by a rename, never written in
/// place): an entry with no stat data, which a scan never trusts, so
/// the file it names is read again.
const UNTRUSTED: Cached = Cached::UNTRUSTED;

impl Slot {
    fn own(i: usize) -> Slot {
        Slot(i as u64 | OWN_BIT)
    }
}

/// The path of slot `s`.
fn slot_path<'a>(bytes: &'a [u8], own: &'a [(String, Cached)], s: Slot) -> &'a str {
    if s.0 & OWN_BIT != 0 {
        return own
            .get((s.0 & !OWN_BIT) as usize)
            .map_or("", |e| e.0.as_str());
    }
    let mut r = Cur {
        b: bytes,
        pos: s.0 as usize,
    };
    r.str().unwrap_or_else(|| {
        debug_assert!(false, "a checked stat cache record does not decode");
        ""
    })
}

/// The path and entry of slot `s`.
fn slot_entry<'a>(bytes: &'a [u8], own: &'a [(String, Cached)], s: Slot) -> (&'a str, Cached) {
    if s.0 & OWN_BIT != 0 {
        return own
            .get((s.0 & !OWN_BIT) as usize)
            .map_or(("", UNTRUSTED), |(p, c)| (p.as_str(), *c));
    }
    let mut r = Cur {
        b: bytes,
        pos: s.0 as usize,
    };
    match (r.str(), r.cached()) {
        (Some(p), Some(c)) => (p, c),
        _ => {
            debug_assert!(false, "a checked stat cache record does not decode");
            ("", UNTRUSTED)
        }
    }
}

impl MappedRun {
    fn path(&self, s: Slot) -> &str {
        slot_path(&self.bytes, &self.own, s)
    }

    fn entry(&self, s: Slot) -> (&str, Cached) {
        slot_entry(&self.bytes, &self.own, s)
    }

    /// Slot `i`'s entry, held in memory from now on to be changed.
    fn own_mut(&mut self, i: usize) -> &mut Cached {
        let s = self.slots[i];
        let k = if s.0 & OWN_BIT != 0 {
            (s.0 & !OWN_BIT) as usize
        } else {
            let (p, c) = self.entry(s);
            let p = p.to_string();
            self.own.push((p, c));
            self.slots[i] = Slot::own(self.own.len() - 1);
            self.own.len() - 1
        };
        &mut self.own[k].1
    }
}

/// The paths and entries of a run, in path order.
#[derive(Clone)]
pub(crate) struct Iter<'a> {
    run: &'a Run,
    at: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, Cached);

    fn next(&mut self) -> Option<(&'a str, Cached)> {
        let item = match self.run {
            Run::Owned(v) => v.get(self.at).map(|(p, c)| (p.as_str(), *c)),
            Run::Mapped(m) => m.slots.get(self.at).map(|s| m.entry(*s)),
        };
        self.at += 1;
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = match self.run {
            Run::Owned(v) => v.len(),
            Run::Mapped(m) => m.slots.len(),
        };
        let n = len.saturating_sub(self.at);
        (n, Some(n))
    }
}

/// The paths (as bytes) and entries of a run, in path order: what a merge
/// that only compares paths reads (a path of a mapped run is not checked
/// as UTF-8 again each time it is read: [`StatCache::decode_mapped`]
/// checked it once).
pub(crate) struct BytesIter<'a> {
    run: &'a Run,
    at: usize,
}

impl<'a> Iterator for BytesIter<'a> {
    type Item = (&'a [u8], Cached);

    fn next(&mut self) -> Option<(&'a [u8], Cached)> {
        let item = match self.run {
            Run::Owned(v) => v.get(self.at).map(|(p, c)| (p.as_bytes(), *c)),
            Run::Mapped(m) => m.slots.get(self.at).map(|s| {
                if s.0 & OWN_BIT != 0 {
                    let (p, c) = m.entry(*s);
                    return (p.as_bytes(), c);
                }
                let mut r = Cur {
                    b: &m.bytes,
                    pos: s.0 as usize,
                };
                let p = r.u32().and_then(|n| r.take(n as usize));
                match (p, r.cached()) {
                    (Some(p), Some(c)) => (p, c),
                    _ => {
                        debug_assert!(false, "a checked stat cache record does not decode");
                        (&[][..], UNTRUSTED)
                    }
                }
            }),
        };
        self.at += 1;
        item
    }
}

impl Entries {
    /// The paths, as bytes, and their entries, in path order.
    pub(crate) fn iter_bytes(&self) -> BytesIter<'_> {
        BytesIter {
            run: &self.0,
            at: 0,
        }
    }

    /// The run `v`, whose strictly ascending path order its caller has
    /// already checked path by path as it built it (a full scan's
    /// `capture::cached_or_to_read`): taken as it is, not checked again
    /// (in debug builds it is).
    pub(crate) fn from_ordered(v: Vec<(String, Cached)>) -> Entries {
        debug_assert!(
            v.windows(2).all(|w| w[0].0 < w[1].0),
            "a run of paths out of order"
        );
        Entries(Run::Owned(v))
    }

    /// The paths and entries, owned, in path order.
    pub(crate) fn into_vec(self) -> Vec<(String, Cached)> {
        match self.0 {
            Run::Owned(v) => v,
            Run::Mapped(_) => self.iter().map(|(p, c)| (p.to_string(), c)).collect(),
        }
    }

    /// True if the run is read in place from a mapped file.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.0, Run::Mapped(_))
    }

    /// How many paths.
    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            Run::Owned(v) => v.len(),
            Run::Mapped(m) => m.slots.len(),
        }
    }

    /// The paths and their entries, in path order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            run: &self.0,
            at: 0,
        }
    }

    /// The path and entry at index `i` of the run, if there is one.
    pub(crate) fn at(&self, i: usize) -> Option<(&str, Cached)> {
        match &self.0 {
            Run::Owned(v) => v.get(i).map(|(p, c)| (p.as_str(), *c)),
            Run::Mapped(m) => m.slots.get(i).map(|s| m.entry(*s)),
        }
    }

    fn path(&self, i: usize) -> &str {
        match &self.0 {
            Run::Owned(v) => v[i].0.as_str(),
            Run::Mapped(m) => m.path(m.slots[i]),
        }
    }

    fn find(&self, path: &str) -> std::result::Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.path(mid).as_bytes().cmp(path.as_bytes()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// The entry of `path`.
    #[cfg(test)]
    pub(crate) fn get(&self, path: &str) -> Option<Cached> {
        let i = self.find(path).ok()?;
        Some(match &self.0 {
            Run::Owned(v) => v[i].1,
            Run::Mapped(m) => m.entry(m.slots[i]).1,
        })
    }

    /// The entry of `path`, to change.
    pub(crate) fn get_mut(&mut self, path: &str) -> Option<&mut Cached> {
        let i = self.find(path).ok()?;
        Some(match &mut self.0 {
            Run::Owned(v) => &mut v[i].1,
            Run::Mapped(m) => m.own_mut(i),
        })
    }

    /// Sets the entry of `path` (a search and a shift: for a few paths;
    /// many go through [`Entries::merge`]).
    pub(crate) fn insert(&mut self, path: String, c: Cached) {
        let at = self.find(&path);
        match (&mut self.0, at) {
            (Run::Owned(v), Ok(i)) => v[i].1 = c,
            (Run::Owned(v), Err(i)) => v.insert(i, (path, c)),
            (Run::Mapped(m), Ok(i)) => *m.own_mut(i) = c,
            (Run::Mapped(m), Err(i)) => {
                m.own.push((path, c));
                m.slots.insert(i, Slot::own(m.own.len() - 1));
            }
        }
    }

    /// Removes the entry of `path`, if any.
    #[cfg(test)]
    pub(crate) fn remove(&mut self, path: &str) {
        if let Ok(i) = self.find(path) {
            match &mut self.0 {
                Run::Owned(v) => {
                    v.remove(i);
                }
                Run::Mapped(m) => {
                    m.slots.remove(i);
                }
            }
        }
    }

    /// Keeps only the entries `keep` says yes to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str, &Cached) -> bool) {
        match &mut self.0 {
            Run::Owned(v) => v.retain(|(p, c)| keep(p, c)),
            Run::Mapped(m) => {
                let (bytes, own) = (&m.bytes, &m.own);
                m.slots.retain(|s| {
                    let (p, c) = slot_entry(bytes, own, *s);
                    keep(p, &c)
                });
            }
        }
    }

    /// Applies `changes` (in path order: an entry to set, or `None` to
    /// remove the path) in one merge pass.
    pub(crate) fn merge<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (std::borrow::Cow<'a, str>, Option<Cached>)>,
    ) {
        match &mut self.0 {
            Run::Owned(v) => merge_owned(v, changes),
            Run::Mapped(m) => merge_mapped(m, changes),
        }
    }
}

fn merge_owned<'a>(
    v: &mut Vec<(String, Cached)>,
    changes: impl IntoIterator<Item = (std::borrow::Cow<'a, str>, Option<Cached>)>,
) {
    let old = std::mem::take(v);
    let mut out: Vec<(String, Cached)> = Vec::with_capacity(old.len());
    let mut old = old.into_iter().peekable();
    for (p, c) in changes {
        while let Some(kept) = old.next_if(|(op, _)| op.as_str() < p.as_ref()) {
            out.push(kept);
        }
        old.next_if(|(op, _)| op.as_str() == p.as_ref());
        if let Some(c) = c {
            if out.last().is_some_and(|(l, _)| l.as_str() >= p.as_ref()) {
                // Out of order: not a run this merge can take in one
                // pass; kept correct by a search for it.
                let mut e = Entries(Run::Owned(std::mem::take(&mut out)));
                e.insert(p.into_owned(), c);
                out = match e.0 {
                    Run::Owned(v) => v,
                    Run::Mapped(_) => Vec::new(),
                };
            } else {
                out.push((p.into_owned(), c));
            }
        }
    }
    out.extend(old);
    *v = out;
}

fn merge_mapped<'a>(
    m: &mut MappedRun,
    changes: impl IntoIterator<Item = (std::borrow::Cow<'a, str>, Option<Cached>)>,
) {
    let old = std::mem::take(&mut m.slots);
    let mut out: Vec<Slot> = Vec::with_capacity(old.len());
    let mut i = 0;
    for (p, c) in changes {
        while i < old.len() && slot_path(&m.bytes, &m.own, old[i]) < p.as_ref() {
            out.push(old[i]);
            i += 1;
        }
        if i < old.len() && slot_path(&m.bytes, &m.own, old[i]) == p.as_ref() {
            i += 1;
        }
        if let Some(c) = c {
            // Out of order (not a run this merge takes in one pass): kept
            // correct by a search for its place.
            let at = match out.last() {
                Some(l) if slot_path(&m.bytes, &m.own, *l) >= p.as_ref() => {
                    out.binary_search_by(|s| slot_path(&m.bytes, &m.own, *s).cmp(p.as_ref()))
                }
                _ => Err(out.len()),
            };
            m.own.push((p.into_owned(), c));
            let s = Slot::own(m.own.len() - 1);
            match at {
                Ok(k) => out[k] = s,
                Err(k) => out.insert(k, s),
            }
        }
    }
    out.extend_from_slice(&old[i..]);
    m.slots = out;
}

impl PartialEq for Entries {
    fn eq(&self, other: &Entries) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Entries {}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<(String, Cached)> for Entries {
    /// In any order; a path given twice keeps the last entry.
    fn from_iter<I: IntoIterator<Item = (String, Cached)>>(it: I) -> Entries {
        let mut v: Vec<(String, Cached)> = it.into_iter().collect();
        // Stable: of equal paths the last is kept below.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, Cached)> = Vec::with_capacity(v.len());
        for (p, c) in v {
            match out.last_mut() {
                Some(last) if last.0 == p => last.1 = c,
                _ => out.push((p, c)),
            }
        }
        Entries(Run::Owned(out))
    }
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
    pub entries: Entries,
    pub dirs: Vec<(String, BlobHash, u64)>,
}

/// What a full scan found changed from the cache it started from to the
/// one it built, listed as it compared the two (which it does anyway, to
/// count changes): saved as a delta without comparing every path again.
#[derive(Clone, Debug)]
pub(crate) struct Changed {
    /// The cache the scan started from, as loaded.
    pub from: Arc<StatCache>,
    /// Every path whose cached entry (entry and stat data) differs, in
    /// any order; at most [`MAX_LISTED_CHANGES`] (see `too_many`).
    pub entries: Vec<ChangedPath>,
    /// More paths changed than [`MAX_LISTED_CHANGES`]: `entries` stops
    /// short, and the save writes the whole cache.
    pub too_many: bool,
}

/// The most changed paths a full scan lists for the save ([`Changed`]):
/// the most a delta ever holds ([`delta::DELTA_MAX_PATHS`]), past which
/// the save writes the whole cache whatever the list says. A first
/// checkpoint of 1,000,000 files listed every path (32 MB) for nothing.
pub(crate) const MAX_LISTED_CHANGES: usize = delta::DELTA_MAX_PATHS;

/// One path whose stat cache entry changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChangedPath {
    /// The path at this index of the new cache's run (no copy of its
    /// path is made unless a delta is written).
    Now(usize),
    /// A path gone.
    Gone(String),
}

impl Changed {
    /// True if the delta made from this list equals the one made by
    /// comparing every path of `from` and `now` (and is not empty when
    /// they differ).
    #[cfg(test)]
    pub(crate) fn agrees_with_compared(&self, now: &StatCache) -> bool {
        let mut listed = Delta::over([0; STAT_CACHE_SUM_BYTES]);
        listed.add_listed(self, now);
        let mut compared = Delta::over([0; STAT_CACHE_SUM_BYTES]);
        compared.add_changes(&self.from, now);
        listed == compared
    }
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
        Some(self.str()?.to_string())
    }
    /// A length-prefixed path, where it lies.
    fn str(&mut self) -> Option<&'a str> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.take(n)?).ok()
    }
}

fn kind_code(k: EntryKind) -> u8 {
    match k {
        EntryKind::File => 1,
        EntryKind::Symlink => 2,
        EntryKind::Dir => 3,
    }
}

/// Encodes one cached path's entry and stat data (after its path).
fn put_cached(out: &mut Vec<u8>, c: &Cached) {
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

/// Encodes `text` as its length (u32) and its bytes.
fn put_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// Encodes an optional root: a flag byte and the hash.
fn put_root(out: &mut Vec<u8>, root: &Option<BlobHash>) {
    match root {
        Some(h) => {
            out.push(1);
            out.extend_from_slice(h.as_bytes());
        }
        None => out.push(0),
    }
}

impl Cur<'_> {
    /// What [`put_cached`] wrote.
    fn cached(&mut self) -> Option<Cached> {
        let kind = match self.u8()? {
            1 => EntryKind::File,
            2 => EntryKind::Symlink,
            3 => EntryKind::Dir,
            _ => return None,
        };
        let entry = Entry {
            kind,
            mode: self.u32()?,
            size: self.u64()?,
            hash: self.hash()?,
        };
        let stat = match self.u8()? {
            0 => None,
            1 => Some(Stat {
                size: self.u64()?,
                mtime_ns: self.i64()?,
                ctime_ns: self.i64()?,
                ino: self.u64()?,
                dev: self.u64()?,
                mode: self.u32()?,
            }),
            _ => return None,
        };
        Some(Cached { entry, stat })
    }

    /// What [`put_root`] wrote.
    fn root(&mut self) -> Option<Option<BlobHash>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.hash()?)),
            _ => None,
        }
    }
}

impl StatCache {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.entries.len() * 120 + self.dirs.len() * 80);
        out.extend_from_slice(STAT_CACHE_MAGIC);
        out.extend_from_slice(&self.clock_ns.to_le_bytes());
        put_root(&mut out, &self.root);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (p, c) in self.entries.iter() {
            put_text(&mut out, p);
            put_cached(&mut out, &c);
        }
        out.extend_from_slice(&(self.dirs.len() as u32).to_le_bytes());
        for (d, h, size) in &self.dirs {
            put_text(&mut out, d);
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(&size.to_le_bytes());
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(&sum.as_bytes()[..STAT_CACHE_SUM_BYTES]);
        out
    }

    /// Decodes a stat cache file's bytes (a copy of them: for tests and
    /// the simulated disk; a file on disk is read where it lies,
    /// [`StatCache::decode_mapped`]).
    #[cfg(test)]
    pub(crate) fn decode(b: &[u8]) -> Option<StatCache> {
        StatCache::decode_mapped(Arc::new(Mapped::Bytes(Arc::from(b))))
    }

    /// Decodes a stat cache file's bytes `b`, keeping its entries where
    /// they lie ([`Entries`] holds `b` and one offset a path); `None` if
    /// the bytes are not a whole, undamaged cache (the checksum, the
    /// structure, every path's UTF-8 and strictly ascending order are
    /// checked here, once, so reading an entry later cannot fail).
    pub(crate) fn decode_mapped(b: Arc<Mapped>) -> Option<StatCache> {
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
        let root = r.root()?;
        let n = r.u32()?;
        // The encoder writes them in path order: kept as that one sorted
        // run (out-of-order input is refused). Each record is checked
        // whole, its offset kept; no path is copied.
        let mut slots: Vec<Slot> = Vec::with_capacity((n as usize).min(body.len() / 64));
        let mut last: Option<&str> = None;
        for _ in 0..n {
            let at = r.pos;
            let p = r.str()?;
            r.cached()?;
            if last.is_some_and(|l| l >= p) {
                return None;
            }
            last = Some(p);
            slots.push(Slot(at as u64));
        }
        let n = r.u32()?;
        let mut dirs = Vec::new();
        for _ in 0..n {
            dirs.push((r.text()?, r.hash()?, r.u64()?));
        }
        if r.pos != body.len() {
            return None;
        }
        let entries = Entries(Run::Mapped(MappedRun {
            bytes: b.clone(),
            slots,
            own: Vec::new(),
        }));
        Some(StatCache {
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

/// The versions of the base file and of the delta file a copy matches.
type FilesId = (Option<FileId>, Option<FileId>);

/// The base file a cache was loaded from or saved to: how many paths it
/// holds, and the delta (maybe empty) that takes it to the cache.
#[derive(Clone, Debug)]
struct BaseRef {
    paths: usize,
    delta: Delta,
}

/// The copy of the cache this process last loaded or saved.
#[derive(Debug)]
struct Memo {
    id: FilesId,
    cache: Arc<StatCache>,
    /// `None` when the files hold no base this copy can be written as a
    /// delta over (none yet, damaged, or written by a save that failed).
    base: Option<BaseRef>,
}

/// The stat cache file of one workspace (the base, `stat-cache.bin`, and
/// its delta, `stat-cache.delta`: see [`delta`]), with the copy this
/// process last saved or loaded (and the identity of the files it
/// matches, so a long-lived embedder does not re-read them for every
/// checkpoint) and a save running in the background.
#[derive(Debug)]
pub(crate) struct StatCacheFile {
    path: PathBuf,
    delta_path: PathBuf,
    read_only: bool,
    /// The in-memory copy and the identity of the files it matches.
    memo: Mutex<Option<Memo>>,
    /// A save running on another thread (which returns the identity of the
    /// files it wrote and the base they hold), with the cache it writes.
    pending: Mutex<Option<PendingSave>>,
}

/// A background save: the thread and the cache it writes.
type PendingSave = (
    std::thread::JoinHandle<Option<(FilesId, Option<BaseRef>)>>,
    Arc<StatCache>,
);

/// The delta file's name beside the base file `path`.
fn delta_path_of(path: &Path) -> PathBuf {
    path.with_extension("delta")
}

impl StatCacheFile {
    /// The cache file at `path`; `read_only`: never written.
    pub(crate) fn new(path: PathBuf, read_only: bool) -> StatCacheFile {
        StatCacheFile {
            delta_path: delta_path_of(&path),
            path,
            read_only,
            memo: Mutex::new(None),
            pending: Mutex::new(None),
        }
    }

    /// Where the base file is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn files_id(&self) -> FilesId {
        (file_id(&self.path), file_id(&self.delta_path))
    }

    /// The cache: the copy this process last saved or loaded if the files
    /// are still the ones it saw, else read from them (a missing, damaged
    /// or old-format base gives an empty cache: one full re-read, never a
    /// wrong checkpoint; a damaged delta, or one of another base, is left
    /// out: the base alone is an older cache, as correct).
    pub(crate) fn load(&self) -> Arc<StatCache> {
        self.finish_save();
        let id = self.files_id();
        if let Some(m) = self.memo.lock().as_ref() {
            if id.0.is_some() && id == m.id {
                return m.cache.clone();
            }
        }
        // Mapped, not read: its pages are the page cache's, not fresh
        // memory copied into (at 100,000 files, 11 MB faulted in page by
        // page was a tenth of a one-file checkpoint's CPU). The file is
        // only ever replaced whole (an atomic rename), never rewritten in
        // place, so the mapped bytes do not change under the decoder.
        let Ok(b) = RealVfs.map(&self.path) else {
            return Arc::default();
        };
        let b = Arc::new(b);
        let Some(mut c) = StatCache::decode_mapped(b.clone()) else {
            return Arc::default();
        };
        let mut sum = [0u8; STAT_CACHE_SUM_BYTES];
        sum.copy_from_slice(&b[b.len() - STAT_CACHE_SUM_BYTES..]);
        let paths = c.entries.len();
        let delta = std::fs::read(&self.delta_path)
            .ok()
            .and_then(|d| Delta::decode(crate::in_place::decode(&d)?))
            .filter(|d| d.base_sum == sum);
        let delta = match delta {
            Some(d) => {
                d.apply(&mut c);
                d
            }
            None => Delta::over(sum),
        };
        let c = Arc::new(c);
        if id.0.is_some() {
            *self.memo.lock() = Some(Memo {
                id,
                cache: c.clone(),
                base: Some(BaseRef { paths, delta }),
            });
        }
        c
    }

    /// Writes `cache` whole (atomically; with `durable`, fsync'd) and
    /// keeps it in memory for the next load.
    pub(crate) fn save(&self, cache: Arc<StatCache>, durable: bool) -> Result<()> {
        if self.read_only {
            return Err(SnapshotError::ReadOnly {
                what: "save the stat cache",
            });
        }
        self.finish_save();
        *self.memo.lock() = None;
        let base = write_whole(&self.path, &self.delta_path, &cache, durable)?;
        *self.memo.lock() = Some(Memo {
            id: self.files_id(),
            cache,
            base: Some(base),
        });
        Ok(())
    }

    /// Saves `cache` (not durably) on a background thread, so a
    /// checkpoint returns without waiting for it: the next load or save
    /// waits for it first, and so does dropping the workspace. When the
    /// in-memory copy still matches the files, only what changed since
    /// their base is written (the delta; the whole cache once the delta
    /// grows past [`delta::max_delta_paths`]). A save that fails or is
    /// lost in a crash leaves the previous files, which are still correct
    /// (their stat data names the contents it was read with), only older:
    /// the next scan re-reads more.
    ///
    /// `changed`, when given, lists what changed from the cache it names
    /// to `cache`: when that is the in-memory copy the delta is made from
    /// the list, without comparing every path.
    pub(crate) fn save_in_background(&self, cache: Arc<StatCache>, changed: Option<Changed>) {
        if self.read_only {
            return;
        }
        self.finish_save();
        let id = self.files_id();
        let prev = self
            .memo
            .lock()
            .take()
            .filter(|m| id.0.is_some() && m.id == id);
        let path = self.path.clone();
        let delta_path = self.delta_path.clone();
        let writing = cache.clone();
        let handle = std::thread::spawn(move || {
            let over = prev.and_then(|m| Some((m.base?, m.cache)));
            if let Some((base, prev_cache)) = over {
                let mut delta = base.delta;
                let most = delta::max_delta_paths(base.paths);
                let fits = match changed.filter(|ch| Arc::ptr_eq(&ch.from, &prev_cache)) {
                    // Past the bound already: the whole cache is written
                    // (not the delta as it was, which would leave every
                    // change out of the files).
                    Some(ch) if ch.too_many || delta.len() + ch.entries.len() > most => false,
                    Some(ch) => {
                        delta.add_listed(&ch, &writing);
                        delta.len() <= most
                    }
                    None => {
                        delta.add_changes(&prev_cache, &writing);
                        delta.len() <= most
                    }
                };
                if fits {
                    crate::in_place::write(&delta_path, &delta.encode()).ok()?;
                    let id = (file_id(&path), file_id(&delta_path));
                    return Some((
                        id,
                        Some(BaseRef {
                            paths: base.paths,
                            delta,
                        }),
                    ));
                }
            }
            let base = write_whole(&path, &delta_path, &writing, false).ok()?;
            Some(((file_id(&path), file_id(&delta_path)), Some(base)))
        });
        *self.pending.lock() = Some((handle, cache));
    }

    /// Waits for a background save, then remembers the cache it wrote as
    /// the in-memory copy of those files.
    pub(crate) fn finish_save(&self) {
        let Some((handle, cache)) = self.pending.lock().take() else {
            return;
        };
        *self.memo.lock() = handle
            .join()
            .ok()
            .flatten()
            .map(|(id, base)| Memo { id, cache, base });
    }

    /// Forgets the in-memory copy (after the file was removed).
    pub(crate) fn forget(&self) {
        *self.memo.lock() = None;
    }
}

/// Writes `cache` as the base file `path` (atomically; with `durable`,
/// fsync'd), then removes the delta file beside it, which no longer
/// applies (and names the old base's checksum: left behind by a crash,
/// it is ignored). The base written, with an empty delta.
fn write_whole(
    path: &Path,
    delta_path: &Path,
    cache: &StatCache,
    durable: bool,
) -> Result<BaseRef> {
    let bytes = cache.encode();
    write_atomic(path, &bytes, durable)?;
    match std::fs::remove_file(delta_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(SnapshotError::io("remove", delta_path, e)),
    }
    let mut sum = [0u8; STAT_CACHE_SUM_BYTES];
    sum.copy_from_slice(&bytes[bytes.len() - STAT_CACHE_SUM_BYTES..]);
    Ok(BaseRef {
        paths: cache.entries.len(),
        delta: Delta::over(sum),
    })
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
    pub(crate) fn sample() -> StatCache {
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

    pub(crate) fn same(a: &StatCache, b: &StatCache) -> bool {
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
        let loaded = fresh.load();
        assert!(loaded.entries.is_mapped(), "decoded, not read in place");
        assert!(same(&loaded, &sample()));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let damaged = StatCacheFile::new(path.clone(), false);
        assert!(same(&damaged.load(), &StatCache::default()));
        // Cut to nothing (nothing to map) and cut short: empty as well.
        let whole = StatCache::encode(&sample());
        for len in [0, whole.len() / 2] {
            std::fs::write(&path, &whole[..len]).unwrap();
            let cut = StatCacheFile::new(path.clone(), false);
            assert!(same(&cut.load(), &StatCache::default()), "{len}");
        }
        let ro = StatCacheFile::new(path, true);
        let e = ro.save(Arc::new(sample()), false).unwrap_err();
        assert!(matches!(e, SnapshotError::ReadOnly { .. }), "{e}");
    }

    /// `sample()` with one more file, `name`.
    fn with_file(mut c: StatCache, name: &str, clock_ns: i64) -> StatCache {
        let e = c.entries.get("src/a.rs").unwrap();
        c.entries.insert(name.to_string(), e);
        c.clock_ns = clock_ns;
        c
    }

    /// A background save after a load writes a delta, which a fresh load
    /// applies; a whole save (as gc makes) removes it, and a delta put
    /// back over that new base is ignored, as is a damaged one; a change
    /// past the delta's bound writes the whole file again.
    #[test]
    fn a_delta_of_another_base_is_ignored_and_gc_writes_the_whole_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat-cache.bin");
        let delta_path = delta_path_of(&path);
        let file = StatCacheFile::new(path.clone(), false);
        file.save(Arc::new(sample()), true).unwrap();
        assert!(!delta_path.exists());
        let base_bytes = std::fs::read(&path).unwrap();

        let c2 = with_file(sample(), "src/b.rs", 11);
        let _ = file.load();
        file.save_in_background(Arc::new(c2.clone()), None);
        file.finish_save();
        assert_eq!(std::fs::read(&path).unwrap(), base_bytes, "base rewritten");
        assert!(delta_path.exists());
        let loaded = StatCacheFile::new(path.clone(), false).load();
        assert!(same(&loaded, &c2), "{loaded:?}");
        let old_delta = std::fs::read(&delta_path).unwrap();

        // gc's whole, durable save: the delta goes.
        let c3 = with_file(sample(), "src/c.rs", 12);
        file.save(Arc::new(c3.clone()), true).unwrap();
        assert!(!delta_path.exists());
        std::fs::write(&delta_path, &old_delta).unwrap();
        assert!(same(&StatCacheFile::new(path.clone(), false).load(), &c3));

        // A damaged delta over the right base: the base alone.
        let _ = file.load();
        file.save_in_background(Arc::new(with_file(c3.clone(), "src/d.rs", 13)), None);
        file.finish_save();
        let mut bad = std::fs::read(&delta_path).unwrap();
        let mid = bad.len() / 2;
        bad[mid] ^= 1;
        std::fs::write(&delta_path, &bad).unwrap();
        assert!(same(&StatCacheFile::new(path.clone(), false).load(), &c3));

        // Past the bound: whole again.
        let mut big = c3.clone();
        for i in 0..=delta::DELTA_MIN_PATHS {
            big = with_file(big, &format!("many/{i}"), 14);
        }
        let file = StatCacheFile::new(path.clone(), false);
        let _ = file.load();
        file.save_in_background(Arc::new(big.clone()), None);
        file.finish_save();
        assert!(!delta_path.exists());
        assert!(same(&StatCacheFile::new(path.clone(), false).load(), &big));

        // Past the bound with the changes listed by a scan (every path of
        // the new cache, as after a tree was copied: new inodes): whole
        // again, not the delta as it was (which left every change out, so
        // every later scan read every file again).
        let file = StatCacheFile::new(path.clone(), false);
        let from = file.load();
        let mut moved = (*from).clone();
        moved.entries = moved
            .entries
            .iter()
            .map(|(p, mut c)| {
                if let Some(st) = c.stat.as_mut() {
                    st.ino += 1_000_000;
                }
                (p.to_string(), c)
            })
            .collect();
        moved.clock_ns += 1;
        let listed = Changed {
            from: from.clone(),
            entries: (0..moved.entries.len()).map(ChangedPath::Now).collect(),
            too_many: false,
        };
        assert!(listed.entries.len() > delta::max_delta_paths(from.entries.len()));
        file.save_in_background(Arc::new(moved.clone()), Some(listed));
        file.finish_save();
        assert!(!delta_path.exists(), "the whole cache is written");
        assert!(same(
            &StatCacheFile::new(path.clone(), false).load(),
            &moved
        ));

        // A list cut short (more changed than any delta holds): whole
        // again, though the few paths listed would fit in a delta.
        let file = StatCacheFile::new(path.clone(), false);
        let from = file.load();
        let mut again = (*from).clone();
        again.clock_ns += 1;
        let cut = Changed {
            from: from.clone(),
            entries: vec![ChangedPath::Now(0)],
            too_many: true,
        };
        file.save_in_background(Arc::new(again.clone()), Some(cut));
        file.finish_save();
        assert!(!delta_path.exists(), "the whole cache is written");
        assert!(same(&StatCacheFile::new(path, false).load(), &again));
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

    pub(crate) fn arb_cache() -> impl Strategy<Value = StatCache> {
        (
            any::<i64>(),
            proptest::option::of(any::<[u8; 32]>()),
            proptest::collection::btree_map("[a-z/é]{0,12}", arb_cached(), 0..8)
                .prop_map(|m| m.into_iter().collect::<Entries>()),
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

    /// A file whose checksum is right but whose paths are not valid UTF-8,
    /// or not in strictly ascending order, is refused when loaded (a run
    /// read in place is checked whole before any entry is read from it).
    #[test]
    fn a_mapped_file_with_a_bad_path_is_refused_though_its_sum_matches() {
        let good = sample().encode();
        let resum = |mut b: Vec<u8>| {
            let body = b.len() - STAT_CACHE_SUM_BYTES;
            let sum = blake3::hash(&b[..body]);
            b[body..].copy_from_slice(&sum.as_bytes()[..STAT_CACHE_SUM_BYTES]);
            b
        };
        assert!(StatCache::decode(&resum(good.clone())).is_some());
        let at = good.windows(8).position(|w| w == b"src/a.rs").unwrap();
        for bad in [&b"src/\xffa.r"[..], b"aaaaaaaa"] {
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(bad);
            assert!(StatCache::decode(&resum(b)).is_none(), "{bad:?}");
        }
    }

    /// A run read in place answers as the run it was written from: its
    /// lookups, and each change a caller makes (set, add, remove, keep),
    /// leave it equal to the owned run given the same changes.
    #[test]
    fn a_mapped_run_reads_and_changes_as_an_owned_one() {
        let mut owned = with_file(with_file(sample(), "src/b.rs", 1), "zz/c", 1);
        let mut mapped = StatCache::decode(&owned.encode()).unwrap();
        assert!(mapped.entries.is_mapped());
        assert_eq!(mapped.entries, owned.entries);
        for p in [
            "", "a", "src", "src/a.rs", "src/b.rs", "src/c.rs", "zz/c", "zzz",
        ] {
            assert_eq!(mapped.entries.get(p), owned.entries.get(p), "{p}");
        }
        let mut c = owned.entries.get("src/a.rs").unwrap();
        c.entry.size = 77;
        for e in [&mut owned.entries, &mut mapped.entries] {
            e.get_mut("src/b.rs").unwrap().entry.mode = 0o600;
            e.insert("src/a.rs".into(), c);
            e.insert("src/0".into(), c);
            e.insert("zzzz".into(), c);
            e.remove("zz/c");
            e.retain(|p, _| p != "src");
        }
        assert!(mapped.entries.is_mapped());
        assert_eq!(mapped.entries, owned.entries);
        assert_eq!(mapped.encode(), owned.encode());
        assert_eq!(mapped.entries.clone().into_vec(), owned.entries.into_vec());
    }

    proptest! {
        /// Any cache round trips byte for byte.
        #[test]
        fn any_cache_round_trips(c in arb_cache()) {
            let b = c.encode();
            let d = StatCache::decode(&b).expect("a valid cache is refused");
            prop_assert!(d.entries.is_mapped(), "decoded, not read in place");
            prop_assert!(same(&d, &c));
            for (p, e) in c.entries.iter() {
                prop_assert_eq!(d.entries.get(p), Some(e));
            }
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
