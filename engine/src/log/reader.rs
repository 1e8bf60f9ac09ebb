//! [`LogReader`]: a read-only view of a log for processes that do not hold
//! the store lock (`cairn log`, `export --follow` beside a recording
//! process). It never writes, locks or truncates; a torn or incomplete tail
//! (including an unfinished batch) is simply "not yet written".

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::frame;
use cairn_codec::segment::{SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{ChainHash, Lsn};

use super::dict::LogDicts;
use super::recovery::looks_sealed;
use super::scan::{find_next_valid, walk_chained};
use super::segment::{
    check_header, corrupt, list_segments, open_sealed_from_table, open_sealed_lazy, segments_in,
    sequence_gap, Sealed,
};
use super::sparse_index::SparseIndex;
use super::view::{LogIter, Tail, TailDamage, View};
use super::{Durability, Head, LogStats, Record, VerifyReport};
use crate::vfs::{OpenMode, Vfs};
use crate::{EngineError, Result};

/// How many times a reader reads bytes that look damaged (intact records
/// follow a frame that is not) before it calls them damage: a writer may be
/// copying a group into the file at that moment, in any byte order.
const DAMAGE_CONFIRM_READS: u32 = 3;

/// The pause between those reads: far longer than copying a group of
/// records into the page cache takes.
const DAMAGE_CONFIRM_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// A read-only view of a log, refreshed on demand with [`LogReader::refresh`].
pub struct LogReader {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    pub(super) view: View,
    /// The log directory's file names as the last refresh listed them.
    names: Vec<String>,
    /// The last LSN of the `tail.state` read when the tail was first
    /// looked at (`Some(None)`: there was none intact); `None` if not read.
    closed: Option<Option<Lsn>>,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("dir", &self.dir)
            .field("head", &self.view.head())
            .finish()
    }
}

impl LogReader {
    /// Opens the log in `dir` read-only and reads what is committed so far.
    pub fn open(vfs: Arc<dyn Vfs>, dir: &Path) -> Result<LogReader> {
        let names = vfs
            .list(dir)
            .map_err(|e| EngineError::io("list log directory", dir, e))?;
        LogReader::open_listed(vfs, dir, names)
    }

    /// [`LogReader::open`] given `names`, the entries of `dir` as the
    /// caller listed them just before (the store's open lists the log
    /// directory once, to refuse links in it, and hands the listing
    /// down). One listing serves the dictionaries and the first refresh.
    pub fn open_listed(vfs: Arc<dyn Vfs>, dir: &Path, names: Vec<String>) -> Result<LogReader> {
        let dicts = LogDicts::load_listed(vfs.clone(), dir, &names, false)?;
        let mut r = LogReader {
            vfs,
            dir: dir.to_path_buf(),
            view: View {
                sealed: Vec::new(),
                tail: None,
                dicts,
            },
            names: Vec::new(),
            closed: None,
        };
        r.refresh_listed(names)?;
        Ok(r)
    }

    /// Picks up records and segments appended since the last refresh.
    ///
    /// While the newest segment has no footer, the directory is not
    /// listed: the writer seals a segment (writes its footer) before it
    /// creates the next, so a tail read without a footer means no later
    /// segment existed when it was read, and the records read are all
    /// there is. A tail found sealed (or damaged), or no tail, lists the
    /// directory as before. A query from a new process refreshed right
    /// after its open, and paid a second listing of the log directory.
    pub fn refresh(&mut self) -> Result<Head> {
        if self.view.tail.as_ref().is_some_and(|t| t.damage.is_none()) {
            self.extend_tail()?;
            if self.view.tail.as_ref().is_some_and(|t| t.damage.is_none()) {
                return Ok(self.view.head());
            }
        }
        // List before reading the tail: the writer seals a segment (footer)
        // before it creates the next, so a newer segment in this listing
        // means the footer is already there to be read.
        let names = self
            .vfs
            .list(&self.dir)
            .map_err(|e| EngineError::io("list log directory", &self.dir, e))?;
        self.refresh_listed(names)
    }

