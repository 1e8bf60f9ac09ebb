//! The library as an embedder meets it: the `Store` handle, sessions, the
//! in-memory store and the commit protocol.
#![allow(clippy::unwrap_used)]

mod common;

use cairn::Filter;
use cairn::Format;
use cairn::{BlobHash, Error, EventKind, Store};

#[test]
fn in_memory_store_records_queries_and_exports() {
    let store = Store::in_memory().unwrap();
    let s = store.session("thread-1").with_agent("a").with_model("m");
    s.prompt("hello").unwrap();
    let mut e = s.event(EventKind::FileWrite);
    e.path = Some("x.txt".into());
    e.after = Some(store.put_blob(b"contents\n").unwrap());
    s.record(&e).unwrap();
    assert_eq!(store.head().last_lsn.0, 2);
    let listed = store
        .query(|q| {
            q.list(&Filter {
                kind: Some(EventKind::FileWrite),
                ..Filter::all()
            })
        })
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].event.model.as_deref(), Some("m"));
    let bytes = store
        .query(|q| q.file_at("head".parse().unwrap(), "x.txt"))
        .unwrap();
    assert_eq!(bytes, b"contents\n");
    let mut out = Vec::new();
    store
        .export(&Filter::all(), Format::Jsonl, &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.contains("\"kind\":\"file.write\""));
    // No workspace: checkpoints are a clear error, not a panic.
    let err = s.checkpoint("x").unwrap_err();
    assert!(matches!(err, Error::NoWorkspace), "{err}");
}

#[test]
fn in_memory_store_can_checkpoint_a_real_workspace_without_writing_into_it() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.txt"), "one\n").unwrap();
    let store = Store::builder()
        .in_memory()
        .workspace(tmp.path())
        .open()
        .unwrap();
    let s = store.session("t");
    let c = s.checkpoint("start").unwrap();
    std::fs::write(tmp.path().join("a.txt"), "two\n").unwrap();
    s.rollback(c.id).unwrap();
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(
        !tmp.path().join(".cairn").exists(),
        "an in-memory store writes no .cairn"
    );
}

#[test]
fn a_record_naming_a_missing_blob_is_refused() {
    let store = Store::in_memory().unwrap();
    let mut e = store.session("s").event(EventKind::FileWrite);
    e.path = Some("a.txt".into());
    e.after = Some(BlobHash::of(b"never stored"));
    let err = store.append(&e).unwrap_err().to_string();
    assert!(
        err.contains("not in the store") && err.contains("put_blob"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn.0, 0, "nothing was appended");
}

#[test]
fn a_file_event_must_name_a_workspace_relative_path() {
    let store = Store::in_memory().unwrap();
    let s = store.session("s");
    let nameless = s.event(EventKind::FileDelete);
    let err = store.append(&nameless).unwrap_err().to_string();
    assert!(
        err.contains("missing field `path`") && err.contains("file.delete"),
        "{err}"
    );
    let mut itself = s.event(EventKind::FileWrite).with_path("src/..");
    let err = store
        .append_batch(&[itself.clone()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("names the workspace itself"), "{err}");
    itself.path = Some(String::new());
    let err = s.record(&itself).unwrap_err().to_string();
    assert!(err.contains("is empty"), "{err}");
    assert_eq!(store.head().last_lsn.0, 0, "nothing was appended");
    // Paths outside the workspace are kept as given: history only.
    for outside in ["../elsewhere/x.rs", "/home/u/x.rs"] {
        let e = s.event(EventKind::FileWrite).with_path(outside);
        let lsn = store.append(&e).unwrap();
        assert_eq!(
            store.record(lsn).unwrap().event.path.as_deref(),
            Some(outside)
        );
    }
    store
        .append(&s.event(EventKind::FileDelete).with_path("src/x.rs"))
        .unwrap();
    assert_eq!(store.head().last_lsn.0, 3);
}

#[test]
fn session_writes_are_tracked_recorded_and_confined_to_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("t");
    s.write_file("src/new.rs", b"fn f() {}\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("src/new.rs")).unwrap(),
        "fn f() {}\n"
    );
    let recs = store.query(|q| q.history("src/new.rs")).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].event.kind, EventKind::FileCreate);
    assert_eq!(
        store.blob(&recs[0].event.after.unwrap()).unwrap(),
        b"fn f() {}\n"
    );
    s.write_file("src/new.rs", b"fn f() {}\nfn g() {}\n")
        .unwrap();
    let last = store
        .query(|q| q.history("src/new.rs"))
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.event.kind, EventKind::FileWrite);
    assert_eq!(last.event.diff_stats.unwrap().lines_added, 1);
}

