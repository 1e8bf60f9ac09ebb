//! Filtered scans from a new process through the per-segment index files:
//! an old store (its query index in the single-file form only) upgraded
//! in place, answers equal to the loaded index's, and `verify` checking
//! the files.
#![allow(clippy::unwrap_used)]

use cairn::Filter;
use cairn::{Event, EventKind, Lsn, Store};

fn events(n: u64) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let kind =
                [EventKind::Prompt, EventKind::FileWrite, EventKind::ToolCall][(i % 3) as usize];
            let mut e = Event::new(kind, format!("s{}", i % 4));
            e.path = Some(format!("src/f{}.rs", i % 7));
            e.text = Some(format!("event {i} with some words to fill the segment"));
            e.model = Some(format!("m{}", i % 2));
            if i % 37 == 5 {
                // A checkpoint record without a manifest, as imported
                // from another tool's audit log.
                e.kind = EventKind::CheckpointCreate;
                e.path = None;
                e.label = Some(format!("imported {i}"));
            }
            e
        })
        .collect()
}

fn scan(store: &Store, f: &Filter) -> Vec<Lsn> {
    let mut out = Vec::new();
    store
        .scan(f, &mut |r| {
            out.push(r.lsn);
            Ok(true)
        })
        .unwrap();
    out
}

fn filters() -> Vec<Filter> {
    vec![
        Filter {
            session: Some("s1".into()),
            kind: Some(EventKind::Prompt),
            limit: Some(5),
            ..Filter::all()
        },
        Filter {
            path: Some("src/f3.rs".into()),
            ..Filter::all()
        },
        Filter {
            path: Some("src".into()),
            model: Some("m1".into()),
            newest_first: true,
            limit: Some(7),
            ..Filter::all()
        },
        Filter {
            session: Some("nobody".into()),
            ..Filter::all()
        },
    ]
}

#[test]
fn old_store_index_upgrades_in_place_and_verify_checks_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    let open_writer = || {
        Store::builder()
            .workspace(tmp.path())
            .segment_size_bytes(4096)
            .open()
            .unwrap()
    };
    let w = open_writer();
    // In small batches: a batch goes into one segment whole.
    for b in events(400).chunks(10) {
        w.append_batch(b).unwrap();
    }
    // The old form: the whole index in one file, written at close.
    w.query(|_| Ok(())).unwrap();
    let sealed_by_writer = w.stats().log.sealed_segments;
    w.close().unwrap();
    let idx = tmp.path().join(".cairn/index");
    assert!(idx.join("query.idx").exists());
    // The writer built the file of each segment it sealed, off its
    // appends; an older binary did not: without them, the store is old.
    let segs = idx.join("segments");
    let built = std::fs::read_dir(&segs)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".qix")
        })
        .count() as u64;
    assert_eq!(built, sealed_by_writer);
    std::fs::remove_dir_all(&segs).unwrap();

    // The answers of the loaded (single-file) index, the reference.
    let reference = open_writer();
    let want: Vec<Vec<Lsn>> = filters()
        .iter()
        .map(|f| {
            reference
                .query(|q| q.list(f))
                .unwrap()
                .iter()
                .map(|r| r.lsn)
                .collect()
        })
        .collect();
    let imported: Vec<Vec<Lsn>> = [Some("s1"), None]
        .iter()
        .map(|s| {
            let r = reference.query(|q| q.imported_checkpoints(*s)).unwrap();
            r.iter().map(|r| r.lsn).collect()
        })
        .collect();
    assert!(!imported[0].is_empty() && imported[1].len() > imported[0].len());
    let sealed = reference.stats().log.sealed_segments;
    reference.close().unwrap();
    assert!(sealed >= 3, "{sealed} sealed segments");
    assert!(want[0].len() == 5 && !want[1].is_empty() && want[3].is_empty());

    let reader = || {
        Store::builder()
            .workspace(tmp.path())
            .read_only()
            .save_index_read_only(true)
            .open()
            .unwrap()
    };
    let r = reader();
    for (f, w) in filters().iter().zip(&want) {
        assert_eq!(&scan(&r, f), w, "{f:?}");
    }
    for (s, w) in [Some("s1"), None].iter().zip(&imported) {
        let got: Vec<Lsn> = r
            .imported_checkpoints(*s)
            .unwrap()
            .iter()
            .map(|r| r.lsn)
            .collect();
        assert_eq!(&got, w, "imported checkpoints of {s:?}");
    }
    r.close().unwrap();
    // Upgraded in place: a file per sealed segment, beside the old file,
    // and their summary.
    let files = std::fs::read_dir(&segs)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "qix")
        })
        .count() as u64;
    assert_eq!(files, sealed);
    assert!(segs
        .join(cairn_query::index::summary::SUMMARY_FILE)
        .exists());
    let r = reader();
    let v = r.verify(None).unwrap();
    assert_eq!(v.index.checked, sealed);
    assert!(v.is_ok());

    // A damaged file: verify names it; a query still answers right and
    // rebuilds it.
    let first = std::fs::read_dir(&segs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let mut bytes = std::fs::read(&first).unwrap();
    let n = bytes.len();
    bytes[n - 9] ^= 0x10;
    std::fs::write(&first, &bytes).unwrap();
    let v = r.verify(None).unwrap();
    assert_eq!(v.index.damaged.len(), 1, "{:?}", v.index);
    assert!(!v.is_ok());
    for (f, w) in filters().iter().zip(&want) {
        assert_eq!(&scan(&r, f), w, "{f:?}");
    }
    assert!(r.verify(None).unwrap().is_ok());
}

