//! Replay is a fold: `state(n) = fold(apply, empty, records[1..=n])`.
//!
//! # How records move the tree
//! The workspace tree (path -> blob, mode, kind) is exact at every LSN:
//! - an ok `checkpoint.create` with a `root` sets the tree to its manifest;
//! - an ok `rollback` whose `target` is a known checkpoint sets the tree to
//!   the target's manifest for the paths it lists in `files` (the snapshot
//!   crate lists the paths it wrote and deleted and the directories it
//!   created or removed; paths under a listed directory count too), which
//!   is exact for path-scoped rollbacks as well; an empty list means nothing
//!   differed; when the list was cut short (meta `files_total`), the
//!   paths in the rollback's scope (meta `scope`; every path when absent
//!   or empty) except those it kept (meta `kept`; if more were kept than
//!   that list holds, the rest are taken as set);
//! - ok file events (`file.*`, and `apply`/`undo` that carry a `path`) move
//!   it between checkpoints: an `after` hash sets the path (keeping its
//!   mode, kind file; a new path gets [`DEFAULT_FILE_MODE`]);
//!   `file.delete` removes the path; `file.move` (and a `file.patch` with a
//!   `to_path`) moves the entry to `to_path`, with `after` as its new
//!   contents when given; when the source did not exist and no `after` is
//!   given, the destination does not exist afterwards either;
//! - a path outside the workspace (absolute, or climbing out with `..`:
//!   [`cairn_codec::paths::outside_workspace`]) is history only and never
//!   in the tree: a record naming one changes nothing, except that a move
//!   out of the workspace removes its source, and a move into it sets its
//!   destination when the record gives the contents (`after`);
//! - failed records (`ok: false`) and everything else change nothing.
//!
//! The same rules, applied backwards per path, answer point queries from
//! the indexes ([`crate::Query`]); the tests check both agree at every LSN.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use cairn_codec::{BlobHash, CheckpointId, Event, EventKind, EventRef, Lsn, Timestamp};

use crate::error::{QueryError, Result};
use crate::source::{
    EntryKind, ManifestSource, Record, RecordSource, Tree, TreeEntry, DEFAULT_FILE_MODE,
};

/// What one record does to one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathChange<'a> {
    /// The path's contents become this blob (mode kept, kind file).
    Set(BlobHash),
    /// The path is removed.
    Remove,
    /// The path receives the entry of `from` (as it was before this
    /// record), with `after` as new contents when given.
    MoveIn {
        /// The source path.
        from: &'a str,
        /// New contents, if the record gives them.
        after: Option<BlobHash>,
    },
}

/// What one record does to the whole tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeChange<'a> {
    /// Nothing.
    None,
    /// The tree becomes a checkpoint's manifest.
    Checkpoint {
        /// The manifest root.
        root: BlobHash,
    },
    /// The tree (or the listed paths of it) becomes a checkpoint's manifest.
    Rollback {
        /// The checkpoint restored.
        target: CheckpointId,
        /// The paths that take the target's entries.
        scope: RollbackScope,
    },
    /// Per-path changes, applied in order.
    Paths(Vec<(&'a str, PathChange<'a>)>),
}

/// The effect of `e` on the tree, per the rules in the module docs.
pub fn tree_change(e: &Event) -> TreeChange<'_> {
    if !e.ok {
        return TreeChange::None;
    }
    match e.kind {
        EventKind::CheckpointCreate => match e.root {
            Some(root) => TreeChange::Checkpoint { root },
            None => TreeChange::None,
        },
        EventKind::Rollback => match e.target {
            Some(target) => TreeChange::Rollback {
                target,
                scope: rollback_scope(e),
            },
            None => TreeChange::None,
        },
        k => file_changes(k, e.path.as_deref(), e.to_path.as_deref(), e.after),
    }
}

