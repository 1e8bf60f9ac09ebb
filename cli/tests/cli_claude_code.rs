//! `cairn import --format claude-code` as a user runs it, on small
//! transcripts written for these tests in Claude Code's shapes
//! (`fixtures/claude-code/`): creates, replaceAll, MultiEdit, NotebookEdit,
//! a subagent, a compaction, a rewind, an unknown record type, a write
//! outside the workspace, an edit whose patch disagrees, a malformed line.
//! Also the records of section 0: paths outside the workspace are kept and
//! are history only.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{cairn, cairn_stdin, err, json_lines, ok};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-code")
}

fn import(ws: &Path, paths: &[&Path]) -> Value {
    let history = fixtures().join("history");
    let mut args = vec![
        "import",
        "--format",
        "claude-code",
        "--json",
        "--file-history",
        history.to_str().unwrap(),
    ];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    serde_json::from_str(ok(&cairn(ws, &args)).trim()).unwrap()
}

#[test]
fn a_project_directory_imports_with_exact_contents_and_again_adds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let proj = fixtures().join("proj");
    let r = import(ws, &[&proj]);
    assert_eq!(r["files"], 2, "{r}");
    assert_eq!(
        r["sessions"],
        serde_json::json!(["s1", "s1:a1"]),
        "a subagent is its own session: {r}"
    );
    assert_eq!(r["unknown_types"], serde_json::json!({"weird-thing": 1}));
    assert_eq!(r["backups"], 1, "{r}");
    let disagree = r["contents_disagree"].as_array().unwrap();
    assert_eq!(disagree.len(), 1, "{r}");
    assert!(disagree[0].as_str().unwrap().ends_with("src/b.txt"), "{r}");
    let count = r["count"].as_u64().unwrap();
    assert!(count > 20, "{r}");

    // Create, replaceAll, then MultiEdit's edits in order.
    let hist = json_lines(&ok(&cairn(ws, &["history", "src/a.txt", "--json"])));
    let kinds: Vec<&str> = hist.iter().map(|h| h["kind"].as_str().unwrap()).collect();
    assert!(
        kinds.ends_with(&["file.create", "file.edit", "file.edit"]),
        "{kinds:?}"
    );
    let at = |i: usize| format!("@{}:src/a.txt", hist[hist.len() - 3 + i]["lsn"]);
    assert_eq!(ok(&cairn(ws, &["show", &at(0)])), "one\ntwo\none\n");
    assert_eq!(ok(&cairn(ws, &["show", &at(1)])), "uno\ntwo\nuno\n");
    assert_eq!(ok(&cairn(ws, &["show", &at(2)])), "uno\ntres\nuno\n");
    // Blame names the record (its tool) and the model of each line.
    let blame = json_lines(&ok(&cairn(ws, &["blame", "head", "src/a.txt", "--json"])));
    assert_eq!(blame.len(), 3);
    assert_eq!(blame[1]["lsn"], hist[hist.len() - 1]["lsn"]);
    assert_eq!(blame[1]["model"], "claude-opus-4-6");
    let rec = json_lines(&ok(&cairn(
        ws,
        &[
            "log",
            "--json",
            "--kind",
            "file.edit",
            "--path",
            "src/a.txt",
        ],
    )));
    assert_eq!(rec.last().unwrap()["tool"], "MultiEdit");

    // The edit whose patch disagrees holds no guessed contents.
    let b = json_lines(&ok(&cairn(ws, &["history", "src/b.txt", "--json"])));
    assert!(b.last().unwrap().get("after").is_none(), "{b:?}");
    assert_eq!(
        b.last().unwrap()["meta"]["contents"],
        "disagrees with structuredPatch: not recorded"
    );

    // The plan file outside the workspace: kept, history only.
    let plan = "/home/u/.claude/plans/p.md";
    let h = json_lines(&ok(&cairn(ws, &["history", plan, "--json"])));
    assert_eq!(h.len(), 1);
    assert_eq!(h[0]["kind"], "file.create");
    let o = cairn(ws, &["show", &format!("head:{plan}")]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("recorded as history only, outside the workspace"),
        "{}",
        err(&o)
    );
    let tree = ok(&cairn(ws, &["tree", "head"]));
    assert!(
        !tree.contains("p.md") && tree.contains("src/a.txt"),
        "{tree}"
    );

    // Compaction markers, a failed Bash call, the rewind's parent kept
    // (the prompt "try again" is a second child of the first prompt).
    let log = json_lines(&ok(&cairn(ws, &["log", "--json", "--session", "s1"])));
    let labels = log.iter().filter(|r| r["label"] == "compaction").count();
    assert_eq!(labels, 2, "the boundary and the summary");
    let bash: Vec<&Value> = log.iter().filter(|r| r["tool"] == "Bash").collect();
    assert_eq!(bash.len(), 2);
    assert_eq!(bash[0]["meta"]["may_change_unrecorded_files"], true);
    assert_eq!(bash[1]["ok"], false);
    let reply = log.iter().find(|r| r["kind"] == "reply").unwrap();
    assert_eq!(reply["text"], "I'll create it.", "one reply per message id");
    let rewound = log
        .iter()
        .filter(|r| r["meta"]["claude_code"]["parent_uuid"] == "u1")
        .filter(|r| r["kind"] != "checkpoint.create")
        .count();
    assert_eq!(
        rewound, 2,
        "two children of one parent (the point before a prompt shares its line's meta)"
    );

    // Again: nothing new.
    let again = import(ws, &[&proj]);
    assert_eq!(again["count"], 0, "{again}");
    assert_eq!(again["already_recorded"], count, "{again}");
}

