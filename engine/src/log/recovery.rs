//! Opening a log: check sealed segments (header and footer only), recover
//! the tail segment (keep every intact record, truncate a torn tail, refuse
//! corruption followed by good records), and the `tail.state` file a clean
//! close leaves so the next open can skip scanning the tail.

use cairn_codec::bytes::{crc32_seeded as crc, u64_le as u64_at};
use std::path::Path;
use std::sync::Arc;

use cairn_codec::frame::{self, ChainForm, CRC_SEED};
use cairn_codec::segment::{SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{ChainHash, Lsn};

use super::scan::find_next_valid;
use super::segment::{self, check_header, corrupt, create_segment, open_sealed, Sealed};
use super::sparse_index::{read_entries, ReadAt, SliceAt, SparseIndex, ENTRY_LEN};
use super::view::{Tail, View};
use super::Head;
use crate::vfs::{OpenMode, Vfs, VfsFile};
use crate::{EngineError, Result};

/// The file a clean close writes in the log's folder (see [`TailState`]).
pub const TAIL_STATE_FILE: &str = "tail.state";
const TAIL_STATE_MAGIC: &[u8; 8] = b"CAIRNTST";
const TAIL_STATE_VERSION: u32 = 1;
const TAIL_STATE_FIXED: usize = 96;
/// The most index entries a tail state may claim (a segment is at most
/// 4 GiB with an entry every 64 KiB), bounding the allocation.
const TAIL_STATE_MAX_ENTRIES: u64 = 1 << 17;

/// The outcome of scanning the tail segment.
#[derive(Debug)]
pub(crate) struct TailScan {
    /// Bytes holding whole records and whole batches.
    pub valid_len: u64,
    /// The last whole record.
    pub head: Head,
    /// Sparse index of the valid records.
    pub index: SparseIndex,
}

/// Scans the frames of a tail segment (`buf` is the whole file). Stops at
/// the first frame that is not intact (bad CRC, wrong LSN or chain, cut
/// short) or at an incomplete batch at the end. If a valid frame with a
/// fitting LSN follows that point, this is corruption, not a torn write,
/// and an error names the file, offset and expected LSN.
pub(crate) fn scan_tail(path: &Path, buf: &[u8], header: &SegmentHeader) -> Result<TailScan> {
    let mut off = SEGMENT_HEADER_LEN;
    let mut expect = header.first_lsn;
    let mut chain = header.prev_chain;
    let mut index = SparseIndex::default();
    let mut good = (
        off,
        Head {
            last_lsn: Lsn(expect.0.saturating_sub(1)),
            chain,
        },
    );
    while off < buf.len() {
        let problem = match frame::decode(&buf[off..]) {
            Ok(f) if f.lsn == expect && f.chain_follows(chain, header.chain_form) => {
                index.note(f.lsn, off as u64);
                off += f.len();
                expect = expect.next();
                chain = f.chain;
                if !f.batch_continues() {
                    good = (
                        off,
                        Head {
                            last_lsn: f.lsn,
                            chain,
                        },
                    );
                }
                continue;
            }
            Ok(f) if f.lsn != expect => {
                format!("record has LSN {} where LSN {expect} was expected", f.lsn)
            }
            Ok(_) => "record's chain value does not follow from the previous record".to_string(),
            Err(e) => format!("record frame: {e}"),
        };
        if let Some(next) = find_next_valid(buf, off + 1, expect) {
            return Err(corrupt(
                path,
                off as u64,
                Some(expect),
                format!("{problem}; intact records follow at byte {next}, so this is damage, not a torn write (`cairn repair` keeps every intact record)"),
            ));
        }
        break;
    }
    index.truncate_to(good.0 as u64);
    Ok(TailScan {
        valid_len: good.0 as u64,
        head: good.1,
        index,
    })
}

/// What a clean close records about the tail segment (the file
/// [`TAIL_STATE_FILE`]): a reader that finds it describing the tail exactly
/// (length, last frame's LSN and chain; see `TailState::matches`) takes the
/// tail's end and sparse index from it instead of reading the tail whole.
/// Public so that another writer of the same facts (an archive's
/// replicator, which walks the tail anyway) encodes them in this one
/// format ([`TailState::encode`], [`TailState::decode`]); a state that does
/// not describe the tail is never trusted, whoever wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct TailState {
    /// The first LSN of the tail segment (its file's name and header).
    pub first_lsn: Lsn,
    /// Bytes of the segment up to the end of its last whole record (and
    /// batch): the length the file must have.
    pub valid_len: u64,
    /// The last record's LSN (the first LSN - 1 when there is none).
    pub last_lsn: Lsn,
    /// The offset of the last record's frame (0 when there is none).
    pub last_frame_off: u64,
    /// The chain value after the last record (the header's previous chain
    /// when there is none).
    pub chain: ChainHash,
    pub(crate) index: SparseIndex,
}

