//! Recovery and damage: a tail cut at every byte offset of its last records,
//! flipped bytes in a sealed segment, corruption followed by good records in
//! the tail, and salvage.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::{frame, Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::{salvage, Durability, Log, LogOptions};
use cairn_engine::{EngineError, RealVfs, Vfs};

mod support;

fn vfs() -> Arc<dyn Vfs> {
    Arc::new(RealVfs)
}

fn ev(i: u64) -> Event {
    let mut e = Event::new(EventKind::Reply, "s")
        .with_text(format!("reply {i} {}", "x".repeat((i % 7) as usize * 10)));
    e.ts = Timestamp(1_700_000_000_000 + i as i64);
    e
}

fn opts(seg: u64) -> LogOptions {
    LogOptions {
        segment_size_bytes: seg,
        durability: Durability::Never,
        ..LogOptions::default()
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// Offsets of the frames in a segment file (from byte 64 to `end`).
fn frame_offsets(bytes: &[u8], end: usize) -> Vec<(usize, usize, Lsn)> {
    let mut out = Vec::new();
    let mut off = 64;
    while off < end {
        let f = frame::decode(&bytes[off..end]).unwrap();
        out.push((off, f.len(), f.lsn));
        off += f.len();
    }
    out
}

fn events(log: &Log) -> Vec<Event> {
    log.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect()
}

/// Builds a pristine log whose tail ends with `tail_units` (each a batch size).
fn build(dir: &Path, units: &[usize]) -> Vec<Vec<Event>> {
    let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
    let mut n = 0;
    let mut out = Vec::new();
    for &u in units {
        let evs: Vec<Event> = (0..u)
            .map(|_| {
                n += 1;
                ev(n)
            })
            .collect();
        if u == 1 {
            log.append(&evs[0]).unwrap();
        } else {
            log.append_batch(&evs).unwrap();
        }
        out.push(evs);
    }
    log.close().unwrap();
    out
}

fn cut_everywhere(units: &[usize]) {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    let groups = build(&pristine, units);
    std::fs::remove_file(pristine.join("tail.state")).unwrap();
    let seg = segments(&pristine).pop().unwrap();
    let name = seg.file_name().unwrap().to_owned();
    let bytes = std::fs::read(&seg).unwrap();
    let frames = frame_offsets(&bytes, bytes.len());
    // Group end offsets, to know which groups are whole at each cut.
    let mut group_ends = Vec::new();
    let mut k = 0;
    for g in &groups {
        k += g.len();
        group_ends.push(frames[k - 1].0 + frames[k - 1].1);
    }
    let last_two_start =
        frames[frames.len() - groups[groups.len() - 1].len() - groups[groups.len() - 2].len()].0;
    for cut in last_two_start..=bytes.len() {
        let dir = tmp.path().join(format!("cut{cut}"));
        copy_dir(&pristine, &dir);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(&name))
            .unwrap();
        f.set_len(cut as u64).unwrap();
        drop(f);
        let whole = group_ends.iter().filter(|&&e| e <= cut).count();
        let expected: Vec<Event> = groups[..whole].iter().flatten().cloned().collect();
        {
            let log = Log::open(vfs(), &dir, opts(1 << 20)).unwrap();
            assert_eq!(log.head().last_lsn, Lsn(expected.len() as u64), "cut {cut}");
            assert_eq!(events(&log), expected, "cut {cut}");
            // Drop without close so no tail.state helps the second open.
            std::mem::forget(log);
        }
        let after_first = std::fs::read(dir.join(&name)).unwrap();
        assert_eq!(
            after_first.len(),
            group_ends.get(whole.wrapping_sub(1)).copied().unwrap_or(64)
        );
        let log = Log::open(vfs(), &dir, opts(1 << 20)).unwrap();
        assert_eq!(
            std::fs::read(dir.join(&name)).unwrap(),
            after_first,
            "second recovery changed nothing"
        );
        let lsn = log.append(&ev(999)).unwrap();
        assert_eq!(lsn, Lsn(expected.len() as u64 + 1));
        assert!(log.verify().unwrap().problems.is_empty());
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn cut_tail_at_every_byte_of_last_two_records() {
    cut_everywhere(&[1, 1, 1, 1]);
}

#[test]
fn cut_tail_at_every_byte_of_a_trailing_batch() {
    cut_everywhere(&[1, 1, 1, 3]);
}

#[test]
fn flipped_byte_in_sealed_segment_is_named_by_open_or_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("p");
    {
        let log = Log::open(vfs(), &pristine, opts(1200)).unwrap();
        for i in 1..=30 {
            log.append(&ev(i)).unwrap();
        }
        log.close().unwrap();
    }
    let seg = segments(&pristine)[1].clone();
    let name = seg.file_name().unwrap().to_owned();
    let bytes = std::fs::read(&seg).unwrap();
    let footer_at = bytes.len() - 64;
    let frames = frame_offsets(&bytes, footer_at);
    let mut checked = 0;
    for at in (0..bytes.len()).step_by(5) {
        let dir = tmp.path().join(format!("f{at}"));
        copy_dir(&pristine, &dir);
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        std::fs::write(dir.join(&name), &b).unwrap();
        let target = dir.join(&name);
        match Log::open(vfs(), &dir, opts(1200)) {
            Err(EngineError::Corrupt { path, offset, .. }) => {
                assert_eq!(path, target, "flip at {at}");
                assert!(
                    (at < 64 && offset == 0) || (at >= footer_at && offset == footer_at as u64),
                    "flip at {at} reported at {offset}"
                );
            }
            Err(e) => panic!("flip at {at}: {e}"),
            Ok(log) => {
                assert!(
                    (64..footer_at).contains(&at),
                    "flip at {at} not detected at open"
                );
                let rep = log.verify().unwrap();
                let p = rep
                    .problems
                    .first()
                    .unwrap_or_else(|| panic!("flip at {at} not found by verify"));
                let &(off, _, lsn) = frames.iter().rev().find(|f| f.0 <= at).unwrap();
                assert_eq!(p.path, target);
                assert_eq!(p.offset, off as u64, "flip at {at}: {p}");
                assert_eq!(p.lsn, Some(lsn), "flip at {at}: {p}");
                assert!(p
                    .to_string()
                    .contains(&format!("at byte {off} (LSN {lsn})")));
                // Reading through the damaged record fails naming the place too.
                let err = log.iter_from(Lsn(1)).find_map(|r| r.err()).unwrap();
                assert!(
                    err.to_string()
                        .contains(&name.to_string_lossy().to_string()),
                    "{err}"
                );
                checked += 1;
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(checked > 30);
}

#[test]
fn corruption_followed_by_good_records_fails_open_then_salvage_keeps_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let model = build(dir, &[1; 10]).concat();
    std::fs::remove_file(dir.join("tail.state")).unwrap();
    let seg = segments(dir).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let frames = frame_offsets(&bytes, bytes.len());
    let (off4, _, _) = frames[3];
    bytes[off4 + 60] ^= 0xFF;
    std::fs::write(&seg, &bytes).unwrap();

    let err = Log::open(vfs(), dir, opts(1 << 20)).unwrap_err();
    match &err {
        EngineError::Corrupt {
            path, offset, lsn, ..
        } => {
            assert_eq!(path, &seg);
            assert_eq!(*offset, off4 as u64);
            assert_eq!(*lsn, Some(Lsn(4)));
        }
        e => panic!("{e}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("00000000000000000001.seg") && msg.contains(&off4.to_string()),
        "{msg}"
    );
    // Nothing was truncated by the failed open.
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);

    let rep = salvage(vfs(), dir).unwrap();
    assert_eq!(rep.kept_records, 9);
    assert_eq!(rep.placeholders, 1);
    assert_eq!(rep.dropped.len(), 1);
    assert_eq!(
        (rep.dropped[0].first, rep.dropped[0].last),
        (Lsn(4), Lsn(4))
    );
    assert!(rep.dropped_bytes > 0);
    let damaged = rep.damaged_dir.clone().unwrap();
    assert_eq!(
        std::fs::read(damaged.join(seg.file_name().unwrap())).unwrap(),
        bytes,
        "moved aside, not deleted"
    );

    let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
    assert_eq!(log.head(), rep.head);
    let got = events(&log);
    assert_eq!(got.len(), 10);
    for (i, e) in got.iter().enumerate() {
        if i == 3 {
            assert_eq!(e.kind, EventKind::Custom);
            assert_eq!(e.session, "cairn");
        } else {
            assert_eq!(e, &model[i]);
        }
    }
    assert!(log.verify().unwrap().problems.is_empty());
    assert_eq!(log.append(&ev(11)).unwrap(), Lsn(11));
    drop(log);
    // A second salvage finds nothing to do.
    let again = salvage(vfs(), dir).unwrap();
    assert_eq!(again.damaged_dir, None);
    assert_eq!(again.kept_records, 11);
}

#[test]
fn salvage_of_a_sealed_segment_keeps_later_segments_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut model = Vec::new();
    {
        let log = Log::open(vfs(), dir, opts(1000)).unwrap();
        for i in 1..=40 {
            let e = ev(i);
            log.append(&e).unwrap();
            model.push(e);
        }
        log.close().unwrap();
    }
    let segs = segments(dir);
    assert!(segs.len() > 3);
    let seg = segs[1].clone();
    let mut bytes = std::fs::read(&seg).unwrap();
    let frames = frame_offsets(&bytes, bytes.len() - 64);
    let (off, _, lost) = frames[1];
    bytes[off + 3] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let rep = salvage(vfs(), dir).unwrap();
    assert_eq!(rep.kept_records, 39, "{rep:?}");
    assert_eq!(rep.dropped[0].first, lost);
    let log = Log::open(vfs(), dir, opts(1000)).unwrap();
    let got = events(&log);
    assert_eq!(got.len(), 40);
    for (i, e) in got.iter().enumerate() {
        if Lsn(i as u64 + 1) != lost {
            assert_eq!(e, &model[i]);
        }
    }
    let v = log.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
}

#[test]
fn garbage_after_the_last_record_is_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    build(dir, &[1, 1, 1]);
    std::fs::remove_file(dir.join("tail.state")).unwrap();
    let seg = segments(dir).pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    let mut b = std::fs::read(&seg).unwrap();
    b.extend_from_slice(&[0u8; 4096]);
    b.extend_from_slice(&[0xA5; 100]);
    std::fs::write(&seg, &b).unwrap();
    let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
    assert_eq!(log.head().last_lsn, Lsn(3));
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), len);
}

