//! diff, blame, history, listings, branches and session state on scripted
//! edits with known answers.
#![allow(clippy::unwrap_used)]

mod common;

use cairn_codec::{CheckpointId, Event, EventKind, Lsn, Timestamp};
use cairn_query::index::Index;
use cairn_query::source::{MemLog, SnapshotManifests, Tree, TreeEntry};
use cairn_query::{DiffStatus, Filter, Point, Query, QueryError};
use cairn_snapshot::{BlobAccess, MemBlobs};
use common::store_tree;

struct Fixture {
    log: MemLog,
    blobs: MemBlobs,
}

fn ev(kind: EventKind, session: &str, model: &str, path: &str) -> Event {
    let mut e = Event::new(kind, session);
    e.model = Some(model.into());
    e.path = Some(path.into());
    e
}

/// 1 checkpoint (empty) · 2 create a.txt · 3 edit a.txt · 4 write bin.dat ·
/// 5 checkpoint (captures an unreported edit adding "four") · 6 move a.txt
/// -> b.txt (s2) · 7 edit b.txt (s2) · 8 delete bin.dat · 9 checkpoint
/// before rollback · 10 rollback to c5 · 11 checkpoint after the rollback.
fn fixture() -> Fixture {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let put = |b: &[u8]| blobs.put(b).unwrap();
    let mut t = 1_000;
    let mut push = |mut e: Event| {
        t += 1000;
        e.ts = Timestamp(t);
        log.append(e).unwrap()
    };
    let mut cp = Event::new(EventKind::CheckpointCreate, "s1");
    cp.root = Some(store_tree(&blobs, &Tree::new()));
    push(cp); // 1
    let mut e = ev(EventKind::FileCreate, "s1", "m1", "a.txt");
    e.after = Some(put(b"one\ntwo\nthree\n"));
    push(e); // 2
    let mut e = ev(EventKind::FileEdit, "s1", "m2", "a.txt");
    e.before = Some(put(b"one\ntwo\nthree\n"));
    e.after = Some(put(b"one\nTWO\nthree\n"));
    push(e); // 3
    let mut e = ev(EventKind::FileWrite, "s1", "m1", "bin.dat");
    e.after = Some(put(b"\x00\x01binary"));
    push(e); // 4
    let mut at5 = Tree::new();
    at5.insert(
        "a.txt".into(),
        TreeEntry::file(put(b"one\nTWO\nthree\nfour\n")),
    );
    at5.insert("bin.dat".into(), TreeEntry::file(put(b"\x00\x01binary")));
    let mut cp = Event::new(EventKind::CheckpointCreate, "s1");
    cp.root = Some(store_tree(&blobs, &at5));
    cp.label = Some("five".into());
    push(cp); // 5
    let mut e = ev(EventKind::FileMove, "s2", "m3", "a.txt");
    e.to_path = Some("b.txt".into());
    push(e); // 6
    let mut e = ev(EventKind::FileEdit, "s2", "m3", "b.txt");
    e.after = Some(put(b"zero\none\nTWO\nthree\nfour\n"));
    e.run = Some("r1".into());
    push(e); // 7
    let mut e = ev(EventKind::FileDelete, "s2", "m3", "bin.dat");
    e.ok = false;
    e.error_kind = Some("EBUSY".into());
    push(e); // 8 (failed: bin.dat stays)
    let mut at9 = Tree::new();
    at9.insert(
        "b.txt".into(),
        TreeEntry::file(put(b"zero\none\nTWO\nthree\nfour\n")),
    );
    at9.insert("bin.dat".into(), TreeEntry::file(put(b"\x00\x01binary")));
    let mut cp = Event::new(EventKind::CheckpointCreate, "s1");
    cp.root = Some(store_tree(&blobs, &at9));
    push(cp); // 9
    let mut rb = Event::new(EventKind::Rollback, "s1");
    rb.source = Some(CheckpointId(Lsn(9)));
    rb.target = Some(CheckpointId(Lsn(5)));
    rb.files = vec!["a.txt".into(), "b.txt".into()];
    push(rb); // 10
    let mut cp = Event::new(EventKind::CheckpointCreate, "s1");
    cp.root = Some(store_tree(&blobs, &at5));
    cp.run = Some("r2".into());
    push(cp); // 11
    Fixture { log, blobs }
}

fn at(n: u64) -> Point {
    Point::Lsn(Lsn(n))
}

fn lsns(v: &[cairn_query::Record]) -> Vec<u64> {
    v.iter().map(|r| r.lsn.0).collect()
}

