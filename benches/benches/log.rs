//! Benchmarks for cairn's log, side by side with raw `write` + `fdatasync`
//! and SQLite, on ~200-byte events:
//!
//! - `log_append_200B`: policy `never` 1 thread; `always` 1 thread vs raw
//!   pwrite+fdatasync of the same frame bytes; `always` 16 threads (group
//!   commit) vs SQLite (bundled, WAL, synchronous=FULL, one transaction per
//!   event) with the same 16 threads;
//! - `log_scan`: a full scan with CRC checks (bytes/s), full decode and verify;
//! - `log_open_1M`: opening a store of 1,000,000 events vs a full scan of it;
//! - first, the bytes a store of realistic agent sessions takes against the
//!   same records as canonical JSONL (printed, not timed);
//! - `log_realistic_events`: appending and reading those sessions' events.
//!
//! Run: `cargo bench -p cairn-benches --bench log`. The data lives under
//! `$CAIRN_BENCH_DIR` (default: the system temp dir); it must be a real disk
//! for the fsync figures to mean anything.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_codec::frame::{self, RecordKind};
use cairn_codec::{ChainHash, Event, Lsn};
use cairn_engine::log::{Durability, GroupCommitStats, Log, LogOptions};
use cairn_engine::{RealVfs, Vfs};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

/// Threads for the concurrent benchmarks (the figure).
const THREADS: u64 = 16;
/// Distinct events cycled through by the append benchmarks.
const EVENT_POOL: usize = 1000;
/// Events per `append_batch` call in the batched benchmark.
const BATCH: usize = 100;
/// Events in the store scanned by `log_scan`.
const SCAN_EVENTS: u64 = 400_000;
/// Events in the store opened by `log_open_1M`.
const OPEN_EVENTS: u64 = 1_000_000;

fn vfs() -> Arc<dyn Vfs> {
    Arc::new(RealVfs)
}

fn bench_dir() -> tempfile::TempDir {
    cairn_benches::bench_dir("cairn-bench-log")
}

/// A benchmark group with this file's settings (few samples: each append
/// bench writes a store, and the fsync ones are slow).
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g
}

/// Benchmarks one `append` per iteration, cycling through `events`, on a
/// new log opened with `o`; returns the log (and its directory) for
/// benchmarks that read what was appended.
fn bench_appends(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    o: LogOptions,
    events: &[Event],
) -> (tempfile::TempDir, Log) {
    let tmp = bench_dir();
    let log = Log::open(vfs(), tmp.path(), o).expect("open");
    let mut i = 0usize;
    g.bench_function(name, |b| {
        b.iter(|| {
            log.append(&events[i % events.len()]).expect("append");
            i += 1;
        })
    });
    (tmp, log)
}

/// The MessagePack bodies of `events`.
fn bodies(events: &[Event]) -> Vec<Vec<u8>> {
    events
        .iter()
        .map(|e| e.encode_body().expect("body"))
        .collect()
}

fn pool() -> Vec<Event> {
    cairn_benches::tool_calls_200b(EVENT_POOL)
}

fn frame_of(e: &Event) -> Vec<u8> {
    let mut b = Vec::new();
    frame::encode(
        &mut b,
        Lsn(1),
        RecordKind::Event,
        0,
        &e.encode_body().expect("encode"),
        ChainHash::ZERO,
    )
    .expect("frame");
    b
}

/// Log options for the benches; `CAIRN_BENCH_PWRITE=1` turns the tail's
/// memory map off, to compare the two ways of writing appends;
/// `CAIRN_BENCH_SYNCS=N` lets N group-commit syncs run at once (default
/// `DEFAULT_MAX_SYNCS_IN_FLIGHT`), to compare with another setting.
fn opts(durability: Durability) -> LogOptions {
    LogOptions {
        durability,
        reserved_tail: std::env::var_os("CAIRN_BENCH_PWRITE").is_none(),
        max_syncs_in_flight: cairn_benches::setting(
            "CAIRN_BENCH_SYNCS",
            cairn_engine::log::DEFAULT_MAX_SYNCS_IN_FLIGHT,
        ),
        ..LogOptions::default()
    }
}

/// Runs `iters` calls of `f` spread over THREADS threads; returns the time
/// scaled to exactly `iters` calls.
fn threaded(iters: u64, f: impl Fn(u64) + Sync) -> Duration {
    let per = iters.div_ceil(THREADS).max(1);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let f = &f;
            s.spawn(move || {
                for i in 0..per {
                    f(t * per + i);
                }
            });
        }
    });
    start
        .elapsed()
        .mul_f64(iters as f64 / (per * THREADS) as f64)
}