impl TailState {
    /// A state of these facts, its sparse index `entries`: (LSN, offset of
    /// the record's frame) pairs, ascending in both, each a frame of the
    /// segment before `valid_len`. They may be further apart than
    /// [`super::SPARSE_INDEX_INTERVAL_BYTES`] (a reader then scans further
    /// from one), never wrong: a frame read at an entry's offset that does
    /// not carry its LSN is an error naming the segment, not a record.
    pub fn new(
        first_lsn: Lsn,
        valid_len: u64,
        last: Option<(Lsn, u64)>,
        chain: ChainHash,
        entries: Vec<(Lsn, u64)>,
    ) -> TailState {
        let (last_lsn, last_frame_off) = last.unwrap_or((Lsn(first_lsn.0.saturating_sub(1)), 0));
        TailState {
            first_lsn,
            valid_len,
            last_lsn,
            last_frame_off,
            chain,
            index: SparseIndex::from_entries(entries),
        }
    }

    /// The sparse index entries: (LSN, frame offset), ascending.
    pub fn index_entries(&self) -> &[(Lsn, u64)] {
        self.index.entries()
    }

    /// Replaces the sparse index with `entries` (as [`TailState::new`]
    /// takes them).
    pub fn set_index_entries(&mut self, entries: Vec<(Lsn, u64)>) {
        self.index = SparseIndex::from_entries(entries);
    }

    /// The most bytes an encoded state can take ([`TailState::decode`]
    /// refuses a longer claim before allocating).
    pub const MAX_ENCODED_BYTES: usize =
        TAIL_STATE_FIXED + ENTRY_LEN * TAIL_STATE_MAX_ENTRIES as usize + 4;

    /// The bytes of the `tail.state` file (docs/FORMAT.md):
    ///
    /// ```text
    ///  0  8 magic "CAIRNTST"   8 4 version   12 4 reserved
    /// 16  8 first LSN of the tail segment     24 8 valid length
    /// 32  8 last LSN     40 8 offset of the last frame (0 if none)
    /// 48 32 chain after the last record        80 8 entries n   88 8 reserved
    /// 96 16n index entries (LSN, offset)       then CRC32 (seeded) of all before
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(TAIL_STATE_FIXED + 16 * self.index.entries().len() + 4);
        b.extend_from_slice(TAIL_STATE_MAGIC);
        b.extend_from_slice(&TAIL_STATE_VERSION.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        for x in [
            self.first_lsn.0,
            self.valid_len,
            self.last_lsn.0,
            self.last_frame_off,
        ] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(&self.chain.0);
        b.extend_from_slice(&(self.index.entries().len() as u64).to_le_bytes());
        b.extend_from_slice(&[0; 8]);
        for &(l, o) in self.index.entries() {
            b.extend_from_slice(&l.0.to_le_bytes());
            b.extend_from_slice(&o.to_le_bytes());
        }
        let c = crc(&b);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }

    /// The state recorded at the start of `bytes`, if they start with an
    /// intact one. Bytes after it are ignored: the file is rewritten in
    /// place (see `Log::close`), so a shorter state leaves the end of a
    /// longer, older one behind it. A state written whole (the file exactly
    /// one record long, as before in-place rewrites) reads the same way.
    /// `None` for bytes that are not an intact state (magic, version,
    /// entry count, checksum).
    pub fn decode(bytes: &[u8]) -> Option<TailState> {
        TailState::read(&mut SliceAt(bytes), bytes.len() as u64)
    }

