//! Regression tests for the session-11 user trial's P7, P12 and P13:
//! time filters read as the user meant them, a cortexide export that keeps
//! the blob hashes of file events, and a checkpoint `root` that names no
//! manifest refused at record and import (and survived by gc).
#![allow(clippy::unwrap_used)]

use std::path::Path;

mod common;
use common::*;

fn lsns(ws: &Path, args: &[&str]) -> Vec<u64> {
    let mut a = vec!["log", "--json"];
    a.extend_from_slice(args);
    json_lines(&ok(&cairn(ws, &a)))
        .iter()
        .map(|r| r["lsn"].as_u64().unwrap())
        .collect()
}

/// Puts `bytes` as a blob, returning its hash.
fn blob(ws: &Path, name: &str, bytes: &str) -> String {
    std::fs::write(ws.join(name), bytes).unwrap();
    let out = ok(&cairn(ws, &["blob", "put", name]));
    out.split_whitespace().next().unwrap().to_string()
}

/// P12: a year, a month and a date are dates (a date-only, month-only or
/// year-only `--until` covering the whole of it); a bare number too small
/// to be meant as epoch milliseconds is refused; ISO instants and epoch ms
/// work as before.
#[test]
fn time_filters_read_years_months_and_whole_days() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    ok(&cairn_stdin(
        ws,
        &["record", "-q"],
        Some(concat!(
            r#"{"kind":"prompt","ts":"2023-11-14T22:13:20Z"}"#,
            "\n",
            r#"{"kind":"prompt","ts":"2024-06-01T00:00:00Z"}"#,
            "\n",
        )),
    ));
    assert_eq!(lsns(ws, &["--since", "2024"]), vec![2]);
    assert_eq!(lsns(ws, &["--until", "2024"]), vec![1, 2]);
    assert_eq!(lsns(ws, &["--until", "2023"]), vec![1]);
    assert_eq!(lsns(ws, &["--since", "2024", "--until", "2025"]), vec![2]);
    assert_eq!(
        lsns(ws, &["--since", "2023-11", "--until", "2023-11"]),
        vec![1]
    );
    assert_eq!(lsns(ws, &["--until", "2023-11-14"]), vec![1]);
    assert_eq!(lsns(ws, &["--until", "2023-11-13"]), Vec::<u64>::new());
    assert_eq!(lsns(ws, &["--since", "2023-11-15"]), vec![2]);
    // Instants and epoch milliseconds as before.
    assert_eq!(lsns(ws, &["--until", "2023-11-14T22:13:20Z"]), vec![1]);
    assert_eq!(
        lsns(ws, &["--until", "2023-11-14T22:13:19.999Z"]),
        Vec::<u64>::new()
    );
    assert_eq!(lsns(ws, &["--since", "1700000000001"]), vec![2]);
    assert_eq!(lsns(ws, &["--until", "1700000000000"]), vec![1]);
    // A number that is surely no epoch-ms time is refused, naming both forms.
    for bad in ["20231114", "99999", "1"] {
        let o = cairn(ws, &["export", "--since", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--since") && err.contains(bad), "{err}");
        assert!(
            err.contains("ISO-8601") && err.contains("epoch milliseconds"),
            "{err}"
        );
    }
    let help = ok(&cairn(ws, &["log", "--help"]));
    assert!(help.contains("whole day"), "{help}");
}

/// A store in `ws` holding one `file.edit` naming `before`, `after` and
/// `diff` blobs; returns their hashes.
fn store_with_a_file_edit(ws: &Path) -> [String; 3] {
    ok(&cairn(ws, &["init", "-q"]));
    let b = blob(ws, "x.old", "old\n");
    let a = blob(ws, "x.new", "new\n");
    let d = blob(ws, "d.diff", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n");
    let line = format!(
        "{{\"kind\":\"file.edit\",\"path\":\"x\",\"before\":\"{b}\",\"after\":\"{a}\",\"diff\":\"{d}\",\"tool\":\"edit_file\",\"session\":\"s1\"}}\n"
    );
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&line)));
    [b, a, d]
}

