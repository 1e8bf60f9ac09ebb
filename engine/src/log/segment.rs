//! Segment files: names, creation, and opening sealed segments (header and
//! footer checks only, never a rescan of the frames).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::frame::{self, ChainForm};
use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{ChainHash, Lsn};

use super::sparse_index::{MappedIndex, SealedEntries, SparseIndex};
use crate::vfs::{Mapped, OpenMode, Vfs, VfsFile};
use crate::{EngineError, Result};

/// File extension of segment files.
pub(crate) const SEGMENT_EXT: &str = ".seg";
/// File extension of persisted sparse indexes.
pub(crate) const INDEX_EXT: &str = ".idx";
/// Digits in a segment name: every u64 LSN fits, and names sort as numbers.
const NAME_DIGITS: usize = 20;

/// The file name of the segment whose first record is `first`.
pub(crate) fn segment_name(first: Lsn) -> String {
    format!("{:020}{SEGMENT_EXT}", first.0)
}

/// The first LSN encoded in a segment file name (`<20 digits>.seg`), if
/// `name` is one.
pub fn parse_segment_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_suffix(SEGMENT_EXT)?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Lsn)
}

/// The segments in `dir`, sorted by first LSN.
pub(crate) fn list_segments(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<(Lsn, PathBuf)>> {
    let names = vfs
        .list(dir)
        .map_err(|e| EngineError::io("list log directory", dir, e))?;
    Ok(segments_in(dir, &names))
}

/// The segments among the file `names` of `dir`, sorted by first LSN.
pub(crate) fn segments_in(dir: &Path, names: &[String]) -> Vec<(Lsn, PathBuf)> {
    let mut segs: Vec<(Lsn, PathBuf)> = names
        .iter()
        .filter_map(|n| parse_segment_name(n).map(|l| (l, dir.join(n))))
        .collect();
    segs.sort();
    segs
}

/// The path of the sparse index persisted next to segment `seg`.
pub(crate) fn index_path(seg: &Path) -> PathBuf {
    seg.with_extension(&INDEX_EXT[1..])
}

/// A corruption error naming the file, offset and LSN.
pub(crate) fn corrupt(
    path: &Path,
    offset: u64,
    lsn: Option<Lsn>,
    detail: impl Into<String>,
) -> EngineError {
    EngineError::Corrupt {
        path: path.to_path_buf(),
        offset,
        lsn,
        detail: detail.into(),
    }
}

/// Creates a new segment: create, write the header, fsync the file, fsync
/// the directory. Only then may records be appended to it.
pub(crate) fn create_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    first: Lsn,
    prev_chain: ChainHash,
) -> Result<(PathBuf, Arc<dyn VfsFile>)> {
    let path = dir.join(segment_name(first));
    let file = vfs
        .open(&path, OpenMode::CreateNew)
        .map_err(|e| EngineError::io("create log segment", &path, e))?;
    write_header(&*file, &path, first, prev_chain)?;
    vfs.sync_dir(dir)
        .map_err(|e| EngineError::io("fsync log directory", dir, e))?;
    Ok((path, file))
}

/// Writes and fsyncs a segment header at offset 0.
pub(crate) fn write_header(
    file: &dyn VfsFile,
    path: &Path,
    first: Lsn,
    prev_chain: ChainHash,
) -> Result<()> {
    let header = SegmentHeader {
        first_lsn: first,
        prev_chain,
        chain_form: ChainForm::CURRENT,
    };
    file.write_all_at(&header.encode(), 0)
        .map_err(|e| EngineError::io("write segment header", path, e))?;
    file.sync_data()
        .map_err(|e| EngineError::io("fsync log segment", path, e))
}

/// A sealed segment's sparse index: in memory already (the writer's, or
/// loaded at a writable open), or its `.idx` file mapped and checked the
/// first time a read seeks into the segment (see [`MappedIndex`]). A
/// reader's open then costs the same however many sealed segments there
/// are: a query reads the index files of the segments it reads, not all
/// of them, and searches them where they lie.
pub(crate) struct SealedIndex {
    cell: std::sync::OnceLock<SealedEntries>,
    /// Where to load it from, when not loaded at open.
    vfs: Option<Arc<dyn Vfs>>,
}

