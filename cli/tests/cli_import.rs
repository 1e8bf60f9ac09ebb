//! `cairn import` of the two reference shapes as a user runs it: each bad
//! line is refused naming the file, the line, the field and why, and
//! nothing from that file is recorded; what a shape allows is imported.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

fn cairn(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// Imports `text` as a file named `name` in `format` into the store in
/// `dir`: the exit code, stderr, and how many records the store then holds.
fn import(dir: &Path, format: &str, name: &str, text: &[u8]) -> (Option<i32>, String, usize) {
    std::fs::write(dir.join(name), text).unwrap();
    let o = cairn(dir, &["import", "--format", format, name]);
    let log = cairn(dir, &["log", "--json"]);
    assert!(log.status.success());
    let records = String::from_utf8(log.stdout).unwrap().lines().count();
    (
        o.status.code(),
        String::from_utf8(o.stderr).unwrap(),
        records,
    )
}

const COMMA: &str =
    r#""timestamp":"2026-01-01T00:00:00Z","sessionId":"s","agentName":"a","path":"a.rs","ok":true"#;

#[test]
fn each_bad_line_is_refused_by_file_line_and_field_and_nothing_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    assert!(cairn(ws, &["init"]).status.success());
    let good = r#"{"ts":1,"action":"prompt","ok":true}"#;
    let cases = [
        (
            "cortexide",
            r#"{"ts":1,"action":"apply","ok":true,"files":["src/.."]}"#.to_string(),
            "x.jsonl:2: field `files`: `src/..` names the workspace itself",
        ),
        (
            "cortexide",
            r#"{"ts":-62135596800001,"action":"prompt","ok":true}"#.to_string(),
            "x.jsonl:2: field `ts`: timestamp -62135596800001 ms is outside 0001-01-01",
        ),
        (
            "cortexide",
            r#"{"ts":1,"action":"reply","ok":true,"latencyMs":-3}"#.to_string(),
            "x.jsonl:2: field `latencyMs` is a duration, not negative",
        ),
        (
            "cortexide",
            r#"{"ts":1,"action":"prompt","ok":true,"ok":false}"#.to_string(),
            "x.jsonl:2: duplicate key `ok`",
        ),
        (
            "comma",
            format!(r#"{{{COMMA},"toolName":"move_file","operation":"move"}}"#),
            "x.jsonl:2: missing field `toPath`",
        ),
    ];
    for (format, bad, want) in cases {
        let first = if format == "comma" {
            format!(r#"{{{COMMA},"toolName":"write_file","operation":"write"}}"#)
        } else {
            good.to_string()
        };
        let text = format!("{first}\n{bad}\n");
        let (code, err, records) = import(ws, format, "x.jsonl", text.as_bytes());
        assert_eq!(code, Some(4), "{bad}: {err}");
        assert!(err.contains(want), "{bad}: {err}");
        assert!(err.contains("nothing from x.jsonl was recorded"), "{err}");
        assert_eq!(records, 0, "{bad}");
    }
}

#[test]
fn a_byte_order_mark_and_fields_the_shape_does_not_define_are_imported() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    assert!(cairn(ws, &["init"]).status.success());
    let text = "\u{feff}{\"ts\":1,\"action\":\"prompt\",\"ok\":true}\n";
    let (code, err, records) = import(ws, "cortexide", "bom.jsonl", text.as_bytes());
    assert_eq!((code, records), (Some(0), 1), "{err}");
    let text = format!(
        "{{{COMMA},\"toolName\":\"write_file\",\"operation\":\"write\",\"durationMs\":12}}\n"
    );
    let (code, err, records) = import(ws, "comma", "extra.jsonl", text.as_bytes());
    assert_eq!((code, records), (Some(0), 2), "{err}");
    let o = cairn(ws, &["export", "--format", "comma"]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains("\"durationMs\":12"), "{out}");
}

/// Trial 15, U1: an event whose body is over the 16 MiB limit (its line is
/// under the 32 MiB line limit) is a bad line like any other, in every
/// format and through `--load` too: `FILE:LINE: reason`, nothing from the
/// file recorded, exit code 4. It once stopped the import at append time,
/// with neither line nor exit code.
#[test]
fn an_event_over_the_body_limit_is_refused_by_its_line_with_exit_code_4() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    assert!(cairn(ws, &["init"]).status.success());
    let big = "x".repeat(20 << 20);
    let cases = [
        (
            "jsonl",
            r#"{"kind":"prompt","text":"a"}"#.to_string(),
            format!(r#"{{"kind":"prompt","text":"{big}"}}"#),
        ),
        (
            "cortexide",
            r#"{"ts":5,"action":"prompt","ok":true}"#.to_string(),
            format!(r#"{{"ts":1,"action":"prompt","ok":true,"meta":{{"blob":"{big}"}}}}"#),
        ),
        (
            "comma",
            format!(r#"{{{COMMA},"toolName":"write_file","operation":"write"}}"#),
            format!(r#"{{{COMMA},"toolName":"write_file","operation":"write","note":"{big}"}}"#),
        ),
    ];
    let reason = "event body of 20971";
    for (format, good, huge) in &cases {
        let text = format!("{good}\n{huge}\n{good}\n");
        let (code, err, records) = import(ws, format, "big.jsonl", text.as_bytes());
        assert_eq!((code, records), (Some(4), 0), "{format}: {err}");
        assert!(
            err.contains(&format!("big.jsonl:2: {reason}")),
            "{format}: {err}"
        );
        assert!(err.contains("exceeds the maximum of 16777216"), "{err}");
        assert!(
            err.contains("(nothing from big.jsonl was recorded)"),
            "{err}"
        );

        let o = cairn(
            ws,
            &[
                "--in-memory",
                "--load-format",
                format,
                "--load",
                "big.jsonl",
                "log",
            ],
        );
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(o.status.code(), Some(4), "{format}: {err}");
        assert!(
            err.contains(&format!("big.jsonl:2: {reason}")),
            "{format}: {err}"
        );
        assert!(o.stdout.is_empty(), "the command ran after a failed load");
    }

    // Read once, from a pipe: refused by its line too.
    let (_, good, huge) = &cases[0];
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["import", "--format", "jsonl", "-"])
        .current_dir(ws)
        .env_remove("CAIRN_STORE")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = format!("{good}\n{huge}\n");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains(&format!("stdin:2: {reason}")), "{err}");

    // Past the first 16 MiB batch of a file: found by the check of the
    // whole file, before the first batch is appended.
    let filler: String = (0..70_000)
        .map(|i| {
            format!(
                "{{\"kind\":\"prompt\",\"text\":\"line {i} {}\"}}\n",
                "y".repeat(300)
            )
        })
        .collect();
    assert!(filler.len() > 16 << 20);
    let text = format!("{filler}{huge}\n");
    let (code, err, records) = import(ws, "jsonl", "long.jsonl", text.as_bytes());
    assert_eq!((code, records), (Some(4), 0), "{err}");
    assert!(
        err.contains(&format!("long.jsonl:70001: {reason}")),
        "{err}"
    );
}

/// Trial 15, U11: an audit file whose writer stopped part way through its
/// last line (no line end, its JSON cut short) was refused whole. It still
/// is by default, saying how to import the lines before it:
/// `--skip-torn-tail` (`--load-skip-torn-tail` for `--load`), which
/// imports them and names the torn line on stderr, even with --quiet. Once
/// the writer has completed the line, `import --resume` imports it.
#[test]
fn a_torn_last_line_is_skipped_with_skip_torn_tail_and_resumed_once_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    assert!(cairn(ws, &["init"]).status.success());
    let line = |i: u32| {
        format!(
            r#"{{"timestamp":"2024-01-01T00:00:0{i}Z","sessionId":"s","agentName":"a","toolName":"write_file","operation":"write","path":"f{i}","ok":true}}"#
        )
    };
    let complete: String = (1..=3).map(|i| line(i) + "\n").collect();
    let cut = 60;
    let torn = format!("{complete}{}", &line(4)[..cut]);
    let (code, err, records) = import(ws, "comma", "audit.jsonl", torn.as_bytes());
    assert_eq!((code, records), (Some(4), 0), "{err}");
    assert!(
        err.contains("audit.jsonl:4: invalid JSON (cut short)"),
        "{err}"
    );
    assert!(err.contains("it is the last line and has no line end: its writer may have stopped part way through it (--skip-torn-tail imports the lines before it)"), "{err}");

    // --load says the same, in its own flag.
    let load = |more: &[&str]| {
        let mut args = vec![
            "--in-memory",
            "--load-format",
            "comma",
            "--load",
            "audit.jsonl",
        ];
        args.extend_from_slice(more);
        args.extend_from_slice(&["log", "--json"]);
        cairn(ws, &args)
    };
    let o = load(&[]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains("(--load-skip-torn-tail imports the lines before it)"),
        "{err}"
    );
    let o = load(&["--load-skip-torn-tail"]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8(o.stdout).unwrap().lines().count(), 3);
    assert!(
        err.contains(&format!(
            "warning: audit.jsonl:4: skipped its torn last line ({cut} bytes with no line end"
        )),
        "{err}"
    );

    let o = cairn(
        ws,
        &[
            "--quiet",
            "import",
            "--format",
            "comma",
            "--skip-torn-tail",
            "--json",
            "audit.jsonl",
        ],
    );
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(0), "{err}");
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["count"], 3);
    assert_eq!(
        summary["torn_tails"],
        serde_json::json!([{"file": "audit.jsonl", "line": 4, "bytes": cut}])
    );
    assert!(
        err.contains("warning: audit.jsonl:4: skipped its torn last line"),
        "{err}"
    );
    assert!(
        err.contains("once its writer has completed it, `cairn import --resume` imports it"),
        "{err}"
    );

    // The writer completes the line and goes on.
    let grown = format!("{torn}{}\n{}\n", &line(4)[cut..], line(5));
    std::fs::write(ws.join("audit.jsonl"), &grown).unwrap();
    let o = cairn(
        ws,
        &["import", "--format", "comma", "--resume", "audit.jsonl"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let log = cairn(ws, &["log", "--json"]);
    let paths: Vec<String> = String::from_utf8(log.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["path"].to_string())
        .collect();
    assert_eq!(paths, ["\"f1\"", "\"f2\"", "\"f3\"", "\"f4\"", "\"f5\""]);

    // A bad line before the last is refused with the option too.
    let bad = format!("{}{{\"oops\n{}", line(6) + "\n", &line(7)[..cut]);
    std::fs::write(ws.join("bad.jsonl"), bad).unwrap();
    let o = cairn(
        ws,
        &[
            "import",
            "--format",
            "comma",
            "--skip-torn-tail",
            "bad.jsonl",
        ],
    );
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("bad.jsonl:2: invalid JSON"), "{err}");
    assert!(!err.contains("last line"), "{err}");
}

