//! The stat cache's delta file (`stat-cache.delta`): what changed since
//! the whole cache file (`stat-cache.bin`, the base) was last written, so
//! a checkpoint that changed a few paths writes a few hundred bytes, not
//! the whole cache (14 MB at 100,000 files).
//!
//! It is cumulative: each save rewrites it with every change since the
//! base (one in-place record, see [`crate::in_place`]), and once it holds
//! more than [`max_delta_paths`] paths the whole cache is written again
//! instead and the delta removed. It names its base by the base file's
//! checksum: a delta of another base (the base rewritten since, by a gc
//! or a save that the delta's removal did not follow) is ignored, and so
//! is a damaged or half-written one. Either way the cache loads as the
//! base alone: older, never wrong (its stat data names the contents it
//! was read with), so the next scan only re-reads more.
//!
//! Body layout (little-endian; the in-place frame adds its length and
//! checksum): magic `CSD1` | base checksum (16 bytes: the last 16 bytes
//! of the base file) | clock_ns i64 | root flag u8 [+ 32-byte hash] |
//! path count u32 | per path, in path order: path length u32, path, flag
//! u8 (0: gone; 1: an entry as the base file encodes one follows) |
//! directory count u32 | per directory, in path order: path length u32,
//! path, flag u8 (0: gone; 1: node hash 32, size u64).

use std::collections::BTreeMap;

use cairn_codec::BlobHash;

use super::{
    put_cached, put_root, put_text, Cached, Changed, ChangedPath, Cur, StatCache,
    STAT_CACHE_SUM_BYTES,
};
use std::borrow::Cow;

/// The first bytes of a delta body.
const DELTA_MAGIC: &[u8; 4] = b"CSD1";

/// A delta never needs to be rewritten whole below this many paths: a
/// few hundred KiB at most, a fraction of a millisecond to write.
pub(crate) const DELTA_MIN_PATHS: usize = 4096;
/// Nor ever holds more than this many (a few MiB): past it, writing the
/// whole cache once is cheaper than rewriting a large delta every time,
/// and the record stays well under [`crate::in_place::MAX_BODY_BYTES`].
pub(crate) const DELTA_MAX_PATHS: usize = 65_536;

/// The most paths a delta over a base of `base_paths` paths holds before
/// the whole cache is written again: an eighth of the base (so loading
/// the base and the delta never costs much more than the base alone),
/// within [`DELTA_MIN_PATHS`] and [`DELTA_MAX_PATHS`].
pub(crate) fn max_delta_paths(base_paths: usize) -> usize {
    (base_paths / 8).clamp(DELTA_MIN_PATHS, DELTA_MAX_PATHS)
}

/// The changes from a base cache file to the cache now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    /// The checksum that ends the base file this delta applies to.
    pub base_sum: [u8; STAT_CACHE_SUM_BYTES],
    /// The cache's clock and root now (they replace the base's).
    pub clock_ns: i64,
    pub root: Option<BlobHash>,
    /// Paths whose cached entry differs from the base's: the entry now,
    /// or `None` for a path the base has and the cache no longer does.
    pub entries: BTreeMap<String, Option<Cached>>,
    /// Directories whose node differs from the base's, likewise.
    pub dirs: BTreeMap<String, Option<(BlobHash, u64)>>,
}

impl Delta {
    /// An empty delta over the base whose checksum is `base_sum`.
    pub(crate) fn over(base_sum: [u8; STAT_CACHE_SUM_BYTES]) -> Delta {
        Delta {
            base_sum,
            ..Delta::default()
        }
    }

    /// Paths and directories it names.
    pub(crate) fn len(&self) -> usize {
        self.entries.len() + self.dirs.len()
    }

    /// Adds the changes from `prev` to `now` (both whole caches; `prev`
    /// is this delta applied to its base), so that the delta then takes
    /// the base to `now`. One merge pass over the two sorted maps.
    pub(crate) fn add_changes(&mut self, prev: &StatCache, now: &StatCache) {
        self.clock_ns = now.clock_ns;
        self.root = now.root;
        let mut old = prev.entries.iter().peekable();
        for (p, c) in now.entries.iter() {
            while let Some((op, _)) = old.next_if(|(op, _)| *op < p) {
                self.entries.insert(op.to_string(), None);
            }
            match old.next_if(|(op, _)| *op == p) {
                Some((_, oc)) if oc == c => {}
                _ => {
                    self.entries.insert(p.to_string(), Some(c));
                }
            }
        }
        for (op, _) in old {
            self.entries.insert(op.to_string(), None);
        }
        self.add_dir_changes(prev, now);
    }

