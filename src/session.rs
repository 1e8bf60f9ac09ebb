//! Sessions as a first-class handle: record events, track writes,
//! checkpoint and roll back within one session (thread, conversation).

use std::path::Path;

use cairn_codec::{CheckpointId, DiffStats, Event, EventKind, Lsn};
use cairn_snapshot::{
    CheckpointInfo, CheckpointRequest, RollbackReport, RollbackRequest, ScanMode,
};

use crate::error::{Error, Result};
use crate::Store;

/// A handle for recording into one session. Cheap to create; borrows the store.
///
/// ```
/// let store = cairn::Store::in_memory().unwrap();
/// let s = store.session("thread-1").with_agent("coder").with_model("gpt-x");
/// s.prompt("rename foo to bar").unwrap();
/// s.reply("done").unwrap();
/// assert_eq!(store.head().last_lsn.0, 2);
/// ```
#[derive(Debug, Clone)]
pub struct Session<'s> {
    store: &'s Store,
    id: String,
    run: Option<String>,
    phase: Option<String>,
    agent: Option<String>,
    model: Option<String>,
}

impl<'s> Session<'s> {
    pub(crate) fn new(store: &'s Store, id: String) -> Session<'s> {
        Session {
            store,
            id,
            run: None,
            phase: None,
            agent: None,
            model: None,
        }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Sets the run id stamped on every event and checkpoint of this handle.
    pub fn with_run(mut self, run: impl Into<String>) -> Self {
        self.run = Some(run.into());
        self
    }

    /// Sets the phase id.
    pub fn with_phase(mut self, phase: impl Into<String>) -> Self {
        self.phase = Some(phase.into());
        self
    }

    /// Sets the agent name.
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Sets the model name.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// A new event of `kind`, stamped now, with this handle's session, run,
    /// phase, agent and model filled in. Fill in the rest and [`record`](Self::record) it.
    pub fn event(&self, kind: EventKind) -> Event {
        let mut e = Event::new(kind, self.id.clone());
        e.run = self.run.clone();
        e.phase = self.phase.clone();
        e.agent = self.agent.clone();
        e.model = self.model.clone();
        e
    }

    /// Records an event (durable per the store's policy when this returns).
    pub fn record(&self, event: &Event) -> Result<Lsn> {
        self.store.append(event)
    }

    /// Records a prompt.
    pub fn prompt(&self, text: &str) -> Result<Lsn> {
        self.record(&self.event(EventKind::Prompt).with_text(text))
    }

    /// Records a reply.
    pub fn reply(&self, text: &str) -> Result<Lsn> {
        self.record(&self.event(EventKind::Reply).with_text(text))
    }

    /// Records a tool call.
    pub fn tool_call(&self, tool: &str, ok: bool) -> Result<Lsn> {
        let mut e = self.event(EventKind::ToolCall);
        e.tool = Some(tool.to_string());
        e.ok = ok;
        self.record(&e)
    }

    /// Tells cairn this path is about to be written (see [`Store::track`]).
    pub fn track(&self, path: &str) -> Result<()> {
        self.store.track(&[path])
    }

    /// A tracked, recorded file write: tracks the path, stores the old and
    /// new contents as blobs, writes the file atomically (temp + rename),
    /// and records a `file.create` or `file.write` with `before`/`after`
    /// hashes and diff statistics.
    ///
    /// `path` is taken as `rollback --path` takes it (`./src//a.rs` is
    /// `src/a.rs`, an absolute path inside the workspace is made
    /// relative), and the record names it in that normal form. The record
    /// is checked before the file is touched, so a write the log would
    /// refuse changes nothing; if appending still fails once the file is
    /// written (an I/O error), the error says so and names the blob that
    /// holds the contents it replaced.
    pub fn write_file(&self, path: &str, contents: &[u8]) -> Result<Lsn> {
        let ws = self.store.workspace()?;
        // The snapshot crate's check: no `..`, nothing outside the
        // workspace, nothing under `.git` or `.cairn`.
        // Its error names the path and why (a matchable `Error::Snapshot`).
        let rel = ws.normalize(path)?;
        self.track(&rel)?;
        let full = ws.root().join(&rel);
        let before = match std::fs::read(&full) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::Other(format!("read {}: {e}", full.display()))),
        };
        let mut e = self.event(if before.is_some() {
            EventKind::FileWrite
        } else {
            EventKind::FileCreate
        });
        e.tool = Some(
            if before.is_some() {
                "write_file"
            } else {
                "create_file"
            }
            .to_string(),
        );
        e.path = Some(rel.clone());
        e.after = Some(self.store.put_blob(contents)?);
        if let Some(old) = &before {
            e.before = Some(self.store.put_blob(old)?);
        }
        e.diff_stats = Some(line_stats(before.as_deref().unwrap_or(b""), contents));
        // Whatever the log would refuse, it refuses before the file changes.
        self.store.check_event(&e)?;
        write_atomic(&full, contents)?;
        self.record(&e).map_err(|err| {
            let kept = match e.before {
                Some(h) => {
                    format!("; the contents it replaced are blob {h} (`cairn blob get {h}`)")
                }
                None => String::new(),
            };
            Error::Other(format!(
                "{rel} was written, but its {} record could not be appended: {err}{kept}",
                e.kind.name()
            ))
        })
    }

