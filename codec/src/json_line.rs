//! The canonical JSON line of a record, written by hand.
//!
//! [`write_json_line`] writes exactly the bytes `serde_json` writes for
//! [`JsonRecord`](crate::json::JsonRecord) (the same field order, the same
//! omissions, the same string escaping), straight from an [`EventRef`], with
//! no intermediate structure. Export is a projection of every record, so
//! this is its hot loop; the property tests below hold it to serde_json's
//! output byte for byte.

use std::cell::Cell;

use crate::event::{CheckpointCounts, DiffStats};
use crate::event_ref::{EventRef, MetaRef};
use crate::time::{IsoDay, Timestamp};
use crate::{BlobHash, ChainHash, CheckpointId, CodecError, Lsn};

thread_local! {
    /// The calendar day this thread's last line was stamped with: an
    /// export writes records in time order, so most lines reuse it.
    static LAST_DAY: Cell<IsoDay> = const { Cell::new(IsoDay::EMPTY) };
}

/// `ts` in ISO-8601 form, reusing this thread's last formatted date.
fn iso(ts: Timestamp) -> [u8; 24] {
    LAST_DAY.with(|c| {
        let mut day = c.get();
        let bytes = ts.iso_bytes_cached(&mut day);
        c.set(day);
        bytes
    })
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends the canonical JSON line (with its newline) of the record at
/// `lsn` with chain value `hash` to `out`. Fails only if the event's stored
/// `meta` is not a JSON object; `out` is then left as it was.
pub fn write_json_line(
    lsn: Lsn,
    hash: ChainHash,
    e: &EventRef<'_>,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = out.len();
    out.extend_from_slice(b"{\"lsn\":");
    uint(out, lsn.0);
    out.extend_from_slice(b",\"ts\":\"");
    out.extend_from_slice(&iso(e.ts));
    out.extend_from_slice(b"\",\"session\":");
    string(out, e.session);
    opt_str(out, "run", e.run);
    opt_str(out, "phase", e.phase);
    out.extend_from_slice(b",\"kind\":\"");
    // Kind names are plain ASCII with nothing to escape.
    out.extend_from_slice(e.kind.name().as_bytes());
    out.push(b'"');
    opt_str(out, "agent", e.agent);
    opt_str(out, "user", e.user);
    opt_str(out, "tool", e.tool);
    opt_str(out, "model", e.model);
    if let Some(v) = e.latency_ms {
        key(out, "latency_ms");
        uint(out, v);
    }
    out.extend_from_slice(if e.ok {
        b",\"ok\":true"
    } else {
        b",\"ok\":false"
    });
    opt_str(out, "error_kind", e.error_kind);
    opt_str(out, "text", e.text);
    opt_str(out, "path", e.path);
    opt_str(out, "to_path", e.to_path);
    files(out, &e.files);
    opt_diff_stats(out, e.diff_stats);
    opt_hash(out, "diff", e.diff);
    opt_hash(out, "before", e.before);
    opt_hash(out, "after", e.after);
    parents(out, &e.parents);
    opt_str(out, "label", e.label);
    opt_hash(out, "root", e.root);
    opt_hash(out, "state", e.state);
    opt_counts(out, e.counts.as_deref());
    opt_checkpoint(out, "checkpoint", e.checkpoint);
    opt_checkpoint(out, "source", e.source);
    opt_checkpoint(out, "target", e.target);
    if let Some(m) = e.meta {
        if let Err(err) = meta(out, m) {
            out.truncate(start);
            return Err(CodecError::Body(format!(
                "field `meta` of LSN {lsn}: {err}"
            )));
        }
    }
    key(out, "hash");
    hex(out, &hash.0);
    out.extend_from_slice(b"}\n");
    Ok(())
}

/// `"files":[...]`, when there are any.
#[inline]
fn files(out: &mut Vec<u8>, files: &[&str]) {
    if files.is_empty() {
        return;
    }
    key(out, "files");
    out.push(b'[');
    for (i, f) in files.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, f);
    }
    out.push(b']');
}

/// `"diff_stats":{...}`, when there are some.
#[inline]
fn opt_diff_stats(out: &mut Vec<u8>, d: Option<DiffStats>) {
    let Some(d) = d else { return };
    key(out, "diff_stats");
    out.extend_from_slice(b"{\"lines_added\":");
    uint(out, d.lines_added);
    out.extend_from_slice(b",\"lines_removed\":");
    uint(out, d.lines_removed);
    out.extend_from_slice(b",\"hunks\":");
    uint(out, d.hunks);
    out.push(b'}');
}

/// `"parents":[...]`, when there are any.
#[inline]
fn parents(out: &mut Vec<u8>, parents: &[Lsn]) {
    if parents.is_empty() {
        return;
    }
    key(out, "parents");
    out.push(b'[');
    for (i, p) in parents.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        uint(out, p.0);
    }
    out.push(b']');
}

