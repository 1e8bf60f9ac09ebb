//! A log written in segment format 1 (records chained as
//! `blake3(prev || lsn || kind || flags || body)`, before format 2's keyed
//! chain) still opens, reads, verifies and grows: its tail is appended to
//! in its own form, and every new segment is format 2.
//!
//! `tests/fixtures/format1_log` was written by cairn at commit `616fb5f`
//! (the last with format 1): 50 records of [`event`], records 41–45 as one
//! batch, in 4 KiB segments with policy `always`: one sealed segment with
//! its sparse index, and a tail closed cleanly (`tail.state`).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::frame::ChainForm;
use cairn_codec::segment::{SegmentFooter, SegmentHeader};
use cairn_codec::{Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::{Durability, Log, LogOptions, LogReader};
use cairn_engine::{RealVfs, Vfs};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format1_log");
/// The head the writer of the fixture reported.
const HEAD_LSN: u64 = 50;
const HEAD_CHAIN: &str = "77a294acbc2ee0b4bc7506aba13e243d38ea9e340c8e575e8cf8e0fad203e5ca";
/// The fixture's tail segment.
const TAIL: &str = "00000000000000000026.seg";

/// Record `i` of the fixture (and of the appends after it).
fn event(i: u64) -> Event {
    let kind = EventKind::ALL[i as usize % EventKind::ALL.len()];
    let mut e = Event::new(kind, format!("s{}", i % 3));
    e.ts = Timestamp(1_700_000_000_000 + i as i64);
    let n = if i.is_multiple_of(7) { 900 } else { 40 };
    e.text = Some(format!("format1 record {i}:").repeat(n / 16 + 1));
    e
}

fn vfs() -> Arc<dyn Vfs> {
    Arc::new(RealVfs)
}

fn opts() -> LogOptions {
    // Larger than the fixture's 4 KiB, so the first appends fit in its
    // format-1 tail before the log rolls.
    LogOptions {
        segment_size_bytes: 8192,
        durability: Durability::Always,
        ..LogOptions::default()
    }
}

/// A copy of the fixture's log directory in a temporary directory (kept
/// while the first value lives).
fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    std::fs::create_dir(&dir).unwrap();
    for f in std::fs::read_dir(FIXTURE).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    (tmp, dir)
}

fn header_of(path: &Path) -> SegmentHeader {
    SegmentHeader::decode(&std::fs::read(path).unwrap()).unwrap()
}

/// Every record from 1 to `last` reads back as [`event`], and verify
/// finds the log intact with `last` records.
fn check_all(log: &Log, last: u64) {
    for i in 1..=last {
        let r = log.read(Lsn(i)).unwrap();
        assert_eq!(r.event, event(i), "record {i}");
    }
    assert_eq!(log.iter_from(Lsn(1)).count() as u64, last);
    let v = log.verify().unwrap();
    assert!(v.is_ok(), "{:?}", v.problems);
    assert_eq!((v.records, v.head), (last, log.head()));
}

#[test]
fn a_format1_log_opens_reads_verifies_and_grows_in_format2() {
    // Closed cleanly, and as after a crash: no tail state, so the tail is
    // scanned (in its own form) to find its end.
    for crashed in [false, true] {
        let (_tmp, dir) = fixture_copy();
        if crashed {
            std::fs::remove_file(dir.join("tail.state")).unwrap();
        }
        assert_eq!(header_of(&dir.join(TAIL)).chain_form, ChainForm::Prefixed);

        let log = Log::open(vfs(), &dir, opts()).unwrap();
        assert_eq!(log.head().last_lsn, Lsn(HEAD_LSN));
        assert_eq!(log.head().chain.to_hex(), HEAD_CHAIN);
        check_all(&log, HEAD_LSN);

        // Grow it: the first appends land in the format-1 tail, then the
        // log rolls to format-2 segments.
        for i in HEAD_LSN + 1..=150 {
            assert_eq!(log.append(&event(i)).unwrap(), Lsn(i));
        }
        let batch: Vec<Event> = (151..=155).map(event).collect();
        assert_eq!(
            log.append_batch(&batch).unwrap(),
            Some((Lsn(151), Lsn(155)))
        );
        check_all(&log, 155);
        log.close().unwrap();

        let old_tail = std::fs::read(dir.join(TAIL)).unwrap();
        let footer = SegmentFooter::decode_tail(&old_tail).unwrap().unwrap();
        assert!(
            footer.last_lsn.0 > HEAD_LSN,
            "no append landed in the format-1 tail"
        );
        assert_eq!(header_of(&dir.join(TAIL)).chain_form, ChainForm::Prefixed);
        let mut forms = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".seg"))
            .collect();
        names.sort();
        for n in &names {
            forms.push(header_of(&dir.join(n)).chain_form);
        }
        let new = forms.iter().filter(|&&f| f == ChainForm::Keyed).count();
        assert_eq!(forms[..2], [ChainForm::Prefixed, ChainForm::Prefixed]);
        assert!(new >= 2 && new == forms.len() - 2, "{forms:?}");

        // Reopened, and read by another process's reader, all of it
        // reads and verifies, across the change of form.
        let log = Log::open(vfs(), &dir, opts()).unwrap();
        check_all(&log, 155);
        let head = log.head();
        drop(log);
        let reader = LogReader::open(vfs(), &dir).unwrap();
        assert_eq!(reader.head(), head);
        let v = reader.verify().unwrap();
        assert!(v.is_ok() && v.records == 155, "{:?}", v.problems);
    }
}

#[test]
fn verify_names_a_broken_chain_in_a_format1_segment() {
    // A format-1 segment whose header claims format 2 (CRC made valid
    // again, as a careless tool would): every record's chain is then read
    // in the wrong form, and verify says so rather than passing.
    let (_tmp, dir) = fixture_copy();
    let sealed = dir.join("00000000000000000001.seg");
    let mut b = std::fs::read(&sealed).unwrap();
    let mut h = SegmentHeader::decode(&b).unwrap();
    h.chain_form = ChainForm::Keyed;
    b[..64].copy_from_slice(&h.encode());
    std::fs::write(&sealed, &b).unwrap();
    let reader = LogReader::open(vfs(), &dir).unwrap();
    let v = reader.verify().unwrap();
    assert!(!v.is_ok());
    let first = &v.problems[0];
    assert!(
        first.path.ends_with("00000000000000000001.seg"),
        "{first:?}"
    );
    assert_eq!(first.lsn, Some(Lsn(1)), "{first:?}");
    assert!(first.detail.contains("chain value"), "{first:?}");
}
