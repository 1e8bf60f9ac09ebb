//! `cairn watch --daemon | --stop | --status` and checkpoints that use its
//! journal: every checkpoint's tree must be the one a full scan gives,
//! whether it came from the journal or (whenever the journal cannot prove
//! it saw everything) from a full scan that says why. Small trees, waits
//! bounded by a count of polls, nothing asserted on time.
#![allow(clippy::unwrap_used)]

mod common;
use common::{cairn, ok};

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The most polls of 20 ms a test waits for a daemon to go (10 s).
const MAX_POLLS: usize = 500;

fn init(dir: &Path) {
    ok(&cairn(dir, &["init"]));
}

/// A workspace of `n` files over a few directories, with a store.
fn workspace(n: usize) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for i in 0..n {
        let sub = d.path().join(format!("d{}", i % 5));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    init(d.path());
    d
}

/// Stops the daemon when a test ends, passing or not.
struct Daemon<'a>(&'a Path);

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        let _ = cairn(self.0, &["watch", "--stop"]);
    }
}

fn start(dir: &Path) -> Daemon<'_> {
    let out = ok(&cairn(dir, &["watch", "--daemon"]));
    assert!(out.contains("watching"), "{out}");
    Daemon(dir)
}

fn status(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&cairn(dir, &["watch", "--status", "--json"]))).unwrap()
}

/// `cairn checkpoint --json`.
fn checkpoint(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&cairn(dir, &["checkpoint", "--json"]))).unwrap()
}

