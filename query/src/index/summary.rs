//! One small file beside the segment index files that says, for each
//! sealed segment, which keys its index file certainly lacks: a bloom
//! filter of the keys of its directory. A probe for a key most segments
//! lack (a session's checkpoints, the last reset before a point) reads
//! this one file instead of opening every segment's index file.
//!
//! An entry is used only for the segment it names as the log has it now
//! (same first LSN, last LSN and chain value after it, as for the index
//! file itself); a filter can say "maybe" for a key the segment lacks (the
//! file is then read, as without a summary) and never "no" for one it
//! holds. A file that is missing, damaged (any checksum, length or field
//! wrong) or of another version is not used at all: every file is read,
//! and a query that may write writes a new summary.
//!
//! # Layout (`.cairn/index/segments/summary.qsm`, all LE)
//!
//! ```text
//! header, SUMMARY_HEADER_LEN (32) bytes:
//!   0  8  magic "CAIRNQSM"
//!   8  4  version (SUMMARY_VERSION)
//!  12  4  entry count N
//!  16  4  filter bits (BLOOM_BITS)
//!  20  4  hashes per key (BLOOM_HASHES)
//!  24  4  reserved (0)
//!  28  4  CRC32 (seeded) of bytes 0..28
//! N entries of SUMMARY_ENTRY_LEN (312) bytes, ascending by first LSN:
//!   0  8  first LSN of the segment
//!   8  8  last LSN of the segment
//!  16 32  chain value after it
//!  48  4  keys in the segment's index file
//!  52 256 bloom filter: bit (h1 + i * h2) mod BLOOM_BITS set for i in
//!         0..BLOOM_HASHES, for each key, where h1 and h2 are the low and
//!         high 32 bits of the 64-bit FNV-1a hash of the key's tag byte
//!         followed by its bytes (bit b is bit b % 8 of byte b / 8)
//! 308  4  CRC32 (seeded) of bytes 0..308
//! ```

use std::path::Path;
use std::sync::Arc;

use cairn_codec::bytes::{crc32_seeded as crc, u32_le as u32_at, u64_le as u64_at};
use cairn_codec::{ChainHash, Lsn};
use cairn_engine::log::SegmentSpan;
use cairn_engine::vfs::OpenMode;
use cairn_engine::Vfs;

use super::seg::{KeyTag, SegIndex};
use crate::error::{QueryError, Result};

/// The summary's file name, inside the segment index files' directory.
pub const SUMMARY_FILE: &str = "summary.qsm";
/// The magic at the start of the summary.
pub const SUMMARY_MAGIC: &[u8; 8] = b"CAIRNQSM";
/// The layout's version; a file of another version is not used (and is
/// rewritten by a query that may write).
pub const SUMMARY_VERSION: u32 = 1;
/// Bytes of the header.
pub const SUMMARY_HEADER_LEN: usize = 32;
/// Bits of each segment's filter: 256 bytes, which keep the chance that a
/// key a segment lacks reads as "maybe" near 1 in 1,000 for the ~100 keys
/// of the benchmark's segments (50 sessions, 50 paths, the kinds) and
/// below 1 in 40 up to 300 keys. Past that the filter says "maybe" more
/// often and the file is read, as without a summary.
pub const BLOOM_BITS: usize = 2048;
/// Bit positions set per key.
pub const BLOOM_HASHES: u32 = 4;
const BLOOM_BYTES: usize = BLOOM_BITS / 8;
/// Bytes of an entry.
pub const SUMMARY_ENTRY_LEN: usize = 52 + BLOOM_BYTES + 4;
/// The most entries a summary may hold: one per sealed segment, and a
/// store of a million segments (64 TiB of log at the default segment
/// size) is far past any this engine is built for; a header that claims
/// more is damaged.
pub const MAX_SUMMARY_ENTRIES: u32 = 1 << 20;

