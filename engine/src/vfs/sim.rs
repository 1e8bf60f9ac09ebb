//! A simulated disk for crash and fault tests, and the in-memory store.
//!
//! [`SimVfs`] keeps, for every file, the bytes the process has *written*
//! apart from the bytes that are *durable*, and, for every directory, the
//! entries the process sees apart from the entries that are durable. It
//! follows the [`Vfs`] contract literally, which is what POSIX promises and
//! no more:
//!
//! * `sync_data` on a file makes its written bytes (and length) durable;
//! * a create, rename, remove or `mkdir` is durable only after `sync_dir`
//!   on its parent directory;
//! * [`SimVfs::crash`] throws away everything that was not made durable,
//!   releases every lock and invalidates every open handle (the process that
//!   held them is gone); [`SimVfs::crash_tearing`] additionally keeps a
//!   random prefix of the last write that was never synced (with the
//!   file's earlier pending bytes before it), as a disk that lost power in
//!   the middle of flushing it would.
//!
//! After a failed `sync_data` the simulated kernel behaves like Linux: the
//! dirty pages are dropped from the write-back queue, so the process still
//! reads its written bytes back but a later `sync_data` that succeeds does
//! *not* make them durable. An engine that retries a failed fsync and then
//! acknowledges is caught by this.
//!
//! Faults are injected with [`SimVfs::fail_after`] (the Nth applicable
//! operation from now fails once), [`SimVfs::fail_from`] (every applicable
//! operation from the Nth on fails until [`SimVfs::clear_faults`]),
//! [`SimVfs::set_capacity_bytes`] (a disk that fills up) or a per-operation
//! closure ([`SimVfs::set_fault_hook`]). Everything random comes from a
//! seeded generator and there is no clock, so a run is a pure function of
//! its seed and its sequence of calls.
//!
//! [`SimVfs::new`] is a plain in-memory disk: it does not track durability
//! (syncs are free, each file is stored once) and a crash loses nothing.
//! This is the backing of the in-memory store.
//!
//! ```
//! use std::path::Path;
//! use cairn_engine::vfs::{OpenMode, SimVfs, Vfs};
//!
//! let disk = SimVfs::seeded(7);
//! disk.create_dir_all(Path::new("/s")).unwrap();
//! disk.sync_dir(Path::new("/")).unwrap();
//! let f = disk.open(Path::new("/s/a"), OpenMode::CreateNew).unwrap();
//! f.write_all_at(b"hello", 0).unwrap();
//! f.sync_data().unwrap();
//! // The name of the file was never made durable: it is lost in a crash.
//! disk.crash();
//! assert!(!disk.exists(Path::new("/s/a")));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{LockGuard, Mapped, OpenMode, Vfs, VfsFile};

/// How many un-synced writes are remembered for tearing. Only the last one
/// is ever torn; the bound keeps memory flat when a caller never syncs.
const MAX_TRACKED_UNSYNCED_WRITES: usize = 1024;

/// An I/O fault the simulated disk can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `EIO` on a write (`write_all_at`): a random prefix of the buffer may
    /// have reached the file before the error.
    WriteEio,
    /// `EIO` on an fsync (`sync_data` or `sync_dir`): nothing pending becomes
    /// durable, and for `sync_data` the pending bytes are dropped from the
    /// write-back queue (a later successful sync does not persist them).
    SyncEio,
    /// `ENOSPC` on anything that allocates space: a write, a `set_len` that
    /// grows, an open that creates. A random prefix of a write may land.
    Enospc,
}

impl Fault {
    /// The `errno` this fault reports.
    fn errno(self) -> i32 {
        match self {
            Fault::WriteEio | Fault::SyncEio => 5, // EIO
            Fault::Enospc => 28,                   // ENOSPC
        }
    }

    fn error(self) -> io::Error {
        io::Error::from_raw_os_error(self.errno())
    }

    /// True if this fault is injected into `op` by [`SimVfs::fail_after`].
    fn applies_to(self, op: &SimOp<'_>) -> bool {
        match self {
            Fault::WriteEio => matches!(op, SimOp::Write { .. }),
            Fault::SyncEio => matches!(op, SimOp::SyncData { .. } | SimOp::SyncDir { .. }),
            Fault::Enospc => match op {
                SimOp::Write { .. } => true,
                SimOp::SetLen { grows, .. } => *grows,
                SimOp::Open { mode, .. } => {
                    matches!(mode, OpenMode::CreateNew | OpenMode::CreateTruncate)
                }
                _ => false,
            },
        }
    }
}

/// One operation on the simulated disk, as seen by a fault hook.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum SimOp<'a> {
    /// [`Vfs::open`].
    Open {
        /// The file.
        path: &'a Path,
        /// How it is opened.
        mode: OpenMode,
    },
    /// [`VfsFile::read_at`] or [`Vfs::map`].
    Read {
        /// The file (its name when it was opened).
        path: &'a Path,
    },
    /// [`VfsFile::write_all_at`].
    Write {
        /// The file (its name when it was opened).
        path: &'a Path,
        /// Byte offset.
        offset: u64,
        /// Bytes written.
        len: usize,
    },
    /// [`VfsFile::set_len`].
    SetLen {
        /// The file (its name when it was opened).
        path: &'a Path,
        /// The new length.
        len: u64,
        /// True if the file grows.
        grows: bool,
    },
    /// [`VfsFile::sync_data`].
    SyncData {
        /// The file (its name when it was opened).
        path: &'a Path,
    },
    /// [`Vfs::sync_dir`].
    SyncDir {
        /// The directory.
        path: &'a Path,
    },
    /// [`Vfs::rename`].
    Rename {
        /// Old name.
        from: &'a Path,
        /// New name.
        to: &'a Path,
    },
    /// [`Vfs::remove_file`].
    Remove {
        /// The file.
        path: &'a Path,
    },
    /// [`Vfs::create_dir_all`], [`Vfs::list`] or [`Vfs::lock_exclusive`].
    Dir {
        /// The directory or lock file.
        path: &'a Path,
    },
}

