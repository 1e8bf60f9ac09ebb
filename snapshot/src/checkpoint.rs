//! What a checkpoint is: the request that takes one, the listed
//! [`CheckpointInfo`] read back from its `checkpoint.create` record, and
//! the `meta` keys such a record carries.

use serde::{Deserialize, Serialize};

use cairn_codec::{BlobHash, CheckpointCounts, CheckpointId, Event, EventKind, Lsn, Timestamp};

/// How a checkpoint finds what changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanMode {
    /// Walk the whole workspace (skipping files whose stat data is unchanged).
    #[default]
    Full,
    /// Re-read only the paths tracked since the last checkpoint and patch
    /// the previous tree (falls back to a full scan when there is none).
    TrackedOnly,
}

/// What to checkpoint, and its metadata.
#[derive(Clone, Debug, Default)]
pub struct CheckpointRequest {
    /// Session id (empty: the default session).
    pub session: String,
    /// Run id.
    pub run: Option<String>,
    /// Phase id.
    pub phase: Option<String>,
    /// Agent name.
    pub agent: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Label, e.g. "Before turn 3".
    pub label: Option<String>,
    /// Opaque application state (the agent's memory epoch), stored as a blob.
    pub state: Option<Vec<u8>>,
    /// How to find what changed.
    pub scan: ScanMode,
}

/// A checkpoint, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// Its id (`c<lsn>`).
    pub id: CheckpointId,
    /// The LSN of its `checkpoint.create` record.
    pub lsn: Lsn,
    /// When it was taken.
    pub ts: Timestamp,
    /// Session.
    pub session: String,
    /// Run.
    pub run: Option<String>,
    /// Phase.
    pub phase: Option<String>,
    /// Agent that took it, if any.
    #[serde(default)]
    pub agent: Option<String>,
    /// Model of that agent, if any.
    #[serde(default)]
    pub model: Option<String>,
    /// Label.
    pub label: Option<String>,
    /// Manifest root.
    pub root: BlobHash,
    /// Application-state blob.
    pub state: Option<BlobHash>,
    /// What the scan saw.
    pub counts: CheckpointCounts,
    /// True once a `checkpoint.discard` evicted it.
    pub discarded: bool,
    /// The LSN of the (first) `checkpoint.discard` record that evicted it.
    #[serde(default)]
    pub discarded_at: Option<Lsn>,
    /// True if that record was written by retention (gc), false if it was
    /// recorded by the platform (`cairn record`, an import).
    #[serde(default)]
    pub discarded_by_retention: bool,
    /// Files the scan skipped as too large or unreadable, or because their
    /// name is not UTF-8, each with the reason (the first
    /// [`crate::scan::MAX_NOT_CAPTURED_NAMED`]; the counts are in
    /// `counts.skipped`): what a rollback to this checkpoint cannot bring
    /// back. From the record's `meta.not_captured`.
    #[serde(default)]
    pub not_captured: Vec<NotCaptured>,
    /// How the checkpoint that returned this found what changed (a full
    /// scan, the `cairn watch` journal, ...) and, for a full scan, why:
    /// known only to the call that took it, `None` when listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<crate::watch_journal::ScanReport>,
}

/// A file a checkpoint did not capture, and why (`too_large`,
/// `unreadable`, `non_utf8_name`: see [`crate::scan::reason`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotCaptured {
    /// Workspace-relative path; for `non_utf8_name`, the path's bytes
    /// escaped ([`crate::relpath::escape_bytes`]: `dir\xff/a.txt`), which
    /// is no workspace path, and a directory that holds no file ends in
    /// `/`.
    pub path: String,
    /// The skip reason.
    pub why: String,
}

impl NotCaptured {
    /// The files a `checkpoint.create` record names as not captured (its
    /// `meta.not_captured`); none for any other record, or a list that
    /// cannot be read.
    pub fn named_by(e: &Event) -> Vec<NotCaptured> {
        e.meta
            .as_ref()
            .and_then(|m| m.0.get(NOT_CAPTURED_KEY))
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }
}

impl CheckpointInfo {
    /// The checkpoint a `checkpoint.create` record at `lsn` creates, not
    /// yet discarded; `None` for any other record or one without a
    /// manifest (an imported checkpoint record).
    pub fn from_record(lsn: Lsn, e: &Event) -> Option<CheckpointInfo> {
        if e.kind != EventKind::CheckpointCreate {
            return None;
        }
        Some(CheckpointInfo {
            id: CheckpointId(lsn),
            lsn,
            ts: e.ts,
            session: e.session.clone(),
            run: e.run.clone(),
            phase: e.phase.clone(),
            agent: e.agent.clone(),
            model: e.model.clone(),
            label: e.label.clone(),
            root: e.root?,
            state: e.state,
            counts: e.counts.clone().unwrap_or_default(),
            discarded: false,
            discarded_at: None,
            discarded_by_retention: false,
            not_captured: NotCaptured::named_by(e),
            scan: None,
        })
    }
}

pub(crate) fn session_or_default(s: &str) -> String {
    if s.is_empty() {
        cairn_codec::event::DEFAULT_SESSION.to_string()
    } else {
        s.to_string()
    }
}

/// The `meta` key of a `checkpoint.create` record naming the files it did
/// not capture (see [`CheckpointInfo::not_captured`]).
pub const NOT_CAPTURED_KEY: &str = "not_captured";

/// True if `e` is a `checkpoint.create` record without a manifest: one
/// imported from another tool's audit log, which captured no files, or
/// one imported without the files gc had collected (see [`COLLECTED_KEY`]).
pub fn is_imported_checkpoint(e: &Event) -> bool {
    e.kind == EventKind::CheckpointCreate && e.root.is_none()
}

/// The `meta` key of a `checkpoint.create` record imported without its
/// files, which gc had collected (`cairn import --collected-checkpoints
/// record`): an object holding the blob hashes the line named (`root`,
/// `state`, ...), the checkpoint whose record the line copied
/// (`checkpoint`, an id of the store it was imported into) and where that
/// one was discarded (`discarded_at`, an LSN). The record has no `root`,
/// so it is no checkpoint: a rollback to it is refused
/// ([`crate::SnapshotError::CollectedCheckpoint`]).
pub const COLLECTED_KEY: &str = "collected";

/// The [`COLLECTED_KEY`] object of an imported checkpoint record, if it
/// has one.
pub fn collected_note(e: &Event) -> Option<&serde_json::Map<String, serde_json::Value>> {
    if !is_imported_checkpoint(e) {
        return None;
    }
    e.meta.as_ref()?.0.get(COLLECTED_KEY)?.as_object()
}
