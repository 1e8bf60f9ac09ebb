//! Codex CLI rollouts in: `Store::import_codex`.
//!
//! Codex writes one JSONL rollout per session
//! (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`), each line
//! `{"timestamp", "type", "payload"}`. Each line becomes zero or more events:
//!
//! - `session_meta`: a `custom` record labelled `session.start`, its meta
//!   holding the session id, `cwd`, `cli_version`, `originator`, model
//!   provider and git details; the session of every event is the id of the
//!   rollout's first `session_meta`;
//! - `turn_context`: a `custom` record labelled `turn_context`; its `model`
//!   and `cwd` are those of the events after it;
//! - `response_item` `message`: a user's text, `prompt` (the context Codex
//!   sends as user messages, `<environment_context>` and
//!   `<user_instructions>`, a `custom` record labelled `context`); an
//!   assistant's text, `reply`; `reasoning`: a `custom` record with its
//!   summary;
//! - `function_call`, `custom_tool_call`, `local_shell_call`: `tool_call`
//!   (tool name, a bounded summary of its input, `ok` and a bounded copy of
//!   the output from the matching `*_output`); a shell call keeps its
//!   command and is marked `may_change_unrecorded_files`, as Claude Code's
//!   Bash calls are; its `exec_command_end` adds the exit code (`ok` is
//!   false when it is not 0);
//! - `event_msg` `exec_command_end` of a command no call in the rollout
//!   names (a user's `!cmd`): a `tool_call` of its own, with the command
//!   and exit code, marked the same way;
//! - `event_msg` `patch_apply_end`: one file event per change, `ok` its
//!   `success`: `add`, `file.create` with the contents; `delete`,
//!   `file.delete` (the contents before it when given or known); `update`,
//!   `file.edit` (`file.move` with `move_path`) whose diff is kept as the
//!   event's `diff` blob and applied to the file's contents before it (see
//!   below);
//! - `compacted`: a `custom` marker labelled `compaction`;
//! - older rollouts, before this wrapping (a first line with the session's
//!   meta, `{"id", "timestamp", "instructions", "git"}`, then bare
//!   response items and `{"record_type": "state"}` lines), are read with
//!   the same mapping: the first line is the `session_meta`, each item a
//!   `response_item` (timed as the line before it), each state line a
//!   `custom` record labelled `state` (see `wrap_legacy`);
//! - `event_msg` records that repeat a response item (`user_message`,
//!   `agent_message`, `agent_reasoning`, ...) are not recorded; every other
//!   record is a `custom` record holding it (up to
//!   [`MAX_GENERIC_RECORD_BYTES`](super::claude_code::MAX_GENERIC_RECORD_BYTES)), and those of types this importer does
//!   not know are counted in the report.
//!
//! **Contents of an update.** An `update` carries a unified diff, not
//! contents. The contents before it are, in order: what this rollout's
//! earlier changes left at the path; else the file under `--base DIR` (the
//! tree the session started from; a path not there did not exist); else,
//! without a base, what the store holds for the path just before the
//! session's first record (at the head for a session the store has not
//! seen). The diff is applied to them (hunks found as `patch` finds them,
//! without fuzz). Where there are no contents to apply it to, or it does
//! not apply, nothing is guessed: the event is recorded without `after`
//! (and without `before` when unknown), `meta.contents` says why, the
//! report names the file, line and path, and the path's contents stay
//! unknown for the rest of the rollout (a later update of it is named
//! too). A tree read at such a point keeps the path's earlier contents
//! (moved to the new path for a move), as it does for any file event
//! without contents.
//!
//! Every event keeps under `meta.codex` a key naming its line (its number
//! and a hash of its bytes, and the event's place among the line's
//! events), by which an import again skips what is recorded already:
//! importing the same rollout twice adds nothing, and a rollout that grew
//! adds only its new lines. Paths are made relative to the session's `cwd`
//! by name; a path outside it is kept as given (history only).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cairn_codec::event::Meta;
use cairn_codec::{BlobHash, Event, EventKind, Lsn, Timestamp};
use serde_json::{json, Map, Value};

use super::agent::{
    self, bounded, json_lines, summary, AgentCounts, JsonLine, MAX_TOOL_SUMMARY_BYTES,
};
use super::claude_code::{kept_record, relative, MAX_TRANSCRIPT_LINE_BYTES};
use crate::error::{Error, Result};
use crate::Store;

/// The meta key under which every imported event keeps its Codex fields.
pub const META_CODEX: &str = "codex";

/// How deep under a directory given to [`Store::import_codex`] rollouts
/// are looked for: `~/.codex/sessions` holds them at `YYYY/MM/DD/`, three
/// levels down; a few more allow a parent of it, never a walk of a whole
/// disk.
pub const MAX_ROLLOUT_DIR_DEPTH: usize = 6;

