//! Regression tests for the session-11 user trial's retention findings:
//! P15 (a recorded `checkpoint.discard` of the newest checkpoint), P16
//! (`gc --max-bytes` evicting what frees nothing), P14.1 (rollback to a
//! discarded checkpoint whose tree a later rollback kept) and P14.2 (no
//! Rust `Debug` text in gc's discard records); and the session-13 trial's
//! T13-N4 (a restored, discarded checkpoint with application state could
//! not be rolled back to after gc).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

mod common;
use common::*;

fn init() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    ok(&cairn(d.path(), &["init", "-q"]));
    d
}

fn discard(ws: &Path, id: &str) -> Output {
    let line = format!("{{\"kind\":\"checkpoint.discard\",\"checkpoint\":\"{id}\"}}\n");
    cairn_stdin(ws, &["record", "--ack"], Some(&line))
}

/// P15: a recorded discard of the only (newest) checkpoint of a session is
/// refused, so the next gc cannot delete its contents; a discard of an
/// older one is accepted, a second discard of it refused, the gc that
/// collects its contents names it, and errors say who discarded it.
#[test]
fn a_recorded_discard_never_loses_the_newest_checkpoint() {
    let d = init();
    let ws = d.path();
    std::fs::write(ws.join("f"), "only\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let e = failed(&discard(ws, "c1"));
    assert!(e.contains("newest checkpoint of session `default`"), "{e}");
    ok(&cairn(ws, &["gc"]));
    assert_eq!(ok(&cairn(ws, &["show", "c1:f"])), "only\n");

    std::fs::write(ws.join("f"), "two\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    ok(&discard(ws, "c1"));
    let e = failed(&discard(ws, "c1"));
    assert!(e.contains("already discarded at LSN"), "{e}");
    let e = failed(&discard(ws, "c2"));
    assert!(e.contains("newest checkpoint"), "{e}");
    let out = ok(&cairn(ws, &["gc", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &v["collected_discarded"];
    assert_eq!(c[0]["checkpoint"], "c1", "{v}");
    assert_eq!(c[0]["by_retention"], false, "{v}");
    let e = failed(&cairn(ws, &["rollback", "c1"]));
    assert!(
        e.contains("discarded at LSN") && e.contains("by a recorded checkpoint.discard"),
        "{e}"
    );
    assert!(!e.contains("by retention"), "{e}");
    let e = failed(&cairn(ws, &["tree", "c1"]));
    assert!(
        e.contains("discarded at LSN") && !e.contains("by retention"),
        "{e}"
    );
    assert_eq!(ok(&cairn(ws, &["show", "c2:f"])), "two\n");
}

/// P15: the text summary names the checkpoints whose contents it collects.
#[test]
fn gc_names_what_it_collects_of_recorded_discards() {
    let d = init();
    let ws = d.path();
    std::fs::write(ws.join("f"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    std::fs::write(ws.join("f"), "two\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    ok(&discard(ws, "c1"));
    let out = ok(&cairn(ws, &["gc"]));
    assert!(
        out.contains("collected the contents of 1 checkpoint discarded before this gc: c1 (discarded at LSN 3 by a recorded checkpoint.discard event)"),
        "{out}"
    );
}

/// P16: files only accumulate, so every older checkpoint's contents are in
/// the newest: `--max-bytes` evicts none of them and says the budget is
/// not met.
#[test]
fn max_bytes_keeps_checkpoints_whose_eviction_frees_nothing() {
    let d = init();
    let ws = d.path();
    std::fs::write(ws.join("shared"), "s".repeat(50_000)).unwrap();
    for i in 0..4 {
        std::fs::write(ws.join(format!("u{i}")), format!("{i}").repeat(10_000)).unwrap();
        ok(&cairn(ws, &["checkpoint", "-q"]));
    }
    let out = ok(&cairn(ws, &["gc", "--max-bytes", "60000", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["discarded"], serde_json::json!([]), "{v}");
    assert_eq!(v["retained"], 4, "{v}");
    assert_eq!(v["budget_met"], false, "{v}");
    assert_eq!(v["budget"]["kept_bytes"], 90_000, "{v}");
    let out = ok(&cairn(ws, &["gc", "--max-bytes", "60000"]));
    assert!(out.contains("budget not met:"), "{out}");
    let out = ok(&cairn(ws, &["gc", "--max-bytes", "100000", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["budget_met"], true, "{v}");
}

/// P14.1: a discarded checkpoint that a later rollback restored keeps its
/// whole tree, so `rollback` to it works as `tree` and `show` do.
/// P14.2: gc's discard records carry the policy in words.
#[test]
fn a_discarded_checkpoint_whose_tree_is_kept_can_be_rolled_back_to() {
    let d = init();
    let ws = d.path();
    std::fs::write(ws.join("f"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    std::fs::write(ws.join("f"), "two\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    ok(&cairn(ws, &["rollback", "c1"]));
    let out = ok(&cairn(ws, &["gc", "--keep-per-session", "1", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["discarded"].as_array().unwrap().contains(&"c1".into()),
        "{v}"
    );
    let log = ok(&cairn(
        ws,
        &["log", "--json", "--kind", "checkpoint.discard"],
    ));
    assert!(log.contains("\"retention: keep 1 per session\""), "{log}");
    assert!(!log.contains("Some("), "{log}");
    std::fs::write(ws.join("f"), "three\n").unwrap();
    ok(&cairn(ws, &["tree", "c1"]));
    ok(&cairn(ws, &["rollback", "c1"]));
    assert_eq!(std::fs::read_to_string(ws.join("f")).unwrap(), "one\n");
}

#[test]
fn importing_a_checkpoint_whose_tree_gc_collected_says_so() {
    let tmp = init();
    let ws = tmp.path();
    for i in 1..=3 {
        std::fs::write(ws.join("f"), format!("{i}\n")).unwrap();
        ok(&cairn(ws, &["checkpoint", "-q"]));
    }
    ok(&cairn(ws, &["gc", "--keep-per-session", "1"]));
    std::fs::write(ws.join("ex.jsonl"), ok(&cairn(ws, &["export"]))).unwrap();
    let o = cairn(ws, &["import", "--again", "--format", "jsonl", "ex.jsonl"]);
    let e = failed(&o);
    assert_eq!(o.status.code(), Some(4), "{e}");
    assert!(
        e.contains("ex.jsonl:1:")
            && e.contains("is the tree of checkpoint c1 of this store, discarded at LSN 4")
            && e.contains("gc has since deleted"),
        "{e}"
    );
    assert!(
        !e.contains("import an export into the store it came from"),
        "{e}"
    );
}

/// T13-N4: a discarded checkpoint a later rollback restored, with an
/// application state, could be shown but not rolled back to after gc
/// ("its files are no longer all in the store"): gc now keeps its state
/// with its tree, so `rollback --dry-run` and a real rollback work, and
/// hand the state back.
#[test]
fn a_restored_discarded_checkpoint_with_state_can_be_rolled_back_to() {
    let d = init();
    let ws = d.path();
    let c1 = {
        let store = cairn::Store::open(ws).unwrap();
        let s = store.session("t");
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        let c1 = s
            .checkpoint_with(
                "with state",
                cairn::ScanMode::Full,
                Some(b"epoch 1".to_vec()),
            )
            .unwrap();
        std::fs::write(ws.join("a.txt"), "two\n").unwrap();
        s.checkpoint("two").unwrap();
        s.rollback(c1.id).unwrap();
        s.checkpoint("x").unwrap();
        s.checkpoint("y").unwrap();
        store.close().unwrap();
        c1.id.to_string()
    };
    let v: serde_json::Value = serde_json::from_str(&ok(&cairn(
        ws,
        &["gc", "--keep-per-session", "2", "--json"],
    )))
    .unwrap();
    assert!(
        v["discarded"]
            .as_array()
            .unwrap()
            .contains(&c1.clone().into()),
        "{v}"
    );
    let state = cairn::BlobHash::of(b"epoch 1").to_hex();
    let dry: serde_json::Value =
        serde_json::from_str(&ok(&cairn(ws, &["rollback", &c1, "--dry-run", "--json"]))).unwrap();
    assert_eq!(dry["state"], state.as_str(), "{dry}");
    std::fs::write(ws.join("a.txt"), "three\n").unwrap();
    let out = ok(&cairn(ws, &["rollback", &c1]));
    assert!(
        out.contains(&format!("{c1}'s application state is blob {state}")),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
    assert_eq!(ok(&cairn(ws, &["blob", "get", &state])), "epoch 1");
}
