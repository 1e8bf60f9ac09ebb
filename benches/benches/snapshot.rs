//! Checkpoint and rollback benchmarks, side by side with a shadow git
//! repository (the git CLI with a separate `GIT_DIR` and `core.worktree` =
//! the workspace, the way agent IDEs do it), on a generated workspace of
//! 10,000 source-like files of about 9 KB (about 90 MB) in about 1,500
//! directories:
//!
//! - first checkpoint (cairn durable: blobs fsync'd, then the log record)
//!   vs `git add -A && git commit`;
//! - checkpoint after a one-file change: full scan, and tracked path, vs git;
//! - rollback of 5 changed files (including cairn's pre-rollback checkpoint)
//!   vs `git checkout <commit> -- .`;
//! - bytes on disk after 100 checkpoints, each after a one-file edit, vs
//!   git's loose objects and git's packed repository after `git gc`.
//!
//! A plain bench binary (not criterion): each figure is a real operation on
//! a real tree whose state changes, so it prints one table of medians.
//! Run: `cargo bench -p cairn-benches --bench snapshot`.
//! `CAIRN_BENCH_FILES=N` changes the number of files (default 10,000).
//! `CAIRN_BENCH_ONLY=speed|disk` runs one part; `=memory` measures the peak
//! memory of a checkpoint of N files in a child process (use with
//! `CAIRN_BENCH_FILES=100000`); `=profile` loops cairn's one-file-change
//! checkpoints and rollbacks alone, for `perf record`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_benches::{source_like, Rng};
use cairn_codec::CheckpointId;
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Log, LogOptions};
use cairn_engine::{RealVfs, Vfs};
use cairn_snapshot::{
    create_checkpoint, rollback, CheckpointRequest, RollbackRequest, ScanMode, SnapshotOptions,
    Workspace,
};

/// Default number of files in the generated workspace.
const DEFAULT_FILES: usize = 10_000;
/// Average file size (source-like text).
const FILE_BYTES: usize = 9 * 1024;
/// Repetitions of each one-file-change measurement (the median is printed).
const REPS: usize = 7;
/// Checkpoints in the disk-usage comparison.
const DISK_CHECKPOINTS: usize = 100;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    // `cargo bench` passes `--bench`; a filter argument that does not name this bench skips it.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"snapshot".contains(a.as_str()))
    {
        return Ok(());
    }
    if Command::new("git").arg("--version").output().is_err() {
        println!("snapshot bench: git is not installed; nothing to compare against");
        return Ok(());
    }
    let n: usize = std::env::var("CAIRN_BENCH_FILES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_FILES);
    if let Some(dir) = std::env::var_os("CAIRN_BENCH_CHILD") {
        return memory_child(Path::new(&dir));
    }
    println!("\nsnapshot bench: {n} files of ~{} KB\n", FILE_BYTES / 1024);
    println!("| measurement | cairn | git | git / cairn |");
    println!("|---|---|---|---|");
    let mut rows = Rows;
    let only = std::env::var("CAIRN_BENCH_ONLY").unwrap_or_default();
    if only == "memory" {
        return memory(n);
    }
    if only == "profile" {
        return profile(n);
    }
    if only.is_empty() || only == "speed" {
        speed(n, &mut rows)?;
    }
    if only.is_empty() || only == "disk" {
        disk(n, &mut rows)?;
    }
    Ok(())
}

struct Bed {
    _dir: tempfile::TempDir,
    ws_root: PathBuf,
    git_dir: PathBuf,
    files: Vec<String>,
    ws: Workspace,
    log: Log,
    blobs: BlobStore,
    rng: Rng,
}

