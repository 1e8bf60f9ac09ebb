//! SWE-agent trajectories in: `Store::import_swe_agent`.
//!
//! SWE-agent writes each run as one JSON document, `<instance>.traj`:
//! `{"trajectory": [step...], "history": [...], "info": {...},
//! "replay_config": ..., "environment": ...}`, each step holding
//! `thought`, `action`, `observation` and `execution_time`. A run is a
//! session named by the file (its name without `.traj`), and becomes:
//!
//! - a `custom` record labelled `session.start` (the environment, the
//!   SWE-agent version), and the first user message of `history` (the
//!   task) as a `prompt`;
//! - per step: the thought as a `reply`; the action as a `tool_call`
//!   (tool: its first word; text: the action, bounded to
//!   [`MAX_TOOL_SUMMARY_BYTES`]; `latency_ms` from `execution_time`),
//!   marked `may_change_unrecorded_files` (an action runs in a shell);
//!   the observation as a `custom` record labelled `observation`, bounded
//!   to [`MAX_OBSERVATION_BYTES`];
//! - `info.submission`, the run's patch: a `custom` record labelled
//!   `submission` (its text the exit status, its `diff` blob the patch),
//!   and, with `--base DIR` (the tree the run started from), one file
//!   event per file the patch changes, with exact contents: the file under
//!   the base, and the patch's hunks for it applied (hunks placed as
//!   `patch` places them, without fuzz). A file whose hunks do not apply is
//!   recorded without contents and named in the report; without a base
//!   no file event is recorded, and the report says so.
//!
//! Every event's time is the file's modification time (a trajectory holds
//! none). Each event keeps under `meta.swe_agent` a key naming the step it
//! came from (its index and a hash of its JSON), by which an import again
//! skips what is recorded already, and a trajectory that grew (SWE-agent
//! rewrites it after each step) adds only its new steps.

use std::path::{Path, PathBuf};

use cairn_codec::{BlobHash, Event, EventKind, Timestamp};
use serde_json::{Map, Value};

use super::agent::{self, bounded, AgentCounts, MAX_TOOL_SUMMARY_BYTES};
use super::codex::apply_diff;
use crate::error::{Error, Result};
use crate::Store;

/// The meta key under which every imported event keeps its SWE-agent
/// fields.
pub const META_SWE_AGENT: &str = "swe_agent";

/// The most bytes of an observation kept: a step that views a file or
/// runs a test suite can print megabytes, which the next step's own
/// records say more briefly; the cut is noted (`meta.cut`).
pub const MAX_OBSERVATION_BYTES: usize = 64 * 1024;

/// The largest trajectory file read: one is read whole (it is one JSON
/// document); real ones are a few megabytes, so past this it is no
/// trajectory.
pub const MAX_TRAJECTORY_BYTES: u64 = 256 << 20;

/// How [`Store::import_swe_agent`] imports.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SweAgentOptions {
    /// The tree the runs started from, to which the submission's patch is
    /// applied; `None`: the submission makes no file events.
    pub base: Option<PathBuf>,
}

impl SweAgentOptions {
    /// These options, with the tree the runs started from.
    pub fn with_base(self, base: Option<PathBuf>) -> SweAgentOptions {
        SweAgentOptions { base }
    }
}

/// A file of a submission whose hunks were not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubmissionNotApplied {
    /// The trajectory, as named.
    pub file: String,
    /// The file's path in the patch.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// What [`Store::import_swe_agent`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweAgentReport {
    /// Files read, records appended and skipped, LSNs and sessions.
    pub imported: AgentCounts,
    /// Steps read.
    pub steps: u64,
    /// File events made of submissions.
    pub submitted_files: u64,
    /// Trajectories whose submission made no file events, as no base was
    /// given.
    pub without_base: Vec<String>,
    /// Files of submissions whose hunks were not applied.
    pub not_applied: Vec<SubmissionNotApplied>,
}

impl Store {
    /// Imports SWE-agent trajectories (`.traj` files). See the module docs
    /// for what each becomes. A file that is not a trajectory is an error
    /// naming it, and nothing of it is recorded; files before it stay
    /// recorded.
    pub fn import_swe_agent(
        &self,
        paths: &[PathBuf],
        opts: &SweAgentOptions,
    ) -> Result<SweAgentReport> {
        let mut report = SweAgentReport::default();
        for p in paths {
            self.import_trajectory(p, opts, &mut report)?;
        }
        Ok(report)
    }