/// Operation counters of a [`SimVfs`], for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Every operation (each counts once, failed ones too).
    pub ops: u64,
    /// Successful `write_all_at` calls.
    pub writes: u64,
    /// Bytes passed to successful `write_all_at` calls.
    pub bytes_written: u64,
    /// Successful `sync_data` calls.
    pub syncs: u64,
    /// Successful `sync_dir` calls.
    pub dir_syncs: u64,
    /// Simulated crashes.
    pub crashes: u64,
    /// Crashes that tore a write (kept part of an un-synced write).
    pub torn_writes: u64,
    /// Faults injected.
    pub faults_injected: u64,
}

/// A fault-injection closure: called before every operation; returning a
/// fault makes that operation fail with it.
pub type FaultHook = Box<dyn FnMut(&SimOp<'_>) -> Option<Fault> + Send>;

/// A directory entry in one of the two namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir,
}

#[derive(Debug, Default)]
struct Inode {
    /// What the process reads back.
    written: Vec<u8>,
    /// What survives a crash (unused when durability is not tracked).
    durable: Vec<u8>,
    /// Lowest offset at which `written` may differ from `durable` because of
    /// a change not yet synced (`None`: nothing pending).
    dirty_from: Option<usize>,
    /// A shared copy of `written` handed out by `map`, dropped on change.
    mapped: Option<Arc<[u8]>>,
}

impl Inode {
    fn touch(&mut self, from: usize, track: bool) {
        self.mapped = None;
        if track {
            let from = from.min(self.written.len());
            self.dirty_from = Some(self.dirty_from.map_or(from, |d| d.min(from)));
        }
    }

    fn write(&mut self, buf: &[u8], offset: usize, track: bool) {
        self.touch(offset, track);
        let end = offset + buf.len();
        if self.written.len() < end {
            self.written.resize(end, 0);
        }
        self.written[offset..end].copy_from_slice(buf);
    }

    /// Makes the pending bytes durable. `written[..dirty_from]` equals
    /// `durable[..dirty_from]` except where an earlier failed sync dropped
    /// pages, which stay lost (as on Linux).
    fn sync(&mut self) {
        if let Some(from) = self.dirty_from.take() {
            let keep = from.min(self.durable.len());
            self.durable.truncate(keep);
            self.durable.extend_from_slice(&self.written[keep..]);
        }
    }

    /// A failed sync: the pending pages are no longer pending, and not
    /// durable either. The durable length follows the written one (the size
    /// may reach the disk), with zeros where the data never did.
    fn drop_pending(&mut self) {
        if self.dirty_from.take().is_some() {
            let n = self.written.len();
            self.durable.resize(n, 0);
        }
    }
}

/// A small deterministic generator (splitmix64): no dependency, no clock.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=max`.
    fn up_to(&mut self, max: usize) -> usize {
        (self.next_u64() % (max as u64 + 1)) as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    fault: Fault,
    /// Applicable operations still to let through before failing.
    remaining: u64,
    /// Keep failing after the first injection.
    sticky: bool,
}

struct Disk {
    track: bool,
    rng: Rng,
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    live: BTreeMap<PathBuf, Entry>,
    durable: BTreeMap<PathBuf, Entry>,
    /// Bumped by every crash: handles and lock guards of an older generation
    /// belong to a dead process.
    generation: u64,
    locks: BTreeMap<PathBuf, u64>,
    next_lock: u64,
    /// Open handles per inode (current generation only).
    handles: BTreeMap<u64, usize>,
    /// Un-synced writes, oldest first: (inode, offset, length).
    unsynced: Vec<(u64, usize, usize)>,
    plans: Vec<Plan>,
    hook: Option<FaultHook>,
    capacity_bytes: Option<u64>,
    stats: SimStats,
}

impl fmt::Debug for Disk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Disk")
            .field("track", &self.track)
            .field("files", &self.inodes.len())
            .field("generation", &self.generation)
            .field("stats", &self.stats)
            .finish()
    }
}