#[test]
fn file_contents_and_trees() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    let q = Query::new(&f.log, &f.blobs, &m, &ix);
    assert_eq!(q.file_at(at(2), "a.txt").unwrap(), b"one\ntwo\nthree\n");
    assert_eq!(q.file_at(at(3), "a.txt").unwrap(), b"one\nTWO\nthree\n");
    assert_eq!(
        q.file_at(at(5), "a.txt").unwrap(),
        b"one\nTWO\nthree\nfour\n"
    );
    assert_eq!(
        q.file_at(at(6), "b.txt").unwrap(),
        b"one\nTWO\nthree\nfour\n"
    );
    match q.file_at(at(6), "a.txt") {
        Err(QueryError::NoSuchPath { path, at }) => {
            assert_eq!((path.as_str(), at), ("a.txt", Lsn(6)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        q.file_at(at(8), "bin.dat").unwrap(),
        b"\x00\x01binary",
        "a failed delete changes nothing"
    );
    let keys = |t: Tree| t.into_keys().collect::<Vec<_>>();
    assert_eq!(
        keys(q.tree_at(Point::Checkpoint(CheckpointId(Lsn(5)))).unwrap()),
        ["a.txt", "bin.dat"]
    );
    assert_eq!(keys(q.tree_at(at(7)).unwrap()), ["b.txt", "bin.dat"]);
    // The rollback restored a.txt and removed b.txt; bin.dat untouched.
    assert_eq!(keys(q.tree_at(at(10)).unwrap()), ["a.txt", "bin.dat"]);
    assert_eq!(
        q.file_at(Point::Head, "a.txt").unwrap(),
        b"one\nTWO\nthree\nfour\n"
    );
    assert_eq!(keys(q.tree_at(at(1)).unwrap()), Vec::<String>::new());
    assert_eq!(
        keys(q.tree_at(Point::Time(Timestamp(4_500))).unwrap()),
        ["a.txt"]
    );
}

#[test]
fn history_includes_moves_both_ways() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    let q = Query::new(&f.log, &f.blobs, &m, &ix);
    assert_eq!(lsns(&q.history("a.txt").unwrap()), [2, 3, 6, 10]);
    // With the resets that changed it: 5 is the checkpoint that captured an
    // edit no file event reported (blame credits it with the line "four").
    assert_eq!(
        lsns(&q.history_with_resets("a.txt").unwrap()),
        [2, 3, 5, 6, 10]
    );
    assert_eq!(lsns(&q.history_with_resets("b.txt").unwrap()), [6, 7, 10]);
    assert_eq!(lsns(&q.history_with_resets("bin.dat").unwrap()), [4, 8]);
    assert_eq!(lsns(&q.history("b.txt").unwrap()), [6, 7, 10]);
    assert_eq!(lsns(&q.history("bin.dat").unwrap()), [4, 8]);
    assert!(q.history("nope").unwrap().is_empty());
}

/// A rollback that recreates a directory names the directory itself in its
/// `files`: `history d --checkpoints` then still reads `d` as the directory
/// it is, as `d/` does (found by the session-11 user trial: it took `d` for
/// a file and lost every checkpoint but the rollback).
#[test]
fn history_of_a_directory_a_rollback_named_is_still_a_directorys() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let mut with_d = Tree::new();
    with_d.insert("d/f".into(), TreeEntry::file(blobs.put(b"x\n").unwrap()));
    let mut cp = Event::new(EventKind::CheckpointCreate, "s");
    cp.root = Some(store_tree(&blobs, &with_d));
    log.append(cp).unwrap(); // 1: d/f
    let mut cp = Event::new(EventKind::CheckpointCreate, "s");
    cp.root = Some(store_tree(&blobs, &Tree::new()));
    log.append(cp).unwrap(); // 2: d removed
    let mut cp = Event::new(EventKind::CheckpointCreate, "s");
    cp.root = Some(store_tree(&blobs, &Tree::new()));
    log.append(cp).unwrap(); // 3: the undo point
    let mut rb = Event::new(EventKind::Rollback, "s");
    rb.source = Some(CheckpointId(Lsn(3)));
    rb.target = Some(CheckpointId(Lsn(1)));
    rb.files = vec!["d".into(), "d/f".into()];
    log.append(rb).unwrap(); // 4: recreates d/ and d/f
    let m = SnapshotManifests(&blobs);
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    for dir in ["d", "d/", "d//"] {
        assert_eq!(
            lsns(&q.history_with_resets(dir).unwrap()),
            [1, 2, 4],
            "history {dir:?} --checkpoints"
        );
        assert_eq!(lsns(&q.history(dir).unwrap()), [4], "history {dir:?}");
    }
    assert_eq!(lsns(&q.history_with_resets("d/f").unwrap()), [1, 2, 4]);
}

