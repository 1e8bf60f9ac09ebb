//! `cairn report`: one self-contained page of a history (HTML, or
//! Markdown with `--format md`). This module gathers what the page shows
//! (the model); `html.rs` and `md.rs` write it. Everything is derived from
//! the store and the options alone, so the same store and options give
//! the same bytes.

mod html;
mod md;

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::jsonl::Record;
use cairn::{EventKind, Lsn};
use cairn::{Filter, Point};

use super::args::ReportFormat;
use super::hiargs::ReportPlan;
use super::output::one_line;
use super::records::summary;
use super::Settings;

/// The most characters of an event's summary line in the timeline: a row
/// stays one line; the whole text is in its details.
const SUMMARY_CHARS: usize = 160;
/// The most bytes of one prompt's or reply's text shown in its details: a
/// pasted log does not make the page unwieldy; `cairn log --json` has it all.
const TEXT_BYTES: usize = 4 * 1024;
/// The most lines of one file's diff shown; a marker says what was cut.
const DIFF_LINES_PER_FILE: usize = 200;
/// The most bytes of diffs and texts in one report, so a report of a long
/// history stays small enough to open (the bound is 25 MB at
/// 100,000 events); past it, details name the command that shows them.
const DETAIL_BUDGET_BYTES: usize = 8 * 1024 * 1024;
/// The most checkpoints and rollbacks whose diffs are computed: each is a
/// tree comparison; past it, details name the command.
const MAX_DIFFED_NODES: usize = 5_000;
/// The most file events whose own diff is computed (each compares the
/// state before and after its record).
const MAX_DIFFED_FILE_EVENTS: usize = 2_000;

