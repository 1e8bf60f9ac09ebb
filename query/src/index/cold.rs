//! Queries from a new process without loading an index whole: the
//! per-segment index files ([`super::seg`]) for the sealed segments, built
//! on first use and kept under `.cairn/index/segments/`, plus an index of
//! the unsealed tail built in memory from the tail alone.
//!
//! [`ColdIndex::scan`] answers a [`Filter`] with a session, run, kind,
//! agent, model or path: it walks the segments in the filter's order,
//! opens only the files it reaches, reads only the postings of the keys
//! the filter names (the shortest list drives, the others are probed by
//! binary search), and reads from the log only the records it hands out.
//! Each record read is checked against the whole filter, so a condition
//! no index holds (ok, phase, time) is applied there, and an index can at
//! worst cost a read, never add a record that does not match.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::{EventKind, Lsn, Timestamp};
use cairn_engine::atomic::{write_atomic, AtomicOptions};
use cairn_engine::log::SegmentSpan;
use cairn_engine::vfs::{Mapped, OpenMode};
use cairn_engine::Vfs;
use parking_lot::Mutex;

use super::seg::{seg_index_name, KeyTag, Postings, SegHeader, SegIndex, SegIndexBuilder};
use super::summary::{Summary, SummaryEntry, SUMMARY_FILE};
use crate::error::{QueryError, Result};
use crate::filter::Filter;
use crate::source::{Record, RecordSource};

/// The directory of the segment index files, inside the store's `index/`.
pub const SEGMENTS_DIR: &str = "segments";

/// Records of the unsealed tail past its file (or all of it, when it has
/// none) from which a query that may write (re)builds the tail's file:
/// below it, the tail's new records are indexed in memory on each query
/// (a few milliseconds), above it, once into the file, so a new process
/// never folds more than this many records.
pub const TAIL_REINDEX_RECORDS: u64 = 4096;

/// The most files the unsealed tail's index is read from, chained one
/// after the other (see `ColdIndex::tail_parts`). A local store has one;
/// an archive ships one part every `cairn::replicate::TAIL_INDEX_EVERY_RECORDS`
/// (32,768) records, 16 for a full 64 MiB segment of the benchmark's
/// 133-byte records. Each costs an open and a record read to check it, so
/// a chain longer than this (a crafted or odd archive) is cut here and
/// the rest of the tail indexed in memory: a bound on work, never on
/// what is answered.
pub const MAX_TAIL_INDEX_PARTS: usize = 1024;

/// LSNs a walk by time ([`ColdIndex::scan`] with only a time range)
/// gathers from the log before it hands them out, oldest first: enough
/// that a long answer is read in few walks, few enough that a short one
/// (`--limit 5`) stops after a walk of a few thousand records, not of the
/// segment. Newest first, a part's LSNs are gathered whole (at most a
/// segment's, 8 bytes each) to be handed out in reverse.
const TIME_WALK_BATCH: usize = 4096;

/// One condition a segment index can answer.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cond {
    /// Records with this key.
    Key(KeyTag, String),
    /// Records naming this path or one under it.
    Under(String),
}

/// The conditions of `f` that a segment index answers; empty when none.
fn conditions(f: &Filter) -> Vec<Cond> {
    let mut out = Vec::new();
    for (tag, v) in [
        (KeyTag::Session, &f.session),
        (KeyTag::Run, &f.run),
        (KeyTag::Agent, &f.agent),
        (KeyTag::Model, &f.model),
    ] {
        if let Some(v) = v {
            out.push(Cond::Key(tag, v.clone()));
        }
    }
    if let Some(k) = f.kind {
        out.push(Cond::Key(KeyTag::Kind, k.name().to_string()));
    }
    if let Some(p) = f.path.as_deref() {
        let p = p.trim_end_matches('/');
        // The whole workspace: every record that names a path, which no
        // one list holds.
        if !p.is_empty() {
            out.push(Cond::Under(p.to_string()));
        }
    }
    out
}

/// A part of the log and its index: a sealed segment, or the tail.
#[derive(Clone, Copy, Debug)]
struct Part {
    first: Lsn,
    last: Lsn,
    span: Option<SegmentSpan>,
}

/// What happened to a segment's index file when it was needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileEvent {
    /// Opened and used as it was.
    Used(Lsn),
    /// Built from the log, for this reason (missing, damaged, stale).
    Built(Lsn, String),
}

/// The per-segment indexes of one log as of one head (see the module docs).
pub struct ColdIndex<'a> {
    vfs: &'a Arc<dyn Vfs>,
    dir: PathBuf,
    src: &'a dyn RecordSource,
    parts: Vec<Part>,
    loaded: Vec<Mutex<Option<Arc<SegIndex>>>>,
    write: bool,
    events: Mutex<Vec<FileEvent>>,
    /// The summary of the files ([`super::summary`]) as read when this
    /// index was made; `None` when missing or damaged.
    summary: Option<Summary>,
    /// Entries for the summary learned from files opened by this index
    /// whose segments it has none for: written when the index is dropped,
    /// if it may write.
    fresh: Mutex<Vec<SummaryEntry>>,
}