/// The per-path changes of a successful file event (or of `apply`/`undo`)
/// of kind `k`; [`TreeChange::None`] for any other kind.
pub fn file_changes<'a>(
    k: EventKind,
    path: Option<&'a str>,
    to_path: Option<&'a str>,
    after: Option<BlobHash>,
) -> TreeChange<'a> {
    if !(k.is_file_op() || matches!(k, EventKind::Apply | EventKind::Undo)) {
        return TreeChange::None;
    }
    let Some(path) = path else {
        return TreeChange::None;
    };
    let dest = to_path.filter(|t| *t != path);
    let mut out = Vec::new();
    // A path outside the workspace is history only: no tree holds it. A
    // move out of the workspace removes its source; a move in sets its
    // destination only when the record gives the contents.
    let outside = |p: &str| cairn_codec::paths::outside_workspace(p).is_some();
    if outside(path) || dest.is_some_and(outside) {
        let moves = matches!(k, EventKind::FileMove | EventKind::FilePatch);
        match dest {
            Some(to) if moves && !outside(to) => {
                if let Some(a) = after {
                    out.push((to, PathChange::Set(a)));
                }
            }
            Some(_) if moves && !outside(path) => out.push((path, PathChange::Remove)),
            _ => {}
        }
        return TreeChange::Paths(out);
    }
    match (k, dest) {
        (EventKind::FileDelete, _) => out.push((path, PathChange::Remove)),
        (EventKind::FileMove | EventKind::FilePatch, Some(to)) => {
            out.push((to, PathChange::MoveIn { from: path, after }));
            out.push((path, PathChange::Remove));
        }
        _ => {
            if let Some(a) = after {
                out.push((path, PathChange::Set(a)));
            }
        }
    }
    TreeChange::Paths(out)
}

/// Why the records naming `path` are history only, if they are: it lies
/// outside the workspace (absolute, or climbing out with `..`), so no tree
/// holds it and no contents are shown, diffed, blamed or restored for it.
/// The phrase completes "`path` ...", as in "`/etc/passwd` is recorded as
/// history only, outside the workspace (an absolute path): ...".
pub fn history_only(path: &str) -> Option<String> {
    cairn_codec::paths::outside_workspace(path).map(|why| {
        let why = if why == "is absolute" {
            "an absolute path"
        } else {
            "its `..` leaves it"
        };
        format!(
            "is recorded as history only, outside the workspace ({why}): `cairn history` lists what was done to it; show, tree, diff, blame and rollback cover the workspace's files"
        )
    })
}

/// The `rollback` record's meta keys replay reads, as the snapshot crate
/// writes them (see [`cairn_snapshot::ROLLBACK_META_FILES_TOTAL`]).
pub use cairn_snapshot::{
    ROLLBACK_META_FILES_TOTAL as META_FILES_TOTAL, ROLLBACK_META_KEPT as META_KEPT,
    ROLLBACK_META_SCOPE as META_SCOPE,
};

/// Which paths a rollback record set to its target's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackScope {
    /// Only these paths and what is under them; `None`: every path.
    pub only: Option<Vec<String>>,
    /// Except these and what is under them (the paths it kept).
    pub except: Vec<String>,
}

impl RollbackScope {
    /// Every path.
    pub fn all() -> RollbackScope {
        RollbackScope::default()
    }

    /// True if the rollback set every path.
    pub fn is_all(&self) -> bool {
        self.only.is_none() && self.except.is_empty()
    }

    /// True if the rollback set `path`.
    pub fn touches(&self, path: &str) -> bool {
        let inside = match &self.only {
            None => true,
            Some(s) => !s.is_empty() && in_scope(path, s),
        };
        // (`in_scope` takes an empty list as every path.)
        let kept = !self.except.is_empty() && in_scope(path, &self.except);
        inside && !kept
    }
}

/// The paths a rollback record set: its `files` (written, deleted, created
/// and removed directories; empty when nothing differed). When that list
/// was cut short, the rollback's own scope (`meta.scope`; the whole tree
/// when absent or empty) except the paths it kept (`meta.kept`).
///
/// A listed directory stands for everything under it only when nothing
/// under it is listed too: a directory the rollback removed (its files
/// went with it). One it created, or changed the mode of, around files it
/// wrote, lists those files; taking it whole would give a rollback limited
/// to `--path d/keep.txt` every file the target had in `d`.
pub fn rollback_scope(e: &Event) -> RollbackScope {
    let cut = e
        .meta
        .as_ref()
        .map(|m| &m.0)
        .filter(|m| m.contains_key(META_FILES_TOTAL));
    let Some(m) = cut else {
        return RollbackScope {
            only: Some(without_parents(&e.files)),
            except: Vec::new(),
        };
    };
    let strings = |v: &serde_json::Value, key: Option<&str>| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| match key {
                        None => x.as_str(),
                        Some(k) => x.get(k).and_then(|p| p.as_str()),
                    })
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    RollbackScope {
        only: m
            .get(META_SCOPE)
            .map(|v| strings(v, None))
            .filter(|v| !v.is_empty()),
        except: m
            .get(META_KEPT)
            .map(|v| strings(v, Some("path")))
            .unwrap_or_default(),
    }
}

