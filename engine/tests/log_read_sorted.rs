//! `read_sorted`: the records of an ascending list of LSNs (a posting list)
//! read in one walk of the log. It must give exactly what a read per LSN
//! gives (across sealed segments and the tail, at the ends, for adjacent
//! and sparse LSNs), name a damaged frame as a point read does, and read
//! the tail's file far fewer times than a read per record.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn_codec::{frame, Event, EventKind, Lsn};
use cairn_engine::log::{Durability, Log, LogOptions, LogReader, Record};
use cairn_engine::vfs::sim::{SimOp, SimVfs};
use cairn_engine::{EngineError, Vfs};

/// A log of `n` small records on `sim` in segments of `seg` bytes, closed
/// cleanly.
fn write_log(sim: &Arc<SimVfs>, dir: &Path, n: usize, seg: u64) {
    let o = LogOptions {
        segment_size_bytes: seg,
        durability: Durability::Never,
        ..LogOptions::default()
    };
    let log = Log::open(sim.clone(), dir, o).unwrap();
    for i in 0..n {
        let e = Event::new(EventKind::Prompt, format!("s{}", i % 5))
            .with_text(format!("turn {i}: make it pass"));
        log.append(&e).unwrap();
    }
    log.close().unwrap();
}

/// The records `read_sorted` hands out for `lsns`, or its error after them.
fn sorted(r: &LogReader, lsns: &[Lsn]) -> (Vec<Record>, Option<EngineError>) {
    let mut got = Vec::new();
    let e = r
        .read_sorted(lsns, |rec| {
            got.push(rec);
            true
        })
        .err();
    (got, e)
}

/// A small deterministic generator (no dependency on a random crate).
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *seed >> 33
}

#[test]
fn read_sorted_gives_what_point_reads_give() {
    let sim = Arc::new(SimVfs::new());
    let dir = Path::new("/log");
    write_log(&sim, dir, 700, 4096);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let r = LogReader::open(vfs, dir).unwrap();
    let head = r.head().last_lsn;
    let spans = r.sealed_spans();
    assert!(spans.len() >= 5, "{} sealed segments", spans.len());
    let mut lists: Vec<Vec<Lsn>> = vec![
        (1..=head.0).map(Lsn).collect(),
        vec![Lsn(1)],
        vec![head],
        vec![Lsn(1), head],
        (1..=head.0).step_by(7).map(Lsn).collect(),
        (1..=head.0).step_by(97).map(Lsn).collect(),
    ];
    // Adjacent LSNs across each segment boundary, and into the tail.
    let mut bounds = Vec::new();
    for s in &spans {
        bounds.extend([Lsn(s.first.0), Lsn(s.last.0), Lsn(s.last.0 + 1)]);
    }
    bounds.sort_unstable();
    bounds.dedup();
    lists.push(bounds);
    // Random ascending subsets of every density.
    let mut seed = 7u64;
    for keep_in in [2u64, 5, 40, 300] {
        let l = (1..=head.0)
            .filter(|_| lcg(&mut seed).is_multiple_of(keep_in))
            .map(Lsn)
            .collect();
        lists.push(l);
    }
    // Not ascending (repeats, going back): still the records named.
    lists.push(vec![Lsn(50), Lsn(50), Lsn(3), head, Lsn(200), Lsn(199)]);
    for lsns in &lists {
        let (got, e) = sorted(&r, lsns);
        assert!(e.is_none(), "{e:?} reading {lsns:?}");
        let want: Vec<Record> = lsns.iter().map(|l| r.read(*l).unwrap()).collect();
        assert_eq!(got.len(), want.len());
        assert!(
            got == want,
            "read_sorted differs from point reads for {lsns:?}"
        );
    }
    // Stopping early: `f` returning false ends the walk.
    let mut n = 0;
    r.read_sorted(&[Lsn(1), Lsn(2), Lsn(3)], |_| {
        n += 1;
        n < 2
    })
    .unwrap();
    assert_eq!(n, 2);
    // Out of range, as a point read says it.
    for bad in [Lsn(0), Lsn(head.0 + 1)] {
        let (got, e) = sorted(&r, &[Lsn(1), bad]);
        assert_eq!(got.len(), 1);
        assert!(
            matches!(e, Some(EngineError::LsnOutOfRange { .. })),
            "{e:?}"
        );
    }
}

