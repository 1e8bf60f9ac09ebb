//! The marker of a rollback in progress, and what the next flow that
//! writes does when it finds one.
//!
//! A rollback writes [`ROLLBACK_MARKER_FILE`] in the workspace cache
//! directory (durably: temporary, fsync, rename, directory fsync) while its
//! undo point is made durable, before it changes anything the user sees,
//! and removes it once its `rollback` record is appended, ok or not. So a
//! marker that outlives its rollback means the process stopped part way
//! (killed, out of memory, power loss) and left no record: the workspace
//! may hold a mix of the undo point's tree and the target's.
//!
//! The next checkpoint, rollback, retention run (and `Store::track`)
//! calls [`record_interrupted_rollback`] first: it appends the `rollback`
//! record the dead process could not (`ok: false`,
//! [`ROLLBACK_INCOMPLETE`](crate::rollback_record::ROLLBACK_INCOMPLETE), source
//! the undo point, the same shape as a rollback that failed in process),
//! removes the restore temporaries it left, removes the marker and warns
//! (see [`Workspace::take_warnings`]). One scan of the workspace, compared
//! with the undo point and the target, tells the record and the warning
//! how far the rollback got: no file changed, every file restored, or a
//! mix (`meta.interrupted.workspace`). Readers only warn
//! ([`unfinished_rollback_warning`]).
//!
//! The marker does not name the undo point (it is written while the undo
//! point is being recorded, so as to cost the rollback no time): it names
//! the log's head before the rollback began, and the undo point is the
//! first `checkpoint.create` after it (checkpoints of one workspace are
//! taken one at a time, so nothing else can come between), with the label
//! `Before rollback to <target>`.
//!
//! The file is JSON:
//!
//! ```text
//! {"version":1,"target":"c4","session":"default","run":"run-1","scope":["src"],
//!  "started":1767225600000,"pid":4242,"head_before":14,
//!  "head_chain":"<64 hex digits: the chain hash at head_before>"}
//! ```
//!
//! `run`, `phase`, `agent` and `model` (the rollback's, stamped on the
//! record written for it) are there only when the rollback had them; a
//! marker without them (written before they were added) reads as having
//! none.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use cairn_codec::{ChainHash, CheckpointId, EventKind, Lsn, Timestamp};

use crate::blobs::BlobRead;
use crate::durable::write_atomic;
use crate::error::{Result, SnapshotError};
use crate::log_access::LogAccess;
use crate::rollback_record::{record_incomplete, rollback_event};
use crate::workspace::Workspace;
use crate::{manifest, relpath, restore};

/// The marker's file name in the workspace cache directory.
pub const ROLLBACK_MARKER_FILE: &str = "rollback-in-progress.json";

/// The marker layout this code writes; a marker of another version is
/// taken as damaged (set aside with a warning, never acted on).
const MARKER_VERSION: u32 = 1;

/// The largest marker read: a marker holds a few ids and the rollback's
/// `--path` scope; anything this big is not one (and is not read whole).
const MAX_MARKER_BYTES: u64 = 1 << 20;

/// The `meta` key of a `rollback` record written for a rollback whose
/// process stopped part way: `{"started": ISO time, "pid": process id,
/// "workspace": "unchanged" | "restored" | "mixed"}` (`workspace` absent
/// when the comparison could not be made).
pub const ROLLBACK_META_INTERRUPTED: &str = "interrupted";

/// A rollback that began and has not recorded its end, as its marker says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnfinishedRollback {
    /// The checkpoint it was restoring.
    pub target: CheckpointId,
    /// The session its undo point and record belong to.
    pub session: String,
    /// The run id of its undo point and record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The phase id of its undo point and record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The agent name on its undo point and record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The model name on its undo point and record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The paths it was limited to (empty: the whole workspace).
    pub scope: Vec<String>,
    /// When it began.
    pub started: Timestamp,
    /// The process that ran it.
    pub pid: u32,
    /// The log's head before it began: its undo point is the first
    /// checkpoint after it.
    pub head_before: Lsn,
    /// The chain hash at `head_before`, so a marker is never matched
    /// against another log.
    pub head_chain: ChainHash,
}

