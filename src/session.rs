//! Sessions as a first-class handle: record events, track writes,
//! checkpoint and roll back within one session (thread, conversation).

use std::io::Read;
use std::path::Path;

use cairn_codec::event::DEFAULT_SESSION;
use cairn_codec::{CheckpointId, DiffStats, Event, EventKind, Lsn};
use cairn_snapshot::{
    CheckpointInfo, CheckpointRequest, RollbackReport, RollbackRequest, ScanMode, SnapshotError,
    Workspace,
};

use crate::error::{Error, Result};
use crate::Store;

/// A handle for recording into one session. Cheap to create; borrows the store.
///
/// A handle made with an empty session id (`store.session("")`) is the
/// default session, `default` ([`DEFAULT_SESSION`]), for everything it
/// records: events, file writes, checkpoints and rollbacks alike.
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
            // One rule for the whole handle: a checkpoint request with an
            // empty session is the default session's, and so is an event.
            id: if id.is_empty() {
                DEFAULT_SESSION.to_string()
            } else {
                id
            },
            run: None,
            phase: None,
            agent: None,
            model: None,
        }
    }

    /// The session id: `default` ([`DEFAULT_SESSION`]) for a handle made
    /// with an empty one.
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
    /// `src/a.rs`, `a/b/../c` is `a/c`, an absolute path inside the
    /// workspace is made relative), and the record names it in that normal
    /// form. A path outside the workspace (`../x`), under `.git` or
    /// `.cairn`, or the workspace root itself is refused.
    ///
    /// Only regular files are written: the file system is never read or
    /// written through a symlink. A path that is a symlink (even to a file
    /// inside the workspace), or lies under one, is refused
    /// ([`SnapshotError::BadPath`] in [`Error::Snapshot`]), as is a
    /// directory or a special file: the link is not replaced, and what it
    /// points to is neither read into the store as the `before` contents
    /// nor changed. Write the file it leads to instead; a checkpoint
    /// records a symlink as a link.
    ///
    /// The record is checked before the file is touched, so a write the log would
    /// refuse changes nothing; nor does a refused path (it is not even
    /// tracked). If appending still fails once the file is
    /// written (an I/O error), the error says so and names the blob that
    /// holds the contents it replaced. A file that cannot be read or
    /// written is an [`Error::Io`].
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let store = cairn::Store::open(dir.path())?;
    /// let s = store.session("t1");
    /// s.write_file("src/a.rs", b"fn a() {}\n")?;
    /// std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link"))?;
    /// let refused = s.write_file("link", b"x\n").unwrap_err();
    /// assert!(refused.to_string().contains("is a symlink"), "{refused}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_file(&self, path: &str, contents: &[u8]) -> Result<Lsn> {
        let ws = self.store.workspace()?;
        let rel = file_path(ws, path, "write_file")?;
        let full = ws.root().join(&rel);
        let (before, keep) = read_regular(ws.root(), path, &full, "write_file")?.unzip();
        self.track(&rel)?;
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
        write_atomic(&full, contents, keep)?;
        self.record_done(&e, format!("{rel} was written"))
    }

    /// A tracked, recorded file deletion, modelled on
    /// [`write_file`](Self::write_file): tracks the path, stores the
    /// file's contents as a blob, deletes it (and syncs its directory), and
    /// records a `file.delete` (tool `delete_file`) with the `before` hash
    /// and diff statistics (every line removed).
    ///
    /// `path` is read as `write_file` reads it, and the same paths are
    /// refused: outside the workspace, under `.git` or `.cairn`, a
    /// symlink or a path under one (the link is not deleted, and what it
    /// points to is not read), a directory, a special file. A path where
    /// nothing is is an [`Error::Io`] whose source's kind is
    /// [`NotFound`](std::io::ErrorKind::NotFound). Nothing is deleted
    /// unless the record would be taken.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let store = cairn::Store::open(dir.path())?;
    /// let s = store.session("t1");
    /// s.write_file("old.txt", b"one\ntwo\n")?;
    /// let lsn = s.delete_file("old.txt")?;
    /// assert!(!dir.path().join("old.txt").exists());
    /// let r = store.record(lsn)?;
    /// assert_eq!(r.event.diff_stats.unwrap().lines_removed, 2);
    /// assert_eq!(store.blob(&r.event.before.unwrap())?, b"one\ntwo\n");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delete_file(&self, path: &str) -> Result<Lsn> {
        let ws = self.store.workspace()?;
        let rel = file_path(ws, path, "delete_file")?;
        let full = ws.root().join(&rel);
        let (old, _) = read_regular(ws.root(), path, &full, "delete_file")?
            .ok_or_else(|| nothing_at("delete", &full))?;
        self.track(&rel)?;
        let mut e = self.event(EventKind::FileDelete);
        e.tool = Some("delete_file".to_string());
        e.path = Some(rel.clone());
        e.before = Some(self.store.put_blob(&old)?);
        e.diff_stats = Some(line_stats(&old, b""));
        self.store.check_event(&e)?;
        std::fs::remove_file(&full).map_err(|err| Error::io("delete", &full, err))?;
        sync_parent(&full)?;
        self.record_done(&e, format!("{rel} was deleted"))
    }

    /// A tracked, recorded move (rename) of a file, modelled on
    /// [`write_file`](Self::write_file): tracks both paths, stores the
    /// file's contents as a blob, renames it (creating the destination's
    /// directories; the file keeps its mode), and records a `file.move`
    /// (tool `move_file`) with `path` `from`, `to_path` `to`, the contents
    /// as both `before` and `after`, and diff statistics (no line
    /// changed).
    ///
    /// Both paths are read as `write_file` reads them and refused as it
    /// refuses them (outside the workspace, under `.git` or `.cairn`, a
    /// symlink or under one, a directory, a special file). The
    /// destination must not exist: a move never replaces a file, since
    /// the record could not keep what that file held (delete it with
    /// [`delete_file`](Self::delete_file) first). A source where nothing
    /// is is an [`Error::Io`] of kind
    /// [`NotFound`](std::io::ErrorKind::NotFound).
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let store = cairn::Store::open(dir.path())?;
    /// let s = store.session("t1");
    /// s.write_file("a.rs", b"fn a() {}\n")?;
    /// s.move_file("a.rs", "src/a.rs")?;
    /// assert_eq!(std::fs::read(dir.path().join("src/a.rs"))?, b"fn a() {}\n");
    /// let moved = store.query(|q| q.file_at(cairn::Point::Head, "src/a.rs"))?;
    /// assert_eq!(moved, b"fn a() {}\n");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn move_file(&self, from: &str, to: &str) -> Result<Lsn> {
        let ws = self.store.workspace()?;
        let src = file_path(ws, from, "move_file")?;
        let dst = file_path(ws, to, "move_file")?;
        if src == dst {
            return Err(SnapshotError::bad_path(
                to,
                format!("move_file: it is the path to move (`{src}`)"),
            )
            .into());
        }
        let (src_full, dst_full) = (ws.root().join(&src), ws.root().join(&dst));
        let (contents, _) = read_regular(ws.root(), from, &src_full, "move_file")?
            .ok_or_else(|| nothing_at("move", &src_full))?;
        match std::fs::symlink_metadata(&dst_full) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("look up", &dst_full, e)),
            Ok(_) => return Err(destination_exists(to)),
        }
        self.track(&src)?;
        self.track(&dst)?;
        let mut e = self.event(EventKind::FileMove);
        e.tool = Some("move_file".to_string());
        e.path = Some(src.clone());
        e.to_path = Some(dst.clone());
        let h = self.store.put_blob(&contents)?;
        e.before = Some(h);
        e.after = Some(h);
        // The same contents on both sides: no line changed, no hunk (what
        // diffing the file against itself would count, without the diff).
        e.diff_stats = Some(DiffStats::default());
        self.store.check_event(&e)?;
        let dir = dst_full.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|err| Error::io("create directory for", &dst_full, err))?;
        rename_no_replace(&src_full, &dst_full).map_err(|err| {
            if err.kind() == std::io::ErrorKind::AlreadyExists {
                destination_exists(to)
            } else {
                Error::io("move", &src_full, err)
            }
        })?;
        sync_parent(&dst_full)?;
        if src_full.parent() != dst_full.parent() {
            sync_parent(&src_full)?;
        }
        self.record_done(&e, format!("{src} was moved to {dst}"))
    }

    /// Records `e`, the record of a change already made (`done` says
    /// which): if appending fails now, the error says the change was made
    /// and names the blob that holds the contents it replaced.
    fn record_done(&self, e: &Event, done: String) -> Result<Lsn> {
        self.record(e).map_err(|err| {
            let kept = match e.before {
                Some(h) => {
                    format!("; the contents it replaced are blob {h} (`cairn blob get {h}`)")
                }
                None => String::new(),
            };
            Error::Other(format!(
                "{done}, but its {} record could not be appended: {err}{kept}",
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
/// the same directory (created like any new file, so the umask applies:
/// the engine's `atomic::write_atomic` makes store files, private 0600,
/// which is wrong for the user's own),
/// fsynced, renamed into place, then the directory fsynced. A file being
/// replaced keeps its permissions (`keep`, as [`read_regular`] read them
/// with its contents); a new one gets the mode any program creating it
/// would give it (not the 0600 of a private temp file).
fn write_atomic(full: &Path, contents: &[u8], keep: Option<std::fs::Permissions>) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// Distinguishes temp files of concurrent writers in one process.
    static NEXT_TMP: AtomicU64 = AtomicU64::new(0);
    let io = |op: &'static str, p: &Path, e: std::io::Error| Error::io(op, p, e);
    let dir = full.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io("create directory for", full, e))?;
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
    sync_parent(full)
}

/// `path` as a file helper (`method`) takes it: normalised as the
/// workspace normalises paths (its error names the path and why: outside
/// the workspace, under `.git` or `.cairn`, excluded), not the workspace
/// root, and with no symlink among its directories (the workspace never
/// follows one, and [`Workspace::track`] would refuse it). Checked before
/// anything is tracked or read.
fn file_path(ws: &Workspace, path: &str, method: &str) -> Result<String> {
    let rel = ws.normalize(path)?;
    if rel.is_empty() {
        return Err(SnapshotError::bad_path(
            path,
            format!("{method}: it is the workspace root, not a file"),
        )
        .into());
    }
    if let Some(dir) = ws.symlinked_dir(&rel) {
        return Err(SnapshotError::bad_path(
            path,
            format!("`{dir}` is a symlink, which cairn never follows (it may lead out of the workspace): give the path it leads to instead"),
        )
        .into());
    }
    Ok(rel)
}

/// The contents of the regular file at `full` (the workspace path the
/// caller gave as `given`) and its permissions (which a write keeps), or
/// `None` if nothing is there. Never reads
/// through a symlink: a symlink, a directory or a special file at `full`
/// is refused with a [`SnapshotError::BadPath`] that says what it is and
/// that `method` takes regular files only. The file is opened without
/// following a symlink (and without blocking on a FIFO), so a link put
/// there after the check is refused too, not read through.
fn read_regular(
    root: &Path,
    given: &str,
    full: &Path,
    method: &str,
) -> Result<Option<(Vec<u8>, std::fs::Permissions)>> {
    let refuse = |what: String| -> Error {
        SnapshotError::bad_path(
            given,
            format!("{what}: {method} reads and writes regular files only"),
        )
        .into()
    };
    let meta = match std::fs::symlink_metadata(full) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("look up", full, e)),
    };
    if meta.file_type().is_symlink() {
        return Err(symlink_refusal(root, given, full, method));
    }
    if meta.is_dir() {
        return Err(refuse("it is a directory".into()));
    }
    if !meta.is_file() {
        return Err(refuse(
            "it is not a regular file (a FIFO, socket or device)".into(),
        ));
    }
    let mut f = match cairn_snapshot::scan::open_nofollow(full) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(symlink_refusal(root, given, full, method))
        }
        Err(e) => return Err(Error::io("open", full, e)),
    };
    let opened = match f.metadata() {
        Ok(m) if m.is_file() => m,
        _ => return Err(refuse("it is no longer a regular file".into())),
    };
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    f.read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", full, e))?;
    Ok(Some((bytes, opened.permissions())))
}

