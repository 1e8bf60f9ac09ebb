//! Deterministic crash workload over the whole store, at the facade level.
//!
//! `engine/tests/crash_workload.rs` drives the log and the blob store; this
//! one drives [`cairn::Store`] itself, with its store directory on a seeded
//! [`SimVfs`] and its workspace in a real temporary directory (the snapshot
//! crate reads and writes the workspace, and keeps its caches, through
//! `std::fs`). Each seed runs a random mix of: single appends and atomic
//! batches (some naming blobs), `Session::write_file`, shell-style edits
//! of the workspace (write, delete), checkpoints, rollbacks (whole and
//! path-scoped), retention + blob gc, queries answered from the query
//! index, damage to the persisted index file (deleted, a byte flipped, cut,
//! or replaced by an index saved earlier, possibly of another history),
//! explicit `sync`, clean close and reopen, and crashes: between
//! operations, in the middle of one (the process "dies" at its Nth file
//! operation on the store's disk: every later operation fails, then the disk
//! loses whatever was not durable, sometimes tearing the last write), during
//! recovery, and repeatedly. The durability policy is chosen per seed:
//! `always`, `never` (+ explicit `sync`) or `interval`.
//!
//! After every crash and recovery the oracle checks, through the facade:
//! every acknowledged record is present and equal to what was recorded
//! (acknowledged: the call returned under `always`; a `sync` or clean close
//! returned under `never` and `interval`); records past those are a prefix
//! of what was really attempted, never inside an atomic batch; LSNs are dense;
//! every blob a record names is byte-exact; every checkpoint in the log is
//! listed (by the snapshot crate's list and by the query index) exactly as a
//! fold over the log says, and the tree of every retained one, read through
//! the query API, has exactly the files the workspace had when it was taken,
//! byte for byte; a dry-run rollback to one of them plans exactly the
//! differences with the workspace; the history of every path equals a fold
//! over the log; the query index (loaded from disk and caught up, or
//! rebuilt) equals one built afresh from the log; `verify` is clean; and a
//! second crash and recovery right after changes nothing.
//!
//! Every failure prints its seed. Replay one with
//! `CAIRN_SEED=n cargo test -p cairn --test crash_store -- --nocapture`;
//! run more with `CAIRN_SEEDS=N` or `CAIRN_SOAK=1`. Seeds with the
//! `interval` policy replay the same workload, but where a crash point lands
//! can differ between runs: the background flusher's fsyncs are file
//! operations too, and they run on a wall-clock timer.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cairn::Filter;
use cairn::Point;
use cairn::{
    BlobHash, CheckpointId, Durability, Event, EventKind, Lsn, RetentionPolicy, RollbackRequest,
    Store,
};
use cairn_engine::log::LogReader;
use cairn_engine::vfs::{Fault, OpenMode, SimVfs, Vfs};
use cairn_query::index::{Index, INDEX_FILE};
use cairn_query::source::ReaderSource;

/// Seeds run by `cargo test` (CI).
const CI_SEEDS: u64 = 64;
/// Seeds run with `CAIRN_SOAK=1`.
const SOAK_SEEDS: u64 = 2_000;
/// Workload steps per seed.
const STEPS_PER_SEED: usize = 60;
/// The most crashes in a row during one recovery (then recovery must finish).
const MAX_RECOVERY_CRASHES: u32 = 3;
/// How far into an operation (in file operations on the store's disk) a
/// mid-operation crash may land. A checkpoint of the small workspace takes
/// a few dozen.
const MAX_CRASH_POINT_OPS: u64 = 80;
/// The store directory on the simulated disk.
const STORE: &str = "/w/.cairn";
/// The paths the workload writes (a small universe, so paths are rewritten,
/// deleted and restored often).
const PATHS: [&str; 8] = [
    "README.md",
    "a.txt",
    "src/lib.rs",
    "src/main.rs",
    "src/util/mod.rs",
    "src/util/io.rs",
    "docs/guide.md",
    "docs/img/logo.bin",
];
/// Scopes of path-scoped rollbacks (files and directories).
const SCOPES: [&str; 5] = ["src", "docs", "src/util", "a.txt", "src/main.rs"];
const SESSIONS: [&str; 3] = ["s0", "s1", "s2"];

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
    fn text(&mut self, len: usize) -> Vec<u8> {
        let words = [
            "fn ", "let ", "x", " = ", "1;\n", "self", ".", "()", "{", "}\n",
        ];
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            v.extend_from_slice(self.pick(&words).as_bytes());
        }
        v.truncate(len);
        v
    }
    fn contents(&mut self) -> Vec<u8> {
        let n = match self.below(100) {
            0..=4 => 20_000 + self.below(60_000),
            _ => self.below(2_000),
        } as usize;
        if self.chance(20) {
            (0..n).map(|_| self.next_u64() as u8).collect()
        } else {
            self.text(n)
        }
    }
}

/// The seeds to run: `CAIRN_SEED=n` replays one, `CAIRN_SEEDS=N` runs N,
/// `CAIRN_SOAK=1` runs [`SOAK_SEEDS`], otherwise [`CI_SEEDS`].
fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("CAIRN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![s];
    }
    let n = std::env::var("CAIRN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if std::env::var_os("CAIRN_SOAK").is_some() {
            SOAK_SEEDS
        } else {
            CI_SEEDS
        });
    (0..n).collect()
}

