//! Content-defined chunking of large blobs, and the chunk-list object that
//! names a chunked blob's pieces.
//!
//! A blob over the chunking threshold is cut with FastCDC (v2020,
//! [`CHUNK_MIN_BYTES`] / [`CHUNK_AVG_BYTES`] / [`CHUNK_MAX_BYTES`]). Each
//! chunk is stored as its own entry keyed by its blake3; the blob itself is
//! a chunk-list entry keyed by the blake3 of the whole contents. Because cut
//! points depend on content, appending to a large file changes only its last
//! chunk or two, and only those are stored again.
//!
//! ```text
//! chunk-list payload: count x 40 bytes, in order
//!  0 32  chunk hash (blake3 of the chunk's bytes)
//! 32  8  chunk length u64 LE (1 ..= CHUNK_MAX_BYTES)
//! ```
//! The lengths must add up to the entry's raw length.

use cairn_codec::{BlobHash, CodecError};

use super::options::{CHUNK_AVG_BYTES, CHUNK_MAX_BYTES, CHUNK_MIN_BYTES};

/// Bytes per chunk in a chunk-list payload.
pub const CHUNK_REF_LEN: usize = 40;

/// One chunk of a chunked blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    /// blake3 of the chunk.
    pub hash: BlobHash,
    /// The chunk's length.
    pub len: u64,
}

/// Encodes a chunk list.
pub fn encode_chunk_list(chunks: &[ChunkRef]) -> Vec<u8> {
    let mut out = Vec::with_capacity(chunks.len() * CHUNK_REF_LEN);
    for c in chunks {
        out.extend_from_slice(&c.hash.0);
        out.extend_from_slice(&c.len.to_le_bytes());
    }
    out
}

/// Decodes a chunk list and checks it: whole rows, at least one chunk, each
/// length in `1..=CHUNK_MAX_BYTES`, and the lengths adding up to `raw_len`.
pub fn decode_chunk_list(payload: &[u8], raw_len: u64) -> Result<Vec<ChunkRef>, CodecError> {
    if payload.is_empty() || !payload.len().is_multiple_of(CHUNK_REF_LEN) {
        return Err(CodecError::Invalid {
            what: format!(
                "chunk list of {} bytes is not a non-empty multiple of {CHUNK_REF_LEN}",
                payload.len()
            ),
        });
    }
    let mut out = Vec::with_capacity(payload.len() / CHUNK_REF_LEN);
    let mut total: u64 = 0;
    for row in payload.chunks_exact(CHUNK_REF_LEN) {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&row[0..32]);
        let mut len = [0u8; 8];
        len.copy_from_slice(&row[32..40]);
        let len = u64::from_le_bytes(len);
        if len == 0 || len > u64::from(CHUNK_MAX_BYTES) {
            return Err(CodecError::Invalid {
                what: format!(
                    "chunk {} has length {len}, outside 1..={CHUNK_MAX_BYTES}",
                    out.len()
                ),
            });
        }
        total = total.saturating_add(len);
        out.push(ChunkRef {
            hash: BlobHash(hash),
            len,
        });
    }
    if total != raw_len {
        return Err(CodecError::Invalid {
            what: format!("chunk lengths add up to {total}, the blob records {raw_len}"),
        });
    }
    Ok(out)
}

/// The cut points of `data`: `(offset, length)` of each chunk, in order.
pub fn cut_points(data: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    fastcdc::v2020::FastCDC::new(data, CHUNK_MIN_BYTES, CHUNK_AVG_BYTES, CHUNK_MAX_BYTES)
        .map(|c| (c.offset, c.length))
}

/// A streaming chunker over a reader: yields each chunk's bytes, holding at
/// most [`CHUNK_MAX_BYTES`] of input plus the chunk being returned. It copies
/// every byte several times (into its buffer, into each chunk, and the rest
/// of its buffer forward); the blob store's own streaming put cuts segments
/// in place with [`final_cuts`] instead, to the same cut points.
pub fn stream_chunks<R: std::io::Read>(r: R) -> fastcdc::v2020::StreamCDC<R> {
    fastcdc::v2020::StreamCDC::new(r, CHUNK_MIN_BYTES, CHUNK_AVG_BYTES, CHUNK_MAX_BYTES)
}

