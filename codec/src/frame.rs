//! The record frame: how one record sits in a log segment.
//!
//! ```text
//! offset size field
//!  0     4    body_len  u32 LE, bytes of the stored body that follows the header
//!  4     4    crc       u32 LE, CRC32 seeded with CRC_SEED over bytes 0..4 and 8..52, then the body
//!  8     1    kind      RecordKind (1 = event)
//!  9     1    flags     bit 0 COMPRESSED (body is zstd), bit 1 BATCH_CONT (more records of this batch follow)
//! 10     2    reserved  must be 0
//! 12     8    lsn       u64 LE
//! 20    32    chain     blake3(prev_chain || lsn || kind || flags || stored body)
//! 52     n    body      MessagePack (or zstd of it when COMPRESSED)
//! ```
//!
//! The CRC covers the length, kind, flags, LSN and chain as well as the body,
//! and starts from a non-zero seed, so a zero-filled region, a corrupted
//! length or a record copied from elsewhere never validates.

use std::borrow::Cow;

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
/// zstd level for record bodies: fast, and most of the gain on text.
pub const BODY_ZSTD_LEVEL: i32 = 3;

/// Flag: the body is zstd-compressed.
pub const FLAG_COMPRESSED: u8 = 1;
/// Flag: this record is part of an atomic batch and is not its last record.
/// After a crash, a batch whose last record is missing is discarded whole.
pub const FLAG_BATCH_CONT: u8 = 2;
const KNOWN_FLAGS: u8 = FLAG_COMPRESSED | FLAG_BATCH_CONT;

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
    pub fn body(&self) -> Result<Cow<'a, [u8]>, CodecError> {
        if self.flags & FLAG_COMPRESSED == 0 {
            return Ok(Cow::Borrowed(self.stored));
        }
        decompress_bounded(self.stored, crate::event::MAX_EVENT_BODY_BYTES).map(Cow::Owned)
    }

    /// Checks that this frame's chain value follows from `prev`.
    pub fn chain_follows(&self, prev: ChainHash) -> bool {
        chain_next(prev, self.lsn, self.kind as u8, self.flags, self.stored) == self.chain
    }
}

/// Decompresses a zstd frame, refusing output larger than `max` bytes
/// (a "decompression bomb") without allocating it.
pub fn decompress_bounded(stored: &[u8], max: usize) -> Result<Vec<u8>, CodecError> {
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
    let out = DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = zstd::bulk::Decompressor::new().ok();
        }
        match d.as_mut() {
            Some(d) => d.decompress(stored, capacity),
            None => Err(std::io::Error::other("cannot create a zstd decompressor")),
        }
    });
    out.map_err(|e| CodecError::Invalid {
        what: format!("zstd body does not decompress within {max} bytes: {e}"),
    })
}

thread_local! {
    /// A zstd compressor per thread at [`BODY_ZSTD_LEVEL`], made once:
    /// making a context per record was a fifth of the time of appending
    /// realistic agent events (prompts and replies of a few KB).
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// A zstd decompressor per thread, made once, for the same reason.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// `body` compressed with zstd at [`BODY_ZSTD_LEVEL`], by this thread's
/// compressor.
fn compress_body(body: &[u8]) -> Result<Vec<u8>, CodecError> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(
                zstd::bulk::Compressor::new(BODY_ZSTD_LEVEL)
                    .map_err(|e| CodecError::Body(e.to_string()))?,
            );
        }
        match c.as_mut() {
            Some(z) => z
                .compress(body)
                .map_err(|e| CodecError::Body(e.to_string())),
            None => Err(CodecError::Body("no zstd compressor".into())),
        }
    })
}

/// The next hash-chain value: blake3(prev || lsn || kind || flags || stored body).
pub fn chain_next(prev: ChainHash, lsn: Lsn, kind: u8, flags: u8, stored: &[u8]) -> ChainHash {
    let mut h = blake3::Hasher::new();
    h.update(&prev.0);
    h.update(&lsn.0.to_le_bytes());
    h.update(&[kind, flags]);
    h.update(stored);
    ChainHash(*h.finalize().as_bytes())
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
/// Returns the new chain value.
pub fn encode(
    out: &mut Vec<u8>,
    lsn: Lsn,
    kind: RecordKind,
    flags: u8,
    body: &[u8],
    prev_chain: ChainHash,
) -> Result<ChainHash, CodecError> {
    if body.len() > crate::event::MAX_EVENT_BODY_BYTES {
        return Err(CodecError::TooLarge {
            what: "record body",
            len: body.len() as u64,
            max: crate::event::MAX_EVENT_BODY_BYTES as u64,
        });
    }
    let mut flags = flags & FLAG_BATCH_CONT;
    let compressed;
    let stored: &[u8] = if body.len() >= COMPRESS_MIN_BYTES {
        compressed = compress_body(body)?;
        if compressed.len() + 16 < body.len() {
            flags |= FLAG_COMPRESSED;
            &compressed
        } else {
            body
        }
    } else {
        body
    };
    let chain = chain_next(prev_chain, lsn, kind as u8, flags, stored);
    let start = out.len();
    out.reserve(HEADER_LEN + stored.len());
    out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(kind as u8);
    out.push(flags);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&lsn.0.to_le_bytes());
    out.extend_from_slice(&chain.0);
    let crc = crc_of(&out[start..start + HEADER_LEN], stored);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(stored);
    Ok(chain)
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
    if flags & !KNOWN_FLAGS != 0 || buf[10] != 0 || buf[11] != 0 {
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
            assert!(f.chain_follows(ChainHash::ZERO));
            assert!(!f.chain_follows(f.chain));
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
        let z = compress_body(&data).unwrap();
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
            let z2 = compress_body(&data).unwrap();
            (decompress_bounded(&z2, 1 << 20).unwrap() == data, z2)
        })
        .join()
        .unwrap();
        assert!(again.0);
        assert_eq!(again.1, z);
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
                prop_assert!(f.chain_follows(prev));
                prop_assert_eq!(&*f.body().unwrap(), &b[..]);
                prev = f.chain;
                off += f.len();
            }
            prop_assert_eq!(prev, chain);
            prop_assert_eq!(off, buf.len());
        }
    }
}
