//! Scanning: the stat cache (a one-file edit re-reads one file), ignore
//! files, skip counts, size limits, tracked-only checkpoints, the
//! persisted checkpoint list.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime};

use cairn_snapshot::*;
#[allow(unused_imports)]
use common::*;

/// Sets a file's mtime an hour back, so it is not "racy" for the next scan.
fn age(path: &std::path::Path) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
}

fn mem_ws(dir: &std::path::Path) -> Workspace {
    Workspace::open(
        dir,
        &dir.join(".cairn/snapshot"),
        SnapshotOptions::default(),
    )
    .unwrap()
}

#[test]
fn one_file_edit_rereads_one_file_and_writes_only_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for d in 0..5 {
        for i in 0..40 {
            let p = dir.path().join(format!("d{d}/sub/f{i}.rs"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("file {d} {i}")).unwrap();
            age(&p);
            paths.push(p);
        }
    }
    let ws = mem_ws(dir.path());
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let req = || CheckpointRequest::default();
    let c1 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    assert_eq!(c1.counts.files, 200);
    assert_eq!(c1.counts.changed, 200);

    let calls = blobs.put_calls();
    let c2 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    assert_eq!(c2.root, c1.root);
    assert_eq!(c2.counts.changed, 0);
    assert_eq!(
        blobs.put_calls() - calls,
        1,
        "nothing re-read; only the root node re-encoded"
    );

    std::fs::write(&paths[77], "edited").unwrap();
    let (calls, writes) = (blobs.put_calls(), blobs.writes());
    let c3 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    assert_eq!(c3.counts.changed, 1);
    // One file read; new blobs: that file + d1/sub + d1 + root.
    assert_eq!(blobs.put_calls() - calls, 4);
    assert_eq!(blobs.writes() - writes, 4);
}

/// A full scan takes the walk's files in path order by merging each
/// directory's run (the walking threads sort a directory's files by name)
/// rather than sorting every path. Names are chosen so that directories'
/// runs interleave in path order (`a/…` sorts after `a.b` and `a-b/…`,
/// a directory holds files and subdirectories, `x/y` sorts after `x.z`),
/// on four walking threads: a checkpoint over the warm stat cache after a
/// one-file edit changes exactly one file and gives the tree a fresh
/// store's scan gives, and an edit in the same clock tick as the scan
/// that cached it is re-read (the racy rule), never taken as unchanged.
#[test]
fn interleaved_directories_scan_in_path_order_over_a_warm_cache() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let names = [
        "a.b", "a-b/y", "a/x", "a/b/c", "a/b.c", "a/b-c/d", "a0", "x.z", "x/y", "x/y.z/q", "x/y/z",
        "x-/1", "x/0", "top",
    ];
    for n in names {
        for i in 0..12 {
            let p = dir.path().join(format!("{n}/f{i:02}"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("{n} {i}")).unwrap();
            age(&p);
            paths.push(p);
        }
        // A file beside the directory, named like it with a suffix.
        let beside = dir.path().join(format!("{n}.f"));
        std::fs::write(&beside, n).unwrap();
        age(&beside);
    }
    let open = |cache: &str| {
        let mut opts = SnapshotOptions::default();
        opts.hash_threads = 4;
        Workspace::open(dir.path(), &dir.path().join(cache), opts).unwrap()
    };
    let ws = open(".cairn/snapshot");
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let req = CheckpointRequest::default;
    let c1 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    assert_eq!(c1.counts.files, names.len() as u64 * 13);
    let c2 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    assert_eq!((c2.root, c2.counts.changed), (c1.root, 0));

    std::fs::write(&paths[40], "edited!").unwrap();
    age(&paths[40]);
    let c3 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    assert_eq!(c3.counts.changed, 1);
    let fresh = open(".cairn/fresh");
    let cf = create_checkpoint(&log, &blobs, &fresh, req()).unwrap();
    assert_eq!(cf.root, c3.root, "a warm scan's tree is a fresh scan's");

    // Same size, written right after the scan that cached it: the stat
    // may not show it, the racy rule re-reads it.
    std::fs::write(&paths[7], "X").unwrap();
    let c4 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    std::fs::write(&paths[7], "Y").unwrap();
    let c5 = create_checkpoint(&log, &blobs, &ws, req()).unwrap();
    assert_ne!(
        c5.root, c4.root,
        "an edit in the cached scan's tick is seen"
    );
    let fresh2 = open(".cairn/fresh2");
    let cf2 = create_checkpoint(&log, &blobs, &fresh2, req()).unwrap();
    assert_eq!(cf2.root, c5.root);
}

