//! Regression tests for issue 27, "verify must see every loss": a deleted
//! newest log segment (verify said ok and the next record reused the lost
//! LSNs), deleted blob packs (verify checked "0 blobs" and passed while
//! every checkpoint named blobs that were gone), damage reports that named
//! hashes but not the checkpoints and paths they held, and `show` exiting
//! 1 rather than the corruption code 3 on such damage.
#![allow(clippy::unwrap_used)]

use std::path::Path;

mod common;
use common::*;

/// The corruption exit code (`EXIT_CORRUPT` in cli/src/main.rs).
const CORRUPT: i32 = 3;

fn init() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    ok(&cairn(d.path(), &["init", "-q"]));
    d
}

fn prompts(ws: &Path, n: usize) {
    let lines: String = (1..=n)
        .map(|i| format!("{{\"kind\":\"prompt\",\"session\":\"s\",\"text\":\"p{i}\"}}\n"))
        .collect();
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&lines)));
}

fn verify_json(ws: &Path) -> (Option<i32>, serde_json::Value) {
    let o = cairn(ws, &["verify", "--json"]);
    let v = serde_json::from_slice(&o.stdout).unwrap();
    (o.status.code(), v)
}

/// The log's only segment deleted: `verify` reports the lost LSNs (from
/// the clean close's `tail.state`) and exits 3; `record` is refused with
/// the loss and `cairn repair` named, so no LSN is given out twice; repair
/// records the gap as placeholders, and the next record gets a new LSN.
#[test]
fn deleted_newest_segment_is_reported_and_its_lsns_never_reused() {
    let d = init();
    let ws = d.path();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    prompts(ws, 3);
    ok(&cairn(ws, &["checkpoint", "-q"]));
    for e in std::fs::read_dir(ws.join(".cairn/log")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "seg") {
            std::fs::remove_file(p).unwrap();
        }
    }

    // Read commands read what is left, and say what is lost.
    let o = cairn(ws, &["log"]);
    let e = err(&o);
    assert!(
        e.contains("warning:") && e.contains("LSN 1 to 4 (4 records) are lost"),
        "{e}"
    );
    // A point among the lost records is damage, not a typo: exit 3.
    let o = cairn(ws, &["show", "c4:a.txt"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));

    let o = cairn(ws, &["verify"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("LSN 1 to 4 (4 records) are lost"), "{out}");
    assert!(!out.contains("ok: no damage found"), "{out}");
    let (code, v) = verify_json(ws);
    assert_eq!(code, Some(CORRUPT));
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"][0]["lsn"], 1, "{v}");

    let o = cairn_stdin(
        ws,
        &["record", "--ack"],
        Some("{\"kind\":\"prompt\",\"session\":\"s\",\"text\":\"after\"}\n"),
    );
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    let e = err(&o);
    assert!(
        e.contains("LSN 1 to 4") && e.contains("cairn repair"),
        "{e}"
    );

    let out = ok(&cairn(ws, &["repair"]));
    assert!(out.contains("lost LSN 1..=4"), "{out}");
    assert!(out.contains("4 placeholder records"), "{out}");
    let out = ok(&cairn(ws, &["verify"]));
    assert!(out.contains("ok: no damage found"), "{out}");
    let acks = ok(&cairn_stdin(
        ws,
        &["record", "--ack"],
        Some("{\"kind\":\"prompt\",\"session\":\"s\",\"text\":\"after\"}\n"),
    ));
    assert_eq!(acks.trim(), "5", "the next record follows the lost LSNs");
}

