//! Import: reads the reference shapes of FORMATS.md (and cairn's own
//! canonical JSONL) back into events. Parsing only: the caller appends the
//! events and puts the blobs they reference.
//!
//! Whatever a shape carries that the event model has no field for is kept in
//! the event's meta (see the key constants in [`crate::export`]), so import
//! then export in the same shape gives the same JSON values, line for line.
//! A line that does not fit the shape is an error naming the file, line and
//! reason; nothing from it is returned.

use std::borrow::Cow;
use std::fmt;
use std::io::{BufRead, Read};

use serde_json::{Map, Value};

use cairn_codec::event::Meta;
use cairn_codec::json::{line_error, parse_event, UniqueKeys, MAX_JSON_LINE_BYTES};
use cairn_codec::{BlobHash, DiffStats, Event, EventKind, Timestamp};

use crate::export::{
    to_cortexide, Format, COMMA_FIELDS, COMMA_TOOLS, META_AFTER_SHA256, META_BEFORE_SHA256,
    META_CAIRN, META_COMMA_EXTRA, META_COMMA_TIMESTAMP, META_CORTEXIDE_ACTION,
    META_CORTEXIDE_HINTS,
};

/// A line that could not be imported: where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    /// The file name as given by the caller.
    pub file: String,
    /// The 1-based line number.
    pub line: u64,
    /// What was wrong.
    pub reason: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.reason)
    }
}

impl std::error::Error for ImportError {}

/// One imported line: the event and the blobs it references (a comma
/// `diff` becomes a blob), which the caller must put before appending.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// The event.
    pub event: Event,
    /// Blob contents the event references (by `BlobHash::of`).
    pub blobs: Vec<Vec<u8>>,
    /// The line of the input it came from, counted from 1 ([`import_lines`]
    /// sets it; 0 from [`parse_line`], which sees one line alone).
    pub line: u64,
    /// For a cortexide line whose `meta.cairn` names blobs (`before`,
    /// `after`, `diff`, read back into `event`): the event with that
    /// `meta.cairn` kept whole instead and no blob named, for a store that
    /// does not hold those blobs. The shape refers to no blob, so its lines
    /// import into any store; only one holding the blobs (the exporting
    /// store, or a copy) gets them back as the event's fields.
    pub without_blobs: Option<Box<Event>>,
}

impl Imported {
    /// Settles [`Imported::without_blobs`]: when `has_blob` lacks any blob
    /// the event names, the event becomes the one without blobs.
    pub fn settle_blobs(&mut self, has_blob: impl Fn(&BlobHash) -> bool) {
        if let Some(plain) = self.without_blobs.take() {
            let e = &self.event;
            if [e.before, e.after, e.diff]
                .into_iter()
                .flatten()
                .any(|h| !has_blob(&h))
            {
                self.event = *plain;
            }
        }
    }
}

/// Reads one line of at most `max` bytes (without the newline). Returns
/// `Ok(None)` at end of input, `Ok(Some(Err(len)))` for an over-long line
/// (which is consumed up to its newline).
pub fn read_bounded_line<R: BufRead>(
    r: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Result<(), usize>>> {
    Ok(read_line_ended(r, max, buf)?.map(|got| got.map(|_ended| ())))
}

/// [`read_bounded_line`], saying of a line read whether a newline ended it
/// (`false`: the last line of the input, without one).
fn read_line_ended<R: BufRead>(
    r: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Result<bool, usize>>> {
    buf.clear();
    let n = r.by_ref().take(max as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        return Ok(Some(Ok(true)));
    }
    if buf.len() <= max {
        return Ok(Some(Ok(false))); // last line without a newline
    }
    // Too long: skip the rest of this line.
    let mut skipped = buf.len();
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                skipped += i;
                r.consume(i + 1);
                break;
            }
            None => {
                let l = chunk.len();
                skipped += l;
                r.consume(l);
            }
        }
    }
    Ok(Some(Err(skipped)))
}

/// The lines of a reader in one format, parsed one at a time (see
/// [`lines`]): memory stays bounded by the longest line
/// ([`MAX_JSON_LINE_BYTES`]), whatever the input's size.
pub struct Lines<R> {
    format: Format,
    reader: R,
    file: String,
    line: u64,
    bytes: u64,
    buf: Vec<u8>,
    /// Whether a newline ended the last line read.
    ended: bool,
}

impl<R> Lines<R> {
    /// The number of the last line read, from 1 (0 before the first).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Bytes read so far (newlines included).
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// The reader the lines come from.
    pub fn get_ref(&self) -> &R {
        &self.reader
    }

    /// The reader the lines come from, to change how it reads on (reading
    /// from it directly skips the lines read so).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.reader
    }

    /// The bytes of the last line read, without its line end (`\n` or
    /// `\r\n`), as in the input (a byte-order mark included).
    pub fn line_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Whether the last line read is a torn tail: the input ends in it
    /// without a line end, and it stops part way through a line (its
    /// JSON, or a UTF-8 character, is cut short), as the last line of a
    /// JSONL file does when its writer stopped (crashed) while writing
    /// it. Such a line may be completed later; a line with a line end, or
    /// whose JSON is whole, is never torn (if bad, it is bad).
    pub fn torn(&self) -> bool {
        !self.ended && cut_short(&self.buf)
    }
}