/// A file the agent creates gets the mode any program would give it (not a
/// private temp file's 0600); a file it rewrites keeps its mode; no temp
/// file is left behind.
#[cfg(unix)]
#[test]
fn session_writes_keep_modes_and_leave_no_temp_files() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("t");
    let mode = |p: &str| {
        std::fs::metadata(tmp.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    std::fs::write(tmp.path().join("plain.txt"), b"made by std\n").unwrap();
    s.write_file("made.txt", b"made by cairn\n").unwrap();
    assert_eq!(mode("made.txt"), mode("plain.txt"), "umask-derived mode");
    std::fs::write(tmp.path().join("run.sh"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        tmp.path().join("run.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    s.write_file("run.sh", b"#!/bin/sh\necho hi\n").unwrap();
    assert_eq!(mode("run.sh"), 0o750, "a rewritten file keeps its mode");
    let mut names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".cairn", "made.txt", "plain.txt", "run.sh"]);
}

#[test]
fn reopening_keeps_everything_and_continues_the_sequence() {
    let tmp = tempfile::tempdir().unwrap();
    let head = {
        let store = Store::open(tmp.path()).unwrap();
        store.session("s").prompt("one").unwrap();
        store.session("s").reply("two").unwrap();
        let h = store.head();
        store.close().unwrap();
        h
    };
    let store = Store::open(tmp.path()).unwrap();
    assert_eq!(store.head(), head);
    let lsn = store.session("s").prompt("three").unwrap();
    assert_eq!(lsn.0, 3);
    assert!(store.verify(Some(head.chain)).unwrap().is_ok());
}

#[test]
fn an_unwritable_workspace_names_the_in_memory_option() {
    let err = Store::open("/proc/cairn-cannot-live-here")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/proc/cairn-cannot-live-here"), "{err}");
}

#[test]
fn a_pinned_head_not_in_history_is_reported() {
    let store = Store::in_memory().unwrap();
    store.session("s").prompt("one").unwrap();
    let pinned = store.head().chain;
    store.session("s").prompt("two").unwrap();
    let found = store.verify(Some(pinned)).unwrap();
    assert_eq!(found.pinned, Some((pinned, Some(cairn::Lsn(1)))));
    assert!(found.is_ok());
    let foreign = cairn::ChainHash([7; 32]);
    let report = store.verify(Some(foreign)).unwrap();
    assert_eq!(report.pinned, Some((foreign, None)));
    assert!(
        !report.is_ok(),
        "a head the history never reached means truncation or rewriting"
    );
}

#[test]
fn a_point_whose_checkpoint_retention_discarded_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("s");
    std::fs::write(tmp.path().join("a.txt"), "one\n").unwrap();
    let old = s.checkpoint("one").unwrap();
    std::fs::write(tmp.path().join("a.txt"), "two\n").unwrap();
    s.checkpoint("two").unwrap();
    let report = store
        .gc(&cairn::RetentionPolicy {
            keep_per_session: Some(1),
            max_bytes: None,
        })
        .unwrap();
    assert!(!report.discarded.is_empty(), "{report:?}");
    let at_old: cairn::Point = format!("{}", old.id).parse().unwrap();
    let err = store
        .query(|q| q.file_at(at_old, "a.txt"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("checkpoint {} was discarded at LSN", old.id))
            && err.contains("(by retention)"),
        "{err}"
    );
}

/// T13-N4 (the trial's repro): gc discarded c1, whose files a later
/// rollback restored, but collected its application state, so `file_at`
/// worked while `rollback` failed saying its files were gone. gc keeps the
/// state with the tree: the rollback works and hands the state back.
#[test]
fn a_restored_discarded_checkpoint_with_state_can_be_rolled_back_to_after_gc() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let store = Store::open(ws).unwrap();
    let c1 = common::restored_checkpoint_with_state(&store, ws);
    let s = store.session("t");
    let report = store
        .gc(&cairn::RetentionPolicy {
            keep_per_session: Some(2),
            max_bytes: None,
        })
        .unwrap();
    assert!(report.discarded.contains(&c1), "{report:?}");
    let at_c1 = cairn::Point::Checkpoint(c1);
    assert_eq!(
        store.query(|q| q.file_at(at_c1, "a.txt")).unwrap(),
        b"one\n"
    );
    std::fs::write(ws.join("a.txt"), "three\n").unwrap();
    let back = s.rollback(c1).unwrap();
    assert_eq!(back.state.as_deref(), Some(&b"epoch 1"[..]));
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
}

/// T13-N3: `Store::gc` leaves an evicted checkpoint's blobs in a pack
/// mostly live (and counts them); `Store::gc_compact` removes them, so its
/// files can no longer be read, and keeps what is still referenced.
#[test]
fn gc_compact_removes_what_an_ordinary_gc_leaves() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let store = Store::open(ws).unwrap();
    let s = store.session("s");
    let keep: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(ws.join("keep.bin"), &keep).unwrap();
    std::fs::write(ws.join("secret.txt"), "hunter2 ".repeat(100)).unwrap();
    let c1 = s.checkpoint("one").unwrap();
    std::fs::remove_file(ws.join("secret.txt")).unwrap();
    let c2 = s.checkpoint("two").unwrap();
    let one = cairn::RetentionPolicy {
        keep_per_session: Some(1),
        max_bytes: None,
    };
    let r = store.gc(&one).unwrap();
    assert_eq!(r.discarded, vec![c1.id], "{r:?}");
    assert!(r.gc.left().blobs > 0, "{r:?}");
    let at_c1 = cairn::Point::Checkpoint(c1.id);
    assert!(store.query(|q| q.file_at(at_c1, "secret.txt")).is_ok());
    let r = store.gc_compact(&one).unwrap();
    assert_eq!(r.gc.left().blobs, 0, "{r:?}");
    assert!(r.gc.removed_blobs > 0, "{r:?}");
    let err = store
        .query(|q| q.file_at(at_c1, "secret.txt"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("was discarded at LSN"), "{err}");
    let at_c2 = cairn::Point::Checkpoint(c2.id);
    assert_eq!(store.query(|q| q.file_at(at_c2, "keep.bin")).unwrap(), keep);
}

#[test]
fn the_head_stays_readable_after_retention_evicts_a_rollbacks_target() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("s");
    std::fs::write(tmp.path().join("a.txt"), "old\n").unwrap();
    let old = s.checkpoint("old").unwrap();
    std::fs::write(tmp.path().join("a.txt"), "new\n").unwrap();
    s.checkpoint("new").unwrap();
    s.rollback_paths(old.id, &["a.txt"]).unwrap();
    let report = store
        .gc(&cairn::RetentionPolicy {
            keep_per_session: Some(1),
            max_bytes: None,
        })
        .unwrap();
    assert!(report.discarded.contains(&old.id), "{report:?}");
    let head: cairn::Point = "head".parse().unwrap();
    let bytes = store.query(|q| q.file_at(head, "a.txt")).unwrap();
    assert_eq!(bytes, b"old\n");
}