/// The refusal of a path that is a symlink: where it leads (by name, if
/// into the workspace), and that a file helper never goes through one.
fn symlink_refusal(root: &Path, given: &str, full: &Path, method: &str) -> Error {
    let leads = match std::fs::read_link(full) {
        Ok(t) => format!(" to `{}`", t.display()),
        Err(_) => String::new(),
    };
    let inside = std::fs::canonicalize(full)
        .ok()
        .and_then(|t| {
            t.strip_prefix(root)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .filter(|r| !r.is_empty());
    let advice = match inside {
        Some(r) => format!("give the path it leads to, `{r}`, instead"),
        None => "a checkpoint records it as a link; remove or replace it yourself if it should go"
            .into(),
    };
    SnapshotError::bad_path(
        given,
        format!("it is a symlink{leads}, and {method} never reads or writes through a symlink, nor replaces one: {advice}"),
    )
    .into()
}

/// The [`Error::Io`] of `op` ("delete", "move") on a path where nothing
/// is: its source's kind is `NotFound`.
fn nothing_at(op: &'static str, full: &Path) -> Error {
    let why = std::io::Error::new(std::io::ErrorKind::NotFound, "there is no file there");
    Error::io(op, full, why)
}

/// The refusal of a move onto a path that exists.
fn destination_exists(to: &str) -> Error {
    SnapshotError::bad_path(
        to,
        "it exists, and move_file never replaces a file (the record could not keep what it held): delete it first (`Session::delete_file`)",
    )
    .into()
}

/// Renames `from` to `to` unless `to` exists (then `AlreadyExists`),
/// atomically where the system can (Linux `renameat2` with
/// `RENAME_NOREPLACE`); elsewhere, or on a file system without it, `to`
/// is looked up first.
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
        };
        let (f, t) = (c(from)?, c(to)?);
        // SAFETY: both are NUL-terminated strings that live across the
        // call, and AT_FDCWD is a valid directory descriptor for it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                f.as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if !matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
            return Err(err);
        }
    }
    match std::fs::symlink_metadata(to) {
        Ok(_) => Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::rename(from, to),
        Err(e) => Err(e),
    }
}

