//! The CI twins of the `query_index` and `import_line` fuzz targets
//! (`fuzz/`): the query-index file decoder ([`Index::decode`]) and the
//! import-line parser ([`parse_line`], every format) fed random input and
//! damaged valid input. Neither ever panics. The index file is refused
//! whole (a `IndexCorrupt` error) when any byte of a valid file is flipped,
//! cut or spliced, and a valid file round trips; an import line that is
//! accepted re-exports, in the same format, to a line that imports to the
//! same event (a fixpoint), and a valid line round trips.
#![allow(clippy::unwrap_used)]

use cairn_codec::{BlobHash, CheckpointId, Event, EventKind, Lsn, Timestamp};
use cairn_query::export::export;
use cairn_query::import::parse_line;
use cairn_query::index::Index;
use cairn_query::source::{MemBlobs, MemLog};
use cairn_query::{Filter, Format, QueryError};
use proptest::prelude::*;

const FORMATS: [Format; 3] = [Format::Jsonl, Format::Cortexide, Format::Comma];

/// Events of every kind, with the fields the indexes and the projections read.
fn arb_event() -> impl Strategy<Value = Event> {
    (
        0usize..EventKind::ALL.len(),
        0i64..4_000_000_000_000,
        "[a-z0-9]{1,6}",
        proptest::option::of("[ -~]{0,20}"),
        proptest::option::of("[a-z]{1,4}(/[a-z]{1,4}){0,2}"),
        proptest::option::of("[a-z_]{1,10}"),
        any::<bool>(),
        proptest::option::of(any::<[u8; 32]>()),
        proptest::option::of(1u64..40),
        proptest::collection::vec("[a-z]{1,4}/[a-z]{1,4}", 0..3),
    )
        .prop_map(
            |(kind, ts, session, text, path, tool, ok, root, target, files)| {
                let mut e = Event::new(EventKind::ALL[kind], session);
                e.ts = Timestamp::from_millis(ts).unwrap();
                e.text = text;
                e.path = path;
                e.tool = tool;
                e.ok = ok;
                e.files = files;
                // File events name their files, as cairn's input requires,
                // and a move its destination, as the comma import requires.
                let patch = e.kind == EventKind::FilePatch;
                if e.kind.is_file_op() && (!patch || e.files.is_empty()) {
                    e.path.get_or_insert_with(|| "src/lib.rs".into());
                }
                if e.kind == EventKind::FileMove {
                    e.to_path = Some("src/new.rs".into());
                }
                match e.kind {
                    EventKind::CheckpointCreate => e.root = root.map(BlobHash),
                    EventKind::Rollback => e.target = target.map(|t| CheckpointId(Lsn(t))),
                    EventKind::CheckpointDiscard => {
                        e.checkpoint = target.map(|t| CheckpointId(Lsn(t)))
                    }
                    _ => {}
                }
                e
            },
        )
}

/// Damage to valid bytes: a flipped byte, a cut, or random bytes spliced in.
#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Cut(usize),
    Splice(usize, Vec<u8>),
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Damage::Flip(i, x)),
        any::<usize>().prop_map(Damage::Cut),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Damage::Splice(i, b)),
    ]
}

fn apply(bytes: &[u8], d: &Damage) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match d {
        Damage::Flip(i, x) => {
            let i = i % b.len();
            b[i] ^= x;
        }
        Damage::Cut(i) => b.truncate(i % b.len()),
        Damage::Splice(i, s) => {
            let i = i % (b.len() + 1);
            b.splice(i..i, s.iter().copied());
        }
    }
    b
}

fn build_index(events: &[Event]) -> Index {
    let log = MemLog::new();
    for e in events {
        log.append(e.clone()).unwrap();
    }
    Index::build(&log).unwrap()
}

