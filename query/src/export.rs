//! Export: a projection of the log to JSONL, in cairn's canonical schema or
//! one of the two reference shapes of FORMATS.md (`cortexide`, `comma`),
//! with filters and a follow mode (like `tail -f`).
//!
//! # Canonical (`jsonl`)
//! One [`JsonRecord`](cairn_codec::json::JsonRecord) per record; every kind has a projection. The schema is
//! `docs/schema/cairn-event.schema.json`.
//!
//! # `cortexide`
//! `ts` (epoch ms), `user`, `action`, `files`, `diffStats`, `model`,
//! `latencyMs`, `ok`, `meta`. Actions by kind: `prompt`, `reply`,
//! `diff_preview`, `apply`, `undo`, `rollback` map to themselves;
//! `checkpoint.create` -> `snapshot:create`, `checkpoint.discard` ->
//! `snapshot:discard`, `rollback` -> `snapshot:restore` when its meta says
//! `"cortexideAction": "snapshot:restore"` (that key is not written out),
//! `git.stash` -> `git:stash`, `git.stash_restore` -> `git:stash:restore`.
//! The `file.*` kinds have no action of their own: they are projected to
//! `apply` (a change applied to the workspace) with `files` = their paths.
//! `tool_call` and `custom` have no counterpart at all and are **skipped**,
//! counted in [`ExportStats::skipped`]. cairn fields the shape has no place
//! for (session when not `default`, run, phase, agent, tool, text,
//! error_kind, label, the checkpoint ids `checkpoint`, `source` and
//! `target`, the blob hashes `before`, `after` and `diff` in hex, path,
//! to_path, and the kind when the action is lossy) go into
//! `meta.cairn`, only when there is at least one; an import of such a line
//! reads them back, checkpoint ids aside, and blob hashes only into a store
//! that holds those blobs (see [`crate::import`]). `files`
//! is the event's `files`, or its `path`/`to_path` when `files` is empty.
//!
//! # `comma`
//! Only the `file.*` kinds exist in that shape; every other kind is
//! **skipped** and counted. `toolName`/`operation` come from the kind
//! (`file.create` -> `create_file`/`create`, `file.write` -> `write_file`/
//! `write`, `file.edit` -> `edit_file`/`edit`, `file.delete` ->
//! `delete_file`/`delete`, `file.move` -> `move_file`/`move`, `file.patch` ->
//! `apply_patch`/`patch`); an event whose `tool` is one of those six names
//! keeps it. `beforeSha256`/`afterSha256` are sha256 of the blob contents
//! (or the values an import kept in meta), omitted for creates and deletes
//! respectively; `diff` is the text of the `diff` blob truncated to
//! [`MAX_INLINE_DIFF_BYTES`], [`TRUNCATION_MARKER`] included; `agentName` is
//! `unknown` when the event names no agent; `errorKind` only when `ok` is
//! false. A `file.patch` of several files is one line per file, as the
//! shape has one `path` a line (see [`to_comma_lines`]). Fields an import
//! kept under [`META_COMMA_EXTRA`] (a line's fields the shape does not
//! define) are written back.
//!
//! Import (see [`crate::import`]) keeps whatever the event model has no field
//! for in meta under the keys above (and `_cortexide` hints), so that import
//! then export in the same shape gives the same JSON values, line for line.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::time::Duration;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use cairn_codec::json_line::write_json_line;
use cairn_codec::{BlobHash, ChainHash, CheckpointId, Event, EventKind, EventRef, Lsn, Timestamp};

use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::source::{BlobSource, Record, RecordSource};

/// Inline diffs (the `comma` shape's `diff`) are cut at 64 KiB, as the
/// reference shape specifies, so one huge patch cannot bloat an audit line.
pub const MAX_INLINE_DIFF_BYTES: usize = 64 * 1024;

/// Appended to an inline diff that was cut at [`MAX_INLINE_DIFF_BYTES`].
pub const TRUNCATION_MARKER: &str = "…(truncated)";

/// Export output is buffered and written in chunks of this size: large
/// enough that a write syscall per chunk costs nothing, small enough to stay
/// out of the way of memory.
pub const OUTPUT_CHUNK_BYTES: usize = 1 << 20;

/// How long one wait of [`follow`] blocks before it checks the stop flag:
/// the worst-case delay between asking a follower to stop and it stopping.
pub const FOLLOW_WAIT: Duration = Duration::from_millis(200);

