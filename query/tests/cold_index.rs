//! The per-segment query index (`index::cold`) against a full scan of the
//! log: random logs cut into random segments, random filters, and index
//! files that are missing, cut short (a writer killed midway), damaged or
//! from another history. Every answer must equal the scan's.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use cairn_codec::{Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::SegmentSpan;
use cairn_engine::{RealVfs, Vfs};
use cairn_query::index::cold::{ColdIndex, FileEvent};
use cairn_query::index::seg::seg_index_name;
use cairn_query::index::summary::{Summary, SUMMARY_FILE};
use cairn_query::index::Index;
use cairn_query::query::{ColdAnswer, ColdAt};
use cairn_query::source::SnapshotManifests;
use cairn_query::source::{MemLog, RecordSource};
use cairn_query::Filter;
use cairn_query::Point;
use cairn_query::Query;
use proptest::prelude::*;

mod common;

const SESSIONS: [&str; 3] = ["s1", "s2", "s3"];
const PATHS: [&str; 5] = ["a.txt", "src/a.rs", "src/b.rs", "src/deep/c.rs", "srcx.rs"];
const KINDS: [EventKind; 4] = [
    EventKind::Prompt,
    EventKind::FileWrite,
    EventKind::FileMove,
    EventKind::ToolCall,
];

/// One generated event: (session, kind, path, to_path, model, ok, ts).
type Spec = (
    usize,
    usize,
    Option<usize>,
    Option<usize>,
    Option<usize>,
    bool,
    i64,
);

fn event(s: &Spec) -> Event {
    let mut e = Event::new(KINDS[s.1], SESSIONS[s.0]);
    e.path = s.2.map(|p| PATHS[p].to_string());
    e.to_path = s.3.map(|p| PATHS[p].to_string());
    e.model = s.4.map(|m| format!("m{m}"));
    e.agent = s.4.map(|m| format!("agent{}", m % 2));
    e.ok = s.5;
    e.ts = Timestamp(1_700_000_000_000 + s.6);
    e
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0..3usize,
        0..4usize,
        proptest::option::of(0..5usize),
        proptest::option::weighted(0.2, 0..5usize),
        proptest::option::of(0..3usize),
        proptest::bool::weighted(0.8),
        0..10_000i64,
    )
}

/// The log cut into sealed segments at `cuts` (the rest is the tail).
fn spans(log: &MemLog, cuts: &[u64]) -> Vec<SegmentSpan> {
    let head = log.head().unwrap().last_lsn.0;
    let mut ends: Vec<u64> = cuts
        .iter()
        .map(|c| c % (head + 1))
        .filter(|c| *c > 0)
        .collect();
    ends.sort_unstable();
    ends.dedup();
    let mut out = Vec::new();
    let mut first = 1;
    for end in ends {
        out.push(SegmentSpan {
            first: Lsn(first),
            last: Lsn(end),
            last_chain: log.read(Lsn(end)).unwrap().chain,
        });
        first = end + 1;
    }
    out
}

/// What a full scan of the log gives for `f`.
fn model(log: &MemLog, f: &Filter) -> Vec<Lsn> {
    let mut all: Vec<Lsn> = log
        .iter_from(Lsn::FIRST)
        .map(|r| r.unwrap())
        .filter(|r| f.matches(r))
        .map(|r| r.lsn)
        .collect();
    if f.newest_first {
        all.reverse();
    }
    all.truncate(f.limit.unwrap_or(usize::MAX));
    all
}

fn cold(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    log: &MemLog,
    sp: &[SegmentSpan],
    f: &Filter,
) -> (Vec<Lsn>, Vec<FileEvent>) {
    cold_t(vfs, dir, log, sp, f, u64::MAX)
}

/// [`cold`] with the tail's file rebuilt past `tail` records.
fn cold_t(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    log: &MemLog,
    sp: &[SegmentSpan],
    f: &Filter,
    tail: u64,
) -> (Vec<Lsn>, Vec<FileEvent>) {
    let ix = ColdIndex::with_tail_reindex(vfs, dir, log, sp, true, tail).unwrap();
    let mut got = Vec::new();
    assert!(ix
        .scan(f, &mut |r| {
            got.push(r.lsn);
            Ok(true)
        })
        .unwrap());
    (got, ix.events())
}

/// (session, kind, path, model, ok, since, until, since_lsn, limit, newest)
type FSpec = (
    Option<usize>,
    Option<usize>,
    Option<usize>,
    Option<usize>,
    Option<bool>,
    Option<i64>,
    Option<u64>,
    Option<usize>,
    bool,
    Option<i64>,
);

fn filter(s: &FSpec) -> Filter {
    let paths = [
        "a.txt", "src", "src/", "src/a.rs", "src/deep", "srcx.rs", "nope",
    ];
    Filter {
        session: s.0.map(|i| SESSIONS[i].to_string()),
        kind: s.1.map(|i| KINDS[i]),
        path: s.2.map(|i| paths[i].to_string()),
        model: s.3.map(|m| format!("m{m}")),
        ok: s.4,
        since: s.5.map(|t| Timestamp(1_700_000_000_000 + t)),
        since_lsn: s.6.map(Lsn),
        limit: s.7,
        newest_first: s.8,
        until: s.9.map(|t| Timestamp(1_700_000_000_000 + t)),
        ..Filter::all()
    }
}

