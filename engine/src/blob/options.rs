//! Settings of the blob store and its garbage collector, with their
//! documented defaults, and the limits that bound every size the store reads
//! from disk.

/// The smallest chunk the content-defined chunker cuts (256 KiB): smaller
/// chunks would make chunk lists long and per-entry overhead noticeable.
pub const CHUNK_MIN_BYTES: u32 = 256 * 1024;
/// The average chunk size the chunker aims for (1 MiB): an append to a large
/// file then stores about one changed chunk plus the new data.
pub const CHUNK_AVG_BYTES: u32 = 1024 * 1024;
/// The largest chunk the chunker cuts (4 MiB): bounds the memory a streaming
/// put or get holds at once.
pub const CHUNK_MAX_BYTES: u32 = 4 * 1024 * 1024;

/// The largest blob stored whole (64 MiB). A blob over the configured
/// chunking threshold is chunked anyway, and the threshold is clamped to
/// this, so a single pack entry never holds more than this many raw bytes.
pub const MAX_WHOLE_BLOB_BYTES: u64 = 64 * 1024 * 1024;

/// The largest raw (uncompressed) payload of one pack entry: a whole blob,
/// a chunk, or a chunk list (40 bytes per chunk, so a list this long
/// describes a file of about 1.6 TiB at the 1 MiB average chunk size).
/// Checked before any allocation when an entry is read.
pub const MAX_ENTRY_RAW_BYTES: u64 = MAX_WHOLE_BLOB_BYTES;

/// Blobs shorter than this are stored raw without trying zstd: a zstd frame
/// header alone costs about a dozen bytes, so tiny inputs never shrink.
pub const COMPRESS_MIN_BYTES: usize = 64;

/// The smallest pack size accepted (64 KiB); smaller values would roll packs
/// after every few blobs.
pub const MIN_PACK_SIZE_BYTES: u64 = 64 * 1024;

/// After this many bytes have been appended since the persisted index was
/// last written, `sync` also writes a new index snapshot, so the tail that
/// `open` has to scan stays short.
pub const INDEX_SNAPSHOT_EVERY_BYTES: u64 = 64 * 1024 * 1024;

/// A store closing with fewer than this many index entries outside its
/// index file (in the index delta and its own appends) appends its own
/// to the delta (`index.delta`, a few hundred bytes) for the next open to
/// read; at this many it merges them all into a new index file. Writing
/// one costs time in proportion to every blob in the store (6.4 MB at
/// 100,000 blobs), so a short process, a hook storing two blobs, must not
/// pay it each time; the delta an open reads stays under 32 KiB.
pub const INDEX_TAIL_MAX_ENTRIES: usize = 512;

/// Bytes of small blobs sampled before the store trains its zstd
/// dictionary (4 MiB, a few hundred source files: enough for a dictionary
/// that shrinks later small blobs by about a seventh; see [`super::dict`]).
pub const DEFAULT_DICTIONARY_SAMPLE_BYTES: u64 = 4 * 1024 * 1024;

/// Settings of a [`BlobStore`](super::BlobStore).
#[derive(Clone, Debug, PartialEq)]
pub struct BlobOptions {
    /// zstd level for blob contents (default 3: fast, most of the gain on
    /// source text). Values outside zstd's range are clamped by zstd.
    pub zstd_level: i32,
    /// A pack file rolls to a new one when the next entry would take it past
    /// this size (default 256 MiB; at least [`MIN_PACK_SIZE_BYTES`]).
    pub pack_size_bytes: u64,
    /// Blobs larger than this are split by content-defined chunking and
    /// stored as a chunk list (default 1 MiB; at most
    /// [`MAX_WHOLE_BLOB_BYTES`]).
    pub chunking_threshold_bytes: u64,
    /// Train the store's zstd dictionary once this many bytes of small
    /// blobs have been stored (default
    /// [`DEFAULT_DICTIONARY_SAMPLE_BYTES`]; 0: never). Training runs on a
    /// background thread; blobs stored meanwhile are compressed without it.
    pub dictionary_sample_bytes: u64,
}

impl Default for BlobOptions {
    fn default() -> Self {
        BlobOptions {
            zstd_level: 3,
            pack_size_bytes: 256 * 1024 * 1024,
            chunking_threshold_bytes: 1024 * 1024,
            dictionary_sample_bytes: DEFAULT_DICTIONARY_SAMPLE_BYTES,
        }
    }
}

impl BlobOptions {
    /// The options with every value brought into its allowed range.
    pub(crate) fn normalized(&self) -> BlobOptions {
        BlobOptions {
            zstd_level: self.zstd_level,
            pack_size_bytes: self.pack_size_bytes.max(MIN_PACK_SIZE_BYTES),
            chunking_threshold_bytes: self.chunking_threshold_bytes.min(MAX_WHOLE_BLOB_BYTES),
            dictionary_sample_bytes: self.dictionary_sample_bytes,
        }
    }
}

/// The dead share of a pack past which an ordinary gc rewrites it (0.3):
/// rewriting copies every live entry, so a pack only slightly dead would
/// cost a full copy to free a little; past 30% dead, a rewrite frees at
/// least 3 bytes for every 7 it copies. Dead blobs in packs below
/// it stay (readable) until a later gc or a compacting one rewrites them.
pub const DEFAULT_REWRITE_THRESHOLD: f64 = 0.3;

/// Settings of one garbage collection.
#[derive(Clone, Debug, PartialEq)]
pub struct GcOptions {
    /// A pack is rewritten (its live entries copied to a new pack, then the
    /// old one deleted) when the dead share of its entry bytes is above this
    /// fraction (default [`DEFAULT_REWRITE_THRESHOLD`]; 0.0 rewrites every
    /// pack holding any dead byte: see [`GcOptions::compact`]). A pack with
    /// no live entry is always deleted.
    pub rewrite_threshold: f64,
    /// A budget for the packs' bytes on disk (default `None`: no budget).
    /// When the packs the threshold chooses would leave the store over it,
    /// more packs holding dead bytes are rewritten, the most dead first,
    /// until the store is expected to fit or none is left; the report says
    /// how many ([`GcReport::packs_rewritten_for_budget`](super::GcReport)).
    pub max_stored_bytes: Option<u64>,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            rewrite_threshold: DEFAULT_REWRITE_THRESHOLD,
            max_stored_bytes: None,
        }
    }
}

impl GcOptions {
    /// A compacting collection: every pack holding a dead entry is
    /// rewritten, so no unreferenced blob stays readable afterwards (only
    /// packs kept because a live entry in them is damaged keep theirs).
    pub fn compact() -> GcOptions {
        GcOptions {
            rewrite_threshold: 0.0,
            max_stored_bytes: None,
        }
    }
}
