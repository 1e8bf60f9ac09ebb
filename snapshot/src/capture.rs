//! Capturing the workspace into a manifest tree: the stat cache, the racy
//! mtime rule, parallel hashing, and incremental tree building.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::sync::Arc;

use cairn_codec::{BlobHash, CheckpointCounts};

use crate::blobs::{BlobAccess, BlobRead};
use crate::error::{Result, SnapshotError};
use crate::manifest::{self, DirHashes, Entry, EntryKind, Manifest, Node};
use crate::relpath;
use crate::scan::{self, Found, ScanOut};
use crate::stat_cache::{
    Cached, Changed, ChangedPath, Entries, Stat, StatCache, MAX_LISTED_CHANGES,
};
use crate::watch_journal::{JournalPoint, ScanReport};
use crate::workspace::{LastCapture, Workspace, CLOCK_FILE, MAX_HASH_THREADS};

/// Files up to this size are read into memory and stored with one `put`;
/// larger ones are streamed with `put_file` (which chunks them), so memory
/// stays bounded by threads x this size.
pub const STREAM_THRESHOLD_BYTES: u64 = 4 * 1024 * 1024;

/// Below this many files to hash, threads cost more than they save.
const PARALLEL_MIN_JOBS: usize = 16;

/// The result of a capture.
#[derive(Debug)]
pub struct Capture {
    /// The manifest root.
    pub root: BlobHash,
    /// Tracked paths that did not exist (full scans only; see [`Capture::manifest`]).
    pub(crate) missing: BTreeSet<String>,
    /// Counts for the checkpoint record.
    pub counts: CheckpointCounts,
    /// The tree `counts.changed` was counted against: the last full scan's
    /// (its stat cache), or the last capture's for the other kinds.
    pub(crate) base: Option<BlobHash>,
    /// Paths skipped as too large or unreadable, with the reason, in path
    /// order.
    pub(crate) not_captured: BTreeMap<String, &'static str>,
    pub(crate) new_cache: Option<Arc<StatCache>>,
    /// What changed from the stat cache the scan started from to
    /// `new_cache` (full scans only), for the save to write as a delta.
    pub(crate) cache_changed: Option<Changed>,
    /// The dirty tracked paths this capture read.
    pub(crate) captured_dirty: BTreeSet<String>,
    /// How it found what changed (set by the caller that chose how).
    pub(crate) scan: ScanReport,
    /// The `cairn watch` journal point this capture began after (see
    /// [`crate::watch_journal`]): recorded with its tree once the
    /// checkpoint is durable. Only a full or journal capture has one: a
    /// tracked-only capture does not see every change.
    pub(crate) journal_point: Option<JournalPoint>,
}

impl Capture {
    /// The whole flattened manifest (full scans only).
    pub fn manifest(&self) -> Option<Manifest> {
        let c = self.new_cache.as_ref()?;
        Some(Manifest {
            entries: c
                .entries
                .iter()
                .map(|(p, c)| (p.to_string(), c.entry))
                .collect(),
            missing: self.missing.clone(),
        })
    }

    pub(crate) fn last(&self) -> LastCapture {
        LastCapture {
            root: self.root,
            files: self.counts.files,
            rolled_back: None,
        }
    }
}

/// Reads the file system's clock by touching a file in the cache directory.
/// A read-only workspace takes the system clock instead: its scans are
/// never saved, and the clock only marks which of the entries a scan reads
/// a later scan could trust.
fn fs_clock(ws: &Workspace) -> Result<i64> {
    if ws.is_read_only() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return Ok(i64::try_from(now).unwrap_or(i64::MAX));
    }
    let p = ws.cache_path(CLOCK_FILE);
    // Its one byte written over itself: a write stamps the mtime, and
    // unlike truncating first it never waits for a write-back (see
    // `in_place`).
    crate::in_place::touch(&p).map_err(|e| SnapshotError::io("touch scan clock", &p, e))?;
    let m = std::fs::metadata(&p).map_err(|e| SnapshotError::io("stat scan clock", &p, e))?;
    Ok(Stat::of(&m).mtime_ns)
}

enum Hashed {
    Ok(Entry, Stat),
    Skip(&'static str),
}

fn hash_one<B: BlobAccess + ?Sized>(blobs: &B, root: &Path, f: &Found) -> Result<Hashed> {
    let abs = root.join(&f.rel);
    match f.kind {
        EntryKind::Symlink => {
            let target = match std::fs::read_link(&abs) {
                Ok(t) => t,
                Err(e) => return Ok(Hashed::Skip(scan::skip_reason(&e))),
            };
            let bytes = os_bytes(target.as_os_str());
            let hash = blobs.put(&bytes)?;
            Ok(Hashed::Ok(
                Entry {
                    kind: EntryKind::Symlink,
                    mode: 0,
                    size: bytes.len() as u64,
                    hash,
                },
                f.stat,
            ))
        }
        EntryKind::File => {
            for _ in 0..MAX_READ_ATTEMPTS {
                match read_file_once(blobs, &abs)? {
                    ReadOnce::Changed => continue,
                    ReadOnce::Done(h) => return Ok(h),
                }
            }
            // Never a mix of old and new bytes: a file that kept changing
            // is left out and named, as an unreadable one is.
            Ok(Hashed::Skip(scan::reason::CHANGING))
        }
        EntryKind::Dir => Err(SnapshotError::Invalid(
            "internal: hashing a directory".into(),
        )),
    }
}

/// How many times a file that changed while it was read is read again
/// before it is reported as changing ([`scan::reason::CHANGING`]): enough
/// to get past one save by an editor or a tool (a write that lands during
/// the read), few enough that a file rewritten in a loop does not hold the
/// checkpoint up for long.
pub const MAX_READ_ATTEMPTS: usize = 3;

/// A file whose mtime is this close to the moment its read starts is
/// "racy", as git calls it: a write that lands during the read in the same
/// tick of the file system's clock (the kernel stamps files from a coarse
/// clock, 1-10 ms a tick) leaves the stat unchanged, so the stat alone
/// cannot prove the bytes are one version. Such a file is read twice and
/// kept only if both reads agree. 100 ms covers the coarsest tick of the
/// file systems cairn runs on with room to spare; a file saved that
/// recently is rare and small to read again.
pub const RACY_WINDOW_NS: i64 = 100_000_000;

/// True if `stat`'s mtime is within [`RACY_WINDOW_NS`] of now (or after
/// it: a clock that moved back).
fn racy(stat: &Stat) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(i64::MAX, |d| {
            i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
        });
    now.saturating_sub(stat.mtime_ns) < RACY_WINDOW_NS
}

/// The blake3 digest of the whole file open as `file`, read again from
/// its start; `None` if it cannot be read.
fn digest_again(file: &mut std::fs::File) -> Option<blake3::Hash> {
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(0)).ok()?;
    let mut h = blake3::Hasher::new();
    std::io::copy(file, &mut h).ok()?;
    Some(h.finalize())
}

/// One read of a regular file: its entry, or `Changed` when its stat
/// (size, mtime, ctime on the open handle; device and inode at its path)
/// after the read is not the one before it, or the bytes read are not the
/// size it had: the bytes may then be a mix of two versions and are not
/// used (a blob already stored for them is left for `gc`).
enum ReadOnce {
    Done(Hashed),
    Changed,
}

