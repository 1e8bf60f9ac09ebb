//! Injected I/O faults in the log, on the simulated disk.
//!
//! For each fault (EIO on a write, EIO on an fsync, ENOSPC) and each point
//! at which it can strike (the Nth applicable file operation, swept over
//! every point a short workload reaches): the append that meets the fault
//! fails with an error naming it, every later append and sync is refused
//! (no acknowledgement after a failed write or fsync), nothing panics, and
//! a reopen, with or without a crash in between, recovers a consistent
//! prefix: every acknowledged record intact, nothing that was not appended,
//! dense LSNs, a clean `verify()`, and a log that accepts appends again.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::sync::Arc;

use cairn_codec::{Event, EventKind, Lsn};
use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::vfs::{Fault, SimVfs, Vfs};
use cairn_engine::EngineError;

/// Appends in the workload each fault point is swept over.
const APPENDS: usize = 24;
/// Fault points swept per fault kind (enough to pass every segment roll of
/// the workload: with 300-byte segments it rolls every few appends).
const FAULT_POINTS: u64 = 40;

const DIR: &str = "/s/log";

fn opts() -> LogOptions {
    LogOptions {
        segment_size_bytes: 300,
        durability: Durability::Always,
        ..LogOptions::default()
    }
}

fn disk(seed: u64) -> SimVfs {
    support::sim_disk_with_dir(seed, DIR)
}

fn event(i: usize) -> Event {
    let mut e = Event::new(EventKind::ToolCall, "s")
        .with_text(format!("call {i} {}", "x".repeat(i * 7 % 90)));
    e.ts = cairn_codec::Timestamp::from_millis(1_700_000_000_000 + i as i64).unwrap();
    e
}

/// What a faulted run saw.
struct Outcome {
    /// Events attempted, in order (acknowledged or not).
    attempted: Vec<Event>,
    /// Highest acknowledged LSN.
    acked: u64,
    /// The first error, if the fault struck.
    first_error: Option<String>,
}

/// Runs the workload with `fault` armed at point `k`; asserts nothing is
/// acknowledged after the first failure.
fn run(d: &SimVfs, fault: Fault, k: u64, sticky: bool) -> Outcome {
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let log = Log::open(vfs, Path::new(DIR), opts()).unwrap();
    if sticky {
        d.fail_from(k, fault);
    } else {
        d.fail_after(k, fault);
    }
    let mut out = Outcome {
        attempted: Vec::new(),
        acked: 0,
        first_error: None,
    };
    let mut i = 0;
    while i < APPENDS {
        let batch = if i % 5 == 3 { 3 } else { 1 };
        let events: Vec<Event> = (i..i + batch).map(event).collect();
        i += batch;
        out.attempted.extend(events.iter().cloned());
        let res = if batch == 1 {
            log.append(&events[0]).map(|l| (l, l))
        } else {
            log.append_batch(&events).map(|r| r.unwrap())
        };
        match (res, &out.first_error) {
            (Ok((_, last)), None) => out.acked = last.0,
            (Ok((_, last)), Some(first)) => panic!(
                "{fault:?} at point {k}: append acknowledged LSN {} after an earlier failure ({first})",
                last.0
            ),
            (Err(e), None) => {
                check_first_error(fault, &e);
                out.first_error = Some(e.to_string());
            }
            (Err(e), Some(_)) => assert!(
                matches!(e, EngineError::Poisoned { .. }),
                "{fault:?} at point {k}: a later append failed with {e}, not Poisoned"
            ),
        }
    }
    if out.first_error.is_some() {
        assert!(
            log.sync().is_err(),
            "{fault:?} at point {k}: sync succeeded after a failure"
        );
    }
    // The process ends: its remaining writes (close) may fail or not.
    d.clear_faults();
    drop(log);
    out
}

/// The first failure names the fault: the I/O error, or a Poisoned whose
/// cause carries it.
fn check_first_error(fault: Fault, e: &EngineError) {
    let text = e.to_string();
    let want = match fault {
        Fault::Enospc => "No space left on device",
        Fault::WriteEio | Fault::SyncEio => "Input/output error",
    };
    assert!(
        text.contains(want),
        "{fault:?}: error does not name the fault: {text}"
    );
}

