//! Rollback: the pure plan (what to write, delete and create to turn the
//! current manifest into the target's, optionally limited to some paths) and
//! the code that carries it out on disk, safely.
//!
//! Safety rules, each enforced here and not only assumed of the manifests:
//! nothing under `.git` or `.cairn` (or an excluded path) is written or
//! deleted; only paths the current manifest holds are deleted (so a file
//! that is ignored and was never tracked is never touched); nothing is
//! written through a symlinked directory; every file is written to a
//! temporary file in its own directory and renamed into place.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::blobs::BlobRead;
use crate::durable::sync_dir;
use crate::error::{Result, SnapshotError};
use crate::manifest::{self, Entry, EntryKind, Manifest};
use crate::relpath::{self, check_manifest_path, in_scope};
use crate::whole_fs::WholeFs;
use crate::workspace::Workspace;

/// One file or symlink to (re)write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Workspace-relative path.
    pub path: String,
    /// What it must become.
    pub entry: Entry,
    /// The contents are already right; only the permission bits differ.
    pub mode_only: bool,
}

/// What a rollback will do, in the order it does it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Files and symlinks to delete.
    pub delete: Vec<String>,
    /// Directories to remove if they are empty once the deletes are done
    /// (deepest first); a directory still holding ignored files stays.
    pub remove_dirs: Vec<String>,
    /// Directories to create (parents first), with their permission bits.
    pub create_dirs: Vec<(String, u32)>,
    /// Files and symlinks to write.
    pub write: Vec<Write>,
    /// Directories in both trees whose permission bits differ, with the
    /// target's (set once everything under them is written).
    pub dir_modes: Vec<(String, u32)>,
}

impl Plan {
    /// True if the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.delete.is_empty()
            && self.remove_dirs.is_empty()
            && self.create_dirs.is_empty()
            && self.write.is_empty()
            && self.dir_modes.is_empty()
    }
}

fn depth(p: &str) -> usize {
    p.matches('/').count()
}

/// Computes the plan turning `current` into `target`, limited to paths at
/// or under `scope` (empty: everything). Pure; every target path is checked
/// (a manifest is input too).
pub fn plan(current: &Manifest, target: &Manifest, scope: &[String]) -> Result<Plan> {
    plan_pruned(current, target, scope, &HashSet::new())
}

fn under_same(p: &str, same: &HashSet<String>) -> bool {
    if same.is_empty() {
        return false;
    }
    let mut a = relpath::parent(p);
    while !a.is_empty() {
        if same.contains(a) {
            return true;
        }
        a = relpath::parent(a);
    }
    false
}

/// Reads the target tree, descending only into directories whose node
/// differs from the current manifest's: identical subtrees (usually almost
/// all of them) are not read at all and are returned in the second set.
pub fn load_target<B: BlobRead + ?Sized>(
    blobs: &B,
    root: &cairn_codec::BlobHash,
    current: &Manifest,
) -> Result<(Manifest, HashSet<String>)> {
    let node = manifest::read_node(blobs, root)?;
    let mut out = Manifest {
        missing: node.missing.iter().cloned().collect(),
        ..Manifest::default()
    };
    let mut same = HashSet::new();
    let mut stack = vec![(String::new(), node, 0usize)];
    while let Some((dir, node, depth)) = stack.pop() {
        for (name, e) in node.entries {
            let p = relpath::join(&dir, &name);
            if e.kind == EntryKind::Dir {
                let c = current.entries.get(&p);
                if c.is_some_and(|c| c.kind == EntryKind::Dir && c.hash == e.hash) {
                    same.insert(p.clone());
                } else {
                    if depth + 1 > manifest::MAX_TREE_DEPTH {
                        return Err(SnapshotError::BadManifest {
                            node: e.hash,
                            detail: "tree too deep".into(),
                        });
                    }
                    stack.push((p.clone(), manifest::read_node(blobs, &e.hash)?, depth + 1));
                }
            }
            out.entries.insert(p, e);
        }
    }
    Ok((out, same))
}

/// Reads the two trees side by side, descending only into directories
/// whose nodes differ: returns the entries of each tree in the differing
/// parts (with every directory on the way to them) and the directories
/// whose subtrees are identical, ready for [`plan_pruned`]. A rollback of a
/// few files reads a few nodes, whatever the size of the tree.
pub fn diff_trees<B: BlobRead + ?Sized>(
    blobs: &B,
    current: &cairn_codec::BlobHash,
    target: &cairn_codec::BlobHash,
) -> Result<(Manifest, Manifest, HashSet<String>)> {
    let (cn, tn) = (
        manifest::read_node(blobs, current)?,
        manifest::read_node(blobs, target)?,
    );
    let mut cur = Manifest {
        missing: cn.missing.iter().cloned().collect(),
        ..Manifest::default()
    };
    let mut tgt = Manifest {
        missing: tn.missing.iter().cloned().collect(),
        ..Manifest::default()
    };
    let mut same = HashSet::new();
    if current == target {
        return Ok((cur, tgt, same));
    }
    let mut stack = vec![(String::new(), Some(cn), Some(tn), 0usize)];
    while let Some((dir, c, t, depth)) = stack.pop() {
        let c = c.map(|n| n.entries).unwrap_or_default();
        let t = t.map(|n| n.entries).unwrap_or_default();
        let mut names: BTreeMap<String, (Option<Entry>, Option<Entry>)> = BTreeMap::new();
        for (n, e) in c {
            names.entry(n).or_default().0 = Some(e);
        }
        for (n, e) in t {
            names.entry(n).or_default().1 = Some(e);
        }
        for (name, (ce, te)) in names {
            let p = relpath::join(&dir, &name);
            let cdir = ce.filter(|e| e.kind == EntryKind::Dir);
            let tdir = te.filter(|e| e.kind == EntryKind::Dir);
            if let (Some(a), Some(b)) = (cdir, tdir) {
                if a.hash == b.hash {
                    same.insert(p.clone());
                }
            }
            if (cdir.is_some() || tdir.is_some()) && !same.contains(&p) {
                if depth + 1 > manifest::MAX_TREE_DEPTH {
                    return Err(SnapshotError::BadManifest {
                        node: cdir.or(tdir).map_or(*target, |e| e.hash),
                        detail: "tree too deep".into(),
                    });
                }
                let cnode = cdir
                    .map(|e| manifest::read_node(blobs, &e.hash))
                    .transpose()?;
                let tnode = tdir
                    .map(|e| manifest::read_node(blobs, &e.hash))
                    .transpose()?;
                stack.push((p.clone(), cnode, tnode, depth + 1));
            }
            if let Some(e) = ce {
                cur.entries.insert(p.clone(), e);
            }
            if let Some(e) = te {
                tgt.entries.insert(p, e);
            }
        }
    }
    Ok((cur, tgt, same))
}

