//! Queries, verification, export and import through the [`Store`] handle.
//!
//! The query indexes are folds over the log kept in memory, caught up from
//! the log before every query (so they are never stale), persisted under
//! `.cairn/index/` on close and rebuilt from the log when missing or stale.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;

use cairn_codec::{BlobHash, ChainHash, CheckpointId, Event, EventKind, Lsn};
use cairn_engine::log::{Head, LogReader, LogStats, Record, VerifyReport};
use cairn_engine::EngineError;
use cairn_query::export::{ExportStats, Format};
use cairn_query::import::Imported;
use cairn_query::index::{Index, OpenOutcome};
use cairn_query::source::{RecordSource, SnapshotManifests};
use cairn_query::{Filter, Query};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::import_journal::{self, Checkpoint, Entry, Hashing, Key, KeyFile};
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

/// How [`Store::import_with`] imports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportOptions {
    /// Import even if the input was imported before (by default such input
    /// is refused).
    pub again: bool,
    /// Skip the leading lines of the input that are recorded already and
    /// import the rest: an import that was interrupted, or an append-only
    /// file that grew since it was imported, goes on where the store
    /// stops. Which lines are recorded is what the import journal says an
    /// earlier import of the input recorded (see [`Store::import`]), or,
    /// for input it does not know, the leading lines whose events equal
    /// records (each after the previous line's, in order, as the first
    /// line is matched).
    pub resume: bool,
    /// Import the complete lines of an input whose last line is torn (a
    /// writer stopped part way through it: the input ends without a line
    /// end, and the line's JSON is cut short) and skip that line, instead
    /// of refusing the input. [`ImportReport::torn_tail`] says what was
    /// skipped; the import journal records the input up to the line before
    /// it, so once the writer has completed the line, an import with
    /// [`ImportOptions::resume`] records it and the lines after it. A bad
    /// line anywhere else, or a last line whose JSON is whole, is refused
    /// as ever.
    pub skip_torn_tail: bool,
    /// What to do with a `checkpoint.create` line that copies a checkpoint
    /// of this store whose files gc collected after it was discarded (the
    /// store's own export, taken before or after that gc, imported back):
    /// refuse the input (the default), or record the line without those
    /// files. See [`CollectedCheckpoints`].
    pub collected_checkpoints: CollectedCheckpoints,
}

/// What an import does with a `checkpoint.create` line whose files gc
/// collected: a line that is a copy of the record of a checkpoint of this
/// store (the same event) that was discarded, and whose tree or
/// application state gc has since deleted. Imported as it is, it would be
/// a checkpoint that can never be restored, and whose missing tree every
/// later gc would trip over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollectedCheckpoints {
    /// Refuse the input at such a line, saying which checkpoint it copies
    /// and naming [`CollectedCheckpoints::Record`] (nothing of the input
    /// is recorded, as for any bad line).
    #[default]
    Refuse,
    /// Record such a line as a checkpoint record without files: its blob
    /// hashes (`root`, `state`) move to the record's `meta.collected`
    /// (see [`cairn_snapshot::COLLECTED_KEY`]), with the checkpoint it
    /// copies and where that one was discarded. Like a checkpoint record
    /// imported from another tool, it is no checkpoint: a rollback to it
    /// is refused ([`cairn_snapshot::SnapshotError::CollectedCheckpoint`]).
    /// [`ImportReport::collected`] lists each such record.
    Record,
}

impl CollectedCheckpoints {
    /// The name the command line gives it (`--collected-checkpoints`).
    pub fn name(self) -> &'static str {
        match self {
            CollectedCheckpoints::Refuse => "refuse",
            CollectedCheckpoints::Record => "record",
        }
    }
}

impl std::str::FromStr for CollectedCheckpoints {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "refuse" => Ok(CollectedCheckpoints::Refuse),
            "record" => Ok(CollectedCheckpoints::Record),
            _ => Err(format!("unknown mode `{s}`: expected `refuse` or `record`")),
        }
    }
}

/// The words of an import error for the option that records a checkpoint
/// line whose files gc collected ([`CollectedCheckpoints::Record`]); the
/// command line puts its flag in their place.
pub const RECORD_COLLECTED_OPTION: &str =
    "`ImportOptions::with_collected_checkpoints(CollectedCheckpoints::Record)`";

impl ImportOptions {
    /// Options that import input recorded already, again.
    pub fn again() -> ImportOptions {
        ImportOptions {
            again: true,
            ..ImportOptions::default()
        }
    }

    /// Options that skip the leading lines recorded already and import
    /// the rest (see [`ImportOptions::resume`]).
    pub fn resume() -> ImportOptions {
        ImportOptions {
            resume: true,
            ..ImportOptions::default()
        }
    }

    /// These options, skipping a torn last line or not (see
    /// [`ImportOptions::skip_torn_tail`]).
    pub fn with_skip_torn_tail(self, skip: bool) -> ImportOptions {
        ImportOptions {
            skip_torn_tail: skip,
            ..self
        }
    }

    /// These options, with what to do with a checkpoint line whose files
    /// gc collected (see [`ImportOptions::collected_checkpoints`]).
    pub fn with_collected_checkpoints(self, mode: CollectedCheckpoints) -> ImportOptions {
        ImportOptions {
            collected_checkpoints: mode,
            ..self
        }
    }
}

/// What an import recorded, and the torn last line it skipped
/// ([`Store::import_reporting`], [`Store::import_file_reporting`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// The LSNs of the records made, first and last (`None`: none was).
    pub range: Option<(Lsn, Lsn)>,
    /// The input's torn last line, skipped (only with
    /// [`ImportOptions::skip_torn_tail`]).
    pub torn_tail: Option<TornTail>,
    /// The checkpoint lines recorded without the files gc had collected
    /// (only with [`CollectedCheckpoints::Record`]), in input order.
    pub collected: Vec<CollectedCheckpoint>,
}

/// A `checkpoint.create` line an import recorded without its files, which
/// gc had collected (see [`CollectedCheckpoints::Record`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectedCheckpoint {
    /// Its line number, from 1.
    pub line: u64,
    /// The record made of it: a checkpoint record without files, which
    /// cannot be rolled back to.
    pub id: CheckpointId,
    /// The checkpoint of this store whose record the line copies.
    pub copy_of: CheckpointId,
    /// Where that checkpoint was discarded.
    pub discarded_at: Lsn,
}

/// A torn last line an import skipped: the input ends in it without a line
/// end, part way through its JSON (see [`ImportOptions::skip_torn_tail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornTail {
    /// Its line number, from 1.
    pub line: u64,
    /// Its bytes, all skipped.
    pub bytes: u64,
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
    /// Blobs that live records name (checkpoint trees and states, file
    /// contents, diffs) which are missing or damaged, with the checkpoints,
    /// records and paths that lost their contents.
    pub lost: crate::verify_refs::LostContents,
}

