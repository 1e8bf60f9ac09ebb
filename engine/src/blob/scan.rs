//! Reading a pack file entry by entry: used by open (to recover entries past
//! the persisted index, or rebuild it), by garbage collection and by verify.
//!
//! A scan checks each entry's header and CRC (not its blake3: that is
//! verify's job and every read's). At an entry that does not check out it
//! looks for the next valid entry: if there is one, the bad span is damage
//! and the scan goes on after it; if there is none, the bad span runs to the
//! end of the file and is a torn tail (a partial write cut short by a crash).

use std::io;

use super::pack::{EntryHeader, EntryKind, ENTRY_HEADER_LEN, ENTRY_MAGIC};
use crate::vfs::VfsFile;

/// Bytes read at a time while looking for the next entry after damage.
const RESYNC_WINDOW_BYTES: usize = 1024 * 1024;

/// One valid entry found by a scan.
#[derive(Clone, Debug)]
pub struct ScannedEntry {
    /// Offset of the entry header in the pack.
    pub offset: u64,
    /// The entry's header.
    pub header: EntryHeader,
    /// The payload, kept only for chunk lists (small; open checks them).
    pub list_payload: Option<Vec<u8>>,
}

/// What a scan found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Valid entries, in file order.
    pub entries: Vec<ScannedEntry>,
    /// Damaged spans followed by valid entries: `(offset, detail)`.
    pub damaged: Vec<(u64, String)>,
    /// Where a torn tail starts, if the file ends in one.
    pub torn_at: Option<u64>,
}

/// Reads and checks the entry at `offset`, which must end by `end`.
/// `Ok(Err(detail))` for an entry that does not check out.
pub fn read_entry_at(
    file: &dyn VfsFile,
    offset: u64,
    end: u64,
) -> io::Result<Result<(EntryHeader, Vec<u8>), String>> {
    if end.saturating_sub(offset) < ENTRY_HEADER_LEN as u64 {
        return Ok(Err(format!(
            "partial entry header: {} bytes before the end",
            end.saturating_sub(offset)
        )));
    }
    let mut head = [0u8; ENTRY_HEADER_LEN];
    file.read_exact_at(&mut head, offset)?;
    let header = match EntryHeader::decode(&head) {
        Ok(h) => h,
        Err(e) => return Ok(Err(e.to_string())),
    };
    if offset + header.entry_len() > end {
        return Ok(Err(format!(
            "entry of {} bytes runs past the end of the pack ({} bytes left)",
            header.entry_len(),
            end - offset
        )));
    }
    let mut entry = vec![0u8; header.entry_len() as usize];
    entry[..ENTRY_HEADER_LEN].copy_from_slice(&head);
    file.read_exact_at(
        &mut entry[ENTRY_HEADER_LEN..],
        offset + ENTRY_HEADER_LEN as u64,
    )?;
    if let Err(e) = header.check_crc(&entry) {
        return Ok(Err(e.to_string()));
    }
    Ok(Ok((header, entry)))
}

/// The offset of the first valid entry at or after `from`, if any.
fn find_next_valid(file: &dyn VfsFile, from: u64, end: u64) -> io::Result<Option<u64>> {
    let magic = ENTRY_MAGIC.to_le_bytes();
    let mut pos = from;
    let mut buf = vec![0u8; RESYNC_WINDOW_BYTES];
    while end.saturating_sub(pos) >= ENTRY_HEADER_LEN as u64 {
        let n = (end - pos).min(RESYNC_WINDOW_BYTES as u64) as usize;
        file.read_exact_at(&mut buf[..n], pos)?;
        for i in 0..n.saturating_sub(3) {
            if buf[i..i + 4] == magic {
                let at = pos + i as u64;
                if read_entry_at(file, at, end)?.is_ok() {
                    return Ok(Some(at));
                }
            }
        }
        // Overlap by 3 bytes so a magic split across windows is seen.
        pos += n.saturating_sub(3).max(1) as u64;
    }
    Ok(None)
}