/// P7: `export --format cortexide` keeps a file event's blob hashes under
/// `meta.cairn`, and `import --format cortexide` reads them back into a
/// store that holds those blobs, field by field; a store without them
/// imports the line all the same and exports it back unchanged.
#[test]
fn cortexide_keeps_blob_hashes_and_reads_them_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst, bare) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    for d in [&src, &dst, &bare] {
        std::fs::create_dir(d).unwrap();
    }
    let [b, a, d] = store_with_a_file_edit(&src);
    let out = ok(&cairn(&src, &["export", "--format", "cortexide"]));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{out}");
    let c = &lines[0]["meta"]["cairn"];
    assert_eq!(c["before"], b.as_str(), "{out}");
    assert_eq!(c["after"], a.as_str(), "{out}");
    assert_eq!(c["diff"], d.as_str(), "{out}");
    std::fs::write(tmp.path().join("cx.jsonl"), &out).unwrap();
    let cx = tmp.path().join("cx.jsonl");
    let cx = cx.to_str().unwrap();

    // Into a store holding the same blobs: the fields come back.
    ok(&cairn(&dst, &["init", "-q"]));
    for (name, text) in [
        ("x.old", "old\n"),
        ("x.new", "new\n"),
        ("d.diff", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n"),
    ] {
        blob(&dst, name, text);
    }
    ok(&cairn(&dst, &["import", "--format", "cortexide", cx]));
    let orig = &json_lines(&ok(&cairn(&src, &["export"])))[0];
    let back = &json_lines(&ok(&cairn(&dst, &["export"])))[0];
    for field in [
        "kind", "session", "path", "tool", "before", "after", "diff", "ok", "ts",
    ] {
        assert_eq!(back[field], orig[field], "field `{field}`:\n{orig}\n{back}");
    }
    assert!(back.get("meta").is_none(), "{back}");
    assert_eq!(ok(&cairn(&dst, &["export", "--format", "cortexide"])), out);

    // Into a store without them: imported all the same, the hashes kept
    // in meta.cairn, and exported back to the same line.
    ok(&cairn(&bare, &["init", "-q"]));
    ok(&cairn(&bare, &["import", "--format", "cortexide", cx]));
    let kept = &json_lines(&ok(&cairn(&bare, &["export"])))[0];
    assert!(kept.get("before").is_none(), "{kept}");
    assert_eq!(kept["meta"]["cairn"]["before"], b.as_str(), "{kept}");
    assert_eq!(ok(&cairn(&bare, &["export", "--format", "cortexide"])), out);
}

/// P13: a `checkpoint.create` whose `root` is a blob that is no manifest
/// node is refused by `record` and by `import`, naming the line, the
/// field and why; nothing is recorded, and gc and verify stay clean.
#[test]
fn a_checkpoint_root_that_is_no_manifest_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let b = blob(ws, "f", "hello\n");
    let line = format!(
        "{{\"kind\":\"checkpoint.create\",\"root\":\"{b}\",\"label\":\"bad\",\"session\":\"x\"}}\n"
    );
    let o = cairn_stdin(
        ws,
        &["record"],
        Some(&format!("{{\"kind\":\"prompt\"}}\n{line}")),
    );
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stdin:2: rejected: field `root`"), "{err}");
    assert!(err.contains("not a checkpoint tree"), "{err}");
    assert!(err.contains(&b), "{err}");

    std::fs::write(
        ws.join("in.jsonl"),
        format!("{{\"kind\":\"prompt\"}}\n{line}"),
    )
    .unwrap();
    let o = cairn(ws, &["import", "--format", "jsonl", "in.jsonl"]);
    assert_ne!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("in.jsonl:2") && err.contains("field `root`"),
        "{err}"
    );
    assert!(err.contains("not a checkpoint tree"), "{err}");

    assert_eq!(lsns(ws, &[]), vec![1], "only the first record line");
    let cps = ok(&cairn(ws, &["checkpoints", "--json"]));
    assert!(cps.trim().is_empty() || cps.trim() == "[]", "{cps}");
    ok(&cairn(ws, &["gc", "--keep-per-session", "5"]));
    ok(&cairn(ws, &["verify"]));
}

/// Trial 11 P14.10: `show c1:../x` looked `ws/../x` up in the checkpoint
/// instead of refusing a path outside the workspace.
#[test]
fn show_refuses_a_path_outside_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    assert_eq!(ok(&cairn(ws, &["show", "head:./a.txt"])), "a\n");
    let o = cairn(ws, &["show", "head:../x"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("refusing path `../x`") && err.contains("leave the workspace"),
        "{err}"
    );
    assert!(!err.contains("does not exist"), "{err}");
}

