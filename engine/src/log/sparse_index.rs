//! The sparse index of a segment: one (LSN, byte offset) entry about every
//! [`SPARSE_INDEX_INTERVAL_BYTES`], so reading from an LSN scans at most that
//! many bytes. Kept in memory for the tail segment and persisted next to each
//! sealed segment as `<segment>.idx`:
//!
//! ```text
//!  0  8  magic "CAIRNIDX"
//!  8  4  version (1)
//! 12  4  reserved (0)
//! 16  8  segment first LSN      \
//! 24  8  segment last LSN        | must match the segment's footer,
//! 32  8  segment frames length   | else the index is stale and rebuilt
//! 40 32  segment last chain     /
//! 72  8  entry count n
//! 80 16n entries: LSN u64 LE, offset u64 LE
//!  .  4  CRC32 (seeded) of everything before
//! ```

use cairn_codec::bytes::{crc32_seeded as crc, u32_le as u32_at, u64_le as u64_at};
use cairn_codec::frame::CRC_SEED;
use cairn_codec::segment::SegmentFooter;
use cairn_codec::{ChainHash, Lsn};

use crate::vfs::VfsFile;

/// Bytes between index entries: reading one record scans (and CRC-checks)
/// at most about this much of a segment, a few dozen typical records, while
/// a 64 MiB segment needs ~16,000 entries (256 KiB, 0.4% of the segment).
/// Random reads (path history, blame) are as fast as this scan is short.
pub const SPARSE_INDEX_INTERVAL_BYTES: u64 = 4 * 1024;
const MAGIC: &[u8; 8] = b"CAIRNIDX";
const VERSION: u32 = 1;
const FIXED_LEN: usize = 80;
/// Bytes of one entry: LSN and offset, each a u64.
pub(crate) const ENTRY_LEN: usize = 16;
/// The most entries an index file may claim; a segment is at most 4 GiB, so
/// this bounds the allocation made from a (CRC-checked) count.
const MAX_ENTRIES: u64 = (u32::MAX as u64 / SPARSE_INDEX_INTERVAL_BYTES + 1) * 2;
/// The largest `.idx` file that can be whole: longer ones are not read.
pub(crate) const MAX_FILE_LEN: u64 = FIXED_LEN as u64 + ENTRY_LEN as u64 * MAX_ENTRIES + 4;

/// (LSN, byte offset in the segment file) entries, ascending in both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SparseIndex {
    entries: Vec<(Lsn, u64)>,
    next_at: u64,
}

impl SparseIndex {
    /// Notes the frame `lsn` at `off`; keeps it if it is the first one or the
    /// first one past the next interval boundary.
    /// Returns true if it was kept.
    pub(crate) fn note(&mut self, lsn: Lsn, off: u64) -> bool {
        if self.entries.is_empty() || off >= self.next_at {
            self.entries.push((lsn, off));
            self.next_at = off + SPARSE_INDEX_INTERVAL_BYTES;
            return true;
        }
        false
    }

    /// The entries, ascending.
    pub(crate) fn entries(&self) -> &[(Lsn, u64)] {
        &self.entries
    }

    /// The index of `entries` as read from a file (ascending, checked by
    /// the caller where the format requires it).
    pub(crate) fn from_entries(entries: Vec<(Lsn, u64)>) -> SparseIndex {
        let next_at = entries
            .last()
            .map_or(0, |&(_, off)| off + SPARSE_INDEX_INTERVAL_BYTES);
        SparseIndex { entries, next_at }
    }

    /// Appends an entry (from another index) without the interval rule.
    pub(crate) fn push(&mut self, lsn: Lsn, off: u64) {
        self.entries.push((lsn, off));
        self.next_at = off + SPARSE_INDEX_INTERVAL_BYTES;
    }

