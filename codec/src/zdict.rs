//! zstd dictionaries: the dictionary file, and the per-thread zstd
//! contexts that compress and decompress with one.
//!
//! Small records and small files compress poorly on their own: each zstd
//! frame starts knowing nothing, and a record of a few KB spends much of
//! its output teaching the decoder its vocabulary. A dictionary trained on
//! samples of the store's own data gives every frame that vocabulary up
//! front. The log and the blob store each train their own and keep it in
//! their directory as:
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
//! zstd derives a trained dictionary's id from its contents, and every
//! zstd frame made with a dictionary names its id, which the decoder checks:
//! a frame is never decoded with another dictionary than its own.

use std::cell::RefCell;
use std::sync::Arc;

use crate::bytes::u32_le;
use crate::CodecError;

/// Dictionary file magic, with the format version in its last byte.
pub const DICT_MAGIC: [u8; 8] = *b"CAIRNDC1";
/// Length of the dictionary file header.
pub const DICT_HEADER_LEN: usize = 48;
/// The largest dictionary file read (1 MiB): checked before allocating.
pub const MAX_DICT_BYTES: u32 = 1024 * 1024;
/// zstd contexts kept per thread (each for one level and dictionary): a
/// thread that writes both log records and blobs keeps both warm, and
/// loading a dictionary into a context costs far more than using it.
const CONTEXTS_PER_THREAD: usize = 4;

/// A loaded dictionary.
#[derive(Debug)]
pub struct Dict {
    /// zstd's id for it, as written in every frame that uses it.
    pub id: u32,
    /// The dictionary bytes.
    pub bytes: Vec<u8>,
    /// Unique to this value in the process: what the per-thread contexts
    /// are keyed by, so two dictionaries that share an id (from two stores)
    /// never share a context.
    key: u64,
}

impl Dict {
    /// A dictionary with zstd id `id`.
    pub fn new(id: u32, bytes: Vec<u8>) -> Dict {
        static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let key = NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Dict { id, bytes, key }
    }
}

impl PartialEq for Dict {
    fn eq(&self, other: &Dict) -> bool {
        (self.id, &self.bytes) == (other.id, &other.bytes)
    }
}

impl Eq for Dict {}

/// Finds a dictionary by id (for a frame that names one), or `None` if it
/// is missing or damaged.
pub type DictLookup<'a> = &'a dyn Fn(u32) -> Option<Arc<Dict>>;

/// A [`DictLookup`] that knows no dictionary.
pub fn no_dicts(_: u32) -> Option<Arc<Dict>> {
    None
}

/// The file name of dictionary `id`.
pub fn file_name(id: u32) -> String {
    format!("dict-{id:08x}.zstd")
}

/// The dictionary id a file name stands for, if it is a dictionary file's.
pub fn parse_file_name(name: &str) -> Option<u32> {
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
    Ok(Dict::new(id, bytes.to_vec()))
}

