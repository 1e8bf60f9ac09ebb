//! The writer: appends from many threads, segment rolling, group commit,
//! the durability policy, and poisoning after a failed write or fsync.
//!
//! Lock order (never taken the other way round): `w` (writer state) ->
//! `view` -> `sync`; `head_mx` is only taken with nothing else held.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_codec::frame::{self, ChainForm, RecordKind, FLAG_BATCH_CONT};
use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{ChainHash, Event, Lsn};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use super::dict::LogDicts;
use super::epoch::Epoch;
use super::options::MAX_SEGMENT_SIZE_BYTES;
use super::recovery::{self, TailState, TAIL_STATE_FILE};
use super::segment::{self, Sealed};
use super::sparse_index::SparseIndex;
use super::view::{LogIter, Tail, View};
use super::{Durability, Head, LogOptions, LogStats, Record, VerifyReport};
use crate::vfs::{AppendSpace, OpenMode, Vfs, VfsFile};
use crate::{EngineError, Result};

/// The writer's own state, under the writer lock.
struct WriterState {
    path: PathBuf,
    file: Arc<dyn VfsFile>,
    header: SegmentHeader,
    /// Bytes written to the tail segment.
    end: u64,
    /// LSN of the next record.
    next_lsn: Lsn,
    /// Chain value after the last written record.
    chain: ChainHash,
    /// Offset of the last written frame (0 if none in this segment).
    last_frame_off: u64,
    index: SparseIndex,
    poisoned: Option<String>,
    /// Scratch buffer that gathers a batch's frames into one write.
    batch_buf: Vec<u8>,
    /// With `always`: frames written since the last sync took its mark,
    /// not yet in the file. The sync that covers them writes them all in
    /// one `pwrite` before its fdatasync (see [`Inner::defers`]).
    pending: Vec<u8>,
    /// The file offset of `pending[0]` (the tail's end when it was empty).
    pending_at: u64,
    /// How appends reach the tail segment.
    out: TailOut,
    /// Bytes put into the tail with plain writes while it was
    /// [`TailOut::Unsettled`] (see [`RESERVE_AFTER_BYTES`]).
    unsettled_bytes: u64,
}

/// How appends reach the tail segment's file.
enum TailOut {
    /// Not settled for this segment yet: the next append asks the file for
    /// an [`AppendSpace`].
    Unsettled,
    /// Put into space reserved ahead (the real file system on Linux):
    /// copied into a shared memory map, no system call per append, or with
    /// `always` written into space already written with zeros, so each
    /// sync writes data only. The page cache holds the bytes exactly as
    /// after a `write` either way.
    Reserved(Box<dyn AppendSpace>),
    /// One positional `write` per append or batch (the simulated disk, and
    /// file systems that cannot allocate space ahead).
    Writes,
}

impl TailOut {
    /// How a new or reopened tail segment starts out.
    fn initial(opts: &LogOptions) -> TailOut {
        if opts.reserved_tail {
            TailOut::Unsettled
        } else {
            TailOut::Writes
        }
    }
}

/// A tail segment is written with plain positional writes until this
/// many bytes went into it since it was opened or created; only then is
/// space reserved ahead ([`TailOut::Reserved`]). Reserving writes a step
/// of zeros (1 MiB) and a close cuts what is left of it, an `ftruncate`
/// that waits on the file system's journal: together 2-4 ms on the bench
/// machine, most of what a process that appends a few records and closes
/// (a command-line checkpoint: about 1 KiB) spends on the log beyond its
/// fdatasync. Below this, a plain write costs a few microseconds each,
/// and a writer that keeps appending reaches the reserved space within
/// the first few dozen records.
const RESERVE_AFTER_BYTES: u64 = 16 << 10;

/// A batch buffer that grew past this is dropped after use rather than
/// kept, so one huge batch does not pin its memory for the writer's life.
const BATCH_BUF_KEEP_BYTES: usize = 1 << 20;

/// The most bytes of frames held back for the next sync to write (see
/// [`Inner::defers`]): a group of 16 typical records is ~4 KiB. A write
/// that would pass this writes what is held back, then itself, at once;
/// so a large batch is not copied twice or held in memory.
const PENDING_MAX_BYTES: usize = 256 << 10;

impl WriterState {
    /// The writer's state on open: appending at the end of the tail that
    /// recovery left.
    fn after_recovery(tail: recovery::OpenTail, opts: &LogOptions) -> WriterState {
        WriterState {
            path: tail.path,
            file: tail.file,
            header: tail.header,
            end: tail.len,
            next_lsn: tail.head.last_lsn.next(),
            chain: tail.head.chain,
            last_frame_off: tail.last_frame_off,
            index: tail.index,
            poisoned: None,
            batch_buf: Vec::new(),
            pending: Vec::new(),
            pending_at: 0,
            out: TailOut::initial(opts),
            unsettled_bytes: 0,
        }
    }

    fn records(&self) -> u64 {
        self.next_lsn.0 - self.header.first_lsn.0
    }
    fn mark(&self) -> Mark {
        Mark {
            seg_first: self.header.first_lsn,
            end: self.end,
            head: Head {
                last_lsn: Lsn(self.next_lsn.0 - 1),
                chain: self.chain,
            },
        }
    }
}

/// An event made ready for the log outside the writer lock: one frame,
/// encoded (and zstd'd when that helps) with a placeholder LSN, chain and
/// CRC, which the writer fills in place under the lock. One allocation per
/// event; the body is encoded straight behind the header.
struct Prepared(Vec<u8>);

/// Capacity reserved for a frame before its body is encoded: a typical agent
/// event fits, so the buffer rarely grows.
const PREPARED_CAPACITY: usize = 512;