/// The cut points of a segment of a stream that are final: `buf` holds the
/// stream's bytes from the start of a chunk on, `eof` says whether the
/// stream ends with them. Appends `(offset, length)` of each chunk that no
/// later byte can change to `out` and returns where the unfinished rest
/// begins (the caller carries `buf[returned..]` into its next segment).
///
/// A cut is final once at least [`CHUNK_MAX_BYTES`] follow the chunk's
/// start (FastCDC looks no further than that) or the stream has ended, so
/// the cut points of a stream fed through this, segment by segment, are
/// the ones [`cut_points`] gives for the whole stream at once, whatever
/// the segments' sizes.
pub fn final_cuts(buf: &[u8], eof: bool, out: &mut Vec<(usize, usize)>) -> usize {
    let cdc = fastcdc::v2020::FastCDC::new(buf, CHUNK_MIN_BYTES, CHUNK_AVG_BYTES, CHUNK_MAX_BYTES);
    let mut start = 0;
    while start < buf.len() {
        let left = buf.len() - start;
        if !eof && left < CHUNK_MAX_BYTES as usize {
            break;
        }
        let (_, end) = cdc.cut(start, left);
        if end <= start {
            break;
        }
        out.push((start, end - start));
        start = end;
    }
    start
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refs() -> Vec<ChunkRef> {
        vec![
            ChunkRef {
                hash: BlobHash::of(b"one"),
                len: 300_000,
            },
            ChunkRef {
                hash: BlobHash::of(b"two"),
                len: 5,
            },
        ]
    }

    #[test]
    fn chunk_list_round_trips() {
        let r = refs();
        assert_eq!(
            decode_chunk_list(&encode_chunk_list(&r), 300_005).unwrap(),
            r
        );
    }

    #[test]
    fn malformed_chunk_lists_are_rejected() {
        let b = encode_chunk_list(&refs());
        assert!(decode_chunk_list(&b, 300_004).is_err());
        assert!(decode_chunk_list(&b[..79], 300_005).is_err());
        assert!(decode_chunk_list(&[], 0).is_err());
        let mut zero = b.clone();
        zero[72..80].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode_chunk_list(&zero, 300_000).is_err());
        let mut huge = b.clone();
        huge[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_chunk_list(&huge, u64::MAX).is_err());
    }

    #[test]
    fn cut_points_cover_the_input_within_bounds() {
        let mut data = vec![0u8; 6 << 20];
        let mut x = 7u64;
        for b in &mut data {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let cuts: Vec<_> = cut_points(&data).collect();
        assert!(cuts.len() >= 2);
        let mut next = 0;
        for (i, &(off, len)) in cuts.iter().enumerate() {
            assert_eq!(off, next);
            assert!(len <= CHUNK_MAX_BYTES as usize);
            if i + 1 < cuts.len() {
                assert!(len >= CHUNK_MIN_BYTES as usize);
            }
            next += len;
        }
        assert_eq!(next, data.len());
        // Streaming gives the same cut points.
        let streamed: Vec<_> = stream_chunks(&data[..])
            .map(|c| {
                let c = c.unwrap();
                (c.offset as usize, c.length)
            })
            .collect();
        assert_eq!(streamed, cuts);
    }

    /// Cuts `data` the way the blob store's streaming put does: segments of
    /// `step` new bytes each, the unfinished rest carried into the next.
    fn cuts_by_segments(data: &[u8], step: usize) -> Vec<(usize, usize)> {
        let mut cuts = Vec::new();
        let mut base = 0;
        let mut end = 0;
        loop {
            end = (end + step).min(data.len());
            let eof = end == data.len();
            let mut seg = Vec::new();
            let done = final_cuts(&data[base..end], eof, &mut seg);
            cuts.extend(seg.iter().map(|&(o, l)| (base + o, l)));
            base += done;
            if eof {
                assert_eq!(base, data.len());
                return cuts;
            }
        }
    }

    #[test]
    fn final_cuts_by_segments_are_the_cut_points_of_the_whole() {
        let mut data = vec![0u8; 13 << 20];
        let mut x = 11u64;
        for b in &mut data[..5 << 20] {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = (x >> 24) as u8;
        }
        // Zeros from 5 MiB to 9 MiB + 7 (cut at the maximum), then noise.
        for b in &mut data[(9 << 20) + 7..] {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = (x >> 24) as u8;
        }
        let whole: Vec<_> = cut_points(&data).collect();
        assert!(whole.iter().any(|&(_, l)| l == CHUNK_MAX_BYTES as usize));
        for step in [1 << 20, (4 << 20) - 1, 4 << 20, (8 << 20) + 13, 32 << 20] {
            assert_eq!(cuts_by_segments(&data, step), whole, "segments of {step}");
        }
        // A stream shorter than the smallest chunk is one chunk.
        let mut out = Vec::new();
        assert_eq!(final_cuts(&data[..1000], true, &mut out), 1000);
        assert_eq!(out, vec![(0, 1000)]);
        // Nothing is final before the maximum chunk size is in hand.
        out.clear();
        let short = (CHUNK_MAX_BYTES - 1) as usize;
        assert_eq!(final_cuts(&data[..short], false, &mut out), 0);
        assert!(out.is_empty());
    }
}
