//! Reading the local store for replication: which files make it up, and
//! how much of each is whole enough to ship (a log tail up to its last
//! complete batch, a pack up to its last entry that checks out). Frames,
//! segment headers and footers are read with `cairn_codec`, pack entries
//! with the engine's own reader.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use cairn_codec::frame::{self, ChainForm};
use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{ChainHash, Lsn};
use cairn_engine::blob::delta::DELTA_FILE;
use cairn_engine::blob::pack::{PackHeader, ENTRY_HEADER_LEN, PACK_HEADER_LEN};
use cairn_engine::log::{walk_chained, Head};

use super::archive::Bytes;
use super::ReplicateError;

/// What kind of store file a name is, for shipping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A log segment (`log/<first LSN>.seg`).
    Segment,
    /// A file written once and never changed in place: dictionaries and
    /// their copies, the blob index (replaced by rename).
    Whole,
    /// A blob pack (`blobs/pack-N.pack`), append-only.
    Pack,
}

/// The kind of `dir/name`, or `None` for a file not listed for shipping:
/// sparse indexes and segments' query index files (shipped with their
/// sealed segment, by `Replicator::ship_sparse_indexes` and
/// `Replicator::ship_seg_indexes`), `tail.state` (rebuilt, and a shorter
/// tail would contradict it), the whole-log query index
/// (`index/query.idx`, rewritten on every save), temporary files,
/// repair's leftovers.
pub(crate) fn kind_of(dir: &str, name: &str) -> Option<Kind> {
    let is_dict =
        name.starts_with("dict-") && (name.ends_with(".zstd") || name.ends_with(".zstd.copy"));
    match dir {
        "log" if name.ends_with(".seg") && name.len() == 24 => Some(Kind::Segment),
        "log" if is_dict => Some(Kind::Whole),
        // The index's delta too: without it a reader of the archive
        // (restored, or read in place) scans every pack entry the index
        // file does not cover, which in place means fetching them.
        "blobs" if name == "index" || name == DELTA_FILE || is_dict => Some(Kind::Whole),
        "blobs" if name.starts_with("pack-") && name.ends_with(".pack") => Some(Kind::Pack),
        _ => None,
    }
}

/// A file's identity and size now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i64,
}

pub(crate) fn stat(path: &Path) -> Result<Option<Stat>, ReplicateError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(Stat {
            ino: m.ino(),
            len: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReplicateError::io("read the size of", path, e)),
    }
}

/// Reads `len` bytes at `off` of `path`.
pub(crate) fn read_range(path: &Path, off: u64, len: u64) -> Result<Vec<u8>, ReplicateError> {
    let f = File::open(path).map_err(|e| ReplicateError::io("open", path, e))?;
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, off)
        .map_err(|e| ReplicateError::io("read", path, e))?;
    Ok(buf)
}

/// Where a walk of a log segment stopped: after its last complete batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogCursor {
    /// Bytes of the file up to the end of the last complete batch.
    pub valid: u64,
    /// Offset of the last frame of that batch (`None`: no frame yet).
    pub last_frame: Option<u64>,
    /// The LSN and chain after it (the header's first LSN - 1 and chain
    /// before it, when there is no frame).
    pub lsn: Lsn,
    pub chain: ChainHash,
    pub form: ChainForm,
    /// The segment is sealed: its footer is the last 64 bytes, `valid` is
    /// its length, and nothing is appended to it again.
    pub sealed: bool,
}

/// Checks that the frame a cursor ends at is still there, with the same
/// LSN and chain: then the bytes before it are the ones walked (the chain
/// value covers them), and a walk may go on from `valid`.
pub(crate) fn log_cursor_holds(path: &Path, c: &LogCursor) -> Result<bool, ReplicateError> {
    let Some(off) = c.last_frame else {
        return Ok(true);
    };
    let Some(st) = stat(path)? else {
        return Ok(false);
    };
    if st.len < c.valid {
        return Ok(false);
    }
    let buf = read_range(path, off, c.valid - off)?;
    Ok(matches!(frame::decode(&buf), Ok(f) if f.lsn == c.lsn && f.chain == c.chain))
}

/// The offset of the frame of the record `want` in the log segment
/// `path`, found by decoding the frames of `from..to` (`from` a frame's
/// offset, `to` at most the end of the records walked); `None` when no
/// whole frame there carries it.
pub(crate) fn frame_offset(
    path: &Path,
    from: u64,
    to: u64,
    want: Lsn,
) -> Result<Option<u64>, ReplicateError> {
    let buf = read_range(path, from, to.saturating_sub(from))?;
    let mut at = 0usize;
    while at < buf.len() {
        let Ok(f) = frame::decode(&buf[at..]) else {
            return Ok(None);
        };
        if f.lsn == want {
            return Ok(Some(from + at as u64));
        }
        if f.lsn > want {
            return Ok(None);
        }
        at += f.len();
    }
    Ok(None)
}