impl std::fmt::Debug for SealedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedIndex")
            .field("loaded", &self.cell.get().is_some())
            .finish()
    }
}

impl SealedIndex {
    /// An index already in memory.
    pub(crate) fn loaded(idx: SparseIndex) -> SealedIndex {
        SealedIndex {
            cell: std::sync::OnceLock::from(SealedEntries::Loaded(idx)),
            vfs: None,
        }
    }

    /// An index read from `vfs` on first use.
    fn lazy(vfs: Arc<dyn Vfs>) -> SealedIndex {
        SealedIndex {
            cell: std::sync::OnceLock::new(),
            vfs: Some(vfs),
        }
    }
}

/// A sealed segment's bytes: mapped already (the writer's, or a writable
/// open's), or mapped the first time a read needs them (a reader's open,
/// which checks the header and footer by reading those alone). Mapping
/// every sealed segment at a reader's open cost each query from a new
/// process a map, two page faults and an unmap per segment, whether the
/// query read it or not: at 10,000,000 events (30 segments) a quarter of
/// a five-record query's time.
pub(crate) struct SegmentData {
    /// The file's size when it was opened.
    len: u64,
    cell: std::sync::OnceLock<Mapped>,
    /// Where to map it from, when not mapped at open.
    vfs: Option<Arc<dyn Vfs>>,
    /// The open file (of a segment opened unmapped): reads of frames go
    /// to it by range instead of through a map of the whole file when the
    /// file system cannot map cheaply (see [`Vfs::maps_cheaply`]), and
    /// sparse reads of sorted LSNs go to it always (see
    /// [`Sealed::sparse_file`]). Set at open, or (a segment taken from the
    /// segment table) by the first read, once its header and footer have
    /// been checked against the table's.
    file: std::sync::OnceLock<Arc<dyn VfsFile>>,
    /// Whether the segment was taken from the log's segment table (see
    /// [`super::table`]) without its file being opened: its header and
    /// footer are then read and checked against the table's when it is
    /// first read (see [`Sealed::checked_file`]).
    from_table: bool,
    /// Whether every read goes to `file` (the file system cannot map
    /// cheaply).
    by_range: bool,
}

impl std::fmt::Debug for SegmentData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentData")
            .field("len", &self.len)
            .field("mapped", &self.cell.get().is_some())
            .field("by_range", &self.by_range)
            .finish()
    }
}

impl SegmentData {
    /// Bytes mapped already.
    pub(crate) fn mapped(m: Mapped) -> SegmentData {
        SegmentData {
            len: m.len() as u64,
            cell: std::sync::OnceLock::from(m),
            vfs: None,
            file: std::sync::OnceLock::new(),
            from_table: false,
            by_range: false,
        }
    }

    /// Whether the file is mapped (at open, or by a read since).
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        self.cell.get().is_some()
    }

    /// Whether the segment was taken from the segment table.
    #[cfg(test)]
    pub(crate) fn is_from_table(&self) -> bool {
        self.from_table
    }

    /// Whether its file is open (at open, or by a read since).
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.file.get().is_some()
    }

    /// A file of `len` bytes, mapped from `vfs` on first use; read by
    /// range through `file` instead when `vfs` cannot map cheaply.
    fn lazy(vfs: Arc<dyn Vfs>, len: u64, file: Arc<dyn VfsFile>) -> SegmentData {
        let by_range = !vfs.maps_cheaply();
        SegmentData {
            len,
            cell: std::sync::OnceLock::new(),
            vfs: Some(vfs),
            file: std::sync::OnceLock::from(file),
            from_table: false,
            by_range,
        }
    }

    /// A file of `len` bytes known from the segment table, not opened
    /// yet: opened and checked by its first read (see
    /// [`Sealed::checked_file`]), then as [`SegmentData::lazy`].
    fn deferred(vfs: Arc<dyn Vfs>, len: u64) -> SegmentData {
        let by_range = !vfs.maps_cheaply();
        SegmentData {
            len,
            cell: std::sync::OnceLock::new(),
            vfs: Some(vfs),
            file: std::sync::OnceLock::new(),
            from_table: true,
            by_range,
        }
    }
}

