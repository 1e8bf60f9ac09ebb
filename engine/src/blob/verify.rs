//! `cairn verify` for blobs: every entry of every pack checked (CRC,
//! decompression within the recorded size, blake3 against the name), every
//! chunk list complete, every index entry pointing at a good entry.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use cairn_codec::BlobHash;

use super::chunking::decode_chunk_list;
use super::index::Loc;
use super::pack::{
    decode_contents, EntryHeader, EntryKind, PackId, ENTRY_HEADER_LEN, PACK_HEADER_LEN,
};
use super::scan::{read_entry_at, scan_pack};
use super::{BlobStore, PackFile};
use crate::{EngineError, Result};

/// One problem verify found.
#[derive(Clone, Debug, PartialEq)]
pub struct BlobProblem {
    /// The blob concerned, when known (not for an unreadable span).
    pub hash: Option<BlobHash>,
    /// The pack file.
    pub path: PathBuf,
    /// Byte offset in that pack.
    pub offset: u64,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for BlobProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(h) = &self.hash {
            write!(f, "blob {h}: ")?;
        }
        write!(
            f,
            "{} at byte offset {}: {}",
            self.path.display(),
            self.offset,
            self.detail
        )
    }
}

/// What verify checked and found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlobVerifyReport {
    /// Pack files read.
    pub packs: u64,
    /// Entries read (blobs, chunks, chunk lists, and entries no longer indexed).
    pub entries: u64,
    /// Top-level blobs in the index.
    pub blobs: u64,
    /// Chunk lists checked for completeness.
    pub chunk_lists: u64,
    /// Pack bytes read.
    pub bytes: u64,
    /// Everything found wrong; empty when the store is sound.
    pub problems: Vec<BlobProblem>,
    /// Damaged entries that no longer matter: each holds exactly one entry
    /// whose blob the index finds intact elsewhere (a put of the same
    /// contents replaced the damaged copy, `BlobStore::put`'s heal). Nothing
    /// reads them; they are dead bytes that a gc rewriting their pack drops.
    pub superseded: Vec<BlobProblem>,
}

impl BlobVerifyReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl BlobStore {
    /// The blobs a damaged span from `off` to `span_end` may be a copy of,
    /// when the span is exactly one entry (its header decodes, bar the CRC,
    /// and its length ends the span): the name in its header, and the hash
    /// of its contents if they still decode (the damage may be in the
    /// header's name or CRC). Empty for a span whose header is damaged
    /// beyond that, or that runs over more than one entry: it may hold
    /// blobs the index no longer knows.
    fn sole_entry_claims(
        &self,
        file: &dyn crate::vfs::VfsFile,
        off: u64,
        span_end: u64,
    ) -> std::io::Result<Vec<BlobHash>> {
        if span_end.saturating_sub(off) < ENTRY_HEADER_LEN as u64 {
            return Ok(Vec::new());
        }
        let mut head = [0u8; ENTRY_HEADER_LEN];
        file.read_exact_at(&mut head, off)?;
        let Some(hdr) = EntryHeader::decode(&head)
            .ok()
            .filter(|h| off + h.entry_len() == span_end)
        else {
            return Ok(Vec::new());
        };
        let mut claims = vec![hdr.hash];
        if hdr.kind != EntryKind::ChunkList {
            // Bounded: decode checked the lengths against the entry limit.
            let mut payload = vec![0u8; hdr.stored_len as usize];
            file.read_exact_at(&mut payload, off + ENTRY_HEADER_LEN as u64)?;
            if let Ok(data) = decode_contents(&hdr, &payload, &|id| self.dict(id)) {
                claims.push(BlobHash::of(&data));
            }
        }
        Ok(claims)
    }