#[test]
fn damaged_stat_cache_costs_a_reread_not_a_wrong_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), "1").unwrap();
    let ws = mem_ws(dir.path());
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let c1 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    std::fs::write(
        dir.path().join(".cairn/snapshot/stat-cache.bin"),
        b"garbage",
    )
    .unwrap();
    let c2 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c1.root, c2.root);
}

#[test]
fn ignore_files_and_skip_counts() {
    let dir = tempfile::tempdir().unwrap();
    let w = |p: &str, c: &[u8]| {
        let p = dir.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    };
    w(".gitignore", b"target/\n*.tmp\n");
    w(".cairnignore", b"secret.txt\n!keep.tmp\n");
    w(".git/info/exclude", b"local-notes.md\n");
    w("target/debug/app", b"bin");
    w("x.tmp", b"t");
    w("keep.tmp", b"kept by .cairnignore");
    w("secret.txt", b"s");
    w("local-notes.md", b"n");
    w("sub/.gitignore", b"gen/\n");
    w("sub/gen/out.rs", b"g");
    w("sub/lib.rs", b"l");
    w("big.bin", &vec![7u8; 5000]);
    w("package-lock.json", b"{}");
    w(".env", b"A=1");
    let mut opts = SnapshotOptions::default();
    opts.max_file_bytes = 4096;
    let ws = Workspace::open(dir.path(), &dir.path().join(".cairn/snapshot"), opts).unwrap();
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    let m = manifest::list(&blobs, &c.root).unwrap();
    let files: Vec<&str> = m.files().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        files,
        vec![
            ".cairnignore",
            ".env",
            ".gitignore",
            "keep.tmp",
            "package-lock.json",
            "sub/.gitignore",
            "sub/lib.rs"
        ]
    );
    assert_eq!(
        c.counts.skipped.get("ignored"),
        Some(&5),
        "{:?}",
        c.counts.skipped
    );
    assert_eq!(c.counts.skipped.get("too_large"), Some(&1));
    assert_eq!(c.counts.files, 7);
    assert_eq!(c.not_captured.len(), 1, "{:?}", c.not_captured);
    // Tracked, the too-large file is still skipped once, not by the walk
    // and again as a tracked path.
    ws.track(&["big.bin"]).unwrap();
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c.counts.skipped.get("too_large"), Some(&1));
    assert_eq!(c.not_captured.len(), 1, "{:?}", c.not_captured);

    // With ignore rules off, everything but .git/.cairn is captured.
    let mut opts = SnapshotOptions::default();
    opts.follow_gitignore = false;
    let ws2 = Workspace::open(dir.path(), &dir.path().join(".cairn/snapshot2"), opts).unwrap();
    let c = create_checkpoint(&log, &blobs, &ws2, CheckpointRequest::default()).unwrap();
    let m = manifest::list(&blobs, &c.root).unwrap();
    let files: Vec<&str> = m.files().map(|(p, _)| p.as_str()).collect();
    assert_eq!(files.len(), 13, "{files:?}");
    assert_eq!(c.counts.files, 13);
    assert!(c.counts.skipped.is_empty(), "{:?}", c.counts.skipped);
}

