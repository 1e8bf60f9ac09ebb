//! How the snapshot code reaches the log: the [`LogAccess`] trait, its
//! implementation by the engine's `Log`, and the in-memory [`MemLog`].

use parking_lot::Mutex;

use cairn_codec::{ChainHash, Event, Lsn};
use cairn_engine::log::{Head, Record};

use crate::error::{Result, SnapshotError};

/// What the snapshot code needs from the log.
pub trait LogAccess {
    /// Appends one event durably; returns its LSN.
    fn append(&self, event: &Event) -> Result<Lsn>;
    /// Appends events atomically; returns the first and last LSN.
    fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>>;
    /// The last committed record.
    fn head(&self) -> Head;
    /// One committed record.
    fn read(&self, lsn: Lsn) -> Result<Record>;
    /// Calls `f` on every committed record from `from` to the head.
    fn for_each_from(&self, from: Lsn, f: &mut dyn FnMut(Record) -> Result<()>) -> Result<()>;
}

impl LogAccess for cairn_engine::log::Log {
    fn append(&self, event: &Event) -> Result<Lsn> {
        Ok(cairn_engine::log::Log::append(self, event)?)
    }
    fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>> {
        Ok(cairn_engine::log::Log::append_batch(self, events)?)
    }
    fn head(&self) -> Head {
        cairn_engine::log::Log::head(self)
    }
    fn read(&self, lsn: Lsn) -> Result<Record> {
        Ok(cairn_engine::log::Log::read(self, lsn)?)
    }
    fn for_each_from(&self, from: Lsn, f: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
        for r in self.iter_from(from) {
            f(r?)?;
        }
        Ok(())
    }
}

/// An in-memory log, for tests and in-memory embedders.
#[derive(Debug, Default)]
pub struct MemLog {
    records: Mutex<Vec<Record>>,
}

impl MemLog {
    /// An empty log.
    pub fn new() -> MemLog {
        MemLog::default()
    }
    /// Every record.
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().clone()
    }
}

impl LogAccess for MemLog {
    fn append(&self, event: &Event) -> Result<Lsn> {
        let body = event.encode_body()?;
        let mut recs = self.records.lock();
        let prev = recs.last().map_or(ChainHash::ZERO, |r| r.chain);
        let lsn = Lsn(recs.len() as u64 + 1);
        let mut h = blake3::Hasher::new();
        h.update(prev.as_bytes());
        h.update(&lsn.0.to_le_bytes());
        h.update(&body);
        recs.push(Record {
            lsn,
            chain: ChainHash(*h.finalize().as_bytes()),
            event: event.clone(),
        });
        Ok(lsn)
    }
    fn append_batch(&self, events: &[Event]) -> Result<Option<(Lsn, Lsn)>> {
        let mut first = None;
        let mut last = None;
        for e in events {
            let l = self.append(e)?;
            first.get_or_insert(l);
            last = Some(l);
        }
        Ok(first.zip(last))
    }
    fn head(&self) -> Head {
        self.records
            .lock()
            .last()
            .map_or_else(Head::default, |r| Head {
                last_lsn: r.lsn,
                chain: r.chain,
            })
    }
    fn read(&self, lsn: Lsn) -> Result<Record> {
        let recs = self.records.lock();
        recs.get((lsn.0 as usize).wrapping_sub(1))
            .cloned()
            .ok_or_else(|| {
                SnapshotError::Engine(cairn_engine::EngineError::LsnOutOfRange {
                    lsn,
                    last: Lsn(recs.len() as u64),
                })
            })
    }
    fn for_each_from(&self, from: Lsn, f: &mut dyn FnMut(Record) -> Result<()>) -> Result<()> {
        let recs = self.records.lock().clone();
        for r in recs.into_iter().skip((from.0.max(1) - 1) as usize) {
            f(r)?;
        }
        Ok(())
    }
}
