//! The zstd dictionaries of one directory (the log's or the blob store's):
//! loading them, gathering samples, and training the first one.
//!
//! The dictionary file format and the zstd contexts that use a dictionary
//! are in [`cairn_codec::zdict`]. A dictionary file is written (temporary,
//! fsync, rename, directory fsync) before the first record or entry that
//! needs it, is never rewritten, and is never removed: records and entries
//! keep needing it for as long as the store lives. A second copy,
//! `dict-XXXXXXXX.zstd.copy` ([`copy_name`]), is written after it: a
//! missing or damaged dictionary file is read from its copy, and a
//! writable open writes the file again from it. Only when both are lost
//! does the data that needs it become unreadable, with an error that names
//! both ([`CodecError::MissingDictionary`](cairn_codec::CodecError));
//! nothing else is affected, and no other dictionary is trained in its
//! place.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use cairn_codec::zdict::{self, decode_file, encode_file, file_name, Dict, DICT_HEADER_LEN};

use crate::error::{EngineError, Result};
use crate::vfs::{OpenMode, Vfs};

/// Which data a directory samples for training, and how large a
/// dictionary it trains.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Samples are at least this long: shorter ones say little.
    pub min_bytes: usize,
    /// Samples are at most this long: longer ones already compress well on
    /// their own.
    pub max_bytes: usize,
    /// The largest dictionary trained.
    pub dict_bytes: usize,
    /// Training needs at least this many samples (zstd refuses too few).
    pub min_samples: usize,
    /// Train on a thread of this name; `None`: on the thread whose sample
    /// completes the set, before its data is compressed (so everything
    /// after the samples uses the dictionary, however fast data arrives).
    pub thread: Option<&'static str>,
}

impl Sampling {
    /// True for a length worth sampling.
    pub fn takes(&self, len: usize) -> bool {
        (self.min_bytes..=self.max_bytes).contains(&len)
    }
}

/// Samples gathered for training.
#[derive(Debug, Default)]
struct Samples {
    data: Vec<u8>,
    sizes: Vec<usize>,
}

/// The dictionaries of one directory, and the training of its first one.
#[derive(Debug)]
pub struct Dicts {
    sampling: Sampling,
    /// Every dictionary looked up, by id: `None` for one whose file was
    /// missing or damaged when first needed. Data names a dictionary only
    /// once its file is durable, so a file that fails then stays failed
    /// until someone restores it (and reopens): it is not read again for
    /// every record or entry that needs it.
    by_id: RwLock<HashMap<u32, Option<Arc<Dict>>>>,
    /// The one new data is compressed with: the first loaded or trained.
    current: OnceLock<Arc<Dict>>,
    /// True while samples are gathered (no dictionary, none training).
    wanted: AtomicBool,
    /// `None` once training started (or is not wanted).
    samples: Mutex<Option<Samples>>,
    /// True while a background training has not been published.
    training: AtomicBool,
    /// The background training, which returns the dictionary it wrote.
    trainer: Mutex<Option<std::thread::JoinHandle<Option<Dict>>>>,
}