impl Prepared {
    /// `e` framed for `log`: compressed with the log's dictionary when it
    /// has one, and offered as a training sample while it has none.
    fn new(e: &Event, flags: u8, log: &Inner) -> Result<Prepared> {
        let mut f = Vec::with_capacity(PREPARED_CAPACITY);
        f.resize(frame::HEADER_LEN, 0);
        e.encode_body_into(&mut f)?;
        let dicts = &log.dicts.dicts;
        if dicts.wanted() {
            // May train and publish the dictionary (see `log/dict.rs`).
            dicts.offer(
                &f[frame::HEADER_LEN..],
                log.opts.dictionary_sample_bytes,
                &log.vfs,
                &log.dir,
            );
        }
        let dict = dicts.current();
        if f.len() - frame::HEADER_LEN < frame::compress_min_bytes(dict.is_some()) {
            frame::prepare_header(&mut f, RecordKind::Event, flags);
            return Ok(Prepared(f));
        }
        let mut b = Vec::with_capacity(f.len());
        frame::encode_unplaced(
            &mut b,
            RecordKind::Event,
            flags,
            &f[frame::HEADER_LEN..],
            dict.map(|d| &**d),
        )?;
        Ok(Prepared(b))
    }

    /// Bytes of the finished frame.
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// How far the tail was written at some moment.
struct Mark {
    seg_first: Lsn,
    end: u64,
    head: Head,
}

/// Group-commit state.
struct SyncState {
    /// A leader is gathering its group: its sync will cover every record
    /// written before it takes its mark.
    gathering: bool,
    /// Syncs started since open (each numbered by the count before it).
    started: u64,
    /// Syncs ended, always in the order they started.
    ended: u64,
    /// The last LSN the running syncs will make durable.
    covering: Lsn,
    poisoned: Option<String>,
    /// Records the last fdatasync made durable: more than one means
    /// appenders are running concurrently, and worth waiting for.
    last_group: u64,
    /// How long the last fdatasync took.
    last_sync: Duration,
}

/// See [`Log::group_commit_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// fdatasyncs run by group-commit leaders (and `sync`) since open.
    pub syncs: u64,
    /// Records those fdatasyncs made durable.
    pub records: u64,
    /// Time spent inside those fdatasyncs.
    pub sync_time: Duration,
    /// Time leaders spent gathering records before their fdatasync.
    pub gather_time: Duration,
}

impl SyncState {
    /// No sync run or running yet.
    fn idle() -> SyncState {
        SyncState {
            gathering: false,
            started: 0,
            ended: 0,
            covering: Lsn(0),
            poisoned: None,
            last_group: 0,
            last_sync: Duration::ZERO,
        }
    }
}

/// Starts the thread that syncs the log every `ms` milliseconds (the
/// interval durability policy).
fn spawn_flusher(inner: &Arc<Inner>, ms: u64, dir: &Path) -> Result<JoinHandle<()>> {
    let inner = inner.clone();
    std::thread::Builder::new()
        .name("cairn-log-flush".into())
        .spawn(move || inner.flush_loop(Duration::from_millis(ms)))
        .map_err(|e| EngineError::io("spawn log flusher thread", dir, e))
}

/// The longest a group-commit leader waits for concurrent appenders to
/// write their records before it runs fdatasync. It waits at most half the
/// last fdatasync's duration (so waiting never costs more than a sync is
/// worth) and never past this bound, so a lone appender left after a burst
/// pays at most this once.
const MAX_GROUP_COMMIT_WAIT: Duration = Duration::from_micros(500);

struct Inner {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    opts: LogOptions,
    /// The log's zstd dictionaries (shared with every view).
    dicts: Arc<LogDicts>,
    w: Mutex<WriterState>,
    view: RwLock<View>,
    sync: Mutex<SyncState>,
    /// Every record up to this LSN is durable. Written only under the `sync`
    /// mutex; read without it too, so a waiter released by a sync checks it
    /// and returns without queueing on the mutex.
    durable_at: AtomicU64,
    /// Moves each time a sync ends or the writer is poisoned: appenders
    /// waiting for the running sync to end wait on it.
    sync_epoch: Epoch,
    /// Threads inside `wait_durable` right now.
    inside: AtomicU64,
    /// See [`Log::group_commit_stats`].
    group_syncs: AtomicU64,
    group_records: AtomicU64,
    group_sync_nanos: AtomicU64,
    group_gather_nanos: AtomicU64,
    /// The most threads seen inside `wait_durable` at once since the last
    /// fdatasync began: how many appenders run concurrently, so how many
    /// records the next group can hope to hold.
    peak: AtomicU64,
    /// LSN of the last record written to the tail (durable or not).
    written: AtomicU64,
    /// The highest LSN a thread has waited for while a sync was gathering
    /// or running: tells a leader whether anyone wrote after its mark.
    wait_max: AtomicU64,
    head_mx: Mutex<()>,
    head_cv: Condvar,
    /// The LSN a group-commit leader is waiting to see written (0: none).
    gather_target: AtomicU64,
    /// Who runs the gathering group's sync: the generation of the
    /// gathering (shifted left by one) with bit 0 set once the leader (at
    /// its deadline) or the appender whose record completes the group has
    /// claimed it. The appender runs it at once, so the sync does not wait
    /// for the sleeping leader to be woken and scheduled (the leader is
    /// woken too, and then waits like any other appender).
    gather_claim: AtomicU64,
    /// When the current gathering began, in nanoseconds since `opened`.
    gather_began: AtomicU64,
    /// When the log was opened (a base for `gather_began`).
    opened: Instant,
    gather_mx: Mutex<()>,
    gather_cv: Condvar,
    stop: Mutex<bool>,
    stop_cv: Condvar,
}

/// The log writer. One per store (the caller holds the store lock); share it
/// as `Arc<Log>` between threads. See the [module docs](super).
pub struct Log {
    inner: Arc<Inner>,
    flusher: Option<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.inner.dir)
            .field("head", &self.head())
            .finish()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn poisoned(cause: &str) -> EngineError {
    EngineError::Poisoned {
        cause: cause.to_string(),
    }
}