/// Generates the workspace: 15 top-level directories x 10 x 9 leaves
/// (1,515 directories), files spread over the leaves.
fn bed(n: usize, seed: u64) -> Res<Bed> {
    let dir = tempfile::tempdir()?;
    let ws_root = dir.path().join("ws");
    let mut rng = Rng::new(seed);
    let mut leaves = Vec::new();
    for a in 0..15 {
        for b in 0..10 {
            for c in 0..9 {
                leaves.push(format!("mod{a}/part{b}/unit{c}"));
            }
        }
    }
    for l in &leaves {
        std::fs::create_dir_all(ws_root.join(l))?;
    }
    let mut files = Vec::with_capacity(n);
    for i in 0..n {
        let rel = format!("{}/file{i}.rs", leaves[i % leaves.len()]);
        let len = FILE_BYTES / 2 + rng.below(FILE_BYTES as u64) as usize;
        std::fs::write(ws_root.join(&rel), source_like(&mut rng, len))?;
        files.push(rel);
    }
    std::fs::write(ws_root.join(".gitignore"), "target/\n")?;
    // The shadow repository, outside the workspace.
    let git_dir = dir.path().join("shadow.git");
    git(&git_dir, &ws_root, &["init", "-q"])?;
    git(
        &git_dir,
        &ws_root,
        &["config", "core.worktree", ws_root.to_str().ok_or("path")?],
    )?;
    // No automatic packing in the background: it would make the loose
    // object figure depend on whether a detached `git gc --auto` had
    // finished (the shadow repositories of agent IDEs vary on this too).
    git(&git_dir, &ws_root, &["config", "gc.auto", "0"])?;
    std::fs::create_dir_all(git_dir.join("info"))?;
    std::fs::write(git_dir.join("info/exclude"), ".cairn/\n")?;
    let store = ws_root.join(".cairn");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    std::fs::create_dir_all(store.join("log"))?;
    std::fs::create_dir_all(store.join("blobs"))?;
    let log = Log::open(vfs.clone(), &store.join("log"), LogOptions::default())?;
    let blobs = BlobStore::open(vfs, &store.join("blobs"), BlobOptions::default())?;
    let ws = Workspace::open(
        &ws_root,
        &store.join("snapshot"),
        SnapshotOptions::default(),
    )?;
    Ok(Bed {
        _dir: dir,
        ws_root,
        git_dir,
        files,
        ws,
        log,
        blobs,
        rng,
    })
}

