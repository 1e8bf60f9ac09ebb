//! Renames found by comparing two trees: a path that is gone paired with
//! a path that is new and holds the same, or similar, contents.
//!
//! A move the platform records (`file.move`, a `file.patch` with
//! `to_path`) says where a file went. A move made by a shell command the
//! agent ran (`mv a.rs b.rs`, `git mv`) is seen only by the next
//! checkpoint's scan, as one path removed and one added. `diff`, `blame`
//! and `history --follow` pair those up here, as git pairs renames:
//!
//! - **Exact** first: the same contents and kind (file or symlink).
//! - **Similar** next, among the files left: a gone file and a new one
//!   whose contents are at least [`MIN_SIMILARITY_PERCENT`] alike (git's
//!   default `-M50%`), so a file moved and edited in the same step (an
//!   agent's `git mv` then a fix of its imports) keeps its history too.
//!   Likeness is measured as git estimates it: both files are cut into
//!   chunks (a line, or 64 bytes where a line is longer), and the bytes of
//!   the chunks they share are divided by the larger file's size. Symlinks
//!   pair only exactly.
//!
//! Empty files are never paired (every empty file has the same contents,
//! so a pairing would be a guess), and each path takes part in at most one
//! pair. Where several candidates qualify, the most alike wins, then the
//! one with the same file name, then the first in path order: the same
//! answer every time, so `diff` and `blame` agree.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use cairn_codec::BlobHash;

use crate::source::{BlobSource, EntryKind, Tree, TreeEntry};

/// The least likeness, in percent, at which a gone file and a new one are
/// paired as a rename (git's default for `diff -M`): below it, a pairing
/// would say less than "one removed, one added".
pub const MIN_SIMILARITY_PERCENT: u8 = 50;

/// The most (gone file, new file) pairs compared for likeness in one
/// comparison of two trees. Each comparison reads both files' chunks; past
/// this (say a whole tree rewritten at once, thousands of files each way)
/// only exact renames are paired, as git stops at its `diff.renameLimit`.
/// 250,000 pairs is 500 files each way, a few hundred milliseconds at most.
pub const MAX_SIMILARITY_PAIRS: usize = 250_000;

/// Files larger than this are paired only exactly: comparing them chunk by
/// chunk would read them whole (the line diff's own bound).
pub const MAX_SIMILARITY_FILE_BYTES: u64 = crate::query::MAX_LINE_DIFF_BYTES;

/// The longest chunk likeness is measured in, as git's: a line, or this
/// many bytes of a longer one (so binary files compare too).
const CHUNK_BYTES: usize = 64;

/// One rename: `from` at the first point is `to` at the second.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    /// The path that is gone.
    pub from: String,
    /// The path that is new.
    pub to: String,
    /// How alike the two files' contents are, in percent: 100 for the same
    /// contents, else at least [`MIN_SIMILARITY_PERCENT`] and at most 99.
    pub similarity: u8,
}