    /// Reads and checks every entry of every pack: its CRC, that it
    /// decompresses within its recorded size, that its contents hash to its
    /// name, that every chunk list is complete; and that every index entry
    /// points at a good entry. Damage is reported, not returned as an error;
    /// the error is for I/O failures only. A damaged entry whose blob has an
    /// intact copy the index points at is reported apart, as superseded.
    pub fn verify(&self) -> Result<BlobVerifyReport> {
        let mut report = BlobVerifyReport::default();
        let packs: Vec<_> = self.packs.read().values().cloned().collect();
        let active = self
            .writer
            .lock()
            .active
            .as_ref()
            .map(|a| (a.pack.id, a.len));
        let mut found = PackFindings::default();
        for p in &packs {
            report.packs += 1;
            let end = match active {
                Some((id, len)) if id == p.id => len,
                _ => p
                    .file
                    .len()
                    .map_err(|e| EngineError::io("size pack", &p.path, e))?,
            };
            report.bytes += end;
            self.verify_pack(p, end, &mut report, &mut found)?;
        }
        // The persisted index file: every bucket and row checked. A damaged
        // one is reported, and the store rebuilds its index from the packs.
        let damage = self.index.read().base().and_then(|b| b.entries().err());
        if let Some(e) = damage {
            report.problems.push(BlobProblem {
                hash: None,
                path: self.dir.join(super::index::INDEX_FILE),
                offset: 0,
                detail: format!("the index file is damaged ({e}); rebuilt from the packs"),
            });
        }
        let index: HashMap<BlobHash, Loc> = self.index_entries()?.into_iter().collect();
        settle_suspects(found.suspects, &index, &found.good, &mut report);
        check_chunk_lists(found.lists, &index, &found.good, &mut report);
        self.check_index_entries(&index, &found.good, &mut report);
        Ok(report)
    }