/// Trial 15 U10: `track a2/b/../c` resolved the `..`, but `show
/// head:a2/../a` refused it, saying it would leave the workspace. A `..`
/// that stays inside is resolved by name everywhere, as git does.
#[test]
fn a_dotdot_inside_the_workspace_is_resolved_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::create_dir_all(ws.join("a2/b")).unwrap();
    std::fs::write(ws.join("a"), "top\n").unwrap();
    std::fs::write(ws.join("a2/c"), "c\n").unwrap();
    ok(&cairn(ws, &["track", "a2/b/../c"]));
    ok(&cairn(ws, &["checkpoint", "-q"]));
    assert_eq!(ok(&cairn(ws, &["show", "head:a2/../a"])), "top\n");
    assert_eq!(ok(&cairn(ws, &["show", "c1:a2/b/../c"])), "c\n");
    let b = ok(&cairn(ws, &["blame", "c1", "a2/./b/../../a"]));
    assert!(b.ends_with("top\n"), "{b}");
    let o = cairn(ws, &["show", "head:a2/../../x"]);
    assert!(
        failed(&o).contains("refusing path `a2/../../x`: `..` would leave the workspace"),
        "{}",
        err(&o)
    );
}

/// Trial 11 P14.8: `blob put -` read no stdin, and errors called the
/// input "store".
#[test]
fn blob_put_reads_stdin_and_names_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    ok(&cairn(ws, &["init", "-q"]));
    let out = ok(&cairn_stdin(
        ws,
        &["blob", "put", "-"],
        Some("from stdin\n"),
    ));
    let hash = out.split_whitespace().next().unwrap().to_string();
    assert_eq!(ok(&cairn(ws, &["blob", "get", &hash])), "from stdin\n");

    std::fs::create_dir(ws.join("d")).unwrap();
    for (arg, what) in [("d", "is a directory"), ("missing", "input file")] {
        let o = cairn(ws, &["blob", "put", arg]);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(what) && !err.contains("store "),
            "{arg}: {err}"
        );
    }
}

