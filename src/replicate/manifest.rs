//! The archive's manifest: which objects make up the store at one head.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "CAIRNMF1" (version 1 in the last byte)
//!      8     4  body length n (u32 LE), at most MAX_MANIFEST_BODY_BYTES
//!     12     4  CRC (seeded, as every cairn checksum) over bytes 0..12 and the body
//!     16     n  body: JSON (see `Manifest`)
//! ```
//!
//! A manifest is written after every object it names, and never
//! rewritten: a reader that sees it can fetch all of it.
//!
//! Body version 2 (this cairn writes it) may also list the query index
//! file of a sealed log segment, `index/segments/<first LSN>.qix`:
//! written once the segment is sealed and never changed after, so it is
//! shipped like a segment and a query in place reads it instead of the
//! segment. Version 1 (older cairns) lists `log/` and `blobs/` files
//! only; both are read.

use serde::{Deserialize, Serialize};

use super::ReplicateError;

/// The manifest's magic (version 1 in the last byte).
pub const MANIFEST_MAGIC: [u8; 8] = *b"CAIRNMF1";
/// Bytes before the body.
pub const MANIFEST_HEADER_LEN: usize = 16;
/// The largest body read back: a store of a million files' pieces is a few
/// hundred MiB of log and packs, a few thousand pieces, well under this;
/// the length is checked before anything is allocated.
pub const MAX_MANIFEST_BODY_BYTES: u32 = 64 << 20;
/// The JSON body's own version field: the version this cairn writes.
/// Version 2 added the per-segment query index files (`index/segments/`).
pub const MANIFEST_VERSION: u32 = 2;
/// The oldest body version read: version 1 manifests (no index files)
/// are still read, so an archive written by an older cairn stays usable.
pub const MIN_MANIFEST_VERSION: u32 = 1;
/// The folder, under the store, of the per-segment query index files a
/// version 2 manifest may list.
pub const SEG_INDEX_DIR: &str = "index/segments";

/// One piece of a file: an object holding the file's bytes from the end of
/// the piece before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// The blake3 of the piece's bytes, 64 hex digits; the object is
    /// `objects/<hash>`.
    pub hash: String,
    /// Its length in bytes.
    pub len: u64,
}

/// One store file in the archive: its path under `.cairn/` and its pieces,
/// which together are its first `len` bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The path under the store directory (`log/00000000000000000001.seg`).
    pub path: String,
    /// The bytes the pieces add up to.
    pub len: u64,
    /// The pieces, in file order.
    pub pieces: Vec<Piece>,
}

