//! Deterministic crash workload on the simulated disk ([`SimVfs`]).
//!
//! Each seed drives a randomized workload against the log and the blob
//! store together: single appends, atomic batches, blob puts under the
//! commit protocol (blobs put and synced before the record that refers to
//! them is appended), segment and pack rolls (tiny sizes), garbage
//! collection, clean reopens, and crashes: between operations, in the middle
//! of one (the process "dies" at its Nth file operation: every later
//! operation fails and the disk then loses whatever was not durable,
//! sometimes tearing the last write), during recovery, and repeatedly.
//!
//! After every crash and recovery the oracle checks: every acknowledged
//! record is present and equal to what was appended; any record past the
//! acknowledged ones is one that was really appended (a prefix of the
//! un-acknowledged tail) and the head never falls inside an atomic batch;
//! LSNs are dense from 1; every blob a record refers to is present and
//! byte-exact; no blob the store lists returns wrong bytes; `verify()` of
//! the log and of the blob store finds no problem; and a second crash and
//! recovery right after changes nothing (same head, same chain).
//!
//! Every failure prints its seed. Replay one seed with
//! `CAIRN_SEED=n cargo test -p cairn-engine --test crash_workload -- --nocapture`;
//! run more seeds with `CAIRN_SEEDS=N` or `CAIRN_SOAK=1`.
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cairn_codec::{BlobHash, Event, EventKind, Lsn, Timestamp};
use cairn_engine::blob::{BlobOptions, BlobStore, GcOptions};
use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::vfs::{Fault, SimVfs, Vfs};

/// Seeds run by `cargo test` (CI): two thousand, split over the machine's
/// cores (about 80 s on CI's two cores in a debug build).
const CI_SEEDS: u64 = 2_000;
/// Seeds run with `CAIRN_SOAK=1`.
const SOAK_SEEDS: u64 = 5_000;
/// Workload steps per seed.
const STEPS_PER_SEED: usize = 70;
/// The most crashes in a row during one recovery (then recovery must finish).
const MAX_RECOVERY_CRASHES: u32 = 4;
/// How far into an operation (in file operations) a mid-operation crash may land.
const MAX_CRASH_POINT_OPS: u64 = 60;

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
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        // Half compressible text, half noise, so both stored forms appear.
        if self.chance(50) {
            let words = [
                "fn ", "let ", "x", " = ", "1;\n", "self", ".", "()", "{", "}\n",
            ];
            let mut v = Vec::with_capacity(len);
            while v.len() < len {
                v.extend_from_slice(words[self.below(words.len() as u64) as usize].as_bytes());
            }
            v.truncate(len);
            v
        } else {
            (0..len).map(|_| self.next_u64() as u8).collect()
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
    steps: u64,
    crashes_between_ops: u64,
    crashes_mid_op: u64,
    crashes_in_recovery: u64,
    torn_crashes: u64,
    recoveries: u64,
    records_acknowledged: u64,
    records_lost: u64,
    blobs_put: u64,
    gcs: u64,
    segment_files_max: u64,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.seeds += o.seeds;
        self.steps += o.steps;
        self.crashes_between_ops += o.crashes_between_ops;
        self.crashes_mid_op += o.crashes_mid_op;
        self.crashes_in_recovery += o.crashes_in_recovery;
        self.torn_crashes += o.torn_crashes;
        self.recoveries += o.recoveries;
        self.records_acknowledged += o.records_acknowledged;
        self.records_lost += o.records_lost;
        self.blobs_put += o.blobs_put;
        self.gcs += o.gcs;
        self.segment_files_max = self.segment_files_max.max(o.segment_files_max);
    }
}

struct World {
    disk: SimVfs,
    vfs: Arc<dyn Vfs>,
    log_dir: PathBuf,
    blob_dir: PathBuf,
    log_opts: LogOptions,
    blob_opts: BlobOptions,
    log: Option<Log>,
    blobs: Option<BlobStore>,
    /// Every event appended (returned or attempted), in LSN order.
    model: Vec<Event>,
    /// `batch_end[i]`: the event at LSN i+1 ends an append or a batch.
    batch_end: Vec<bool>,
    /// The highest acknowledged LSN.
    acked: u64,
    /// The contents of every blob ever put.
    blob_model: HashMap<BlobHash, Vec<u8>>,
    /// The blobs in the order first put (for deterministic picks).
    blob_order: Vec<BlobHash>,
    rng: Rng,
    figures: Figures,
    trace: Vec<String>,
    /// Set by a crash-point hook when the simulated process has died.
    dead: Arc<AtomicBool>,
}