/// The median of `v` (sorted in place).
fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// `always` 1 thread vs raw pwrite+fdatasync, interleaved round by round so
/// that both see the same disk and the same background load; prints the
/// medians and the ratio (criterion runs them minutes apart, and fsync
/// latency on a shared machine drifts a lot in that time).
fn paired_always_vs_raw(events: &[Event]) {
    const ROUNDS: usize = 200;
    let tmp = bench_dir();
    let log = Log::open(vfs(), &tmp.path().join("log"), opts(Durability::Always)).expect("open");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(tmp.path().join("raw.log"))
        .expect("raw file");
    let frames: Vec<Vec<u8>> = events.iter().map(frame_of).collect();
    let (mut cairn, mut raw) = (Vec::new(), Vec::new());
    let mut off = 0u64;
    for i in 0..ROUNDS {
        let t = Instant::now();
        log.append(&events[i % EVENT_POOL]).expect("append");
        cairn.push(t.elapsed());
        let fr = &frames[i % EVENT_POOL];
        let t = Instant::now();
        f.write_all_at(fr, off).expect("write");
        f.sync_data().expect("fdatasync");
        raw.push(t.elapsed());
        off += fr.len() as u64;
    }
    let (c, r) = (median(&mut cairn), median(&mut raw));
    eprintln!(
        "log bench: paired {ROUNDS} rounds: cairn always 1 thread median {c:?} ({:.0}/s), raw pwrite+fdatasync median {r:?} ({:.0}/s): cairn rate = {:.2}x raw",
        1.0 / c.as_secs_f64(),
        1.0 / r.as_secs_f64(),
        r.as_secs_f64() / c.as_secs_f64()
    );
}

/// Opens the SQLite peer: WAL, synchronous=FULL, one table of bodies.
fn sqlite_peer(dir: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("events.sqlite")).expect("sqlite");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("sync");
    conn.execute_batch("CREATE TABLE events(lsn INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        .expect("table");
    conn
}

