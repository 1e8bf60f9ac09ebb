//! Model test: any sequence of appends, batches and reopens (with small
//! segments, so segments roll) leaves the log equal to a `Vec<Event>` model,
//! with dense LSNs and a chain that verify recomputes, for appends written
//! through the tail's memory map and through `pwrite`, with and without a
//! zstd dictionary trained along the way; a read-only reader opened at any
//! point sees exactly the model. `CAIRN_SOAK=1` runs
//! many more cases.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_codec::{Event, EventKind, Lsn, Timestamp};
use cairn_engine::log::{Durability, Log, LogOptions, LogReader};
use cairn_engine::RealVfs;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Append(u16, usize),
    Batch(Vec<(u16, usize)>),
    Reopen {
        close: bool,
    },
    Read(u16),
    /// A read-only reader (as another process) sees exactly the model.
    Reader,
}

fn event(seed: u16, size: usize) -> Event {
    let kind = EventKind::ALL[seed as usize % EventKind::ALL.len()];
    let mut e = Event::new(kind, format!("s{}", seed % 3));
    e.ts = Timestamp(1_700_000_000_000 + i64::from(seed));
    // Large texts are repetitive, so they take the zstd path in the codec.
    e.text = Some(format!("{seed}:").repeat(size / 4 + 1));
    e
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![0usize..40, 600usize..3000];
    prop_oneof![
        6 => (any::<u16>(), size.clone()).prop_map(|(s, n)| Op::Append(s, n)),
        2 => proptest::collection::vec((any::<u16>(), size), 0..5).prop_map(Op::Batch),
        1 => any::<bool>().prop_map(|close| Op::Reopen { close }),
        1 => any::<u16>().prop_map(Op::Read),
        1 => Just(Op::Reader),
    ]
}

fn cases() -> u32 {
    if std::env::var_os("CAIRN_SOAK").is_some() {
        1000
    } else {
        24
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn log_equals_model(
        ops in proptest::collection::vec(op(), 1..40),
        seg in prop_oneof![Just(400u64), Just(1500), Just(64 * 1024)],
        durability in prop_oneof![Just(Durability::Never), Just(Durability::Always)],
        reserved_tail in any::<bool>(),
        dictionary_sample_bytes in prop_oneof![Just(0u64), Just(8 * 1024)],
        max_syncs_in_flight in 1u64..=2,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let o = LogOptions { segment_size_bytes: seg, durability, reserved_tail, dictionary_sample_bytes, max_syncs_in_flight };
        let mut log = Some(Log::open(Arc::new(RealVfs), dir, o).unwrap());
        let mut model: Vec<Event> = Vec::new();
        if dictionary_sample_bytes > 0 {
            // Enough large bodies for the log to train its dictionary
            // before the operations: they then run with it.
            let l = log.as_ref().unwrap();
            for s in 0..80u16 {
                let e = event(s.wrapping_mul(331), 700);
                l.append(&e).unwrap();
                model.push(e);
            }
            prop_assert!(l.dictionary().is_some());
        }
        for op in ops {
            let l = log.as_ref().unwrap();
            match op {
                Op::Append(s, n) => {
                    let e = event(s, n);
                    let lsn = l.append(&e).unwrap();
                    model.push(e);
                    prop_assert_eq!(lsn, Lsn(model.len() as u64));
                }
                Op::Batch(items) => {
                    let evs: Vec<Event> = items.iter().map(|&(s, n)| event(s, n)).collect();
                    let r = l.append_batch(&evs).unwrap();
                    if evs.is_empty() {
                        prop_assert_eq!(r, None);
                    } else {
                        let first = model.len() as u64 + 1;
                        model.extend(evs);
                        prop_assert_eq!(r, Some((Lsn(first), Lsn(model.len() as u64))));
                    }
                }
                Op::Reopen { close } => {
                    let l = log.take().unwrap();
                    if close {
                        l.close().unwrap();
                    } else {
                        // As if the process died after the OS had the bytes.
                        l.sync().unwrap();
                        std::mem::forget(l);
                    }
                    let l = Log::open(Arc::new(RealVfs), dir, o).unwrap();
                    let got: Vec<Event> = l.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect();
                    prop_assert_eq!(&got, &model);
                    log = Some(l);
                }
                Op::Reader => {
                    let r = LogReader::open(Arc::new(RealVfs), dir).unwrap();
                    let got: Vec<Event> = r.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect();
                    prop_assert_eq!(&got, &model);
                }
                Op::Read(i) => {
                    if !model.is_empty() {
                        let lsn = u64::from(i) % model.len() as u64 + 1;
                        let r = l.read(Lsn(lsn)).unwrap();
                        prop_assert_eq!(r.lsn, Lsn(lsn));
                        prop_assert_eq!(&r.event, &model[lsn as usize - 1]);
                        let tail: Vec<Lsn> = l.iter_from(Lsn(lsn)).map(|r| r.unwrap().lsn).collect();
                        prop_assert_eq!(tail, (lsn..=model.len() as u64).map(Lsn).collect::<Vec<_>>());
                    }
                }
            }
        }
        let l = log.take().unwrap();
        prop_assert_eq!(l.head().last_lsn, Lsn(model.len() as u64));
        let rep = l.verify().unwrap();
        prop_assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        prop_assert_eq!(rep.head, l.head());
        let reader = LogReader::open(Arc::new(RealVfs), dir).unwrap();
        prop_assert_eq!(reader.head(), l.head());
        let got: Vec<Event> = reader.iter_from(Lsn(1)).map(|r| r.unwrap().event).collect();
        prop_assert_eq!(got, model);
    }
}
