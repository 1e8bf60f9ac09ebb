//! Retention and garbage collection: evictions are recorded, blobs that are
//! still referenced survive, unreferenced ones go.
#![allow(clippy::unwrap_used)]

mod common;

use cairn_codec::{BlobHash, Event, EventKind};
use cairn_snapshot::*;
use common::*;

#[test]
fn retention_evicts_oldest_and_gc_keeps_only_referenced_blobs() {
    let f = fx();
    f.write("keep.txt", "shared by every checkpoint");
    let mut cps = Vec::new();
    for i in 0..4 {
        f.write("v.txt", &format!("version {i}"));
        cps.push(f.checkpoint(&format!("v{i}")));
    }
    // A non-checkpoint record refers to a blob: it must survive gc.
    let diff = cairn_engine::blob::BlobStore::put(&f.blobs, b"a unified diff").unwrap();
    cairn_engine::blob::BlobStore::sync(&f.blobs).unwrap();
    let mut e = Event::new(EventKind::FileEdit, "default");
    e.diff = Some(diff);
    LogAccess::append(&f.log, &e).unwrap();
    // An orphan blob (no record names it) goes.
    let orphan = cairn_engine::blob::BlobStore::put(&f.blobs, b"orphan").unwrap();
    cairn_engine::blob::BlobStore::sync(&f.blobs).unwrap();

    let none =
        apply_retention_with(&f.log, &f.blobs, &f.ws, &RetentionPolicy::default(), true).unwrap();
    assert!(
        none.discarded.is_empty(),
        "without a policy nothing is evicted"
    );
    assert!(!f.blobs.contains(&orphan));

    let r = apply_retention_with(
        &f.log,
        &f.blobs,
        &f.ws,
        &RetentionPolicy {
            keep_per_session: Some(2),
            max_bytes: None,
        },
        true,
    )
    .unwrap();
    assert_eq!(r.discarded, vec![cps[0].id, cps[1].id]);
    let h = |s: &str| BlobHash::of(s.as_bytes());
    assert!(!f.blobs.contains(&h("version 0")) && !f.blobs.contains(&h("version 1")));
    assert!(f.blobs.contains(&h("version 2")) && f.blobs.contains(&h("version 3")));
    assert!(f.blobs.contains(&h("shared by every checkpoint")));
    assert!(f.blobs.contains(&diff));

    let list = list_checkpoints(&f.log, &f.ws, None).unwrap();
    assert!(list[0].discarded && list[1].discarded && !list[2].discarded);
    let e = f.try_rollback(cps[0].id, &[], false).unwrap_err();
    assert!(matches!(e, SnapshotError::Discarded { .. }), "{e}");
    // Retained checkpoints still roll back; a checkpoint after gc still works.
    f.rollback(cps[2].id);
    assert_eq!(f.read("v.txt").as_deref(), Some("version 2"));
    f.write("v.txt", "version 0");
    let c = f.checkpoint("after gc");
    f.rollback(cps[3].id);
    f.rollback(c.id);
    assert_eq!(f.read("v.txt").as_deref(), Some("version 0"));
}

#[test]
fn max_bytes_evicts_until_under_budget() {
    let f = fx();
    let mut cps = Vec::new();
    for i in 0..4 {
        f.write("big.txt", &format!("{i}").repeat(1000));
        cps.push(f.checkpoint("c"));
    }
    let r = apply_retention(
        &f.log,
        &f.blobs,
        &f.ws,
        &RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(2500),
        },
    )
    .unwrap();
    assert_eq!(r.discarded, vec![cps[0].id, cps[1].id]);
    assert_eq!(r.retained, 2);
}

#[test]
fn the_tree_a_rollback_restored_outlives_the_eviction_of_its_target() {
    let f = fx();
    f.write("a.txt", "old a");
    f.write("b.txt", "old b");
    let old = f.checkpoint("old");
    f.write("a.txt", "new a");
    f.write("b.txt", "new b");
    f.checkpoint("new");
    // A whole and a scoped rollback to `old`: the head's tree is now
    // `old`'s manifest (a.txt) over the checkpoint taken before the second.
    f.rollback(old.id);
    f.write("b.txt", "newer b");
    f.try_rollback(old.id, &["a.txt"], false).unwrap();
    let r = apply_retention_with(
        &f.log,
        &f.blobs,
        &f.ws,
        &RetentionPolicy {
            keep_per_session: Some(1),
            max_bytes: None,
        },
        true,
    )
    .unwrap();
    assert!(r.discarded.contains(&old.id), "{r:?}");
    // The rollbacks after the retained checkpoint keep `old`'s manifest and
    // its files: the current state can still be read back.
    let list = list_checkpoints(&f.log, &f.ws, None).unwrap();
    let old_root = list.iter().find(|c| c.id == old.id).unwrap().root;
    let mut live = std::collections::HashSet::new();
    let mut seen = std::collections::HashSet::new();
    manifest::reachable(&f.blobs, &old_root, &mut live, &mut seen).unwrap();
    assert!(live.contains(&BlobHash::of(b"old a")));
    for h in &live {
        assert!(f.blobs.contains(h), "{h} was collected");
    }
    assert_eq!(f.read("a.txt").as_deref(), Some("old a"));
    assert_eq!(f.read("b.txt").as_deref(), Some("newer b"));
}