#[test]
fn stale_tail_state_is_not_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    build(dir, &[1, 1, 1]);
    let state = std::fs::read(dir.join("tail.state")).unwrap();
    {
        let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
        log.append(&ev(4)).unwrap();
        std::mem::forget(log); // crash: no new tail.state
    }
    std::fs::write(dir.join("tail.state"), &state).unwrap();
    let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
    assert_eq!(log.head().last_lsn, Lsn(4));
    assert!(log.verify().unwrap().problems.is_empty());
}

#[test]
fn missing_or_damaged_sparse_index_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    {
        let log = Log::open(vfs(), dir, opts(1000)).unwrap();
        for i in 1..=30 {
            log.append(&ev(i)).unwrap();
        }
        log.close().unwrap();
    }
    let idx: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx"))
        .collect();
    assert!(idx.len() >= 2);
    std::fs::remove_file(&idx[0]).unwrap();
    std::fs::write(&idx[1], b"garbage").unwrap();
    let log = Log::open(vfs(), dir, opts(1000)).unwrap();
    assert!(idx[0].exists(), "rebuilt and persisted");
    for i in 1..=30 {
        assert_eq!(log.read(Lsn(i)).unwrap().event, ev(i));
    }
}

/// With the tail written through its memory map, the segment is longer
/// than its records while the log is open (allocated space, zeros). A
/// roll and a clean close cut it to its records; after a crash, reopening
/// cuts the zeros as a torn tail and the next append continues the
/// sequence. With the map off, the file never holds more than its records.
#[test]
fn reserved_tail_padding_is_cut_by_roll_close_and_recovery() {
    // `Never` copies into a memory map of zero-filled space; `Always`
    // writes into space written with zeros ahead.
    let cases = [
        (true, Durability::Never),
        (true, Durability::Always),
        (false, Durability::Never),
    ];
    for (reserved_tail, durability) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let o = LogOptions {
            segment_size_bytes: 64 * 1024,
            reserved_tail,
            durability,
            ..LogOptions::default()
        };
        let log = Log::open(vfs(), dir, o).unwrap();
        // Past a roll or two, and far enough into the tail that it has
        // space reserved (a tail's first 16 KiB are plain writes).
        let mut n = 0;
        while n < 1000 || log.stats().bytes - sealed_bytes(dir) < 32 * 1024 {
            n += 1;
            log.append(&ev(n)).unwrap();
        }
        let segs = segments(dir);
        assert!(segs.len() > 2, "the log rolled");
        let records_bytes = log.stats().bytes;
        let on_disk: u64 = segs.iter().map(|p| p.metadata().unwrap().len()).sum();
        if cfg!(target_os = "linux") && reserved_tail {
            assert!(on_disk > records_bytes, "tail padded while open");
        } else {
            assert_eq!(on_disk, records_bytes);
        }
        // Sealed segments hold exactly their records and footer.
        for p in &segs[..segs.len() - 1] {
            let b = std::fs::read(p).unwrap();
            assert_eq!(
                &b[b.len() - 64..b.len() - 56],
                b"CAIRNEND",
                "{}",
                p.display()
            );
        }
        // A crash: the process dies with the bytes in the page cache.
        log.sync().unwrap();
        std::mem::forget(log);
        let log = Log::open(vfs(), dir, o).unwrap();
        assert_eq!(log.head().last_lsn, Lsn(n));
        let tail_len = segments(dir).last().unwrap().metadata().unwrap().len();
        assert_eq!(segments(dir).len(), segs.len());
        let sealed: u64 = segs[..segs.len() - 1]
            .iter()
            .map(|p| p.metadata().unwrap().len())
            .sum();
        assert_eq!(sealed + tail_len, records_bytes, "recovery cut the zeros");
        assert_eq!(log.append(&ev(n + 1)).unwrap(), Lsn(n + 1));
        let expect: Vec<Event> = (1..=n + 1).map(ev).collect();
        assert_eq!(events(&log), expect);
        let bytes = log.stats().bytes;
        log.close().unwrap();
        let on_disk: u64 = segments(dir)
            .iter()
            .map(|p| p.metadata().unwrap().len())
            .sum();
        assert_eq!(on_disk, bytes, "a clean close leaves exactly the records");
        let log = Log::open(vfs(), dir, o).unwrap();
        assert!(log.verify().unwrap().problems.is_empty());
        assert_eq!(events(&log), expect);
    }
}