/// [`plan`], skipping everything under the directories in `same` (whose
/// subtrees are identical in both manifests; see [`load_target`]).
pub fn plan_pruned(
    current: &Manifest,
    target: &Manifest,
    scope: &[String],
    same: &HashSet<String>,
) -> Result<Plan> {
    let cur = &current.entries;
    let tgt = &target.entries;
    let mut parts = PlanParts::default();

    // A manifest written before nested stores were skipped may list one
    // (`sub/.cairn/...`): it is left as it is, never deleted or replaced.
    // A directory named `.cairn` on either side is a store: left alone
    // (a file of that name is content).
    let store_dir = |p: &str| {
        relpath::under_store_dir(p)
            || (relpath::is_store_dir_name(p)
                && [cur.get(p), tgt.get(p)]
                    .iter()
                    .flatten()
                    .any(|e| e.kind == EntryKind::Dir))
    };
    for (p, e) in cur {
        if !in_scope(p, scope) || under_same(p, same) || store_dir(p) {
            continue;
        }
        parts.leave(p, e, tgt.get(p));
    }
    for (p, t) in tgt {
        if !in_scope(p, scope) || under_same(p, same) || store_dir(p) {
            continue;
        }
        check_manifest_path(p)?;
        parts.arrive(p, t, cur.get(p));
        parts.make_way(p, cur, tgt);
    }
    Ok(parts.into_plan())
}

/// A [`Plan`] being built, its parts in the order that makes it.
#[derive(Default)]
struct PlanParts {
    delete: BTreeSet<String>,
    remove_dirs: BTreeSet<String>,
    create_dirs: BTreeMap<String, u32>,
    write: Vec<Write>,
    dir_modes: Vec<(String, u32)>,
}

impl PlanParts {
    /// The current entry `e` at `p` when the target holds `t` there.
    fn leave(&mut self, p: &str, e: &Entry, t: Option<&Entry>) {
        match (e.kind, t.map(|t| t.kind)) {
            (EntryKind::Dir, Some(EntryKind::Dir)) => {}
            (EntryKind::Dir, _) => {
                self.remove_dirs.insert(p.to_string());
            }
            // A leaf replaced by another leaf is renamed over; no delete needed.
            (_, Some(EntryKind::File | EntryKind::Symlink)) => {}
            (_, _) => {
                self.delete.insert(p.to_string());
            }
        }
    }

    /// The target entry `t` at `p` when the current tree holds `c` there.
    fn arrive(&mut self, p: &str, t: &Entry, c: Option<&Entry>) {
        match t.kind {
            EntryKind::Dir => match c {
                Some(c) if c.kind == EntryKind::Dir => {
                    if c.mode != t.mode {
                        self.dir_modes.push((p.to_string(), t.mode));
                    }
                }
                _ => {
                    self.create_dirs.insert(p.to_string(), t.mode);
                }
            },
            _ => {
                let same_contents = c.is_some_and(|c| c.kind == t.kind && c.hash == t.hash);
                if same_contents && c.is_some_and(|c| c.mode == t.mode) {
                    return;
                }
                self.write.push(Write {
                    path: p.to_string(),
                    entry: *t,
                    mode_only: same_contents && t.kind == EntryKind::File,
                });
            }
        }
    }

    /// Parents of the target path `p` outside the scope may be missing too
    /// (a path-scoped rollback of a file in a deleted directory), or be a
    /// file now.
    fn make_way(&mut self, p: &str, cur: &BTreeMap<String, Entry>, tgt: &BTreeMap<String, Entry>) {
        let mut a = relpath::parent(p);
        while !a.is_empty() {
            match cur.get(a).map(|c| c.kind) {
                Some(EntryKind::Dir) => break,
                Some(_) => {
                    self.delete.insert(a.to_string());
                    self.create_dirs
                        .insert(a.to_string(), tgt.get(a).map_or(0o755, |e| e.mode));
                }
                None => {
                    self.create_dirs
                        .insert(a.to_string(), tgt.get(a).map_or(0o755, |e| e.mode));
                }
            }
            a = relpath::parent(a);
        }
    }

    fn into_plan(self) -> Plan {
        let mut remove_dirs: Vec<String> = self.remove_dirs.into_iter().collect();
        remove_dirs.sort_by_key(|d| std::cmp::Reverse(depth(d)));
        Plan {
            delete: self.delete.into_iter().collect(),
            remove_dirs,
            // BTreeMap order puts every parent before its children.
            create_dirs: self.create_dirs.into_iter().collect(),
            write: self.write,
            dir_modes: self.dir_modes,
        }
    }
}

/// A path a rollback leaves as it is, and why (serialised as
/// `{"path", "why"}` in the `rollback` record's `meta.kept` and the CLI's
/// JSON).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Kept {
    /// Workspace-relative path.
    pub path: String,
    /// Why changing it could not be undone.
    pub why: String,
}

