//! Model test: random file operations, checkpoints (full and tracked-only)
//! and rollbacks on a real directory, checked against an in-memory
//! `BTreeMap` model of the tree after every step.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cairn_snapshot::*;
use proptest::prelude::*;

/// Paths the operations pick from; `b/d` is both a file and a directory
/// in different states, to exercise type changes.
const PATHS: &[&str] = &["a.txt", "b/c.txt", "b/d", "b/d/e.txt", "f/g/h.txt", ".env"];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Leaf {
    File(Vec<u8>, bool),
    Link(String),
}

#[derive(Clone, Debug)]
enum Op {
    Write(usize, u8),
    Delete(usize),
    Chmod(usize),
    Link(usize),
    Checkpoint(bool),
    /// Roll back to one of the checkpoints so far, the whole tree or only
    /// under one of [`SCOPES`].
    Rollback(usize, Option<usize>),
}

/// The paths a rollback may be limited to.
const SCOPES: &[&str] = &["a.txt", "b", "b/d", "f"];

/// Whether `p` is `scope` or under it.
fn under(p: &str, scope: &str) -> bool {
    p == scope || p.starts_with(&format!("{scope}/"))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..PATHS.len(), 0u8..4).prop_map(|(p, c)| Op::Write(p, c)),
        2 => (0..PATHS.len()).prop_map(Op::Delete),
        1 => (0..PATHS.len()).prop_map(Op::Chmod),
        1 => (0..PATHS.len()).prop_map(Op::Link),
        3 => any::<bool>().prop_map(Op::Checkpoint),
        2 => (0usize..8, proptest::option::of(0..SCOPES.len()))
            .prop_map(|(k, s)| Op::Rollback(k, s)),
    ]
}

type Model = BTreeMap<String, Leaf>;

fn disk(root: &Path, dir: &Path, out: &mut Model) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
        if rel == ".cairn" {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            out.insert(
                rel,
                Leaf::Link(
                    std::fs::read_link(&p)
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .to_string(),
                ),
            );
        } else if m.is_dir() {
            disk(root, &p, out);
        } else {
            out.insert(
                rel,
                Leaf::File(
                    std::fs::read(&p).unwrap(),
                    m.permissions().mode() & 0o100 != 0,
                ),
            );
        }
    }
}

fn from_manifest(blobs: &MemBlobs, m: &Manifest) -> Model {
    m.files()
        .map(|(p, e)| {
            let bytes = blobs.get(&e.hash).unwrap();
            let leaf = match e.kind {
                EntryKind::Symlink => Leaf::Link(String::from_utf8(bytes).unwrap()),
                _ => Leaf::File(bytes, e.is_executable()),
            };
            (p.clone(), leaf)
        })
        .collect()
}

/// Can `p` be a file given the model (no file above it, none below it)?
fn placeable(model: &Model, p: &str) -> bool {
    let below = format!("{p}/");
    !model
        .keys()
        .any(|k| k.starts_with(&below) || p.starts_with(&format!("{k}/")))
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = Workspace::open(
        &root,
        &root.join(".cairn/snapshot"),
        SnapshotOptions::default(),
    )
    .unwrap();
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    let mut model = Model::new();
    let mut snaps: Vec<(cairn_codec::CheckpointId, Model)> = Vec::new();
    // The tree of the previous checkpoint, or the tree a rollback since
    // left: what `counts.changed` counts against.
    let mut previous: Option<Model> = None;
    for op in ops {
        match op {
            Op::Write(i, _) | Op::Link(i) => {
                let p = PATHS[i];
                if !placeable(&model, p) {
                    continue;
                }
                ws.track(&[p]).unwrap();
                let abs = root.join(p);
                if abs.is_dir() && !abs.is_symlink() {
                    std::fs::remove_dir_all(&abs).unwrap(); // only empty dirs (model has no file below)
                }
                std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
                let _ = std::fs::remove_file(&abs);
                if let Op::Write(_, c) = op {
                    let content = format!("content {c} of {p}").into_bytes();
                    std::fs::write(&abs, &content).unwrap();
                    model.insert(p.to_string(), Leaf::File(content, false));
                } else {
                    std::os::unix::fs::symlink("../a.txt", &abs).unwrap();
                    model.insert(p.to_string(), Leaf::Link("../a.txt".into()));
                }
            }
            Op::Delete(i) => {
                let p = PATHS[i];
                if model.remove(p).is_some() {
                    ws.track(&[p]).unwrap();
                    std::fs::remove_file(root.join(p)).unwrap();
                }
            }
            Op::Chmod(i) => {
                let p = PATHS[i];
                if let Some(Leaf::File(_, x)) = model.get_mut(p) {
                    *x = !*x;
                    ws.track(&[p]).unwrap();
                    let mode = if *x { 0o755 } else { 0o644 };
                    std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(mode))
                        .unwrap();
                }
            }
            Op::Checkpoint(tracked) => {
                let scan = if tracked {
                    ScanMode::TrackedOnly
                } else {
                    ScanMode::Full
                };
                let c = create_checkpoint(
                    &log,
                    &blobs,
                    &ws,
                    CheckpointRequest {
                        scan,
                        ..Default::default()
                    },
                )
                .unwrap();
                let m = manifest::list(&blobs, &c.root).unwrap();
                assert_eq!(
                    from_manifest(&blobs, &m),
                    model,
                    "checkpoint {} ({scan:?}) differs from the model",
                    c.id
                );
                let expected = match &previous {
                    None => model.len(),
                    Some(prev) => prev
                        .keys()
                        .chain(model.keys())
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .filter(|k| prev.get(*k) != model.get(*k))
                        .count(),
                };
                assert_eq!(
                    c.counts.changed as usize, expected,
                    "checkpoint {} ({scan:?}): files changed since the previous one",
                    c.id
                );
                previous = Some(model.clone());
                snaps.push((c.id, model.clone()));
            }
            Op::Rollback(k, scope) => {
                if snaps.is_empty() {
                    continue;
                }
                let (id, target) = snaps[k % snaps.len()].clone();
                let scope = scope.map(|i| SCOPES[i]);
                let r = rollback(
                    &log,
                    &blobs,
                    &ws,
                    RollbackRequest {
                        paths: scope.iter().map(|s| s.to_string()).collect(),
                        ..RollbackRequest::new(id)
                    },
                )
                .unwrap();
                // The pre-rollback checkpoint holds the state just left.
                let pre = find_checkpoint(&log, &ws, r.source.unwrap()).unwrap();
                let pm = manifest::list(&blobs, &pre.root).unwrap();
                assert_eq!(from_manifest(&blobs, &pm), model, "pre-rollback checkpoint");
                snaps.push((pre.id, model.clone()));
                model = match scope {
                    None => target,
                    Some(s) => model
                        .into_iter()
                        .filter(|(p, _)| !under(p, s))
                        .chain(target.into_iter().filter(|(p, _)| under(p, s)))
                        .collect(),
                };
                previous = Some(model.clone());
            }
        }
        let mut d = Model::new();
        disk(&root, &root, &mut d);
        assert_eq!(d, model, "disk differs from the model");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
    #[test]
    fn random_ops_checkpoints_and_rollbacks_match_the_model(ops in proptest::collection::vec(op(), 1..30)) {
        run(ops);
    }
}

/// 32 cases by default; `CAIRN_SOAK=1` runs 1000.
fn cases() -> u32 {
    if std::env::var_os("CAIRN_SOAK").is_some() {
        1000
    } else {
        32
    }
}