/// Walks a log segment from `from` (a cursor that holds) or from its
/// header: every frame must check out, have the next LSN and follow the
/// chain; the walk ends at the first that does not (a tail being written,
/// or prepared zeros). A sealed segment (footer present and matching the
/// walk) is valid to its end.
///
/// With `map` (a segment known to be sealed: a later one exists, and
/// nothing writes it again), a walk from the header maps the file instead
/// of copying it into memory, as the engine's readers map sealed
/// segments; the pieces shipped are then slices of the map.
///
/// `index` is the sparse index of the segment's frames up to `from`
/// (cleared for a walk from the header): the walk adds an entry for the
/// first frame past each `interval` bytes after the last entry, and drops
/// entries past the records it took (a batch not yet whole).
pub(crate) fn walk_segment(
    path: &Path,
    from: Option<LogCursor>,
    map: bool,
    index: &mut Vec<(Lsn, u64)>,
    interval: u64,
) -> Result<Walked, ReplicateError> {
    if from.is_none() {
        index.clear();
    }
    let st = stat(path)?
        .ok_or_else(|| ReplicateError::io("read", path, std::io::ErrorKind::NotFound.into()))?;
    // A walk from the header reads the whole file, header included, so
    // the bytes it hands back are all a new segment's pieces need.
    let whole = match from {
        Some(_) => None,
        None => Some(match map.then(|| map_whole(path, st.len)).flatten() {
            Some(b) => b,
            None => Bytes::from(read_range(path, 0, st.len)?),
        }),
    };
    let mut c = match from {
        Some(c) => c,
        None => {
            let all = whole.as_deref().unwrap_or_default();
            let head = &all[..SEGMENT_HEADER_LEN.min(all.len())];
            let h = SegmentHeader::decode(head).map_err(|e| ReplicateError::Local {
                path: path.to_path_buf(),
                detail: format!("segment header: {e}"),
            })?;
            LogCursor {
                valid: SEGMENT_HEADER_LEN as u64,
                last_frame: None,
                lsn: Lsn(h.first_lsn.0.saturating_sub(1)),
                chain: h.prev_chain,
                form: h.chain_form,
                sealed: false,
            }
        }
    };
    if c.sealed {
        return Ok(Walked {
            cursor: c,
            base: c.valid,
            bytes: Bytes::new(),
        });
    }
    let (base, buf) = match whole {
        Some(all) => (0, all),
        None => (
            c.valid,
            Bytes::from(read_range(path, c.valid, st.len.saturating_sub(c.valid))?),
        ),
    };
    // The walk the log reader makes of its tail.
    let from = Head {
        last_lsn: c.lsn,
        chain: c.chain,
    };
    let start = c.valid;
    let frames = buf.get((start - base) as usize..).unwrap_or_default();
    let w = walk_chained(frames, from, c.form, |lsn, at| {
        let off = start + at as u64;
        if index.last().is_none_or(|&(_, o)| off >= o + interval) {
            index.push((lsn, off));
        }
    });
    if let Some(at) = w.last_frame {
        c.valid = start + w.committed as u64;
        c.last_frame = Some(start + at as u64);
        c.lsn = w.head.last_lsn;
        c.chain = w.head.chain;
    }
    index.retain(|&(_, o)| o < c.valid);
    // A sealed segment: the footer follows the last frame and agrees
    // with the walk.
    // The footer is checked against the file's real length (it records
    // the frames' length): a sealed segment is shipped with its footer,
    // or a reader of the archive finds a segment cut short before the
    // next one.
    let rest = &buf[(c.valid - base) as usize..];
    if rest.len() == SEGMENT_FOOTER_LEN {
        if let Ok(Some(foot)) = SegmentFooter::decode_end(rest, st.len) {
            if foot.last_lsn == c.lsn && foot.last_chain == c.chain {
                c.valid = st.len;
                c.sealed = true;
            }
        }
    }
    Ok(Walked {
        cursor: c,
        base,
        bytes: buf,
    })
}