fn norm(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The parent of a normalized path ("" for a bare relative name).
fn parent_of(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The file system root ("/" or "", relative root) always exists.
fn is_root(p: &Path) -> bool {
    p.as_os_str().is_empty() || p.parent().is_none()
}

fn not_found(what: &str, p: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{what} {}: no such file or directory", p.display()),
    )
}

fn stale() -> io::Error {
    io::Error::other("stale handle: the simulated process that opened it has crashed")
}

impl Disk {
    fn new(seed: u64, track: bool) -> Disk {
        Disk {
            track,
            rng: Rng(seed),
            inodes: BTreeMap::new(),
            next_ino: 1,
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
            generation: 0,
            locks: BTreeMap::new(),
            next_lock: 1,
            handles: BTreeMap::new(),
            unsynced: Vec::new(),
            plans: Vec::new(),
            hook: None,
            capacity_bytes: None,
            stats: SimStats::default(),
        }
    }

    /// Counts `op` and decides whether a fault is injected into it.
    fn check(&mut self, op: SimOp<'_>) -> Option<Fault> {
        self.stats.ops += 1;
        let mut hit = None;
        for plan in &mut self.plans {
            if !plan.fault.applies_to(&op) {
                continue;
            }
            if plan.remaining > 0 {
                plan.remaining -= 1;
            } else if hit.is_none() {
                hit = Some(plan.fault);
            }
        }
        if hit.is_some() {
            self.plans.retain(|p| p.sticky || p.remaining > 0);
        }
        if hit.is_none() {
            if let Some(hook) = self.hook.as_mut() {
                hit = hook(&op);
            }
        }
        if hit.is_none() {
            if let (Some(cap), SimOp::Write { .. } | SimOp::SetLen { grows: true, .. }) =
                (self.capacity_bytes, &op)
            {
                let grow = match op {
                    SimOp::Write { len, .. } => len as u64,
                    SimOp::SetLen { len, .. } => len,
                    _ => 0,
                };
                if self.used_bytes() + grow > cap {
                    hit = Some(Fault::Enospc);
                }
            }
        }
        if hit.is_some() {
            self.stats.faults_injected += 1;
        }
        hit
    }

    fn used_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.written.len() as u64).sum()
    }

    fn is_dir(&self, p: &Path) -> bool {
        is_root(p) || self.live.get(p) == Some(&Entry::Dir)
    }

    fn file_ino(&self, p: &Path) -> Option<u64> {
        match self.live.get(p) {
            Some(Entry::File(ino)) => Some(*ino),
            _ => None,
        }
    }

    fn need_parent_dir(&self, p: &Path) -> io::Result<()> {
        let parent = parent_of(p);
        if self.is_dir(&parent) {
            Ok(())
        } else {
            Err(not_found("parent directory of", p))
        }
    }

    fn inode(&mut self, ino: u64) -> &mut Inode {
        self.inodes.entry(ino).or_default()
    }

    fn new_inode(&mut self) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, Inode::default());
        ino
    }

    fn note_unsynced(&mut self, ino: u64, offset: usize, len: usize) {
        if !self.track {
            return;
        }
        if self.unsynced.len() >= MAX_TRACKED_UNSYNCED_WRITES {
            self.unsynced.remove(0);
        }
        self.unsynced.push((ino, offset, len));
    }

    fn crash(&mut self, tear: bool) {
        self.stats.crashes += 1;
        self.generation += 1;
        self.locks.clear();
        self.handles.clear();
        if !self.track {
            self.unsynced.clear();
            return;
        }
        if tear {
            if let Some((ino, offset, len)) = self.unsynced.last().copied() {
                let keep = self.rng.up_to(len);
                if let Some(inode) = self.inodes.get_mut(&ino) {
                    // The disk wrote the file's pending bytes in order and
                    // stopped inside the last write: everything pending
                    // before it lands, then a prefix of it. (Nothing later
                    // lands without what came before, as with a page cache
                    // flushing a file front to back.)
                    let end = (offset + keep).min(inode.written.len());
                    let start = inode.dirty_from.unwrap_or(offset).min(offset);
                    if end > start {
                        let piece = inode.written[start..end].to_vec();
                        if inode.durable.len() < end {
                            inode.durable.resize(end, 0);
                        }
                        inode.durable[start..end].copy_from_slice(&piece);
                        self.stats.torn_writes += 1;
                    }
                }
            }
        }
        self.unsynced.clear();
        // Keep only durable entries whose every ancestor directory is durable.
        let durable = std::mem::take(&mut self.durable);
        let mut kept = BTreeMap::new();
        for (path, entry) in &durable {
            let mut ok = true;
            let mut a = parent_of(path);
            while !is_root(&a) {
                if durable.get(&a) != Some(&Entry::Dir) {
                    ok = false;
                    break;
                }
                a = parent_of(&a);
            }
            if ok {
                kept.insert(path.clone(), *entry);
            }
        }
        let referenced: std::collections::BTreeSet<u64> = kept
            .values()
            .filter_map(|e| match e {
                Entry::File(ino) => Some(*ino),
                Entry::Dir => None,
            })
            .collect();
        self.inodes.retain(|ino, _| referenced.contains(ino));
        for inode in self.inodes.values_mut() {
            inode.written = inode.durable.clone();
            inode.dirty_from = None;
            inode.mapped = None;
        }
        self.live = kept.clone();
        self.durable = kept;
    }

    /// Frees an inode once no name (written or durable) and no open
    /// handle refers to it, so removed files do not pile up in memory.
    fn maybe_free(&mut self, ino: u64) {
        if self.handles.get(&ino).copied().unwrap_or(0) > 0 {
            return;
        }
        let named = |ns: &BTreeMap<PathBuf, Entry>| ns.values().any(|e| *e == Entry::File(ino));
        if named(&self.live) || (self.track && named(&self.durable)) {
            return;
        }
        self.inodes.remove(&ino);
        self.unsynced.retain(|w| w.0 != ino);
    }
}

/// A simulated disk; see the [module documentation](self).
///
/// Cloning gives another handle on the same disk.
#[derive(Clone)]
pub struct SimVfs {
    disk: Arc<Mutex<Disk>>,
}

impl fmt::Debug for SimVfs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SimVfs").field(&*self.disk.lock()).finish()
    }
}

impl Default for SimVfs {
    fn default() -> Self {
        SimVfs::new()
    }
}

impl SimVfs {
    /// A plain in-memory disk that does not track durability: syncs cost
    /// nothing, each file is held once, and a crash loses no data (it only
    /// releases locks and closes handles). The in-memory store uses it.
    pub fn new() -> SimVfs {
        SimVfs {
            disk: Arc::new(Mutex::new(Disk::new(0, false))),
        }
    }

