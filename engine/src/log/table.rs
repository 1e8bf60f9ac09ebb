//! The segment table (`log/segments.table`): what a reader's open needs to
//! know of every sealed segment (its length, header and footer), in one
//! small file, so that opening the log does not open every sealed segment
//! to check the chain across them. With it a reader's open costs the same
//! however long the history: a listing of the log directory, this file,
//! and the tail.
//!
//! It is a cache, never the truth:
//!
//! - The writer rewrites it whenever a segment is sealed and at every
//!   writable open (which checks every sealed segment's header and footer
//!   itself) when it does not describe the sealed segments exactly.
//!   Written to a temporary file and renamed over the old one, not
//!   fsynced: a table lost or torn by a crash is only a slower open.
//! - A reader takes it only when it is whole (length, version, CRC, every
//!   header and footer valid), when its segments are exactly the first
//!   segments of the directory listing, by name and in order, and when
//!   their headers and footers chain as a full open requires. Anything
//!   else (missing, stale, damaged, a segment removed or added before its
//!   last one) and the reader opens every segment as without a table.
//!   Segments listed after the table's (the tail, segments sealed since)
//!   are opened as without a table.
//! - A segment taken from the table is opened when it is first read, and
//!   its own length, header and footer must then equal the table's, else
//!   the read fails naming the file (see `Sealed::checked_file`): a
//!   segment replaced or rewritten behind the table is never read on the
//!   table's word. `cairn verify` reads every segment that way, and
//!   every frame.
//! - Repair (`salvage`), which rewrites segments under the same names,
//!   removes the table before it puts a new segment in place.
//!
//! ```text
//!  0  8 magic "CAIRNSGT"    8 4 version (1)    12 4 reserved (0)
//! 16  8 entries n           24 8 reserved (0)
//! 32 136n entries, in LSN order, each:
//!      0  8 the segment file's length in bytes
//!      8 64 its header, as in the file
//!     72 64 its footer, as in the file
//! then CRC32 (seeded) of all before; the file ends there.
//! ```

use std::path::Path;
use std::sync::Arc;

use cairn_codec::bytes::{crc32_seeded as crc, u64_le as u64_at};
use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};

use super::segment::Sealed;
use crate::vfs::{OpenMode, Vfs};

/// The table's file name in the log directory.
pub(crate) const TABLE_FILE: &str = "segments.table";
/// The name a new table is written under before it is renamed into place.
const TABLE_TMP_FILE: &str = "segments.table.tmp";
const MAGIC: &[u8; 8] = b"CAIRNSGT";
const VERSION: u32 = 1;
/// Bytes before the entries.
const FIXED_LEN: usize = 32;
/// Bytes of one entry: length, header, footer.
const ENTRY_LEN: usize = 8 + SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN;
/// The most entries a table may claim, bounding what a reader allocates
/// for a damaged or hostile one (8.9 MB): 65,536 sealed segments of the
/// default size are over 4 TB of log; a longer log opens without a table.
pub(crate) const MAX_TABLE_ENTRIES: usize = 1 << 16;

/// One sealed segment as the table records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableEntry {
    /// The file's length in bytes.
    pub len: u64,
    /// Its header.
    pub header: SegmentHeader,
    /// Its footer.
    pub footer: SegmentFooter,
}

impl TableEntry {
    /// The entry of an opened sealed segment.
    pub(crate) fn of(s: &Sealed) -> TableEntry {
        TableEntry {
            len: s.file_len(),
            header: s.header,
            footer: s.footer,
        }
    }
}

