//! The CI twin of the `manifest_node` fuzz target (`fuzz/`): the checkpoint
//! manifest's directory-node decoder ([`Node::decode`]) fed random bytes,
//! random bytes behind the node magic, and valid nodes with a byte flipped,
//! a cut or a splice of random bytes. It never panics; whatever it accepts
//! is a well-formed node (valid names, strictly sorted, valid missing
//! paths) that re-encodes and decodes to itself; a valid node round trips
//! byte for byte; a cut valid node is always refused.
#![allow(clippy::unwrap_used)]

use cairn_codec::BlobHash;
use cairn_snapshot::manifest::{Node, NODE_MAGIC};
use cairn_snapshot::relpath::{check_manifest_path, valid_name};
use cairn_snapshot::{Entry, EntryKind, SnapshotError};
use proptest::prelude::*;

fn decode(bytes: &[u8]) -> Result<Node, SnapshotError> {
    Node::decode(BlobHash::of(bytes), bytes)
}

/// What the decoder promises about anything it accepts.
fn check_accepted(n: &Node) -> Result<(), TestCaseError> {
    for (name, _) in &n.entries {
        prop_assert!(valid_name(name), "accepted invalid name {name:?}");
    }
    for w in n.entries.windows(2) {
        prop_assert!(
            w[0].0.as_bytes() < w[1].0.as_bytes(),
            "accepted unsorted entries"
        );
    }
    for p in &n.missing {
        prop_assert!(
            check_manifest_path(p).is_ok(),
            "accepted invalid missing path {p:?}"
        );
    }
    let bytes = n.encode();
    let again = decode(&bytes);
    prop_assert!(again.is_ok(), "re-encoded node refused: {again:?}");
    prop_assert_eq!(&again.unwrap(), n);
    Ok(())
}

/// A refusal is a `BadManifest` error that names the node.
fn check_refused(e: &SnapshotError, bytes: &[u8]) -> Result<(), TestCaseError> {
    prop_assert!(
        matches!(e, SnapshotError::BadManifest { node, .. } if *node == BlobHash::of(bytes)),
        "unexpected error {e:?}"
    );
    Ok(())
}

fn arb_kind() -> impl Strategy<Value = EntryKind> {
    prop_oneof![
        Just(EntryKind::File),
        Just(EntryKind::Dir),
        Just(EntryKind::Symlink)
    ]
}

fn arb_node() -> impl Strategy<Value = Node> {
    (
        proptest::collection::btree_map(
            "[a-zA-Z0-9_.-]{1,12}",
            (arb_kind(), any::<u32>(), any::<u64>(), any::<[u8; 32]>()),
            0..12,
        ),
        proptest::collection::btree_set("[a-z]{1,6}(/[a-z]{1,6}){0,2}", 0..4),
    )
        .prop_map(|(entries, missing)| Node {
            entries: entries
                .into_iter()
                .filter(|(name, _)| valid_name(name))
                .map(|(name, (kind, mode, size, h))| {
                    (
                        name,
                        Entry {
                            kind,
                            mode,
                            size,
                            hash: BlobHash(h),
                        },
                    )
                })
                .collect(),
            missing: missing
                .into_iter()
                .filter(|p| check_manifest_path(p).is_ok())
                .collect(),
        })
}

/// Damage to a valid encoding: a flipped byte, a cut, or random bytes spliced in.
#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Cut(usize),
    Splice(usize, Vec<u8>),
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Damage::Flip(i, x)),
        any::<usize>().prop_map(Damage::Cut),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Damage::Splice(i, b)),
    ]
}

fn apply(bytes: &[u8], d: &Damage) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match d {
        Damage::Flip(i, x) => {
            let i = i % b.len();
            b[i] ^= x;
        }
        Damage::Cut(i) => b.truncate(i % b.len()),
        Damage::Splice(i, s) => {
            let i = i % (b.len() + 1);
            b.splice(i..i, s.iter().copied());
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        match decode(&bytes) {
            Ok(n) => check_accepted(&n)?,
            Err(e) => check_refused(&e, &bytes)?,
        }
    }

    #[test]
    fn random_bytes_behind_the_magic(flags in 0u8..3, tail in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut bytes = NODE_MAGIC.to_vec();
        bytes.push(flags);
        bytes.extend_from_slice(&tail);
        match decode(&bytes) {
            Ok(n) => check_accepted(&n)?,
            Err(e) => check_refused(&e, &bytes)?,
        }
    }

    #[test]
    fn valid_nodes_round_trip_byte_for_byte(n in arb_node()) {
        let bytes = n.encode();
        let back = decode(&bytes).unwrap();
        prop_assert_eq!(&back, &n);
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn damaged_valid_nodes_are_refused_or_well_formed(n in arb_node(), d in arb_damage()) {
        let bytes = n.encode();
        let bad = apply(&bytes, &d);
        match decode(&bad) {
            Ok(got) => {
                // A cut always loses a declared entry, path or the magic.
                prop_assert!(!matches!(d, Damage::Cut(_)), "a cut node was accepted");
                check_accepted(&got)?;
            }
            Err(e) => check_refused(&e, &bad)?,
        }
    }
}

/// A node that declares far more entries than its bytes can hold is refused
/// before anything is allocated for them.
#[test]
fn huge_declared_counts_are_refused() {
    for count in [u64::MAX >> 1, 1 << 40, 1 << 20] {
        let mut b = NODE_MAGIC.to_vec();
        b.push(0);
        let mut v = count;
        while v >= 0x80 {
            b.push((v as u8) | 0x80);
            v >>= 7;
        }
        b.push(v as u8);
        let e = decode(&b).unwrap_err().to_string();
        assert!(e.contains("cannot fit"), "{count}: {e}");
    }
}