fn fspec() -> impl Strategy<Value = FSpec> {
    (
        proptest::option::of(0..3usize),
        proptest::option::of(0..4usize),
        proptest::option::of(0..7usize),
        proptest::option::weighted(0.3, 0..3usize),
        proptest::option::weighted(0.2, any::<bool>()),
        proptest::option::weighted(0.2, 0..10_000i64),
        proptest::option::weighted(0.2, 0..120u64),
        proptest::option::of(0..8usize),
        any::<bool>(),
        proptest::option::weighted(0.2, 0..10_000i64),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every filter, on random segmentations and with every kind of damage
    /// to the files, answers as the full scan does.
    #[test]
    fn cold_index_answers_as_a_full_scan(
        events in proptest::collection::vec(spec(), 1..120),
        cuts in proptest::collection::vec(any::<u64>(), 0..5),
        filters in proptest::collection::vec(fspec(), 1..6),
        damage in (0..5u8, any::<usize>(), any::<u8>()),
        summary_damage in (0..4u8, any::<usize>()),
        tail in 1..40u64,
        more in proptest::collection::vec(spec(), 0..30),
        forward in any::<bool>(),
        times in proptest::collection::vec(-10..10_010i64, 1..6),
    ) {
        // Times going forward (as a live session's do), so that whole
        // segments fall before or after a time; else at random.
        let events: Vec<Spec> = if forward {
            events.into_iter().enumerate().map(|(i, mut s)| { s.6 = i as i64 * 50; s }).collect()
        } else {
            events
        };
        let log = MemLog::new();
        for s in &events {
            log.append(event(s)).unwrap();
        }
        let sp = spans(&log, &cuts);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segments");
        let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
        for fs in &filters {
            let f = filter(fs);
            if !ColdIndex::answers(&f) {
                continue;
            }
            let want = model(&log, &f);
            let (got, _) = cold_t(&vfs, &dir, &log, &sp, &f, tail);
            prop_assert_eq!(&got, &want, "first pass, {:?}", f);
            // Again, from the files the first pass wrote.
            let (got, _) = cold_t(&vfs, &dir, &log, &sp, &f, tail);
            prop_assert_eq!(&got, &want, "from the files, {:?}", f);
        }
        // Tree, diff and blame at random points, from the files the
        // filters' passes wrote: as the whole index answers.
        {
            let head = log.head().unwrap().last_lsn.0;
            let points: Vec<u64> = cuts.iter().map(|c| c % (head + 1)).chain([head]).collect();
            let ix = ColdIndex::with_tail_reindex(&vfs, &dir, &log, &sp, true, tail).unwrap();
            travel_as_the_whole_index(&log, &cairn_snapshot::MemBlobs::new(), &ix, &points, &PATHS);
            // Time points: the point and the records it leaves out.
            let whole = Index::build(&log).unwrap();
            for &x in &times {
                let t = Timestamp(1_700_000_000_000 + x);
                prop_assert_eq!(ix.time_point(t).unwrap(), whole.time_point(t), "time {}", x);
            }
        }
        // Records appended to the tail after its file was written: the
        // file covers a prefix, the rest is indexed in memory.
        for s in &more {
            log.append(event(s)).unwrap();
        }
        for fs in &filters {
            let f = filter(fs);
            if ColdIndex::answers(&f) {
                let (got, _) = cold_t(&vfs, &dir, &log, &sp, &f, tail);
                prop_assert_eq!(got, model(&log, &f), "grown tail, {:?}", f);
            }
        }
        // Damage one file: cut short (a writer killed midway), a byte
        // flipped, replaced by another history's, removed, or never
        // renamed into place (a writer killed between its write and its
        // rename: a temporary file, cut short, and no file).
        let mut files: Vec<_> = match std::fs::read_dir(&dir) {
            Ok(d) => d.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "qix")).collect(),
            Err(_) => return Ok(()),
        };
        if files.is_empty() {
            return Ok(());
        }
        files.sort();
        let path = files[damage.1 % files.len()].clone();
        let first = Lsn(path.file_stem().unwrap().to_str().unwrap().parse().unwrap());
        let victim = sp.iter().find(|s| s.first == first).copied().unwrap_or(SegmentSpan {
            first,
            last: log.head().unwrap().last_lsn,
            last_chain: log.head().unwrap().chain,
        });
        let mut bytes = std::fs::read(&path).unwrap();
        match damage.0 {
            0 => bytes.truncate(damage.2 as usize % bytes.len()),
            1 => {
                let i = damage.1 % bytes.len();
                bytes[i] ^= damage.2 | 1;
            }
            2 => {
                // The same LSNs, another history: its chain differs.
                let other = MemLog::new();
                for s in events.iter().chain(&more) {
                    other.append(event(s).with_text("other")).unwrap();
                }
                let osp = SegmentSpan {
                    last_chain: other.read(victim.last).unwrap().chain,
                    ..victim
                };
                let odir = tmp.path().join("other");
                let f = Filter { session: Some("s1".into()), ..Filter::all() };
                cold(&vfs, &odir, &other, &[osp], &f);
                bytes = std::fs::read(odir.join(seg_index_name(victim.first))).unwrap();
                prop_assert_ne!(osp.last_chain, victim.last_chain);
            }
            4 => {}
            _ => bytes.clear(),
        }
        if damage.0 == 4 {
            let name = path.file_name().unwrap().to_str().unwrap();
            let tmp_name = cairn_engine::atomic::unique_tmp_name(&format!(".{name}"));
            let cut = damage.2 as usize % bytes.len();
            std::fs::write(dir.join(tmp_name), &bytes[..cut]).unwrap();
            std::fs::remove_file(&path).unwrap();
        } else if damage.0 == 3 {
            std::fs::remove_file(&path).unwrap();
        } else {
            std::fs::write(&path, &bytes).unwrap();
        }
        // And the summary of the files: a byte flipped, cut short, or
        // replaced by another history's (or left as it is).
        let spath = dir.join(SUMMARY_FILE);
        if let Ok(mut sb) = std::fs::read(&spath) {
            prop_assert!(Summary::decode(&sb, "s").is_ok());
            match summary_damage.0 {
                0 => {
                    let i = summary_damage.1 % sb.len();
                    sb[i] ^= 1 << (summary_damage.1 % 8);
                    prop_assert!(Summary::decode(&sb, "s").is_err());
                }
                1 => sb.truncate(summary_damage.1 % sb.len()),
                2 => {
                    let other = MemLog::new();
                    for s in events.iter().chain(&more) {
                        other.append(event(s).with_text("other")).unwrap();
                    }
                    let osp = spans(&other, &cuts);
                    let odir = tmp.path().join("other-summary");
                    cold(&vfs, &odir, &other, &osp, &Filter { session: Some("s1".into()), ..Filter::all() });
                    if let Ok(o) = std::fs::read(odir.join(SUMMARY_FILE)) {
                        sb = o;
                    }
                }
                _ => {}
            }
            std::fs::write(&spath, &sb).unwrap();
        }
        for fs in &filters {
            let f = filter(fs);
            if !ColdIndex::answers(&f) {
                continue;
            }
            let (got, _) = cold_t(&vfs, &dir, &log, &sp, &f, tail);
            prop_assert_eq!(got, model(&log, &f), "after damage {:?}, {:?}", damage, f);
        }
        // A damaged file is found by the whole check, and rebuilt by use.
        let every = Filter { kind: Some(EventKind::Prompt), ..Filter::all() };
        cold(&vfs, &dir, &log, &sp, &every);
        cold(&vfs, &dir, &log, &sp, &Filter { session: Some("s1".into()), ..Filter::all() });
    }
}