#[test]
fn a_blob_put_for_a_record_not_yet_appended_survives_gc() {
    let tmp = tempfile::tempdir().unwrap();
    let none = cairn::RetentionPolicy::default();
    let (kept, orphan) = {
        let store = Store::open(tmp.path()).unwrap();
        let kept = store.put_blob(b"the new contents\n").unwrap();
        let orphan = store.put_blob(b"never named by a record\n").unwrap();
        // Another thread's gc runs between this thread's put and its append.
        store.gc(&none).unwrap();
        let mut e = store.session("s").event(EventKind::FileWrite);
        e.path = Some("a.txt".into());
        e.after = Some(kept);
        store.append(&e).unwrap();
        store.gc(&none).unwrap();
        assert_eq!(store.blob(&kept).unwrap(), b"the new contents\n");
        assert!(
            store.blob(&orphan).is_ok(),
            "kept while this handle may still name it"
        );
        (kept, orphan)
    };
    // A new handle knows only what records name.
    let store = Store::open(tmp.path()).unwrap();
    store.gc(&none).unwrap();
    assert!(store.blob(&kept).is_ok());
    assert!(
        store.blob(&orphan).is_err(),
        "an orphan is collected in the end"
    );
}

#[test]
fn threads_checkpointing_and_collecting_at_once_all_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (store, errors) = (&store, &errors);
                sc.spawn(move || {
                    let s = store.session(format!("t{t}"));
                    for i in 0..25 {
                        let r = s
                            .write_file(
                                &format!("t{t}/f{}.txt", i % 3),
                                format!("{t} {i}\n").as_bytes(),
                            )
                            .and_then(|_| s.checkpoint(&format!("{t}.{i}")).map(|_| ()));
                        if let Err(e) = r {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("thread {t} step {i}: {e}"));
                        }
                    }
                })
            })
            .collect();
        let (store, errors, done) = (&store, &errors, &done);
        sc.spawn(move || {
            let policy = cairn::RetentionPolicy {
                keep_per_session: Some(2),
                max_bytes: None,
            };
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Err(e) = store.gc(&policy) {
                    errors.lock().unwrap().push(format!("gc: {e}"));
                }
            }
        });
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let errors = errors.into_inner().unwrap();
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(store.verify(None).unwrap().is_ok());
    let head: cairn::Point = "head".parse().unwrap();
    for t in 0..4 {
        let bytes = store
            .query(|q| q.file_at(head, &format!("t{t}/f0.txt")))
            .unwrap();
        assert_eq!(bytes, format!("{t} 24\n").as_bytes());
    }
}

/// The paths of the tree at head.
fn head_paths(store: &Store) -> Vec<String> {
    let head: cairn::Point = "head".parse().unwrap();
    store
        .query(|q| q.tree_at(head))
        .unwrap()
        .into_keys()
        .collect()
}

#[test]
fn a_store_inside_its_workspace_is_never_captured_or_rolled_back() {
    // Three ways a store lies inside the tree it checkpoints: in a
    // subdirectory (`sub/.cairn`), under another name, and a nested
    // workspace's own `.cairn`. A rollback used to restore the store's
    // files from the checkpoint, wiping every record made since.
    for store_rel in ["sub/.cairn", "state/history", ".cairn"] {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        std::fs::create_dir(ws.join("inner")).unwrap();
        let nested = Store::open(ws.join("inner")).unwrap();
        nested.session("n").prompt("inner before").unwrap();
        let store = Store::builder()
            .workspace(ws)
            .store_dir(ws.join(store_rel))
            .open()
            .unwrap();
        let s = store.session("s");
        let c = s.checkpoint("one").unwrap();
        assert_eq!(
            c.counts.skipped.get("nested_store"),
            Some(&1),
            "{store_rel}: {c:?}"
        );
        assert_eq!(c.counts.skipped.get("excluded"), None, "{store_rel}: {c:?}");
        assert_eq!(head_paths(&store), ["a.txt"], "{store_rel}");
        s.prompt("important").unwrap();
        nested.session("n").prompt("inner after").unwrap();
        std::fs::write(ws.join("a.txt"), "two\n").unwrap();
        s.rollback(c.id).unwrap();
        assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
        let texts = |st: &Store| {
            st.query(|q| q.list(&Filter::default()))
                .unwrap()
                .into_iter()
                .filter_map(|r| r.event.text)
                .collect::<Vec<_>>()
        };
        assert!(
            texts(&store).contains(&"important".to_string()),
            "{store_rel}"
        );
        assert_eq!(
            texts(&nested),
            ["inner before", "inner after"],
            "{store_rel}"
        );
        assert!(store.verify(None).unwrap().is_ok());
    }
}

#[test]
fn a_rollback_across_a_file_and_directory_swap_lists_each_path_once() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::write(ws.join("f2d"), "a file\n").unwrap();
    std::fs::create_dir(ws.join("d2f")).unwrap();
    std::fs::write(ws.join("d2f/inner"), "x\n").unwrap();
    let store = Store::open(ws).unwrap();
    let s = store.session("s");
    let c = s.checkpoint("before").unwrap();
    std::fs::remove_file(ws.join("f2d")).unwrap();
    std::fs::create_dir(ws.join("f2d")).unwrap();
    std::fs::write(ws.join("f2d/new"), "y\n").unwrap();
    std::fs::remove_dir_all(ws.join("d2f")).unwrap();
    std::fs::write(ws.join("d2f"), "now a file\n").unwrap();
    s.rollback(c.id).unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("f2d")).unwrap(), "a file\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("d2f/inner")).unwrap(),
        "x\n"
    );
    let rb = store
        .query(|q| q.list(&Filter::default()))
        .unwrap()
        .into_iter()
        .rfind(|r| r.event.kind == EventKind::Rollback)
        .unwrap();
    let mut files = rb.event.files.clone();
    files.sort();
    files.dedup();
    assert_eq!(files.len(), rb.event.files.len(), "{:?}", rb.event.files);
    assert!(files.contains(&"f2d".to_string()) && files.contains(&"d2f".to_string()));
}

