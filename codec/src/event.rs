//! The agent event model: one [`Event`] per record in the log.
//!
//! The MessagePack body stores the struct positionally (rmp-serde's compact
//! form), so every field keeps its position across versions: new fields are
//! only ever appended, as `Option`s, at the end.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::paths::{
    about_workspace, normal_path, not_a_path, not_workspace_relative, outside_workspace,
};
use crate::{BlobHash, CheckpointId, CodecError, Lsn, Timestamp};

/// The largest MessagePack body an event may have, uncompressed. Large
/// contents (files, big diffs) belong in the blob store and are referenced
/// by hash; this limit keeps one record from ballooning the log and bounds
/// the allocation a decoder makes for a record.
pub const MAX_EVENT_BODY_BYTES: usize = 16 * 1024 * 1024;

/// The session used when an event names none.
pub const DEFAULT_SESSION: &str = "default";

/// The kind of an event, with its canonical name (used in JSON and on the command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EventKind {
    /// A user prompt to the agent.
    #[serde(rename = "prompt")]
    Prompt,
    /// The model's reply.
    #[serde(rename = "reply")]
    Reply,
    /// A tool invocation (any tool).
    #[serde(rename = "tool_call")]
    ToolCall,
    /// A diff shown to the user before it is applied.
    #[serde(rename = "diff_preview")]
    DiffPreview,
    /// A proposed change applied to the workspace.
    #[serde(rename = "apply")]
    Apply,
    /// An applied change undone.
    #[serde(rename = "undo")]
    Undo,
    /// A file created by a file tool.
    #[serde(rename = "file.create")]
    FileCreate,
    /// A file overwritten by a file tool.
    #[serde(rename = "file.write")]
    FileWrite,
    /// A file edited in place by a file tool.
    #[serde(rename = "file.edit")]
    FileEdit,
    /// A file deleted by a file tool.
    #[serde(rename = "file.delete")]
    FileDelete,
    /// A file moved (`path` -> `to_path`).
    #[serde(rename = "file.move")]
    FileMove,
    /// A patch applied to a file.
    #[serde(rename = "file.patch")]
    FilePatch,
    /// A checkpoint of the workspace.
    #[serde(rename = "checkpoint.create")]
    CheckpointCreate,
    /// A checkpoint evicted by retention or by request.
    #[serde(rename = "checkpoint.discard")]
    CheckpointDiscard,
    /// The workspace rolled back to a checkpoint (also used for restores).
    #[serde(rename = "rollback")]
    Rollback,
    /// The user's work stashed with git.
    #[serde(rename = "git.stash")]
    GitStash,
    /// A git stash restored.
    #[serde(rename = "git.stash_restore")]
    GitStashRestore,
    /// Anything else; describe it in `meta`.
    #[serde(rename = "custom")]
    Custom,
}

impl EventKind {
    /// Every kind, in canonical order.
    pub const ALL: [EventKind; 18] = [
        EventKind::Prompt,
        EventKind::Reply,
        EventKind::ToolCall,
        EventKind::DiffPreview,
        EventKind::Apply,
        EventKind::Undo,
        EventKind::FileCreate,
        EventKind::FileWrite,
        EventKind::FileEdit,
        EventKind::FileDelete,
        EventKind::FileMove,
        EventKind::FilePatch,
        EventKind::CheckpointCreate,
        EventKind::CheckpointDiscard,
        EventKind::Rollback,
        EventKind::GitStash,
        EventKind::GitStashRestore,
        EventKind::Custom,
    ];

    /// The canonical name, e.g. `file.write`.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Prompt => "prompt",
            EventKind::Reply => "reply",
            EventKind::ToolCall => "tool_call",
            EventKind::DiffPreview => "diff_preview",
            EventKind::Apply => "apply",
            EventKind::Undo => "undo",
            EventKind::FileCreate => "file.create",
            EventKind::FileWrite => "file.write",
            EventKind::FileEdit => "file.edit",
            EventKind::FileDelete => "file.delete",
            EventKind::FileMove => "file.move",
            EventKind::FilePatch => "file.patch",
            EventKind::CheckpointCreate => "checkpoint.create",
            EventKind::CheckpointDiscard => "checkpoint.discard",
            EventKind::Rollback => "rollback",
            EventKind::GitStash => "git.stash",
            EventKind::GitStashRestore => "git.stash_restore",
            EventKind::Custom => "custom",
        }
    }

    /// True for the destructive file-tool kinds (`file.*`).
    pub fn is_file_op(self) -> bool {
        matches!(
            self,
            EventKind::FileCreate
                | EventKind::FileWrite
                | EventKind::FileEdit
                | EventKind::FileDelete
                | EventKind::FileMove
                | EventKind::FilePatch
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EventKind {
    type Err = CodecError;
    fn from_str(s: &str) -> Result<Self, CodecError> {
        EventKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| CodecError::Invalid {
                what: format!(
                    "unknown event kind `{s}` (known: {})",
                    EventKind::ALL.map(|k| k.name()).join(", ")
                ),
            })
    }
}

/// Line statistics of a diff.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffStats {
    /// Lines added.
    pub lines_added: u64,
    /// Lines removed.
    pub lines_removed: u64,
    /// Number of hunks.
    pub hunks: u64,
}