    fn import_trajectory(
        &self,
        file: &Path,
        opts: &SweAgentOptions,
        report: &mut SweAgentReport,
    ) -> Result<()> {
        let name = file.display().to_string();
        let (doc, modified) = read_trajectory(file, &name)?;
        let session = file
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".traj").to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "swe-agent".into());
        let mut put = |b: &[u8]| self.put_blob(b);
        let mut base = |path: &str| -> Option<Option<Vec<u8>>> {
            let dir = opts.base.as_ref()?;
            if cairn_codec::paths::outside_workspace(path).is_some() {
                return Some(None);
            }
            match std::fs::read(dir.join(path)) {
                Ok(b) => Some(Some(b)),
                Err(_) => Some(None),
            }
        };
        let parsed = trajectory_events(
            &doc,
            &name,
            &session,
            modified,
            &mut put,
            &mut base,
            opts.base.is_some(),
        )?;
        let (seen, _) = agent::recorded_keys(self, &session, META_SWE_AGENT)?;
        report.imported.files += 1;
        report.steps += parsed.steps;
        report.imported.saw_session(&session);
        let fresh_submission = parsed
            .submission_key
            .as_ref()
            .is_some_and(|k| !seen.contains(k));
        if fresh_submission {
            report.submitted_files += parsed.submitted_files;
            report.not_applied.extend(parsed.not_applied);
            if parsed.without_base {
                report.without_base.push(name);
            }
        }
        let done = agent::append_fresh(self, parsed.events, META_SWE_AGENT, &seen)?;
        report.imported.add(&done);
        Ok(())
    }
}

/// The trajectory `file` (`name` names it) as a JSON object, and its
/// modification time, the time of its events (a trajectory holds none).
/// A file over [`MAX_TRAJECTORY_BYTES`], or not a JSON object, is an
/// error naming it.
fn read_trajectory(file: &Path, name: &str) -> Result<(Map<String, Value>, Timestamp)> {
    let io = |source| Error::Io {
        op: "read",
        path: file.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(file).map_err(io)?;
    if meta.len() > MAX_TRAJECTORY_BYTES {
        return Err(Error::Rejected(format!(
            "{name}: {} bytes, over the {MAX_TRAJECTORY_BYTES}-byte limit of a trajectory; nothing of it was recorded",
            meta.len()
        ).into()));
    }
    let text = std::fs::read(file).map_err(io)?;
    let doc: Map<String, Value> = match serde_json::from_slice(&text) {
        Ok(Value::Object(o)) => o,
        Ok(_) => {
            return Err(Error::Rejected(format!(
                "{name}: expected a JSON object (a SWE-agent trajectory); nothing of it was recorded"
            ).into()))
        }
        Err(e) => {
            return Err(Error::Rejected(format!(
                "{name}:{}:{}: not JSON: {e}; nothing of it was recorded",
                e.line(),
                e.column()
            ).into()))
        }
    };
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| Timestamp::from_millis(d.as_millis() as i64).ok())
        .unwrap_or(Timestamp(0));
    Ok((doc, modified))
}

/// What one trajectory gives.
#[derive(Debug, Default)]
pub struct ParsedTrajectory {
    /// The events, in order.
    pub events: Vec<Event>,
    /// Steps read.
    pub steps: u64,
    /// The key of the submission's record, if there is a submission.
    pub submission_key: Option<String>,
    /// File events made of the submission.
    pub submitted_files: u64,
    /// Whether the submission made no file events for want of a base.
    pub without_base: bool,
    /// Files of the submission whose hunks were not applied.
    pub not_applied: Vec<SubmissionNotApplied>,
}

/// The model a trajectory's `replay_config` names (`agent.model.name`),
/// the config given as an object or as JSON text.
fn model_of(doc: &Map<String, Value>) -> Option<String> {
    let cfg = match doc.get("replay_config")? {
        Value::String(s) => serde_json::from_str::<Value>(s).ok()?,
        v => v.clone(),
    };
    cfg.get("agent")?
        .get("model")?
        .get("name")?
        .as_str()
        .map(str::to_string)
}