#[test]
fn blame_follows_edits_checkpoints_and_moves() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    let q = Query::new(&f.log, &f.blobs, &m, &ix);
    let b = q.blame(at(7), "b.txt").unwrap();
    let got: Vec<(usize, &str, u64)> = b
        .iter()
        .map(|l| (l.line_no, l.text.as_str(), l.lsn.0))
        .collect();
    assert_eq!(
        got,
        [
            (1, "zero", 7),
            (2, "one", 2),
            (3, "TWO", 3),
            (4, "three", 2),
            (5, "four", 5)
        ]
    );
    assert_eq!(b[0].session, "s2");
    assert_eq!(b[0].model.as_deref(), Some("m3"));
    assert_eq!(b[0].kind, EventKind::FileEdit);
    assert_eq!(b[2].model.as_deref(), Some("m2"));
    assert_eq!(
        b[4].kind,
        EventKind::CheckpointCreate,
        "the unreported edit is the checkpoint's"
    );
    let b = q.blame(at(3), "a.txt").unwrap();
    assert_eq!(b.iter().map(|l| l.lsn.0).collect::<Vec<_>>(), [2, 3, 2]);
    let e = q.blame(at(4), "bin.dat").unwrap_err().to_string();
    assert!(e.contains("binary"), "{e}");
    assert!(q.blame(at(1), "a.txt").is_err());
}

#[test]
fn diffs_text_binary_and_paths() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    let q = Query::new(&f.log, &f.blobs, &m, &ix);
    let d = q.diff(at(4), at(5), &[]).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].path, "a.txt");
    assert_eq!(d[0].status, DiffStatus::Modified);
    let u = d[0].unified.as_deref().unwrap();
    assert!(
        u.contains("--- a/a.txt") && u.contains("+++ b/a.txt") && u.contains("+four"),
        "{u}"
    );
    assert!(u.contains(" three") && !u.contains("-three"), "{u}");

    let d = q.diff(at(1), at(7), &[]).unwrap();
    let summary: Vec<(&str, DiffStatus, bool)> = d
        .iter()
        .map(|x| (x.path.as_str(), x.status, x.binary))
        .collect();
    assert_eq!(
        summary,
        [
            ("b.txt", DiffStatus::Added, false),
            ("bin.dat", DiffStatus::Added, true)
        ]
    );
    assert!(
        d[1].unified.is_none(),
        "binary files are reported, not dumped"
    );
    assert!(d[0].unified.as_deref().unwrap().contains("--- /dev/null"));

    let d = q.diff(at(5), at(7), &["a.txt".to_string()]).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].status, DiffStatus::Removed);
    assert!(d[0].unified.as_deref().unwrap().contains("-one"));
    assert!(q.diff(at(5), at(5), &[]).unwrap().is_empty());
}

#[test]
fn filtered_listings_use_every_filter() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    let q = Query::new(&f.log, &f.blobs, &m, &ix);
    let list = |flt: Filter| lsns(&q.list(&flt).unwrap());
    assert_eq!(
        list(Filter {
            session: Some("s2".into()),
            ..Filter::all()
        }),
        [6, 7, 8]
    );
    assert_eq!(
        list(Filter {
            kind: Some(EventKind::FileEdit),
            ..Filter::all()
        }),
        [3, 7]
    );
    assert_eq!(
        list(Filter {
            model: Some("m2".into()),
            ..Filter::all()
        }),
        [3]
    );
    assert_eq!(
        list(Filter {
            ok: Some(false),
            ..Filter::all()
        }),
        [8]
    );
    assert_eq!(
        list(Filter {
            run: Some("r1".into()),
            ..Filter::all()
        }),
        [7]
    );
    assert_eq!(
        list(Filter {
            path: Some("a.txt".into()),
            newest_first: true,
            limit: Some(2),
            ..Filter::all()
        }),
        [10, 6]
    );
    assert_eq!(
        list(Filter {
            since: Some(Timestamp(4_000)),
            until: Some(Timestamp(6_000)),
            ..Filter::all()
        }),
        [3, 4, 5]
    );
    assert_eq!(
        list(Filter {
            session: Some("s1".into()),
            kind: Some(EventKind::CheckpointCreate),
            ..Filter::all()
        }),
        [1, 5, 9, 11]
    );
    assert_eq!(
        list(Filter {
            limit: Some(3),
            newest_first: true,
            ..Filter::all()
        }),
        [11, 10, 9]
    );
    assert_eq!(list(Filter::all()).len(), 11);
    assert!(list(Filter {
        session: Some("nobody".into()),
        ..Filter::all()
    })
    .is_empty());
    let cps: Vec<u64> = q
        .checkpoints(Some("s1"))
        .iter()
        .map(|c| c.id.0 .0)
        .collect();
    assert_eq!(cps, [1, 5, 9, 11]);
    assert_eq!(q.checkpoints(Some("s1"))[1].label.as_deref(), Some("five"));
}

