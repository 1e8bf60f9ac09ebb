//! A thread that grows a mapped log tail ahead of its appends.
//!
//! Without a sync per append (`never`, `interval`), an append is a copy
//! into the tail's memory map, and the rest of its cost was the kernel work
//! of keeping that map ready: writing zeros past the end in steps (see
//! `RealAppendSpace::reserve`) and recycling the pages behind (see
//! [`Recycler`]). A profile of `never` appends put those system calls at a
//! fifth of an append's time (docs/BENCHMARKS.md, session 17). Here they
//! run on a thread of their own, a few hundred KiB ahead of the appender,
//! which only reads an atomic to know its space is there. A second thread
//! fdatasyncs the tail every few MiB, so that sealing a full segment
//! (which fdatasyncs it under the writer lock) waits for little.
//!
//! Errors are never lost: the threads' first error (a full disk while
//! writing zeros, a write-back error while recycling or syncing) is kept
//! and returned by every later reserve, so the writer poisons itself as it
//! did when it did that work itself. Each thread works through an open
//! file of its own (`/proc/self/fd/N` opened afresh): a write-back error
//! it consumes is consumed from its own open file only, and the writer's
//! next fdatasync still reports it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::{write_zeros, Recycler, PAGE_BYTES};

/// How far past the appender's end the thread keeps the tail allocated:
/// an appender running at full speed (~230 MB/s of 200-byte events) takes
/// ~9 ms to write this, ample time for a step of zeros.
const AHEAD_BYTES: u64 = 2 << 20;

/// The appender tells the thread how far it has written (and asks for more
/// space) each time it has written this much: one lock and wake-up per
/// ~1,100 typical records.
const ASK_EVERY_BYTES: u64 = 256 << 10;

/// A second thread fdatasyncs the tail each time this much more has been
/// written. A device with a volatile write cache makes durable, at each
/// flush, everything written since the last one: on the bench machine an
/// fdatasync after 64 MiB took 75–130 ms even with every page already
/// written back, and after 8 MiB 15 ms. Sealing a segment fdatasyncs it,
/// under the writer lock, so without these syncs each roll stopped every
/// appender for that long (a fifth of the time of `never` appends); with
/// them a roll waits for at most this much.
const SYNC_EVERY_BYTES: u64 = 8 << 20;

/// The appender's side of the threads; stopping them (on drop) joins them.
pub(super) struct Ahead {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    capacity: u64,
    /// The appender asks again once a write ends past this.
    next_ask: u64,
}

/// What the appender and the thread share.
struct Shared {
    /// Bytes below this are allocated (written zeros) and may be written
    /// through the map. Only the thread raises it.
    allocated: AtomicU64,
    /// `state.error` holds an error: lets an append check without the lock.
    failed: AtomicBool,
    state: Mutex<State>,
    /// Wakes the thread: there is work, or it must stop.
    wake: Condvar,
    /// Wakes the sync thread: a sync is due, or it must stop.
    sync_wake: Condvar,
    /// Wakes the appender: the thread finished a round of work.
    done: Condvar,
}

/// The work asked of the thread, under [`Shared::state`].
struct State {
    /// Allocate up to here.
    want: u64,
    /// The appender has written up to here (what may be recycled).
    written: u64,
    /// Work was asked for since the thread last took it.
    asked: bool,
    /// The sync thread syncs once `written` reaches this.
    sync_due: u64,
    /// The thread is working (outside the lock).
    busy: bool,
    stop: bool,
    /// The thread's first error; it does nothing after one.
    error: Option<io::Error>,
    /// Test hook: the thread fails instead of allocating past this.
    #[cfg(test)]
    fail_past: u64,
    /// Test hook: the sync thread fails instead of syncing.
    #[cfg(test)]
    fail_syncs: bool,
    /// Syncs the sync thread has run (for tests).
    #[cfg(test)]
    syncs: u64,
}

/// Keeps `e` as the threads' error unless one is kept already, and wakes
/// an appender waiting on them.
fn fail(sh: &Shared, s: &mut State, e: io::Error) {
    if s.error.is_none() {
        s.error = Some(e);
        sh.failed.store(true, Ordering::Release);
    }
    sh.done.notify_all();
}