    /// A crash-testing disk: written and durable bytes are kept apart, and
    /// every random choice (torn-write length, partial writes on faults,
    /// listing order) comes from `seed`.
    pub fn seeded(seed: u64) -> SimVfs {
        SimVfs {
            disk: Arc::new(Mutex::new(Disk::new(seed, true))),
        }
    }

    /// True if this disk keeps written and durable bytes apart
    /// ([`SimVfs::seeded`]), false for the plain in-memory disk.
    pub fn tracks_durability(&self) -> bool {
        self.disk.lock().track
    }

    /// Simulates power loss: every byte and directory entry not made durable
    /// is lost, all locks are released and every open handle (and lock
    /// guard) of the crashed process stops working.
    pub fn crash(&self) {
        self.disk.lock().crash(false);
    }

    /// Like [`SimVfs::crash`], but the last write that was never synced is
    /// torn: a random prefix of it (possibly empty, possibly all of it)
    /// reaches the disk, together with every earlier un-synced change to
    /// the same file from the lowest changed offset up to it (the disk
    /// flushed the file in order and lost power inside that write).
    pub fn crash_tearing(&self) {
        self.disk.lock().crash(true);
    }

    /// The `n_ops`-th applicable operation from now (counting from 0: `0`
    /// fails the next one) fails once with `fault`; see [`Fault`] for which
    /// operations each fault applies to.
    pub fn fail_after(&self, n_ops: u64, fault: Fault) {
        self.disk.lock().plans.push(Plan {
            fault,
            remaining: n_ops,
            sticky: false,
        });
    }

    /// Like [`SimVfs::fail_after`], but every applicable operation from
    /// then on fails too, until [`SimVfs::clear_faults`] (a disk that stays
    /// full or broken).
    pub fn fail_from(&self, n_ops: u64, fault: Fault) {
        self.disk.lock().plans.push(Plan {
            fault,
            remaining: n_ops,
            sticky: true,
        });
    }

    /// Calls `hook` before every operation; when it returns a fault, that
    /// operation fails with it. Replaces any previous hook.
    pub fn set_fault_hook(&self, hook: impl FnMut(&SimOp<'_>) -> Option<Fault> + Send + 'static) {
        self.disk.lock().hook = Some(Box::new(hook));
    }

    /// A disk of `bytes` capacity (the sum of all file lengths): a write or
    /// growth past it fails with `ENOSPC`. `None` removes the limit.
    pub fn set_capacity_bytes(&self, bytes: Option<u64>) {
        self.disk.lock().capacity_bytes = bytes;
    }

    /// Removes every planned fault, the fault hook and the capacity limit.
    pub fn clear_faults(&self) {
        let mut d = self.disk.lock();
        d.plans.clear();
        d.hook = None;
        d.capacity_bytes = None;
    }

    /// The operation counters.
    pub fn stats(&self) -> SimStats {
        self.disk.lock().stats
    }

    /// The bytes the process would read from `path` now (written), if it is a file.
    pub fn written_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let d = self.disk.lock();
        let ino = d.file_ino(&norm(path))?;
        d.inodes.get(&ino).map(|i| i.written.clone())
    }

    /// The bytes of `path` that would survive a crash now, if its name is
    /// durable (with durability untracked: the written bytes).
    pub fn durable_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let d = self.disk.lock();
        let p = norm(path);
        if !d.track {
            let ino = d.file_ino(&p)?;
            return d.inodes.get(&ino).map(|i| i.written.clone());
        }
        match d.durable.get(&p) {
            Some(Entry::File(ino)) => d.inodes.get(ino).map(|i| i.durable.clone()),
            _ => None,
        }
    }

    /// Overwrites bytes of `path` in place, both written and durable,
    /// without counting an operation: for corruption tests ("a bit flipped
    /// on the platter"). Extends the file with zeros if needed.
    pub fn corrupt(&self, path: &Path, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut d = self.disk.lock();
        let p = norm(path);
        let ino = d.file_ino(&p).ok_or_else(|| not_found("corrupt", &p))?;
        let offset = usize::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        let inode = d.inode(ino);
        inode.mapped = None;
        for buf in [&mut inode.written, &mut inode.durable] {
            let end = offset + bytes.len();
            if buf.len() < end {
                buf.resize(end, 0);
            }
            buf[offset..end].copy_from_slice(bytes);
        }
        Ok(())
    }
}

/// An open file on a [`SimVfs`].
struct SimFile {
    disk: Arc<Mutex<Disk>>,
    ino: u64,
    generation: u64,
    writable: bool,
    path: PathBuf,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimFile({})", self.path.display())
    }
}

impl SimFile {
    fn live<'a>(&self, d: &'a mut Disk) -> io::Result<&'a mut Disk> {
        if d.generation != self.generation {
            return Err(stale());
        }
        Ok(d)
    }

    fn need_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} was opened read-only", self.path.display()),
            ))
        }
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut d = self.disk.lock();
        if d.generation != self.generation {
            return;
        }
        if let Some(n) = d.handles.get_mut(&self.ino) {
            *n -= 1;
            if *n == 0 {
                d.handles.remove(&self.ino);
                d.maybe_free(self.ino);
            }
        }
    }
}