/// Counters reported at the end of a run.
#[derive(Default, Debug, Clone, Copy)]
struct Figures {
    seeds: u64,
    seeds_always: u64,
    seeds_never: u64,
    seeds_interval: u64,
    steps: u64,
    crashes_between_ops: u64,
    crashes_mid_op: u64,
    crashes_in_recovery: u64,
    torn_crashes: u64,
    recoveries: u64,
    records_acknowledged: u64,
    records_lost: u64,
    unacknowledged_records_kept: u64,
    dying_op_records_kept: u64,
    checkpoints_acknowledged: u64,
    checkpoints_checked: u64,
    rollbacks_whole: u64,
    rollbacks_scoped: u64,
    dry_runs: u64,
    session_writes: u64,
    shell_edits: u64,
    retention_gcs: u64,
    checkpoints_discarded: u64,
    index_damaged: u64,
    queries_checked: u64,
    clean_reopens: u64,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        macro_rules! sum {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        sum!(
            seeds,
            seeds_always,
            seeds_never,
            seeds_interval,
            steps,
            crashes_between_ops,
            crashes_mid_op,
            crashes_in_recovery,
            torn_crashes,
            recoveries,
            records_acknowledged,
            records_lost,
            unacknowledged_records_kept,
            dying_op_records_kept,
            checkpoints_acknowledged,
            checkpoints_checked,
            rollbacks_whole,
            rollbacks_scoped,
            dry_runs,
            session_writes,
            shell_edits,
            retention_gcs,
            checkpoints_discarded,
            index_damaged,
            queries_checked,
            clean_reopens
        );
    }
}

type Files = BTreeMap<String, Vec<u8>>;
type Check = Result<(), String>;

fn fail<T>(msg: impl Into<String>) -> Result<T, String> {
    Err(msg.into())
}

/// What the records an operation that died may have left look like.
#[derive(Clone, Debug)]
enum Maybe {
    /// This exact event (an append the test built), ending a batch or not.
    Exact(Box<Event>, bool),
    /// A record of this kind, written by the store (a checkpoint, a
    /// rollback, a recorded file write). A checkpoint of this kind took
    /// these files.
    Kind(EventKind, Option<Files>),
    /// Any number of records of this kind, in one atomic batch (retention).
    Many(EventKind),
}