/// Every too-large file is named, wherever it lies: the walk shares
/// subdirectories out between threads, and each thread's named paths are
/// kept, not only its counts.
#[test]
fn too_large_files_in_subdirectories_walked_by_other_threads_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big-at-root"), vec![0u8; 100]).unwrap();
    for d in ["a", "b", "c", "d/e"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
        std::fs::write(dir.path().join(d).join("big"), vec![0u8; 100]).unwrap();
        std::fs::write(dir.path().join(d).join("small"), "1").unwrap();
    }
    let mut opts = SnapshotOptions::default();
    opts.max_file_bytes = 10;
    opts.hash_threads = 4;
    let ws = Workspace::open(dir.path(), &dir.path().join(".cairn/snapshot"), opts).unwrap();
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c.counts.skipped.get("too_large"), Some(&5));
    assert_eq!(c.counts.files, 4);
    let named: Vec<&str> = c.not_captured.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(named, ["a/big", "b/big", "big-at-root", "c/big", "d/e/big"]);
    assert!(c.not_captured.iter().all(|n| n.why == "too_large"));
}

/// Trial 14 T1: a name that is not UTF-8 cannot be captured (a workspace
/// path is text), so the checkpoint names every file it leaves out for
/// that, escaped (`\xff`): one so named, and each under a directory so
/// named (an empty one is named itself), counted file by file; ignore
/// rules still apply. Before, it counted the top entries only and named
/// none.
#[test]
fn names_that_are_not_utf8_are_named_and_counted_file_by_file() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let p = |b: &[u8]| root.join(OsStr::from_bytes(b));
    std::fs::write(root.join("ok.txt"), "ok").unwrap();
    std::fs::write(root.join(".gitignore"), "*.log\nd?xff/\n").unwrap();
    std::fs::write(p(b"bad\xfename.txt"), "y").unwrap();
    std::fs::create_dir_all(p(b"dir\xff/sub")).unwrap();
    for i in 0..3 {
        let name = [b"dir\xff/f".as_slice(), i.to_string().as_bytes()].concat();
        std::fs::write(p(&name), "x").unwrap();
    }
    std::fs::write(p(b"dir\xff/sub/deep"), "x").unwrap();
    std::os::unix::fs::symlink("f0", p(b"dir\xff/link")).unwrap();
    std::fs::write(p(b"dir\xff/x.log"), "ignored").unwrap();
    std::fs::create_dir_all(p(b"empty\xe9")).unwrap();
    std::fs::write(p(b"ignored\xff.log"), "ignored").unwrap();
    // In subdirectories, which other threads walk.
    for d in ["a", "b", "c"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
        std::fs::write(root.join(d).join("fine"), "1").unwrap();
        std::fs::write(root.join(d).join("n\u{1}.x"), "1").unwrap();
        std::fs::write(root.join(d).join(OsStr::from_bytes(b"n\xc3")), "1").unwrap();
    }
    // A path spelt as one that is not UTF-8 is escaped, in an ignored
    // directory (`d?xff/`: not the name of two bytes) but tracked:
    // captured, not taken for the other.
    std::fs::create_dir_all(root.join("d\\xff")).unwrap();
    std::fs::write(root.join("d\\xff/x"), "literal").unwrap();
    std::fs::create_dir_all(p(b"d\xff")).unwrap();
    std::fs::write(p(b"d\xff/x"), "bytes").unwrap();
    let mut opts = SnapshotOptions::default();
    opts.hash_threads = 4;
    let ws = Workspace::open(root, &root.join(".cairn/snapshot"), opts).unwrap();
    ws.track(&["d\\xff/x"]).unwrap();
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    let named: Vec<&str> = c.not_captured.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(
        named,
        [
            "a/n\\xc3",
            "b/n\\xc3",
            "bad\\xfename.txt",
            "c/n\\xc3",
            "d\\xff/x",
            "dir\\xff/f0",
            "dir\\xff/f1",
            "dir\\xff/f2",
            "dir\\xff/link",
            "dir\\xff/sub/deep",
            "empty\\xe9/",
        ],
        "{:?}",
        c.counts.skipped
    );
    assert!(c.not_captured.iter().all(|n| n.why == "non_utf8_name"));
    assert_eq!(c.counts.skipped.get("non_utf8_name"), Some(&11));
    // `ignored\xff.log`, `dir\xff/x.log` and the directory `d\xff` (whose
    // tracked file is then captured).
    assert_eq!(c.counts.skipped.get("ignored"), Some(&3));
    let m = manifest::list(&blobs, &c.root).unwrap();
    let files: Vec<&str> = m.files().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        files,
        [
            ".gitignore",
            "a/fine",
            "a/n\u{1}.x",
            "b/fine",
            "b/n\u{1}.x",
            "c/fine",
            "c/n\u{1}.x",
            "d\\xff/x",
            "ok.txt",
        ]
    );
    assert_eq!(c.counts.files, 9);
}