/// What the archive holds at one head: the generation it belongs to, the
/// log's head, and every file of the store as pieces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`].
    pub version: u32,
    /// The generation: a line of history. A new one starts when the store's
    /// log no longer continues the archive's (restored, repaired, replaced).
    pub generation: String,
    /// The LSN of the last record shipped.
    pub head_lsn: u64,
    /// The chain value after it, 64 hex digits.
    pub head_chain: String,
    /// When the manifest was written, milliseconds since the epoch.
    pub created_ms: i64,
    /// The store directory that was replicated.
    pub store: String,
    /// Its workspace, when it knows one.
    pub workspace: Option<String>,
    /// Sessions in the store at the head, when they were counted.
    pub sessions: Option<u64>,
    /// The store's files, sorted by path.
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// The bytes of every file's pieces, added up.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }

    /// Encodes the manifest with its header and checksum.
    pub fn encode(&self) -> Vec<u8> {
        // A manifest is plain data: serialising it cannot fail.
        let body = serde_json::to_vec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(MANIFEST_HEADER_LEN + body.len());
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let crc = crc_of(&out[0..12], &body);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a manifest read from `name`, checking the magic, the length
    /// (before allocating), the checksum and the fields.
    pub fn decode(name: &str, b: &[u8]) -> Result<Manifest, ReplicateError> {
        let bad = |detail: String| ReplicateError::Damaged {
            object: name.to_string(),
            detail,
        };
        if b.len() < MANIFEST_HEADER_LEN {
            return Err(bad(format!(
                "{} bytes, shorter than the {MANIFEST_HEADER_LEN}-byte header",
                b.len()
            )));
        }
        if b[0..8] != MANIFEST_MAGIC {
            return Err(bad("no manifest magic (CAIRNMF1)".into()));
        }
        let n = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if n > MAX_MANIFEST_BODY_BYTES {
            return Err(bad(format!(
                "body length {n} is over the limit of {MAX_MANIFEST_BODY_BYTES}"
            )));
        }
        let body = &b[MANIFEST_HEADER_LEN..];
        if body.len() != n as usize {
            return Err(bad(format!(
                "body is {} bytes, the header says {n}",
                body.len()
            )));
        }
        let stored = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        let computed = crc_of(&b[0..12], body);
        if stored != computed {
            return Err(bad(format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        let m: Manifest = serde_json::from_slice(body)
            .map_err(|e| bad(format!("body is not a manifest: {e}")))?;
        if !(MIN_MANIFEST_VERSION..=MANIFEST_VERSION).contains(&m.version) {
            return Err(bad(format!(
                "manifest version {} (this cairn reads {MIN_MANIFEST_VERSION} to {MANIFEST_VERSION})",
                m.version
            )));
        }
        for f in &m.files {
            check_relative(&f.path, m.version).map_err(bad)?;
            let sum: u64 = f.pieces.iter().map(|p| p.len).sum();
            if sum != f.len {
                return Err(bad(format!(
                    "{}: pieces add up to {sum} bytes, the entry says {}",
                    f.path, f.len
                )));
            }
            for p in &f.pieces {
                if !is_hash(&p.hash) {
                    return Err(bad(format!(
                        "{}: piece name {:?} is not a hash",
                        f.path, p.hash
                    )));
                }
            }
        }
        Ok(m)
    }
}

/// A file path in a manifest must stay inside the store: `log/` or
/// `blobs/`, one plain file name, no `..`; from version 2 also a segment
/// query index file `index/segments/<20 digits>.qix`: a manifest is
/// input from outside, and restore writes where it says.
fn check_relative(path: &str, version: u32) -> Result<(), String> {
    if let Some(name) = path
        .strip_prefix(SEG_INDEX_DIR)
        .and_then(|r| r.strip_prefix('/'))
    {
        if version >= 2 && cairn_query::index::seg::parse_seg_index_name(name).is_some() {
            return Ok(());
        }
        return Err(format!(
            "file path {path:?} is not a segment index file (index/segments/<20 digits>.qix) of a version 2 manifest"
        ));
    }
    let mut parts = path.split('/');
    let (Some(dir), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("file path {path:?} is not DIR/NAME"));
    };
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-' || c == b'_');
    if !(dir == "log" || dir == "blobs") || !plain {
        return Err(format!(
            "file path {path:?} is outside log/ and blobs/ or not a plain name"
        ));
    }
    Ok(())
}

/// 64 lowercase hex digits.
pub(crate) fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The seeded CRC every cairn element uses, over two slices.
fn crc_of(a: &[u8], b: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(cairn_codec::frame::CRC_SEED);
    h.update(a);
    h.update(b);
    h.finalize()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            version: MANIFEST_VERSION,
            generation: "0000019abc-1234".into(),
            head_lsn: 7,
            head_chain: "ab".repeat(32),
            created_ms: 1,
            store: "/w/.cairn".into(),
            workspace: Some("/w".into()),
            sessions: Some(2),
            files: vec![FileEntry {
                path: "log/00000000000000000001.seg".into(),
                len: 10,
                pieces: vec![
                    Piece {
                        hash: "0".repeat(64),
                        len: 4,
                    },
                    Piece {
                        hash: "1".repeat(64),
                        len: 6,
                    },
                ],
            }],
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(Manifest::decode("m", &m.encode()).unwrap(), m);
    }

    #[test]
    fn any_flipped_or_cut_byte_is_refused_and_named() {
        let b = sample().encode();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x20;
            let e = Manifest::decode("manifests/g/x", &c)
                .unwrap_err()
                .to_string();
            assert!(e.contains("manifests/g/x"), "{e}");
        }
        for n in 0..b.len() {
            assert!(Manifest::decode("m", &b[..n]).is_err());
        }
    }

    #[test]
    fn a_path_leaving_the_store_is_refused() {
        for path in [
            "../x",
            "log/../../x",
            "snapshot/x",
            "log/a/b",
            "/etc/passwd",
            "log/..",
        ] {
            let mut m = sample();
            m.files[0].path = path.into();
            let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
            assert!(
                e.contains("outside") || e.contains("DIR/NAME"),
                "{path}: {e}"
            );
        }
    }

    /// Version 2 lists the segment query index files; nothing else under
    /// `index/` (the whole-log index is rewritten on every save), and no
    /// version 1 manifest names one.
    #[test]
    fn segment_index_files_are_listed_from_version_2_only() {
        let qix = "index/segments/00000000000000000001.qix";
        let mut m = sample();
        m.files[0].path = qix.into();
        assert_eq!(
            Manifest::decode("m", &m.encode()).unwrap().files[0].path,
            qix
        );
        m.version = 1;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
        for path in [
            "index/query.idx",
            "index/segments/1.qix",
            "index/segments/../../x",
            "index/segments/00000000000000000001.qix/x",
            "index/segments/",
            "index/00000000000000000001.qix",
        ] {
            let mut m = sample();
            m.files[0].path = path.into();
            assert!(Manifest::decode("m", &m.encode()).is_err(), "{path}");
        }
    }

    /// An archive written by an older cairn (version 1) is still read;
    /// a version from the future is refused and named.
    #[test]
    fn version_1_is_read_and_a_newer_one_refused() {
        let mut m = sample();
        m.version = 1;
        assert_eq!(Manifest::decode("m", &m.encode()).unwrap(), m);
        m.version = MANIFEST_VERSION + 1;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("manifest version 3"), "{e}");
    }

    #[test]
    fn pieces_that_do_not_add_up_are_refused() {
        let mut m = sample();
        m.files[0].len = 11;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("add up"), "{e}");
    }
}