    /// Drops entries at or past `len` (after truncating a torn tail).
    pub(crate) fn truncate_to(&mut self, len: u64) {
        self.entries.retain(|&(_, off)| off < len);
        self.next_at = self
            .entries
            .last()
            .map_or(0, |&(_, off)| off + SPARSE_INDEX_INTERVAL_BYTES);
    }

    /// The offset from which to scan forward to reach `lsn`: the entry with
    /// the largest LSN not above it, if any.
    pub(crate) fn seek(&self, lsn: Lsn) -> Option<(Lsn, u64)> {
        let i = self.entries.partition_point(|&(l, _)| l <= lsn);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// The offset of the first entry whose LSN is above `lsn`, if any:
    /// the frame `lsn` ends at or before it, so a read from
    /// [`SparseIndex::seek`]'s offset to it holds that whole frame.
    pub(crate) fn next_after(&self, lsn: Lsn) -> Option<u64> {
        let i = self.entries.partition_point(|&(l, _)| l <= lsn);
        self.entries.get(i).map(|&(_, off)| off)
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Encodes the `.idx` file for a sealed segment.
    pub(crate) fn encode(&self, first_lsn: Lsn, footer: &SegmentFooter) -> Vec<u8> {
        let mut b = Vec::with_capacity(FIXED_LEN + ENTRY_LEN * self.entries.len() + 4);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&first_lsn.0.to_le_bytes());
        b.extend_from_slice(&footer.last_lsn.0.to_le_bytes());
        b.extend_from_slice(&u64::from(footer.frames_len).to_le_bytes());
        b.extend_from_slice(&footer.last_chain.0);
        b.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for &(lsn, off) in &self.entries {
            b.extend_from_slice(&lsn.0.to_le_bytes());
            b.extend_from_slice(&off.to_le_bytes());
        }
        let crc = crc(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes an `.idx` file; `None` if it is damaged or does not belong to
    /// the segment described by `first_lsn` and `footer` (stale).
    #[cfg(test)]
    pub(crate) fn decode(
        bytes: &[u8],
        first_lsn: Lsn,
        footer: &SegmentFooter,
    ) -> Option<SparseIndex> {
        SparseIndex::read(&mut SliceAt(bytes), bytes.len() as u64, first_lsn, footer)
    }

    /// Reads and decodes an `.idx` file of `len` bytes through `src`;
    /// `None` if it is damaged or does not belong to the segment described
    /// by `first_lsn` and `footer` (stale). The entries are read in pieces
    /// of [`READ_CHUNK_BYTES`] straight into the index (sized from the
    /// count, which the file's length confirms), never into a copy of the
    /// whole file first.
    pub(crate) fn read(
        src: &mut dyn ReadAt,
        len: u64,
        first_lsn: Lsn,
        footer: &SegmentFooter,
    ) -> Option<SparseIndex> {
        if len < (FIXED_LEN + 4) as u64 {
            return None;
        }
        let mut head = [0u8; FIXED_LEN];
        src.read_exact_at(&mut head, 0)?;
        let n = u64_at(&head, 72);
        if n > MAX_ENTRIES || len != (FIXED_LEN + ENTRY_LEN * n as usize + 4) as u64 {
            return None;
        }
        let mut crc = crc32fast::Hasher::new_with_initial(CRC_SEED);
        crc.update(&head);
        let entries = read_entries(src, FIXED_LEN as u64, n as usize, &mut crc)?;
        let mut stored = [0u8; 4];
        src.read_exact_at(&mut stored, len - 4)?;
        if crc.finalize().to_le_bytes() != stored
            || &head[0..8] != MAGIC
            || u32_at(&head, 8) != VERSION
        {
            return None;
        }
        let mut chain = [0u8; 32];
        chain.copy_from_slice(&head[40..72]);
        if u64_at(&head, 16) != first_lsn.0
            || u64_at(&head, 24) != footer.last_lsn.0
            || u64_at(&head, 32) != u64::from(footer.frames_len)
            || ChainHash(chain) != footer.last_chain
        {
            return None;
        }
        if entries
            .windows(2)
            .any(|w| w[0].0 >= w[1].0 || w[0].1 >= w[1].1)
        {
            return None;
        }
        Some(SparseIndex::from_entries(entries))
    }
}

/// A sealed segment's `.idx` file searched where it lies: mapped, checked
/// whole at load exactly as [`SparseIndex::read`] checks it (length, CRC,
/// magic, version, the segment it describes, entries ascending), then
/// searched in place by [`MappedIndex::seek`]. A new process reading a few
/// records of a segment no longer copies its whole index into memory (a
/// 64 MiB segment's is ~180 KiB: ~44 pages of a private copy, faulted in
/// and zeroed at every open, besides the reads into it). The file is never
/// changed in place once written (`segment::write_index` writes a new
/// file), so the mapped bytes stay the ones checked.
pub(crate) struct MappedIndex {
    bytes: crate::vfs::Mapped,
    n: usize,
}

impl std::fmt::Debug for MappedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedIndex")
            .field("entries", &self.n)
            .finish()
    }
}

impl MappedIndex {
    /// The index in `bytes` (a whole `.idx` file); `None` if it is damaged
    /// or does not belong to the segment described by `first_lsn` and
    /// `footer` (stale): the same checks as [`SparseIndex::read`].
    pub(crate) fn check(
        bytes: crate::vfs::Mapped,
        first_lsn: Lsn,
        footer: &SegmentFooter,
    ) -> Option<MappedIndex> {
        let len = bytes.len() as u64;
        if len < (FIXED_LEN + 4) as u64 || len > MAX_FILE_LEN {
            return None;
        }
        let n = u64_at(&bytes, 72);
        if n > MAX_ENTRIES || len != (FIXED_LEN + ENTRY_LEN * n as usize + 4) as u64 {
            return None;
        }
        let (body, stored) = bytes.split_at(bytes.len() - 4);
        if crc(body).to_le_bytes() != stored || &body[0..8] != MAGIC || u32_at(body, 8) != VERSION {
            return None;
        }
        let mut chain = [0u8; 32];
        chain.copy_from_slice(&body[40..72]);
        if u64_at(body, 16) != first_lsn.0
            || u64_at(body, 24) != footer.last_lsn.0
            || u64_at(body, 32) != u64::from(footer.frames_len)
            || ChainHash(chain) != footer.last_chain
        {
            return None;
        }
        let idx = MappedIndex {
            bytes,
            n: n as usize,
        };
        let ascending = (1..idx.n).all(|i| {
            let (a, b) = (idx.entry(i - 1), idx.entry(i));
            a.0 < b.0 && a.1 < b.1
        });
        ascending.then_some(idx)
    }

