//! Pack files: the on-disk home of blob contents.
//!
//! ```text
//! pack header (32 bytes)
//!  0  8  magic      "CAIRNPK1"
//!  8  4  pack id    u32 LE (the number in the file name)
//! 12  4  reserved   must be 0
//! 16  8  nonce      u64 LE, random per pack file, so an index can tell a
//!                   re-created pack with the same id from the one it covered
//! 24  4  reserved   must be 0
//! 28  4  crc        u32 LE, CRC32 seeded with CRC_SEED over bytes 0..28
//!
//! entry (56-byte header, then `stored_len` payload bytes), repeated
//!  0  4  magic      u32 LE 0x3145_4243 ("CBE1")
//!  4  4  crc        u32 LE, CRC32 seeded with CRC_SEED over bytes 0..4 and
//!                   8..56, then the payload
//!  8  4  stored_len u32 LE, payload bytes (at most MAX_ENTRY_RAW_BYTES)
//! 12  1  kind       1 blob, 2 chunk (a piece of a chunked blob), 3 chunk list
//! 13  1  flags      bit 0: payload is zstd (only for blob and chunk);
//!                   bit 1: that zstd frame needs the store dictionary its
//!                   frame header names (only with bit 0), see [`super::dict`]
//! 14  2  reserved   must be 0
//! 16  8  raw_len    u64 LE: uncompressed size of the contents (for a chunk
//!                   list: the size of the whole blob it describes)
//! 24 32  hash       blake3 of the uncompressed contents (the blob's name)
//! ```
//!
//! The seeded CRC means a zero-filled region never validates; the hash in
//! the header lets the index be rebuilt from the packs alone; an entry does
//! not depend on its position, so garbage collection copies entries byte
//! for byte.

use cairn_codec::bytes::{crc32_seeded_parts as crc_of, u32_le as u32_at, u64_le as u64_at};

use cairn_codec::{BlobHash, CodecError};

use super::options::MAX_ENTRY_RAW_BYTES;
use cairn_codec::zdict::{self, Dict, DictLookup};

/// Pack file magic, with the format version in its last byte.
pub const PACK_MAGIC: [u8; 8] = *b"CAIRNPK1";
/// Length of the pack header.
pub const PACK_HEADER_LEN: usize = 32;
/// Magic at the start of every entry; lets a scan find the next entry after
/// a damaged one.
pub const ENTRY_MAGIC: u32 = 0x3145_4243;
/// Length of an entry header.
pub const ENTRY_HEADER_LEN: usize = 56;
/// Entry flag: the payload is a zstd frame.
pub const FLAG_ZSTD: u8 = 1;
/// Entry flag (with [`FLAG_ZSTD`]): the frame was compressed with the
/// store dictionary whose id its frame header carries.
pub const FLAG_ZSTD_DICT: u8 = 2;

/// A pack file's number: `pack-00000042.pack` is `PackId(42)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PackId(pub u32);

impl PackId {
    /// The pack's file name.
    pub fn file_name(self) -> String {
        format!("pack-{:08}.pack", self.0)
    }
    /// Parses a pack file name; `None` for any other file.
    pub fn parse_file_name(name: &str) -> Option<PackId> {
        let digits = name.strip_prefix("pack-")?.strip_suffix(".pack")?;
        if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(PackId)
    }
}

impl std::fmt::Display for PackId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pack {}", self.0)
    }
}

/// The header at the start of every pack file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackHeader {
    /// The pack's number.
    pub id: PackId,
    /// Random per file.
    pub nonce: u64,
}

