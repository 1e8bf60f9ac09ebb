//! The store's zstd dictionary: trained once from the first small blobs a
//! store receives, then used to compress every small blob after it.
//!
//! Small files (source code, configs) compress poorly on their own: each
//! zstd frame starts knowing nothing, and a 9 KB file spends much of its
//! output teaching the decoder its vocabulary. A dictionary trained from
//! samples of the store's own contents gives every frame that vocabulary
//! up front (about 14% smaller on generated source-like files, see
//! `docs/BENCHMARKS.md`).
//!
//! ```text
//! dict-XXXXXXXX.zstd  (XXXXXXXX: the dictionary id in hex)
//!  0  8  magic   "CAIRNDC1"
//!  8  4  id      u32 LE, zstd's dictionary id (also in the dictionary's own header)
//! 12  4  len     u32 LE, dictionary bytes (at most MAX_DICT_BYTES)
//! 16 32  hash    blake3 of the dictionary bytes
//! 48  .  the zstd dictionary
//! ```
//!
//! An entry compressed with the dictionary has [`FLAG_ZSTD_DICT`] set, and
//! its zstd frame names the dictionary id. The file is written (temporary,
//! fsync, rename, directory fsync) before the first entry that needs it, is
//! never rewritten, and is never removed: garbage collection copies entries
//! byte for byte, so a dictionary stays needed for as long as the store
//! lives. A missing or damaged dictionary makes the entries that need it
//! unreadable with an error that names it; nothing else is affected.
//!
//! [`FLAG_ZSTD_DICT`]: super::pack::FLAG_ZSTD_DICT

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use cairn_codec::bytes::u32_le;

use crate::vfs::{OpenMode, Vfs};

/// Dictionary file magic, with the format version in its last byte.
pub const DICT_MAGIC: [u8; 8] = *b"CAIRNDC1";
/// Length of the dictionary file header.
pub const DICT_HEADER_LEN: usize = 48;
/// The largest dictionary trained (110 KiB, zstd's own default): larger
/// ones gain little on small files and cost memory in every (de)compressor.
pub const DICT_TARGET_BYTES: usize = 110 * 1024;
/// The largest dictionary file read (1 MiB): checked before allocating.
pub const MAX_DICT_BYTES: u32 = 1024 * 1024;
/// Blobs sampled for training are between these sizes: smaller ones say
/// little, larger ones already compress well on their own.
pub const SAMPLE_MIN_BYTES: usize = 256;
/// See [`SAMPLE_MIN_BYTES`].
pub const SAMPLE_MAX_BYTES: usize = 128 * 1024;
/// True for a blob length worth sampling (see [`SAMPLE_MIN_BYTES`]).
pub fn is_sample_len(len: u64) -> bool {
    (SAMPLE_MIN_BYTES as u64..=SAMPLE_MAX_BYTES as u64).contains(&len)
}

/// Training needs at least this many samples (zstd refuses too few).
pub const MIN_SAMPLES: usize = 64;

/// A loaded dictionary.
#[derive(Debug)]
pub struct Dict {
    /// zstd's id for it, as written in every frame that uses it.
    pub id: u32,
    /// The dictionary bytes.
    pub bytes: Vec<u8>,
}

/// Samples gathered for training.
#[derive(Debug, Default)]
struct Samples {
    data: Vec<u8>,
    sizes: Vec<usize>,
}

/// The dictionaries of one blob store, and the training of its first one.
#[derive(Debug, Default)]
pub struct Dicts {
    by_id: RwLock<HashMap<u32, Arc<Dict>>>,
    /// The one new entries are compressed with.
    current: RwLock<Option<Arc<Dict>>>,
    /// `None` once training started (or is not wanted).
    samples: Mutex<Option<Samples>>,
    /// The background training, which returns the dictionary it wrote.
    trainer: Mutex<Option<std::thread::JoinHandle<Option<Dict>>>>,
}

/// The file name of dictionary `id`.
pub fn file_name(id: u32) -> String {
    format!("dict-{id:08x}.zstd")
}

