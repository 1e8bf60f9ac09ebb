//! Salvage: repair a damaged log, keeping every intact record.
//!
//! Segments before the first damaged one are left untouched. From the first
//! damaged segment on, every intact record (valid CRC, decodable body, whole
//! batch) is copied, with its original LSN, into new segments with a
//! recomputed hash chain. A record that was lost in the middle is replaced
//! by a `custom` placeholder event (session `cairn`, `meta.cairn_salvage`)
//! so LSNs stay dense and every later record keeps its LSN; lost records at
//! the very end are simply dropped. The replaced files are moved (never
//! deleted) into `dir/damaged-<unix ms>/`.
//!
//! Records compressed with the log's zstd dictionary are checked with it.
//! While a dictionary that records need is missing or damaged, salvage
//! refuses to run (naming the file), since it would otherwise drop those
//! intact records.
//!
//! The switch is crash-safe: new segments are written as `*.seg.new` and
//! fsynced, then a `salvage.pending` file (with a CRC) lists the moves and
//! renames, which are then done and the marker removed. An interrupted
//! switch is finished by the next [`Log::open`](super::Log::open) or salvage.

use cairn_codec::bytes::crc32_seeded as crc;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::event::Meta;
use cairn_codec::frame::{self, ChainForm, RecordKind};
use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{zdict, ChainHash, Event, EventKind, Lsn, Timestamp};

use super::dict::LogDicts;
use super::options::DEFAULT_SEGMENT_SIZE_BYTES;
use super::recovery::{
    looks_sealed, read_small, recorded_reach, scan_tail, Reached, TailState, TAIL_STATE_FILE,
};
use super::scan::{walk, Step};
use super::segment::{index_path, list_segments, segment_name};
use super::Head;
use crate::vfs::{OpenMode, Vfs, VfsFile};
use crate::{EngineError, Result};

/// The marker file of a salvage whose file moves are not finished.
pub(crate) const PENDING_FILE: &str = "salvage.pending";
/// Suffix of segments written by salvage before they replace the old ones.
const NEW_SUFFIX: &str = ".new";
/// A valid frame whose LSN jumps further than this past the expected one is
/// taken to be foreign (not this log's) and dropped, rather than filling a
/// gap of that many placeholder records.
const MAX_PLACEHOLDER_GAP: u64 = 1_000_000;
/// Session of the placeholder events salvage writes for lost records.
pub const SALVAGE_SESSION: &str = "cairn";
/// `error_kind` of a salvage placeholder.
const SALVAGED: &str = "salvaged";
/// The `meta` key of a salvage placeholder, holding the LSN it stands for.
const META_SALVAGE: &str = "cairn_salvage";

/// True when `e` is a placeholder salvage wrote where a record was lost:
/// a failed `custom` event of session [`SALVAGE_SESSION`] with `error_kind`
/// `salvaged` and `meta.cairn_salvage`. A record that named the lost one (a
/// rollback's `target`, a checkpoint id) now names the placeholder.
pub fn is_placeholder(e: &Event) -> bool {
    e.kind == EventKind::Custom
        && !e.ok
        && e.session == SALVAGE_SESSION
        && e.error_kind.as_deref() == Some(SALVAGED)
        && e.meta
            .as_ref()
            .is_some_and(|m| m.0.contains_key(META_SALVAGE))
}

/// A range of LSNs that salvage could not keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedRange {
    /// First LSN lost.
    pub first: Lsn,
    /// Last LSN lost.
    pub last: Lsn,
    /// Why, and whether placeholders now stand at these LSNs.
    pub reason: String,
}

/// What [`salvage`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SalvageReport {
    /// Intact records in the log after salvage (placeholders not counted).
    pub kept_records: u64,
    /// Placeholder records written in place of lost ones.
    pub placeholders: u64,
    /// LSN ranges lost.
    pub dropped: Vec<DroppedRange>,
    /// Bytes of damaged or dropped data not carried over.
    pub dropped_bytes: u64,
    /// Where the replaced files were moved (`None` if nothing was damaged).
    pub damaged_dir: Option<PathBuf>,
    /// The files moved there (their original paths).
    pub moved: Vec<PathBuf>,
    /// The head after salvage.
    pub head: Head,
}

