//! Many appending threads (group commit), poisoning after a failed fsync or
//! write, and the read-only LogReader beside a writer.
#![allow(clippy::unwrap_used)]

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_codec::{frame, Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::{Durability, Log, LogOptions, LogReader};
use cairn_engine::vfs::{LockGuard, Mapped, OpenMode};
use cairn_engine::{EngineError, RealVfs, Vfs, VfsFile};

mod support;

/// A real file system that counts fsyncs, can slow them down, and can be
/// told to fail them or writes.
#[derive(Debug, Default)]
struct Faulty {
    fail_sync: AtomicBool,
    fail_write: AtomicBool,
    slow_sync: AtomicBool,
    syncs: AtomicU64,
    /// Syncs made by threads other than the `interval` flusher.
    syncs_off_flusher: AtomicU64,
    /// Two syncs in flight, the earlier failing after the later succeeded:
    /// 0 off; 1 armed (the next sync waits); 2 the first sync waits for a
    /// second to finish; 3 a second finished (the first then fails).
    gate: AtomicU32,
}

#[derive(Debug)]
struct FaultyFile {
    inner: Arc<dyn VfsFile>,
    f: Arc<Faulty>,
}

impl VfsFile for FaultyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.f.fail_write.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        self.inner.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        let gate = &self.f.gate;
        if gate
            .compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            // Long enough for a second sync to start and end when more
            // than one may run at once (a hang guard then); with one at a
            // time the second appender waits for this one, and this fails
            // first.
            let deadline = std::time::Instant::now() + Duration::from_secs(1);
            while gate.load(Ordering::SeqCst) != 3 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            return Err(io::Error::other("injected write-back failure"));
        }
        let r = self.sync_inner();
        let _ = gate.compare_exchange(2, 3, Ordering::SeqCst, Ordering::SeqCst);
        r
    }
}

impl FaultyFile {
    fn sync_inner(&self) -> io::Result<()> {
        self.f.syncs.fetch_add(1, Ordering::SeqCst);
        if std::thread::current().name() != Some("cairn-log-flush") {
            self.f.syncs_off_flusher.fetch_add(1, Ordering::SeqCst);
        }
        if self.f.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fsync failure"));
        }
        if self.f.slow_sync.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.inner.sync_data()
    }
}

#[derive(Debug)]
struct FaultyVfs(Arc<Faulty>);

impl Vfs for FaultyVfs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(FaultyFile {
            inner: RealVfs.open(path, mode)?,
            f: self.0.clone(),
        }))
    }
    fn map(&self, path: &Path) -> io::Result<Mapped> {
        RealVfs.map(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        RealVfs.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        RealVfs.create_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealVfs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealVfs.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        RealVfs.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        RealVfs.exists(path)
    }
    fn lock_exclusive(&self, path: &Path) -> io::Result<LockGuard> {
        RealVfs.lock_exclusive(path)
    }
}

fn ev(i: u64) -> Event {
    let mut e =
        Event::new(EventKind::ToolCall, format!("t{}", i % 16)).with_text(format!("call {i}"));
    e.ts = Timestamp(1_700_000_000_000 + i as i64);
    e
}

/// The byte offset of frame `n` (from 0) in a segment file's `bytes`.
fn frame_offset(bytes: &[u8], n: usize) -> usize {
    let mut off = cairn_codec::segment::SEGMENT_HEADER_LEN;
    for _ in 0..n {
        off += frame::decode(&bytes[off..]).unwrap().len();
    }
    off
}

fn opts(seg: u64, durability: Durability) -> LogOptions {
    LogOptions {
        segment_size_bytes: seg,
        durability,
        ..LogOptions::default()
    }
}

