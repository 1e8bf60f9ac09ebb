//! Shared helpers for the query integration tests: a deterministic RNG, a
//! manifest writer, and a scripted-session generator with a model of the
//! tree the log implies after every record.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cairn_codec::event::Meta;
use cairn_codec::{BlobHash, CheckpointId, Event, EventKind, Lsn, Timestamp};
use cairn_query::source::{EntryKind, MemLog, Tree, TreeEntry, DEFAULT_FILE_MODE};
use cairn_snapshot::manifest::{self, Entry};
use cairn_snapshot::{BlobAccess, MemBlobs};

/// xorshift64*: deterministic test data.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Stores `tree` as a snapshot manifest (Merkle nodes) in `blobs`.
pub fn store_tree(blobs: &MemBlobs, tree: &Tree) -> BlobHash {
    let mut flat: BTreeMap<String, Entry> = BTreeMap::new();
    for (p, e) in tree {
        let mut parent = String::new();
        for comp in p.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(comp);
            flat.entry(parent.clone()).or_insert(Entry {
                kind: manifest::EntryKind::Dir,
                mode: 0o755,
                size: 0,
                hash: BlobHash::ZERO,
            });
        }
        flat.insert(
            p.clone(),
            Entry {
                kind: match e.kind {
                    EntryKind::File => manifest::EntryKind::File,
                    EntryKind::Symlink => manifest::EntryKind::Symlink,
                },
                mode: e.mode,
                size: 1,
                hash: e.blob,
            },
        );
    }
    manifest::build(blobs, &flat, &BTreeSet::new(), &HashMap::new(), None)
        .unwrap()
        .0
}

pub const PATHS: [&str; 6] = [
    "a.txt",
    "b.txt",
    "src/c.rs",
    "src/d.rs",
    "e/f/g.txt",
    "bin.dat",
];

/// A scripted session: records appended to `log`, blobs in `blobs`, and
/// `expected[n]` = the tree the log implies after record n (index 0: empty).
pub struct Script {
    pub log: MemLog,
    pub blobs: MemBlobs,
    pub expected: Vec<Tree>,
    /// The workspace as it really is (shell edits included), for checkpoints.
    disk: Tree,
    known: Tree,
    checkpoints: Vec<(Lsn, Tree)>,
    ts: i64,
    counter: u64,
}

impl Script {
    pub fn new() -> Script {
        Script {
            log: MemLog::new(),
            blobs: MemBlobs::new(),
            expected: vec![Tree::new()],
            disk: Tree::new(),
            known: Tree::new(),
            checkpoints: Vec::new(),
            ts: 1_700_000_000_000,
            counter: 0,
        }
    }

    pub fn content(&mut self, rng: &mut Rng, path: &str) -> BlobHash {
        self.counter += 1;
        let bytes = if path.ends_with(".dat") {
            vec![0u8, 1, 2, self.counter as u8]
        } else {
            let mut s = String::new();
            let n = 1 + rng.below(6);
            for i in 0..n {
                // Few distinct lines, so edits keep most of them.
                s.push_str(&format!("line {} of {path}\n", (i + rng.below(3)) * 10));
            }
            s.push_str(&format!("version {}\n", self.counter));
            s.into_bytes()
        };
        self.blobs.put(&bytes).unwrap()
    }

    pub fn push(&mut self, mut e: Event) -> Lsn {
        self.ts += 1 + (self.counter % 3) as i64;
        e.ts = Timestamp(self.ts);
        let lsn = self.log.append(e).unwrap();
        self.expected.push(self.known.clone());
        lsn
    }

    fn set(tree: &mut Tree, path: &str, blob: BlobHash) {
        let mode = tree.get(path).map_or(DEFAULT_FILE_MODE, |e| e.mode);
        tree.insert(
            path.into(),
            TreeEntry {
                blob,
                mode,
                kind: EntryKind::File,
            },
        );
    }

