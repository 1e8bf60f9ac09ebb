//! The event body codec: MessagePack, written and read by hand.
//!
//! The layout is exactly what rmp-serde's compact (positional) form writes
//! for [`Event`]: an array of [`EVENT_FIELDS`] values in declaration order,
//! `None` as nil, integers in their shortest form, blob hashes as 32-byte
//! `bin`, [`crate::CheckpointId`]s as their LSN, [`EventKind`] as its
//! canonical name, `meta` as its JSON text. Stores written before this codec
//! existed read back unchanged, and the property tests below check, for
//! arbitrary events, that the bytes equal rmp-serde's and that both decoders
//! agree.
//!
//! It exists because the generic serde path cost about a microsecond per
//! record on each side, which capped appends, replay and export; this one
//! writes into a caller's buffer and decodes in one pass without a
//! `Deserializer` state machine.
//!
//! The decoder trusts nothing: every length is checked against the bytes
//! that remain before anything is allocated, every string is checked to be
//! UTF-8, and every error names the field and the byte offset.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::event::{CheckpointCounts, DiffStats, Event, EventKind};
use crate::event_ref::{EventRef, MetaRef};
use crate::{BlobHash, CheckpointId, CodecError, Lsn, Timestamp};

/// Fields of the positional [`Event`] array. A new field is appended at the
/// end (as an optional value) and this number raised; decoders of that
/// version then accept both lengths.
pub const EVENT_FIELDS: u32 = 29;

/// Fields of the positional [`CheckpointCounts`] array (`skipped` may be
/// absent, as serde's `#[serde(default)]` allowed).
const COUNTS_FIELDS: u32 = 3;

/// Fields of the positional [`DiffStats`] array.
const DIFF_STATS_FIELDS: u32 = 3;

// MessagePack markers used here.
const NIL: u8 = 0xc0;
const FALSE: u8 = 0xc2;
const TRUE: u8 = 0xc3;
const BIN8: u8 = 0xc4;
const BIN16: u8 = 0xc5;
const BIN32: u8 = 0xc6;
const UINT8: u8 = 0xcc;
const UINT16: u8 = 0xcd;
const UINT32: u8 = 0xce;
const UINT64: u8 = 0xcf;
const INT8: u8 = 0xd0;
const INT16: u8 = 0xd1;
const INT32: u8 = 0xd2;
const INT64: u8 = 0xd3;
const STR8: u8 = 0xd9;
const STR16: u8 = 0xda;
const STR32: u8 = 0xdb;
const ARRAY16: u8 = 0xdc;
const ARRAY32: u8 = 0xdd;
const MAP16: u8 = 0xde;
const MAP32: u8 = 0xdf;

// ---------------------------------------------------------------- encoding

/// Appends the body of `e` to `out`.
pub(crate) fn encode(e: &Event, out: &mut Vec<u8>) {
    out.reserve(64 + e.text.as_ref().map_or(0, String::len));
    array_len(out, EVENT_FIELDS);
    sint(out, e.ts.0);
    str(out, &e.session);
    opt_str(out, &e.run);
    opt_str(out, &e.phase);
    str(out, e.kind.name());
    opt_str(out, &e.agent);
    opt_str(out, &e.user);
    opt_str(out, &e.tool);
    opt_str(out, &e.model);
    opt(out, &e.latency_ms, |o, v| uint(o, *v));
    out.push(if e.ok { TRUE } else { FALSE });
    opt_str(out, &e.error_kind);
    opt_str(out, &e.text);
    opt_str(out, &e.path);
    opt_str(out, &e.to_path);
    array_len(out, e.files.len() as u32);
    for f in &e.files {
        str(out, f);
    }
    opt(out, &e.diff_stats, |o, d| {
        array_len(o, DIFF_STATS_FIELDS);
        uint(o, d.lines_added);
        uint(o, d.lines_removed);
        uint(o, d.hunks);
    });
    opt(out, &e.diff, hash);
    opt(out, &e.before, hash);
    opt(out, &e.after, hash);
    array_len(out, e.parents.len() as u32);
    for p in &e.parents {
        uint(out, p.0);
    }
    opt_str(out, &e.label);
    opt(out, &e.root, hash);
    opt(out, &e.state, hash);
    opt(out, &e.counts, |o, c| {
        array_len(o, COUNTS_FIELDS);
        uint(o, c.files);
        uint(o, c.changed);
        map_len(o, c.skipped.len() as u32);
        for (k, v) in &c.skipped {
            str(o, k);
            uint(o, *v);
        }
    });
    opt(out, &e.checkpoint, |o, c| uint(o, c.0 .0));
    opt(out, &e.source, |o, c| uint(o, c.0 .0));
    opt(out, &e.target, |o, c| uint(o, c.0 .0));
    opt(out, &e.meta, |o, m| {
        // Serializing a JSON map into a String cannot fail.
        let text = serde_json::to_string(&m.0).unwrap_or_default();
        str(o, &text);
    });
}

