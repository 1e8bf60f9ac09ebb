//! Queries over long or large file histories, on a real store: the figures
//! of "Long histories" in docs/BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p cairn-benches --example long_history
//! ```
//!
//! It builds, under `$CAIRN_BENCH_DIR` (default: the system temp dir), a
//! log and blob store holding:
//! - `src/f.txt` written `VERSIONS` times (default 2,000): each version
//!   one line longer, every seventh also rewriting an earlier line;
//! - `data.csv` written twice, ~19 MB each, every line changed;
//! - `gen.txt` written twice, 200,000 lines each, no line shared;
//!
//! then times `blame` of `src/f.txt` at head (with the number of records
//! it read), and `diff` of each of the other two files between its
//! versions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cairn_codec::{Event, EventKind, Lsn};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::log::{Durability, Head, Log, LogOptions, Record};
use cairn_engine::RealVfs;
use cairn_query::index::Index;
use cairn_query::source::{RecordSource, SnapshotManifests};
use cairn_query::{Point, Query};

/// The log, counting the records queries read from it.
struct Counted<'a> {
    log: &'a Log,
    reads: AtomicU64,
}

impl RecordSource for Counted<'_> {
    fn head(&self) -> cairn_query::Result<Head> {
        RecordSource::head(self.log)
    }
    fn iter_from(&self, from: Lsn) -> Box<dyn Iterator<Item = cairn_query::Result<Record>> + '_> {
        RecordSource::iter_from(self.log, from)
    }
    fn read(&self, lsn: Lsn) -> cairn_query::Result<Record> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        RecordSource::read(self.log, lsn)
    }
}

fn main() {
    let versions = cairn_benches::setting("VERSIONS", 2_000);
    let tmp = cairn_benches::bench_dir("cairn-long-history");
    let blobs = BlobStore::open(
        Arc::new(RealVfs),
        &tmp.path().join("blobs"),
        BlobOptions::default(),
    )
    .expect("blobs");
    let log = Log::open(
        Arc::new(RealVfs),
        &tmp.path().join("log"),
        LogOptions {
            durability: Durability::Never,
            ..LogOptions::default()
        },
    )
    .expect("log");
    let write = |path: &str, bytes: &[u8]| -> Lsn {
        let mut e = Event::new(EventKind::FileWrite, "s").with_path(path);
        e.after = Some(blobs.put(bytes).expect("put"));
        log.append(&e).expect("append")
    };

    let mut lines: Vec<String> = Vec::new();
    for i in 0..versions as usize {
        lines.push(format!("line {i} of the file, written at step {i}\n"));
        if i % 7 == 3 && lines.len() > 10 {
            let k = i % lines.len();
            lines[k] = format!("rewritten at step {i}\n");
        }
        write("src/f.txt", lines.concat().as_bytes());
    }
    // A file of `n` generated lines.
    let text = |n: usize, line: &dyn Fn(usize) -> String| (0..n).map(line).collect::<String>();
    let csv = |tag: &str| text(2_000_000, &|i| format!("{i},{tag}\n"));
    let csv_a = write("data.csv", csv("a").as_bytes());
    let csv_b = write("data.csv", csv("b").as_bytes());
    let gen = |tag: &str| text(200_000, &|i| format!("{tag} line {i}\n"));
    let gen_a = write("gen.txt", gen("old").as_bytes());
    let gen_b = write("gen.txt", gen("new").as_bytes());
    log.sync().expect("sync");
    blobs.sync().expect("sync");

    let src = Counted {
        log: &log,
        reads: AtomicU64::new(0),
    };
    let index = Index::build(&src).expect("index");
    let manifests = SnapshotManifests(&blobs);
    let q = Query::new(&src, &blobs, &manifests, &index);

    let before = src.reads.load(Ordering::Relaxed);
    let t = Instant::now();
    let blamed = q.blame(Point::Head, "src/f.txt").expect("blame");
    let took = t.elapsed();
    println!(
        "blame of src/f.txt ({versions} versions, {} lines): {:.2} s, {} records read",
        blamed.len(),
        took.as_secs_f64(),
        src.reads.load(Ordering::Relaxed) - before
    );
    for (name, a, b) in [("data.csv", csv_a, csv_b), ("gen.txt", gen_a, gen_b)] {
        let t = Instant::now();
        let d = q
            .diff(Point::Lsn(a), Point::Lsn(b), &[name.to_string()])
            .expect("diff");
        let took = t.elapsed();
        let shown = d[0].unified.as_deref().map_or(0, |u| u.lines().count());
        println!(
            "diff of {name} between its two versions: {:.3} s (too_large: {}, {shown} lines of unified diff)",
            took.as_secs_f64(),
            d[0].too_large
        );
    }
}