/// A sealed, immutable segment, mapped into memory when first read.
#[derive(Debug)]
pub(crate) struct Sealed {
    /// The segment file.
    pub path: PathBuf,
    /// Its header.
    pub header: SegmentHeader,
    /// Its footer.
    pub footer: SegmentFooter,
    /// The whole file (see [`Sealed::data`]).
    pub data: SegmentData,
    /// Its sparse index (see [`Sealed::index`]).
    pub index: SealedIndex,
}

impl Sealed {
    /// Its sparse index, its `.idx` file mapped and checked on first use
    /// if it was not loaded at open (see [`MappedIndex`]). A file that is
    /// missing, damaged or stale is never trusted: the index is rebuilt
    /// from the mapped frames (not written back: a reader writes nothing).
    /// If the frames themselves are damaged, the index is empty and reads
    /// scan from the segment's first frame, which names the damage when
    /// they reach it.
    pub fn index(&self) -> &SealedEntries {
        self.index.cell.get_or_init(|| {
            let first = self.header.first_lsn;
            self.index
                .vfs
                .as_ref()
                .and_then(|vfs| map_index(&**vfs, &self.path, first, &self.footer))
                .map(SealedEntries::Mapped)
                .or_else(|| {
                    let data = self.data().ok()?;
                    build_index(&self.path, data, first, self.frames_end())
                        .ok()
                        .map(SealedEntries::Loaded)
                })
                .unwrap_or_default()
        })
    }

    /// The whole file, mapped on first use if it was not at open. A file
    /// whose size changed since it was opened (sealed segments never
    /// change) is reported as damaged rather than read.
    pub fn data(&self) -> Result<&[u8]> {
        if let Some(m) = self.data.cell.get() {
            return Ok(m);
        }
        if self.data.from_table {
            // The table's word is checked before any byte is read.
            self.checked_file()?;
        }
        let Some(vfs) = &self.data.vfs else {
            // Mapped at open: the cell is set. Unreachable, but an error
            // names the file rather than a panic.
            return Err(EngineError::io(
                "map log segment",
                &self.path,
                std::io::Error::other("the segment has no mapping"),
            ));
        };
        let m = vfs
            .map(&self.path)
            .map_err(|e| EngineError::io("map log segment", &self.path, e))?;
        if m.len() as u64 != self.data.len {
            return Err(corrupt(
                &self.path,
                0,
                Some(self.header.first_lsn),
                format!(
                    "sealed segment changed while the log was open: it was {} bytes, it is now {}",
                    self.data.len,
                    m.len()
                ),
            ));
        }
        Ok(self.data.cell.get_or_init(|| m))
    }

    /// The open file to read frames from by range, when the segment is
    /// on a file system that cannot map cheaply and nothing has mapped it
    /// yet (see [`Vfs::maps_cheaply`]); `None` when its frames are read
    /// from [`Sealed::data`]. Bytes read either way are checked the same:
    /// each frame's CRC and LSN.
    pub fn range_file(&self) -> Option<&Arc<dyn VfsFile>> {
        match self.data.cell.get() {
            Some(_) => None,
            None if self.data.by_range => self.file(),
            None => None,
        }
    }

    /// The open file to read frames from by range for a read of sparse
    /// LSNs ([`View::read_sorted`](super::view::View::read_sorted)), when
    /// nothing has mapped the segment yet: a map of a file in the page
    /// cache costs a fault per touched page, each mapping the pages around
    /// it too (fault-around), and an unmap of them all at exit, where a
    /// read copies only the window read. Checked as any read is.
    pub fn sparse_file(&self) -> Option<&Arc<dyn VfsFile>> {
        match self.data.cell.get() {
            Some(_) => None,
            None => self.file(),
        }
    }