#[test]
fn branches_show_what_was_tried_from_a_checkpoint() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    let q = Query::new(&f.log, &f.blobs, &m, &ix);
    let kids = |id: u64| -> Vec<(u64, EventKind)> {
        q.branches(Some(CheckpointId(Lsn(id))))
            .unwrap()
            .iter()
            .map(|b| (b.lsn.0, b.kind))
            .collect()
    };
    assert_eq!(kids(1), [(5, EventKind::CheckpointCreate)]);
    assert_eq!(
        kids(5),
        [(9, EventKind::CheckpointCreate), (10, EventKind::Rollback)]
    );
    assert_eq!(kids(10), [(11, EventKind::CheckpointCreate)]);
    let all = q.branches(None).unwrap();
    assert_eq!(
        all.iter()
            .map(|b| (b.lsn.0, b.parent.map(|p| p.0)))
            .collect::<Vec<_>>(),
        [
            (1, None),
            (5, Some(1)),
            (9, Some(5)),
            (10, Some(5)),
            (11, Some(10))
        ]
    );
    let e = q
        .branches(Some(CheckpointId(Lsn(3))))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no checkpoint `c3`"), "{e}");
}

#[test]
fn session_state_at_points() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    let q = Query::new(&f.log, &f.blobs, &m, &ix);
    let st = q.session_state(at(7)).unwrap();
    assert_eq!(st.len(), 2);
    assert_eq!(
        (st[0].session.as_str(), st[0].records, st[0].last_checkpoint),
        ("s1", 5, Some(CheckpointId(Lsn(5))))
    );
    assert_eq!(
        (
            st[1].session.as_str(),
            st[1].records,
            st[1].open_run.as_deref()
        ),
        ("s2", 2, Some("r1"))
    );
    let st = q.session_state(at(10)).unwrap();
    assert_eq!(
        st[0].base,
        Some(CheckpointId(Lsn(5))),
        "on the branch rolled back to"
    );
    assert_eq!(st[0].last_checkpoint, Some(CheckpointId(Lsn(9))));
    assert_eq!(q.session_state(at(0)).unwrap(), vec![]);
    // The fold agrees.
    let folded = cairn_query::replay::state_at(&f.log, &m, Lsn(10)).unwrap();
    assert_eq!(
        folded.sessions.into_values().collect::<Vec<_>>(),
        q.session_state(at(10)).unwrap()
    );
}

#[test]
fn a_path_filter_selects_what_lies_under_a_directory() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let m = SnapshotManifests(&blobs);
    log.append(ev(EventKind::FileWrite, "s", "m", "src/main.rs"))
        .unwrap(); // 1
    log.append(ev(EventKind::FileWrite, "s", "m", "srcfoo.rs"))
        .unwrap(); // 2
    let mut mv = ev(EventKind::FileMove, "s", "m", "docs/a.md");
    mv.to_path = Some("src/docs/a.md".into());
    log.append(mv).unwrap(); // 3
    let mut apply = Event::new(EventKind::Apply, "s");
    apply.files = vec!["lib/x.rs".into(), "src/y/z.rs".into()];
    log.append(apply).unwrap(); // 4
    log.append(Event::new(EventKind::Prompt, "s")).unwrap(); // 5
                                                             // The index picks the candidates and the filter checks each of them,
                                                             // so both must agree for a record to be listed.
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    let under = |p: &str| {
        lsns(
            &q.list(&Filter {
                path: Some(p.into()),
                ..Filter::all()
            })
            .unwrap(),
        )
    };
    assert_eq!(under("src"), [1, 3, 4]);
    assert_eq!(under("src/"), [1, 3, 4]);
    assert_eq!(under("src/y"), [4]);
    assert_eq!(under("docs"), [3]);
    assert_eq!(under("src/main.rs"), [1]);
    assert_eq!(under("srcfoo.rs"), [2]);
    assert!(under("sr").is_empty(), "a prefix that is not a directory");
    assert_eq!(
        lsns(&q.history("src/").unwrap()),
        [1, 3, 4],
        "a directory's history"
    );
    assert_eq!(lsns(&q.history("docs/a.md").unwrap()), [3]);
    let listed = q
        .list(&Filter {
            path: Some("src".into()),
            newest_first: true,
            limit: Some(2),
            ..Filter::all()
        })
        .unwrap();
    assert_eq!(lsns(&listed), [4, 3]);
}

