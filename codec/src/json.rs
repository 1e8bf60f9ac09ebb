//! The canonical JSON projection of a record, and strict parsing of JSON
//! input lines into events.
//!
//! Output field names are snake_case and stable: `lsn`, `ts` (ISO-8601 UTC
//! with milliseconds), `session`, `run`, `phase`, `kind`, `agent`, `user`,
//! `tool`, `model`, `latency_ms`, `ok`, `error_kind`, `text`, `path`,
//! `to_path`, `files`, `diff_stats`, `diff`, `before`, `after`, `parents`,
//! `label`, `root`, `state`, `counts`, `checkpoint`, `source`, `target`,
//! `meta`, and `hash` (the chain value). Empty fields are omitted; `ok` is
//! always present.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

use crate::event::{Meta, DEFAULT_SESSION};
use crate::{
    BlobHash, ChainHash, CheckpointCounts, CheckpointId, CodecError, DiffStats, Event, EventKind,
    Lsn, Timestamp,
};

/// The largest JSON input line cairn accepts: an event body is at most
/// [`MAX_EVENT_BODY_BYTES`](crate::event::MAX_EVENT_BODY_BYTES), and JSON
/// escaping can double text.
pub const MAX_JSON_LINE_BYTES: usize = 2 * crate::event::MAX_EVENT_BODY_BYTES;

fn iso<S: Serializer>(ts: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = String::with_capacity(24);
    ts.write_iso(&mut buf);
    s.serialize_str(&buf)
}

/// A record as canonical JSON: borrow an event, add its LSN and chain hash.
#[derive(Serialize)]
pub struct JsonRecord<'a> {
    /// Log sequence number.
    pub lsn: Lsn,
    /// Timestamp, ISO-8601 UTC with milliseconds.
    #[serde(serialize_with = "iso")]
    pub ts: Timestamp,
    /// Session id.
    pub session: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<&'a str>,
    kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_ms: Option<u64>,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_kind: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_path: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    files: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    diff_stats: Option<DiffStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<BlobHash>,
    #[serde(skip_serializing_if = "Option::is_none")]
    before: Option<BlobHash>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<BlobHash>,
    #[serde(skip_serializing_if = "<[Lsn]>::is_empty")]
    parents: &'a [Lsn],
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    root: Option<BlobHash>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<BlobHash>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counts: Option<&'a CheckpointCounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoint: Option<CheckpointId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<CheckpointId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<CheckpointId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<&'a Meta>,
    /// The chain value after this record.
    pub hash: ChainHash,
}

impl<'a> JsonRecord<'a> {
    /// Views `event` at `lsn` with chain value `hash` as canonical JSON.
    pub fn new(lsn: Lsn, hash: ChainHash, e: &'a Event) -> JsonRecord<'a> {
        JsonRecord {
            lsn,
            ts: e.ts,
            session: &e.session,
            run: e.run.as_deref(),
            phase: e.phase.as_deref(),
            kind: e.kind,
            agent: e.agent.as_deref(),
            user: e.user.as_deref(),
            tool: e.tool.as_deref(),
            model: e.model.as_deref(),
            latency_ms: e.latency_ms,
            ok: e.ok,
            error_kind: e.error_kind.as_deref(),
            text: e.text.as_deref(),
            path: e.path.as_deref(),
            to_path: e.to_path.as_deref(),
            files: &e.files,
            diff_stats: e.diff_stats,
            diff: e.diff,
            before: e.before,
            after: e.after,
            parents: &e.parents,
            label: e.label.as_deref(),
            root: e.root,
            state: e.state,
            counts: e.counts.as_ref(),
            checkpoint: e.checkpoint,
            source: e.source,
            target: e.target,
            meta: e.meta.as_ref(),
            hash,
        }
    }

    /// Appends this record as one line of JSON (with the trailing newline) to `out`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        // Serializing plain data into a Vec cannot fail.
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventInput {
    #[serde(default)]
    lsn: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    hash: Option<serde::de::IgnoredAny>,
    /// ISO-8601 text or epoch milliseconds, checked by [`parse_ts`] (so a
    /// bad one is named as such, not as an "untagged enum" mismatch).
    ts: Option<serde_json::Value>,
    session: Option<String>,
    run: Option<String>,
    phase: Option<String>,
    kind: Option<EventKind>,
    agent: Option<String>,
    user: Option<String>,
    tool: Option<String>,
    model: Option<String>,
    /// Any JSON number, read by [`latency_ms`] (a fraction is rounded).
    latency_ms: Option<Number>,
    /// Absent means true; `null` is refused ([`ok_not_null`]).
    #[serde(default, deserialize_with = "ok_not_null")]
    ok: Option<bool>,
    error_kind: Option<String>,
    text: Option<String>,
    path: Option<String>,
    to_path: Option<String>,
    #[serde(default)]
    files: Vec<String>,
    diff_stats: Option<DiffStats>,
    diff: Option<BlobHash>,
    before: Option<BlobHash>,
    after: Option<BlobHash>,
    #[serde(default)]
    parents: Vec<Lsn>,
    label: Option<String>,
    root: Option<BlobHash>,
    state: Option<BlobHash>,
    counts: Option<CheckpointCounts>,
    checkpoint: Option<CheckpointId>,
    source: Option<CheckpointId>,
    target: Option<CheckpointId>,
    /// Parsed by [`unique_object`], so a duplicate key in it is refused.
    #[serde(default, deserialize_with = "unique_object")]
    meta: Option<Map<String, Value>>,
}

/// A JSON value whose objects, at every depth, name each key once:
/// deserializing one refuses a duplicate key, naming it. (serde_json keeps
/// the last value of a duplicate key without a word, so
/// `{"ok":true,"ok":false}` would read as a failure that a reader of the
/// line may take for a success.) It costs what parsing a [`Value`] costs:
/// the check is the insertion into the object's map.
#[derive(Clone, Debug, PartialEq)]
pub struct UniqueKeys(pub Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor).map(UniqueKeys)
    }
}

