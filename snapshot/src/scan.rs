//! Walking the workspace: which files exist, with their stat data, what was
//! skipped and why. Ignore rules (`.gitignore`, `.cairnignore`, the
//! repository's `.git/info/exclude`) are applied per directory with the
//! `ignore` crate's gitignore matcher; this walker is cairn's own so that it
//! can count what it skips, never follow a symlink, capture hidden files
//! (`.env` is a file users want back), and stop at every `.git`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::Arc as Rc;

use cairn_engine::store_dir::{BLOB_DIR_NAME, LOCK_FILE_NAME, LOG_DIR_NAME};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::manifest::EntryKind;
use crate::relpath::{self, GIT_DIR_NAME};
use crate::workspace::Workspace;

pub use crate::relpath::CAIRNIGNORE;

/// Skip reasons, as they appear in `CheckpointCounts::skipped`.
pub mod reason {
    /// Left out by an ignore rule (a whole ignored directory counts once).
    pub const IGNORED: &str = "ignored";
    /// Larger than `SnapshotOptions::max_file_bytes`.
    pub const TOO_LARGE: &str = "too_large";
    /// The `.git` of a nested repository (its working files are captured).
    pub const NESTED_GIT: &str = "nested_git";
    /// The `.cairn` store of a nested workspace (its working files are
    /// captured; the store itself never is).
    pub const NESTED_STORE: &str = "nested_store";
    /// Could not be read (permissions, I/O error).
    pub const UNREADABLE: &str = "unreadable";
    /// Disappeared between the directory listing and reading it.
    pub const VANISHED: &str = "vanished";
    /// Changed while it was read, on every one of
    /// `capture::MAX_READ_ATTEMPTS` reads (its size, mtime, ctime or
    /// inode differed after the read): left out rather than stored as a
    /// mix of old and new bytes.
    pub const CHANGING: &str = "changing";
    /// A name that is not valid UTF-8 (a workspace path is text; the
    /// manifest cannot hold it): the file or symlink, and every one under
    /// a directory so named, each named with its bytes escaped (see
    /// [`crate::relpath::escape_bytes`]).
    pub const NON_UTF8_NAME: &str = "non_utf8_name";
    /// A FIFO, socket or device node.
    pub const SPECIAL: &str = "special";
    /// A tracked path that lies under a symlink (never followed).
    pub const UNDER_SYMLINK: &str = "under_symlink";
    /// Excluded by `SnapshotOptions::exclude`.
    pub const EXCLUDED: &str = "excluded";

    /// The reasons a checkpoint names the paths of (in its record's
    /// `meta.not_captured`), not only counts: files the user has and would
    /// expect to be captured, not the ones left out by design (ignored,
    /// excluded, nested `.git`).
    pub const NAMED: &[&str] = &[TOO_LARGE, UNREADABLE, NON_UTF8_NAME, CHANGING];
}

pub use crate::stat_cache::Stat;

/// A file or symlink the scan found.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub rel: String,
    pub kind: EntryKind,
    pub stat: Stat,
}

/// What a walk produced.
#[derive(Debug, Default)]
pub(crate) struct ScanOut {
    pub leaves: Vec<Found>,
    /// Runs of `leaves` the walk knows to be in path order: each one
    /// directory's files, sorted by name ([`walk_dir`]), in ascending
    /// order of their start, apart. Leaves in no run (a tracked path
    /// scanned after the walk) are in no known order.
    pub runs: Vec<std::ops::Range<usize>>,
    /// Directories (relative path, permission bits), in no set order (a
    /// parallel walk lists them from several threads).
    pub dirs: Vec<(String, u32)>,
    /// Tracked paths that do not exist.
    pub missing: BTreeSet<String>,
    pub skipped: BTreeMap<String, u64>,
    /// Every path skipped for a reason the user may not expect (see
    /// [`names_the_path`]), with the reason, in path order: what the
    /// checkpoint names (the first [`MAX_NOT_CAPTURED_NAMED`]), and a
    /// tracked path the walk skipped, not scanned (and counted) again.
    pub not_captured: BTreeMap<String, &'static str>,
}

/// The most skipped paths a checkpoint names (in its record's
/// `meta.not_captured`): enough to point at the files a user would want
/// to know about, while a tree with thousands of unreadable files still
/// gives a small record (the counts are exact either way).
pub const MAX_NOT_CAPTURED_NAMED: usize = 100;

/// True for the skip reasons a checkpoint names the path of
/// ([`reason::NAMED`]).
pub(crate) fn names_the_path(why: &str) -> bool {
    reason::NAMED.contains(&why)
}