fn read_file_once<B: BlobAccess + ?Sized>(blobs: &B, abs: &Path) -> Result<ReadOnce> {
    let mut file = match scan::open_nofollow(abs) {
        Ok(x) => x,
        Err(e) => return Ok(ReadOnce::Done(Hashed::Skip(scan::skip_reason(&e)))),
    };
    let m = match file.metadata() {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Ok(ReadOnce::Done(Hashed::Skip(scan::reason::VANISHED))),
        Err(e) => return Ok(ReadOnce::Done(Hashed::Skip(scan::skip_reason(&e)))),
    };
    // The stat recorded is the one taken before reading.
    let stat = Stat::of(&m);
    let mut first_read = racy(&stat).then(blake3::Hasher::new);
    let (hash, size) = if stat.size > STREAM_THRESHOLD_BYTES {
        // From the handle opened without following a symlink, not by path
        // again: a file swapped for a link meanwhile is not followed out
        // of the workspace. Checked as it is read, so a file rewritten
        // meanwhile leaves at most a few MiB of blobs for gc, not a copy
        // of itself per attempt.
        let mut watched = Watched {
            file: &mut file,
            before: stat,
            since_check: 0,
            changed: false,
            digest: first_read.as_mut(),
        };
        match blobs.put_stream(&mut watched, abs) {
            Ok(x) => x,
            Err(_) if watched.changed => return Ok(ReadOnce::Changed),
            Err(e) => return Err(e),
        }
    } else {
        let mut buf = Vec::with_capacity(stat.size as usize);
        if let Err(e) = file.read_to_end(&mut buf) {
            return Ok(ReadOnce::Done(Hashed::Skip(scan::skip_reason(&e))));
        }
        if changed_during_read(&file, abs, &stat, buf.len() as u64) {
            // Checked before storing: a mix is not even put.
            return Ok(ReadOnce::Changed);
        }
        if let Some(h) = first_read.as_mut() {
            h.update(&buf);
        }
        (blobs.put(&buf)?, buf.len() as u64)
    };
    if changed_during_read(&file, abs, &stat, size) {
        return Ok(ReadOnce::Changed);
    }
    // A racy file: the bytes count only if a second read agrees.
    if let Some(first) = first_read {
        if digest_again(&mut file) != Some(first.finalize()) {
            return Ok(ReadOnce::Changed);
        }
    }
    Ok(ReadOnce::Done(Hashed::Ok(
        Entry {
            kind: EntryKind::File,
            mode: stat.perm(),
            size,
            hash,
        },
        stat,
    )))
}

/// How often a large file read for a checkpoint is checked for a change
/// while it is read (an `fstat`): every 4 MiB, which costs nothing beside
/// the read and bounds what a read of a file being rewritten stores for
/// nothing.
pub const CHANGE_CHECK_EVERY_BYTES: u64 = 4 * 1024 * 1024;

/// A file being read for a checkpoint that stops, with an error, once its
/// stat is no longer `before` (see [`CHANGE_CHECK_EVERY_BYTES`]).
struct Watched<'a> {
    file: &'a mut std::fs::File,
    before: Stat,
    since_check: u64,
    /// True once it stopped for that reason.
    changed: bool,
    /// For a racy file, the digest of the bytes as they are read.
    digest: Option<&'a mut blake3::Hasher>,
}

impl Read for Watched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.since_check >= CHANGE_CHECK_EVERY_BYTES {
            self.since_check = 0;
            let now = self.file.metadata().map(|m| Stat::of(&m))?;
            if (now.size, now.mtime_ns, now.ctime_ns)
                != (self.before.size, self.before.mtime_ns, self.before.ctime_ns)
            {
                self.changed = true;
                return Err(std::io::Error::other("the file changed while it was read"));
            }
        }
        let n = self.file.read(buf)?;
        self.since_check += n as u64;
        if let Some(h) = self.digest.as_mut() {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
}

/// True when the file open as `file` (at `abs`, stat `before` when it was
/// opened, `read` bytes read from it) may have changed while it was read.
/// A stat that cannot be taken counts as a change: the read is not trusted.
fn changed_during_read(file: &std::fs::File, abs: &Path, before: &Stat, read: u64) -> bool {
    if read != before.size {
        return true;
    }
    let Ok(now) = file.metadata().map(|m| Stat::of(&m)) else {
        return true;
    };
    if (now.size, now.mtime_ns, now.ctime_ns) != (before.size, before.mtime_ns, before.ctime_ns) {
        return true;
    }
    // Replaced by another file (a save by rename) since it was opened: what
    // was read is whole but no longer the file at the path.
    match std::fs::symlink_metadata(abs).map(|m| Stat::of(&m)) {
        Ok(at_path) => (at_path.dev, at_path.ino) != (before.dev, before.ino),
        Err(_) => true,
    }
}

#[cfg(unix)]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(not(unix))]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    s.to_string_lossy().as_bytes().to_vec()
}

/// A capture with at least this many files to store, into a blob store
/// without a compression dictionary, first trains one from samples of them
/// (so all of them, not only the ones stored after a background training
/// finishes, are compressed with it).
pub(crate) const DICT_PRIME_MIN_FILES: usize = 500;
/// Sample bytes read for that training (1 MiB: about a tenth of a second
/// of training, about as good a dictionary as 4 MiB on source text).
pub(crate) const DICT_PRIME_SAMPLE_BYTES: u64 = 1024 * 1024;

/// See [`DICT_PRIME_MIN_FILES`]. Best effort: a file that cannot be read is
/// skipped, and a failed training leaves the store as it was.
fn prime_dictionary<B: BlobAccess + ?Sized>(blobs: &B, ws: &Workspace, jobs: &[&Found]) {
    if jobs.len() < DICT_PRIME_MIN_FILES || !blobs.wants_dictionary() {
        return;
    }
    let small: Vec<&&Found> = jobs
        .iter()
        .filter(|f| {
            f.kind == EntryKind::File && cairn_engine::blob::dict::is_sample_len(f.stat.size)
        })
        .collect();
    // Spread over the whole list (not only the first directory walked).
    let mut samples: Vec<Vec<u8>> = Vec::new();
    let mut total = 0u64;
    let step = (small.len() / 256).max(1);
    for f in small.iter().step_by(step) {
        if total >= DICT_PRIME_SAMPLE_BYTES {
            break;
        }
        // Never through a symlink swapped in since the scan.
        let mut b = Vec::new();
        if let Ok(mut file) = scan::open_nofollow(&ws.root().join(&f.rel)) {
            let is_file = file.metadata().is_ok_and(|m| m.is_file());
            if is_file && file.read_to_end(&mut b).is_ok() {
                total += b.len() as u64;
                samples.push(b);
            }
        }
    }
    let refs: Vec<&[u8]> = samples.iter().map(|s| s.as_slice()).collect();
    let _ = blobs.train_dictionary(&refs);
}

/// Hashes (and stores) the given files, on several threads when there are many.
fn hash_all<B: BlobAccess + ?Sized>(
    blobs: &B,
    ws: &Workspace,
    jobs: &[&Found],
) -> Result<Vec<Hashed>> {
    let want = match ws.options().hash_threads {
        0 => crate::workspace::parallelism(),
        n => n,
    };
    let threads = want.clamp(1, MAX_HASH_THREADS);
    let root = ws.root();
    if threads == 1 || jobs.len() < PARALLEL_MIN_JOBS {
        return jobs.iter().map(|f| hash_one(blobs, root, f)).collect();
    }
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<Hashed>> = (0..jobs.len()).map(|_| None).collect();
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<Vec<(usize, Hashed)>> {
                    let mut got = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(f) = jobs.get(i) else { break };
                        got.push((i, hash_one(blobs, root, f)?));
                    }
                    Ok(got)
                })
            })
            .collect();
        for h in handles {
            let got = h
                .join()
                .map_err(|_| SnapshotError::Invalid("a file-hashing thread panicked".into()))??;
            for (i, r) in got {
                results[i] = Some(r);
            }
        }
        Ok(())
    })?;
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| SnapshotError::Invalid("internal: a file was not hashed".into())))
        .collect()
}

/// Marks `p`'s parent and every ancestor dirty.
fn mark_ancestors(p: &str, dirty: &mut HashSet<String>) {
    let mut cur = p;
    while !cur.is_empty() {
        cur = relpath::parent(cur);
        if dirty.contains(cur) {
            break; // already marked, and so are its ancestors
        }
        // Allocated only when new: most paths share a marked parent.
        dirty.insert(cur.to_string());
    }
}

