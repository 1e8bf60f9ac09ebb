//! Claude Code session transcripts in: `Store::import_claude_code`.
//!
//! Claude Code writes one JSONL transcript per session
//! (`~/.claude/projects/<project>/<session>.jsonl`, its subagents under
//! `<session>/subagents/`). Each line becomes zero or more events:
//!
//! - a user's text: `prompt`; an assistant's text blocks: `reply` (the
//!   blocks of one `message.id` are one reply, in order, recorded at the
//!   message's first text line);
//! - before each prompt of the user (not a subagent's): a point labelled
//!   `Before prompt N`, a `checkpoint.create` record without a manifest
//!   (a transcript does not say what the files were, so no tree is
//!   invented) whose `parents` names the record the prompt continues
//!   from (by `parentUuid`, see [`ParsedTranscript::points`]). The branch
//!   graph makes each point a child of the point of the prompt the
//!   conversation continued from, so a rewind (two prompts with the same
//!   `parentUuid`) is a fork in `cairn branches`; a rollback to a point
//!   refuses ([`cairn_snapshot::SnapshotError::ConversationPoint`]). A
//!   session whose prompts the hooks took checkpoints before, with the
//!   files, gets no points;
//! - `tool_use`: `tool_call` (tool name, a summary of its input bounded to
//!   [`MAX_TOOL_SUMMARY_BYTES`], `ok` from the matching `tool_result`'s
//!   `is_error`); a Bash call keeps its command and is marked
//!   `may_change_unrecorded_files`;
//! - an Edit, Write or MultiEdit whose result (`toolUseResult`) holds the
//!   file's contents: a file event with exact contents, the before blob
//!   `originalFile` and the after blob computed from it (Write: `content`;
//!   Edit: `oldString` replaced by `newString`, every occurrence with
//!   `replaceAll`; MultiEdit: each edit in order), checked against
//!   `structuredPatch`. Where they disagree the event keeps no after
//!   contents and says so (`meta.claude_code.contents`), never a guess;
//!   NotebookEdit, whose result holds no whole file, is a file write
//!   without contents;
//! - `file-history-snapshot`: a `custom` record naming the files and the
//!   backups Claude Code keeps of them, with their contents as blobs where
//!   the backups are found;
//! - a compaction (`system` `compact_boundary`, `summary`, a compact
//!   summary prompt): a `custom` marker labelled `compaction`;
//! - every other record (progress, other `system` records, types this
//!   importer does not know): a `custom` record holding it, labelled with
//!   its type; those of unknown types are counted in the report.
//!
//! Every event keeps the line's `uuid`, `parentUuid`, `cwd`, `gitBranch`
//! and `version` under `meta.claude_code`, and a key naming the line
//! (a hash of its bytes and the event's place among the line's events), by
//! which an import again skips what is recorded already: importing the same
//! transcript twice adds nothing, and a transcript that grew adds only its
//! new lines. Paths are made relative to the session's `cwd` by name; a path
//! outside it is kept as given (history only, see
//! [`cairn_codec::paths::outside_workspace`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use cairn_codec::event::Meta;
use cairn_codec::{BlobHash, Event, EventKind, Lsn, Timestamp};
use cairn_query::Filter;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::Store;

pub use super::agent::MAX_TOOL_SUMMARY_BYTES;
use super::agent::{
    self, json_lines, summary_json as summary, AgentCounts, Appended, IMPORT_BATCH_EVENTS,
};

/// The most bytes of a record kept whole in a generic record's meta: a
/// progress record with a tool's whole output would otherwise repeat it.
/// Larger ones keep their type and a note that they were cut.
pub const MAX_GENERIC_RECORD_BYTES: usize = 16 * 1024;

/// A generic record's copy of its line `o` (`raw` its bytes): the whole
/// object, or `cut()` (what names it) when it is over
/// [`MAX_GENERIC_RECORD_BYTES`].
pub(crate) fn kept_record(
    raw: &[u8],
    o: &Map<String, Value>,
    cut: impl FnOnce() -> Value,
) -> Value {
    if raw.len() <= MAX_GENERIC_RECORD_BYTES {
        Value::Object(o.clone())
    } else {
        cut()
    }
}

/// The most bytes of one transcript line: Claude Code writes a Write's
/// whole file into a line, twice (input and result), so lines are large,
/// but a line past this is no transcript.
pub const MAX_TRANSCRIPT_LINE_BYTES: usize = cairn_codec::json::MAX_JSON_LINE_BYTES;

/// The meta key under which every imported event keeps its Claude Code
/// fields.
pub const META_CLAUDE_CODE: &str = "claude_code";

/// How [`Store::import_claude_code`] imports.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ClaudeCodeOptions {
    /// Where the file-history backups are (`<dir>/<session>/<backupFileName>`);
    /// `None`: `~/.claude/file-history`.
    pub file_history: Option<PathBuf>,
}

impl ClaudeCodeOptions {
    /// These options, with the backups looked for under `dir`.
    pub fn with_file_history(self, dir: Option<PathBuf>) -> ClaudeCodeOptions {
        ClaudeCodeOptions { file_history: dir }
    }
}

/// What [`Store::import_claude_code`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaudeCodeReport {
    /// Files read, records appended and skipped, LSNs and sessions.
    pub imported: AgentCounts,
    /// Lines read.
    pub lines: u64,
    /// Records of types the importer does not know, by type, kept as
    /// generic records.
    pub unknown: BTreeMap<String, u64>,
    /// File events whose computed contents disagree with the transcript's
    /// `structuredPatch` (recorded without after contents): file, line and path.
    pub mismatches: Vec<String>,
    /// File-history backups stored as blobs.
    pub backups: u64,
    /// Backups named but not found.
    pub backups_missing: u64,
}