impl PackHeader {
    /// The 32 header bytes.
    pub fn encode(&self) -> [u8; PACK_HEADER_LEN] {
        let mut b = [0u8; PACK_HEADER_LEN];
        b[0..8].copy_from_slice(&PACK_MAGIC);
        b[8..12].copy_from_slice(&self.id.0.to_le_bytes());
        b[16..24].copy_from_slice(&self.nonce.to_le_bytes());
        let crc = crc_of(&[&b[0..28]]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a pack header.
    pub fn decode(b: &[u8]) -> Result<PackHeader, CodecError> {
        if b.len() < PACK_HEADER_LEN {
            return Err(CodecError::Truncated {
                need: PACK_HEADER_LEN,
                have: b.len(),
            });
        }
        if b[0..8] != PACK_MAGIC {
            return Err(CodecError::BadMagic {
                what: "pack header",
            });
        }
        let stored = u32_at(b, 28);
        let computed = crc_of(&[&b[0..28]]);
        if stored != computed {
            return Err(CodecError::BadChecksum {
                what: "pack header",
                stored,
                computed,
            });
        }
        if u32_at(b, 12) != 0 || u32_at(b, 24) != 0 {
            return Err(CodecError::Invalid {
                what: "pack header reserved bytes are not zero".into(),
            });
        }
        Ok(PackHeader {
            id: PackId(u32_at(b, 8)),
            nonce: u64_at(b, 16),
        })
    }
}

/// What a pack entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EntryKind {
    /// A whole blob.
    Blob = 1,
    /// One chunk of a chunked blob (not a top-level blob by itself).
    Chunk = 2,
    /// A chunked blob: the list of its chunks (see the chunking module).
    ChunkList = 3,
}

impl EntryKind {
    /// Decodes the kind byte.
    pub fn from_u8(b: u8) -> Option<EntryKind> {
        match b {
            1 => Some(EntryKind::Blob),
            2 => Some(EntryKind::Chunk),
            3 => Some(EntryKind::ChunkList),
            _ => None,
        }
    }
    /// True for the blobs callers put (whole blobs and chunk lists).
    pub fn is_top_level(self) -> bool {
        !matches!(self, EntryKind::Chunk)
    }
}

/// A decoded entry header (its CRC is checked separately, with the payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    /// The CRC stored in the header.
    pub crc: u32,
    /// Payload bytes following the header.
    pub stored_len: u32,
    /// What the entry holds.
    pub kind: EntryKind,
    /// [`FLAG_ZSTD`] or 0.
    pub flags: u8,
    /// Uncompressed size of the contents.
    pub raw_len: u64,
    /// The blob's name.
    pub hash: BlobHash,
}

impl EntryHeader {
    /// Header plus payload length.
    pub fn entry_len(&self) -> u64 {
        ENTRY_HEADER_LEN as u64 + u64::from(self.stored_len)
    }