#[test]
fn many_threads_always_dense_lsns_and_shared_fsyncs() {
    let tmp = tempfile::tempdir().unwrap();
    let faulty = Arc::new(Faulty::default());
    faulty.slow_sync.store(true, Ordering::SeqCst);
    let vfs: Arc<dyn Vfs> = Arc::new(FaultyVfs(faulty.clone()));
    let log =
        Arc::new(Log::open(vfs.clone(), tmp.path(), opts(8 * 1024, Durability::Always)).unwrap());
    const THREADS: u64 = 16;
    const PER: u64 = 40;
    let before = faulty.syncs.load(Ordering::SeqCst);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..PER {
                    let n = t * 1000 + i;
                    if i % 10 == 9 {
                        let (a, b) = log.append_batch(&[ev(n), ev(n + 500)]).unwrap().unwrap();
                        assert_eq!(b.0, a.0 + 1);
                        mine.push((a, n));
                        mine.push((b, n + 500));
                    } else {
                        let lsn = log.append(&ev(n)).unwrap();
                        // Durable and visible as soon as append returns.
                        assert!(log.head().last_lsn >= lsn);
                        mine.push((lsn, n));
                    }
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<(Lsn, u64)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let syncs = faulty.syncs.load(Ordering::SeqCst) - before;
    all.sort();
    let total = THREADS * (PER + PER / 10);
    assert_eq!(all.len() as u64, total);
    for (i, (lsn, _)) in all.iter().enumerate() {
        assert_eq!(*lsn, Lsn(i as u64 + 1), "LSNs are dense");
    }
    let appends = THREADS * PER;
    assert!(
        syncs < appends / 2,
        "group commit shared fsyncs: {syncs} fsyncs for {appends} appends"
    );
    for (lsn, n) in &all {
        assert_eq!(log.read(*lsn).unwrap().event, ev(*n));
    }
    assert!(log.stats().sealed_segments > 0);
    assert!(log.verify().unwrap().problems.is_empty());
    drop(log);
    let log = Log::open(vfs, tmp.path(), LogOptions::default()).unwrap();
    assert_eq!(log.head().last_lsn, Lsn(total));
}

/// Threads parked behind a sync that fails are all released with an error
/// (none hangs, none is told its record is durable), and every record
/// acknowledged before the failure survives a reopen.
#[test]
fn failed_fsync_releases_every_waiting_appender() {
    let tmp = tempfile::tempdir().unwrap();
    let faulty = Arc::new(Faulty::default());
    faulty.slow_sync.store(true, Ordering::SeqCst);
    let vfs: Arc<dyn Vfs> = Arc::new(FaultyVfs(faulty.clone()));
    let log = Arc::new(Log::open(vfs, tmp.path(), opts(1 << 20, Durability::Always)).unwrap());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let acks = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..12u64)
        .map(|t| {
            let (log, done_tx, acks) = (log.clone(), done_tx.clone(), acks.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let err = loop {
                    match log.append(&ev(t * 10_000 + acked.len() as u64)) {
                        Ok(lsn) => {
                            acked.push(lsn);
                            acks.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => break e,
                    }
                };
                done_tx.send(()).unwrap();
                (acked, err)
            })
        })
        .collect();
    // Fail the syncs once appends are flowing (some acknowledged, others
    // waiting behind a sync).
    let start = std::time::Instant::now();
    while acks.load(Ordering::SeqCst) < 24 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    faulty.fail_sync.store(true, Ordering::SeqCst);
    for _ in 0..12 {
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every appender is released after the failed fsync");
    }
    let mut acked = Vec::new();
    for h in handles {
        let (mine, err) = h.join().unwrap();
        assert!(
            matches!(err, EngineError::Io { .. } | EngineError::Poisoned { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("injected fsync failure"), "{err}");
        acked.extend(mine);
    }
    assert!(!acked.is_empty());
    drop(log);
    let log = Log::open(Arc::new(RealVfs), tmp.path(), LogOptions::default()).unwrap();
    for lsn in acked {
        assert!(log.read(lsn).is_ok(), "acknowledged {lsn:?} survives");
    }
}

#[test]
fn failed_fsync_poisons_the_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let faulty = Arc::new(Faulty::default());
    let vfs: Arc<dyn Vfs> = Arc::new(FaultyVfs(faulty.clone()));
    let log = Log::open(vfs, tmp.path(), opts(1 << 20, Durability::Always)).unwrap();
    assert_eq!(log.append(&ev(1)).unwrap(), Lsn(1));
    faulty.fail_sync.store(true, Ordering::SeqCst);
    let err = log.append(&ev(2)).unwrap_err();
    assert!(matches!(err, EngineError::Io { .. }), "{err}");
    assert!(err.to_string().contains("injected fsync failure"));
    faulty.fail_sync.store(false, Ordering::SeqCst);
    for _ in 0..3 {
        let err = log.append(&ev(3)).unwrap_err();
        assert!(matches!(err, EngineError::Poisoned { .. }), "{err}");
        assert!(err.to_string().contains("injected fsync failure"), "{err}");
    }
    assert!(matches!(
        log.append_batch(&[ev(4)]),
        Err(EngineError::Poisoned { .. })
    ));
    assert!(matches!(log.sync(), Err(EngineError::Poisoned { .. })));
    // The unacknowledged record is not shown to readers as committed.
    assert_eq!(log.head().last_lsn, Lsn(1));
    assert!(log.close().is_err());
    let log = Log::open(Arc::new(RealVfs), tmp.path(), LogOptions::default()).unwrap();
    assert!(log.head().last_lsn >= Lsn(1));
    assert_eq!(log.read(Lsn(1)).unwrap().event, ev(1));
}

#[test]
fn failed_write_poisons_the_writer_in_every_policy() {
    for d in [
        Durability::Never,
        Durability::Interval { ms: 1000 },
        Durability::Always,
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let faulty = Arc::new(Faulty::default());
        let vfs: Arc<dyn Vfs> = Arc::new(FaultyVfs(faulty.clone()));
        let log = Log::open(vfs, tmp.path(), opts(1 << 20, d)).unwrap();
        log.append(&ev(1)).unwrap();
        faulty.fail_write.store(true, Ordering::SeqCst);
        assert!(matches!(log.append(&ev(2)), Err(EngineError::Io { .. })));
        faulty.fail_write.store(false, Ordering::SeqCst);
        assert!(
            matches!(log.append(&ev(3)), Err(EngineError::Poisoned { .. })),
            "{d}"
        );
    }
}

#[test]
fn reader_follows_the_writer_and_rolls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let log = Log::open(Arc::new(RealVfs), dir, opts(1500, Durability::Never)).unwrap();
    for i in 1..=5 {
        log.append(&ev(i)).unwrap();
    }
    let mut r = LogReader::open(Arc::new(RealVfs), dir).unwrap();
    assert_eq!(r.head(), log.head());
    for i in 6..=40 {
        log.append(&ev(i)).unwrap();
    }
    log.append_batch(&[ev(41), ev(42), ev(43)]).unwrap();
    assert_eq!(r.head().last_lsn, Lsn(5), "nothing new until refresh");
    assert_eq!(r.refresh().unwrap(), log.head());
    let got: Vec<Event> = r.iter_from(Lsn(1)).map(|x| x.unwrap().event).collect();
    assert_eq!(got, (1..=43).map(ev).collect::<Vec<_>>());
    assert_eq!(r.read(Lsn(20)).unwrap().event, ev(20));
    assert!(r.stats().sealed_segments > 0);
    let v = r.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    assert_eq!(v.head, log.head());
    // Refresh with nothing new changes nothing.
    assert_eq!(r.refresh().unwrap(), log.head());
}

