//! Import's tests: batches, the journal and resume, torn tails, and
//! copies of checkpoints gc collected.
#![allow(clippy::unwrap_used)]

use super::*;
use std::sync::atomic::Ordering;

/// `n` comma lines, line `bad` (from 1) with an absolute path.
fn comma_lines(n: u64, bad: Option<u64>) -> String {
    (1..=n)
        .map(|i| {
            let path = if Some(i) == bad { "src/..".to_string() } else { format!("src/f{i}.rs") };
            format!(
                "{{\"timestamp\":\"2026-11-22T02:05:00.000Z\",\"sessionId\":\"s\",\"agentName\":\"a\",\"toolName\":\"write_file\",\"operation\":\"write\",\"path\":\"{path}\",\"diff\":\"+line {i}\\n\",\"ok\":true}}\n"
            )
        })
        .collect()
}

#[test]
fn a_long_import_is_appended_in_batches_and_says_what_it_recorded() {
    let store = Store::in_memory().unwrap();
    let input = comma_lines(50, None);
    let got = store
        .import_in_batches(
            Format::Comma,
            &mut input.as_bytes(),
            "a.jsonl",
            1024,
            ImportOptions::default(),
        )
        .unwrap();
    assert_eq!(got, Some((Lsn(1), Lsn(50))));
    let listed = store.query(|q| q.list(&Filter::all())).unwrap();
    assert_eq!(listed.len(), 50);
    assert_eq!(listed[49].event.path.as_deref(), Some("src/f50.rs"));
    let diff = listed[49].event.diff.unwrap();
    assert_eq!(store.blob(&diff).unwrap(), b"+line 50\n");

    // One pass over a reader: the batches before a bad line stay.
    let store = Store::in_memory().unwrap();
    let input = comma_lines(50, Some(40));
    let err = store
        .import_in_batches(
            Format::Comma,
            &mut input.as_bytes(),
            "b.jsonl",
            1024,
            ImportOptions::default(),
        )
        .unwrap_err()
        .to_string();
    let recorded = store.head().last_lsn.0;
    assert!(recorded > 0 && recorded < 40, "{recorded}");
    assert!(
        err.starts_with("b.jsonl:40: field `path`: `src/..` names the workspace itself")
            && err.contains(&format!("(lines 1 to {recorded} of b.jsonl were recorded before it, as LSN 1 to {recorded})")),
        "{err}"
    );
    // Small input: one atomic batch, nothing recorded.
    let store = Store::in_memory().unwrap();
    let err = store
        .import(Format::Comma, &mut input.as_bytes(), "c.jsonl")
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("(nothing from c.jsonl was recorded)"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn.0, 0);
}

