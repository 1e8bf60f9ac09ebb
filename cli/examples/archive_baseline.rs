//! The baseline `cairn replicate` and `cairn restore` are measured
//! against: the same files moved as plain object puts and gets through the
//! same object_store client, with nothing else (no manifest, no piece
//! hashes, no listing, no chain check). benches/scripts/replicate.sh pairs
//! each run of the one with a run of the other.
//!
//! ```text
//! cargo run --release -p cairn-cli --example archive_baseline -- put URL DIR
//! cargo run --release -p cairn-cli --example archive_baseline -- get URL DIR
//! ```
//!
//! `put` writes every file under DIR as objects of at most
//! `MAX_PIECE_BYTES` (the pieces replication ships), named
//! `baseline/<relative path>/<piece number>`, up to `MAX_PUTS_IN_FLIGHT`
//! at a time as the replicator sends them; `get` reads them back into DIR,
//! up to `MAX_GETS_IN_FLIGHT` at a time as a restore does. Each prints one
//! line: the bytes moved and the milliseconds it took.

use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn::replicate::{Archive, MAX_PIECE_BYTES, MAX_PUTS_IN_FLIGHT};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [op, url, dir] = args.as_slice() else {
        eprintln!("usage: archive_baseline put|get URL DIR");
        std::process::exit(2);
    };
    let archive = Archive::open(url).unwrap_or_else(|e| fail(&e.to_string()));
    let t = Instant::now();
    let bytes = match op.as_str() {
        "put" => put(&archive, Path::new(dir)),
        "get" => get(&archive, Path::new(dir)),
        _ => fail("the operation is put or get"),
    };
    println!(
        "{op} {bytes} bytes in {} ms",
        t.elapsed().as_millis().max(1)
    );
}

fn fail(msg: &str) -> ! {
    eprintln!("archive_baseline: {msg}");
    std::process::exit(1);
}

/// Every regular file under `dir`, as paths relative to it, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let rd = std::fs::read_dir(dir.join(&rel))
            .unwrap_or_else(|e| fail(&format!("read {}: {e}", dir.join(&rel).display())));
        for e in rd {
            let e = e.unwrap_or_else(|e| fail(&e.to_string()));
            let ft = e.file_type().unwrap_or_else(|e| fail(&e.to_string()));
            let r = rel.join(e.file_name());
            if ft.is_dir() {
                todo.push(r);
            } else if ft.is_file() {
                out.push(r);
            }
        }
    }
    out.sort();
    out
}

fn put(archive: &Archive, dir: &Path) -> u64 {
    let mut total = 0;
    let mut in_flight = std::collections::VecDeque::new();
    for rel in files(dir) {
        let bytes = std::fs::read(dir.join(&rel)).unwrap_or_else(|e| fail(&e.to_string()));
        total += bytes.len() as u64;
        for (n, piece) in bytes.chunks(MAX_PIECE_BYTES as usize).enumerate() {
            if in_flight.len() >= MAX_PUTS_IN_FLIGHT {
                if let Some(h) = in_flight.pop_front() {
                    archive
                        .finish_put(h)
                        .unwrap_or_else(|e| fail(&e.to_string()));
                }
            }
            let name = format!("baseline/{}/{n}", rel.display());
            in_flight.push_back(archive.start_put(&name, piece.to_vec()));
        }
    }
    for h in in_flight {
        archive
            .finish_put(h)
            .unwrap_or_else(|e| fail(&e.to_string()));
    }
    total
}

fn get(archive: &Archive, dir: &Path) -> u64 {
    let names: Vec<String> = archive
        .list("baseline")
        .unwrap_or_else(|e| fail(&e.to_string()))
        .into_iter()
        .map(|l| l.name)
        .collect();
    let mut total = 0;
    archive
        .get_each(&names, |i, bytes| {
            let bytes = bytes.unwrap_or_else(|| fail(&format!("{} is gone", names[i])));
            total += bytes.len() as u64;
            let rel = names[i].trim_start_matches("baseline/");
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap_or(dir))
                .unwrap_or_else(|e| fail(&e.to_string()));
            std::fs::write(&path, &bytes).unwrap_or_else(|e| fail(&e.to_string()));
            Ok(())
        })
        .unwrap_or_else(|e| fail(&e.to_string()));
    total
}
