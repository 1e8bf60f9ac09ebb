//! `cairn repair` mends what a second copy or the workspace still holds:
//! a lost zstd dictionary from its copy, a damaged blob from a workspace
//! file with the same contents.
#![allow(clippy::unwrap_used)]

mod common;
use common::{cairn, cairn_stdin, noise, ok};
use std::path::Path;

fn files_named(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| pred(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect()
}

/// Regression (issue 27): deleting the log's 64 KiB dictionary made every
/// record compressed with it unreadable (4,042 in the trial) and `repair`
/// refused to run. The second copy keeps them readable, and `repair`
/// writes the file again.
#[test]
fn repair_restores_a_deleted_log_dictionary_from_its_copy() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    ok(&cairn(ws, &["init", "."]));
    // Enough record bodies (over 1 MiB of 256 B..16 KiB) to train the
    // log's dictionary.
    let words = [
        "build", "fails", "module", "parser", "retry", "config", "cargo", "test",
    ];
    let mut input = String::new();
    for i in 0..4000usize {
        let text: Vec<&str> = (0..70)
            .map(|j| words[(i * 7 + j * 3) % words.len()])
            .collect();
        input.push_str(&format!(
            "{{\"kind\":\"prompt\",\"text\":\"{} #{i}\"}}\n",
            text.join(" ")
        ));
    }
    ok(&cairn_stdin(ws, &["record"], Some(&input)));
    let log = ws.join(".cairn/log");
    let dicts = files_named(&log, |n| n.starts_with("dict-") && n.ends_with(".zstd"));
    assert_eq!(dicts.len(), 1, "the log trained a dictionary");
    let good = std::fs::read(&dicts[0]).unwrap();
    let before = ok(&cairn(ws, &["log", "--json"]));
    std::fs::remove_file(&dicts[0]).unwrap();

    // Every record still reads, through the copy.
    assert_eq!(ok(&cairn(ws, &["log", "--json"])), before);
    ok(&cairn(ws, &["verify"]));
    let out = ok(&cairn(ws, &["repair"]));
    assert!(out.contains("from its second copy"), "{out}");
    assert_eq!(std::fs::read(&dicts[0]).unwrap(), good);
    assert_eq!(ok(&cairn(ws, &["log", "--json"])), before);
}

/// Regression (issue 27): a damaged blob could not be mended although the
/// workspace still held a file with exactly its contents.
#[test]
fn repair_mends_a_damaged_blob_from_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    ok(&cairn(ws, &["init", "."]));
    let contents = noise(27, 20_000);
    std::fs::write(ws.join("data.bin"), &contents).unwrap();
    std::fs::write(ws.join("other.txt"), "other").unwrap();
    ok(&cairn(ws, &["checkpoint"]));

    // Damage the blob in its pack.
    let packs = files_named(&ws.join(".cairn/blobs"), |n| n.ends_with(".pack"));
    let mut damaged = false;
    for p in packs {
        let mut b = std::fs::read(&p).unwrap();
        if let Some(at) = b.windows(64).position(|w| w == &contents[5000..5064]) {
            b[at + 10] ^= 0xff;
            std::fs::write(&p, b).unwrap();
            damaged = true;
        }
    }
    assert!(damaged, "the blob's bytes were found in a pack");
    let v = cairn(ws, &["verify"]);
    assert_eq!(v.status.code(), Some(3), "verify sees the damage");

    let out = ok(&cairn(ws, &["repair"]));
    assert!(out.contains("mended damaged blob"), "{out}");
    assert!(out.contains("data.bin"), "{out}");
    ok(&cairn(ws, &["verify"]));
    let shown = cairn(ws, &["show", "c1:data.bin"]);
    assert!(shown.status.success());
    assert_eq!(shown.stdout, contents);
}