    /// [`LogReader::refresh`] given `names`, a listing of the log
    /// directory made before this call (and before the tail is read).
    fn refresh_listed(&mut self, names: Vec<String>) -> Result<Head> {
        self.names = names;
        let segs = segments_in(&self.dir, &self.names);
        if self.view.sealed.is_empty() && self.view.tail.is_none() {
            if let Some(taken) = self.sealed_from_table(&segs) {
                self.view.sealed = taken;
            }
        }
        self.extend_tail()?;
        let known = match (&self.view.tail, self.view.sealed.last()) {
            (Some(t), _) => Some(t.header.first_lsn),
            (None, Some(s)) => Some(s.header.first_lsn),
            (None, None) => None,
        };
        let newer: Vec<(Lsn, PathBuf)> = segs
            .into_iter()
            .filter(|(l, _)| known.is_none_or(|k| *l > k))
            .collect();
        if let (Some(t), Some(_)) = (&self.view.tail, newer.first()) {
            return Err(corrupt(
                &t.path,
                t.committed_len,
                Some(t.head.last_lsn.next()),
                "segment is not sealed but a later segment exists",
            ));
        }
        let n = newer.len();
        for (i, (first, path)) in newer.into_iter().enumerate() {
            let head = self.view.head();
            let expect = Lsn(head.last_lsn.0 + 1);
            if first != expect {
                return Err(corrupt(&path, 0, Some(expect), sequence_gap(first, expect)));
            }
            if i + 1 < n || looks_sealed(&*self.vfs, &path)? {
                let s = open_sealed_lazy(&self.vfs, &path, expect, head.chain)?;
                self.view.sealed.push(Arc::new(s));
                continue;
            }
            if !self.open_tail(&path, expect, head.chain)? {
                break;
            }
            self.extend_tail()?;
        }
        Ok(self.view.head())
    }

    /// The sealed segments the log's segment table records (see
    /// [`super::table`]), their files not opened, if the table is whole,
    /// its segments are exactly the first of `segs` (the directory
    /// listing's, in order) and they chain from the log's start as a full
    /// open requires; `None` otherwise, and the segments are opened one
    /// by one. Each is checked against its file when first read.
    fn sealed_from_table(&self, segs: &[(Lsn, PathBuf)]) -> Option<Vec<Arc<Sealed>>> {
        if !self.names.iter().any(|n| n == super::table::TABLE_FILE) {
            return None;
        }
        let entries = super::table::load(&*self.vfs, &self.dir)?;
        if entries.len() > segs.len()
            || entries
                .iter()
                .zip(segs)
                .any(|(e, (first, _))| e.header.first_lsn != *first)
        {
            return None;
        }
        let mut out = Vec::with_capacity(entries.len());
        let (mut expect, mut prev) = (Lsn::FIRST, ChainHash::ZERO);
        for e in &entries {
            let s = open_sealed_from_table(&self.vfs, &self.dir, e, expect, prev).ok()?;
            expect = s.footer.last_lsn.next();
            prev = s.footer.last_chain;
            out.push(Arc::new(s));
        }
        Some(out)
    }

    /// Starts following a new tail segment; false if it is still being created.
    fn open_tail(&mut self, path: &Path, first: Lsn, prev: ChainHash) -> Result<bool> {
        let file = self
            .vfs
            .open(path, OpenMode::Read)
            .map_err(|e| EngineError::io("open log segment", path, e))?;
        let len = file
            .len()
            .map_err(|e| EngineError::io("stat log segment", path, e))?;
        if len < SEGMENT_HEADER_LEN as u64 {
            return Ok(false);
        }
        let mut hb = [0u8; SEGMENT_HEADER_LEN];
        file.read_exact_at(&mut hb, 0)
            .map_err(|e| EngineError::io("read log segment", path, e))?;
        if SegmentHeader::decode(&hb).is_err() && len == SEGMENT_HEADER_LEN as u64 {
            return Ok(false);
        }
        let header = check_header(path, &hb, first, prev)?;
        self.view.tail = Some(Tail {
            path: path.to_path_buf(),
            file,
            header,
            committed_len: SEGMENT_HEADER_LEN as u64,
            head: Head {
                last_lsn: Lsn(first.0 - 1),
                chain: prev,
            },
            index: SparseIndex::default(),
            damage: None,
        });
        Ok(true)
    }