/// Meta key (on `rollback` events) that makes the cortexide projection write
/// `snapshot:restore` instead of `rollback`.
pub const META_CORTEXIDE_ACTION: &str = "cortexideAction";
/// Meta key holding cortexide fields an import could not map to event
/// fields exactly; export writes them back verbatim.
pub const META_CORTEXIDE_HINTS: &str = "_cortexide";
/// Meta key under which the cortexide projection puts cairn-only fields.
pub const META_CAIRN: &str = "cairn";
/// Meta keys holding the comma shape's sha256 values and original timestamp text.
pub const META_BEFORE_SHA256: &str = "beforeSha256";
/// See [`META_BEFORE_SHA256`].
pub const META_AFTER_SHA256: &str = "afterSha256";
/// See [`META_BEFORE_SHA256`].
pub const META_COMMA_TIMESTAMP: &str = "commaTimestamp";
/// Meta key holding the fields of an imported comma line that the shape
/// does not define (an object, verbatim); the comma export writes them
/// back.
pub const META_COMMA_EXTRA: &str = "commaExtra";

/// An export format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// cairn's canonical JSONL (the default).
    Jsonl,
    /// The `cortexide` IDE audit shape.
    Cortexide,
    /// The `comma` file-tool audit shape.
    Comma,
}

impl Format {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Cortexide => "cortexide",
            Format::Comma => "comma",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Format> {
        match s {
            "jsonl" => Ok(Format::Jsonl),
            "cortexide" => Ok(Format::Cortexide),
            "comma" => Ok(Format::Comma),
            _ => Err(QueryError::Invalid(format!(
                "unknown format `{s}` (known: jsonl, cortexide, comma)"
            ))),
        }
    }
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Lines written (a record is more than one line only in the `comma`
    /// shape: a patch of several files).
    pub written: u64,
    /// Records written (each as one or more lines).
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Records that matched the filter but have no projection in the
    /// chosen reference shape, by kind.
    pub skipped: BTreeMap<EventKind, u64>,
    /// The last LSN looked at (0 if none).
    pub last_lsn: Lsn,
}

/// The cortexide action for `kind`, or `None` when the shape has none.
pub fn cortexide_action(kind: EventKind) -> Option<&'static str> {
    Some(match kind {
        EventKind::Prompt => "prompt",
        EventKind::Reply => "reply",
        EventKind::DiffPreview => "diff_preview",
        EventKind::Apply => "apply",
        EventKind::Undo => "undo",
        EventKind::Rollback => "rollback",
        EventKind::CheckpointCreate => "snapshot:create",
        EventKind::CheckpointDiscard => "snapshot:discard",
        EventKind::GitStash => "git:stash",
        EventKind::GitStashRestore => "git:stash:restore",
        k if k.is_file_op() => "apply",
        _ => return None,
    })
}

/// The comma `(toolName, operation)` for a `file.*` kind.
pub fn comma_tool(kind: EventKind) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        EventKind::FileCreate => ("create_file", "create"),
        EventKind::FileWrite => ("write_file", "write"),
        EventKind::FileEdit => ("edit_file", "edit"),
        EventKind::FileDelete => ("delete_file", "delete"),
        EventKind::FileMove => ("move_file", "move"),
        EventKind::FilePatch => ("apply_patch", "patch"),
        _ => return None,
    })
}

/// The fields of the comma shape (FORMATS.md).
pub const COMMA_FIELDS: [&str; 12] = [
    "timestamp",
    "sessionId",
    "agentName",
    "toolName",
    "operation",
    "path",
    "toPath",
    "beforeSha256",
    "afterSha256",
    "diff",
    "ok",
    "errorKind",
];

/// The six comma tool names.
pub const COMMA_TOOLS: [&str; 6] = [
    "create_file",
    "write_file",
    "edit_file",
    "delete_file",
    "move_file",
    "apply_patch",
];

/// Cuts `text` (on a character boundary) and appends
/// [`TRUNCATION_MARKER`] so that the whole, marker included, is at most
/// [`MAX_INLINE_DIFF_BYTES`]: a consumer that caps the field at 64 KiB
/// takes it whole. Text that fits is returned unchanged. Idempotent:
/// truncating an already truncated diff changes nothing, and so is a diff
/// cut by earlier versions (which put the marker past the limit), so
/// their exports import and export back the same.
pub fn truncate_diff(text: &str) -> String {
    if text.len() <= MAX_INLINE_DIFF_BYTES
        || (text.len() <= MAX_INLINE_DIFF_BYTES + TRUNCATION_MARKER.len()
            && text.ends_with(TRUNCATION_MARKER))
    {
        return text.to_string();
    }
    let mut cut = MAX_INLINE_DIFF_BYTES - TRUNCATION_MARKER.len();
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(cut + TRUNCATION_MARKER.len());
    out.push_str(&text[..cut]);
    out.push_str(TRUNCATION_MARKER);
    out
}