/// A process that appends a few records and closes (a command-line
/// checkpoint) used to reserve a step of zeros past its records and cut
/// it again at close, an `ftruncate` that waits on the file system's
/// journal. Below the first 16 KiB a tail is written with plain writes:
/// its file never holds more than its records, under either policy, and
/// a writer that keeps going still gets reserved space.
#[test]
fn a_few_appends_reserve_no_space_ahead_so_close_cuts_nothing() {
    for durability in [Durability::Never, Durability::Always] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let o = LogOptions {
            durability,
            ..LogOptions::default()
        };
        let log = Log::open(vfs(), dir, o).unwrap();
        log.append(&ev(1)).unwrap();
        log.close().unwrap();
        let log = Log::open(vfs(), dir, o).unwrap();
        for i in 2..=5 {
            log.append(&ev(i)).unwrap();
        }
        log.sync().unwrap();
        let tail = segments(dir).pop().unwrap();
        assert_eq!(
            tail.metadata().unwrap().len(),
            log.stats().bytes,
            "{durability:?}: no space reserved for a few records"
        );
        let mut i = 6;
        while log.stats().bytes < 64 * 1024 {
            log.append(&ev(i)).unwrap();
            i += 1;
        }
        log.sync().unwrap();
        if cfg!(target_os = "linux") {
            assert!(
                tail.metadata().unwrap().len() > log.stats().bytes,
                "{durability:?}: a writer that keeps going reserves space"
            );
        }
        let bytes = log.stats().bytes;
        log.close().unwrap();
        assert_eq!(tail.metadata().unwrap().len(), bytes, "{durability:?}: cut");
        let log = Log::open(vfs(), dir, o).unwrap();
        assert_eq!(log.head().last_lsn, Lsn(i - 1));
    }
}

