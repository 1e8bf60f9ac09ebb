//! The query layer over the real engine: a log and blob store on disk, a
//! read-only reader following another process, and persisted indexes.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_codec::{Event, EventKind, Lsn};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Durability, Log, LogOptions, LogReader};
use cairn_engine::{RealVfs, Vfs};
use cairn_query::export::{follow, Format};
use cairn_query::index::{Index, OpenOutcome, INDEX_FILE};
use cairn_query::replay::{state_at, State};
use cairn_query::source::{ReaderSource, RecordSource, SnapshotManifests};
use cairn_query::{Filter, Point, Query};

fn vfs() -> Arc<dyn Vfs> {
    Arc::new(RealVfs)
}

fn open_log(dir: &Path) -> Log {
    Log::open(
        vfs(),
        dir,
        LogOptions {
            durability: Durability::Never,
            ..LogOptions::default()
        },
    )
    .unwrap()
}

/// A blob store on disk holding every blob of the scripted session `s`.
fn blob_store_with(dir: &Path, s: &common::Script) -> BlobStore {
    let store = BlobStore::open(vfs(), dir, BlobOptions::default()).unwrap();
    for h in s.blobs.hashes() {
        store
            .put(&cairn_snapshot::BlobRead::get(&s.blobs, &h).unwrap())
            .unwrap();
    }
    store.sync().unwrap();
    store
}

const CHILD_ENV: &str = "CAIRN_QUERY_FOLLOW_CHILD_DIR";
const CHILD_RECORDS: u64 = 5;

/// Not a test on its own: the child process of
/// `follow_sees_records_appended_by_another_process`.
#[test]
#[ignore = "the child process of follow_sees_records_appended_by_another_process, which runs it"]
fn follow_child_appender() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let log = open_log(Path::new(&dir));
    for i in 0..CHILD_RECORDS {
        std::thread::sleep(Duration::from_millis(30));
        log.append(&Event::new(EventKind::Prompt, "child").with_text(format!("from child {i}")))
            .unwrap();
    }
    log.close().unwrap();
}

#[test]
fn follow_sees_records_appended_by_another_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let log = open_log(&dir);
    log.append(&Event::new(EventKind::Prompt, "parent"))
        .unwrap();
    log.append(&Event::new(EventKind::Reply, "parent")).unwrap();
    log.close().unwrap();

    let src = ReaderSource::new(LogReader::open(vfs(), &dir).unwrap());
    let blobs = cairn_query::source::MemBlobs::new();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "follow_child_appender",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = Vec::new();
    // A generous deadline only so a broken follower cannot hang CI; the
    // test asserts on what was seen, never on time.
    let deadline = Instant::now() + Duration::from_secs(60);
    let stats = {
        let seen = std::cell::Cell::new(0u64);
        let stop = || {
            seen.set(src.head().unwrap().last_lsn.0);
            Instant::now() > deadline
        };
        let f = Filter {
            limit: Some(2 + CHILD_RECORDS as usize),
            ..Filter::all()
        };
        follow(&src, &blobs, &f, Format::Jsonl, Lsn(1), &mut out, &stop).unwrap()
    };
    assert!(child.wait().unwrap().success());
    assert_eq!(stats.written, 2 + CHILD_RECORDS);
    let text = String::from_utf8(out).unwrap();
    let sessions: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["session"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(&sessions[..2], ["parent", "parent"]);
    assert!(sessions[2..].iter().all(|s| s == "child"), "{sessions:?}");
}

#[test]
fn follow_stops_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_log(tmp.path());
    log.append(&Event::new(EventKind::Prompt, "s")).unwrap();
    let stop = AtomicBool::new(false);
    let blobs = cairn_query::source::MemBlobs::new();
    let mut out = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(20));
                log.append(&Event::new(EventKind::Reply, "s")).unwrap();
            }
            while log.head().last_lsn < Lsn(4) {
                std::thread::yield_now();
            }
        });
        let st = follow(
            &log,
            &blobs,
            &Filter::all(),
            Format::Jsonl,
            Lsn(1),
            &mut out,
            &|| {
                let done = log.head().last_lsn >= Lsn(4) && stop.load(Ordering::SeqCst);
                stop.store(log.head().last_lsn >= Lsn(4), Ordering::SeqCst);
                done
            },
        )
        .unwrap();
        assert_eq!(st.written, 4);
    });
    assert_eq!(String::from_utf8(out).unwrap().lines().count(), 4);
}