/// Group commit measured in alternating rounds, like
/// [`paired_always_vs_raw`]: in each round, cairn `always` with 1 thread,
/// then with 16 threads, then SQLite (WAL, synchronous=FULL, one
/// transaction per event) with 16 threads, each for a fixed number of
/// events; prints the median rate of each and the two ratios the issue
/// sets (16 threads ÷ 1 thread, cairn ÷ SQLite).
fn paired_group_commit(events: &[Event]) {
    const ROUNDS: usize = 30;
    const ONE_THREAD_EVENTS: u64 = 100;
    const CAIRN_16_EVENTS: u64 = 1600;
    const SQLITE_16_EVENTS: u64 = 400;
    let tmp = bench_dir();
    let log = Log::open(vfs(), &tmp.path().join("log"), opts(Durability::Always)).expect("open");
    let bodies = bodies(events);
    let conn = Mutex::new(sqlite_peer(tmp.path()));
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64();
    let (mut one, mut sixteen, mut sqlite) = (Vec::new(), Vec::new(), Vec::new());
    // (fdatasyncs, time in them) in the 1-thread and the 16-thread rounds.
    let (mut sync1, mut sync16) = ((0u64, Duration::ZERO), (0u64, Duration::ZERO));
    let add = |acc: &mut (u64, Duration), before: GroupCommitStats, after: GroupCommitStats| {
        acc.0 += after.syncs - before.syncs;
        acc.1 += after.sync_time - before.sync_time;
    };
    let mut k = 0usize;
    for _ in 0..ROUNDS {
        let before = log.group_commit_stats();
        let t = Instant::now();
        for _ in 0..ONE_THREAD_EVENTS {
            log.append(&events[k % EVENT_POOL]).expect("append");
            k += 1;
        }
        one.push(rate(ONE_THREAD_EVENTS, t.elapsed()));
        let mid = log.group_commit_stats();
        add(&mut sync1, before, mid);
        let d = threaded(CAIRN_16_EVENTS, |i| {
            log.append(&events[i as usize % EVENT_POOL])
                .expect("append");
        });
        sixteen.push(rate(CAIRN_16_EVENTS, d));
        add(&mut sync16, mid, log.group_commit_stats());
        let d = threaded(SQLITE_16_EVENTS, |i| {
            let c = conn.lock().expect("lock");
            c.execute(
                "INSERT INTO events(body) VALUES (?1)",
                [&bodies[i as usize % EVENT_POOL]],
            )
            .expect("insert");
        });
        sqlite.push(rate(SQLITE_16_EVENTS, d));
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (o, s16, q) = (med(&mut one), med(&mut sixteen), med(&mut sqlite));
    eprintln!(
        "log bench: paired {ROUNDS} rounds, medians: cairn always 1 thread {o:.0}/s, 16 threads {s16:.0}/s ({:.1}x), SQLite 16 threads {q:.0}/s (cairn {:.1}x SQLite)",
        s16 / o,
        s16 / q
    );
    let per = |(n, t): (u64, Duration)| t.as_secs_f64() * 1e6 / n.max(1) as f64;
    eprintln!(
        "log bench: paired rounds: mean fdatasync {:.0} µs with 1 thread, {:.0} µs with 16 threads ({:.1} records per sync)",
        per(sync1),
        per(sync16),
        (ROUNDS as u64 * CAIRN_16_EVENTS) as f64 / sync16.0.max(1) as f64
    );
}

fn append(c: &mut Criterion) {
    let events = pool();
    paired_always_vs_raw(&events);
    paired_group_commit(&events);
    let avg = events.iter().map(|e| frame_of(e).len()).sum::<usize>() / events.len();
    eprintln!("log bench: average frame size {avg} bytes");
    let mut g = group(c, "log_append_200B");
    g.throughput(Throughput::Elements(1));
    bench_appends(
        &mut g,
        "cairn_never_1thread",
        opts(Durability::Never),
        &events,
    );
    // The same, each append written with `pwrite` (no memory map).
    let o = LogOptions {
        reserved_tail: false,
        ..opts(Durability::Never)
    };
    bench_appends(&mut g, "cairn_never_1thread_pwrite", o, &events);
    {
        let tmp = bench_dir();
        let log = Log::open(vfs(), tmp.path(), opts(Durability::Never)).expect("open");
        let batches: Vec<&[Event]> = events.chunks(BATCH).collect();
        let mut i = 0usize;
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function("cairn_never_1thread_batches_of_100", |b| {
            b.iter(|| {
                log.append_batch(batches[i % batches.len()])
                    .expect("append");
                i += 1;
            })
        });
        g.throughput(Throughput::Elements(1));
    }
    {
        let tmp = bench_dir();
        let frames: Vec<Vec<u8>> = events.iter().map(frame_of).collect();
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(tmp.path().join("raw.log"))
            .expect("raw file");
        let mut off = 0u64;
        let mut i = 0usize;
        g.bench_function("raw_pwrite_no_sync_1thread", |b| {
            b.iter(|| {
                let fr = &frames[i % EVENT_POOL];
                f.write_all_at(fr, off).expect("write");
                off += fr.len() as u64;
                i += 1;
            })
        });
        let mut i = 0usize;
        g.bench_function("encode_body_and_frame_only", |b| {
            b.iter(|| {
                let fr = frame_of(&events[i % EVENT_POOL]);
                i += 1;
                fr
            })
        });
        // The hash chain's share of an append: blake3 keyed with the
        // previous chain value over the LSN, kind, flags and the stored
        // body of each frame; and the same in segment format 1's form
        // (the previous value hashed as input), which costs one more
        // 64-byte compression for most of these frames.
        let bodies = bodies(&events);
        for (name, form) in [
            ("chain_hash_only", frame::ChainForm::CURRENT),
            ("chain_hash_only_format1", frame::ChainForm::Prefixed),
        ] {
            let mut i = 0usize;
            let mut chain = ChainHash::ZERO;
            g.bench_function(name, |b| {
                b.iter(|| {
                    chain = form.next(chain, Lsn(i as u64), 1, 0, &bodies[i % EVENT_POOL]);
                    i += 1;
                })
            });
        }
    }
    bench_appends(
        &mut g,
        "cairn_always_1thread",
        opts(Durability::Always),
        &events,
    );
    {
        let tmp = bench_dir();
        let frames: Vec<Vec<u8>> = events.iter().map(frame_of).collect();
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(tmp.path().join("raw.log"))
            .expect("raw file");
        let mut off = 0u64;
        let mut i = 0usize;
        g.bench_function("raw_pwrite_fdatasync_1thread", |b| {
            b.iter(|| {
                let fr = &frames[i % EVENT_POOL];
                f.write_all_at(fr, off).expect("write");
                f.sync_data().expect("fdatasync");
                off += fr.len() as u64;
                i += 1;
            })
        });
    }
    {
        let tmp = bench_dir();
        let log = Log::open(vfs(), tmp.path(), opts(Durability::Always)).expect("open");
        g.bench_function("cairn_always_16threads", |b| {
            b.iter_custom(|iters| {
                threaded(iters, |i| {
                    log.append(&events[i as usize % EVENT_POOL])
                        .expect("append");
                })
            })
        });
        let gc = log.group_commit_stats();
        if gc.syncs > 0 {
            eprintln!(
                "log bench: always 16 threads: {} fdatasyncs for {} records, {:.1} records per group; per group {:.0} µs in fdatasync, {:.0} µs gathering",
                gc.syncs,
                gc.records,
                gc.records as f64 / gc.syncs as f64,
                gc.sync_time.as_secs_f64() * 1e6 / gc.syncs as f64,
                gc.gather_time.as_secs_f64() * 1e6 / gc.syncs as f64,
            );
        }
    }
    {
        let tmp = bench_dir();
        let conn = sqlite_peer(tmp.path());
        let bodies = bodies(&events);
        // One connection shared under a mutex: SQLite's best case with many
        // threads (separate connections would add busy-wait sleeps).
        let conn = Mutex::new(conn);
        g.bench_function("sqlite_wal_full_16threads", |b| {
            b.iter_custom(|iters| {
                threaded(iters, |i| {
                    let c = conn.lock().expect("lock");
                    c.execute(
                        "INSERT INTO events(body) VALUES (?1)",
                        [&bodies[i as usize % EVENT_POOL]],
                    )
                    .expect("insert");
                })
            })
        });
    }
    g.finish();
}

/// Fills a store with `n` events (policy never, synced at the end).
fn fill(dir: &Path, n: u64) -> u64 {
    let events = pool();
    let log = Log::open(vfs(), dir, opts(Durability::Never)).expect("open");
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let batch: Vec<Event> = chunk
            .iter()
            .map(|&i| events[i as usize % EVENT_POOL].clone())
            .collect();
        log.append_batch(&batch).expect("append");
    }
    let bytes = log.stats().bytes;
    log.close().expect("close");
    bytes
}