fn dir_entry(mode: u32) -> Entry {
    Entry {
        kind: EntryKind::Dir,
        mode,
        size: 0,
        hash: BlobHash::ZERO,
    }
}

/// Counts a file skipped while hashing, naming its path when the reason
/// is one a checkpoint names (see [`scan::names_the_path`]).
fn count_skip(
    skipped: &mut BTreeMap<String, u64>,
    not_captured: &mut BTreeMap<String, &'static str>,
    rel: &str,
    why: &'static str,
) {
    *skipped.entry(why.to_string()).or_default() += 1;
    if scan::names_the_path(why) {
        not_captured.insert(rel.to_string(), why);
    }
}

/// What [`cached_or_to_read`] gives.
struct Merged {
    /// Every path the scan found -> (entry, stat), in path order; a file
    /// to read holds its place (an empty path and an entry that
    /// [`read_changed`] fills in or takes out: the run is never rebuilt
    /// for them).
    sorted: Vec<(String, Cached)>,
    /// The files to read.
    jobs: Vec<ToRead>,
    /// The index in `sorted` of every directory.
    dirs_at: Vec<usize>,
    /// An entry names the empty blob without reading (the caller stores
    /// it).
    any_empty: bool,
    /// What changed since the cached scan, noted in the same merge pass
    /// that took the cached entries (each cached entry is decoded once a
    /// checkpoint, not again by a second comparison); the files to read
    /// are noted by [`read_changed`] once read.
    changes: Changes,
    /// The scan's paths came in strictly ascending order (each checked
    /// against the one before as it was added, a path given twice kept
    /// once): `sorted` is a run as it is. When `false` (a mistake before
    /// this; never for a walk) `sorted` must be sorted and `changes` is
    /// not to be used: the caller compares the whole runs instead.
    in_order: bool,
}

/// The cached scan's run, read front to back beside the scan's own
/// sorted paths: the paths it passes are gone (noted in [`Changes`]).
/// Paths are compared as bytes (the order of `str` is their bytes'
/// order), so a path of the mapped file is never checked as UTF-8 again.
struct OldRun<'a>(std::iter::Peekable<crate::stat_cache::BytesIter<'a>>);

