//! One immutable query-index file per sealed log segment: sorted keys
//! (session, run, kind, path, agent, model, ...) each with the sorted LSNs
//! of the segment's records that carry it. A new process maps the file
//! and reads only its header, the directory entries a binary search visits
//! and the posting blocks it needs: nothing is loaded whole.
//!
//! # Layout (`.cairn/index/segments/<first LSN, 20 digits>.qix`, all LE)
//!
//! ```text
//! header, SEG_HEADER_LEN (112) bytes:
//!   0  8  magic "CAIRNSQX"
//!   8  4  version (SEG_INDEX_VERSION)
//!  12  4  reserved (0)
//!  16  8  first LSN of the segment (its id and file name)
//!  24  8  last LSN covered          \ the segment's identity: a file whose
//!  32 32  chain value after it      / pair differs from the log is stale
//!  64  8  least record time (ms)
//!  72  8  greatest record time (ms)
//!  80  4  key count K
//!  84  4  reserved (0)
//!  88  8  postings count P
//!  96  8  key bytes S
//! 104  4  reserved (0)
//! 108  4  CRC32 (seeded) of bytes 0..108
//! directory, K entries of 24 bytes, sorted by (tag, key bytes):
//!   0  1  tag (KeyTag)
//!   1  3  reserved (0)
//!   4  4  key offset in the key bytes
//!   8  4  key length
//!  12  4  first posting (index into the postings)
//!  16  4  posting count (at least 1)
//!  20  4  CRC32 (seeded) of bytes 0..20 and the key's bytes
//! key bytes, S bytes
//! postings, P x u32: LSN - first LSN, ascending within each key
//! block CRCs, ceil(P / POSTINGS_BLOCK) x u32: CRC32 (seeded) of each
//!   block of POSTINGS_BLOCK postings (the last one may be shorter)
//! ```
//!
//! Every byte a query uses is checked before it is trusted: the header by
//! its CRC, each directory entry a search visits by its own CRC (which
//! covers its key), each block of postings read by its block CRC. The
//! sizes in the header must add up to the file's length.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use cairn_codec::bytes::{
    crc32_seeded as crc, crc32_seeded_parts as crc_parts, u32_le as u32_at, u64_le as u64_at,
};
use cairn_codec::{ChainHash, EventKind, EventRef, Lsn, Timestamp};
use cairn_engine::vfs::{Mapped, VfsFile};
use parking_lot::Mutex;

use crate::error::{QueryError, Result};

/// The magic at the start of a segment index file.
pub const SEG_INDEX_MAGIC: &[u8; 8] = b"CAIRNSQX";
/// The layout's version; a file of another version is rebuilt.
pub const SEG_INDEX_VERSION: u32 = 1;
/// Bytes of the header.
pub const SEG_HEADER_LEN: usize = 112;
const ENTRY_LEN: usize = 24;
/// Postings per checksummed block: 2 KiB, so a query that needs five
/// LSNs of a list checks (and faults in) a page or two, not the list.
pub const POSTINGS_BLOCK: usize = 512;
/// Offsets and counts are u32: a segment index may hold at most this many
/// postings and key bytes (a 4 GiB segment of the smallest records with a
/// handful of keys each stays below it; a build past it is an error).
pub const MAX_SEG_INDEX_ENTRIES: u64 = u32::MAX as u64;

/// What a key of a segment index names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum KeyTag {
    /// A record's session.
    Session = 1,
    /// A record's run.
    Run = 2,
    /// A record's kind (its name, `file.write`).
    Kind = 3,
    /// A path a record names (`path`, `to_path` or one of `files`).
    Path = 4,
    /// A record's agent.
    Agent = 5,
    /// A record's model.
    Model = 6,
}

impl KeyTag {
    fn from_u8(b: u8) -> Option<KeyTag> {
        Some(match b {
            1 => KeyTag::Session,
            2 => KeyTag::Run,
            3 => KeyTag::Kind,
            4 => KeyTag::Path,
            5 => KeyTag::Agent,
            6 => KeyTag::Model,
            _ => return None,
        })
    }
}

/// Collects the postings of a run of records, then encodes the file.
#[derive(Debug)]
pub struct SegIndexBuilder {
    first: Lsn,
    covered: Lsn,
    chain: ChainHash,
    min_ts: i64,
    max_ts: i64,
    keys: HashMap<(KeyTag, String), Vec<u32>>,
}

impl SegIndexBuilder {
    /// A builder for the records from `first` on.
    pub fn new(first: Lsn) -> SegIndexBuilder {
        SegIndexBuilder {
            first,
            covered: Lsn(first.0.saturating_sub(1)),
            chain: ChainHash::ZERO,
            min_ts: i64::MAX,
            max_ts: i64::MIN,
            keys: HashMap::new(),
        }
    }

    /// The last LSN observed.
    pub fn covered(&self) -> Lsn {
        self.covered
    }

    fn add(&mut self, tag: KeyTag, key: &str, delta: u32) {
        let list = match self.keys.get_mut(&(tag, key.to_string())) {
            Some(l) => l,
            None => self.keys.entry((tag, key.to_string())).or_default(),
        };
        if list.last() != Some(&delta) {
            list.push(delta);
        }
    }

