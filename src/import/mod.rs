//! Import: reading JSONL (canonical, or a reference shape) into a store.
//!
//! The orchestration lives here: inputs checked whole before any batch,
//! atomic batches of bounded size, the journal of where each input got to
//! (`journal.rs`, under `.cairn/imports/`) that `--resume` and the
//! imported-before guard go by, torn last lines, and the copies of
//! checkpoints whose files gc collected. Parsing a line is the query
//! crate's (`cairn_query::import`).

use std::io::Write;
use std::path::Path;

use cairn_codec::{BlobHash, CheckpointId, Event, EventKind, Lsn};
use cairn_engine::log::Record;
use cairn_query::export::Format;
use cairn_query::import::Imported;
use cairn_query::Filter;

use crate::error::{Error, Result};
use crate::Store;

pub(crate) mod agent;
pub mod claude_code;
pub mod codex;
pub(crate) mod journal;
mod refusal;
pub mod swe_agent;

pub use agent::AgentCounts;
pub use refusal::{ImportOption, Refusal};

use journal::{Checkpoint, Entry, Hashing, Key, KeyFile};

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

impl Store {
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
            item.settle_blobs(|h| self.blobs.get().is_ok_and(|b| b.contains(h)));
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
                let key = journal::key_of(lines.line_bytes());
                let file = journal::load(self.vfs(), self.root(), &key)?;
                if !opts.again {
                    lines.get_mut().watch(file.ends());
                }
                journal = Some((key, file));
            }
        }
        drop(lines);
        let known = self.known_of(journal, &input, name, opts.again)?;
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

    /// What the check of an input found in the import journal: nothing
    /// if it read no line; else the journal's file for the input and,
    /// unless importing `again`, what an earlier import recorded of it.
    fn known_of(
        &self,
        journal: Option<(Key, KeyFile)>,
        input: &Hashing<impl std::io::BufRead>,
        name: &str,
        again: bool,
    ) -> Result<Known> {
        let Some((key, file)) = journal else {
            return Ok(Known::Unread);
        };
        let recorded = match again {
            true => None,
            false => self.recorded_by(&file, input, name)?,
        };
        Ok(Known::Read(Progress {
            key,
            file,
            recorded,
            entry: None,
        }))
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
                Error::Rejected(
                    Refusal::new(format!(
                        "{name}: cairn cannot tell which lines of the input are recorded: {why}; import only the lines the store lacks (`tail -n +LINE`), or all of it again with "
                    ))
                    .option(ImportOption::Again)
                    .text(format!(" (nothing from {name} was recorded)")),
                )
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
            && journal::digest(records.iter().map(|r| &r.event))? == c.digest)
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
        let mut skip = Skipping::new(&known);
        let mut lines = cairn_query::import::lines(format, input, file_name);
        let mut pending = Pending::default();
        let mut done = ImportDone::default();
        let mut torn_tail = None;
        loop {
            if opts.skip_torn_tail {
                // Where the line to read begins: the end of what is
                // recorded, should it be a torn last line.
                lines.get_mut().mark();
            }
            match lines.next() {
                Some(Ok(item)) => {
                    if let Known::Unread = known {
                        let Some(progress) = self.first_line_progress(lines.line_bytes(), &opts)?
                        else {
                            return Ok(Read::SeenBefore);
                        };
                        lines.get_mut().take_kept(); // not needed: keep no more
                        known = Known::Read(progress);
                    }
                    let skipped = lines.get_ref().position();
                    let held = (&mut skip, &mut pending, &done);
                    if !self.take_line(item, skipped, held, &opts, file_name)? {
                        continue;
                    }
                }
                Some(Err(_)) if opts.skip_torn_tail && lines.torn() => {
                    let (line, bytes) = (lines.line(), lines.line_bytes().len() as u64);
                    torn_tail = Some(TornTail { line, bytes });
                    break;
                }
                Some(Err(e)) => return Err(done.rejected(bad_line(e, &lines), file_name)),
                None => break,
            }
            let end = lines.get_ref().position();
            // (The journal is known once a line is read: a batch holds one.)
            if let (true, Known::Read(progress)) = (end - pending.from >= batch_bytes, &mut known) {
                let at = (end, lines.get_ref().hash());
                pending.import(self, progress, at, file_name, &mut done, skip.leading_first)?;
                pending.from = end;
            }
        }
        // (A torn last line skipped is the rest, once completed.)
        let rest = torn_tail.map(|t| t.line);
        skip.refuse_unless_resumed(&opts, file_name, &done, rest)?;
        // The last checkpoint covers the whole input, blank lines after its
        // last line too; all but a torn last line, which may be completed.
        if let Known::Read(progress) = &mut known {
            let input = lines.get_ref();
            let at = match torn_tail {
                Some(_) => input.marked(),
                None => (input.position(), input.hash()),
            };
            pending.import(self, progress, at, file_name, &mut done, skip.leading_first)?;
        }
        Ok(done.report(torn_tail))
    }

    /// Takes a line read, `item`, which ends at `end` in the input: held
    /// in `pending` for the next batch (`true`), or skipped as recorded by
    /// an earlier import (`false`; a line skipped starts no batch, so the
    /// next one counts its input from after it). `done` says what is
    /// recorded, for a refusal.
    fn take_line(
        &self,
        mut item: Imported,
        end: u64,
        (skip, pending, done): (&mut Skipping, &mut Pending, &ImportDone),
        opts: &ImportOptions,
        file_name: &str,
    ) -> Result<bool> {
        item.settle_blobs(|h| self.blobs.get().is_ok_and(|b| b.contains(h)));
        if skip.recorded_before(self, &item, opts, file_name, done)? {
            pending.from = end;
            return Ok(false);
        }
        // (After the lines recorded before are found: they are found by
        // the line as it is, as the store recorded it.)
        let copy = self
            .settle_collected(&mut item, opts.collected_checkpoints, file_name)
            .map_err(|e| done.rejected(e, file_name))?;
        pending.push(item, copy);
        Ok(true)
    }

    /// The journal's progress of an input whose first line is
    /// `first_line`, or `None` when the journal knows inputs that start
    /// with it (and `opts.again` is off): which of them this is cannot be
    /// told in one pass.
    fn first_line_progress(
        &self,
        first_line: &[u8],
        opts: &ImportOptions,
    ) -> Result<Option<Progress>> {
        let key = journal::key_of(first_line);
        let file = journal::load(self.vfs(), self.root(), &key)?;
        if !opts.again && !file.entries.is_empty() {
            return Ok(None);
        }
        Ok(Some(Progress {
            key,
            file,
            recorded: None,
            entry: None,
        }))
    }

    /// The events of `batch` (emptied), each checked and its blobs stored,
    /// with the digest the import journal keeps of them.
    fn batch_events(
        &self,
        batch: &mut Vec<Imported>,
        file_name: &str,
        done: &mut ImportDone,
    ) -> Result<(Vec<Event>, String)> {
        let mut events = Vec::with_capacity(batch.len());
        let mut digest = journal::Digest::default();
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
        Ok((events, digest.finish()))
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
        let (events, digest) = self.batch_events(batch, file_name, done)?;
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
            digest,
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
    fn check_imported(&self, item: &Imported, file_name: &str) -> std::result::Result<(), Refusal> {
        let at = |why: Refusal| why.after(format!("{file_name}:{}: ", item.line));
        item.event.check().map_err(|e| at(e.to_string().into()))?;
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
                )
                .into(),
            })),
            None => self
                .bad_root(&item.event)
                .map_or(Ok(()), |why| Err(at(why.into()))),
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
        let missing =
            blob_fields(e).find(|(_, h)| !self.blobs.get().is_ok_and(|b| b.contains(h)))?;
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
    ) -> std::result::Result<Option<CollectedCopy>, Refusal> {
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
    fn refusal(&self) -> Refusal {
        let (field, h) = self.missing;
        let what = match field {
            "root" => "tree",
            "state" => "application state",
            _ => "blob",
        };
        Refusal::new(format!(
            "the checkpoint.create event's `{field}` {h} is the {what} of checkpoint {id} of this store, discarded at LSN {at}, whose contents gc has since deleted: the line copies that checkpoint's record, which could never be restored; ",
            id = self.id,
            at = self.discarded_at,
        ))
        .option(ImportOption::RecordCollected)
        .text(format!(
            " imports it as a checkpoint record without its files (one that says gc collected them, and cannot be rolled back to), or import into a store that still holds that {what}"
        ))
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

/// The lines read but not yet imported, for [`Store::import_read`].
#[derive(Default)]
struct Pending {
    /// The lines, in order.
    batch: Vec<Imported>,
    /// The lines of `batch` that copy a checkpoint whose files gc
    /// collected, recorded without them: where in it, their line number,
    /// and which checkpoint.
    collected: Vec<(usize, u64, CollectedCopy)>,
    /// Where in the input the batch's lines begin.
    from: u64,
}

impl Pending {
    /// Holds `item`, and `copy`, the checkpoint it copies without files.
    fn push(&mut self, item: Imported, copy: Option<CollectedCopy>) {
        if let Some(copy) = copy {
            self.collected.push((self.batch.len(), item.line, copy));
        }
        self.batch.push(item);
    }

    /// Imports the lines held as one batch, whose input ends at `at`
    /// (see [`Store::import_batch`]).
    fn import(
        &mut self,
        store: &Store,
        progress: &mut Progress,
        at: (u64, blake3::Hash),
        file_name: &str,
        done: &mut ImportDone,
        leading: Option<Lsn>,
    ) -> Result<()> {
        let batch = (&mut self.batch, &mut self.collected);
        store.import_batch(batch, file_name, done, progress, at, leading)
    }
}

/// What [`Store::import_read`] knows of the input's lines an earlier
/// import recorded: by the journal, or (when the journal knows nothing of
/// it) by finding its leading lines' events in the store.
struct Skipping {
    /// What the journal says an earlier import recorded.
    journal: Option<Recorded>,
    /// No line is read yet.
    first: bool,
    /// The leading lines recorded already: how many, the LSNs of the first
    /// and the last; `None` once a line is not (or never was).
    recorded: Option<(u64, Lsn, Lsn)>,
    /// The LSN of the first line's record, when it was recorded already.
    leading_first: Option<Lsn>,
    /// The line number of the first line.
    first_line: u64,
}

impl Skipping {
    fn new(known: &Known) -> Skipping {
        Skipping {
            journal: match known {
                Known::Read(p) => p.recorded.clone(),
                Known::Unread => None,
            },
            first: true,
            recorded: None,
            leading_first: None,
            first_line: 0,
        }
    }

    /// Whether `item` was recorded by an earlier import, and so is
    /// skipped. A line that was not, after lines that were, is refused
    /// unless `opts.resume`.
    fn recorded_before(
        &mut self,
        store: &Store,
        item: &Imported,
        opts: &ImportOptions,
        file_name: &str,
        done: &ImportDone,
    ) -> Result<bool> {
        if let Some(r) = &self.journal {
            if item.line <= r.line {
                return Ok(true); // recorded by the import `r`
            }
            if !opts.resume {
                let why = journal_imported_before(file_name, r, Some(item.line));
                return Err(done.rejected(why, file_name));
            }
        } else if std::mem::take(&mut self.first) && !opts.again {
            if let Some(at) = store.recorded_after(&item.event, None)? {
                self.recorded = Some((1, at, at));
                self.leading_first = Some(at);
                self.first_line = item.line;
                return Ok(true);
            }
        } else if let Some((n, a, b)) = self.recorded {
            if let Some(at) = store.recorded_after(&item.event, Some(b))? {
                self.recorded = Some((n + 1, a, at));
                return Ok(true);
            }
            if !opts.resume {
                let why = imported_before(file_name, self.first_line, (n, a, b), Some(item.line));
                return Err(done.rejected(why, file_name));
            }
            self.recorded = None;
        }
        Ok(false)
    }

    /// Once the input is read: refuses it, unless `opts.resume`, when its
    /// lines up to the last read were recorded by an earlier import (`rest`:
    /// the first line that was not, if any).
    fn refuse_unless_resumed(
        &self,
        opts: &ImportOptions,
        file_name: &str,
        done: &ImportDone,
        rest: Option<u64>,
    ) -> Result<()> {
        if opts.resume {
            return Ok(());
        }
        if let Some(r) = &self.journal {
            return Err(done.rejected(journal_imported_before(file_name, r, rest), file_name));
        }
        if let Some(r) = self.recorded {
            let why = imported_before(file_name, self.first_line, r, rest);
            return Err(done.rejected(why, file_name));
        }
        Ok(())
    }
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
        journal::save(store.vfs(), store.root(), &self.key, &self.file)
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
) -> Refusal {
    if lines.torn() {
        Refusal::new(format!(
            "{e}; it is the last line and has no line end: its writer may have stopped part way through it ("
        ))
        .option(ImportOption::SkipTornTail)
        .text(" imports the lines before it)")
    } else {
        e.to_string().into()
    }
}

/// Why an input is refused as imported before, by the journal: its lines
/// 1 to `r.line` are recorded, and line `rest` is the first that is not
/// (`None`: every line is).
fn journal_imported_before(file: &str, r: &Recorded, rest: Option<u64>) -> Refusal {
    let head = format!("{file}: the input looks imported before");
    recorded_lines(head, (r.line, r.lsns.0, r.lsns.1), rest)
}

/// Why an input is refused as imported before: its first event (at
/// `line`) and the `n` lines from it are recorded as LSN `a` to `b`, and
/// line `rest` is the first that is not (`None`: every line is).
fn imported_before(
    file: &str,
    line: u64,
    (n, a, b): (u64, Lsn, Lsn),
    rest: Option<u64>,
) -> Refusal {
    let head = format!("{file}:{line}: this event is recorded already, as LSN {a}: the input looks imported before");
    recorded_lines(head, (n, a, b), rest)
}

/// `head`, then that the input's first `n` lines are recorded as LSN `a`
/// to `b`, and line `rest` is the first that is not (`None`: every line
/// is), and what to do.
fn recorded_lines(head: String, (n, a, b): (u64, Lsn, Lsn), rest: Option<u64>) -> Refusal {
    let lsns = if n == 1 {
        format!("LSN {a}")
    } else {
        format!("LSN {a} to {b}")
    };
    let again = |r: Refusal| r.option(ImportOption::Again).text(")");
    match rest {
        None if n == 1 => again(Refusal::new(format!("{head} (import it again with "))),
        None => again(Refusal::new(format!(
            "{head}: all its {n} lines are recorded, as {lsns} (import it again with "
        ))),
        Some(rest) => again(
            Refusal::new(format!(
                "{head}: its first {} recorded, as {lsns}, and the rest (from line {rest}) is not (import only the rest with ",
                if n == 1 { "line is".to_string() } else { format!("{n} lines are") },
            ))
            .option(ImportOption::Resume)
            .text(", or all of it again with "),
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
    fn rejected(&self, reason: impl Into<Refusal>, file: &str) -> Error {
        Error::Rejected(reason.into().text(self.recorded_before(file)))
    }

    fn say(&self, reason: String, file: &str) -> String {
        reason + &self.recorded_before(file)
    }

    /// How the import ended: what it recorded, and the torn last line
    /// it skipped, if any.
    fn report(self, torn_tail: Option<TornTail>) -> Read {
        Read::Done(ImportReport {
            range: self.range,
            torn_tail,
            collected: self.collected,
        })
    }

    /// What of `file` was recorded before a refusal, to end its message.
    fn recorded_before(&self, file: &str) -> String {
        match self.range {
            None => format!(" (nothing from {file} was recorded)"),
            Some((a, b)) => format!(
                " (lines 1 to {} of {file} were recorded before it, as LSN {a} to {b})",
                self.lines
            ),
        }
    }
}

#[cfg(test)]
mod tests;