/// Pairs the `removed` paths with the `added` ones: first those that hold
/// the same contents and kind, then files alike enough (see the [module
/// docs](self)). `blobs` tells a blob's size and bytes; a blob it cannot
/// read takes part in exact pairs only. Both lists are in path order; the
/// exact pairs come back first, in the order of `added`, then the similar
/// ones, the most alike first.
pub fn pair<'a>(
    removed: impl IntoIterator<Item = (&'a str, TreeEntry)>,
    added: impl IntoIterator<Item = (&'a str, TreeEntry)>,
    blobs: &dyn BlobSource,
) -> Vec<Rename> {
    let removed: Vec<(&str, TreeEntry)> = removed.into_iter().collect();
    if removed.is_empty() {
        return Vec::new();
    }
    // Asked only of a path with a candidate: a tree of thousands of new
    // files with nothing gone costs nothing here.
    let is_empty = |b: &BlobHash| *b == BlobHash::of(b"") || blobs.len(b) == Some(0);
    // The gone paths by contents, each list in path order (by index).
    let mut gone: HashMap<(BlobHash, EntryKind), Vec<usize>> = HashMap::new();
    for (i, (_, e)) in removed.iter().enumerate() {
        gone.entry((e.blob, e.kind)).or_default().push(i);
    }
    let mut taken = vec![false; removed.len()];
    let mut left_added = Vec::new();
    let mut out = Vec::new();
    for (to, e) in added {
        let free = |i: &&usize| !taken[**i];
        let candidates = gone.get(&(e.blob, e.kind));
        if candidates.is_some() && is_empty(&e.blob) {
            continue;
        }
        let pick = candidates.and_then(|candidates| {
            let name = file_name(to);
            candidates
                .iter()
                .filter(free)
                .find(|i| file_name(removed[**i].0) == name)
                .or_else(|| candidates.iter().find(free))
                .copied()
        });
        match pick {
            Some(i) => {
                taken[i] = true;
                out.push(Rename {
                    from: removed[i].0.to_string(),
                    to: to.to_string(),
                    similarity: 100,
                });
            }
            None => left_added.push((to, e)),
        }
    }
    let left_removed: Vec<(&str, TreeEntry)> = removed
        .iter()
        .zip(&taken)
        .filter(|(_, t)| !**t)
        .map(|(r, _)| *r)
        .collect();
    out.extend(pair_similar(&left_removed, &left_added, blobs));
    out
}

/// The second pass of [`pair`]: files alike enough, the most alike pairs
/// first. Nothing when there are too many pairs to compare
/// ([`MAX_SIMILARITY_PAIRS`]).
fn pair_similar(
    removed: &[(&str, TreeEntry)],
    added: &[(&str, TreeEntry)],
    blobs: &dyn BlobSource,
) -> Vec<Rename> {
    let files = |list: &[(&str, TreeEntry)]| {
        list.iter()
            .filter(|(_, e)| e.kind == EntryKind::File)
            .count()
    };
    let (nr, na) = (files(removed), files(added));
    if nr == 0 || na == 0 || too_many_to_compare(nr, na) {
        return Vec::new();
    }
    let (gone, new) = (comparable(removed, blobs), comparable(added, blobs));
    // Each file's chunks, read once, and only if some pair's sizes allow
    // it to reach the threshold (`None` inside: it could not be read).
    let mut chunks: HashMap<BlobHash, Option<Chunks>> = HashMap::new();
    let mut read = |e: &TreeEntry| {
        chunks
            .entry(e.blob)
            .or_insert_with(|| blobs.get(&e.blob).ok().map(|b| Chunks::of(&b)));
    };
    for &(ai, an) in &new {
        if gone.iter().any(|&(_, rn)| can_reach(an, rn)) {
            read(&added[ai].1);
        }
    }
    for &(ri, rn) in &gone {
        if new.iter().any(|&(_, an)| can_reach(an, rn)) {
            read(&removed[ri].1);
        }
    }
    // (similarity, same file name, added index, removed index) per pair
    // alike enough.
    let mut found: Vec<(u8, bool, usize, usize)> = Vec::new();
    for &(ai, an) in &new {
        let (to, te) = added[ai];
        let Some(Some(b)) = chunks.get(&te.blob) else {
            continue;
        };
        for &(ri, rn) in &gone {
            let (from, fe) = removed[ri];
            let Some(Some(a)) = chunks.get(&fe.blob).filter(|_| can_reach(an, rn)) else {
                continue;
            };
            let score = a.similarity(b);
            if score >= MIN_SIMILARITY_PERCENT {
                found.push((score, file_name(from) == file_name(to), ai, ri));
            }
        }
    }
    take_most_alike(found, removed, added)
}

/// The files of `list` that can be compared: files, of a size that can
/// be compared, and not empty; each by its index in `list`, with its size.
fn comparable(list: &[(&str, TreeEntry)], blobs: &dyn BlobSource) -> Vec<(usize, u64)> {
    list.iter()
        .enumerate()
        .filter(|(_, (_, e))| e.kind == EntryKind::File)
        .filter_map(|(i, (_, e))| {
            let n = match blobs.len(&e.blob) {
                Some(n) => n,
                None => blobs.get(&e.blob).ok()?.len() as u64,
            };
            (n > 0 && n <= MAX_SIMILARITY_FILE_BYTES).then_some((i, n))
        })
        .collect()
}

/// True if files of sizes `a` and `b` could be alike enough: the smaller
/// is at least [`MIN_SIMILARITY_PERCENT`] of the larger.
fn can_reach(a: u64, b: u64) -> bool {
    a.min(b) * 100 >= a.max(b) * u64::from(MIN_SIMILARITY_PERCENT)
}

/// Pairs from `found` (similarity, same file name, added index, removed
/// index), each file in at most one pair: the most alike first, then the
/// same name, then path order.
fn take_most_alike(
    mut found: Vec<(u8, bool, usize, usize)>,
    removed: &[(&str, TreeEntry)],
    added: &[(&str, TreeEntry)],
) -> Vec<Rename> {
    found.sort_by(|x, y| {
        y.0.cmp(&x.0)
            .then(y.1.cmp(&x.1))
            .then(x.2.cmp(&y.2))
            .then(x.3.cmp(&y.3))
    });
    let (mut to_taken, mut from_taken) = (vec![false; added.len()], vec![false; removed.len()]);
    let mut out = Vec::new();
    for (score, _, ai, ri) in found {
        if to_taken[ai] || from_taken[ri] {
            continue;
        }
        to_taken[ai] = true;
        from_taken[ri] = true;
        out.push(Rename {
            from: removed[ri].0.to_string(),
            to: added[ai].0.to_string(),
            similarity: score,
        });
    }
    out
}

/// True if `removed` gone files and `added` new ones, left after the exact
/// renames, are too many to compare for likeness
/// ([`MAX_SIMILARITY_PAIRS`]): only exact renames are paired then, and a
/// caller showing renames should say so.
pub fn too_many_to_compare(removed: usize, added: usize) -> bool {
    removed.saturating_mul(added) > MAX_SIMILARITY_PAIRS
}

/// A file cut into chunks for [`Chunks::similarity`]: each distinct chunk
/// (by a hash of its bytes) with how many of the file's bytes it covers,
/// in hash order.
#[derive(Debug)]
struct Chunks {
    bytes: Vec<(u64, u64)>,
    len: u64,
}

impl Chunks {
    /// Cuts `data` after each newline and every [`CHUNK_BYTES`] bytes of a
    /// longer line.
    fn of(data: &[u8]) -> Chunks {
        // A fixed hasher: the same chunk hashes alike in both files.
        let hasher =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        let mut counts: HashMap<u64, u64> = HashMap::new();
        let mut start = 0;
        for (i, b) in data.iter().enumerate() {
            if *b == b'\n' || i + 1 - start == CHUNK_BYTES || i + 1 == data.len() {
                let chunk = &data[start..=i];
                let mut h = hasher.build_hasher();
                h.write(chunk);
                *counts.entry(h.finish()).or_default() += chunk.len() as u64;
                start = i + 1;
            }
        }
        let mut bytes: Vec<(u64, u64)> = counts.into_iter().collect();
        bytes.sort_unstable();
        Chunks {
            bytes,
            len: data.len() as u64,
        }
    }

    /// The bytes the two files share (per chunk, the lesser of their
    /// counts) over the larger file's size, in percent, rounded down; at
    /// most 99, as 100 means the same contents.
    fn similarity(&self, other: &Chunks) -> u8 {
        let (mut i, mut j, mut shared) = (0, 0, 0u64);
        while i < self.bytes.len() && j < other.bytes.len() {
            let (a, b) = (self.bytes[i], other.bytes[j]);
            match a.0.cmp(&b.0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    shared += a.1.min(b.1);
                    i += 1;
                    j += 1;
                }
            }
        }
        let max = self.len.max(other.len).max(1);
        u8::try_from((shared * 100 / max).min(99)).unwrap_or(99)
    }
}

