//! The file watcher on real directories: every kind of change is seen by a
//! watched checkpoint, whose tree is always the one a full scan gives, and
//! whatever the watcher cannot vouch for (overflow, errors, ignore-file
//! changes) falls back to a full scan. The only waiting is the watcher's
//! own bounded barrier (`watch::BARRIER_TIMEOUT`); nothing asserts on time.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use cairn_codec::BlobHash;
use cairn_snapshot::*;
use common::*;

/// The root a full scan of the same directory gives, from scratch: another
/// workspace handle with its own (empty) cache, in-memory log and blobs.
fn full_scan_root(f: &Fx) -> (BlobHash, u64) {
    let cache = tempfile::tempdir().unwrap();
    let ws = Workspace::open(&f.root, cache.path(), SnapshotOptions::default()).unwrap();
    let (log, blobs) = (MemLog::new(), MemBlobs::new());
    // The tracked paths matter to a scan: copy them over.
    let tracked = f.ws.tracked().unwrap();
    let refs: Vec<&str> = tracked.iter().map(String::as_str).collect();
    if !refs.is_empty() {
        ws.track(&refs).unwrap();
    }
    let c = create_checkpoint(&log, &blobs, &ws, CheckpointRequest::default()).unwrap();
    (c.root, c.counts.files)
}

fn stats(f: &Fx) -> WatchStats {
    f.ws.watch_stats().unwrap()
}

/// Takes a checkpoint that must come from the watched change set, and
/// checks it against a full scan.
fn watched_checkpoint(f: &Fx, what: &str) -> CheckpointInfo {
    let before = stats(f);
    let c = f.checkpoint(what);
    let after = stats(f);
    assert_eq!(
        after.watched_captures,
        before.watched_captures + 1,
        "{what}: expected a watched checkpoint, got {after:?}"
    );
    let (root, files) = full_scan_root(f);
    assert_eq!(
        c.root, root,
        "{what}: watched tree differs from a full scan"
    );
    assert_eq!(c.counts.files, files, "{what}: file count");
    c
}

fn full_checkpoint(f: &Fx, what: &str) -> CheckpointInfo {
    let before = stats(f);
    let c = f.checkpoint(what);
    assert_eq!(
        stats(f).full_captures,
        before.full_captures + 1,
        "{what}: expected a full scan"
    );
    assert_eq!(c.root, full_scan_root(f).0, "{what}: tree");
    c
}

fn base(f: &Fx) {
    f.write(".gitignore", "node_modules/\n*.log\n");
    f.write("a.txt", "one");
    f.write("src/lib.rs", "pub fn a() {}");
    f.write("src/util/mod.rs", "pub mod x;");
    f.write("docs/guide.md", "# guide");
    f.write("node_modules/dep/index.js", "module.exports = 1");
}

