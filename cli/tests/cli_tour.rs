//! Drives the built `cairn` binary through the README tour, as a new user
//! would type it, and checks each answer.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::*;

/// A store in `ws` holding one prompt saying `text`, and a running
/// `cairn export --follow` of it, its output piped.
fn store_with_a_follower(ws: &Path, text: &str) -> std::process::Child {
    ok(&cairn(ws, &["init"]));
    ok(&cairn_stdin(
        ws,
        &["record"],
        Some(&format!("{{\"kind\":\"prompt\",\"text\":\"{text}\"}}\n")),
    ));
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["export", "--follow"])
        .current_dir(ws)
        .env_remove("CAIRN_STORE")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn readme_tour_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(ws.join("target")).unwrap();
    std::fs::write(ws.join("target/out.bin"), "build output\n").unwrap();

    // Before init: a clear error that says what to do.
    let o = cairn(ws, &["log"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cairn init"));

    ok(&cairn(ws, &["init"]));
    assert!(ws.join(".cairn/log").is_dir());

    // record: acks, a rejected line with its number, JSON summary, exit 4.
    let input = concat!(
        r#"{"kind":"prompt","session":"t1","text":"fix the build"}"#,
        "\n",
        "this is not json\n",
        r#"{"kind":"reply","session":"t1","text":"done","model":"m1"}"#,
        "\n"
    );
    let o = cairn_stdin(ws, &["record", "--ack", "--json"], Some(input));
    assert_eq!(
        o.status.code(),
        Some(4),
        "a rejected line makes the exit status non-zero"
    );
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    // One answer per line, in order: the rejected line 2 gets its own.
    assert_eq!(lines[0], "1");
    assert!(lines[1].starts_with(r#"{"line":2,"error":"#), "{out}");
    assert_eq!(lines[2], "2");
    let summary: serde_json::Value = serde_json::from_str(lines[3]).unwrap();
    assert_eq!(summary["first_lsn"], 1);
    assert_eq!(summary["last_lsn"], 2);
    assert_eq!(summary["count"], 2);
    assert_eq!(summary["rejected"], 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("stdin:2"));

    // checkpoint, edit, track, checkpoint.
    let c1 = json_lines(&ok(&cairn(
        ws,
        &[
            "checkpoint",
            "--label",
            "Before turn 1",
            "--session",
            "t1",
            "--json",
        ],
    )));
    let c1_id = c1[0]["id"].as_str().unwrap().to_string();
    assert!(c1[0]["files"].as_u64().unwrap() >= 2);
    assert!(c1[0]["lsn"].as_u64().is_some() && c1[0]["root"].as_str().unwrap().len() == 64);
    std::fs::write(ws.join("src/main.rs"), "fn main() { println!(\"hi\"); }\n").unwrap();
    std::fs::write(ws.join("src/new.rs"), "// new\n").unwrap();
    ok(&cairn(ws, &["track", "target/gen.rs"]));
    std::fs::write(
        ws.join("target/gen.rs"),
        "// generated, ignored but tracked\n",
    )
    .unwrap();
    let c2 = json_lines(&ok(&cairn(
        ws,
        &[
            "checkpoint",
            "--label",
            "After turn 1",
            "--session",
            "t1",
            "--json",
        ],
    )));
    let c2_id = c2[0]["id"].as_str().unwrap().to_string();
    assert!(c2[0]["changed"].as_u64().unwrap() >= 2);

    let list = json_lines(&ok(&cairn(ws, &["checkpoints", "--json"])));
    assert_eq!(list.len(), 2);
    for field in ["id", "lsn", "label", "session", "ts"] {
        assert!(
            list[0].get(field).is_some(),
            "checkpoints --json has `{field}`"
        );
    }

    // Dry run changes nothing.
    let dry = json_lines(&ok(&cairn(
        ws,
        &["rollback", &c1_id, "--dry-run", "--json"],
    )));
    assert!(dry[0]["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "src/new.rs"));
    assert!(ws.join("src/new.rs").exists());

    // Rollback restores, deletes the agent's files (the tracked ignored one too),
    // leaves the ignored untracked build output alone.
    let rb = json_lines(&ok(&cairn(ws, &["rollback", &c1_id, "--json"])));
    assert_eq!(
        std::fs::read_to_string(ws.join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert!(!ws.join("src/new.rs").exists());
    assert!(!ws.join("target/gen.rs").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("target/out.bin")).unwrap(),
        "build output\n"
    );
    let source = rb[0]["source"].as_str().unwrap().to_string();

    // Undo the rollback through its own source checkpoint (the state before it).
    ok(&cairn(ws, &["rollback", &source]));
    assert!(ws.join("src/new.rs").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("src/main.rs")).unwrap(),
        "fn main() { println!(\"hi\"); }\n"
    );
    // Back to c1, then redo: roll forward to the later checkpoint, which stays reachable.
    ok(&cairn(ws, &["rollback", &c1_id]));
    assert!(!ws.join("src/new.rs").exists());
    ok(&cairn(ws, &["rollback", &c2_id]));
    assert!(ws.join("src/new.rs").exists());
    assert!(
        ws.join("target/gen.rs").exists(),
        "the tracked ignored file comes back too"
    );

    // log with filters, as a table and as canonical JSONL.
    let table = ok(&cairn(ws, &["log", "--session", "t1"]));
    assert!(
        table.contains("prompt") && table.contains("fix the build"),
        "{table}"
    );
    let recs = json_lines(&ok(&cairn(ws, &["log", "--kind", "reply", "--json"])));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["model"], "m1");
    assert_eq!(recs[0]["lsn"], 2);
    assert_eq!(recs[0]["hash"].as_str().unwrap().len(), 64);
    let bad = cairn(ws, &["log", "--kind", "file.nuke"]);
    assert_eq!(bad.status.code(), Some(2));
    for usage in [
        &["log", "--since", "yesterday"][..],
        &["export", "--format", "xml"],
        &["export", "--follow", "--newest-first"],
        &["--durability", "sometimes", "log"],
    ] {
        let o = cairn(ws, usage);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{usage:?}: a bad option value is bad usage"
        );
    }
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown event kind"));

    // Time travel.
    let shown = ok(&cairn(ws, &["show", &format!("{c2_id}:src/main.rs")]));
    assert_eq!(shown, "fn main() { println!(\"hi\"); }\n");
    let diff = ok(&cairn(ws, &["diff", &c1_id, &c2_id]));
    assert!(diff.contains("+fn main() { println!(\"hi\"); }"), "{diff}");
    let tree = ok(&cairn(ws, &["tree", &c2_id]));
    assert!(tree.contains("src/new.rs"));
    let hist = json_lines(&ok(&cairn(ws, &["history", "src/new.rs", "--json"])));
    assert!(!hist.is_empty());

    // Export in each shape.
    let canon = json_lines(&ok(&cairn(ws, &["export"])));
    assert!(canon.iter().any(|r| r["kind"] == "checkpoint.create"));
    assert!(canon.iter().any(|r| r["kind"] == "rollback"));
    let cx = json_lines(&ok(&cairn(ws, &["export", "--format", "cortexide"])));
    assert!(cx
        .iter()
        .any(|r| r["action"] == "prompt" && r["ts"].is_number()));

    // verify, then pin the head, then stats.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&cairn(ws, &["verify", "--json"]))).unwrap();
    assert_eq!(v["ok"], true);
    let head = v["head_hash"].as_str().unwrap().to_string();
    ok(&cairn(ws, &["verify", "--head", &head]));
    let s: serde_json::Value = serde_json::from_str(&ok(&cairn(ws, &["stats", "--json"]))).unwrap();
    assert!(s["records"].as_u64().unwrap() >= 8);
    assert!(s["blobs"].as_u64().unwrap() >= 3);
    assert_eq!(s["durability"], "always");
    // The policy is each writer's, not the files': the one these options give.
    let s: serde_json::Value = serde_json::from_str(&ok(&cairn(
        ws,
        &["--durability", "never", "stats", "--json"],
    )))
    .unwrap();
    assert_eq!(s["durability"], "never");

    // blob put/get round trip; bad hashes are clear errors.
    let put = ok(&cairn(ws, &["blob", "put", "src/main.rs"]));
    let hash = put.split_whitespace().next().unwrap().to_string();
    assert_eq!(
        ok(&cairn(ws, &["blob", "get", &hash])),
        std::fs::read_to_string(ws.join("src/main.rs")).unwrap()
    );
    let o = cairn(ws, &["blob", "get", "abc"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("64 hex digits"));

    // Unknown checkpoint id: says how to list them.
    let o = cairn(ws, &["rollback", "c999999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cairn checkpoints"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = cairn(ws, &["rollback", "banana"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("c42"));

    // gc without a policy evicts nothing.
    let g: serde_json::Value = serde_json::from_str(&ok(&cairn(ws, &["gc", "--json"]))).unwrap();
    assert_eq!(g["discarded"].as_array().unwrap().len(), 0);
}

#[test]
fn damage_in_the_log_exits_with_the_corruption_code() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let mut input = String::new();
    for i in 0..50 {
        input.push_str(&format!(
            "{{\"kind\":\"tool_call\",\"tool\":\"bash\",\"text\":\"step {i}\"}}\n"
        ));
    }
    ok(&cairn_stdin(ws, &["record"], Some(&input)));
    common::flip_a_byte_mid_log(ws);
    let o = cairn(ws, &["verify"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains(".seg") && text.contains("at byte") && text.contains("LSN"),
        "{text}"
    );
    // A script asking for JSON gets the full report: not ok, and each
    // problem with its file, offset and LSN (damage in the segment being
    // written reads like damage in a sealed one).
    let o = cairn(ws, &["verify", "--json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let p = &v["problems"][0];
    assert!(p["file"].as_str().unwrap().ends_with(".seg"), "{v}");
    assert!(
        p["offset"].as_u64().is_some() && p["lsn"].as_u64().is_some(),
        "{v}"
    );
    // The records before the damage can be read; reading the log to its
    // end stops at the damage rather than ending early.
    let first = json_lines(&ok(&cairn(ws, &["log", "--json", "--limit", "2"])));
    assert_eq!(first.len(), 2);
    assert_eq!(cairn(ws, &["log"]).status.code(), Some(3));
    // Repair keeps every intact record and says what it dropped.
    let r = ok(&cairn(ws, &["repair"]));
    assert!(r.contains("kept"), "{r}");
    ok(&cairn(ws, &["verify"]));
}

/// Opens the store in this process, as an embedding agent platform
/// would, holding its writer lock, and appends one record that readers in
/// other processes then see.
fn hold_the_lock(ws: &Path) -> cairn::Store {
    let store = cairn::Store::open(ws).unwrap();
    let mut e = cairn::Event::new(cairn::EventKind::Prompt, "default");
    e.text = Some("hold".into());
    store.append(&e).unwrap();
    let o = cairn(ws, &["log", "--json"]);
    assert!(
        ok(&o).contains("hold"),
        "a reader sees the writer's record while it holds the lock"
    );
    store
}

/// A live `cairn record` pipe (as long as the agent that feeds it) lets
/// other writers in while its input is idle: a checkpoint between two
/// events gets the lock, and the pipe's next event is recorded after it.
#[test]
fn a_live_record_pipe_lets_a_checkpoint_in_while_it_is_idle() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let mut rec = spawn_cairn(ws, &["record", "--ack"]);
    let mut input = rec.stdin.take().unwrap();
    let mut acks = std::io::BufReader::new(rec.stdout.take().unwrap());
    let mut ack = |input: &mut std::process::ChildStdin, line: &str| -> String {
        input.write_all(line.as_bytes()).unwrap();
        input.flush().unwrap();
        let mut got = String::new();
        std::io::BufRead::read_line(&mut acks, &mut got).unwrap();
        got.trim().to_string()
    };
    assert_eq!(
        ack(&mut input, "{\"kind\":\"prompt\",\"text\":\"turn 1\"}\n"),
        "1"
    );
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    // The pipe stays open: the checkpoint waits (up to 3 s) for the lock
    // that `record` releases once its input is idle.
    let made = json_lines(&ok(&cairn(ws, &["checkpoint", "--json"])));
    assert_eq!(made[0]["lsn"], 2, "{made:?}");
    ok(&cairn(ws, &["track", "a.txt"]));
    assert_eq!(
        ack(&mut input, "{\"kind\":\"reply\",\"text\":\"turn 2\"}\n"),
        "3"
    );
    drop(input);
    let out = rec.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recorded 2 records"), "{err}");
    let log = json_lines(&ok(&cairn(ws, &["log", "--json"])));
    let kinds: Vec<&str> = log.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["prompt", "checkpoint.create", "reply"]);
}

/// A `cairn record --ack` running in `ws`, its stdin a pipe the test
/// writes, its acknowledgements read on a thread of their own so that the
/// test keeps writing whether or not they come.
struct LivePipe {
    child: std::process::Child,
    input: std::process::ChildStdin,
    acks: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    reader: std::thread::JoinHandle<()>,
    sent: usize,
}

impl LivePipe {
    fn start(ws: &Path) -> LivePipe {
        let mut child = spawn_cairn(ws, &["record", "--ack"]);
        let input = child.stdin.take().unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let acks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = std::sync::Arc::clone(&acks);
        let reader = std::thread::spawn(move || {
            for line in std::io::BufRead::lines(out) {
                into.lock().unwrap().push(line.unwrap().parse().unwrap());
            }
        });
        LivePipe {
            child,
            input,
            acks,
            reader,
            sent: 0,
        }
    }

    /// Sends the pipe's next line, a prompt of `session` saying
    /// `{session} {n}`.
    fn send(&mut self, session: &str) {
        let line = format!(
            "{{\"kind\":\"prompt\",\"session\":\"{session}\",\"text\":\"{session} {}\"}}\n",
            self.sent
        );
        self.input.write_all(line.as_bytes()).unwrap();
        self.input.flush().unwrap();
        self.sent += 1;
    }

    fn acked(&self) -> usize {
        self.acks.lock().unwrap().len()
    }

    /// Ends the input; the LSNs acknowledged and the process's stderr.
    fn finish(self) -> (Vec<u64>, String) {
        drop(self.input);
        let out = self.child.wait_with_output().unwrap();
        self.reader.join().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let acks = self.acks.lock().unwrap().clone();
        (acks, err)
    }
}

/// The gap between two lines of a busy pipe (an agent streaming tool
/// output): well under the 0.2 s of idle input after which `record` lets
/// go of the lock anyway, so only taking turns lets another writer in.
const BUSY_LINE_GAP: std::time::Duration = std::time::Duration::from_millis(50);

/// Checks that `session`'s records in `log` are its `sent` lines, in the
/// order sent, at the LSNs `acks` acknowledged.
fn recorded_in_order(log: &[serde_json::Value], session: &str, sent: usize, acks: &[u64]) {
    let mine: Vec<&serde_json::Value> = log.iter().filter(|r| r["session"] == session).collect();
    let texts: Vec<&str> = mine.iter().map(|r| r["text"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..sent).map(|i| format!("{session} {i}")).collect();
    assert_eq!(texts, want, "{session}: every line, in order");
    let lsns: Vec<u64> = mine.iter().map(|r| r["lsn"].as_u64().unwrap()).collect();
    assert_eq!(
        lsns, acks,
        "{session}: each acknowledged, as the LSN it was recorded at"
    );
}

/// Regression (user trial: a busy agent pipe shut every other writer
/// out): a `cairn record` pipe that is never idle, a line every 50 ms, lets
/// a `cairn checkpoint` in, rather than the checkpoint failing as "locked"
/// after waiting 3 s; every line sent is acknowledged and recorded in order.
#[test]
fn a_busy_record_pipe_lets_a_checkpoint_in() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().to_path_buf();
    ok(&cairn(&ws, &["init"]));
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let mut pipe = LivePipe::start(&ws);
    for _ in 0..10 {
        pipe.send("agent");
        std::thread::sleep(BUSY_LINE_GAP);
    }
    let at = ws.clone();
    let checkpoint = std::thread::spawn(move || cairn(&at, &["checkpoint", "--json"]));
    // The pipe stays busy for as long as the checkpoint runs, and a while
    // after, so `record` takes the lock back.
    while !checkpoint.is_finished() {
        pipe.send("agent");
        std::thread::sleep(BUSY_LINE_GAP);
    }
    for _ in 0..10 {
        pipe.send("agent");
        std::thread::sleep(BUSY_LINE_GAP);
    }
    let made = json_lines(&ok(&checkpoint.join().unwrap()));
    let sent = pipe.sent;
    let (acks, err) = pipe.finish();
    assert!(err.contains(&format!("recorded {sent} records")), "{err}");
    let log = json_lines(&ok(&cairn(&ws, &["log", "--json"])));
    recorded_in_order(&log, "agent", sent, &acks);
    let cp: Vec<&serde_json::Value> = log
        .iter()
        .filter(|r| r["kind"] == "checkpoint.create")
        .collect();
    assert_eq!(cp.len(), 1, "{log:?}");
    assert_eq!(cp[0]["lsn"], made[0]["lsn"]);
    assert!(!ws.join(".cairn/LOCK.wanted").exists());
}

/// Two busy `cairn record` pipes take turns at the lock: each has its
/// lines acknowledged while the other is still busy (before, the second
/// got none until the first pipe ended), and both are recorded whole and
/// in order.
#[test]
fn two_busy_record_pipes_take_turns() {
    /// Lines each pipe sends before the test looks at the acknowledgements.
    const FIRST_LINES: usize = 20;
    /// How many more lines (a line every 50 ms, on each pipe) the test waits
    /// for both pipes to have acknowledged the first ones, as the machine
    /// may be slow: 30 s, while taking turns needs well under one.
    const MAX_MORE_LINES: usize = 600;
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let mut a = LivePipe::start(ws);
    let mut b = LivePipe::start(ws);
    for _ in 0..FIRST_LINES {
        a.send("a");
        b.send("b");
        std::thread::sleep(BUSY_LINE_GAP);
    }
    // Both stay busy until each has acknowledged its first lines.
    let mut more = 0;
    while (a.acked() < FIRST_LINES || b.acked() < FIRST_LINES) && more < MAX_MORE_LINES {
        a.send("a");
        b.send("b");
        std::thread::sleep(BUSY_LINE_GAP);
        more += 1;
    }
    let (got_a, got_b) = (a.acked(), b.acked());
    assert!(
        got_a >= FIRST_LINES && got_b >= FIRST_LINES,
        "while both pipes were busy, a acknowledged {got_a} lines and b {got_b}, of {FIRST_LINES} each"
    );
    let (sent_a, sent_b) = (a.sent, b.sent);
    let (acks_a, _) = a.finish();
    let (acks_b, _) = b.finish();
    let log = json_lines(&ok(&cairn(ws, &["log", "--json"])));
    assert_eq!(log.len(), sent_a + sent_b);
    recorded_in_order(&log, "a", sent_a, &acks_a);
    recorded_in_order(&log, "b", sent_b, &acks_b);
}

#[test]
fn a_second_writer_is_told_the_store_is_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let holder = hold_the_lock(ws);
    let o = cairn(ws, &["checkpoint"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("locked") && err.contains("LOCK"), "{err}");
    // The holder is named by its process id (this test process).
    assert!(
        err.contains(&format!("another process, pid {}", std::process::id())),
        "{err}"
    );
    // It announced that it waited (for a `cairn record` to yield; this
    // holder does not), and took the announcement back when it gave up.
    assert!(!ws.join(".cairn/LOCK.wanted").exists());
    holder.close().unwrap();
}

/// Listing checkpoints and planning a rollback only read: they work while
/// another process records (holding the lock), and write nothing, not even
/// the workspace's caches.
#[test]
fn checkpoints_and_a_dry_run_read_beside_a_recording_process() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let made = json_lines(&ok(&cairn(
        ws,
        &["checkpoint", "--label", "first", "--json"],
    )));
    let id = made[0]["id"].as_str().unwrap().to_string();
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    std::fs::write(ws.join("b.txt"), "new\n").unwrap();
    let caches = |ws: &Path| -> Vec<(String, std::time::SystemTime, u64)> {
        let mut v: Vec<_> = std::fs::read_dir(ws.join(".cairn/snapshot"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = e.metadata().unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    m.modified().unwrap(),
                    m.len(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = caches(ws);
    let holder = hold_the_lock(ws);

    let list = json_lines(&ok(&cairn(ws, &["checkpoints", "--json"])));
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["label"], "first");

    let plan = json_lines(&ok(&cairn(ws, &["rollback", "--dry-run", "--json", &id])));
    assert_eq!(plan[0]["dry_run"], true);
    assert_eq!(plan[0]["written"], serde_json::json!(["a.txt"]));
    assert_eq!(plan[0]["deleted"], serde_json::json!(["b.txt"]));
    let text = ok(&cairn(ws, &["rollback", "--dry-run", &id]));
    assert!(text.contains("would write 1, delete 1"), "{text}");

    // Nothing changed: the files, the caches.
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "two\n");
    assert!(ws.join("b.txt").exists());
    assert_eq!(caches(ws), before, "a read-only command wrote a cache");

    // The real rollback needs the lock.
    let o = cairn(ws, &["rollback", &id]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("locked"), "{err}");
    holder.close().unwrap();
    // Once it is free, the same plan is carried out.
    let done = json_lines(&ok(&cairn(ws, &["rollback", "--json", &id])));
    assert_eq!(done[0]["written"], plan[0]["written"]);
    assert_eq!(done[0]["deleted"], plan[0]["deleted"]);
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
}

/// A session long enough for the log to train its zstd dictionary: `stats`
/// names it, `log --json` gives every event back, `verify` is clean, and
/// the store takes well under the bytes of its own JSONL export.
#[test]
fn a_long_session_is_recorded_with_the_logs_dictionary() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let words = [
        "the", "parser", "fails", "on", "empty", "input", "so", "we", "add", "a", "check", "and",
        "a", "test", "for", "it", "then", "run", "cargo", "build", "again",
    ];
    let mut input = String::new();
    let mut n = 0u64;
    while input.len() < 1_600_000 {
        let text: Vec<&str> = (0..60)
            .map(|j| words[((n * 7 + j * 13 + n / 3) % words.len() as u64) as usize])
            .collect();
        let kind = if n.is_multiple_of(2) {
            "prompt"
        } else {
            "reply"
        };
        input.push_str(&format!(
            "{{\"kind\":\"{kind}\",\"session\":\"s{}\",\"text\":\"{} ({n})\"}}\n",
            n / 100,
            text.join(" ")
        ));
        n += 1;
    }
    let rec = ok(&cairn_stdin(ws, &["record", "--json"], Some(&input)));
    let summary: serde_json::Value = serde_json::from_str(rec.trim()).unwrap();
    assert_eq!(summary["count"], n);
    let stats: serde_json::Value =
        serde_json::from_str(ok(&cairn(ws, &["stats", "--json"])).trim()).unwrap();
    let dict = stats["log_dictionary"].as_str().expect("a log dictionary");
    assert!(ws.join(".cairn/log").join(dict).exists(), "{dict}");
    let out = ok(&cairn(ws, &["log", "--json"]));
    let got = json_lines(&out);
    let sent: Vec<&str> = input.lines().collect();
    assert_eq!(got.len(), sent.len());
    for (g, s) in got.iter().zip(&sent) {
        let s: serde_json::Value = serde_json::from_str(s).unwrap();
        assert_eq!((&g["kind"], &g["text"]), (&s["kind"], &s["text"]));
    }
    ok(&cairn(ws, &["verify"]));
    // The first MiB of bodies (two thirds of these records) precedes the
    // dictionary and is stored as is (0.85x of the JSONL when nothing
    // used a dictionary); the rest shrinks to about a fifth (0.62x in all).
    let log_bytes = stats["log_bytes"].as_u64().unwrap();
    assert!(
        (log_bytes as f64) < 0.7 * out.len() as f64,
        "log {log_bytes} bytes, its JSONL {}",
        out.len()
    );

    // Without its dictionary and the dictionary's second copy (one alone
    // is enough: `tests/repair_mends.rs`): verify says which file and what
    // to do, repair refuses (it would drop intact records), nothing is
    // changed; the file restored, all is well again.
    let file = ws.join(".cairn/log").join(dict);
    let saved = std::fs::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_file(ws.join(".cairn/log").join(format!("{dict}.copy"))).unwrap();
    let v = cairn(ws, &["verify"]);
    assert_eq!(v.status.code(), Some(3));
    let text = String::from_utf8_lossy(&v.stdout);
    assert!(text.contains(dict) && text.contains("is missing"), "{text}");
    assert!(text.contains("restore it"), "{text}");
    let r = cairn(ws, &["repair"]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains(dict));
    std::fs::write(&file, saved).unwrap();
    ok(&cairn(ws, &["verify"]));
    assert_eq!(json_lines(&ok(&cairn(ws, &["log", "--json"]))), got);
}

#[test]
fn record_names_each_rejected_line_and_why() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let input = concat!(
        "[]\n",
        r#"{"kind":"file.write","session":"s"}"#,
        "\n",
        r#"{"kind":"file.edit","path":""}"#,
        "\n",
        r#"{"kind":"file.move","path":"a.rs","to_path":"."}"#,
        "\n",
        r#"{"kind":"file.write","path":"src/main.rs"}"#,
        "\n",
        r#"{"kind":"tool_call","tool":"read","path":"/usr/include/stdio.h"}"#,
        "\n",
    );
    let o = cairn_stdin(ws, &["record", "--json"], Some(input));
    assert_eq!(o.status.code(), Some(4), "rejected lines: exit 4");
    let summary = json_lines(&String::from_utf8(o.stdout).unwrap());
    assert_eq!(summary[0]["count"], 2);
    assert_eq!(summary[0]["rejected"], 4);
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "stdin:1: rejected: an event is a JSON object",
        "stdin:2: rejected: missing field `path`: a `file.write` event names the file it touched",
        "stdin:3: rejected: field `path`: `` is empty",
        "stdin:4: rejected: field `to_path`: `.` names the workspace itself",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }
    let log = json_lines(&ok(&cairn(ws, &["log", "--json"])));
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["path"], "src/main.rs");
}

#[test]
fn import_refuses_a_bad_file_whole_and_names_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(a.join("src")).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    ok(&cairn(&a, &["init"]));
    ok(&cairn(&b, &["init"]));
    std::fs::write(a.join("src/main.rs"), "fn main() {}\n").unwrap();
    ok(&cairn(&a, &["checkpoint", "--label", "start"]));
    let export = tmp.path().join("a.jsonl");
    ok(&cairn(
        &a,
        &["export", "--output", export.to_str().unwrap()],
    ));

    // A store's export names blobs (the checkpoint's manifest) that another
    // store does not hold: refused, naming the line, nothing recorded.
    let o = cairn(
        &b,
        &["import", "--format", "jsonl", export.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(4), "a refused line exits with 4");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a.jsonl:1: the checkpoint.create event refers to blob")
            && err.contains("not in this store"),
        "{err}"
    );

    let line = |path: &str| {
        format!(
            r#"{{"timestamp":"2026-11-22T02:05:00.000Z","sessionId":"s","agentName":"a","toolName":"write_file","operation":"write","path":"{path}","ok":true}}"#
        )
    };
    let good = tmp.path().join("good.jsonl");
    std::fs::write(&good, format!("{}\n{}\n", line("src/a.rs"), line("b.rs"))).unwrap();
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n\n{}\n", line("c.rs"), line("."))).unwrap();
    let o = cairn(
        &b,
        &[
            "import",
            "--format",
            "comma",
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "import stopped in",
        "the 2 records of the files before it were recorded",
        "bad.jsonl:3: field `path`: `.` names the workspace itself",
        "(nothing from",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }
    let log = json_lines(&ok(&cairn(&b, &["log", "--json"])));
    let paths: Vec<&str> = log.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["src/a.rs", "b.rs"], "the good file only");
}

#[test]
fn following_into_a_pipe_ends_when_its_reader_does() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let mut child = store_with_a_follower(tmp.path(), "hi");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap(); // the reader is dropped here: the pipe's read end closes
    assert!(first.contains("\"text\":\"hi\""), "{first}");
    // A hang guard, not a timing check: it ends within one poll (~0.2 s).
    let guard = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > guard {
            child.kill().unwrap();
            panic!("`cairn export --follow` ran on after its reader closed the pipe");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn diff_reads_paths_as_rollback_does() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.rs"), "one\n").unwrap();
    let c = json_lines(&ok(&cairn(ws, &["checkpoint", "--label", "one", "--json"])));
    let id = c[0]["id"].as_str().unwrap().to_string();
    std::fs::write(ws.join("src/a.rs"), "two\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "--label", "two"]));
    let abs = ws.join("src").display().to_string();
    for scope in ["./src/", "src", abs.as_str()] {
        let out = ok(&cairn(ws, &["diff", &id, "head", "--", scope]));
        assert!(out.contains("+two"), "{scope}: {out}");
    }
    let o = cairn(ws, &["diff", &id, "head", "--", "/etc"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a path outside is refused, not an empty diff"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("refusing path `/etc`"));
    // log --path and history read paths the same way.
    ok(&cairn_stdin(
        ws,
        &["record"],
        Some("{\"kind\":\"file.edit\",\"path\":\"src/a.rs\"}\n"),
    ));
    for scope in ["./src/", "src", abs.as_str()] {
        let lines = json_lines(&ok(&cairn(ws, &["log", "--path", scope, "--json"])));
        assert_eq!(lines.len(), 1, "log --path {scope}");
        let lines = json_lines(&ok(&cairn(ws, &["history", scope, "--json"])));
        assert_eq!(lines.len(), 1, "history {scope}");
    }
}

#[test]
fn a_follower_never_keeps_a_recorder_from_writing() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    // `export --follow` runs for as long as its reader reads: it used to
    // hold the store's lock, so every `record` meanwhile failed.
    let mut follower = store_with_a_follower(ws, "first");
    let mut lines = std::io::BufReader::new(follower.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("\"first\""));
    // The follower has the store open now.
    for i in 0..3 {
        let out = ok(&cairn_stdin(
            ws,
            &["record", "--ack"],
            Some(&format!(
                "{{\"kind\":\"reply\",\"text\":\"while followed {i}\"}}\n"
            )),
        ));
        assert_eq!(out.trim(), (i + 2).to_string());
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains(&format!("while followed {i}")), "{line}");
    }
    // So can a checkpoint, beside it.
    ok(&cairn(ws, &["checkpoint"]));
    follower.kill().unwrap();
    follower.wait().unwrap();
}

#[test]
fn a_store_this_user_may_only_read_can_be_read() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    ok(&cairn_stdin(
        ws,
        &["record"],
        Some("{\"kind\":\"prompt\",\"text\":\"kept\"}\n"),
    ));
    // Readers take no lock and write nothing they need: a store whose lock
    // file cannot be opened for writing (here: replaced by a directory,
    // which fails for root as for anyone) is still read.
    let lock = ws.join(".cairn/LOCK");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    assert!(ok(&cairn(ws, &["log", "--json"])).contains("\"kept\""));
    ok(&cairn(ws, &["verify"]));
    let o = cairn_stdin(ws, &["record"], Some("{\"kind\":\"prompt\"}\n"));
    assert_eq!(o.status.code(), Some(1), "a writer still needs the lock");
}

#[test]
fn import_refuses_a_line_naming_a_checkpoint_that_is_not_one() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let f = ws.join("in.jsonl");
    std::fs::write(
        &f,
        "{\"kind\":\"prompt\",\"text\":\"p\"}\n{\"kind\":\"checkpoint.discard\",\"checkpoint\":\"c1\"}\n",
    )
    .unwrap();
    let o = cairn(ws, &["import", "--format", "jsonl", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("in.jsonl:2: field `checkpoint` names c1, which is a prompt record")
            && err.contains("nothing from"),
        "{err}"
    );
    assert!(ok(&cairn(ws, &["log", "--json"])).is_empty());
}

#[test]
fn paths_are_read_from_the_current_directory_inside_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("top.txt"), "top\n").unwrap();
    std::fs::write(ws.join("src/y.rs"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint"]));
    std::fs::write(ws.join("top.txt"), "top 2\n").unwrap();
    std::fs::write(ws.join("src/y.rs"), "two\n").unwrap();
    let src = ws.join("src");
    assert_eq!(ok(&cairn(&src, &["show", "c1:./y.rs"])), "one\n");
    assert_eq!(ok(&cairn(&src, &["show", "c1:src/y.rs"])), "one\n");
    let d = ok(&cairn(
        &src,
        &["rollback", "c1", "--path", "y.rs", "--dry-run"],
    ));
    assert!(d.contains("src/y.rs") && !d.contains("top.txt"), "{d}");
    let d = ok(&cairn(
        &src,
        &["rollback", "c1", "--path", "../top.txt", "--dry-run"],
    ));
    assert!(d.contains("top.txt") && !d.contains("y.rs"), "{d}");
    ok(&cairn(&src, &["rollback", "c1", "--path", "y.rs"]));
    assert_eq!(
        std::fs::read_to_string(ws.join("src/y.rs")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("top.txt")).unwrap(),
        "top 2\n"
    );
    // No record names src/y.rs but the rollback that restored it; the
    // checkpoints that captured it ("one", then the shell edit "two", in
    // the checkpoint before the rollback) changed it too.
    let kinds = |args: &[&str]| -> Vec<String> {
        json_lines(&ok(&cairn(&src, args)))
            .iter()
            .map(|r| r["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(kinds(&["history", "y.rs", "--json"]), ["rollback"]);
    assert_eq!(
        kinds(&["history", "y.rs", "--checkpoints", "--json"]),
        ["checkpoint.create", "checkpoint.create", "rollback"]
    );
    let o = cairn(
        &src,
        &["rollback", "c1", "--path", "../../elsewhere", "--dry-run"],
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "a path above the workspace is refused"
    );
}

#[test]
fn import_reads_stdin_as_dash_and_branches_explains_an_imported_rollback() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let line = "{\"ts\":1732400000000,\"action\":\"rollback\",\"ok\":true}\n";
    let out = ok(&cairn_stdin(
        ws,
        &["import", "--format", "cortexide", "--json", "-"],
        Some(line),
    ));
    assert_eq!(json_lines(&out)[0]["count"], 1, "{out}");
    let branches = ok(&cairn(ws, &["branches"]));
    assert!(
        branches.contains("1 rollback record names no checkpoint of this store"),
        "{branches}"
    );
    let o = cairn_stdin(
        ws,
        &["import", "--format", "cortexide", "-"],
        Some("{\"ts\":1,\"action\":\"bogus\",\"ok\":true}\n"),
    );
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stdin:1: unknown action `bogus`"), "{err}");
}

#[test]
fn rollback_keeps_a_file_its_undo_point_cannot_hold_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(ws.join("gen.txt"), "v1").unwrap();
    ok(&cairn(ws, &["init"]));
    ok(&cairn(ws, &["checkpoint"]));
    std::fs::write(ws.join(".gitignore"), "*.log\ngen.txt\n").unwrap();
    std::fs::write(ws.join("gen.txt"), "the user's v2").unwrap();
    let dry = ok(&cairn(ws, &["rollback", "c1", "--dry-run"]));
    assert!(dry.contains("keep   gen.txt (ignored"), "{dry}");
    let out = json_lines(&ok(&cairn(ws, &["rollback", "c1", "--json"])));
    assert_eq!(out[0]["kept"][0]["path"], "gen.txt", "{out:?}");
    assert_eq!(out[0]["written"], serde_json::json!([".gitignore"]));
    assert_eq!(
        std::fs::read_to_string(ws.join("gen.txt")).unwrap(),
        "the user's v2"
    );
}

#[test]
fn show_of_a_directory_says_it_is_one() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    ok(&cairn(ws, &["init"]));
    ok(&cairn(ws, &["checkpoint"]));
    let o = cairn(ws, &["show", "c1:src"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("`src` is a directory"), "{err}");
    let o = cairn(ws, &["show", "c1:nope"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not exist"));
    // A trailing `/` asks for a directory: a file by that name is refused,
    // not printed (user trial 12 N9.4).
    let o = cairn(ws, &["show", "c1:src/main.rs/"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("`src/main.rs` is a file at c1"), "{err}");
    let o = cairn(ws, &["show", "c1:src/"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("`src` is a directory"));
}

/// A store remembers its workspace: another directory given with
/// `--workspace` is refused before anything is captured or rewritten; a
/// store kept outside its workspace finds it without `--workspace`; a
/// project moved with its `.cairn` keeps working; `init --rebind` moves
/// an outside store to a moved workspace.
#[test]
fn a_store_remembers_its_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path();
    for d in ["a", "b", "w"] {
        std::fs::create_dir(top.join(d)).unwrap();
    }
    std::fs::write(top.join("a/f.txt"), "a\n").unwrap();
    std::fs::write(top.join("b/f.txt"), "b\n").unwrap();
    ok(&cairn(top, &["init", "a"]));
    ok(&cairn(top, &["--store", "a/.cairn", "checkpoint"]));
    for args in [
        &["--store", "a/.cairn", "--workspace", "b", "rollback", "c1"][..],
        &["--store", "a/.cairn", "--workspace", "b", "checkpoint"][..],
        &[
            "--store",
            "a/.cairn",
            "--workspace",
            "b",
            "rollback",
            "--dry-run",
            "c1",
        ][..],
    ] {
        let o = cairn(top, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("belongs to the workspace") && err.contains("check --workspace"),
            "{err}"
        );
    }
    assert_eq!(std::fs::read_to_string(top.join("b/f.txt")).unwrap(), "b\n");
    // Queries, the checkpoint list included, do not need the workspace.
    ok(&cairn(
        top,
        &["--store", "a/.cairn", "--workspace", "b", "log"],
    ));
    let listed = ok(&cairn(
        top,
        &["--store", "a/.cairn", "--workspace", "b", "checkpoints"],
    ));
    assert!(listed.contains("c1"), "{listed}");

    // Moved with its store: still its workspace.
    std::fs::rename(top.join("a"), top.join("a2")).unwrap();
    std::fs::write(top.join("a2/f.txt"), "a changed\n").unwrap();
    let made = json_lines(&ok(&cairn(&top.join("a2"), &["checkpoint", "--json"])));
    assert_eq!(made[0]["changed"], 1);

    // A store outside its workspace finds it from anywhere.
    std::fs::write(top.join("w/g.txt"), "g\n").unwrap();
    ok(&cairn(top, &["--store", "s", "init", "w"]));
    let made = json_lines(&ok(&cairn(
        &top.join("b"),
        &["--store", "../s", "checkpoint", "--json"],
    )));
    assert_eq!(made[0]["files"], 1, "the bound workspace w was captured");
    std::fs::rename(top.join("w"), top.join("w2")).unwrap();
    let o = cairn(top, &["--store", "s", "checkpoint"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("does not exist") && err.contains("--rebind"),
        "{err}"
    );
    let o = cairn(top, &["--store", "s", "init", "w2"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "init does not rebind without --rebind"
    );
    ok(&cairn(top, &["--store", "s", "init", "w2", "--rebind"]));
    let list = json_lines(&ok(&cairn(
        top,
        &["--store", "s", "rollback", "--dry-run", "--json", "c1"],
    )));
    assert_eq!(list[0]["written"], serde_json::json!([]));
}

/// `-q rollback` prints nothing when it succeeds (trial 11 P14.17); a
/// `--path` that names nothing is refused like a mistyped git pathspec.
#[test]
fn quiet_rollback_prints_nothing_and_a_path_naming_nothing_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint"]));
    std::fs::write(ws.join("b.txt"), "two\n").unwrap();
    let o = cairn(ws, &["rollback", "c1", "--path", "a.tx"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`--path a.tx`") && err.contains("matches nothing"),
        "{err}"
    );
    let o = cairn(ws, &["-q", "rollback", "c1"]);
    assert_eq!((ok(&o), common::err(&o)), (String::new(), String::new()));
    assert!(!ws.join("b.txt").exists());
}

/// Rollbacks by a user who may not write a read-only (555) directory:
/// cairn opens it up for the rollback and sets its mode back at the end,
/// so rolling back, and undoing that, work as they do for root; a file
/// under a directory the user may not search (000) is kept, not overwritten. Run as
/// `nobody` through `setpriv` when the tests run as root (as in CI): root
/// may write anywhere, which would hide the failure.
#[test]
fn rollbacks_work_for_a_user_who_cannot_write_read_only_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // A copy every user can run, wherever the build directory is.
    let bin = dir.join("cairn");
    common::copy_of_cairn(&bin);
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if root && setpriv.is_none() {
        eprintln!("skipping: running as root and setpriv is not installed");
        return;
    }
    let script = r#"set -e
mkdir w && cd w
mkdir -p ro/q; echo orig > ro/f; echo q > ro/q/f; chmod 555 ro
../cairn init -q > /dev/null
../cairn checkpoint -q > /dev/null
chmod 755 ro; echo changed > ro/f; echo g > ro/g; ../cairn checkpoint -q > /dev/null
../cairn rollback -q c1 > /dev/null
stat -c %a ro; cat ro/f; ls ro
../cairn rollback -q c3 > /dev/null
stat -c %a ro; cat ro/f; ls ro
chmod 755 ro; rm -rf ro; ../cairn checkpoint -q > /dev/null
../cairn rollback -q c1 > /dev/null
stat -c %a ro; cat ro/q/f
cd .. && mkdir z && cd z
mkdir sd; echo in1 > sd/in; ../cairn init -q > /dev/null; ../cairn checkpoint -q > /dev/null
echo precious > sd/in; chmod 000 sd; ../cairn checkpoint -q > /dev/null
../cairn rollback -q c1 > /dev/null
chmod 755 sd; cat sd/in
"#;
    let mut cmd = match (root, setpriv) {
        (true, Some(sp)) => {
            let mut c = Command::new(sp);
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "bash",
                "-c",
                script,
            ]);
            c
        }
        _ => {
            let mut c = Command::new("bash");
            c.args(["-c", script]);
            c
        }
    };
    let o = cmd
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let out = ok(&o);
    assert_eq!(
        out,
        // The last: a file under a directory the user may not search (000)
        // is kept, as the undo point could not hold it.
        "555\norig\nf\nq\n755\nchanged\nf\ng\nq\n555\nq\nprecious\n",
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A user who may not write a store is told what still works. Needs a
/// store owned by another user: runs where the tests run as root with
/// `setpriv` (as in CI), as `nobody`.
#[test]
fn a_user_who_may_not_write_the_store_is_told_what_still_works() {
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .filter(|_| root)
    else {
        eprintln!("skipping: needs root and setpriv to act as another user");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = dir.join("cairn");
    common::copy_of_cairn(&bin);
    std::fs::create_dir(dir.join("w")).unwrap();
    ok(&cairn(&dir.join("w"), &["init"]));
    for d in [dir.to_path_buf(), dir.join("w"), dir.join("w/.cairn")] {
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let o = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["--store", "w/.cairn", "checkpoint"])
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Permission denied") && err.contains("may not write the store"),
        "{err}"
    );
}

/// `log` streams its output in parts (a table of 1,000 rows at a time):
/// across parts the header is printed once, every record once and in
/// order, and `--json` is the canonical export.
#[test]
fn a_long_log_prints_whole_across_table_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let mut input = String::new();
    for i in 0..2_500 {
        let s = if i < 1_200 {
            "s"
        } else {
            "a-much-longer-session-name"
        };
        input.push_str(&format!(
            "{{\"kind\":\"prompt\",\"session\":\"{s}\",\"text\":\"turn {i}\",\"ts\":{}}}\n",
            1_700_000_000_000u64 + i
        ));
    }
    ok(&cairn_stdin(
        ws,
        &["record", "--durability", "never"],
        Some(&input),
    ));
    let table = ok(&cairn(ws, &["log"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2_501);
    assert!(lines[0].starts_with("LSN"));
    assert_eq!(table.matches("SUMMARY").count(), 1);
    for (i, l) in lines[1..].iter().enumerate() {
        assert!(l.starts_with(&format!("{} ", i + 1)), "{l}");
        assert!(l.contains(&format!("\"turn {i}\"")), "{l}");
    }
    let json = ok(&cairn(ws, &["log", "--json"]));
    assert_eq!(json, ok(&cairn(ws, &["export"])));
    assert_eq!(json.lines().count(), 2_500);
    let newest = ok(&cairn(ws, &["log", "--newest-first", "--json"]));
    let lsns: Vec<u64> = json_lines(&newest)
        .iter()
        .map(|r| r["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(lsns, (1..=2_500).rev().collect::<Vec<_>>());
}

/// Small things a reader of the tables relies on: a symlink's mode is
/// shown as git shows it, a checkpoint parent is named by its id, blame's
/// columns line up whatever the width of an LSN.
#[test]
fn tables_name_symlinks_parents_and_align_blame() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::write(ws.join("f"), "a\nb\n").unwrap();
    std::os::unix::fs::symlink("f", ws.join("lnk")).unwrap();
    ok(&cairn(ws, &["checkpoint"]));
    let filler = "{\"kind\":\"prompt\"}\n".repeat(12);
    ok(&cairn_stdin(ws, &["record"], Some(&filler)));
    std::fs::write(ws.join("f"), "a\nB\n").unwrap();
    ok(&cairn(ws, &["checkpoint"]));
    let tree = ok(&cairn(ws, &["tree", "head"]));
    assert!(
        tree.lines()
            .any(|l| l.starts_with("120000 ") && l.ends_with(" lnk")),
        "{tree}"
    );
    assert!(
        tree.lines()
            .any(|l| l.starts_with("   644 ") && l.ends_with(" f")),
        "{tree}"
    );
    let branches = ok(&cairn(ws, &["branches"]));
    let c14 = branches.lines().find(|l| l.starts_with("c14")).unwrap();
    assert!(c14.contains(" c1 "), "{branches}");
    // The same when only c1's children are listed (trial 13 N11: `@1`).
    let children = ok(&cairn(ws, &["branches", "c1"]));
    let c14 = children.lines().find(|l| l.starts_with("c14")).unwrap();
    assert!(c14.contains(" c1 "), "{children}");
    let blame = ok(&cairn(ws, &["blame", "head", "f"]));
    let cols: Vec<usize> = blame.lines().map(|l| l.find("default").unwrap()).collect();
    assert_eq!(cols, [8, 8], "{blame}");
}

#[test]
fn a_blob_healed_by_a_checkpoint_leaves_verify_clean_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    // Contents zstd cannot shrink: stored verbatim, so the test finds them.
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(ws.join("data.bin"), &noise).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let pack = ws.join(".cairn/blobs/pack-00000001.pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    let at = bytes
        .windows(64)
        .position(|w| w == &noise[2000..2064])
        .expect("the contents are stored verbatim")
        + 10;
    bytes[at] ^= 0xff;
    std::fs::write(&pack, &bytes).unwrap();
    let o = cairn(ws, &["verify"]);
    assert_eq!(o.status.code(), Some(3), "{}", all_output(&o));
    // A checkpoint of the intact workspace file stores a good copy.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(ws.join("data.bin"))
        .unwrap()
        .set_modified(later)
        .unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let out = ok(&cairn(ws, &["verify"]));
    assert!(out.contains("ok: no damage found"), "{out}");
    assert!(
        out.contains("note: 1 damaged entry left in the packs, replaced by an intact copy"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&cairn(ws, &["verify", "--json"]))).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(
        v["superseded_blob_entries"].as_array().unwrap().len(),
        1,
        "{v}"
    );
    // Every checkpoint of the file reads back intact.
    let shown = cairn(ws, &["show", "c1:data.bin"]);
    assert_eq!(shown.stdout, noise, "{}", err(&shown));
}

#[test]
fn after_a_repair_lost_checkpoints_are_named_and_the_export_imports_back() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("f"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    std::fs::write(ws.join("f"), "two\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2
    ok(&cairn(ws, &["rollback", "c1", "-q"])); // the undo point c3, the rollback @4
                                               // Damage the body of c1's record, the segment's first frame (its
                                               // header: 4 bytes length, then kind, LSN, CRC, chain: 52 bytes).
    let seg = ws.join(".cairn/log/00000000000000000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let first_frame = 64;
    assert_eq!(bytes[first_frame + 12], 1, "LSN 1 comes first");
    bytes[first_frame + 55] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    assert_eq!(cairn(ws, &["verify"]).status.code(), Some(3));
    ok(&cairn(ws, &["repair", "-q"]));
    ok(&cairn(ws, &["verify"]));
    // The rollback to the lost checkpoint is still in the branch graph.
    let b = ok(&cairn(ws, &["branches"]));
    assert!(
        b.lines()
            .any(|l| l.starts_with("@4 ") && l.contains("c1 (lost to damage)")),
        "{b}"
    );
    let lines = json_lines(&ok(&cairn(ws, &["branches", "--json"])));
    let rb = lines.iter().find(|v| v["lsn"] == 4).expect("@4 listed");
    assert_eq!(rb["lost_target"], "c1");
    assert!(rb["parent"].is_null());
    // The repaired store's export imports back into a store holding its
    // blobs: the placeholder at LSN 1 is what the rollback names now.
    let export = ok(&cairn(ws, &["export"]));
    std::fs::write(ws.join("ex.jsonl"), &export).unwrap();
    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    ok(&cairn(&copy, &["init", "-q"]));
    std::fs::remove_dir_all(copy.join(".cairn/blobs")).unwrap();
    let status = Command::new("cp")
        .args(["-a"])
        .arg(ws.join(".cairn/blobs"))
        .arg(copy.join(".cairn/blobs"))
        .status()
        .unwrap();
    assert!(status.success());
    let ex = ws.join("ex.jsonl");
    ok(&cairn(
        &copy,
        &["import", "--format", "jsonl", ex.to_str().unwrap()],
    ));
    let again = ok(&cairn(&copy, &["export"]));
    let strip = |s: &str| -> Vec<serde_json::Value> {
        json_lines(s)
            .into_iter()
            .map(|mut v| {
                v.as_object_mut().unwrap().remove("hash");
                v
            })
            .collect()
    };
    assert_eq!(strip(&again), strip(&export));
    // A hand-written record may still not name a record that is no
    // checkpoint and no placeholder.
    let o = cairn_stdin(
        ws,
        &["record"],
        Some("{\"kind\":\"rollback\",\"target\":\"c4\"}\n"),
    );
    assert!(failed(&o).contains("not a checkpoint"), "{}", err(&o));
}

#[test]
fn tree_and_diff_name_a_file_a_checkpoint_did_not_capture() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("small.txt"), "kept\n").unwrap();
    // Over the 256 MiB a checkpoint stores, sparse: nothing is written.
    let big = std::fs::File::create(ws.join("big.bin")).unwrap();
    big.set_len(cairn::checkpoint::DEFAULT_MAX_FILE_BYTES + 1)
        .unwrap();
    drop(big);
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    std::fs::write(ws.join("big.bin"), "now small\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2
    let t = ok(&cairn(ws, &["tree", "c1"]));
    assert!(t.contains("small.txt"), "{t}");
    assert!(t.contains("not captured at c1"), "{t}");
    assert!(
        t.lines()
            .any(|l| l.contains("too large") && l.ends_with("big.bin")),
        "{t}"
    );
    let d = ok(&cairn(ws, &["diff", "c1", "c2"]));
    assert!(
        d.contains("big.bin not captured at c1 (too large)") && !d.contains("+now small"),
        "{d}"
    );
    let j = json_lines(&ok(&cairn(ws, &["diff", "c1", "c2", "--json"])));
    assert_eq!(j.len(), 1);
    assert_eq!(j[0]["status"], "added");
    assert_eq!(j[0]["not_captured_at"], "c1");
    assert_eq!(j[0]["not_captured_why"], "too_large");
    // The other way round: "removed" is not what happened either.
    let d = ok(&cairn(ws, &["diff", "c2", "c1"]));
    assert!(d.contains("big.bin not captured at c1 (too large)"), "{d}");
    // Nor "does not exist" for show; a path that never was still is.
    let o = cairn(ws, &["show", "c1:big.bin"]);
    let e = failed(&o);
    assert!(
        e.contains("`big.bin` was not captured at c1 (too large)"),
        "{e}"
    );
    let missing = cairn(ws, &["show", "c1:nope"]);
    assert_eq!(o.status.code(), missing.status.code());
    assert!(
        err(&missing).contains("does not exist"),
        "{}",
        err(&missing)
    );
}

/// Trial 14 T1: files and directories whose names are not UTF-8 cannot be
/// captured; the checkpoint counts each file, names them (escaped, `\xff`,
/// in double quotes, once: not `\\xff`), `--json` lists them in
/// `not_captured`, `tree` lists them under "not captured", a quiet
/// checkpoint warns, and a rollback leaves them where they are.
#[test]
fn names_that_are_not_utf8_are_named_and_never_deleted() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let p = |b: &[u8]| ws.join(OsStr::from_bytes(b));
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::create_dir(p(b"dir\xff")).unwrap();
    for i in 0..50 {
        let name = [b"dir\xff/f".as_slice(), i.to_string().as_bytes()].concat();
        std::fs::write(p(&name), "x").unwrap();
    }
    std::fs::write(p(b"bad\xfename.txt"), "y").unwrap();
    std::fs::write(ws.join("ok.txt"), "ok").unwrap();
    let out = ok(&cairn(ws, &["checkpoint"])); // c1
    assert!(out.contains("51 skipped"), "{out}");
    assert!(out.contains("non_utf8_name: 51"), "{out}");
    assert!(
        out.contains(
            r#"not captured: "bad\xfename.txt" (name not UTF-8), "dir\xff/f0" (name not UTF-8)"#
        ) && out.contains("46 more: a rollback cannot bring them back"),
        "{out}"
    );
    let o = cairn(ws, &["checkpoint", "-q"]); // c2
    let e = err(&o);
    assert!(
        e.starts_with("warning: not captured in c2: \"bad\\xfename.txt\" (name not UTF-8)"),
        "{e}"
    );
    let j = json_lines(&ok(&cairn(ws, &["checkpoint", "--json"]))); // c3
    let named = j[0]["not_captured"].as_array().unwrap();
    assert_eq!(named.len(), 51, "{named:?}");
    assert_eq!(named[0]["path"], "bad\\xfename.txt");
    assert_eq!(named[0]["why"], "non_utf8_name");
    assert_eq!(named[1]["path"], "dir\\xff/f0");
    let t = ok(&cairn(ws, &["tree", "c1"]));
    assert!(
        t.contains("ok.txt") && t.contains("not captured at c1"),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("name not UTF-8") && l.ends_with(r#""dir\xff/f49""#)),
        "{t}"
    );
    // They were not captured, so they do not come back; but no rollback
    // deletes one either.
    std::fs::remove_file(ws.join("ok.txt")).unwrap();
    std::fs::write(ws.join("later.txt"), "later").unwrap();
    ok(&cairn(ws, &["rollback", "-q", "c1"]));
    assert_eq!(std::fs::read_to_string(ws.join("ok.txt")).unwrap(), "ok");
    assert!(!ws.join("later.txt").exists());
    assert_eq!(std::fs::read(p(b"bad\xfename.txt")).unwrap(), b"y");
    assert_eq!(std::fs::read_dir(p(b"dir\xff")).unwrap().count(), 50);
}

/// The same point named by its LSN or as `head` gives the same answer as
/// its checkpoint id: a file the checkpoint could not capture is "not
/// captured", not removed or missing; a rollback that kept it carries the
/// mark to the head; a later record writing it clears it.
#[test]
fn a_file_not_captured_is_named_so_at_any_spelling_of_the_point() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::fs::write(ws.join("big.bin"), "small\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    let big = std::fs::OpenOptions::new()
        .write(true)
        .open(ws.join("big.bin"))
        .unwrap();
    big.set_len(cairn::checkpoint::DEFAULT_MAX_FILE_BYTES + 1)
        .unwrap();
    drop(big);
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2, @2
    for at in ["c2", "@2", "head"] {
        let d = ok(&cairn(ws, &["diff", "c1", at]));
        assert!(
            d.contains(&format!("big.bin not captured at {at} (too large)"))
                && !d.contains("-small"),
            "{at}: {d}"
        );
        let e = failed(&cairn(ws, &["show", &format!("{at}:big.bin")]));
        assert!(e.contains("was not captured at"), "{at}: {e}");
        let t = ok(&cairn(ws, &["tree", at]));
        assert!(t.contains(&format!("not captured at {at}")), "{at}: {t}");
        // `--json` lists entries with contents only, and names the rest
        // on stderr.
        let o = cairn(ws, &["tree", at, "--json"]);
        let paths: Vec<String> = json_lines(&ok(&o))
            .iter()
            .map(|v| v["path"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(paths, ["a.txt"], "{at}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains(&format!("1 file was not captured at {at}")) && e.contains("big.bin"),
            "{at}: {e}"
        );
    }
    // The rollback to c1 keeps big.bin (its undo point could not hold it):
    // at the head it is in the workspace, not captured, as it was at c2.
    ok(&cairn(ws, &["rollback", "-q", "c1"]));
    let t = ok(&cairn(ws, &["tree", "head"]));
    assert!(
        t.contains("not captured at head") && t.lines().any(|l| l.ends_with("big.bin")),
        "{t}"
    );
    let j = json_lines(&ok(&cairn(ws, &["diff", "c1", "head", "--json"])));
    assert_eq!(j.len(), 1, "{j:?}");
    assert_eq!(j[0]["not_captured_at"], "head");
    // A file too large since before c1's time that neither tree holds is
    // in no rollback's plan: still on disk, still not captured after it.
    let huge = std::fs::File::create(ws.join("huge.bin")).unwrap();
    huge.set_len(cairn::checkpoint::DEFAULT_MAX_FILE_BYTES + 1)
        .unwrap();
    drop(huge);
    ok(&cairn(ws, &["checkpoint", "-q"])); // c5
    ok(&cairn(ws, &["rollback", "-q", "c5"]));
    let t = ok(&cairn(ws, &["tree", "head"]));
    assert!(t.lines().any(|l| l.ends_with("huge.bin")), "{t}");
    std::fs::remove_file(ws.join("huge.bin")).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    // A record that writes the file gives it contents again.
    let h = ok(&cairn_stdin(ws, &["blob", "put", "-"], Some("tiny\n")));
    let h = h.split_whitespace().next().unwrap();
    let rec = format!("{{\"kind\":\"file.write\",\"path\":\"big.bin\",\"after\":\"{h}\"}}\n");
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&rec)));
    let t = ok(&cairn(ws, &["tree", "head"]));
    assert!(!t.contains("not captured"), "{t}");
    assert_eq!(ok(&cairn(ws, &["show", "head:big.bin"])), "tiny\n");
    // A recorded move of a file not captured carries the mark to its new
    // path, until a record gives that path contents.
    let f = std::fs::File::create(ws.join("huge2.bin")).unwrap();
    f.set_len(cairn::checkpoint::DEFAULT_MAX_FILE_BYTES + 1)
        .unwrap();
    drop(f);
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let mv = "{\"kind\":\"file.move\",\"path\":\"huge2.bin\",\"to_path\":\"moved.bin\"}\n";
    ok(&cairn_stdin(ws, &["record", "-q"], Some(mv)));
    let t = ok(&cairn(ws, &["tree", "head"]));
    assert!(
        t.lines().any(|l| l.ends_with("moved.bin")) && !t.contains("huge2.bin"),
        "{t}"
    );
    let rec = format!("{{\"kind\":\"file.write\",\"path\":\"moved.bin\",\"after\":\"{h}\"}}\n");
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&rec)));
    let t = ok(&cairn(ws, &["tree", "head"]));
    let uncaptured = t.split("not captured at").nth(1).unwrap_or("");
    assert!(!uncaptured.contains("moved.bin"), "{t}");
    assert_eq!(ok(&cairn(ws, &["show", "head:moved.bin"])), "tiny\n");
}

/// A file named `.cairn` that a checkpoint captured, where a nested store
/// now stands: a rollback keeps the store (it never touches one) and says
/// so, rather than failing part way or deleting it.
#[test]
fn a_rollback_keeps_a_nested_store_where_the_target_had_a_file_of_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/.cairn"), "data\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    std::fs::remove_file(ws.join("sub/.cairn")).unwrap();
    let sub = ws.join("sub");
    ok(&cairn(&sub, &["init", "-q"]));
    std::fs::write(sub.join("x"), "inner\n").unwrap();
    ok(&cairn(&sub, &["checkpoint", "-q"]));
    let out = ok(&cairn(ws, &["rollback", "c1"]));
    assert!(
        out.lines()
            .any(|l| l.contains("kept") && l.contains("sub/.cairn")),
        "{out}"
    );
    assert!(sub.join(".cairn/log").is_dir());
    ok(&cairn(&sub, &["verify", "-q"]));
}

/// Trial 13 N6-N9 through the command line: `checkpoint --state` and
/// `--agent`/`--model`; `rollback --run --phase --agent --model --state`,
/// recorded on the rollback and its undo point, `--json` giving the
/// target's state hash (as `checkpoints --json` names it), which
/// `blob get` prints, and the undo point's state coming back on undo.
#[test]
fn rollback_and_checkpoint_record_run_phase_agent_model_and_state() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let epoch2 = state_dir.path().join("epoch2.bin");
    std::fs::write(&epoch2, "memory epoch 2").unwrap();
    let stamp = [
        "--run", "run-1", "--phase", "edit", "--agent", "coder", "--model", "model-x",
    ];

    // A checkpoint whose state comes from stdin.
    let mut args = vec!["checkpoint", "--label", "start", "--state", "-", "--json"];
    args.extend(stamp);
    let c = json_lines(&ok(&cairn_stdin(ws, &args, Some("memory epoch 1"))));
    let (c1, c1_state) = (c[0]["id"].as_str().unwrap(), c[0]["state"].clone());
    assert_eq!(
        (
            c[0]["run"].clone(),
            c[0]["agent"].clone(),
            c[0]["model"].clone()
        ),
        ("run-1".into(), "coder".into(), "model-x".into())
    );
    assert!(c1_state.is_string(), "{c:?}");
    let hash = c1_state.as_str().unwrap();
    assert_eq!(ok(&cairn(ws, &["blob", "get", hash])), "memory epoch 1");

    // The rollback, stamped and given the state now.
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    let mut args = vec![
        "rollback",
        c1,
        "--json",
        "--state",
        epoch2.to_str().unwrap(),
    ];
    args.extend(stamp);
    let rb = json_lines(&ok(&cairn(ws, &args)));
    assert_eq!(rb[0]["state"], c1_state, "the target's state: {rb:?}");
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
    let undo = rb[0]["source"].as_str().unwrap().to_string();
    let lsn = rb[0]["lsn"].as_u64().unwrap();

    // `log --run` finds the rollback and its undo point, both stamped.
    let of_run = json_lines(&ok(&cairn(ws, &["log", "--run", "run-1", "--json"])));
    let kinds: Vec<&str> = of_run.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["checkpoint.create", "checkpoint.create", "rollback"]
    );
    for r in &of_run {
        assert_eq!(
            (
                r["phase"].as_str(),
                r["agent"].as_str(),
                r["model"].as_str()
            ),
            (Some("edit"), Some("coder"), Some("model-x")),
            "{r}"
        );
    }
    assert_eq!(of_run[2]["lsn"].as_u64(), Some(lsn));
    let listed = json_lines(&ok(&cairn(ws, &["checkpoints", "--json"])));
    let undo_point = listed.iter().find(|c| c["id"] == undo.as_str()).unwrap();
    assert_eq!(undo_point["run"], "run-1");
    let undo_state = undo_point["state"].as_str().unwrap().to_string();
    assert_eq!(
        ok(&cairn(ws, &["blob", "get", &undo_state])),
        "memory epoch 2"
    );

    // Undoing it gives that state back, in the JSON and in the text.
    let dry = json_lines(&ok(&cairn(ws, &["rollback", &undo, "--dry-run", "--json"])));
    assert_eq!(dry[0]["state"], undo_state.as_str());
    let text = ok(&cairn(ws, &["rollback", &undo]));
    assert!(
        text.contains(&format!("{undo}'s application state is blob {undo_state}"))
            && text.contains(&format!("`cairn blob get {undo_state}`")),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "two\n");

    // The line the first checkpoint found was there before history began:
    // not credited to that checkpoint's model (trial 15 U3).
    let blame = json_lines(&ok(&cairn(ws, &["blame", c1, "a.txt", "--json"])));
    assert_eq!(blame[0]["model"], serde_json::Value::Null);
    assert_eq!(blame[0]["before_history"], true);

    // A rollback to a checkpoint without state says so with null.
    let none = json_lines(&ok(&cairn(ws, &["rollback", &undo, "--json"])));
    let plain = json_lines(&ok(&cairn(
        ws,
        &["rollback", none[0]["source"].as_str().unwrap(), "--json"],
    )));
    assert!(plain[0]["state"].is_null(), "{plain:?}");
}

/// Trial 13: what `checkpoint` and `rollback` refuse in their new flags,
/// each with a message that names the flag, recording nothing.
#[test]
fn checkpoint_and_rollback_refuse_empty_stamps_and_bad_state_files() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint"]));
    let missing = ws.join("no-such-state.bin");
    let missing = missing.to_str().unwrap();
    for (args, says, code) in [
        (
            &["checkpoint", "--run", ""][..],
            "--run must not be empty",
            2,
        ),
        (
            &["rollback", "c1", "--model", " "][..],
            "--model must not be empty",
            2,
        ),
        (
            &["checkpoint", "--state", "."][..],
            "--state .: is a directory",
            2,
        ),
        (
            &["rollback", "c1", "--state", missing][..],
            "no-such-state.bin",
            1,
        ),
        (
            &["--in-memory", "--load", "-", "checkpoint", "--state", "-"][..],
            "--load - reads stdin, and so does the command",
            2,
        ),
    ] {
        let o = cairn(ws, args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", all_output(&o));
        assert!(err(&o).contains(says), "{args:?}: {}", err(&o));
    }
    let log = json_lines(&ok(&cairn(ws, &["log", "--json"])));
    assert_eq!(log.len(), 1, "only the first checkpoint: {log:?}");
}

/// Trial 16: a rollback limited to one file that had to create the file's
/// directory lists that directory among its files; the history queries
/// must not take it as "the whole directory restored".
#[test]
fn a_path_rollback_that_creates_the_directory_sets_only_that_file() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::create_dir_all(ws.join("d")).unwrap();
    std::fs::create_dir_all(ws.join("a/b")).unwrap();
    std::fs::write(ws.join("d/keep.txt"), "1\n").unwrap();
    std::fs::write(ws.join("d/other.txt"), "2\n").unwrap();
    std::fs::write(ws.join("a/b/k"), "k\n").unwrap();
    std::fs::write(ws.join("a/o"), "o\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c1
    std::fs::remove_dir_all(ws.join("d")).unwrap();
    std::fs::remove_dir_all(ws.join("a")).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"])); // c2: nothing
    ok(&cairn(
        ws,
        &[
            "rollback",
            "c1",
            "--path",
            "d/keep.txt",
            "--path",
            "a/b/k",
            "-q",
        ],
    ));
    // The workspace has exactly the two files...
    assert!(ws.join("d/keep.txt").exists() && ws.join("a/b/k").exists());
    assert!(!ws.join("d/other.txt").exists() && !ws.join("a/o").exists());
    // ...the record lists the directories it created...
    let last = json_lines(&ok(&cairn(ws, &["log", "--json"])))
        .pop()
        .unwrap();
    assert_eq!(last["kind"], "rollback");
    let files: Vec<&str> = last["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"d") && files.contains(&"d/keep.txt"),
        "{files:?}"
    );
    // ...and the history at the rollback is the workspace, at head and at
    // its LSN.
    let lsn = last["lsn"].as_u64().unwrap().to_string();
    for point in ["head".to_string(), format!("@{lsn}")] {
        let tree: Vec<String> = json_lines(&ok(&cairn(ws, &["tree", &point, "--json"])))
            .iter()
            .map(|v| v["path"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(tree, ["a/b/k", "d/keep.txt"], "tree {point}");
        let o = cairn(ws, &["show", &format!("{point}:d/other.txt")]);
        assert!(!o.status.success(), "show {point}:d/other.txt: {}", ok(&o));
    }
    let added: Vec<String> = json_lines(&ok(&cairn(ws, &["diff", "c2", "head", "--json"])))
        .iter()
        .map(|v| {
            format!(
                "{} {}",
                v["status"].as_str().unwrap(),
                v["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(added, ["added a/b/k", "added d/keep.txt"]);
    // The next checkpoint finds nothing removed since.
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let o = cairn(ws, &["diff", &format!("@{lsn}"), "head", "--json"]);
    assert_eq!(ok(&o), "", "changes after the rollback");
}

/// A store whose bound workspace is gone says how to bind it again, in the
/// command line's words (the library's error names `StoreBuilder` calls).
#[test]
fn a_store_whose_workspace_is_gone_says_how_to_rebind_it_with_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let (w, s) = (tmp.path().join("w"), tmp.path().join("s"));
    std::fs::create_dir(&w).unwrap();
    let store = s.to_str().unwrap();
    ok(&cairn(tmp.path(), &["--store", store, "init", "w", "-q"]));
    std::fs::write(w.join("f"), "a\n").unwrap();
    ok(&cairn(tmp.path(), &["--store", store, "checkpoint", "-q"]));
    std::fs::remove_dir_all(&w).unwrap();
    let e = failed(&cairn(tmp.path(), &["--store", store, "checkpoint"]));
    assert!(
        e.contains("which does not exist")
            && e.contains(&format!("`cairn --store {store} init NEWDIR --rebind`"))
            && !e.contains("StoreBuilder"),
        "{e}"
    );
}