fn io<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> EngineError + 'p {
    move |e| EngineError::io(op, path, e)
}

/// Repairs the log in `dir`, keeping every intact record (see the module
/// docs). A log without damage is left as it is (a torn tail is left for
/// [`Log::open`](super::Log::open) to truncate). The caller holds the store lock.
pub fn salvage(vfs: Arc<dyn Vfs>, dir: &Path) -> Result<SalvageReport> {
    let dicts = LogDicts::load(vfs.clone(), dir, false)?;
    let vfs = &*vfs;
    finish_pending(vfs, dir)?;
    let segs = list_segments(vfs, dir)?;
    check_dictionaries(vfs, &segs, &dicts)?;
    let closed = TailState::load(vfs, dir);
    let reach = recorded_reach(vfs, dir, &segs)?;
    let prefix = intact_prefix(vfs, &segs, &dicts, closed.as_ref())?;
    let Some(k) = first_to_rewrite(vfs, &segs, &prefix, reach.as_ref())? else {
        return Ok(SalvageReport {
            kept_records: prefix.next.0 - 1,
            placeholders: 0,
            dropped: Vec::new(),
            dropped_bytes: 0,
            damaged_dir: None,
            moved: Vec::new(),
            head: Head {
                last_lsn: Lsn(prefix.next.0 - 1),
                chain: prefix.chain,
            },
        });
    };
    let (expect, chain) = prefix
        .starts
        .get(k)
        .copied()
        .unwrap_or((prefix.next, prefix.chain));
    let kept_before = expect.0 - 1;
    let mut out = Rewriter::new(vfs, dir, expect, chain, &dicts)?;
    // Placeholders carry the time of the last record before them: the
    // last one kept in the segments left untouched, when nothing after
    // it survives (a log's times must not jump back to 1970).
    if let Some((_, path)) = k.checked_sub(1).and_then(|i| segs.get(i)) {
        out.last_ts = last_record_ts(vfs, path, &dicts)?.unwrap_or(out.last_ts);
    }
    let mut old_files = Vec::new();
    for (_, path) in &segs[k..] {
        let buf = read_all(vfs, path)?;
        out.take_segment(&buf)?;
        old_files.push(path.clone());
        let idx = index_path(path);
        if vfs.exists(&idx) {
            old_files.push(idx);
        }
    }
    fill_lost_tail(&mut out, &segs, closed.as_ref(), reach.as_ref())?;
    let (new_files, mut report) = out.finish()?;
    report.kept_records += kept_before;
    set_aside_side_files(vfs, dir, &segs, &mut old_files)?;
    let damaged = switch_files(vfs, dir, &old_files, new_files)?;
    report.damaged_dir = Some(dir.join(damaged));
    report.moved = old_files;
    Ok(report)
}

/// How far the log checks out from its first segment on.
struct IntactPrefix {
    /// The index of the first damaged segment, if any.
    first_bad: Option<usize>,
    /// Where each segment up to the first damaged one starts: (next LSN,
    /// chain) before it.
    starts: Vec<(Lsn, ChainHash)>,
    /// The LSN after the intact prefix.
    next: Lsn,
    /// The chain at the end of the intact prefix.
    chain: ChainHash,
}

/// Checks the segments in order up to the first damaged one.
fn intact_prefix(
    vfs: &dyn Vfs,
    segs: &[(Lsn, PathBuf)],
    dicts: &LogDicts,
    closed: Option<&TailState>,
) -> Result<IntactPrefix> {
    let mut prefix = IntactPrefix {
        first_bad: None,
        starts: Vec::with_capacity(segs.len()),
        next: Lsn::FIRST,
        chain: ChainHash::ZERO,
    };
    for (i, (name_lsn, path)) in segs.iter().enumerate() {
        let (expect, chain) = (prefix.next, prefix.chain);
        prefix.starts.push((expect, chain));
        let buf = read_all(vfs, path)?;
        let is_last = i + 1 == segs.len();
        let intact = (*name_lsn == expect)
            .then(|| segment_intact(path, &buf, is_last, expect, chain, dicts, closed));
        match intact {
            Some(Some((e, c))) => (prefix.next, prefix.chain) = (e, c),
            _ => {
                prefix.first_bad = Some(i);
                break;
            }
        }
    }
    Ok(prefix)
}