/// Appends the scripted session to a real log and blob store; the state
/// reached live equals the fold from the start, over a separate reader.
#[test]
fn live_store_state_equals_fold_from_start() {
    let tmp = tempfile::tempdir().unwrap();
    let s = common::script(77, 250);
    let store = blob_store_with(&tmp.path().join("blobs"), &s);
    let log = open_log(&tmp.path().join("log"));
    let manifests = SnapshotManifests(&store);
    let mut live = State::new();
    let mut index = Index::new();
    let head = s.log.head().unwrap().last_lsn.0;
    let mut rng = common::Rng(9);
    for n in 1..=head {
        let lsn = log.append(&s.log.read(Lsn(n)).unwrap().event).unwrap();
        let rec = RecordSource::read(&log, lsn).unwrap();
        live.apply(&rec, &manifests).unwrap();
        index.observe(&rec).unwrap();
        assert_eq!(live.tree(), s.expected[n as usize]);
        if rng.below(10) == 0 {
            let reader =
                ReaderSource::new(LogReader::open(vfs(), &tmp.path().join("log")).unwrap());
            assert_eq!(state_at(&reader, &manifests, lsn).unwrap(), live, "at {n}");
            let q = Query::new(&reader, &store, &manifests, &index);
            assert_eq!(
                q.tree_at(Point::Head).unwrap(),
                live.tree(),
                "indexed tree at {n}"
            );
        }
    }
    assert_eq!(
        index,
        Index::build(&log).unwrap(),
        "incremental index equals a rebuild"
    );
}

#[test]
fn index_persists_catches_up_and_rebuilds_when_stale() {
    let tmp = tempfile::tempdir().unwrap();
    let v = vfs();
    let ixdir = tmp.path().join("index");
    let log = open_log(&tmp.path().join("log"));
    let s = common::script(3, 80);
    for n in 1..=60 {
        log.append(&s.log.read(Lsn(n)).unwrap().event).unwrap();
    }
    let (ix, how) = Index::open(&v, &ixdir, &log).unwrap();
    assert_eq!(
        how,
        OpenOutcome::Rebuilt {
            reason: "no index file".into()
        }
    );
    ix.save(&v, &ixdir).unwrap();
    let (again, how) = Index::open(&v, &ixdir, &log).unwrap();
    assert_eq!(how, OpenOutcome::Loaded { caught_up: 0 });
    assert_eq!(again, ix);
    for n in 61..=80 {
        log.append(&s.log.read(Lsn(n)).unwrap().event).unwrap();
    }
    let (caught, how) = Index::open(&v, &ixdir, &log).unwrap();
    assert_eq!(
        how,
        OpenOutcome::Loaded { caught_up: 20 },
        "only the new records are read"
    );
    assert_eq!(caught, Index::build(&log).unwrap());

    // Damage: rebuilt, never trusted.
    let f = ixdir.join(INDEX_FILE);
    let mut bytes = std::fs::read(&f).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&f, &bytes).unwrap();
    let (fixed, how) = Index::open(&v, &ixdir, &log).unwrap();
    assert!(
        matches!(&how, OpenOutcome::Rebuilt { reason } if reason.contains("damaged")),
        "{how:?}"
    );
    assert_eq!(fixed, Index::build(&log).unwrap());

    // Another history (a log replaced under the index): rebuilt.
    caught.save(&v, &ixdir).unwrap();
    let other = open_log(&tmp.path().join("other"));
    for n in 1..=80 {
        let mut e = s.log.read(Lsn(n)).unwrap().event;
        e.session = "other".into();
        other.append(&e).unwrap();
    }
    let (_, how) = Index::open(&v, &ixdir, &other).unwrap();
    assert!(
        matches!(&how, OpenOutcome::Rebuilt { reason } if reason.contains("differs")),
        "{how:?}"
    );
    let short = open_log(&tmp.path().join("short"));
    short.append(&Event::new(EventKind::Prompt, "x")).unwrap();
    let (_, how) = Index::open(&v, &ixdir, &short).unwrap();
    assert!(
        matches!(&how, OpenOutcome::Rebuilt { reason } if reason.contains("index covers LSN 80")),
        "{how:?}"
    );
}