/// `paths` without those that have another of `paths` under them.
fn without_parents(paths: &[String]) -> Vec<String> {
    let mut sorted: Vec<&str> = paths.iter().map(|p| p.trim_end_matches('/')).collect();
    sorted.sort_unstable();
    sorted.dedup();
    // Sorted, a path's descendants follow it, after any sibling that sorts
    // between (`d.txt` between `d` and `d/a`), so look ahead past those.
    let has_child = |i: usize| {
        let p = sorted[i];
        sorted[i + 1..]
            .iter()
            .take_while(|q| q.starts_with(p))
            .any(|q| q.as_bytes().get(p.len()) == Some(&b'/'))
    };
    (0..sorted.len())
        .filter(|&i| !has_child(i))
        .map(|i| sorted[i].to_string())
        .collect()
}

/// The last change `e` makes to `path`, if any.
pub fn path_change<'a>(e: &'a Event, path: &str) -> Option<PathChange<'a>> {
    match tree_change(e) {
        TreeChange::Paths(v) => v
            .into_iter()
            .rev()
            .find(|(p, _)| *p == path)
            .map(|(_, c)| c),
        _ => None,
    }
}

/// True if `path` is `scope` or lies under it (as a directory).
pub fn in_scope(path: &str, scope: &[String]) -> bool {
    scope.is_empty()
        || scope.iter().any(|s| {
            let s = s.trim_end_matches('/');
            path == s || (path.starts_with(s) && path.as_bytes().get(s.len()) == Some(&b'/'))
        })
}

/// A tree that per-path changes can be applied to.
pub trait TreeMut {
    /// The entry at `path`.
    fn entry(&self, path: &str) -> Option<TreeEntry>;
    /// Sets `path`.
    fn set(&mut self, path: &str, e: TreeEntry);
    /// Removes `path`.
    fn unset(&mut self, path: &str);
}

impl TreeMut for Tree {
    fn entry(&self, path: &str) -> Option<TreeEntry> {
        self.get(path).copied()
    }
    fn set(&mut self, path: &str, e: TreeEntry) {
        self.insert(path.to_string(), e);
    }
    fn unset(&mut self, path: &str) {
        self.remove(path);
    }
}

/// Applies per-path changes to a tree (see the module docs).
pub fn apply_paths(tree: &mut dyn TreeMut, changes: &[(&str, PathChange<'_>)]) {
    for (path, c) in changes {
        match c {
            PathChange::Set(b) => {
                let mode = tree.entry(path).map_or(DEFAULT_FILE_MODE, |e| e.mode);
                tree.set(
                    path,
                    TreeEntry {
                        blob: *b,
                        mode,
                        kind: EntryKind::File,
                    },
                );
            }
            PathChange::Remove => tree.unset(path),
            PathChange::MoveIn { from, after } => {
                let src = tree.entry(from);
                let entry = match (src, after) {
                    (Some(e), Some(a)) => Some(TreeEntry {
                        blob: *a,
                        kind: EntryKind::File,
                        ..e
                    }),
                    (Some(e), None) => Some(e),
                    (None, Some(a)) => Some(TreeEntry::file(*a)),
                    (None, None) => None,
                };
                match entry {
                    Some(e) => tree.set(path, e),
                    None => tree.unset(path),
                }
            }
        }
    }
}

/// One session's state at a point.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionState {
    /// The session id.
    pub session: String,
    /// Records of this session up to the point.
    pub records: u64,
    /// The session's last record.
    pub last_lsn: Lsn,
    /// Its time.
    pub last_ts: Timestamp,
    /// The session's last checkpoint.
    pub last_checkpoint: Option<CheckpointId>,
    /// The branch the session is on: the checkpoint it last created or
    /// rolled back to, whichever came later.
    pub base: Option<CheckpointId>,
    /// The run of the session's latest record that named one.
    pub open_run: Option<String>,
}

/// Checkpoint trees a [`State`] keeps loaded, so a fold over many
/// checkpoints of the same few manifests loads each once. Each tree of a
/// large workspace can be megabytes, hence a small bound.
pub const MANIFEST_CACHE_TREES: usize = 16;

/// Changes kept on top of the last checkpoint's tree before they are
/// folded into a private copy of it: a checkpoint then costs a shared
/// pointer, not a copy of the whole tree.
pub const MAX_OVERLAY_PATHS: usize = 4096;

/// The state reached by a fold: the tree and each session's state.
///
/// The tree is kept as the last checkpoint's tree (shared) plus the paths
/// changed since, so folding a checkpoint costs no copy of the workspace.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// The last LSN folded in (0 for the empty state).
    pub lsn: Lsn,
    base: Arc<Tree>,
    overlay: BTreeMap<String, Option<TreeEntry>>,
    /// Each session's state, by session id.
    pub sessions: BTreeMap<String, SessionState>,
    /// Manifest roots of the checkpoints seen so far (for rollbacks).
    pub roots: HashMap<Lsn, BlobHash>,
    cache: HashMap<BlobHash, Arc<Tree>>,
}

