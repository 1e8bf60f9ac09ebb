//! The archive manifest's decoder (`cairn::replicate::Manifest::decode`)
//! fed hostile input: a manifest is read from a bucket, which anyone with
//! write access to it can fill. Random bytes, random bytes behind a valid
//! envelope (magic, length, checksum), and manifest-shaped JSON with
//! random and extreme values: never a panic; anything accepted names only
//! paths inside the store, pieces that add up to their file's length, and
//! re-encodes to a manifest that decodes to itself.
#![cfg(feature = "replicate")]
#![allow(clippy::unwrap_used)]

use cairn::replicate::{Manifest, MANIFEST_HEADER_LEN, MANIFEST_MAGIC};
use proptest::prelude::*;
use serde_json::{json, Value};

/// `body` behind the manifest's header, with the right length and CRC.
fn enveloped(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MANIFEST_HEADER_LEN + body.len());
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let mut h = crc32fast::Hasher::new_with_initial(cairn_codec::frame::CRC_SEED);
    h.update(&out[0..12]);
    h.update(body);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Lengths a hostile manifest would pick: small, and near the top of u64
/// (so that sums overflow).
fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..100_000,
        Just(u64::MAX),
        (u64::MAX / 2)..=u64::MAX,
        any::<u64>(),
    ]
}

fn hash() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-f]{64}",
        "[0-9A-Fa-f]{64}",
        "[0-9a-f]{0,70}",
        Just("../../etc/passwd".to_string()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("log/00000000000000000001.seg".to_string()),
        Just("log/00000000000000000001.idx".to_string()),
        Just("blobs/pack-00000001.pack".to_string()),
        Just("blobs/index".to_string()),
        Just("index/segments/00000000000000000001.qix".to_string()),
        Just("index/segments/1.qix".to_string()),
        Just("../x".to_string()),
        Just("/etc/passwd".to_string()),
        Just("log/..".to_string()),
        Just("log/a/b".to_string()),
        Just("snapshot/x".to_string()),
        Just(String::new()),
        "[a-z./]{0,30}",
    ]
}

fn file_entry() -> impl Strategy<Value = Value> {
    (
        path(),
        length(),
        proptest::collection::vec((hash(), length()), 0..4),
    )
        .prop_map(|(path, len, pieces)| {
            // Half the entries add up, so the decoder gets past that check.
            let sum = pieces.iter().try_fold(0u64, |a, (_, l)| a.checked_add(*l));
            let len = match sum {
                Some(s) if len % 2 == 0 => s,
                _ => len,
            };
            json!({
                "path": path,
                "len": len,
                "pieces": pieces
                    .into_iter()
                    .map(|(hash, len)| json!({"hash": hash, "len": len}))
                    .collect::<Vec<_>>(),
            })
        })
}

fn manifest_json() -> impl Strategy<Value = Value> {
    (
        0u32..8,
        any::<u64>(),
        proptest::collection::vec(file_entry(), 0..5),
        proptest::option::of(prop_oneof!["[0-9a-f]{0,200}", "[0-9A-Zg-z]{0,20}"]),
        proptest::option::of(file_entry()),
        any::<bool>(),
    )
        .prop_map(|(version, head, files, tail_state, tail_index, extra)| {
            let mut m = json!({
                "version": version,
                "generation": "1796663960124-07ff95f6",
                "head_lsn": head,
                "head_chain": "00".repeat(32),
                "created_ms": 1_796_663_960_124i64,
                "store": "/s/.cairn",
                "workspace": "/s",
                "sessions": 3,
                "files": files,
            });
            if let Some(t) = tail_state {
                m["tail_state"] = json!(t);
            }
            if let Some(t) = tail_index {
                m["tail_index"] = t;
            }
            if extra {
                // A field from a newer cairn is ignored, as serde does.
                m["something_new"] = json!([1, 2, 3]);
            }
            m
        })
}

