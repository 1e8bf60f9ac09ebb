//! Helpers shared by the engine's integration tests.

/// `len` hex digits drawn from a xorshift generator seeded by `seed`: text
/// that zstd can shrink to about half and no further, so records built
/// from it keep a known size on disk.
pub fn hex_text(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdef"[(x >> 60) as usize])
        })
        .collect()
}