struct World {
    seed: u64,
    disk: SimVfs,
    vfs: Arc<dyn Vfs>,
    ws: tempfile::TempDir,
    cache: tempfile::TempDir,
    durability: Durability,
    segment_size_bytes: u64,
    store: Option<Store>,
    /// Every record the store has, as far as this process knows, in LSN order.
    records: Vec<Event>,
    /// `batch_end[i]`: record i+1 ends an append or a batch.
    batch_end: Vec<bool>,
    /// What the operation that died in the middle may have appended after `records`.
    maybe: Vec<Maybe>,
    /// The highest acknowledged LSN.
    acked: u64,
    /// The highest LSN acknowledged by an operation whose records were
    /// never read back (the process died right after it returned).
    required: u64,
    /// The files each checkpoint (by LSN) took.
    taken: HashMap<u64, Files>,
    /// The bytes of every blob the test put or wrote.
    blob_model: HashMap<BlobHash, Vec<u8>>,
    /// Index files saved by clean closes, to put back later (stale indexes).
    old_indexes: Vec<Vec<u8>>,
    rng: Rng,
    figures: Figures,
    trace: Vec<String>,
    /// Set by the crash-point hook when the simulated process has died.
    dead: Arc<AtomicBool>,
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = Rng(seed ^ 0xC0FF_EE5E_ED00);
        let disk = SimVfs::seeded(seed);
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        vfs.create_dir_all(Path::new("/w")).unwrap();
        vfs.sync_dir(Path::new("/")).unwrap();
        let mut figures = Figures {
            seeds: 1,
            ..Figures::default()
        };
        let durability = match rng.below(10) {
            0..=3 => {
                figures.seeds_always += 1;
                Durability::Always
            }
            4..=6 => {
                figures.seeds_never += 1;
                Durability::Never
            }
            _ => {
                figures.seeds_interval += 1;
                Durability::Interval {
                    ms: 1 + rng.below(5),
                }
            }
        };
        let segment_size_bytes = 512 + rng.below(8192);
        World {
            seed,
            disk,
            vfs,
            ws: tempfile::tempdir().unwrap(),
            cache: tempfile::tempdir().unwrap(),
            durability,
            segment_size_bytes,
            store: None,
            records: Vec::new(),
            batch_end: Vec::new(),
            maybe: Vec::new(),
            acked: 0,
            required: 0,
            taken: HashMap::new(),
            blob_model: HashMap::new(),
            old_indexes: Vec::new(),
            rng,
            figures,
            trace: Vec::new(),
            dead: Arc::new(AtomicBool::new(false)),
        }
    }

    fn note(&mut self, s: impl Into<String>) {
        self.trace.push(s.into());
    }

    fn store(&self) -> &Store {
        self.store.as_ref().unwrap()
    }

    fn open(&mut self) -> cairn::Result<()> {
        let store = Store::builder()
            .store_dir(STORE)
            .workspace(self.ws.path())
            .vfs(self.vfs.clone())
            .snapshot_cache_dir(self.cache.path())
            .durability(self.durability)
            .segment_size_bytes(self.segment_size_bytes)
            .open()?;
        self.store = Some(store);
        Ok(())
    }

    /// Arms a crash point: the process dies at its `k`-th file operation
    /// on the store's disk from now (every operation from then on fails).
    fn arm_crash_point(&mut self, k: u64) {
        let count = Arc::new(AtomicU64::new(0));
        let dead = self.dead.clone();
        dead.store(false, Ordering::SeqCst);
        self.disk.set_fault_hook(move |_| {
            if count.fetch_add(1, Ordering::SeqCst) >= k {
                dead.store(true, Ordering::SeqCst);
                Some(Fault::WriteEio)
            } else {
                None
            }
        });
    }

    /// Kills the process: every further file operation fails, the store is
    /// dropped (its best-effort writes fail), then the disk loses everything
    /// not durable. Half the time the snapshot caches (on the real file
    /// system, which this test does not crash) are lost too: they must be
    /// rebuildable from the log.
    fn kill_and_crash(&mut self) {
        self.disk.set_fault_hook(|_| Some(Fault::WriteEio));
        self.store = None;
        if self.rng.chance(50) {
            self.disk.crash_tearing();
            self.figures.torn_crashes += 1;
        } else {
            self.disk.crash();
        }
        self.disk.clear_faults();
        self.dead.store(false, Ordering::SeqCst);
        if self.rng.chance(30) {
            for e in std::fs::read_dir(self.cache.path()).unwrap() {
                let p = e.unwrap().path();
                if p.file_name().and_then(|n| n.to_str()) != Some("tracked.json") {
                    let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
                }
            }
        }
    }

    /// The workspace's files now.
    fn read_ws(&self) -> Files {
        fn walk(root: &Path, dir: &Path, out: &mut Files) {
            for e in std::fs::read_dir(dir).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                if e.file_type().unwrap().is_dir() {
                    walk(root, &p, out);
                } else {
                    let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        let mut out = Files::new();
        walk(self.ws.path(), self.ws.path(), &mut out);
        out
    }

    fn ack_all(&mut self) {
        let n = self.records.len() as u64;
        if n > self.acked {
            self.figures.records_acknowledged += n - self.acked;
            for (i, e) in self.records.iter().enumerate().skip(self.acked as usize) {
                if e.kind == EventKind::CheckpointCreate && self.taken.contains_key(&(i as u64 + 1))
                {
                    self.figures.checkpoints_acknowledged += 1;
                }
            }
            self.acked = n;
        }
    }

    /// After a successful operation: the records it appended, read back
    /// through the store (newest first from the head), become known.
    ///
    /// If the process died after the operation returned (a crash point
    /// armed for it struck while reading back), returns `None`: the records
    /// stay in `maybe`, and under `always` they were acknowledged, so
    /// recovery must keep them (`required`).
    fn adopt_new(
        &mut self,
        expect_kinds: &[EventKind],
        dying: bool,
    ) -> Result<Option<Vec<(Lsn, Event)>>, String> {
        let store = self.store.as_ref().unwrap();
        let head = store.head().last_lsn.0;
        let known = self.records.len() as u64;
        if head < known {
            return fail(format!("head {head} fell below the {known} records known"));
        }
        let n = (head - known) as usize;
        if n != expect_kinds.len() {
            return fail(format!(
                "the operation appended {n} records, expected {}",
                expect_kinds.len()
            ));
        }
        if n == 0 {
            self.maybe.clear();
            return Ok(Some(Vec::new()));
        }
        let got = store.query(|q| {
            q.list(&Filter {
                newest_first: true,
                limit: Some(n),
                ..Filter::all()
            })
        });
        let mut got = match got {
            Ok(g) => g,
            Err(e) if dying && self.dead.load(Ordering::SeqCst) => {
                self.note(format!(
                    "reading back {n} new records failed while dying: {e}"
                ));
                if self.durability == Durability::Always {
                    self.required = known + n as u64;
                    self.figures.records_acknowledged += n as u64;
                }
                return Ok(None);
            }
            Err(e) => return fail(format!("read back new records: {e}")),
        };
        got.reverse();
        let mut out = Vec::new();
        for (i, r) in got.into_iter().enumerate() {
            if r.lsn.0 != known + 1 + i as u64 {
                return fail(format!(
                    "new record at {} expected {}",
                    r.lsn,
                    known + 1 + i as u64
                ));
            }
            if r.event.kind != expect_kinds[i] {
                return fail(format!(
                    "new record {} is {} expected {}",
                    r.lsn, r.event.kind, expect_kinds[i]
                ));
            }
            self.records.push(r.event.clone());
            self.batch_end.push(true);
            out.push((r.lsn, r.event));
        }
        self.maybe.clear();
        Ok(Some(out))
    }

    /// Acknowledges per the policy after a successful operation.
    fn acknowledge_op(&mut self) {
        if self.durability == Durability::Always {
            self.ack_all();
        }
    }

    /// Records an error of an operation; Ok if the process was dying.
    fn op_error(&mut self, what: &str, e: impl std::fmt::Display, dying: bool) -> Check {
        if dying && self.dead.load(Ordering::SeqCst) {
            self.note(format!("{what} failed while dying: {e}"));
            Ok(())
        } else {
            fail(format!("{what}: {e}"))
        }
    }

    fn random_event(&mut self, kind: EventKind) -> Event {
        let session = *self.rng.pick(&SESSIONS);
        let mut e = self.store().session(session).event(kind);
        let n = if self.rng.chance(15) {
            500 + self.rng.below(2000)
        } else {
            self.rng.below(60)
        };
        e.text = Some(String::from_utf8_lossy(&self.rng.text(n as usize)).into_owned());
        if self.rng.chance(40) {
            e.path = Some(self.rng.pick(&PATHS).to_string());
        }
        if kind.is_file_op() {
            // A file event names its file (the store refuses one that does not).
            e.path.get_or_insert_with(|| PATHS[0].to_string());
        }
        e
    }

    /// An append or an atomic batch of events the test builds, some naming blobs.
    fn append_step(&mut self, dying: bool) -> Check {
        let n = if self.rng.chance(60) {
            1
        } else {
            2 + self.rng.below(4) as usize
        };
        let kinds = [
            EventKind::Prompt,
            EventKind::Reply,
            EventKind::ToolCall,
            EventKind::FileWrite,
            EventKind::DiffPreview,
        ];
        let mut events: Vec<Event> = (0..n)
            .map(|_| {
                let k = *self.rng.pick(&kinds);
                self.random_event(k)
            })
            .collect();
        if self.rng.chance(40) {
            let bytes = self.rng.contents();
            let h = match self.store().put_blob(&bytes) {
                Ok(h) => h,
                Err(e) => return self.op_error("put_blob", e, dying),
            };
            if BlobHash::of(&bytes) != h {
                return fail("put_blob returned a hash that is not the blake3 of the bytes");
            }
            self.blob_model.insert(h, bytes);
            events[0].after = Some(h);
        }
        self.maybe = events
            .iter()
            .enumerate()
            .map(|(i, e)| Maybe::Exact(Box::new(e.clone()), i + 1 == events.len()))
            .collect();
        let first = self.records.len() as u64 + 1;
        let res = if n == 1 {
            self.store().append(&events[0]).map(|l| (l, l))
        } else {
            self.store().append_batch(&events).map(|r| r.unwrap())
        };
        match res {
            Ok((a, b)) => {
                if a.0 != first || b.0 != first + n as u64 - 1 {
                    return fail(format!("append returned {a}..={b}, expected {first}.."));
                }
                self.maybe.clear();
                for (i, e) in events.into_iter().enumerate() {
                    self.records.push(e);
                    self.batch_end.push(i + 1 == n);
                }
                self.note(format!("append {a}..={b}"));
                self.acknowledge_op();
                Ok(())
            }
            Err(e) => self.op_error("append", e, dying),
        }
    }

    fn session_write_step(&mut self, dying: bool) -> Check {
        let path = *self.rng.pick(&PATHS);
        let session = *self.rng.pick(&SESSIONS);
        let bytes = self.rng.contents();
        let existed = self.ws.path().join(path).exists();
        let kind = if existed {
            EventKind::FileWrite
        } else {
            EventKind::FileCreate
        };
        self.maybe = vec![Maybe::Kind(kind, None)];
        let res = self.store().session(session).write_file(path, &bytes);
        self.figures.session_writes += 1;
        match res {
            Ok(_) => {
                self.blob_model.insert(BlobHash::of(&bytes), bytes.clone());
                let Some(new) = self.adopt_new(&[kind], dying)? else {
                    return Ok(());
                };
                let e = &new[0].1;
                if e.path.as_deref() != Some(path) || e.after != Some(BlobHash::of(&bytes)) {
                    return fail(format!("write_file recorded {e:?}"));
                }
                self.note(format!("write_file {path} at {}", new[0].0));
                self.acknowledge_op();
                Ok(())
            }
            Err(e) => self.op_error("write_file", e, dying),
        }
    }

    /// Edits the workspace behind the store's back, as a shell command would.
    fn shell_edit(&mut self) {
        let path = *self.rng.pick(&PATHS);
        let full = self.ws.path().join(path);
        if full.exists() && self.rng.chance(35) {
            std::fs::remove_file(&full).unwrap();
            self.note(format!("shell rm {path}"));
        } else {
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            let bytes = self.rng.contents();
            std::fs::write(&full, bytes).unwrap();
            self.note(format!("shell write {path}"));
        }
        self.figures.shell_edits += 1;
    }

    fn checkpoint_step(&mut self, dying: bool) -> Check {
        let session = *self.rng.pick(&SESSIONS);
        let files = self.read_ws();
        self.maybe = vec![Maybe::Kind(
            EventKind::CheckpointCreate,
            Some(files.clone()),
        )];
        let label = format!("step {}", self.figures.steps);
        let res = self.store().session(session).checkpoint(&label);
        match res {
            Ok(info) => {
                let Some(new) = self.adopt_new(&[EventKind::CheckpointCreate], dying)? else {
                    return Ok(());
                };
                if new[0].0 != info.lsn || new[0].1.root != Some(info.root) {
                    return fail(format!(
                        "checkpoint returned {info:?}, log has {:?}",
                        new[0]
                    ));
                }
                self.taken.insert(info.lsn.0, files);
                self.note(format!("checkpoint {} ({session})", info.id));
                self.acknowledge_op();
                Ok(())
            }
            Err(e) => self.op_error("checkpoint", e, dying),
        }
    }

    /// The checkpoints of the known records, as a fold: (lsn, session, root, discarded).
    fn fold_checkpoints(&self) -> BTreeMap<u64, (String, BlobHash, bool)> {
        let mut out = BTreeMap::new();
        for (i, e) in self.records.iter().enumerate() {
            match e.kind {
                EventKind::CheckpointCreate => {
                    if let Some(root) = e.root {
                        out.insert(i as u64 + 1, (e.session.clone(), root, false));
                    }
                }
                EventKind::CheckpointDiscard => {
                    if let Some(c) = e.checkpoint.and_then(|c| out.get_mut(&c.0 .0)) {
                        c.2 = true;
                    }
                }
                _ => {}
            }
        }
        out
    }

    fn live_checkpoints(&self) -> Vec<u64> {
        self.fold_checkpoints()
            .into_iter()
            .filter(|(l, c)| !c.2 && self.taken.contains_key(l))
            .map(|(l, _)| l)
            .collect()
    }

    fn rollback_step(&mut self, dying: bool) -> Check {
        let live = self.live_checkpoints();
        if live.is_empty() {
            return self.checkpoint_step(dying);
        }
        let target = *self.rng.pick(&live);
        let scoped = self.rng.chance(40);
        let paths: Vec<String> = if scoped {
            vec![self.rng.pick(&SCOPES).to_string()]
        } else {
            Vec::new()
        };
        let session = self.rng.pick(&SESSIONS).to_string();
        let before = self.read_ws();
        self.maybe = vec![
            Maybe::Kind(EventKind::CheckpointCreate, Some(before.clone())),
            Maybe::Kind(EventKind::Rollback, None),
        ];
        let res = self.store().rollback(RollbackRequest {
            paths: paths.clone(),
            session,
            ..RollbackRequest::new(CheckpointId(Lsn(target)))
        });
        match res {
            Ok(report) => {
                let want = expected_after_rollback(&before, &self.taken[&target], &paths);
                let got = self.read_ws();
                if got != want {
                    return fail(format!(
                        "rollback to c{target} {paths:?}: workspace differs at {:?}",
                        differing(&got, &want)
                    ));
                }
                let Some(new) =
                    self.adopt_new(&[EventKind::CheckpointCreate, EventKind::Rollback], dying)?
                else {
                    return Ok(());
                };
                if report.source.map(|s| s.0) != Some(new[0].0) || report.lsn != Some(new[1].0) {
                    return fail(format!("rollback report {report:?} does not match the log"));
                }
                self.taken.insert(new[0].0 .0, before.clone());
                if scoped {
                    self.figures.rollbacks_scoped += 1;
                } else {
                    self.figures.rollbacks_whole += 1;
                }
                self.note(format!("rollback to c{target} {paths:?}"));
                self.acknowledge_op();
                Ok(())
            }
            Err(e) => self.op_error("rollback", e, dying),
        }
    }

    fn gc_step(&mut self, dying: bool) -> Check {
        let policy = RetentionPolicy {
            keep_per_session: Some(1 + self.rng.below(3) as usize),
            max_bytes: None,
        };
        self.maybe = vec![Maybe::Many(EventKind::CheckpointDiscard)];
        let res = self.store().gc(&policy);
        match res {
            Ok(report) => {
                let kinds = vec![EventKind::CheckpointDiscard; report.discarded.len()];
                if self.adopt_new(&kinds, dying)?.is_none() {
                    return Ok(());
                }
                self.figures.retention_gcs += 1;
                self.figures.checkpoints_discarded += report.discarded.len() as u64;
                self.note(format!("gc discarding {:?}", report.discarded));
                self.acknowledge_op();
                Ok(())
            }
            Err(e) => self.op_error("gc", e, dying),
        }
    }

    fn sync_step(&mut self, dying: bool) -> Check {
        match self.store().sync() {
            Ok(()) => {
                self.ack_all();
                Ok(())
            }
            Err(e) => self.op_error("sync", e, dying),
        }
    }

    fn index_path() -> PathBuf {
        Path::new(STORE).join("index").join(INDEX_FILE)
    }

    /// Clean close, then maybe damage the persisted query index, then reopen.
    fn close_reopen_step(&mut self, dying: bool) -> Check {
        let store = self.store.take().unwrap();
        match store.close() {
            Ok(()) if !dying || !self.dead.load(Ordering::SeqCst) => self.ack_all(),
            Ok(()) => {}
            Err(e) => return self.op_error("close", e, dying),
        }
        if dying {
            return Ok(());
        }
        let idx = Self::index_path();
        if let Some(b) = self.disk.written_bytes(&idx) {
            if self.old_indexes.len() < 8 {
                self.old_indexes.push(b);
            }
        }
        if self.rng.chance(60) {
            self.damage_index()?;
        }
        self.figures.clean_reopens += 1;
        self.note("clean reopen");
        self.open().map_err(|e| format!("clean reopen: {e}"))?;
        self.check_queries()
    }

    /// Deletes, damages or replaces the persisted query index.
    fn damage_index(&mut self) -> Check {
        let idx = Self::index_path();
        let Some(bytes) = self.disk.written_bytes(&idx) else {
            return Ok(());
        };
        self.figures.index_damaged += 1;
        match self.rng.below(4) {
            0 => {
                self.vfs.remove_file(&idx).unwrap();
                self.note("index deleted");
            }
            1 => {
                let at = self.rng.below(bytes.len() as u64);
                let b = bytes[at as usize] ^ (1 + self.rng.below(255) as u8);
                self.disk.corrupt(&idx, at, &[b]).unwrap();
                self.note(format!("index byte {at} flipped"));
            }
            2 => {
                let f = self.vfs.open(&idx, OpenMode::ReadWrite).unwrap();
                f.set_len(self.rng.below(bytes.len() as u64)).unwrap();
                f.sync_data().unwrap();
                self.note("index cut");
            }
            _ => {
                if self.old_indexes.is_empty() {
                    return Ok(());
                }
                let old = self.rng.pick(&self.old_indexes).clone();
                let f = self.vfs.open(&idx, OpenMode::CreateTruncate).unwrap();
                f.write_all_at(&old, 0).unwrap();
                f.sync_data().unwrap();
                self.note("index replaced by an older one");
            }
        }
        Ok(())
    }

    /// One workload operation; `dying` when a crash point is armed.
    fn op(&mut self, dying: bool) -> Check {
        match self.rng.below(100) {
            0..=29 => self.append_step(dying),
            30..=42 => self.session_write_step(dying),
            43..=57 => self.checkpoint_step(dying),
            58..=67 => self.rollback_step(dying),
            68..=72 => self.gc_step(dying),
            73..=81 => self.sync_step(dying),
            82..=89 if !dying => {
                self.figures.queries_checked += 1;
                self.check_queries()
            }
            82..=89 => self.append_step(dying),
            _ => self.close_reopen_step(dying),
        }
    }

    fn step(&mut self) -> Check {
        self.figures.steps += 1;
        if self.store.is_none() {
            self.open().map_err(|e| format!("open: {e}"))?;
        }
        match self.rng.below(100) {
            0..=14 => {
                self.shell_edit();
                Ok(())
            }
            15..=74 => self.op(false),
            75..=86 => {
                self.note("crash between operations");
                self.figures.crashes_between_ops += 1;
                self.kill_and_crash();
                self.recover()
            }
            _ => {
                let k = self.rng.below(MAX_CRASH_POINT_OPS);
                self.note(format!("crash point at op {k}"));
                self.arm_crash_point(k);
                self.op(true)?;
                self.figures.crashes_mid_op += 1;
                self.kill_and_crash();
                self.recover()
            }
        }
    }

    /// Recovers after a crash, possibly crashing again during recovery.
    fn recover(&mut self) -> Check {
        let mut crashes = 0;
        loop {
            if crashes < MAX_RECOVERY_CRASHES && self.rng.chance(30) {
                let k = self.rng.below(MAX_CRASH_POINT_OPS / 2);
                self.arm_crash_point(k);
                let res = self.open();
                // A query catches the index up (or rebuilds it): part of recovery too.
                if let Some(s) = &self.store {
                    let _ = s.query(|q| Ok(q.index().covered()));
                }
                self.note(format!(
                    "recovery with crash point {k}: open {:?}",
                    res.as_ref().err().map(|e| e.to_string())
                ));
                self.kill_and_crash();
                self.figures.crashes_in_recovery += 1;
                crashes += 1;
                continue;
            }
            if let Err(e) = self.open() {
                return fail(format!("recovery failed: {e}"));
            }
            self.figures.recoveries += 1;
            return self.check_after_recovery();
        }
    }

    /// The oracle, after a successful open following a crash.
    fn check_after_recovery(&mut self) -> Check {
        let head = self.store().head();
        let last = head.last_lsn.0;
        let required = self.acked.max(std::mem::take(&mut self.required));
        if last < required {
            self.figures.records_lost += required - last;
            return fail(format!(
                "lost acknowledged records: head {last} < acknowledged {required}"
            ));
        }
        let all = self
            .store()
            .query(|q| q.list(&Filter::all()))
            .map_err(|e| format!("list every record: {e}"))?;
        if all.len() as u64 != last {
            return fail(format!("{} records listed, head is {last}", all.len()));
        }
        // Records past the known ones: what the operation that died attempted.
        let known = self.records.len();
        let maybe = std::mem::take(&mut self.maybe);
        let mut mi = 0usize;
        for (i, r) in all.iter().enumerate() {
            if r.lsn.0 != i as u64 + 1 {
                return fail(format!("LSN gap: expected {}, got {}", i + 1, r.lsn));
            }
            if i < known {
                if r.event != self.records[i] {
                    return fail(format!("record {} differs from what was recorded", i + 1));
                }
                continue;
            }
            let ok = match maybe.get(mi) {
                Some(Maybe::Exact(e, end)) => {
                    let ok = r.event == **e;
                    self.records.push((**e).clone());
                    self.batch_end.push(*end);
                    mi += 1;
                    ok
                }
                Some(Maybe::Kind(k, files)) => {
                    let ok = r.event.kind == *k;
                    if let (Some(f), true) = (files, ok) {
                        self.taken.insert(r.lsn.0, f.clone());
                    }
                    self.records.push(r.event.clone());
                    self.batch_end.push(true);
                    mi += 1;
                    ok
                }
                Some(Maybe::Many(k)) => {
                    self.records.push(r.event.clone());
                    self.batch_end.push(true);
                    r.event.kind == *k
                }
                None => false,
            };
            if !ok {
                return fail(format!(
                    "record {} ({}) was never attempted (known {known}, maybe {maybe:?})",
                    r.lsn, r.event.kind
                ));
            }
            self.figures.dying_op_records_kept += 1;
        }
        if last as usize > known && !self.batch_end[last as usize - 1] {
            return fail(format!("head {last} falls inside an atomic batch"));
        }
        // What was attempted and did not survive is gone for good.
        self.records.truncate(last as usize);
        self.batch_end.truncate(last as usize);
        self.taken.retain(|l, _| *l <= last);
        // Everything present after recovery is durable now.
        self.figures.unacknowledged_records_kept += last - required;
        self.acked = last;
        self.check_contents(&all)?;
        self.check_queries()?;
        // A second recovery from this state changes nothing.
        let chain = head.chain;
        self.kill_and_crash();
        self.open()
            .map_err(|e| format!("second recovery failed: {e}"))?;
        let again = self.store().head();
        if again.last_lsn.0 != last || again.chain != chain {
            return fail(format!(
                "second recovery changed the head: {last} -> {}",
                again.last_lsn
            ));
        }
        let all2 = self
            .store()
            .query(|q| q.list(&Filter::all()))
            .map_err(|e| format!("list after the second recovery: {e}"))?;
        if all2.len() != all.len() || all2.iter().zip(&all).any(|(a, b)| a.event != b.event) {
            return fail("the second recovery changed the records");
        }
        Ok(())
    }

    /// Blobs the records name are exact; verify is clean; checkpoints read back exactly.
    fn check_contents(&mut self, all: &[cairn_engine::log::Record]) -> Check {
        let cps = self.fold_checkpoints();
        let store = self.store.as_ref().unwrap();
        for r in all {
            let e = &r.event;
            let discarded_cp =
                e.kind == EventKind::CheckpointCreate && cps.get(&r.lsn.0).is_some_and(|c| c.2);
            for h in [e.before, e.after, e.diff, e.root, e.state]
                .into_iter()
                .flatten()
            {
                if discarded_cp {
                    continue;
                }
                match store.blob(&h) {
                    Ok(b) => {
                        if self.blob_model.get(&h).is_some_and(|m| *m != b) {
                            return fail(format!("blob {h} of record {} has wrong bytes", r.lsn));
                        }
                    }
                    Err(e) => return fail(format!("blob {h} of record {}: {e}", r.lsn)),
                }
            }
        }
        let report = store.verify(None).map_err(|e| format!("verify: {e}"))?;
        if !report.is_ok() {
            return fail(format!(
                "verify found problems: log {:?} blobs {:?}",
                report.log.problems, report.blobs.problems
            ));
        }
        // Every retained checkpoint's tree, through the query API, byte-exact.
        for (lsn, (_, _, discarded)) in &cps {
            if *discarded {
                continue;
            }
            let Some(files) = self.taken.get(lsn) else {
                return fail(format!(
                    "checkpoint c{lsn} is in the log but was never taken"
                ));
            };
            let id = CheckpointId(Lsn(*lsn));
            let tree = store
                .query(|q| q.tree_at(Point::Checkpoint(id)))
                .map_err(|e| format!("tree of c{lsn}: {e}"))?;
            let paths: Vec<&String> = tree.keys().collect();
            let want: Vec<&String> = files.keys().collect();
            if paths != want {
                return fail(format!("c{lsn} lists {paths:?}, it took {want:?}"));
            }
            for (p, entry) in &tree {
                let got = store
                    .blob(&entry.blob)
                    .map_err(|e| format!("c{lsn}:{p}: {e}"))?;
                if got != files[p] {
                    return fail(format!("c{lsn}:{p} reads back different bytes"));
                }
            }
            self.figures.checkpoints_checked += 1;
        }
        // A dry-run rollback to one of them plans exactly the differences.
        let live = self.live_checkpoints();
        if !live.is_empty() {
            let target = *self.rng.pick(&live);
            let cur = self.read_ws();
            let store = self.store.as_ref().unwrap();
            let report = store
                .rollback(RollbackRequest {
                    dry_run: true,
                    ..RollbackRequest::new(CheckpointId(Lsn(target)))
                })
                .map_err(|e| format!("dry run to c{target}: {e}"))?;
            if store.head().last_lsn.0 != self.records.len() as u64 {
                return fail("a dry run appended records");
            }
            let tgt = &self.taken[&target];
            let deleted: BTreeSet<&String> = report.deleted.iter().collect();
            let want_deleted: BTreeSet<&String> =
                cur.keys().filter(|p| !tgt.contains_key(*p)).collect();
            let written: BTreeSet<&String> = report.written.iter().collect();
            let must_write: BTreeSet<&String> = tgt
                .iter()
                .filter(|(p, b)| cur.get(*p) != Some(b))
                .map(|(p, _)| p)
                .collect();
            if deleted != want_deleted
                || !must_write.is_subset(&written)
                || written.iter().any(|p| !tgt.contains_key(*p))
            {
                return fail(format!(
                    "dry run to c{target}: wrote {written:?} deleted {deleted:?}, expected at least {must_write:?} and exactly deleted {want_deleted:?}"
                ));
            }
            self.figures.dry_runs += 1;
        }
        Ok(())
    }

    /// Query answers equal a fold over the known records; the index in use
    /// equals one built afresh from the log.
    fn check_queries(&mut self) -> Check {
        let cps = self.fold_checkpoints();
        let store = self.store.as_ref().unwrap();
        let head = store.head().last_lsn.0;
        if head != self.records.len() as u64 {
            return fail(format!(
                "head {head} but {} records known",
                self.records.len()
            ));
        }
        let (index_cps, histories, index) = store
            .query(|q| {
                let cps = q.checkpoints(None);
                let mut h = Vec::new();
                for p in PATHS {
                    h.push(
                        q.history(p)?
                            .into_iter()
                            .map(|r| (r.lsn.0, r.event))
                            .collect::<Vec<_>>(),
                    );
                }
                // Whatever retention discarded, the head's tree stays readable.
                q.tree_at(cairn::Point::Head)?;
                Ok((cps, h, q.index().clone()))
            })
            .map_err(|e| format!("query: {e}"))?;
        let got: Vec<(u64, String, Option<BlobHash>, bool)> = index_cps
            .iter()
            .map(|c| {
                (
                    c.id.0 .0,
                    c.session.clone(),
                    c.root,
                    c.discarded_at.is_some(),
                )
            })
            .collect();
        let want: Vec<(u64, String, Option<BlobHash>, bool)> = cps
            .iter()
            .map(|(l, (s, r, d))| (*l, s.clone(), Some(*r), *d))
            .collect();
        if got != want {
            return fail(format!("index checkpoints {got:?}, fold {want:?}"));
        }
        for s in SESSIONS {
            let listed: Vec<(u64, bool)> = store
                .checkpoints(Some(s))
                .map_err(|e| format!("list checkpoints of {s}: {e}"))?
                .iter()
                .map(|c| (c.lsn.0, c.discarded))
                .collect();
            let want: Vec<(u64, bool)> = cps
                .iter()
                .filter(|(_, c)| c.0 == s)
                .map(|(l, c)| (*l, c.2))
                .collect();
            if listed != want {
                return fail(format!(
                    "checkpoints of {s}: listed {listed:?}, fold {want:?}"
                ));
            }
            let by_index: Vec<u64> = store
                .query(|q| Ok(q.checkpoints(Some(s))))
                .map_err(|e| format!("query checkpoints of {s}: {e}"))?
                .iter()
                .map(|c| c.id.0 .0)
                .collect();
            let want: Vec<u64> = want.iter().map(|(l, _)| *l).collect();
            if by_index != want {
                return fail(format!(
                    "index checkpoints of {s}: {by_index:?}, fold {want:?}"
                ));
            }
        }
        for (p, got) in PATHS.iter().zip(&histories) {
            let want: Vec<(u64, &Event)> = self
                .records
                .iter()
                .enumerate()
                .filter(|(_, e)| {
                    e.path.as_deref() == Some(*p)
                        || e.to_path.as_deref() == Some(*p)
                        || e.files.iter().any(|f| f == p)
                })
                .map(|(i, e)| (i as u64 + 1, e))
                .collect();
            let got: Vec<(u64, &Event)> = got.iter().map(|(l, e)| (*l, e)).collect();
            if got != want {
                return fail(format!(
                    "history of {p}: {:?}, fold {:?}",
                    got.iter().map(|g| g.0).collect::<Vec<_>>(),
                    want.iter().map(|w| w.0).collect::<Vec<_>>()
                ));
            }
        }
        let reader = LogReader::open(self.vfs.clone(), &Path::new(STORE).join("log"))
            .map_err(|e| format!("open a log reader: {e}"))?;
        let fresh = Index::build(&ReaderSource::new(reader))
            .map_err(|e| format!("build an index afresh: {e}"))?;
        if fresh != index {
            return fail("the index in use differs from one built afresh from the log");
        }
        Ok(())
    }
}

/// The workspace a rollback to `target` limited to `scope` must leave.
fn expected_after_rollback(before: &Files, target: &Files, scope: &[String]) -> Files {
    let in_scope = |p: &str| {
        scope.is_empty()
            || scope.iter().any(|s| {
                p == s
                    || p.strip_prefix(s.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            })
    };
    let mut out: Files = before
        .iter()
        .filter(|(p, _)| !in_scope(p))
        .map(|(p, b)| (p.clone(), b.clone()))
        .collect();
    for (p, b) in target {
        if in_scope(p) {
            out.insert(p.clone(), b.clone());
        }
    }
    out
}

fn differing(a: &Files, b: &Files) -> Vec<String> {
    a.keys()
        .chain(b.keys())
        .filter(|p| a.get(*p) != b.get(*p))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn run_seed(seed: u64) -> Result<Figures, String> {
    let mut w = World::new(seed);
    let policy = w.durability;
    let res = (|| {
        w.open().map_err(|e| format!("first open: {e}"))?;
        for i in 0..STEPS_PER_SEED {
            w.step().map_err(|e| format!("step {i}: {e}"))?;
        }
        // Finish with a crash and a recovery so every seed ends on the oracle.
        w.kill_and_crash();
        w.recover()
    })();
    match res {
        Ok(()) => Ok(w.figures),
        Err(e) => {
            let tail: Vec<_> = w.trace.iter().rev().take(15).rev().cloned().collect();
            Err(format!(
                "seed {} ({policy}): {e}\n  last steps: {tail:#?}",
                w.seed
            ))
        }
    }
}

#[test]
fn store_crash_workload_loses_nothing_acknowledged() {
    let mut total = Figures::default();
    let mut failures = Vec::new();
    for seed in seeds() {
        match catch_unwind(AssertUnwindSafe(|| run_seed(seed))) {
            Ok(Ok(f)) => total.add(&f),
            Ok(Err(e)) => failures.push(format!(
                "seed {seed} failed (replay: CAIRN_SEED={seed} cargo test -p cairn --test crash_store -- --nocapture): {e}"
            )),
            Err(_) => failures.push(format!(
                "seed {seed} panicked (replay: CAIRN_SEED={seed} cargo test -p cairn --test crash_store -- --nocapture)"
            )),
        }
        if failures.len() >= 5 {
            break;
        }
    }
    eprintln!("crash_store figures: {total:#?}");
    assert!(
        failures.is_empty(),
        "{} seed(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(total.records_lost, 0);
    // The workload must really have exercised what it claims to.
    assert!(total.crashes_mid_op > 0 && total.crashes_between_ops > 0 && total.recoveries > 0);
    if total.seeds >= CI_SEEDS {
        assert!(total.seeds_always > 0 && total.seeds_never > 0 && total.seeds_interval > 0);
        assert!(total.crashes_in_recovery > 0 && total.records_acknowledged > 0);
        assert!(total.checkpoints_acknowledged > 0 && total.checkpoints_checked > 0);
        assert!(total.rollbacks_whole > 0 && total.rollbacks_scoped > 0 && total.dry_runs > 0);
        assert!(total.retention_gcs > 0 && total.index_damaged > 0 && total.session_writes > 0);
    }
}