/// Bytes of the segment files in `dir` before the tail (the sealed ones).
fn sealed_bytes(dir: &Path) -> u64 {
    let segs = segments(dir);
    segs[..segs.len() - 1]
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum()
}

/// The reserved tail's older pages are written back and dropped from the
/// page cache as it grows (the last 4 MiB stay), both when appends are
/// copied into its memory map (`Never`) and when they are written into
/// zero-filled space (`Always`). Records in dropped pages read back intact,
/// from the writer, from a read-only reader, after a crash and after a
/// clean close.
#[test]
fn records_in_pages_dropped_from_the_cache_read_back_intact() {
    // About 12 MiB of records either way: several 1 MiB steps past the
    // 4 MiB window. With a sync per append, fewer and larger records
    // (hex digits from a seeded generator: zstd halves them, no more).
    records_in_dropped_pages_read_back(Durability::Never, 100_000, 100);
    records_in_dropped_pages_read_back(Durability::Always, 3_200, 8_000);
}

fn records_in_dropped_pages_read_back(durability: Durability, n: u64, text_len: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let o = LogOptions {
        segment_size_bytes: 64 << 20,
        durability,
        ..opts(0)
    };
    let log = Log::open(vfs(), dir, o).unwrap();
    let big = |i: u64| {
        let mut e = ev(i);
        e.text = Some(format!("{i:08} {}", support::hex_text(i, text_len)));
        e
    };
    for i in 1..=n {
        log.append(&big(i)).unwrap();
    }
    assert!(log.stats().bytes > 12 << 20, "{}", log.stats().bytes);
    let check = |got: Vec<Event>| {
        assert_eq!(got.len() as u64, n);
        for (i, e) in got.iter().enumerate() {
            assert_eq!(e, &big(i as u64 + 1), "record {}", i + 1);
        }
    };
    check(events(&log));
    let reader = cairn_engine::log::LogReader::open(vfs(), dir).unwrap();
    check(reader.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect());
    assert!(log.verify().unwrap().problems.is_empty());
    std::mem::forget(log);
    let log = Log::open(vfs(), dir, o).unwrap();
    check(events(&log));
    log.close().unwrap();
    let log = Log::open(vfs(), dir, o).unwrap();
    check(events(&log));
}