/// `"counts":{...}`, when there are some.
#[inline]
fn opt_counts(out: &mut Vec<u8>, c: Option<&CheckpointCounts>) {
    let Some(c) = c else { return };
    key(out, "counts");
    out.extend_from_slice(b"{\"files\":");
    uint(out, c.files);
    out.extend_from_slice(b",\"changed\":");
    uint(out, c.changed);
    out.extend_from_slice(b",\"skipped\":{");
    for (i, (k, v)) in c.skipped.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, k);
        out.push(b':');
        uint(out, *v);
    }
    out.extend_from_slice(b"}}");
}

/// `"meta":{...}`. Stored text is parsed and re-serialized, so text that
/// is not a JSON object is refused rather than passed through.
#[inline]
fn meta(out: &mut Vec<u8>, m: MetaRef<'_>) -> Result<(), serde_json::Error> {
    key(out, "meta");
    match m {
        MetaRef::Map(m) => serde_json::to_writer(&mut *out, &m.0),
        MetaRef::Text(t) => match serde_json::from_str::<serde_json::Map<_, _>>(t) {
            Ok(map) => serde_json::to_writer(&mut *out, &map),
            Err(err) => Err(err),
        },
    }
}

fn key(out: &mut Vec<u8>, k: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}

fn opt_str(out: &mut Vec<u8>, k: &str, v: Option<&str>) {
    if let Some(v) = v {
        key(out, k);
        string(out, v);
    }
}

fn opt_hash(out: &mut Vec<u8>, k: &str, v: Option<BlobHash>) {
    if let Some(h) = v {
        key(out, k);
        hex(out, &h.0);
    }
}

fn opt_checkpoint(out: &mut Vec<u8>, k: &str, v: Option<CheckpointId>) {
    if let Some(c) = v {
        key(out, k);
        out.extend_from_slice(b"\"c");
        uint(out, c.0 .0);
        out.push(b'"');
    }
}

fn hex(out: &mut Vec<u8>, bytes: &[u8; 32]) {
    let mut buf = [b'"'; 66];
    for (i, b) in bytes.iter().enumerate() {
        buf[1 + 2 * i] = HEX[(b >> 4) as usize];
        buf[2 + 2 * i] = HEX[(b & 15) as usize];
    }
    out.extend_from_slice(&buf);
}

fn uint(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Per byte: 0 if it is written as is, else the letter of its escape
/// (`u` for `\u00XX`). serde_json's table: `"`, `\` and the control
/// characters below 0x20; everything else, non-ASCII included, as is.
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = b'u';
        i += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0a] = b'n';
    t[0x0c] = b'f';
    t[0x0d] = b'r';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// A JSON string, escaped as serde_json escapes it (see [`ESCAPE`]).
fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc = ESCAPE[b as usize];
        if esc == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[run..i]);
        if esc == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', esc]);
        }
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tests::arb_event;
    use crate::event::Meta;
    use crate::json::JsonRecord;
    use crate::{Event, EventKind};
    use proptest::prelude::*;

    fn serde_line(lsn: Lsn, hash: ChainHash, e: &Event) -> Vec<u8> {
        let mut v = serde_json::to_vec(&JsonRecord::new(lsn, hash, e)).unwrap();
        v.push(b'\n');
        v
    }

    fn ours(lsn: Lsn, hash: ChainHash, e: &EventRef<'_>) -> Vec<u8> {
        let mut v = Vec::new();
        write_json_line(lsn, hash, e, &mut v).unwrap();
        v
    }

    #[test]
    fn every_control_character_escapes_like_serde_json() {
        let all: String = (0u8..0x80).map(char::from).chain("é€😀".chars()).collect();
        let e = Event::new(EventKind::Reply, "s\"\\").with_text(all);
        assert_eq!(
            ours(Lsn(1), ChainHash([7; 32]), &EventRef::of(&e)),
            serde_line(Lsn(1), ChainHash([7; 32]), &e)
        );
    }

    #[test]
    fn bad_meta_text_is_refused_and_leaves_out_alone() {
        let e = Event::new(EventKind::Custom, "s");
        let mut r = EventRef::of(&e);
        r.meta = Some(MetaRef::Text("[1, 2]"));
        let mut out = b"before".to_vec();
        let err = write_json_line(Lsn(9), ChainHash::ZERO, &r, &mut out).unwrap_err();
        assert!(err.to_string().contains("meta") && err.to_string().contains('9'));
        assert_eq!(out, b"before");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn same_bytes_as_serde_json(e in arb_event(), text in ".{0,40}", lsn in any::<u64>(), h in any::<[u8; 32]>()) {
            let mut e = e;
            e.files.push(text.clone());
            if e.meta.is_some() {
                let mut m = serde_json::Map::new();
                m.insert(text.clone(), serde_json::json!({"x": [text, 1.5, -2, null, true]}));
                e.meta = Some(Meta(m));
            }
            let expected = serde_line(Lsn(lsn), ChainHash(h), &e);
            prop_assert_eq!(&ours(Lsn(lsn), ChainHash(h), &EventRef::of(&e)), &expected);
            // And from a decoded body, where `meta` is stored text.
            let body = e.encode_body().unwrap();
            let r = EventRef::decode(&body).unwrap();
            prop_assert_eq!(&ours(Lsn(lsn), ChainHash(h), &r), &expected);
            prop_assert_eq!(r.to_event().unwrap(), e);
        }
    }
}