#[test]
fn the_writer_reads_sorted_across_seals_and_its_live_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let o = LogOptions {
        segment_size_bytes: 4096,
        durability: Durability::Never,
        ..LogOptions::default()
    };
    let log = Log::open(Arc::new(cairn_engine::RealVfs), tmp.path(), o).unwrap();
    for i in 0..500 {
        let e = Event::new(EventKind::ToolCall, "t").with_text(format!("call {i}"));
        log.append(&e).unwrap();
    }
    let head = log.head().last_lsn;
    let lsns: Vec<Lsn> = (1..=head.0)
        .filter(|l| !l.is_multiple_of(3))
        .map(Lsn)
        .collect();
    let mut got = Vec::new();
    log.read_sorted(&lsns, |r| {
        got.push(r);
        true
    })
    .unwrap();
    let want: Vec<Record> = lsns.iter().map(|l| log.read(*l).unwrap()).collect();
    assert!(got == want);
}

#[test]
fn read_sorted_names_a_damaged_frame_after_the_records_before_it() {
    let sim = Arc::new(SimVfs::new());
    let dir = Path::new("/log");
    write_log(&sim, dir, 300, 4096);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let r = LogReader::open(vfs.clone(), dir).unwrap();
    let span = r.sealed_spans()[1];
    let mut offs = vec![cairn_codec::segment::SEGMENT_HEADER_LEN as u64];
    r.frames_while(span.first, |fr| {
        offs.push(offs.last().unwrap() + fr.len() as u64);
        offs.len() < 6
    })
    .unwrap();
    let seg = dir.join(format!("{:020}.seg", span.first.0));
    let second = Lsn(span.first.0 + 1);
    let fourth = Lsn(span.first.0 + 3);
    // A flipped byte in the second frame's body: the record handed out
    // is checked whole, a frame stepped over by its header.
    sim.corrupt(&seg, offs[1] + frame::HEADER_LEN as u64 + 2, b"#")
        .unwrap();
    let r = LogReader::open(vfs.clone(), dir).unwrap();
    let (got, e) = sorted(&r, &[Lsn(2), fourth]);
    assert!(e.is_none(), "{e:?}");
    assert_eq!(got.len(), 2);
    let (got, e) = sorted(&r, &[Lsn(2), span.first, second, fourth]);
    assert_eq!(
        got.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        vec![Lsn(2), span.first]
    );
    let e = e.expect("the damaged frame is an error").to_string();
    assert!(e.contains("CRC") || e.contains("checksum"), "{e}");
    assert!(e.contains(&format!("{:020}.seg", span.first.0)), "{e}");
    assert!(e.contains(&format!("LSN {second}")), "{e}");
    // A damaged LSN in that frame's header: a step over it fails.
    sim.corrupt(&seg, offs[1] + 12, &[0xff]).unwrap();
    let r = LogReader::open(vfs, dir).unwrap();
    let (got, e) = sorted(&r, &[Lsn(2), fourth]);
    assert_eq!(got.len(), 1);
    let e = e.expect("the bad step is an error").to_string();
    assert!(
        e.contains(&format!("where LSN {second} was expected")),
        "{e}"
    );
}

