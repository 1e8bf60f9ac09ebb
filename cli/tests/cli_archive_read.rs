//! `cairn --store URL ...`: reading an archive in place. The read
//! commands answer as on the original store; they fetch only part of the
//! archive; the cache keeps its bound; a damaged piece is named, never
//! read as good data; writing commands are refused.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use cairn::replicate::{Archive, ArchiveVfs, InPlaceOptions};

mod common;
use common::*;

/// A workspace with a store, two checkpoints and records between them.
fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    ok(&cairn(ws, &["init", "-q"]));
    std::fs::write(ws.join("a.txt"), "first\n").unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn main() {}\n".repeat(40)).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q", "--label", "one"]));
    record(ws, 0..5);
    std::fs::write(ws.join("a.txt"), "second\n").unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn main() { run() }\n".repeat(40)).unwrap();
    ok(&cairn(ws, &["checkpoint", "-q", "--label", "two"]));
    d
}

fn record(ws: &Path, n: std::ops::Range<u32>) {
    let lines: String = n
        .map(|i| {
            format!(
                "{{\"kind\":\"file.write\",\"session\":\"s1\",\"path\":\"src/lib.rs\",\"text\":\"step {i}\"}}\n"
            )
        })
        .collect();
    ok(&cairn_stdin(ws, &["record"], Some(&lines)));
}

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// [`workspace`] replicated once to a `file://` archive: the workspace,
/// the archive's directory and its URL.
fn replicated() -> (tempfile::TempDir, tempfile::TempDir, String) {
    let d = workspace();
    let arch = tempfile::tempdir().unwrap();
    let u = url(arch.path());
    ok(&cairn(d.path(), &["replicate", &u, "--once"]));
    (d, arch, u)
}

/// `cairn ARGS` in `dir` with its cache in `cache`.
fn cairn_cached(dir: &Path, cache: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env_remove("CAIRN_CACHE_BYTES")
        .env("CAIRN_CACHE_DIR", cache)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// The read commands the issue names, with arguments this workspace has.
const READS: &[&[&str]] = &[
    &["log"],
    &["log", "--json", "--limit", "3"],
    &["show", "c1:a.txt"],
    &["show", "head:src/lib.rs"],
    &["tree", "head"],
    &["diff", "c1", "head"],
    &["history", "src/lib.rs"],
    &["blame", "head", "src/lib.rs"],
    &["export"],
    &["verify"],
    &["checkpoints"],
    &["checkpoints", "--json"],
    &["branches", "c1"],
    &["report", "--format", "md"],
    &["report"],
];

/// Every file under `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_read_commands_on_an_archive_answer_as_on_the_store() {
    let (d, arch, u) = replicated();
    let ws = d.path();
    let before = snapshot(arch.path());
    let elsewhere = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    for args in READS {
        let local = cairn(ws, args);
        ok(&local);
        let mut remote_args = vec!["--store", u.as_str()];
        remote_args.extend_from_slice(args);
        // Twice: from the archive, then from the cache.
        for round in ["cold", "cached"] {
            let remote = cairn_cached(elsewhere.path(), cache.path(), &remote_args);
            // Human tables show ages, which follow the clock; JSON and
            // the bytes of `show` and `export` must match byte for byte.
            let exact = args.contains(&"--json") || ["show", "export"].contains(&args[0]);
            let same = |o: &[u8]| match exact {
                true => String::from_utf8_lossy(o).into_owned(),
                false => without_ages(o),
            };
            assert_eq!(
                same(&remote.stdout),
                same(&local.stdout),
                "{args:?} ({round}): {}",
                err(&remote)
            );
            assert_eq!(remote.status.code(), Some(0), "{args:?}: {}", err(&remote));
        }
    }
    // Nothing was written to the archive, nor where the commands ran.
    assert_eq!(snapshot(arch.path()), before);
    assert!(snapshot(elsewhere.path()).is_empty());
    assert!(!snapshot(cache.path()).is_empty(), "the cache was used");
}

/// An archive has no workspace, so no checkpoint list cache: every
/// session's checkpoints, discarded ones marked, are listed from the
/// log's records, and a checkpoint is found by id the same way.
#[test]
fn checkpoints_of_every_session_in_place_are_listed_as_on_the_store() {
    let d = workspace();
    let ws = d.path();
    for (session, text) in [("s2", "third"), ("s2", "fourth"), ("s3", "fifth")] {
        std::fs::write(ws.join("a.txt"), text).unwrap();
        ok(&cairn(
            ws,
            &["checkpoint", "-q", "--session", session, "--label", text],
        ));
    }
    // Retention discards the older checkpoints of each session.
    ok(&cairn(ws, &["gc", "--keep-per-session", "1"]));
    let arch = tempfile::tempdir().unwrap();
    let u = url(arch.path());
    ok(&cairn(ws, &["replicate", &u, "--once", "-q"]));
    let elsewhere = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let listed = cairn(ws, &["checkpoints", "--json"]);
    ok(&listed);
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(text.contains("\"discarded\":true"), "{text}");
    for args in [
        &["checkpoints", "--json"][..],
        &["checkpoints", "--json", "--session", "s2"],
        &["checkpoints"],
        &["show", "c1:a.txt"],
        &["tree", "c1"],
        &["tree", "c999"],
    ] {
        let local = cairn(ws, args);
        let mut remote_args = vec!["--store", u.as_str()];
        remote_args.extend_from_slice(args);
        let remote = cairn_cached(elsewhere.path(), cache.path(), &remote_args);
        assert_eq!(
            without_ages(&remote.stdout),
            without_ages(&local.stdout),
            "{args:?}: {}",
            err(&remote)
        );
        assert_eq!(
            remote.status.code(),
            local.status.code(),
            "{args:?}: {}",
            err(&remote)
        );
        assert_eq!(err(&remote), err(&local), "{args:?}");
    }
}

#[test]
fn a_tiny_cache_bound_still_answers_right_and_holds() {
    let (d, _arch, u) = replicated();
    let ws = d.path();
    let cache = tempfile::tempdir().unwrap();
    let want = ok(&cairn(ws, &["export"]));
    let got = cairn_cached(
        cache.path(),
        cache.path(),
        &["--store", &u, "--cache-bytes", "1", "export"],
    );
    assert_eq!(ok(&got), want);
    let kept: u64 = snapshot(cache.path())
        .iter()
        .map(|(_, b)| b.len() as u64)
        .sum();
    assert!(kept <= 1, "{kept} bytes kept under a 1-byte bound");
    // The environment variable sets the bound the same way; a bad one is
    // a usage error naming it.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["--store", &u, "log"])
        .current_dir(cache.path())
        .env("CAIRN_CACHE_DIR", cache.path())
        .env("CAIRN_CACHE_BYTES", "lots")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("CAIRN_CACHE_BYTES"), "{}", err(&o));
}

#[test]
fn writing_commands_on_an_archive_are_refused_and_name_restore() {
    let (d, arch, u) = replicated();
    let ws = d.path();
    let before = snapshot(arch.path());
    let cache = tempfile::tempdir().unwrap();
    for args in [
        &["checkpoint"][..],
        &["record"],
        &["rollback", "c1"],
        &["gc"],
        &["repair"],
        &["init"],
    ] {
        let mut a = vec!["--store", u.as_str()];
        a.extend_from_slice(args);
        let o = cairn_cached(ws, cache.path(), &a);
        assert!(!o.status.success(), "{args:?}");
        let e = err(&o);
        assert!(
            e.contains(&format!("`cairn {}` cannot run on the archive", args[0]))
                && e.contains(&format!(
                    "an archive is read-only; restore it first: cairn restore {u} DIR"
                )),
            "{args:?}: {e}"
        );
    }
    assert_eq!(snapshot(arch.path()), before);
    // An empty archive (or none) is said to be one, and not created.
    let none = arch.path().join("nothing-here");
    let o = cairn_cached(ws, cache.path(), &["--store", &url(&none), "log"]);
    assert!(err(&o).contains("holds no manifest"), "{}", err(&o));
    assert!(!none.exists());
}

