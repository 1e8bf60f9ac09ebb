//! Capturing the workspace into a manifest tree: the stat cache, the racy
//! mtime rule, parallel hashing, and incremental tree building.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use cairn_codec::{BlobHash, CheckpointCounts};

use crate::blobs::{BlobAccess, BlobRead};
use crate::error::{Result, SnapshotError};
use crate::manifest::{self, DirHashes, Entry, EntryKind, Manifest, Node};
use crate::relpath;
use crate::scan::{self, Found, ScanOut, Stat};
use crate::workspace::{
    write_atomic, LastCapture, Workspace, CLOCK_FILE, MAX_HASH_THREADS, STAT_CACHE_FILE,
};

/// Files up to this size are read into memory and stored with one `put`;
/// larger ones are streamed with `put_file` (which chunks them), so memory
/// stays bounded by threads x this size.
pub const STREAM_THRESHOLD_BYTES: u64 = 4 * 1024 * 1024;

/// Below this many files to hash, threads cost more than they save.
const PARALLEL_MIN_JOBS: usize = 16;

/// The stat cache's format version; a cache of another version is ignored.
const STAT_CACHE_VERSION: u32 = 1;

/// One cached path: its manifest entry and (for files and symlinks) the stat
/// data it was read with.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Cached {
    pub entry: Entry,
    pub stat: Option<Stat>,
}

/// The persistent stat cache: what the last full scan saw, so the next one
/// re-reads only files whose stat data changed (or that were "racy").
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct StatCache {
    pub version: u32,
    /// The file system's clock when the scan that wrote this cache started.
    /// A file whose mtime is not older than this may have been modified in
    /// the same clock tick after it was read: it is "racy" and re-read.
    pub clock_ns: i64,
    pub root: Option<BlobHash>,
    pub entries: BTreeMap<String, Cached>,
    pub dirs: Vec<(String, BlobHash, u64)>,
}

impl StatCache {
    pub fn load(ws: &Workspace) -> StatCache {
        let Ok(b) = std::fs::read(ws.cache_path(STAT_CACHE_FILE)) else {
            return StatCache::default();
        };
        match rmp_serde::from_slice::<StatCache>(&b) {
            Ok(c) if c.version == STAT_CACHE_VERSION => c,
            // A damaged or old cache costs one full re-read, never a wrong checkpoint.
            _ => StatCache::default(),
        }
    }

    pub fn save(&self, ws: &Workspace, durable: bool) -> Result<()> {
        let b = rmp_serde::to_vec(self)
            .map_err(|e| SnapshotError::Invalid(format!("encode stat cache: {e}")))?;
        write_atomic(&ws.cache_path(STAT_CACHE_FILE), &b, durable)
    }

    pub fn dir_hashes(&self) -> DirHashes {
        self.dirs
            .iter()
            .map(|(d, h, s)| (d.clone(), (*h, *s)))
            .collect()
    }

    /// Drops everything that refers to a blob not in `live` (after a gc).
    pub fn retain_live(&mut self, live: &HashSet<BlobHash>) {
        self.entries
            .retain(|_, c| c.entry.kind == EntryKind::Dir || live.contains(&c.entry.hash));
        self.dirs.retain(|(_, h, _)| live.contains(h));
        if self.root.is_some_and(|r| !live.contains(&r)) {
            self.root = None;
        }
    }
}

/// The result of a capture.
#[derive(Debug)]
pub struct Capture {
    /// The manifest root.
    pub root: BlobHash,
    /// The whole flattened manifest (full scans only).
    pub manifest: Option<Manifest>,
    /// Counts for the checkpoint record.
    pub counts: CheckpointCounts,
    pub(crate) new_cache: Option<StatCache>,
    /// The dirty tracked paths this capture read.
    pub(crate) captured_dirty: BTreeSet<String>,
}

impl Capture {
    pub(crate) fn last(&self) -> LastCapture {
        LastCapture {
            root: self.root,
            files: self.counts.files,
        }
    }
}