#[test]
fn blame_starts_where_retention_left_history() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let m = SnapshotManifests(&blobs);
    let put = |b: &[u8]| blobs.put(b).unwrap();
    // c1's manifest was collected after retention discarded it.
    let mut cp = Event::new(EventKind::CheckpointCreate, "s");
    cp.root = Some(cairn_codec::BlobHash::of(b"a manifest gc removed"));
    log.append(cp).unwrap(); // 1
    let mut w = ev(EventKind::FileWrite, "s", "m1", "a.txt");
    w.after = Some(put(b"one\ntwo\n"));
    log.append(w).unwrap(); // 2
    let mut d = Event::new(EventKind::CheckpointDiscard, "s");
    d.checkpoint = Some(CheckpointId(Lsn(1)));
    log.append(d).unwrap(); // 3
    let mut e = ev(EventKind::FileEdit, "s", "m2", "a.txt");
    e.after = Some(put(b"one\ntwo\nthree\n"));
    log.append(e).unwrap(); // 4
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    let blame = q.blame(Point::Head, "a.txt").unwrap();
    let by: Vec<(u64, &str)> = blame.iter().map(|b| (b.lsn.0, b.text.as_str())).collect();
    assert_eq!(by, [(2, "one"), (2, "two"), (4, "three")]);
    // The lines of the first version readable are marked: written at @2
    // or before, by a record no longer known (trial 13 N5).
    let cut: Vec<bool> = blame.iter().map(|b| b.history_cut).collect();
    assert_eq!(cut, [true, true, false]);
    assert_eq!(
        q.file_at(Point::Head, "a.txt").unwrap(),
        b"one\ntwo\nthree\n"
    );
    // The state at the discarded checkpoint itself is gone, and says so.
    let err = q.tree_at(at(1)).unwrap_err().to_string();
    assert!(
        err.contains(
            "checkpoint c1 was discarded at LSN 3 (by a recorded checkpoint.discard event)"
        ),
        "{err}"
    );
}

/// Appends a `file.write` of `path` with contents `bytes` (stored).
fn write(log: &MemLog, blobs: &MemBlobs, path: &str, bytes: &[u8]) {
    let mut w = ev(EventKind::FileWrite, "s", "m", path);
    w.after = Some(blobs.put(bytes).unwrap());
    log.append(w).unwrap();
}

#[test]
fn a_diff_of_a_file_too_large_to_compare_reports_it_unread() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let m = SnapshotManifests(&blobs);
    let big = cairn_query::query::MAX_LINE_DIFF_BYTES as usize + 1;
    write(&log, &blobs, "data.csv", &b"a,b\n".repeat(big / 4 + 1)); // 1
    write(&log, &blobs, "small.txt", b"one\n"); // 2
    write(&log, &blobs, "data.csv", &b"c,d\n".repeat(big / 4 + 1)); // 3
    write(&log, &blobs, "small.txt", b"two\n"); // 4
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    let diffs = q.diff(at(2), at(4), &[]).unwrap();
    assert_eq!(diffs.len(), 2);
    let large = diffs.iter().find(|d| d.path == "data.csv").unwrap();
    assert!(
        large.too_large && !large.binary && large.unified.is_none(),
        "{large:?}"
    );
    assert_eq!(large.status, DiffStatus::Modified);
    let small = diffs.iter().find(|d| d.path == "small.txt").unwrap();
    assert!(!small.too_large);
    assert!(small.unified.as_deref().unwrap().contains("+two"));
}

#[test]
fn a_diff_of_two_wholly_different_files_ends_promptly() {
    // 200,000 distinct lines on each side, none shared: a minimal line
    // diff searches O(N·D) ≈ 10^11 steps (many minutes); with the line
    // diff's timeout it ends within seconds, still a correct diff. The
    // generous bound below only tells a hang from progress.
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let text = |tag: &str| {
        (0..200_000)
            .map(|i| format!("{tag} line {i}\n"))
            .collect::<String>()
    };
    write(&log, &blobs, "gen.txt", text("old").as_bytes()); // 1
    write(&log, &blobs, "gen.txt", text("new").as_bytes()); // 2
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ix = Index::build(&log).unwrap();
        let m = SnapshotManifests(&blobs);
        let q = Query::new(&log, &blobs, &m, &ix);
        let diffs = q.diff(at(1), at(2), &[]).unwrap();
        tx.send(diffs).unwrap();
    });
    let diffs = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the diff of two different files did not end");
    let u = diffs[0].unified.as_deref().unwrap();
    assert!(u.contains("-old line 0\n") && u.contains("+new line 199999\n"));
    assert_eq!(
        u.lines()
            .filter(|l| l.starts_with('-') && !l.starts_with("---"))
            .count(),
        200_000
    );
    assert_eq!(
        u.lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .count(),
        200_000
    );
}

/// A log that counts the records read from it.
struct CountingLog {
    log: MemLog,
    reads: std::sync::atomic::AtomicU64,
}

impl cairn_query::source::RecordSource for CountingLog {
    fn head(&self) -> cairn_query::Result<cairn_engine::log::Head> {
        self.log.head()
    }
    fn iter_from(
        &self,
        from: Lsn,
    ) -> Box<dyn Iterator<Item = cairn_query::Result<cairn_query::source::Record>> + '_> {
        self.log.iter_from(from)
    }
    fn read(&self, lsn: Lsn) -> cairn_query::Result<cairn_query::source::Record> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.log.read(lsn)
    }
}