/// The lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn meta_str<'a>(e: &'a Event, key: &str) -> Option<&'a str> {
    e.meta
        .as_ref()
        .and_then(|m| m.0.get(key))
        .and_then(Value::as_str)
}

/// The cortexide line of a record: [`to_cortexide`], and for a checkpoint
/// of this store its own id (`meta.cairn.id`, like `c12`), which the
/// `target` of a later `rollback` line names.
pub fn to_cortexide_record(lsn: Lsn, e: &Event) -> Option<Value> {
    let mut v = to_cortexide(e)?;
    // An imported checkpoint record (no manifest) is no checkpoint of
    // this store: its line stays as it was imported.
    if e.kind != EventKind::CheckpointCreate || e.root.is_none() {
        return Some(v);
    }
    let id = json!(CheckpointId(lsn).to_string());
    let o = v.as_object_mut()?;
    // (An imported line's `"meta": null` stays as it was.)
    if let Value::Object(meta) = o.entry("meta").or_insert_with(|| json!({})) {
        if let Value::Object(c) = meta.entry(META_CAIRN).or_insert_with(|| json!({})) {
            c.insert("id".into(), id);
        }
    }
    Some(v)
}

/// The cortexide projection of `e`, or `None` for kinds it has no action for.
pub fn to_cortexide(e: &Event) -> Option<Value> {
    let mut action = cortexide_action(e.kind)?;
    if e.kind == EventKind::Rollback
        && meta_str(e, META_CORTEXIDE_ACTION) == Some("snapshot:restore")
    {
        action = "snapshot:restore";
    }
    let mut o = Map::new();
    o.insert("ts".into(), json!(e.ts.millis()));
    if let Some(u) = &e.user {
        o.insert("user".into(), json!(u));
    }
    o.insert("action".into(), json!(action));
    let files: Vec<&str> = if e.files.is_empty() {
        e.path
            .iter()
            .chain(e.to_path.iter())
            .map(String::as_str)
            .collect()
    } else {
        e.files.iter().map(String::as_str).collect()
    };
    // Paths outside the workspace (`/etc/passwd`, a plan file under the
    // user's home) are written as given, as the import reads them: the
    // record of an attempt round-trips byte for byte.
    if !files.is_empty() {
        o.insert("files".into(), json!(files));
    }
    if let Some(d) = e.diff_stats {
        o.insert(
            "diffStats".into(),
            json!({"linesAdded": d.lines_added, "linesRemoved": d.lines_removed, "hunks": d.hunks}),
        );
    }
    if let Some(m) = &e.model {
        o.insert("model".into(), json!(m));
    }
    if let Some(l) = e.latency_ms {
        o.insert("latencyMs".into(), json!(l));
    }
    o.insert("ok".into(), json!(e.ok));
    add_cortexide_meta(e, &mut o, cortexide_cairn_fields(e));
    Some(Value::Object(o))
}

/// The cairn-only fields of `e` a cortexide line keeps under
/// `meta.cairn`, so nothing is lost on the way to a dashboard.
fn cortexide_cairn_fields(e: &Event) -> Map<String, Value> {
    let mut extra = Map::new();
    if e.session != cairn_codec::event::DEFAULT_SESSION {
        extra.insert("session".into(), json!(e.session));
    }
    for (k, v) in [
        ("run", &e.run),
        ("phase", &e.phase),
        ("agent", &e.agent),
        ("tool", &e.tool),
        ("text", &e.text),
        ("error_kind", &e.error_kind),
        ("label", &e.label),
    ] {
        if let Some(v) = v {
            extra.insert(k.into(), json!(v));
        }
    }
    for (k, v) in [
        ("checkpoint", e.checkpoint),
        ("source", e.source),
        ("target", e.target),
    ] {
        if let Some(id) = v {
            extra.insert(k.into(), json!(id.to_string()));
        }
    }
    // Blob hashes (hex, as the canonical JSONL writes them): they name
    // contents in the exporting store (and any store holding those blobs).
    for (k, v) in [("before", e.before), ("after", e.after), ("diff", e.diff)] {
        if let Some(h) = v {
            extra.insert(k.into(), json!(h.to_hex()));
        }
    }
    if !e.files.is_empty() {
        for (k, v) in [("path", &e.path), ("to_path", &e.to_path)] {
            if let Some(v) = v {
                extra.insert(k.into(), json!(v));
            }
        }
    }
    if e.kind.is_file_op() {
        extra.insert("kind".into(), json!(e.kind.name()));
    }
    extra
}

