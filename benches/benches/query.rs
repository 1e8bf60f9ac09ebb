//! Benchmarks for cairn's queries, side by side with a full scan of the same
//! log and with SQLite (bundled, indexes on session and path) holding the
//! same events, on a generated store (issue 5):
//!
//! - `session_checkpoints`: one session's checkpoints;
//! - `path_history`: every record naming one path;
//! - `file_at`: one file's bytes at a point in the middle of the log;
//! - `replay_fold`: the index fold and the full state fold (tree included);
//! - `export_jsonl`: canonical JSONL of the whole log vs serde_json
//!   serializing the same (already decoded) records alone;
//! - `open_indexes`: loading the persisted indexes vs rebuilding them.
//!
//! Before the criterion groups it prints a summary (medians, ratios,
//! index memory) in one run.
//!
//! Scale: `CAIRN_BENCH_EVENTS` (default 1,000,000 events; 1,000 sessions,
//! one checkpoint per 100 events, file events over 10,000 paths). Data
//! lives under `$CAIRN_BENCH_DIR` (default: the system temp dir).
//! Run: `cargo bench -p cairn-benches --bench query`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_benches::{source_like, Rng};
use cairn_codec::json::JsonRecord;
use cairn_codec::{BlobHash, Event, EventKind, Lsn, Timestamp};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Durability, Log, LogOptions, Record};
use cairn_engine::{RealVfs, Vfs};
use cairn_query::index::Index;
use cairn_query::replay::State;
use cairn_query::source::{ManifestSource, RecordSource, SnapshotManifests};
use cairn_query::{Filter, Format, Point, Query};
use cairn_snapshot::manifest::{self, Entry, EntryKind as MEntryKind};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// Sessions in the generated store (issue 5).
const SESSIONS: u64 = 1_000;
/// One checkpoint per this many events: 10,000 checkpoints in 1,000,000 events.
const CHECKPOINT_EVERY: u64 = 100;
/// Distinct workspace paths touched by file events.
const PATHS: u64 = 10_000;
/// Distinct file contents (blobs) file events cycle through.
const CONTENTS: u64 = 2_000;
/// Distinct checkpoint manifests (each covers every path): building 10,000
/// full manifests would measure the snapshot crate, not queries.
const MANIFESTS: u64 = 8;
/// Events appended per batch while generating.
const BATCH: usize = 1_000;

