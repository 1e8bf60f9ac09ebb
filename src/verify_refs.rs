//! What `verify` checks beyond the bytes of the log and the packs: that
//! every blob a live record names is in the blob store and intact, and,
//! where one is not, which checkpoints, records and workspace paths lost
//! their contents with it.
//!
//! Live is what gc keeps: every blob a record names (`before`, `after`,
//! `diff`, `state`), except the tree and state of a checkpoint that a
//! `checkpoint.discard` evicted (gc may have collected those), and the
//! whole tree (directory nodes, file contents, symlink targets) of every
//! checkpoint not discarded. A rollback names its target checkpoint, not
//! blobs: a target evicted since may have lost its tree legitimately.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use cairn_codec::{BlobHash, CheckpointId, EventKind, Lsn};
use cairn_engine::blob::{BlobStore, BlobVerifyReport};
use cairn_snapshot::manifest::{EntryKind, Node, MAX_TREE_DEPTH};

use crate::error::Result;
use crate::store::LogHandle;

/// The most lost contents a report lists one by one; the rest are counted
/// ([`LostContents::not_listed`]). A store whose packs were all deleted
/// names every file of every checkpoint, which no reader wants line by
/// line, while the first few thousand already say what is gone.
pub const MAX_LOST_LISTED: usize = 10_000;

/// One blob a live record needs that is missing or damaged, and what it
/// held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LostContent {
    /// The record that names it (for a tree: the `checkpoint.create`).
    pub lsn: u64,
    /// The checkpoint whose tree or state it is, if any (`c<lsn>`).
    pub checkpoint: Option<String>,
    /// The workspace path whose contents it held, if it is one file's or
    /// directory's (`""` is the workspace root).
    pub path: Option<String>,
    /// What it is: `tree root`, `directory`, `file contents`, `symlink
    /// target`, `state`, `before`, `after` or `diff`.
    pub role: &'static str,
    /// The blob, 64 hex digits.
    pub blob: String,
    /// What is wrong with it: missing from the blob store, or the damage
    /// verify found (pack file and offset).
    pub detail: String,
}

impl fmt::Display for LostContent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.checkpoint {
            Some(c) => write!(f, "checkpoint {c} (LSN {})", self.lsn)?,
            None => write!(f, "record LSN {}", self.lsn)?,
        }
        match self.path.as_deref() {
            Some("") => write!(f, ": the whole tree")?,
            Some(p) => write!(f, ": `{p}`")?,
            None => {}
        }
        write!(f, ": {} (blob {}) {}", self.role, self.blob, self.detail)
    }
}

/// Every live blob that is missing or damaged, with what it held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LostContents {
    /// Distinct blobs that live records name, each checked once.
    pub checked_blobs: u64,
    /// Checkpoints whose trees were walked (those not discarded).
    pub checkpoints: u64,
    /// What was lost, at most [`MAX_LOST_LISTED`] of it.
    pub lost: Vec<LostContent>,
    /// Lost contents beyond those listed.
    pub not_listed: u64,
}

impl LostContents {
    /// True when every blob a live record names is there and intact.
    pub fn is_ok(&self) -> bool {
        self.lost.is_empty() && self.not_listed == 0
    }

    fn push(&mut self, l: LostContent) {
        if self.lost.len() < MAX_LOST_LISTED {
            self.lost.push(l);
        } else {
            self.not_listed += 1;
        }
    }
}

/// The checks, with what each blob was found to be (each blob is looked
/// up once, each intact subtree walked once).
struct Checker<'a> {
    blobs: &'a BlobStore,
    /// Blob -> the damage blob verify found in it.
    damaged: HashMap<BlobHash, String>,
    /// Blob -> None if intact, else what is wrong.
    seen: HashMap<BlobHash, Option<String>>,
    /// Directory nodes whose whole subtree is intact.
    whole: HashSet<BlobHash>,
    out: LostContents,
}

/// Where in a checkpoint a walk is.
struct At<'p> {
    lsn: Lsn,
    id: CheckpointId,
    path: &'p str,
}

impl Checker<'_> {
    /// None if `h` is stored and intact, else why not.
    fn status(&mut self, h: &BlobHash) -> Option<String> {
        if let Some(s) = self.seen.get(h) {
            return s.clone();
        }
        let s = if let Some(d) = self.damaged.get(h) {
            Some(format!("is damaged: {d}"))
        } else if !self.blobs.contains(h) {
            Some("is missing from the blob store".to_string())
        } else {
            None
        };
        self.seen.insert(*h, s.clone());
        s
    }

    fn lost(
        &mut self,
        at: &At<'_>,
        path: Option<&str>,
        role: &'static str,
        h: &BlobHash,
        detail: String,
    ) {
        self.out.push(LostContent {
            lsn: at.lsn.0,
            checkpoint: Some(at.id.to_string()),
            path: path.map(str::to_string),
            role,
            blob: h.to_hex(),
            detail,
        });
    }

    /// Walks the directory node `h` at `at.path` (depth `depth`); true if
    /// everything below it is intact. A subtree found whole is not walked
    /// again for a later checkpoint that shares it.
    fn tree(&mut self, at: &At<'_>, h: &BlobHash, depth: usize) -> bool {
        if self.whole.contains(h) {
            return true;
        }
        let role = if depth == 0 { "tree root" } else { "directory" };
        if let Some(why) = self.status(h) {
            let why = format!("{why}: nothing below it can be read");
            self.lost(at, Some(at.path), role, h, why);
            return false;
        }
        let node = match self.blobs.get(h).map_err(|e| e.to_string()).and_then(|b| {
            Node::decode(*h, &b).map_err(|e| format!("does not decode as a directory: {e}"))
        }) {
            Ok(n) => n,
            Err(e) => {
                self.lost(at, Some(at.path), role, h, e);
                return false;
            }
        };
        let mut intact = true;
        for (name, e) in &node.entries {
            let path = if at.path.is_empty() {
                name.clone()
            } else {
                format!("{}/{name}", at.path)
            };
            let here = At {
                lsn: at.lsn,
                id: at.id,
                path: &path,
            };
            match e.kind {
                EntryKind::Dir if depth + 1 > MAX_TREE_DEPTH => {
                    self.lost(
                        &here,
                        Some(&path),
                        "directory",
                        &e.hash,
                        "is deeper than a tree may be".into(),
                    );
                    intact = false;
                }
                EntryKind::Dir => intact &= self.tree(&here, &e.hash, depth + 1),
                EntryKind::File | EntryKind::Symlink => {
                    if let Some(why) = self.status(&e.hash) {
                        let role = if e.kind == EntryKind::File {
                            "file contents"
                        } else {
                            "symlink target"
                        };
                        self.lost(&here, Some(&path), role, &e.hash, why);
                        intact = false;
                    }
                }
            }
        }
        if intact {
            self.whole.insert(*h);
        }
        intact
    }
}