impl PartialEq for State {
    fn eq(&self, o: &State) -> bool {
        self.lsn == o.lsn
            && self.sessions == o.sessions
            && self.roots == o.roots
            && self.tree() == o.tree()
    }
}

impl Eq for State {}

impl TreeMut for State {
    fn entry(&self, path: &str) -> Option<TreeEntry> {
        match self.overlay.get(path) {
            Some(e) => *e,
            None => self.base.get(path).copied(),
        }
    }
    fn set(&mut self, path: &str, e: TreeEntry) {
        self.overlay.insert(path.to_string(), Some(e));
    }
    fn unset(&mut self, path: &str) {
        self.overlay.insert(path.to_string(), None);
    }
}

impl State {
    /// The empty state (before the first record).
    pub fn new() -> State {
        State::default()
    }

    /// The workspace tree.
    pub fn tree(&self) -> Tree {
        let mut t = (*self.base).clone();
        for (p, e) in &self.overlay {
            match e {
                Some(e) => t.insert(p.clone(), *e),
                None => t.remove(p),
            };
        }
        t
    }

    /// One path's entry.
    pub fn get(&self, path: &str) -> Option<TreeEntry> {
        self.entry(path)
    }

    fn load_cached(
        &mut self,
        m: &dyn ManifestSource,
        root: &BlobHash,
        lsn: Lsn,
    ) -> Result<Arc<Tree>> {
        if let Some(t) = self.cache.get(root) {
            return Ok(t.clone());
        }
        let t = Arc::new(load(m, root, lsn)?);
        if self.cache.len() >= MANIFEST_CACHE_TREES {
            self.cache.clear();
        }
        self.cache.insert(*root, t.clone());
        Ok(t)
    }

    /// Folds one record in. Records must come in LSN order.
    pub fn apply(&mut self, r: &Record, manifests: &dyn ManifestSource) -> Result<()> {
        self.apply_event(r.lsn, &r.event, manifests)
    }

    /// [`State::apply`] for an owned event at `lsn`.
    fn apply_event(&mut self, lsn: Lsn, e: &Event, manifests: &dyn ManifestSource) -> Result<()> {
        self.check_order(lsn)?;
        match tree_change(e) {
            TreeChange::None => {}
            TreeChange::Checkpoint { root } => {
                self.base = self.load_cached(manifests, &root, lsn)?;
                self.overlay.clear();
                self.roots.insert(lsn, root);
            }
            TreeChange::Rollback { target, scope } => {
                if let Some(root) = self.roots.get(&target.0).copied() {
                    let t = self.load_cached(manifests, &root, lsn)?;
                    if scope.is_all() {
                        self.base = t;
                        self.overlay.clear();
                    } else {
                        let cur = self.tree();
                        for p in cur.keys().filter(|p| scope.touches(p)) {
                            self.overlay.insert(p.clone(), None);
                        }
                        for (p, e) in t.iter().filter(|(p, _)| scope.touches(p)) {
                            self.overlay.insert(p.clone(), Some(*e));
                        }
                    }
                }
            }
            TreeChange::Paths(v) => apply_paths(self, &v),
        }
        self.finish(lsn, &EventRef::of(e));
        Ok(())
    }