/// One segment's entry: its identity and the filter of its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryEntry {
    /// The segment's first LSN.
    pub first: Lsn,
    /// Its last LSN.
    pub last: Lsn,
    /// The chain value after its last record.
    pub chain: ChainHash,
    /// Keys in its index file.
    pub keys: u32,
    bloom: Box<[u8; BLOOM_BYTES]>,
}

/// The 64-bit FNV-1a hash of a key's tag byte and bytes.
fn key_hash(tag: u8, key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in std::iter::once(&tag).chain(key) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The filter bits of a key.
fn bits(tag: u8, key: &[u8]) -> impl Iterator<Item = usize> {
    let h = key_hash(tag, key);
    let (h1, h2) = (h as u32, (h >> 32) as u32);
    (0..BLOOM_HASHES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) as usize) % BLOOM_BITS)
}

impl SummaryEntry {
    /// The entry of the segment `span`, whose index file `ix` is (its
    /// header already checked against the segment): every directory
    /// entry is read, and checked, to fill the filter.
    pub fn of(span: SegmentSpan, ix: &SegIndex) -> Result<SummaryEntry> {
        let mut bloom = Box::new([0u8; BLOOM_BYTES]);
        let mut keys = 0u32;
        ix.each_key(&mut |tag, key| {
            keys += 1;
            for b in bits(tag, key) {
                bloom[b / 8] |= 1 << (b % 8);
            }
        })?;
        Ok(SummaryEntry {
            first: span.first,
            last: span.last,
            chain: span.last_chain,
            keys,
            bloom,
        })
    }

    /// True if this entry is of the segment `span` as the log has it.
    pub fn is_of(&self, span: &SegmentSpan) -> bool {
        self.first == span.first && self.last == span.last && self.chain == span.last_chain
    }

    /// False only if the segment's index file certainly has no key
    /// `(tag, key)`.
    pub fn may_hold(&self, tag: KeyTag, key: &str) -> bool {
        bits(tag as u8, key.as_bytes()).all(|b| self.bloom[b / 8] & (1 << (b % 8)) != 0)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&self.first.0.to_le_bytes());
        out.extend_from_slice(&self.last.0.to_le_bytes());
        out.extend_from_slice(self.chain.as_bytes());
        out.extend_from_slice(&self.keys.to_le_bytes());
        out.extend_from_slice(&self.bloom[..]);
        let h = crc(&out[at..]);
        out.extend_from_slice(&h.to_le_bytes());
    }
}

/// The entries of a summary, ascending by first LSN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    entries: Vec<SummaryEntry>,
}

impl Summary {
    /// A summary of `entries` (sorted here; of two with one first LSN, the
    /// later in `entries` is kept).
    pub fn new(entries: Vec<SummaryEntry>) -> Summary {
        let mut entries = entries;
        entries.reverse();
        entries.sort_by_key(|e| e.first);
        entries.dedup_by_key(|e| e.first);
        Summary { entries }
    }

    /// The entries.
    pub fn entries(&self) -> &[SummaryEntry] {
        &self.entries
    }

    /// The entry of the segment `span` as the log has it, if any.
    pub fn entry_of(&self, span: &SegmentSpan) -> Option<&SummaryEntry> {
        let i = self
            .entries
            .binary_search_by_key(&span.first, |e| e.first)
            .ok()?;
        Some(&self.entries[i]).filter(|e| e.is_of(span))
    }

    /// The file's bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(SUMMARY_HEADER_LEN + self.entries.len() * SUMMARY_ENTRY_LEN);
        out.extend_from_slice(SUMMARY_MAGIC);
        out.extend_from_slice(&SUMMARY_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&(BLOOM_BITS as u32).to_le_bytes());
        out.extend_from_slice(&BLOOM_HASHES.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        let h = crc(&out);
        out.extend_from_slice(&h.to_le_bytes());
        for e in &self.entries {
            e.encode(&mut out);
        }
        out
    }