    /// Adds the changes from `changed.from` to `now` that a full scan
    /// listed as it compared the two ([`Changed`]), so that the delta then
    /// takes the base to `now`, as [`Delta::add_changes`] would, without
    /// comparing every path again (at 100,000 paths, a pass over two runs
    /// of 100,000 for a one-file change).
    pub(crate) fn add_listed(&mut self, changed: &Changed, now: &StatCache) {
        self.clock_ns = now.clock_ns;
        self.root = now.root;
        for ch in &changed.entries {
            match ch {
                ChangedPath::Now(i) => {
                    if let Some((p, c)) = now.entries.at(*i) {
                        self.entries.insert(p.to_string(), Some(c));
                    }
                }
                ChangedPath::Gone(p) => {
                    self.entries.insert(p.clone(), None);
                }
            }
        }
        self.add_dir_changes(&changed.from, now);
    }

    /// The directory nodes that differ from `prev` to `now` (a few per
    /// hundred paths: compared whole).
    fn add_dir_changes(&mut self, prev: &StatCache, now: &StatCache) {
        let before: BTreeMap<&str, (BlobHash, u64)> = prev
            .dirs
            .iter()
            .map(|(d, h, s)| (d.as_str(), (*h, *s)))
            .collect();
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (d, h, s) in &now.dirs {
            seen.insert(d.as_str());
            if before.get(d.as_str()) != Some(&(*h, *s)) {
                self.dirs.insert(d.clone(), Some((*h, *s)));
            }
        }
        for d in before.keys().filter(|d| !seen.contains(*d)) {
            self.dirs.insert((*d).to_string(), None);
        }
    }

    /// Applies the delta to `base` (the cache its base file holds).
    pub(crate) fn apply(&self, base: &mut StatCache) {
        base.clock_ns = self.clock_ns;
        base.root = self.root;
        // A path the base has that changed is set in place; only paths
        // added or gone need the whole run rebuilt (one merge pass).
        let mut reshape = false;
        for (p, c) in &self.entries {
            match (base.entries.get_mut(p), c) {
                (Some(now), Some(c)) => *now = *c,
                (None, None) => {}
                _ => reshape = true,
            }
        }
        if reshape {
            base.entries.merge(
                self.entries
                    .iter()
                    .map(|(p, c)| (Cow::Borrowed(p.as_str()), *c)),
            );
        }
        if !self.dirs.is_empty() {
            let mut dirs: BTreeMap<String, (BlobHash, u64)> = std::mem::take(&mut base.dirs)
                .into_iter()
                .map(|(d, h, s)| (d, (h, s)))
                .collect();
            for (d, v) in &self.dirs {
                match v {
                    Some(v) => {
                        dirs.insert(d.clone(), *v);
                    }
                    None => {
                        dirs.remove(d);
                    }
                }
            }
            base.dirs = dirs.into_iter().map(|(d, (h, s))| (d, h, s)).collect();
        }
    }