    /// Checkpoints the workspace with a full scan (edits made by shell
    /// commands are captured too), labelled `label`, stamped with this
    /// handle's session, run, phase, agent and model.
    pub fn checkpoint(&self, label: &str) -> Result<CheckpointInfo> {
        self.checkpoint_with(label, ScanMode::Full, None)
    }

    /// Checkpoints with a given scan mode and optional application state
    /// (the agent's memory epoch, handed back by a rollback to this
    /// checkpoint in [`RollbackReport::state`]).
    pub fn checkpoint_with(
        &self,
        label: &str,
        scan: ScanMode,
        state: Option<Vec<u8>>,
    ) -> Result<CheckpointInfo> {
        self.store.checkpoint(CheckpointRequest {
            label: Some(label.to_string()),
            state,
            scan,
            ..self.checkpoint_request()
        })
    }

    /// A checkpoint request stamped with this handle's session, run,
    /// phase, agent and model, with no label, no state and a full scan:
    /// fill in the rest and pass it to [`Store::checkpoint`].
    pub fn checkpoint_request(&self) -> CheckpointRequest {
        CheckpointRequest {
            session: self.id.clone(),
            run: self.run.clone(),
            phase: self.phase.clone(),
            agent: self.agent.clone(),
            model: self.model.clone(),
            ..CheckpointRequest::default()
        }
    }

