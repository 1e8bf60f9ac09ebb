//! Manifests: a Merkle tree of directory nodes, each stored as a blob.
//!
//! A node lists one directory's entries, sorted by name: name -> (kind,
//! mode, size, hash). A file's hash names its contents, a symlink's hash
//! names its target text (links are stored, never followed), a directory's
//! hash names its own node. The root node also lists the tracked paths that
//! did not exist when the checkpoint was taken. Because a node's hash covers
//! its children's hashes, a checkpoint after a one-file change writes only
//! that file's blob and the nodes on the path from it to the root; every
//! other node is shared with the previous checkpoint.
//!
//! Node layout (version 1), all integers unsigned LEB128:
//!
//! ```text
//! magic "CMN1" | flags u8 (bit 0: a missing-paths section follows)
//! entry count | per entry: name length, name (UTF-8), kind u8 (1 file,
//!   2 symlink, 3 dir), mode, size, hash (32 bytes)
//! [missing count | per path: length, workspace-relative path (UTF-8)]
//! ```
//!
//! The query crate reads trees through [`list`], [`list_under`] and [`lookup`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use cairn_codec::BlobHash;

use crate::blobs::{BlobAccess, BlobRead};
use crate::error::{Result, SnapshotError};
use crate::relpath::{self, check_manifest_path, valid_name};

/// The first bytes of every manifest node (format version 1).
pub const NODE_MAGIC: &[u8; 4] = b"CMN1";

/// The deepest directory nesting accepted when reading a tree. Linux paths
/// are at most 4096 bytes, so no real tree is deeper than 2048 levels; the
/// bound keeps a crafted manifest from making a reader loop or allocate
/// without end.
pub const MAX_TREE_DEPTH: usize = 2048;

/// The smallest encoded entry (1-byte name length, 1-byte name, kind, mode,
/// size, 32-byte hash): bounds the entry count a node's length can hold, so
/// a damaged count never triggers a huge allocation.
const MIN_ENTRY_BYTES: usize = 1 + 1 + 1 + 1 + 1 + 32;

const FLAG_MISSING: u8 = 1;

/// What a manifest entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EntryKind {
    /// A regular file; the hash names its contents.
    File,
    /// A symbolic link; the hash names its target text. Never followed.
    Symlink,
    /// A directory; the hash names its node.
    Dir,
}

impl EntryKind {
    fn code(self) -> u8 {
        match self {
            EntryKind::File => 1,
            EntryKind::Symlink => 2,
            EntryKind::Dir => 3,
        }
    }
    fn from_code(c: u8) -> Option<EntryKind> {
        match c {
            1 => Some(EntryKind::File),
            2 => Some(EntryKind::Symlink),
            3 => Some(EntryKind::Dir),
            _ => None,
        }
    }
    /// `file`, `symlink` or `dir`.
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Symlink => "symlink",
            EntryKind::Dir => "dir",
        }
    }
}

/// One entry of a manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// File, symlink or directory.
    pub kind: EntryKind,
    /// Permission bits (`0o644`, `0o755`, ...; 0 for symlinks).
    pub mode: u32,
    /// Bytes: a file's length, a symlink's target length, the total file
    /// bytes below a directory.
    pub size: u64,
    /// Contents (file), target text (symlink) or node (directory).
    pub hash: BlobHash,
}

impl Entry {
    /// True if the executable bit is set for the owner.
    pub fn is_executable(&self) -> bool {
        self.kind == EntryKind::File && self.mode & 0o100 != 0
    }
    /// True for files and symlinks (what counts as a "file" in counts).
    pub fn is_leaf(&self) -> bool {
        self.kind != EntryKind::Dir
    }
}

/// One decoded directory node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// Entries sorted by name (strictly ascending bytes).
    pub entries: Vec<(String, Entry)>,
    /// Root only: tracked workspace paths that did not exist.
    pub missing: Vec<String>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    node: BlobHash,
}