/// A checkpoint found in the log: its record, tree and state, and the
/// other blobs its record names (kept by gc only while it is not
/// discarded, as its tree is).
struct Found {
    lsn: Lsn,
    root: Option<BlobHash>,
    state: Option<BlobHash>,
    path: Option<String>,
    others: [(&'static str, Option<BlobHash>); 3],
}

/// Checks every blob a live record of `log` names against `blobs`, whose
/// verify report is `blob_report` (its damaged entries count as lost).
/// A record that cannot be read ends the walk: the log's own verify
/// reports it.
pub(crate) fn check(
    log: &LogHandle,
    blobs: &BlobStore,
    blob_report: &BlobVerifyReport,
) -> Result<LostContents> {
    let mut c = Checker {
        blobs,
        damaged: damaged_blobs(blob_report),
        seen: HashMap::new(),
        whole: HashSet::new(),
        out: LostContents::default(),
    };
    let (checkpoints, discarded) = check_records(&mut c, log);
    for f in checkpoints {
        if !discarded.contains(&CheckpointId(f.lsn)) {
            check_checkpoint(&mut c, f);
        }
    }
    c.out.checked_blobs = c.seen.len() as u64;
    Ok(c.out)
}

/// The blobs `blob_report` found damaged, each with where and why.
fn damaged_blobs(blob_report: &BlobVerifyReport) -> HashMap<BlobHash, String> {
    let mut damaged = HashMap::new();
    for p in &blob_report.problems {
        if let Some(h) = p.hash {
            damaged.entry(h).or_insert_with(|| {
                format!(
                    "{} at byte offset {}: {}",
                    p.path.display(),
                    p.offset,
                    p.detail
                )
            });
        }
    }
    damaged
}

/// Checks the blobs every record of `log` names but checkpoints, which it
/// returns to be checked once the discards (always later) are known, with
/// the checkpoints discarded.
fn check_records(c: &mut Checker<'_>, log: &LogHandle) -> (Vec<Found>, HashSet<CheckpointId>) {
    let iter = match log {
        LogHandle::Writer(l) => l.iter_from(Lsn::FIRST),
        LogHandle::Reader(r) => r.lock().iter_from(Lsn::FIRST),
    };
    let mut checkpoints: Vec<Found> = Vec::new();
    let mut discarded: HashSet<CheckpointId> = HashSet::new();
    for r in iter {
        let Ok(r) = r else { break };
        let e = &r.event;
        match e.kind {
            EventKind::CheckpointCreate => {
                checkpoints.push(Found {
                    lsn: r.lsn,
                    root: e.root,
                    state: e.state,
                    path: e.path.clone(),
                    others: [("before", e.before), ("after", e.after), ("diff", e.diff)],
                });
                continue;
            }
            EventKind::CheckpointDiscard => discarded.extend(e.checkpoint),
            _ => {}
        }
        for (role, h) in [
            ("before", e.before),
            ("after", e.after),
            ("diff", e.diff),
            ("state", e.state),
        ] {
            record_blob(c, r.lsn, e.path.as_deref(), role, h);
        }
    }
    (checkpoints, discarded)
}

/// Checks the blobs of one checkpoint not discarded: those its record
/// names, its tree and its state.
fn check_checkpoint(c: &mut Checker<'_>, f: Found) {
    for (role, h) in f.others {
        record_blob(c, f.lsn, f.path.as_deref(), role, h);
    }
    // A checkpoint record without a tree was imported without one
    // (`is_imported_checkpoint`): it names no blobs to check.
    let Some(root) = f.root else { return };
    c.out.checkpoints += 1;
    let at = At {
        lsn: f.lsn,
        id: CheckpointId(f.lsn),
        path: "",
    };
    c.tree(&at, &root, 0);
    if let Some(s) = f.state {
        if let Some(why) = c.status(&s) {
            c.lost(&at, None, "state", &s, why);
        }
    }
}

/// Checks one blob a record names (not a checkpoint's tree).
fn record_blob(
    c: &mut Checker<'_>,
    lsn: Lsn,
    path: Option<&str>,
    role: &'static str,
    h: Option<BlobHash>,
) {
    let Some(h) = h else { return };
    if let Some(why) = c.status(&h) {
        c.out.push(LostContent {
            lsn: lsn.0,
            checkpoint: None,
            path: path.map(str::to_string),
            role,
            blob: h.to_hex(),
            detail: why,
        });
    }
}
