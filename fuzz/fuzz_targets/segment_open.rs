//! Opening a log whose only segment holds arbitrary bytes (on the simulated
//! disk), with a reader and then for writing: recovery, iteration and
//! verify must never panic, and whatever records come back must have dense
//! LSNs from 1 and a verifying chain.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use cairn_codec::Lsn;
use cairn_engine::log::{Durability, Log, LogOptions, LogReader};
use cairn_engine::vfs::{OpenMode, SimVfs, Vfs};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let disk = SimVfs::new();
    let dir = Path::new("/s/log");
    disk.create_dir_all(dir).expect("mkdir");
    let f = disk
        .open(&dir.join("00000000000000000001.seg"), OpenMode::CreateNew)
        .expect("create");
    f.write_all_at(data, 0).expect("write");
    drop(f);
    let opts = LogOptions {
        segment_size_bytes: 4096,
        durability: Durability::Always,
        ..LogOptions::default()
    };
    let vfs: Arc<dyn Vfs> = Arc::new(disk);
    // A reader (no lock, never writes) of the same bytes: no panic, dense
    // LSNs from 1 for whatever it calls committed.
    if let Ok(reader) = LogReader::open(vfs.clone(), dir) {
        let mut expect = Lsn(1);
        for r in reader.iter_from(Lsn(1)) {
            let Ok(r) = r else { break };
            assert_eq!(r.lsn, expect, "dense LSNs (reader)");
            expect = expect.next();
        }
    }
    let Ok(log) = Log::open(vfs, dir, opts) else {
        return;
    };
    let head = log.head();
    let mut expect = Lsn(1);
    for r in log.iter_from(Lsn(1)) {
        let Ok(r) = r else { break };
        assert_eq!(r.lsn, expect, "dense LSNs");
        expect = expect.next();
    }
    assert!(expect.0 <= head.last_lsn.0 + 1);
    if let Ok(report) = log.verify() {
        let _ = report.is_ok();
    }
    // A recovered log accepts appends.
    let _ = log.append(&cairn_codec::Event::new(
        cairn_codec::EventKind::Prompt,
        "f",
    ));
});
