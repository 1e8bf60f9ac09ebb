//! `cairn --in-memory` as a user runs it: a command on a store held in
//! memory (for a read-only workspace, or to read a log file without a
//! store), `--load` to fill it first, and `record --echo` to keep what is
//! recorded. Each test also checks that nothing was left on disk: no
//! `.cairn` in the workspace, nothing in the temporary directory.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;

/// Runs `bin` (the built cairn unless given) in `dir` with `stdin`, with
/// its temporary directory set to `tmp` so a test can see what is left there.
fn run(bin: Option<&Path>, dir: &Path, tmp: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let bin = bin.map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_cairn")),
        Path::to_path_buf,
    );
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env("NO_COLOR", "1")
        .env("TMPDIR", tmp)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut i = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            // A command refused at parsing exits before reading its stdin.
            let _ = i.write_all(s.as_bytes());
        }
    }
    child.wait_with_output().unwrap()
}

fn cairn(dir: &Path, tmp: &Path, args: &[&str]) -> Output {
    run(None, dir, tmp, args, None)
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A workspace with one file and an audit log of three events (times
/// given, so two stores record the same bytes), and an empty temp dir.
struct Fixture {
    _root: tempfile::TempDir,
    ws: PathBuf,
    tmp: PathBuf,
}

const AUDIT: &str = r#"{"ts":"2026-01-01T00:00:00Z","kind":"prompt","session":"s1","text":"fix the build"}
{"ts":"2026-01-01T00:00:01Z","kind":"reply","session":"s1","text":"done","model":"m1"}
{"ts":"2026-01-01T00:00:02Z","kind":"file.write","session":"s2","tool":"write_file","path":"src/a.rs"}
"#;

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let tmp = root.path().join("tmp");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(ws.join("src/a.rs"), "fn main() {}\n").unwrap();
    std::fs::write(ws.join("audit.jsonl"), AUDIT).unwrap();
    Fixture {
        _root: root,
        ws,
        tmp,
    }
}

impl Fixture {
    fn cairn(&self, args: &[&str]) -> Output {
        cairn(&self.ws, &self.tmp, args)
    }

    /// Nothing was written: the workspace holds only what the test put
    /// there, and the temporary directory is empty.
    fn assert_nothing_left(&self) {
        assert_eq!(names(&self.ws), ["audit.jsonl", "src"]);
        assert!(names(&self.tmp).is_empty(), "{:?}", names(&self.tmp));
    }
}

#[test]
fn load_then_log_export_stats_verify_and_history_read_the_memory_store() {
    let f = fixture();
    let load = ["--in-memory", "--load", "audit.jsonl"];
    let with = |more: &[&str]| -> Vec<String> {
        load.iter().chain(more).map(|s| (*s).to_string()).collect()
    };
    let run = |more: &[&str]| {
        let args = with(more);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        f.cairn(&args)
    };

    let log = json_lines(&stdout(&run(&["log", "--session", "s1", "--json"])));
    let kinds: Vec<&str> = log.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["prompt", "reply"]);
    assert_eq!(log[0]["lsn"], 1);
    assert_eq!(log[0]["text"], "fix the build");
    assert_eq!(log[1]["model"], "m1");
    assert!(log[1]["hash"].as_str().unwrap().len() == 64);

    let cortexide = json_lines(&stdout(&run(&["export", "--format", "cortexide"])));
    let actions: Vec<&str> = cortexide
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["prompt", "reply", "apply"]);
    assert_eq!(cortexide[2]["files"], serde_json::json!(["src/a.rs"]));
    assert_eq!(cortexide[0]["ts"], 1_767_225_600_000u64);

    let stats: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["stats", "--json"]))).unwrap();
    assert_eq!(stats["records"], 3);
    assert_eq!(stats["in_memory"], true);

    let verify: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["verify", "--json"]))).unwrap();
    assert_eq!(verify["ok"], true);
    assert_eq!(verify["records"], 3);

    let history = json_lines(&stdout(&run(&["history", "src/a.rs", "--json"])));
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["lsn"], 3);
    assert_eq!(history[0]["path"], "src/a.rs");

    f.assert_nothing_left();
}