/// Every pack and the blob index deleted: verify names each checkpoint
/// whose tree is gone and exits 3 (it checked "0 blobs" and passed); `gc`
/// and `show` exit 3 too, and what gc points to (`cairn verify`) finds it.
#[test]
fn deleted_blob_store_names_every_checkpoint_that_lost_its_tree() {
    let d = init();
    let ws = d.path();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    for e in std::fs::read_dir(ws.join(".cairn/blobs")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }

    let o = cairn(ws, &["verify"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("LOST checkpoint c1 (LSN 1): the whole tree"),
        "{out}"
    );
    assert!(
        out.contains("LOST checkpoint c2 (LSN 2): the whole tree"),
        "{out}"
    );
    assert!(out.contains("missing from the blob store"), "{out}");
    let (code, v) = verify_json(ws);
    assert_eq!(code, Some(CORRUPT));
    assert_eq!(v["ok"], false);
    let lost = v["lost_contents"].as_array().unwrap();
    let named: Vec<(&str, &str, &str)> = lost
        .iter()
        .map(|l| {
            (
                l["checkpoint"].as_str().unwrap(),
                l["role"].as_str().unwrap(),
                l["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(named, [("c1", "tree root", ""), ("c2", "tree root", "")]);

    let o = cairn(ws, &["gc"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    let o = cairn(ws, &["show", "c2:a.txt"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    assert!(err(&o).contains("cairn verify"), "{}", err(&o));
}

/// One file's contents damaged in its pack: verify names the path and
/// every checkpoint that holds it (not only the hash), and `show` of it
/// exits 3 as `verify` does.
#[test]
fn damaged_blob_is_named_by_its_checkpoints_and_paths() {
    let d = init();
    let ws = d.path();
    std::fs::create_dir(ws.join("d")).unwrap();
    let big = noise(1, 4096);
    std::fs::write(ws.join("d/big.bin"), &big).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    ok(&cairn(ws, &["checkpoint", "-q"]));
    let pack = ws.join(".cairn/blobs/pack-00000001.pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    let at = bytes
        .windows(64)
        .position(|w| w == &big[1000..1064])
        .expect("incompressible contents are stored as they are");
    bytes[at + 10] ^= 0xff;
    std::fs::write(&pack, bytes).unwrap();

    let o = cairn(ws, &["verify"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("LOST checkpoint c1 (LSN 1): `d/big.bin`: file contents"),
        "{out}"
    );
    assert!(
        out.contains("LOST checkpoint c2 (LSN 2): `d/big.bin`: file contents"),
        "{out}"
    );
    let (_, v) = verify_json(ws);
    let lost = v["lost_contents"].as_array().unwrap();
    assert_eq!(lost.len(), 2, "{v}");
    assert!(lost.iter().all(|l| l["path"] == "d/big.bin"
        && l["role"] == "file contents"
        && l["detail"].as_str().unwrap().contains("pack-00000001.pack")));

    let o = cairn(ws, &["show", "c1:d/big.bin"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    // The intact file of the same checkpoint still reads.
    assert_eq!(ok(&cairn(ws, &["show", "c1:a.txt"])), "one\n");
}

/// A blob a record names outside any checkpoint (a file event's `after`)
/// that is gone: verify names the record and its path.
#[test]
fn missing_blob_of_a_file_event_is_named_by_its_record() {
    let d = init();
    let ws = d.path();
    std::fs::write(ws.join("x.txt"), "hi\n").unwrap();
    let put = ok(&cairn(ws, &["blob", "put", "x.txt"]));
    let hash = put.split_whitespace().next().unwrap().to_string();
    let line = format!(
        "{{\"kind\":\"file.write\",\"session\":\"s\",\"path\":\"x.txt\",\"after\":\"{hash}\"}}\n"
    );
    ok(&cairn_stdin(ws, &["record", "-q"], Some(&line)));
    let out = ok(&cairn(ws, &["verify"]));
    assert!(out.contains("ok: no damage found"), "{out}");
    for e in std::fs::read_dir(ws.join(".cairn/blobs")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let o = cairn(ws, &["verify"]);
    assert_eq!(o.status.code(), Some(CORRUPT), "{}", all_output(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("LOST record LSN 1: `x.txt`: after (blob {hash})")),
        "{out}"
    );
}