/// The paths of `out` that a tracked path must not be scanned (and
/// counted) again for: those captured, and those named as not captured
/// but a name that is not UTF-8 (whose escaped text is not its path: a
/// tracked path spelt the same is another file).
fn reached(out: &ScanOut) -> BTreeSet<&str> {
    out.leaves
        .iter()
        .map(|f| f.rel.as_str())
        .chain(out.dirs.iter().map(|d| d.0.as_str()))
        .chain(
            out.not_captured
                .iter()
                .filter(|(_, why)| **why != reason::NON_UTF8_NAME)
                .map(|(p, _)| p.as_str()),
        )
        .collect()
}

impl ScanOut {
    pub fn skip(&mut self, why: &str) {
        *self.skipped.entry(why.to_string()).or_default() += 1;
    }

    /// [`ScanOut::skip`] of a path to name (see [`names_the_path`]),
    /// counted once however often the scan meets it.
    pub fn skip_path(&mut self, rel: &str, why: &'static str) {
        debug_assert!(names_the_path(why), "{why}");
        if self.not_captured.insert(rel.to_string(), why).is_none() {
            self.skip(why);
        }
    }
}

/// A chain of ignore matchers, innermost first.
struct Rules {
    m: Gitignore,
    parent: Option<Rc<Rules>>,
}

fn is_ignored(rules: &Option<Rc<Rules>>, abs: &Path, is_dir: bool) -> bool {
    let mut cur = rules.as_ref();
    while let Some(r) = cur {
        let m = r.m.matched(abs, is_dir);
        if m.is_ignore() {
            return true;
        }
        if m.is_whitelist() {
            return false;
        }
        cur = r.parent.as_ref();
    }
    false
}

/// Adds the ignore files of directory `abs` (and, for a repository root,
/// its `.git/info/exclude`, with the lowest precedence) to the chain.
fn push_rules(parent: &Option<Rc<Rules>>, abs: &Path, repo_root: bool) -> Option<Rc<Rules>> {
    let mut b = GitignoreBuilder::new(abs);
    let mut any = false;
    let mut add = |p: PathBuf| {
        if p.is_file() {
            // A bad glob leaves that line out (the file's other lines still
            // apply): cairn then captures more, never less.
            let _ = b.add(p);
            any = true;
        }
    };
    if repo_root {
        add(abs.join(GIT_DIR_NAME).join("info").join("exclude"));
    }
    add(abs.join(".gitignore"));
    add(abs.join(CAIRNIGNORE));
    if !any {
        return parent.clone();
    }
    match b.build() {
        Ok(m) => Some(Rc::new(Rules {
            m,
            parent: parent.clone(),
        })),
        Err(_) => parent.clone(),
    }
}

/// The ignore rules in force in each directory already visited by a
/// capture that re-reads several paths (a watched capture), so shared
/// ancestors' ignore files are read once rather than once per path.
#[derive(Default)]
pub(crate) struct RulesMemo {
    at: std::collections::HashMap<PathBuf, Option<Rc<Rules>>>,
}

impl RulesMemo {
    /// The rules in force in `abs`, given its parent's: the workspace root
    /// (`root`) is always a repository root; any other directory is one if
    /// it holds a `.git`.
    fn at(&mut self, parent: &Option<Rc<Rules>>, abs: &Path, root: bool) -> Option<Rc<Rules>> {
        if let Some(r) = self.at.get(abs) {
            return r.clone();
        }
        let r = push_rules(parent, abs, root || abs.join(GIT_DIR_NAME).exists());
        self.at.insert(abs.to_path_buf(), r.clone());
        r
    }
}

/// Walks the whole workspace, honouring ignore rules (unless disabled),
/// then adds the tracked paths the walk did not reach.
pub(crate) fn scan_full(ws: &Workspace, tracked: &BTreeSet<String>) -> Result<ScanOut> {
    let mut out = ScanOut::default();
    let follow = ws.options().follow_gitignore;
    walk(ws, "", follow, tracked, &mut out)?;
    if tracked.is_empty() {
        // Nothing tracked to add: no set of every path reached is built
        // (a tree node and its comparisons a file, for nothing).
        return Ok(out);
    }
    let have = reached(&out);
    let todo: Vec<String> = tracked
        .iter()
        .filter(|t| !have.contains(t.as_str()))
        .cloned()
        .collect();
    drop(have);
    // The walk alone finds each path once (a directory is listed by its
    // parent only): only tracked paths scanned after it can repeat one.
    let repeats = !todo.is_empty();
    for t in todo {
        scan_tracked(ws, &t, &mut out)?;
    }
    if repeats {
        dedup_dirs(&mut out);
    }
    Ok(out)
}