impl Log {
    /// Opens (creating if needed) the log in `dir` (`.cairn/log`) for
    /// writing and runs recovery: sealed segments are checked by header and
    /// footer, the tail is scanned (unless a clean close left an exact
    /// `tail.state`), a torn tail is truncated and fsynced, and damage
    /// followed by intact records fails with [`EngineError::Corrupt`].
    /// The caller must hold the store lock.
    pub fn open(vfs: Arc<dyn Vfs>, dir: &Path, opts: LogOptions) -> Result<Log> {
        let mut opts = opts;
        opts.segment_size_bytes = opts.segment_size_bytes.min(MAX_SEGMENT_SIZE_BYTES);
        if let Durability::Interval { ms: 0 } = opts.durability {
            return Err(EngineError::Invalid(
                "durability interval must be at least 1 ms".into(),
            ));
        }
        let (sealed, tail) = recovery::open_for_write(&*vfs, dir)?;
        // Every sealed segment was just checked: the table readers open
        // by describes them exactly from here on.
        super::table::save(&*vfs, dir, &sealed);
        let dicts = LogDicts::load(vfs.clone(), dir, true)?;
        let view = recovery::initial_view(sealed, &tail, dicts.clone());
        let head = tail.head;
        let state = WriterState::after_recovery(tail, &opts);
        let inner = Arc::new(Inner {
            vfs,
            dir: dir.to_path_buf(),
            opts,
            dicts,
            w: Mutex::new(state),
            view: RwLock::new(view),
            sync: Mutex::new(SyncState::idle()),
            durable_at: AtomicU64::new(head.last_lsn.0),
            sync_epoch: Epoch::default(),
            inside: AtomicU64::new(0),
            group_syncs: AtomicU64::new(0),
            group_records: AtomicU64::new(0),
            group_sync_nanos: AtomicU64::new(0),
            group_gather_nanos: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            written: AtomicU64::new(head.last_lsn.0),
            wait_max: AtomicU64::new(0),
            head_mx: Mutex::new(()),
            head_cv: Condvar::new(),
            gather_target: AtomicU64::new(0),
            gather_claim: AtomicU64::new(0),
            gather_began: AtomicU64::new(0),
            opened: Instant::now(),
            gather_mx: Mutex::new(()),
            gather_cv: Condvar::new(),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
        });
        let flusher = match opts.durability {
            Durability::Interval { ms } => Some(spawn_flusher(&inner, ms, dir)?),
            _ => None,
        };
        Ok(Log {
            inner,
            flusher,
            closed: false,
        })
    }

    /// Appends one event; returns its LSN once it is durable per the policy.
    pub fn append(&self, event: &Event) -> Result<Lsn> {
        let mut item = Prepared::new(event, 0, &self.inner)?;
        let (first, last, claimed) = self.inner.write(std::slice::from_mut(&mut item))?;
        self.inner.commit(last, claimed)?;
        Ok(first)
    }