fn put(f: &Fx, bytes: &[u8]) -> BlobHash {
    let h = cairn_engine::blob::BlobStore::put(&f.blobs, bytes).unwrap();
    cairn_engine::blob::BlobStore::sync(&f.blobs).unwrap();
    h
}

/// A `checkpoint.create` whose `root` names `root`, in a session of its
/// own (so retention always keeps it: the newest of its session).
fn checkpoint_with_root(f: &Fx, root: BlobHash) -> cairn_codec::CheckpointId {
    let mut e = Event::new(EventKind::CheckpointCreate, "hand-written");
    e.root = Some(root);
    e.label = Some("bad".into());
    cairn_codec::CheckpointId(LogAccess::append(&f.log, &e).unwrap())
}

const KEEP_5: RetentionPolicy = RetentionPolicy {
    keep_per_session: Some(5),
    max_bytes: None,
};

/// Session-11 trial P13: a checkpoint whose `root` is a file's contents
/// (no manifest node) made every gc fail for good. It names no other
/// blob, so gc goes on, keeps that blob and reports the checkpoint.
#[test]
fn a_root_that_is_no_manifest_node_is_reported_and_gc_goes_on() {
    let f = fx();
    f.write("v.txt", "version 0");
    f.checkpoint("good");
    let file = put(&f, b"hello\n");
    let bad = checkpoint_with_root(&f, file);
    let orphan = put(&f, b"orphan");
    for policy in [
        KEEP_5,
        RetentionPolicy {
            keep_per_session: None,
            max_bytes: Some(1),
        },
    ] {
        let r = apply_retention_with(&f.log, &f.blobs, &f.ws, &policy, true).unwrap();
        assert!(r.collected);
        assert_eq!(r.damaged.len(), 1, "{r:?}");
        assert_eq!(r.damaged[0].0, bad);
        assert!(r.damaged[0].1.contains("not a manifest node"), "{r:?}");
    }
    assert!(
        f.blobs.contains(&file),
        "a blob a retained record names is kept"
    );
    assert!(f.blobs.contains(&BlobHash::of(b"version 0")));
    assert!(!f.blobs.contains(&orphan), "collection went on");
}

/// A tree that cannot be read whole (a node that starts like one but does
/// not decode): what it names is unknown, so no blob is collected, and
/// the checkpoint is reported rather than failing gc.
#[test]
fn a_tree_that_cannot_be_read_keeps_every_blob() {
    let f = fx();
    f.write("v.txt", "version 0");
    f.checkpoint("good");
    let broken = put(&f, b"CMN1\xff not really a node");
    let bad = checkpoint_with_root(&f, broken);
    let orphan = put(&f, b"orphan");
    let r = apply_retention_with(&f.log, &f.blobs, &f.ws, &KEEP_5, true).unwrap();
    assert!(!r.collected);
    assert_eq!(r.damaged.len(), 1, "{r:?}");
    assert_eq!(r.damaged[0].0, bad);
    assert_eq!(r.gc, GcSummary::default());
    assert!(f.blobs.contains(&orphan) && f.blobs.contains(&broken));
}

/// Trial P14.19: after a gc killed between writing the new pack (and
/// index) and deleting the old ones, the next gc drops those old packs;
/// it reports only the blobs really removed, not their stale copies of
/// live blobs.
#[test]
fn gc_after_a_killed_gc_counts_only_blobs_really_removed() {
    let f = fx();
    for i in 0..20 {
        f.write(&format!("live{i}.txt"), &format!("live contents {i}"));
    }
    f.checkpoint("live");
    let orphan = put(&f, b"orphan");
    let dir = f.root.join(".cairn/blobs");
    let saved = tempfile::tempdir().unwrap();
    let packs = |d: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "pack"))
            .collect()
    };
    let old = packs(&dir);
    assert!(!old.is_empty(), "{dir:?} holds no .pack");
    for p in &old {
        std::fs::copy(p, saved.path().join(p.file_name().unwrap())).unwrap();
    }
    let r =
        apply_retention_with(&f.log, &f.blobs, &f.ws, &RetentionPolicy::default(), true).unwrap();
    assert_eq!(r.gc.removed_blobs, 1, "{r:?}");
    assert!(!f.blobs.contains(&orphan));
    // The kill: the old packs are back, as if never deleted.
    for p in &old {
        std::fs::copy(saved.path().join(p.file_name().unwrap()), p).unwrap();
    }
    let vfs: std::sync::Arc<dyn cairn_engine::Vfs> = std::sync::Arc::new(cairn_engine::RealVfs);
    let blobs =
        cairn_engine::blob::BlobStore::open(vfs, &dir, cairn_engine::blob::BlobOptions::default())
            .unwrap();
    let r = apply_retention_with(&f.log, &blobs, &f.ws, &RetentionPolicy::default(), true).unwrap();
    // The reopened store finds the orphan again in the restored pack and
    // removes it: that one blob, not the stale copies of the live ones.
    assert_eq!(r.gc.removed_blobs, 1, "{r:?}");
    assert!(!blobs.contains(&orphan));
    assert!(blobs.contains(&BlobHash::of(b"live contents 7")));
}

