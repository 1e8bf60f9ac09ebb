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
//! Body version 2 may also list the query index
//! file of a sealed log segment, `index/segments/<first LSN>.qix`:
//! written once the segment is sealed and never changed after, so it is
//! shipped like a segment and a query in place reads it instead of the
//! segment. Version 1 (older cairns) lists `log/` and `blobs/` files
//! only; both are read.
//!
//! Body version 3 (this cairn writes it) may also carry `tail_state`: the
//! bytes of a `log/tail.state` file (the format a clean close writes,
//! [`cairn_engine::log::TailState`]) describing the log's unsealed last
//! segment as shipped: its length, last frame (offset, LSN, chain) and a
//! sparse index of its frames, one entry about every
//! [`TAIL_STATE_INDEX_INTERVAL_BYTES`]. A reader in place is shown it as
//! the log's `tail.state`, so it takes the tail's end from it instead of
//! reading the tail whole, exactly when it describes the tail the
//! manifest names (else the tail is read whole, as for versions 1 and 2).
//!
//! Body version 4 (this cairn writes it) may also carry `tail_index`: a
//! file entry, `index/segments/<first LSN of the tail>.qix`, whose pieces
//! are a query index file (the format of a sealed segment's) of a prefix
//! of the unsealed tail, built by the replicator in memory. It is not a
//! store file (restore does not write it; the store builds its own) and
//! changes as the tail grows: each one is a new content-named object, the
//! manifest names the newest. A reader in place is shown it as the tail's
//! index file, and trusts it, as a local query trusts the store's own,
//! only when its first LSN is the tail's, its last LSN is inside the
//! shipped tail and its chain value is the record's at that LSN; it then
//! indexes in memory only the records after it (fewer than
//! [`crate::replicate::TAIL_INDEX_EVERY_RECORDS`] past it, plus a
//! round's worth, by default).
//!
//! Body version 5 (this cairn writes it) lists the tail's query index in
//! parts, as entries of `files` (`tail_index` is no longer written; a
//! version 4 manifest's is still read): `index/segments/<N>.qix` where N
//! is the first LSN of the unsealed tail (the first part, covering the
//! tail's records from N) or an LSN inside it (a later part, covering the
//! records from N, the LSN after the part before it ends). Each part
//! holds only the records new since the one before, so the archive keeps
//! about one index of the segment's records in all, where version 4 kept
//! a new index of the whole tail so far each time (the bytes growing with
//! the square of the tail). A reader in place chains them (see
//! `cairn_query::index::cold`), trusting each only as it trusted
//! `tail_index`: its first LSN the one the chain asks for, its last LSN
//! inside the shipped tail, its chain value the record's there; the
//! first that does not match ends the chain. They are not store files:
//! restore does not write them ([`Manifest::tail_index_parts`]).

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
/// Version 2 added the per-segment query index files (`index/segments/`),
/// version 3 the unsealed segment's state (`tail_state`), version 4 a
/// query index file of a prefix of the unsealed segment (`tail_index`),
/// version 5 that index in parts listed in `files`.
pub const MANIFEST_VERSION: u32 = 5;
/// The oldest body version read: version 1 manifests (no index files)
/// are still read, so an archive written by an older cairn stays usable.
pub const MIN_MANIFEST_VERSION: u32 = 1;
/// The folder, under the store, of the per-segment query index files a
/// version 2 manifest may list.
pub const SEG_INDEX_DIR: &str = "index/segments";
/// The first body version that may carry `tail_state`.
pub const TAIL_STATE_VERSION: u32 = 3;
/// The first body version that may carry `tail_index`.
pub const TAIL_INDEX_VERSION: u32 = 4;
/// The first body version that may list parts of the tail's query index
/// in `files` (index files named by an LSN inside the unsealed tail).
pub const TAIL_INDEX_PARTS_VERSION: u32 = 5;
/// Bytes of the tail between two entries of the sparse index a manifest's
/// `tail_state` carries: sixteen times the engine's own interval
/// ([`cairn_engine::log::SPARSE_INDEX_INTERVAL_BYTES`]), because the
/// manifest is written again each round (a 64 MiB tail costs 16 KiB of
/// entries here, 256 KiB at the engine's interval), while a point read in
/// place fetches whole ranges of 256 KiB anyway (`vfs::RANGE_CHUNK_BYTES`),
/// so the longer scan costs few more bytes fetched.
pub const TAIL_STATE_INDEX_INTERVAL_BYTES: u64 = 64 * 1024;

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
    /// From version 3: the bytes, as lowercase hex, of a `log/tail.state`
    /// file describing the last segment when it is unsealed (see the
    /// module's documentation); absent in older versions and when every
    /// segment is sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_state: Option<String>,
    /// From version 4: a query index file of a prefix of the unsealed
    /// last segment, `index/segments/<its first LSN>.qix` (see the
    /// module's documentation); absent in older versions, when every
    /// segment is sealed, and before the tail has records enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_index: Option<FileEntry>,
}