#[test]
fn unreadable_and_special_files_are_counted() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok"), "1").unwrap();
    let locked = dir.path().join("locked");
    std::fs::write(&locked, "secret").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let ws = mem_ws(dir.path());
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    // Root can read anything; otherwise the file is counted, never silently dropped.
    if std::fs::read(&locked).is_err() {
        assert_eq!(c.counts.skipped.get("unreadable"), Some(&1));
        assert_eq!(c.counts.files, 1);
    } else {
        assert_eq!(c.counts.files, 2);
    }
}

#[test]
fn a_file_that_becomes_a_directory_counts_as_two_changes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x"), "file").unwrap();
    let ws = mem_ws(dir.path());
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    std::fs::remove_file(dir.path().join("x")).unwrap();
    std::fs::create_dir(dir.path().join("x")).unwrap();
    std::fs::write(dir.path().join("x/f"), "inside").unwrap();
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c.counts.changed, 2, "x gone as a file, x/f new");
    std::fs::remove_dir_all(dir.path().join("x")).unwrap();
    std::fs::write(dir.path().join("x"), "file again").unwrap();
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c.counts.changed, 2, "x/f gone, x new as a file");
}

#[test]
fn tracked_only_checkpoints_patch_the_previous_tree() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
    std::fs::write(dir.path().join("src/deep/a.rs"), "a1").unwrap();
    std::fs::write(dir.path().join("b.rs"), "b1").unwrap();
    let ws = mem_ws(dir.path());
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let tracked = |_: ()| CheckpointRequest {
        scan: ScanMode::TrackedOnly,
        ..Default::default()
    };
    let c1 = create_checkpoint(&log, &blobs, &ws, tracked(())).unwrap(); // no base yet: full
    assert_eq!(c1.counts.files, 2);

    ws.track(&["src/deep/a.rs", "new/dir/c.rs"]).unwrap();
    std::fs::write(dir.path().join("src/deep/a.rs"), "a2").unwrap();
    std::fs::write(
        dir.path().join("b.rs"),
        "b2 (not tracked: a tracked-only checkpoint misses it)",
    )
    .unwrap();
    let c2 = create_checkpoint(&log, &blobs, &ws, tracked(())).unwrap();
    assert_eq!(c2.counts.changed, 1);
    assert_eq!(c2.counts.files, 2);
    let m2 = manifest::list(&blobs, &c2.root).unwrap();
    assert_eq!(blobs.get(&m2.entries["src/deep/a.rs"].hash).unwrap(), b"a2");
    assert_eq!(blobs.get(&m2.entries["b.rs"].hash).unwrap(), b"b1");
    assert!(m2.missing.contains("new/dir/c.rs"));

    std::fs::create_dir_all(dir.path().join("new/dir")).unwrap();
    std::fs::write(dir.path().join("new/dir/c.rs"), "c").unwrap();
    ws.track(&["new/dir/c.rs"]).unwrap();
    let c3 = create_checkpoint(&log, &blobs, &ws, tracked(())).unwrap();
    assert_eq!(c3.counts.files, 3);
    let m3 = manifest::list(&blobs, &c3.root).unwrap();
    assert!(m3.missing.is_empty());
    assert_eq!(m3.entries["new/dir"].kind, EntryKind::Dir);

    // A full checkpoint of the same state gives the same tree, except b.rs.
    std::fs::write(dir.path().join("b.rs"), "b1").unwrap();
    let c4 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c4.root, c3.root, "tracked-only and full capture agree");
}