/// The records a clean close left in the tail (named by its `tail.state`)
/// were durable and acknowledged: a tail whose last of them is damaged, or
/// that is cut short, has lost them to damage, not to a torn write. Open
/// refuses it (naming where), a read-only verify reports it, and salvage
/// keeps their LSNs with placeholders so they are never given to other
/// events.
#[test]
fn records_a_clean_close_certified_are_never_cut_as_a_torn_tail() {
    for cut in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        build(dir, &[1; 20]);
        let seg = segments(dir).pop().unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        let frames = frame_offsets(&bytes, bytes.len());
        // Damage the last record, or cut the file inside record 15.
        let (from, lost_first) = if cut {
            let (off, len, _) = frames[14];
            bytes.truncate(off + len / 2);
            (off, Lsn(15))
        } else {
            let (off, len, _) = frames[19];
            bytes[off + len - 3] ^= 0xFF;
            (off, Lsn(20))
        };
        std::fs::write(&seg, &bytes).unwrap();

        match Log::open(vfs(), dir, opts(1 << 20)).unwrap_err() {
            EngineError::Corrupt {
                path,
                offset,
                lsn,
                detail,
            } => {
                assert_eq!(path, seg);
                assert_eq!(offset, from as u64);
                assert_eq!(lsn, Some(lost_first));
                assert!(detail.contains("closed cleanly with LSN 20"), "{detail}");
            }
            e => panic!("{e}"),
        }
        assert_eq!(std::fs::read(&seg).unwrap(), bytes, "nothing was truncated");
        let reader = cairn_engine::log::LogReader::open(vfs(), dir).unwrap();
        let report = reader.verify().unwrap();
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].offset, from as u64);
        assert_eq!(report.problems[0].lsn, Some(lost_first));

        let rep = salvage(vfs(), dir).unwrap();
        assert_eq!(rep.kept_records, lost_first.0 - 1);
        assert_eq!(rep.placeholders, 20 - lost_first.0 + 1);
        assert_eq!(
            rep.dropped
                .iter()
                .map(|d| (d.first, d.last))
                .collect::<Vec<_>>(),
            vec![(lost_first, Lsn(20))]
        );
        let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
        assert_eq!(log.head().last_lsn, Lsn(20));
        assert!(log.verify().unwrap().problems.is_empty());
        assert_eq!(log.append(&ev(21)).unwrap(), Lsn(21), "no LSN is reused");
    }
}