/// The index of the first segment to rewrite (`segs.len()` to rewrite
/// none but add placeholders after them), or `None` when the log needs
/// no salvage. An intact log that ends before what its side files record
/// it reached lost its newest segments: the lost LSNs get placeholders
/// after its last record, written after the segments kept (an unsealed
/// last segment is carried over into the new files, as it cannot be
/// sealed in place).
fn first_to_rewrite(
    vfs: &dyn Vfs,
    segs: &[(Lsn, PathBuf)],
    prefix: &IntactPrefix,
    reach: Option<&Reached>,
) -> Result<Option<usize>> {
    let short = reach.is_some_and(|r| r.unmet_by(Lsn(prefix.next.0 - 1)).is_some());
    Ok(match prefix.first_bad {
        Some(k) => Some(k),
        None if short => match segs.last() {
            Some((_, p)) if !looks_sealed(vfs, p)? => Some(segs.len() - 1),
            _ => Some(segs.len()),
        },
        None => None,
    })
}

/// Placeholders for the records at the end that the log's clean close had
/// certified were durable and acknowledged keep their LSNs from being
/// given to other events (a torn tail, never acknowledged, is dropped).
/// So do placeholders for the records that the side files record the log
/// reaching, past the end of the segments left (a deleted newest segment).
fn fill_lost_tail(
    out: &mut Rewriter<'_>,
    segs: &[(Lsn, PathBuf)],
    closed: Option<&TailState>,
    reach: Option<&Reached>,
) -> Result<()> {
    let tail_first = segs.last().map(|(lsn, _)| *lsn);
    if let Some(st) = closed.filter(|st| Some(st.first_lsn) == tail_first) {
        out.fill_to(
            st.last_lsn,
            "damaged or cut off at the end of the log, which its clean close had left holding them",
        )?;
    }
    if let Some(r) = reach {
        let gap = r.lsn.0.saturating_sub(out.next.0);
        if gap >= MAX_PLACEHOLDER_GAP {
            return Err(EngineError::Invalid(format!(
                "{} records that the log reached LSN {}, {gap} records past the end of what is left: \
                 more than the {MAX_PLACEHOLDER_GAP} placeholders salvage writes; restore the log's \
                 segments from a backup, or move that file aside if it does not belong to this log",
                r.file.display(),
                r.lsn
            )));
        }
        out.fill_to(
            r.lsn,
            &format!(
                "lost with the log's newest segment files, which {} ({}) records",
                r.file.display(),
                r.what
            ),
        )?;
    }
    Ok(())
}

/// Adds to `old_files` the side files that salvage sets aside with the
/// replaced segments: the tail state, and the sparse indexes of segments
/// that are gone (the placeholders now account for the LSNs they
/// recorded).
fn set_aside_side_files(
    vfs: &dyn Vfs,
    dir: &Path,
    segs: &[(Lsn, PathBuf)],
    old_files: &mut Vec<PathBuf>,
) -> Result<()> {
    let state = dir.join(TAIL_STATE_FILE);
    if vfs.exists(&state) {
        old_files.push(state);
    }
    for name in vfs.list(dir).map_err(io("list log directory", dir))? {
        let Some(stem) = name.strip_suffix(".idx") else {
            continue;
        };
        let seg_gone = !segs
            .iter()
            .any(|(_, p)| p.file_stem().is_some_and(|s| s == stem));
        let p = dir.join(&name);
        if seg_gone && !old_files.contains(&p) {
            old_files.push(p);
        }
    }
    Ok(())
}

