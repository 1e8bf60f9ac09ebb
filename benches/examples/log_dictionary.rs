//! The log's zstd dictionary, measured:
//! - the realistic corpus (`agent::corpus`) appended with `never` for each
//!   `dictionary_sample_bytes`: size against its canonical JSONL, time for
//!   all appends, and the slowest append (the one that trains);
//! - real text: files cut into chunks of 0.3-6 KB (like prompts and
//!   replies), the second half compressed per chunk with zstd-3, without a
//!   dictionary and with one trained on the first 128 KiB to 1 MiB.
//!   `CAIRN_TEXT_FILES` (colon-separated) names the files; by default vim's
//!   documentation, when installed.
//!
//! ```sh
//! cargo run --release -p cairn-benches --example log_dictionary
//! ```

use std::time::Instant;

use cairn_codec::zdict;
use cairn_engine::log::{Durability, LogOptions, DICTIONARY_SAMPLING};

const VIM_DOCS: &str =
    "/usr/share/vim/vim90/doc/options.txt:/usr/share/vim/vim90/doc/version8.txt:\
/usr/share/vim/vim90/doc/version7.txt:/usr/share/vim/vim90/doc/builtin.txt:\
/usr/share/vim/vim90/doc/syntax.txt:/usr/share/vim/vim90/doc/version9.txt:\
/usr/share/vim/vim90/doc/todo.txt";

fn corpus() {
    let events = cairn_benches::agent::corpus();
    for sample in [0u64, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20] {
        let tmp = cairn_benches::bench_dir("cairn-log-dictionary");
        let opts = LogOptions {
            durability: Durability::Never,
            dictionary_sample_bytes: sample,
            ..LogOptions::default()
        };
        let run = cairn_benches::agent::store_run(tmp.path(), &events, opts);
        println!(
            "corpus, dictionary_sample_bytes {sample:>7}: {:.3}x of its JSONL; {} events appended in {:.1?}, slowest append {:.1?}",
            run.store_bytes as f64 / run.jsonl_bytes as f64,
            events.len(),
            run.appends,
            run.slowest_append
        );
    }
}

fn real_text() {
    let files = std::env::var("CAIRN_TEXT_FILES").unwrap_or_else(|_| VIM_DOCS.into());
    let mut text = Vec::new();
    for f in files.split(':') {
        match std::fs::read(f) {
            Ok(b) => text.extend(b),
            Err(e) => {
                println!("real text: skipped ({f}: {e}; set CAIRN_TEXT_FILES)");
                return;
            }
        }
    }
    let mut chunks = Vec::new();
    let (mut at, mut x) = (0usize, 7u64);
    while at < text.len() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let end = (at + 300 + (x >> 33) as usize % 5700).min(text.len());
        chunks.push(&text[at..end]);
        at = end;
    }
    let test = &chunks[chunks.len() / 2..];
    let raw: usize = test.iter().map(|c| c.len()).sum();
    let size = |d: Option<&zdict::Dict>| -> f64 {
        let z: usize = test
            .iter()
            .map(|c| zdict::compress(3, c, d).expect("zstd").len().min(c.len()))
            .sum();
        z as f64 / raw as f64
    };
    println!(
        "real text, {raw} bytes in {} chunks: no dictionary {:.3}",
        test.len(),
        size(None)
    );
    for budget in [128usize << 10, 256 << 10, 512 << 10, 1 << 20] {
        let (mut data, mut sizes) = (Vec::new(), Vec::new());
        for c in &chunks {
            if data.len() >= budget {
                break;
            }
            data.extend_from_slice(c);
            sizes.push(c.len());
        }
        let t = Instant::now();
        let Some(d) = zdict::train(&data, &sizes, DICTIONARY_SAMPLING.dict_bytes) else {
            println!("real text: zstd could not train on {budget} bytes");
            continue;
        };
        let took = t.elapsed();
        println!(
            "real text, dictionary from {budget:>7} bytes ({} chunks, trained in {took:.1?}): {:.3}",
            sizes.len(),
            size(Some(&d))
        );
    }
}

fn main() {
    corpus();
    real_text();
}