/// A file cut short, damaged or stale is detected, rebuilt from the log,
/// written back, and then found intact by the whole-file check.
/// The real file system, counting the calls of `exists`, the maps of
/// index files, their opens and their handles still open.
#[derive(Debug, Default)]
struct CountingVfs(
    std::sync::atomic::AtomicUsize,
    std::sync::atomic::AtomicUsize,
    std::sync::atomic::AtomicUsize,
    Arc<std::sync::atomic::AtomicUsize>,
);

/// An open index file, counted while open.
#[derive(Debug)]
struct CountedFile(
    Arc<dyn cairn_engine::vfs::VfsFile>,
    Arc<std::sync::atomic::AtomicUsize>,
);

impl Drop for CountedFile {
    fn drop(&mut self) {
        self.1.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl cairn_engine::vfs::VfsFile for CountedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
}

impl Vfs for CountingVfs {
    fn open(
        &self,
        path: &Path,
        mode: cairn_engine::vfs::OpenMode,
    ) -> std::io::Result<Arc<dyn cairn_engine::vfs::VfsFile>> {
        if path.extension().is_some_and(|x| x == "qix") {
            self.2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let f = RealVfs.open(path, mode)?;
            self.3.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Ok(Arc::new(CountedFile(f, self.3.clone())));
        }
        RealVfs.open(path, mode)
    }
    fn map(&self, path: &Path) -> std::io::Result<cairn_engine::vfs::Mapped> {
        if path.extension().is_some_and(|x| x == "qix") {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        RealVfs.map(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        RealVfs.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        RealVfs.create_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        RealVfs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        RealVfs.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        RealVfs.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        RealVfs.exists(path)
    }
    fn lock_exclusive(&self, path: &Path) -> std::io::Result<cairn_engine::vfs::LockGuard> {
        RealVfs.lock_exclusive(path)
    }
}

/// Regression (issue 33: a query from a new process probes every sealed
/// segment's index file, 31 at 10,000,000 events, and asked the file
/// system whether each exists before mapping it): a probe maps the file
/// alone, a missing one is still "no index file" (built), and the
/// answers are the scan's.
#[test]
fn a_probe_maps_an_index_file_without_asking_if_it_exists() {
    let log = MemLog::new();
    for i in 0..200u64 {
        let mut e = Event::new(KINDS[(i % 4) as usize], SESSIONS[(i % 3) as usize]);
        e.path = Some(PATHS[(i % 5) as usize].into());
        log.append(e).unwrap();
    }
    let sp = spans(&log, &[50, 100, 150]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let counting = Arc::new(CountingVfs::default());
    let vfs: Arc<dyn Vfs> = counting.clone();
    let f = Filter {
        session: Some("s1".into()),
        ..Filter::all()
    };
    let want = model(&log, &f);
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &f);
    assert_eq!(got, want);
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(ev
        .iter()
        .all(|e| matches!(e, FileEvent::Built(_, r) if r == "no index file")));
    counting.0.store(0, std::sync::atomic::Ordering::SeqCst);
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &f);
    assert_eq!(got, want);
    assert!(ev.iter().all(|e| matches!(e, FileEvent::Used(_))), "{ev:?}");
    assert_eq!(counting.0.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// 400 records over three sessions, four kinds and five paths, one
/// checkpoint at LSN 251: the log the probe tests cut into segments.
fn probe_log() -> MemLog {
    let log = MemLog::new();
    for i in 0..400u64 {
        let kind = if i == 250 {
            EventKind::CheckpointCreate
        } else {
            KINDS[(i % 4) as usize]
        };
        let mut e = Event::new(kind, SESSIONS[(i % 3) as usize]);
        e.path = Some(PATHS[(i % 5) as usize].into());
        log.append(e).unwrap();
    }
    log
}

/// Regression (issue 33: `checkpoints --session S` and the last reset
/// before a point probe every sealed segment's file for a key most lack,
/// and each probe mapped the file, faulted in its front and unmapped it):
/// a probe reads a file's front and maps it only to read postings; a
/// probe for a key no file holds maps none, and one for keys some files
/// hold finds them, as the scan does.
#[test]
fn a_probe_maps_no_index_file() {
    let log = probe_log();
    let sp = spans(&log, &[50, 100, 150, 200, 300]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let counting = Arc::new(CountingVfs::default());
    let vfs: Arc<dyn Vfs> = counting.clone();
    let filters = [
        Filter {
            session: Some("s1".into()),
            kind: Some(EventKind::CheckpointCreate),
            ..Filter::all()
        },
        Filter {
            session: Some(SESSIONS[(250 % 3) as usize].into()),
            kind: Some(EventKind::CheckpointCreate),
            ..Filter::all()
        },
        Filter {
            kind: Some(EventKind::Rollback),
            newest_first: true,
            ..Filter::all()
        },
        Filter {
            session: Some("s2".into()),
            limit: Some(7),
            ..Filter::all()
        },
    ];
    for f in &filters {
        cold(&vfs, &dir, &log, &sp, f);
    }
    // Without the summary, every file is opened: only those whose
    // postings a query reads are mapped.
    for (f, maps) in filters.iter().zip([1, 1, 0, 1]) {
        let _ = std::fs::remove_file(dir.join(SUMMARY_FILE));
        counting.1.store(0, std::sync::atomic::Ordering::SeqCst);
        // No index file is held open while the index is (a store of many
        // segments would hold a descriptor per segment twice over).
        let ix = ColdIndex::new(&vfs, &dir, &log, &sp, true).unwrap();
        ix.scan(f, &mut |_| Ok(true)).unwrap();
        assert_eq!(counting.3.load(std::sync::atomic::Ordering::SeqCst), 0);
        drop(ix);
        let _ = std::fs::remove_file(dir.join(SUMMARY_FILE));
        let (got, ev) = cold(&vfs, &dir, &log, &sp, f);
        assert_eq!(got, model(&log, f), "{f:?}");
        assert!(ev.iter().all(|e| matches!(e, FileEvent::Used(_))), "{ev:?}");
        assert!(!ev.is_empty());
        let n = counting.1.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(n, 2 * maps, "{f:?}");
    }
    assert_eq!(model(&log, &filters[1]).len(), 1);
}

/// Regression (issue 33: `checkpoints --session S` at 10,000,000 events
/// opened all 31 segments' index files to find the key in none): with
/// the summary the queries write, a probe for a key no segment holds
/// opens no index file, one for a key one segment holds opens that one;
/// a damaged summary is not used (every file is read, answers the same)
/// and is rewritten; `cairn verify`'s check names it.
#[test]
fn the_summary_rules_out_files_without_opening_them() {
    let log = probe_log();
    let sp = spans(&log, &[50, 100, 150, 200, 300]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let counting = Arc::new(CountingVfs::default());
    let vfs: Arc<dyn Vfs> = counting.clone();
    let none = Filter {
        session: Some("s1".into()),
        kind: Some(EventKind::Rollback),
        ..Filter::all()
    };
    let one = Filter {
        kind: Some(EventKind::CheckpointCreate),
        newest_first: true,
        ..Filter::all()
    };
    let opens = || counting.2.swap(0, std::sync::atomic::Ordering::SeqCst);
    // The first query builds the files and the summary.
    let (got, _) = cold(&vfs, &dir, &log, &sp, &none);
    assert!(got.is_empty());
    let s = Summary::read(&vfs, &dir).unwrap().unwrap();
    assert_eq!(s.entries().len(), sp.len());
    opens();
    // (Each query looks for the unsealed tail's file: one open.)
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &none);
    assert_eq!((got, ev), (vec![], vec![]));
    assert_eq!(opens(), 1);
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &one);
    assert_eq!(got, model(&log, &one));
    assert_eq!(got, vec![Lsn(251)]);
    assert_eq!(ev, vec![FileEvent::Used(Lsn(201))]);
    assert_eq!(opens(), 2);
    let r =
        ColdIndex::verify_files(&vfs, &dir, &sp, &|l| log.read(l).ok().map(|r| r.chain)).unwrap();
    assert!(r.damaged.is_empty(), "{r:?}");

    // Damaged: not used, every file read, the same answers; rewritten.
    let spath = dir.join(SUMMARY_FILE);
    let mut b = std::fs::read(&spath).unwrap();
    let n = b.len();
    b[n - 100] ^= 0x10;
    std::fs::write(&spath, &b).unwrap();
    let r =
        ColdIndex::verify_files(&vfs, &dir, &sp, &|l| log.read(l).ok().map(|r| r.chain)).unwrap();
    assert_eq!(r.damaged.len(), 1, "{r:?}");
    assert!(r.damaged[0].contains(SUMMARY_FILE), "{r:?}");
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &none);
    assert!(got.is_empty());
    assert_eq!(ev.len(), sp.len(), "{ev:?}");
    assert_eq!(opens(), sp.len() + 1);
    let (got, _) = cold(&vfs, &dir, &log, &sp, &one);
    assert_eq!(got, vec![Lsn(251)]);
    assert!(Summary::read(&vfs, &dir).is_ok());
    opens();
    cold(&vfs, &dir, &log, &sp, &none);
    assert_eq!(opens(), 1);

    // Another history of the same LSNs: its entries match no segment.
    let other = MemLog::new();
    for i in 0..400u64 {
        let mut e = Event::new(EventKind::Rollback, "s1");
        e.ts = Timestamp(i as i64 + 1);
        other.append(e).unwrap();
    }
    let osp = spans(&other, &[50, 100, 150, 200, 300]);
    let (got, _) = cold(&vfs, &dir, &other, &osp, &none);
    assert_eq!(got, model(&other, &none));
    assert_eq!(got.len(), 400);
}

#[test]
fn damaged_index_file_is_detected_and_rebuilt() {
    let log = MemLog::new();
    for i in 0..200u64 {
        let mut e = Event::new(KINDS[(i % 4) as usize], SESSIONS[(i % 3) as usize]);
        e.path = Some(PATHS[(i % 5) as usize].into());
        log.append(e).unwrap();
    }
    let sp = spans(&log, &[80, 160]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    let f = Filter {
        session: Some("s2".into()),
        newest_first: true,
        ..Filter::all()
    };
    let want = model(&log, &f);
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &f);
    assert_eq!(got, want);
    assert_eq!(ev.len(), 2, "both sealed segments indexed: {ev:?}");
    assert!(ev
        .iter()
        .all(|e| matches!(e, FileEvent::Built(_, r) if r == "no index file")));
    assert_eq!(
        ColdIndex::verify_files(&vfs, &dir, &sp, &|l| log.read(l).ok().map(|r| r.chain))
            .unwrap()
            .checked,
        2
    );
    let (_, ev) = cold(&vfs, &dir, &log, &sp, &f);
    assert_eq!(ev, vec![FileEvent::Used(Lsn(81)), FileEvent::Used(Lsn(1))]);

    // A postings byte flipped: the whole check names the file; a query
    // that reads that block refuses the file and rebuilds it.
    let path = dir.join(seg_index_name(Lsn(81)));
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 12] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let problems = ColdIndex::verify_files(&vfs, &dir, &sp, &|l| log.read(l).ok().map(|r| r.chain))
        .unwrap()
        .damaged;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("00000000000000000081.qix"),
        "{problems:?}"
    );
    let every = Filter {
        path: Some("src".into()),
        ..Filter::all()
    };
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &every);
    assert_eq!(got, model(&log, &every));
    assert!(
        ev.iter()
            .any(|e| matches!(e, FileEvent::Built(Lsn(81), r) if r.contains("checksum"))),
        "{ev:?}"
    );
    assert_eq!(
        ColdIndex::verify_files(&vfs, &dir, &sp, &|l| log.read(l).ok().map(|r| r.chain))
            .unwrap()
            .checked,
        2
    );