/// What a checkpoint's scan saw: files captured, files changed since the
/// previous checkpoint, and files skipped by reason (nothing is skipped
/// silently).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointCounts {
    /// Files in the checkpoint's manifest.
    pub files: u64,
    /// Files and symlinks that differ (added, removed, other contents or
    /// mode) from the previous checkpoint of the workspace (a rollback's
    /// undo point included) or, after a rollback, from the tree the
    /// rollback left.
    pub changed: u64,
    /// Files skipped, by reason (`ignored`, `too_large`, `nested_git`, `unreadable`, ...).
    #[serde(default)]
    pub skipped: BTreeMap<String, u64>,
}

/// One agent event: the body of one log record.
///
/// Fields that do not apply to a kind are `None` or empty. Contents that can
/// be large (file bodies, unified diffs, application state) are blob hashes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened.
    pub ts: Timestamp,
    /// Session (thread, conversation) id; [`DEFAULT_SESSION`] when none was given.
    pub session: String,
    /// Run id within the session.
    pub run: Option<String>,
    /// Phase id within the run.
    pub phase: Option<String>,
    /// What kind of event this is.
    pub kind: EventKind,
    /// The agent's name.
    pub agent: Option<String>,
    /// The human user.
    pub user: Option<String>,
    /// The tool's name (`write_file`, `bash`, ...).
    pub tool: Option<String>,
    /// The model that produced it.
    pub model: Option<String>,
    /// Latency in milliseconds.
    pub latency_ms: Option<u64>,
    /// Whether it succeeded.
    pub ok: bool,
    /// On failure, the kind of error.
    pub error_kind: Option<String>,
    /// Prompt or reply text.
    pub text: Option<String>,
    /// Workspace-relative path (the source for moves).
    pub path: Option<String>,
    /// Destination path for moves.
    pub to_path: Option<String>,
    /// Files touched.
    pub files: Vec<String>,
    /// Diff statistics.
    pub diff_stats: Option<DiffStats>,
    /// Unified diff, stored as a blob.
    pub diff: Option<BlobHash>,
    /// Content before (blob hash).
    pub before: Option<BlobHash>,
    /// Content after (blob hash).
    pub after: Option<BlobHash>,
    /// Causal parents (LSNs).
    pub parents: Vec<Lsn>,
    /// Checkpoint label (`checkpoint.create`).
    pub label: Option<String>,
    /// Manifest root of a checkpoint (`checkpoint.create`).
    pub root: Option<BlobHash>,
    /// Opaque application-state blob (the agent's memory epoch) of a checkpoint.
    pub state: Option<BlobHash>,
    /// What a checkpoint's scan saw.
    pub counts: Option<CheckpointCounts>,
    /// The checkpoint a `checkpoint.discard` evicts.
    pub checkpoint: Option<CheckpointId>,
    /// The pre-rollback checkpoint of a `rollback` (so it can be undone).
    pub source: Option<CheckpointId>,
    /// The checkpoint a `rollback` restored.
    pub target: Option<CheckpointId>,
    /// Free-form metadata: a JSON object, stored as JSON text.
    pub meta: Option<Meta>,
}

/// Free-form metadata: a JSON object. Stored as its JSON text so the
/// positional MessagePack body never depends on the object's shape.
///
/// Built without naming `serde_json`: any value that converts into a JSON
/// value (strings, numbers, booleans, vectors of them, or a
/// `serde_json::Value`, which the `cairn` crate re-exports as `cairn::json`)
/// can be inserted.
///
/// ```
/// use cairn_codec::event::Meta;
/// let meta = Meta::new().with("cmd", "cargo test").with("exit", 0).with("cached", false);
/// assert_eq!(meta.get("cmd").and_then(|v| v.as_str()), Some("cargo test"));
/// assert_eq!(meta.len(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Meta(pub serde_json::Map<String, serde_json::Value>);