    /// Reads a summary's bytes, checking all of them: header, length,
    /// every entry's checksum, the order of the entries. `what` names the
    /// file in errors.
    pub fn decode(b: &[u8], what: &str) -> Result<Summary> {
        let bad = |detail: String| QueryError::IndexCorrupt {
            path: what.to_string(),
            detail,
        };
        if b.len() < SUMMARY_HEADER_LEN {
            return Err(bad(format!("{} bytes, shorter than its header", b.len())));
        }
        if &b[..8] != SUMMARY_MAGIC {
            return Err(bad("bad magic".into()));
        }
        if crc(&b[..28]) != u32_at(b, 28) {
            return Err(bad("header checksum mismatch".into()));
        }
        let version = u32_at(b, 8);
        if version != SUMMARY_VERSION {
            return Err(bad(format!(
                "version {version}, expected {SUMMARY_VERSION}"
            )));
        }
        let n = u32_at(b, 12);
        if u32_at(b, 16) as usize != BLOOM_BITS
            || u32_at(b, 20) != BLOOM_HASHES
            || u32_at(b, 24) != 0
        {
            return Err(bad("filter parameters not those of this version".into()));
        }
        if n > MAX_SUMMARY_ENTRIES {
            return Err(bad(format!("{n} entries, more than {MAX_SUMMARY_ENTRIES}")));
        }
        let want = SUMMARY_HEADER_LEN + n as usize * SUMMARY_ENTRY_LEN;
        if b.len() != want {
            return Err(bad(format!(
                "{} bytes where its header says {want}",
                b.len()
            )));
        }
        let mut entries = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            let e = &b[SUMMARY_HEADER_LEN + i * SUMMARY_ENTRY_LEN..][..SUMMARY_ENTRY_LEN];
            if crc(&e[..SUMMARY_ENTRY_LEN - 4]) != u32_at(e, SUMMARY_ENTRY_LEN - 4) {
                return Err(bad(format!("entry {i}: checksum mismatch")));
            }
            let (first, last) = (Lsn(u64_at(e, 0)), Lsn(u64_at(e, 8)));
            if first > last
                || entries
                    .last()
                    .is_some_and(|p: &SummaryEntry| p.first >= first)
            {
                return Err(bad(format!("entry {i}: LSNs out of order")));
            }
            let mut chain = [0u8; 32];
            chain.copy_from_slice(&e[16..48]);
            let mut bloom = Box::new([0u8; BLOOM_BYTES]);
            bloom.copy_from_slice(&e[52..52 + BLOOM_BYTES]);
            entries.push(SummaryEntry {
                first,
                last,
                chain: ChainHash(chain),
                keys: u32_at(e, 48),
                bloom,
            });
        }
        Ok(Summary { entries })
    }

    /// The summary in `dir`: `Ok(None)` when there is none, an error when
    /// it cannot be read or is damaged.
    pub fn read(vfs: &Arc<dyn Vfs>, dir: &Path) -> Result<Option<Summary>> {
        let path = dir.join(SUMMARY_FILE);
        let what = path.display().to_string();
        let io = |e: std::io::Error| QueryError::IndexCorrupt {
            path: what.clone(),
            detail: format!("cannot be read: {e}"),
        };
        let f = match vfs.open(&path, OpenMode::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let len = f.len().map_err(io)?;
        let most =
            SUMMARY_HEADER_LEN as u64 + MAX_SUMMARY_ENTRIES as u64 * SUMMARY_ENTRY_LEN as u64;
        if len > most {
            return Err(QueryError::IndexCorrupt {
                path: what.clone(),
                detail: format!("{len} bytes, more than a summary holds"),
            });
        }
        let mut b = vec![0u8; len as usize];
        f.read_exact_at(&mut b, 0).map_err(io)?;
        Summary::decode(&b, &what).map(Some)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::index::seg::SegIndexBuilder;
    use cairn_codec::{Event, EventKind, EventRef};
    use cairn_engine::vfs::Mapped;

    fn segment(first: u64, n: u64, sessions: &[&str]) -> (SegmentSpan, SegIndex) {
        let mut b = SegIndexBuilder::new(Lsn(first));
        let mut chain = ChainHash::ZERO;
        for i in 0..n {
            let mut e = Event::new(EventKind::Prompt, sessions[i as usize % sessions.len()]);
            e = e.with_path(format!("src/f{}.rs", i % 7));
            chain = ChainHash([(first + i) as u8; 32]);
            b.observe(Lsn(first + i), chain, &EventRef::of(&e)).unwrap();
        }
        let ix = SegIndex::open(Mapped::Bytes(Arc::from(b.encode().unwrap())), "x.qix").unwrap();
        let span = SegmentSpan {
            first: Lsn(first),
            last: Lsn(first + n - 1),
            last_chain: chain,
        };
        (span, ix)
    }

    #[test]
    fn a_filter_never_says_no_to_a_key_it_holds() {
        let names: Vec<String> = (0..300).map(|i| format!("session-{i}")).collect();
        let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        let (span, ix) = segment(1, 600, &refs);
        let e = SummaryEntry::of(span, &ix).unwrap();
        assert_eq!(e.keys, 300 + 1 + 7);
        for s in &names {
            assert!(e.may_hold(KeyTag::Session, s));
        }
        assert!(e.may_hold(KeyTag::Kind, "prompt"));
        assert!(e.may_hold(KeyTag::Path, "src/f3.rs"));
        // Most keys it lacks are ruled out, though the filter holds 300.
        let out = (0..1000)
            .filter(|i| !e.may_hold(KeyTag::Session, &format!("other-{i}")))
            .count();
        assert!(out > 900, "{out}");
        assert!(
            !e.may_hold(KeyTag::Kind, "checkpoint.create") || !e.may_hold(KeyTag::Kind, "rollback")
        );
    }

    #[test]
    fn round_trip_and_identity() {
        let (s1, i1) = segment(1, 50, &["a", "b"]);
        let (s2, i2) = segment(51, 50, &["c"]);
        let sum = Summary::new(vec![
            SummaryEntry::of(s2, &i2).unwrap(),
            SummaryEntry::of(s1, &i1).unwrap(),
        ]);
        let back = Summary::decode(&sum.encode(), "s").unwrap();
        assert_eq!(back, sum);
        let e = back.entry_of(&s2).unwrap();
        assert!(e.may_hold(KeyTag::Session, "c"));
        assert!(!e.may_hold(KeyTag::Session, "a"));
        // Another history of the same LSNs: no entry.
        let other = SegmentSpan {
            last_chain: ChainHash([9; 32]),
            ..s2
        };
        assert!(back.entry_of(&other).is_none());
        assert!(back
            .entry_of(&SegmentSpan {
                last: Lsn(99),
                ..s2
            })
            .is_none());
        assert_eq!(
            Summary::decode(&Summary::default().encode(), "s")
                .unwrap()
                .entries()
                .len(),
            0
        );
    }

    /// Every byte of the file damaged: the file is refused (a damaged
    /// summary is never used), or the change is harmless (none is).
    #[test]
    fn every_damaged_byte_is_detected() {
        let (s1, i1) = segment(1, 50, &["a", "b"]);
        let (s2, i2) = segment(51, 50, &["c"]);
        let good = Summary::new(vec![
            SummaryEntry::of(s1, &i1).unwrap(),
            SummaryEntry::of(s2, &i2).unwrap(),
        ])
        .encode();
        for i in 0..good.len() {
            for flip in [0x01u8, 0x80] {
                let mut b = good.clone();
                b[i] ^= flip;
                assert!(Summary::decode(&b, "s").is_err(), "byte {i} ^ {flip:#x}");
            }
        }
        for cut in [
            0,
            10,
            SUMMARY_HEADER_LEN,
            SUMMARY_HEADER_LEN + 1,
            good.len() - 1,
        ] {
            assert!(Summary::decode(&good[..cut], "s").is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(Summary::decode(&longer, "s").is_err());
    }
}
