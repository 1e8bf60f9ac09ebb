//! Garbage collection: mark from the caller's roots, sweep packs.
//!
//! Order (so that a crash at any point loses no live blob):
//! 1. seal the active pack, so every pack considered is immutable;
//! 2. mark: the roots, plus the chunks of every live chunk list;
//! 3. choose the packs whose dead share passes the threshold (a pure
//!    function of the per-pack usage, [`choose`]), and with a budget for
//!    the bytes on disk, more packs holding dead bytes until it is met
//!    ([`choose_for_budget`]);
//! 4. free space before using any (a full disk must not stop the gc that
//!    would free it): delete the chosen packs that hold no live entry,
//!    and cut a chosen pack whose dead entries all follow its last live
//!    one (what a checkpoint that failed part way leaves) to that entry
//!    (a pack cut clean needs nothing more); then copy the live entries
//!    of the other chosen packs, checked, into the new active pack and
//!    point the in-memory index at the copies;
//! 5. fsync the new pack and write the new index (durable, no longer
//!    listing the chosen packs);
//! 6. only then delete the chosen packs and fsync the directory.
//!
//! A crash before 5 leaves the old index and old packs (the copies are
//! duplicates found by the tail scan); a crash between 5 and 6 leaves old
//! packs the index does not list, which open scans like any other pack
//! (their dead entries come back until the next gc; nothing is lost).
//! Step 4's deletions and cuts change packs before the index stops naming
//! what they remove:
//! a crash there leaves an index that does not match the packs (a pack
//! missing, or shorter than it covered), which the next open rebuilds from
//! the packs; only dead entries were removed, so nothing is lost.
//! A compacting gc ([`GcOptions::compact`]) and one that rewrites packs to
//! meet a budget take this same path: only the choice of packs differs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cairn_codec::BlobHash;

use super::chunking::decode_chunk_list;
use super::index::Loc;
use super::options::GcOptions;
use super::pack::{EntryHeader, EntryKind, PackId, ENTRY_HEADER_LEN, PACK_HEADER_LEN};
use super::scan::{read_entry_at, scan_pack};
use super::{BlobStore, PackFile};
use crate::{EngineError, Result};

/// What one garbage collection did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GcReport {
    /// Blobs and chunks marked live.
    pub marked: u64,
    /// Roots that are not in the store (reported, not an error).
    pub missing_roots: Vec<BlobHash>,
    /// Packs examined.
    pub packs_scanned: u64,
    /// Packs whose live entries were copied and which were then deleted
    /// (including packs with no live entry, deleted without copying, and
    /// packs cut after their last live entry when only dead ones followed
    /// it, which needs no copy either).
    pub packs_rewritten: u64,
    /// Live entries copied to a new pack.
    pub entries_copied: u64,
    /// Dead entries dropped with the rewritten packs (stale copies of live
    /// blobs that a gc killed part way left behind included).
    pub entries_dropped: u64,
    /// Blobs and chunks that left the store: index entries of the rewritten
    /// packs not copied elsewhere (a stale copy is not one: the index names
    /// the blob's live copy in another pack).
    pub blobs_removed: u64,
    /// Pack bytes before.
    pub bytes_before: u64,
    /// Pack bytes after.
    pub bytes_after: u64,
    /// Packs left alone because a live entry in them is damaged (it cannot
    /// be copied; deleting the pack would lose what is left of it).
    pub problems: Vec<String>,
    /// Of `packs_rewritten`, those rewritten only to meet
    /// [`GcOptions::max_stored_bytes`] (their dead share was at or below
    /// the threshold).
    pub packs_rewritten_for_budget: u64,
    /// What is left in packs not rewritten because their dead share is at
    /// or below `rewrite_threshold` (and no budget needed them): their
    /// unreferenced blobs stay readable until a gc rewrites the pack.
    pub left_below_threshold: LeftBehind,
    /// What is left in packs kept because a live entry in them is damaged
    /// (each named in `problems`).
    pub left_in_kept_packs: LeftBehind,
}

