//! A rollback SIGKILLed while it writes its files leaves no temporary in
//! the workspace, and whatever it staged in the store is gone at the next
//! open of any kind (a read-only `cairn checkpoints` too).
#![allow(clippy::unwrap_used)]

mod common;
use common::{cairn, ok};
use std::path::Path;
use std::time::{Duration, Instant};

/// Files the rollback rewrites, and their size: enough that staging them
/// takes long enough for the test to see it and kill the process then.
const FILES: usize = 48;
const FILE_BYTES: usize = 512 * 1024;

/// The longest the test waits for a temporary to appear.
const WAIT: Duration = Duration::from_secs(60);

fn staging(ws: &Path) -> std::path::PathBuf {
    ws.join(".cairn/snapshot/restore-staging")
}

fn count_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |rd| rd.count())
}

/// Workspace paths named like a rollback's temporary (`.cairn-restore-*`),
/// outside the store.
fn workspace_temporaries(ws: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![ws.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == ".cairn" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if name.starts_with(".cairn-restore-") {
                out.push(e.path().strip_prefix(ws).unwrap().display().to_string());
            }
        }
    }
    out
}

/// Regression (issue 27): after SIGKILL during a rollback, up to 64
/// `.cairn-restore-*.tmp` files of several MB stayed in the workspace's
/// root until the next write command.
#[test]
fn killed_rollback_leaves_no_temporaries_in_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    ok(&cairn(ws, &["init", "."]));
    for i in 0..FILES {
        std::fs::write(ws.join(format!("f{i}.bin")), vec![b'a'; FILE_BYTES]).unwrap();
    }
    ok(&cairn(ws, &["checkpoint"]));
    for i in 0..FILES {
        std::fs::write(ws.join(format!("f{i}.bin")), vec![b'b'; FILE_BYTES]).unwrap();
    }
    ok(&cairn(ws, &["checkpoint"]));

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["rollback", "c1"])
        .current_dir(ws)
        .env_remove("CAIRN_STORE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it the moment a temporary shows, wherever it is written.
    let start = Instant::now();
    let staged = loop {
        let staged = count_in(&staging(ws));
        if staged > 0 || !workspace_temporaries(ws).is_empty() {
            child.kill().unwrap();
            break staged;
        }
        if child.try_wait().unwrap().is_some() || start.elapsed() > WAIT {
            panic!("the rollback ended before any temporary was seen");
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    child.wait().unwrap();

    assert_eq!(
        workspace_temporaries(ws),
        Vec::<String>::new(),
        "a killed rollback left temporaries in the workspace"
    );
    assert!(
        staged > 0 || count_in(&staging(ws)) > 0,
        "the kill came while the rollback staged its files"
    );
    // A read-only open removes what the dead process staged.
    ok(&cairn(ws, &["checkpoints"]));
    assert_eq!(
        count_in(&staging(ws)),
        0,
        "staged temporaries outlived the open"
    );

    // The rollback, run again, finishes.
    ok(&cairn(ws, &["rollback", "c1"]));
    for i in 0..FILES {
        let b = std::fs::read(ws.join(format!("f{i}.bin"))).unwrap();
        assert!(b.iter().all(|x| *x == b'a'), "f{i}.bin restored");
    }
    assert_eq!(count_in(&staging(ws)), 0);
}
