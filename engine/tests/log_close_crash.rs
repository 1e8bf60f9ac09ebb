//! A crash at every step of a clean close, on the simulated disk.
//!
//! A close syncs what is not yet durable, then writes `tail.state` in
//! place over the previous one (never truncated first: see `Log::close`),
//! unsynced. Here a first process leaves a state, a second appends more
//! (rolling to a new tail segment, so its state is shorter than the old
//! one and leaves the old one's end behind it), and its close is stopped
//! at every operation in turn (that operation and every later write, sync
//! or create fail, as if the process died there), then the disk crashes,
//! tearing the last unsynced write at a random point. Every reopen must
//! find exactly a prefix of what was appended holding everything the first
//! process closed with, never refuse the log as damaged, verify clean,
//! agree with a read-only reader, and take appends at the next LSN.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_codec::{Event, EventKind, Lsn};
use cairn_engine::log::{Durability, Log, LogOptions, LogReader};
use cairn_engine::vfs::sim::SimOp;
use cairn_engine::vfs::{Fault, SimVfs, Vfs};

const DIR: &str = "/s/log";
/// Records the first process appends and closes with (several sparse-index
/// entries in its tail, so its `tail.state` is the longer one).
const FIRST: usize = 120;
/// Records the second process appends before its close is cut short: past
/// the segment size, so it rolls to a new, short tail.
const SECOND: usize = 60;
/// Operations of the second close the sweep stops at (the close takes
/// fewer: the sweep's last points let it finish).
const CLOSE_POINTS: u64 = 12;
/// Seeds per point (the torn write's length is drawn from the seed).
const SEEDS: u64 = 3;

fn opts(durability: Durability) -> LogOptions {
    LogOptions {
        segment_size_bytes: 16 * 1024,
        durability,
        ..LogOptions::default()
    }
}

fn disk(seed: u64) -> SimVfs {
    support::sim_disk_with_dir(seed, DIR)
}

fn event(i: usize) -> Event {
    let mut e = Event::new(EventKind::ToolCall, "s")
        .with_text(format!("call {i} {}", "y".repeat(60 + i % 40)));
    e.ts = cairn_codec::Timestamp::from_millis(1_700_000_000_000 + i as i64).unwrap();
    e
}

/// Fails the `k`-th operation from now and every later one that changes
/// the disk (reads still succeed), as a process that died there.
fn stop_at(d: &SimVfs, k: u64) {
    let seen = AtomicU64::new(0);
    d.set_fault_hook(move |op| {
        if seen.fetch_add(1, Ordering::Relaxed) < k {
            return None;
        }
        match op {
            SimOp::Write { .. } => Some(Fault::WriteEio),
            SimOp::SyncData { .. } | SimOp::SyncDir { .. } => Some(Fault::SyncEio),
            SimOp::SetLen { .. } | SimOp::Open { .. } => Some(Fault::Enospc),
            _ => None,
        }
    });
}

#[test]
fn a_crash_at_every_step_of_a_close_reopens_to_a_prefix() {
    let all: Vec<Event> = (0..FIRST + SECOND).map(event).collect();
    let mut finished = 0;
    for durability in [Durability::Never, Durability::Always] {
        for k in 0..CLOSE_POINTS {
            for seed in 0..SEEDS {
                let what = format!("{durability:?}, close stopped at op {k}, seed {seed}");
                let d = disk(k * SEEDS + seed);
                let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
                let log = Log::open(vfs.clone(), Path::new(DIR), opts(durability)).unwrap();
                for e in &all[..FIRST] {
                    log.append(e).unwrap();
                }
                log.close().unwrap();
                let old_state = d.written_bytes(&Path::new(DIR).join("tail.state")).unwrap();

                let log = Log::open(vfs.clone(), Path::new(DIR), opts(durability)).unwrap();
                for e in &all[FIRST..] {
                    log.append(e).unwrap();
                }
                stop_at(&d, k);
                let closed = log.close().is_ok();
                d.clear_faults();
                if closed {
                    finished += 1;
                    let new_state = d.written_bytes(&Path::new(DIR).join("tail.state")).unwrap();
                    assert!(
                        new_state.len() == old_state.len() && new_state != old_state,
                        "{what}: the state was rewritten in place over the longer old one"
                    );
                }
                d.crash_tearing();

                let log = Log::open(vfs.clone(), Path::new(DIR), opts(durability))
                    .unwrap_or_else(|e| panic!("{what}: reopen refused: {e}"));
                let head = log.head().last_lsn.0 as usize;
                assert!(head >= FIRST, "{what}: lost closed records: head {head}");
                assert!(head <= all.len(), "{what}: head {head} past every append");
                if closed || durability == Durability::Always {
                    assert_eq!(head, all.len(), "{what}: a durable record was lost");
                }
                let got: Vec<Event> = log
                    .iter_from(Lsn(1))
                    .map(|r| r.unwrap_or_else(|e| panic!("{what}: reading: {e}")).event)
                    .collect();
                assert_eq!(got, all[..head], "{what}: the records are a prefix");
                let report = log.verify().unwrap();
                assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
                let reader = LogReader::open(vfs.clone(), Path::new(DIR)).unwrap();
                assert_eq!(reader.head().last_lsn.0 as usize, head, "{what}: reader");
                assert_eq!(
                    log.append(&event(999)).unwrap(),
                    Lsn(head as u64 + 1),
                    "{what}"
                );
                // A clean close after recovery leaves a state the next
                // open trusts and a reader agrees with.
                log.close().unwrap();
                let log = Log::open(vfs.clone(), Path::new(DIR), opts(durability)).unwrap();
                assert_eq!(log.head().last_lsn.0 as usize, head + 1, "{what}");
            }
        }
    }
    assert!(finished > 0, "the sweep reached the end of the close");
    assert!(
        finished < 2 * CLOSE_POINTS * SEEDS,
        "the sweep stopped some closes part way"
    );
}
