//! Runs the README's shell blocks ("A one-minute tour" and "Record a file
//! write with its contents") as written, with the built `cairn` first on
//! `PATH`, and checks the answers their comments promise: a README whose
//! commands or ids drift from what a fresh store prints fails here.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// The README, read at build time so the test follows every edit.
const README: &str = include_str!("../../README.md");

/// The first ```sh block after the heading `heading`.
fn sh_block_after(heading: &str) -> String {
    let at = README
        .find(heading)
        .unwrap_or_else(|| panic!("README has no heading {heading:?}"));
    let rest = &README[at..];
    let start = rest.find("```sh\n").unwrap() + "```sh\n".len();
    let end = rest[start..].find("```").unwrap();
    rest[start..start + end].to_string()
}

/// The block as a script: `cargo install` (the binary under test stands in
/// for it) is left out; every other line runs, and any failure stops it.
fn script(block: &str) -> String {
    let lines: Vec<&str> = block
        .lines()
        .filter(|l| !l.trim_start().starts_with("cargo install"))
        .collect();
    format!("set -euo pipefail\n{}\n", lines.join("\n"))
}

/// Runs `script` with bash in `dir`, the test binary's directory first on
/// `PATH`; its stdout, after checking it succeeded.
fn run(dir: &Path, script: &str) -> String {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("CAIRN_STORE")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "script failed ({:?}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

#[test]
fn the_readme_tour_runs_as_written_and_prints_what_it_promises() {
    let tmp = tempfile::tempdir().unwrap();
    let tour = sh_block_after("## A one-minute tour");
    let out = run(tmp.path(), &script(&tour));
    let ws = tmp.path().join("tour");
    assert!(ws.join(".cairn").is_dir(), "the tour creates tour/.cairn");
    // The ids the tour's comments name.
    assert!(out.contains("checkpoint c2"), "{out}");
    assert!(out.contains("checkpoint c3"), "{out}");
    assert!(
        out.contains("cairn rollback c4"),
        "the undo point is c4:\n{out}"
    );
    assert!(out.contains("-fn main() {}"), "diff c2 c3:\n{out}");
    assert!(out.contains("ok: no damage found"), "{out}");
    // The last rollback undid the first: the edit is back.
    assert_eq!(
        std::fs::read_to_string(ws.join("src/main.rs")).unwrap(),
        "fn main() { println!(\"hi\"); }\n"
    );

    // The next block runs in the same workspace, after the tour.
    let write = sh_block_after("### Record a file write with its contents");
    let out = run(&ws, &script(&write));
    let blame = out
        .lines()
        .find(|l| l.contains("println!(\"hello\")"))
        .unwrap_or_else(|| panic!("blame prints the written line:\n{out}"));
    let promised = README
        .lines()
        .find(|l| l.contains("cairn blame head src/main.rs    #"))
        .unwrap();
    let lsn = blame.split_whitespace().next().unwrap();
    assert!(
        promised.contains(&format!("# {lsn}  t1  m1")),
        "the README promises {promised:?}; blame printed {blame:?}"
    );
    assert!(blame.contains("m1"), "{blame}");
}
