//! Opening a blob store: cleaning up after a crash and getting the index
//! back (from the persisted snapshot plus the pack tails after it, or from
//! the packs alone).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use cairn_codec::BlobHash;

use super::chunking::decode_chunk_list;
use cairn_codec::CodecError;

use super::delta;
use super::index::{IndexSnapshot, Loc, PackCover, INDEX_FILE, INDEX_MAGIC};
use super::pack::{PackHeader, PackId, PACK_HEADER_LEN};
use super::scan::{scan_pack, Scan};
use super::sorted::{SortedIndex, SORTED_INDEX_MAGIC};
use super::table::Index;
use super::{Active, BlobOptions, BlobStore, PackFile, Writer};
use crate::vfs::{OpenMode, Vfs, VfsFile};
use crate::{EngineError, Result};

/// Suffix of temporary files (the index being written); any left on open
/// are from a crash and are removed.
pub(super) const TMP_SUFFIX: &str = ".tmp";

/// A random-enough per-file nonce: the time, the process, a counter and
/// the path, hashed.
pub(super) fn new_nonce(path: &Path) -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = blake3::Hasher::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.update(&now.to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(path.as_os_str().as_encoded_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// Inserts a found entry. Entries are found in the order they were
/// written (packs by id, each from its start), so a later entry of the
/// same hash replaces the earlier one: a copy put to replace a damaged
/// entry, or gc's copy, both intact (a scan returns only entries whose CRC
/// checks). Only a chunk never replaces a top-level entry (a blob or chunk
/// list must stay listed as one). The persisted index counts as earliest:
/// the tails were written after it. An error means the persisted index is
/// damaged.
fn insert_found(index: &mut Index, hash: BlobHash, loc: Loc) -> Result<(), CodecError> {
    match index.get(&hash)? {
        Some(old) if old.kind.is_top_level() && !loc.kind.is_top_level() => {}
        _ => {
            index.insert(hash, loc);
        }
    }
    Ok(())
}

/// Adds the entries of a scan. An error means the persisted index is
/// damaged.
fn add_scan(
    index: &mut Index,
    lists: &mut Vec<(BlobHash, Loc, Vec<u8>)>,
    id: PackId,
    scan: &Scan,
) -> Result<(), CodecError> {
    for e in &scan.entries {
        let loc = Loc {
            pack: id,
            offset: e.offset,
            stored_len: e.header.stored_len,
            raw_len: e.header.raw_len,
            kind: e.header.kind,
            flags: e.header.flags,
        };
        insert_found(index, e.header.hash, loc)?;
        if let Some(p) = &e.list_payload {
            lists.push((e.header.hash, loc, p.clone()));
        }
    }
    Ok(())
}

/// Drops chunk lists (found in scanned tails) whose chunks are not all
/// stored: after a crash the list may have reached the disk without one of
/// its chunks. Such a list was never synced, so no one refers to it, and
/// keeping it would make a later put of the same blob dedup against it.
///
/// An error means the persisted index is damaged.
fn drop_incomplete_lists(
    index: &mut Index,
    lists: Vec<(BlobHash, Loc, Vec<u8>)>,
) -> Result<(), CodecError> {
    for (hash, loc, payload) in lists {
        if index.get(&hash)? != Some(loc) {
            continue;
        }
        let complete = match decode_chunk_list(&payload, loc.raw_len) {
            Ok(refs) => {
                let mut all = true;
                for r in refs {
                    if index.get(&r.hash)?.is_none() {
                        all = false;
                        break;
                    }
                }
                all
            }
            Err(_) => false,
        };
        if !complete {
            index.remove(&hash);
        }
    }
    Ok(())
}

/// A persisted index as found on open.
enum Persisted {
    /// The current format, mapped.
    Sorted(SortedIndex),
    /// A version 1 file (`CAIRNBX1`), decoded whole; a writer rewrites it
    /// in the current format on open.
    Legacy(IndexSnapshot),
}

impl Persisted {
    fn packs(&self) -> &[PackCover] {
        match self {
            Persisted::Sorted(s) => s.packs(),
            Persisted::Legacy(s) => &s.packs,
        }
    }
}

fn read_persisted(vfs: &dyn Vfs, path: &Path) -> Result<Persisted> {
    let map = vfs.map(path).map_err(io_err("map index", path))?;
    if map.len() >= 8 && map[..8] == INDEX_MAGIC {
        return Ok(Persisted::Legacy(IndexSnapshot::decode(&map)?));
    }
    if map.len() >= 8 && map[..8] != SORTED_INDEX_MAGIC {
        return Err(CodecError::BadMagic { what: "blob index" }.into());
    }
    Ok(Persisted::Sorted(SortedIndex::open(map)?))
}

/// The frames of the index delta, if there is a readable one, and the
/// length of their valid part.
fn read_delta(vfs: &dyn Vfs, dir: &Path) -> (Vec<delta::Frame>, u64) {
    let path = dir.join(delta::DELTA_FILE);
    let Ok(f) = vfs.open(&path, OpenMode::Read) else {
        return (Vec::new(), 0);
    };
    let Ok(len) = f.len() else {
        return (Vec::new(), 0);
    };
    if len > delta::MAX_DELTA_FILE_BYTES {
        return (Vec::new(), 0);
    }
    let mut b = vec![0u8; len as usize];
    if f.read_exact_at(&mut b, 0).is_err() {
        return (Vec::new(), 0);
    }
    delta::decode_frames(&b)
}

/// Adds the entries of the delta frames that extend `index`'s file, in
/// order, and raises `covered` to what they say was synced. Stops at the
/// first frame whose packs do not match the packs found (one gone,
/// replaced, or shorter than it says): it and later ones are ignored, and
/// the tails past the last applied frame are scanned. A frame of another
/// file is skipped. An error means the index file is damaged.
fn apply_delta(
    index: &mut Index,
    covered: &mut HashMap<PackId, u64>,
    frames: Vec<delta::Frame>,
    found: &[Found],
) -> Result<(), CodecError> {
    let Some(base_id) = index.base().map(SortedIndex::id) else {
        return Ok(());
    };
    for f in frames {
        if f.base_id != base_id {
            continue;
        }
        if !covers_match(&f.packs, found) {
            break;
        }
        for (h, l) in f.entries {
            insert_found(index, h, l)?;
        }
        for c in &f.packs {
            let e = covered.entry(c.id).or_insert(PACK_HEADER_LEN as u64);
            *e = (*e).max(c.covered_len);
        }
    }
    Ok(())
}

/// What a scan of one pack's tail found.
struct Tail {
    from: u64,
    end: u64,
    scan: Scan,
}

/// Scans every pack from `covered` (or its header) to its end; a writer
/// truncates a torn tail (and fsyncs the cut).
fn scan_tails(
    found: &[Found],
    covered: &HashMap<PackId, u64>,
    read_only: bool,
) -> Result<Vec<Tail>> {
    let mut out = Vec::with_capacity(found.len());
    for f in found {
        let from = covered
            .get(&f.id)
            .copied()
            .unwrap_or(PACK_HEADER_LEN as u64);
        let len = if read_only {
            f.len
        } else {
            // A first pass may have cut a torn tail already.
            f.file.len().map_err(io_err("size pack", &f.path))?
        };
        let scan = scan_pack(f.file.as_ref(), from, len).map_err(io_err("scan pack", &f.path))?;
        let mut end = len;
        if let Some(torn) = scan.torn_at {
            if !read_only {
                f.file
                    .set_len(torn)
                    .map_err(io_err("truncate torn pack tail", &f.path))?;
                // Needed: the cut must be durable before anything is
                // appended after it, or a crash could bring back the torn
                // bytes in the middle of the pack.
                f.file.sync_data().map_err(io_err("fsync pack", &f.path))?;
            }
            end = torn;
        }
        out.push(Tail { from, end, scan });
    }
    Ok(out)
}

/// The index over `base` plus the scanned tails.
fn merge_tails(base: Index, found: &[Found], tails: &[Tail]) -> Result<Index, CodecError> {
    let mut index = base;
    let mut lists = Vec::new();
    for (f, t) in found.iter().zip(tails) {
        add_scan(&mut index, &mut lists, f.id, &t.scan)?;
    }
    drop_incomplete_lists(&mut index, lists)?;
    Ok(index)
}

struct Found {
    id: PackId,
    path: PathBuf,
    file: Arc<dyn VfsFile>,
    len: u64,
    header: Option<PackHeader>,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> EngineError + 'a {
    move |e| EngineError::io(op, path, e)
}

/// Opens the blob store in `dir`: cleans up what a crash left, opens every
/// pack, gets the index back and resumes writing.
pub(super) fn open(
    vfs: Arc<dyn Vfs>,
    dir: &Path,
    opts: BlobOptions,
    read_only: bool,
) -> Result<BlobStore> {
    if !read_only {
        vfs.create_dir_all(dir)
            .map_err(io_err("create blob directory", dir))?;
    }
    let names = vfs.list(dir).map_err(io_err("list blob directory", dir))?;
    // A damaged dictionary is not fatal here: the entries that need it fail
    // to read, naming it, and verify reports them; no new one is trained.
    let dicts = crate::dicts::Dicts::load(&*vfs, dir, &names, !read_only, super::dict::SAMPLING);
    let (pack_ids, removed_tmp) = list_pack_ids(vfs.as_ref(), dir, &names, read_only)?;
    let opened = open_packs(vfs.as_ref(), dir, pack_ids, read_only)?;
    if removed_tmp || opened.dir_changed {
        vfs.sync_dir(dir)
            .map_err(io_err("fsync blob directory", dir))?;
    }
    let found = opened.found;
    let loaded = load_index(vfs.as_ref(), dir, &found, read_only)?;
    let unrecorded = unrecorded_entries(&loaded.index, &found, &loaded.tails);
    let packs = PackTable::from_tails(found, loaded.tails);

    let active = packs.active(opts.pack_size_bytes);
    // The tails may hold entries a crashed writer never fsynced (a put
    // here that dedups against one writes nothing): counting them as one
    // unsynced write makes the first sync fsync their packs (cheap when
    // they are clean) before anything found there can back a log record.
    let write_seq = u64::from(!packs.dirty.is_empty());
    let store = BlobStore {
        vfs,
        dir: dir.to_path_buf(),
        opts,
        read_only,
        index: RwLock::new(loaded.index),
        packs: RwLock::new(
            packs
                .packs
                .into_iter()
                .map(|(id, (p, _, _))| (id, p))
                .collect(),
        ),
        writer: Mutex::new(Writer {
            active,
            next_id: opened.next_id,
            // The tails past the index file count as appended since it.
            since_snapshot: packs.tail_bytes,
            dirty: packs.dirty,
            dir_dirty: false,
            poisoned: None,
            unrecorded,
            delta_len: loaded.delta_len,
        }),
        write_seq: AtomicU64::new(write_seq),
        synced_seq: AtomicU64::new(0),
        sync_lock: Mutex::new(()),
        gc_gate: RwLock::new(()),
        scanned: Mutex::new(packs.scanned),
        dicts,
        index_damaged: std::sync::atomic::AtomicBool::new(false),
    };
    let tail_due = store.index_rewrite_due(store.writer.lock().since_snapshot);
    if !read_only && (loaded.rebuilt || loaded.migrated || tail_due) {
        store.persist_index()?;
    }
    Ok(store)
}

/// The pack ids named in the directory listing, sorted, and whether a
/// temporary file a crash left was removed (so the directory needs an
/// fsync).
fn list_pack_ids(
    vfs: &dyn Vfs,
    dir: &Path,
    names: &[String],
    read_only: bool,
) -> Result<(Vec<PackId>, bool)> {
    let mut removed = false;
    let mut pack_ids = Vec::new();
    for name in names {
        if name.ends_with(TMP_SUFFIX) {
            if !read_only {
                let p = dir.join(name);
                vfs.remove_file(&p)
                    .map_err(io_err("remove temporary file", &p))?;
                removed = true;
            }
        } else if let Some(id) = PackId::parse_file_name(name) {
            pack_ids.push(id);
        }
    }
    pack_ids.sort();
    Ok((pack_ids, removed))
}

/// Every pack opened with its header read, the id the next new pack takes,
/// and whether a torn pack was removed from the directory.
struct OpenedPacks {
    found: Vec<Found>,
    next_id: u32,
    dir_changed: bool,
}

/// Opens every pack in `pack_ids` (in order) and reads its header.
fn open_packs(
    vfs: &dyn Vfs,
    dir: &Path,
    pack_ids: Vec<PackId>,
    read_only: bool,
) -> Result<OpenedPacks> {
    let mut opened = OpenedPacks {
        found: Vec::new(),
        next_id: 1,
        dir_changed: false,
    };
    for id in pack_ids {
        opened.next_id = opened.next_id.max(id.0.saturating_add(1));
        match open_pack(vfs, dir.join(id.file_name()), id, read_only)? {
            OpenedPack::Found(f) => opened.found.push(f),
            OpenedPack::Removed => opened.dir_changed = true,
            OpenedPack::Skipped => {}
        }
    }
    Ok(opened)
}

/// What opening one pack came to.
enum OpenedPack {
    /// The pack, open, with its header if it reads (or was rewritten).
    Found(Found),
    /// A torn pack, removed from the directory.
    Removed,
    /// A pack gone or torn that a reader leaves alone.
    Skipped,
}

/// Opens one pack and reads its header; a writer removes a pack a crash
/// cut short before its header and rewrites a bad header.
fn open_pack(vfs: &dyn Vfs, path: PathBuf, id: PackId, read_only: bool) -> Result<OpenedPack> {
    let mode = if read_only {
        OpenMode::Read
    } else {
        OpenMode::ReadWrite
    };
    let file = match vfs.open(&path, mode) {
        Ok(f) => f,
        // A reader races the writer's gc, which may delete a pack
        // between the listing and the open: its blobs are elsewhere.
        Err(e) if read_only && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(OpenedPack::Skipped)
        }
        Err(e) => return Err(EngineError::io("open pack", &path, e)),
    };
    let len = file.len().map_err(io_err("size pack", &path))?;
    if len < PACK_HEADER_LEN as u64 {
        // A pack whose creation a crash cut short: nothing in it was
        // ever synced (a sync covers the header too).
        if read_only {
            return Ok(OpenedPack::Skipped);
        }
        drop(file);
        vfs.remove_file(&path)
            .map_err(io_err("remove torn pack", &path))?;
        return Ok(OpenedPack::Removed);
    }
    let mut hb = [0u8; PACK_HEADER_LEN];
    file.read_exact_at(&mut hb, 0)
        .map_err(io_err("read pack header", &path))?;
    let mut header = PackHeader::decode(&hb).ok().filter(|h| h.id == id);
    if header.is_none() && !read_only {
        // The header is never synced apart from the entries after it, so
        // a bad header means a crash before the first sync of this pack
        // (or damage to the header alone). Entries are self-describing:
        // write a fresh header and keep whatever entries check out.
        let fresh = PackHeader {
            id,
            nonce: new_nonce(&path),
        };
        file.write_all_at(&fresh.encode(), 0)
            .map_err(io_err("rewrite pack header", &path))?;
        file.sync_data().map_err(io_err("fsync pack", &path))?;
        header = Some(fresh);
    }
    Ok(OpenedPack::Found(Found {
        id,
        path,
        file,
        len,
        header,
    }))
}

/// The index got back on open, the pack tails scanned past what it
/// covered, and what that means for the files on disk.
struct LoadedIndex {
    index: Index,
    tails: Vec<Tail>,
    /// The index was rebuilt from the packs: the file is rewritten.
    rebuilt: bool,
    /// The index file is in the legacy format: the file is rewritten.
    migrated: bool,
    /// Bytes of the delta file that still count.
    delta_len: u64,
}

/// Gets the index back: the persisted index and its delta if they are
/// intact and match the packs, plus a scan of what they do not cover; or
/// a scan of every pack.
fn load_index(vfs: &dyn Vfs, dir: &Path, found: &[Found], read_only: bool) -> Result<LoadedIndex> {
    // The persisted index, if it is intact and matches the packs.
    let index_path = dir.join(INDEX_FILE);
    let persisted = if vfs.exists(&index_path) {
        read_persisted(vfs, &index_path)
            .ok()
            .filter(|p| covers_match(p.packs(), found))
    } else {
        None
    };
    let migrated = matches!(persisted, Some(Persisted::Legacy(_)));
    let mut covered: HashMap<PackId, u64> = HashMap::new();
    let base = match persisted {
        Some(p) => {
            for c in p.packs() {
                covered.insert(c.id, c.covered_len);
            }
            match p {
                Persisted::Sorted(s) => Index::new(Some(s), HashMap::new()),
                Persisted::Legacy(s) => Index::new(None, s.entries.into_iter().collect()),
            }
        }
        None => Index::default(),
    };
    let mut rebuilt = covered.is_empty() && !found.is_empty();
    let (frames, mut delta_len) = if base.has_base() {
        read_delta(vfs, dir)
    } else {
        (Vec::new(), 0)
    };
    let mut base = base;
    if apply_delta(&mut base, &mut covered, frames, found).is_err() {
        // A damaged bucket met while applying the delta: scan everything.
        base = Index::default();
        covered.clear();
        rebuilt = true;
    }
    if !base.has_base() {
        delta_len = 0;
    }

    // Scan what the index does not cover. A damaged bucket met while
    // merging the tails means the file is not trusted: scan everything.
    let mut tails = scan_tails(found, &covered, read_only)?;
    let index = match merge_tails(base, found, &tails) {
        Ok(index) => index,
        Err(_) => {
            rebuilt = true;
            covered.clear();
            tails = scan_tails(found, &covered, read_only)?;
            merge_tails(Index::default(), found, &tails)?
        }
    };
    Ok(LoadedIndex {
        index,
        tails,
        rebuilt,
        migrated,
        delta_len,
    })
}

/// Entries found in the tails are in neither the file nor the delta: the
/// next delta frame (or merge) records them.
fn unrecorded_entries(index: &Index, found: &[Found], tails: &[Tail]) -> Vec<(BlobHash, Loc)> {
    let mut unrecorded = Vec::new();
    for (f, t) in found.iter().zip(tails) {
        for e in &t.scan.entries {
            let loc = Loc {
                pack: f.id,
                offset: e.offset,
                stored_len: e.header.stored_len,
                raw_len: e.header.raw_len,
                kind: e.header.kind,
                flags: e.header.flags,
            };
            if index.get(&e.header.hash).ok().flatten() == Some(loc) {
                unrecorded.push((e.header.hash, loc));
            }
        }
    }
    unrecorded
}

/// The open packs as the store keeps them, with what the tail scans found.
struct PackTable {
    /// Each pack with its scanned length and whether its header is good.
    packs: BTreeMap<PackId, (Arc<PackFile>, u64, bool)>,
    /// How far each pack was scanned.
    scanned: HashMap<PackId, u64>,
    /// Packs with a tail past the index: not known to be synced.
    dirty: Vec<Arc<PackFile>>,
    /// Bytes in those tails.
    tail_bytes: u64,
}

impl PackTable {
    /// Keeps each pack found, with what its tail scan found.
    fn from_tails(found: Vec<Found>, tails: Vec<Tail>) -> PackTable {
        let mut table = PackTable {
            packs: BTreeMap::new(),
            scanned: HashMap::new(),
            dirty: Vec::new(),
            tail_bytes: 0,
        };
        for (f, t) in found.into_iter().zip(tails) {
            table.scanned.insert(f.id, t.end);
            let pack = Arc::new(PackFile {
                id: f.id,
                path: f.path,
                nonce: f.header.map(|h| h.nonce).unwrap_or(0),
                file: f.file,
            });
            if t.from < t.end {
                table.tail_bytes += t.end - t.from;
                table.dirty.push(pack.clone());
            }
            table.packs.insert(f.id, (pack, t.end, f.header.is_some()));
        }
        table
    }

    /// The pack to keep appending to: the newest, if its header is good
    /// and it has room.
    fn active(&self, pack_size_bytes: u64) -> Option<Active> {
        self.packs
            .values()
            .next_back()
            .filter(|(_, len, header_ok)| *header_ok && *len < pack_size_bytes)
            .map(|(p, len, _)| Active {
                pack: p.clone(),
                len: *len,
            })
    }
}

/// A persisted index is usable only if every pack it lists is still
/// there, is the same file (nonce), and is at least as long as the part it
/// covers.
fn covers_match(covers: &[PackCover], found: &[Found]) -> bool {
    covers.iter().all(|c| {
        found.iter().any(|f| {
            f.id == c.id && f.header.is_some_and(|h| h.nonce == c.nonce) && f.len >= c.covered_len
        })
    })
}

/// Stops using a persisted index found damaged after open (a bucket that
/// fails its checksum): rebuilds the index from every pack, keeping the
/// entries this process added, and marks the file for rewriting at close.
pub(super) fn rebuild_after_damage(store: &BlobStore) -> Result<()> {
    let mut index = store.index.write();
    if !index.has_base() {
        return Ok(());
    }
    let packs: Vec<Arc<PackFile>> = store.packs.read().values().cloned().collect();
    let mut fresh = Index::default();
    let mut lists = Vec::new();
    for p in packs {
        let len = p.file.len().map_err(io_err("size pack", &p.path))?;
        let scan = scan_pack(p.file.as_ref(), PACK_HEADER_LEN as u64, len)
            .map_err(io_err("scan pack", &p.path))?;
        add_scan(&mut fresh, &mut lists, p.id, &scan)?;
    }
    drop_incomplete_lists(&mut fresh, lists)?;
    index.replace_all(fresh.into_added());
    store.index_damaged.store(true, Ordering::Release);
    Ok(())
}

/// Read-only stores: picks up packs and entries the writer added since
/// open (or the last refresh). Stops at a partial entry (the writer may be
/// in the middle of it) and never changes a file.
pub(super) fn refresh(store: &BlobStore) -> Result<()> {
    let names = store
        .vfs
        .list(&store.dir)
        .map_err(io_err("list blob directory", &store.dir))?;
    let mut ids: Vec<PackId> = names
        .iter()
        .filter_map(|n| PackId::parse_file_name(n))
        .collect();
    ids.sort();
    let mut scanned = store.scanned.lock();
    let mut lists = Vec::new();
    let mut found = Vec::new();
    for id in ids {
        let known = store.packs.read().get(&id).cloned();
        let pack = match known {
            Some(p) => p,
            None => {
                let path = store.dir.join(id.file_name());
                let Ok(file) = store.vfs.open(&path, OpenMode::Read) else {
                    continue;
                };
                let mut hb = [0u8; PACK_HEADER_LEN];
                if file.read_exact_at(&mut hb, 0).is_err() {
                    continue;
                }
                let Ok(header) = PackHeader::decode(&hb) else {
                    continue;
                };
                let p = Arc::new(PackFile {
                    id,
                    path,
                    nonce: header.nonce,
                    file,
                });
                store.packs.write().insert(id, p.clone());
                p
            }
        };
        let from = scanned.get(&id).copied().unwrap_or(PACK_HEADER_LEN as u64);
        let len = pack.file.len().map_err(io_err("size pack", &pack.path))?;
        if len <= from {
            continue;
        }
        let scan =
            scan_pack(pack.file.as_ref(), from, len).map_err(io_err("scan pack", &pack.path))?;
        let end = scan.torn_at.unwrap_or(len);
        scanned.insert(id, end);
        found.push((id, scan));
    }
    let mut index = store.index.write();
    for (id, scan) in found {
        add_scan(&mut index, &mut lists, id, &scan)?;
    }
    drop_incomplete_lists(&mut index, lists)?;
    Ok(())
}