impl Meta {
    /// An empty object.
    pub fn new() -> Meta {
        Meta::default()
    }

    /// Sets `key` to `value`, returning the value it replaces.
    pub fn insert(
        &mut self,
        key: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Option<serde_json::Value> {
        self.0.insert(key.into(), value.into())
    }

    /// Sets `key` to `value` (builder style).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Meta {
        self.insert(key, value);
        self
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.0.get(key)
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Into<String>, V: Into<serde_json::Value>> FromIterator<(K, V)> for Meta {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Meta {
        Meta(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl Serialize for Meta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            self.0.serialize(s)
        } else {
            let text = serde_json::to_string(&self.0).map_err(serde::ser::Error::custom)?;
            s.serialize_str(&text)
        }
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            Ok(Meta(serde_json::Map::deserialize(d)?))
        } else {
            let text = String::deserialize(d)?;
            serde_json::from_str(&text)
                .map(Meta)
                .map_err(serde::de::Error::custom)
        }
    }
}

impl Event {
    /// A new event of `kind` in `session`, stamped now, `ok`, all else empty.
    pub fn new(kind: EventKind, session: impl Into<String>) -> Event {
        Event {
            ts: Timestamp::now(),
            session: session.into(),
            run: None,
            phase: None,
            kind,
            agent: None,
            user: None,
            tool: None,
            model: None,
            latency_ms: None,
            ok: true,
            error_kind: None,
            text: None,
            path: None,
            to_path: None,
            files: Vec::new(),
            diff_stats: None,
            diff: None,
            before: None,
            after: None,
            parents: Vec::new(),
            label: None,
            root: None,
            state: None,
            counts: None,
            checkpoint: None,
            source: None,
            target: None,
            meta: None,
        }
    }

    /// Sets the text (builder style).
    pub fn with_text(mut self, text: impl Into<String>) -> Event {
        self.text = Some(text.into());
        self
    }

    /// Sets the path (builder style).
    pub fn with_path(mut self, path: impl Into<String>) -> Event {
        self.path = Some(path.into());
        self
    }

    /// Sets `key` in the event's [`Meta`] to `value`, creating the meta
    /// object if there is none (builder style).
    ///
    /// ```
    /// use cairn_codec::{Event, EventKind};
    /// let call = Event::new(EventKind::ToolCall, "t1").with_meta("cmd", "cargo test");
    /// assert_eq!(call.meta.unwrap().get("cmd").and_then(|v| v.as_str()), Some("cargo test"));
    /// ```
    pub fn with_meta(
        mut self,
        key: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Event {
        self.meta.get_or_insert_with(Meta::new).insert(key, value);
        self
    }

    /// Encodes the MessagePack body (compact, positional). Fails if the body
    /// exceeds [`MAX_EVENT_BODY_BYTES`].
    pub fn encode_body(&self) -> Result<Vec<u8>, CodecError> {
        let mut body = Vec::new();
        self.encode_body_into(&mut body)?;
        Ok(body)
    }

    /// Appends the MessagePack body to `out` (which may already hold other
    /// bytes: the limit applies to this body alone). On error `out` is left
    /// as it was.
    pub fn encode_body_into(&self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let start = out.len();
        crate::body::encode(self, out);
        let len = out.len() - start;
        if len > MAX_EVENT_BODY_BYTES {
            out.truncate(start);
            return Err(CodecError::TooLarge {
                what: "event body",
                len: len as u64,
                max: MAX_EVENT_BODY_BYTES as u64,
            });
        }
        Ok(())
    }

    /// Decodes a MessagePack body written by [`Event::encode_body`].
    pub fn decode_body(body: &[u8]) -> Result<Event, CodecError> {
        if body.len() > MAX_EVENT_BODY_BYTES {
            return Err(CodecError::TooLarge {
                what: "event body",
                len: body.len() as u64,
                max: MAX_EVENT_BODY_BYTES as u64,
            });
        }
        crate::body::decode(body)
    }

    /// Every workspace path this event names (`path`, `to_path`, `files`), deduplicated.
    pub fn paths(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in self
            .path
            .iter()
            .chain(self.to_path.iter())
            .chain(self.files.iter())
        {
            if !out.contains(&p.as_str()) {
                out.push(p);
            }
        }
        out
    }
}

/// The checks every event passes before the log takes it, whichever way it
/// came (a JSON line, `Store::append`, an import): so every record exports
/// to a line that imports back.
impl Event {
    /// [`Event::check_fields`], then [`Event::check_paths`].
    pub fn check(&self) -> Result<(), CodecError> {
        self.check_fields()?;
        self.check_paths()
    }

