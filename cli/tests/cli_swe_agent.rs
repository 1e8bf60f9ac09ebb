//! `cairn import --format swe-agent` as a user runs it, on a small
//! trajectory written for these tests in SWE-agent's shape
//! (`fixtures/swe-agent/`): steps with thought, action and observation,
//! the task in `history`, the model in `replay_config`, and a submission
//! that edits, creates, deletes and renames files, one of whose hunks does
//! not apply to the base; and a file that is not JSON.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{cairn, json_lines, ok};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/swe-agent")
}

fn import(ws: &Path, base: Option<&Path>, traj: &Path) -> Value {
    let mut args = vec!["import", "--format", "swe-agent", "--json"];
    if let Some(b) = base {
        args.extend(["--base", b.to_str().unwrap()]);
    }
    args.push(traj.to_str().unwrap());
    serde_json::from_str(ok(&cairn(ws, &args)).trim()).unwrap()
}

#[test]
fn a_trajectory_imports_its_steps_and_its_submission_against_the_base() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let base = fixtures().join("base");
    let traj = fixtures().join("calc-1.traj");
    let r = import(ws, Some(&base), &traj);
    assert_eq!(
        (r["files"].as_u64(), r["steps"].as_u64()),
        (Some(1), Some(4)),
        "{r}"
    );
    assert_eq!(r["sessions"], serde_json::json!(["calc-1"]));
    assert_eq!(r["submitted_files"], 5, "{r}");
    let na = r["diffs_not_applied"].as_array().unwrap();
    assert_eq!(na.len(), 1, "{r}");
    assert_eq!(na[0]["path"], "docs/notes.md");
    let count = r["count"].as_u64().unwrap();

    // Steps: thought, action, observation; the task as the prompt.
    let log = json_lines(&ok(&cairn(ws, &["log", "--json", "--session", "calc-1"])));
    let prompt = log.iter().find(|r| r["kind"] == "prompt").unwrap();
    assert_eq!(prompt["text"], "Fix add() in src/calc.py: it subtracts.");
    let actions: Vec<&str> = log
        .iter()
        .filter(|r| r["kind"] == "tool_call")
        .map(|r| r["tool"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["find_file", "edit", "python", "submit"]);
    let edit = log.iter().find(|r| r["tool"] == "edit").unwrap();
    assert_eq!(edit["latency_ms"], 500);
    assert_eq!(edit["model"], "claude-sonnet-4-5");
    assert_eq!(edit["meta"]["may_change_unrecorded_files"], true);
    assert_eq!(
        log.iter().filter(|r| r["label"] == "observation").count(),
        4
    );
    assert_eq!(log.iter().filter(|r| r["kind"] == "reply").count(), 4);
    let sub = log.iter().find(|r| r["label"] == "submission").unwrap();
    assert_eq!(sub["text"], "submitted");
    assert!(sub.get("diff").is_some());

    // The submission's files, with exact contents.
    let show = |p: &str| ok(&cairn(ws, &["show", &format!("head:{p}")]));
    assert_eq!(
        show("src/calc.py"),
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    );
    assert_eq!(
        show("src/new_test.py"),
        "from calc import add\nassert add(1, 2) == 3\n"
    );
    assert_eq!(show("modern.py"), "NAME = 'modern'\nVALUE = 1\n");
    let old = json_lines(&ok(&cairn(ws, &["history", "old.txt", "--json"])));
    assert_eq!(old.last().unwrap()["kind"], "file.delete", "{old:?}");
    let notes = json_lines(&ok(&cairn(ws, &["history", "docs/notes.md", "--json"])));
    let notes = notes.last().unwrap();
    assert_eq!(notes["kind"], "file.edit");
    assert!(
        notes.get("after").is_none(),
        "no guessed contents: {notes:?}"
    );
    assert!(notes["meta"]["contents"]
        .as_str()
        .unwrap()
        .starts_with("diff not applied"));

    // Again: nothing new.
    let again = import(ws, Some(&base), &traj);
    assert_eq!(
        (again["count"].as_u64(), again["already_recorded"].as_u64()),
        (Some(0), Some(count))
    );
}

#[test]
fn without_a_base_the_submission_is_a_patch_only_and_a_grown_trajectory_adds_its_new_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    // SWE-agent rewrites the file after each step: first two steps, then all.
    let traj = ws.join("calc-1.traj");
    std::fs::copy(fixtures().join("calc-1.partial.json"), &traj).unwrap();
    let first = import(ws, None, &traj);
    assert_eq!(first["steps"], 2);
    std::fs::copy(fixtures().join("calc-1.traj"), &traj).unwrap();
    let second = import(ws, None, &traj);
    assert_eq!(second["steps"], 4);
    assert!(second["already_recorded"].as_u64().unwrap() > 0, "{second}");
    assert_eq!(second["submitted_files"], 0);
    assert_eq!(
        second["submissions_without_base"],
        serde_json::json!([traj.to_str().unwrap()])
    );
    let whole = tempfile::tempdir().unwrap();
    ok(&cairn(whole.path(), &["init"]));
    let all = import(whole.path(), None, &traj);
    assert_eq!(
        first["count"].as_u64().unwrap() + second["count"].as_u64().unwrap(),
        all["count"].as_u64().unwrap(),
        "{first} {second} {all}"
    );
    let files = ok(&cairn(ws, &["log", "--json", "--kind", "file.edit"]));
    assert_eq!(files, "", "no file events without a base");
}

#[test]
fn a_file_that_is_not_json_is_named_and_records_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let bad = fixtures().join("bad.traj");
    let o = cairn(
        ws,
        &["import", "--format", "swe-agent", bad.to_str().unwrap()],
    );
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.traj:3:3: not JSON"), "{e}");
    assert_eq!(ok(&cairn(ws, &["log", "--json"])), "");
}