/// Printable text that compresses little, so a pack's dead share is what
/// the sizes say.
fn noise(len: usize, seed: u8) -> String {
    let mut x = u64::from(seed) * 2 + 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect()
}

/// A checkpoint of the workspace as it is, carrying application state.
fn checkpoint_with_state(f: &Fx, label: &str, state: &[u8]) -> CheckpointInfo {
    create_checkpoint(
        &f.log,
        &f.blobs,
        &f.ws,
        CheckpointRequest {
            label: Some(label.into()),
            state: Some(state.to_vec()),
            ..Default::default()
        },
    )
    .unwrap()
}

/// c1 (`a.txt` "one", state "epoch 1"), an edit and its checkpoint, then
/// a rollback to c1: c1 is the tree from the rollback on.
fn rolled_back_to_a_checkpoint_with_state(f: &Fx) -> CheckpointInfo {
    f.write("a.txt", "one\n");
    let c1 = checkpoint_with_state(f, "with state", b"epoch 1");
    f.write("a.txt", "two\n");
    f.checkpoint("two");
    f.rollback(c1.id);
    c1
}

/// After an edit, a rollback to `c1` (of
/// [`rolled_back_to_a_checkpoint_with_state`]) restores its file and hands
/// its state back.
fn rolls_back_with_its_state(f: &Fx, c1: &CheckpointInfo) {
    f.write("a.txt", "three\n");
    let back = f.rollback(c1.id);
    assert_eq!(back.state.as_deref(), Some(&b"epoch 1"[..]));
    assert_eq!(f.read("a.txt").as_deref(), Some("one\n"));
}

const KEEP_2: RetentionPolicy = RetentionPolicy {
    keep_per_session: Some(2),
    max_bytes: None,
};

/// T13-N4: gc keeps the tree of a discarded checkpoint a later rollback
/// restored, and now its application state with it, so it can still be
/// rolled back to (as promised), handing the state back.
#[test]
fn a_restored_discarded_checkpoint_keeps_its_state_and_can_be_rolled_back_to() {
    let f = fx();
    let c1 = rolled_back_to_a_checkpoint_with_state(&f);
    f.checkpoint("x");
    f.checkpoint("y");
    let r = apply_retention(&f.log, &f.blobs, &f.ws, &KEEP_2).unwrap();
    assert!(r.discarded.contains(&c1.id), "{r:?}");
    assert!(f.blobs.contains(&BlobHash::of(b"epoch 1")), "state kept");
    let dry = f.try_rollback(c1.id, &[], true).unwrap();
    assert_eq!(dry.state.as_deref(), Some(&b"epoch 1"[..]));
    rolls_back_with_its_state(&f, &c1);
}

/// T13-N4, the other way a tree is kept: the rollback comes after the
/// newest checkpoint, which alone is retained, so gc keeps its target's
/// tree (the head's) by rule, and the target's state with it.
#[test]
fn the_state_of_a_rollback_target_is_kept_with_the_tree_the_rule_keeps() {
    let f = fx();
    let c1 = rolled_back_to_a_checkpoint_with_state(&f);
    let r = apply_retention_with(&f.log, &f.blobs, &f.ws, &KEEP_1, true).unwrap();
    assert!(r.discarded.contains(&c1.id), "{r:?}");
    rolls_back_with_its_state(&f, &c1);
}