impl VfsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut g = self.disk.lock();
        let d = self.live(&mut g)?;
        if let Some(f) = d.check(SimOp::Read { path: &self.path }) {
            return Err(f.error());
        }
        let data = &d.inode(self.ino).written;
        let Ok(off) = usize::try_from(offset) else {
            return Ok(0);
        };
        if off >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - off);
        buf[..n].copy_from_slice(&data[off..off + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.need_writable()?;
        let mut g = self.disk.lock();
        let d = self.live(&mut g)?;
        let off = usize::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        let track = d.track;
        if let Some(f) = d.check(SimOp::Write {
            path: &self.path,
            offset,
            len: buf.len(),
        }) {
            // A failing write may still have put a prefix of its bytes in place.
            let part = d.rng.up_to(buf.len());
            if part > 0 {
                d.inode(self.ino).write(&buf[..part], off, track);
                d.note_unsynced(self.ino, off, part);
            }
            return Err(f.error());
        }
        d.inode(self.ino).write(buf, off, track);
        d.note_unsynced(self.ino, off, buf.len());
        d.stats.writes += 1;
        d.stats.bytes_written += buf.len() as u64;
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let mut g = self.disk.lock();
        let d = self.live(&mut g)?;
        Ok(d.inode(self.ino).written.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.need_writable()?;
        let mut g = self.disk.lock();
        let d = self.live(&mut g)?;
        let n = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
        let track = d.track;
        let cur = d.inode(self.ino).written.len();
        if let Some(f) = d.check(SimOp::SetLen {
            path: &self.path,
            len,
            grows: n > cur,
        }) {
            return Err(f.error());
        }
        let inode = d.inode(self.ino);
        inode.touch(n, track);
        inode.written.resize(n, 0);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut g = self.disk.lock();
        let d = self.live(&mut g)?;
        if let Some(f) = d.check(SimOp::SyncData { path: &self.path }) {
            if f == Fault::SyncEio && d.track {
                d.inode(self.ino).drop_pending();
                let ino = self.ino;
                d.unsynced.retain(|w| w.0 != ino);
            }
            return Err(f.error());
        }
        if d.track {
            d.inode(self.ino).sync();
            let ino = self.ino;
            d.unsynced.retain(|w| w.0 != ino);
        }
        d.stats.syncs += 1;
        Ok(())
    }
}

struct SimLock {
    disk: Arc<Mutex<Disk>>,
    path: PathBuf,
    token: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut d = self.disk.lock();
        if d.locks.get(&self.path) == Some(&self.token) {
            d.locks.remove(&self.path);
        }
    }
}

