//! Crashes on the simulated disk: with `always`, every acknowledged record
//! (and batch) survives a power loss at any point, segments roll across
//! crashes, recovery is idempotent and the sequence continues.
//! `CAIRN_SOAK=1` runs many more seeds.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::sync::Arc;

use cairn_codec::{Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::Vfs;

fn ev(i: u64) -> Event {
    let mut e = Event::new(EventKind::Prompt, "s")
        .with_text(format!("prompt {i} {}", "y".repeat((i % 5) as usize * 30)));
    e.ts = Timestamp(1_700_000_000_000 + i as i64);
    e
}

fn seeds() -> u64 {
    if std::env::var_os("CAIRN_SOAK").is_some() {
        2000
    } else {
        60
    }
}

#[test]
fn acknowledged_records_survive_crashes_at_any_point() {
    let dir = Path::new(support::SIM_LOG_DIR);
    for seed in 0..seeds() {
        let disk = support::sim_disk_with_log_dir(seed);
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        let o = LogOptions {
            segment_size_bytes: 700,
            durability: Durability::Always,
            ..LogOptions::default()
        };
        let mut acked: Vec<Event> = Vec::new();
        let mut n = seed * 1000;
        for round in 0..4 {
            let log = Log::open(vfs.clone(), dir, o).unwrap();
            let got: Vec<Event> = log.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect();
            assert!(
                got.len() >= acked.len(),
                "seed {seed} round {round}: lost acknowledged records"
            );
            assert_eq!(got[..acked.len()], acked[..], "seed {seed} round {round}");
            // Whatever else survived was written whole; it is now part of the log.
            acked = got;
            let steps = 1 + (seed + round) % 7;
            for s in 0..steps {
                n += 1;
                if (s + seed) % 3 == 0 {
                    let b = vec![ev(n), ev(n + 500), ev(n + 900)];
                    log.append_batch(&b).unwrap();
                    acked.extend(b);
                } else {
                    let e = ev(n);
                    log.append(&e).unwrap();
                    acked.push(e);
                }
            }
            // Some writes that are never acknowledged, then power loss.
            std::mem::forget(log);
            if round % 2 == 0 {
                disk.crash_tearing();
            } else {
                disk.crash();
            }
        }
        let log = Log::open(vfs.clone(), dir, o).unwrap();
        let head = log.head();
        let rep = log.verify().unwrap();
        assert!(rep.problems.is_empty(), "seed {seed}: {:?}", rep.problems);
        assert!(head.last_lsn.0 >= acked.len() as u64);
        std::mem::forget(log);
        disk.crash();
        let log = Log::open(vfs, dir, o).unwrap();
        assert_eq!(log.head(), head, "seed {seed}: recovery is idempotent");
        assert_eq!(log.append(&ev(1)).unwrap(), Lsn(head.last_lsn.0 + 1));
    }
}
