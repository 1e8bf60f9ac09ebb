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

/// FastCDC's own streaming chunker over a reader, kept for the tests as
/// the reference the cut points of [`cut_points`] and a [`Cutter`] are
/// held to. The blob store's streaming put cuts segments in place with a
/// [`Cutter`] instead (this copies every byte several times).
#[cfg(test)]
fn stream_chunks<R: std::io::Read>(r: R) -> fastcdc::v2020::StreamCDC<R> {
    fastcdc::v2020::StreamCDC::new(r, CHUNK_MIN_BYTES, CHUNK_AVG_BYTES, CHUNK_MAX_BYTES)
}

/// Candidate positions a [`Cutter`] keeps at most per byte scanned (one per
/// 4 KiB, 128 times what random bytes give): on bytes that give more (a
/// long periodic run whose gear hash keeps matching) it cuts that segment
/// with FastCDC's own loop instead, so its memory stays a small part of the
/// segment's.
pub const MAX_CANDIDATE_DENSITY_BYTES: usize = 4096;

/// Independent hash lanes a [`Cutter`] runs side by side over a segment:
/// one gear hash is a chain of dependent shifts and adds, four chains over
/// four parts of the segment keep the processor's units busy.
pub const SCAN_LANES: usize = 4;

/// Bytes the gear hash at a position depends on: it shifts left one bit a
/// byte, so a byte 64 or more positions back has left the 64-bit word.
pub const GEAR_WINDOW: usize = 64;

/// FastCDC (v2020, normalization level 1: the cut points of
/// [`cut_points`]) over a stream fed in segments, faster than FastCDC's
/// own loop and to the same cut points.
///
/// FastCDC computes, from a chunk's start `s`, a gear hash of the bytes
/// from `s + CHUNK_MIN_BYTES` on, and cuts at the first position whose hash
/// has none of a mask's bits set (a stricter mask before the average size,
/// a looser one after). That hash depends only on the last
/// [`GEAR_WINDOW`] bytes, so from `s + CHUNK_MIN_BYTES + 63` on it is a
/// hash of the stream alone, not of `s`. A cutter scans every byte once,
/// [`SCAN_LANES`] parts of a segment at a time, and keeps the positions
/// whose hash has none of the two masks' common bits set (one in about
/// 512 KiB of random bytes); each chunk's cut is then the first 63 bytes
/// after its minimum hashed exactly as FastCDC does, then a search of the
/// kept positions.
pub struct Cutter {
    gear: Box<[u64; 256]>,
    mask_s: u64,
    mask_l: u64,
    /// `(position, hash)` in the current segment of every position scanned
    /// whose hash has none of `mask_s & mask_l`'s bits set, in order.
    found: Vec<(usize, u64)>,
    /// How many of the segment's first bytes `found` covers.
    scanned: usize,
    /// Positions a scan of `n` bytes may keep: `n / density + slack`.
    density: usize,
    slack: usize,
    /// Segments cut the slow way (for the tests).
    slow_segments: u64,
}

impl Default for Cutter {
    fn default() -> Self {
        Self::new()
    }
}

impl Cutter {
    /// A cutter at the start of a stream.
    pub fn new() -> Self {
        let bits = fastcdc::v2020::logarithm2(CHUNK_AVG_BYTES) as usize;
        let (gear, _) = fastcdc::v2020::get_gear_with_seed(0);
        Cutter {
            gear,
            // Normalization level 1: one bit either side of the average.
            mask_s: fastcdc::v2020::MASKS[bits + 1],
            mask_l: fastcdc::v2020::MASKS[bits - 1],
            found: Vec::new(),
            scanned: 0,
            density: MAX_CANDIDATE_DENSITY_BYTES,
            slack: GEAR_WINDOW,
            slow_segments: 0,
        }
    }