    /// The state recorded at the start of a file of `len` bytes read
    /// through `src`, if it starts with an intact one (bytes after it are
    /// ignored, as by `decode`): the fixed part first, then the index
    /// entries in pieces straight into the index (see `read_entries`),
    /// never a copy of the whole file.
    pub(crate) fn read(src: &mut dyn ReadAt, len: u64) -> Option<TailState> {
        if len < (TAIL_STATE_FIXED + 4) as u64 {
            return None;
        }
        let mut b = [0u8; TAIL_STATE_FIXED];
        src.read_exact_at(&mut b, 0)?;
        if &b[0..8] != TAIL_STATE_MAGIC {
            return None;
        }
        let n = u64_at(&b, 80);
        if n > TAIL_STATE_MAX_ENTRIES {
            return None;
        }
        let body = (TAIL_STATE_FIXED + ENTRY_LEN * n as usize) as u64;
        if len < body + 4 {
            return None;
        }
        let mut crc = crc32fast::Hasher::new_with_initial(CRC_SEED);
        crc.update(&b);
        let entries = read_entries(src, TAIL_STATE_FIXED as u64, n as usize, &mut crc)?;
        let mut stored = [0u8; 4];
        src.read_exact_at(&mut stored, body)?;
        if crc.finalize().to_le_bytes() != stored {
            return None;
        }
        if u32::from_le_bytes([b[8], b[9], b[10], b[11]]) != TAIL_STATE_VERSION {
            return None;
        }
        let mut chain = [0u8; 32];
        chain.copy_from_slice(&b[48..80]);
        let index = SparseIndex::from_entries(entries);
        Some(TailState {
            first_lsn: Lsn(u64_at(&b, 16)),
            valid_len: u64_at(&b, 24),
            last_lsn: Lsn(u64_at(&b, 32)),
            last_frame_off: u64_at(&b, 40),
            chain: ChainHash(chain),
            index,
        })
    }

    /// True if this state describes `file` (whose header is `header`) exactly:
    /// same segment, same length, and the last frame is where it says, with
    /// the LSN and chain it says, ending the file and not inside a batch.
    pub(crate) fn matches(&self, file: &dyn VfsFile, header: &SegmentHeader, len: u64) -> bool {
        if self.first_lsn != header.first_lsn || self.valid_len != len {
            return false;
        }
        if self.last_lsn.0 + 1 == header.first_lsn.0 {
            return len == SEGMENT_HEADER_LEN as u64 && self.chain == header.prev_chain;
        }
        if self.last_frame_off < SEGMENT_HEADER_LEN as u64 || self.last_frame_off >= len {
            return false;
        }
        let mut b = vec![0u8; (len - self.last_frame_off) as usize];
        if file.read_exact_at(&mut b, self.last_frame_off).is_err() {
            return false;
        }
        matches!(frame::decode(&b), Ok(f) if f.len() == b.len()
            && f.lsn == self.last_lsn && f.chain == self.chain && !f.batch_continues())
    }
}

impl TailState {
    /// Reads the `tail.state` of the log in `dir`, if there is an intact one.
    pub(crate) fn load(vfs: &dyn Vfs, dir: &Path) -> Option<TailState> {
        let f = vfs.open(&dir.join(TAIL_STATE_FILE), OpenMode::Read).ok()?;
        let len = f.len().ok()?;
        TailState::read(&mut &*f, len)
    }

    /// If this state describes the tail segment that starts at `first` and
    /// its intact records now end before the last one the clean close
    /// certified (`head`, at byte `valid_len`), the records in between were
    /// durable and acknowledged, so their loss is damage (a flipped bit, a
    /// cut file), not a torn write: a description of it. A state left by an
    /// earlier close of an older segment says nothing about this one; one
    /// of this segment left before later appends certifies a prefix of it,
    /// which a crash never takes.
    pub(crate) fn unmet(&self, first: Lsn, head: Head, valid_len: u64) -> Option<String> {
        if self.first_lsn != first || head.last_lsn >= self.last_lsn {
            return None;
        }
        let lost = if head.last_lsn.next() == self.last_lsn {
            format!("LSN {} is", self.last_lsn)
        } else {
            format!("LSN {} to {} are", head.last_lsn.next(), self.last_lsn)
        };
        Some(format!(
            "the log was closed cleanly with LSN {} as its last record ({} bytes in this \
             segment), but its intact records end at LSN {} (byte {valid_len}): {lost} damaged \
             or cut off, which a crash cannot do (`cairn repair` keeps every intact record)",
            self.last_lsn, self.valid_len, head.last_lsn,
        ))
    }
}

