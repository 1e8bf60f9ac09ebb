//! Segment header and sealed-segment footer.
//!
//! A segment file is `header (64 bytes) | frames... | footer (64 bytes, sealed only)`.
//!
//! ```text
//! header                              footer
//!  0  8  magic "CAIRNLOG"              0  8  magic "CAIRNEND"
//!  8  4  format version (1 or 2)       8  8  record count
//! 12  4  reserved (0)                 16  8  last LSN (first LSN - 1 when empty)
//! 16  8  first LSN                    24 32  chain value after the last record
//! 24 32  chain value before it        56  4  frames' byte length (offset of the footer - 64)
//! 56  4  reserved (0)                 60  4  CRC32 (seeded) of bytes 0..60
//! 60  4  CRC32 (seeded) of bytes 0..60
//! ```
//!
//! A segment with a valid footer is sealed and immutable. A footer's magic
//! differs from every frame header's first bytes only by its CRC, so the
//! footer is recognised by its position (the last 64 bytes) and its CRC.

use crate::bytes::{crc32_seeded as crc, u64_le as u64_at};
use crate::frame::ChainForm;
use crate::{ChainHash, CodecError, Lsn};

/// Size of the segment header.
pub const SEGMENT_HEADER_LEN: usize = 64;
/// Size of the sealed-segment footer.
pub const SEGMENT_FOOTER_LEN: usize = 64;
/// The segment format version new segments are written with: the version
/// of [`ChainForm::CURRENT`]. Versions 1 and 2 differ only in how records
/// chain ([`ChainForm`]); both are read, and a version-1 tail is appended
/// to in its own form.
pub const SEGMENT_VERSION: u32 = 2;
const HEADER_MAGIC: &[u8; 8] = b"CAIRNLOG";
const FOOTER_MAGIC: &[u8; 8] = b"CAIRNEND";

fn check_crc(what: &'static str, b: &[u8]) -> Result<(), CodecError> {
    let stored = u32::from_le_bytes([b[60], b[61], b[62], b[63]]);
    let computed = crc(&b[..60]);
    if stored != computed {
        return Err(CodecError::BadChecksum {
            what,
            stored,
            computed,
        });
    }
    Ok(())
}

fn chain_at(b: &[u8], at: usize) -> ChainHash {
    let mut x = [0u8; 32];
    x.copy_from_slice(&b[at..at + 32]);
    ChainHash(x)
}

/// The header at the start of every segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// LSN of the segment's first record.
    pub first_lsn: Lsn,
    /// Chain value before the first record (the previous segment's last).
    pub prev_chain: ChainHash,
    /// How its records chain: its format version.
    pub chain_form: ChainForm,
}

impl SegmentHeader {
    /// Encodes the 64-byte header.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(HEADER_MAGIC);
        b[8..12].copy_from_slice(&self.chain_form.version().to_le_bytes());
        b[16..24].copy_from_slice(&self.first_lsn.0.to_le_bytes());
        b[24..56].copy_from_slice(&self.prev_chain.0);
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes and checks a header from the start of `buf`.
    pub fn decode(buf: &[u8]) -> Result<SegmentHeader, CodecError> {
        if buf.len() < SEGMENT_HEADER_LEN {
            return Err(CodecError::Truncated {
                need: SEGMENT_HEADER_LEN,
                have: buf.len(),
            });
        }
        let b = &buf[..SEGMENT_HEADER_LEN];
        check_crc("segment header", b)?;
        if &b[0..8] != HEADER_MAGIC {
            return Err(CodecError::BadMagic {
                what: "log segment",
            });
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let Some(chain_form) = ChainForm::of_version(version) else {
            return Err(CodecError::Invalid {
                what: format!(
                    "segment format version {version} is not one this cairn reads (1 or {SEGMENT_VERSION}); it may be from a newer cairn"
                ),
            });
        };
        // Reserved bytes must be zero: a header from a future format that
        // uses them is refused, not misread.
        if b[12..16].iter().chain(&b[56..60]).any(|&x| x != 0) {
            return Err(CodecError::Invalid {
                what: "segment header has non-zero reserved bytes".into(),
            });
        }
        Ok(SegmentHeader {
            first_lsn: Lsn(u64_at(b, 16)),
            prev_chain: chain_at(b, 24),
            chain_form,
        })
    }
}

/// The footer that seals a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentFooter {
    /// Number of records in the segment.
    pub record_count: u64,
    /// LSN of the last record.
    pub last_lsn: Lsn,
    /// Chain value after the last record.
    pub last_chain: ChainHash,
    /// Byte length of the frames (between header and footer).
    pub frames_len: u32,
}

