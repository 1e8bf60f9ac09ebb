//! How a log is opened: segment size and durability policy.

use std::fmt;
use std::str::FromStr;

use crate::EngineError;

/// Default segment size: large enough that a long session fits in a few
/// files, small enough that sealing and mapping a segment is cheap.
pub const DEFAULT_SEGMENT_SIZE_BYTES: u64 = 64 * 1024 * 1024;
/// The largest segment size: the footer stores the frames' length as a u32.
pub const MAX_SEGMENT_SIZE_BYTES: u64 = u32::MAX as u64;
/// The interval used by `interval` without a number: short enough that at
/// most a tenth of a second of work is at risk, long enough to batch many appends.
pub const DEFAULT_INTERVAL_MS: u64 = 100;

/// When an append becomes durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Every append is durable (fdatasync) before it returns; concurrent
    /// appenders share one fdatasync (group commit).
    #[default]
    Always,
    /// A background thread makes appends durable every `ms` milliseconds.
    Interval {
        /// The interval in milliseconds.
        ms: u64,
    },
    /// Durability is left to the operating system (and to `sync`/`close`).
    Never,
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Durability::Always => f.write_str("always"),
            Durability::Never => f.write_str("never"),
            Durability::Interval { ms } => write!(f, "interval:{ms}"),
        }
    }
}

impl FromStr for Durability {
    type Err = EngineError;

    /// Parses `always`, `never`, `interval` (100 ms) or `interval:<ms>`.
    fn from_str(s: &str) -> Result<Durability, EngineError> {
        let bad = || {
            EngineError::Invalid(format!(
                "unknown durability policy {s:?}: expected always, never, interval or interval:<ms> (ms >= 1)"
            ))
        };
        match s.trim() {
            "always" => Ok(Durability::Always),
            "never" => Ok(Durability::Never),
            "interval" => Ok(Durability::Interval {
                ms: DEFAULT_INTERVAL_MS,
            }),
            other => {
                let ms = other
                    .strip_prefix("interval:")
                    .ok_or_else(bad)?
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| bad())?;
                if ms == 0 {
                    return Err(bad());
                }
                Ok(Durability::Interval { ms })
            }
        }
    }
}

/// fdatasyncs that may run at once by default (see
/// [`LogOptions::max_syncs_in_flight`]). One: an appender whose record was
/// written after the running sync took its mark waits for that sync to end
/// and joins the next group, rather than starting a second sync beside it.
/// Two syncs of one file do overlap on the device (two threads reach
/// ~1.45x the syncs per second of one: `benches/scripts/fsync_concurrency.py`),
/// but with 16 appenders each sync then took longer (mean 182–236 µs
/// against 153–201 µs) and held fewer records (11.4–14.0 against 15.6–15.8):
/// paired bench rounds gave 16 threads ÷ 1 thread 7.5x–8.5x with two
/// against 7.1x–8.8x, median 8.3x, with one (docs/BENCHMARKS.md, session
/// 15: `CAIRN_BENCH_SYNCS=2` runs the bench with two).
pub const DEFAULT_MAX_SYNCS_IN_FLIGHT: u64 = 1;

/// Options for [`Log::open`](super::Log::open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// A segment is sealed and a new one started when the next write would
    /// take it past this size (a segment always holds at least one record
    /// or batch, so one larger record makes a larger segment).
    pub segment_size_bytes: u64,
    /// When appends become durable.
    pub durability: Durability,
    /// Reserve space at the end of the tail segment ahead of the appends,
    /// where the platform allows (Linux): the space is written with zeros
    /// in 1 MiB steps. With `Always` appends are `pwrite`s into it, so
    /// each fdatasync writes data only; otherwise they are copied into a
    /// shared memory map of it, with no system call each. Crash safety is
    /// the same either way: the bytes are in the page cache when an append
    /// is acknowledged, and the durability policy decides when they are
    /// synced. On by default; off writes
    /// every append with `pwrite` at the end of the file.
    pub reserved_tail: bool,
    /// Train the log's zstd dictionary once this many bytes of record
    /// bodies have been appended (default
    /// [`DEFAULT_DICTIONARY_SAMPLE_BYTES`](super::DEFAULT_DICTIONARY_SAMPLE_BYTES);
    /// 0: never). The append whose record completes the samples trains it
    /// (about 0.1 s per MiB) before its record is compressed. A log that
    /// has a dictionary keeps using it whatever this says.
    pub dictionary_sample_bytes: u64,
    /// With `Always`, how many group-commit fdatasyncs may run at once
    /// (default [`DEFAULT_MAX_SYNCS_IN_FLIGHT`]; 0 counts as 1). Syncs
    /// publish in the order they started whatever this says, so a later
    /// success never acknowledges past an earlier failure.
    pub max_syncs_in_flight: u64,
}

impl Default for LogOptions {
    fn default() -> LogOptions {
        LogOptions {
            segment_size_bytes: DEFAULT_SEGMENT_SIZE_BYTES,
            durability: Durability::Always,
            reserved_tail: true,
            dictionary_sample_bytes: super::DEFAULT_DICTIONARY_SAMPLE_BYTES,
            max_syncs_in_flight: DEFAULT_MAX_SYNCS_IN_FLIGHT,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durability_parses_and_displays() {
        for (s, d) in [
            ("always", Durability::Always),
            ("never", Durability::Never),
            ("interval", Durability::Interval { ms: 100 }),
            ("interval:250", Durability::Interval { ms: 250 }),
        ] {
            assert_eq!(s.parse::<Durability>().unwrap(), d);
        }
        for d in [
            Durability::Always,
            Durability::Never,
            Durability::Interval { ms: 7 },
        ] {
            assert_eq!(d.to_string().parse::<Durability>().unwrap(), d);
        }
        for bad in ["", "sometimes", "interval:", "interval:0", "interval:x"] {
            let err = bad.parse::<Durability>().unwrap_err();
            assert!(err.to_string().contains("durability"), "{err}");
        }
        assert_eq!(Durability::default(), Durability::Always);
        assert_eq!(LogOptions::default().segment_size_bytes, 64 << 20);
    }
}
