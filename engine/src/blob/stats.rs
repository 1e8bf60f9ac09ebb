//! Blob store figures for `cairn stats`.

use super::BlobStore;

/// Figures of a blob store at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlobStats {
    /// Top-level blobs (whole blobs and chunked blobs; not their chunks).
    pub blobs: u64,
    /// Chunks of chunked blobs, each counted once however many blobs share it.
    pub chunks: u64,
    /// Pack files.
    pub packs: u64,
    /// Sum of the uncompressed sizes of the top-level blobs: the bytes
    /// callers stored, each distinct blob counted once.
    pub raw_bytes: u64,
    /// Sum of the uncompressed sizes of the distinct pieces actually kept:
    /// whole blobs plus distinct chunks. Less than `raw_bytes` when chunked
    /// blobs share chunks.
    pub unique_bytes: u64,
    /// Bytes on disk: the total size of the pack files, including entry
    /// headers, chunk lists and entries garbage collection has not yet
    /// reclaimed.
    pub stored_bytes: u64,
    /// `raw_bytes / unique_bytes`: how much chunk sharing saves (1.0 = none;
    /// 1.0 for an empty store). Identical whole blobs are stored once by
    /// construction and do not show here.
    pub dedup_ratio: f64,
    /// `unique_bytes / stored_bytes`: how much smaller the pieces are on
    /// disk than in memory, overheads included (1.0 for an empty store).
    pub compression_ratio: f64,
    /// The file of the zstd dictionary new small blobs are compressed
    /// with (`dict-XXXXXXXX.zstd`), once the store has trained one.
    pub dictionary: Option<String>,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

impl BlobStore {
    /// The store's figures (see [`BlobStats`] for what each one means).
    pub fn stats(&self) -> BlobStats {
        let mut s = BlobStats::default();
        // A damaged index file is rebuilt from the packs; if even that
        // fails (an I/O error), the figures count nothing.
        for (_, l) in &self.index_entries().unwrap_or_default() {
            match l.kind {
                super::pack::EntryKind::Blob => {
                    s.blobs += 1;
                    s.raw_bytes += l.raw_len;
                    s.unique_bytes += l.raw_len;
                }
                super::pack::EntryKind::ChunkList => {
                    s.blobs += 1;
                    s.raw_bytes += l.raw_len;
                }
                super::pack::EntryKind::Chunk => {
                    s.chunks += 1;
                    s.unique_bytes += l.raw_len;
                }
            }
        }
        let active = self
            .writer
            .lock()
            .active
            .as_ref()
            .map(|a| (a.pack.id, a.len));
        for p in self.packs.read().values() {
            s.packs += 1;
            s.stored_bytes += match active {
                Some((id, len)) if id == p.id => len,
                _ => p.file.len().unwrap_or(0),
            };
        }
        s.dedup_ratio = ratio(s.raw_bytes, s.unique_bytes);
        s.compression_ratio = ratio(s.unique_bytes, s.stored_bytes);
        s.dictionary = self.dicts.current().map(|d| super::dict::file_name(d.id));
        s
    }
}
