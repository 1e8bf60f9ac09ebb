//! The record frame: how one record sits in a log segment.
//!
//! ```text
//! offset size field
//!  0     4    body_len  u32 LE, bytes of the stored body that follows the header
//!  4     4    crc       u32 LE, CRC32 seeded with CRC_SEED over bytes 0..4 and 8..52, then the body
//!  8     1    kind      RecordKind (1 = event)
//!  9     1    flags     bit 0 COMPRESSED (body is zstd), bit 1 BATCH_CONT (more records of this batch follow),
//!                      bit 2 DICT (the zstd body needs the log dictionary its zstd frame names; only with bit 0)
//! 10     2    reserved  must be 0
//! 12     8    lsn       u64 LE
//! 20    32    chain     blake3 keyed with prev_chain over lsn || kind || flags || stored body
//!                      (segment format 1: blake3(prev_chain || lsn || kind || flags || stored body); see ChainForm)
//! 52     n    body      MessagePack (or zstd of it when COMPRESSED)
//! ```
//!
//! The CRC covers the length, kind, flags, LSN and chain as well as the body,
//! and starts from a non-zero seed, so a zero-filled region, a corrupted
//! length or a record copied from elsewhere never validates.
//!
//! A body is one zstd frame when COMPRESSED, and its output is bounded by
//! the content size that frame claims. With DICT the frame was made with
//! the log's trained dictionary (see [`crate::zdict`]), which the reader
//! is given by id; a body is never decoded with another dictionary.

use std::borrow::Cow;

use crate::zdict::{self, Dict, DictLookup};
use crate::{ChainHash, CodecError, Lsn};

/// Size of the fixed frame header.
pub const HEADER_LEN: usize = 52;
/// The CRC32 seed ("CAIR"): a zero-filled region never has a valid CRC.
pub const CRC_SEED: u32 = 0x4341_4952;
/// The largest stored body a frame may declare. Checked before any
/// allocation, so a corrupted length can never drive a huge allocation. It
/// leaves room above the largest event body for zstd's worst-case expansion.
pub const MAX_STORED_BODY_BYTES: usize = crate::event::MAX_EVENT_BODY_BYTES + 64 * 1024;
/// Bodies at least this large are offered to zstd; smaller ones rarely shrink.
pub const COMPRESS_MIN_BYTES: usize = 512;
/// With the log's dictionary, bodies at least this large are offered to
/// zstd: the dictionary already knows the field names and common values,
/// so a tool call of a few hundred bytes shrinks by half. Smaller bodies
/// would shrink too, but compressing one costs about 2 µs, more than the
/// rest of an append: with every ~180-byte body compressed, `never`
/// appends of 200-byte events fell from 1.03M/s to 0.40M/s, to save 125
/// bytes each (docs/BENCHMARKS.md).
pub const DICT_COMPRESS_MIN_BYTES: usize = 256;
/// zstd level for record bodies: fast, and most of the gain on text.
pub const BODY_ZSTD_LEVEL: i32 = 3;

/// Flag: the body is zstd-compressed.
pub const FLAG_COMPRESSED: u8 = 1;
/// Flag: this record is part of an atomic batch and is not its last record.
/// After a crash, a batch whose last record is missing is discarded whole.
pub const FLAG_BATCH_CONT: u8 = 2;
/// Flag: the zstd body needs the log dictionary its zstd frame names
/// (only with [`FLAG_COMPRESSED`]).
pub const FLAG_DICT: u8 = 4;
const KNOWN_FLAGS: u8 = FLAG_COMPRESSED | FLAG_BATCH_CONT | FLAG_DICT;

/// The smallest body offered to zstd, with or without a dictionary.
pub fn compress_min_bytes(with_dict: bool) -> usize {
    if with_dict {
        DICT_COMPRESS_MIN_BYTES
    } else {
        COMPRESS_MIN_BYTES
    }
}

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum RecordKind {
    /// An agent [`Event`](crate::Event).
    Event = 1,
}

impl RecordKind {
    /// Decodes the kind byte.
    pub fn from_u8(b: u8) -> Option<RecordKind> {
        match b {
            1 => Some(RecordKind::Event),
            _ => None,
        }
    }
}

