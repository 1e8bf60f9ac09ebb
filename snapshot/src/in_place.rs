//! Small cache files rewritten in place: one framed, checksummed record
//! written over the start of the file, never a temporary and a rename.
//!
//! Why: on ext4 (`auto_da_alloc`, the default) a rename over an existing
//! file, and a truncation of one to zero, make the kernel start writing
//! the new file's data out at once, and the call waits on that: a few
//! milliseconds each on a virtio disk, which is most of a watched
//! checkpoint's time. A `pwrite` into the file's page cache costs
//! microseconds.
//!
//! Safety: the record is one write at offset 0. A crash or a reader in
//! another process may meet it half written; its checksum then fails and
//! the file reads as absent, which every user of these files treats as
//! "unknown" (the next checkpoint scans in full). A record never reads as
//! an older valid version it did not hold: a mix of two records fails the
//! checksum. The file is never truncated, so a shorter record leaves the
//! old record's tail behind it, past the length the frame gives.
//!
//! Layout (little-endian): magic `CIP1` | body length u32 | body | the
//! first 16 bytes of the blake3 hash of everything before.

use std::path::Path;

use crate::error::{Result, SnapshotError};

/// The first bytes of an in-place record.
const MAGIC: &[u8; 4] = b"CIP1";
/// Bytes of the checksum after the body.
const SUM_BYTES: usize = 16;
/// Magic and length.
const HEAD_BYTES: usize = 8;
/// The largest body a record holds: these files are a few hundred bytes
/// (a tree's root, a journal point, a rollback's scope); a bound keeps a
/// damaged length from asking for gigabytes.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Frames `body` as a record.
pub(crate) fn encode(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD_BYTES + body.len() + SUM_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    let sum = blake3::hash(&out);
    out.extend_from_slice(&sum.as_bytes()[..SUM_BYTES]);
    out
}

/// The body of the record `b` starts with (anything after it is ignored);
/// `None` if it is not a whole, intact record.
pub(crate) fn decode(b: &[u8]) -> Option<&[u8]> {
    if b.len() < HEAD_BYTES || &b[..4] != MAGIC {
        return None;
    }
    let n = u32::from_le_bytes(b[4..8].try_into().ok()?) as usize;
    if n > MAX_BODY_BYTES {
        return None;
    }
    let end = HEAD_BYTES.checked_add(n)?;
    let sum = b.get(end..end.checked_add(SUM_BYTES)?)?;
    if blake3::hash(&b[..end]).as_bytes()[..SUM_BYTES] != *sum {
        return None;
    }
    Some(&b[HEAD_BYTES..end])
}

/// True if `b` starts as a record would (its magic): a file that does not
/// is of an older format, written whole.
pub(crate) fn is_record(b: &[u8]) -> bool {
    b.starts_with(MAGIC)
}

/// Writes `body` as the record at the start of `path` (created if
/// absent; not fsync'd, not truncated).
pub(crate) fn write(path: &Path, body: &[u8]) -> Result<()> {
    if body.len() > MAX_BODY_BYTES {
        return Err(SnapshotError::Invalid(format!(
            "{}: a record of {} bytes is over the {MAX_BODY_BYTES}-byte limit",
            path.display(),
            body.len()
        )));
    }
    let rec = encode(body);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| SnapshotError::io("open", path, e))?;
    write_all_at(&f, &rec).map_err(|e| SnapshotError::io("write", path, e))
}

/// Writes one byte at the start of `path` (created if absent, never
/// truncated): its mtime is then the file system's clock now.
pub(crate) fn touch(path: &Path) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    write_all_at(&f, b"c")
}

#[cfg(unix)]
fn write_all_at(f: &std::fs::File, b: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    f.write_all_at(b, 0)
}

#[cfg(not(unix))]
fn write_all_at(mut f: &std::fs::File, b: &[u8]) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    f.seek(SeekFrom::Start(0))?;
    f.write_all(b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_record_round_trips_and_any_damage_is_refused() {
        let b = encode(b"{\"root\":1}");
        assert_eq!(decode(&b), Some(&b"{\"root\":1}"[..]));
        let mut tail = b.clone();
        tail.extend_from_slice(b"old record's tail");
        assert_eq!(decode(&tail), Some(&b"{\"root\":1}"[..]));
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_none(), "cut {cut}");
        }
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x04;
            assert!(decode(&bad).is_none(), "flip {i}");
        }
    }

    /// A shorter record written over a longer one reads back as itself,
    /// and a write torn part way (the new record's start over the old
    /// one's end) reads as absent, never as a mix.
    #[test]
    fn an_in_place_rewrite_reads_back_and_a_torn_one_reads_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("last");
        write(&p, &[b'a'; 300]).unwrap();
        write(&p, b"short").unwrap();
        let on_disk = std::fs::read(&p).unwrap();
        assert!(on_disk.len() > encode(b"short").len());
        assert_eq!(decode(&on_disk), Some(&b"short"[..]));

        let old = encode(&[b'a'; 300]);
        let new = encode(&[b'b'; 300]);
        for at in 1..new.len() {
            let mut torn = old.clone();
            torn[..at].copy_from_slice(&new[..at]);
            // The first bytes of both are the same header: until a body
            // byte differs the file still holds the old record, whole.
            let unchanged = torn == old;
            assert!(decode(&torn).is_none() || unchanged, "torn at {at}");
        }
    }
}
