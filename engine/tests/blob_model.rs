//! Model-based test: random puts, batch puts, gets, syncs, reopens, crashes,
//! index deletions and garbage collections against a `HashMap` model, on
//! the simulated disk.
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use cairn_codec::BlobHash;
use cairn_engine::blob::{BlobOptions, BlobStore, GcOptions};
use cairn_engine::vfs::{SimVfs, Vfs};
use cairn_engine::EngineError;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Put(u8),
    PutBatch(Vec<u8>),
    PutReader(u8),
    Get(u8),
    Sync,
    Reopen,
    Crash,
    DeleteIndex,
    /// gc keeping the blobs whose id has this bit set (among the guaranteed ones).
    Gc(u8),
}

/// Blob contents by id: mostly small, a few large enough to be chunked,
/// some sharing chunks with each other.
fn contents(id: u8) -> Vec<u8> {
    let mut x = u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut rnd = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as u8
            })
            .collect()
    };
    match id % 16 {
        0 => Vec::new(),
        15 => {
            // Large: a shared 1.2 MiB prefix plus a distinct tail.
            let mut base = {
                let mut y = 12345u64;
                (0..1_200_000)
                    .map(|_| {
                        y ^= y << 13;
                        y ^= y >> 7;
                        y ^= y << 17;
                        (y >> 40) as u8
                    })
                    .collect::<Vec<u8>>()
            };
            base.extend(rnd(300_000));
            base
        }
        n if n % 2 == 0 => format!("fn f{id}() {{ {} }}\n", id)
            .repeat(usize::from(n) * 40)
            .into_bytes(),
        n => rnd(usize::from(n) * 500),
    }
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u8..48;
    prop_oneof![
        6 => id.clone().prop_map(Op::Put),
        2 => prop::collection::vec(0u8..48, 1..5).prop_map(Op::PutBatch),
        1 => id.clone().prop_map(Op::PutReader),
        6 => id.prop_map(Op::Get),
        2 => Just(Op::Sync),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => Just(Op::DeleteIndex),
        1 => (1u8..8).prop_map(Op::Gc),
    ]
}

fn dir() -> PathBuf {
    PathBuf::from("/m/blobs")
}

fn opts() -> BlobOptions {
    BlobOptions {
        pack_size_bytes: 64 * 1024,
        ..BlobOptions::default()
    }
}

fn run(seed: u64, ops: &[Op]) {
    let d = SimVfs::seeded(seed);
    let vfs: Arc<dyn Vfs> = Arc::new(d.clone());
    vfs.create_dir_all(&dir()).unwrap();
    for p in ["/", "/m"] {
        vfs.sync_dir(std::path::Path::new(p)).unwrap();
    }
    let mut store = Some(BlobStore::open(vfs.clone(), &dir(), opts()).unwrap());
    // Blobs that must be present (durable, or put since the last crash)...
    let mut must: HashSet<u8> = HashSet::new();
    // ... and of those, the ones that survive a crash.
    let mut durable: HashSet<u8> = HashSet::new();
    let by_hash: HashMap<BlobHash, u8> =
        (0..48u8).map(|i| (BlobHash::of(&contents(i)), i)).collect();
    for op in ops {
        let s = store.as_ref().unwrap();
        match op {
            Op::Put(i) => {
                assert_eq!(s.put(&contents(*i)).unwrap(), BlobHash::of(&contents(*i)));
                must.insert(*i);
            }
            Op::PutReader(i) => {
                let b = contents(*i);
                let (h, n) = s.put_reader(&mut &b[..]).unwrap();
                assert_eq!((h, n), (BlobHash::of(&b), b.len() as u64));
                must.insert(*i);
            }
            Op::PutBatch(ids) => {
                let bs: Vec<Vec<u8>> = ids.iter().map(|i| contents(*i)).collect();
                let refs: Vec<&[u8]> = bs.iter().map(|b| &b[..]).collect();
                s.put_batch(&refs).unwrap();
                must.extend(ids);
                durable = must.clone();
            }
            Op::Get(i) => {
                let h = BlobHash::of(&contents(*i));
                match s.get(&h) {
                    Ok(b) => assert!(b == contents(*i), "wrong bytes for {i}"),
                    Err(EngineError::BlobNotFound { .. }) => {
                        assert!(!must.contains(i), "blob {i} lost")
                    }
                    Err(e) => panic!("get {i}: {e}"),
                }
            }
            Op::Sync => {
                s.sync().unwrap();
                durable = must.clone();
            }
            Op::Reopen => {
                drop(store.take());
                store = Some(BlobStore::open(vfs.clone(), &dir(), opts()).unwrap());
                // A clean close persists everything.
                durable = must.clone();
            }
            Op::Crash => {
                std::mem::forget(store.take());
                d.crash_tearing();
                store = Some(BlobStore::open(vfs.clone(), &dir(), opts()).unwrap());
                must = durable.clone();
            }
            Op::DeleteIndex => {
                drop(store.take());
                let _ = vfs.remove_file(&dir().join("index"));
                store = Some(BlobStore::open(vfs.clone(), &dir(), opts()).unwrap());
                durable = must.clone();
            }
            Op::Gc(bit) => {
                let live: HashSet<u8> = must.iter().copied().filter(|i| i & bit != 0).collect();
                let roots: HashSet<BlobHash> =
                    live.iter().map(|i| BlobHash::of(&contents(*i))).collect();
                s.gc(&roots, GcOptions::default()).unwrap();
                must = live;
                // gc syncs everything before it starts.
                durable = must.clone();
            }
        }
        // Every listed hash is a known blob with the right length.
        let s = store.as_ref().unwrap();
        for h in s.hashes() {
            let i = by_hash
                .get(&h)
                .unwrap_or_else(|| panic!("unknown top-level hash {h}"));
            assert_eq!(s.raw_len(&h), Some(contents(*i).len() as u64));
        }
        for i in &must {
            assert!(
                s.contains(&BlobHash::of(&contents(*i))),
                "blob {i} lost after {op:?}"
            );
        }
    }
    let s = store.as_ref().unwrap();
    for i in &must {
        assert_eq!(s.get(&BlobHash::of(&contents(*i))).unwrap(), contents(*i));
    }
    let r = s.verify().unwrap();
    assert!(
        r.problems.iter().all(|p| p.hash.is_none()),
        "verify names blobs: {:?}",
        r.problems
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if std::env::var("CAIRN_SOAK").is_ok() { 2000 } else { 24 },
        ..ProptestConfig::default()
    })]
    #[test]
    fn blob_store_matches_a_hashmap_model(seed in 1u64..1000, ops in prop::collection::vec(op(), 1..40)) {
        run(seed, &ops);
    }
}