#[test]
fn records_must_name_checkpoints_and_parents_that_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("s");
    let c = s.checkpoint("one").unwrap();
    let prompt = s.prompt("hi").unwrap();
    let with = |kind: EventKind, f: &dyn Fn(&mut cairn::Event)| {
        let mut e = cairn::Event::new(kind, "s");
        f(&mut e);
        e
    };
    let id = |l: u64| cairn::CheckpointId(cairn::Lsn(l));
    for (e, says) in [
        (
            with(EventKind::CheckpointDiscard, &|e| {
                e.checkpoint = Some(id(999))
            }),
            "not a record of this store",
        ),
        (
            with(EventKind::CheckpointDiscard, &|e| {
                e.checkpoint = Some(id(prompt.0))
            }),
            "a prompt record, not a checkpoint",
        ),
        (
            with(EventKind::Rollback, &|e| {
                e.target = Some(c.id);
                e.source = Some(id(0));
            }),
            "field `source`",
        ),
        (
            with(EventKind::Reply, &|e| e.parents = vec![cairn::Lsn(77)]),
            "field `parents` names LSN 77",
        ),
    ] {
        let err = store.append(&e).unwrap_err().to_string();
        assert!(err.contains(says), "{err}");
    }
    // Earlier events of the same batch count.
    let head = store.head().last_lsn.0;
    let batch = [
        cairn::Event::new(EventKind::CheckpointCreate, "s"),
        with(EventKind::CheckpointDiscard, &|e| {
            e.checkpoint = Some(id(head + 1))
        }),
        with(EventKind::Reply, &|e| {
            e.parents = vec![cairn::Lsn(head + 2), c.lsn]
        }),
    ];
    store.append_batch(&batch).unwrap();
    let bad = [with(EventKind::Reply, &|e| {
        e.parents = vec![cairn::Lsn(store.head().last_lsn.0 + 1)]
    })];
    let err = store.append_batch(&bad).unwrap_err().to_string();
    assert!(err.contains("event 1 of the batch"), "{err}");
}

/// A read-only handle, opened while the writer holds the lock, lists
/// checkpoints as of the writer's last commit and plans a rollback the
/// writer would carry out; everything that would write is refused by name.
#[test]
fn a_read_only_handle_lists_checkpoints_and_plans_rollbacks_only() {
    use cairn::{CheckpointRequest, RollbackRequest};
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.txt"), "one").unwrap();
    let writer = Store::open(tmp.path()).unwrap();
    let c1 = writer.checkpoint(CheckpointRequest::default()).unwrap();
    std::fs::write(tmp.path().join("a.txt"), "two").unwrap();

    let reader = Store::builder()
        .workspace(tmp.path())
        .read_only()
        .open()
        .unwrap();
    assert!(reader.is_read_only());
    let listed = reader.checkpoints(None).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, c1.id);
    assert_eq!(reader.find_checkpoint(c1.id).unwrap().root, c1.root);

    // A checkpoint the writer takes later is seen without reopening.
    let c2 = writer.checkpoint(CheckpointRequest::default()).unwrap();
    assert_eq!(reader.checkpoints(None).unwrap().len(), 2);

    let dry = |s: &Store| {
        s.rollback(RollbackRequest {
            dry_run: true,
            session: "s".into(),
            ..RollbackRequest::new(c1.id)
        })
        .unwrap()
    };
    let planned = dry(&reader);
    assert_eq!(planned.written, vec!["a.txt".to_string()]);
    assert_eq!(planned, dry(&writer));

    let refused = reader
        .rollback(RollbackRequest {
            session: "s".into(),
            ..RollbackRequest::new(c1.id)
        })
        .unwrap_err();
    assert!(matches!(refused, Error::ReadOnly(_)), "{refused}");
    let refused = reader.track(&["a.txt"]).unwrap_err();
    assert!(matches!(refused, Error::ReadOnly(_)), "{refused}");
    let refused = reader.checkpoint(CheckpointRequest::default()).unwrap_err();
    assert!(matches!(refused, Error::ReadOnly(_)), "{refused}");
    // The caller asked for read-only: the message says so, not that some
    // other process forced it.
    let text = refused.to_string();
    assert!(
        text.contains("read-only (StoreBuilder::read_only)") && !text.contains("another process"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("a.txt")).unwrap(),
        "two"
    );
    assert_eq!(writer.checkpoints(None).unwrap().last().unwrap().id, c2.id);
}

