//! Typed identifiers: log sequence numbers, blob hashes, chain values and
//! checkpoint ids. None of them is ever passed around as a bare integer or
//! byte array.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

use crate::CodecError;

/// A log sequence number: dense, starting at 1, one per record.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The first LSN of every store.
    pub const FIRST: Lsn = Lsn(1);
    /// The LSN after this one.
    pub fn next(self) -> Lsn {
        Lsn(self.0 + 1)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn to_hex(bytes: &[u8; 32]) -> String {
    crate::bytes::to_hex(bytes)
}

fn from_hex(what: &'static str, s: &str) -> Result<[u8; 32], CodecError> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return Err(CodecError::Invalid {
            what: format!("{what} `{s}` must be 64 hex digits, got {}", bytes.len()),
        });
    }
    let digit = |c: u8| -> Result<u8, CodecError> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(CodecError::Invalid {
                what: format!("{what} `{s}` has a non-hex character `{}`", c as char),
            }),
        }
    };
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Ok(out)
}

macro_rules! hash_newtype {
    ($name:ident, $what:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// All zeroes.
            pub const ZERO: $name = $name([0; 32]);
            /// Lower-case hex, 64 digits.
            pub fn to_hex(&self) -> String {
                to_hex(&self.0)
            }
            /// Parses 64 hex digits; the error names what was wrong.
            pub fn from_hex(s: &str) -> Result<Self, CodecError> {
                from_hex($what, s).map($name)
            }
            /// The raw bytes.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), &self.to_hex()[..16])
            }
        }

        impl FromStr for $name {
            type Err = CodecError;
            fn from_str(s: &str) -> Result<Self, CodecError> {
                Self::from_hex(s)
            }
        }

        /// Hex in human-readable formats (JSON), 32 raw bytes otherwise (MessagePack).
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.serialize_str(&self.to_hex())
                } else {
                    s.serialize_bytes(&self.0)
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        write!(f, "a {} (64 hex digits or 32 bytes)", $what)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        $name::from_hex(v).map_err(E::custom)
                    }
                    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<$name, E> {
                        let arr: [u8; 32] = v
                            .try_into()
                            .map_err(|_| E::invalid_length(v.len(), &self))?;
                        Ok($name(arr))
                    }
                    fn visit_seq<A: serde::de::SeqAccess<'de>>(
                        self,
                        mut seq: A,
                    ) -> Result<$name, A::Error> {
                        let mut out = [0u8; 32];
                        for (i, slot) in out.iter_mut().enumerate() {
                            *slot = seq
                                .next_element()?
                                .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
                        }
                        if seq.next_element::<u8>()?.is_some() {
                            return Err(serde::de::Error::invalid_length(33, &self));
                        }
                        Ok($name(out))
                    }
                }
                if d.is_human_readable() {
                    d.deserialize_str(V)
                } else {
                    d.deserialize_bytes(V)
                }
            }
        }
    };
}

hash_newtype!(
    BlobHash,
    "blob hash",
    "The blake3 hash of a blob's uncompressed contents: its identity in the blob store."
);
hash_newtype!(
    ChainHash,
    "chain hash",
    "A value of the tamper-evident hash chain: blake3 over the previous value and one record."
);

impl BlobHash {
    /// The blake3 hash of `bytes`.
    pub fn of(bytes: &[u8]) -> BlobHash {
        BlobHash(*blake3::hash(bytes).as_bytes())
    }
}

/// A checkpoint's id: the LSN of its `checkpoint.create` record, written `c<lsn>`
/// (for example `c42`), short and easy to type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointId(pub Lsn);

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0 .0)
    }
}

impl FromStr for CheckpointId {
    type Err = CodecError;
    fn from_str(s: &str) -> Result<Self, CodecError> {
        let digits = s.strip_prefix('c').unwrap_or("");
        match digits.parse::<u64>() {
            Ok(n) if n > 0 && !digits.starts_with('+') => Ok(CheckpointId(Lsn(n))),
            // All digits, but past any LSN a log can reach.
            Err(e)
                if *e.kind() == std::num::IntErrorKind::PosOverflow
                    && digits.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Err(CodecError::Invalid {
                    what: format!(
                        "`{s}` is too large to be a checkpoint id (ids are LSNs, at most c{})",
                        u64::MAX
                    ),
                })
            }
            _ => Err(CodecError::Invalid {
                what: format!("`{s}` is not a checkpoint id (ids look like `c42`)"),
            }),
        }
    }
}

impl Serialize for CheckpointId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            s.serialize_u64(self.0 .0)
        }
    }
}

impl<'de> Deserialize<'de> for CheckpointId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            s.parse().map_err(serde::de::Error::custom)
        } else {
            Ok(CheckpointId(Lsn(u64::deserialize(d)?)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let h = BlobHash::of(b"hello");
        assert_eq!(BlobHash::from_hex(&h.to_hex()).unwrap(), h);
        assert_eq!(BlobHash::from_hex(&h.to_hex().to_uppercase()).unwrap(), h);
        let e = BlobHash::from_hex("abc").unwrap_err().to_string();
        assert!(e.contains("64 hex digits"), "{e}");
        let bad = "g".repeat(64);
        assert!(BlobHash::from_hex(&bad)
            .unwrap_err()
            .to_string()
            .contains("non-hex"));
    }

    #[test]
    fn checkpoint_ids() {
        assert_eq!(
            "c42".parse::<CheckpointId>().unwrap(),
            CheckpointId(Lsn(42))
        );
        assert_eq!(CheckpointId(Lsn(7)).to_string(), "c7");
        for bad in ["", "c", "42", "c0", "c-1", "c+3", "cx", "c1.5"] {
            assert!(bad.parse::<CheckpointId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn serde_forms() {
        let h = BlobHash::of(b"x");
        let j = serde_json::to_string(&h).unwrap();
        assert_eq!(j, format!("\"{}\"", h.to_hex()));
        assert_eq!(serde_json::from_str::<BlobHash>(&j).unwrap(), h);
        let m = rmp_serde::to_vec(&h).unwrap();
        assert_eq!(m.len(), 34, "bin8 header + 32 bytes");
        assert_eq!(rmp_serde::from_slice::<BlobHash>(&m).unwrap(), h);
        let c = CheckpointId(Lsn(9));
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"c9\"");
        assert_eq!(
            rmp_serde::from_slice::<CheckpointId>(&rmp_serde::to_vec(&c).unwrap()).unwrap(),
            c
        );
    }

    proptest! {
        #[test]
        fn any_hex_string_never_panics(s in ".{0,80}") {
            let _ = BlobHash::from_hex(&s);
            let _ = s.parse::<CheckpointId>();
        }
    }
}