/// Scans just the given tracked paths (for a tracked-only checkpoint).
pub(crate) fn scan_paths(ws: &Workspace, paths: &BTreeSet<String>) -> Result<ScanOut> {
    let mut out = ScanOut::default();
    for t in paths {
        scan_tracked(ws, t, &mut out)?;
    }
    dedup_dirs(&mut out);
    Ok(out)
}

/// What a full scan would capture at and below `rel` (a path the file
/// watcher reported), given the ignore rules of its ancestors and the
/// tracked paths: nothing if an ancestor is missing, not a real directory,
/// excluded or ignored, or if `rel` itself is; else `rel` (walked whole if
/// it is a directory), plus any tracked paths at or below it the walk does
/// not reach. `missing` only ever lists tracked paths.
pub(crate) fn scan_subtree(
    ws: &Workspace,
    rel: &str,
    tracked: &BTreeSet<String>,
    rules: &mut RulesMemo,
    out: &mut ScanOut,
) -> Result<()> {
    let follow = ws.options().follow_gitignore;
    let under_tracked = tracked
        .iter()
        .any(|t| relpath::in_scope(rel, std::slice::from_ref(t)));
    if under_tracked {
        // Captured whole by the tracked-path rule, ignore rules or not.
        scan_tracked(ws, rel, out)?;
    } else if !ws.is_excluded(rel) {
        scan_view(ws, rel, follow, tracked, rules, out)?;
    }
    // Tracked paths below `rel` that the walk above did not reach.
    let prefix = format!("{rel}/");
    let have = reached(out);
    let todo: Vec<String> = tracked
        .range(prefix.clone()..)
        .take_while(|t| t.starts_with(&prefix))
        .filter(|t| !have.contains(t.as_str()))
        .cloned()
        .collect();
    drop(have);
    for t in todo {
        scan_tracked(ws, &t, out)?;
    }
    out.missing.retain(|m| tracked.contains(m));
    dedup_dirs(out);
    Ok(())
}

/// The walk's view of `rel` (not under a tracked path).
fn scan_view(
    ws: &Workspace,
    rel: &str,
    follow: bool,
    tracked: &BTreeSet<String>,
    memo: &mut RulesMemo,
    out: &mut ScanOut,
) -> Result<()> {
    let root = ws.root();
    let comps: Vec<&str> = rel.split('/').collect();
    if comps.iter().any(|c| !relpath::valid_name(c)) {
        return Ok(());
    }
    let mut rules: Option<Rc<Rules>> = if follow {
        memo.at(&None, root, true)
    } else {
        None
    };
    let mut abs = root.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        abs.push(c);
        let last = i + 1 == comps.len();
        let m = match std::fs::symlink_metadata(&abs) {
            Ok(m) => m,
            // Gone, or behind a file: the scan would not see it.
            Err(_) => return Ok(()),
        };
        let is_dir = m.file_type().is_dir();
        if !last && !is_dir {
            return Ok(()); // a symlink or file where a directory would be
        }
        if follow && is_ignored(&rules, &abs, is_dir) {
            if last {
                out.skip(reason::IGNORED);
            }
            return Ok(());
        }
        if !last {
            if follow {
                rules = memo.at(&rules, &abs, false);
            }
            continue;
        }
        if is_dir {
            if tracked.contains(rel) {
                return scan_tracked(ws, rel, out);
            }
            out.dirs.push((rel.to_string(), Stat::of(&m).dir_perm()));
            walk(ws, rel, follow, tracked, out)?;
        } else {
            leaf(ws, rel.to_string(), &m, out);
        }
    }
    Ok(())
}

fn dedup_dirs(out: &mut ScanOut) {
    let mut seen = BTreeSet::new();
    out.dirs.retain(|(d, _)| seen.insert(d.clone()));
    let mut seen = BTreeSet::new();
    out.leaves.retain(|f| seen.insert(f.rel.clone()));
}