/// The object holding `piece` of the file `path` in the newest manifest.
fn object_of(arch: &Path, path_prefix: &str, piece: usize) -> std::path::PathBuf {
    let a = Archive::open(&url(arch)).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let vfs = ArchiveVfs::open(a, &InPlaceOptions::default().cache_dir(cache.path())).unwrap();
    let m = manifest_files(arch, vfs.manifest());
    let f = m
        .iter()
        .find(|f| f.path.starts_with(path_prefix))
        .unwrap_or_else(|| panic!("no {path_prefix} in {m:?}"));
    arch.join("objects").join(&f.pieces[piece].hash)
}

fn manifest_files(arch: &Path, name: &str) -> Vec<cairn::replicate::FileEntry> {
    let b = std::fs::read(arch.join(name)).unwrap();
    cairn::replicate::Manifest::decode(name, &b).unwrap().files
}

#[test]
fn a_damaged_piece_is_named_never_read_as_good_data() {
    let (d, arch, u) = replicated();
    let ws = d.path();
    // One byte of the log's piece altered (same length).
    let obj = object_of(arch.path(), "log/", 0);
    let mut b = std::fs::read(&obj).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0x01;
    std::fs::write(&obj, &b).unwrap();
    let cache = tempfile::tempdir().unwrap();
    for args in [&["log"][..], &["export"], &["verify"]] {
        let mut a = vec!["--store", u.as_str()];
        a.extend_from_slice(args);
        let o = cairn_cached(ws, cache.path(), &a);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", err(&o));
        let name = obj.file_name().unwrap().to_str().unwrap();
        assert!(
            err(&o).contains(&format!("objects/{name}")) && err(&o).contains("damaged"),
            "{args:?}: {}",
            err(&o)
        );
        assert!(o.stdout.is_empty() || args[0] == "verify", "{args:?}");
    }
}

/// Random bytes that do not compress: the packs hold what was written.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 32);
    let mut i = 0u64;
    while out.len() < n {
        out.extend_from_slice(
            blake3::hash(&[seed.to_le_bytes(), i.to_le_bytes()].concat()).as_bytes(),
        );
        i += 1;
    }
    out.truncate(n);
    out
}

/// Bytes of every object in the archive.
fn archive_bytes(arch: &Path) -> u64 {
    snapshot(&arch.join("objects"))
        .iter()
        .map(|(_, b)| b.len() as u64)
        .sum()
}

#[test]
fn a_query_in_place_fetches_a_small_part_of_the_archive() {
    const FILES: u64 = 6;
    const FILE_BYTES: usize = 1 << 20;
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    ok(&cairn(ws, &["init", "-q"]));
    let arch = tempfile::tempdir().unwrap();
    let u = url(arch.path());
    // A round per checkpoint: the pack is shipped in pieces as it grows.
    for i in 0..FILES {
        std::fs::write(ws.join(format!("f{i}.bin")), noise(i, FILE_BYTES)).unwrap();
        std::fs::write(ws.join("small.txt"), format!("version {i}\n")).unwrap();
        ok(&cairn(
            ws,
            &["checkpoint", "-q", "--label", &format!("step {i}")],
        ));
        ok(&cairn(ws, &["replicate", &u, "--once"]));
    }
    let total = archive_bytes(arch.path());
    assert!(total > FILES * FILE_BYTES as u64, "{total}");
    let pieces: usize = {
        let a = Archive::open(&u).unwrap();
        let cache = tempfile::tempdir().unwrap();
        let vfs = ArchiveVfs::open(a, &InPlaceOptions::default().cache_dir(cache.path())).unwrap();
        manifest_files(arch.path(), vfs.manifest())
            .iter()
            .map(|f| f.pieces.len())
            .sum()
    };
    assert!(pieces as u64 > FILES, "{pieces} pieces");

    let cache = tempfile::tempdir().unwrap();
    let open = |bytes: u64| {
        let a = Archive::open(&u).unwrap();
        let opts = InPlaceOptions::default()
            .cache_dir(cache.path())
            .cache_bytes(bytes);
        ArchiveVfs::open(a, &opts).unwrap()
    };
    // `log --limit 5`.
    let vfs = open(1);
    let store = vfs.open_store().unwrap();
    let filter = cairn::Filter {
        limit: Some(5),
        ..cairn::Filter::all()
    };
    let mut seen = 0;
    store
        .scan(&filter, &mut |_| {
            seen += 1;
            Ok(true)
        })
        .unwrap();
    assert_eq!(seen, 5);
    let log_read = vfs.archive().bytes_read();
    assert!(
        log_read * 10 < total,
        "log --limit 5 read {log_read} of {total} bytes in {} requests",
        vfs.archive().gets()
    );

    // `show` of a small file: a chunk of one pack piece, not the pack.
    let vfs = open(1);
    let store = vfs.open_store().unwrap();
    let opened = vfs.archive().bytes_read();
    let hash = store
        .query(|q| {
            Ok(q.entry_at(store.head().last_lsn, "small.txt")?
                .unwrap()
                .blob)
        })
        .unwrap();
    assert_eq!(
        store.blob(&hash).unwrap(),
        format!("version {}\n", FILES - 1).as_bytes()
    );
    let show_read = vfs.archive().bytes_read() - opened;
    assert!(
        show_read <= 2 * cairn::replicate::RANGE_CHUNK_BYTES && (opened + show_read) * 5 < total,
        "show read {show_read} bytes after {opened} to open, of {total}"
    );

    // With a cache large enough, a second reader fetches nothing new for
    // the same query.
    let warm = open(1 << 30);
    let _ = warm.open_store().unwrap();
    let again = open(1 << 30);
    let manifest_read = again.archive().bytes_read();
    let _ = again.open_store().unwrap();
    assert_eq!(
        again.archive().bytes_read(),
        manifest_read,
        "only the manifest from the archive, the rest from the cache"
    );
}

/// Segments of this size for the index-file tests: larger than a ranged
/// read ([`cairn::replicate::RANGE_CHUNK_BYTES`]) several times over, so
/// that opening the log in place (a header and a footer of each) reads a
/// small part of each.
const SEG_BYTES: u64 = 4 << 20;

/// The store of `ws`, opened read-only (the local answers to compare).
fn read_only(ws: &Path) -> cairn::Store {
    cairn::Store::builder()
        .workspace(ws)
        .read_only()
        .open()
        .unwrap()
}

/// The store of `ws`, opened writable with segments of [`SEG_BYTES`].
fn open_segmented(ws: &Path) -> cairn::Store {
    cairn::Store::builder()
        .workspace(ws)
        .segment_size_bytes(SEG_BYTES)
        .open()
        .unwrap()
}

/// A store of sealed segments of [`SEG_BYTES`] (and a tail) whose first
/// five records are the session `rare`, the rest of eight other sessions
/// with text that does not compress much; closed, so each sealed segment
/// has its query index file. Gives the workspace and the number of
/// sealed segments.
fn store_of_segments() -> (tempfile::TempDir, u64) {
    let d = tempfile::tempdir().unwrap();
    let s = open_segmented(d.path());
    fill_segments(&s);
    let sealed = s.stats().log.sealed_segments;
    s.close().unwrap();
    assert!(sealed >= 5, "{sealed} sealed segments");
    (d, sealed)
}

/// 1,600 hex digits that do not compress: 25 blake3 hashes of `seed`
/// with each index `j` inserted after its first word.
fn hex_text(seed: &[u64]) -> String {
    (0..25u64)
        .map(|j| {
            let mut words = vec![seed[0], j];
            words.extend_from_slice(&seed[1..]);
            blake3::hash(
                &words
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .collect::<Vec<u8>>(),
            )
            .to_hex()
            .to_string()
        })
        .collect()
}

/// A workspace holding a copy of the store of `ws` (closed), bound to
/// the new workspace, so checkpoints and tracking work there.
fn copy_of_store(ws: &Path) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(ws.join(".cairn"))
        .arg(d.path())
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {}", ws.display());
    cairn::Store::builder()
        .workspace(d.path())
        .rebind_workspace(true)
        .open()
        .unwrap()
        .close()
        .unwrap();
    d
}

/// Appends [`store_of_segments`]'s records to `s`.
fn fill_segments(s: &cairn::Store) {
    let mut batch = Vec::new();
    for i in 0..32_000u64 {
        let session = if i < 5 {
            "rare".to_string()
        } else {
            format!("s{}", i % 8)
        };
        let mut e = cairn::Event::new(cairn::EventKind::Prompt, session);
        e.text = Some(hex_text(&[i]));
        batch.push(e);
        if batch.len() == 100 {
            s.append_batch(&std::mem::take(&mut batch)).unwrap();
        }
    }
    s.append_batch(&batch).unwrap();
}

