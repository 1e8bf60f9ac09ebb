//! Where each import got to in its input: the import journal, under
//! `.cairn/imports/`. It lets `import --resume` go on from the first line
//! an interrupted import did not record, and the guard of a plain import
//! recognise an input imported before, whether or not its lines carry a
//! time (a line without `ts` gets the time of its import, so the records of
//! such lines cannot be told from new ones by their contents).
//!
//! An input is known by its contents, not its name: the journal file of an
//! input is named by the blake3 hash of its first line (the key, so that a
//! file that grows keeps its file), and holds the imports of inputs
//! starting with that line (entries). Each entry lists checkpoints, one per
//! batch its import appended: "bytes 0 to `end` of the input, whose blake3
//! hash is `hash`, up to line `line`, are recorded, the last batch as LSN
//! `first` to `last`, whose events hash to `digest`". An input is the one a
//! checkpoint speaks of when its first `end` bytes hash to `hash`: it is
//! the same input, or the same one grown.
//!
//! Each checkpoint is written (durably, replacing the file atomically)
//! before its batch is appended, so no batch is ever recorded without one;
//! a checkpoint whose batch was not appended (the process died between
//! the two) is told apart by reading back the records at `first` to `last`
//! and comparing their digest: the batch is recorded when they are its
//! events.

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::sync::Arc;

use cairn_codec::Event;
use cairn_engine::vfs::{OpenMode, Vfs};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The journal's directory inside the store directory.
pub(crate) const JOURNAL_DIR: &str = "imports";

/// The version of the journal files' layout.
const JOURNAL_VERSION: u32 = 1;

/// How many imports of inputs that start with the same line one journal
/// file keeps (the most recent; an older one is forgotten, and an input
/// only it knew is no longer recognised). Distinct inputs rarely share
/// their first line; the file is rewritten before every batch, so it stays
/// small (each entry is at most [`MAX_CHECKPOINTS_PER_ENTRY`] short lines).
pub(crate) const MAX_ENTRIES_PER_KEY: usize = 16;

/// How many checkpoints (the last ones) an entry keeps. One is enough to
/// resume from; the one before it covers a batch whose checkpoint was
/// written but which the process did not live to append. More cover the
/// last batches a crash can take back under durability `interval` or
/// `never`; an input all of whose kept checkpoints were taken back is
/// refused rather than guessed at.
pub(crate) const MAX_CHECKPOINTS_PER_ENTRY: usize = 8;

/// The bytes of a journal file beyond which it is refused as damaged: far
/// more than [`MAX_ENTRIES_PER_KEY`] entries of
/// [`MAX_CHECKPOINTS_PER_ENTRY`] checkpoints (about 300 bytes each) take.
const MAX_JOURNAL_FILE_BYTES: u64 = 4 << 20;

/// Identifies the inputs a journal file speaks of: the hash of their
/// first line.
pub(crate) type Key = blake3::Hash;

/// The key of an input whose first line (without its line end) is `line`.
pub(crate) fn key_of(line: &[u8]) -> Key {
    blake3::hash(line)
}

/// One batch an import appended, and how far into its input it got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    /// The input's bytes `0..end` are recorded (to the end of a line, or of
    /// the input).
    pub end: u64,
    /// The blake3 hash of those bytes, in hex.
    pub hash: String,
    /// The last line among them that holds a record (from 1).
    pub line: u64,
    /// The batch's first LSN.
    pub first: u64,
    /// The batch's last LSN.
    pub last: u64,
    /// [`digest`] of the batch's events, in hex.
    pub digest: String,
}

impl Checkpoint {
    /// Whether the input `seen` hashes its first `end` bytes as this
    /// checkpoint does: the input is the one imported, or it grown.
    pub fn matches(&self, seen: &Hashing<impl BufRead>) -> bool {
        seen.hash_at(self.end)
            .is_some_and(|h| h.to_hex().as_str() == self.hash)
    }
}

/// One import of an input (and its resumptions).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The LSN of the record of the input's first line.
    pub first_lsn: u64,
    /// The first LSN of the first batch this import appended: when the
    /// oldest checkpoint kept is that batch's, an entry none of whose
    /// batches the log holds recorded nothing.
    pub first_batch: u64,
    /// The last checkpoints, oldest first.
    pub checkpoints: Vec<Checkpoint>,
}

impl Entry {
    /// Adds `c`, forgetting the oldest checkpoint past the limit.
    pub fn push(&mut self, c: Checkpoint) {
        self.checkpoints.push(c);
        let over = self
            .checkpoints
            .len()
            .saturating_sub(MAX_CHECKPOINTS_PER_ENTRY);
        self.checkpoints.drain(..over);
    }
}