    /// The body of the delta record.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.entries.len() * 130 + self.dirs.len() * 90);
        out.extend_from_slice(DELTA_MAGIC);
        out.extend_from_slice(&self.base_sum);
        out.extend_from_slice(&self.clock_ns.to_le_bytes());
        put_root(&mut out, &self.root);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (p, c) in &self.entries {
            put_text(&mut out, p);
            match c {
                Some(c) => {
                    out.push(1);
                    put_cached(&mut out, c);
                }
                None => out.push(0),
            }
        }
        out.extend_from_slice(&(self.dirs.len() as u32).to_le_bytes());
        for (d, v) in &self.dirs {
            put_text(&mut out, d);
            match v {
                Some((h, s)) => {
                    out.push(1);
                    out.extend_from_slice(h.as_bytes());
                    out.extend_from_slice(&s.to_le_bytes());
                }
                None => out.push(0),
            }
        }
        out
    }

    /// Decodes a delta body; `None` if it is not one (another format,
    /// cut short, paths out of order or repeated, bytes left over).
    pub(crate) fn decode(b: &[u8]) -> Option<Delta> {
        let mut r = Cur { b, pos: 0 };
        if r.take(4)? != DELTA_MAGIC {
            return None;
        }
        let base_sum: [u8; STAT_CACHE_SUM_BYTES] = r.take(STAT_CACHE_SUM_BYTES)?.try_into().ok()?;
        let clock_ns = r.i64()?;
        let root = r.root()?;
        let mut d = Delta {
            base_sum,
            clock_ns,
            root,
            ..Delta::default()
        };
        let mut last: Option<String> = None;
        for _ in 0..r.u32()? {
            let p = r.text()?;
            let c = match r.u8()? {
                0 => None,
                1 => Some(r.cached()?),
                _ => return None,
            };
            if last.as_ref().is_some_and(|l| *l >= p) {
                return None;
            }
            last = Some(p.clone());
            d.entries.insert(p, c);
        }
        let mut last: Option<String> = None;
        for _ in 0..r.u32()? {
            let p = r.text()?;
            let v = match r.u8()? {
                0 => None,
                1 => Some((r.hash()?, r.u64()?)),
                _ => return None,
            };
            if last.as_ref().is_some_and(|l| *l >= p) {
                return None;
            }
            last = Some(p.clone());
            d.dirs.insert(p, v);
        }
        (r.pos == b.len()).then_some(d)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::tests::{arb_cache, same, sample};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_delta_round_trips_and_damage_is_refused() {
        let base = sample();
        let mut now = sample();
        now.clock_ns += 1;
        now.entries.remove("src/a.rs");
        now.entries
            .insert("b.rs".into(), base.entries.get("src/a.rs").unwrap());
        now.dirs.clear();
        let mut d = Delta::over([7; STAT_CACHE_SUM_BYTES]);
        d.add_changes(&base, &now);
        assert_eq!(d.len(), 3, "{d:?}");
        let b = d.encode();
        assert_eq!(Delta::decode(&b), Some(d.clone()));
        for cut in 0..b.len() {
            assert!(Delta::decode(&b[..cut]).is_none(), "cut {cut}");
        }
        let mut more = b.clone();
        more.push(0);
        assert!(Delta::decode(&more).is_none());
        let mut applied = base.clone();
        d.apply(&mut applied);
        assert!(same(&applied, &now));
    }

    /// A delta that only changes paths the base has is applied in place;
    /// one that also adds and removes paths merges them in path order:
    /// both give the cache the delta was made to.
    #[test]
    fn a_delta_of_changed_paths_and_one_of_new_and_gone_paths_apply() {
        let base = sample();
        let mut changed = base.clone();
        let mut c = changed.entries.get("src/a.rs").unwrap();
        c.stat.as_mut().unwrap().mtime_ns += 1;
        c.entry.size = 99;
        changed.entries.insert("src/a.rs".into(), c);
        let mut more = changed.clone();
        more.entries.insert("src/0.rs".into(), c);
        more.entries.insert("zz".into(), c);
        more.entries.remove("src");
        for now in [changed, more] {
            let mut d = Delta::over([2; STAT_CACHE_SUM_BYTES]);
            d.add_changes(&base, &now);
            let mut applied = base.clone();
            d.apply(&mut applied);
            assert_eq!(applied.entries, now.entries);
            let paths: Vec<&str> = applied.entries.iter().map(|(p, _)| p).collect();
            assert!(paths.windows(2).all(|w| w[0] < w[1]), "{paths:?}");
        }
    }

    proptest! {
        /// For any two caches, the delta from one to the other, applied
        /// to the first (after an encode and decode), gives the second;
        /// noise never panics the decoder.
        #[test]
        fn a_delta_takes_any_cache_to_any_other(
            a in arb_cache(),
            b in arb_cache(),
            noise in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let _ = Delta::decode(&noise);
            // A real cache names each directory once.
            let unique = |mut c: StatCache| {
                let mut seen = std::collections::HashSet::new();
                c.dirs.retain(|d| seen.insert(d.0.clone()));
                c
            };
            let (a, b) = (unique(a), unique(b));
            let mut d = Delta::over([1; STAT_CACHE_SUM_BYTES]);
            d.add_changes(&a, &b);
            let d = Delta::decode(&d.encode()).expect("a valid delta is refused");
            let mut applied = a.clone();
            d.apply(&mut applied);
            prop_assert_eq!(&applied.entries, &b.entries);
            // The same delta over `a` as loaded from its file (read where
            // it lies: changed entries held in memory, added and gone ones
            // merged into the run of offsets) gives `b` too.
            let mut mapped = StatCache::decode(&a.encode()).expect("a valid cache is refused");
            prop_assert!(mapped.entries.is_mapped() || a.entries.len() == 0);
            d.apply(&mut mapped);
            prop_assert_eq!(&mapped.entries, &b.entries);
            let paths: Vec<&str> = mapped.entries.iter().map(|(p, _)| p).collect();
            prop_assert!(paths.windows(2).all(|w| w[0] < w[1]), "{:?}", paths);
            let sorted = |c: &StatCache| {
                let mut v = c.dirs.clone();
                v.sort();
                v
            };
            prop_assert_eq!(sorted(&applied), sorted(&b));
            prop_assert_eq!((applied.clock_ns, applied.root), (b.clock_ns, b.root));
        }
    }
}
