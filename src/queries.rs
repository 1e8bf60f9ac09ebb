//! Queries, verification, export and import through the [`Store`] handle.
//!
//! The query indexes are folds over the log kept in memory, caught up from
//! the log before every query (so they are never stale), persisted under
//! `.cairn/index/` on close and rebuilt from the log when missing or stale.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;

use cairn_codec::{BlobHash, ChainHash, CheckpointId, Lsn};
use cairn_engine::log::{Head, LogReader, LogStats, Record, VerifyReport};
use cairn_engine::EngineError;
use cairn_query::export::{ExportStats, Format};
use cairn_query::import::Imported;
use cairn_query::index::{Index, OpenOutcome};
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

/// How [`Store::import_with`] imports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportOptions {
    /// Import even if the input's first event is recorded already (by
    /// default such input is refused as imported before).
    pub again: bool,
    /// Skip the leading lines of the input that are recorded already (each
    /// line's event equal to a record after the previous line's, in
    /// order, as the first line is matched) and import the rest: an
    /// import that was interrupted, or an append-only file that grew
    /// since it was imported, goes on where the store stops.
    pub resume: bool,
}

impl ImportOptions {
    /// Options that import input recorded already, again.
    pub fn again() -> ImportOptions {
        ImportOptions {
            again: true,
            resume: false,
        }
    }