/// Takes out of `plan` the deletion of every file the target checkpoint
/// did not capture (`not_captured`: too large or unreadable then, so
/// absent from its tree although it existed): the rollback cannot know
/// what it held then, and leaves it as it is (listed with the reason).
pub fn keep_not_captured_at_target(
    plan: &mut Plan,
    not_captured: &[(String, String)],
    target: &str,
) -> Vec<Kept> {
    let mut kept = Vec::new();
    plan.delete
        .retain(|p| match not_captured.iter().find(|(n, _)| n == p) {
            Some((_, why)) => {
                kept.push(Kept {
                    path: p.clone(),
                    why: format!(
                        "{target} did not capture it ({}): what it held then is unknown",
                        why.replace('_', " ")
                    ),
                });
                false
            }
            None => true,
        });
    if !kept.is_empty() {
        // A directory holding a kept file is not empty: it stays.
        plan.remove_dirs
            .retain(|d| !kept.iter().any(|k| relpath::covers(d, &k.path)));
    }
    kept
}

/// Takes out of `plan` every change that would destroy something on disk
/// that `current` (the tree the undo point captured) does not hold, and
/// returns those paths: a rollback must never change what its undo point
/// cannot bring back.
///
/// Two cases, both checked against the disk:
/// - a file or symlink to write (or a directory to create) where the
///   current tree has nothing, but the disk has a file, symlink or
///   directory: one the checkpoint skipped (ignored, too large,
///   unreadable) or could not see (a FIFO, socket or device node holds no
///   data, and is replaced);
/// - a directory of the current tree to replace by a file or symlink that
///   holds something the current tree does not (an ignored build output,
///   say): the directory could not be removed, and the rollback would stop
///   part way.
///
/// A kept path keeps everything under it as it is, too.
pub fn keep_uncaptured(ws: &Workspace, current: &Manifest, plan: &mut Plan) -> Vec<Kept> {
    let cur = &current.entries;
    let mut kept: Vec<Kept> = Vec::new();
    // Each path the plan writes (false) or creates as a directory (true).
    let candidates = plan
        .write
        .iter()
        .map(|w| (w.path.as_str(), false))
        .chain(plan.create_dirs.iter().map(|d| (d.0.as_str(), true)));
    for (p, creates_dir) in candidates {
        // Only a path the current tree lacks, or holds as a directory, can
        // hide something uncaptured: no disk access for the rest (most of
        // a rollback's writes are files the current tree holds).
        let now = cur.get(p).map(|e| e.kind);
        if !matches!(now, None | Some(EntryKind::Dir))
            || kept
                .iter()
                .any(|k| in_scope(p, std::slice::from_ref(&k.path)))
            || under_current_leaf(cur, p)
        {
            continue;
        }
        if let Some(why) = why_keep(ws, cur, p, now, creates_dir) {
            kept.push(Kept {
                path: p.to_string(),
                why,
            });
        }
    }
    if kept.is_empty() {
        return kept;
    }
    let under_kept = |p: &str| {
        kept.iter()
            .any(|k| in_scope(p, std::slice::from_ref(&k.path)))
    };
    plan.write.retain(|w| !under_kept(&w.path));
    plan.create_dirs.retain(|d| !under_kept(&d.0));
    plan.delete.retain(|d| !under_kept(d));
    plan.remove_dirs.retain(|d| !under_kept(d));
    kept
}

/// True when `p` is under a path the current tree holds as a symlink or a
/// file (which the plan replaces by a directory): the disk path leads out
/// of the workspace or nowhere, so nothing of the workspace is there to
/// lose.
fn under_current_leaf(cur: &BTreeMap<String, Entry>, p: &str) -> bool {
    let mut a = relpath::parent(p);
    let mut through_leaf = false;
    while !a.is_empty() && !through_leaf {
        through_leaf = cur.get(a).is_some_and(|e| e.kind != EntryKind::Dir);
        a = relpath::parent(a);
    }
    through_leaf
}

/// Why the plan must leave `p` as it is (see [`keep_uncaptured`]), looking
/// at the disk: `now` is what the current tree holds there (nothing or a
/// directory), `creates_dir` whether the plan makes it a directory.
fn why_keep(
    ws: &Workspace,
    cur: &BTreeMap<String, Entry>,
    p: &str,
    now: Option<EntryKind>,
    creates_dir: bool,
) -> Option<String> {
    let abs = ws.root().join(p);
    let meta = match std::fs::symlink_metadata(&abs) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None, // nothing to lose
        // An ancestor on disk is not a directory (a FIFO, say, that the
        // plan replaces by one): nothing is at this path. The ancestor
        // is a candidate of its own, kept if it holds something.
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return None,
        Err(e) => {
            // Under a directory this user may not search (mode 000): what
            // is there cannot be seen, so the undo point does not hold it.
            return Some(format!("cannot be looked at ({e}): the undo point does not hold what is there, so overwriting it could not be undone"));
        }
    };
    let ft = meta.file_type();
    if !(ft.is_file() || ft.is_dir() || ft.is_symlink()) {
        return None; // a FIFO, socket or device holds no data to lose
    }
    match now {
        // A directory to create over a directory is no change.
        None if ft.is_dir() && creates_dir => None,
        None => Some(uncaptured_reason(ws, &abs, &meta)),
        Some(_) if ft.is_dir() && !creates_dir => untracked_inside(ws, p, cur).map(|inner| {
            format!("the directory holds `{inner}`, which the undo point does not (ignored or skipped), so it cannot become a file")
        }),
        Some(_) => None,
    }
}

/// Why the checkpoint did not capture `abs`, which is on disk.
fn uncaptured_reason(ws: &Workspace, abs: &Path, meta: &std::fs::Metadata) -> String {
    let ft = meta.file_type();
    let what = if ft.is_file() && meta.len() > ws.options().max_file_bytes {
        "too large for a checkpoint"
    } else if ft.is_file() && std::fs::File::open(abs).is_err() {
        "unreadable"
    } else if ft.is_dir() {
        "a directory the checkpoint did not capture (ignored or excluded)"
    } else {
        "ignored or excluded"
    };
    format!("{what}: the undo point does not hold it, so overwriting it could not be undone")
}