/// Builds a [`Value`] as serde_json's own visitor does, but refuses a
/// duplicate key. Depth is bounded by serde_json's recursion limit.
struct UniqueKeysVisitor;

impl<'de> Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        // JSON text has no NaN or infinity, so this is always a number.
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match object.entry(key) {
                Entry::Vacant(slot) => {
                    let UniqueKeys(v) = map.next_value()?;
                    slot.insert(v);
                }
                Entry::Occupied(seen) => {
                    return Err(de::Error::custom(format_args!(
                        "duplicate key `{}`",
                        seen.key()
                    )))
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// An optional JSON object read as [`UniqueKeys`] (`null` is absent).
fn unique_object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Map<String, Value>>, D::Error> {
    match Option::<UniqueKeys>::deserialize(d)? {
        None => Ok(None),
        Some(UniqueKeys(Value::Object(m))) => Ok(Some(m)),
        Some(UniqueKeys(other)) => Err(de::Error::invalid_type(
            unexpected(&other),
            &"a JSON object",
        )),
    }
}

/// The `ok` field, which must be `true` or `false` when it is given. A
/// `null` is refused rather than read as absent: absent means success, and
/// a producer that wrote `null` for "not known" (or for a failure it could
/// not describe) would have it stored as a success.
fn ok_not_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Option::<bool>::deserialize(d)? {
        Some(b) => Ok(Some(b)),
        None => Err(de::Error::custom(
            "field `ok` is null: give true or false, or leave it out (which means true)",
        )),
    }
}

/// What a non-object value is, for [`de::Error::invalid_type`].
fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("a number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

/// The stamps [`parse_event_with`] gives an event whose line leaves them
/// out (or gives them as `null`): a binding's session handle, whose
/// events carry its session, run, phase, agent and model unless a line
/// says otherwise. The default stamps nothing (`session` is then
/// [`DEFAULT_SESSION`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventDefaults<'a> {
    /// Session id.
    pub session: Option<&'a str>,
    /// Run id.
    pub run: Option<&'a str>,
    /// Phase id.
    pub phase: Option<&'a str>,
    /// Agent name.
    pub agent: Option<&'a str>,
    /// Model name.
    pub model: Option<&'a str>,
}

/// Parses one canonical JSON line into an event. `kind` is required; `ts`
/// defaults to now, `session` to `default`, `ok` to true (a `null` `ok` is
/// refused: it would read as a success); `lsn` and `hash`
/// (present in cairn's own export) are accepted and ignored. An unknown
/// field, an unknown kind or a wrong type is an error that names it.
pub fn parse_event(line: &str) -> Result<Event, CodecError> {
    parse_event_with(line, &EventDefaults::default())
}

/// [`parse_event`], with `defaults` for the stamps a line leaves out: one
/// pass over the line, so a binding need not rewrite it to add them.
pub fn parse_event_with(line: &str, defaults: &EventDefaults<'_>) -> Result<Event, CodecError> {
    let input = read_event_input(line)?;
    let _ = (input.lsn, input.hash);
    let kind = input
        .kind
        .ok_or_else(|| CodecError::Json("missing field `kind`".into()))?;
    let ts = match input.ts {
        None => Timestamp::now(),
        Some(v) => parse_ts(&v)?,
    };
    let session = match input.session {
        Some(s) if s.is_empty() => {
            return Err(CodecError::Json("field `session` must not be empty".into()))
        }
        Some(s) => s,
        None => defaults.session.unwrap_or(DEFAULT_SESSION).to_string(),
    };
    let stamp = |given: Option<String>, default: Option<&str>| given.or(default.map(str::to_owned));
    let mut e = Event {
        ts,
        session,
        run: stamp(input.run, defaults.run),
        phase: stamp(input.phase, defaults.phase),
        kind,
        agent: stamp(input.agent, defaults.agent),
        user: input.user,
        tool: input.tool,
        model: stamp(input.model, defaults.model),
        latency_ms: match &input.latency_ms {
            None => None,
            Some(n) => Some(latency_ms("latency_ms", n).map_err(CodecError::Json)?),
        },
        ok: input.ok.unwrap_or(true),
        error_kind: input.error_kind,
        text: input.text,
        path: input.path,
        to_path: input.to_path,
        files: input.files,
        diff_stats: input.diff_stats,
        diff: input.diff,
        before: input.before,
        after: input.after,
        parents: input.parents,
        label: input.label,
        root: input.root,
        state: input.state,
        counts: input.counts,
        checkpoint: input.checkpoint,
        source: input.source,
        target: input.target,
        meta: input.meta.map(Meta),
    };
    e.normalize_paths();
    e.check_paths()?;
    Ok(e)
}

/// Reads one canonical JSON line's fields, refusing a line over
/// [`MAX_JSON_LINE_BYTES`] or one that is not a JSON object; a leading
/// byte-order mark (as some Windows tools write before the first line) is
/// skipped.
fn read_event_input(line: &str) -> Result<EventInput, CodecError> {
    if line.len() > MAX_JSON_LINE_BYTES {
        return Err(CodecError::TooLarge {
            what: "JSON line",
            len: line.len() as u64,
            max: MAX_JSON_LINE_BYTES as u64,
        });
    }
    let line = line.strip_prefix('\u{feff}').unwrap_or(line);
    if let Some(what) = not_an_object(line) {
        return Err(CodecError::Json(format!(
            "an event is a JSON object ({{\"kind\": ...}}), not {what}"
        )));
    }
    serde_json::from_str(line).map_err(|e| CodecError::Json(line_error(&e)))
}

/// A latency in milliseconds as JSON input gives it (`latency_ms` of a
/// canonical line, `latencyMs` of the cortexide shape, whose producers
/// write fractions: JavaScript's `performance.now()` differences): a whole
/// number as it is; one with a fraction rounded to the nearest whole
/// millisecond, a half up (12.5 is 13), as the event holds whole
/// milliseconds. Negative, or more than `u64::MAX` once rounded, is an
/// error naming `field`. One function for both, so `cairn record` and
/// `cairn import` accept and refuse the same numbers.
pub fn latency_ms(field: &str, n: &Number) -> Result<u64, String> {
    if let Some(ms) = n.as_u64() {
        return Ok(ms);
    }
    // 2^64: the first float past u64::MAX (which f64 cannot hold exactly).
    const PAST_U64: f64 = 18_446_744_073_709_551_616.0;
    match n.as_f64() {
        Some(ms) if ms < 0.0 => Err(format!(
            "field `{field}` is a duration, not negative: got {n}"
        )),
        // In range, so the cast is exact.
        Some(ms) if ms.round() < PAST_U64 => Ok(ms.round() as u64),
        // A whole number past u64 arrives as a float: shown in digits (the
        // float's value), not as `1.8446744073709552e+19`.
        Some(ms) if ms < 1e21 => Err(format!(
            "field `{field}`: {ms:.0} is out of range (milliseconds from 0 to {} are expected)",
            u64::MAX
        )),
        _ => Err(format!(
            "field `{field}`: {n} is out of range (milliseconds from 0 to {} are expected)",
            u64::MAX
        )),
    }
}

/// serde_json's message for an error in one line of input, its place
/// given as the column only: serde_json says "at line 1 column 34", which
/// next to a file's own line number (`audit.jsonl:7: ...`) reads as a
/// contradiction.
///
/// A line that is not JSON at all (or is cut short) says so first: serde's
/// own words ("expected ident") name a token, not the problem.
pub fn line_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let place = format!(" at line {} column {}", e.line(), e.column());
    let text = match text.strip_suffix(&place) {
        Some(what) if e.line() == 1 => format!("{what} at column {}", e.column()),
        _ => text,
    };
    match e.classify() {
        serde_json::error::Category::Syntax => format!("invalid JSON: {text}"),
        serde_json::error::Category::Eof => format!("invalid JSON (cut short): {text}"),
        // serde reads a number past u64 (or with a fraction) as a float
        // and names that type, not the problem.
        _ if text.starts_with("invalid type: floating point") && text.contains("expected u64") => {
            format!("{text} (a whole number from 0 to {} is expected)", u64::MAX)
        }
        _ => text,
    }
}

