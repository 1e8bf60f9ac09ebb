//! The log's zstd dictionary (`.cairn/log/dict-XXXXXXXX.zstd`): trained
//! once from the first record bodies the log receives, then used to
//! compress every record after it.
//!
//! A record body is one agent event of a few hundred bytes to a few KB:
//! field names, session names, tool names, paths and the agent's own
//! vocabulary repeat from record to record, but a zstd frame per record
//! starts knowing none of them. A dictionary trained on the log's own
//! bodies gives every frame that vocabulary up front (the realistic agent
//! corpus in `benches/src/agent.rs` goes from 0.545x of its JSONL to about
//! 0.4x; see `docs/BENCHMARKS.md`).
//!
//! The appender whose record completes the samples trains the dictionary
//! (about 0.1 s for 1 MiB) and writes it before its own record is
//! compressed, so every record after the samples can use it.
//!
//! Durability: the dictionary file is written durably (temporary, fsync,
//! rename, directory fsync) before any record compressed with it is
//! written, so a crash never leaves a record whose dictionary is not on
//! disk. A record that needs it has [`FLAG_DICT`](cairn_codec::frame::FLAG_DICT)
//! set and its zstd frame names the dictionary's id. The file is never
//! rewritten or removed. Readers load it at open, and load a dictionary
//! they have not seen when a record names it (another process may have
//! trained it since).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_codec::frame::Frame;
use cairn_codec::zdict::{self, Dict};
use cairn_codec::CodecError;

use crate::dicts::{Dicts, Sampling, TMP_SUFFIX};
use crate::vfs::Vfs;
use crate::{EngineError, Result};

/// Bytes of record bodies gathered before the log trains its dictionary
/// (1 MiB: enough samples for zstd to find what repeats, and about a
/// tenth of a second of training).
pub const DEFAULT_DICTIONARY_SAMPLE_BYTES: u64 = 1024 * 1024;

/// What the log samples and trains.
pub const SAMPLING: Sampling = Sampling {
    // Smaller bodies are never compressed (`DICT_COMPRESS_MIN_BYTES`).
    min_bytes: cairn_codec::frame::DICT_COMPRESS_MIN_BYTES,
    // Longer bodies are not sampled: they compress well on their own, and
    // a few of them would crowd out the many short records.
    max_bytes: 16 * 1024,
    // 64 KiB: the realistic corpus gains nothing from a larger one, and
    // each thread's compressor holds a digested copy.
    dict_bytes: 64 * 1024,
    min_samples: 64,
    // Trained by the appender whose record completes the samples, before
    // that record is compressed (outside the writer lock: other appenders
    // go on meanwhile). That one append takes ~0.1 s longer, once in the
    // log's life; on a thread of its own, an import or a fast recorder
    // would append most of its records before the dictionary was ready
    // (a 5,000-record `cairn record` stored 0.85x of its JSONL that way).
    thread: None,
};

/// The log's dictionaries, with where to load one a record names.
#[derive(Debug)]
pub(crate) struct LogDicts {
    pub dicts: Dicts,
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
}

impl LogDicts {
    /// Loads the dictionaries in `dir`. A writer (`train`) removes a
    /// dictionary file left half-written by a crash and gathers samples
    /// for a first dictionary if there is none.
    pub fn load(vfs: Arc<dyn Vfs>, dir: &Path, train: bool) -> Result<Arc<LogDicts>> {
        let names = vfs
            .list(dir)
            .map_err(|e| EngineError::io("list log directory", dir, e))?;
        LogDicts::load_listed(vfs, dir, &names, train)
    }

    /// [`LogDicts::load`] given `names`, the listing of `dir` the caller
    /// has just made (a reader's open lists the log directory once for
    /// its dictionaries and its segments).
    pub fn load_listed(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        names: &[String],
        train: bool,
    ) -> Result<Arc<LogDicts>> {
        if train {
            for n in names {
                if n.starts_with("dict-") && n.ends_with(TMP_SUFFIX) {
                    let p = dir.join(n);
                    vfs.remove_file(&p)
                        .map_err(|e| EngineError::io("remove unfinished dictionary", &p, e))?;
                }
            }
        }
        let dicts = Dicts::load(&*vfs, dir, names, train, SAMPLING);
        Ok(Arc::new(LogDicts {
            dicts,
            vfs,
            dir: dir.to_path_buf(),
        }))
    }

    /// Dictionary `id`: loaded, or read from its file now.
    pub fn lookup(&self, id: u32) -> Option<Arc<Dict>> {
        self.dicts.get_or_load(id, &*self.vfs, &self.dir)
    }

    /// A frame's body, decompressed with its dictionary if it needs one.
    pub fn body<'a>(&self, fr: &Frame<'a>) -> std::result::Result<Cow<'a, [u8]>, CodecError> {
        fr.body_with(&|id| self.lookup(id))
    }

    /// The file of dictionary `id`.
    pub fn path_of(&self, id: u32) -> PathBuf {
        self.dir.join(zdict::file_name(id))
    }

    /// Why dictionary `id` cannot be used (for reports).
    pub fn diagnose(&self, id: u32) -> String {
        Dicts::diagnose(&*self.vfs, &self.dir, id)
    }
}