impl<'a> OldRun<'a> {
    fn of(old: &'a Entries) -> OldRun<'a> {
        OldRun(old.iter_bytes().peekable())
    }

    /// The cached entry of `p`, after noting every cached path before
    /// it as gone.
    fn prev(&mut self, p: &str, ch: &mut Changes) -> Option<Cached> {
        let p = p.as_bytes();
        // One comparison a cached path: before `p` (gone), `p`, or after.
        while let Some(&(op, oc)) = self.0.peek() {
            match op.cmp(p) {
                std::cmp::Ordering::Less => {
                    self.0.next();
                    ch.gone(&String::from_utf8_lossy(op), &oc);
                }
                std::cmp::Ordering::Equal => {
                    self.0.next();
                    return Some(oc);
                }
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }

    /// Notes every cached path left as gone.
    fn rest(self, ch: &mut Changes) {
        for (op, oc) in self.0 {
            ch.gone(&String::from_utf8_lossy(op), &oc);
        }
    }
}

impl Merged {
    /// How `p` stands to the path added last (`None` if none yet).
    fn after_last(&self, p: &str) -> Option<std::cmp::Ordering> {
        let n = self.sorted.len();
        (n > 0).then(|| leaves_path(&self.sorted, &self.jobs, n - 1).cmp(p))
    }

    /// Adds the directory `d` (permission bits `mode`), a path given
    /// twice kept once.
    fn push_dir(&mut self, old: &mut OldRun<'_>, d: String, mode: u32) {
        match self.after_last(&d) {
            Some(std::cmp::Ordering::Equal) => return,
            Some(std::cmp::Ordering::Greater) => self.in_order = false,
            _ => {}
        }
        let prev = old.prev(&d, &mut self.changes);
        let now = Cached {
            entry: dir_entry(mode),
            stat: None,
        };
        self.changes.note(self.sorted.len(), &d, &now, prev);
        self.dirs_at.push(self.sorted.len());
        self.sorted.push((d, now));
    }
}

/// Every path the scan found -> (entry, stat), in path order, with the
/// files to read: files whose stat matches the cache (and are not racy)
/// take the cached entry, and empty files [`empty_without_reading`]
/// vouches for take the empty blob; the others are returned to be read,
/// each holding a place in the run. What changed since the cached scan is
/// noted as the two runs are merged ([`Merged::changes`]).
fn cached_or_to_read(
    cache: &StatCache,
    clock_ns: i64,
    (mut leaves, known): (Vec<Found>, Vec<std::ops::Range<usize>>),
    mut dirs: Vec<(String, u32)>,
) -> Merged {
    // In path order, the cache is read in one merge pass beside them (no
    // search per file), and the next cache is the sorted run this builds:
    // the directories and the files are sorted apart (the smaller
    // elements) and merged into it, so the run of every path is never
    // sorted whole.
    let runs = path_order(&mut leaves, &known);
    drop(known);
    dirs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut m = Merged {
        sorted: Vec::with_capacity(leaves.len() + dirs.len()),
        jobs: Vec::new(),
        dirs_at: Vec::new(),
        any_empty: false,
        changes: Changes::default(),
        in_order: true,
    };
    let mut dirs = dirs.into_iter().peekable();
    let empty = BlobHash::of(b"");
    // Compared as the mapped file's bytes: no path of the cache is
    // copied, and an entry reused as it is makes no `String` of its own
    // (the scan's is moved into the new run).
    let mut old = OldRun::of(&cache.entries);
    for i in runs.into_iter().flatten() {
        // Moved out, an empty string left behind (no allocation).
        let f = Found {
            rel: std::mem::take(&mut leaves[i].rel),
            ..leaves[i]
        };
        // Each path once (a walk finds each once; kept so whatever came
        // in), and each after the one before: the order the run needs is
        // checked here, once.
        match m.after_last(&f.rel) {
            Some(std::cmp::Ordering::Equal) => continue,
            Some(std::cmp::Ordering::Greater) => m.in_order = false,
            _ => {}
        }
        while let Some((d, mode)) = dirs.next_if(|(d, _)| d.as_str() < f.rel.as_str()) {
            m.push_dir(&mut old, d, mode);
        }
        let prev = old.prev(&f.rel, &mut m.changes);
        m.changes.files += 1;
        let at = m.sorted.len();
        match prev {
            Some(c)
                if c.stat == Some(f.stat)
                    && c.entry.kind == f.kind
                    && f.stat.mtime_ns < cache.clock_ns =>
            {
                // As cached: nothing changed, nothing to note.
                m.sorted.push((f.rel, c));
            }
            _ if empty_without_reading(&f, clock_ns) => {
                let now = Cached {
                    entry: Entry {
                        kind: EntryKind::File,
                        mode: f.stat.perm(),
                        size: 0,
                        hash: empty,
                    },
                    stat: Some(f.stat),
                };
                m.changes.note(at, &f.rel, &now, prev);
                m.sorted.push((f.rel, now));
                m.any_empty = true;
            }
            _ => {
                m.jobs.push(ToRead { at, found: f, prev });
                m.sorted.push((String::new(), PLACE_HELD));
            }
        }
    }
    drop(leaves);
    for (d, mode) in dirs {
        m.push_dir(&mut old, d, mode);
    }
    old.rest(&mut m.changes);
    m
}

/// A file a full scan must read, its place in the sorted run of every
/// path ([`cached_or_to_read`]) and its cached entry, if any (to note
/// what changed once it is read).
struct ToRead {
    at: usize,
    found: Found,
    prev: Option<Cached>,
}

/// What holds a file's place in the sorted run until it is read (with an
/// empty path: never left in a cache, see [`read_changed`]).
const PLACE_HELD: Cached = Cached::UNTRUSTED;

/// The path at `at` of a run [`cached_or_to_read`] is building: a held
/// place's is its job's.
fn leaves_path<'a>(sorted: &'a [(String, Cached)], jobs: &'a [ToRead], at: usize) -> &'a str {
    match jobs.last() {
        Some(j) if j.at == at => j.found.rel.as_str(),
        _ => sorted[at].0.as_str(),
    }
}

/// The order in which to take the files `leaves` a walk found so that
/// they come in path order: the walk lists each directory's files as one
/// run already in order ([`scan`] sorts them by name, on the walking
/// threads), and the runs come in the order the threads took the
/// directories. The runs (one a directory) are put in the order of their
/// first paths (a sort of one element a directory); when no run then
/// reaches past the start of the next (no directory's files interleave
/// with another's), that is the order, and nothing is moved. Otherwise (a
/// directory holding files and subdirectories) `leaves` is sorted in
/// place (a stable sort, which finds the runs and merges them) and taken
/// front to back. Sorting every path from scratch was the largest part of
/// a one-file full scan's own CPU at 100,000 files.
///
/// `known` are the runs the walk recorded ([`ScanOut::runs`]: ascending,
/// apart, each one directory's files sorted by name), taken without
/// looking at their paths; only the files between them (a tracked path
/// scanned after the walk) are split into runs path by path (finding
/// every run so was 2-3% of a one-file checkpoint's CPU at 100,000
/// files). A run that is not what the walk says costs no wrong result:
/// [`cached_or_to_read`] checks each path against the one before.
fn path_order(
    leaves: &mut [Found],
    known: &[std::ops::Range<usize>],
) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::with_capacity(known.len() + 1);
    let mut at = 0;
    for k in known {
        if k.start < at || k.end > leaves.len() || k.start >= k.end {
            break; // not what a walk records: the rest is looked at
        }
        split_runs(leaves, at..k.start, &mut runs);
        runs.push(k.clone());
        at = k.end;
    }
    split_runs(leaves, at..leaves.len(), &mut runs);
    runs.sort_unstable_by(|a, b| leaves[a.start].rel.cmp(&leaves[b.start].rel));
    let apart = runs
        .windows(2)
        .all(|w| leaves[w[0].end - 1].rel < leaves[w[1].start].rel);
    if apart {
        return runs;
    }
    leaves.sort_by(|a, b| a.rel.cmp(&b.rel));
    std::iter::once(0..leaves.len()).collect()
}

/// The runs of `leaves[range]`, found path by path: a run ends where the
/// order breaks or the directory changes (a run of two directories' files
/// taken one after the other by one thread could hold a third
/// directory's files between them in path order).
fn split_runs(
    leaves: &[Found],
    range: std::ops::Range<usize>,
    runs: &mut Vec<std::ops::Range<usize>>,
) {
    if range.is_empty() {
        return;
    }
    let mut start = range.start;
    for i in range.start + 1..range.end {
        let (a, b) = (&leaves[i - 1].rel, &leaves[i].rel);
        if a >= b || relpath::parent(a) != relpath::parent(b) {
            runs.push(start..i);
            start = i;
        }
    }
    runs.push(start..range.end);
}

/// True if the scan's own stat of `f` proves it empty, so it need not be
/// opened and read (five system calls and a blob lookup each: most of a
/// first checkpoint of a tree of empty files). A regular file of size 0
/// whose mtime is before `clock_ns` (the file system's clock, read before
/// the walk) and outside [`RACY_WINDOW_NS`]: any write after the stat
/// stamps a later mtime, or a new size, so the next scan sees a stat that
/// differs from the one recorded here and reads it; the same rule under
/// which a cached stat is trusted (`cached_or_to_read`). What is captured
/// is the file as it was when the walk stat it, as for any file whose
/// cached entry is used.
fn empty_without_reading(f: &Found, clock_ns: i64) -> bool {
    f.kind == EntryKind::File && f.stat.size == 0 && f.stat.mtime_ns < clock_ns && !racy(&f.stat)
}

/// Reads (hashes and stores) the files `jobs` whose cached entry could
/// not be used, putting each in the place it holds in `sorted` and noting
/// in `changes` how it differs from its cached entry; what cannot be read
/// is counted as skipped (`skips`: the counts and the paths named) and
/// its place taken out. `sorted` is then the sorted run of every path
/// captured. True if every file was read: else places were taken out,
/// the indices `changes` holds no longer hold, and the caller compares
/// the whole runs instead.
fn read_changed<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    jobs: Vec<ToRead>,
    sorted: &mut Vec<(String, Cached)>,
    changes: &mut Changes,
    skips: (
        &mut BTreeMap<String, u64>,
        &mut BTreeMap<String, &'static str>,
    ),
) -> Result<bool> {
    let (skipped, not_captured) = skips;
    let refs: Vec<&Found> = jobs.iter().map(|j| &j.found).collect();
    prime_dictionary(blobs, ws, &refs);
    let hashed = hash_all(blobs, ws, &refs)?;
    drop(refs);
    let mut any_skipped = false;
    for (j, h) in jobs.into_iter().zip(hashed) {
        match h {
            Hashed::Ok(e, st) => {
                let now = Cached {
                    entry: e,
                    stat: Some(st),
                };
                changes.note(j.at, &j.found.rel, &now, j.prev);
                sorted[j.at] = (j.found.rel, now);
            }
            Hashed::Skip(why) => {
                count_skip(skipped, not_captured, &j.found.rel, why);
                any_skipped = true;
            }
        }
    }
    if any_skipped {
        // Places still held (an empty path: no real path is empty).
        sorted.retain(|(p, _)| !p.is_empty());
    }
    Ok(!any_skipped)
}

/// Sets each directory's node hash and size in `flat` from the tree just
/// built; the directories with their hashes, for the stat cache.
///
/// `dirs_at`, when given, is the index of every directory in `flat` (as
/// [`cached_or_to_read`] placed them): each is set by position, else each
/// is searched for (at 100,000 files, a thousand binary searches, each
/// step a cache miss, were 1% of a one-file checkpoint).
fn note_dir_hashes(
    flat: &mut [(String, Cached)],
    dir_hashes: DirHashes,
    dirs_at: Option<&[usize]>,
) -> Vec<(String, BlobHash, u64)> {
    match dirs_at {
        Some(at) => {
            for &i in at {
                let (p, c) = &mut flat[i];
                if let Some(&(h, s)) = dir_hashes.get(p.as_str()) {
                    c.entry.hash = h;
                    c.entry.size = s;
                }
            }
        }
        None => {
            for (d, &(h, s)) in &dir_hashes {
                if let Ok(i) = flat.binary_search_by(|(p, _)| p.as_str().cmp(d.as_str())) {
                    let c = &mut flat[i].1;
                    c.entry.hash = h;
                    c.entry.size = s;
                }
            }
        }
    }
    dir_hashes
        .into_iter()
        .map(|(d, (h, s))| (d, h, s))
        .collect()
}

/// What changed since the cached scan.
#[derive(Debug, Default, PartialEq)]
struct Changes {
    /// Files added, changed or gone.
    changed: u64,
    /// Files (and symlinks) now.
    files: u64,
    /// Directories that need new nodes.
    dirty: HashSet<String>,
    /// The paths whose cached entry (entry and stat data) differs, for
    /// the stat cache's save ([`Changed`]): by index in the new run, or
    /// gone. Directories that were there before are in `dirs_kept`
    /// instead until their nodes are built.
    cache: Vec<ChangedPath>,
    /// Directories in both: index in the new run and the old entry, to
    /// compare once their node hashes are set ([`listed_changes`]).
    dirs_kept: Vec<(usize, Cached)>,
    /// More than [`MAX_LISTED_CHANGES`] paths changed: `cache` stops there
    /// (the save writes the whole cache).
    cache_over: bool,
}

impl Changes {
    /// Lists `ch` for the stat cache's save, unless the list is full.
    fn list(&mut self, ch: impl FnOnce() -> ChangedPath) {
        if self.cache.len() < MAX_LISTED_CHANGES {
            self.cache.push(ch());
        } else {
            self.cache_over = true;
        }
    }