/// The file's layout: the version, then the fields.
#[derive(Serialize, Deserialize)]
struct MarkerFile {
    version: u32,
    #[serde(flatten)]
    rollback: UnfinishedRollback,
}

/// What the marker path holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollbackMarker {
    /// A rollback that has not recorded its end.
    Unfinished(UnfinishedRollback),
    /// A file that is not a marker this code can read (damaged, from
    /// another version, unreadable): why.
    Damaged(String),
}

/// Markers of rollbacks running now in this process (by path): another
/// handle on the same cache directory in this process must not take one
/// for a dead rollback.
static RUNNING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

impl UnfinishedRollback {
    /// Encodes the marker file.
    fn encode(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(&MarkerFile {
            version: MARKER_VERSION,
            rollback: self.clone(),
        })
        .map_err(|e| SnapshotError::Invalid(format!("encode the rollback marker: {e}")))
    }

    /// Decodes a marker file, checking what it says hangs together.
    fn decode(bytes: &[u8]) -> std::result::Result<UnfinishedRollback, String> {
        let f: MarkerFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if f.version != MARKER_VERSION {
            return Err(format!(
                "version {} (this cairn reads version {MARKER_VERSION})",
                f.version
            ));
        }
        let r = f.rollback;
        // The scope decides which directories are searched for the dead
        // rollback's temporaries (removed) and goes into the record and
        // the command that finishes it: read from the store, it is
        // checked, never trusted. Workspace-relative paths of plain names
        // only (`..`, an absolute path or an empty name would reach out of
        // the workspace); the empty path is the whole workspace.
        if let Some(p) = r
            .scope
            .iter()
            .find(|p| !p.is_empty() && !p.split('/').all(relpath::valid_name))
        {
            return Err(format!(
                "its path `{}` is not a workspace-relative path of plain names",
                p.escape_debug()
            ));
        }
        // The target existed before the rollback began.
        if r.target.0 > r.head_before || r.target.0 .0 == 0 {
            return Err(format!(
                "its target {} is not before the head it names (LSN {})",
                r.target, r.head_before
            ));
        }
        Ok(r)
    }

    /// `to c4`, or `of src, docs to c4` for a rollback limited to paths.
    fn what(&self) -> String {
        if self.scope.is_empty() {
            format!("to {}", self.target)
        } else {
            format!("of {} to {}", self.scope.join(", "), self.target)
        }
    }

    /// The command that finishes it: the same target, paths, session and
    /// stamps (run, phase, agent, model), each value quoted for a shell
    /// where it needs it.
    fn finish_command(&self) -> String {
        let mut c = format!("cairn rollback {}", self.target);
        for p in &self.scope {
            c += &format!(" --path {}", shell_word(p));
        }
        let session = crate::checkpoint::session_or_default(&self.session);
        let stamps = [
            (
                "session",
                Some(session.as_str()).filter(|s| *s != "default"),
            ),
            ("run", self.run.as_deref()),
            ("phase", self.phase.as_deref()),
            ("agent", self.agent.as_deref()),
            ("model", self.model.as_deref()),
        ];
        for (flag, v) in stamps {
            if let Some(v) = v {
                c += &format!(" --{flag} {}", shell_word(v));
            }
        }
        c
    }
}

/// `s` as one word for a POSIX shell: as it is when it holds only
/// characters no shell treats specially, else in single quotes.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@+=,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Reads the marker: `None` when there is none (one failed open, the
/// common case).
pub fn rollback_marker(ws: &Workspace) -> Option<RollbackMarker> {
    use std::io::Read;
    let path = ws.cache_path(ROLLBACK_MARKER_FILE);
    let f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(RollbackMarker::Damaged(format!("cannot be read: {e}"))),
    };
    let mut bytes = Vec::new();
    if let Err(e) = f.take(MAX_MARKER_BYTES).read_to_end(&mut bytes) {
        return Some(RollbackMarker::Damaged(format!("cannot be read: {e}")));
    }
    Some(match UnfinishedRollback::decode(&bytes) {
        Ok(r) => RollbackMarker::Unfinished(r),
        Err(why) => RollbackMarker::Damaged(why),
    })
}