impl Reader<'_> {
    fn err(&self, what: &str) -> SnapshotError {
        SnapshotError::BadManifest {
            node: self.node,
            detail: format!("{what} at byte {}", self.pos),
        }
    }
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .b
                .get(self.pos)
                .ok_or_else(|| self.err("truncated number"))?;
            self.pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("overlong number"))
    }
    fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| self.err("truncated field"))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .b
            .get(self.pos)
            .ok_or_else(|| self.err("truncated field"))?;
        self.pos += 1;
        Ok(b)
    }
    fn text(&mut self) -> Result<String> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| self.err("length too large"))?;
        let s = self.bytes(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| self.err("text is not UTF-8"))
    }
}

impl Node {
    /// Encodes the node. What [`Node::decode`] checks of entries is
    /// asserted first (TigerBeetle's pair assertions): a writer bug that
    /// builds an unsorted node, or one with a name no reader takes, stops
    /// the process here instead of storing a tree every later read
    /// refuses. The whole round trip is checked in debug builds.
    ///
    /// # Panics
    ///
    /// When the entries are not strictly sorted by name, a name is not a
    /// single path component, or a missing path is not one a manifest
    /// holds: a writer bug, never bad input.
    pub fn encode(&self) -> Vec<u8> {
        for pair in self.entries.windows(2) {
            assert!(
                pair[0].0.as_bytes() < pair[1].0.as_bytes(),
                "manifest node entries not strictly sorted: `{}` then `{}`",
                pair[0].0,
                pair[1].0
            );
        }
        for (name, _) in &self.entries {
            assert!(valid_name(name), "manifest node entry name `{name}`");
        }
        for p in &self.missing {
            assert!(
                check_manifest_path(p).is_ok(),
                "manifest missing path `{p}`"
            );
        }
        let out = self.encode_unchecked();
        debug_assert!(
            Node::decode(BlobHash::ZERO, &out).is_ok_and(|n| n == *self),
            "an encoded manifest node does not decode to itself"
        );
        out
    }

    /// The bytes of the node, unchecked: for tests that build the damaged
    /// nodes a reader must refuse.
    fn encode_unchecked(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.entries.len() * 64);
        out.extend_from_slice(NODE_MAGIC);
        out.push(if self.missing.is_empty() {
            0
        } else {
            FLAG_MISSING
        });
        put_varint(&mut out, self.entries.len() as u64);
        for (name, e) in &self.entries {
            put_varint(&mut out, name.len() as u64);
            out.extend_from_slice(name.as_bytes());
            out.push(e.kind.code());
            put_varint(&mut out, u64::from(e.mode));
            put_varint(&mut out, e.size);
            out.extend_from_slice(e.hash.as_bytes());
        }
        if !self.missing.is_empty() {
            put_varint(&mut out, self.missing.len() as u64);
            for p in &self.missing {
                put_varint(&mut out, p.len() as u64);
                out.extend_from_slice(p.as_bytes());
            }
        }
        out
    }

    /// Decodes and validates a node read from blob `hash`: names valid and
    /// strictly sorted, kinds known, missing paths valid, no trailing bytes.
    pub fn decode(hash: BlobHash, b: &[u8]) -> Result<Node> {
        let mut r = Reader {
            b,
            pos: 0,
            node: hash,
        };
        if r.bytes(4).ok() != Some(NODE_MAGIC.as_slice()) {
            return Err(SnapshotError::BadManifest {
                node: hash,
                detail: "not a manifest node (bad magic)".into(),
            });
        }
        let flags = r.byte()?;
        if flags & !FLAG_MISSING != 0 {
            return Err(r.err(&format!("unknown flags {flags:#x}")));
        }
        let count = r.varint()?;
        if count > (b.len() / MIN_ENTRY_BYTES) as u64 {
            return Err(r.err(&format!(
                "entry count {count} cannot fit in {} bytes",
                b.len()
            )));
        }
        let mut entries: Vec<(String, Entry)> = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let name = r.text()?;
            if !valid_name(&name) {
                return Err(r.err(&format!("invalid entry name `{name}`")));
            }
            if let Some((prev, _)) = entries.last() {
                if prev.as_bytes() >= name.as_bytes() {
                    return Err(r.err(&format!("entries not sorted (`{prev}` then `{name}`)")));
                }
            }
            let code = r.byte()?;
            let kind =
                EntryKind::from_code(code).ok_or_else(|| r.err(&format!("unknown kind {code}")))?;
            let mode = u32::try_from(r.varint()?).map_err(|_| r.err("mode out of range"))?;
            let size = r.varint()?;
            let mut h = [0u8; 32];
            h.copy_from_slice(r.bytes(32)?);
            entries.push((
                name,
                Entry {
                    kind,
                    mode,
                    size,
                    hash: BlobHash(h),
                },
            ));
        }
        let mut missing = Vec::new();
        if flags & FLAG_MISSING != 0 {
            let n = r.varint()?;
            if n > b.len() as u64 {
                return Err(r.err("missing count too large"));
            }
            for _ in 0..n {
                let p = r.text()?;
                check_manifest_path(&p).map_err(|e| r.err(&e.to_string()))?;
                missing.push(p);
            }
        }
        if r.pos != b.len() {
            return Err(r.err("trailing bytes"));
        }
        Ok(Node { entries, missing })
    }

    /// The entry named `name`.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries
            .binary_search_by(|(n, _)| n.as_bytes().cmp(name.as_bytes()))
            .ok()
            .map(|i| &self.entries[i].1)
    }
}