    /// Notes the cached path `op` (entry `oc`) as gone.
    fn gone(&mut self, op: &str, oc: &Cached) {
        if oc.entry.is_leaf() {
            self.changed += 1;
        }
        mark_ancestors(op, &mut self.dirty);
        self.list(|| ChangedPath::Gone(op.to_string()));
    }

    /// Notes the path `p`, at index `i` of the new run with the entry
    /// `now`, against its cached entry `prev` (`None`: new). Files are
    /// counted by the caller.
    fn note(&mut self, i: usize, p: &str, now: &Cached, prev: Option<Cached>) {
        let e = &now.entry;
        match prev {
            Some(oc) if e.kind == EntryKind::Dir => self.dirs_kept.push((i, oc)),
            Some(oc) if oc == *now => {}
            _ => self.list(|| ChangedPath::Now(i)),
        }
        let prev = prev.map(|oc| oc.entry);
        let same = match prev {
            Some(o) if e.kind == EntryKind::Dir => o.kind == EntryKind::Dir && o.mode == e.mode,
            Some(o) => o == *e,
            None => false,
        };
        if !same {
            // A file that became a directory is a file gone (what is
            // under the directory counts on its own).
            if e.is_leaf() || prev.is_some_and(|o| o.is_leaf()) {
                self.changed += 1;
            }
            mark_ancestors(p, &mut self.dirty);
        }
    }
}

/// Compares the cached scan `old` with `flat`. Both are sorted by path:
/// one merge pass. What [`cached_or_to_read`] and [`read_changed`] note
/// as they go; for a run they could not (a file not read after all, a
/// scan out of order).
fn changes_since(old: &Entries, flat: &[(String, Cached)]) -> Changes {
    let mut c = Changes::default();
    let mut old = OldRun::of(old);
    for (i, (p, now)) in flat.iter().enumerate() {
        if now.entry.is_leaf() {
            c.files += 1;
        }
        let prev = old.prev(p, &mut c);
        c.note(i, p, now, prev);
    }
    old.rest(&mut c);
    c
}

/// The stat cache entries that changed from `from` to the run `flat`
/// (its directories' node hashes set): what [`changes_since`] listed,
/// and the directories kept whose entry now differs; cut short past
/// [`MAX_LISTED_CHANGES`] (`over`: it was already).
fn listed_changes(
    from: &Arc<StatCache>,
    flat: &[(String, Cached)],
    (mut cache, over): (Vec<ChangedPath>, bool),
    dirs_kept: Vec<(usize, Cached)>,
) -> Changed {
    let mut too_many = over;
    for (i, _) in dirs_kept.into_iter().filter(|(i, oc)| flat[*i].1 != *oc) {
        if too_many || cache.len() >= MAX_LISTED_CHANGES {
            too_many = true;
            break;
        }
        cache.push(ChangedPath::Now(i));
    }
    Changed {
        from: from.clone(),
        entries: cache,
        too_many,
    }
}

/// A full capture: walk, re-read only files whose stat changed (or racy
/// ones), store new contents and the directory nodes that changed.
pub(crate) fn capture_full<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    tracked: &BTreeSet<String>,
    dirty_now: &BTreeSet<String>,
) -> Result<Capture> {
    let clock_ns = fs_clock(ws)?;
    // The stat cache is loaded (its file checked whole) on another thread
    // while the walk runs: neither needs the other before the merge, and
    // the load was a serial step of a few to tens of milliseconds at
    // 100,000 files.
    let (cache, scanned) = std::thread::scope(|s| {
        let loading = s.spawn(|| ws.stat_cache().load());
        let scanned = scan::scan_full(ws, tracked);
        (loading.join(), scanned)
    });
    let cache =
        cache.map_err(|_| SnapshotError::Invalid("loading the stat cache panicked".into()))?;
    let ScanOut {
        leaves,
        runs,
        dirs,
        missing,
        mut skipped,
        mut not_captured,
        ..
    } = scanned?;

    let Merged {
        mut sorted,
        jobs,
        dirs_at,
        any_empty,
        mut changes,
        in_order,
    } = cached_or_to_read(&cache, clock_ns, (leaves, runs), dirs);
    if any_empty {
        // Named by entries that did not read their file: stored once here.
        blobs.put(b"")?;
    }
    let all_read = read_changed(
        ws,
        blobs,
        jobs,
        &mut sorted,
        &mut changes,
        (&mut skipped, &mut not_captured),
    )?;
    // In order as `cached_or_to_read` checked it (taking out the places
    // of files not read keeps it so): used as the slice it is until it
    // becomes the next cache.
    let mut flat = sorted;
    if !in_order {
        debug_assert!(false, "a run of paths out of order");
        flat = flat.into_iter().collect::<Entries>().into_vec();
    }
    // The indices noted in the merge hold while no place was taken out
    // nor the run sorted.
    let by_position = in_order && all_read;
    if !by_position {
        changes = changes_since(&cache.entries, &flat);
    }
    let Changes {
        changed,
        files,
        dirty,
        cache: cache_change,
        dirs_kept,
        cache_over,
    } = changes;
    let reuse = cache.dir_hashes();
    let dirty_opt = if cache.root.is_some() {
        Some(&dirty)
    } else {
        None
    };
    let (root, dir_hashes) = manifest::build_from(
        blobs,
        flat.iter().map(|(p, c)| (p, c)),
        |p| {
            flat.binary_search_by(|(q, _)| q.as_str().cmp(p))
                .ok()
                .map(|i| &flat[i].1)
        },
        |c| c.entry,
        &missing,
        &reuse,
        dirty_opt,
    )?;
    let dirs_out = note_dir_hashes(&mut flat, dir_hashes, by_position.then_some(&dirs_at[..]));
    let cache_changed = listed_changes(&cache, &flat, (cache_change, cache_over), dirs_kept);
    let base = cache.root;
    let new_cache = StatCache {
        clock_ns,
        root: Some(root),
        entries: Entries::from_ordered(flat),
        dirs: dirs_out,
    };
    Ok(Capture {
        root,
        missing,
        counts: CheckpointCounts {
            files,
            changed,
            skipped,
        },
        base,
        not_captured,
        new_cache: Some(Arc::new(new_cache)),
        cache_changed: Some(cache_changed),
        captured_dirty: dirty_now.clone(),
        scan: ScanReport::kind(crate::watch_journal::SCAN_FULL),
        journal_point: None,
    })
}

/// A tracked-only capture: re-read only the dirty tracked paths and patch
/// the previous tree along the paths from them to the root.
pub(crate) fn capture_tracked<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    last: &LastCapture,
    dirty_now: &BTreeSet<String>,
) -> Result<Capture> {
    let paths = top_most(dirty_now.iter());
    let out = scan::scan_paths(ws, &paths)?;
    patch(ws, blobs, last, &paths, out, dirty_now, None)
}

/// The paths of `all` that are not below another one of them (a changed
/// directory covers everything under it).
fn top_most<'a>(all: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    // Sorted order puts `a` before `a/b` (and `a-b`, `a.b` between them
    // never start with `a/`), so each path only needs the last kept one.
    let sorted: BTreeSet<&String> = all.collect();
    let mut last: Option<&str> = None;
    for p in sorted {
        if let Some(l) = last {
            if p.len() > l.len() && p.starts_with(l) && p.as_bytes()[l.len()] == b'/' {
                continue;
            }
        }
        paths.insert(p.clone());
        last = Some(p.as_str());
    }
    paths
}