/// A fractional latency is read alike by `record` (`latency_ms`) and by
/// `import` (cortexide `latencyMs`, canonical `latency_ms`): rounded to
/// whole milliseconds, never accepted by one and refused by the other; the
/// cortexide line exports back as it was; a negative one is refused by all.
#[test]
fn a_fractional_latency_is_rounded_by_record_and_import_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let recorded = ok(&cairn_stdin(
        ws,
        &["record", "--ack"],
        Some("{\"kind\":\"reply\",\"ts\":1,\"latency_ms\":12.5}\n"),
    ));
    assert_eq!(recorded.trim(), "1");
    let cx = r#"{"ts":2,"action":"reply","ok":true,"latencyMs":12.5}"#;
    std::fs::write(ws.join("cx.jsonl"), format!("{cx}\n")).unwrap();
    ok(&cairn(ws, &["import", "--format", "cortexide", "cx.jsonl"]));
    std::fs::write(
        ws.join("c.jsonl"),
        "{\"kind\":\"reply\",\"ts\":3,\"latency_ms\":0.4}\n",
    )
    .unwrap();
    ok(&cairn(ws, &["import", "--format", "jsonl", "c.jsonl"]));
    let log = json_lines(&ok(&cairn(ws, &["log", "--json"])));
    let latencies: Vec<u64> = log
        .iter()
        .map(|r| r["latency_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(latencies, [13, 13, 0]);
    let exported = json_lines(&ok(&cairn(ws, &["export", "--format", "cortexide"])));
    assert_eq!(
        exported[1],
        serde_json::from_str::<serde_json::Value>(cx).unwrap()
    );

    let o = cairn_stdin(
        ws,
        &["record"],
        Some("{\"kind\":\"reply\",\"latency_ms\":-0.5}\n"),
    );
    assert_eq!(o.status.code(), Some(4));
    assert!(err(&o).contains("not negative"), "{}", err(&o));
    std::fs::write(
        ws.join("neg.jsonl"),
        r#"{"ts":4,"action":"reply","ok":true,"latencyMs":-0.5}"#,
    )
    .unwrap();
    let o = cairn(ws, &["import", "--format", "cortexide", "neg.jsonl"]);
    assert!(!o.status.success());
    assert!(err(&o).contains("not negative"), "{}", err(&o));
}

/// Trial 12 N9.2–N9.4: a bad point, checkpoint id or blob hash is a usage
/// error (exit 2) wherever it is typed, with no internal prefix or parser
/// detail; `history` and `show` refuse the workspace root.
#[test]
fn bad_points_ids_and_hashes_are_usage_errors_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a"), "x\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    for args in [
        &["tree", "2020-13-45"][..],
        &["rollback", "head"],
        &["blob", "get", "abc"],
        &["show", "c0:a"],
        &["log", "--since", "yesterday"],
        &["history", ""],
        &["history", "."],
        &["show", "head:."],
    ] {
        let o = cairn(ws, args);
        let e = failed(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(!e.contains("invalid data"), "{args:?}: {e}");
        assert!(!e.contains("four digit integer"), "{args:?}: {e}");
    }
    let e = failed(&cairn(ws, &["show", "c0:a"]));
    assert!(e.contains("`c0` is not a checkpoint id"), "{e}");
    // A point that parses but names nothing is not a usage error.
    assert_eq!(cairn(ws, &["tree", "c9"]).status.code(), Some(1));
}

/// Trial 12 N9.1: `history --follow` follows a file back through its
/// moves, as blame does; a later file at the old path is not its history.
#[test]
fn history_follow_goes_back_through_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let lines = [
        r#"{"kind":"file.create","path":"a.txt"}"#,
        r#"{"kind":"file.edit","path":"a.txt"}"#,
        r#"{"kind":"file.move","path":"a.txt","to_path":"dir/b.txt"}"#,
        r#"{"kind":"file.edit","path":"dir/b.txt"}"#,
        r#"{"kind":"file.create","path":"a.txt"}"#,
        r#"{"kind":"file.move","path":"dir/b.txt","to_path":"c.txt"}"#,
    ]
    .join("\n");
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&lines)));
    let lsns = |args: &[&str]| -> Vec<u64> {
        json_lines(&ok(&cairn(ws, args)))
            .iter()
            .map(|v| v["lsn"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(lsns(&["history", "c.txt", "--json"]), vec![6]);
    assert_eq!(
        lsns(&["history", "c.txt", "--follow", "--json"]),
        vec![1, 2, 3, 4, 6]
    );
    assert_eq!(
        lsns(&["history", "dir/b.txt", "--follow", "--json"]),
        vec![1, 2, 3, 4, 6]
    );
    // The two flags go together (no checkpoint here changed anything).
    assert_eq!(
        lsns(&["history", "c.txt", "--follow", "--checkpoints", "--json"]),
        vec![1, 2, 3, 4, 6]
    );
}

/// `history --follow` follows what blame follows: a `file.patch` with a
/// `to_path` moves its file as a `file.move` does.
#[test]
fn history_follow_goes_back_through_a_patch_that_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let lines = [
        r#"{"kind":"file.create","path":"a.txt"}"#,
        r#"{"kind":"file.patch","path":"a.txt","to_path":"b.txt"}"#,
        r#"{"kind":"file.edit","path":"b.txt"}"#,
    ]
    .join("\n");
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&lines)));
    let follow: Vec<u64> = json_lines(&ok(&cairn(ws, &["history", "b.txt", "--follow", "--json"])))
        .iter()
        .map(|v| v["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(follow, vec![1, 2, 3]);
}

/// Trial 13 N10: `log` and `export` filter by phase, and `--since` and
/// `--until` also take a record (`@LSN`, or a checkpoint id: the log as it
/// was at that checkpoint), as every command that takes a point does.
#[test]
fn log_filters_by_phase_and_by_record() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let lines = [
        r#"{"kind":"prompt","phase":"plan","text":"a"}"#,
        r#"{"kind":"reply","phase":"edit","text":"b"}"#,
    ]
    .join("\n");
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&lines))); // 1, 2
    ok(&cairn(ws, &["checkpoint", "-q"])); // c3
    let line = r#"{"kind":"prompt","phase":"edit","text":"c"}"#;
    ok(&cairn_stdin(ws, &["record", "-q"], Some(line))); // 4
    assert_eq!(lsns(ws, &["--phase", "edit"]), [2, 4]);
    assert_eq!(lsns(ws, &["--until", "c3"]), [1, 2, 3]);
    assert_eq!(lsns(ws, &["--since", "@2", "--until", "@3"]), [2, 3]);
    assert_eq!(lsns(ws, &["--since", "c3", "--newest-first"]), [4, 3]);
    assert_eq!(lsns(ws, &["--since", "@9"]), [] as [u64; 0]);
    let exported = ok(&cairn(ws, &["export", "--since", "c3", "--phase", "edit"]));
    let got: Vec<u64> = json_lines(&exported)
        .iter()
        .map(|v| v["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(got, [4]);
    // A checkpoint id that names no checkpoint is refused, naming the flag.
    let e = failed(&cairn(ws, &["log", "--until", "c1"]));
    assert!(
        e.contains("--until c1") && e.contains("no checkpoint `c1`"),
        "{e}"
    );
}

/// Trial 14 T5: a rejected line's message quotes the input with its
/// control characters escaped (an ESC from another tool's audit file must
/// not reach the terminal), as every error does.
#[test]
fn rejection_messages_escape_control_characters() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let lines = "{\"kind\":\"prompt\",\"\\u001b[31mRED\":1}\n{\"kind\":\"nope\\u001b[2J\"}\n";
    let o = cairn_stdin(ws, &["record"], Some(lines));
    let e = err(&o);
    assert!(!o.status.success());
    assert!(!e.contains('\u{1b}'), "{e:?}");
    assert!(
        e.contains("`\\u001b[31mRED`") && e.contains("`nope\\u001b[2J`"),
        "{e}"
    );
}

