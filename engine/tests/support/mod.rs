//! Helpers shared by the engine's integration tests (each test binary uses
//! some of them).
#![allow(dead_code)]

/// A xorshift generator seeded by `seed`: reproducible noise, no crate.
pub fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// `len` hex digits drawn from [`xorshift`]: text that zstd can shrink to
/// about half and no further, so records built from it keep a known size
/// on disk.
pub fn hex_text(seed: u64, len: usize) -> String {
    xorshift(seed)
        .take(len)
        .map(|x| char::from(b"0123456789abcdef"[(x >> 60) as usize]))
        .collect()
}
