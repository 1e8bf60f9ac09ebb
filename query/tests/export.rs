//! Export of every record kind (canonical JSONL validated against the
//! schema file), the reference shapes, and import/export round trips.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::{json, Value};

use cairn_codec::event::Meta;
use cairn_codec::{
    BlobHash, CheckpointCounts, CheckpointId, DiffStats, Event, EventKind, Lsn, Timestamp,
};
use cairn_query::export::{self, Format, MAX_INLINE_DIFF_BYTES, TRUNCATION_MARKER};
use cairn_query::import::{import_lines, parse_line};
use cairn_query::source::{MemBlobs, MemLog, RecordSource};
use cairn_query::Filter;

fn schema() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/schema/cairn-event.schema.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A small JSON-schema check: type, enum, required, properties,
/// additionalProperties, items, minLength/maxLength, minimum, $ref to $defs.
fn validate(root: &Value, schema: &Value, v: &Value, at: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.trim_start_matches("#/$defs/");
            &root["$defs"][name]
        }
        None => schema,
    };
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let ok = match t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_u64() || v.is_i64(),
            "boolean" => v.is_boolean(),
            "number" => v.is_number(),
            _ => false,
        };
        if !ok {
            errs.push(format!("{at}: expected {t}, got {v}"));
            return errs;
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errs.push(format!("{at}: {v} not in enum"));
        }
    }
    if let Some(s) = v.as_str() {
        if let Some(n) = schema.get("minLength").and_then(Value::as_u64) {
            if (s.chars().count() as u64) < n {
                errs.push(format!("{at}: shorter than {n}"));
            }
        }
        if let Some(n) = schema.get("maxLength").and_then(Value::as_u64) {
            if (s.chars().count() as u64) > n {
                errs.push(format!("{at}: longer than {n}"));
            }
        }
    }
    if let (Some(min), Some(n)) = (schema.get("minimum").and_then(Value::as_i64), v.as_i64()) {
        if n < min {
            errs.push(format!("{at}: {n} < {min}"));
        }
    }
    if let Some(o) = v.as_object() {
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !o.contains_key(r.as_str().unwrap()) {
                errs.push(format!("{at}: missing required {r}"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, val) in o {
            match props.and_then(|p| p.get(k)) {
                Some(s) => errs.extend(validate(root, s, val, &format!("{at}.{k}"))),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => errs.push(format!("{at}: unexpected field {k}")),
                    Some(s @ Value::Object(_)) => {
                        errs.extend(validate(root, s, val, &format!("{at}.{k}")))
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Some(a), Some(items)) = (v.as_array(), schema.get("items")) {
        for (i, x) in a.iter().enumerate() {
            errs.extend(validate(root, items, x, &format!("{at}[{i}]")));
        }
    }
    errs
}

/// An event of `kind` with every field set.
fn full(kind: EventKind, blobs: &MemBlobs) -> Event {
    let mut e = Event::new(kind, "sess");
    e.ts = Timestamp(1_700_000_000_123);
    e.run = Some("run".into());
    e.phase = Some("phase".into());
    e.agent = Some("agent".into());
    e.user = Some("user".into());
    e.tool = Some("tool".into());
    e.model = Some("model".into());
    e.latency_ms = Some(12);
    e.ok = false;
    e.error_kind = Some("EIO".into());
    e.text = Some("text ✓".into());
    e.path = Some("src/a.rs".into());
    e.to_path = Some("src/b.rs".into());
    e.files = vec!["src/a.rs".into(), "src/b.rs".into()];
    e.diff_stats = Some(DiffStats {
        lines_added: 1,
        lines_removed: 2,
        hunks: 3,
    });
    e.diff = Some(blobs.put(b"--- a\n+++ b\n-x\n+y\n"));
    e.before = Some(blobs.put(b"x\n"));
    e.after = Some(blobs.put(b"y\n"));
    e.parents = vec![Lsn(1)];
    e.label = Some("label".into());
    e.root = Some(BlobHash::of(b"root"));
    e.state = Some(BlobHash::of(b"state"));
    e.counts = Some(CheckpointCounts {
        files: 3,
        changed: 1,
        skipped: BTreeMap::from([("ignored".into(), 2)]),
    });
    e.checkpoint = Some(CheckpointId(Lsn(1)));
    e.source = Some(CheckpointId(Lsn(1)));
    e.target = Some(CheckpointId(Lsn(1)));
    e.meta = Some(Meta(serde_json::Map::from_iter([(
        "k".to_string(),
        json!([1, "x"]),
    )])));
    e
}

fn lines(out: &[u8]) -> Vec<Value> {
    std::str::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_kind_exports_as_canonical_jsonl_that_fits_the_schema() {
    let schema = schema();
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    for k in EventKind::ALL {
        log.append(full(k, &blobs)).unwrap();
        // The least each kind needs: a file event names its file, a move
        // its destination too.
        let mut bare = Event::new(k, "default");
        if k.is_file_op() {
            bare = bare.with_path("p");
        }
        if k == EventKind::FileMove {
            bare.to_path = Some("q".into());
        }
        log.append(bare).unwrap();
    }
    let mut out = Vec::new();
    let st = export::export(&log, &blobs, &Filter::all(), Format::Jsonl, &mut out).unwrap();
    assert_eq!(st.written, 36);
    assert!(st.skipped.is_empty());
    let vals = lines(&out);
    assert_eq!(vals.len(), 36);
    for (i, v) in vals.iter().enumerate() {
        let errs = validate(&schema, &schema, v, "$");
        assert!(errs.is_empty(), "line {}: {errs:?}\n{v}", i + 1);
        assert_eq!(v["lsn"], json!(i + 1));
        assert_eq!(v["kind"], json!(EventKind::ALL[i / 2].name()));
        // The line reads back as the same event.
        let back = parse_line(Format::Jsonl, &v.to_string()).unwrap().event;
        assert_eq!(back, log.read(Lsn(i as u64 + 1)).unwrap().event);
    }
    // Every field of the event model is described by the schema.
    let props = schema["properties"].as_object().unwrap();
    for k in vals[0].as_object().unwrap().keys() {
        assert!(props.contains_key(k), "{k}");
    }
    assert_eq!(
        vals[0].as_object().unwrap().len(),
        props.len(),
        "the full event uses every schema field"
    );
    // The validator can fail.
    let mut bad = vals[0].clone();
    bad["lsn"] = json!("one");
    bad["colour"] = json!(1);
    assert_eq!(validate(&schema, &schema, &bad, "$").len(), 2);
}

#[test]
fn reference_shapes_project_or_skip_every_kind() {
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    for k in EventKind::ALL {
        log.append(full(k, &blobs)).unwrap();
    }
    let mut out = Vec::new();
    let st = export::export(&log, &blobs, &Filter::all(), Format::Cortexide, &mut out).unwrap();
    assert_eq!(st.written, 16);
    assert_eq!(
        st.skipped,
        BTreeMap::from([(EventKind::ToolCall, 1), (EventKind::Custom, 1)])
    );
    let v = lines(&out);
    let actions: Vec<&str> = v.iter().map(|x| x["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "prompt",
            "reply",
            "diff_preview",
            "apply",
            "undo",
            "apply",
            "apply",
            "apply",
            "apply",
            "apply",
            "apply",
            "snapshot:create",
            "snapshot:discard",
            "rollback",
            "git:stash",
            "git:stash:restore"
        ]
    );
    assert_eq!(v[0]["ts"], json!(1_700_000_000_123i64));
    assert_eq!(
        v[0]["diffStats"],
        json!({"linesAdded": 1, "linesRemoved": 2, "hunks": 3})
    );
    assert_eq!(v[0]["latencyMs"], json!(12));
    assert_eq!(v[0]["files"], json!(["src/a.rs", "src/b.rs"]));
    assert_eq!(v[0]["meta"]["k"], json!([1, "x"]));
    assert_eq!(v[0]["meta"]["cairn"]["session"], json!("sess"));
    assert_eq!(v[5]["meta"]["cairn"]["kind"], json!("file.create"));
    // A checkpoint's own id, which later rollback lines name as target.
    assert_eq!(v[11]["action"], json!("snapshot:create"));
    assert_eq!(v[11]["meta"]["cairn"]["id"], json!("c13"));
    assert!(v[5]["meta"]["cairn"].get("id").is_none());

    let mut out = Vec::new();
    let st = export::export(&log, &blobs, &Filter::all(), Format::Comma, &mut out).unwrap();
    // The patch names two files: a line each.
    assert_eq!((st.records, st.written), (6, 7));
    assert_eq!(st.skipped.values().sum::<u64>(), 12);
    let v = lines(&out);
    let ops: Vec<(&str, &str)> = v
        .iter()
        .map(|x| {
            (
                x["toolName"].as_str().unwrap(),
                x["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("create_file", "create"),
            ("write_file", "write"),
            ("edit_file", "edit"),
            ("delete_file", "delete"),
            ("move_file", "move"),
            ("apply_patch", "patch"),
            ("apply_patch", "patch")
        ]
    );
    assert_eq!(
        (&v[5]["path"], &v[6]["path"]),
        (&json!("src/a.rs"), &json!("src/b.rs"))
    );
    assert!(
        v[6].get("toPath").is_none(),
        "toPath belongs to the event's own path"
    );
    assert!(
        v[0].get("beforeSha256").is_none() && v[0].get("afterSha256").is_some(),
        "create: no before"
    );
    assert!(
        v[3].get("afterSha256").is_none() && v[3].get("beforeSha256").is_some(),
        "delete: no after"
    );
    assert_eq!(v[1]["beforeSha256"], json!(export::sha256_hex(b"x\n")));
    assert_eq!(v[4]["toPath"], json!("src/b.rs"));
    assert_eq!(v[1]["errorKind"], json!("EIO"));
    assert_eq!(v[1]["timestamp"], json!("2023-11-14T22:13:20.123Z"));
}

fn round_trip(format: Format, input: &str) {
    let imported = import_lines(format, input.as_bytes(), "in.jsonl").unwrap();
    let log = MemLog::new();
    let blobs = MemBlobs::new();
    for i in imported {
        for b in &i.blobs {
            blobs.put(b);
        }
        log.append(i.event).unwrap();
    }
    let mut out = Vec::new();
    let st = export::export(&log, &blobs, &Filter::all(), format, &mut out).unwrap();
    assert!(st.skipped.is_empty());
    let want: Vec<Value> = input
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got = lines(&out);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{format} line {}", i + 1);
    }
}

#[test]
fn cortexide_import_then_export_is_identity() {
    let input = r#"{"ts":1700000000000,"action":"prompt","ok":true,"user":"ana","model":"gpt","meta":{"text":"fix it"}}
{"ts":1700000000001,"action":"reply","ok":true,"latencyMs":1234,"model":"gpt"}
{"ts":1700000000002,"action":"diff_preview","ok":true,"files":["src/a.rs"],"diffStats":{"linesAdded":3,"linesRemoved":1,"hunks":1}}
{"ts":1700000000003,"action":"apply","ok":false,"files":["src/a.rs","src/b.rs"],"meta":{"error":"conflict"}}
{"ts":1700000000004,"action":"undo","ok":true,"files":[]}
{"ts":1700000000005,"action":"rollback","ok":true,"meta":{}}
{"ts":1700000000006,"action":"snapshot:create","ok":true,"meta":{"id":"s1"}}
{"ts":1700000000007,"action":"snapshot:restore","ok":true}
{"ts":1700000000008,"action":"snapshot:restore","ok":true,"meta":{"id":"s1"}}
{"ts":1700000000009,"action":"snapshot:discard","ok":true}
{"ts":1700000000010,"action":"git:stash","ok":true,"latencyMs":12.5}
{"ts":1700000000011,"action":"git:stash:restore","ok":false,"diffStats":{"linesAdded":1.5,"linesRemoved":0,"hunks":1}}
{"ts":1700000000012,"action":"apply","ok":true,"meta":{"cairn":"theirs","nested":{"a":[1,null]}}}
"#;
    round_trip(Format::Cortexide, input);
}

/// Regression (refused outside writes): a cortexide or comma line naming
/// `/etc/passwd` (a refused write, the line an audit log exists to keep)
/// stopped the import of its whole file. Paths outside the workspace are
/// now kept as given and round-trip byte for byte, in `files` as the
/// shape has them.
#[test]
fn paths_outside_the_workspace_round_trip_as_given() {
    let cortexide = r#"{"ts":1700000000000,"action":"apply","ok":false,"files":["/etc/passwd"],"meta":{"error":"PathOutsideWorkspace"}}
{"ts":1700000000001,"action":"prompt","ok":true,"files":["a.rs","../elsewhere/b.rs"]}
{"ts":1700000000002,"action":"apply","ok":true,"files":["src/a.rs"]}
"#;
    round_trip(Format::Cortexide, cortexide);
    let comma = [
        json!({"timestamp":"2026-11-22T02:04:57.123Z","sessionId":"x","agentName":"coder","toolName":"write_file","operation":"write","path":"/etc/passwd","ok":false,"errorKind":"PathOutsideWorkspace"}),
        json!({"timestamp":"2026-11-22T02:04:58.000Z","sessionId":"x","agentName":"coder","toolName":"move_file","operation":"move","path":"a.txt","toPath":"../out.txt","ok":true}),
    ];
    let input: String = comma.iter().map(|l| format!("{l}\n")).collect();
    round_trip(Format::Comma, &input);
}

#[test]
fn comma_import_then_export_is_identity_including_failures_and_moves() {
    let sha = |b: &[u8]| export::sha256_hex(b);
    let long = format!(
        "--- a/big\n+++ b/big\n{}",
        "+x\n".repeat(MAX_INLINE_DIFF_BYTES / 3 + 10)
    );
    let truncated = export::truncate_diff(&long);
    assert!(truncated.ends_with(TRUNCATION_MARKER));
    let lines = [
        json!({"timestamp":"2026-11-22T02:04:57.123Z","sessionId":"default","agentName":"coder","toolName":"create_file","operation":"create","path":"src/new.rs","afterSha256":sha(b"new"),"diff":"+new\n","ok":true}),
        json!({"timestamp":"2026-11-22T02:04:58Z","sessionId":"t1","agentName":"coder","toolName":"write_file","operation":"write","path":"a.txt","beforeSha256":sha(b"a"),"afterSha256":sha(b"b"),"ok":true}),
        json!({"timestamp":"2026-11-22T03:04:58+01:00","sessionId":"t1","agentName":"coder","toolName":"edit_file","operation":"edit","path":"a.txt","beforeSha256":sha(b"b"),"ok":false,"errorKind":"STALE_READ"}),
        json!({"timestamp":"2026-11-22T02:05:00.000Z","sessionId":"t1","agentName":"coder","toolName":"delete_file","operation":"delete","path":"old.txt","beforeSha256":sha(b"o"),"ok":true}),
        json!({"timestamp":"2026-11-22T02:05:01.000Z","sessionId":"t1","agentName":"coder","toolName":"move_file","operation":"move","path":"a.txt","toPath":"docs/a.txt","ok":true}),
        json!({"timestamp":"2026-11-22T02:05:02.000Z","sessionId":"t1","agentName":"coder","toolName":"apply_patch","operation":"patch","path":"b.rs","toPath":"c.rs","diff":truncated,"ok":true}),
        json!({"timestamp":"2026-11-22T02:05:03.000Z","sessionId":"t1","agentName":"coder","toolName":"apply_patch","operation":"move","path":"x","toPath":"y","ok":false}),
        json!({"timestamp":"2026-11-22T02:05:04.000Z","sessionId":"t1","agentName":"coder","toolName":"move_file","operation":"move","path":"y","toPath":"z","ok":false,"errorKind":"EXDEV"}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    round_trip(Format::Comma, &input);
    // The imported events carry cairn fields, not just opaque JSON.
    let ev = import_lines(Format::Comma, input.as_bytes(), "f").unwrap();
    assert_eq!(ev[4].event.kind, EventKind::FileMove);
    assert_eq!(ev[4].event.to_path.as_deref(), Some("docs/a.txt"));
    assert_eq!(ev[2].event.error_kind.as_deref(), Some("STALE_READ"));
    assert!(!ev[2].event.ok);
    assert_eq!(ev[1].event.session, "t1");
    assert_eq!(ev[5].blobs.len(), 1);
}

#[test]
fn fields_a_shape_does_not_define_are_kept_and_exported_back() {
    // A newer producer may write more fields: one of them used to refuse
    // the whole file. They are kept verbatim and written back.
    let cortexide = r#"{"ts":1700000000000,"action":"prompt","ok":true,"workspaceId":7,"tags":["a",{"b":null}]}
{"ts":1700000000001,"action":"apply","ok":true,"files":["a.rs"],"user":null,"_cortexide":1}
"#;
    round_trip(Format::Cortexide, cortexide);
    let e = &import_lines(Format::Cortexide, cortexide.as_bytes(), "f").unwrap()[0].event;
    let hints = &e.meta.as_ref().unwrap().0[export::META_CORTEXIDE_HINTS];
    assert_eq!(hints["workspaceId"], json!(7));
    assert_eq!(hints["tags"], json!(["a", {"b": null}]));
    let lines = [
        json!({"timestamp":"2026-11-22T02:04:58Z","sessionId":"t1","agentName":"coder","toolName":"write_file","operation":"write","path":"a.txt","ok":true,"durationMs":12,"meta":{"reason":"fmt"}}),
        json!({"timestamp":"2026-11-22T02:04:59.000Z","sessionId":"t1","agentName":"coder","toolName":"move_file","operation":"move","path":"a.txt","toPath":"b.txt","ok":true,"commaTimestamp":"x"}),
    ];
    let comma: String = lines.iter().map(|l| format!("{l}\n")).collect();
    round_trip(Format::Comma, &comma);
    let ev = import_lines(Format::Comma, comma.as_bytes(), "f").unwrap();
    let meta = &ev[0].event.meta.as_ref().unwrap().0;
    assert_eq!(
        meta[export::META_COMMA_EXTRA],
        json!({"durationMs": 12, "meta": {"reason": "fmt"}})
    );
    // Kept apart from the keys the import writes itself.
    let meta = &ev[1].event.meta.as_ref().unwrap().0;
    assert_eq!(
        meta[export::META_COMMA_EXTRA],
        json!({"commaTimestamp": "x"})
    );
    assert!(!meta.contains_key(export::META_COMMA_TIMESTAMP));
}

#[test]
fn native_events_survive_cortexide_and_back() {
    let blobs = MemBlobs::new();
    let log = MemLog::new();
    for k in EventKind::ALL {
        log.append(full(k, &blobs)).unwrap();
    }
    let mut first = Vec::new();
    export::export(&log, &blobs, &Filter::all(), Format::Cortexide, &mut first).unwrap();
    let text = String::from_utf8(first.clone()).unwrap();
    round_trip(Format::Cortexide, &text);
    let mut c = Vec::new();
    export::export(&log, &blobs, &Filter::all(), Format::Comma, &mut c).unwrap();
    round_trip(Format::Comma, &String::from_utf8(c).unwrap());
}

#[test]
fn large_diffs_are_truncated_in_comma() {
    let blobs = MemBlobs::new();
    let log = MemLog::new();
    let mut e = Event::new(EventKind::FilePatch, "s").with_path("p");
    let big = "+y\n".repeat(MAX_INLINE_DIFF_BYTES);
    e.diff = Some(blobs.put(big.as_bytes()));
    log.append(e).unwrap();
    let mut out = Vec::new();
    export::export(&log, &blobs, &Filter::all(), Format::Comma, &mut out).unwrap();
    let d = lines(&out)[0]["diff"].as_str().unwrap().to_string();
    assert!(d.ends_with(TRUNCATION_MARKER));
    // The marker included, 64 KiB in all (trial 13 N12).
    assert_eq!(d.len(), MAX_INLINE_DIFF_BYTES);
}

#[test]
fn bad_import_lines_are_rejected_with_file_and_line() {
    let good = r#"{"timestamp":"2026-11-22T02:04:57.123Z","sessionId":"s","agentName":"a","toolName":"write_file","operation":"write","path":"p","ok":true}"#;
    let cases = [
        (format!("{good}\n{{not json\n"), 2, "invalid JSON"),
        (
            format!(
                "{good}\n\n{}\n",
                good.replace("\"ok\":true", "\"ok\":\"yes\"")
            ),
            3,
            "`ok` must be a boolean",
        ),
        (
            format!("{}\n", good.replace("write_file", "rm_rf")),
            1,
            "unknown toolName `rm_rf`",
        ),
        (
            format!(
                "{good}\n{}\n",
                good.replace("2026-11-22T02:04:57.123Z", "soon")
            ),
            2,
            "timestamp",
        ),
    ];
    for (input, line, reason) in cases {
        let e = import_lines(Format::Comma, input.as_bytes(), "audit/s.jsonl").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("audit/s.jsonl", line), "{e}");
        assert!(e.reason.contains(reason), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("audit/s.jsonl:{line}: ")),
            "{e}"
        );
    }
    let e = import_lines(Format::Comma, &b"\xff\xfe\n"[..], "bin").unwrap_err();
    assert!(e.reason.contains("UTF-8"), "{e}");
}

#[test]
fn cortexide_import_reads_back_what_cairns_export_kept_in_meta() {
    let blobs = MemBlobs::new();
    let log = MemLog::new();
    let mut mv = Event::new(EventKind::FileMove, "t1").with_path("a.rs");
    mv.to_path = Some("b.rs".into());
    mv.agent = Some("coder".into());
    log.append(mv.clone()).unwrap();
    let mut cp = Event::new(EventKind::CheckpointCreate, "t1");
    cp.label = Some("Before turn 2".into());
    log.append(cp.clone()).unwrap();
    let mut rb = Event::new(EventKind::Rollback, "t1");
    rb.target = Some(CheckpointId(Lsn(2)));
    rb.source = Some(CheckpointId(Lsn(1)));
    log.append(rb.clone()).unwrap();
    let mut out = Vec::new();
    export::export(&log, &blobs, &Filter::all(), Format::Cortexide, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let back = import_lines(Format::Cortexide, text.as_bytes(), "f").unwrap();
    let got: Vec<&Event> = back.iter().map(|i| &i.event).collect();
    // Session, kind, paths, agent and label come back, and meta.cairn is
    // not kept twice.
    assert_eq!(
        (
            got[0].kind,
            got[0].session.as_str(),
            got[0].path.as_deref(),
            got[0].to_path.as_deref()
        ),
        (EventKind::FileMove, "t1", Some("a.rs"), Some("b.rs"))
    );
    assert!(
        got[0].files.is_empty() && got[0].meta.is_none(),
        "{:?}",
        got[0]
    );
    assert_eq!(got[0].agent.as_deref(), Some("coder"));
    assert_eq!(got[1].label.as_deref(), Some("Before turn 2"));
    // Checkpoint ids are LSNs of the exporting store: never read back, so
    // the rollback keeps its meta.cairn whole.
    assert_eq!((got[2].target, got[2].source), (None, None));
    assert!(got[2].meta.as_ref().unwrap().0.contains_key("cairn"));
    // Exported again, line for line the same.
    round_trip(Format::Cortexide, &text);

    // Another producer's `meta.cairn` that cairn would not have written
    // (an unknown key, a kind its action cannot hold) is kept as it is.
    for foreign in [
        r#"{"action":"prompt","meta":{"cairn":{"session":"t1","colour":"red"}},"ok":true,"ts":1}"#,
        r#"{"action":"prompt","meta":{"cairn":{"kind":"file.write"}},"ok":true,"ts":1}"#,
        r#"{"action":"apply","meta":{"cairn":{"session":7}},"ok":true,"ts":1}"#,
    ] {
        let e = parse_line(Format::Cortexide, foreign).unwrap().event;
        assert_eq!(e.session, "default", "{foreign}");
        assert!(
            e.meta.as_ref().unwrap().0.contains_key("cairn"),
            "{foreign}"
        );
        round_trip(Format::Cortexide, &format!("{foreign}\n"));
    }
}

#[test]
fn cortexide_optional_fields_may_be_null() {
    for line in [
        r#"{"action":"prompt","meta":null,"model":null,"ok":true,"ts":1,"user":null}"#,
        r#"{"action":"apply","diffStats":null,"files":null,"latencyMs":null,"ok":true,"ts":2}"#,
        r#"{"action":"snapshot:restore","meta":null,"ok":true,"ts":3}"#,
    ] {
        let e = parse_line(Format::Cortexide, line).unwrap().event;
        assert!(
            e.user.is_none() && e.model.is_none() && e.files.is_empty(),
            "{line}"
        );
        // Exported again, the nulls are where they were.
        round_trip(Format::Cortexide, &format!("{line}\n"));
    }
}