/// The log of the store in `dir` (`log --json`), one JSON value a record.
fn log_json(dir: &Path) -> Vec<serde_json::Value> {
    let o = cairn(dir, &["log", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The user's report: after a gc that collects a discarded checkpoint,
/// the store's own export imported into a copy of the store is refused
/// at the checkpoint's line, and again at the next; with
/// `--collected-checkpoints record` all of it imports, in the same kinds
/// and order, the collected checkpoints as records that say so and that
/// cannot be rolled back to.
#[test]
fn a_stores_export_after_gc_imports_into_a_copy_with_collected_checkpoints_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let w7 = tmp.path().join("w7");
    std::fs::create_dir(&w7).unwrap();
    let run = |dir: &Path, args: &[&str]| {
        let o = cairn(dir, args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    run(&w7, &["init", "-q"]);
    for i in 1..=3 {
        std::fs::write(w7.join("f"), format!("{i}\n")).unwrap();
        run(&w7, &["checkpoint", "-q"]);
    }
    run(&w7, &["gc", "--keep-per-session", "1", "-q"]);
    let export = tmp.path().join("w7.jsonl");
    std::fs::write(&export, run(&w7, &["export"])).unwrap();
    let copy = tmp.path().join("w7copy");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&w7)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let ex = export.to_str().unwrap();

    let o = cairn(&copy, &["import", "--format", "jsonl", "--again", ex]);
    let e = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(4), "{e}");
    assert!(
        e.contains("w7.jsonl:1: ")
            && e.contains("is the tree of checkpoint c1 of this store, discarded at LSN 4")
            && e.contains("--collected-checkpoints record"),
        "{e}"
    );
    assert_eq!(log_json(&copy).len(), 5, "nothing recorded");

    let args = [
        "import",
        "--format",
        "jsonl",
        "--again",
        "--collected-checkpoints",
        "record",
    ];
    let summary: serde_json::Value =
        serde_json::from_str(&run(&copy, &[&args[..], &["--json", ex]].concat())).unwrap();
    assert_eq!(summary["count"], 5, "{summary}");
    let collected = summary["collected_checkpoints"].as_array().unwrap();
    let made: Vec<(&str, &str, u64)> = collected
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap(),
                c["copy_of"].as_str().unwrap(),
                c["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(made, vec![("c6", "c1", 1), ("c7", "c2", 2)], "{summary}");

    // The copy's log is the original's, then the original's again.
    let original = log_json(&w7);
    let copied = log_json(&copy);
    let kinds = |log: &[serde_json::Value]| -> Vec<String> {
        log.iter()
            .map(|r| r["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(copied.len(), 10);
    assert_eq!(kinds(&copied[..5]), kinds(&original));
    assert_eq!(kinds(&copied[5..]), kinds(&original));
    for (copy, of) in copied[5..].iter().zip(&original) {
        assert_eq!(
            (&copy["ts"], &copy["checkpoint"]),
            (&of["ts"], &of["checkpoint"])
        );
    }
    assert_eq!(copied[5]["meta"]["collected"]["root"], original[0]["root"]);
    assert_eq!(copied[5]["meta"]["collected"]["checkpoint"], "c1");
    assert!(copied[5].get("root").is_none(), "{}", copied[5]);
    assert_eq!(copied[7]["root"], original[2]["root"]);

    // A rollback to one is refused, saying why; a text summary says what
    // was recorded so.
    let o = cairn(&copy, &["rollback", "c6"]);
    let e = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("c6 is a checkpoint record imported without its files, which gc had collected")
            && e.contains("checkpoint c1"),
        "{e}"
    );
    let o = cairn(&copy, &[&args[..], &[ex]].concat());
    let e = String::from_utf8(o.stderr).unwrap();
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains("imported 5 records from 1 file; 2 checkpoint lines copying discarded checkpoints whose files gc had collected (c1 c2) were recorded without them, as c11 c12: they cannot be rolled back to"),
        "{e}"
    );
    let listed = run(&copy, &["checkpoints"]);
    assert!(
        listed.contains("  c6  -  (a copy of c1: gc had collected its files)"),
        "{listed}"
    );
}
