//! Renames found by comparing two trees: a path that is gone paired with
//! a path that is new and holds the same contents.
//!
//! A move the platform records (`file.move`, a `file.patch` with
//! `to_path`) says where a file went. A move made by a shell command the
//! agent ran (`mv a.rs b.rs`, `git mv`) is seen only by the next
//! checkpoint's scan, as one path removed and one added. `diff`, `blame`
//! and `history --follow` pair those up here, as git pairs exact renames:
//! same contents and same kind (file or symlink), so the new path's lines
//! keep their history. Only exact copies are paired (git's 100%
//! similarity); an edit in the same step reads as a remove and an add.
//!
//! Empty files are never paired (every empty file has the same contents,
//! so a pairing would be a guess), and each path takes part in at most one
//! pair. Where several gone paths hold the new path's contents, the one
//! with the same file name wins, then the first in path order: the same
//! answer every time, so `diff` and `blame` agree.

use std::collections::HashMap;

use cairn_codec::BlobHash;

use crate::source::{EntryKind, Tree, TreeEntry};

/// One rename: `from` at the first point is `to` at the second.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    /// The path that is gone.
    pub from: String,
    /// The path that is new, with the same contents.
    pub to: String,
}

/// Pairs the `removed` paths with the `added` ones that hold the same
/// contents and kind. `is_empty` says whether a blob holds no bytes (those
/// are never paired). Both lists are in path order; the pairs come back in
/// the order of `added`.
pub fn pair<'a>(
    removed: impl IntoIterator<Item = (&'a str, TreeEntry)>,
    added: impl IntoIterator<Item = (&'a str, TreeEntry)>,
    is_empty: impl Fn(&BlobHash) -> bool,
) -> Vec<Rename> {
    // The gone paths by contents, each list in path order.
    let mut gone: HashMap<(BlobHash, EntryKind), Vec<Option<&str>>> = HashMap::new();
    for (p, e) in removed {
        gone.entry((e.blob, e.kind)).or_default().push(Some(p));
    }
    if gone.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (to, e) in added {
        let Some(candidates) = gone.get_mut(&(e.blob, e.kind)) else {
            continue;
        };
        if is_empty(&e.blob) {
            continue;
        }
        let name = file_name(to);
        let pick = candidates
            .iter()
            .position(|c| c.is_some_and(|c| file_name(c) == name))
            .or_else(|| candidates.iter().position(Option::is_some));
        if let Some(i) = pick {
            let from = candidates[i].take().expect("picked a free candidate");
            out.push(Rename {
                from: from.to_string(),
                to: to.to_string(),
            });
        }
    }
    out
}

/// The renames between two whole trees: paths only in `before` paired with
/// paths only in `after` (see [`pair`]).
pub fn between(before: &Tree, after: &Tree, is_empty: impl Fn(&BlobHash) -> bool) -> Vec<Rename> {
    let removed = before
        .iter()
        .filter(|(p, _)| !after.contains_key(*p))
        .map(|(p, e)| (p.as_str(), *e));
    let added = after
        .iter()
        .filter(|(p, _)| !before.contains_key(*p))
        .map(|(p, e)| (p.as_str(), *e));
    pair(removed, added, is_empty)
}

/// The last component of a path.
fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(n: u8) -> BlobHash {
        BlobHash([n; 32])
    }

    fn file(n: u8) -> TreeEntry {
        TreeEntry::file(blob(n))
    }

    fn tree(entries: &[(&str, TreeEntry)]) -> Tree {
        entries.iter().map(|(p, e)| (p.to_string(), *e)).collect()
    }

    fn pairs(r: &[Rename]) -> Vec<(&str, &str)> {
        r.iter().map(|r| (r.from.as_str(), r.to.as_str())).collect()
    }

    const NONE_EMPTY: fn(&BlobHash) -> bool = |_| false;

    #[test]
    fn a_gone_path_and_a_new_one_with_the_same_contents_are_a_rename() {
        let a = tree(&[("a.txt", file(1)), ("keep", file(2))]);
        let b = tree(&[("b.txt", file(1)), ("keep", file(2))]);
        assert_eq!(pairs(&between(&a, &b, NONE_EMPTY)), [("a.txt", "b.txt")]);
        // The other way round too: it is only a pairing.
        assert_eq!(pairs(&between(&b, &a, NONE_EMPTY)), [("b.txt", "a.txt")]);
    }

    #[test]
    fn different_contents_or_kind_are_no_rename() {
        let a = tree(&[("a", file(1)), ("l", file(3))]);
        let mut link = file(3);
        link.kind = EntryKind::Symlink;
        let b = tree(&[("b", file(2)), ("m", link)]);
        assert!(between(&a, &b, NONE_EMPTY).is_empty());
        // A path present at both points is never a rename's end.
        let c = tree(&[("a", file(1)), ("b", file(1))]);
        assert!(between(&a, &c, NONE_EMPTY).is_empty());
    }

    #[test]
    fn empty_files_are_never_paired() {
        let a = tree(&[("a", file(0))]);
        let b = tree(&[("b", file(0))]);
        assert!(between(&a, &b, |h| *h == blob(0)).is_empty());
        assert_eq!(between(&a, &b, NONE_EMPTY).len(), 1);
    }

    #[test]
    fn the_same_file_name_wins_then_path_order_and_each_path_pairs_once() {
        // Three copies gone, two new: `lib/x.rs` takes `old/x.rs` (same
        // name) although `a.rs` comes first; `new.rs` takes `a.rs`.
        let a = tree(&[("a.rs", file(1)), ("old/x.rs", file(1)), ("z.rs", file(1))]);
        let b = tree(&[("lib/x.rs", file(1)), ("new.rs", file(1))]);
        assert_eq!(
            pairs(&between(&a, &b, NONE_EMPTY)),
            [("old/x.rs", "lib/x.rs"), ("a.rs", "new.rs")]
        );
        // More new copies than gone ones: the extra one is an add.
        let c = tree(&[
            ("p", file(1)),
            ("q", file(1)),
            ("r", file(1)),
            ("s", file(1)),
        ]);
        let one = tree(&[("o", file(1))]);
        assert_eq!(pairs(&between(&one, &c, NONE_EMPTY)), [("o", "p")]);
    }
}
