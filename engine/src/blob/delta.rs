//! The index delta (`index.delta`): the entries stored since the index
//! file was written, appended by each close that does not merge them into
//! a new index file, so the next open finds them (and knows their bytes
//! were synced) without scanning the pack tails.
//!
//! ```text
//! a sequence of frames, each:
//!  0  4  payload length u32 LE
//!  4  4  crc32 of the payload
//!  8     payload:
//!          0  8 base id u64 (the index file it extends, see `SortedIndex::id`; 0: none)
//!          8  4 pack count P u32, 12 4 entry count E u32
//!         16    P x 24 pack rows (as the index file's): every pack, and how far
//!               it was synced when the frame was written
//!         ..    E x 64 entry rows (as the index file's), each inside its pack's row
//! ```
//!
//! Frames are read in order up to the first that does not check out (a
//! torn append); a frame of another base (left by a crash between a new
//! index file and the delta's reset) is skipped. The file is never
//! fsynced: it only names pack bytes fsynced before it was written, so
//! whatever of it survives a crash is true, and what is lost is found
//! again by scanning the pack tails, the path that recovers any crash.

use cairn_codec::bytes::{u32_le as u32_at, u64_le as u64_at};
use cairn_codec::BlobHash;

use super::index::{
    decode_entry_row, decode_pack_rows, encode_entry_row, encode_pack_row, Loc, PackCover,
};

/// The delta's file name in the blob directory.
pub const DELTA_FILE: &str = "index.delta";
const FRAME_HEAD_LEN: usize = 8;
const PAYLOAD_HEAD_LEN: usize = 16;
const PACK_ROW_LEN: usize = 24;
const ENTRY_ROW_LEN: usize = 64;
/// A delta file longer than this (16 MiB) is not read: the store merges
/// its delta into the index file long before (at
/// [`INDEX_TAIL_MAX_ENTRIES`](super::options::INDEX_TAIL_MAX_ENTRIES)),
/// so only damage or a foreign file gets there; the tails are scanned
/// instead.
pub const MAX_DELTA_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// One frame: the packs as synced, and the entries it adds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    /// The index file this frame extends.
    pub base_id: u64,
    /// Every pack and how far it was synced.
    pub packs: Vec<PackCover>,
    /// Entries stored since the previous frame (or the index file).
    pub entries: Vec<(BlobHash, Loc)>,
}

impl Frame {
    /// The frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(
            PAYLOAD_HEAD_LEN + self.packs.len() * PACK_ROW_LEN + self.entries.len() * ENTRY_ROW_LEN,
        );
        p.extend_from_slice(&self.base_id.to_le_bytes());
        p.extend_from_slice(&(self.packs.len() as u32).to_le_bytes());
        p.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for c in &self.packs {
            encode_pack_row(&mut p, c);
        }
        for (h, l) in &self.entries {
            encode_entry_row(&mut p, h, l);
        }
        let mut out = Vec::with_capacity(FRAME_HEAD_LEN + p.len());
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&p).to_le_bytes());
        out.extend_from_slice(&p);
        out
    }

    /// Decodes one payload; `None` if it does not check out (counts
    /// against the length, reserved bytes, known kinds, every entry inside
    /// a listed pack's synced part).
    fn decode_payload(p: &[u8]) -> Option<Frame> {
        if p.len() < PAYLOAD_HEAD_LEN {
            return None;
        }
        let base_id = u64_at(p, 0);
        let pc = u32_at(p, 8) as usize;
        let ec = u32_at(p, 12) as usize;
        let need = PAYLOAD_HEAD_LEN as u64
            + pc as u64 * PACK_ROW_LEN as u64
            + ec as u64 * ENTRY_ROW_LEN as u64;
        if need != p.len() as u64 {
            return None;
        }
        let packs = decode_pack_rows(p, PAYLOAD_HEAD_LEN, pc).ok()?;
        let at = PAYLOAD_HEAD_LEN + pc * PACK_ROW_LEN;
        let entries = p[at..]
            .chunks_exact(ENTRY_ROW_LEN)
            .map(|r| decode_entry_row(r, &packs))
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        Some(Frame {
            base_id,
            packs,
            entries,
        })
    }
}

/// Every frame of a delta file that checks out, in order, and the length
/// of the part they fill (where the next frame is written: past it lies a
/// torn append or nothing).
pub fn decode_frames(b: &[u8]) -> (Vec<Frame>, u64) {
    let mut frames = Vec::new();
    let mut at = 0usize;
    while b.len() - at >= FRAME_HEAD_LEN {
        let len = u32_at(b, at) as usize;
        let Some(end) = (at + FRAME_HEAD_LEN)
            .checked_add(len)
            .filter(|e| *e <= b.len())
        else {
            break;
        };
        let payload = &b[at + FRAME_HEAD_LEN..end];
        if crc32fast::hash(payload) != u32_at(b, at + 4) {
            break;
        }
        let Some(f) = Frame::decode_payload(payload) else {
            break;
        };
        frames.push(f);
        at = end;
    }
    (frames, at as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::blob::pack::{EntryKind, PackId};

    fn frame(n: u64) -> Frame {
        Frame {
            base_id: 77,
            packs: vec![PackCover {
                id: PackId(1),
                nonce: 5,
                covered_len: 100_000,
            }],
            entries: (0..n)
                .map(|i| {
                    (
                        BlobHash::of(&i.to_le_bytes()),
                        Loc {
                            pack: PackId(1),
                            offset: 32 + i * 100,
                            stored_len: 20,
                            raw_len: 40,
                            kind: EntryKind::Blob,
                            flags: 0,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn frames_round_trip_and_a_torn_or_flipped_frame_ends_the_sequence() {
        let (a, b) = (frame(3), frame(5));
        let mut bytes = a.encode();
        let first_len = bytes.len() as u64;
        bytes.extend_from_slice(&b.encode());
        assert_eq!(
            decode_frames(&bytes),
            (vec![a.clone(), b], bytes.len() as u64)
        );
        for n in first_len as usize..bytes.len() {
            assert_eq!(
                decode_frames(&bytes[..n]),
                (vec![a.clone()], first_len),
                "cut at {n}"
            );
        }
        for i in first_len as usize..bytes.len() {
            let mut d = bytes.clone();
            d[i] ^= 0x10;
            assert_eq!(
                decode_frames(&d),
                (vec![a.clone()], first_len),
                "flip at {i}"
            );
        }
    }

    #[test]
    fn an_entry_outside_its_packs_synced_part_is_refused() {
        let mut f = frame(1);
        f.entries[0].1.offset = 99_990;
        assert_eq!(decode_frames(&f.encode()).0, vec![]);
    }
}
