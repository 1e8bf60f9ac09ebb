//! Low-level helpers over frame bytes: finishing a pre-encoded frame under
//! the writer lock, and finding the next valid frame after damage.

use cairn_codec::frame::{self, ChainForm, Frame, CRC_SEED, HEADER_LEN};
use cairn_codec::{ChainHash, CodecError, Lsn};

/// Byte range of the LSN field in a frame header (see `cairn_codec::frame`).
const LSN_FIELD: std::ops::Range<usize> = 12..20;
/// Byte range of the chain field in a frame header.
const CHAIN_FIELD: std::ops::Range<usize> = 20..52;
/// Byte range of the CRC field in a frame header.
const CRC_FIELD: std::ops::Range<usize> = 4..8;

/// Sets the LSN and chain of a frame that was encoded by [`frame::encode`]
/// with a placeholder LSN and chain, and recomputes its CRC, so the costly
/// part of encoding (MessagePack, zstd) runs outside the writer lock.
/// Returns the new chain value. The result is byte-for-byte what
/// `frame::encode` would have produced (tested below).
pub(crate) fn finish_frame(f: &mut [u8], lsn: Lsn, prev: ChainHash, form: ChainForm) -> ChainHash {
    f[LSN_FIELD].copy_from_slice(&lsn.0.to_le_bytes());
    let (kind, flags) = (f[8], f[9]);
    let chain = form.next(prev, lsn, kind, flags, &f[HEADER_LEN..]);
    f[CHAIN_FIELD].copy_from_slice(&chain.0);
    let mut c = crc32fast::Hasher::new_with_initial(CRC_SEED);
    c.update(&f[0..4]);
    c.update(&f[8..]);
    let crc = c.finalize();
    f[CRC_FIELD].copy_from_slice(&crc.to_le_bytes());
    chain
}

/// Offset (from the start of `buf`) of the first valid frame at or after
/// `from` whose LSN is at least `min_lsn`, if any. Used to tell a torn tail
/// (nothing valid follows) from corruption (good records follow).
pub(crate) fn find_next_valid(buf: &[u8], from: usize, min_lsn: Lsn) -> Option<usize> {
    let last = buf.len().checked_sub(HEADER_LEN)?;
    (from..=last).find(|&p| matches!(frame::decode(&buf[p..]), Ok(f) if f.lsn >= min_lsn))
}

/// One step of [`walk`].
pub(crate) enum Step<'a> {
    /// A frame whose CRC checks, at `off`.
    Frame(usize, Frame<'a>),
    /// Bytes at `off` that are not a valid frame; `next` is the offset of the
    /// next valid frame, or `None` if nothing valid follows.
    Bad {
        /// Offset of the damage.
        off: usize,
        /// Offset where valid frames resume.
        next: Option<usize>,
        /// Why the bytes at `off` are not a frame.
        err: CodecError,
    },
}

/// Walks the frames in `buf[start..]`, resynchronising after damage at the
/// next valid frame (any LSN); `visit` returns false to stop.
pub(crate) fn walk<'a>(buf: &'a [u8], start: usize, mut visit: impl FnMut(Step<'a>) -> bool) {
    let mut off = start;
    while off < buf.len() {
        match frame::decode(&buf[off..]) {
            Ok(f) => {
                let len = f.len();
                if !visit(Step::Frame(off, f)) {
                    return;
                }
                off += len;
            }
            Err(err) => {
                let next = find_next_valid(buf, off + 1, Lsn(0));
                if !visit(Step::Bad { off, next, err }) {
                    return;
                }
                match next {
                    Some(n) => off = n,
                    None => return,
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use cairn_codec::frame::{RecordKind, FLAG_BATCH_CONT};

    #[test]
    fn finish_frame_matches_codec_encode() {
        for (body, flags) in [
            (b"hello".to_vec(), 0),
            ("abc".repeat(1000).into_bytes(), FLAG_BATCH_CONT),
            (Vec::new(), 0),
        ] {
            let prev = ChainHash([9; 32]);
            let mut expected = Vec::new();
            let chain = frame::encode(
                &mut expected,
                Lsn(42),
                RecordKind::Event,
                flags,
                &body,
                prev,
            )
            .unwrap();
            // The writer's path for a body that may be compressed: framed
            // unplaced, then finished under the lock.
            let mut pre = Vec::new();
            frame::encode_unplaced(&mut pre, RecordKind::Event, flags, &body, None).unwrap();
            assert_eq!(
                finish_frame(&mut pre, Lsn(42), prev, ChainForm::CURRENT),
                chain
            );
            assert_eq!(pre, expected);
            if body.len() < frame::COMPRESS_MIN_BYTES {
                // The writer's fast path: header prepared around a body
                // encoded in place, then finished under the lock.
                let mut fast = vec![0xEE; frame::HEADER_LEN];
                fast.extend_from_slice(&body);
                frame::prepare_header(&mut fast, RecordKind::Event, flags);
                assert_eq!(
                    finish_frame(&mut fast, Lsn(42), prev, ChainForm::CURRENT),
                    chain
                );
                assert_eq!(fast, expected);
            }
        }
    }

    #[test]
    fn walk_resyncs_after_damage() {
        let mut buf = Vec::new();
        let mut chain = ChainHash::ZERO;
        let mut offs = Vec::new();
        for i in 1..=3u64 {
            offs.push(buf.len());
            chain = frame::encode(&mut buf, Lsn(i), RecordKind::Event, 0, b"body", chain).unwrap();
        }
        buf[offs[1] + 30] ^= 1;
        let mut seen = Vec::new();
        walk(&buf, 0, |s| {
            match s {
                Step::Frame(off, f) => seen.push(format!("{off}:{}", f.lsn)),
                Step::Bad { off, next, .. } => seen.push(format!("bad {off} -> {next:?}")),
            }
            true
        });
        assert_eq!(
            seen,
            vec![
                format!("0:1"),
                format!("bad {} -> Some({})", offs[1], offs[2]),
                format!("{}:3", offs[2])
            ]
        );
        assert_eq!(find_next_valid(&buf, offs[1] + 1, Lsn(4)), None);
    }
}