    /// The final cut points of a segment: `buf` holds the stream's bytes
    /// from the start of a chunk on, `eof` says whether the stream ends with
    /// them. Appends `(offset, length)` of each chunk no later byte can
    /// change to `out` and returns where the unfinished rest begins; the
    /// next call's `buf` must begin with that rest (`buf[returned..]`).
    ///
    /// A cut is final once at least [`CHUNK_MAX_BYTES`] follow the chunk's
    /// start (FastCDC looks no further than that) or the stream has ended,
    /// so the cut points of a stream fed through this, segment by segment,
    /// are the ones [`cut_points`] gives for the whole stream at once,
    /// whatever the segments' sizes.
    pub fn cut(&mut self, buf: &[u8], eof: bool, out: &mut Vec<(usize, usize)>) -> usize {
        let scanned = self.scanned.min(buf.len());
        let exact = self.scan(buf, scanned);
        let mut start = 0;
        let mut next_found = 0;
        while start < buf.len() {
            let left = buf.len() - start;
            if !eof && left < CHUNK_MAX_BYTES as usize {
                break;
            }
            let len = if exact {
                self.cut_one(buf, start, left, &mut next_found)
            } else {
                let (_, len) = fastcdc::v2020::cut(
                    &buf[start..],
                    CHUNK_MIN_BYTES as usize,
                    CHUNK_AVG_BYTES as usize,
                    CHUNK_MAX_BYTES as usize,
                    self.mask_s,
                    self.mask_l,
                    self.mask_s << 1,
                    self.mask_l << 1,
                );
                len
            };
            if len == 0 {
                break;
            }
            out.push((start, len));
            start += len;
        }
        // Carry what was scanned of the rest into the next segment.
        if exact {
            self.found.retain(|&(p, _)| p >= start);
            for f in &mut self.found {
                f.0 -= start;
            }
            self.scanned = buf.len() - start;
        } else {
            self.slow_segments += 1;
            self.found.clear();
            self.scanned = 0;
        }
        start
    }

    /// The length of the chunk that starts at `s` with `left` bytes after
    /// it in `buf`: FastCDC's `cut_gear`, with the hash after the first 63
    /// positions taken from `found` (`next` is where to look in it).
    fn cut_one(&self, buf: &[u8], s: usize, left: usize, next: &mut usize) -> usize {
        let min = CHUNK_MIN_BYTES as usize;
        let max = CHUNK_MAX_BYTES as usize;
        if left <= min {
            return left;
        }
        let mut remaining = left;
        let mut center = CHUNK_AVG_BYTES as usize;
        if remaining > max {
            remaining = max;
        } else if remaining < center {
            center = remaining;
        }
        // FastCDC steps two bytes at a time: the stricter mask up to the
        // last even position before `center`, the looser one to the last
        // even position before `remaining`.
        let switch = center / 2 * 2;
        let end = remaining / 2 * 2;
        let mask = |q: usize| if q < switch { self.mask_s } else { self.mask_l };
        let exact_to = (min + GEAR_WINDOW - 1).min(end);
        let mut hash: u64 = 0;
        for q in min..exact_to {
            hash = (hash << 1).wrapping_add(self.gear[usize::from(buf[s + q])]);
            if hash & mask(q) == 0 {
                return q;
            }
        }
        let from = s + exact_to;
        let to = s + end;
        let mut i = *next + self.found[*next..].partition_point(|&(p, _)| p < from);
        while let Some(&(p, h)) = self.found.get(i) {
            if p >= to {
                break;
            }
            if h & mask(p - s) == 0 {
                *next = i;
                return p - s;
            }
            i += 1;
        }
        *next = i;
        remaining
    }