/// Captures one tracked path whether or not it is ignored: its ancestors
/// (which must be real directories, never symlinks), then the path itself
/// (a whole directory is walked without ignore rules).
fn scan_tracked(ws: &Workspace, rel: &str, out: &mut ScanOut) -> Result<()> {
    if ws.is_excluded(rel) {
        out.skip(reason::EXCLUDED);
        return Ok(());
    }
    let comps: Vec<&str> = rel.split('/').collect();
    let mut abs = ws.root().to_path_buf();
    let mut cur = String::new();
    // Ancestors are captured only if the path exists: a tracked path not yet
    // written leaves no empty directories in the tree (a watched capture,
    // which patches the tree path by path, gives the same tree).
    let mut ancestors: Vec<(String, u32)> = Vec::new();
    for (i, c) in comps.iter().enumerate() {
        abs.push(c);
        cur = relpath::join(&cur, c);
        let last = i + 1 == comps.len();
        let m = match std::fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                out.missing.insert(rel.to_string());
                return Ok(());
            }
            Err(_) => {
                out.skip_path(&cur, reason::UNREADABLE);
                return Ok(());
            }
        };
        let ft = m.file_type();
        if !last {
            if ft.is_symlink() {
                out.skip(reason::UNDER_SYMLINK);
                return Ok(());
            }
            if !ft.is_dir() {
                // A file where a directory would be: the tracked path cannot exist.
                out.missing.insert(rel.to_string());
                return Ok(());
            }
            ancestors.push((cur.clone(), Stat::of(&m).dir_perm()));
            continue;
        }
        out.dirs.append(&mut ancestors);
        if ft.is_dir() {
            out.dirs.push((cur.clone(), Stat::of(&m).dir_perm()));
            walk(ws, &cur, false, &BTreeSet::new(), out)?;
        } else {
            leaf(ws, cur.clone(), &m, out);
        }
    }
    Ok(())
}

/// Adds the file or symlink `rel` (stat `m`) to `out`, or counts why
/// not. `rel` is taken as it is: the path string the walk made is the one
/// kept, not copied again.
fn leaf(ws: &Workspace, rel: String, m: &Metadata, out: &mut ScanOut) {
    let ft = m.file_type();
    if ft.is_symlink() {
        out.leaves.push(Found {
            rel,
            kind: EntryKind::Symlink,
            stat: Stat::of(m),
        });
    } else if ft.is_file() {
        if m.len() > ws.options().max_file_bytes {
            out.skip_path(&rel, reason::TOO_LARGE);
        } else {
            out.leaves.push(Found {
                rel,
                kind: EntryKind::File,
                stat: Stat::of(m),
            });
        }
    } else {
        out.skip(reason::SPECIAL);
    }
}

/// What every directory of one walk shares.
#[derive(Clone, Copy)]
struct WalkOpts<'a> {
    ws: &'a Workspace,
    /// Ignore rules are applied.
    follow: bool,
    /// Tracked paths: captured whole, ignore rules or not.
    tracked: &'a BTreeSet<String>,
}

/// Walks the directory `start` (workspace-relative; `""` is the root).
fn walk(
    ws: &Workspace,
    start: &str,
    follow: bool,
    tracked: &BTreeSet<String>,
    out: &mut ScanOut,
) -> Result<()> {
    let w = WalkOpts {
        ws,
        follow,
        tracked,
    };
    let rules = if follow && !start.is_empty() {
        rules_above(ws.root(), start)
    } else {
        None
    };
    let want = match ws.options().hash_threads {
        0 => crate::workspace::parallelism(),
        n => n,
    };
    let threads = want.clamp(1, crate::workspace::MAX_HASH_THREADS);
    let mut stack: Vec<Frame> = vec![(start.to_string(), rules)];
    let mut stores: Vec<String> = Vec::new();
    // On this thread until there are directories to share: a tree whose
    // root holds one directory (`src/`) is still walked in parallel below it.
    while stack.len() == 1 || (threads == 1 && !stack.is_empty()) {
        if let Some((dir, rules)) = stack.pop() {
            walk_dir(w, dir, rules, out, &mut stores, &mut |f| stack.push(f));
        }
    }
    if !stack.is_empty() {
        let mut parts = walk_in_parallel(w, stack, threads)?;
        // The part with the most files first: `merge_part` takes its list
        // as it is (no copy) when nothing was found before it.
        parts.sort_unstable_by_key(|p| std::cmp::Reverse(p.0.leaves.len()));
        for p in parts {
            stores.extend(p.1);
            merge_part(out, p.0);
        }
    }
    if !stores.is_empty() {
        // A store below the root is not content: taken back out of the
        // directories found (its parent's listing added it, maybe on
        // another thread).
        out.dirs.retain(|d| !stores.contains(&d.0));
    }
    Ok(())
}

/// The ignore rules from the directories above `start` (for a walk that
/// starts below the root `root`).
fn rules_above(root: &Path, start: &str) -> Option<Rc<Rules>> {
    let mut abs = root.to_path_buf();
    let mut rules = push_rules(&None, &abs, true);
    let comps: Vec<&str> = start.split('/').collect();
    for c in &comps[..comps.len() - 1] {
        abs.push(c);
        rules = push_rules(&rules, &abs, abs.join(GIT_DIR_NAME).exists());
    }
    rules
}

