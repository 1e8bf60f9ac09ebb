//! Trial 15's library items: the session's file helpers never read
//! through a symlink (U2), the empty session is the default one (U5),
//! errors are typed and speak the library's words (U6), a `..` inside the
//! workspace is resolved (U10), and the everyday API (U13): `delete_file`,
//! `move_file`, `Meta` without `serde_json`, the root re-exports.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cairn::{
    BlobHash, Error, EventKind, ImportOptions, Lsn, Meta, Point, SnapshotError, Store,
    DEFAULT_SESSION,
};

/// The reason of a `BadPath` refusal, or a panic naming what `e` is.
fn bad_path(e: Error) -> String {
    match e {
        Error::Snapshot(SnapshotError::BadPath { reason, .. }) => reason,
        e => panic!("expected a BadPath refusal, got {e:?}"),
    }
}

/// The paths of the tree at `p`.
fn paths_at(store: &Store, p: Point) -> Vec<String> {
    store.query(|q| q.tree_at(p)).unwrap().into_keys().collect()
}

/// U2 (the trial's repro): `write_file` on a symlink to a file outside
/// the workspace stored that file's contents as the record's `before`.
/// Now it is refused: nothing is read through the link, nothing recorded,
/// the link stays, the path is not even tracked; so are `delete_file` and
/// `move_file` of it, and a move onto it.
#[test]
fn u2_the_file_helpers_never_read_or_write_through_a_symlink() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("hostname");
    std::fs::write(&secret, "outside secret\n").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    // Ignored: only tracking would put it in a checkpoint.
    std::fs::write(ws.join(".cairnignore"), "link\n").unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::os::unix::fs::symlink(&secret, ws.join("link")).unwrap();
    let store = Store::open(ws).unwrap();
    let s = store.session("t");

    let why = bad_path(s.write_file("link", b"pwned\n").unwrap_err());
    assert!(
        why.contains("is a symlink") && why.contains("write_file never reads or writes through"),
        "{why}"
    );
    assert!(why.contains(&secret.display().to_string()), "{why}");
    let why = bad_path(s.delete_file("link").unwrap_err());
    assert!(why.contains("delete_file never reads"), "{why}");
    let why = bad_path(s.move_file("link", "moved").unwrap_err());
    assert!(why.contains("move_file never reads"), "{why}");
    let why = bad_path(s.move_file("a.txt", "link").unwrap_err());
    assert!(why.contains("it exists"), "{why}");

    assert_eq!(store.head().last_lsn, Lsn(0), "nothing recorded");
    assert!(
        !store
            .blobs()
            .unwrap()
            .contains(&BlobHash::of(b"outside secret\n")),
        "the outside file was read into the store"
    );
    assert_eq!(std::fs::read(&secret).unwrap(), b"outside secret\n");
    assert!(std::fs::symlink_metadata(ws.join("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(ws.join("a.txt").exists() && !ws.join("moved").exists());
    // Not tracked by the refused calls: the ignored link stays out.
    let c = s.checkpoint("after").unwrap();
    assert!(
        !paths_at(&store, Point::Checkpoint(c.id)).contains(&"link".to_string()),
        "a refused call tracked the link"
    );

    // A link to a file inside the workspace: refused too, naming the file.
    std::os::unix::fs::symlink("a.txt", ws.join("alias")).unwrap();
    let why = bad_path(s.write_file("alias", b"x\n").unwrap_err());
    assert!(why.contains("give the path it leads to, `a.txt`"), "{why}");
    assert_eq!(std::fs::read(ws.join("a.txt")).unwrap(), b"a\n");

    // A symlink among the directories, for every helper.
    std::os::unix::fs::symlink(outside.path(), ws.join("dirlink")).unwrap();
    for e in [
        s.write_file("dirlink/x", b"x\n").unwrap_err(),
        s.delete_file("dirlink/hostname").unwrap_err(),
        s.move_file("dirlink/hostname", "stolen").unwrap_err(),
        s.move_file("a.txt", "dirlink/a.txt").unwrap_err(),
    ] {
        let why = bad_path(e);
        assert!(why.contains("`dirlink` is a symlink"), "{why}");
    }
    assert!(!outside.path().join("x").exists() && secret.exists());
    assert_eq!(store.head().last_lsn, c.id.0, "nothing recorded since");
}

/// U6: a directory or a FIFO passed to a file helper is a `BadPath`
/// saying what it is (a FIFO is not opened, so nothing blocks), not an
/// untyped error.
#[test]
fn u2_u6_a_directory_or_special_file_is_refused_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir(ws.join("src")).unwrap();
    let fifo = std::ffi::CString::new(ws.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let store = Store::open(ws).unwrap();
    let s = store.session("t");
    let why = bad_path(s.write_file("src", b"x").unwrap_err());
    assert!(why.contains("it is a directory"), "{why}");
    let why = bad_path(s.delete_file("src").unwrap_err());
    assert!(why.contains("it is a directory"), "{why}");
    let why = bad_path(s.write_file("pipe", b"x").unwrap_err());
    assert!(why.contains("not a regular file"), "{why}");
    for root in [".", "a/..", ws.to_str().unwrap()] {
        let why = bad_path(s.write_file(root, b"x").unwrap_err());
        assert!(why.contains("the workspace root"), "{root}: {why}");
    }
    assert!(ws.join("src").is_dir());
    assert_eq!(store.head().last_lsn, Lsn(0));
}

/// U5: an empty session id is the default session for everything the
/// handle records, as it was for its checkpoints.
#[test]
fn u5_the_empty_session_is_the_default_one_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a"), "a").unwrap();
    let store = Store::open(tmp.path()).unwrap();
    let s = store.session("");
    assert_eq!(s.id(), DEFAULT_SESSION);
    let c = s.checkpoint("empty-session").unwrap();
    assert_eq!(c.session, DEFAULT_SESSION);
    let lsns = [
        s.prompt("x").unwrap(),
        s.write_file("a", b"b").unwrap(),
        s.tool_call("bash", true).unwrap(),
        s.delete_file("a").unwrap(),
    ];
    for lsn in lsns {
        assert_eq!(store.record(lsn).unwrap().event.session, DEFAULT_SESSION);
    }
    let back = s.rollback(c.id).unwrap();
    let undo = store.record(back.lsn.unwrap()).unwrap().event;
    assert_eq!(undo.session, DEFAULT_SESSION);
    assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"a");
}