    /// The open file, if there is one or (a segment taken from the
    /// segment table) it opens and passes the checks of
    /// [`Sealed::checked_file`]. `None` otherwise: the caller then reads
    /// through [`Sealed::data`], which gives the error.
    fn file(&self) -> Option<&Arc<dyn VfsFile>> {
        match self.data.file.get() {
            Some(f) => Some(f),
            None if self.data.from_table => self.checked_file().ok(),
            None => None,
        }
    }

    /// The segment's file, opened, for a segment taken from the log's
    /// segment table: its length, header and footer are read and checked
    /// (as a full open checks them: valid, the name's first LSN, a footer
    /// that agrees with it) and must equal what the table recorded, else
    /// an error names the file: a segment replaced, cut or rewritten
    /// behind the table is never read on the table's word. Done once;
    /// later calls return the same file.
    pub(crate) fn checked_file(&self) -> Result<&Arc<dyn VfsFile>> {
        if let Some(f) = self.data.file.get() {
            return Ok(f);
        }
        let Some(vfs) = &self.data.vfs else {
            return Err(EngineError::io(
                "open log segment",
                &self.path,
                std::io::Error::other("the segment has no file system to open it from"),
            ));
        };
        let path = &self.path;
        let io = |e| EngineError::io("read log segment", path, e);
        let f = vfs.open(path, OpenMode::Read).map_err(io)?;
        let len = f.len().map_err(io)?;
        let (head, last) = read_ends(&*f, len).map_err(io)?;
        let first = self.header.first_lsn;
        let (header, footer) = check_sealed(path, &head, &last, len, first, self.header.prev_chain)
            .map_err(|e| match e {
                EngineError::Corrupt {
                    path,
                    offset,
                    lsn,
                    detail,
                } => EngineError::Corrupt {
                    path,
                    offset,
                    lsn,
                    detail: format!(
                        "{detail} (the log's segment table ({}) recorded a valid segment here: \
                         it was replaced or rewritten behind the table)",
                        super::table::TABLE_FILE
                    ),
                },
                e => e,
            })?;
        if len != self.data.len || header != self.header || footer != self.footer {
            return Err(corrupt(
                path,
                0,
                Some(first),
                format!(
                    "segment is not the one the log's segment table ({}) records: the table \
                     says {} bytes ending at LSN {}, the file has {len} bytes ending at LSN {} \
                     (it was replaced or rewritten behind the table; `cairn verify` checks \
                     every segment, and the next writable open rewrites the table)",
                    super::table::TABLE_FILE,
                    self.data.len,
                    self.footer.last_lsn,
                    footer.last_lsn,
                ),
            ));
        }
        Ok(self.data.file.get_or_init(|| f))
    }

    /// Offset just past the last frame (where the footer starts).
    pub fn frames_end(&self) -> u64 {
        self.data.len - SEGMENT_FOOTER_LEN as u64
    }

    /// The file's size in bytes.
    pub fn file_len(&self) -> u64 {
        self.data.len
    }
}

/// Why a segment whose file name says it starts at `named` cannot follow a
/// log that continues at `expect`.
pub(crate) fn sequence_gap(named: Lsn, expect: Lsn) -> String {
    if named > expect {
        format!("segment file name says it starts at LSN {named} but the log continues at LSN {expect}: records {expect} to {} are missing (a segment file was deleted or renamed)", named.0 - 1)
    } else {
        format!("segment file name says it starts at LSN {named} but the log continues at LSN {expect}: it overlaps the segment before it (a segment file was copied or renamed)")
    }
}