impl Vfs for SimVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        let p = norm(path);
        let mut d = self.disk.lock();
        if let Some(f) = d.check(SimOp::Open { path: &p, mode }) {
            return Err(f.error());
        }
        if d.is_dir(&p) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", p.display()),
            ));
        }
        let existing = d.file_ino(&p);
        let track = d.track;
        let ino = match (mode, existing) {
            (OpenMode::Read | OpenMode::ReadWrite, Some(ino)) => ino,
            (OpenMode::Read | OpenMode::ReadWrite, None) => return Err(not_found("open", &p)),
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} already exists", p.display()),
                ))
            }
            (OpenMode::CreateTruncate, Some(ino)) => {
                let inode = d.inode(ino);
                if !inode.written.is_empty() {
                    inode.touch(0, track);
                    inode.written.clear();
                }
                ino
            }
            (OpenMode::CreateNew | OpenMode::CreateTruncate, None) => {
                d.need_parent_dir(&p)?;
                let ino = d.new_inode();
                d.live.insert(p.clone(), Entry::File(ino));
                ino
            }
        };
        *d.handles.entry(ino).or_insert(0) += 1;
        Ok(Arc::new(SimFile {
            disk: Arc::clone(&self.disk),
            ino,
            generation: d.generation,
            writable: mode != OpenMode::Read,
            path: p,
        }))
    }

    fn map(&self, path: &Path) -> io::Result<Mapped> {
        let p = norm(path);
        let mut d = self.disk.lock();
        if let Some(f) = d.check(SimOp::Read { path: &p }) {
            return Err(f.error());
        }
        let ino = d.file_ino(&p).ok_or_else(|| not_found("map", &p))?;
        let inode = d.inode(ino);
        let bytes = match &inode.mapped {
            Some(b) => Arc::clone(b),
            None => {
                let b: Arc<[u8]> = Arc::from(inode.written.as_slice());
                inode.mapped = Some(Arc::clone(&b));
                b
            }
        };
        Ok(Mapped::Bytes(bytes))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let p = norm(dir);
        let mut d = self.disk.lock();
        if let Some(f) = d.check(SimOp::Dir { path: &p }) {
            return Err(f.error());
        }
        if !d.is_dir(&p) {
            return Err(not_found("list", &p));
        }
        let mut out: Vec<String> = d
            .live
            .keys()
            .filter(|k| k.parent() == Some(p.as_path()))
            .filter_map(|k| k.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        if d.track {
            // Directory order is unspecified; shuffle (seeded) so no caller
            // comes to rely on an order.
            for i in (1..out.len()).rev() {
                let j = d.rng.up_to(i);
                out.swap(i, j);
            }
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let p = norm(dir);
        let mut d = self.disk.lock();
        if let Some(f) = d.check(SimOp::Dir { path: &p }) {
            return Err(f.error());
        }
        let mut chain = Vec::new();
        let mut a = p.clone();
        while !is_root(&a) {
            chain.push(a.clone());
            a = parent_of(&a);
        }
        for a in chain.into_iter().rev() {
            match d.live.get(&a) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{} exists and is a file", a.display()),
                    ))
                }
                None => {
                    d.live.insert(a, Entry::Dir);
                }
            }
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (f, t) = (norm(from), norm(to));
        let mut d = self.disk.lock();
        if let Some(fault) = d.check(SimOp::Rename { from: &f, to: &t }) {
            return Err(fault.error());
        }
        let ino = d.file_ino(&f).ok_or_else(|| not_found("rename", &f))?;
        d.need_parent_dir(&t)?;
        if d.is_dir(&t) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("rename target {} is a directory", t.display()),
            ));
        }
        if f == t {
            return Ok(());
        }
        d.live.remove(&f);
        let replaced = d.live.insert(t, Entry::File(ino));
        if let Some(Entry::File(old)) = replaced {
            d.maybe_free(old);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let p = norm(path);
        let mut d = self.disk.lock();
        if let Some(f) = d.check(SimOp::Remove { path: &p }) {
            return Err(f.error());
        }
        let ino = d.file_ino(&p).ok_or_else(|| not_found("remove", &p))?;
        d.live.remove(&p);
        d.maybe_free(ino);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let p = norm(dir);
        let mut d = self.disk.lock();
        if let Some(f) = d.check(SimOp::SyncDir { path: &p }) {
            return Err(f.error());
        }
        if !d.is_dir(&p) {
            return Err(not_found("sync directory", &p));
        }
        if d.track {
            let in_dir = |k: &PathBuf| k.parent() == Some(p.as_path());
            let dropped: Vec<u64> = d
                .durable
                .iter()
                .filter(|(k, _)| in_dir(k))
                .filter_map(|(_, e)| match e {
                    Entry::File(ino) => Some(*ino),
                    Entry::Dir => None,
                })
                .collect();
            d.durable.retain(|k, _| !in_dir(k));
            let now: Vec<(PathBuf, Entry)> = d
                .live
                .iter()
                .filter(|(k, _)| in_dir(k))
                .map(|(k, e)| (k.clone(), *e))
                .collect();
            d.durable.extend(now);
            for ino in dropped {
                d.maybe_free(ino);
            }
        }
        d.stats.dir_syncs += 1;
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let p = norm(path);
        let d = self.disk.lock();
        d.is_dir(&p) || d.live.contains_key(&p)
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<LockGuard> {
        let p = norm(path);
        let mut d = self.disk.lock();
        if let Some(f) = d.check(SimOp::Dir { path: &p }) {
            return Err(f.error());
        }
        if d.file_ino(&p).is_none() {
            d.need_parent_dir(&p)?;
            let ino = d.new_inode();
            d.live.insert(p.clone(), Entry::File(ino));
        }
        if d.locks.contains_key(&p) {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "locked"));
        }
        let token = d.next_lock;
        d.next_lock += 1;
        d.locks.insert(p.clone(), token);
        Ok(LockGuard(Box::new(SimLock {
            disk: Arc::clone(&self.disk),
            path: p,
            token,
        })))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    /// A seeded disk with a durable directory `/d`.
    fn disk() -> SimVfs {
        let v = SimVfs::seeded(1);
        v.create_dir_all(p("/d")).unwrap();
        v.sync_dir(p("/")).unwrap();
        v
    }

    fn read_all(v: &SimVfs, path: &str) -> Vec<u8> {
        let f = v.open(p(path), OpenMode::Read).unwrap();
        let mut buf = vec![0; f.len().unwrap() as usize];
        f.read_exact_at(&mut buf, 0).unwrap();
        buf
    }

    /// Creates `/d/name` with `data`, synced, and its entry synced.
    fn durable_file(v: &SimVfs, name: &str, data: &[u8]) -> Arc<dyn VfsFile> {
        let f = v.open(&p("/d").join(name), OpenMode::CreateNew).unwrap();
        f.write_all_at(data, 0).unwrap();
        f.sync_data().unwrap();
        v.sync_dir(p("/d")).unwrap();
        f
    }

    #[test]
    fn unsynced_data_is_lost_on_crash() {
        let v = disk();
        let f = durable_file(&v, "a", b"durable");
        f.write_all_at(b" and not", 7).unwrap();
        assert_eq!(read_all(&v, "/d/a"), b"durable and not");
        v.crash();
        assert_eq!(read_all(&v, "/d/a"), b"durable");
    }

    #[test]
    fn synced_data_survives_crash() {
        let v = disk();
        let f = durable_file(&v, "a", b"one");
        f.write_all_at(b"two", 3).unwrap();
        f.sync_data().unwrap();
        v.crash();
        assert_eq!(read_all(&v, "/d/a"), b"onetwo");
    }

    #[test]
    fn overwrite_and_truncate_unsynced_are_undone() {
        let v = disk();
        let f = durable_file(&v, "a", b"0123456789");
        f.write_all_at(b"xx", 2).unwrap();
        f.set_len(4).unwrap();
        assert_eq!(read_all(&v, "/d/a"), b"01xx");
        v.crash();
        assert_eq!(read_all(&v, "/d/a"), b"0123456789");
        // The same, synced, sticks.
        let f = v.open(p("/d/a"), OpenMode::ReadWrite).unwrap();
        f.write_all_at(b"yy", 8).unwrap();
        f.set_len(9).unwrap();
        f.sync_data().unwrap();
        v.crash();
        assert_eq!(read_all(&v, "/d/a"), b"01234567y");
    }

    #[test]
    fn create_without_dir_sync_is_lost() {
        let v = disk();
        let f = v.open(p("/d/new"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"data", 0).unwrap();
        f.sync_data().unwrap();
        assert!(v.exists(p("/d/new")));
        v.crash();
        assert!(!v.exists(p("/d/new")));
        assert!(v.list(p("/d")).unwrap().is_empty());
    }

    #[test]
    fn rename_without_dir_sync_is_lost() {
        let v = disk();
        durable_file(&v, "tmp", b"new");
        durable_file(&v, "dst", b"old");
        v.rename(p("/d/tmp"), p("/d/dst")).unwrap();
        assert_eq!(read_all(&v, "/d/dst"), b"new");
        assert!(!v.exists(p("/d/tmp")));
        v.crash();
        assert_eq!(read_all(&v, "/d/dst"), b"old");
        assert_eq!(read_all(&v, "/d/tmp"), b"new");
        // With the directory synced, the rename sticks.
        v.rename(p("/d/tmp"), p("/d/dst")).unwrap();
        v.sync_dir(p("/d")).unwrap();
        v.crash();
        assert_eq!(read_all(&v, "/d/dst"), b"new");
        assert!(!v.exists(p("/d/tmp")));
    }

    #[test]
    fn remove_without_dir_sync_is_undone() {
        let v = disk();
        durable_file(&v, "a", b"keep");
        v.remove_file(p("/d/a")).unwrap();
        assert!(!v.exists(p("/d/a")));
        v.crash();
        assert_eq!(read_all(&v, "/d/a"), b"keep");
        v.remove_file(p("/d/a")).unwrap();
        v.sync_dir(p("/d")).unwrap();
        v.crash();
        assert!(!v.exists(p("/d/a")));
    }

    #[test]
    fn directory_without_parent_sync_is_lost_with_its_files() {
        let v = disk();
        v.create_dir_all(p("/d/sub")).unwrap();
        let f = v.open(p("/d/sub/x"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync_data().unwrap();
        v.sync_dir(p("/d/sub")).unwrap();
        v.crash();
        assert!(!v.exists(p("/d/sub")));
        assert!(!v.exists(p("/d/sub/x")));
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_the_last_write() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let v = SimVfs::seeded(seed);
            v.create_dir_all(p("/d")).unwrap();
            v.sync_dir(p("/")).unwrap();
            let f = durable_file(&v, "a", b"base");
            f.write_all_at(b"ABCDEFGH", 4).unwrap();
            v.crash_tearing();
            let got = read_all(&v, "/d/a");
            assert!(got.starts_with(b"base"));
            assert!(b"ABCDEFGH".starts_with(&got[4..]), "{got:?}");
            seen.insert(got.len());
        }
        assert!(seen.len() > 3, "tear lengths vary with the seed: {seen:?}");
    }

    #[test]
    fn torn_crash_never_leaves_a_gap_before_the_torn_write() {
        for seed in 0..40 {
            let v = SimVfs::seeded(seed);
            v.create_dir_all(p("/d")).unwrap();
            v.sync_dir(p("/")).unwrap();
            let f = durable_file(&v, "a", b"base");
            f.write_all_at(b"1111", 4).unwrap();
            f.write_all_at(b"2222", 8).unwrap();
            v.crash_tearing();
            let got = read_all(&v, "/d/a");
            assert!(b"base11112222".starts_with(&got), "seed {seed}: {got:?}");
            assert!(got.len() >= 8, "the earlier pending write lands whole");
        }
    }

    #[test]
    fn tearing_is_deterministic_per_seed() {
        let run = |seed| {
            let v = SimVfs::seeded(seed);
            v.create_dir_all(p("/d")).unwrap();
            v.sync_dir(p("/")).unwrap();
            let f = durable_file(&v, "a", b"");
            f.write_all_at(&[7u8; 1000], 0).unwrap();
            v.crash_tearing();
            read_all(&v, "/d/a").len()
        };
        for seed in 0..10 {
            assert_eq!(run(seed), run(seed));
        }
    }

    #[test]
    fn synced_write_is_never_torn() {
        let v = disk();
        let f = durable_file(&v, "a", b"");
        f.write_all_at(b"whole", 0).unwrap();
        f.sync_data().unwrap();
        v.crash_tearing();
        assert_eq!(read_all(&v, "/d/a"), b"whole");
        assert_eq!(v.stats().torn_writes, 0);
    }

    #[test]
    fn crash_invalidates_handles_and_releases_locks() {
        let v = disk();
        let f = durable_file(&v, "a", b"x");
        let g = v.lock_exclusive(p("/d/LOCK")).unwrap();
        assert_eq!(
            v.lock_exclusive(p("/d/LOCK")).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        v.crash();
        assert!(f.write_all_at(b"y", 0).is_err());
        assert!(f.sync_data().is_err());
        let g2 = v.lock_exclusive(p("/d/LOCK")).unwrap();
        // The dead process's guard must not release the new holder's lock.
        drop(g);
        assert_eq!(
            v.lock_exclusive(p("/d/LOCK")).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(g2);
        v.lock_exclusive(p("/d/LOCK")).unwrap();
    }

    #[test]
    fn lock_is_released_when_the_guard_drops() {
        let v = disk();
        let g = v.lock_exclusive(p("/d/LOCK")).unwrap();
        let other = v.clone();
        assert!(other.lock_exclusive(p("/d/LOCK")).is_err());
        drop(g);
        assert!(other.lock_exclusive(p("/d/LOCK")).is_ok());
    }

    #[test]
    fn failed_fsync_loses_the_pending_bytes_for_good() {
        let v = disk();
        let f = durable_file(&v, "a", b"ok");
        f.write_all_at(b"-lost", 2).unwrap();
        v.fail_after(0, Fault::SyncEio);
        let e = f.sync_data().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5));
        // The process still reads its bytes; a retried fsync "succeeds"...
        assert_eq!(read_all(&v, "/d/a"), b"ok-lost");
        f.sync_data().unwrap();
        v.crash();
        // ...but they never reached the disk.
        assert_ne!(read_all(&v, "/d/a"), b"ok-lost");
        assert!(read_all(&v, "/d/a").starts_with(b"ok"));
        assert_eq!(v.stats().faults_injected, 1);
    }

    #[test]
    fn fail_after_counts_applicable_ops_and_fires_once() {
        let v = disk();
        let f = durable_file(&v, "a", b"");
        v.fail_after(2, Fault::WriteEio);
        f.write_all_at(b"1", 0).unwrap();
        f.sync_data().unwrap(); // not a write: not counted
        f.write_all_at(b"2", 1).unwrap();
        let e = f.write_all_at(b"3", 2).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5));
        f.write_all_at(b"4", 3).unwrap();
    }

    #[test]
    fn fail_from_is_sticky_until_cleared() {
        let v = disk();
        let f = durable_file(&v, "a", b"");
        v.fail_from(1, Fault::Enospc);
        f.write_all_at(b"1", 0).unwrap();
        for _ in 0..3 {
            let e = f.write_all_at(b"22", 1).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        }
        assert!(v.open(p("/d/b"), OpenMode::CreateNew).is_err());
        v.clear_faults();
        f.write_all_at(b"22", 1).unwrap();
        assert_eq!(&read_all(&v, "/d/a")[..3], b"122");
    }

    #[test]
    fn capacity_limit_gives_enospc() {
        let v = disk();
        let f = durable_file(&v, "a", b"");
        v.set_capacity_bytes(Some(10));
        f.write_all_at(&[1; 8], 0).unwrap();
        let e = f.write_all_at(&[1; 8], 8).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(f.set_len(100).is_err());
    }

    #[test]
    fn fault_hook_sees_every_op() {
        let v = disk();
        let f = durable_file(&v, "a", b"");
        v.set_fault_hook(|op| match op {
            SimOp::SyncDir { .. } => Some(Fault::SyncEio),
            _ => None,
        });
        f.write_all_at(b"x", 0).unwrap();
        f.sync_data().unwrap();
        assert!(v.sync_dir(p("/d")).is_err());
        v.clear_faults();
        v.sync_dir(p("/d")).unwrap();
    }

    #[test]
    fn open_modes_behave_like_posix() {
        let v = disk();
        assert_eq!(
            v.open(p("/d/a"), OpenMode::Read).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(v.open(p("/nodir/a"), OpenMode::CreateNew).is_err());
        let f = v.open(p("/d/a"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"abc", 0).unwrap();
        assert_eq!(
            v.open(p("/d/a"), OpenMode::CreateNew).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let r = v.open(p("/d/a"), OpenMode::Read).unwrap();
        assert!(r.write_all_at(b"z", 0).is_err());
        let t = v.open(p("/d/a"), OpenMode::CreateTruncate).unwrap();
        assert_eq!(t.len().unwrap(), 0);
        assert_eq!(r.len().unwrap(), 0, "same inode");
        let mut buf = [0u8; 4];
        assert_eq!(r.read_at(&mut buf, 10).unwrap(), 0);
    }

    #[test]
    fn unlinked_file_stays_readable_through_open_handle() {
        let v = disk();
        let f = durable_file(&v, "a", b"still here");
        v.remove_file(p("/d/a")).unwrap();
        let mut buf = [0u8; 10];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"still here");
    }

    #[test]
    fn map_is_a_snapshot_and_sees_later_writes_on_remap() {
        let v = disk();
        let f = durable_file(&v, "a", b"one");
        let m1 = v.map(p("/d/a")).unwrap();
        f.write_all_at(b"two", 3).unwrap();
        let m2 = v.map(p("/d/a")).unwrap();
        assert_eq!(&*m1, b"one");
        assert_eq!(&*m2, b"onetwo");
    }

    #[test]
    fn list_names_only_direct_children() {
        let v = disk();
        durable_file(&v, "a", b"");
        durable_file(&v, "b", b"");
        v.create_dir_all(p("/d/sub/deep")).unwrap();
        let mut names = v.list(p("/d")).unwrap();
        names.sort();
        assert_eq!(names, ["a", "b", "sub"]);
        assert!(v.list(p("/nope")).is_err());
    }

    #[test]
    fn plain_in_memory_disk_never_loses_data() {
        let v = SimVfs::new();
        assert!(!v.tracks_durability());
        v.create_dir_all(p("mem/d")).unwrap();
        let f = v.open(p("mem/d/a"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"kept", 0).unwrap();
        v.crash();
        assert_eq!(read_all(&v, "mem/d/a"), b"kept");
        assert!(f.write_all_at(b"x", 0).is_err(), "handles still die");
    }

    #[test]
    fn removed_files_are_freed() {
        let v = disk();
        for i in 0..10 {
            let name = format!("f{i}");
            let f = durable_file(&v, &name, &[0; 100]);
            drop(f);
            v.remove_file(&p("/d").join(&name)).unwrap();
            v.sync_dir(p("/d")).unwrap();
        }
        assert_eq!(v.disk.lock().inodes.len(), 0);
    }

    #[test]
    fn stats_count_ops() {
        let v = disk();
        let before = v.stats();
        let f = durable_file(&v, "a", b"xy");
        let s = v.stats();
        assert_eq!(s.writes - before.writes, 1);
        assert_eq!(s.bytes_written - before.bytes_written, 2);
        assert_eq!(s.syncs - before.syncs, 1);
        assert_eq!(s.dir_syncs - before.dir_syncs, 1);
        drop(f);
        v.crash();
        assert_eq!(v.stats().crashes, 1);
    }

    #[test]
    fn simvfs_is_send_sync_and_usable_as_dyn_vfs() {
        fn takes(_: Arc<dyn Vfs>) {}
        takes(Arc::new(SimVfs::new()));
    }
}