/// One journal file: the imports of the inputs with one key.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct KeyFile {
    /// [`JOURNAL_VERSION`].
    pub version: u32,
    /// Oldest first: an import adds its entry last, and moves the entry it
    /// resumes there.
    pub entries: Vec<Entry>,
}

impl KeyFile {
    /// Every input offset a checkpoint names, to hash the input at.
    pub fn ends(&self) -> Vec<u64> {
        self.entries
            .iter()
            .flat_map(|e| e.checkpoints.iter().map(|c| c.end))
            .collect()
    }

    /// Adds `e` as the most recent entry, forgetting the oldest past the
    /// limit; its index.
    pub fn add(&mut self, e: Entry) -> usize {
        self.entries.push(e);
        let over = self.entries.len().saturating_sub(MAX_ENTRIES_PER_KEY);
        self.entries.drain(..over);
        self.entries.len() - 1
    }
}

fn file_name(key: &Key) -> String {
    format!("{}.json", key.to_hex())
}

/// The journal file of `key` in the store directory `root` (empty when
/// there is none).
pub(crate) fn load(vfs: &Arc<dyn Vfs>, root: &Path, key: &Key) -> Result<KeyFile> {
    let path = root.join(JOURNAL_DIR).join(file_name(key));
    if !vfs.exists(&path) {
        return Ok(KeyFile::default());
    }
    let damaged = |why: String| {
        Error::Other(format!(
            "the import journal file {} cannot be read: {why} (it records where imports got to in their inputs; removing it makes cairn forget that of the inputs it names)",
            path.display()
        ))
    };
    let f = vfs
        .open(&path, OpenMode::Read)
        .map_err(|e| damaged(e.to_string()))?;
    let len = f.len().map_err(|e| damaged(e.to_string()))?;
    if len > MAX_JOURNAL_FILE_BYTES {
        return Err(damaged(format!(
            "it is {len} bytes, more than the {MAX_JOURNAL_FILE_BYTES} a journal file can hold"
        )));
    }
    let mut bytes = vec![0; len as usize];
    f.read_exact_at(&mut bytes, 0)
        .map_err(|e| damaged(e.to_string()))?;
    let file: KeyFile = serde_json::from_slice(&bytes).map_err(|e| damaged(e.to_string()))?;
    if file.version != JOURNAL_VERSION {
        return Err(damaged(format!(
            "version {} (this cairn reads version {JOURNAL_VERSION})",
            file.version
        )));
    }
    Ok(file)
}

/// Writes the journal file of `key` durably, replacing the old one
/// atomically: a crash leaves the old one or the new one.
pub(crate) fn save(vfs: &Arc<dyn Vfs>, root: &Path, key: &Key, file: &KeyFile) -> Result<()> {
    let dir = root.join(JOURNAL_DIR);
    if !vfs.exists(&dir) {
        vfs.create_dir_all(&dir)
            .map_err(|e| cairn_engine::EngineError::io("create directory", &dir, e))?;
        // Its entry in the store directory must last too: a crash would
        // otherwise take the journal away from batches it covers.
        vfs.sync_dir(root)
            .map_err(|e| cairn_engine::EngineError::io("fsync directory", root, e))?;
    }
    let file = KeyFile {
        version: JOURNAL_VERSION,
        entries: file.entries.clone(),
    };
    let bytes = serde_json::to_vec(&file).map_err(|e| Error::Other(e.to_string()))?;
    let name = file_name(key);
    // One writer at a time holds the store: the name can be fixed, and the
    // next write of this key replaces one a crash left.
    let tmp = format!("{name}{}", cairn_engine::dicts::TMP_SUFFIX);
    cairn_engine::dicts::write_durably(&**vfs, &dir, &tmp, &name, &bytes)?;
    Ok(())
}

/// The digest of a batch's events, as the log holds them.
pub(crate) fn digest<'a>(events: impl IntoIterator<Item = &'a Event>) -> Result<String> {
    let mut d = Digest::default();
    for e in events {
        d.add(e)?;
    }
    Ok(d.finish())
}

/// [`digest`] taken one event at a time, so that an event the log cannot
/// hold (its body over the limit) is found as it is added, and the caller
/// can say which line of the input it came from.
#[derive(Default)]
pub(crate) struct Digest {
    hasher: blake3::Hasher,
    body: Vec<u8>,
}

impl Digest {
    /// Adds `e`'s body; fails, adding nothing, when it is over
    /// [`cairn_codec::event::MAX_EVENT_BODY_BYTES`].
    pub fn add(&mut self, e: &Event) -> std::result::Result<(), cairn_codec::CodecError> {
        self.body.clear();
        e.encode_body_into(&mut self.body)?;
        self.hasher.update(&(self.body.len() as u64).to_le_bytes());
        self.hasher.update(&self.body);
        Ok(())
    }