#[test]
fn blame_reads_each_version_once() {
    // 300 versions of one file, each adding a line; blame must not walk
    // the file's whole history again for every version (it did: ~45,000
    // record reads here, 2 million for 2,000 versions).
    const VERSIONS: u64 = 300;
    let log = CountingLog {
        log: MemLog::new(),
        reads: Default::default(),
    };
    let blobs = MemBlobs::new();
    let mut text = String::new();
    for i in 0..VERSIONS {
        text.push_str(&format!("line {i}\n"));
        let kind = if i == 0 {
            EventKind::FileCreate
        } else {
            EventKind::FileWrite
        };
        let mut w = ev(kind, "s", &format!("m{i}"), "f.txt");
        w.after = Some(blobs.put(text.as_bytes()).unwrap());
        log.log.append(w).unwrap();
    }
    let ix = Index::build(&log).unwrap();
    let m = SnapshotManifests(&blobs);
    let q = Query::new(&log, &blobs, &m, &ix);
    let before = log.reads.load(std::sync::atomic::Ordering::Relaxed);
    let lines = q.blame(Point::Head, "f.txt").unwrap();
    let reads = log.reads.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert_eq!(lines.len() as u64, VERSIONS);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(
            l.lsn,
            Lsn(i as u64 + 1),
            "line {i} was written by record {}",
            i + 1
        );
        assert_eq!(l.model.as_deref(), Some(format!("m{i}").as_str()));
    }
    assert!(
        reads <= 3 * VERSIONS,
        "blame read {reads} records for {VERSIONS} versions"
    );
}

/// A checkpoint record without a manifest (imported from another tool's
/// audit log) is no checkpoint: no tree, no branch point, and asking for
/// one says what it is.
#[test]
fn an_imported_checkpoint_record_is_no_checkpoint() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    log.append(Event::new(EventKind::CheckpointCreate, "s"))
        .unwrap();
    let mut rb = Event::new(EventKind::Rollback, "s");
    rb.target = Some(CheckpointId(Lsn(1)));
    log.append(rb).unwrap();
    let m = SnapshotManifests(&blobs);
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    assert!(q.branches(None).unwrap().is_empty());
    assert!(q.checkpoints(None).is_empty());
    let e = q
        .tree_at(Point::Checkpoint(CheckpointId(Lsn(1))))
        .unwrap_err()
        .to_string();
    assert!(e.contains("without a manifest") && e.contains("@1"), "{e}");
    assert!(q.tree_at(Point::Lsn(Lsn(2))).unwrap().is_empty());
}

/// Asking for a directory's bytes says it is a directory, not that it does
/// not exist.
#[test]
fn a_directory_is_not_a_missing_file() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let mut e = Event::new(EventKind::FileCreate, "s").with_path("src/main.rs");
    e.after = Some(blobs.put(b"fn main() {}\n").unwrap());
    log.append(e).unwrap();
    let m = SnapshotManifests(&blobs);
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    for p in ["src", "src/"] {
        let e = q.file_at(Point::Head, p).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{p}: {e}");
    }
    let e = q.file_at(Point::Head, "sr").unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
}