/// Every record of `f` on `store`, in its order.
fn lsns(store: &cairn::Store, f: &cairn::Filter) -> Vec<u64> {
    let mut out = Vec::new();
    store
        .scan(f, &mut |r| {
            out.push(r.lsn.0);
            Ok(true)
        })
        .unwrap();
    out
}

/// `log --session rare --limit 5`, newest first: the session is in the
/// first segment only, so each later one must be ruled out.
fn rare() -> cairn::Filter {
    cairn::Filter {
        session: Some("rare".into()),
        newest_first: true,
        limit: Some(5),
        ..cairn::Filter::all()
    }
}

/// Fails unless what `vfs` has fetched so far, for `what`, is less than a
/// `share`th of a log of `log_bytes` (naming the bytes and requests).
fn assert_read_under(vfs: &ArchiveVfs, what: &str, log_bytes: u64, share: u64) {
    let read = vfs.archive().bytes_read();
    assert!(
        read * share < log_bytes,
        "{what} read {read} bytes in {} requests, of {log_bytes} bytes of log",
        vfs.archive().gets()
    );
}

/// The archive `arch` opened in place with its cache in `cache`, bounded
/// to one byte (nothing kept: every read is a fetch the archive counts),
/// and a read-only store over it.
fn in_place(arch: &Path, cache: &Path) -> (ArchiveVfs, cairn::Store) {
    let vfs = uncached(arch, cache);
    let store = vfs.open_store().unwrap();
    (vfs, store)
}

/// The archive `arch` opened in place with its cache in `cache`, bounded
/// to one byte, as [`in_place`] opens it.
fn uncached(arch: &Path, cache: &Path) -> ArchiveVfs {
    let a = Archive::open(&url(arch)).unwrap();
    let opts = InPlaceOptions::default().cache_dir(cache).cache_bytes(1);
    ArchiveVfs::open(a, &opts).unwrap()
}

/// [`uncached`] with a cache directory of its own (kept while the
/// returned guard lives), so each call starts with nothing fetched.
fn uncached_fresh(arch: &Path) -> (ArchiveVfs, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    (uncached(arch, cache.path()), cache)
}

/// The bytes of the log files (segments, their sparse indexes, the
/// tail's pieces) a manifest names.
fn log_bytes(m: &cairn::replicate::Manifest) -> u64 {
    m.files
        .iter()
        .filter(|f| f.path.starts_with("log/"))
        .map(|f| f.len)
        .sum()
}

/// Replicates the store of `ws` once to the archive `arch`.
fn replicate_once(ws: &Path, arch: &Path) {
    let a = Archive::open(&url(arch)).unwrap();
    let mut r = cairn::replicate::Replicator::new(a, ws.join(".cairn")).unwrap();
    r.round().unwrap();
}

/// The newest manifest of `arch`: its name and contents.
fn newest(arch: &Path) -> (String, cairn::replicate::Manifest) {
    let a = Archive::open(&url(arch)).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let vfs = ArchiveVfs::open(a, &InPlaceOptions::default().cache_dir(cache.path())).unwrap();
    let name = vfs.manifest().to_string();
    let b = std::fs::read(arch.join(&name)).unwrap();
    let m = cairn::replicate::Manifest::decode(&name, &b).unwrap();
    (name, m)
}

/// The sealed segments' query index files are shipped, and a session
/// query in place reads them, the segments' headers and footers, and only
/// the segment that holds the answer: a part of the log, where without
/// them it built each segment's index from the segment, fetching the
/// whole log. It answers as the local store.
#[test]
fn a_session_query_in_place_reads_the_index_files_not_the_log() {
    let (d, sealed) = store_of_segments();
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    let (_, m) = newest(arch.path());
    let qix: Vec<_> = m
        .files
        .iter()
        .filter(|f| f.path.starts_with("index/segments/") && f.path.ends_with(".qix"))
        .collect();
    assert_eq!(qix.len() as u64, sealed, "{:?}", m.files);
    assert_eq!(m.version, cairn::replicate::MANIFEST_VERSION);
    let log_bytes = log_bytes(&m);

    let local = read_only(ws);
    let want = lsns(&local, &rare());
    assert_eq!(want, vec![5, 4, 3, 2, 1]);

    let cache = tempfile::tempdir().unwrap();
    let (vfs, store) = in_place(arch.path(), cache.path());
    assert_eq!(lsns(&store, &rare()), want);
    assert_read_under(&vfs, "the query", log_bytes, 2);

    // A restore brings the files along, and its store uses them.
    let back = tempfile::tempdir().unwrap();
    let a = Archive::open(&url(arch.path())).unwrap();
    cairn::replicate::restore(&a, back.path(), None).unwrap();
    let segs = back.path().join(".cairn/index/segments");
    assert_eq!(std::fs::read_dir(&segs).unwrap().count() as u64, sealed);
    // The restored store of many sealed segments is the original, record
    // for record (sealed segments once went without their footers, and
    // such an archive could not be restored).
    let original = ok(&cairn(ws, &["export"]));
    assert_eq!(ok(&cairn(back.path(), &["export"])), original);
    assert_eq!(original.lines().count(), 32_000);
}

/// `log --newest-first --limit 5` in place, with no other condition,
/// reads the records at the log's end, not the log: no index narrows it,
/// so it is answered without the query index, which a store in place
/// would otherwise build by reading every segment (`index/query.idx` is
/// not shipped). Through the library and the command line alike, as the
/// local store answers.
#[test]
fn the_newest_records_in_place_are_read_without_the_whole_log() {
    let (d, _) = store_of_segments();
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    let (_, m) = newest(arch.path());
    let log_bytes = log_bytes(&m);
    let newest5 = cairn::Filter {
        newest_first: true,
        limit: Some(5),
        ..cairn::Filter::all()
    };
    let local = read_only(ws);
    let want = lsns(&local, &newest5);
    assert_eq!(want, vec![32_000, 31_999, 31_998, 31_997, 31_996]);

    let cache = tempfile::tempdir().unwrap();
    let (vfs, store) = in_place(arch.path(), cache.path());
    assert_eq!(lsns(&store, &newest5), want);
    assert_read_under(&vfs, "the query", log_bytes, 2);

    let u = url(arch.path());
    let local_json = ok(&cairn(
        ws,
        &["log", "--newest-first", "--limit", "5", "--json"],
    ));
    let in_place = ok(&cairn(
        ws,
        &[
            "--store",
            &u,
            "--cache-bytes",
            "1",
            "log",
            "--newest-first",
            "--limit",
            "5",
            "--json",
        ],
    ));
    assert_eq!(in_place, local_json);
}