impl Dicts {
    /// Loads every dictionary file in `dir` (`names`: the directory
    /// listing). A damaged file is skipped (the data that needs it fails to
    /// read, naming it) and stops another from being trained; a missing or
    /// damaged one is read from its copy ([`copy_name`]). `train` (a
    /// writable open): gather samples for a first dictionary if there is
    /// none, write again a dictionary file lost but for its copy, and
    /// write a copy that is missing or damaged.
    pub fn load(
        vfs: &dyn Vfs,
        dir: &Path,
        names: &[String],
        train: bool,
        sampling: Sampling,
    ) -> Dicts {
        let d = Dicts {
            sampling,
            by_id: RwLock::default(),
            current: OnceLock::new(),
            wanted: AtomicBool::new(false),
            samples: Mutex::new(None),
            training: AtomicBool::new(false),
            trainer: Mutex::new(None),
        };
        let mut damaged = false;
        let mut seen = std::collections::HashSet::new();
        let primaries = names
            .iter()
            .filter_map(|n| zdict::parse_file_name(n).map(|id| (id, true)));
        // A copy whose dictionary file is gone stands in for it.
        let orphans = names
            .iter()
            .filter_map(|n| parse_copy_name(n).map(|id| (id, false)));
        for (id, has_primary) in primaries.chain(orphans) {
            if !seen.insert(id) {
                continue;
            }
            let primary = if has_primary {
                read_file(vfs, &dir.join(file_name(id))).and_then(|b| decode_file(&b, id))
            } else {
                Err("missing".into())
            };
            let copy =
                || read_file(vfs, &dir.join(copy_name(id))).and_then(|b| decode_file(&b, id));
            match primary {
                Ok(dict) => {
                    // A store from before copies were kept, or a damaged
                    // or lost copy, gets one (best effort).
                    if train && copy().is_err() {
                        let _ = write_copy(vfs, dir, &dict);
                    }
                    d.publish(dict);
                }
                Err(_) => match copy() {
                    Ok(dict) => {
                        // The dictionary file is restored from its copy
                        // (best effort: a reader, or a full disk, goes on
                        // with the copy).
                        if train {
                            let _ = restore_from_copy(vfs, dir, &dict);
                        }
                        d.publish(dict);
                    }
                    Err(_) => {
                        d.by_id.write().insert(id, None);
                        damaged = true;
                    }
                },
            }
        }
        if train && d.current().is_none() && !damaged {
            *d.samples.lock() = Some(Samples::default());
            d.wanted.store(true, Ordering::Release);
        }
        d
    }

    /// Adds a dictionary; the first one becomes the one new data uses.
    fn publish(&self, d: Dict) {
        let d = Arc::new(d);
        self.by_id.write().insert(d.id, Some(d.clone()));
        let _ = self.current.set(d);
    }

    /// The dictionary new data is compressed with, if any.
    pub fn current(&self) -> Option<&Arc<Dict>> {
        self.current.get()
    }

    /// Dictionary `id`, loading it from its file in `dir` the first time
    /// it is looked up (another process may have written it since open).
    pub fn get_or_load(&self, id: u32, vfs: &dyn Vfs, dir: &Path) -> Option<Arc<Dict>> {
        if let Some(known) = self.by_id.read().get(&id) {
            return known.clone();
        }
        let read = |name: String| read_file(vfs, &dir.join(name)).and_then(|b| decode_file(&b, id));
        let dict = read(file_name(id))
            .or_else(|_| read(copy_name(id)))
            .ok()
            .map(Arc::new);
        self.by_id.write().entry(id).or_insert(dict).clone()
    }

    /// Why dictionary `id` cannot be used: missing, or what is wrong with
    /// its file. For error reports.
    pub fn diagnose(vfs: &dyn Vfs, dir: &Path, id: u32) -> String {
        let state = |path: &Path| {
            if !vfs.exists(path) {
                return format!("{} is missing", path.display());
            }
            match read_file(vfs, path).and_then(|b| decode_file(&b, id)) {
                Ok(_) => format!("{} is intact", path.display()),
                Err(e) => format!("{} is damaged: {e}", path.display()),
            }
        };
        format!(
            "{}, and its copy {}",
            state(&dir.join(file_name(id))),
            state(&dir.join(copy_name(id)))
        )
    }