    // Cut short, as by a writer killed midway (without the atomic rename).
    std::fs::write(&path, &std::fs::read(&path).unwrap()[..100]).unwrap();
    let (got, ev) = cold(&vfs, &dir, &log, &sp, &f);
    assert_eq!(got, want);
    assert!(
        ev.iter()
            .any(|e| matches!(e, FileEvent::Built(Lsn(81), r) if r.contains("shorter"))),
        "{ev:?}"
    );

    // Stale: the log was replaced by another history of the same length.
    let other = MemLog::new();
    for i in 0..200u64 {
        let mut e = Event::new(EventKind::Prompt, "s2");
        e.ts = Timestamp(i as i64 + 1);
        other.append(e).unwrap();
    }
    let osp = spans(&other, &[80, 160]);
    assert_ne!(osp[0].last_chain, sp[0].last_chain);
    let (got, ev) = cold(&vfs, &dir, &other, &osp, &f);
    assert_eq!(got, model(&other, &f));
    assert!(
        ev.iter()
            .any(|e| matches!(e, FileEvent::Built(Lsn(1), r) if r.contains("stale"))),
        "{ev:?}"
    );
    // The old history's files no longer match it.
    let r =
        ColdIndex::verify_files(&vfs, &dir, &sp, &|l| log.read(l).ok().map(|r| r.chain)).unwrap();
    assert_eq!(
        (r.checked, r.stale.len(), r.damaged.len()),
        (0, 2, 0),
        "{r:?}"
    );
}