/// Switches to the new segments, crash-safely: writes and fsyncs the
/// marker that lists the moves and renames, then does them. Returns the
/// name of the directory the old files were moved into.
fn switch_files(
    vfs: &dyn Vfs,
    dir: &Path,
    old_files: &[PathBuf],
    new_files: Vec<String>,
) -> Result<String> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let damaged = format!("damaged-{ts}");
    let plan = Plan {
        damaged: damaged.clone(),
        old: old_files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect(),
        new: new_files,
    };
    let pending = dir.join(PENDING_FILE);
    let f = vfs
        .open(&pending, OpenMode::CreateTruncate)
        .map_err(io("create salvage marker", &pending))?;
    f.write_all_at(&plan.encode(), 0)
        .and_then(|_| f.sync_data())
        .map_err(io("write salvage marker", &pending))?;
    vfs.sync_dir(dir).map_err(io("fsync log directory", dir))?;
    finish_pending(vfs, dir)?;
    Ok(damaged)
}

/// Fails, naming the file, if a record with a valid CRC needs a zstd
/// dictionary that is missing or damaged. A pass of its own, before any
/// other, so that salvage refuses before it writes anything.
fn check_dictionaries(vfs: &dyn Vfs, segs: &[(Lsn, PathBuf)], dicts: &LogDicts) -> Result<()> {
    for (_, path) in segs {
        let buf = read_all(vfs, path)?;
        let mut missing = None;
        walk(&buf, SEGMENT_HEADER_LEN.min(buf.len()), |st| {
            if let Step::Frame(off, fr) = st {
                if fr.flags & frame::FLAG_DICT != 0 {
                    let id = zdict::frame_dict_id(fr.stored);
                    if id != 0 && dicts.lookup(id).is_none() {
                        missing = Some((off, fr.lsn, id));
                    }
                }
            }
            missing.is_none()
        });
        if let Some((off, lsn, id)) = missing {
            return Err(EngineError::Invalid(format!(
                "{} byte {off}: record LSN {lsn} needs a zstd dictionary, and {}; \
                 restore that file before salvaging (salvage would drop every record that needs it)",
                path.display(),
                dicts.diagnose(id)
            )));
        }
    }
    Ok(())
}

/// The time of the last record of the intact segment at `path` whose body
/// decodes, if any.
fn last_record_ts(vfs: &dyn Vfs, path: &Path, dicts: &LogDicts) -> Result<Option<Timestamp>> {
    let buf = read_all(vfs, path)?;
    let end = match SegmentFooter::decode_tail(&buf) {
        Ok(Some(_)) => buf.len() - SEGMENT_FOOTER_LEN,
        _ => buf.len(),
    };
    let mut last = None;
    walk(&buf[..end], SEGMENT_HEADER_LEN.min(end), |st| {
        if let Step::Frame(_, fr) = st {
            last = Some(fr);
        }
        true
    });
    Ok(last.and_then(|fr| {
        dicts
            .body(&fr)
            .and_then(|b| Event::decode_body(&b))
            .ok()
            .map(|e| e.ts)
    }))
}

fn read_all(vfs: &dyn Vfs, path: &Path) -> Result<Vec<u8>> {
    let f = vfs
        .open(path, OpenMode::Read)
        .map_err(io("open log segment", path))?;
    let len = f.len().map_err(io("stat log segment", path))?;
    let mut b = vec![0u8; len as usize];
    f.read_exact_at(&mut b, 0)
        .map_err(io("read log segment", path))?;
    Ok(b)
}

/// If the segment is intact (a torn tail on the last one counts as intact),
/// the LSN and chain after it.
fn segment_intact(
    path: &Path,
    buf: &[u8],
    is_last: bool,
    first: Lsn,
    prev: ChainHash,
    dicts: &LogDicts,
    closed: Option<&TailState>,
) -> Option<(Lsn, ChainHash)> {
    let h = SegmentHeader::decode(buf).ok()?;
    if h.first_lsn != first || h.prev_chain != prev {
        return None;
    }
    let footer = SegmentFooter::decode_tail(buf).ok()?;
    let Some(f) = footer else {
        if !is_last {
            return None;
        }
        let s = scan_tail(path, buf, &h).ok()?;
        if closed.is_some_and(|st| st.unmet(first, s.head, s.valid_len).is_some()) {
            return None;
        }
        // Bodies must decode too.
        let mut ok = true;
        walk(&buf[..s.valid_len as usize], SEGMENT_HEADER_LEN, |st| {
            ok &= matches!(st, Step::Frame(_, fr) if decodes(dicts, &fr));
            ok
        });
        return ok.then_some((s.head.last_lsn.next(), s.head.chain));
    };
    let end = buf.len() - SEGMENT_FOOTER_LEN;
    let (mut expect, mut chain, mut ok, mut open_batch) = (first, prev, true, false);
    walk(&buf[..end], SEGMENT_HEADER_LEN, |st| {
        match st {
            Step::Frame(_, fr)
                if fr.lsn == expect
                    && fr.chain_follows(chain, h.chain_form)
                    && decodes(dicts, &fr) =>
            {
                expect = expect.next();
                chain = fr.chain;
                open_batch = fr.batch_continues();
            }
            _ => ok = false,
        }
        ok
    });
    (ok && !open_batch
        && f.last_lsn.next() == expect
        && f.last_chain == chain
        && f.record_count == expect.0 - first.0)
        .then_some((expect, chain))
}