    /// The digest of the events added, in hex.
    pub fn finish(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }
}

/// A reader that hashes the bytes consumed from it, and knows how many
/// there were: the hash of the input up to any point is at hand, and its
/// hash at the offsets it is told to watch is kept as it passes them.
pub(crate) struct Hashing<R> {
    inner: R,
    hasher: blake3::Hasher,
    pos: u64,
    /// Offsets to keep the hash at, ascending, from `next_watch` on.
    watch: Vec<u64>,
    next_watch: usize,
    seen: HashMap<u64, blake3::Hash>,
    /// The bytes consumed, while they are kept.
    kept: Option<Vec<u8>>,
    /// The offset of [`Hashing::mark`], and the hash state there.
    mark: (u64, blake3::Hasher),
}

impl<R: BufRead> Hashing<R> {
    /// Reads `inner`, keeping what is consumed when `keep` (until
    /// [`Hashing::take_kept`]).
    pub fn new(inner: R, keep: bool) -> Hashing<R> {
        Hashing {
            inner,
            hasher: blake3::Hasher::new(),
            pos: 0,
            watch: Vec::new(),
            next_watch: 0,
            seen: HashMap::new(),
            kept: keep.then(Vec::new),
            mark: (0, blake3::Hasher::new()),
        }
    }

    /// Remembers the hash of the bytes consumed so far: where the line
    /// about to be read begins, should it turn out a torn last line that
    /// is not recorded. (A copy of the hash state: 1.9 KiB, ~40 ns.)
    pub fn mark(&mut self) {
        self.mark = (self.pos, self.hasher.clone());
    }

    /// The offset of the last [`Hashing::mark`] (or 0) and the hash of
    /// the bytes before it.
    pub fn marked(&self) -> (u64, blake3::Hash) {
        (self.mark.0, self.mark.1.finalize())
    }

    /// The bytes consumed so far, if they were kept; keeps no more.
    pub fn take_kept(&mut self) -> Vec<u8> {
        self.kept.take().unwrap_or_default()
    }

    /// Keeps the hash of the input's first `end` bytes for each of `ends`
    /// (those not passed yet, and the current offset).
    pub fn watch(&mut self, ends: impl IntoIterator<Item = u64>) {
        let mut ends: Vec<u64> = ends.into_iter().filter(|&e| e >= self.pos).collect();
        ends.sort_unstable();
        ends.dedup();
        if ends.first() == Some(&self.pos) {
            self.seen.insert(self.pos, self.hasher.finalize());
            ends.remove(0);
        }
        self.watch = ends;
        self.next_watch = 0;
    }

    /// The number of bytes consumed.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The hash of the bytes consumed.
    pub fn hash(&self) -> blake3::Hash {
        self.hasher.finalize()
    }

    /// The hash of the first `end` bytes, if `end` was watched and passed.
    pub fn hash_at(&self, end: u64) -> Option<blake3::Hash> {
        self.seen.get(&end).copied()
    }
}

impl<R: BufRead> Read for Hashing<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Hashing<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if amt == 0 {
            return;
        }
        // The bytes to consume are the start of the buffer the last
        // `fill_buf` returned, which is still filled: asking for it again
        // reads nothing.
        let data = match self.inner.fill_buf() {
            Ok(buf) => &buf[..amt.min(buf.len())],
            Err(_) => &[][..],
        };
        debug_assert_eq!(data.len(), amt, "consume past the buffer");
        let mut from = 0;
        while let Some(&w) = self.watch.get(self.next_watch) {
            let at = w - self.pos;
            if at > data.len() as u64 {
                break;
            }
            let at = at as usize;
            self.hasher.update(&data[from..at]);
            from = at;
            self.seen.insert(w, self.hasher.finalize());
            self.next_watch += 1;
        }
        self.hasher.update(&data[from..]);
        if let Some(k) = &mut self.kept {
            k.extend_from_slice(data);
        }
        self.pos += data.len() as u64;
        let n = data.len();
        self.inner.consume(n);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_at_a_watched_offset_is_the_hash_of_the_bytes_before_it() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let mut r = Hashing::new(std::io::BufReader::with_capacity(7, &data[..]), true);
        r.watch([0, 1, 7, 8, 999, 5000, 6000]);
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
        assert_eq!(r.position(), 5000);
        assert_eq!(r.hash(), blake3::hash(&data));
        assert_eq!(r.take_kept(), data);
        for end in [0u64, 1, 7, 8, 999, 5000] {
            assert_eq!(
                r.hash_at(end),
                Some(blake3::hash(&data[..end as usize])),
                "{end}"
            );
        }
        assert_eq!(r.hash_at(6000), None);
        assert_eq!(r.hash_at(2), None);
    }
}
