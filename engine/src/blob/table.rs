//! The index a blob store looks hashes up in: the persisted sorted file
//! ([`SortedIndex`], mapped, read a bucket at a time) plus the entries
//! found or appended since it was written, in memory. A process that puts
//! two blobs never decodes the whole file.

use std::collections::HashMap;

use cairn_codec::{BlobHash, CodecError};

use super::index::Loc;
use super::sorted::SortedIndex;

/// The persisted base and what was added since. An entry in `added`
/// overrides the base's entry for the same hash (it is newer: a copy made
/// by gc, or a replacement for a damaged entry).
#[derive(Debug, Default)]
pub(super) struct Index {
    base: Option<SortedIndex>,
    added: HashMap<BlobHash, Loc>,
}

impl Index {
    /// An index over `base` (if any) and `added`.
    pub(super) fn new(base: Option<SortedIndex>, added: HashMap<BlobHash, Loc>) -> Index {
        Index { base, added }
    }

    /// Where `h` is. An error means the base file is damaged: the caller
    /// rebuilds the index from the packs.
    pub(super) fn get(&self, h: &BlobHash) -> Result<Option<Loc>, CodecError> {
        if let Some(l) = self.added.get(h) {
            return Ok(Some(*l));
        }
        match &self.base {
            Some(b) => b.get(h),
            None => Ok(None),
        }
    }

    /// Adds or replaces the entry of `h`.
    pub(super) fn insert(&mut self, h: BlobHash, l: Loc) {
        self.added.insert(h, l);
    }

    /// Drops the added entry of `h` (a base entry of `h`, if any, shows
    /// again).
    pub(super) fn remove(&mut self, h: &BlobHash) {
        self.added.remove(h);
    }

    /// The added entries, giving them up.
    pub(super) fn into_added(self) -> HashMap<BlobHash, Loc> {
        self.added
    }

    /// True if a base file is in use.
    pub(super) fn has_base(&self) -> bool {
        self.base.is_some()
    }

    /// The base file in use, if any.
    pub(super) fn base(&self) -> Option<&SortedIndex> {
        self.base.as_ref()
    }

    /// Entries held in memory (not in the base file).
    pub(super) fn added_len(&self) -> usize {
        self.added.len()
    }

    /// Every entry: the base's (each bucket checked) and the added ones.
    pub(super) fn all(&self) -> Result<Vec<(BlobHash, Loc)>, CodecError> {
        let mut out: Vec<(BlobHash, Loc)> = match &self.base {
            Some(b) => b
                .entries()?
                .into_iter()
                .filter(|(h, _)| !self.added.contains_key(h))
                .collect(),
            None => Vec::new(),
        };
        out.extend(self.added.iter().map(|(h, l)| (*h, *l)));
        Ok(out)
    }

    /// Loads the base into memory and stops using the file, for callers
    /// that change or drop entries (garbage collection). Returns the map.
    pub(super) fn materialize(&mut self) -> Result<&mut HashMap<BlobHash, Loc>, CodecError> {
        if let Some(b) = &self.base {
            let entries = b.entries()?;
            self.added.reserve(entries.len());
            for (h, l) in entries {
                self.added.entry(h).or_insert(l);
            }
            self.base = None;
        }
        Ok(&mut self.added)
    }

    /// Switches to a newly written base, keeping only the added entries it
    /// does not hold (`keep` says which: those appended after it was taken).
    pub(super) fn rebase(&mut self, base: SortedIndex, keep: impl Fn(&Loc) -> bool) {
        self.added.retain(|_, l| keep(l));
        self.base = Some(base);
    }

    /// Replaces everything with `entries` (a rebuild from the packs) plus
    /// the added entries (newer than anything a scan finds).
    pub(super) fn replace_all(&mut self, mut entries: HashMap<BlobHash, Loc>) {
        entries.extend(self.added.drain());
        self.added = entries;
        self.base = None;
    }
}