/// The directories of a parallel walk still to list, and how many
/// threads are listing one (whose subdirectories may still come).
struct Queue {
    todo: Vec<Frame>,
    busy: usize,
    /// A thread stopped (panicked): the others stop too.
    failed: bool,
}

/// Marks the queue failed if a thread unwinds while it holds a directory,
/// so the threads waiting for its subdirectories do not wait forever.
struct FailOnUnwind<'a>(&'a Mutex<Queue>, &'a Condvar);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().failed = true;
            self.1.notify_all();
        }
    }
}

/// Walks the directories `items` and everything below them on `threads`
/// threads, which share out every directory (not whole subtrees: one
/// large subtree does not leave a thread idle); what each thread found,
/// with the stores it met.
fn walk_in_parallel(
    w: WalkOpts<'_>,
    items: Vec<Frame>,
    threads: usize,
) -> Result<Vec<(ScanOut, Vec<String>)>> {
    let queue = Mutex::new(Queue {
        todo: items,
        busy: 0,
        failed: false,
    });
    let more = Condvar::new();
    let work = || {
        let _guard = FailOnUnwind(&queue, &more);
        let mut local = ScanOut::default();
        let mut stores = Vec::new();
        let mut found: Vec<Frame> = Vec::new();
        loop {
            let next = {
                let mut q = queue.lock();
                loop {
                    if q.failed {
                        break None;
                    }
                    if let Some(f) = q.todo.pop() {
                        q.busy += 1;
                        break Some(f);
                    }
                    if q.busy == 0 {
                        break None; // nothing left, and nothing more to come
                    }
                    more.wait(&mut q);
                }
            };
            let Some((dir, rules)) = next else {
                more.notify_all();
                break;
            };
            walk_dir(w, dir, rules, &mut local, &mut stores, &mut |f| {
                found.push(f)
            });
            let mut q = queue.lock();
            q.todo.append(&mut found);
            q.busy -= 1;
            drop(q);
            more.notify_all();
        }
        (local, stores)
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        let mut parts = Vec::with_capacity(handles.len());
        for h in handles {
            parts.push(h.join().map_err(|_| {
                crate::error::SnapshotError::Invalid("a scanning thread panicked".into())
            })?);
        }
        Ok(parts)
    })
}