#[test]
fn load_reads_stdin_and_reference_shapes_round_trip() {
    let f = fixture();
    // `-` reads stdin.
    let o = run(
        None,
        &f.ws,
        &f.tmp,
        &["--in-memory", "--load", "-", "log", "--json"],
        Some(AUDIT),
    );
    assert_eq!(json_lines(&stdout(&o)).len(), 3);
    // A comma export loaded back with --load-format comma exports the same lines.
    let comma = stdout(&f.cairn(&[
        "--in-memory",
        "--load",
        "audit.jsonl",
        "export",
        "--format",
        "comma",
    ]));
    assert_eq!(comma.lines().count(), 1, "{comma}"); // comma has file operations only
    std::fs::write(f.tmp.join("comma.jsonl"), &comma).unwrap();
    let path = f.tmp.join("comma.jsonl");
    let again = stdout(&f.cairn(&[
        "--in-memory",
        "--load-format",
        "comma",
        "--load",
        path.to_str().unwrap(),
        "export",
        "--format",
        "comma",
    ]));
    assert_eq!(again, comma);
    std::fs::remove_file(path).unwrap();
    f.assert_nothing_left();
}

#[test]
fn record_echo_prints_what_log_json_prints_for_a_store_on_disk() {
    let f = fixture();
    // On disk: record, then read the log.
    let disk = tempfile::tempdir().unwrap();
    assert!(cairn(disk.path(), &f.tmp, &["init", "-q"]).status.success());
    let o = run(None, disk.path(), &f.tmp, &["record"], Some(AUDIT));
    assert!(o.status.success(), "{}", stderr(&o));
    let logged = stdout(&cairn(disk.path(), &f.tmp, &["log", "--json"]));
    assert_eq!(logged.lines().count(), 3);

    // In memory: the records come back on stdout as they are recorded; the
    // summary stays on stderr.
    let o = run(
        None,
        &f.ws,
        &f.tmp,
        &["--in-memory", "record", "--echo"],
        Some(AUDIT),
    );
    assert_eq!(stdout(&o), logged);
    assert!(
        stderr(&o).contains("recorded 3 records (LSN 1..=3)"),
        "{}",
        stderr(&o)
    );

    // --echo works on a store on disk too, and prints what its log holds.
    let o = run(
        None,
        disk.path(),
        &f.tmp,
        &["record", "--echo"],
        Some(AUDIT),
    );
    let echoed = json_lines(&stdout(&o));
    let all = json_lines(&stdout(&cairn(disk.path(), &f.tmp, &["log", "--json"])));
    assert_eq!(echoed, all[3..]);
    assert_eq!(echoed[0]["lsn"], 4);

    // A rejected line is named on stderr and answered on stdout in its
    // place, with its line number and no `lsn`: one answer per line.
    let o = run(
        None,
        &f.ws,
        &f.tmp,
        &["--in-memory", "record", "--echo"],
        Some("{\"kind\":\"prompt\",\"text\":\"a\",\"ts\":1}\n{\"kind\":\"nope\"}\n"),
    );
    assert_eq!(o.status.code(), Some(4));
    let answers = json_lines(&String::from_utf8(o.stdout.clone()).unwrap());
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0]["text"], "a");
    assert_eq!(answers[1]["line"], 2);
    assert!(answers[1].get("lsn").is_none() && answers[1]["error"].is_string());
    assert!(stderr(&o).contains("stdin:2: rejected"), "{}", stderr(&o));

    // --echo with --ack (or --json) would mix lines on stdout: refused.
    for other in ["--ack", "--json"] {
        let o = run(
            None,
            &f.ws,
            &f.tmp,
            &["--in-memory", "record", "--echo", other],
            Some(AUDIT),
        );
        assert_eq!(o.status.code(), Some(2), "{other}");
        assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    }
    f.assert_nothing_left();
}