/// Some path under the directory `dir` on disk that `cur` does not hold.
fn untracked_inside(ws: &Workspace, dir: &str, cur: &BTreeMap<String, Entry>) -> Option<String> {
    let mut stack = vec![dir.to_string()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(ws.root().join(&d)) else {
            return Some(d); // cannot look inside: assume the worst
        };
        for entry in rd.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Some(format!("{d}/{}", name.to_string_lossy()));
            };
            let rel = format!("{d}/{name}");
            match cur.get(&rel).map(|e| e.kind) {
                None => return Some(rel),
                Some(EntryKind::Dir) if entry.file_type().is_ok_and(|t| t.is_dir()) => {
                    stack.push(rel)
                }
                Some(_) => {}
            }
        }
    }
    None
}

/// The directories whose entries a plan changes (the parents of what it
/// writes, deletes, creates and removes), parents of created directories
/// included; the root is `""`.
fn dirs_changed(plan: &Plan) -> BTreeSet<&str> {
    plan.write
        .iter()
        .map(|w| w.path.as_str())
        .chain(plan.delete.iter().map(String::as_str))
        .chain(plan.create_dirs.iter().map(|d| d.0.as_str()))
        .chain(plan.remove_dirs.iter().map(String::as_str))
        .map(relpath::parent)
        .collect()
}

/// True if this process may create and remove entries in the directory
/// `abs` (write and search permission, as `access(2)` decides: always for
/// root).
#[cfg(unix)]
fn may_write_into(abs: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(abs.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

#[cfg(not(unix))]
fn may_write_into(_abs: &Path) -> bool {
    true
}

/// What [`apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Files and symlinks written (or whose mode was restored).
    pub written: Vec<String>,
    /// Files and symlinks deleted.
    pub deleted: Vec<String>,
    /// Directories created.
    pub created_dirs: Vec<String>,
    /// Directories removed (they were empty and the target did not have them).
    pub removed_dirs: Vec<String>,
    /// Directories that were there before and stay, whose permission bits
    /// were restored.
    pub dir_modes: Vec<String>,
}

struct Guard<'a> {
    ws: &'a Workspace,
    /// Directories checked to be real directories (not symlinks) this run.
    checked: HashSet<String>,
}

impl Guard<'_> {
    fn abs(&self, rel: &str) -> PathBuf {
        self.ws.root().join(rel)
    }

    /// Refuses protected paths and paths whose parent directories are not
    /// real directories inside the workspace.
    fn check(&mut self, rel: &str) -> Result<PathBuf> {
        check_manifest_path(rel)?;
        if self.ws.is_excluded(rel) {
            return Err(SnapshotError::bad_path(
                rel,
                "the path is excluded from checkpoints",
            ));
        }
        let mut anc = Vec::new();
        let mut a = relpath::parent(rel);
        while !a.is_empty() && !self.checked.contains(a) {
            anc.push(a);
            a = relpath::parent(a);
        }
        for a in anc.into_iter().rev() {
            let abs = self.abs(a);
            match std::fs::symlink_metadata(&abs) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(SnapshotError::bad_path(
                        rel,
                        format!("`{a}` is a symlink; cairn never writes through a symlinked directory (it may point outside the workspace)"),
                    ))
                }
                Ok(m) if m.is_dir() => {
                    self.checked.insert(a.to_string());
                }
                Ok(_) => {
                    return Err(SnapshotError::bad_path(rel, format!("`{a}` is not a directory")))
                }
                Err(e) => return Err(SnapshotError::io("check parent directory", abs, e)),
            }
        }
        Ok(self.abs(rel))
    }
}

/// True for a FIFO, socket or device node: nothing a checkpoint holds,
/// and nothing a rollback loses by replacing it.
fn is_special(m: &std::fs::Metadata) -> bool {
    let ft = m.file_type();
    !(ft.is_file() || ft.is_dir() || ft.is_symlink())
}

/// Checks, before anything changes, what applying `plan` would find on
/// disk and refuse part way: a path under a symlinked directory or under
/// a file that stays, or a file (neither deleted by the plan nor a FIFO,
/// socket or device, which are replaced) where a directory is to be
/// created. A dry run and the real run both call it, so a dry run never
/// promises what the rollback then refuses, and a rollback that would
/// stop on one of these stops before changing anything. Reads only.
pub fn precheck(ws: &Workspace, plan: &Plan) -> Result<()> {
    let deleted: HashSet<&str> = plan.delete.iter().map(String::as_str).collect();
    let created: HashSet<&str> = plan.create_dirs.iter().map(|d| d.0.as_str()).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    // What is at the ancestor `a` of `rel` on disk: an error when it is in
    // the way of what the plan puts under it (nothing there, a directory,
    // or what the plan replaces by one, is not).
    let ancestor_ok = |rel: &str, a: &str| -> Result<()> {
        match std::fs::symlink_metadata(ws.root().join(a)) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(m) if m.file_type().is_symlink() && !(deleted.contains(a) && created.contains(a)) => {
                Err(SnapshotError::bad_path(
                    rel,
                    format!("`{a}` is a symlink; cairn never writes through a symlinked directory (it may point outside the workspace)"),
                ))
            }
            Ok(m) if created.contains(a) && (deleted.contains(a) || is_special(&m)) => Ok(()),
            Ok(_) => Err(SnapshotError::bad_path(
                rel,
                format!("`{a}` is a file cairn does not replace by a directory (ignored or not captured): move it aside to roll this path back"),
            )),
            Err(_) => Ok(()),
        }
    };
    let paths = plan
        .write
        .iter()
        .map(|w| w.path.as_str())
        .chain(plan.create_dirs.iter().map(|d| d.0.as_str()));
    for rel in paths {
        check_manifest_path(rel)?;
        let mut a = relpath::parent(rel);
        // Every ancestor, not only down to the first that is not there: a
        // name looked up under a symlink may be missing in its target.
        while !a.is_empty() && seen.insert(a) {
            ancestor_ok(rel, a)?;
            a = relpath::parent(a);
        }
    }
    for (d, _) in &plan.create_dirs {
        if let Ok(m) = std::fs::symlink_metadata(ws.root().join(d)) {
            if !m.is_dir() && !is_special(&m) && !deleted.contains(d.as_str()) {
                return Err(SnapshotError::bad_path(
                    d.clone(),
                    "a file cairn does not track is in the way of a directory to restore",
                ));
            }
        }
    }
    Ok(())
}