    /// Folds in one record given as a borrowed event (see [`State::apply`]):
    /// the replay's fast path, used with
    /// [`RecordSource::for_each_ref`]. Checkpoints and rollbacks, which are
    /// rare, go through the owned event.
    pub fn apply_ref(
        &mut self,
        lsn: Lsn,
        e: &EventRef<'_>,
        manifests: &dyn ManifestSource,
    ) -> Result<()> {
        if matches!(e.kind, EventKind::CheckpointCreate | EventKind::Rollback) && e.ok {
            let event = e.to_event().map_err(|err| {
                QueryError::Invalid(format!("the record at LSN {lsn} does not decode: {err}"))
            })?;
            return self.apply_event(lsn, &event, manifests);
        }
        self.check_order(lsn)?;
        if e.ok {
            if let TreeChange::Paths(v) = file_changes(e.kind, e.path, e.to_path, e.after) {
                apply_paths(self, &v);
            }
        }
        self.finish(lsn, e);
        Ok(())
    }

    fn check_order(&self, lsn: Lsn) -> Result<()> {
        if lsn <= self.lsn {
            return Err(QueryError::Invalid(format!(
                "replay out of order: LSN {} after {}",
                lsn, self.lsn
            )));
        }
        Ok(())
    }

    /// The part of a fold step after the tree: compaction of the overlay and
    /// the session's state.
    fn finish(&mut self, lsn: Lsn, e: &EventRef<'_>) {
        if self.overlay.len() > MAX_OVERLAY_PATHS {
            self.base = Arc::new(self.tree());
            self.overlay.clear();
        }
        let s = match self.sessions.get_mut(e.session) {
            Some(s) => s,
            None => self.sessions.entry(e.session.to_owned()).or_default(),
        };
        if s.session.is_empty() {
            s.session = e.session.to_owned();
        }
        s.records += 1;
        s.last_lsn = lsn;
        s.last_ts = e.ts;
        if e.run.is_some() && s.open_run.as_deref() != e.run {
            s.open_run = e.run.map(str::to_owned);
        }
        if e.ok {
            match e.kind {
                EventKind::CheckpointCreate => {
                    s.last_checkpoint = Some(CheckpointId(lsn));
                    s.base = Some(CheckpointId(lsn));
                }
                EventKind::Rollback if e.target.is_some() => s.base = e.target,
                _ => {}
            }
        }
        self.lsn = lsn;
    }
}

fn load(manifests: &dyn ManifestSource, root: &BlobHash, lsn: Lsn) -> Result<Tree> {
    manifests.tree(root).map_err(|e| QueryError::Manifest {
        lsn,
        detail: e.to_string(),
    })
}

