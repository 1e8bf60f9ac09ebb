//! `never` appends of the log bench's 200-byte events, one thread, in
//! rounds: a steadier figure than criterion's for A/B runs of two builds
//! (criterion measures minutes after its paired `always` rounds).
//!
//! ```sh
//! cargo run --release -p cairn-benches --example never_appends   # ROUNDS=5 APPENDS=1000000
//! ```

use std::time::Instant;

use cairn_engine::log::{Durability, Log, LogOptions};
use cairn_engine::RealVfs;

fn main() {
    let rounds = cairn_benches::setting("ROUNDS", 5);
    let appends = cairn_benches::setting("APPENDS", 1_000_000) as usize;
    let events = cairn_benches::tool_calls_200b(1000);
    let tmp = cairn_benches::bench_dir("cairn-never-appends");
    let opts = LogOptions {
        durability: Durability::Never,
        ..LogOptions::default()
    };
    let log = Log::open(std::sync::Arc::new(RealVfs), tmp.path(), opts).expect("open");
    for e in events.iter().cycle().take(20_000) {
        log.append(e).expect("append");
    }
    let mut rates = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        for e in events.iter().cycle().take(appends) {
            log.append(e).expect("append");
        }
        rates.push(format!(
            "{:.0}",
            appends as f64 / start.elapsed().as_secs_f64()
        ));
    }
    println!(
        "never, 1 thread, 200-byte events: {} events/s",
        rates.join(" ")
    );
}