/// A marker written for a rollback running in this process. Dropped, it
/// removes the marker, except while unwinding from a panic or after
/// [`MarkerGuard::keep`]: then the rollback's end is not recorded, and the
/// next flow must record it.
pub(crate) struct MarkerGuard<'a> {
    ws: &'a Workspace,
    path: PathBuf,
    keep: bool,
}

impl<'a> MarkerGuard<'a> {
    /// Registers the marker as this process's, before it is written (see
    /// [`MarkerGuard::write`]).
    pub(crate) fn new(ws: &'a Workspace) -> MarkerGuard<'a> {
        let path = ws.cache_path(ROLLBACK_MARKER_FILE);
        RUNNING.lock().push(path.clone());
        MarkerGuard {
            ws,
            path,
            keep: false,
        }
    }

    /// Writes the marker durably.
    pub(crate) fn write(&self, r: &UnfinishedRollback) -> Result<()> {
        let bytes = r.encode()?;
        write_atomic(&self.path, &bytes, true)
    }

    /// Leaves the marker in place: the rollback changed the workspace and
    /// its record could not be appended.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for MarkerGuard<'_> {
    fn drop(&mut self) {
        if !self.keep && !std::thread::panicking() {
            // Not synced: a marker that comes back after a power loss finds
            // its rollback's record and is then removed without a word.
            remove_marker(self.ws);
        }
        let mut running = RUNNING.lock();
        if let Some(i) = running.iter().position(|p| *p == self.path) {
            running.swap_remove(i);
        }
    }
}

fn remove_marker(ws: &Workspace) {
    let _ = std::fs::remove_file(ws.cache_path(ROLLBACK_MARKER_FILE));
}

fn running_here(ws: &Workspace) -> bool {
    let path = ws.cache_path(ROLLBACK_MARKER_FILE);
    RUNNING.lock().contains(&path)
}

/// The undo point of `r` in the log, if it was recorded: the first
/// checkpoint after `r.head_before`, labelled as a rollback's undo point
/// is. `Err` says the marker belongs to another log (or a log that lost
/// its tail).
fn find_undo_point<L: LogAccess + ?Sized>(
    log: &L,
    r: &UnfinishedRollback,
) -> std::result::Result<UndoState, String> {
    let head = log.head();
    if r.head_before > head.last_lsn {
        return Err(format!(
            "it names LSN {} but the log ends at {}",
            r.head_before, head.last_lsn
        ));
    }
    if r.head_before.0 > 0 {
        let chain = log.read(r.head_before).map(|rec| rec.chain).ok();
        if chain != Some(r.head_chain) {
            return Err(format!(
                "the record at LSN {} is not the one it names",
                r.head_before
            ));
        }
    }
    // Checkpoints of this workspace are taken one at a time, so its undo
    // point is the first with its label and session (a recorded or
    // imported checkpoint event may come between).
    let label = crate::rollback_record::undo_point_label(r.target);
    let session = crate::checkpoint::session_or_default(&r.session);
    let mut undo: Option<(Lsn, Option<cairn_codec::BlobHash>)> = None;
    let mut ended = false;
    let walk = log.for_each_from(r.head_before.next(), &mut |rec| {
        let e = &rec.event;
        match (e.kind, undo) {
            (EventKind::CheckpointCreate, None)
                if e.label.as_deref() == Some(label.as_str()) && e.session == session =>
            {
                undo = Some((rec.lsn, e.root));
            }
            (EventKind::Rollback, Some((u, _))) => ended |= e.source == Some(CheckpointId(u)),
            _ => {}
        }
        Ok(())
    });
    if let Err(e) = walk {
        return Err(format!(
            "the log after LSN {} cannot be read: {e}",
            r.head_before
        ));
    }
    Ok(match undo {
        None => UndoState::NotRecorded,
        Some(_) if ended => UndoState::Ended,
        Some((u, root)) => UndoState::Undo(CheckpointId(u), root),
    })
}

enum UndoState {
    /// The process stopped before the undo point was recorded: nothing
    /// the user sees had changed.
    NotRecorded,
    /// The undo point (and its tree), and no record of the rollback's end.
    Undo(CheckpointId, Option<cairn_codec::BlobHash>),
    /// The rollback recorded its end; only the marker's removal was lost.
    Ended,
}

/// Records a rollback that a dead process left unfinished, if the marker
/// says there is one: appends its `rollback` record (`ok: false`,
/// `rollback_incomplete`, source its undo point, the text saying the
/// process stopped part way), removes the restore temporaries it left in
/// the workspace, removes the marker and warns (see
/// [`Workspace::take_warnings`]). Returns the record's LSN, if one was
/// appended. A damaged marker, or one from another log, is set aside with
/// a warning. Costs one failed `open` when there is no marker.
///
/// Checkpoints, rollbacks and retention call it first; an embedder that
/// writes through the workspace otherwise (tracking paths) may call it
/// itself. The caller must be the only writer of the store (its lock).
pub fn record_interrupted_rollback<L: LogAccess + ?Sized, B: BlobRead + Sync + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
) -> Result<Option<Lsn>> {
    if ws.is_read_only() {
        return Ok(None);
    }
    let r = match rollback_marker(ws) {
        None => return Ok(None),
        Some(_) if running_here(ws) => return Ok(None),
        Some(RollbackMarker::Damaged(why)) => {
            set_aside(ws, &format!("is damaged ({why})"));
            return Ok(None);
        }
        Some(RollbackMarker::Unfinished(r)) => r,
    };
    let (undo, undo_root) = match find_undo_point(log, &r) {
        Err(why) => {
            set_aside(ws, &format!("does not match this store's log ({why})"));
            return Ok(None);
        }
        Ok(UndoState::Ended) => {
            remove_marker(ws);
            return Ok(None);
        }
        Ok(UndoState::NotRecorded) => {
            let removed = remove_temporaries(ws, blobs, &r, target_root(log, &r), None);
            remove_marker(ws);
            ws.warn(format!(
                "a rollback {} started at {} was interrupted before it changed anything (the process stopped before its undo point was recorded){}",
                r.what(),
                r.started.to_iso(),
                temporaries_words(removed),
            ));
            return Ok(None);
        }
        Ok(UndoState::Undo(u, root)) => (u, root),
    };
    // The temporaries go first, so that the workspace compared below is
    // what the user sees. (Killed here, the marker is still there and the
    // next run does all of this again.)
    let removed = remove_temporaries(ws, blobs, &r, target_root(log, &r), undo_root);
    let reached = workspace_reached(log, blobs, ws, &r, undo);
    let (ev, meta) = interrupted_record(&r, undo, reached);
    let (state, next) = state_words(&r, undo, reached);
    let why = format!(
        "interrupted: the process stopped part way (the rollback started at {}); {state}",
        r.started.to_iso(),
    );
    let lsn = record_incomplete(log, ev, meta, why)?;
    remove_marker(ws);
    ws.warn(format!(
        "a rollback {} started at {} was interrupted (the process stopped part way): {state}; {next} (recorded as a failed rollback at LSN {lsn}){}",
        r.what(),
        r.started.to_iso(),
        temporaries_words(removed),
    ));
    Ok(Some(lsn))
}

