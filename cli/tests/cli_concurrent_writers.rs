//! Concurrent writers never fail: several `cairn record` pipes and a
//! `cairn checkpoint` loop on one store, as real processes, lose no event
//! and all exit 0; and a store writes nothing into its directory after it
//! has let go of the lock.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::Store;
use cairn_engine::vfs::{LockGuard, Mapped, OpenMode, SimVfs, Vfs, VfsFile};
use common::{cairn, ok, spawn_cairn};

/// How many `record` pipes write at once, as in the report of the bug.
const RECORDERS: usize = 4;
/// Lines each pipe writes: enough for every pipe to take and give up the
/// lock many times while checkpoints come and go, few enough that the
/// test takes a few seconds.
const LINES_PER_RECORDER: usize = 40;
/// The pause between two lines of a pipe: a busy agent.
const LINE_EVERY: Duration = Duration::from_millis(20);
/// Checkpoints taken meanwhile, one every [`CHECKPOINT_EVERY`].
const CHECKPOINTS: usize = 12;
/// The pause between two checkpoints, as in the report of the bug.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// The bug: every process wrote the blob index under one temporary name
/// (`blobs/index.tmp`), and a store let go of its lock before its blob
/// index was written on close, so a recorder's rename found its file
/// renamed away by another process ("rename into place
/// .cairn/blobs/index: No such file or directory"), it died, and the
/// events piped to it after that were lost. Here every piped event must be
/// recorded and every process must exit 0.
#[test]
fn concurrent_writers_four_record_pipes_and_a_checkpoint_loop_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    ok(&cairn(ws, &["init"]));
    std::fs::write(ws.join("a.txt"), "0\n").unwrap();

    let feeders: Vec<_> = (0..RECORDERS)
        .map(|p| {
            let mut child = spawn_cairn(ws, &["record", "--ack"]);
            let mut stdin = child.stdin.take().unwrap();
            let feed = std::thread::spawn(move || {
                for i in 0..LINES_PER_RECORDER {
                    writeln!(
                        stdin,
                        r#"{{"kind":"prompt","session":"p{p}","text":"line {i}"}}"#
                    )
                    .unwrap();
                    std::thread::sleep(LINE_EVERY);
                }
            });
            (child, feed)
        })
        .collect();
    for i in 0..CHECKPOINTS {
        std::fs::write(ws.join("a.txt"), format!("{i}\n")).unwrap();
        let o = cairn(ws, &["checkpoint", "--label", &format!("c{i}")]);
        ok(&o);
        std::thread::sleep(CHECKPOINT_EVERY);
    }
    for (p, (child, feed)) in feeders.into_iter().enumerate() {
        feed.join().unwrap();
        let o = child.wait_with_output().unwrap();
        let acks = ok(&o);
        assert_eq!(
            acks.lines().count(),
            LINES_PER_RECORDER,
            "recorder {p} acknowledged {acks}"
        );
    }
    let log = ok(&cairn(ws, &["log", "--kind", "prompt", "--json"]));
    for p in 0..RECORDERS {
        let texts: Vec<String> = common::json_lines(&log)
            .iter()
            .filter(|r| r["session"] == format!("p{p}"))
            .map(|r| r["text"].as_str().unwrap().to_string())
            .collect();
        let want: Vec<String> = (0..LINES_PER_RECORDER)
            .map(|i| format!("line {i}"))
            .collect();
        assert_eq!(texts, want, "the events of pipe {p}");
    }
    ok(&cairn(ws, &["verify"]));
}

/// A file system that notes every write into the store directory made
/// while another process could take the store lock: at those moments,
/// [`Vfs::lock_exclusive`] on the lock file succeeds.
#[derive(Debug)]
struct LockWatch {
    inner: SimVfs,
    lock_file: std::path::PathBuf,
    armed: AtomicBool,
    unlocked_writes: Mutex<Vec<String>>,
}

impl LockWatch {
    fn note(&self, what: &str, path: &Path) {
        if self.armed.load(Ordering::SeqCst) && self.inner.lock_exclusive(&self.lock_file).is_ok() {
            self.unlocked_writes
                .lock()
                .unwrap()
                .push(format!("{what} {}", path.display()));
        }
    }
}

impl Vfs for LockWatch {
    fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Arc<dyn VfsFile>> {
        if !matches!(mode, OpenMode::Read) {
            self.note("open for writing", path);
        }
        self.inner.open(path, mode)
    }
    fn map(&self, path: &Path) -> std::io::Result<Mapped> {
        self.inner.map(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.note("rename onto", to);
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.note("remove", path);
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn lock_exclusive(&self, path: &Path) -> std::io::Result<LockGuard> {
        self.inner.lock_exclusive(path)
    }
}

/// The cause of the bug above, on its own: a store dropped (or closed)
/// wrote its blob index and its log's tail state after its lock was
/// released, when another writer may already have the store.
#[test]
fn concurrent_writers_a_store_writes_nothing_after_letting_go_of_its_lock() {
    for close in [false, true] {
        let root = Path::new("/ws/.cairn");
        let vfs = Arc::new(LockWatch {
            inner: SimVfs::new(),
            lock_file: root.join("LOCK"),
            armed: AtomicBool::new(false),
            unlocked_writes: Mutex::new(Vec::new()),
        });
        let ws = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let store = Store::builder()
            .store_dir(root)
            .workspace(ws.path())
            .snapshot_cache_dir(cache.path())
            .vfs(vfs.clone())
            .open()
            .unwrap();
        // A blob put after the index was last written: the index is
        // written again when the store goes.
        store
            .put_blob(b"contents not yet in the blob index")
            .unwrap();
        store
            .session("s")
            .prompt("a record, so the log has a tail to save")
            .unwrap();
        vfs.armed.store(true, Ordering::SeqCst);
        if close {
            store.close().unwrap();
        } else {
            drop(store);
        }
        let late = vfs.unlocked_writes.lock().unwrap().clone();
        assert!(
            late.is_empty(),
            "written after the lock was let go (close: {close}): {late:?}"
        );
        assert!(vfs.inner.lock_exclusive(&root.join("LOCK")).is_ok());
    }
}