/// The table's bytes for `entries`.
pub(crate) fn encode(entries: &[TableEntry]) -> Vec<u8> {
    let mut b = Vec::with_capacity(FIXED_LEN + ENTRY_LEN * entries.len() + 4);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    for e in entries {
        b.extend_from_slice(&e.len.to_le_bytes());
        b.extend_from_slice(&e.header.encode());
        b.extend_from_slice(&e.footer.encode());
    }
    let c = crc(&b);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// The entries of a table, if `b` is exactly one whole table: magic,
/// version, the length its count implies, CRC, and every header and
/// footer valid (each footer agreeing with its entry's length). `None`
/// for anything else: the table is then not used.
pub(crate) fn decode(b: &[u8]) -> Option<Vec<TableEntry>> {
    if b.len() < FIXED_LEN + 4 || &b[0..8] != MAGIC {
        return None;
    }
    let n = usize::try_from(u64_at(b, 16)).ok()?;
    if n > MAX_TABLE_ENTRIES || b.len() != FIXED_LEN + ENTRY_LEN * n + 4 {
        return None;
    }
    let body = b.len() - 4;
    if crc(&b[..body]).to_le_bytes() != b[body..] {
        return None;
    }
    if u32::from_le_bytes([b[8], b[9], b[10], b[11]]) != VERSION {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let e = &b[FIXED_LEN + i * ENTRY_LEN..FIXED_LEN + (i + 1) * ENTRY_LEN];
        let len = u64_at(e, 0);
        let header = SegmentHeader::decode(&e[8..8 + SEGMENT_HEADER_LEN]).ok()?;
        let footer = SegmentFooter::decode_end(&e[8 + SEGMENT_HEADER_LEN..], len).ok()??;
        out.push(TableEntry {
            len,
            header,
            footer,
        });
    }
    Some(out)
}

/// The table of the log in `dir`, if there is a whole one (see [`decode`]).
pub(crate) fn load(vfs: &dyn Vfs, dir: &Path) -> Option<Vec<TableEntry>> {
    let f = vfs.open(&dir.join(TABLE_FILE), OpenMode::Read).ok()?;
    let len = usize::try_from(f.len().ok()?).ok()?;
    if len > FIXED_LEN + ENTRY_LEN * MAX_TABLE_ENTRIES + 4 {
        return None;
    }
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, 0).ok()?;
    decode(&b)
}

/// Makes the table of the log in `dir` describe `sealed` (every sealed
/// segment, in LSN order, as the writer has checked them), unless it does
/// already: written whole to a temporary file, then renamed over the old
/// table. A log with more sealed segments than a table may hold gets
/// none (an old one is removed). Best effort: a table that cannot be
/// written leaves the one before, which readers take only as far as the
/// directory listing matches it (and check segment by segment), or none;
/// either way a reader opens the log correctly, only more slowly.
pub(crate) fn save(vfs: &dyn Vfs, dir: &Path, sealed: &[Arc<Sealed>]) {
    let path = dir.join(TABLE_FILE);
    if sealed.len() > MAX_TABLE_ENTRIES {
        let _ = vfs.remove_file(&path);
        return;
    }
    let entries: Vec<TableEntry> = sealed.iter().map(|s| TableEntry::of(s)).collect();
    let bytes = encode(&entries);
    if super::recovery::read_small(vfs, &path).is_some_and(|b| b == bytes) {
        return;
    }
    let tmp = dir.join(TABLE_TMP_FILE);
    let written = vfs
        .open(&tmp, OpenMode::CreateTruncate)
        .and_then(|f| f.write_all_at(&bytes, 0));
    if written.is_err() || vfs.rename(&tmp, &path).is_err() {
        let _ = vfs.remove_file(&tmp);
    }
}

