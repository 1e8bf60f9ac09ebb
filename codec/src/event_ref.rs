//! [`EventRef`]: an event borrowed from its encoded body, for folds and
//! projections that read every record and keep little of it (index
//! rebuilds, filters, export). Decoding one allocates nothing for its
//! strings; [`EventRef::to_event`] makes the owned [`Event`].

use std::borrow::Cow;

use crate::event::Meta;
use crate::{BlobHash, CheckpointCounts, CheckpointId, CodecError, DiffStats, Event, EventKind};
use crate::{Lsn, Timestamp};

/// An event's `meta`, as stored (its JSON text, not yet parsed) or as a
/// parsed object borrowed from an owned [`Event`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MetaRef<'a> {
    /// The JSON text from an encoded body; parsed (and so checked) only when
    /// it is needed.
    Text(&'a str),
    /// A parsed object.
    Map(&'a Meta),
}

impl MetaRef<'_> {
    /// The parsed object; an error if stored text is not a JSON object.
    pub fn to_meta(&self) -> Result<Meta, CodecError> {
        match self {
            MetaRef::Map(m) => Ok((*m).clone()),
            MetaRef::Text(t) => serde_json::from_str(t)
                .map(Meta)
                .map_err(|e| CodecError::Body(format!("field `meta`: {e}"))),
        }
    }
}

/// An [`Event`] whose strings borrow from the encoded body (or from an owned
/// event). Fields mean what they mean on [`Event`].
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // each field is documented on `Event`
pub struct EventRef<'a> {
    pub ts: Timestamp,
    pub session: &'a str,
    pub run: Option<&'a str>,
    pub phase: Option<&'a str>,
    pub kind: EventKind,
    pub agent: Option<&'a str>,
    pub user: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub model: Option<&'a str>,
    pub latency_ms: Option<u64>,
    pub ok: bool,
    pub error_kind: Option<&'a str>,
    pub text: Option<&'a str>,
    pub path: Option<&'a str>,
    pub to_path: Option<&'a str>,
    pub files: Vec<&'a str>,
    pub diff_stats: Option<DiffStats>,
    pub diff: Option<BlobHash>,
    pub before: Option<BlobHash>,
    pub after: Option<BlobHash>,
    pub parents: Cow<'a, [Lsn]>,
    pub label: Option<&'a str>,
    pub root: Option<BlobHash>,
    pub state: Option<BlobHash>,
    pub counts: Option<Cow<'a, CheckpointCounts>>,
    pub checkpoint: Option<CheckpointId>,
    pub source: Option<CheckpointId>,
    pub target: Option<CheckpointId>,
    pub meta: Option<MetaRef<'a>>,
}

impl<'a> EventRef<'a> {
    /// Decodes an event body (see [`Event::decode_body`]) without copying
    /// its strings. `meta`'s JSON is checked only by [`EventRef::to_event`]
    /// or when it is projected.
    pub fn decode(body: &'a [u8]) -> Result<EventRef<'a>, CodecError> {
        if body.len() > crate::event::MAX_EVENT_BODY_BYTES {
            return Err(CodecError::TooLarge {
                what: "event body",
                len: body.len() as u64,
                max: crate::event::MAX_EVENT_BODY_BYTES as u64,
            });
        }
        crate::body::decode_ref(body)
    }

    /// Borrows an owned event.
    pub fn of(e: &'a Event) -> EventRef<'a> {
        EventRef {
            ts: e.ts,
            session: &e.session,
            run: e.run.as_deref(),
            phase: e.phase.as_deref(),
            kind: e.kind,
            agent: e.agent.as_deref(),
            user: e.user.as_deref(),
            tool: e.tool.as_deref(),
            model: e.model.as_deref(),
            latency_ms: e.latency_ms,
            ok: e.ok,
            error_kind: e.error_kind.as_deref(),
            text: e.text.as_deref(),
            path: e.path.as_deref(),
            to_path: e.to_path.as_deref(),
            files: e.files.iter().map(String::as_str).collect(),
            diff_stats: e.diff_stats,
            diff: e.diff,
            before: e.before,
            after: e.after,
            parents: Cow::Borrowed(&e.parents),
            label: e.label.as_deref(),
            root: e.root,
            state: e.state,
            counts: e.counts.as_ref().map(Cow::Borrowed),
            checkpoint: e.checkpoint,
            source: e.source,
            target: e.target,
            meta: e.meta.as_ref().map(MetaRef::Map),
        }
    }

    /// The owned event; an error if `meta` is stored text that is not a
    /// JSON object.
    pub fn to_event(&self) -> Result<Event, CodecError> {
        let s = |v: Option<&str>| v.map(str::to_owned);
        Ok(Event {
            ts: self.ts,
            session: self.session.to_owned(),
            run: s(self.run),
            phase: s(self.phase),
            kind: self.kind,
            agent: s(self.agent),
            user: s(self.user),
            tool: s(self.tool),
            model: s(self.model),
            latency_ms: self.latency_ms,
            ok: self.ok,
            error_kind: s(self.error_kind),
            text: s(self.text),
            path: s(self.path),
            to_path: s(self.to_path),
            files: self.files.iter().map(|f| (*f).to_owned()).collect(),
            diff_stats: self.diff_stats,
            diff: self.diff,
            before: self.before,
            after: self.after,
            parents: self.parents.to_vec(),
            label: s(self.label),
            root: self.root,
            state: self.state,
            counts: self.counts.as_ref().map(|c| c.as_ref().clone()),
            checkpoint: self.checkpoint,
            source: self.source,
            target: self.target,
            meta: self.meta.map(|m| m.to_meta()).transpose()?,
        })
    }

    /// Every workspace path this event names (`path`, `to_path`, `files`),
    /// deduplicated, in that order (as [`Event::paths`]).
    pub fn paths(&self) -> Vec<&'a str> {
        let mut out: Vec<&'a str> = Vec::new();
        for p in self
            .path
            .iter()
            .chain(self.to_path.iter())
            .chain(self.files.iter())
        {
            if !out.contains(p) {
                out.push(p);
            }
        }
        out
    }
}