/// `cairn report`.
pub fn run(settings: &Settings, plan: ReportPlan) -> Result<ExitCode> {
    let ReportPlan {
        args: a,
        since,
        until,
    } = plan;
    let store = settings.open_read()?;
    let report = Report::gather(&store, &a.session, since, until)?;
    let mut bytes = Vec::new();
    match a.format {
        ReportFormat::Html => html::write(&report, &mut bytes)?,
        ReportFormat::Md => md::write(&report, &mut bytes)?,
    }
    store.close()?;
    match &a.output {
        Some(path) if path.as_os_str() != "-" => {
            std::fs::write(path, &bytes).with_context(|| format!("write {}", path.display()))?;
            if !settings.quiet {
                eprintln!(
                    "report: {} ({}, {}, {})",
                    path.display(),
                    super::output::count(report.rows.len() as u64, "record"),
                    super::output::count(report.sessions.len() as u64, "session"),
                    super::output::bytes(bytes.len() as u64)
                );
            }
        }
        _ => {
            use std::io::Write;
            std::io::stdout().lock().write_all(&bytes)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A history, as the page shows it.
pub struct Report {
    /// The workspace the store belongs to, if any.
    pub workspace: Option<String>,
    /// The sessions, in the order their first record appears (a subagent
    /// beside its parent).
    pub sessions: Vec<SessionSummary>,
    /// Every record in range, in LSN order.
    pub rows: Vec<Row>,
    /// Kinds, agents and models that occur, for the filters (sorted).
    pub kinds: Vec<String>,
    /// Agents that occur.
    pub agents: Vec<String>,
    /// Models that occur.
    pub models: Vec<String>,
}

/// One session's counts.
#[derive(Default)]
pub struct SessionSummary {
    /// Its id.
    pub id: String,
    /// The session it is a subagent of, when its records say so.
    pub parent: Option<String>,
    /// Prompts, replies and tool calls.
    pub prompts: u64,
    /// Replies.
    pub replies: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Records not ok.
    pub failures: u64,
    /// Distinct paths its records touch.
    pub files: usize,
    /// Checkpoints.
    pub checkpoints: u64,
    /// Rollbacks.
    pub rollbacks: u64,
    /// First and last time.
    pub span: Option<(cairn::Timestamp, cairn::Timestamp)>,
    /// Tokens in and out, where its records carry them.
    pub tokens: Option<(u64, u64)>,
    paths: std::collections::BTreeSet<String>,
}

/// The sessions table's columns after the session itself, each with
/// whether it holds a number (right-aligned), in the order of
/// [`SessionSummary::cells`]; the HTML and Markdown tables share them.
pub const SESSION_COLUMNS: [(&str, bool); 10] = [
    ("prompts", true),
    ("replies", true),
    ("tool calls", true),
    ("failures", true),
    ("files", true),
    ("checkpoints", true),
    ("rollbacks", true),
    ("from", false),
    ("to", false),
    ("tokens in/out", true),
];

impl SessionSummary {
    /// The row's cells in the order of [`SESSION_COLUMNS`], as plain text
    /// (numbers and times: nothing a renderer needs to escape).
    pub fn cells(&self) -> [String; 10] {
        let (from, to) = self
            .span
            .map(|(a, b)| (a.to_iso(), b.to_iso()))
            .unwrap_or_default();
        [
            self.prompts.to_string(),
            self.replies.to_string(),
            self.tool_calls.to_string(),
            self.failures.to_string(),
            self.files.to_string(),
            self.checkpoints.to_string(),
            self.rollbacks.to_string(),
            from,
            to,
            self.tokens
                .map(|(i, o)| format!("{i} / {o}"))
                .unwrap_or_default(),
        ]
    }
}

/// One record's row of the timeline.
pub struct Row {
    /// The record.
    pub record: Record,
    /// Its session's lane (index into [`Report::sessions`]).
    pub lane: usize,
    /// A one-line summary.
    pub summary: String,
    /// For a rollback: its target's LSN, and whether it moves forward
    /// (a redo: the target was on a branch an earlier rollback left).
    pub edge: Option<(Lsn, bool)>,
    /// Left behind by a later rollback of its session (still shown).
    pub abandoned: bool,
    /// What its details show.
    pub detail: Detail,
}

/// What a row's details hold.
pub enum Detail {
    /// Nothing beyond the row.
    None,
    /// A prompt's or reply's text (cut at [`TEXT_BYTES`]; true if cut).
    Text(String, bool),
    /// The files changed: since a checkpoint's parent, or by a file event.
    Files(Vec<FileChange>),
    /// Left out to bound the report: the command that shows it.
    Omitted(String),
}

/// One file's change in a row's details.
pub struct FileChange {
    /// The path.
    pub path: String,
    /// added, removed, modified.
    pub status: &'static str,
    /// Lines added and removed, when compared line by line.
    pub stat: Option<(usize, usize)>,
    /// The unified diff's lines (cut at [`DIFF_LINES_PER_FILE`]), or why
    /// there is none (binary, too large).
    pub body: Result<Vec<String>, String>,
    /// Lines cut from the diff.
    pub cut: usize,
}

impl Report {
    /// Reads what the page shows from `store`: the records of `sessions`
    /// (all when empty) between `since` and `until`.
    pub fn gather(
        store: &cairn::Store,
        sessions: &[String],
        since: Option<Point>,
        until: Option<Point>,
    ) -> Result<Report> {
        let workspace = store.workspace_dir().map(|p| p.display().to_string());
        store
            .query(|q| {
                let lo = since.map(|p| q.resolve(p)).transpose()?;
                let hi = until.map(|p| q.resolve(p)).transpose()?;
                // The bounds and a single session go to the index; several
                // sessions are one pass over the bounded range.
                let filter = Filter {
                    since_lsn: lo,
                    until_lsn: hi,
                    session: match sessions {
                        [one] => Some(one.clone()),
                        _ => None,
                    },
                    ..Filter::default()
                };
                let records: Vec<Record> = q
                    .list(&filter)?
                    .into_iter()
                    .filter(|r| sessions.is_empty() || sessions.contains(&r.event.session))
                    .collect();
                let parents: BTreeMap<Lsn, Lsn> = q
                    .branches(None)?
                    .into_iter()
                    .filter_map(|b| b.parent.map(|p| (b.lsn, p)))
                    .collect();
                Ok(Builder::new(workspace, parents).build(q, records))
            })
            .map_err(anyhow::Error::from)
    }
}

/// Builds a [`Report`] record by record, spending the detail budget.
struct Builder {
    workspace: Option<String>,
    parents: BTreeMap<Lsn, Lsn>,
    budget: usize,
    diffed_nodes: usize,
    diffed_files: usize,
}

impl Builder {
    fn new(workspace: Option<String>, parents: BTreeMap<Lsn, Lsn>) -> Builder {
        Builder {
            workspace,
            parents,
            budget: DETAIL_BUDGET_BYTES,
            diffed_nodes: 0,
            diffed_files: 0,
        }
    }

    fn build(mut self, q: &cairn::Query<'_>, records: Vec<Record>) -> Report {
        let mut sessions: Vec<SessionSummary> = Vec::new();
        let mut lane_of: BTreeMap<String, usize> = BTreeMap::new();
        let (mut kinds, mut agents, mut models) = (
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
        );
        let mut rows = Vec::with_capacity(records.len());
        for r in records {
            let e = &r.event;
            let lane = *lane_of.entry(e.session.clone()).or_insert_with(|| {
                sessions.push(SessionSummary {
                    id: e.session.clone(),
                    parent: parent_session(e),
                    ..SessionSummary::default()
                });
                sessions.len() - 1
            });
            count(&mut sessions[lane], &r);
            kinds.insert(e.kind.name().to_string());
            agents.extend(e.agent.clone());
            models.extend(e.model.clone());
            // A prompt's or reply's text is its summary; its details
            // only hold it when the one line could not.
            let (line, whole) = match (&e.text, e.kind) {
                (Some(t), EventKind::Prompt | EventKind::Reply) => {
                    let line = one_line(t, SUMMARY_CHARS);
                    let whole = line == *t;
                    (line, whole)
                }
                _ => (one_line(&summary(&r), SUMMARY_CHARS), false),
            };
            let detail = if whole {
                Detail::None
            } else {
                self.detail(q, &r)
            };
            rows.push(Row {
                summary: line,
                edge: None,
                abandoned: false,
                lane,
                detail,
                record: r,
            });
        }
        mark_rollbacks(&mut rows);
        for s in &mut sessions {
            s.files = s.paths.len();
        }
        Report {
            workspace: self.workspace,
            sessions: beside_parents(sessions, &mut rows),
            rows,
            kinds: kinds.into_iter().collect(),
            agents: agents.into_iter().collect(),
            models: models.into_iter().collect(),
        }
    }

    /// What a record's details show, within the budget.
    fn detail(&mut self, q: &cairn::Query<'_>, r: &Record) -> Detail {
        let e = &r.event;
        match e.kind {
            EventKind::Prompt | EventKind::Reply => match &e.text {
                Some(t) if self.budget >= t.len().min(TEXT_BYTES) => {
                    let (shown, cut) = cut_text(t, TEXT_BYTES);
                    self.budget -= shown.len();
                    Detail::Text(shown.to_string(), cut)
                }
                Some(_) => Detail::Omitted(format!("cairn log --json --from {0} --to {0}", r.lsn)),
                None => Detail::None,
            },
            EventKind::CheckpointCreate | EventKind::Rollback => {
                // A rollback against the state it replaced (its source
                // checkpoint); a checkpoint against its parent node.
                let from = match e.kind {
                    EventKind::Rollback => e.source.map(|c| c.0),
                    _ => None,
                };
                let Some(parent) = from.or_else(|| self.parents.get(&r.lsn).copied()) else {
                    return Detail::None;
                };
                if self.diffed_nodes >= MAX_DIFFED_NODES || self.budget == 0 {
                    return Detail::Omitted(format!("cairn diff @{parent} @{}", r.lsn));
                }
                self.diffed_nodes += 1;
                self.files(q, Point::Lsn(parent), Point::Lsn(r.lsn), &[])
                    .unwrap_or_else(|| Detail::Omitted(format!("cairn diff @{parent} @{}", r.lsn)))
            }
            k if k.is_file_op() && r.lsn.0 > 1 => {
                let Some(path) = e.path.clone() else {
                    return Detail::None;
                };
                let before = Lsn(r.lsn.0 - 1);
                let command = format!("cairn diff @{before} @{} -- {path}", r.lsn);
                if self.diffed_files >= MAX_DIFFED_FILE_EVENTS || self.budget == 0 {
                    return Detail::Omitted(command);
                }
                self.diffed_files += 1;
                let mut paths = vec![path];
                paths.extend(e.to_path.clone());
                self.files(q, Point::Lsn(before), Point::Lsn(r.lsn), &paths)
                    .unwrap_or(Detail::Omitted(command))
            }
            _ => Detail::None,
        }
    }

    /// The changes between two points (of `paths`, or all), within the
    /// budget; `None` when they cannot be compared (a path outside the
    /// workspace, a tree lost to damage).
    fn files(
        &mut self,
        q: &cairn::Query<'_>,
        a: Point,
        b: Point,
        paths: &[String],
    ) -> Option<Detail> {
        let diffs = q.diff(a, b, paths).ok()?;
        let mut out = Vec::with_capacity(diffs.len());
        for d in diffs {
            let status = match d.status {
                cairn::DiffStatus::Added => "added",
                cairn::DiffStatus::Removed => "removed",
                cairn::DiffStatus::Modified => "modified",
            };
            let body = if d.too_large {
                Err(format!(
                    "over {} MiB: not compared line by line",
                    cairn::diff::MAX_LINE_DIFF_BYTES >> 20
                ))
            } else if d.binary {
                Err("binary".to_string())
            } else {
                Ok(d.unified.clone().unwrap_or_default())
            };
            let (body, stat, cut) = match body {
                Err(why) => (Err(why), None, 0),
                Ok(u) => {
                    let lines: Vec<&str> = u.lines().collect();
                    let added = lines
                        .iter()
                        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
                        .count();
                    let removed = lines
                        .iter()
                        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
                        .count();
                    let keep = lines.len().min(DIFF_LINES_PER_FILE);
                    let bytes: usize = lines[..keep].iter().map(|l| l.len() + 1).sum();
                    if bytes > self.budget {
                        (
                            Err("left out: the report's size budget is spent".to_string()),
                            Some((added, removed)),
                            0,
                        )
                    } else {
                        self.budget -= bytes;
                        (
                            Ok(lines[..keep].iter().map(|l| l.to_string()).collect()),
                            Some((added, removed)),
                            lines.len() - keep,
                        )
                    }
                }
            };
            out.push(FileChange {
                path: d.path,
                status,
                stat,
                body,
                cut,
            });
        }
        Some(Detail::Files(out))
    }
}

/// The session a subagent's records name as their parent
/// (`meta.parent_session`), if any.
fn parent_session(e: &cairn::Event) -> Option<String> {
    e.meta
        .as_ref()
        .and_then(|m| m.get("parent_session"))
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// Adds `r` to its session's counts.
fn count(s: &mut SessionSummary, r: &Record) {
    let e = &r.event;
    match e.kind {
        EventKind::Prompt => s.prompts += 1,
        EventKind::Reply => s.replies += 1,
        EventKind::ToolCall => s.tool_calls += 1,
        EventKind::CheckpointCreate => s.checkpoints += 1,
        EventKind::Rollback => s.rollbacks += 1,
        _ => {}
    }
    if !e.ok {
        s.failures += 1;
    }
    if e.kind.is_file_op() {
        s.paths.extend(e.path.clone());
        s.paths.extend(e.to_path.clone());
    }
    s.span = Some(match s.span {
        None => (e.ts, e.ts),
        Some((a, b)) => (a.min(e.ts), b.max(e.ts)),
    });
    if let Some((i, o)) = tokens(e) {
        let (ti, to) = s.tokens.unwrap_or((0, 0));
        s.tokens = Some((ti + i, to + o));
    }
}

/// Tokens in and out a record carries in its metadata
/// (`input_tokens`/`output_tokens`, at the top or under `usage`).
fn tokens(e: &cairn::Event) -> Option<(u64, u64)> {
    let m = e.meta.as_ref()?;
    let get = |k: &str| {
        m.get(k)
            .or_else(|| m.get("usage").and_then(|u| u.get(k)))
            .and_then(|v| v.as_u64())
    };
    match (get("input_tokens"), get("output_tokens")) {
        (None, None) => None,
        (i, o) => Some((i.unwrap_or(0), o.unwrap_or(0))),
    }
}

/// Marks each rollback's edge to its target, and the records it left
/// behind (its session's records after the target, before it) as
/// abandoned; a rollback to a record an earlier rollback abandoned is a
/// redo, an edge forward.
fn mark_rollbacks(rows: &mut [Row]) {
    let at: BTreeMap<Lsn, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.record.lsn, i))
        .collect();
    for i in 0..rows.len() {
        let e = &rows[i].record.event;
        if e.kind != EventKind::Rollback {
            continue;
        }
        let Some(target) = e.target.or(e.checkpoint) else {
            continue;
        };
        let target = target.0;
        let redo = at.get(&target).is_some_and(|&t| rows[t].abandoned);
        let whole = !scoped(e);
        rows[i].edge = Some((target, redo));
        // A rollback of some paths leaves the rest of the branch in place.
        if redo || !whole {
            continue;
        }
        let lane = rows[i].lane;
        let from = at.range(Lsn(target.0 + 1)..).next().map_or(i, |(_, &j)| j);
        for row in rows[from..i].iter_mut().filter(|r| r.lane == lane) {
            row.abandoned = true;
        }
    }
}

/// True for a rollback limited to some paths (`rollback --path`): its
/// record says `paths: ...`, or names its scope in `meta.scope`.
fn scoped(e: &cairn::Event) -> bool {
    e.text.as_deref().is_some_and(|t| t.starts_with("paths: "))
        || e.meta
            .as_ref()
            .and_then(|m| m.get("scope"))
            .and_then(|v| v.as_array())
            .is_some_and(|a| !a.is_empty())
}

/// Orders sessions so each subagent's lane sits right after its parent's,
/// renumbering the rows' lanes to match.
fn beside_parents(sessions: Vec<SessionSummary>, rows: &mut [Row]) -> Vec<SessionSummary> {
    let ids: BTreeMap<String, usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    let mut order: Vec<usize> = Vec::with_capacity(sessions.len());
    fn place(
        i: usize,
        sessions: &[SessionSummary],
        ids: &BTreeMap<String, usize>,
        order: &mut Vec<usize>,
    ) {
        if order.contains(&i) {
            return;
        }
        order.push(i);
        for (j, s) in sessions.iter().enumerate() {
            if s.parent.as_ref().is_some_and(|p| ids.get(p) == Some(&i)) {
                place(j, sessions, ids, order);
            }
        }
    }
    for (i, s) in sessions.iter().enumerate() {
        let has_parent = s.parent.as_ref().is_some_and(|p| ids.contains_key(p));
        if !has_parent {
            place(i, &sessions, &ids, &mut order);
        }
    }
    for i in 0..sessions.len() {
        place(i, &sessions, &ids, &mut order); // a cycle of parents
    }
    let mut new_lane = vec![0; sessions.len()];
    for (new, &old) in order.iter().enumerate() {
        new_lane[old] = new;
    }
    for r in rows.iter_mut() {
        r.lane = new_lane[r.lane];
    }
    let mut slots: Vec<Option<SessionSummary>> = sessions.into_iter().map(Some).collect();
    order.iter().filter_map(|&i| slots[i].take()).collect()
}

/// `t` cut at a character boundary at most `max` bytes in, and whether it
/// was cut.
fn cut_text(t: &str, max: usize) -> (&str, bool) {
    if t.len() <= max {
        return (t, false);
    }
    let mut end = max;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    (&t[..end], true)
}