fn parse_file_name(name: &str) -> Option<u32> {
    let hex = name.strip_prefix("dict-")?.strip_suffix(".zstd")?;
    if hex.len() != 8 {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// Encodes a dictionary file.
pub fn encode_file(id: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(DICT_HEADER_LEN + bytes.len());
    out.extend_from_slice(&DICT_MAGIC);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(blake3::hash(bytes).as_bytes());
    out.extend_from_slice(bytes);
    out
}

/// Decodes a dictionary file, checking everything: magic, lengths, hash,
/// and that the id in the header, in the name and in the zstd dictionary
/// itself agree.
pub fn decode_file(b: &[u8], id_in_name: u32) -> Result<Dict, String> {
    if b.len() < DICT_HEADER_LEN {
        return Err(format!("{} bytes, shorter than its header", b.len()));
    }
    if b[0..8] != DICT_MAGIC {
        return Err("bad magic".into());
    }
    let (id, len) = (u32_le(b, 8), u32_le(b, 12));
    if len > MAX_DICT_BYTES {
        return Err(format!(
            "declares {len} bytes, over the limit of {MAX_DICT_BYTES}"
        ));
    }
    if b.len() != DICT_HEADER_LEN + len as usize {
        return Err(format!(
            "declares {len} bytes but holds {}",
            b.len() - DICT_HEADER_LEN
        ));
    }
    let bytes = &b[DICT_HEADER_LEN..];
    if blake3::hash(bytes).as_bytes()[..] != b[16..48] {
        return Err("the dictionary does not match its hash".into());
    }
    let own = zstd::zstd_safe::get_dict_id_from_dict(bytes).map(|n| n.get());
    if id != id_in_name || own != Some(id) {
        return Err(format!(
            "ids disagree: header {id:08x}, name {id_in_name:08x}, dictionary {:?}",
            own.map(|n| format!("{n:08x}"))
        ));
    }
    Ok(Dict {
        id,
        bytes: bytes.to_vec(),
    })
}

impl Dicts {
    /// Loads every dictionary file in `dir` (`names`: the directory
    /// listing). A damaged file is skipped (the entries that need it fail
    /// to read, naming it) and stops the store from training another.
    /// `train`: gather samples for a first dictionary if there is none.
    pub fn load(vfs: &dyn Vfs, dir: &Path, names: &[String], train: bool) -> Dicts {
        let d = Dicts::default();
        let mut damaged = false;
        for name in names {
            let Some(id) = parse_file_name(name) else {
                continue;
            };
            match read_file(vfs, &dir.join(name)).and_then(|b| decode_file(&b, id)) {
                Ok(dict) => d.publish(dict),
                Err(_) => damaged = true,
            }
        }
        if train && d.current().is_none() && !damaged {
            *d.samples.lock() = Some(Samples::default());
        }
        d
    }

    /// Adds a dictionary; the first one becomes the one new entries use.
    fn publish(&self, d: Dict) {
        let d = Arc::new(d);
        self.by_id.write().insert(d.id, d.clone());
        self.current.write().get_or_insert(d);
    }

    /// The dictionary new entries are compressed with, if any.
    pub fn current(&self) -> Option<Arc<Dict>> {
        self.current.read().clone()
    }

    /// Dictionary `id`, loading it from its file in `dir` if it is not
    /// loaded yet (another process may have written it since).
    pub fn get_or_load(&self, id: u32, vfs: &dyn Vfs, dir: &Path) -> Option<Arc<Dict>> {
        if let Some(d) = self.by_id.read().get(&id) {
            return Some(d.clone());
        }
        let dict = read_file(vfs, &dir.join(file_name(id)))
            .and_then(|b| decode_file(&b, id))
            .ok()?;
        let dict = Arc::new(dict);
        self.by_id.write().insert(id, dict.clone());
        Some(dict)
    }

    /// Offers a blob as a training sample. Once `want_bytes` of samples
    /// are gathered, trains a dictionary on a background thread, writes it
    /// durably to `dir`, and makes it current.
    pub fn offer(&self, raw: &[u8], want_bytes: u64, vfs: &Arc<dyn Vfs>, dir: &Path) {
        if want_bytes == 0 || !is_sample_len(raw.len() as u64) {
            return;
        }
        let mut slot = self.samples.lock();
        let Some(s) = slot.as_mut() else {
            return;
        };
        s.data.extend_from_slice(raw);
        s.sizes.push(raw.len());
        if (s.data.len() as u64) < want_bytes || s.sizes.len() < MIN_SAMPLES {
            return;
        }
        let Some(s) = slot.take() else {
            return;
        };
        drop(slot);
        let (vfs, dir) = (vfs.clone(), dir.to_path_buf());
        // Training or writing can fail (samples too uniform, a full disk):
        // the store then goes on without a dictionary.
        let handle = std::thread::Builder::new()
            .name("cairn-blob-dict".into())
            .spawn(move || train_and_write(&*vfs, &dir, &s));
        if let Ok(h) = handle {
            *self.trainer.lock() = Some(h);
        }
    }

    /// True while the store has no dictionary and none is being trained
    /// (samples are gathered only then).
    pub fn wanted(&self) -> bool {
        self.samples.lock().is_some()
    }

    /// Trains a dictionary from `samples` now (on this thread), writes it
    /// durably and makes it current, unless the store already has one or
    /// is training one. Returns whether a dictionary is current afterwards.
    pub fn train_now(&self, samples: &[&[u8]], vfs: &dyn Vfs, dir: &Path) -> bool {
        // Taking the sample slot stops background training from starting.
        let taken = self.samples.lock().take();
        if taken.is_none() {
            self.finish();
            return self.current.read().is_some();
        }
        let mut s = Samples::default();
        for b in samples.iter().filter(|b| is_sample_len(b.len() as u64)) {
            s.data.extend_from_slice(b);
            s.sizes.push(b.len());
        }
        if s.sizes.len() < MIN_SAMPLES {
            // Too few to train on: sampling goes on in the background.
            *self.samples.lock() = taken;
            return false;
        }
        match train_and_write(vfs, dir, &s) {
            Some(d) => {
                self.publish(d);
                true
            }
            None => false,
        }
    }

    /// Publishes a dictionary the background training finished, if any.
    /// Called before each compression; cheap when there is nothing new.
    pub fn poll(&self) {
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
        if let Some(Ok(Some(d))) = h.map(|h| h.join()) {
            self.publish(d);
        }
    }
}

fn read_file(vfs: &dyn Vfs, path: &Path) -> Result<Vec<u8>, String> {
    let f = vfs
        .open(path, OpenMode::Read)
        .map_err(|e| format!("cannot open: {e}"))?;
    let len = f.len().map_err(|e| format!("cannot stat: {e}"))?;
    if len > DICT_HEADER_LEN as u64 + u64::from(MAX_DICT_BYTES) {
        return Err(format!("{len} bytes, over the limit"));
    }
    let mut b = vec![0u8; len as usize];
    f.read_exact_at(&mut b, 0)
        .map_err(|e| format!("cannot read: {e}"))?;
    Ok(b)
}

/// Trains a dictionary from the samples and writes its file durably:
/// temporary, fsync, rename, directory fsync.
fn train_and_write(vfs: &dyn Vfs, dir: &Path, s: &Samples) -> Option<Dict> {
    let bytes = zstd::dict::from_continuous(&s.data, &s.sizes, DICT_TARGET_BYTES).ok()?;
    let id = zstd::zstd_safe::get_dict_id_from_dict(&bytes)?.get();
    if bytes.len() > MAX_DICT_BYTES as usize {
        return None;
    }
    let path = dir.join(file_name(id));
    if vfs.exists(&path) {
        // A dictionary file with this id that was not loaded (damaged):
        // never replaced, so the entries that need it keep naming it.
        return None;
    }
    let tmp = format!("dict-{id:08x}.tmp");
    if super::write_durably(vfs, dir, &tmp, &file_name(id), &encode_file(id, &bytes)).is_err() {
        let _ = vfs.remove_file(&dir.join(&tmp));
        return None;
    }
    Some(Dict { id, bytes })
}

/// Source-like text of about `len` bytes (seeded): enough repeated
/// vocabulary for zstd to train on. For tests here and in `pack`.
#[cfg(test)]
pub(crate) fn test_text(len: usize, seed: u64) -> Vec<u8> {
    let words = [
        "fn", "let", "mut", "self", "match", "impl", "pub", "value", "error",
    ];
    let mut x = seed.wrapping_mul(2).wrapping_add(7);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(x >> 33) as usize % words.len()].as_bytes());
        out.extend_from_slice(if x.is_multiple_of(7) { b";\n" } else { b" " });
    }
    out
}