fn events_wanted() -> u64 {
    std::env::var("CAIRN_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

fn path_of(i: u64) -> String {
    format!("src/dir_{:03}/file_{i:05}.rs", i % 100)
}

struct Data {
    _dir: tempfile::TempDir,
    root: PathBuf,
    log: Log,
    blobs: BlobStore,
    index: Index,
    sqlite: rusqlite::Connection,
    n: u64,
}

fn vfs() -> Arc<dyn Vfs> {
    Arc::new(RealVfs)
}

fn generate() -> Data {
    let n = events_wanted();
    let dir = cairn_benches::bench_dir("cairn-bench-query");
    let root = dir.path().to_path_buf();
    let t = Instant::now();
    let mut rng = Rng::new(5);
    let blobs = BlobStore::open(vfs(), &root.join("blobs"), BlobOptions::default()).expect("blobs");
    let contents: Vec<BlobHash> = (0..CONTENTS)
        .map(|_| blobs.put(&source_like(&mut rng, 600)).expect("put"))
        .collect();
    let mut roots = Vec::new();
    for _ in 0..MANIFESTS {
        let mut flat = BTreeMap::new();
        let dir_entry = Entry {
            kind: MEntryKind::Dir,
            mode: 0o755,
            size: 0,
            hash: BlobHash::ZERO,
        };
        flat.insert("src".to_string(), dir_entry);
        for i in 0..PATHS {
            let p = path_of(i);
            let d = p
                .rsplit_once('/')
                .map(|x| x.0.to_string())
                .unwrap_or_default();
            flat.insert(d, dir_entry);
            let h = contents[rng.below(CONTENTS) as usize];
            flat.insert(
                p,
                Entry {
                    kind: MEntryKind::File,
                    mode: 0o644,
                    size: 600,
                    hash: h,
                },
            );
        }
        let (r, _) = manifest::build(&blobs, &flat, &BTreeSet::new(), &HashMap::new(), None)
            .expect("manifest");
        roots.push(r);
    }
    blobs.sync().expect("sync");
    let log = Log::open(
        vfs(),
        &root.join("log"),
        LogOptions {
            durability: Durability::Never,
            ..LogOptions::default()
        },
    )
    .expect("log");
    let sqlite = rusqlite::Connection::open(root.join("events.sqlite")).expect("sqlite");
    sqlite
        .execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;
             CREATE TABLE events(lsn INTEGER PRIMARY KEY, ts INTEGER, session TEXT, kind TEXT, path TEXT,
                                 to_path TEXT, after BLOB, model TEXT, ok INTEGER, body TEXT);",
        )
        .expect("schema");
    let mut batch = Vec::with_capacity(BATCH);
    let mut lsn = 0u64;
    let tx = sqlite.unchecked_transaction().expect("tx");
    {
        let mut ins = tx
            .prepare("INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)")
            .expect("prepare");
        for i in 0..n {
            let session = format!("session-{:04}", rng.below(SESSIONS));
            let kind = if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
                EventKind::CheckpointCreate
            } else {
                match rng.below(10) {
                    0..=3 => EventKind::FileWrite,
                    4 => EventKind::FileEdit,
                    5 => EventKind::Prompt,
                    6 => EventKind::Reply,
                    _ => EventKind::ToolCall,
                }
            };
            let mut e = Event::new(kind, session);
            e.ts = Timestamp(1_700_000_000_000 + i as i64 * 10);
            e.model = Some(["model-a", "model-b", "model-c"][rng.below(3) as usize].into());
            e.run = Some(format!("run-{}", rng.below(4)));
            match kind {
                EventKind::CheckpointCreate => e.root = Some(roots[rng.below(MANIFESTS) as usize]),
                EventKind::FileWrite | EventKind::FileEdit => {
                    e.path = Some(path_of(rng.below(PATHS)));
                    e.after = Some(contents[rng.below(CONTENTS) as usize]);
                    e.tool = Some("write_file".into());
                }
                _ => {
                    e.text =
                        Some(String::from_utf8_lossy(&source_like(&mut rng, 120)).into_owned());
                    e.latency_ms = Some(rng.below(3000));
                }
            }
            lsn += 1;
            ins.execute(rusqlite::params![
                lsn as i64,
                e.ts.0,
                e.session,
                e.kind.name(),
                e.path,
                e.to_path,
                e.after.map(|h| h.0.to_vec()),
                e.model,
                e.ok as i64,
                e.text,
            ])
            .expect("insert");
            batch.push(e);
            if batch.len() == BATCH {
                log.append_batch(&batch).expect("append");
                batch.clear();
            }
        }
    }
    tx.commit().expect("commit");
    log.append_batch(&batch).expect("append");
    log.sync().expect("sync");
    sqlite
        .execute_batch(
            "CREATE INDEX ev_session ON events(session, kind); CREATE INDEX ev_path ON events(path);",
        )
        .expect("indexes");
    let index = Index::build(&log).expect("index");
    index.save(&vfs(), &root.join("index")).expect("save index");
    eprintln!(
        "generated {n} events in {:.1?} under {}",
        t.elapsed(),
        root.display()
    );
    Data {
        _dir: dir,
        root,
        log,
        blobs,
        index,
        sqlite,
        n,
    }
}

fn median(mut f: impl FnMut(), runs: usize) -> Duration {
    let mut v: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort();
    v[v.len() / 2]
}

fn scan_checkpoints(log: &Log, session: &str) -> Vec<Lsn> {
    let mut out = Vec::new();
    for r in log.iter_from(Lsn(1)) {
        let r = r.expect("scan");
        if r.event.kind == EventKind::CheckpointCreate && r.event.session == session {
            out.push(r.lsn);
        }
    }
    out
}

fn scan_history(log: &Log, path: &str) -> Vec<Record> {
    log.iter_from(Lsn(1))
        .map(|r| r.expect("scan"))
        .filter(|r| r.event.paths().contains(&path))
        .collect()
}

fn scan_file_at(
    log: &Log,
    blobs: &BlobStore,
    m: &dyn ManifestSource,
    at: Lsn,
    path: &str,
) -> Vec<u8> {
    // The answer without indexes: fold the tree from the start.
    let mut st = State::new();
    for r in log.iter_from(Lsn(1)) {
        let r = r.expect("scan");
        if r.lsn > at {
            break;
        }
        st.apply(&r, m).expect("fold");
    }
    blobs.get(&st.get(path).expect("path").blob).expect("blob")
}

fn sqlite_checkpoints(db: &rusqlite::Connection, session: &str) -> Vec<i64> {
    let mut st = db
        .prepare_cached(
            "SELECT lsn FROM events WHERE session = ?1 AND kind = 'checkpoint.create' ORDER BY lsn",
        )
        .expect("prepare");
    st.query_map([session], |r| r.get(0))
        .expect("query")
        .map(|x| x.expect("row"))
        .collect()
}

