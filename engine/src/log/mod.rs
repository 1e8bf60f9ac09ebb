//! The durable, segmented, append-only log.
//!
//! ```text
//! .cairn/log/
//!   00000000000000000001.seg   sealed segment: header | frames | footer (immutable, memory-mapped)
//!   00000000000000000001.idx   its sparse index (LSN -> offset every 4 KiB; CRC; rebuilt if missing or stale)
//!   00000000000000052817.seg   the tail segment: header | frames (appended to)
//!   tail.state                 written by a clean close: lets the next open skip scanning the tail
//!   segments.table             every sealed segment's length, header and footer: a reader's open reads it, not each segment (see `table`)
//!   dict-XXXXXXXX.zstd         the zstd dictionary record bodies are compressed with (see `dict`)
//! ```
//!
//! Frames, segment headers and footers are defined in
//! [`cairn_codec::frame`] and [`cairn_codec::segment`].
//!
//! - [`Log`] is the writer (one per store, under the store lock): appends
//!   from many threads, group commit, durability policy, recovery on open.
//! - [`LogReader`] is a read-only view for other processes, refreshed on demand.
//! - [`salvage`] repairs a damaged log, keeping every intact record.
//!
//! Readers only ever see committed records: fully written and, with
//! [`Durability::Always`], durable. An atomic batch is seen whole or not at all.

mod dict;
mod epoch;
mod options;
mod reader;
mod recovery;
mod salvage;
mod scan;
mod segment;
mod sparse_index;
mod table;
mod verify;
mod view;
mod writer;

pub use dict::{DEFAULT_DICTIONARY_SAMPLE_BYTES, SAMPLING as DICTIONARY_SAMPLING};
pub use options::{
    Durability, LogOptions, DEFAULT_INTERVAL_MS, DEFAULT_MAX_SYNCS_IN_FLIGHT,
    DEFAULT_SEGMENT_SIZE_BYTES, MAX_SEGMENT_SIZE_BYTES,
};
pub use reader::LogReader;
pub use recovery::{TailState, TAIL_STATE_FILE};
pub use salvage::{is_placeholder, salvage, DroppedRange, SalvageReport, SALVAGE_SESSION};
pub use scan::{walk_chained, ChainedWalk};
pub use segment::{parse_segment_name, sealed_index_file};
pub use sparse_index::SPARSE_INDEX_INTERVAL_BYTES;
pub use verify::{Problem, VerifyReport};
pub use view::LogIter;
pub use view::MAX_PLANNED_READ_BYTES;
pub use writer::{GroupCommitStats, Log};

use cairn_codec::{ChainHash, Event, Lsn};

/// One committed record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Its sequence number.
    pub lsn: Lsn,
    /// The hash-chain value after it.
    pub chain: ChainHash,
    /// The event it holds.
    pub event: Event,
}

/// The last committed record of a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Its LSN; `Lsn(0)` when the log is empty.
    pub last_lsn: Lsn,
    /// The chain value after it; [`ChainHash::ZERO`] when the log is empty.
    pub chain: ChainHash,
}

impl Default for Head {
    fn default() -> Head {
        Head {
            last_lsn: Lsn(0),
            chain: ChainHash::ZERO,
        }
    }
}

/// A sealed segment's place in the log: the LSNs it holds and the chain
/// value after its last record (from its footer). Immutable once sealed,
/// so a file derived from a segment (the query crate's per-segment index)
/// names the segment by these and is stale when they no longer match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSpan {
    /// Its first LSN (also its file name).
    pub first: Lsn,
    /// Its last LSN.
    pub last: Lsn,
    /// The chain value after its last record.
    pub last_chain: ChainHash,
}

/// Counts and sizes of a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogStats {
    /// Segment files (sealed and tail).
    pub segments: u64,
    /// Sealed (immutable) segments.
    pub sealed_segments: u64,
    /// Committed records.
    pub records: u64,
    /// Bytes of committed segment data (headers, frames, footers).
    pub bytes: u64,
    /// The durability policy the log was opened with. A [`LogReader`] cannot
    /// know the writer's policy and reports the default.
    pub durability: Durability,
    /// The id of the zstd dictionary new records are compressed with (its
    /// file is `dict-<id as 8 hex digits>.zstd`), if the log has one.
    pub dictionary: Option<u32>,
}
