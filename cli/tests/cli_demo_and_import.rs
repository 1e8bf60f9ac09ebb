//! Regression tests for the session-11 user trial's P18 (`demo --in-place`
//! leaves the user's files as they were), P6 (an import cut short or a
//! grown audit file goes on with `--resume`) and the smaller P14 items 7,
//! 11, 12, 13, 15, 20 and 22, and trial 14's T3 (the same for lines
//! without `ts`), from the CLI.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

/// P18: the user's project is as it was after `demo --in-place`, and the
/// demo says so; P14.7: the head hash it prints is one `verify --head` takes.
#[test]
fn demo_in_place_leaves_the_users_files_as_they_were() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let cargo = "[package]\nname = \"mine\"\nversion = \"0.1.0\"\nedition = \"2021\"\n";
    std::fs::write(ws.join("Cargo.toml"), cargo).unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    let out = ok(&cairn(ws, &["demo", "--in-place", "."]));
    assert_eq!(
        std::fs::read_to_string(ws.join("Cargo.toml")).unwrap(),
        cargo
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert!(!ws.join("src/lib.rs").exists(), "{out}");
    assert!(!ws.join("notes").exists(), "{out}");
    assert!(out.contains("as they were before the demo"), "{out}");
    // The demo's history stays.
    assert!(ok(&cairn(ws, &["checkpoints"])).lines().count() > 5);
    let hash = out
        .lines()
        .find_map(|l| l.split("head hash ").nth(1))
        .unwrap()
        .trim();
    assert_eq!(hash.len(), 64, "{out}");
    ok(&cairn(ws, &["verify", "--head", hash]));
}

fn prompts(from: u64, to: u64) -> String {
    (from..=to)
        .map(|i| {
            format!(
                "{{\"ts\":{},\"action\":\"prompt\",\"ok\":true,\"meta\":{{\"i\":{i}}}}}\n",
                1_732_300_000_000u64 + i
            )
        })
        .collect()
}