/// A decoded frame, borrowing its body from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The record's sequence number.
    pub lsn: Lsn,
    /// What the record holds.
    pub kind: RecordKind,
    /// Flag bits.
    pub flags: u8,
    /// The hash-chain value after this record.
    pub chain: ChainHash,
    /// The body as stored (possibly compressed).
    pub stored: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Total bytes the frame occupies.
    pub fn len(&self) -> usize {
        HEADER_LEN + self.stored.len()
    }

    /// Frames are never empty (the header alone is 52 bytes).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True if more records of the same atomic batch follow.
    pub fn batch_continues(&self) -> bool {
        self.flags & FLAG_BATCH_CONT != 0
    }

    /// The body, decompressed if needed (bounded by [`MAX_EVENT_BODY_BYTES`](crate::event::MAX_EVENT_BODY_BYTES)).
    /// A body that needs a dictionary fails with
    /// [`CodecError::MissingDictionary`]: use [`body_with`](Self::body_with).
    pub fn body(&self) -> Result<Cow<'a, [u8]>, CodecError> {
        self.body_with(&zdict::no_dicts)
    }

    /// The body, decompressed if needed, with the dictionary `dicts` finds
    /// for the id its zstd frame names when it needs one.
    pub fn body_with(&self, dicts: DictLookup<'_>) -> Result<Cow<'a, [u8]>, CodecError> {
        if self.flags & FLAG_COMPRESSED == 0 {
            return Ok(Cow::Borrowed(self.stored));
        }
        let dict = zdict::frame_dict(
            self.stored,
            self.flags & FLAG_DICT != 0,
            "record body",
            dicts,
        )?;
        decompress_bounded_with(
            self.stored,
            crate::event::MAX_EVENT_BODY_BYTES,
            dict.as_deref(),
        )
        .map(Cow::Owned)
    }

    /// Checks that this frame's chain value follows from `prev` in a
    /// segment whose records chain by `form`.
    pub fn chain_follows(&self, prev: ChainHash, form: ChainForm) -> bool {
        form.next(prev, self.lsn, self.kind as u8, self.flags, self.stored) == self.chain
    }
}

/// Decompresses a zstd frame, refusing output larger than `max` bytes
/// (a "decompression bomb") without allocating it.
pub fn decompress_bounded(stored: &[u8], max: usize) -> Result<Vec<u8>, CodecError> {
    decompress_bounded_with(stored, max, None)
}

/// [`decompress_bounded`] with a dictionary.
pub fn decompress_bounded_with(
    stored: &[u8],
    max: usize,
    dict: Option<&Dict>,
) -> Result<Vec<u8>, CodecError> {
    // The output buffer is the size the frame claims when it says (as
    // cairn's frames do), so a read does not reserve `max` bytes; a frame
    // whose data outgrows its claim fails to decompress.
    let mut capacity = max;
    if let Ok(Some(claimed)) = zstd::zstd_safe::get_frame_content_size(stored) {
        if claimed > max as u64 {
            return Err(CodecError::TooLarge {
                what: "decompressed body",
                len: claimed,
                max: max as u64,
            });
        }
        capacity = claimed as usize;
    }
    zdict::decompress(stored, capacity, dict).map_err(|e| CodecError::Invalid {
        what: format!("zstd body does not decompress within {max} bytes: {e}"),
    })
}

/// How the records of a segment chain, fixed by the segment's format
/// version (see [`crate::segment`]). Both forms bind the previous chain
/// value, the LSN, the kind, the flags and the stored body; they differ
/// only in where the previous value goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChainForm {
    /// Segment format 1: `blake3(prev || lsn || kind || flags || stored)`.
    Prefixed,
    /// Segment format 2: blake3 keyed with `prev` (the key takes the place
    /// of blake3's IV, as each block's chaining value does inside a
    /// chunk) over `lsn || kind || flags || stored`. Leaving the 32 bytes
    /// of `prev` out of the input saves one of blake3's 64-byte
    /// compressions for most records: the log bench's 229-byte frames
    /// hash 187 bytes (3 blocks) instead of 219 (4), the chain alone took
    /// 274 ns instead of 388, and `never` appends, where the chain was a
    /// third of the time, went ~10% faster (docs/BENCHMARKS.md, "Segment
    /// format 2: the keyed chain").
    Keyed,
}