    /// Entry `i` (below the count, checked at load).
    fn entry(&self, i: usize) -> (Lsn, u64) {
        let at = FIXED_LEN + i * ENTRY_LEN;
        (Lsn(u64_at(&self.bytes, at)), u64_at(&self.bytes, at + 8))
    }

    /// As [`SparseIndex::seek`]: the entry with the largest LSN not above
    /// `lsn`, found by a binary search of the mapped entries.
    pub(crate) fn seek(&self, lsn: Lsn) -> Option<(Lsn, u64)> {
        self.first_above(lsn).checked_sub(1).map(|i| self.entry(i))
    }

    /// As [`SparseIndex::next_after`].
    pub(crate) fn next_after(&self, lsn: Lsn) -> Option<u64> {
        let i = self.first_above(lsn);
        (i < self.n).then(|| self.entry(i).1)
    }

    /// The index of the first entry whose LSN is above `lsn` (the count if
    /// none is): a binary search of the mapped entries.
    fn first_above(&self, lsn: Lsn) -> usize {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid).0 <= lsn {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The entries, copied out (tests compare them with a [`SparseIndex`]).
    #[cfg(test)]
    pub(crate) fn to_index(&self) -> SparseIndex {
        SparseIndex::from_entries((0..self.n).map(|i| self.entry(i)).collect())
    }
}

/// A sealed segment's sparse index as a read seeks in it: held in memory
/// (the writer's, or one rebuilt from the frames) or searched where its
/// file lies ([`MappedIndex`]).
#[derive(Debug)]
pub(crate) enum SealedEntries {
    /// In memory.
    Loaded(SparseIndex),
    /// The `.idx` file, mapped and checked.
    Mapped(MappedIndex),
}

impl Default for SealedEntries {
    fn default() -> Self {
        SealedEntries::Loaded(SparseIndex::default())
    }
}

impl SealedEntries {
    /// As [`SparseIndex::seek`].
    pub(crate) fn seek(&self, lsn: Lsn) -> Option<(Lsn, u64)> {
        match self {
            SealedEntries::Loaded(i) => i.seek(lsn),
            SealedEntries::Mapped(m) => m.seek(lsn),
        }
    }