/// Makes the events of a trajectory `doc` (`name` names it, `session` is
/// its session, `ts` its time). `put` stores a blob; `base(path)` gives a
/// file's contents in the tree the run started from (`None` when no base
/// was given, `has_base` false; `Some(None)` when the file is not there).
/// No I/O of its own.
pub fn trajectory_events(
    doc: &Map<String, Value>,
    name: &str,
    session: &str,
    ts: Timestamp,
    put: &mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    base: &mut dyn FnMut(&str) -> Option<Option<Vec<u8>>>,
    has_base: bool,
) -> Result<ParsedTrajectory> {
    let Some(steps) = doc.get("trajectory").and_then(Value::as_array) else {
        return Err(Error::Rejected(
            format!(
            "{name}: no `trajectory` list: not a SWE-agent trajectory; nothing of it was recorded"
        )
            .into(),
        ));
    };
    let mut out = ParsedTrajectory::default();
    let run = Run {
        session,
        ts,
        model: model_of(doc),
        info: doc.get("info").and_then(Value::as_object),
    };
    let (key, head) = run.start(doc);
    agent::push_keyed(&mut out.events, head, META_SWE_AGENT, &key);
    for (i, step) in steps.iter().enumerate() {
        let Some(s) = step.as_object() else {
            return Err(Error::Rejected(
                format!(
                    "{name}: step {} of `trajectory` is not an object; nothing of it was recorded",
                    i + 1
                )
                .into(),
            ));
        };
        out.steps += 1;
        let key = format!(
            "step{}:{}",
            i + 1,
            &blake3::hash(step.to_string().as_bytes()).to_hex()[..32]
        );
        agent::push_keyed(&mut out.events, run.step(i + 1, s), META_SWE_AGENT, &key);
    }
    if let Some(patch) = run.submission() {
        let key = format!(
            "submission:{}",
            &blake3::hash(patch.as_bytes()).to_hex()[..32]
        );
        let files = Applying {
            name,
            put,
            base,
            has_base,
        };
        let made = run.submitted(patch, files, &mut out)?;
        out.submission_key = Some(format!("{key}#0"));
        agent::push_keyed(&mut out.events, made, META_SWE_AGENT, &key);
    }
    Ok(out)
}

/// What every event of a run shares: its session, time and model, and
/// the trajectory's `info`.
struct Run<'a> {
    session: &'a str,
    ts: Timestamp,
    model: Option<String>,
    info: Option<&'a Map<String, Value>>,
}

/// How a submission's files are made: `name` names the trajectory, `put`
/// stores a blob, `base(path)` gives a file in the tree the run started
/// from (see [`trajectory_events`]).
struct Applying<'a, 'f> {
    name: &'a str,
    put: &'f mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    base: &'f mut dyn FnMut(&str) -> Option<Option<Vec<u8>>>,
    has_base: bool,
}