impl SegmentFooter {
    /// Encodes the 64-byte footer.
    pub fn encode(&self) -> [u8; SEGMENT_FOOTER_LEN] {
        let mut b = [0u8; SEGMENT_FOOTER_LEN];
        b[0..8].copy_from_slice(FOOTER_MAGIC);
        b[8..16].copy_from_slice(&self.record_count.to_le_bytes());
        b[16..24].copy_from_slice(&self.last_lsn.0.to_le_bytes());
        b[24..56].copy_from_slice(&self.last_chain.0);
        b[56..60].copy_from_slice(&self.frames_len.to_le_bytes());
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes the footer from the last 64 bytes of a segment file, if it is
    /// one: `Ok(None)` means the segment is not sealed; `Err` means there is
    /// a footer magic but the footer is damaged.
    pub fn decode_tail(file: &[u8]) -> Result<Option<SegmentFooter>, CodecError> {
        if file.len() < SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN {
            return Ok(None);
        }
        Self::decode_end(&file[file.len() - SEGMENT_FOOTER_LEN..], file.len() as u64)
    }

    /// [`SegmentFooter::decode_tail`] of a file of `file_len` bytes whose
    /// last [`SEGMENT_FOOTER_LEN`] bytes are `last`: a reader checks a
    /// sealed segment's footer without mapping or reading the whole file.
    pub fn decode_end(last: &[u8], file_len: u64) -> Result<Option<SegmentFooter>, CodecError> {
        let ends = (SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN) as u64;
        if file_len < ends || last.len() != SEGMENT_FOOTER_LEN {
            return Ok(None);
        }
        let b = last;
        if &b[0..8] != FOOTER_MAGIC {
            return Ok(None);
        }
        check_crc("segment footer", b)?;
        let f = SegmentFooter {
            record_count: u64_at(b, 8),
            last_lsn: Lsn(u64_at(b, 16)),
            last_chain: chain_at(b, 24),
            frames_len: u32::from_le_bytes([b[56], b[57], b[58], b[59]]),
        };
        if u64::from(f.frames_len) != file_len - ends {
            return Err(CodecError::Invalid {
                what: format!(
                    "segment footer says {} bytes of frames, file has {}",
                    f.frames_len,
                    file_len - ends
                ),
            });
        }
        Ok(Some(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_round_trip_and_every_flip_detected() {
        let h = SegmentHeader {
            first_lsn: Lsn(1001),
            prev_chain: ChainHash([7; 32]),
            chain_form: ChainForm::CURRENT,
        };
        let b = h.encode();
        assert_eq!(SegmentHeader::decode(&b).unwrap(), h);
        assert_eq!(b[8..12], SEGMENT_VERSION.to_le_bytes());
        for i in 0..b.len() {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert!(SegmentHeader::decode(&bad).is_err(), "flip at {i}");
        }
        assert!(matches!(
            SegmentHeader::decode(&b[..10]),
            Err(CodecError::Truncated { .. })
        ));
    }

    #[test]
    fn each_version_carries_its_chain_form_and_an_unknown_one_is_named() {
        for (form, version) in [(ChainForm::Prefixed, 1u32), (ChainForm::Keyed, 2)] {
            let h = SegmentHeader {
                first_lsn: Lsn(1),
                prev_chain: ChainHash::ZERO,
                chain_form: form,
            };
            let b = h.encode();
            assert_eq!(b[8..12], version.to_le_bytes());
            assert_eq!(SegmentHeader::decode(&b).unwrap().chain_form, form);
        }
        // A header of a future version, with a valid CRC, is refused by
        // name rather than read as a known one.
        let mut b = SegmentHeader {
            first_lsn: Lsn(1),
            prev_chain: ChainHash::ZERO,
            chain_form: ChainForm::CURRENT,
        }
        .encode();
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        let e = SegmentHeader::decode(&b).unwrap_err().to_string();
        assert!(e.contains("segment format version 3"), "{e}");
    }

    /// A footer for three records and a file of 10 frame bytes ending in it.
    fn footer_and_file() -> (SegmentFooter, Vec<u8>) {
        let f = SegmentFooter {
            record_count: 3,
            last_lsn: Lsn(9),
            last_chain: ChainHash([1; 32]),
            frames_len: 10,
        };
        let mut file = vec![0u8; 64 + 10];
        file.extend_from_slice(&f.encode());
        (f, file)
    }

    #[test]
    fn footer_round_trip_and_every_flip_detected() {
        let (f, file) = footer_and_file();
        assert_eq!(SegmentFooter::decode_tail(&file).unwrap(), Some(f));
        for i in file.len() - 64..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x04;
            assert!(
                !matches!(SegmentFooter::decode_tail(&bad), Ok(Some(_))),
                "flip at {i}"
            );
        }
        // A footer whose length disagrees with the file is refused.
        let mut short = file.clone();
        short.remove(70);
        assert!(SegmentFooter::decode_tail(&short).is_err());
        assert_eq!(SegmentFooter::decode_tail(&file[..64]).unwrap(), None);
    }

    /// `decode_end` (a reader's footer check, from the footer and the
    /// file's size alone) agrees with `decode_tail` on the whole file.
    #[test]
    fn footer_from_its_bytes_and_the_file_size_agrees_with_the_whole_file() {
        let (f, file) = footer_and_file();
        let end = |file: &[u8]| {
            let last = &file[file.len().saturating_sub(64)..];
            SegmentFooter::decode_end(last, file.len() as u64).map_err(|e| e.to_string())
        };
        let whole = |file: &[u8]| SegmentFooter::decode_tail(file).map_err(|e| e.to_string());
        assert_eq!(end(&file), Ok(Some(f)));
        let mut longer = file.clone();
        longer.insert(70, 0);
        let mut flipped = file.clone();
        flipped[file.len() - 10] ^= 1;
        for case in [&file[..], &longer, &flipped, &file[..64], &file[..127]] {
            assert_eq!(end(case), whole(case));
        }
        assert!(end(&longer).is_err());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = SegmentHeader::decode(&bytes);
            let _ = SegmentFooter::decode_tail(&bytes);
        }
    }
}
