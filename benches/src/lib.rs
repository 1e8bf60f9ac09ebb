//! Shared helpers for cairn's benchmarks: deterministic generators of
//! agent events and source-like files, so every benchmark measures cairn and
//! its peer on exactly the same data.

pub mod agent;

use cairn_codec::{Event, EventKind, Timestamp};

/// A new temporary directory for a benchmark's data, under
/// `$CAIRN_BENCH_DIR` (default: the system temp dir), which must be a real
/// disk for sync figures to mean anything; removed when dropped.
pub fn bench_dir(prefix: &str) -> tempfile::TempDir {
    let base = std::env::var_os("CAIRN_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .expect("bench temp dir")
}

/// A whole-number setting of an example from the environment variable
/// `name`, or `default` when it is not set.
pub fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// A small deterministic PRNG (xorshift64*), so generated data is identical on every run.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is replaced by a fixed non-zero seed).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

const WORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "self",
    "return",
    "match",
    "impl",
    "struct",
    "pub",
    "use",
    "config",
    "value",
    "error",
    "result",
    "buffer",
    "index",
    "path",
    "file",
    "record",
    "session",
    "checkpoint",
    "write",
    "read",
    "len",
    "Some",
    "None",
    "Ok",
    "Err",
    "vec",
    "map",
    "iter",
    "into",
    "from",
    "string",
    "u64",
    "&str",
    "=>",
    "{",
    "}",
];

/// Source-like text of about `len` bytes: lines of identifiers and punctuation
/// that compress about as well as real code (roughly 3-4x with zstd-3).
pub fn source_like(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 80);
    while out.len() < len {
        let indent = rng.below(4) as usize * 4;
        out.extend(std::iter::repeat_n(b' ', indent));
        let words = 3 + rng.below(8);
        for i in 0..words {
            if i > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
            if rng.below(5) == 0 {
                out.extend_from_slice(format!("_{}", rng.below(1000)).as_bytes());
            }
        }
        out.extend_from_slice(b";\n");
    }
    out.truncate(len);
    out
}

/// `n` tool-call events whose encoded frames are about 200 bytes (229 on
/// average): the events of the log's append benchmarks.
pub fn tool_calls_200b(n: usize) -> Vec<Event> {
    let mut rng = Rng::new(42);
    (0..n as u64)
        .map(|i| {
            let mut e = Event::new(EventKind::ToolCall, format!("session-{}", i % 8));
            e.ts = Timestamp(1_700_000_000_000 + i as i64);
            e.tool = Some("bash".into());
            e.path = Some(format!("src/module_{}/file_{}.rs", i % 17, i % 101));
            e.latency_ms = Some(i % 900);
            let text = source_like(&mut rng, 90);
            e.text = Some(String::from_utf8_lossy(&text).into_owned());
            e
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_deterministic() {
        let a = source_like(&mut Rng::new(7), 5000);
        let b = source_like(&mut Rng::new(7), 5000);
        assert_eq!(a, b);
        assert_eq!(a.len(), 5000);
        assert_ne!(a, source_like(&mut Rng::new(8), 5000));
    }
}