#[test]
fn a_grown_transcript_adds_only_its_new_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let full = std::fs::read_to_string(fixtures().join("proj/s1.jsonl")).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    let t = ws.join("t.jsonl");
    std::fs::write(&t, lines[..5].join("\n") + "\n").unwrap();
    let first = import(ws, &[&t]);
    std::fs::write(&t, &full).unwrap();
    let second = import(ws, &[&t]);
    let whole = tempfile::tempdir().unwrap();
    ok(&cairn(whole.path(), &["init"]));
    let all = import(whole.path(), &[&t]);
    assert_eq!(
        first["count"].as_u64().unwrap() + second["count"].as_u64().unwrap(),
        all["count"].as_u64().unwrap(),
        "{first} {second} {all}"
    );
}

#[test]
fn a_malformed_line_names_file_and_line_and_records_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let bad = fixtures().join("bad.jsonl");
    let o = cairn(
        ws,
        &["import", "--format", "claude-code", bad.to_str().unwrap()],
    );
    assert!(!o.status.success());
    assert!(err(&o).contains("bad.jsonl:2: not JSON"), "{}", err(&o));
    assert_eq!(ok(&cairn(ws, &["log", "--json"])), "");
}

/// Regression (refused outside writes): `cairn record` refused the audit
/// record of a refused write outside the workspace. It is kept as given,
/// found by `log` and `history`, and is never part of the tree.
#[test]
fn a_refused_write_outside_the_workspace_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let line = r#"{"kind":"file.write","session":"x","path":"/etc/passwd","ok":false,"error_kind":"PathOutsideWorkspace"}"#;
    ok(&cairn_stdin(ws, &["record"], Some(line)));
    let h = json_lines(&ok(&cairn(ws, &["history", "/etc/passwd", "--json"])));
    assert_eq!(h.len(), 1);
    assert_eq!(h[0]["error_kind"], "PathOutsideWorkspace");
    let o = cairn(ws, &["show", "@1:/etc/passwd"]);
    assert!(
        err(&o).contains("`/etc/passwd` is recorded as history only, outside the workspace"),
        "{}",
        err(&o)
    );
    let o = cairn(ws, &["blame", "@1", "/etc/passwd"]);
    assert!(err(&o).contains("history only"), "{}", err(&o));
}

/// A rewind (two prompts with the same `parentUuid`) shows as a fork in
/// `cairn branches`: a point before each prompt, with no tree (the
/// transcript does not say what the files were), whose parent is the
/// point of the prompt the conversation continued from. A rollback to one
/// refuses, saying why; importing again adds no second point.
#[test]
fn a_rewound_conversation_shows_as_a_branch() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let t = fixtures().join("rewind/r1.jsonl");
    import(ws, &[&t]);
    let nodes = json_lines(&ok(&cairn(ws, &["branches", "--json"])));
    let labels: Vec<&str> = nodes.iter().map(|n| n["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        [
            "Before prompt 1",
            "Before prompt 2",
            "Before prompt 3",
            "Before prompt 4"
        ]
    );
    assert!(nodes.iter().all(|n| n["tree"] == false), "{nodes:?}");
    let (p1, p2, p3, p4) = (&nodes[0], &nodes[1], &nodes[2], &nodes[3]);
    assert!(p1["parent"].is_null(), "{p1}");
    assert_eq!(p1["children"], 2, "the rewind forks here: {nodes:?}");
    assert_eq!(p2["parent"], p1["lsn"]);
    assert_eq!(p3["parent"], p1["lsn"], "the rewound prompt: {p3}");
    assert_eq!(p4["parent"], p3["lsn"], "continues the rewound branch");

    let id = p2["id"].as_str().unwrap();
    let o = cairn(ws, &["rollback", id]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("a point of a conversation imported from its transcript")
            && err(&o).contains("does not say what the files were"),
        "{}",
        err(&o)
    );

    let again = import(ws, &[&t]);
    assert_eq!(again["count"], 0, "{again}");
    assert_eq!(
        json_lines(&ok(&cairn(ws, &["branches", "--json"]))).len(),
        4
    );
}
