//! Basic behaviour of the log: append, read, iterate, reopen, roll, batches,
//! torn tails, the durability policies, wait_for, stats and verify.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cairn_codec::{ChainHash, Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::{Durability, Head, Log, LogOptions};
use cairn_engine::{EngineError, RealVfs, Vfs};

fn vfs() -> Arc<dyn Vfs> {
    Arc::new(RealVfs)
}

fn ev(i: u64) -> Event {
    let mut e = Event::new(EventKind::ToolCall, "s1")
        .with_path(format!("src/file_{i}.rs"))
        .with_text(format!("event number {i}"));
    e.ts = Timestamp(1_700_000_000_000 + i as i64);
    e
}

fn opts(seg: u64, d: Durability) -> LogOptions {
    LogOptions {
        segment_size_bytes: seg,
        durability: d,
        ..LogOptions::default()
    }
}

fn all(log: &Log) -> Vec<Event> {
    log.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect()
}

#[test]
fn empty_log_has_zero_head() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Log::open(vfs(), tmp.path(), LogOptions::default()).unwrap();
    assert_eq!(
        log.head(),
        Head {
            last_lsn: Lsn(0),
            chain: ChainHash::ZERO
        }
    );
    assert_eq!(log.iter_from(Lsn(0)).count(), 0);
    assert!(matches!(
        log.read(Lsn(1)),
        Err(EngineError::LsnOutOfRange { .. })
    ));
    assert!(tmp.path().join("00000000000000000001.seg").exists());
}

#[test]
fn append_read_iterate_reopen_with_rolls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut model = Vec::new();
    for round in 0..3 {
        let log = Log::open(vfs(), dir, opts(2000, Durability::Never)).unwrap();
        assert_eq!(all(&log), model, "round {round}");
        for i in 0..40 {
            let e = ev(round * 100 + i);
            let lsn = log.append(&e).unwrap();
            model.push(e);
            assert_eq!(lsn, Lsn(model.len() as u64));
        }
        let batch: Vec<Event> = (0..5).map(|i| ev(1000 + i)).collect();
        let (a, b) = log.append_batch(&batch).unwrap().unwrap();
        assert_eq!((a.0, b.0), (model.len() as u64 + 1, model.len() as u64 + 5));
        model.extend(batch);
        assert_eq!(log.append_batch(&[]).unwrap(), None);
        assert_eq!(all(&log), model);
        for (i, e) in model.iter().enumerate() {
            let r = log.read(Lsn(i as u64 + 1)).unwrap();
            assert_eq!(&r.event, e);
        }
        // iter_from in the middle
        let mid: Vec<Event> = log.iter_from(Lsn(17)).map(|r| r.unwrap().event).collect();
        assert_eq!(mid, model[16..].to_vec());
        let st = log.stats();
        assert!(st.sealed_segments > 0, "{st:?}");
        assert_eq!(st.records, model.len() as u64);
        let rep = log.verify().unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert_eq!(rep.head, log.head());
        assert_eq!(rep.records, model.len() as u64);
        if round == 1 {
            drop(log); // Drop also closes cleanly.
        } else {
            log.close().unwrap();
        }
    }
}

#[test]
fn chain_continues_across_reopen_and_equals_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Log::open(vfs(), tmp.path(), opts(1500, Durability::Always)).unwrap();
    for i in 0..20 {
        log.append(&ev(i)).unwrap();
    }
    let h = log.head();
    log.close().unwrap();
    let log = Log::open(vfs(), tmp.path(), opts(1500, Durability::Always)).unwrap();
    assert_eq!(log.head(), h);
    log.append(&ev(99)).unwrap();
    let rep = log.verify().unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.head, log.head());
    assert_ne!(log.head().chain, h.chain);
}

fn tail_segment(dir: &Path) -> std::path::PathBuf {
    let mut segs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    segs.pop().unwrap()
}

#[test]
fn torn_tail_is_truncated_and_sequence_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let log = Log::open(vfs(), dir, LogOptions::default()).unwrap();
    for i in 0..5 {
        log.append(&ev(i)).unwrap();
    }
    drop(log);
    let _ = std::fs::remove_file(dir.join("tail.state"));
    let seg = tail_segment(dir);
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    let log = Log::open(vfs(), dir, LogOptions::default()).unwrap();
    assert_eq!(log.head().last_lsn, Lsn(4));
    let l2 = std::fs::metadata(&seg).unwrap().len();
    assert!(l2 < len - 3);
    assert_eq!(log.append(&ev(7)).unwrap(), Lsn(5));
    assert_eq!(log.read(Lsn(5)).unwrap().event, ev(7));
    assert!(log.verify().unwrap().problems.is_empty());
}

#[test]
fn wait_for_wakes_on_append_and_times_out() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(vfs(), tmp.path(), opts(1 << 20, Durability::Always)).unwrap());
    let h = log.wait_for(Lsn(0), Duration::from_millis(10));
    assert_eq!(h.last_lsn, Lsn(0));
    let l2 = log.clone();
    let t = std::thread::spawn(move || l2.wait_for(Lsn(0), Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(20));
    log.append(&ev(1)).unwrap();
    assert_eq!(t.join().unwrap().last_lsn, Lsn(1));
}

#[test]
fn interval_policy_syncs_in_background() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Log::open(
        vfs(),
        tmp.path(),
        opts(1 << 20, Durability::Interval { ms: 5 }),
    )
    .unwrap();
    for i in 0..10 {
        log.append(&ev(i)).unwrap();
    }
    assert_eq!(log.head().last_lsn, Lsn(10));
    assert_eq!(log.stats().durability, Durability::Interval { ms: 5 });
    log.sync().unwrap();
    log.close().unwrap();
    let log = Log::open(vfs(), tmp.path(), LogOptions::default()).unwrap();
    assert_eq!(log.head().last_lsn, Lsn(10));
}

#[test]
fn log_is_send_and_sync_and_durability_parses() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Log>();
    assert_send_sync::<cairn_engine::log::LogReader>();
    assert_eq!(
        "interval:250".parse::<Durability>().unwrap(),
        Durability::Interval { ms: 250 }
    );
    assert_eq!(Durability::Interval { ms: 100 }.to_string(), "interval:100");
}