/// `checkpoints --session S` from a new process lists what the checkpoint
/// list does (labels, counts, discards by any session), read through the
/// segment indexes.
#[test]
fn session_checkpoints_through_the_segment_indexes_match_the_list() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let w = Store::builder()
        .workspace(ws)
        .segment_size_bytes(4096)
        .open()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..6 {
        std::fs::write(ws.join("a.txt"), format!("v{i}\n")).unwrap();
        let s = w.session(if i % 3 == 2 { "s2" } else { "s1" });
        ids.push(s.checkpoint(&format!("step {i}")).unwrap().id);
        for b in events(30).chunks(10) {
            w.append_batch(b).unwrap();
        }
    }
    let mut discard = Event::new(EventKind::CheckpointDiscard, "s2");
    discard.checkpoint = Some(ids[1]);
    w.append(&discard).unwrap();
    w.close().unwrap();
    let open = || {
        Store::builder()
            .workspace(ws)
            .read_only()
            .save_index_read_only(true)
            .open()
            .unwrap()
    };
    let lsns = |rs: &[cairn::Record]| rs.iter().map(|r| r.lsn).collect::<Vec<Lsn>>();
    for s in ["s1", "s2", "nobody", ""] {
        let want = open().checkpoints(Some(s)).unwrap();
        let got = open().session_checkpoints(Some(s)).unwrap();
        assert_eq!(got, want, "session {s}");
        // `cairn checkpoints --session S`: the list and the imported
        // records from one scan, as the loaded index gives them.
        let want_imported = open().query(|q| q.imported_checkpoints(Some(s))).unwrap();
        let listing = open().checkpoint_listing(Some(s)).unwrap();
        assert_eq!(listing.checkpoints, want, "session {s}");
        assert_eq!(
            lsns(&listing.imported),
            lsns(&want_imported),
            "imported of session {s}"
        );
    }
    let imported_s1 = open().checkpoint_listing(Some("s1")).unwrap().imported;
    assert_eq!(imported_s1.len(), 6, "one imported record per batch of s1");
    let all = open().checkpoint_listing(None).unwrap();
    assert_eq!(all.checkpoints, open().checkpoints(None).unwrap());
    assert_eq!(all.imported.len(), 6);
    let s1 = open().session_checkpoints(Some("s1")).unwrap();
    assert_eq!(s1.len(), 4);
    assert!(s1[1].discarded && !s1[0].discarded);
    assert!(ws.join(".cairn/index/segments").exists());
}

