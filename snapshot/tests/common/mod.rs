//! Shared fixture: a real temporary workspace with a real log and blob store.
#![allow(clippy::unwrap_used, dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::CheckpointId;
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Log, LogOptions};
use cairn_engine::{RealVfs, Vfs};
use cairn_snapshot::*;

pub struct Fx {
    pub _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub ws: Workspace,
    pub log: Log,
    pub blobs: BlobStore,
}

pub fn fx() -> Fx {
    fx_with(SnapshotOptions::default())
}

pub fn fx_with(opts: SnapshotOptions) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let store = root.join(".cairn");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    std::fs::create_dir_all(store.join("log")).unwrap();
    std::fs::create_dir_all(store.join("blobs")).unwrap();
    let log = Log::open(vfs.clone(), &store.join("log"), LogOptions::default()).unwrap();
    let blobs = BlobStore::open(vfs, &store.join("blobs"), BlobOptions::default()).unwrap();
    let ws = Workspace::open(&root, &store.join("snapshot"), opts).unwrap();
    let root = ws.root().to_path_buf();
    Fx {
        _dir: dir,
        root,
        ws,
        log,
        blobs,
    }
}

impl Fx {
    /// Another handle on the same workspace and caches, as another process
    /// of the same embedder would open.
    pub fn open_workspace(&self) -> Workspace {
        Workspace::open(
            &self.root,
            &self.root.join(".cairn/snapshot"),
            SnapshotOptions::default(),
        )
        .unwrap()
    }
    pub fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
    pub fn write(&self, rel: &str, content: &str) {
        let p = self.p(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    pub fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.p(rel)).ok()
    }
    pub fn exists(&self, rel: &str) -> bool {
        std::fs::symlink_metadata(self.p(rel)).is_ok()
    }
    pub fn checkpoint(&self, label: &str) -> CheckpointInfo {
        create_checkpoint(
            &self.log,
            &self.blobs,
            &self.ws,
            CheckpointRequest {
                label: Some(label.into()),
                ..Default::default()
            },
        )
        .unwrap()
    }
    /// A tracked-only checkpoint (`ScanMode::TrackedOnly`).
    pub fn checkpoint_tracked_only(&self) -> CheckpointInfo {
        create_checkpoint(
            &self.log,
            &self.blobs,
            &self.ws,
            CheckpointRequest {
                scan: ScanMode::TrackedOnly,
                ..Default::default()
            },
        )
        .unwrap()
    }
    pub fn rollback(&self, id: CheckpointId) -> RollbackReport {
        self.try_rollback(id, &[], false).unwrap()
    }
    pub fn try_rollback(
        &self,
        id: CheckpointId,
        paths: &[&str],
        dry_run: bool,
    ) -> Result<RollbackReport> {
        rollback(
            &self.log,
            &self.blobs,
            &self.ws,
            RollbackRequest {
                paths: paths.iter().map(|s| s.to_string()).collect(),
                dry_run,
                ..RollbackRequest::new(id)
            },
        )
    }
    /// Every file under the workspace except `.cairn`, with its bytes
    /// (symlinks as `-> target`).
    pub fn tree(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        walk(&self.root, &self.root, &mut out, true);
        out
    }
}

pub fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>, skip_store: bool) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
        if skip_store && rel == ".cairn" {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            out.insert(
                rel,
                format!("-> {}", std::fs::read_link(&p).unwrap().display()).into_bytes(),
            );
        } else if m.is_dir() {
            out.insert(format!("{rel}/"), Vec::new());
            walk(root, &p, out, skip_store);
        } else {
            out.insert(rel, std::fs::read(&p).unwrap());
        }
    }
}

pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

pub fn git_available() -> bool {
    std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
