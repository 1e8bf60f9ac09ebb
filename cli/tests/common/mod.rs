//! What the CLI tests share: running the built `cairn` binary in a
//! directory, checking that it succeeded, and reading JSONL output.
#![allow(clippy::unwrap_used, dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `cairn ARGS` in `dir` (no `CAIRN_STORE` nor `CAIRN_MAX_FILE_BYTES`,
/// no colour), stdin empty.
pub fn cairn(dir: &Path, args: &[&str]) -> Output {
    cairn_stdin(dir, args, None)
}

/// Starts `cairn ARGS` in `dir` (no `CAIRN_STORE`, no colour), its stdin,
/// stdout and stderr pipes for the test to use: a live `record` pipe.
pub fn spawn_cairn(dir: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env_remove("CAIRN_MAX_FILE_BYTES")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `cairn ARGS` in `dir` with `stdin` as its input.
pub fn cairn_stdin(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = spawn_cairn(dir, args);
    {
        let mut i = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            // A command that refuses before reading its input (a damaged
            // store, a bad flag) may exit before the write: its exit code
            // and output say what happened, not the closed pipe.
            if let Err(e) = i.write_all(s.as_bytes()) {
                assert_eq!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe,
                    "writing stdin: {e}"
                );
            }
        }
    }
    child.wait_with_output().unwrap()
}

/// The command's stdout, after checking it exited 0 (else its output).
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The command's stderr.
pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Each line of `s` as JSON.
pub fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The command's stderr, after checking it failed.
pub fn failed(o: &Output) -> String {
    assert!(!o.status.success(), "expected a failure");
    err(o)
}

/// The command's stdout and stderr, for a failure message.
pub fn all_output(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Damages the store in `ws`: flips one byte in the middle of its first
/// log segment (under the segment's records, so `verify` names the place).
pub fn flip_a_byte_mid_log(ws: &Path) {
    let seg = std::fs::read_dir(ws.join(".cairn/log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
}

#[path = "../../../tests/common/mod.rs"]
mod lib_fixtures;
#[allow(unused_imports)] // Not every test binary uses it.
pub use lib_fixtures::restored_checkpoint_with_state;

/// A small seeded generator (xorshift) for the kill loops: the same seed
/// gives the same moments. Seed it with an odd number (zero stays zero).
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A setting from the environment (`CAIRN_KILLS`, `CAIRN_SEED`), else
/// `default` (also when it does not parse).
pub fn env_setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `len` bytes that do not compress (xorshift from `seed`), so a blob's
/// contents stand in its pack as they are and a test can find and damage
/// them there.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Human output with its relative ages ("3s ago", "in 5m") replaced by
/// `<age>` and each line's runs of spaces made one, so two runs a second
/// apart compare equal (the age, and the column widths it sets, follow
/// the clock).
pub fn without_ages(out: &[u8]) -> String {
    let is_age = |w: &str| {
        w.len() > 1
            && w.ends_with(['s', 'm', 'h', 'd'])
            && w[..w.len() - 1].bytes().all(|b| b.is_ascii_digit())
    };
    let mut text = String::new();
    for line in String::from_utf8_lossy(out).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut kept = Vec::with_capacity(words.len());
        let mut i = 0;
        while i < words.len() {
            let ago = is_age(words[i]) && words.get(i + 1) == Some(&"ago");
            let ahead = words[i] == "in" && words.get(i + 1).is_some_and(|w| is_age(w));
            if ago || ahead {
                kept.push("<age>");
                i += 2;
            } else {
                kept.push(words[i]);
                i += 1;
            }
        }
        text.push_str(&kept.join(" "));
        text.push('\n');
    }
    text
}

/// A copy of the `cairn` binary at `to` (for running it as another user,
/// from a directory every user can read). Copied by `cp`, a process of its
/// own: had this process held the copy open for writing, a process another
/// test thread forked meanwhile would hold it too, until it ran its own
/// program, and running the copy then fails with "Text file busy".
pub fn copy_of_cairn(to: &Path) {
    let st = std::process::Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success(), "cp the cairn binary to {}", to.display());
}
