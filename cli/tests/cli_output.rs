//! What the human-readable output of `diff`, `history`, `tree` and
//! `rollback` shows: every changed path (an empty one too), a directory's
//! whole history however it is typed, and workspace file names that cannot
//! drive the terminal (found by the session-11 user trial, P2, P3 and P8),
//! and what `-q` leaves of every command's output (P14.17).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;

fn cairn(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn cairn_stdin(dir: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Stdout of a command that must succeed, as bytes (a raw escape in it is
/// what some tests look for).
fn ok(o: &Output) -> Vec<u8> {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout.clone()
}

fn text(o: &Output) -> String {
    String::from_utf8(ok(o)).unwrap()
}

fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn diff_names_an_empty_file_added_or_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    std::fs::write(ws.join("empty.txt"), "").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2
    let c: Vec<String> = json_lines(&text(&cairn(ws, &["checkpoints", "--json"])))
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let (c1, c2) = (c[0].as_str(), c[1].as_str());

    assert_eq!(
        text(&cairn(ws, &["diff", c1, c2])),
        "empty.txt added (empty)\n"
    );
    assert_eq!(
        text(&cairn(ws, &["diff", c1, c2, "--", "empty.txt"])),
        "empty.txt added (empty)\n"
    );
    assert_eq!(
        text(&cairn(ws, &["diff", c2, c1])),
        "empty.txt removed (empty)\n"
    );
    // `--json` is unchanged: the same path, an empty unified diff.
    let j = json_lines(&text(&cairn(ws, &["diff", c1, c2, "--json"])));
    assert_eq!(j.len(), 1);
    assert_eq!(
        (&j[0]["path"], &j[0]["status"], &j[0]["unified"]),
        (
            &serde_json::json!("empty.txt"),
            &serde_json::json!("added"),
            &serde_json::json!("")
        )
    );

    // An empty file replaced by a directory: both paths are named.
    std::fs::remove_file(ws.join("empty.txt")).unwrap();
    std::fs::create_dir(ws.join("empty.txt")).unwrap();
    std::fs::write(ws.join("empty.txt/inner"), "in\n").unwrap();
    let c3 = json_lines(&text(&cairn(ws, &["checkpoint", "--json"])))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let d = text(&cairn(ws, &["diff", c2, &c3]));
    assert!(d.starts_with("empty.txt removed (empty)\n"), "{d}");
    assert!(d.contains("+++ b/empty.txt/inner\n"), "{d}");
}

/// A move made by a shell command (`mv`), which only the next checkpoint
/// sees: `diff` shows it as a rename, `blame` keeps the lines' records
/// from before it, and `history --follow` goes back through it.
#[test]
fn a_shell_move_is_a_rename_to_diff_blame_and_history() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    let edit = r#"{"kind":"file.edit","path":"a.txt","model":"m1","session":"agent"}"#;
    ok(&cairn_stdin(ws, &["record", "-q"], &format!("{edit}\n"))); // @1
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2
    std::fs::rename(ws.join("a.txt"), ws.join("b.txt")).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c3
    std::fs::write(ws.join("b.txt"), "one\ntwo\nthree\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c4

    assert_eq!(
        text(&cairn(ws, &["diff", "c2", "c3"])),
        "Renamed a.txt -> b.txt (contents unchanged)\n"
    );
    let j = json_lines(&text(&cairn(ws, &["diff", "c2", "c3", "--json"])));
    let ends: Vec<_> = j
        .iter()
        .map(|d| {
            (
                &d["path"],
                &d["status"],
                &d["renamed_from"],
                &d["renamed_to"],
            )
        })
        .collect();
    let s = |v: &str| serde_json::json!(v);
    let none = serde_json::Value::Null;
    assert_eq!(
        ends,
        [
            (&s("a.txt"), &s("removed"), &none, &s("b.txt")),
            (&s("b.txt"), &s("added"), &s("a.txt"), &none),
        ]
    );
    // The lines b.txt brought from a.txt are c2's (the checkpoint that
    // first held them), not the move's.
    let blame = json_lines(&text(&cairn(ws, &["blame", "head", "b.txt", "--json"])));
    let by: Vec<u64> = blame.iter().map(|l| l["lsn"].as_u64().unwrap()).collect();
    assert_eq!(by, [2, 2, 4]);
    let follow = json_lines(&text(&cairn(
        ws,
        &["history", "--follow", "b.txt", "--json"],
    )));
    let lsns: Vec<u64> = follow.iter().map(|r| r["lsn"].as_u64().unwrap()).collect();
    assert_eq!(lsns, [1, 3]);
    // With --checkpoints, also the checkpoints that changed it under
    // either name: c2 (a.txt first captured), c3 (the move), c4 (the edit).
    let both = ["history", "--follow", "--checkpoints", "b.txt", "--json"];
    let lsns: Vec<u64> = json_lines(&text(&cairn(ws, &both)))
        .iter()
        .map(|r| r["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(lsns, [1, 2, 3, 4]);
}

#[test]
fn a_file_moved_and_edited_in_one_step_is_a_similar_rename() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let body: String = (1..=9).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.join("util.rs"), &body).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
                                           // `git mv util.rs helpers.rs` and one line fixed, before the next
                                           // checkpoint: one path gone, one new, 8 of 9 lines alike.
    std::fs::remove_file(ws.join("util.rs")).unwrap();
    std::fs::write(
        ws.join("helpers.rs"),
        body.replace("line 5\n", "line five\n"),
    )
    .unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2

    let shown = text(&cairn(ws, &["diff", "c1", "c2"]));
    let mut lines = shown.lines();
    assert_eq!(
        lines.next(),
        Some("Renamed util.rs -> helpers.rs (84% similar)"),
        "{shown}"
    );
    assert_eq!(lines.next(), Some("--- a/util.rs"), "{shown}");
    assert_eq!(lines.next(), Some("+++ b/helpers.rs"), "{shown}");
    assert!(shown.contains("\n-line 5\n+line five\n"), "{shown}");
    // Nothing else: the two ends are one rename, not an add and a remove.
    assert!(!shown.contains("/dev/null"), "{shown}");

    let j = json_lines(&text(&cairn(ws, &["diff", "c1", "c2", "--json"])));
    assert_eq!(j.len(), 2, "{j:?}");
    let (added, removed) = (&j[0], &j[1]);
    assert_eq!(
        (&added["path"], &added["renamed_from"]),
        (
            &serde_json::json!("helpers.rs"),
            &serde_json::json!("util.rs")
        )
    );
    assert_eq!(removed["renamed_to"], "helpers.rs");
    assert_eq!(
        (&added["similarity"], &removed["similarity"]),
        (&serde_json::json!(84), &serde_json::json!(84))
    );
    let u = added["rename_unified"].as_str().unwrap();
    assert!(u.starts_with("--- a/util.rs\n+++ b/helpers.rs\n"), "{u}");
    // The ends' own diffs are as before: the whole file added, removed.
    assert!(added["unified"]
        .as_str()
        .unwrap()
        .starts_with("--- /dev/null"));
    assert!(removed.get("rename_unified").is_none());

    // Blame keeps c1 for the lines the move brought, c2 for the edit.
    let blame = json_lines(&text(&cairn(
        ws,
        &["blame", "head", "helpers.rs", "--json"],
    )));
    let by: Vec<u64> = blame.iter().map(|l| l["lsn"].as_u64().unwrap()).collect();
    assert_eq!(by, [1, 1, 1, 1, 2, 1, 1, 1, 1]);
    let follow = [
        "history",
        "--follow",
        "--checkpoints",
        "helpers.rs",
        "--json",
    ];
    let lsns: Vec<u64> = json_lines(&text(&cairn(ws, &follow)))
        .iter()
        .map(|r| r["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(lsns, [1, 2]);

    // Rewritten beyond half, it is a remove and an add again.
    std::fs::write(ws.join("helpers.rs"), "all\nnew\n").unwrap();
    std::fs::rename(ws.join("helpers.rs"), ws.join("other.rs")).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c3
    let shown = text(&cairn(ws, &["diff", "c2", "c3"]));
    assert!(!shown.contains("Renamed"), "{shown}");
    assert!(shown.contains("+++ b/other.rs"), "{shown}");

    // Too many files each way to compare them all: exact renames only,
    // and a note on stderr says so.
    for i in 0..501 {
        std::fs::write(ws.join(format!("gone{i}")), format!("gone {i}\n")).unwrap();
    }
    std::fs::write(ws.join("moved"), "kept as it was\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c4
    for i in 0..501 {
        std::fs::remove_file(ws.join(format!("gone{i}"))).unwrap();
        std::fs::write(ws.join(format!("new{i}")), format!("new {i}\n")).unwrap();
    }
    std::fs::rename(ws.join("moved"), ws.join("moved2")).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c5
    let o = cairn(ws, &["diff", "c4", "c5"]);
    ok(&o);
    assert!(text(&o).contains("Renamed moved -> moved2 (contents unchanged)"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("note: 501 files removed and 501 added are too many to compare"),
        "{err}"
    );
}

#[test]
fn history_of_a_directory_is_the_same_with_or_without_its_slash() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::create_dir(ws.join("d")).unwrap();
    std::fs::write(ws.join("d/f"), "x\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    std::fs::remove_dir_all(ws.join("d")).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2
    let kinds = |path: &str| -> Vec<(u64, String)> {
        json_lines(&text(&cairn(
            ws,
            &["history", path, "--checkpoints", "--json"],
        )))
        .iter()
        .map(|r| {
            (
                r["lsn"].as_u64().unwrap(),
                r["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
    };
    let before = kinds("d");
    assert_eq!(before.len(), 2, "{before:?}");
    // The rollback recreates d/, and its record names `d` itself.
    ok(&cairn(ws, &["rollback", "-q", "c1"]));
    let rb = json_lines(&text(&cairn(ws, &["log", "--kind", "rollback", "--json"])));
    assert!(
        rb[0]["files"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("d")),
        "{rb:?}"
    );
    let with_slash = kinds("d/");
    assert_eq!(with_slash.len(), 3, "{with_slash:?}");
    assert_eq!(with_slash[..2], before[..]);
    assert_eq!(with_slash[2].1, "rollback");
    assert_eq!(kinds("d"), with_slash);
    assert_eq!(kinds("./d"), with_slash);
}

/// The names' bytes that must never reach the terminal raw.
const NASTY: [&str; 3] = ["zz\x1b[1A\x1b[2K", "nl\nname", "bell\x07name"];
/// How each is shown: quoted, with C escapes, as git quotes it (`diff`
/// quotes its headers whole: `+++ "b/nl\nname"`).
const SHOWN: [&str; 3] = ["zz\\033[1A\\033[2K\"", "nl\\nname\"", "bell\\aname\""];

/// No control byte but the line ends, and each of `shown` in `out`.
fn assert_safe_naming(what: &str, out: &[u8], shown: &[&str]) {
    let s = String::from_utf8_lossy(out);
    assert!(
        !out.iter().any(|b| b.is_ascii_control() && *b != b'\n'),
        "{what}: a raw control byte in {s:?}"
    );
    for shown in shown {
        assert!(s.contains(shown), "{what}: {shown} not in {s:?}");
    }
    // The name with a newline is never split into a line of its own.
    assert!(
        !s.lines().any(|l| l.trim_end_matches('"') == "name"),
        "{what}: {s:?}"
    );
}

/// No control byte but the line ends, and each nasty name shown quoted.
fn assert_safe(what: &str, out: &[u8]) {
    assert_safe_naming(what, out, &SHOWN);
}

#[test]
fn file_names_cannot_drive_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a"), "a\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    for name in NASTY {
        std::fs::write(ws.join(name), "line\n").unwrap();
    }
    let c2 = json_lines(&text(&cairn(ws, &["checkpoint", "--json"])))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    assert_safe("tree", &ok(&cairn(ws, &["tree", &c2])));
    assert_safe("diff", &ok(&cairn(ws, &["diff", "c1", &c2])));
    assert_safe_naming(
        "diff -- PATH",
        &ok(&cairn(ws, &["diff", "c1", &c2, "--", NASTY[1]])),
        &[SHOWN[1]],
    );
    assert_safe(
        "rollback --dry-run",
        &ok(&cairn(ws, &["rollback", "c1", "--dry-run"])),
    );
    assert_safe("rollback", &ok(&cairn(ws, &["rollback", "c1"])));
    // Records naming them: `log` and `history` show them quoted too.
    let lines: String = NASTY
        .iter()
        .map(|n| {
            format!(
                "{}\n",
                serde_json::json!({"kind": "file.delete", "path": n})
            )
        })
        .collect();
    ok(&cairn_stdin(ws, &["record"], &lines));
    assert_safe("log", &ok(&cairn(ws, &["log", "--kind", "file.delete"])));
    assert_safe_naming(
        "history",
        &ok(&cairn(ws, &["history", NASTY[1]])),
        &[SHOWN[1]],
    );

    // `--json` keeps each name exact.
    let tree = json_lines(&text(&cairn(ws, &["tree", &c2, "--json"])));
    for name in NASTY {
        assert!(tree.iter().any(|e| e["path"] == name), "{name:?}: {tree:?}");
    }
    let d = json_lines(&text(&cairn(ws, &["diff", "c1", &c2, "--json"])));
    for name in NASTY {
        assert!(d.iter().any(|e| e["path"] == name), "{name:?}: {d:?}");
    }
}

/// A command that must succeed and print nothing at all.
fn silent(what: &str, o: &Output) {
    ok(o);
    assert!(
        o.stdout.is_empty() && o.stderr.is_empty(),
        "{what}: stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Trial 11 P14.17: with `-q`, a command that changes or checks the store
/// prints nothing on success; what is the command's answer (`log`, `show`,
/// `checkpoints`, `record --ack`, a dry run's plan), everything `--json`
/// prints, warnings, damage and errors still are, with the same exit codes.
#[test]
fn quiet_commands_print_nothing_on_success_but_their_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    silent("init", &cairn(ws, &["init", "-q"]));
    silent("init again", &cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(ws.join("a"), "one\n").unwrap();
    std::fs::write(ws.join("gen.txt"), "v1").unwrap();
    silent("track", &cairn(ws, &["track", "-q", "a"]));
    silent("checkpoint", &cairn(ws, &["checkpoint", "-q"])); // c1
    std::fs::write(ws.join("a"), "two\n").unwrap();
    std::fs::write(ws.join("b"), "new\n").unwrap();
    silent("checkpoint", &cairn(ws, &["-q", "checkpoint"])); // c2
    silent("verify", &cairn(ws, &["verify", "-q"]));
    let v: serde_json::Value =
        serde_json::from_str(&text(&cairn(ws, &["verify", "-q", "--json"]))).unwrap();
    let head = v["head_hash"].as_str().unwrap();
    silent(
        "verify --head",
        &cairn(ws, &["verify", "-q", "--head", head]),
    );
    silent("gc", &cairn(ws, &["gc", "-q", "--keep-per-session", "5"]));
    silent("repair", &cairn(ws, &["repair", "-q"]));

    // The answers.
    assert!(text(&cairn(ws, &["log", "-q"])).contains("checkpoint.create"));
    assert!(text(&cairn(ws, &["checkpoints", "-q"])).contains("c2"));
    assert_eq!(text(&cairn(ws, &["show", "-q", "c1:a"])), "one\n");
    let plan = text(&cairn(ws, &["rollback", "-q", "--dry-run", "c1"]));
    assert!(
        plan.contains("delete b") && plan.contains("dry run:"),
        "{plan}"
    );
    let o = cairn_stdin(ws, &["record", "-q", "--ack"], "{\"kind\":\"prompt\"}\n");
    let acked = text(&o);
    assert!(
        acked.trim().parse::<u64>().is_ok() && o.stderr.is_empty(),
        "{acked}"
    );
    silent(
        "record",
        &cairn_stdin(ws, &["record", "-q"], "{\"kind\":\"prompt\"}\n"),
    );
    // --json is printed whatever -q says.
    for args in [
        &["checkpoint", "-q", "--json"][..],
        &["gc", "-q", "--json"],
        &["repair", "-q", "--json"],
    ] {
        let out = text(&cairn(ws, args));
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "{args:?}: {out}"
        );
    }

    // A rollback that keeps a path says so, as a warning.
    std::fs::write(ws.join(".gitignore"), "*.log\ngen.txt\n").unwrap();
    std::fs::write(ws.join("gen.txt"), "the user's v2").unwrap();
    let o = cairn(ws, &["rollback", "-q", "c1"]);
    assert!(ok(&o).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("warning: kept gen.txt as it is on disk"),
        "{err}"
    );
    assert!(!ws.join("b").exists());
    // So does gc a budget it cannot meet.
    let o = cairn(ws, &["gc", "-q", "--max-bytes", "1"]);
    assert!(ok(&o).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("warning: budget not met:"), "{err}");
    // Errors are printed, with their exit code.
    let o = cairn(ws, &["rollback", "-q", "c99"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no checkpoint c99"));

    // Damage is printed, by verify and by repair, which says what it lost.
    common::flip_a_byte_mid_log(ws);
    let o = cairn(ws, &["verify", "-q"]);
    assert_eq!(o.status.code(), Some(3));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("CORRUPT") && !out.contains("head:"), "{out}");
    let out = text(&cairn(ws, &["repair", "-q"]));
    assert!(out.contains("lost LSN"), "{out}");
    silent("verify after repair", &cairn(ws, &["verify", "-q"]));

    // A file a checkpoint cannot capture (over the size limit: a sparse
    // file, so nothing is written) is named, as a warning.
    std::fs::File::create(ws.join("big"))
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let o = cairn(ws, &["checkpoint", "-q"]);
    assert!(ok(&o).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("warning: not captured in c") && err.contains("big (too large)"),
        "{err}"
    );
}

/// Trial 13 N5: after gc discarded a file's earlier checkpoints, blame
/// marks the lines of the first version it can still read as `<=@N`
/// (`history_cut` in --json), not as written by that checkpoint's session.
#[test]
fn blame_marks_the_lines_that_were_there_before_history_began() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    // The user's own file, before any agent action; a file a record wrote
    // before the first checkpoint; then the first checkpoint.
    std::fs::write(ws.join("notes.txt"), "by the user\nlast year\n").unwrap();
    std::fs::write(ws.join("w.txt"), "agent line\n").unwrap();
    ok(&cairn_stdin(
        ws,
        &["record", "-q"],
        r#"{"kind":"file.write","path":"w.txt","model":"m0"}"#,
    ));
    ok(&cairn(
        ws,
        &["checkpoint", "-q", "--session", "t1", "--model", "gpt-x"],
    ));
    // An agent turn edits one line; a shell creates a file the second
    // checkpoint finds (written within history, by that turn).
    std::fs::write(ws.join("notes.txt"), "by the user\nthis year\n").unwrap();
    std::fs::write(ws.join("new.txt"), "made by a shell\n").unwrap();
    ok(&cairn(
        ws,
        &["checkpoint", "-q", "--session", "t1", "--model", "gpt-y"],
    ));
    let who = |path: &str| -> Vec<(u64, bool, Option<String>)> {
        json_lines(&text(&cairn(ws, &["blame", "head", path, "--json"])))
            .iter()
            .map(|l| {
                (
                    l["lsn"].as_u64().unwrap(),
                    l["before_history"].as_bool().unwrap(),
                    l["model"].as_str().map(str::to_string),
                )
            })
            .collect()
    };
    assert_eq!(
        who("notes.txt"),
        [(2, true, None), (3, false, Some("gpt-y".into()))]
    );
    // Named by a record (without its contents) before the first
    // checkpoint found it: written within history.
    assert_eq!(who("w.txt"), [(2, false, Some("gpt-x".into()))]);
    assert_eq!(who("new.txt"), [(3, false, Some("gpt-y".into()))]);
    let shown = text(&cairn(ws, &["blame", "head", "notes.txt"]));
    let first = shown.lines().next().unwrap();
    assert!(
        first.starts_with("^@2 ") && first.contains(" - "),
        "{shown}"
    );
    // A rollback to the first checkpoint brings the line back still
    // marked as older than the history.
    ok(&cairn(ws, &["rollback", "c2", "-q"]));
    let back = who("notes.txt");
    assert_eq!(back.len(), 2);
    assert!(
        back.iter()
            .all(|(lsn, before, model)| *lsn == 2 && *before && model.is_none()),
        "{back:?}"
    );
}

#[test]
fn blame_marks_the_lines_whose_history_gc_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let mut body = String::new();
    for i in 1..=4 {
        body += &format!("line {i}\n");
        std::fs::write(ws.join("f.txt"), &body).unwrap();
        ok(&cairn(ws, &["checkpoint", "-q", "--session", "s"]));
    }
    let before = json_lines(&text(&cairn(ws, &["blame", "head", "f.txt", "--json"])));
    let got: Vec<(u64, bool)> = before
        .iter()
        .map(|l| {
            (
                l["lsn"].as_u64().unwrap(),
                l["history_cut"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(1, false), (2, false), (3, false), (4, false)]);
    ok(&cairn(ws, &["gc", "-q", "--keep-per-session", "1"]));
    let lines = json_lines(&text(&cairn(ws, &["blame", "head", "f.txt", "--json"])));
    let got: Vec<(u64, bool)> = lines
        .iter()
        .map(|l| {
            (
                l["lsn"].as_u64().unwrap(),
                l["history_cut"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(4, true), (4, true), (4, true), (4, true)]);
    let shown = text(&cairn(ws, &["blame", "head", "f.txt"]));
    assert!(shown.lines().all(|l| l.starts_with("<=@4 ")), "{shown}");
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Trial 15 U4: a file event recorded without its contents (as after
/// `cairn track`) leaves the point's tree with the file as it was before,
/// or without it: `show`, `diff`, `tree` and `blame` say so rather than
/// answer as if nothing had happened.
#[test]
fn records_without_contents_are_named_by_show_diff_tree_and_blame() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q", "--label", "T1"]));
    std::fs::write(ws.join("a.txt"), "one\nTWO\n").unwrap();
    ok(&cairn_stdin(
        ws,
        &["record", "-q"],
        r#"{"kind":"file.write","path":"a.txt","model":"mA"}"#,
    ));
    ok(&cairn_stdin(
        ws,
        &["record", "-q"],
        r#"{"kind":"file.create","path":"new.txt"}"#,
    ));
    let written = "a.txt was written at @2 (file.write) by a record without its contents";

    let o = cairn(ws, &["show", "@2:a.txt"]);
    assert_eq!(text(&o), "one\ntwo\n");
    assert!(
        stderr(&o).contains(written) && stderr(&o).contains("from before that record"),
        "{}",
        stderr(&o)
    );
    let o = cairn(ws, &["show", "@3:new.txt"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o)
            .contains("new.txt was created at @3 (file.create) by a record without its contents"),
        "{}",
        stderr(&o)
    );

    let o = cairn(ws, &["diff", "@1", "@2"]);
    assert_eq!(text(&o), "no differences\n");
    let e = stderr(&o);
    assert!(
        e.contains("the diff cannot show those changes: a.txt (@2 file.write)"),
        "{e}"
    );
    assert!(!e.contains("`head` is the state"), "{e}");
    // Filtered to another path, the note is not given.
    let o = cairn(ws, &["diff", "@1", "@3", "--", "new.txt"]);
    assert!(
        stderr(&o).contains("new.txt (@3 file.create)") && !stderr(&o).contains("a.txt"),
        "{}",
        stderr(&o)
    );

    let o = cairn(ws, &["tree", "@3"]);
    assert!(text(&o).contains("a.txt") && !text(&o).contains("new.txt"));
    assert!(
        stderr(&o).contains("2 files were written by records without the new contents"),
        "{}",
        stderr(&o)
    );

    let o = cairn(ws, &["blame", "@3", "a.txt"]);
    assert!(text(&o).contains("two"));
    assert!(stderr(&o).contains(written), "{}", stderr(&o));

    // Once a checkpoint captures them, nothing is left to say at head.
    ok(&cairn(ws, &["checkpoint", "-q"]));
    for args in [
        &["show", "head:a.txt"][..],
        &["tree", "head"],
        &["blame", "head", "a.txt"],
    ] {
        let o = cairn(ws, args);
        assert!(
            o.status.success() && !stderr(&o).contains("without"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let o = cairn(ws, &["diff", "@1", "head"]);
    assert!(text(&o).contains("+TWO"));
    // The checkpoint captured what those records wrote: no note.
    assert!(
        !stderr(&o).contains("without the new contents"),
        "{}",
        stderr(&o)
    );
}

/// Trial 15 U8: a `checkpoint.create` imported from another tool's log
/// holds no files; every command names it as such, and `log` takes it as
/// a bound like any record.
#[test]
fn imported_checkpoint_records_are_named_as_such_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(
        ws.join("s.cx"),
        "{\"ts\":1700000000000,\"action\":\"prompt\",\"ok\":true}\n{\"ts\":1700000000013,\"action\":\"snapshot:create\",\"ok\":true}\n",
    )
    .unwrap();
    ok(&cairn(
        ws,
        &["import", "-q", "--format", "cortexide", "s.cx"],
    ));
    let listed = text(&cairn(ws, &["checkpoints"]));
    assert!(
        listed.contains("no checkpoints of this store yet"),
        "{listed}"
    );
    assert!(
        listed.contains("imported checkpoint records") && listed.contains("  c2 "),
        "{listed}"
    );
    let o = cairn(ws, &["checkpoints", "--json"]);
    assert_eq!(text(&o), "");
    assert!(
        stderr(&o).contains("1 checkpoint record imported"),
        "{}",
        stderr(&o)
    );
    for args in [
        &["rollback", "c2", "--dry-run"][..],
        &["branches", "c2"],
        &["tree", "c2"],
    ] {
        let o = cairn(ws, args);
        assert!(!o.status.success(), "{args:?}");
        let e = stderr(&o);
        assert!(
            e.contains("without a manifest (imported from another tool's audit log)"),
            "{args:?}: {e}"
        );
        assert!(!e.contains("no checkpoint c2"), "{args:?}: {e}");
    }
    let until = json_lines(&text(&cairn(ws, &["log", "--until", "c2", "--json"])));
    assert_eq!(until.len(), 2);
    let since = json_lines(&text(&cairn(ws, &["log", "--since", "c2", "--json"])));
    assert_eq!(since.len(), 1);
    // An id that names no checkpoint record at all is still refused.
    let o = cairn(ws, &["log", "--until", "c1"]);
    assert!(!o.status.success(), "{}", stderr(&o));
}

/// Trial 15 U9: a diff limited to a path that names nothing at either
/// point is refused, as a rollback limited to it is, rather than answered
/// with "no differences".
#[test]
fn diff_refuses_a_path_that_names_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.rs"), "a\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    std::fs::write(ws.join("src/a.rs"), "b\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let o = cairn(ws, &["diff", "c1", "c2", "--", "nothere"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("`nothere` names no file at LSN 1 or at LSN 2"),
        "{}",
        stderr(&o)
    );
    // A directory, a file, and a file that exists at one point only, match.
    for p in ["src", "src/", "src/a.rs"] {
        assert!(
            text(&cairn(ws, &["diff", "c1", "c2", "--", p])).contains("+b"),
            "{p}"
        );
    }
    std::fs::write(ws.join("later.txt"), "x\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    assert!(text(&cairn(ws, &["diff", "c1", "c3", "--", "later.txt"])).contains("+x"));
}

/// Writes `contents` to `f` in `ws` and checkpoints it.
fn checkpoint_f(ws: &Path, contents: &str) {
    std::fs::write(ws.join("f"), contents).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
}

/// Trial 16 D2: blame numbers lines split at `\n` only, as the line diff
/// compares them: a lone `\r` inside a line (which the diff crate's own
/// line split ended a line at) no longer shifts the records credited to
/// the lines after it.
#[test]
fn blame_credits_the_lines_of_a_file_with_a_lone_cr() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    checkpoint_f(ws, "a\rb\n"); // @1
    checkpoint_f(ws, "a\rc\n"); // @2: line 1 changes
    checkpoint_f(ws, "a\rc\nz\n"); // @3: adds line 2
    let lines = json_lines(&text(&cairn(ws, &["blame", "head", "f", "--json"])));
    let by: Vec<(u64, &str)> = lines
        .iter()
        .map(|l| (l["lsn"].as_u64().unwrap(), l["text"].as_str().unwrap()))
        .collect();
    assert_eq!(by, [(2, "a\rc"), (3, "z")]);
    let shown = text(&cairn(ws, &["blame", "head", "f"]));
    let at: Vec<&str> = shown
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(at, ["@2", "@3"], "{shown:?}");
}

/// Trial 16 D3: a line with a lone `\r` is one line of the unified diff,
/// as `git diff` writes it, and the printed diff is a patch `patch`
/// applies.
#[test]
fn a_diff_keeps_a_line_with_a_lone_cr_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    checkpoint_f(ws, "keep\nold\rtail\n"); // c1
    checkpoint_f(ws, "keep\nnew\rtail\n"); // c2
    let hunk = "@@ -1,2 +1,2 @@\n keep\n-old\rtail\n+new\rtail\n";
    let j = json_lines(&text(&cairn(ws, &["diff", "c1", "c2", "--json"])));
    assert_eq!(
        j[0]["unified"],
        serde_json::json!(format!("--- a/f\n+++ b/f\n{hunk}"))
    );
    let shown = text(&cairn(ws, &["diff", "c1", "c2"]));
    assert_eq!(shown, format!("--- a/f\n+++ b/f\n{hunk}"));
    applies_as_a_patch("keep\nold\rtail\n", &shown, "keep\nnew\rtail\n");

    // A last line ending in a lone `\r` is a line without a newline.
    checkpoint_f(ws, "keep\nend\r"); // c3
    let shown = text(&cairn(ws, &["diff", "c2", "c3"]));
    assert_eq!(
        shown,
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n keep\n-new\rtail\n+end\r\n\\ No newline at end of file\n"
    );
    applies_as_a_patch("keep\nnew\rtail\n", &shown, "keep\nend\r");
}

/// Applies `diff` to a file `f` holding `before` with `patch` (in a
/// directory of its own, outside the workspace), when the machine has it,
/// and checks that the file then holds `after`.
fn applies_as_a_patch(before: &str, diff: &str, after: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("f"), before).unwrap();
    std::fs::write(dir.join("p.diff"), diff).unwrap();
    let run = Command::new("patch")
        .args(["-p1", "--binary", "-i", "p.diff"])
        .current_dir(dir)
        .output();
    let Ok(o) = run else {
        eprintln!("`patch` is not installed: the diff is not applied");
        return;
    };
    assert!(
        o.status.success(),
        "patch: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), after);
}

/// Trial 16 D4: the human diff keeps the `\r` of a `\r\n` line, as git
/// prints it, so the printed diff applies to the CRLF file.
#[test]
fn the_printed_diff_keeps_the_cr_of_crlf_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    checkpoint_f(ws, "a\r\nb\r\n"); // c1
    checkpoint_f(ws, "a\nb\n"); // c2
    let shown = text(&cairn(ws, &["diff", "c1", "c2"]));
    assert_eq!(
        shown,
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\r\n-b\r\n+a\n+b\n"
    );
    applies_as_a_patch("a\r\nb\r\n", &shown, "a\nb\n");
    // And back, with a context line.
    checkpoint_f(ws, "a\r\nb\n"); // c3
    let shown = text(&cairn(ws, &["diff", "c2", "c3"]));
    assert_eq!(shown, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+a\r\n b\n");
    applies_as_a_patch("a\nb\n", &shown, "a\r\nb\n");
}

/// Trial 16 D6: `diff --json` gives each side's mode, so a change of mode
/// alone (no `unified`) says what changed, as the text output does.
#[cfg(unix)]
#[test]
fn diff_json_gives_the_modes() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    checkpoint_f(ws, "x\n"); // c1
    std::fs::set_permissions(ws.join("f"), PermissionsExt::from_mode(0o755)).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2
    std::fs::write(ws.join("g"), "g\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c3
    let field = |d: &serde_json::Value, k: &str| d[k].clone();
    let j = json_lines(&text(&cairn(ws, &["diff", "c1", "c2", "--json"])));
    assert_eq!(j.len(), 1);
    assert_eq!(j[0]["status"], "modified");
    assert_eq!(j[0]["unified"], serde_json::Value::Null);
    assert_eq!(
        (field(&j[0], "old_mode"), field(&j[0], "new_mode")),
        (serde_json::json!("644"), serde_json::json!("755"))
    );
    assert_eq!(
        text(&cairn(ws, &["diff", "c1", "c2"])),
        "f modified (mode 644 -> 755)\n"
    );
    // An added path has only its new mode; a removed one its old.
    let j = json_lines(&text(&cairn(ws, &["diff", "c2", "c3", "--json"])));
    assert_eq!(j[0]["path"], "g");
    assert_eq!(j[0]["new_mode"], "644");
    assert!(j[0].get("old_mode").is_none(), "{}", j[0]);
    let j = json_lines(&text(&cairn(ws, &["diff", "c3", "c2", "--json"])));
    assert_eq!(j[0]["status"], "removed");
    assert_eq!(j[0]["old_mode"], "644");
    assert_eq!(j[0]["old_kind"], "file");
    assert!(j[0].get("new_mode").is_none(), "{}", j[0]);
    assert!(j[0].get("new_kind").is_none(), "{}", j[0]);
    // A file that became a symlink says so by its kinds.
    std::fs::remove_file(ws.join("g")).unwrap();
    std::os::unix::fs::symlink("f", ws.join("g")).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c4
    let j = json_lines(&text(&cairn(ws, &["diff", "c3", "c4", "--json"])));
    assert_eq!(j[0]["path"], "g", "{j:?}");
    assert_eq!(
        (field(&j[0], "old_kind"), field(&j[0], "new_kind")),
        (serde_json::json!("file"), serde_json::json!("symlink"))
    );
}

/// Trial 16 D8: blame of a directory says it is one, as `show` does,
/// rather than that it does not exist.
#[test]
fn blame_of_a_directory_says_it_is_one() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::create_dir(ws.join("d")).unwrap();
    std::fs::write(ws.join("d/a"), "1\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    let said = "`d` is a directory at LSN 1, not a file: `cairn tree` lists its files";
    let o = cairn(ws, &["show", "c1:d"]);
    assert!(
        !o.status.success() && stderr(&o).contains(said),
        "{}",
        stderr(&o)
    );
    for args in [["blame", "c1", "d"], ["blame", "c1", "d/"]] {
        let o = cairn(ws, &args);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(said), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("does not exist"), "{}", stderr(&o));
    }
}