/// The tools whose calls run a shell command (and so may change files no
/// record names).
const SHELL_TOOLS: [&str; 6] = [
    "shell",
    "container.exec",
    "shell_command",
    "exec_command",
    "local_shell",
    "unified_exec",
];

/// `event_msg` types that repeat what a `response_item` records (the
/// prompt, the reply, the reasoning) or stream pieces of it: not recorded.
const REPEATED_EVENT_MSGS: [&str; 8] = [
    "user_message",
    "agent_message",
    "agent_reasoning",
    "agent_reasoning_raw_content",
    "agent_message_delta",
    "agent_reasoning_delta",
    "agent_reasoning_raw_content_delta",
    "exec_command_output_delta",
];

/// `event_msg` types this importer knows, kept as generic records.
const KNOWN_EVENT_MSGS: [&str; 22] = [
    "token_count",
    "task_started",
    "task_complete",
    "turn_aborted",
    "exec_command_begin",
    "exec_approval_request",
    "apply_patch_approval_request",
    "patch_apply_begin",
    "turn_diff",
    "error",
    "stream_error",
    "mcp_tool_call_begin",
    "mcp_tool_call_end",
    "web_search_begin",
    "web_search_end",
    "background_event",
    "entered_review_mode",
    "exited_review_mode",
    "context_compacted",
    "undo_started",
    "undo_completed",
    "view_image_tool_call",
];

/// `response_item` types this importer knows that make no event of their
/// own or a generic one.
const KNOWN_RESPONSE_ITEMS: [&str; 5] = [
    "function_call_output",
    "custom_tool_call_output",
    "ghost_snapshot",
    "compaction",
    "compaction_summary",
];

/// How [`Store::import_codex`] imports.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CodexOptions {
    /// The tree the sessions started from: the contents an `update`'s diff
    /// is applied to when the rollout has not written the file before.
    /// `None`: what the store holds.
    pub base: Option<PathBuf>,
}

impl CodexOptions {
    /// These options, with the tree the sessions started from.
    pub fn with_base(self, base: Option<PathBuf>) -> CodexOptions {
        CodexOptions { base }
    }
}

/// An `update` whose diff was not applied (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotApplied {
    /// The rollout, as named.
    pub file: String,
    /// Its line holding the `patch_apply_end`, from 1.
    pub line: u64,
    /// The path, as recorded.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// What [`Store::import_codex`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CodexReport {
    /// Files read, records appended and skipped, LSNs and sessions.
    pub imported: AgentCounts,
    /// Lines read.
    pub lines: u64,
    /// Records of types the importer does not know, by type, kept as
    /// generic records.
    pub unknown: BTreeMap<String, u64>,
    /// Updates whose diff was not applied: recorded without contents.
    pub not_applied: Vec<NotApplied>,
}

impl Store {
    /// Imports Codex CLI rollouts: each of `paths` a rollout file, or a
    /// directory searched (to [`MAX_ROLLOUT_DIR_DEPTH`]) for
    /// `rollout-*.jsonl`. See the module docs for what each line becomes.
    /// A line that is not JSON is an error naming the file and line, and
    /// nothing of that file is recorded; files before it stay recorded.
    pub fn import_codex(&self, paths: &[PathBuf], opts: &CodexOptions) -> Result<CodexReport> {
        let mut files = Vec::new();
        for p in paths {
            rollouts(p, &mut files)?;
        }
        let mut report = CodexReport::default();
        for f in files {
            self.import_rollout(&f, opts, &mut report)?;
        }
        Ok(report)
    }

    fn import_rollout(
        &self,
        file: &Path,
        opts: &CodexOptions,
        report: &mut CodexReport,
    ) -> Result<()> {
        let text = std::fs::read(file).map_err(|source| Error::Io {
            op: "read",
            path: file.to_path_buf(),
            source,
        })?;
        let name = file.display().to_string();
        let lines = wrap_legacy(json_lines(&text, &name, MAX_TRANSCRIPT_LINE_BYTES)?);
        let session = session_of(&lines, file);
        let (seen, first) = agent::recorded_keys(self, &session, META_CODEX)?;
        // The store's contents are read as they were before this session.
        let at = match first {
            Some(l) => Lsn(l.0 - 1),
            None => self.head().last_lsn,
        };
        let mut seed = |path: &str| -> Known {
            if cairn_codec::paths::outside_workspace(path).is_some() {
                return Known::Unknown;
            }
            match &opts.base {
                Some(base) => match std::fs::read(base.join(path)) {
                    Ok(b) => Known::Bytes(b),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Known::Absent,
                    Err(_) => Known::Unknown,
                },
                None => match self.query(|q| q.entry_at(at, path)) {
                    Ok(Some(e)) if e.kind == cairn_query::source::EntryKind::File => {
                        self.blob(&e.blob).map_or(Known::Unknown, Known::Bytes)
                    }
                    _ => Known::Unknown,
                },
            }
        };
        let mut put = |b: &[u8]| self.put_blob(b);
        let parsed = rollout_events(&lines, &name, &session, &mut put, &mut seed)?;
        report.imported.files += 1;
        report.lines += lines.len() as u64;
        // Named once: by the import that records the line.
        report
            .not_applied
            .extend(parsed.not_applied.into_iter().filter(|n| {
                let line = format!("{}:", n.line);
                !seen.iter().any(|k| k.starts_with(&line))
            }));
        for (t, n) in parsed.unknown {
            *report.unknown.entry(t).or_default() += n;
        }
        report.imported.saw_session(&session);
        let done = agent::append_fresh(self, parsed.events, META_CODEX, &seen)?;
        report.imported.add(&done);
        Ok(())
    }
}