impl StoreVerifyReport {
    /// True when nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.log.is_ok()
            && self.blobs.is_ok()
            && self.lost.is_ok()
            && self.pinned.is_none_or(|(_, at)| at.is_some())
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
                    let (ix, how) = Index::open(self.vfs(), &self.root().join("index"), src)?;
                    if how == (OpenOutcome::Loaded { caught_up: 0 }) {
                        // The file holds all of it: nothing to save at close.
                        self.index_saved.store(ix.covered().0, Ordering::Relaxed);
                    }
                    guard.insert(ix)
                }
            };
            let q = Query::new(src, &*self.blobs, &manifests, index);
            Ok(f(&q)?)
        })
    }

    /// The record at `lsn` (its event and chain hash), read back from the
    /// log and checked as every read is: what `cairn log --json` prints.
    pub fn record(&self, lsn: Lsn) -> Result<Record> {
        Ok(self.log.with_source(|src| src.read(lsn))?)
    }

    /// Saves the query indexes so the next open does not rebuild them.
    pub(crate) fn save_index(&self) -> Result<()> {
        let guard = self.index().lock();
        let Some(ix) = guard.as_ref() else {
            return Ok(());
        };
        // Saved (or loaded) as it is already: a read command that folded
        // nothing new rewrites (and fsyncs) nothing.
        let covered = ix.covered().0;
        if covered == self.index_saved.load(Ordering::Relaxed) {
            return Ok(());
        }
        let saved = if !self.is_read_only() {
            ix.save(self.vfs(), &self.root().join("index"))?;
            true
        } else if self.save_index_read_only {
            // A cache: a store this process may not write is no error.
            ix.save(self.vfs(), &self.root().join("index")).is_ok()
        } else {
            false
        };
        if saved {
            self.index_saved.store(covered, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Checks every frame, CRC, footer and the hash chain of the log,
    /// every blob's hash and chunk list, and that every blob a live record
    /// names is there and intact (naming the checkpoints and paths that
    /// lost contents). With `pinned`, also checks that the
    /// chain reaches that head hash (detects truncation of history).
    pub fn verify(&self, pinned: Option<ChainHash>) -> Result<StoreVerifyReport> {
        let log = match &self.log {
            LogHandle::Writer(l) => l.verify()?,
            LogHandle::Reader(r) => r.lock().verify()?,
        };
        let blobs = self.blobs.verify()?;
        let lost = crate::verify_refs::check(&self.log, &self.blobs, &blobs)?;
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
        Ok(StoreVerifyReport {
            log,
            blobs,
            pinned,
            lost,
        })
    }

    /// On a read-only handle, if the log ends before what its side files
    /// record it reaching (its newest segment files were deleted), the
    /// loss in words: reading goes on over what is left, but the lost
    /// LSNs are named. `None` otherwise (a writable open refuses such a log).
    pub fn log_loss_warning(&self) -> Option<String> {
        match &self.log {
            LogHandle::Writer(_) => None,
            LogHandle::Reader(r) => r.lock().recorded_loss().ok().flatten(),
        }
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

    /// Imports lines in a reference shape (or canonical JSONL) from `reader`,
    /// in one pass. Each line's blobs (comma diffs) are stored and its event
    /// checked like any append. Input up to [`IMPORT_BATCH_INPUT_BYTES`] is
    /// appended as one atomic batch: a bad line is an error naming the file,
    /// line and reason, and nothing is recorded. A longer input is appended
    /// in atomic batches of about that much input, so memory stays bounded;
    /// a bad line then stops the import and the error says which lines the
    /// earlier batches recorded. [`Store::import_file`] checks a whole file
    /// before it records any of it.
    ///
    /// Input imported before is refused; see [`Store::import_with`] to
    /// import it again, or only the lines after those recorded. Each batch
    /// is appended after the import journal (`.cairn/imports/`) says, durably,
    /// how far into the input it goes; the journal knows an input by its
    /// contents (a hash of its first bytes, to where an import got), so
    /// it recognises the input's lines whether or not they carry a time.
    /// Input the journal does not know is recognised by its first event
    /// (a record with the same time, kind, session and contents), which
    /// lines without a time (given the time of their import) never have.
    /// Input from a reader whose first line begins an input the journal
    /// knows is copied to a temporary file first, and checked whole.
    pub fn import(
        &self,
        format: Format,
        reader: &mut dyn std::io::BufRead,
        file_name: &str,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.import_with(format, reader, file_name, ImportOptions::default())
    }

    /// [`Store::import`] with options.
    pub fn import_with(
        &self,
        format: Format,
        reader: &mut dyn std::io::BufRead,
        file_name: &str,
        opts: ImportOptions,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.import_reporting(format, reader, file_name, opts)
            .map(|r| r.range)
    }

    /// [`Store::import_with`], saying what it skipped as well as what it
    /// recorded (a torn last line: [`ImportOptions::skip_torn_tail`]).
    pub fn import_reporting(
        &self,
        format: Format,
        reader: &mut dyn std::io::BufRead,
        file_name: &str,
        opts: ImportOptions,
    ) -> Result<ImportReport> {
        self.import_batched(format, reader, file_name, IMPORT_BATCH_INPUT_BYTES, opts)
    }

    /// [`Store::import_batched`]'s records (for the tests).
    #[cfg(test)]
    fn import_in_batches(
        &self,
        format: Format,
        reader: &mut dyn std::io::BufRead,
        file_name: &str,
        batch_bytes: u64,
        opts: ImportOptions,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.import_batched(format, reader, file_name, batch_bytes, opts)
            .map(|r| r.range)
    }

    /// [`Store::import_file_batched`]'s records (for the tests).
    #[cfg(test)]
    fn import_file_in_batches(
        &self,
        format: Format,
        path: &Path,
        batch_bytes: u64,
        opts: ImportOptions,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.import_file_batched(format, path, batch_bytes, opts)
            .map(|r| r.range)
    }

    /// [`Store::import`] with batches of `batch_bytes` of input.
    fn import_batched(
        &self,
        format: Format,
        reader: &mut dyn std::io::BufRead,
        file_name: &str,
        batch_bytes: u64,
        opts: ImportOptions,
    ) -> Result<ImportReport> {
        self.writer("import")?;
        refuse_gzip(reader, file_name, format)?;
        // The bytes read are kept until the first line is: if the journal
        // knows inputs that start with it, they begin the spooled copy.
        let mut input = Hashing::new(reader, !opts.again);
        let read = self.import_read(
            format,
            &mut input,
            file_name,
            batch_bytes,
            opts,
            Known::Unread,
        )?;
        match read {
            Read::Done(report) => Ok(report),
            Read::SeenBefore => {
                // Whether the input is one of those is known only at the
                // offsets their checkpoints name, which may lie far into
                // it: it is copied to a temporary file (deleted when
                // closed, even by a crash) and imported from there like a
                // file, checked first.
                let spool_error = |e: std::io::Error| {
                    Error::Other(format!("copy {file_name} to a temporary file: {e}"))
                };
                let mut spool = tempfile::tempfile().map_err(spool_error)?;
                spool.write_all(&input.take_kept()).map_err(spool_error)?;
                std::io::copy(&mut input, &mut spool).map_err(spool_error)?;
                let open = || -> Result<Box<dyn std::io::BufRead>> {
                    let mut f = spool.try_clone().map_err(spool_error)?;
                    std::io::Seek::rewind(&mut f).map_err(spool_error)?;
                    Ok(Box::new(std::io::BufReader::new(f)))
                };
                self.import_checked(format, file_name, batch_bytes, opts, &open)
            }
        }
    }

    /// Imports a file (see [`Store::import`]) after reading it through once
    /// to check every line, so that a bad line records nothing however long
    /// the file is (only a crash or an I/O error can leave some of its
    /// batches recorded). A pipe or other non-regular file, which cannot be
    /// read twice, is imported in one pass.
    pub fn import_file(&self, format: Format, path: &Path) -> Result<Option<(Lsn, Lsn)>> {
        self.import_file_with(format, path, ImportOptions::default())
    }

    /// [`Store::import_file`] with options.
    pub fn import_file_with(
        &self,
        format: Format,
        path: &Path,
        opts: ImportOptions,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.import_file_reporting(format, path, opts)
            .map(|r| r.range)
    }

    /// [`Store::import_file_with`], saying what it skipped as well as what
    /// it recorded (a torn last line: [`ImportOptions::skip_torn_tail`]).
    pub fn import_file_reporting(
        &self,
        format: Format,
        path: &Path,
        opts: ImportOptions,
    ) -> Result<ImportReport> {
        self.import_file_batched(format, path, IMPORT_BATCH_INPUT_BYTES, opts)
    }

    /// The first existing record after `after` (any, if `None`) whose event
    /// equals `e`: a line of an input imported before. Looked up by time in
    /// the index, so it reads only the records of that millisecond.
    fn recorded_after(&self, e: &cairn_codec::Event, after: Option<Lsn>) -> Result<Option<Lsn>> {
        self.query(|q| {
            let filter = Filter {
                since: Some(e.ts),
                until: Some(e.ts),
                ..Filter::all()
            };
            Ok(q.list(&filter)?
                .into_iter()
                .find(|r| after.is_none_or(|a| r.lsn > a) && r.event == *e)
                .map(|r| r.lsn))
        })
    }

    /// [`Store::import_file`] with batches of `batch_bytes` of input.
    fn import_file_batched(
        &self,
        format: Format,
        path: &Path,
        batch_bytes: u64,
        opts: ImportOptions,
    ) -> Result<ImportReport> {
        self.writer("import")?;
        let name = path.display().to_string();
        let open = || -> Result<Box<dyn std::io::BufRead>> {
            std::fs::File::open(path)
                .map(|f| Box::new(std::io::BufReader::new(f)) as Box<dyn std::io::BufRead>)
                .map_err(|e| Error::io("open", path, e))
        };
        let meta = std::fs::metadata(path).map_err(|e| Error::io("open", path, e))?;
        if meta.is_dir() {
            return Err(Error::Other(format!(
                "{name} is a directory: import reads files (name the files in it)"
            )));
        }
        if meta.is_file() {
            self.import_checked(format, &name, batch_bytes, opts, &open)
        } else {
            // (A pipe is read once, by the import below, which refuses
            // gzip too: sniffing it here would lose its first bytes.)
            self.import_batched(format, &mut open()?, &name, batch_bytes, opts)
        }
    }

    /// Imports the input `open` opens (each call from its start) after
    /// reading it through once to check every line and to find, in the
    /// import journal, what an earlier import of it recorded.
    fn import_checked(
        &self,
        format: Format,
        name: &str,
        batch_bytes: u64,
        opts: ImportOptions,
        open: &dyn Fn() -> Result<Box<dyn std::io::BufRead>>,
    ) -> Result<ImportReport> {
        let mut input = open()?;
        refuse_gzip(&mut input, name, format)?;
        let mut input = Hashing::new(&mut *input, false);
        let nothing = ImportDone::default();
        let mut journal: Option<(Key, KeyFile)> = None;
        let mut lines = cairn_query::import::lines(format, &mut input, name);
        let mut body = Vec::new();
        while let Some(item) = lines.next() {
            let mut item = match item {
                Ok(item) => item,
                // (The last line: the import skips it too.)
                Err(_) if opts.skip_torn_tail && lines.torn() => break,
                Err(e) => return Err(nothing.rejected(bad_line(e, &lines), name)),
            };
            item.settle_blobs(|h| self.blobs.contains(h));
            self.settle_collected(&mut item, opts.collected_checkpoints, name)
                .map_err(|e| nothing.rejected(e, name))?;
            self.check_imported(&item, name)
                .map_err(|e| nothing.rejected(e, name))?;
            // An event over the body limit is refused here, by its line, as
            // every other bad line is: found only when its batch is
            // appended, it would stop the import after the batches before
            // it were recorded. (The import itself finds it again as it
            // digests the batch.)
            body.clear();
            item.event
                .encode_body_into(&mut body)
                .map_err(|e| nothing.rejected(format!("{name}:{}: {e}", item.line), name))?;
            if journal.is_none() {
                let key = import_journal::key_of(lines.line_bytes());
                let file = import_journal::load(self.vfs(), self.root(), &key)?;
                if !opts.again {
                    lines.get_mut().watch(file.ends());
                }
                journal = Some((key, file));
            }
        }
        drop(lines);
        let known = match journal {
            None => Known::Unread,
            Some((key, file)) => {
                let recorded = match opts.again {
                    true => None,
                    false => self.recorded_by(&file, &input, name)?,
                };
                Known::Read(Progress {
                    key,
                    file,
                    recorded,
                    entry: None,
                })
            }
        };
        let mut again = open()?;
        let mut input = Hashing::new(&mut *again, false);
        let read = self.import_read(format, &mut input, name, batch_bytes, opts, known)?;
        match read {
            Read::Done(report) => Ok(report),
            // (Its check found no line, its import one the journal knows.)
            Read::SeenBefore => Err(Error::Other(format!(
                "{name} changed while it was imported (nothing from it was recorded): import it again"
            ))),
        }
    }

    /// What an earlier import of the input `seen` (read through, hashed at
    /// the offsets the checkpoints of `file` name) recorded of it, by the
    /// journal: the most recent one that recorded any of it. An input
    /// that starts as one imported before but of which cairn cannot tell
    /// which lines are recorded is refused.
    fn recorded_by(
        &self,
        file: &KeyFile,
        seen: &Hashing<impl std::io::BufRead>,
        name: &str,
    ) -> Result<Option<Recorded>> {
        for (i, entry) in file.entries.iter().enumerate().rev() {
            let cps = &entry.checkpoints;
            if !cps.iter().any(|c| c.matches(seen)) {
                continue; // another input that starts with the same line
            }
            let mut newest = None;
            for (j, c) in cps.iter().enumerate().rev() {
                if self.batch_recorded(c)? {
                    newest = Some(j);
                    break;
                }
            }
            let cannot_tell = |why: String| {
                Error::Rejected(format!(
                    "{name}: cairn cannot tell which lines of the input are recorded: {why}; import only the lines the store lacks (`tail -n +LINE`), or all of it again with `ImportOptions::again()` (nothing from {name} was recorded)"
                ))
            };
            match newest {
                Some(j) if cps[j].matches(seen) => {
                    return Ok(Some(Recorded {
                        entry: i,
                        checkpoint: j,
                        line: cps[j].line,
                        lsns: (Lsn(entry.first_lsn), Lsn(cps[j].last)),
                    }))
                }
                Some(j) => {
                    let same = cps[..j].iter().rev().find(|c| c.matches(seen));
                    if let Some(same) = same {
                        return Err(cannot_tell(format!(
                            "an import of an input that starts as this one does recorded its lines 1 to {}, as LSN {} to {}; this input has the same lines 1 to {}, but differs from that one, or ends, before its line {}",
                            cps[j].line, entry.first_lsn, cps[j].last, same.line, cps[j].line
                        )));
                    }
                    // (None it shares is one the log still holds.)
                }
                // Its first batch was never appended: it recorded nothing.
                None if cps.first().is_some_and(|c| c.first == entry.first_batch) => {}
                None => {
                    let last = cps.last().map_or(0, |c| c.line);
                    return Err(cannot_tell(format!(
                        "an import of it recorded its lines up to line {last}, from LSN {}, but the log no longer holds the last of them as recorded (the store was repaired, or a crash took back its last records under durability `interval` or `never`)",
                        entry.first_lsn
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Whether the log holds the batch of checkpoint `c`: the records at
    /// its LSNs are its events.
    fn batch_recorded(&self, c: &Checkpoint) -> Result<bool> {
        if c.first == 0 || c.first > c.last || self.head().last_lsn.0 < c.last {
            return Ok(false);
        }
        let n = c.last - c.first + 1;
        let records: Vec<Record> = self.log.with_source(|src| {
            src.iter_from(Lsn(c.first))
                .take(n as usize)
                .collect::<cairn_query::Result<Vec<Record>>>()
        })?;
        let dense = records
            .iter()
            .zip(c.first..)
            .all(|(r, lsn)| r.lsn == Lsn(lsn));
        Ok(dense
            && records.len() as u64 == n
            && import_journal::digest(records.iter().map(|r| &r.event))? == c.digest)
    }

    /// Reads `input` line by line and imports it in batches of about
    /// `batch_bytes`, skipping what `known` says an earlier import of it
    /// recorded (or, when the journal knows nothing of it, its leading
    /// lines whose events are recorded) and writing where it got to in the
    /// journal with each batch. When `known` is [`Known::Unread`] and the
    /// journal knows inputs that start with the same line, nothing is
    /// imported: [`Read::SeenBefore`], and `input` kept what it read.
    fn import_read<R: std::io::BufRead>(
        &self,
        format: Format,
        input: &mut Hashing<R>,
        file_name: &str,
        batch_bytes: u64,
        opts: ImportOptions,
        mut known: Known,
    ) -> Result<Read> {
        let journal_recorded = match &known {
            Known::Read(p) => p.recorded.clone(),
            Known::Unread => None,
        };
        let mut lines = cairn_query::import::lines(format, input, file_name);
        let mut batch: Vec<Imported> = Vec::new();
        // The lines of `batch` that copy a checkpoint whose files gc
        // collected, recorded without them: where in it, their line
        // number, and which checkpoint.
        let mut collected: Vec<(usize, u64, CollectedCopy)> = Vec::new();
        let mut batch_from = 0u64;
        let mut done = ImportDone::default();
        let mut first = true;
        // The leading lines recorded already: how many, the LSNs of the
        // first and the last; `None` once a line is not (or never was).
        let mut recorded: Option<(u64, Lsn, Lsn)> = None;
        let mut leading_first = None;
        let mut first_line = 0;
        let mut torn_tail = None;
        loop {
            if opts.skip_torn_tail {
                // Where the line to read begins: the end of what is
                // recorded, should it be a torn last line.
                lines.get_mut().mark();
            }
            match lines.next() {
                Some(Ok(mut item)) => {
                    if let Known::Unread = known {
                        let key = import_journal::key_of(lines.line_bytes());
                        let file = import_journal::load(self.vfs(), self.root(), &key)?;
                        if !opts.again && !file.entries.is_empty() {
                            return Ok(Read::SeenBefore);
                        }
                        lines.get_mut().take_kept(); // not needed: keep no more
                        known = Known::Read(Progress {
                            key,
                            file,
                            recorded: None,
                            entry: None,
                        });
                    }
                    item.settle_blobs(|h| self.blobs.contains(h));
                    // A line skipped as recorded starts no batch: the next
                    // one counts its input from after it.
                    let skipped = lines.get_ref().position();
                    if let Some(r) = &journal_recorded {
                        if item.line <= r.line {
                            batch_from = skipped; // recorded by the import `r`
                            continue;
                        }
                        if !opts.resume {
                            return Err(done.rejected(
                                journal_imported_before(file_name, r, Some(item.line)),
                                file_name,
                            ));
                        }
                    } else if std::mem::take(&mut first) && !opts.again {
                        if let Some(at) = self.recorded_after(&item.event, None)? {
                            recorded = Some((1, at, at));
                            leading_first = Some(at);
                            first_line = item.line;
                            batch_from = skipped;
                            continue;
                        }
                    } else if let Some((n, a, b)) = recorded {
                        if let Some(at) = self.recorded_after(&item.event, Some(b))? {
                            recorded = Some((n + 1, a, at));
                            batch_from = skipped;
                            continue;
                        }
                        if !opts.resume {
                            return Err(done.rejected(
                                imported_before(file_name, first_line, (n, a, b), Some(item.line)),
                                file_name,
                            ));
                        }
                        recorded = None;
                    }
                    // (After the lines recorded before are found: they are
                    // found by the line as it is, as the store recorded it.)
                    let copy = self
                        .settle_collected(&mut item, opts.collected_checkpoints, file_name)
                        .map_err(|e| done.rejected(e, file_name))?;
                    if let Some(copy) = copy {
                        collected.push((batch.len(), item.line, copy));
                    }
                    batch.push(item)
                }
                Some(Err(_)) if opts.skip_torn_tail && lines.torn() => {
                    torn_tail = Some(TornTail {
                        line: lines.line(),
                        bytes: lines.line_bytes().len() as u64,
                    });
                    break;
                }
                Some(Err(e)) => return Err(done.rejected(bad_line(e, &lines), file_name)),
                None => break,
            }
            let end = lines.get_ref().position();
            // (The journal is known once a line is read: a batch holds one.)
            if let (true, Known::Read(progress)) = (end - batch_from >= batch_bytes, &mut known) {
                let at = (end, lines.get_ref().hash());
                self.import_batch(
                    (&mut batch, &mut collected),
                    file_name,
                    &mut done,
                    progress,
                    at,
                    leading_first,
                )?;
                batch_from = end;
            }
        }
        if let (Some(r), false) = (&journal_recorded, opts.resume) {
            // (A torn last line skipped is the rest, once completed.)
            let rest = torn_tail.map(|t| t.line);
            return Err(done.rejected(journal_imported_before(file_name, r, rest), file_name));
        }
        if let (Some(r), false) = (recorded, opts.resume) {
            let rest = torn_tail.map(|t| t.line);
            return Err(done.rejected(imported_before(file_name, first_line, r, rest), file_name));
        }
        // The last checkpoint covers the whole input, blank lines after its
        // last line too; all but a torn last line, which may be completed.
        if let Known::Read(progress) = &mut known {
            let input = lines.get_ref();
            let at = match torn_tail {
                Some(_) => input.marked(),
                None => (input.position(), input.hash()),
            };
            self.import_batch(
                (&mut batch, &mut collected),
                file_name,
                &mut done,
                progress,
                at,
                leading_first,
            )?;
        }
        Ok(Read::Done(ImportReport {
            range: done.range,
            torn_tail,
            collected: done.collected,
        }))
    }

    /// Stores the blobs of `batch`, checks its events and appends them as
    /// one atomic batch, after writing in the import journal (`progress`) that
    /// the input up to `end` (whose first `end` bytes hash to `hash`) is
    /// recorded; empties `batch`. `leading` is the LSN of the input's first
    /// line when it was recorded before this import (found by its event).
    /// `collected` names the lines of `batch` (by their place in it, and
    /// their line number) made records without the files gc collected, which `done` then lists with
    /// their LSNs; it is emptied too.
    fn import_batch(
        &self,
        (batch, collected): (&mut Vec<Imported>, &mut Vec<(usize, u64, CollectedCopy)>),
        file_name: &str,
        done: &mut ImportDone,
        progress: &mut Progress,
        (end, hash): (u64, blake3::Hash),
        leading: Option<Lsn>,
    ) -> Result<()> {
        let Some(last_line) = batch.last().map(|i| i.line) else {
            return Ok(());
        };
        let mut events = Vec::with_capacity(batch.len());
        let mut digest = import_journal::Digest::default();
        for item in batch.drain(..) {
            for b in &item.blobs {
                self.put_unreferenced(b).map_err(|e| {
                    let why = format!("{file_name}:{}: store its blob: {e}", item.line);
                    done.error(why, file_name)
                })?;
            }
            self.check_imported(&item, file_name)
                .map_err(|e| done.rejected(e, file_name))?;
            self.check_refs(&item.event, &events, true).map_err(|why| {
                done.rejected(format!("{file_name}:{}: {why}", item.line), file_name)
            })?;
            // (An event over the body limit: a line an input read once, from
            // a pipe, was not checked for before.)
            digest
                .add(&item.event)
                .map_err(|e| done.rejected(format!("{file_name}:{}: {e}", item.line), file_name))?;
            events.push(item.event);
        }
        // The import holds the writer: the batch takes the LSNs after the
        // head (unless a thread appends through this handle meanwhile,
        // which the checkpoint is corrected for below).
        let head = self.head().last_lsn.0;
        let (first, last) = (head + 1, head + events.len() as u64);
        let checkpoint = Checkpoint {
            end,
            hash: hash.to_hex().to_string(),
            line: last_line,
            first,
            last,
            digest: digest.finish(),
        };
        let journal_error =
            |e: Error| done.error(format!("record where the import got to: {e}"), file_name);
        let entry = progress.entry_for(first, leading);
        progress.file.entries[entry].push(checkpoint);
        progress.save(self).map_err(journal_error)?;
        let got = self
            .append_batch_checked(&events, true)
            .map_err(|e| done.error(e.to_string(), file_name))?;
        if let Some((a, b)) = got {
            if (a.0, b.0) != (first, last) {
                progress.moved(entry, first, (a, b));
                progress.save(self).map_err(journal_error)?;
            }
            done.range = Some((done.range.map_or(a, |r| r.0), b));
            done.lines = last_line;
            for (i, line, copy) in collected.drain(..) {
                done.collected.push(CollectedCheckpoint {
                    line,
                    id: CheckpointId(Lsn(a.0 + i as u64)),
                    copy_of: copy.id,
                    discarded_at: copy.discarded_at,
                });
            }
        }
        Ok(())
    }

    /// Checks an imported line's event as an append would, saying which
    /// line it came from. Its own blobs count as present (they are stored
    /// before it is appended).
    fn check_imported(&self, item: &Imported, file_name: &str) -> std::result::Result<(), String> {
        let at = |why: String| format!("{file_name}:{}: {why}", item.line);
        cairn_codec::json::check_fields(&item.event).map_err(|e| at(e.to_string()))?;
        cairn_codec::json::check_paths(&item.event).map_err(|e| at(e.to_string()))?;
        let own: Vec<BlobHash> = item.blobs.iter().map(|b| BlobHash::of(b)).collect();
        let mut e = item.event.clone();
        for h in [
            &mut e.before,
            &mut e.after,
            &mut e.diff,
            &mut e.root,
            &mut e.state,
        ] {
            if h.is_some_and(|h| own.contains(&h)) {
                *h = None;
            }
        }
        match self.missing_blob(&e) {
            Some(h) => Err(at(match self.collected_copy(&item.event) {
                Some(copy) => copy.refusal(),
                None => format!(
                    "the {} event refers to blob {h}, which is not in this store (canonical JSONL carries blob hashes, not contents: import an export into the store it came from, or a store holding its blobs)",
                    e.kind
                ),
            })),
            None => self.bad_root(&item.event).map_or(Ok(()), |why| Err(at(why))),
        }
    }

    /// The discarded checkpoint of this store whose record `e` copies (the
    /// same event), when `e` is a `checkpoint.create` naming a blob the
    /// store no longer holds: gc collected it (the tree or the application
    /// state of a discarded checkpoint). An import of the store's own
    /// export, taken before or after that gc, meets such lines; the error
    /// says so instead of suggesting another store, and
    /// [`CollectedCheckpoints::Record`] records them without the blobs.
    fn collected_copy(&self, e: &Event) -> Option<CollectedCopy> {
        if e.kind != EventKind::CheckpointCreate {
            return None;
        }
        let root = e.root?;
        let missing = blob_fields(e).find(|(_, h)| !self.blobs.contains(h))?;
        let discarded: Vec<(CheckpointId, Lsn)> = self
            .query(|q| {
                Ok(q.index()
                    .checkpoints(None)
                    .into_iter()
                    .filter(|c| c.root == Some(root))
                    .filter_map(|c| Some((c.id, c.discarded_at?)))
                    .collect())
            })
            .ok()?;
        discarded
            .into_iter()
            .find(|(id, _)| self.record(id.0).is_ok_and(|r| r.event == *e))
            .map(|(id, discarded_at)| CollectedCopy {
                id,
                discarded_at,
                missing,
            })
    }

    /// Under [`CollectedCheckpoints::Record`], makes the line `item`, when
    /// it copies a checkpoint of this store whose files gc collected (see
    /// [`Store::collected_copy`]), a record without them
    /// ([`without_collected`]), and says which checkpoint it copies. Any
    /// other line is left as it is, and so is every line under `Refuse`
    /// (whose check then refuses such a line, naming the option).
    fn settle_collected(
        &self,
        item: &mut Imported,
        mode: CollectedCheckpoints,
        file_name: &str,
    ) -> std::result::Result<Option<CollectedCopy>, String> {
        if mode != CollectedCheckpoints::Record {
            return Ok(None);
        }
        let Some(copy) = self.collected_copy(&item.event) else {
            return Ok(None);
        };
        without_collected(&mut item.event, &copy)
            .map_err(|why| format!("{file_name}:{}: {why}", item.line))?;
        Ok(Some(copy))
    }
}

/// A checkpoint of this store whose files gc collected, which an imported
/// `checkpoint.create` line copies ([`Store::collected_copy`]).
#[derive(Clone, Copy, Debug)]
struct CollectedCopy {
    /// The checkpoint.
    id: CheckpointId,
    /// Where it was discarded.
    discarded_at: Lsn,
    /// The first blob the line names that the store no longer holds, and
    /// its field.
    missing: (&'static str, BlobHash),
}

impl CollectedCopy {
    /// Why the line is refused without [`CollectedCheckpoints::Record`],
    /// and the option that records it.
    fn refusal(&self) -> String {
        let (field, h) = self.missing;
        let what = match field {
            "root" => "tree",
            "state" => "application state",
            _ => "blob",
        };
        format!(
            "the checkpoint.create event's `{field}` {h} is the {what} of checkpoint {id} of this store, discarded at LSN {at}, whose contents gc has since deleted: the line copies that checkpoint's record, which could never be restored; {RECORD_COLLECTED_OPTION} imports it as a checkpoint record without its files (one that says gc collected them, and cannot be rolled back to), or import into a store that still holds that {what}",
            id = self.id,
            at = self.discarded_at,
        )
    }
}

/// The blob hashes `e` names, with their fields.
fn blob_fields(e: &Event) -> impl Iterator<Item = (&'static str, BlobHash)> {
    [
        ("root", e.root),
        ("state", e.state),
        ("before", e.before),
        ("after", e.after),
        ("diff", e.diff),
    ]
    .into_iter()
    .filter_map(|(f, h)| Some((f, h?)))
}

/// `e`, a copy of the record of checkpoint `copy.id`, whose files gc
/// collected, as a checkpoint record without files: every blob hash it
/// names moves to `meta.collected` ([`cairn_snapshot::COLLECTED_KEY`]),
/// with the checkpoint it copies and where that one was discarded, so
/// nothing of the line is lost and the record says why it holds no tree.
/// Refused when the line's `meta` has that key already.
fn without_collected(e: &mut Event, copy: &CollectedCopy) -> std::result::Result<(), String> {
    let key = cairn_snapshot::COLLECTED_KEY;
    let mut note = serde_json::Map::new();
    for (field, h) in blob_fields(e) {
        note.insert(field.to_string(), h.to_string().into());
    }
    note.insert("checkpoint".into(), copy.id.to_string().into());
    note.insert("discarded_at".into(), copy.discarded_at.0.into());
    let meta = e.meta.get_or_insert_with(cairn_codec::event::Meta::default);
    if meta.0.contains_key(key) {
        return Err(format!(
            "the checkpoint.create event copies checkpoint {} of this store, whose files gc has since deleted, and its `meta` already has the key `{key}`, under which a record without them keeps the hashes it named: it cannot be recorded so",
            copy.id
        ));
    }
    meta.0.insert(key.into(), note.into());
    (e.root, e.state, e.before, e.after, e.diff) = (None, None, None, None, None);
    Ok(())
}

/// How much input an import holds in memory and appends as one atomic batch:
/// an input up to this size (a rotated cortexide file is at most 10 MB) is
/// recorded all or nothing, even across a crash; a longer one is appended
/// in batches of about this much, so memory stays bounded (a 133 MiB comma
/// file imported in 16 MiB batches peaks at 190 MB resident, against
/// 750 MB held whole) and no batch outgrows a segment (64 MiB by default).
pub const IMPORT_BATCH_INPUT_BYTES: u64 = 16 << 20;

/// The two bytes every gzip stream starts with (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Refuses gzip-compressed input (a rotated audit log) with a way to
/// import it, rather than failing on its first line as not UTF-8. Looks
/// at the buffered start of `reader` without consuming it.
fn refuse_gzip(reader: &mut dyn std::io::BufRead, name: &str, format: Format) -> Result<()> {
    let head = reader
        .fill_buf()
        .map_err(|e| Error::Other(format!("read {name}: {e}")))?;
    if head.starts_with(&GZIP_MAGIC) {
        let src = if name == "stdin" { "FILE" } else { name };
        return Err(Error::Other(format!(
            "{name} is gzip-compressed: use `zcat {src} | cairn import --format {} -`",
            format.name()
        )));
    }
    Ok(())
}

/// What the import journal says of an input, for [`Store::import_read`].
enum Known {
    /// Its first line is not read yet.
    Unread,
    /// Its first line is read: the journal file of its key, and what it
    /// says an earlier import of it recorded.
    Read(Progress),
}

/// An import's place in the journal file of its input's key.
struct Progress {
    /// The key.
    key: Key,
    /// The journal file, as last written.
    file: KeyFile,
    /// What an earlier import of the input recorded, by the journal.
    recorded: Option<Recorded>,
    /// The entry of `file` this import writes, once it has written one.
    entry: Option<usize>,
}

impl Progress {
    /// The entry this import writes: the one of the import it resumes,
    /// moved to the end (most recent) without the checkpoints past the one
    /// it resumes from (whose batches the log does not hold), or a new one
    /// whose first batch is to start at LSN `first` (`leading`: the input's
    /// first line was recorded already, as that LSN).
    fn entry_for(&mut self, first: u64, leading: Option<Lsn>) -> usize {
        if let Some(e) = self.entry {
            return e;
        }
        let entry = match self.recorded.take() {
            Some(r) => {
                let mut e = self.file.entries.remove(r.entry);
                e.checkpoints.truncate(r.checkpoint + 1);
                e
            }
            None => Entry {
                first_lsn: leading.map_or(first, |l| l.0),
                first_batch: first,
                checkpoints: Vec::new(),
            },
        };
        let e = self.file.add(entry);
        self.entry = Some(e);
        e
    }

    /// The last batch of `entry`, meant to take the LSNs from `first`,
    /// took `got` instead.
    fn moved(&mut self, entry: usize, first: u64, got: (Lsn, Lsn)) {
        let e = &mut self.file.entries[entry];
        if e.first_batch == first {
            e.first_batch = got.0 .0;
        }
        if e.first_lsn == first {
            e.first_lsn = got.0 .0;
        }
        if let Some(c) = e.checkpoints.last_mut() {
            (c.first, c.last) = (got.0 .0, got.1 .0);
        }
    }

    /// Writes the journal file.
    fn save(&self, store: &Store) -> Result<()> {
        import_journal::save(store.vfs(), store.root(), &self.key, &self.file)
    }
}

/// What an earlier import of an input recorded of it, by the journal.
#[derive(Clone, Debug)]
struct Recorded {
    /// Its entry in the journal file.
    entry: usize,
    /// The entry's checkpoint it got to.
    checkpoint: usize,
    /// The input's lines 1 to this are recorded.
    line: u64,
    /// The LSN of the first line's record and of the last's.
    lsns: (Lsn, Lsn),
}

/// How [`Store::import_read`] ended.
enum Read {
    /// Imported: what was recorded and skipped.
    Done(ImportReport),
    /// Nothing imported: the journal knows inputs that start as this one
    /// does, and whether it is one of them cannot be told in one pass.
    SeenBefore,
}

/// Why a line is refused: `e`, and for a torn last line (which `lines`
/// has just read), how to import the lines before it.
fn bad_line<R>(
    e: cairn_query::import::ImportError,
    lines: &cairn_query::import::Lines<R>,
) -> String {
    if lines.torn() {
        format!(
            "{e}; it is the last line and has no line end: its writer may have stopped part way through it (`ImportOptions::skip_torn_tail` imports the lines before it)"
        )
    } else {
        e.to_string()
    }
}

/// Why an input is refused as imported before, by the journal: its lines
/// 1 to `r.line` are recorded, and line `rest` is the first that is not
/// (`None`: every line is).
fn journal_imported_before(file: &str, r: &Recorded, rest: Option<u64>) -> String {
    let head = format!("{file}: the input looks imported before");
    recorded_lines(head, (r.line, r.lsns.0, r.lsns.1), rest)
}

/// Why an input is refused as imported before: its first event (at
/// `line`) and the `n` lines from it are recorded as LSN `a` to `b`, and
/// line `rest` is the first that is not (`None`: every line is).
fn imported_before(file: &str, line: u64, (n, a, b): (u64, Lsn, Lsn), rest: Option<u64>) -> String {
    let head = format!("{file}:{line}: this event is recorded already, as LSN {a}: the input looks imported before");
    recorded_lines(head, (n, a, b), rest)
}

/// `head`, then that the input's first `n` lines are recorded as LSN `a`
/// to `b`, and line `rest` is the first that is not (`None`: every line
/// is), and what to do.
fn recorded_lines(head: String, (n, a, b): (u64, Lsn, Lsn), rest: Option<u64>) -> String {
    let lsns = if n == 1 {
        format!("LSN {a}")
    } else {
        format!("LSN {a} to {b}")
    };
    match rest {
        None if n == 1 => format!("{head} (import it again with `ImportOptions::again()`)"),
        None => format!(
            "{head}: all its {n} lines are recorded, as {lsns} (import it again with `ImportOptions::again()`)"
        ),
        Some(rest) => format!(
            "{head}: its first {} recorded, as {lsns}, and the rest (from line {rest}) is not (import only the rest with `ImportOptions::resume()`, or all of it again with `ImportOptions::again()`)",
            if n == 1 { "line is".to_string() } else { format!("{n} lines are") },
        ),
    }
}

/// What an import has recorded so far, for its error messages.
#[derive(Default)]
struct ImportDone {
    /// The LSNs recorded.
    range: Option<(Lsn, Lsn)>,
    /// The checkpoint lines recorded without the files gc collected.
    collected: Vec<CollectedCheckpoint>,
    /// The input lines they came from: 1 to this.
    lines: u64,
}

impl ImportDone {
    /// An import error: `reason`, and what of `file` was recorded before it.
    fn error(&self, reason: String, file: &str) -> Error {
        Error::Other(self.say(reason, file))
    }

    /// A line of `file` refused ([`Error::Rejected`]): `reason` names it.
    fn rejected(&self, reason: String, file: &str) -> Error {
        Error::Rejected(self.say(reason, file))
    }

    fn say(&self, reason: String, file: &str) -> String {
        match self.range {
            None => format!("{reason} (nothing from {file} was recorded)"),
            Some((a, b)) => format!(
                "{reason} (lines 1 to {} of {file} were recorded before it, as LSN {a} to {b})",
                self.lines
            ),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `n` comma lines, line `bad` (from 1) with an absolute path.
    fn comma_lines(n: u64, bad: Option<u64>) -> String {
        (1..=n)
            .map(|i| {
                let path = if Some(i) == bad { "/etc/x".to_string() } else { format!("src/f{i}.rs") };
                format!(
                    "{{\"timestamp\":\"2026-11-22T02:05:00.000Z\",\"sessionId\":\"s\",\"agentName\":\"a\",\"toolName\":\"write_file\",\"operation\":\"write\",\"path\":\"{path}\",\"diff\":\"+line {i}\\n\",\"ok\":true}}\n"
                )
            })
            .collect()
    }

    #[test]
    fn a_long_import_is_appended_in_batches_and_says_what_it_recorded() {
        let store = Store::in_memory().unwrap();
        let input = comma_lines(50, None);
        let got = store
            .import_in_batches(
                Format::Comma,
                &mut input.as_bytes(),
                "a.jsonl",
                1024,
                ImportOptions::default(),
            )
            .unwrap();
        assert_eq!(got, Some((Lsn(1), Lsn(50))));
        let listed = store.query(|q| q.list(&Filter::all())).unwrap();
        assert_eq!(listed.len(), 50);
        assert_eq!(listed[49].event.path.as_deref(), Some("src/f50.rs"));
        let diff = listed[49].event.diff.unwrap();
        assert_eq!(store.blob(&diff).unwrap(), b"+line 50\n");

        // One pass over a reader: the batches before a bad line stay.
        let store = Store::in_memory().unwrap();
        let input = comma_lines(50, Some(40));
        let err = store
            .import_in_batches(
                Format::Comma,
                &mut input.as_bytes(),
                "b.jsonl",
                1024,
                ImportOptions::default(),
            )
            .unwrap_err()
            .to_string();
        let recorded = store.head().last_lsn.0;
        assert!(recorded > 0 && recorded < 40, "{recorded}");
        assert!(
            err.starts_with("b.jsonl:40: field `path`: `/etc/x` is absolute")
                && err.contains(&format!("(lines 1 to {recorded} of b.jsonl were recorded before it, as LSN 1 to {recorded})")),
            "{err}"
        );
        // Small input: one atomic batch, nothing recorded.
        let store = Store::in_memory().unwrap();
        let err = store
            .import(Format::Comma, &mut input.as_bytes(), "c.jsonl")
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("(nothing from c.jsonl was recorded)"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn.0, 0);
    }

    #[test]
    fn input_imported_before_is_refused_unless_again() {
        let store = Store::in_memory().unwrap();
        let input = comma_lines(3, None);
        let import =
            |opts| store.import_with(Format::Comma, &mut input.as_bytes(), "e.jsonl", opts);
        // Its events recorded otherwise (through the library, or by an
        // import the journal does not know): recognised by its first event.
        let mut events = Vec::new();
        for item in
            cairn_query::import::import_lines(Format::Comma, input.as_bytes(), "e.jsonl").unwrap()
        {
            for b in &item.blobs {
                store.put_blob(b).unwrap();
            }
            events.push(item.event);
        }
        assert_eq!(store.append_batch(&events).unwrap(), Some((Lsn(1), Lsn(3))));
        let err = import(ImportOptions::default()).unwrap_err().to_string();
        assert!(
            err.contains("e.jsonl:1: this event is recorded already, as LSN 1")
                && err.contains("`ImportOptions::again()`")
                && err.ends_with("(nothing from e.jsonl was recorded)"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn.0, 3);
        assert_eq!(
            import(ImportOptions::again()).unwrap(),
            Some((Lsn(4), Lsn(6)))
        );
        assert!(
            err.contains("all its 3 lines are recorded, as LSN 1 to 3"),
            "{err}"
        );
        // Imported: recognised by the journal, as the import it was.
        let err = import(ImportOptions::default()).unwrap_err().to_string();
        assert!(
            err.contains("e.jsonl: the input looks imported before: all its 3 lines are recorded, as LSN 4 to 6 (import it again with `ImportOptions::again()`)"),
            "{err}"
        );
        // Other input of the same millisecond is no re-import.
        let other = comma_lines(4, None).replace("src/f", "lib/f");
        let got = store
            .import(Format::Comma, &mut other.as_bytes(), "f.jsonl")
            .unwrap();
        assert_eq!(got, Some((Lsn(7), Lsn(10))));
    }

    /// Trial 11 P6: an input whose leading lines are recorded (an import
    /// cut short, an append-only file that grew) is refused saying how many
    /// are; `resume` imports only the rest, and again after it grows more.
    #[test]
    fn a_grown_or_interrupted_input_resumes_after_its_recorded_lines() {
        let store = Store::in_memory().unwrap();
        let import = |n, opts| {
            let input = comma_lines(n, None);
            store.import_with(Format::Comma, &mut input.as_bytes(), "g.jsonl", opts)
        };
        assert_eq!(
            import(3, ImportOptions::default()).unwrap(),
            Some((Lsn(1), Lsn(3)))
        );
        // Something else is recorded in between.
        let other = comma_lines(1, None).replace("src/f", "lib/f");
        store
            .import(Format::Comma, &mut other.as_bytes(), "o.jsonl")
            .unwrap();
        let err = import(5, ImportOptions::default()).unwrap_err().to_string();
        assert!(
            err.contains(
                "its first 3 lines are recorded, as LSN 1 to 3, and the rest (from line 4) is not"
            ) && err.contains("`ImportOptions::resume()`")
                && err.ends_with("(nothing from g.jsonl was recorded)"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn.0, 4);
        assert_eq!(
            import(5, ImportOptions::resume()).unwrap(),
            Some((Lsn(5), Lsn(6)))
        );
        // Grown again: its lines are recorded in two runs, with a gap.
        store
            .import_with(
                Format::Comma,
                &mut other.as_bytes(),
                "o.jsonl",
                ImportOptions::again(),
            )
            .unwrap();
        assert_eq!(
            import(8, ImportOptions::resume()).unwrap(),
            Some((Lsn(8), Lsn(10)))
        );
        // Nothing new: nothing to do.
        assert_eq!(import(8, ImportOptions::resume()).unwrap(), None);
        let paths: Vec<String> = store
            .query(|q| q.list(&Filter::all()))
            .unwrap()
            .into_iter()
            .filter_map(|r| r.event.path)
            .collect();
        let want: Vec<String> = [1, 2, 3]
            .iter()
            .map(|i| format!("src/f{i}.rs"))
            .chain(["lib/f1.rs".to_string()])
            .chain([4, 5].iter().map(|i| format!("src/f{i}.rs")))
            .chain(["lib/f1.rs".to_string()])
            .chain([6, 7, 8].iter().map(|i| format!("src/f{i}.rs")))
            .collect();
        assert_eq!(paths, want);
    }

    /// `n` canonical JSONL lines without `ts` (each gets the time of its
    /// import), line `i` a prompt `line i`.
    fn untimed_lines(n: u64) -> String {
        (1..=n)
            .map(|i| format!("{{\"kind\":\"prompt\",\"text\":\"line {i}\"}}\n"))
            .collect()
    }

    /// The texts of the store's records, in order.
    fn texts(store: &Store) -> Vec<String> {
        store
            .query(|q| q.list(&Filter::all()))
            .unwrap()
            .into_iter()
            .map(|r| r.event.text.unwrap_or_default())
            .collect()
    }

    fn lines_texts(range: std::ops::RangeInclusive<u64>) -> Vec<String> {
        range.map(|i| format!("line {i}")).collect()
    }

    /// Trial 14 T3: lines without `ts` cannot be recognised by their
    /// records (each got the time of its import), so an import cut short
    /// was resumed from the start and a re-import recorded every line
    /// twice. The journal says where the import got to: the guard refuses
    /// it, `resume` imports exactly the lines after, from a pipe too.
    #[test]
    fn lines_without_a_time_imported_before_are_recognised_and_resumed_exactly() {
        let store = Store::in_memory().unwrap();
        let import = |n, opts| {
            let input = untimed_lines(n);
            store.import_in_batches(Format::Jsonl, &mut input.as_bytes(), "u.jsonl", 64, opts)
        };
        // An import cut short after its first 3 lines (in 2 batches).
        assert_eq!(
            import(3, ImportOptions::default()).unwrap(),
            Some((Lsn(1), Lsn(3)))
        );
        let err = import(10, ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("u.jsonl: the input looks imported before: its first 3 lines are recorded, as LSN 1 to 3, and the rest (from line 4) is not (import only the rest with `ImportOptions::resume()`")
                && err.ends_with("(nothing from u.jsonl was recorded)"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn.0, 3);
        store.session("s").prompt("between").unwrap();
        assert_eq!(
            import(10, ImportOptions::resume()).unwrap(),
            Some((Lsn(5), Lsn(11)))
        );
        // It went on in whole batches (of 2 lines), each written down: the
        // lines skipped start none.
        let key = import_journal::key_of(br#"{"kind":"prompt","text":"line 1"}"#);
        let file = import_journal::load(store.vfs(), store.root(), &key).unwrap();
        let lines: Vec<u64> = file.entries[0].checkpoints.iter().map(|c| c.line).collect();
        assert_eq!((file.entries.len(), lines), (1, vec![2, 3, 5, 7, 9, 10]));
        let err = import(10, ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("u.jsonl: the input looks imported before: all its 10 lines are recorded, as LSN 1 to 11 (import it again with `ImportOptions::again()`)"),
            "{err}"
        );
        assert_eq!(import(10, ImportOptions::resume()).unwrap(), None);
        let want: Vec<String> = lines_texts(1..=3)
            .into_iter()
            .chain(["between".to_string()])
            .chain(lines_texts(4..=10))
            .collect();
        assert_eq!(texts(&store), want);
        // Again: all of it, once more; then that import is the one known.
        assert_eq!(
            import(10, ImportOptions::again()).unwrap(),
            Some((Lsn(12), Lsn(21)))
        );
        let err = import(10, ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("all its 10 lines are recorded, as LSN 12 to 21"),
            "{err}"
        );
        // Another input that starts with the same line is no re-import
        // (imported in another millisecond: in the same one, its first
        // line's event would equal the record of the first line above).
        std::thread::sleep(std::time::Duration::from_millis(5));
        let other = untimed_lines(1) + "{\"kind\":\"prompt\",\"text\":\"other\"}\n";
        let got = store
            .import(Format::Jsonl, &mut other.as_bytes(), "o.jsonl")
            .unwrap();
        assert_eq!(got, Some((Lsn(22), Lsn(23))));
    }

    /// An input that starts as one imported before but differs from it
    /// (or ends) before where that import got to: which of the lines in
    /// between are recorded cannot be told, so it is refused, not guessed.
    #[test]
    fn an_input_that_parts_from_one_imported_before_is_refused() {
        let store = Store::in_memory().unwrap();
        let import = |input: &str, opts| {
            store.import_in_batches(Format::Jsonl, &mut input.as_bytes(), "p.jsonl", 64, opts)
        };
        import(&untimed_lines(10), ImportOptions::default()).unwrap();
        let cut = untimed_lines(5);
        let changed = untimed_lines(5) + &untimed_lines(10).replace("line", "LINE");
        for input in [&cut, &changed] {
            for opts in [ImportOptions::default(), ImportOptions::resume()] {
                let err = import(input, opts).unwrap_err().to_string();
                assert!(
                    err.contains("cairn cannot tell which lines of the input are recorded: an import of an input that starts as this one does recorded its lines 1 to 10, as LSN 1 to 10; this input has the same lines 1 to 4, but differs from that one, or ends, before its line 10")
                        && err.contains("`ImportOptions::again()`"),
                    "{err}"
                );
            }
        }
        assert_eq!(store.head().last_lsn.0, 10);
        assert_eq!(
            import(&cut, ImportOptions::again()).unwrap(),
            Some((Lsn(11), Lsn(15)))
        );
    }

    /// The journal is written before each batch is appended: an import
    /// killed at any file operation (the store on a crash-simulating disk)
    /// and resumed records every line exactly once, in order, and is then
    /// recognised as imported.
    #[test]
    fn an_import_of_lines_without_a_time_killed_anywhere_resumes_exactly() {
        use cairn_engine::vfs::{Fault, SimVfs, Vfs};
        use std::sync::atomic::{AtomicBool, AtomicU64};
        use std::sync::Arc;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("u.jsonl");
        std::fs::write(&path, untimed_lines(12)).unwrap();
        // Crashes, and the records they left, summed.
        let (mut crashes, mut recorded) = (0, 0);
        for k in 0.. {
            let disk = SimVfs::seeded(k);
            let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
            vfs.create_dir_all(Path::new("/s")).unwrap();
            vfs.sync_dir(Path::new("/")).unwrap();
            let open = || {
                Store::builder()
                    .store_dir("/s/.cairn")
                    .workspace(tmp.path())
                    .snapshot_cache_dir(tmp.path().join("cache"))
                    .vfs(vfs.clone())
                    .open()
                    .unwrap()
            };
            let store = open();
            let (count, dead) = (
                Arc::new(AtomicU64::new(0)),
                Arc::new(AtomicBool::new(false)),
            );
            let died = dead.clone();
            disk.set_fault_hook(move |_| {
                if count.fetch_add(1, Ordering::SeqCst) >= k {
                    dead.store(true, Ordering::SeqCst);
                    Some(Fault::WriteEio)
                } else {
                    None
                }
            });
            let got =
                store.import_file_in_batches(Format::Jsonl, &path, 64, ImportOptions::default());
            if !died.load(Ordering::SeqCst) {
                assert_eq!(got.unwrap(), Some((Lsn(1), Lsn(12))));
                assert!(crashes > 40 && recorded > 100, "{crashes} {recorded}");
                break;
            }
            drop(store);
            if k % 2 == 0 {
                disk.crash();
            } else {
                disk.crash_tearing();
            }
            disk.clear_faults();
            crashes += 1;
            let store = open();
            recorded += store.head().last_lsn.0;
            store
                .import_file_in_batches(Format::Jsonl, &path, 64, ImportOptions::resume())
                .unwrap_or_else(|e| panic!("crash at file operation {k}: {e}"));
            assert_eq!(
                texts(&store),
                lines_texts(1..=12),
                "crash at file operation {k}"
            );
            let err = store
                .import_file_in_batches(Format::Jsonl, &path, 64, ImportOptions::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("all its 12 lines are recorded"),
                "crash at file operation {k}: {err}"
            );
        }
    }

    #[test]
    fn a_file_is_checked_whole_before_any_batch_is_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::in_memory().unwrap();
        let path = tmp.path().join("d.jsonl");
        std::fs::write(&path, comma_lines(50, Some(40))).unwrap();
        let err = store
            .import_file_in_batches(Format::Comma, &path, 1024, ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("d.jsonl:40: field `path`") && err.contains("(nothing from"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn.0, 0, "nothing recorded");
        std::fs::write(&path, comma_lines(50, None)).unwrap();
        let got = store
            .import_file_in_batches(Format::Comma, &path, 1024, ImportOptions::default())
            .unwrap();
        assert_eq!(got, Some((Lsn(1), Lsn(50))));
    }

    /// Trial 15, U11: an input whose last line is torn (its writer stopped
    /// part way through it) is refused, saying how to import the lines
    /// before it; with `skip_torn_tail` they are imported (in batches too)
    /// and the torn line is reported, and once the writer has completed it,
    /// a resumed import records it and what follows. Read from a file and
    /// from a reader, which is read once.
    #[test]
    fn a_torn_last_line_is_skipped_when_asked_and_resumed_once_complete() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.jsonl");
        let whole = comma_lines(8, None);
        let line6 = whole.match_indices('\n').nth(4).unwrap().0 + 1;
        let torn = &whole[..line6 + 40]; // lines 1 to 5, and 40 bytes of line 6
        let skip = ImportOptions::default().with_skip_torn_tail(true);
        // In batches of `batch` bytes of input.
        type Import<'a> = dyn Fn(&Store, &str, ImportOptions, u64) -> Result<ImportReport> + 'a;
        let from_file: &Import = &|store, input, opts, batch| {
            std::fs::write(&path, input).unwrap();
            store.import_file_batched(Format::Comma, &path, batch, opts)
        };
        let from_reader: &Import = &|store, input, opts, batch| {
            store.import_batched(Format::Comma, &mut input.as_bytes(), "t.jsonl", batch, opts)
        };
        // Line 6 completed, or the torn bytes replaced by another line 6
        // (a writer that cut its torn tail off before going on): either
        // way the lines 1 to 5 a resume skips are the same.
        let mut lines: Vec<String> = whole.lines().map(|l| format!("{l}\n")).collect();
        lines[5] = lines[5].replace("02:05:00", "02:06:00");
        let rewritten = lines.concat();
        let cases = [from_file, from_reader]
            .into_iter()
            .flat_map(|import| [(import, &whole), (import, &rewritten)]);
        for (import, later) in cases {
            let store = Store::in_memory().unwrap();
            // (Read once, a reader's batches are recorded as they are read:
            // one batch, to record nothing.)
            let err = import(&store, torn, ImportOptions::default(), 1 << 20)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("t.jsonl:6: invalid JSON (cut short)")
                    && err.contains("; it is the last line and has no line end: its writer may have stopped part way through it (`ImportOptions::skip_torn_tail` imports the lines before it)")
                    && err.contains("(nothing from ")
                    && err.ends_with("t.jsonl was recorded)"),
                "{err}"
            );
            assert_eq!(store.head().last_lsn.0, 0);
            let got = import(&store, torn, skip, 300).unwrap();
            let torn_tail = Some(TornTail { line: 6, bytes: 40 });
            assert_eq!(got.range, Some((Lsn(1), Lsn(5))));
            assert_eq!(got.torn_tail, torn_tail);
            // Still torn: imported before, all but the torn line.
            let err = import(&store, torn, skip, 300).unwrap_err().to_string();
            assert!(
                err.contains("its first 5 lines are recorded, as LSN 1 to 5, and the rest (from line 6) is not"),
                "{err}"
            );
            let resume_skip = ImportOptions::resume().with_skip_torn_tail(true);
            let got = import(&store, torn, resume_skip, 300);
            assert_eq!(
                got.unwrap(),
                ImportReport {
                    range: None,
                    torn_tail,
                    collected: Vec::new(),
                }
            );
            // The writer completes line 6, and writes two more.
            let got = import(&store, later, ImportOptions::resume(), 300).unwrap();
            assert_eq!((got.range, got.torn_tail), (Some((Lsn(6), Lsn(8))), None));
            let paths: Vec<String> = store
                .query(|q| q.list(&Filter::all()))
                .unwrap()
                .into_iter()
                .filter_map(|r| r.event.path)
                .collect();
            let want: Vec<String> = (1..=8).map(|i| format!("src/f{i}.rs")).collect();
            assert_eq!(paths, want);
        }

        // Only the last line can be torn: a bad line before it is refused
        // with the option too; a last line that is whole JSON but bad is
        // bad, not torn.
        let store = Store::in_memory().unwrap();
        let bad = comma_lines(8, Some(3));
        let err = from_file(&store, &bad[..line6 + 40], skip, 300)
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.jsonl:3: field `path`"), "{err}");
        let bad = comma_lines(6, Some(6));
        let err = from_file(&store, bad.trim_end(), skip, 300)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.jsonl:6: field `path`") && !err.contains("last line"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn.0, 0);
    }

    /// A store in `ws` with checkpoints c1 to c3 of `f` (`1`, `2`, `3`),
    /// of which a compacting gc keeping one per session discarded c1 and
    /// c2 (at LSN 4 and 5) and deleted their trees; and its export.
    fn collected_store(ws: &Path) -> (Store, Vec<u8>) {
        let store = Store::open(ws).unwrap();
        let s = store.session("");
        for i in 1..=3 {
            std::fs::write(ws.join("f"), format!("{i}\n")).unwrap();
            s.checkpoint(&format!("c{i}")).unwrap();
        }
        let policy = crate::RetentionPolicy {
            keep_per_session: Some(1),
            ..crate::RetentionPolicy::default()
        };
        store.gc_compact(&policy).unwrap();
        let export = own_export(&store);
        (store, export)
    }

    /// The whole of `store`, exported as canonical JSONL.
    fn own_export(store: &Store) -> Vec<u8> {
        let mut export = Vec::new();
        store
            .export(&Filter::all(), Format::Jsonl, &mut export)
            .unwrap();
        export
    }

    /// Imports `input`, canonical JSONL named `name`, into `store` with
    /// `ImportOptions::again()`.
    fn import_again(store: &Store, input: &[u8], name: &str) -> Result<Option<(Lsn, Lsn)>> {
        store.import_with(Format::Jsonl, &mut &input[..], name, ImportOptions::again())
    }

    /// The kinds of the records `lsns`, in order.
    fn kinds(store: &Store, lsns: std::ops::RangeInclusive<u64>) -> Vec<EventKind> {
        lsns.map(|l| store.record(Lsn(l)).unwrap().event.kind)
            .collect()
    }

    #[test]
    fn a_stores_own_export_after_gc_imports_back_with_its_collected_checkpoints_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, export) = collected_store(tmp.path());
        let import =
            |opts| store.import_reporting(Format::Jsonl, &mut &export[..], "ex.jsonl", opts);

        // Refused, naming the checkpoint it copies and the option.
        let err = import(ImportOptions::again()).unwrap_err().to_string();
        assert!(
            err.starts_with("ex.jsonl:1: the checkpoint.create event's `root` ")
                && err.contains("is the tree of checkpoint c1 of this store, discarded at LSN 4, whose contents gc has since deleted")
                && err.contains(RECORD_COLLECTED_OPTION)
                && !err.contains("import the lines after it")
                && err.ends_with("(nothing from ex.jsonl was recorded)"),
            "{err}"
        );
        assert_eq!(store.head().last_lsn, Lsn(5));

        // Recorded without their files, and said so; the discards, copies
        // of the records that discarded c1 and c2, as they are.
        let opts = ImportOptions::again().with_collected_checkpoints(CollectedCheckpoints::Record);
        let got = import(opts).unwrap();
        assert_eq!(got.range, Some((Lsn(6), Lsn(10))));
        let copied = |line, id, copy_of, discarded_at| CollectedCheckpoint {
            line,
            id: CheckpointId(Lsn(id)),
            copy_of: CheckpointId(Lsn(copy_of)),
            discarded_at: Lsn(discarded_at),
        };
        assert_eq!(got.collected, vec![copied(1, 6, 1, 4), copied(2, 7, 2, 5)]);
        assert_eq!(kinds(&store, 6..=10), kinds(&store, 1..=5));
        for (copy, of, at) in [(6, 1, 4), (7, 2, 5)] {
            let (copy, of) = (
                store.record(Lsn(copy)).unwrap().event,
                store.record(Lsn(of)).unwrap().event,
            );
            assert_eq!((copy.root, copy.state), (None, None));
            assert_eq!(
                (&copy.label, copy.ts, &copy.counts),
                (&of.label, of.ts, &of.counts)
            );
            let note = &copy.meta.as_ref().unwrap().0[cairn_snapshot::COLLECTED_KEY];
            assert_eq!(
                note,
                &serde_json::json!({
                    "root": of.root.unwrap().to_hex(),
                    "checkpoint": format!("c{}", at - 3),
                    "discarded_at": at,
                })
            );
        }
        assert_eq!(
            store.record(Lsn(8)).unwrap().event,
            store.record(Lsn(3)).unwrap().event
        );
        assert_eq!(
            store.record(Lsn(9)).unwrap().event,
            store.record(Lsn(4)).unwrap().event
        );

        // No checkpoint: a rollback to one is refused, saying why.
        let e = store
            .rollback(cairn_snapshot::RollbackRequest::new(CheckpointId(Lsn(6))))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Snapshot(cairn_snapshot::SnapshotError::CollectedCheckpoint {
                    copy_of: Some(CheckpointId(Lsn(1))),
                    ..
                })
            ),
            "{e:?}"
        );
        let ids: Vec<u64> = store
            .checkpoints(None)
            .unwrap()
            .iter()
            .map(|c| c.id.0 .0)
            .collect();
        assert_eq!(ids, vec![1, 2, 3, 8]);
        // gc and verify find nothing wrong with them.
        let report = store.gc(&crate::RetentionPolicy::default()).unwrap();
        assert!(report.damaged.is_empty() && report.collected, "{report:?}");
        assert!(store.verify(None).unwrap().is_ok());
        // Their own export imports back as it is.
        let mut again = Vec::new();
        let only_copies = Filter {
            since_lsn: Some(Lsn(6)),
            ..Filter::all()
        };
        store
            .export(&only_copies, Format::Jsonl, &mut again)
            .unwrap();
        let got = store
            .import_reporting(
                Format::Jsonl,
                &mut &again[..],
                "again.jsonl",
                ImportOptions::again(),
            )
            .unwrap();
        assert_eq!(
            (got.range, got.collected),
            (Some((Lsn(11), Lsn(15))), Vec::new())
        );
    }

    #[test]
    fn a_checkpoint_whose_state_gc_collected_but_not_its_tree_is_a_collected_one_too() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        let store = Store::open(ws).unwrap();
        let s = store.session("");
        std::fs::write(ws.join("f"), "same\n").unwrap();
        s.safe_point(crate::SafePoint::BeforeTurn(1), Some(b"epoch 1".to_vec()))
            .unwrap();
        s.safe_point(crate::SafePoint::BeforeTurn(2), Some(b"epoch 2".to_vec()))
            .unwrap();
        let policy = crate::RetentionPolicy {
            keep_per_session: Some(1),
            ..crate::RetentionPolicy::default()
        };
        store.gc_compact(&policy).unwrap();
        let first = store.record(Lsn(1)).unwrap().event;
        assert!(
            store.blobs.contains(&first.root.unwrap()),
            "the tree c2 has too"
        );
        assert!(!store.blobs.contains(&first.state.unwrap()));
        let export = own_export(&store);
        let err = import_again(&store, &export, "ex.jsonl")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ex.jsonl:1: the checkpoint.create event's `state` ")
                && err.contains(
                    "is the application state of checkpoint c1 of this store, discarded at LSN 3"
                ),
            "{err}"
        );
        let opts = ImportOptions::again().with_collected_checkpoints(CollectedCheckpoints::Record);
        let got = store
            .import_reporting(Format::Jsonl, &mut &export[..], "ex.jsonl", opts)
            .unwrap();
        assert_eq!(got.collected.len(), 1);
        let copy = store.record(Lsn(4)).unwrap().event;
        assert_eq!((copy.root, copy.state), (None, None));
        let note = &copy.meta.as_ref().unwrap().0[cairn_snapshot::COLLECTED_KEY];
        assert_eq!(note["state"], first.state.unwrap().to_hex());
        assert_eq!(note["root"], first.root.unwrap().to_hex());
    }

    #[test]
    fn a_discard_copied_from_the_store_imports_but_another_of_a_discarded_checkpoint_does_not() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        let store = Store::open(ws).unwrap();
        let s = store.session("");
        for i in 1..=2 {
            std::fs::write(ws.join("f"), format!("{i}\n")).unwrap();
            s.checkpoint(&format!("c{i}")).unwrap();
        }
        let mut discard = cairn_codec::Event::new(EventKind::CheckpointDiscard, "default");
        discard.checkpoint = Some(CheckpointId(Lsn(1)));
        store.append(&discard).unwrap();
        // The store's own export, no gc since: every line imports.
        let export = own_export(&store);
        let got = import_again(&store, &export, "ex.jsonl").unwrap();
        assert_eq!(got, Some((Lsn(4), Lsn(6))));
        assert_eq!(store.record(Lsn(6)).unwrap().event, discard);
        // Twice in one input too.
        let twice = [&export[..], &export[..]].concat();
        import_again(&store, &twice, "twice.jsonl").unwrap();
        // A discard of c1 that says anything else, and one appended
        // through the library, are refused as ever.
        let other = br#"{"kind":"checkpoint.discard","checkpoint":"c1","text":"mine"}"#;
        let err = import_again(&store, other, "other.jsonl")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "other.jsonl:1: field `checkpoint` names c1, which was already discarded at LSN 3"
            ),
            "{err}"
        );
        let err = store.append(&discard).unwrap_err().to_string();
        assert!(err.contains("already discarded at LSN 3"), "{err}");
    }
}
