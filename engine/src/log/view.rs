//! The committed state of a log as readers see it (sealed segments plus the
//! committed prefix of the tail), and the iterator over it. Shared by the
//! writer ([`Log`](super::Log)) and by [`LogReader`](super::LogReader).

use std::path::PathBuf;
use std::sync::Arc;

use cairn_codec::frame::{self, Frame, HEADER_LEN, MAX_STORED_BODY_BYTES};
use cairn_codec::segment::{SegmentHeader, SEGMENT_HEADER_LEN};
use cairn_codec::{Event, Lsn};

use super::dict::LogDicts;
use super::segment::{corrupt, Sealed};
use super::sparse_index::SparseIndex;
use super::{Durability, Head, LogStats, Record};
use crate::vfs::VfsFile;
use crate::{EngineError, Result};

/// Bytes read from the tail segment (or a sealed one read by range, see
/// [`Source::File`]) at a time while iterating: large enough to amortise
/// the system call, small enough to stay in cache.
const TAIL_READ_CHUNK_BYTES: usize = 256 * 1024;

/// The first read of a cursor over a file (the tail, or a sealed segment
/// read by range): a point read scans at most
/// about one sparse-index interval, so it should not pay for a whole chunk.
/// Later reads double up to [`TAIL_READ_CHUNK_BYTES`].
const FIRST_TAIL_READ_BYTES: usize = 2 * super::SPARSE_INDEX_INTERVAL_BYTES as usize;

/// The bytes of sparse-index windows one read plan of a sorted read
/// ([`Log::read_sorted`](super::Log::read_sorted)) names at most (see [`VfsFile::will_read`]): a
/// long posting list in a segment of tens of MiB is planned in portions
/// of about this much, so what a file fetches for a plan and holds until
/// it is read stays bounded, while a portion still names hundreds of
/// windows (a window is one to two 4 KiB sparse-index intervals) to
/// fetch together.
pub const MAX_PLANNED_READ_BYTES: u64 = 4 << 20;

/// The open (unsealed) segment, as far as it is committed.
#[derive(Debug)]
pub(crate) struct Tail {
    /// The segment file.
    pub path: PathBuf,
    /// An open handle on it.
    pub file: Arc<dyn VfsFile>,
    /// Its header.
    pub header: SegmentHeader,
    /// Bytes of the file that hold committed records (header included).
    pub committed_len: u64,
    /// The last committed record.
    pub head: Head,
    /// Sparse index of the committed records.
    pub index: SparseIndex,
    /// Damage a reader found after the committed records (intact records
    /// follow a frame that is not): readers see the records before it,
    /// and reading to the head then fails naming it.
    pub damage: Option<TailDamage>,
}

/// Where and how the tail is damaged (see [`Tail::damage`]).
#[derive(Clone, Debug)]
pub(crate) struct TailDamage {
    /// Byte offset of the first frame that is not intact.
    pub offset: u64,
    /// The LSN expected there.
    pub lsn: Lsn,
    /// What is wrong.
    pub detail: String,
}

impl Tail {
    /// The error reading past [`Tail::damage`] gives.
    pub fn damage_error(&self) -> Option<EngineError> {
        self.damage
            .as_ref()
            .map(|d| super::segment::corrupt(&self.path, d.offset, Some(d.lsn), d.detail.clone()))
    }
}

/// Sealed segments and the committed part of the tail.
#[derive(Debug)]
pub(crate) struct View {
    /// Sealed segments in LSN order.
    pub sealed: Vec<Arc<Sealed>>,
    /// The tail segment, if there is one.
    pub tail: Option<Tail>,
    /// The log's dictionaries, for bodies that need one.
    pub dicts: Arc<LogDicts>,
}

impl View {
    /// The last committed record.
    pub fn head(&self) -> Head {
        if let Some(t) = &self.tail {
            return t.head;
        }
        self.sealed.last().map_or_else(Head::default, |s| Head {
            last_lsn: s.footer.last_lsn,
            chain: s.footer.last_chain,
        })
    }