/// A dictionary trained on [`test_text`], for tests.
#[cfg(test)]
pub(crate) fn test_dict() -> Dict {
    let (mut data, mut sizes) = (Vec::new(), Vec::new());
    for i in 0..100 {
        let one = test_text(1500, 1000 + i);
        sizes.push(one.len());
        data.extend_from_slice(&one);
    }
    let bytes = zstd::dict::from_continuous(&data, &sizes, 8 * 1024).expect("train");
    let id = zstd::zstd_safe::get_dict_id_from_dict(&bytes)
        .expect("a trained dictionary has an id")
        .get();
    Dict { id, bytes }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn samples() -> Samples {
        let mut s = Samples::default();
        for i in 0..200 {
            let one = test_text(2000, i);
            s.data.extend_from_slice(&one);
            s.sizes.push(one.len());
        }
        s
    }

    #[test]
    fn dictionary_file_round_trips_and_every_damage_is_refused() {
        let bytes =
            zstd::dict::from_continuous(&samples().data, &samples().sizes, 16 * 1024).unwrap();
        let id = zstd::zstd_safe::get_dict_id_from_dict(&bytes)
            .unwrap()
            .get();
        let file = encode_file(id, &bytes);
        let d = decode_file(&file, id).unwrap();
        assert_eq!((d.id, &d.bytes), (id, &bytes));
        assert_eq!(parse_file_name(&file_name(id)), Some(id));
        // Another id in the name.
        assert!(decode_file(&file, id ^ 1).is_err());
        // Any flipped byte, and any cut, is refused.
        for i in (0..file.len()).step_by(97).chain(0..DICT_HEADER_LEN) {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            assert!(decode_file(&bad, id).is_err(), "flip at {i}");
        }
        for cut in [0, 7, DICT_HEADER_LEN, file.len() - 1] {
            assert!(decode_file(&file[..cut], id).is_err(), "cut at {cut}");
        }
        // A declared length over the limit is refused before anything else.
        let mut huge = file.clone();
        huge[12..16].copy_from_slice(&(MAX_DICT_BYTES + 1).to_le_bytes());
        assert!(decode_file(&huge, id)
            .unwrap_err()
            .contains("over the limit"));
    }

    proptest::proptest! {
        /// Any bytes, with a valid header or not: an error or a checked
        /// dictionary, never a panic or an allocation past the limit.
        #[test]
        fn decode_file_never_panics(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            id in proptest::prelude::any::<u32>(),
            len in proptest::prelude::any::<u32>(),
            with_header in proptest::prelude::any::<bool>(),
        ) {
            let mut b = Vec::new();
            if with_header {
                b.extend_from_slice(&DICT_MAGIC);
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
                b.extend_from_slice(blake3::hash(&body).as_bytes());
            }
            b.extend_from_slice(&body);
            if let Ok(d) = decode_file(&b, id) {
                proptest::prop_assert_eq!(d.id, id);
                proptest::prop_assert_eq!(d.bytes, body);
            }
        }
    }

    #[test]
    fn names_parse_only_dictionary_files() {
        assert_eq!(parse_file_name("dict-0000002a.zstd"), Some(42));
        for bad in [
            "dict-2a.zstd",
            "dict-0000002a.tmp",
            "pack-00000001.pack",
            "dict-zzzzzzzz.zstd",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }
}