/// The `rollback` record of the interrupted rollback `r` from its undo
/// point `undo`, and its `meta` (when it started, its process, and how
/// far it got).
fn interrupted_record(
    r: &UnfinishedRollback,
    undo: CheckpointId,
    reached: Reached,
) -> (
    cairn_codec::Event,
    serde_json::Map<String, serde_json::Value>,
) {
    let mut ev = rollback_event(&r.session, undo, r.target, &r.scope);
    ev.run = r.run.clone();
    ev.phase = r.phase.clone();
    ev.agent = r.agent.clone();
    ev.model = r.model.clone();
    let mut interrupted = serde_json::json!({"started": r.started.to_iso(), "pid": r.pid});
    if let Some(w) = reached.word() {
        interrupted["workspace"] = serde_json::json!(w);
    }
    let mut meta = serde_json::Map::new();
    meta.insert(ROLLBACK_META_INTERRUPTED.into(), interrupted);
    (ev, meta)
}

/// What the workspace holds after the interrupted rollback `r`, and what
/// the user can run next, in words.
fn state_words(r: &UnfinishedRollback, undo: CheckpointId, reached: Reached) -> (String, String) {
    match reached {
        Reached::Unchanged => (
            format!("it stopped before it changed any file: the workspace is as at {undo}"),
            format!("`{}` runs it again", r.finish_command()),
        ),
        Reached::Restored => (
            format!(
                "it had restored every file: the workspace is as at {}",
                r.target
            ),
            format!("`cairn rollback {undo}` undoes it"),
        ),
        Reached::Mixed => (
            format!("the workspace holds a mix of {undo} and {}", r.target),
            format!(
                "`cairn rollback {undo}` restores the state before it, `{}` finishes it",
                r.finish_command()
            ),
        ),
        Reached::Unknown => (
            format!("the workspace may hold a mix of {undo} and {}", r.target),
            format!(
                "`cairn rollback {undo}` restores the state before it, `{}` finishes it",
                r.finish_command()
            ),
        ),
    }
}