/// The tree a full scan with no watcher gives: a copy of the workspace's
/// files (not its store) checkpointed in a fresh store. Trees are
/// content-addressed, so the same files give the same root.
fn full_tree(dir: &Path) -> String {
    let copy = tempfile::tempdir().unwrap();
    copy_tree(dir, copy.path());
    init(copy.path());
    checkpoint(copy.path())["root"]
        .as_str()
        .unwrap()
        .to_string()
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() == ".cairn" {
            continue;
        }
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir(&t).unwrap();
            copy_tree(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

fn scan(v: &serde_json::Value) -> &str {
    v["scan"].as_str().unwrap()
}

fn reason(v: &serde_json::Value) -> String {
    v["scan_reason"].as_str().unwrap_or("").to_string()
}

/// Waits (a bounded number of polls) until no daemon runs.
fn wait_gone(dir: &Path) -> bool {
    for _ in 0..MAX_POLLS {
        if status(dir)["watching"] == false {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn daemon_status_and_stop() {
    let d = workspace(10);
    let ws = d.path();
    assert_eq!(status(ws)["watching"], false);
    // `cairn watch` alone says what `--status` says, and how to start one.
    let alone = ok(&cairn(ws, &["watch"]));
    assert!(
        alone.contains("not watching") && alone.contains("--daemon"),
        "{alone}"
    );
    let _g = start(ws);
    let s = status(ws);
    assert_eq!(s["watching"], true, "{s}");
    assert!(s["since"].as_str().unwrap().contains('T'), "{s}");
    // A second start finds it running and starts nothing.
    let again = ok(&cairn(ws, &["watch", "--daemon"]));
    assert!(again.contains("already watching"), "{again}");
    assert_eq!(status(ws)["pid"], s["pid"]);
    let stopped = ok(&cairn(ws, &["watch", "--stop"]));
    assert!(stopped.contains("stopped"), "{stopped}");
    assert_eq!(status(ws)["watching"], false);
    // Stopping what does not run is no error.
    ok(&cairn(ws, &["watch", "--stop"]));
}

#[test]
fn checkpoints_use_the_journal_and_give_the_full_scan_tree() {
    let d = workspace(30);
    let ws = d.path();
    let _g = start(ws);
    let c1 = checkpoint(ws);
    assert_eq!(scan(&c1), "full");
    assert!(reason(&c1).contains("first checkpoint"), "{c1}");
    std::fs::write(ws.join("d1/f1.txt"), "edited\n").unwrap();
    let c2 = checkpoint(ws);
    assert_eq!(scan(&c2), "journal", "{c2}");
    assert_eq!(c2["changed"], 1);
    assert_eq!(c2["root"].as_str().unwrap(), full_tree(ws));
    // Nothing changed: the journal says so, and the tree is the same.
    let c3 = checkpoint(ws);
    assert_eq!(scan(&c3), "journal");
    assert_eq!(c3["changed"], 0);
    assert_eq!(c3["root"], c2["root"]);
}

#[test]
fn a_change_while_the_watcher_was_stopped_is_caught() {
    let d = workspace(20);
    let ws = d.path();
    let g = start(ws);
    checkpoint(ws);
    assert_eq!(scan(&checkpoint(ws)), "journal");
    drop(g); // stops it
    std::fs::write(ws.join("d2/f2.txt"), "changed while stopped\n").unwrap();
    let _g = start(ws);
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "full", "{c}");
    assert!(reason(&c).contains("restarted"), "{c}");
    assert_eq!(c["changed"], 1);
    assert_eq!(c["root"].as_str().unwrap(), full_tree(ws));
}

#[test]
fn a_burst_of_thousands_of_changes_is_all_journalled() {
    let d = workspace(10);
    let ws = d.path();
    let _g = start(ws);
    checkpoint(ws);
    // A branch switch under the watcher: many files rewritten, created
    // and deleted at once, in new and old directories.
    for i in 0..3000 {
        let sub = ws.join(format!("burst/b{}", i % 40));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("n{i}.rs")), format!("{i}")).unwrap();
    }
    for i in 0..10 {
        if i % 2 == 0 {
            std::fs::remove_file(ws.join(format!("d{}/f{i}.txt", i % 5))).unwrap();
        } else {
            std::fs::write(ws.join(format!("d{}/f{i}.txt", i % 5)), "new").unwrap();
        }
    }
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "journal", "{c}");
    assert_eq!(c["files"], 3005);
    assert_eq!(c["changed"], 3010);
    assert_eq!(c["root"].as_str().unwrap(), full_tree(ws));
}

#[test]
fn a_moved_directory_and_files_made_in_it_right_after() {
    let d = workspace(10);
    let ws = d.path();
    let _g = start(ws);
    checkpoint(ws);
    std::fs::create_dir_all(ws.join("a/deep/er")).unwrap();
    std::fs::write(ws.join("a/deep/er/x.txt"), "x").unwrap();
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "journal", "{c}");
    std::fs::rename(ws.join("a"), ws.join("b")).unwrap();
    // Files made in the moved tree, and in a directory made in it, at once.
    std::fs::write(ws.join("b/deep/y.txt"), "y").unwrap();
    std::fs::create_dir(ws.join("b/deep/er/new")).unwrap();
    std::fs::write(ws.join("b/deep/er/new/z.txt"), "z").unwrap();
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "journal", "{c}");
    assert_eq!(c["root"].as_str().unwrap(), full_tree(ws));
    // And a change deep in the moved tree after that checkpoint.
    std::fs::write(ws.join("b/deep/er/x.txt"), "x2").unwrap();
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "journal", "{c}");
    assert_eq!(c["changed"], 1);
    assert_eq!(c["root"].as_str().unwrap(), full_tree(ws));
}

#[test]
fn a_journal_overflow_makes_the_next_checkpoint_full() {
    let d = workspace(10);
    let ws = d.path();
    // A small span limit stands in for a queue overflowing.
    let o = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["watch", "--daemon"])
        .current_dir(ws)
        .env_remove("CAIRN_STORE")
        .env("CAIRN_WATCH_MAX_SPAN_PATHS", "50")
        .output()
        .unwrap();
    ok(&o);
    let _g = Daemon(ws);
    checkpoint(ws);
    for i in 0..200 {
        std::fs::write(ws.join(format!("o{i}.txt")), "o").unwrap();
    }
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "full", "{c}");
    assert!(reason(&c).contains("more than 50 paths"), "{c}");
    assert_eq!(c["changed"], 200);
    assert_eq!(c["root"].as_str().unwrap(), full_tree(ws));
    // The overflow is behind it: the next change comes from the journal.
    std::fs::write(ws.join("o1.txt"), "again").unwrap();
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "journal", "{c}");
    assert_eq!(c["changed"], 1);
}