/// Removes the table of the log in `dir`, if there is one: before
/// segments are replaced under the same names (repair), so that no reader
/// takes the old ones' table for the new ones.
pub(crate) fn remove(vfs: &dyn Vfs, dir: &Path) -> std::io::Result<()> {
    match vfs.remove_file(&dir.join(TABLE_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use cairn_codec::frame::ChainForm;
    use cairn_codec::{ChainHash, Lsn};

    fn entries(n: u64) -> Vec<TableEntry> {
        (0..n)
            .map(|i| TableEntry {
                len: (SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN) as u64 + 100,
                header: SegmentHeader {
                    first_lsn: Lsn(1 + 10 * i),
                    prev_chain: ChainHash([i as u8; 32]),
                    chain_form: ChainForm::CURRENT,
                },
                footer: SegmentFooter {
                    record_count: 10,
                    last_lsn: Lsn(10 + 10 * i),
                    last_chain: ChainHash([i as u8 + 1; 32]),
                    frames_len: 100,
                },
            })
            .collect()
    }

    /// A table reads back as written; any flipped bit, a cut, or bytes
    /// after it make it absent (never a table that says something else).
    #[test]
    fn round_trip_and_any_damage_is_absent() {
        let t = entries(3);
        let b = encode(&t);
        assert_eq!(decode(&b), Some(t.clone()));
        for i in 0..b.len() {
            for bit in [0x01, 0x80] {
                let mut bad = b.clone();
                bad[i] ^= bit;
                assert_eq!(decode(&bad), None, "flip {bit:#x} at {i}");
            }
        }
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut]), None, "cut at {cut}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(decode(&longer), None);
        assert_eq!(decode(&encode(&[])), Some(vec![]));
    }

    /// A count over the bound is refused before anything is allocated
    /// for it, even with a CRC that fits.
    #[test]
    fn a_count_over_the_bound_is_refused() {
        let mut b = encode(&entries(1));
        b[16..24].copy_from_slice(&((MAX_TABLE_ENTRIES as u64) + 1).to_le_bytes());
        let body = b.len() - 4;
        let c = crc(&b[..body]);
        b[body..].copy_from_slice(&c.to_le_bytes());
        assert_eq!(decode(&b), None);
    }

    use crate::log::{Log, LogOptions, LogReader, Record};
    use crate::vfs::RealVfs;
    use crate::EngineError;
    use cairn_codec::{Event, EventKind};

    /// Appends `n` records (text tagged `tag`) to the log in `dir`, in
    /// segments of about 4 KiB, and closes it.
    fn append(dir: &Path, n: u64, tag: &str) {
        let opts = LogOptions {
            segment_size_bytes: 4096,
            durability: crate::log::Durability::Never,
            ..LogOptions::default()
        };
        let log = Log::open(Arc::new(RealVfs), dir, opts).unwrap();
        for i in 0..n {
            let e = Event::new(EventKind::Reply, "s")
                .with_text(format!("{tag} {i} {}", "x".repeat(60)));
            log.append(&e).unwrap();
        }
        log.close().unwrap();
    }

    fn reader(dir: &Path) -> LogReader {
        LogReader::open(Arc::new(RealVfs), dir).unwrap()
    }

    /// How many of the reader's sealed segments came from the table.
    fn from_table(r: &LogReader) -> usize {
        r.view
            .sealed
            .iter()
            .filter(|s| s.data.is_from_table())
            .count()
    }

    fn all(r: &LogReader) -> Vec<Record> {
        r.iter_from(Lsn(1)).map(|r| r.unwrap()).collect()
    }

    fn seg(dir: &Path, r: &LogReader, i: usize) -> std::path::PathBuf {
        let p = r.view.sealed[i].path.clone();
        assert!(p.starts_with(dir));
        p
    }

    /// The writer keeps the table describing every sealed segment (each
    /// seal rewrites it), and a reader's open takes every sealed segment
    /// from it without opening one file: the files are opened, and
    /// checked against the table, by the reads that reach them. Every
    /// record reads back as from a reader that opened every segment.
    #[test]
    fn a_reader_opens_the_sealed_segments_from_the_table() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        append(dir, 300, "a");
        let r = reader(dir);
        let n = r.view.sealed.len();
        assert!(n >= 3, "{n}");
        let t = load(&RealVfs, dir).unwrap();
        assert_eq!(t.len(), n);
        for (e, s) in t.iter().zip(&r.view.sealed) {
            assert_eq!(*e, TableEntry::of(s));
        }
        assert_eq!(from_table(&r), n);
        assert!(r.view.sealed.iter().all(|s| !s.data.is_open()));
        assert_eq!(r.read(Lsn(1)).unwrap().lsn, Lsn(1));
        let opened: Vec<bool> = r.view.sealed.iter().map(|s| s.data.is_open()).collect();
        assert!(opened[0] && opened[1..].iter().all(|o| !o), "{opened:?}");
        let got = all(&r);
        assert_eq!(got.len(), 300);

        std::fs::remove_file(dir.join(TABLE_FILE)).unwrap();
        let full = reader(dir);
        assert_eq!(from_table(&full), 0);
        assert_eq!(all(&full), got);
        assert_eq!(full.sealed_spans(), r.sealed_spans());
        assert_eq!(full.head(), r.head());
        // The next writable open writes it again.
        append(dir, 0, "a");
        assert_eq!(load(&RealVfs, dir).unwrap(), t);
    }

    /// A table cut short, with a bit flipped, or with bytes after it is
    /// not used: the reader opens every segment and reads every record,
    /// and the next writable open writes a whole one. So is a table left
    /// beside the temporary file of a write a crash interrupted.
    #[test]
    fn a_damaged_table_is_ignored_and_rewritten() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        append(dir, 300, "a");
        let path = dir.join(TABLE_FILE);
        let good = std::fs::read(&path).unwrap();
        let want = all(&reader(dir));
        let n = reader(dir).view.sealed.len();
        let mut damaged = vec![
            good[..good.len() / 2].to_vec(),
            good[..good.len() - 1].to_vec(),
        ];
        for at in [
            0,
            9,
            17,
            FIXED_LEN + 3,
            FIXED_LEN + 8 + 20,
            good.len() - 70,
            good.len() - 2,
        ] {
            let mut b = good.clone();
            b[at] ^= 0x10;
            damaged.push(b);
        }
        let mut longer = good.clone();
        longer.extend_from_slice(&[0; 8]);
        damaged.push(longer);
        for b in damaged {
            std::fs::write(&path, &b).unwrap();
            let r = reader(dir);
            assert_eq!(from_table(&r), 0);
            assert_eq!(all(&r), want);
            append(dir, 0, "a");
            assert_eq!(std::fs::read(&path).unwrap(), good);
        }
        // A crash while the table was written: its temporary file is
        // left, the table before it is whole.
        std::fs::write(dir.join(TABLE_TMP_FILE), &good[..40]).unwrap();
        let r = reader(dir);
        assert_eq!(from_table(&r), n);
        assert_eq!(all(&r), want);
        // Or the rename was never done and the old table is gone too.
        std::fs::remove_file(&path).unwrap();
        let r = reader(dir);
        assert_eq!(from_table(&r), 0);
        assert_eq!(all(&r), want);
    }

    /// A table older than the log (segments sealed after it, as when a
    /// crash came before the seal's table was written) is taken for the
    /// segments it names; the later ones are opened one by one.
    #[test]
    fn a_stale_table_covers_only_what_it_names() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        append(dir, 200, "a");
        let old = std::fs::read(dir.join(TABLE_FILE)).unwrap();
        let k = load(&RealVfs, dir).unwrap().len();
        append(dir, 200, "b");
        std::fs::write(dir.join(TABLE_FILE), &old).unwrap();
        let r = reader(dir);
        assert!(r.view.sealed.len() > k + 1, "{} {k}", r.view.sealed.len());
        assert_eq!(from_table(&r), k);
        let got = all(&r);
        assert_eq!(got.len(), 400);
        std::fs::remove_file(dir.join(TABLE_FILE)).unwrap();
        assert_eq!(all(&reader(dir)), got);
    }

    /// A segment replaced behind the table by another log's segment of
    /// the same name (another chain): the reader's open takes the table's
    /// word, but the first read of that segment checks the file against
    /// it and fails naming the file; segments before it read as before;
    /// verify fails on it. Never a record of the other log.
    #[test]
    fn a_segment_replaced_behind_the_table_is_named_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        append(&a, 300, "a");
        append(&b, 300, "b");
        let ra = reader(&a);
        let victim = seg(&a, &ra, 1);
        let first = ra.view.sealed[1].header.first_lsn;
        let name = victim.file_name().unwrap();
        std::fs::copy(b.join(name), &victim).unwrap();
        let r = reader(&a);
        assert_eq!(from_table(&r), r.view.sealed.len());
        assert_eq!(r.read(Lsn(1)).unwrap(), ra.read(Lsn(1)).unwrap());
        for e in [
            r.read(first).unwrap_err(),
            r.iter_from(Lsn(1)).find_map(|r| r.err()).unwrap(),
            r.verify().unwrap_err(),
        ] {
            match e {
                EngineError::Corrupt { path, detail, .. } => {
                    assert_eq!(path, victim);
                    assert!(detail.contains("segment table"), "{detail}");
                }
                e => panic!("{e}"),
            }
        }
        let mut seen = Vec::new();
        let _ = r.read_sorted(&[Lsn(1), first, Lsn(first.0 + 1)], |rec| {
            seen.push(rec.lsn);
            true
        });
        assert_eq!(seen, vec![Lsn(1)]);
        // Cut short instead (a sealed segment never changes): the same.
        let other = seg(&a, &ra, 2);
        let bytes = std::fs::read(&other).unwrap();
        std::fs::write(&other, &bytes[..bytes.len() - 10]).unwrap();
        let r = reader(&a);
        let at = r.view.sealed[2].header.first_lsn;
        assert!(matches!(r.read(at), Err(EngineError::Corrupt { path, .. }) if path == other));
    }

    /// A segment removed, or one added, behind the table: the listing no
    /// longer matches it, so the reader opens every segment, which names
    /// the gap as it always did.
    #[test]
    fn a_segment_removed_or_added_behind_the_table_is_a_full_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        append(dir, 300, "a");
        let r = reader(dir);
        let gone = seg(dir, &r, 1);
        let kept = std::fs::read(&gone).unwrap();
        std::fs::remove_file(&gone).unwrap();
        let e = LogReader::open(Arc::new(RealVfs), dir).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");

        // Added: a copy of the first segment under a name between two
        // of the table's (the listing is no longer the table's).
        std::fs::write(&gone, &kept).unwrap();
        let s0 = seg(dir, &r, 0);
        let between = dir.join(super::super::segment::segment_name(Lsn(2)));
        std::fs::copy(&s0, &between).unwrap();
        let e = LogReader::open(Arc::new(RealVfs), dir).unwrap_err();
        assert!(e.to_string().contains("LSN"), "{e}");
    }

    /// Repair replaces segments under the same names: it removes the table
    /// first, so a reader after it opens the repaired segments one by one
    /// and reads their records, never failing on the old table.
    #[test]
    fn repair_removes_the_table() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        append(dir, 300, "a");
        let r = reader(dir);
        let victim = seg(dir, &r, 1);
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes[200] ^= 0x40;
        std::fs::write(&victim, &bytes).unwrap();
        drop(r);
        crate::log::salvage(Arc::new(RealVfs), dir).unwrap();
        assert!(!dir.join(TABLE_FILE).exists());
        let r = reader(dir);
        assert_eq!(from_table(&r), 0);
        assert_eq!(all(&r).len(), 300);
    }

    proptest::proptest! {
        /// The decoder on arbitrary bytes never panics; a table it wrote
        /// reads back; any one bit changed anywhere in it, or a byte cut
        /// off or added, makes it refuse the table (so the log is opened
        /// segment by segment), never read other entries.
        #[test]
        fn any_changed_table_is_refused_and_any_bytes_are_safe(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
            n in 0u64..6,
            at in proptest::prelude::any::<usize>(),
            bit in 0u8..8,
            extra in proptest::prelude::any::<u8>(),
        ) {
            let _ = decode(&junk);
            let good = encode(&entries(n));
            proptest::prop_assert_eq!(decode(&good), Some(entries(n)));
            let mut flipped = good.clone();
            let i = at % flipped.len();
            flipped[i] ^= 1 << bit;
            proptest::prop_assert_eq!(decode(&flipped), None);
            proptest::prop_assert_eq!(decode(&good[..good.len() - 1]), None);
            let mut longer = good.clone();
            longer.push(extra);
            proptest::prop_assert_eq!(decode(&longer), None);
        }
    }
}