impl Store {
    /// Imports Claude Code transcripts: each of `paths` a session's
    /// `.jsonl`, or a project directory (every `.jsonl` in it and the
    /// subagent transcripts under `<session>/subagents/`). See the module
    /// docs for what each line becomes. A line that is not JSON is an
    /// error naming the file and line, and nothing of that file is
    /// recorded; files before it stay recorded.
    pub fn import_claude_code(
        &self,
        paths: &[PathBuf],
        opts: &ClaudeCodeOptions,
    ) -> Result<ClaudeCodeReport> {
        let mut report = ClaudeCodeReport::default();
        let mut files = Vec::new();
        for p in paths {
            transcripts(p, &mut files)?;
        }
        let history = opts.file_history.clone().or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".claude/file-history"))
        });
        for f in files {
            self.import_transcript(&f, history.as_deref(), &mut report)?;
        }
        Ok(report)
    }

    fn import_transcript(
        &self,
        file: &Path,
        history: Option<&Path>,
        report: &mut ClaudeCodeReport,
    ) -> Result<()> {
        let text = std::fs::read(file).map_err(|source| Error::Io {
            op: "read",
            path: file.to_path_buf(),
            source,
        })?;
        let name = file.display().to_string();
        let mut put = |b: &[u8]| self.put_blob(b);
        let mut backup = |session: &str, name: &str| -> Option<Vec<u8>> {
            let dir = history?;
            std::fs::read(dir.join(session).join(name)).ok()
        };
        let mut parsed = parse_transcript(&text, &name, &mut put, &mut backup)?;
        report.imported.files += 1;
        report.lines += parsed.lines;
        report.backups += parsed.backups;
        report.backups_missing += parsed.backups_missing;
        report
            .mismatches
            .extend(std::mem::take(&mut parsed.mismatches));
        for (t, n) in std::mem::take(&mut parsed.unknown) {
            *report.unknown.entry(t).or_default() += n;
        }
        let mut sessions: Vec<String> = parsed.events.iter().map(|e| e.session.clone()).collect();
        sessions.sort();
        sessions.dedup();
        let mut recorded = Recorded::default();
        for s in &sessions {
            report.imported.saw_session(s);
            self.recorded_lines(s, &mut recorded)?;
        }
        let total = parsed.events.len();
        let fresh: Vec<Event> = std::mem::take(&mut parsed.events)
            .into_iter()
            .filter(|e| recorded.is_fresh(e))
            .collect();
        report.imported.already += (total - fresh.len()) as u64;
        self.append_transcript(fresh, &parsed.points, &mut recorded, report)
    }

    /// Notes what the store holds of `session` in `recorded`: the line key
    /// and LSN of each record an import made, the file events the hooks
    /// recorded live, its first record, and whether the hooks recorded its
    /// prompts' checkpoints.
    fn recorded_lines(&self, session: &str, recorded: &mut Recorded) -> Result<()> {
        let f = Filter {
            session: Some(session.to_string()),
            ..Filter::all()
        };
        for r in self.query(|q| q.list(&f))? {
            if let Some(k) = line_key(&r.event) {
                recorded.lines.insert(k.to_string(), r.lsn);
            } else if let Some(id) = file_tool_use(&r.event) {
                // A file event the hooks recorded live: the
                // transcript's copy of it is not recorded again.
                recorded.hooked_files.insert(id.to_string());
            } else if is_hook_prompt_checkpoint(&r.event) {
                recorded.hooked_prompts.insert(session.to_string());
            }
        }
        Ok(())
    }

    /// Appends `fresh` (the events no earlier import recorded) in atomic
    /// batches of [`IMPORT_BATCH_EVENTS`]. A point before a prompt ends
    /// the batch before it, so that the record it continues from has its
    /// LSN, which it names as its `parents`.
    fn append_transcript(
        &self,
        fresh: Vec<Event>,
        points: &HashMap<String, Vec<String>>,
        recorded: &mut Recorded,
        report: &mut ClaudeCodeReport,
    ) -> Result<()> {
        let mut batch: Vec<Event> = Vec::new();
        for mut e in fresh {
            if let Some(from) = line_key(&e).and_then(|k| points.get(k)) {
                if recorded.hooked_prompts.contains(&e.session) {
                    // The hooks took a checkpoint with the files before
                    // each prompt: those are the points to rewind to.
                    continue;
                }
                self.append_lines(std::mem::take(&mut batch), recorded, report)?;
                match recorded.point_parent(from) {
                    Some(p) => e.parents = vec![p],
                    // Nothing before it to continue from: no point (the
                    // same on every import of the transcript).
                    None => continue,
                }
            }
            batch.push(e);
            if batch.len() >= IMPORT_BATCH_EVENTS {
                self.append_lines(std::mem::take(&mut batch), recorded, report)?;
            }
        }
        self.append_lines(batch, recorded, report)
    }

    /// Appends `batch` atomically, noting the LSN of each line key.
    fn append_lines(
        &self,
        batch: Vec<Event>,
        recorded: &mut Recorded,
        report: &mut ClaudeCodeReport,
    ) -> Result<()> {
        let Some((a, b)) = self.append_batch(&batch)? else {
            return Ok(());
        };
        for (i, e) in batch.iter().enumerate() {
            let lsn = Lsn(a.0 + i as u64);
            if let Some(k) = line_key(e) {
                recorded.lines.insert(k.to_string(), lsn);
            }
        }
        report.imported.add(&Appended {
            records: b.0 - a.0 + 1,
            already: 0,
            range: Some((a, b)),
        });
        Ok(())
    }
}