/// How far the log's own durable files say it once reached: the furthest
/// LSN that a clean close's `tail.state` certified, or that the persisted
/// sparse index of a sealed segment (`<first LSN>.idx`) says its segment
/// held, for a segment that is no longer there. Only facts written after
/// the records they name were durable count, so a torn tail after a crash
/// (never acknowledged) never falls short of them; a log whose intact
/// records end before this has lost acknowledged records (a deleted or
/// replaced segment, a cut file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reached {
    /// The furthest LSN recorded.
    pub lsn: Lsn,
    /// The file that records it.
    pub file: std::path::PathBuf,
    /// What that file is, in words.
    pub what: &'static str,
}

impl Reached {
    /// If the log's records end at `head` before this, the loss in words
    /// (naming the LSN range and how to go on); `None` if nothing is lost.
    pub(crate) fn unmet_by(&self, head: Lsn) -> Option<String> {
        if head >= self.lsn {
            return None;
        }
        let lost = if head.next() == self.lsn {
            format!("LSN {} is", self.lsn)
        } else {
            format!(
                "LSN {} to {} ({} records) are",
                head.next(),
                self.lsn,
                self.lsn.0 - head.0
            )
        };
        Some(format!(
            "the log's records end at LSN {head}, but its `{}` ({}) records that it reached LSN {}: \
             {lost} lost (a segment file was deleted, cut or replaced; a crash cannot do this). \
             Writing is refused so that these LSNs are never given to other events: \
             `cairn repair` records the lost LSNs as placeholder records, then the store is writable again",
            self.file
                .file_name()
                .map_or_else(|| self.file.display().to_string(), |n| n.to_string_lossy().into_owned()),
            self.what,
            self.lsn,
        ))
    }
}

/// Reads what the log directory's side files record about how far the log
/// reached (see [`Reached`]), given its segments as listed now. `None` when
/// nothing is recorded.
pub(crate) fn recorded_reach(
    vfs: &dyn Vfs,
    dir: &Path,
    segs: &[(Lsn, std::path::PathBuf)],
) -> Result<Option<Reached>> {
    let names = vfs
        .list(dir)
        .map_err(|e| EngineError::io("list log directory", dir, e))?;
    let closed = TailState::load(vfs, dir).map(|st| st.last_lsn);
    Ok(recorded_reach_in(vfs, dir, &names, segs, closed))
}

/// [`recorded_reach`] from the log directory's file `names` as listed and
/// the last LSN of its `tail.state` (`closed`), both read by the caller:
/// a reader has read them at open and reads neither again.
pub(crate) fn recorded_reach_in(
    vfs: &dyn Vfs,
    dir: &Path,
    names: &[String],
    segs: &[(Lsn, std::path::PathBuf)],
    closed: Option<Lsn>,
) -> Option<Reached> {
    let mut best: Option<Reached> = None;
    let mut note = |r: Reached| {
        if best.as_ref().is_none_or(|b| r.lsn > b.lsn) {
            best = Some(r);
        }
    };
    if let Some(lsn) = closed {
        note(Reached {
            lsn,
            file: dir.join(TAIL_STATE_FILE),
            what: "written by the log's last clean close",
        });
    }
    for name in names {
        let Some(stem) = name.strip_suffix(segment::INDEX_EXT) else {
            continue;
        };
        let Some(first) = segment::parse_segment_name(&format!("{stem}{}", segment::SEGMENT_EXT))
        else {
            continue;
        };
        if segs.iter().any(|(l, _)| *l == first) {
            continue;
        }
        // The index of a segment that is gone: it was written after its
        // segment was sealed (every record in it durable). Its header's
        // last LSN, when it reads back whole; else the name alone says the
        // log reached the LSN before the segment's first.
        let path = dir.join(name);
        let last = read_small(vfs, &path)
            .and_then(|b| super::sparse_index::recorded_last_lsn(&b))
            .filter(|l| *l >= first)
            .unwrap_or(Lsn(first.0.saturating_sub(1)));
        note(Reached {
            lsn: last,
            file: path,
            what: "the sparse index of a sealed segment whose file is gone",
        });
    }
    best
}