/// A rollback of more files than its record lists (10,000) records its
/// scope and the paths it kept instead: time travel then shows a path-scoped
/// rollback's other files, and a kept file, as they were on disk, not at
/// the target.
#[test]
fn a_rollback_of_more_files_than_its_record_lists_replays_exactly() {
    use cairn::{CheckpointRequest, RollbackRequest, SnapshotOptions};
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path();
    let many = cairn::checkpoint::MAX_ROLLBACK_FILES_LISTED + 20;
    std::fs::create_dir(w.join("many")).unwrap();
    let write_many = |v: &str| {
        for i in 0..many {
            std::fs::write(w.join(format!("many/{i}.txt")), v).unwrap();
        }
    };
    write_many("v1");
    std::fs::write(w.join("other.txt"), "o1").unwrap();
    std::fs::write(w.join("data.bin"), "small").unwrap();
    let mut opts = SnapshotOptions::default();
    opts.max_file_bytes = 64;
    let store = Store::builder()
        .workspace(w)
        .snapshot_options(opts)
        .open()
        .unwrap();
    let c1 = store.checkpoint(CheckpointRequest::default()).unwrap();
    write_many("v2");
    std::fs::write(w.join("other.txt"), "o2").unwrap();
    std::fs::write(w.join("data.bin"), "x".repeat(100)).unwrap(); // too large now
    let file_at_head = |p: &str| {
        let head: cairn::Point = "head".parse().unwrap();
        store.query(|q| q.file_at(head, p)).ok()
    };
    let rollback = |paths: Vec<String>| {
        store
            .rollback(RollbackRequest {
                paths,
                session: "s".into(),
                ..RollbackRequest::new(c1.id)
            })
            .unwrap()
    };

    // Scoped to many/: other.txt is not rolled back, on disk or in replay.
    let r = rollback(vec!["many".into()]);
    assert_eq!(r.written.len(), many);
    assert_eq!(file_at_head("other.txt").as_deref(), Some(&b"o2"[..]));
    assert_eq!(file_at_head("many/7.txt").as_deref(), Some(&b"v1"[..]));

    // Whole tree: data.bin is kept (its undo point could not hold it), so
    // replay must not show c1's "small" at head.
    write_many("v3");
    let r = rollback(vec![]);
    assert_eq!(r.kept.len(), 1, "{:?}", r.kept);
    assert_eq!(std::fs::read(w.join("data.bin")).unwrap().len(), 100);
    assert_eq!(file_at_head("data.bin"), None);
    assert_eq!(file_at_head("other.txt").as_deref(), Some(&b"o1"[..]));
    assert_eq!(file_at_head("many/7.txt").as_deref(), Some(&b"v1"[..]));
    // A reopened store (its index saved and read back) agrees.
    store.close().unwrap();
    let store = Store::open(w).unwrap();
    let head: cairn::Point = "head".parse().unwrap();
    assert!(store.query(|q| q.file_at(head, "data.bin")).is_err());
}

/// `history --checkpoints` of a directory lists the checkpoints and
/// rollbacks at which anything under it changed, and no other.
#[test]
fn history_with_checkpoints_of_a_directory() {
    use cairn::{CheckpointRequest, RollbackRequest};
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path();
    std::fs::create_dir(w.join("src")).unwrap();
    std::fs::write(w.join("src/a"), "1").unwrap();
    std::fs::write(w.join("top"), "x").unwrap();
    let store = Store::open(w).unwrap();
    let cp = || store.checkpoint(CheckpointRequest::default()).unwrap().lsn;
    let c1 = cp();
    std::fs::write(w.join("src/b"), "new").unwrap();
    let c2 = cp();
    std::fs::write(w.join("top"), "y").unwrap();
    let _c3 = cp(); // nothing under src changed
    let r = store
        .rollback(RollbackRequest {
            session: "s".into(),
            ..RollbackRequest::new(cairn::CheckpointId(c1))
        })
        .unwrap();
    let lsns = |p: &str| -> Vec<u64> {
        store
            .query(|q| q.history_with_resets(p))
            .unwrap()
            .iter()
            .map(|r| r.lsn.0)
            .collect()
    };
    assert_eq!(lsns("src"), [c1.0, c2.0, r.lsn.unwrap().0]);
    assert_eq!(lsns("src/b"), [c2.0, r.lsn.unwrap().0]);
    assert!(lsns("nothing/here").is_empty());
}

/// A workspace that is the store directory, or inside it, is refused: its
/// checkpoints would capture the store, and a rollback would overwrite it.
#[test]
fn a_workspace_inside_its_store_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let st = tmp.path().join("st");
    for w in [st.clone(), st.join("sub")] {
        std::fs::create_dir_all(&w).unwrap();
        let e = Store::builder()
            .store_dir(&st)
            .workspace(&w)
            .open()
            .unwrap_err()
            .to_string();
        assert!(e.contains("would capture the store itself"), "{e}");
    }
}

/// A workspace inside another store (`cairn init` run in `.cairn`, or
/// `Store::open` of a store directory) is refused: its checkpoints would
/// capture that store's log and packs, and a rollback overwrite them. The
/// outer store is untouched and nothing is created in it.
#[test]
fn a_workspace_inside_another_store_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let outer = Store::open(tmp.path()).unwrap();
    outer.session("s").prompt("kept").unwrap();
    outer.close().unwrap();
    let store_dir = tmp.path().join(".cairn");
    for w in [store_dir.clone(), store_dir.join("log")] {
        let e = Store::open(&w).unwrap_err().to_string();
        assert!(e.contains("is the cairn store"), "{e}");
        assert!(e.contains(&format!("({})", tmp.path().display())), "{e}");
        assert!(!w.join(".cairn").exists(), "nothing created in {w:?}");
    }
    let outer = Store::open(tmp.path()).unwrap();
    assert_eq!(outer.head().last_lsn.0, 1);
    outer.close().unwrap();
}

/// A workspace path that does not exist (a typo) is an error, not a new
/// empty store; nothing is created.
#[test]
fn a_workspace_that_does_not_exist_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("porject");
    let e = Store::open(&typo).unwrap_err().to_string();
    assert!(e.contains("does not exist") && e.contains("porject"), "{e}");
    assert!(!typo.exists());
    std::fs::write(&typo, "a file").unwrap();
    let e = Store::open(&typo).unwrap_err().to_string();
    assert!(e.contains("is not a directory"), "{e}");
}

/// A second writing handle in the same process is told that this process
/// holds the lock, not "another process".
#[test]
fn a_second_handle_in_this_process_is_told_who_holds_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Store::open(tmp.path()).unwrap();
    let e = Store::open(tmp.path()).unwrap_err();
    assert!(
        matches!(&e, cairn::Error::Engine(cairn::EngineError::Locked { holder: Some(p), .. }) if *p == std::process::id()),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("another handle in this process"),
        "{e}"
    );
    first.close().unwrap();
}