/// What every accepted manifest must hold.
fn check_accepted(m: &Manifest) {
    for f in m.files.iter().chain(&m.tail_index) {
        assert!(
            !f.path.starts_with('/') && !f.path.split('/').any(|p| p == ".." || p.is_empty()),
            "accepted a path outside the store: {:?}",
            f.path
        );
        let sum = f.pieces.iter().try_fold(0u64, |a, p| a.checked_add(p.len));
        assert_eq!(
            sum,
            Some(f.len),
            "accepted pieces that do not add up: {f:?}"
        );
    }
    let again = Manifest::decode("again", &m.encode()).unwrap();
    assert_eq!(&again, m);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_are_refused_without_a_panic(
        b in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        prop_assert!(Manifest::decode("m", &b).is_err());
    }

    #[test]
    fn random_bodies_in_a_valid_envelope_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        if let Ok(m) = Manifest::decode("m", &enveloped(&body)) {
            check_accepted(&m);
        }
    }

    #[test]
    fn manifest_shaped_bodies_are_checked_field_by_field(m in manifest_json()) {
        let body = serde_json::to_vec(&m).unwrap();
        match Manifest::decode("manifests/g/x", &enveloped(&body)) {
            Ok(m) => check_accepted(&m),
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.contains("manifests/g/x"), "{}", e);
            }
        }
    }
}

/// The shaped bodies reach the decoder's acceptance often enough that
/// `check_accepted` is exercised, not only refusals.
#[test]
fn shaped_bodies_are_sometimes_accepted() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = manifest_json();
    let mut accepted = 0;
    for _ in 0..512 {
        let m = strategy.new_tree(&mut runner).unwrap().current();
        let body = serde_json::to_vec(&m).unwrap();
        if let Ok(m) = Manifest::decode("m", &enveloped(&body)) {
            check_accepted(&m);
            accepted += 1;
        }
    }
    assert!(accepted >= 10, "only {accepted} of 512 accepted");
}

/// A manifest whose checksum is right but whose blob index claims a
/// length no machine could hold (pieces that add up to 2^62 bytes): a
/// store opened in place fails to map the index (its made-up piece is
/// missing) and indexes the packs instead, as for any damaged index; it
/// never sizes a buffer by the manifest's word (which aborted the process
/// on the allocation).
#[test]
fn a_manifest_claiming_a_huge_file_is_never_allocated() {
    use cairn::replicate::{open_read_only, Archive, InPlaceOptions, Piece, Replicator};
    let ws = tempfile::tempdir().unwrap();
    let blob;
    {
        let s = cairn::Store::builder().workspace(ws.path()).open().unwrap();
        blob = s
            .put_blob(b"a blob, so the store has a blob index")
            .unwrap();
        s.append(&cairn::Event::new(cairn::EventKind::Prompt, "s1").with_text("hi"))
            .unwrap();
        s.close().unwrap();
    }
    let arch = tempfile::tempdir().unwrap();
    let url = format!("file://{}", arch.path().display());
    let mut r = Replicator::new(Archive::open(&url).unwrap(), ws.path().join(".cairn")).unwrap();
    r.round().unwrap();
    // The newest manifest, rewritten with the blob index made huge.
    let dir = arch.path().join("manifests");
    let gen = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let name = std::fs::read_dir(&gen)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut m = Manifest::decode("m", &std::fs::read(&name).unwrap()).unwrap();
    let index = m
        .files
        .iter_mut()
        .find(|f| f.path == "blobs/index")
        .unwrap();
    let more = (1u64 << 62) - index.len;
    index.pieces.push(Piece {
        hash: "0".repeat(64),
        len: more,
    });
    index.len = 1 << 62;
    std::fs::write(&name, m.encode()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let store = open_read_only(&url, &InPlaceOptions::default().cache_dir(cache.path())).unwrap();
    let blobs = store.blobs().unwrap();
    assert_eq!(
        blobs.get(&blob).unwrap(),
        b"a blob, so the store has a blob index"
    );
}