/// True if a frame's body decompresses (with its dictionary) and decodes.
fn decodes(dicts: &LogDicts, fr: &frame::Frame<'_>) -> bool {
    dicts.body(fr).and_then(|b| Event::decode_body(&b)).is_ok()
}

/// A frame held back until its batch is complete.
struct Pending {
    lsn: Lsn,
    bytes: Vec<u8>,
    ts: Timestamp,
}

/// A new segment being written: final name, file, header, end offset.
struct NewSeg {
    name: String,
    file: Arc<dyn VfsFile>,
    header: SegmentHeader,
    end: u64,
}

/// Writes the salvaged records into `*.seg.new` segments.
struct Rewriter<'a> {
    vfs: &'a dyn Vfs,
    dir: &'a Path,
    dicts: &'a LogDicts,
    /// The open new segment: (final name, file, header, end offset, index).
    seg: Option<NewSeg>,
    new_files: Vec<String>,
    next: Lsn,
    chain: ChainHash,
    pending: Vec<Pending>,
    last_ts: Timestamp,
    report: SalvageReport,
}

impl<'a> Rewriter<'a> {
    fn new(
        vfs: &'a dyn Vfs,
        dir: &'a Path,
        next: Lsn,
        chain: ChainHash,
        dicts: &'a LogDicts,
    ) -> Result<Rewriter<'a>> {
        // Leftovers of a salvage that never reached its marker: the old
        // files are intact, so these partial outputs are discarded.
        for name in vfs.list(dir).map_err(io("list log directory", dir))? {
            if name.ends_with(NEW_SUFFIX) {
                let p = dir.join(&name);
                vfs.remove_file(&p)
                    .map_err(io("remove unfinished salvage output", &p))?;
            }
        }
        Ok(Rewriter {
            vfs,
            dir,
            dicts,
            seg: None,
            new_files: Vec::new(),
            next,
            chain,
            pending: Vec::new(),
            last_ts: Timestamp(0),
            report: SalvageReport {
                kept_records: 0,
                placeholders: 0,
                dropped: Vec::new(),
                dropped_bytes: 0,
                damaged_dir: None,
                moved: Vec::new(),
                head: Head::default(),
            },
        })
    }

    fn drop_range(&mut self, first: Lsn, last: Lsn, reason: &str) {
        if first <= last {
            self.report.dropped.push(DroppedRange {
                first,
                last,
                reason: reason.to_string(),
            });
        }
    }

    /// Carries over the intact records of one old segment.
    fn take_segment(&mut self, buf: &[u8]) -> Result<()> {
        let end = match SegmentFooter::decode_tail(buf) {
            Ok(Some(_)) => buf.len() - SEGMENT_FOOTER_LEN,
            _ => buf.len(),
        };
        let mut frames = Vec::new();
        let mut dropped_bytes = 0u64;
        walk(&buf[..end], SEGMENT_HEADER_LEN.min(end), |st| {
            match st {
                Step::Frame(off, fr) => {
                    match self.dicts.body(&fr).and_then(|b| Event::decode_body(&b)) {
                        Ok(ev) => frames.push((fr.lsn, fr.batch_continues(), off, fr.len(), ev.ts)),
                        Err(_) => dropped_bytes += fr.len() as u64,
                    }
                }
                Step::Bad { off, next, .. } => {
                    dropped_bytes += (next.unwrap_or(end) - off) as u64;
                }
            }
            true
        });
        self.report.dropped_bytes += dropped_bytes;
        for (lsn, cont, off, len, ts) in frames {
            let want = Lsn(self.next.0 + self.pending.len() as u64);
            if lsn < want || lsn.0 - want.0 > MAX_PLACEHOLDER_GAP {
                // A stale copy or a foreign record.
                self.report.dropped_bytes += len as u64;
                continue;
            }
            if lsn > want {
                self.abandon_batch("its atomic batch was damaged")?;
                let (a, b) = (self.next, Lsn(lsn.0 - 1));
                for l in a.0..=b.0 {
                    self.placeholder(Lsn(l))?;
                }
                self.drop_range(
                    a,
                    b,
                    "lost in a damaged region; placeholder records stand in their place",
                );
            }
            self.pending.push(Pending {
                lsn,
                bytes: buf[off..off + len].to_vec(),
                ts,
            });
            if !cont {
                for p in std::mem::take(&mut self.pending) {
                    self.emit(p.bytes, p.lsn)?;
                    self.last_ts = p.ts;
                    self.report.kept_records += 1;
                }
            }
        }
        Ok(())
    }

    /// Puts placeholders at every LSN up to `last` not yet written (an
    /// incomplete batch at the end included): records the log's clean
    /// close certified, lost since.
    fn fill_to(&mut self, last: Lsn, why: &str) -> Result<()> {
        let pending_last = self.pending.last().map(|p| p.lsn);
        if pending_last.is_some_and(|l| l <= last) {
            self.abandon_batch("its atomic batch was damaged")?;
        }
        if self.next <= last {
            let a = self.next;
            for l in a.0..=last.0 {
                self.placeholder(Lsn(l))?;
            }
            self.drop_range(
                a,
                last,
                &format!("{why}; placeholder records stand in their place"),
            );
        }
        Ok(())
    }

    /// Replaces an incomplete batch with placeholders.
    fn abandon_batch(&mut self, why: &str) -> Result<()> {
        let lost = std::mem::take(&mut self.pending);
        if let (Some(a), Some(b)) = (lost.first(), lost.last()) {
            self.report.dropped_bytes += lost.iter().map(|p| p.bytes.len() as u64).sum::<u64>();
            let (a, b) = (a.lsn, b.lsn);
            for l in a.0..=b.0 {
                self.placeholder(Lsn(l))?;
            }
            self.drop_range(
                a,
                b,
                &format!("{why}; placeholder records stand in their place"),
            );
        }
        Ok(())
    }

    fn placeholder(&mut self, lsn: Lsn) -> Result<()> {
        let mut e = Event::new(EventKind::Custom, SALVAGE_SESSION).with_text(format!(
            "record {lsn} was lost to damage and replaced by salvage"
        ));
        e.ts = self.last_ts;
        e.ok = false;
        e.error_kind = Some(SALVAGED.into());
        let mut m = serde_json::Map::new();
        m.insert(
            META_SALVAGE.into(),
            serde_json::json!({ "lost_lsn": lsn.0 }),
        );
        e.meta = Some(Meta(m));
        let mut b = Vec::new();
        frame::encode_unplaced(&mut b, RecordKind::Event, 0, &e.encode_body()?, None)?;
        self.report.placeholders += 1;
        self.emit(b, lsn)
    }

    /// Appends one frame (re-chained) to the new segments.
    fn emit(&mut self, mut bytes: Vec<u8>, lsn: Lsn) -> Result<()> {
        debug_assert_eq!(lsn, self.next);
        let full = match &self.seg {
            Some(NewSeg { end, .. }) => {
                *end > SEGMENT_HEADER_LEN as u64
                    && end + (bytes.len() + SEGMENT_FOOTER_LEN) as u64 > DEFAULT_SEGMENT_SIZE_BYTES
            }
            None => true,
        };
        if full {
            self.seal()?;
            let name = segment_name(lsn);
            let path = self.dir.join(format!("{name}{NEW_SUFFIX}"));
            let f = self
                .vfs
                .open(&path, OpenMode::CreateTruncate)
                .map_err(io("create salvaged segment", &path))?;
            let header = SegmentHeader {
                first_lsn: lsn,
                prev_chain: self.chain,
                chain_form: ChainForm::CURRENT,
            };
            f.write_all_at(&header.encode(), 0)
                .map_err(io("write salvaged segment", &path))?;
            self.seg = Some(NewSeg {
                name,
                file: f,
                header,
                end: SEGMENT_HEADER_LEN as u64,
            });
        }
        self.chain = frame::place(&mut bytes, lsn, self.chain, ChainForm::CURRENT);
        if let Some(NewSeg {
            name, file: f, end, ..
        }) = &mut self.seg
        {
            let path = self.dir.join(format!("{name}{NEW_SUFFIX}"));
            f.write_all_at(&bytes, *end)
                .map_err(io("write salvaged segment", &path))?;
            *end += bytes.len() as u64;
        }
        self.next = lsn.next();
        Ok(())
    }

    /// Seals the open new segment (footer, fsync) if there is one.
    fn seal(&mut self) -> Result<()> {
        if let Some(NewSeg {
            name,
            file: f,
            header,
            end,
        }) = self.seg.take()
        {
            let footer = SegmentFooter {
                record_count: self.next.0 - header.first_lsn.0,
                last_lsn: Lsn(self.next.0 - 1),
                last_chain: self.chain,
                frames_len: (end - SEGMENT_HEADER_LEN as u64) as u32,
            };
            let path = self.dir.join(format!("{name}{NEW_SUFFIX}"));
            f.write_all_at(&footer.encode(), end)
                .and_then(|_| f.sync_data())
                .map_err(io("write salvaged segment", &path))?;
            // The sparse index is rebuilt (and persisted) by the next open.
            self.new_files.push(name);
        }
        Ok(())
    }

    /// Drops an incomplete batch at the end, syncs the last new segment
    /// (left unsealed: it becomes the tail) and returns the new file names.
    fn finish(mut self) -> Result<(Vec<String>, SalvageReport)> {
        let lost = std::mem::take(&mut self.pending);
        if let (Some(a), Some(b)) = (lost.first(), lost.last()) {
            self.report.dropped_bytes += lost.iter().map(|p| p.bytes.len() as u64).sum::<u64>();
            self.drop_range(
                a.lsn,
                b.lsn,
                "an incomplete atomic batch at the end of the log",
            );
        }
        match self.seg.take() {
            Some(NewSeg { name, file: f, .. }) => {
                let path = self.dir.join(format!("{name}{NEW_SUFFIX}"));
                f.sync_data().map_err(io("fsync salvaged segment", &path))?;
                self.new_files.push(name);
            }
            None => {
                // Nothing survived from the damaged segments: start an empty tail.
                let name = segment_name(self.next);
                let path = self.dir.join(format!("{name}{NEW_SUFFIX}"));
                let f = self
                    .vfs
                    .open(&path, OpenMode::CreateTruncate)
                    .map_err(io("create salvaged segment", &path))?;
                let header = SegmentHeader {
                    first_lsn: self.next,
                    prev_chain: self.chain,
                    chain_form: ChainForm::CURRENT,
                };
                f.write_all_at(&header.encode(), 0)
                    .and_then(|_| f.sync_data())
                    .map_err(io("write salvaged segment", &path))?;
                self.new_files.push(name);
            }
        }
        self.vfs
            .sync_dir(self.dir)
            .map_err(io("fsync log directory", self.dir))?;
        self.report.head = Head {
            last_lsn: Lsn(self.next.0 - 1),
            chain: self.chain,
        };
        Ok((self.new_files, self.report))
    }
}