    /// Reads whole records (and whole batches) appended to the tail since
    /// the last look; turns the tail into a sealed segment once its footer
    /// is there. Stops at the first frame that is not intact: the writer's
    /// next record, not yet written whole. If intact records follow it,
    /// the bytes are read again (a writer may be copying a group into the
    /// file at that moment) and, still so, they are damage: an error names
    /// the file, the byte offset and the LSN, as opening the log for
    /// writing does, never a log that silently ends early.
    fn extend_tail(&mut self) -> Result<()> {
        if self.view.tail.as_ref().is_some_and(|t| t.damage.is_some()) {
            // Nothing is read past damage (the writer cannot open either).
            return Ok(());
        }
        let mut reads = 0;
        loop {
            match self.extend_tail_once()? {
                None => return Ok(()),
                Some(damage) => {
                    reads += 1;
                    if reads >= DAMAGE_CONFIRM_READS {
                        if let Some(t) = &mut self.view.tail {
                            t.damage = Some(damage);
                        }
                        return Ok(());
                    }
                    std::thread::sleep(DAMAGE_CONFIRM_PAUSE);
                }
            }
        }
    }

    /// One pass of [`LogReader::extend_tail`]: `Some` error if intact
    /// records follow the first frame that is not.
    fn extend_tail_once(&mut self) -> Result<Option<TailDamage>> {
        let Some(t) = &self.view.tail else {
            return Ok(None);
        };
        let len = t
            .file
            .len()
            .map_err(|e| EngineError::io("stat log segment", &t.path, e))?;
        if len <= t.committed_len || self.take_clean_close(len) {
            return Ok(None);
        }
        let Some(t) = &mut self.view.tail else {
            return Ok(None);
        };
        let base = t.committed_len;
        let buf = read_from(t, base, len)?;
        let (off, expect) = take_intact_frames(t, &buf, base);
        let rest = &buf[(t.committed_len - base) as usize..];
        if rest.len() == SEGMENT_FOOTER_LEN && rest.starts_with(b"CAIRNEND") {
            let (path, first, prev) = (t.path.clone(), t.header.first_lsn, t.header.prev_chain);
            let s = open_sealed_lazy(&self.vfs, &path, first, prev)?;
            self.view.tail = None;
            self.view.sealed.push(Arc::new(s));
            return Ok(None);
        }
        Ok(damage_after(&buf[off..], base + off as u64, expect))
    }

    /// Takes the tail as a clean close described it, when nothing has
    /// changed since (as the writer's open takes it, see
    /// `recovery::open_log`): its frames are not read and chained again
    /// here. Each frame's CRC is still checked when it is read, so damage
    /// inside is an error then, never a record; and `verify` reads and
    /// chains every frame. True if taken; `len` is the file's length.
    fn take_clean_close(&mut self, len: u64) -> bool {
        let Some(t) = &mut self.view.tail else {
            return false;
        };
        if t.committed_len != SEGMENT_HEADER_LEN as u64 {
            return false;
        }
        let st = super::recovery::TailState::load(&*self.vfs, &self.dir);
        self.closed = Some(st.as_ref().map(|s| s.last_lsn));
        match st {
            Some(st) if st.matches(&*t.file, &t.header, len) => {
                t.committed_len = st.valid_len;
                t.head = Head {
                    last_lsn: st.last_lsn,
                    chain: st.chain,
                };
                t.index = st.index;
                true
            }
            _ => false,
        }
    }