/// Whether `line` is the start of a longer line: it ends part way through
/// a UTF-8 character, or its JSON part way through a value.
fn cut_short(line: &[u8]) -> bool {
    match std::str::from_utf8(line) {
        // (`error_len` is None when the bytes end inside a character.)
        Err(e) => e.error_len().is_none(),
        Ok(text) => serde_json::from_str::<serde::de::IgnoredAny>(without_bom(text))
            .is_err_and(|e| e.is_eof()),
    }
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = Result<Imported, ImportError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let got = read_line_ended(&mut self.reader, MAX_JSON_LINE_BYTES, &mut self.buf);
            self.line += 1;
            let err = |reason: String| ImportError {
                file: self.file.clone(),
                line: self.line,
                reason,
            };
            let outcome = match got {
                Err(e) => Err(err(format!("cannot read: {e}"))),
                Ok(None) => return None,
                Ok(Some(Err(len))) => {
                    self.ended = true;
                    self.bytes += len as u64 + 1;
                    Err(err(format!(
                        "line is {len} bytes, more than the {MAX_JSON_LINE_BYTES} allowed"
                    )))
                }
                Ok(Some(Ok(ended))) => {
                    self.ended = ended;
                    self.bytes += self.buf.len() as u64 + 1;
                    match std::str::from_utf8(&self.buf) {
                        Err(e) => Err(err(format!("not UTF-8: {e}"))),
                        Ok(text) if without_bom(text).trim().is_empty() => continue,
                        Ok(text) => parse_line(self.format, text).map_err(err).map(|mut i| {
                            i.line = self.line;
                            i
                        }),
                    }
                }
            };
            return Some(outcome);
        }
    }
}

/// The lines of `reader` in `format`, parsed as they are read. Blank lines
/// are skipped; a bad line is an error naming `file_name`, the line number
/// and the reason (iteration may go on past it).
pub fn lines<R: BufRead>(format: Format, reader: R, file_name: &str) -> Lines<R> {
    Lines {
        format,
        reader,
        file: file_name.to_string(),
        line: 0,
        bytes: 0,
        buf: Vec::new(),
        ended: true,
    }
}

/// Reads every line of `reader` in `format` into memory (see [`lines`]).
/// The first bad line stops the import with an error naming `file_name`,
/// the line number and the reason; nothing is returned in that case.
pub fn import_lines(
    format: Format,
    reader: impl BufRead,
    file_name: &str,
) -> Result<Vec<Imported>, ImportError> {
    lines(format, reader, file_name).collect()
}

/// Parses one line in `format`; the error is the reason. A byte-order mark
/// before the line (as some Windows tools write at the start of a file) is
/// ignored, as `cairn record` ignores it.
pub fn parse_line(format: Format, line: &str) -> Result<Imported, String> {
    let line = without_bom(line);
    match format {
        Format::Jsonl => parse_event(line)
            .map(|event| Imported {
                event,
                blobs: Vec::new(),
                line: 0,
                without_blobs: None,
            })
            .map_err(|e| e.to_string()),
        Format::Cortexide => checked(parse_cortexide(&object(line)?)),
        Format::Comma => checked(parse_comma(&object(line)?)),
    }
}

/// `line` without the UTF-8 byte-order mark it may begin with.
fn without_bom(line: &str) -> &str {
    line.strip_prefix('\u{feff}').unwrap_or(line)
}

/// A foreign line's event, if its paths are as cairn's own input requires
/// (workspace-relative; a file event names its file).
fn checked(imported: Result<Imported, String>) -> Result<Imported, String> {
    let mut imported = imported?;
    imported.event.normalize_paths();
    imported.event.check_paths().map_err(|e| e.to_string())?;
    Ok(imported)
}