impl Run<'_> {
    /// A new event of the run.
    fn event(&self, k: EventKind) -> Event {
        let mut e = Event::new(k, self.session);
        e.ts = self.ts;
        e
    }

    /// The run's start and its task (the first user message of
    /// `history`), with their key.
    fn start(&self, doc: &Map<String, Value>) -> (String, Vec<Event>) {
        let mut start = self.event(EventKind::Custom).with_text("session start");
        start.label = Some("session.start".into());
        start.model = self.model.clone();
        if let Some(env) = doc.get("environment").filter(|v| !v.is_null()) {
            start = start.with_meta("environment", env.clone());
        }
        if let Some(v) = self.info.and_then(|i| i.get("swe_agent_version")) {
            start = start.with_meta("swe_agent_version", v.clone());
        }
        let mut head = vec![start];
        let task = doc
            .get("history")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|h| h.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|h| content_text(h.get("content")?));
        if let Some(t) = &task {
            head.push(self.event(EventKind::Prompt).with_text(t.clone()));
        }
        let key = format!(
            "start:{}",
            &blake3::hash(task.as_deref().unwrap_or("").as_bytes()).to_hex()[..32]
        );
        (key, head)
    }

    /// The events of step `n` (from 1): its thought, action and
    /// observation.
    fn step(&self, n: usize, s: &Map<String, Value>) -> Vec<Event> {
        let text = |k: &str| {
            s.get(k)
                .and_then(Value::as_str)
                .filter(|t| !t.trim().is_empty())
        };
        let mut made = Vec::new();
        if let Some(t) = text("thought") {
            let mut e = self.event(EventKind::Reply).with_text(t);
            e.model = self.model.clone();
            made.push(e.with_meta("step", n));
        }
        if let Some(a) = text("action") {
            let mut e = self
                .event(EventKind::ToolCall)
                .with_text(bounded(a, MAX_TOOL_SUMMARY_BYTES));
            e.tool = a.split_whitespace().next().map(str::to_string);
            e.model = self.model.clone();
            e.latency_ms = s
                .get("execution_time")
                .and_then(Value::as_f64)
                .filter(|t| t.is_finite() && *t >= 0.0)
                .map(|t| (t * 1000.0) as u64);
            made.push(agent::shell_call(e.with_meta("step", n), None));
        }
        if let Some(o) = s.get("observation").and_then(Value::as_str) {
            let mut e = self
                .event(EventKind::Custom)
                .with_text(bounded(o, MAX_OBSERVATION_BYTES));
            e.label = Some("observation".into());
            e = e.with_meta("step", n);
            if o.len() > MAX_OBSERVATION_BYTES {
                e = e.with_meta("cut", o.len());
            }
            made.push(e);
        }
        made
    }

    /// The run's patch (`info.submission`), if it has one.
    fn submission(&self) -> Option<&str> {
        self.info
            .and_then(|i| i.get("submission"))
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    }

    /// The submission's record and one file event per file its `patch`
    /// changes, counted in `out`.
    fn submitted(
        &self,
        patch: &str,
        files: Applying<'_, '_>,
        out: &mut ParsedTrajectory,
    ) -> Result<Vec<Event>> {
        let Applying {
            name,
            put,
            base,
            has_base,
        } = files;
        let sections = split_patch(patch);
        let mut rec = self.event(EventKind::Custom);
        rec.label = Some("submission".into());
        rec.text = self
            .info
            .and_then(|i| i.get("exit_status"))
            .and_then(Value::as_str)
            .map(str::to_string);
        rec.diff = Some(put(patch.as_bytes())?);
        rec.files = sections.iter().map(|s| s.path().to_string()).collect();
        let mut made = vec![rec];
        for sec in &sections {
            match submission_event(sec, name, put, base, has_base, &mut out.not_applied)? {
                Some(mut e) => {
                    e.session = self.session.to_string();
                    e.ts = self.ts;
                    e.model = self.model.clone();
                    out.submitted_files += 1;
                    made.push(e);
                }
                None => out.without_base = true,
            }
        }
        Ok(made)
    }
}

/// The text of a history message's `content`: a string, or the `text` of
/// its parts.
fn content_text(c: &Value) -> Option<String> {
    match c {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => {
            let t: Vec<&str> = a
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!t.is_empty()).then(|| t.join("\n"))
        }
        _ => None,
    }
}

/// One file's part of a (git) unified diff.
#[derive(Debug, Default)]
struct Section {
    /// The path before (`None`: the file is created).
    old: Option<String>,
    /// The path after (`None`: the file is deleted).
    new: Option<String>,
    /// The section's text: headers and hunks.
    text: String,
    /// Whether it has hunks.
    hunks: bool,
    /// Whether it is a binary change (no hunks to apply).
    binary: bool,
}

impl Section {
    /// The path it names (after, else before).
    fn path(&self) -> &str {
        self.new.as_deref().or(self.old.as_deref()).unwrap_or("")
    }
}

/// A path of a diff header (`a/x`, `b/x`, `/dev/null`), without its
/// prefix and anything after a tab; `None` for `/dev/null`.
fn header_path(s: &str) -> Option<String> {
    let s = s.split('\t').next().unwrap_or("").trim_end();
    if s == "/dev/null" {
        return None;
    }
    let s = s
        .strip_prefix("a/")
        .or_else(|| s.strip_prefix("b/"))
        .unwrap_or(s);
    Some(cairn_codec::paths::normal_path(s).into_owned())
}