thread_local! {
    /// Compressors of this thread, keyed by level and [`Dict::key`] (0:
    /// none), most recently used last. Making a context per call was a
    /// fifth of the time of appending realistic agent events.
    static COMPRESSORS: RefCell<Vec<((i32, u64), zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(Vec::new()) };
    /// Decompressors of this thread, keyed by [`Dict::key`] (0: none).
    static DECOMPRESSORS: RefCell<Vec<(u64, zstd::bulk::Decompressor<'static>)>> =
        const { RefCell::new(Vec::new()) };
}

/// Moves the entry `key` picks to the end of `cache` (making it with
/// `make` if absent, evicting the least recently used past
/// [`CONTEXTS_PER_THREAD`]) and returns it.
fn cached<K: PartialEq, T>(
    cache: &mut Vec<(K, T)>,
    key: K,
    make: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<&mut T> {
    match cache.iter().position(|(k, _)| *k == key) {
        Some(i) => {
            let e = cache.remove(i);
            cache.push(e);
        }
        None => {
            let t = make()?;
            if cache.len() >= CONTEXTS_PER_THREAD {
                cache.remove(0);
            }
            cache.push((key, t));
        }
    }
    match cache.last_mut() {
        Some((_, t)) => Ok(t),
        None => Err(std::io::Error::other("zstd context cache is empty")),
    }
}

/// `raw` compressed as one zstd frame at `level` (with `dict`, if given)
/// by this thread's compressor. The frame records its content size (and
/// names the dictionary), so a decoder can bound its output.
pub fn compress(level: i32, raw: &[u8], dict: Option<&Dict>) -> Result<Vec<u8>, CodecError> {
    let key = dict.map_or(0, |d| d.key);
    COMPRESSORS
        .with(|c| {
            let mut c = c.borrow_mut();
            let z = cached(&mut c, (level, key), || {
                zstd::bulk::Compressor::with_dictionary(level, dict.map_or(&[][..], |d| &d.bytes))
            })?;
            z.compress(raw)
        })
        .map_err(|e| CodecError::Body(format!("zstd compression: {e}")))
}

/// Decompresses the zstd frame `payload` into at most `capacity` bytes,
/// with `dict` if given, by this thread's decompressor. Output that would
/// pass `capacity` is an error, never an allocation past it.
pub fn decompress(
    payload: &[u8],
    capacity: usize,
    dict: Option<&Dict>,
) -> std::io::Result<Vec<u8>> {
    let key = dict.map_or(0, |d| d.key);
    DECOMPRESSORS.with(|d| {
        let mut d = d.borrow_mut();
        let z = cached(&mut d, key, || {
            zstd::bulk::Decompressor::with_dictionary(dict.map_or(&[][..], |d| &d.bytes))
        })?;
        z.decompress(payload, capacity)
    })
}

/// The dictionary id a zstd frame names (0: none, or not a zstd frame).
pub fn frame_dict_id(payload: &[u8]) -> u32 {
    zstd::zstd_safe::get_dict_id_from_frame(payload).map_or(0, |n| n.get())
}

/// The dictionary a zstd frame needs, checked against what its container
/// says: `flagged` is the container's "needs a dictionary" bit. Errors: a
/// flagged frame naming no dictionary, an unflagged frame naming one, and
/// a dictionary that `dicts` does not have ([`CodecError::MissingDictionary`]).
pub fn frame_dict(
    payload: &[u8],
    flagged: bool,
    what: &str,
    dicts: DictLookup<'_>,
) -> Result<Option<Arc<Dict>>, CodecError> {
    let named = frame_dict_id(payload);
    match (flagged, named) {
        (false, 0) => Ok(None),
        (true, 0) => Err(CodecError::Invalid {
            what: format!("{what} needs a dictionary but its zstd frame names none"),
        }),
        (false, _) => Err(CodecError::Invalid {
            what: format!(
                "{what}'s zstd frame names a dictionary but it is not flagged as needing one"
            ),
        }),
        (true, id) => dicts(id)
            .map(Some)
            .ok_or(CodecError::MissingDictionary { id }),
    }
}

/// A dictionary trained on `samples` (concatenated in `data`, lengths in
/// `sizes`) of at most `max_bytes`, for tests and tools. `None` if zstd
/// cannot train on them (too few or too uniform).
pub fn train(data: &[u8], sizes: &[usize], max_bytes: usize) -> Option<Dict> {
    let bytes = zstd::dict::from_continuous(data, sizes, max_bytes).ok()?;
    let id = zstd::zstd_safe::get_dict_id_from_dict(&bytes)?.get();
    (bytes.len() <= MAX_DICT_BYTES as usize).then(|| Dict::new(id, bytes))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Log-like text of `len` bytes: numbered lines that repeat a few
    /// shapes with varying values (seeded).
    fn text(len: usize, seed: u64) -> Vec<u8> {
        let shapes = [
            "ran cargo test: {} passed, 0 failed\n",
            "edit src/module_{}.rs: +{} -2 lines\n",
            "error[E0{}]: mismatched types in fn parse\n",
        ];
        let mut out = Vec::with_capacity(len + 64);
        let mut i = seed;
        while out.len() < len {
            i = i.wrapping_mul(2862933555777941757).wrapping_add(3037000493);
            let shape = shapes[(i >> 40) as usize % shapes.len()];
            out.extend_from_slice(
                shape
                    .replace("{}", &((i >> 20) % 977).to_string())
                    .as_bytes(),
            );
        }
        out.truncate(len);
        out
    }

    fn dict_from(sample: &[u8]) -> Dict {
        let (mut data, mut sizes) = (Vec::new(), Vec::new());
        for i in 0..200 {
            let one = [sample, &text(1000, i)].concat();
            sizes.push(one.len());
            data.extend_from_slice(&one);
        }
        train(&data, &sizes, 4 * 1024).unwrap()
    }

    fn dict() -> Dict {
        let (mut data, mut sizes) = (Vec::new(), Vec::new());
        for i in 0..200 {
            let one = text(2000, i);
            sizes.push(one.len());
            data.extend_from_slice(&one);
        }
        train(&data, &sizes, 16 * 1024).unwrap()
    }

    #[test]
    fn dictionary_file_round_trips_and_every_damage_is_refused() {
        let d = dict();
        let file = encode_file(d.id, &d.bytes);
        assert_eq!(decode_file(&file, d.id).unwrap(), d);
        assert_eq!(parse_file_name(&file_name(d.id)), Some(d.id));
        // Another id in the name.
        assert!(decode_file(&file, d.id ^ 1).is_err());
        // Any flipped byte, and any cut, is refused.
        for i in (0..file.len()).step_by(97).chain(0..DICT_HEADER_LEN) {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            assert!(decode_file(&bad, d.id).is_err(), "flip at {i}");
        }
        for cut in [0, 7, DICT_HEADER_LEN, file.len() - 1] {
            assert!(decode_file(&file[..cut], d.id).is_err(), "cut at {cut}");
        }
        // A declared length over the limit is refused before anything else.
        let mut huge = file.clone();
        huge[12..16].copy_from_slice(&(MAX_DICT_BYTES + 1).to_le_bytes());
        assert!(decode_file(&huge, d.id)
            .unwrap_err()
            .contains("over the limit"));
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

    #[test]
    fn frames_need_their_own_dictionary_and_say_which() {
        let d = Arc::new(dict());
        let raw = text(3000, 9_999);
        let with = compress(3, &raw, Some(&d)).unwrap();
        let without = compress(3, &raw, None).unwrap();
        assert!(
            with.len() < without.len(),
            "{} vs {}",
            with.len(),
            without.len()
        );
        let have = |id: u32| (id == d.id).then(|| d.clone());
        // The right dictionary, found by the id the frame names.
        let got = frame_dict(&with, true, "t", &have).unwrap().unwrap();
        assert_eq!(decompress(&with, raw.len(), Some(&got)).unwrap(), raw);
        // Missing: an error naming the id. Flags that disagree: refused.
        assert!(matches!(
            frame_dict(&with, true, "t", &no_dicts),
            Err(CodecError::MissingDictionary { id }) if id == d.id
        ));
        assert!(frame_dict(&with, false, "t", &have).is_err());
        assert!(frame_dict(&without, true, "t", &have).is_err());
        assert!(frame_dict(&without, false, "t", &have).unwrap().is_none());
        // Decoding with no dictionary, or another one, fails: never wrong bytes.
        assert!(decompress(&with, raw.len(), None).is_err());
        let other = Dict::new(d.id, dict_from(&text(500, 1)).bytes);
        assert!(decompress(&with, raw.len(), Some(&other)).map_or(true, |o| o != raw));
        // Output past the capacity is an error.
        assert!(decompress(&with, raw.len() - 1, Some(&d)).is_err());
    }

    #[test]
    fn contexts_are_reused_and_evicted_by_key() {
        let d = Arc::new(dict());
        let raw = text(1000, 3);
        // More keys than the cache holds, twice round: every result is
        // what a fresh context gives.
        for _ in 0..2 {
            for level in 1..=CONTEXTS_PER_THREAD as i32 + 1 {
                for dict in [None, Some(&*d)] {
                    let z = compress(level, &raw, dict).unwrap();
                    let fresh = zstd::bulk::Compressor::with_dictionary(
                        level,
                        dict.map_or(&[][..], |d| &d.bytes),
                    )
                    .unwrap()
                    .compress(&raw)
                    .unwrap();
                    assert_eq!(z, fresh);
                    assert_eq!(decompress(&z, raw.len(), dict).unwrap(), raw);
                }
            }
        }
        COMPRESSORS.with(|c| assert_eq!(c.borrow().len(), CONTEXTS_PER_THREAD));
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
}