/// The unsealed tail gets a file once enough of it is not in one; records
/// appended after it are indexed in memory, the file's prefix used as is.
#[test]
fn tail_file_covers_a_prefix_and_the_rest_is_folded() {
    let log = MemLog::new();
    let add = |n: u64| {
        for i in 0..n {
            let mut e = Event::new(KINDS[(i % 4) as usize], SESSIONS[(i % 3) as usize]);
            e.path = Some(PATHS[(i % 5) as usize].into());
            log.append(e).unwrap();
        }
    };
    add(100);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    let f = Filter {
        path: Some("src".into()),
        ..Filter::all()
    };
    let (got, ev) = cold_t(&vfs, &dir, &log, &[], &f, 10);
    assert_eq!(got, model(&log, &f));
    assert!(
        matches!(ev.as_slice(), [FileEvent::Built(Lsn(1), _)]),
        "{ev:?}"
    );
    add(5);
    let (got, ev) = cold_t(&vfs, &dir, &log, &[], &f, 10);
    assert_eq!(got, model(&log, &f));
    assert_eq!(ev, vec![FileEvent::Used(Lsn(1))]);
    let r =
        ColdIndex::verify_files(&vfs, &dir, &[], &|l| log.read(l).ok().map(|r| r.chain)).unwrap();
    assert_eq!((r.checked, r.damaged.len(), r.stale.len()), (1, 0, 0));
    // Past the threshold, the tail's file is rebuilt to the head.
    add(10);
    let (got, ev) = cold_t(&vfs, &dir, &log, &[], &f, 10);
    assert_eq!(got, model(&log, &f));
    assert!(
        matches!(ev.as_slice(), [FileEvent::Built(Lsn(1), _)]),
        "{ev:?}"
    );
}