/// P6: a grown audit file is refused saying how much of it is recorded,
/// and `--resume` imports only the rest; P14.20: `--json` prints an
/// object with the error when the import is refused.
#[test]
fn a_grown_audit_file_resumes_where_the_store_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("audit.jsonl"), prompts(1, 5)).unwrap();
    ok(&cairn(
        ws,
        &["import", "--format", "cortexide", "audit.jsonl"],
    ));
    std::fs::write(ws.join("audit.jsonl"), prompts(1, 10)).unwrap();
    let o = cairn(
        ws,
        &["import", "--format", "cortexide", "--json", "audit.jsonl"],
    );
    assert_eq!(o.status.code(), Some(4));
    assert!(
        err(&o).contains(
            "its first 5 lines are recorded, as LSN 1 to 5, and the rest (from line 6) is not"
        ),
        "{}",
        err(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["count"], 0);
    assert!(v["error"].as_str().unwrap().contains("--resume"), "{v}");
    let o = ok(&cairn(
        ws,
        &[
            "import",
            "--format",
            "cortexide",
            "--resume",
            "--json",
            "audit.jsonl",
        ],
    ));
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(
        (v["first_lsn"].as_u64(), v["last_lsn"].as_u64()),
        (Some(6), Some(10))
    );
    let log = ok(&cairn(ws, &["log", "--json"]));
    assert_eq!(log.lines().count(), 10, "no duplicates");
    // record --json too prints an object when it cannot start.
    let o = cairn(ws, &["--store", "nowhere", "record", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["error"].is_string(), "{v}");
}

/// `n` canonical JSONL lines without `ts`, line `i` a prompt `line i`.
fn untimed(from: u64, to: u64) -> String {
    (from..=to)
        .map(|i| format!("{{\"kind\":\"prompt\",\"text\":\"line {i}\"}}\n"))
        .collect()
}

/// The texts of the store's records, in order.
fn texts(ws: &std::path::Path) -> Vec<String> {
    json_lines(&ok(&cairn(ws, &["log", "--json"])))
        .iter()
        .map(|r| r["text"].as_str().unwrap().to_string())
        .collect()
}

/// Trial 14 T3: lines without `ts` get the time of their import, so their
/// records never matched the input's lines: a second import of the same
/// file recorded every line again, and `--resume` after an import cut
/// short recorded its first lines twice. Now the store remembers where
/// each import got to in its input: the second import is refused, and
/// `--resume` imports exactly the lines after, from a file or from stdin.
#[test]
fn lines_without_a_time_are_not_imported_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("nots.jsonl"), untimed(1, 2)).unwrap();
    let import = |args: &[&str]| {
        let mut all = vec!["import", "--format", "jsonl"];
        all.extend_from_slice(args);
        cairn(ws, &all)
    };
    ok(&import(&["nots.jsonl"]));
    let o = import(&["nots.jsonl"]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(
        err(&o).contains("nots.jsonl: the input looks imported before: all its 2 lines are recorded, as LSN 1 to 2 (import it again with --again)"),
        "{}",
        err(&o)
    );
    // Cut short after line 2 (or grown since): the rest, once.
    std::fs::write(ws.join("nots.jsonl"), untimed(1, 5)).unwrap();
    let o = import(&["nots.jsonl"]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(
        err(&o).contains("its first 2 lines are recorded, as LSN 1 to 2, and the rest (from line 3) is not (import only the rest with --resume"),
        "{}",
        err(&o)
    );
    let o = import(&["--resume", "nots.jsonl"]);
    assert!(err(&o).contains("imported 3 records"), "{}", err(&o));
    assert_eq!(
        texts(ws),
        (1..=5).map(|i| format!("line {i}")).collect::<Vec<_>>()
    );
    // The same from stdin.
    let all = untimed(1, 7);
    let o = cairn_stdin(ws, &["import", "--format", "jsonl", "-"], Some(&all));
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(
        err(&o).contains("stdin: the input looks imported before: its first 5 lines are recorded"),
        "{}",
        err(&o)
    );
    let o = cairn_stdin(
        ws,
        &["import", "--format", "jsonl", "--resume", "-"],
        Some(&all),
    );
    assert!(err(&o).contains("imported 2 records"), "{}", err(&o));
    assert_eq!(
        texts(ws),
        (1..=7).map(|i| format!("line {i}")).collect::<Vec<_>>()
    );
    // --again imports it all once more, as it always did.
    ok(&import(&["--again", "nots.jsonl"]));
    assert_eq!(texts(ws).len(), 12);
}

/// P14.22, P14.11, P14.12: gzip input is recognised with a way to import
/// it; a directory is an error (1) like a missing file, an unknown shell a
/// usage error (2); an empty `--session` is refused, not made `default`.
#[test]
fn gzip_directories_shells_and_empty_sessions_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(
        ws.join("a.jsonl.1.gz"),
        [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3],
    )
    .unwrap();
    let o = cairn(ws, &["import", "--format", "cortexide", "a.jsonl.1.gz"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("a.jsonl.1.gz is gzip-compressed: use `zcat a.jsonl.1.gz | cairn import --format cortexide -`"),
        "{}",
        err(&o)
    );
    std::fs::create_dir(ws.join("d")).unwrap();
    let o = cairn(ws, &["import", "--format", "cortexide", "d"]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("is a directory"), "{}", err(&o));
    assert_eq!(cairn(ws, &["completions", "foo"]).status.code(), Some(2));
    let o = cairn(ws, &["checkpoint", "--session", ""]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("--session must not be empty"),
        "{}",
        err(&o)
    );
    assert!(ok(&cairn(ws, &["checkpoints", "--json"])).trim().is_empty());
}

/// A named pipe (`cairn import --format F <(zcat audit.gz)` reads one) is
/// read once, from its first byte: the gzip check must not consume its
/// start before the import reads it.
#[test]
fn an_import_from_a_named_pipe_keeps_its_first_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let fifo = ws.join("in.pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("mkfifo unavailable here; skipping");
        return;
    }
    let lines = prompts(1, 3000);
    let writer = {
        let (fifo, lines) = (fifo.clone(), lines.clone());
        std::thread::spawn(move || std::fs::write(fifo, lines).unwrap())
    };
    ok(&cairn(
        ws,
        &["import", "--format", "cortexide", fifo.to_str().unwrap()],
    ));
    writer.join().unwrap();
    let log = json_lines(&ok(&cairn(ws, &["log", "--json"])));
    assert_eq!(log.len(), 3000);
    assert_eq!(log[0]["meta"]["i"], 1, "{}", log[0]);
}