/// The line as a JSON object. A key named twice in any object of it is
/// refused, naming the key: serde_json would keep the last value silently,
/// and which one the producer meant is anyone's guess.
fn object(line: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<UniqueKeys>(line) {
        Ok(UniqueKeys(Value::Object(o))) => Ok(o),
        Ok(UniqueKeys(other)) => Err(format!("expected a JSON object, got {}", type_name(&other))),
        // A duplicate key (well-formed JSON that `UniqueKeys` refused), or
        // a line that is not JSON, which `line_error` calls invalid JSON.
        Err(e) => Err(line_error(&e)),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn req<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a Value, String> {
    o.get(k).ok_or_else(|| format!("missing field `{k}`"))
}

fn string(o: &Map<String, Value>, k: &str) -> Result<Option<String>, String> {
    match o.get(k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(format!(
            "field `{k}` must be a string, got {}",
            type_name(v)
        )),
    }
}

fn req_string(o: &Map<String, Value>, k: &str) -> Result<String, String> {
    req(o, k)?;
    string(o, k).map(|s| s.unwrap_or_default())
}

fn boolean(o: &Map<String, Value>, k: &str) -> Result<bool, String> {
    match req(o, k)? {
        Value::Bool(b) => Ok(*b),
        v => Err(format!(
            "field `{k}` must be a boolean, got {}",
            type_name(v)
        )),
    }
}

/// Whether a JSON number is below zero.
fn negative(n: &serde_json::Number) -> bool {
    n.as_f64().is_some_and(|f| f < 0.0)
}

/// The cortexide fields that may be absent (or `null`).
const CORTEXIDE_OPTIONAL: [&str; 6] = ["user", "files", "diffStats", "model", "latencyMs", "meta"];

const CORTEXIDE_FIELDS: [&str; 9] = [
    "ts",
    "user",
    "action",
    "files",
    "diffStats",
    "model",
    "latencyMs",
    "ok",
    "meta",
];

fn cortexide_kind(action: &str) -> Option<EventKind> {
    Some(match action {
        "prompt" => EventKind::Prompt,
        "reply" => EventKind::Reply,
        "diff_preview" => EventKind::DiffPreview,
        "apply" => EventKind::Apply,
        "undo" => EventKind::Undo,
        "rollback" | "snapshot:restore" => EventKind::Rollback,
        "snapshot:create" => EventKind::CheckpointCreate,
        "snapshot:discard" => EventKind::CheckpointDiscard,
        "git:stash" => EventKind::GitStash,
        "git:stash:restore" => EventKind::GitStashRestore,
        _ => return None,
    })
}

fn parse_cortexide(o: &Map<String, Value>) -> Result<Imported, String> {
    let (mut hints, o) = cortexide_hints(o);
    let o = o.as_ref();
    let ts = cortexide_ts(o)?;
    let action = req_string(o, "action")?;
    let kind = cortexide_kind(&action).ok_or_else(|| {
        format!("unknown action `{action}` (known: prompt, reply, diff_preview, apply, undo, rollback, snapshot:create, snapshot:restore, snapshot:discard, git:stash, git:stash:restore)")
    })?;
    let mut e = Event::new(kind, cairn_codec::event::DEFAULT_SESSION);
    e.ts = ts;
    e.ok = boolean(o, "ok")?;
    e.user = string(o, "user")?;
    e.model = string(o, "model")?;
    cortexide_files(o, &mut e, &mut hints)?;
    cortexide_diff_stats(o, &mut e, &mut hints)?;
    cortexide_latency(o, &mut e, &mut hints)?;
    e.meta = cortexide_meta(o, kind, &action, hints)?.map(Meta);
    // In normal form before `meta.cairn` is read back, whose check wants
    // it: `src//a.rs` kept a line's cairn fields from being read back,
    // until its re-export (with `src/a.rs`) imported differently.
    e.normalize_paths();
    let plain = e.clone();
    restore_cairn_fields(&mut e);
    let names_blobs = e.before.is_some() || e.after.is_some() || e.diff.is_some();
    Ok(Imported {
        event: e,
        blobs: Vec::new(),
        line: 0,
        without_blobs: names_blobs.then(|| Box::new(plain)),
    })
}

/// The hints a cortexide line starts with, and the line to read the
/// fields from. A field the shape does not define (a newer version of the
/// product may write more) is kept verbatim in the hints, which the
/// export writes back: refusing it would refuse the whole file, dropping
/// it would lose what the producer wrote. An optional field given as
/// `null` is absent; a hint writes the `null` back on export. (The line
/// is copied only when it has one.)
fn cortexide_hints(o: &Map<String, Value>) -> (Map<String, Value>, Cow<'_, Map<String, Value>>) {
    let mut hints: Map<String, Value> = o
        .iter()
        .filter(|(k, _)| !CORTEXIDE_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let nulls: Vec<&str> = CORTEXIDE_OPTIONAL
        .into_iter()
        .filter(|k| o.get(*k) == Some(&Value::Null))
        .collect();
    if nulls.is_empty() {
        return (hints, Cow::Borrowed(o));
    }
    let mut m = o.clone();
    for k in nulls {
        m.remove(k);
        hints.insert(k.to_string(), Value::Null);
    }
    (hints, Cow::Owned(m))
}

/// The line's `ts`: whole epoch milliseconds.
fn cortexide_ts(o: &Map<String, Value>) -> Result<Timestamp, String> {
    match req(o, "ts")? {
        Value::Number(n) => match cairn_codec::json::whole_millis(n) {
            // A negative one is before 1970: odd for an agent's event, but
            // a time cairn holds (years 0001..=9999) and exports as such,
            // so its own export of it imports.
            Some(ms) => Timestamp::from_millis(ms).map_err(|e| format!("field `ts`: {e}")),
            None => Err(format!(
                "field `ts` must be whole epoch milliseconds, got {n}"
            )),
        },
        v => Err(format!("field `ts` must be a number, got {}", type_name(v))),
    }
}

/// Reads the line's `files` into `e`; an empty list is kept as a hint.
fn cortexide_files(
    o: &Map<String, Value>,
    e: &mut Event,
    hints: &mut Map<String, Value>,
) -> Result<(), String> {
    match o.get("files") {
        None => {}
        Some(Value::Array(a)) => {
            for f in a {
                match f {
                    // Kept as given, outside the workspace too (an
                    // attempt on `/etc/passwd` is history only); the
                    // event's own check refuses what names no file.
                    Value::String(s) => e.files.push(s.clone()),
                    v => {
                        return Err(format!(
                            "field `files` must hold strings, got {}",
                            type_name(v)
                        ))
                    }
                }
            }
            if a.is_empty() {
                hints.insert("files".into(), Value::Array(Vec::new()));
            }
        }
        Some(v) => {
            return Err(format!(
                "field `files` must be an array, got {}",
                type_name(v)
            ))
        }
    }
    Ok(())
}

/// Reads the line's `diffStats` into `e`; what the event model cannot
/// hold exactly is kept as a hint.
fn cortexide_diff_stats(
    o: &Map<String, Value>,
    e: &mut Event,
    hints: &mut Map<String, Value>,
) -> Result<(), String> {
    let (v, d) = match o.get("diffStats") {
        None => return Ok(()),
        Some(v @ Value::Object(d)) => (v, d),
        Some(v) => {
            return Err(format!(
                "field `diffStats` must be an object, got {}",
                type_name(v)
            ))
        }
    };
    for k in ["linesAdded", "linesRemoved", "hunks"] {
        match d.get(k) {
            None => {}
            Some(Value::Number(n)) if !negative(n) => {}
            Some(Value::Number(n)) => {
                return Err(format!(
                    "field `diffStats.{k}` is a count, not negative: got {n}"
                ))
            }
            Some(v) => {
                return Err(format!(
                    "field `diffStats.{k}` must be a number, got {}",
                    type_name(v)
                ))
            }
        }
    }
    let n = |k: &str| d.get(k).and_then(Value::as_u64);
    match (n("linesAdded"), n("linesRemoved"), n("hunks")) {
        (Some(a), Some(r), Some(h)) if d.len() == 3 => {
            e.diff_stats = Some(DiffStats {
                lines_added: a,
                lines_removed: r,
                hunks: h,
            })
        }
        // Kept verbatim: the shape's producer wrote something the
        // event model cannot hold exactly (a float, an extra key).
        _ => {
            hints.insert("diffStats".into(), v.clone());
        }
    }
    Ok(())
}

/// Reads the line's `latencyMs` into `e`, as `cairn record` reads
/// `latency_ms`: a fraction is rounded to whole milliseconds, a negative
/// or too large number refused.
fn cortexide_latency(
    o: &Map<String, Value>,
    e: &mut Event,
    hints: &mut Map<String, Value>,
) -> Result<(), String> {
    match o.get("latencyMs") {
        None => {}
        Some(v @ Value::Number(n)) => {
            e.latency_ms = Some(cairn_codec::json::latency_ms("latencyMs", n)?);
            // A fraction of a millisecond (JavaScript's performance.now()
            // gives them) is also kept verbatim, so it exports back as it was.
            if n.as_u64().is_none() {
                hints.insert("latencyMs".into(), v.clone());
            }
        }
        Some(v) => {
            return Err(format!(
                "field `latencyMs` must be a number, got {}",
                type_name(v)
            ))
        }
    }
    Ok(())
}

/// The event's `meta`: the line's, with the action (for a
/// `snapshot:restore`) and the hints under cairn's reserved keys, which
/// the line itself may not use.
fn cortexide_meta(
    o: &Map<String, Value>,
    kind: EventKind,
    action: &str,
    mut hints: Map<String, Value>,
) -> Result<Option<Map<String, Value>>, String> {
    let mut meta = match o.get("meta") {
        None => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(v) => {
            return Err(format!(
                "field `meta` must be an object, got {}",
                type_name(v)
            ))
        }
    };
    if let Some(m) = &meta {
        if m.contains_key(META_CORTEXIDE_HINTS) {
            return Err(format!(
                "meta key `{META_CORTEXIDE_HINTS}` is reserved by cairn"
            ));
        }
        if kind == EventKind::Rollback && m.contains_key(META_CORTEXIDE_ACTION) {
            return Err(format!(
                "meta key `{META_CORTEXIDE_ACTION}` is reserved by cairn on rollback actions"
            ));
        }
    }
    if action == "snapshot:restore" {
        if meta.is_none() {
            hints.entry("meta").or_insert(Value::Bool(false));
        }
        meta.get_or_insert_with(Map::new).insert(
            META_CORTEXIDE_ACTION.into(),
            Value::String(action.to_string()),
        );
    }
    if !hints.is_empty() {
        if meta.is_none() {
            hints.entry("meta").or_insert(Value::Bool(false));
        }
        meta.get_or_insert_with(Map::new)
            .insert(META_CORTEXIDE_HINTS.into(), Value::Object(hints));
    }
    Ok(meta)
}

/// cairn's own cortexide export keeps what the shape has no place for
/// under `meta.cairn` (see [`crate::export`]): an import reads it back into
/// the event's fields, so a store exported to cortexide and imported
/// elsewhere keeps its sessions, kinds, texts and labels. Only when every
/// key is one the export writes, with a value of the right type, and the
/// event read back exports to exactly the same line; otherwise
/// `meta.cairn` stays as it is (another producer's data). Blob hashes
/// (`before`, `after`, `diff`) are read back, and
/// [`Imported::without_blobs`] keeps the line as it was for a store that
/// lacks those blobs. Checkpoint ids (`checkpoint`, `source`, `target`,
/// and a checkpoint's own `id`) are never read back: they are LSNs of the
/// exporting store, and would name other records in this one; a line that
/// has them keeps its `meta.cairn` whole.
fn restore_cairn_fields(e: &mut Event) {
    let Some(Value::Object(c)) = e.meta.as_ref().and_then(|m| m.0.get(META_CAIRN)) else {
        return;
    };
    let mut r = e.clone();
    for (k, v) in c {
        // Paths that lie outside the workspace (a prompt's, a tool call's)
        // are written here instead of the shape's `files`.
        if k == "files" {
            let Value::Array(a) = v else { return };
            let Some(files) = a.iter().map(|f| f.as_str().map(String::from)).collect() else {
                return;
            };
            r.files = files;
            continue;
        }
        let Value::String(s) = v else { return };
        let text = Some(s.clone());
        match k.as_str() {
            "session" if !s.is_empty() => r.session = s.clone(),
            "run" => r.run = text,
            "phase" => r.phase = text,
            "agent" => r.agent = text,
            "tool" => r.tool = text,
            "text" => r.text = text,
            "error_kind" => r.error_kind = text,
            "path" => r.path = text,
            "to_path" => r.to_path = text,
            "label" => r.label = text,
            // Blob hashes in hex; one in another spelling (upper case)
            // would not export back to the same line, and stays.
            "before" | "after" | "diff" => {
                let Ok(h) = BlobHash::from_hex(s) else { return };
                match k.as_str() {
                    "before" => r.before = Some(h),
                    "after" => r.after = Some(h),
                    _ => r.diff = Some(h),
                }
            }
            "kind" => match s.parse::<EventKind>() {
                Ok(k) if k.is_file_op() && r.kind == EventKind::Apply => r.kind = k,
                _ => return,
            },
            _ => return,
        }
    }
    // The export lists a file event's path (and destination) as its files
    // when it had none.
    if r.kind.is_file_op() && r.path.is_none() && r.to_path.is_none() {
        match r.files.as_slice() {
            [p] => r.path = Some(p.clone()),
            [p, t] => (r.path, r.to_path) = (Some(p.clone()), Some(t.clone())),
            _ => return,
        }
        r.files.clear();
    }
    if let Some(m) = &mut r.meta {
        m.0.remove(META_CAIRN);
        if m.0.is_empty() {
            r.meta = None;
        }
    }
    if r.check_paths().is_ok() && to_cortexide(&r) == to_cortexide(e) {
        *e = r;
    }
}

fn comma_kind(op: &str) -> Option<EventKind> {
    Some(match op {
        "create" => EventKind::FileCreate,
        "write" => EventKind::FileWrite,
        "edit" => EventKind::FileEdit,
        "delete" => EventKind::FileDelete,
        "move" => EventKind::FileMove,
        "patch" => EventKind::FilePatch,
        _ => return None,
    })
}

/// The line's `toolName`. The tool is not tied to the operation:
/// FORMATS.md lists the two independently (the shape would not need both
/// if it were), a `write_file` of a new file is a create, an
/// `apply_patch` may move a file, and cairn's own export keeps an event's
/// tool whatever its kind. So any of the six tools goes with any
/// operation.
fn comma_tool(o: &Map<String, Value>) -> Result<String, String> {
    let tool = req_string(o, "toolName")?;
    if !COMMA_TOOLS.contains(&tool.as_str()) {
        return Err(format!(
            "unknown toolName `{tool}` (known: {})",
            COMMA_TOOLS.join(", ")
        ));
    }
    Ok(tool)
}

/// The event's `meta` for a comma line: the fields the shape does not
/// define (`extra`), the timestamp as written when it is not in normal
/// form, and the contents' hashes.
fn comma_meta(
    o: &Map<String, Value>,
    extra: Map<String, Value>,
    ts: Timestamp,
    ts_text: String,
) -> Result<Map<String, Value>, String> {
    let mut meta = Map::new();
    if !extra.is_empty() {
        meta.insert(META_COMMA_EXTRA.into(), Value::Object(extra));
    }
    if ts.to_iso() != ts_text {
        meta.insert(META_COMMA_TIMESTAMP.into(), Value::String(ts_text));
    }
    for (field, key) in [
        ("beforeSha256", META_BEFORE_SHA256),
        ("afterSha256", META_AFTER_SHA256),
    ] {
        if let Some(s) = string(o, field)? {
            if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("field `{field}` must be 64 hex digits, got `{s}`"));
            }
            meta.insert(key.into(), Value::String(s));
        }
    }
    Ok(meta)
}

fn parse_comma(o: &Map<String, Value>) -> Result<Imported, String> {
    // A field the shape does not define is kept verbatim in meta (the
    // shape has no meta of its own), and the export writes it back: see
    // the note on the cortexide hints.
    let extra: Map<String, Value> = o
        .iter()
        .filter(|(k, _)| !COMMA_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let ts_text = req_string(o, "timestamp")?;
    let ts = Timestamp::parse(&ts_text).map_err(|e| format!("field `timestamp`: {e}"))?;
    let session = req_string(o, "sessionId")?;
    if session.is_empty() {
        return Err(
            "field `sessionId` must not be empty (the shape writes `default` when there is none)"
                .into(),
        );
    }
    let op = req_string(o, "operation")?;
    let kind = comma_kind(&op).ok_or_else(|| {
        format!("unknown operation `{op}` (known: create, write, edit, delete, move, patch)")
    })?;
    let tool = comma_tool(o)?;
    let mut e = Event::new(kind, session);
    e.ts = ts;
    e.agent = Some(req_string(o, "agentName")?);
    e.tool = Some(tool);
    e.path = Some(req_string(o, "path")?);
    e.to_path = string(o, "toPath")?;
    if kind == EventKind::FileMove && e.to_path.is_none() {
        return Err(
            "missing field `toPath`: a `move` operation names its destination (the shape's `path` is the source)"
                .into(),
        );
    }
    e.ok = boolean(o, "ok")?;
    e.error_kind = string(o, "errorKind")?;
    if e.ok && e.error_kind.is_some() {
        return Err("field `errorKind` is only allowed when `ok` is false".into());
    }
    let meta = comma_meta(o, extra, ts, ts_text)?;
    let mut blobs = Vec::new();
    if let Some(d) = string(o, "diff")? {
        e.diff = Some(BlobHash::of(d.as_bytes()));
        blobs.push(d.into_bytes());
    }
    if !meta.is_empty() {
        e.meta = Some(Meta(meta));
    }
    Ok(Imported {
        event: e,
        blobs,
        line: 0,
        without_blobs: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines() {
        let data = b"short\nthis line is too long\nok\r\nlast";
        let mut r = std::io::BufReader::with_capacity(4, &data[..]);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(l) = read_bounded_line(&mut r, 8, &mut buf).unwrap() {
            out.push(l.map(|()| String::from_utf8(buf.clone()).unwrap()));
        }
        assert_eq!(
            out,
            vec![
                Ok("short".into()),
                Err(21),
                Ok("ok".into()),
                Ok("last".into())
            ]
        );
    }

    #[test]
    fn only_a_last_line_without_a_line_end_cut_short_is_torn() {
        let whole = r#"{"ts":1,"action":"prompt","ok":true}"#;
        // The last line, as a writer that stopped at each byte left it.
        let line = "{\"ts\":1,\"action\":\"prompt\",\"ok\":true,\"user\":\"ĉu\"}";
        for cut in 1..line.len() {
            let mut input = format!("{whole}\n").into_bytes();
            input.extend_from_slice(&line.as_bytes()[..cut]);
            let mut lines = lines(Format::Cortexide, &input[..], "t.jsonl");
            assert!(lines.next().unwrap().is_ok());
            assert!(!lines.torn());
            let last = lines.next().unwrap();
            assert_eq!((last.is_err(), lines.torn()), (true, true), "{cut}");
            assert!(lines.next().is_none());
        }
        // Whole JSON without a line end is a line; with one, a bad line is
        // bad, not torn; so is whole JSON that is not a good line.
        for (input, ok, torn) in [
            (format!("{whole}\n{whole}"), true, false),
            (format!("{whole}\n{{\"ts\":1,\"act\n"), false, false),
            (
                format!("{whole}\n{{\"ts\":1,\"action\":\"zap\",\"ok\":true}}"),
                false,
                false,
            ),
            (format!("{whole}\n\u{feff}{{\"ts\""), false, true),
        ] {
            let mut lines = lines(Format::Cortexide, input.as_bytes(), "t.jsonl");
            assert!(lines.next().unwrap().is_ok());
            let last = lines.next().unwrap();
            assert_eq!((last.is_ok(), lines.torn()), (ok, torn), "{input}");
        }
    }

    #[test]
    fn bad_lines_name_file_line_and_reason() {
        let input = "{\"ts\":1,\"action\":\"prompt\",\"ok\":true}\n\n{\"ts\":1,\"action\":\"dance\",\"ok\":true}\n";
        let e = import_lines(Format::Cortexide, input.as_bytes(), "audit.jsonl").unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(e.file, "audit.jsonl");
        assert!(
            e.to_string()
                .starts_with("audit.jsonl:3: unknown action `dance`"),
            "{e}"
        );
    }

    #[test]
    fn cortexide_reasons() {
        let cases = [
            ("[1]", "expected a JSON object"),
            ("{", "invalid JSON"),
            (r#"{"action":"prompt","ok":true}"#, "missing field `ts`"),
            (r#"{"ts":1.5,"action":"prompt","ok":true}"#, "whole epoch"),
            (r#"{"ts":1,"action":"prompt"}"#, "missing field `ok`"),
            (r#"{"ts":1,"action":"prompt","ok":1}"#, "must be a boolean"),
            (
                r#"{"ts":1,"action":"prompt","ok":true,"files":[1]}"#,
                "must hold strings",
            ),
            (
                r#"{"ts":1,"action":"prompt","ok":true,"meta":[]}"#,
                "`meta` must be an object",
            ),
            (
                r#"{"ts":-62135596800001,"action":"prompt","ok":true}"#,
                "field `ts`: timestamp -62135596800001 ms is outside 0001-01-01",
            ),
            (
                r#"{"ts":1,"action":"reply","ok":true,"latencyMs":-3}"#,
                "field `latencyMs` is a duration, not negative: got -3",
            ),
            (
                r#"{"ts":1,"action":"reply","ok":true,"latencyMs":-0.5}"#,
                "field `latencyMs` is a duration, not negative: got -0.5",
            ),
            (
                r#"{"ts":1,"action":"reply","ok":true,"latencyMs":"3"}"#,
                "field `latencyMs` must be a number, got a string",
            ),
            (
                r#"{"ts":1,"action":"apply","ok":true,"diffStats":{"linesAdded":-1,"linesRemoved":0,"hunks":1}}"#,
                "field `diffStats.linesAdded` is a count, not negative: got -1",
            ),
            (
                r#"{"ts":1,"action":"apply","ok":true,"diffStats":{"linesAdded":1,"linesRemoved":0,"hunks":"1"}}"#,
                "field `diffStats.hunks` must be a number, got a string",
            ),
            (
                r#"{"ts":1,"action":"undo","ok":true,"files":[""]}"#,
                "field `files`: `` is empty",
            ),
            (
                r#"{"ts":1,"action":"prompt","ok":true,"meta":{"_cortexide":1}}"#,
                "reserved",
            ),
            (
                r#"{"ts":1,"action":"rollback","ok":true,"meta":{"cortexideAction":1}}"#,
                "reserved",
            ),
        ];
        for (line, want) in cases {
            let e = parse_line(Format::Cortexide, line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn cortexide_numbers_the_event_model_cannot_hold_are_kept_verbatim() {
        // A fractional latency or count, or a diffStats with a key more or
        // less, is a number the shape allows: kept in the hints, not refused.
        for line in [
            r#"{"ts":1,"action":"reply","ok":true,"latencyMs":12.5}"#,
            r#"{"ts":1,"action":"apply","ok":true,"diffStats":{"linesAdded":1.5,"linesRemoved":0,"hunks":1}}"#,
            r#"{"ts":1,"action":"apply","ok":true,"diffStats":{"linesAdded":1,"hunks":1}}"#,
        ] {
            let e = parse_line(Format::Cortexide, line).unwrap().event;
            let hints = &e.meta.unwrap().0[META_CORTEXIDE_HINTS];
            let v: Value = serde_json::from_str(line).unwrap();
            let field = if line.contains("latencyMs") {
                "latencyMs"
            } else {
                "diffStats"
            };
            assert_eq!(hints[field], v[field], "{line}");
        }
        let e = parse_line(
            Format::Cortexide,
            r#"{"ts":0,"action":"reply","ok":true,"latencyMs":0}"#,
        )
        .unwrap()
        .event;
        assert_eq!((e.ts.millis(), e.latency_ms), (0, Some(0)));
    }

    /// A fractional `latencyMs` is read as `cairn record` reads a
    /// fractional `latency_ms`: rounded to whole milliseconds (and kept
    /// verbatim for the export back); out of range is refused by both.
    #[test]
    fn cortexide_latency_with_a_fraction_is_rounded_like_records() {
        for (ms, want) in [("12.5", 13), ("12.4", 12), ("0.2", 0), ("40", 40)] {
            let line = format!(r#"{{"ts":1,"action":"reply","ok":true,"latencyMs":{ms}}}"#);
            let e = parse_line(Format::Cortexide, &line).unwrap().event;
            assert_eq!(e.latency_ms, Some(want), "{line}");
            let canonical =
                cairn_codec::json::parse_event(&format!(r#"{{"kind":"reply","latency_ms":{ms}}}"#))
                    .unwrap();
            assert_eq!(canonical.latency_ms, e.latency_ms, "{line}");
        }
        let line = r#"{"ts":1,"action":"reply","ok":true,"latencyMs":1e20}"#;
        let e = parse_line(Format::Cortexide, line).unwrap_err();
        assert!(
            e.contains("field `latencyMs`: 100000000000000000000 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn cortexide_ts_written_as_a_whole_float_is_read() {
        let line = r#"{"ts":1e12,"action":"reply","ok":true}"#;
        let e = parse_line(Format::Cortexide, line).unwrap().event;
        assert_eq!(e.ts.millis(), 1_000_000_000_000);
        let line = r#"{"ts":1.5,"action":"reply","ok":true}"#;
        let e = parse_line(Format::Cortexide, line).unwrap_err();
        assert!(e.contains("must be whole epoch milliseconds"), "{e}");
    }

    #[test]
    fn cairn_fields_are_read_back_from_a_line_whose_files_are_not_in_normal_form() {
        let line = r#"{"ts":1,"action":"snapshot:create","ok":true,"files":["src//a.rs"],"meta":{"cairn":{"session":"s1"}}}"#;
        let e = parse_line(Format::Cortexide, line).unwrap().event;
        assert_eq!(
            (e.session.as_str(), e.files.as_slice()),
            ("s1", &["src/a.rs".to_string()][..])
        );
        assert_eq!(e.meta, None);
    }

    #[test]
    fn comma_reasons() {
        let ok = r#""timestamp":"2026-01-01T00:00:00Z","sessionId":"s","agentName":"a","toolName":"write_file","operation":"write","path":"p""#;
        let mv = ok
            .replace("write_file", "move_file")
            .replace("\"write\"", "\"move\"");
        let cases = [
            (format!("{{{ok}}}"), "missing field `ok`"),
            (
                format!("{{{ok},\"ok\":true,\"errorKind\":\"E\"}}"),
                "only allowed when `ok` is false",
            ),
            (
                format!("{mv},\"ok\":false,\"errorKind\":\"ENOENT\""),
                "missing field `toPath`: a `move` operation names its destination",
            ),
            (
                format!("{{{ok},\"ok\":true,\"afterSha256\":\"xyz\"}}"),
                "64 hex digits",
            ),
            (
                ok.replace("write_file", "nuke_file")
                    .replace("\"path\":\"p\"", "\"path\":\"p\",\"ok\":true")
                    .to_string(),
                "unknown toolName",
            ),
        ];
        for (line, want) in cases {
            let line = if line.starts_with('{') {
                line
            } else {
                format!("{{{line}}}")
            };
            let e = parse_line(Format::Comma, &line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
        assert!(parse_line(Format::Comma, &format!("{{{ok},\"ok\":true}}")).is_ok());
        // A tool with another tool's operation: kept as it is (see parse_comma).
        let created = ok.replace("\"write\"", "\"create\"") + ",\"ok\":true";
        let e = parse_line(Format::Comma, &format!("{{{created}}}"))
            .unwrap()
            .event;
        assert_eq!(
            (e.kind, e.tool.as_deref()),
            (EventKind::FileCreate, Some("write_file"))
        );
        let moved = parse_line(
            Format::Comma,
            &format!("{{{mv},\"toPath\":\"q\",\"ok\":true}}"),
        );
        assert_eq!(moved.unwrap().event.to_path.as_deref(), Some("q"));
    }

    #[test]
    fn a_byte_order_mark_before_the_first_line_is_ignored() {
        let comma = r#"{"timestamp":"2026-01-01T00:00:00Z","sessionId":"s","agentName":"a","toolName":"write_file","operation":"write","path":"p","ok":true}"#;
        for (format, line) in [
            (Format::Cortexide, r#"{"ts":1,"action":"prompt","ok":true}"#),
            (Format::Comma, comma),
            (Format::Jsonl, r#"{"kind":"prompt","ts":1}"#),
        ] {
            let input = format!("\u{feff}{line}\n{line}\n");
            let got = import_lines(format, input.as_bytes(), "bom.jsonl").unwrap();
            assert_eq!(got.len(), 2, "{format:?}");
            assert_eq!(got[0].event, got[1].event, "{format:?}");
        }
        // A file that holds only a byte-order mark holds no line.
        let got = import_lines(Format::Comma, "\u{feff}\n".as_bytes(), "bom.jsonl").unwrap();
        assert!(got.is_empty());
    }

    #[test]
    fn a_duplicate_key_is_refused_naming_it() {
        let comma = r#""timestamp":"2026-01-01T00:00:00Z","sessionId":"s","agentName":"a","toolName":"write_file","operation":"write","path":"p""#;
        let cases = [
            (
                Format::Cortexide,
                r#"{"ts":1,"action":"prompt","ok":true,"action":"reply"}"#.to_string(),
                "duplicate key `action` at column 44",
            ),
            (
                Format::Cortexide,
                r#"{"ts":1,"action":"prompt","ok":true,"meta":{"m":{"k":1,"k":2}}}"#.to_string(),
                "duplicate key `k`",
            ),
            (
                Format::Cortexide,
                r#"{"ts":1,"action":"apply","ok":true,"diffStats":{"hunks":1,"hunks":2}}"#
                    .to_string(),
                "duplicate key `hunks`",
            ),
            (
                Format::Comma,
                format!(r#"{{{comma},"ok":true,"path":"q"}}"#),
                "duplicate key `path`",
            ),
            (
                Format::Jsonl,
                r#"{"kind":"prompt","ok":true,"ok":false}"#.to_string(),
                "duplicate field `ok`",
            ),
            (
                Format::Jsonl,
                r#"{"kind":"prompt","meta":{"a":1,"a":2}}"#.to_string(),
                "duplicate key `a`",
            ),
        ];
        for (format, line, want) in cases {
            let input = format!("{line}\n");
            let e = import_lines(format, input.as_bytes(), "dup.jsonl").unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("dup.jsonl:1: {want}")),
                "{format:?} {line}: {e}"
            );
        }
        // The same key in two different objects is no duplicate.
        let line = format!(r#"{{{comma},"ok":true,"toPath":"p2"}}"#);
        assert!(parse_line(Format::Comma, &line).is_ok());
    }

    #[test]
    fn jsonl_lines_use_the_codec() {
        let i = parse_line(Format::Jsonl, r#"{"kind":"prompt","text":"hi","lsn":3}"#).unwrap();
        assert_eq!(i.event.text.as_deref(), Some("hi"));
        assert!(parse_line(Format::Jsonl, r#"{"kind":"zap"}"#).is_err());
    }
}
