//! Measures `Store::import_claude_code` against reading the same
//! transcripts with serde_json alone (each line parsed to a `Value`), and
//! the store's size against the transcripts'. For docs/BENCHMARKS.md:
//!
//! ```text
//! cargo run --release --example claude_code_import -- PATH...
//! ```
//!
//! PATH as `cairn import --format claude-code` takes it (a transcript or a
//! project directory). Each figure is the best of [`RUNS`] runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn::import::claude_code::ClaudeCodeOptions;
use cairn::Store;

/// Runs per figure; the best is kept (the machine is shared).
const RUNS: usize = 5;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        return Err("usage: claude_code_import PATH...".into());
    }
    let mut files = Vec::new();
    for p in &paths {
        collect(p, &mut files)?;
    }
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()))
        .sum::<Result<u64, _>>()?;
    let mut serde_best = Duration::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut n = 0usize;
        for f in &files {
            let text = std::fs::read(f)?;
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let v: serde_json::Value = serde_json::from_slice(line)?;
                n += usize::from(v.is_object());
            }
        }
        std::hint::black_box(n);
        serde_best = serde_best.min(t.elapsed());
    }
    let mut import_best = Duration::MAX;
    let mut store_bytes = 0;
    let mut records = 0;
    for _ in 0..RUNS {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path())?;
        let t = Instant::now();
        let r = store.import_claude_code(&paths, &ClaudeCodeOptions::default())?;
        store.close()?;
        import_best = import_best.min(t.elapsed());
        records = r.imported.records;
        store_bytes = du(&dir.path().join(".cairn"))?;
    }
    let mb = bytes as f64 / 1e6;
    println!(
        "transcripts: {} files, {:.2} MB; records: {records}",
        files.len(),
        mb
    );
    println!(
        "serde_json alone: {:.1} MB/s ({:.1} ms)",
        mb / serde_best.as_secs_f64(),
        serde_best.as_secs_f64() * 1e3
    );
    println!(
        "import: {:.1} MB/s ({:.1} ms), {:.2}x serde_json's time",
        mb / import_best.as_secs_f64(),
        import_best.as_secs_f64() * 1e3,
        import_best.as_secs_f64() / serde_best.as_secs_f64()
    );
    println!(
        "store: {:.2} MB, {:.2}x the transcripts",
        store_bytes as f64 / 1e6,
        store_bytes as f64 / bytes as f64
    );
    Ok(())
}

/// The transcripts `p` names (a file, or a directory's `.jsonl` files and
/// their subagents'), as the importer reads them.
fn collect(p: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if p.is_dir() {
        for e in std::fs::read_dir(p)? {
            let e = e?.path();
            if e.is_dir() {
                collect(&e, out)?;
            } else if e.extension().is_some_and(|x| x == "jsonl") {
                out.push(e);
            }
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(())
}

/// Bytes of the files under `p` (their lengths; sparse tails count).
fn du(p: &Path) -> std::io::Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(p)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() { du(&e.path())? } else { m.len() };
    }
    Ok(n)
}