/// `tree`, `diff` and `blame` from the index files ([`ColdAt`]) against
/// the whole in-memory query index built from the log ([`Query`]), at
/// each of `points` (and each pair of them for diff, over the whole tree,
/// a directory, a file and a path that names nothing), for each of
/// `paths`: the same answers and notes; where the whole index refuses,
/// the files answer nothing (the caller asks the whole index, which words
/// the refusal).
fn travel_as_the_whole_index(
    log: &MemLog,
    blobs: &cairn_snapshot::MemBlobs,
    ix: &ColdIndex<'_>,
    points: &[u64],
    paths: &[&str],
) {
    let manifests = SnapshotManifests(blobs);
    let index = Index::build(log).unwrap();
    let q = Query::new(log, blobs, &manifests, &index);
    let at = ColdAt::new(ix, log, &manifests);
    for &n in points {
        let p = Point::Lsn(Lsn(n));
        let t = at.tree_point(p).unwrap().expect("an LSN point resolves");
        assert_eq!(t.at, Lsn(n));
        assert_eq!(t.tree, q.tree_at(p).unwrap(), "tree at @{n}");
        assert_eq!(
            t.unrecorded,
            q.unrecorded_writes(Lsn(0), Lsn(n)).unwrap(),
            "unrecorded writes at @{n}"
        );
        assert_eq!(t.not_captured, q.not_captured_at(p).unwrap(), "@{n}");
        for &m in points {
            let pb = Point::Lsn(Lsn(m));
            let (lo, hi) = (n.min(m), n.max(m));
            let filters = [
                vec![],
                vec!["src/".to_string()],
                vec![paths[0].to_string()],
                vec!["nothing/here".to_string()],
            ];
            for filter in filters {
                let want = q.diff(p, pb, &filter);
                match (want, at.diff(blobs, p, pb, &filter).unwrap()) {
                    (Ok(w), Some(g)) => {
                        assert_eq!(g.diffs, w, "diff @{n} @{m} {filter:?}");
                        assert_eq!(
                            g.unrecorded,
                            q.unrecorded_writes(Lsn(lo), Lsn(hi)).unwrap(),
                            "unrecorded writes between @{n} and @{m}"
                        );
                        assert_eq!(g.not_captured_a, q.not_captured_at(p).unwrap());
                        assert_eq!(g.not_captured_b, q.not_captured_at(pb).unwrap());
                    }
                    (Err(_), None) => {}
                    (w, g) => panic!("diff @{n} @{m} {filter:?}: whole index {w:?}, files {g:?}"),
                }
            }
        }
        for path in paths {
            let want = q.blame(p, path);
            match at.blame(blobs, p, path) {
                Ok(Some((unrecorded, lines))) => {
                    assert_eq!(
                        Some(lines),
                        want.ok(),
                        "blame {path} at @{n}: the files answered"
                    );
                    assert_eq!(
                        unrecorded,
                        q.unrecorded_write(Lsn(n), path).unwrap(),
                        "{path} at @{n}"
                    );
                }
                Ok(None) => panic!("blame {path} at @{n}: an LSN point resolves"),
                Err(_) => assert!(want.is_err(), "blame {path} at @{n}: the files failed"),
            }
        }
    }
}

/// `tree`, `diff` and `blame` from the index files at random points of
/// scripted sessions (writes, moves, deletes, shell edits, `apply`
/// records without contents, checkpoints, rollbacks whole and by path),
/// on random segmentations, built and then read from the files: as the
/// whole query index answers (see [`travel_as_the_whole_index`]).
#[test]
fn tree_diff_and_blame_at_random_points_equal_the_whole_index() {
    for seed in [3u64, 11, 42, 77, 2026] {
        let s = common::script(seed, 160);
        let head = s.log.head().unwrap().last_lsn.0;
        let mut rng = common::Rng(seed * 17 + 5);
        let cuts: Vec<u64> = (0..1 + rng.below(4)).map(|_| rng.below(head + 1)).collect();
        let sp = spans(&s.log, &cuts);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segments");
        let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
        let points: Vec<u64> = (0..5)
            .map(|_| rng.below(head + 1))
            .chain([0, head])
            .collect();
        for _pass in 0..2 {
            let ix = ColdIndex::with_tail_reindex(&vfs, &dir, &s.log, &sp, true, 8).unwrap();
            travel_as_the_whole_index(&s.log, &s.blobs, &ix, &points, &common::PATHS);
        }
    }
}

/// `show POINT:PATH` from the index files: a path's entry at every point
/// of scripted sessions (writes, moves, deletes, shell edits, checkpoints,
/// rollbacks), on random segmentations, equals the tree a full replay of
/// the log gives there; then again with every index file damaged.
#[test]
fn entry_at_random_points_equals_a_full_replay() {
    for seed in [1u64, 7, 42, 99, 123, 2024, 31337, 8] {
        let s = common::script(seed, 250);
        let manifests = SnapshotManifests(&s.blobs);
        let head = s.log.head().unwrap().last_lsn.0;
        let mut rng = common::Rng(seed * 31 + 1);
        let cuts: Vec<u64> = (0..1 + rng.below(4)).map(|_| rng.below(head + 1)).collect();
        let sp = spans(&s.log, &cuts);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("segments");
        let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
        let tail = 1 + rng.below(64);
        let (mut answered, mut asked) = (0, 0);
        // Pass 0 builds the files and writes the summary; pass 1 finds
        // them all damaged (the summary too) and rebuilds them; pass 2
        // reads the files and the summary pass 1 wrote.
        for pass in 0..3 {
            if pass == 1 {
                assert!(dir.join(SUMMARY_FILE).exists(), "seed {seed}");
                // Every file the first pass wrote, one byte flipped.
                for f in std::fs::read_dir(&dir).unwrap() {
                    let path = f.unwrap().path();
                    let mut b = std::fs::read(&path).unwrap();
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] ^= 0x10;
                    std::fs::write(&path, &b).unwrap();
                }
            }
            let ix = ColdIndex::with_tail_reindex(&vfs, &dir, &s.log, &sp, true, tail).unwrap();
            let at = ColdAt::new(&ix, &s.log, &manifests);
            for n in 0..=head {
                for p in common::PATHS {
                    let want = s.expected[n as usize].get(p).copied();
                    let got = at.entry_at(Lsn(n), p).unwrap();
                    assert_eq!(got, want, "seed {seed} pass {pass}: {p} at @{n}");
                    match at.entry(Point::Lsn(Lsn(n)), p).unwrap() {
                        ColdAnswer::Entry(l, e) => {
                            assert_eq!((l, e), (Lsn(n), want), "seed {seed}: {p} at @{n}");
                            answered += 1;
                        }
                        ColdAnswer::Ask => asked += 1,
                    }
                }
            }
            // A checkpoint's id resolves to its LSN, the head to the head,
            // a time as the whole index resolves it.
            let cp = s
                .log
                .iter_from(Lsn::FIRST)
                .map(|r| r.unwrap())
                .find(|r| r.event.kind == EventKind::CheckpointCreate && r.event.root.is_some())
                .unwrap();
            let id = cairn_codec::CheckpointId(cp.lsn);
            assert_eq!(at.resolve(Point::Checkpoint(id)).unwrap(), Some(cp.lsn));
            assert_eq!(at.resolve(Point::Head).unwrap(), Some(Lsn(head)));
            let whole = Index::build(&s.log).unwrap();
            let first = s.log.read(Lsn::FIRST).unwrap().event.ts;
            let last = s.log.read(Lsn(head)).unwrap().event.ts;
            let mid = Timestamp(first.0 / 2 + last.0 / 2);
            for t in [Timestamp(0), first, mid, last, Timestamp(i64::MAX)] {
                assert_eq!(
                    at.resolve(Point::Time(t)).unwrap(),
                    Some(whole.lsn_at_time(t))
                );
            }
        }
        assert!(
            answered > asked,
            "seed {seed}: {answered} answered from the files, {asked} left to the whole index"
        );
    }
}