#[test]
fn the_watcher_killed_mid_journal_makes_the_next_checkpoint_full_and_right() {
    let d = workspace(10);
    let ws = d.path();
    let g = start(ws);
    checkpoint(ws);
    let pid = status(ws)["pid"].as_i64().unwrap();
    // Changes the daemon is journalling as it dies.
    for i in 0..500 {
        std::fs::write(ws.join(format!("k{i}.txt")), "k").unwrap();
        if i == 250 {
            // SAFETY: a kill of the daemon this test started.
            let r = unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            assert_eq!(r, 0);
        }
    }
    assert!(wait_gone(ws), "the killed daemon still answers");
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "full", "{c}");
    assert!(reason(&c).contains("no watcher running"), "{c}");
    assert_eq!(c["changed"], 500);
    assert_eq!(c["root"].as_str().unwrap(), full_tree(ws));
    // A new one starts afresh: one full scan, then the journal again.
    drop(g);
    let _g = start(ws);
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "full", "{c}");
    std::fs::write(ws.join("k1.txt"), "k1").unwrap();
    assert_eq!(scan(&checkpoint(ws)), "journal");
}

#[test]
fn the_watcher_stops_when_its_store_is_gone() {
    let d = workspace(3);
    let ws = d.path();
    let _g = start(ws);
    let pid = status(ws)["pid"].as_i64().unwrap();
    std::fs::remove_dir_all(ws.join(".cairn")).unwrap();
    let mut gone = false;
    for _ in 0..MAX_POLLS {
        // SAFETY: signal 0 only asks whether the process exists.
        if unsafe { libc::kill(pid as i32, 0) } != 0 {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone, "the watcher of a deleted store still runs");
}

#[test]
fn a_rollback_under_the_watcher_then_a_journal_checkpoint() {
    let d = workspace(10);
    let ws = d.path();
    let _g = start(ws);
    let c1 = checkpoint(ws);
    for i in 0..5 {
        std::fs::write(ws.join(format!("d{}/f{i}.txt", i % 5)), "changed").unwrap();
    }
    checkpoint(ws);
    let id = c1["id"].as_str().unwrap();
    ok(&cairn(ws, &["rollback", id]));
    let c = checkpoint(ws);
    assert_eq!(scan(&c), "journal", "{c}");
    assert_eq!(c["root"], c1["root"]);
}

/// Waits (a bounded number of polls, without asking the daemon anything,
/// which would count as activity) until the process `pid` is gone.
fn wait_exit(pid: i64) -> bool {
    for _ in 0..MAX_POLLS {
        // SAFETY: signal 0 only asks whether the process exists.
        if unsafe { libc::kill(pid as i32, 0) } != 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn the_watcher_stops_by_itself_when_idle() {
    let d = workspace(3);
    let ws = d.path();
    let o = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["watch", "--daemon", "--json"])
        .current_dir(ws)
        .env_remove("CAIRN_STORE")
        .env("CAIRN_WATCH_IDLE_STOP_MS", "300")
        .output()
        .unwrap();
    let _g = Daemon(ws);
    // The pid as `--daemon` reported it: asking again might come after
    // the idle stop already.
    let started: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let pid = started["pid"].as_i64().unwrap();
    assert!(wait_exit(pid), "an idle watcher still runs");
    let log = std::fs::read_to_string(ws.join(".cairn/snapshot/watch.log")).unwrap();
    assert!(log.contains("stopped (idle)"), "{log}");
    // A checkpoint now says no watcher runs, and scans in full.
    let c = checkpoint(ws);
    assert!(reason(&c).contains("no watcher running"), "{c}");
}