/// What the store holds of the sessions of a transcript being imported.
#[derive(Debug, Default)]
struct Recorded {
    /// The LSN of each record an import made, by its line key.
    lines: HashMap<String, Lsn>,
    /// The `tool_use_id`s of the file events the hooks recorded.
    hooked_files: HashSet<String>,
    /// Sessions whose prompts the hooks took checkpoints before.
    hooked_prompts: HashSet<String>,
}

impl Recorded {
    /// True if no earlier import (or the hooks) recorded `e`.
    fn is_fresh(&self, e: &Event) -> bool {
        let hooked = file_tool_use(e).is_some_and(|id| self.hooked_files.contains(id));
        !hooked && line_key(e).is_none_or(|k| !self.lines.contains_key(k))
    }

    /// The record a point before a prompt continues from: the first of
    /// `from` (line keys, see [`ParsedTranscript::points`]) recorded.
    fn point_parent(&self, from: &[String]) -> Option<Lsn> {
        from.iter().find_map(|k| self.lines.get(k).copied())
    }
}

/// True for a checkpoint the hooks took before a prompt (with the files).
fn is_hook_prompt_checkpoint(e: &Event) -> bool {
    e.kind == EventKind::CheckpointCreate
        && e.root.is_some()
        && e.label
            .as_deref()
            .is_some_and(|l| l.starts_with(BEFORE_PROMPT))
}

/// What the label of the point before a prompt starts with.
const BEFORE_PROMPT: &str = "Before prompt ";

/// The label of the point before the session's prompt `n` (from 1): the
/// one the hooks give the checkpoint they take then, and the importer the
/// tree-less point it records, so a user rewinds to either by one name.
pub fn before_prompt_label(n: u64) -> String {
    format!("{BEFORE_PROMPT}{n}")
}

/// The `tool_use_id` of a file event, if it names one.
fn file_tool_use(e: &Event) -> Option<&str> {
    if !e.kind.is_file_op() {
        return None;
    }
    e.meta.as_ref()?.get("tool_use_id")?.as_str()
}

/// The key naming the transcript line an event came from, if it came from one.
fn line_key(e: &Event) -> Option<&str> {
    e.meta.as_ref()?.get(META_CLAUDE_CODE)?.get("key")?.as_str()
}

/// The transcripts `p` names: itself if a file; if a directory, every
/// `.jsonl` in it (sorted) and in each `<session>/subagents/`.
fn transcripts(p: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let io = |op, source| Error::Io {
        op,
        path: p.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(p).map_err(|e| io("read", e))?;
    if !meta.is_dir() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(p).map_err(|e| io("list", e))? {
        let path = entry.map_err(|e| io("list", e))?.path();
        if path.extension().is_some_and(|x| x == "jsonl") && path.is_file() {
            found.push(path.clone());
            let sub = path.with_extension("").join("subagents");
            if let Ok(rd) = std::fs::read_dir(&sub) {
                let mut subs: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|s| s.extension().is_some_and(|x| x == "jsonl"))
                    .collect();
                subs.sort();
                found.extend(subs);
            }
        }
    }
    // Sessions in name order, each followed by its subagents.
    found.sort_by_key(|p| session_order(p));
    out.extend(found);
    Ok(())
}

/// Sort key: the session transcript's path, then its subagents'.
fn session_order(p: &Path) -> (PathBuf, PathBuf) {
    match p.parent().filter(|d| d.ends_with("subagents")) {
        Some(d) => (
            d.parent()
                .map(|s| s.with_extension("jsonl"))
                .unwrap_or_default(),
            p.to_path_buf(),
        ),
        None => (p.to_path_buf(), PathBuf::new()),
    }
}

/// What one transcript gives: its events, in order, and what the report
/// counts.
#[derive(Debug, Default)]
pub struct ParsedTranscript {
    /// The events, in the transcript's order.
    pub events: Vec<Event>,
    /// Lines read.
    pub lines: u64,
    /// Records of unknown types, by type.
    pub unknown: BTreeMap<String, u64>,
    /// File events whose contents disagree with `structuredPatch`.
    pub mismatches: Vec<String>,
    /// Backups stored.
    pub backups: u64,
    /// Backups named but not found.
    pub backups_missing: u64,
    /// The points before prompts (`checkpoint.create` records without a
    /// manifest) by their line key: the line keys of the records each one
    /// may continue from, nearest first (the records made from the
    /// prompt's `parentUuid` line and its ancestors, then the session's
    /// first record in the transcript, which comes before every point of
    /// it: a prompt the transcript says continues from nothing it holds is
    /// a root). The import names the first one recorded as the point's
    /// `parents`; a point with none (a prompt on the transcript's first
    /// line) is not recorded.
    pub points: HashMap<String, Vec<String>>,
}

/// The most records a point before a prompt looks for among the lines it
/// continues from: the nearest one is nearly always recorded (only a file
/// event the hooks recorded is skipped), and the walk up a long
/// conversation stops soon after.
pub const MAX_POINT_CANDIDATES: usize = 8;