/// Adds what one thread of a walk found to `out`.
fn merge_part(out: &mut ScanOut, p: ScanOut) {
    // Moved whole into an empty list: the files are not copied again.
    let at = out.leaves.len();
    if out.leaves.is_empty() {
        out.leaves = p.leaves;
    } else {
        out.leaves.extend(p.leaves);
    }
    out.runs
        .extend(p.runs.into_iter().map(|r| r.start + at..r.end + at));
    if out.dirs.is_empty() {
        out.dirs = p.dirs;
    } else {
        out.dirs.extend(p.dirs);
    }
    out.missing.extend(p.missing);
    for (k, v) in p.skipped {
        *out.skipped.entry(k).or_default() += v;
    }
    // The paths to name, as `ScanOut::skip_path` keeps them: one
    // named twice (the threads walk disjoint subtrees, so never in
    // practice) is counted once.
    for (rel, why) in p.not_captured {
        if out.not_captured.insert(rel, why).is_some() {
            if let Some(n) = out.skipped.get_mut(why) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

type Frame = (String, Option<Rc<Rules>>);

/// A directory's entries, listed before any is looked at, so that its
/// ignore files and `.git` are known from the names without a stat per
/// candidate.
struct Listing {
    /// The entries that could be read, each with its name (taken once:
    /// `DirEntry::file_name` copies it each time).
    ents: Vec<(std::fs::DirEntry, std::ffi::OsString)>,
    /// It holds a `.git`.
    has_git: bool,
    /// It holds a `.gitignore` or a `.cairnignore`.
    has_ignore_file: bool,
    /// It is a cairn store under another name than `.cairn` (`LOCK`, `log/`
    /// and `blobs/` in one directory): never captured, so no rollback ever
    /// rewrites or deletes it.
    is_store: bool,
    /// Entries that could not be read.
    unreadable: u64,
}

impl Listing {
    fn of(rd: std::fs::ReadDir) -> Listing {
        let mut l = Listing {
            ents: Vec::new(),
            has_git: false,
            has_ignore_file: false,
            is_store: false,
            unreadable: 0,
        };
        let mut store_marks = 0u8;
        for ent in rd {
            match ent {
                Ok(e) => {
                    let n = e.file_name();
                    l.has_git |= n == GIT_DIR_NAME;
                    l.has_ignore_file |= n == ".gitignore" || n == CAIRNIGNORE;
                    store_marks |= match n.to_str() {
                        Some(LOCK_FILE_NAME) => 1,
                        Some(LOG_DIR_NAME) => 2,
                        Some(BLOB_DIR_NAME) => 4,
                        _ => 0,
                    };
                    l.ents.push((e, n));
                }
                Err(_) => l.unreadable += 1,
            }
        }
        l.is_store = store_marks == 7;
        l
    }
}

/// What listing one directory of a walk gave.
enum Listed {
    /// Its entries (the entries that could not be read are counted as
    /// [`reason::UNREADABLE`] already).
    Entries(Listing),
    /// It disappeared before it was listed (counted as [`reason::VANISHED`]).
    Vanished,
    /// It cannot be listed: the caller names it as its walk names things.
    Unreadable,
}

/// Lists the directory `abs`, the step every walk of the workspace shares
/// (the tree's walk and the walk under a name that is not UTF-8): what
/// vanished and what could not be read are counted in `out`.
fn list_dir(abs: &Path, out: &mut ScanOut) -> Listed {
    let rd = match std::fs::read_dir(abs) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.skip(reason::VANISHED);
            return Listed::Vanished;
        }
        Err(_) => return Listed::Unreadable,
    };
    // List first, so the ignore files and `.git` are known from the
    // names, without a stat per candidate.
    let listing = Listing::of(rd);
    for _ in 0..listing.unreadable {
        out.skip(reason::UNREADABLE);
    }
    Listed::Entries(listing)
}

/// The ignore rules for the entries of the listed directory `abs` (none
/// unless the walk `follow`s them): its parent's, plus its own ignore
/// files; a directory holding `.git` (or the workspace root, `is_root`)
/// starts a repository's rules.
fn rules_below(
    listing: &Listing,
    parent_rules: Option<Rc<Rules>>,
    abs: &Path,
    follow: bool,
    is_root: bool,
) -> Option<Rc<Rules>> {
    if !follow {
        return None;
    }
    if listing.has_ignore_file || listing.has_git {
        push_rules(&parent_rules, abs, is_root || listing.has_git)
    } else {
        parent_rules
    }
}

/// Lists one directory of a walk, `dir` (with its parent's ignore
/// rules): its files and symlinks go to `out`, a store met is added to
/// `stores`, and each subdirectory to walk is handed to `push`.
fn walk_dir(
    w: WalkOpts<'_>,
    dir: String,
    parent_rules: Option<Rc<Rules>>,
    out: &mut ScanOut,
    stores: &mut Vec<String>,
    push: &mut dyn FnMut(Frame),
) {
    let root = w.ws.root();
    let abs_dir = if dir.is_empty() {
        root.to_path_buf()
    } else {
        root.join(&dir)
    };
    let Some(listing) = list_walked_dir(w.ws, &dir, &abs_dir, out, stores) else {
        return;
    };
    let rules = rules_below(&listing, parent_rules, &abs_dir, w.follow, dir.is_empty());
    // Room for every entry as a file: the list grows once a directory,
    // not by doubling (and copying) as the files come.
    out.leaves.reserve(listing.ents.len());
    // One buffer for every entry's absolute path (the ignore matcher
    // wants one), instead of an allocation per entry.
    let mut abs_buf = abs_dir;
    let first = out.leaves.len();
    for (ent, name) in listing.ents {
        if let Some(sub) = visit_entry(w, &dir, (&ent, &name), &rules, &mut abs_buf, out) {
            push((sub, rules.clone()));
        }
    }
    // This directory's files as one run in path order (they share the
    // directory's prefix: by name), sorted here on the walking thread and
    // recorded, so that putting the whole scan in path order afterwards
    // only orders and merges runs (`capture::path_order`).
    out.leaves[first..].sort_unstable_by(|a, b| a.rel.cmp(&b.rel));
    if out.leaves.len() > first {
        out.runs.push(first..out.leaves.len());
    }
}

/// Lists the directory `dir` of a walk; `None` when there is nothing to
/// walk in it: it vanished, cannot be read (named), or is a store (a
/// store not at the root is added to `stores`, for the walk to take back
/// out of the directories found).
fn list_walked_dir(
    ws: &Workspace,
    dir: &str,
    abs_dir: &Path,
    out: &mut ScanOut,
    stores: &mut Vec<String>,
) -> Option<Listing> {
    let listing = match list_dir(abs_dir, out) {
        Listed::Entries(l) => l,
        Listed::Vanished => return None,
        Listed::Unreadable => {
            out.skip_path(if dir.is_empty() { "." } else { dir }, reason::UNREADABLE);
            return None;
        }
    };
    if listing.is_store && !dir.is_empty() {
        stores.push(dir.to_string());
        if !ws.is_own_path(dir) {
            out.skip(reason::NESTED_STORE);
        }
        return None;
    }
    Some(listing)
}

/// True (counted in `out` when the user would want it counted) for an
/// entry of the walked directory `dir` that its name leaves out: a `.git`,
/// a store, an excluded path.
fn left_out_by_name(
    ws: &Workspace,
    dir: &str,
    name: &str,
    rel: &str,
    ent: &std::fs::DirEntry,
    out: &mut ScanOut,
) -> bool {
    if name == GIT_DIR_NAME {
        if !dir.is_empty() {
            out.skip(reason::NESTED_GIT);
        }
        return true;
    }
    // A directory named `.cairn` is a store (the workspace's own
    // at the root, or a nested workspace's): never content. A
    // file of that name below the root is ordinary content.
    if name == relpath::STORE_DIR_NAME
        && (dir.is_empty() || ent.file_type().map_or(true, |t| t.is_dir()))
    {
        // The workspace's own store is not counted; a nested one is.
        if !dir.is_empty() && !ws.is_own_path(rel) {
            out.skip(reason::NESTED_STORE);
        }
        return true;
    }
    // The directory itself is not excluded, so only this name can
    // make `rel` so (a configured exclude, the cache directory, a
    // store directory not named `.cairn`).
    if ws.has_excludes() && ws.is_excluded(rel) {
        // The cache and store directories are cairn's, not the user's: not counted.
        if !ws.is_own_path(rel) {
            out.skip(reason::EXCLUDED);
        }
        return true;
    }
    false
}

/// Looks at one entry of the walked directory `dir` (`abs_buf` is its
/// absolute path, and is left so; the entry comes with its name): a file
/// or symlink is added to `out`, what is left out is counted there; a
/// directory to walk is added to `out` and its path returned.
fn visit_entry(
    w: WalkOpts<'_>,
    dir: &str,
    (ent, name_os): (&std::fs::DirEntry, &std::ffi::OsStr),
    rules: &Option<Rc<Rules>>,
    abs_buf: &mut PathBuf,
    out: &mut ScanOut,
) -> Option<String> {
    let ws = w.ws;
    let Some(name) = name_os.to_str().filter(|n| relpath::valid_name(n)) else {
        abs_buf.push(name_os);
        let shown = relpath::join(
            &relpath::escape_bytes(dir.as_bytes()),
            &relpath::escape_bytes(name_os.as_encoded_bytes()),
        );
        skip_non_utf8(abs_buf, shown, w.follow, rules, out);
        abs_buf.pop();
        return None;
    };
    let rel = relpath::join(dir, name);
    if left_out_by_name(ws, dir, name, &rel, ent, out) {
        return None;
    }
    // On unix this is an lstat relative to the open directory: never follows a symlink.
    let m = match ent.metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.skip(reason::VANISHED);
            return None;
        }
        Err(_) => {
            out.skip_path(&rel, reason::UNREADABLE);
            return None;
        }
    };
    let is_dir = m.file_type().is_dir();
    if is_dir && w.tracked.contains(&rel) {
        // A tracked directory is captured whole, ignore rules or not:
        // `scan_full` walks it after this walk.
        return None;
    }
    if w.follow && rules.is_some() && !w.tracked.contains(&rel) {
        abs_buf.push(name);
        let ignored = is_ignored(rules, abs_buf, is_dir);
        abs_buf.pop();
        if ignored {
            out.skip(reason::IGNORED);
            return None;
        }
    }
    if is_dir {
        out.dirs.push((rel.clone(), Stat::of(&m).dir_perm()));
        Some(rel)
    } else {
        leaf(ws, rel, &m, out);
        None
    }
}