/// The rollouts `p` names: itself if a file; if a directory, every
/// `rollout-*.jsonl` under it (to [`MAX_ROLLOUT_DIR_DEPTH`]), in path
/// order (which is time order in Codex's layout).
fn rollouts(p: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(p).map_err(|source| Error::Io {
        op: "read",
        path: p.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let mut found = Vec::new();
    walk(p, 0, &mut found)?;
    found.sort();
    out.extend(found);
    Ok(())
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    let io = |source| Error::Io {
        op: "list",
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        let kind = entry.file_type().map_err(io)?;
        if kind.is_dir() {
            if depth < MAX_ROLLOUT_DIR_DEPTH {
                walk(&path, depth + 1, out)?;
            }
        } else if kind.is_file() {
            let n = entry.file_name();
            let n = n.to_string_lossy();
            if n.starts_with("rollout-") && n.ends_with(".jsonl") {
                out.push(path);
            }
        }
    }
    Ok(())
}

/// The lines of a rollout in the shape Codex CLI writes now, each
/// `{"timestamp", "type", "payload"}`. Older rollouts begin with the
/// session's meta as a bare object (`{"id", "timestamp", "instructions",
/// "git"}`, no `type`), followed by bare response items (`{"type":
/// "message", ...}`, `function_call`, `function_call_output`, ...) and
/// `{"record_type": "state", ...}` lines: those become a `session_meta`,
/// `response_item`s and `state` records, so one mapping reads both. A
/// rollout whose first line has a `type` is taken as it is. The line's
/// number and bytes (its key) stay as read.
pub(crate) fn wrap_legacy(lines: Vec<JsonLine<'_>>) -> Vec<JsonLine<'_>> {
    let legacy = lines.first().is_some_and(|(_, _, o)| {
        !o.contains_key("type") && !o.contains_key("payload") && o.contains_key("id")
    });
    if !legacy {
        return lines;
    }
    let wrap = |ts: Option<Value>, kind: &str, payload: Map<String, Value>| {
        let mut w = Map::new();
        if let Some(ts) = ts {
            w.insert("timestamp".into(), ts);
        }
        w.insert("type".into(), json!(kind));
        w.insert("payload".into(), Value::Object(payload));
        w
    };
    lines
        .into_iter()
        .enumerate()
        .map(|(i, (n, raw, o))| {
            let o = if i == 0 {
                wrap(o.get("timestamp").cloned(), "session_meta", o)
            } else if o.contains_key("record_type") {
                wrap(None, "state", o)
            } else {
                wrap(None, "response_item", o)
            };
            (n, raw, o)
        })
        .collect()
}

/// The session of a rollout: the id of its first `session_meta`, else
/// the file's name without `.jsonl`.
fn session_of(lines: &[JsonLine<'_>], file: &Path) -> String {
    lines
        .iter()
        .find(|(_, _, o)| o.get("type").and_then(Value::as_str) == Some("session_meta"))
        .and_then(|(_, _, o)| o.get("payload")?.get("id")?.as_str().map(str::to_string))
        .unwrap_or_else(|| {
            file.file_stem()
                .map_or_else(|| "codex".into(), |s| s.to_string_lossy().into_owned())
        })
}

/// What is known of a file's contents while a rollout is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// These bytes.
    Bytes(Vec<u8>),
    /// The file does not exist.
    Absent,
    /// Not known: no diff is applied to it.
    Unknown,
    /// Not known since an earlier diff of it was not applied.
    Unapplied,
}

/// What one rollout gives.
#[derive(Debug, Default)]
pub struct ParsedRollout {
    /// The events, in the rollout's order.
    pub events: Vec<Event>,
    /// Records of unknown types, by type.
    pub unknown: BTreeMap<String, u64>,
    /// Updates whose diff was not applied.
    pub not_applied: Vec<NotApplied>,
}

/// What a tool call's output says: whether it failed, and a bounded copy.
struct Output {
    ok: bool,
    text: String,
}

/// Whether a tool output reports a failure: an object with
/// `success: false`, a JSON text whose `metadata.exit_code` is not 0, or
/// a text starting `Exit code: N` with N not 0.
fn output_of(v: &Value) -> Output {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("content")
            .and_then(Value::as_str)
            .map_or_else(|| v.to_string(), str::to_string),
        v => v.to_string(),
    };
    let mut ok = v.get("success").and_then(Value::as_bool) != Some(false);
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&text) {
        if let Some(c) = o
            .get("metadata")
            .and_then(|m| m.get("exit_code"))
            .and_then(Value::as_i64)
        {
            ok &= c == 0;
        }
    } else if let Some(rest) = text.strip_prefix("Exit code: ") {
        let code: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        ok &= code.parse::<i64>().is_ok_and(|c| c == 0);
    }
    Output {
        ok,
        text: bounded(&text, MAX_TOOL_SUMMARY_BYTES),
    }
}

/// A command as Codex records it (an argv, or a string) as one line: the
/// script of a `bash -lc SCRIPT`, else the words joined by spaces.
fn command_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => {
            let words: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
            match words.as_slice() {
                [_, flag, script] if matches!(*flag, "-lc" | "-c") => Some(script.to_string()),
                w => Some(w.join(" ")),
            }
        }
        _ => None,
    }
}