    /// Scans `buf[from..]`, adding to `found`; false if that found too many
    /// positions to keep (see [`MAX_CANDIDATE_DENSITY_BYTES`]), `found`
    /// then cleared and the segment to be cut the slow way.
    fn scan(&mut self, buf: &[u8], from: usize) -> bool {
        let gear = &*self.gear;
        let m = self.mask_s & self.mask_l;
        let n = buf.len() - from;
        let budget = n / self.density + self.slack;
        let part = n / SCAN_LANES;
        let warm = |h: &mut u64, at: usize| {
            for &b in &buf[at.saturating_sub(GEAR_WINDOW - 1)..at] {
                *h = (*h << 1).wrapping_add(gear[usize::from(b)]);
            }
        };
        let mut lanes: [Vec<(usize, u64)>; SCAN_LANES] = Default::default();
        let mut h = [0u64; SCAN_LANES];
        let mut tail_from = from;
        if part >= GEAR_WINDOW {
            for (l, hl) in h.iter_mut().enumerate() {
                warm(hl, from + l * part);
            }
            let parts: [&[u8]; SCAN_LANES] =
                std::array::from_fn(|l| &buf[from + l * part..from + (l + 1) * part]);
            let mut at = 0;
            while let Some(k) = run_lanes(gear, m, parts, at, &mut h) {
                for (l, (&hl, found)) in h.iter().zip(&mut lanes).enumerate() {
                    if hl & m == 0 {
                        found.push((from + l * part + k, hl));
                    }
                }
                if lanes.iter().map(Vec::len).sum::<usize>() > budget {
                    self.found.clear();
                    return false;
                }
                at = k + 1;
            }
            tail_from = from + SCAN_LANES * part;
        } else {
            warm(&mut h[SCAN_LANES - 1], from);
        }
        // The bytes after the last whole part continue the last lane.
        let mut hl = h[SCAN_LANES - 1];
        for (i, &b) in buf[tail_from..].iter().enumerate() {
            hl = (hl << 1).wrapping_add(gear[usize::from(b)]);
            if hl & m == 0 {
                lanes[SCAN_LANES - 1].push((tail_from + i, hl));
            }
        }
        if lanes.iter().map(Vec::len).sum::<usize>() > budget {
            self.found.clear();
            return false;
        }
        for l in &lanes {
            self.found.extend_from_slice(l);
        }
        true
    }
}