impl GcReport {
    /// Everything dead left in place, whatever the reason.
    pub fn left(&self) -> LeftBehind {
        self.left_below_threshold + self.left_in_kept_packs
    }
}

impl std::ops::Add for LeftBehind {
    type Output = LeftBehind;

    /// What two reasons left, together.
    fn add(self, o: LeftBehind) -> LeftBehind {
        LeftBehind {
            blobs: self.blobs + o.blobs,
            dead_bytes: self.dead_bytes + o.dead_bytes,
        }
    }
}

/// Dead data a gc left in packs it did not rewrite.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeftBehind {
    /// Unreferenced blobs and chunks the index still lists there: they stay
    /// readable by hash until their pack is rewritten.
    pub blobs: u64,
    /// The bytes a rewrite of those packs would free: entries of those
    /// blobs, and stale copies of blobs whose live copy is elsewhere.
    pub dead_bytes: u64,
}

/// How full of live data one sealed pack is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PackUsage {
    /// The pack.
    pub id: PackId,
    /// Bytes after the header.
    pub total_bytes: u64,
    /// Bytes of live entries.
    pub live_bytes: u64,
}

impl PackUsage {
    /// Bytes after the header that are not live entries.
    pub fn dead_bytes(&self) -> u64 {
        self.total_bytes - self.live_bytes.min(self.total_bytes)
    }
}

/// The policy: which packs to rewrite. A pack is rewritten when the share
/// of its bytes that is dead is above `threshold`, or when it holds no live
/// entry at all (then it is simply deleted). With `threshold` 0.0, every
/// pack holding a dead byte is rewritten. Pure.
pub fn choose(usage: &[PackUsage], threshold: f64) -> Vec<PackId> {
    usage
        .iter()
        .filter(|u| {
            u.live_bytes == 0
                || (u.total_bytes > 0 && u.dead_bytes() as f64 / u.total_bytes as f64 > threshold)
        })
        .map(|u| u.id)
        .collect()
}

/// The packs to rewrite besides `chosen` so that the packs, `stored_bytes`
/// on disk now, fit in `max_bytes`: packs holding dead bytes, the most dead
/// first, until the store less the dead bytes of every pack chosen fits,
/// or no such pack is left (then the store stays over, by as little as
/// rewriting can make it). Pack headers are left out of the count (a
/// rewritten pack's goes, the pack its live entries move to has one), so
/// the expected size is within a header of what the rewrite leaves. Pure.
pub fn choose_for_budget(
    usage: &[PackUsage],
    chosen: &[PackId],
    stored_bytes: u64,
    max_bytes: u64,
) -> Vec<PackId> {
    let chosen: HashSet<PackId> = chosen.iter().copied().collect();
    let mut expected = usage
        .iter()
        .filter(|u| chosen.contains(&u.id))
        .fold(stored_bytes, |left, u| left.saturating_sub(u.dead_bytes()));
    let mut more: Vec<&PackUsage> = usage
        .iter()
        .filter(|u| !chosen.contains(&u.id) && u.dead_bytes() > 0)
        .collect();
    more.sort_by_key(|u| (std::cmp::Reverse(u.dead_bytes()), u.id));
    let mut out = Vec::new();
    for u in more {
        if expected <= max_bytes {
            break;
        }
        expected = expected.saturating_sub(u.dead_bytes());
        out.push(u.id);
    }
    out.sort_unstable();
    out
}

/// What gc's mark step found.
#[derive(Default)]
struct Marked {
    /// Every live blob: the roots found and the chunks of live chunk lists.
    live: HashSet<BlobHash>,
    /// Packs holding a live chunk list that cannot be read: kept whole.
    damaged_list_packs: HashSet<PackId>,
}

/// What freeing space first did to the chosen packs.
struct FreedFirst {
    /// A pack was deleted or cut: the directory was fsynced and the index
    /// must be written.
    freed: bool,
    /// Packs done with: deleted, or cut and left with nothing dead.
    done: HashSet<PackId>,
    /// The chosen packs whose live entries are still to be copied out.
    to_copy: Vec<PackId>,
}