/// Writes the `meta` of the cortexide line `o` of `e`: the event's own
/// (without what the import keeps under cairn's reserved keys) with the
/// cairn-only fields `extra`; then writes back the import's hints (the
/// fields the shape does not define, a `null` given for an optional one).
fn add_cortexide_meta(e: &Event, o: &mut Map<String, Value>, extra: Map<String, Value>) {
    let hints = e
        .meta
        .as_ref()
        .and_then(|m| m.0.get(META_CORTEXIDE_HINTS))
        .and_then(Value::as_object);
    let mut meta = e.meta.as_ref().map(|m| {
        let mut m = m.0.clone();
        m.remove(META_CORTEXIDE_HINTS);
        if e.kind == EventKind::Rollback {
            m.remove(META_CORTEXIDE_ACTION);
        }
        m
    });
    if !extra.is_empty() {
        meta.get_or_insert_with(Map::new)
            .insert(META_CAIRN.into(), Value::Object(extra));
    }
    // The import's hint for a line that had no meta (`false`) or `null`.
    let meta_hint = hints.and_then(|h| h.get("meta"));
    match meta {
        Some(m) if !(meta_hint.is_some() && m.is_empty()) => {
            o.insert("meta".into(), Value::Object(m));
        }
        _ if meta_hint == Some(&Value::Null) => {
            o.insert("meta".into(), Value::Null);
        }
        _ => {}
    }
    if let Some(h) = hints {
        for (k, v) in h {
            if k != "meta" {
                o.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The comma lines of `e`: none for kinds other than `file.*`, one per file
/// for a `file.patch` naming several, else one (see [`to_comma`]).
///
/// The shape has one `path` per line, so a patch of several files is one
/// line per file, as that product's `apply_patch` writes them. The first
/// line is [`to_comma`]'s (the event's `path`, its hashes and `toPath`);
/// each other file of `files` gets a line with the same time, session,
/// agent, tool and outcome. When the unified diff splits cleanly into one
/// section per file, each line carries its own file's section; otherwise
/// the first line carries the whole diff.
pub fn to_comma_lines(e: &Event, blobs: &dyn BlobSource) -> Result<Vec<Value>> {
    let Some(mut first) = to_comma(e, blobs)? else {
        return Ok(Vec::new());
    };
    let primary = e.path.as_deref().or(e.files.first().map(String::as_str));
    let mut others: Vec<&str> = Vec::new();
    for f in &e.files {
        if Some(f.as_str()) != primary && !others.contains(&f.as_str()) {
            others.push(f);
        }
    }
    if e.kind != EventKind::FilePatch || others.is_empty() {
        return Ok(vec![first]);
    }
    let primary = primary.unwrap_or_default();
    // Each file's own section of the diff, truncated once; `None` unless
    // the diff splits into a section for every file.
    let sections: Option<HashMap<String, Value>> = match e.diff {
        Some(d) => {
            let by_path: HashMap<String, Value> =
                split_diff(&String::from_utf8_lossy(&blobs.get(&d)?))
                    .into_iter()
                    .map(|(p, text)| (p, json!(truncate_diff(&text))))
                    .collect();
            let all = std::iter::once(primary)
                .chain(others.iter().copied())
                .all(|p| by_path.contains_key(p));
            all.then_some(by_path)
        }
        None => None,
    };
    let Value::Object(o) = &mut first else {
        return Ok(vec![first]);
    };
    if let Some(s) = &sections {
        o.insert("diff".into(), s[primary].clone());
    }
    let mut lines = Vec::with_capacity(others.len() + 1);
    for path in others {
        let mut line = Map::new();
        for (k, v) in o.iter() {
            match k.as_str() {
                "path" => line.insert(k.clone(), json!(path)),
                "toPath" | "beforeSha256" | "afterSha256" => None,
                "diff" => match &sections {
                    Some(s) => line.insert(k.clone(), s[path].clone()),
                    None => None,
                },
                _ => line.insert(k.clone(), v.clone()),
            };
        }
        lines.push(Value::Object(line));
    }
    lines.insert(0, first);
    Ok(lines)
}

/// A unified diff cut into one `(path, text)` section per file, each file
/// named by its `+++` line (its `---` line when the file was deleted), with
/// git's `a/` and `b/` prefixes removed. Empty when the text is not such a
/// diff (some lines before the first file header).
fn split_diff(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let file_name = |header: &str, prefix: &str| -> Option<String> {
        let name = header.strip_prefix(prefix)?.trim_end_matches(['\n', '\r']);
        let name = name.split('\t').next().unwrap_or(name);
        (name != "/dev/null").then(|| {
            name.strip_prefix("a/")
                .or_else(|| name.strip_prefix("b/"))
                .unwrap_or(name)
                .to_string()
        })
    };
    // Where each file's section starts, and the file's name.
    let mut starts: Vec<(usize, String)> = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        if lines[i].starts_with("--- ") && lines[i + 1].starts_with("+++ ") {
            let Some(name) =
                file_name(lines[i + 1], "+++ ").or_else(|| file_name(lines[i], "--- "))
            else {
                return Vec::new();
            };
            // A git header (`diff --git`, `index`, mode lines) belongs to
            // the section it introduces.
            let mut start = i;
            while start > starts.last().map_or(0, |s| s.0 + 1)
                && !lines[start - 1].starts_with([' ', '+', '-', '@', '\\'])
            {
                start -= 1;
            }
            starts.push((start, name));
            i += 2;
        } else {
            i += 1;
        }
    }
    if starts.first().is_none_or(|s| s.0 != 0) {
        return Vec::new();
    }
    let ends = starts.iter().skip(1).map(|s| s.0).chain([lines.len()]);
    starts
        .iter()
        .zip(ends)
        .map(|((start, name), end)| (name.clone(), lines[*start..end].concat()))
        .collect()
}

/// The comma projection of `e`, or `None` for kinds other than `file.*`.
/// Reads the `before`, `after` and `diff` blobs it needs from `blobs`.
/// A `file.patch` of several files has more lines: see [`to_comma_lines`].
pub fn to_comma(e: &Event, blobs: &dyn BlobSource) -> Result<Option<Value>> {
    let Some((default_tool, op)) = comma_tool(e.kind) else {
        return Ok(None);
    };
    let mut o = Map::new();
    let ts = match meta_str(e, META_COMMA_TIMESTAMP) {
        Some(t) if Timestamp::parse(t).ok() == Some(e.ts) => t.to_string(),
        _ => e.ts.to_iso(),
    };
    o.insert("timestamp".into(), json!(ts));
    o.insert("sessionId".into(), json!(e.session));
    o.insert(
        "agentName".into(),
        json!(e.agent.as_deref().unwrap_or("unknown")),
    );
    let tool = match e.tool.as_deref() {
        Some(t) if COMMA_TOOLS.contains(&t) => t,
        _ => default_tool,
    };
    o.insert("toolName".into(), json!(tool));
    o.insert("operation".into(), json!(op));
    // A patch may name its files only in `files`: comma's `path` is then
    // the first of them (cairn's input requires one or the other).
    let path = e.path.as_deref().or(e.files.first().map(String::as_str));
    o.insert("path".into(), json!(path.unwrap_or("")));
    if let Some(t) = &e.to_path {
        o.insert("toPath".into(), json!(t));
    }
    add_comma_hashes(e, blobs, &mut o)?;
    if let Some(d) = e.diff {
        let bytes = blobs.get(&d)?;
        o.insert(
            "diff".into(),
            json!(truncate_diff(&String::from_utf8_lossy(&bytes))),
        );
    }
    o.insert("ok".into(), json!(e.ok));
    if !e.ok {
        if let Some(k) = &e.error_kind {
            o.insert("errorKind".into(), json!(k));
        }
    }
    // The fields an import kept that the shape does not define; never one
    // of the shape's own, which come from the event.
    if let Some(Value::Object(extra)) = e.meta.as_ref().and_then(|m| m.0.get(META_COMMA_EXTRA)) {
        for (k, v) in extra {
            if !COMMA_FIELDS.contains(&k.as_str()) {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(Some(Value::Object(o)))
}

/// Writes the comma line `o`'s `beforeSha256` and `afterSha256`: as the
/// import kept them, else the SHA-256 of the contents (none before a
/// create, none after a delete).
fn add_comma_hashes(e: &Event, blobs: &dyn BlobSource, o: &mut Map<String, Value>) -> Result<()> {
    let sha = |key: &str, hash: Option<BlobHash>, omit: bool| -> Result<Option<String>> {
        if let Some(s) = meta_str(e, key) {
            return Ok(Some(s.to_string()));
        }
        match hash {
            Some(h) if !omit => Ok(Some(sha256_hex(&blobs.get(&h)?))),
            _ => Ok(None),
        }
    };
    if let Some(s) = sha(
        META_BEFORE_SHA256,
        e.before,
        e.kind == EventKind::FileCreate,
    )? {
        o.insert("beforeSha256".into(), json!(s));
    }
    if let Some(s) = sha(META_AFTER_SHA256, e.after, e.kind == EventKind::FileDelete)? {
        o.insert("afterSha256".into(), json!(s));
    }
    Ok(())
}

/// Writes records in a format, buffering output. Used by [`export`],
/// [`follow`] and the query layer's indexed export.
pub struct Exporter<'a> {
    blobs: &'a dyn BlobSource,
    format: Format,
    out: &'a mut dyn Write,
    buf: Vec<u8>,
    stats: ExportStats,
}

impl<'a> Exporter<'a> {
    /// An exporter writing `format` to `out`, reading blobs from `blobs`.
    pub fn new(blobs: &'a dyn BlobSource, format: Format, out: &'a mut dyn Write) -> Exporter<'a> {
        Exporter {
            blobs,
            format,
            out,
            buf: Vec::with_capacity(OUTPUT_CHUNK_BYTES + 64 * 1024),
            stats: ExportStats::default(),
        }
    }

    /// Projects one record (or counts it as skipped).
    pub fn write(&mut self, r: &Record) -> Result<()> {
        self.stats.last_lsn = r.lsn;
        let before = self.buf.len();
        let value = match self.format {
            Format::Jsonl => {
                write_json_line(r.lsn, r.chain, &EventRef::of(&r.event), &mut self.buf)?;
                None
            }
            Format::Cortexide => Some(to_cortexide_record(r.lsn, &r.event).into_iter().collect()),
            Format::Comma => Some(to_comma_lines(&r.event, self.blobs)?),
        };
        let mut lines = 1;
        if let Some(values) = value {
            if values.is_empty() {
                *self.stats.skipped.entry(r.event.kind).or_default() += 1;
                return Ok(());
            }
            lines = values.len() as u64;
            for v in values {
                serde_json::to_writer(&mut self.buf, &v)
                    .map_err(|e| QueryError::Output(std::io::Error::other(e)))?;
                self.buf.push(b'\n');
            }
        }
        self.stats.records += 1;
        self.stats.written += lines;
        self.stats.bytes += (self.buf.len() - before) as u64;
        if self.buf.len() >= OUTPUT_CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Projects one record given as a borrowed event (see
    /// [`Exporter::write`]): canonical JSONL is written straight from it.
    pub fn write_ref(&mut self, lsn: Lsn, chain: ChainHash, e: &EventRef<'_>) -> Result<()> {
        if self.format != Format::Jsonl {
            let event = e.to_event().map_err(|err| {
                QueryError::Invalid(format!("the record at LSN {lsn} does not decode: {err}"))
            })?;
            return self.write(&Record { lsn, chain, event });
        }
        self.stats.last_lsn = lsn;
        let before = self.buf.len();
        write_json_line(lsn, chain, e, &mut self.buf)?;
        self.stats.records += 1;
        self.stats.written += 1;
        self.stats.bytes += (self.buf.len() - before) as u64;
        if self.buf.len() >= OUTPUT_CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes out what is buffered and flushes the output.
    pub fn flush(&mut self) -> Result<()> {
        self.out.write_all(&self.buf).map_err(QueryError::Output)?;
        self.buf.clear();
        self.out.flush().map_err(QueryError::Output)
    }

    /// Records written so far (including buffered ones).
    pub fn records(&self) -> u64 {
        self.stats.records
    }

    /// Flushes and returns the statistics.
    pub fn finish(mut self) -> Result<ExportStats> {
        self.flush()?;
        Ok(self.stats)
    }
}

/// Exports every record of `src` that `filter` selects, by a scan of the
/// log (the query layer's [`crate::Query::export`] uses indexes instead).
pub fn export(
    src: &dyn RecordSource,
    blobs: &dyn BlobSource,
    filter: &Filter,
    format: Format,
    out: &mut dyn Write,
) -> Result<ExportStats> {
    let mut ex = Exporter::new(blobs, format, out);
    let limit = filter.limit.unwrap_or(usize::MAX) as u64;
    if filter.newest_first {
        let mut picked = Vec::new();
        for r in src.iter_from(Lsn::FIRST) {
            let r = r?;
            if filter.matches(&r) {
                picked.push(r);
            }
        }
        for r in picked.iter().rev() {
            if ex.records() >= limit {
                break;
            }
            ex.write(r)?;
        }
    } else {
        for r in src.iter_from(Lsn::FIRST) {
            if ex.records() >= limit {
                break;
            }
            let r = r?;
            if filter.matches(&r) {
                ex.write(&r)?;
            }
        }
    }
    ex.finish()
}

/// Calls `each` with every record from `from` on as it is committed,
/// waiting for new ones, until `stop()` is true or `each` returns false.
/// The flag passed with each record is true for the last record committed
/// so far (a good moment to flush). This is the subscription API: an
/// embedder learns of a rollback the moment it is committed. Returns the
/// last LSN delivered (or `from - 1`).
pub fn subscribe(
    src: &dyn RecordSource,
    from: Lsn,
    stop: &dyn Fn() -> bool,
    each: &mut dyn FnMut(&Record, bool) -> Result<bool>,
) -> Result<Lsn> {
    let mut next = Lsn(from.0.max(1));
    loop {
        let head = src.head()?;
        if head.last_lsn >= next {
            for r in src.iter_from(next) {
                let r = r?;
                if r.lsn > head.last_lsn {
                    break;
                }
                next = r.lsn.next();
                if !each(&r, r.lsn == head.last_lsn)? {
                    return Ok(r.lsn);
                }
            }
        }
        if stop() {
            return Ok(Lsn(next.0 - 1));
        }
        src.wait_for(Lsn(next.0 - 1), FOLLOW_WAIT)?;
    }
}

/// Exports the records `filter` selects by one pass over the log up to
/// `head`, each body decoded in place and projected without building an
/// owned event. For filters that no index narrows
/// ([`Filter::needs_index`] is false): the whole log, an LSN range, or
/// conditions checked record by record (agent, model, ok, phase).
pub fn export_scan(
    src: &dyn RecordSource,
    blobs: &dyn BlobSource,
    filter: &Filter,
    format: Format,
    head: Lsn,
    out: &mut dyn Write,
) -> Result<ExportStats> {
    let mut ex = Exporter::new(blobs, format, out);
    let limit = filter.limit.unwrap_or(usize::MAX);
    if limit == 0 {
        return ex.finish();
    }
    let Some((first, last)) = filter.lsn_bounds(head) else {
        return ex.finish();
    };
    let mut n = 0;
    src.for_each_ref(first, &mut |lsn, chain, e| {
        if lsn > last {
            return Ok(false);
        }
        if filter.lsn_in_range(lsn) && filter.matches_ref(e) {
            ex.write_ref(lsn, chain, e)?;
            n += 1;
        }
        Ok(n < limit)
    })?;
    ex.finish()
}

/// Like `tail -f`: exports the records `filter` selects from `from` on, then
/// keeps exporting new ones as they are committed, flushing after each batch,
/// until `stop()` returns true (checked at least every [`FOLLOW_WAIT`]) or
/// the filter's limit is reached. `newest_first` makes no sense here and is
/// ignored.
pub fn follow(
    src: &dyn RecordSource,
    blobs: &dyn BlobSource,
    filter: &Filter,
    format: Format,
    from: Lsn,
    out: &mut dyn Write,
    stop: &dyn Fn() -> bool,
) -> Result<ExportStats> {
    let mut ex = Exporter::new(blobs, format, out);
    let limit = filter.limit.unwrap_or(usize::MAX) as u64;
    subscribe(src, from, stop, &mut |r, last| {
        if filter.matches(r) {
            ex.write(r)?;
        }
        let more = ex.records() < limit;
        if last || !more {
            ex.flush()?;
        }
        Ok(more)
    })?;
    ex.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::source::{MemBlobs, MemLog};

    #[test]
    fn formats_parse() {
        for f in [Format::Jsonl, Format::Cortexide, Format::Comma] {
            assert_eq!(f.name().parse::<Format>().unwrap(), f);
        }
        let e = "csv".parse::<Format>().unwrap_err().to_string();
        assert!(e.contains("unknown format `csv`"), "{e}");
    }

    #[test]
    fn truncation_is_bounded_and_idempotent() {
        assert_eq!(truncate_diff("abc"), "abc");
        let long = "é".repeat(MAX_INLINE_DIFF_BYTES);
        let t = truncate_diff(&long);
        assert!(t.ends_with(TRUNCATION_MARKER));
        // Marker included, within the limit (trial 13 N12), and within one
        // character of it.
        assert!(t.len() <= MAX_INLINE_DIFF_BYTES, "{}", t.len());
        assert!(t.len() > MAX_INLINE_DIFF_BYTES - 'é'.len_utf8());
        assert_eq!(truncate_diff(&t), t);
        // A diff cut the earlier way (the marker past the limit) is kept.
        let earlier = format!("{}{TRUNCATION_MARKER}", "x".repeat(MAX_INLINE_DIFF_BYTES));
        assert_eq!(truncate_diff(&earlier), earlier);
    }

    #[test]
    fn sha256_known_value() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn every_kind_has_a_cortexide_decision() {
        for k in EventKind::ALL {
            let e = Event::new(k, "s");
            let p = to_cortexide(&e);
            let skipped = matches!(k, EventKind::ToolCall | EventKind::Custom);
            assert_eq!(p.is_none(), skipped, "{k}");
        }
    }

    #[test]
    fn comma_projection_of_a_write() {
        let blobs = MemBlobs::new();
        let mut e = Event::new(EventKind::FileWrite, "s").with_path("a.txt");
        e.before = Some(blobs.put(b"old"));
        e.after = Some(blobs.put(b"new"));
        e.diff = Some(blobs.put(b"-old\n+new\n"));
        e.ok = false;
        e.error_kind = Some("EACCES".into());
        e.ts = Timestamp(1_700_000_000_123);
        let v = to_comma(&e, &blobs).unwrap().unwrap();
        assert_eq!(
            v,
            json!({
                "timestamp": "2023-11-14T22:13:20.123Z", "sessionId": "s", "agentName": "unknown",
                "toolName": "write_file", "operation": "write", "path": "a.txt",
                "beforeSha256": sha256_hex(b"old"), "afterSha256": sha256_hex(b"new"),
                "diff": "-old\n+new\n", "ok": false, "errorKind": "EACCES"
            })
        );
        assert!(to_comma(&Event::new(EventKind::Prompt, "s"), &blobs)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_patch_of_several_files_is_a_comma_line_per_file() {
        let blobs = MemBlobs::new();
        let diff = "diff --git a/src/a.rs b/src/a.rs\nindex 1..2 100644\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1 +1 @@\n-a\n+A\n\
                    --- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n\
                    diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+n\n";
        let mut e = Event::new(EventKind::FilePatch, "s");
        e.files = vec![
            "src/a.rs".into(),
            "gone.txt".into(),
            "new.txt".into(),
            "src/a.rs".into(),
        ];
        e.diff = Some(blobs.put(diff.as_bytes()));
        e.agent = Some("bot".into());
        let lines = to_comma_lines(&e, &blobs).unwrap();
        let paths: Vec<&str> = lines.iter().map(|l| l["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["src/a.rs", "gone.txt", "new.txt"]);
        assert_eq!(
            lines[0]["diff"],
            "diff --git a/src/a.rs b/src/a.rs\nindex 1..2 100644\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1 +1 @@\n-a\n+A\n"
        );
        assert_eq!(
            lines[1]["diff"],
            "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
        );
        assert!(lines[2]["diff"]
            .as_str()
            .unwrap()
            .starts_with("diff --git a/new.txt"));
        let joined: String = lines.iter().map(|l| l["diff"].as_str().unwrap()).collect();
        assert_eq!(joined, diff);
        for l in &lines {
            assert_eq!(l["agentName"], "bot");
            assert_eq!(l["operation"], "patch");
        }

        // A diff that does not split by file stays whole on the first line.
        e.diff = Some(blobs.put(b"@@ -1 +1 @@\n-a\n+A\n"));
        let lines = to_comma_lines(&e, &blobs).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["diff"], "@@ -1 +1 @@\n-a\n+A\n");
        assert!(lines[1].get("diff").is_none() && lines[2].get("diff").is_none());

        // The export counts the record once and writes its three lines.
        let log = MemLog::new();
        log.append(e.clone()).unwrap();
        log.append(Event::new(EventKind::FileWrite, "s").with_path("p"))
            .unwrap();
        let mut out = Vec::new();
        let f = Filter {
            limit: Some(1),
            ..Filter::all()
        };
        let st = export(&log, &blobs, &f, Format::Comma, &mut out).unwrap();
        assert_eq!((st.records, st.written), (1, 3));
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 3);

        // One file, or a kind other than a patch: one line, as before.
        e.files.truncate(1);
        assert_eq!(to_comma_lines(&e, &blobs).unwrap().len(), 1);
        assert!(to_comma_lines(&Event::new(EventKind::Reply, "s"), &blobs)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn export_counts_skips_and_respects_limit() {
        let log = MemLog::new();
        let blobs = MemBlobs::new();
        for k in EventKind::ALL {
            log.append(Event::new(k, "s").with_path("p")).unwrap();
        }
        let mut out = Vec::new();
        let st = export(&log, &blobs, &Filter::all(), Format::Comma, &mut out).unwrap();
        assert_eq!(st.written, 6);
        assert_eq!(st.skipped.values().sum::<u64>(), 12);
        assert_eq!(String::from_utf8(out).unwrap().lines().count(), 6);
        let mut out = Vec::new();
        let f = Filter {
            limit: Some(2),
            newest_first: true,
            ..Filter::all()
        };
        let st = export(&log, &blobs, &f, Format::Jsonl, &mut out).unwrap();
        assert_eq!(st.written, 2);
        let text = String::from_utf8(out).unwrap();
        let lsns: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["lsn"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(lsns, vec![18, 17]);
    }
}