#[test]
fn checkpoint_list_is_persisted_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), "1").unwrap();
    let ws = mem_ws(dir.path());
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let mk = |s: &str, l: &str| {
        create_checkpoint(
            &log,
            &blobs,
            &ws,
            CheckpointRequest {
                session: s.into(),
                label: Some(l.into()),
                run: Some("r1".into()),
                ..Default::default()
            },
        )
        .map(|c| CheckpointInfo { scan: None, ..c })
        .unwrap()
    };
    let a = mk("s1", "one");
    assert_eq!(list_checkpoints(&log, &ws, None).unwrap(), vec![a.clone()]);
    let b = mk("s2", "two");
    let c = mk("s1", "three");
    assert_eq!(
        list_checkpoints(&log, &ws, Some("s1")).unwrap(),
        vec![a.clone(), c.clone()]
    );
    // A long-lived handle keeps the list in memory; the file is written
    // when the handle is dropped (or after many records).
    drop(ws);
    let ws = mem_ws(dir.path());
    assert!(dir.path().join(".cairn/snapshot/checkpoints.bin").exists());
    assert_eq!(
        list_checkpoints(&log, &ws, None).unwrap(),
        vec![a.clone(), b.clone(), c.clone()]
    );
    drop(ws);
    std::fs::remove_file(dir.path().join(".cairn/snapshot/checkpoints.bin")).unwrap();
    let ws = mem_ws(dir.path());
    assert_eq!(
        list_checkpoints(&log, &ws, None).unwrap(),
        vec![a.clone(), b.clone(), c.clone()]
    );
    // A handle that lists after every record still rewrites the file now
    // and then (every 256 records folded), not only when dropped.
    assert!(!dir.path().join(".cairn/snapshot/checkpoints.bin").exists());
    for _ in 0..300 {
        log.append(&cairn_codec::Event::new(
            cairn_codec::EventKind::Prompt,
            "x",
        ))
        .unwrap();
        list_checkpoints(&log, &ws, None).unwrap();
    }
    assert!(dir.path().join(".cairn/snapshot/checkpoints.bin").exists());
    // A cache from another log (same length, different history) is rebuilt.
    let other = MemLog::new();
    for _ in 0..3 {
        other
            .append(&cairn_codec::Event::new(
                cairn_codec::EventKind::Prompt,
                "x",
            ))
            .unwrap();
    }
    assert!(list_checkpoints(&other, &ws, None).unwrap().is_empty());
    assert_eq!(
        find_checkpoint(&log, &ws, b.id).unwrap().label.as_deref(),
        Some("two")
    );
}

#[test]
fn track_is_persisted_across_handles_and_validated() {
    let dir = tempfile::tempdir().unwrap();
    let ws = mem_ws(dir.path());
    ws.track(&["a/b.rs", "./c.rs"]).unwrap();
    let abs = dir.path().canonicalize().unwrap().join("d.rs");
    ws.track(&[abs.to_str().unwrap()]).unwrap();
    let ws2 = mem_ws(dir.path());
    assert_eq!(ws2.tracked().unwrap(), vec!["a/b.rs", "c.rs", "d.rs"]);
    assert!(ws2.track(&["."]).is_err());
}

#[test]
fn a_tracked_directory_is_captured_whole_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".gitignore"), "build/\n*.o\n").unwrap();
    std::fs::create_dir_all(dir.path().join("build/obj")).unwrap();
    std::fs::write(dir.path().join("build/obj/a.o"), "o").unwrap();
    std::fs::write(dir.path().join("build/x.txt"), "x").unwrap();
    std::fs::write(dir.path().join("b.o"), "ignored, untracked").unwrap();
    let ws = mem_ws(dir.path());
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let c0 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c0.counts.files, 1, ".gitignore only");
    ws.track(&["build"]).unwrap();
    let tracked = create_checkpoint(
        &log,
        &blobs,
        &ws,
        CheckpointRequest {
            scan: ScanMode::TrackedOnly,
            ..Default::default()
        },
    )
    .unwrap();
    let full = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(full.counts.files, 3);
    assert_eq!(tracked.root, full.root);
    let m = manifest::list(&blobs, &full.root).unwrap();
    assert!(m.entries.contains_key("build/obj/a.o") && !m.entries.contains_key("b.o"));
}