/// The fast paths (bodies decoded in place as `EventRef`s, JSON written by
/// hand) give the same answers as the owned-record paths, over the live log
/// and over a read-only reader.
#[test]
fn in_place_fold_and_export_equal_the_owned_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let s = common::script(5, 300);
    let store = blob_store_with(&tmp.path().join("blobs"), &s);
    let log = open_log(&tmp.path().join("log"));
    let head = s.log.head().unwrap().last_lsn.0;
    for n in 1..=head {
        let mut e = s.log.read(Lsn(n)).unwrap().event;
        if n % 7 == 0 && e.meta.is_none() {
            let mut m = serde_json::Map::new();
            m.insert("n".into(), serde_json::json!([n, "x\ny", 1.25, null]));
            e.meta = Some(cairn_codec::event::Meta(m));
        }
        if n % 11 == 0 {
            e.text = Some(format!("long text {}", "é\t\"".repeat(300)));
        }
        log.append(&e).unwrap();
    }
    let mut owned = Index::new();
    for r in log.iter_from(Lsn(1)) {
        owned.observe(&r.unwrap()).unwrap();
    }
    assert_eq!(Index::build(&log).unwrap(), owned);
    let reader = ReaderSource::new(LogReader::open(vfs(), &tmp.path().join("log")).unwrap());
    assert_eq!(Index::build(&reader).unwrap(), owned);

    let manifests = SnapshotManifests(&store);
    let mut replayed = State::new();
    for r in log.iter_from(Lsn(1)) {
        replayed.apply(&r.unwrap(), &manifests).unwrap();
    }
    for src in [&log as &dyn RecordSource, &reader] {
        assert_eq!(state_at(src, &manifests, Lsn(head)).unwrap(), replayed);
        let mid = Lsn(head / 2);
        let mut half = State::new();
        for r in log.iter_from(Lsn(1)).take(mid.0 as usize) {
            half.apply(&r.unwrap(), &manifests).unwrap();
        }
        assert_eq!(state_at(src, &manifests, mid).unwrap(), half);
    }
    let mut filters = vec![Filter::all()];
    let mut f = Filter::all();
    f.limit = Some(17);
    filters.push(f);
    let mut f = Filter::all();
    f.ok = Some(true);
    f.limit = Some(50);
    filters.push(f);
    for src in [&log as &dyn RecordSource, &reader] {
        let q = Query::new(src, &store, &manifests, &owned);
        for f in &filters {
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            let a = q.export(f, Format::Jsonl, &mut fast).unwrap();
            let b = cairn_query::export::export(src, &store, f, Format::Jsonl, &mut slow).unwrap();
            assert_eq!(a, b, "{f:?}");
            assert!(!fast.is_empty());
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(slow).unwrap()
            );
        }
        // And byte for byte what serde_json writes for the same records.
        let mut fast = Vec::new();
        q.export(&Filter::all(), Format::Jsonl, &mut fast).unwrap();
        let mut serde = Vec::new();
        for r in src.iter_from(Lsn(1)) {
            let r = r.unwrap();
            let j = cairn_codec::json::JsonRecord::new(r.lsn, r.chain, &r.event);
            serde_json::to_writer(&mut serde, &j).unwrap();
            serde.push(b'\n');
        }
        assert_eq!(
            String::from_utf8(fast).unwrap(),
            String::from_utf8(serde).unwrap()
        );
    }
}