    /// The automatic checkpoint at a safe point, labelled as
    /// [`SafePoint::label`] says, with an optional application state (the
    /// agent's memory epoch, handed back by a rollback to it): the one
    /// method behind [`before_turn`](Self::before_turn),
    /// [`after_turn`](Self::after_turn), [`before_write`](Self::before_write),
    /// [`phase_start`](Self::phase_start) and [`after_tool`](Self::after_tool),
    /// for when there is state to keep.
    ///
    /// [`SafePoint::BeforeWrite`] tracks its path first, so the checkpoint
    /// captures it even if it is ignored or does not exist yet (a rollback
    /// to it then deletes a file the write created); its label names the
    /// path as the workspace has it (`./src//a.rs` is `src/a.rs`), and a
    /// path outside the workspace or under `.git`/`.cairn` is refused.
    /// [`SafePoint::PhaseStart`]'s checkpoint carries that phase as its
    /// phase id, whatever this handle's is. An empty path, phase or tool
    /// name is refused.
    ///
    /// ```
    /// use cairn::session::SafePoint;
    /// let dir = tempfile::tempdir()?;
    /// let store = cairn::Store::open(dir.path())?;
    /// let s = store.session("t1").with_agent("coder").with_model("model-x");
    /// let c = s.safe_point(SafePoint::BeforeTurn(3), Some(b"memory epoch 3".to_vec()))?;
    /// assert_eq!(c.label.as_deref(), Some("Before turn 3"));
    /// assert_eq!(c.model.as_deref(), Some("model-x"));
    /// std::fs::write(dir.path().join("notes.md"), "changed")?;
    /// let back = s.rollback(c.id)?;
    /// assert_eq!(back.state.as_deref(), Some(&b"memory epoch 3"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn safe_point(
        &self,
        point: SafePoint<'_>,
        state: Option<Vec<u8>>,
    ) -> Result<CheckpointInfo> {
        let mut req = self.checkpoint_request();
        req.state = state;
        let refuse_empty = |what: &str, v: &str| {
            if v.is_empty() {
                Err(Error::Other(format!(
                    "{}: the {what} must not be empty",
                    point.method()
                )))
            } else {
                Ok(())
            }
        };
        req.label = Some(match point {
            SafePoint::BeforeWrite(path) => {
                refuse_empty("path", path)?;
                // The snapshot crate's check, as in `write_file`: its
                // error names the path and why.
                let rel = self.store.workspace()?.normalize(path)?;
                if rel.is_empty() {
                    return Err(Error::Other(format!(
                        "before_write: `{path}` is the workspace root, not a file"
                    )));
                }
                self.store.track(&[&rel])?;
                SafePoint::BeforeWrite(&rel).label()
            }
            SafePoint::PhaseStart(phase) => {
                refuse_empty("phase", phase)?;
                req.phase = Some(phase.to_string());
                point.label()
            }
            SafePoint::AfterTool(tool) => {
                refuse_empty("tool name", tool)?;
                point.label()
            }
            SafePoint::BeforeTurn(_) | SafePoint::AfterTurn(_) => point.label(),
        });
        self.store.checkpoint(req)
    }

    /// The automatic checkpoint before agent turn (LLM message) `n`:
    /// "Before turn n". With application state:
    /// [`safe_point`](Self::safe_point)`(SafePoint::BeforeTurn(n), Some(state))`.
    pub fn before_turn(&self, n: u64) -> Result<CheckpointInfo> {
        self.safe_point(SafePoint::BeforeTurn(n), None)
    }

    /// The automatic checkpoint after agent turn (LLM message) `n`:
    /// "After turn n". With application state:
    /// [`safe_point`](Self::safe_point)`(SafePoint::AfterTurn(n), Some(state))`.
    pub fn after_turn(&self, n: u64) -> Result<CheckpointInfo> {
        self.safe_point(SafePoint::AfterTurn(n), None)
    }

    /// The automatic checkpoint before the agent writes `path` (tracked
    /// first, see [`safe_point`](Self::safe_point)): "Before writing
    /// PATH". With application state:
    /// [`safe_point`](Self::safe_point)`(SafePoint::BeforeWrite(path), Some(state))`.
    pub fn before_write(&self, path: &str) -> Result<CheckpointInfo> {
        self.safe_point(SafePoint::BeforeWrite(path), None)
    }

    /// The automatic checkpoint at the start of agent phase `phase` (its
    /// phase id is `phase`): "Start of phase PHASE". Stamp the phase's
    /// events with a handle [`with_phase`](Self::with_phase)`(phase)`.
    /// With application state:
    /// [`safe_point`](Self::safe_point)`(SafePoint::PhaseStart(phase), Some(state))`.
    pub fn phase_start(&self, phase: &str) -> Result<CheckpointInfo> {
        self.safe_point(SafePoint::PhaseStart(phase), None)
    }

    /// The automatic checkpoint after a state-changing call of tool
    /// `tool`: "After tool TOOL". With application state:
    /// [`safe_point`](Self::safe_point)`(SafePoint::AfterTool(tool), Some(state))`.
    pub fn after_tool(&self, tool: &str) -> Result<CheckpointInfo> {
        self.safe_point(SafePoint::AfterTool(tool), None)
    }

    /// Rolls the whole workspace back to `target` (the current state is
    /// checkpointed first, so this can be undone). The undo point and the
    /// `rollback` record carry this handle's session, run, phase, agent
    /// and model; the undo point has no application state (see
    /// [`rollback_with_state`](Self::rollback_with_state)).
    pub fn rollback(&self, target: CheckpointId) -> Result<RollbackReport> {
        self.store.rollback(self.rollback_request(target))
    }

    /// Rolls back as [`rollback`](Self::rollback) does, keeping `state`
    /// (the application state now, e.g. the agent's memory epoch) as the
    /// undo point's state: undoing this rollback (rolling back to
    /// [`RollbackReport::source`]) hands it back in
    /// [`RollbackReport::state`], as this rollback hands back the
    /// target's.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let store = cairn::Store::open(dir.path())?;
    /// let s = store.session("t1");
    /// let c1 = s.checkpoint_with("epoch 1", cairn::ScanMode::Full, Some(b"epoch 1".to_vec()))?;
    /// std::fs::write(dir.path().join("a.txt"), "turn 2")?;
    /// let back = s.rollback_with_state(c1.id, Some(b"epoch 2".to_vec()))?;
    /// assert_eq!(back.state.as_deref(), Some(&b"epoch 1"[..]));
    /// let redo = s.rollback(back.source.expect("an undo point"))?;
    /// assert_eq!(redo.state.as_deref(), Some(&b"epoch 2"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rollback_with_state(
        &self,
        target: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> Result<RollbackReport> {
        self.store.rollback(RollbackRequest {
            state,
            ..self.rollback_request(target)
        })
    }

    /// Rolls back only these paths (files or directories), as
    /// [`rollback`](Self::rollback) does.
    pub fn rollback_paths(&self, target: CheckpointId, paths: &[&str]) -> Result<RollbackReport> {
        self.store.rollback(RollbackRequest {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            ..self.rollback_request(target)
        })
    }

    /// A whole-workspace rollback to `target` stamped with this handle's
    /// session, run, phase, agent and model, with no state: fill in the
    /// rest (`paths`, `state`, `dry_run`) and pass it to
    /// [`Store::rollback`].
    pub fn rollback_request(&self, target: CheckpointId) -> RollbackRequest {
        RollbackRequest {
            session: self.id.clone(),
            run: self.run.clone(),
            phase: self.phase.clone(),
            agent: self.agent.clone(),
            model: self.model.clone(),
            ..RollbackRequest::new(target)
        }
    }
}

