//! Queries, verification, export and import through the [`Store`](crate::Store) handle.
//!
//! The query indexes are folds over the log kept in memory, caught up from
//! the log before every query (so they are never stale), persisted under
//! `.cairn/index/` on close and rebuilt from the log when missing or stale.

use std::io::Write;
use std::time::Duration;

use cairn_codec::{BlobHash, ChainHash, Lsn};
use cairn_engine::blob::BlobStore;
use cairn_engine::log::{Head, LogIter, LogStats, VerifyReport};
use cairn_query::export::{ExportStats, Format};
use cairn_query::index::Index;
use cairn_query::source::{BlobSource, EntryKind, ManifestSource, RecordSource, Tree, TreeEntry};
use cairn_query::{Filter, Query};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::store::LogHandle;
use crate::Store;

/// The records of a store, as the query layer reads them.
pub(crate) struct StoreRecords<'a>(pub(crate) &'a LogHandle);

fn to_query_record(r: cairn_engine::log::Record) -> cairn_query::source::Record {
    cairn_query::source::Record { lsn: r.lsn, chain: r.chain, event: r.event }
}

impl LogHandle {
    pub(crate) fn head(&self) -> Head {
        match self {
            LogHandle::Writer(l) => l.head(),
            LogHandle::Reader(r) => r.lock().head(),
        }
    }
    pub(crate) fn iter_from(&self, from: Lsn) -> LogIter {
        match self {
            LogHandle::Writer(l) => l.iter_from(from),
            LogHandle::Reader(r) => r.lock().iter_from(from),
        }
    }
}

impl RecordSource for StoreRecords<'_> {
    fn head(&self) -> cairn_query::Result<cairn_query::source::Head> {
        if let LogHandle::Reader(r) = self.0 {
            r.lock().refresh()?;
        }
        let h = self.0.head();
        Ok(cairn_query::source::Head { last_lsn: h.last_lsn, chain: h.chain })
    }
    fn iter_from(&self, from: Lsn) -> Box<dyn Iterator<Item = cairn_query::Result<cairn_query::source::Record>> + '_> {
        Box::new(self.0.iter_from(from).map(|r| r.map(to_query_record).map_err(Into::into)))
    }
    fn read(&self, lsn: Lsn) -> cairn_query::Result<cairn_query::source::Record> {
        let r = match self.0 {
            LogHandle::Writer(l) => l.read(lsn),
            LogHandle::Reader(r) => r.lock().read(lsn),
        };
        Ok(to_query_record(r?))
    }
    fn wait_for(&self, after: Lsn, timeout: Duration) -> cairn_query::Result<cairn_query::source::Head> {
        match self.0 {
            LogHandle::Writer(l) => {
                let h = l.wait_for(after, timeout);
                Ok(cairn_query::source::Head { last_lsn: h.last_lsn, chain: h.chain })
            }
            LogHandle::Reader(_) => {
                let start = std::time::Instant::now();
                loop {
                    let h = self.head()?;
                    if h.last_lsn > after || start.elapsed() >= timeout {
                        return Ok(h);
                    }
                    std::thread::sleep(cairn_query::source::POLL_INTERVAL);
                }
            }
        }
    }
}

/// The blobs of a store, as the query layer reads them.
pub(crate) struct StoreBlobs<'a>(pub(crate) &'a BlobStore);

impl BlobSource for StoreBlobs<'_> {
    fn get(&self, hash: &BlobHash) -> cairn_query::Result<Vec<u8>> {
        Ok(self.0.get(hash)?)
    }
}

/// Checkpoint manifests (snapshot's Merkle trees), as the query layer reads them.
pub(crate) struct StoreManifests<'a>(pub(crate) &'a BlobStore);

fn to_tree_entry(e: &cairn_snapshot::manifest::Entry) -> Option<TreeEntry> {
    let kind = match e.kind {
        cairn_snapshot::manifest::EntryKind::File => EntryKind::File,
        cairn_snapshot::manifest::EntryKind::Symlink => EntryKind::Symlink,
        cairn_snapshot::manifest::EntryKind::Dir => return None,
    };
    Some(TreeEntry { blob: e.hash, mode: e.mode, kind })
}

fn snapshot_err(e: cairn_snapshot::SnapshotError) -> cairn_query::QueryError {
    match e {
        // Keep engine errors (blob damage) as they are: they carry the place.
        cairn_snapshot::SnapshotError::Engine(e) => cairn_query::QueryError::Engine(e),
        other => cairn_query::QueryError::Invalid(format!("read checkpoint manifest: {other}")),
    }
}

impl ManifestSource for StoreManifests<'_> {
    fn tree(&self, root: &BlobHash) -> cairn_query::Result<Tree> {
        let m = cairn_snapshot::manifest::list(self.0, root).map_err(snapshot_err)?;
        Ok(m.files().filter_map(|(p, e)| to_tree_entry(e).map(|t| (p.clone(), t))).collect())
    }
    fn entry(&self, root: &BlobHash, path: &str) -> cairn_query::Result<Option<TreeEntry>> {
        let e = cairn_snapshot::manifest::lookup(self.0, root, path).map_err(snapshot_err)?;
        Ok(e.as_ref().and_then(to_tree_entry))
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
        let src = StoreRecords(&self.log);
        let blobs = StoreBlobs(&self.blobs);
        let manifests = StoreManifests(&self.blobs);
        let mut guard = self.index().lock();
        let index = match guard.as_mut() {
            Some(ix) => {
                ix.catch_up(&src)?;
                ix
            }
            None => {
                let (ix, _) = Index::open(self.vfs(), &self.root().join("index"), &src)?;
                guard.insert(ix)
            }
        };
        let q = Query::new(&src, &blobs, &manifests, index);
        Ok(f(&q)?)
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
                let mut at = None;
                for r in self.log.iter_from(Lsn::FIRST) {
                    let r = r?;
                    if r.chain == h {
                        at = Some(r.lsn);
                        break;
                    }
                }
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
        StoreStats { log, blobs: self.blobs.stats(), head: self.head() }
    }

    /// Exports the records `filter` selects in `format` to `out`.
    pub fn export(&self, filter: &Filter, format: Format, out: &mut dyn Write) -> Result<ExportStats> {
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
        let src = StoreRecords(&self.log);
        let blobs = StoreBlobs(&self.blobs);
        Ok(cairn_query::export::follow(&src, &blobs, filter, format, from, out, stop)?)
    }

    /// Imports lines in a reference shape (or canonical JSONL) from `reader`.
    /// The whole input is parsed first: a bad line is an error naming the
    /// file, line and reason, and nothing is recorded. Blobs (diffs) are
    /// stored, then the events appended as one atomic batch.
    pub fn import(&self, format: Format, reader: &mut dyn std::io::BufRead, file_name: &str) -> Result<Option<(Lsn, Lsn)>> {
        self.writer("import")?;
        let imported = cairn_query::import::import_lines(format, reader, file_name)
            .map_err(|e| Error::Other(e.to_string()))?;
        let mut events = Vec::with_capacity(imported.len());
        for item in imported {
            for b in &item.blobs {
                self.blobs.put(b)?;
            }
            events.push(item.event);
        }
        self.append_batch(&events)
    }
}
