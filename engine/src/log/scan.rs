//! Low-level helpers over frame bytes: finding the next valid frame after
//! damage, and walking frames.

use cairn_codec::frame::{self, Frame, HEADER_LEN};
use cairn_codec::{CodecError, Lsn};

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
    use cairn_codec::frame::RecordKind;
    use cairn_codec::ChainHash;

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