/// How far an interrupted rollback got, from the workspace as it is now
/// (within the rollback's scope).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reached {
    /// Every file is as at the undo point: nothing was changed.
    Unchanged,
    /// Every file is as at the target: only the record is missing.
    Restored,
    /// Neither: some files were restored, some not.
    Mixed,
    /// The comparison could not be made (a tree unreadable, the
    /// workspace not scannable): the record says "may hold a mix".
    Unknown,
}

impl Reached {
    /// The value of `meta.interrupted.workspace` (none when unknown).
    fn word(self) -> Option<&'static str> {
        match self {
            Reached::Unchanged => Some("unchanged"),
            Reached::Restored => Some("restored"),
            Reached::Mixed => Some("mixed"),
            Reached::Unknown => None,
        }
    }
}

/// Compares the workspace, within `r`'s scope, with the undo point `undo`
/// and with the target, as `rollback --dry-run` would plan a rollback to
/// each (files a checkpoint did not capture left out): an empty plan means
/// the workspace is that checkpoint's tree. Scans the workspace once
/// (unchanged files by their stat data), after a crash only. Any error
/// makes it [`Reached::Unknown`]: the record is written anyway.
fn workspace_reached<L: LogAccess + ?Sized, B: BlobRead + Sync + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
    r: &UnfinishedRollback,
    undo: CheckpointId,
) -> Reached {
    let is_tree = |cur: &manifest::Manifest, id: CheckpointId| -> Result<bool> {
        let c = crate::list::find_checkpoint(log, ws, id)?;
        let (tgt, same) = restore::load_target(blobs, &c.root, cur)?;
        let (plan, _) = crate::rollback_plan::rollback_plan(ws, (cur, &tgt, &same), &r.scope, &c)?;
        Ok(plan.is_empty())
    };
    let compare = || -> Result<Reached> {
        let (cur, _) = crate::rollback_plan::workspace_tree(ws, blobs)?;
        Ok(if is_tree(&cur, undo)? {
            Reached::Unchanged
        } else if is_tree(&cur, r.target)? {
            Reached::Restored
        } else {
            Reached::Mixed
        })
    };
    compare().unwrap_or(Reached::Unknown)
}

/// The root of the target's tree, from its `checkpoint.create` record.
fn target_root<L: LogAccess + ?Sized>(
    log: &L,
    r: &UnfinishedRollback,
) -> Option<cairn_codec::BlobHash> {
    let rec = log.read(r.target.0).ok()?;
    (rec.event.kind == EventKind::CheckpointCreate)
        .then_some(rec.event.root)
        .flatten()
}