/// The command a shell tool call's arguments name.
fn call_command(args: &Value) -> Option<String> {
    args.get("command")
        .or_else(|| args.get("cmd"))
        .and_then(command_text)
}

/// What a rollout's first pass finds, by call id: each call's output and
/// exit code, and the calls there are.
#[derive(Default)]
struct CallResults {
    outputs: HashMap<String, Output>,
    exits: HashMap<String, i64>,
    calls: std::collections::HashSet<String>,
}

/// The outputs and exit codes of a rollout's calls, and its calls.
fn call_results(lines: &[JsonLine<'_>]) -> CallResults {
    let mut r = CallResults::default();
    let (outputs, exits, calls) = (&mut r.outputs, &mut r.exits, &mut r.calls);
    for (_, _, o) in lines {
        let Some(p) = o.get("payload") else { continue };
        let id = p.get("call_id").and_then(Value::as_str);
        match (
            o.get("type").and_then(Value::as_str),
            p.get("type").and_then(Value::as_str),
            id,
        ) {
            (
                Some("response_item"),
                Some("function_call_output" | "custom_tool_call_output"),
                Some(id),
            ) => {
                outputs.insert(
                    id.to_string(),
                    output_of(p.get("output").unwrap_or(&Value::Null)),
                );
            }
            (
                Some("response_item"),
                Some("function_call" | "custom_tool_call" | "local_shell_call"),
                Some(id),
            ) => {
                calls.insert(id.to_string());
            }
            (Some("event_msg"), Some("exec_command_end"), Some(id)) => {
                if let Some(c) = p.get("exit_code").and_then(Value::as_i64) {
                    exits.insert(id.to_string(), c);
                }
            }
            _ => {}
        }
    }
    r
}

/// Makes the events of a rollout's `lines` (`name` names it, `session` is
/// its session). `put` stores a blob; `seed(path)` gives a file's contents
/// before the rollout wrote it (see the module docs). No I/O of its own.
pub fn rollout_events(
    lines: &[JsonLine<'_>],
    name: &str,
    session: &str,
    put: &mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    seed: &mut dyn FnMut(&str) -> Known,
) -> Result<ParsedRollout> {
    let mut r = Rollout {
        name,
        // First pass: outputs and exit codes by call id, and the calls there are.
        calls: call_results(lines),
        cwd: None,
        model: None,
        contents: Contents {
            files: HashMap::new(),
            put,
            seed,
        },
        out: ParsedRollout::default(),
    };
    let empty = Map::new();
    let mut last_ts = Timestamp(0);
    for (n, raw, o) in lines {
        let line = RolloutLine::of(*n, raw, o, session, last_ts, &empty);
        last_ts = line.ts;
        let made = r.line_events(&line)?;
        let key_base = format!("{n}:{}", &blake3::hash(raw).to_hex()[..32]);
        agent::push_keyed(&mut r.out.events, made, META_CODEX, &key_base);
    }
    Ok(r.out)
}

/// The fields of a rollout's `session_meta` kept in its `session.start`
/// record's meta: (field, meta key).
const SESSION_META_FIELDS: [(&str, &str); 9] = [
    ("id", "session_id"),
    ("cwd", "cwd"),
    ("cli_version", "cli_version"),
    ("originator", "originator"),
    ("model_provider", "model_provider"),
    ("model", "model"),
    ("source", "source"),
    ("instructions", "instructions"),
    ("git", "git"),
];

/// One line of a rollout as it is mapped: where it is, its record type
/// and payload, and its time (that of the line before when it has none).
struct RolloutLine<'l> {
    n: usize,
    raw: &'l [u8],
    o: &'l Map<String, Value>,
    session: &'l str,
    ts: Timestamp,
    /// The record's `type`.
    kind: &'l str,
    /// Its `payload` (empty when it has none).
    p: &'l Map<String, Value>,
    /// The payload's `type`.
    ptype: &'l str,
}

impl<'l> RolloutLine<'l> {
    fn of(
        n: usize,
        raw: &'l [u8],
        o: &'l Map<String, Value>,
        session: &'l str,
        last_ts: Timestamp,
        empty: &'l Map<String, Value>,
    ) -> RolloutLine<'l> {
        let ts = o
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(|t| Timestamp::parse(t).ok())
            .unwrap_or(last_ts);
        let p = o.get("payload").and_then(Value::as_object).unwrap_or(empty);
        RolloutLine {
            n,
            raw,
            o,
            session,
            ts,
            kind: o.get("type").and_then(Value::as_str).unwrap_or(""),
            p,
            ptype: p.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// A new event of this line's session and time.
    fn event(&self, k: EventKind) -> Event {
        let mut e = Event::new(k, self.session);
        e.ts = self.ts;
        e
    }

    /// The payload's string field `k`.
    fn str(&self, k: &str) -> Option<&'l str> {
        self.p.get(k).and_then(Value::as_str)
    }

    /// A `custom` record labelled `label` holding this line (cut when
    /// large), counted in `unknown` when it is of a type not known.
    fn generic(&self, label: String, unknown: bool, counts: &mut BTreeMap<String, u64>) -> Event {
        if unknown {
            *counts.entry(label.clone()).or_default() += 1;
        }
        let mut e = self.event(EventKind::Custom);
        e.label = Some(label);
        let record = kept_record(
            self.raw,
            self.o,
            || json!({"type": self.kind, "payload_type": self.ptype, "cut": self.raw.len()}),
        );
        e.with_meta("record", record)
    }
}

/// What the reading of one rollout carries from line to line.
struct Rollout<'r> {
    name: &'r str,
    calls: CallResults,
    /// The working directory and model of the events that follow (from the
    /// last `session_meta` or `turn_context`).
    cwd: Option<String>,
    model: Option<String>,
    contents: Contents<'r>,
    out: ParsedRollout,
}

