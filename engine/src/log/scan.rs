//! Low-level helpers over frame bytes: finding the next valid frame after
//! damage, and walking frames.

use cairn_codec::frame::{self, ChainForm, Frame, HEADER_LEN};
use cairn_codec::{CodecError, Lsn};

use super::Head;

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

/// Where [`walk_chained`] stopped in a segment's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainedWalk {
    /// Bytes of the walked buffer up to the end of the last complete
    /// batch (0 if none completed).
    pub committed: usize,
    /// Offset of the last frame of that batch, `None` if none completed.
    pub last_frame: Option<usize>,
    /// The last record of that batch and the chain value after it (the
    /// starting head if none completed).
    pub head: Head,
    /// Bytes up to the end of the last intact, chained frame: past
    /// `committed` when a batch is still being written.
    pub intact: usize,
    /// The LSN the next frame must have: one past the last intact frame.
    pub next_lsn: Lsn,
}

/// Walks the frames of a segment's bytes `buf`, which follow the record
/// `head`, as far as each checks out, has the next LSN and follows the
/// chain by `form`; `each` is told every such frame's LSN and offset.
/// Only whole batches count as committed: the frames of a batch still
/// being written (or torn) are intact but not committed. This is the walk
/// both a log reader's tail refresh and a replica's segment walk make.
pub fn walk_chained(
    buf: &[u8],
    head: Head,
    form: ChainForm,
    mut each: impl FnMut(Lsn, usize),
) -> ChainedWalk {
    let mut w = ChainedWalk {
        committed: 0,
        last_frame: None,
        head,
        intact: 0,
        next_lsn: head.last_lsn.next(),
    };
    let mut chain = head.chain;
    while let Ok(f) = frame::decode(&buf[w.intact..]) {
        if f.lsn != w.next_lsn || !f.chain_follows(chain, form) {
            break;
        }
        each(f.lsn, w.intact);
        let at = w.intact;
        w.intact += f.len();
        w.next_lsn = w.next_lsn.next();
        chain = f.chain;
        if !f.batch_continues() {
            w.committed = w.intact;
            w.last_frame = Some(at);
            w.head = Head {
                last_lsn: f.lsn,
                chain,
            };
        }
    }
    w
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

    /// A batch still being written counts as intact, not committed, and
    /// the walk ends at a frame with the wrong LSN.
    #[test]
    fn walk_chained_commits_whole_batches_only() {
        let mut buf = Vec::new();
        let mut chain = ChainHash::ZERO;
        let mut offs = Vec::new();
        let mut committed_chain = ChainHash::ZERO;
        // Record 1 alone, then 2 and 3 as one batch, then 4 opening a
        // batch not yet complete, then a frame out of sequence.
        for (i, flags) in [
            (1u64, 0),
            (2, frame::FLAG_BATCH_CONT),
            (3, 0),
            (4, frame::FLAG_BATCH_CONT),
            (9, 0),
        ] {
            offs.push(buf.len());
            chain =
                frame::encode(&mut buf, Lsn(i), RecordKind::Event, flags, b"body", chain).unwrap();
            if i == 3 {
                committed_chain = chain;
            }
        }
        let mut seen = Vec::new();
        let w = walk_chained(&buf, Head::default(), ChainForm::CURRENT, |l, at| {
            seen.push((l.0, at))
        });
        assert_eq!(
            seen,
            vec![(1, offs[0]), (2, offs[1]), (3, offs[2]), (4, offs[3])]
        );
        assert_eq!(w.committed, offs[3]);
        assert_eq!(w.last_frame, Some(offs[2]));
        assert_eq!(w.head.last_lsn, Lsn(3));
        assert_eq!(w.head.chain, committed_chain);
        assert_eq!(w.intact, offs[4]);
        assert_eq!(w.next_lsn, Lsn(5));
        // From a head the bytes do not follow, nothing is walked.
        let w = walk_chained(
            &buf,
            Head {
                last_lsn: Lsn(7),
                chain: ChainHash::ZERO,
            },
            ChainForm::CURRENT,
            |_, _| {},
        );
        assert_eq!((w.committed, w.intact, w.last_frame), (0, 0, None));
        assert_eq!(w.head.last_lsn, Lsn(7));
    }
}
