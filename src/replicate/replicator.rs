//! The replicator: ships a store's files to an archive as immutable,
//! content-named pieces, then writes the manifest that names them.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cairn_codec::{ChainHash, Lsn};

use super::archive::{Archive, Bytes, PutHandle, MAX_PUTS_IN_FLIGHT};
use super::local::{self, Kind, LogCursor, PackCursor, Stat};
use super::manifest::{
    FileEntry, Manifest, Piece, MANIFEST_VERSION, SEG_INDEX_DIR, TAIL_STATE_INDEX_INTERVAL_BYTES,
};
use super::{manifest_name, object_name, ReplicateError, OBJECTS_DIR};

/// The largest piece: a file longer than this (a 256 MiB pack) is shipped
/// as several objects, so a round never holds more than this in memory
/// per object and a failed upload repeats at most this much.
pub const MAX_PIECE_BYTES: u64 = 16 << 20;

/// The default bound on how long a committed record waits before it is
/// in the archive (`cairn replicate --max-lag-ms`).
pub const DEFAULT_MAX_LAG_MS: u64 = 1000;

/// The largest segment query index file shipped: it is read whole into
/// memory and checked before it is sent. The file of a 64 MiB segment
/// (the default size) is a few MiB; one larger than this is not shipped,
/// and a query in place builds that segment's index from the log instead.
pub const MAX_SHIPPED_SEG_INDEX_BYTES: u64 = 256 << 20;

/// The default number of records the unsealed tail grows by past the
/// last part of its query index shipped (manifest version 5: index files
/// in `files`, each of the records after the one before) before the
/// replicator builds and ships a new part ([`Replicator::tail_index_every`]
/// sets another). It bounds what a filtered query in place reads of the
/// tail whole and indexes in memory: the records after the last part,
/// fewer than this plus one round's records (about 4.4 MB at the 133
/// bytes a record of the 1,000,000-event benchmark store, where without
/// an index it read the whole tail, up to a 64 MiB segment). Each part
/// holds only its own records, so the parts of a segment add up to about
/// one index of it (about 9 bytes a record there) whatever this is; what
/// it sets is their number, each costing a reader in place a file's front
/// and a record read to check it: about 16 for a full segment (about
/// 500,000 records) at this bound, 128 at 4,096 (the bound a local query
/// keeps, `cairn_query::index::cold::TAIL_REINDEX_RECORDS`).
pub const TAIL_INDEX_EVERY_RECORDS: u64 = 32_768;

/// What one round shipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// The generation the round's manifest belongs to.
    pub generation: String,
    /// The head it shipped.
    pub head_lsn: u64,
    /// Objects uploaded (pieces not already in the archive, and the manifest).
    pub objects_uploaded: u64,
    /// Bytes in those pieces.
    pub bytes_uploaded: u64,
    /// The manifest written, `None` when the head had not moved.
    pub manifest: Option<String>,
    /// A new generation was started this round (first run, or the store's
    /// log no longer continues the archive's), and why.
    pub new_generation: Option<String>,
    /// Query index files built this round from sealed segments that had
    /// no good one in the store (each decodes its whole segment).
    pub seg_indexes_built: u64,
    /// Parts of the unsealed tail's query index built and shipped this
    /// round (index files in the manifest's `files`): 1 when the tail had
    /// grown by [`TAIL_INDEX_EVERY_RECORDS`] (or what
    /// [`Replicator::tail_index_every`] set) or more records past the
    /// last part shipped, else 0.
    pub tail_indexes_built: u64,
}

/// What the replicator knows of one store file.
#[derive(Clone, Debug)]
struct Tracked {
    stat: Stat,
    /// The pieces shipped: the file's first `len` bytes.
    len: u64,
    pieces: Vec<Piece>,
    cursor: Cursor,
}