    /// Adds the next record (`covered + 1`).
    pub fn observe(&mut self, lsn: Lsn, chain: ChainHash, e: &EventRef<'_>) -> Result<()> {
        if lsn != self.covered.next() {
            return Err(QueryError::Invalid(format!(
                "segment index covers up to LSN {}, cannot add LSN {lsn} (records must come in order)",
                self.covered
            )));
        }
        let delta = u32::try_from(lsn.0 - self.first.0).map_err(|_| {
            QueryError::Invalid(format!(
                "segment index from LSN {} cannot hold LSN {lsn}: more than 2^32 records",
                self.first
            ))
        })?;
        self.covered = lsn;
        self.chain = chain;
        self.min_ts = self.min_ts.min(e.ts.0);
        self.max_ts = self.max_ts.max(e.ts.0);
        self.add(KeyTag::Session, e.session, delta);
        self.add(KeyTag::Kind, e.kind.name(), delta);
        for (tag, v) in [
            (KeyTag::Run, e.run),
            (KeyTag::Agent, e.agent),
            (KeyTag::Model, e.model),
            (KeyTag::Path, e.path),
            (KeyTag::Path, e.to_path),
        ] {
            if let Some(v) = v {
                self.add(tag, v, delta);
            }
        }
        for p in &e.files {
            self.add(KeyTag::Path, p, delta);
        }
        Ok(())
    }

    /// Encodes the file (see the module docs).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut keys: Vec<(&(KeyTag, String), &Vec<u32>)> = self.keys.iter().collect();
        keys.sort_unstable_by(|a, b| (a.0 .0, a.0 .1.as_bytes()).cmp(&(b.0 .0, b.0 .1.as_bytes())));
        let postings: u64 = keys.iter().map(|(_, l)| l.len() as u64).sum();
        let key_bytes: u64 = keys.iter().map(|((_, k), _)| k.len() as u64).sum();
        if postings > MAX_SEG_INDEX_ENTRIES || key_bytes > MAX_SEG_INDEX_ENTRIES {
            return Err(QueryError::Invalid(format!(
                "segment index from LSN {}: {postings} postings and {key_bytes} key bytes, more than the {MAX_SEG_INDEX_ENTRIES} a file holds",
                self.first
            )));
        }
        let blocks = postings.div_ceil(POSTINGS_BLOCK as u64);
        let len = SEG_HEADER_LEN as u64
            + keys.len() as u64 * ENTRY_LEN as u64
            + key_bytes
            + postings * 4
            + blocks * 4;
        let mut out = Vec::with_capacity(len as usize);
        self.encode_header(&mut out, keys.len() as u32, postings, key_bytes);
        encode_directory(&mut out, &keys);
        encode_postings(&mut out, &keys);
        debug_assert_eq!(out.len() as u64, len);
        Ok(out)
    }

    /// Appends the header (the counts checked against the limits already).
    fn encode_header(&self, out: &mut Vec<u8>, keys: u32, postings: u64, key_bytes: u64) {
        out.extend_from_slice(SEG_INDEX_MAGIC);
        out.extend_from_slice(&SEG_INDEX_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.first.0.to_le_bytes());
        out.extend_from_slice(&self.covered.0.to_le_bytes());
        out.extend_from_slice(self.chain.as_bytes());
        let (lo, hi) = if self.min_ts <= self.max_ts {
            (self.min_ts, self.max_ts)
        } else {
            (0, 0)
        };
        out.extend_from_slice(&lo.to_le_bytes());
        out.extend_from_slice(&hi.to_le_bytes());
        out.extend_from_slice(&keys.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&postings.to_le_bytes());
        out.extend_from_slice(&key_bytes.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        let h = crc(out);
        out.extend_from_slice(&h.to_le_bytes());
        debug_assert_eq!(out.len(), SEG_HEADER_LEN);
    }
}

/// Appends the directory (one checksummed entry per key, in order), then
/// the key bytes.
fn encode_directory(out: &mut Vec<u8>, keys: &[(&(KeyTag, String), &Vec<u32>)]) {
    let (mut key_off, mut post_at) = (0u32, 0u32);
    for ((tag, key), list) in keys {
        let mut e = [0u8; ENTRY_LEN];
        e[0] = *tag as u8;
        e[4..8].copy_from_slice(&key_off.to_le_bytes());
        e[8..12].copy_from_slice(&(key.len() as u32).to_le_bytes());
        e[12..16].copy_from_slice(&post_at.to_le_bytes());
        e[16..20].copy_from_slice(&(list.len() as u32).to_le_bytes());
        let h = crc_parts(&[&e[..20], key.as_bytes()]);
        e[20..24].copy_from_slice(&h.to_le_bytes());
        out.extend_from_slice(&e);
        key_off += key.len() as u32;
        post_at += list.len() as u32;
    }
    for ((_, key), _) in keys {
        out.extend_from_slice(key.as_bytes());
    }
}

/// Appends every key's postings, then the CRC of each block of them.
fn encode_postings(out: &mut Vec<u8>, keys: &[(&(KeyTag, String), &Vec<u32>)]) {
    let post_start = out.len();
    for (_, list) in keys {
        for d in list.iter() {
            out.extend_from_slice(&d.to_le_bytes());
        }
    }
    let post_end = out.len();
    let crcs: Vec<u32> = out[post_start..post_end]
        .chunks(POSTINGS_BLOCK * 4)
        .map(crc)
        .collect();
    for c in crcs {
        out.extend_from_slice(&c.to_le_bytes());
    }
}

/// The fixed fields of a segment index file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegHeader {
    /// The segment's first LSN.
    pub first: Lsn,
    /// The last LSN the file covers.
    pub covered: Lsn,
    /// The chain value after it.
    pub chain: ChainHash,
    /// The least record time.
    pub min_ts: Timestamp,
    /// The greatest record time.
    pub max_ts: Timestamp,
    keys: u32,
    postings: u64,
    key_bytes: u64,
}