/// Reads the file system's clock by touching a file in the cache directory.
fn fs_clock(ws: &Workspace) -> Result<i64> {
    let p = ws.cache_path(CLOCK_FILE);
    std::fs::write(&p, b"c").map_err(|e| SnapshotError::io("touch scan clock", &p, e))?;
    let m = std::fs::metadata(&p).map_err(|e| SnapshotError::io("stat scan clock", &p, e))?;
    Ok(Stat::of(&m).mtime_ns)
}

enum Hashed {
    Ok(Entry, Stat),
    Skip(&'static str),
}

fn hash_one<B: BlobAccess + ?Sized>(blobs: &B, root: &Path, f: &Found) -> Result<Hashed> {
    let abs = root.join(&f.rel);
    match f.kind {
        EntryKind::Symlink => {
            let target = match std::fs::read_link(&abs) {
                Ok(t) => t,
                Err(e) => return Ok(Hashed::Skip(scan::skip_reason(&e))),
            };
            let bytes = os_bytes(target.as_os_str());
            let hash = blobs.put(&bytes)?;
            Ok(Hashed::Ok(
                Entry {
                    kind: EntryKind::Symlink,
                    mode: 0,
                    size: bytes.len() as u64,
                    hash,
                },
                f.stat,
            ))
        }
        EntryKind::File => {
            let mut file = match scan::open_nofollow(&abs) {
                Ok(x) => x,
                Err(e) => return Ok(Hashed::Skip(scan::skip_reason(&e))),
            };
            let m = match file.metadata() {
                Ok(m) if m.is_file() => m,
                Ok(_) => return Ok(Hashed::Skip(scan::reason::VANISHED)),
                Err(e) => return Ok(Hashed::Skip(scan::skip_reason(&e))),
            };
            // The stat recorded is the one taken before reading: a change
            // during the read shows up as a different stat next time.
            let stat = Stat::of(&m);
            let (hash, size) = if stat.size > STREAM_THRESHOLD_BYTES {
                drop(file);
                blobs.put_file(&abs)?
            } else {
                let mut buf = Vec::with_capacity(stat.size as usize);
                if let Err(e) = file.read_to_end(&mut buf) {
                    return Ok(Hashed::Skip(scan::skip_reason(&e)));
                }
                (blobs.put(&buf)?, buf.len() as u64)
            };
            Ok(Hashed::Ok(
                Entry {
                    kind: EntryKind::File,
                    mode: stat.perm(),
                    size,
                    hash,
                },
                stat,
            ))
        }
        EntryKind::Dir => Err(SnapshotError::Invalid(
            "internal: hashing a directory".into(),
        )),
    }
}

#[cfg(unix)]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(not(unix))]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    s.to_string_lossy().as_bytes().to_vec()
}

/// Hashes (and stores) the given files, on several threads when there are many.
fn hash_all<B: BlobAccess + ?Sized>(
    blobs: &B,
    ws: &Workspace,
    jobs: &[&Found],
) -> Result<Vec<Hashed>> {
    let want = match ws.options().hash_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let threads = want.clamp(1, MAX_HASH_THREADS);
    let root = ws.root();
    if threads == 1 || jobs.len() < PARALLEL_MIN_JOBS {
        return jobs.iter().map(|f| hash_one(blobs, root, f)).collect();
    }
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<Hashed>> = (0..jobs.len()).map(|_| None).collect();
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<Vec<(usize, Hashed)>> {
                    let mut got = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(f) = jobs.get(i) else { break };
                        got.push((i, hash_one(blobs, root, f)?));
                    }
                    Ok(got)
                })
            })
            .collect();
        for h in handles {
            let got = h
                .join()
                .map_err(|_| SnapshotError::Invalid("a file-hashing thread panicked".into()))??;
            for (i, r) in got {
                results[i] = Some(r);
            }
        }
        Ok(())
    })?;
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| SnapshotError::Invalid("internal: a file was not hashed".into())))
        .collect()
}

/// Marks `p`'s parent and every ancestor dirty.
fn mark_ancestors(p: &str, dirty: &mut HashSet<String>) {
    let mut cur = p;
    while !cur.is_empty() {
        cur = relpath::parent(cur);
        if !dirty.insert(cur.to_string()) {
            break; // already marked, and so are its ancestors
        }
    }
}

fn dir_entry(mode: u32) -> Entry {
    Entry {
        kind: EntryKind::Dir,
        mode,
        size: 0,
        hash: BlobHash::ZERO,
    }
}