/// A clean close certifies only what it left: records appended after it
/// and torn by a crash are cut as usual, and the certified ones stay.
#[test]
fn a_torn_tail_after_a_clean_close_is_still_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    build(dir, &[1; 10]);
    {
        let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
        for i in 11..=15 {
            log.append(&ev(i)).unwrap();
        }
        log.sync().unwrap();
        std::mem::forget(log); // crash: the old tail.state stays
    }
    let seg = segments(dir).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let frames = frame_offsets(&bytes, frame_end(&bytes));
    let (off, len, lsn) = frames[13];
    assert_eq!(lsn, Lsn(14));
    std::fs::write(&seg, &bytes[..off + len / 2]).unwrap();
    let log = Log::open(vfs(), dir, opts(1 << 20)).unwrap();
    assert_eq!(log.head().last_lsn, Lsn(13));
    assert!(log.verify().unwrap().problems.is_empty());
    assert_eq!(log.append(&ev(14)).unwrap(), Lsn(14));
}

/// Where the frames of a segment end (the rest is zero-filled space
/// reserved ahead of the writer).
fn frame_end(bytes: &[u8]) -> usize {
    let mut off = 64;
    while let Ok(f) = frame::decode(&bytes[off..]) {
        off += f.len();
    }
    off
}

/// Damage in the segment being written, with intact records after it, is
/// found by a reader without failing its open: it reads the records before
/// the damage, reading to the head then fails naming it, and verify lists
/// it as a problem with its file, offset and LSN.
#[test]
fn a_reader_reads_up_to_damage_in_the_tail_and_verify_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    build(dir, &[1; 20]);
    std::fs::remove_file(dir.join("tail.state")).unwrap();
    let seg = segments(dir).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let frames = frame_offsets(&bytes, bytes.len());
    let (off, len, _) = frames[9];
    bytes[off + len - 3] ^= 0xFF;
    std::fs::write(&seg, &bytes).unwrap();

    let reader = cairn_engine::log::LogReader::open(vfs(), dir).unwrap();
    assert_eq!(reader.head().last_lsn, Lsn(9));
    assert_eq!(reader.read(Lsn(3)).unwrap().lsn, Lsn(3));
    let all: Vec<_> = reader.iter_from(Lsn(1)).collect();
    assert_eq!(all.len(), 10, "nine records, then the damage");
    assert!(all[..9].iter().all(|r| r.is_ok()));
    match all[9].as_ref().unwrap_err() {
        EngineError::Corrupt {
            path, offset, lsn, ..
        } => {
            assert_eq!(path, &seg);
            assert_eq!(*offset, off as u64);
            assert_eq!(*lsn, Some(Lsn(10)));
        }
        e => panic!("{e}"),
    }
    assert!(reader.for_each_frame(Lsn(1), |_| {}).is_err());
    let report = reader.verify().unwrap();
    assert_eq!(report.records, 9);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert_eq!((p.offset, p.lsn), (off as u64, Some(Lsn(10))));
    assert!(p.detail.contains("intact records follow"), "{}", p.detail);
    // The writer still refuses to open until repair.
    assert!(Log::open(vfs(), dir, opts(1 << 20)).is_err());
}