/// The moves and renames of a salvage, as recorded in `salvage.pending`.
#[derive(Debug, PartialEq)]
struct Plan {
    damaged: String,
    old: Vec<String>,
    new: Vec<String>,
}

impl Plan {
    /// Text lines `damaged <dir>`, `old <name>`, `new <name>`, then `crc <hex>`.
    fn encode(&self) -> Vec<u8> {
        let mut s = format!("damaged {}\n", self.damaged);
        for o in &self.old {
            s.push_str(&format!("old {o}\n"));
        }
        for n in &self.new {
            s.push_str(&format!("new {n}\n"));
        }
        let c = crc(s.as_bytes());
        s.push_str(&format!("crc {c:08x}\n"));
        s.into_bytes()
    }

    fn decode(b: &[u8]) -> Option<Plan> {
        let s = std::str::from_utf8(b).ok()?;
        let body_end = s.rfind("crc ")?;
        let (body, c) = s.split_at(body_end);
        if c.trim() != format!("crc {:08x}", crc(body.as_bytes())) {
            return None;
        }
        let mut p = Plan {
            damaged: String::new(),
            old: Vec::new(),
            new: Vec::new(),
        };
        for line in body.lines() {
            let (k, v) = line.split_once(' ')?;
            if v.contains('/') || v.contains("..") {
                return None;
            }
            match k {
                "damaged" => p.damaged = v.to_string(),
                "old" => p.old.push(v.to_string()),
                "new" => p.new.push(v.to_string()),
                _ => return None,
            }
        }
        (!p.damaged.is_empty()).then_some(p)
    }
}