/// Reads and decodes the node stored as blob `hash`.
pub fn read_node<B: BlobRead + ?Sized>(blobs: &B, hash: &BlobHash) -> Result<Node> {
    let bytes = blobs.get(hash)?;
    Node::decode(*hash, &bytes)
}

/// A whole manifest, flattened: every path (directories included) -> entry,
/// plus the tracked paths that did not exist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Workspace-relative path -> entry, sorted by path.
    pub entries: BTreeMap<String, Entry>,
    /// Tracked paths that did not exist.
    pub missing: BTreeSet<String>,
}

impl Manifest {
    /// Number of files and symlinks.
    pub fn file_count(&self) -> u64 {
        self.entries.values().filter(|e| e.is_leaf()).count() as u64
    }
    /// Files and symlinks only, with their paths.
    pub fn files(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries.iter().filter(|(_, e)| e.is_leaf())
    }
}

/// Lists every entry of the tree rooted at `root`.
pub fn list<B: BlobRead + ?Sized>(blobs: &B, root: &BlobHash) -> Result<Manifest> {
    let node = read_node(blobs, root)?;
    let mut m = Manifest {
        missing: node.missing.iter().cloned().collect(),
        ..Manifest::default()
    };
    walk_into(blobs, "", node, &mut m.entries)?;
    Ok(m)
}

/// Lists the entries at and below `path` (the entry itself included); an
/// empty manifest if `path` is not in the tree. `""` lists everything.
pub fn list_under<B: BlobRead + ?Sized>(
    blobs: &B,
    root: &BlobHash,
    path: &str,
) -> Result<Manifest> {
    if path.is_empty() {
        return list(blobs, root);
    }
    let mut m = Manifest::default();
    let rootnode = read_node(blobs, root)?;
    m.missing = rootnode
        .missing
        .iter()
        .filter(|p| relpath::in_scope(p, &[path.to_string()]))
        .cloned()
        .collect();
    if let Some(e) = lookup(blobs, root, path)? {
        m.entries.insert(path.to_string(), e);
        if e.kind == EntryKind::Dir {
            let node = read_node(blobs, &e.hash)?;
            walk_into(blobs, path, node, &mut m.entries)?;
        }
    }
    Ok(m)
}