/// A path under a symlink is refused at `track`, naming the link, since
/// every checkpoint would skip it (`under_symlink`).
#[test]
fn tracking_a_path_under_a_symlink_is_refused() {
    let f = fx();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), f.p("d")).unwrap();
    let e = f.ws.track(&["d/f.txt"]).unwrap_err().to_string();
    assert!(e.contains("`d` is a symlink"), "{e}");
    assert!(f.ws.tracked().unwrap().is_empty());
    f.ws.track(&["d"]).unwrap();
}

/// Trial 11 P14.21: a damaged `tracked.json` made every checkpoint fail,
/// even a full scan that does not need it.
#[test]
fn damaged_tracked_file_does_not_stop_checkpoints() {
    let f = fx();
    f.write("a.txt", "one");
    f.ws.track(&["a.txt"]).unwrap();
    f.checkpoint("c1");
    let tracked = f.p(".cairn/snapshot/tracked.json");
    std::fs::write(&tracked, b"{garbled").unwrap();
    f.write("a.txt", "two");

    // A full scan goes on, says so, and sets the damaged file aside.
    let c2 = f.checkpoint("c2");
    assert_eq!(c2.counts.changed, 1);
    let w = f.ws.take_warnings();
    assert!(w.iter().any(|w| w.contains("is damaged")), "{w:?}");
    assert!(
        w.iter().any(|w| w.contains("tracked.json.damaged")),
        "{w:?}"
    );
    assert!(!tracked.exists());
    assert!(f.p(".cairn/snapshot/tracked.json.damaged").exists());
    assert!(f.ws.take_warnings().is_empty());
    // `track` works again.
    f.ws.track(&["a.txt"]).unwrap();
    assert_eq!(f.ws.tracked().unwrap(), vec!["a.txt".to_string()]);

    // A tracked-only checkpoint falls back to a full scan: an untracked
    // change is captured.
    std::fs::write(&tracked, b"not json").unwrap();
    f.write("b.txt", "new");
    let c3 = f.checkpoint_tracked_only();
    assert_eq!(c3.counts.changed, 1);
    let w = f.ws.take_warnings();
    assert!(w.iter().any(|w| w.contains("not tracked-only")), "{w:?}");
    let m = manifest::list(&f.blobs, &c3.root).unwrap();
    assert!(m.entries.contains_key("b.txt"), "{m:?}");
}

/// A damaged `tracked.json` no longer stops `track` (which sets it aside
/// and starts afresh, with the next checkpoint a full scan, even a
/// tracked-only one, as what was dirty is unknown) or a rollback's dry run
/// (which reads it as empty and warns).
#[test]
fn damaged_tracked_file_does_not_stop_track_or_a_dry_run() {
    let f = fx();
    f.write("a.txt", "one");
    f.write("b.txt", "one");
    f.ws.track(&["a.txt"]).unwrap();
    let c1 = f.checkpoint("c1");
    let tracked = f.p(".cairn/snapshot/tracked.json");
    std::fs::write(&tracked, b"{garbled").unwrap();
    f.write("a.txt", "two");

    let dry = f.try_rollback(c1.id, &[], true).unwrap();
    assert_eq!(dry.written, vec!["a.txt".to_string()]);
    let w = f.ws.take_warnings();
    assert!(w.iter().any(|w| w.contains("this dry run")), "{w:?}");
    assert!(tracked.exists(), "a dry run changes nothing");

    f.ws.track(&["a.txt"]).unwrap();
    let w = f.ws.take_warnings();
    assert!(
        w.iter()
            .any(|w| w.contains("tracked.json.damaged") && w.contains("scans the whole workspace")),
        "{w:?}"
    );
    assert_eq!(f.ws.tracked().unwrap(), vec!["a.txt".to_string()]);
    // A change `track` never heard of, made before the damage was found:
    // the tracked-only checkpoint after it still captures it.
    f.write("b.txt", "changed");
    let c2 = f.checkpoint_tracked_only();
    let m = manifest::list(&f.blobs, &c2.root).unwrap();
    let b = m.entries.get("b.txt").unwrap().hash;
    assert_eq!(f.blobs.get(&b).unwrap(), b"changed");
    // That full scan ended the rescan: the next tracked-only checkpoint
    // reads only what is tracked or dirty again.
    f.write("b.txt", "unseen by a tracked-only checkpoint");
    let c3 = f.checkpoint_tracked_only();
    assert_eq!(c3.root, c2.root);
}