/// Reads of the tail segment's file while `f` runs.
fn tail_reads(sim: &Arc<SimVfs>, tail: &str, f: impl FnOnce()) -> usize {
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let tail = tail.to_string();
    sim.set_fault_hook(move |op| {
        if let SimOp::Read { path } = op {
            if path
                .file_name()
                .is_some_and(|f| f.to_string_lossy() == tail)
            {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }
        None
    });
    f();
    sim.clear_faults();
    n.load(Ordering::SeqCst)
}

/// Regression (a history read each record by a fresh walk and a fresh
/// read of the tail file): a walk over every record of the tail reads it
/// a few times per sparse-index interval, not once per record, and sparse
/// LSNs cost one read each.
#[test]
fn read_sorted_reads_the_tail_once_per_window_not_per_record() {
    let sim = Arc::new(SimVfs::new());
    let dir = Path::new("/log");
    write_log(&sim, dir, 3000, 64 << 20);
    let vfs: Arc<dyn Vfs> = sim.clone();
    let r = LogReader::open(vfs, dir).unwrap();
    assert!(r.sealed_spans().is_empty());
    let tail = format!("{:020}.seg", 1);
    let all: Vec<Lsn> = (1..=3000).map(Lsn).collect();
    let per_record = tail_reads(&sim, &tail, || {
        for l in &all {
            r.read(*l).unwrap();
        }
    });
    assert!(per_record >= all.len(), "{per_record} reads");
    let mut n = 0;
    let walk = tail_reads(&sim, &tail, || {
        r.read_sorted(&all, |_| {
            n += 1;
            true
        })
        .unwrap();
    });
    assert_eq!(n, all.len());
    assert!(
        walk * 20 <= all.len(),
        "{walk} reads of the tail for {} records",
        all.len()
    );
    // Sparse LSNs, one per few intervals: one read each.
    let sparse: Vec<Lsn> = (1..=3000).step_by(200).map(Lsn).collect();
    let reads = tail_reads(&sim, &tail, || {
        r.read_sorted(&sparse, |_| true).unwrap();
    });
    assert!(
        reads <= sparse.len(),
        "{reads} reads for {} LSNs",
        sparse.len()
    );
}

/// A simulated disk that counts maps of segment files.
#[derive(Debug)]
struct CountMaps {
    sim: Arc<SimVfs>,
    seg_maps: AtomicUsize,
}

impl Vfs for CountMaps {
    fn open(
        &self,
        path: &Path,
        mode: cairn_engine::vfs::OpenMode,
    ) -> std::io::Result<Arc<dyn cairn_engine::VfsFile>> {
        self.sim.open(path, mode)
    }
    fn map(&self, path: &Path) -> std::io::Result<cairn_engine::vfs::Mapped> {
        if path.extension().is_some_and(|e| e == "seg") {
            self.seg_maps.fetch_add(1, Ordering::SeqCst);
        }
        self.sim.map(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.sim.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.sim.create_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.sim.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.sim.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.sim.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.sim.exists(path)
    }
    fn lock_exclusive(&self, path: &Path) -> std::io::Result<cairn_engine::vfs::LockGuard> {
        self.sim.lock_exclusive(path)
    }
}

/// Regression (sparse records of a sealed segment were read through a map
/// of the whole file: a page fault, and fault-around, per record, and the
/// file's size in peak memory): a reader's `read_sorted` reads a sealed
/// segment nothing has mapped by range, mapping no segment, with the
/// same records as point reads (which map it).
#[test]
fn read_sorted_reads_an_unmapped_sealed_segment_by_range() {
    let sim = Arc::new(SimVfs::new());
    let dir = Path::new("/log");
    write_log(&sim, dir, 700, 4096);
    let vfs = Arc::new(CountMaps {
        sim: sim.clone(),
        seg_maps: AtomicUsize::new(0),
    });
    let r = LogReader::open(vfs.clone(), dir).unwrap();
    let spans = r.sealed_spans();
    assert!(spans.len() >= 3);
    let lsns: Vec<Lsn> = (1..=spans[spans.len() - 1].last.0)
        .step_by(11)
        .map(Lsn)
        .collect();
    let (got, e) = sorted(&r, &lsns);
    assert!(e.is_none(), "{e:?}");
    assert_eq!(vfs.seg_maps.load(Ordering::SeqCst), 0, "segments mapped");
    let want: Vec<Record> = lsns.iter().map(|l| r.read(*l).unwrap()).collect();
    assert!(vfs.seg_maps.load(Ordering::SeqCst) > 0);
    assert!(got == want);
}