/// A safe point at which an agent platform checkpoints the workspace
/// automatically (besides on explicit request), as
/// [`Session::safe_point`] takes it, with the label its checkpoint gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SafePoint<'a> {
    /// Before agent turn (LLM message) n: "Before turn n".
    BeforeTurn(u64),
    /// After agent turn (LLM message) n: "After turn n".
    AfterTurn(u64),
    /// Before the agent writes this workspace-relative path: "Before
    /// writing PATH".
    BeforeWrite(&'a str),
    /// At the start of this agent phase: "Start of phase PHASE".
    PhaseStart(&'a str),
    /// After a state-changing call of this tool: "After tool TOOL".
    AfterTool(&'a str),
}

impl SafePoint<'_> {
    /// The label of this safe point's checkpoint, e.g. "Before turn 3".
    pub fn label(&self) -> String {
        match self {
            SafePoint::BeforeTurn(n) => format!("Before turn {n}"),
            SafePoint::AfterTurn(n) => format!("After turn {n}"),
            SafePoint::BeforeWrite(path) => format!("Before writing {path}"),
            SafePoint::PhaseStart(phase) => format!("Start of phase {phase}"),
            SafePoint::AfterTool(tool) => format!("After tool {tool}"),
        }
    }

    /// The `Session` method named for this safe point, for errors.
    fn method(&self) -> &'static str {
        match self {
            SafePoint::BeforeTurn(_) => "before_turn",
            SafePoint::AfterTurn(_) => "after_turn",
            SafePoint::BeforeWrite(_) => "before_write",
            SafePoint::PhaseStart(_) => "phase_start",
            SafePoint::AfterTool(_) => "after_tool",
        }
    }
}

/// Writes `contents` to `full` atomically and durably: a temporary file in
/// the same directory (created like any new file, so the umask applies),
/// fsynced, renamed into place, then the directory fsynced. A file being
/// replaced keeps its permissions; a new one gets the mode any program
/// creating it would give it (not the 0600 of a private temp file).
fn write_atomic(full: &Path, contents: &[u8]) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// Distinguishes temp files of concurrent writers in one process.
    static NEXT_TMP: AtomicU64 = AtomicU64::new(0);
    let io =
        |op: &str, p: &Path, e: std::io::Error| Error::Other(format!("{op} {}: {e}", p.display()));
    let dir = full.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io("create directory for", full, e))?;
    let keep = std::fs::symlink_metadata(full)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.permissions());
    let name = full.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(
        ".{name}.cairn-tmp-{}-{}",
        std::process::id(),
        NEXT_TMP.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io("create temp file", &tmp, e))?;
        std::io::Write::write_all(&mut f, contents).map_err(|e| io("write", &tmp, e))?;
        if let Some(p) = keep {
            f.set_permissions(p)
                .map_err(|e| io("set permissions of", &tmp, e))?;
        }
        f.sync_data().map_err(|e| io("sync", &tmp, e))?;
        std::fs::rename(&tmp, full).map_err(|e| io("rename into", full, e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("sync directory", dir, e))
}

/// Line statistics between two versions (Myers diff via `similar`).
pub fn line_stats(old: &[u8], new: &[u8]) -> DiffStats {
    let (old, new) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
    let diff = similar::TextDiff::from_lines(old.as_ref(), new.as_ref());
    let mut stats = DiffStats::default();
    for op in diff.ops() {
        match op.tag() {
            similar::DiffTag::Equal => {}
            similar::DiffTag::Delete => stats.lines_removed += op.old_range().len() as u64,
            similar::DiffTag::Insert => stats.lines_added += op.new_range().len() as u64,
            similar::DiffTag::Replace => {
                stats.lines_removed += op.old_range().len() as u64;
                stats.lines_added += op.new_range().len() as u64;
            }
        }
    }
    stats.hunks = diff.grouped_ops(3).len() as u64;
    stats
}
