//! Faults a workspace can throw at a checkpoint or a rollback: a file
//! rewritten while it is read, a rollback's temporaries left by a killed
//! process, a dry run that must promise only what the real run does.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_snapshot::capture::read_manifest;
use cairn_snapshot::scan::reason;
use cairn_snapshot::*;
use common::*;

/// Size of the file the writer thread rewrites: above the streaming
/// threshold (read in chunks into the blob store), and large enough that
/// a rewrite always overlaps the read.
const REWRITTEN_BYTES: usize = 6 * 1024 * 1024;

/// How the writer thread rewrites the file: one `write` of this many bytes
/// at a time, from the start.
const CHUNK_BYTES: usize = 64 * 1024;

/// How long the writer must have been stopped at one point of a rewrite
/// for a checkpoint to have seen the file hold part of two versions and
/// nothing else happen to it: longer than a chunk's write takes even on a
/// loaded machine (tens of microseconds), shorter than the checkpoint's
/// read of the whole file, which had to fall inside the stop.
const MIN_STALL: Duration = Duration::from_millis(1);

/// When each chunk's write returned: (the version's byte, the chunk's
/// index, the moment), in the order written.
type WriteLog = Arc<Mutex<Vec<(u8, usize, Instant)>>>;

/// True if the file could have held what a checkpoint stored (the first
/// `boundary` bytes of version `new`, the rest of the version before it,
/// each version named by its byte) at a moment when the writer was
/// stopped, for at least [`MIN_STALL`] within the checkpoint's span
/// `[from, to]`, where the two versions meet. Such a file is what was
/// on disk while it was read, as any copy would have taken it; a mix read
/// while the writer ran is not. The file holds that mix from the end of
/// the write before the chunk where they meet (logged no earlier than the
/// entry two before that chunk's) to the chunk's own write, so the stop
/// lies between those two entries: the thread may be stopped just after a
/// write, before it logs it.
fn writer_stalled_at(
    log: &[(u8, usize, Instant)],
    new: u8,
    boundary: usize,
    from: Instant,
    to: Instant,
) -> bool {
    let chunk = boundary / CHUNK_BYTES;
    log.windows(3).any(|w| {
        let ((_, _, before), (byte, k, after)) = (w[0], w[2]);
        byte == new
            && k == chunk
            && after.duration_since(before) >= MIN_STALL
            && before <= to
            && after >= from
    })
}

#[test]
fn checkpoint_of_a_file_rewritten_during_the_read_never_stores_a_mix() {
    let fx = fx();
    let path = fx.p("big.bin");
    std::fs::write(&path, vec![b'a'; REWRITTEN_BYTES]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log: WriteLog = Arc::default();
    let writer = {
        let (stop, path) = (stop.clone(), path.clone());
        let log = log.clone();
        std::thread::spawn(move || {
            let mut version = 0u8;
            while !stop.load(Ordering::Relaxed) {
                version = version.wrapping_add(1);
                let byte = b'a' + version % 26;
                let chunk = vec![byte; CHUNK_BYTES];
                // In place, as a tool that opens without truncating
                // writes: the size never changes, only the bytes.
                let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.seek(SeekFrom::Start(0)).unwrap();
                for k in 0..REWRITTEN_BYTES / CHUNK_BYTES {
                    f.write_all(&chunk).unwrap();
                    log.lock().unwrap().push((byte, k, Instant::now()));
                }
            }
        })
    };
    let mut changing = 0;
    for i in 0..6 {
        let from = Instant::now();
        let c = fx.checkpoint(&format!("c{i}"));
        let to = Instant::now();
        let m = read_manifest(&fx.blobs, &c.root).unwrap();
        match m.entries.get("big.bin") {
            Some(e) => {
                let bytes = BlobRead::get(&fx.blobs, &e.hash).unwrap();
                assert_eq!(bytes.len(), REWRITTEN_BYTES, "checkpoint {i}");
                let new = bytes[0];
                let boundary = bytes.iter().position(|b| *b != new);
                if let Some(boundary) = boundary {
                    // Two versions at most, the newer one first: what a
                    // rewrite from the start leaves at any moment.
                    let old = bytes[boundary];
                    assert!(
                        bytes[boundary..].iter().all(|b| *b == old),
                        "checkpoint {i} stored a mix of more than two versions"
                    );
                    let stalled = writer_stalled_at(&log.lock().unwrap(), new, boundary, from, to);
                    assert!(
                        stalled,
                        "checkpoint {i} stored a mix of two versions (they meet at byte \
                         {boundary}) while the writer was writing"
                    );
                }
            }
            None => {
                changing += 1;
                assert!(
                    c.not_captured
                        .iter()
                        .any(|n| n.path == "big.bin" && n.why == reason::CHANGING),
                    "checkpoint {i} left big.bin out without naming it: {:?}",
                    c.not_captured
                );
                assert_eq!(c.counts.skipped.get(reason::CHANGING), Some(&1));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    // Once the writer stops, the file is captured whole again.
    let c = fx.checkpoint("settled");
    let m = read_manifest(&fx.blobs, &c.root).unwrap();
    assert!(m.entries.contains_key("big.bin"), "{:?}", c.not_captured);
    eprintln!("{changing} of 6 checkpoints named big.bin as changing");
}

fn mkfifo(p: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// Regression (issue 27): a FIFO where the target has a directory. The dry
/// run promised a rollback that the real run then refused part way
/// ("partly rolled back", although nothing had changed). Both now agree:
/// the FIFO (which holds no data, as a socket or device does not) is
/// replaced by the directory and its files, as a file written over one
/// replaces it.
#[test]
fn rollback_dry_run_and_real_run_agree_over_a_fifo_where_a_directory_was() {
    let fx = fx();
    fx.write("d/f", "kept in c1");
    fx.write("other", "1");
    let c1 = fx.checkpoint("c1");
    std::fs::remove_dir_all(fx.p("d")).unwrap();
    mkfifo(&fx.p("d"));
    fx.write("other", "2");
    let dry = fx.try_rollback(c1.id, &[], true).unwrap();
    let real = fx.try_rollback(c1.id, &[], false).unwrap();
    assert_eq!(
        dry.kept, real.kept,
        "the dry run kept what the rollback kept"
    );
    assert!(real.kept.is_empty(), "{:?}", real.kept);
    let mut promised = dry.written.clone();
    promised.sort();
    let mut done = real.written.clone();
    done.sort();
    assert_eq!(promised, done);
    assert_eq!(dry.created_dirs, real.created_dirs);
    assert_eq!(fx.read("d/f").as_deref(), Some("kept in c1"));
    assert_eq!(fx.read("other").as_deref(), Some("1"));
}
