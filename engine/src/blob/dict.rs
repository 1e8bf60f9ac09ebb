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
//! The file (`dict-XXXXXXXX.zstd` in the blob directory) is described in
//! [`cairn_codec::zdict`]; loading and training are [`crate::dicts`].
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

pub use cairn_codec::zdict::{file_name, Dict, MAX_DICT_BYTES};

use crate::dicts::Sampling;

/// The largest dictionary trained (110 KiB, zstd's own default): larger
/// ones gain little on small files and cost memory in every (de)compressor.
pub const DICT_TARGET_BYTES: usize = 110 * 1024;
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

/// What the blob store samples and trains.
pub const SAMPLING: Sampling = Sampling {
    min_bytes: SAMPLE_MIN_BYTES,
    max_bytes: SAMPLE_MAX_BYTES,
    dict_bytes: DICT_TARGET_BYTES,
    min_samples: MIN_SAMPLES,
    thread: Some("cairn-blob-dict"),
};

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
    cairn_codec::zdict::train(&data, &sizes, 8 * 1024).expect("train")
}