/// T13-N4: a discarded checkpoint whose files are all still stored (a
/// retained checkpoint has the same tree) but whose application state gc
/// collected is refused with an error that says the state is what is
/// missing, not its files.
#[test]
fn a_discarded_checkpoint_whose_state_alone_is_gone_says_so() {
    let f = fx();
    f.write("a.txt", "same\n");
    let c1 = checkpoint_with_state(&f, "with state", b"epoch 1");
    let c2 = f.checkpoint("same tree, no state");
    assert_eq!(c1.root, c2.root);
    let r = apply_retention_with(&f.log, &f.blobs, &f.ws, &KEEP_1, true).unwrap();
    assert_eq!(r.discarded, vec![c1.id], "{r:?}");
    assert!(!f.blobs.contains(&BlobHash::of(b"epoch 1")));
    for dry_run in [true, false] {
        let e = f.try_rollback(c1.id, &[], dry_run).unwrap_err();
        assert!(
            matches!(e, SnapshotError::DiscardedStateGone { id, .. } if id == c1.id),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("its files are all still in the store")
                && msg.contains("application state")
                && msg.contains("(by retention)")
                && !msg.contains("no longer all in the store"),
            "{msg}"
        );
    }
}

const KEEP_1: RetentionPolicy = RetentionPolicy {
    keep_per_session: Some(1),
    max_bytes: None,
};

/// c1 holds `keep.txt` (100 KB) and `small` (10 KB), c2 `keep.txt` only,
/// and a retention run keeping one evicts c1: the two files' contents
/// (noise from `seed` and `seed + 1`), c1 and the run's report.
fn evict_a_small_file(
    f: &Fx,
    small: &str,
    seed: u8,
) -> (
    String,
    String,
    CheckpointInfo,
    cairn_snapshot::RetentionReport,
) {
    let keep = noise(100_000, seed);
    let gone = noise(10_000, seed + 1);
    f.write("keep.txt", &keep);
    f.write(small, &gone);
    let c1 = f.checkpoint("one");
    std::fs::remove_file(f.p(small)).unwrap();
    f.checkpoint("two");
    let r = apply_retention(&f.log, &f.blobs, &f.ws, &KEEP_1).unwrap();
    assert_eq!(r.discarded, vec![c1.id], "{r:?}");
    (keep, gone, c1, r)
}

/// T13-N3: an eviction whose blobs share a pack with live ones leaves them
/// (the pack is below the rewrite threshold) and says how many; a
/// compacting run removes them, so the evicted checkpoint's contents can
/// no longer be read, and keeps every blob still referenced.
#[test]
fn an_ordinary_gc_counts_what_it_leaves_and_a_compacting_one_removes_it() {
    let f = fx();
    let (keep, secret, c1, r) = evict_a_small_file(&f, "secret.txt", 1);
    assert_eq!(r.gc.removed_blobs, 0, "{r:?}");
    // The secret and c1's root directory node are left, readable.
    assert_eq!(r.gc.left_below_threshold.blobs, 2, "{r:?}");
    assert!(r.gc.left().dead_bytes > 5_000, "{r:?}");
    assert!(f.blobs.contains(&BlobHash::of(secret.as_bytes())));

    let r = apply_retention_with(&f.log, &f.blobs, &f.ws, &KEEP_1, true).unwrap();
    assert_eq!(r.gc.removed_blobs, 2, "{r:?}");
    assert_eq!(r.gc.left(), LeftBehind::default(), "{r:?}");
    assert!(!f.blobs.contains(&BlobHash::of(secret.as_bytes())));
    assert!(!f.blobs.contains(&c1.root));
    assert!(f.blobs.contains(&BlobHash::of(keep.as_bytes())));
    assert!(f.blobs.verify().unwrap().is_ok());
}

/// T13-N3: under `max_bytes`, a store left over the budget on disk by the
/// ordinary collection while dead bytes remain is compacted until it fits;
/// when nothing left is dead, the report says by how much it is over.
#[test]
fn max_bytes_compacts_until_the_store_fits_or_says_by_how_much_it_is_over() {
    let f = fx();
    let (keep, old, _, r) = evict_a_small_file(&f, "old.txt", 3);
    let left = r.gc.left();
    assert!(left.blobs > 0, "{r:?}");
    let stored = r.gc.stored_bytes;
    // A budget the store fits once the dead bytes go.
    let fits = RetentionPolicy {
        keep_per_session: None,
        max_bytes: Some(stored - left.dead_bytes + 64),
    };
    let r = apply_retention(&f.log, &f.blobs, &f.ws, &fits).unwrap();
    assert_eq!(r.gc.left(), LeftBehind::default(), "{r:?}");
    assert!(r.gc.packs_rewritten_for_budget >= 1, "{r:?}");
    assert_eq!(r.stored_over_budget(), None, "{r:?}");
    assert!(!f.blobs.contains(&BlobHash::of(old.as_bytes())));
    // A budget nothing can meet: by how much it is over.
    let tiny = RetentionPolicy {
        keep_per_session: None,
        max_bytes: Some(10),
    };
    let r = apply_retention(&f.log, &f.blobs, &f.ws, &tiny).unwrap();
    assert_eq!(
        r.stored_over_budget(),
        Some(r.gc.stored_bytes - 10),
        "{r:?}"
    );
    assert!(f.blobs.contains(&BlobHash::of(keep.as_bytes())));
}