/// U6: errors an embedder can match on: an I/O error keeps its kind, one
/// variant for every event the log refuses, and an import names
/// `ImportOptions`, not the command line's flags.
#[test]
fn u6_library_errors_are_typed_and_name_the_library_api() {
    let store = Store::in_memory().unwrap();
    let missing = Path::new("/nonexistent/cairn-trial15.jsonl");
    let e = store
        .import_file(cairn::Format::Comma, missing)
        .unwrap_err();
    assert_eq!(e.io_kind(), Some(std::io::ErrorKind::NotFound));
    match &e {
        Error::Io { op, path, source } => {
            assert_eq!((*op, path.as_path()), ("open", missing));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        e => panic!("expected Error::Io, got {e:?}"),
    }
    assert!(e
        .to_string()
        .starts_with("open /nonexistent/cairn-trial15.jsonl: "));

    let s = store.session("s");
    let mut blobless = s.event(EventKind::FileWrite).with_path("a.txt");
    blobless.after = Some(BlobHash::of(b"never stored"));
    let mut dangling = s.event(EventKind::Rollback);
    dangling.target = Some(cairn::CheckpointId(Lsn(99)));
    let nameless = s.event(EventKind::FileDelete);
    let mut sessionless = s.event(EventKind::Prompt);
    sessionless.session.clear();
    for (event, says) in [
        (&blobless, "not in the store"),
        (&dangling, "field `target` names c99"),
        (&nameless, "missing field `path`"),
        (&sessionless, "field `session` must not be empty"),
    ] {
        for e in [
            store.append(event).unwrap_err(),
            store.append_batch(std::slice::from_ref(event)).unwrap_err(),
        ] {
            match e {
                Error::InvalidEvent(why) => assert!(why.contains(says), "{why}"),
                e => panic!("expected Error::InvalidEvent ({says}), got {e:?}"),
            }
        }
    }
    assert_eq!(store.head().last_lsn, Lsn(0));

    let input = "{\"kind\":\"prompt\",\"ts\":1767225600000,\"text\":\"one\"}\n";
    let import = |opts| {
        store.import_with(
            cairn::Format::Jsonl,
            &mut input.as_bytes(),
            "in.jsonl",
            opts,
        )
    };
    import(ImportOptions::default()).unwrap();
    let again = import(ImportOptions::default()).unwrap_err().to_string();
    assert!(
        again.contains("import it again with `ImportOptions::again()`") && !again.contains("--"),
        "{again}"
    );
    assert_eq!(
        import(ImportOptions::again()).unwrap(),
        Some((Lsn(2), Lsn(2)))
    );
}

/// U10: a `..` that stays inside the workspace is resolved by name, as
/// `cairn track` resolved it; only one that leaves is refused, saying so.
#[test]
fn u10_a_dotdot_inside_the_workspace_is_resolved_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let store = Store::open(ws).unwrap();
    let s = store.session("t");
    let lsn = s.write_file("a/./b/../../c", b"c\n").unwrap();
    assert_eq!(store.record(lsn).unwrap().event.path.as_deref(), Some("c"));
    assert_eq!(std::fs::read(ws.join("c")).unwrap(), b"c\n");
    s.write_file("a2/b/../c", b"c2\n").unwrap();
    assert!(ws.join("a2/c").is_file() && !ws.join("a2/b").exists());
    s.track("a2/../a").unwrap();
    let c = s.before_write("a2/x/../y").unwrap();
    assert_eq!(c.label.as_deref(), Some("Before writing a2/y"));
    for bad in ["../x", "a/../../x", "a/../.git/config"] {
        let why = bad_path(s.write_file(bad, b"x").unwrap_err());
        let want = if bad.contains(".git") {
            "`.git`"
        } else {
            "`..` would leave the workspace"
        };
        assert!(why.contains(want), "{bad}: {why}");
    }
}