/// 1 checkpoint (empty) · 2 create a.txt · 3 edit a.txt · 4 write empty
/// e1 · 5 checkpoint: a shell `mv a.txt b.txt` and `mv e1 e2`, and a copy
/// of a.txt as copy.txt before it · 6 edit b.txt.
#[test]
fn blame_history_and_diff_follow_a_move_a_checkpoint_found() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let m = SnapshotManifests(&blobs);
    let put = |b: &[u8]| blobs.put(b).unwrap();
    let mut cp = Event::new(EventKind::CheckpointCreate, "s");
    cp.root = Some(store_tree(&blobs, &Tree::new()));
    log.append(cp).unwrap(); // 1
    let mut e = ev(EventKind::FileCreate, "s", "m1", "a.txt");
    e.after = Some(put(b"one\ntwo\n"));
    log.append(e).unwrap(); // 2
    let mut e = ev(EventKind::FileEdit, "s", "m2", "a.txt");
    e.after = Some(put(b"one\ntwo\nthree\n"));
    log.append(e).unwrap(); // 3
    write(&log, &blobs, "e1", b""); // 4
    let mut at5 = Tree::new();
    for p in ["b.txt", "copy.txt"] {
        at5.insert(p.into(), TreeEntry::file(put(b"one\ntwo\nthree\n")));
    }
    at5.insert("e2".into(), TreeEntry::file(put(b"")));
    let mut cp = Event::new(EventKind::CheckpointCreate, "s");
    cp.root = Some(store_tree(&blobs, &at5));
    log.append(cp).unwrap(); // 5
    let mut e = ev(EventKind::FileEdit, "s", "m3", "b.txt");
    e.after = Some(put(b"one\ntwo\nthree\nfour\n"));
    log.append(e).unwrap(); // 6
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);

    // Blame: b.txt's lines keep the records that wrote them as a.txt.
    let blame = q.blame(Point::Head, "b.txt").unwrap();
    let by: Vec<(u64, &str)> = blame.iter().map(|b| (b.lsn.0, b.text.as_str())).collect();
    assert_eq!(by, [(2, "one"), (2, "two"), (3, "three"), (6, "four")]);
    assert_eq!(blame[0].model.as_deref(), Some("m1"));
    // A copy is no move (a.txt's contents went to one path only, by path
    // order `b.txt`): its lines are the checkpoint's.
    let copy = q.blame(Point::Head, "copy.txt").unwrap();
    assert!(copy.iter().all(|b| b.lsn == Lsn(5)), "{copy:?}");

    // history --follow: a.txt's records, the checkpoint that found the
    // move, then b.txt's.
    assert_eq!(lsns(&q.history_following("b.txt").unwrap()), [2, 3, 5, 6]);
    // With the resets that changed it under either name: c1 did not (a.txt
    // did not exist before it or at it), c5 did.
    assert_eq!(
        lsns(&q.history_following_with_resets("b.txt").unwrap()),
        [2, 3, 5, 6]
    );
    assert_eq!(
        lsns(&q.history_following("copy.txt").unwrap()),
        [] as [u64; 0]
    );

    // diff: both ends of the rename are marked; empty files never pair.
    let d = q.diff(at(4), at(5), &[]).unwrap();
    let got: Vec<(&str, DiffStatus, Option<&str>, Option<&str>)> = d
        .iter()
        .map(|d| {
            let (f, t) = (d.renamed_from.as_deref(), d.renamed_to.as_deref());
            (d.path.as_str(), d.status, f, t)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a.txt", DiffStatus::Removed, None, Some("b.txt")),
            ("b.txt", DiffStatus::Added, Some("a.txt"), None),
            ("copy.txt", DiffStatus::Added, None, None),
            ("e1", DiffStatus::Removed, None, None),
            ("e2", DiffStatus::Added, None, None),
        ]
    );
    // Limited to the new path, the diff has no removed end to pair with.
    let d = q.diff(at(4), at(5), &["b.txt".into()]).unwrap();
    assert_eq!((d.len(), d[0].renamed_from.as_deref()), (1, None));
}

/// Trial 13 N2: the lines a rollback brings back keep the records that
/// wrote them, for an undo and for a redo alike (they went to the
/// `rollback` record, with the session of whoever rolled back and no
/// model). 1 checkpoint · 2 create f (s1, m1) · 3 checkpoint · 4 write f
/// (s2, m2) · 5 undo point · 6 rollback to c3 · 7 undo point · 8 rollback
/// to c5 (the redo).
#[test]
fn blame_gives_the_lines_a_rollback_restored_to_their_writers() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let m = SnapshotManifests(&blobs);
    let put = |b: &[u8]| blobs.put(b).unwrap();
    let tree = |text: &[u8]| {
        let mut t = Tree::new();
        t.insert("f".into(), TreeEntry::file(blobs.put(text).unwrap()));
        store_tree(&blobs, &t)
    };
    let checkpoint = |root| {
        let mut cp = Event::new(EventKind::CheckpointCreate, "s1");
        cp.root = Some(root);
        log.append(cp).unwrap()
    };
    let rollback = |source: u64, target: u64| {
        let mut rb = Event::new(EventKind::Rollback, "s3");
        rb.source = Some(CheckpointId(Lsn(source)));
        rb.target = Some(CheckpointId(Lsn(target)));
        rb.files = vec!["f".into()];
        log.append(rb).unwrap()
    };
    checkpoint(store_tree(&blobs, &Tree::new())); // 1
    let mut e = ev(EventKind::FileCreate, "s1", "m1", "f");
    e.after = Some(put(b"a\nb\n"));
    log.append(e).unwrap(); // 2
    checkpoint(tree(b"a\nb\n")); // 3
    let mut e = ev(EventKind::FileWrite, "s2", "m2", "f");
    e.after = Some(put(b"a\nB\n"));
    log.append(e).unwrap(); // 4
    checkpoint(tree(b"a\nB\n")); // 5
    rollback(5, 3); // 6
    checkpoint(tree(b"a\nb\n")); // 7
    rollback(7, 5); // 8
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    let by = |at: u64| -> Vec<(u64, String)> {
        q.blame(Point::Lsn(Lsn(at)), "f")
            .unwrap()
            .iter()
            .map(|b| (b.lsn.0, b.session.clone()))
            .collect()
    };
    let (s1, s2) = ("s1".to_string(), "s2".to_string());
    assert_eq!(by(6), [(2, s1.clone()), (2, s1.clone())], "the undo");
    assert_eq!(by(6), by(3), "the same contents, the same answer");
    assert_eq!(by(8), [(2, s1), (4, s2)], "the redo");
    assert_eq!(by(8), by(5));
}

