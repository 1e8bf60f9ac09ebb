//! The persisted blob index, version 2: the entries sorted by hash in
//! buckets, so a process finds one blob by reading one bucket of a memory
//! map, never decoding the whole file.
//!
//! ```text
//!  0  8  magic        "CAIRNBX2"
//!  8  4  pack count P u32 LE
//! 12  1  bucket bits B (0..=16): 2^B buckets, by the first B bits of a hash
//! 13  3  reserved     must be 0
//! 16  8  entry count E u64 LE
//! 24     pack table, P x 24 bytes:
//!          0 4 pack id u32, 4 4 reserved (0), 8 8 nonce u64, 16 8 covered length u64
//!  ..    bucket table, 2^B x 8 bytes:
//!          0 4 end u32 (entries in this bucket and every one before it),
//!          4 4 crc32 of the bucket's entry rows
//!  ..   32  blake3 of every byte before it (header, pack table, bucket table)
//!  ..    entries, E x 64 bytes, sorted by hash (the v1 row layout):
//!          0 32 hash, 32 4 pack id u32, 36 4 stored length u32, 40 8 offset u64,
//!         48 8 raw length u64, 56 1 kind, 57 1 flags, 58 6 reserved (0)
//! ```
//!
//! Opening checks the head (its blake3, the counts against the file
//! length, the bucket ends); a lookup checks the crc32 of the one bucket it
//! reads and the row it returns (a listed pack, inside the covered part).
//! A bucket that fails its check makes the file "damaged": the caller
//! stops using it and rebuilds the index from the packs. `cairn verify`
//! checks every bucket ([`SortedIndex::entries`]).
//!
//! The file is written like v1 (a temporary name, fsync, rename over
//! `index`, directory fsync) and never changed in place, so a map of it
//! stays valid after the writer replaces it.

use cairn_codec::bytes::{u32_le as u32_at, u64_le as u64_at};
use cairn_codec::{BlobHash, CodecError};

use super::index::{
    decode_entry_row, decode_pack_rows, encode_entry_row, encode_pack_row, IndexSnapshot, Loc,
    PackCover,
};
use crate::vfs::Mapped;

/// Version 2 index file magic.
pub const SORTED_INDEX_MAGIC: [u8; 8] = *b"CAIRNBX2";
const HEADER_LEN: usize = 24;
const PACK_ROW_LEN: usize = 24;
const BUCKET_ROW_LEN: usize = 8;
const HEAD_SUM_LEN: usize = 32;
const ENTRY_ROW_LEN: usize = 64;
/// At most 2^16 buckets: a 512 KiB bucket table, enough for tens of
/// millions of blobs at the target bucket size.
pub const MAX_BUCKET_BITS: u8 = 16;
/// The writer picks the fewest buckets that keep each at about this many
/// rows (2 KiB): a lookup reads and checksums one bucket, so this bounds
/// the bytes a lookup touches.
const TARGET_BUCKET_ROWS: u64 = 32;

fn invalid(what: impl Into<String>) -> CodecError {
    CodecError::Invalid { what: what.into() }
}

/// Bucket bits for `n` entries: the smallest B with n / 2^B <= the target.
fn bucket_bits_for(n: u64) -> u8 {
    let mut bits = 0u8;
    while bits < MAX_BUCKET_BITS && (n >> bits) > TARGET_BUCKET_ROWS {
        bits += 1;
    }
    bits
}

/// The bucket of `h` among 2^bits: its first `bits` bits.
fn bucket_of(h: &BlobHash, bits: u8) -> usize {
    if bits == 0 {
        return 0;
    }
    (u32::from_be_bytes([h.0[0], h.0[1], h.0[2], h.0[3]]) >> (32 - u32::from(bits))) as usize
}

/// Encodes an index file from `packs` and `entries` (any order; sorted
/// here).
pub fn encode(packs: &[PackCover], entries: &mut [(BlobHash, Loc)]) -> Vec<u8> {
    entries.sort_unstable_by_key(|a| a.0 .0);
    let n = entries.len() as u64;
    let bits = bucket_bits_for(n);
    let buckets = 1usize << bits;
    let head_len = HEADER_LEN + packs.len() * PACK_ROW_LEN + buckets * BUCKET_ROW_LEN;
    let mut out = Vec::with_capacity(head_len + HEAD_SUM_LEN + entries.len() * ENTRY_ROW_LEN);
    out.extend_from_slice(&SORTED_INDEX_MAGIC);
    out.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    out.push(bits);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&n.to_le_bytes());
    for p in packs {
        encode_pack_row(&mut out, p);
    }
    let mut rows = Vec::with_capacity(entries.len() * ENTRY_ROW_LEN);
    let mut at = 0usize;
    for b in 0..buckets {
        let start = rows.len();
        while at < entries.len() && bucket_of(&entries[at].0, bits) == b {
            encode_entry_row(&mut rows, &entries[at].0, &entries[at].1);
            at += 1;
        }
        out.extend_from_slice(&(at as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&rows[start..]).to_le_bytes());
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    out.extend_from_slice(&rows);
    out
}

