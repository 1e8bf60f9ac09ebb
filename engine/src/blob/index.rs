//! The persisted blob index: a snapshot of hash -> location, covering each
//! pack up to a recorded length. Entries past that length are recovered by
//! scanning the pack tails on open; a missing, stale or damaged snapshot is
//! rebuilt from the packs alone.
//!
//! ```text
//!  0  8  magic        "CAIRNBX1"
//!  8  4  pack count   u32 LE
//! 12  4  reserved     must be 0
//! 16  8  entry count  u64 LE
//! 24     pack table, pack count x 24 bytes:
//!          0 4 pack id u32, 4 4 reserved (0), 8 8 nonce u64, 16 8 covered length u64
//!  ..    entries, entry count x 64 bytes:
//!          0 32 hash, 32 4 pack id u32, 36 4 stored length u32, 40 8 offset u64,
//!         48 8 raw length u64, 56 1 kind, 57 1 flags, 58 6 reserved (0)
//!  ..   32  blake3 of every byte before it
//! ```
//!
//! The file is written under a temporary name of its own
//! (`index.PID-N.tmp`, see [`crate::dicts::unique_tmp_name`]), fsynced,
//! renamed over `index`, and the directory fsynced, so a crash leaves the
//! old snapshot or the new one (and a temporary file the next open for
//! writing removes). It is only written while the store lock is held.
//! A snapshot only ever covers pack bytes that were fsynced before it was
//! written, so everything it names is on disk.

use cairn_codec::bytes::{u32_le as u32_at, u64_le as u64_at};
use cairn_codec::{BlobHash, CodecError};

use super::pack::{EntryKind, PackId, ENTRY_HEADER_LEN, PACK_HEADER_LEN};

/// Index file magic, with the format version in its last byte.
pub const INDEX_MAGIC: [u8; 8] = *b"CAIRNBX1";
/// The index file's name in the blob directory.
pub const INDEX_FILE: &str = "index";
const HEADER_LEN: usize = 24;
const PACK_ROW_LEN: usize = 24;
const ENTRY_ROW_LEN: usize = 64;
const TRAILER_LEN: usize = 32;

/// Where one blob's entry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    /// The pack file.
    pub pack: PackId,
    /// Byte offset of the entry header in the pack.
    pub offset: u64,
    /// Payload bytes after the header.
    pub stored_len: u32,
    /// Uncompressed size of the contents (whole blob size for a chunk list).
    pub raw_len: u64,
    /// What the entry holds.
    pub kind: EntryKind,
    /// The entry's flags.
    pub flags: u8,
}

impl Loc {
    /// Header plus payload length.
    pub fn entry_len(&self) -> u64 {
        ENTRY_HEADER_LEN as u64 + u64::from(self.stored_len)
    }
}

/// One pack as the snapshot saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackCover {
    /// The pack.
    pub id: PackId,
    /// The nonce in its header.
    pub nonce: u64,
    /// Every entry before this offset is in the snapshot.
    pub covered_len: u64,
}

/// A decoded index file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IndexSnapshot {
    /// The packs covered.
    pub packs: Vec<PackCover>,
    /// Every indexed blob.
    pub entries: Vec<(BlobHash, Loc)>,
}

fn invalid(what: impl Into<String>) -> CodecError {
    CodecError::Invalid { what: what.into() }
}

/// Appends a pack's row, as every index file and delta frame holds it:
/// id, 4 zero bytes, nonce, covered length ([`PACK_ROW_LEN`] bytes).
pub(crate) fn encode_pack_row(out: &mut Vec<u8>, p: &PackCover) {
    out.extend_from_slice(&p.id.0.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&p.nonce.to_le_bytes());
    out.extend_from_slice(&p.covered_len.to_le_bytes());
}

/// Decodes `n` pack rows from `b[at..]` (the caller has checked the
/// length), refusing a malformed row or a pack listed twice.
pub(crate) fn decode_pack_rows(
    b: &[u8],
    at: usize,
    n: usize,
) -> Result<Vec<PackCover>, CodecError> {
    let mut packs: Vec<PackCover> = Vec::with_capacity(n);
    for i in 0..n {
        let at = at + i * PACK_ROW_LEN;
        let p = PackCover {
            id: PackId(u32_at(b, at)),
            nonce: u64_at(b, at + 8),
            covered_len: u64_at(b, at + 16),
        };
        if u32_at(b, at + 4) != 0 || p.covered_len < PACK_HEADER_LEN as u64 {
            return Err(invalid(format!("blob index row for {} is malformed", p.id)));
        }
        if packs.iter().any(|q| q.id == p.id) {
            return Err(invalid(format!("blob index lists {} twice", p.id)));
        }
        packs.push(p);
    }
    Ok(packs)
}

/// Appends an entry's row: hash, pack, stored length, offset, raw length,
/// kind, flags, 6 zero bytes ([`ENTRY_ROW_LEN`] bytes).
pub(crate) fn encode_entry_row(out: &mut Vec<u8>, h: &BlobHash, l: &Loc) {
    out.extend_from_slice(&h.0);
    out.extend_from_slice(&l.pack.0.to_le_bytes());
    out.extend_from_slice(&l.stored_len.to_le_bytes());
    out.extend_from_slice(&l.offset.to_le_bytes());
    out.extend_from_slice(&l.raw_len.to_le_bytes());
    out.push(l.kind as u8);
    out.push(l.flags);
    out.extend_from_slice(&[0u8; 6]);
}