fn scan(c: &mut Criterion) {
    let tmp = bench_dir();
    let bytes = fill(tmp.path(), SCAN_EVENTS);
    let log = Log::open(vfs(), tmp.path(), opts(Durability::Never)).expect("open");
    let mut g = group(c, "log_scan");
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("frames_crc_400k", |b| {
        b.iter(|| {
            let (n, _) = log.for_each_frame(Lsn(1), |_| {}).expect("scan");
            assert_eq!(n, SCAN_EVENTS);
        })
    });
    g.bench_function("verify_crc_chain_decode_400k", |b| {
        b.iter(|| {
            let r = log.verify().expect("verify");
            assert!(r.problems.is_empty());
        })
    });
    g.throughput(Throughput::Elements(SCAN_EVENTS));
    g.bench_function("iter_decode_events_400k", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for r in log.iter_from(Lsn(1)) {
                n += u64::from(r.expect("record").lsn.0 > 0);
            }
            assert_eq!(n, SCAN_EVENTS);
        })
    });
    g.finish();
}

fn open(c: &mut Criterion) {
    let tmp = bench_dir();
    fill(tmp.path(), OPEN_EVENTS);
    let mut g = group(c, "log_open_1M");
    g.bench_function("open_1M_events", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let log = Log::open(vfs(), tmp.path(), opts(Durability::Never)).expect("open");
                total += t.elapsed();
                assert_eq!(log.head().last_lsn, Lsn(OPEN_EVENTS));
                log.close().expect("close");
            }
            total
        })
    });
    let log = Log::open(vfs(), tmp.path(), opts(Durability::Never)).expect("open");
    g.bench_function("full_scan_crc_1M_events", |b| {
        b.iter(|| {
            let (n, _) = log.for_each_frame(Lsn(1), |_| {}).expect("scan");
            assert_eq!(n, OPEN_EVENTS);
        })
    });
    g.finish();
}

/// Bytes on disk for realistic agent sessions (prompts and replies of a few
/// KB, tool calls, file events, checkpoints) against the same records as
/// canonical JSONL. Nothing is timed; criterion's filter does not apply.
fn size(_c: &mut Criterion) {
    let events = cairn_benches::agent::corpus();
    let tmp = bench_dir();
    let (store, jsonl) = cairn_benches::agent::store_and_jsonl_bytes(tmp.path(), &events);
    eprintln!(
        "log bench: {} realistic agent events: store {store} bytes, canonical JSONL {jsonl} bytes: {:.3}x",
        events.len(),
        store as f64 / jsonl as f64
    );
}

/// Appends and reads of realistic agent events (see [`size`]): most bytes
/// are in prompts and replies of a few KB, compressed per record.
fn realistic(c: &mut Criterion) {
    let events = cairn_benches::agent::corpus();
    let mut g = group(c, "log_realistic_events");
    g.throughput(Throughput::Elements(1));
    let (_tmp, log) = bench_appends(
        &mut g,
        "append_never_1thread",
        opts(Durability::Never),
        &events,
    );
    g.throughput(Throughput::Elements(events.len() as u64));
    let first = log
        .head()
        .last_lsn
        .0
        .saturating_sub(events.len() as u64 - 1);
    g.bench_function("iter_decode", |b| {
        b.iter(|| {
            log.iter_from(Lsn(first))
                .take(events.len())
                .map(|r| r.expect("record").event.text.map_or(0, |t| t.len()))
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, size, append, realistic, scan, open);
criterion_main!(benches);