/// A version 2 index file, mapped, its head checked.
#[derive(Debug)]
pub struct SortedIndex {
    map: Mapped,
    packs: Vec<PackCover>,
    bits: u8,
    /// Offset of the bucket table.
    buckets_at: usize,
    /// Offset of the first entry row.
    rows_at: usize,
    entry_count: usize,
}

impl SortedIndex {
    /// Checks the head of an index file (magic, the blake3 of the head,
    /// the counts against the file length, the pack table, the bucket
    /// ends). The buckets are checked as they are read.
    pub fn open(map: Mapped) -> Result<SortedIndex, CodecError> {
        let b: &[u8] = &map;
        if b.len() < HEADER_LEN + HEAD_SUM_LEN {
            return Err(CodecError::Truncated {
                need: HEADER_LEN + HEAD_SUM_LEN,
                have: b.len(),
            });
        }
        if b[0..8] != SORTED_INDEX_MAGIC {
            return Err(CodecError::BadMagic { what: "blob index" });
        }
        let pack_count = u32_at(b, 8) as usize;
        let bits = b[12];
        if bits > MAX_BUCKET_BITS || b[13..16] != [0, 0, 0] {
            return Err(invalid("blob index header is malformed"));
        }
        let entry_count = u64_at(b, 16);
        let buckets = 1u64 << bits;
        let head_len = HEADER_LEN as u64
            + pack_count as u64 * PACK_ROW_LEN as u64
            + buckets * BUCKET_ROW_LEN as u64;
        let expected = entry_count
            .checked_mul(ENTRY_ROW_LEN as u64)
            .and_then(|n| n.checked_add(head_len + HEAD_SUM_LEN as u64));
        if entry_count > u64::from(u32::MAX) || expected != Some(b.len() as u64) {
            return Err(invalid(format!(
                "blob index of {} bytes cannot hold {pack_count} packs, {buckets} buckets and {entry_count} entries",
                b.len()
            )));
        }
        let head_len = head_len as usize;
        if blake3::hash(&b[..head_len]).as_bytes()[..] != b[head_len..head_len + HEAD_SUM_LEN] {
            return Err(invalid("blob index head checksum does not match"));
        }
        let packs = decode_pack_rows(b, HEADER_LEN, pack_count)?;
        let at = HEADER_LEN + pack_count * PACK_ROW_LEN;
        let buckets_at = at;
        let mut prev = 0u32;
        for i in 0..buckets as usize {
            let end = u32_at(b, buckets_at + i * BUCKET_ROW_LEN);
            if end < prev {
                return Err(invalid("blob index bucket ends go backwards"));
            }
            prev = end;
        }
        if u64::from(prev) != entry_count {
            return Err(invalid(
                "blob index buckets do not add up to its entry count",
            ));
        }
        Ok(SortedIndex {
            packs,
            bits,
            buckets_at,
            rows_at: head_len + HEAD_SUM_LEN,
            entry_count: entry_count as usize,
            map,
        })
    }

    /// This file's id: the first 8 bytes of its head checksum, which
    /// covers the pack table and every bucket's crc32. The index delta
    /// names the file it extends by it.
    pub fn id(&self) -> u64 {
        cairn_codec::bytes::u64_le(&self.map, self.rows_at - HEAD_SUM_LEN)
    }

    /// The packs covered, and how far.
    pub fn packs(&self) -> &[PackCover] {
        &self.packs
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entry_count
    }

    /// True if the index has no entries.
    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    /// The rows of bucket `i`, checked against its crc32.
    fn bucket(&self, i: usize) -> Result<&[u8], CodecError> {
        let b: &[u8] = &self.map;
        let row = self.buckets_at + i * BUCKET_ROW_LEN;
        let start = if i == 0 {
            0
        } else {
            u32_at(b, row - BUCKET_ROW_LEN) as usize
        };
        let end = u32_at(b, row) as usize;
        let rows = &b[self.rows_at + start * ENTRY_ROW_LEN..self.rows_at + end * ENTRY_ROW_LEN];
        let stored = u32_at(b, row + 4);
        let computed = crc32fast::hash(rows);
        if stored != computed {
            return Err(CodecError::BadChecksum {
                what: "blob index bucket",
                stored,
                computed,
            });
        }
        Ok(rows)
    }

    /// Decodes one row and checks it: a known kind, zero reserved bytes, a
    /// listed pack, inside the covered part.
    fn row(&self, r: &[u8]) -> Result<(BlobHash, Loc), CodecError> {
        decode_entry_row(r, &self.packs)
    }

