//! What the agent-history importers share (Claude Code, Codex, SWE-agent):
//! reading a JSONL file whole (a bad line refuses the file, naming it),
//! bounded summaries of tool inputs, and appending only the events an
//! earlier import did not record (each event names the line it came from
//! by a key under its importer's meta namespace).

use std::collections::HashSet;

use cairn_codec::event::Meta;
use cairn_codec::{Event, Lsn};
use cairn_query::Filter;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::Store;

/// The most bytes of a tool call's input kept as its summary (`text`):
/// enough for a command or a search, while a whole file written is in its
/// blob, not repeated in the call.
pub const MAX_TOOL_SUMMARY_BYTES: usize = 4096;

/// The most events appended in one batch: each batch is atomic, and a
/// transcript of thousands of lines need not be held in one.
pub(crate) const IMPORT_BATCH_EVENTS: usize = 1024;

/// One line of a JSONL history: its number (from 1), its bytes, its object.
pub(crate) type JsonLine<'a> = (usize, &'a [u8], Map<String, Value>);

/// Every non-blank line of `text` (`name` names it in errors) as a JSON
/// object, so a malformed line refuses the file before anything is made
/// of it. A line over `max` bytes, or not a JSON object, is an error
/// naming the file and line.
pub(crate) fn json_lines<'a>(text: &'a [u8], name: &str, max: usize) -> Result<Vec<JsonLine<'a>>> {
    let mut lines = Vec::new();
    for (i, raw) in text.split(|b| *b == b'\n').enumerate() {
        let n = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if raw.len() > max {
            return Err(Error::Rejected(format!(
                "{name}:{n}: the line is {} bytes, over the {max}-byte limit of a transcript line; nothing of this file was recorded",
                raw.len()
            ).into()));
        }
        match serde_json::from_slice::<Value>(raw) {
            Ok(Value::Object(o)) => lines.push((n, raw, o)),
            Ok(_) => {
                return Err(Error::Rejected(
                    format!(
                        "{name}:{n}: expected a JSON object; nothing of this file was recorded"
                    )
                    .into(),
                ))
            }
            Err(e) => {
                return Err(Error::Rejected(
                    format!("{name}:{n}: not JSON: {e}; nothing of this file was recorded").into(),
                ))
            }
        }
    }
    Ok(lines)
}

/// A tool input's summary: its JSON (a string as it is), cut at a
/// character boundary to [`MAX_TOOL_SUMMARY_BYTES`].
pub(crate) fn summary(input: &Value) -> String {
    match input {
        Value::String(s) => bounded(s, MAX_TOOL_SUMMARY_BYTES),
        v => bounded(&v.to_string(), MAX_TOOL_SUMMARY_BYTES),
    }
}

/// A tool input's summary as JSON text (a string quoted), cut as
/// [`summary`] cuts: Claude Code's calls, whose inputs are objects.
pub(crate) fn summary_json(input: &Value) -> String {
    bounded(&input.to_string(), MAX_TOOL_SUMMARY_BYTES)
}

/// `s` cut at a character boundary to `max` bytes, with `…` when cut.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `e` marked as a call that runs a shell: its `command` when known, and
/// `may_change_unrecorded_files`, as a shell may change files no record
/// names.
pub(crate) fn shell_call(e: Event, command: Option<String>) -> Event {
    let e = match command {
        Some(c) => e.with_meta("command", c),
        None => e,
    };
    e.with_meta("may_change_unrecorded_files", true)
}

/// `e` keeping, under meta namespace `ns`, the line's `fields` and `key`,
/// the key naming the line it came from.
pub(crate) fn with_line_key(
    mut e: Event,
    ns: &str,
    mut fields: Map<String, Value>,
    key: String,
) -> Event {
    fields.insert("key".into(), Value::String(key));
    e.meta
        .get_or_insert_with(Meta::new)
        .insert(ns, Value::Object(fields));
    e
}

/// Pushes `made`, the events of one line, to `events`, each keeping its
/// key `{base}#{i}` (`i` its place among them) under meta namespace `ns`.
pub(crate) fn push_keyed(events: &mut Vec<Event>, made: Vec<Event>, ns: &str, base: &str) {
    for (i, e) in made.into_iter().enumerate() {
        events.push(with_line_key(e, ns, Map::new(), format!("{base}#{i}")));
    }
}

/// The key naming the line an event came from, under meta namespace `ns`.
pub(crate) fn line_key<'e>(e: &'e Event, ns: &str) -> Option<&'e str> {
    e.meta.as_ref()?.get(ns)?.get("key")?.as_str()
}