/// A store whose sealed segments have no query index file (deleted, or
/// written by a cairn that kept none) is shipped with them all the same:
/// the replicator builds each from its segment, in memory (the store is
/// not written), byte for byte the file a query writes, and sends each
/// once. A session query in place then reads those files and the one
/// segment holding the answer by range: less than one segment, where
/// without them it built each segment's index from the segment, fetching
/// the whole log.
#[test]
fn index_files_missing_from_the_store_are_built_and_shipped() {
    let (d, sealed) = store_of_segments();
    let ws = d.path();
    let segs = ws.join(".cairn/index/segments");
    // The index files proper; the key summary beside them is not shipped.
    let mut want_files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&segs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "qix"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (format!("index/segments/{name}"), std::fs::read(&p).unwrap())
        })
        .collect();
    want_files.sort();
    assert_eq!(want_files.len() as u64, sealed);
    std::fs::remove_dir_all(&segs).unwrap();

    let arch = tempfile::tempdir().unwrap();
    let a = Archive::open(&url(arch.path())).unwrap();
    let mut r = cairn::replicate::Replicator::new(a, ws.join(".cairn")).unwrap();
    let first = r.round().unwrap();
    assert_eq!(first.seg_indexes_built, sealed, "{first:?}");
    assert!(!segs.exists(), "the replicator wrote into the store");
    let (_, m) = newest(arch.path());
    let a = Archive::open(&url(arch.path())).unwrap();
    let mut got: Vec<(String, Vec<u8>)> = m
        .files
        .iter()
        .filter(|f| f.path.ends_with(".qix"))
        .map(|f| {
            let mut b = Vec::new();
            for p in &f.pieces {
                b.extend(
                    a.get(&cairn::replicate::object_name(&p.hash))
                        .unwrap()
                        .unwrap(),
                );
            }
            (f.path.clone(), b)
        })
        .collect();
    got.sort();
    assert_eq!(got.len(), want_files.len(), "{:?}", m.files);
    assert!(got == want_files, "the built files differ from the store's");
    // The next round builds nothing new to send, and a new replicator
    // takes the built files over from the archive instead of building
    // them again.
    let again = r.round().unwrap();
    assert_eq!(again.objects_uploaded, 0, "{again:?}");
    drop(r);
    let a = Archive::open(&url(arch.path())).unwrap();
    let mut r = cairn::replicate::Replicator::new(a, ws.join(".cairn")).unwrap();
    let next = r.round().unwrap();
    assert_eq!(
        (next.objects_uploaded, next.seg_indexes_built),
        (0, 0),
        "{next:?}"
    );
    drop(r);

    let seg_len = m
        .files
        .iter()
        .find(|f| f.path.ends_with(".seg"))
        .map(|f| f.len)
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (vfs, store) = in_place(arch.path(), cache.path());
    assert_eq!(lsns(&store, &rare()), vec![5, 4, 3, 2, 1]);
    let read = vfs.archive().bytes_read();
    assert!(
        read < seg_len,
        "log --session rare read {read} bytes in {} requests; one segment is {seg_len}",
        vfs.archive().gets()
    );
    // The same answer from the command line.
    let u = url(arch.path());
    let elsewhere = tempfile::tempdir().unwrap();
    let args = ["log", "--json", "--session", "rare", "--limit", "5"];
    let mut a = vec!["--store", u.as_str()];
    a.extend_from_slice(&args);
    let remote = cairn_cached(elsewhere.path(), cache.path(), &a);
    assert_eq!(remote.status.code(), Some(0), "{}", err(&remote));
    assert_eq!(
        String::from_utf8_lossy(&remote.stdout),
        ok(&cairn(ws, &args))
    );
}

/// An index file in the archive is checked as on a local store: one
/// whose bytes were altered (its piece no longer hashes to its name), or
/// one a manifest names for the wrong segment (a stale or swapped file,
/// whole and well-formed), is never used; the query in place builds that
/// segment's index from the log and answers as the local store.
#[test]
fn a_damaged_or_stale_index_file_in_the_archive_is_never_trusted() {
    let (d, _) = store_of_segments();
    let ws = d.path();
    let local = read_only(ws);
    let filters = [
        rare(),
        cairn::Filter {
            session: Some("s3".into()),
            limit: Some(7),
            ..cairn::Filter::all()
        },
    ];
    let want: Vec<Vec<u64>> = filters.iter().map(|f| lsns(&local, f)).collect();
    let answers = |arch: &Path| -> Vec<Vec<u64>> {
        let cache = tempfile::tempdir().unwrap();
        let a = Archive::open(&url(arch)).unwrap();
        let opts = InPlaceOptions::default().cache_dir(cache.path());
        let store = ArchiveVfs::open(a, &opts).unwrap().open_store().unwrap();
        filters.iter().map(|f| lsns(&store, f)).collect()
    };

    // Every index file's piece altered, same length.
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    let (_, m) = newest(arch.path());
    for f in m.files.iter().filter(|f| f.path.starts_with("index/")) {
        let obj = arch.path().join("objects").join(&f.pieces[0].hash);
        let mut b = std::fs::read(&obj).unwrap();
        let at = b.len() / 2;
        b[at] ^= 0x10;
        std::fs::write(&obj, &b).unwrap();
    }
    assert_eq!(answers(arch.path()), want, "altered index files");

    // Each index file named as the next segment's (the last as the
    // first's): whole files, each for the wrong segment.
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    let (name, mut m) = newest(arch.path());
    let at: Vec<usize> = (0..m.files.len())
        .filter(|&i| m.files[i].path.starts_with("index/"))
        .collect();
    assert!(at.len() >= 2);
    let contents: Vec<_> = at.iter().map(|&i| m.files[i].clone()).collect();
    for (k, &i) in at.iter().enumerate() {
        let from = &contents[(k + 1) % contents.len()];
        m.files[i].len = from.len;
        m.files[i].pieces = from.pieces.clone();
    }
    std::fs::write(arch.path().join(&name), m.encode()).unwrap();
    assert_eq!(answers(arch.path()), want, "swapped index files");
}

/// Sealed segments are read by range in place: each sealed segment's
/// sparse index file (`log/<first LSN>.idx`) is shipped with it, and a
/// session query (`log --session rare --limit 5`) and a `show` of a file
/// whose last change is in the first segment fetch the index files, each
/// segment's header and footer (a 16 KiB page each) and the pages of the
/// frames they read: a small part of the log, where before each segment
/// holding an answer was fetched whole. They answer as the local store.
/// A frame damaged in the archive is named (the segment, the offset),
/// never returned as good: a range of a large piece is checked by the
/// frame's CRC.
#[test]
fn a_query_and_a_show_in_place_read_frames_by_range_not_whole_segments() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    std::fs::write(ws.join("a.txt"), "kept in the first segment\n").unwrap();
    let s = open_segmented(ws);
    let cp = s.session("rare").checkpoint("one").unwrap();
    fill_segments(&s);
    let sealed = s.stats().log.sealed_segments;
    s.close().unwrap();
    assert!(sealed >= 5, "{sealed} sealed segments");
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    let (_, m) = newest(arch.path());
    let idx = m
        .files
        .iter()
        .filter(|f| f.path.starts_with("log/") && f.path.ends_with(".idx"))
        .count();
    assert_eq!(idx as u64, sealed, "a sparse index file per sealed segment");
    let log_bytes: u64 = m
        .files
        .iter()
        .filter(|f| f.path.ends_with(".seg"))
        .map(|f| f.len)
        .sum();
    // The tail is not read whole at open (the manifest carries its
    // state), so the bound is on the whole log, the tail with it.

    let local = read_only(ws);
    let want = lsns(&local, &rare());
    assert_eq!(want.len(), 5);
    let u = url(arch.path());
    let open = || uncached_fresh(arch.path());

    // `log --session rare --limit 5`.
    let (vfs, _c) = open();
    let store = vfs.open_store().unwrap();
    assert_eq!(lsns(&store, &rare()), want);
    assert_read_under(&vfs, "log --session", log_bytes, 16);

    // `show head:a.txt`: its last change is the checkpoint in the first
    // segment.
    let (vfs, _c) = open();
    let store = vfs.open_store().unwrap();
    let entry = store.cold_entry_at(cairn::Point::Head, "a.txt").unwrap();
    assert_eq!(
        store.blob(&entry.blob).unwrap(),
        b"kept in the first segment\n"
    );
    assert_read_under(&vfs, "show", log_bytes, 16);

    // The same answers from the command line.
    let cache = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    for args in [
        &["log", "--json", "--session", "rare", "--limit", "5"][..],
        &["show", "head:a.txt"],
    ] {
        let mut a = vec!["--store", u.as_str()];
        a.extend_from_slice(args);
        let remote = cairn_cached(elsewhere.path(), cache.path(), &a);
        assert_eq!(remote.status.code(), Some(0), "{args:?}: {}", err(&remote));
        assert_eq!(
            String::from_utf8_lossy(&remote.stdout),
            ok(&cairn(ws, args)),
            "{args:?}"
        );
    }

    // A byte of the checkpoint's frame altered in the archive: the ranged
    // read of it is not taken for good data; the error names the segment.
    assert_eq!(cp.id.0 .0, 1, "the checkpoint is the first frame");
    let obj = object_of(arch.path(), "log/00000000000000000001.seg", 0);
    let mut b = std::fs::read(&obj).unwrap();
    assert!(b.len() as u64 > cairn::replicate::RANGE_CHUNK_BYTES);
    let at = 64 + 40;
    b[at] ^= 0x20;
    std::fs::write(&obj, &b).unwrap();
    let (vfs, _c) = open();
    let store = vfs.open_store().unwrap();
    let e = store.record(cp.id.0).unwrap_err().to_string();
    assert!(
        e.contains("00000000000000000001.seg"),
        "the damage is named: {e}"
    );
}