    /// Where `h` is, if indexed. An error means the file is damaged.
    pub fn get(&self, h: &BlobHash) -> Result<Option<Loc>, CodecError> {
        let rows = self.bucket(bucket_of(h, self.bits))?;
        let n = rows.len() / ENTRY_ROW_LEN;
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let key = &rows[mid * ENTRY_ROW_LEN..mid * ENTRY_ROW_LEN + 32];
            match key.cmp(&h.0[..]) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    let (_, loc) =
                        self.row(&rows[mid * ENTRY_ROW_LEN..(mid + 1) * ENTRY_ROW_LEN])?;
                    return Ok(Some(loc));
                }
            }
        }
        Ok(None)
    }

    /// Every entry, each bucket and row checked, and that the rows are in
    /// their buckets and strictly sorted (no hash twice).
    pub fn entries(&self) -> Result<Vec<(BlobHash, Loc)>, CodecError> {
        let mut out = Vec::with_capacity(self.entry_count);
        for i in 0..1usize << self.bits {
            let rows = self.bucket(i)?;
            for r in rows.chunks_exact(ENTRY_ROW_LEN) {
                let (h, l) = self.row(r)?;
                if bucket_of(&h, self.bits) != i {
                    return Err(invalid(format!(
                        "blob index entry {h} is in the wrong bucket"
                    )));
                }
                if out
                    .last()
                    .is_some_and(|(p, _): &(BlobHash, Loc)| p.0 >= h.0)
                {
                    return Err(invalid(format!("blob index entry {h} is out of order")));
                }
                out.push((h, l));
            }
        }
        Ok(out)
    }

    /// The whole file as a [`IndexSnapshot`], every row checked.
    pub fn to_snapshot(&self) -> Result<IndexSnapshot, CodecError> {
        Ok(IndexSnapshot {
            packs: self.packs.clone(),
            entries: self.entries()?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::blob::pack::{EntryKind, PackId};

    fn loc(pack: u32, offset: u64) -> Loc {
        Loc {
            pack: PackId(pack),
            offset,
            stored_len: 10,
            raw_len: 20,
            kind: EntryKind::Blob,
            flags: 0,
        }
    }

    fn packs() -> Vec<PackCover> {
        vec![
            PackCover {
                id: PackId(1),
                nonce: 7,
                covered_len: 1 << 30,
            },
            PackCover {
                id: PackId(2),
                nonce: 9,
                covered_len: 1 << 20,
            },
        ]
    }

    fn entries(n: u64) -> Vec<(BlobHash, Loc)> {
        (0..n)
            .map(|i| {
                (
                    BlobHash::of(&i.to_le_bytes()),
                    loc(1 + (i % 2) as u32, 32 + i * 100),
                )
            })
            .collect()
    }

    fn open(b: Vec<u8>) -> Result<SortedIndex, CodecError> {
        SortedIndex::open(Mapped::Bytes(Arc::from(b)))
    }

    #[test]
    fn every_entry_is_found_and_others_are_not() {
        for n in [0u64, 1, 31, 33, 500, 3000] {
            let mut e = entries(n);
            let idx = open(encode(&packs(), &mut e.clone())).unwrap();
            assert_eq!(idx.len(), n as usize);
            for (h, l) in &e {
                assert_eq!(idx.get(h).unwrap(), Some(*l), "n={n}");
            }
            assert_eq!(idx.get(&BlobHash::of(b"absent")).unwrap(), None);
            e.sort_by_key(|a| a.0 .0);
            assert_eq!(idx.entries().unwrap(), e);
        }
    }

    #[test]
    fn bucket_bits_grow_with_the_entry_count() {
        assert_eq!(bucket_bits_for(0), 0);
        assert_eq!(bucket_bits_for(32), 0);
        assert_eq!(bucket_bits_for(33), 1);
        assert_eq!(bucket_bits_for(100_000), 12);
        assert_eq!(bucket_bits_for(u64::from(u32::MAX)), MAX_BUCKET_BITS);
    }

    #[test]
    fn every_flipped_byte_is_caught_by_open_or_by_entries() {
        let b = encode(&packs(), &mut entries(40));
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x04;
            let caught = match open(d) {
                Err(_) => true,
                Ok(idx) => idx.entries().is_err(),
            };
            assert!(caught, "flip at {i} accepted");
        }
        for n in 0..b.len() {
            assert!(open(b[..n].to_vec()).is_err(), "truncation to {n} accepted");
        }
    }

    #[test]
    fn a_flipped_row_fails_the_lookup_in_its_bucket() {
        let e = entries(200);
        let b = encode(&packs(), &mut e.clone());
        let idx = open(b.clone()).unwrap();
        let rows_at = idx.rows_at;
        let mut d = b;
        d[rows_at + 40] ^= 1;
        let idx = open(d).unwrap();
        let hit = e.iter().filter(|(h, _)| idx.get(h).is_err()).count();
        assert!(hit > 0, "no lookup saw the damaged bucket");
    }

    #[test]
    fn a_row_outside_the_covered_part_is_rejected() {
        let mut e = vec![(BlobHash::of(b"x"), loc(2, 1 << 21))];
        let idx = open(encode(&packs(), &mut e)).unwrap();
        assert!(idx.get(&BlobHash::of(b"x")).is_err());
        let mut e = vec![(BlobHash::of(b"x"), loc(5, 100))];
        let idx = open(encode(&packs(), &mut e)).unwrap();
        assert!(idx.entries().is_err());
    }
}