fn walk_into<B: BlobRead + ?Sized>(
    blobs: &B,
    base: &str,
    node: Node,
    out: &mut BTreeMap<String, Entry>,
) -> Result<()> {
    // Explicit stack instead of recursion: depth is bounded by MAX_TREE_DEPTH,
    // not by the thread's stack.
    let mut stack: Vec<(String, Node, usize)> = vec![(base.to_string(), node, 0)];
    while let Some((dir, node, depth)) = stack.pop() {
        for (name, e) in node.entries {
            let p = relpath::join(&dir, &name);
            if e.kind == EntryKind::Dir {
                if depth + 1 > MAX_TREE_DEPTH {
                    return Err(SnapshotError::BadManifest {
                        node: e.hash,
                        detail: format!("tree deeper than {MAX_TREE_DEPTH} levels at `{p}`"),
                    });
                }
                let child = read_node(blobs, &e.hash)?;
                stack.push((p.clone(), child, depth + 1));
            }
            out.insert(p, e);
        }
    }
    Ok(())
}

/// Looks up one path in the tree rooted at `root`.
pub fn lookup<B: BlobRead + ?Sized>(
    blobs: &B,
    root: &BlobHash,
    path: &str,
) -> Result<Option<Entry>> {
    if path.is_empty() {
        return Err(SnapshotError::bad_path(
            path,
            "the workspace root is not an entry",
        ));
    }
    let mut node = read_node(blobs, root)?;
    let mut comps = path.split('/').peekable();
    while let Some(c) = comps.next() {
        let Some(e) = node.get(c).copied() else {
            return Ok(None);
        };
        if comps.peek().is_none() {
            return Ok(Some(e));
        }
        if e.kind != EntryKind::Dir {
            return Ok(None);
        }
        node = read_node(blobs, &e.hash)?;
    }
    Ok(None)
}

/// Node hashes (and total sizes) of every directory of the last tree built,
/// keyed by directory path (`""` is the root): lets the next build skip
/// re-encoding directories whose contents did not change.
pub type DirHashes = HashMap<String, (BlobHash, u64)>;

/// Builds the tree for a flat manifest and stores its nodes, returning the
/// root hash and the node hash of every directory.
///
/// `flat` holds every entry, directories included (their `hash` and `size`
/// are ignored and computed here); every parent of an entry must itself be
/// an entry. Directories not in `dirty` whose hash is in `reuse` are taken
/// from there without being encoded or stored again; `dirty = None` means
/// rebuild everything. The root is always re-encoded (it carries `missing`).
pub fn build<B: BlobAccess + ?Sized>(
    blobs: &B,
    flat: &BTreeMap<String, Entry>,
    missing: &BTreeSet<String>,
    reuse: &DirHashes,
    dirty: Option<&HashSet<String>>,
) -> Result<(BlobHash, DirHashes)> {
    build_from(
        blobs,
        flat.iter(),
        |p| flat.get(p),
        |e| *e,
        missing,
        reuse,
        dirty,
    )
}