/// Splits a unified diff of many files (as `git diff` writes it) into one
/// section per file.
fn split_patch(patch: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut cur: Option<Section> = None;
    for line in patch.split_inclusive('\n') {
        let starts = line.starts_with("diff --git ")
            || (line.starts_with("--- ") && cur.as_ref().is_some_and(|c| c.hunks));
        if starts {
            out.extend(cur.take());
            let mut s = Section::default();
            if let Some(rest) = line.strip_prefix("diff --git ") {
                // `a/P b/Q`: the paths until a header says otherwise.
                let rest = rest.trim_end();
                if let Some(at) = rest.find(" b/") {
                    s.old = header_path(&rest[..at]);
                    s.new = header_path(&rest[at + 1..]);
                }
            }
            cur = Some(s);
        }
        let s = cur.get_or_insert_with(Section::default);
        if !s.hunks {
            if let Some(p) = line.strip_prefix("--- ") {
                s.old = header_path(p);
            } else if let Some(p) = line.strip_prefix("+++ ") {
                s.new = header_path(p);
            } else if line.starts_with("new file mode") {
                s.old = None;
            } else if line.starts_with("deleted file mode") {
                s.new = None;
            } else if let Some(p) = line.strip_prefix("rename from ") {
                s.old = header_path(p);
            } else if let Some(p) = line.strip_prefix("rename to ") {
                s.new = header_path(p);
            } else if line.starts_with("Binary files ") || line.starts_with("GIT binary patch") {
                s.binary = true;
            }
        }
        if line.starts_with("@@ ") {
            s.hunks = true;
        }
        s.text.push_str(line);
    }
    out.extend(cur);
    out.retain(|s| s.old.is_some() || s.new.is_some());
    out
}

/// The file event of one section of a submission, with exact contents
/// where the base has the file and the hunks apply; `None` when no base
/// was given.
fn submission_event(
    sec: &Section,
    name: &str,
    put: &mut dyn FnMut(&[u8]) -> Result<BlobHash>,
    base: &mut dyn FnMut(&str) -> Option<Option<Vec<u8>>>,
    has_base: bool,
    not_applied: &mut Vec<SubmissionNotApplied>,
) -> Result<Option<Event>> {
    let before = match &sec.old {
        Some(p) => match base(p) {
            None => return Ok(None),
            Some(b) => b,
        },
        // A created file: the base need not have it, but without a base
        // no file event is made, as for the others.
        None if !has_base => return Ok(None),
        None => Some(Vec::new()),
    };
    let kind = match (&sec.old, &sec.new) {
        (None, _) => EventKind::FileCreate,
        (Some(_), None) => EventKind::FileDelete,
        (Some(a), Some(b)) if a != b => EventKind::FileMove,
        _ => EventKind::FileEdit,
    };
    let mut e = Event::new(kind, "");
    e.path = sec.old.clone().or_else(|| sec.new.clone());
    if kind == EventKind::FileMove {
        e.to_path = sec.new.clone();
    }
    e.tool = Some("submit".into());
    e.diff = Some(put(sec.text.as_bytes())?);
    if sec.old.is_some() {
        if let Some(b) = &before {
            e.before = Some(put(b)?);
        }
    }
    if kind == EventKind::FileDelete {
        return Ok(Some(e.with_meta("contents", "exact")));
    }
    let after = match (&before, sec.binary, sec.hunks) {
        (None, _, _) => Err("the file is not in the base".to_string()),
        (Some(_), true, _) => Err("a binary change: its contents are not in the patch".to_string()),
        (Some(b), false, false) => Ok(b.clone()),
        (Some(b), false, true) => apply_diff(b, &sec.text),
    };
    match after {
        Ok(a) => {
            e.after = Some(put(&a)?);
            Ok(Some(e.with_meta("contents", "exact")))
        }
        Err(why) => {
            not_applied.push(SubmissionNotApplied {
                file: name.to_string(),
                path: sec.path().to_string(),
                reason: why.clone(),
            });
            Ok(Some(e.with_meta(
                "contents",
                format!("diff not applied: {why}; not recorded"),
            )))
        }
    }
}

/// The paths a submission changes (for the tests).
#[cfg(test)]
fn paths(patch: &str) -> Vec<(Option<String>, Option<String>)> {
    split_patch(patch)
        .into_iter()
        .map(|s| (s.old, s.new))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_git_diff_splits_into_one_section_per_file() {
        let patch = "diff --git a/x.py b/x.py\nindex 1..2 100644\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\ndiff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+new\ndiff --git a/o.txt b/o.txt\ndeleted file mode 100644\n--- a/o.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\ndiff --git a/l.py b/m.py\nsimilarity index 100%\nrename from l.py\nrename to m.py\n";
        let s = |p: &str| Some(p.to_string());
        assert_eq!(
            paths(patch),
            [
                (s("x.py"), s("x.py")),
                (None, s("n.py")),
                (s("o.txt"), None),
                (s("l.py"), s("m.py")),
            ]
        );
        let secs = split_patch(patch);
        assert_eq!(apply_diff(b"", &secs[1].text).unwrap(), b"new\n");
        assert_eq!(apply_diff(b"a\n", &secs[0].text).unwrap(), b"b\n");
    }
}