type Check = Result<(), String>;

fn fail<T>(msg: impl Into<String>) -> Result<T, String> {
    Err(msg.into())
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = Rng(seed ^ 0x5EED_CA1B);
        let disk = SimVfs::seeded(seed);
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        let root = Path::new("/w/.cairn");
        let log_dir = root.join("log");
        let blob_dir = root.join("blobs");
        for d in [&log_dir, &blob_dir] {
            vfs.create_dir_all(d).unwrap();
        }
        for d in ["/", "/w", "/w/.cairn"] {
            vfs.sync_dir(Path::new(d)).unwrap();
        }
        let durability = if rng.chance(60) {
            Durability::Always
        } else {
            Durability::Never
        };
        let log_opts = LogOptions {
            segment_size_bytes: 256 + rng.below(4096),
            durability,
            ..LogOptions::default()
        };
        let blob_opts = BlobOptions {
            pack_size_bytes: 0, // clamped up to the minimum: packs roll often
            chunking_threshold_bytes: if rng.chance(50) {
                8 * 1024
            } else {
                1024 * 1024
            },
            ..BlobOptions::default()
        };
        World {
            disk,
            vfs,
            log_dir,
            blob_dir,
            log_opts,
            blob_opts,
            log: None,
            blobs: None,
            model: Vec::new(),
            batch_end: Vec::new(),
            acked: 0,
            blob_model: HashMap::new(),
            blob_order: Vec::new(),
            rng,
            figures: Figures {
                seeds: 1,
                ..Figures::default()
            },
            trace: Vec::new(),
            dead: Arc::new(AtomicBool::new(false)),
        }
    }

    fn note(&mut self, s: String) {
        self.trace.push(s);
    }

    fn log(&self) -> &Log {
        self.log.as_ref().unwrap()
    }

    fn blobs(&self) -> &BlobStore {
        self.blobs.as_ref().unwrap()
    }

    fn open(&mut self) -> cairn_engine::Result<()> {
        let blobs = BlobStore::open(self.vfs.clone(), &self.blob_dir, self.blob_opts.clone())?;
        self.blobs = Some(blobs);
        let log = Log::open(self.vfs.clone(), &self.log_dir, self.log_opts)?;
        self.log = Some(log);
        Ok(())
    }

    /// Arms a crash point: the process dies at its `k`-th file operation
    /// from now (every operation from then on fails).
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

    /// Kills the process: every further file operation fails, the engine
    /// objects are dropped (their best-effort writes fail), then the disk
    /// loses everything not durable.
    fn kill_and_crash(&mut self) {
        self.disk.set_fault_hook(|_| Some(Fault::WriteEio));
        self.log = None;
        self.blobs = None;
        if self.rng.chance(50) {
            self.disk.crash_tearing();
            self.figures.torn_crashes += 1;
        } else {
            self.disk.crash();
        }
        self.disk.clear_faults();
        self.dead.store(false, Ordering::SeqCst);
    }

    /// Recovers after a crash, possibly crashing again during recovery.
    fn recover(&mut self) -> Check {
        let mut crashes = 0;
        loop {
            let crash_now = crashes < MAX_RECOVERY_CRASHES && self.rng.chance(30);
            if crash_now {
                let k = self.rng.below(MAX_CRASH_POINT_OPS);
                self.arm_crash_point(k);
                let res = self.open();
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
        let head = self.log().head();
        let last = head.last_lsn.0;
        if last < self.acked {
            self.figures.records_lost += self.acked - last;
            return fail(format!(
                "lost acknowledged records: head {last} < acknowledged {}",
                self.acked
            ));
        }
        if last > self.model.len() as u64 {
            return fail(format!(
                "head {last} is past every record ever appended ({})",
                self.model.len()
            ));
        }
        if last > 0 && !self.batch_end[last as usize - 1] {
            return fail(format!("head {last} falls inside an atomic batch"));
        }
        self.check_contents()?;
        // Everything present after recovery is durable now.
        self.model.truncate(last as usize);
        self.batch_end.truncate(last as usize);
        self.acked = last;
        // A second recovery from this state changes nothing.
        let chain = head.chain;
        self.kill_and_crash();
        if let Err(e) = self.open() {
            return fail(format!("second recovery failed: {e}"));
        }
        let again = self.log().head();
        if again.last_lsn.0 != last || again.chain != chain {
            return fail(format!(
                "second recovery changed the head: {last} -> {}",
                again.last_lsn.0
            ));
        }
        self.check_contents()
    }

    /// Records equal the model, dense; blobs they name are intact; verify is clean.
    fn check_contents(&mut self) -> Check {
        let pick_seed = self.rng.next_u64();
        let log = self.log();
        let head = log.head();
        let mut expect = 1u64;
        for r in log.iter_from(Lsn(1)) {
            let r = r.map_err(|e| format!("reading LSN {expect}: {e}"))?;
            if r.lsn.0 != expect {
                return fail(format!("LSN gap: expected {expect}, got {}", r.lsn.0));
            }
            let Some(want) = self.model.get(expect as usize - 1) else {
                return fail(format!("record {expect} was never appended"));
            };
            if &r.event != want {
                return fail(format!("record {expect} differs from what was appended"));
            }
            for h in refs(&r.event) {
                let Some(bytes) = self.blob_model.get(&h) else {
                    return fail(format!("record {expect} names blob {h} never put"));
                };
                match self.blobs().get(&h) {
                    Ok(got) if &got == bytes => {}
                    Ok(_) => return fail(format!("blob {h} of record {expect} has wrong bytes")),
                    Err(e) => return fail(format!("blob {h} of record {expect}: {e}")),
                }
            }
            expect += 1;
        }
        if expect - 1 != head.last_lsn.0 {
            return fail(format!(
                "iteration ended at {} but head is {}",
                expect - 1,
                head.last_lsn.0
            ));
        }
        if head.last_lsn.0 > 0 {
            let pick = 1 + pick_seed % head.last_lsn.0;
            let r = log
                .read(Lsn(pick))
                .map_err(|e| format!("read({pick}): {e}"))?;
            if r.event != self.model[pick as usize - 1] {
                return fail(format!("read({pick}) differs"));
            }
        }
        let report = log.verify().map_err(|e| format!("log verify: {e}"))?;
        if !report.problems.is_empty() {
            return fail(format!("log verify found problems: {:?}", report.problems));
        }
        if report.head != head {
            return fail("log verify recomputed a different head");
        }
        // No blob the store lists ever comes back with wrong bytes.
        for h in self.blobs().hashes() {
            if let Ok(got) = self.blobs().get(&h) {
                if BlobHash::of(&got) != h {
                    return fail(format!("blob {h} returned bytes that do not hash to it"));
                }
            }
        }
        let breport = self
            .blobs()
            .verify()
            .map_err(|e| format!("blob verify: {e}"))?;
        if !breport.problems.is_empty() {
            return fail(format!(
                "blob verify found problems: {:?}",
                breport.problems
            ));
        }
        let segs = self
            .vfs
            .list(&self.log_dir)
            .map(|v| v.iter().filter(|n| n.ends_with(".seg")).count() as u64)
            .unwrap_or(0);
        self.figures.segment_files_max = self.figures.segment_files_max.max(segs);
        Ok(())
    }

    fn random_event(&mut self) -> Event {
        let kind = EventKind::ALL[self.rng.below(EventKind::ALL.len() as u64) as usize];
        let mut e = Event::new(kind, format!("s{}", self.rng.below(3)));
        e.ts = Timestamp::from_millis(1_700_000_000_000 + self.model.len() as i64).unwrap();
        let n = if self.rng.chance(20) {
            600 + self.rng.below(1500)
        } else {
            self.rng.below(80)
        };
        e.text = Some(String::from_utf8_lossy(&self.rng.bytes(n as usize)).into_owned());
        if self.rng.chance(40) {
            e.path = Some(format!("src/f{}.rs", self.rng.below(20)));
        }
        e
    }

    fn random_blob(&mut self) -> Vec<u8> {
        // Reuse an earlier blob now and then (deduplication).
        if !self.blob_model.is_empty() && self.rng.chance(15) {
            let i = self.rng.below(self.blob_order.len() as u64) as usize;
            return self.blob_model[&self.blob_order[i]].clone();
        }
        let n = match self.rng.below(100) {
            0..=1 => 300_000 + self.rng.below(200_000), // chunked
            2..=9 => 9_000 + self.rng.below(40_000),
            _ => self.rng.below(3000),
        };
        self.rng.bytes(n as usize)
    }

    /// Appends `events` (one append or one batch), with blobs put and synced
    /// first. Returns Err only for an unexpected engine error.
    fn append_step(&mut self, n_events: usize, dying: bool) -> Check {
        let mut events: Vec<Event> = (0..n_events).map(|_| self.random_event()).collect();
        // The commit protocol: blobs first, synced, then the records.
        let n_blobs = if self.rng.chance(50) {
            1 + self.rng.below(3) as usize
        } else {
            0
        };
        if n_blobs > 0 {
            let contents: Vec<Vec<u8>> = (0..n_blobs).map(|_| self.random_blob()).collect();
            let res = if self.rng.chance(50) {
                let refs: Vec<&[u8]> = contents.iter().map(|c| c.as_slice()).collect();
                self.blobs().put_batch(&refs)
            } else {
                let mut hs = Vec::new();
                let mut r = Ok(());
                for c in &contents {
                    match self.blobs().put(c) {
                        Ok(h) => hs.push(h),
                        Err(e) => {
                            r = Err(e);
                            break;
                        }
                    }
                }
                r.and_then(|_| self.blobs().sync()).map(|_| hs)
            };
            let hashes = match res {
                Ok(h) => h,
                Err(e) if dying => {
                    self.note(format!("blob put failed while dying: {e}"));
                    return Ok(());
                }
                Err(e) => return fail(format!("blob put: {e}")),
            };
            for (c, h) in contents.into_iter().zip(&hashes) {
                if BlobHash::of(&c) != *h {
                    return fail("put returned a hash that is not the blake3 of the bytes");
                }
                if self.blob_model.insert(*h, c).is_none() {
                    self.blob_order.push(*h);
                }
                self.figures.blobs_put += 1;
            }
            for (i, h) in hashes.iter().enumerate() {
                let n = events.len();
                let e = &mut events[i % n];
                match i % 3 {
                    0 => e.after = Some(*h),
                    1 => e.before = Some(*h),
                    _ => e.diff = Some(*h),
                }
            }
        }
        let first = self.model.len() as u64 + 1;
        for (i, e) in events.iter().enumerate() {
            self.model.push(e.clone());
            self.batch_end.push(i + 1 == events.len());
        }
        let res = if events.len() == 1 && self.rng.chance(50) {
            self.log().append(&events[0]).map(|l| (l, l))
        } else {
            self.log().append_batch(&events).map(|r| r.unwrap())
        };
        match res {
            Ok((a, b)) => {
                if a.0 != first || b.0 != first + events.len() as u64 - 1 {
                    return fail(format!(
                        "append returned {}..={} but the model expected {first}..",
                        a.0, b.0
                    ));
                }
                self.note(format!("append {}..={}", a.0, b.0));
                if self.log_opts.durability == Durability::Always {
                    self.ack(b.0);
                }
                Ok(())
            }
            Err(e) if dying => {
                self.note(format!("append failed while dying: {e}"));
                Ok(())
            }
            Err(e) => fail(format!("append: {e}")),
        }
    }

    fn ack(&mut self, lsn: u64) {
        if lsn > self.acked {
            self.figures.records_acknowledged += lsn - self.acked;
            self.acked = lsn;
        }
    }

    fn sync_step(&mut self, dying: bool) -> Check {
        let target = self.model.len() as u64;
        match self.log().sync() {
            Ok(()) => {
                self.ack(target);
                Ok(())
            }
            Err(e) if dying => {
                self.note(format!("sync failed while dying: {e}"));
                Ok(())
            }
            Err(e) => fail(format!("log sync: {e}")),
        }
    }

    fn gc_step(&mut self, dying: bool) -> Check {
        let mut live = HashSet::new();
        for r in self.log().iter_from(Lsn(1)) {
            match r {
                Ok(r) => live.extend(refs(&r.event)),
                Err(e) if dying => {
                    self.note(format!("reading the log for gc failed while dying: {e}"));
                    return Ok(());
                }
                Err(e) => return fail(format!("reading the log for gc: {e}")),
            }
        }
        match self.blobs().gc(&live, GcOptions::default()) {
            Ok(_) => {
                self.figures.gcs += 1;
                self.note(format!("gc keeping {}", live.len()));
                Ok(())
            }
            Err(e) if dying => {
                self.note(format!("gc failed while dying: {e}"));
                Ok(())
            }
            Err(e) => fail(format!("gc: {e}")),
        }
    }

    /// One workload operation; `dying` when a crash point is armed.
    fn op(&mut self, dying: bool) -> Check {
        match self.rng.below(100) {
            0..=49 => self.append_step(1, dying),
            50..=69 => {
                let n = 2 + self.rng.below(5) as usize;
                self.append_step(n, dying)
            }
            70..=79 => self.sync_step(dying),
            80..=86 => self.gc_step(dying),
            _ => {
                // Clean close and reopen.
                let log = self.log.take().unwrap();
                let closed = log.close();
                self.blobs = None;
                match closed {
                    Ok(()) if !dying => {
                        // A clean close syncs: everything appended is durable.
                        let n = self.model.len() as u64;
                        self.ack(n);
                    }
                    Ok(()) => {}
                    Err(e) if dying => self.note(format!("close failed while dying: {e}")),
                    Err(e) => return fail(format!("close: {e}")),
                }
                if dying {
                    return Ok(());
                }
                self.note("clean reopen".into());
                self.open().map_err(|e| format!("clean reopen: {e}"))?;
                self.check_contents()
            }
        }
    }

    fn step(&mut self) -> Check {
        self.figures.steps += 1;
        match self.rng.below(100) {
            0..=74 => self.op(false),
            75..=87 => {
                self.note("crash between operations".into());
                self.figures.crashes_between_ops += 1;
                self.kill_and_crash();
                self.recover()
            }
            _ => {
                let k = self.rng.below(MAX_CRASH_POINT_OPS);
                self.note(format!("crash point at op {k}"));
                self.arm_crash_point(k);
                if self.log.is_none() {
                    self.open().map_err(|e| format!("open: {e}"))?;
                }
                self.op(true)?;
                self.figures.crashes_mid_op += 1;
                self.kill_and_crash();
                self.recover()
            }
        }
    }
}

/// The blobs an event refers to.
fn refs(e: &Event) -> Vec<BlobHash> {
    [e.after, e.before, e.diff].into_iter().flatten().collect()
}

fn run_seed(seed: u64) -> Result<Figures, String> {
    let mut w = World::new(seed);
    w.open().map_err(|e| format!("first open: {e}"))?;
    for i in 0..STEPS_PER_SEED {
        if let Err(e) = w.step() {
            let tail: Vec<_> = w.trace.iter().rev().take(12).rev().cloned().collect();
            return Err(format!("step {i}: {e}\n  last steps: {tail:#?}"));
        }
    }
    // Finish with a crash and a recovery so every seed ends on the oracle.
    w.kill_and_crash();
    w.recover()?;
    Ok(w.figures)
}

/// Runs `seeds`; returns the summed figures and the failures (stopping
/// after a few).
fn run_seeds(seeds: &[u64]) -> (Figures, Vec<String>) {
    let mut total = Figures::default();
    let mut failures = Vec::new();
    for &seed in seeds {
        match catch_unwind(AssertUnwindSafe(|| run_seed(seed))) {
            Ok(Ok(f)) => total.add(&f),
            Ok(Err(e)) => failures.push(format!(
                "seed {seed} failed (replay: CAIRN_SEED={seed} cargo test -p cairn-engine --test crash_workload -- --nocapture): {e}"
            )),
            Err(_) => failures.push(format!(
                "seed {seed} panicked (replay: CAIRN_SEED={seed} cargo test -p cairn-engine --test crash_workload -- --nocapture)"
            )),
        }
        if failures.len() >= 5 {
            break;
        }
    }
    (total, failures)
}

#[test]
fn crash_workload_loses_nothing_acknowledged() {
    // Seeds are independent (each has its own simulated disk), so they are
    // dealt out round-robin to one worker per core.
    let seeds = seeds();
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(seeds.len().max(1));
    let shares: Vec<Vec<u64>> = (0..workers)
        .map(|w| seeds.iter().copied().skip(w).step_by(workers).collect())
        .collect();
    let mut total = Figures::default();
    let mut failures = Vec::new();
    std::thread::scope(|sc| {
        let handles: Vec<_> = shares
            .iter()
            .map(|share| sc.spawn(move || run_seeds(share)))
            .collect();
        for h in handles {
            let (f, fails) = h.join().expect("a worker thread died outside catch_unwind");
            total.add(&f);
            failures.extend(fails);
        }
    });
    eprintln!("crash_workload figures: {total:?}");
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
        assert!(total.crashes_in_recovery > 0 && total.gcs > 0 && total.records_acknowledged > 0);
        assert!(total.segment_files_max > 1, "segments rolled");
    }
}