fn sqlite_history(db: &rusqlite::Connection, path: &str) -> Vec<(i64, String, String)> {
    let mut st = db
        .prepare_cached("SELECT lsn, session, body FROM events WHERE path = ?1 ORDER BY lsn")
        .expect("prepare");
    st.query_map([path], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get::<_, Option<String>>(2)?.unwrap_or_default(),
        ))
    })
    .expect("query")
    .map(|x| x.expect("row"))
    .collect()
}

fn sqlite_file_at(
    db: &rusqlite::Connection,
    blobs: &BlobStore,
    at: i64,
    path: &str,
) -> Option<Vec<u8>> {
    // Only file events: SQLite holds no checkpoint manifests, so this is
    // less than the full answer (cairn also consults the last checkpoint).
    let mut st = db
        .prepare_cached(
            "SELECT after FROM events WHERE path = ?1 AND lsn <= ?2 ORDER BY lsn DESC LIMIT 1",
        )
        .expect("prepare");
    let h: Option<Vec<u8>> = st.query_row(rusqlite::params![path, at], |r| r.get(0)).ok();
    h.map(|h| {
        let mut a = [0u8; 32];
        a.copy_from_slice(&h);
        blobs.get(&BlobHash(a)).expect("blob")
    })
}

fn summary(d: &Data) {
    let m = SnapshotManifests(&d.blobs);
    let q = Query::new(&d.log, &d.blobs, &m, &d.index);
    let session = "session-0042";
    let path = path_of(4242);
    let at = Lsn(d.n / 2);
    let scan_runs = if d.n > 200_000 { 3 } else { 5 };
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    println!(
        "\n== query summary: {} events, {} sessions, {} checkpoints, {} paths ==",
        d.n,
        SESSIONS,
        d.n / CHECKPOINT_EVERY,
        PATHS
    );
    println!(
        "{:<22} {:>12} {:>12} {:>12} {:>10}",
        "query", "cairn ms", "scan ms", "sqlite ms", "scan/cairn"
    );
    let rows: Vec<(&str, Duration, Duration, Duration)> = vec![
        (
            "session_checkpoints",
            median(
                || {
                    black_box(q.checkpoints(Some(session)));
                },
                101,
            ),
            median(
                || {
                    black_box(scan_checkpoints(&d.log, session));
                },
                scan_runs,
            ),
            median(
                || {
                    black_box(sqlite_checkpoints(&d.sqlite, session));
                },
                101,
            ),
        ),
        (
            "path_history",
            median(
                || {
                    black_box(q.history(&path).expect("history"));
                },
                101,
            ),
            median(
                || {
                    black_box(scan_history(&d.log, &path));
                },
                scan_runs,
            ),
            median(
                || {
                    black_box(sqlite_history(&d.sqlite, &path));
                },
                101,
            ),
        ),
        (
            "file_at",
            median(
                || {
                    black_box(q.file_at(Point::Lsn(at), &path).expect("file_at"));
                },
                101,
            ),
            median(
                || {
                    black_box(scan_file_at(&d.log, &d.blobs, &m, at, &path));
                },
                scan_runs.min(3),
            ),
            median(
                || {
                    black_box(sqlite_file_at(&d.sqlite, &d.blobs, at.0 as i64, &path));
                },
                101,
            ),
        ),
    ];
    for (name, c, s, l) in rows {
        println!(
            "{name:<22} {:>12.4} {:>12.1} {:>12.4} {:>9.0}x",
            ms(c),
            ms(s),
            ms(l),
            s.as_secs_f64() / c.as_secs_f64()
        );
    }
    let check = q.checkpoints(Some(session)).len();
    assert_eq!(
        check,
        scan_checkpoints(&d.log, session).len(),
        "same answer"
    );
    assert_eq!(
        q.history(&path).expect("h").len(),
        scan_history(&d.log, &path).len(),
        "same answer"
    );

    let t = Instant::now();
    let ix = Index::build(&d.log).expect("fold");
    let index_fold = t.elapsed();
    let t = Instant::now();
    let mut st = State::new();
    d.log
        .for_each_ref(Lsn(1), &mut |lsn, _, e| {
            st.apply_ref(lsn, e, &m)?;
            Ok(true)
        })
        .expect("fold");
    let state_fold = t.elapsed();
    println!("replay fold (indexes): {:.0} records/s; full state fold (tree incl. {} checkpoint manifests): {:.0} records/s",
        d.n as f64 / index_fold.as_secs_f64(), d.n / CHECKPOINT_EVERY, d.n as f64 / state_fold.as_secs_f64());
    println!(
        "index memory: {:.1} MiB (approx. heap) for {} events",
        ix.heap_bytes() as f64 / (1 << 20) as f64,
        d.n
    );

    let t = Instant::now();
    let mut seen = 0u64;
    d.log
        .for_each_ref(Lsn(1), &mut |_, _, e| {
            seen += u64::from(e.ok);
            Ok(true)
        })
        .expect("decode");
    black_box(seen);
    let decode_t = t.elapsed();
    let t = Instant::now();
    let mut frames = 0u64;
    d.log
        .for_each_frame(Lsn(1), |_| frames += 1)
        .expect("frames");
    let frames_t = t.elapsed();
    println!(
        "read + CRC only: {:.0} records/s; read + CRC + decode in place: {:.0} records/s",
        frames as f64 / frames_t.as_secs_f64(),
        d.n as f64 / decode_t.as_secs_f64()
    );

    let mut sink = std::io::sink();
    let t = Instant::now();
    let stats = q
        .export(&Filter::all(), Format::Jsonl, &mut sink)
        .expect("export");
    let export_t = t.elapsed();
    let records: Vec<Record> = d.log.iter_from(Lsn(1)).map(|r| r.expect("r")).collect();
    let mut buf = Vec::with_capacity(1 << 20);
    let mut bytes = 0u64;
    let t = Instant::now();
    for r in &records {
        serde_json::to_writer(&mut buf, &JsonRecord::new(r.lsn, r.chain, &r.event)).expect("ser");
        buf.push(b'\n');
        if buf.len() >= 1 << 20 {
            bytes += buf.len() as u64;
            buf.clear();
        }
    }
    bytes += buf.len() as u64;
    let serde_t = t.elapsed();
    let mbs = |b: u64, t: Duration| b as f64 / t.as_secs_f64() / 1e6;
    println!("export jsonl (read+decode+project): {:.0} MB/s ({} bytes); serde_json alone on decoded records: {:.0} MB/s; ratio {:.2}",
        mbs(stats.bytes, export_t), stats.bytes, mbs(bytes, serde_t), mbs(stats.bytes, export_t) / mbs(bytes, serde_t));

    let t = Instant::now();
    let (_, how) = Index::open(&vfs(), &d.root.join("index"), &d.log).expect("open");
    println!(
        "open indexes: {:.1} ms ({how:?}) vs rebuild by full fold {:.1} ms",
        ms(t.elapsed()),
        ms(index_fold)
    );
}

