//! `cairn import --format codex` as a user runs it, on a small rollout
//! written for these tests in Codex CLI's shapes (`fixtures/codex/`):
//! session meta, turn context, prompts, replies, reasoning, shell calls
//! with their outputs and exit codes, a user's shell command, patches
//! that add, update, move and delete files, a diff that does not apply
//! (and a later one on the same file), a write outside the workspace,
//! unknown record types, a compaction and a malformed line.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{cairn, err, json_lines, ok};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/codex")
}

fn rollout() -> PathBuf {
    fixtures().join("sessions/2026/11/28/rollout-2026-11-28T10-00-00-sess1.jsonl")
}

fn import(ws: &Path, base: Option<&Path>, paths: &[&Path]) -> Value {
    let mut args = vec!["import", "--format", "codex", "--json"];
    if let Some(b) = base {
        args.extend(["--base", b.to_str().unwrap()]);
    }
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    serde_json::from_str(ok(&cairn(ws, &args)).trim()).unwrap()
}

fn show(ws: &Path, lsn: &Value, path: &str) -> String {
    ok(&cairn(ws, &["show", &format!("@{lsn}:{path}")]))
}

#[test]
fn a_sessions_directory_imports_with_exact_contents_and_again_adds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let base = fixtures().join("base");
    let r = import(ws, Some(&base), &[&fixtures().join("sessions")]);
    assert_eq!(r["files"], 1, "{r}");
    assert_eq!(r["lines"], 26, "{r}");
    assert_eq!(r["sessions"], serde_json::json!(["sess1"]));
    assert_eq!(
        r["unknown_types"],
        serde_json::json!({"event_msg:some_future_event": 1, "response_item:some_future_item": 1})
    );
    // The diff that does not apply, and the later one on the same file.
    let na = r["diffs_not_applied"].as_array().unwrap();
    assert_eq!(na.len(), 2, "{r}");
    assert_eq!(
        (na[0]["line"].as_u64(), na[0]["path"].as_str()),
        (Some(15), Some("README.md"))
    );
    assert!(
        na[0]["reason"].as_str().unwrap().contains("does not apply"),
        "{r}"
    );
    assert_eq!(na[1]["line"], 16);
    assert!(na[1]["reason"]
        .as_str()
        .unwrap()
        .contains("an earlier diff of it was not applied"));
    let count = r["count"].as_u64().unwrap();

    // Update (against --base), add, move with a diff, delete.
    let readme = json_lines(&ok(&cairn(ws, &["history", "README.md", "--json"])));
    assert_eq!(readme.len(), 3, "{readme:?}");
    assert_eq!(
        show(ws, &readme[0]["lsn"], "README.md"),
        "# demo\nnew line\n"
    );
    assert_eq!(readme[0]["model"], "gpt-5-codex");
    assert_eq!(readme[0]["tool"], "apply_patch");
    for r in &readme[1..] {
        assert!(r.get("after").is_none(), "no guessed contents: {r}");
        assert!(r["meta"]["contents"]
            .as_str()
            .unwrap()
            .starts_with("diff not applied"));
        assert!(r.get("diff").is_some(), "the diff is kept: {r}");
    }
    let hello = json_lines(&ok(&cairn(ws, &["history", "greet/hello.txt", "--json"])));
    let moved = hello.last().unwrap();
    assert_eq!(moved["kind"], "file.move");
    assert_eq!(moved["path"], "hello.txt");
    assert_eq!(show(ws, &moved["lsn"], "greet/hello.txt"), "hello\nworld\n");
    let notes = json_lines(&ok(&cairn(ws, &["history", "notes.txt", "--json"])));
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0]["kind"], "file.delete");
    let tree = ok(&cairn(ws, &["tree", "head"]));
    assert!(
        tree.contains("greet/hello.txt") && tree.contains("README.md"),
        "{tree}"
    );
    assert!(
        !tree.contains("notes.txt") && !tree.contains(" hello.txt"),
        "{tree}"
    );

    // The write outside the workspace: kept as given, history only.
    let out = json_lines(&ok(&cairn(ws, &["history", "/tmp/outside.txt", "--json"])));
    assert_eq!(out.len(), 1);
    assert!(!tree.contains("outside"), "{tree}");

    // Calls: ok and exit codes from outputs and exec_command_end; shell
    // calls keep their command and may change files no record names.
    let log = json_lines(&ok(&cairn(ws, &["log", "--json", "--session", "sess1"])));
    let calls: Vec<&Value> = log.iter().filter(|r| r["kind"] == "tool_call").collect();
    let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["shell", "apply_patch", "shell", "user_shell"]);
    assert_eq!(calls[0]["meta"]["command"], "ls");
    assert_eq!(calls[0]["meta"]["exit_code"], 0);
    assert_eq!(calls[0]["meta"]["may_change_unrecorded_files"], true);
    assert_eq!(calls[2]["ok"], false, "Exit code: 1");
    assert_eq!(calls[3]["meta"]["command"], "git status");
    let prompts: Vec<&Value> = log.iter().filter(|r| r["kind"] == "prompt").collect();
    assert_eq!(prompts.len(), 1, "the environment context is no prompt");
    assert_eq!(prompts[0]["text"], "add a greeting");
    let reply = log.iter().find(|r| r["kind"] == "reply").unwrap();
    assert_eq!(
        (reply["text"].as_str(), reply["model"].as_str()),
        (Some("Done."), Some("gpt-5-codex"))
    );
    let start = log.iter().find(|r| r["label"] == "session.start").unwrap();
    assert_eq!(start["meta"]["cli_version"], "0.60.0");
    assert_eq!(start["meta"]["cwd"], "/w");
    assert_eq!(log.iter().filter(|r| r["label"] == "compaction").count(), 1);

    // Again: nothing new, and nothing named again.
    let again = import(ws, Some(&base), &[&rollout()]);
    assert_eq!(again["count"], 0, "{again}");
    assert_eq!(again["already_recorded"], count, "{again}");
    assert_eq!(again["diffs_not_applied"], serde_json::json!([]));
}