impl Manifest {
    /// The bytes of every store file's pieces, added up: the store's
    /// size at the head (the parts of the tail's query index, which are
    /// no store files, not counted).
    pub fn bytes(&self) -> u64 {
        self.store_files().map(|f| f.len).sum()
    }

    /// The entries of `files` that are store files: all but the parts of
    /// the tail's query index (what restore writes).
    pub fn store_files(&self) -> impl Iterator<Item = &FileEntry> {
        let first = self.tail_first_lsn();
        self.files.iter().filter(move |f| !is_part(first, &f.path))
    }

    /// The bytes of `tail_state`, when there is one (hex checked by
    /// [`Manifest::decode`]; `None` as well for hex that is not).
    pub fn tail_state_bytes(&self) -> Option<Vec<u8>> {
        from_hex(self.tail_state.as_deref()?)
    }

    /// The first LSN of the unsealed last segment: the last `log/*.seg`
    /// of `files`, when the manifest carries a `tail_state` (a manifest
    /// whose segments are all sealed has none).
    pub fn tail_first_lsn(&self) -> Option<u64> {
        self.tail_state.as_ref()?;
        self.files
            .iter()
            .filter_map(|f| {
                f.path
                    .strip_prefix("log/")
                    .and_then(cairn_engine::log::parse_segment_name)
            })
            .max()
            .map(|l| l.0)
    }

    /// True if `path` is a part of the tail's query index (version 5): an
    /// index file named by the unsealed tail's first LSN or an LSN after
    /// it. Not a store file: restore does not write it.
    pub fn is_tail_index_part(&self, path: &str) -> bool {
        is_part(self.tail_first_lsn(), path)
    }

    /// The parts of the tail's query index `files` lists (version 5), in
    /// LSN order (see the module's documentation).
    pub fn tail_index_parts(&self) -> Vec<&FileEntry> {
        let first = self.tail_first_lsn();
        self.files
            .iter()
            .filter(|f| is_part(first, &f.path))
            .collect()
    }