/// Syncs the directory that holds `full`, so a rename or removal in it
/// is durable.
fn sync_parent(full: &Path) -> Result<()> {
    let dir = full.parent().unwrap_or(Path::new("."));
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync directory", dir, e))
}

/// Line statistics between two versions (Myers diff via `similar`), with
/// lines split as `cairn diff` and `blame` split them (at `\n` only) and
/// the diff bounded in time as theirs is.
pub fn line_stats(old: &[u8], new: &[u8]) -> DiffStats {
    let (old, new) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
    let (old, new) = (
        cairn_query::query::split_lines(&old),
        cairn_query::query::split_lines(&new),
    );
    let diff = cairn_query::query::line_diff(&old, &new);
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

#[cfg(test)]
mod tests {
    use super::line_stats;

    #[test]
    fn line_stats_split_lines_at_newlines_only() {
        let s = line_stats(b"a\nb\n", b"a\nc\nd\n");
        assert_eq!((s.lines_added, s.lines_removed), (2, 1));
        // A lone \r stays inside its line, as in `cairn diff` and `blame`:
        // one line changed, not one line added.
        let s = line_stats(b"x\ry\n", b"x\rz\ry\n");
        assert_eq!((s.lines_added, s.lines_removed), (1, 1));
        let s = line_stats(b"", b"");
        assert_eq!((s.lines_added, s.lines_removed), (0, 0));
    }
}