/// Opens a sealed segment, checking only its header and footer against the
/// expected first LSN and previous chain value; the frames are not rescanned.
/// The sparse index is loaded from its `.idx` file, or rebuilt (and written
/// back) when missing or stale: what a writable open does.
pub(crate) fn open_sealed(
    vfs: &dyn Vfs,
    path: &Path,
    first: Lsn,
    prev_chain: ChainHash,
) -> Result<Sealed> {
    let data = vfs
        .map(path)
        .map_err(|e| EngineError::io("map log segment", path, e))?;
    let len = data.len() as u64;
    let last = &data[data.len().saturating_sub(SEGMENT_FOOTER_LEN)..];
    let (header, footer) = check_sealed(path, &data, last, len, first, prev_chain)?;
    let index = match read_index(vfs, path, first, &footer) {
        Some(i) => i,
        None => {
            let idx = build_index(path, &data, first, (data.len() - SEGMENT_FOOTER_LEN) as u64)?;
            write_index(vfs, path, &idx, first, &footer);
            idx
        }
    };
    Ok(Sealed {
        path: path.to_path_buf(),
        header,
        footer,
        data: SegmentData::mapped(data),
        index: SealedIndex::loaded(index),
    })
}

/// [`open_sealed`] for a reader: the header and footer are read alone
/// (not mapped), the file is mapped when first read (see
/// [`Sealed::data`]), and the sparse index is read on first use (see
/// [`Sealed::index`]) and never written.
pub(crate) fn open_sealed_lazy(
    vfs: &Arc<dyn Vfs>,
    path: &Path,
    first: Lsn,
    prev_chain: ChainHash,
) -> Result<Sealed> {
    let io = |e| EngineError::io("read log segment", path, e);
    let f = vfs.open(path, OpenMode::Read).map_err(io)?;
    let len = f.len().map_err(io)?;
    let (head, last) = read_ends(&*f, len).map_err(io)?;
    let (header, footer) = check_sealed(path, &head, &last, len, first, prev_chain)?;
    Ok(Sealed {
        path: path.to_path_buf(),
        header,
        footer,
        data: SegmentData::lazy(vfs.clone(), len, f),
        index: SealedIndex::lazy(vfs.clone()),
    })
}

/// What the checks of a sealed segment read of a file of `len` bytes: its
/// header (fewer bytes if the file is shorter) and its footer (none if
/// the file cannot hold a header and a footer).
fn read_ends(f: &dyn VfsFile, len: u64) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut head = vec![0u8; len.min(SEGMENT_HEADER_LEN as u64) as usize];
    f.read_exact_at(&mut head, 0)?;
    let mut last = Vec::new();
    if len >= (SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN) as u64 {
        last.resize(SEGMENT_FOOTER_LEN, 0);
        f.read_exact_at(&mut last, len - SEGMENT_FOOTER_LEN as u64)?;
    }
    Ok((head, last))
}

/// A sealed segment of the log in `dir` as the segment table recorded it
/// (`entry`), its file not opened: the table's header and footer are
/// checked as a full open checks the file's (against the LSN `first` the
/// log continues at and the chain value `prev_chain` before it), and the
/// file is opened and its own header and footer checked against the
/// table's when it is first read (see [`Sealed::checked_file`]).
pub(crate) fn open_sealed_from_table(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    entry: &super::table::TableEntry,
    first: Lsn,
    prev_chain: ChainHash,
) -> Result<Sealed> {
    let path = dir.join(segment_name(entry.header.first_lsn));
    let (header, footer) = check_sealed(
        &path,
        &entry.header.encode(),
        &entry.footer.encode(),
        entry.len,
        first,
        prev_chain,
    )?;
    Ok(Sealed {
        path,
        header,
        footer,
        data: SegmentData::deferred(vfs.clone(), entry.len),
        index: SealedIndex::lazy(vfs.clone()),
    })
}