/// `tree`, `diff` and `blame` in place read the per-segment index files,
/// the last checkpoint's manifest and the few file records after it, not
/// the log: a store whose files were captured in its first segment, then
/// segments of prompts, then a write of one file and a checkpoint
/// finding another. Each answer fetches less than a tenth of the log, and
/// the command line in place prints what it prints on the local store.
#[test]
fn tree_diff_and_blame_in_place_fetch_less_than_the_log() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("b.txt"), "kept\n").unwrap();
    let s = open_segmented(ws);
    let first = s.session("rare").checkpoint("one").unwrap();
    fill_segments(&s);
    let sess = s.session("late");
    sess.write_file("a.txt", b"one\ntwo\nthree\n").unwrap();
    std::fs::write(ws.join("c.txt"), "found by the checkpoint\n").unwrap();
    sess.checkpoint("two").unwrap();
    sess.write_file("b.txt", b"kept\nand changed\n").unwrap();
    let sealed = s.stats().log.sealed_segments;
    s.close().unwrap();
    assert!(sealed >= 5, "{sealed} sealed segments");
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    let (_, m) = newest(arch.path());
    let log_bytes = log_bytes(&m);
    let c1 = format!("c{}", first.id.0 .0);
    let u = url(arch.path());
    let open = || uncached_fresh(arch.path());
    let local = read_only(ws);
    let want_tree = local.query(|q| q.tree_at(cairn::Point::Head)).unwrap();
    assert_eq!(want_tree.len(), 3, "{want_tree:?}");

    let (vfs, _c) = open();
    let store = vfs.open_store().unwrap();
    let t = store
        .cold_tree(cairn::Point::Head)
        .expect("answered from the files");
    assert_eq!(t.tree, want_tree);
    assert_read_under(&vfs, "tree", log_bytes, 10);

    let (vfs, _c) = open();
    let store = vfs.open_store().unwrap();
    let c1p: cairn::Point = c1.parse().unwrap();
    let got = store
        .cold_diff(c1p, cairn::Point::Head, &[])
        .expect("answered from the files");
    let want = local
        .query(|q| q.diff(c1p, cairn::Point::Head, &[]))
        .unwrap();
    assert_eq!(got.diffs, want);
    assert_eq!(got.diffs.len(), 3, "{:?}", got.diffs);
    assert_read_under(&vfs, "diff", log_bytes, 10);

    let (vfs, _c) = open();
    let store = vfs.open_store().unwrap();
    let (_, lines) = store
        .cold_blame(cairn::Point::Head, "a.txt")
        .expect("answered from the files");
    assert_eq!(
        lines,
        local
            .query(|q| q.blame(cairn::Point::Head, "a.txt"))
            .unwrap()
    );
    assert_eq!(lines.len(), 3);
    assert_read_under(&vfs, "blame", log_bytes, 10);

    // The command line in place prints what it prints on the store.
    let cache = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    for args in [
        &["tree", "head"][..],
        &["tree", &c1, "--json"],
        &["diff", &c1, "head"],
        &["diff", "head", &c1, "--json", "--", "a.txt"],
        &["blame", "head", "a.txt"],
    ] {
        let mut a = vec!["--store", u.as_str()];
        a.extend_from_slice(args);
        let remote = cairn_cached(elsewhere.path(), cache.path(), &a);
        assert_eq!(remote.status.code(), Some(0), "{args:?}: {}", err(&remote));
        assert_eq!(
            String::from_utf8_lossy(&remote.stdout),
            ok(&cairn(ws, args)),
            "{args:?}"
        );
    }
}

/// The unsealed last segment of a manifest: its entry.
fn tail_entry(m: &cairn::replicate::Manifest) -> cairn::replicate::FileEntry {
    m.files
        .iter()
        .filter(|f| f.path.ends_with(".seg"))
        .max_by(|a, b| a.path.cmp(&b.path))
        .cloned()
        .unwrap()
}

/// Writes `m` over the manifest `name` of `arch` (framed and checksummed
/// as the replicator writes it): what a manifest altered in the bucket,
/// or written by an older cairn, looks like to a reader.
fn rewrite_manifest(arch: &Path, name: &str, m: &cairn::replicate::Manifest) {
    std::fs::write(arch.join(name), m.encode()).unwrap();
}

/// Prompts `n` of session `who`, 1,600 hex digits of text each (which do
/// not compress).
fn incompressible_prompts(who: &str, n: std::ops::Range<u64>) -> Vec<cairn::Event> {
    n.map(|i| {
        let mut e = cairn::Event::new(cairn::EventKind::Prompt, who);
        e.text = Some(hex_text(&[i, 7]));
        e
    })
    .collect()
}

/// Appends records `n` (session `late`, 1,600 hex digits of text each,
/// which do not compress) to the store of `ws`, opened with the default
/// segment size: [`store_of_segments`]'s tail grows past 4 MiB, so what a
/// query in place fetches of it is measured against a tail of some size.
fn grow_tail(ws: &Path, n: std::ops::Range<u64>) {
    let s = cairn::Store::builder().workspace(ws).open().unwrap();
    let batch = incompressible_prompts("late", n);
    s.append_batch(&batch).unwrap();
    s.close().unwrap();
}

/// `log --session rare --limit 5` (oldest first: the first segment
/// answers it) and the five newest records (read from the tail's end).
fn small_queries() -> [cairn::Filter; 2] {
    [
        cairn::Filter {
            newest_first: false,
            ..rare()
        },
        cairn::Filter {
            newest_first: true,
            limit: Some(5),
            ..cairn::Filter::all()
        },
    ]
}

/// Small queries in place open the log's unsealed tail from the state the
/// manifest carries (version 3, `tail_state`), as a local store opens it
/// from `tail.state`: the tail is not read whole, only the ranges a query
/// touches, so each query fetches well under the tail's size, where it
/// once fetched the whole tail at open. A second round after more records
/// carries the state on (the replicator's walk resumes, its index with
/// it), and is trusted the same way. Answers are the local store's, and
/// a restore of the archive is the original, record for record.
#[test]
fn a_small_query_in_place_reads_the_tail_by_range_not_whole() {
    let (d, _) = store_of_segments();
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    // More records in the tail, replicated by a second round of the same
    // replicator (a walk resumed from where the first stopped).
    let a = Archive::open(&url(arch.path())).unwrap();
    let mut r = cairn::replicate::Replicator::new(a, ws.join(".cairn")).unwrap();
    r.round().unwrap();
    grow_tail(ws, 0..4_000);
    r.round().unwrap();
    let (_, m) = newest(arch.path());
    assert_eq!(m.version, cairn::replicate::MANIFEST_VERSION);
    assert!(
        m.tail_state.is_some(),
        "the manifest carries the tail's state"
    );
    let tail = tail_entry(&m).len;
    assert!(tail > 4 << 20, "a tail of {tail} bytes");

    let local = read_only(ws);
    for f in small_queries() {
        let want = lsns(&local, &f);
        assert_eq!(want.len(), 5);
        let (vfs, _c) = uncached_fresh(arch.path());
        let store = vfs.open_store().unwrap();
        assert_eq!(lsns(&store, &f), want, "{f:?}");
        let read = vfs.archive().bytes_read();
        assert!(
            read * 4 < tail,
            "{f:?} read {read} bytes in {} requests, the tail is {tail}",
            vfs.archive().gets()
        );
        assert_eq!(store.head(), local.head());
    }

    // The command line in place answers as the store.
    let u = url(arch.path());
    let elsewhere = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let args = ["log", "--json", "--newest-first", "--limit", "5"];
    let mut a = vec!["--store", u.as_str()];
    a.extend_from_slice(&args);
    assert_eq!(
        ok(&cairn_cached(elsewhere.path(), cache.path(), &a)),
        ok(&cairn(ws, &args))
    );

    // A restore is the original, record for record (the state is not a
    // file of the archive: restore writes the files, and the store it
    // opens to check them reads its tail as any open does).
    let back = tempfile::tempdir().unwrap();
    let a = Archive::open(&url(arch.path())).unwrap();
    cairn::replicate::restore(&a, back.path(), None).unwrap();
    assert_eq!(
        ok(&cairn(back.path(), &["export"])),
        ok(&cairn(ws, &["export"]))
    );
}