/// Regression (issue 27): deleting the newest segment files left a log
/// that opened, verified clean and gave the lost LSNs to new records. The
/// log's side files record how far it reached (the last clean close's
/// `tail.state`; the sparse index of a sealed segment whose file is gone):
/// open refuses a log that ends before that, naming the lost LSNs, a
/// read-only verify reports them, and salvage puts placeholders at them so
/// the next record gets a new LSN. Each case deletes the newest `gone`
/// segments, and with `drop_state` the `tail.state` too (then the orphaned
/// `.idx` alone says how far the log reached).
#[test]
fn deleted_newest_segments_are_loss_that_open_refuses_and_salvage_fills() {
    for (gone, drop_state) in [(1, false), (2, false), (2, true)] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        {
            let log = Log::open(vfs(), dir, opts(4096)).unwrap();
            for i in 1..=200 {
                log.append(&ev(i)).unwrap();
            }
            log.close().unwrap();
        }
        let segs = segments(dir);
        assert!(segs.len() > 3, "the test needs several segments");
        for s in &segs[segs.len() - gone..] {
            std::fs::remove_file(s).unwrap();
        }
        if drop_state {
            std::fs::remove_file(dir.join("tail.state")).unwrap();
        }
        // What is left: every record before the first deleted segment.
        let first_gone: u64 = segs[segs.len() - gone]
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // With the tail.state gone, the orphaned index of the newest sealed
        // segment is what says how far the log reached: its last record.
        let reached = if drop_state {
            let tail_first: u64 = segs[segs.len() - 1]
                .file_stem()
                .unwrap()
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            tail_first - 1
        } else {
            200
        };
        let case = format!("gone {gone}, tail.state dropped {drop_state}");
        let want = format!("LSN {first_gone} to {reached}");
        match Log::open(vfs(), dir, opts(4096)).unwrap_err() {
            EngineError::Corrupt { lsn, detail, .. } => {
                assert_eq!(lsn, Some(Lsn(first_gone)), "{case}");
                assert!(detail.contains(&want), "{case}: {detail}");
                assert!(detail.contains("cairn repair"), "{case}: {detail}");
            }
            e => panic!("{case}: {e}"),
        }
        assert_eq!(
            segments(dir).len(),
            segs.len() - gone,
            "{case}: open created nothing"
        );
        let reader = cairn_engine::log::LogReader::open(vfs(), dir).unwrap();
        let report = reader.verify().unwrap();
        assert_eq!(report.problems.len(), 1, "{case}: {:?}", report.problems);
        assert_eq!(report.problems[0].lsn, Some(Lsn(first_gone)), "{case}");
        assert!(report.problems[0].detail.contains(&want), "{case}");

        let rep = salvage(vfs(), dir).unwrap();
        assert_eq!(rep.kept_records, first_gone - 1, "{case}");
        assert_eq!(rep.placeholders, reached - first_gone + 1, "{case}");
        assert_eq!(
            rep.dropped
                .iter()
                .map(|d| (d.first.0, d.last.0))
                .collect::<Vec<_>>(),
            vec![(first_gone, reached)],
            "{case}"
        );
        let log = Log::open(vfs(), dir, opts(4096)).unwrap();
        assert_eq!(log.head().last_lsn, Lsn(reached), "{case}");
        // The placeholders carry the last kept record's time, not 1970.
        let kept_ts = log.read(Lsn(first_gone - 1)).unwrap().event.ts;
        assert_eq!(log.read(Lsn(reached)).unwrap().event.ts, kept_ts, "{case}");
        assert!(log.verify().unwrap().problems.is_empty(), "{case}");
        assert_eq!(
            log.append(&ev(999)).unwrap(),
            Lsn(reached + 1),
            "{case}: no LSN reused"
        );
    }
}