/// The sparse index file (`<segment>.idx`) of the sealed segment `seg`,
/// as its bytes: the file on `vfs` when it is whole and describes this
/// segment (its header's first LSN, its footer's last LSN, frames length
/// and chain value), else built from the segment's frames (each frame's
/// CRC and LSN checked), as a writable open would write it. Nothing is
/// written. For a copy of the log (an archive) that a reader reads by
/// range: with this file it reads a record's frames alone; without it,
/// the whole segment to build the index.
///
/// An error names the segment when it is not a sealed segment (no
/// footer, a header or footer that do not agree with its name) or a
/// frame is damaged.
pub fn sealed_index_file(vfs: &dyn Vfs, seg: &Path) -> Result<Vec<u8>> {
    let first = seg
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_segment_name)
        .ok_or_else(|| {
            EngineError::Invalid(format!(
                "{} is not a log segment file (<20 digits>{SEGMENT_EXT})",
                seg.display()
            ))
        })?;
    let data = vfs
        .map(seg)
        .map_err(|e| EngineError::io("map log segment", seg, e))?;
    let header = SegmentHeader::decode(&data)
        .map_err(|e| corrupt(seg, 0, Some(first), format!("segment header: {e}")))?;
    let last = &data[data.len().saturating_sub(SEGMENT_FOOTER_LEN)..];
    let last = if data.len() >= SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN {
        last
    } else {
        &[]
    };
    let (_, footer) = check_sealed(
        seg,
        &data,
        last,
        data.len() as u64,
        first,
        header.prev_chain,
    )?;
    let idx = match read_index(vfs, seg, first, &footer) {
        Some(i) => i,
        None => build_index(seg, &data, first, (data.len() - SEGMENT_FOOTER_LEN) as u64)?,
    };
    Ok(idx.encode(first, &footer))
}

/// The sparse index in segment `seg`'s `.idx` file, if it is there, whole
/// and describes this segment (see [`SparseIndex::read`]).
fn read_index(
    vfs: &dyn Vfs,
    seg: &Path,
    first: Lsn,
    footer: &SegmentFooter,
) -> Option<SparseIndex> {
    let f = vfs.open(&index_path(seg), OpenMode::Read).ok()?;
    let len = f.len().ok()?;
    if len > super::sparse_index::MAX_FILE_LEN {
        return None;
    }
    SparseIndex::read(&mut &*f, len, first, footer)
}

/// The sparse index in segment `seg`'s `.idx` file, mapped, if it is
/// there, whole and describes this segment (see [`MappedIndex::check`]).
fn map_index(vfs: &dyn Vfs, seg: &Path, first: Lsn, footer: &SegmentFooter) -> Option<MappedIndex> {
    let m = vfs.map(&index_path(seg)).ok()?;
    MappedIndex::check(m, first, footer)
}

/// Checks a sealed segment's header and footer, given its first bytes
/// (`head`, up to [`SEGMENT_HEADER_LEN`]), its last
/// [`SEGMENT_FOOTER_LEN`] (`last`; empty when the file is too short to
/// hold both) and its size `len`.
fn check_sealed(
    path: &Path,
    head: &[u8],
    last: &[u8],
    len: u64,
    first: Lsn,
    prev_chain: ChainHash,
) -> Result<(SegmentHeader, SegmentFooter)> {
    let header = check_header(path, head, first, prev_chain)?;
    let footer_at = len.saturating_sub(SEGMENT_FOOTER_LEN as u64);
    let footer = match SegmentFooter::decode_end(last, len) {
        Ok(Some(f)) => f,
        Ok(None) => {
            return Err(corrupt(
                path,
                footer_at,
                None,
                format!("segment is not sealed (no footer: the file was cut short) but a later segment exists; it starts at LSN {first}, and `cairn repair` keeps its intact records"),
            ))
        }
        Err(e) => {
            return Err(corrupt(
                path,
                footer_at,
                None,
                format!("segment footer: {e}"),
            ))
        }
    };
    if footer.last_lsn.0.wrapping_add(1) != first.0.wrapping_add(footer.record_count) {
        return Err(corrupt(
            path,
            footer_at,
            Some(footer.last_lsn),
            format!(
                "footer claims {} records ending at LSN {} but the segment starts at LSN {first}",
                footer.record_count, footer.last_lsn
            ),
        ));
    }
    Ok((header, footer))
}