/// The file `path` mapped whole, when it maps and is `len` bytes long.
fn map_whole(path: &Path, len: u64) -> Option<Bytes> {
    /// A map as the owner of the bytes a `Bytes` slices.
    struct Owner(cairn_engine::vfs::Mapped);
    impl AsRef<[u8]> for Owner {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }
    if len == 0 {
        return None;
    }
    let m = cairn_engine::vfs::Vfs::map(&cairn_engine::RealVfs, path).ok()?;
    (m.len() as u64 == len).then(|| Bytes::from_owner(Owner(m)))
}

/// A walk of a log segment: where it stopped, and the bytes it read and
/// checked, from `base` on (to the file's length when it was read; the
/// cursor's `valid` is within them).
#[derive(Clone, Debug)]
pub(crate) struct Walked {
    pub cursor: LogCursor,
    pub base: u64,
    pub bytes: Bytes,
}

impl Walked {
    /// The file's bytes `from..to` as the walk read them, without a copy;
    /// `None` when the walk did not read them all.
    pub fn range(&self, from: u64, to: u64) -> Option<Bytes> {
        let end = self.base + self.bytes.len() as u64;
        (from >= self.base && from <= to && to <= end).then(|| {
            self.bytes
                .slice((from - self.base) as usize..(to - self.base) as usize)
        })
    }
}

/// Where a walk of a pack stopped: after its last entry that checks out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackCursor {
    /// Bytes of the file up to the end of that entry (the header alone
    /// when there is none).
    pub valid: u64,
    /// That entry's offset and its header's bytes.
    pub last_entry: Option<(u64, [u8; ENTRY_HEADER_LEN])>,
}

/// Checks that the entry a pack cursor ends at is still there unchanged.
pub(crate) fn pack_cursor_holds(path: &Path, c: &PackCursor) -> Result<bool, ReplicateError> {
    let Some((off, head)) = c.last_entry else {
        return Ok(stat(path)?.is_some_and(|s| s.len >= c.valid));
    };
    match stat(path)? {
        Some(s) if s.len >= c.valid => Ok(read_range(path, off, ENTRY_HEADER_LEN as u64)? == head),
        _ => Ok(false),
    }
}

/// Walks a pack from a cursor that holds, or from its header, with the
/// engine's entry reader; `None` when the header does not check out yet
/// (a pack header is written with its first entries' sync).
///
/// The walk also cuts the pack into the pieces replication ships: from
/// `origin` (the length already shipped) on, pieces of `piece_bytes`,
/// the last one ending where the walk stopped, each handed to `ship` as
/// soon as the walk has gone past its end. The walk reads the pack a
/// piece at a time, and a piece is shipped from the bytes the walk read
/// and checked, so the pack is read once. Nothing is shipped when
/// `origin` lies past where the walk stopped (the caller then ships from
/// the start).
pub(crate) fn walk_pack(
    path: &Path,
    from: Option<PackCursor>,
    origin: u64,
    piece_bytes: u64,
    ship: &mut dyn FnMut(Bytes) -> Result<(), ReplicateError>,
) -> Result<Option<PackCursor>, ReplicateError> {
    let Some(st) = stat(path)? else {
        return Ok(None);
    };
    let mut c = match from {
        Some(c) => c,
        None => {
            if st.len < PACK_HEADER_LEN as u64 {
                return Ok(None);
            }
            if PackHeader::decode(&read_range(path, 0, PACK_HEADER_LEN as u64)?).is_err() {
                return Ok(None);
            }
            PackCursor {
                valid: PACK_HEADER_LEN as u64,
                last_entry: None,
            }
        }
    };
    let file =
        cairn_engine::vfs::Vfs::open(&cairn_engine::RealVfs, path, cairn_engine::OpenMode::Read)
            .map_err(|e| ReplicateError::io("open", path, e))?;
    let file = Windowed {
        file,
        origin,
        piece_bytes: piece_bytes.max(1),
        end: st.len,
        small: parking_lot::Mutex::new((0, Vec::new())),
        window: parking_lot::Mutex::new(None),
    };
    // The pieces shipped so far end here.
    let mut shipped = origin;
    loop {
        while shipped + file.piece_bytes <= c.valid {
            ship(file.piece(path, shipped, file.piece_bytes)?)?;
            shipped += file.piece_bytes;
        }
        match cairn_engine::blob::scan::read_entry_at(&file, c.valid, st.len) {
            Ok(Ok((header, entry))) => {
                let mut head = [0u8; ENTRY_HEADER_LEN];
                head.copy_from_slice(&entry[..ENTRY_HEADER_LEN]);
                c.last_entry = Some((c.valid, head));
                c.valid += header.entry_len();
            }
            Ok(Err(_)) => break,
            Err(e) => return Err(ReplicateError::io("read", path, e)),
        }
    }
    while shipped < c.valid {
        let len = (c.valid - shipped).min(file.piece_bytes);
        ship(file.piece(path, shipped, len)?)?;
        shipped += len;
    }
    Ok(Some(c))
}