/// A time point and a scan bounded only by time, from a process that has
/// not loaded the query index, answer from the segment index files (the
/// index stays unloaded, so each later answer is still cold) as the loaded
/// index does: times going forward, with a stretch stamped back in time.
#[test]
fn time_points_and_time_ranges_answer_from_the_segment_indexes() {
    use cairn::{Point, Timestamp};
    let tmp = tempfile::tempdir().unwrap();
    let base = 1_700_000_000_000i64;
    let stamp = |i: i64| -> i64 {
        // Forward by 10 ms a record, but records 150..170 are stamped a
        // second earlier (a clock stepped back): a time point there
        // leaves later records out.
        if (150..170).contains(&i) {
            base + i * 10 - 1_000
        } else {
            base + i * 10
        }
    };
    {
        let w = Store::builder()
            .workspace(tmp.path())
            .segment_size_bytes(4096)
            .open()
            .unwrap();
        let evs: Vec<Event> = events(400)
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                e.ts = Timestamp(stamp(i as i64));
                e
            })
            .collect();
        for b in evs.chunks(10) {
            w.append_batch(b).unwrap();
        }
        assert!(w.stats().log.sealed_segments > 3);
        w.close().unwrap();
    }
    let open = || {
        Store::builder()
            .workspace(tmp.path())
            .read_only()
            .open()
            .unwrap()
    };
    let reference = open();
    let times: Vec<i64> = [-5, 0, 1_000, 1_495, 1_500, 1_505, 2_000, 3_990, 5_000]
        .iter()
        .map(|d| base + d)
        .collect();
    let cold = open();
    for &t in &times {
        let p = Point::Time(Timestamp(t));
        let got = cold.cold_time_point(p).expect("answered from the files");
        let want = reference.query(|q| Ok(q.time_point(p))).unwrap().unwrap();
        assert_eq!(got, want, "time point {t}");
    }
    // A time point noted (as `cairn show TIME:PATH` notes it, which
    // keeps it for the lookup that follows) resolves its own time only:
    // each other time is resolved afresh, to the whole index's answer.
    for &noted in &times {
        let p = Point::Time(Timestamp(noted));
        assert!(cold.cold_time_point(p).is_some());
        for &t in &times {
            let want = reference
                .query(|q| Ok(q.time_point(Point::Time(Timestamp(t)))))
                .unwrap()
                .unwrap();
            let tree = cold.cold_tree(Point::Time(Timestamp(t))).unwrap();
            assert_eq!(tree.at, want.lsn, "time {t} after noting {noted}");
        }
    }
    let ranges = [
        (Some(base + 1_000), None, Some(5), false),
        (Some(base + 505), Some(base + 1_700), None, false),
        (None, Some(base + 600), Some(3), true),
        (Some(base + 3_000), Some(base + 3_100), None, true),
        (Some(base + 9_000), None, None, false),
    ];
    for (since, until, limit, newest_first) in ranges {
        let f = Filter {
            since: since.map(Timestamp),
            until: until.map(Timestamp),
            limit,
            newest_first,
            ..Filter::all()
        };
        let want: Vec<Lsn> = reference
            .query(|q| q.list(&f))
            .unwrap()
            .iter()
            .map(|r| r.lsn)
            .collect();
        assert_eq!(scan(&cold, &f), want, "{f:?}");
    }
    // Still cold: the scans did not load the index (a loaded index
    // answers instead, and `cold_time_point` gives `None`).
    assert!(cold.cold_time_point(Point::Time(Timestamp(base))).is_some());
}