    /// Options that skip the leading lines recorded already and import
    /// the rest (see [`ImportOptions::resume`]).
    pub fn resume() -> ImportOptions {
        ImportOptions {
            again: false,
            resume: true,
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
    /// Input whose first event is recorded already (the same time, kind,
    /// session and contents) is refused as imported before; see
    /// [`Store::import_with`] to import it again.
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
        self.import_in_batches(format, reader, file_name, IMPORT_BATCH_INPUT_BYTES, opts)
    }

    /// [`Store::import`] with batches of `batch_bytes` of input.
    fn import_in_batches(
        &self,
        format: Format,
        reader: &mut dyn std::io::BufRead,
        file_name: &str,
        batch_bytes: u64,
        opts: ImportOptions,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.writer("import")?;
        refuse_gzip(reader, file_name, format)?;
        let mut lines = cairn_query::import::lines(format, reader, file_name);
        let mut batch: Vec<Imported> = Vec::new();
        let mut batch_from = 0u64;
        let mut done = ImportDone::default();
        let mut first = true;
        // The leading lines recorded already: how many, the LSNs of the
        // first and the last; `None` once a line is not (or never was).
        let mut recorded: Option<(u64, Lsn, Lsn)> = None;
        let mut first_line = 0;
        loop {
            match lines.next() {
                Some(Ok(mut item)) => {
                    item.settle_blobs(|h| self.blobs.contains(h));
                    if std::mem::take(&mut first) && !opts.again {
                        if let Some(at) = self.recorded_after(&item.event, None)? {
                            recorded = Some((1, at, at));
                            first_line = item.line;
                            continue;
                        }
                    } else if let Some((n, a, b)) = recorded {
                        if let Some(at) = self.recorded_after(&item.event, Some(b))? {
                            recorded = Some((n + 1, a, at));
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
                    batch.push(item)
                }
                Some(Err(e)) => return Err(done.rejected(e.to_string(), file_name)),
                None => break,
            }
            if lines.bytes_read() - batch_from >= batch_bytes {
                self.import_batch(&mut batch, file_name, &mut done)?;
                batch_from = lines.bytes_read();
            }
        }
        if let (Some(r), false) = (recorded, opts.resume) {
            return Err(done.rejected(imported_before(file_name, first_line, r, None), file_name));
        }
        self.import_batch(&mut batch, file_name, &mut done)?;
        Ok(done.range)
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
        self.import_file_in_batches(format, path, IMPORT_BATCH_INPUT_BYTES, opts)
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
    fn import_file_in_batches(
        &self,
        format: Format,
        path: &Path,
        batch_bytes: u64,
        opts: ImportOptions,
    ) -> Result<Option<(Lsn, Lsn)>> {
        self.writer("import")?;
        let name = path.display().to_string();
        let open = || {
            std::fs::File::open(path)
                .map(std::io::BufReader::new)
                .map_err(|e| Error::Other(format!("open {name}: {e}")))
        };
        let meta =
            std::fs::metadata(path).map_err(|e| Error::Other(format!("open {name}: {e}")))?;
        if meta.is_dir() {
            return Err(Error::Other(format!(
                "{name} is a directory: import reads files (name the files in it)"
            )));
        }
        if meta.is_file() {
            // (A pipe is read once, by the import below, which refuses
            // gzip too: sniffing it here would lose its first bytes.)
            let mut input = open()?;
            refuse_gzip(&mut input, &name, format)?;
            let nothing = ImportDone::default();
            for item in cairn_query::import::lines(format, input, &name) {
                let mut item = item.map_err(|e| nothing.rejected(e.to_string(), &name))?;
                item.settle_blobs(|h| self.blobs.contains(h));
                self.check_imported(&item, &name)
                    .map_err(|e| nothing.rejected(e, &name))?;
            }
        }
        self.import_in_batches(format, &mut open()?, &name, batch_bytes, opts)
    }

    /// Stores the blobs of `batch`, checks its events and appends them as
    /// one atomic batch; empties `batch`.
    fn import_batch(
        &self,
        batch: &mut Vec<Imported>,
        file_name: &str,
        done: &mut ImportDone,
    ) -> Result<()> {
        let Some(last_line) = batch.last().map(|i| i.line) else {
            return Ok(());
        };
        let mut events = Vec::with_capacity(batch.len());
        for item in batch.drain(..) {
            for b in &item.blobs {
                self.put_unreferenced(b).map_err(|e| {
                    let why = format!("{file_name}:{}: store its blob: {e}", item.line);
                    done.error(why, file_name)
                })?;
            }
            self.check_imported(&item, file_name)
                .map_err(|e| done.rejected(e, file_name))?;
            self.check_refs(&item.event, &events).map_err(|why| {
                done.rejected(format!("{file_name}:{}: {why}", item.line), file_name)
            })?;
            events.push(item.event);
        }
        let got = self
            .append_batch(&events)
            .map_err(|e| done.error(e.to_string(), file_name))?;
        if let Some((first, last)) = got {
            done.range = Some((done.range.map_or(first, |r| r.0), last));
            done.lines = last_line;
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
            Some(h) => Err(at(match self.collected_tree_of(h) {
                Some((id, discarded)) => format!(
                    "the {} event's `root` {h} is the tree of checkpoint {id} of this store, discarded at LSN {discarded}, whose contents gc has since deleted: a checkpoint whose tree is gone cannot be imported (it could never be restored); import the lines after it, or into a store that still holds that tree",
                    e.kind
                ),
                None => format!(
                    "the {} event refers to blob {h}, which is not in this store (canonical JSONL carries blob hashes, not contents: import an export into the store it came from, or a store holding its blobs)",
                    e.kind
                ),
            })),
            None => self.bad_root(&item.event).map_or(Ok(()), |why| Err(at(why))),
        }
    }

    /// The discarded checkpoint of this store whose tree `root` was, and
    /// where it was discarded: when an import names a tree gc collected,
    /// the error says so instead of suggesting another store.
    fn collected_tree_of(&self, root: BlobHash) -> Option<(CheckpointId, Lsn)> {
        self.query(|q| {
            Ok(q.index()
                .checkpoints(None)
                .into_iter()
                .find(|c| c.root == Some(root) && c.discarded_at.is_some())
                .and_then(|c| Some((c.id, c.discarded_at?))))
        })
        .ok()
        .flatten()
    }
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

/// Why an input is refused as imported before: its first event (at
/// `line`) and the `n` lines from it are recorded as LSN `a` to `b`, and
/// line `rest` is the first that is not (`None`: every line is).
fn imported_before(file: &str, line: u64, (n, a, b): (u64, Lsn, Lsn), rest: Option<u64>) -> String {
    let head = format!("{file}:{line}: this event is recorded already, as LSN {a}: the input looks imported before");
    let lsns = if n == 1 {
        format!("LSN {a}")
    } else {
        format!("LSN {a} to {b}")
    };
    match rest {
        None if n == 1 => format!("{head} (import it again with --again)"),
        None => format!(
            "{head}: all its {n} lines are recorded, as {lsns} (import it again with --again)"
        ),
        Some(rest) => format!(
            "{head}: its first {} recorded, as {lsns}, and the rest (from line {rest}) is not (import only the rest with --resume, or all of it again with --again)",
            if n == 1 { "line is".to_string() } else { format!("{n} lines are") },
        ),
    }
}

/// What an import has recorded so far, for its error messages.
#[derive(Default)]
struct ImportDone {
    /// The LSNs recorded.
    range: Option<(Lsn, Lsn)>,
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
        assert_eq!(
            import(ImportOptions::default()).unwrap(),
            Some((Lsn(1), Lsn(3)))
        );
        let err = import(ImportOptions::default()).unwrap_err().to_string();
        assert!(
            err.contains("e.jsonl:1: this event is recorded already, as LSN 1")
                && err.contains("--again")
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
            ) && err.contains("--resume")
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
}
