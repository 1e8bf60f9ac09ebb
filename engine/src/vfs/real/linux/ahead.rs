//! A thread that grows a mapped log tail ahead of its appends.
//!
//! Without a sync per append (`never`, `interval`), an append is a copy
//! into the tail's memory map, and the rest of its cost was the kernel work
//! of keeping that map ready: writing zeros past the end in steps (see
//! `RealAppendSpace::reserve`) and recycling the pages behind (see
//! [`Recycler`]). A profile of `never` appends put those system calls at a
//! fifth of an append's time (docs/BENCHMARKS.md, session 17). Here they
//! run on a thread of their own, a few hundred KiB ahead of the appender,
//! which only reads an atomic to know its space is there.
//!
//! Errors are never lost: the thread's first error (a full disk while
//! writing zeros, a write-back error while recycling) is kept and returned
//! by every later reserve, so the writer poisons itself as it did when it
//! did that work itself. The thread works through an open file of its own
//! (`/proc/self/fd/N` opened afresh): a write-back error it consumes by
//! waiting on a range is consumed from its own open file only, and the
//! writer's next fdatasync still reports it.

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

/// The appender's side of the thread; stopping it (on drop) joins the
/// thread.
pub(super) struct Ahead {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
    /// The thread is working (outside the lock).
    busy: bool,
    stop: bool,
    /// The thread's first error; it does nothing after one.
    error: Option<io::Error>,
    /// Test hook: the thread fails instead of allocating past this.
    #[cfg(test)]
    fail_past: u64,
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
        let own = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        let map_len = usize::try_from(capacity)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "capacity too large"))?;
        let shared = Arc::new(Shared {
            allocated: AtomicU64::new(allocated),
            failed: AtomicBool::new(false),
            state: Mutex::new(State {
                want: allocated,
                written: 0,
                asked: false,
                busy: false,
                stop: false,
                error: None,
                #[cfg(test)]
                fail_past: u64::MAX,
            }),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("cairn-log-ahead".into())
            .spawn(move || run(&s, &own, (map_base, map_len), allocated))?;
        Ok(Ahead {
            shared,
            thread: Some(thread),
            capacity,
            next_ask: 0,
        })
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
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread: allocates what is asked (zeros first, so a waiting appender
/// goes on soonest, then maps them in with `MADV_POPULATE_WRITE` so the
/// appender's copies do not fault), then recycles what was written.
fn run(sh: &Shared, file: &File, map: (usize, usize), allocated: u64) {
    let mut recycler = Recycler::new(allocated);
    let mut s = sh.state.lock();
    loop {
        while !s.stop && !s.asked {
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
            if want > have {
                #[cfg(test)]
                if want > fail_past {
                    return Err(io::Error::new(
                        io::ErrorKind::StorageFull,
                        "test: no space left",
                    ));
                }
                write_zeros(file, have, want - have)?;
                populate(map, have, want);
                sh.allocated.store(want, Ordering::Release);
            }
            recycler.recycle(file, Some(map), written)
        })();
        s = sh.state.lock();
        s.busy = false;
        if let Err(e) = r {
            s.error = Some(e);
            sh.failed.store(true, Ordering::Release);
        }
        sh.done.notify_all();
        if s.error.is_some() {
            while !s.stop {
                sh.wake.wait(&mut s);
            }
            return;
        }
    }
}

/// Maps the pages of `from..to` (just written as zeros) into the tail's
/// map, writable, so the appender's first copy into each does not fault.
/// Only a hint: a kernel without `MADV_POPULATE_WRITE` (before 5.14)
/// refuses it, and the copies fault as before.
fn populate((base, len): (usize, usize), from: u64, to: u64) {
    let (Ok(from), Ok(to)) = (usize::try_from(from), usize::try_from(to)) else {
        return;
    };
    let from = from - from % PAGE_BYTES as usize;
    if from >= to || to > len {
        return;
    }
    // SAFETY: the range lies inside the map and below the allocated end
    // (just written, so no fault for lack of space), ahead of every byte
    // the appender has written: populating only maps its pages, it does
    // not change their bytes.
    let _ = unsafe {
        libc::madvise(
            (base + from) as *mut libc::c_void,
            to - from,
            libc::MADV_POPULATE_WRITE,
        )
    };
}