/// A watched capture: re-read the paths the file watcher reported (and the
/// dirty tracked paths) the way a full scan would see them, and patch the
/// previous tree along the paths from them to the root. Gives the same
/// tree as a full scan (tested), without the walk.
pub(crate) fn capture_watched<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    last: &LastCapture,
    changed: &BTreeSet<String>,
    tracked: &BTreeSet<String>,
    dirty_now: &BTreeSet<String>,
) -> Result<Capture> {
    let paths = top_most(changed.iter().chain(dirty_now.iter()));
    let mut out = ScanOut::default();
    let mut rules = scan::RulesMemo::default();
    for p in &paths {
        scan::scan_subtree(ws, p, tracked, &mut rules, &mut out)?;
    }
    patch(ws, blobs, last, &paths, out, dirty_now, Some(tracked))
}

/// Patches the tree `last` with what was found at `paths`. With `tracked`
/// (a watched capture), the missing-path list is updated for every tracked
/// path at or below the re-read ones; otherwise for the re-read ones.
fn patch<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    last: &LastCapture,
    paths: &BTreeSet<String>,
    out: ScanOut,
    dirty_now: &BTreeSet<String>,
    tracked: Option<&BTreeSet<String>>,
) -> Result<Capture> {
    let ScanOut {
        leaves,
        dirs,
        missing,
        mut skipped,
        mut not_captured,
        ..
    } = out;
    let mut flat = hash_leaves(ws, blobs, &leaves, &mut skipped, &mut not_captured)?;
    let dir_modes: HashMap<&str, u32> = dirs.iter().map(|(d, m)| (d.as_str(), *m)).collect();
    for (d, m) in &dirs {
        flat.insert(d.clone(), dir_entry(*m));
    }

    // A directory created on the way to a re-read path (set_path) takes its
    // mode from the scan, or else from the disk.
    let root_dir = ws.root();
    let dir_mode = |d: &str| {
        dir_modes.get(d).copied().or_else(|| {
            std::fs::symlink_metadata(root_dir.join(d))
                .ok()
                .map(|m| Stat::of(&m).dir_perm())
        })
    };
    let mut root = last.root;
    let mut files = last.files as i64;
    let mut changed = 0u64;
    for p in paths {
        let old = manifest::list_under(blobs, &root, p)?;
        let new = entry_at(blobs, &flat, &dir_modes, p)?;
        let (more_files, changed_here) = file_changes_under(&flat, &old, p);
        files += more_files;
        changed += changed_here;
        root = set_path(blobs, root, p, new, &dir_mode)?;
    }
    let root = update_missing(blobs, root, paths, tracked, &missing)?;
    Ok(Capture {
        root,
        missing: BTreeSet::new(),
        counts: CheckpointCounts {
            files: files.max(0) as u64,
            changed,
            skipped,
        },
        base: Some(last.root),
        not_captured,
        new_cache: None,
        cache_changed: None,
        captured_dirty: dirty_now.clone(),
        scan: ScanReport::kind(if tracked.is_some() {
            crate::watch_journal::SCAN_WATCHED
        } else {
            crate::watch_journal::SCAN_TRACKED
        }),
        journal_point: None,
    })
}

/// Hashes (and stores) the files and symlinks a patch re-reads; the
/// entries, by path. What cannot be read is counted as skipped.
fn hash_leaves<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    leaves: &[Found],
    skipped: &mut BTreeMap<String, u64>,
    not_captured: &mut BTreeMap<String, &'static str>,
) -> Result<BTreeMap<String, Entry>> {
    let refs: Vec<&Found> = leaves.iter().collect();
    let hashed = hash_all(blobs, ws, &refs)?;
    let mut flat: BTreeMap<String, Entry> = BTreeMap::new();
    for (f, h) in leaves.iter().zip(hashed) {
        match h {
            Hashed::Ok(e, _) => {
                flat.insert(f.rel.clone(), e);
            }
            Hashed::Skip(why) => count_skip(skipped, not_captured, &f.rel, why),
        }
    }
    Ok(flat)
}

/// How the files at or under `p` changed from `old` (the tree there
/// before) to `flat`: files more (or fewer), and files added, changed or
/// gone.
fn file_changes_under(flat: &BTreeMap<String, Entry>, old: &Manifest, p: &String) -> (i64, u64) {
    let new_files: BTreeMap<&str, Entry> = flat
        .iter()
        .filter(|(k, e)| e.is_leaf() && relpath::in_scope(k, std::slice::from_ref(p)))
        .map(|(k, e)| (k.as_str(), *e))
        .collect();
    let old_files: BTreeMap<&str, Entry> = old.files().map(|(k, e)| (k.as_str(), *e)).collect();
    let more = new_files.len() as i64 - old_files.len() as i64;
    let mut changed = new_files
        .iter()
        .filter(|(k, e)| old_files.get(*k) != Some(*e))
        .count() as u64;
    changed += old_files
        .keys()
        .filter(|k| !new_files.contains_key(*k))
        .count() as u64;
    (more, changed)
}

/// The entry a patch sets at the re-read path `p`: none if it is gone, the
/// file's, or for a directory the subtree re-rooted at `p`, built.
fn entry_at<B: BlobAccess + ?Sized>(
    blobs: &B,
    flat: &BTreeMap<String, Entry>,
    dir_modes: &HashMap<&str, u32>,
    p: &str,
) -> Result<Option<Entry>> {
    Ok(match flat.get(p) {
        None => None,
        Some(e) if e.kind != EntryKind::Dir => Some(*e),
        Some(_) => {
            let prefix = format!("{p}/");
            let sub: BTreeMap<String, Entry> = flat
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, e)| (k[prefix.len()..].to_string(), *e))
                .collect();
            let (h, dh) = manifest::build(blobs, &sub, &BTreeSet::new(), &DirHashes::new(), None)?;
            let size = dh.get("").map_or(0, |v| v.1);
            Some(Entry {
                kind: EntryKind::Dir,
                mode: dir_modes.get(p).copied().unwrap_or(0o755),
                size,
                hash: h,
            })
        }
    })
}

/// Updates the root's list of tracked paths that do not exist for the
/// paths a patch concerns (see [`patch`]); returns the new root.
fn update_missing<B: BlobAccess + ?Sized>(
    blobs: &B,
    root: BlobHash,
    paths: &BTreeSet<String>,
    tracked: Option<&BTreeSet<String>>,
    missing: &BTreeSet<String>,
) -> Result<BlobHash> {
    let mut node = manifest::read_node(blobs, &root)?;
    let mut miss: BTreeSet<String> = node.missing.iter().cloned().collect();
    let concerned: Vec<&String> = match tracked {
        None => paths.iter().collect(),
        Some(t) => t
            .iter()
            .filter(|t| {
                paths
                    .iter()
                    .any(|p| relpath::in_scope(t, std::slice::from_ref(p)))
            })
            .collect(),
    };
    for p in concerned {
        if missing.contains(p) {
            miss.insert(p.clone());
        } else {
            miss.remove(p);
        }
    }
    if node.missing.iter().ne(miss.iter()) {
        node.missing = miss.into_iter().collect();
        return blobs.put(&node.encode());
    }
    Ok(root)
}

fn node_set(node: &mut Node, name: &str, e: Option<Entry>) {
    match node
        .entries
        .binary_search_by(|(n, _)| n.as_bytes().cmp(name.as_bytes()))
    {
        Ok(i) => match e {
            Some(e) => node.entries[i].1 = e,
            None => {
                node.entries.remove(i);
            }
        },
        Err(i) => {
            if let Some(e) = e {
                node.entries.insert(i, (name.to_string(), e));
            }
        }
    }
}