    /// As [`SparseIndex::next_after`].
    pub(crate) fn next_after(&self, lsn: Lsn) -> Option<u64> {
        match self {
            SealedEntries::Loaded(i) => i.next_after(lsn),
            SealedEntries::Mapped(m) => m.next_after(lsn),
        }
    }
}

/// Bytes of index entries read at a time when an index (a sealed
/// segment's `.idx`, the tail's in `tail.state`) is read from its file:
/// 1,024 entries, 16 KiB. Read in pieces of this size into one reused
/// buffer, an index costs a new process only its own memory, not also a
/// copy of the whole file (a 64 MiB segment's index is 256 KiB, each page
/// of a copy one more page fault at every open).
pub(crate) const READ_CHUNK_BYTES: usize = 1024 * ENTRY_LEN;

/// Somewhere to read bytes at an offset: a file, or bytes in memory.
pub(crate) trait ReadAt {
    /// Fills `buf` from byte `at`; `None` if that many bytes are not there
    /// or cannot be read.
    fn read_exact_at(&mut self, buf: &mut [u8], at: u64) -> Option<()>;
}

impl ReadAt for &dyn VfsFile {
    fn read_exact_at(&mut self, buf: &mut [u8], at: u64) -> Option<()> {
        VfsFile::read_exact_at(*self, buf, at).ok()
    }
}

/// The reads of the file `path` that `SimVfs` `sim` serves while `f` runs.
#[cfg(test)]
pub(crate) fn reads_during(
    sim: &crate::vfs::SimVfs,
    path: &std::path::Path,
    f: impl FnOnce(),
) -> usize {
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (seen, want) = (n.clone(), path.to_path_buf());
    sim.set_fault_hook(move |op| {
        if matches!(op, crate::vfs::sim::SimOp::Read { path } if *path == want) {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        None
    });
    f();
    sim.clear_faults();
    n.load(std::sync::atomic::Ordering::SeqCst)
}

/// Bytes in memory read as a file (`decode` of bytes already read).
pub(crate) struct SliceAt<'a>(pub(crate) &'a [u8]);

impl ReadAt for SliceAt<'_> {
    fn read_exact_at(&mut self, buf: &mut [u8], at: u64) -> Option<()> {
        let at = usize::try_from(at).ok()?;
        buf.copy_from_slice(self.0.get(at..at.checked_add(buf.len())?)?);
        Some(())
    }
}

/// Reads `n` (LSN, offset) entries of [`ENTRY_LEN`] bytes from byte `at`
/// of `src`, in pieces of [`READ_CHUNK_BYTES`], feeding every byte to
/// `crc`. The caller has bounded `n` (by a maximum and by the file's
/// length). `None` if a read fails.
pub(crate) fn read_entries(
    src: &mut dyn ReadAt,
    at: u64,
    n: usize,
    crc: &mut crc32fast::Hasher,
) -> Option<Vec<(Lsn, u64)>> {
    let mut entries = Vec::with_capacity(n);
    let mut buf = vec![0u8; READ_CHUNK_BYTES.min(n * ENTRY_LEN)];
    let mut off = at;
    while entries.len() < n {
        let take = (n - entries.len()).min(READ_CHUNK_BYTES / ENTRY_LEN) * ENTRY_LEN;
        let piece = &mut buf[..take];
        src.read_exact_at(piece, off)?;
        crc.update(piece);
        for e in piece.chunks_exact(ENTRY_LEN) {
            entries.push((Lsn(u64_at(e, 0)), u64_at(e, 8)));
        }
        off += take as u64;
    }
    Some(entries)
}

/// The last LSN an `.idx` file's header records for its segment, if the
/// file reads back whole (CRC, magic, version): what a sealed segment held,
/// even after the segment file itself is gone.
pub(crate) fn recorded_last_lsn(bytes: &[u8]) -> Option<Lsn> {
    if bytes.len() < FIXED_LEN + 4 {
        return None;
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    if crc(body).to_le_bytes() != tail || &body[0..8] != MAGIC || u32_at(body, 8) != VERSION {
        return None;
    }
    Some(Lsn(u64_at(body, 24)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn footer() -> SegmentFooter {
        SegmentFooter {
            record_count: 1000,
            last_lsn: Lsn(1000),
            last_chain: ChainHash([3; 32]),
            frames_len: 1_000_000,
        }
    }

    fn sample() -> SparseIndex {
        let mut idx = SparseIndex::default();
        for i in 0..1000u64 {
            idx.note(Lsn(i + 1), 64 + i * 1000);
        }
        idx
    }

    #[test]
    fn entries_every_interval_and_seek() {
        let idx = sample();
        // One entry for the first record and then one per interval: with
        // 1,000-byte records, every `per`th record.
        let per = SPARSE_INDEX_INTERVAL_BYTES.div_ceil(1000);
        assert_eq!(idx.len() as u64, 1000u64.div_ceil(per));
        assert_eq!(idx.seek(Lsn(1)), Some((Lsn(1), 64)));
        let (lsn, off) = idx.seek(Lsn(500)).unwrap();
        assert!(lsn <= Lsn(500) && 500 - lsn.0 < per);
        assert_eq!(off, 64 + (lsn.0 - 1) * 1000);
        assert_eq!(SparseIndex::default().seek(Lsn(3)), None);
    }

    #[test]
    fn round_trip_stale_and_damage() {
        let idx = sample();
        let f = footer();
        let bytes = idx.encode(Lsn(1), &f);
        assert_eq!(SparseIndex::decode(&bytes, Lsn(1), &f), Some(idx));
        assert_eq!(
            SparseIndex::decode(&bytes, Lsn(2), &f),
            None,
            "other segment"
        );
        let mut other = f;
        other.last_chain = ChainHash([4; 32]);
        assert_eq!(SparseIndex::decode(&bytes, Lsn(1), &other), None, "stale");
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert_eq!(SparseIndex::decode(&bad, Lsn(1), &f), None, "flip at {i}");
        }
        assert_eq!(SparseIndex::decode(&bytes[..50], Lsn(1), &f), None);
    }

    #[test]
    fn recorded_last_lsn_reads_a_whole_file_only() {
        let bytes = sample().encode(Lsn(1), &footer());
        assert_eq!(recorded_last_lsn(&bytes), Some(Lsn(1000)));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert_eq!(recorded_last_lsn(&bad), None, "flip at {i}");
        }
        assert_eq!(recorded_last_lsn(&bytes[..50]), None);
    }

    #[test]
    fn truncate_drops_entries_past_the_end() {
        let mut idx = sample();
        idx.truncate_to(64 + 200_000);
        assert!(idx.entries.iter().all(|&(_, o)| o < 64 + 200_000));
        idx.note(Lsn(2000), 64 + 300_000);
        assert_eq!(idx.entries.last(), Some(&(Lsn(2000), 64 + 300_000)));
    }
}