    /// Takes in damage a read found inside a tail that was opened on a
    /// clean close's word (its frames not read at open): from now on this
    /// reader's head is the last whole record (or batch) before the damaged
    /// frame, and reading to the head fails naming it, exactly as when the
    /// damage is found at open. `e` must be the corruption error of that
    /// read; any other error, or damage outside the tail's committed
    /// records, changes nothing. True if it was taken in.
    pub fn note_damage(&mut self, e: &EngineError) -> bool {
        let EngineError::Corrupt {
            path,
            offset,
            lsn: Some(lsn),
            detail,
        } = e
        else {
            return false;
        };
        let Some(t) = &self.view.tail else {
            return false;
        };
        let first = t.header.first_lsn;
        if *path != t.path
            || t.damage.is_some()
            || *lsn < first
            || *lsn > t.head.last_lsn
            || *offset < SEGMENT_HEADER_LEN as u64
            || *offset >= t.committed_len
        {
            return false;
        }
        // The last frame before the damage that ends a batch: a reader
        // never shows part of one.
        let mut head = Head {
            last_lsn: Lsn(first.0 - 1),
            chain: t.header.prev_chain,
        };
        let walked = self.view.frames_while(first, |fr| {
            if fr.lsn >= *lsn {
                return false;
            }
            if !fr.batch_continues() {
                head = Head {
                    last_lsn: fr.lsn,
                    chain: fr.chain,
                };
            }
            true
        });
        if walked.is_err() && head.last_lsn.next() != *lsn {
            // Something before it is damaged too: the first damage is the
            // one to name, and a read from the start will find it.
            return false;
        }
        let Some(t) = &mut self.view.tail else {
            return false;
        };
        t.head = head;
        t.committed_len = *offset;
        t.index.truncate_to(*offset);
        t.damage = Some(TailDamage {
            offset: *offset,
            lsn: *lsn,
            detail: detail.clone(),
        });
        true
    }

    /// The last committed record seen by the last refresh.
    pub fn head(&self) -> Head {
        self.view.head()
    }

    /// The sealed segments seen by the last refresh that hold records, in
    /// LSN order (their bounds come from their footers: no frame is read).
    pub fn sealed_spans(&self) -> Vec<super::SegmentSpan> {
        self.view.sealed_spans()
    }

    /// Records from `from` (clamped to 1) to the head.
    pub fn iter_from(&self, from: Lsn) -> LogIter {
        self.view.iter_from(from)
    }

    /// The record `lsn`.
    pub fn read(&self, lsn: Lsn) -> Result<Record> {
        self.view.read(lsn)
    }

    /// Calls `f` with the records `lsns` names (ascending, as a posting
    /// list), in that order, until it returns false: one walk of the log,
    /// not a read per record. See [`Log::read_sorted`](super::Log::read_sorted).
    pub fn read_sorted(&self, lsns: &[Lsn], f: impl FnMut(Record) -> bool) -> Result<()> {
        self.view.read_sorted(lsns, f)
    }

    /// See [`Log::for_each_frame`](super::Log::for_each_frame).
    pub fn for_each_frame(
        &self,
        from: Lsn,
        f: impl FnMut(&frame::Frame<'_>),
    ) -> Result<(u64, u64)> {
        self.view.for_each_frame(from, f)
    }

    /// See [`Log::frames_while`](super::Log::frames_while).
    pub fn frames_while(
        &self,
        from: Lsn,
        f: impl FnMut(&frame::Frame<'_>) -> bool,
    ) -> Result<(u64, u64)> {
        self.view.frames_while(from, f)
    }

    /// See [`Log::body`](super::Log::body).
    pub fn body<'a>(&self, fr: &frame::Frame<'a>) -> Result<std::borrow::Cow<'a, [u8]>> {
        Ok(self.view.dicts.body(fr)?)
    }

    /// See [`Log::verify`](super::Log::verify); covers what this reader sees.
    pub fn verify(&self) -> Result<VerifyReport> {
        let closed = super::recovery::TailState::load(&*self.vfs, &self.dir);
        let segs = list_segments(&*self.vfs, &self.dir)?;
        let reach = super::recovery::recorded_reach(&*self.vfs, &self.dir, &segs)?;
        self.view.verify(closed.as_ref(), reach.as_ref())
    }

    /// If the log ends before what its side files record it reaching (its
    /// newest segment files deleted: see `recovery::Reached`), the loss in
    /// words, naming the lost LSNs. A reader reads what is left; a
    /// writable open refuses such a log.
    ///
    /// It reads what the last refresh read (the directory listing, the
    /// `tail.state`), so it describes that view and costs no more I/O.
    pub fn recorded_loss(&self) -> Result<Option<String>> {
        let closed = match self.closed {
            Some(c) => c,
            None => super::recovery::TailState::load(&*self.vfs, &self.dir).map(|s| s.last_lsn),
        };
        let segs = segments_in(&self.dir, &self.names);
        let reach =
            super::recovery::recorded_reach_in(&*self.vfs, &self.dir, &self.names, &segs, closed);
        Ok(reach.and_then(|r| r.unmet_by(self.view.head().last_lsn)))
    }