/// What [`append_fresh`] did.
#[derive(Debug, Default)]
pub(crate) struct Appended {
    /// Records appended.
    pub records: u64,
    /// Events skipped: an earlier import recorded them.
    pub already: u64,
    /// The LSNs appended, if any.
    pub range: Option<(Lsn, Lsn)>,
}

impl Appended {
    /// Adds what another append did.
    pub fn add(&mut self, o: Appended) {
        self.records += o.records;
        self.already += o.already;
        widen(&mut self.range, o.range);
    }
}

/// Widens `range` (the LSNs appended so far) to end at a later append's.
fn widen(range: &mut Option<(Lsn, Lsn)>, later: Option<(Lsn, Lsn)>) {
    if let Some((a, b)) = later {
        *range = Some((range.map_or(a, |r| r.0), b));
    }
}

/// What every agent-history import did, whatever its format: the part of
/// [`ClaudeCodeReport`](super::claude_code::ClaudeCodeReport),
/// [`CodexReport`](super::codex::CodexReport) and
/// [`SweAgentReport`](super::swe_agent::SweAgentReport) they share.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentCounts {
    /// Files read (transcripts, rollouts, trajectories).
    pub files: u64,
    /// Records appended.
    pub records: u64,
    /// Events skipped because an earlier import recorded them.
    pub already: u64,
    /// The LSNs appended, if any.
    pub range: Option<(Lsn, Lsn)>,
    /// Sessions seen, in the order first seen.
    pub sessions: Vec<String>,
}

impl AgentCounts {
    /// Notes a session seen (once, however often it is seen).
    pub(crate) fn saw_session(&mut self, session: &str) {
        if !self.sessions.iter().any(|s| s == session) {
            self.sessions.push(session.to_string());
        }
    }

    /// Adds what one append did.
    pub(crate) fn add(&mut self, done: &Appended) {
        self.records += done.records;
        self.already += done.already;
        widen(&mut self.range, done.range);
    }
}

/// The line keys (under `ns`) of the records of `session` in the store,
/// and the LSN of its first record, if it has any.
pub(crate) fn recorded_keys(
    store: &Store,
    session: &str,
    ns: &str,
) -> Result<(HashSet<String>, Option<Lsn>)> {
    let f = Filter {
        session: Some(session.to_string()),
        ..Filter::all()
    };
    let mut keys = HashSet::new();
    let mut first = None;
    for r in store.query(|q| q.list(&f))? {
        first = Some(first.map_or(r.lsn, |f: Lsn| f.min(r.lsn)));
        if let Some(k) = line_key(&r.event, ns) {
            keys.insert(k.to_string());
        }
    }
    Ok((keys, first))
}

/// Appends those of `events` whose line key (under `ns`) is not in
/// `seen`, in atomic batches of [`IMPORT_BATCH_EVENTS`].
pub(crate) fn append_fresh(
    store: &Store,
    events: Vec<Event>,
    ns: &str,
    seen: &HashSet<String>,
) -> Result<Appended> {
    let total = events.len();
    let fresh: Vec<Event> = events
        .into_iter()
        .filter(|e| line_key(e, ns).is_none_or(|k| !seen.contains(k)))
        .collect();
    let mut done = Appended {
        already: (total - fresh.len()) as u64,
        ..Appended::default()
    };
    for chunk in fresh.chunks(IMPORT_BATCH_EVENTS) {
        if let Some((a, b)) = store.append_batch(chunk)? {
            done.add(Appended {
                records: b.0 - a.0 + 1,
                already: 0,
                range: Some((a, b)),
            });
        }
    }
    Ok(done)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_is_cut_at_a_character_boundary() {
        let s = "é".repeat(MAX_TOOL_SUMMARY_BYTES);
        let got = summary(&Value::String(s));
        assert!(got.ends_with('…'));
        assert!(got.len() <= MAX_TOOL_SUMMARY_BYTES + '…'.len_utf8());
        assert_eq!(summary(&serde_json::json!({"a": 1})), r#"{"a":1}"#);
    }

    #[test]
    fn a_malformed_line_names_its_number() {
        let e = json_lines(b"{}\n\n{oops\n", "f.jsonl", 100).unwrap_err();
        assert!(e.to_string().contains("f.jsonl:3: not JSON"), "{e}");
        let e = json_lines(b"[1]\n", "f.jsonl", 100).unwrap_err();
        assert!(e.to_string().contains("f.jsonl:1: expected a JSON object"));
    }
}
