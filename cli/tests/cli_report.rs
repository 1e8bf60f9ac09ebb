//! `cairn report`: one self-contained page of a history, through the
//! built binary: what it shows, that nothing from the history can run as
//! markup, that it is the same bytes every time, and its Markdown form.

#![allow(clippy::unwrap_used)]

mod common;

use common::{cairn, cairn_stdin, ok};
use std::path::Path;

/// A demo store with a hostile prompt recorded in a second session.
fn demo_with_hostile_prompt(dir: &Path) -> std::path::PathBuf {
    let ws = dir.join("ws");
    ok(&cairn(dir, &["demo", "--into", ws.to_str().unwrap()]));
    let hostile = r#"{"kind":"prompt","session":"evil","text":"| # [x](javascript:alert(3)) </script><script>alert(1)</script><img src=x onerror=alert(2)>"}"#;
    ok(&cairn_stdin(
        &ws,
        &["record"],
        Some(&format!("{hostile}\n")),
    ));
    ws
}

/// The timeline's rows: each is a line of its own.
fn rows(html: &str) -> Vec<&str> {
    html.lines().filter(|l| l.starts_with("<li id=r")).collect()
}

fn report(ws: &Path, args: &[&str]) -> String {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    ok(&cairn(ws, &all))
}

#[test]
fn the_page_shows_every_record_its_sessions_checkpoints_and_diffs() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = demo_with_hostile_prompt(tmp.path());
    let html = report(&ws, &[]);
    let records = ok(&cairn(&ws, &["log", "--json"])).lines().count();
    assert_eq!(rows(&html).len(), records);
    assert!(html.starts_with("<!doctype html>"));
    for s in ["demo-thread", "evil"] {
        assert!(
            html.contains(&format!("<td>{s}")),
            "session {s} in the summary"
        );
    }
    // A checkpoint's row opens onto its files, with coloured diff lines.
    let after_turn_3 = html
        .split("\n<li id=r")
        .find(|row| row.contains("After turn 3"))
        .unwrap();
    assert!(after_turn_3.contains("<details><summary>"));
    assert!(after_turn_3.contains("<h4>src/main.rs <span class=dim>modified +2 -1"));
    assert!(after_turn_3.contains("<span class=a>+"));
    // The rollback is an edge back to its target; what it left behind is
    // still there, marked; the redo is an edge forward.
    assert!(html.contains("↩ back to c11"));
    assert!(html.contains("↪ redo to c17"));
    assert!(html.contains(" class=ab"), "abandoned rows are marked");
    // A path-limited rollback abandons nothing, and its diff is its path.
    let scoped = html
        .split("\n<li id=r")
        .find(|row| row.contains("paths: src/lib.rs"))
        .unwrap();
    assert!(!scoped.contains("class=ab") && !scoped.contains("class=\"ab"));
    assert!(scoped.contains("<h4>src/lib.rs "));
    assert!(!scoped.contains("<h4>Cargo.toml"));
}

#[test]
fn nothing_from_the_history_can_run_as_markup() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = demo_with_hostile_prompt(tmp.path());
    let html = report(&ws, &[]);
    // Exactly the page's own script, and no element the prompt brought.
    assert_eq!(html.matches("<script").count(), 1);
    assert_eq!(html.matches("</script>").count(), 1);
    assert!(!html.contains("<img"));
    assert!(html.contains(
        "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
    ));
    // Self-contained: nothing is loaded from elsewhere.
    for external in ["src=\"http", "href=\"http", "<link", "@import", "url("] {
        assert!(!html.contains(external), "{external}");
    }
    let md = report(&ws, &["--format", "md"]);
    assert!(!md.contains("<script") && !md.contains("<img"));
    assert!(md.contains(r"\| \# \[x\](javascript:alert(3))"), "{md}");
}

#[test]
fn the_same_store_and_options_give_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = demo_with_hostile_prompt(tmp.path());
    let out = ws.join("r.html");
    let out = out.to_str().unwrap();
    report(&ws, &["--output", out]);
    let first = std::fs::read(out).unwrap();
    report(&ws, &["--output", out]);
    assert_eq!(std::fs::read(out).unwrap(), first);
    assert_eq!(report(&ws, &[]).as_bytes(), &first[..]);
}

#[test]
fn sessions_and_points_narrow_the_page() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = demo_with_hostile_prompt(tmp.path());
    let only = report(&ws, &["--session", "evil"]);
    assert_eq!(rows(&only).len(), 1);
    assert!(!only.contains("<td>demo-thread"));
    let range = report(&ws, &["--since", "@3", "--until", "c6"]);
    let lsns: Vec<&str> = rows(&range)
        .iter()
        .map(|row| row["<li id=r".len()..].split(' ').next().unwrap())
        .collect();
    assert_eq!(lsns, ["3", "4", "5", "6"]);
}

#[test]
fn markdown_has_the_sessions_table_and_a_timeline_per_session() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = demo_with_hostile_prompt(tmp.path());
    let md = report(&ws, &["--format", "md"]);
    assert!(md.starts_with("# cairn report\n"));
    assert!(md.contains("| session | prompts |"));
    assert!(md.contains("## Timeline: demo\\_thread") || md.contains("## Timeline: demo-thread"));
    assert!(md.contains("**checkpoint.create** \"After turn 3\""));
    assert!(md.contains("↩ back to c11"));
}

#[test]
fn a_format_it_does_not_know_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = demo_with_hostile_prompt(tmp.path());
    let o = cairn(&ws, &["report", "--format", "pdf"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("pdf") && err.contains("html") && err.contains("md"),
        "{err}"
    );
}