/// Bytes [`Windowed`] reads at once before its origin: many pack entries
/// of small blobs per read, little memory.
const READ_AHEAD_BYTES: usize = 1 << 20;

/// A pack read forward for a walk: from `origin` on, a piece at a time
/// (the pieces replication ships, kept to be shipped from); before it, in
/// [`READ_AHEAD_BYTES`] blocks. A read inside the piece or block last read
/// is served from it, so the entry reader's two small reads an entry cost
/// a few large reads, not two a blob. Read-only.
#[derive(Debug)]
struct Windowed {
    file: std::sync::Arc<dyn cairn_engine::vfs::VfsFile>,
    origin: u64,
    piece_bytes: u64,
    /// The file's length when the walk started: nothing past it is read.
    end: u64,
    /// Where the block last read before `origin` starts, and its bytes.
    small: parking_lot::Mutex<(u64, Vec<u8>)>,
    /// Where the piece last read starts, and its bytes.
    window: parking_lot::Mutex<Option<(u64, Bytes)>>,
}

impl Windowed {
    /// The piece `start..start + len`: from the piece last read when it
    /// starts there (without a copy), else read from the file (an entry
    /// longer than a piece left it behind).
    fn piece(&self, path: &Path, start: u64, len: u64) -> Result<Bytes, ReplicateError> {
        if let Some((ws, b)) = self.window.lock().as_ref() {
            if *ws == start && b.len() as u64 >= len {
                return Ok(b.slice(..len as usize));
            }
        }
        Ok(Bytes::from(read_range(path, start, len)?))
    }

    /// Reads `buf.len()` bytes at `offset`, fewer at the end of the file.
    fn fill(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.file.read_at(&mut buf[got..], offset + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(got)
    }
}

impl cairn_engine::vfs::VfsFile for Windowed {
    fn read_at(&self, out: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let want = out.len() as u64;
        if offset >= self.origin {
            let ws = self.origin + (offset - self.origin) / self.piece_bytes * self.piece_bytes;
            let we = (ws + self.piece_bytes).min(self.end);
            if offset + want <= we {
                let mut w = self.window.lock();
                if !matches!(&*w, Some((s, _)) if *s == ws) {
                    let mut b = vec![0u8; (we - ws) as usize];
                    let n = self.fill(&mut b, ws)?;
                    b.truncate(n);
                    *w = Some((ws, Bytes::from(b)));
                }
                if let Some((_, b)) = w.as_ref() {
                    let from = (offset - ws) as usize;
                    let n = out.len().min(b.len().saturating_sub(from));
                    out[..n].copy_from_slice(&b[from..from + n]);
                    return Ok(n);
                }
            }
        }
        if out.len() >= READ_AHEAD_BYTES {
            return self.file.read_at(out, offset);
        }
        let mut b = self.small.lock();
        let (start, bytes) = &mut *b;
        let end = *start + bytes.len() as u64;
        if offset < *start || offset + want > end {
            bytes.resize(READ_AHEAD_BYTES, 0);
            let got = self.fill(bytes, offset)?;
            bytes.truncate(got);
            *start = offset;
        }
        let from = (offset - *start) as usize;
        let n = out.len().min(bytes.len() - from);
        out[..n].copy_from_slice(&bytes[from..from + n]);
        Ok(n)
    }