/// [`build`] over any collection of path -> value holding an [`Entry`]
/// (`entry` gets it out), so a capture need not copy its own into a
/// map: `flat` gives every path with its value in path order, and `get`
/// finds the value of one path.
pub fn build_from<'a, B: BlobAccess + ?Sized, V: 'a>(
    blobs: &B,
    flat: impl Iterator<Item = (&'a String, &'a V)>,
    get: impl Fn(&str) -> Option<&'a V>,
    entry: impl Fn(&V) -> Entry,
    missing: &BTreeSet<String>,
    reuse: &DirHashes,
    dirty: Option<&HashSet<String>>,
) -> Result<(BlobHash, DirHashes)> {
    // A directory needs a new node if it is dirty or has no reusable one.
    let needs =
        |d: &str| d.is_empty() || dirty.is_none_or(|s| s.contains(d)) || !reuse.contains_key(d);
    // The children of each directory that needs a node, by directory
    // (an index into `kids`).
    let mut children: HashMap<&str, usize> = HashMap::new();
    let mut kids: Vec<Vec<(&str, Entry)>> = Vec::new();
    let mut dirs: Vec<&str> = vec![""];
    // Siblings are next to each other in path order: the last parent's
    // answer (whether it needs a node, and where its children go) is
    // kept, so most entries cost no hash lookup, and a parent's entry is
    // looked up once per run of its children, not once per child (a
    // binary search per file was the largest part of building the first
    // tree of 1,000,000 files).
    let mut last: Option<(&str, Option<usize>)> = None;
    for (p, v) in flat {
        let e = entry(v);
        let par = relpath::parent(p);
        let at = match last {
            Some((l, at)) if l == par => at,
            _ => {
                let at = if needs(par) {
                    if !par.is_empty() && get(par).map(|v| entry(v).kind) != Some(EntryKind::Dir) {
                        return Err(SnapshotError::Invalid(format!(
                            "internal: manifest entry `{p}` has no parent directory entry"
                        )));
                    }
                    Some(*children.entry(par).or_insert_with(|| {
                        kids.push(Vec::new());
                        kids.len() - 1
                    }))
                } else {
                    None
                };
                last = Some((par, at));
                at
            }
        };
        if let Some(i) = at {
            kids[i].push((p.as_str(), e));
        }
        if e.kind == EntryKind::Dir {
            dirs.push(p.as_str());
        }
    }
    // Deepest first, so every child directory is done before its parent.
    dirs.sort_by_key(|d| {
        std::cmp::Reverse(if d.is_empty() {
            0
        } else {
            d.matches('/').count() + 1
        })
    });
    let mut out: DirHashes = HashMap::with_capacity(dirs.len());
    for d in dirs {
        if !needs(d) {
            if let Some(v) = reuse.get(d) {
                out.insert(d.to_string(), *v);
                continue;
            }
        }
        let these = children
            .get(d)
            .map(|&i| std::mem::take(&mut kids[i]))
            .unwrap_or_default();
        let (mut node, total) = dir_node(these, &out)?;
        if d.is_empty() {
            node.missing = missing.iter().cloned().collect();
        }
        let h = blobs.put(&node.encode())?;
        out.insert(d.to_string(), (h, total));
    }
    let root = out
        .get("")
        .map(|v| v.0)
        .ok_or_else(|| SnapshotError::Invalid("internal: no root".into()))?;
    Ok((root, out))
}

/// The node of a directory whose entries are `kids` (full paths), with
/// the total size under it; its child directories' hashes and sizes come
/// from `built`, which must hold them already.
fn dir_node(mut kids: Vec<(&str, Entry)>, built: &DirHashes) -> Result<(Node, u64)> {
    let mut node = Node::default();
    let mut total = 0u64;
    // Siblings share their parent's prefix, so their paths sort as their
    // names do (and come in that order already from a run in path order:
    // the sort only checks it), without cutting each name out of its path
    // for every comparison.
    kids.sort_by(|a, b| a.0.cmp(b.0));
    for (c, mut e) in kids {
        if e.kind == EntryKind::Dir {
            let (h, s) = built.get(c).copied().ok_or_else(|| {
                SnapshotError::Invalid(format!("internal: directory `{c}` built out of order"))
            })?;
            e.hash = h;
            e.size = s;
        }
        total = total.saturating_add(e.size);
        node.entries.push((relpath::file_name(c).to_string(), e));
    }
    Ok((node, total))
}

/// Every blob reachable from `root`: the nodes themselves, file contents and
/// symlink targets. Used to compute the live set for garbage collection.
pub fn reachable<B: BlobRead + ?Sized>(
    blobs: &B,
    root: &BlobHash,
    out: &mut HashSet<BlobHash>,
    seen_nodes: &mut HashSet<BlobHash>,
) -> Result<()> {
    walk_reachable(blobs, root, out, seen_nodes, None)
}

/// [`reachable`], going on past a blob in the tree that is no manifest
/// node at all (its bytes, verified against their hash, do not even start
/// with `CMN`, the first three bytes of [`NODE_MAGIC`], which a node of any
/// version is taken to share: a file's contents recorded as a
/// checkpoint's `root`).
/// Such a blob is kept in `out` and listed in `not_nodes`; it names no
/// other blob, so nothing the tree reaches is missed. Every other failure
/// (a blob that cannot be read, a node that does not decode) is an error,
/// as then what the node names is unknown.
pub fn reachable_past_non_nodes<B: BlobRead + ?Sized>(
    blobs: &B,
    root: &BlobHash,
    out: &mut HashSet<BlobHash>,
    seen_nodes: &mut HashSet<BlobHash>,
    not_nodes: &mut Vec<BlobHash>,
) -> Result<()> {
    walk_reachable(blobs, root, out, seen_nodes, Some(not_nodes))
}