/// The lines `e` exports to in `format` (none if the format has no
/// projection for its kind), with the blobs it needs in `blobs`.
fn export_lines(e: &Event, format: Format, blobs: &MemBlobs) -> Vec<String> {
    let log = MemLog::new();
    log.append(e.clone()).unwrap();
    let mut out = Vec::new();
    export(&log, blobs, &Filter::all(), format, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    text.lines().map(str::to_string).collect()
}

/// The one line `e` exports to in `format` (None if the format has no
/// projection for its kind). Only a `comma` patch of several files has
/// more than one line, and no imported line is one.
fn export_line(e: &Event, format: Format, blobs: &MemBlobs) -> Option<String> {
    let mut lines = export_lines(e, format, blobs);
    assert!(
        lines.len() <= 1,
        "one imported event exported to several lines"
    );
    lines.pop()
}

/// Whatever a format accepts re-exports to a line that imports to the same event.
fn check_fixpoint(format: Format, line: &str) -> Result<(), TestCaseError> {
    let Ok(first) = parse_line(format, line) else {
        return Ok(());
    };
    let blobs = MemBlobs::new();
    for b in &first.blobs {
        blobs.put(b);
    }
    let Some(again) = export_line(&first.event, format, &blobs) else {
        return Err(TestCaseError::fail(format!(
            "{format:?} accepted a line it cannot export: {line}"
        )));
    };
    let second = parse_line(format, &again);
    prop_assert!(
        second.is_ok(),
        "re-exported line refused: {again} ({second:?})"
    );
    prop_assert_eq!(&second.unwrap().event, &first.event, "{}", again);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn index_random_bytes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let r = Index::decode(&bytes, "f");
        prop_assert!(matches!(r, Err(QueryError::IndexCorrupt { .. })), "{r:?}");
    }

    #[test]
    fn index_random_body_behind_a_valid_header(body in proptest::collection::vec(any::<u8>(), 0..400)) {
        // The header of a valid file, with the length and checksum of `body`:
        // only the MessagePack decoder stands between the body and the index.
        let mut bytes = Index::new().encode().unwrap()[..12].to_vec();
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bytes.extend_from_slice(BlobHash::of(&body).as_bytes());
        bytes.extend_from_slice(&body);
        if let Ok(ix) = Index::decode(&bytes, "f") {
            let again = ix.encode().unwrap();
            prop_assert_eq!(Index::decode(&again, "f").unwrap(), ix);
        }
    }

    #[test]
    fn index_files_round_trip(events in proptest::collection::vec(arb_event(), 0..30)) {
        let ix = build_index(&events);
        let bytes = ix.encode().unwrap();
        prop_assert_eq!(&Index::decode(&bytes, "f").unwrap(), &ix);
    }

    #[test]
    fn damaged_index_files_are_refused(events in proptest::collection::vec(arb_event(), 0..30), d in arb_damage()) {
        let bytes = build_index(&events).encode().unwrap();
        let bad = apply(&bytes, &d);
        let r = Index::decode(&bad, "f");
        prop_assert!(matches!(r, Err(QueryError::IndexCorrupt { .. })), "{d:?}: {r:?}");
    }

    #[test]
    fn import_random_text_never_panics(line in "\\PC{0,200}") {
        for format in FORMATS {
            check_fixpoint(format, &line)?;
        }
    }

    #[test]
    fn import_valid_lines_round_trip(e in arb_event()) {
        let blobs = MemBlobs::new();
        for format in FORMATS {
            let lines = export_lines(&e, format, &blobs);
            let several = e.kind == EventKind::FilePatch && format == Format::Comma;
            prop_assert!(lines.len() <= 1 || several, "{format:?}: {lines:?}");
            for line in lines {
                let imported = parse_line(format, &line);
                prop_assert!(imported.is_ok(), "{format:?} refused its own line {line}: {imported:?}");
                check_fixpoint(format, &line)?;
            }
        }
    }

    #[test]
    fn import_damaged_valid_lines(e in arb_event(), d in arb_damage()) {
        let blobs = MemBlobs::new();
        for format in FORMATS {
            let Some(line) = export_lines(&e, format, &blobs).into_iter().next() else { continue };
            let bad = apply(line.as_bytes(), &d);
            // Damage may leave bytes that are not UTF-8: the importer sees text only.
            let bad = String::from_utf8_lossy(&bad);
            check_fixpoint(format, &bad)?;
        }
    }
}