#[test]
fn input_imported_before_is_refused_unless_again() {
    let store = Store::in_memory().unwrap();
    let input = comma_lines(3, None);
    let import = |opts| store.import_with(Format::Comma, &mut input.as_bytes(), "e.jsonl", opts);
    // Its events recorded otherwise (through the library, or by an
    // import the journal does not know): recognised by its first event.
    let mut events = Vec::new();
    for item in
        cairn_query::import::import_lines(Format::Comma, input.as_bytes(), "e.jsonl").unwrap()
    {
        for b in &item.blobs {
            store.put_blob(b).unwrap();
        }
        events.push(item.event);
    }
    assert_eq!(store.append_batch(&events).unwrap(), Some((Lsn(1), Lsn(3))));
    let err = import(ImportOptions::default()).unwrap_err().to_string();
    assert!(
        err.contains("e.jsonl:1: this event is recorded already, as LSN 1")
            && err.contains("`ImportOptions::again()`")
            && err.ends_with("(nothing from e.jsonl was recorded)"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn.0, 3);
    assert_eq!(
        import(ImportOptions::again()).unwrap(),
        Some((Lsn(4), Lsn(6)))
    );
    assert!(
        err.contains("all its 3 lines are recorded, as LSN 1 to 3"),
        "{err}"
    );
    // Imported: recognised by the journal, as the import it was.
    let err = import(ImportOptions::default()).unwrap_err().to_string();
    assert!(
        err.contains("e.jsonl: the input looks imported before: all its 3 lines are recorded, as LSN 4 to 6 (import it again with `ImportOptions::again()`)"),
        "{err}"
    );
    // Other input of the same millisecond is no re-import.
    let other = comma_lines(4, None).replace("src/f", "lib/f");
    let got = store
        .import(Format::Comma, &mut other.as_bytes(), "f.jsonl")
        .unwrap();
    assert_eq!(got, Some((Lsn(7), Lsn(10))));
}

/// Trial 11 P6: an input whose leading lines are recorded (an import
/// cut short, an append-only file that grew) is refused saying how many
/// are; `resume` imports only the rest, and again after it grows more.
#[test]
fn a_grown_or_interrupted_input_resumes_after_its_recorded_lines() {
    let store = Store::in_memory().unwrap();
    let import = |n, opts| {
        let input = comma_lines(n, None);
        store.import_with(Format::Comma, &mut input.as_bytes(), "g.jsonl", opts)
    };
    assert_eq!(
        import(3, ImportOptions::default()).unwrap(),
        Some((Lsn(1), Lsn(3)))
    );
    // Something else is recorded in between.
    let other = comma_lines(1, None).replace("src/f", "lib/f");
    store
        .import(Format::Comma, &mut other.as_bytes(), "o.jsonl")
        .unwrap();
    let err = import(5, ImportOptions::default()).unwrap_err().to_string();
    assert!(
        err.contains(
            "its first 3 lines are recorded, as LSN 1 to 3, and the rest (from line 4) is not"
        ) && err.contains("`ImportOptions::resume()`")
            && err.ends_with("(nothing from g.jsonl was recorded)"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn.0, 4);
    assert_eq!(
        import(5, ImportOptions::resume()).unwrap(),
        Some((Lsn(5), Lsn(6)))
    );
    // Grown again: its lines are recorded in two runs, with a gap.
    store
        .import_with(
            Format::Comma,
            &mut other.as_bytes(),
            "o.jsonl",
            ImportOptions::again(),
        )
        .unwrap();
    assert_eq!(
        import(8, ImportOptions::resume()).unwrap(),
        Some((Lsn(8), Lsn(10)))
    );
    // Nothing new: nothing to do.
    assert_eq!(import(8, ImportOptions::resume()).unwrap(), None);
    let paths: Vec<String> = store
        .query(|q| q.list(&Filter::all()))
        .unwrap()
        .into_iter()
        .filter_map(|r| r.event.path)
        .collect();
    let want: Vec<String> = [1, 2, 3]
        .iter()
        .map(|i| format!("src/f{i}.rs"))
        .chain(["lib/f1.rs".to_string()])
        .chain([4, 5].iter().map(|i| format!("src/f{i}.rs")))
        .chain(["lib/f1.rs".to_string()])
        .chain([6, 7, 8].iter().map(|i| format!("src/f{i}.rs")))
        .collect();
    assert_eq!(paths, want);
}

/// `n` canonical JSONL lines without `ts` (each gets the time of its
/// import), line `i` a prompt `line i`.
fn untimed_lines(n: u64) -> String {
    (1..=n)
        .map(|i| format!("{{\"kind\":\"prompt\",\"text\":\"line {i}\"}}\n"))
        .collect()
}

/// The texts of the store's records, in order.
fn texts(store: &Store) -> Vec<String> {
    store
        .query(|q| q.list(&Filter::all()))
        .unwrap()
        .into_iter()
        .map(|r| r.event.text.unwrap_or_default())
        .collect()
}

fn lines_texts(range: std::ops::RangeInclusive<u64>) -> Vec<String> {
    range.map(|i| format!("line {i}")).collect()
}

/// Trial 14 T3: lines without `ts` cannot be recognised by their
/// records (each got the time of its import), so an import cut short
/// was resumed from the start and a re-import recorded every line
/// twice. The journal says where the import got to: the guard refuses
/// it, `resume` imports exactly the lines after, from a pipe too.
#[test]
fn lines_without_a_time_imported_before_are_recognised_and_resumed_exactly() {
    let store = Store::in_memory().unwrap();
    let import = |n, opts| {
        let input = untimed_lines(n);
        store.import_in_batches(Format::Jsonl, &mut input.as_bytes(), "u.jsonl", 64, opts)
    };
    // An import cut short after its first 3 lines (in 2 batches).
    assert_eq!(
        import(3, ImportOptions::default()).unwrap(),
        Some((Lsn(1), Lsn(3)))
    );
    let err = import(10, ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("u.jsonl: the input looks imported before: its first 3 lines are recorded, as LSN 1 to 3, and the rest (from line 4) is not (import only the rest with `ImportOptions::resume()`")
            && err.ends_with("(nothing from u.jsonl was recorded)"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn.0, 3);
    store.session("s").prompt("between").unwrap();
    assert_eq!(
        import(10, ImportOptions::resume()).unwrap(),
        Some((Lsn(5), Lsn(11)))
    );
    // It went on in whole batches (of 2 lines), each written down: the
    // lines skipped start none.
    let key = journal::key_of(br#"{"kind":"prompt","text":"line 1"}"#);
    let file = journal::load(store.vfs(), store.root(), &key).unwrap();
    let lines: Vec<u64> = file.entries[0].checkpoints.iter().map(|c| c.line).collect();
    assert_eq!((file.entries.len(), lines), (1, vec![2, 3, 5, 7, 9, 10]));
    let err = import(10, ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("u.jsonl: the input looks imported before: all its 10 lines are recorded, as LSN 1 to 11 (import it again with `ImportOptions::again()`)"),
        "{err}"
    );
    assert_eq!(import(10, ImportOptions::resume()).unwrap(), None);
    let want: Vec<String> = lines_texts(1..=3)
        .into_iter()
        .chain(["between".to_string()])
        .chain(lines_texts(4..=10))
        .collect();
    assert_eq!(texts(&store), want);
    // Again: all of it, once more; then that import is the one known.
    assert_eq!(
        import(10, ImportOptions::again()).unwrap(),
        Some((Lsn(12), Lsn(21)))
    );
    let err = import(10, ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("all its 10 lines are recorded, as LSN 12 to 21"),
        "{err}"
    );
    // Another input that starts with the same line is no re-import
    // (imported in another millisecond: in the same one, its first
    // line's event would equal the record of the first line above).
    std::thread::sleep(std::time::Duration::from_millis(5));
    let other = untimed_lines(1) + "{\"kind\":\"prompt\",\"text\":\"other\"}\n";
    let got = store
        .import(Format::Jsonl, &mut other.as_bytes(), "o.jsonl")
        .unwrap();
    assert_eq!(got, Some((Lsn(22), Lsn(23))));
}

/// An input that starts as one imported before but differs from it
/// (or ends) before where that import got to: which of the lines in
/// between are recorded cannot be told, so it is refused, not guessed.
#[test]
fn an_input_that_parts_from_one_imported_before_is_refused() {
    let store = Store::in_memory().unwrap();
    let import = |input: &str, opts| {
        store.import_in_batches(Format::Jsonl, &mut input.as_bytes(), "p.jsonl", 64, opts)
    };
    import(&untimed_lines(10), ImportOptions::default()).unwrap();
    let cut = untimed_lines(5);
    let changed = untimed_lines(5) + &untimed_lines(10).replace("line", "LINE");
    for input in [&cut, &changed] {
        for opts in [ImportOptions::default(), ImportOptions::resume()] {
            let err = import(input, opts).unwrap_err().to_string();
            assert!(
                err.contains("cairn cannot tell which lines of the input are recorded: an import of an input that starts as this one does recorded its lines 1 to 10, as LSN 1 to 10; this input has the same lines 1 to 4, but differs from that one, or ends, before its line 10")
                    && err.contains("`ImportOptions::again()`"),
                "{err}"
            );
        }
    }
    assert_eq!(store.head().last_lsn.0, 10);
    assert_eq!(
        import(&cut, ImportOptions::again()).unwrap(),
        Some((Lsn(11), Lsn(15)))
    );
}

/// The journal is written before each batch is appended: an import
/// killed at any file operation (the store on a crash-simulating disk)
/// and resumed records every line exactly once, in order, and is then
/// recognised as imported.
#[test]
fn an_import_of_lines_without_a_time_killed_anywhere_resumes_exactly() {
    use cairn_engine::vfs::{Fault, SimVfs, Vfs};
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("u.jsonl");
    std::fs::write(&path, untimed_lines(12)).unwrap();
    // Crashes, and the records they left, summed.
    let (mut crashes, mut recorded) = (0, 0);
    for k in 0.. {
        let disk = SimVfs::seeded(k);
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        vfs.create_dir_all(Path::new("/s")).unwrap();
        vfs.sync_dir(Path::new("/")).unwrap();
        let open = || {
            Store::builder()
                .store_dir("/s/.cairn")
                .workspace(tmp.path())
                .snapshot_cache_dir(tmp.path().join("cache"))
                .vfs(vfs.clone())
                .open()
                .unwrap()
        };
        let store = open();
        let (count, dead) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let died = dead.clone();
        disk.set_fault_hook(move |_| {
            if count.fetch_add(1, Ordering::SeqCst) >= k {
                dead.store(true, Ordering::SeqCst);
                Some(Fault::WriteEio)
            } else {
                None
            }
        });
        let got = store.import_file_in_batches(Format::Jsonl, &path, 64, ImportOptions::default());
        if !died.load(Ordering::SeqCst) {
            assert_eq!(got.unwrap(), Some((Lsn(1), Lsn(12))));
            assert!(crashes > 40 && recorded > 100, "{crashes} {recorded}");
            break;
        }
        drop(store);
        if k % 2 == 0 {
            disk.crash();
        } else {
            disk.crash_tearing();
        }
        disk.clear_faults();
        crashes += 1;
        let store = open();
        recorded += store.head().last_lsn.0;
        store
            .import_file_in_batches(Format::Jsonl, &path, 64, ImportOptions::resume())
            .unwrap_or_else(|e| panic!("crash at file operation {k}: {e}"));
        assert_eq!(
            texts(&store),
            lines_texts(1..=12),
            "crash at file operation {k}"
        );
        let err = store
            .import_file_in_batches(Format::Jsonl, &path, 64, ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("all its 12 lines are recorded"),
            "crash at file operation {k}: {err}"
        );
    }
}

#[test]
fn a_file_is_checked_whole_before_any_batch_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::in_memory().unwrap();
    let path = tmp.path().join("d.jsonl");
    std::fs::write(&path, comma_lines(50, Some(40))).unwrap();
    let err = store
        .import_file_in_batches(Format::Comma, &path, 1024, ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("d.jsonl:40: field `path`") && err.contains("(nothing from"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn.0, 0, "nothing recorded");
    std::fs::write(&path, comma_lines(50, None)).unwrap();
    let got = store
        .import_file_in_batches(Format::Comma, &path, 1024, ImportOptions::default())
        .unwrap();
    assert_eq!(got, Some((Lsn(1), Lsn(50))));
}

/// Trial 15, U11: an input whose last line is torn (its writer stopped
/// part way through it) is refused, saying how to import the lines
/// before it; with `skip_torn_tail` they are imported (in batches too)
/// and the torn line is reported, and once the writer has completed it,
/// a resumed import records it and what follows. Read from a file and
/// from a reader, which is read once.
#[test]
fn a_torn_last_line_is_skipped_when_asked_and_resumed_once_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.jsonl");
    let whole = comma_lines(8, None);
    let line6 = whole.match_indices('\n').nth(4).unwrap().0 + 1;
    let torn = &whole[..line6 + 40]; // lines 1 to 5, and 40 bytes of line 6
    let skip = ImportOptions::default().with_skip_torn_tail(true);
    // In batches of `batch` bytes of input.
    type Import<'a> = dyn Fn(&Store, &str, ImportOptions, u64) -> Result<ImportReport> + 'a;
    let from_file: &Import = &|store, input, opts, batch| {
        std::fs::write(&path, input).unwrap();
        store.import_file_batched(Format::Comma, &path, batch, opts)
    };
    let from_reader: &Import = &|store, input, opts, batch| {
        store.import_batched(Format::Comma, &mut input.as_bytes(), "t.jsonl", batch, opts)
    };
    // Line 6 completed, or the torn bytes replaced by another line 6
    // (a writer that cut its torn tail off before going on): either
    // way the lines 1 to 5 a resume skips are the same.
    let mut lines: Vec<String> = whole.lines().map(|l| format!("{l}\n")).collect();
    lines[5] = lines[5].replace("02:05:00", "02:06:00");
    let rewritten = lines.concat();
    let cases = [from_file, from_reader]
        .into_iter()
        .flat_map(|import| [(import, &whole), (import, &rewritten)]);
    for (import, later) in cases {
        let store = Store::in_memory().unwrap();
        // (Read once, a reader's batches are recorded as they are read:
        // one batch, to record nothing.)
        let err = import(&store, torn, ImportOptions::default(), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.jsonl:6: invalid JSON (cut short)")
                && err.contains("; it is the last line and has no line end: its writer may have stopped part way through it (`ImportOptions::skip_torn_tail` imports the lines before it)")
                && err.contains("(nothing from ")
                && err.ends_with("t.jsonl was recorded)"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn.0, 0);
        let got = import(&store, torn, skip, 300).unwrap();
        let torn_tail = Some(TornTail { line: 6, bytes: 40 });
        assert_eq!(got.range, Some((Lsn(1), Lsn(5))));
        assert_eq!(got.torn_tail, torn_tail);
        // Still torn: imported before, all but the torn line.
        let err = import(&store, torn, skip, 300).unwrap_err().to_string();
        assert!(
            err.contains(
                "its first 5 lines are recorded, as LSN 1 to 5, and the rest (from line 6) is not"
            ),
            "{err}"
        );
        let resume_skip = ImportOptions::resume().with_skip_torn_tail(true);
        let got = import(&store, torn, resume_skip, 300);
        assert_eq!(
            got.unwrap(),
            ImportReport {
                range: None,
                torn_tail,
                collected: Vec::new(),
            }
        );
        // The writer completes line 6, and writes two more.
        let got = import(&store, later, ImportOptions::resume(), 300).unwrap();
        assert_eq!((got.range, got.torn_tail), (Some((Lsn(6), Lsn(8))), None));
        let paths: Vec<String> = store
            .query(|q| q.list(&Filter::all()))
            .unwrap()
            .into_iter()
            .filter_map(|r| r.event.path)
            .collect();
        let want: Vec<String> = (1..=8).map(|i| format!("src/f{i}.rs")).collect();
        assert_eq!(paths, want);
    }

    // Only the last line can be torn: a bad line before it is refused
    // with the option too; a last line that is whole JSON but bad is
    // bad, not torn.
    let store = Store::in_memory().unwrap();
    let bad = comma_lines(8, Some(3));
    let err = from_file(&store, &bad[..line6 + 40], skip, 300)
        .unwrap_err()
        .to_string();
    assert!(err.contains("t.jsonl:3: field `path`"), "{err}");
    let bad = comma_lines(6, Some(6));
    let err = from_file(&store, bad.trim_end(), skip, 300)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t.jsonl:6: field `path`") && !err.contains("last line"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn.0, 0);
}

/// A store in `ws` with checkpoints c1 to c3 of `f` (`1`, `2`, `3`),
/// of which a compacting gc keeping one per session discarded c1 and
/// c2 (at LSN 4 and 5) and deleted their trees; and its export.
fn collected_store(ws: &Path) -> (Store, Vec<u8>) {
    let store = Store::open(ws).unwrap();
    let s = store.session("");
    for i in 1..=3 {
        std::fs::write(ws.join("f"), format!("{i}\n")).unwrap();
        s.checkpoint(&format!("c{i}")).unwrap();
    }
    let policy = crate::RetentionPolicy {
        keep_per_session: Some(1),
        ..crate::RetentionPolicy::default()
    };
    store.gc_compact(&policy).unwrap();
    let export = own_export(&store);
    (store, export)
}

/// The whole of `store`, exported as canonical JSONL.
fn own_export(store: &Store) -> Vec<u8> {
    let mut export = Vec::new();
    store
        .export(&Filter::all(), Format::Jsonl, &mut export)
        .unwrap();
    export
}

/// Imports `input`, canonical JSONL named `name`, into `store` with
/// `ImportOptions::again()`.
fn import_again(store: &Store, input: &[u8], name: &str) -> Result<Option<(Lsn, Lsn)>> {
    store.import_with(Format::Jsonl, &mut &input[..], name, ImportOptions::again())
}

/// The kinds of the records `lsns`, in order.
fn kinds(store: &Store, lsns: std::ops::RangeInclusive<u64>) -> Vec<EventKind> {
    lsns.map(|l| store.record(Lsn(l)).unwrap().event.kind)
        .collect()
}

#[test]
fn a_stores_own_export_after_gc_imports_back_with_its_collected_checkpoints_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, export) = collected_store(tmp.path());
    let import = |opts| store.import_reporting(Format::Jsonl, &mut &export[..], "ex.jsonl", opts);

    // Refused, naming the checkpoint it copies and the option.
    let err = import(ImportOptions::again()).unwrap_err().to_string();
    assert!(
        err.starts_with("ex.jsonl:1: the checkpoint.create event's `root` ")
            && err.contains("is the tree of checkpoint c1 of this store, discarded at LSN 4, whose contents gc has since deleted")
            && err.contains(ImportOption::RecordCollected.library_call())
            && !err.contains("import the lines after it")
            && err.ends_with("(nothing from ex.jsonl was recorded)"),
        "{err}"
    );
    assert_eq!(store.head().last_lsn, Lsn(5));

    // Recorded without their files, and said so; the discards, copies
    // of the records that discarded c1 and c2, as they are.
    let opts = ImportOptions::again().with_collected_checkpoints(CollectedCheckpoints::Record);
    let got = import(opts).unwrap();
    assert_eq!(got.range, Some((Lsn(6), Lsn(10))));
    let copied = |line, id, copy_of, discarded_at| CollectedCheckpoint {
        line,
        id: CheckpointId(Lsn(id)),
        copy_of: CheckpointId(Lsn(copy_of)),
        discarded_at: Lsn(discarded_at),
    };
    assert_eq!(got.collected, vec![copied(1, 6, 1, 4), copied(2, 7, 2, 5)]);
    assert_eq!(kinds(&store, 6..=10), kinds(&store, 1..=5));
    for (copy, of, at) in [(6, 1, 4), (7, 2, 5)] {
        let (copy, of) = (
            store.record(Lsn(copy)).unwrap().event,
            store.record(Lsn(of)).unwrap().event,
        );
        assert_eq!((copy.root, copy.state), (None, None));
        assert_eq!(
            (&copy.label, copy.ts, &copy.counts),
            (&of.label, of.ts, &of.counts)
        );
        let note = &copy.meta.as_ref().unwrap().0[cairn_snapshot::COLLECTED_KEY];
        assert_eq!(
            note,
            &serde_json::json!({
                "root": of.root.unwrap().to_hex(),
                "checkpoint": format!("c{}", at - 3),
                "discarded_at": at,
            })
        );
    }
    assert_eq!(
        store.record(Lsn(8)).unwrap().event,
        store.record(Lsn(3)).unwrap().event
    );
    assert_eq!(
        store.record(Lsn(9)).unwrap().event,
        store.record(Lsn(4)).unwrap().event
    );

    // No checkpoint: a rollback to one is refused, saying why.
    let e = store
        .rollback(cairn_snapshot::RollbackRequest::new(CheckpointId(Lsn(6))))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Snapshot(cairn_snapshot::SnapshotError::CollectedCheckpoint {
                copy_of: Some(CheckpointId(Lsn(1))),
                ..
            })
        ),
        "{e:?}"
    );
    let ids: Vec<u64> = store
        .checkpoints(None)
        .unwrap()
        .iter()
        .map(|c| c.id.0 .0)
        .collect();
    assert_eq!(ids, vec![1, 2, 3, 8]);
    // gc and verify find nothing wrong with them.
    let report = store.gc(&crate::RetentionPolicy::default()).unwrap();
    assert!(report.damaged.is_empty() && report.collected, "{report:?}");
    assert!(store.verify(None).unwrap().is_ok());
    // Their own export imports back as it is.
    let mut again = Vec::new();
    let only_copies = Filter {
        since_lsn: Some(Lsn(6)),
        ..Filter::all()
    };
    store
        .export(&only_copies, Format::Jsonl, &mut again)
        .unwrap();
    let got = store
        .import_reporting(
            Format::Jsonl,
            &mut &again[..],
            "again.jsonl",
            ImportOptions::again(),
        )
        .unwrap();
    assert_eq!(
        (got.range, got.collected),
        (Some((Lsn(11), Lsn(15))), Vec::new())
    );
}

