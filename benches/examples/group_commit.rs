//! Group commit under a steady load, for profiling: `THREADS` appenders
//! (default 16) append ~230-byte events with the `always` policy for
//! `SECONDS` (default 3), then it prints the rate and where each group's
//! time went (records per fdatasync, time in fdatasync, time gathering the
//! group, whole cycle). `SYNCS=N` lets N fdatasyncs run at once (default
//! `DEFAULT_MAX_SYNCS_IN_FLIGHT`). `DURABILITY=never` runs the same appends with no
//! sync at all (to profile the write path alone). Unlike the criterion bench it runs one workload
//! for a fixed time, so `perf record` or `perf stat` can wrap it:
//!
//! ```text
//! cargo build --release -p cairn-benches --example group_commit
//! THREADS=16 target/release/examples/group_commit
//! perf stat -e context-switches,cpu-migrations target/release/examples/group_commit
//! ```
//!
//! The store lives under `$CAIRN_BENCH_DIR` (default: the system temp dir),
//! which must be a real disk for the figures to mean anything.

use std::time::{Duration, Instant};

use cairn_codec::{Event, EventKind};
use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::RealVfs;

fn main() {
    let threads = cairn_benches::setting("THREADS", 16);
    let seconds = cairn_benches::setting("SECONDS", 3);
    let tmp = cairn_benches::bench_dir("cairn-group-commit");
    let durability = match std::env::var("DURABILITY").as_deref() {
        Ok("never") => Durability::Never,
        Ok("always") | Err(_) => Durability::Always,
        Ok(other) => panic!("DURABILITY={other:?}: always or never"),
    };
    let opts = LogOptions {
        durability,
        max_syncs_in_flight: cairn_benches::setting(
            "SYNCS",
            cairn_engine::log::DEFAULT_MAX_SYNCS_IN_FLIGHT,
        ),
        ..LogOptions::default()
    };
    let log = Log::open(std::sync::Arc::new(RealVfs), tmp.path(), opts).expect("open");
    let mut e = Event::new(EventKind::ToolCall, "session-1");
    e.tool = Some("bash".into());
    e.path = Some("src/module_3/file_17.rs".into());
    e.text = Some("cargo test --workspace -- --nocapture; grep -rn fsync src/ | head".repeat(2));
    let before = log.group_commit_stats();
    let start = Instant::now();
    let stop = start + Duration::from_secs(seconds);
    let appended: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while Instant::now() < stop {
                        log.append(&e).expect("append");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("appender"))
            .sum()
    });
    let elapsed = start.elapsed();
    let after = log.group_commit_stats();
    let syncs = (after.syncs - before.syncs).max(1) as f64;
    let micros = |d: Duration| d.as_secs_f64() * 1e6 / syncs;
    println!(
        "{threads} threads, {durability}: {:.0} events/s; {:.1} records per fdatasync; per group: {:.1} µs in fdatasync, {:.1} µs gathering, {:.1} µs in all",
        appended as f64 / elapsed.as_secs_f64(),
        (after.records - before.records) as f64 / syncs,
        micros(after.sync_time - before.sync_time),
        micros(after.gather_time - before.gather_time),
        micros(elapsed),
    );
    log.close().expect("close");
}
