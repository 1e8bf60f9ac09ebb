//! Queries, verification, export and import through the [`Store`](crate::Store) handle.
//!
//! The query indexes are folds over the log kept in memory, caught up from
//! the log before every query (so they are never stale), persisted under
//! `.cairn/index/` on close and rebuilt from the log when missing or stale.

use std::io::Write;

use cairn_codec::{ChainHash, Lsn};
use cairn_engine::log::{Head, LogReader, LogStats, Record, VerifyReport};
use cairn_engine::EngineError;
use cairn_query::export::{ExportStats, Format};
use cairn_query::index::Index;
use cairn_query::source::{RecordSource, SnapshotManifests};
use cairn_query::{Filter, Query};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::store::LogHandle;
use crate::Store;

/// The records of a read-only store (another process writes), as the
/// query layer reads them: every `head()` picks up new commits.
pub(crate) struct ReaderRecords<'a>(pub(crate) &'a Mutex<LogReader>);

impl RecordSource for ReaderRecords<'_> {
    fn head(&self) -> cairn_query::Result<Head> {
        Ok(self.0.lock().refresh()?)
    }
    fn iter_from(&self, from: Lsn) -> Box<dyn Iterator<Item = cairn_query::Result<Record>> + '_> {
        Box::new(self.0.lock().iter_from(from).map(|r| r.map_err(Into::into)))
    }
    fn read(&self, lsn: Lsn) -> cairn_query::Result<Record> {
        let mut reader = self.0.lock();
        match reader.read(lsn) {
            Err(EngineError::LsnOutOfRange { .. }) => {
                reader.refresh()?;
                Ok(reader.read(lsn)?)
            }
            r => Ok(r?),
        }
    }
}

impl LogHandle {
    pub(crate) fn head(&self) -> Head {
        match self {
            LogHandle::Writer(l) => l.head(),
            LogHandle::Reader(r) => r.lock().head(),
        }
    }
    /// Runs `f` with this log as a query record source.
    fn with_source<T>(&self, f: impl FnOnce(&dyn RecordSource) -> T) -> T {
        match self {
            LogHandle::Writer(l) => f(&**l),
            LogHandle::Reader(r) => f(&ReaderRecords(r)),
        }
    }
}

/// What [`Store::verify`] found, over the log and the blobs.
#[derive(Debug)]
pub struct StoreVerifyReport {
    /// The log's report (frames, CRCs, footers, hash chain).
    pub log: VerifyReport,
    /// The blob store's report (every entry's hash, every chunk list).
    pub blobs: cairn_engine::blob::BlobVerifyReport,
    /// For a pinned head hash: the LSN where the chain reaches it, or None
    /// if it never does (history was truncated or rewritten).
    pub pinned: Option<(ChainHash, Option<Lsn>)>,
}

impl StoreVerifyReport {
    /// True when nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.log.is_ok() && self.blobs.is_ok() && self.pinned.is_none_or(|(_, at)| at.is_some())
    }
}

/// Counts and sizes of a store.
#[derive(Debug, Clone)]
pub struct StoreStats {
    /// The log.
    pub log: LogStats,
    /// The blob store.
    pub blobs: cairn_engine::blob::BlobStats,
    /// The head.
    pub head: Head,
}

impl Store {
    pub(crate) fn index(&self) -> &Mutex<Option<Index>> {
        &self.index
    }

