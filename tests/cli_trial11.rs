//! Regression tests for the session-11 user trial's P7, P12 and P13:
//! time filters read as the user meant them, a cortexide export that keeps
//! the blob hashes of file events, and a checkpoint `root` that names no
//! manifest refused at record and import (and survived by gc).
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn cairn(dir: &Path, args: &[&str]) -> Output {
    cairn_stdin(dir, args, None)
}

fn cairn_stdin(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut i = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            i.write_all(s.as_bytes()).unwrap();
        }
    }
    child.wait_with_output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn lsns(ws: &Path, args: &[&str]) -> Vec<u64> {
    let mut a = vec!["log", "--json"];
    a.extend_from_slice(args);
    json_lines(&ok(&cairn(ws, &a)))
        .iter()
        .map(|r| r["lsn"].as_u64().unwrap())
        .collect()
}

/// P12: a year, a month and a date are dates (a date-only, month-only or
/// year-only `--until` covering the whole of it); a bare number too small
/// to be meant as epoch milliseconds is refused; ISO instants and epoch ms
/// work as before.
#[test]
fn time_filters_read_years_months_and_whole_days() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init", "-q"]));
    ok(&cairn_stdin(
        ws,
        &["record", "-q"],
        Some(concat!(
            r#"{"kind":"prompt","ts":"2023-11-14T22:13:20Z"}"#,
            "\n",
            r#"{"kind":"prompt","ts":"2024-06-01T00:00:00Z"}"#,
            "\n",
        )),
    ));
    assert_eq!(lsns(ws, &["--since", "2024"]), vec![2]);
    assert_eq!(lsns(ws, &["--until", "2024"]), vec![1, 2]);
    assert_eq!(lsns(ws, &["--until", "2023"]), vec![1]);
    assert_eq!(lsns(ws, &["--since", "2024", "--until", "2025"]), vec![2]);
    assert_eq!(
        lsns(ws, &["--since", "2023-11", "--until", "2023-11"]),
        vec![1]
    );
    assert_eq!(lsns(ws, &["--until", "2023-11-14"]), vec![1]);
    assert_eq!(lsns(ws, &["--until", "2023-11-13"]), Vec::<u64>::new());
    assert_eq!(lsns(ws, &["--since", "2023-11-15"]), vec![2]);
    // Instants and epoch milliseconds as before.
    assert_eq!(lsns(ws, &["--until", "2023-11-14T22:13:20Z"]), vec![1]);
    assert_eq!(
        lsns(ws, &["--until", "2023-11-14T22:13:19.999Z"]),
        Vec::<u64>::new()
    );
    assert_eq!(lsns(ws, &["--since", "1700000000001"]), vec![2]);
    assert_eq!(lsns(ws, &["--until", "1700000000000"]), vec![1]);
    // A number that is surely no epoch-ms time is refused, naming both forms.
    for bad in ["20231114", "99999", "1"] {
        let o = cairn(ws, &["export", "--since", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--since") && err.contains(bad), "{err}");
        assert!(
            err.contains("ISO-8601") && err.contains("epoch milliseconds"),
            "{err}"
        );
    }
    let help = ok(&cairn(ws, &["log", "--help"]));
    assert!(help.contains("whole day"), "{help}");
}