#[test]
fn reader_never_sees_part_of_a_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    {
        let log = Log::open(Arc::new(RealVfs), &src, opts(1 << 20, Durability::Never)).unwrap();
        for i in 1..=3 {
            log.append(&ev(i)).unwrap();
        }
        log.append_batch(&[ev(4), ev(5), ev(6)]).unwrap();
        log.close().unwrap();
    }
    let name = "00000000000000000001.seg";
    let full = std::fs::read(src.join(name)).unwrap();
    // Where the batch starts: after the third frame.
    let off = frame_offset(&full, 3);
    let dst = tmp.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(dst.join(name), &full[..off]).unwrap();
    let mut r = LogReader::open(Arc::new(RealVfs), &dst).unwrap();
    assert_eq!(r.head().last_lsn, Lsn(3));
    // The writer's bytes arrive a few at a time: the batch appears only whole.
    for cut in (off..=full.len()).step_by(7).chain([full.len()]) {
        std::fs::write(dst.join(name), &full[..cut]).unwrap();
        let h = r.refresh().unwrap();
        let expect = if cut == full.len() { 6 } else { 3 };
        assert_eq!(h.last_lsn, Lsn(expect), "cut {cut}");
        assert_eq!(r.iter_from(Lsn(1)).count() as u64, expect);
    }
}