/// Names what a checkpoint cannot capture because its name `shown` (the
/// path, escaped: see [`relpath::escape_bytes`]) is not UTF-8: the entry
/// at `abs`, unless the ignore rules `rules` leave it out anyway. A file
/// or symlink is named as [`reason::NON_UTF8_NAME`]; a directory is
/// walked (ignore rules applied, symlinks never followed, `.git` and
/// stores left out as anywhere else) and every file and symlink under it
/// is named so, or, if it holds none, the directory itself (`shown/`). No
/// tree holds any of them, so no rollback deletes one.
fn skip_non_utf8(
    abs: &Path,
    shown: String,
    follow: bool,
    rules: &Option<Rc<Rules>>,
    out: &mut ScanOut,
) {
    let m = match std::fs::symlink_metadata(abs) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.skip(reason::VANISHED);
            return;
        }
        Err(_) => {
            out.skip_path(&shown, reason::NON_UTF8_NAME);
            return;
        }
    };
    let ft = m.file_type();
    if follow && is_ignored(rules, abs, ft.is_dir()) {
        out.skip(reason::IGNORED);
        return;
    }
    if ft.is_file() || ft.is_symlink() {
        out.skip_path(&shown, reason::NON_UTF8_NAME);
        return;
    }
    if !ft.is_dir() {
        out.skip(reason::SPECIAL);
        return;
    }
    skip_non_utf8_dir(abs, shown, follow, rules, out);
}