/// Sets (or removes, with `None`) the entry at `path` in the tree `root`,
/// writing new nodes only along the path; returns the new root. Missing
/// intermediate directories are created with the mode `dir_mode` gives.
pub(crate) fn set_path<B: BlobAccess + ?Sized>(
    blobs: &B,
    root: BlobHash,
    path: &str,
    new: Option<Entry>,
    dir_mode: &dyn Fn(&str) -> Option<u32>,
) -> Result<BlobHash> {
    let comps: Vec<&str> = path.split('/').collect();
    let mut nodes: Vec<Node> = vec![manifest::read_node(blobs, &root)?];
    let mut modes: Vec<u32> = Vec::new();
    for i in 0..comps.len() - 1 {
        let dir = comps[..=i].join("/");
        match nodes[i].get(comps[i]).copied() {
            Some(e) if e.kind == EntryKind::Dir => {
                nodes.push(manifest::read_node(blobs, &e.hash)?);
                modes.push(dir_mode(&dir).unwrap_or(e.mode));
            }
            _ => {
                if new.is_none() {
                    return Ok(root); // nothing there to remove
                }
                nodes.push(Node::default());
                modes.push(dir_mode(&dir).unwrap_or(0o755));
            }
        }
    }
    let mut cur = new;
    for i in (0..comps.len()).rev() {
        let node = &mut nodes[i];
        node_set(node, comps[i], cur);
        let h = blobs.put(&node.encode())?;
        if i == 0 {
            return Ok(h);
        }
        let size = node
            .entries
            .iter()
            .map(|(_, e)| e.size)
            .fold(0u64, u64::saturating_add);
        cur = Some(Entry {
            kind: EntryKind::Dir,
            mode: modes[i - 1],
            size,
            hash: h,
        });
    }
    Ok(root)
}