/// A log of ten records closed cleanly, then the fifth frame's body
/// damaged in place; the segment's path and the damaged byte's offset.
fn log_damaged_at_the_fifth_record(dir: &std::path::Path) -> (std::path::PathBuf, usize) {
    {
        let log = Log::open(Arc::new(RealVfs), dir, opts(1 << 20, Durability::Never)).unwrap();
        for i in 1..=10 {
            log.append(&ev(i)).unwrap();
        }
        log.close().unwrap();
    }
    let name = dir.join("00000000000000000001.seg");
    let mut bytes = std::fs::read(&name).unwrap();
    let off = frame_offset(&bytes, 4);
    bytes[off + 30] ^= 0x40;
    std::fs::write(&name, &bytes).unwrap();
    (name, off)
}

/// Reading from `r` to its head gives the four records before the damage,
/// then an error naming the segment, the byte offset and LSN 5.
fn reads_four_then_names_the_damage(r: &LogReader, off: usize) {
    let got: Vec<_> = r.iter_from(Lsn(1)).collect();
    assert_eq!(got.len(), 5);
    assert!(got[..4].iter().all(|g| g.is_ok()));
    let err = got.into_iter().last().unwrap().unwrap_err();
    assert!(err.is_corruption(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("00000000000000000001.seg")
            && text.contains(&format!("byte offset {off}"))
            && text.contains("LSN 5"),
        "{text}"
    );
}

#[test]
fn reader_names_damage_that_intact_records_follow() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (_, off) = log_damaged_at_the_fifth_record(&dir);
    // No clean close's description of the tail (a crash): the reader reads
    // and chains every frame. It used to stop at the damage, as at a
    // record being written, and show a log of four records as if whole. It
    // reads the four, and reading to its head then fails naming the damage.
    std::fs::remove_file(dir.join("tail.state")).unwrap();
    let r = LogReader::open(Arc::new(RealVfs), &dir).unwrap();
    assert_eq!(r.head().last_lsn, Lsn(4));
    reads_four_then_names_the_damage(&r, off);
}

#[test]
fn reader_trusts_a_clean_close_as_the_writer_does_and_still_never_returns_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let (_, off) = log_damaged_at_the_fifth_record(&dir);
    // The tail is as the clean close described it (length, last frame,
    // LSN, chain): the reader opens without reading its frames, as the
    // writer's open does, so its head is the tenth record. The damaged
    // frame fails its CRC when it is read: an error naming it, never a
    // record.
    let mut r = LogReader::open(Arc::new(RealVfs), &dir).unwrap();
    assert_eq!(r.head().last_lsn, Lsn(10));
    reads_four_then_names_the_damage(&r, off);
    let err = r.read(Lsn(5)).unwrap_err();
    assert!(err.is_corruption());
    // Told of it, the reader ends where one that read every frame at open
    // ends: at the fourth record, and reading to its head names the damage
    // (what the query index folds up to).
    assert!(r.note_damage(&err));
    assert_eq!(r.head().last_lsn, Lsn(4));
    assert_eq!(r.refresh().unwrap().last_lsn, Lsn(4));
    reads_four_then_names_the_damage(&r, off);
    assert!(!r.note_damage(&err), "taken in once");
    // verify reads and chains every frame: it names the damage.
    let report = r.verify().unwrap();
    assert!(!report.problems.is_empty(), "{report:?}");
}