/// Files of a plan already written to their temporaries (and fsync'd), by
/// index in `Plan::write`: see [`prestage`].
#[derive(Debug, Default)]
pub struct Prestaged {
    temps: HashMap<usize, PathBuf>,
}

impl Prestaged {
    /// Removes the temporaries (the plan will not be applied).
    pub fn discard(self) {
        for t in self.temps.values() {
            let _ = std::fs::remove_file(t);
        }
    }
}

/// Writes the files of the plan's first batch whose directories already
/// exist to their temporaries and fsyncs them, changing nothing the user
/// sees: a rollback does this while its pre-rollback checkpoint is being
/// made durable, so the two sets of fsyncs overlap. [`apply_prestaged`]
/// then renames them into place.
pub fn prestage<B: BlobRead + ?Sized>(ws: &Workspace, blobs: &B, plan: &Plan) -> Result<Prestaged> {
    let mut g = Guard {
        ws,
        checked: HashSet::new(),
    };
    let mut out = Prestaged::default();
    let mut files = Vec::new();
    let staging = Staging::open(ws);
    let res = (|| -> Result<()> {
        for (i, w) in plan.write.iter().take(RESTORE_BATCH_FILES).enumerate() {
            if w.mode_only {
                continue;
            }
            // Only where the directory is there now and stays: not one the
            // plan creates, removes or replaces.
            let parent = relpath::parent(&w.path);
            let parent_ok = (parent.is_empty()
                || std::fs::symlink_metadata(ws.root().join(parent)).is_ok_and(|m| m.is_dir()))
                // A directory this user cannot write now (555) is opened up
                // by the rollback itself, once its undo point is durable.
                && may_write_into(&ws.root().join(parent));
            let touched = |d: &str| {
                plan.remove_dirs
                    .iter()
                    .any(|r| in_scope(parent, std::slice::from_ref(r)))
                    || plan.delete.iter().any(|r| r == d)
            };
            if !parent_ok || touched(parent) {
                continue;
            }
            let abs = g.check(&w.path)?;
            let (tmp, f) = stage_entry(blobs, staging.as_ref(), &abs, &w.entry, i)?;
            out.temps.insert(i, tmp);
            files.extend(f);
        }
        if ws.options().fsync_restored_files {
            let refs: Vec<&std::fs::File> = files.iter().collect();
            in_parallel(&refs, |f| {
                f.sync_all()
                    .map_err(|e| SnapshotError::io("fsync", "<restored file>", e))
            })?;
        }
        Ok(())
    })();
    match res {
        Ok(()) => Ok(out),
        Err(e) => {
            out.discard();
            Err(e)
        }
    }
}

/// Carries out `plan` in the workspace, reading contents from `blobs`.
pub fn apply<B: BlobRead + ?Sized>(ws: &Workspace, blobs: &B, plan: &Plan) -> Result<Applied> {
    let (done, dirs) = apply_prestaged(ws, blobs, plan, Prestaged::default())?;
    dirs.sync()?;
    Ok(done)
}

/// [`apply`], with some files already written to temporaries by
/// [`prestage`], and without the last step: the directories the plan
/// changed are returned to be fsync'd (see [`DirsToSync::sync`]), so the
/// caller can overlap that with its own durable write.
pub fn apply_prestaged<B: BlobRead + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    plan: &Plan,
    pre: Prestaged,
) -> Result<(Applied, DirsToSync)> {
    let temps: Vec<PathBuf> = pre.temps.values().cloned().collect();
    let res = apply_inner(ws, blobs, plan, pre);
    if res.is_err() {
        for t in temps {
            let _ = std::fs::remove_file(t); // gone already if renamed
        }
    }
    res
}

/// Directories whose entries a restore changed, to fsync so the renames,
/// deletions and creations in them are durable.
#[derive(Debug, Default)]
#[must_use = "the restore is not durable until the directories are synced"]
pub struct DirsToSync(Vec<PathBuf>);

impl DirsToSync {
    /// fsyncs every directory, in parallel.
    pub fn sync(self) -> Result<()> {
        let dirs: Vec<&PathBuf> = self.0.iter().collect();
        in_parallel(&dirs, |d| sync_dir(d))
    }
}

fn apply_inner<B: BlobRead + ?Sized>(
    ws: &Workspace,
    blobs: &B,
    plan: &Plan,
    mut pre: Prestaged,
) -> Result<(Applied, DirsToSync)> {
    let mut a = Applying {
        g: Guard {
            ws,
            checked: HashSet::new(),
        },
        done: Applied::default(),
        touched_dirs: BTreeSet::new(),
        replaced: Replaced::default(),
        modes: BTreeMap::new(),
    };
    let staging = Staging::open(ws);
    let durable = ws.options().fsync_restored_files;
    a.open_up_dirs(plan)?;
    a.delete_files(plan)?;
    a.remove_dirs(plan)?;
    a.create_dirs(plan)?;
    let writes = FileWrites::for_plan(ws, plan, staging, durable);
    for (b, batch) in plan.write.chunks(writes.batch_files).enumerate() {
        a.write_batch(blobs, &writes, batch, b * writes.batch_files, &mut pre)?;
    }
    std::mem::take(&mut a.replaced).release_in_background();
    a.set_dir_modes(plan)?;
    let dirs = if durable {
        DirsToSync(a.touched_dirs.into_iter().collect())
    } else {
        DirsToSync::default()
    };
    Ok((a.done, dirs))
}

/// A restore under way: what it did so far, and what it still owes.
struct Applying<'a> {
    g: Guard<'a>,
    done: Applied,
    /// Directories whose entries changed, to fsync at the end.
    touched_dirs: BTreeSet<PathBuf>,
    /// Files replaced or deleted, held open until the end.
    replaced: Replaced,
    /// Directory modes to set at the end, by absolute path.
    modes: BTreeMap<PathBuf, u32>,
}

/// How a restore writes its files: in batches (see
/// [`Applying::write_batch`]).
struct FileWrites {
    staging: Option<Staging>,
    /// Set when a plan this large is made durable by one syncfs.
    whole_fs: Option<WholeFs>,
    durable: bool,
    batch_files: usize,
}