/// Decodes one entry row (`r` is [`ENTRY_ROW_LEN`] bytes) and checks it: a
/// known kind, zero reserved bytes, a pack of `packs`, inside its covered
/// part.
pub(crate) fn decode_entry_row(
    r: &[u8],
    packs: &[PackCover],
) -> Result<(BlobHash, Loc), CodecError> {
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&r[0..32]);
    let kind = EntryKind::from_u8(r[56])
        .ok_or_else(|| invalid(format!("blob index entry kind {} is unknown", r[56])))?;
    let loc = Loc {
        pack: PackId(u32_at(r, 32)),
        stored_len: u32_at(r, 36),
        offset: u64_at(r, 40),
        raw_len: u64_at(r, 48),
        kind,
        flags: r[57],
    };
    let cover = packs
        .iter()
        .find(|p| p.id == loc.pack)
        .ok_or_else(|| invalid(format!("blob index entry names unlisted {}", loc.pack)))?;
    if loc.offset < PACK_HEADER_LEN as u64
        || loc.offset.saturating_add(loc.entry_len()) > cover.covered_len
        || r[58..64].iter().any(|&x| x != 0)
    {
        return Err(invalid(format!(
            "blob index entry at {} offset {} lies outside the covered part",
            loc.pack, loc.offset
        )));
    }
    Ok((BlobHash(hash), loc))
}

impl IndexSnapshot {
    /// The file bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            HEADER_LEN
                + self.packs.len() * PACK_ROW_LEN
                + self.entries.len() * ENTRY_ROW_LEN
                + TRAILER_LEN,
        );
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&(self.packs.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for p in &self.packs {
            encode_pack_row(&mut out, p);
        }
        for (h, l) in &self.entries {
            encode_entry_row(&mut out, h, l);
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    /// Decodes and checks an index file: the checksum, the counts against
    /// the file length (before anything is allocated), and that every entry
    /// lies inside the covered part of a pack the snapshot lists.
    pub fn decode(b: &[u8]) -> Result<IndexSnapshot, CodecError> {
        if b.len() < HEADER_LEN + TRAILER_LEN {
            return Err(CodecError::Truncated {
                need: HEADER_LEN + TRAILER_LEN,
                have: b.len(),
            });
        }
        if b[0..8] != INDEX_MAGIC {
            return Err(CodecError::BadMagic { what: "blob index" });
        }
        let body = &b[..b.len() - TRAILER_LEN];
        if blake3::hash(body).as_bytes()[..] != b[b.len() - TRAILER_LEN..] {
            return Err(invalid("blob index checksum does not match"));
        }
        let pack_count = u32_at(b, 8) as usize;
        let entry_count = u64_at(b, 16);
        if u32_at(b, 12) != 0 {
            return Err(invalid("blob index reserved bytes are not zero"));
        }
        let expected = (HEADER_LEN as u64)
            .checked_add(pack_count as u64 * PACK_ROW_LEN as u64)
            .and_then(|n| n.checked_add(entry_count.checked_mul(ENTRY_ROW_LEN as u64)?));
        if expected != Some(body.len() as u64) {
            return Err(invalid(format!(
                "blob index of {} bytes cannot hold {pack_count} packs and {entry_count} entries",
                b.len()
            )));
        }
        let packs = decode_pack_rows(b, HEADER_LEN, pack_count)?;
        let at = HEADER_LEN + pack_count * PACK_ROW_LEN;
        let entries = b[at..at + entry_count as usize * ENTRY_ROW_LEN]
            .chunks_exact(ENTRY_ROW_LEN)
            .map(|r| decode_entry_row(r, &packs))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(IndexSnapshot { packs, entries })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> IndexSnapshot {
        IndexSnapshot {
            packs: vec![
                PackCover {
                    id: PackId(1),
                    nonce: 11,
                    covered_len: 10_000,
                },
                PackCover {
                    id: PackId(3),
                    nonce: 33,
                    covered_len: 500,
                },
            ],
            entries: vec![
                (
                    BlobHash::of(b"a"),
                    Loc {
                        pack: PackId(1),
                        offset: 32,
                        stored_len: 100,
                        raw_len: 300,
                        kind: EntryKind::Blob,
                        flags: 1,
                    },
                ),
                (
                    BlobHash::of(b"b"),
                    Loc {
                        pack: PackId(3),
                        offset: 200,
                        stored_len: 80,
                        raw_len: 5_000_000,
                        kind: EntryKind::ChunkList,
                        flags: 0,
                    },
                ),
            ],
        }
    }

    #[test]
    fn snapshot_round_trips() {
        let s = sample();
        assert_eq!(IndexSnapshot::decode(&s.encode()).unwrap(), s);
        let empty = IndexSnapshot::default();
        assert_eq!(IndexSnapshot::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_rejected() {
        let b = sample().encode();
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x04;
            assert!(IndexSnapshot::decode(&d).is_err(), "flip at {i} accepted");
        }
        for n in 0..b.len() {
            assert!(
                IndexSnapshot::decode(&b[..n]).is_err(),
                "truncation to {n} accepted"
            );
        }
    }

    #[test]
    fn entries_outside_the_covered_part_are_rejected() {
        let mut s = sample();
        s.entries[1].1.offset = 450;
        assert!(IndexSnapshot::decode(&s.encode()).is_err());
        let mut s = sample();
        s.entries[0].1.pack = PackId(2);
        assert!(IndexSnapshot::decode(&s.encode()).is_err());
    }

    #[test]
    fn a_huge_claimed_count_is_rejected_before_allocation() {
        let mut b = sample().encode();
        b[16..24].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
        let n = b.len() - 32;
        let sum = blake3::hash(&b[..n]);
        b[n..].copy_from_slice(sum.as_bytes());
        assert!(IndexSnapshot::decode(&b).is_err());
    }
}