#[test]
fn reader_of_a_live_writer_with_concurrent_appends() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let log = Arc::new(Log::open(Arc::new(RealVfs), &dir, opts(4096, Durability::Never)).unwrap());
    let w = log.clone();
    let writer = std::thread::spawn(move || {
        for i in 1..=300u64 {
            if i % 3 == 0 {
                w.append_batch(&[ev(i * 10), ev(i * 10 + 1)]).unwrap();
            } else {
                w.append(&ev(i * 10)).unwrap();
            }
        }
    });
    let mut r = LogReader::open(Arc::new(RealVfs), &dir).unwrap();
    let mut seen = 0u64;
    loop {
        let h = r.refresh().unwrap();
        let mut n = seen;
        for rec in r.iter_from(Lsn(seen + 1)) {
            let rec = rec.unwrap();
            n += 1;
            assert_eq!(rec.lsn, Lsn(n));
        }
        assert_eq!(Lsn(n), h.last_lsn);
        seen = n;
        if writer.is_finished() && seen == log.head().last_lsn.0 {
            break;
        }
    }
    writer.join().unwrap();
    assert_eq!(seen, 400);
}

/// Group commit reports what it did: as many records made durable as were
/// appended, in fewer fdatasyncs than records when threads append together.
#[test]
fn group_commit_stats_count_syncs_and_records() {
    let tmp = tempfile::tempdir().unwrap();
    let faulty = Arc::new(Faulty::default());
    faulty.slow_sync.store(true, Ordering::SeqCst);
    let vfs: Arc<dyn Vfs> = Arc::new(FaultyVfs(faulty));
    let log = Arc::new(Log::open(vfs, tmp.path(), opts(1 << 20, Durability::Always)).unwrap());
    assert_eq!(log.group_commit_stats(), Default::default());
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..20 {
                    log.append(&ev(t * 100 + i)).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = log.group_commit_stats();
    assert_eq!(s.records, 160);
    assert!(s.syncs > 0 && s.syncs < 160, "{s:?}");
}

/// A lone thread appending batches of varying size (a binding's committer
/// thread) never waits to gather a group: no other thread can add to it,
/// so a batch smaller than the last would only wait out the budget.
#[test]
fn a_lone_batch_appender_never_waits_to_gather() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Log::open(
        Arc::new(RealVfs),
        tmp.path(),
        opts(1 << 20, Durability::Always),
    )
    .unwrap();
    let mut n = 0;
    for round in 0..40u64 {
        let size = if round % 2 == 0 { 8 } else { 1 + round % 7 };
        let batch: Vec<Event> = (0..size).map(|i| ev(round * 100 + i)).collect();
        log.append_batch(&batch).unwrap();
        n += size;
    }
    let s = log.group_commit_stats();
    assert_eq!(s.records, n, "{s:?}");
    assert_eq!(s.syncs, 40, "one sync per batch: {s:?}");
    assert_eq!(s.gather_time, Duration::ZERO, "{s:?}");
}