    /// Sets `tail_state` to the hex of `bytes` (`None`: no state).
    pub fn set_tail_state(&mut self, bytes: Option<&[u8]>) {
        self.tail_state = bytes.map(cairn_codec::bytes::to_hex);
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
        if let Some(t) = &m.tail_state {
            check_tail_state(t, m.version).map_err(bad)?;
        }
        if let Some(t) = &m.tail_index {
            check_tail_index(t, m.version).map_err(bad)?;
        }
        if let Some(first) = m.tail_first_lsn() {
            for f in m.tail_index_parts() {
                check_tail_index_part(f, first, m.head_lsn, m.version).map_err(bad)?;
            }
        }
        for f in m.files.iter().chain(&m.tail_index) {
            check_relative(&f.path, m.version).map_err(bad)?;
            // Checked: the lengths come from outside, and a sum that
            // wrapped could match the entry's length.
            let sum = f.pieces.iter().try_fold(0u64, |a, p| a.checked_add(p.len));
            if sum != Some(f.len) {
                return Err(bad(format!(
                    "{}: pieces add up to {} bytes, the entry says {}",
                    f.path,
                    sum.map_or_else(|| "more than 2^64".to_string(), |s| s.to_string()),
                    f.len
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

/// The LSN a segment query index file's path (`index/segments/<20
/// digits>.qix`) names, if `path` is one.
fn seg_index_lsn(path: &str) -> Option<u64> {
    path.strip_prefix(SEG_INDEX_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(cairn_query::index::seg::parse_seg_index_name)
        .map(|l| l.0)
}

/// True if `path` is a part of the tail's query index of a manifest whose
/// unsealed tail starts at `first` ([`Manifest::tail_first_lsn`]).
fn is_part(first: Option<u64>, path: &str) -> bool {
    first.is_some_and(|first| seg_index_lsn(path).is_some_and(|n| n >= first))
}

/// An index file shipped in the archive (`what` names it in the error)
/// is no larger than a shipped segment index may be.
fn check_index_len(f: &FileEntry, what: &str) -> Result<(), String> {
    let max = super::replicator::MAX_SHIPPED_SEG_INDEX_BYTES;
    if f.len > max {
        return Err(format!(
            "{what}{} is {} bytes, over the limit of {max}",
            f.path, f.len
        ));
    }
    Ok(())
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

/// `tail_state` must be lowercase hex of at most the largest state the
/// engine reads, in a manifest of version 3 or later. What it says is not
/// checked here: the reader trusts it only if it describes the tail.
fn check_tail_state(hex: &str, version: u32) -> Result<(), String> {
    if version < TAIL_STATE_VERSION {
        return Err(format!(
            "tail_state in a version {version} manifest (it came with version {TAIL_STATE_VERSION})"
        ));
    }
    let max = 2 * cairn_engine::log::TailState::MAX_ENCODED_BYTES;
    if hex.len() > max {
        return Err(format!(
            "tail_state is {} hex digits, over the limit of {max}",
            hex.len()
        ));
    }
    if from_hex(hex).is_none() {
        return Err("tail_state is not lowercase hex of whole bytes".into());
    }
    Ok(())
}

/// `tail_index` must be a segment query index file's entry, in a manifest
/// of version 4 or later, and no larger than a shipped segment index may
/// be. Whether it describes the tail is not checked here: the reader
/// trusts it only if it does.
fn check_tail_index(f: &FileEntry, version: u32) -> Result<(), String> {
    if version < TAIL_INDEX_VERSION {
        return Err(format!(
            "tail_index in a version {version} manifest (it came with version {TAIL_INDEX_VERSION})"
        ));
    }
    if seg_index_lsn(&f.path).is_none() {
        return Err(format!(
            "tail_index path {:?} is not a segment index file (index/segments/<20 digits>.qix)",
            f.path
        ));
    }
    check_index_len(f, "tail_index ")
}

/// A part of the tail's index listed in `files`: only from version 5
/// (before, only a sealed segment's file, named by its first LSN, was
/// listed), named by an LSN from the tail's `first` to the manifest's
/// `head`, and no larger than a shipped segment index may be.
fn check_tail_index_part(f: &FileEntry, first: u64, head: u64, version: u32) -> Result<(), String> {
    let n = seg_index_lsn(&f.path).unwrap_or(0);
    if version < TAIL_INDEX_PARTS_VERSION && n > first {
        return Err(format!(
            "{} is a part of the tail's index (named by an LSN inside the tail, which starts at {first}) in a version {version} manifest (they came with version {TAIL_INDEX_PARTS_VERSION})",
            f.path
        ));
    }
    if n > head {
        return Err(format!(
            "{} names LSN {n}, past the manifest's head {head}",
            f.path
        ));
    }
    check_index_len(f, "")
}

/// Lowercase hex to bytes; `None` for an odd length or another character.
fn from_hex(s: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
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
            tail_state: None,
            tail_index: None,
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

    /// An archive written by an older cairn (versions 1 and 2) is still
    /// read; a version from the future is refused and named.
    #[test]
    fn older_versions_are_read_and_a_newer_one_refused() {
        let mut m = sample();
        for v in [1, 2, 3, 4] {
            m.version = v;
            assert_eq!(Manifest::decode("m", &m.encode()).unwrap(), m);
        }
        m.version = MANIFEST_VERSION + 1;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("manifest version 6"), "{e}");
    }

    /// The tail's state rides in version 3 as hex of whole bytes, round
    /// trips, and is absent from the JSON when there is none (so a
    /// manifest without it reads as an older cairn wrote it); in an older
    /// version, as other characters, or too long, it is refused and named.
    #[test]
    fn the_tail_state_is_hex_from_version_3_only() {
        let mut m = sample();
        let body = String::from_utf8(m.encode()[MANIFEST_HEADER_LEN..].to_vec()).unwrap();
        assert!(!body.contains("tail_state"), "{body}");
        let bytes: Vec<u8> = (0..=255u8).collect();
        m.tail_state = Some(cairn_codec::bytes::to_hex(&bytes));
        let back = Manifest::decode("m", &m.encode()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.tail_state_bytes().unwrap(), bytes);
        m.version = 2;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("tail_state in a version 2"), "{e}");
        m.version = MANIFEST_VERSION;
        for bad in ["abc", "0G", "AB", "0a 1"] {
            m.tail_state = Some(bad.into());
            let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
            assert!(e.contains("not lowercase hex"), "{bad}: {e}");
        }
        m.tail_state = Some("00".repeat(cairn_engine::log::TailState::MAX_ENCODED_BYTES + 1));
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("over the limit"), "{e}");
    }

    /// The tail's index rides in version 4 as a segment index file's
    /// entry, round trips, and is absent from the JSON when there is none;
    /// in version 3, at another path, with pieces that do not add up, or
    /// over the size limit, it is refused and named.
    #[test]
    fn the_tail_index_is_a_segment_index_entry_from_version_4_only() {
        let mut m = sample();
        let body = String::from_utf8(m.encode()[MANIFEST_HEADER_LEN..].to_vec()).unwrap();
        assert!(!body.contains("tail_index"), "{body}");
        let entry = FileEntry {
            path: "index/segments/00000000000000000009.qix".into(),
            len: 6,
            pieces: vec![Piece {
                hash: "2".repeat(64),
                len: 6,
            }],
        };
        m.tail_index = Some(entry.clone());
        assert_eq!(Manifest::decode("m", &m.encode()).unwrap(), m);
        m.version = 3;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("tail_index in a version 3"), "{e}");
        m.version = MANIFEST_VERSION;
        for path in [
            "log/00000000000000000009.seg",
            "index/segments/9.qix",
            "../x",
        ] {
            let mut t = entry.clone();
            t.path = path.into();
            m.tail_index = Some(t);
            let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
            assert!(e.contains("not a segment index file"), "{path}: {e}");
        }
        let mut t = entry.clone();
        t.len = 7;
        m.tail_index = Some(t);
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("add up"), "{e}");
        let big = super::super::replicator::MAX_SHIPPED_SEG_INDEX_BYTES + 1;
        let mut t = entry;
        t.len = big;
        t.pieces[0].len = big;
        m.tail_index = Some(t);
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("over the limit"), "{e}");
    }

    /// Version 5 lists the tail's index in parts among `files`: index
    /// files named by the unsealed tail's first LSN or an LSN inside it
    /// (up to the head). They are told from the sealed segments' files
    /// (`tail_index_parts`, which restore skips), round trip, and are
    /// refused and named in an older version, past the head, or over the
    /// size limit; with every segment sealed (no `tail_state`) there is
    /// no tail and none is a part.
    #[test]
    fn tail_index_parts_are_index_files_inside_the_tail_from_version_5_only() {
        let entry = |path: &str, len: u64| FileEntry {
            path: path.into(),
            len,
            pieces: vec![Piece {
                hash: "3".repeat(64),
                len,
            }],
        };
        let mut m = sample();
        m.head_lsn = 500;
        m.files = vec![
            entry("index/segments/00000000000000000001.qix", 5),
            entry("index/segments/00000000000000000101.qix", 5),
            entry("index/segments/00000000000000000301.qix", 5),
            entry("log/00000000000000000001.seg", 10),
            entry("log/00000000000000000101.seg", 10),
        ];
        m.set_tail_state(Some(&[1, 2, 3]));
        let back = Manifest::decode("m", &m.encode()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.tail_first_lsn(), Some(101));
        let parts: Vec<&str> = back
            .tail_index_parts()
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(
            parts,
            [
                "index/segments/00000000000000000101.qix",
                "index/segments/00000000000000000301.qix"
            ]
        );
        assert!(!back.is_tail_index_part("index/segments/00000000000000000001.qix"));
        // The store's bytes: its files, not the parts.
        assert_eq!(back.bytes(), 5 + 10 + 10);
        assert!(!back.is_tail_index_part("log/00000000000000000101.seg"));
        // A version 4 manifest lists no part past the tail's first LSN.
        m.version = 4;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(
            e.contains("00000000000000000301.qix") && e.contains("version 4"),
            "{e}"
        );
        m.version = MANIFEST_VERSION;
        // A part named past the head.
        m.files[2] = entry("index/segments/00000000000000000501.qix", 5);
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("past the manifest's head 500"), "{e}");
        // Over the size limit.
        let big = super::super::replicator::MAX_SHIPPED_SEG_INDEX_BYTES + 1;
        m.files[2] = entry("index/segments/00000000000000000301.qix", big);
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("over the limit"), "{e}");
        // No tail state: every segment sealed, no part.
        m.files[2] = entry("index/segments/00000000000000000301.qix", 5);
        m.tail_state = None;
        let back = Manifest::decode("m", &m.encode()).unwrap();
        assert_eq!(back.tail_first_lsn(), None);
        assert!(back.tail_index_parts().is_empty());
    }

    #[test]
    fn pieces_that_do_not_add_up_are_refused() {
        let mut m = sample();
        m.files[0].len = 11;
        let e = Manifest::decode("m", &m.encode()).unwrap_err().to_string();
        assert!(e.contains("add up"), "{e}");
    }
}