impl std::fmt::Debug for ColdIndex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdIndex")
            .field("dir", &self.dir)
            .field("parts", &self.parts)
            .finish()
    }
}

impl Drop for ColdIndex<'_> {
    /// Writes the summary entries learned, if this index may write.
    fn drop(&mut self) {
        self.write_summary();
    }
}

impl<'a> ColdIndex<'a> {
    /// The index of `src` up to its head, whose sealed segments are
    /// `sealed` (in LSN order; the records after the last are the tail).
    /// Files live in `dir` (`.cairn/index/segments`); with `write`, a file
    /// built because it was missing, damaged or stale is written there
    /// (atomically; a failure to write is no error, the file is a cache).
    /// Opens nothing yet: each file is opened when a query first needs it.
    pub fn new(
        vfs: &'a Arc<dyn Vfs>,
        dir: &Path,
        src: &'a dyn RecordSource,
        sealed: &[SegmentSpan],
        write: bool,
    ) -> Result<ColdIndex<'a>> {
        ColdIndex::with_tail_reindex(vfs, dir, src, sealed, write, TAIL_REINDEX_RECORDS)
    }

    /// [`ColdIndex::new`] with the tail's file rebuilt past `tail_reindex`
    /// records instead of [`TAIL_REINDEX_RECORDS`] (tests use small logs).
    pub fn with_tail_reindex(
        vfs: &'a Arc<dyn Vfs>,
        dir: &Path,
        src: &'a dyn RecordSource,
        sealed: &[SegmentSpan],
        write: bool,
        tail_reindex: u64,
    ) -> Result<ColdIndex<'a>> {
        let head = src.head()?;
        let parts: Vec<Part> = sealed
            .iter()
            .filter(|s| s.last <= head.last_lsn && s.first <= s.last)
            .map(|s| Part {
                first: s.first,
                last: s.last,
                span: Some(*s),
            })
            .collect();
        let tail_first = parts.last().map_or(Lsn::FIRST, |p| p.last.next());
        // A summary that cannot be read or is damaged is not used: every
        // file is read, and the summary rewritten by a query that writes.
        let summary = if parts.is_empty() {
            None
        } else {
            Summary::read(vfs, dir).ok().flatten()
        };
        let mut me = ColdIndex {
            vfs,
            dir: dir.to_path_buf(),
            src,
            loaded: Vec::new(),
            parts,
            write,
            events: Mutex::new(Vec::new()),
            summary,
            fresh: Mutex::new(Vec::new()),
        };
        if tail_first <= head.last_lsn {
            me.tail_parts(tail_first, head, tail_reindex.max(1))?;
        }
        me.loaded = me.parts.iter().map(|_| Mutex::new(None)).collect();
        Ok(me)
    }

    /// Adds the parts of the unsealed tail `first..=head`: the prefix the
    /// tail's files cover, and the records after it, indexed in memory.
    /// The prefix is a chain of files, each named by its first LSN: the
    /// first named as the segment (the store's own tail file, or an
    /// archive's first part), each next one starting right after the one
    /// before ends (an archive ships the tail's index in such parts, see
    /// `cairn::replicate`). Each is trusted only when its header's first
    /// LSN is the one the chain asks for, its last LSN is inside the tail,
    /// and its chain value is the log's record's there; the first that is
    /// not (or is missing) ends the chain, and the records after the last
    /// trusted one are indexed in memory.
    /// When [`TAIL_REINDEX_RECORDS`] or more records are not in a file
    /// and this index may write, the whole tail becomes one part whose
    /// file is (re)built on first use.
    fn tail_parts(
        &mut self,
        first: Lsn,
        head: cairn_engine::log::Head,
        reindex: u64,
    ) -> Result<()> {
        let mut prefix: Vec<SegmentSpan> = Vec::new();
        let mut indexed = first;
        while indexed <= head.last_lsn && prefix.len() < MAX_TAIL_INDEX_PARTS {
            let Some(h) = self
                .open_file(indexed)
                .ok()
                .map(|ix| *ix.header())
                .filter(|h| {
                    h.first == indexed && h.covered >= indexed && h.covered <= head.last_lsn
                })
            else {
                break;
            };
            if self.src.read(h.covered)?.chain != h.chain {
                break;
            }
            prefix.push(SegmentSpan {
                first: indexed,
                last: h.covered,
                last_chain: h.chain,
            });
            indexed = h.covered.next();
        }
        let unindexed = head.last_lsn.0 + 1 - indexed.0;
        if self.write && unindexed >= reindex {
            self.parts.push(Part {
                first,
                last: head.last_lsn,
                span: Some(SegmentSpan {
                    first,
                    last: head.last_lsn,
                    last_chain: head.chain,
                }),
            });
            return Ok(());
        }
        self.parts.extend(prefix.into_iter().map(|s| Part {
            first: s.first,
            last: s.last,
            span: Some(s),
        }));
        if indexed <= head.last_lsn {
            self.parts.push(Part {
                first: indexed,
                last: head.last_lsn,
                span: None,
            });
        }
        Ok(())
    }

    /// Makes sure each of the sealed segments `sealed` has its index file
    /// in `dir`: one missing, damaged or stale is built from `src` and
    /// written (as a query does when it rebuilds one). What a writer runs on a thread
    /// of its own after a segment is sealed, off its append path, so that
    /// a query from a new process finds the file. Gives what happened to
    /// each file; holds one segment's index in memory at a time.
    pub fn index_sealed(
        vfs: &'a Arc<dyn Vfs>,
        dir: &Path,
        src: &'a dyn RecordSource,
        sealed: &[SegmentSpan],
    ) -> Result<Vec<FileEvent>> {
        let parts: Vec<Part> = sealed
            .iter()
            .filter(|s| s.first <= s.last)
            .map(|s| Part {
                first: s.first,
                last: s.last,
                span: Some(*s),
            })
            .collect();
        let me = ColdIndex {
            vfs,
            dir: dir.to_path_buf(),
            src,
            loaded: parts.iter().map(|_| Mutex::new(None)).collect(),
            parts,
            write: true,
            events: Mutex::new(Vec::new()),
            summary: None,
            fresh: Mutex::new(Vec::new()),
        };
        for i in 0..me.parts.len() {
            me.part(i)?;
            *me.loaded[i].lock() = None;
        }
        Ok(me.events())
    }

    /// True if [`ColdIndex::scan`] can narrow `f` by an index (a session,
    /// run, kind, agent, model or path other than the whole workspace), or
    /// by the files' time bounds (a `since` or `until`: only the parts
    /// whose records' times meet the range are read).
    pub fn answers(f: &Filter) -> bool {
        !conditions(f).is_empty() || f.since.is_some() || f.until.is_some()
    }

    /// The last LSN this index covers (the head when it was made).
    pub fn covered(&self) -> Lsn {
        self.parts.last().map_or(Lsn(0), |p| p.last)
    }

    /// What each file needed so far went through, in order.
    pub fn events(&self) -> Vec<FileEvent> {
        self.events.lock().clone()
    }

    fn build(&self, part: &Part) -> Result<Vec<u8>> {
        let mut b = SegIndexBuilder::new(part.first);
        self.src.for_each_ref(part.first, &mut |lsn, chain, e| {
            if lsn > part.last {
                return Ok(false);
            }
            b.observe(lsn, chain, e)?;
            Ok(lsn < part.last)
        })?;
        if b.covered() != part.last {
            return Err(QueryError::Invalid(format!(
                "indexing LSNs {} to {}: the log ended at {}",
                part.first,
                part.last,
                b.covered()
            )));
        }
        b.encode()
    }

    /// Part `i`'s index: its file if there is a good one, else built.
    fn part(&self, i: usize) -> Result<Arc<SegIndex>> {
        if let Some(ix) = self.loaded[i].lock().as_ref() {
            return Ok(ix.clone());
        }
        let part = self.parts[i];
        let ix = match part.span {
            None => {
                let bytes = self.build(&part)?;
                SegIndex::open(Mapped::Bytes(Arc::from(bytes)), "the tail's index")?
            }
            Some(span) => {
                let ix = match self.load_file(span) {
                    Ok(ix) => {
                        self.events.lock().push(FileEvent::Used(span.first));
                        ix
                    }
                    Err(reason) => self.rebuild(span, reason)?,
                };
                self.learn(span, &ix);
                ix
            }
        };
        let ix = Arc::new(ix);
        *self.loaded[i].lock() = Some(ix.clone());
        Ok(ix)
    }

    /// Replaces part `i`'s index, found damaged while reading it, by one
    /// built from the log (and written back).
    fn replace(&self, i: usize, why: &QueryError) -> Result<Arc<SegIndex>> {
        let span = self.parts[i].span.ok_or_else(|| {
            QueryError::Invalid(format!(
                "the tail's index, built in memory, is damaged: {why}"
            ))
        })?;
        let ix = Arc::new(self.rebuild(span, why.to_string())?);
        self.learn(span, &ix);
        *self.loaded[i].lock() = Some(ix.clone());
        Ok(ix)
    }

    /// Keeps the summary entry of the segment `span`, whose index `ix`
    /// is, when this index may write and its summary has none: read from
    /// every directory entry of `ix` (a damaged one gives no entry).
    fn learn(&self, span: SegmentSpan, ix: &SegIndex) {
        if !self.write
            || self
                .summary
                .as_ref()
                .is_some_and(|s| s.entry_of(&span).is_some())
        {
            return;
        }
        if let Ok(e) = SummaryEntry::of(span, ix) {
            let mut fresh = self.fresh.lock();
            fresh.retain(|f| f.first != e.first);
            fresh.push(e);
        }
    }

    /// True if the summary rules part `i` out for `conds`: it has the
    /// entry of the part's segment as the log has it, and that entry's
    /// filter says the file lacks the key of one condition. A directory
    /// (several keys) is never ruled out this way.
    fn ruled_out(&self, i: usize, conds: &[Cond]) -> bool {
        let (Some(summary), Some(span)) = (&self.summary, self.parts[i].span) else {
            return false;
        };
        let Some(e) = summary.entry_of(&span) else {
            return false;
        };
        conds.iter().any(|c| match c {
            Cond::Key(tag, key) => !e.may_hold(*tag, key),
            Cond::Under(_) => false,
        })
    }

    /// Writes the summary with the entries learned by this index added to
    /// those of the file as it is now (read again: another process may
    /// have written it since), dropping the file's entries for segments
    /// of this index's log that it no longer has as they were. Atomic and
    /// durable; a failure is no error (the summary is a cache).
    fn write_summary(&self) {
        let fresh = std::mem::take(&mut *self.fresh.lock());
        if fresh.is_empty() {
            return;
        }
        let now = Summary::read(self.vfs, &self.dir)
            .ok()
            .flatten()
            .unwrap_or_default();
        let mut entries: Vec<SummaryEntry> = now
            .entries()
            .iter()
            .filter(|e| {
                !self
                    .parts
                    .iter()
                    .any(|p| p.first == e.first && p.span.is_some_and(|s| !e.is_of(&s)))
            })
            .cloned()
            .collect();
        entries.extend(fresh);
        let bytes = Summary::new(entries).encode();
        let _ = write_atomic(
            &**self.vfs,
            &self.dir.join(SUMMARY_FILE),
            &bytes,
            &AtomicOptions::durable(),
        );
    }

    fn file_path(&self, span: SegmentSpan) -> PathBuf {
        self.dir.join(seg_index_name(span.first))
    }

    /// The file of the segment starting at `first`, its header checked
    /// (not yet against the log); why it cannot be used otherwise.
    fn open_file(&self, first: Lsn) -> std::result::Result<SegIndex, String> {
        let path = self.dir.join(seg_index_name(first));
        let what = path.display().to_string();
        // Opened without asking first whether it exists: a query probes
        // every segment's file (31 at 10,000,000 events), and the open
        // says so. Its front read, not mapped: a probe for a key the file
        // lacks (a session's checkpoints, the last reset before a point)
        // reads the file's front and nothing else, where a map cost a
        // map, its page faults and an unmap per file.
        // The postings a lookup needs are read through a map where a map
        // is cheap (a few faults where a read per block costs a system
        // call each), else by block.
        let mapper: Option<super::seg::Mapper> = self.vfs.maps_cheaply().then(|| {
            let (vfs, path) = (self.vfs.clone(), path.clone());
            Box::new(move || vfs.map(&path)) as super::seg::Mapper
        });
        match self.vfs.open(&path, OpenMode::Read) {
            Ok(f) => SegIndex::open_file(f, &what, mapper).map_err(|e| e.to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("no index file".to_string()),
            Err(e) => Err(format!("index file {what} cannot be read: {e}")),
        }
    }

    /// A sealed segment's file, its header checked against the segment's
    /// identity; why it cannot be used otherwise.
    fn load_file(&self, span: SegmentSpan) -> std::result::Result<SegIndex, String> {
        let ix = self.open_file(span.first)?;
        let what = self.file_path(span).display().to_string();
        let h = ix.header();
        if h.first == span.first && h.covered == span.last && h.chain == span.last_chain {
            Ok(ix)
        } else {
            Err(format!(
                "index file {what} is stale: it covers LSNs {} to {}, not the log's {} to {} as they are now",
                h.first, h.covered, span.first, span.last
            ))
        }
    }

    /// Builds a sealed segment's index from the log and, when this index
    /// may write, writes its file atomically and durably (a temporary file
    /// of this process's own, fsync, rename, directory fsync): a process
    /// killed before the rename leaves no file, only its temporary, which
    /// no query reads; and a file cut short or zero-filled by a crash
    /// after it fails its length or checksums and is rebuilt.
    fn rebuild(&self, span: SegmentSpan, reason: String) -> Result<SegIndex> {
        let path = self.file_path(span);
        let part = Part {
            first: span.first,
            last: span.last,
            span: Some(span),
        };
        let bytes = self.build(&part)?;
        let ix = SegIndex::open(
            Mapped::Bytes(Arc::from(bytes.clone())),
            &path.display().to_string(),
        )?;
        if ix.header().chain != span.last_chain {
            return Err(QueryError::Invalid(format!(
                "the log's record {} does not end with the chain value its segment's footer records",
                span.last
            )));
        }
        if self.write {
            // A cache: a store that cannot be written to still answers.
            let _ = self
                .vfs
                .create_dir_all(&self.dir)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    write_atomic(&**self.vfs, &path, &bytes, &AtomicOptions::durable())
                        .map_err(|e| e.to_string())
                });
        }
        self.events
            .lock()
            .push(FileEvent::Built(span.first, reason));
        Ok(ix)
    }

    /// Calls `each` with every record `f` selects, in the filter's order,
    /// up to its limit, as [`crate::Query::scan`] does; returns false
    /// (having called nothing) when no condition of `f` is one an index
    /// answers ([`ColdIndex::answers`]).
    pub fn scan(&self, f: &Filter, each: &mut dyn FnMut(Record) -> Result<bool>) -> Result<bool> {
        if !ColdIndex::answers(f) {
            return Ok(false);
        }
        let conds = conditions(f);
        let Some((lo, hi)) = f.lsn_bounds(self.covered()) else {
            return Ok(true);
        };
        let limit = f.limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok(true);
        }
        let mut n = 0usize;
        let mut hand = |r: Record| -> Result<bool> {
            if !f.matches(&r) {
                return Ok(true);
            }
            n += 1;
            Ok(each(r)? && n < limit)
        };
        let skip_part = |h: &SegHeader| {
            f.since.is_some_and(|t| h.max_ts < t) || f.until.is_some_and(|t| h.min_ts > t)
        };
        // Only a time range: the parts whose times meet it, record by record.
        let walk = |rev: bool, visit: &mut dyn FnMut(Lsn) -> Result<bool>| {
            if conds.is_empty() {
                self.walk_times(f, lo, hi, rev, visit)
            } else {
                self.walk(&conds, lo, hi, rev, &skip_part, visit)
            }
        };
        if f.newest_first {
            let mut visit = |lsn: Lsn| hand(self.read_exact(lsn)?);
            walk(true, &mut visit)?;
            return Ok(true);
        }
        // Ascending: the postings are read in batches, each in one walk of
        // the log, not a read per record.
        let mut reads = crate::source::SortedReads::new(self.src, limit);
        let mut visit = |lsn: Lsn| reads.push(lsn, &mut hand);
        if walk(false, &mut visit)? {
            reads.flush(&mut hand)?;
        }
        Ok(true)
    }

    /// The parts (with their positions) holding any LSN in `lo..=hi`, in
    /// LSN order, or newest first with `rev`.
    fn parts_meeting(&self, lo: Lsn, hi: Lsn, rev: bool) -> Vec<(usize, Part)> {
        let mut out: Vec<(usize, Part)> = (self.parts.iter().copied().enumerate())
            .filter(|(_, p)| p.last >= lo && p.first <= hi)
            .collect();
        if rev {
            out.reverse();
        }
        out
    }

    /// Calls `f` with each LSN in `lo..=hi` whose record's time is within
    /// `filter`'s `since..=until`, in LSN order (newest first with `rev`),
    /// until it returns false. A part whose header's least and greatest
    /// times miss the range is passed over unread; the others are read
    /// record by record (a record's time is in no posting list). Returns
    /// false if `f` stopped the walk.
    fn walk_times(
        &self,
        filter: &Filter,
        lo: Lsn,
        hi: Lsn,
        rev: bool,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<bool> {
        let in_range = |t: Timestamp| {
            filter.since.is_none_or(|s| t >= s) && filter.until.is_none_or(|u| t <= u)
        };
        for (i, p) in self.parts_meeting(lo, hi, rev) {
            let h = *self.part(i)?.header();
            if filter.since.is_some_and(|s| h.max_ts < s)
                || filter.until.is_some_and(|u| h.min_ts > u)
            {
                continue;
            }
            // The LSNs are gathered, then handed out: `f` reads records,
            // which it must not do inside the walk of the log.
            let (mut from, to) = (lo.max(p.first), hi.min(p.last));
            while from <= to {
                let mut hits = Vec::new();
                let mut reached = to;
                self.each_time(from, to, &mut |lsn, t| {
                    if in_range(t) {
                        hits.push(lsn);
                    }
                    reached = lsn;
                    Ok(rev || hits.len() < TIME_WALK_BATCH)
                })?;
                let hits: Box<dyn Iterator<Item = Lsn>> = if rev {
                    Box::new(hits.into_iter().rev())
                } else {
                    Box::new(hits.into_iter())
                };
                for lsn in hits {
                    if !f(lsn)? {
                        return Ok(false);
                    }
                }
                from = reached.next();
            }
        }
        Ok(true)
    }

    /// Calls `f` with the LSN and time of each record in `from..=to`, in
    /// LSN order, until it returns false.
    fn each_time(
        &self,
        from: Lsn,
        to: Lsn,
        f: &mut dyn FnMut(Lsn, Timestamp) -> Result<bool>,
    ) -> Result<()> {
        self.src.for_each_ref(from, &mut |lsn, _, e| {
            if lsn > to {
                return Ok(false);
            }
            Ok(f(lsn, e.ts)? && lsn < to)
        })
    }

    /// What the time point `t` resolves to ([`crate::point::Point::Time`]),
    /// as the whole index's [`crate::index::Index::time_point`] answers it:
    /// the last record before the first one stamped later than `t`, and
    /// how many records after it are stamped at or before `t`. The parts
    /// wholly at or before `t` (by their headers' greatest time) are not
    /// read, nor the parts after the point wholly later than `t`: where the
    /// log's times go forward, one segment is read.
    pub fn time_point(&self, t: Timestamp) -> Result<crate::point::TimePoint> {
        let mut point: Option<Lsn> = None;
        let mut left_out = 0u64;
        for i in 0..self.parts.len() {
            let p = self.parts[i];
            let h = *self.part(i)?.header();
            match point {
                None if h.max_ts <= t => continue,
                None if h.min_ts > t => point = Some(Lsn(p.first.0 - 1)),
                Some(_) if h.min_ts > t => {}
                _ => self.each_time(p.first, p.last, &mut |lsn, ts| {
                    match point {
                        None if ts > t => point = Some(Lsn(lsn.0 - 1)),
                        Some(_) if ts <= t => left_out += 1,
                        _ => {}
                    }
                    Ok(true)
                })?,
            }
        }
        Ok(crate::point::TimePoint {
            time: t,
            lsn: point.unwrap_or_else(|| self.covered()),
            left_out,
        })
    }

    /// The record at `lsn`, which must be the one read.
    fn read_exact(&self, lsn: Lsn) -> Result<Record> {
        crate::source::read_one(self.src, lsn)
    }

    /// Calls `f` with each LSN in `lo..=hi` that meets every condition, in
    /// LSN order (newest first with `rev`), until it returns false; parts
    /// whose header `skip` rejects are passed over. Returns false if `f`
    /// stopped the walk.
    fn walk(
        &self,
        conds: &[Cond],
        lo: Lsn,
        hi: Lsn,
        rev: bool,
        skip: &dyn Fn(&SegHeader) -> bool,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<bool> {
        for (i, p) in self.parts_meeting(lo, hi, rev) {
            if !self.walk_part(i, conds, (lo.max(p.first), hi.min(p.last)), rev, skip, f)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// [`ColdIndex::walk`] over part `i`, LSNs `range`. An index found
    /// damaged midway is rebuilt from the log once and the walk resumes
    /// past the last LSN handed out, so nothing is handed out twice.
    fn walk_part(
        &self,
        i: usize,
        conds: &[Cond],
        range: (Lsn, Lsn),
        rev: bool,
        skip: &dyn Fn(&SegHeader) -> bool,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<bool> {
        if self.ruled_out(i, conds) {
            return Ok(true);
        }
        let mut ix = self.part(i)?;
        if skip(ix.header()) {
            return Ok(true);
        }
        let (mut from, mut to) = range;
        let mut go = true;
        let mut visited: Option<Lsn> = None;
        let mut rebuilt = false;
        loop {
            let r = self.candidates(&ix, conds, from, to, rev, &mut |lsn| {
                visited = Some(lsn);
                go = f(lsn)?;
                Ok(go)
            });
            match r {
                Err(e @ QueryError::IndexCorrupt { .. }) if !rebuilt => {
                    ix = self.replace(i, &e)?;
                    rebuilt = true;
                    match (visited, rev) {
                        (Some(v), false) => from = v.next(),
                        (Some(v), true) => to = Lsn(v.0 - 1),
                        (None, _) => {}
                    }
                    if from > to {
                        return Ok(go);
                    }
                }
                r => {
                    r?;
                    return Ok(go);
                }
            }
        }
    }

    /// The newest LSN in `lo..=hi` naming `path` itself (as `path`,
    /// `to_path` or one of `files`) whose kind is `kind`, when given.
    pub fn newest_naming(
        &self,
        path: &str,
        kind: Option<EventKind>,
        lo: Lsn,
        hi: Lsn,
    ) -> Result<Option<Lsn>> {
        let mut conds = vec![Cond::Key(KeyTag::Path, path.to_string())];
        if let Some(k) = kind {
            conds.push(Cond::Key(KeyTag::Kind, k.name().to_string()));
        }
        self.newest(&conds, lo, hi)
    }

    /// The newest LSN in `lo..=hi` of a record of kind `kind`.
    pub fn newest_of_kind(&self, kind: EventKind, lo: Lsn, hi: Lsn) -> Result<Option<Lsn>> {
        self.newest(&[Cond::Key(KeyTag::Kind, kind.name().to_string())], lo, hi)
    }

    /// Calls `f` with the LSNs in `lo..=hi` naming `path` itself, newest
    /// first, until it returns false.
    pub fn naming_rev(
        &self,
        path: &str,
        lo: Lsn,
        hi: Lsn,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<()> {
        self.each_naming(path, lo, hi, true, f)
    }

    /// Calls `f` with the LSNs in `lo..=hi` naming `path` itself, oldest
    /// first, until it returns false.
    pub fn naming(
        &self,
        path: &str,
        lo: Lsn,
        hi: Lsn,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<()> {
        self.each_naming(path, lo, hi, false, f)
    }

    /// [`ColdIndex::naming`] in either order (nothing for an empty range).
    fn each_naming(
        &self,
        path: &str,
        lo: Lsn,
        hi: Lsn,
        newest_first: bool,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<()> {
        if lo > hi {
            return Ok(());
        }
        let conds = [Cond::Key(KeyTag::Path, path.to_string())];
        self.walk(&conds, lo, hi, newest_first, &|_| false, f)
            .map(|_| ())
    }

    /// True if a record in `lo..=hi` names `path` or a path under it.
    pub fn names_under(&self, path: &str, lo: Lsn, hi: Lsn) -> Result<bool> {
        let p = path.trim_end_matches('/');
        if p.is_empty() {
            return Err(QueryError::Invalid(
                "the whole workspace is no path a posting list holds".into(),
            ));
        }
        Ok(self
            .newest(&[Cond::Under(p.to_string())], lo, hi)?
            .is_some())
    }

    /// Calls `f` with the LSNs in `lo..=hi` of a record of any of `kinds`,
    /// in LSN order, until it returns false: each part's lists merged, one
    /// part at a time (so what is held is one segment's LSNs of them).
    pub fn of_kinds(
        &self,
        kinds: &[EventKind],
        lo: Lsn,
        hi: Lsn,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<()> {
        for (i, p) in self.parts.iter().enumerate() {
            if p.last < lo || p.first > hi {
                continue;
            }
            let range = (lo.max(p.first), hi.min(p.last));
            let mut lsns = Vec::new();
            for k in kinds {
                let conds = [Cond::Key(KeyTag::Kind, k.name().to_string())];
                self.walk_part(i, &conds, range, false, &|_| false, &mut |l| {
                    lsns.push(l);
                    Ok(true)
                })?;
            }
            lsns.sort_unstable();
            lsns.dedup();
            for l in lsns {
                if !f(l)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn newest(&self, conds: &[Cond], lo: Lsn, hi: Lsn) -> Result<Option<Lsn>> {
        let mut found = None;
        if lo <= hi {
            self.walk(conds, lo, hi, true, &|_| false, &mut |l| {
                found = Some(l);
                Ok(false)
            })?;
        }
        Ok(found)
    }

    /// The LSNs in `lo..=hi` of one part that meet every condition, in
    /// order (reversed with `rev`), to `f` until it returns false.
    fn candidates(
        &self,
        ix: &SegIndex,
        conds: &[Cond],
        lo: Lsn,
        hi: Lsn,
        rev: bool,
        f: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<()> {
        let Some(mut lists) = condition_lists(ix, conds)? else {
            return Ok(());
        };
        // The shortest list drives; the others are probed.
        let d = lists
            .iter()
            .enumerate()
            .min_by_key(|(_, l)| total_len(l))
            .map_or(0, |(i, _)| i);
        let driver = lists.swap_remove(d);
        let others = lists;
        let mut check = |lsn: Lsn| -> Result<bool> {
            if in_every(&others, lsn)? {
                f(lsn)
            } else {
                Ok(true)
            }
        };
        for_each_in(&driver, lo, hi, rev, &mut check)
    }
    /// Checks every index file in `dir` whole (header, directory, every
    /// block) and against the segment it names, and the summary of the
    /// files whole (what `cairn verify` runs).
    /// The file of the unsealed tail (named by the first LSN after the
    /// last sealed segment), and a later part of the tail's index (named
    /// by an LSN inside the tail, as an archive ships them), fits when
    /// `chain_at` (the log's chain value after an LSN, if it has it)
    /// agrees with its last LSN. A file of
    /// segments the log does not have as it names them is stale, which is
    /// no damage: queries never use it and rebuild it.
    pub fn verify_files(
        vfs: &Arc<dyn Vfs>,
        dir: &Path,
        sealed: &[SegmentSpan],
        chain_at: &dyn Fn(Lsn) -> Option<cairn_codec::ChainHash>,
    ) -> Result<FilesReport> {
        let tail_first = sealed.last().map_or(Lsn::FIRST, |s| s.last.next());
        let mut report = FilesReport::default();
        if !vfs.exists(dir) {
            return Ok(report);
        }
        let mut names = vfs.list(dir).map_err(|e| {
            QueryError::Engine(cairn_engine::EngineError::io("list index dir", dir, e))
        })?;
        names.sort();
        for name in names {
            if name == SUMMARY_FILE {
                // Checked whole; entries of segments the log no longer
                // has are no damage (queries never use them).
                if let Err(e) = Summary::read(vfs, dir) {
                    report.damaged.push(e.to_string());
                }
                continue;
            }
            let Some(first) = super::seg::parse_seg_index_name(&name) else {
                continue;
            };
            let path = dir.join(&name);
            let what = path.display().to_string();
            let checked = vfs
                .map(&path)
                .map_err(|e| format!("index file {what} cannot be read: {e}"))
                .and_then(|m| SegIndex::open(m, &what).map_err(|e| e.to_string()))
                .and_then(|ix| ix.check_all().map(|()| ix).map_err(|e| e.to_string()));
            match checked {
                Err(e) => report.damaged.push(e),
                Ok(ix) => {
                    let h = ix.header();
                    let fits = h.first == first
                        && (sealed.iter().any(|s| {
                            s.first == first && h.covered == s.last && h.chain == s.last_chain
                        }) || (first >= tail_first
                            && h.covered >= first
                            && chain_at(h.covered) == Some(h.chain)));
                    if fits {
                        report.checked += 1;
                    } else {
                        report.stale.push(format!(
                            "index file {what} is stale: it matches no sealed segment of the log"
                        ));
                    }
                }
            }
        }
        Ok(report)
    }
}

/// For each condition, the posting lists that answer it (several for a
/// directory: one per path under it); `None` when one has no record.
fn condition_lists<'i>(ix: &'i SegIndex, conds: &[Cond]) -> Result<Option<Vec<Vec<Postings<'i>>>>> {
    let mut lists = Vec::with_capacity(conds.len());
    for c in conds {
        let l = match c {
            Cond::Key(tag, key) => vec![ix.lookup(*tag, key)?],
            Cond::Under(p) => {
                let mut l = vec![ix.lookup(KeyTag::Path, p)?];
                l.extend(ix.lookup_prefix(KeyTag::Path, &format!("{p}/"))?);
                l
            }
        };
        let l: Vec<Postings<'_>> = l.into_iter().filter(|p| !p.is_empty()).collect();
        if l.is_empty() {
            return Ok(None);
        }
        lists.push(l);
    }
    Ok(Some(lists))
}

fn total_len(l: &[Postings<'_>]) -> usize {
    l.iter().map(|p| p.len()).sum()
}

/// True if `lsn` is in one of the lists of every condition.
fn in_every(conds: &[Vec<Postings<'_>>], lsn: Lsn) -> Result<bool> {
    for alts in conds {
        let mut any = false;
        for p in alts {
            if p.contains(lsn)? {
                any = true;
                break;
            }
        }
        if !any {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Calls `f` with the LSNs of `lists` in `lo..=hi`, each once, in order
/// (reversed with `rev`), until it returns false.
fn for_each_in(
    lists: &[Postings<'_>],
    lo: Lsn,
    hi: Lsn,
    rev: bool,
    f: &mut dyn FnMut(Lsn) -> Result<bool>,
) -> Result<()> {
    if let [one] = lists {
        let (from, to) = (one.rank(lo)?, one.rank(hi.next())?);
        if rev {
            for i in (from..to).rev() {
                if !f(one.get(i)?)? {
                    break;
                }
            }
        } else {
            for i in from..to {
                if !f(one.get(i)?)? {
                    break;
                }
            }
        }
        return Ok(());
    }
    // Several paths under a directory: their lists merged.
    let mut all = Vec::new();
    for p in lists {
        let (from, to) = (p.rank(lo)?, p.rank(hi.next())?);
        for i in from..to {
            all.push(p.get(i)?);
        }
    }
    all.sort_unstable();
    all.dedup();
    if rev {
        all.reverse();
    }
    for l in all {
        if !f(l)? {
            break;
        }
    }
    Ok(())
}

/// What [`ColdIndex::verify_files`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilesReport {
    /// Files checked whole and matching their segment.
    pub checked: u64,
    /// Files that fail a check (each line names the file and what is wrong).
    pub damaged: Vec<String>,
    /// Intact files that match no sealed segment.
    pub stale: Vec<String>,
}