impl BlobStore {
    /// Mark and sweep. `live` holds the roots: every top-level blob still
    /// referenced (the chunks of live chunk lists are kept with them).
    /// Packs whose dead share is above `opts.rewrite_threshold` are
    /// rewritten: live entries copied, the new pack and index made durable,
    /// then the old pack deleted; with `opts.max_stored_bytes`, more packs
    /// holding dead bytes are rewritten while the store would be over it.
    /// Dead blobs in packs not rewritten stay readable until their pack is
    /// rewritten by a later gc; the report counts them
    /// ([`GcReport::left_below_threshold`]).
    ///
    /// Puts wait while gc runs; a blob put earlier that is not in `live` (or
    /// reachable from it) may be removed, so the caller passes every blob a
    /// log record or a pending write still refers to.
    pub fn gc(&self, live: &HashSet<BlobHash>, opts: GcOptions) -> Result<GcReport> {
        self.check_writable()?;
        let _gate = self.gc_gate.write();
        let mut report = GcReport::default();
        // 1. Seal the active pack (after a sync, so nothing is pending).
        self.sync()?;
        self.writer.lock().active = None;

        // 2. Mark.
        let marked = self.mark(live, &mut report)?;

        // 3. Usage per pack, and the packs to rewrite.
        let packs: Vec<Arc<PackFile>> = self.packs.read().values().cloned().collect();
        let mut usage = self.pack_usage(&packs, &marked.live, &mut report)?;
        let (chosen, for_budget) = self.choose_packs(&usage, &marked, opts, report.bytes_before);
        let attempted: HashSet<PackId> = chosen.iter().copied().collect();

        // 4. Free space before using any, then copy live entries out of
        // the other chosen packs.
        let first = self.free_space_first(chosen, &packs, &mut usage, &marked.live, &mut report)?;
        let mut retired = Vec::new();
        for id in &first.to_copy {
            let Some(pack) = packs.iter().find(|p| p.id == *id).cloned() else {
                continue;
            };
            if self.rewrite_pack(&pack, &marked.live, &mut report)? {
                retired.push(pack);
            }
        }
        let retired_ids: HashSet<PackId> = retired
            .iter()
            .map(|p| p.id)
            .chain(first.done.iter().copied())
            .collect();
        self.count_left_behind(&usage, &retired_ids, &attempted, &marked, &mut report)?;
        report.packs_rewritten_for_budget = for_budget.intersection(&retired_ids).count() as u64;
        if retired.is_empty() {
            if first.freed {
                // The index must stop naming what was deleted or cut off.
                self.persist_index()?;
                report.bytes_after = self.stats().stored_bytes;
            } else {
                report.bytes_after = report.bytes_before;
            }
            return Ok(report);
        }
        // 5 and 6.
        self.retire_packs(&retired, &mut report)?;
        report.bytes_after = self.stats().stored_bytes;
        Ok(report)
    }