/// Reopens (after a crash if `crash`) and checks the consistent prefix.
fn check_recovery(d: &SimVfs, out: &Outcome, crash: bool, what: &str) {
    if crash {
        d.crash_tearing();
    }
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let log = Log::open(vfs, Path::new(DIR), opts())
        .unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    let head = log.head().last_lsn.0;
    assert!(
        head >= out.acked,
        "{what}: lost acknowledged records: head {head} < {}",
        out.acked
    );
    assert!(
        head as usize <= out.attempted.len(),
        "{what}: head {head} past every append"
    );
    let mut n = 0;
    for r in log.iter_from(Lsn(1)) {
        let r = r.unwrap_or_else(|e| panic!("{what}: reading: {e}"));
        n += 1;
        assert_eq!(r.lsn.0, n, "{what}: LSNs dense");
        assert_eq!(
            r.event,
            out.attempted[n as usize - 1],
            "{what}: record {n} is what was appended"
        );
    }
    assert_eq!(n, head, "{what}: every record up to the head is readable");
    let report = log.verify().unwrap();
    assert!(
        report.problems.is_empty(),
        "{what}: verify: {:?}",
        report.problems
    );
    // The recovered log takes appends again.
    let next = log
        .append(&event(999))
        .unwrap_or_else(|e| panic!("{what}: append after recovery: {e}"));
    assert_eq!(next.0, head + 1, "{what}");
}

fn sweep(fault: Fault, sticky: bool) -> (u64, u64) {
    let mut struck = 0;
    let mut acked = 0;
    for k in 0..FAULT_POINTS {
        for crash in [false, true] {
            let what = format!("{fault:?} at point {k}, crash {crash}");
            let d = disk(k * 2 + crash as u64);
            let out = run(&d, fault, k, sticky);
            if out.first_error.is_some() {
                struck += 1;
            }
            acked += out.acked;
            check_recovery(&d, &out, crash, &what);
        }
    }
    assert!(
        struck > FAULT_POINTS,
        "{fault:?}: the fault struck in most runs ({struck})"
    );
    (struck, acked)
}

#[test]
fn fsync_error_poisons_and_reopen_recovers_a_prefix() {
    let (struck, acked) = sweep(Fault::SyncEio, false);
    eprintln!("fault_log SyncEio: {struck} faulted runs, {acked} records acknowledged, 0 lost");
}

#[test]
fn write_error_poisons_and_reopen_recovers_a_prefix() {
    let (struck, acked) = sweep(Fault::WriteEio, false);
    eprintln!("fault_log WriteEio: {struck} faulted runs, {acked} records acknowledged, 0 lost");
}

#[test]
fn full_disk_is_a_clear_error_and_never_a_half_record() {
    let (struck, acked) = sweep(Fault::Enospc, true);
    eprintln!("fault_log Enospc: {struck} faulted runs, {acked} records acknowledged, 0 lost");
}

#[test]
fn a_retried_fsync_does_not_turn_lost_data_into_acknowledged_data() {
    // On Linux a failed fsync drops the dirty pages; the next fsync
    // "succeeds". The log must not acknowledge anything after the failure.
    let d = disk(1);
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let log = Log::open(vfs, Path::new(DIR), opts()).unwrap();
    log.append(&event(0)).unwrap();
    d.fail_after(0, Fault::SyncEio);
    assert!(log.append(&event(1)).is_err());
    // The disk works again, but the writer stays refused.
    for i in 2..6 {
        let e = log.append(&event(i)).unwrap_err();
        assert!(matches!(e, EngineError::Poisoned { .. }), "{e}");
        assert!(
            e.to_string().contains("Reopen"),
            "the error says what to do: {e}"
        );
    }
    assert!(log.sync().is_err());
    drop(log);
    d.crash();
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    let log = Log::open(vfs, Path::new(DIR), opts()).unwrap();
    assert_eq!(log.head().last_lsn, Lsn(1));
    assert!(log.verify().unwrap().problems.is_empty());
}

#[test]
fn disk_filling_up_mid_workload_never_panics() {
    // A capacity limit instead of an injected fault: the disk fills up at
    // whatever byte it fills up at.
    let (mut runs, mut filled) = (0, 0);
    for cap in (200..3000).step_by(97) {
        let d = disk(cap);
        d.set_capacity_bytes(Some(cap));
        let out = run(&d, Fault::Enospc, u64::MAX, false);
        runs += 1;
        filled += out.first_error.is_some() as u32;
        d.set_capacity_bytes(None);
        check_recovery(&d, &out, cap % 2 == 0, &format!("capacity {cap}"));
    }
    assert!(filled > 0, "the disk filled up");
    eprintln!("fault_log capacity: {runs} runs, the disk filled up in {filled}, 0 lost");
}