impl ChainForm {
    /// The form new segments are written with.
    pub const CURRENT: ChainForm = ChainForm::Keyed;

    /// The segment format version that chains this way.
    pub fn version(self) -> u32 {
        match self {
            ChainForm::Prefixed => 1,
            ChainForm::Keyed => 2,
        }
    }

    /// The form of segment format `version`, if cairn knows it.
    pub fn of_version(version: u32) -> Option<ChainForm> {
        match version {
            1 => Some(ChainForm::Prefixed),
            2 => Some(ChainForm::Keyed),
            _ => None,
        }
    }

    /// The chain value after a record, from the one before it.
    pub fn next(self, prev: ChainHash, lsn: Lsn, kind: u8, flags: u8, stored: &[u8]) -> ChainHash {
        let mut fields = [0u8; 10];
        fields[..8].copy_from_slice(&lsn.0.to_le_bytes());
        fields[8] = kind;
        fields[9] = flags;
        if self == ChainForm::Keyed {
            // One blake3 chunk: hashed at once, without the incremental
            // hasher's tree state (~4% of a `never` append), from a copy
            // on the stack no larger than it needs (zeroing 1 KiB for a
            // 200-byte record was itself 1%).
            let n = fields.len() + stored.len();
            if n <= CHAIN_SMALL_BYTES {
                return keyed_from_stack::<CHAIN_SMALL_BYTES>(prev, &fields, stored);
            }
            if n <= CHAIN_INLINE_BYTES {
                return keyed_from_stack::<CHAIN_INLINE_BYTES>(prev, &fields, stored);
            }
        }
        let mut h = match self {
            ChainForm::Prefixed => {
                let mut h = blake3::Hasher::new();
                h.update(&prev.0);
                h
            }
            ChainForm::Keyed => blake3::Hasher::new_keyed(&prev.0),
        };
        h.update(&fields);
        h.update(stored);
        ChainHash(*h.finalize().as_bytes())
    }
}

/// The longest chain input (LSN, kind, flags and stored body) that
/// [`ChainForm::next`] hashes in one call from a copy on the stack: one
/// blake3 chunk.
const CHAIN_INLINE_BYTES: usize = 1024;

/// The smaller stack copy, for a typical record (a tool call, a short
/// prompt).
const CHAIN_SMALL_BYTES: usize = 256;

/// The format-2 chain value over `fields || stored`, which fit in `N`
/// bytes, hashed from one copy on the stack.
fn keyed_from_stack<const N: usize>(prev: ChainHash, fields: &[u8], stored: &[u8]) -> ChainHash {
    let mut input = [0u8; N];
    let n = fields.len() + stored.len();
    input[..fields.len()].copy_from_slice(fields);
    input[fields.len()..n].copy_from_slice(stored);
    ChainHash(*blake3::keyed_hash(&prev.0, &input[..n]).as_bytes())
}

fn crc_of(header: &[u8], stored: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new_with_initial(CRC_SEED);
    c.update(&header[0..4]);
    c.update(&header[8..HEADER_LEN]);
    c.update(stored);
    c.finalize()
}

/// Appends one frame for `body` to `out`, compressing it when that helps.
/// `flags` may carry [`FLAG_BATCH_CONT`]; compression is decided here.
/// Returns the new chain value, chained by [`ChainForm::CURRENT`].
pub fn encode(
    out: &mut Vec<u8>,
    lsn: Lsn,
    kind: RecordKind,
    flags: u8,
    body: &[u8],
    prev_chain: ChainHash,
) -> Result<ChainHash, CodecError> {
    encode_with(out, lsn, kind, flags, body, prev_chain, None)
}

/// [`encode`], compressing with `dict` (and flagging [`FLAG_DICT`]) when
/// one is given and compression helps.
pub fn encode_with(
    out: &mut Vec<u8>,
    lsn: Lsn,
    kind: RecordKind,
    flags: u8,
    body: &[u8],
    prev_chain: ChainHash,
    dict: Option<&Dict>,
) -> Result<ChainHash, CodecError> {
    let start = out.len();
    let (stored, flags) = stored_body(body, flags, dict)?;
    put_frame(out, kind, flags, &stored);
    Ok(place(
        &mut out[start..],
        lsn,
        prev_chain,
        ChainForm::CURRENT,
    ))
}

