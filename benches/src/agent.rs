//! Realistic agent sessions: prompts and replies of a few KB of prose and
//! code, tool calls, file events with blob hashes and diff stats, and
//! checkpoints, for the size benchmark (a store against the same events as
//! canonical JSONL).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_codec::json::JsonRecord;
use cairn_codec::{BlobHash, DiffStats, Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::RealVfs;

use crate::{source_like, Rng};

/// English words of an agent conversation, the most common first (the
/// generator draws early ones more often, as in real text).
const PROSE: &str = "the to and a of I you it is in that this for we be with \
on can should not have as will are or if it's an at but so by from let's \
me now here there then what which when also just make sure file test code \
function change error fix update add remove use run check need want see \
look like one all new more build failing passes tests module type value \
return call case line lines because into would could does doesn't don't \
first next last only other same different instead before after again \
first-class path config option flag command output input read write \
parse handle handles handled string number list map key field struct \
enum trait method crate import export log logs record records event \
events store session checkpoint rollback undo redo diff patch commit \
branch merge main issue bug behaviour behavior expected actual result \
results works working broken slow fast faster simple simpler problem \
solution approach idea plan step steps done left right up down please \
thanks great good better best bad wrong correct correctly still yet \
already some any each every most few many much very really quite maybe \
probably actually currently previous previously following below above \
where why how who whose them they their its our your my his her these \
those such than too well way ways part parts time times place point \
points show shows shown explain explains example examples note notes \
notice keep keeps kept move moved rename renamed delete deleted create \
created open opened close closed start started stop stopped wait waits \
retry retries timeout timeouts limit limits size sizes bytes memory disk \
cache index query queries scan scans read-only writer reader lock locked";

/// Prose of about `len` bytes: sentences of common words, some with a path,
/// an identifier or a number. Words follow each other at random, so it
/// compresses a little worse than English with zstd-3 (to 0.50 of its size
/// in 2 KB and 0.39 in 35 KB, where the GPL's text gives 0.46 and 0.36):
/// size figures built on it err against cairn, not for it.
pub fn prose(rng: &mut Rng, len: usize) -> String {
    static WORDS: std::sync::LazyLock<Vec<&str>> =
        std::sync::LazyLock::new(|| PROSE.split_whitespace().collect());
    let words = &*WORDS;
    let mut out = String::with_capacity(len + 64);
    while out.len() < len {
        let n = 6 + rng.below(16);
        for i in 0..n {
            let w = match rng.below(80) {
                0 => format!(
                    "src/{}_{}.rs",
                    words[rng.below(words.len() as u64) as usize],
                    rng.below(100)
                ),
                1 => format!(
                    "`{}_{}`",
                    words[rng.below(words.len() as u64) as usize],
                    words[rng.below(words.len() as u64) as usize]
                ),
                2 => rng.below(10_000).to_string(),
                _ => {
                    // Skewed towards the first (most common) words.
                    let top = rng.below(words.len() as u64) + 1;
                    let top = rng.below(top) + 1;
                    words[rng.below(top) as usize].to_string()
                }
            };
            if i == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    out.extend(f.to_uppercase());
                    out.push_str(c.as_str());
                }
            } else {
                out.push(' ');
                out.push_str(&w);
            }
        }
        out.push_str(if rng.below(8) == 0 { ".\n\n" } else { ". " });
    }
    out.truncate(len);
    out
}

/// A path in the session's workspace (480 distinct ones).
fn source_path(rng: &mut Rng) -> String {
    format!("src/module_{}/file_{}.rs", rng.below(12), rng.below(40))
}

/// A hash that looks like a blob's (random bytes).
fn blob(rng: &mut Rng) -> BlobHash {
    let mut b = [0u8; 32];
    for c in b.chunks_mut(8) {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    BlobHash(b)
}

/// The events of `turns` agent turns in one session: each a prompt (0.3–3
/// KB of prose), a reply (1–6 KB of prose with code blocks), two to six
/// tool calls (a command and its short output), one to three file edits or
/// writes (with before and after blob hashes and diff stats), and every
/// third turn a checkpoint.
pub fn agent_session(seed: u64, turns: u64) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut ts = 1_760_000_000_000i64;
    let session = format!("sess-{seed:04}");
    let mut tick = |rng: &mut Rng| {
        ts += 200 + rng.below(20_000) as i64;
        Timestamp(ts)
    };
    for turn in 0..turns {
        let mut e = Event::new(EventKind::Prompt, session.clone());
        e.ts = tick(&mut rng);
        e.user = Some("dev".into());
        let len = 300 + rng.below(2700) as usize;
        e.text = Some(prose(&mut rng, len));
        out.push(e);
        for _ in 0..2 + rng.below(5) {
            let mut e = Event::new(EventKind::ToolCall, session.clone());
            e.ts = tick(&mut rng);
            e.agent = Some("coder".into());
            e.model = Some("model-large-2026-09".into());
            let tool = ["bash", "read_file", "grep", "edit_file"][rng.below(4) as usize];
            e.tool = Some(tool.into());
            e.latency_ms = Some(5 + rng.below(4000));
            e.ok = rng.below(10) != 0;
            if !e.ok {
                e.error_kind = Some("exit_status".into());
            }
            let len = 40 + rng.below(400) as usize;
            e.text = Some(prose(&mut rng, len));
            e.path = Some(source_path(&mut rng));
            out.push(e);
        }
        let mut e = Event::new(EventKind::Reply, session.clone());
        e.ts = tick(&mut rng);
        e.agent = Some("coder".into());
        e.model = Some("model-large-2026-09".into());
        e.latency_ms = Some(800 + rng.below(20_000));
        let mut text = String::new();
        let target = 1000 + rng.below(5000) as usize;
        while text.len() < target {
            let len = 200 + rng.below(800) as usize;
            text.push_str(&prose(&mut rng, len));
            if rng.below(2) == 0 {
                text.push_str("\n```rust\n");
                let len = 100 + rng.below(900) as usize;
                text.push_str(&String::from_utf8_lossy(&source_like(&mut rng, len)));
                text.push_str("\n```\n");
            }
        }
        e.text = Some(text);
        out.push(e);
        for _ in 0..1 + rng.below(3) {
            let kind = if rng.below(4) == 0 {
                EventKind::FileWrite
            } else {
                EventKind::FileEdit
            };
            let mut e = Event::new(kind, session.clone());
            e.ts = tick(&mut rng);
            e.agent = Some("coder".into());
            e.tool = Some("edit_file".into());
            e.path = Some(source_path(&mut rng));
            e.before = Some(blob(&mut rng));
            e.after = Some(blob(&mut rng));
            e.diff_stats = Some(DiffStats {
                lines_added: rng.below(80),
                lines_removed: rng.below(40),
                hunks: 1 + rng.below(6),
            });
            out.push(e);
        }
        if turn % 3 == 2 {
            let mut e = Event::new(EventKind::CheckpointCreate, session.clone());
            e.ts = tick(&mut rng);
            e.label = Some(format!("After turn {}", turn + 1));
            e.root = Some(blob(&mut rng));
            e.state = Some(blob(&mut rng));
            out.push(e);
        }
    }
    out
}