/// A full capture: walk, re-read only files whose stat changed (or racy
/// ones), store new contents and the directory nodes that changed.
pub(crate) fn capture_full<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    tracked: &BTreeSet<String>,
    dirty_now: &BTreeSet<String>,
) -> Result<Capture> {
    let clock_ns = fs_clock(ws)?;
    let cache = StatCache::load(ws);
    let ScanOut {
        leaves,
        dirs,
        missing,
        mut skipped,
    } = scan::scan_full(ws, tracked)?;

    let mut flat: BTreeMap<String, Entry> = BTreeMap::new();
    let mut stats: HashMap<String, Stat> = HashMap::with_capacity(leaves.len());
    for (d, mode) in &dirs {
        flat.insert(d.clone(), dir_entry(*mode));
    }
    let mut jobs: Vec<&Found> = Vec::new();
    for f in &leaves {
        match cache.entries.get(&f.rel) {
            Some(c)
                if c.stat == Some(f.stat)
                    && c.entry.kind == f.kind
                    && f.stat.mtime_ns < cache.clock_ns =>
            {
                flat.insert(f.rel.clone(), c.entry);
                stats.insert(f.rel.clone(), f.stat);
            }
            _ => jobs.push(f),
        }
    }
    let hashed = hash_all(blobs, ws, &jobs)?;
    for (f, h) in jobs.iter().zip(hashed) {
        match h {
            Hashed::Ok(e, st) => {
                flat.insert(f.rel.clone(), e);
                stats.insert(f.rel.clone(), st);
            }
            Hashed::Skip(why) => *skipped.entry(why.to_string()).or_default() += 1,
        }
    }

    // What changed since the cached scan: counts, and which directories need new nodes.
    let mut changed = 0u64;
    let mut dirty: HashSet<String> = HashSet::new();
    for (p, e) in &flat {
        let old = cache.entries.get(p).map(|c| c.entry);
        let same = match old {
            Some(o) if e.kind == EntryKind::Dir => o.kind == EntryKind::Dir && o.mode == e.mode,
            Some(o) => o == *e,
            None => false,
        };
        if !same {
            if e.is_leaf() {
                changed += 1;
            }
            mark_ancestors(p, &mut dirty);
        }
    }
    for (p, c) in &cache.entries {
        if !flat.contains_key(p) {
            if c.entry.is_leaf() {
                changed += 1;
            }
            mark_ancestors(p, &mut dirty);
        }
    }
    let reuse = cache.dir_hashes();
    let dirty_opt = if cache.root.is_some() {
        Some(&dirty)
    } else {
        None
    };
    let (root, dir_hashes) = manifest::build(blobs, &flat, &missing, &reuse, dirty_opt)?;
    for (d, (h, s)) in &dir_hashes {
        if let Some(e) = flat.get_mut(d) {
            e.hash = *h;
            e.size = *s;
        }
    }
    let files = flat.values().filter(|e| e.is_leaf()).count() as u64;
    let new_cache = StatCache {
        version: STAT_CACHE_VERSION,
        clock_ns,
        root: Some(root),
        entries: flat
            .iter()
            .map(|(p, e)| {
                (
                    p.clone(),
                    Cached {
                        entry: *e,
                        stat: stats.get(p).copied(),
                    },
                )
            })
            .collect(),
        dirs: dir_hashes
            .into_iter()
            .map(|(d, (h, s))| (d, h, s))
            .collect(),
    };
    Ok(Capture {
        root,
        manifest: Some(Manifest {
            entries: flat,
            missing,
        }),
        counts: CheckpointCounts {
            files,
            changed,
            skipped,
        },
        new_cache: Some(new_cache),
        captured_dirty: dirty_now.clone(),
    })
}

/// A tracked-only capture: re-read only the dirty tracked paths and patch
/// the previous tree along the paths from them to the root.
pub(crate) fn capture_tracked<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    last: &LastCapture,
    dirty_now: &BTreeSet<String>,
) -> Result<Capture> {
    let paths = top_most(dirty_now.iter());
    let out = scan::scan_paths(ws, &paths)?;
    patch(ws, blobs, last, &paths, out, dirty_now, None)
}