/// The walk of [`reachable`]; with `not_nodes`, as
/// [`reachable_past_non_nodes`].
fn walk_reachable<B: BlobRead + ?Sized>(
    blobs: &B,
    root: &BlobHash,
    out: &mut HashSet<BlobHash>,
    seen_nodes: &mut HashSet<BlobHash>,
    mut not_nodes: Option<&mut Vec<BlobHash>>,
) -> Result<()> {
    let mut stack = vec![(*root, 0usize)];
    while let Some((h, depth)) = stack.pop() {
        if !seen_nodes.insert(h) {
            continue; // a shared subtree already walked
        }
        out.insert(h);
        let bytes = blobs.get(&h)?;
        if let Some(list) = not_nodes.as_deref_mut() {
            if !bytes.starts_with(&NODE_MAGIC[..3]) {
                list.push(h);
                continue;
            }
        }
        for (_, e) in Node::decode(h, &bytes)?.entries {
            if e.kind == EntryKind::Dir {
                if depth + 1 > MAX_TREE_DEPTH {
                    return Err(SnapshotError::BadManifest {
                        node: h,
                        detail: "tree too deep".into(),
                    });
                }
                stack.push((e.hash, depth + 1));
            } else {
                out.insert(e.hash);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::blobs::MemBlobs;

    fn file(content: &[u8], blobs: &MemBlobs) -> Entry {
        Entry {
            kind: EntryKind::File,
            mode: 0o644,
            size: content.len() as u64,
            hash: blobs.put(content).unwrap(),
        }
    }
    fn dir() -> Entry {
        Entry {
            kind: EntryKind::Dir,
            mode: 0o755,
            size: 0,
            hash: BlobHash::ZERO,
        }
    }

    #[test]
    fn node_round_trip_and_damage() {
        let n = Node {
            entries: vec![
                (
                    "a".into(),
                    Entry {
                        kind: EntryKind::File,
                        mode: 0o755,
                        size: 3,
                        hash: BlobHash::of(b"x"),
                    },
                ),
                (
                    "b".into(),
                    Entry {
                        kind: EntryKind::Symlink,
                        mode: 0,
                        size: 1,
                        hash: BlobHash::of(b"y"),
                    },
                ),
            ],
            missing: vec!["x/y".into()],
        };
        let b = n.encode();
        let h = BlobHash::of(&b);
        assert_eq!(Node::decode(h, &b).unwrap(), n);
        for cut in 0..b.len() {
            assert!(Node::decode(h, &b[..cut]).is_err(), "cut {cut}");
        }
        let mut bad = b.clone();
        bad[0] = b'X';
        assert!(Node::decode(h, &bad)
            .unwrap_err()
            .to_string()
            .contains("bad magic"));
        let unsorted = Node {
            entries: vec![n.entries[1].clone(), n.entries[0].clone()],
            missing: vec![],
        };
        assert!(Node::decode(h, &unsorted.encode_unchecked())
            .unwrap_err()
            .to_string()
            .contains("not sorted"));
        let evil = Node {
            entries: vec![("..".into(), n.entries[0].1)],
            missing: vec![],
        };
        assert!(Node::decode(h, &evil.encode_unchecked()).is_err());
        let evil = Node {
            entries: vec![],
            missing: vec![".git/config".into()],
        };
        assert!(Node::decode(h, &evil.encode_unchecked()).is_err());
    }

    /// The writer asserts what the reader checks: an unsorted node is a
    /// bug caught before it is stored.
    #[test]
    #[should_panic(expected = "not strictly sorted")]
    fn encoding_an_unsorted_node_panics_before_it_is_stored() {
        let e = Entry {
            kind: EntryKind::File,
            mode: 0o644,
            size: 1,
            hash: BlobHash::of(b"x"),
        };
        let n = Node {
            entries: vec![("b".into(), e), ("a".into(), e)],
            missing: vec![],
        };
        let _ = n.encode();
    }

    #[test]
    fn build_list_lookup_and_sharing() {
        let blobs = MemBlobs::new();
        let mut flat = BTreeMap::new();
        flat.insert("a".to_string(), dir());
        flat.insert("a/b".to_string(), dir());
        flat.insert("a/b/f.txt".to_string(), file(b"one", &blobs));
        flat.insert("a/g.txt".to_string(), file(b"two", &blobs));
        flat.insert("a-b".to_string(), file(b"three", &blobs));
        flat.insert("z".to_string(), dir());
        flat.insert("z/h".to_string(), file(b"four", &blobs));
        let missing = BTreeSet::from(["new/x.rs".to_string()]);
        let (root, dirs) = build(&blobs, &flat, &missing, &DirHashes::new(), None).unwrap();
        let m = list(&blobs, &root).unwrap();
        assert_eq!(
            m.entries.keys().collect::<Vec<_>>(),
            flat.keys().collect::<Vec<_>>()
        );
        assert_eq!(m.missing, missing);
        assert_eq!(m.file_count(), 4);
        assert_eq!(m.entries["a"].size, 6);
        assert_eq!(
            lookup(&blobs, &root, "a/b/f.txt").unwrap().unwrap().hash,
            BlobHash::of(b"one")
        );
        assert!(lookup(&blobs, &root, "a/b/nope").unwrap().is_none());
        assert!(lookup(&blobs, &root, "a/g.txt/x").unwrap().is_none());
        let sub = list_under(&blobs, &root, "a/b").unwrap();
        assert_eq!(sub.entries.len(), 2);

        // Change one file: only it and the nodes above it are new.
        let before = blobs.writes();
        flat.insert("a/b/f.txt".to_string(), file(b"one!", &blobs));
        let dirty: HashSet<String> = ["a/b", "a", ""].iter().map(|s| s.to_string()).collect();
        let (root2, dirs2) = build(&blobs, &flat, &missing, &dirs, Some(&dirty)).unwrap();
        assert_ne!(root, root2);
        assert_eq!(
            blobs.writes() - before,
            1 + 3,
            "one file blob + three nodes"
        );
        assert_eq!(dirs["z"], dirs2["z"]);
        // The same tree built from scratch gives the same root.
        let (root3, _) = build(&blobs, &flat, &missing, &DirHashes::new(), None).unwrap();
        assert_eq!(root2, root3);
        let mut live = HashSet::new();
        reachable(&blobs, &root2, &mut live, &mut HashSet::new()).unwrap();
        assert!(live.contains(&BlobHash::of(b"one!")) && !live.contains(&BlobHash::of(b"one")));
    }

    /// An entry whose parent is no directory entry (absent, or a file) is
    /// refused, whether it is the first child of its parent met or one
    /// after a sibling's subtree (the parent is checked once per run of
    /// siblings, not once per child).
    #[test]
    fn an_entry_without_a_parent_directory_is_refused() {
        let blobs = MemBlobs::new();
        let ok = || {
            let mut flat = BTreeMap::new();
            flat.insert("a".to_string(), dir());
            flat.insert("a/b".to_string(), dir());
            flat.insert("a/b/f".to_string(), file(b"f", &blobs));
            flat.insert("a/c".to_string(), file(b"c", &blobs));
            flat
        };
        assert!(build(&blobs, &ok(), &BTreeSet::new(), &DirHashes::new(), None).is_ok());
        let mut no_parent = ok();
        no_parent.insert("q/x".to_string(), file(b"x", &blobs));
        let mut file_parent = ok();
        file_parent.insert("a/c/x".to_string(), file(b"x", &blobs));
        let mut after_subtree = ok();
        after_subtree.remove("a");
        for flat in [no_parent, file_parent, after_subtree] {
            let e = build(&blobs, &flat, &BTreeSet::new(), &DirHashes::new(), None);
            assert!(
                matches!(e, Err(SnapshotError::Invalid(ref m)) if m.contains("no parent directory entry")),
                "{:?}",
                flat.keys().collect::<Vec<_>>()
            );
        }
    }
}