/// Checks a segment header: valid, and naming the LSN and chain expected.
pub(crate) fn check_header(
    path: &Path,
    data: &[u8],
    first: Lsn,
    prev_chain: ChainHash,
) -> Result<SegmentHeader> {
    let header = SegmentHeader::decode(data)
        .map_err(|e| corrupt(path, 0, Some(first), format!("segment header: {e}")))?;
    if header.first_lsn != first {
        return Err(corrupt(
            path,
            0,
            Some(first),
            format!(
                "segment header says its first LSN is {} but LSN {first} was expected",
                header.first_lsn
            ),
        ));
    }
    if header.prev_chain != prev_chain {
        return Err(corrupt(
            path,
            0,
            Some(first),
            "segment header's chain value does not continue the previous segment's",
        ));
    }
    Ok(header)
}

/// Builds the sparse index of `data[64..end]` by walking its frames (CRC checked).
pub(crate) fn build_index(path: &Path, data: &[u8], first: Lsn, end: u64) -> Result<SparseIndex> {
    let mut idx = SparseIndex::default();
    let mut off = SEGMENT_HEADER_LEN as u64;
    let mut expect = first;
    while off < end {
        let f = frame::decode(&data[off as usize..end as usize])
            .map_err(|e| corrupt(path, off, Some(expect), format!("record frame: {e}")))?;
        if f.lsn != expect {
            return Err(corrupt(
                path,
                off,
                Some(expect),
                format!("record has LSN {} where LSN {expect} was expected", f.lsn),
            ));
        }
        idx.note(f.lsn, off);
        off += f.len() as u64;
        expect = expect.next();
    }
    Ok(idx)
}