    /// Appends events atomically (after a crash, all of them or none);
    /// returns the first and last LSN, or `None` for an empty slice.
    pub fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>> {
        if events.is_empty() {
            return Ok(None);
        }
        let mut items = events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let flags = if i + 1 < events.len() {
                    FLAG_BATCH_CONT
                } else {
                    0
                };
                Prepared::new(e, flags, &self.inner)
            })
            .collect::<Result<Vec<_>>>()?;
        let (first, last, claimed) = self.inner.write(&mut items)?;
        self.inner.commit(last, claimed)?;
        Ok(Some((first, last)))
    }

    /// Makes everything appended so far durable now.
    pub fn sync(&self) -> Result<()> {
        let target = {
            let st = self.inner.w.lock();
            if let Some(c) = &st.poisoned {
                return Err(poisoned(c));
            }
            Lsn(st.next_lsn.0 - 1)
        };
        self.inner.wait_durable(target)
    }

    /// The last committed record.
    pub fn head(&self) -> Head {
        self.inner.view.read().head()
    }

    /// How many segments are sealed (empty ones too): a count that grows
    /// by one at each seal, cheap enough to ask after every append (no
    /// list is built, unlike [`Log::sealed_spans`]).
    pub fn sealed_count(&self) -> usize {
        self.inner.view.read().sealed.len()
    }

    /// The sealed segments that hold records, in LSN order (see
    /// [`SegmentSpan`](super::SegmentSpan)).
    pub fn sealed_spans(&self) -> Vec<super::SegmentSpan> {
        self.inner.view.read().sealed_spans()
    }

    /// Committed records from `from` (clamped to 1) to the head as it is now.
    pub fn iter_from(&self, from: Lsn) -> LogIter {
        self.inner.view.read().iter_from(from)
    }

    /// The committed record `lsn`.
    pub fn read(&self, lsn: Lsn) -> Result<Record> {
        let it = {
            let v = self.inner.view.read();
            let last = v.head().last_lsn;
            if lsn == Lsn(0) || lsn > last {
                return Err(EngineError::LsnOutOfRange { lsn, last });
            }
            v.iter_range(lsn, lsn)
        };
        View::first_of(it, lsn)
    }

    /// Calls `f` with the committed records `lsns` names, in that order,
    /// until it returns false: one walk of the log, not a read per record
    /// (what a query reading a posting list uses). `lsns` should ascend;
    /// an LSN at or below the one before starts a fresh walk of its
    /// segment. Each record handed out is checked as [`Log::read`] checks
    /// it; an LSN of 0 or past the head is [`EngineError::LsnOutOfRange`],
    /// and a damaged frame an error naming it, after the records before
    /// it were handed out. Reads a snapshot of the view, so `f` may use
    /// the log and appends are not held up.
    pub fn read_sorted(&self, lsns: &[Lsn], f: impl FnMut(Record) -> bool) -> Result<()> {
        let v = self.inner.view.read().snapshot();
        v.read_sorted(lsns, f)
    }

    /// Calls `f` with every committed frame from `from` in LSN order, after
    /// checking its CRC and LSN, without decoding bodies (the fast path for
    /// scans that filter before decoding: [`Log::body`] then
    /// `Event::decode_body`). Returns (frames, bytes of frames).
    pub fn for_each_frame(
        &self,
        from: Lsn,
        f: impl FnMut(&cairn_codec::frame::Frame<'_>),
    ) -> Result<(u64, u64)> {
        let snap = self.inner.view.read().snapshot();
        snap.for_each_frame(from, f)
    }

    /// As [`Log::for_each_frame`], stopping as soon as `f` returns false:
    /// the fast path for folds and projections that decode each body as an
    /// [`EventRef`](cairn_codec::EventRef) instead of an owned event.
    pub fn frames_while(
        &self,
        from: Lsn,
        f: impl FnMut(&cairn_codec::frame::Frame<'_>) -> bool,
    ) -> Result<(u64, u64)> {
        let snap = self.inner.view.read().snapshot();
        snap.frames_while(from, f)
    }

    /// The body of a frame from [`Log::for_each_frame`] or
    /// [`Log::frames_while`], decompressed (with the log's dictionary when
    /// it needs it). Use this rather than `Frame::body`, which knows no
    /// dictionary.
    pub fn body<'a>(&self, fr: &cairn_codec::frame::Frame<'a>) -> Result<Cow<'a, [u8]>> {
        Ok(self.inner.dicts.body(fr)?)
    }

    /// The id of the zstd dictionary new records are compressed with, if
    /// the log has one (see [`LogOptions::dictionary_sample_bytes`]).
    pub fn dictionary(&self) -> Option<u32> {
        self.inner.dicts.dicts.current().map(|d| d.id)
    }

    /// Blocks until the head is past `after` or `timeout` passes; returns the head.
    pub fn wait_for(&self, after: Lsn, timeout: Duration) -> Head {
        let deadline = Instant::now() + timeout;
        let mut g = self.inner.head_mx.lock();
        loop {
            let h = self.head();
            if h.last_lsn > after {
                return h;
            }
            if self.inner.head_cv.wait_until(&mut g, deadline).timed_out() {
                return self.head();
            }
        }
    }

    /// Checks every committed frame's CRC, the LSN sequence, every footer and
    /// the hash chain; lists every problem found.
    pub fn verify(&self) -> Result<VerifyReport> {
        let snap = self.inner.view.read().snapshot();
        let (vfs, dir) = (&*self.inner.vfs, &self.inner.dir);
        let segs = super::segment::list_segments(vfs, dir)?;
        let reach = recovery::recorded_reach(vfs, dir, &segs)?;
        snap.verify(TailState::load(vfs, dir).as_ref(), reach.as_ref())
    }

    /// Counts and sizes.
    pub fn stats(&self) -> LogStats {
        self.inner.view.read().stats(self.inner.opts.durability)
    }

    /// What group commit has done since the log was opened: how many
    /// fdatasyncs it ran and how many records they made durable (their
    /// ratio is the average group size).
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            syncs: self.inner.group_syncs.load(Ordering::Relaxed),
            records: self.inner.group_records.load(Ordering::Relaxed),
            sync_time: Duration::from_nanos(self.inner.group_sync_nanos.load(Ordering::Relaxed)),
            gather_time: Duration::from_nanos(
                self.inner.group_gather_nanos.load(Ordering::Relaxed),
            ),
        }
    }

    /// The options the log was opened with.
    pub fn options(&self) -> LogOptions {
        self.inner.opts
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Syncs, stops the background flusher and leaves a `tail.state` so the
    /// next open need not scan the tail segment.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        // A dictionary being trained in the background is written before
        // the log is closed (and so while its owner still holds the store
        // lock), never after: another writer may have the store by then.
        self.inner.dicts.dicts.finish();
        *self.inner.stop.lock() = true;
        self.inner.stop_cv.notify_all();
        if let Some(h) = self.flusher.take() {
            let _ = h.join();
        }
        self.sync()?;
        let mut st = self.inner.w.lock();
        // `sync` wrote every held-back frame; nothing can append since.
        debug_assert!(st.pending.is_empty());
        // Not fsynced: the cut only removes padding after the last record.
        // If a crash undoes it, the padding is what recovery meets after
        // any crash mid-run, and the `tail.state` below no longer matches
        // the segment's length, so the next open scans the tail instead.
        self.inner.trim_tail(&mut st)?;
        let state = TailState {
            first_lsn: st.header.first_lsn,
            valid_len: st.end,
            last_lsn: Lsn(st.next_lsn.0 - 1),
            last_frame_off: st.last_frame_off,
            chain: st.chain,
            index: st.index.clone(),
        };
        let path = self.inner.dir.join(TAIL_STATE_FILE);
        let bytes = state.encode();
        // A process that appended nothing leaves the same state: not
        // rewritten (a write per process otherwise).
        let old = recovery::read_small(&*self.inner.vfs, &path);
        if old.as_ref().and_then(|o| o.get(..bytes.len())) == Some(&bytes[..]) {
            return Ok(());
        }
        // Written in place over the old state, never truncated first: on
        // ext4 a truncation of a file with data makes the kernel write
        // the new data out at once and the call wait for it (a few
        // milliseconds per close on a virtio disk), where one `pwrite`
        // into the page cache costs microseconds. A shorter state leaves
        // the end of the old one behind it, which `TailState::decode`
        // ignores (the record gives its own length).
        //
        // Not fsynced: the state only lets the next open skip scanning the
        // tail, and it names records the `sync` above made durable. Lost
        // or torn by a crash (part new record, part old), it fails its
        // checksum or no longer matches the segment, and the next open
        // scans the tail; an older state that survives whole certifies a
        // prefix of what is durable now.
        let f = open_in_place(&*self.inner.vfs, &path)
            .map_err(|e| EngineError::io("open log tail state", &path, e))?;
        f.write_all_at(&bytes, 0)
            .map_err(|e| EngineError::io("write log tail state", &path, e))?;
        Ok(())
    }
}