/// The line keys of the records of `from` and the lines it continues
/// from, nearest first, at most [`MAX_POINT_CANDIDATES`]. The walk
/// stops at a line the transcript does not hold, and after as many steps
/// as there are lines (a transcript whose `parentUuid`s loop).
fn ancestor_keys(
    from: Option<&str>,
    parent_of: &HashMap<String, String>,
    key_of: &HashMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = from;
    let mut steps = 0;
    while let Some(u) = at {
        if out.len() >= MAX_POINT_CANDIDATES || steps > parent_of.len() {
            break;
        }
        if let Some(k) = key_of.get(u) {
            out.push(k.clone());
        }
        at = parent_of.get(u).map(String::as_str);
        steps += 1;
    }
    out
}

/// True for a subagent's line: its prompts come from the agent, not from
/// the user, so they are no points to rewind to.
fn is_subagent(o: &Map<String, Value>) -> bool {
    o.contains_key("agentId") || o.get("isSidechain").and_then(Value::as_bool) == Some(true)
}

/// Record types this importer knows (others are counted as unknown).
const KNOWN_TYPES: [&str; 7] = [
    "user",
    "assistant",
    "system",
    "file-history-snapshot",
    "progress",
    "summary",
    "queue-operation",
];

/// A tool call as the transcript gives it: its tool's name, the model
/// that made it, its input.
type Call = (String, Option<String>, Value);

/// What a transcript's first pass finds.
#[derive(Default)]
struct Calls {
    /// Whether each tool call failed, by `tool_use_id`.
    failed: HashMap<String, bool>,
    /// Each tool call, by id.
    calls: HashMap<String, Call>,
    /// The joined text of each assistant message, by `message.id`.
    texts: HashMap<String, String>,
    /// The session of the first line that names one.
    session: Option<String>,
}

/// The first pass over a transcript's lines: results and calls can then
/// be matched, and one message's text blocks joined.
fn calls_of(lines: &[super::agent::JsonLine<'_>]) -> Calls {
    let mut r = Calls::default();
    let (failed, calls, texts, file_session) =
        (&mut r.failed, &mut r.calls, &mut r.texts, &mut r.session);
    for (_, _, o) in lines {
        if file_session.is_none() {
            *file_session = session_of(o);
        }
        let Some(content) = o
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        let mid = o
            .get("message")
            .and_then(|m| m.get("id"))
            .and_then(Value::as_str);
        let model = o
            .get("message")
            .and_then(|m| m.get("model"))
            .and_then(Value::as_str);
        for b in content {
            match b.get("type").and_then(Value::as_str) {
                Some("tool_result") => {
                    if let Some(id) = b.get("tool_use_id").and_then(Value::as_str) {
                        let err = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                        failed.insert(id.to_string(), err);
                    }
                }
                Some("tool_use") => {
                    if let (Some(id), Some(n)) = (
                        b.get("id").and_then(Value::as_str),
                        b.get("name").and_then(Value::as_str),
                    ) {
                        calls.insert(
                            id.to_string(),
                            (
                                n.to_string(),
                                model.map(str::to_string),
                                b.get("input").cloned().unwrap_or(Value::Null),
                            ),
                        );
                    }
                }
                Some("text") => {
                    if let (Some(mid), Some(t)) = (mid, b.get("text").and_then(Value::as_str)) {
                        texts.entry(mid.to_string()).or_default().push_str(t);
                    }
                }
                _ => {}
            }
        }
    }
    r
}

/// Parses a whole transcript (`name` names it in errors) into events.
/// `put` stores a blob; `backup(session, backupFileName)` gives a
/// file-history backup's bytes if it is found. No I/O of its own.
pub fn parse_transcript(
    text: &[u8],
    name: &str,
    put: &mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    backup: &mut dyn FnMut(&str, &str) -> Option<Vec<u8>>,
) -> Result<ParsedTranscript> {
    // First pass: every line as JSON, so a malformed one refuses the file
    // before anything is made of it, and results can be matched to calls.
    let lines = json_lines(text, name, MAX_TRANSCRIPT_LINE_BYTES)?;
    let mut calls = calls_of(&lines);
    let file_session = calls.session.take().unwrap_or_else(|| {
        Path::new(name).file_stem().map_or_else(
            || "claude-code".into(),
            |s| s.to_string_lossy().into_owned(),
        )
    });
    let mut t = Transcript {
        name,
        calls,
        replied: HashSet::new(),
        graph: Conversation::default(),
        put,
        backup,
        out: ParsedTranscript {
            lines: lines.len() as u64,
            ..ParsedTranscript::default()
        },
    };
    let mut last_ts: Option<Timestamp> = None;
    for (n, raw, o) in &lines {
        let line = TranscriptLine::of(*n, raw, o, &file_session, last_ts);
        last_ts = Some(line.ts);
        t.line(&line)?;
    }
    Ok(t.out)
}

/// One line of a transcript as it is mapped: where it is, its place in
/// the conversation, its session and time (that of the line before when
/// it has none).
struct TranscriptLine<'l> {
    n: usize,
    raw: &'l [u8],
    o: &'l Map<String, Value>,
    uuid: Option<&'l str>,
    /// The line it continues from (`parentUuid`, else `logicalParentUuid`).
    parent_uuid: Option<&'l str>,
    /// A hash of its bytes: its events' keys are `{key_base}#{i}`.
    key_base: String,
    session: String,
    ts: Timestamp,
    cwd: Option<&'l str>,
    /// The record's `type`.
    kind: &'l str,
}