/// Trial 16 D2, D3: lines are split at `\n` only, so a lone `\r` stays
/// inside its line, both where blame numbers the lines and credits them
/// and in the unified diff (the diff crate's own line split ended a line
/// at a lone `\r`).
#[test]
fn a_lone_cr_stays_inside_its_line() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let m = SnapshotManifests(&blobs);
    write(&log, &blobs, "f", b"a\rb\n"); // 1
    write(&log, &blobs, "f", b"a\rc\n"); // 2: line 1 changes
    write(&log, &blobs, "f", b"a\rc\nz\n"); // 3: adds line 2
    write(&log, &blobs, "g", b"keep\nold\rtail\n"); // 4
    write(&log, &blobs, "g", b"keep\nnew\rtail\n"); // 5
    write(&log, &blobs, "h", b"x\r\ny\r\r\nend\r"); // 6
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);

    let blame = q.blame(Point::Head, "f").unwrap();
    let by: Vec<(usize, u64, &str)> = blame
        .iter()
        .map(|b| (b.line_no, b.lsn.0, b.text.as_str()))
        .collect();
    assert_eq!(by, [(1, 2, "a\rc"), (2, 3, "z")]);
    // A line's text loses its `\n` or `\r\n`, not a lone `\r`.
    let texts: Vec<String> = q
        .blame(Point::Head, "h")
        .unwrap()
        .into_iter()
        .map(|b| b.text)
        .collect();
    assert_eq!(texts, ["x", "y\r", "end\r"]);

    let d = q.diff(at(4), at(5), &[]).unwrap();
    assert_eq!(
        d[0].unified.as_deref(),
        Some("--- a/g\n+++ b/g\n@@ -1,2 +1,2 @@\n keep\n-old\rtail\n+new\rtail\n")
    );
}

/// Trial 16 D8: blame of a directory says it is one, as `show` does.
#[test]
fn blame_of_a_directory_says_it_is_one() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    let m = SnapshotManifests(&blobs);
    write(&log, &blobs, "d/a", b"1\n"); // 1
    let ix = Index::build(&log).unwrap();
    let q = Query::new(&log, &blobs, &m, &ix);
    let e = q.blame(at(1), "d").unwrap_err().to_string();
    assert!(e.contains("`d` is a directory at LSN 1, not a file"), "{e}");
    assert!(matches!(
        q.blame(at(1), "nothere"),
        Err(QueryError::NoSuchPath { .. })
    ));
}

/// A record source that counts its point reads and its sorted walks.
struct Counting<'a> {
    log: &'a MemLog,
    reads: std::cell::Cell<usize>,
    walks: std::cell::Cell<usize>,
}

impl cairn_query::source::RecordSource for Counting<'_> {
    fn head(&self) -> cairn_query::Result<cairn_query::source::Head> {
        self.log.head()
    }
    fn iter_from(
        &self,
        from: Lsn,
    ) -> Box<dyn Iterator<Item = cairn_query::Result<cairn_query::Record>> + '_> {
        self.log.iter_from(from)
    }
    fn read(&self, lsn: Lsn) -> cairn_query::Result<cairn_query::Record> {
        self.reads.set(self.reads.get() + 1);
        self.log.read(lsn)
    }
    fn read_sorted(
        &self,
        lsns: &[Lsn],
        f: &mut dyn FnMut(cairn_query::Record) -> cairn_query::Result<bool>,
    ) -> cairn_query::Result<()> {
        self.walks.set(self.walks.get() + 1);
        self.log.read_sorted(lsns, f)
    }
}

/// Regression (a history read its records one point read each, a fresh
/// walk of the log per record): `history` reads them in one sorted walk,
/// with the same answer; a path-filtered scan does too.
#[test]
fn history_reads_its_records_in_one_sorted_walk() {
    let f = fixture();
    let m = SnapshotManifests(&f.blobs);
    let ix = Index::build(&f.log).unwrap();
    // What point reads give (MemLog reads sorted lists a record at a time).
    let want = lsns(
        &Query::new(&f.log, &f.blobs, &m, &ix)
            .history("a.txt")
            .unwrap(),
    );
    assert!(want.len() >= 2, "{want:?}");
    let src = Counting {
        log: &f.log,
        reads: Default::default(),
        walks: Default::default(),
    };
    let q = Query::new(&src, &f.blobs, &m, &ix);
    let got = q.history("a.txt").unwrap();
    assert_eq!(lsns(&got), want);
    assert_eq!((src.reads.get(), src.walks.get()), (0, 1));
    let filter = Filter {
        path: Some("a.txt".into()),
        ..Filter::all()
    };
    let mut n = 0;
    q.scan(&filter, &mut |_| {
        n += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(n, want.len());
    assert_eq!(src.reads.get(), 0);
}