impl Rollout<'_> {
    /// The events of one line, before their keys are stamped.
    fn line_events(&mut self, l: &RolloutLine<'_>) -> Result<Vec<Event>> {
        Ok(match l.kind {
            "session_meta" => {
                self.follow(l);
                vec![self.session_start(l)]
            }
            "turn_context" => {
                self.follow(l);
                let mut e = l.generic("turn_context".into(), false, &mut self.out.unknown);
                e.model = self.model.clone();
                vec![e]
            }
            // An older rollout's saved state (see `wrap_legacy`).
            "state" => vec![l.generic("state".into(), false, &mut self.out.unknown)],
            "compacted" => {
                let mut e = l.event(EventKind::Custom);
                e.text = l.str("message").map(str::to_string);
                e.label = Some("compaction".into());
                vec![e]
            }
            "response_item" => self.response_item(l).into_iter().collect(),
            "event_msg" => self.event_msg(l)?,
            other => {
                let label = if other.is_empty() { "unknown" } else { other };
                vec![l.generic(label.to_string(), true, &mut self.out.unknown)]
            }
        })
    }

    /// Takes the `cwd` and `model` a `session_meta` or `turn_context` names.
    fn follow(&mut self, l: &RolloutLine<'_>) {
        if let Some(c) = l.str("cwd") {
            self.cwd = Some(c.to_string());
        }
        if let Some(m) = l.str("model") {
            self.model = Some(m.to_string());
        }
    }

    /// The `session.start` record of a `session_meta`.
    fn session_start(&self, l: &RolloutLine<'_>) -> Event {
        let mut e = l.event(EventKind::Custom).with_text("session start");
        e.label = Some("session.start".into());
        for (from, to) in SESSION_META_FIELDS {
            if let Some(v) = l.p.get(from).filter(|v| !v.is_null()) {
                e = e.with_meta(to, v.clone());
            }
        }
        e.model = self.model.clone();
        e
    }

    /// The event of a `response_item`, if it makes one.
    fn response_item(&mut self, l: &RolloutLine<'_>) -> Option<Event> {
        match l.ptype {
            "message" => Some(self.message(l)),
            "reasoning" => {
                let mut e = l
                    .event(EventKind::Custom)
                    .with_text(texts_of(l.p.get("summary")));
                e.label = Some("reasoning".into());
                e.model = self.model.clone();
                Some(e)
            }
            "function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call" => {
                Some(self.tool_call(l))
            }
            // Outputs are on their calls' events.
            t if KNOWN_RESPONSE_ITEMS.contains(&t) => (!t.ends_with("_output"))
                .then(|| l.generic(format!("response_item:{t}"), false, &mut self.out.unknown)),
            t => Some(l.generic(format!("response_item:{t}"), true, &mut self.out.unknown)),
        }
    }

    /// A message: a user's prompt, an assistant's reply, or context Codex
    /// sends as a user's message.
    fn message(&self, l: &RolloutLine<'_>) -> Event {
        let role = l.str("role").unwrap_or("");
        let text = texts_of(l.p.get("content"));
        let context = text.trim_start().starts_with("<environment_context>")
            || text.trim_start().starts_with("<user_instructions>");
        let mut e = match role {
            "user" if !context => l.event(EventKind::Prompt),
            "assistant" => l.event(EventKind::Reply),
            _ => {
                let mut e = l.event(EventKind::Custom);
                e.label = Some("context".into());
                e.with_meta("role", role)
            }
        };
        e.text = Some(text);
        if role == "assistant" {
            e.model = self.model.clone();
        }
        e
    }

    /// The `tool_call` of a call item, with its output and exit code.
    fn tool_call(&self, l: &RolloutLine<'_>) -> Event {
        let id = l.str("call_id").unwrap_or("");
        let (tool, input) = tool_and_input(l);
        let mut e = l.event(EventKind::ToolCall).with_text(summary(&input));
        e.tool = Some(tool.to_string());
        e.model = self.model.clone();
        if !id.is_empty() {
            e = e.with_meta("call_id", id);
        }
        if let Some(o) = self.calls.outputs.get(id) {
            e.ok = o.ok;
            e = e.with_meta("output", o.text.clone());
        }
        if SHELL_TOOLS.contains(&tool) {
            e = agent::shell_call(e, call_command(&input));
        }
        if let Some(c) = self.calls.exits.get(id) {
            e.ok &= *c == 0;
            e = e.with_meta("exit_code", *c);
        }
        e
    }

    /// The events of an `event_msg`.
    fn event_msg(&mut self, l: &RolloutLine<'_>) -> Result<Vec<Event>> {
        Ok(match l.ptype {
            "exec_command_end" => self.command_end(l).into_iter().collect(),
            "patch_apply_end" => self.patch_apply_end(l)?,
            t if REPEATED_EVENT_MSGS.contains(&t) => Vec::new(),
            t => vec![l.generic(
                format!("event_msg:{t}"),
                !KNOWN_EVENT_MSGS.contains(&t),
                &mut self.out.unknown,
            )],
        })
    }

    /// The `tool_call` of an `exec_command_end` no call names (a user's
    /// `!cmd`); `None` for a call's, which is on the call's event.
    fn command_end(&self, l: &RolloutLine<'_>) -> Option<Event> {
        let id = l.str("call_id").unwrap_or("");
        if self.calls.calls.contains(id) {
            return None;
        }
        let cmd =
            l.p.get("command")
                .and_then(command_text)
                .unwrap_or_default();
        let code = l.p.get("exit_code").and_then(Value::as_i64);
        let mut e = l.event(EventKind::ToolCall).with_text(cmd.clone());
        let source = l.str("source").unwrap_or("agent");
        e.tool = Some(
            if source == "user_shell" {
                "user_shell"
            } else {
                "shell"
            }
            .into(),
        );
        e.ok = code == Some(0);
        e = agent::shell_call(e, Some(cmd));
        if let Some(c) = code {
            e = e.with_meta("exit_code", c);
        }
        if !id.is_empty() {
            e = e.with_meta("call_id", id);
        }
        Some(e)
    }

    /// One file event per change of a `patch_apply_end`, in path order;
    /// the last keeps the patch's `stderr` when it failed.
    fn patch_apply_end(&mut self, l: &RolloutLine<'_>) -> Result<Vec<Event>> {
        let ctx = Change {
            name: self.name,
            line: l.n,
            cwd: self.cwd.as_deref(),
            ok: l.p.get("success").and_then(Value::as_bool).unwrap_or(true),
            call_id: l.str("call_id"),
            model: self.model.as_deref(),
        };
        let mut changes: Vec<(&String, &Value)> =
            l.p.get("changes")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .collect();
        changes.sort_by(|a, b| a.0.cmp(b.0));
        let mut made = Vec::new();
        for (path, c) in changes {
            let e = self
                .contents
                .change(&ctx, path, c, &mut self.out.not_applied)?;
            let mut e = match e {
                Some(e) => e,
                None => {
                    let t = c.get("type").and_then(Value::as_str).unwrap_or("");
                    l.generic(format!("change:{t}"), true, &mut self.out.unknown)
                }
            };
            e.session = l.session.to_string();
            e.ts = l.ts;
            made.push(e);
        }
        if !ctx.ok {
            if let Some(last) = made.last_mut() {
                let err = l.str("stderr").unwrap_or("");
                last.meta
                    .get_or_insert_with(Meta::new)
                    .insert("stderr", bounded(err, MAX_TOOL_SUMMARY_BYTES));
            }
        }
        Ok(made)
    }
}