impl<'l> TranscriptLine<'l> {
    fn of(
        n: usize,
        raw: &'l [u8],
        o: &'l Map<String, Value>,
        file_session: &str,
        last_ts: Option<Timestamp>,
    ) -> TranscriptLine<'l> {
        let ts = o
            .get("timestamp")
            .or_else(|| o.get("snapshot").and_then(|s| s.get("timestamp")))
            .and_then(Value::as_str)
            .and_then(|t| Timestamp::parse(t).ok())
            .or(last_ts)
            .unwrap_or(Timestamp(0));
        TranscriptLine {
            n,
            raw,
            o,
            uuid: o.get("uuid").and_then(Value::as_str),
            parent_uuid: ["parentUuid", "logicalParentUuid"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str)),
            key_base: blake3::hash(raw).to_hex()[..32].to_string(),
            session: session_of(o).unwrap_or_else(|| file_session.to_string()),
            ts,
            cwd: o.get("cwd").and_then(Value::as_str),
            kind: o.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// A new event of this line's session and time.
    fn event(&self, k: EventKind) -> Event {
        let mut e = Event::new(k, self.session.clone());
        e.ts = self.ts;
        e
    }

    /// A compaction marker with `text`.
    fn compaction(&self, text: Option<String>) -> Event {
        let mut e = self.event(EventKind::Custom);
        e.text = text;
        e.label = Some("compaction".into());
        e
    }
}

/// The conversation's graph as a transcript is read: each line's parent,
/// by `uuid`; the key of the last event each line made; the key of each
/// session's first event; prompts counted by session.
#[derive(Default)]
struct Conversation {
    parent_of: HashMap<String, String>,
    key_of: HashMap<String, String>,
    first_key: HashMap<String, String>,
    prompts: HashMap<String, u64>,
}

impl Conversation {
    /// Notes the line's parent, before its events are made.
    fn link(&mut self, l: &TranscriptLine<'_>) {
        if let (Some(u), Some(p)) = (l.uuid, l.parent_uuid) {
            self.parent_of.insert(u.to_string(), p.to_string());
        }
    }

    /// The point before the prompt on line `l`, labelled by its number in
    /// the session, and the line keys of the records it may continue
    /// from (see [`ParsedTranscript::points`]).
    fn point_before(&mut self, l: &TranscriptLine<'_>) -> (Event, Vec<String>) {
        let count = self.prompts.entry(l.session.clone()).or_default();
        *count += 1;
        let mut p = l.event(EventKind::CheckpointCreate);
        p.label = Some(before_prompt_label(*count));
        let mut from = ancestor_keys(l.parent_uuid, &self.parent_of, &self.key_of);
        from.extend(self.first_key.get(&l.session).cloned());
        (p, from)
    }

    /// Notes the keys of the `made` events of line `l`.
    fn made(&mut self, l: &TranscriptLine<'_>, made: usize) {
        if let (Some(u), Some(last)) = (l.uuid, made.checked_sub(1)) {
            self.key_of
                .insert(u.to_string(), format!("{}#{last}", l.key_base));
        }
        if made > 0 {
            self.first_key
                .entry(l.session.clone())
                .or_insert_with(|| format!("{}#0", l.key_base));
        }
    }
}

/// An assistant message's fields its events share.
struct Message<'l> {
    id: Option<&'l str>,
    model: Option<String>,
    usage: Option<&'l Value>,
}

/// What the reading of one transcript carries from line to line.
struct Transcript<'r> {
    name: &'r str,
    calls: Calls,
    /// The messages whose reply is made (at their first text line).
    replied: HashSet<String>,
    graph: Conversation,
    put: &'r mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    backup: &'r mut dyn FnMut(&str, &str) -> Option<Vec<u8>>,
    out: ParsedTranscript,
}