/// A manifest whose tail state does not describe the tail it names (its
/// length, last frame's offset, LSN or chain, or the segment altered, each
/// re-encoded whole so that only the match can refuse it; or the state of
/// an earlier round, when the tail was shorter) is not trusted:
/// the tail is read whole, as before the state was carried, and every
/// answer is the local store's, never a wrong one. A manifest of version 2
/// (an older cairn: no state) reads the same way.
#[test]
fn a_tail_state_that_does_not_match_the_tail_is_never_trusted() {
    let (d, _) = store_of_segments();
    let ws = d.path();
    grow_tail(ws, 0..4_000);
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    // The state of an earlier round, for a tail that has grown since.
    let (_, earlier) = newest(arch.path());
    grow_tail(ws, 4_000..4_050);
    replicate_once(ws, arch.path());
    let (name, m) = newest(arch.path());
    let tail = tail_entry(&m).len;
    assert!(tail > 4 << 20, "a tail of {tail} bytes");
    assert!(tail > tail_entry(&earlier).len);
    let state = cairn_engine::log::TailState::decode(&m.tail_state_bytes().unwrap()).unwrap();
    assert_eq!(state.valid_len, tail);
    let entries = state.index_entries().to_vec();
    let second_off = entries[1].1;
    let local = read_only(ws);
    let want: Vec<Vec<u64>> = small_queries().iter().map(|f| lsns(&local, f)).collect();
    let at = |first: u64, len: u64, last: Option<(u64, u64)>, chain: [u8; 32]| {
        cairn_engine::log::TailState::new(
            cairn::Lsn(first),
            len,
            last.map(|(l, o)| (cairn::Lsn(l), o)),
            cairn::ChainHash(chain),
            entries.clone(),
        )
    };
    let (first, last, off, chain) = (
        state.first_lsn.0,
        state.last_lsn.0,
        state.last_frame_off,
        state.chain.0,
    );
    let mut other_chain = chain;
    other_chain[0] ^= 1;
    let altered = [
        ("the length", at(first, tail - 1, Some((last, off)), chain)),
        (
            "the last LSN",
            at(first, tail, Some((last - 1, off)), chain),
        ),
        ("the chain", at(first, tail, Some((last, off)), other_chain)),
        (
            "the last frame's offset",
            at(first, tail, Some((last, second_off)), chain),
        ),
        ("the segment", at(first + 1, tail, Some((last, off)), chain)),
    ];
    let mut cases: Vec<(String, cairn::replicate::Manifest)> = altered
        .into_iter()
        .map(|(what, st)| {
            let mut m = m.clone();
            m.set_tail_state(Some(&st.encode()));
            (format!("altered {what}"), m)
        })
        .collect();
    let mut stale = m.clone();
    stale.tail_state = earlier.tail_state.clone();
    cases.push(("the state of an earlier round".into(), stale));
    let mut old = m.clone();
    old.version = 2;
    old.set_tail_state(None);
    cases.push(("a version 2 manifest".into(), old));
    for (what, altered) in cases {
        rewrite_manifest(arch.path(), &name, &altered);
        for (f, want) in small_queries().iter().zip(&want) {
            let (vfs, _c) = uncached_fresh(arch.path());
            let store = vfs.open_store().unwrap();
            assert_eq!(&lsns(&store, f), want, "{what}: {f:?}");
            assert_eq!(store.head(), local.head(), "{what}");
            let read = vfs.archive().bytes_read();
            assert!(
                read >= tail,
                "{what}: read {read}, the tail is whole read ({tail})"
            );
        }
    }
    // Facts that match but index entries that point inside frames: the
    // state is taken, and a read through such an entry is an error naming
    // the tail segment, never a record.
    let shifted: Vec<_> = entries
        .iter()
        .enumerate()
        .map(|(i, &(l, o))| (l, if i == 0 { o } else { o + 1 }))
        .collect();
    let st = cairn_engine::log::TailState::new(
        cairn::Lsn(first),
        tail,
        Some((cairn::Lsn(last), off)),
        cairn::ChainHash(chain),
        shifted,
    );
    let mut bad = m.clone();
    bad.set_tail_state(Some(&st.encode()));
    rewrite_manifest(arch.path(), &name, &bad);
    let (vfs, _c) = uncached_fresh(arch.path());
    let store = vfs.open_store().unwrap();
    let mut got = Vec::new();
    let r = store.scan(&small_queries()[1], &mut |r| {
        got.push(r.lsn.0);
        Ok(true)
    });
    let e = r.unwrap_err().to_string();
    assert!(e.contains(&tail_entry(&m).path[4..]), "{e}");
    assert!(got.iter().all(|l| want[1].contains(l)), "{got:?}");

    // The manifest as written: trusted again.
    rewrite_manifest(arch.path(), &name, &m);
    let (vfs, _c) = uncached_fresh(arch.path());
    let store = vfs.open_store().unwrap();
    assert_eq!(lsns(&store, &small_queries()[1]), want[1]);
    assert!(vfs.archive().bytes_read() * 4 < tail);
}

/// The records the tail grows by before the replicators of the tail
/// index tests ship a new index of it: under the tails they grow (8,000
/// records), where the default (`TAIL_INDEX_EVERY_RECORDS`) is over them.
const TAIL_INDEX_EVERY: u64 = 4096;

/// The parts of the tail's query index `m` lists (version 5), in order.
fn parts(m: &cairn::replicate::Manifest) -> Vec<cairn::replicate::FileEntry> {
    m.tail_index_parts().into_iter().cloned().collect()
}

