//! The floor under a big file's checkpoint (docs/BENCHMARKS.md, "Big files
//! and many files"): times each pass a checkpoint makes over a file's bytes
//! on its own, from the page cache.
//!
//! usage: `cargo run --release -p cairn-engine --example chunk_floor -- FILE [b3]`
//!
//! Prints, each on its own line: the read alone (into a 1 MiB buffer),
//! one blake3 pass (the whole file's name), the FastCDC cut points alone,
//! cairn's own cutter to the same cut points, and blake3 of every chunk
//! (the chunks' names). With `b3` it makes only
//! the blake3 pass, read in 1 MiB blocks on one thread, and prints the
//! hash: the floor a paired timer runs against a checkpoint.

use std::io::Read;
use std::time::Instant;

use cairn_engine::blob::chunking::{cut_points, Cutter};

fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| std::io::Error::other("usage: chunk_floor FILE"))?;
    if std::env::args().nth(2).as_deref() == Some("b3") {
        let mut f = std::fs::File::open(&path)?;
        let mut buf = vec![0u8; 1 << 20];
        let mut h = blake3::Hasher::new();
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        println!("{}", h.finalize());
        return Ok(());
    }
    let t = Instant::now();
    let mut f = std::fs::File::open(&path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0usize;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n;
    }
    println!("read {total} bytes: {:?}", t.elapsed());

    let t = Instant::now();
    let mut f = std::fs::File::open(&path)?;
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut f, &mut h)?;
    println!("blake3 (read + hash): {:?} {}", t.elapsed(), h.finalize());

    let data = std::fs::read(&path)?;
    let t = Instant::now();
    let h = blake3::hash(&data);
    println!("blake3 over memory: {:?} {h}", t.elapsed());

    let t = Instant::now();
    let cuts: Vec<_> = cut_points(&data).collect();
    println!(
        "fastcdc over memory: {:?} ({} chunks)",
        t.elapsed(),
        cuts.len()
    );

    let t = Instant::now();
    let mut cutter = Cutter::new();
    let mut mine = Vec::new();
    cutter.cut(&data, true, &mut mine);
    println!(
        "cairn's cutter over memory: {:?} (same cuts: {})",
        t.elapsed(),
        mine == cuts
    );

    let t = Instant::now();
    let mut x = 0u8;
    for &(off, len) in &cuts {
        x ^= blake3::hash(&data[off..off + len]).as_bytes()[0];
    }
    println!("blake3 per chunk over memory: {:?} ({x})", t.elapsed());
    Ok(())
}