impl Transcript<'_> {
    /// Makes the events of line `l` (and the point before its prompt).
    fn line(&mut self, l: &TranscriptLine<'_>) -> Result<()> {
        self.graph.link(l);
        let mut point = None;
        let made = match l.kind {
            "user" => self.user(l, &mut point)?,
            "assistant" => self.assistant(l),
            "file-history-snapshot" => {
                let e = l.event(EventKind::Custom);
                let (put, backup) = (&mut *self.put, &mut *self.backup);
                let cwd = l.cwd;
                vec![snapshot_event(
                    e,
                    l.o,
                    &l.session,
                    cwd,
                    put,
                    backup,
                    &mut self.out,
                )?]
            }
            "system" if l.o.get("subtype").and_then(Value::as_str) == Some("compact_boundary") => {
                let mut e = l.compaction(Some("Conversation compacted".into()));
                if let Some(m) = l.o.get("compactMetadata") {
                    e = e.with_meta("compact", m.clone());
                }
                vec![e]
            }
            "summary" => {
                let text = l.o.get("summary").and_then(Value::as_str);
                vec![l.compaction(text.map(str::to_string))]
            }
            other => vec![self.generic(l, other)],
        };
        self.graph.made(l, made.len());
        // The point is keyed apart from the line's other events, whose
        // keys stay as they were before points were recorded.
        let point = point.map(|p| (String::from("point"), p));
        let made = made
            .into_iter()
            .enumerate()
            .map(|(i, e)| (i.to_string(), e));
        let cc = common_meta(l.o);
        for (i, e) in point.into_iter().chain(made) {
            let key = format!("{}#{i}", l.key_base);
            let e = agent::with_line_key(e, META_CLAUDE_CODE, cc.clone(), key);
            self.out.events.push(e);
        }
        Ok(())
    }

    /// A user's line: its prompt (with the point before it, in `point`) or
    /// compaction summary, and the file event of a tool result it holds.
    fn user(&mut self, l: &TranscriptLine<'_>, point: &mut Option<Event>) -> Result<Vec<Event>> {
        let content = l.o.get("message").and_then(|m| m.get("content"));
        let compact = l.o.get("isCompactSummary").and_then(Value::as_bool) == Some(true);
        let mut made = Vec::new();
        if let Some(t) = user_text(content) {
            if compact {
                made.push(l.compaction(Some(t)));
            } else {
                if !is_subagent(l.o) {
                    let (p, from) = self.graph.point_before(l);
                    self.out
                        .points
                        .insert(format!("{}#point", l.key_base), from);
                    *point = Some(p);
                }
                made.push(l.event(EventKind::Prompt).with_text(t));
            }
        }
        if let Some(Value::Object(r)) = l.o.get("toolUseResult") {
            let id = content
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .find_map(|b| b.get("tool_use_id").and_then(Value::as_str))
                })
                .unwrap_or("");
            let call = self.calls.calls.get(id);
            let mismatches = &mut self.out.mismatches;
            if let Some(mut e) = file_event(r, call, l.cwd, self.put, mismatches, self.name, l.n)? {
                e.session = l.session.clone();
                e.ts = l.ts;
                e.ok = !self.calls.failed.get(id).copied().unwrap_or(false);
                e.meta
                    .get_or_insert_with(Meta::new)
                    .insert("tool_use_id", id.to_string());
                made.push(e);
            }
        }
        Ok(made)
    }

    /// An assistant's line: the reply of its message (at the message's
    /// first text line) and its tool calls.
    fn assistant(&mut self, l: &TranscriptLine<'_>) -> Vec<Event> {
        let msg = l.o.get("message");
        let m = Message {
            id: msg.and_then(|m| m.get("id")).and_then(Value::as_str),
            model: msg
                .and_then(|m| m.get("model"))
                .and_then(Value::as_str)
                .map(str::to_string),
            usage: msg.and_then(|m| m.get("usage")),
        };
        let blocks = msg
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let mut made = Vec::new();
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => made.extend(self.reply(l, &m)),
                Some("tool_use") => made.push(self.tool_use(l, &m, b)),
                _ => {}
            }
        }
        made
    }

    /// The reply of message `m`, its text blocks joined, once per message.
    fn reply(&mut self, l: &TranscriptLine<'_>, m: &Message<'_>) -> Option<Event> {
        let mid = m.id?;
        if !self.replied.insert(mid.to_string()) {
            return None;
        }
        let text = self.calls.texts.get(mid).cloned().unwrap_or_default();
        let mut e = l.event(EventKind::Reply).with_text(text);
        e.model = m.model.clone();
        if let Some(u) = m.usage {
            e = e.with_meta("usage", u.clone());
        }
        Some(e.with_meta("message_id", mid))
    }

    /// The `tool_call` of a `tool_use` block `b` of message `m`.
    fn tool_use(&self, l: &TranscriptLine<'_>, m: &Message<'_>, b: &Value) -> Event {
        let id = b.get("id").and_then(Value::as_str).unwrap_or("");
        let tool = b.get("name").and_then(Value::as_str).unwrap_or("?");
        let input = b.get("input").cloned().unwrap_or(Value::Null);
        let mut e = l.event(EventKind::ToolCall).with_text(summary(&input));
        e.tool = Some(tool.to_string());
        e.model = m.model.clone();
        e.ok = !self.calls.failed.get(id).copied().unwrap_or(false);
        let mut e = e.with_meta("tool_use_id", id);
        if tool == "Bash" {
            let command = input.get("command").and_then(Value::as_str);
            e = agent::shell_call(e, command.map(str::to_string));
        }
        if let Some(mid) = m.id {
            e = e.with_meta("message_id", mid);
        }
        e
    }

    /// A `custom` record holding a line of type `kind` (cut when large),
    /// labelled with its type and subtype; a type not known is counted.
    fn generic(&mut self, l: &TranscriptLine<'_>, kind: &str) -> Event {
        if !KNOWN_TYPES.contains(&kind) {
            *self.out.unknown.entry(kind.to_string()).or_default() += 1;
        }
        let mut e = l.event(EventKind::Custom);
        let label = match l.o.get("subtype").and_then(Value::as_str) {
            Some(s) => format!("{kind}:{s}"),
            None => kind.to_string(),
        };
        e.label = Some(if label.is_empty() {
            "unknown".into()
        } else {
            label
        });
        let record = kept_record(l.raw, l.o, || json!({"type": kind, "cut": l.raw.len()}));
        e.with_meta("record", record)
    }
}

/// The text of a user's message `content`: a string, or its text blocks
/// joined by newlines; `None` when it has none (a tool result).
fn user_text(content: Option<&Value>) -> Option<String> {
    match content {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(a)) => {
            let t: Vec<&str> = a
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            (!t.is_empty()).then(|| t.join("\n"))
        }
        _ => None,
    }
}