    /// Runs `f` with a [`Query`] whose indexes cover the log up to its head.
    pub fn query<T>(&self, f: impl FnOnce(&Query<'_>) -> cairn_query::Result<T>) -> Result<T> {
        self.log.with_source(|src| {
            let manifests = SnapshotManifests(&*self.blobs);
            let mut guard = self.index().lock();
            let index = match guard.as_mut() {
                Some(ix) => {
                    ix.catch_up(src)?;
                    ix
                }
                None => {
                    let (ix, _) = Index::open(self.vfs(), &self.root().join("index"), src)?;
                    guard.insert(ix)
                }
            };
            let q = Query::new(src, &*self.blobs, &manifests, index);
            Ok(f(&q)?)
        })
    }

    /// Saves the query indexes so the next open does not rebuild them.
    pub(crate) fn save_index(&self) -> Result<()> {
        if self.is_read_only() {
            return Ok(());
        }
        if let Some(ix) = self.index().lock().as_ref() {
            ix.save(self.vfs(), &self.root().join("index"))?;
        }
        Ok(())
    }

    /// Checks every frame, CRC, footer and the hash chain of the log, and
    /// every blob's hash and chunk list. With `pinned`, also checks that the
    /// chain reaches that head hash (detects truncation of history).
    pub fn verify(&self, pinned: Option<ChainHash>) -> Result<StoreVerifyReport> {
        let log = match &self.log {
            LogHandle::Writer(l) => l.verify()?,
            LogHandle::Reader(r) => r.lock().verify()?,
        };
        let blobs = self.blobs.verify()?;
        let pinned = match pinned {
            None => None,
            Some(h) => {
                // Chain values are in the frame headers: no body is decoded.
                let mut at = None;
                let mut find = |f: &cairn_codec::frame::Frame<'_>| {
                    if at.is_none() && f.chain == h {
                        at = Some(f.lsn);
                    }
                };
                match &self.log {
                    LogHandle::Writer(l) => l.for_each_frame(Lsn::FIRST, &mut find)?,
                    LogHandle::Reader(r) => r.lock().for_each_frame(Lsn::FIRST, &mut find)?,
                };
                Some((h, at))
            }
        };
        Ok(StoreVerifyReport { log, blobs, pinned })
    }

    /// Counts and sizes.
    pub fn stats(&self) -> StoreStats {
        let log = match &self.log {
            LogHandle::Writer(l) => l.stats(),
            LogHandle::Reader(r) => r.lock().stats(),
        };
        StoreStats {
            log,
            blobs: self.blobs.stats(),
            head: self.head(),
        }
    }

    /// Exports the records `filter` selects in `format` to `out`.
    pub fn export(
        &self,
        filter: &Filter,
        format: Format,
        out: &mut dyn Write,
    ) -> Result<ExportStats> {
        self.query(|q| q.export(filter, format, out))
    }

    /// Like `tail -f`: exports records from `from` on as they are committed
    /// (by this process or, for a read-only handle, by the writer) until
    /// `stop()` returns true.
    pub fn follow(
        &self,
        filter: &Filter,
        format: Format,
        from: Lsn,
        out: &mut dyn Write,
        stop: &dyn Fn() -> bool,
    ) -> Result<ExportStats> {
        self.log
            .with_source(|src| {
                cairn_query::export::follow(src, &*self.blobs, filter, format, from, out, stop)
            })
            .map_err(Into::into)
    }

    /// Imports lines in a reference shape (or canonical JSONL) from `reader`.
    /// The whole input is parsed first: a bad line is an error naming the
    /// file, line and reason, and nothing is recorded. Blobs (diffs) are
    /// stored, then the events appended as one atomic batch.
    pub fn import(
        &self,
        format: Format,
        reader: &mut dyn std::io::BufRead,
        file_name: &str,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.writer("import")?;
        let imported = cairn_query::import::import_lines(format, reader, file_name)
            .map_err(|e| Error::Other(e.to_string()))?;
        let mut events = Vec::with_capacity(imported.len());
        for item in imported {
            for b in &item.blobs {
                self.blobs.put(b)?;
            }
            // Checked here too (append_batch checks again) to name the line.
            let at = |why: String| Error::Other(format!("{file_name}:{}: {why}", item.line));
            if let Some(h) = self.missing_blob(&item.event) {
                return Err(at(format!(
                    "the {} event refers to blob {h}, which is not in this store (canonical JSONL carries blob hashes, not contents: import an export into the store it came from)",
                    item.event.kind
                )));
            }
            self.check_event(&item.event)
                .map_err(|e| at(e.to_string()))?;
            events.push(item.event);
        }
        self.append_batch(&events)
    }
}
