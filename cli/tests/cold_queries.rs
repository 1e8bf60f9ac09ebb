//! `cairn show POINT:PATH` from a new process, answered from the
//! per-segment index files (the path's last change before the point, not
//! a replay from the start): each point's contents across writes, a move,
//! a delete, a failed write and a checkpoint, and the errors of the whole
//! query index where there is no file.
#![allow(clippy::unwrap_used)]

mod common;

use common::{cairn, err, json_lines, ok};

/// Puts `text` in the store of `ws` as a blob; its hash.
fn put(ws: &std::path::Path, scratch: &std::path::Path, text: &str) -> String {
    let f = scratch.join("blob.txt");
    std::fs::write(&f, text).unwrap();
    let out = ok(&cairn(ws, &["blob", "put", f.to_str().unwrap()]));
    out.split_whitespace().next().unwrap().to_string()
}

#[test]
fn show_gives_each_points_contents_from_the_index_files() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&scratch).unwrap();
    ok(&cairn(&ws, &["init"]));
    let (h1, h2, h3) = (
        put(&ws, &scratch, "one\n"),
        put(&ws, &scratch, "two\n"),
        put(&ws, &scratch, "three\n"),
    );
    let lines = [
        format!(r#"{{"kind":"file.write","session":"s","path":"a.txt","after":"{h1}"}}"#),
        r#"{"kind":"prompt","session":"s","text":"go on"}"#.to_string(),
        format!(r#"{{"kind":"file.write","session":"s","path":"a.txt","after":"{h2}"}}"#),
        r#"{"kind":"file.move","session":"s","path":"a.txt","to_path":"b.txt"}"#.to_string(),
        format!(r#"{{"kind":"file.write","session":"s","path":"a.txt","after":"{h3}"}}"#),
        r#"{"kind":"file.delete","session":"s","path":"b.txt"}"#.to_string(),
        format!(
            r#"{{"kind":"file.write","session":"s","path":"a.txt","ok":false,"after":"{h1}"}}"#
        ),
    ];
    let input = scratch.join("events.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    ok(&cairn(
        &ws,
        &["import", "--format", "jsonl", input.to_str().unwrap()],
    ));
    let cases: [(&str, Option<&str>); 11] = [
        ("@1:a.txt", Some("one\n")),
        ("@2:a.txt", Some("one\n")),
        ("@3:a.txt", Some("two\n")),
        ("@3:b.txt", None),
        ("@4:b.txt", Some("two\n")),
        ("@4:a.txt", None),
        ("@5:a.txt", Some("three\n")),
        ("@5:b.txt", Some("two\n")),
        ("@6:b.txt", None),
        ("@7:a.txt", Some("three\n")),
        ("head:a.txt", Some("three\n")),
    ];
    let check = |cases: &[(&str, Option<&str>)]| {
        for (spec, want) in cases {
            let o = cairn(&ws, &["show", spec]);
            match want {
                Some(text) => assert_eq!(ok(&o), *text, "show {spec}"),
                None => {
                    assert!(!o.status.success(), "show {spec}: {o:?}");
                    let path = spec.rsplit(':').next().unwrap();
                    assert!(err(&o).contains(path), "show {spec}: {}", err(&o));
                }
            }
        }
    };
    check(&cases);

    // A checkpoint resets the tree to the workspace's files: after it,
    // only what it captured; before it, the records' contents still.
    std::fs::write(ws.join("c.txt"), "captured\n").unwrap();
    let made = json_lines(&ok(&cairn(&ws, &["checkpoint", "--json"])));
    let id = made[0]["id"].as_str().unwrap().to_string();
    check(&[
        ("head:c.txt", Some("captured\n")),
        (&format!("{id}:c.txt"), Some("captured\n")),
        ("head:a.txt", None),
        ("@7:a.txt", Some("three\n")),
        ("@7:c.txt", None),
    ]);
}

/// The binary is linked without PIE on Linux (cli/build.rs): the dynamic
/// loader then has no relative relocations to apply at each start, which
/// is a fifth of a query's start-up. ELF's `e_type` at offset 16 is 2
/// (`ET_EXEC`) for such a binary and 3 (`ET_DYN`) for a PIE.
#[cfg(all(target_os = "linux", any(target_env = "gnu", target_env = "musl")))]
#[test]
fn the_binary_is_linked_without_relocations_to_apply_at_start() {
    if std::env::var("CAIRN_PIE").is_ok_and(|v| v == "1") {
        return; // built as a PIE on purpose
    }
    use std::io::Read;
    let mut bin = [0u8; 18];
    std::fs::File::open(env!("CARGO_BIN_EXE_cairn"))
        .unwrap()
        .read_exact(&mut bin)
        .unwrap();
    assert_eq!(&bin[..4], b"\x7fELF");
    let e_type = u16::from_le_bytes([bin[16], bin[17]]);
    assert_eq!(e_type, 2, "cairn is linked as a PIE (e_type {e_type})");
}