/// The paths of `all` that are not below another one of them (a changed
/// directory covers everything under it).
fn top_most<'a>(all: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    // Sorted order puts `a` before `a/b` (and `a-b`, `a.b` between them
    // never start with `a/`), so each path only needs the last kept one.
    let sorted: BTreeSet<&String> = all.collect();
    let mut last: Option<&str> = None;
    for p in sorted {
        if let Some(l) = last {
            if p.len() > l.len() && p.starts_with(l) && p.as_bytes()[l.len()] == b'/' {
                continue;
            }
        }
        paths.insert(p.clone());
        last = Some(p.as_str());
    }
    paths
}

/// A watched capture: re-read the paths the file watcher reported (and the
/// dirty tracked paths) the way a full scan would see them, and patch the
/// previous tree along the paths from them to the root. Gives the same
/// tree as a full scan (tested), without the walk.
pub(crate) fn capture_watched<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    last: &LastCapture,
    changed: &BTreeSet<String>,
    tracked: &BTreeSet<String>,
    dirty_now: &BTreeSet<String>,
) -> Result<Capture> {
    let paths = top_most(changed.iter().chain(dirty_now.iter()));
    let mut out = ScanOut::default();
    for p in &paths {
        scan::scan_subtree(ws, p, tracked, &mut out)?;
    }
    patch(ws, blobs, last, &paths, out, dirty_now, Some(tracked))
}

/// Patches the tree `last` with what was found at `paths`. With `tracked`
/// (a watched capture), the missing-path list is updated for every tracked
/// path at or below the re-read ones; otherwise for the re-read ones.
fn patch<B: BlobAccess + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    last: &LastCapture,
    paths: &BTreeSet<String>,
    out: ScanOut,
    dirty_now: &BTreeSet<String>,
    tracked: Option<&BTreeSet<String>>,
) -> Result<Capture> {
    let ScanOut {
        leaves,
        dirs,
        missing,
        mut skipped,
    } = out;
    let refs: Vec<&Found> = leaves.iter().collect();
    let hashed = hash_all(blobs, ws, &refs)?;
    let mut flat: BTreeMap<String, Entry> = BTreeMap::new();
    for (f, h) in leaves.iter().zip(hashed) {
        match h {
            Hashed::Ok(e, _) => {
                flat.insert(f.rel.clone(), e);
            }
            Hashed::Skip(why) => *skipped.entry(why.to_string()).or_default() += 1,
        }
    }
    let dir_modes: HashMap<&str, u32> = dirs.iter().map(|(d, m)| (d.as_str(), *m)).collect();
    for (d, m) in &dirs {
        flat.insert(d.clone(), dir_entry(*m));
    }

    // A directory created on the way to a re-read path (set_path) takes its
    // mode from the scan, or else from the disk.
    let root_dir = ws.root();
    let dir_mode = |d: &str| {
        dir_modes.get(d).copied().or_else(|| {
            std::fs::symlink_metadata(root_dir.join(d))
                .ok()
                .map(|m| Stat::of(&m).perm())
        })
    };
    let mut root = last.root;
    let mut files = last.files as i64;
    let mut changed = 0u64;
    for p in paths {
        let old = manifest::list_under(blobs, &root, p)?;
        let new: Option<Entry> = match flat.get(p) {
            None => None,
            Some(e) if e.kind != EntryKind::Dir => Some(*e),
            Some(_) => {
                // Build the subtree re-rooted at `p`.
                let prefix = format!("{p}/");
                let sub: BTreeMap<String, Entry> = flat
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, e)| (k[prefix.len()..].to_string(), *e))
                    .collect();
                let (h, dh) =
                    manifest::build(blobs, &sub, &BTreeSet::new(), &DirHashes::new(), None)?;
                let size = dh.get("").map_or(0, |v| v.1);
                Some(Entry {
                    kind: EntryKind::Dir,
                    mode: dir_modes.get(p.as_str()).copied().unwrap_or(0o755),
                    size,
                    hash: h,
                })
            }
        };
        let new_files: BTreeMap<&str, Entry> = flat
            .iter()
            .filter(|(k, e)| e.is_leaf() && relpath::in_scope(k, std::slice::from_ref(p)))
            .map(|(k, e)| (k.as_str(), *e))
            .collect();
        let old_files: BTreeMap<&str, Entry> = old.files().map(|(k, e)| (k.as_str(), *e)).collect();
        files += new_files.len() as i64 - old_files.len() as i64;
        changed += new_files
            .iter()
            .filter(|(k, e)| old_files.get(*k) != Some(*e))
            .count() as u64;
        changed += old_files
            .keys()
            .filter(|k| !new_files.contains_key(*k))
            .count() as u64;
        root = set_path(blobs, root, p, new, &dir_mode)?;
    }
    // The root's list of tracked paths that do not exist.
    let mut node = manifest::read_node(blobs, &root)?;
    let mut miss: BTreeSet<String> = node.missing.iter().cloned().collect();
    let concerned: Vec<&String> = match tracked {
        None => paths.iter().collect(),
        Some(t) => t
            .iter()
            .filter(|t| {
                paths
                    .iter()
                    .any(|p| relpath::in_scope(t, std::slice::from_ref(p)))
            })
            .collect(),
    };
    for p in concerned {
        if missing.contains(p) {
            miss.insert(p.clone());
        } else {
            miss.remove(p);
        }
    }
    if node.missing.iter().ne(miss.iter()) {
        node.missing = miss.into_iter().collect();
        root = blobs.put(&node.encode())?;
    }
    Ok(Capture {
        root,
        manifest: None,
        counts: CheckpointCounts {
            files: files.max(0) as u64,
            changed,
            skipped,
        },
        new_cache: None,
        captured_dirty: dirty_now.clone(),
    })
}