/// `m` with `parts` as the parts of its tail's query index instead of
/// its own.
fn with_parts(
    m: &cairn::replicate::Manifest,
    parts: Vec<cairn::replicate::FileEntry>,
) -> cairn::replicate::Manifest {
    let mut out = m.clone();
    out.files.retain(|f| !m.is_tail_index_part(&f.path));
    out.files.extend(parts);
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Appends records `n` of session `who` (as [`grow_tail`]'s) and, after
/// them, a checkpoint of that session labelled `label`, to the store of
/// `ws`.
fn grow_tail_with_checkpoint(ws: &Path, who: &str, n: std::ops::Range<u64>, label: &str) {
    let s = cairn::Store::builder().workspace(ws).open().unwrap();
    let batch = incompressible_prompts(who, n);
    s.append_batch(&batch).unwrap();
    s.session(who).checkpoint(label).unwrap();
    s.close().unwrap();
}

/// What the filtered queries that reach the tail answer on `store`:
/// session `late`'s checkpoints (as `cairn checkpoints --session late`
/// lists them), its five oldest records, and its checkpoint records.
fn tail_answers(store: &cairn::Store) -> (Vec<String>, Vec<u64>, Vec<u64>) {
    let listing = store.checkpoint_listing(Some("late")).unwrap();
    let ids = listing
        .checkpoints
        .iter()
        .map(|c| c.id.to_string())
        .collect();
    let oldest = cairn::Filter {
        session: Some("late".into()),
        newest_first: false,
        limit: Some(5),
        ..cairn::Filter::all()
    };
    let creates = cairn::Filter {
        session: Some("late".into()),
        kind: Some(cairn::EventKind::CheckpointCreate),
        ..cairn::Filter::all()
    };
    (ids, lsns(store, &oldest), lsns(store, &creates))
}

/// Fails unless [`tail_answers`] in place on `arch` (a cache of its own,
/// nothing fetched before) are `want` and fetch less than a quarter of
/// the tail of `tail` bytes (`trusted`), or at least the tail (the tail's
/// index not trusted: its records are read whole to index them).
fn assert_tail_answers(
    arch: &Path,
    want: &(Vec<String>, Vec<u64>, Vec<u64>),
    tail: u64,
    trusted: bool,
    what: &str,
) {
    let (vfs, _c) = uncached_fresh(arch);
    let store = vfs.open_store().unwrap();
    assert_eq!(&tail_answers(&store), want, "{what}");
    let read = vfs.archive().bytes_read();
    if trusted {
        assert!(
            read * 4 < tail,
            "{what}: read {read} bytes in {} requests, the tail is {tail}",
            vfs.archive().gets()
        );
    } else {
        assert!(
            read >= tail,
            "{what}: read {read}, the tail is whole read ({tail})"
        );
    }
}

/// Filtered queries whose filter reaches the unsealed tail (a session's
/// checkpoints, its records, its checkpoint records) read in place the
/// parts of the tail's query index the manifest lists (version 5, in
/// `files`), each built by the replicator in memory once the tail has
/// grown by [`TAIL_INDEX_EVERY`] records past the last, and index in
/// memory only the records after them: each fetches well under the
/// tail's size, where it once read the whole tail to index it. A round
/// with fewer new records names the same parts again (the records after
/// them read by range); a new replicator (a restart) takes them over and
/// ships the next part, of the records after them only, so the archive
/// holds each record's postings once. Answers are the local store's, in
/// the library and on the command line.
#[test]
fn a_filtered_query_in_place_reads_the_tail_index_not_the_tail_whole() {
    let (d, _) = store_of_segments();
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    let a = Archive::open(&url(arch.path())).unwrap();
    let mut r = cairn::replicate::Replicator::new(a, ws.join(".cairn"))
        .unwrap()
        .tail_index_every(TAIL_INDEX_EVERY);
    r.round().unwrap();
    grow_tail_with_checkpoint(ws, "late", 0..8_000, "early");
    grow_tail_with_checkpoint(ws, "late", 8_000..8_200, "mid");
    let built = r.round().unwrap();
    assert_eq!(built.tail_indexes_built, 1, "{built:?}");
    let (_, m2) = newest(arch.path());
    assert_eq!(m2.version, cairn::replicate::MANIFEST_VERSION);
    assert!(m2.tail_index.is_none());
    let ix2 = parts(&m2);
    assert_eq!(ix2.len(), 1, "{ix2:?}");
    let tail_first = tail_entry(&m2).path[4..24].to_string();
    assert_eq!(ix2[0].path, format!("index/segments/{tail_first}.qix"));

    // Fewer new records than the bound: the same file, the records after
    // it indexed in memory by the reader.
    grow_tail_with_checkpoint(ws, "late", 8_200..8_300, "late");
    let carried = r.round().unwrap();
    assert_eq!(carried.tail_indexes_built, 0, "{carried:?}");
    let (_, m3) = newest(arch.path());
    assert!(m3.head_lsn > m2.head_lsn);
    assert_eq!(parts(&m3), ix2);
    let tail = tail_entry(&m3).len;
    assert!(tail > 6 << 20, "a tail of {tail} bytes");

    let local = read_only(ws);
    let want = tail_answers(&local);
    assert_eq!(want.0.len(), 3, "{want:?}");
    assert_eq!(want.1.len(), 5);
    assert_eq!(want.2.len(), 3);
    assert_tail_answers(arch.path(), &want, tail, true, "the carried index");

    // The command line in place answers as the store.
    let u = url(arch.path());
    let elsewhere = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    for args in [
        &["checkpoints", "--session", "late", "--json"][..],
        &["log", "--json", "--session", "late", "--limit", "5"][..],
    ] {
        let mut a = vec!["--store", u.as_str()];
        a.extend_from_slice(args);
        assert_eq!(
            ok(&cairn_cached(elsewhere.path(), cache.path(), &a)),
            ok(&cairn(ws, args)),
            "{args:?}"
        );
    }

    // A new replicator (a restart, or `replicate --once` run again) takes
    // the archive's index over while the tail has grown by less than the
    // bound, then builds its own from the tail and ships it.
    drop(r);
    grow_tail_with_checkpoint(ws, "late", 8_300..8_310, "after restart");
    let a = Archive::open(&url(arch.path())).unwrap();
    let mut r = cairn::replicate::Replicator::new(a, ws.join(".cairn"))
        .unwrap()
        .tail_index_every(TAIL_INDEX_EVERY);
    let adopted = r.round().unwrap();
    assert_eq!(adopted.tail_indexes_built, 0, "{adopted:?}");
    assert!(adopted.new_generation.is_none(), "{adopted:?}");
    let (_, m4) = newest(arch.path());
    assert!(m4.head_lsn > m3.head_lsn);
    assert_eq!(parts(&m4), parts(&m3));
    grow_tail_with_checkpoint(ws, "late", 8_310..12_500, "grown again");
    let rebuilt = r.round().unwrap();
    assert_eq!(rebuilt.tail_indexes_built, 1, "{rebuilt:?}");
    let (_, m5) = newest(arch.path());
    // The next part holds the records after the first only: named by
    // the LSN after the first part's end (its manifest's head).
    let ix5 = parts(&m5);
    assert_eq!(ix5.len(), 2, "{ix5:?}");
    assert_eq!(ix5[0], ix2[0]);
    assert_eq!(
        ix5[1].path,
        format!("index/segments/{:020}.qix", m2.head_lsn + 1)
    );
    assert_eq!(tail_entry(&m5).path, tail_entry(&m3).path, "one tail");
    // Each part is shipped with its front (header, key directory, key
    // bytes) as a piece of its own, so a reader in place fetches the
    // front whole and then a page of the postings, not the range around
    // both.
    for p in &ix5 {
        let front = p.pieces[0].len;
        assert!(p.pieces.len() >= 2, "{p:?}");
        assert!(
            (4096..64 << 10).contains(&front),
            "a front of {front}: {p:?}"
        );
    }
    let local = read_only(ws);
    let want = tail_answers(&local);
    assert_eq!(want.0.len(), 5, "{want:?}");
    assert_tail_answers(
        arch.path(),
        &want,
        tail_entry(&m5).len,
        true,
        "after a restart",
    );
}

/// A manifest whose tail index does not match the tail it names is never
/// trusted: an index of another segment (its first LSN not the tail's),
/// one that ends past the manifest's head (a later round's, on an earlier
/// manifest), and one of another log whose first LSN is the tail's but
/// whose chain value is not the record's (another store's tail: its
/// postings say nothing of session `late`, so trusting it would drop
/// records); nor a version 3 manifest (an older cairn: no tail index).
/// The tail's records are then read whole to index them, as before the
/// index was shipped, and every answer is the local store's. A later
/// part that does not match (another log's second part: the same LSNs,
/// another chain, postings without session `late`) ends the trusted
/// prefix there: the first part is used, the records after it are
/// indexed in memory, and the answers are the local store's.
#[test]
fn a_tail_index_that_does_not_match_the_tail_is_never_trusted() {
    let (d, _) = store_of_segments();
    let ws = d.path();
    let before = copy_of_store(ws);
    let arch = tempfile::tempdir().unwrap();
    let a = Archive::open(&url(arch.path())).unwrap();
    let mut r = cairn::replicate::Replicator::new(a, ws.join(".cairn"))
        .unwrap()
        .tail_index_every(TAIL_INDEX_EVERY);
    r.round().unwrap();
    let (_, m1) = newest(arch.path());
    grow_tail_with_checkpoint(ws, "late", 0..8_000, "early");
    let first_part = r.round().unwrap();
    assert_eq!(first_part.tail_indexes_built, 1);
    grow_tail_with_checkpoint(ws, "late", 8_000..8_100, "late");
    r.round().unwrap();
    drop(r);
    let (name, m) = newest(arch.path());
    let ix = parts(&m);
    assert_eq!(ix.len(), 1, "{ix:?}");
    let ix = ix[0].clone();
    let tail = tail_entry(&m).len;
    assert_eq!(tail_entry(&m1).path, tail_entry(&m).path, "one tail");
    let local = read_only(ws);
    let want = tail_answers(&local);
    assert_eq!(want.0.len(), 2, "{want:?}");
    assert_tail_answers(arch.path(), &want, tail, true, "the manifest as written");

    // Another store whose tail holds session `other`: a copy of this
    // one's sealed segments and tail as [`store_of_segments`] left them
    // (made again, its segments would roll where their frames' sizes
    // take them, which the log's dictionary, trained on a thread of its
    // own, moves from run to run), grown by other records. Its tail
    // index, its objects copied into this archive: the same first LSN,
    // another chain from there on.
    let d2 = copy_of_store(before.path());
    grow_tail_with_checkpoint(d2.path(), "other", 0..8_000, "early");
    let arch2 = tempfile::tempdir().unwrap();
    let a = Archive::open(&url(arch2.path())).unwrap();
    cairn::replicate::Replicator::new(a, d2.path().join(".cairn"))
        .unwrap()
        .tail_index_every(TAIL_INDEX_EVERY)
        .round()
        .unwrap();
    let (_, other) = newest(arch2.path());
    let other_ix = parts(&other)[0].clone();
    assert_eq!(other_ix.path, ix.path, "the same tail's first LSN");
    // Its log grown as this one was, then a second part of it (a
    // replicator shipping one every 50 records): the same LSNs, its first
    // LSN the one after this archive's first part, another chain.
    grow_tail_with_checkpoint(d2.path(), "other", 8_000..8_100, "late");
    let a = Archive::open(&url(arch2.path())).unwrap();
    let second = cairn::replicate::Replicator::new(a, d2.path().join(".cairn"))
        .unwrap()
        .tail_index_every(50)
        .round()
        .unwrap();
    assert_eq!(second.tail_indexes_built, 1, "{second:?}");
    assert_eq!(second.head_lsn, m.head_lsn, "the same LSNs");
    let (_, other2) = newest(arch2.path());
    let other_second = parts(&other2)[1].clone();
    assert_eq!(
        other_second.path,
        format!("index/segments/{:020}.qix", first_part.head_lsn + 1)
    );
    for p in other_ix.pieces.iter().chain(&other_second.pieces) {
        let obj = format!("objects/{}", p.hash);
        let to = arch.path().join(&obj);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(arch2.path().join(&obj), to).unwrap();
    }

    let sealed_ix = m
        .files
        .iter()
        .find(|f| f.path.ends_with(".qix"))
        .unwrap()
        .clone();
    let mut cases = Vec::new();
    let another_segment = with_parts(
        &m,
        vec![cairn::replicate::FileEntry {
            path: ix.path.clone(),
            ..sealed_ix
        }],
    );
    cases.push(("an index of another segment", another_segment, false));
    let past_head = with_parts(&m1, vec![ix.clone()]);
    cases.push(("an index past the manifest's head", past_head, false));
    let another_log = with_parts(&m, vec![other_ix.clone()]);
    cases.push(("an index of another log", another_log, false));
    let mut old = with_parts(&m, Vec::new());
    old.version = 3;
    cases.push(("a version 3 manifest", old, false));
    // A version 4 manifest's one file (an older cairn's archive) is read
    // as before.
    let mut v4 = with_parts(&m, Vec::new());
    v4.version = 4;
    v4.tail_index = Some(ix.clone());
    cases.push(("a version 4 manifest", v4, true));
    let bad_second = with_parts(&m, vec![ix.clone(), other_second]);
    cases.push(("a second part of another log", bad_second, true));
    for (what, altered, trusted) in cases {
        rewrite_manifest(arch.path(), &name, &altered);
        let want = if altered.head_lsn == m.head_lsn {
            want.clone()
        } else {
            // The earlier manifest: the answers at its head, from a
            // store restored from it.
            let back = tempfile::tempdir().unwrap();
            let mut plain = with_parts(&altered, Vec::new());
            plain.tail_index = None;
            rewrite_manifest(arch.path(), &name, &plain);
            let a = Archive::open(&url(arch.path())).unwrap();
            cairn::replicate::restore(&a, back.path(), None).unwrap();
            rewrite_manifest(arch.path(), &name, &altered);
            let s = cairn::Store::builder()
                .workspace(back.path())
                .read_only()
                .open()
                .unwrap();
            tail_answers(&s)
        };
        let tail = tail_entry(&altered).len;
        assert_tail_answers(arch.path(), &want, tail, trusted, what);
    }

    // The manifest as written: trusted again.
    rewrite_manifest(arch.path(), &name, &m);
    assert_tail_answers(arch.path(), &want, tail, true, "the manifest restored");
}

/// The path [`store_of_spread_records`] names on every page of its log.
const SPREAD: &str = "src/spread.rs";

/// A store of two sealed [`SEG_BYTES`] segments of prompts that do not
/// compress much, with a tool call naming [`SPREAD`] after every
/// `every`th: its records spread over the whole log; the tail holds
/// less than a batch of 100 records. Closed, so each sealed segment has
/// its index files. Gives the workspace.
fn store_of_spread_records(every: u64) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let s = open_segmented(d.path());
    let mut batch = Vec::new();
    for i in 0.. {
        let mut e = cairn::Event::new(cairn::EventKind::Prompt, format!("s{}", i % 8));
        e.text = Some(hex_text(&[i]));
        batch.push(e);
        if i % every == every - 1 {
            let mut t = cairn::Event::new(cairn::EventKind::ToolCall, "w");
            t.tool = Some("read".into());
            t.path = Some(SPREAD.into());
            t.text = Some(format!("read {i}"));
            batch.push(t);
        }
        if batch.len() >= 100 {
            s.append_batch(&std::mem::take(&mut batch)).unwrap();
            if s.stats().log.sealed_segments == 2 {
                break;
            }
        }
    }
    s.close().unwrap();
    d
}

/// The offset in the segment file `seg` of the frame of `lsn`, and its
/// whole length, found by walking the frames (52-byte headers: the body's
/// length at 0, the LSN at 12) from the 64-byte segment header.
fn frame_of(seg: &[u8], lsn: u64) -> (usize, usize) {
    let mut off = 64;
    loop {
        let body = u32::from_le_bytes(seg[off..off + 4].try_into().unwrap()) as usize;
        let at = u64::from_le_bytes(seg[off + 12..off + 20].try_into().unwrap());
        if at == lsn {
            return (off, 52 + body);
        }
        assert!(at < lsn, "no frame of LSN {lsn}");
        off += 52 + body;
    }
}

/// `history PATH` in place, for a path with a record on every 16 KiB page
/// of the log: the reader plans the sparse-index windows of the records
/// and the archive fetches just those, together (before, each page's read
/// fetched the page and then its whole chunk: the whole log). It fetches
/// under half the log, in requests in flight together, and answers as the
/// local store (the command line too). A byte altered inside a planned
/// window, in a record's frame, is reported as damage to that segment,
/// never handed out.
#[test]
fn a_history_in_place_of_a_path_on_every_page_fetches_its_windows_only() {
    let d = store_of_spread_records(15);
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    replicate_once(ws, arch.path());
    let (_, m) = newest(arch.path());
    let log_bytes = log_bytes(&m);
    let local = read_only(ws);
    let filter = cairn::Filter {
        path: Some(SPREAD.into()),
        ..cairn::Filter::all()
    };
    let want = lsns(&local, &filter);
    assert!(
        want.len() as u64 > log_bytes / cairn::replicate::RANGE_PAGE_BYTES,
        "{} records, fewer than the {log_bytes} bytes of log have pages",
        want.len()
    );

    let (vfs, _c) = uncached_fresh(arch.path());
    let store = vfs.open_store().unwrap();
    assert_eq!(lsns(&store, &filter), want);
    assert_read_under(&vfs, "history", log_bytes, 2);
    assert!(
        vfs.archive().largest_ranges_batch() > 1,
        "the windows are fetched together"
    );

    // The command line in place prints what it prints on the store (the
    // table's ages follow the clock; JSON byte for byte).
    let cache = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let u = url(arch.path());
    for args in [&["history", SPREAD][..], &["history", SPREAD, "--json"]] {
        let mut a = vec!["--store", u.as_str()];
        a.extend_from_slice(args);
        let remote = cairn_cached(elsewhere.path(), cache.path(), &a);
        assert_eq!(remote.status.code(), Some(0), "{args:?}: {}", err(&remote));
        let local = cairn(ws, args);
        ok(&local);
        assert_eq!(
            without_ages(&remote.stdout),
            without_ages(&local.stdout),
            "{args:?}"
        );
    }

    // A byte of the body of the path's first record altered in the
    // archive: the planned window holding it is fetched, and the frame's
    // check names the segment; no record after the damage is handed out.
    let seg = "log/00000000000000000001.seg";
    let (off, len) = frame_of(
        &std::fs::read(ws.join(".cairn").join(seg)).unwrap(),
        want[0],
    );
    let obj = object_of(arch.path(), seg, 0);
    let mut b = std::fs::read(&obj).unwrap();
    b[off + len - 3] ^= 0x20;
    std::fs::write(&obj, &b).unwrap();
    let (vfs, _c) = uncached_fresh(arch.path());
    let store = vfs.open_store().unwrap();
    let mut got = Vec::new();
    let e = store
        .scan(&filter, &mut |r| {
            got.push(r.lsn.0);
            Ok(true)
        })
        .unwrap_err()
        .to_string();
    assert!(got.is_empty(), "records handed out: {got:?}");
    assert!(
        e.contains("00000000000000000001.seg"),
        "the damage is named: {e}"
    );
}