fn bench(c: &mut Criterion) {
    let d = generate();
    summary(&d);
    let m = SnapshotManifests(&d.blobs);
    let q = Query::new(&d.log, &d.blobs, &m, &d.index);
    let session = "session-0042";
    let path = path_of(4242);
    let at = Lsn(d.n / 2);

    let mut g = c.benchmark_group("session_checkpoints");
    g.bench_function("cairn_index", |b| b.iter(|| q.checkpoints(Some(session))));
    g.bench_function("sqlite", |b| {
        b.iter(|| sqlite_checkpoints(&d.sqlite, session))
    });
    g.sample_size(10);
    g.bench_function("full_scan", |b| {
        b.iter(|| scan_checkpoints(&d.log, session))
    });
    g.finish();

    let mut g = c.benchmark_group("path_history");
    g.bench_function("cairn_index", |b| b.iter(|| q.history(&path).expect("h")));
    g.bench_function("sqlite", |b| b.iter(|| sqlite_history(&d.sqlite, &path)));
    g.sample_size(10);
    g.bench_function("full_scan", |b| b.iter(|| scan_history(&d.log, &path)));
    g.finish();

    let mut g = c.benchmark_group("file_at");
    g.bench_function("cairn_index", |b| {
        b.iter(|| q.file_at(Point::Lsn(at), &path).expect("f"))
    });
    g.bench_function("sqlite_file_events_only", |b| {
        b.iter(|| sqlite_file_at(&d.sqlite, &d.blobs, at.0 as i64, &path))
    });
    g.finish();

    let mut g = c.benchmark_group("replay_fold");
    g.sample_size(10);
    g.throughput(Throughput::Elements(d.n));
    g.bench_function("index_fold", |b| {
        b.iter(|| Index::build(&d.log).expect("fold"))
    });
    g.finish();

    let mut g = c.benchmark_group("export_jsonl");
    g.sample_size(10);
    let mut sink = std::io::sink();
    let bytes = q
        .export(&Filter::all(), Format::Jsonl, &mut sink)
        .expect("export")
        .bytes;
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("cairn_export", |b| {
        b.iter(|| {
            q.export(&Filter::all(), Format::Jsonl, &mut std::io::sink())
                .expect("export")
        })
    });
    g.finish();

    let mut g = c.benchmark_group("open_indexes");
    g.sample_size(10);
    g.bench_function("load_persisted", |b| {
        b.iter(|| Index::open(&vfs(), &d.root.join("index"), &d.log).expect("open"))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