/// [`skip_non_utf8`] of a directory: every file and symlink under it is
/// named, or if it holds none, the directory itself (`shown/`).
fn skip_non_utf8_dir(
    abs: &Path,
    shown: String,
    follow: bool,
    rules: &Option<Rc<Rules>>,
    out: &mut ScanOut,
) {
    // Anything but directories met below (named, ignored, special, a
    // nested `.git` or store): else the directory itself is named.
    let mut held = false;
    let mut stack: Vec<(PathBuf, String, Option<Rc<Rules>>)> =
        vec![(abs.to_path_buf(), shown.clone(), rules.clone())];
    while let Some((dir, dir_shown, parent_rules)) = stack.pop() {
        let listing = match list_dir(&dir, out) {
            Listed::Entries(l) => l,
            Listed::Vanished => continue,
            Listed::Unreadable => {
                // What it holds cannot be listed: the directory is named.
                held = true;
                out.skip_path(&format!("{dir_shown}/"), reason::NON_UTF8_NAME);
                continue;
            }
        };
        held |= listing.unreadable > 0;
        if listing.is_store {
            held = true;
            out.skip(reason::NESTED_STORE);
            continue;
        }
        let rules = rules_below(&listing, parent_rules, &dir, follow, false);
        for (ent, name) in listing.ents {
            match non_utf8_entry((&ent, &name), &dir_shown, follow, &rules, out) {
                Some((path, rel)) => stack.push((path, rel, rules.clone())),
                None => held = true,
            }
        }
    }
    if !held {
        out.skip_path(&format!("{shown}/"), reason::NON_UTF8_NAME);
    }
}

/// Looks at one entry under a directory whose name is not UTF-8 (shown as
/// `dir_shown`): names or counts it in `out`, or returns a directory to
/// walk (its path and how it is shown).
fn non_utf8_entry(
    (ent, name): (&std::fs::DirEntry, &std::ffi::OsStr),
    dir_shown: &str,
    follow: bool,
    rules: &Option<Rc<Rules>>,
    out: &mut ScanOut,
) -> Option<(PathBuf, String)> {
    let Ok(ft) = ent.file_type() else {
        out.skip(reason::VANISHED);
        return None;
    };
    if name == GIT_DIR_NAME {
        out.skip(reason::NESTED_GIT);
        return None;
    }
    if name == relpath::STORE_DIR_NAME && ft.is_dir() {
        out.skip(reason::NESTED_STORE);
        return None;
    }
    let path = ent.path();
    if follow && is_ignored(rules, &path, ft.is_dir()) {
        out.skip(reason::IGNORED);
        return None;
    }
    let rel = relpath::join(dir_shown, &relpath::escape_bytes(name.as_encoded_bytes()));
    if ft.is_dir() {
        return Some((path, rel));
    }
    if ft.is_file() || ft.is_symlink() {
        out.skip_path(&rel, reason::NON_UTF8_NAME);
    } else {
        out.skip(reason::SPECIAL);
    }
    None
}

/// Opens a file for reading without following a symlink at its end and
/// without blocking on a FIFO: its stat and contents are then those of the
/// file itself (a checkpoint reads each file so, and so do the library's
/// file tools).
#[cfg(unix)]
pub fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: a file swapped for a FIFO since the scan opens at once
    // (and is then seen not to be a file) instead of waiting for a writer;
    // it changes nothing for a regular file.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// Opens a file for reading (portable fallback).
#[cfg(not(unix))]
pub fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// Maps an I/O error while reading a found file to a skip reason.
pub(crate) fn skip_reason(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::NotFound {
        reason::VANISHED
    } else {
        reason::UNREADABLE
    }
}