    /// The sealed segments that hold records, in LSN order.
    pub fn sealed_spans(&self) -> Vec<super::SegmentSpan> {
        self.sealed
            .iter()
            .filter(|s| s.footer.record_count > 0)
            .map(|s| super::SegmentSpan {
                first: s.header.first_lsn,
                last: s.footer.last_lsn,
                last_chain: s.footer.last_chain,
            })
            .collect()
    }

    /// Records from `from` (clamped to 1) to the current head.
    pub fn iter_from(&self, from: Lsn) -> LogIter {
        self.iter_range(from, self.head().last_lsn)
    }

    /// Records from `from` (clamped to 1) to `end` inclusive (at most the head).
    pub fn iter_range(&self, from: Lsn, end: Lsn) -> LogIter {
        let from = from.max(Lsn::FIRST);
        // Reading to the head of a damaged tail ends with the damage.
        let then_fail = self
            .tail
            .as_ref()
            .filter(|_| end >= self.head().last_lsn)
            .and_then(Tail::damage_error);
        let end = end.min(self.head().last_lsn);
        let mut segs = Vec::new();
        if from <= end {
            let i = self
                .sealed
                .partition_point(|s| s.header.first_lsn <= from)
                .saturating_sub(1);
            for s in self.sealed.iter().skip(i) {
                if s.header.first_lsn > end {
                    // Past the range: a point read names one segment.
                    break;
                }
                if s.footer.last_lsn < from || s.footer.record_count == 0 {
                    continue;
                }
                segs.push(SegRef {
                    path: s.path.clone(),
                    first: s.header.first_lsn,
                    start: if segs.is_empty() {
                        s.index().seek(from)
                    } else {
                        None
                    },
                    source: match s.range_file() {
                        Some(f) => Source::File(f.clone()),
                        None => Source::Sealed(s.clone()),
                    },
                    limit: s.frames_end(),
                });
            }
            if let Some(t) = &self.tail {
                if t.head.last_lsn >= from
                    && t.head.last_lsn >= t.header.first_lsn
                    && t.header.first_lsn <= end
                {
                    segs.push(SegRef {
                        path: t.path.clone(),
                        first: t.header.first_lsn,
                        start: if segs.is_empty() {
                            t.index.seek(from)
                        } else {
                            None
                        },
                        source: Source::File(t.file.clone()),
                        limit: t.committed_len,
                    });
                }
            }
        }
        LogIter {
            segs: segs.into_iter(),
            dicts: self.dicts.clone(),
            cur: None,
            next: from,
            end,
            failed: false,
            then_fail,
        }
    }