/// With the `interval` policy appenders never wait for a sync, so none is
/// ever drafted into running one (as the appender completing a group is
/// with `always`): every fdatasync while they append is the flusher's.
#[test]
fn interval_appenders_never_run_a_sync() {
    for durability in [Durability::Interval { ms: 1 }, Durability::Always] {
        let tmp = tempfile::tempdir().unwrap();
        let faulty = Arc::new(Faulty::default());
        let vfs: Arc<dyn Vfs> = Arc::new(FaultyVfs(faulty.clone()));
        let log = Arc::new(Log::open(vfs, tmp.path(), opts(64 << 20, durability)).unwrap());
        let before = faulty.syncs_off_flusher.load(Ordering::SeqCst);
        let handles: Vec<_> = (0..8u64)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..2000 {
                        log.append(&ev(t * 10_000 + i)).unwrap();
                        if i % 200 == 0 {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let off = faulty.syncs_off_flusher.load(Ordering::SeqCst) - before;
        let syncs = log.group_commit_stats().syncs;
        match durability {
            Durability::Always => assert!(off > 0, "appenders sync with always"),
            _ => {
                assert!(syncs > 0, "the flusher ran");
                assert_eq!(off, 0, "an interval appender ran a sync");
            }
        }
    }
}

/// A sync fails while a second appender waits. Where two syncs may run at
/// once, the earlier one fails after the later one succeeded: the later
/// one's success proves nothing about the earlier records (the kernel
/// reports a write-back error to one caller). With one at a time, the
/// second appender waits for the failed sync. Either way neither appender
/// may be acknowledged, and the writer is poisoned.
#[test]
fn a_later_sync_never_acknowledges_past_an_earlier_failed_one() {
    for max_syncs_in_flight in [2, 1] {
        let tmp = tempfile::tempdir().unwrap();
        let faulty = Arc::new(Faulty::default());
        let vfs: Arc<dyn Vfs> = Arc::new(FaultyVfs(faulty.clone()));
        let o = LogOptions {
            max_syncs_in_flight,
            ..opts(1 << 20, Durability::Always)
        };
        let log = Arc::new(Log::open(vfs, tmp.path(), o).unwrap());
        faulty.gate.store(1, Ordering::SeqCst);
        let first = {
            let log = log.clone();
            std::thread::spawn(move || log.append(&ev(1)))
        };
        while faulty.gate.load(Ordering::SeqCst) != 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The first sync is running; this append starts a second one, or
        // waits for it.
        let second = log.append(&ev(2));
        let first = first.join().unwrap();
        let ctx = format!("{max_syncs_in_flight} in flight");
        // With two, the second sync ran, and ended, before the first failed.
        let second_synced = faulty.gate.load(Ordering::SeqCst) == 3;
        assert_eq!(second_synced, max_syncs_in_flight == 2, "{ctx}");
        assert!(first.is_err(), "{ctx}: the failed sync's appender is told");
        assert!(
            matches!(
                second,
                Err(EngineError::Poisoned { .. }) | Err(EngineError::Io { .. })
            ),
            "{ctx}: the later appender must not be acknowledged: {second:?}"
        );
        assert!(log.append(&ev(3)).is_err(), "{ctx}: the writer is poisoned");
    }
}

/// With `always`, appended frames are held back until the sync that covers
/// them writes the whole group at once. Held-back frames reach the file in
/// LSN order through segment rolls, batches too large to be held back
/// (written at once, after what is held), concurrent appenders, a crash
/// and a reopen; each thread's records keep its order.
#[test]
fn held_back_frames_reach_the_file_in_order_through_rolls_and_large_batches() {
    const THREADS: u64 = 6;
    const PER_THREAD: u64 = 150;
    const BIG_BATCH: u64 = 120;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let o = opts(256 << 10, Durability::Always);
    let log = Log::open(Arc::new(RealVfs), dir, o).unwrap();
    // ~3 KiB each (hex digits: zstd cannot shrink them below half), so a
    // batch is ~360 KiB: past what the writer holds back, and past the
    // segment size (alone in its segment).
    let big = |i: u64| Event::new(EventKind::Reply, "big").with_text(support::hex_text(i, 6000));
    let acked: Vec<(u64, Lsn)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let log = &log;
                s.spawn(move || {
                    let mut acked = Vec::new();
                    for k in 0..PER_THREAD {
                        let i = t * 1000 + k;
                        if t == 0 && k % 50 == 25 {
                            let batch: Vec<Event> =
                                (0..BIG_BATCH).map(|j| big(i * 1000 + j)).collect();
                            let (first, last) = log.append_batch(&batch).unwrap().unwrap();
                            assert_eq!(last.0 - first.0 + 1, BIG_BATCH);
                        }
                        acked.push((i, log.append(&ev(i)).unwrap()));
                    }
                    acked
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let total = THREADS * PER_THREAD + 3 * BIG_BATCH;
    assert_eq!(log.head().last_lsn, Lsn(total));
    assert!(log.stats().sealed_segments > 2, "the log rolled");
    let check = |log: &Log| {
        let got: Vec<Event> = log.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect();
        assert_eq!(got.len() as u64, total);
        for (i, lsn) in &acked {
            assert_eq!(got[lsn.0 as usize - 1], ev(*i), "LSN {lsn}");
        }
        // Each thread's records in the order it appended them.
        for t in 0..THREADS {
            let mine: Vec<Lsn> = acked
                .iter()
                .filter(|(i, _)| i / 1000 == t)
                .map(|(_, l)| *l)
                .collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "thread {t}");
        }
        // Each big batch whole and contiguous.
        let bigs: Vec<usize> = got
            .iter()
            .enumerate()
            .filter(|(_, e)| e.session == "big")
            .map(|(n, _)| n)
            .collect();
        assert_eq!(bigs.len() as u64, 3 * BIG_BATCH);
        for b in bigs.chunks(BIG_BATCH as usize) {
            assert_eq!(b[b.len() - 1] - b[0], BIG_BATCH as usize - 1);
        }
        let v = log.verify().unwrap();
        assert!(v.problems.is_empty(), "{:?}", v.problems);
    };
    check(&log);
    // The process's crash (the writer dropped without closing): every
    // acknowledged record is in the file and recovery keeps it.
    std::mem::forget(log);
    let log = Log::open(Arc::new(RealVfs), dir, o).unwrap();
    check(&log);
    log.close().unwrap();
    let log = Log::open(Arc::new(RealVfs), dir, o).unwrap();
    check(&log);
}

/// A log of `n` small records in segments of about 4 KiB on `sim`, closed
/// cleanly (its tail described by `tail.state`).
fn small_segments(sim: &Arc<cairn_engine::vfs::SimVfs>, dir: &Path, n: usize) {
    let o = LogOptions {
        segment_size_bytes: 4096,
        durability: Durability::Never,
        ..LogOptions::default()
    };
    let log = Log::open(sim.clone(), dir, o).unwrap();
    for i in 0..n {
        let e = Event::new(EventKind::Prompt, "s").with_text(format!("turn {i}: make it pass"));
        log.append(&e).unwrap();
    }
    log.close().unwrap();
}

/// The files a reader opens while `f` runs, by name.
fn opened_during(sim: &Arc<cairn_engine::vfs::SimVfs>, f: impl FnOnce()) -> Vec<String> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    sim.set_fault_hook(move |op| {
        if let cairn_engine::vfs::sim::SimOp::Open { path, .. } = op {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            s.lock().unwrap().push(name);
        }
        None
    });
    f();
    sim.clear_faults();
    let v = seen.lock().unwrap().clone();
    v
}

/// Regression (cold reader open read every sealed segment's sparse index
/// whole, and `tail.state` twice): a reader's open and its loss check read
/// no `.idx` file and `tail.state` once, so a new process's open does not
/// grow with the sealed history; a read maps the `.idx` of the one
/// segment it reads (regression: it opened it and read it in pieces into
/// a copy of its entries).
#[test]
fn reader_open_reads_no_sparse_index_and_tail_state_once() {
    let sim = Arc::new(cairn_engine::vfs::SimVfs::new());
    let dir = Path::new("/log");
    small_segments(&sim, dir, 200);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let mut reader = None;
    let at_open = opened_during(&sim, || {
        let r = LogReader::open(vfs.clone(), dir).unwrap();
        assert_eq!(r.recorded_loss().unwrap(), None);
        reader = Some(r);
    });
    let r = reader.unwrap();
    let spans = r.sealed_spans();
    assert!(spans.len() >= 3, "{} sealed segments", spans.len());
    assert!(!at_open.iter().any(|n| n.ends_with(".idx")), "{at_open:?}");
    let states = at_open.iter().filter(|n| *n == "tail.state").count();
    assert_eq!(states, 1, "{at_open:?}");
    let want = Lsn(spans[1].first.0 + 3);
    // Every open and every read (a `read_at`, or a `map`) by file name.
    let ops = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = ops.clone();
    sim.set_fault_hook(move |op| {
        use cairn_engine::vfs::sim::SimOp;
        let (open, path) = match op {
            SimOp::Open { path, .. } => (true, path),
            SimOp::Read { path } => (false, path),
            _ => return None,
        };
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        seen.lock().unwrap().push((open, name));
        None
    });
    let rec = r.read(want).unwrap();
    sim.clear_faults();
    assert_eq!(rec.lsn, want);
    let text = rec.event.text.as_deref().unwrap();
    assert_eq!(text, format!("turn {}: make it pass", want.0 - 1));
    // The read's `.idx` is mapped once and searched where it lies, never
    // opened and read in pieces (header, entries, CRC) into a copy; no
    // other `.idx` is touched.
    let idx = format!("{:020}.idx", spans[1].first.0);
    let ops = ops.lock().unwrap().clone();
    let of_idx: Vec<_> = ops.iter().filter(|(_, n)| n.ends_with(".idx")).collect();
    assert_eq!(of_idx, vec![&(false, idx)], "{ops:?}");
}

/// Regression (a reader's open listed the log directory twice: once for
/// its dictionaries, once for its segments): it lists it once.
#[test]
fn reader_open_lists_the_log_directory_once() {
    let sim = Arc::new(cairn_engine::vfs::SimVfs::new());
    let dir = Path::new("/log");
    small_segments(&sim, dir, 200);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let lists = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = lists.clone();
    sim.set_fault_hook(move |op| {
        if matches!(op, cairn_engine::vfs::sim::SimOp::Dir { path } if *path == Path::new("/log")) {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        None
    });
    let r = LogReader::open(vfs.clone(), dir).unwrap();
    sim.clear_faults();
    assert!(r.sealed_spans().len() >= 3);
    assert_eq!(lists.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A point read checks the frame it hands out (CRC and LSN) and steps
/// over the frames before it in its sparse-index interval by their
/// headers: damage inside an earlier frame's body is not its error (a
/// read of that record, and `verify`, name it), while a step that lands
/// anywhere but on the record asked for is one.
#[test]
fn point_read_checks_the_frame_it_hands_out() {
    let sim = Arc::new(cairn_engine::vfs::SimVfs::new());
    let dir = Path::new("/log");
    small_segments(&sim, dir, 200);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let r = LogReader::open(vfs.clone(), dir).unwrap();
    let span = r.sealed_spans()[1];
    // Offsets of the segment's first frames (its sparse index has one
    // entry, the first frame: the segment is one interval long).
    let mut offs = vec![64u64];
    r.frames_while(span.first, |fr| {
        offs.push(offs.last().unwrap() + fr.len() as u64);
        offs.len() < 6
    })
    .unwrap();
    let seg = dir.join(format!("{:020}.seg", span.first.0));
    let second = Lsn(span.first.0 + 1);
    let want = Lsn(span.first.0 + 3);
    // A flipped byte in the second frame's body.
    sim.corrupt(&seg, offs[1] + frame::HEADER_LEN as u64 + 2, b"#")
        .unwrap();
    let r = LogReader::open(vfs.clone(), dir).unwrap();
    assert_eq!(r.read(want).unwrap().lsn, want);
    let e = r.read(second).unwrap_err();
    assert!(
        e.to_string().contains("CRC") || e.to_string().contains("checksum"),
        "{e}"
    );
    // A damaged LSN in the second frame's header: the step stops there.
    sim.corrupt(&seg, offs[1] + 12, &[0xff]).unwrap();
    let r = LogReader::open(vfs.clone(), dir).unwrap();
    let e = r.read(want).unwrap_err().to_string();
    assert!(
        e.contains(&format!("where LSN {second} was expected")),
        "{e}"
    );
}