/// The renames between two whole trees: paths only in `before` paired with
/// paths only in `after` (see [`pair`]).
pub fn between(before: &Tree, after: &Tree, blobs: &dyn BlobSource) -> Vec<Rename> {
    let removed = before
        .iter()
        .filter(|(p, _)| !after.contains_key(*p))
        .map(|(p, e)| (p.as_str(), *e));
    let added = after
        .iter()
        .filter(|(p, _)| !before.contains_key(*p))
        .map(|(p, e)| (p.as_str(), *e));
    pair(removed, added, blobs)
}

/// The last component of a path.
fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MemBlobs;

    /// A file entry holding `text`, stored in `blobs`.
    fn file(blobs: &MemBlobs, text: &str) -> TreeEntry {
        TreeEntry::file(blobs.put(text.as_bytes()))
    }

    fn tree(entries: &[(&str, TreeEntry)]) -> Tree {
        entries.iter().map(|(p, e)| (p.to_string(), *e)).collect()
    }

    fn pairs(r: &[Rename]) -> Vec<(&str, &str, u8)> {
        r.iter()
            .map(|r| (r.from.as_str(), r.to.as_str(), r.similarity))
            .collect()
    }

    /// `n` distinct lines of text, each naming `tag`.
    fn lines(tag: &str, n: usize) -> String {
        (0..n).map(|i| format!("{tag} line {i}\n")).collect()
    }

    #[test]
    fn a_gone_path_and_a_new_one_with_the_same_contents_are_a_rename() {
        let m = MemBlobs::new();
        let (one, two) = (file(&m, "one\n"), file(&m, "two\n"));
        let a = tree(&[("a.txt", one), ("keep", two)]);
        let b = tree(&[("b.txt", one), ("keep", two)]);
        assert_eq!(pairs(&between(&a, &b, &m)), [("a.txt", "b.txt", 100)]);
        // The other way round too: it is only a pairing.
        assert_eq!(pairs(&between(&b, &a, &m)), [("b.txt", "a.txt", 100)]);
    }

    #[test]
    fn unlike_contents_or_another_kind_are_no_rename() {
        let m = MemBlobs::new();
        let a = tree(&[("a", file(&m, &lines("x", 10))), ("l", file(&m, "target"))]);
        let mut link = file(&m, "target");
        link.kind = EntryKind::Symlink;
        let b = tree(&[("b", file(&m, &lines("y", 10))), ("m", link)]);
        assert!(between(&a, &b, &m).is_empty());
        // A path present at both points is never a rename's end.
        let c = tree(&[("a", a["a"]), ("b", a["a"])]);
        assert!(between(&a, &c, &m).is_empty());
    }

    #[test]
    fn empty_files_are_never_paired() {
        let m = MemBlobs::new();
        let a = tree(&[("a", file(&m, ""))]);
        let b = tree(&[("b", file(&m, ""))]);
        assert!(between(&a, &b, &m).is_empty());
    }

    #[test]
    fn the_same_file_name_wins_then_path_order_and_each_path_pairs_once() {
        let m = MemBlobs::new();
        let x = file(&m, "x\n");
        // Three copies gone, two new: `lib/x.rs` takes `old/x.rs` (same
        // name) although `a.rs` comes first; `new.rs` takes `a.rs`.
        let a = tree(&[("a.rs", x), ("old/x.rs", x), ("z.rs", x)]);
        let b = tree(&[("lib/x.rs", x), ("new.rs", x)]);
        assert_eq!(
            pairs(&between(&a, &b, &m)),
            [("old/x.rs", "lib/x.rs", 100), ("a.rs", "new.rs", 100)]
        );
        // More new copies than gone ones: the extra one is an add.
        let c = tree(&[("p", x), ("q", x), ("r", x), ("s", x)]);
        let one = tree(&[("o", x)]);
        assert_eq!(pairs(&between(&one, &c, &m)), [("o", "p", 100)]);
    }

    #[test]
    fn a_file_moved_and_edited_is_a_rename_with_its_likeness() {
        let m = MemBlobs::new();
        let old = lines("body", 20);
        // One line of twenty changed: 19 of 20 lines shared.
        let edited = old.replace("body line 7\n", "body line seven, edited\n");
        let a = tree(&[("src/util.rs", file(&m, &old))]);
        let b = tree(&[("src/helpers.rs", file(&m, &edited))]);
        let found = between(&a, &b, &m);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].from.as_str(), found[0].to.as_str()),
            ("src/util.rs", "src/helpers.rs")
        );
        assert!((90..100).contains(&found[0].similarity), "{found:?}");
        // Half the lines rewritten: under the threshold or just at it; a
        // quarter kept is no rename.
        let mostly_new = lines("body", 5) + &lines("fresh", 15);
        let c = tree(&[("src/helpers.rs", file(&m, &mostly_new))]);
        assert!(between(&a, &c, &m).is_empty());
    }

    #[test]
    fn the_most_alike_pair_wins_and_an_exact_copy_comes_first() {
        let m = MemBlobs::new();
        let base = lines("base", 20);
        let near = base.replace("base line 3\n", "changed\n");
        let far = base
            .replace("base line 3\n", "changed\n")
            .replace("base line 4\n", "changed too\n")
            .replace("base line 5\n", "and this\n");
        // Two gone files alike the new one: the nearer wins, and the other
        // finds no partner.
        let a = tree(&[("far.rs", file(&m, &far)), ("near.rs", file(&m, &near))]);
        let b = tree(&[("new.rs", file(&m, &base))]);
        let found = between(&a, &b, &m);
        let found = pairs(&found);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].0, found[0].1), ("near.rs", "new.rs"));
        // An exact copy beats any similar file, and is paired first.
        let c = tree(&[("copy.rs", file(&m, &base)), ("near.rs", file(&m, &near))]);
        let d = tree(&[("new.rs", file(&m, &base)), ("near2.rs", file(&m, &near))]);
        assert_eq!(
            pairs(&between(&c, &d, &m)),
            [("near.rs", "near2.rs", 100), ("copy.rs", "new.rs", 100)]
        );
    }

    #[test]
    fn symlinks_pair_only_exactly_and_too_many_files_pair_only_exactly() {
        let m = MemBlobs::new();
        let mut l1 = file(&m, "some/long/target/path/one");
        let mut l2 = file(&m, "some/long/target/path/two");
        l1.kind = EntryKind::Symlink;
        l2.kind = EntryKind::Symlink;
        assert!(between(&tree(&[("l1", l1)]), &tree(&[("l2", l2)]), &m).is_empty());
        // Past MAX_SIMILARITY_PAIRS, similar files are left as they are;
        // exact ones still pair.
        let side = (MAX_SIMILARITY_PAIRS as f64).sqrt() as usize + 1;
        let body = lines("shared", 10);
        let gone: Vec<(String, TreeEntry)> = (0..side)
            .map(|i| (format!("old/{i}"), file(&m, &format!("{body}gone {i}\n"))))
            .collect();
        let mut new: Vec<(String, TreeEntry)> = (0..side)
            .map(|i| (format!("new/{i}"), file(&m, &format!("{body}new {i}\n"))))
            .collect();
        new.push(("new/exact".into(), gone[0].1));
        let a: Tree = gone.into_iter().collect();
        let b: Tree = new.into_iter().collect();
        assert_eq!(pairs(&between(&a, &b, &m)), [("old/0", "new/exact", 100)]);
    }

    #[test]
    fn likeness_counts_shared_bytes_over_the_larger_file() {
        let a = Chunks::of(b"one\ntwo\nthree\nfour\n");
        assert_eq!(a.similarity(&Chunks::of(b"one\ntwo\nthree\nfour\n")), 99);
        // "one\ntwo\n" is 8 of the 19 bytes of the larger file.
        assert_eq!(a.similarity(&Chunks::of(b"one\ntwo\n")), 42);
        assert_eq!(a.similarity(&Chunks::of(b"five\n")), 0);
        // Repeated lines count as often as both have them.
        let rep = Chunks::of(b"x\nx\nx\nx\n");
        assert_eq!(rep.similarity(&Chunks::of(b"x\nx\n")), 50);
        // Long lines are cut every 64 bytes: one changed byte at the end of
        // a 256-byte line leaves three of its four chunks shared.
        let long = vec![b'a'; 256];
        let mut changed = long.clone();
        changed[255] = b'b';
        assert_eq!(Chunks::of(&long).similarity(&Chunks::of(&changed)), 75);
    }
}
