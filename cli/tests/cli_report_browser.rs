//! `cairn report` in a real browser: headless Chromium opens the demo's
//! page (with a hostile prompt recorded) and `browser/check_report.py`
//! uses it through the DevTools Protocol: every record and session shown,
//! a click on a checkpoint opens its coloured diff, the filters and the
//! search hide what they should, the hostile markup never runs, and a
//! screenshot is taken.
//!
//! Chromium is found as `$CAIRN_CHROMIUM`, else `chromium` on the PATH.
//! `.ci/run` installs it and sets `CAIRN_REQUIRE_BROWSER=1`, so there a
//! missing browser fails the test; elsewhere it is skipped with a note.

#![allow(clippy::unwrap_used)]

mod common;

use common::{cairn, cairn_stdin, ok};
use std::path::PathBuf;
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
        .find(|p| p.is_file())
}

/// Runs the browser checks on `report` with `expect`; false if skipped.
fn check_in_browser(
    dir: &std::path::Path,
    report: &std::path::Path,
    expect: serde_json::Value,
) -> bool {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CAIRN_REQUIRE_BROWSER").is_none(),
            "CAIRN_REQUIRE_BROWSER is set but no chromium was found (set CAIRN_CHROMIUM)"
        );
        eprintln!("skipped: no chromium on the PATH (apt-get install chromium)");
        return false;
    };
    let expect_file = dir.join("expect.json");
    std::fs::write(&expect_file, expect.to_string()).unwrap();
    let shot = std::env::var_os("CAIRN_REPORT_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join("report.png"));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/check_report.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&browser)
        .arg(report)
        .arg(&expect_file)
        .arg(&shot)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("ok   a screenshot is taken"), "{said}");
    true
}

#[test]
fn the_demo_report_works_in_a_real_browser() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    ok(&cairn(
        tmp.path(),
        &["demo", "--into", ws.to_str().unwrap()],
    ));
    let hostile = r#"{"kind":"prompt","session":"evil","text":"</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"}"#;
    ok(&cairn_stdin(
        &ws,
        &["record"],
        Some(&format!("{hostile}\n")),
    ));
    let report = tmp.path().join("report.html");
    ok(&cairn(
        &ws,
        &["report", "--output", report.to_str().unwrap()],
    ));
    let records = ok(&cairn(&ws, &["log", "--json"])).lines().count();
    check_in_browser(
        tmp.path(),
        &report,
        serde_json::json!({
            "records": records,
            "sessions": 2,
            "checkpoint_label": "After turn 3",
            "checkpoint_path": "src/main.rs",
            "search": "greet",
            "hostile_text": "<img src=x onerror=\"window.__pwned=2\">",
        }),
    );
}

/// Records past what the page lays out at once (see `INLINE_ROWS` in
/// cli/src/report/html.rs): they come a chunk at a time.
const LONG_HISTORY: usize = 3_000;

#[test]
fn a_long_history_is_laid_out_as_the_reader_scrolls() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    let lines: String = (0..LONG_HISTORY)
        .map(|i| {
            let text = if i % 100 == 7 {
                format!("needle {i}")
            } else {
                format!("hay {i}")
            };
            format!(
                "{{\"kind\":\"prompt\",\"session\":\"s{}\",\"text\":\"{text}\"}}\n",
                i % 3
            )
        })
        .collect();
    ok(&cairn_stdin(ws, &["record"], Some(&lines)));
    let report = ws.join("report.html");
    ok(&cairn(
        ws,
        &["report", "--output", report.to_str().unwrap()],
    ));
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        html.contains("<noscript id=rows>"),
        "a long timeline is kept for the script to lay out"
    );
    check_in_browser(
        ws,
        &report,
        serde_json::json!({
            "lazy": true,
            "records": LONG_HISTORY,
            "last_lsn": LONG_HISTORY,
            "search": "needle",
            "search_matches": LONG_HISTORY / 100,
        }),
    );
}