/// `e` as the record of a `file-history-snapshot` line `o`: the files it
/// names (relative to `cwd`), their versions and backups, and each backup
/// found (`backup(session, backupFileName)`) stored as a blob.
fn snapshot_event(
    mut e: Event,
    o: &Map<String, Value>,
    session: &str,
    cwd: Option<&str>,
    put: &mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    backup: &mut dyn FnMut(&str, &str) -> Option<Vec<u8>>,
    out: &mut ParsedTranscript,
) -> Result<Event> {
    e.label = Some("file-history-snapshot".into());
    let mut files = Map::new();
    let backups = o
        .get("snapshot")
        .and_then(|s| s.get("trackedFileBackups"))
        .and_then(Value::as_object);
    for (path, b) in backups.into_iter().flatten() {
        let mut f = Map::new();
        if let Some(v) = b.get("version") {
            f.insert("version".into(), v.clone());
        }
        if let Some(bn) = b.get("backupFileName").and_then(Value::as_str) {
            f.insert("backup".into(), json!(bn));
            match backup(session, bn) {
                Some(bytes) => {
                    f.insert("blob".into(), json!(put(&bytes)?.to_hex()));
                    out.backups += 1;
                }
                None => out.backups_missing += 1,
            }
        }
        let rel = relative(path, cwd);
        e.files.push(rel.clone());
        files.insert(rel, Value::Object(f));
    }
    e = e.with_meta("files", Value::Object(files));
    if let Some(m) = o.get("messageId") {
        e = e.with_meta("message_id", m.clone());
    }
    Ok(e)
}

/// The session a line belongs to: its `sessionId`, and for a subagent's
/// line (`agentId`) a session of its own, `<sessionId>:<agentId>`.
fn session_of(o: &Map<String, Value>) -> Option<String> {
    let s = o.get("sessionId").and_then(Value::as_str)?;
    Some(match o.get("agentId").and_then(Value::as_str) {
        Some(a) => format!("{s}:{a}"),
        None => s.to_string(),
    })
}

/// The line's fields every event keeps under `meta.claude_code`.
fn common_meta(o: &Map<String, Value>) -> Map<String, Value> {
    let mut m = Map::new();
    for (from, to) in [
        ("uuid", "uuid"),
        ("parentUuid", "parent_uuid"),
        ("logicalParentUuid", "logical_parent_uuid"),
        ("cwd", "cwd"),
        ("gitBranch", "git_branch"),
        ("version", "version"),
        ("isSidechain", "sidechain"),
    ] {
        if let Some(v) = o.get(from).filter(|v| !v.is_null()) {
            m.insert(to.into(), v.clone());
        }
    }
    if let (Some(s), Some(_)) = (o.get("sessionId").and_then(Value::as_str), o.get("agentId")) {
        m.insert("parent_session".into(), json!(s));
    }
    m
}

/// `path` relative to `cwd` by name (`/w/src/a.rs` in `/w` is `src/a.rs`);
/// as given when it lies outside `cwd` or there is no `cwd`.
pub fn relative(path: &str, cwd: Option<&str>) -> String {
    if let Some(cwd) = cwd {
        let cwd = cwd.trim_end_matches('/');
        if let Some(rest) = path.strip_prefix(cwd).and_then(|r| r.strip_prefix('/')) {
            if !rest.is_empty() && cairn_codec::paths::outside_workspace(rest).is_none() {
                return cairn_codec::paths::normal_path(rest).into_owned();
            }
        }
    }
    path.to_string()
}

/// The file event of a tool result that holds a file's contents (Edit,
/// Write, MultiEdit, NotebookEdit), or `None` for any other result.
fn file_event(
    r: &Map<String, Value>,
    call: Option<&(String, Option<String>, Value)>,
    cwd: Option<&str>,
    put: &mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    mismatches: &mut Vec<String>,
    name: &str,
    line: usize,
) -> Result<Option<Event>> {
    let Some(path) = r
        .get("filePath")
        .or_else(|| r.get("notebook_path"))
        .and_then(Value::as_str)
    else {
        return Ok(None);
    };
    let original = r.get("originalFile").and_then(Value::as_str);
    let Some((kind, after)) = written(r, call, original) else {
        return Ok(None);
    };
    let mut e = Event::new(kind, "");
    e.path = Some(relative(path, cwd));
    e.tool = call.map(|c| c.0.clone());
    e.model = call.and_then(|c| c.1.clone());
    if let Some(o) = original {
        e.before = Some(put(o.as_bytes())?);
    }
    let after = checked_after(after, kind, r, original);
    match &after {
        After::Exact(a) => e.after = Some(put(a.as_bytes())?),
        After::Disagrees => mismatches.push(format!("{name}:{line}: {path}")),
        After::NotInTranscript => {}
    }
    Ok(Some(e.with_meta("contents", after.words())))
}

/// The kind of file event a tool result `r` makes and the contents after
/// it, computed from the contents before it (`original`): a Write's
/// `content`, an Edit's replacement, a MultiEdit's edits in order;
/// `None` for a result that writes no file.
fn written(
    r: &Map<String, Value>,
    call: Option<&Call>,
    original: Option<&str>,
) -> Option<(EventKind, Option<String>)> {
    let str_of = |k: &str| r.get(k).and_then(Value::as_str);
    if let Some(c) = str_of("content").filter(|_| r.contains_key("type")) {
        // Write: `type` is `create` or `update`.
        let kind = if str_of("type") == Some("create") {
            EventKind::FileCreate
        } else {
            EventKind::FileWrite
        };
        Some((kind, Some(c.to_string())))
    } else if let (Some(old), Some(new)) = (str_of("oldString"), str_of("newString")) {
        let all = r
            .get("replaceAll")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let after = original.map(|f| replace(f, old, new, all));
        Some((EventKind::FileEdit, after.flatten()))
    } else if let Some(edits) = r.get("edits").and_then(Value::as_array).or_else(|| {
        call.and_then(|c| c.2.get("edits"))
            .and_then(Value::as_array)
    }) {
        Some((EventKind::FileEdit, edited(original, edits)))
    } else if call.map(|c| c.0.as_str()) == Some("NotebookEdit") || r.contains_key("notebook_path")
    {
        Some((EventKind::FileWrite, None))
    } else {
        None
    }
}