    fn write_all_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(std::io::ErrorKind::ReadOnlyFilesystem.into())
    }

    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }

    fn set_len(&self, _: u64) -> std::io::Result<()> {
        Err(std::io::ErrorKind::ReadOnlyFilesystem.into())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::vfs::VfsFile;

    /// A sealed segment is walked to its end, footer included, and known
    /// as sealed; the tail is not. (The footer was once checked against
    /// a probe of the wrong length, so no segment was ever seen sealed and
    /// each was shipped without its footer: an archive of two segments
    /// could be neither opened nor restored.)
    #[test]
    fn a_sealed_segment_is_walked_whole_with_its_footer() {
        let d = tempfile::tempdir().unwrap();
        let s = crate::Store::builder()
            .workspace(d.path())
            .segment_size_bytes(4096)
            .open()
            .unwrap();
        for i in 0..200u64 {
            let mut e = crate::Event::new(crate::EventKind::Prompt, "s");
            e.text = Some(format!(
                "event {i} {}",
                blake3::hash(&i.to_le_bytes()).to_hex()
            ));
            s.append(&e).unwrap();
        }
        let sealed = s.stats().log.sealed_segments as usize;
        s.close().unwrap();
        let log = d.path().join(".cairn/log");
        let mut segs: Vec<_> = std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .collect();
        segs.sort();
        assert!(
            sealed >= 3 && segs.len() == sealed + 1,
            "{sealed} of {segs:?}"
        );
        for (i, p) in segs.iter().enumerate() {
            let w = walk_segment(p, None, i < sealed, &mut Vec::new(), 1).unwrap();
            let c = w.cursor;
            assert_eq!(
                w.range(w.base, c.valid).map(|b| b.to_vec()),
                Some(std::fs::read(p).unwrap()[w.base as usize..c.valid as usize].to_vec()),
                "the walk's bytes are the file's"
            );
            let len = std::fs::metadata(p).unwrap().len();
            if i < sealed {
                assert!(c.sealed, "{}", p.display());
                assert_eq!(c.valid, len, "{}", p.display());
            } else {
                assert!(!c.sealed, "{}", p.display());
            }
        }
    }

    /// Reads through [`Windowed`] give the file's bytes at any offset and
    /// length: before its origin (inside a block, across its end, larger
    /// than a block), inside a piece, across pieces, past the file's end.
    #[test]
    fn windowed_reads_what_the_file_holds() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("f");
        let data: Vec<u8> = (0..(READ_AHEAD_BYTES * 2 + 777))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let n = data.len() as u64;
        for origin in [0, READ_AHEAD_BYTES as u64 + 3, n] {
            let file = cairn_engine::vfs::Vfs::open(
                &cairn_engine::RealVfs,
                &path,
                cairn_engine::OpenMode::Read,
            )
            .unwrap();
            let w = Windowed {
                file,
                origin,
                piece_bytes: 300_000,
                end: n,
                small: parking_lot::Mutex::new((0, Vec::new())),
                window: parking_lot::Mutex::new(None),
            };
            let big = READ_AHEAD_BYTES as u64 + 5;
            for (off, len) in [
                (0, 10),
                (5, 100),
                (READ_AHEAD_BYTES as u64 - 3, 10),
                (2, 10),
                (origin + 299_990, 20),
                (origin + 300_001, 50),
                (n - 4, 4),
                (n - 4, 100),
                (n, 10),
                (n + 50, 10),
                (1, big),
            ] {
                let mut buf = vec![0u8; len as usize];
                let mut got = 0;
                while got < buf.len() {
                    let k = w.read_at(&mut buf[got..], off + got as u64).unwrap();
                    if k == 0 {
                        break;
                    }
                    got += k;
                }
                let want = &data[(off.min(n) as usize)..((off + len).min(n) as usize)];
                assert_eq!(&buf[..got], want, "origin {origin}: at {off}, {len} bytes");
            }
        }
    }

    /// A pack's walk hands out, from the origin given, the pieces
    /// replication ships: each of the piece size but the last, which ends
    /// where the walk stopped, and together the file's bytes there (read
    /// once, by the walk). An origin past the walk's end gives none.
    #[test]
    fn a_pack_walk_ships_the_pack_in_pieces() {
        let d = tempfile::tempdir().unwrap();
        let s = crate::Store::open(d.path()).unwrap();
        // Bytes that do not compress, so the pack is as large as they are.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..300u32 {
            let blob: Vec<u8> = (0..(1000 + i * 37))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            s.put_blob(&blob).unwrap();
        }
        s.sync().unwrap();
        s.close().unwrap();
        let pack = d.path().join(".cairn/blobs/pack-00000001.pack");
        let data = std::fs::read(&pack).unwrap();
        assert!(data.len() > 1_000_000, "{}", data.len());
        for origin in [0, 10_000, data.len() as u64 / 2 + 3] {
            let mut pieces = Vec::new();
            let c = walk_pack(&pack, None, origin, 8192, &mut |b| {
                pieces.push(b.to_vec());
                Ok(())
            })
            .unwrap()
            .unwrap();
            assert_eq!(c.valid, data.len() as u64, "the whole pack checks out");
            let (last, full) = pieces.split_last().unwrap();
            assert!(full.iter().all(|p| p.len() == 8192), "origin {origin}");
            assert!(!last.is_empty() && last.len() <= 8192);
            assert_eq!(pieces.concat(), data[origin as usize..], "origin {origin}");
        }
        let mut n = 0;
        let past = data.len() as u64 + 1;
        walk_pack(&pack, None, past, 8192, &mut |_| {
            n += 1;
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(n, 0);
    }
}
