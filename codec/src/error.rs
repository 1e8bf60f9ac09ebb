//! The codec's error type.

use std::fmt;

/// Everything that can go wrong while encoding or decoding cairn data.
#[derive(Debug)]
#[non_exhaustive]
pub enum CodecError {
    /// Fewer bytes than a complete element needs: `need` bytes, `have` bytes.
    /// At the end of the last log segment this is a torn tail.
    Truncated {
        /// Bytes the element needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A length field larger than the named maximum; refused before allocation.
    TooLarge {
        /// What the length was for.
        what: &'static str,
        /// The length claimed.
        len: u64,
        /// The maximum allowed.
        max: u64,
    },
    /// A checksum did not match: the bytes are damaged.
    BadChecksum {
        /// What was being checked.
        what: &'static str,
        /// The checksum stored.
        stored: u32,
        /// The checksum computed.
        computed: u32,
    },
    /// A magic number or version that cairn does not know.
    BadMagic {
        /// What was being decoded.
        what: &'static str,
    },
    /// A field holds a value the format does not allow.
    Invalid {
        /// What was wrong.
        what: String,
    },
    /// The MessagePack body could not be encoded or decoded.
    Body(String),
    /// A JSON input line was not a valid event.
    Json(String),
    /// An event has a field the log does not take (an empty session, a
    /// time out of range, a path that is no file): [`Event::check`](crate::Event::check).
    BadField(String),
    /// A zstd frame needs a dictionary that is missing or damaged: the
    /// data is intact but cannot be read until the dictionary file
    /// ([`zdict::file_name`](crate::zdict::file_name)) is restored.
    MissingDictionary {
        /// The dictionary's id.
        id: u32,
    },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Truncated { need, have } => {
                write!(f, "truncated: need {need} bytes, have {have}")
            }
            CodecError::TooLarge { what, len, max } => {
                write!(f, "{what} of {len} bytes exceeds the maximum of {max}")
            }
            CodecError::BadChecksum {
                what,
                stored,
                computed,
            } => write!(
                f,
                "{what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            CodecError::BadMagic { what } => write!(f, "not a cairn {what} (bad magic or version)"),
            CodecError::Invalid { what } => f.write_str(what),
            CodecError::Body(e) => write!(f, "record body: {e}"),
            CodecError::Json(e) | CodecError::BadField(e) => write!(f, "{e}"),
            CodecError::MissingDictionary { id } => write!(
                f,
                "needs zstd dictionary {}, which is missing or damaged",
                crate::zdict::file_name(*id)
            ),
        }
    }
}

impl std::error::Error for CodecError {}
