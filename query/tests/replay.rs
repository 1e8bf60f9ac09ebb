//! Replay and point queries against a model of the tree, at every LSN.
#![allow(clippy::unwrap_used)]

mod common;

use cairn_codec::{CheckpointId, Lsn};
use cairn_query::index::Index;
use cairn_query::replay::{state_at, State};
use cairn_query::source::{RecordSource, SnapshotManifests};
use cairn_query::{Point, Query};
use common::{script, PATHS};

#[test]
fn state_at_every_lsn_matches_the_model() {
    for seed in [1, 7, 42, 99, 123, 2024, 31337, 8] {
        let s = script(seed, 300);
        let manifests = SnapshotManifests(&s.blobs);
        let index = Index::build(&s.log).unwrap();
        let q = Query::new(&s.log, &s.blobs, &manifests, &index);
        let head = s.log.head().unwrap().last_lsn.0;
        let mut live = State::new();
        for n in 0..=head {
            if n > 0 {
                live.apply(&s.log.read(Lsn(n)).unwrap(), &manifests)
                    .unwrap();
            }
            let want = &s.expected[n as usize];
            assert_eq!(&live.tree(), want, "seed {seed}: live fold at LSN {n}");
            assert_eq!(
                &q.tree_at(Point::Lsn(Lsn(n))).unwrap(),
                want,
                "seed {seed}: tree_at @{n}"
            );
            for p in PATHS {
                assert_eq!(
                    q.entry_at(Lsn(n), p).unwrap(),
                    want.get(p).copied(),
                    "seed {seed}: entry_at @{n} {p}"
                );
            }
        }
    }
}

#[test]
fn fold_from_start_equals_live_state_at_random_points() {
    let s = script(5, 400);
    let manifests = SnapshotManifests(&s.blobs);
    let index = Index::build(&s.log).unwrap();
    let q = Query::new(&s.log, &s.blobs, &manifests, &index);
    let head = s.log.head().unwrap().last_lsn.0;
    let mut live = State::new();
    let mut rng = common::Rng(3);
    let points: std::collections::BTreeSet<u64> = (0..40).map(|_| rng.below(head + 1)).collect();
    for n in 1..=head {
        live.apply(&s.log.read(Lsn(n)).unwrap(), &manifests)
            .unwrap();
        if points.contains(&n) {
            let folded = state_at(&s.log, &manifests, Lsn(n)).unwrap();
            assert_eq!(folded, live, "fold vs live at {n}");
            // Session state from the indexes agrees with the fold.
            let from_index = q.session_state(Point::Lsn(Lsn(n))).unwrap();
            let from_fold: Vec<_> = folded.sessions.values().cloned().collect();
            assert_eq!(from_index, from_fold, "session state at {n}");
        }
    }
}

#[test]
fn points_resolve() {
    let s = script(11, 120);
    let manifests = SnapshotManifests(&s.blobs);
    let index = Index::build(&s.log).unwrap();
    let q = Query::new(&s.log, &s.blobs, &manifests, &index);
    let head = s.log.head().unwrap().last_lsn;
    assert_eq!(q.resolve(Point::Head).unwrap(), head);
    let e = q
        .resolve(Point::Lsn(Lsn(head.0 + 1)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("past the head"), "{e}");
    let cp = index.checkpoints(None)[0].id;
    assert_eq!(q.resolve(Point::Checkpoint(cp)).unwrap(), cp.0);
    let not_cp = (1..)
        .find(|n| index.checkpoint(CheckpointId(Lsn(*n))).is_none())
        .unwrap();
    let e = q
        .resolve(Point::Checkpoint(CheckpointId(Lsn(not_cp))))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("no checkpoint `c{not_cp}`")) && e.contains("cairn checkpoints"),
        "{e}"
    );
    // A time resolves to the last record at or before it.
    let r = s.log.read(Lsn(50)).unwrap();
    assert_eq!(q.resolve(Point::Time(r.event.ts)).unwrap(), Lsn(50));
    let t = cairn_codec::Timestamp(r.event.ts.0 - 1);
    assert!(q.resolve(Point::Time(t)).unwrap() < Lsn(50));
    assert_eq!(
        q.resolve(Point::Time(cairn_codec::Timestamp(0))).unwrap(),
        Lsn(0)
    );
    assert!(q.tree_at(Point::Lsn(Lsn(0))).unwrap().is_empty());
}