fn node_set(node: &mut Node, name: &str, e: Option<Entry>) {
    match node
        .entries
        .binary_search_by(|(n, _)| n.as_bytes().cmp(name.as_bytes()))
    {
        Ok(i) => match e {
            Some(e) => node.entries[i].1 = e,
            None => {
                node.entries.remove(i);
            }
        },
        Err(i) => {
            if let Some(e) = e {
                node.entries.insert(i, (name.to_string(), e));
            }
        }
    }
}

/// Sets (or removes, with `None`) the entry at `path` in the tree `root`,
/// writing new nodes only along the path; returns the new root. Missing
/// intermediate directories are created with the mode `dir_mode` gives.
pub(crate) fn set_path<B: BlobAccess + ?Sized>(
    blobs: &B,
    root: BlobHash,
    path: &str,
    new: Option<Entry>,
    dir_mode: &dyn Fn(&str) -> Option<u32>,
) -> Result<BlobHash> {
    let comps: Vec<&str> = path.split('/').collect();
    let mut nodes: Vec<Node> = vec![manifest::read_node(blobs, &root)?];
    let mut modes: Vec<u32> = Vec::new();
    for i in 0..comps.len() - 1 {
        let dir = comps[..=i].join("/");
        match nodes[i].get(comps[i]).copied() {
            Some(e) if e.kind == EntryKind::Dir => {
                nodes.push(manifest::read_node(blobs, &e.hash)?);
                modes.push(dir_mode(&dir).unwrap_or(e.mode));
            }
            _ => {
                if new.is_none() {
                    return Ok(root); // nothing there to remove
                }
                nodes.push(Node::default());
                modes.push(dir_mode(&dir).unwrap_or(0o755));
            }
        }
    }
    let mut cur = new;
    for i in (0..comps.len()).rev() {
        let node = &mut nodes[i];
        node_set(node, comps[i], cur);
        let h = blobs.put(&node.encode())?;
        if i == 0 {
            return Ok(h);
        }
        let size = node
            .entries
            .iter()
            .map(|(_, e)| e.size)
            .fold(0u64, u64::saturating_add);
        cur = Some(Entry {
            kind: EntryKind::Dir,
            mode: modes[i - 1],
            size,
            hash: h,
        });
    }
    Ok(root)
}

/// Reads the whole manifest of a checkpoint (for rollback and queries).
pub fn read_manifest<B: BlobRead + ?Sized>(blobs: &B, root: &BlobHash) -> Result<Manifest> {
    manifest::list(blobs, root)
}