/// Finishes an interrupted salvage, if `salvage.pending` says there is one:
/// moves the old files aside (unless some new file was already renamed into
/// place, which happens only after every move), renames the new ones, and
/// removes the marker. A damaged marker means it was never durable: the old
/// files were never touched, and the unfinished outputs are discarded.
pub(crate) fn finish_pending(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    let marker = dir.join(PENDING_FILE);
    if !vfs.exists(&marker) {
        return Ok(());
    }
    let Some(plan) = read_small(vfs, &marker).and_then(|b| Plan::decode(&b)) else {
        for name in vfs.list(dir).map_err(io("list log directory", dir))? {
            if name.ends_with(NEW_SUFFIX) {
                let p = dir.join(&name);
                vfs.remove_file(&p)
                    .map_err(io("remove unfinished salvage output", &p))?;
            }
        }
        vfs.remove_file(&marker)
            .map_err(io("remove salvage marker", &marker))?;
        return vfs.sync_dir(dir).map_err(io("fsync log directory", dir));
    };
    // New segments take the old ones' names: the segment table that
    // describes the old ones goes first, or a reader could take it for
    // theirs (it would fail on the first read, never read wrong records).
    super::table::remove(vfs, dir).map_err(io("remove the segment table", dir))?;
    let new_path = |n: &str| dir.join(format!("{n}{NEW_SUFFIX}"));
    let damaged = dir.join(&plan.damaged);
    if plan.new.iter().all(|n| vfs.exists(&new_path(n))) {
        vfs.create_dir_all(&damaged)
            .map_err(io("create damaged-files directory", &damaged))?;
        for o in &plan.old {
            let from = dir.join(o);
            if vfs.exists(&from) {
                vfs.rename(&from, &damaged.join(o))
                    .map_err(io("move damaged log file", &from))?;
            }
        }
        vfs.sync_dir(&damaged)
            .map_err(io("fsync damaged-files directory", &damaged))?;
        vfs.sync_dir(dir).map_err(io("fsync log directory", dir))?;
    }
    for n in &plan.new {
        let from = new_path(n);
        if vfs.exists(&from) {
            vfs.rename(&from, &dir.join(n))
                .map_err(io("install salvaged segment", &from))?;
        }
    }
    vfs.sync_dir(dir).map_err(io("fsync log directory", dir))?;
    vfs.remove_file(&marker)
        .map_err(io("remove salvage marker", &marker))?;
    vfs.sync_dir(dir).map_err(io("fsync log directory", dir))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn plan_round_trip_and_damage() {
        let p = Plan {
            damaged: "damaged-1".into(),
            old: vec!["00000000000000000001.seg".into()],
            new: vec!["00000000000000000001.seg".into()],
        };
        let b = p.encode();
        assert_eq!(Plan::decode(&b), Some(p));
        assert_eq!(Plan::decode(&b[..b.len() - 3]), None);
        let mut bad = b.clone();
        bad[10] ^= 1;
        assert_eq!(Plan::decode(&bad), None);
    }
}