impl FileWrites {
    /// Files are written in batches: each file of a batch to its temporary,
    /// then the batch's temporaries fsync'd together (the file system
    /// commits concurrent fsyncs in one journal transaction, so a batch
    /// costs about one fsync), then each renamed into place. A large plan
    /// is one batch whose temporaries are closed as they are written and
    /// made durable by one syncfs (see `crate::whole_fs`), opened once
    /// the plan's directories exist.
    fn for_plan(
        ws: &Workspace,
        plan: &Plan,
        staging: Option<Staging>,
        durable: bool,
    ) -> FileWrites {
        let whole_fs = if durable {
            let files = plan.write.iter().filter(|w| !w.mode_only).count();
            let parents = plan.write.iter().map(|w| relpath::parent(&w.path));
            WholeFs::for_restore(ws.root(), files, parents)
        } else {
            None
        };
        let batch_files = match whole_fs {
            Some(_) => plan.write.len().max(1),
            None => RESTORE_BATCH_FILES,
        };
        FileWrites {
            staging,
            whole_fs,
            durable,
            batch_files,
        }
    }
}

impl Applying<'_> {
    /// Directories whose entries change but that this user may not write
    /// (555, say) are opened up for the rollback, and get their mode back
    /// (or the target's) at the end with the others.
    fn open_up_dirs(&mut self, plan: &Plan) -> Result<()> {
        let root = self.g.ws.root().to_path_buf();
        for d in dirs_changed(plan) {
            // Only a real directory there now (one the plan creates is
            // writable); the guard then checks the way to it.
            let Ok(m) = std::fs::symlink_metadata(root.join(d)) else {
                continue;
            };
            if !m.is_dir() {
                continue;
            }
            let abs = if d.is_empty() {
                root.clone()
            } else {
                self.g.check(d)?
            };
            if !may_write_into(&abs) {
                use std::os::unix::fs::PermissionsExt;
                let mode = m.permissions().mode() & 0o3777;
                set_mode(&abs, mode | 0o700)?;
                self.modes.entry(abs).or_insert(mode);
            }
        }
        Ok(())
    }

    /// Deletes the files and symlinks the plan deletes.
    fn delete_files(&mut self, plan: &Plan) -> Result<()> {
        for p in &plan.delete {
            let abs = self.g.check(p)?;
            self.replaced.hold(&abs);
            match std::fs::remove_file(&abs) {
                Ok(()) => self.done.deleted.push(p.clone()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SnapshotError::io("delete", abs, e)),
            }
            if let Some(d) = abs.parent() {
                self.touched_dirs.insert(d.to_path_buf());
            }
        }
        Ok(())
    }

    /// Removes the directories the plan removes; one that still holds
    /// files cairn does not manage is left alone, unless a file must
    /// take its place.
    fn remove_dirs(&mut self, plan: &Plan) -> Result<()> {
        let leaf_targets: HashSet<&str> = plan.write.iter().map(|w| w.path.as_str()).collect();
        for d in &plan.remove_dirs {
            let abs = self.g.check(d)?;
            match std::fs::symlink_metadata(&abs) {
                Ok(m) if m.is_dir() => {}
                _ => continue,
            }
            match std::fs::remove_dir(&abs) {
                Ok(()) => {
                    self.g.checked.remove(d.as_str());
                    self.modes.remove(&abs); // opened up for the rollback, now gone
                    self.done.removed_dirs.push(d.clone());
                    // The directory is gone: sync its parent instead of it.
                    self.touched_dirs.remove(&abs);
                    if let Some(p) = abs.parent() {
                        self.touched_dirs.insert(p.to_path_buf());
                    }
                }
                Err(_) if !leaf_targets.contains(d.as_str()) => {
                    // Still holds files cairn does not manage (ignored ones): left alone.
                }
                Err(e) => {
                    return Err(SnapshotError::bad_path(
                        d.clone(),
                        format!("cannot replace this directory by a file: it still holds files cairn does not track ({e})"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Creates the directories the plan creates (their modes are set at
    /// the end).
    fn create_dirs(&mut self, plan: &Plan) -> Result<()> {
        for (d, mode) in &plan.create_dirs {
            let abs = self.g.check(d)?;
            match std::fs::symlink_metadata(&abs) {
                Ok(m) if m.is_dir() => continue,
                Ok(m) if is_special(&m) => {
                    // A FIFO, socket or device holds no data: replaced, as a
                    // file written over one is (`precheck` let it through).
                    std::fs::remove_file(&abs)
                        .map_err(|e| SnapshotError::io("remove special file", &abs, e))?;
                }
                Ok(_) => {
                    return Err(SnapshotError::bad_path(
                        d.clone(),
                        "a file cairn does not track is in the way of a directory to restore",
                    ))
                }
                Err(_) => {}
            }
            std::fs::create_dir(&abs)
                .map_err(|e| SnapshotError::io("create directory", &abs, e))?;
            // Its mode is set once the files under it are written (a
            // read-only directory could not be written into).
            self.modes.insert(abs.clone(), *mode);
            self.done.created_dirs.push(d.clone());
            if let Some(p) = abs.parent() {
                self.touched_dirs.insert(p.to_path_buf());
            }
        }
        Ok(())
    }

    /// Writes one batch of the plan's files, the first numbered `first`:
    /// each to its temporary, the temporaries made durable together, then
    /// each renamed into place. On failure, the temporaries are removed.
    fn write_batch<B: BlobRead + ?Sized>(
        &mut self,
        blobs: &B,
        writes: &FileWrites,
        batch: &[Write],
        first: usize,
        pre: &mut Prestaged,
    ) -> Result<()> {
        let mut staged: Vec<Staged> = Vec::with_capacity(batch.len());
        let res = (|| -> Result<()> {
            for (i, w) in batch.iter().enumerate() {
                let abs = self.g.check(&w.path)?;
                let file = if w.mode_only {
                    set_mode(&abs, w.entry.mode)?;
                    None
                } else if let Some(tmp) = pre.temps.remove(&(first + i)) {
                    Some((tmp, None)) // written and fsync'd already
                } else {
                    let staging = writes.staging.as_ref();
                    let (tmp, f) = stage_entry(blobs, staging, &abs, &w.entry, first + i)?;
                    // Synced whole: closed now, so a plan of any size holds
                    // no descriptors.
                    Some((tmp, f.filter(|_| writes.whole_fs.is_none())))
                };
                staged.push(Staged { abs, file });
            }
            sync_staged(writes, &staged)?;
            for s in &staged {
                if let Some((tmp, _)) = &s.file {
                    self.replaced.hold(&s.abs);
                    std::fs::rename(tmp, &s.abs)
                        .map_err(|e| SnapshotError::io("rename into place", &s.abs, e))?;
                }
            }
            Ok(())
        })();
        if res.is_err() {
            for s in &staged {
                if let Some((tmp, _)) = &s.file {
                    let _ = std::fs::remove_file(tmp);
                }
            }
        }
        res?;
        for (w, s) in batch.iter().zip(&staged) {
            self.done.written.push(w.path.clone());
            if let Some(p) = s.abs.parent() {
                self.touched_dirs.insert(p.to_path_buf());
            }
        }
        Ok(())
    }

    /// Sets every directory mode the restore owes: the plan's, those of
    /// the directories it created, and those it opened up; deepest first,
    /// so a directory made read-only is set after its children.
    fn set_dir_modes(&mut self, plan: &Plan) -> Result<()> {
        for (d, mode) in &plan.dir_modes {
            let abs = self.g.check(d)?;
            match std::fs::symlink_metadata(&abs) {
                Ok(m) if m.is_dir() => {}
                _ => continue, // not there (it was checked when planned): nothing to set
            }
            self.modes.insert(abs, *mode);
            self.done.dir_modes.push(d.clone());
        }
        let mut modes: Vec<(PathBuf, u32)> = std::mem::take(&mut self.modes).into_iter().collect();
        modes.sort_by_key(|(abs, _)| std::cmp::Reverse(abs.components().count()));
        for (abs, mode) in &modes {
            set_mode(abs, *mode)?;
            // The mode is the directory's own metadata: its fsync makes it durable.
            self.touched_dirs.insert(abs.clone());
        }
        Ok(())
    }
}

/// Makes a batch's temporaries durable: by one syncfs, or by fsyncing
/// them together.
fn sync_staged(writes: &FileWrites, staged: &[Staged]) -> Result<()> {
    if let Some(fs) = &writes.whole_fs {
        fs.sync()?;
    } else if writes.durable {
        let files: Vec<&std::fs::File> = staged
            .iter()
            .filter_map(|s| s.file.as_ref().and_then(|f| f.1.as_ref()))
            .collect();
        in_parallel(&files, |f| {
            f.sync_all()
                .map_err(|e| SnapshotError::io("fsync", "<restored file>", e))
        })?;
    }
    Ok(())
}

/// Files a restore replaces or deletes, held open across the rename or
/// unlink and closed on a background thread afterwards. Freeing a file's
/// last link frees the file itself (its pages and blocks, after waiting for
/// any write-back of them in progress: milliseconds for a file an agent has
/// just written) inside the system call, unless the file is
/// still open; holding it open moves that work to the final close, off the
/// rollback's path. A file that cannot be opened is simply not held.
#[derive(Default)]
struct Replaced(Vec<std::fs::File>);

impl Replaced {
    /// The most files held open at once (bounds the descriptors a large
    /// restore keeps); beyond it, files are freed inline as before.
    const MAX_HELD: usize = 256;

    fn hold(&mut self, abs: &Path) {
        if self.0.len() >= Self::MAX_HELD {
            return;
        }
        // O_NOFOLLOW: a symlink is replaced itself, never what it points
        // to. On Linux, O_PATH: a reference to the file that opens nothing
        // (no device is opened, a FIFO does not block, no read permission
        // is needed) yet keeps the file from being freed until it is
        // closed. Elsewhere, a read-only open that does not block on a FIFO.
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            #[cfg(target_os = "linux")]
            let flags = libc::O_PATH | libc::O_NOFOLLOW;
            #[cfg(not(target_os = "linux"))]
            let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
            if let Ok(f) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags)
                .open(abs)
            {
                self.0.push(f);
            }
        }
        #[cfg(not(unix))]
        let _ = abs;
    }

    fn release_in_background(self) {
        if !self.0.is_empty() {
            let files = self.0;
            // If the thread cannot start, the files are closed here instead.
            let _ = std::thread::Builder::new()
                .name("cairn-restore-close".into())
                .spawn(move || drop(files));
        }
    }
}

/// Files written, fsync'd and renamed together in one batch of a rollback:
/// bounds the open temporaries (file descriptors) whatever the plan's size.
const RESTORE_BATCH_FILES: usize = 64;

/// The most threads fsyncing at once during a rollback.
const SYNC_THREADS: usize = 16;

/// One write of a batch: the target path, and (unless only the mode
/// changes) the temporary holding the new contents, with its handle for
/// the fsync (none for a symlink).
struct Staged {
    abs: PathBuf,
    file: Option<(PathBuf, Option<std::fs::File>)>,
}

/// Runs `f` on every item, on up to [`SYNC_THREADS`] threads; the first error wins.
fn in_parallel<T: Sync>(items: &[T], f: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    if items.len() <= 1 {
        return items.iter().try_for_each(&f);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = items.len().min(SYNC_THREADS);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(it) = items.get(i) else {
                            return Ok(());
                        };
                        f(it)?;
                    }
                })
            })
            .collect();
        let mut first = Ok(());
        for h in handles {
            let r = h
                .join()
                .map_err(|_| SnapshotError::Invalid("an fsync thread panicked".into()))
                .and_then(|r| r);
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

#[cfg(unix)]
fn set_mode(abs: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(abs, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| SnapshotError::io("set permissions", abs, e))
}

#[cfg(not(unix))]
fn set_mode(_abs: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

/// Writes one file or symlink to a temporary (renamed over `abs` later,
/// which replaces a file or a symlink itself, never what a symlink points
/// to): in the store's staging directory when it is on the same file
/// system as `abs`'s directory (see [`STAGING_DIR`]), else beside `abs`
/// as `.cairn-restore-<pid>-<n>.tmp`. Returns the temporary's path and, for a
/// file, its open handle for the fsync.
fn stage_entry<B: BlobRead + ?Sized>(
    blobs: &B,
    staging: Option<&Staging>,
    abs: &Path,
    e: &Entry,
    n: usize,
) -> Result<(PathBuf, Option<std::fs::File>)> {
    let dir = abs.parent().unwrap_or(Path::new("."));
    let pid = std::process::id();
    let tmp = match staging.filter(|s| s.holds_for(dir)) {
        Some(s) => s.dir.join(crate::staging::staged_name(pid, n)),
        None => dir.join(format!(".cairn-restore-{pid}-{n}.tmp")),
    };
    let res = (|| -> Result<Option<std::fs::File>> {
        match e.kind {
            EntryKind::File => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&tmp)
                    .map_err(|err| SnapshotError::io("create temporary file", &tmp, err))?;
                let mut w = std::io::BufWriter::new(&mut f);
                blobs.get_to(&e.hash, &mut w)?;
                use std::io::Write as _;
                w.flush()
                    .map_err(|err| SnapshotError::io("write", &tmp, err))?;
                drop(w);
                set_mode(&tmp, e.mode)?;
                Ok(Some(f))
            }
            EntryKind::Symlink => {
                let target = blobs.get(&e.hash)?;
                make_symlink(&target, &tmp)?;
                Ok(None)
            }
            EntryKind::Dir => Err(SnapshotError::Invalid(
                "internal: writing a directory as a file".into(),
            )),
        }
    })();
    match res {
        Ok(f) => Ok((tmp, f)),
        Err(err) => {
            let _ = std::fs::remove_file(&tmp);
            Err(err)
        }
    }
}

pub use crate::staging::{clean_staging, STAGING_DIR};

/// The staging directory of one rollback, and its file system.
pub(crate) struct Staging {
    dir: PathBuf,
    dev: u64,
}

impl Staging {
    /// Creates (if needed) and opens the staging directory; `None` when it
    /// cannot be used (not a real directory, cannot be created): the
    /// temporaries then go beside the files.
    fn open(ws: &Workspace) -> Option<Staging> {
        if ws.is_read_only() {
            return None;
        }
        let dir = ws.cache_path(STAGING_DIR);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        // Never through a symlink planted in the store.
        let m = std::fs::symlink_metadata(&dir).ok()?;
        m.is_dir().then(|| Staging {
            dir,
            dev: dev_of(&m),
        })
    }

    /// True if a temporary here can be renamed into `dir`.
    fn holds_for(&self, dir: &Path) -> bool {
        std::fs::symlink_metadata(dir).is_ok_and(|m| dev_of(&m) == self.dev)
    }
}

#[cfg(unix)]
fn dev_of(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.dev()
}

#[cfg(not(unix))]
fn dev_of(_m: &std::fs::Metadata) -> u64 {
    0
}

#[cfg(unix)]
fn make_symlink(target: &[u8], at: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), at)
        .map_err(|e| SnapshotError::io("create symlink", at, e))
}