/// The benchmarks' corpus: 20 sessions of 60 turns (9,935 events).
pub fn corpus() -> Vec<Event> {
    (1..=20).flat_map(|s| agent_session(s, 60)).collect()
}

/// The bytes a store takes for `events` (every file of its log, after a
/// clean close) and the bytes of the same records as canonical JSONL (with their
/// LSNs and chain hashes, as `cairn export` writes them).
pub fn store_and_jsonl_bytes(dir: &Path, events: &[Event]) -> (u64, u64) {
    let opts = LogOptions {
        durability: Durability::Never,
        ..LogOptions::default()
    };
    let run = store_run(dir, events, opts);
    (run.store_bytes, run.jsonl_bytes)
}

/// What [`store_run`] measured.
#[derive(Clone, Copy, Debug)]
pub struct StoreRun {
    /// Every file of the log after a clean close.
    pub store_bytes: u64,
    /// The same records as canonical JSONL.
    pub jsonl_bytes: u64,
    /// Time to append all the events.
    pub appends: Duration,
    /// The slowest single append (with a dictionary, the one that trains it).
    pub slowest_append: Duration,
}

/// Appends `events` to a new log in `dir` opened with `opts`, one at a
/// time, and measures it (see [`StoreRun`]).
pub fn store_run(dir: &Path, events: &[Event], opts: LogOptions) -> StoreRun {
    let log = Log::open(Arc::new(RealVfs), dir, opts).expect("open log");
    let (start, mut slowest_append) = (Instant::now(), Duration::ZERO);
    for e in events {
        let t = Instant::now();
        log.append(e).expect("append");
        slowest_append = slowest_append.max(t.elapsed());
    }
    let appends = start.elapsed();
    let mut jsonl = Vec::new();
    let mut jsonl_bytes = 0u64;
    for r in log.iter_from(Lsn(1)) {
        let r = r.expect("read back");
        jsonl.clear();
        JsonRecord::new(r.lsn, r.chain, &r.event).write_line(&mut jsonl);
        jsonl_bytes += jsonl.len() as u64;
    }
    log.close().expect("close");
    // Every file the log keeps: segments, and the sparse indexes, tail
    // state and dictionary that spare a scan on open or shrink records.
    let mut store_bytes = 0u64;
    for entry in std::fs::read_dir(dir).expect("log dir") {
        store_bytes += entry.expect("entry").metadata().expect("metadata").len();
    }
    StoreRun {
        store_bytes,
        jsonl_bytes,
        appends,
        slowest_append,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zstd_ratio(b: &[u8]) -> f64 {
        zstd::bulk::compress(b, 3).expect("zstd").len() as f64 / b.len() as f64
    }

    /// The generated prose must not compress much better than English, or
    /// the size figure would flatter the store.
    #[test]
    fn prose_compresses_like_english() {
        let mut rng = Rng::new(3);
        let small = prose(&mut rng, 2000);
        let large = prose(&mut rng, 35_000);
        assert_eq!(small.len(), 2000);
        // English: 2000 bytes of the GPL compress to 0.46, 35 KB to 0.36.
        let (s, l) = (zstd_ratio(small.as_bytes()), zstd_ratio(large.as_bytes()));
        assert!(s >= 0.46, "2 KB of prose compresses to {s:.2}");
        assert!(l >= 0.36, "35 KB of prose compresses to {l:.2}");
    }

    /// A store of these events against the same events as canonical
    /// JSONL. The issue's target is at most 0.5x; per-record zstd reaches
    /// ~0.55x here (docs/BENCHMARKS.md), so this guards what is reached: it
    /// fails if large bodies stop being compressed (0.87x uncompressed) or
    /// frames grow.
    #[test]
    fn a_store_takes_well_under_the_bytes_of_its_jsonl() {
        // The whole corpus: enough bodies for the log to train its
        // dictionary (0.42x with it; 0.55x without, which fails here).
        let events = corpus();
        let tmp = tempfile::tempdir().expect("tempdir");
        let (store, jsonl) = store_and_jsonl_bytes(tmp.path(), &events);
        let ratio = store as f64 / jsonl as f64;
        assert!(
            ratio <= 0.45,
            "store {store} bytes, JSONL {jsonl} bytes: {ratio:.3}"
        );
    }
}