/// Fills in the LSN, the chain value (in `form`, from `prev`) and the CRC
/// of the frame `f`, whose other header fields and body are in place (by
/// [`encode_unplaced`] or [`prepare_header`]): what a log writer does
/// under its lock once the record's position is known, so the costly part
/// of encoding (MessagePack, zstd) runs outside it. Returns the chain
/// value. The result is byte for byte what [`encode_with`] makes, which
/// places its frames the same way.
pub fn place(f: &mut [u8], lsn: Lsn, prev: ChainHash, form: ChainForm) -> ChainHash {
    f[12..20].copy_from_slice(&lsn.0.to_le_bytes());
    let chain = form.next(prev, lsn, f[8], f[9], &f[HEADER_LEN..]);
    f[20..HEADER_LEN].copy_from_slice(&chain.0);
    let crc = crc_of(&f[..HEADER_LEN], &f[HEADER_LEN..]);
    f[4..8].copy_from_slice(&crc.to_le_bytes());
    chain
}

/// The writer's half of a pair assertion (the reader's half is
/// [`decode`]): the frame `f`, just placed as record `lsn`, holds what a
/// reader will check, so a bug in the writer stops the process before
/// its bytes reach the disk, not at the next read. Cheap checks always
/// (the length field, the LSN, reserved bits); the checksum and the whole
/// decode in debug builds, where the cost of a second CRC pass is no
/// concern.
///
/// # Panics
///
/// When the frame is not what [`decode`] accepts as record `lsn`: a
/// writer bug, never bad input.
pub fn assert_placed(f: &[u8], lsn: Lsn) {
    assert!(
        f.len() >= HEADER_LEN,
        "frame of {} bytes has no header",
        f.len()
    );
    let len = u32::from_le_bytes([f[0], f[1], f[2], f[3]]) as usize;
    assert_eq!(
        len,
        f.len() - HEADER_LEN,
        "frame length field disagrees with its bytes"
    );
    assert!(
        len <= MAX_STORED_BODY_BYTES,
        "frame body of {len} bytes is over the limit"
    );
    assert_eq!(
        &f[12..20],
        &lsn.0.to_le_bytes(),
        "frame placed at another LSN"
    );
    assert_eq!([f[10], f[11]], [0, 0], "frame reserved bytes set");
    debug_assert!(
        decode(f).is_ok_and(|fr| fr.lsn == lsn && fr.len() == f.len()),
        "a placed frame does not decode as record {lsn}"
    );
}

/// Appends a frame for `body` to `out` as [`encode_with`] does, but with
/// its LSN, chain value and CRC left zero, for a writer that fills them in
/// with [`place`] once the record's position is known: the costly part of
/// encoding (zstd) then runs outside the writer's lock, and no chain value
/// is computed that would be thrown away.
pub fn encode_unplaced(
    out: &mut Vec<u8>,
    kind: RecordKind,
    flags: u8,
    body: &[u8],
    dict: Option<&Dict>,
) -> Result<(), CodecError> {
    let (stored, flags) = stored_body(body, flags, dict)?;
    put_frame(out, kind, flags, &stored);
    Ok(())
}

/// The body as a frame stores it, and the frame's flags: zstd-compressed
/// (with `dict` when given) when that saves at least 16 bytes.
fn stored_body<'a>(
    body: &'a [u8],
    flags: u8,
    dict: Option<&Dict>,
) -> Result<(Cow<'a, [u8]>, u8), CodecError> {
    if body.len() > crate::event::MAX_EVENT_BODY_BYTES {
        return Err(CodecError::TooLarge {
            what: "record body",
            len: body.len() as u64,
            max: crate::event::MAX_EVENT_BODY_BYTES as u64,
        });
    }
    let mut flags = flags & FLAG_BATCH_CONT;
    if body.len() >= compress_min_bytes(dict.is_some()) {
        let compressed = zdict::compress(BODY_ZSTD_LEVEL, body, dict)?;
        if compressed.len() + 16 < body.len() {
            flags |= FLAG_COMPRESSED;
            if dict.is_some() {
                flags |= FLAG_DICT;
            }
            return Ok((Cow::Owned(compressed), flags));
        }
    }
    Ok((Cow::Borrowed(body), flags))
}