/// Runs the gear hash of each lane (`h`, one per part) over `parts[..][at..]`
/// (parts of one length) and stops after the first position where any
/// lane's hash has none of `m`'s bits set, returning it; `None` at the end.
/// The hot loop of a [`Cutter`]'s scan: matches are rare, so it tests
/// all lanes with one branch and leaves the keeping to its caller.
#[inline(never)]
fn run_lanes(
    gear: &[u64; 256],
    m: u64,
    parts: [&[u8]; SCAN_LANES],
    at: usize,
    h: &mut [u64; SCAN_LANES],
) -> Option<usize> {
    let [a, b, c, d] = parts;
    let n = a.len();
    let (a, b, c, d) = (&a[at..n], &b[at..n], &c[at..n], &d[at..n]);
    let [mut h0, mut h1, mut h2, mut h3] = *h;
    let mut hit = None;
    for (i, (((&x0, &x1), &x2), &x3)) in a.iter().zip(b).zip(c).zip(d).enumerate() {
        h0 = (h0 << 1).wrapping_add(gear[usize::from(x0)]);
        h1 = (h1 << 1).wrapping_add(gear[usize::from(x1)]);
        h2 = (h2 << 1).wrapping_add(gear[usize::from(x2)]);
        h3 = (h3 << 1).wrapping_add(gear[usize::from(x3)]);
        if (h0 & m == 0) | (h1 & m == 0) | (h2 & m == 0) | (h3 & m == 0) {
            hit = Some(at + i);
            break;
        }
    }
    *h = [h0, h1, h2, h3];
    hit
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
        let mut cutter = Cutter::new();
        let mut cuts = Vec::new();
        let mut base = 0;
        let mut end = 0;
        loop {
            end = (end + step).min(data.len());
            let eof = end == data.len();
            let mut seg = Vec::new();
            let done = cutter.cut(&data[base..end], eof, &mut seg);
            cuts.extend(seg.iter().map(|&(o, l)| (base + o, l)));
            base += done;
            if eof {
                assert_eq!(base, data.len());
                return cuts;
            }
        }
    }

    #[test]
    fn cuts_by_segments_are_the_cut_points_of_the_whole() {
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
        assert_eq!(Cutter::new().cut(&data[..1000], true, &mut out), 1000);
        assert_eq!(out, vec![(0, 1000)]);
        // Nothing is final before the maximum chunk size is in hand.
        out.clear();
        let short = (CHUNK_MAX_BYTES - 1) as usize;
        assert_eq!(Cutter::new().cut(&data[..short], false, &mut out), 0);
        assert!(out.is_empty());
    }

    /// Bytes from a small alphabet in runs: many more positions match the
    /// masks' common bits than in random bytes.
    fn low_entropy(len: usize, seed: u64, alphabet: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let run = 1 + (x >> 40) as usize % 9;
            let b = b'a'.wrapping_add((x % alphabet) as u8);
            out.extend(std::iter::repeat_n(b, run.min(len - out.len())));
        }
        out
    }

    #[test]
    fn the_cutter_cuts_where_fastcdc_cuts_on_any_bytes() {
        let mut inputs = vec![
            low_entropy(9 << 20, 3, 2),
            low_entropy(9 << 20, 5, 4),
            low_entropy((7 << 20) + 333, 7, 26),
            vec![b'x'; (9 << 20) + 1],
            b"abcdefg".repeat(1 << 20),
        ];
        for len in [
            0,
            1,
            63,
            64,
            262_143,
            262_144,
            262_145,
            262_207,
            262_209,
            1 << 20,
            (4 << 20) + 1,
        ] {
            inputs.push(low_entropy(len, len as u64 + 1, 256));
        }
        for (k, data) in inputs.iter().enumerate() {
            let whole: Vec<_> = cut_points(data).collect();
            for step in [1 << 20, (4 << 20) + 1, 8 << 20, 64 << 20] {
                assert_eq!(
                    cuts_by_segments(data, step),
                    whole,
                    "input {k}, segments of {step}"
                );
            }
        }
    }

    #[test]
    fn a_cut_within_a_window_of_the_minimum_is_found_exactly() {
        // Chunks that start just before `p - CHUNK_MIN_BYTES`, `p` a
        // position FastCDC cuts at: their first possible cut falls among
        // the first 63 hashed bytes, where the hash is not yet the
        // stream's alone.
        let data = low_entropy(6 << 20, 21, 256);
        let (p, _) = cut_points(&data).nth(1).unwrap();
        let first = p - CHUNK_MIN_BYTES as usize - 70;
        for s in first..first + 72 {
            let mut out = Vec::new();
            Cutter::new().cut(&data[s..], true, &mut out);
            let want: Vec<_> = cut_points(&data[s..]).collect();
            assert_eq!(out, want, "from {s}");
        }
    }

    #[test]
    fn a_segment_dense_with_matches_is_cut_the_slow_way() {
        // Random bytes match about once in 512 KiB: with room for two
        // matches a scan, most segments overflow and are cut the slow way,
        // the next one scanned whole again.
        let data = low_entropy(30 << 20, 9, 256);
        let mut cutter = Cutter::new();
        cutter.density = usize::MAX;
        cutter.slack = 2;
        let mut cuts = Vec::new();
        let mut base = 0;
        let mut end = 0;
        while base < data.len() {
            end = (end + (5 << 20)).min(data.len());
            let mut seg = Vec::new();
            let done = cutter.cut(&data[base..end], end == data.len(), &mut seg);
            assert!(cutter.found.len() <= 2);
            cuts.extend(seg.iter().map(|&(o, l)| (base + o, l)));
            base += done;
        }
        assert!(cutter.slow_segments >= 2, "{}", cutter.slow_segments);
        assert_eq!(cuts, cut_points(&data).collect::<Vec<_>>());
    }
}