    /// One random step. `session` names the session.
    pub fn step(&mut self, rng: &mut Rng, session: &str) {
        let path = PATHS[rng.below(PATHS.len() as u64) as usize];
        let other = PATHS[rng.below(PATHS.len() as u64) as usize];
        let mut e = Event::new(EventKind::Prompt, session);
        e.run = Some(format!("r{}", rng.below(3)));
        e.model = Some(["m1", "m2"][rng.below(2) as usize].into());
        match rng.below(14) {
            0 | 1 => {
                let kind = if self.known.contains_key(path) {
                    EventKind::FileWrite
                } else {
                    EventKind::FileCreate
                };
                e.kind = kind;
                e.path = Some(path.into());
                e.before = self.known.get(path).map(|t| t.blob);
                let a = self.content(rng, path);
                e.after = Some(a);
                Self::set(&mut self.known, path, a);
                Self::set(&mut self.disk, path, a);
            }
            2 => {
                e.kind = EventKind::FileEdit;
                e.path = Some(path.into());
                let a = self.content(rng, path);
                e.after = Some(a);
                Self::set(&mut self.known, path, a);
                Self::set(&mut self.disk, path, a);
            }
            3 => {
                e.kind = EventKind::FileDelete;
                e.path = Some(path.into());
                e.before = self.known.get(path).map(|t| t.blob);
                self.known.remove(path);
                self.disk.remove(path);
            }
            4 => {
                // Move, sometimes with new contents (a patch move).
                e.kind = if rng.below(2) == 0 {
                    EventKind::FileMove
                } else {
                    EventKind::FilePatch
                };
                e.path = Some(path.into());
                e.to_path = Some(other.into());
                if e.kind == EventKind::FilePatch {
                    e.after = Some(self.content(rng, other));
                }
                if path != other {
                    for t in [&mut self.known, &mut self.disk] {
                        let src = t.get(path).copied();
                        let entry = match (src, e.after) {
                            (Some(s), Some(a)) => Some(TreeEntry {
                                blob: a,
                                kind: EntryKind::File,
                                ..s
                            }),
                            (Some(s), None) => Some(s),
                            (None, Some(a)) => Some(TreeEntry::file(a)),
                            (None, None) => None,
                        };
                        match entry {
                            Some(x) => t.insert(other.into(), x),
                            None => t.remove(other),
                        };
                        t.remove(path);
                    }
                } else if let Some(a) = e.after {
                    Self::set(&mut self.known, path, a);
                    Self::set(&mut self.disk, path, a);
                }
            }
            5 => {
                // A failed write changes nothing.
                e.kind = EventKind::FileWrite;
                e.path = Some(path.into());
                e.after = Some(self.content(rng, path));
                e.ok = false;
                e.error_kind = Some("EACCES".into());
            }
            6 => {
                // A shell edit or chmod nobody reported: only a checkpoint sees it.
                if rng.below(2) == 0 {
                    let a = self.content(rng, path);
                    Self::set(&mut self.disk, path, a);
                } else if let Some(x) = self.disk.get_mut(path) {
                    x.mode = 0o755;
                }
                e.kind = EventKind::ToolCall;
                e.tool = Some("bash".into());
                e.files = vec![path.into()];
            }
            7 | 8 => {
                self.checkpoint(session, rng);
                return;
            }
            9 if !self.checkpoints.is_empty() => {
                self.rollback(session, rng);
                return;
            }
            10 => {
                e.kind = EventKind::Apply;
                e.files = vec![path.into(), other.into()];
                e.diff_stats = Some(cairn_codec::DiffStats {
                    lines_added: 1,
                    lines_removed: 2,
                    hunks: 1,
                });
            }
            _ => {
                e.kind =
                    [EventKind::Prompt, EventKind::Reply, EventKind::Custom][rng.below(3) as usize];
                e.text = Some("talk".into());
            }
        }
        self.push(e);
    }

    pub fn checkpoint(&mut self, session: &str, _rng: &mut Rng) -> Lsn {
        let root = store_tree(&self.blobs, &self.disk);
        let mut e = Event::new(EventKind::CheckpointCreate, session);
        e.root = Some(root);
        e.label = Some(format!("cp{}", self.checkpoints.len()));
        self.known = self.disk.clone();
        let lsn = self.push(e);
        self.checkpoints.push((lsn, self.disk.clone()));
        lsn
    }

    /// Like the snapshot crate: a checkpoint of the current state, then a
    /// rollback record listing the paths it touched (path-scoped sometimes).
    pub fn rollback(&mut self, session: &str, rng: &mut Rng) {
        let (target, ttree) =
            self.checkpoints[rng.below(self.checkpoints.len() as u64) as usize].clone();
        let pre = self.checkpoint(session, rng);
        let scope: Vec<String> = if rng.below(3) == 0 {
            vec!["src".into()]
        } else {
            vec![]
        };
        let inscope = |p: &str| scope.is_empty() || p == "src" || p.starts_with("src/");
        let mut new = self.disk.clone();
        new.retain(|p, _| !inscope(p));
        new.extend(
            ttree
                .iter()
                .filter(|(p, _)| inscope(p))
                .map(|(p, e)| (p.clone(), *e)),
        );
        let keys: BTreeSet<&String> = new.keys().chain(self.disk.keys()).collect();
        let touched: Vec<String> = keys
            .into_iter()
            .filter(|k| new.get(*k) != self.disk.get(*k))
            .cloned()
            .collect();
        let mut e = Event::new(EventKind::Rollback, session);
        e.source = Some(CheckpointId(pre));
        e.target = Some(CheckpointId(target));
        e.parents = vec![pre, target];
        e.files = touched;
        if !scope.is_empty() {
            e.text = Some("paths: src".into());
        }
        if rng.below(10) == 0 {
            // A list cut short, as the snapshot crate writes past 10,000
            // paths: the record gives its scope and the paths it kept
            // (left as they were on disk) instead.
            let mut meta = serde_json::Map::from_iter([(
                "files_total".to_string(),
                serde_json::json!(e.files.len()),
            )]);
            if !scope.is_empty() {
                meta.insert("scope".into(), serde_json::json!(["src"]));
            }
            if !e.files.is_empty() && rng.below(2) == 0 {
                let kept = e.files[rng.below(e.files.len() as u64) as usize].clone();
                match self.disk.get(&kept) {
                    Some(v) => new.insert(kept.clone(), *v),
                    None => new.remove(&kept),
                };
                meta.insert(
                    "kept".into(),
                    serde_json::json!([{"path": kept, "why": "too large"}]),
                );
            }
            e.meta = Some(Meta(meta));
            e.files.truncate(0);
        }
        self.disk = new.clone();
        self.known = new;
        self.push(e);
    }
}

/// A scripted session of `steps` random steps across two sessions.
pub fn script(seed: u64, steps: usize) -> Script {
    let mut rng = Rng(seed | 1);
    let mut s = Script::new();
    for i in 0..steps {
        let session = if i % 5 == 4 { "s2" } else { "s1" };
        s.step(&mut rng, session);
    }
    s
}