/// `state(n)`: the fold of records `1..=n` of `src`.
pub fn state_at(src: &dyn RecordSource, manifests: &dyn ManifestSource, n: Lsn) -> Result<State> {
    let mut s = State::new();
    if n.0 == 0 {
        return Ok(s);
    }
    src.for_each_ref(Lsn::FIRST, &mut |lsn, _, e| {
        if lsn > n {
            return Ok(false);
        }
        s.apply_ref(lsn, e, manifests)?;
        Ok(lsn < n)
    })?;
    Ok(s)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::source::{MemLog, MemManifests};

    fn h(b: &[u8]) -> BlobHash {
        BlobHash::of(b)
    }

    #[test]
    fn a_listed_directory_stands_for_all_of_it_only_when_nothing_under_it_is_listed() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            without_parents(&v(&["d", "d/keep.txt"])),
            v(&["d/keep.txt"])
        );
        assert_eq!(
            without_parents(&v(&[
                "a", "a/b", "a/b/k", "gone", "d.txt", "d-x", "d", "d/a"
            ])),
            v(&["a/b/k", "d-x", "d.txt", "d/a", "gone"])
        );
        assert_eq!(without_parents(&v(&["src/", "src/x"])), v(&["src/x"]));
        assert_eq!(without_parents(&v(&["dx", "d"])), v(&["d", "dx"]));
        assert!(without_parents(&[]).is_empty());
        let mut e = Event::new(EventKind::Rollback, "s");
        e.files = v(&["d", "d/keep.txt"]);
        let scope = rollback_scope(&e);
        assert!(scope.touches("d/keep.txt"));
        assert!(!scope.touches("d/other.txt"));
        e.files = v(&["gone"]);
        assert!(rollback_scope(&e).touches("gone/deep/file"));
    }

    #[test]
    fn scoping() {
        let s = vec!["src".to_string()];
        assert!(in_scope("src", &s));
        assert!(in_scope("src/a.rs", &s));
        assert!(!in_scope("srcx/a.rs", &s));
        assert!(in_scope("anything", &[]));
    }

    #[test]
    fn moves_writes_deletes_and_checkpoints() {
        let log = MemLog::new();
        let m = MemManifests::new();
        let mut t = Tree::new();
        t.insert(
            "x".into(),
            TreeEntry {
                blob: h(b"x"),
                mode: 0o755,
                kind: EntryKind::File,
            },
        );
        let root = m.put(t);
        let mut cp = Event::new(EventKind::CheckpointCreate, "s");
        cp.root = Some(root);
        log.append(cp).unwrap(); // 1
        let mut w = Event::new(EventKind::FileWrite, "s").with_path("x");
        w.after = Some(h(b"x2"));
        log.append(w).unwrap(); // 2
        let mut mv = Event::new(EventKind::FileMove, "s").with_path("x");
        mv.to_path = Some("y".into());
        log.append(mv).unwrap(); // 3
        let mut bad = Event::new(EventKind::FileDelete, "s").with_path("y");
        bad.ok = false;
        log.append(bad).unwrap(); // 4
        let mut rb = Event::new(EventKind::Rollback, "s");
        rb.target = Some(CheckpointId(Lsn(1)));
        rb.run = Some("r2".into());
        rb.files = vec!["x".into(), "y".into()];
        log.append(rb).unwrap(); // 5

        let st = state_at(&log, &m, Lsn(3)).unwrap();
        assert_eq!(st.tree().len(), 1);
        assert_eq!(st.tree()["y"].blob, h(b"x2"));
        assert_eq!(
            st.tree()["y"].mode,
            0o755,
            "mode survives a write and a move"
        );
        assert_eq!(state_at(&log, &m, Lsn(4)).unwrap().tree(), st.tree());
        let st = state_at(&log, &m, Lsn(5)).unwrap();
        assert_eq!(st.tree().keys().cloned().collect::<Vec<_>>(), vec!["x"]);
        assert_eq!(st.tree()["x"].blob, h(b"x"));
        let s = &st.sessions["s"];
        assert_eq!(s.records, 5);
        assert_eq!(s.last_checkpoint, Some(CheckpointId(Lsn(1))));
        assert_eq!(s.base, Some(CheckpointId(Lsn(1))));
        assert_eq!(s.open_run.as_deref(), Some("r2"));
        assert!(state_at(&log, &m, Lsn(0)).unwrap().tree().is_empty());
    }

    /// Regression (outside paths in the tree): a record naming a path
    /// outside the workspace must never put it in the tree, and a move
    /// across the workspace's edge removes or sets only the inside end.
    #[test]
    fn paths_outside_the_workspace_are_history_only() {
        let log = MemLog::new();
        let m = MemManifests::new();
        let mut w = Event::new(EventKind::FileWrite, "s").with_path("/etc/passwd");
        w.after = Some(h(b"root"));
        log.append(w).unwrap(); // 1
        let mut w = Event::new(EventKind::FileWrite, "s").with_path("../sibling/x");
        w.after = Some(h(b"x"));
        log.append(w).unwrap(); // 2
        let mut w = Event::new(EventKind::FileWrite, "s").with_path("a");
        w.after = Some(h(b"a"));
        log.append(w).unwrap(); // 3
        let mut out = Event::new(EventKind::FileMove, "s").with_path("a");
        out.to_path = Some("/tmp/a".into());
        log.append(out).unwrap(); // 4
        let mut back = Event::new(EventKind::FileMove, "s").with_path("/tmp/a");
        back.to_path = Some("b".into());
        back.after = Some(h(b"a"));
        log.append(back).unwrap(); // 5
        let mut blind = Event::new(EventKind::FileMove, "s").with_path("/tmp/c");
        blind.to_path = Some("c".into());
        log.append(blind).unwrap(); // 6
        assert!(state_at(&log, &m, Lsn(2)).unwrap().tree().is_empty());
        let keys = |l: u64| {
            state_at(&log, &m, Lsn(l))
                .unwrap()
                .tree()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(3), ["a"]);
        assert!(keys(4).is_empty());
        assert_eq!(keys(6), ["b"]);
        assert!(history_only("/etc/passwd").is_some_and(|w| w.contains("history only")));
        assert!(history_only("src/a.rs").is_none());
    }
}