/// Once a later write gives a path's contents, a delete or a move between
/// it and the last checkpoint still decides the mode: a file deleted and
/// written again after a checkpoint that held it executable is a new file
/// of the default mode, and one moved in takes its source's mode.
#[test]
fn a_removal_between_a_write_and_the_checkpoint_decides_the_mode() {
    use cairn_query::source::{EntryKind, Tree, TreeEntry, DEFAULT_FILE_MODE};
    let blobs = cairn_snapshot::MemBlobs::new();
    let manifests = SnapshotManifests(&blobs);
    let log = MemLog::new();
    let put = |s: &str| cairn_snapshot::BlobAccess::put(&blobs, s.as_bytes()).unwrap();
    let (one, two) = (put("one\n"), put("two\n"));
    let exe = |blob| TreeEntry {
        blob,
        mode: 0o755,
        kind: EntryKind::File,
    };
    let tree: Tree = [
        ("a.sh".to_string(), exe(one)),
        ("b.sh".to_string(), exe(one)),
    ]
    .into_iter()
    .collect();
    let mut cp = Event::new(EventKind::CheckpointCreate, "s");
    cp.root = Some(common::store_tree(&blobs, &tree));
    log.append(cp).unwrap(); // 1
    log.append(Event::new(EventKind::FileDelete, "s").with_path("a.sh"))
        .unwrap(); // 2
    let mut w = Event::new(EventKind::FileWrite, "s").with_path("a.sh");
    w.after = Some(two);
    log.append(w.clone()).unwrap(); // 3
    let mut mv = Event::new(EventKind::FileMove, "s").with_path("b.sh");
    mv.to_path = Some("c.sh".into());
    log.append(mv).unwrap(); // 4
    w.path = Some("c.sh".into());
    log.append(w).unwrap(); // 5
    let tmp = tempfile::tempdir().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    let ix = ColdIndex::new(&vfs, &tmp.path().join("segments"), &log, &[], true).unwrap();
    let at = ColdAt::new(&ix, &log, &manifests);
    assert_eq!(
        at.entry_at(Lsn(1), "a.sh").unwrap(),
        Some(exe(one)),
        "as checkpointed"
    );
    assert_eq!(at.entry_at(Lsn(2), "a.sh").unwrap(), None, "deleted");
    assert_eq!(
        at.entry_at(Lsn(5), "a.sh").unwrap(),
        Some(TreeEntry::file(two)),
        "written again: a new file"
    );
    assert_eq!(TreeEntry::file(two).mode, DEFAULT_FILE_MODE);
    assert_eq!(
        at.entry_at(Lsn(5), "c.sh").unwrap(),
        Some(exe(two)),
        "moved in: the source's mode"
    );
}

/// A record source that counts its point reads and its sorted walks.
struct Counting {
    log: MemLog,
    reads: std::sync::atomic::AtomicUsize,
    walks: std::sync::atomic::AtomicUsize,
}

impl RecordSource for Counting {
    fn head(&self) -> cairn_query::Result<cairn_engine::log::Head> {
        self.log.head()
    }
    fn iter_from(
        &self,
        from: Lsn,
    ) -> Box<dyn Iterator<Item = cairn_query::Result<cairn_query::Record>> + '_> {
        self.log.iter_from(from)
    }
    fn read(&self, lsn: Lsn) -> cairn_query::Result<cairn_query::Record> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.log.read(lsn)
    }
    fn read_sorted(
        &self,
        lsns: &[Lsn],
        f: &mut dyn FnMut(cairn_query::Record) -> cairn_query::Result<bool>,
    ) -> cairn_query::Result<()> {
        self.walks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.log.read_sorted(lsns, f)
    }
}