/// The tool a call item names and its input: a `function_call`'s
/// arguments parsed (as text when they are not JSON), a
/// `custom_tool_call`'s input, a shell's or a web search's action.
fn tool_and_input<'l>(l: &RolloutLine<'l>) -> (&'l str, Value) {
    let field = |k: &str| l.p.get(k).cloned().unwrap_or(Value::Null);
    match l.ptype {
        "function_call" => {
            let args = l.str("arguments").unwrap_or("");
            let parsed = serde_json::from_str::<Value>(args)
                .unwrap_or_else(|_| Value::String(args.to_string()));
            (l.str("name").unwrap_or("?"), parsed)
        }
        "custom_tool_call" => (l.str("name").unwrap_or("?"), field("input")),
        "local_shell_call" => ("local_shell", field("action")),
        _ => ("web_search", field("action")),
    }
}

/// The `text` of each part of a content list, joined by newlines.
fn texts_of(parts: Option<&Value>) -> String {
    let text: Vec<&str> = parts
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("text").and_then(Value::as_str))
        .collect();
    text.join("\n")
}

/// Where a `patch_apply_end` is, and what its file events share.
struct Change<'a> {
    name: &'a str,
    line: usize,
    cwd: Option<&'a str>,
    ok: bool,
    call_id: Option<&'a str>,
    model: Option<&'a str>,
}