/// Trial 14 T4, T5 and T7: read commands look up what records name (a path
/// under `.git` too); `blame` takes POINT:PATH as `show` does and refuses a
/// path outside the workspace as such; a mode change says which modes; an
/// empty tree and a diff against `head` that finds nothing say why.
#[test]
fn read_commands_take_what_records_name_and_say_what_they_show() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("f.sh"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    let h = blob(ws, "hook.txt", "hook\n");
    std::fs::remove_file(ws.join("hook.txt")).unwrap();
    let rec = format!(
        "{{\"kind\":\"file.write\",\"path\":\".git/hooks/pre-commit\",\"after\":\"{h}\"}}\n"
    );
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&rec))); // @2
    assert_eq!(
        ok(&cairn(ws, &["show", "head:.git/hooks/pre-commit"])),
        "hook\n"
    );
    let b = ok(&cairn(ws, &["blame", "head", ".git/hooks/pre-commit"]));
    assert!(b.contains("@2") && b.contains("hook"), "{b}");
    // Tracking one is still refused: cairn never captures `.git`.
    assert!(failed(&cairn(ws, &["track", ".git/x"])).contains("`.git`"));

    let b = ok(&cairn(ws, &["blame", "c1:f.sh"]));
    assert!(b.contains("@1") && b.ends_with("one\n"), "{b}");
    let e = failed(&cairn(ws, &["blame", "c1", "../x"]));
    assert!(e.contains("`..` would leave the workspace"), "{e}");
    let e = failed(&cairn(ws, &["blame", "c1"]));
    assert!(e.contains("blame takes POINT PATH or POINT:PATH"), "{e}");

    // A mode change alone, then with an edit.
    let exec = |mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(ws.join("f.sh"), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    exec(0o755);
    ok(&cairn(ws, &["checkpoint", "-q"])); // c3
    std::fs::write(ws.join("f.sh"), "one\ntwo\n").unwrap();
    exec(0o644);
    ok(&cairn(ws, &["checkpoint", "-q"])); // c4
    assert_eq!(
        ok(&cairn(ws, &["diff", "c1", "c3", "--", "f.sh"])),
        "f.sh modified (mode 644 -> 755)\n"
    );
    let d = ok(&cairn(ws, &["diff", "c3", "c4"]));
    assert!(d.starts_with("f.sh mode 755 -> 644\n--- a/f.sh\n"), "{d}");

    // Points are history: an edit on disk is not in `head` until captured.
    std::fs::write(ws.join("f.sh"), "changed\n").unwrap();
    let o = cairn(ws, &["diff", "c4", "head"]);
    assert_eq!(ok(&o), "no differences\n");
    assert!(err(&o).contains("`head` is the state after the last record, not the files on disk"));
    let o = cairn(ws, &["tree", "@0"]);
    assert_eq!(ok(&o), "");
    assert!(err(&o).contains("no files at @0"), "{}", err(&o));

    // A history of a path outside the workspace says why nothing matches.
    for outside in ["../x", "/etc/passwd"] {
        let o = cairn(ws, &["history", outside]);
        assert_eq!(ok(&o), "no records match\n");
        assert!(
            err(&o).contains("lies outside the workspace"),
            "{}",
            err(&o)
        );
    }

    // `branches` names a rollback record `@N`, and takes it so.
    ok(&cairn(ws, &["rollback", "-q", "c1"])); // c5 undo point, @6 rollback
    let e = failed(&cairn(ws, &["branches", "c6"]));
    assert!(e.contains("`cairn branches @6`"), "{e}");
    let b = ok(&cairn(ws, &["branches", "@6"]));
    assert!(b.starts_with("nothing continues from @6 yet"), "{b}");
    let e = failed(&cairn(ws, &["branches", "@2"]));
    assert!(
        e.contains("neither a checkpoint nor a rollback record"),
        "{e}"
    );
}