/// The writer's view of the tail after recovery.
pub(crate) struct OpenTail {
    pub path: std::path::PathBuf,
    pub file: Arc<dyn VfsFile>,
    pub header: SegmentHeader,
    pub len: u64,
    pub head: Head,
    pub index: SparseIndex,
    /// Offset of the last record's frame (for the next tail state).
    pub last_frame_off: u64,
}

/// Opens the log in `dir` for writing: checks the sealed segments, recovers
/// the tail (truncating a torn tail and fsyncing), creating the first
/// segment of an empty log or a fresh tail after a sealed last segment.
pub(crate) fn open_for_write(vfs: &dyn Vfs, dir: &Path) -> Result<(Vec<Arc<Sealed>>, OpenTail)> {
    if !vfs.exists(dir) {
        create_log_dir(vfs, dir)?;
    }
    super::salvage::finish_pending(vfs, dir)?;
    let segs = segment::list_segments(vfs, dir)?;
    let mut sealed: Vec<Arc<Sealed>> = Vec::new();
    let mut expect = Lsn::FIRST;
    let mut prev = ChainHash::ZERO;
    let n = segs.len();
    let state = TailState::load(vfs, dir);
    let reach = recorded_reach(vfs, dir, &segs)?;
    for (i, (name_lsn, path)) in segs.into_iter().enumerate() {
        if name_lsn != expect {
            return Err(corrupt(
                &path,
                0,
                Some(expect),
                segment::sequence_gap(name_lsn, expect),
            ));
        }
        if i + 1 < n || looks_sealed(vfs, &path)? {
            let s = open_sealed(vfs, &path, expect, prev)?;
            expect = s.footer.last_lsn.next();
            prev = s.footer.last_chain;
            sealed.push(Arc::new(s));
            continue;
        }
        // The state is left in place: it is trusted only when the file's
        // length, last frame, LSN and chain all match it, which after any
        // later append (or a truncation to a different length) they do not;
        // and if they match, the content up to that length is unchanged
        // (the chain value covers all of it).
        let tail = recover_tail(vfs, &path, expect, prev, state.as_ref())?;
        if let Some(d) = reach.as_ref().and_then(|r| r.unmet_by(tail.head.last_lsn)) {
            return Err(corrupt(&path, tail.len, Some(tail.head.last_lsn.next()), d));
        }
        return Ok((sealed, tail));
    }
    // No tail: an empty log, or the last segment is sealed. A log that the
    // store recorded going further lost its newer segments: refused before
    // a new tail would hand their LSNs out again.
    if let Some(r) = &reach {
        if let Some(d) = r.unmet_by(Lsn(expect.0 - 1)) {
            return Err(corrupt(&r.file, 0, Some(expect), d));
        }
    }
    Ok((sealed, new_tail(vfs, dir, expect, prev)?))
}