/// Regression (the postings of a path were read a record at a time, each
/// a fresh walk of the log): a cold scan reads them in a few sorted walks
/// (batches that double), and a `--limit 5` scan reads five records.
#[test]
fn a_cold_scan_reads_its_postings_in_sorted_walks() {
    let log = MemLog::new();
    for i in 0..2000u64 {
        let mut e = Event::new(EventKind::FileWrite, "s1");
        e.path = Some(if i % 4 == 0 { "src/a.rs" } else { "b.rs" }.into());
        e.ts = Timestamp(1_700_000_000_000 + i as i64);
        log.append(e).unwrap();
    }
    let sp = spans(&log, &[700, 1400]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    let src = Counting {
        log,
        reads: Default::default(),
        walks: Default::default(),
    };
    let count = |f: &Filter| {
        let ix = ColdIndex::new(&vfs, &dir, &src, &sp, true).unwrap();
        src.reads.store(0, std::sync::atomic::Ordering::SeqCst);
        src.walks.store(0, std::sync::atomic::Ordering::SeqCst);
        let mut got = Vec::new();
        assert!(ix
            .scan(f, &mut |r| {
                got.push(r.lsn);
                Ok(true)
            })
            .unwrap());
        assert_eq!(got, model(&src.log, f));
        (
            got.len(),
            src.reads.load(std::sync::atomic::Ordering::SeqCst),
            src.walks.load(std::sync::atomic::Ordering::SeqCst),
        )
    };
    let path = Filter {
        path: Some("src/a.rs".into()),
        ..Filter::all()
    };
    let (n, reads, walks) = count(&path);
    assert_eq!(n, 500);
    assert_eq!(reads, 0, "point reads of postings");
    assert!(walks <= 10, "{walks} walks for {n} records");
    let five = Filter {
        limit: Some(5),
        ..path.clone()
    };
    let (n, reads, walks) = count(&five);
    assert_eq!((n, reads, walks), (5, 0, 1));
    // Newest first: a read of one record each, by a walk, no point read
    // (which maps a sealed segment whole).
    let newest = Filter {
        newest_first: true,
        limit: Some(3),
        ..path
    };
    let (n, reads, walks) = count(&newest);
    assert_eq!((n, reads, walks), (3, 0, 3));
}

/// Regression (issue 33: `cairn show @LSN:PATH` from a new process read
/// its records by point reads, each mapping the whole 46 MB segment it
/// lies in): a point query reads its records by walks of one record.
#[test]
fn a_point_query_reads_its_records_by_walks_not_point_reads() {
    let s = common::script(42, 250);
    let manifests = SnapshotManifests(&s.blobs);
    let head = s.log.head().unwrap().last_lsn.0;
    let sp = spans(&s.log, &[head / 3, 2 * head / 3]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    let src = Counting {
        log: s.log,
        reads: Default::default(),
        walks: Default::default(),
    };
    let ix = ColdIndex::new(&vfs, &dir, &src, &sp, true).unwrap();
    let (mut answered, mut walks) = (0, 0);
    for n in [head / 2, head - 1, head] {
        for p in common::PATHS {
            let at = ColdAt::new(&ix, &src, &manifests);
            src.walks.store(0, std::sync::atomic::Ordering::SeqCst);
            if let ColdAnswer::Entry(l, e) = at.entry(Point::Lsn(Lsn(n)), p).unwrap() {
                assert_eq!((l, e), (Lsn(n), s.expected[n as usize].get(p).copied()));
                answered += 1;
                walks += src.walks.load(std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
    assert!(answered > 0);
    assert_eq!(
        src.reads.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "point reads"
    );
    assert!(walks > 0);
}

/// The unsealed tail's index read from a chain of files (as an archive
/// ships it in parts): the file named by the tail's first LSN, then the
/// one named by the LSN after it ends, and so on, each used only when it
/// starts where the chain is, ends inside the log and has the log's
/// chain value there. A part of another log (same LSNs, another chain,
/// postings of another session) ends the chain: the records from it on
/// are indexed in memory, and the answers are the log's. `verify` counts
/// the parts that fit and calls the other stale.
#[test]
fn the_tails_index_is_read_from_a_chain_of_parts() {
    let fill = |log: &MemLog, who: &[&str], n: u64| {
        for i in 0..n {
            let mut e = Event::new(
                KINDS[(i % 4) as usize],
                who[(i % who.len() as u64) as usize],
            );
            e.path = Some(PATHS[(i % 5) as usize].into());
            log.append(e).unwrap();
        }
    };
    let log = MemLog::new();
    fill(&log, &SESSIONS, 300);
    let other = MemLog::new();
    fill(&other, &["zzz"], 300);
    let span = |l: &MemLog, first: u64, last: u64| SegmentSpan {
        first: Lsn(first),
        last: Lsn(last),
        last_chain: l.read(Lsn(last)).unwrap().chain,
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segments");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    ColdIndex::index_sealed(
        &vfs,
        &dir,
        &log,
        &[span(&log, 1, 100), span(&log, 101, 200)],
    )
    .unwrap();
    ColdIndex::index_sealed(&vfs, &dir, &other, &[span(&other, 201, 250)]).unwrap();
    for f in [
        Filter {
            session: Some("s2".into()),
            ..Filter::all()
        },
        Filter {
            session: Some("s1".into()),
            newest_first: true,
            ..Filter::all()
        },
        Filter {
            path: Some("src".into()),
            ..Filter::all()
        },
    ] {
        let ix = ColdIndex::with_tail_reindex(&vfs, &dir, &log, &[], false, u64::MAX).unwrap();
        let mut got = Vec::new();
        ix.scan(&f, &mut |r| {
            got.push(r.lsn);
            Ok(true)
        })
        .unwrap();
        assert_eq!(got, model(&log, &f), "{f:?}");
        let mut used = ix.events();
        used.sort_by_key(|e| match e {
            FileEvent::Used(l) | FileEvent::Built(l, _) => *l,
        });
        assert_eq!(
            used,
            vec![FileEvent::Used(Lsn(1)), FileEvent::Used(Lsn(101))],
            "{f:?}"
        );
    }
    let r =
        ColdIndex::verify_files(&vfs, &dir, &[], &|l| log.read(l).ok().map(|r| r.chain)).unwrap();
    assert_eq!(
        (r.checked, r.damaged.len(), r.stale.len()),
        (2, 0, 1),
        "{r:?}"
    );
}