/// P14.13: bash completion offers the values of an option whose values are
/// a fixed set (not file names), on every subcommand that takes it, and
/// `--help` lists them.
#[test]
fn completion_and_help_offer_the_values_of_fixed_set_options() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let script = ok(&cairn(ws, &["completions", "bash"]));
    let formats = "jsonl cortexide comma";
    let kinds = "prompt reply tool_call diff_preview apply undo file.create file.write \
                 file.edit file.delete file.move file.patch checkpoint.create \
                 checkpoint.discard rollback git.stash git.stash_restore custom";
    // `--format` of export, of import (which also reads agent
    // transcripts) and of report.
    let import_formats = format!("{formats} claude-code codex swe-agent");
    for (option, values) in [
        ("--durability", vec!["always interval never"]),
        ("--load-format", vec![formats]),
        (
            "--format",
            vec![formats, import_formats.as_str(), "html md"],
        ),
        ("--kind", vec![kinds]),
    ] {
        let lines: Vec<&str> = script.lines().collect();
        let cases: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].trim() == format!("{option})"))
            .collect();
        assert!(!cases.is_empty(), "{option} is not in the script");
        for i in cases {
            assert!(
                values
                    .iter()
                    .any(|v| lines[i + 1].contains(&format!("compgen -W \"{v}\""))),
                "{option} completes {}",
                lines[i + 1]
            );
        }
    }
    // `completions SHELL`: the shells, among the words offered.
    let opts = script
        .lines()
        .skip_while(|l| !l.contains("cairn__subcmd__completions)"))
        .find(|l| l.contains("opts="))
        .unwrap();
    assert!(opts.contains("bash elvish fish powershell zsh"), "{opts}");
    let help = ok(&cairn(ws, &["export", "--help"]));
    assert!(
        help.contains("Possible values:") && help.contains("- cortexide:"),
        "{help}"
    );
    let help = ok(&cairn(ws, &["log", "-h"]));
    assert!(help.contains("[possible values: prompt, reply,"), "{help}");
    // The values are only offered: the spelling outside the list that
    // --durability takes still works, and a bad value keeps its own error.
    ok(&cairn(ws, &["init", "-q"]));
    ok(&cairn(ws, &["--durability", "interval:50", "stats"]));
    let o = cairn(ws, &["--durability", "sometimes", "stats"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("expected always, never, interval or interval:<ms>"));
}