/// Trial 15 U6: the library's messages name its calls
/// (`StoreBuilder::rebind_workspace(true)`, `ImportOptions::again()`); the
/// command line still says them with its flags, as it always did.
#[test]
fn library_calls_in_error_messages_are_said_with_the_cli_flags() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path();
    for d in ["w1", "w2"] {
        std::fs::create_dir(top.join(d)).unwrap();
    }
    ok(&cairn(top, &["--store", "s", "init", "w1"]));
    let s = top.join("s").canonicalize().unwrap();
    let w2 = top.join("w2").canonicalize().unwrap();
    let flags = format!(
        "check --workspace and --store (or CAIRN_STORE); if the workspace really moved, bind the store to it with `cairn --store {} init {} --rebind`",
        s.display(),
        w2.display()
    );
    for args in [
        &["--store", "s", "init", "w2"][..],
        &["--store", "s", "--workspace", "w2", "checkpoint"][..],
    ] {
        let e = failed(&cairn(top, args));
        assert!(
            e.contains(&flags) && !e.contains("StoreBuilder"),
            "{args:?}: {e}"
        );
    }
    let input = top.join("in.jsonl");
    std::fs::write(&input, "{\"kind\":\"prompt\",\"text\":\"one\"}\n").unwrap();
    let import = ["--store", "s", "import", "--format", "jsonl", "in.jsonl"];
    ok(&cairn(top, &import));
    let e = failed(&cairn(top, &import));
    assert!(
        e.contains("(import it again with --again)") && !e.contains("ImportOptions"),
        "{e}"
    );
}

/// A subcommand's `--help` lists its own options first: the global flags
/// (`--store`, `--quiet`, ...) and the `--in-memory` family (`--load`,
/// `--load-again`, ...) that every command accepts follow under headings
/// of their own, so `checkpoint --help` shows `--label` first.
#[test]
fn a_subcommands_help_shows_its_own_options_first() {
    let tmp = tempfile::tempdir().unwrap();
    let help = ok(&cairn(tmp.path(), &["checkpoint", "--help"]));
    let pos = |needle: &str| {
        help.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in:\n{help}"))
    };
    let own = pos("Options:");
    let global = pos("Global options:");
    let memory = pos("In-memory options (with --in-memory):");
    assert!(own < pos("--label") && pos("--label") < global, "{help}");
    assert!(global < pos("--store") && pos("--store") < memory, "{help}");
    assert!(
        memory < pos("--load <FILE>") && memory < pos("--load-again"),
        "{help}"
    );
}

/// `cairn checkpoint` under `CAIRN_MAX_FILE_BYTES`.
fn checkpoint_with_max(ws: &Path, max: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["checkpoint", "--json"])
        .current_dir(ws)
        .env_remove("CAIRN_STORE")
        .env("CAIRN_MAX_FILE_BYTES", max)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// `CAIRN_MAX_FILE_BYTES` sets the largest file a checkpoint captures
/// (what benches/scripts/big_files.sh raises to checkpoint a 1 GiB file):
/// a file over it is left out and named `too_large`; unset, the default
/// (256 MiB) captures it; a value that is not a number is refused, naming
/// the variable.
#[test]
fn max_file_bytes_from_the_environment_bounds_what_a_checkpoint_captures() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("small.txt"), "ten bytes!").unwrap();
    std::fs::write(ws.join("big.bin"), vec![7u8; 300]).unwrap();

    let c = &json_lines(&ok(&checkpoint_with_max(ws, "100")))[0];
    assert_eq!(c["files"], 1, "{c}");
    assert_eq!(c["not_captured"][0]["path"], "big.bin", "{c}");
    assert_eq!(c["not_captured"][0]["why"], "too_large", "{c}");

    let c = &json_lines(&ok(&cairn(ws, &["checkpoint", "--json"])))[0];
    assert_eq!(c["files"], 2, "{c}");
    assert_eq!(c["not_captured"].as_array().map(Vec::len), Some(0), "{c}");

    let o = checkpoint_with_max(ws, "lots");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("CAIRN_MAX_FILE_BYTES=\"lots\""),
        "{}",
        err(&o)
    );
}