/// Bytes read from the front of a segment index file in one read when it
/// is opened in pieces ([`SegIndex::open_file`]): one page, which holds
/// the header, directory and key bytes of a file of up to ~150 short keys
/// (the benchmark's files have 104 keys, 3,268 bytes of front); a longer
/// front is read whole by a second read.
pub const SEG_FRONT_READ: usize = 4096;

/// Maps the whole file of a segment index opened in pieces.
pub type Mapper = Box<dyn Fn() -> std::io::Result<Mapped> + Send + Sync>;

/// Where a segment index's bytes come from.
enum Source {
    /// The whole file in memory or mapped.
    Whole(Mapped),
    /// An open file: its front (header, directory, key bytes) read once;
    /// the postings, when first needed, through a map of the whole file
    /// when there is a `mapper` (a map is cheap: the real file system),
    /// else block by block with the block CRCs (an archive read in place).
    Pieces {
        /// Kept only to read blocks (no `mapper`): a file whose postings
        /// are mapped holds no descriptor open (a store of many segments
        /// would hold two per segment: its log file's and this one's).
        file: Option<Arc<dyn VfsFile>>,
        front: Vec<u8>,
        mapper: Option<Mapper>,
        mapped: OnceLock<Mapped>,
        crcs: Mutex<Option<Arc<[u8]>>>,
        blocks: Mutex<HashMap<usize, Arc<[u8]>>>,
    },
}

impl Source {
    /// The header, directory and key bytes.
    fn front(&self) -> &[u8] {
        match self {
            Source::Whole(m) => m,
            Source::Pieces { front, .. } => front,
        }
    }
}

/// An open segment index file: its header checked, everything else
/// checked as it is read.
pub struct SegIndex {
    data: Source,
    what: String,
    header: SegHeader,
    dir_at: usize,
    keys_at: usize,
    post_at: usize,
    blocks_at: usize,
    /// Blocks of postings whose CRC was checked already.
    checked: Vec<AtomicBool>,
}

impl std::fmt::Debug for SegIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegIndex")
            .field("what", &self.what)
            .field("header", &self.header)
            .finish()
    }
}

impl SegHeader {
    /// The bytes of the file's front: the header, the key directory and
    /// the key bytes, which [`SegIndex::open_file`] reads before any
    /// postings.
    pub fn front_len(&self) -> u64 {
        (SEG_HEADER_LEN as u64)
            .saturating_add((self.keys as u64).saturating_mul(ENTRY_LEN as u64))
            .saturating_add(self.key_bytes)
    }

    /// The header at the front of an index file, `front` (at least its
    /// [`SEG_HEADER_LEN`] bytes), checked: magic, version, CRC and counts
    /// within their limits. Whether the rest of a file agrees with it is
    /// [`SegIndex::open`]'s check. The error says what is wrong.
    pub fn decode(front: &[u8]) -> std::result::Result<SegHeader, String> {
        let data = front;
        if data.len() < SEG_HEADER_LEN {
            return Err(format!("{} bytes, shorter than its header", data.len()));
        }
        if &data[..8] != SEG_INDEX_MAGIC {
            return Err("bad magic".into());
        }
        if crc(&data[..108]) != u32_at(data, 108) {
            return Err("header checksum mismatch".into());
        }
        let version = u32_at(data, 8);
        if version != SEG_INDEX_VERSION {
            return Err(format!("version {version}, expected {SEG_INDEX_VERSION}"));
        }
        let mut chain = [0u8; 32];
        chain.copy_from_slice(&data[32..64]);
        let header = SegHeader {
            first: Lsn(u64_at(data, 16)),
            covered: Lsn(u64_at(data, 24)),
            chain: ChainHash(chain),
            min_ts: Timestamp(u64_at(data, 64) as i64),
            max_ts: Timestamp(u64_at(data, 72) as i64),
            keys: u32_at(data, 80),
            postings: u64_at(data, 88),
            key_bytes: u64_at(data, 96),
        };
        if header.postings > MAX_SEG_INDEX_ENTRIES || header.key_bytes > MAX_SEG_INDEX_ENTRIES {
            return Err("header counts out of range".into());
        }
        Ok(header)
    }
}

impl SegIndex {
    /// Opens the file's bytes; `what` names it in errors. Checks the header
    /// (magic, version, CRC) and that its sizes add up to the length.
    pub fn open(data: Mapped, what: &str) -> Result<SegIndex> {
        let len = data.len() as u64;
        SegIndex::parse(Source::Whole(data), len, what)
    }

    /// Opens the file `file` in pieces; `what` names it in errors: one
    /// read of its front ([`SEG_FRONT_READ`] bytes, or the whole header,
    /// directory and key bytes when longer), the header checked as by
    /// [`SegIndex::open`] (the length against the file's). Each block of
    /// postings is read, and checked, when a lookup first needs it, so a
    /// probe for a key the file lacks reads its front and nothing else,
    /// and maps nothing. With `mapper`, the postings are read through a
    /// map of the whole file made when a lookup first needs one (its
    /// front must be the bytes read: else the file changed, which is
    /// damage), each block checked as by [`SegIndex::open`]; without,
    /// block by block.
    pub fn open_file(
        file: Arc<dyn VfsFile>,
        what: &str,
        mapper: Option<Mapper>,
    ) -> Result<SegIndex> {
        let io = |e: std::io::Error| QueryError::IndexCorrupt {
            path: what.to_string(),
            detail: format!("cannot be read: {e}"),
        };
        let len = file.len().map_err(io)?;
        let mut front = vec![0u8; (len.min(SEG_FRONT_READ as u64)) as usize];
        file.read_exact_at(&mut front, 0).map_err(io)?;
        if front.len() >= SEG_HEADER_LEN {
            // The sizes are checked by `parse`; here only how much more to
            // read, bounded by the file's length.
            let keys = u32_at(&front, 80) as u64;
            let key_bytes = u64_at(&front, 96);
            let want = (SEG_HEADER_LEN as u64)
                .saturating_add(keys.saturating_mul(ENTRY_LEN as u64))
                .saturating_add(key_bytes);
            if want > front.len() as u64 && want <= len {
                let at = front.len();
                front.resize(want as usize, 0);
                file.read_exact_at(&mut front[at..], at as u64)
                    .map_err(io)?;
            }
        }
        let file = if mapper.is_some() { None } else { Some(file) };
        let source = Source::Pieces {
            file,
            front,
            mapper,
            mapped: OnceLock::new(),
            crcs: Mutex::new(None),
            blocks: Mutex::new(HashMap::new()),
        };
        SegIndex::parse(source, len, what)
    }

