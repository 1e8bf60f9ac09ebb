//! Kill loop over `cairn import --resume` of lines without `ts` (trial 14
//! T3): a real `cairn import` of a file of several batches is SIGKILLed at
//! a seeded random moment after one of its batches is recorded, again
//! (resumed) and again, then let finish. Every line must then be recorded
//! exactly once, in order, and a plain import of the file refused as
//! imported before. Lines without `ts` get the time of their import, so
//! nothing but where the import wrote down it got to tells which are
//! recorded.
//!
//! `CAIRN_KILLS=N` kills at least N times, in rounds of a fresh store each
//! (default 2: one round, about 10 s in debug); `CAIRN_SEED` changes the
//! moments.
#![allow(clippy::unwrap_used)]

mod common;
use common::{env_setting, Rng};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEFAULT_KILLS: usize = 2;

/// Lines in the input: at about 190 bytes each, some 2.5 of the 16 MiB
/// batches `cairn import` appends (`IMPORT_BATCH_INPUT_BYTES`), so that a
/// kill can land after a batch and before the last.
const LINES: u64 = 220_000;

/// Rounds run, per kill asked for, before the test gives up on killing an
/// import part way: most rounds kill one or two.
const MAX_ROUNDS_PER_KILL: usize = 4;

/// How long the test waits for an import to record a batch or to end
/// before it fails (a hang guard, not a timing check).
const PATIENCE: Duration = Duration::from_secs(300);

fn cairn(ws: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.current_dir(ws)
        .env_remove("CAIRN_STORE")
        .env("NO_COLOR", "1");
    c
}

fn run(ws: &Path, args: &[&str]) -> std::process::Output {
    cairn(ws).args(args).output().unwrap()
}

fn run_ok(ws: &Path, args: &[&str]) -> String {
    let o = run(ws, args);
    assert!(
        o.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The number of records in the store, read beside a writer.
fn records(ws: &Path) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&run_ok(ws, &["stats", "--json"])).unwrap();
    v["records"].as_u64().unwrap()
}

/// One round: a fresh store, the import killed after a batch until it
/// ends by itself, then checked. The records the store held at each kill.
fn one_round(rng: &mut Rng, seed: u64) -> Vec<u64> {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    run_ok(ws, &["init", "-q"]);
    let pad = "x".repeat(150);
    let input: String = (1..=LINES)
        .map(|i| format!("{{\"kind\":\"prompt\",\"text\":\"line {i} {pad}\"}}\n"))
        .collect();
    std::fs::write(ws.join("big.jsonl"), &input).unwrap();
    let args = ["import", "--resume", "--format", "jsonl", "big.jsonl"];
    let mut kills = Vec::new();
    loop {
        let before = records(ws);
        let mut child = cairn(ws)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let guard = Instant::now() + PATIENCE;
        // Wait for a batch to be recorded, then kill at a random moment
        // after it: while the next is read, written down or appended.
        let ended = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if records(ws) > before {
                std::thread::sleep(Duration::from_millis(rng.next() % 300));
                break None;
            }
            assert!(Instant::now() < guard, "seed {seed}: no batch recorded");
            std::thread::sleep(Duration::from_millis(20));
        };
        let finished = match ended {
            Some(status) => status.success(),
            None => {
                child.kill().unwrap();
                child.wait().unwrap().success()
            }
        };
        // Nothing is recorded twice, whenever it was killed.
        let now = records(ws);
        assert!(now <= LINES, "seed {seed}: {now} records of {LINES} lines");
        if finished {
            break;
        }
        kills.push(now);
    }
    let out = run_ok(ws, &["log", "--json"]);
    let mut n = 0u64;
    for (i, line) in out.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let want = format!("line {} {pad}", i + 1);
        assert_eq!(
            v["text"].as_str(),
            Some(want.as_str()),
            "seed {seed}: record {}",
            i + 1
        );
        n += 1;
    }
    assert_eq!(n, LINES, "seed {seed}: every line once, in order");
    let o = run(ws, &["import", "--format", "jsonl", "big.jsonl"]);
    assert_eq!(o.status.code(), Some(4), "seed {seed}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("all its {LINES} lines are recorded")),
        "seed {seed}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    kills
}

#[test]
fn an_import_killed_after_any_batch_resumes_without_duplicates_or_gaps() {
    let kills: usize = env_setting("CAIRN_KILLS", DEFAULT_KILLS);
    let seed: u64 = env_setting("CAIRN_SEED", 0x5eed);
    let mut rng = Rng(seed | 1);
    let (mut rounds, mut at) = (0, Vec::new());
    // A round whose import ends before its kill kills nothing: rounds go
    // on until enough were killed (within a bound, against a machine on
    // which every import ends first).
    while at.len() < kills {
        assert!(
            rounds < MAX_ROUNDS_PER_KILL * kills.max(1),
            "seed {seed}: {rounds} rounds killed only {} imports",
            at.len()
        );
        at.extend(one_round(&mut rng, seed));
        rounds += 1;
    }
    eprintln!(
        "kill_import: {rounds} rounds of {LINES} lines, {} imports killed (holding {at:?} records), every line recorded once"
        , at.len()
    );
}