#[test]
fn a_grown_rollout_adds_only_its_new_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let base = fixtures().join("base");
    let full = std::fs::read_to_string(rollout()).unwrap();
    let lines: Vec<&str> = full.lines().collect();
    let t = ws.join("rollout-grown.jsonl");
    std::fs::write(&t, lines[..13].join("\n") + "\n").unwrap();
    let first = import(ws, Some(&base), &[&t]);
    std::fs::write(&t, &full).unwrap();
    let second = import(ws, Some(&base), &[&t]);
    let whole = tempfile::tempdir().unwrap();
    ok(&cairn(whole.path(), &["init"]));
    let all = import(whole.path(), Some(&base), &[&t]);
    assert_eq!(
        first["count"].as_u64().unwrap() + second["count"].as_u64().unwrap(),
        all["count"].as_u64().unwrap(),
        "{first} {second} {all}"
    );
    let a = ok(&cairn(ws, &["show", "head:greet/hello.txt"]));
    assert_eq!(a, "hello\nworld\n");
}

/// Without `--base`, an update applies to what the store holds: here the
/// workspace's checkpoint, taken before the session.
#[test]
fn without_a_base_an_update_applies_to_what_the_store_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::write(ws.join("README.md"), "# demo\nold line\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "--label", "start"]));
    let r = import(ws, None, &[&rollout()]);
    let na: Vec<u64> = r["diffs_not_applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["line"].as_u64().unwrap())
        .collect();
    assert_eq!(na, [15, 16], "{r}");
    let readme = json_lines(&ok(&cairn(ws, &["history", "README.md", "--json"])));
    let edit = readme.iter().find(|r| r["kind"] == "file.edit").unwrap();
    assert_eq!(show(ws, &edit["lsn"], "README.md"), "# demo\nnew line\n");

    // And with neither, the first update is named, its contents unknown.
    let bare = tempfile::tempdir().unwrap();
    ok(&cairn(bare.path(), &["init"]));
    let r = import(bare.path(), None, &[&rollout()]);
    let first = &r["diffs_not_applied"][0];
    assert_eq!(first["line"], 12, "{r}");
    assert!(first["reason"].as_str().unwrap().contains("--base"), "{r}");
}

#[test]
fn a_malformed_line_names_file_and_line_and_records_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let bad = fixtures().join("bad.jsonl");
    let o = cairn(ws, &["import", "--format", "codex", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(err(&o).contains("bad.jsonl:2: not JSON"), "{}", err(&o));
    assert_eq!(ok(&cairn(ws, &["log", "--json"])), "");
    // A flag of another format is a usage error.
    let o = cairn(
        ws,
        &[
            "import",
            "--format",
            "codex",
            "--file-history",
            ".",
            bad.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
}

/// A rollout in the shape Codex CLI wrote before `{timestamp, type,
/// payload}` (a bare session meta, then bare response items and
/// `record_type: state` lines) is read with the same mapping, and
/// importing it again adds nothing.
#[test]
fn an_older_rollout_without_the_wrapping_is_read_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let f = fixtures().join("legacy/rollout-2025-05-07T17-24-21-5973b6c0.jsonl");
    let r = import(ws, None, &[&f]);
    let session = "5973b6c0-94b8-487b-a530-2aeb6098ae0e";
    assert_eq!(r["sessions"], serde_json::json!([session]), "{r}");
    assert_eq!(r["unknown_types"], serde_json::json!({}), "{r}");
    let log = json_lines(&ok(&cairn(ws, &["log", "--json", "--session", session])));
    let kinds: Vec<String> = log
        .iter()
        .map(|e| match e["label"].as_str() {
            Some(l) => format!("{}:{l}", e["kind"].as_str().unwrap()),
            None => e["kind"].as_str().unwrap().to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "custom:session.start",
            "custom:state",
            "prompt",
            "custom:state",
            "custom:reasoning",
            "tool_call",
            "tool_call",
            "reply",
            "custom:state"
        ],
        "{log:?}"
    );
    assert_eq!(log[0]["meta"]["instructions"], "Be brief.");
    assert_eq!(log[0]["meta"]["git"]["branch"], "main");
    assert_eq!(log[2]["text"], "list the files");
    let ts = &log[0]["ts"];
    assert!(
        log.iter().all(|e| &e["ts"] == ts),
        "items take the meta's time"
    );
    assert_eq!(log[5]["meta"]["command"], "ls");
    assert_eq!(
        (&log[5]["ok"], &log[6]["ok"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    assert_eq!(log[7]["text"], "There is a.txt.");
    let again = import(ws, None, &[&f]);
    assert_eq!(again["count"], 0, "{again}");
}