/// A handle that folded nothing new into the query index does not rewrite
/// (and fsync) the index file when it closes; one that did, does.
#[test]
fn the_query_index_is_saved_only_when_it_grew() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join(".cairn/index/query.idx");
    let use_store = |append: bool| {
        let store = Store::open(tmp.path()).unwrap();
        if append {
            store.session("s").prompt("hi").unwrap();
        }
        store.query(|q| q.list(&cairn::Filter::all())).unwrap();
        store.close().unwrap();
        std::fs::metadata(&index).unwrap().modified().unwrap()
    };
    let first = use_store(true);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(use_store(false), first, "rewritten with nothing new");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_ne!(use_store(true), first, "not saved after growing");
}

/// A path outside the workspace given to `Session::write_file` is a
/// matchable snapshot error that names the path once, and writes nothing.
#[test]
fn a_session_write_outside_the_workspace_is_a_snapshot_error() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("s");
    for bad in ["../evil", "/etc/passwd", "a/../../b", ".cairn/LOCK", ""] {
        let e = s.write_file(bad, b"x").unwrap_err();
        assert!(matches!(e, Error::Snapshot(_)), "{bad}: {e:?}");
        let text = e.to_string();
        assert!(text.contains(&format!("`{bad}`")), "{bad}: {text}");
        if !bad.is_empty() {
            assert_eq!(text.matches(bad).count(), 1, "{text}");
        }
    }
    assert!(!tmp.path().parent().unwrap().join("evil").exists());
    assert_eq!(store.head().last_lsn.0, 0, "nothing recorded");
    store.close().unwrap();
}

/// Trial 13 N1: a path to `Session::write_file` not in normal form
/// (`./src/app.py`, `src//app.py`, `src/./app.py`) is the same file, and
/// the write is recorded under its normal form, with the contents it
/// replaced as `before`: before, the file was written and the record
/// refused, so the user's edit it overwrote was in no record. A write the
/// log would refuse (an empty session) leaves the file as it was.
#[test]
fn a_session_write_to_a_path_not_in_normal_form_is_recorded_as_its_normal_form() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let store = Store::open(ws).unwrap();
    let s = store.session("w");
    for (i, path) in ["./src/app.py", "src//app.py", "src/./app.py"]
        .iter()
        .enumerate()
    {
        let users = format!("the user's edit {i}\n");
        std::fs::write(ws.join("src/app.py"), &users).unwrap();
        let agents = format!("by the agent {i}\n");
        let lsn = s.write_file(path, agents.as_bytes()).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("src/app.py")).unwrap(),
            agents
        );
        let rec = store.record(lsn).unwrap();
        assert_eq!(rec.event.path.as_deref(), Some("src/app.py"), "{path}");
        let before = rec.event.before.expect("before");
        assert_eq!(store.blob(&before).unwrap(), users.as_bytes(), "{path}");
    }
    // A refused write changes nothing: here a read-only handle's (an
    // empty session, which this used to refuse, is the default one now:
    // tests/session_files.rs).
    let head = store.head().last_lsn;
    std::fs::write(ws.join("src/app.py"), "kept\n").unwrap();
    let reader = Store::builder().workspace(ws).read_only().open().unwrap();
    let e = reader
        .session("w")
        .write_file("src/app.py", b"x")
        .unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    assert_eq!(
        std::fs::read_to_string(ws.join("src/app.py")).unwrap(),
        "kept\n"
    );
    assert_eq!(store.head().last_lsn, head, "nothing recorded");
    store.close().unwrap();
}

/// The library refuses what JSON input refuses (trial 12 N7): an empty
/// session and a time outside what an ISO-8601 line can say, so the
/// store's export always imports back. (A session handle made with an
/// empty id records into the default session instead: trial 15 U5.)
#[test]
fn append_refuses_an_empty_session_and_a_time_out_of_range() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let nameless = cairn::Event::new(cairn::EventKind::Prompt, "");
    let e = store.append(&nameless).unwrap_err();
    assert!(matches!(e, Error::InvalidEvent(_)), "{e:?}");
    assert!(e.to_string().contains("`session` must not be empty"), "{e}");
    for ms in [i64::MAX, i64::MIN] {
        let mut ev = cairn::Event::new(cairn::EventKind::Prompt, "s");
        ev.ts = cairn::Timestamp(ms);
        let e = store.append(&ev).unwrap_err().to_string();
        assert!(e.contains("field `ts`") && e.contains("outside"), "{e}");
        let e = store.append_batch(&[ev]).unwrap_err().to_string();
        assert!(e.contains("field `ts`"), "{e}");
    }
    assert_eq!(store.head().last_lsn.0, 0, "nothing recorded");
    store.close().unwrap();
}

/// A record by its LSN, through the query index.
fn record_at(store: &Store, lsn: cairn::Lsn) -> cairn::Event {
    store
        .query(|q| q.list(&Filter::all()))
        .unwrap()
        .into_iter()
        .find(|r| r.lsn == lsn)
        .unwrap()
        .event
}