#[test]
fn a_checkpoint_whose_state_gc_collected_but_not_its_tree_is_a_collected_one_too() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let store = Store::open(ws).unwrap();
    let s = store.session("");
    std::fs::write(ws.join("f"), "same\n").unwrap();
    s.safe_point(crate::SafePoint::BeforeTurn(1), Some(b"epoch 1".to_vec()))
        .unwrap();
    s.safe_point(crate::SafePoint::BeforeTurn(2), Some(b"epoch 2".to_vec()))
        .unwrap();
    let policy = crate::RetentionPolicy {
        keep_per_session: Some(1),
        ..crate::RetentionPolicy::default()
    };
    store.gc_compact(&policy).unwrap();
    let first = store.record(Lsn(1)).unwrap().event;
    assert!(
        store.blobs.get().unwrap().contains(&first.root.unwrap()),
        "the tree c2 has too"
    );
    assert!(!store.blobs.get().unwrap().contains(&first.state.unwrap()));
    let export = own_export(&store);
    let err = import_again(&store, &export, "ex.jsonl")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ex.jsonl:1: the checkpoint.create event's `state` ")
            && err.contains(
                "is the application state of checkpoint c1 of this store, discarded at LSN 3"
            ),
        "{err}"
    );
    let opts = ImportOptions::again().with_collected_checkpoints(CollectedCheckpoints::Record);
    let got = store
        .import_reporting(Format::Jsonl, &mut &export[..], "ex.jsonl", opts)
        .unwrap();
    assert_eq!(got.collected.len(), 1);
    let copy = store.record(Lsn(4)).unwrap().event;
    assert_eq!((copy.root, copy.state), (None, None));
    let note = &copy.meta.as_ref().unwrap().0[cairn_snapshot::COLLECTED_KEY];
    assert_eq!(note["state"], first.state.unwrap().to_hex());
    assert_eq!(note["root"], first.root.unwrap().to_hex());
}