    /// Checks the header of `source`, a file of `len` bytes.
    fn parse(source: Source, len: u64, what: &str) -> Result<SegIndex> {
        let bad = |detail: String| QueryError::IndexCorrupt {
            path: what.to_string(),
            detail,
        };
        let data = source.front();
        if len < SEG_HEADER_LEN as u64 {
            return Err(bad(format!("{len} bytes, shorter than its header")));
        }
        let header = SegHeader::decode(data).map_err(bad)?;
        let blocks = header.postings.div_ceil(POSTINGS_BLOCK as u64);
        let want = SEG_HEADER_LEN as u64
            + header.keys as u64 * ENTRY_LEN as u64
            + header.key_bytes
            + header.postings * 4
            + blocks * 4;
        if want != len {
            return Err(bad(format!("{len} bytes where its header says {want}")));
        }
        let dir_at = SEG_HEADER_LEN;
        let keys_at = dir_at + header.keys as usize * ENTRY_LEN;
        let post_at = keys_at + header.key_bytes as usize;
        let blocks_at = post_at + header.postings as usize * 4;
        if data.len() < post_at {
            return Err(bad(format!(
                "{} bytes of header, directory and keys read where its header says {post_at}",
                data.len()
            )));
        }
        Ok(SegIndex {
            data: source,
            what: what.to_string(),
            header,
            dir_at,
            keys_at,
            post_at,
            blocks_at,
            checked: (0..blocks).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// The header.
    pub fn header(&self) -> &SegHeader {
        &self.header
    }

    fn bad(&self, detail: String) -> QueryError {
        QueryError::IndexCorrupt {
            path: self.what.clone(),
            detail,
        }
    }

    /// Directory entry `i`, its CRC checked: (tag, key, first posting, count).
    fn entry(&self, i: usize) -> Result<(u8, &[u8], u32, u32)> {
        let at = self.dir_at + i * ENTRY_LEN;
        let front = self.data.front();
        let e = &front[at..at + ENTRY_LEN];
        let (off, len) = (u32_at(e, 4) as u64, u32_at(e, 8) as u64);
        if off + len > self.header.key_bytes {
            return Err(self.bad(format!("directory entry {i}: key out of range")));
        }
        let key = &front[self.keys_at + off as usize..self.keys_at + (off + len) as usize];
        if crc_parts(&[&e[..20], key]) != u32_at(e, 20) {
            return Err(self.bad(format!("directory entry {i}: checksum mismatch")));
        }
        let (start, count) = (u32_at(e, 12), u32_at(e, 16));
        if count == 0 || start as u64 + count as u64 > self.header.postings {
            return Err(self.bad(format!("directory entry {i}: postings out of range")));
        }
        Ok((e[0], key, start, count))
    }

    /// The first directory entry not below `(tag, key)`.
    fn lower_bound(&self, tag: KeyTag, key: &[u8]) -> Result<usize> {
        let (mut lo, mut hi) = (0usize, self.header.keys as usize);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (t, k, _, _) = self.entry(mid)?;
            if (t, k) < (tag as u8, key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The postings of `(tag, key)` (none if the segment has no such key).
    pub fn lookup(&self, tag: KeyTag, key: &str) -> Result<Postings<'_>> {
        let i = self.lower_bound(tag, key.as_bytes())?;
        if i < self.header.keys as usize {
            let (t, k, start, count) = self.entry(i)?;
            if t == tag as u8 && k == key.as_bytes() {
                return Ok(Postings {
                    ix: self,
                    start: start as usize,
                    len: count as usize,
                });
            }
        }
        Ok(Postings::empty(self))
    }

    /// Calls `f` with the tag byte and bytes of every key, in order, each
    /// directory entry checked first.
    pub fn each_key(&self, f: &mut dyn FnMut(u8, &[u8])) -> Result<()> {
        for i in 0..self.header.keys as usize {
            let (t, k, _, _) = self.entry(i)?;
            f(t, k);
        }
        Ok(())
    }

    /// The postings of every key of `tag` that starts with `prefix`
    /// (sorted keys make them one run of the directory).
    pub fn lookup_prefix(&self, tag: KeyTag, prefix: &str) -> Result<Vec<Postings<'_>>> {
        let mut i = self.lower_bound(tag, prefix.as_bytes())?;
        let mut out = Vec::new();
        while i < self.header.keys as usize {
            let (t, k, start, count) = self.entry(i)?;
            if t != tag as u8 || !k.starts_with(prefix.as_bytes()) {
                break;
            }
            out.push(Postings {
                ix: self,
                start: start as usize,
                len: count as usize,
            });
            i += 1;
        }
        Ok(out)
    }

    /// Posting `i` read from `data`, the whole file's bytes (held or
    /// mapped), its postings block checked against its CRC the first time.
    fn posting_in(&self, data: &[u8], i: usize) -> Result<u64> {
        let b = i / POSTINGS_BLOCK;
        if !self.checked[b].load(Ordering::Relaxed) {
            let from = self.post_at + b * POSTINGS_BLOCK * 4;
            let to = (from + POSTINGS_BLOCK * 4).min(self.blocks_at);
            if crc(&data[from..to]) != u32_at(data, self.blocks_at + b * 4) {
                return Err(self.bad(format!("postings block {b}: checksum mismatch")));
            }
            self.checked[b].store(true, Ordering::Relaxed);
        }
        Ok(u32_at(data, self.post_at + i * 4) as u64)
    }

    /// Posting `i` of the file (an LSN), its block checked first.
    fn posting(&self, i: usize) -> Result<Lsn> {
        let b = i / POSTINGS_BLOCK;
        let d = match &self.data {
            Source::Whole(data) => self.posting_in(data, i)?,
            Source::Pieces {
                mapper: Some(mapper),
                mapped,
                front,
                ..
            } => {
                let data = match mapped.get() {
                    Some(m) => m,
                    None => {
                        let m = mapper().map_err(|e| self.bad(format!("cannot be mapped: {e}")))?;
                        let want = self.blocks_at + self.checked.len() * 4;
                        if m.len() != want || m[..front.len()] != front[..] {
                            return Err(self.bad("changed since its directory was read".into()));
                        }
                        let _ = mapped.set(m);
                        mapped
                            .get()
                            .ok_or_else(|| self.bad("map not kept".into()))?
                    }
                };
                self.posting_in(data, i)?
            }
            Source::Pieces { .. } => {
                let block = self.block(b)?;
                u32_at(&block, (i % POSTINGS_BLOCK) * 4) as u64
            }
        };
        let lsn = Lsn(self.header.first.0 + d);
        if lsn > self.header.covered {
            return Err(self.bad(format!(
                "posting {i} names LSN {lsn}, past the {} the file covers",
                self.header.covered
            )));
        }
        Ok(lsn)
    }

    /// Block `b` of the postings of a file opened in pieces: read from the
    /// file and checked against its CRC the first time, then kept.
    fn block(&self, b: usize) -> Result<Arc<[u8]>> {
        let Source::Pieces {
            file: Some(file),
            crcs,
            blocks,
            ..
        } = &self.data
        else {
            return Err(self.bad("postings read by block without the file".into()));
        };
        if let Some(block) = blocks.lock().get(&b) {
            return Ok(block.clone());
        }
        let io = |e: std::io::Error| self.bad(format!("postings block {b} cannot be read: {e}"));
        let table = {
            let mut c = crcs.lock();
            match c.as_ref() {
                Some(t) => t.clone(),
                None => {
                    let mut t = vec![0u8; self.checked.len() * 4];
                    file.read_exact_at(&mut t, self.blocks_at as u64)
                        .map_err(io)?;
                    let t: Arc<[u8]> = Arc::from(t);
                    *c = Some(t.clone());
                    t
                }
            }
        };
        let from = self.post_at + b * POSTINGS_BLOCK * 4;
        let to = (from + POSTINGS_BLOCK * 4).min(self.blocks_at);
        let mut bytes = vec![0u8; to - from];
        file.read_exact_at(&mut bytes, from as u64).map_err(io)?;
        if crc(&bytes) != u32_at(&table, b * 4) {
            return Err(self.bad(format!("postings block {b}: checksum mismatch")));
        }
        let block: Arc<[u8]> = Arc::from(bytes);
        blocks.lock().insert(b, block.clone());
        Ok(block)
    }

    /// Checks the whole file: every entry, every block, the directory's
    /// order and each list's order (what `cairn verify` runs).
    pub fn check_all(&self) -> Result<()> {
        let mut prev: Option<(u8, Vec<u8>)> = None;
        let mut next_start = 0u64;
        for i in 0..self.header.keys as usize {
            let (t, k, start, count) = self.entry(i)?;
            if KeyTag::from_u8(t).is_none() {
                return Err(self.bad(format!("directory entry {i}: unknown tag {t}")));
            }
            if prev
                .as_ref()
                .is_some_and(|(pt, pk)| (*pt, pk.as_slice()) >= (t, k))
            {
                return Err(self.bad(format!("directory entry {i}: keys out of order")));
            }
            if start as u64 != next_start {
                return Err(self.bad(format!("directory entry {i}: postings overlap or gap")));
            }
            next_start += count as u64;
            let list = Postings {
                ix: self,
                start: start as usize,
                len: count as usize,
            };
            let mut last = None;
            for j in 0..list.len() {
                let l = list.get(j)?;
                if last.is_some_and(|p| p >= l) {
                    return Err(self.bad(format!("directory entry {i}: postings out of order")));
                }
                last = Some(l);
            }
            prev = Some((t, k.to_vec()));
        }
        if next_start != self.header.postings {
            return Err(self.bad("postings not all listed by the directory".into()));
        }
        for b in 0..self.checked.len() {
            self.posting(b * POSTINGS_BLOCK)?;
        }
        Ok(())
    }
}

/// One key's sorted LSNs in a segment index, read (and checked) on demand.
#[derive(Clone, Copy, Debug)]
pub struct Postings<'a> {
    ix: &'a SegIndex,
    start: usize,
    len: usize,
}

impl<'a> Postings<'a> {
    fn empty(ix: &'a SegIndex) -> Postings<'a> {
        Postings {
            ix,
            start: 0,
            len: 0,
        }
    }

    /// How many LSNs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`th LSN.
    pub fn get(&self, i: usize) -> Result<Lsn> {
        debug_assert!(i < self.len);
        self.ix.posting(self.start + i)
    }

    /// The number of LSNs below `lsn` (binary search; reads log2(len) of them).
    pub fn rank(&self, lsn: Lsn) -> Result<usize> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.get(mid)? < lsn {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// True if `lsn` is in the list.
    pub fn contains(&self, lsn: Lsn) -> Result<bool> {
        let i = self.rank(lsn)?;
        Ok(i < self.len && self.get(i)? == lsn)
    }

    /// Every LSN, in order.
    pub fn to_vec(&self) -> Result<Vec<Lsn>> {
        (0..self.len).map(|i| self.get(i)).collect()
    }
}

/// The name of the index file of the segment starting at `first`.
pub fn seg_index_name(first: Lsn) -> String {
    format!("{:020}.qix", first.0)
}

/// The first LSN a segment index file's name gives, if it is one.
pub fn parse_seg_index_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_suffix(".qix")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok().map(Lsn))
        .flatten()
}

/// The kind a [`KeyTag::Kind`] key names.
pub fn kind_key(k: EventKind) -> &'static str {
    k.name()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use cairn_codec::Event;
    use std::sync::atomic::AtomicU64;

    fn build(n: u64) -> Vec<u8> {
        let mut b = SegIndexBuilder::new(Lsn(10));
        for i in 0..n {
            let kind = if i % 3 == 0 {
                EventKind::Prompt
            } else {
                EventKind::FileWrite
            };
            let mut e = Event::new(kind, if i % 2 == 0 { "a" } else { "b" });
            e.ts = Timestamp(1000 + i as i64);
            if kind == EventKind::FileWrite {
                e = e.with_path(format!("src/f{}.rs", i % 4));
            }
            b.observe(Lsn(10 + i), ChainHash([i as u8; 32]), &EventRef::of(&e))
                .unwrap();
        }
        b.encode().unwrap()
    }

    fn open(bytes: Vec<u8>) -> Result<SegIndex> {
        SegIndex::open(Mapped::Bytes(Arc::from(bytes)), "f.qix")
    }

    /// A read-only file over bytes, counting the bytes read from it.
    #[derive(Debug)]
    struct BytesFile(Vec<u8>, AtomicU64);

    impl VfsFile for BytesFile {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            let from = (offset as usize).min(self.0.len());
            let n = buf.len().min(self.0.len() - from);
            buf[..n].copy_from_slice(&self.0[from..from + n]);
            self.1.fetch_add(n as u64, Ordering::SeqCst);
            Ok(n)
        }
        fn write_all_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
            Err(std::io::Error::other("read only"))
        }
        fn len(&self) -> std::io::Result<u64> {
            Ok(self.0.len() as u64)
        }
        fn set_len(&self, _: u64) -> std::io::Result<()> {
            Err(std::io::Error::other("read only"))
        }
        fn sync_data(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn open_pieces(bytes: Vec<u8>) -> (Result<SegIndex>, Arc<BytesFile>) {
        let f = Arc::new(BytesFile(bytes, AtomicU64::new(0)));
        (SegIndex::open_file(f.clone(), "f.qix", None), f)
    }

    /// Opened in pieces, its postings through a "map" of `mapped`.
    fn open_pieces_mapped(bytes: Vec<u8>, mapped: Vec<u8>) -> Result<SegIndex> {
        let f = Arc::new(BytesFile(bytes, AtomicU64::new(0)));
        let m: Arc<[u8]> = Arc::from(mapped);
        let mapper: Mapper = Box::new(move || Ok(Mapped::Bytes(m.clone())));
        SegIndex::open_file(f, "f.qix", Some(mapper))
    }

    /// Every way of opening a file: whole, in pieces (postings by block,
    /// and through a map).
    fn open_both(bytes: &[u8]) -> [Result<SegIndex>; 3] {
        [
            open(bytes.to_vec()),
            open_pieces(bytes.to_vec()).0,
            open_pieces_mapped(bytes.to_vec(), bytes.to_vec()),
        ]
    }

    #[test]
    fn round_trip_lookups() {
        for ix in open_both(&build(2000)) {
            round_trip(ix.unwrap());
        }
    }

    fn round_trip(ix: SegIndex) {
        ix.check_all().unwrap();
        let h = ix.header();
        assert_eq!((h.first, h.covered), (Lsn(10), Lsn(2009)));
        assert_eq!((h.min_ts, h.max_ts), (Timestamp(1000), Timestamp(2999)));
        let a = ix.lookup(KeyTag::Session, "a").unwrap();
        assert_eq!(a.len(), 1000);
        assert_eq!(a.get(0).unwrap(), Lsn(10));
        assert_eq!(a.get(999).unwrap(), Lsn(2008));
        assert!(a.contains(Lsn(12)).unwrap());
        assert!(!a.contains(Lsn(11)).unwrap());
        assert!(ix.lookup(KeyTag::Session, "c").unwrap().is_empty());
        assert!(ix.lookup(KeyTag::Run, "a").unwrap().is_empty());
        let p = ix.lookup(KeyTag::Kind, "prompt").unwrap();
        assert_eq!(p.len(), 667);
        let under = ix.lookup_prefix(KeyTag::Path, "src/").unwrap();
        assert_eq!(under.len(), 4);
        assert_eq!(under.iter().map(|p| p.len()).sum::<usize>(), 1333);
    }

    /// `good` with the u32 at `at` set to `v` and every checksum made
    /// right again (header, directory entries, posting blocks), as whoever
    /// can write an archive's bucket can: only the checks of meaning stand
    /// between such a file and the reader.
    fn forged(good: &[u8], at: usize, v: u32) -> Vec<u8> {
        let mut b = good.to_vec();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        // The layout of the good file: a changed count is refused by the
        // sizes check, whatever the checksums say.
        let keys = u32_at(good, 80) as usize;
        let posts = u64_at(good, 88) as usize;
        let key_bytes = u64_at(good, 96) as usize;
        let dir = SEG_HEADER_LEN;
        let kb = dir + keys * ENTRY_LEN;
        let pb = kb + key_bytes;
        let cb = pb + posts * 4;
        for i in 0..keys {
            let e = dir + i * ENTRY_LEN;
            let (off, len) = (u32_at(&b, e + 4) as usize, u32_at(&b, e + 8) as usize);
            let key = b
                .get(kb + off..(kb + off).saturating_add(len))
                .unwrap_or(&[])
                .to_vec();
            let c = crc_parts(&[&b[e..e + 20], &key]);
            b[e + 20..e + 24].copy_from_slice(&c.to_le_bytes());
        }
        for (j, block) in (0..posts).step_by(POSTINGS_BLOCK).enumerate() {
            let end = (block + POSTINGS_BLOCK).min(posts);
            let c = crc(&b[pb + block * 4..pb + end * 4]);
            b[cb + j * 4..cb + j * 4 + 4].copy_from_slice(&c.to_le_bytes());
        }
        let c = crc(&b[..108]);
        b[108..112].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Every read a query makes of an index, results ignored: what must
    /// not panic.
    fn use_all(ix: &SegIndex) {
        let _ = ix.check_all();
        let mut keys = Vec::new();
        let _ = ix.each_key(&mut |t, k| keys.push((t, k.to_vec())));
        for (tag, key) in [
            (KeyTag::Session, "a"),
            (KeyTag::Session, "b"),
            (KeyTag::Kind, "prompt"),
            (KeyTag::Path, "src/f1.rs"),
            (KeyTag::Run, ""),
        ] {
            if let Ok(p) = ix.lookup(tag, key) {
                let _ = p.to_vec();
                if !p.is_empty() {
                    let _ = p.get(p.len() - 1);
                }
                let _ = p.rank(Lsn(500));
                let _ = p.contains(Lsn(12));
            }
            if let Ok(ps) = ix.lookup_prefix(tag, "") {
                for p in ps {
                    let _ = p.to_vec();
                }
            }
        }
    }

    /// The forging reaches the reader: a file forged in its postings or
    /// directory still opens (its checksums are right, its sizes add up),
    /// so the property below runs the queries, not only the open's checks.
    #[test]
    fn forged_files_open_and_their_damage_is_found_by_the_checks_of_meaning() {
        let good = build(700);
        let keys = u32_at(&good, 80) as usize;
        let pb = SEG_HEADER_LEN + keys * ENTRY_LEN + u64_at(&good, 96) as usize;
        // A posting made to go backwards: it opens; the full check finds it.
        let b = forged(&good, pb + 4 * 3, 0);
        for ix in open_both(&b) {
            let ix = ix.unwrap();
            assert!(ix.check_all().is_err());
            use_all(&ix);
        }
        // A directory entry's posting count made huge: it opens, and the
        // entry is refused when a search reads it.
        let b = forged(&good, SEG_HEADER_LEN + 16, u32::MAX);
        for ix in open_both(&b) {
            let ix = ix.unwrap();
            assert!(ix.check_all().is_err());
            use_all(&ix);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// A file whose checksums were all made right after a field of its
        /// header, its directory or its postings was set to any value
        /// (extremes included): opening it and every query on it give
        /// answers or errors, never a panic, whichever way it is opened.
        #[test]
        fn forged_fields_with_right_checksums_never_panic(
            field in 0usize..10_000,
            v in proptest::prop_oneof![
                proptest::prelude::Just(0u32),
                proptest::prelude::Just(1u32),
                proptest::prelude::Just(u32::MAX),
                proptest::prelude::Just(u32::MAX - 1),
                proptest::prelude::Just(1u32 << 31),
                proptest::prelude::any::<u32>(),
                0u32..3000,
            ],
        ) {
            let good = build(700);
            // A u32 of the header (after the magic and before the CRC),
            // of the directory, or of the postings.
            let keys = u32_at(&good, 80) as usize;
            let dir_end = SEG_HEADER_LEN + keys * ENTRY_LEN;
            let header: Vec<usize> = (8..108).step_by(4).collect();
            let dir: Vec<usize> = (SEG_HEADER_LEN..dir_end)
                .step_by(4)
                .filter(|o| (o - SEG_HEADER_LEN) % ENTRY_LEN != 20)
                .collect();
            let posts = u64_at(&good, 88) as usize;
            let pb = dir_end + u64_at(&good, 96) as usize;
            let postings: Vec<usize> = (0..posts).map(|i| pb + i * 4).collect();
            let all: Vec<usize> = header.into_iter().chain(dir).chain(postings).collect();
            let at = all[field % all.len()];
            let b = forged(&good, at, v);
            for ix in open_both(&b).into_iter().flatten() {
                use_all(&ix);
            }
        }
    }

    #[test]
    fn out_of_order_is_refused() {
        let mut b = SegIndexBuilder::new(Lsn(1));
        let e = Event::new(EventKind::Prompt, "s");
        assert!(b
            .observe(Lsn(2), ChainHash::ZERO, &EventRef::of(&e))
            .is_err());
    }

    #[test]
    fn every_damaged_byte_is_detected_or_harmless() {
        let good = build(1200);
        let truth = open(good.clone()).unwrap();
        let want: Vec<Vec<Lsn>> = [("a", KeyTag::Session), ("prompt", KeyTag::Kind)]
            .iter()
            .map(|(k, t)| truth.lookup(*t, k).unwrap().to_vec().unwrap())
            .collect();
        // Every header and directory byte, and a sample of the rest.
        let step = |i: usize| if i < 400 { 1 } else { 97 };
        let mut i = 0;
        while i < good.len() {
            let mut b = good.clone();
            b[i] ^= 0x21;
            for ix in open_both(&b).into_iter().flatten() {
                let r = ix.check_all();
                assert!(r.is_err(), "byte {i}: damage not found by check_all");
                for ((k, t), w) in [("a", KeyTag::Session), ("prompt", KeyTag::Kind)]
                    .iter()
                    .zip(&want)
                {
                    // A lookup either fails or gives the right answer.
                    if let Ok(got) = ix.lookup(*t, k).and_then(|p| p.to_vec()) {
                        assert_eq!(&got, w, "byte {i}: wrong answer for {k}");
                    }
                }
            }
            i += step(i);
        }
        for cut in [0, 50, SEG_HEADER_LEN, 300, good.len() - 1] {
            for r in open_both(&good[..cut]) {
                assert!(r.is_err(), "cut at {cut}");
            }
        }
    }

    /// Regression (issue 33: `checkpoints --session S` at 10,000,000
    /// events mapped each of the 31 segments' files to find the key in
    /// none): a file opened in pieces answers a probe for a key it lacks
    /// from its front alone, reads only the blocks a lookup needs, and
    /// answers as the whole file does.
    #[test]
    fn a_probe_in_pieces_reads_the_front_and_only_the_blocks_it_needs() {
        let bytes = build(20_000);
        let whole = open(bytes.clone()).unwrap();
        let (ix, file) = open_pieces(bytes.clone());
        let ix = ix.unwrap();
        let front = file.1.load(Ordering::SeqCst);
        assert!(front <= SEG_FRONT_READ as u64, "{front}");
        assert!(
            (front as usize) < bytes.len() / 10,
            "{front} of {}",
            bytes.len()
        );
        assert!(ix
            .lookup(KeyTag::Kind, "checkpoint.create")
            .unwrap()
            .is_empty());
        assert!(ix.lookup(KeyTag::Session, "zz").unwrap().is_empty());
        assert!(ix.lookup_prefix(KeyTag::Path, "lib/").unwrap().is_empty());
        assert_eq!(file.1.load(Ordering::SeqCst), front, "a miss read more");
        // A hit reads the blocks it touches (and the table of their CRCs).
        let a = ix.lookup(KeyTag::Session, "a").unwrap();
        assert_eq!(a.get(0).unwrap(), Lsn(10));
        let read = file.1.load(Ordering::SeqCst) - front;
        let crc_table = 4 * (whole.checked.len() as u64);
        assert_eq!(read, crc_table + (POSTINGS_BLOCK * 4) as u64);
        for (tag, key) in [
            (KeyTag::Session, "a"),
            (KeyTag::Session, "b"),
            (KeyTag::Kind, "prompt"),
        ] {
            let (p, w) = (
                ix.lookup(tag, key).unwrap(),
                whole.lookup(tag, key).unwrap(),
            );
            assert_eq!(p.to_vec().unwrap(), w.to_vec().unwrap(), "{key}");
            assert!(p.contains(Lsn(10 + 3 * 7)).unwrap() == w.contains(Lsn(10 + 3 * 7)).unwrap());
        }
        ix.check_all().unwrap();
    }

    /// A file that changed between the read of its front and its map is
    /// refused when the postings are first read, not read as the other.
    #[test]
    fn a_map_of_another_file_is_refused() {
        let a = build(2000);
        let mut b = build(2000);
        b[SEG_HEADER_LEN + 20] ^= 1;
        let ix = open_pieces_mapped(a.clone(), b).unwrap();
        let p = ix.lookup(KeyTag::Session, "a").unwrap();
        let e = p.get(0).unwrap_err().to_string();
        assert!(e.contains("changed"), "{e}");
        let ix = open_pieces_mapped(a.clone(), a[..a.len() - 4].to_vec()).unwrap();
        assert!(ix.lookup(KeyTag::Session, "a").unwrap().get(0).is_err());
        let ix = open_pieces_mapped(a.clone(), a).unwrap();
        assert_eq!(
            ix.lookup(KeyTag::Session, "a").unwrap().get(0).unwrap(),
            Lsn(10)
        );
    }

    /// A front longer than one read is read whole by a second.
    #[test]
    fn a_long_front_is_read_in_two() {
        let mut b = SegIndexBuilder::new(Lsn(1));
        for i in 0..3000u64 {
            let e = Event::new(EventKind::Prompt, format!("session-{i:06}"));
            b.observe(Lsn(1 + i), ChainHash::ZERO, &EventRef::of(&e))
                .unwrap();
        }
        let bytes = b.encode().unwrap();
        let (ix, _) = open_pieces(bytes);
        let ix = ix.unwrap();
        assert!(ix.post_at > SEG_FRONT_READ);
        let p = ix.lookup(KeyTag::Session, "session-002999").unwrap();
        assert_eq!(p.to_vec().unwrap(), vec![Lsn(3000)]);
        ix.check_all().unwrap();
    }

    #[test]
    fn names() {
        assert_eq!(seg_index_name(Lsn(42)), "00000000000000000042.qix");
        assert_eq!(
            parse_seg_index_name(&seg_index_name(Lsn(42))),
            Some(Lsn(42))
        );
        assert_eq!(parse_seg_index_name("42.qix"), None);
        assert_eq!(parse_seg_index_name("00000000000000000042.seg"), None);
    }
}