fn temporaries_words(removed: usize) -> String {
    match removed {
        0 => String::new(),
        1 => "; removed the temporary file it left".into(),
        n => format!("; removed the {n} temporary files it left"),
    }
}

/// Moves a marker that cannot be acted on out of the way (best effort:
/// it is never acted on anyway) and warns; `what` says what is wrong.
fn set_aside(ws: &Workspace, what: &str) {
    let from = ws.cache_path(ROLLBACK_MARKER_FILE);
    let moved = match ws.set_aside(ROLLBACK_MARKER_FILE) {
        Ok(to) => format!("it was moved to {}", to.display()),
        Err(e) => format!("it could not be moved aside ({e})"),
    };
    ws.warn(format!(
        "the rollback marker {} {what}, so nothing was recorded for it: {moved}; a rollback may have been interrupted part way: the last checkpoint labelled `Before rollback to ...` in `cairn log` holds the state before it",
        from.display(),
    ));
}

/// The warning a reader gives for a marker (without writing anything):
/// `None` when there is none. The undo point is named when the log holds
/// it.
pub fn unfinished_rollback_warning<L: LogAccess + ?Sized>(
    log: &L,
    ws: &Workspace,
) -> Option<String> {
    let r = match rollback_marker(ws)? {
        RollbackMarker::Damaged(why) => {
            return Some(format!(
                "the rollback marker {} is damaged ({why}): a rollback may have been interrupted part way; the next checkpoint, rollback or track sets the marker aside",
                ws.cache_path(ROLLBACK_MARKER_FILE).display()
            ))
        }
        RollbackMarker::Unfinished(r) => r,
    };
    let state = match process_alive(r.pid) {
        Some(false) => format!("it was interrupted (process {} stopped part way)", r.pid),
        _ => format!("it is running now (process {}), or was interrupted", r.pid),
    };
    let undo = match find_undo_point(log, &r) {
        Ok(UndoState::Undo(u, _)) => format!(
            "; the workspace may hold a mix of both: `cairn rollback {u}` restores the state before it, `{}` finishes it",
            r.finish_command()
        ),
        Ok(UndoState::NotRecorded) => "; its undo point is not recorded yet, so nothing it would change has changed".into(),
        Ok(UndoState::Ended) => return None,
        Err(why) => format!("; its marker does not match this store's log ({why})"),
    };
    Some(format!(
        "a rollback {} started at {} has not finished: {state}{undo}; the next checkpoint, rollback or track records it",
        r.what(),
        r.started.to_iso(),
    ))
}

/// Whether process `pid` exists, where `/proc` can tell (Linux); `None`
/// elsewhere. A live pid may be a new process that reused the number.
fn process_alive(pid: u32) -> Option<bool> {
    if pid == std::process::id() {
        // A reader is not the rollback that wrote the marker.
        return Some(false);
    }
    Path::new("/proc/self")
        .exists()
        .then(|| Path::new(&format!("/proc/{pid}")).exists())
}