fn git(git_dir: &Path, ws: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new("git")
        .env("GIT_DIR", git_dir)
        .env("GIT_WORK_TREE", ws)
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(ws)
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Bed {
    fn checkpoint(&self, scan: ScanMode) -> Res<CheckpointId> {
        Ok(create_checkpoint(
            &self.log,
            &self.blobs,
            &self.ws,
            CheckpointRequest {
                scan,
                ..Default::default()
            },
        )?
        .id)
    }
    /// Lets the stat cache cairn saves in the background finish (untimed),
    /// so it never runs during git's timings.
    fn settle(&self) {
        self.ws.wait_for_caches();
    }
    fn git_commit(&self, msg: &str) -> Res<()> {
        git(&self.git_dir, &self.ws_root, &["add", "-A"])?;
        git(
            &self.git_dir,
            &self.ws_root,
            &["commit", "-q", "--allow-empty", "-m", msg],
        )?;
        Ok(())
    }
    /// Edits one random file (appends a line), returning its path.
    fn edit_one(&mut self) -> Res<String> {
        let rel = self.files[self.rng.below(self.files.len() as u64) as usize].clone();
        let p = self.ws_root.join(&rel);
        let mut bytes = std::fs::read(&p)?;
        bytes.extend_from_slice(
            format!(
                "let edit_{} = {};\n",
                self.rng.next_u64(),
                self.rng.below(1000)
            )
            .as_bytes(),
        );
        std::fs::write(&p, bytes)?;
        Ok(rel)
    }
}

/// Prints each table row as soon as it is measured.
struct Rows;

impl Rows {
    fn push(&mut self, (a, b, c, d): (String, String, String, String)) {
        println!("| {a} | {b} | {c} | {d} |");
    }
}

fn time<T>(f: impl FnOnce() -> Res<T>) -> Res<(Duration, T)> {
    let t = Instant::now();
    let v = f()?;
    Ok((t.elapsed(), v))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn ratio(cairn: Duration, git: Duration) -> String {
    format!("{:.1}x", git.as_secs_f64() / cairn.as_secs_f64().max(1e-9))
}

fn speed(n: usize, rows: &mut Rows) -> Res<()> {
    let mut b = bed(n, 7)?;
    // Age the tree a little so the first scans do not see every file as "racy".
    std::thread::sleep(Duration::from_millis(50));
    let (c_first, _) = time(|| b.checkpoint(ScanMode::Full))?;
    b.settle();
    let (g_first, _) = time(|| b.git_commit("first"))?;
    rows.push((
        "first checkpoint (cairn durable)".into(),
        ms(c_first),
        ms(g_first),
        ratio(c_first, g_first),
    ));

    // One-file change, full scan, vs git add -A && git commit.
    let (mut cs, mut gs, mut ts) = (Vec::new(), Vec::new(), Vec::new());
    b.checkpoint(ScanMode::Full)?; // settle racy entries of the first scan
    for i in 0..REPS {
        b.edit_one()?;
        cs.push(time(|| b.checkpoint(ScanMode::Full))?.0);
        b.settle();
        b.edit_one()?;
        gs.push(time(|| b.git_commit(&format!("edit {i}")))?.0);
        let rel = b.edit_one()?;
        ts.push(
            time(|| {
                b.ws.track(&[rel.as_str()])?;
                b.checkpoint(ScanMode::TrackedOnly)
            })?
            .0,
        );
        b.git_commit("sync")?; // keep git's index in step (not timed)
    }
    let (c1, g1, t1) = (median(cs), median(gs), median(ts));
    rows.push((
        "checkpoint after a one-file change, full scan".into(),
        ms(c1),
        ms(g1),
        ratio(c1, g1),
    ));
    rows.push((
        "checkpoint after a one-file change, tracked path".into(),
        ms(t1),
        ms(g1),
        ratio(t1, g1),
    ));

    // Rollback of 5 changed files.
    let (mut cr, mut gr) = (Vec::new(), Vec::new());
    for _ in 0..REPS {
        let base = b.checkpoint(ScanMode::Full)?;
        b.git_commit("base")?;
        let commit = git(&b.git_dir, &b.ws_root, &["rev-parse", "HEAD"])?;
        let mut edited = Vec::new();
        for _ in 0..5 {
            edited.push(b.edit_one()?);
        }
        let (d, rep) = time(|| {
            Ok(rollback(
                &b.log,
                &b.blobs,
                &b.ws,
                RollbackRequest::new(base),
            )?)
        })?;
        if rep.written.len()
            != edited
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        {
            return Err(format!("rollback wrote {:?}, edited {edited:?}", rep.written).into());
        }
        cr.push(d);
        b.settle();
        for _ in 0..5 {
            b.edit_one()?;
        }
        gr.push(time(|| git(&b.git_dir, &b.ws_root, &["checkout", &commit, "--", "."]))?.0);
    }
    let (cr, gr) = (median(cr), median(gr));
    rows.push((
        "rollback of 5 changed files (cairn incl. its pre-rollback checkpoint)".into(),
        ms(cr),
        ms(gr),
        ratio(cr, gr),
    ));

    // The same with the file watcher: no walk.
    b.ws.watch()?;
    b.checkpoint(ScanMode::Full)?; // the first one after starting scans in full
    let (mut ws_, mut wr) = (Vec::new(), Vec::new());
    for _ in 0..REPS {
        b.edit_one()?;
        ws_.push(time(|| b.checkpoint(ScanMode::Full))?.0);
    }
    for _ in 0..REPS {
        let base = b.checkpoint(ScanMode::Full)?;
        let mut edited = std::collections::BTreeSet::new();
        for _ in 0..5 {
            edited.insert(b.edit_one()?);
        }
        let req = RollbackRequest::new(base);
        let (d, rep) = time(|| Ok(rollback(&b.log, &b.blobs, &b.ws, req)?))?;
        if rep.written.len() != edited.len() {
            return Err(format!("rollback wrote {:?}, edited {edited:?}", rep.written).into());
        }
        wr.push(d);
    }
    let stats = b.ws.watch_stats().ok_or("no watcher")?;
    let (w1, wr) = (median(ws_), median(wr));
    rows.push((
        format!(
            "checkpoint after a one-file change, watcher ({} watched / {} full captures)",
            stats.watched_captures, stats.full_captures
        ),
        ms(w1),
        ms(g1),
        ratio(w1, g1),
    ));
    rows.push((
        "rollback of 5 changed files, watcher".into(),
        ms(wr),
        ms(gr),
        ratio(wr, gr),
    ));
    b.ws.unwatch();
    Ok(())
}

/// `CAIRN_BENCH_ONLY=memory`: peak memory (VmHWM) of a child process that
/// opens a store and checkpoints a generated workspace of `n` files (1 KB
/// each: the scan's memory depends on the number of paths, not on their
/// size), then checkpoints again after a one-file change.
fn memory(n: usize) -> Res<()> {
    let dir = tempfile::tempdir()?;
    let ws_root = dir.path().join("ws");
    let mut rng = Rng::new(3);
    for i in 0..n {
        let d = ws_root.join(format!("m{}/p{}/u{}", i % 15, (i / 15) % 10, (i / 150) % 9));
        if i < 1350 {
            std::fs::create_dir_all(&d)?;
        }
        std::fs::write(d.join(format!("f{i}.rs")), source_like(&mut rng, 1024))?;
    }
    let out = Command::new(std::env::current_exe()?)
        .arg("--bench")
        .env("CAIRN_BENCH_CHILD", &ws_root)
        .output()?;
    if !out.status.success() {
        return Err(format!("child: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    println!(
        "| peak memory (VmHWM), checkpoint of {n} files + one after a one-file change | {} | | target 200 MiB |",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Ok(())
}

/// The child of [`memory`].
fn memory_child(ws_root: &Path) -> Res<()> {
    let store = ws_root.join(".cairn");
    let vfs: Arc<dyn Vfs> = Arc::new(RealVfs);
    std::fs::create_dir_all(store.join("log"))?;
    std::fs::create_dir_all(store.join("blobs"))?;
    let log = Log::open(vfs.clone(), &store.join("log"), LogOptions::default())?;
    let blobs = BlobStore::open(vfs, &store.join("blobs"), BlobOptions::default())?;
    let ws = Workspace::open(ws_root, &store.join("snapshot"), SnapshotOptions::default())?;
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default())?;
    let f = ws_root.join("m0/p0/u0/f0.rs");
    let mut bytes = std::fs::read(&f)?;
    bytes.extend_from_slice(b"// edit\n");
    std::fs::write(&f, bytes)?;
    create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default())?;
    let status = std::fs::read_to_string("/proc/self/status")?;
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .ok_or("no VmHWM")?;
    let kb: f64 = hwm.split_whitespace().nth(1).ok_or("VmHWM")?.parse()?;
    println!("{:.1} MiB ({} files)", kb / 1024.0, c.counts.files);
    Ok(())
}

/// Calls `f` with every file under `dir` (not following symlinks) and its metadata.
fn each_file(dir: &Path, f: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if m.is_dir() {
            each_file(&e.path(), f);
        } else {
            f(&e.path(), &m);
        }
    }
}

/// Apparent bytes and allocated bytes (st_blocks) of every file under `p`.
fn usage(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut out = (0, 0);
    each_file(p, &mut |_, m| {
        out.0 += m.len();
        out.1 += m.blocks() * 512;
    });
    out
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

fn disk(n: usize, rows: &mut Rows) -> Res<()> {
    let mut b = bed(n, 11)?;
    b.checkpoint(ScanMode::Full)?;
    b.git_commit("first")?;
    for i in 0..DISK_CHECKPOINTS {
        let rel = b.edit_one()?;
        b.ws.track(&[rel.as_str()])?;
        b.checkpoint(ScanMode::TrackedOnly)?;
        b.git_commit(&format!("edit {i}"))?;
    }
    let cairn = usage(&b.ws_root.join(".cairn"));
    // Where cairn's bytes are: every file over 1% of the total.
    each_file(&b.ws_root.join(".cairn"), &mut |p, m| {
        if m.len() > cairn.0 / 100 {
            let rel = p
                .strip_prefix(&b.ws_root)
                .unwrap_or(p)
                .display()
                .to_string();
            println!("<!-- {rel}: {} -->", mb(m.len()));
        }
    });
    let loose = usage(&b.git_dir);
    git(&b.git_dir, &b.ws_root, &["gc", "-q", "--force"])?;
    let packed = usage(&b.git_dir);
    let label = format!("bytes on disk after 1 + {DISK_CHECKPOINTS} one-file-edit checkpoints");
    rows.push((
        format!("{label}: vs git loose objects (apparent / allocated)"),
        format!("{} / {}", mb(cairn.0), mb(cairn.1)),
        format!("{} / {}", mb(loose.0), mb(loose.1)),
        format!(
            "{:.2}x / {:.2}x",
            loose.0 as f64 / cairn.0 as f64,
            loose.1 as f64 / cairn.1 as f64
        ),
    ));
    rows.push((
        format!("{label}: vs git after `git gc` (apparent / allocated)"),
        format!("{} / {}", mb(cairn.0), mb(cairn.1)),
        format!("{} / {}", mb(packed.0), mb(packed.1)),
        format!(
            "{:.2}x / {:.2}x",
            packed.0 as f64 / cairn.0 as f64,
            packed.1 as f64 / cairn.1 as f64
        ),
    ));
    Ok(())
}

/// `CAIRN_BENCH_ONLY=profile`: one-file-change full-scan checkpoints and
/// 5-file rollbacks in a loop, cairn only, for `perf record`.
fn profile(n: usize) -> Res<()> {
    let mut b = bed(n, 7)?;
    std::thread::sleep(Duration::from_millis(50));
    b.checkpoint(ScanMode::Full)?;
    b.checkpoint(ScanMode::Full)?;
    let mut cs = Vec::new();
    const LOOPS: usize = 150;
    let cpu0 = cpu_ms();
    for _ in 0..LOOPS {
        b.edit_one()?;
        cs.push(time(|| b.checkpoint(ScanMode::Full))?.0);
    }
    let cpu = (cpu_ms() - cpu0) / LOOPS as f64;
    println!(
        "checkpoint after a one-file change, full scan: {} (CPU {cpu:.1} ms each, edits included)",
        ms(median(cs))
    );
    let mut cr = Vec::new();
    for _ in 0..5 {
        let base = b.checkpoint(ScanMode::Full)?;
        for _ in 0..5 {
            b.edit_one()?;
        }
        let req = RollbackRequest::new(base);
        cr.push(time(|| Ok(rollback(&b.log, &b.blobs, &b.ws, req)?))?.0);
    }
    println!("rollback of 5 changed files: {}", ms(median(cr)));
    Ok(())
}

/// CPU time (user + system) of this process so far, in ms, from
/// /proc/self/stat (steadier than wall time on a shared machine).
fn cpu_ms() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses).
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 here; 100 ticks/s.
    (ticks(11) + ticks(12)) * 10.0
}