/// Opens `path` for writing in place: the existing file, not truncated,
/// or a new one if there is none.
fn open_in_place(vfs: &dyn Vfs, path: &Path) -> std::io::Result<Arc<dyn VfsFile>> {
    match vfs.open(path, OpenMode::ReadWrite) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match vfs.open(path, OpenMode::CreateNew) {
                // Created by someone else in between: open theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    vfs.open(path, OpenMode::ReadWrite)
                }
                r => r,
            }
        }
        r => r,
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl Inner {
    /// Records a failure that leaves the writer unsure of what is durable.
    fn poison(&self, cause: String) {
        {
            let mut st = self.w.lock();
            st.poisoned.get_or_insert_with(|| cause.clone());
        }
        self.poison_sync(cause);
    }

    fn poison_sync(&self, cause: String) {
        self.sync.lock().poisoned.get_or_insert(cause);
        self.release_waiters();
    }

    /// Wakes every thread waiting for a sync to end, with one system call
    /// (unparking them one by one let each woken thread preempt the waker
    /// before it reached the next).
    fn release_waiters(&self) {
        self.sync_epoch.advance();
    }

    /// Puts pre-encoded frames at the end of the tail, assigning LSNs and
    /// chain values. Returns the first and last LSN, and whether this write
    /// completed a gathering group and claimed its sync (which the caller
    /// then runs: see [`Inner::commit`]).
    fn write(&self, items: &mut [Prepared]) -> Result<(Lsn, Lsn, bool)> {
        let mut st = self.w.lock();
        if let Some(c) = &st.poisoned {
            return Err(poisoned(c));
        }
        let total = items.iter().map(Prepared::len).sum::<usize>() as u64;
        let footer = SEGMENT_FOOTER_LEN as u64;
        if st.records() > 0
            && st.end + total + footer > self.opts.segment_size_bytes.max(SEGMENT_HEADER_LEN as u64)
        {
            self.roll(&mut st)?;
        }
        if st.end + total + footer > MAX_SEGMENT_SIZE_BYTES {
            return Err(EngineError::TooLarge {
                what: format!(
                    "a batch of {total} bytes does not fit in one segment (at most {MAX_SEGMENT_SIZE_BYTES} bytes)"
                ),
            });
        }
        let first = st.next_lsn;
        let (mut chain, form) = (st.chain, st.header.chain_form);
        for (i, item) in items.iter_mut().enumerate() {
            let lsn = Lsn(first.0 + i as u64);
            chain = frame::place(&mut item.0, lsn, chain, form);
            // What recovery and every reader will check, checked before
            // the bytes go out: dense LSNs, a frame that decodes as its own.
            frame::assert_placed(&item.0, lsn);
        }
        let at = st.end;
        if let Err(e) = self.put_frames(&mut st, items, at, total) {
            return Err(self.fail_write(st, e));
        }
        let (new_entries, last_off) = Self::note_offsets(&mut st, items, first, at);
        let last = Lsn(first.0 + items.len() as u64 - 1);
        st.end = at + total;
        self.written.store(last.0, Ordering::SeqCst);
        // This record completes the group a leader is gathering: claim its
        // sync, which the caller runs at once.
        let want = self.gather_target.load(Ordering::SeqCst);
        let claimed = want != 0 && last.0 >= want && self.claim_gathering();
        st.next_lsn = last.next();
        st.chain = chain;
        st.last_frame_off = last_off;
        let publish_now = !matches!(self.opts.durability, Durability::Always);
        if publish_now || !new_entries.is_empty() {
            self.publish_written(&st, new_entries, publish_now);
        }
        drop(st);
        if publish_now {
            self.notify_heads();
        }
        Ok((first, last, claimed))
    }

    /// Notes in the tail's sparse index the offsets of the frames of
    /// `items`, written from `at` with LSNs from `first`: the entries added,
    /// and the offset of the last frame.
    fn note_offsets(
        st: &mut WriterState,
        items: &[Prepared],
        first: Lsn,
        at: u64,
    ) -> (Vec<(Lsn, u64)>, u64) {
        let mut new_entries = Vec::new();
        let mut off = at;
        let mut last_off = at;
        for (i, item) in items.iter().enumerate() {
            let lsn = Lsn(first.0 + i as u64);
            // The sparse index a reader seeks by needs offsets that grow
            // with LSNs.
            assert!(i == 0 || off > last_off, "log offsets must grow with LSNs");
            if st.index.note(lsn, off) {
                new_entries.push((lsn, off));
            }
            last_off = off;
            off += item.len() as u64;
        }
        (new_entries, last_off)
    }

    /// Shows readers what a write added: the tail's new sparse index
    /// entries, and with `publish_now` the records themselves.
    fn publish_written(&self, st: &WriterState, new_entries: Vec<(Lsn, u64)>, publish_now: bool) {
        let mut v = self.view.write();
        if let Some(t) = &mut v.tail {
            if t.header.first_lsn == st.header.first_lsn {
                for (l, o) in new_entries {
                    t.index.push(l, o);
                }
            }
        }
        if publish_now {
            Self::apply_mark(&mut v, &st.mark());
        }
    }

    /// A failed write to the tail: the writer is poisoned (the file may
    /// hold part of what was written) and every waiter released with it.
    fn fail_write(&self, mut st: MutexGuard<'_, WriterState>, e: std::io::Error) -> EngineError {
        let err = EngineError::io("append to log segment", &st.path, e);
        let cause = err.to_string();
        st.poisoned = Some(cause.clone());
        drop(st);
        self.poison_sync(cause);
        err
    }

    /// With `always`, an append's frames are held back in memory
    /// (`WriterState::pending`) and the sync that covers them writes the
    /// whole group in one `pwrite` just before its fdatasync, rather than
    /// each appender making a system call under the writer lock while
    /// the others queue for it. Nothing is lost by the wait: a record is
    /// acknowledged only after that sync, and readers see records only
    /// once they are durable. Other policies acknowledge a record when it
    /// is written, so it must reach the page cache (survive a crash of
    /// the process) at once.
    fn defers(&self) -> bool {
        matches!(self.opts.durability, Durability::Always)
    }

    /// Writes the frames held back for the next sync (see
    /// [`Inner::defers`]) to the file.
    fn flush_pending(st: &mut WriterState) -> std::io::Result<()> {
        if st.pending.is_empty() {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut st.pending);
        let r = Self::write_out(st, &buf, st.pending_at);
        buf.clear();
        st.pending = buf;
        r
    }

    /// Puts `buf` into the tail segment at `at`: into the space reserved
    /// ahead when it fits below that space's end, else with one positional
    /// write (the simulated disk, a file system that cannot reserve space,
    /// a batch larger than the segment size).
    fn write_out(st: &mut WriterState, buf: &[u8], at: u64) -> std::io::Result<()> {
        let end = at + buf.len() as u64;
        if let TailOut::Reserved(m) = &mut st.out {
            if end <= m.capacity() {
                match m.reserve(end) {
                    Ok(()) => return m.write_at(buf, at),
                    // Nothing changed: write this segment the plain way.
                    Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                        st.out = TailOut::Writes;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        st.file.write_all_at(buf, at)
    }

    /// Puts the frames of `items` (`total` bytes) into the tail segment at
    /// `at`: held back for the next sync with `always` (see
    /// [`Inner::defers`]), else written out (see [`Inner::write_out`]).
    fn put_frames(
        &self,
        st: &mut WriterState,
        items: &[Prepared],
        at: u64,
        total: u64,
    ) -> std::io::Result<()> {
        // Plain writes until the tail has taken `RESERVE_AFTER_BYTES`
        // (`write_out` writes plainly while unsettled).
        let settle = st.unsettled_bytes + total >= RESERVE_AFTER_BYTES;
        if !settle {
            if let TailOut::Unsettled = st.out {
                st.unsettled_bytes += total;
            }
        }
        if let (TailOut::Unsettled, true) = (&st.out, settle) {
            // Writes stay below the roll size (a larger batch alone in a
            // segment goes past the reserved space, through `write`).
            let capacity = self.opts.segment_size_bytes;
            let synced = self.defers();
            st.out = match st.file.append_space(capacity, synced) {
                Ok(Some(m)) => TailOut::Reserved(m),
                _ => TailOut::Writes,
            };
        }
        if self.defers() && st.pending.len() + total as usize <= PENDING_MAX_BYTES {
            if st.pending.is_empty() {
                st.pending_at = at;
            }
            for item in items {
                st.pending.extend_from_slice(&item.0);
            }
            return Ok(());
        }
        Self::flush_pending(st)?;
        // Without a sync per append the reserved space is a memory map:
        // each frame is one copy into it. Otherwise a batch is gathered
        // into one system call.
        let mapped = matches!(st.out, TailOut::Reserved(_)) && !self.defers();
        if mapped || items.len() == 1 {
            let mut off = at;
            for item in items {
                Self::write_out(st, &item.0, off)?;
                off += item.len() as u64;
            }
            return Ok(());
        }
        let mut buf = std::mem::take(&mut st.batch_buf);
        buf.clear();
        buf.reserve(total as usize);
        for item in items {
            buf.extend_from_slice(&item.0);
        }
        let r = Self::write_out(st, &buf, at);
        st.batch_buf = if buf.capacity() <= BATCH_BUF_KEEP_BYTES {
            buf
        } else {
            Vec::new()
        };
        r
    }

    /// Lets go of the tail's reserved space (and memory map), if any, and
    /// cuts the space it allocated past the last record, so the file holds
    /// exactly its records again (as a sealed segment and a clean close
    /// need); the next segment settles how it is written afresh. True if
    /// it cut anything (the new length is not yet durable).
    fn trim_tail(&self, st: &mut WriterState) -> Result<bool> {
        let TailOut::Reserved(m) = std::mem::replace(&mut st.out, TailOut::initial(&self.opts))
        else {
            return Ok(false);
        };
        let padded = m.allocated() > st.end;
        drop(m);
        if padded {
            st.file
                .set_len(st.end)
                .map_err(|e| EngineError::io("cut log segment to its records", &st.path, e))?;
        }
        Ok(padded)
    }

    /// Seals the tail segment (fsync, footer, fsync) and starts a new one.
    fn roll(&self, st: &mut MutexGuard<'_, WriterState>) -> Result<()> {
        let footer = SegmentFooter {
            record_count: st.records(),
            last_lsn: Lsn(st.next_lsn.0 - 1),
            last_chain: st.chain,
            frames_len: (st.end - SEGMENT_HEADER_LEN as u64) as u32,
        };
        let sealed = self.seal_tail(st, footer);
        let created = sealed.and_then(|s| {
            segment::create_segment(&*self.vfs, &self.dir, st.next_lsn, st.chain).map(|n| (s, n))
        });
        let (sealed, (npath, nfile)) = match created {
            Ok(x) => x,
            Err(e) => {
                let cause = e.to_string();
                st.poisoned = Some(cause.clone());
                self.poison_sync(cause);
                return Err(e);
            }
        };
        let head = Head {
            last_lsn: footer.last_lsn,
            chain: footer.last_chain,
        };
        st.path = npath.clone();
        st.file = nfile.clone();
        st.header = SegmentHeader {
            first_lsn: st.next_lsn,
            prev_chain: st.chain,
            chain_form: ChainForm::CURRENT,
        };
        st.end = SEGMENT_HEADER_LEN as u64;
        st.last_frame_off = 0;
        st.index = SparseIndex::default();
        st.unsettled_bytes = 0;
        {
            let mut v = self.view.write();
            v.sealed.push(Arc::new(sealed));
            v.tail = Some(Tail {
                path: npath,
                file: nfile,
                header: st.header,
                committed_len: SEGMENT_HEADER_LEN as u64,
                head,
                index: SparseIndex::default(),
                damage: None,
            });
        }
        // The segment table names the newly sealed segment too (readers
        // take the table only as far as the directory listing matches it,
        // so the moment before this lands is only a slower open).
        // (A copy of the list, so no lock is held while it is written.)
        let sealed = self.view.read().sealed.clone();
        super::table::save(&*self.vfs, &self.dir, &sealed);
        {
            let _s = self.sync.lock();
            if self.durable() < head.last_lsn {
                self.durable_at.store(head.last_lsn.0, Ordering::Release);
            }
        }
        self.notify_heads();
        Ok(())
    }

    /// Seals the tail segment: writes out what is held back, fsyncs, then
    /// writes `footer` and the segment's index, and maps it for readers.
    fn seal_tail(&self, st: &mut WriterState, footer: SegmentFooter) -> Result<Sealed> {
        let path = st.path.clone();
        let io = |op, e| EngineError::io(op, &path, e);
        Self::flush_pending(st).map_err(|e| io("append to log segment", e))?;
        self.trim_tail(st)?;
        st.file
            .sync_data()
            .map_err(|e| io("fsync log segment", e))?;
        st.file
            .write_all_at(&footer.encode(), st.end)
            .map_err(|e| io("write segment footer", e))?;
        st.file
            .sync_data()
            .map_err(|e| io("fsync log segment", e))?;
        segment::write_index(&*self.vfs, &path, &st.index, st.header.first_lsn, &footer);
        let data = self.vfs.map(&path).map_err(|e| io("map log segment", e))?;
        Ok(Sealed {
            path: path.clone(),
            header: st.header,
            footer,
            data: segment::SegmentData::mapped(data),
            index: segment::SealedIndex::loaded(st.index.clone()),
        })
    }

    /// Publishes `mark` to readers if it is newer than what they see.
    fn apply_mark(v: &mut View, mark: &Mark) {
        if let Some(t) = &mut v.tail {
            if t.header.first_lsn == mark.seg_first && mark.head.last_lsn > t.head.last_lsn {
                t.committed_len = mark.end;
                t.head = mark.head;
            }
        }
    }

    fn notify_heads(&self) {
        let _g = self.head_mx.lock();
        self.head_cv.notify_all();
    }

    /// After a write: run the gathering group's sync if this write claimed
    /// it; with `Always`, wait until `last` is durable.
    fn commit(&self, last: Lsn, claimed: bool) -> Result<()> {
        if claimed {
            // The leader sleeps until its deadline otherwise, and its next
            // record would miss the next group.
            {
                let _g = self.gather_mx.lock();
                self.gather_cv.notify_all();
            }
            // Counted among the appenders waiting for a sync, as it will be
            // once this sync ends: the next group should expect its record.
            self.as_waiter(|| {
                let mut s = self.sync.lock();
                self.note_gather_time();
                self.sync_group(&mut s)
            })?;
        }
        match self.opts.durability {
            Durability::Always => self.wait_durable(last),
            _ => Ok(()),
        }
    }

    /// Claims the sync of the group being gathered, if nobody has; true if
    /// this call did.
    fn claim_gathering(&self) -> bool {
        let c = self.gather_claim.load(Ordering::SeqCst);
        c & 1 == 0
            && self
                .gather_claim
                .compare_exchange(c, c | 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// Adds the time since the current gathering began to the stats.
    fn note_gather_time(&self) {
        let now = nanos(self.opened.elapsed());
        let began = self.gather_began.load(Ordering::SeqCst);
        self.group_gather_nanos
            .fetch_add(now.saturating_sub(began), Ordering::Relaxed);
    }

    /// Group commit: returns once `lsn` is durable. One thread at a time (the
    /// leader) runs fdatasync for everything written so far; the others wait
    /// and are released together when it covers their records.
    fn wait_durable(&self, lsn: Lsn) -> Result<()> {
        self.as_waiter(|| self.wait_durable_inner(lsn))
    }

    /// Runs `f` counted among the threads waiting for a sync (`inside`,
    /// `peak`): how many records the next group can expect.
    fn as_waiter<T>(&self, f: impl FnOnce() -> T) -> T {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        let r = f();
        self.inside.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Every record up to this LSN is durable.
    fn durable(&self) -> Lsn {
        Lsn(self.durable_at.load(Ordering::Acquire))
    }

    fn wait_durable_inner(&self, lsn: Lsn) -> Result<()> {
        let mut s = self.sync.lock();
        loop {
            if let Some(c) = &s.poisoned {
                return Err(poisoned(c));
            }
            if self.durable() >= lsn {
                return Ok(());
            }
            let running = s.started - s.ended;
            let covered = running > 0 && s.covering >= lsn;
            if s.gathering || covered || running >= self.opts.max_syncs_in_flight.max(1) {
                // A sync that will cover this record is gathering or
                // running, or no other may start: wait for one to end (or,
                // if this record was written just after a gathering leader
                // took its mark, for that leader to say so). Those it
                // covered return without queueing for this mutex.
                self.wait_max.fetch_max(lsn.0, Ordering::SeqCst);
                let epoch = self.sync_epoch.current();
                drop(s);
                self.sync_epoch.wait_past(epoch);
                if self.durable() >= lsn {
                    return Ok(());
                }
                s = self.sync.lock();
                continue;
            }
            self.lead(&mut s)?;
        }
    }

    /// Leads one group commit: gathers the records of concurrent
    /// appenders, fdatasyncs everything written by then, and publishes it
    /// once every sync started before this one has ended.
    fn lead(&self, s: &mut MutexGuard<'_, SyncState>) -> Result<()> {
        s.gathering = true;
        // Aim for a group as large as the most appenders seen waiting at
        // once (the ones the last sync released are being scheduled again
        // and are about to write their next records).
        let threads = self.peak.load(Ordering::Relaxed);
        let group = s.last_group.max(threads);
        self.peak
            .store(self.inside.load(Ordering::SeqCst), Ordering::Relaxed);
        let durable = self.durable();
        let budget = (s.last_sync / 2).min(MAX_GROUP_COMMIT_WAIT);
        // Only appenders that wait for their own records are gathered: the
        // `interval` flusher and an explicit `sync` sync what is written
        // (an appender that completed a gathering would run its sync, a
        // stall the other policies never make an appender pay). And only
        // when other threads appended since the last sync began: a lone
        // appender of batches (a binding's committer thread) made the last
        // group large by itself, and nobody else will write while it waits.
        let gathers =
            threads > 1 && group > 1 && matches!(self.opts.durability, Durability::Always);
        if gathers && !MutexGuard::unlocked(s, || self.gather(Lsn(durable.0 + group), budget)) {
            // The appender that completed the group runs its sync; this
            // thread waits for it like any other.
            return Ok(());
        }
        self.sync_group(s)
    }

    /// Runs the sync of the group gathered so far: takes the mark (how far
    /// the tail is written), fdatasyncs, and publishes once every sync
    /// started before it has ended.
    fn sync_group(&self, s: &mut MutexGuard<'_, SyncState>) -> Result<()> {
        let taken = MutexGuard::unlocked(s, || self.take_mark());
        s.gathering = false;
        let (file, path, mark) = match taken {
            Ok(x) => x,
            Err(e) => {
                MutexGuard::unlocked(s, || self.release_waiters());
                return Err(e);
            }
        };
        let seq = s.started;
        s.started += 1;
        s.covering = s.covering.max(mark.head.last_lsn);
        if self.wait_max.load(Ordering::SeqCst) > mark.head.last_lsn.0 {
            // Someone wrote after the mark and waits on this gathering:
            // let it lead the next sync.
            MutexGuard::unlocked(s, || self.release_waiters());
        }
        let (r, took) = MutexGuard::unlocked(s, || {
            let t = Instant::now();
            (file.sync_data(), t.elapsed())
        });
        // Publish in start order: had an earlier sync failed, this one's
        // success would not prove the earlier records durable (the kernel
        // reports a write-back error to one caller only).
        while s.ended != seq {
            let epoch = self.sync_epoch.current();
            MutexGuard::unlocked(s, || self.sync_epoch.wait_past(epoch));
        }
        s.ended += 1;
        let failed = match r {
            Err(e) => Some(EngineError::io("fsync log segment", &path, e)),
            Ok(()) => s.poisoned.as_ref().map(|c| poisoned(c)),
        };
        if let Some(err) = failed {
            let cause = err.to_string();
            s.poisoned.get_or_insert(cause.clone());
            MutexGuard::unlocked(s, || self.poison(cause));
            return Err(err);
        }
        // Compared with the durable LSN now: a segment roll or a later
        // sync may have advanced it while this one ran.
        let now = self.durable();
        let last = mark.head.last_lsn;
        if last > now {
            s.last_group = last.0 - now.0;
            self.group_syncs.fetch_add(1, Ordering::Relaxed);
            self.group_records
                .fetch_add(s.last_group, Ordering::Relaxed);
            s.last_sync = took;
            self.group_sync_nanos
                .fetch_add(nanos(took), Ordering::Relaxed);
            self.durable_at.store(last.0, Ordering::Release);
        }
        MutexGuard::unlocked(s, || {
            Self::apply_mark(&mut self.view.write(), &mark);
            self.notify_heads();
            self.release_waiters();
        });
        Ok(())
    }

    /// Gathers a group: waits until the record `want` is written or
    /// `budget` passes, leaving the cores to the appenders it waits for.
    /// The appender whose record completes the group claims its sync and
    /// runs it (see `write`): then this returns false and the caller does
    /// not sync. True if the caller is to run the sync.
    fn gather(&self, want: Lsn, budget: Duration) -> bool {
        let deadline = Instant::now() + budget;
        let open = (self.gather_claim.load(Ordering::SeqCst) >> 1).wrapping_add(1) << 1;
        self.gather_began
            .store(nanos(self.opened.elapsed()), Ordering::SeqCst);
        self.gather_claim.store(open, Ordering::SeqCst);
        self.gather_target.store(want.0, Ordering::SeqCst);
        let mut g = self.gather_mx.lock();
        while self.gather_claim.load(Ordering::SeqCst) == open
            && self.written.load(Ordering::SeqCst) < want.0
        {
            if self.gather_cv.wait_until(&mut g, deadline).timed_out() {
                break;
            }
        }
        drop(g);
        let _ = self
            .gather_target
            .compare_exchange(want.0, 0, Ordering::SeqCst, Ordering::SeqCst);
        let mine = self
            .gather_claim
            .compare_exchange(open, open | 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if mine {
            self.note_gather_time();
        }
        mine
    }

    /// The tail's file and how far it is written, for a sync to cover.
    fn take_mark(&self) -> Result<(Arc<dyn VfsFile>, PathBuf, Mark)> {
        let mut st = self.w.lock();
        if let Some(c) = &st.poisoned {
            return Err(poisoned(c));
        }
        if let Err(e) = Self::flush_pending(&mut st) {
            return Err(self.fail_write(st, e));
        }
        Ok((st.file.clone(), st.path.clone(), st.mark()))
    }

    /// The `Interval` policy's background thread.
    fn flush_loop(&self, every: Duration) {
        loop {
            {
                let mut stop = self.stop.lock();
                if *stop {
                    return;
                }
                self.stop_cv.wait_for(&mut stop, every);
                if *stop {
                    return;
                }
            }
            let target = {
                let st = self.w.lock();
                if st.poisoned.is_some() {
                    return;
                }
                Lsn(st.next_lsn.0 - 1)
            };
            if self.wait_durable(target).is_err() {
                return;
            }
        }
    }
}