/// The name a rollback's temporary in process `pid` has (see
/// `restore::stage_entry`): `.cairn-restore-<pid>-<n>.tmp`.
fn is_temporary_of(name: &str, pid: u32) -> bool {
    name.strip_prefix(&format!(".cairn-restore-{pid}-"))
        .and_then(|rest| rest.strip_suffix(".tmp"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The temporaries a rollback interrupted part way left in the workspace
/// (workspace paths), which the next checkpoint, rollback, retention run
/// or `track` removes first (see [`record_interrupted_rollback`]): what a
/// dry run leaves out of its plan, as the rollback itself would find
/// them gone. Empty when the marker names no rollback that flow would
/// record (none, damaged, from another log, one that ended, one running
/// in this process). Reads the marker and the log, writes nothing.
pub(crate) fn interrupted_temporaries<L: LogAccess + ?Sized, B: BlobRead + ?Sized>(
    log: &L,
    blobs: &B,
    ws: &Workspace,
) -> Vec<String> {
    let Some(RollbackMarker::Unfinished(r)) = rollback_marker(ws) else {
        return Vec::new();
    };
    if running_here(ws) {
        return Vec::new();
    }
    let undo_root = match find_undo_point(log, &r) {
        Ok(UndoState::NotRecorded) => None,
        Ok(UndoState::Undo(_, root)) => root,
        Ok(UndoState::Ended) | Err(_) => return Vec::new(),
    };
    find_temporaries(ws, blobs, &r, target_root(log, &r), undo_root)
}

/// Removes the temporaries the rollback of `r` left (see
/// [`find_temporaries`]). Best effort; returns how many it removed.
fn remove_temporaries<B: BlobRead + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    r: &UnfinishedRollback,
    target: Option<cairn_codec::BlobHash>,
    undo_root: Option<cairn_codec::BlobHash>,
) -> usize {
    find_temporaries(ws, blobs, r, target, undo_root)
        .iter()
        .filter(|rel| std::fs::remove_file(ws.root().join(rel)).is_ok())
        .count()
}

/// The temporaries the rollback of `r` left (workspace paths): files (not
/// directories) named as its process names them, in the directories where
/// it wrote files (those holding files of the target that differ from the
/// undo point's, within its scope; every directory of the target's when
/// the undo point was not recorded), each a real directory of the
/// workspace.
fn find_temporaries<B: BlobRead + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    r: &UnfinishedRollback,
    target: Option<cairn_codec::BlobHash>,
    undo_root: Option<cairn_codec::BlobHash>,
) -> Vec<String> {
    let Some(target) = target else {
        return Vec::new();
    };
    let tree = match undo_root {
        Some(u) => restore::diff_trees(blobs, &u, &target).map(|(_, t, _)| t),
        None => manifest::list(blobs, &target),
    };
    let Ok(tree) = tree else { return Vec::new() };
    let dirs: BTreeSet<&str> = tree
        .files()
        .filter(|(p, _)| relpath::in_scope(p, &r.scope))
        .map(|(p, _)| relpath::parent(p))
        .collect();
    let mut real_dirs: HashSet<String> = HashSet::new();
    let mut found = Vec::new();
    for d in dirs {
        if !is_real_dir(ws, d, &mut real_dirs) {
            continue;
        }
        let abs = ws.root().join(d);
        let Ok(entries) = std::fs::read_dir(&abs) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str().filter(|n| is_temporary_of(n, r.pid)) else {
                continue;
            };
            if e.file_type().is_ok_and(|t| !t.is_dir()) {
                found.push(relpath::join(d, name));
            }
        }
    }
    found
}