/// Trial 11 P14.23: a regular file named `.cairn` in a subdirectory was
/// skipped as a nested store; only a directory of that name is one.
#[test]
fn a_file_named_cairn_is_captured_a_nested_store_is_not() {
    let f = fx();
    f.write("sub/.cairn", "data");
    f.write("other/.cairn/log/1.seg", "a nested store");
    let c1 = f.checkpoint("c1");
    let m = manifest::list(&f.blobs, &c1.root).unwrap();
    assert!(m.entries.contains_key("sub/.cairn"), "{m:?}");
    assert!(
        !m.entries.keys().any(|p| p.starts_with("other/.cairn")),
        "{m:?}"
    );
    assert!(!m.entries.keys().any(|p| p.starts_with(".cairn")), "{m:?}");
    assert_eq!(c1.counts.skipped.get("nested_store"), Some(&1));
}

/// A large file is stored from the handle the scan opened without
/// following symlinks, never by opening its path again: swapped for a
/// link to a file outside the workspace after it was opened, what is
/// stored is still what the handle reads (the workspace file), for every
/// blob sink a checkpoint uses.
#[test]
fn a_file_is_stored_from_its_open_handle_not_its_path_again() {
    let tmp = tempfile::tempdir().unwrap();
    let inside = tmp.path().join("big.bin");
    let outside = tmp.path().join("secret");
    let ours: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&outside, b"not for the store").unwrap();
    let store = cairn_engine::blob::BlobStore::open(
        std::sync::Arc::new(cairn_engine::RealVfs),
        &tmp.path().join("blobs"),
        cairn_engine::blob::BlobOptions::default(),
    )
    .unwrap();
    let mem = MemBlobs::new();
    let sinks: [&dyn BlobAccess; 3] = [&store, &mem, &cairn_snapshot::blobs::HashOnly(&mem)];
    for sink in sinks {
        std::fs::write(&inside, &ours).unwrap();
        let mut f = std::fs::File::open(&inside).unwrap();
        std::fs::remove_file(&inside).unwrap();
        std::os::unix::fs::symlink(&outside, &inside).unwrap();
        let (hash, len) = sink.put_open_file(&mut f, &inside).unwrap();
        assert_eq!(
            (hash, len),
            (cairn_codec::BlobHash::of(&ours), ours.len() as u64)
        );
        std::fs::remove_file(&inside).unwrap();
    }
}

/// A big file edited in the middle is stored again only around the edit:
/// its content-defined chunks there are new, every other chunk is found
/// already stored, so the store grows by about the edit (at most the
/// chunks it touches), not by the file. Reading the whole file again to
/// find them is what a full scan does (benches/scripts/big_files.sh
/// measures it at 1 GiB through the command line). A rollback puts the
/// old bytes back exactly from the shared chunks.
#[test]
fn a_big_file_edited_in_the_middle_stores_only_the_chunks_around_it() {
    use cairn_engine::blob::options::CHUNK_MAX_BYTES;
    use std::os::unix::fs::FileExt;
    const FILE: usize = 48 << 20;
    const EDIT: usize = 1 << 20;
    fn noise(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }
    let f = fx();
    let original = noise(7, FILE);
    std::fs::write(f.p("big.bin"), &original).unwrap();
    age(&f.p("big.bin"));
    let c1 = f.checkpoint("c1");
    let before = f.blobs.stats().stored_bytes;
    // Incompressible: the first checkpoint stores the whole file.
    assert!(before >= FILE as u64, "{before}");

    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(f.p("big.bin"))
        .unwrap();
    file.write_all_at(&noise(11, EDIT), (FILE / 2) as u64)
        .unwrap();
    drop(file);
    age(&f.p("big.bin"));
    let c2 = f.checkpoint("c2");
    assert_eq!(c2.counts.changed, 1);
    let grew = f.blobs.stats().stored_bytes - before;
    // The edit's bytes are new and incompressible: stored. Beyond them,
    // at most the two chunks the edit's ends fall in (each at most
    // CHUNK_MAX_BYTES), and the chunk list; never the other ~40 MiB.
    let bound = EDIT as u64 + 2 * u64::from(CHUNK_MAX_BYTES) + 64 * 1024;
    assert!(grew >= EDIT as u64, "grew {grew}");
    assert!(grew <= bound, "grew {grew}, more than {bound}");

    f.rollback(c1.id);
    assert!(std::fs::read(f.p("big.bin")).unwrap() == original);
}