    /// Decodes an entry header and checks every field except the CRC: the
    /// magic, the kind, the flags, the reserved bytes, and the lengths
    /// against [`MAX_ENTRY_RAW_BYTES`], so a damaged length can never drive
    /// an allocation.
    pub fn decode(b: &[u8]) -> Result<EntryHeader, CodecError> {
        if b.len() < ENTRY_HEADER_LEN {
            return Err(CodecError::Truncated {
                need: ENTRY_HEADER_LEN,
                have: b.len(),
            });
        }
        if u32_at(b, 0) != ENTRY_MAGIC {
            return Err(CodecError::BadMagic { what: "blob entry" });
        }
        let stored_len = u32_at(b, 8);
        let kind = EntryKind::from_u8(b[12]).ok_or_else(|| CodecError::Invalid {
            what: format!("blob entry kind {} is unknown", b[12]),
        })?;
        let flags = b[13];
        if flags & !(FLAG_ZSTD | FLAG_ZSTD_DICT) != 0
            || (flags & FLAG_ZSTD_DICT != 0 && flags & FLAG_ZSTD == 0)
            || (kind == EntryKind::ChunkList && flags != 0)
        {
            return Err(CodecError::Invalid {
                what: format!("blob entry flags {flags:#x} are not valid for {kind:?}"),
            });
        }
        if b[14] != 0 || b[15] != 0 {
            return Err(CodecError::Invalid {
                what: "blob entry reserved bytes are not zero".into(),
            });
        }
        let raw_len = u64_at(b, 16);
        if u64::from(stored_len) > MAX_ENTRY_RAW_BYTES {
            return Err(CodecError::TooLarge {
                what: "blob entry stored length",
                len: stored_len.into(),
                max: MAX_ENTRY_RAW_BYTES,
            });
        }
        if kind != EntryKind::ChunkList {
            if raw_len > MAX_ENTRY_RAW_BYTES {
                return Err(CodecError::TooLarge {
                    what: "blob entry raw length",
                    len: raw_len,
                    max: MAX_ENTRY_RAW_BYTES,
                });
            }
            if flags & FLAG_ZSTD == 0 && raw_len != u64::from(stored_len) {
                return Err(CodecError::Invalid {
                    what: format!(
                        "uncompressed blob entry has raw length {raw_len} but stores {stored_len} bytes"
                    ),
                });
            }
        }
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&b[24..56]);
        Ok(EntryHeader {
            crc: u32_at(b, 4),
            stored_len,
            kind,
            flags,
            raw_len,
            hash: BlobHash(hash),
        })
    }

    /// Checks the CRC of a whole entry (`entry` = header bytes + payload).
    pub fn check_crc(&self, entry: &[u8]) -> Result<(), CodecError> {
        let n = ENTRY_HEADER_LEN + self.stored_len as usize;
        if entry.len() < n {
            return Err(CodecError::Truncated {
                need: n,
                have: entry.len(),
            });
        }
        let computed = crc_of(&[&entry[0..4], &entry[8..n]]);
        if computed != self.crc {
            return Err(CodecError::BadChecksum {
                what: "blob entry",
                stored: self.crc,
                computed,
            });
        }
        Ok(())
    }
}

/// Appends one entry (header + payload) to `out`.
///
/// The caller guarantees `payload.len() <= MAX_ENTRY_RAW_BYTES` (it is a
/// chunk, a blob under the chunking threshold, or a chunk list).
pub fn encode_entry(
    out: &mut Vec<u8>,
    kind: EntryKind,
    flags: u8,
    raw_len: u64,
    hash: &BlobHash,
    payload: &[u8],
) {
    // What a reader checks, asserted before the bytes go to disk (a
    // length past the limit would be stored, then refused by every read).
    assert!(
        payload.len() as u64 <= MAX_ENTRY_RAW_BYTES
            && (kind == EntryKind::ChunkList || raw_len <= MAX_ENTRY_RAW_BYTES),
        "blob entry of {} stored, {raw_len} raw bytes is over the entry limit",
        payload.len()
    );
    // Where the entry starts, for the debug build's read-back check.
    #[cfg(debug_assertions)]
    let start = out.len();
    write_entry(out, kind, flags, raw_len, hash, payload);
    #[cfg(debug_assertions)]
    {
        let written = &out[start..];
        let check = EntryHeader::decode(written).and_then(|e| e.check_crc(written).map(|()| e));
        assert!(
            check
                .as_ref()
                .is_ok_and(|e| e.entry_len() == written.len() as u64),
            "an encoded blob entry does not decode as written: {check:?}"
        );
    }
}