#[test]
fn every_kind_of_change_is_seen_and_matches_a_full_scan() {
    let f = fx();
    base(&f);
    f.ws.watch().unwrap();
    // What changed before the watcher started is unknown: a full scan.
    let c0 = full_checkpoint(&f, "first");

    f.write("a.txt", "edited");
    let c1 = watched_checkpoint(&f, "edit");
    assert_ne!(c1.root, c0.root);
    assert_eq!(c1.counts.changed, 1);

    f.write("src/new.rs", "fn new() {}");
    watched_checkpoint(&f, "create");

    std::fs::remove_file(f.p("src/lib.rs")).unwrap();
    watched_checkpoint(&f, "delete");

    std::fs::rename(f.p("a.txt"), f.p("b.txt")).unwrap();
    watched_checkpoint(&f, "rename a file");

    std::fs::rename(f.p("src/util"), f.p("src/helpers")).unwrap();
    watched_checkpoint(&f, "rename a directory");
    // The renamed directory is watched under its new name.
    f.write("src/helpers/mod.rs", "pub mod y;");
    watched_checkpoint(&f, "edit inside the renamed directory");

    // A new directory tree, files written right after it was made.
    f.write("new/deep/er/c.txt", "created");
    f.write("new/deep/d.txt", "also");
    watched_checkpoint(&f, "new directories");
    f.write("new/deep/er/c.txt", "edited in the new directory");
    watched_checkpoint(&f, "edit in the new directory");

    std::fs::remove_dir_all(f.p("new")).unwrap();
    watched_checkpoint(&f, "delete a directory tree");

    // An editor's atomic save: temp file, then rename over the original.
    f.write("docs/.guide.md.swp", "# guide, saved");
    std::fs::rename(f.p("docs/.guide.md.swp"), f.p("docs/guide.md")).unwrap();
    watched_checkpoint(&f, "atomic save");

    std::fs::set_permissions(f.p("b.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
    watched_checkpoint(&f, "chmod +x");

    std::fs::remove_file(f.p("b.txt")).unwrap();
    std::os::unix::fs::symlink("src/new.rs", f.p("b.txt")).unwrap();
    watched_checkpoint(&f, "file replaced by a symlink");

    // Ignored paths change nothing, as for a scan.
    let before = f.checkpoint("settle").root;
    f.write("node_modules/dep/index.js", "module.exports = 2");
    f.write("build.log", "noise");
    let c = watched_checkpoint(&f, "ignored paths only");
    assert_eq!(c.root, before);

    // Nothing changed at all.
    let c2 = watched_checkpoint(&f, "nothing");
    assert_eq!(c2.root, c.root);
    assert!(!stats(&f).broken);
}

#[test]
fn tracked_ignored_paths_are_captured_under_the_watcher() {
    let f = fx();
    base(&f);
    f.ws.watch().unwrap();
    full_checkpoint(&f, "first");
    // The agent announces a write to an ignored file, then makes it.
    f.ws.track(&["node_modules/dep/patched.js"]).unwrap();
    let c = watched_checkpoint(&f, "tracked, not yet written");
    assert!(capture::read_manifest(&f.blobs, &c.root)
        .unwrap()
        .missing
        .contains("node_modules/dep/patched.js"));
    f.write("node_modules/dep/patched.js", "patched");
    let c = watched_checkpoint(&f, "tracked ignored file written");
    let m = capture::read_manifest(&f.blobs, &c.root).unwrap();
    assert!(m.entries.contains_key("node_modules/dep/patched.js"));
    assert!(m.missing.is_empty());
    std::fs::remove_dir_all(f.p("node_modules")).unwrap();
    let c = watched_checkpoint(&f, "ignored directory with a tracked file deleted");
    assert!(capture::read_manifest(&f.blobs, &c.root)
        .unwrap()
        .missing
        .contains("node_modules/dep/patched.js"));
}

#[test]
fn an_ignore_file_change_falls_back_to_a_full_scan() {
    let f = fx();
    base(&f);
    f.ws.watch().unwrap();
    full_checkpoint(&f, "first");
    f.write("docs/.gitignore", "*.md\n");
    let c = full_checkpoint(&f, "ignore file changed");
    assert!(!capture::read_manifest(&f.blobs, &c.root)
        .unwrap()
        .entries
        .contains_key("docs/guide.md"));
    f.write("src/lib.rs", "pub fn b() {}");
    watched_checkpoint(&f, "back to watched");
}

/// The kernel's event queue limit, if it can be read.
fn max_queued_events() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[test]
fn a_real_queue_overflow_falls_back_to_a_full_scan() {
    let f = fx();
    base(&f);
    f.ws.watch().unwrap();
    full_checkpoint(&f, "first");
    let w = f.ws.watcher().unwrap();
    // With the watcher's delivery held, create and delete more distinct
    // files than the kernel queues (each makes several events), then make
    // one real edit: the queue overflows, so that edit is only known to a scan.
    let limit = max_queued_events().unwrap_or(16_384);
    if limit > 1_000_000 {
        eprintln!("max_queued_events is {limit}: too large to overflow in a test");
        return;
    }
    w.hold_events(|| {
        for i in 0..limit / 2 {
            let p = f.p(&format!("flood-{i}"));
            std::fs::write(&p, b"x").unwrap();
            std::fs::remove_file(&p).unwrap();
        }
        f.write("a.txt", "edited while the queue overflowed");
    });
    let c = full_checkpoint(&f, "after overflow");
    assert_eq!(
        lookup_file(&f, &c, "a.txt"),
        Some(b"edited while the queue overflowed".to_vec())
    );
    f.write("a.txt", "again");
    watched_checkpoint(&f, "watched again after the full scan");
}

fn lookup_file(f: &Fx, c: &CheckpointInfo, path: &str) -> Option<Vec<u8>> {
    let e = manifest::lookup(&f.blobs, &c.root, path).unwrap()?;
    Some(BlobRead::get(&f.blobs, &e.hash).unwrap())
}

#[test]
fn an_injected_rescan_event_or_error_falls_back_to_a_full_scan() {
    let f = fx();
    base(&f);
    f.ws.watch().unwrap();
    full_checkpoint(&f, "first");
    let w = f.ws.watcher().unwrap();
    let rescan = notify::Event::new(notify::EventKind::Other).set_flag(notify::event::Flag::Rescan);
    w.inject(Ok(rescan), &f.root);
    full_checkpoint(&f, "after a rescan event");
    watched_checkpoint(&f, "watched again");
    w.inject(Err(notify::Error::generic("watch limit reached")), &f.root);
    f.write("a.txt", "x");
    full_checkpoint(&f, "after an error");
    f.write("a.txt", "y");
    full_checkpoint(&f, "errors disable the watcher for good");
    assert!(stats(&f).broken);
}

#[test]
fn rollback_with_the_watcher_restores_exactly_and_stays_watched() {
    let f = fx();
    base(&f);
    f.ws.watch().unwrap();
    let c0 = full_checkpoint(&f, "first");
    let before = f.tree();
    f.write("a.txt", "edited");
    f.write("src/lib.rs", "broken");
    f.write("src/extra/new.rs", "new");
    std::fs::remove_file(f.p("docs/guide.md")).unwrap();
    let s = stats(&f);
    let r = f.rollback(c0.id);
    assert_eq!(
        stats(&f).watched_captures,
        s.watched_captures + 1,
        "the pre-rollback checkpoint came from the watcher"
    );
    assert_eq!(f.tree(), before);
    let mut w = r.written.clone();
    w.sort();
    assert_eq!(w, vec!["a.txt", "docs/guide.md", "src/lib.rs"]);
    assert_eq!(r.deleted, vec!["src/extra/new.rs".to_string()]);
    // The undo point holds the edits.
    let src = find_checkpoint(&f.log, &f.ws, r.source.unwrap()).unwrap();
    assert_eq!(lookup_file(&f, &src, "a.txt"), Some(b"edited".to_vec()));
    // The rollback's own writes are seen: the next checkpoint is the target's tree.
    let c = watched_checkpoint(&f, "after rollback");
    assert_eq!(c.root, c0.root);
}

/// A small deterministic generator (xorshift64*): the model test's
/// operations are the same on every run, and a failure names its step.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// The files now present under `f.root` (not directories, which the
/// listing names with a trailing `/`).
fn present(f: &Fx) -> Vec<String> {
    let mut out = std::collections::BTreeMap::new();
    walk(&f.root, &f.root, &mut out, true);
    out.into_keys().filter(|p| !p.ends_with('/')).collect()
}

/// Model test: random edits, creates, deletes, renames (of files and of
/// directories) and mode changes, a checkpoint after each round. Every
/// watched checkpoint's tree must be the one a full scan from scratch
/// gives, and so must a full scan through a persistent stat cache (which
/// after the first round is written as a delta, and whose walk shares
/// directories between threads).
#[test]
fn random_changes_watched_and_cached_full_scans_match_a_fresh_full_scan() {
    const ROUNDS: usize = 24;
    const OPS_PER_ROUND: usize = 6;
    let f = fx();
    base(&f);
    for i in 0..12 {
        f.write(
            &format!("src/m{}/f{i}.rs", i % 3),
            &format!("fn f{i}() {{}}"),
        );
    }
    f.ws.watch().unwrap();
    full_checkpoint(&f, "first");
    // A second handle with its own persistent stat cache: full scans only.
    let cached_dir = tempfile::tempdir().unwrap();
    // Each scan through it opens a new handle, as each `cairn checkpoint`
    // is a new process: the cache is read back from its files (the base
    // and the delta) every time.
    let cached =
        || Workspace::open(&f.root, cached_dir.path(), SnapshotOptions::default()).unwrap();
    let (clog, cblobs) = (MemLog::new(), MemBlobs::new());
    // Its first checkpoint counts every file as new: the rounds compare after it.
    create_checkpoint(&clog, &cblobs, &cached(), CheckpointRequest::default()).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..ROUNDS {
        for op in 0..OPS_PER_ROUND {
            let files: Vec<String> = present(&f)
                .into_iter()
                .filter(|p| !p.starts_with("node_modules/") && p != ".gitignore")
                .collect();
            let pick = |rng: &mut Rng| files.get(rng.below(files.len().max(1))).cloned();
            let n = round * OPS_PER_ROUND + op;
            match rng.below(7) {
                0 | 1 => {
                    if let Some(p) = pick(&mut rng) {
                        f.write(&p, &format!("edit {n}"));
                    }
                }
                2 => f.write(&format!("src/m{}/new{n}.rs", rng.below(4)), "new"),
                3 => {
                    if let Some(p) = pick(&mut rng) {
                        std::fs::remove_file(f.p(&p)).unwrap();
                    }
                }
                4 => {
                    if let Some(p) = pick(&mut rng) {
                        let to = f.p(&format!("src/moved{n}.rs"));
                        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                        std::fs::rename(f.p(&p), to).unwrap();
                    }
                }
                5 => {
                    let from = f.p(&format!("src/m{}", rng.below(4)));
                    if from.is_dir() {
                        std::fs::rename(&from, f.p(&format!("src/m{}x{n}", rng.below(4)))).unwrap();
                    }
                }
                _ => {
                    if let Some(p) = pick(&mut rng) {
                        let mode = if rng.below(2) == 0 { 0o755 } else { 0o644 };
                        let perm = std::fs::Permissions::from_mode(mode);
                        std::fs::set_permissions(f.p(&p), perm).unwrap();
                    }
                }
            }
        }
        let what = format!("round {round}");
        let watched = watched_checkpoint(&f, &what);
        let c = create_checkpoint(&clog, &cblobs, &cached(), CheckpointRequest::default()).unwrap();
        assert_eq!(
            c.root, watched.root,
            "{what}: full scan through the stat cache"
        );
        // The counts too: a cache that kept a deleted path would count it
        // as gone again at every scan.
        assert_eq!(
            (c.counts.files, c.counts.changed),
            (watched.counts.files, watched.counts.changed),
            "{what}: counts through the stat cache"
        );
    }
}