    /// Step 2 of [`BlobStore::gc`]: the roots found, plus the chunks of
    /// every live chunk list. A root not found is reported missing; a live
    /// chunk list that cannot be read is reported and its pack kept whole.
    fn mark(&self, live: &HashSet<BlobHash>, report: &mut GcReport) -> Result<Marked> {
        let mut marked = Marked::default();
        for h in live {
            let Some(loc) = self.find(h) else {
                report.missing_roots.push(*h);
                continue;
            };
            marked.live.insert(*h);
            if loc.kind == EntryKind::ChunkList {
                match self.read_list(h, &loc) {
                    Ok((_, refs)) => marked.live.extend(refs.iter().map(|r| r.hash)),
                    Err(e @ EngineError::BlobIntegrity { .. }) => {
                        report.problems.push(format!("{e}; its pack is kept"));
                        marked.damaged_list_packs.insert(loc.pack);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        report.marked = marked.live.len() as u64;
        Ok(marked)
    }

    /// Usage per pack (sorted by id), from the index: the entries it points
    /// at are the only ones that can be live. Counts the bytes before gc.
    fn pack_usage(
        &self,
        packs: &[Arc<PackFile>],
        marked: &HashSet<BlobHash>,
        report: &mut GcReport,
    ) -> Result<Vec<PackUsage>> {
        let mut usage: HashMap<PackId, PackUsage> = HashMap::new();
        for p in packs {
            let len = p
                .file
                .len()
                .map_err(|e| EngineError::io("size pack", &p.path, e))?;
            report.bytes_before += len;
            report.packs_scanned += 1;
            usage.insert(
                p.id,
                PackUsage {
                    id: p.id,
                    total_bytes: len.saturating_sub(PACK_HEADER_LEN as u64),
                    live_bytes: 0,
                },
            );
        }
        self.with_index_map(|index| {
            for (h, l) in index.iter() {
                if marked.contains(h) {
                    if let Some(u) = usage.get_mut(&l.pack) {
                        u.live_bytes += l.entry_len();
                    }
                }
            }
        })?;
        let mut usage: Vec<PackUsage> = usage.into_values().collect();
        usage.sort_by_key(|u| u.id);
        Ok(usage)
    }

    /// Step 3 of [`BlobStore::gc`]: the packs to rewrite (sorted), and
    /// which of them were added to meet the budget.
    fn choose_packs(
        &self,
        usage: &[PackUsage],
        marked: &Marked,
        opts: GcOptions,
        bytes_before: u64,
    ) -> (Vec<PackId>, HashSet<PackId>) {
        let damaged = &marked.damaged_list_packs;
        let mut chosen: Vec<PackId> = choose(usage, opts.rewrite_threshold)
            .into_iter()
            .filter(|id| !damaged.contains(id))
            .collect();
        let mut for_budget: HashSet<PackId> = HashSet::new();
        if let Some(max) = opts.max_stored_bytes {
            let open: Vec<PackUsage> = usage
                .iter()
                .filter(|u| !damaged.contains(&u.id))
                .copied()
                .collect();
            for_budget.extend(choose_for_budget(&open, &chosen, bytes_before, max));
            chosen.extend(for_budget.iter().copied());
            chosen.sort_unstable();
        }
        self.close_over_dead_lists(&mut chosen, &marked.live, damaged);
        (chosen, for_budget)
    }

    /// Step 4 of [`BlobStore::gc`], its first half: free space before
    /// using any. On a full disk, copying live entries (or writing the
    /// index) would fail before anything is freed. Chosen packs with no
    /// live entry are deleted outright, and a pack whose dead entries are
    /// all at its end (what a checkpoint that failed part way leaves) is
    /// cut to its last live entry.
    fn free_space_first(
        &self,
        chosen: Vec<PackId>,
        packs: &[Arc<PackFile>],
        usage: &mut [PackUsage],
        marked: &HashSet<BlobHash>,
        report: &mut GcReport,
    ) -> Result<FreedFirst> {
        let mut first = FreedFirst {
            freed: false,
            done: HashSet::new(),
            to_copy: Vec::with_capacity(chosen.len()),
        };
        for id in chosen {
            let Some(pack) = packs.iter().find(|p| p.id == id).cloned() else {
                continue;
            };
            let live = usage
                .iter()
                .find(|u| u.id == id)
                .map_or(0, |u| u.live_bytes);
            if live == 0 {
                self.delete_dead_pack(&pack, report)?;
                first.freed = true;
                first.done.insert(id);
            } else if let Some(cut_to) = self.cut_dead_tail(&pack, marked, report)? {
                first.freed = true;
                if let Some(u) = usage.iter_mut().find(|u| u.id == id) {
                    u.total_bytes = cut_to.saturating_sub(PACK_HEADER_LEN as u64);
                    if u.dead_bytes() > 0 {
                        first.to_copy.push(id); // dead entries between live ones too
                    } else {
                        report.packs_rewritten += 1;
                        first.done.insert(id);
                    }
                }
            } else {
                first.to_copy.push(id);
            }
        }
        if first.freed {
            self.vfs
                .sync_dir(&self.dir)
                .map_err(|e| EngineError::io("fsync directory", &self.dir, e))?;
        }
        Ok(first)
    }

    /// Counts what stays dead in the packs not rewritten, and why: kept
    /// though chosen (or holding a damaged live list), or below the
    /// threshold.
    fn count_left_behind(
        &self,
        usage: &[PackUsage],
        retired_ids: &HashSet<PackId>,
        attempted: &HashSet<PackId>,
        marked: &Marked,
        report: &mut GcReport,
    ) -> Result<()> {
        let mut unreferenced: HashMap<PackId, u64> = HashMap::new();
        self.with_index_map(|index| {
            for (h, l) in index.iter() {
                if !marked.live.contains(h) {
                    *unreferenced.entry(l.pack).or_default() += 1;
                }
            }
        })?;
        for u in usage.iter().filter(|u| !retired_ids.contains(&u.id)) {
            let left = if attempted.contains(&u.id) || marked.damaged_list_packs.contains(&u.id) {
                &mut report.left_in_kept_packs
            } else {
                &mut report.left_below_threshold
            };
            left.blobs += unreferenced.get(&u.id).copied().unwrap_or(0);
            left.dead_bytes += u.dead_bytes();
        }
        Ok(())
    }

    /// Steps 5 and 6 of [`BlobStore::gc`]: forgets the retired packs and
    /// every index entry still in them (dead), makes the new pack(s) and
    /// index durable, and only then deletes the old packs.
    fn retire_packs(&self, retired: &[Arc<PackFile>], report: &mut GcReport) -> Result<()> {
        let ids: HashSet<PackId> = retired.iter().map(|p| p.id).collect();
        report.blobs_removed = self.with_index_map(|index| {
            let before = index.len();
            index.retain(|_, l| !ids.contains(&l.pack));
            (before - index.len()) as u64
        })?;
        {
            let mut packs = self.packs.write();
            for id in &ids {
                packs.remove(id);
            }
        }
        // 5. New pack(s) and index durable.
        self.persist_index()?;
        // 6. Delete the old packs.
        for p in retired {
            self.vfs
                .remove_file(&p.path)
                .map_err(|e| EngineError::io("remove pack", &p.path, e))?;
            report.packs_rewritten += 1;
        }
        self.vfs
            .sync_dir(&self.dir)
            .map_err(|e| EngineError::io("fsync directory", &self.dir, e))
    }

    /// Deletes a pack that holds no live entry (step 4 of [`BlobStore::gc`]),
    /// before the index stops naming it: a crash in between leaves an
    /// index that does not match the packs, which the next open rebuilds
    /// from the packs (the entries it named were all dead).
    fn delete_dead_pack(&self, pack: &Arc<PackFile>, report: &mut GcReport) -> Result<()> {
        let dropped = self.with_index_map(|index| {
            let before = index.len();
            index.retain(|_, l| l.pack != pack.id);
            (before - index.len()) as u64
        })?;
        self.packs.write().remove(&pack.id);
        self.vfs
            .remove_file(&pack.path)
            .map_err(|e| EngineError::io("remove pack", &pack.path, e))?;
        report.blobs_removed += dropped;
        report.entries_dropped += dropped;
        report.packs_rewritten += 1;
        Ok(())
    }

    /// Cuts `pack` (sealed) after its last live entry when dead entries
    /// follow it; the length it was cut to, if it cut. Needs no free space. The index entries
    /// past the cut (all dead) are forgotten; the index written at the end
    /// of the gc stops naming them, and a crash before that leaves an index
    /// that no longer matches the pack, which the next open rebuilds.
    fn cut_dead_tail(
        &self,
        pack: &Arc<PackFile>,
        marked: &HashSet<BlobHash>,
        report: &mut GcReport,
    ) -> Result<Option<u64>> {
        let len = pack
            .file
            .len()
            .map_err(|e| EngineError::io("size pack", &pack.path, e))?;
        let live_end = self
            .with_index_map(|index| {
                index
                    .iter()
                    .filter(|(h, l)| l.pack == pack.id && marked.contains(*h))
                    .map(|(_, l)| l.offset + l.entry_len())
                    .max()
            })?
            .unwrap_or(PACK_HEADER_LEN as u64)
            .max(PACK_HEADER_LEN as u64);
        if live_end >= len {
            return Ok(None);
        }
        pack.file
            .set_len(live_end)
            .map_err(|e| EngineError::io("cut dead tail of pack", &pack.path, e))?;
        pack.file
            .sync_data()
            .map_err(|e| EngineError::io("fsync pack", &pack.path, e))?;
        let dropped = self.with_index_map(|index| {
            let before = index.len();
            index.retain(|_, l| !(l.pack == pack.id && l.offset >= live_end));
            (before - index.len()) as u64
        })?;
        report.blobs_removed += dropped;
        Ok(Some(live_end))
    }

    /// A dead chunk list must not outlive its dead chunks: if it stayed in a
    /// pack that is not rewritten while a chunk it names goes with a
    /// rewritten pack, the store would hold a blob that can no longer be
    /// read, and `verify` would report damage in a healthy store. So the
    /// pack of such a list is rewritten too (dropping the list), repeated
    /// until no more packs are added.
    fn close_over_dead_lists(
        &self,
        chosen: &mut Vec<PackId>,
        marked: &HashSet<BlobHash>,
        damaged_list_packs: &HashSet<PackId>,
    ) {
        let dead_lists: Vec<(BlobHash, Loc)> = self
            .index_entries()
            .unwrap_or_default()
            .into_iter()
            .filter(|(h, l)| l.kind == EntryKind::ChunkList && !marked.contains(h))
            .collect();
        if dead_lists.is_empty() {
            return;
        }
        // The chunks each dead list names (a list that cannot be read is
        // left alone: its pack is not forced into the rewrite).
        let named: Vec<(PackId, Vec<BlobHash>)> = dead_lists
            .iter()
            .filter_map(|(h, l)| {
                let (_, refs) = self.read_list(h, l).ok()?;
                Some((l.pack, refs.iter().map(|r| r.hash).collect()))
            })
            .collect();
        loop {
            let set: HashSet<PackId> = chosen.iter().copied().collect();
            let more: HashSet<PackId> = named
                .iter()
                .filter(|(pack, _)| !set.contains(pack) && !damaged_list_packs.contains(pack))
                .filter(|(_, chunks)| {
                    chunks.iter().any(|c| {
                        !marked.contains(c) && self.find(c).is_some_and(|l| set.contains(&l.pack))
                    })
                })
                .map(|(pack, _)| *pack)
                .collect();
            if more.is_empty() {
                return;
            }
            chosen.extend(more);
            chosen.sort_unstable();
        }
    }

    /// Reads the entry at `offset` of `pack` and checks that its payload
    /// decodes (a blob or chunk to its hash, a chunk list as a list); the
    /// entry, or what is wrong with it.
    fn read_checked_entry(
        &self,
        pack: &PackFile,
        offset: u64,
        end: u64,
    ) -> Result<Result<(EntryHeader, Vec<u8>), String>> {
        let read = read_entry_at(pack.file.as_ref(), offset, end)
            .map_err(|err| EngineError::io("read pack", &pack.path, err))?;
        Ok(read.and_then(|(hdr, entry)| {
            if hdr.kind != EntryKind::ChunkList {
                self.decode_verified(&hdr, &entry[ENTRY_HEADER_LEN..])?;
            } else {
                decode_chunk_list(&entry[ENTRY_HEADER_LEN..], hdr.raw_len)
                    .map_err(|err| err.to_string())?;
            }
            Ok((hdr, entry))
        }))
    }

    /// Copies the live entries of `pack` into the active pack, checking
    /// each first. `Ok(false)` if a live entry is damaged: the pack is kept.
    fn rewrite_pack(
        &self,
        pack: &Arc<PackFile>,
        marked: &HashSet<BlobHash>,
        report: &mut GcReport,
    ) -> Result<bool> {
        let end = pack
            .file
            .len()
            .map_err(|e| EngineError::io("size pack", &pack.path, e))?;
        let scan = scan_pack(pack.file.as_ref(), PACK_HEADER_LEN as u64, end)
            .map_err(|e| EngineError::io("scan pack", &pack.path, e))?;
        // Live entries: marked, and the one the index points at.
        let mut copies = Vec::new();
        let mut dropped = 0u64;
        for e in &scan.entries {
            let is_live = marked.contains(&e.header.hash)
                && self
                    .find(&e.header.hash)
                    .is_some_and(|l| l.pack == pack.id && l.offset == e.offset);
            if !is_live {
                dropped += 1;
                continue;
            }
            match self.read_checked_entry(pack, e.offset, end)? {
                Ok((hdr, entry)) => copies.push((hdr.hash, entry)),
                Err(detail) => {
                    report.problems.push(format!(
                        "{} kept: live blob {} at offset {} is damaged: {detail}",
                        pack.path.display(),
                        e.header.hash,
                        e.offset
                    ));
                    return Ok(false);
                }
            }
        }
        // Every indexed entry of this pack must have been seen, or the pack
        // holds something the scan could not read: keep it.
        let indexed_live = self.with_index_map(|index| {
            index
                .iter()
                .filter(|(h, l)| l.pack == pack.id && marked.contains(h))
                .count()
        })?;
        if indexed_live != copies.len() {
            report.problems.push(format!(
                "{} kept: {} live entries indexed there, {} readable",
                pack.path.display(),
                indexed_live,
                copies.len()
            ));
            return Ok(false);
        }
        for (hash, entry) in copies {
            self.append(hash, entry, true)?;
            report.entries_copied += 1;
        }
        report.entries_dropped += dropped;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn choose_picks_packs_past_the_threshold_and_empty_ones() {
        let u = |id, total, live| PackUsage {
            id: PackId(id),
            total_bytes: total,
            live_bytes: live,
        };
        let usage = [
            u(1, 100, 100),
            u(2, 100, 71),
            u(3, 100, 69),
            u(4, 100, 0),
            u(5, 0, 0),
        ];
        assert_eq!(choose(&usage, 0.3), vec![PackId(3), PackId(4), PackId(5)]);
        assert_eq!(
            choose(&usage, 0.0),
            vec![PackId(2), PackId(3), PackId(4), PackId(5)]
        );
    }

    /// Under a budget for the bytes on disk, packs holding dead bytes are
    /// added, the most dead first, only until the store is expected to
    /// fit; a pack with nothing dead never is; with no way to fit, every
    /// pack holding dead bytes is added.
    #[test]
    fn choose_for_budget_adds_the_most_dead_packs_until_the_store_fits() {
        let u = |id, total, live| PackUsage {
            id: PackId(id),
            total_bytes: total,
            live_bytes: live,
        };
        // Dead bytes: 1: 10, 2: 40, 3: 0, 4: 25, 5: 50 (chosen already).
        let usage = [
            u(1, 100, 90),
            u(2, 100, 60),
            u(3, 100, 100),
            u(4, 100, 75),
            u(5, 100, 50),
        ];
        let chosen = [PackId(5)];
        // 500 on disk, 450 once pack 5 is rewritten.
        assert!(choose_for_budget(&usage, &chosen, 500, 450).is_empty());
        assert_eq!(
            choose_for_budget(&usage, &chosen, 500, 449),
            vec![PackId(2)]
        );
        assert_eq!(
            choose_for_budget(&usage, &chosen, 500, 410),
            vec![PackId(2)]
        );
        assert_eq!(
            choose_for_budget(&usage, &chosen, 500, 409),
            vec![PackId(2), PackId(4)]
        );
        assert_eq!(
            choose_for_budget(&usage, &chosen, 500, 0),
            vec![PackId(1), PackId(2), PackId(4)],
            "over budget whatever is rewritten: every pack with dead bytes"
        );
        assert!(choose_for_budget(&usage, &[], 500, 500).is_empty());
    }
}