/// Creates the log directory, durably: the new directory's own entry is
/// fsynced, or the first segment could be lost with it in a crash.
fn create_log_dir(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    vfs.create_dir_all(dir)
        .map_err(|e| EngineError::io("create log directory", dir, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        vfs.sync_dir(parent)
            .map_err(|e| EngineError::io("fsync directory", parent, e))?;
    }
    Ok(())
}

/// Creates an empty tail segment whose first record will be `first`,
/// chained from `prev`.
fn new_tail(vfs: &dyn Vfs, dir: &Path, first: Lsn, prev: ChainHash) -> Result<OpenTail> {
    let (path, file) = create_segment(vfs, dir, first, prev)?;
    Ok(OpenTail {
        path,
        file,
        header: SegmentHeader {
            first_lsn: first,
            prev_chain: prev,
            chain_form: ChainForm::CURRENT,
        },
        len: SEGMENT_HEADER_LEN as u64,
        head: Head {
            last_lsn: Lsn(first.0.saturating_sub(1)),
            chain: prev,
        },
        index: SparseIndex::default(),
        last_frame_off: 0,
    })
}

/// Reads a small file whole, if it exists and can be read.
pub(crate) fn read_small(vfs: &dyn Vfs, path: &Path) -> Option<Vec<u8>> {
    let f = vfs.open(path, OpenMode::Read).ok()?;
    let len = f.len().ok()?;
    let mut b = vec![0u8; usize::try_from(len).ok()?];
    f.read_exact_at(&mut b, 0).ok()?;
    Some(b)
}

/// True if the segment's last 64 bytes start with the footer magic (a
/// sealed segment; the footer itself is checked when it is opened).
pub(crate) fn looks_sealed(vfs: &dyn Vfs, path: &Path) -> Result<bool> {
    let f = vfs
        .open(path, OpenMode::Read)
        .map_err(|e| EngineError::io("open log segment", path, e))?;
    let len = f
        .len()
        .map_err(|e| EngineError::io("stat log segment", path, e))?;
    if len < (SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN) as u64 {
        return Ok(false);
    }
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, len - SEGMENT_FOOTER_LEN as u64)
        .map_err(|e| EngineError::io("read log segment", path, e))?;
    Ok(&b == b"CAIRNEND")
}

fn recover_tail(
    vfs: &dyn Vfs,
    path: &Path,
    first: Lsn,
    prev: ChainHash,
    state: Option<&TailState>,
) -> Result<OpenTail> {
    let file = vfs
        .open(path, OpenMode::ReadWrite)
        .map_err(|e| EngineError::io("open log segment", path, e))?;
    let len = file
        .len()
        .map_err(|e| EngineError::io("stat log segment", path, e))?;
    let header = tail_header(&*file, path, len, first, prev)?;
    let len = file
        .len()
        .map_err(|e| EngineError::io("stat log segment", path, e))?;
    if let Some(st) = state {
        if st.matches(&*file, &header, len) {
            return Ok(OpenTail {
                path: path.to_path_buf(),
                file,
                header,
                len,
                head: Head {
                    last_lsn: st.last_lsn,
                    chain: st.chain,
                },
                index: st.index.clone(),
                last_frame_off: st.last_frame_off,
            });
        }
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| EngineError::io("read log segment", path, e))?;
    let scan = scan_tail(path, &buf, &header)?;
    if let Some(detail) = state.and_then(|st| st.unmet(header.first_lsn, scan.head, scan.valid_len))
    {
        return Err(corrupt(
            path,
            scan.valid_len,
            Some(scan.head.last_lsn.next()),
            detail,
        ));
    }
    if scan.valid_len < len {
        file.set_len(scan.valid_len)
            .map_err(|e| EngineError::io("truncate torn log tail", path, e))?;
        file.sync_data()
            .map_err(|e| EngineError::io("fsync log segment", path, e))?;
    }
    let last_frame_off = last_frame_offset(&buf[..scan.valid_len as usize], &scan);
    Ok(OpenTail {
        path: path.to_path_buf(),
        file,
        header,
        len: scan.valid_len,
        head: scan.head,
        index: scan.index,
        last_frame_off,
    })
}

/// The tail segment's header, checked against `first` and `prev`; written
/// again if the crash came while the segment was being created, before
/// its header was durable (nothing was ever appended then).
fn tail_header(
    file: &dyn VfsFile,
    path: &Path,
    len: u64,
    first: Lsn,
    prev: ChainHash,
) -> Result<SegmentHeader> {
    let mut hb = vec![0u8; len.min(SEGMENT_HEADER_LEN as u64) as usize];
    file.read_exact_at(&mut hb, 0)
        .map_err(|e| EngineError::io("read log segment", path, e))?;
    match SegmentHeader::decode(&hb) {
        Err(_) if len <= SEGMENT_HEADER_LEN as u64 => {
            file.set_len(0)
                .map_err(|e| EngineError::io("truncate log segment", path, e))?;
            segment::write_header(file, path, first, prev)?;
            Ok(SegmentHeader {
                first_lsn: first,
                prev_chain: prev,
                chain_form: ChainForm::CURRENT,
            })
        }
        _ => check_header(path, &hb, first, prev),
    }
}