/// A JSON number as whole epoch milliseconds: an integer, or a number
/// written with a fraction or exponent whose value is whole (`1e12`,
/// `1700000000000.0`, as some JSON writers print every number). `None` for
/// one with a fraction, or past what an `i64` holds.
pub fn whole_millis(n: &serde_json::Number) -> Option<i64> {
    /// 2^63 as an f64: the first value past `i64::MAX`.
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    n.as_i64().or_else(|| {
        let f = n.as_f64()?;
        (f.fract() == 0.0 && (-I64_END..I64_END).contains(&f)).then_some(f as i64)
    })
}

/// A `ts` value: ISO-8601 text, or whole epoch milliseconds.
fn parse_ts(v: &serde_json::Value) -> Result<Timestamp, CodecError> {
    match v {
        serde_json::Value::String(s) => Timestamp::parse(s),
        serde_json::Value::Number(n) => match whole_millis(n) {
            Some(ms) => Timestamp::from_millis(ms),
            None => Err(CodecError::Json(format!(
                "field `ts`: {n} is not whole epoch milliseconds within the range of a 64-bit integer"
            ))),
        },
        // `null` never gets here: it reads as an absent `ts`.
        other => {
            let what = match other {
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Array(_) => "an array",
                _ => "an object",
            };
            Err(CodecError::Json(format!(
                "field `ts` must be ISO-8601 text or epoch milliseconds, not {what}"
            )))
        }
    }
}