/// What is known of each path's contents while a rollout is read, and
/// how to learn more: `put` stores a blob, `seed(path)` gives a file's
/// contents before the rollout wrote it.
struct Contents<'r> {
    files: HashMap<String, Known>,
    put: &'r mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    seed: &'r mut dyn FnMut(&str) -> Known,
}

impl Contents<'_> {
    /// What is known of `path` now (seeded on first use).
    fn known(&mut self, path: &str) -> Known {
        let seed = &mut self.seed;
        self.files
            .entry(path.to_string())
            .or_insert_with(|| seed(path))
            .clone()
    }

    /// Notes what `path` holds after a change, when the patch succeeded.
    fn set(&mut self, ctx: &Change<'_>, path: &str, known: Known) {
        if ctx.ok {
            self.files.insert(path.to_string(), known);
        }
    }

    /// The file event of one change of a `patch_apply_end` (`None` for a
    /// change of a type this importer does not know), noting what it
    /// leaves at each path when the patch succeeded.
    fn change(
        &mut self,
        ctx: &Change<'_>,
        path: &str,
        c: &Value,
        not_applied: &mut Vec<NotApplied>,
    ) -> Result<Option<Event>> {
        let rel = in_workspace(path, ctx.cwd);
        let content = c.get("content").and_then(Value::as_str);
        let mut e = match c.get("type").and_then(Value::as_str) {
            Some("add") => self.add(ctx, &rel, content.unwrap_or(""))?,
            Some("delete") => self.delete(ctx, &rel, content)?,
            Some("update") => self.update(ctx, &rel, c, not_applied)?,
            _ => return Ok(None),
        };
        e.path = Some(rel);
        e.ok = ctx.ok;
        e.tool = Some("apply_patch".into());
        e.model = ctx.model.map(str::to_string);
        if let Some(id) = ctx.call_id {
            e = e.with_meta("call_id", id);
        }
        Ok(Some(e))
    }

    /// An `add`: the file created with `body`.
    fn add(&mut self, ctx: &Change<'_>, rel: &str, body: &str) -> Result<Event> {
        let mut e = Event::new(EventKind::FileCreate, "");
        e.after = Some((self.put)(body.as_bytes())?);
        self.set(ctx, rel, Known::Bytes(body.as_bytes().to_vec()));
        Ok(e.with_meta("contents", "exact"))
    }

    /// A `delete`, with the contents before it when given or known.
    fn delete(&mut self, ctx: &Change<'_>, rel: &str, content: Option<&str>) -> Result<Event> {
        let mut e = Event::new(EventKind::FileDelete, "");
        let before = match content {
            Some(c) => Known::Bytes(c.as_bytes().to_vec()),
            None => self.known(rel),
        };
        if let Known::Bytes(b) = &before {
            e.before = Some((self.put)(b)?);
        }
        self.set(ctx, rel, Known::Absent);
        Ok(e)
    }

    /// An `update` (a move with `move_path`): its diff kept, and applied
    /// to the contents before it where they are known; where it is not
    /// applied, the event has no after contents and `not_applied` names it.
    fn update(
        &mut self,
        ctx: &Change<'_>,
        rel: &str,
        c: &Value,
        not_applied: &mut Vec<NotApplied>,
    ) -> Result<Event> {
        let diff = c.get("unified_diff").and_then(Value::as_str).unwrap_or("");
        let to = c
            .get("move_path")
            .and_then(Value::as_str)
            .map(|m| in_workspace(m, ctx.cwd));
        let kind = if to.is_some() {
            EventKind::FileMove
        } else {
            EventKind::FileEdit
        };
        let mut e = Event::new(kind, "");
        e.to_path = to.clone();
        e.diff = Some((self.put)(diff.as_bytes())?);
        let before = self.known(rel);
        let applied = diff_applied(&before, rel, diff);
        if let Known::Bytes(b) = &before {
            e.before = Some((self.put)(b)?);
        }
        let after = match applied {
            Ok(a) => {
                e.after = Some((self.put)(&a)?);
                e = e.with_meta("contents", "exact");
                Known::Bytes(a)
            }
            Err(why) => {
                not_applied.push(NotApplied {
                    file: ctx.name.to_string(),
                    line: ctx.line as u64,
                    path: rel.to_string(),
                    reason: why.clone(),
                });
                e = e.with_meta("contents", format!("diff not applied: {why}; not recorded"));
                Known::Unapplied
            }
        };
        match to {
            Some(t) => {
                self.set(ctx, rel, Known::Absent);
                self.set(ctx, &t, after);
            }
            None => self.set(ctx, rel, after),
        }
        Ok(e)
    }
}

