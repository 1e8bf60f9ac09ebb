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

/// The log directory of a store on the simulated disk.
pub const SIM_LOG_DIR: &str = "/store/.cairn/log";

/// A seeded simulated disk holding an empty [`SIM_LOG_DIR`] whose
/// directory entries (and their parents') are durable, as `cairn init`
/// leaves them.
pub fn sim_disk_with_log_dir(seed: u64) -> cairn_engine::vfs::SimVfs {
    sim_disk_with_dir(seed, SIM_LOG_DIR)
}

/// A seeded simulated disk holding the empty directory `dir` (absolute)
/// whose entry and every parent's are durable.
pub fn sim_disk_with_dir(seed: u64, dir: &str) -> cairn_engine::vfs::SimVfs {
    use cairn_engine::Vfs;
    let disk = cairn_engine::vfs::SimVfs::seeded(seed);
    let dir = std::path::Path::new(dir);
    disk.create_dir_all(dir).unwrap();
    for d in dir.ancestors().skip(1) {
        disk.sync_dir(d).unwrap();
    }
    disk
}