fn opt<T>(out: &mut Vec<u8>, v: &Option<T>, f: impl FnOnce(&mut Vec<u8>, &T)) {
    match v {
        Some(v) => f(out, v),
        None => out.push(NIL),
    }
}

fn opt_str(out: &mut Vec<u8>, v: &Option<String>) {
    match v {
        Some(s) => str(out, s),
        None => out.push(NIL),
    }
}

fn hash(out: &mut Vec<u8>, h: &BlobHash) {
    out.extend_from_slice(&[BIN8, 32]);
    out.extend_from_slice(&h.0);
}

fn str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n < 256 {
        out.extend_from_slice(&[STR8, n as u8]);
    } else if n < 65536 {
        out.push(STR16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(STR32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

fn array_len(out: &mut Vec<u8>, n: u32) {
    container_len(out, n, 0x90, ARRAY16, ARRAY32);
}

fn map_len(out: &mut Vec<u8>, n: u32) {
    container_len(out, n, 0x80, MAP16, MAP32);
}

/// An array or map header: the fix form below 16 elements, else 16 or 32 bits.
fn container_len(out: &mut Vec<u8>, n: u32, fix: u8, m16: u8, m32: u8) {
    if n < 16 {
        out.push(fix | n as u8);
    } else if n < 65536 {
        out.push(m16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(m32);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn uint(out: &mut Vec<u8>, v: u64) {
    if v < 128 {
        out.push(v as u8);
    } else if v < 256 {
        out.extend_from_slice(&[UINT8, v as u8]);
    } else if v < 65536 {
        out.push(UINT16);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v < 1 << 32 {
        out.push(UINT32);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(UINT64);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Signed integers the way rmp's `write_sint` writes them: non-negative
/// values as unsigned, negative ones in the smallest signed form.
fn sint(out: &mut Vec<u8>, v: i64) {
    if v >= 0 {
        uint(out, v as u64);
    } else if v >= -32 {
        out.push(v as i8 as u8);
    } else if v >= -128 {
        out.extend_from_slice(&[INT8, v as i8 as u8]);
    } else if v >= -32768 {
        out.push(INT16);
        out.extend_from_slice(&(v as i16).to_be_bytes());
    } else if v >= -2_147_483_648 {
        out.push(INT32);
        out.extend_from_slice(&(v as i32).to_be_bytes());
    } else {
        out.push(INT64);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

// ---------------------------------------------------------------- decoding

/// Decodes a body written by [`encode`] (or by rmp-serde's compact form).
/// The whole of `b` must be one event: trailing bytes are damage.
pub(crate) fn decode(b: &[u8]) -> Result<Event, CodecError> {
    decode_ref(b)?.to_event()
}

/// Decodes a body into an [`EventRef`] borrowing its strings from `b`.
pub(crate) fn decode_ref(b: &[u8]) -> Result<EventRef<'_>, CodecError> {
    let mut r = Reader::new(b);
    match fields(&mut r) {
        Ok(e) => Ok(e),
        Err(Bad) => Err(r
            .err
            .take()
            .unwrap_or_else(|| CodecError::Body("undecodable event".into()))),
    }
}

/// The fields of the event array, in order. Errors are recorded in the
/// reader and surface as the zero-sized [`Bad`], which keeps every
/// intermediate `Result` small (this loop runs once per record of a fold).
fn fields<'a>(r: &mut Reader<'a>) -> Res<EventRef<'a>> {
    let n = r.array_len("event")?;
    if n != EVENT_FIELDS {
        return Err(r.invalid(
            "event",
            format_args!("an array of {n} fields, expected {EVENT_FIELDS}"),
        ));
    }
    let ts = Timestamp(r.sint("ts")?);
    let session = r.str("session")?;
    let run = r.opt_str("run")?;
    let phase = r.opt_str("phase")?;
    let kind = r.kind()?;
    let agent = r.opt_str("agent")?;
    let user = r.opt_str("user")?;
    let tool = r.opt_str("tool")?;
    let model = r.opt_str("model")?;
    let latency_ms = r.opt_uint("latency_ms")?;
    let ok = r.bool("ok")?;
    let error_kind = r.opt_str("error_kind")?;
    let text = r.opt_str("text")?;
    let path = r.opt_str("path")?;
    let to_path = r.opt_str("to_path")?;
    let files = r.strs("files")?;
    let diff_stats = r.opt_diff_stats()?;
    let diff = r.opt_hash("diff")?;
    let before = r.opt_hash("before")?;
    let after = r.opt_hash("after")?;
    let parents = r.lsns("parents")?;
    let label = r.opt_str("label")?;
    let root = r.opt_hash("root")?;
    let state = r.opt_hash("state")?;
    let counts = r.opt_counts()?;
    let checkpoint = r.opt_checkpoint("checkpoint")?;
    let source = r.opt_checkpoint("source")?;
    let target = r.opt_checkpoint("target")?;
    let meta = r.opt_str("meta")?.map(MetaRef::Text);
    r.end()?;
    Ok(EventRef {
        ts,
        session,
        run,
        phase,
        kind,
        agent,
        user,
        tool,
        model,
        latency_ms,
        ok,
        error_kind,
        text,
        path,
        to_path,
        files,
        diff_stats,
        diff,
        before,
        after,
        parents: Cow::Owned(parents),
        label,
        root,
        state,
        counts,
        checkpoint,
        source,
        target,
        meta,
    })
}

/// The parts of an event array that are more than one value: each read
/// where [`fields`] names it, inlined into its loop.
impl<'a> Reader<'a> {
    /// The event's kind, by its name.
    #[inline]
    fn kind(&mut self) -> Res<EventKind> {
        let kind_at = self.pos;
        let kind_name = self.str("kind")?;
        let Some(kind) = kind_from_name(kind_name) else {
            self.pos = kind_at;
            return Err(self.invalid(
                "kind",
                format_args!("unknown event kind `{}`", kind_name.escape_debug()),
            ));
        };
        Ok(kind)
    }

    /// An unsigned integer, or nil.
    #[inline]
    fn opt_uint(&mut self, field: &str) -> Res<Option<u64>> {
        if self.nil() {
            Ok(None)
        } else {
            Ok(Some(self.uint(field)?))
        }
    }

    /// An array of strings.
    #[inline]
    fn strs(&mut self, field: &str) -> Res<Vec<&'a str>> {
        let n = self.array_len(field)?;
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            out.push(self.str(field)?);
        }
        Ok(out)
    }

    /// An array of LSNs.
    #[inline]
    fn lsns(&mut self, field: &str) -> Res<Vec<Lsn>> {
        let n = self.array_len(field)?;
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            out.push(Lsn(self.uint(field)?));
        }
        Ok(out)
    }

    /// The `diff_stats` array, or nil.
    #[inline]
    fn opt_diff_stats(&mut self) -> Res<Option<DiffStats>> {
        if self.nil() {
            return Ok(None);
        }
        let n = self.array_len("diff_stats")?;
        if n != DIFF_STATS_FIELDS {
            return Err(self.invalid(
                "diff_stats",
                format_args!("an array of {n} fields, expected 3"),
            ));
        }
        Ok(Some(DiffStats {
            lines_added: self.uint("diff_stats.lines_added")?,
            lines_removed: self.uint("diff_stats.lines_removed")?,
            hunks: self.uint("diff_stats.hunks")?,
        }))
    }

    /// The `counts` array (its `skipped` map optional), or nil.
    #[inline]
    fn opt_counts(&mut self) -> Res<Option<Cow<'a, CheckpointCounts>>> {
        if self.nil() {
            return Ok(None);
        }
        let n = self.array_len("counts")?;
        if !(2..=COUNTS_FIELDS).contains(&n) {
            return Err(self.invalid("counts", format_args!("an array of {n} fields, expected 3")));
        }
        let files = self.uint("counts.files")?;
        let changed = self.uint("counts.changed")?;
        let mut skipped = BTreeMap::new();
        if n == COUNTS_FIELDS {
            let m = self.map_len("counts.skipped")?;
            for _ in 0..m {
                let k = self.str("counts.skipped")?.to_owned();
                let v = self.uint("counts.skipped")?;
                skipped.insert(k, v);
            }
        }
        Ok(Some(Cow::Owned(CheckpointCounts {
            files,
            changed,
            skipped,
        })))
    }

    /// The end of the event: no bytes after it.
    #[inline]
    fn end(&mut self) -> Res<()> {
        if self.pos != self.b.len() {
            let extra = self.b.len() - self.pos;
            return Err(self.invalid(
                "event",
                format_args!("{extra} trailing bytes after the event"),
            ));
        }
        Ok(())
    }
}

/// The kind named `s` (a match, not a search: this runs once per record
/// decoded). A test checks it agrees with [`EventKind::name`] for every kind.
fn kind_from_name(s: &str) -> Option<EventKind> {
    Some(match s {
        "prompt" => EventKind::Prompt,
        "reply" => EventKind::Reply,
        "tool_call" => EventKind::ToolCall,
        "diff_preview" => EventKind::DiffPreview,
        "apply" => EventKind::Apply,
        "undo" => EventKind::Undo,
        "file.create" => EventKind::FileCreate,
        "file.write" => EventKind::FileWrite,
        "file.edit" => EventKind::FileEdit,
        "file.delete" => EventKind::FileDelete,
        "file.move" => EventKind::FileMove,
        "file.patch" => EventKind::FilePatch,
        "checkpoint.create" => EventKind::CheckpointCreate,
        "checkpoint.discard" => EventKind::CheckpointDiscard,
        "rollback" => EventKind::Rollback,
        "git.stash" => EventKind::GitStash,
        "git.stash_restore" => EventKind::GitStashRestore,
        "custom" => EventKind::Custom,
        _ => return None,
    })
}

/// A decoding failure whose description the [`Reader`] holds.
struct Bad;

type Res<T> = Result<T, Bad>;

/// A cursor over a body being decoded; keeps the first error's description.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    err: Option<CodecError>,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Reader<'a> {
        Reader {
            b,
            pos: 0,
            err: None,
        }
    }

    /// Records that `field` at the current position is `what`.
    #[cold]
    #[inline(never)]
    fn invalid(&mut self, field: &str, what: std::fmt::Arguments<'_>) -> Bad {
        if self.err.is_none() {
            self.err = Some(CodecError::Body(format!(
                "field `{field}` at byte {}: {what}",
                self.pos
            )));
        }
        Bad
    }

    #[cold]
    #[inline(never)]
    fn unexpected(&mut self, field: &str, marker: u8, wanted: &str) -> Bad {
        self.pos -= 1;
        self.invalid(
            field,
            format_args!("expected {wanted}, found marker {marker:#04x}"),
        )
    }

    #[cold]
    #[inline(never)]
    fn short(&mut self, field: &str, n: usize) -> Bad {
        let rest = self.b.len() - self.pos;
        self.invalid(field, format_args!("needs {n} bytes, {rest} remain"))
    }

    #[inline]
    fn marker(&mut self, field: &str) -> Res<u8> {
        match self.b.get(self.pos) {
            Some(&m) => {
                self.pos += 1;
                Ok(m)
            }
            None => Err(self.short(field, 1)),
        }
    }

    #[inline]
    fn take(&mut self, field: &str, n: usize) -> Res<&'a [u8]> {
        if n > self.b.len() - self.pos {
            return Err(self.short(field, n));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn be<const N: usize>(&mut self, field: &str) -> Res<[u8; N]> {
        let s = self.take(field, N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Consumes a nil if one is next.
    #[inline]
    fn nil(&mut self) -> bool {
        if self.b.get(self.pos) == Some(&NIL) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn bool(&mut self, field: &str) -> Res<bool> {
        match self.marker(field)? {
            TRUE => Ok(true),
            FALSE => Ok(false),
            m => Err(self.unexpected(field, m, "a boolean")),
        }
    }

    /// Any MessagePack integer, as i128 so every form fits.
    fn int(&mut self, field: &str) -> Res<i128> {
        let m = self.marker(field)?;
        Ok(match m {
            0x00..=0x7f => m as i128,
            0xe0..=0xff => m as i8 as i128,
            UINT8 => u8::from_be_bytes(self.be(field)?) as i128,
            UINT16 => u16::from_be_bytes(self.be(field)?) as i128,
            UINT32 => u32::from_be_bytes(self.be(field)?) as i128,
            UINT64 => u64::from_be_bytes(self.be(field)?) as i128,
            INT8 => i8::from_be_bytes(self.be(field)?) as i128,
            INT16 => i16::from_be_bytes(self.be(field)?) as i128,
            INT32 => i32::from_be_bytes(self.be(field)?) as i128,
            INT64 => i64::from_be_bytes(self.be(field)?) as i128,
            m => return Err(self.unexpected(field, m, "an integer")),
        })
    }

    fn uint(&mut self, field: &str) -> Res<u64> {
        let at = self.pos;
        let v = self.int(field)?;
        u64::try_from(v).map_err(|_| {
            self.pos = at;
            self.invalid(field, format_args!("{v} is not an unsigned 64-bit integer"))
        })
    }

    fn sint(&mut self, field: &str) -> Res<i64> {
        let at = self.pos;
        let v = self.int(field)?;
        i64::try_from(v).map_err(|_| {
            self.pos = at;
            self.invalid(field, format_args!("{v} is not a signed 64-bit integer"))
        })
    }

    fn opt_checkpoint(&mut self, field: &str) -> Res<Option<CheckpointId>> {
        if self.nil() {
            return Ok(None);
        }
        Ok(Some(CheckpointId(Lsn(self.uint(field)?))))
    }

    fn str(&mut self, field: &str) -> Res<&'a str> {
        let m = self.marker(field)?;
        let n = match m {
            0xa0..=0xbf => (m & 0x1f) as usize,
            STR8 => u8::from_be_bytes(self.be(field)?) as usize,
            STR16 => u16::from_be_bytes(self.be(field)?) as usize,
            STR32 => u32::from_be_bytes(self.be(field)?) as usize,
            m => return Err(self.unexpected(field, m, "a string")),
        };
        let at = self.pos;
        let bytes = self.take(field, n)?;
        if bytes.is_ascii() {
            // SAFETY: every ASCII byte sequence is valid UTF-8. Most
            // stored strings (sessions, kinds, paths, tool names) are
            // short ASCII, where this word-at-a-time check is several
            // times cheaper than `from_utf8`'s general validation.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s),
            Err(e) => {
                self.pos = at;
                Err(self.invalid(field, format_args!("not UTF-8 ({e})")))
            }
        }
    }

    #[inline]
    fn opt_str(&mut self, field: &str) -> Res<Option<&'a str>> {
        if self.nil() {
            return Ok(None);
        }
        self.str(field).map(Some)
    }

    fn opt_hash(&mut self, field: &str) -> Res<Option<BlobHash>> {
        if self.nil() {
            return Ok(None);
        }
        let m = self.marker(field)?;
        let n = match m {
            BIN8 => u8::from_be_bytes(self.be(field)?) as usize,
            BIN16 => u16::from_be_bytes(self.be(field)?) as usize,
            BIN32 => u32::from_be_bytes(self.be(field)?) as usize,
            m => return Err(self.unexpected(field, m, "a 32-byte blob hash")),
        };
        if n != 32 {
            return Err(self.invalid(field, format_args!("a blob hash of {n} bytes, expected 32")));
        }
        Ok(Some(BlobHash(self.be::<32>(field)?)))
    }

    /// An array header whose length is plausible: each element takes at
    /// least one byte, so a length past the remaining bytes is damage, and
    /// is refused before anything is allocated for it.
    fn array_len(&mut self, field: &str) -> Res<u32> {
        let m = self.marker(field)?;
        let n = match m {
            0x90..=0x9f => (m & 0x0f) as u32,
            ARRAY16 => u16::from_be_bytes(self.be(field)?) as u32,
            ARRAY32 => u32::from_be_bytes(self.be(field)?),
            m => return Err(self.unexpected(field, m, "an array")),
        };
        self.plausible(field, n, 1)
    }

    /// A map header; each entry takes at least two bytes.
    fn map_len(&mut self, field: &str) -> Res<u32> {
        let m = self.marker(field)?;
        let n = match m {
            0x80..=0x8f => (m & 0x0f) as u32,
            MAP16 => u16::from_be_bytes(self.be(field)?) as u32,
            MAP32 => u32::from_be_bytes(self.be(field)?),
            m => return Err(self.unexpected(field, m, "a map")),
        };
        self.plausible(field, n, 2)
    }

    fn plausible(&mut self, field: &str, n: u32, min_each: usize) -> Res<u32> {
        let rest = self.b.len() - self.pos;
        if (n as usize).saturating_mul(min_each) > rest {
            return Err(self.invalid(
                field,
                format_args!("{n} elements claimed, only {rest} bytes remain"),
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tests::arb_event;
    use proptest::prelude::*;

    fn ours(e: &Event) -> Vec<u8> {
        let mut v = Vec::new();
        encode(e, &mut v);
        v
    }

    #[test]
    fn every_kind_name_decodes() {
        for k in EventKind::ALL {
            assert_eq!(kind_from_name(k.name()), Some(k));
        }
        assert_eq!(kind_from_name("file.nuke"), None);
    }

    #[test]
    fn integer_forms_match_rmp() {
        for v in [
            0i64,
            1,
            127,
            128,
            255,
            256,
            65535,
            65536,
            (1 << 32) - 1,
            1 << 32,
            i64::MAX,
            -1,
            -32,
            -33,
            -128,
            -129,
            -32768,
            -32769,
            -2_147_483_648,
            -2_147_483_649,
            i64::MIN,
        ] {
            let mut a = Vec::new();
            sint(&mut a, v);
            assert_eq!(a, rmp_serde::to_vec(&v).unwrap(), "{v}");
            let mut r = Reader::new(&a);
            assert_eq!(r.sint("x").ok(), Some(v));
        }
        for v in [
            0u64,
            127,
            128,
            255,
            256,
            65535,
            65536,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut a = Vec::new();
            uint(&mut a, v);
            assert_eq!(a, rmp_serde::to_vec(&v).unwrap(), "{v}");
        }
    }

    #[test]
    fn string_and_array_forms_match_rmp() {
        for n in [0usize, 31, 32, 255, 256, 65535, 65536] {
            let s = "x".repeat(n);
            let mut a = Vec::new();
            str(&mut a, &s);
            assert_eq!(a, rmp_serde::to_vec(&s).unwrap(), "{n}");
            let v = vec![1u8; n];
            let mut a = Vec::new();
            array_len(&mut a, n as u32);
            for x in &v {
                uint(&mut a, *x as u64);
            }
            assert_eq!(a, rmp_serde::to_vec(&v).unwrap(), "{n}");
        }
    }

    #[test]
    fn huge_claimed_lengths_refused_before_allocation() {
        let mut e = Event::new(EventKind::Prompt, "s");
        // A fixed time: the current one could encode a 0x91 byte of its
        // own before the files array the search below looks for.
        e.ts = Timestamp(1_700_000_000_000);
        e.files = vec!["a".into()];
        let mut b = ours(&e);
        // The files array header (fixarray of 1) becomes an array32 of 2^32-1.
        let at = b.iter().position(|&x| x == 0x91).unwrap();
        b.splice(at..at + 1, [ARRAY32, 0xff, 0xff, 0xff, 0xff]);
        let err = decode(&b).unwrap_err().to_string();
        assert!(
            err.contains("files") && err.contains("elements claimed"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_field_and_offset() {
        let mut e = Event::new(EventKind::Prompt, "s");
        // A fixed time, whose encoding holds no 0xc3 (`true`) byte.
        e.ts = Timestamp(1_700_000_000_000);
        let mut b = ours(&e);
        // `ok` is the 11th field; make it an integer.
        let at = b.iter().position(|&x| x == TRUE).unwrap();
        b[at] = 0x05;
        let err = decode(&b).unwrap_err().to_string();
        assert!(
            err.contains("`ok`") && err.contains(&format!("byte {at}")),
            "{err}"
        );
        let mut b = ours(&e);
        b.push(0);
        assert!(decode(&b).unwrap_err().to_string().contains("trailing"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The hand-written encoder writes exactly rmp-serde's bytes, so
        /// stores written by either read back with either.
        #[test]
        fn bytes_equal_rmp_serde(e in arb_event()) {
            let b = ours(&e);
            prop_assert_eq!(&b, &rmp_serde::to_vec(&e).unwrap());
            prop_assert_eq!(decode(&b).unwrap(), e);
        }

        /// Whatever the hand-written decoder accepts, rmp-serde decodes to
        /// the same event: it never invents a value.
        #[test]
        fn garbage_is_refused_or_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(e) = decode(&bytes) {
                prop_assert_eq!(rmp_serde::from_slice::<Event>(&bytes).unwrap(), e);
            }
        }

        /// A valid body with one byte changed decodes to an error or to the
        /// same event rmp-serde reads from those bytes.
        #[test]
        fn mutated_bodies_never_lie(e in arb_event(), at in any::<usize>(), x in any::<u8>()) {
            let mut b = ours(&e);
            let at = at % b.len();
            b[at] ^= x | 1;
            if let Ok(d) = decode(&b) {
                prop_assert_eq!(rmp_serde::from_slice::<Event>(&b).unwrap(), d);
            }
        }
    }
}