/// What the line holds, if it is valid JSON but clearly not an object (so
/// the error says so, rather than serde's "invalid length" for an array).
fn not_an_object(line: &str) -> Option<&'static str> {
    match line.trim_start().bytes().next()? {
        b'[' => Some("an array"),
        b'"' => Some("a string"),
        b'-' | b'0'..=b'9' => Some("a number"),
        b't' | b'f' if line.trim() == "true" || line.trim() == "false" => Some("a boolean"),
        b'n' if line.trim() == "null" => Some("null"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::{normal_path, outside_workspace};
    use proptest::prelude::*;
    use std::borrow::Cow;

    #[test]
    fn minimal_line_gets_defaults() {
        let e = parse_event(r#"{"kind":"prompt","text":"hi"}"#).unwrap();
        assert_eq!(e.session, "default");
        assert!(e.ok);
        assert_eq!(e.text.as_deref(), Some("hi"));
        assert!((Timestamp::now().0 - e.ts.0).abs() < 60_000);
    }

    #[test]
    fn defaults_stamp_only_what_a_line_leaves_out() {
        let d = EventDefaults {
            session: Some("t1"),
            run: Some("r1"),
            agent: Some("coder"),
            ..EventDefaults::default()
        };
        let e = parse_event_with(r#"{"kind":"prompt","agent":"other","model":null}"#, &d).unwrap();
        assert_eq!(
            (e.session.as_str(), e.run.as_deref(), e.agent.as_deref()),
            ("t1", Some("r1"), Some("other"))
        );
        assert_eq!((e.phase.as_deref(), e.model.as_deref()), (None, None));
        let own = parse_event_with(r#"{"kind":"prompt","session":"s2"}"#, &d).unwrap();
        assert_eq!(own.session, "s2");
        let empty = parse_event_with(r#"{"kind":"prompt","session":""}"#, &d).unwrap_err();
        assert!(empty.to_string().contains("session"), "{empty}");
    }

    #[test]
    fn ts_forms() {
        let a = parse_event(r#"{"kind":"reply","ts":1700000000123}"#).unwrap();
        let b = parse_event(r#"{"kind":"reply","ts":"2023-11-14T22:13:20.123Z"}"#).unwrap();
        assert_eq!(a.ts, b.ts);
        // Whole numbers written as floats, as some JSON writers do.
        for whole in ["1.700000000123e12", "1700000000123.0"] {
            let c = parse_event(&format!(r#"{{"kind":"reply","ts":{whole}}}"#)).unwrap();
            assert_eq!(c.ts, a.ts, "{whole}");
        }
        for (bad, says) in [
            (
                r#"{"kind":"reply","ts":1e20}"#,
                "not whole epoch milliseconds",
            ),
            (
                r#"{"kind":"reply","ts":1.5}"#,
                "not whole epoch milliseconds",
            ),
            (r#"{"kind":"reply","ts":true}"#, "not a boolean"),
        ] {
            let e = parse_event(bad).unwrap_err().to_string();
            assert!(e.contains("field `ts`") && e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_move_names_its_destination() {
        for line in [
            r#"{"kind":"file.move","path":"a.rs"}"#,
            r#"{"kind":"file.move","path":"a.rs","ok":false}"#,
        ] {
            let err = parse_event(line).unwrap_err().to_string();
            assert!(err.contains("missing field `to_path`"), "{err}");
        }
        let e = parse_event(r#"{"kind":"file.move","path":"a.rs","to_path":"b.rs"}"#).unwrap();
        assert_eq!(e.to_path.as_deref(), Some("b.rs"));
    }

    #[test]
    fn workspace_paths_are_put_in_normal_form() {
        let e = parse_event(
            r#"{"kind":"file.move","path":"./src//a.rs","to_path":"src/./b/","files":["x/.//y","z"]}"#,
        )
        .unwrap();
        assert_eq!(e.path.as_deref(), Some("src/a.rs"));
        assert_eq!(e.to_path.as_deref(), Some("src/b"));
        assert_eq!(e.files, ["x/y", "z"]);
        // A prompt's paths may lie anywhere and are kept as written.
        let e = parse_event(r#"{"kind":"prompt","path":"./notes//a.md"}"#).unwrap();
        assert_eq!(e.path.as_deref(), Some("./notes//a.md"));
        for p in [".", "./", ".//."] {
            let line = format!(r#"{{"kind":"file.write","path":"{p}"}}"#);
            let err = parse_event(&line).unwrap_err().to_string();
            assert!(err.contains("names the workspace itself"), "{p}: {err}");
        }
        // An event built in code must already be normal: it is not rewritten.
        let mut e = Event::new(EventKind::FileWrite, "s");
        e.path = Some("src//a.rs".into());
        let err = e.check_paths().unwrap_err().to_string();
        assert!(
            err.contains("`src//a.rs` is not in normal form: write `src/a.rs`"),
            "{err}"
        );
        assert_eq!(normal_path("src/a.rs"), Cow::Borrowed("src/a.rs"));
    }

    #[test]
    fn a_duplicate_key_is_refused_naming_it() {
        // At the top level serde's derive refuses it; in `meta`, at any
        // depth, `unique_object` does (serde_json kept the last value).
        for (line, key) in [
            (r#"{"kind":"prompt","text":"a","text":"b"}"#, "field `text`"),
            (r#"{"kind":"prompt","meta":{"a":1,"a":2}}"#, "key `a`"),
            (
                r#"{"kind":"prompt","meta":{"x":[{"b":1,"c":2,"b":3}]}}"#,
                "key `b`",
            ),
        ] {
            let e = parse_event(line).unwrap_err().to_string();
            assert!(e.contains(&format!("duplicate {key}")), "{line}: {e}");
        }
        let e = parse_event(r#"{"kind":"prompt","meta":{"a":{"a":1},"b":{"a":2}}}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&e.meta.unwrap().0).unwrap(),
            r#"{"a":{"a":1},"b":{"a":2}}"#
        );
        let v: UniqueKeys = serde_json::from_str(r#"[null,true,-1,2,1.5,"s",{"k":[]}]"#).unwrap();
        assert_eq!(
            v.0,
            serde_json::json!([null, true, -1, 2, 1.5, "s", {"k": []}])
        );
    }

    #[test]
    fn a_line_that_is_not_json_says_so() {
        let e = parse_event("not json").unwrap_err().to_string();
        assert!(
            e.contains("invalid JSON: ") && e.contains("column 2"),
            "{e}"
        );
        let e = parse_event(r#"{"kind":"prompt""#).unwrap_err().to_string();
        assert!(e.contains("invalid JSON (cut short)"), "{e}");
        let e = parse_event(
            r#"{"kind":"apply","diff_stats":{"lines_added":18446744073709551616,"lines_removed":0,"hunks":1}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("a whole number from 0 to 18446744073709551615"),
            "{e}"
        );
        // A well-formed line with a wrong field is not called "not JSON".
        let e = parse_event(r#"{"kind":"prompt","ok":3}"#)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("invalid JSON"), "{e}");
    }

    /// `"ok": null` was stored as `ok: true`, a success the producer never
    /// claimed: it is refused, naming the field; absent still means true.
    #[test]
    fn ok_null_is_refused_naming_the_field() {
        let e = parse_event(r#"{"kind":"tool_call","tool":"sh","ok":null}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("field `ok` is null"), "{e}");
        assert!(!e.contains("invalid JSON"), "{e}");
        assert!(
            parse_event(r#"{"kind":"tool_call","tool":"sh"}"#)
                .unwrap()
                .ok
        );
        assert!(
            !parse_event(r#"{"kind":"tool_call","tool":"sh","ok":false}"#)
                .unwrap()
                .ok
        );
    }

    /// `latency_ms` is a number of milliseconds: a fraction (as a
    /// cortexide `latencyMs` may have) is rounded to whole ms, as `import`
    /// rounds one, not refused; a negative or too large one is refused.
    #[test]
    fn latency_ms_with_a_fraction_is_rounded_to_whole_ms() {
        let latency = |v: &str| {
            parse_event(&format!(r#"{{"kind":"reply","latency_ms":{v}}}"#))
                .map(|e| e.latency_ms)
                .map_err(|e| e.to_string())
        };
        for (v, ms) in [
            ("12.5", 13),
            ("12.49", 12),
            ("0.4", 0),
            ("7", 7),
            ("7.0", 7),
            ("1e3", 1000),
            ("-0.0", 0),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(latency(v), Ok(Some(ms)), "{v}");
        }
        for (v, why) in [
            (
                "-3",
                "field `latency_ms` is a duration, not negative: got -3",
            ),
            ("-0.5", "not negative: got -0.5"),
            (
                "18446744073709551616",
                "field `latency_ms`: 18446744073709551616 is out of range",
            ),
            ("1e300", "1e+300 is out of range"),
            (r#""12""#, "invalid type: string"),
        ] {
            let e = latency(v).unwrap_err();
            assert!(e.contains(why), "{v}: {e}");
        }
    }

    #[test]
    fn errors_give_the_column_not_line_1() {
        let e = parse_event(r#"{"kind":"prompt","text":"a","text":"b"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("duplicate field `text` at column 34"), "{e}");
    }

    #[test]
    fn a_byte_order_mark_before_a_line_is_ignored() {
        let e = parse_event("\u{feff}{\"kind\":\"prompt\",\"text\":\"hi\"}").unwrap();
        assert_eq!(e.text.as_deref(), Some("hi"));
    }

    #[test]
    fn errors_name_the_problem() {
        let cases = [
            ("not json", "expected"),
            (r#"{"text":"x"}"#, "missing field `kind`"),
            (r#"{"kind":"nope"}"#, "unknown variant `nope`"),
            (r#"{"kind":"prompt","latency_ms":"slow"}"#, "invalid type"),
            (
                r#"{"kind":"prompt","colour":"red"}"#,
                "unknown field `colour`",
            ),
            (r#"{"kind":"prompt","ts":"tuesday"}"#, "timestamp `tuesday`"),
            (r#"{"kind":"prompt","after":"abc"}"#, "64 hex digits"),
            (r#"{"kind":"prompt","session":""}"#, "session"),
            (r#"{"kind":"prompt","meta":[1]}"#, "invalid type"),
            ("[]", "an event is a JSON object"),
            ("[1, 2]", "not an array"),
            (r#""prompt""#, "not a string"),
            ("42", "not a number"),
            ("null", "not null"),
            (r#"{"kind":"file.write"}"#, "missing field `path`"),
            (r#"{"kind":"file.write","path":""}"#, "`path`: `` is empty"),
            (r#"{"kind":"file.patch"}"#, "`path` or `files`"),
            (
                r#"{"kind":"file.edit","path":"a/\u0000b"}"#,
                "holds a NUL byte",
            ),
            (
                r#"{"kind":"file.edit","path":"a/.."}"#,
                "names the workspace itself",
            ),
            (r#"{"kind":"tool_call","path":""}"#, "`path`: `` is empty"),
        ];
        for (line, want) in cases {
            let e = parse_event(line).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn file_events_with_relative_paths_are_accepted() {
        for line in [
            r#"{"kind":"file.write","path":"src/main.rs"}"#,
            r#"{"kind":"file.move","path":"a.rs","to_path":"b/a.rs"}"#,
            r#"{"kind":"file.patch","files":["a.rs","b.rs"]}"#,
            r#"{"kind":"file.delete","path":".github/ci..yml","ok":false}"#,
            r#"{"kind":"tool_call","tool":"bash"}"#,
            // A tool may read a file outside the workspace.
            r#"{"kind":"tool_call","tool":"read","path":"/usr/include/stdio.h"}"#,
            r#"{"kind":"custom","files":["../sibling/x"]}"#,
        ] {
            parse_event(line).unwrap();
        }
    }

    /// Regression (refused outside writes): an attempt to write outside
    /// the workspace was refused at input, so the audit record of a refused
    /// write could not be kept. It is now kept exactly as given.
    #[test]
    fn refused_outside_writes_are_kept_as_given() {
        for (line, path) in [
            (
                r#"{"kind":"file.write","session":"x","path":"/etc/passwd","ok":false,"error_kind":"PathOutsideWorkspace"}"#,
                "/etc/passwd",
            ),
            (r#"{"kind":"file.edit","path":"C:\\x"}"#, "C:\\x"),
            (
                r#"{"kind":"file.edit","path":"src/../../x"}"#,
                "src/../../x",
            ),
            (r#"{"kind":"file.write","path":"/w//a.rs"}"#, "/w//a.rs"),
        ] {
            let e = parse_event(line).unwrap();
            assert_eq!(e.path.as_deref(), Some(path), "{line}");
            assert!(outside_workspace(path).is_some(), "{path}");
        }
        let e = parse_event(r#"{"kind":"file.move","path":"a","to_path":"../b"}"#).unwrap();
        assert_eq!(e.to_path.as_deref(), Some("../b"));
        // A `..` that stays inside is taken back by name.
        let e = parse_event(r#"{"kind":"file.write","path":"src/x/../a.rs"}"#).unwrap();
        assert_eq!(e.path.as_deref(), Some("src/a.rs"));
        assert_eq!(outside_workspace("a/../b"), None);
        assert_eq!(
            outside_workspace("a/../../b"),
            Some("leaves the workspace (`..`)")
        );
        assert_eq!(outside_workspace("/w/a"), Some("is absolute"));
    }

    proptest! {
        #[test]
        fn export_then_parse_round_trips(e in crate::event::tests::arb_event()) {
            let mut out = Vec::new();
            JsonRecord::new(Lsn(5), ChainHash([3; 32]), &e).write_line(&mut out);
            prop_assert_eq!(*out.last().unwrap(), b'\n');
            let line = std::str::from_utf8(&out).unwrap();
            let mut back = parse_event(line.trim_end()).unwrap();
            // Meta round-trips as a JSON object; everything else exactly.
            back.ts = e.ts;
            prop_assert_eq!(back, e);
        }

        #[test]
        fn parse_never_panics(s in ".{0,120}") {
            let _ = parse_event(&s);
        }
    }
}