#[test]
fn a_discard_copied_from_the_store_imports_but_another_of_a_discarded_checkpoint_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let store = Store::open(ws).unwrap();
    let s = store.session("");
    for i in 1..=2 {
        std::fs::write(ws.join("f"), format!("{i}\n")).unwrap();
        s.checkpoint(&format!("c{i}")).unwrap();
    }
    let mut discard = cairn_codec::Event::new(EventKind::CheckpointDiscard, "default");
    discard.checkpoint = Some(CheckpointId(Lsn(1)));
    store.append(&discard).unwrap();
    // The store's own export, no gc since: every line imports.
    let export = own_export(&store);
    let got = import_again(&store, &export, "ex.jsonl").unwrap();
    assert_eq!(got, Some((Lsn(4), Lsn(6))));
    assert_eq!(store.record(Lsn(6)).unwrap().event, discard);
    // Twice in one input too.
    let twice = [&export[..], &export[..]].concat();
    import_again(&store, &twice, "twice.jsonl").unwrap();
    // A discard of c1 that says anything else, and one appended
    // through the library, are refused as ever.
    let other = br#"{"kind":"checkpoint.discard","checkpoint":"c1","text":"mine"}"#;
    let err = import_again(&store, other, "other.jsonl")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "other.jsonl:1: field `checkpoint` names c1, which was already discarded at LSN 3"
        ),
        "{err}"
    );
    let err = store.append(&discard).unwrap_err().to_string();
    assert!(err.contains("already discarded at LSN 3"), "{err}");
}
