//! Blob store benchmarks, each side by side with its in-memory baseline, on
//! 10,000 generated source-like files of about 8 KB (about 80 MB):
//!
//! - put of new blobs vs blake3 + zstd-3 of the same files in memory;
//! - put of blobs already present (hash plus index lookup) vs blake3 alone;
//! - get vs zstd decompression + blake3 verification in memory;
//! - bytes on disk vs the sum of the files' individual zstd-3 sizes (printed);
//! - appending 1 MiB to a 64 MiB file and putting it again (new bytes printed).
//!
//! Run: `cargo bench -p cairn-benches --bench blob`.

use std::path::Path;
use std::sync::Arc;

use cairn_benches::{source_like, Rng};
use cairn_engine::blob::{BlobOptions, BlobStore};
use cairn_engine::RealVfs;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

/// Files in the data set.
const FILES: usize = 10_000;
/// Average file size.
const FILE_BYTES: usize = 8 * 1024;

fn files() -> Vec<Vec<u8>> {
    let mut rng = Rng::new(42);
    (0..FILES)
        .map(|_| {
            let len = FILE_BYTES / 2 + rng.below(FILE_BYTES as u64) as usize;
            source_like(&mut rng, len)
        })
        .collect()
}

fn open(dir: &Path) -> BlobStore {
    BlobStore::open(Arc::new(RealVfs), dir, BlobOptions::default()).expect("open blob store")
}

fn pack_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("list blob dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn bench(c: &mut Criterion) {
    let data = files();
    let total: u64 = data.iter().map(|f| f.len() as u64).sum();
    let mut zc = zstd::bulk::Compressor::new(3).expect("zstd");
    let compressed: Vec<Vec<u8>> = data.iter().map(|f| zc.compress(f).expect("zstd")).collect();
    let zstd_sum: u64 = compressed.iter().map(|z| z.len() as u64).sum();

    let mut g = c.benchmark_group("blob");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(total));

    g.bench_function("put_new/cairn", |b| {
        b.iter_batched(
            || {
                let tmp = tempfile::tempdir().expect("tempdir");
                let s = open(tmp.path());
                (tmp, s)
            },
            |(tmp, s)| {
                for f in &data {
                    s.put(f).expect("put");
                }
                s.sync().expect("sync");
                (tmp, s)
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("put_new/blake3+zstd3_in_memory", |b| {
        let mut zc = zstd::bulk::Compressor::new(3).expect("zstd");
        b.iter(|| {
            let mut n = 0usize;
            for f in &data {
                let h = blake3::hash(f);
                n += zc.compress(f).expect("zstd").len() + h.as_bytes()[0] as usize;
            }
            n
        })
    });

    let tmp = tempfile::tempdir().expect("tempdir");
    let store = open(tmp.path());
    for f in &data {
        store.put(f).expect("put");
    }
    store.sync().expect("sync");
    let hashes: Vec<_> = data.iter().map(|f| cairn_codec::BlobHash::of(f)).collect();

    g.bench_function("put_present/cairn", |b| {
        b.iter(|| {
            for f in &data {
                store.put(f).expect("put");
            }
        })
    });
    g.bench_function("put_present/blake3_in_memory", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for f in &data {
                n += blake3::hash(f).as_bytes()[0] as usize;
            }
            n
        })
    });
    g.bench_function("get/cairn", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for h in &hashes {
                n += store.get(h).expect("get").len();
            }
            n
        })
    });
    g.bench_function("get/zstd_decompress+blake3_in_memory", |b| {
        let mut zd = zstd::bulk::Decompressor::new().expect("zstd");
        b.iter(|| {
            let mut n = 0usize;
            for (z, f) in compressed.iter().zip(&data) {
                let out = zd.decompress(z, f.len()).expect("zstd");
                n += blake3::hash(&out).as_bytes()[0] as usize + out.len();
            }
            n
        })
    });
    g.finish();

    let on_disk = pack_bytes(tmp.path());
    let st = store.stats();
    println!(
        "blob/bytes_on_disk: {} files, {} raw bytes; packs {} bytes vs sum of individual zstd-3 sizes {} bytes: ratio {:.3} (target <= 1.15); stats {:?}",
        FILES,
        total,
        on_disk,
        zstd_sum,
        on_disk as f64 / zstd_sum as f64,
        st
    );
    drop(store);

    // Appending 1 MiB to a 64 MiB file and putting it again.
    let mut rng = Rng::new(7);
    let mut big = source_like(&mut rng, 64 << 20);
    let tmp2 = tempfile::tempdir().expect("tempdir");
    let s = open(tmp2.path());
    s.put(&big).expect("put");
    s.sync().expect("sync");
    let before = pack_bytes(tmp2.path());
    big.extend_from_slice(&source_like(&mut rng, 1 << 20));
    let h = s.put(&big).expect("put");
    s.sync().expect("sync");
    let added = pack_bytes(tmp2.path()) - before;
    assert_eq!(s.get(&h).expect("get"), big);
    println!(
        "blob/append_1MiB_to_64MiB: {added} new bytes stored ({:.2} MiB; target < 3 MiB)",
        added as f64 / (1 << 20) as f64
    );
    let mut g = c.benchmark_group("blob_large");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(big.len() as u64));
    g.bench_function("put_present_65MiB/cairn", |b| {
        b.iter(|| s.put(&big).expect("put"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