#[test]
fn flags_that_contradict_in_memory_are_refused_and_cairn_store_is_ignored() {
    let f = fixture();
    let o = f.cairn(&["--in-memory", "--store", ".cairn", "log"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("'--in-memory' cannot be used with '--store"),
        "{}",
        stderr(&o)
    );

    let o = f.cairn(&["--load", "audit.jsonl", "log"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--in-memory"), "{}", stderr(&o));

    let o = f.cairn(&[
        "--in-memory",
        "--load",
        "audit.jsonl",
        "--load-format",
        "xml",
        "log",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--load-format xml"), "{}", stderr(&o));

    // stdin cannot feed both --load and record.
    let o = f.cairn(&["--in-memory", "--load", "-", "record"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--load - reads stdin"),
        "{}",
        stderr(&o)
    );

    // $CAIRN_STORE names no store: under --in-memory it is not looked at.
    let o = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["--in-memory", "--load", "audit.jsonl", "log", "--json"])
        .current_dir(&f.ws)
        .env("CAIRN_STORE", f.ws.join("no-such-store"))
        .env("TMPDIR", &f.tmp)
        .output()
        .unwrap();
    assert_eq!(json_lines(&stdout(&o)).len(), 3);
    f.assert_nothing_left();
}

#[test]
fn init_repair_and_demo_are_refused_in_memory() {
    let f = fixture();
    let o = f.cairn(&["--in-memory", "init"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("nothing to create"), "{err}");
    assert!(err.contains("cairn --in-memory checkpoint"), "{err}");
    for cmd in ["repair", "demo"] {
        let o = f.cairn(&["--in-memory", cmd]);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        assert!(
            stderr(&o).contains(&format!("cairn {cmd} --in-memory")),
            "{}",
            stderr(&o)
        );
    }
    f.assert_nothing_left();
}

#[test]
fn a_bad_line_in_a_load_fails_the_command_naming_file_and_line() {
    let f = fixture();
    std::fs::write(
        f.tmp.join("bad.jsonl"),
        "{\"kind\":\"prompt\",\"ts\":1}\n\n{\"kind\":\"file.write\",\"path\":\"src/..\"}\n",
    )
    .unwrap();
    let bad = f.tmp.join("bad.jsonl");
    let bad = bad.to_str().unwrap();
    let o = f.cairn(&["--in-memory", "--load", "audit.jsonl", "--load", bad, "log"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("load stopped in {bad}")), "{err}");
    assert!(err.contains(&format!("{bad}:3: ")), "{err}");
    assert!(err.contains("`src/..` names the workspace itself"), "{err}");
    assert!(o.stdout.is_empty(), "the command ran after a failed load");

    // A file that is not there: an error (1) naming it.
    let o = f.cairn(&["--in-memory", "--load", "missing.jsonl", "log"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("missing.jsonl"), "{}", stderr(&o));
    std::fs::remove_file(f.tmp.join("bad.jsonl")).unwrap();
    f.assert_nothing_left();
}

/// A read-only workspace: `cairn init` cannot create the store there and
/// says to use --in-memory; `cairn --in-memory checkpoint` then captures
/// the workspace into memory and leaves nothing on disk. Run as `nobody`
/// through `setpriv` when the tests run as root, since root may write
/// anywhere; as root without setpriv, only "nothing left" is checked.
#[test]
fn checkpoint_of_a_read_only_workspace_works_in_memory_and_leaves_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let parent = f.ws.parent().unwrap();
    std::fs::set_permissions(parent, PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&f.tmp, PermissionsExt::from_mode(0o777)).unwrap();
    // A copy every user can run, wherever the build directory is.
    let bin = parent.join("cairn");
    common::copy_of_cairn(&bin);
    std::fs::set_permissions(&f.ws, PermissionsExt::from_mode(0o555)).unwrap();
    let as_user = |args: &[&str]| -> Output {
        let mut c = match (root, setpriv) {
            (true, Some(sp)) => {
                let mut c = Command::new(sp);
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
                c.arg(&bin);
                c
            }
            _ => Command::new(&bin),
        };
        c.args(args)
            .current_dir(&f.ws)
            .env_remove("CAIRN_STORE")
            .env("NO_COLOR", "1")
            .env("TMPDIR", &f.tmp)
            .output()
            .unwrap()
    };
    let writes_anyway = root && setpriv.is_none();
    if !writes_anyway {
        let o = as_user(&["init"]);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(err.contains("cannot create the store"), "{err}");
        assert!(err.contains("cairn --in-memory"), "{err}");
    }
    let o = as_user(&["--in-memory", "checkpoint", "--label", "start", "--json"]);
    let c: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(c["id"], "c1");
    assert_eq!(c["label"], "start");
    // audit.jsonl and src/a.rs
    assert_eq!(c["files"], 2);
    // After a load, the checkpoint follows the loaded records.
    let o = as_user(&[
        "--in-memory",
        "--load",
        "audit.jsonl",
        "checkpoint",
        "--json",
    ]);
    let c: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(c["lsn"], 4);
    // Each command has its own store: the checkpoints above are gone.
    let o = as_user(&["--in-memory", "checkpoints", "--json"]);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    std::fs::set_permissions(&f.ws, PermissionsExt::from_mode(0o755)).unwrap();
    f.assert_nothing_left();
}

/// Trial 15, U7: an input given to `--load` twice (the same file, a copy
/// under another name, the same lines on stdin) was recorded twice,
/// silently; it is refused as `import` refuses input imported before,
/// naming `--load-again`, which loads it anyway. A copy that grew since
/// is refused too, naming `--load-resume`, which loads only its new lines.
#[test]
fn an_input_loaded_twice_is_refused_unless_load_again() {
    let f = fixture();
    let root = f.ws.parent().unwrap();
    let copy = root.join("copy.jsonl");
    std::fs::write(&copy, AUDIT).unwrap();
    let grown = root.join("grown.jsonl");
    let more = r#"{"ts":"2026-01-01T00:00:03Z","kind":"prompt","session":"s1","text":"more"}"#;
    std::fs::write(&grown, format!("{AUDIT}{more}\n")).unwrap();
    let (copy, grown) = (copy.to_str().unwrap(), grown.to_str().unwrap());

    for again in ["audit.jsonl", copy] {
        let o = f.cairn(&[
            "--in-memory",
            "--load",
            "audit.jsonl",
            "--load",
            again,
            "log",
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert!(err.contains(&format!("load stopped in {again}")), "{err}");
        assert!(
            err.contains(
                "the input looks imported before: all its 3 lines are recorded, as LSN 1 to 3"
            ),
            "{err}"
        );
        assert!(err.contains("(import it again with --load-again)"), "{err}");
        assert!(
            !err.contains(" --again"),
            "import's flag, not --load's: {err}"
        );
        assert!(o.stdout.is_empty(), "the command ran after a failed load");
    }
    // The same lines on stdin (copied to a temporary file that is gone).
    let o = run(
        None,
        &f.ws,
        &f.tmp,
        &["--in-memory", "--load", "audit.jsonl", "--load", "-", "log"],
        Some(AUDIT),
    );
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("--load-again"), "{}", stderr(&o));

    let log = |args: &[&str]| -> Vec<serde_json::Value> {
        let mut all = vec!["--in-memory"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["log", "--json"]);
        json_lines(&stdout(&f.cairn(&all)))
    };
    let twice = log(&["--load", "audit.jsonl", "--load", copy, "--load-again"]);
    assert_eq!(twice.len(), 6);
    assert_eq!(twice[0]["text"], twice[3]["text"]);

    let o = f.cairn(&[
        "--in-memory",
        "--load",
        "audit.jsonl",
        "--load",
        grown,
        "log",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("its first 3 lines are recorded, as LSN 1 to 3, and the rest (from line 4) is not (import only the rest with --load-resume, or all of it again with --load-again)"), "{err}");
    let resumed = log(&["--load", "audit.jsonl", "--load", grown, "--load-resume"]);
    let texts: Vec<&str> = resumed
        .iter()
        .map(|r| r["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(texts, ["fix the build", "done", "", "more"]);

    // Distinct files load as before, and the options need --load.
    let root_audit = root.join("other.jsonl");
    std::fs::write(&root_audit, AUDIT.replace("2026-01-01", "2026-02-01")).unwrap();
    assert_eq!(
        log(&[
            "--load",
            "audit.jsonl",
            "--load",
            root_audit.to_str().unwrap()
        ])
        .len(),
        6
    );
    for flag in ["--load-again", "--load-resume"] {
        let o = f.cairn(&["--in-memory", flag, "log"]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stderr(&o));
    }
    let o = f.cairn(&[
        "--in-memory",
        "--load",
        "audit.jsonl",
        "--load-again",
        "--load-resume",
        "log",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    f.assert_nothing_left();
}

/// Trial 15, U12: a command that writes to an in-memory store said what
/// it did as if the store lasted ("tracking 1 path; the next checkpoint
/// captures it"). Each says on stderr that the store, and what it made,
/// is gone when cairn exits, and where to keep a store that lasts; one
/// that only reads says nothing of it, and --quiet silences the note. A
/// later command that names a checkpoint made so is told why it is not
/// there.
#[test]
fn writing_commands_in_memory_say_what_they_made_is_gone_at_exit() {
    let f = fixture();
    let lasting = "for a store that lasts, create one on a writable disk and name it: `cairn --store DIR init WORKSPACE`, then `cairn --store DIR COMMAND`";
    let note = |args: &[&str], says: &str| {
        let mut all = vec!["--in-memory"];
        all.extend_from_slice(args);
        let o = f.cairn(&all);
        let err = stderr(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(
            err.contains(&format!("note: --in-memory: {says}")),
            "{args:?}: {err}"
        );
        err
    };
    let err = note(
        &["track", "src/a.rs"],
        "tracking 1 path in a store held in memory, which is gone when cairn exits, and the tracking with it: no later command's checkpoint captures it",
    );
    assert!(err.contains(lasting), "{err}");
    assert!(!err.contains("the next checkpoint captures"), "{err}");
    let err = note(
        &["checkpoint", "--label", "start", "--json"],
        "the checkpoint is in a store held in memory, which is gone when cairn exits: no later command can show, diff or roll back to it",
    );
    assert!(err.contains(lasting), "{err}");
    note(
        &["gc", "--keep-per-session", "1"],
        "gc collected a store held in memory, which is gone when cairn exits: nothing on disk was collected",
    );
    note(
        &["import", "--format", "jsonl", "audit.jsonl"],
        "the records are imported into a store held in memory, which is gone when cairn exits",
    );
    note(
        &["blob", "put", "src/a.rs"],
        "the blobs are stored in a store held in memory, which is gone when cairn exits: no later command can get them",
    );
    // `record` says so itself, unless --echo keeps the records.
    let o = run(None, &f.ws, &f.tmp, &["--in-memory", "record"], Some(AUDIT));
    assert!(stderr(&o).contains("what is recorded is gone when cairn exits"));

    // Reading says nothing of it; --quiet keeps the note back.
    for args in [
        &["--in-memory", "--load", "audit.jsonl", "log"][..],
        &["--in-memory", "checkpoint", "--quiet"][..],
        &["--in-memory", "stats"][..],
    ] {
        let o = f.cairn(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("note: --in-memory"),
            "{args:?}: {}",
            stderr(&o)
        );
    }

    // The checkpoint made above is not there for a later command.
    for args in [
        &["rollback", "c1"][..],
        &["show", "c1:src/a.rs"][..],
        &["diff", "c1", "head"][..],
    ] {
        let mut all = vec!["--in-memory"];
        all.extend_from_slice(args);
        let o = f.cairn(&all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("no checkpoint"), "{args:?}: {err}");
        assert!(
            err.contains("note: --in-memory: the store holds only what this command loaded and made; a checkpoint an earlier `cairn --in-memory` command made was gone when that command exited"),
            "{args:?}: {err}"
        );
    }
    f.assert_nothing_left();
}