/// Trial 13 N6 and N8: a rollback through a handle with a run, phase,
/// agent and model records them on its `rollback` record and on its undo
/// point, whole-tree and path-scoped alike, so `--run` finds the rollback
/// that changed that run's files.
#[test]
fn a_rollback_and_its_undo_point_carry_the_handles_run_phase_agent_and_model() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.txt"), "one\n").unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store
        .session("t")
        .with_run("run-1")
        .with_phase("edit")
        .with_agent("coder")
        .with_model("model-x");
    let c = s.checkpoint("start").unwrap();
    let stamp = |e: &cairn::Event| {
        (
            e.run.clone(),
            e.phase.clone(),
            e.agent.clone(),
            e.model.clone(),
        )
    };
    let want = (
        Some("run-1".to_string()),
        Some("edit".to_string()),
        Some("coder".to_string()),
        Some("model-x".to_string()),
    );
    let whole = |r: &cairn::RollbackReport| (r.lsn.unwrap(), r.source.unwrap());
    std::fs::write(tmp.path().join("a.txt"), "two\n").unwrap();
    let r1 = whole(&s.rollback(c.id).unwrap());
    std::fs::write(tmp.path().join("a.txt"), "three\n").unwrap();
    let r2 = whole(&s.rollback_paths(c.id, &["a.txt"]).unwrap());
    for (lsn, undo) in [r1, r2] {
        let rec = record_at(&store, lsn);
        assert_eq!(rec.kind, EventKind::Rollback);
        assert_eq!(stamp(&rec), want, "the rollback record");
        let u = store.find_checkpoint(undo).unwrap();
        assert_eq!(
            (u.run, u.phase, u.agent, u.model),
            want.clone(),
            "its undo point"
        );
        assert_eq!(stamp(&record_at(&store, undo.0)), want);
    }
    let of_run: Vec<EventKind> = store
        .query(|q| {
            q.list(&Filter {
                run: Some("run-1".into()),
                ..Filter::all()
            })
        })
        .unwrap()
        .iter()
        .map(|r| r.event.kind)
        .collect();
    assert_eq!(
        of_run.iter().filter(|k| **k == EventKind::Rollback).count(),
        2,
        "{of_run:?}"
    );
    assert_eq!(of_run.len(), 5, "the start, two undo points, two rollbacks");
    store.close().unwrap();
}

/// Trial 13 N8: a checkpoint through a handle with an agent and model
/// records them, lists them, and blame credits the lines it captured (a
/// shell edit no file event reported) to that model.
#[test]
fn checkpoints_record_the_handles_agent_and_model_and_blame_names_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("t").with_agent("coder").with_model("model-x");
    s.before_turn(1).unwrap();
    std::fs::write(tmp.path().join("a.txt"), "written by a shell command\n").unwrap();
    let c = s.after_turn(1).unwrap();
    assert_eq!(c.agent.as_deref(), Some("coder"));
    assert_eq!(c.model.as_deref(), Some("model-x"));
    let rec = record_at(&store, c.lsn);
    assert_eq!(rec.agent.as_deref(), Some("coder"));
    assert_eq!(rec.model.as_deref(), Some("model-x"));
    let listed = store.checkpoints(Some("t")).unwrap();
    assert_eq!(listed[0].model.as_deref(), Some("model-x"));
    let blame = store
        .query(|q| q.blame(cairn::Point::Head, "a.txt"))
        .unwrap();
    assert_eq!(blame[0].lsn, c.lsn);
    assert_eq!(blame[0].model.as_deref(), Some("model-x"));
    assert!(!blame[0].before_history);
    store.close().unwrap();
}

/// Trial 13 N7: the state given for a rollback's undo point comes back
/// when the rollback is undone, as the target's state came back when it
/// was made; a rollback given none leaves its undo point without one.
#[test]
fn undoing_a_rollback_hands_back_the_state_given_for_its_undo_point() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.txt"), "turn 1\n").unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("t");
    let c1 = s
        .checkpoint_with("epoch 1", cairn::ScanMode::Full, Some(b"epoch 1".to_vec()))
        .unwrap();
    std::fs::write(tmp.path().join("a.txt"), "turn 2\n").unwrap();
    let back = s
        .rollback_with_state(c1.id, Some(b"epoch 2".to_vec()))
        .unwrap();
    assert_eq!(back.state.as_deref(), Some(&b"epoch 1"[..]));
    assert_eq!(back.state_hash, c1.state);
    let undo = back.source.unwrap();
    let undo_state = store.find_checkpoint(undo).unwrap().state.unwrap();
    assert_eq!(store.blob(&undo_state).unwrap(), b"epoch 2");
    let redo = s.rollback(undo).unwrap();
    assert_eq!(redo.state.as_deref(), Some(&b"epoch 2"[..]));
    assert_eq!(redo.state_hash, Some(undo_state));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("a.txt")).unwrap(),
        "turn 2\n"
    );
    // `rollback` gave no state: its undo point has none.
    let plain = store.find_checkpoint(redo.source.unwrap()).unwrap();
    assert_eq!(plain.state, None);
    // Through the request, as `Store::rollback` takes it.
    let req = cairn::RollbackRequest {
        state: Some(b"epoch 3".to_vec()),
        ..s.rollback_request(c1.id)
    };
    let third = store.rollback(req).unwrap();
    let st = store.find_checkpoint(third.source.unwrap()).unwrap().state;
    assert_eq!(store.blob(&st.unwrap()).unwrap(), b"epoch 3");
    store.close().unwrap();
}