/// `original` with a MultiEdit's `edits` made in order; `None` when it is
/// not known or an edit cannot have been made to it.
fn edited(original: Option<&str>, edits: &[Value]) -> Option<String> {
    let mut cur = original.map(str::to_string);
    for ed in edits {
        let old = ed.get("old_string").and_then(Value::as_str);
        let new = ed.get("new_string").and_then(Value::as_str);
        let all = ed
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        cur = match (cur, old, new) {
            (Some(c), Some(o), Some(n)) => replace(&c, o, n, all),
            _ => None,
        };
    }
    cur
}

/// What is recorded of a file event's contents after it.
enum After {
    /// These contents, exact.
    Exact(String),
    /// Computed, but they disagree with the result's `structuredPatch`.
    Disagrees,
    /// The transcript does not give them.
    NotInTranscript,
}

impl After {
    /// What `meta.contents` says of them.
    fn words(&self) -> &'static str {
        match self {
            After::Exact(_) => "exact",
            After::Disagrees => "disagrees with structuredPatch: not recorded",
            After::NotInTranscript => "not in the transcript",
        }
    }
}

/// The contents `after` a file event of `kind`, checked against the
/// result's `structuredPatch` applied to `original` where it has one.
fn checked_after(
    after: Option<String>,
    kind: EventKind,
    r: &Map<String, Value>,
    original: Option<&str>,
) -> After {
    match (after, r.get("structuredPatch").and_then(Value::as_array)) {
        (Some(a), Some(hunks)) if !hunks.is_empty() && kind != EventKind::FileCreate => {
            match apply_hunks(original.unwrap_or(""), hunks) {
                // The patch has no "no newline at end of file" marker:
                // a file that ends without one agrees without it.
                Some(p) if p == a || p.strip_suffix('\n') == Some(a.as_str()) => After::Exact(a),
                _ => After::Disagrees,
            }
        }
        (Some(a), _) => After::Exact(a),
        (None, _) => After::NotInTranscript,
    }
}

/// The file event of one finished tool call, from what a Claude Code
/// `PostToolUse` hook is given (`tool_name`, `tool_input`,
/// `tool_response`): as the transcript import makes it from the same
/// call's result, with exact contents or none. `None` for a tool that
/// writes no file. The second value names the call when its contents
/// disagree with its `structuredPatch` (the event then has no `after`).
pub fn tool_file_event(
    tool: &str,
    input: &Value,
    response: &Value,
    cwd: Option<&str>,
    put: &mut dyn FnMut(&[u8]) -> Result<BlobHash>,
) -> Result<(Option<Event>, Vec<String>)> {
    let Some(r) = response.as_object() else {
        return Ok((None, Vec::new()));
    };
    let call = (tool.to_string(), None, input.clone());
    let mut mismatches = Vec::new();
    let e = file_event(r, Some(&call), cwd, put, &mut mismatches, "hook", 0)?;
    Ok((e, mismatches))
}

/// `text` with `old` replaced by `new` (the first occurrence, or all with
/// `all`); `None` when `old` is not in it (the edit cannot have been so).
fn replace(text: &str, old: &str, new: &str, all: bool) -> Option<String> {
    if old.is_empty() || !text.contains(old) {
        return None;
    }
    Some(if all {
        text.replace(old, new)
    } else {
        text.replacen(old, new, 1)
    })
}

/// `text` with `structuredPatch` hunks applied (each `oldStart`, and
/// `lines` prefixed ` `, `-` or `+`); `None` when a hunk does not match.
pub fn apply_hunks(text: &str, hunks: &[Value]) -> Option<String> {
    let src: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0usize;
    for h in hunks {
        let start = h.get("oldStart")?.as_u64()? as usize;
        let lines = h.get("lines")?.as_array()?;
        // `oldStart` counts from 1; 0 for a hunk at the start of an empty file.
        let from = start.saturating_sub(1);
        if from < at || from > src.len() {
            return None;
        }
        out.extend(src[at..from].iter().copied());
        at = from;
        for l in lines {
            let l = l.as_str()?;
            let (tag, body) = l.split_at(l.len().min(1));
            // The patch's lines have no line ends; the source's do, but for
            // its last line when the file does not end with one.
            match tag {
                " " | "-" => {
                    let have = src.get(at)?;
                    if have.trim_end_matches('\n').trim_end_matches('\r') != body
                        && have.trim_end_matches('\n') != body
                    {
                        return None;
                    }
                    if tag == " " {
                        out.push_str(have);
                    }
                    at += 1;
                }
                "+" => {
                    out.push_str(body);
                    out.push('\n');
                }
                "\\" => {}
                _ => return None,
            }
        }
    }
    out.extend(src[at..].iter().copied());
    Some(out)
}