/// True for the error of a write that found no space (`ENOSPC`, or a
/// quota reached).
pub(super) fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// A copy of the thread's error, for one caller.
fn copy(e: &io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("while reserving log space ahead of appends: {e}"),
    )
}

impl Ahead {
    /// Starts the thread for a tail of `capacity` bytes whose first
    /// `allocated` exist, mapped at address `map_base`. Fails if the file
    /// cannot be opened afresh (no `/proc`) or the thread cannot start; the
    /// caller then does the work on the appender.
    pub(super) fn start(
        file: &File,
        map_base: usize,
        capacity: u64,
        allocated: u64,
    ) -> io::Result<Ahead> {
        // Each thread has an open file of its own (see the module docs).
        let reopen = || {
            File::options()
                .read(true)
                .write(true)
                .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        };
        let (own, own_sync) = (reopen()?, reopen()?);
        let map_len = usize::try_from(capacity)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "capacity too large"))?;
        let shared = Arc::new(Shared {
            allocated: AtomicU64::new(allocated),
            failed: AtomicBool::new(false),
            state: Mutex::new(State {
                want: allocated,
                written: 0,
                asked: false,
                sync_due: allocated + SYNC_EVERY_BYTES,
                busy: false,
                stop: false,
                error: None,
                #[cfg(test)]
                fail_past: u64::MAX,
                #[cfg(test)]
                fail_syncs: false,
                #[cfg(test)]
                syncs: 0,
            }),
            wake: Condvar::new(),
            sync_wake: Condvar::new(),
            done: Condvar::new(),
        });
        let mut ahead = Ahead {
            shared,
            threads: Vec::new(),
            capacity,
            next_ask: 0,
        };
        // On a failed start, dropping `ahead` stops what did start.
        let s = Arc::clone(&ahead.shared);
        ahead.threads.push(
            std::thread::Builder::new()
                .name("cairn-log-ahead".into())
                .spawn(move || run(&s, &own, (map_base, map_len), allocated))?,
        );
        let s = Arc::clone(&ahead.shared);
        ahead.threads.push(
            std::thread::Builder::new()
                .name("cairn-log-sync".into())
                .spawn(move || run_syncs(&s, &own_sync))?,
        );
        Ok(ahead)
    }

    /// Makes sure the tail is allocated up to `end` (at most the capacity,
    /// which the caller checked): returns at once when it is, asking for
    /// more every [`ASK_EVERY_BYTES`]; else waits for the thread.
    pub(super) fn reserve(&mut self, end: u64) -> io::Result<()> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(self.error());
        }
        if end <= self.shared.allocated.load(Ordering::Acquire) {
            if end >= self.next_ask {
                self.ask(end, false)?;
            }
            return Ok(());
        }
        self.ask(end, true)
    }

    /// Tells the thread the appender has written up to `end` and wants
    /// space [`AHEAD_BYTES`] past it; with `wait`, waits until the tail is
    /// allocated up to `end`.
    fn ask(&mut self, end: u64, wait: bool) -> io::Result<()> {
        let want = (end + AHEAD_BYTES)
            .next_multiple_of(PAGE_BYTES)
            .min(self.capacity)
            .max(end);
        self.next_ask = end + ASK_EVERY_BYTES;
        let sh = &*self.shared;
        let mut s = sh.state.lock();
        s.want = s.want.max(want);
        s.written = s.written.max(end);
        s.asked = true;
        sh.wake.notify_one();
        if s.written >= s.sync_due {
            sh.sync_wake.notify_one();
        }
        while wait && s.error.is_none() && sh.allocated.load(Ordering::Acquire) < end {
            sh.done.wait(&mut s);
        }
        match &s.error {
            Some(e) => Err(copy(e)),
            None => Ok(()),
        }
    }

    /// The thread's error (it has failed).
    fn error(&self) -> io::Error {
        match &self.shared.state.lock().error {
            Some(e) => copy(e),
            None => io::Error::other("log space thread failed"),
        }
    }

    /// The file's allocated length once the thread has done all that was
    /// asked of it (nothing more is, while the caller holds the tail).
    pub(super) fn settled_allocated(&self) -> u64 {
        let sh = &*self.shared;
        let mut s = sh.state.lock();
        while (s.asked || s.busy) && s.error.is_none() {
            sh.done.wait(&mut s);
        }
        sh.allocated.load(Ordering::Acquire)
    }

    /// The allocated length as the thread last published it (it may be
    /// growing it now).
    pub(super) fn allocated_now(&self) -> u64 {
        self.shared.allocated.load(Ordering::Acquire)
    }

    /// Test hook: the thread fails rather than allocate past `at`.
    #[cfg(test)]
    pub(super) fn fail_past(&self, at: u64) {
        self.shared.state.lock().fail_past = at;
    }

    /// Test hook: the sync thread fails rather than sync.
    #[cfg(test)]
    pub(super) fn fail_syncs(&self) {
        self.shared.state.lock().fail_syncs = true;
    }

    /// Syncs the sync thread has run (for tests).
    #[cfg(test)]
    pub(super) fn syncs(&self) -> u64 {
        self.shared.state.lock().syncs
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_all();
        self.shared.sync_wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The thread: allocates what is asked (zeros first, so a waiting appender
/// goes on soonest), then recycles what was written. (Mapping the zeros in
/// ahead with `MADV_POPULATE_WRITE` was tried: it made appends slower, as
/// the appender's faults then contended with it for the page table's lock
/// and each periodic sync write-protected the mapped zeros again.)
fn run(sh: &Shared, file: &File, map: (usize, usize), allocated: u64) {
    let mut recycler = Recycler::new(allocated);
    let mut s = sh.state.lock();
    loop {
        // After an error (its own or the sync thread's) it only waits to
        // be stopped.
        while !s.stop && (!s.asked || s.error.is_some()) {
            sh.wake.wait(&mut s);
        }
        if s.stop {
            return;
        }
        s.asked = false;
        s.busy = true;
        let (want, written) = (s.want, s.written);
        #[cfg(test)]
        let fail_past = s.fail_past;
        drop(s);
        let r = (|| -> io::Result<()> {
            let have = sh.allocated.load(Ordering::Relaxed);
            let zeros = |to: u64| -> io::Result<()> {
                #[cfg(test)]
                if to > fail_past {
                    return Err(io::Error::new(
                        io::ErrorKind::StorageFull,
                        "test: no space left",
                    ));
                }
                write_zeros(file, have, to - have)
            };
            if want > have {
                match zeros(want) {
                    Ok(()) => sh.allocated.store(want, Ordering::Release),
                    // A full disk: the space ahead is a convenience, not a
                    // need. Only what the appender has written up to is
                    // asked for then (a small record still fits in the
                    // last free blocks); failing that, the error stands.
                    Err(e) if is_full(&e) => {
                        if written > have {
                            zeros(written)?;
                        }
                        // The zeros that did get written count too: the
                        // tail is cut to its records from `allocated`.
                        let len = file.metadata()?.len().clamp(have.max(written), want);
                        sh.allocated.store(len, Ordering::Release);
                    }
                    Err(e) => return Err(e),
                }
            }
            recycler.recycle(file, Some(map), written)
        })();
        s = sh.state.lock();
        s.busy = false;
        match r {
            Ok(()) => {
                sh.done.notify_all();
            }
            Err(e) => fail(sh, &mut s, e),
        }
    }
}

/// The sync thread: fdatasyncs the tail each [`SYNC_EVERY_BYTES`] the
/// appender writes. Its error is kept as the other thread's is.
fn run_syncs(sh: &Shared, file: &File) {
    let mut s = sh.state.lock();
    loop {
        while !s.stop && s.error.is_none() && s.written < s.sync_due {
            sh.sync_wake.wait(&mut s);
        }
        if s.stop || s.error.is_some() {
            return;
        }
        s.sync_due = s.written + SYNC_EVERY_BYTES;
        #[cfg(test)]
        if s.fail_syncs {
            return fail(sh, &mut s, io::Error::other("test: fdatasync failed"));
        }
        drop(s);
        let r = file.sync_data();
        s = sh.state.lock();
        #[cfg(test)]
        {
            s.syncs += 1;
        }
        if let Err(e) = r {
            return fail(sh, &mut s, e);
        }
    }
}
