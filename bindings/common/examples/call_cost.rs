//! The Rust side of the bindings' "cost of one call" benchmark: the same
//! calls the Python and Node benchmarks time (`session.prompt` with
//! durability `never`, and a batch of prompts), straight from Rust, with
//! the same event counts. Prints one JSON line.
//!
//! `cargo run --release -p cairn-bindings-common --example call_cost -- DIR`

use std::time::Instant;

use cairn::{EventKind, Store};

/// Prompts timed one call at a time (as the Python and Node benchmarks do).
const CALLS: usize = 200_000;
/// Events per batch, and batches timed.
const BATCH: usize = 1_000;
const BATCHES: usize = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: call_cost DIR (an empty directory)")?;
    let store = Store::builder()
        .workspace(&dir)
        .durability(cairn::Durability::Never)
        .open()?;
    let s = store.session("bench");
    let start = Instant::now();
    for i in 0..CALLS {
        s.prompt(&format!("prompt {i}"))?;
    }
    let per_call_us = start.elapsed().as_secs_f64() * 1e6 / CALLS as f64;
    let start = Instant::now();
    for b in 0..BATCHES {
        let batch: Vec<_> = (0..BATCH)
            .map(|i| s.event(EventKind::Prompt).with_text(format!("b{b} {i}")))
            .collect();
        store.append_batch(&batch)?;
    }
    let batch_rate = (BATCH * BATCHES) as f64 / start.elapsed().as_secs_f64();
    store.close()?;
    println!("{{\"prompt_us\": {per_call_us:.3}, \"batch_events_per_s\": {batch_rate:.0}}}");
    Ok(())
}