/// Reads the whole manifest of a checkpoint (for rollback and queries).
pub fn read_manifest<B: BlobRead + ?Sized>(blobs: &B, root: &BlobHash) -> Result<Manifest> {
    manifest::list(blobs, root)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn found(rel: &str) -> Found {
        Found {
            rel: rel.to_string(),
            kind: EntryKind::File,
            stat: Stat {
                size: 1,
                mtime_ns: 1,
                ctime_ns: 1,
                ino: 1,
                dev: 1,
                mode: 0o100644,
            },
        }
    }

    /// The paths in the order [`path_order`] takes them.
    fn taken(mut leaves: Vec<Found>, known: &[std::ops::Range<usize>]) -> Vec<String> {
        let runs = path_order(&mut leaves, known);
        runs.into_iter()
            .flatten()
            .map(|i| leaves[i].rel.clone())
            .collect()
    }

    /// Directories' runs (each sorted, as the walk leaves them) in any
    /// order come out in path order, whether they interleave (`a/…`
    /// after `a.b`; a directory with files and subdirectories) or not.
    #[test]
    fn path_order_merges_directory_runs_into_path_order() {
        let dirs: [&[&str]; 6] = [
            &["a/b/c", "a/b/d"],
            &["a.b", "a0", "top"],
            &["a/x", "a/z"],
            &["a-b/y"],
            &["a/b.c/e"],
            &["z/1", "z/2", "z/3"],
        ];
        let mut want: Vec<String> = dirs
            .iter()
            .flat_map(|d| d.iter())
            .map(|s| s.to_string())
            .collect();
        want.sort();
        // Every rotation and its reverse of the runs' order.
        for k in 0..dirs.len() {
            for rev in [false, true] {
                let mut order: Vec<&[&str]> = dirs.to_vec();
                order.rotate_left(k);
                if rev {
                    order.reverse();
                }
                let leaves: Vec<Found> = order
                    .iter()
                    .flat_map(|d| d.iter())
                    .map(|p| found(p))
                    .collect();
                // The runs as a walk records them (one a directory), none,
                // or only some: the same order.
                let mut known = Vec::new();
                let mut at = 0;
                for d in &order {
                    known.push(at..at + d.len());
                    at += d.len();
                }
                assert_eq!(
                    taken(leaves.clone(), &[]),
                    want,
                    "rotation {k} reversed {rev}"
                );
                assert_eq!(
                    taken(leaves.clone(), &known),
                    want,
                    "rotation {k}, runs known"
                );
                assert_eq!(
                    taken(leaves, &known[1..3]),
                    want,
                    "rotation {k}, some known"
                );
            }
        }
        // Runs that do not interleave are taken as they lie, not moved.
        let mut apart = vec![found("q/1"), found("q/2"), found("b/1"), found("b/2")];
        let runs = path_order(&mut apart, &[]);
        assert_eq!(runs, vec![2..4, 0..2]);
        assert_eq!(apart[0].rel, "q/1");
    }

    /// What the merge of a full scan with the cached scan notes as it goes
    /// (and [`read_changed`] once the files are read) is what comparing the
    /// two whole runs afterwards finds ([`changes_since`]): counts, dirty
    /// directories, the stat cache's changed paths and the directories
    /// kept; from a cache in memory and from one read in place from its
    /// file, and with the walk's runs known or not.
    #[test]
    fn the_changes_a_merge_notes_are_the_changes_a_comparison_finds() {
        let st = |ino: u64, size: u64| Stat {
            size,
            mtime_ns: 10,
            ctime_ns: 10,
            ino,
            dev: 1,
            mode: 0o100644,
        };
        let file = |h: &[u8], s: Stat| Cached {
            entry: Entry {
                kind: EntryKind::File,
                mode: 0o644,
                size: s.size,
                hash: BlobHash::of(h),
            },
            stat: Some(s),
        };
        let dir = |mode: u32| Cached {
            entry: dir_entry(mode),
            stat: None,
        };
        let leaf = |rel: &str, s: Stat| Found {
            rel: rel.to_string(),
            kind: EntryKind::File,
            stat: s,
        };
        // Before: a file kept, one edited, one gone, one touched (the
        // same bytes), one to become a directory; a directory to become
        // a file, one whose mode changes, one gone with its file.
        let old: Entries = [
            ("a", file(b"a", st(1, 1))),
            ("d", dir(0o755)),
            ("d/b", file(b"b", st(2, 1))),
            ("d/c", file(b"c", st(3, 1))),
            ("d/t", file(b"t", st(9, 1))),
            ("e", file(b"e", st(4, 1))),
            ("f", dir(0o755)),
            ("g", dir(0o755)),
            ("g/x", file(b"x", st(5, 1))),
            ("m", dir(0o700)),
            ("m/k", file(b"k", st(6, 1))),
        ]
        .into_iter()
        .map(|(p, c)| (p.to_string(), c))
        .collect();
        let cache = StatCache {
            clock_ns: 100,
            root: None,
            entries: old,
            dirs: Vec::new(),
        };
        // After (the walk's runs, one a directory, in the order threads
        // might take them): `d/b` edited, `d/c` gone, `d/t` touched, `e` a
        // directory holding `e/n`, `f` a file, `g` gone, `m` chmod'ed,
        // `z` new and empty.
        let scan = || {
            let leaves = vec![
                leaf("e/n", st(7, 1)),
                leaf("d/b", st(12, 2)),
                leaf("d/t", st(19, 1)),
                leaf("m/k", st(6, 1)),
                leaf("a", st(1, 1)),
                leaf("f", st(8, 1)),
                leaf("z", st(10, 0)),
            ];
            let runs = vec![0..1, 1..3, 3..4, 4..7];
            let dirs = vec![
                ("m".to_string(), 0o755),
                ("d".to_string(), 0o755),
                ("e".to_string(), 0o755),
            ];
            (leaves, runs, dirs)
        };
        let read = |rel: &str, s: Stat| match rel {
            "d/t" => file(b"t", s),
            _ => file(rel.as_bytes(), s),
        };
        let mapped = StatCache::decode(&cache.encode()).unwrap();
        assert!(mapped.entries.is_mapped());
        for (cache, known) in [(&cache, true), (&cache, false), (&mapped, true)] {
            let (leaves, runs, dirs) = scan();
            let runs = if known { runs } else { Vec::new() };
            let Merged {
                mut sorted,
                jobs,
                dirs_at,
                mut changes,
                in_order,
                ..
            } = cached_or_to_read(cache, 1_000, (leaves, runs), dirs);
            assert!(in_order);
            let read_paths: Vec<&str> = jobs.iter().map(|j| j.found.rel.as_str()).collect();
            assert_eq!(
                read_paths,
                ["d/b", "d/t", "e/n", "f"],
                "`a`, `m/k` as cached"
            );
            for j in jobs {
                let now = read(&j.found.rel, j.found.stat);
                changes.note(j.at, &j.found.rel, &now, j.prev);
                sorted[j.at] = (j.found.rel, now);
            }
            let paths: Vec<&str> = sorted.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(
                paths,
                ["a", "d", "d/b", "d/t", "e", "e/n", "f", "m", "m/k", "z"]
            );
            let dir_paths: Vec<&str> = dirs_at.iter().map(|&i| sorted[i].0.as_str()).collect();
            assert_eq!(dir_paths, ["d", "e", "m"]);
            let mut compared = changes_since(&cache.entries, &sorted);
            let key = |c: &ChangedPath| match c {
                ChangedPath::Now(i) => (0, *i, String::new()),
                ChangedPath::Gone(p) => (1, 0, p.clone()),
            };
            changes.cache.sort_by_key(key);
            compared.cache.sort_by_key(key);
            assert_eq!(changes, compared);
            // d/b, d/c, e, e/n, f, g/x, z (d/t: the same bytes; m: a mode).
            assert_eq!(changes.changed, 7);
            assert_eq!(changes.files, 7);
        }
    }

    /// The list of changed paths for the save stops at
    /// [`MAX_LISTED_CHANGES`] and says it was cut short (a first
    /// checkpoint of 1,000,000 files listed every path for nothing: the
    /// whole cache is written anyway); the counts and the dirty
    /// directories go on.
    #[test]
    fn the_changes_listed_for_the_save_stop_at_the_most_a_delta_holds() {
        let now = Cached {
            entry: Entry {
                kind: EntryKind::File,
                mode: 0o644,
                size: 0,
                hash: BlobHash::of(b""),
            },
            stat: None,
        };
        let mut c = Changes::default();
        let n = MAX_LISTED_CHANGES + 10;
        for i in 0..n {
            c.note(i, &format!("d{}/f{i}", i % 7), &now, None);
        }
        c.gone("g/x", &now);
        assert_eq!(c.cache.len(), MAX_LISTED_CHANGES);
        assert!(c.cache_over);
        assert_eq!(c.changed, n as u64 + 1);
        assert_eq!(c.dirty.len(), 7 + 2, "d0..d6, g and the root");
        let from = Arc::new(StatCache::default());
        let listed = listed_changes(&from, &[], (c.cache, c.cache_over), Vec::new());
        assert!(listed.too_many);
        let mut few = Changes::default();
        few.note(0, "a", &now, None);
        let listed = listed_changes(&from, &[], (few.cache, few.cache_over), Vec::new());
        assert!(!listed.too_many);
        assert_eq!(listed.entries, [ChangedPath::Now(0)]);
    }

    /// What a full scan lists as changed from the stat cache it loaded
    /// (read in place from its file) is what comparing every path of the
    /// two caches finds: edits, a file touched with the same contents, new
    /// and gone files and directories, a file become a directory.
    #[test]
    fn a_full_scan_lists_the_stat_cache_changes_a_comparison_finds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        for p in ["a", "m/b", "m/c", "n/d", "z"] {
            let abs = root.join(p);
            std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
            std::fs::write(abs, p).unwrap();
        }
        let store = dir.path().join("store");
        let open = || Workspace::open(&root, &store, crate::SnapshotOptions::default()).unwrap();
        let blobs = crate::blobs::MemBlobs::new();
        let none = BTreeSet::new();
        let first = capture_full(&open(), &blobs, &none, &none).unwrap();
        let ch = first.cache_changed.unwrap();
        assert!(ch.agrees_with_compared(first.new_cache.as_ref().unwrap()));
        assert_eq!(ch.entries.len(), 7, "every path new");
        let ws = open();
        ws.stat_cache()
            .save(first.new_cache.unwrap(), false)
            .unwrap();
        // Older than the scan's clock, so the next scan trusts them.
        std::thread::sleep(std::time::Duration::from_millis(20));

        std::fs::write(root.join("m/b"), "changed").unwrap();
        let c = root.join("m/c");
        std::fs::File::options()
            .write(true)
            .open(&c)
            .unwrap()
            .set_modified(std::time::SystemTime::now())
            .unwrap();
        std::fs::remove_file(root.join("n/d")).unwrap();
        std::fs::remove_dir(root.join("n")).unwrap();
        std::fs::remove_file(root.join("z")).unwrap();
        std::fs::create_dir_all(root.join("z")).unwrap();
        std::fs::write(root.join("z/e"), "e").unwrap();
        std::fs::write(root.join("b"), "b").unwrap();
        let ws = open();
        let second = capture_full(&ws, &blobs, &none, &none).unwrap();
        let ch = second.cache_changed.unwrap();
        assert!(ch.from.entries.is_mapped(), "loaded from its file");
        let now = second.new_cache.unwrap();
        assert!(ch.agrees_with_compared(&now), "{:?}", ch.entries);
        let mut listed: Vec<&str> = ch
            .entries
            .iter()
            .map(|c| match c {
                ChangedPath::Now(i) => now.entries.at(*i).unwrap().0,
                ChangedPath::Gone(p) => p.as_str(),
            })
            .collect();
        listed.sort_unstable();
        // "a" is kept as it was; "m" and "" (the root is no entry) change
        // their node hashes.
        assert_eq!(listed, ["b", "m", "m/b", "m/c", "n", "n/d", "z", "z/e"]);
    }

    /// A file to read that cannot be (gone since the walk) leaves no held
    /// place in the sorted run: the run is the files read and the
    /// directories, each with its entry, in path order.
    #[test]
    fn a_file_gone_before_it_is_read_leaves_no_place_held() {
        let dir = tempfile::tempdir().unwrap();
        for p in ["a", "m/b", "m/c", "z"] {
            let abs = dir.path().join(p);
            std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
            std::fs::write(abs, p).unwrap();
        }
        let ws = Workspace::open(
            dir.path(),
            &dir.path().join(".cairn/snapshot"),
            crate::SnapshotOptions::default(),
        )
        .unwrap();
        let out = scan::scan_full(&ws, &BTreeSet::new()).unwrap();
        let Merged {
            mut sorted,
            jobs,
            mut changes,
            ..
        } = cached_or_to_read(
            &StatCache::default(),
            i64::MAX,
            (out.leaves, out.runs),
            out.dirs,
        );
        assert_eq!(jobs.len(), 4);
        std::fs::remove_file(dir.path().join("m/b")).unwrap();
        let (mut skipped, mut named) = (BTreeMap::new(), BTreeMap::new());
        let blobs = crate::blobs::MemBlobs::new();
        let all_read = read_changed(
            &ws,
            &blobs,
            jobs,
            &mut sorted,
            &mut changes,
            (&mut skipped, &mut named),
        )
        .unwrap();
        assert!(!all_read, "a file was not read: its place is gone");
        let paths: Vec<&str> = sorted.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["a", "m", "m/c", "z"]);
        assert_eq!(skipped.get(scan::reason::VANISHED), Some(&1));
        let c = sorted.iter().find(|(p, _)| p == "m/c").unwrap().1;
        assert_eq!(c.entry.hash, BlobHash::of(b"m/c"));
        assert!(c.stat.is_some());
    }
}
