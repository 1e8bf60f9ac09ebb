//! Regression tests for the session-11 user trial's retention findings:
//! P15 (a recorded `checkpoint.discard` of the newest checkpoint), P16
//! (`gc --max-bytes` evicting what frees nothing), P14.1 (rollback to a
//! discarded checkpoint whose tree a later rollback kept) and P14.2 (no
//! Rust `Debug` text in gc's discard records); and the session-13 trial's
//! T13-N3 (gc left evicted contents readable and said nothing of them) and
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
        !e.contains("import an export into the store it came from")
            && !e.contains("import the lines after it"),
        "{e}"
    );
    // It names the option that imports the line, as a record that says gc
    // collected its files.
    assert!(
        e.contains(
            "--collected-checkpoints record imports it as a checkpoint record without its files"
        ),
        "{e}"
    );
}

/// Printable bytes that compress little (so a pack's dead share is what
/// the sizes say), the same for the same seed.
fn noise(len: usize, seed: u64) -> String {
    let mut x = seed * 2 + 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect()
}

/// The bytes of every file under the store's blob directory.
fn blob_files(ws: &Path) -> Vec<Vec<u8>> {
    std::fs::read_dir(ws.join(".cairn/blobs"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect()
}

/// The trial's store: `keep.dat` (1 MB) in both checkpoints of session
/// `s`, `tmp.dat` (200 KB) only in the first, which `--keep-per-session 1`
/// evicts.
fn keep_and_tmp(ws: &Path) -> (String, String) {
    let keep = noise(1_000_000, 1);
    let tmp = noise(200_000, 2);
    std::fs::write(ws.join("keep.dat"), &keep).unwrap();
    std::fs::write(ws.join("tmp.dat"), &tmp).unwrap();
    ok(&cairn(
        ws,
        &["checkpoint", "-q", "--session", "s", "--label", "one"],
    ));
    std::fs::remove_file(ws.join("tmp.dat")).unwrap();
    ok(&cairn(
        ws,
        &["checkpoint", "-q", "--session", "s", "--label", "two"],
    ));
    (keep, tmp)
}

/// T13-N3: gc evicted c1 but left its blobs (their pack is below the
/// rewrite threshold) and said "removed 0 unreferenced blobs, freed 0 B".
/// It now says what it left and why, in text and JSON; `--compact`
/// removes them, so the evicted contents can no longer be read, and
/// everything still referenced stays.
#[test]
fn gc_says_what_it_leaves_and_compact_removes_the_evicted_contents() {
    let d = init();
    let ws = d.path();
    let (keep, tmp) = keep_and_tmp(ws);
    let out = ok(&cairn(ws, &["gc", "--keep-per-session", "1"]));
    assert!(out.contains("evicted 1 checkpoint: c1"), "{out}");
    assert!(
        out.contains("left 2 unreferenced blobs (")
            && out.contains("at most 30% dead, under the rewrite threshold")
            && out.contains("`cairn gc --compact` removes them now"),
        "{out}"
    );
    assert_eq!(
        ok(&cairn(ws, &["show", "c1:tmp.dat"])),
        tmp,
        "left in place"
    );
    let v: serde_json::Value = serde_json::from_str(&ok(&cairn(ws, &["gc", "--json"]))).unwrap();
    assert_eq!(v["removed_blobs"], 0, "{v}");
    assert_eq!(v["left_blobs"], 2, "{v}");
    // tmp.dat's 200 KB compress to about 160 KB.
    assert!(v["left_bytes"].as_u64().unwrap() > 150_000, "{v}");
    assert_eq!(v["left_below_threshold"]["blobs"], 2, "{v}");
    assert_eq!(v["left_below_threshold"]["rewrite_threshold"], 0.3, "{v}");
    assert_eq!(
        v["left_below_threshold"]["free_with"], "cairn gc --compact",
        "{v}"
    );
    assert_eq!(v["left_in_damaged_packs"]["blobs"], 0, "{v}");
    assert_eq!(v["compact"], false, "{v}");

    let v: serde_json::Value =
        serde_json::from_str(&ok(&cairn(ws, &["gc", "--compact", "--json"]))).unwrap();
    assert_eq!(v["compact"], true, "{v}");
    assert_eq!(v["removed_blobs"], 2, "{v}");
    assert!(v["freed_bytes"].as_u64().unwrap() > 150_000, "{v}");
    assert_eq!(v["left_blobs"], 0, "{v}");
    let e = failed(&cairn(ws, &["show", "c1:tmp.dat"]));
    assert!(
        e.contains("checkpoint c1 was discarded at LSN") && e.contains("gc removed its manifest"),
        "{e}"
    );
    // Not a byte run of tmp.dat is left in any file of the blob store.
    let probe = &tmp.as_bytes()[100_000..100_064];
    assert!(blob_files(ws)
        .iter()
        .all(|f| !f.windows(probe.len()).any(|w| w == probe)));
    assert_eq!(ok(&cairn(ws, &["show", "c2:keep.dat"])), keep);
    ok(&cairn(ws, &["verify"]));
    let out = ok(&cairn(ws, &["gc"]));
    assert!(!out.contains("left "), "nothing left to say: {out}");
}

/// T13-N3: `--max-bytes` evicted checkpoints and freed nothing on disk.
/// When the store is over the budget on disk with dead bytes in packs
/// below the threshold, gc now rewrites them to fit; when even that is
/// not enough, it says by how much the store is still over.
#[test]
fn max_bytes_rewrites_packs_to_fit_the_budget_on_disk_or_says_how_far_over() {
    let d = init();
    let ws = d.path();
    let (keep, _) = keep_and_tmp(ws);
    // 1.2 MB of contents over 900 KB: c1 is evicted, freeing tmp.dat's
    // 200 KB (c2's 1 MB stays over: the newest is always kept). On disk
    // (compressed to about 985 KB) the store is over too, with tmp.dat's
    // bytes in a pack under the threshold: that pack is rewritten.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&cairn(ws, &["gc", "--max-bytes", "900000", "--json"]))).unwrap();
    assert_eq!(v["discarded"], serde_json::json!(["c1"]), "{v}");
    assert_eq!(v["budget_met"], false, "{v}");
    assert_eq!(v["packs_rewritten_for_budget"], 1, "{v}");
    assert_eq!(v["removed_blobs"], 2, "{v}");
    assert_eq!(v["left_blobs"], 0, "{v}");
    assert_eq!(v["budget"]["stored_over_by"], 0, "{v}");
    assert!(v["stored_bytes"].as_u64().unwrap() <= 900_000, "{v}");
    assert!(failed(&cairn(ws, &["show", "c1:tmp.dat"])).contains("discarded"));
    assert_eq!(ok(&cairn(ws, &["show", "c2:keep.dat"])), keep);

    // 300 KB cannot hold keep.dat: said, with by how much, in text and JSON.
    let out = ok(&cairn(ws, &["gc", "--max-bytes", "300000"]));
    assert!(
        out.contains("over budget on disk: the blob store takes ")
            && out.contains("over the budget of 293.0 KiB")
            && out.contains("every unreferenced blob is gone"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&cairn(ws, &["gc", "--max-bytes", "300000", "--json"]))).unwrap();
    let stored = v["budget"]["stored_bytes"].as_u64().unwrap();
    assert_eq!(v["budget"]["stored_over_by"], stored - 300_000, "{v}");
    let o = cairn(ws, &["-q", "gc", "--max-bytes", "300000"]);
    assert!(
        err(&o).contains("warning: over budget on disk"),
        "{}",
        err(&o)
    );
}

/// T13-N3: `gc --help` tells of the rewrite threshold (the store's own
/// figure) and of `--compact`.
#[test]
fn gc_help_tells_of_the_threshold_and_compact() {
    let d = init();
    let out = ok(&cairn(d.path(), &["gc", "--help"]));
    let pct = format!(
        "over {:.0}% of one is dead",
        cairn::checkpoint::DEFAULT_REWRITE_THRESHOLD * 100.0
    );
    assert!(out.contains(&pct), "{out}");
    assert!(out.contains("--compact"), "{out}");
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
        let c1 = common::restored_checkpoint_with_state(&store, ws);
        store.close().unwrap();
        c1.to_string()
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