/// U13: `delete_file` and `move_file` are `write_file`'s siblings: they
/// track, keep the old contents as a blob, change the file and record the
/// event with the handle's stamps, as an agent platform's delete and move
/// tools need.
#[test]
fn u13_delete_and_move_are_tracked_recorded_and_confined_to_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let store = Store::open(ws).unwrap();
    let s = store.session("t").with_agent("coder").with_model("m");
    s.write_file("run.sh", b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    s.write_file("old.txt", b"one\ntwo\n").unwrap();
    let c = s.checkpoint("before").unwrap();

    let del = s.delete_file("./old.txt").unwrap();
    let e = store.record(del).unwrap().event;
    assert_eq!(e.kind, EventKind::FileDelete);
    assert_eq!(
        (
            e.tool.as_deref(),
            e.path.as_deref(),
            e.agent.as_deref(),
            e.model.as_deref()
        ),
        (
            Some("delete_file"),
            Some("old.txt"),
            Some("coder"),
            Some("m")
        )
    );
    assert_eq!(store.blob(&e.before.unwrap()).unwrap(), b"one\ntwo\n");
    let stats = e.diff_stats.unwrap();
    assert_eq!((stats.lines_added, stats.lines_removed), (0, 2));
    assert!(!ws.join("old.txt").exists());
    let gone = s.delete_file("old.txt").unwrap_err();
    assert_eq!(gone.io_kind(), Some(std::io::ErrorKind::NotFound), "{gone}");

    let mv = s.move_file("run.sh", "bin/run.sh").unwrap();
    let e = store.record(mv).unwrap().event;
    assert_eq!(e.kind, EventKind::FileMove);
    assert_eq!(
        (e.tool.as_deref(), e.path.as_deref(), e.to_path.as_deref()),
        (Some("move_file"), Some("run.sh"), Some("bin/run.sh"))
    );
    assert_eq!(e.before, e.after);
    assert_eq!(
        store.blob(&e.after.unwrap()).unwrap(),
        b"#!/bin/sh\necho hi\n"
    );
    assert!(!ws.join("run.sh").exists());
    let mode = std::fs::metadata(ws.join("bin/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755, "the moved file keeps its mode");
    assert_eq!(paths_at(&store, Point::Head), ["bin/run.sh"]);

    // Refused, changing nothing: a move onto an existing file, onto
    // itself, from or to outside the workspace or `.git`.
    s.write_file("other.txt", b"other\n").unwrap();
    let head = store.head().last_lsn;
    let why = bad_path(s.move_file("bin/run.sh", "other.txt").unwrap_err());
    assert!(
        why.contains("it exists") && why.contains("delete_file"),
        "{why}"
    );
    let why = bad_path(s.move_file("bin/run.sh", "bin/./run.sh").unwrap_err());
    assert!(why.contains("the path to move"), "{why}");
    for (from, to) in [
        ("bin/run.sh", "../escaped.sh"),
        ("bin/run.sh", "/etc/run.sh"),
        ("bin/run.sh", ".git/hooks/run.sh"),
        ("../x", "x"),
    ] {
        bad_path(s.move_file(from, to).unwrap_err());
    }
    for path in ["../x", "/etc/hostname", ".git/config", ".cairn/LOCK"] {
        bad_path(s.delete_file(path).unwrap_err());
    }
    assert_eq!(store.head().last_lsn, head);
    assert_eq!(std::fs::read(ws.join("other.txt")).unwrap(), b"other\n");
    assert!(ws.join("bin/run.sh").exists());

    // Tracked and recorded: a rollback to before both brings them back.
    s.rollback(c.id).unwrap();
    assert_eq!(std::fs::read(ws.join("old.txt")).unwrap(), b"one\ntwo\n");
    assert!(ws.join("run.sh").exists() && !ws.join("bin/run.sh").exists());
}

/// U13: metadata without a `serde_json` dependency, and the everyday
/// types at the crate root.
#[test]
fn u13_meta_is_built_without_serde_json_and_everyday_types_are_at_the_root() {
    let store = Store::in_memory().unwrap();
    let s = store.session("t");
    let mut call = s.event(EventKind::ToolCall).with_meta("cmd", "cargo test");
    let meta = call.meta.get_or_insert_with(Meta::new);
    meta.insert("exit", 101);
    meta.insert("args", cairn::json::json!(["--release"]));
    let lsn = s.record(&call).unwrap();
    let got = store.record(lsn).unwrap().event.meta.unwrap();
    assert_eq!(got.get("cmd").and_then(|v| v.as_str()), Some("cargo test"));
    assert_eq!(got.get("exit").and_then(|v| v.as_i64()), Some(101));
    assert_eq!(
        got,
        Meta::new()
            .with("cmd", "cargo test")
            .with("exit", 101)
            .with("args", vec!["--release"])
    );
    let built: Meta = [("a", 1), ("b", 2)].into_iter().collect();
    assert_eq!(built.len(), 2);

    // The types of the everyday calls, by their root names.
    let _: fn(&cairn::Query<'_>) = |_| {};
    let (_, _, _, _): (
        Option<cairn::FileDiff>,
        Option<cairn::BlameLine>,
        Option<cairn::Branch>,
        Option<cairn::GcSummary>,
    ) = (None, None, None, None);
    let _: fn(&Store, &cairn::RetentionPolicy) -> cairn::Result<cairn::RetentionReport> = Store::gc;
    let mut out = Vec::new();
    let stats: cairn::ExportStats = store
        .export(&cairn::Filter::all(), cairn::Format::Jsonl, &mut out)
        .unwrap();
    assert_eq!(stats.written, 1);
}

/// U13: the error for a workspace where no store can be created names the
/// in-memory store that can checkpoint it, not `Store::in_memory()`,
/// which has no workspace.
#[test]
fn u13_a_read_only_workspace_names_the_in_memory_store_over_it() {
    let e = cairn::EngineError::ReadOnly {
        path: "/ro/.cairn".into(),
        source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
    };
    let text = Error::Engine(e).to_string();
    assert!(
        text.contains("Store::builder().in_memory().workspace(WORKSPACE).open()")
            && !text.contains("Store::in_memory()"),
        "{text}"
    );
    let err = Store::in_memory()
        .unwrap()
        .session("t")
        .write_file("a", b"a")
        .unwrap_err();
    assert!(matches!(err, Error::NoWorkspace), "{err:?}");
    assert!(err
        .to_string()
        .contains("Store::builder().in_memory().workspace(dir).open()"));
}