/// Trial 13 N9: the safe points MISSION names each have a helper that
/// writes a clear label, and `safe_point` gives any of them a state.
#[test]
fn safe_points_are_labelled_and_carry_their_state() {
    use cairn::SafePoint;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(".gitignore"), "gen/\n").unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("t").with_phase("plan");
    let label = |c: &cairn::CheckpointInfo| c.label.clone().unwrap();

    let start = s.phase_start("edit").unwrap();
    assert_eq!(label(&start), "Start of phase edit");
    assert_eq!(start.phase.as_deref(), Some("edit"), "the phase it starts");
    assert_eq!(label(&s.before_turn(1).unwrap()), "Before turn 1");
    assert_eq!(s.before_turn(1).unwrap().phase.as_deref(), Some("plan"));

    // Before a write to a path that does not exist yet, and is ignored:
    // tracked, so a rollback to it deletes what the write created.
    let before = s.before_write("./gen//out.rs").unwrap();
    assert_eq!(label(&before), "Before writing gen/out.rs");
    std::fs::create_dir(tmp.path().join("gen")).unwrap();
    std::fs::write(tmp.path().join("gen/out.rs"), "generated\n").unwrap();
    let tool = s.after_tool("bash").unwrap();
    assert_eq!(label(&tool), "After tool bash");
    assert_eq!(label(&s.after_turn(1).unwrap()), "After turn 1");
    let r = s.rollback(before.id).unwrap();
    assert!(r.deleted.contains(&"gen/out.rs".to_string()), "{r:?}");
    assert!(!tmp.path().join("gen/out.rs").exists());

    // Any safe point with the application state.
    let with = s
        .safe_point(
            SafePoint::AfterTool("apply_patch"),
            Some(b"epoch 4".to_vec()),
        )
        .unwrap();
    assert_eq!(label(&with), "After tool apply_patch");
    assert_eq!(store.blob(&with.state.unwrap()).unwrap(), b"epoch 4");
    assert_eq!(SafePoint::BeforeTurn(3).label(), "Before turn 3");

    // Bad input: an error that names what was wrong, nothing recorded.
    let head = store.head().last_lsn;
    for (e, what) in [
        (s.phase_start("").unwrap_err(), "phase_start: the phase"),
        (s.after_tool("").unwrap_err(), "after_tool: the tool name"),
        (s.before_write("").unwrap_err(), "before_write: the path"),
        (s.before_write(".").unwrap_err(), "workspace root"),
        (s.before_write("../out.rs").unwrap_err(), "`../out.rs`"),
        (s.before_write(".git/config").unwrap_err(), "`.git/config`"),
    ] {
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    assert_eq!(store.head().last_lsn, head);
    store.close().unwrap();
}

/// Trial 15 U9: the library's diff refuses a path filter that is not
/// workspace-relative, or that names nothing at either point.
#[test]
fn query_diff_refuses_bad_or_empty_path_filters() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a"), "1\n").unwrap();
    let store = Store::open(tmp.path()).unwrap();
    store.session("t").checkpoint("one").unwrap();
    std::fs::write(tmp.path().join("a"), "2\n").unwrap();
    store.session("t").checkpoint("two").unwrap();
    let diff = |paths: &[&str]| {
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        store.query(|q| q.diff(cairn::Point::Lsn(cairn::Lsn(1)), cairn::Point::Head, &paths))
    };
    assert_eq!(diff(&[]).unwrap().len(), 1);
    assert_eq!(diff(&["a"]).unwrap().len(), 1);
    for bad in ["", "../x", "/etc", "a/./b", "./a"] {
        let e = diff(&[bad]).unwrap_err().to_string();
        assert!(e.contains("not a workspace-relative path"), "{bad:?}: {e}");
    }
    let e = diff(&["nothere"]).unwrap_err().to_string();
    assert!(e.contains("names no file"), "{e}");
    store.close().unwrap();
}

/// A rollback's report names the workspace it acted on, absolute and
/// canonical, as the command line's `--json` does (issue 27: a library
/// user shows where a rollback wrote): for a dry run and a real one, with
/// the store kept outside the workspace and the workspace given by a
/// relative path through a link.
#[test]
fn a_rollback_report_names_its_absolute_workspace() {
    use cairn::{CheckpointRequest, RollbackRequest};
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().canonicalize().unwrap();
    let ws = top.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::os::unix::fs::symlink("ws", top.join("via-link")).unwrap();
    std::fs::write(ws.join("a.txt"), "one").unwrap();
    let store = Store::builder()
        .store_dir(top.join("store"))
        .workspace(top.join("via-link/../via-link"))
        .open()
        .unwrap();
    let c1 = store.checkpoint(CheckpointRequest::default()).unwrap();
    std::fs::write(ws.join("a.txt"), "two").unwrap();
    let dry = store
        .rollback(RollbackRequest {
            dry_run: true,
            ..RollbackRequest::new(c1.id)
        })
        .unwrap();
    assert_eq!(dry.workspace, ws);
    let real = store.rollback(RollbackRequest::new(c1.id)).unwrap();
    assert_eq!(real.workspace, ws);
    assert!(real.workspace.is_absolute());
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one");
}

/// Issue 33: a read-only handle opened its blob store at open, so a query
/// of records paid for reading the blob directory and index, and failed
/// outright when they could not be read. It now opens the blob store on
/// first use: records are answered from a store whose `blobs/` cannot be
/// listed, and each use of a blob fails with the reason, naming it.
#[test]
fn a_read_only_handle_opens_its_blob_store_when_first_used() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let h = store.put_blob(b"contents\n").unwrap();
    store.session("s").prompt("hello").unwrap();
    store.close().unwrap();

    let reader = Store::builder()
        .workspace(tmp.path())
        .read_only()
        .open()
        .unwrap();
    assert_eq!(reader.blob(&h).unwrap(), b"contents\n");
    drop(reader);

    // `blobs/` made a file: no blob store can be opened there.
    let blobs = tmp.path().join(".cairn/blobs");
    std::fs::rename(&blobs, tmp.path().join("blobs.away")).unwrap();
    std::fs::write(&blobs, "not a directory").unwrap();
    let reader = Store::builder()
        .workspace(tmp.path())
        .read_only()
        .open()
        .unwrap();
    let mut texts = Vec::new();
    reader
        .scan(&Filter::all(), &mut |r| {
            texts.push(r.event.text.clone());
            Ok(true)
        })
        .unwrap();
    assert_eq!(texts, vec![Some("hello".to_string())]);
    let e = reader.blob(&h).unwrap_err().to_string();
    assert!(e.contains("blobs"), "{e}");
    assert!(reader.blobs().is_err());
    assert!(reader.try_stats().is_err());
    assert_eq!(reader.stats().head.last_lsn.0, 1);
}