impl Tracked {
    /// The manifest's entry for the file `path`, as shipped so far.
    fn entry(&self, path: String) -> FileEntry {
        FileEntry {
            path,
            len: self.len,
            pieces: self.pieces.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Cursor {
    /// A whole file: unchanged while its identity, size and time are.
    Whole,
    Log(LogCursor),
    Pack(PackCursor),
    /// Pieces taken over from the archive's manifest, checked against the
    /// file's bytes; the file is walked again from its start.
    Adopted,
}

/// Ships a store to an archive. Run [`Replicator::round`] now and then
/// (`cairn replicate --once` runs one), or [`Replicator::run`] on a thread
/// of its own until a flag is set. It reads the store without its lock
/// (writers go on as usual), and writes into it only what the read
/// commands write: the query index, a cache it saves when dropped so the
/// next replicator's first round loads it instead of indexing the log.
///
/// ```no_run
/// # fn main() -> Result<(), cairn::replicate::ReplicateError> {
/// let archive = cairn::replicate::Archive::open("file:///backups/myproject")?;
/// let mut r = cairn::replicate::Replicator::new(archive, "/src/myproject/.cairn")?;
/// let report = r.round()?;
/// println!("shipped up to LSN {}", report.head_lsn);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Replicator {
    archive: Archive,
    store: PathBuf,
    workspace: Option<String>,
    known: HashSet<String>,
    last: Option<Manifest>,
    tracked: BTreeMap<String, Tracked>,
    started: bool,
    /// The store opened read-only, kept across rounds so its query index
    /// catches up instead of being rebuilt: it counts the sessions each
    /// manifest reports. `None` until first needed, or when it cannot be
    /// opened (the manifest then says nothing of sessions).
    reader: Option<crate::Store>,
    /// Pieces being written, oldest first (at most
    /// [`super::MAX_PUTS_IN_FLIGHT`]): their hash, length and write.
    in_flight: VecDeque<(String, u64, PutHandle)>,
    /// The read-only open of the store under way on its own thread,
    /// started with a round and joined when the manifest is written.
    opening: Option<std::thread::JoinHandle<Option<crate::Store>>>,
    /// The sparse index (LSN, frame offset) of each unsealed segment's
    /// frames walked so far, one entry about every
    /// [`TAIL_STATE_INDEX_INTERVAL_BYTES`]: carried on from round to
    /// round as the walk is, for the manifest's `tail_state`.
    walk_index: BTreeMap<String, Vec<(Lsn, u64)>>,
    /// The parts of the unsealed tail's query index shipped so far (built
    /// in memory as the tail grows); `None` when there is no unsealed
    /// tail yet.
    tail_index: Option<TailIndex>,
    /// The store's log, opened read-only when the tail's index first has
    /// a part to build, and kept from round to round.
    tail_source: Option<cairn_query::source::ReaderSource>,
    /// Records the tail grows by before a new index of it is shipped.
    tail_index_every: u64,
}

/// The query index of one unsealed segment, as parts shipped so far.
#[derive(Debug)]
struct TailIndex {
    /// The segment's path, `log/<first LSN>.seg`.
    seg: String,
    /// Its first LSN.
    first: Lsn,
    /// The parts shipped, in LSN order, each covering the records after
    /// the one before: the last LSN it covers, the chain value after it,
    /// and its entry (`index/segments/<its first LSN>.qix`).
    parts: Vec<(Lsn, ChainHash, FileEntry)>,
}

impl TailIndex {
    fn new(seg: String, first: Lsn) -> TailIndex {
        TailIndex {
            seg,
            first,
            parts: Vec::new(),
        }
    }

    /// The last LSN the parts cover (the first LSN - 1 when none).
    fn covered(&self) -> Lsn {
        self.parts
            .last()
            .map_or(Lsn(self.first.0.saturating_sub(1)), |p| p.0)
    }

    /// The parts' entries, for the manifest's `files`.
    fn entries(&self) -> Vec<FileEntry> {
        self.parts.iter().map(|p| p.2.clone()).collect()
    }
}

impl Replicator {
    /// A replicator of the store directory `store` (`.cairn`) to `archive`.
    /// Nothing is read or sent until the first round.
    pub fn new(archive: Archive, store: impl Into<PathBuf>) -> Result<Replicator, ReplicateError> {
        let store = store.into();
        if !store.join("log").is_dir() {
            return Err(ReplicateError::Local {
                path: store,
                detail: "not a cairn store (no log/ inside)".into(),
            });
        }
        Ok(Replicator {
            archive,
            store,
            workspace: None,
            known: HashSet::new(),
            last: None,
            tracked: BTreeMap::new(),
            started: false,
            reader: None,
            in_flight: VecDeque::new(),
            opening: None,
            walk_index: BTreeMap::new(),
            tail_index: None,
            tail_source: None,
            tail_index_every: TAIL_INDEX_EVERY_RECORDS,
        })
    }

    /// Names the workspace in the manifests (shown by `cairn archive list`).
    pub fn workspace(mut self, dir: impl Into<String>) -> Replicator {
        self.workspace = Some(dir.into());
        self
    }

    /// Ships a new part of the unsealed tail's query index each time the
    /// tail has grown by `records` (at least 1) past the last part,
    /// instead of [`TAIL_INDEX_EVERY_RECORDS`]: fewer records read whole
    /// by a filtered query in place, for more parts for it to open and
    /// check (see the constant).
    pub fn tail_index_every(mut self, records: u64) -> Replicator {
        self.tail_index_every = records.max(1);
        self
    }

    /// The archive it ships to.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// Learns what the archive holds: the objects there (so none is sent
    /// twice) and the newest manifest, whose pieces are taken over where
    /// the local files still hold the same bytes.
    fn start(&mut self) -> Result<(), ReplicateError> {
        self.known = self
            .archive
            .list(OBJECTS_DIR)?
            .into_iter()
            .filter_map(|l| l.name.strip_prefix("objects/").map(str::to_string))
            .collect();
        self.last = super::newest_manifest(&self.archive, None)?.map(|(_, m)| m);
        if let Some(m) = &self.last {
            let mut built = Vec::new();
            // The tail's index parts are no store files: taken over by
            // `adopt_tail_index`, not here.
            for f in m.store_files() {
                let path = self.store.join(&f.path);
                let Some(st) = local::stat(&path)? else {
                    if f.path.starts_with(SEG_INDEX_DIR) {
                        built.push(f);
                    }
                    continue;
                };
                if st.len < f.len || !self.pieces_match(&path, &f.pieces)? {
                    continue;
                }
                self.tracked.insert(
                    f.path.clone(),
                    Tracked {
                        stat: st,
                        len: f.len,
                        pieces: f.pieces.clone(),
                        cursor: Cursor::Adopted,
                    },
                );
            }
            // A query index file the archive has and the store does not
            // was built by a replicator from its segment: taken over as
            // built from that segment when the segment's pieces are the
            // store's (a reader checks the file against the segment all
            // the same), so each new replicator does not decode the
            // segment again to build the same file.
            for f in built {
                let seg = f
                    .path
                    .strip_prefix(SEG_INDEX_DIR)
                    .and_then(|n| n.strip_prefix('/'))
                    .and_then(cairn_query::index::seg::parse_seg_index_name)
                    .map(|first| format!("log/{:020}.seg", first.0));
                let Some(seg_st) = seg.and_then(|s| self.tracked.get(&s)).map(|t| t.stat) else {
                    continue;
                };
                self.tracked.insert(
                    f.path.clone(),
                    Tracked {
                        stat: seg_st,
                        len: f.len,
                        pieces: f.pieces.clone(),
                        cursor: Cursor::Whole,
                    },
                );
            }
        }
        self.started = true;
        Ok(())
    }

    fn pieces_match(&self, path: &Path, pieces: &[Piece]) -> Result<bool, ReplicateError> {
        let mut off = 0;
        for p in pieces {
            let b = local::read_range(path, off, p.len)?;
            if blake3::hash(&b).to_hex().as_str() != p.hash {
                return Ok(false);
            }
            off += p.len;
        }
        Ok(true)
    }

    /// Ships `path`'s bytes `from..to` as pieces, uploading those the
    /// archive does not have.
    fn ship(
        &mut self,
        path: &Path,
        from: u64,
        to: u64,
        report: &mut RoundReport,
    ) -> Result<Vec<Piece>, ReplicateError> {
        let mut out = Vec::new();
        let mut off = from;
        while off < to {
            let len = (to - off).min(MAX_PIECE_BYTES);
            let bytes = Bytes::from(local::read_range(path, off, len)?);
            out.push(self.ship_piece(bytes, report)?);
            off += len;
        }
        Ok(out)
    }

    /// Ships `bytes` as one piece (at most [`MAX_PIECE_BYTES`]), unless
    /// the archive has it or it is being written.
    fn ship_piece(
        &mut self,
        bytes: Bytes,
        report: &mut RoundReport,
    ) -> Result<Piece, ReplicateError> {
        let len = bytes.len() as u64;
        let hash = blake3::hash(&bytes).to_hex().to_string();
        if !self.known.contains(&hash) && !self.in_flight.iter().any(|(h, _, _)| *h == hash) {
            if self.in_flight.len() >= MAX_PUTS_IN_FLIGHT {
                self.finish_oldest(report)?;
            }
            let put = self.archive.start_put(&object_name(&hash), bytes);
            self.in_flight.push_back((hash.clone(), len, put));
        }
        Ok(Piece { hash, len })
    }

    /// Waits for the oldest write in flight; a piece written is known
    /// from then on.
    fn finish_oldest(&mut self, report: &mut RoundReport) -> Result<(), ReplicateError> {
        let Some((hash, len, put)) = self.in_flight.pop_front() else {
            return Ok(());
        };
        self.archive.finish_put(put)?;
        report.objects_uploaded += 1;
        report.bytes_uploaded += len;
        self.known.insert(hash);
        Ok(())
    }

    /// Waits for every write in flight, all of them even when one fails
    /// (those written are known), and returns the first failure.
    fn finish_all(&mut self, report: &mut RoundReport) -> Result<(), ReplicateError> {
        let mut first_err = None;
        while !self.in_flight.is_empty() {
            if let Err(e) = self.finish_oldest(report) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One round: ships what is new in the store and, when the head moved,
    /// writes a manifest naming every piece (after all of them are in the
    /// archive). Files are read in the order that keeps the manifest whole:
    /// the log first, then the blob index and packs (a record's blobs are
    /// durable before the record), then dictionaries (one is durable
    /// before anything uses it).
    pub fn round(&mut self) -> Result<RoundReport, ReplicateError> {
        let r = self.try_round();
        if r.is_err() {
            // Writes still in flight are waited for: a round never leaves
            // one running behind it.
            let _ = self.finish_all(&mut RoundReport::default());
            // A file's pieces were noted as shipped when read; those whose
            // send failed are not in the archive. Forget such files: the
            // next round walks them again and sends what is missing, so
            // no manifest names an object that was never written.
            let known = &self.known;
            self.tracked
                .retain(|_, t| t.pieces.iter().all(|p| known.contains(&p.hash)));
            // The same for the tail's index: a part not wholly sent (and
            // every part after it) is built and sent again by the next
            // round.
            if let Some(t) = &mut self.tail_index {
                let sent = t
                    .parts
                    .iter()
                    .take_while(|(_, _, e)| e.pieces.iter().all(|p| known.contains(&p.hash)))
                    .count();
                t.parts.truncate(sent);
            }
        }
        r
    }

    fn try_round(&mut self) -> Result<RoundReport, ReplicateError> {
        self.start_reader();
        if !self.started {
            self.start()?;
        }
        let mut report = RoundReport::default();
        let mut shipped = Shipped {
            files: Vec::new(),
            head: (Lsn(0), ChainHash::ZERO),
            diverged: None,
            tail_state: None,
        };
        self.ship_log(&mut shipped, &mut report)?;
        self.note_cut_history(&mut shipped);
        self.ship_sparse_indexes(&mut shipped.files, &mut report)?;
        self.ship_seg_indexes(&mut shipped.files, &mut report)?;
        let tail_parts = self.ship_tail_index(&shipped, &mut report)?;
        self.mark_tail_part_ends(&mut shipped)?;
        shipped.files.extend(tail_parts);
        self.ship_blobs_and_dicts(&mut shipped.files, &mut report)?;
        // Every piece is in the archive before a manifest names it.
        self.finish_all(&mut report)?;
        let generation = self.generation(shipped.diverged.as_deref(), &mut report);
        let head = shipped.head;
        report.generation = generation.clone();
        report.head_lsn = head.0 .0;
        let moved = match &self.last {
            Some(m) => m.generation != generation || m.head_lsn != head.0 .0,
            None => true,
        };
        if moved {
            self.write_manifest(
                generation,
                head,
                shipped.files,
                shipped
                    .tail_state
                    .map(|st| cairn_codec::bytes::to_hex(&st.encode())),
                &mut report,
            )?;
        }
        Ok(report)
    }

    /// Ships the log's segments, oldest first, into `shipped`.
    fn ship_log(
        &mut self,
        shipped: &mut Shipped,
        report: &mut RoundReport,
    ) -> Result<(), ReplicateError> {
        let log_names = self.names("log", |k| k == Kind::Segment)?;
        for (i, name) in log_names.iter().enumerate() {
            let rel = format!("log/{name}");
            let path = self.store.join(&rel);
            let Some(st) = local::stat(&path)? else {
                continue;
            };
            let (start_cursor, mut keep) =
                self.segment_resume(&rel, &path, &st, &mut shipped.diverged)?;
            // A segment with a later one after it is sealed: never
            // written again, so it may be mapped rather than copied.
            let sealed_before = i + 1 < log_names.len();
            let mut index = match start_cursor {
                Some(_) => self.walk_index.get(&rel).cloned().unwrap_or_default(),
                None => Vec::new(),
            };
            let walked = local::walk_segment(
                &path,
                start_cursor,
                sealed_before,
                &mut index,
                TAIL_STATE_INDEX_INTERVAL_BYTES,
            )?;
            let c = walked.cursor;
            if let Some((len, _)) = &keep {
                if c.valid < *len {
                    let why = format!("{rel} is shorter than the archive's copy");
                    shipped.diverged.get_or_insert(why);
                    keep = None;
                }
            }
            let (len, mut pieces) = keep.unwrap_or((0, Vec::new()));
            // Shipped from the bytes the walk read and checked: the
            // segment is read once.
            let mut off = len;
            while off < c.valid {
                let to = (off + MAX_PIECE_BYTES).min(c.valid);
                match walked.range(off, to) {
                    Some(b) => pieces.push(self.ship_piece(b, report)?),
                    None => pieces.extend(self.ship(&path, off, to, report)?),
                }
                off = to;
            }
            shipped.head = (c.lsn, c.chain);
            shipped.tail_state = None;
            if !c.sealed {
                // The last segment, unsealed: its state as shipped. A
                // resumed walk's index holds only if the walk did; one
                // started afresh (`start_cursor` none) rebuilt it whole.
                if let Some(first) = segment_first_lsn(&rel) {
                    let st = cairn_engine::log::TailState::new(
                        first,
                        c.valid,
                        c.last_frame.map(|o| (c.lsn, o)),
                        c.chain,
                        index.clone(),
                    );
                    shipped.tail_state = Some(st);
                }
                self.walk_index.insert(rel.clone(), index);
            } else {
                // Sealed: never walked again.
                self.walk_index.remove(&rel);
            }
            self.tracked.insert(
                rel.clone(),
                Tracked {
                    stat: st,
                    len: c.valid,
                    pieces: pieces.clone(),
                    cursor: Cursor::Log(c),
                },
            );
            shipped.files.push(FileEntry {
                path: rel,
                len: c.valid,
                pieces,
            });
        }
        Ok(())
    }

    /// Where the walk of the segment `rel` (at `path`, now `st`) resumes,
    /// and the length and pieces already shipped that it keeps; nothing
    /// for a new segment or one that changed in place (noted in
    /// `diverged`).
    fn segment_resume(
        &self,
        rel: &str,
        path: &Path,
        st: &Stat,
        diverged: &mut Option<String>,
    ) -> Result<(Option<LogCursor>, Option<Kept>), ReplicateError> {
        let Some(t) = self.tracked.get(rel) else {
            return Ok((None, None));
        };
        Ok(match t.cursor {
            Cursor::Log(c) if t.stat.ino == st.ino && local::log_cursor_holds(path, &c)? => {
                (Some(c), Some((t.len, t.pieces.clone())))
            }
            Cursor::Adopted if t.stat.ino == st.ino => (None, Some((t.len, t.pieces.clone()))),
            _ => {
                diverged.get_or_insert(format!("{rel} changed in place"));
                (None, None)
            }
        })
    }

    /// Ships the sparse index file (`log/<first LSN>.idx`) of each sealed
    /// segment `ship_log` has just walked: the store's own file when it is
    /// whole and describes the segment, else one built from the segment
    /// (the store is not written; see
    /// [`cairn_engine::log::sealed_index_file`]). A reader of the archive
    /// in place reads a record's frames by range at the offsets it gives;
    /// without it, it would fetch the whole segment to build it. A
    /// segment unchanged since its file was shipped (same identity, size
    /// and time) is not read again. A segment whose index cannot be had
    /// (a damaged frame) is shipped without one: the reader then builds
    /// the index from the segment and names the damage, as a local store
    /// does.
    fn ship_sparse_indexes(
        &mut self,
        files: &mut Vec<FileEntry>,
        report: &mut RoundReport,
    ) -> Result<(), ReplicateError> {
        let sealed: Vec<(String, Stat)> = files
            .iter()
            .filter_map(|f| match self.tracked.get(&f.path) {
                Some(Tracked {
                    cursor: Cursor::Log(c),
                    stat,
                    ..
                }) if c.sealed => Some((f.path.clone(), *stat)),
                _ => None,
            })
            .collect();
        for (seg, st) in sealed {
            let Some(rel) = seg.strip_suffix(".seg").map(|s| format!("{s}.idx")) else {
                continue;
            };
            if let Some(t) = self.tracked.get(&rel) {
                if matches!(t.cursor, Cursor::Whole) && t.stat == st {
                    files.push(t.entry(rel));
                    continue;
                }
            }
            self.tracked.remove(&rel);
            let path = self.store.join(&seg);
            let Ok(bytes) =
                cairn_engine::log::sealed_index_file(&cairn_engine::vfs::RealVfs, &path)
            else {
                continue;
            };
            files.push(self.ship_whole(rel, st, &bytes, report)?);
        }
        Ok(())
    }

    /// Ships `bytes` as pieces of at most [`MAX_PIECE_BYTES`]: their
    /// entries, in order.
    fn ship_in_pieces(
        &mut self,
        bytes: &[u8],
        report: &mut RoundReport,
    ) -> Result<Vec<Piece>, ReplicateError> {
        bytes
            .chunks(MAX_PIECE_BYTES as usize)
            .map(|part| self.ship_piece(Bytes::copy_from_slice(part), report))
            .collect()
    }

    /// Ships `bytes`, the whole of the file `rel` as `st` describes it,
    /// in pieces, and tracks it as shipped whole (not read again while its
    /// stat stays the same): its entry for the manifest.
    fn ship_whole(
        &mut self,
        rel: String,
        st: local::Stat,
        bytes: &[u8],
        report: &mut RoundReport,
    ) -> Result<FileEntry, ReplicateError> {
        let len = bytes.len() as u64;
        let pieces = self.ship_in_pieces(bytes, report)?;
        self.tracked.insert(
            rel.clone(),
            Tracked {
                stat: st,
                len,
                pieces: pieces.clone(),
                cursor: Cursor::Whole,
            },
        );
        Ok(FileEntry {
            path: rel,
            len,
            pieces,
        })
    }

    /// Ships the query index file (`index/segments/<first LSN>.qix`) of
    /// each sealed segment `ship_log` has just walked, so a query in
    /// place reads it instead of fetching the segment to build it. The
    /// store's own file is shipped when it is whole (every checksum) and
    /// its header says it covers that segment exactly (first and last
    /// LSN, chain value after the last): such a file never changes again.
    /// A segment without such a file (none yet, a stale or damaged one,
    /// one larger than [`MAX_SHIPPED_SEG_INDEX_BYTES`]) gets one built
    /// from the segment in memory, as a query builds it (the store is not
    /// written), checked the same way; one whose records cannot be read
    /// is shipped without (the reader then builds that segment's index
    /// from the log and names the damage, as a local store does). A file
    /// unchanged since it was shipped (same identity, size and time), or
    /// built from a segment unchanged since, is not read or built again.
    fn ship_seg_indexes(
        &mut self,
        files: &mut Vec<FileEntry>,
        report: &mut RoundReport,
    ) -> Result<(), ReplicateError> {
        let sealed: Vec<(String, Stat, LogCursor)> = files
            .iter()
            .filter_map(|f| match self.tracked.get(&f.path) {
                Some(Tracked {
                    cursor: Cursor::Log(c),
                    stat,
                    ..
                }) if c.sealed => Some((f.path.clone(), *stat, *c)),
                _ => None,
            })
            .collect();
        // Opened when a segment's file has to be built, once a round.
        let mut source: Option<cairn_query::source::ReaderSource> = None;
        for (seg, seg_st, c) in sealed {
            let Some(first) = seg
                .strip_prefix("log/")
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse::<u64>().ok())
                .map(Lsn)
            else {
                continue;
            };
            let rel = format!(
                "{SEG_INDEX_DIR}/{}",
                cairn_query::index::seg::seg_index_name(first)
            );
            let path = self.store.join(&rel);
            if let Some(st) = local::stat(&path)? {
                if let Some(t) = self.tracked.get(&rel) {
                    let same = match t.cursor {
                        Cursor::Whole => t.stat == st,
                        Cursor::Adopted => t.len == st.len,
                        _ => false,
                    };
                    if same {
                        files.push(t.entry(rel));
                        continue;
                    }
                }
                if st.len <= MAX_SHIPPED_SEG_INDEX_BYTES {
                    // Read once: the bytes checked are the bytes shipped,
                    // even if a query replaces the file meanwhile.
                    let bytes = local::read_range(&path, 0, st.len)?;
                    if seg_index_covers(&bytes, &rel, first, &c) {
                        files.push(self.ship_whole(rel, st, &bytes, report)?);
                        continue;
                    }
                }
            }
            // Built before from this very segment: the same bytes.
            if let Some(t) = self.tracked.get(&rel) {
                if matches!(t.cursor, Cursor::Whole) && t.stat == seg_st {
                    files.push(t.entry(rel));
                    continue;
                }
            }
            self.tracked.remove(&rel);
            if source.is_none() {
                let vfs: std::sync::Arc<dyn cairn_engine::Vfs> =
                    std::sync::Arc::new(cairn_engine::RealVfs);
                match cairn_engine::log::LogReader::open(vfs, &self.store.join("log")) {
                    Ok(r) => source = Some(cairn_query::source::ReaderSource::new(r)),
                    // Unreadable now: shipped without; the next round tries again.
                    Err(_) => continue,
                }
            }
            let Some(src) = source.as_ref() else {
                continue;
            };
            let Ok(bytes) = build_seg_index(src, first, c.lsn) else {
                continue;
            };
            report.seg_indexes_built += 1;
            if seg_index_covers(&bytes, &rel, first, &c) {
                files.push(self.ship_whole(rel, seg_st, &bytes, report)?);
            }
        }
        Ok(())
    }

    /// The parts of the query index of the unsealed tail `ship_log` has
    /// just walked, for the manifest's `files` (version 5): each part a
    /// query index file of the records after the part before it (the
    /// first from the tail's first record), named by its first LSN, built
    /// in memory (the store is not written). A new part, of the records
    /// from the last part's end to the round's head, is built and shipped
    /// when the tail has grown by [`TAIL_INDEX_EVERY_RECORDS`] (or
    /// [`Replicator::tail_index_every`]) or more records past the last
    /// part; else the parts shipped so far are named again (a reader in
    /// place indexes only the records after them). So each record is in
    /// one part, and the parts of a segment add up to about one index of
    /// it, where one file of the whole tail so far each time added up to
    /// the square of the tail. A part is built from the store's log (kept
    /// open from round to round), after checking that the record the last
    /// part ends at is still there with the chain value it records (a log
    /// replaced under the parts drops them all); and it is shipped only if
    /// it ends at the round's head with the walk's chain value and decodes
    /// whole. A log that cannot be read now ships no new part (the next
    /// round tries again); a new tail or a new generation starts afresh.
    fn ship_tail_index(
        &mut self,
        shipped: &Shipped,
        report: &mut RoundReport,
    ) -> Result<Vec<FileEntry>, ReplicateError> {
        let tail = shipped
            .tail_state
            .as_ref()
            .and_then(|_| {
                shipped
                    .files
                    .iter()
                    .rev()
                    .find(|f| f.path.starts_with("log/") && f.path.ends_with(".seg"))
            })
            .and_then(|f| Some((f.path.clone(), segment_first_lsn(&f.path)?)));
        let Some((seg, first)) = tail else {
            self.tail_index = None;
            return Ok(Vec::new());
        };
        let (head, head_chain) = shipped.head;
        if shipped.diverged.is_some() {
            // The log changed under what was indexed: read it afresh.
            self.tail_index = None;
            self.tail_source = None;
        }
        if self
            .tail_index
            .as_ref()
            .is_some_and(|t| t.seg != seg || t.first != first || t.covered() > head)
        {
            self.tail_index = None;
        }
        if self.tail_index.is_none() {
            let mut t = TailIndex::new(seg, first);
            if shipped.diverged.is_none() {
                t.parts = self.adopt_tail_index(first, head);
            }
            self.tail_index = Some(t);
        }
        let Some(t) = self.tail_index.as_ref() else {
            return Ok(Vec::new());
        };
        let covered = t.covered();
        if head < first || head.0 < covered.0 + self.tail_index_every {
            return Ok(t.entries());
        }
        if self.tail_source.is_none() {
            let vfs: std::sync::Arc<dyn cairn_engine::Vfs> =
                std::sync::Arc::new(cairn_engine::RealVfs);
            match cairn_engine::log::LogReader::open(vfs, &self.store.join("log")) {
                Ok(r) => self.tail_source = Some(cairn_query::source::ReaderSource::new(r)),
                // Unreadable now: the next round tries again.
                Err(_) => return Ok(t.entries()),
            }
        }
        let Some(src) = self.tail_source.as_ref() else {
            return Ok(t.entries());
        };
        let bytes = match build_tail_part(src, t, head, head_chain) {
            Ok(b) => b,
            Err(PartFailed::Stale) => {
                // The parts do not describe this log: all afresh.
                if let Some(t) = self.tail_index.as_mut() {
                    t.parts.clear();
                }
                self.tail_source = None;
                return Ok(Vec::new());
            }
            Err(PartFailed::Unread) => {
                // A failed read leaves the log reader perhaps stale.
                self.tail_source = None;
                return Ok(t.entries());
            }
        };
        let rel = format!(
            "{SEG_INDEX_DIR}/{}",
            cairn_query::index::seg::seg_index_name(covered.next())
        );
        let len = bytes.len() as u64;
        let cut = part_front_len(&bytes);
        let mut pieces = self.ship_in_pieces(&bytes[..cut], report)?;
        pieces.extend(self.ship_in_pieces(&bytes[cut..], report)?);
        let entry = FileEntry {
            path: rel,
            len,
            pieces,
        };
        report.tail_indexes_built += 1;
        let Some(t) = self.tail_index.as_mut() else {
            return Ok(Vec::new());
        };
        t.parts.push((head, head_chain, entry));
        Ok(t.entries())
    }

    /// Gives the manifest's `tail_state` an entry of its sparse index at
    /// the record each part of the tail's index ends at (its LSN and
    /// frame offset), kept in the walk's index from round to round: a
    /// reader in place checks each part against that record's chain
    /// value, and with an entry there reads that frame alone (a page of
    /// the tail), not the up to [`TAIL_STATE_INDEX_INTERVAL_BYTES`] of
    /// frames before it from the entry before and the chunk that pulls
    /// in. A frame's offset not walked yet (parts taken over from the
    /// archive by a new replicator) is found by decoding the frames
    /// between the entries around it in the local segment; one not found
    /// gets no entry (the reader scans to it, as before).
    fn mark_tail_part_ends(&mut self, shipped: &mut Shipped) -> Result<(), ReplicateError> {
        let (Some(t), Some(st)) = (&self.tail_index, &mut shipped.tail_state) else {
            return Ok(());
        };
        let Some(index) = self.walk_index.get_mut(&t.seg) else {
            return Ok(());
        };
        let path = self.store.join(&t.seg);
        let mut changed = false;
        for &(end, _, _) in &t.parts {
            if end > st.last_lsn {
                continue;
            }
            let i = index.partition_point(|&(l, _)| l < end);
            if index.get(i).is_some_and(|&(l, _)| l == end) {
                continue;
            }
            let off = if end == st.last_lsn {
                Some(st.last_frame_off)
            } else {
                let from = i.checked_sub(1).map(|j| index[j].1);
                let to = index.get(i).map_or(st.valid_len, |&(_, o)| o);
                match from {
                    Some(from) => local::frame_offset(&path, from, to, end)?,
                    None => None,
                }
            };
            if let Some(off) = off.filter(|&o| o > 0) {
                index.insert(i, (end, off));
                changed = true;
            }
        }
        if changed {
            st.set_index_entries(index.clone());
        }
        Ok(())
    }

    /// The archive's last manifest's parts of the tail's index, taken
    /// over by a new replicator whose log continues the archive's, when
    /// they index the tail from `first` up to at most `head`, each
    /// starting right after the one before: each part's header (112
    /// bytes, the first of its object, checksum checked) gives the LSN it
    /// covers and the chain value there; the first part that does not
    /// chain ends what is taken. A version 4 manifest's `tail_index` is
    /// taken as the first part. So that a replicator run now and then
    /// (`cairn replicate --once`) ships a new part only when the tail has
    /// grown by the bound, not at each run. The chain values are checked
    /// against the log when the next part is built (the last one's) and
    /// by a reader (each one's).
    fn adopt_tail_index(&self, first: Lsn, head: Lsn) -> Vec<(Lsn, ChainHash, FileEntry)> {
        use cairn_query::index::seg::{seg_index_name, SegHeader, SEG_HEADER_LEN};
        let Some(m) = self.last.as_ref() else {
            return Vec::new();
        };
        let mut listed: Vec<FileEntry> = m.tail_index_parts().into_iter().cloned().collect();
        if listed.is_empty() {
            listed.extend(m.tail_index.clone());
        }
        let mut out: Vec<(Lsn, ChainHash, FileEntry)> = Vec::new();
        for e in listed {
            let want = out.last().map_or(first, |(covered, _, _)| covered.next());
            if e.path != format!("{SEG_INDEX_DIR}/{}", seg_index_name(want)) {
                break;
            }
            let Some(p) = e.pieces.first() else {
                break;
            };
            let n = SEG_HEADER_LEN as u64;
            if p.len < n {
                break;
            }
            let Some(h) = self
                .archive
                .get_range(&object_name(&p.hash), 0..n)
                .ok()
                .flatten()
                .and_then(|h| SegHeader::decode(&h).ok())
            else {
                break;
            };
            if h.first != want || h.covered < want || h.covered > head {
                break;
            }
            out.push((h.covered, h.chain, e));
        }
        out
    }

    /// Notes in `shipped.diverged` a segment the last manifest named that
    /// is gone, or a log that ends before the archive's head: history was
    /// cut.
    fn note_cut_history(&self, shipped: &mut Shipped) {
        let Some(m) = &self.last else {
            return;
        };
        for f in m
            .files
            .iter()
            .filter(|f| f.path.starts_with("log/") && f.path.ends_with(".seg"))
        {
            if !shipped.files.iter().any(|g| g.path == f.path) {
                shipped
                    .diverged
                    .get_or_insert(format!("{} is gone", f.path));
            }
        }
        let head = shipped.head.0 .0;
        if shipped.diverged.is_none() && head < m.head_lsn {
            shipped.diverged = Some(format!(
                "the log ends at LSN {head} before the archive's head {}",
                m.head_lsn
            ));
        }
    }

    /// Ships the blob index, the packs, then dictionaries, adding them to
    /// `files`.
    fn ship_blobs_and_dicts(
        &mut self,
        files: &mut Vec<FileEntry>,
        report: &mut RoundReport,
    ) -> Result<(), ReplicateError> {
        for (dir, want) in [
            ("blobs", Want::Index),
            ("blobs", Want::Pack),
            ("log", Want::Dict),
            ("blobs", Want::Dict),
        ] {
            let names = self.names(dir, |k| match want {
                Want::Pack => k == Kind::Pack,
                Want::Index | Want::Dict => k == Kind::Whole,
            })?;
            for name in names {
                // The index, then its delta, before the packs they
                // describe: a pack shipped after them is at least as long
                // as they say.
                let is_index = name == "index" || name == cairn_engine::blob::delta::DELTA_FILE;
                if matches!(want, Want::Index) != is_index {
                    continue;
                }
                let rel = format!("{dir}/{name}");
                let path = self.store.join(&rel);
                if let Some(f) = self.ship_file(&rel, &path, want, report)? {
                    files.push(f);
                }
            }
        }
        Ok(())
    }

    /// The generation this round's manifest belongs to: the archive's, or
    /// a new one (saying why in `report`) when the log does not continue
    /// the archive's.
    fn generation(&self, diverged: Option<&str>, report: &mut RoundReport) -> String {
        match (&self.last, diverged) {
            (Some(m), None) => m.generation.clone(),
            (last, why) => {
                report.new_generation = Some(match (last, why) {
                    (None, _) => "the archive has no manifest yet".to_string(),
                    (_, Some(w)) => w.to_string(),
                    _ => String::new(),
                });
                super::new_generation_name()
            }
        }
    }

    /// Writes the manifest of `files` at `head` in `generation`, unless the
    /// archive has it already, and remembers it as the last.
    fn write_manifest(
        &mut self,
        generation: String,
        head: (Lsn, ChainHash),
        mut files: Vec<FileEntry>,
        tail_state: Option<String>,
        report: &mut RoundReport,
    ) -> Result<(), ReplicateError> {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let name = manifest_name(&generation, head.0);
        let m = Manifest {
            version: MANIFEST_VERSION,
            generation,
            head_lsn: head.0 .0,
            head_chain: head.1.to_hex(),
            created_ms: cairn_codec::Timestamp::now().millis(),
            store: self.store.display().to_string(),
            workspace: self.workspace.clone(),
            sessions: self.count_sessions(head.0),
            files,
            tail_state,
            tail_index: None,
        };
        if !self.archive.exists(&name)? {
            self.archive.put(&name, m.encode())?;
            report.objects_uploaded += 1;
        }
        report.manifest = Some(name);
        self.last = Some(m);
        Ok(())
    }

    /// Starts opening the store read-only on a thread of its own, when it
    /// is not open yet: the open reads the whole log to index it, which
    /// costs as much as shipping it, and is done meanwhile.
    fn start_reader(&mut self) {
        if self.reader.is_some() || self.opening.is_some() {
            return;
        }
        let dir = self.store.clone();
        self.opening = std::thread::Builder::new()
            .name("cairn-replicate-reader".into())
            .spawn(move || {
                let s = open_reader(&dir)?;
                // The first query builds the index.
                s.query(|q| Ok(q.index().sessions().count())).ok()?;
                Some(s)
            })
            .ok();
    }

    /// Sessions with records up to `head`, from the store read-only.
    fn count_sessions(&mut self, head: Lsn) -> Option<u64> {
        if let Some(h) = self.opening.take() {
            self.reader = h.join().ok().flatten();
        }
        if self.reader.is_none() {
            self.reader = open_reader(&self.store);
        }
        let s = self.reader.as_ref()?;
        s.refresh().ok()?;
        if s.head().last_lsn < head {
            return None;
        }
        s.query(|q| Ok(q.index().sessions().count() as u64)).ok()
    }

    /// Ships one blob-side or dictionary file; `None` when there is
    /// nothing of it to ship (gone, or a pack whose header is not written).
    fn ship_file(
        &mut self,
        rel: &str,
        path: &Path,
        want: Want,
        report: &mut RoundReport,
    ) -> Result<Option<FileEntry>, ReplicateError> {
        let Some(st) = local::stat(path)? else {
            self.tracked.remove(rel);
            return Ok(None);
        };
        let prev = self.tracked.get(rel).cloned();
        let (len, pieces, cursor) = match want {
            Want::Index | Want::Dict => match prev {
                // An adopted file's stat is the one seen at start, not
                // when its pieces were shipped: only its length says it
                // is unchanged (a whole file that grows, the index's
                // delta, was otherwise kept at the archive's length).
                Some(t)
                    if (matches!(t.cursor, Cursor::Whole) && t.stat == st)
                        || (matches!(t.cursor, Cursor::Adopted) && t.len == st.len) =>
                {
                    (t.len, t.pieces, Cursor::Whole)
                }
                _ => {
                    let pieces = self.ship(path, 0, st.len, report)?;
                    (st.len, pieces, Cursor::Whole)
                }
            },
            Want::Pack => {
                let (from, kept) = match prev {
                    Some(t) if t.stat.ino == st.ino => match t.cursor {
                        Cursor::Pack(c) if local::pack_cursor_holds(path, &c)? => {
                            (Some(c), Some((t.len, t.pieces)))
                        }
                        Cursor::Adopted => (None, Some((t.len, t.pieces))),
                        _ => (None, None),
                    },
                    _ => (None, None),
                };
                // The walk hands out the pieces past what was shipped as
                // it reads them, so the pack is read once.
                let origin = kept.as_ref().map_or(0, |(len, _)| *len);
                let mut new_pieces = Vec::new();
                let walked = local::walk_pack(path, from, origin, MAX_PIECE_BYTES, &mut |b| {
                    new_pieces.push(self.ship_piece(b, report)?);
                    Ok(())
                })?;
                let Some(c) = walked else {
                    self.tracked.remove(rel);
                    return Ok(None);
                };
                let pieces = match kept {
                    None => new_pieces,
                    Some((len, mut p)) if len <= c.valid => {
                        p.extend(new_pieces);
                        p
                    }
                    // Shorter than what was shipped (the walk shipped
                    // nothing): all of it again.
                    Some(_) => self.ship(path, 0, c.valid, report)?,
                };
                (c.valid, pieces, Cursor::Pack(c))
            }
        };
        self.tracked.insert(
            rel.to_string(),
            Tracked {
                stat: st,
                len,
                pieces: pieces.clone(),
                cursor,
            },
        );
        Ok(Some(FileEntry {
            path: rel.to_string(),
            len,
            pieces,
        }))
    }

    /// The shippable files of `dir` of kinds `keep`, sorted.
    fn names(&self, dir: &str, keep: impl Fn(Kind) -> bool) -> Result<Vec<String>, ReplicateError> {
        let path = self.store.join(dir);
        let mut out = Vec::new();
        let rd = std::fs::read_dir(&path).map_err(|e| ReplicateError::io("list", &path, e))?;
        for e in rd {
            let e = e.map_err(|e| ReplicateError::io("list", &path, e))?;
            let name = e.file_name().to_string_lossy().to_string();
            if local::kind_of(dir, &name).is_some_and(&keep) {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Runs rounds until `stop` is set: a round, then a wait of half of
    /// `max_lag` (so a record committed just after a round starts is
    /// shipped within `max_lag` when a round takes less than half of it).
    /// A round that fails (the server unreachable) is reported to
    /// `on_round` and tried again at the next tick; nothing it sent is
    /// named by a manifest until a later round completes.
    pub fn run(
        &mut self,
        max_lag: Duration,
        stop: &AtomicBool,
        mut on_round: impl FnMut(&Result<RoundReport, ReplicateError>),
    ) {
        /// How often a wait checks the stop flag.
        const STOP_POLL: Duration = Duration::from_millis(20);
        let tick = (max_lag / 2).max(Duration::from_millis(1));
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let r = self.round();
            on_round(&r);
            while !stop.load(Ordering::Relaxed) && started.elapsed() < tick {
                std::thread::sleep(STOP_POLL.min(tick));
            }
        }
    }
}

impl Drop for Replicator {
    /// Closes the store opened read-only, which saves its query index as
    /// the read commands do (a cache beside the store, best-effort), so the
    /// next replicator's first round loads it instead of indexing the
    /// whole log again.
    fn drop(&mut self) {
        if let Some(h) = self.opening.take() {
            self.reader = h.join().ok().flatten();
        }
        if let Some(s) = self.reader.take() {
            let _ = s.close();
        }
    }
}

/// True if `bytes` are a whole query index file (every checksum) that
/// covers exactly the sealed segment from `first` the walk `c` ended:
/// its last LSN and the chain value after it.
fn seg_index_covers(bytes: &[u8], what: &str, first: Lsn, c: &LogCursor) -> bool {
    index_covers(bytes, what, first, c.lsn, c.chain)
}

/// True if `bytes` are a whole query index file (every checksum) of the
/// records `first..=last`, the chain value after `last` being `chain`.
fn index_covers(bytes: &[u8], what: &str, first: Lsn, last: Lsn, chain: ChainHash) -> bool {
    cairn_query::index::seg::SegIndex::open(
        cairn_engine::vfs::Mapped::Bytes(std::sync::Arc::from(bytes)),
        what,
    )
    .and_then(|ix| {
        ix.check_all()?;
        let h = *ix.header();
        Ok(h.first == first && h.covered == last && h.chain == chain)
    })
    .unwrap_or(false)
}

/// Where a part of the tail's index is cut into its first two pieces:
/// after its front (header, key directory and key bytes; at least
/// [`cairn_query::index::seg::SEG_FRONT_READ`], what a reader reads
/// first), so that a reader in place fetches the front as one small
/// piece, whole, and its first read of the postings after it is a page
/// of their piece, not (as in one piece with the front) the 256 KiB
/// range around them: the archive's file system fetches a range whole at
/// the second small read in it. A filter that reaches the tail reads
/// each of the tail's parts in turn, so this is paid once a part (see
/// "The tail's query index in parts" in docs/BENCHMARKS.md).
fn part_front_len(bytes: &[u8]) -> usize {
    let front = cairn_query::index::seg::SegHeader::decode(bytes)
        .map_or(0, |h| usize::try_from(h.front_len()).unwrap_or(usize::MAX));
    front
        .max(cairn_query::index::seg::SEG_FRONT_READ)
        .min(bytes.len())
}

/// Why a part of the tail's index could not be built.
enum PartFailed {
    /// The record the last part ends at is not the one it indexed (its
    /// chain value): the parts are not of this log.
    Stale,
    /// A read failed, the log ends before the head or its chain value
    /// there is not the walk's, or the file is over
    /// [`MAX_SHIPPED_SEG_INDEX_BYTES`] or does not decode whole.
    Unread,
}

/// The query index file of the tail's records after `t`'s last part up
/// to `head`, read from `src`, after checking that the record the last
/// part ends at still has the chain value it records; checked to cover
/// exactly those records, the chain value at `head` being `head_chain`
/// (the walk's).
fn build_tail_part(
    src: &cairn_query::source::ReaderSource,
    t: &TailIndex,
    head: Lsn,
    head_chain: ChainHash,
) -> Result<Vec<u8>, PartFailed> {
    use cairn_query::source::RecordSource;
    src.head().map_err(|_| PartFailed::Unread)?;
    if let Some((covered, chain, _)) = t.parts.last() {
        let at = src.read(*covered).map_err(|_| PartFailed::Unread)?;
        if at.chain != *chain {
            return Err(PartFailed::Stale);
        }
    }
    let from = t.covered().next();
    let mut b = cairn_query::index::seg::SegIndexBuilder::new(from);
    let mut last_chain = ChainHash::ZERO;
    src.for_each_ref(from, &mut |lsn, c, e| {
        if lsn > head {
            return Ok(false);
        }
        b.observe(lsn, c, e)?;
        last_chain = c;
        Ok(lsn < head)
    })
    .map_err(|_| PartFailed::Unread)?;
    if b.covered() != head || last_chain != head_chain {
        return Err(PartFailed::Unread);
    }
    let bytes = b.encode().map_err(|_| PartFailed::Unread)?;
    let fits = bytes.len() as u64 <= MAX_SHIPPED_SEG_INDEX_BYTES;
    if fits && index_covers(&bytes, "a part of the tail's index", from, head, head_chain) {
        Ok(bytes)
    } else {
        Err(PartFailed::Unread)
    }
}

/// The query index file of the records `first..=last`, built from `src`
/// as a query builds a sealed segment's (the same bytes: see
/// `cairn_query::index::cold`).
fn build_seg_index(
    src: &cairn_query::source::ReaderSource,
    first: Lsn,
    last: Lsn,
) -> cairn_query::Result<Vec<u8>> {
    use cairn_query::source::RecordSource;
    let mut b = cairn_query::index::seg::SegIndexBuilder::new(first);
    src.for_each_ref(first, &mut |lsn, chain, e| {
        if lsn > last {
            return Ok(false);
        }
        b.observe(lsn, chain, e)?;
        Ok(lsn < last)
    })?;
    if b.covered() != last {
        return Err(cairn_query::QueryError::Invalid(format!(
            "indexing LSNs {first} to {last}: the log ended at {}",
            b.covered()
        )));
    }
    b.encode()
}

/// The store `dir` opened read-only to count its sessions, saving its
/// query index on close as `cairn log` and the other read commands do.
fn open_reader(dir: &Path) -> Option<crate::Store> {
    crate::Store::builder()
        .store_dir(dir)
        .read_only()
        .save_index_read_only(true)
        .open()
        .ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Index,
    Pack,
    Dict,
}

/// The length of a file already shipped and its pieces, kept when a
/// round continues it.
type Kept = (u64, Vec<Piece>);

/// What a round has shipped so far: the files of its manifest, the log's
/// head, and why the log does not continue the archive's, if it does not.
struct Shipped {
    files: Vec<FileEntry>,
    head: (Lsn, ChainHash),
    diverged: Option<String>,
    /// The manifest's `tail_state`: the state of the last segment
    /// walked, when it is unsealed.
    tail_state: Option<cairn_engine::log::TailState>,
}

/// The first LSN a segment's path (`log/<20 digits>.seg`) names.
fn segment_first_lsn(rel: &str) -> Option<Lsn> {
    rel.strip_prefix("log/")
        .and_then(cairn_engine::log::parse_segment_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with records and a blob, and a file:// archive beside it.
    fn store_and_archive() -> (tempfile::TempDir, PathBuf, Archive, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let s = crate::Store::open(&ws).unwrap();
        for i in 0..20 {
            s.session("s").prompt(&format!("prompt {i}")).unwrap();
        }
        s.put_blob(&[7u8; 5000]).unwrap();
        s.sync().unwrap();
        s.close().unwrap();
        let arch = d.path().join("archive");
        let a = Archive::open(&format!("file://{}", arch.display())).unwrap();
        (d, ws.join(".cairn"), a, arch)
    }

    /// Every piece the newest manifest names is in the archive.
    fn assert_manifest_whole(arch: &Path) {
        let a = Archive::open(&format!("file://{}", arch.display())).unwrap();
        let (_, m) = super::super::newest_manifest(&a, None).unwrap().unwrap();
        for f in m.files.iter().chain(&m.tail_index) {
            for p in &f.pieces {
                assert!(
                    a.exists(&object_name(&p.hash)).unwrap(),
                    "{} names a missing piece",
                    f.path
                );
            }
        }
    }

    /// Each sealed segment's sparse index file is shipped, built from the
    /// segment when the store has none (the store is not written), and is
    /// byte for byte the file the store writes; the tail has none.
    #[test]
    fn sparse_index_files_of_sealed_segments_are_shipped_and_built_when_missing() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let s = crate::Store::builder()
            .workspace(&ws)
            .segment_size_bytes(64 << 10)
            .open()
            .unwrap();
        for i in 0..2000 {
            s.session("s")
                .prompt(&format!("prompt {i} {}", "x".repeat(100)))
                .unwrap();
        }
        let sealed = s.stats().log.sealed_segments;
        s.close().unwrap();
        assert!(sealed >= 2, "{sealed}");
        let log = ws.join(".cairn/log");
        let idx_files = || -> Vec<(String, Vec<u8>)> {
            let mut v: Vec<_> = std::fs::read_dir(&log)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "idx"))
                .map(|p| {
                    let name = p.file_name().unwrap().to_string_lossy().to_string();
                    (format!("log/{name}"), std::fs::read(&p).unwrap())
                })
                .collect();
            v.sort();
            v
        };
        let want = idx_files();
        assert_eq!(want.len() as u64, sealed);
        // The first one removed: the replicator builds it.
        std::fs::remove_file(ws.join(".cairn").join(&want[0].0)).unwrap();
        let arch = d.path().join("archive");
        let url = format!("file://{}", arch.display());
        let mut r = Replicator::new(Archive::open(&url).unwrap(), ws.join(".cairn")).unwrap();
        r.round().unwrap();
        assert_eq!(idx_files().len() as u64, sealed - 1, "nothing written");
        let a = Archive::open(&url).unwrap();
        let (_, m) = super::super::newest_manifest(&a, None).unwrap().unwrap();
        let mut got = Vec::new();
        for f in m.files.iter().filter(|f| f.path.ends_with(".idx")) {
            let mut b = Vec::new();
            for p in &f.pieces {
                b.extend(a.get(&object_name(&p.hash)).unwrap().unwrap());
            }
            got.push((f.path.clone(), b));
        }
        got.sort();
        assert_eq!(got, want);
    }

    /// The manifest's tail state says what the store's own `tail.state`
    /// says after a clean close (segment, length, last frame, LSN and
    /// chain), its index one entry about every
    /// [`TAIL_STATE_INDEX_INTERVAL_BYTES`], each at a frame of that LSN;
    /// carried from round to round by one replicator (its walk resumed),
    /// it is the state a new replicator's whole walk gives. When the tail
    /// seals and a new one starts, the state is the new tail's, and only
    /// its walk index is kept.
    #[test]
    fn the_tail_state_is_the_stores_and_carried_from_round_to_round() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let arch = d.path().join("archive");
        let url = format!("file://{}", arch.display());
        let append = |from: u64, to: u64| {
            let s = crate::Store::builder()
                .workspace(&ws)
                .segment_size_bytes(1 << 20)
                .open()
                .unwrap();
            for i in from..to {
                let text: String = (0..8u64)
                    .map(|j| {
                        blake3::hash(&[i, j].map(u64::to_le_bytes).concat())
                            .to_hex()
                            .to_string()
                    })
                    .collect();
                s.session("s").prompt(&text).unwrap();
            }
            s.close().unwrap();
        };
        let newest = || {
            let a = Archive::open(&url).unwrap();
            super::super::newest_manifest(&a, None).unwrap().unwrap().1
        };
        append(0, 300);
        let mut r = Replicator::new(Archive::open(&url).unwrap(), ws.join(".cairn")).unwrap();
        r.round().unwrap();
        append(300, 1500);
        r.round().unwrap();
        let carried = newest();
        let st =
            cairn_engine::log::TailState::decode(&carried.tail_state_bytes().unwrap()).unwrap();
        let local = std::fs::read(ws.join(".cairn/log/tail.state")).unwrap();
        let local = cairn_engine::log::TailState::decode(&local).unwrap();
        assert_eq!(
            (
                st.first_lsn,
                st.valid_len,
                st.last_lsn,
                st.last_frame_off,
                st.chain
            ),
            (
                local.first_lsn,
                local.valid_len,
                local.last_lsn,
                local.last_frame_off,
                local.chain
            ),
        );
        assert_eq!(st.last_lsn.0, 1500);
        let tail = carried
            .files
            .iter()
            .find(|f| f.path == format!("log/{:020}.seg", st.first_lsn.0))
            .unwrap();
        assert_eq!(tail.len, st.valid_len);
        let seg = std::fs::read(ws.join(".cairn").join(&tail.path)).unwrap();
        let entries = st.index_entries();
        assert!(entries.len() >= 4, "{} entries", entries.len());
        let header = cairn_codec::segment::SEGMENT_HEADER_LEN as u64;
        assert_eq!(entries[0], (st.first_lsn, header));
        for w in entries.windows(2) {
            assert!(w[1].1 >= w[0].1 + TAIL_STATE_INDEX_INTERVAL_BYTES, "{w:?}");
            assert!(w[1].0 > w[0].0, "{w:?}");
        }
        for &(lsn, off) in entries {
            let f = cairn_codec::frame::decode(&seg[off as usize..]).unwrap();
            assert_eq!(f.lsn, lsn);
        }
        // A new replicator walks the tail whole: the same state, so the
        // manifest it would write is the one there (nothing new).
        let mut fresh = Replicator::new(Archive::open(&url).unwrap(), ws.join(".cairn")).unwrap();
        fresh.start().unwrap();
        let mut shipped = Shipped {
            files: Vec::new(),
            head: (Lsn(0), ChainHash::ZERO),
            diverged: None,
            tail_state: None,
        };
        fresh
            .ship_log(&mut shipped, &mut RoundReport::default())
            .unwrap();
        assert_eq!(
            shipped
                .tail_state
                .map(|st| cairn_codec::bytes::to_hex(&st.encode())),
            carried.tail_state
        );
        drop(fresh);

        // The tail seals and a new one starts: the next round's state is
        // the new tail's, and the sealed segment's walk index is dropped.
        append(1500, 4500);
        r.round().unwrap();
        let after = newest();
        let st2 = cairn_engine::log::TailState::decode(&after.tail_state_bytes().unwrap()).unwrap();
        assert!(st2.first_lsn > st.first_lsn, "{:?}", st2.first_lsn);
        assert_eq!(st2.last_lsn.0, 4500);
        assert_eq!(r.walk_index.len(), 1, "{:?}", r.walk_index.keys());
        let local = std::fs::read(ws.join(".cairn/log/tail.state")).unwrap();
        let local = cairn_engine::log::TailState::decode(&local).unwrap();
        assert_eq!(
            (st2.first_lsn, st2.valid_len, st2.last_lsn, st2.chain),
            (
                local.first_lsn,
                local.valid_len,
                local.last_lsn,
                local.chain
            ),
        );
    }

    /// Pieces are noted as shipped when read and sent later, several at a
    /// time: a round whose sends failed must not leave them noted, or the
    /// next round of the same replicator would name them unsent.
    #[test]
    fn a_failed_send_is_sent_again_by_the_next_round() {
        let (_d, store, archive, arch) = store_and_archive();
        let mut r = Replicator::new(archive, &store).unwrap();
        r.archive().fail_after_puts(1);
        assert!(r.round().is_err(), "the writes after the first fail");
        r.archive().fail_after_puts(u64::MAX);
        let rep = r.round().unwrap();
        assert!(rep.manifest.is_some());
        assert_manifest_whole(&arch);
    }

    /// The tail's query index is built once the tail has the records
    /// [`Replicator::tail_index_every`] says, and is the index a query
    /// builds of the same records (byte for byte); when its send fails,
    /// the round fails and the next one sends it again, so no manifest
    /// names it unsent.
    #[test]
    fn the_tail_index_is_the_querys_and_a_failed_send_is_sent_again() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let prompts = |from: u64, n: u64| -> Vec<cairn_codec::Event> {
            (from..from + n)
                .map(|i| {
                    let mut e = cairn_codec::Event::new(
                        cairn_codec::EventKind::Prompt,
                        format!("s{}", i % 3),
                    );
                    e.text = Some(format!("prompt {i}"));
                    e
                })
                .collect()
        };
        let s = crate::Store::open(&ws).unwrap();
        s.append_batch(&prompts(0, 1000)).unwrap();
        s.close().unwrap();
        let arch = d.path().join("archive");
        let url = format!("file://{}", arch.display());
        let mut r = Replicator::new(Archive::open(&url).unwrap(), ws.join(".cairn"))
            .unwrap()
            .tail_index_every(300);
        // The log's one piece goes, every later send fails: the tail's
        // index among them.
        r.archive().fail_after_puts(1);
        assert!(r.round().is_err());
        r.archive().fail_after_puts(u64::MAX);
        let rep = r.round().unwrap();
        assert!(rep.manifest.is_some());
        assert_eq!(rep.tail_indexes_built, 1, "{rep:?}");
        assert_manifest_whole(&arch);
        let a = Archive::open(&url).unwrap();
        let (_, m1) = super::super::newest_manifest(&a, None).unwrap().unwrap();
        assert_eq!(m1.version, MANIFEST_VERSION);
        assert!(m1.tail_index.is_none(), "version 5 lists parts in files");
        let parts1: Vec<FileEntry> = m1.tail_index_parts().into_iter().cloned().collect();
        assert_eq!(parts1.len(), 1, "{parts1:?}");
        // The tail grows past the bound: the next part holds only the
        // records after the first, which is named again, not rebuilt.
        let s = crate::Store::open(&ws).unwrap();
        s.append_batch(&prompts(1000, 400)).unwrap();
        s.close().unwrap();
        let rep = r.round().unwrap();
        assert_eq!(rep.tail_indexes_built, 1, "{rep:?}");
        assert_manifest_whole(&arch);
        let (_, m2) = super::super::newest_manifest(&a, None).unwrap().unwrap();
        let parts = |m: &Manifest| -> Vec<FileEntry> {
            m.tail_index_parts().into_iter().cloned().collect()
        };
        let parts2 = parts(&m2);
        assert_eq!(parts2.len(), 2, "{parts2:?}");
        assert_eq!(parts2[0], parts1[0]);
        let vfs: std::sync::Arc<dyn cairn_engine::Vfs> = std::sync::Arc::new(cairn_engine::RealVfs);
        let src = cairn_query::source::ReaderSource::new(
            cairn_engine::log::LogReader::open(vfs, &ws.join(".cairn/log")).unwrap(),
        );
        let first_last = Lsn(m1.head_lsn);
        for (t, (from, to)) in parts2
            .iter()
            .zip([(Lsn(1), first_last), (first_last.next(), Lsn(m2.head_lsn))])
        {
            assert_eq!(
                t.path,
                format!(
                    "{SEG_INDEX_DIR}/{}",
                    cairn_query::index::seg::seg_index_name(from)
                )
            );
            let mut got = Vec::new();
            for p in &t.pieces {
                got.extend(a.get(&object_name(&p.hash)).unwrap().unwrap());
            }
            let want = build_seg_index(&src, from, to).unwrap();
            assert_eq!(got, want, "{}", t.path);
        }
        // The tail's state has an entry of its sparse index at each
        // part's end, so a reader checks a part by reading that frame
        // alone; a new replicator, taking the parts over, finds them in
        // the segment again.
        let entries_of = |m: &Manifest| {
            cairn_engine::log::TailState::decode(&m.tail_state_bytes().unwrap())
                .unwrap()
                .index_entries()
                .iter()
                .map(|e| e.0)
                .collect::<Vec<Lsn>>()
        };
        let ends = [first_last, Lsn(m2.head_lsn)];
        for end in ends {
            assert!(entries_of(&m2).contains(&end), "{end}");
        }
        let s = crate::Store::open(&ws).unwrap();
        s.append_batch(&prompts(1400, 5)).unwrap();
        s.close().unwrap();
        let mut again = Replicator::new(Archive::open(&url).unwrap(), ws.join(".cairn"))
            .unwrap()
            .tail_index_every(300);
        assert_eq!(again.round().unwrap().tail_indexes_built, 0);
        let (_, m3) = super::super::newest_manifest(&a, None).unwrap().unwrap();
        assert_eq!(parts(&m3), parts2);
        for end in ends {
            assert!(entries_of(&m3).contains(&end), "{end}");
        }
        // A restore writes none of them: they are no store files.
        let back = d.path().join("back");
        super::super::restore(&a, &back, None).unwrap();
        for t in &parts2 {
            assert!(!back.join(".cairn").join(&t.path).exists(), "{}", t.path);
        }
        assert!(
            !ws.join(".cairn")
                .join(SEG_INDEX_DIR)
                .join("00000000000000000001.qix")
                .exists(),
            "the store is not written"
        );
    }

    /// An embedder runs a replicator on a thread of its own: it stays
    /// `Send` with the tail's index and log reader it keeps.
    #[test]
    fn a_replicator_can_move_to_a_thread() {
        fn send<T: Send>() {}
        send::<Replicator>();
    }

    /// `prune` keeps the objects of the tail's index a manifest names,
    /// as it keeps the files': the manifest stays whole.
    #[test]
    fn prune_keeps_the_tail_index() {
        let (_d, store, archive, arch) = store_and_archive();
        let mut r = Replicator::new(archive, &store)
            .unwrap()
            .tail_index_every(5);
        r.round().unwrap();
        let a = Archive::open(&format!("file://{}", arch.display())).unwrap();
        let (_, m) = super::super::newest_manifest(&a, None).unwrap().unwrap();
        assert!(!m.tail_index_parts().is_empty());
        super::super::prune(&a).unwrap();
        assert_manifest_whole(&arch);
    }

    /// Pieces go several at a time, yet each is sent once: a second
    /// replicator of the same store sends nothing but finds the manifest.
    #[test]
    fn concurrent_sends_send_each_piece_once() {
        let (_d, store, archive, arch) = store_and_archive();
        let mut r = Replicator::new(archive, &store).unwrap();
        let first = r.round().unwrap();
        assert!(first.objects_uploaded >= 3, "{first:?}");
        assert_eq!(r.archive().puts(), first.objects_uploaded);
        assert_manifest_whole(&arch);
        let a = Archive::open(&format!("file://{}", arch.display())).unwrap();
        let mut again = Replicator::new(a, &store).unwrap();
        let second = again.round().unwrap();
        assert_eq!(second.objects_uploaded, 0, "{second:?}");
    }
}