    /// Checks what JSON input checks of an event built some other way (the
    /// library's `Store::append`): a session that is not empty, and a time
    /// within the range an ISO-8601 line can say (see
    /// [`Timestamp::from_millis`]). So every record exports to a line that
    /// imports back.
    pub fn check_fields(&self) -> Result<(), CodecError> {
        if self.session.is_empty() {
            return Err(CodecError::BadField(
                "field `session` must not be empty".into(),
            ));
        }
        Timestamp::from_millis(self.ts.millis())
            .map_err(|err| CodecError::BadField(format!("field `ts`: {err}")))?;
        Ok(())
    }

    /// Checks the paths of an event: a file event names the file it touched
    /// (`path`; a patch may name them in `files` instead), a move names its
    /// destination (`to_path`), no path is empty, and the paths of events about
    /// the workspace (every kind but `prompt`, `reply`, `tool_call` and
    /// `custom`, whose paths may lie anywhere, such as a file a tool read)
    /// neither hold a NUL byte nor name the workspace itself, and are in
    /// normal form when they lie in it ([`normal_path`]).
    ///
    /// A path outside the workspace (absolute, or climbing out of it with
    /// `..`: see [`outside_workspace`]) is accepted and kept exactly as given:
    /// an attempt to write `/etc/passwd` is the record an audit log exists to
    /// keep. Such paths are history only; replay never puts them in the
    /// workspace tree ([`outside_workspace`] says which they are).
    pub fn check_paths(&self) -> Result<(), CodecError> {
        use EventKind::*;
        let needs_path = matches!(
            self.kind,
            FileCreate | FileWrite | FileEdit | FileDelete | FileMove
        );
        if needs_path && self.path.is_none() {
            return Err(CodecError::BadField(format!(
                "missing field `path`: a `{}` event names the file it touched",
                self.kind.name()
            )));
        }
        if self.kind == FileMove && self.to_path.is_none() {
            return Err(CodecError::BadField(
                "missing field `to_path`: a `file.move` event names where the file went (`path` is where it was)".into(),
            ));
        }
        if self.kind == FilePatch && self.path.is_none() && self.files.is_empty() {
            return Err(CodecError::BadField(
                "a `file.patch` event names the files it touched: `path` or `files`".into(),
            ));
        }
        let in_workspace = about_workspace(self.kind);
        let named = [
            ("path", self.path.as_deref()),
            ("to_path", self.to_path.as_deref()),
        ];
        let files = self.files.iter().map(|f| ("files", Some(f.as_str())));
        for (field, p) in named.into_iter().chain(files) {
            let Some(p) = p else { continue };
            let why = if p.is_empty() {
                Some("is empty")
            } else if in_workspace {
                not_a_path(p)
            } else {
                None
            };
            if let Some(why) = why {
                return Err(CodecError::BadField(format!(
                    "field `{field}`: `{p}` {why}; a `{}` event names a file, like `src/main.rs` (or one outside the workspace, like `/etc/hosts`, kept as history only)",
                    self.kind.name()
                )));
            }
            if in_workspace && outside_workspace(p).is_none() {
                if let Cow::Owned(n) = normal_path(p) {
                    return Err(CodecError::BadField(format!(
                        "field `{field}`: `{p}` is not in normal form: write `{n}` (no empty, `.` or inner `..` component; cairn's JSON input puts paths so itself)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Puts the paths of an event about the workspace in normal form (see
    /// [`normal_path`]), as input from JSON is: an agent's `./src/a.rs`,
    /// `src//a.rs` and `src/x/../a.rs` are the file `src/a.rs`, and queries
    /// find them as such. A path outside the workspace (absolute, or climbing
    /// out with `..`) is kept exactly as written, as is one that names the
    /// workspace itself, for [`Event::check_paths`] to refuse by name.
    pub fn normalize_paths(&mut self) {
        if !about_workspace(self.kind) {
            return;
        }
        let fix = |p: &mut String| {
            if not_workspace_relative(p).is_none() {
                if let Cow::Owned(n) = normal_path(p) {
                    *p = n;
                }
            }
        };
        self.path
            .iter_mut()
            .chain(self.to_path.iter_mut())
            .chain(self.files.iter_mut())
            .for_each(fix);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub fn arb_event() -> impl Strategy<Value = Event> {
        let s = || proptest::option::of("[a-z0-9_./-]{0,12}");
        let h = || proptest::option::of(any::<[u8; 32]>().prop_map(BlobHash));
        // Workspace-relative paths, as JSON input requires (`Event::check_paths`).
        let path = || "[a-z0-9_-]{1,6}(/[a-z0-9_-]{1,5}(\\.[a-z]{1,3})?){0,2}";
        (
            (
                0i64..4_000_000_000_000,
                "[a-z0-9-]{1,10}",
                s(),
                s(),
                0usize..18,
                s(),
                s(),
                s(),
                s(),
            ),
            (
                proptest::option::of(any::<u64>()),
                any::<bool>(),
                s(),
                proptest::option::of(".{0,40}"),
                proptest::option::of(path()),
                proptest::option::of(path()),
            ),
            (
                proptest::collection::vec(path(), 0..3),
                proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>())),
                h(),
                h(),
                h(),
                proptest::collection::vec(any::<u64>().prop_map(Lsn), 0..3),
            ),
            (
                s(),
                h(),
                h(),
                proptest::option::of(1u64..1000),
                proptest::option::of("[a-z]{0,6}"),
            ),
        )
            .prop_map(|(a, b, c, d)| {
                let mut e = Event::new(EventKind::ALL[a.4], a.1);
                e.ts = Timestamp(a.0);
                e.run = a.2;
                e.phase = a.3;
                e.agent = a.5;
                e.user = a.6;
                e.tool = a.7;
                e.model = a.8;
                e.latency_ms = b.0;
                e.ok = b.1;
                e.error_kind = b.2;
                e.text = b.3;
                e.path = b.4;
                e.to_path = b.5;
                e.files = c.0;
                e.diff_stats = c.1.map(|(x, y, z)| DiffStats {
                    lines_added: x,
                    lines_removed: y,
                    hunks: z,
                });
                e.diff = c.2;
                e.before = c.3;
                e.after = c.4;
                e.parents = c.5;
                e.label = d.0;
                e.root = d.1;
                e.state = d.2;
                e.checkpoint = d.3.map(|n| CheckpointId(Lsn(n)));
                if let Some(k) = d.4 {
                    let mut m = serde_json::Map::new();
                    m.insert(k, serde_json::json!({"n": [1, 2.5, null, "x"]}));
                    e.meta = Some(Meta(m));
                    e.counts = Some(CheckpointCounts {
                        files: 3,
                        changed: 1,
                        skipped: BTreeMap::from([("ignored".into(), 2)]),
                    });
                }
                // File events name their files (a move its destination).
                let patch = e.kind == EventKind::FilePatch;
                if e.kind.is_file_op() && (!patch || e.files.is_empty()) {
                    e.path.get_or_insert_with(|| "src/lib.rs".into());
                }
                if e.kind == EventKind::FileMove {
                    e.to_path.get_or_insert_with(|| "src/new.rs".into());
                }
                e
            })
    }

    #[test]
    fn kind_names_round_trip() {
        for k in EventKind::ALL {
            assert_eq!(k.name().parse::<EventKind>().unwrap(), k);
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.name())
            );
        }
        let e = "file.nuke".parse::<EventKind>().unwrap_err().to_string();
        assert!(
            e.contains("unknown event kind `file.nuke`") && e.contains("file.write"),
            "{e}"
        );
    }

    #[test]
    fn oversized_body_refused() {
        let big = Event::new(EventKind::Reply, "s").with_text("x".repeat(MAX_EVENT_BODY_BYTES));
        assert!(matches!(
            big.encode_body(),
            Err(CodecError::TooLarge { .. })
        ));
    }

    proptest! {
        #[test]
        fn body_round_trip(e in arb_event()) {
            let body = e.encode_body().unwrap();
            prop_assert_eq!(Event::decode_body(&body).unwrap(), e);
        }

        #[test]
        fn decode_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Event::decode_body(&bytes);
        }

        #[test]
        fn truncated_body_is_an_error(e in arb_event(), cut in 0usize..1000) {
            let body = e.encode_body().unwrap();
            let cut = cut % body.len();
            prop_assert!(Event::decode_body(&body[..cut]).is_err());
        }
    }
}