/// Offset of the last frame in `buf` (0 if none), walking from the last index entry.
fn last_frame_offset(buf: &[u8], scan: &TailScan) -> u64 {
    let Some((_, mut off)) = scan.index.seek(scan.head.last_lsn) else {
        return 0;
    };
    let mut last = 0;
    while (off as usize) < buf.len() {
        match frame::decode(&buf[off as usize..]) {
            Ok(f) => {
                last = off;
                off += f.len() as u64;
            }
            Err(_) => break,
        }
    }
    last
}

/// Builds the reader-visible tail from an [`OpenTail`].
pub(crate) fn tail_view(t: &OpenTail) -> Tail {
    Tail {
        path: t.path.clone(),
        file: t.file.clone(),
        header: t.header,
        committed_len: t.len,
        head: t.head,
        index: t.index.clone(),
        damage: None,
    }
}

/// The view a writer starts from.
pub(crate) fn initial_view(
    sealed: Vec<Arc<Sealed>>,
    t: &OpenTail,
    dicts: Arc<super::dict::LogDicts>,
) -> View {
    View {
        sealed,
        tail: Some(tail_view(t)),
        dicts,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use cairn_codec::frame::{RecordKind, FLAG_BATCH_CONT};

    /// Regression (each open of a reader read `tail.state` whole into one
    /// buffer and decoded it into a second, growing copy: ~175 KiB read,
    /// ~260 KiB allocated for a 45 MB tail): the state is read in pieces
    /// of `READ_CHUNK_BYTES` (the fixed part, each piece, the CRC), reads
    /// back equal, bytes after it are still ignored, and a flipped byte in
    /// its last piece still makes it absent.
    #[test]
    fn tail_state_is_read_in_pieces() {
        use super::super::sparse_index::{reads_during, ENTRY_LEN, READ_CHUNK_BYTES};
        let sim = Arc::new(crate::vfs::SimVfs::new());
        let vfs: Arc<dyn Vfs> = sim.clone();
        let dir = Path::new("/log");
        vfs.create_dir_all(dir).unwrap();
        let n = 2500u64;
        let mut index = SparseIndex::default();
        for i in 0..n {
            assert!(index.note(Lsn(i + 1), 64 + i * 4096));
        }
        let st = TailState {
            first_lsn: Lsn(1),
            valid_len: 64 + n * 4096,
            last_lsn: Lsn(n),
            last_frame_off: 64 + (n - 1) * 4096,
            chain: ChainHash([5; 32]),
            index,
        };
        let mut bytes = st.encode();
        let end = bytes.len() as u64;
        bytes.extend_from_slice(b"the end of an older, longer state");
        let path = dir.join(TAIL_STATE_FILE);
        let f = vfs.open(&path, OpenMode::CreateTruncate).unwrap();
        f.write_all_at(&bytes, 0).unwrap();
        let mut got = None;
        let reads = reads_during(&sim, &path, || got = TailState::load(&*vfs, dir));
        assert_eq!(got.as_ref(), Some(&st));
        let pieces = (n as usize * ENTRY_LEN).div_ceil(READ_CHUNK_BYTES);
        assert_eq!(pieces, 3);
        assert_eq!(reads, 1 + pieces + 1, "fixed part, {pieces} pieces, CRC");
        sim.corrupt(&path, end - 10, b"#").unwrap();
        assert_eq!(TailState::load(&*vfs, dir), None);
    }

    fn segment(n: u64, batch_from: Option<u64>) -> (Vec<u8>, Vec<usize>, SegmentHeader) {
        let header = SegmentHeader {
            first_lsn: Lsn(1),
            prev_chain: ChainHash::ZERO,
            chain_form: ChainForm::CURRENT,
        };
        let mut buf = header.encode().to_vec();
        let mut chain = ChainHash::ZERO;
        let mut ends = Vec::new();
        for i in 1..=n {
            let flags = match batch_from {
                Some(b) if i >= b && i < n => FLAG_BATCH_CONT,
                _ => 0,
            };
            chain = frame::encode(
                &mut buf,
                Lsn(i),
                RecordKind::Event,
                flags,
                b"body bytes",
                chain,
            )
            .unwrap();
            ends.push(buf.len());
        }
        (buf, ends, header)
    }

    #[test]
    fn torn_tail_keeps_whole_records_and_batches() {
        let (buf, ends, header) = segment(4, None);
        let p = Path::new("t.seg");
        for cut in ends[1]..=buf.len() {
            let s = scan_tail(p, &buf[..cut], &header).unwrap();
            let whole = ends.iter().filter(|&&e| e <= cut).count() as u64;
            assert_eq!(s.head.last_lsn, Lsn(whole), "cut {cut}");
            assert_eq!(s.valid_len as usize, ends[whole as usize - 1]);
        }
        let (buf, ends, header) = segment(4, Some(3));
        let s = scan_tail(p, &buf[..ends[3] - 1], &header).unwrap();
        assert_eq!(s.head.last_lsn, Lsn(2), "incomplete batch dropped whole");
        assert_eq!(s.valid_len as usize, ends[1]);
    }

    #[test]
    fn damage_followed_by_good_records_is_corruption() {
        let (mut buf, ends, header) = segment(4, None);
        buf[ends[0] + 60] ^= 0x40;
        let err = scan_tail(Path::new("t.seg"), &buf, &header).unwrap_err();
        match err {
            EngineError::Corrupt { offset, lsn, .. } => {
                assert_eq!(offset, ends[0] as u64);
                assert_eq!(lsn, Some(Lsn(2)));
            }
            e => panic!("{e}"),
        }
        // Garbage at the end with nothing valid after it is a torn tail.
        let (mut buf, ends, header) = segment(4, None);
        buf.extend_from_slice(&[0xAB; 100]);
        let s = scan_tail(Path::new("t.seg"), &buf, &header).unwrap();
        assert_eq!(s.valid_len as usize, ends[3]);
    }

    #[test]
    fn tail_state_round_trip_and_damage() {
        let mut index = SparseIndex::default();
        index.note(Lsn(1), 64);
        let st = TailState {
            first_lsn: Lsn(1),
            valid_len: 500,
            last_lsn: Lsn(7),
            last_frame_off: 400,
            chain: ChainHash([5; 32]),
            index,
        };
        let b = st.encode();
        assert_eq!(TailState::decode(&b), Some(st));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert_eq!(TailState::decode(&bad), None, "flip at {i}");
        }
    }

    /// `tail.state` is rewritten in place: a shorter state over a longer
    /// one reads back as itself (the old one's end ignored), and a write
    /// torn part way (the new state's start over the old one) reads as
    /// absent, never as either state or a mix.
    #[test]
    fn tail_state_rewritten_in_place_reads_back_and_torn_reads_as_absent() {
        let state = |entries: u64, last: u64| {
            let mut index = SparseIndex::default();
            for i in 0..entries {
                index.note(Lsn(1 + i * 10), 64 + i * 5000);
            }
            TailState {
                first_lsn: Lsn(1),
                valid_len: 64 + entries * 5000,
                last_lsn: Lsn(last),
                last_frame_off: 60 + entries * 5000,
                chain: ChainHash([last as u8; 32]),
                index,
            }
        };
        let old = state(4, 40).encode();
        let new = state(1, 9).encode();
        assert!(new.len() < old.len());
        let mut file = old.clone();
        file[..new.len()].copy_from_slice(&new);
        assert_eq!(TailState::decode(&file), Some(state(1, 9)));
        for at in 1..new.len() {
            let mut torn = old.clone();
            torn[..at].copy_from_slice(&new[..at]);
            let unchanged = torn == old;
            let got = TailState::decode(&torn);
            assert!(got.is_none() || unchanged, "torn at {at}: {got:?}");
        }
        // A record cut short, even with bytes of an older one after it.
        assert_eq!(TailState::decode(&new[..new.len() - 1]), None);
    }
}