    /// True while the directory has no dictionary and none is being
    /// trained (samples are gathered only then). One atomic load.
    pub fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    /// Offers `raw` as a training sample. Once `want_bytes` of samples are
    /// gathered, trains a dictionary, writes it durably to `dir` and
    /// publishes it: on a background thread (published at the next
    /// [`poll`](Self::poll)) or, without [`Sampling::thread`], here and now.
    pub fn offer(&self, raw: &[u8], want_bytes: u64, vfs: &Arc<dyn Vfs>, dir: &Path) {
        if want_bytes == 0 || !self.wanted() || !self.sampling.takes(raw.len()) {
            return;
        }
        let mut slot = self.samples.lock();
        let Some(s) = slot.as_mut() else {
            return;
        };
        s.data.extend_from_slice(raw);
        s.sizes.push(raw.len());
        if (s.data.len() as u64) < want_bytes || s.sizes.len() < self.sampling.min_samples {
            return;
        }
        let Some(s) = slot.take() else {
            return;
        };
        self.wanted.store(false, Ordering::Release);
        drop(slot);
        // Training or writing can fail (samples too uniform, a full disk):
        // the directory then goes on without a dictionary.
        let Some(thread) = self.sampling.thread else {
            if let Ok(d) = train_and_write(&**vfs, dir, &s, self.sampling) {
                self.publish(d);
            }
            return;
        };
        self.training.store(true, Ordering::Release);
        let (vfs, dir, sampling) = (vfs.clone(), dir.to_path_buf(), self.sampling);
        let handle = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || train_and_write(&*vfs, &dir, &s, sampling).ok());
        match handle {
            Ok(h) => *self.trainer.lock() = Some(h),
            Err(_) => self.training.store(false, Ordering::Release),
        }
    }

    /// Trains a dictionary from `samples` now (on this thread), writes it
    /// durably and makes it current, unless the directory already has one
    /// or is training one. Returns whether a dictionary is current after.
    pub fn train_now(&self, samples: &[&[u8]], vfs: &dyn Vfs, dir: &Path) -> Result<bool> {
        // Taking the sample slot stops background training from starting.
        let taken = self.samples.lock().take();
        if taken.is_none() {
            self.finish();
            return Ok(self.current().is_some());
        }
        let mut s = Samples::default();
        for b in samples.iter().filter(|b| self.sampling.takes(b.len())) {
            s.data.extend_from_slice(b);
            s.sizes.push(b.len());
        }
        if s.sizes.len() < self.sampling.min_samples {
            // Too few to train on: sampling goes on.
            *self.samples.lock() = taken;
            return Ok(false);
        }
        self.wanted.store(false, Ordering::Release);
        let d = train_and_write(vfs, dir, &s, self.sampling)?;
        self.publish(d);
        Ok(true)
    }

    /// Publishes a dictionary the background training finished, if any.
    /// Called before each compression: one atomic load when nothing is
    /// being trained.
    pub fn poll(&self) {
        if !self.training.load(Ordering::Acquire) {
            return;
        }
        let done = self
            .trainer
            .lock()
            .as_ref()
            .is_some_and(|h| h.is_finished());
        if done {
            self.finish();
        }
    }

    /// Waits for a training in progress and publishes its dictionary.
    pub fn finish(&self) {
        let h = self.trainer.lock().take();
        if let Some(h) = h {
            if let Ok(Some(d)) = h.join() {
                self.publish(d);
            }
            self.training.store(false, Ordering::Release);
        }
    }
}

fn read_file(vfs: &dyn Vfs, path: &Path) -> std::result::Result<Vec<u8>, String> {
    let f = vfs
        .open(path, OpenMode::Read)
        .map_err(|e| format!("cannot open: {e}"))?;
    let len = f.len().map_err(|e| format!("cannot stat: {e}"))?;
    if len > DICT_HEADER_LEN as u64 + u64::from(zdict::MAX_DICT_BYTES) {
        return Err(format!("{len} bytes, over the limit"));
    }
    let mut b = vec![0u8; len as usize];
    f.read_exact_at(&mut b, 0)
        .map_err(|e| format!("cannot read: {e}"))?;
    Ok(b)
}

/// Trains a dictionary from the samples and writes its file durably:
/// temporary, fsync, rename, directory fsync.
fn train_and_write(vfs: &dyn Vfs, dir: &Path, s: &Samples, sampling: Sampling) -> Result<Dict> {
    let dict = zdict::train(&s.data, &s.sizes, sampling.dict_bytes).ok_or_else(|| {
        EngineError::Invalid(format!(
            "zstd could not train a dictionary from {} samples",
            s.sizes.len()
        ))
    })?;
    let path = dir.join(file_name(dict.id));
    if vfs.exists(&path) {
        // A dictionary file with this id that was not loaded (damaged):
        // never replaced, so the data that needs it keeps naming it.
        return Err(EngineError::Invalid(format!(
            "{} exists but was not loaded",
            path.display()
        )));
    }
    let name = file_name(dict.id);
    let tmp = unique_tmp_name(&name);
    if let Err(e) = write_durably(vfs, dir, &tmp, &name, &encode_file(dict.id, &dict.bytes)) {
        let _ = vfs.remove_file(&dir.join(&tmp));
        return Err(e);
    }
    // The second copy, written after the first is durable (best effort: a
    // store without one gets it at its next writable open).
    let _ = write_copy(vfs, dir, &dict);
    Ok(dict)
}