    /// Scans one pack up to `end`: reports its damaged spans and torn
    /// tail, and checks each entry, adding what it finds to `found`.
    fn verify_pack(
        &self,
        p: &PackFile,
        end: u64,
        report: &mut BlobVerifyReport,
        found: &mut PackFindings,
    ) -> Result<()> {
        let scan = scan_pack(p.file.as_ref(), PACK_HEADER_LEN as u64, end)
            .map_err(|e| EngineError::io("scan pack", &p.path, e))?;
        let problem = |hash, offset, detail: String| BlobProblem {
            hash,
            path: p.path.clone(),
            offset,
            detail,
        };
        for (off, detail) in &scan.damaged {
            let damaged = problem(None, *off, format!("damaged entry: {detail}"));
            // The span up to the next good entry (or the torn tail).
            let span_end = scan
                .entries
                .iter()
                .map(|e| e.offset)
                .find(|&o| o > *off)
                .or(scan.torn_at)
                .unwrap_or(end);
            let claims = self
                .sole_entry_claims(p.file.as_ref(), *off, span_end)
                .map_err(|e| EngineError::io("read pack", &p.path, e))?;
            if claims.is_empty() {
                report.problems.push(damaged);
            } else {
                found.suspects.push((claims, p.id, damaged));
            }
        }
        if let Some(off) = scan.torn_at {
            report.problems.push(problem(
                None,
                off,
                "partial entry at the end of the pack".into(),
            ));
        }
        for e in scan.entries {
            report.entries += 1;
            let h = e.header;
            if h.kind == EntryKind::ChunkList {
                if let Some(payload) = e.list_payload {
                    found
                        .lists
                        .push((h.hash, p.path.clone(), e.offset, h.raw_len, payload));
                }
                found.good.insert((p.id, e.offset));
                continue;
            }
            match self.check_entry(p, e.offset, end)? {
                Ok(()) => {
                    found.good.insert((p.id, e.offset));
                }
                Err(detail) => {
                    found.suspects.push((
                        vec![h.hash],
                        p.id,
                        problem(Some(h.hash), e.offset, detail),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Re-reads the blob or chunk entry at `offset` (the scan keeps only
    /// chunk-list payloads) and checks that it decodes to its name.
    fn check_entry(&self, p: &PackFile, offset: u64, end: u64) -> Result<Result<(), String>> {
        let read = read_entry_at(p.file.as_ref(), offset, end)
            .map_err(|err| EngineError::io("read pack", &p.path, err))?;
        Ok(match read {
            Ok((hdr, entry)) => self
                .decode_verified(&hdr, &entry[ENTRY_HEADER_LEN..])
                .map(|_| ()),
            Err(detail) => Err(detail),
        })
    }

    /// Reports every index entry that does not point at a good entry (once:
    /// not again when the pack scan already named it), counting the
    /// top-level blobs.
    fn check_index_entries(
        &self,
        index: &HashMap<BlobHash, Loc>,
        good: &HashSet<(PackId, u64)>,
        report: &mut BlobVerifyReport,
    ) {
        for (hash, l) in index.iter() {
            if l.kind.is_top_level() {
                report.blobs += 1;
            }
            if !good.contains(&(l.pack, l.offset)) {
                let path = self.dir.join(l.pack.file_name());
                let already = report
                    .problems
                    .iter()
                    .any(|p| p.hash == Some(*hash) && p.offset == l.offset && p.path == path);
                if !already {
                    report.problems.push(BlobProblem {
                        hash: Some(*hash),
                        path,
                        offset: l.offset,
                        detail: "the index points at an entry that is missing or damaged".into(),
                    });
                }
            }
        }
    }
}

/// A chunk list to check once every pack's good entries are known: its
/// hash, pack path, offset, raw length and payload.
type ListToCheck = (BlobHash, PathBuf, u64, u64, Vec<u8>);

/// A damaged entry whose blob may have an intact copy: the blobs it may
/// be a copy of, its pack, and the problem to report if none is intact.
type Suspect = (Vec<BlobHash>, PackId, BlobProblem);

/// What the pack scans found, decided on once every pack is read.
#[derive(Default)]
struct PackFindings {
    /// Good entries, by pack and offset.
    good: HashSet<(PackId, u64)>,
    /// Chunk lists to check for completeness.
    lists: Vec<ListToCheck>,
    /// Damaged entries whose blob may have an intact copy.
    suspects: Vec<Suspect>,
}

/// A damaged entry whose blob the index finds intact elsewhere is
/// superseded; any other is a problem.
fn settle_suspects(
    suspects: Vec<Suspect>,
    index: &HashMap<BlobHash, Loc>,
    good: &HashSet<(PackId, u64)>,
    report: &mut BlobVerifyReport,
) {
    for (claims, pack, found) in suspects {
        let intact_elsewhere = claims.into_iter().find(|h| {
            index.get(h).is_some_and(|l| {
                (l.pack, l.offset) != (pack, found.offset) && good.contains(&(l.pack, l.offset))
            })
        });
        match intact_elsewhere {
            Some(h) => report.superseded.push(BlobProblem {
                hash: Some(h),
                ..found
            }),
            None => report.problems.push(found),
        }
    }
}

/// Checks that every chunk each list names is indexed, good, and of the
/// length the list gives.
fn check_chunk_lists(
    lists: Vec<ListToCheck>,
    index: &HashMap<BlobHash, Loc>,
    good: &HashSet<(PackId, u64)>,
    report: &mut BlobVerifyReport,
) {
    for (hash, path, offset, raw_len, payload) in lists {
        report.chunk_lists += 1;
        match decode_chunk_list(&payload, raw_len) {
            Ok(refs) => {
                for (i, r) in refs.iter().enumerate() {
                    let ok = index
                        .get(&r.hash)
                        .is_some_and(|l| good.contains(&(l.pack, l.offset)) && l.raw_len == r.len);
                    if !ok {
                        report.problems.push(BlobProblem {
                            hash: Some(hash),
                            path: path.clone(),
                            offset,
                            detail: format!("chunk {i} ({}) is missing or damaged", r.hash),
                        });
                    }
                }
            }
            Err(e) => report.problems.push(BlobProblem {
                hash: Some(hash),
                path,
                offset,
                detail: e.to_string(),
            }),
        }
    }
}