/// Writes a sealed segment's sparse index next to it. Best effort: the index
/// is CRC-checked and rebuilt when missing or damaged, so a failure here
/// costs only a rebuild at the next open.
pub(crate) fn write_index(
    vfs: &dyn Vfs,
    seg: &Path,
    idx: &SparseIndex,
    first: Lsn,
    footer: &SegmentFooter,
) {
    let path = index_path(seg);
    // A new file, never the old one rewritten in place: a reader may hold
    // the old one mapped (see `MappedIndex`), and its bytes must stay the
    // ones it checked. A reader that looks between the two steps finds no
    // file, or a short one that fails its checks, and rebuilds the index.
    match vfs.remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return,
    }
    if let Ok(f) = vfs.open(&path, OpenMode::CreateNew) {
        let _ = f.write_all_at(&idx.encode(first, footer), 0);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Regression (a new process read a sealed segment's `.idx` whole into
    /// one buffer, then decoded it into a second, growing copy: ~250 KiB
    /// of pages faulted in twice for a 64 MiB segment): the file is read
    /// in pieces of `READ_CHUNK_BYTES` (the header, each piece, the CRC),
    /// reads back equal, and a flipped byte in its last piece still makes
    /// it unusable.
    #[test]
    fn sealed_index_is_read_in_pieces() {
        use super::super::sparse_index::{reads_during, ENTRY_LEN, READ_CHUNK_BYTES};
        let sim = Arc::new(crate::vfs::SimVfs::new());
        let vfs: Arc<dyn Vfs> = sim.clone();
        let dir = Path::new("/log");
        vfs.create_dir_all(dir).unwrap();
        let seg = dir.join(segment_name(Lsn(1)));
        let n = 3000u64;
        let mut idx = SparseIndex::default();
        for i in 0..n {
            assert!(idx.note(Lsn(i + 1), 64 + i * 4096));
        }
        let footer = SegmentFooter {
            record_count: n,
            last_lsn: Lsn(n),
            last_chain: ChainHash([7; 32]),
            frames_len: (n * 4096) as u32,
        };
        write_index(&*vfs, &seg, &idx, Lsn(1), &footer);
        let mut got = None;
        let reads = reads_during(&sim, &index_path(&seg), || {
            got = read_index(&*vfs, &seg, Lsn(1), &footer);
        });
        assert_eq!(got.as_ref(), Some(&idx));
        let pieces = (n as usize * ENTRY_LEN).div_ceil(READ_CHUNK_BYTES);
        assert_eq!(pieces, 3);
        assert_eq!(reads, 1 + pieces + 1, "header, {pieces} pieces, CRC");
        let len = vfs
            .open(&index_path(&seg), OpenMode::Read)
            .unwrap()
            .len()
            .unwrap();
        sim.corrupt(&index_path(&seg), len - 20, b"#").unwrap();
        assert_eq!(read_index(&*vfs, &seg, Lsn(1), &footer), None);
    }

    /// A sealed segment's `.idx` searched where it lies (mapped): one map
    /// (a single read of the file, no pieces copied), the same entries and
    /// the same seeks as the index read into memory; a flipped byte
    /// anywhere, a stale footer or a short file make it unusable, as they
    /// make the read one.
    #[test]
    fn sealed_index_is_mapped_and_checked_whole() {
        use super::super::sparse_index::reads_during;
        let sim = Arc::new(crate::vfs::SimVfs::new());
        let vfs: Arc<dyn Vfs> = sim.clone();
        let dir = Path::new("/log");
        vfs.create_dir_all(dir).unwrap();
        let seg = dir.join(segment_name(Lsn(1)));
        let n = 700u64;
        let mut idx = SparseIndex::default();
        for i in 0..n {
            assert!(idx.note(Lsn(3 * i + 1), 64 + i * 4096));
        }
        let footer = SegmentFooter {
            record_count: 3 * n,
            last_lsn: Lsn(3 * n),
            last_chain: ChainHash([7; 32]),
            frames_len: (n * 4096) as u32,
        };
        write_index(&*vfs, &seg, &idx, Lsn(1), &footer);
        let mut got = None;
        let reads = reads_during(&sim, &index_path(&seg), || {
            got = map_index(&*vfs, &seg, Lsn(1), &footer);
        });
        assert_eq!(reads, 1, "one map");
        let got = got.unwrap();
        assert_eq!(got.to_index(), idx);
        for lsn in 0..3 * n + 5 {
            assert_eq!(got.seek(Lsn(lsn)), idx.seek(Lsn(lsn)), "seek {lsn}");
        }
        let mut stale = footer;
        stale.frames_len -= 1;
        assert!(map_index(&*vfs, &seg, Lsn(1), &stale).is_none());
        assert!(map_index(&*vfs, &seg, Lsn(2), &footer).is_none());
        let bytes = idx.encode(Lsn(1), &footer);
        for i in (0..bytes.len()).step_by(7).chain([bytes.len() - 1]) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            let m = crate::vfs::Mapped::Bytes(Arc::from(bad));
            assert!(
                MappedIndex::check(m, Lsn(1), &footer).is_none(),
                "flip at {i}"
            );
        }
        let short = crate::vfs::Mapped::Bytes(Arc::from(&bytes[..bytes.len() - 16]));
        assert!(MappedIndex::check(short, Lsn(1), &footer).is_none());
        // Rewritten (a writable open rebuilding it), it reads back whole.
        write_index(&*vfs, &seg, &idx, Lsn(1), &footer);
        let again = map_index(&*vfs, &seg, Lsn(1), &footer).unwrap();
        assert_eq!(again.to_index(), idx);
    }

    #[test]
    fn names_round_trip_and_sort() {
        assert_eq!(segment_name(Lsn(1)), "00000000000000000001.seg");
        assert_eq!(
            parse_segment_name("00000000000000000042.seg"),
            Some(Lsn(42))
        );
        for bad in [
            "42.seg",
            "00000000000000000042.idx",
            "0000000000000000004x.seg",
            "tail.state",
        ] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
        assert!(segment_name(Lsn(9)) < segment_name(Lsn(10)));
        assert_eq!(
            index_path(Path::new("/x/00000000000000000001.seg")),
            Path::new("/x/00000000000000000001.idx")
        );
    }
}