/// Appends a frame header with its LSN, chain and CRC zero, then `stored`.
fn put_frame(out: &mut Vec<u8>, kind: RecordKind, flags: u8, stored: &[u8]) {
    out.reserve(HEADER_LEN + stored.len());
    out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(kind as u8);
    out.push(flags);
    out.extend_from_slice(&[0; 2 + 8 + 32]);
    out.extend_from_slice(stored);
}

/// Fills the position-independent header fields (length, kind, flags) of
/// a frame whose body is already in place at `f[HEADER_LEN..]`, stored as
/// is (uncompressed). The LSN, chain and CRC are left for the log writer to
/// fill once the record's position is known. The caller keeps the body
/// within [`MAX_STORED_BODY_BYTES`] (an encoded event body always is).
pub fn prepare_header(f: &mut [u8], kind: RecordKind, flags: u8) {
    let len = (f.len() - HEADER_LEN) as u32;
    f[0..4].copy_from_slice(&len.to_le_bytes());
    f[8] = kind as u8;
    f[9] = flags & FLAG_BATCH_CONT;
    f[10..12].fill(0);
}

/// Decodes the frame at the start of `buf`.
///
/// [`CodecError::Truncated`] means `buf` ends inside the frame (a torn tail
/// if this is the end of the last segment); any other error is damage.
pub fn decode(buf: &[u8]) -> Result<Frame<'_>, CodecError> {
    if buf.len() < HEADER_LEN {
        return Err(CodecError::Truncated {
            need: HEADER_LEN,
            have: buf.len(),
        });
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_STORED_BODY_BYTES {
        return Err(CodecError::TooLarge {
            what: "record frame",
            len: len as u64,
            max: MAX_STORED_BODY_BYTES as u64,
        });
    }
    let total = HEADER_LEN + len;
    if buf.len() < total {
        return Err(CodecError::Truncated {
            need: total,
            have: buf.len(),
        });
    }
    let stored = &buf[HEADER_LEN..total];
    let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let computed = crc_of(&buf[..HEADER_LEN], stored);
    if crc != computed {
        return Err(CodecError::BadChecksum {
            what: "record frame",
            stored: crc,
            computed,
        });
    }
    let kind = RecordKind::from_u8(buf[8]).ok_or_else(|| CodecError::Invalid {
        what: format!("unknown record kind {}", buf[8]),
    })?;
    let flags = buf[9];
    if flags & !KNOWN_FLAGS != 0
        || buf[10] != 0
        || buf[11] != 0
        || (flags & FLAG_DICT != 0 && flags & FLAG_COMPRESSED == 0)
    {
        return Err(CodecError::Invalid {
            what: format!("unknown frame flags {flags:#04x} or reserved bits set"),
        });
    }
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&buf[12..20]);
    let mut chain = [0u8; 32];
    chain.copy_from_slice(&buf[20..52]);
    Ok(Frame {
        lsn: Lsn(u64::from_le_bytes(lsn)),
        kind,
        flags,
        chain: ChainHash(chain),
        stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Event, EventKind};
    use proptest::prelude::*;

    fn placed(lsn: u64) -> Vec<u8> {
        let mut f = Vec::new();
        encode_unplaced(&mut f, RecordKind::Event, 0, b"a body", None).unwrap();
        place(&mut f, Lsn(lsn), ChainHash::ZERO, ChainForm::CURRENT);
        f
    }

    #[test]
    fn a_placed_frame_passes_the_writers_assertion() {
        assert_placed(&placed(7), Lsn(7));
    }

    #[test]
    #[should_panic(expected = "length field")]
    fn a_frame_whose_length_field_lies_stops_the_writer() {
        let mut f = placed(7);
        f[0] ^= 1;
        assert_placed(&f, Lsn(7));
    }

    #[test]
    #[should_panic(expected = "another LSN")]
    fn a_frame_placed_at_another_lsn_stops_the_writer() {
        assert_placed(&placed(7), Lsn(8));
    }

    #[test]
    fn placing_an_unplaced_or_prepared_frame_matches_encode() {
        for (body, flags) in [
            (b"hello".to_vec(), 0),
            ("abc".repeat(1000).into_bytes(), FLAG_BATCH_CONT),
            (Vec::new(), 0),
        ] {
            let prev = ChainHash([9; 32]);
            let mut expected = Vec::new();
            let chain = encode(
                &mut expected,
                Lsn(42),
                RecordKind::Event,
                flags,
                &body,
                prev,
            )
            .unwrap();
            // The writer's path for a body that may be compressed: framed
            // unplaced, then finished under the lock.
            let mut pre = Vec::new();
            encode_unplaced(&mut pre, RecordKind::Event, flags, &body, None).unwrap();
            assert_eq!(place(&mut pre, Lsn(42), prev, ChainForm::CURRENT), chain);
            assert_eq!(pre, expected);
            if body.len() < COMPRESS_MIN_BYTES {
                // The writer's fast path: header prepared around a body
                // encoded in place, then finished under the lock.
                let mut fast = vec![0xEE; HEADER_LEN];
                fast.extend_from_slice(&body);
                prepare_header(&mut fast, RecordKind::Event, flags);
                assert_eq!(place(&mut fast, Lsn(42), prev, ChainForm::CURRENT), chain);
                assert_eq!(fast, expected);
            }
        }
    }

    #[test]
    fn each_chain_form_binds_every_input_and_the_forms_differ() {
        let (prev, lsn, stored) = (ChainHash([3; 32]), Lsn(77), &b"a stored body"[..]);
        for form in [ChainForm::Prefixed, ChainForm::Keyed] {
            let c = form.next(prev, lsn, 1, 0, stored);
            assert_ne!(form.next(ChainHash([4; 32]), lsn, 1, 0, stored), c);
            assert_ne!(form.next(prev, Lsn(78), 1, 0, stored), c);
            assert_ne!(form.next(prev, lsn, 2, 0, stored), c);
            assert_ne!(form.next(prev, lsn, 1, FLAG_BATCH_CONT, stored), c);
            assert_ne!(form.next(prev, lsn, 1, 0, b"a stored bodY"), c);
            assert_eq!(ChainForm::of_version(form.version()), Some(form));
        }
        assert_ne!(
            ChainForm::Prefixed.next(prev, lsn, 1, 0, stored),
            ChainForm::Keyed.next(prev, lsn, 1, 0, stored)
        );
        // Format 1 is exactly what segments written before format 2 hold.
        let mut v1 = blake3::Hasher::new();
        v1.update(&prev.0);
        v1.update(&lsn.0.to_le_bytes());
        v1.update(&[1, 0]);
        v1.update(stored);
        assert_eq!(
            ChainForm::Prefixed.next(prev, lsn, 1, 0, stored).0,
            *v1.finalize().as_bytes()
        );
        // Format 2 by its definition, at every length around the one-chunk
        // input hashed from a stack copy and past it.
        let long: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
        let (small, inline) = (CHAIN_SMALL_BYTES - 10, CHAIN_INLINE_BYTES - 10);
        for len in [
            0,
            1,
            13,
            54,
            55,
            118,
            119,
            small - 1,
            small,
            small + 1,
            inline - 1,
            inline,
            inline + 1,
            2048,
            3000,
        ] {
            let stored = &long[..len];
            let mut v2 = blake3::Hasher::new_keyed(&prev.0);
            v2.update(&lsn.0.to_le_bytes());
            v2.update(&[1, 0]);
            v2.update(stored);
            assert_eq!(
                ChainForm::Keyed.next(prev, lsn, 1, 0, stored).0,
                *v2.finalize().as_bytes(),
                "{len} bytes"
            );
        }
        // And as segments written in format 2 hold it.
        assert_eq!(
            ChainForm::Keyed.next(prev, lsn, 1, 0, stored).to_string(),
            "0f6bbbcb818403f5ef7183eceb2dd585725f4b75951f0e7388eb73e40b9d00bf"
        );
        assert_eq!(ChainForm::of_version(3), None);
    }

    fn one(body: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode(
            &mut buf,
            Lsn(7),
            RecordKind::Event,
            0,
            body,
            ChainHash::ZERO,
        )
        .unwrap();
        buf
    }

    #[test]
    fn round_trip_small_and_compressed() {
        for body in [
            b"".to_vec(),
            b"hello".to_vec(),
            "abc".repeat(1000).into_bytes(),
        ] {
            let buf = one(&body);
            let f = decode(&buf).unwrap();
            assert_eq!(f.lsn, Lsn(7));
            assert_eq!(f.len(), buf.len());
            assert_eq!(&*f.body().unwrap(), &body[..]);
            assert!(f.chain_follows(ChainHash::ZERO, ChainForm::CURRENT));
            assert!(!f.chain_follows(f.chain, ChainForm::CURRENT));
        }
        assert!(
            one(&"abc".repeat(1000).into_bytes()).len() < 500,
            "repetitive body compressed"
        );
    }

    #[test]
    fn zero_filled_region_never_validates() {
        let zeros = vec![0u8; 200];
        assert!(matches!(
            decode(&zeros),
            Err(CodecError::BadChecksum { .. })
        ));
    }

    #[test]
    fn every_truncation_is_truncated() {
        let buf = one(b"some body bytes");
        for cut in 0..buf.len() {
            assert!(
                matches!(decode(&buf[..cut]), Err(CodecError::Truncated { .. })),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let e = Event::new(EventKind::ToolCall, "s").with_path("src/main.rs");
        let buf = one(&e.encode_body().unwrap());
        for i in 0..buf.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = buf.clone();
                bad[i] ^= bit;
                if let Ok(f) = decode(&bad) {
                    panic!("flip at {i} validated as lsn {}", f.lsn);
                }
            }
        }
    }

    #[test]
    fn huge_length_refused_before_allocation() {
        let mut buf = one(b"x");
        buf[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&buf), Err(CodecError::TooLarge { .. })));
    }

    #[test]
    fn decompression_bomb_refused() {
        let bomb = zstd::bulk::compress(&vec![0u8; 1 << 20], 3).unwrap();
        assert!(matches!(
            decompress_bounded(&bomb, 1024),
            Err(CodecError::TooLarge { .. })
        ));
        // A frame whose header does not claim a size still cannot exceed the bound.
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        enc.include_contentsize(false).unwrap();
        std::io::Write::write_all(&mut enc, &vec![0u8; 1 << 20]).unwrap();
        let unsized_bomb = enc.finish().unwrap();
        assert!(decompress_bounded(&unsized_bomb, 1024).is_err());
    }

    #[test]
    fn output_is_exactly_what_the_frame_claims() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let z = zdict::compress(BODY_ZSTD_LEVEL, &data, None).unwrap();
        // Decompressed into the claimed size, whatever the bound above it.
        assert_eq!(decompress_bounded(&z, 1 << 20).unwrap(), data);
        assert_eq!(decompress_bounded(&z, data.len()).unwrap(), data);
        assert!(decompress_bounded(&z, data.len() - 1).is_err());
        // A body is one zstd frame: output past what its header claims (a
        // second frame behind it) is refused, not returned.
        let two = [z.clone(), z.clone()].concat();
        assert!(decompress_bounded(&two, 1 << 20).is_err());
        // Each thread's compressor and decompressor give the same results.
        let again = std::thread::spawn(move || {
            let z2 = zdict::compress(BODY_ZSTD_LEVEL, &data, None).unwrap();
            (decompress_bounded(&z2, 1 << 20).unwrap() == data, z2)
        })
        .join()
        .unwrap();
        assert!(again.0);
        assert_eq!(again.1, z);
    }

    /// A dictionary trained on event bodies like [`dict_event`]'s.
    fn event_dict() -> std::sync::Arc<Dict> {
        let (mut data, mut sizes) = (Vec::new(), Vec::new());
        for i in 0..300u64 {
            let b = dict_event(i).encode_body().unwrap();
            sizes.push(b.len());
            data.extend_from_slice(&b);
        }
        std::sync::Arc::new(zdict::train(&data, &sizes, 8 * 1024).unwrap())
    }

    fn dict_event(i: u64) -> Event {
        Event::new(EventKind::ToolCall, "s1").with_text(format!(
            "ran cargo test -p crate{} --release -- --nocapture: {} tests passed, \
             0 failed, {} ignored; see src/module_{}.rs and the notes in docs/CHANGES.md \
             before the next release of the parser crate and all of its tests",
            i % 7,
            i * 3,
            i % 5,
            i % 11
        ))
    }

    #[test]
    fn dictionary_bodies_round_trip_and_name_a_missing_dictionary() {
        let d = event_dict();
        let body = dict_event(1_000).encode_body().unwrap();
        assert!(
            body.len() >= DICT_COMPRESS_MIN_BYTES && body.len() < COMPRESS_MIN_BYTES,
            "{}",
            body.len()
        );
        let mut buf = Vec::new();
        let chain = encode_with(
            &mut buf,
            Lsn(3),
            RecordKind::Event,
            FLAG_BATCH_CONT,
            &body,
            ChainHash::ZERO,
            Some(&d),
        )
        .unwrap();
        let f = decode(&buf).unwrap();
        assert_eq!(f.flags, FLAG_COMPRESSED | FLAG_DICT | FLAG_BATCH_CONT);
        assert!(
            f.stored.len() < body.len() / 2,
            "{} of {}",
            f.stored.len(),
            body.len()
        );
        assert!(f.chain_follows(ChainHash::ZERO, ChainForm::CURRENT) && f.chain == chain);
        let have = |id: u32| (id == d.id).then(|| d.clone());
        assert_eq!(&*f.body_with(&have).unwrap(), &body[..]);
        // Without its dictionary: an error naming the dictionary file.
        let err = f.body().unwrap_err();
        assert!(
            matches!(err, CodecError::MissingDictionary { id } if id == d.id),
            "{err}"
        );
        assert!(err.to_string().contains(&zdict::file_name(d.id)), "{err}");
        // Without a dictionary the same small body is stored as is.
        let plain = one(&body);
        assert_eq!(decode(&plain).unwrap().flags, 0);
    }

    /// `buf`'s first frame with its flags byte set to `flags` and its CRC
    /// made valid again.
    fn with_flags(mut buf: Vec<u8>, flags: u8) -> Vec<u8> {
        buf[9] = flags;
        let crc = crc_of(&buf[..HEADER_LEN], &buf[HEADER_LEN..]);
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    #[test]
    fn dictionary_flag_must_agree_with_the_body() {
        let d = event_dict();
        let have = |id: u32| (id == d.id).then(|| d.clone());
        // DICT without COMPRESSED is not a valid header.
        let plain = one(b"hello");
        assert!(decode(&with_flags(plain, FLAG_DICT)).is_err());
        // A dictionary frame not flagged DICT, or a plain zstd frame flagged
        // DICT: refused when the body is read, with any dictionary.
        let body = vec![b'a'; 4000];
        let mut with = Vec::new();
        encode_with(
            &mut with,
            Lsn(1),
            RecordKind::Event,
            0,
            &body,
            ChainHash::ZERO,
            Some(&d),
        )
        .unwrap();
        let unflagged = with_flags(with, FLAG_COMPRESSED);
        assert!(decode(&unflagged).unwrap().body_with(&have).is_err());
        let flagged = with_flags(one(&body), FLAG_COMPRESSED | FLAG_DICT);
        assert!(decode(&flagged).unwrap().body_with(&have).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(f) = decode(&bytes) {
                let _ = f.body();
            }
        }

        #[test]
        fn chained_frames_decode_in_sequence(bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..700), 1..8)) {
            let mut buf = Vec::new();
            let mut chain = ChainHash::ZERO;
            for (i, b) in bodies.iter().enumerate() {
                chain = encode(&mut buf, Lsn(i as u64 + 1), RecordKind::Event, 0, b, chain).unwrap();
            }
            let mut off = 0;
            let mut prev = ChainHash::ZERO;
            for (i, b) in bodies.iter().enumerate() {
                let f = decode(&buf[off..]).unwrap();
                prop_assert_eq!(f.lsn, Lsn(i as u64 + 1));
                prop_assert!(f.chain_follows(prev, ChainForm::CURRENT));
                prop_assert_eq!(&*f.body().unwrap(), &b[..]);
                prev = f.chain;
                off += f.len();
            }
            prop_assert_eq!(prev, chain);
            prop_assert_eq!(off, buf.len());
        }
    }
}