#[cfg(not(unix))]
fn make_symlink(_target: &[u8], at: &Path) -> Result<()> {
    Err(SnapshotError::Invalid(format!(
        "symlinks cannot be restored on this platform ({})",
        at.display()
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use cairn_codec::BlobHash;

    fn f(c: &str) -> Entry {
        Entry {
            kind: EntryKind::File,
            mode: 0o644,
            size: c.len() as u64,
            hash: BlobHash::of(c.as_bytes()),
        }
    }
    fn d() -> Entry {
        Entry {
            kind: EntryKind::Dir,
            mode: 0o755,
            size: 0,
            hash: BlobHash::ZERO,
        }
    }
    fn m(items: &[(&str, Entry)]) -> Manifest {
        Manifest {
            entries: items.iter().map(|(p, e)| (p.to_string(), *e)).collect(),
            missing: Default::default(),
        }
    }

    #[test]
    fn plans_edit_delete_create_and_type_changes() {
        let cur = m(&[
            ("a", d()),
            ("a/x", f("1")),
            ("b", f("2")),
            ("c", d()),
            ("c/y", f("3")),
            ("e", f("5")),
        ]);
        let mut exe = f("5");
        exe.mode = 0o755;
        let tgt = m(&[
            ("a", d()),
            ("a/x", f("1!")),
            ("c", f("c-is-a-file")),
            ("n", d()),
            ("n/m", d()),
            ("n/m/z", f("z")),
            ("e", exe),
        ]);
        let p = plan(&cur, &tgt, &[]).unwrap();
        assert_eq!(p.delete, vec!["b".to_string(), "c/y".to_string()]);
        assert_eq!(p.remove_dirs, vec!["c".to_string()]);
        assert_eq!(
            p.create_dirs
                .iter()
                .map(|x| x.0.as_str())
                .collect::<Vec<_>>(),
            vec!["n", "n/m"]
        );
        let w: Vec<(&str, bool)> = p
            .write
            .iter()
            .map(|w| (w.path.as_str(), w.mode_only))
            .collect();
        assert_eq!(
            w,
            vec![("a/x", false), ("c", false), ("e", true), ("n/m/z", false)]
        );
        // Scoped: only under n/, parents included.
        let p = plan(&cur, &tgt, &["n/m/z".to_string()]).unwrap();
        assert!(p.delete.is_empty() && p.remove_dirs.is_empty());
        assert_eq!(p.create_dirs.len(), 2);
        assert_eq!(p.write.len(), 1);
        // Same manifests: nothing to do.
        assert!(plan(&cur, &cur, &[]).unwrap().is_empty());
    }

    #[test]
    fn refuses_protected_target_paths() {
        let cur = m(&[]);
        let tgt = m(&[(".git", d()), (".git/config", f("x"))]);
        assert!(plan(&cur, &tgt, &[]).is_err());
    }
}