/// Scans `file` from `from` to `end`.
pub fn scan_pack(file: &dyn VfsFile, from: u64, end: u64) -> io::Result<Scan> {
    let mut scan = Scan::default();
    let mut off = from;
    while off < end {
        match read_entry_at(file, off, end)? {
            Ok((header, entry)) => {
                let list_payload = (header.kind == EntryKind::ChunkList)
                    .then(|| entry[ENTRY_HEADER_LEN..].to_vec());
                scan.entries.push(ScannedEntry {
                    offset: off,
                    header,
                    list_payload,
                });
                off += header.entry_len();
            }
            Err(detail) => match find_next_valid(file, off + 1, end)? {
                Some(next) => {
                    scan.damaged.push((off, detail));
                    off = next;
                }
                None => {
                    scan.torn_at = Some(off);
                    break;
                }
            },
        }
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::path::Path;

    use cairn_codec::BlobHash;

    use super::*;
    use crate::blob::pack::{encode_contents, PackHeader, PackId, PACK_HEADER_LEN};
    use crate::vfs::{OpenMode, SimVfs, Vfs};

    /// A pack holding `n` entries; returns the file, its bytes and the entry offsets.
    fn pack(n: usize) -> (std::sync::Arc<dyn VfsFile>, Vec<u8>, Vec<u64>) {
        let v = SimVfs::new();
        v.create_dir_all(Path::new("/p")).unwrap();
        let f = v
            .open(Path::new("/p/pack-00000001.pack"), OpenMode::CreateNew)
            .unwrap();
        let mut bytes = PackHeader {
            id: PackId(1),
            nonce: 9,
        }
        .encode()
        .to_vec();
        let mut offsets = Vec::new();
        for i in 0..n {
            let raw = format!("entry number {i} ").repeat(i * 10 + 1).into_bytes();
            offsets.push(bytes.len() as u64);
            bytes.extend(encode_contents(
                EntryKind::Blob,
                3,
                &BlobHash::of(&raw),
                &raw,
                None,
            ));
        }
        f.write_all_at(&bytes, 0).unwrap();
        (f, bytes, offsets)
    }

    #[test]
    fn scan_finds_every_entry() {
        let (f, bytes, offsets) = pack(6);
        let s = scan_pack(f.as_ref(), PACK_HEADER_LEN as u64, bytes.len() as u64).unwrap();
        let found: Vec<u64> = s.entries.iter().map(|e| e.offset).collect();
        assert_eq!(found, offsets);
        assert!(s.damaged.is_empty() && s.torn_at.is_none());
        // From the middle (a covered prefix).
        let s = scan_pack(f.as_ref(), offsets[3], bytes.len() as u64).unwrap();
        assert_eq!(s.entries.len(), 3);
    }

    #[test]
    fn a_partial_last_entry_is_a_torn_tail_at_every_cut() {
        let (f, bytes, offsets) = pack(3);
        let last = offsets[2];
        for cut in last + 1..bytes.len() as u64 {
            let s = scan_pack(f.as_ref(), PACK_HEADER_LEN as u64, cut).unwrap();
            assert_eq!(s.entries.len(), 2, "cut at {cut}");
            assert_eq!(s.torn_at, Some(last), "cut at {cut}");
            assert!(s.damaged.is_empty());
        }
    }

    #[test]
    fn damage_followed_by_good_entries_is_skipped_not_torn() {
        let (f, bytes, offsets) = pack(5);
        // Zero the whole second entry.
        let len = (offsets[2] - offsets[1]) as usize;
        f.write_all_at(&vec![0u8; len], offsets[1]).unwrap();
        let s = scan_pack(f.as_ref(), PACK_HEADER_LEN as u64, bytes.len() as u64).unwrap();
        let found: Vec<u64> = s.entries.iter().map(|e| e.offset).collect();
        assert_eq!(found, vec![offsets[0], offsets[2], offsets[3], offsets[4]]);
        assert_eq!(s.damaged.len(), 1);
        assert_eq!(s.damaged[0].0, offsets[1]);
        assert!(s.torn_at.is_none());
    }
}
