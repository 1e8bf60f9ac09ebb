//! The log's zstd dictionary: trained from the first record bodies, used
//! for every record after it, read back by the writer, by a read-only
//! reader, by verify and by salvage; a missing or damaged dictionary is
//! named and never yields wrong data; a crash at any step of writing the
//! dictionary loses no acknowledged record.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cairn_codec::frame::{self, FLAG_DICT};
use cairn_codec::zdict::file_name;
use cairn_codec::{Event, EventKind, Lsn, Timestamp};
use cairn_engine::dicts::copy_name;
use cairn_engine::log::{salvage, Durability, Log, LogOptions, LogReader};
use cairn_engine::vfs::sim::SimOp;
use cairn_engine::vfs::Fault;
use cairn_engine::{RealVfs, Vfs};

const WORDS: &[&str] = &[
    "the", "build", "fails", "because", "module", "parser", "returns", "an", "error", "when",
    "input", "is", "empty", "fix", "test", "cargo", "function", "value", "should", "handle",
    "case", "and", "then", "retry", "file", "config", "update", "check", "result", "path",
];

/// An agent-like event: a prompt, reply, tool call or file event, with
/// text from a small vocabulary plus some noise.
fn event(i: u64) -> Event {
    let mut r = support::xorshift(i + 1);
    let mut words = |n: u64| {
        (0..n)
            .map(|_| WORDS[(r.next().unwrap() % WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let kinds = [
        EventKind::Prompt,
        EventKind::Reply,
        EventKind::ToolCall,
        EventKind::FileEdit,
    ];
    let kind = kinds[(i % 4) as usize];
    let mut e = Event::new(kind, format!("session-{}", i / 50));
    e.ts = Timestamp(1_700_000_000_000 + i as i64 * 1000);
    e.text = Some(match kind {
        EventKind::Reply => format!("{} {}", words(120), support::hex_text(i, 16)),
        EventKind::ToolCall => format!("cargo test -p crate{} -- {}", i % 9, words(12)),
        _ => words(40),
    });
    if kind == EventKind::FileEdit {
        e.path = Some(format!("src/module_{}/parser.rs", i % 13));
    }
    e
}

fn opts(sample: u64) -> LogOptions {
    LogOptions {
        segment_size_bytes: 32 * 1024,
        durability: Durability::Never,
        dictionary_sample_bytes: sample,
        ..LogOptions::default()
    }
}

fn all(log: &Log) -> Vec<Event> {
    log.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect()
}

fn dict_frames(log: &Log) -> u64 {
    let mut n = 0;
    log.for_each_frame(Lsn(1), |f| n += u64::from(f.flags & FLAG_DICT != 0))
        .unwrap();
    n
}

/// A log in `dir` of `n` events with a dictionary trained after the first
/// ~32 KiB of bodies; returns the events and the dictionary's id.
fn log_with_dictionary(dir: &Path, n: u64) -> (Vec<Event>, u32) {
    let log = Log::open(Arc::new(RealVfs), dir, opts(32 * 1024)).unwrap();
    let mut model = Vec::new();
    for i in 0..n {
        let e = event(i);
        log.append(&e).unwrap();
        model.push(e);
        if i == n / 4 {
            assert!(log.dictionary().is_some(), "trained by now");
        }
    }
    let id = log.dictionary().unwrap();
    log.close().unwrap();
    (model, id)
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn records_use_the_trained_dictionary_and_read_back_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let log = Log::open(Arc::new(RealVfs), dir, opts(32 * 1024)).unwrap();
    let mut model: Vec<Event> = (0..400).map(event).collect();
    for e in &model {
        log.append(e).unwrap();
    }
    let id = log
        .dictionary()
        .expect("a dictionary after 32 KiB of bodies");
    assert!(dir.join(file_name(id)).exists());
    assert_eq!(log.stats().dictionary, Some(id));
    let before = dict_frames(&log);
    let more: Vec<Event> = (400..900).map(event).collect();
    for e in &more[..300] {
        log.append(e).unwrap();
    }
    log.append_batch(&more[300..]).unwrap();
    model.extend(more);
    // Every record after training that is worth compressing used it.
    let (mut large, mut used) = (0, 0);
    log.for_each_frame(Lsn(401), |f| {
        let body_len = log.body(f).unwrap().len();
        if body_len >= frame::DICT_COMPRESS_MIN_BYTES {
            large += 1;
            used += u32::from(f.flags & FLAG_DICT != 0);
        }
    })
    .unwrap();
    assert!(large >= 250 && used == large, "{used} of {large}");
    assert!(dict_frames(&log) > before);
    assert!(log.stats().sealed_segments > 0, "segments rolled");
    assert_eq!(all(&log), model);
    // The frame path decodes them too, as queries do.
    let mut decoded = Vec::new();
    log.frames_while(Lsn(1), |f| {
        decoded.push(Event::decode_body(&log.body(f).unwrap()).unwrap());
        true
    })
    .unwrap();
    assert_eq!(decoded, model);
    assert!(log.verify().unwrap().is_ok());
    let r = LogReader::open(Arc::new(RealVfs), dir).unwrap();
    let got: Vec<Event> = r.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect();
    assert_eq!(got, model);
    assert!(r.verify().unwrap().is_ok());
    log.close().unwrap();

    // Reopened: the same dictionary, used for new records; no second one.
    let log = Log::open(Arc::new(RealVfs), dir, opts(32 * 1024)).unwrap();
    assert_eq!(log.stats().dictionary, Some(id));
    let e = event(5_000);
    log.append(&e).unwrap();
    model.push(e);
    assert_eq!(all(&log), model);
    let dicts: Vec<String> = files(dir)
        .into_keys()
        .filter(|n| n.starts_with("dict-"))
        .collect();
    // The file and its second copy (see `dicts::copy_name`).
    assert_eq!(dicts, vec![file_name(id), copy_name(id)]);
    let with_dict = log.stats().bytes;
    log.close().unwrap();

    // The same records without a dictionary take far more room.
    let tmp2 = tempfile::tempdir().unwrap();
    let plain = Log::open(Arc::new(RealVfs), tmp2.path(), opts(0)).unwrap();
    plain.append_batch(&model).unwrap();
    assert_eq!(plain.stats().dictionary, None);
    let without = plain.stats().bytes;
    assert!(
        (with_dict as f64) < 0.8 * without as f64,
        "with a dictionary {with_dict} bytes, without {without}"
    );
}

#[test]
fn a_missing_or_damaged_dictionary_is_named_and_nothing_wrong_is_returned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (model, id) = log_with_dictionary(dir, 600);
    let dict_path = dir.join(file_name(id));
    let good = std::fs::read(&dict_path).unwrap();
    let check_refused = |what: &str| {
        let r = LogReader::open(Arc::new(RealVfs), dir).unwrap();
        // Records before the first that needs the dictionary read back;
        // then an error naming the segment, and no record is ever wrong.
        let mut n = 0;
        for rec in r.iter_from(Lsn(1)) {
            match rec {
                Ok(rec) => {
                    assert_eq!(rec.event, model[n]);
                    n += 1;
                }
                Err(e) => {
                    let s = e.to_string();
                    assert!(s.contains(&file_name(id)) && s.contains(".seg"), "{s}");
                    break;
                }
            }
        }
        assert!(
            n < model.len(),
            "{what}: the records needing it were refused"
        );
        let v = r.verify().unwrap();
        assert!(!v.is_ok());
        // One problem per segment, counting the records that need it.
        assert!(
            v.problems.len() as u64 <= r.stats().segments,
            "{:?}",
            v.problems
        );
        assert!(v
            .problems
            .iter()
            .any(|p| p.detail.contains(" record bodies (LSN ")));
        for p in &v.problems {
            assert_eq!(p.missing_dictionary.as_ref(), Some(&dict_path), "{p}");
            assert!(p.detail.contains(&dict_path.display().to_string()), "{p}");
            assert!(p.detail.contains(what), "{p}");
        }
        // Salvage would drop intact records: it refuses and changes nothing.
        let before = files(dir);
        let err = salvage(Arc::new(RealVfs), dir).unwrap_err().to_string();
        assert!(err.contains(&file_name(id)) && err.contains(what), "{err}");
        assert_eq!(files(dir), before);
    };
    // Its second copy is lost too (one alone is read in its place: see
    // `a_lost_dictionary_is_read_from_its_copy_and_written_again`).
    std::fs::remove_file(dir.join(copy_name(id))).unwrap();
    std::fs::remove_file(&dict_path).unwrap();
    check_refused("is missing");
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&dict_path, &bad).unwrap();
    check_refused("is damaged");
    // A damaged dictionary is never replaced by a newly trained one.
    let log = Log::open(Arc::new(RealVfs), dir, opts(1)).unwrap();
    for i in 0..200 {
        log.append(&event(10_000 + i)).unwrap();
    }
    assert_eq!(log.dictionary(), None);
    drop(log);
    // Restored, everything reads again.
    std::fs::write(&dict_path, &good).unwrap();
    let r = LogReader::open(Arc::new(RealVfs), dir).unwrap();
    let got: Vec<Event> = r
        .iter_from(Lsn(1))
        .take(model.len())
        .map(|r| r.unwrap().event)
        .collect();
    assert_eq!(got, model);
    assert!(r.verify().unwrap().is_ok());
}

/// Crashes at every file operation of writing the dictionary (and after
/// it): the log reopens, every acknowledged record is there, verify is
/// clean, and a dictionary file present is whole.
#[test]
fn crashes_while_the_dictionary_is_written_lose_nothing_acknowledged() {
    let dir = Path::new(support::SIM_LOG_DIR);
    for k in 0..12u64 {
        let disk = support::sim_disk_with_log_dir(k);
        let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
        let o = LogOptions {
            segment_size_bytes: 64 * 1024,
            durability: Durability::Always,
            dictionary_sample_bytes: 16 * 1024,
            ..LogOptions::default()
        };
        // From the first operation on a dictionary file, count operations;
        // the process dies at the k-th (every later one fails).
        let (started, count, dead) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        {
            let (started, count, dead) = (started.clone(), count.clone(), dead.clone());
            disk.set_fault_hook(move |op| {
                let path = match op {
                    SimOp::Open { path, .. }
                    | SimOp::Write { path, .. }
                    | SimOp::SyncData { path }
                    | SimOp::Remove { path } => Some(*path),
                    SimOp::Rename { to, .. } => Some(*to),
                    _ => None,
                };
                let dict_op = path
                    .and_then(|p| p.file_name())
                    .is_some_and(|n| n.to_string_lossy().starts_with("dict-"));
                if dict_op {
                    started.store(true, Ordering::SeqCst);
                }
                if started.load(Ordering::SeqCst) && count.fetch_add(1, Ordering::SeqCst) >= k {
                    dead.store(true, Ordering::SeqCst);
                    return Some(Fault::WriteEio);
                }
                dead.load(Ordering::SeqCst).then_some(Fault::WriteEio)
            });
        }
        let log = Log::open(vfs.clone(), dir, o).unwrap();
        let mut acked = Vec::new();
        let mut i = k * 10_000;
        // Until the samples are gathered: the append that completes them
        // trains and writes the dictionary.
        // Records acknowledged from the one whose append trained it on.
        let mut acked_after = 0;
        while !started.load(Ordering::SeqCst) && acked.len() < 2_000 {
            let e = event(i);
            i += 1;
            if log.append(&e).is_ok() {
                acked.push(e);
                acked_after += u32::from(started.load(Ordering::SeqCst));
            }
        }
        assert!(
            started.load(Ordering::SeqCst),
            "k {k}: training never began"
        );
        for _ in 0..30 {
            let e = event(i);
            i += 1;
            match log.append(&e) {
                Ok(_) => acked.push(e),
                Err(_) => break,
            }
            acked_after += 1;
        }
        let trained = log.stats().dictionary;
        // Kill: nothing more reaches the disk, which loses what was not durable.
        disk.set_fault_hook(|_| Some(Fault::WriteEio));
        drop(log);
        if k % 2 == 1 {
            disk.crash_tearing();
        } else {
            disk.crash();
        }
        disk.clear_faults();

        let log = Log::open(vfs.clone(), dir, o).unwrap();
        let got = all(&log);
        assert!(got.len() >= acked.len(), "k {k}: lost acknowledged records");
        assert_eq!(got[..acked.len()], acked[..], "k {k}");
        assert!(log.verify().unwrap().is_ok(), "k {k}");
        let reopened = log.stats().dictionary;
        if let Some(id) = trained {
            // Published only once durable: it survived the crash.
            assert_eq!(reopened, Some(id), "k {k}");
            // And the records acknowledged after it used it.
            assert_eq!(dict_frames(&log) > 0, acked_after > 0, "k {k}");
        }
        // The log goes on, and trains a dictionary if it has none.
        let mut model = got;
        for _ in 0..300 {
            let e = event(i);
            i += 1;
            log.append(&e).unwrap();
            model.push(e);
        }
        let id = log.dictionary().expect("trained after the crash");
        assert!(reopened.is_none_or(|r| r == id), "k {k}");
        log.close().unwrap();
        let log = Log::open(vfs.clone(), dir, o).unwrap();
        assert_eq!(all(&log), model, "k {k}");
        assert!(log.verify().unwrap().is_ok(), "k {k}");
        let names = disk.list(dir).unwrap();
        assert!(
            !names.iter().any(|n| n.ends_with(".tmp")),
            "k {k}: {names:?}"
        );
    }
}

/// A reader opened before the dictionary existed loads it when the first
/// record that needs it comes into view.
#[test]
fn a_reader_opened_before_training_loads_the_dictionary_when_it_needs_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let log = Log::open(Arc::new(RealVfs), dir, opts(32 * 1024)).unwrap();
    let mut model: Vec<Event> = (0..20).map(event).collect();
    log.append_batch(&model).unwrap();
    let mut r = LogReader::open(Arc::new(RealVfs), dir).unwrap();
    assert_eq!(r.stats().dictionary, None);
    let more: Vec<Event> = (20..600).map(event).collect();
    for e in &more {
        log.append(e).unwrap();
    }
    model.extend(more);
    assert!(log.dictionary().is_some());
    log.sync().unwrap();
    r.refresh().unwrap();
    let got: Vec<Event> = r.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect();
    assert_eq!(got, model);
    assert!(r.verify().unwrap().is_ok());
}

/// A damaged dictionary is read once, not again for every record that
/// needs it: verify over many such records opens its file once at open
/// and once per segment to say what is wrong.
#[test]
fn a_damaged_dictionary_is_not_read_again_for_every_record() {
    let dir = Path::new(support::SIM_LOG_DIR);
    let disk = support::sim_disk_with_log_dir(1);
    let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
    let log = Log::open(vfs.clone(), dir, opts(32 * 1024)).unwrap();
    for i in 0..600 {
        log.append(&event(i)).unwrap();
    }
    let id = log.dictionary().unwrap();
    log.close().unwrap();
    let file = dir.join(file_name(id));
    disk.corrupt(&file, 60, b"\xff\xff").unwrap();
    disk.corrupt(&dir.join(copy_name(id)), 60, b"\xff\xff")
        .unwrap();
    let opens = Arc::new(AtomicU64::new(0));
    {
        let (opens, file) = (opens.clone(), file.clone());
        disk.set_fault_hook(move |op| {
            if matches!(op, SimOp::Open { path, .. } if *path == file) {
                opens.fetch_add(1, Ordering::SeqCst);
            }
            None
        });
    }
    let r = LogReader::open(vfs, dir).unwrap();
    let v = r.verify().unwrap();
    let segments = r.stats().segments;
    assert!(!v.is_ok() && v.problems.iter().all(|p| p.detail.contains("is damaged")));
    let n = opens.load(Ordering::SeqCst);
    assert!(
        n <= 1 + segments,
        "{n} opens of the dictionary for {segments} segments"
    );
}

/// Regression (issue 27): deleting the 64 KiB log dictionary made every
/// record compressed with it unreadable (4,042 in the trial), and repair
/// refused to run. A second copy is kept beside it: with the file lost or
/// damaged, readers, verify and salvage read the copy, and a writable open
/// writes the file again from it.
#[test]
fn a_lost_dictionary_is_read_from_its_copy_and_written_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (model, id) = log_with_dictionary(dir, 600);
    let dict_path = dir.join(file_name(id));
    let good = std::fs::read(&dict_path).unwrap();
    assert_eq!(std::fs::read(dir.join(copy_name(id))).unwrap(), good);
    let mut bad = good.clone();
    bad[40] ^= 1;
    for lose in [None, Some(bad)] {
        match &lose {
            None => std::fs::remove_file(&dict_path).unwrap(),
            Some(b) => std::fs::write(&dict_path, b).unwrap(),
        }
        let r = LogReader::open(Arc::new(RealVfs), dir).unwrap();
        let got: Vec<Event> = r
            .iter_from(Lsn(1))
            .take(model.len())
            .map(|r| r.unwrap().event)
            .collect();
        assert_eq!(got, model);
        assert!(r.verify().unwrap().is_ok());
        drop(r);
        // A writable open writes the file again.
        let log = Log::open(Arc::new(RealVfs), dir, opts(32 * 1024)).unwrap();
        assert_eq!(log.dictionary(), Some(id));
        log.close().unwrap();
        assert_eq!(std::fs::read(&dict_path).unwrap(), good);
    }
    // The copy lost instead: written again from the file.
    std::fs::remove_file(dir.join(copy_name(id))).unwrap();
    Log::open(Arc::new(RealVfs), dir, opts(32 * 1024))
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(std::fs::read(dir.join(copy_name(id))).unwrap(), good);
}