/// Counts the files a checkpoint opens to read (`put_open_file`, and
/// `put` of file contents read into memory), over an in-memory store.
struct CountingBlobs {
    inner: MemBlobs,
    puts_of_nothing: std::sync::atomic::AtomicUsize,
}

impl cairn_snapshot::blobs::BlobRead for CountingBlobs {
    fn get(&self, hash: &cairn_codec::BlobHash) -> cairn_snapshot::Result<Vec<u8>> {
        self.inner.get(hash)
    }
}

impl BlobAccess for CountingBlobs {
    fn put(&self, bytes: &[u8]) -> cairn_snapshot::Result<cairn_codec::BlobHash> {
        if bytes.is_empty() {
            self.puts_of_nothing
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.put(bytes)
    }
    fn put_open_file(
        &self,
        file: &mut std::fs::File,
        path: &std::path::Path,
    ) -> cairn_snapshot::Result<(cairn_codec::BlobHash, u64)> {
        self.inner.put_open_file(file, path)
    }
    fn contains(&self, hash: &cairn_codec::BlobHash) -> cairn_snapshot::Result<bool> {
        self.inner.contains(hash)
    }
    fn sync(&self) -> cairn_snapshot::Result<()> {
        self.inner.sync()
    }
    fn gc(
        &self,
        live: &std::collections::HashSet<cairn_codec::BlobHash>,
        mode: GcMode,
    ) -> cairn_snapshot::Result<GcSummary> {
        self.inner.gc(live, mode)
    }
}

/// Empty files whose scan stat proves them empty (size 0, an mtime older
/// than the scan's clock and the racy window) are not opened and read:
/// the empty blob is stored once, not once per file (a tree of 1,000,000
/// empty files spent most of its first checkpoint opening them). A file
/// emptied or created just now is still read (racy), and one written
/// after the checkpoint is seen by the next: its stat no longer matches.
#[test]
fn empty_files_are_captured_from_their_stat_without_reading() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..100 {
        let p = dir.path().join(format!("e{i:03}"));
        std::fs::write(&p, "").unwrap();
        age(&p);
    }
    std::fs::write(dir.path().join("fresh"), "").unwrap();
    let ws = mem_ws(dir.path());
    let log = MemLog::new();
    let blobs = CountingBlobs {
        inner: MemBlobs::new(),
        puts_of_nothing: Default::default(),
    };
    let c1 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c1.counts.files, 101);
    // Once for the hundred old ones, once for the fresh (racy) one read.
    assert_eq!(
        blobs
            .puts_of_nothing
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    let m = manifest::list(&blobs, &c1.root).unwrap();
    let e = m.entries["e042"];
    assert_eq!((e.kind, e.size), (EntryKind::File, 0));
    assert_eq!(e.hash, cairn_codec::BlobHash::of(b""));
    assert!(blobs.contains(&e.hash).unwrap());

    // Written right after, in the same clock tick or not: read again.
    std::fs::write(dir.path().join("e042"), "now").unwrap();
    let c2 = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    assert_eq!(c2.counts.changed, 1);
    let m = manifest::list(&blobs, &c2.root).unwrap();
    assert_eq!(m.entries["e042"].hash, cairn_codec::BlobHash::of(b"now"));
}
