//! The real file system.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use super::{AppendSpace, LockGuard, Mapped, OpenMode, Vfs, VfsFile};

/// The real file system, through `std::fs` and memmap2.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealVfs;

#[derive(Debug)]
struct RealFile(File);

impl VfsFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    #[cfg(target_os = "linux")]
    fn append_space(
        &self,
        capacity: u64,
        synced: bool,
    ) -> io::Result<Option<Box<dyn AppendSpace>>> {
        linux::append_space(&self.0, capacity, synced)
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd;

    use super::AppendSpace;

    mod ahead;
    use ahead::Ahead;

    /// The file grows by at least this much each time an append needs
    /// space past its end: one write of zeros per ~4,500 typical records,
    /// and at most this much zero padding for recovery to cut after a
    /// crash.
    const APPEND_ALLOC_STEP_BYTES: u64 = 1 << 20;

    /// The pages of the tail more than this far behind its end are written
    /// back (if they are not yet) and dropped from the page cache as the
    /// tail grows, so new appends reuse them (see `recycle`). Readers of
    /// the most recent records still find them cached.
    const CACHE_WINDOW_BYTES: u64 = 4 << 20;

    /// Space is allocated in whole pages.
    const PAGE_BYTES: u64 = 4096;

    /// The source of the zeros that grow the tail, written as many
    /// iovecs that all point at it: a step costs no allocation and no
    /// memset. (A fresh `vec![0; 1 MiB]` per step came from the heap once
    /// glibc had raised its mmap threshold, and its memset was ~2% of a
    /// `never` append.)
    const ZERO_CHUNK_BYTES: usize = 64 * 1024;
    static ZEROS: [u8; ZERO_CHUNK_BYTES] = [0; ZERO_CHUNK_BYTES];
    /// iovecs per `pwritev` call: 1 MiB of zeros; far below `IOV_MAX`.
    const ZERO_IOVECS: usize = 16;

    /// Writes `len` zero bytes at `at`.
    fn write_zeros(file: &File, mut at: u64, len: u64) -> io::Result<()> {
        let end = at + len;
        while at < end {
            let left = end - at;
            let n = usize::try_from(left.div_ceil(ZERO_CHUNK_BYTES as u64))
                .unwrap_or(ZERO_IOVECS)
                .min(ZERO_IOVECS);
            let mut iov = [libc::iovec {
                iov_base: ZEROS.as_ptr() as *mut libc::c_void,
                iov_len: ZERO_CHUNK_BYTES,
            }; ZERO_IOVECS];
            if left < (n * ZERO_CHUNK_BYTES) as u64 {
                // The last iovec takes only what is left.
                iov[n - 1].iov_len = (left - ((n - 1) * ZERO_CHUNK_BYTES) as u64) as usize;
            }
            let off = libc::off64_t::try_from(at)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
            // SAFETY: the iovecs point into a static buffer that the kernel
            // only reads (`pwritev` never writes through them), each within
            // its bounds; `n` of them are initialised and passed.
            let r =
                unsafe { libc::pwritev64(file.as_raw_fd(), iov.as_ptr(), n as libc::c_int, off) };
            match r {
                r if r > 0 => at += r as u64,
                0 => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Space reserved ahead at the end of a file, up to `capacity` bytes;
    /// see [`AppendSpace`].
    pub(super) struct RealAppendSpace {
        /// Who grows the tail and recycles its pages. Declared first, so
        /// that threads doing it are stopped (and joined) before the map
        /// is unmapped.
        growth: Growth,
        file: File,
        /// A shared, writable map of the first `capacity` bytes, which
        /// appends are copied into; `None` when every append is synced
        /// (the `always` policy): appends are then positional writes into
        /// the zero-filled space. Writing back a mapped page write-protects
        /// it (a TLB shootdown across cores) and the next append into it
        /// faults again, once per sync: with `always` that made each
        /// fdatasync ~25% slower on the bench machine (one appender:
        /// 125–130 µs mapped against 99–104 µs written; docs/BENCHMARKS.md,
        /// session 5).
        map: Option<memmap2::MmapMut>,
        capacity: u64,
    }

    /// Who grows a tail and recycles its pages.
    enum Growth {
        /// The threads of [`Ahead`], for a mapped tail, when they could
        /// be started.
        Ahead(Ahead),
        /// The appender itself, as it reserves space.
        Inline {
            /// The file's allocated length.
            allocated: u64,
            /// What recycling has done so far.
            recycler: Recycler,
        },
    }

    impl Growth {
        /// The appender's own growth of a tail whose first `allocated`
        /// bytes exist.
        fn inline(allocated: u64) -> Growth {
            Growth::Inline {
                allocated,
                recycler: Recycler::new(allocated),
            }
        }
    }

    impl std::fmt::Debug for RealAppendSpace {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("RealAppendSpace")
                .field("capacity", &self.capacity)
                .field("mapped", &self.map.is_some())
                .field("ahead", &matches!(self.growth, Growth::Ahead(_)))
                .field(
                    "allocated",
                    &match &self.growth {
                        Growth::Ahead(a) => a.allocated_now(),
                        Growth::Inline { allocated, .. } => *allocated,
                    },
                )
                .finish()
        }
    }

    pub(super) fn append_space(
        file: &File,
        capacity: u64,
        synced: bool,
    ) -> io::Result<Option<Box<dyn AppendSpace>>> {
        Ok(open_space(file, capacity, synced)?.map(|s| Box::new(s) as Box<dyn AppendSpace>))
    }

    /// See [`append_space`].
    fn open_space(file: &File, capacity: u64, synced: bool) -> io::Result<Option<RealAppendSpace>> {
        let allocated = file.metadata()?.len();
        let Ok(len) = usize::try_from(capacity) else {
            return Ok(None);
        };
        if allocated >= capacity || len == 0 {
            return Ok(None);
        }
        let file = file.try_clone()?;
        // With a sync per append the space is written with `pwrite`, not
        // mapped (see `RealAppendSpace::map`).
        let mut map = if synced {
            None
        } else {
            // SAFETY: the map covers a log segment that only this writer
            // changes (it holds the store lock). The writer touches bytes
            // of the map only below `allocated`, which `reserve` has made
            // part of the file with written zeros (their blocks reserved
            // or allocated), so no access faults for lack of space or for
            // being past the end. A process outside cairn truncating the
            // segment could still cause SIGBUS; that is outside the
            // store's contract, as for every mmap-based storage engine.
            Some(unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file)? })
        };
        // Without a sync per append, the work of growing the tail moves
        // off the appender (see `ahead`); with one, the appender is waiting
        // on fdatasyncs anyway, and the cores are the appenders'.
        let growth = match &mut map {
            Some(m) => Ahead::start(&file, m.as_mut_ptr() as usize, capacity, allocated)
                .map_or_else(|_| Growth::inline(allocated), Growth::Ahead),
            None => Growth::inline(allocated),
        };
        Ok(Some(RealAppendSpace {
            growth,
            file,
            map,
            capacity,
        }))
    }

    /// What `recycle` has done to a tail so far.
    #[derive(Debug)]
    pub(super) struct Recycler {
        /// Write-back has been started for the bytes below this.
        flushed: u64,
        /// Bytes below this have been dropped from the page cache.
        dropped: u64,
    }

    impl Recycler {
        /// The bookkeeping of a tail whose first `allocated` bytes exist.
        pub(super) fn new(allocated: u64) -> Recycler {
            Recycler {
                flushed: allocated - allocated % PAGE_BYTES,
                dropped: 0,
            }
        }

        /// Starts write-back of the bytes appended below `written` since
        /// the last call, and drops from the page cache what lies more
        /// than [`CACHE_WINDOW_BYTES`] behind (written back first), so the
        /// pages of new appends are recycled ones. A log written faster
        /// than the kernel's own write-back would otherwise take a fresh
        /// page per 4 KiB, and on a virtual machine that returns free
        /// memory to its host a fresh page costs ~10 µs (0.8 µs for a
        /// recycled one: `benches/scripts/vm_page_cost.py`), half the cost
        /// of an append without a sync. `map` is the base address and
        /// length of the tail's shared map, if it has one: its pages
        /// behind the window are unmapped first, or they could not be
        /// dropped.
        ///
        /// A write-back error is returned, never ignored: waiting on the
        /// range consumes the error the next fdatasync through the same
        /// open file would report.
        pub(super) fn recycle(
            &mut self,
            file: &File,
            map: Option<(usize, usize)>,
            written: u64,
        ) -> io::Result<()> {
            let fd = file.as_raw_fd();
            let done = written - written % PAGE_BYTES;
            let range = |from: u64, to: u64| -> io::Result<(libc::off64_t, libc::off64_t)> {
                match (
                    libc::off64_t::try_from(from),
                    libc::off64_t::try_from(to - from),
                ) {
                    (Ok(a), Ok(n)) => Ok((a, n)),
                    _ => Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "offset too large",
                    )),
                }
            };
            let check = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            };
            if done > self.flushed {
                let (a, n) = range(self.flushed, done)?;
                // Unmapped first: starting write-back write-protects each
                // mapped page, one TLB flush per page, and when the
                // appender runs on another core (see `ahead`) each is an
                // interrupt to it; unmapped, the range costs one flush.
                unmap(map, a, n);
                // SAFETY: a plain system call on a file descriptor we own.
                check(unsafe { libc::sync_file_range(fd, a, n, libc::SYNC_FILE_RANGE_WRITE) })?;
                self.flushed = done;
            }
            let keep = done.saturating_sub(CACHE_WINDOW_BYTES);
            if keep > self.dropped {
                let (a, n) = range(self.dropped, keep)?;
                let wait = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER;
                // SAFETY: a plain system call on a file descriptor we own.
                check(unsafe { libc::sync_file_range(fd, a, n, wait) })?;
                // Unmapped when write-back began; once more for the page
                // an append was still filling then (the appender that
                // recycles for itself starts write-back up to the
                // allocated end), which it mapped again: a mapped page
                // cannot be dropped.
                unmap(map, a, n);
                // SAFETY: a plain system call; it drops clean pages only.
                unsafe { libc::posix_fadvise(fd, a, n, libc::POSIX_FADV_DONTNEED) };
                self.dropped = keep;
            }
            Ok(())
        }
    }

    /// Unmaps `n` bytes at offset `a` of the tail's shared map (`map`: its
    /// base address and length), if it has one and they lie inside it.
    fn unmap(map: Option<(usize, usize)>, a: libc::off64_t, n: libc::off64_t) {
        let (Some((base, len)), Ok(from), Ok(n)) = (map, usize::try_from(a), usize::try_from(n))
        else {
            return;
        };
        if from + n > len {
            return;
        }
        // SAFETY: the range lies inside the map, page aligned, and holds
        // only whole pages the appender has finished writing; on a shared
        // file mapping MADV_DONTNEED only unmaps the pages: their bytes
        // stay in the file and the page cache (a dirty one stays dirty),
        // and a later access maps them again.
        let _ =
            unsafe { libc::madvise((base + from) as *mut libc::c_void, n, libc::MADV_DONTNEED) };
    }

    impl RealAppendSpace {
        /// The map's base address and length, for `recycle`.
        fn map_range(&self) -> Option<(usize, usize)> {
            self.map.as_ref().map(|m| (m.as_ptr() as usize, m.len()))
        }
    }

    impl AppendSpace for RealAppendSpace {
        fn capacity(&self) -> u64 {
            self.capacity
        }

        fn allocated(&self) -> u64 {
            match &self.growth {
                Growth::Ahead(a) => a.settled_allocated(),
                Growth::Inline { allocated, .. } => *allocated,
            }
        }

        fn reserve(&mut self, end: u64) -> io::Result<()> {
            let cap = self.capacity();
            if end > cap {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("append to byte {end} is past the mapped {cap} bytes"),
                ));
            }
            let map = self.map_range();
            let (allocated, recycler) = match &mut self.growth {
                Growth::Ahead(a) => return a.reserve(end),
                Growth::Inline {
                    allocated,
                    recycler,
                } => (allocated, recycler),
            };
            if end <= *allocated {
                return Ok(());
            }
            let want = end
                .max(*allocated + APPEND_ALLOC_STEP_BYTES)
                .next_multiple_of(PAGE_BYTES)
                .min(cap);
            recycler.recycle(&self.file, map, *allocated)?;
            // Written zeros, not `fallocate`d space, under every policy.
            // With a sync per append, a sync over allocated-but-unwritten
            // space must also write the file's extent metadata: a
            // 16-record group's fdatasync took 190 µs there against 165 µs
            // over zeros on the bench machine. Without one, the first touch
            // of an unwritten page through the map reads it in (readahead)
            // and maps its blocks (`page_mkwrite`): with `fallocate` and
            // `MADV_POPULATE_WRITE` that was a quarter of the time of a
            // `never` append; over written zeros the pages are already in
            // the page cache with their space reserved, and `never` went
            // from 0.80–0.83M to 1.09–1.11M appends/s (the `group_commit`
            // example, `DURABILITY=never THREADS=1`). The zeros are
            // overwritten in the page cache long before write-back, so they
            // cost a copy, not a second write to the disk; with a sync per
            // append they reach the disk with the next sync. A full disk
            // fails this write (delayed allocation reserves the space), so
            // no later store through the map can fault for lack of space.
            match write_zeros(&self.file, *allocated, want - *allocated) {
                Ok(()) => *allocated = want,
                // A full disk: only the space this append needs (the step
                // ahead is a convenience); failing that, the error stands.
                // Zeros a failed write got in count as allocated, so the
                // tail is still cut to its records.
                Err(e) if ahead::is_full(&e) => {
                    write_zeros(&self.file, *allocated, end - *allocated)?;
                    *allocated = self.file.metadata()?.len().clamp(end, want);
                }
                Err(e) => return Err(e),
            }
            Ok(())
        }

        fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
            let end = offset + buf.len() as u64;
            self.reserve(end)?;
            let Some(map) = &mut self.map else {
                return std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset);
            };
            let range = usize::try_from(offset).unwrap_or(usize::MAX)
                ..usize::try_from(end).unwrap_or(usize::MAX);
            match map.get_mut(range) {
                Some(dst) => {
                    dst.copy_from_slice(buf);
                    Ok(())
                }
                None => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("append to byte {end} is past the mapped range"),
                )),
            }
        }
    }

    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    mod tests {
        use std::os::unix::fs::FileExt;

        use super::*;

        #[test]
        fn write_zeros_writes_exactly_the_range_in_any_length() {
            let tmp = tempfile::tempdir().unwrap();
            let f = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(tmp.path().join("f"))
                .unwrap();
            // Lengths below one chunk, at chunk and call boundaries, and
            // past one call's 16 iovecs.
            let big = ZERO_CHUNK_BYTES * ZERO_IOVECS;
            for len in [
                1usize,
                100,
                ZERO_CHUNK_BYTES,
                ZERO_CHUNK_BYTES + 1,
                big,
                big + 4097,
                3 * big - 1,
            ] {
                let total = len + 20;
                f.set_len(0).unwrap();
                f.write_all_at(&vec![0xAB; total], 0).unwrap();
                write_zeros(&f, 7, len as u64).unwrap();
                let mut got = vec![0u8; total];
                f.read_exact_at(&mut got, 0).unwrap();
                assert!(got[..7].iter().all(|&b| b == 0xAB), "{len}: before");
                assert!(got[7..7 + len].iter().all(|&b| b == 0), "{len}: zeros");
                assert!(got[7 + len..].iter().all(|&b| b == 0xAB), "{len}: after");
                assert_eq!(f.metadata().unwrap().len(), total as u64);
            }
            // Past the end, the file grows.
            write_zeros(&f, 5 * big as u64, 10).unwrap();
            assert_eq!(f.metadata().unwrap().len(), 5 * big as u64 + 10);
        }

        impl RealAppendSpace {
            fn ahead(&self) -> Option<&Ahead> {
                match &self.growth {
                    Growth::Ahead(a) => Some(a),
                    Growth::Inline { .. } => None,
                }
            }
        }

        fn tail_file(dir: &std::path::Path) -> File {
            let f = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.join("tail"))
                .unwrap();
            f.write_all_at(&[7u8; 64], 0).unwrap();
            f
        }

        /// Record-sized writes with a pattern each: what the file must hold.
        fn records(n: usize) -> Vec<Vec<u8>> {
            (0..n)
                .map(|i| {
                    let len = 150 + i % 160;
                    (0..len).map(|j| (i * 31 + j) as u8 | 1).collect()
                })
                .collect()
        }

        #[test]
        fn every_kind_of_tail_space_holds_each_append_and_reports_its_length() {
            let tmp = tempfile::tempdir().unwrap();
            // Mapped with the thread ahead, mapped without it (as where
            // `/proc` is missing), and written (a sync per append).
            for (synced, thread) in [(false, true), (false, false), (true, false)] {
                let f = tail_file(tmp.path());
                let cap = 24 << 20;
                let mut space = open_space(&f, cap, synced).unwrap().unwrap();
                if !thread {
                    space.growth = Growth::inline(f.metadata().unwrap().len());
                }
                assert_eq!(space.ahead().is_some(), thread);
                let recs = records(60_000);
                let mut at = 64u64;
                for r in &recs {
                    space.write_at(r, at).unwrap();
                    at += r.len() as u64;
                }
                let allocated = space.allocated();
                assert!(allocated >= at && allocated <= cap, "{allocated} {at}");
                drop(space);
                // The file is exactly the allocated length: the thread
                // stopped with its last step, and nothing grows it after.
                assert_eq!(f.metadata().unwrap().len(), allocated);
                let mut got = vec![0u8; at as usize];
                f.read_exact_at(&mut got, 0).unwrap();
                assert_eq!(&got[..64], &[7u8; 64]);
                let mut off = 64;
                for (i, r) in recs.iter().enumerate() {
                    assert_eq!(
                        &got[off..off + r.len()],
                        &r[..],
                        "record {i} ({synced} {thread})"
                    );
                    off += r.len();
                }
                let mut rest = vec![1u8; (allocated - at) as usize];
                f.read_exact_at(&mut rest, at).unwrap();
                assert!(rest.iter().all(|&b| b == 0), "zeros past the end");
                // Past the capacity is refused, not written.
                let mut space = open_space(&f, cap, synced).unwrap().unwrap();
                assert_eq!(
                    space.write_at(&[1; 10], cap - 5).unwrap_err().kind(),
                    io::ErrorKind::InvalidInput
                );
            }
        }

        #[test]
        fn the_tail_is_synced_every_few_mib_by_the_sync_thread() {
            let tmp = tempfile::tempdir().unwrap();
            let f = tail_file(tmp.path());
            let mut space = open_space(&f, 48 << 20, false).unwrap().unwrap();
            let mut at = 64u64;
            for r in records(120_000).iter() {
                space.write_at(r, at).unwrap();
                at += r.len() as u64;
            }
            assert!(at > 20 << 20, "{at}");
            let ahead = space.ahead().unwrap();
            // The syncs run beside the appends: wait for them (bounded).
            for _ in 0..1000 {
                if ahead.syncs() >= 2 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(ahead.syncs() >= 2, "{} syncs", ahead.syncs());
        }

        #[test]
        fn a_failed_sync_is_returned_to_the_next_append() {
            let tmp = tempfile::tempdir().unwrap();
            let f = tail_file(tmp.path());
            let mut space = open_space(&f, 48 << 20, false).unwrap().unwrap();
            space.ahead().unwrap().fail_syncs();
            let mut at = 64u64;
            let mut err = None;
            for r in records(200_000).iter() {
                if let Err(e) = space.write_at(r, at) {
                    err = Some(e);
                    break;
                }
                at += r.len() as u64;
                if at > 40 << 20 {
                    // Past the first sync's point: wait for the thread to
                    // fail (bounded), then the next append must.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            let e = err.expect("an append failed");
            assert!(e.to_string().contains("fdatasync failed"), "{e}");
            assert!(space.write_at(&[1; 10], at).is_err());
        }

        /// Regression (issue 27): on a full disk `cairn record` refused a
        /// 21-byte event because the tail reserves space 2 MiB ahead of
        /// its appends. When that reservation finds no space, appends go
        /// on into what the disk still has, up to its last byte.
        #[test]
        fn appends_use_the_last_free_space_when_reserving_ahead_fails() {
            let tmp = tempfile::tempdir().unwrap();
            let f = tail_file(tmp.path());
            let mut space = open_space(&f, 24 << 20, false).unwrap().unwrap();
            let limit = 5 << 20;
            space.ahead().unwrap().fail_past(limit);
            let recs = records(60_000);
            let mut at = 64u64;
            let mut failed_at = None;
            for r in &recs {
                match space.write_at(r, at) {
                    Ok(()) => at += r.len() as u64,
                    Err(e) => {
                        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
                        failed_at = Some(at);
                        break;
                    }
                }
            }
            let failed_at = failed_at.expect("an append failed");
            // Only an append that does not fit in what is left fails.
            assert!(failed_at <= limit, "{failed_at}");
            assert!(
                failed_at + 400 > limit,
                "failed at {failed_at}, {limit} free"
            );
            drop(space);
            let mut got = vec![0u8; (failed_at - 64) as usize];
            f.read_exact_at(&mut got, 64).unwrap();
            let mut off = 0;
            for r in recs.iter() {
                if off + r.len() > got.len() {
                    break;
                }
                assert_eq!(&got[off..off + r.len()], &r[..]);
                off += r.len();
            }
        }

        #[test]
        fn the_threads_error_is_returned_to_every_later_append() {
            let tmp = tempfile::tempdir().unwrap();
            let f = tail_file(tmp.path());
            let mut space = open_space(&f, 24 << 20, false).unwrap().unwrap();
            let limit = 5 << 20;
            space.ahead().unwrap().fail_past(limit);
            let recs = records(60_000);
            let mut at = 64u64;
            let mut failed_at = None;
            for r in &recs {
                match space.write_at(r, at) {
                    Ok(()) => at += r.len() as u64,
                    Err(e) => {
                        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
                        assert!(e.to_string().contains("ahead of appends"), "{e}");
                        failed_at = Some(at);
                        break;
                    }
                }
            }
            // Appends went on until they needed space the thread could not
            // reserve: none was lost and none went past the space that is.
            let failed_at = failed_at.expect("an append failed");
            assert!(failed_at <= limit, "{failed_at}");
            assert!(failed_at + 400 > limit - (2 << 20), "{failed_at}");
            for _ in 0..3 {
                assert_eq!(
                    space.write_at(&[1; 10], 64).unwrap_err().kind(),
                    io::ErrorKind::StorageFull
                );
            }
            drop(space);
            let mut got = vec![0u8; (failed_at - 64) as usize];
            f.read_exact_at(&mut got, 64).unwrap();
            let mut off = 0;
            for r in recs.iter() {
                if off + r.len() > got.len() {
                    break;
                }
                assert_eq!(&got[off..off + r.len()], &r[..]);
                off += r.len();
            }
        }
    }
}

impl Vfs for RealVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        let mut o = OpenOptions::new();
        o.read(true).mode(0o600);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                o.write(true);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true);
            }
            OpenMode::CreateTruncate => {
                o.write(true).create(true).truncate(true);
            }
        }
        Ok(Arc::new(RealFile(o.open(path)?)))
    }

    fn map(&self, path: &Path) -> io::Result<Mapped> {
        let f = File::open(path)?;
        if f.metadata()?.len() == 0 {
            return Ok(Mapped::Bytes(Arc::from(Vec::new())));
        }
        // SAFETY: cairn only maps files that are immutable once written
        // (sealed segments and packs), and holds the store lock, so no other
        // cairn process modifies them while mapped. A process outside cairn
        // truncating the file could still cause SIGBUS; that is outside the
        // store's contract, as with every mmap-based storage engine.
        let m = unsafe { memmap2::Mmap::map(&f)? };
        Ok(Mapped::Mmap(m))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir)? {
            out.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<LockGuard> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        match f.try_lock() {
            Ok(()) => {
                // Record who holds it, for the humans reading the lock file.
                // Written over the old line, and cut only when the length
                // differs: a truncation to zero first cost a journalled
                // metadata update (milliseconds on a busy disk) per open.
                let line = format!("pid {}\n", std::process::id());
                let _ = f.write_all_at(line.as_bytes(), 0);
                if f.metadata().map(|m| m.len()).ok() != Some(line.len() as u64) {
                    let _ = f.set_len(line.len() as u64);
                }
                Ok(LockGuard(Box::new(f)))
            }
            Err(fs::TryLockError::WouldBlock) => {
                Err(io::Error::new(io::ErrorKind::WouldBlock, "locked"))
            }
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}