    /// Calls `f` with every committed frame from `from` (CRC checked, LSNs
    /// checked, bodies not decoded); returns (frames, bytes of frames).
    pub fn for_each_frame(&self, from: Lsn, mut f: impl FnMut(&Frame<'_>)) -> Result<(u64, u64)> {
        self.frames_while(from, |fr| {
            f(fr);
            true
        })
    }

    /// As [`View::for_each_frame`], stopping as soon as `f` returns false.
    pub fn frames_while(
        &self,
        from: Lsn,
        mut f: impl FnMut(&Frame<'_>) -> bool,
    ) -> Result<(u64, u64)> {
        let from = from.max(Lsn::FIRST);
        let mut it = self.iter_range(from, self.head().last_lsn);
        let damage = it.then_fail.take();
        let (mut frames, mut bytes) = (0u64, 0u64);
        let mut go = true;
        for seg in it.segs {
            let mut c = Cursor::new(seg);
            while let Some(r) = c.next_frame(|fr| {
                if fr.lsn >= from {
                    go = f(&fr);
                    frames += 1;
                    bytes += fr.len() as u64;
                }
                Ok(())
            }) {
                r?;
                if !go {
                    return Ok((frames, bytes));
                }
            }
        }
        match damage {
            Some(e) => Err(e),
            None => Ok((frames, bytes)),
        }
    }

    /// The record `lsn`.
    pub fn read(&self, lsn: Lsn) -> Result<Record> {
        let last = self.head().last_lsn;
        if lsn == Lsn(0) || lsn > last {
            return Err(EngineError::LsnOutOfRange { lsn, last });
        }
        Self::first_of(self.iter_range(lsn, lsn), lsn)
    }

    /// The first record of `it`, which should be `lsn`.
    pub fn first_of(mut it: LogIter, lsn: Lsn) -> Result<Record> {
        match it.next() {
            Some(r) => r,
            None => Err(EngineError::LsnOutOfRange {
                lsn,
                last: Lsn(lsn.0.saturating_sub(1)),
            }),
        }
    }

    /// Calls `f` with the records `lsns` names, in that order, until it
    /// returns false: one walk, not a read per record. `lsns` should
    /// ascend (a posting list); an LSN at or below the one before starts
    /// a fresh walk of its segment, so any order gives the records named.
    /// One cursor per segment is kept: for the next LSN it jumps to the
    /// sparse-index entry before it when that lies past the cursor
    /// (keeping what the cursor has read if the entry is inside it), else
    /// steps forward from where it is. Every record handed out is checked
    /// as [`View::read`] checks it (CRC and LSN); frames stepped over have
    /// their header checked as [`View::iter_range`] steps over them. A
    /// file (the tail) is read from the entry to the next entry after the
    /// LSN, not in whole chunks, so sparse LSNs cost what they use.
    ///
    /// Before reading a file it plans: it tells the file
    /// ([`VfsFile::will_read`]) the windows of the LSNs ahead in that
    /// segment, up to [`MAX_PLANNED_READ_BYTES`] of them, and a file that
    /// takes the plan (an archive read in place fetches the windows
    /// together) is then read window by window, never past one; a file
    /// that does not is read as above.
    ///
    /// Errors: [`EngineError::LsnOutOfRange`] for an LSN of 0 or past the
    /// head, as [`View::read`]; a damaged frame names its segment, offset
    /// and LSN; records before it have been handed to `f`.
    pub fn read_sorted(&self, lsns: &[Lsn], mut f: impl FnMut(Record) -> bool) -> Result<()> {
        let last = self.head().last_lsn;
        let mut cur: Option<(SegKey, Cursor)> = None;
        // The segment the last plan was for, the end (in `lsns`) of the
        // LSNs it covers, and whether its file took it (one that does not
        // is asked once: its plan covers the rest of the segment).
        let mut plan: Option<(SegKey, usize, bool)> = None;
        for (n, &lsn) in lsns.iter().enumerate() {
            if lsn == Lsn(0) || lsn > last {
                return Err(EngineError::LsnOutOfRange { lsn, last });
            }
            let ended = || {
                EngineError::Invalid(format!(
                    "the log ended before LSN {lsn} (expected records up to {last})"
                ))
            };
            let key = self.seg_of(lsn).ok_or_else(ended)?;
            let reuse = matches!(&cur, Some((k, c)) if *k == key && c.expect <= lsn);
            if !reuse {
                cur = Some((key, Cursor::new(self.seg_ref(key).ok_or_else(ended)?)));
            }
            let Some((_, c)) = cur.as_mut() else {
                return Err(ended());
            };
            let covered = matches!(plan, Some((k, end, _)) if k == key && n < end);
            if !covered {
                plan = Some((key, usize::MAX, false));
                if let Source::File(file) = &c.seg.source {
                    let (ranges, count) = self.plan(key, &lsns[n..], c.seg.limit);
                    if file.will_read(&ranges) {
                        plan = Some((key, n + count, true));
                    }
                }
            }
            c.planned = matches!(plan, Some((_, _, true)));
            let (entry, window_end) = self.index_at(key, lsn);
            if let Some((elsn, eoff)) = entry.filter(|(elsn, _)| *elsn > c.expect) {
                c.off = eoff;
                c.expect = elsn;
                c.chunk = FIRST_TAIL_READ_BYTES;
                c.jumped = true;
            }
            // A planned read stops at the end of the window planned (the
            // segment's end after its last sparse-index entry).
            c.window_end = match c.planned {
                true => Some(window_end.unwrap_or(c.seg.limit)),
                false => window_end,
            };
            while c.expect < lsn {
                match c.skip_frame() {
                    None => return Err(ended()),
                    Some(r) => r?,
                }
            }
            let dicts = &self.dicts;
            let rec = c.next_frame(|fr| {
                let body = dicts.body(&fr)?;
                let event = Event::decode_body(&body)?;
                Ok(Record {
                    lsn: fr.lsn,
                    chain: fr.chain,
                    event,
                })
            });
            match rec {
                None => return Err(ended()),
                Some(r) => {
                    if !f(r?) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// The sparse-index entry of segment `key` to start from for `lsn`,
    /// and the offset of the next entry after it (the frame of `lsn`
    /// ends at or before it), if there is one.
    fn index_at(&self, key: SegKey, lsn: Lsn) -> (Option<(Lsn, u64)>, Option<u64>) {
        match key {
            SegKey::Sealed(i) => {
                let ix = self.sealed[i].index();
                (ix.seek(lsn), ix.next_after(lsn))
            }
            SegKey::Tail => match &self.tail {
                Some(t) => (t.index.seek(lsn), t.index.next_after(lsn)),
                None => (None, None),
            },
        }
    }

    /// The LSNs of segment `key` (its frames ending at `limit`) in
    /// `lsns`: the byte ranges [`View::read_sorted`] will read for as
    /// many of those at the front as fit in [`MAX_PLANNED_READ_BYTES`]
    /// (at least one), each from the sparse-index entry at or before the
    /// LSN to the next entry (or `limit`), sorted and merged where they
    /// touch; and how many of `lsns` they cover. The count stops at the
    /// first LSN outside the segment.
    fn plan(&self, key: SegKey, lsns: &[Lsn], limit: u64) -> (Vec<(u64, u64)>, usize) {
        let (first, last) = match key {
            SegKey::Sealed(i) => {
                let s = &self.sealed[i];
                (s.header.first_lsn, s.footer.last_lsn)
            }
            SegKey::Tail => match &self.tail {
                Some(t) => (t.header.first_lsn, t.head.last_lsn),
                None => return (Vec::new(), 0),
            },
        };
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let (mut bytes, mut count) = (0u64, 0usize);
        for &lsn in lsns {
            if lsn < first || lsn > last {
                break;
            }
            let (entry, next) = self.index_at(key, lsn);
            let start = entry.map_or(SEGMENT_HEADER_LEN as u64, |(_, off)| off);
            let end = next.unwrap_or(limit).min(limit);
            if ranges.last() == Some(&(start, end)) {
                count += 1;
                continue;
            }
            let len = end.saturating_sub(start);
            if count > 0 && bytes + len > MAX_PLANNED_READ_BYTES {
                break;
            }
            bytes += len;
            count += 1;
            ranges.push((start, end));
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (s, e) in ranges {
            match merged.last_mut() {
                Some(m) if s <= m.1 => m.1 = m.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        (merged, count)
    }

    /// The segment holding `lsn` (at most the head), if any.
    fn seg_of(&self, lsn: Lsn) -> Option<SegKey> {
        let i = self.sealed.partition_point(|s| s.header.first_lsn <= lsn);
        if let Some(s) = i.checked_sub(1).map(|i| &self.sealed[i]) {
            if s.footer.record_count > 0 && s.footer.last_lsn >= lsn {
                return Some(SegKey::Sealed(i - 1));
            }
        }
        self.tail
            .as_ref()
            .filter(|t| t.header.first_lsn <= lsn && lsn <= t.head.last_lsn)
            .map(|_| SegKey::Tail)
    }

    /// Segment `key` to walk from its first frame, read as
    /// [`View::iter_range`] reads it (`None` for a tail there is not).
    fn seg_ref(&self, key: SegKey) -> Option<SegRef> {
        match (key, &self.tail) {
            (SegKey::Sealed(i), _) => {
                let s = self.sealed.get(i)?;
                Some(SegRef {
                    path: s.path.clone(),
                    first: s.header.first_lsn,
                    start: None,
                    source: match s.sparse_file() {
                        Some(f) => Source::File(f.clone()),
                        None => Source::Sealed(s.clone()),
                    },
                    limit: s.frames_end(),
                })
            }
            (SegKey::Tail, Some(t)) => Some(SegRef {
                path: t.path.clone(),
                first: t.header.first_lsn,
                start: None,
                source: Source::File(t.file.clone()),
                limit: t.committed_len,
            }),
            (SegKey::Tail, None) => None,
        }
    }

    /// A copy that shares the sealed segments and the tail file handle, so
    /// long work (verify) does not hold the writer's view lock.
    pub fn snapshot(&self) -> View {
        View {
            sealed: self.sealed.clone(),
            tail: self.tail.as_ref().map(|t| Tail {
                path: t.path.clone(),
                file: t.file.clone(),
                header: t.header,
                committed_len: t.committed_len,
                head: t.head,
                index: t.index.clone(),
                damage: t.damage.clone(),
            }),
            dicts: self.dicts.clone(),
        }
    }

    /// Counts and sizes.
    pub fn stats(&self, durability: Durability) -> LogStats {
        let tail_len = self.tail.as_ref().map_or(0, |t| t.committed_len);
        LogStats {
            segments: self.sealed.len() as u64 + u64::from(self.tail.is_some()),
            sealed_segments: self.sealed.len() as u64,
            records: self.head().last_lsn.0,
            bytes: self.sealed.iter().map(|s| s.file_len()).sum::<u64>() + tail_len,
            durability,
            dictionary: self.dicts.dicts.current().map(|d| d.id),
        }
    }
}

/// Where a segment's bytes come from.
enum Source {
    /// A sealed segment's map.
    Sealed(Arc<Sealed>),
    /// Reads of an open file, in chunks that grow as the cursor goes: the
    /// tail, or a sealed segment on a file system that cannot map cheaply
    /// (an archive read in place, see [`Sealed::range_file`]).
    File(Arc<dyn VfsFile>),
}

/// Which segment of a [`View`] a [`View::read_sorted`] cursor walks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SegKey {
    /// `View::sealed[i]`.
    Sealed(usize),
    /// The tail.
    Tail,
}

/// One segment to iterate over.
struct SegRef {
    path: PathBuf,
    first: Lsn,
    /// Where to start scanning (from the sparse index), for the first
    /// segment only; otherwise the first frame.
    start: Option<(Lsn, u64)>,
    source: Source,
    /// Offset just past the last committed frame.
    limit: u64,
}

/// A position in one segment.
struct Cursor {
    seg: SegRef,
    off: u64,
    expect: Lsn,
    buf: Vec<u8>,
    buf_at: u64,
    /// Bytes the next read of the tail asks for.
    chunk: usize,
    /// Where the frame sought lies wholly before (the next sparse-index
    /// entry after it, see [`View::read_sorted`]): a file read past the
    /// buffer stops there rather than taking a chunk.
    window_end: Option<u64>,
    /// Whether the cursor jumped to a sparse-index entry since its last
    /// read: the next read then takes only the window; a cursor reading
    /// on (dense LSNs) takes chunks that double.
    jumped: bool,
    /// Whether the file took a read plan that covers the LSN sought (see
    /// [`View::read_sorted`]): a read then takes the window, never more.
    planned: bool,
}

impl Cursor {
    fn new(seg: SegRef) -> Cursor {
        let (expect, off) = seg.start.unwrap_or((seg.first, SEGMENT_HEADER_LEN as u64));
        Cursor {
            seg,
            off,
            expect,
            buf: Vec::new(),
            buf_at: 0,
            chunk: FIRST_TAIL_READ_BYTES,
            window_end: None,
            jumped: false,
            planned: false,
        }
    }

    /// `len` bytes at `off` (which the caller checked lie below the limit).
    fn bytes(&mut self, off: u64, len: usize) -> Result<&[u8]> {
        match &self.seg.source {
            Source::Sealed(s) => Ok(&s.data()?[off as usize..off as usize + len]),
            Source::File(file) => {
                let have =
                    off >= self.buf_at && off + len as u64 <= self.buf_at + self.buf.len() as u64;
                if !have {
                    let room = (self.seg.limit - off) as usize;
                    let window = self.window_end.take().filter(|e| *e > off);
                    let jumped = std::mem::take(&mut self.jumped);
                    let want = match window {
                        Some(e) if jumped || self.planned => (e - off) as usize,
                        _ => {
                            let c = self.chunk;
                            self.chunk = (self.chunk * 2).min(TAIL_READ_CHUNK_BYTES);
                            window.map_or(c, |e| c.max((e - off) as usize))
                        }
                    };
                    let want = len.max(want).min(room).max(len);
                    self.buf.resize(want, 0);
                    file.read_exact_at(&mut self.buf, off)
                        .map_err(|e| EngineError::io("read log segment", &self.seg.path, e))?;
                    self.buf_at = off;
                }
                let start = (off - self.buf_at) as usize;
                Ok(&self.buf[start..start + len])
            }
        }
    }

    /// Steps over the next frame, which precedes the records asked for,
    /// reading only its header: its length (bounded as in
    /// [`Cursor::next_frame`]) and its LSN, which must be the one
    /// expected. Its CRC is not computed: nothing of it is handed out, and
    /// the frame that is handed out is checked whole (CRC and LSN), so a
    /// damaged length here can only end in an error, never in a wrong
    /// record. A point read (blame, history, the index files' postings)
    /// thus costs one CRC, not one per frame of a sparse-index interval.
    /// `None` at the limit.
    fn skip_frame(&mut self) -> Option<Result<()>> {
        let (off, expect) = (self.off, self.expect);
        let remain = self.seg.limit.checked_sub(off).filter(|r| *r > 0)?;
        let result = self.header_at(off, remain).and_then(|(total, lsn)| {
            if lsn != expect {
                return Err(Fail::Detail(format!(
                    "record has LSN {lsn} where LSN {expect} was expected"
                )));
            }
            self.off += total;
            self.expect = expect.next();
            Ok(())
        });
        Some(result.map_err(|e| self.fail_at(off, expect, e)))
    }

    /// The frame header at `off`, `remain` committed bytes before the
    /// limit: the frame's whole length (bounded by [`MAX_STORED_BODY_BYTES`]
    /// and by what is left) and the LSN its header names.
    fn header_at(&mut self, off: u64, remain: u64) -> std::result::Result<(u64, Lsn), Fail> {
        if remain < HEADER_LEN as u64 {
            return Err(Fail::Detail(format!(
                "{remain} bytes at the end of the committed records are not a whole frame"
            )));
        }
        let h = self.bytes(off, HEADER_LEN).map_err(Fail::Engine)?;
        let body_len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as u64;
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&h[12..20]);
        let total = HEADER_LEN as u64 + body_len;
        if body_len > MAX_STORED_BODY_BYTES as u64 || total > remain {
            return Err(Fail::Detail(format!(
                "record frame claims {body_len} body bytes, more than the {remain} committed bytes left"
            )));
        }
        Ok((total, Lsn(u64::from_le_bytes(lsn))))
    }

    /// `e`, found at `off` where `expect` was due, as an engine error
    /// naming the place (built only on failure: the hot path never
    /// clones the path).
    fn fail_at(&self, off: u64, expect: Lsn, e: Fail) -> EngineError {
        match e {
            Fail::Detail(d) => corrupt(&self.seg.path, off, Some(expect), d),
            Fail::Engine(e) => e,
        }
    }

    /// Decodes the next frame and hands it to `f`; `None` at the limit.
    fn next_frame<R>(&mut self, f: impl FnOnce(Frame<'_>) -> Result<R>) -> Option<Result<R>> {
        let (off, expect) = (self.off, self.expect);
        let remain = self.seg.limit.checked_sub(off).filter(|r| *r > 0)?;
        let result = self.header_at(off, remain).and_then(|(total, _)| {
            let r = match self.bytes(off, total as usize) {
                Err(e) => Err(Fail::Engine(e)),
                Ok(b) => match frame::decode(b) {
                    Err(e) => Err(Fail::Detail(format!("record frame: {e}"))),
                    Ok(fr) if fr.lsn != expect => Err(Fail::Detail(format!(
                        "record has LSN {} where LSN {expect} was expected",
                        fr.lsn
                    ))),
                    Ok(fr) => f(fr).map_err(|e| match e {
                        EngineError::Codec(c) => Fail::Detail(format!("record body: {c}")),
                        other => Fail::Engine(other),
                    }),
                },
            };
            self.off += total;
            self.expect = expect.next();
            r
        });
        Some(result.map_err(|e| self.fail_at(off, expect, e)))
    }
}

/// A failure reading a frame, turned into an error naming the place only
/// when it happens ([`Cursor::fail_at`]).
enum Fail {
    Detail(String),
    Engine(EngineError),
}

/// Committed records in LSN order, from [`Log::iter_from`](super::Log::iter_from)
/// or [`LogReader::iter_from`](super::LogReader::iter_from). Ends at the head
/// as it was when the iterator was made; stops after the first error.
pub struct LogIter {
    segs: std::vec::IntoIter<SegRef>,
    dicts: Arc<LogDicts>,
    cur: Option<Cursor>,
    next: Lsn,
    end: Lsn,
    failed: bool,
    /// Returned after the last record (see [`Tail::damage`]).
    then_fail: Option<EngineError>,
}

impl LogIter {
    fn fail(&mut self, e: EngineError) -> Option<Result<Record>> {
        self.failed = true;
        Some(Err(e))
    }
}

impl std::fmt::Debug for LogIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogIter {{ next: {}, end: {} }}", self.next, self.end)
    }
}

impl Iterator for LogIter {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        loop {
            if self.failed {
                return None;
            }
            if self.next > self.end {
                return self.then_fail.take().and_then(|e| self.fail(e));
            }
            let cur = match &mut self.cur {
                Some(c) => c,
                None => match self.segs.next() {
                    Some(seg) => self.cur.insert(Cursor::new(seg)),
                    None => {
                        let e = EngineError::Invalid(format!(
                            "the log ended before LSN {} (expected records up to {})",
                            self.next, self.end
                        ));
                        return self.fail(e);
                    }
                },
            };
            let wanted = self.next;
            if cur.expect < wanted {
                match cur.skip_frame() {
                    None => self.cur = None,
                    Some(Ok(())) => {}
                    Some(Err(e)) => return self.fail(e),
                }
                continue;
            }
            let dicts = &self.dicts;
            let step = cur.next_frame(|fr| {
                if fr.lsn < wanted {
                    return Ok(None);
                }
                let body = dicts.body(&fr)?;
                let event = Event::decode_body(&body)?;
                Ok(Some(Record {
                    lsn: fr.lsn,
                    chain: fr.chain,
                    event,
                }))
            });
            match step {
                None => self.cur = None,
                Some(Ok(None)) => {}
                Some(Ok(Some(rec))) => {
                    self.next = rec.lsn.next();
                    return Some(Ok(rec));
                }
                Some(Err(e)) => {
                    return self.fail(e);
                }
            }
        }
    }
}
