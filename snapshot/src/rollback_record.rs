//! What a `rollback` record says: its shape, its `meta` keys, the record
//! of a rollback that did not complete, and the label of its undo point.
//! Shared by a rollback in process and by the recording of one whose
//! process stopped part way.

use cairn_codec::{CheckpointId, Event, EventKind, Lsn};

use crate::checkpoint::session_or_default;
use crate::error::Result;
use crate::log_access::LogAccess;

/// Meta key of a `rollback` record whose `files` list was cut at
/// [`MAX_ROLLBACK_FILES_LISTED`]: how many paths it touched.
pub const ROLLBACK_META_FILES_TOTAL: &str = "files_total";

/// Meta key of a `rollback` record whose `files` list was cut: the paths
/// the rollback was limited to (empty: the whole tree).
pub const ROLLBACK_META_SCOPE: &str = "scope";

/// Meta key of a `rollback` record listing the paths it left as they were
/// (`[{"path", "why"}]`; see `restore::keep_uncaptured`).
pub const ROLLBACK_META_KEPT: &str = "kept";

/// The `error_kind` of a `rollback` record whose rollback stopped part way
/// (the workspace is partly rolled back; its `source` undoes it).
pub const ROLLBACK_INCOMPLETE: &str = "rollback_incomplete";

/// The most paths a `rollback` record lists in `files`: keeps one record
/// far below the event body limit even for a whole-tree rollback.
pub const MAX_ROLLBACK_FILES_LISTED: usize = 10_000;

/// The `rollback` record of a rollback from the undo point `source` to
/// `target`, limited to `scope` (empty: the whole workspace): both as
/// causal parents, the paths in its text. Its outcome (`ok`, `meta`) is
/// the caller's to add.
pub(crate) fn rollback_event(
    session: &str,
    source: CheckpointId,
    target: CheckpointId,
    scope: &[String],
) -> Event {
    let mut ev = Event::new(EventKind::Rollback, session_or_default(session));
    ev.source = Some(source);
    ev.target = Some(target);
    ev.parents = vec![source.0, target.0];
    ev.label = Some(format!("Rollback to {target}"));
    if !scope.is_empty() {
        ev.text = Some(format!("paths: {}", scope.join(", ")));
    }
    ev
}

/// Appends `ev` as a rollback that did not complete (`ok` false,
/// [`ROLLBACK_INCOMPLETE`], `why` after the paths it was limited to):
/// for a rollback that failed in process (whose error names the undo point
/// whether or not this record could be appended), and for one whose
/// process stopped part way (see [`record_interrupted_rollback`]).
pub(crate) fn record_incomplete<L: LogAccess + ?Sized>(
    log: &L,
    mut ev: Event,
    meta: serde_json::Map<String, serde_json::Value>,
    why: String,
) -> Result<Lsn> {
    ev.ok = false;
    ev.error_kind = Some(ROLLBACK_INCOMPLETE.into());
    ev.text = Some(match ev.text.take() {
        Some(t) => format!("{t}; {why}"),
        None => why,
    });
    if !meta.is_empty() {
        ev.meta = Some(cairn_codec::event::Meta(meta));
    }
    log.append(&ev)
}

/// The label of a rollback's undo point, by which a rollback whose process
/// stopped part way finds it (see `crate::interrupted`).
pub(crate) fn undo_point_label(target: CheckpointId) -> String {
    format!("Before rollback to {target}")
}