/// The bytes of an entry, unchecked: [`encode_entry`]'s, and the damaged
/// entries tests build for readers to refuse.
fn write_entry(
    out: &mut Vec<u8>,
    kind: EntryKind,
    flags: u8,
    raw_len: u64,
    hash: &BlobHash,
    payload: &[u8],
) {
    let mut h = [0u8; ENTRY_HEADER_LEN];
    h[0..4].copy_from_slice(&ENTRY_MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[12] = kind as u8;
    h[13] = flags;
    h[16..24].copy_from_slice(&raw_len.to_le_bytes());
    h[24..56].copy_from_slice(&hash.0);
    let crc = crc_of(&[&h[0..4], &h[8..], payload]);
    h[4..8].copy_from_slice(&crc.to_le_bytes());
    out.reserve(ENTRY_HEADER_LEN + payload.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

/// Encodes a blob or chunk entry: zstd at `level` (with `dict` if given)
/// when that makes the payload smaller, raw otherwise. Returns the whole
/// entry.
pub fn encode_contents(
    kind: EntryKind,
    level: i32,
    hash: &BlobHash,
    raw: &[u8],
    dict: Option<&Dict>,
) -> Vec<u8> {
    let compressed = if raw.len() >= super::options::COMPRESS_MIN_BYTES {
        zdict::compress(level, raw, dict).ok()
    } else {
        None
    };
    let flags = if dict.is_some() {
        FLAG_ZSTD | FLAG_ZSTD_DICT
    } else {
        FLAG_ZSTD
    };
    let mut out = Vec::new();
    match compressed {
        Some(z) if z.len() < raw.len() => {
            encode_entry(&mut out, kind, flags, raw.len() as u64, hash, &z)
        }
        _ => encode_entry(&mut out, kind, 0, raw.len() as u64, hash, raw),
    }
    out
}

/// The contents of a blob or chunk entry: the payload, decompressed if it
/// is zstd. The output is bounded by the recorded raw length: a frame that
/// claims more, or decompresses to more or less, is refused before the
/// memory is allocated.
///
/// `dicts` finds a store dictionary by id, for an entry that needs one.
pub fn decode_contents(
    h: &EntryHeader,
    payload: &[u8],
    dicts: DictLookup<'_>,
) -> Result<Vec<u8>, CodecError> {
    if h.flags & FLAG_ZSTD == 0 {
        return Ok(payload.to_vec());
    }
    // Checked by EntryHeader::decode; repeated because this bound is what
    // keeps a damaged entry from driving a huge allocation.
    if h.raw_len > MAX_ENTRY_RAW_BYTES {
        return Err(CodecError::TooLarge {
            what: "blob entry raw length",
            len: h.raw_len,
            max: MAX_ENTRY_RAW_BYTES,
        });
    }
    let max = h.raw_len as usize;
    match zstd::zstd_safe::get_frame_content_size(payload) {
        Ok(Some(claimed)) if claimed > h.raw_len => {
            return Err(CodecError::TooLarge {
                what: "decompressed blob",
                len: claimed,
                max: h.raw_len,
            })
        }
        Ok(_) => {}
        Err(_) => {
            return Err(CodecError::Invalid {
                what: "blob payload is not a zstd frame".into(),
            })
        }
    }
    let dict = zdict::frame_dict(payload, h.flags & FLAG_ZSTD_DICT != 0, "blob entry", dicts)?;
    let out =
        zdict::decompress(payload, max, dict.as_deref()).map_err(|e| CodecError::Invalid {
            what: format!("blob payload does not decompress within {max} bytes: {e}"),
        })?;
    if out.len() != max {
        return Err(CodecError::Invalid {
            what: format!(
                "blob payload decompresses to {} bytes, the entry records {max}",
                out.len()
            ),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    fn entry(kind: EntryKind, raw: &[u8]) -> Vec<u8> {
        encode_contents(kind, 3, &BlobHash::of(raw), raw, None)
    }

    /// A small dictionary trained on source-like text, and a text like it.
    fn dict_and_text() -> (Arc<Dict>, Vec<u8>) {
        (
            Arc::new(super::super::dict::test_dict()),
            super::super::dict::test_text(3000, 1),
        )
    }

    #[test]
    fn dictionary_entries_round_trip_and_need_their_dictionary() {
        let (d, raw) = dict_and_text();
        let hash = BlobHash::of(&raw);
        let e = encode_contents(EntryKind::Blob, 3, &hash, &raw, Some(&d));
        let h = EntryHeader::decode(&e).unwrap();
        assert_eq!(h.flags, FLAG_ZSTD | FLAG_ZSTD_DICT);
        let plain = encode_contents(EntryKind::Blob, 3, &hash, &raw, None);
        assert!(
            e.len() < plain.len(),
            "the dictionary helps: {} vs {}",
            e.len(),
            plain.len()
        );
        let found = |id: u32| (id == d.id).then(|| d.clone());
        assert_eq!(
            decode_contents(&h, &e[ENTRY_HEADER_LEN..], &found).unwrap(),
            raw
        );
        // Without the dictionary: an error naming it, never wrong bytes.
        let err = decode_contents(&h, &e[ENTRY_HEADER_LEN..], &|_| None).unwrap_err();
        assert!(
            err.to_string()
                .contains(&super::super::dict::file_name(d.id)),
            "{err}"
        );
        // The flag without its frame, or the frame without its flag, is refused.
        let ph = EntryHeader::decode(&plain).unwrap();
        let flagged = EntryHeader {
            flags: FLAG_ZSTD | FLAG_ZSTD_DICT,
            ..ph
        };
        assert!(decode_contents(&flagged, &plain[ENTRY_HEADER_LEN..], &found).is_err());
        let unflagged = EntryHeader {
            flags: FLAG_ZSTD,
            ..h
        };
        assert!(decode_contents(&unflagged, &e[ENTRY_HEADER_LEN..], &found).is_err());
        // The dictionary flag alone, or on a chunk list, is not a valid header.
        for (kind, flags) in [
            (EntryKind::Blob, FLAG_ZSTD_DICT),
            (EntryKind::ChunkList, FLAG_ZSTD | FLAG_ZSTD_DICT),
            (EntryKind::Blob, 4),
        ] {
            let mut bad = Vec::new();
            write_entry(
                &mut bad,
                kind,
                flags,
                raw.len() as u64,
                &hash,
                &e[ENTRY_HEADER_LEN..],
            );
            assert!(EntryHeader::decode(&bad).is_err(), "{kind:?} {flags:#x}");
        }
    }

    #[test]
    fn pack_header_round_trips_and_rejects_damage() {
        let h = PackHeader {
            id: PackId(7),
            nonce: 0xdead_beef_1234,
        };
        let b = h.encode();
        assert_eq!(PackHeader::decode(&b).unwrap(), h);
        for i in 0..PACK_HEADER_LEN {
            let mut d = b;
            d[i] ^= 0x10;
            assert!(PackHeader::decode(&d).is_err(), "flip at {i} accepted");
        }
        assert!(PackHeader::decode(&b[..10]).is_err());
        assert!(PackHeader::decode(&[0u8; PACK_HEADER_LEN]).is_err());
    }

    #[test]
    fn pack_file_names_round_trip() {
        assert_eq!(PackId(42).file_name(), "pack-00000042.pack");
        assert_eq!(
            PackId::parse_file_name("pack-00000042.pack"),
            Some(PackId(42))
        );
        assert_eq!(PackId::parse_file_name("pack-42.pack"), None);
        assert_eq!(PackId::parse_file_name("index"), None);
        assert_eq!(PackId::parse_file_name("pack-0000004x.pack"), None);
    }

    #[test]
    fn entries_round_trip_compressed_and_raw() {
        let text = b"fn main() { println!(\"hello\"); }\n".repeat(100);
        let mut noise = vec![0u8; 5000];
        let mut x = 1u64;
        for b in &mut noise {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (x >> 33) as u8;
        }
        for (raw, compressed) in [(&text[..], true), (&noise[..], false), (&b""[..], false)] {
            let e = entry(EntryKind::Blob, raw);
            let h = EntryHeader::decode(&e).unwrap();
            assert_eq!(h.flags & FLAG_ZSTD != 0, compressed);
            assert_eq!(h.raw_len, raw.len() as u64);
            assert_eq!(h.entry_len(), e.len() as u64);
            assert_eq!(h.hash, BlobHash::of(raw));
            h.check_crc(&e).unwrap();
            assert_eq!(
                decode_contents(&h, &e[ENTRY_HEADER_LEN..], &|_| None).unwrap(),
                raw
            );
        }
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let raw = b"let x = 1;\n".repeat(20);
        let e = entry(EntryKind::Chunk, &raw);
        for i in 0..e.len() {
            for bit in [0x01u8, 0x80] {
                let mut d = e.clone();
                d[i] ^= bit;
                let ok = EntryHeader::decode(&d).and_then(|h| {
                    h.check_crc(&d)?;
                    decode_contents(&h, &d[ENTRY_HEADER_LEN..], &|_| None)
                });
                if let Ok(bytes) = ok {
                    panic!(
                        "flip of bit {bit:#x} at byte {i} gave {} bytes",
                        bytes.len()
                    );
                }
            }
        }
    }

    /// The writer asserts what the reader checks: an entry claiming more
    /// raw bytes than any entry may hold is a bug caught before it is
    /// stored, not a pack every later read refuses.
    #[test]
    #[should_panic(expected = "over the entry limit")]
    fn encoding_an_entry_over_the_limit_panics_before_it_is_stored() {
        let mut e = Vec::new();
        encode_entry(
            &mut e,
            EntryKind::Blob,
            FLAG_ZSTD,
            MAX_ENTRY_RAW_BYTES + 1,
            &BlobHash::ZERO,
            b"x",
        );
    }

    #[test]
    fn zero_filled_entry_is_rejected() {
        assert!(EntryHeader::decode(&[0u8; ENTRY_HEADER_LEN + 10]).is_err());
    }

    #[test]
    fn huge_lengths_are_refused_before_allocation() {
        let mut e = Vec::new();
        write_entry(
            &mut e,
            EntryKind::Blob,
            FLAG_ZSTD,
            u64::MAX / 2,
            &BlobHash::ZERO,
            b"x",
        );
        assert!(matches!(
            EntryHeader::decode(&e),
            Err(CodecError::TooLarge { .. })
        ));
        let mut e = Vec::new();
        write_entry(&mut e, EntryKind::Blob, 0, 1, &BlobHash::ZERO, b"x");
        e[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            EntryHeader::decode(&e),
            Err(CodecError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_frame_claiming_more_than_the_raw_length_is_refused() {
        // A legitimate frame of 10,000 bytes, in an entry that records 100.
        let raw = vec![b'a'; 10_000];
        let z = zstd::bulk::compress(&raw, 3).unwrap();
        let mut e = Vec::new();
        write_entry(
            &mut e,
            EntryKind::Blob,
            FLAG_ZSTD,
            100,
            &BlobHash::of(&raw),
            &z,
        );
        let h = EntryHeader::decode(&e).unwrap();
        h.check_crc(&e).unwrap();
        let err = decode_contents(&h, &e[ENTRY_HEADER_LEN..], &|_| None).unwrap_err();
        assert!(matches!(err, CodecError::TooLarge { .. }), "{err:?}");
        // And one that records more than it holds.
        let mut e = Vec::new();
        write_entry(
            &mut e,
            EntryKind::Blob,
            FLAG_ZSTD,
            20_000,
            &BlobHash::of(&raw),
            &z,
        );
        let h = EntryHeader::decode(&e).unwrap();
        assert!(decode_contents(&h, &e[ENTRY_HEADER_LEN..], &|_| None).is_err());
    }

    #[test]
    fn chunk_list_entries_may_not_be_compressed() {
        let mut e = Vec::new();
        write_entry(
            &mut e,
            EntryKind::ChunkList,
            FLAG_ZSTD,
            5,
            &BlobHash::ZERO,
            b"",
        );
        assert!(EntryHeader::decode(&e).is_err());
    }
}