/// True if `rel` and each directory above it is a real directory (no
/// symlink on the way out of the workspace) and no excluded path.
fn is_real_dir(ws: &Workspace, rel: &str, known: &mut HashSet<String>) -> bool {
    if rel.is_empty() || known.contains(rel) {
        return true;
    }
    if ws.is_excluded(rel) || !is_real_dir(ws, relpath::parent(rel), known) {
        return false;
    }
    let ok = std::fs::symlink_metadata(ws.root().join(rel)).is_ok_and(|m| m.is_dir());
    if ok {
        known.insert(rel.to_string());
    }
    ok
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Regression (issue 27, a store is data from outside): a marker whose
    /// scope leads out of the workspace is damaged, never acted on.
    #[test]
    fn a_marker_whose_scope_leaves_the_workspace_is_damaged() {
        for bad in ["../..", "/etc", "a/../../b", "a//b"] {
            let mut r = sample();
            r.scope = vec!["src".into(), bad.into()];
            let bytes = serde_json::to_vec(&MarkerFile {
                version: MARKER_VERSION,
                rollback: r,
            })
            .unwrap();
            let e = UnfinishedRollback::decode(&bytes).unwrap_err();
            assert!(e.contains("plain names"), "{bad}: {e}");
        }
        let mut r = sample();
        r.scope = vec!["src".into(), "my docs/x".into()];
        let bytes = serde_json::to_vec(&MarkerFile {
            version: MARKER_VERSION,
            rollback: r.clone(),
        })
        .unwrap();
        assert_eq!(UnfinishedRollback::decode(&bytes).unwrap(), r);
    }

    fn sample() -> UnfinishedRollback {
        UnfinishedRollback {
            target: CheckpointId(Lsn(4)),
            session: "default".into(),
            run: Some("run-1".into()),
            phase: None,
            agent: Some("coder".into()),
            model: None,
            scope: vec!["src".into()],
            started: Timestamp(1_767_225_600_000),
            pid: 4242,
            head_before: Lsn(14),
            head_chain: ChainHash([7; 32]),
        }
    }

    #[test]
    fn the_finishing_command_repeats_the_rollback_and_quotes_what_needs_it() {
        let mut r = sample();
        r.scope = vec!["src".into(), "my docs".into()];
        r.session = "default".into();
        r.run = Some("run-1".into());
        r.phase = None;
        r.agent = Some("it's".into());
        r.model = None;
        assert_eq!(
            r.finish_command(),
            format!(
                "cairn rollback {} --path src --path 'my docs' --run run-1 --agent 'it'\\''s'",
                r.target
            )
        );
        r.session = "t 1".into();
        assert!(
            r.finish_command().contains(" --session 't 1'"),
            "{}",
            r.finish_command()
        );
    }

    #[test]
    fn a_marker_round_trips() {
        let r = sample();
        let bytes = r.encode().unwrap();
        assert_eq!(UnfinishedRollback::decode(&bytes).unwrap(), r);
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("\"target\":\"c4\""), "{text}");
        assert!(text.contains("\"version\":1"), "{text}");
        assert!(text.contains("\"run\":\"run-1\""), "{text}");
        // What the rollback did not have is left out.
        assert!(!text.contains("\"phase\""), "{text}");
    }

    #[test]
    fn a_marker_written_before_run_phase_agent_and_model_reads_as_having_none() {
        let old = format!(
            r#"{{"version":1,"target":"c4","session":"default","scope":["src"],"started":1767225600000,"pid":4242,"head_before":14,"head_chain":"{}"}}"#,
            ChainHash([7; 32]).to_hex()
        );
        let r = UnfinishedRollback::decode(old.as_bytes()).unwrap();
        assert_eq!(
            r,
            UnfinishedRollback {
                run: None,
                agent: None,
                ..sample()
            }
        );
    }

    #[test]
    fn a_damaged_marker_is_refused_with_why() {
        let bytes = sample().encode().unwrap();
        // Cut short, garbage, another version, a target after the head.
        assert!(UnfinishedRollback::decode(&bytes[..bytes.len() / 2]).is_err());
        assert!(UnfinishedRollback::decode(b"\x00\xffnot json").is_err());
        let other = String::from_utf8(bytes.clone())
            .unwrap()
            .replace("\"version\":1", "\"version\":9");
        let e = UnfinishedRollback::decode(other.as_bytes()).unwrap_err();
        assert!(e.contains("version 9"), "{e}");
        let mut r = sample();
        r.target = CheckpointId(Lsn(20));
        let e = UnfinishedRollback::decode(&r.encode().unwrap()).unwrap_err();
        assert!(e.contains("not before the head"), "{e}");
    }

    #[test]
    fn only_this_process_s_temporaries_are_matched() {
        assert!(is_temporary_of(".cairn-restore-4242-0.tmp", 4242));
        assert!(is_temporary_of(".cairn-restore-4242-137.tmp", 4242));
        assert!(!is_temporary_of(".cairn-restore-4242-.tmp", 4242));
        assert!(!is_temporary_of(".cairn-restore-42421-3.tmp", 4242));
        assert!(!is_temporary_of(".cairn-restore-4242-3.tmp.bak", 4242));
        assert!(!is_temporary_of("cairn-restore-4242-3.tmp", 4242));
        assert!(!is_temporary_of(".cairn-restore-4242-x.tmp", 4242));
    }
}