    /// Counts and sizes; `durability` is the default (the writer's policy is not on disk).
    pub fn stats(&self) -> LogStats {
        self.view.stats(Durability::default())
    }
}

/// The bytes of the tail `t` from `base` to `len` (fewer if the file is
/// shorter by the time it is read).
fn read_from(t: &Tail, base: u64, len: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; (len - base) as usize];
    let mut got = 0;
    while got < buf.len() {
        match t.file.read_at(&mut buf[got..], base + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) => return Err(EngineError::io("read log segment", &t.path, e)),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Takes in the committed frames of `buf` (the tail's bytes from `base`):
/// the tail's head, committed length and sparse index move past them.
/// Gives the offset in `buf` of the first frame that is not intact and
/// the LSN expected there.
fn take_intact_frames(t: &mut Tail, buf: &[u8], base: u64) -> (usize, Lsn) {
    let index = &mut t.index;
    let w = walk_chained(buf, t.head, t.header.chain_form, |lsn, at| {
        index.note(lsn, base + at as u64);
    });
    t.committed_len = base + w.committed as u64;
    t.head = w.head;
    t.index.truncate_to(t.committed_len);
    (w.intact, w.next_lsn)
}

/// The damage `bad` (the tail's bytes from its first frame that is not
/// intact, at byte `at`, where LSN `expect` was due) is, if intact records
/// follow in it. The space the writer reserved ahead is zeros: nothing to
/// look through (most refreshes end there).
fn damage_after(bad: &[u8], at: u64, expect: Lsn) -> Option<TailDamage> {
    if bad.iter().all(|&b| b == 0) {
        return None;
    }
    find_next_valid(bad, 1, expect).map(|next| TailDamage {
        offset: at,
        lsn: expect,
        detail: format!(
            "record frame is not intact, but intact records follow at byte {}, so this is damage, not a record being written (`cairn repair` keeps every intact record)",
            at + next as u64
        ),
    })
}

#[cfg(test)]
mod lazy_map_tests {
    use super::*;
    use crate::log::{Log, LogOptions};
    use crate::vfs::RealVfs;
    use cairn_codec::{Event, EventKind};

    /// A log of `n` records in segments of about 4 KiB, closed.
    fn log_of(dir: &Path, n: u64) {
        let opts = LogOptions {
            segment_size_bytes: 4096,
            durability: Durability::Never,
            ..LogOptions::default()
        };
        let log = Log::open(Arc::new(RealVfs), dir, opts).unwrap();
        for i in 0..n {
            let e = Event::new(EventKind::Reply, "s")
                .with_text(format!("reply {i} {}", "x".repeat(60)));
            log.append(&e).unwrap();
        }
        log.close().unwrap();
    }

    /// Regression (issue 33): a reader's open mapped every sealed segment
    /// (a map, two page faults and an unmap each), so a query from a new
    /// process cost more the longer the history. It now maps only the
    /// segments a read reaches.
    #[test]
    fn a_reader_maps_only_the_sealed_segments_it_reads() {
        let tmp = tempfile::tempdir().unwrap();
        log_of(tmp.path(), 300);
        let r = LogReader::open(Arc::new(RealVfs), tmp.path()).unwrap();
        let mapped = |r: &LogReader| -> Vec<bool> {
            r.view.sealed.iter().map(|s| s.data.is_mapped()).collect()
        };
        assert!(r.view.sealed.len() >= 3, "{}", r.view.sealed.len());
        assert!(mapped(&r).iter().all(|m| !m), "{:?}", mapped(&r));
        let rec = r.read(Lsn(1)).unwrap();
        assert_eq!(rec.lsn, Lsn(1));
        let m = mapped(&r);
        assert!(m[0] && m[1..].iter().all(|m| !m), "{m:?}");
        // Every record still reads back, in order, through the lazy maps.
        assert_eq!(r.iter_from(Lsn(1)).count(), 300);
    }

    /// The real file system, saying it cannot map cheaply (as an archive
    /// read in place does) and failing every map: what a reader reads
    /// then goes by `read_at` alone.
    #[derive(Debug)]
    struct NoMaps(RealVfs);

    impl Vfs for NoMaps {
        fn open(&self, p: &Path, m: OpenMode) -> std::io::Result<Arc<dyn crate::vfs::VfsFile>> {
            self.0.open(p, m)
        }
        fn map(&self, p: &Path) -> std::io::Result<crate::vfs::Mapped> {
            Err(std::io::Error::other(format!("no map of {}", p.display())))
        }
        fn list(&self, d: &Path) -> std::io::Result<Vec<String>> {
            self.0.list(d)
        }
        fn create_dir_all(&self, d: &Path) -> std::io::Result<()> {
            self.0.create_dir_all(d)
        }
        fn rename(&self, a: &Path, b: &Path) -> std::io::Result<()> {
            self.0.rename(a, b)
        }
        fn remove_file(&self, p: &Path) -> std::io::Result<()> {
            self.0.remove_file(p)
        }
        fn sync_dir(&self, d: &Path) -> std::io::Result<()> {
            self.0.sync_dir(d)
        }
        fn exists(&self, p: &Path) -> bool {
            self.0.exists(p)
        }
        fn lock_exclusive(&self, p: &Path) -> std::io::Result<crate::vfs::LockGuard> {
            self.0.lock_exclusive(p)
        }
        fn maps_cheaply(&self) -> bool {
            false
        }
    }

    /// On a file system that cannot map cheaply, a reader reads sealed
    /// segments' frames by range at their sparse indexes' offsets: every
    /// record reads back equal to a reader's on the real file system,
    /// with no segment mapped; a frame altered on disk is named (file,
    /// offset, LSN), never returned.
    #[test]
    fn sealed_segments_are_read_by_range_where_maps_are_dear() {
        let tmp = tempfile::tempdir().unwrap();
        log_of(tmp.path(), 300);
        let want: Vec<Record> = LogReader::open(Arc::new(RealVfs), tmp.path())
            .unwrap()
            .iter_from(Lsn(1))
            .map(|r| r.unwrap())
            .collect();
        let r = LogReader::open(Arc::new(NoMaps(RealVfs)), tmp.path()).unwrap();
        assert!(r.view.sealed.len() >= 3, "{}", r.view.sealed.len());
        let got: Vec<Record> = r.iter_from(Lsn(1)).map(|r| r.unwrap()).collect();
        assert_eq!(got, want);
        assert_eq!(r.read(Lsn(150)).unwrap(), want[149]);
        assert!(r.view.sealed.iter().all(|s| !s.data.is_mapped()));

        // A byte of the last frame of the first sealed segment altered.
        let seg = r.view.sealed[0].clone();
        let last = seg.footer.last_lsn;
        let end = seg.frames_end() as usize;
        let mut bytes = std::fs::read(&seg.path).unwrap();
        bytes[end - 3] ^= 0x40;
        std::fs::write(&seg.path, &bytes).unwrap();
        let r = LogReader::open(Arc::new(NoMaps(RealVfs)), tmp.path()).unwrap();
        match r.read(last).unwrap_err() {
            EngineError::Corrupt { path, lsn, .. } => {
                assert_eq!(path, seg.path);
                assert_eq!(lsn, Some(last));
            }
            e => panic!("{e}"),
        }
    }

    /// A sealed segment whose size changed between a reader's open and its
    /// first read (sealed segments never change) is reported as damage
    /// naming the file, not read: opened one by one (no segment table),
    /// or from the table (its file first opened by that read).
    #[test]
    fn a_sealed_segment_changed_after_open_is_damage() {
        for (table, says) in [
            (false, "changed while the log was open"),
            (true, "segment table"),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            log_of(tmp.path(), 300);
            if !table {
                std::fs::remove_file(tmp.path().join(super::super::table::TABLE_FILE)).unwrap();
            }
            let r = LogReader::open(Arc::new(RealVfs), tmp.path()).unwrap();
            assert_eq!(r.view.sealed[0].data.is_from_table(), table);
            let first = r.view.sealed[0].path.clone();
            let mut bytes = std::fs::read(&first).unwrap();
            bytes.extend_from_slice(&[0; 16]);
            std::fs::write(&first, &bytes).unwrap();
            match r.read(Lsn(1)).unwrap_err() {
                EngineError::Corrupt { path, detail, .. } => {
                    assert_eq!(path, first);
                    assert!(detail.contains(says), "{detail}");
                }
                e => panic!("{e}"),
            }
        }
    }

    /// The real file system, counting the listings of directories.
    #[derive(Debug, Default)]
    struct CountsLists(RealVfs, std::sync::atomic::AtomicUsize);

    impl CountsLists {
        fn lists(&self) -> usize {
            self.1.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    impl Vfs for CountsLists {
        fn open(&self, p: &Path, m: OpenMode) -> std::io::Result<Arc<dyn crate::vfs::VfsFile>> {
            self.0.open(p, m)
        }
        fn map(&self, p: &Path) -> std::io::Result<crate::vfs::Mapped> {
            self.0.map(p)
        }
        fn list(&self, d: &Path) -> std::io::Result<Vec<String>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.list(d)
        }
        fn create_dir_all(&self, d: &Path) -> std::io::Result<()> {
            self.0.create_dir_all(d)
        }
        fn rename(&self, a: &Path, b: &Path) -> std::io::Result<()> {
            self.0.rename(a, b)
        }
        fn remove_file(&self, p: &Path) -> std::io::Result<()> {
            self.0.remove_file(p)
        }
        fn sync_dir(&self, d: &Path) -> std::io::Result<()> {
            self.0.sync_dir(d)
        }
        fn exists(&self, p: &Path) -> bool {
            self.0.exists(p)
        }
        fn lock_exclusive(&self, p: &Path) -> std::io::Result<crate::vfs::LockGuard> {
            self.0.lock_exclusive(p)
        }
    }

    /// Regression (issue 33): a query from a new process refreshed its
    /// reader right after the open, and listed the log directory again
    /// for it. While the tail has no footer no later segment can exist,
    /// so a refresh reads the tail alone; it still picks up the records
    /// appended since, and lists the directory once the tail is sealed,
    /// to find the segments after it.
    #[test]
    fn a_refresh_lists_the_directory_only_once_the_tail_is_sealed() {
        let tmp = tempfile::tempdir().unwrap();
        log_of(tmp.path(), 10);
        let vfs = Arc::new(CountsLists::default());
        let mut r = LogReader::open(vfs.clone(), tmp.path()).unwrap();
        let opened = vfs.lists();
        assert_eq!(r.head().last_lsn, Lsn(10));
        assert_eq!(r.refresh().unwrap().last_lsn, Lsn(10));
        assert_eq!(vfs.lists(), opened, "a refresh of an unsealed tail listed");

        let opts = LogOptions {
            segment_size_bytes: 4096,
            durability: Durability::Never,
            ..LogOptions::default()
        };
        let log = Log::open(Arc::new(RealVfs), tmp.path(), opts).unwrap();
        let reply = |i: u64| Event::new(EventKind::Reply, "s").with_text(format!("more {i}"));
        log.append(&reply(11)).unwrap();
        log.sync().unwrap();
        assert_eq!(r.refresh().unwrap().last_lsn, Lsn(11));
        assert_eq!(vfs.lists(), opened, "records in the tail need no listing");

        // Past the segment size: the tail is sealed and a new one made.
        let segments = r.view.sealed.len();
        let mut lsn = 11;
        while log.sealed_spans().len() == segments {
            lsn += 1;
            log.append(&reply(lsn)).unwrap();
        }
        log.append(&reply(lsn + 1)).unwrap();
        log.sync().unwrap();
        assert_eq!(r.refresh().unwrap().last_lsn, Lsn(lsn + 1));
        assert!(vfs.lists() > opened, "a sealed tail must list for the next");
        assert_eq!(r.view.sealed.len(), segments + 1);
        let all: Vec<Record> = r.iter_from(Lsn(1)).map(|r| r.unwrap()).collect();
        assert_eq!(all.len() as u64, lsn + 1);
        assert!(all
            .iter()
            .enumerate()
            .all(|(i, rec)| rec.lsn == Lsn(i as u64 + 1)));
        log.close().unwrap();
    }
}