/// P14.11: `repair` exits 3, as `verify` does right after it, while blob
/// damage it cannot mend remains, and says so on stderr.
#[test]
fn repair_exits_with_the_corruption_code_while_blob_damage_remains() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    let text: String = (0..200).map(|i| format!("line {i} of f\n")).collect();
    std::fs::write(ws.join("f"), text).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let pack = std::fs::read_dir(ws.join(".cairn/blobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0xff;
    std::fs::write(&pack, bytes).unwrap();
    assert_eq!(cairn(ws, &["verify"]).status.code(), Some(3));

    let o = cairn(ws, &["repair"]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("damaged blob:"),
        "{:?}",
        o
    );
    assert!(
        err(&o).contains("repair could not mend") && err(&o).contains("restore .cairn/blobs"),
        "{}",
        err(&o)
    );
    let o = cairn(ws, &["repair", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!v["damaged_blobs"].as_array().unwrap().is_empty(), "{v}");
    assert!(err(&o).contains(".pack at byte offset"), "{}", err(&o));
    assert_eq!(cairn(ws, &["verify"]).status.code(), Some(3));
}

/// P14.15: on a project without `src/lib.rs`, the demo's timeline names
/// what was recorded and done: the write that creates it as `file.create`,
/// and the path-scoped rollback to before it as deleting it; the shell
/// edit of a Cargo.toml whose version is not written `version = "0.1.0"`
/// as the line it appends.
#[test]
fn demo_narration_says_what_happened_on_a_project_without_a_lib() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname=\"x\"\nversion=\"0.1.0\"\n",
    )
    .unwrap();
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").unwrap();
    let ws = tmp.path().join("demo");
    let out = ok(&cairn(
        tmp.path(),
        &["demo", "project", "--into", ws.to_str().unwrap()],
    ));
    let line = |tag: &str, what: &str| -> String {
        out.lines()
            .find(|l| l.starts_with(&format!("[{tag:>7}]")) && l.contains(what))
            .unwrap_or_else(|| panic!("no [{tag}] line with {what}:\n{out}"))
            .to_string()
    };
    assert!(
        line("turn 1", "src/lib.rs")
            .contains("file.create src/lib.rs (tracked write of a new file"),
        "{out}"
    );
    assert!(
        line("turn 2", "Cargo.toml").contains("echo '# bumped by the cairn demo' >> Cargo.toml"),
        "{out}"
    );
    assert!(
        line("turn 3", "src/main.rs").contains("file.write src/main.rs"),
        "{out}"
    );
    assert!(
        line("scoped", "src/lib.rs").contains("wrote 0, deleted 1,"),
        "{out}"
    );
    assert!(!ws.join("src/lib.rs").exists());
    // The timeline's kinds are the records' kinds.
    let log = json_lines(&ok(&cairn(&ws, &["log", "--json", "--path", "src"])));
    let kinds: Vec<(&str, &str)> = log
        .iter()
        .filter(|r| r["kind"].as_str().unwrap().starts_with("file."))
        .map(|r| (r["kind"].as_str().unwrap(), r["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [("file.create", "src/lib.rs"), ("file.write", "src/main.rs")]
    );
}

/// Output into a pipe whose reader has gone (`cairn demo | head -2`) ends
/// the command quietly with success, never a panic about a broken pipe.
#[test]
fn a_closed_output_pipe_ends_commands_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let run_closed = |args: &[&str]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .current_dir(tmp.path())
            .env_remove("CAIRN_STORE")
            .env("RUST_BACKTRACE", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away at once
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
    };
    run_closed(&["demo", "--into", "d"]);
    let d = tmp.path().join("d");
    ok(&cairn(&d, &["checkpoint", "-q"]));
    let store = d.join(".cairn");
    for args in [
        &["log"][..],
        &["log", "--json"],
        &["tree", "head"],
        &["checkpoints"],
        &["branches"],
        &["export"],
    ] {
        let mut a = vec!["--store", store.to_str().unwrap()];
        a.extend_from_slice(args);
        run_closed(&a);
    }
}

/// The generated demo project is a Rust project as written, and the demo
/// leaves its `src/main.rs` as it began (turn 3 breaks it, the rollback
/// brings it back): the program prints with `println!`.
#[test]
fn the_generated_demo_project_ends_with_its_own_main_rs() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("d");
    ok(&cairn(
        tmp.path(),
        &["demo", "--into", ws.to_str().unwrap()],
    ));
    assert_eq!(
        std::fs::read_to_string(ws.join("src/main.rs")).unwrap(),
        "fn main() {\n    println!(\"{}\", demo::add(2, 3));\n}\n"
    );
}