/// `diff` applied to what is known of the contents of `rel` before it,
/// or why it cannot be.
fn diff_applied(before: &Known, rel: &str, diff: &str) -> std::result::Result<Vec<u8>, String> {
    match before {
        Known::Bytes(b) => apply_diff(b, diff),
        Known::Absent => Err("the file does not exist before it".to_string()),
        Known::Unapplied => Err(
            "its contents before it are not known: an earlier diff of it was not applied"
                .to_string(),
        ),
        Known::Unknown => Err(if cairn_codec::paths::outside_workspace(rel).is_some() {
            "its contents before it are not known (a path outside the workspace is never read)"
                .to_string()
        } else {
            "its contents before it are not known (give --base DIR, the tree the session started from)".to_string()
        }),
    }
}

/// `path` as recorded: relative to `cwd` when it lies in it, a relative
/// path normalised, any other kept as given (history only).
fn in_workspace(path: &str, cwd: Option<&str>) -> String {
    let rel = relative(path, cwd);
    if cairn_codec::paths::outside_workspace(&rel).is_none() {
        cairn_codec::paths::normal_path(&rel).into_owned()
    } else {
        rel
    }
}

/// `before` with the unified `diff` applied (hunks placed as `patch`
/// places them, without fuzz), or why it does not apply.
pub fn apply_diff(before: &[u8], diff: &str) -> std::result::Result<Vec<u8>, String> {
    let patch = diffy::Patch::from_bytes(diff.as_bytes())
        .map_err(|e| format!("the diff cannot be read: {e}"))?;
    diffy::apply_bytes(before, &patch)
        .map_err(|e| format!("the diff does not apply to its contents before it: {e}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_applies_to_the_contents_it_was_made_from_and_no_other() {
        let diff = "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n";
        assert_eq!(apply_diff(b"a\nb\nc\n", diff).unwrap(), b"a\nB\nc\n");
        let e = apply_diff(b"a\nx\nc\n", diff).unwrap_err();
        assert!(e.contains("does not apply"), "{e}");
        let e = apply_diff(b"a\n", "@@ nonsense\n").unwrap_err();
        assert!(
            e.contains("does not apply") || e.contains("cannot be read"),
            "{e}"
        );
    }

    /// Codex makes an update's diff with `similar` (`unified_diff()` with
    /// a context radius, no file headers); such a diff applies, also
    /// where a file has no final newline.
    #[test]
    fn a_diff_as_codex_makes_it_applies_with_or_without_a_final_newline() {
        for (a, b) in [
            ("one\ntwo\nthree\n", "one\n2\nthree\nfour\n"),
            ("one\ntwo\nthree", "one\ntwo\nthree!"),
            ("", "new\nfile"),
            ("x\ny", ""),
        ] {
            let d = similar::TextDiff::from_lines(a, b)
                .unified_diff()
                .context_radius(1)
                .to_string();
            assert_eq!(apply_diff(a.as_bytes(), &d).unwrap(), b.as_bytes(), "{d}");
        }
    }

    #[test]
    fn an_output_reports_failure_by_exit_code_or_success() {
        assert!(output_of(&json!("fine")).ok);
        assert!(!output_of(&json!(r#"{"output":"x","metadata":{"exit_code":2}}"#)).ok);
        assert!(output_of(&json!(r#"{"output":"x","metadata":{"exit_code":0}}"#)).ok);
        assert!(!output_of(&json!("Exit code: 1\nWall time: 0.1 seconds\nOutput:\n")).ok);
        assert!(output_of(&json!("Exit code: 0\nOutput:\n")).ok);
        assert!(!output_of(&json!({"content": "denied", "success": false})).ok);
    }

    #[test]
    fn a_command_is_the_script_of_a_shell() {
        assert_eq!(
            command_text(&json!(["bash", "-lc", "ls -la"])).unwrap(),
            "ls -la"
        );
        assert_eq!(command_text(&json!(["ls", "-la"])).unwrap(), "ls -la");
        assert_eq!(command_text(&json!("echo hi")).unwrap(), "echo hi");
    }
}