/// The name of the second copy of dictionary `id`'s file, in the same
/// directory: `dict-XXXXXXXX.zstd.copy`, the same bytes, written after the
/// first is durable (never at the same moment, so one torn write or one
/// deleted file does not take both). It stands in for a dictionary file
/// that is missing or damaged: a writable open restores the file from it,
/// a reader reads it. A store written before copies were kept gets one at
/// its next writable open.
pub fn copy_name(id: u32) -> String {
    format!("{}{COPY_SUFFIX}", file_name(id))
}

/// What [`copy_name`] adds to a dictionary file's name.
pub const COPY_SUFFIX: &str = ".copy";

/// The dictionary id a copy's file name stands for.
fn parse_copy_name(name: &str) -> Option<u32> {
    zdict::parse_file_name(name.strip_suffix(COPY_SUFFIX)?)
}

/// Writes again, from the other, a dictionary file or its copy (see
/// [`copy_name`]) that is missing or damaged while the other is intact;
/// returns the files written. What `cairn repair` runs on the log's and
/// the blob store's directories before anything else, so it can say what
/// it restored (a writable open does the same as it loads them).
pub fn mend(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let names = vfs
        .list(dir)
        .map_err(|e| EngineError::io("list directory", dir, e))?;
    let ids: std::collections::BTreeSet<u32> = names
        .iter()
        .filter_map(|n| zdict::parse_file_name(n).or_else(|| parse_copy_name(n)))
        .collect();
    let mut written = Vec::new();
    for id in ids {
        let read = |name: String| read_file(vfs, &dir.join(name)).and_then(|b| decode_file(&b, id));
        match (read(file_name(id)), read(copy_name(id))) {
            (Ok(d), Err(_)) => {
                write_copy(vfs, dir, &d)?;
                written.push(dir.join(copy_name(id)));
            }
            (Err(_), Ok(d)) => {
                restore_from_copy(vfs, dir, &d)?;
                written.push(dir.join(file_name(id)));
            }
            // Both intact: nothing to do; both lost: nothing to do it from.
            _ => {}
        }
    }
    Ok(written)
}

/// Writes the second copy of `dict` durably (see [`copy_name`]).
fn write_copy(vfs: &dyn Vfs, dir: &Path, dict: &Dict) -> Result<()> {
    write_dict_file(vfs, dir, dict, &copy_name(dict.id))
}

/// Writes dictionary file of `dict` again, from its copy (see
/// [`copy_name`]).
fn restore_from_copy(vfs: &dyn Vfs, dir: &Path, dict: &Dict) -> Result<()> {
    write_dict_file(vfs, dir, dict, &file_name(dict.id))
}

/// Writes `dict` durably as `dir/name`, through a temporary name of this
/// writer's own (removed if the write fails; a crash's leftover is removed
/// at the next open).
fn write_dict_file(vfs: &dyn Vfs, dir: &Path, dict: &Dict, name: &str) -> Result<()> {
    let tmp = unique_tmp_name(name);
    let r = write_durably(vfs, dir, &tmp, name, &encode_file(dict.id, &dict.bytes));
    if r.is_err() {
        let _ = vfs.remove_file(&dir.join(&tmp));
    }
    r
}

/// The suffix of a dictionary file being written (see
/// [`crate::atomic::TMP_SUFFIX`]); one left by a crash is removed on open.
pub use crate::atomic::{unique_tmp_name, TMP_SUFFIX};

/// Writes `bytes` as `dir/name` durably and atomically: to `dir/tmp`,
/// fsync'd, renamed over `name`, then the directory fsync'd. A crash leaves
/// the old file or the new one (and perhaps `tmp`, for the caller to
/// remove or overwrite: dictionaries' are removed on open).
pub fn write_durably(vfs: &dyn Vfs, dir: &Path, tmp: &str, name: &str, bytes: &[u8]) -> Result<()> {
    crate::atomic::write_atomic_via(
        vfs,
        &dir.join(tmp),
        &dir.join(name),
        bytes,
        &crate::atomic::AtomicOptions::durable(),
    )
}
